//! The [`Backend`] trait: the storage primitives a backend provides to the
//! engine ([`crate::Store`]).

use std::sync::Arc;

use async_trait::async_trait;

use agui_protocol::Event;

use crate::Channel;
use crate::error::Result;
use crate::index::{BatchPlan, ThreadHead};
use crate::subscribe::Hub;
use crate::types::{
    Durability, EventPage, RunFilter, RunPage, RunRecord, RunStatus, StoreStats, ThreadFilter,
    ThreadInfo, ThreadPage,
};

/// A persistent, tenant-scoped log of AG-UI events per thread with a run
/// index and checkpoint blobs: what a storage technology
/// provides under the engine ([`crate::Store`]), which owns batch planning,
/// checkpoint building, restore, branch reads, live subscriptions and every
/// convenience on top.
///
/// Every method is scoped by a tenant id: a thread of one tenant is invisible
/// to every other (`NotFound`). Ids are arbitrary non-empty strings of at most
/// [`crate::MAX_ID_BYTES`] bytes (NUL, `../`, RTL marks and emoji included)
/// and must round-trip exactly. The engine checks what it writes before a
/// backend sees it ([`crate::check_id`] on the ids of a commit, a rename's
/// new id and a channel's tenant and thread, [`Channel::check`] on a
/// channel), so a backend stores what it is given and checks none of it
/// again.
///
/// The trait is object safe: the engine holds an `Arc<dyn Backend>`.
#[async_trait]
pub trait Backend: Send + Sync {
    /// The thread's head as stored: what the engine plans a batch against
    /// (see [`crate::index::plan_batch`]). The default head (nothing
    /// stored) when the thread does not exist. A backend reports the head
    /// exactly as a commit of a plan leaves it (`plan.head`), so that a
    /// batch planned on a head read here commits unless another writer
    /// came first.
    async fn head(&self, tenant: &str, thread: &str) -> Result<ThreadHead>;

    /// Which of `run_ids` are runs of the thread (none when the thread does
    /// not exist). The engine asks before planning a batch whose
    /// `RUN_STARTED` names a `parentRunId` other than the head's last run
    /// (rare: a branch). The default asks [`Backend::run`] for each.
    async fn known_runs(
        &self,
        tenant: &str,
        thread: &str,
        run_ids: &[String],
    ) -> Result<Vec<String>> {
        let mut known = Vec::new();
        for id in run_ids {
            match self.run(tenant, thread, id).await {
                Ok(_) => known.push(id.clone()),
                Err(e) if e.kind() == crate::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(known)
    }

    /// Commits a batch the engine planned, atomically, if the thread's head
    /// is still `batch.head`: every event gets its planned sequence number
    /// and every run update of `batch.plan` is applied (creating the thread
    /// on its first commit), or nothing is written. When the head moved
    /// (another writer, task or replica committed first; runs were marked
    /// interrupted), writes nothing and returns [`Commit::HeadMoved`] with
    /// the head as it is now; the engine plans again.
    ///
    /// A run the batch starts whose id the thread already has is `Invalid`
    /// (nothing written): the engine does not look new run ids up before
    /// planning, the commit refuses a reuse where it writes (a primary key,
    /// a lookup in the run table).
    ///
    /// Neither plans, builds a checkpoint nor publishes to subscribers: the
    /// engine does all three.
    async fn commit(&self, tenant: &str, thread: &str, batch: &Batch) -> Result<Commit>;

    /// Reads up to `limit` events (see [`crate::page_size`]) from sequence
    /// `from_seq` on (`0` and `1` both mean the beginning).
    /// `NotFound` when the thread does not exist.
    async fn read(
        &self,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<EventPage>;

    /// One run's index entry. `NotFound` when the thread or run does not exist.
    async fn run(&self, tenant: &str, thread: &str, run_id: &str) -> Result<RunRecord>;

    /// Pages through the tenant's run index (by thread, parent run, status
    /// and start time), oldest start first.
    async fn list_runs(&self, tenant: &str, filter: &RunFilter) -> Result<RunPage>;

    /// A thread's summary. `NotFound` when it does not exist.
    async fn thread(&self, tenant: &str, thread: &str) -> Result<ThreadInfo>;

    /// Pages through the tenant's threads, most recently active first.
    async fn list_threads(&self, tenant: &str, filter: &ThreadFilter) -> Result<ThreadPage>;

    /// Deletes a thread and everything of it (events, runs, checkpoints; the
    /// engine ends its subscriptions). `NotFound` when it does not exist.
    async fn delete_thread(&self, tenant: &str, thread: &str) -> Result<()>;

    /// Gives thread `from` (its events, runs, checkpoints and channels) the
    /// id `to`, in one atomic step: a reader sees either `from` or `to`,
    /// never both or a part. `NotFound` when `from` does not exist;
    /// `Conflict` when `to` has events or channel state (nothing changed).
    /// (The engine ends subscriptions to either id.) The events keep their JSON as stored
    /// (a `threadId` inside them is not rewritten). Session imports write
    /// under a staging id and rename at the end, so that a failed or crashed
    /// import never leaves a partial thread under the target id.
    async fn rename_thread(&self, tenant: &str, from: &str, to: &str) -> Result<()>;

    /// Every tenant that has at least one thread (for migration and stats;
    /// an operator call, not one to expose per tenant).
    async fn tenants(&self) -> Result<Vec<String>>;

    /// The stored checkpoint blob of a run (see [`crate::checkpoint`]), as
    /// stored, unchecked. `Ok(None)` when there is none.
    async fn load_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<Option<Vec<u8>>>;

    /// Stores (or replaces) a run's checkpoint blob. `NotFound` when the run
    /// does not exist.
    async fn save_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
        blob: Vec<u8>,
    ) -> Result<()>;

    /// Gives the backend the engine's hub of live subscriptions (called
    /// once, when a [`crate::Store`] is made over it). The engine publishes
    /// every batch it commits itself; a backend that several processes
    /// share publishes there what the *other* processes commit and delete,
    /// for the threads [`Backend::watch`] named (PostgreSQL, from
    /// LISTEN/NOTIFY). A backend only one process opens keeps the default,
    /// which ignores it. `commit` never publishes.
    fn attach_hub(&self, hub: Arc<Hub>) {
        let _ = hub;
    }

    /// A subscription to the thread starts (the engine already listens on
    /// its hub): a backend shared by several processes starts reporting the
    /// others' changes to it. The default does nothing.
    fn watch(&self, tenant: &str, thread: &str) {
        let _ = (tenant, thread);
    }

    /// Claims a thread for one run of the calling gateway process (`run`;
    /// an empty id claims it for an operation such as deleting the thread)
    /// until [`Backend::release_thread`], so that processes sharing the
    /// store see a run in flight before it stored anything. `Ok(None)` when
    /// claimed; `Ok(Some(run))` when a live process already holds it. The
    /// claims of a process that is gone lapse.
    ///
    /// Stores that one process opens at a time (SQLite, file) keep the
    /// default: there the gateway's own table of runs in flight is the whole
    /// registry. Stores that several processes (or several gateways in one
    /// process) share implement it: PostgreSQL, memory.
    async fn claim_thread(&self, tenant: &str, thread: &str, run: &str) -> Result<Option<String>> {
        let _ = (tenant, thread, run);
        Ok(None)
    }

    /// Releases a claim of [`Backend::claim_thread`] made for `run`.
    async fn release_thread(&self, tenant: &str, thread: &str, run: &str) -> Result<()> {
        let _ = (tenant, thread, run);
        Ok(())
    }

    /// Marks every run still `running` in any tenant as `interrupted` (call
    /// once at start-up, after a crash), and returns each run it marked
    /// with its tenant, as it now stands (status `interrupted`, its
    /// `finished_at` set), so that the caller closes exactly those runs
    /// without listing and reading them again. A store shared by other
    /// processes ([`Backend::shared`]) marks only the runs of processes
    /// that are gone (and the caller's own): a live one's runs stay
    /// `running` and are not returned.
    async fn mark_interrupted(&self) -> Result<Vec<(String, RunRecord)>>;

    /// Marks `interrupted` the `running` runs of other processes that are
    /// gone, never this store's own, so a gateway may call it while it runs
    /// (a store shared by replicas), and returns each run it marked with its
    /// tenant, as it now stands, so that the caller closes exactly those:
    /// two callers racing never both get one run. Single-process stores have
    /// no such runs once started: none.
    async fn mark_interrupted_elsewhere(&self) -> Result<Vec<(String, RunRecord)>> {
        Ok(Vec::new())
    }

    /// Whether other processes may write this store while this one has it
    /// open (PostgreSQL, shared by replicas): only then can runs of
    /// another process that is gone turn up while this one runs, for
    /// [`Backend::mark_interrupted_elsewhere`] to find, and a gateway
    /// sweeps for them in the background. Cheap: a constant. The default,
    /// false, is for stores one process opens at a time (SQLite and the
    /// file store, which lock their files; memory, which lives in one
    /// process), whose `mark_interrupted_elsewhere` finds nothing once
    /// started: no sweep is run over them.
    fn shared(&self) -> bool {
        false
    }

    /// What the backend noticed in its files when it opened the store and
    /// set right or will set right (the file store: a log tail that fails
    /// its checksums, kept aside). `agui store check` reports them. The
    /// default: nothing.
    fn notices(&self) -> Vec<Notice> {
        Vec::new()
    }

    /// Whether the backend takes writes now: `Unavailable` (saying why)
    /// when it refuses them, for readiness probes. Cheap: a flag, or one
    /// round trip to a database. The default checks nothing.
    ///
    /// A store that is closed, whose earlier flush to disk failed (SQLite,
    /// file: it refuses writes until reopened) or whose database does not
    /// answer (PostgreSQL) is not ready.
    async fn ready(&self) -> Result<()> {
        Ok(())
    }

    /// Store-wide totals.
    async fn stats(&self) -> Result<StoreStats>;

    /// Makes every acknowledged append durable on stable storage.
    async fn flush(&self) -> Result<()>;

    /// Flushes and closes. Every later call fails with `Unavailable`.
    async fn close(&self) -> Result<()>;

    /// Every channel of a thread (see [`crate::channel`]), by agent name.
    /// Empty when the thread has none or does not exist.
    async fn channels(&self, tenant: &str, thread: &str) -> Result<Vec<Channel>>;

    /// Stores (or replaces) one agent's channel on a thread (already
    /// checked: [`Channel::check`]). `NotFound` when the thread does not
    /// exist.
    /// [`Backend::delete_thread`] removes a thread's channels with it.
    async fn put_channel(&self, tenant: &str, thread: &str, channel: Channel) -> Result<()>;

    /// A run's status and last sequence number, with the checkpoint blobs
    /// of its chain: the run's own blob first, then its base's, and so on,
    /// as far as the backend reads them in one go (at least the run's own
    /// blob when it has one). The engine checks and composes them; anything
    /// missing, damaged or stale sends it down the repairing path. `NotFound`
    /// when the thread or run does not exist.
    ///
    /// The default reads the run and its own blob; SQL backends read the
    /// whole chain in one query.
    async fn checkpoint_chain(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<CheckpointChain> {
        let run = self.run(tenant, thread, run_id).await?;
        let links = match self.load_checkpoint(tenant, thread, run_id).await? {
            Some(blob) => vec![(run.run_id, blob.into())],
            None => Vec::new(),
        };
        Ok(CheckpointChain {
            status: run.status,
            last_seq: run.last_seq,
            links,
        })
    }
}

/// What [`Backend::checkpoint_chain`] read.
#[derive(Debug, Clone)]
pub struct CheckpointChain {
    /// The run's status.
    pub status: RunStatus,
    /// The run's last sequence number.
    pub last_seq: u64,
    /// `(run id, blob)`, the run's own first, then each base (`Bytes`: a
    /// backend that keeps blobs in memory hands them over without a copy).
    pub links: Vec<(String, bytes::Bytes)>,
}

/// A batch the engine planned, for [`Backend::commit`].
#[derive(Debug, Clone)]
pub struct Batch {
    /// The head the plan was made against: commit only over this head.
    pub head: ThreadHead,
    /// What the batch does: sequence numbers, receive time, run updates
    /// and the head after it.
    pub plan: BatchPlan,
    /// The events, in order (`plan.first_seq` on).
    pub events: Vec<Event>,
    /// The agent to record on the thread (and, through the plan, on the
    /// runs it starts).
    pub agent: Option<String>,
    /// When the commit must be on stable storage before it returns.
    pub durability: Durability,
}

impl Batch {
    /// True when this commit must be durable before it returns under the
    /// batch's own durability (a backend configured stricter asks
    /// [`BatchPlan::must_sync`] with its own).
    pub fn must_sync(&self) -> bool {
        self.plan.must_sync(self.durability)
    }

    /// The head to report when the thread's stored head (`None`: no such
    /// thread, the default head) is not the one the batch was planned
    /// against; `None` when the batch may commit.
    pub fn moved_from(&self, stored: Option<&ThreadHead>) -> Option<ThreadHead> {
        let none = ThreadHead::default();
        let stored = stored.unwrap_or(&none);
        (*stored != self.head).then(|| stored.clone())
    }
}

/// What [`Backend::commit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Commit {
    /// Written; `durable` when it is on stable storage already.
    Done {
        /// On stable storage when the commit returned.
        durable: bool,
    },
    /// Nothing written: the thread's head is no longer the batch's.
    HeadMoved(ThreadHead),
}

/// Something a backend noticed when it opened the store (see
/// [`Backend::notices`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// What, where, and what was done about it.
    pub what: String,
    /// Whether it may be the loss of acknowledged data (damage), rather
    /// than the trace of a crash that lost nothing acknowledged.
    pub damage: bool,
}
