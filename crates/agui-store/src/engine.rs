//! The engine: [`Store`], one concrete type over any [`Backend`].
//!
//! The server, the CLI and the Python package hold a `Store`. It owns what
//! every backend used to repeat: batch planning, checkpoint building (off
//! the append path), restore and its repairs, branch reads, range reads and
//! streams.
//!
//! **Batch planning.** [`Store::append`] plans each batch
//! ([`crate::index::plan_batch`]) against the thread's head: the one its own
//! last commit to the thread left, else [`Backend::head`]. The backend
//! commits the plan only over that head ([`Backend::commit`]); when another
//! writer came first it writes nothing and reports the head as it is, and
//! the engine plans again over that one.
//!
//! **Checkpoints off the append path.** [`Store::append`] commits the batch
//! and returns; the committed batch (its events are shared, not copied) goes
//! to a queue that one background task drains in commit order. The task keeps
//! each thread's events since its last ended run, so when a run ends it
//! reduces the run's events on top of the cached conversation of its parent
//! and stores a delta checkpoint without reading anything back (see
//! [`crate::restore`]). A run whose events it does not hold (an append with
//! [`crate::Checkpoints::Defer`] in between, a run larger than the buffer, a
//! restart) is rebuilt from the log, as a missing checkpoint always was.
//!
//! **Live subscriptions are the engine's.** After each commit the engine
//! publishes the batch it committed (its events shared, nothing read back)
//! to its [`Hub`]; [`Store::subscribe`] listens there first, then catches up
//! from [`Backend::read`] (see [`crate::subscribe`]), so a subscriber gets
//! every event once, in order, whatever the backend. A backend that several
//! processes share gets the hub through [`Backend::attach_hub`] and
//! publishes what *other* processes commit and delete (PostgreSQL, from
//! LISTEN/NOTIFY); [`Backend::watch`] tells it which threads are followed.
//!
//! A restore first waits for the queued work of its thread, so it sees the
//! checkpoints of every run ended before it was called; [`Store::settle`]
//! waits for all of it, and [`Store::flush`] and [`Store::close`] settle
//! first. Checkpoints are an accelerator: work lost in a crash only makes a
//! later restore replay the log.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use agui_protocol::Event;
use futures::FutureExt;
use futures::stream::{self, BoxStream, StreamExt};
use tokio::sync::watch;

use crate::backend::{Backend, Batch, Commit};
use crate::checkpoint;
use crate::error::{ErrorKind, Result, StoreError};
use crate::index::{BatchPlan, RunUpdate, ThreadHead, parents_to_look_up, plan_batch};
use crate::subscribe::{EventStream, Hub, PageReader, catch_up_then_live, detached};
use crate::types::{
    AppendRequest, Appended, Checkpoints, EventPage, RunFilter, RunPage, RunRecord, RunStatus,
    StoreStats, StoredEvent, ThreadFilter, ThreadInfo, ThreadPage, Timestamp, check_id,
};
use crate::{Channel, Conversation};

mod provenance;
pub mod restore;

use restore::ConversationCache;

/// A run's conversation, restored.
///
/// The conversation is handed over as the JSON text of `{messages, state}`,
/// exactly as checkpointed: restoring from a checkpoint costs reading and
/// checking its bytes, never parsing them. [`Restored::conversation`] parses
/// on demand. The text is shared: the engine keeps the last one it composed
/// per thread, so restoring the same run again, unchanged, costs a reference
/// count, whatever the conversation's size.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The run.
    pub run_id: String,
    /// The last sequence number the conversation covers.
    pub last_seq: u64,
    /// `{"messages":[...],"state":...}` along the run's branch, up to the
    /// run's last event.
    pub json: Arc<String>,
    /// True when it was composed from stored checkpoints alone (the run's own
    /// and its bases), with nothing replayed or rebuilt.
    pub from_checkpoint: bool,
    /// How many checkpoints were rebuilt from the log (and stored) to answer.
    pub rebuilt: usize,
}

impl Restored {
    /// Parses the conversation (lossless: key order and numbers kept).
    pub fn conversation(&self) -> Result<Conversation> {
        serde_json::from_str(&self.json).map_err(|e| {
            StoreError::corrupt("a restored conversation is not valid JSON").with_source(e)
        })
    }
}

/// True when a run's status allows a checkpoint (its events are complete).
pub(crate) fn checkpointable(status: RunStatus) -> bool {
    status != RunStatus::Running
}

/// Maps a reduce failure to a portable error.
pub(crate) fn reduce_failed(err: agui_history::reduce::ReduceError) -> StoreError {
    StoreError::invalid("the branch's events cannot be reduced").with_source(err)
}

/// The store: the engine over one [`Backend`]. Cheap to clone (shared).
///
/// Every method is scoped by a tenant id (see [`Backend`]).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Arc<dyn Backend>,
    /// Live subscriptions: every committed batch is published here.
    hub: Arc<Hub>,
    /// Set by [`Store::close`]: no new subscription.
    closed: std::sync::atomic::AtomicBool,
    cache: ConversationCache,
    queue: Mutex<Queue>,
    /// The id of the last job finished (or abandoned).
    done: watch::Sender<u64>,
    /// The worker's per-thread event buffers (only the worker locks it).
    buffers: Mutex<Buffers>,
    /// The head each thread's last commit through this engine left: what
    /// the next append plans against without asking the backend. A hint:
    /// a commit over a head that moved writes nothing (see
    /// [`Backend::commit`]).
    heads: Mutex<Heads>,
    /// Each thread's lineage provenance, as far as checkpoints needed it.
    provenance: provenance::Provenances,
}

/// The engine's cache of thread heads, by tenant then thread: found and
/// updated with the caller's `&str`s, so the append path allocates no key.
#[derive(Default)]
struct Heads {
    by_tenant: HashMap<String, HashMap<String, ThreadHead>>,
    len: usize,
}

impl Heads {
    fn get(&self, tenant: &str, thread: &str) -> Option<&ThreadHead> {
        self.by_tenant.get(tenant)?.get(thread)
    }

    fn put(&mut self, tenant: &str, thread: &str, head: ThreadHead) {
        if let Some(h) = self
            .by_tenant
            .get_mut(tenant)
            .and_then(|m| m.get_mut(thread))
        {
            *h = head;
            return;
        }
        if self.len >= MAX_HEADS {
            self.clear();
        }
        self.len += 1;
        self.by_tenant
            .entry(tenant.to_owned())
            .or_default()
            .insert(thread.to_owned(), head);
    }

    fn remove(&mut self, tenant: &str, thread: &str) {
        if let Some(m) = self.by_tenant.get_mut(tenant)
            && m.remove(thread).is_some()
        {
            self.len -= 1;
            if m.is_empty() {
                self.by_tenant.remove(tenant);
            }
        }
    }

    fn clear(&mut self) {
        self.by_tenant.clear();
        self.len = 0;
    }
}

/// Thread heads the engine keeps at most (cleared when full).
const MAX_HEADS: usize = 100_000;

type Key = (String, String);

fn key(tenant: &str, thread: &str) -> Key {
    (tenant.to_owned(), thread.to_owned())
}

/// Checkpoint work waiting for the worker.
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// The id of the last job enqueued (ids start at 1).
    last_id: u64,
    /// The id of the last job enqueued per thread (the restore barrier).
    per_thread: HashMap<Key, u64>,
    /// True while a worker task drains the queue.
    running: bool,
}

/// One committed batch, for the checkpoint worker.
struct Job {
    id: u64,
    tenant: String,
    thread: String,
    first_seq: u64,
    /// The batch's events (shared with the caller's: `Event` is an `Arc`).
    events: Vec<Event>,
    /// How the batch changed the thread's runs.
    runs: Vec<RunUpdate>,
}

/// Per thread, the events committed since its last ended run.
#[derive(Default)]
struct Buffers {
    map: HashMap<Key, Buffer>,
    bytes: usize,
}

#[derive(Default)]
struct Buffer {
    /// Sequence number of `events[0]`.
    first_seq: u64,
    events: VecDeque<Event>,
    bytes: usize,
}

impl Buffer {
    fn next_seq(&self) -> u64 {
        self.first_seq + self.events.len() as u64
    }

    /// The events `first..=last`, when held.
    fn range(&self, first: u64, last: u64) -> Option<Vec<Event>> {
        if first < self.first_seq || last >= self.next_seq() || first > last {
            return None;
        }
        let from = (first - self.first_seq) as usize;
        let to = (last - self.first_seq) as usize;
        Some(self.events.range(from..=to).cloned().collect())
    }

    /// Drops the events up to `last`.
    fn drop_through(&mut self, last: u64) {
        while self.first_seq <= last && !self.events.is_empty() {
            if let Some(e) = self.events.pop_front() {
                self.bytes -= e.json().len();
            }
            self.first_seq += 1;
        }
        if self.events.is_empty() {
            self.first_seq = self.first_seq.max(last + 1);
        }
    }
}

/// Batches waiting for the checkpoint worker at most.
const MAX_QUEUED: usize = 16_384;
/// A thread's buffer holds at most this much event JSON: a run larger than
/// that is read back from the log when it ends.
const BUFFER_THREAD_BYTES: usize = 64 << 20;
/// All buffers together hold at most this much (runs that never end must
/// not keep their events forever).
const BUFFER_TOTAL_BYTES: usize = 256 << 20;

/// Ends the worker's turn: lets the next append or barrier start a worker,
/// and marks an abandoned job as done so no barrier waits for it forever
/// (the task is dropped when its runtime shuts down).
struct Turn<'a> {
    inner: &'a Inner,
    job: Option<u64>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.job.take() {
            self.inner.done.send_if_modified(|d| {
                let changed = *d < id;
                *d = (*d).max(id);
                changed
            });
        }
        let mut q = self.inner.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.running = false;
    }
}

impl Store {
    /// The engine over `backend`.
    pub fn new(backend: impl Backend + 'static) -> Store {
        Store::from_arc(Arc::new(backend))
    }

    /// The engine over a shared backend.
    pub fn from_arc(backend: Arc<dyn Backend>) -> Store {
        let hub = Arc::new(Hub::new());
        backend.attach_hub(hub.clone());
        Store {
            inner: Arc::new(Inner {
                backend,
                hub,
                closed: std::sync::atomic::AtomicBool::new(false),
                cache: ConversationCache::new(),
                queue: Mutex::new(Queue::default()),
                done: watch::channel(0).0,
                buffers: Mutex::new(Buffers::default()),
                heads: Mutex::new(Heads::default()),
                provenance: provenance::Provenances::default(),
            }),
        }
    }

    /// An engine over a fresh in-memory backend (`memory://`).
    pub fn memory() -> Store {
        Store::new(crate::MemoryStore::new())
    }

    /// The backend under the engine.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// The engine's cache of the latest checkpointed conversation per thread.
    pub(crate) fn conversation_cache(&self) -> &ConversationCache {
        &self.inner.cache
    }

    /// Forgets every conversation the engine holds in memory (the tips that
    /// the next checkpoints continue, and the texts kept for repeated
    /// restores). Nothing stored changes: the next restore of each thread
    /// reads its checkpoints, and the next checkpoint of each thread is a
    /// full one. For memory pressure, and for measuring cold restores.
    pub fn clear_cache(&self) {
        self.inner.cache.clear();
        self.inner.provenance.clear();
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.inner.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends one batch atomically: either every event gets the next
    /// sequence numbers, or nothing is written. Creates the thread on its
    /// first append and updates the run index (see [`crate::index`]). The
    /// checkpoints of the runs the batch ends are built in the background
    /// (see the module docs) unless the request defers them.
    ///
    /// Errors: `Conflict` when `expected_seq` does not match the thread's last
    /// sequence; `Invalid` for an empty batch, bad ids or a bad `RUN_STARTED`.
    pub async fn append(&self, tenant: &str, thread: &str, req: AppendRequest) -> Result<Appended> {
        check_id("tenant", tenant)?;
        check_id("thread", thread)?;
        if req.events.is_empty() {
            return Err(StoreError::invalid("an append needs at least one event"));
        }
        // A run set aside restores through its own thread once it joins it.
        let build = req.checkpoints == Checkpoints::Build && !crate::aside::is_aside_tenant(tenant);
        let (appended, plan, events) = self.plan_and_commit(tenant, thread, req).await?;
        // Listeners are asked after the commit: one that registered later
        // reads this batch in its catch-up.
        if self.inner.hub.has_listeners(tenant, thread) {
            let stored = plan.stored(events.clone());
            self.inner.hub.publish(tenant, thread, stored);
        }
        if build {
            self.enqueue(Job {
                id: 0,
                tenant: tenant.to_owned(),
                thread: thread.to_owned(),
                first_seq: plan.first_seq,
                events,
                runs: plan.runs,
            });
        }
        Ok(appended)
    }

    /// Plans the batch against the thread's head and commits it; plans
    /// again over the head the backend reports when another writer came
    /// first. The head comes from the engine's cache of the heads its own
    /// commits left (no read on the append path), else from the backend.
    /// Returns what the caller gets, the plan committed (its `head` taken
    /// into the cache) and the events.
    async fn plan_and_commit(
        &self,
        tenant: &str,
        thread: &str,
        req: AppendRequest,
    ) -> Result<(Appended, BatchPlan, Vec<Event>)> {
        let backend = &self.inner.backend;
        let now = req.received_at.unwrap_or_else(Timestamp::now);
        let (mut events, mut agent) = (req.events, req.agent);
        // The head to plan against, and whether the backend just reported
        // it (a cached one may be stale: any doubt about it is settled by
        // asking the backend, never by failing the request).
        let mut next = self.cached_head(tenant, thread).map(|h| (h, false));
        loop {
            let (head, fresh) = match next.take() {
                Some(h) => h,
                None => (backend.head(tenant, thread).await?, true),
            };
            if let Some(expected) = req.expected_seq.filter(|&e| e != head.last_seq) {
                if fresh {
                    return Err(StoreError::conflict(expected, head.last_seq));
                }
                continue;
            }
            // New run ids are not looked up: the commit refuses a reuse.
            let last_run = head.last_run.as_ref().map(|(id, _)| id.as_str());
            let parents = parents_to_look_up(&events, last_run);
            let known = if parents.is_empty() {
                Vec::new()
            } else if crate::aside::is_aside_tenant(tenant) {
                // A run set aside names its parent in its own thread.
                parents
            } else {
                backend.known_runs(tenant, thread, &parents).await?
            };
            let planned = plan_batch(&head, &events, agent.as_deref(), now, |id| {
                Ok(known.iter().any(|k| k == id))
            });
            let plan = match planned {
                Ok(plan) => plan,
                Err(e) if fresh => return Err(e),
                Err(_) => continue,
            };
            let batch = Batch {
                head,
                plan,
                events,
                agent,
                durability: req.durability,
            };
            match backend.commit(tenant, thread, &batch).await {
                Ok(Commit::Done { durable }) => {
                    let Batch {
                        mut plan, events, ..
                    } = batch;
                    let appended = Appended {
                        first_seq: plan.first_seq,
                        last_seq: plan.last_seq(),
                        received_at: plan.received_at,
                        durable,
                    };
                    // Moved, not copied: the caller reads no more of it.
                    self.remember_head(tenant, thread, std::mem::take(&mut plan.head));
                    return Ok((appended, plan, events));
                }
                Ok(Commit::HeadMoved(now_head)) => {
                    if now_head == batch.head {
                        return Err(StoreError::internal(
                            "the backend reported the thread's head moved, but it is unchanged",
                        ));
                    }
                    next = Some((now_head, true));
                    (events, agent) = (batch.events, batch.agent);
                }
                Err(e) => {
                    // The outcome may be unknown (a lost connection): the
                    // next append asks the backend.
                    self.forget_head(tenant, thread);
                    return Err(e);
                }
            }
        }
    }

    fn heads(&self) -> std::sync::MutexGuard<'_, Heads> {
        self.inner.heads.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cached_head(&self, tenant: &str, thread: &str) -> Option<ThreadHead> {
        self.heads().get(tenant, thread).cloned()
    }

    fn remember_head(&self, tenant: &str, thread: &str, head: ThreadHead) {
        self.heads().put(tenant, thread, head);
    }

    fn forget_head(&self, tenant: &str, thread: &str) {
        self.heads().remove(tenant, thread);
    }

    fn enqueue(&self, mut job: Job) {
        let start = {
            let mut q = self.queue();
            if q.jobs.len() >= MAX_QUEUED {
                // The worker is far behind: this batch gets no checkpoint
                // work (its thread's buffer sees a gap; a run it ends is
                // checkpointed by its first restore). Memory stays bounded.
                return;
            }
            q.last_id += 1;
            job.id = q.last_id;
            q.per_thread.insert(key(&job.tenant, &job.thread), job.id);
            q.jobs.push_back(job);
            !std::mem::replace(&mut q.running, true)
        };
        if start {
            self.start_worker();
        }
    }

    /// Starts a worker task (the caller set `running`).
    fn start_worker(&self) {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let store = self.clone();
                handle.spawn(async move { store.drain().await });
            }
            Err(_) => {
                // No runtime: the next barrier in one drains the queue.
                self.queue().running = false;
            }
        }
    }

    /// Drains the queue, job by job, in commit order.
    async fn drain(&self) {
        let mut turn = Turn {
            inner: &self.inner,
            job: None,
        };
        loop {
            let job = {
                let mut q = self.queue();
                match q.jobs.pop_front() {
                    Some(job) => job,
                    None => {
                        q.running = false;
                        // The turn is over; its drop must not clear a flag
                        // a newer worker set.
                        std::mem::forget(turn);
                        return;
                    }
                }
            };
            turn.job = Some(job.id);
            let id = job.id;
            let k = key(&job.tenant, &job.thread);
            self.run_job(job).await;
            turn.job = None;
            self.inner.done.send_modify(|d| *d = (*d).max(id));
            let mut q = self.queue();
            // The thread's barrier entry goes once its last job is done.
            if q.per_thread.get(&k) == Some(&id) {
                q.per_thread.remove(&k);
            }
        }
    }

    /// Feeds one committed batch to its thread's buffer and builds the
    /// checkpoints of the runs it ended. Failures are not append failures
    /// (the events are committed): a run whose checkpoint could not be built
    /// gets it rebuilt on its first restore.
    async fn run_job(&self, job: Job) {
        let k = key(&job.tenant, &job.thread);
        let (tenant, thread) = (&job.tenant, &job.thread);
        {
            let mut b = self.buffers();
            let bufs = &mut *b;
            let buf = bufs.map.entry(k.clone()).or_default();
            if buf.next_seq() != job.first_seq || buf.events.is_empty() {
                // A gap (deferred appends, another writer, a restart): start
                // over from this batch.
                bufs.bytes -= buf.bytes;
                *buf = Buffer {
                    first_seq: job.first_seq,
                    ..Buffer::default()
                };
            }
            for e in job.events {
                buf.bytes += e.json().len();
                bufs.bytes += e.json().len();
                buf.events.push_back(e);
            }
        }
        let mut through = None;
        for update in job.runs.iter().filter(|r| r.ended) {
            through = Some(update.last_seq);
            let Ok(run) = self.run(tenant, thread, &update.run_id).await else {
                continue;
            };
            if !checkpointable(run.status) {
                continue;
            }
            let events = self
                .buffers()
                .map
                .get(&k)
                .and_then(|b| b.range(run.first_seq, run.last_seq));
            let _ = restore::checkpoint_run(self, tenant, thread, &run, events).await;
        }
        let mut b = self.buffers();
        let bufs = &mut *b;
        let Some(buf) = bufs.map.get_mut(&k) else {
            return;
        };
        let before = buf.bytes;
        if let Some(last) = through {
            buf.drop_through(last);
        }
        if buf.bytes > BUFFER_THREAD_BYTES {
            let next = buf.next_seq();
            buf.drop_through(next.saturating_sub(1));
        }
        bufs.bytes -= before - buf.bytes;
        if buf.events.is_empty() {
            bufs.map.remove(&k);
        }
        if bufs.bytes > BUFFER_TOTAL_BYTES {
            bufs.map.clear();
            bufs.bytes = 0;
        }
    }

    fn buffers(&self) -> std::sync::MutexGuard<'_, Buffers> {
        self.inner.buffers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the checkpoint work queued for a thread so far is done.
    async fn settle_thread(&self, tenant: &str, thread: &str) {
        let target = self.queue().per_thread.get(&key(tenant, thread)).copied();
        if let Some(target) = target {
            self.wait_for(target).await;
        }
    }

    /// Waits until every checkpoint queued so far is built (or failed).
    pub async fn settle(&self) {
        let target = self.queue().last_id;
        self.wait_for(target).await;
    }

    async fn wait_for(&self, target: u64) {
        let mut rx = self.inner.done.subscribe();
        loop {
            if *rx.borrow_and_update() >= target {
                return;
            }
            // A worker whose runtime went away left jobs behind: start one.
            let restart = {
                let mut q = self.queue();
                !q.jobs.is_empty() && !std::mem::replace(&mut q.running, true)
            };
            if restart {
                self.start_worker();
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Reads up to `limit` events (see [`crate::page_size`]) from sequence
    /// `from_seq` on (`0` and `1` both mean the beginning).
    /// `NotFound` when the thread does not exist.
    pub async fn read(
        &self,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<EventPage> {
        self.inner
            .backend
            .read(tenant, thread, from_seq, limit)
            .await
    }

    /// One run's index entry. `NotFound` when the thread or run does not exist.
    pub async fn run(&self, tenant: &str, thread: &str, run_id: &str) -> Result<RunRecord> {
        self.inner.backend.run(tenant, thread, run_id).await
    }

    /// Pages through the tenant's run index (by thread, parent run, status
    /// and start time), oldest start first.
    pub async fn list_runs(&self, tenant: &str, filter: &RunFilter) -> Result<RunPage> {
        self.inner.backend.list_runs(tenant, filter).await
    }

    /// A thread's summary. `NotFound` when it does not exist.
    pub async fn thread(&self, tenant: &str, thread: &str) -> Result<ThreadInfo> {
        self.inner.backend.thread(tenant, thread).await
    }

    /// Pages through the tenant's threads, most recently active first.
    pub async fn list_threads(&self, tenant: &str, filter: &ThreadFilter) -> Result<ThreadPage> {
        self.inner.backend.list_threads(tenant, filter).await
    }

    /// Forgets what the engine holds of a thread. Its cached conversation
    /// is not checked against storage (it is what was stored); the
    /// conformance suite forgets it after damaging storage below the API, as
    /// a restart would.
    pub(crate) fn forget(&self, tenant: &str, thread: &str) {
        self.inner.cache.forget(tenant, thread);
        self.inner.provenance.forget(tenant, thread);
        self.forget_head(tenant, thread);
        let mut b = self.buffers();
        if let Some(buf) = b.map.remove(&key(tenant, thread)) {
            b.bytes -= buf.bytes;
        }
    }

    /// Deletes a thread and everything of it (events, runs, checkpoints) and
    /// ends its subscriptions. `NotFound` when it does not exist.
    pub async fn delete_thread(&self, tenant: &str, thread: &str) -> Result<()> {
        self.settle_thread(tenant, thread).await;
        self.forget(tenant, thread);
        let r = self.inner.backend.delete_thread(tenant, thread).await;
        self.forget(tenant, thread);
        if r.is_ok() {
            self.inner.hub.close_thread(tenant, thread);
        }
        r
    }

    /// Gives thread `from` the id `to` in one atomic step (see
    /// [`Backend::rename_thread`]).
    pub async fn rename_thread(&self, tenant: &str, from: &str, to: &str) -> Result<()> {
        check_id("thread", to)?;
        self.settle_thread(tenant, from).await;
        self.settle_thread(tenant, to).await;
        self.forget(tenant, from);
        self.forget(tenant, to);
        let r = self.inner.backend.rename_thread(tenant, from, to).await;
        self.forget(tenant, from);
        self.forget(tenant, to);
        if r.is_ok() && from != to {
            self.inner.hub.close_thread(tenant, from);
            self.inner.hub.close_thread(tenant, to);
        }
        r
    }

    /// Every tenant that has at least one thread.
    pub async fn tenants(&self) -> Result<Vec<String>> {
        self.inner.backend.tenants().await
    }

    /// The stored checkpoint blob of a run, as stored, unchecked (after the
    /// thread's queued checkpoint work).
    pub async fn load_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<Option<Vec<u8>>> {
        self.settle_thread(tenant, thread).await;
        self.inner
            .backend
            .load_checkpoint(tenant, thread, run_id)
            .await
    }

    /// Stores (or replaces) a run's checkpoint blob. `NotFound` when the run
    /// does not exist.
    pub async fn save_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
        blob: Vec<u8>,
    ) -> Result<()> {
        self.inner
            .backend
            .save_checkpoint(tenant, thread, run_id, blob)
            .await
    }

    /// Subscribes to a thread from sequence `from_seq` on: committed events
    /// first, then every event appended later (through this store, or by
    /// another process sharing a backend that reports it), each exactly once
    /// and in order. The thread need not exist yet. The stream ends when the
    /// thread is deleted or renamed, or the store closes.
    pub async fn subscribe(
        &self,
        tenant: &str,
        thread: &str,
        from_seq: u64,
    ) -> Result<EventStream> {
        check_id("tenant", tenant)?;
        check_id("thread", thread)?;
        if self.inner.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(StoreError::unavailable("the store is closed"));
        }
        // Listening before the first read: nothing committed in between is
        // missed (see `subscribe`).
        let rx = self.inner.hub.listen(tenant, thread);
        self.inner.backend.watch(tenant, thread);
        let backend = self.inner.backend.clone();
        let (tenant, thread) = (tenant.to_owned(), thread.to_owned());
        let read: PageReader = Arc::new(move |from| {
            let (backend, tenant, thread) = (backend.clone(), tenant.clone(), thread.clone());
            async move { backend.read(&tenant, &thread, from, 1000).await }.boxed()
        });
        Ok(catch_up_then_live(rx, from_seq, read))
    }

    /// Claims a thread for one run (see [`Backend::claim_thread`]).
    pub async fn claim_thread(
        &self,
        tenant: &str,
        thread: &str,
        run: &str,
    ) -> Result<Option<String>> {
        self.inner.backend.claim_thread(tenant, thread, run).await
    }

    /// Releases a claim made for `run`.
    pub async fn release_thread(&self, tenant: &str, thread: &str, run: &str) -> Result<()> {
        self.inner.backend.release_thread(tenant, thread, run).await
    }

    /// Marks every run still `running` as `interrupted` (at start-up), and
    /// returns the runs marked with their tenants, as they now stand (see
    /// [`Backend::mark_interrupted`]).
    pub async fn mark_interrupted(&self) -> Result<Vec<(String, RunRecord)>> {
        // Heads name their last run's status: any may change.
        self.heads().clear();
        let r = self.inner.backend.mark_interrupted().await;
        self.heads().clear();
        r
    }

    /// Marks `interrupted` the `running` runs of other processes that are
    /// gone, and returns them with their tenants (see
    /// [`Backend::mark_interrupted_elsewhere`]).
    pub async fn mark_interrupted_elsewhere(&self) -> Result<Vec<(String, RunRecord)>> {
        let marked = self.inner.backend.mark_interrupted_elsewhere().await?;
        if !marked.is_empty() {
            self.heads().clear();
        }
        Ok(marked)
    }

    /// Whether other processes may write the store while this one has it
    /// open (see [`Backend::shared`]): only then is a background sweep for
    /// the runs of processes that are gone
    /// ([`Store::mark_interrupted_elsewhere`]) worth running.
    pub fn shared(&self) -> bool {
        self.inner.backend.shared()
    }

    /// What the backend noticed in its files when it opened the store (see
    /// [`Backend::notices`]).
    pub fn notices(&self) -> Vec<crate::Notice> {
        self.inner.backend.notices()
    }

    /// Whether the store takes writes now (see [`Backend::ready`]):
    /// `Unavailable`, saying why, when it is closed or refuses writes.
    pub async fn ready(&self) -> Result<()> {
        if self.inner.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(StoreError::unavailable("the store is closed"));
        }
        self.inner.backend.ready().await
    }

    /// Store-wide totals.
    pub async fn stats(&self) -> Result<StoreStats> {
        self.inner.backend.stats().await
    }

    /// Builds the queued checkpoints, then makes every acknowledged append
    /// durable on stable storage.
    pub async fn flush(&self) -> Result<()> {
        self.settle().await;
        self.inner.backend.flush().await
    }

    /// Builds the queued checkpoints, flushes and closes. Every later call
    /// fails with `Unavailable`; open subscriptions end.
    pub async fn close(&self) -> Result<()> {
        self.settle().await;
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        let r = self.inner.backend.close().await;
        self.inner.hub.close_all();
        r
    }

    /// Every channel of a thread, by agent name.
    pub async fn channels(&self, tenant: &str, thread: &str) -> Result<Vec<Channel>> {
        self.inner.backend.channels(tenant, thread).await
    }

    /// Stores (or replaces) one agent's channel on a thread.
    pub async fn put_channel(&self, tenant: &str, thread: &str, channel: Channel) -> Result<()> {
        check_id("tenant", tenant)?;
        check_id("thread", thread)?;
        channel.check()?;
        self.inner
            .backend
            .put_channel(tenant, thread, channel)
            .await
    }

    /// One agent's channel on a thread, if it has one.
    pub async fn channel(
        &self,
        tenant: &str,
        thread: &str,
        agent: &str,
    ) -> Result<Option<Channel>> {
        Ok(self
            .channels(tenant, thread)
            .await?
            .into_iter()
            .find(|c| c.agent == agent))
    }

    /// Events `first..=last` of a thread, in order.
    pub async fn read_range(
        &self,
        tenant: &str,
        thread: &str,
        first: u64,
        last: u64,
    ) -> Result<Vec<StoredEvent>> {
        let mut out = Vec::new();
        let mut next = first.max(1);
        while next <= last {
            let want = usize::try_from(last - next + 1).unwrap_or(usize::MAX);
            let page = self.read(tenant, thread, next, want).await?;
            for e in page.events {
                if e.seq > last {
                    break;
                }
                next = e.seq + 1;
                out.push(e);
            }
            if page.next_seq.is_none() {
                break;
            }
        }
        Ok(out)
    }

    /// Streams a thread's committed events from `from_seq` on, page by page
    /// ([`crate::MAX_PAGE`] events each: a backend that stores large frames
    /// decodes a frame twice only where a page ends inside it).
    pub fn read_stream<'a>(
        &'a self,
        tenant: &'a str,
        thread: &'a str,
        from_seq: u64,
    ) -> BoxStream<'a, Result<StoredEvent>> {
        let pages = stream::unfold(Some(from_seq.max(1)), move |next| async move {
            let from = next?;
            // Detached: a reader that stops polling (a slow HTTP client of
            // an export) holds no pooled connection meanwhile.
            let (store, tn, th) = (self.clone(), tenant.to_owned(), thread.to_owned());
            let read = async move { store.read(&tn, &th, from, crate::MAX_PAGE).await };
            match detached(read.boxed()).await {
                Ok(page) => {
                    let more = page.next_seq;
                    Some((page.events.into_iter().map(Ok).collect::<Vec<_>>(), more))
                }
                Err(e) => Some((vec![Err(e)], None)),
            }
        });
        pages.flat_map(stream::iter).boxed()
    }

    /// One run's events (from its `RUN_STARTED` up to the next run's).
    pub async fn read_run(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<Vec<StoredEvent>> {
        let run = self.run(tenant, thread, run_id).await?;
        self.read_range(tenant, thread, run.first_seq, run.last_seq)
            .await
    }

    /// The runs of a branch, root first, ending with `run_id` (following
    /// parent links that point to earlier runs of the same thread).
    pub async fn branch(&self, tenant: &str, thread: &str, run_id: &str) -> Result<Vec<RunRecord>> {
        let mut path = vec![self.run(tenant, thread, run_id).await?];
        loop {
            let child = &path[path.len() - 1];
            let Some(parent_id) = child.parent_run_id.clone() else {
                break;
            };
            let parent = match self.run(tenant, thread, &parent_id).await {
                Ok(p) => p,
                Err(e) if e.kind() == ErrorKind::NotFound => break,
                Err(e) => return Err(e),
            };
            if parent.first_seq >= child.first_seq {
                break; // only earlier runs can be ancestors: no cycles
            }
            path.push(parent);
        }
        path.reverse();
        Ok(path)
    }

    /// The events of one branch: the thread's preamble (events before its
    /// first run), then the events of every run on the path root → `run_id`,
    /// as the history core's `Lineage::branch` gives them: a
    /// `RUN_STARTED.input.messages` or `MESSAGES_SNAPSHOT` that restates
    /// messages generated only on other branches comes without them (lineage
    /// provenance); every other event is as stored.
    pub async fn read_branch(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<Vec<StoredEvent>> {
        let path = self.branch(tenant, thread, run_id).await?;
        let mut out = restore::preamble(self, tenant, thread).await?;
        for run in &path {
            out.extend(
                self.read_range(tenant, thread, run.first_seq, run.last_seq)
                    .await?,
            );
        }
        if let Some(tip) = path.last() {
            let foreign = provenance::foreign_on_branch(
                self,
                tenant,
                thread,
                tip,
                &path,
                out.iter().map(|e| &e.event),
            )
            .await?;
            if !foreign.is_empty() {
                for e in &mut out {
                    if let Some(cleaned) = provenance::clean_one(&e.event, &foreign)? {
                        e.event = cleaned;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Restores a run's conversation: its own checkpoint (with the delta
    /// checkpoints' bases) when valid and current, else the nearest valid
    /// checkpoint up its branch plus the log from there (storing every
    /// checkpoint it rebuilds). A damaged or stale checkpoint is never used.
    /// Waits for the thread's queued checkpoint work first.
    pub async fn restore(&self, tenant: &str, thread: &str, run_id: &str) -> Result<Restored> {
        self.settle_thread(tenant, thread).await;
        let cache = &self.inner.cache;
        // The run as it is now: what a kept text must match to be current.
        let mut current: Option<RunRecord> = None;
        if let Some(kept) = cache.composed(tenant, thread, run_id) {
            let run = self.run(tenant, thread, run_id).await?;
            if checkpointable(run.status) && kept.matches(&run) {
                return Ok(Restored {
                    run_id: run.run_id,
                    last_seq: run.last_seq,
                    json: kept.json,
                    from_checkpoint: true,
                    rebuilt: 0,
                });
            }
            current = Some(run);
        }
        if cache.tip_run(tenant, thread).as_deref() == Some(run_id) {
            let run = match current.take() {
                Some(run) => run,
                None => self.run(tenant, thread, run_id).await?,
            };
            if checkpointable(run.status)
                && let Some(json) = cache.compose(tenant, thread, &run)
            {
                let json = Arc::new(json);
                cache.remember(tenant, thread, &run, &json);
                return Ok(Restored {
                    run_id: run.run_id,
                    last_seq: run.last_seq,
                    json,
                    from_checkpoint: true,
                    rebuilt: 0,
                });
            }
            current = Some(run);
        }
        // The run is read before its checkpoints: a text kept under this
        // record can then only be newer than it, never older (a thread
        // deleted and written again in between, here or by another
        // replica, has another start time, so the text is never matched).
        let run = match current {
            Some(run) => run,
            None => self.run(tenant, thread, run_id).await?,
        };
        let chain = self
            .inner
            .backend
            .checkpoint_chain(tenant, thread, run_id)
            .await?;
        let restored = if checkpointable(chain.status)
            && let Some(json) = checkpoint::compose_links(run_id, chain.last_seq, &chain.links)
        {
            Restored {
                run_id: run_id.to_owned(),
                last_seq: chain.last_seq,
                json: Arc::new(json),
                from_checkpoint: true,
                rebuilt: 0,
            }
        } else {
            restore::restore_run(self, tenant, thread, run_id).await?
        };
        if run.last_seq == restored.last_seq && checkpointable(run.status) {
            cache.remember(tenant, thread, &run, &restored.json);
        }
        Ok(restored)
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use crate::sample::{full_run, run_finished, run_started, text_message};

    const T: &str = "t";

    /// The conversation of each run, reduced from its branch's events.
    async fn reduced(store: &Store, thread: &str, run: &str) -> String {
        let mut r = agui_history::reduce::Reducer::new(Conversation::default());
        for e in store.read_branch(T, thread, run).await.unwrap() {
            r.apply(&e.event).unwrap();
        }
        serde_json::to_string(&r.into_conversation()).unwrap()
    }

    /// Runs appended batch by batch (start, content, end, as a gateway does)
    /// get their checkpoints from the events the engine holds: nothing is
    /// read back, most are deltas, and each restores exactly.
    #[tokio::test]
    async fn checkpoints_are_built_from_the_committed_batches_without_reading_back() {
        let mem = MemoryStore::new();
        let store = Store::new(mem.clone());
        let runs: Vec<String> = (0..12).map(|k| format!("r{k}")).collect();
        for (k, run) in runs.iter().enumerate() {
            let parent = k.checked_sub(1).map(|p| runs[p].as_str());
            let events = full_run("th", run, parent, &format!("answer {k}"));
            let (start, rest) = events.split_at(1);
            let (body, end) = rest.split_at(rest.len() - 1);
            for batch in [start, body, end] {
                store
                    .append(T, "th", AppendRequest::new(batch.to_vec()))
                    .await
                    .unwrap();
            }
        }
        store.settle().await;
        assert_eq!(mem.pages_read(), 0, "the worker read nothing back");
        let mut deltas = 0;
        for run in &runs {
            let blob = store.load_checkpoint(T, "th", run).await.unwrap();
            let blob = blob.expect("a checkpoint");
            let decoded = checkpoint::decode(&blob).unwrap();
            deltas += usize::from(decoded.base.is_some());
        }
        assert_eq!(deltas, runs.len() - 1, "a full checkpoint, then deltas");
        for run in &runs {
            let got = store.restore(T, "th", run).await.unwrap();
            assert!(got.from_checkpoint, "{run}");
            assert_eq!(*got.json, reduced(&store, "th", run).await, "{run}");
        }
    }

    /// A run the engine does not hold whole (its start was appended with
    /// deferred checkpoints) is read from the log, and still checkpointed.
    #[tokio::test]
    async fn a_run_it_does_not_hold_whole_is_read_from_the_log() {
        let mem = MemoryStore::new();
        let store = Store::new(mem.clone());
        store
            .append(
                T,
                "th",
                AppendRequest::new(full_run("th", "a", None, "one")),
            )
            .await
            .unwrap();
        let mut start = vec![run_started("th", "b", Some("a"))];
        start.extend(text_message("m-b", "two", 2));
        store
            .append(
                T,
                "th",
                AppendRequest::new(start).checkpoints(Checkpoints::Defer),
            )
            .await
            .unwrap();
        store
            .append(T, "th", AppendRequest::new(vec![run_finished("th", "b")]))
            .await
            .unwrap();
        store.settle().await;
        assert!(mem.pages_read() > 0, "run b was read back");
        let got = store.restore(T, "th", "b").await.unwrap();
        assert!(got.from_checkpoint);
        assert_eq!(*got.json, reduced(&store, "th", "b").await);
    }

    /// Two engines share one store. Engine B deletes a thread engine A has
    /// restored and writes it again with the same run, receive time and
    /// event count (an import or a migration keeps receive times): A's next
    /// restore, and the next run's checkpoint built on A's cached tip, are
    /// of the new thread, never of the text A kept.
    #[tokio::test]
    async fn a_thread_another_engine_wrote_again_is_never_answered_from_the_cache() {
        let mem = MemoryStore::new();
        let (a, b) = (Store::new(mem.clone()), Store::new(mem.clone()));
        let at = Timestamp(1_700_000_000_000_000);
        let write = |store: &Store, text: &'static str| {
            let store = store.clone();
            async move {
                let mut req = AppendRequest::new(full_run("x", "r", None, text));
                req.received_at = Some(at);
                store.append(T, "x", req).await.unwrap();
                store.settle().await;
            }
        };
        write(&a, "the old answer").await;
        let old = a.restore(T, "x", "r").await.unwrap();
        assert!(old.json.contains("the old answer"));
        b.delete_thread(T, "x").await.unwrap();
        write(&b, "the NEW answer").await;
        let want = b.restore(T, "x", "r").await.unwrap();
        assert!(want.json.contains("the NEW answer"));
        let got = a.restore(T, "x", "r").await.unwrap();
        assert_eq!(got.json, want.json, "A answered with the deleted thread");
        // A continues the thread: its checkpoint is built on the new thread.
        a.append(
            T,
            "x",
            AppendRequest::new(full_run("x", "r2", Some("r"), "more")),
        )
        .await
        .unwrap();
        a.settle().await;
        let next = Store::new(mem.clone()).restore(T, "x", "r2").await.unwrap();
        assert!(next.json.contains("the NEW answer"), "{}", next.json);
        assert!(!next.json.contains("the old answer"), "{}", next.json);
        assert_eq!(a.restore(T, "x", "r2").await.unwrap().json, next.json);
    }

    /// The latest run restores from the engine's cached tip: one copy of its
    /// text, no blob read (here the blob is even gone). A fresh engine (a
    /// restart) reads storage and rebuilds what is missing.
    #[tokio::test]
    async fn the_latest_run_restores_from_the_cached_tip() {
        let mem = MemoryStore::new();
        let store = Store::new(mem.clone());
        for k in 0..5 {
            let run = format!("r{k}");
            let parent = (k > 0).then(|| format!("r{}", k - 1));
            let events = full_run("th", &run, parent.as_deref(), "x");
            store
                .append(T, "th", AppendRequest::new(events))
                .await
                .unwrap();
        }
        let want = reduced(&store, "th", "r4").await;
        store.settle().await;
        assert!(mem.remove_checkpoint(T, "th", "r4"));
        let got = store.restore(T, "th", "r4").await.unwrap();
        assert_eq!((got.json.as_str(), got.rebuilt), (want.as_str(), 0));
        let fresh = Store::new(mem.clone());
        let got = fresh.restore(T, "th", "r4").await.unwrap();
        assert_eq!((got.json.as_str(), got.rebuilt), (want.as_str(), 1));
        // A late event joins r4: the tip no longer matches the run.
        store
            .append(
                T,
                "th",
                AppendRequest::new(vec![text_message("late", "y", 1)[0].clone()]),
            )
            .await
            .unwrap();
        let got = store.restore(T, "th", "r4").await.unwrap();
        assert!(!got.from_checkpoint, "the stale tip is not used");
    }

    /// A restore right after the append that ended a run waits for that
    /// run's checkpoint instead of replaying the log.
    #[tokio::test]
    async fn a_restore_sees_the_checkpoints_of_runs_ended_before_it() {
        let store = Store::memory();
        for k in 0..20 {
            let run = format!("r{k}");
            let parent = (k > 0).then(|| format!("r{}", k - 1));
            store
                .append(
                    T,
                    "th",
                    AppendRequest::new(full_run("th", &run, parent.as_deref(), "x")),
                )
                .await
                .unwrap();
            let got = store.restore(T, "th", &run).await.unwrap();
            assert!(got.from_checkpoint, "{run}");
            assert_eq!(got.rebuilt, 0);
        }
    }

    /// Under an aside tenant a run names its parent in another thread: the
    /// engine takes the parent as given (elsewhere it is refused), builds
    /// no checkpoint for it, and `check` finds nothing wrong.
    #[tokio::test]
    async fn an_aside_tenant_takes_parents_of_another_thread() {
        let store = Store::memory();
        let aside = crate::aside::aside_tenant(T);
        let thread = crate::aside::aside_thread("th", "b").unwrap();
        let refused = store
            .append(
                T,
                &thread,
                AppendRequest::new(full_run("th", "b", Some("a"), "x")),
            )
            .await
            .unwrap_err();
        assert_eq!(refused.kind(), crate::ErrorKind::Invalid, "{refused}");
        store
            .append(
                &aside,
                &thread,
                AppendRequest::new(full_run("th", "b", Some("a"), "x")),
            )
            .await
            .unwrap();
        store.settle().await;
        let run = store.run(&aside, &thread, "b").await.unwrap();
        assert_eq!(run.parent_run_id.as_deref(), Some("a"));
        assert_eq!(run.status, RunStatus::Finished);
        assert_eq!(
            store.load_checkpoint(&aside, &thread, "b").await.unwrap(),
            None
        );
        let report = crate::check::check_store(&store, |_| {}).await.unwrap();
        assert!(report.is_clean(), "{:?}", report.damage);
        assert!(report.notes.is_empty(), "{:?}", report.notes);
        assert_eq!(report.runs, 1);
    }
}
