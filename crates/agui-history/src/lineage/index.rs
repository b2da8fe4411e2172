//! The run index: one [`RunNode`] per run of a log, their parents, and the
//! tree queries (paths, leaves, branches, divergence).

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

use agui_protocol::{Event, EventType};
use serde::Serialize;

use super::view::{self, RunStart, Timestamp};
use super::{LineageError, LineageFault};

/// How a run ended, as far as the log tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// No terminal event yet, and it is the last run of the log.
    Running,
    /// `RUN_FINISHED` with no outcome or a `success` outcome.
    Finished,
    /// `RUN_FINISHED` with an `interrupt` outcome: waiting for a resume.
    Interrupted,
    /// `RUN_FINISHED` with a `cancelled` outcome.
    Cancelled,
    /// `RUN_ERROR`.
    Error,
    /// No terminal event, and another run started after it: cut off.
    Abandoned,
}

impl RunStatus {
    /// The lowercase name used in the tree listing and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Error => "error",
            RunStatus::Abandoned => "abandoned",
        }
    }

    /// True when the run ended with `RUN_FINISHED` or `RUN_ERROR`.
    pub fn is_terminated(self) -> bool {
        !matches!(self, RunStatus::Running | RunStatus::Abandoned)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One run of a log.
///
/// A run's *segment* is every event from its `RUN_STARTED` up to the next
/// `RUN_STARTED` of the log (or the end): its own events up to its terminal,
/// then any events outside every run that follow it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunNode {
    /// `runId`.
    pub run_id: String,
    /// `threadId`.
    pub thread_id: String,
    /// The parent run: `parentRunId` when given, otherwise the previous run
    /// of the same thread in the log; `None` for a root.
    pub parent_run_id: Option<String>,
    /// True when the parent came from `parentRunId`.
    pub explicit_parent: bool,
    /// How the run ended.
    pub status: RunStatus,
    /// Log index of the run's `RUN_STARTED`.
    pub first_event: usize,
    /// Log index of its `RUN_FINISHED` / `RUN_ERROR`, if any.
    pub terminal_event: Option<usize>,
    /// Number of events in the run's segment (its `RUN_STARTED` included).
    pub event_count: usize,
    /// The first integer `timestamp` among the run's events (epoch ms).
    /// Serialized as RFC 3339 UTC with milliseconds, like every time agui
    /// writes (`null` when absent or outside years 0000-9999).
    #[serde(serialize_with = "rfc3339_ms")]
    pub started_at: Option<i64>,
    /// For a terminated run: the terminal's `timestamp`, or else the last
    /// integer `timestamp` among the run's events between its `RUN_STARTED`
    /// (excluded) and its terminal. Serialized as `started_at` is.
    #[serde(serialize_with = "rfc3339_ms")]
    pub finished_at: Option<i64>,
}

/// Epoch milliseconds as RFC 3339 text (`2026-01-01T10:00:00.010Z`).
fn rfc3339_ms<S: serde::Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match ms.and_then(|ms| crate::artifact::time::format_rfc3339(ms).ok()) {
        Some(text) => s.serialize_str(&text),
        None => s.serialize_none(),
    }
}

impl RunNode {
    /// Log indices of the run's segment.
    pub fn segment(&self) -> Range<usize> {
        self.first_event..self.first_event + self.event_count
    }

    /// Log index of the run's last own event: its terminal, or the end of
    /// its segment when it has none.
    pub fn last_event(&self) -> usize {
        self.terminal_event
            .unwrap_or(self.first_event + self.event_count - 1)
    }
}

/// The runs of a log and their lineage. Build it at once from a whole log
/// with [`RunIndex::build`], or one event at a time with [`RunIndex::push`].
#[derive(Debug, Clone, Default)]
pub struct RunIndex {
    runs: Vec<RunNode>,
    /// Index in `runs` of the first run with each id.
    by_id: HashMap<String, usize>,
    /// Index in `runs` of the latest run of each thread.
    last_of_thread: HashMap<String, usize>,
    /// Runs whose resolved parent is each run, in log order.
    children: Vec<Vec<usize>>,
    /// Index in `runs` of each run's resolved parent.
    parents: Vec<Option<usize>>,
    preamble: usize,
    len: usize,
    /// Last integer timestamp seen in the open part of the last run.
    last_timestamp: Option<i64>,
}

/// When a `parentRunId` is checked.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resolve {
    /// Now: the parent must already be indexed.
    Now,
    /// After the whole log is read (forward references allowed).
    Later,
}

impl RunIndex {
    /// An empty index, for [`RunIndex::push`].
    pub fn new() -> RunIndex {
        RunIndex::default()
    }

    /// Indexes a whole log. Every lineage fault is reported, in log order,
    /// as [`LineageError::Faults`].
    ///
    /// Unlike [`RunIndex::push`], a `parentRunId` may name a run that starts
    /// later in the log, as long as no cycle results.
    pub fn build(events: &[Event]) -> Result<RunIndex, LineageError> {
        let mut index = RunIndex::new();
        let mut claims: Vec<Option<String>> = Vec::new();
        for event in events {
            if let Some(claim) = index.push_with(event, Resolve::Later)? {
                claims.push(claim);
            }
        }
        index.resolve_claims(claims)?;
        Ok(index)
    }

    /// Indexes one more event of the log (the store's incremental path).
    ///
    /// A `RUN_STARTED` is checked at once: its `parentRunId` must name a run
    /// already indexed, in the same thread, and its `runId` must be new. On
    /// error the index is left unchanged. A log that can be pushed event by
    /// event gives the same index as [`RunIndex::build`].
    pub fn push(&mut self, event: &Event) -> Result<(), LineageError> {
        self.push_with(event, Resolve::Now).map(|_| ())
    }

    /// Resolves the parent of a run about to start, against the runs already
    /// indexed, without changing the index. Returns the parent's run id
    /// (`None` for a root) and whether it was explicit.
    pub fn resolve_parent(
        &self,
        start: &RunStart,
        event_index: usize,
    ) -> Result<(Option<String>, bool), LineageFault> {
        if let Some(&first) = self.by_id.get(&start.run_id) {
            return Err(LineageFault::DuplicateRunId {
                run_id: start.run_id.clone(),
                first_event: self.runs[first].first_event,
                event_index,
            });
        }
        match &start.parent_run_id {
            Some(parent) if *parent == start.run_id => Err(LineageFault::Cycle {
                run_ids: vec![start.run_id.clone()],
                event_index,
            }),
            Some(parent) => match self.by_id.get(parent) {
                None => Err(LineageFault::ParentNotFound {
                    run_id: start.run_id.clone(),
                    parent_run_id: parent.clone(),
                    event_index,
                }),
                Some(&p) if self.runs[p].thread_id != start.thread_id => {
                    Err(LineageFault::ParentInOtherThread {
                        run_id: start.run_id.clone(),
                        thread_id: start.thread_id.clone(),
                        parent_run_id: parent.clone(),
                        parent_thread_id: self.runs[p].thread_id.clone(),
                        event_index,
                    })
                }
                Some(_) => Ok((Some(parent.clone()), true)),
            },
            None => Ok((
                self.last_of_thread
                    .get(&start.thread_id)
                    .map(|&p| self.runs[p].run_id.clone()),
                false,
            )),
        }
    }

    /// Returns `Some(claimed parentRunId)` when the event started a run.
    fn push_with(
        &mut self,
        event: &Event,
        resolve: Resolve,
    ) -> Result<Option<Option<String>>, LineageError> {
        let event_index = self.len;
        if *event.event_type() != EventType::RunStarted {
            self.len += 1;
            let ts = view::timestamp(event);
            let terminal = event.event_type().is_run_terminal();
            let Some(run) = self.runs.last_mut() else {
                self.preamble += 1;
                return Ok(None);
            };
            run.event_count += 1;
            if run.terminal_event.is_some() {
                return Ok(None);
            }
            if let Timestamp::Millis(ms) = ts {
                run.started_at.get_or_insert(ms);
                self.last_timestamp = Some(ms);
            }
            if terminal {
                run.terminal_event = Some(event_index);
                run.status = match event.event_type() {
                    EventType::RunError => RunStatus::Error,
                    _ => match view::outcome_type(event).as_deref() {
                        Some("interrupt") => RunStatus::Interrupted,
                        Some("cancelled") => RunStatus::Cancelled,
                        _ => RunStatus::Finished,
                    },
                };
                run.finished_at = match ts {
                    Timestamp::Millis(ms) => Some(ms),
                    _ => self.last_timestamp,
                };
            }
            return Ok(None);
        }

        let start = view::run_start(event).map_err(|reason| LineageError::MalformedRunStarted {
            event_index,
            reason,
        })?;
        let (parent, explicit, claim) = match resolve {
            Resolve::Now => {
                let (parent, explicit) = self
                    .resolve_parent(&start, event_index)
                    .map_err(|f| LineageError::Faults(vec![f]))?;
                (parent, explicit, None)
            }
            Resolve::Later => match &start.parent_run_id {
                Some(p) => (None, true, Some(p.clone())),
                None => (
                    self.last_of_thread
                        .get(&start.thread_id)
                        .map(|&p| self.runs[p].run_id.clone()),
                    false,
                    None,
                ),
            },
        };

        self.len += 1;
        if let Some(previous) = self
            .runs
            .last_mut()
            .filter(|r| r.status == RunStatus::Running)
        {
            previous.status = RunStatus::Abandoned;
        }
        let position = self.runs.len();
        let started_at = match view::timestamp(event) {
            Timestamp::Millis(ms) => Some(ms),
            _ => None,
        };
        self.last_timestamp = None;
        let parent_position = if explicit {
            parent.as_ref().and_then(|p| self.by_id.get(p).copied())
        } else {
            self.last_of_thread.get(&start.thread_id).copied()
        };
        self.by_id.entry(start.run_id.clone()).or_insert(position);
        self.last_of_thread
            .insert(start.thread_id.clone(), position);
        self.parents.push(parent_position);
        self.children.push(Vec::new());
        if let Some(p) = parent_position {
            self.children[p].push(position);
        }
        self.runs.push(RunNode {
            run_id: start.run_id,
            thread_id: start.thread_id,
            parent_run_id: parent,
            explicit_parent: explicit,
            status: RunStatus::Running,
            first_event: event_index,
            terminal_event: None,
            event_count: 1,
            started_at,
            finished_at: None,
        });
        Ok(Some(claim))
    }

    /// Resolves the explicit parents deferred by [`RunIndex::build`] and
    /// checks the whole tree.
    fn resolve_claims(&mut self, claims: Vec<Option<String>>) -> Result<(), LineageError> {
        let mut faults = Vec::new();
        // Duplicates first: they decide what a parent id means.
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for run in &self.runs {
            if let Some(&first) = seen.get(run.run_id.as_str()) {
                faults.push(LineageFault::DuplicateRunId {
                    run_id: run.run_id.clone(),
                    first_event: first,
                    event_index: run.first_event,
                });
            } else {
                seen.insert(&run.run_id, run.first_event);
            }
        }
        for (position, claim) in claims.into_iter().enumerate() {
            let Some(parent) = claim else { continue };
            let run = &self.runs[position];
            match self.by_id.get(&parent) {
                None => faults.push(LineageFault::ParentNotFound {
                    run_id: run.run_id.clone(),
                    parent_run_id: parent,
                    event_index: run.first_event,
                }),
                Some(&p) if self.runs[p].thread_id != run.thread_id => {
                    faults.push(LineageFault::ParentInOtherThread {
                        run_id: run.run_id.clone(),
                        thread_id: run.thread_id.clone(),
                        parent_run_id: parent,
                        parent_thread_id: self.runs[p].thread_id.clone(),
                        event_index: run.first_event,
                    })
                }
                Some(&p) => {
                    self.parents[position] = Some(p);
                    self.children[p].push(position);
                    self.runs[position].parent_run_id = Some(parent);
                }
            }
        }
        for children in &mut self.children {
            children.sort_unstable();
        }
        faults.extend(self.cycles());
        faults.sort_by_key(LineageFault::event_index);
        if faults.is_empty() {
            Ok(())
        } else {
            Err(LineageError::Faults(faults))
        }
    }

    /// Every cycle of parent links, each once, starting from its earliest run.
    fn cycles(&self) -> Vec<LineageFault> {
        const NEW: u8 = 0;
        const ON_STACK: u8 = 1;
        const DONE: u8 = 2;
        let mut mark = vec![NEW; self.runs.len()];
        let mut found = Vec::new();
        for start in 0..self.runs.len() {
            let mut stack = Vec::new();
            let mut at = Some(start);
            while let Some(i) = at {
                match mark[i] {
                    DONE => break,
                    ON_STACK => {
                        let from = stack.iter().position(|&s| s == i).unwrap_or(0);
                        let mut cycle: Vec<usize> = stack[from..].to_vec();
                        let min = (0..cycle.len()).min_by_key(|&k| cycle[k]).unwrap_or(0);
                        cycle.rotate_left(min);
                        found.push(LineageFault::Cycle {
                            run_ids: cycle.iter().map(|&k| self.runs[k].run_id.clone()).collect(),
                            event_index: self.runs[cycle[0]].first_event,
                        });
                        break;
                    }
                    _ => {
                        mark[i] = ON_STACK;
                        stack.push(i);
                        at = self.parents[i];
                    }
                }
            }
            for i in stack {
                mark[i] = DONE;
            }
        }
        found
    }

    /// Every run, in log order.
    pub fn runs(&self) -> &[RunNode] {
        &self.runs
    }

    /// The run with this id (the first one, should the id repeat).
    pub fn get(&self, run_id: &str) -> Option<&RunNode> {
        self.by_id.get(run_id).map(|&i| &self.runs[i])
    }

    fn position(&self, run_id: &str) -> Result<usize, LineageError> {
        self.by_id
            .get(run_id)
            .copied()
            .ok_or_else(|| LineageError::UnknownRun {
                run_id: run_id.to_owned(),
            })
    }

    /// Log indices of the events before the first `RUN_STARTED`.
    pub fn preamble(&self) -> Range<usize> {
        0..self.preamble
    }

    /// Number of events indexed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no event was indexed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The thread ids, in order of first appearance.
    pub fn threads(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for run in &self.runs {
            if !out.contains(&run.thread_id.as_str()) {
                out.push(&run.thread_id);
            }
        }
        out
    }

    /// The runs whose parent is `run_id`, in log order.
    pub fn children(&self, run_id: &str) -> Result<Vec<&RunNode>, LineageError> {
        let p = self.position(run_id)?;
        Ok(self.children[p].iter().map(|&c| &self.runs[c]).collect())
    }

    /// The roots (runs without a parent), in log order.
    pub fn roots(&self) -> impl Iterator<Item = &RunNode> {
        self.runs
            .iter()
            .zip(&self.parents)
            .filter(|(_, p)| p.is_none())
            .map(|(r, _)| r)
    }

    /// The runs from the root to `run_id`, both included.
    pub fn branch_path(&self, run_id: &str) -> Result<Vec<&RunNode>, LineageError> {
        Ok(self
            .path_positions(run_id)?
            .into_iter()
            .map(|i| &self.runs[i])
            .collect())
    }

    pub(crate) fn path_positions(&self, run_id: &str) -> Result<Vec<usize>, LineageError> {
        let mut at = Some(self.position(run_id)?);
        let mut path = Vec::new();
        while let Some(i) = at {
            if path.len() > self.runs.len() {
                // Only an index built from a faulty log can loop; report it.
                return Err(LineageError::Faults(self.cycles()));
            }
            path.push(i);
            at = self.parents[i];
        }
        path.reverse();
        Ok(path)
    }

    /// The runs no other run continues, in log order: the tips of branches.
    pub fn leaves(&self) -> Vec<&RunNode> {
        self.runs
            .iter()
            .zip(&self.children)
            .filter(|(_, c)| c.is_empty())
            .map(|(r, _)| r)
            .collect()
    }

    /// Every branch (root-to-leaf path), one per leaf, in leaf log order.
    pub fn branches(&self) -> Result<Vec<Vec<&RunNode>>, LineageError> {
        self.leaves()
            .into_iter()
            .map(|leaf| self.branch_path(&leaf.run_id))
            .collect()
    }

    /// Where the branches ending at `a` and `b` part.
    pub fn divergence(&self, a: &str, b: &str) -> Result<Divergence<'_>, LineageError> {
        let pa = self.branch_path(a)?;
        let pb = self.branch_path(b)?;
        let shared = pa
            .iter()
            .zip(&pb)
            .take_while(|(x, y)| x.run_id == y.run_id)
            .count();
        Ok(Divergence {
            fork: shared.checked_sub(1).map(|k| pa[k]),
            first_a: pa.get(shared).copied(),
            first_b: pb.get(shared).copied(),
        })
    }

    /// Runs in depth-first order (parents before children, siblings in log
    /// order), with their depth: the order of the tree listing.
    pub fn depth_first(&self) -> Vec<(usize, &RunNode)> {
        let mut out = Vec::with_capacity(self.runs.len());
        let mut stack: Vec<(usize, usize)> = Vec::new();
        for (root, _) in self.parents.iter().enumerate().filter(|(_, p)| p.is_none()) {
            stack.push((root, 0));
            while let Some((i, depth)) = stack.pop() {
                out.push((depth, &self.runs[i]));
                for &c in self.children[i].iter().rev() {
                    stack.push((c, depth + 1));
                }
            }
        }
        out
    }
}

/// Where two branches part (see [`RunIndex::divergence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Divergence<'a> {
    /// The last run both branches share; `None` when they share no run.
    pub fork: Option<&'a RunNode>,
    /// The first run only on the first branch; `None` when the first branch
    /// ends at the fork (it is an ancestor of, or equal to, the second).
    pub first_a: Option<&'a RunNode>,
    /// The first run only on the second branch, likewise.
    pub first_b: Option<&'a RunNode>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_times_serialize_as_rfc3339_with_milliseconds() {
        let mut v = serde_json::json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"});
        v["timestamp"] = 1_767_261_600_010i64.into();
        let events = [
            Event::from_serialize(&v).unwrap(),
            Event::from_json(
                r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r","timestamp":1767261601234}"#,
            )
            .unwrap(),
            started("t", "s", None),
        ];
        let index = RunIndex::build(&events).unwrap();
        let json = serde_json::to_value(&index.runs()[0]).unwrap();
        assert_eq!(json["startedAt"], "2026-01-01T10:00:00.010Z");
        assert_eq!(json["finishedAt"], "2026-01-01T10:00:01.234Z");
        let json = serde_json::to_value(&index.runs()[1]).unwrap();
        assert_eq!(json["startedAt"], serde_json::Value::Null);
        assert_eq!(json["finishedAt"], serde_json::Value::Null);
    }

    fn started(thread: &str, run: &str, parent: Option<&str>) -> Event {
        let mut v = serde_json::json!({"type": "RUN_STARTED", "threadId": thread, "runId": run});
        if let Some(p) = parent {
            v["parentRunId"] = p.into();
        }
        Event::from_serialize(&v).unwrap()
    }

    fn ev(text: &str) -> Event {
        Event::from_json(text).unwrap()
    }

    fn finished() -> Event {
        ev(r#"{"type":"RUN_FINISHED","threadId":"t","runId":"x"}"#)
    }

    /// r1 ─ r2 ─ r3, and r4 forks from r1; r5 continues r4 implicitly.
    fn forked() -> Vec<Event> {
        vec![
            ev(r#"{"type":"CUSTOM","name":"pre","value":1}"#),
            started("t", "r1", None),
            ev(r#"{"type":"STEP_STARTED","stepName":"s","timestamp":1000}"#),
            ev(r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r1","timestamp":2000}"#),
            ev(r#"{"type":"CUSTOM","name":"between","value":1}"#),
            started("t", "r2", None),
            ev(r#"{"type":"RUN_ERROR","message":"boom"}"#),
            started("t", "r3", Some("r2")),
            ev(
                r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r3","outcome":{"type":"interrupt","interrupts":[{"id":"i"}]}}"#,
            ),
            started("t", "r4", Some("r1")),
            ev(r#"{"type":"STEP_STARTED","stepName":"s"}"#),
            started("t", "r5", None),
        ]
    }

    fn ids<'a>(runs: impl IntoIterator<Item = &'a RunNode>) -> Vec<&'a str> {
        runs.into_iter().map(|r| r.run_id.as_str()).collect()
    }

    #[test]
    fn builds_the_tree_with_segments_statuses_and_times() {
        let index = RunIndex::build(&forked()).unwrap();
        assert_eq!(index.preamble(), 0..1);
        let r1 = index.get("r1").unwrap();
        assert_eq!(
            (r1.first_event, r1.event_count, r1.terminal_event),
            (1, 4, Some(3))
        );
        assert_eq!((r1.started_at, r1.finished_at), (Some(1000), Some(2000)));
        assert_eq!(r1.status, RunStatus::Finished);
        assert_eq!(index.get("r2").unwrap().status, RunStatus::Error);
        assert_eq!(
            index.get("r2").unwrap().parent_run_id.as_deref(),
            Some("r1")
        );
        assert!(!index.get("r2").unwrap().explicit_parent);
        assert_eq!(index.get("r3").unwrap().status, RunStatus::Interrupted);
        assert!(index.get("r3").unwrap().explicit_parent);
        assert_eq!(index.get("r4").unwrap().status, RunStatus::Abandoned);
        let r5 = index.get("r5").unwrap();
        assert_eq!(r5.status, RunStatus::Running);
        assert_eq!(
            r5.parent_run_id.as_deref(),
            Some("r4"),
            "previous run of the thread"
        );
        assert_eq!(ids(index.branch_path("r3").unwrap()), ["r1", "r2", "r3"]);
        assert_eq!(ids(index.branch_path("r5").unwrap()), ["r1", "r4", "r5"]);
        assert_eq!(ids(index.leaves()), ["r3", "r5"]);
        assert_eq!(ids(index.children("r1").unwrap()), ["r2", "r4"]);
        let order: Vec<(usize, &str)> = index
            .depth_first()
            .into_iter()
            .map(|(d, r)| (d, r.run_id.as_str()))
            .collect();
        assert_eq!(
            order,
            [(0, "r1"), (1, "r2"), (2, "r3"), (1, "r4"), (2, "r5")]
        );
        let branches: Vec<Vec<&str>> = index.branches().unwrap().into_iter().map(ids).collect();
        assert_eq!(branches, [vec!["r1", "r2", "r3"], vec!["r1", "r4", "r5"]]);
    }

    #[test]
    fn divergence_names_the_fork_and_both_first_runs() {
        let index = RunIndex::build(&forked()).unwrap();
        let d = index.divergence("r3", "r5").unwrap();
        assert_eq!(d.fork.map(|r| r.run_id.as_str()), Some("r1"));
        assert_eq!(d.first_a.map(|r| r.run_id.as_str()), Some("r2"));
        assert_eq!(d.first_b.map(|r| r.run_id.as_str()), Some("r4"));
        let d = index.divergence("r2", "r3").unwrap();
        assert_eq!(d.fork.map(|r| r.run_id.as_str()), Some("r2"));
        assert_eq!(d.first_a, None);
        assert_eq!(d.first_b.map(|r| r.run_id.as_str()), Some("r3"));
        assert!(matches!(
            index.divergence("r3", "nope"),
            Err(LineageError::UnknownRun { .. })
        ));
    }

    #[test]
    fn incremental_pushes_give_the_batch_index() {
        let events = forked();
        let mut inc = RunIndex::new();
        for e in &events {
            inc.push(e).unwrap();
        }
        let batch = RunIndex::build(&events).unwrap();
        assert_eq!(inc.runs(), batch.runs());
        assert_eq!(inc.preamble(), batch.preamble());
        assert_eq!(ids(inc.leaves()), ids(batch.leaves()));
    }

    #[test]
    fn push_rejects_faults_and_leaves_the_index_unchanged() {
        let mut index = RunIndex::new();
        index.push(&started("t", "r1", None)).unwrap();
        index.push(&finished()).unwrap();
        let before = index.runs().to_vec();
        for (bad, kind) in [
            (started("t", "r2", Some("later")), "not found"),
            (started("t", "r1", None), "duplicate"),
            (started("u", "r3", Some("r1")), "other thread"),
            (started("t", "r4", Some("r4")), "cycle"),
        ] {
            let err = index.push(&bad).unwrap_err();
            let LineageError::Faults(faults) = &err else {
                panic!("{kind}: {err}")
            };
            let ok = matches!(
                (&faults[..], kind),
                (
                    [LineageFault::ParentNotFound { event_index: 2, .. }],
                    "not found"
                ) | (
                    [LineageFault::DuplicateRunId { first_event: 0, .. }],
                    "duplicate"
                ) | ([LineageFault::ParentInOtherThread { .. }], "other thread")
                    | ([LineageFault::Cycle { .. }], "cycle")
            );
            assert!(ok, "{kind}: {err}");
            assert_eq!(index.runs(), &before[..]);
            assert_eq!(index.len(), 2);
        }
        let err = index
            .push(&ev(r#"{"type":"RUN_STARTED","threadId":"t"}"#))
            .unwrap_err();
        assert!(matches!(
            err,
            LineageError::MalformedRunStarted { event_index: 2, .. }
        ));
    }

    #[test]
    fn build_reports_every_fault_in_log_order() {
        let events = vec![
            started("t", "a", Some("b")),
            started("t", "b", Some("a")),
            started("t", "c", Some("missing")),
            started("u", "d", Some("c")),
            started("t", "a", None),
            started("t", "e", Some("e")),
        ];
        let Err(LineageError::Faults(faults)) = RunIndex::build(&events) else {
            panic!("faults expected")
        };
        let text: Vec<String> = faults.iter().map(|f| f.to_string()).collect();
        assert_eq!(faults.len(), 5, "{text:#?}");
        assert!(
            matches!(&faults[0], LineageFault::Cycle { run_ids, event_index: 0 } if run_ids == &["a", "b"])
        );
        assert!(matches!(
            &faults[1],
            LineageFault::ParentNotFound { event_index: 2, .. }
        ));
        assert!(matches!(
            &faults[2],
            LineageFault::ParentInOtherThread { event_index: 3, .. }
        ));
        assert!(matches!(
            &faults[3],
            LineageFault::DuplicateRunId {
                event_index: 4,
                first_event: 0,
                ..
            }
        ));
        assert!(matches!(
            &faults[4],
            LineageFault::Cycle { event_index: 5, .. }
        ));
        assert_eq!(
            text[0],
            "event 0: parent links form a cycle: \"a\" -> \"b\" -> \"a\""
        );
    }

    #[test]
    fn forward_parent_references_are_fine_in_a_batch_unless_they_loop() {
        let events = vec![
            started("t", "root", None),
            finished(),
            started("t", "child", Some("p")),
            finished(),
            started("t", "p", Some("root")),
            finished(),
        ];
        let index = RunIndex::build(&events).unwrap();
        assert_eq!(
            ids(index.branch_path("child").unwrap()),
            ["root", "p", "child"]
        );
        assert_eq!(ids(index.roots()), ["root"]);
        // Without its own parentRunId, "p" continues "child": a loop.
        let events = vec![started("t", "child", Some("p")), started("t", "p", None)];
        let Err(LineageError::Faults(faults)) = RunIndex::build(&events) else {
            panic!("cycle expected")
        };
        assert!(
            matches!(&faults[..], [LineageFault::Cycle { run_ids, .. }] if run_ids == &["child", "p"])
        );
    }

    #[test]
    fn empty_and_run_less_logs() {
        let index = RunIndex::build(&[]).unwrap();
        assert!(index.is_empty() && index.runs().is_empty());
        let index = RunIndex::build(&[ev(r#"{"type":"RAW","event":1}"#)]).unwrap();
        assert_eq!(index.preamble(), 0..1);
        assert!(index.leaves().is_empty());
        assert!(matches!(
            index.branch_path("x"),
            Err(LineageError::UnknownRun { .. })
        ));
    }
}
