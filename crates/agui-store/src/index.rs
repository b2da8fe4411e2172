//! The run index, maintained at append time: the one place that decides how
//! a batch of events changes a thread's runs, so that every backend indexes
//! alike.
//!
//! Rules (the lineage rules of `agui-history`):
//! - `RUN_STARTED` opens a run. Its parent is `parentRunId` when present,
//!   else the run before it in the log (`None` for the thread's first run).
//!   A `RUN_STARTED` without a string `runId`, reusing a run id of the
//!   thread, or naming a `parentRunId` that is not a run of the thread
//!   (the history core's `ParentNotFound` fault: never a silent new root)
//!   is `Invalid` and fails the whole batch.
//! - Every event belongs to the most recent run started before it (a run's
//!   events are `first_seq..=last_seq`, up to the next `RUN_STARTED`).
//!   Events before the thread's first `RUN_STARTED` belong to no run (the
//!   preamble, which every branch starts with).
//! - `RUN_FINISHED` ends the open run as `finished` (as `cancelled` when its
//!   `outcome.type` is `cancelled`), `RUN_ERROR` as `error` (as
//!   `interrupted` when its `code` is `interrupted`, the end a gateway
//!   writes for a run its stopped process left in flight).
//!   A run still `running` when the next run starts becomes `interrupted`.

use std::borrow::Cow;
use std::collections::HashMap;

use agui_protocol::{Event, EventType};
use serde::Deserialize;

use crate::error::{Result, StoreError};
use crate::types::{Durability, RunRecord, RunStatus, StoredEvent, Timestamp, check_id};

/// What a backend must know about a thread before appending to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadHead {
    /// Sequence number of the last event (0 when empty).
    pub last_seq: u64,
    /// Receive time of the last event (receive times never go backwards
    /// within a thread).
    pub updated_at: Option<Timestamp>,
    /// The last run of the log and its status, if any run started.
    pub last_run: Option<(String, RunStatus)>,
}

/// How one run changes with a batch. Backends insert the run when
/// `new` is set and otherwise update it: add the counters, set `last_seq`,
/// `status` and `finished_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunUpdate {
    /// The run.
    pub run_id: String,
    /// True when the run starts in this batch (insert it).
    pub new: bool,
    /// For a new run: its resolved parent.
    pub parent_run_id: Option<String>,
    /// For a new run: its agent.
    pub agent: Option<String>,
    /// For a new run: sequence number of its `RUN_STARTED`.
    pub first_seq: u64,
    /// For a new run: its start time.
    pub started_at: Timestamp,
    /// The run's last sequence number after the batch.
    pub last_seq: u64,
    /// Events of the batch that belong to the run.
    pub add_events: u64,
    /// Their JSON bytes.
    pub add_bytes: u64,
    /// Status after the batch.
    pub status: RunStatus,
    /// The end time when the run ended in this batch; `None` otherwise (keep
    /// the stored value).
    pub finished_at: Option<Timestamp>,
    /// True when the run left `running` in this batch (its checkpoint is due).
    pub ended: bool,
}

/// The effect of one batch on a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPlan {
    /// Sequence number of the batch's first event.
    pub first_seq: u64,
    /// The receive time of the batch.
    pub received_at: Timestamp,
    /// Runs touched, in the order they appear in the log.
    pub runs: Vec<RunUpdate>,
    /// The thread's head after the batch.
    pub head: ThreadHead,
    /// Total JSON bytes of the batch.
    pub bytes: u64,
}

impl BatchPlan {
    /// Sequence number of the batch's last event.
    pub fn last_seq(&self) -> u64 {
        self.head.last_seq
    }

    /// True when a run ended in this batch (durability `RunEnd` flushes).
    pub fn ends_a_run(&self) -> bool {
        self.runs.iter().any(|r| r.ended)
    }

    /// True when committing this batch under `durability` must reach stable
    /// storage before it is acknowledged.
    pub fn must_sync(&self, durability: Durability) -> bool {
        match durability {
            Durability::Append => true,
            Durability::RunEnd => self.ends_a_run(),
        }
    }

    /// The batch's events as stored: numbered from `first_seq`, received at
    /// `received_at` (what the engine publishes to its subscribers).
    pub fn stored(&self, events: Vec<Event>) -> Vec<StoredEvent> {
        events
            .into_iter()
            .zip(self.first_seq..)
            .map(|(event, seq)| StoredEvent {
                seq,
                received_at: self.received_at,
                event,
            })
            .collect()
    }
}

/// A thread's runs held in memory: in log order, and found by id. The run
/// table of the backends that keep their index in memory (the memory and
/// file backends, and `examples/minimal_backend.rs`); the SQL backends keep
/// the same records in a table.
#[derive(Debug, Clone, Default)]
pub struct RunTable {
    runs: Vec<RunRecord>,
    pos: HashMap<String, usize>,
    /// [`RunRecord::thread_instance`] of every run the table holds.
    instance: u64,
}

impl RunTable {
    /// An empty table.
    pub fn new() -> RunTable {
        RunTable::default()
    }

    /// An empty table for one instance of a thread, in a store that several
    /// engines share: its records carry `instance` as their
    /// [`RunRecord::thread_instance`].
    pub fn of_instance(instance: u64) -> RunTable {
        RunTable {
            instance,
            ..RunTable::default()
        }
    }

    /// How many runs the thread has.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// True when no run started.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// True when `run_id` is a run of the thread.
    pub fn contains(&self, run_id: &str) -> bool {
        self.pos.contains_key(run_id)
    }

    /// The run `run_id`; `NotFound` when absent.
    pub fn get(&self, run_id: &str) -> Result<&RunRecord> {
        let pos = self
            .pos
            .get(run_id)
            .ok_or_else(|| StoreError::not_found("run"))?;
        Ok(&self.runs[*pos])
    }

    /// The runs in log order.
    pub fn iter(&self) -> std::slice::Iter<'_, RunRecord> {
        self.runs.iter()
    }

    /// `Invalid` when a run the plan starts already is in the table: what a
    /// backend without a unique key on run ids checks before committing
    /// (see [`crate::Backend::commit`]).
    pub fn refuse_reused(&self, plan: &BatchPlan) -> Result<()> {
        match plan.runs.iter().find(|u| u.new && self.contains(&u.run_id)) {
            Some(u) => Err(StoreError::invalid(format!(
                "runId {:?} is already used in this thread",
                u.run_id
            ))),
            None => Ok(()),
        }
    }

    /// Applies a committed batch's run updates (of thread `thread`): new
    /// runs are appended; an update of a run not in the table is skipped.
    pub fn apply(&mut self, thread: &str, plan: &BatchPlan) {
        for u in &plan.runs {
            if u.new {
                self.pos.insert(u.run_id.clone(), self.runs.len());
                let mut record = u.new_record(thread);
                record.thread_instance = self.instance;
                self.runs.push(record);
            } else if let Some(&pos) = self.pos.get(&u.run_id) {
                u.apply_to(&mut self.runs[pos]);
            }
        }
    }

    /// Marks every running run interrupted at `at` (and the head's last run,
    /// when running); returns the runs marked, as they now stand, in log
    /// order.
    pub fn interrupt_running(&mut self, head: &mut ThreadHead, at: Timestamp) -> Vec<RunRecord> {
        let mut marked = Vec::new();
        for r in self
            .runs
            .iter_mut()
            .filter(|r| r.status == RunStatus::Running)
        {
            r.status = RunStatus::Interrupted;
            r.finished_at = Some(at);
            marked.push(r.clone());
        }
        if let Some((_, s)) = head
            .last_run
            .as_mut()
            .filter(|(_, s)| *s == RunStatus::Running)
        {
            *s = RunStatus::Interrupted;
        }
        marked
    }

    /// The thread was renamed to `to`.
    pub fn rename(&mut self, to: &str) {
        for r in &mut self.runs {
            r.thread_id = to.to_owned();
        }
    }
}

impl RunUpdate {
    /// The record of a run that starts in this batch (`new`), in `thread`.
    pub fn new_record(&self, thread: &str) -> RunRecord {
        RunRecord {
            thread_id: thread.to_owned(),
            run_id: self.run_id.clone(),
            parent_run_id: self.parent_run_id.clone(),
            agent: self.agent.clone(),
            status: self.status,
            started_at: self.started_at,
            finished_at: self.finished_at,
            first_seq: self.first_seq,
            last_seq: self.last_seq,
            event_count: self.add_events,
            bytes: self.add_bytes,
            thread_instance: 0,
        }
    }

    /// Updates the stored record of a run that started before this batch:
    /// adds the counters, sets `last_seq` and `status`, and `finished_at`
    /// when the run ended.
    pub fn apply_to(&self, run: &mut RunRecord) {
        run.last_seq = self.last_seq;
        run.event_count += self.add_events;
        run.bytes += self.add_bytes;
        run.status = self.status;
        if self.finished_at.is_some() {
            run.finished_at = self.finished_at;
        }
    }
}

#[derive(Deserialize)]
struct RunStartedView<'a> {
    #[serde(rename = "runId", borrow, default)]
    run_id: Option<Id<'a>>,
    #[serde(rename = "parentRunId", borrow, default)]
    parent_run_id: Option<Id<'a>>,
}

/// A string id, or any other JSON value (which is not an id).
#[derive(Deserialize)]
#[serde(untagged)]
enum Id<'a> {
    Str(#[serde(borrow)] Cow<'a, str>),
    Other(serde::de::IgnoredAny),
}

/// The `parentRunId`s the batch's `RUN_STARTED` events name that
/// [`plan_batch`] cannot settle without a lookup (string ones, each once):
/// neither `last_run` (the head's last run) nor a run the batch itself
/// starts. What the engine asks the backend about
/// ([`crate::Backend::known_runs`]) before planning; empty for almost every
/// batch, so the common case costs no lookup.
pub fn parents_to_look_up(events: &[Event], last_run: Option<&str>) -> Vec<String> {
    let mut started: Vec<Cow<'_, str>> = Vec::new();
    let mut out: Vec<String> = Vec::new();
    for e in events
        .iter()
        .filter(|e| *e.event_type() == EventType::RunStarted)
    {
        let Ok(view) = e.view::<RunStartedView<'_>>() else {
            continue;
        };
        if let Some(Id::Str(p)) = view.parent_run_id
            && last_run != Some(&*p)
            && !started.contains(&p)
            && !out.iter().any(|o| *o == *p)
        {
            out.push(p.into_owned());
        }
        if let Some(Id::Str(id)) = view.run_id {
            started.push(id);
        }
    }
    out
}

/// Plans a batch: checks it, assigns sequence numbers and the receive time,
/// and computes the run updates.
///
/// `now` is the caller's clock; the receive time is `max(now, head.updated_at)`
/// so times never go backwards within a thread. `run_exists` answers whether
/// a run id is already used in the thread (the batch's own runs and the
/// head's last run are checked here): a new run's id must not be, a
/// `parentRunId` must be. A caller that cannot look every id up may answer
/// `false` for new run ids and leave the reuse to the commit to refuse (as
/// the engine does, see [`crate::Backend::commit`]).
pub fn plan_batch(
    head: &ThreadHead,
    events: &[Event],
    agent: Option<&str>,
    now: Timestamp,
    mut run_exists: impl FnMut(&str) -> Result<bool>,
) -> Result<BatchPlan> {
    if events.is_empty() {
        return Err(StoreError::invalid("an append needs at least one event"));
    }
    let received_at = match head.updated_at {
        Some(t) if t > now => t,
        _ => now,
    };
    let first_seq = head.last_seq + 1;
    let mut runs: Vec<RunUpdate> = Vec::new();
    // The run events are attributed to: index into `runs`, or the thread's
    // existing last run (not yet in `runs`).
    let mut current: Option<(String, RunStatus)> = head.last_run.clone();
    let mut bytes = 0u64;
    for (i, event) in events.iter().enumerate() {
        let seq = first_seq + i as u64;
        let len = event.len_bytes() as u64;
        bytes += len;
        match event.event_type() {
            EventType::RunStarted => {
                let view: RunStartedView = event.view().map_err(|_| {
                    StoreError::invalid(format!("event {i} (RUN_STARTED) is not readable"))
                })?;
                let run_id = match view.run_id {
                    Some(Id::Str(s)) => s.into_owned(),
                    _ => {
                        return Err(StoreError::invalid(format!(
                            "event {i}: RUN_STARTED needs a string runId"
                        )));
                    }
                };
                check_id("run", &run_id)?;
                if runs.iter().any(|r| r.run_id == run_id)
                    || current.as_ref().is_some_and(|(id, _)| *id == run_id)
                    || run_exists(&run_id)?
                {
                    return Err(StoreError::invalid(format!(
                        "event {i}: runId is already used in this thread"
                    )));
                }
                // The previous run, if still running, is interrupted.
                if let Some((prev, RunStatus::Running)) = &current {
                    let upd = update_for(&mut runs, prev, seq, RunStatus::Running);
                    upd.status = RunStatus::Interrupted;
                    upd.finished_at = Some(received_at);
                    upd.ended = true;
                }
                let parent = match view.parent_run_id {
                    Some(Id::Str(p)) => {
                        // The history core's rule: a parent names a run of
                        // this thread (an earlier batch or this one), never
                        // a run elsewhere or none, which would silently
                        // start a new root.
                        let known = runs.iter().any(|r| r.new && r.run_id == *p)
                            || head.last_run.as_ref().is_some_and(|(id, _)| *id == *p)
                            || run_exists(&p)?;
                        if !known {
                            return Err(StoreError::invalid(format!(
                                "event {i}: RUN_STARTED parentRunId {p:?} is not a run of this thread"
                            )));
                        }
                        Some(p.into_owned())
                    }
                    Some(Id::Other(_)) => {
                        return Err(StoreError::invalid(format!(
                            "event {i}: RUN_STARTED parentRunId must be a string"
                        )));
                    }
                    None => current.as_ref().map(|(id, _)| id.clone()),
                };
                runs.push(RunUpdate {
                    run_id: run_id.clone(),
                    new: true,
                    parent_run_id: parent,
                    agent: agent.map(str::to_owned),
                    first_seq: seq,
                    started_at: received_at,
                    last_seq: seq,
                    add_events: 1,
                    add_bytes: len,
                    status: RunStatus::Running,
                    finished_at: None,
                    ended: false,
                });
                current = Some((run_id, RunStatus::Running));
            }
            ty => {
                let Some((run_id, status)) = current.as_mut() else {
                    continue; // preamble
                };
                let upd = update_for(&mut runs, run_id, seq, *status);
                upd.add_events += 1;
                upd.add_bytes += len;
                upd.last_seq = seq;
                if *status == RunStatus::Running {
                    let ended = match ty {
                        EventType::RunFinished if is_cancelled(event) => Some(RunStatus::Cancelled),
                        EventType::RunFinished => Some(RunStatus::Finished),
                        EventType::RunError if is_interrupted(event) => {
                            Some(RunStatus::Interrupted)
                        }
                        EventType::RunError => Some(RunStatus::Error),
                        _ => None,
                    };
                    if let Some(s) = ended {
                        upd.status = s;
                        upd.finished_at = Some(received_at);
                        upd.ended = true;
                        *status = s;
                    }
                }
            }
        }
    }
    // Record the final status of runs that continued from before the batch.
    let last_run = current.map(|(id, _)| {
        let status = runs
            .iter()
            .find(|r| r.run_id == id)
            .map(|r| r.status)
            .or_else(|| head.last_run.as_ref().map(|(_, s)| *s))
            .unwrap_or(RunStatus::Running);
        (id, status)
    });
    Ok(BatchPlan {
        first_seq,
        received_at,
        runs,
        head: ThreadHead {
            last_seq: head.last_seq + events.len() as u64,
            updated_at: Some(received_at),
            last_run,
        },
        bytes,
    })
}

#[derive(Deserialize)]
struct FinishedView<'a> {
    #[serde(borrow, default)]
    outcome: Option<OutcomeView<'a>>,
}

#[derive(Deserialize)]
struct OutcomeView<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ErrorView<'a> {
    #[serde(borrow, default)]
    code: Option<Cow<'a, str>>,
}

/// True for a `RUN_ERROR` whose `code` is `interrupted`: the end a gateway
/// writes for a run it found interrupted (its process stopped while the
/// run was in flight), so a log read again (a file store opened, a copy, a
/// run set aside joining its thread) indexes the run as the store did.
fn is_interrupted(event: &Event) -> bool {
    event.json().contains("interrupted")
        && event
            .view::<ErrorView>()
            .ok()
            .and_then(|v| v.code)
            .is_some_and(|c| c == "interrupted")
}

/// True for a `RUN_FINISHED` whose `outcome.type` is `cancelled`: the
/// run index's rule, which the gateway's metrics follow too.
pub fn is_cancelled(event: &Event) -> bool {
    // Cheap pre-check: most runs finish without that word anywhere.
    if !event.json().contains("cancelled") {
        return false;
    }
    event
        .view::<FinishedView>()
        .ok()
        .and_then(|v| v.outcome)
        .and_then(|o| o.ty)
        .is_some_and(|t| t == "cancelled")
}

/// The update of an existing run (created on first touch, with counters at
/// zero and its current `status`).
fn update_for<'a>(
    runs: &'a mut Vec<RunUpdate>,
    run_id: &str,
    seq: u64,
    status: RunStatus,
) -> &'a mut RunUpdate {
    if let Some(pos) = runs.iter().position(|r| r.run_id == run_id) {
        return &mut runs[pos];
    }
    runs.push(RunUpdate {
        run_id: run_id.to_owned(),
        new: false,
        parent_run_id: None,
        agent: None,
        first_seq: 0,
        started_at: Timestamp(0),
        last_seq: seq.saturating_sub(1),
        add_events: 0,
        add_bytes: 0,
        status,
        finished_at: None,
        ended: false,
    });
    let last = runs.len() - 1;
    &mut runs[last]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(text: &str) -> Event {
        Event::from_json(text).unwrap()
    }

    fn none(_: &str) -> Result<bool> {
        Ok(false)
    }

    #[test]
    fn a_cancelled_outcome_ends_the_run_as_cancelled() {
        let events = vec![
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"a"}"#),
            ev(
                r#"{"type":"RUN_FINISHED","threadId":"t","runId":"a","outcome":{"type":"cancelled"}}"#,
            ),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"b"}"#),
            ev(r#"{"type":"RUN_FINISHED","threadId":"t","runId":"b","result":"cancelled"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"c"}"#),
            ev(
                r#"{"type":"RUN_FINISHED","threadId":"t","runId":"c","outcome":{"type":"success"}}"#,
            ),
        ];
        let p = plan_batch(&ThreadHead::default(), &events, None, Timestamp(5), none).unwrap();
        let status: Vec<_> = p.runs.iter().map(|r| r.status).collect();
        assert_eq!(
            status,
            [
                RunStatus::Cancelled,
                RunStatus::Finished,
                RunStatus::Finished
            ]
        );
        assert!(p.runs.iter().all(|r| r.ended));
    }

    #[test]
    fn an_interrupted_code_ends_the_run_as_interrupted() {
        let events = vec![
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"a"}"#),
            ev(r#"{"type":"RUN_ERROR","message":"gone","code":"interrupted"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"b"}"#),
            ev(r#"{"type":"RUN_ERROR","message":"interrupted","code":"upstream_error"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"c"}"#),
            ev(r#"{"type":"RUN_ERROR","message":"x","code":"interrupted_by_user"}"#),
        ];
        let p = plan_batch(&ThreadHead::default(), &events, None, Timestamp(5), none).unwrap();
        let status: Vec<_> = p.runs.iter().map(|r| r.status).collect();
        assert_eq!(
            status,
            [RunStatus::Interrupted, RunStatus::Error, RunStatus::Error]
        );
        assert!(p.runs.iter().all(|r| r.ended && r.finished_at.is_some()));
    }

    #[test]
    fn runs_open_end_and_chain() {
        let events = vec![
            ev(r#"{"type":"CUSTOM","name":"pre","value":1}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"a"}"#),
            ev(r#"{"type":"RUN_FINISHED","threadId":"t","runId":"a"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"b"}"#),
            ev(r#"{"type":"RUN_ERROR","message":"x"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"c","parentRunId":"a"}"#),
        ];
        let p = plan_batch(
            &ThreadHead::default(),
            &events,
            Some("ag"),
            Timestamp(5),
            none,
        )
        .unwrap();
        assert_eq!(p.first_seq, 1);
        assert_eq!(p.last_seq(), 6);
        let ids: Vec<_> = p.runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(p.runs[0].status, RunStatus::Finished);
        assert_eq!((p.runs[0].first_seq, p.runs[0].last_seq), (2, 3));
        assert_eq!(p.runs[0].parent_run_id, None);
        assert_eq!(p.runs[1].status, RunStatus::Error);
        assert_eq!(p.runs[1].parent_run_id.as_deref(), Some("a"));
        assert_eq!(p.runs[2].parent_run_id.as_deref(), Some("a"));
        assert_eq!(p.runs[2].status, RunStatus::Running);
        assert!(p.runs[0].ended && p.runs[1].ended && !p.runs[2].ended);
        assert_eq!(p.head.last_run, Some(("c".into(), RunStatus::Running)));
        let total: u64 = p.runs.iter().map(|r| r.add_events).sum();
        assert_eq!(total, 5, "the preamble belongs to no run");
    }

    #[test]
    fn a_run_continues_across_batches_and_is_interrupted_by_the_next() {
        let head = ThreadHead {
            last_seq: 4,
            updated_at: Some(Timestamp(100)),
            last_run: Some(("a".into(), RunStatus::Running)),
        };
        let events = vec![
            ev(r#"{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"b"}"#),
        ];
        let p = plan_batch(&head, &events, None, Timestamp(50), none).unwrap();
        assert_eq!(p.received_at, Timestamp(100), "time never goes backwards");
        assert_eq!(p.runs[0].run_id, "a");
        assert!(!p.runs[0].new);
        assert_eq!(p.runs[0].status, RunStatus::Interrupted);
        assert_eq!(p.runs[0].last_seq, 5);
        assert_eq!(p.runs[0].add_events, 1);
        assert_eq!(p.runs[1].parent_run_id.as_deref(), Some("a"));
        assert_eq!(p.runs[1].first_seq, 6);
    }

    /// Only parents that are neither the head's last run nor started in
    /// the batch are looked up, each once; a new run id never is, and the
    /// commit refuses a reused one.
    #[test]
    fn only_parents_planning_cannot_settle_are_looked_up() {
        let events = [
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"a","parentRunId":"last"}"#),
            ev(r#"{"type":"RUN_FINISHED","threadId":"t","runId":"a"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"b","parentRunId":"a"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"c","parentRunId":"old"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"d","parentRunId":"old"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"e","parentRunId":7}"#),
        ];
        assert_eq!(parents_to_look_up(&events, Some("last")), vec!["old"]);
        assert_eq!(parents_to_look_up(&events, None), vec!["last", "old"]);
        let plain = [ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"x"}"#)];
        assert!(parents_to_look_up(&plain, Some("last")).is_empty());

        let head = ThreadHead::default();
        let plan = plan_batch(&head, &plain, None, Timestamp(1), none).unwrap();
        let mut table = RunTable::new();
        let y = [ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"y"}"#)];
        table.apply(
            "t",
            &plan_batch(&head, &y, None, Timestamp(1), none).unwrap(),
        );
        assert!(table.refuse_reused(&plan).is_ok());
        table.apply("t", &plan);
        let err = table.refuse_reused(&plan).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Invalid);
    }

    #[test]
    fn bad_run_starts_are_invalid() {
        let head = ThreadHead::default();
        for bad in [
            r#"{"type":"RUN_STARTED","threadId":"t"}"#,
            r#"{"type":"RUN_STARTED","threadId":"t","runId":7}"#,
            r#"{"type":"RUN_STARTED","threadId":"t","runId":""}"#,
        ] {
            let e = plan_batch(&head, &[ev(bad)], None, Timestamp(1), none).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Invalid, "{bad}");
        }
        let dup = [
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"a"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"a"}"#),
        ];
        assert!(plan_batch(&head, &dup, None, Timestamp(1), none).is_err());
        let known = |id: &str| Ok(id == "old");
        let reuse = [ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"old"}"#)];
        assert!(plan_batch(&head, &reuse, None, Timestamp(1), known).is_err());
        assert!(plan_batch(&head, &[], None, Timestamp(1), none).is_err());
    }

    #[test]
    fn terminal_events_after_the_end_do_not_change_status() {
        let head = ThreadHead {
            last_seq: 2,
            updated_at: Some(Timestamp(1)),
            last_run: Some(("a".into(), RunStatus::Finished)),
        };
        let events = [ev(r#"{"type":"RUN_ERROR","message":"late"}"#)];
        let p = plan_batch(&head, &events, None, Timestamp(2), none).unwrap();
        assert_eq!(p.runs[0].add_events, 1);
        assert!(!p.runs[0].ended);
        assert_eq!(p.runs[0].status, RunStatus::Finished);
        assert_eq!(p.head.last_run, Some(("a".into(), RunStatus::Finished)));
    }
}
