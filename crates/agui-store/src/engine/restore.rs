//! Building and restoring checkpoints (the engine's, [`crate::Store`]: its
//! background checkpoint worker and [`crate::Store::restore`]).
//!
//! **Building.** The engine's [`ConversationCache`] holds, per
//! thread, the reducer after the thread's latest checkpointed run (the
//! *tip*; the next run continues it, so no index is rebuilt per run), the
//! JSON text of each of its messages, and the *path*: the runs
//! checkpointed since the last full checkpoint on this branch, each with its
//! message count and the reducer's watermark (the lowest message index its
//! events changed, [`Reducer::messages_changed_from`]). When a run whose
//! parent is the tip ends, only its own events are reduced, only the messages
//! from the watermark on are serialized, and the checkpoint is a delta from
//! the path entry at index `k & (k - 1)` (Fenwick style, `k` the new entry's
//! index): it keeps the base's first `P` messages, `P` the least watermark of
//! the runs in between. So the `k`-th checkpoint writes the messages of the
//! last `k & -k` runs, `O(n log n)` in total instead of `O(n²)`, and restoring
//! any run reads at most `popcount(k) + 1` blobs. Anything else (no cache,
//! a cold or mismatched cache, a branch from an older run) writes a full
//! checkpoint and starts a new path.
//!
//! **Restoring.** A run's blob and its bases are read and checked, and the
//! conversation's text is composed from their slices ([`checkpoint::compose`]),
//! without parsing. A missing, damaged or stale blob is never used: a broken
//! base is rebuilt first (so the chains through it work again), a broken own
//! blob falls back to the nearest usable ancestor plus the log, and every
//! checkpoint replayed on the way is stored again, as a path of its own (the
//! first full, then deltas, as above). A run appended with
//! [`crate::Checkpoints::Defer`] has no checkpoint until such a restore.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agui_history::reduce::Reducer;
use agui_protocol::Event;

use super::{Restored, Store, checkpointable, provenance, reduce_failed};
use crate::Conversation;
use crate::checkpoint::{self, BaseRef, Decoded};
use crate::error::{Result, StoreError};
use crate::types::{RunFilter, RunRecord, StoredEvent, Timestamp};

use crate::checkpoint::MAX_CHAIN;

/// The thread's preamble: the events before its first `RUN_STARTED`.
pub(crate) async fn preamble(
    store: &Store,
    tenant: &str,
    thread: &str,
) -> Result<Vec<StoredEvent>> {
    let first = store
        .list_runs(
            tenant,
            &RunFilter {
                thread_id: Some(thread.to_owned()),
                limit: 1,
                ..RunFilter::default()
            },
        )
        .await?;
    match first.runs.first() {
        Some(run) if run.first_seq > 1 => {
            store.read_range(tenant, thread, 1, run.first_seq - 1).await
        }
        Some(_) => Ok(Vec::new()),
        None => Ok(Vec::new()),
    }
}

/// Per thread, the latest checkpointed conversation and what building the
/// next delta checkpoint needs (see the module docs), and the last text a
/// restore composed; bounded in threads and bytes.
pub struct ConversationCache {
    entries: Mutex<Entries>,
}

impl Default for ConversationCache {
    fn default() -> ConversationCache {
        ConversationCache::with_limits(CACHED_BYTES, CACHED_THREADS)
    }
}

struct Entries {
    map: HashMap<(String, String), Tip>,
    /// The last conversation text composed per thread (a restore's answer).
    composed: HashMap<(String, String), Composed>,
    /// Bytes held by `map` and `composed`.
    bytes: usize,
    /// Lookups of kept texts so far (what orders them by last use).
    tick: u64,
    max_bytes: usize,
    /// At most this many tips, and this many kept texts.
    max_threads: usize,
}

/// A restore's answer kept for the next restore of the same run, unchanged:
/// the text is shared, so answering again costs a reference count.
#[derive(Clone)]
pub(crate) struct Composed {
    run_id: String,
    last_seq: u64,
    started_at: Timestamp,
    /// [`RunRecord::thread_instance`] of the run it was composed for.
    instance: u64,
    /// `{"messages":[...],"state":...}`.
    pub(crate) json: Arc<String>,
    /// The tick of its last use.
    used: u64,
}

impl Composed {
    /// What the text holds in memory, and what the cache charges for it:
    /// its allocation, not its length (a composed conversation may carry up
    /// to one checkpoint link's unused text as spare capacity).
    fn held(&self) -> usize {
        self.json.capacity()
    }

    /// True when it was composed for `run` as it is now.
    pub(crate) fn matches(&self, run: &RunRecord) -> bool {
        is_run(
            (&self.run_id, self.last_seq, self.started_at, self.instance),
            run,
        )
    }
}

/// True when a run the cache kept, by its id, last event, start time and
/// thread instance, is `run` as the store holds it now. A thread deleted and
/// written again never matches by accident: here by this engine, its cache
/// was told; by another engine sharing the store, it is another instance,
/// even when it was written again with the same runs, receive times and
/// event counts (an import, a migration).
fn is_run(kept: (&str, u64, Timestamp, u64), run: &RunRecord) -> bool {
    let (run_id, last_seq, started_at, instance) = kept;
    run_id == run.run_id
        && last_seq == run.last_seq
        && started_at == run.started_at
        && instance == run.thread_instance
}

/// One run of a tip's path.
#[derive(Debug, Clone)]
struct PathEntry {
    run_id: String,
    /// The last sequence number its checkpoint covers.
    last_seq: u64,
    /// Its start time and thread instance: with the id and `last_seq`, what
    /// a parent must match to continue the tip (see [`is_run`]).
    started_at: Timestamp,
    instance: u64,
    /// Messages in its conversation.
    count: usize,
    /// Lowest message index its events changed (relative to the entry
    /// before it); 0 for the first entry, whose checkpoint is full.
    mark: usize,
}

/// The latest checkpointed conversation of a thread.
struct Tip {
    /// The reducer after the tip's run: the next run continues it (no index
    /// rebuilt per run).
    reducer: Reducer,
    /// The JSON text of each message of `conv`.
    texts: Vec<String>,
    /// The JSON text of the state after the tip's run.
    state: String,
    /// Runs since the last full checkpoint; the last is the tip's run.
    path: Vec<PathEntry>,
    bytes: usize,
    /// The cache's tick when it was last put or read (what orders tips by
    /// last use).
    used: u64,
}

impl PathEntry {
    fn is(&self, run: &RunRecord) -> bool {
        is_run(
            (&self.run_id, self.last_seq, self.started_at, self.instance),
            run,
        )
    }
}

impl Tip {
    fn run(&self) -> &PathEntry {
        &self.path[self.path.len() - 1]
    }
}

/// Threads a [`ConversationCache`] remembers at most.
const CACHED_THREADS: usize = 256;
/// Message text a [`ConversationCache`] keeps at most (the parsed
/// conversations take a few times more).
const CACHED_BYTES: usize = 256 << 20;

impl ConversationCache {
    /// An empty cache.
    pub fn new() -> ConversationCache {
        ConversationCache::default()
    }

    /// An empty cache holding at most `max_bytes` of text and `max_threads`
    /// threads' tips (and as many kept texts).
    fn with_limits(max_bytes: usize, max_threads: usize) -> ConversationCache {
        ConversationCache {
            entries: Mutex::new(Entries {
                map: HashMap::new(),
                composed: HashMap::new(),
                bytes: 0,
                tick: 0,
                max_bytes,
                max_threads,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the thread's tip if it is `run` as it is now.
    fn take(&self, tenant: &str, thread: &str, run: &RunRecord) -> Option<Tip> {
        let mut e = self.lock();
        let key = (tenant.to_owned(), thread.to_owned());
        match e.map.get(&key) {
            Some(t) if t.run().is(run) => {
                let tip = e.map.remove(&key)?;
                e.bytes -= tip.bytes;
                Some(tip)
            }
            _ => None,
        }
    }

    fn put(&self, tenant: &str, thread: &str, mut tip: Tip) {
        // Charged by allocation, as kept texts are.
        tip.bytes = tip.texts.iter().map(|t| t.capacity() + 48).sum::<usize>()
            + tip.state.capacity()
            + 64 * tip.path.len();
        let key = (tenant.to_owned(), thread.to_owned());
        let mut e = self.lock();
        if let Some(old) = e.map.remove(&key) {
            e.bytes -= old.bytes;
        }
        if tip.bytes > e.max_bytes {
            return;
        }
        e.make_room(tip.bytes, true);
        e.bytes += tip.bytes;
        e.tick += 1;
        tip.used = e.tick;
        e.map.insert(key, tip);
    }

    /// The text kept for `run_id` of the thread, if any ([`Composed::matches`]
    /// tells whether it is current).
    pub(crate) fn composed(&self, tenant: &str, thread: &str, run_id: &str) -> Option<Composed> {
        let mut e = self.lock();
        e.tick += 1;
        let tick = e.tick;
        let c = e
            .composed
            .get_mut(&(tenant.to_owned(), thread.to_owned()))
            .filter(|c| c.run_id == run_id)?;
        c.used = tick;
        Some(c.clone())
    }

    /// Keeps `json`, composed for `run` as it is now, for the next restore of
    /// the run (replacing the thread's previous one).
    pub(crate) fn remember(&self, tenant: &str, thread: &str, run: &RunRecord, json: &Arc<String>) {
        let key = (tenant.to_owned(), thread.to_owned());
        let mut e = self.lock();
        if let Some(old) = e.composed.remove(&key) {
            e.bytes -= old.held();
        }
        let held = json.capacity();
        if held > e.max_bytes {
            return;
        }
        e.make_room(held, false);
        e.bytes += held;
        e.tick += 1;
        let used = e.tick;
        e.composed.insert(
            key,
            Composed {
                run_id: run.run_id.clone(),
                last_seq: run.last_seq,
                started_at: run.started_at,
                instance: run.thread_instance,
                json: Arc::clone(json),
                used,
            },
        );
    }

    /// Forgets everything (memory pressure; benchmarks of cold restores).
    pub fn clear(&self) {
        let mut e = self.lock();
        e.map.clear();
        e.composed.clear();
        e.bytes = 0;
    }

    /// The conversation of `run` composed from the thread's tip, when the
    /// tip is that run as it is now: a restore of the latest run then costs
    /// one copy of its text, with no blob read, decompressed or checked.
    pub(crate) fn compose(&self, tenant: &str, thread: &str, run: &RunRecord) -> Option<String> {
        let mut e = self.lock();
        e.tick += 1;
        let tick = e.tick;
        let t = e.map.get_mut(&(tenant.to_owned(), thread.to_owned()))?;
        if !t.run().is(run) {
            return None;
        }
        t.used = tick;
        Some(compose_texts(&t.texts, &t.state))
    }

    /// The run id of a thread's tip, if the cache holds one.
    pub(crate) fn tip_run(&self, tenant: &str, thread: &str) -> Option<String> {
        let e = self.lock();
        let t = e.map.get(&(tenant.to_owned(), thread.to_owned()))?;
        Some(t.run().run_id.clone())
    }

    /// Forgets a thread (deleted).
    pub fn forget(&self, tenant: &str, thread: &str) {
        let key = (tenant.to_owned(), thread.to_owned());
        let mut e = self.lock();
        if let Some(old) = e.map.remove(&key) {
            e.bytes -= old.bytes;
        }
        if let Some(old) = e.composed.remove(&key) {
            e.bytes -= old.held();
        }
    }
}

impl Entries {
    /// Makes room for `bytes` more and one more tip (`tip`) or kept text.
    /// Kept texts go first, least recently used first; then, if that is not
    /// enough, tips, least recently used first (a tip that goes is rebuilt
    /// from its thread's checkpoints when the thread is next checkpointed).
    fn make_room(&mut self, bytes: usize, tip: bool) {
        while self.bytes + bytes > self.max_bytes
            || (!tip && self.composed.len() >= self.max_threads)
        {
            let Some(c) = take_least_recent(&mut self.composed, |c| c.used) else {
                break;
            };
            self.bytes -= c.held();
        }
        while self.bytes + bytes > self.max_bytes || (tip && self.map.len() >= self.max_threads) {
            let Some(t) = take_least_recent(&mut self.map, |t| t.used) else {
                break;
            };
            self.bytes -= t.bytes;
        }
    }
}

/// Removes and returns the entry of `map` used least recently.
fn take_least_recent<V>(
    map: &mut HashMap<(String, String), V>,
    used: impl Fn(&V) -> u64,
) -> Option<V> {
    let oldest = map
        .iter()
        .min_by_key(|(_, v)| used(v))
        .map(|(k, _)| k.clone())?;
    map.remove(&oldest)
}

fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> Result<String> {
    serde_json::to_string(v)
        .map_err(|e| StoreError::internal("a conversation cannot be serialized").with_source(e))
}

/// Builds and stores the checkpoint of a run that ended: a delta from the
/// cached tip when the run continues it, else a full one (through
/// [`restore_run`]). `events` are the run's events when the caller holds
/// them (else they are read from the log).
pub(crate) async fn checkpoint_run(
    store: &Store,
    tenant: &str,
    thread: &str,
    run: &RunRecord,
    events: Option<Vec<Event>>,
) -> Result<()> {
    if !checkpointable(run.status) {
        return Ok(());
    }
    if run.parent_run_id.is_none() && run.first_seq == 1 {
        // The thread's first run, with no preamble: its conversation starts
        // empty, and its checkpoint starts a new path.
        let tip = Tip {
            reducer: Reducer::new(Conversation::default()),
            texts: Vec::new(),
            state: String::new(),
            path: Vec::new(),
            bytes: 0,
            used: 0,
        };
        let tip = extend(store, tenant, thread, run, events, tip).await?;
        store.conversation_cache().put(tenant, thread, tip);
        return Ok(());
    }
    if let Some(parent_id) = &run.parent_run_id {
        let parent = match store.run(tenant, thread, parent_id).await {
            Ok(p) => Some(p),
            Err(e) if e.kind() == crate::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let cache = store.conversation_cache();
        let tip = parent
            .filter(|p| p.first_seq < run.first_seq)
            .and_then(|p| cache.take(tenant, thread, &p));
        if let Some(tip) = tip {
            let tip = extend(store, tenant, thread, run, events, tip).await?;
            cache.put(tenant, thread, tip);
            return Ok(());
        }
    }
    restore_run(store, tenant, thread, &run.run_id)
        .await
        .map(drop)
}

/// Reduces `run`'s events on top of `tip` (its parent's conversation) and
/// stores the run's delta checkpoint. The tip is consumed on any failure.
async fn extend(
    store: &Store,
    tenant: &str,
    thread: &str,
    run: &RunRecord,
    events: Option<Vec<Event>>,
    mut tip: Tip,
) -> Result<Tip> {
    // On the worker's task, not a blocking thread: measured on 2 cores, the
    // extra thread cost 15% of append throughput (memory store, 1M events)
    // and did not lower the gateway's added latency.
    let events = match events {
        Some(events) => events,
        None => run_events(store, tenant, thread, run).await?,
    };
    let mark = tip.step_run(store, tenant, thread, run, &events).await?;
    let state = to_json(&tip.reducer.conversation().state)?;
    let blob = tip.push(run, mark, &state);
    store
        .save_checkpoint(tenant, thread, &run.run_id, blob)
        .await?;
    Ok(tip)
}

/// A run's events, as stored.
async fn run_events(
    store: &Store,
    tenant: &str,
    thread: &str,
    run: &RunRecord,
) -> Result<Vec<Event>> {
    Ok(store
        .read_range(tenant, thread, run.first_seq, run.last_seq)
        .await?
        .into_iter()
        .map(|e| e.event)
        .collect())
}

impl Tip {
    /// [`Tip::step`] with `run`'s events as its branch sees them: without
    /// the messages they restate from other branches (see
    /// [`provenance`]).
    async fn step_run(
        &mut self,
        store: &Store,
        tenant: &str,
        thread: &str,
        run: &RunRecord,
        events: &[Event],
    ) -> Result<usize> {
        let foreign = provenance::foreign_ids(
            store,
            tenant,
            thread,
            run,
            events,
            self.reducer.conversation(),
        )
        .await?;
        self.step(provenance::clean(events, &foreign)?.iter())
    }

    /// Applies a run's events and brings `texts` up to date; returns the
    /// lowest message index the events changed (0 when `texts` was behind).
    fn step<'a>(&mut self, events: impl Iterator<Item = &'a Event>) -> Result<usize> {
        self.reducer.reset_change_mark();
        for e in events {
            self.reducer.apply(e).map_err(reduce_failed)?;
        }
        let conv = self.reducer.conversation();
        let mark = self
            .reducer
            .messages_changed_from()
            .min(self.texts.len())
            .min(conv.messages.len());
        self.texts.truncate(mark);
        for m in &conv.messages[mark..] {
            self.texts.push(to_json(m)?);
        }
        Ok(mark)
    }

    /// Makes `run` (its events stepped, `mark` the least change since the
    /// last entry) the path's next entry and encodes its checkpoint: full
    /// for the first entry, else a delta from entry `k & (k - 1)`.
    fn push(&mut self, run: &RunRecord, mark: usize, state: &str) -> Vec<u8> {
        state.clone_into(&mut self.state);
        let k = self.path.len();
        let blob = if k == 0 {
            checkpoint::encode_full(&self.texts, state, run.last_seq)
        } else {
            let base = k & (k - 1);
            let keep = self.path[base + 1..]
                .iter()
                .map(|e| e.mark)
                .chain([mark, self.path[base].count])
                .min()
                .unwrap_or(0);
            let b = &self.path[base];
            checkpoint::encode_delta(
                &BaseRef {
                    run_id: b.run_id.clone(),
                    last_seq: b.last_seq,
                    keep: keep as u64,
                },
                &self.texts[keep..],
                state,
                run.last_seq,
            )
        };
        self.path.push(PathEntry {
            run_id: run.run_id.clone(),
            last_seq: run.last_seq,
            started_at: run.started_at,
            instance: run.thread_instance,
            count: self.texts.len(),
            mark: if k == 0 { 0 } else { mark },
        });
        blob
    }
}

/// Why a run's checkpoint chain cannot be composed.
enum Broken {
    /// The run's own blob is missing, damaged or stale.
    Own,
    /// A base's blob (run id) is missing, damaged, stale or does not fit.
    Base(String),
}

/// Reads and checks a run's checkpoint chain and composes its text.
async fn compose_run(
    store: &Store,
    tenant: &str,
    thread: &str,
    run_id: &str,
    last_seq: u64,
) -> Result<std::result::Result<String, Broken>> {
    let mut chain: Vec<Decoded<'static>> = Vec::new();
    let (mut want_run, mut want_seq) = (run_id.to_owned(), last_seq);
    loop {
        let broken = || {
            if chain.is_empty() {
                Broken::Own
            } else {
                Broken::Base(want_run.clone())
            }
        };
        if chain.len() >= MAX_CHAIN {
            return Ok(Err(broken()));
        }
        let blob = store
            .backend()
            .load_checkpoint(tenant, thread, &want_run)
            .await?;
        let Some(d) = blob.and_then(|b| checkpoint::decode(&b).ok().map(Decoded::into_owned))
        else {
            return Ok(Err(broken()));
        };
        if d.last_seq != want_seq {
            return Ok(Err(broken()));
        }
        let next = d.base.as_ref().map(|b| (b.run_id.clone(), b.last_seq));
        chain.push(d);
        match next {
            None => break,
            // Bases cover strictly earlier events: no cycle.
            Some((_, s)) if s >= want_seq => return Ok(Err(Broken::Own)),
            Some((r, s)) => (want_run, want_seq) = (r, s),
        }
    }
    Ok(checkpoint::compose(&chain).map_err(|_| Broken::Own))
}

/// Where the replay starts.
enum Base {
    /// A checkpoint's text (parsed only if something must be replayed).
    Text(String),
    /// Nothing: replay from the preamble.
    Empty,
}

/// The repairing restore behind [`Store::restore`] (whose fast path composes
/// the chain a backend reads in one go). Composes the run's checkpoint chain
/// (usually: a few blobs, no parsing), rebuilding a broken base first; when
/// the run's own checkpoint is unusable, walks up to the nearest run with a
/// usable one, then replays the runs below it, storing the (full)
/// checkpoints it rebuilds.
pub async fn restore_run(
    store: &Store,
    tenant: &str,
    thread: &str,
    run_id: &str,
) -> Result<Restored> {
    let target = store.run(tenant, thread, run_id).await?;
    let mut rebuilt = 0;
    // Runs to replay, deepest first.
    let mut chain: Vec<RunRecord> = Vec::new();
    let mut cur = target.clone();
    let base = loop {
        if checkpointable(cur.status) {
            let mut composed =
                compose_run(store, tenant, thread, &cur.run_id, cur.last_seq).await?;
            if let Err(Broken::Base(b)) = &composed {
                // Repair the base once (boxed: restore is recursive), then
                // every chain through it composes again.
                let b = b.clone();
                let repaired = Box::pin(restore_run(store, tenant, thread, &b)).await;
                if let Ok(r) = repaired {
                    rebuilt += r.rebuilt;
                    composed =
                        compose_run(store, tenant, thread, &cur.run_id, cur.last_seq).await?;
                }
            }
            if let Ok(json) = composed {
                break Base::Text(json);
            }
        }
        let parent = match cur.parent_run_id.as_deref() {
            Some(p) => match store.run(tenant, thread, p).await {
                Ok(parent) if parent.first_seq < cur.first_seq => Some(parent),
                Ok(_) => None,
                Err(e) if e.kind() == crate::ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        chain.push(cur);
        match parent {
            Some(p) => cur = p,
            None => break Base::Empty,
        }
    };
    let conversation = match base {
        Base::Text(json) if chain.is_empty() => {
            return Ok(Restored {
                run_id: target.run_id,
                last_seq: target.last_seq,
                json: Arc::new(json),
                from_checkpoint: rebuilt == 0,
                rebuilt,
            });
        }
        Base::Text(json) => serde_json::from_str(&json).map_err(|e| {
            StoreError::corrupt("a checkpoint is not a conversation").with_source(e)
        })?,
        Base::Empty => {
            let mut reducer = Reducer::new(Conversation::default());
            for e in preamble(store, tenant, thread).await? {
                reducer.apply(&e.event).map_err(reduce_failed)?;
            }
            reducer.into_conversation()
        }
    };
    // The runs are replayed with one reducer, and their checkpoints stored
    // as a path (the first full, then deltas), exactly as the append path
    // builds them: replaying a long branch whose checkpoints were deferred
    // writes O(n log n) message texts, not a full conversation per run.
    let mut tip = Tip {
        reducer: Reducer::new(conversation),
        texts: Vec::new(),
        state: String::new(),
        path: Vec::new(),
        bytes: 0,
        used: 0,
    };
    let mut state = String::new();
    // The least change since the path's last entry (runs that are not
    // checkpointable are replayed but get no entry).
    let mut pending = usize::MAX;
    for run in chain.iter().rev() {
        let events = run_events(store, tenant, thread, run).await?;
        pending = pending.min(tip.step_run(store, tenant, thread, run, &events).await?);
        state = to_json(&tip.reducer.conversation().state)?;
        if checkpointable(run.status) {
            let blob = tip.push(run, pending, &state);
            store
                .save_checkpoint(tenant, thread, &run.run_id, blob)
                .await?;
            rebuilt += 1;
            pending = usize::MAX;
        }
    }
    let json = compose_texts(&tip.texts, &state);
    // The target's entry is the path's last: the next run continues it.
    if checkpointable(target.status) {
        store.conversation_cache().put(tenant, thread, tip);
    }
    Ok(Restored {
        run_id: target.run_id,
        last_seq: target.last_seq,
        json: Arc::new(json),
        from_checkpoint: false,
        rebuilt,
    })
}

/// `{"messages":[...],"state":...}` from message texts and the state's text,
/// exactly as `serde_json` writes a [`Conversation`].
fn compose_texts(texts: &[String], state: &str) -> String {
    let len = texts.iter().map(|t| t.len() + 1).sum::<usize>() + state.len() + 24;
    let mut out = String::with_capacity(len);
    out.push_str("{\"messages\":[");
    for (i, t) in texts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(t);
    }
    out.push_str("],\"state\":");
    out.push_str(state);
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::RunStatus;

    fn run(id: &str) -> RunRecord {
        RunRecord {
            thread_id: id.to_owned(),
            run_id: id.to_owned(),
            parent_run_id: None,
            agent: None,
            status: RunStatus::Finished,
            started_at: Timestamp(1),
            finished_at: Some(Timestamp(2)),
            first_seq: 1,
            last_seq: 3,
            event_count: 3,
            bytes: 100,
            thread_instance: 0,
        }
    }

    fn keep(cache: &ConversationCache, id: &str) {
        let text = Arc::new(id.repeat(100 / id.len()));
        cache.remember("t", id, &run(id), &text);
    }

    fn kept(cache: &ConversationCache, id: &str) -> bool {
        cache
            .composed("t", id, id)
            .is_some_and(|c| c.matches(&run(id)))
    }

    #[test]
    fn kept_texts_leave_least_recently_used_first() {
        // Room for two texts of 100 bytes.
        let cache = ConversationCache::with_limits(250, 8);
        keep(&cache, "a");
        keep(&cache, "b");
        assert!(kept(&cache, "a"), "a is now used after b");
        keep(&cache, "c");
        assert!(!kept(&cache, "b"), "b was the least recently used");
        assert!(kept(&cache, "a") && kept(&cache, "c"));
        keep(&cache, "d");
        assert!(!kept(&cache, "a") && kept(&cache, "c") && kept(&cache, "d"));
        assert_eq!(cache.lock().bytes, 200);
        // The thread bound, with bytes to spare.
        let cache = ConversationCache::with_limits(10_000, 2);
        for id in ["a", "b", "c"] {
            keep(&cache, id);
        }
        assert!(!kept(&cache, "a") && kept(&cache, "b") && kept(&cache, "c"));
        cache.forget("t", "b");
        assert_eq!(cache.lock().bytes, 100);
        // A text larger than the whole budget is not kept, and keeps nothing out.
        let cache = ConversationCache::with_limits(150, 8);
        keep(&cache, "a");
        cache.remember("t", "big", &run("big"), &Arc::new("x".repeat(151)));
        assert!(kept(&cache, "a") && !kept(&cache, "big"));
    }

    #[test]
    fn a_kept_text_is_charged_its_allocation_not_its_length() {
        let cache = ConversationCache::with_limits(1_000, 8);
        let mut text = String::with_capacity(400);
        text.push_str(&"a".repeat(100));
        cache.remember("t", "a", &run("a"), &Arc::new(text));
        assert_eq!(cache.lock().bytes, 400);
        // Two more such texts do not fit beside it: the oldest goes.
        for id in ["b", "c"] {
            let mut text = String::with_capacity(400);
            text.push_str(id);
            cache.remember("t", id, &run(id), &Arc::new(text));
        }
        assert_eq!(cache.lock().bytes, 800);
        assert!(!kept(&cache, "a"));
        cache.forget("t", "c");
        assert_eq!(cache.lock().bytes, 400);
        // One whose allocation is over the whole budget is not kept.
        let mut text = String::with_capacity(1_001);
        text.push('x');
        cache.remember("t", "d", &run("d"), &Arc::new(text));
        assert!(!kept(&cache, "d"));
    }

    fn tip(id: &str) -> Tip {
        Tip {
            reducer: Reducer::new(Conversation::default()),
            texts: vec![id.repeat(52 / id.len())],
            state: String::new(),
            path: vec![PathEntry {
                run_id: id.to_owned(),
                last_seq: 3,
                started_at: Timestamp(1),
                instance: 0,
                count: 1,
                mark: 0,
            }],
            bytes: 0,
            used: 0,
        }
    }

    fn has_tip(cache: &ConversationCache, id: &str) -> bool {
        cache.tip_run("t", id).as_deref() == Some(id)
    }

    #[test]
    fn tips_leave_least_recently_used_first_after_kept_texts() {
        // Each tip counts 52 + 48 + 64 = 164 bytes: room for two.
        let cache = ConversationCache::with_limits(400, 8);
        cache.put("t", "a", tip("a"));
        cache.put("t", "b", tip("b"));
        assert!(
            cache.compose("t", "a", &run("a")).is_some(),
            "a is read after b"
        );
        cache.put("t", "c", tip("c"));
        assert!(!has_tip(&cache, "b"), "b was the least recently used");
        assert!(has_tip(&cache, "a") && has_tip(&cache, "c"));
        assert_eq!(cache.lock().bytes, 328);
        // A kept text goes before any tip.
        let cache = ConversationCache::with_limits(400, 8);
        keep(&cache, "k");
        cache.put("t", "a", tip("a"));
        cache.put("t", "b", tip("b"));
        assert!(!kept(&cache, "k") && has_tip(&cache, "a") && has_tip(&cache, "b"));
        // The thread bound.
        let cache = ConversationCache::with_limits(10_000, 2);
        for id in ["a", "b", "c"] {
            cache.put("t", id, tip(id));
        }
        assert!(!has_tip(&cache, "a") && has_tip(&cache, "b") && has_tip(&cache, "c"));
    }
}
