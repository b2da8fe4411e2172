//! Lineage provenance in the engine: a checkpoint of a run never takes in a
//! message that a client (or a snapshot) restated from a branch the run is
//! not on.
//!
//! The rule is the history core's ([`agui_history::lineage::Provenance`]):
//! a restated message is *foreign* on a branch when its first mention in
//! the thread's log was not a sending and none of the runs that own it
//! (generated it, or first listed it in a snapshot) is on the branch. With
//! the whole log's provenance, whether an id is foreign depends on the id
//! and the branch only, so a run's foreign ids are one set, found before
//! its events are reduced, and [`agui_history::lineage::conversation_at`]
//! is what the engine's checkpoints hold.
//!
//! The engine keeps each thread's provenance (runs named by id; `None` for
//! the preamble) and brings it up to date from the log when a run needs it
//! (only its new events are read; a run whose events the caller holds is
//! observed without a read). Most runs never need it: an id a run
//! restates that is already in the conversation at the run's start came
//! from the run's own branch (every message there did), so it cannot be
//! foreign; only the other restated ids are looked up, and the branch is
//! walked only for an id that some run owns and this run does not.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use agui_history::lineage::{Provenance, restated_message_ids};
use agui_protocol::{Event, EventType};
use serde::Deserialize;

use crate::Conversation;
use crate::error::Result;
use crate::types::RunRecord;

use super::Store;

/// How many threads' provenance the engine keeps (least recently used
/// first out; a thread dropped is read again from its log when needed).
const THREADS: usize = 64;
/// How many message ids the kept provenance may hold in all (about 100
/// bytes each): past it, threads leave least recently used first, so a
/// few huge threads cannot hold the engine's memory.
const IDS: usize = 1 << 20;

/// A thread's provenance, observed up to a sequence number.
struct ThreadProvenance {
    /// The thread instance it was read from (a thread deleted and written
    /// again starts over).
    instance: u64,
    /// The last sequence number observed.
    through: u64,
    /// The run whose events come next (the last `RUN_STARTED` observed).
    run: Option<String>,
    ids: Provenance<Option<String>>,
    used: u64,
    /// [`Kept::forgets`] when it was taken out: one taken before a thread
    /// was forgotten is not put back (it may be of the deleted thread).
    taken_at: u64,
}

impl ThreadProvenance {
    fn new(instance: u64) -> ThreadProvenance {
        ThreadProvenance {
            instance,
            through: 0,
            run: None,
            ids: Provenance::new(),
            used: 0,
            taken_at: 0,
        }
    }

    fn observe(&mut self, seq: u64, event: &Event) {
        if *event.event_type() == EventType::RunStarted {
            self.run = run_id_of(event);
        }
        self.ids.observe(event, self.run.clone());
        self.through = seq;
    }
}

/// The engine's per-thread provenance (see the module docs).
pub(crate) struct Provenances {
    threads: Mutex<Kept>,
    /// At most this many threads are kept ([`THREADS`]).
    max_threads: usize,
    /// At most this many ids are kept, in all ([`IDS`]).
    max_ids: usize,
}

impl Default for Provenances {
    fn default() -> Self {
        Provenances {
            threads: Mutex::default(),
            max_threads: THREADS,
            max_ids: IDS,
        }
    }
}

/// Each thread's provenance by (tenant, thread), and the clock that marks
/// the least recently used.
#[derive(Default)]
struct Kept {
    map: HashMap<(String, String), ThreadProvenance>,
    clock: u64,
    /// How many times a thread was forgotten (deleted or renamed).
    forgets: u64,
}

impl Provenances {
    /// Takes a thread's provenance out (the caller puts it back), or a new
    /// one when none is kept for this instance.
    fn take(&self, tenant: &str, thread: &str, instance: u64) -> ThreadProvenance {
        let mut guard = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        let mut p = match guard.map.remove(&(tenant.to_owned(), thread.to_owned())) {
            Some(p) if p.instance == instance => p,
            _ => ThreadProvenance::new(instance),
        };
        p.taken_at = guard.forgets;
        p
    }

    fn put(&self, tenant: &str, thread: &str, mut p: ThreadProvenance) {
        let mut guard = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        let Kept {
            map,
            clock,
            forgets,
        } = &mut *guard;
        if p.taken_at != *forgets {
            // A thread was deleted or renamed while this was out.
            return;
        }
        *clock += 1;
        p.used = *clock;
        map.insert((tenant.to_owned(), thread.to_owned()), p);
        while map.len() > self.max_threads
            || map.values().map(|t| t.ids.len()).sum::<usize>() > self.max_ids
        {
            let Some(oldest) = map
                .iter()
                .min_by_key(|(_, v)| v.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            map.remove(&oldest);
        }
    }

    /// Forgets a thread (deleted or renamed); one taken out meanwhile is
    /// not put back.
    pub(crate) fn forget(&self, tenant: &str, thread: &str) {
        let mut guard = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        guard.map.remove(&(tenant.to_owned(), thread.to_owned()));
        guard.forgets += 1;
    }

    /// Forgets everything (the engine's caches are cleared).
    pub(crate) fn clear(&self) {
        self.threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .clear();
    }
}

/// The message ids `run`'s events restate from branches the run is not
/// on. `events` are the run's events (`held`: the caller holds them as
/// stored, so they are observed without a read when the thread's
/// provenance has reached the run); `start` is the conversation at the
/// run's start.
pub(crate) async fn foreign_ids(
    store: &Store,
    tenant: &str,
    thread: &str,
    run: &RunRecord,
    events: &[Event],
    start: &Conversation,
) -> Result<HashSet<String>> {
    let restated: Vec<String> = events.iter().flat_map(restated_message_ids).collect();
    if restated.is_empty() {
        return Ok(HashSet::new());
    }
    // Ids restated and not in the conversation already: the only ones that
    // can be foreign.
    let known: HashSet<&str> = start
        .messages
        .iter()
        .filter_map(|m| m.get("id").and_then(serde_json::Value::as_str))
        .collect();
    let unknown: HashSet<String> = restated
        .into_iter()
        .filter(|id| !known.contains(id.as_str()))
        .collect();
    if unknown.is_empty() {
        return Ok(HashSet::new());
    }
    let cache = &store.inner.provenance;
    let mut p = cache.take(tenant, thread, run.thread_instance);
    let caught_up = catch_up(store, tenant, thread, run, events, &mut p).await;
    let judged = match caught_up {
        Ok(()) => judge(store, tenant, thread, run, &p, unknown).await,
        Err(e) => Err(e),
    };
    if caught_up_ok(&p, run) {
        cache.put(tenant, thread, p);
    }
    judged
}

/// The message ids that events of the branch ending at `tip` (`path`, root
/// first) restate from other branches: what [`Store::read_branch`] leaves
/// out, as the history core's `Lineage::branch` does.
pub(crate) async fn foreign_on_branch<'e>(
    store: &Store,
    tenant: &str,
    thread: &str,
    tip: &RunRecord,
    path: &[RunRecord],
    events: impl Iterator<Item = &'e Event>,
) -> Result<HashSet<String>> {
    let restated: HashSet<String> = events.flat_map(restated_message_ids).collect();
    if restated.is_empty() {
        return Ok(HashSet::new());
    }
    let cache = &store.inner.provenance;
    let mut p = cache.take(tenant, thread, tip.thread_instance);
    let caught_up = catch_up(store, tenant, thread, tip, &[], &mut p).await;
    let on_path: HashSet<&str> = path.iter().map(|r| r.run_id.as_str()).collect();
    let judged = caught_up.map(|()| {
        restated
            .into_iter()
            .filter(|id| {
                p.ids
                    .is_foreign(id, |o| o.as_deref().is_none_or(|r| on_path.contains(r)))
            })
            .collect()
    });
    if caught_up_ok(&p, tip) {
        cache.put(tenant, thread, p);
    }
    judged
}

/// `event` without the messages in `foreign` it restates; `None` when it
/// restates none of them.
pub(crate) fn clean_one(event: &Event, foreign: &HashSet<String>) -> Result<Option<Event>> {
    let (cleaned, removed) =
        agui_history::lineage::without_foreign(event, |id| foreign.contains(id)).map_err(|e| {
            crate::StoreError::internal("a restated message cannot be removed").with_source(e)
        })?;
    Ok((!removed.is_empty()).then(|| cleaned.into_owned()))
}

/// True when `p` has observed `run` whole (worth keeping).
fn caught_up_ok(p: &ThreadProvenance, run: &RunRecord) -> bool {
    p.through >= run.last_seq
}

/// Observes the log up to `run`'s last event.
async fn catch_up(
    store: &Store,
    tenant: &str,
    thread: &str,
    run: &RunRecord,
    held: &[Event],
    p: &mut ThreadProvenance,
) -> Result<()> {
    if p.through >= run.last_seq {
        return Ok(());
    }
    if p.through + 1 == run.first_seq && held.len() as u64 == run.last_seq + 1 - run.first_seq {
        for (seq, e) in (run.first_seq..).zip(held) {
            p.observe(seq, e);
        }
        return Ok(());
    }
    // Pages of the log, so that a long thread is never held at once.
    const PAGE: u64 = 4096;
    while p.through < run.last_seq {
        let from = p.through + 1;
        let to = run.last_seq.min(from + PAGE - 1);
        let stored = store.read_range(tenant, thread, from, to).await?;
        if stored.is_empty() {
            break;
        }
        for e in &stored {
            p.observe(e.seq, &e.event);
        }
        if p.through < to {
            // A gap the log does not fill: go on after it.
            p.through = to;
        }
    }
    Ok(())
}

/// The ids of `unknown` that are foreign on `run`'s branch.
async fn judge(
    store: &Store,
    tenant: &str,
    thread: &str,
    run: &RunRecord,
    p: &ThreadProvenance,
    unknown: HashSet<String>,
) -> Result<HashSet<String>> {
    let own = Some(run.run_id.clone());
    // Owned by some run, and not by this one: the branch decides.
    let suspects: Vec<String> = unknown
        .into_iter()
        .filter(|id| p.ids.is_foreign(id, |o| *o == own))
        .collect();
    if suspects.is_empty() {
        return Ok(HashSet::new());
    }
    let path: HashSet<String> = store
        .branch(tenant, thread, &run.run_id)
        .await?
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    let on_path = |o: &Option<String>| o.as_ref().is_none_or(|r| path.contains(r));
    Ok(suspects
        .into_iter()
        .filter(|id| p.ids.is_foreign(id, on_path))
        .collect())
}

/// `events` without the messages in `foreign` they restate (borrowed when
/// none is).
pub(crate) fn clean<'e>(
    events: &'e [Event],
    foreign: &HashSet<String>,
) -> Result<Cow<'e, [Event]>> {
    if foreign.is_empty() {
        return Ok(Cow::Borrowed(events));
    }
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        out.push(clean_one(e, foreign)?.unwrap_or_else(|| e.clone()));
    }
    Ok(Cow::Owned(out))
}

/// A `RUN_STARTED`'s `runId`, when it is a string.
fn run_id_of(event: &Event) -> Option<String> {
    #[derive(Deserialize)]
    struct Started<'a> {
        #[serde(rename = "runId", borrow, default)]
        run_id: Option<Cow<'a, str>>,
    }
    event
        .view::<Started>()
        .ok()
        .and_then(|s| s.run_id)
        .map(Cow::into_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_ids(n: usize) -> ThreadProvenance {
        let mut p = ThreadProvenance::new(0);
        for i in 0..n {
            let e = Event::from_json(&format!(
                r#"{{"type":"TEXT_MESSAGE_START","messageId":"m{i}","role":"assistant"}}"#
            ))
            .unwrap();
            p.observe(i as u64 + 1, &e);
        }
        p
    }

    #[test]
    fn threads_leave_least_recently_used_first_past_either_bound() {
        let kept = Provenances {
            max_threads: 3,
            max_ids: 10,
            ..Provenances::default()
        };
        for t in ["a", "b", "c", "d"] {
            kept.put("t", t, with_ids(2));
        }
        // Four threads: "a", the least recently used, left.
        assert_eq!(kept.take("t", "a", 0).through, 0, "a was read afresh");
        let b = kept.take("t", "b", 0);
        assert_eq!(b.through, 2, "b was kept");
        kept.put("t", "b", b);
        // Eleven ids in all: the least recently used ("c") leaves.
        kept.put("t", "e", with_ids(5));
        assert_eq!(kept.take("t", "c", 0).through, 0);
        assert_eq!(kept.take("t", "e", 0).through, 5);
        // Another instance of a thread is never taken for it.
        kept.put("t", "b", with_ids(1));
        assert_eq!(kept.take("t", "b", 7).through, 0);
        // One taken out before a thread is forgotten is not put back.
        kept.put("t", "f", with_ids(2));
        let f = kept.take("t", "f", 0);
        kept.forget("t", "other");
        kept.put("t", "f", f);
        assert_eq!(kept.take("t", "f", 0).through, 0);
        kept.put("t", "g", with_ids(2));
        kept.forget("t", "g");
        assert_eq!(kept.take("t", "g", 0).through, 0);
    }
}
