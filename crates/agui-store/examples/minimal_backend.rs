//! A minimal storage backend for agui: a template to copy.
//!
//! The engine (`agui_store::Store`) asks a storage technology only for the
//! primitives of the `agui_store::Backend` trait. This example implements
//! every required one over the simplest state there is, one `Mutex` around a
//! map of threads, and leans on the helpers agui-store exports so that it
//! numbers events, indexes runs and pages exactly like the shipped
//! backends:
//!
//! - The engine plans every batch (sequence numbers, receive time, run
//!   updates: `index::BatchPlan`) against the thread's head, and the backend
//!   commits the plan if that head is still the thread's.
//!   `index::RunTable` holds a thread's runs in memory and applies a plan's
//!   run updates (the memory and file backends use it too).
//! - `cursor::{filter_runs, page_threads}` page runs and threads with the
//!   shared opaque cursors; `EventPage::new` cuts event pages.
//!
//! Live subscriptions are the engine's: it publishes each batch this backend
//! commits (a backend that other processes write to as well implements
//! `Backend::attach_hub` and `Backend::watch` to report their changes, as
//! PostgreSQL does from LISTEN/NOTIFY).
//!
//! To put agui on a new storage technology, copy this file and replace each
//! method's body with what its comment names. The engine does the rest
//! (building checkpoints, restoring, reading branches): a backend never builds
//! a checkpoint, reduces events or caches a conversation.
//!
//! Run it: `cargo run -p agui-store --example minimal_backend`.
//! Check it against the shared conformance suite:
//! `cargo test -p agui-store --example minimal_backend`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use agui_store::cursor::{filter_runs, page_threads};
use agui_store::index::{RunTable, ThreadHead};
use agui_store::{
    AppendRequest, Backend, Batch, Channel, Commit, EventPage, Result, RunFilter, RunPage,
    RunRecord, Store, StoreError, StoreStats, StoredEvent, ThreadFilter, ThreadInfo, ThreadPage,
    Timestamp, page_size,
};
use async_trait::async_trait;

/// Everything stored, by (tenant, thread): the stand-in for a database. A
/// real backend keeps tables, files or keys here instead (events, runs,
/// checkpoints, channels), each keyed by tenant and thread.
type Data = Arc<Mutex<HashMap<(String, String), Thread>>>;

/// One thread: its log, its run index, its checkpoint blobs and channels.
struct Thread {
    /// The log, in sequence order (`events[i].seq == i + 1`).
    events: Vec<StoredEvent>,
    /// The run index in log order, and run id → place in `runs`.
    runs: RunTable,
    /// What the engine plans against: last sequence number, last receive
    /// time, last run and its status (the last plan's `head`).
    head: ThreadHead,
    agent: Option<String>,
    created_at: Timestamp,
    /// JSON bytes of all the events.
    bytes: u64,
    /// Checkpoint blobs by run id, opaque to the backend.
    checkpoints: HashMap<String, Vec<u8>>,
    /// Channels by agent name (sorted: `channels` lists them by name).
    channels: BTreeMap<String, Channel>,
}

impl Thread {
    fn new(created_at: Timestamp) -> Thread {
        Thread {
            events: Vec::new(),
            runs: RunTable::new(),
            head: ThreadHead::default(),
            agent: None,
            created_at,
            bytes: 0,
            checkpoints: HashMap::new(),
            channels: BTreeMap::new(),
        }
    }

    fn info(&self, id: &str) -> ThreadInfo {
        ThreadInfo {
            thread_id: id.to_owned(),
            agent: self.agent.clone(),
            created_at: self.created_at,
            updated_at: self.head.updated_at.unwrap_or(self.created_at),
            last_seq: self.head.last_seq,
            run_count: self.runs.len() as u64,
            bytes: self.bytes,
        }
    }
}

/// The backend: the stored data, plus what belongs to one open store
/// (whether it was closed). Clones share both.
#[derive(Clone)]
struct MinimalBackend {
    data: Data,
    closed: Arc<AtomicBool>,
}

fn key(tenant: &str, thread: &str) -> (String, String) {
    (tenant.to_owned(), thread.to_owned())
}

fn lock(data: &Data) -> MutexGuard<'_, HashMap<(String, String), Thread>> {
    data.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MinimalBackend {
    /// Opens a store over `data`. A real backend opens its URL here:
    /// connects, creates or migrates its schema, takes its locks.
    fn open(data: Data) -> MinimalBackend {
        MinimalBackend {
            data,
            closed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The data, or `Unavailable` once closed (every call checks this).
    fn data(&self) -> Result<MutexGuard<'_, HashMap<(String, String), Thread>>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::unavailable("the store is closed"));
        }
        Ok(lock(&self.data))
    }

    /// Runs `f` on one thread; `NotFound` when the thread does not exist.
    fn with_thread<R>(
        &self,
        tenant: &str,
        thread: &str,
        f: impl FnOnce(&mut Thread) -> Result<R>,
    ) -> Result<R> {
        let mut data = self.data()?;
        let t = data
            .get_mut(&key(tenant, thread))
            .ok_or_else(|| StoreError::not_found("thread"))?;
        f(t)
    }
}

// Left to their defaults: `claim_thread`/`release_thread`,
// `mark_interrupted_elsewhere` and `shared` (a store one process opens at a
// time needs no cross-process registry and no background sweep; a shared
// one implements them with leases or advisory locks, and says `shared`), and `checkpoint_chain` (a run and its own blob; a SQL
// backend reads a run's whole delta chain in one recursive query).
#[async_trait]
impl Backend for MinimalBackend {
    /// A real backend: one query for the thread's row (last sequence
    /// number, last receive time, last run and its status).
    async fn head(&self, tenant: &str, thread: &str) -> Result<ThreadHead> {
        let data = self.data()?;
        let t = data.get(&key(tenant, thread));
        Ok(t.map(|t| t.head.clone()).unwrap_or_default())
    }

    /// A real backend: one transaction that reads the thread's head (locking
    /// its row), compares it with the head the engine planned against,
    /// inserts the events and the plan's run updates, stores the new head and
    /// commits. The engine publishes the batch to subscribers.
    async fn commit(&self, tenant: &str, thread: &str, batch: &Batch) -> Result<Commit> {
        let mut data = self.data()?;
        let existing = data.get(&key(tenant, thread));
        if let Some(now) = batch.moved_from(existing.map(|t| &t.head)) {
            // Another writer came first: write nothing, the engine plans
            // again over this head.
            return Ok(Commit::HeadMoved(now));
        }
        // A run id the thread already has is refused (a real backend: the
        // runs table's primary key fails the transaction).
        if let Some(t) = existing {
            t.runs.refuse_reused(&batch.plan)?;
        }
        let plan = &batch.plan;
        // A real backend: an upsert of the thread's row.
        let t = data
            .entry(key(tenant, thread))
            .or_insert_with(|| Thread::new(plan.received_at));
        // An insert of the events (numbered from `plan.first_seq`, received
        // at `plan.received_at`): one row per batch, or per event.
        t.events.extend(plan.stored(batch.events.clone()));
        // An insert per new run and an update per continuing one.
        t.runs.apply(thread, plan);
        // The thread row's update: its new head, agent and byte count.
        (t.head, t.bytes) = (plan.head.clone(), t.bytes + plan.bytes);
        t.agent = batch.agent.clone().or(t.agent.take());
        // A real backend says whether the batch reached stable storage before
        // returning (see `Batch::must_sync`); memory never does.
        Ok(Commit::Done { durable: false })
    }

    /// A real backend: one range query (`seq >= from_seq` in order, `limit`
    /// rows) and the thread's last sequence number, which tells
    /// `EventPage::new` whether more follow.
    async fn read(
        &self,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<EventPage> {
        self.with_thread(tenant, thread, |t| {
            let skip = usize::try_from(from_seq.max(1) - 1).unwrap_or(usize::MAX);
            let events = t.events.iter().skip(skip).take(page_size(limit));
            Ok(EventPage::new(events.cloned().collect(), t.head.last_seq))
        })
    }

    /// A real backend: one query by (tenant, thread, run id).
    async fn run(&self, tenant: &str, thread: &str, run_id: &str) -> Result<RunRecord> {
        self.with_thread(tenant, thread, |t| t.runs.get(run_id).cloned())
    }

    /// A real backend: one query over its run table with the filter's terms
    /// and the cursor's position, ordered by `cursor::run_key`, `limit + 1`
    /// rows, cut by `cursor::run_page`. Here `filter_runs` does all of it.
    async fn list_runs(&self, tenant: &str, filter: &RunFilter) -> Result<RunPage> {
        let after = filter.after()?;
        let data = self.data()?;
        let runs = data
            .iter()
            .filter(|((tn, th), _)| {
                tn == tenant && filter.thread_id.as_ref().is_none_or(|w| w == th)
            })
            .flat_map(|(_, t)| t.runs.iter());
        Ok(filter_runs(runs, filter, after.as_ref()))
    }

    /// A real backend: one query on its thread table.
    async fn thread(&self, tenant: &str, thread: &str) -> Result<ThreadInfo> {
        self.with_thread(tenant, thread, |t| Ok(t.info(thread)))
    }

    /// A real backend: one query, newest activity first (`cursor::thread_key`
    /// order) after the cursor, `limit + 1` rows, cut by `cursor::thread_page`;
    /// here `cursor::page_threads` does all of it over the threads in memory.
    async fn list_threads(&self, tenant: &str, filter: &ThreadFilter) -> Result<ThreadPage> {
        let data = self.data()?;
        let mine = data.iter().filter(|((tn, _), _)| tn == tenant);
        page_threads(mine.map(|((_, id), t)| t.info(id)), filter)
    }

    /// A real backend: one transaction deleting the thread's events, runs,
    /// checkpoints and channels (the engine ends the thread's subscriptions).
    async fn delete_thread(&self, tenant: &str, thread: &str) -> Result<()> {
        let mut data = self.data()?;
        data.remove(&key(tenant, thread))
            .ok_or_else(|| StoreError::not_found("thread"))?;
        Ok(())
    }

    /// A real backend: one transaction that checks `to` is free and rewrites
    /// the thread id of every row of `from` (a file backend: one rename).
    async fn rename_thread(&self, tenant: &str, from: &str, to: &str) -> Result<()> {
        let mut data = self.data()?;
        if !data.contains_key(&key(tenant, from)) {
            return Err(StoreError::not_found("thread"));
        }
        if from == to {
            return Ok(());
        }
        // A thread exists here only once it has events (a channel needs its
        // thread), so "`to` has events or channel state" is "`to` exists".
        if data.contains_key(&key(tenant, to)) {
            return Err(StoreError::thread_exists(to));
        }
        let mut t = data
            .remove(&key(tenant, from))
            .ok_or_else(|| StoreError::not_found("thread"))?;
        t.runs.rename(to);
        data.insert(key(tenant, to), t);
        Ok(())
    }

    /// A real backend: one `SELECT DISTINCT tenant` query.
    async fn tenants(&self) -> Result<Vec<String>> {
        let data = self.data()?;
        let tenants: BTreeSet<&String> = data.keys().map(|(tenant, _)| tenant).collect();
        Ok(tenants.into_iter().cloned().collect())
    }

    /// A real backend: one query by run id, returning the bytes as stored.
    async fn load_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<Option<Vec<u8>>> {
        self.with_thread(tenant, thread, |t| Ok(t.checkpoints.get(run_id).cloned()))
    }

    /// A real backend: one upsert, refused when the run is not in the index.
    async fn save_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
        blob: Vec<u8>,
    ) -> Result<()> {
        self.with_thread(tenant, thread, |t| {
            if !t.runs.contains(run_id) {
                return Err(StoreError::not_found("run"));
            }
            t.checkpoints.insert(run_id.to_owned(), blob);
            Ok(())
        })
    }

    /// A real backend: one `UPDATE runs SET status = 'interrupted' WHERE
    /// status = 'running' RETURNING ...` (the runs it marked, with their
    /// tenants), in the same transaction as each thread's head.
    async fn mark_interrupted(&self) -> Result<Vec<(String, RunRecord)>> {
        let mut data = self.data()?;
        let now = Timestamp::now();
        let mut marked = Vec::new();
        for ((tenant, _), t) in data.iter_mut() {
            let runs = t.runs.interrupt_running(&mut t.head, now);
            marked.extend(runs.into_iter().map(|r| (tenant.clone(), r)));
        }
        Ok(marked)
    }

    /// A real backend: a flag it sets when a flush to disk failed (it then
    /// refuses writes until reopened), or one round trip to its database.
    async fn ready(&self) -> Result<()> {
        self.data().map(drop)
    }

    /// A real backend: one aggregate query (or counters kept on commit).
    async fn stats(&self) -> Result<StoreStats> {
        let data = self.data()?;
        let mut s = StoreStats::default();
        let tenants: BTreeSet<&String> = data.keys().map(|(tenant, _)| tenant).collect();
        s.tenants = tenants.len() as u64;
        for t in data.values() {
            let blobs: u64 = t.checkpoints.values().map(|b| b.len() as u64).sum();
            s.threads += 1;
            s.runs += t.runs.len() as u64;
            s.events += t.head.last_seq;
            s.raw_bytes += t.bytes;
            s.stored_bytes += t.bytes + blobs;
        }
        Ok(s)
    }

    /// A real backend: fsync, or wait for its group commit to sync.
    async fn flush(&self) -> Result<()> {
        self.data().map(drop)
    }

    /// A real backend: flush, then close its connections or files. Every
    /// later call fails with `Unavailable` (the engine ends subscriptions).
    async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        Ok(())
    }

    /// A real backend: one query by thread, ordered by agent name.
    async fn channels(&self, tenant: &str, thread: &str) -> Result<Vec<Channel>> {
        let data = self.data()?;
        let channels = data.get(&key(tenant, thread)).map(|t| t.channels.values());
        Ok(channels.into_iter().flatten().cloned().collect())
    }

    /// A real backend: one upsert by (tenant, thread, agent), refused when
    /// the thread does not exist.
    async fn put_channel(&self, tenant: &str, thread: &str, channel: Channel) -> Result<()> {
        self.with_thread(tenant, thread, |t| {
            t.channels.insert(channel.agent.clone(), channel);
            Ok(())
        })
    }
}

/// Opens the engine over the backend, appends one run, restores it and
/// prints its conversation.
#[tokio::main]
async fn main() -> Result<()> {
    let store = Store::new(MinimalBackend::open(Data::default()));
    let (tenant, thread) = ("demo-tenant", "thread-1");
    let run = agui_store::sample::full_run(thread, "run-1", None, "Hello from a minimal backend!");
    let appended = store
        .append(tenant, thread, AppendRequest::new(run).agent("demo"))
        .await?;
    println!(
        "appended events {}..={}",
        appended.first_seq, appended.last_seq
    );
    let restored = store.restore(tenant, thread, "run-1").await?;
    println!("{}", restored.json);
    store.close().await
}

/// The shared conformance suite, run against this backend.
#[cfg(test)]
mod tests {
    use super::*;
    use agui_store::conformance::Harness;

    /// One `Data` per test. `open` after `close` opens a new store over the
    /// same data, as a durable backend reopens its database.
    struct Minimal(Data);

    #[async_trait]
    impl Harness for Minimal {
        type Store = MinimalBackend;

        async fn open(&self) -> Result<MinimalBackend> {
            Ok(MinimalBackend::open(self.0.clone()))
        }

        async fn remove_checkpoint(
            &self,
            _store: &MinimalBackend,
            tenant: &str,
            thread: &str,
            run_id: &str,
        ) -> Result<()> {
            lock(&self.0)
                .get_mut(&key(tenant, thread))
                .and_then(|t| t.checkpoints.remove(run_id))
                .map(drop)
                .ok_or_else(|| StoreError::not_found("checkpoint"))
        }
    }

    agui_store::conformance_tests!(async { Minimal(Data::default()) });
}
