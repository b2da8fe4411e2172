//! The [`EventStore`] trait.

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};

use crate::error::{Result, StoreError};
use crate::index::BatchPlan;
use crate::subscribe::EventStream;
use crate::types::{
    AppendRequest, Appended, EventPage, RunFilter, RunPage, RunRecord, RunStatus, StoreStats,
    StoredEvent, ThreadFilter, ThreadInfo, ThreadPage,
};
use crate::{Channel, Conversation, restore};

/// A run's conversation, restored.
///
/// The conversation is handed over as the JSON text of `{messages, state}`,
/// exactly as checkpointed: restoring from a checkpoint costs reading and
/// checking its bytes, never parsing them. [`Restored::conversation`] parses
/// on demand.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The run.
    pub run_id: String,
    /// The last sequence number the conversation covers.
    pub last_seq: u64,
    /// `{"messages":[...],"state":...}` along the run's branch, up to the
    /// run's last event.
    pub json: String,
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

/// A persistent, tenant-scoped log of AG-UI events per thread, with a run
/// index, checkpoints and live subscriptions.
///
/// Every method is scoped by a tenant id: a thread of one tenant is invisible
/// to every other (`NotFound`). Ids are arbitrary non-empty strings of at most
/// [`crate::MAX_ID_BYTES`] bytes (NUL, `../`, RTL marks and emoji included)
/// and must round-trip exactly.
///
/// The trait is object safe: the CLI and the server hold `Arc<dyn EventStore>`.
/// Methods with a default body are written once here in terms of the others;
/// backends may override them with something faster.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Appends one batch atomically: either every event gets the next
    /// sequence numbers, or nothing is written. Creates the thread on its
    /// first append. Updates the run index (see [`crate::index`]) and, for
    /// each run the batch ends, stores the run's checkpoint before returning.
    ///
    /// Errors: `Conflict` when `expected_seq` does not match the thread's last
    /// sequence; `Invalid` for an empty batch, bad ids or a bad `RUN_STARTED`.
    async fn append(&self, tenant: &str, thread: &str, req: AppendRequest) -> Result<Appended>;

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

    /// Deletes a thread and everything of it (events, runs, checkpoints) and
    /// ends its subscriptions. `NotFound` when it does not exist.
    async fn delete_thread(&self, tenant: &str, thread: &str) -> Result<()>;

    /// Gives thread `from` (its events, runs, checkpoints and channels) the
    /// id `to`, in one atomic step: a reader sees either `from` or `to`,
    /// never both or a part. `NotFound` when `from` does not exist;
    /// `Conflict` when `to` has events or channel state (nothing changed).
    /// Subscriptions to either id end. The events keep their JSON as stored
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

    /// Subscribes to a thread from sequence `from_seq` on: committed events
    /// first, then every event appended later, each exactly once and in
    /// order. The thread need not exist yet. The stream ends when the thread
    /// is deleted or the store closes.
    async fn subscribe(&self, tenant: &str, thread: &str, from_seq: u64) -> Result<EventStream>;

    /// Claims a thread for one run of the calling gateway process (`run`;
    /// an empty id claims it for an operation such as deleting the thread)
    /// until [`EventStore::release_thread`], so that processes sharing the
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

    /// Releases a claim of [`EventStore::claim_thread`] made for `run`.
    async fn release_thread(&self, tenant: &str, thread: &str, run: &str) -> Result<()> {
        let _ = (tenant, thread, run);
        Ok(())
    }

    /// Marks every run still `running` in any tenant as `interrupted` (call
    /// once at start-up, after a crash). Returns how many runs changed.
    async fn mark_interrupted(&self) -> Result<u64>;

    /// Marks `interrupted` the `running` runs of other processes that are
    /// gone, never this store's own, so a gateway may call it while it runs
    /// (a store shared by replicas). Single-process stores have no such runs
    /// once started: 0.
    async fn mark_interrupted_elsewhere(&self) -> Result<u64> {
        Ok(0)
    }

    /// Store-wide totals.
    async fn stats(&self) -> Result<StoreStats>;

    /// Makes every acknowledged append durable on stable storage.
    async fn flush(&self) -> Result<()>;

    /// Flushes and closes. Every later call fails with `Unavailable`; open
    /// subscriptions end.
    async fn close(&self) -> Result<()>;

    /// Every channel of a thread (see [`crate::channel`]), by agent name.
    /// Empty when the thread has none or does not exist.
    async fn channels(&self, tenant: &str, thread: &str) -> Result<Vec<Channel>>;

    /// Stores (or replaces) one agent's channel on a thread. `NotFound` when
    /// the thread does not exist; `Invalid` when [`Channel::check`] fails.
    /// [`EventStore::delete_thread`] removes a thread's channels with it.
    async fn put_channel(&self, tenant: &str, thread: &str, channel: Channel) -> Result<()>;

    /// One agent's channel on a thread, if it has one.
    async fn channel(&self, tenant: &str, thread: &str, agent: &str) -> Result<Option<Channel>> {
        Ok(self
            .channels(tenant, thread)
            .await?
            .into_iter()
            .find(|c| c.agent == agent))
    }

    /// Events `first..=last` of a thread, in order.
    async fn read_range(
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

    /// Streams a thread's committed events from `from_seq` on, page by page.
    fn read_stream<'a>(
        &'a self,
        tenant: &'a str,
        thread: &'a str,
        from_seq: u64,
    ) -> BoxStream<'a, Result<StoredEvent>> {
        let pages = stream::unfold(Some(from_seq.max(1)), move |next| async move {
            let from = next?;
            match self.read(tenant, thread, from, 1000).await {
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
    async fn read_run(&self, tenant: &str, thread: &str, run_id: &str) -> Result<Vec<StoredEvent>> {
        let run = self.run(tenant, thread, run_id).await?;
        self.read_range(tenant, thread, run.first_seq, run.last_seq)
            .await
    }

    /// The runs of a branch, root first, ending with `run_id` (following
    /// parent links that point to earlier runs of the same thread).
    async fn branch(&self, tenant: &str, thread: &str, run_id: &str) -> Result<Vec<RunRecord>> {
        let mut path = vec![self.run(tenant, thread, run_id).await?];
        loop {
            let child = &path[path.len() - 1];
            let Some(parent_id) = child.parent_run_id.clone() else {
                break;
            };
            let parent = match self.run(tenant, thread, &parent_id).await {
                Ok(p) => p,
                Err(e) if e.kind() == crate::ErrorKind::NotFound => break,
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
    /// first run), then the events of every run on the path root → `run_id`.
    async fn read_branch(
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
        Ok(out)
    }

    /// Restores a run's conversation: its own checkpoint (with the delta
    /// checkpoints' bases) when valid and current, else the nearest valid
    /// checkpoint up its branch plus the log from there (storing every
    /// checkpoint it rebuilds). A damaged or stale checkpoint is never used.
    async fn restore(&self, tenant: &str, thread: &str, run_id: &str) -> Result<Restored> {
        restore::restore_run(self, tenant, thread, run_id).await
    }

    /// The backend's cache of the latest conversation built per thread, if it
    /// keeps one: building the next run's checkpoint then reduces only the
    /// run's own events and stores a delta (see [`crate::restore`]) instead
    /// of restoring the parent and writing the whole conversation.
    fn conversation_cache(&self) -> Option<&crate::ConversationCache> {
        None
    }

    /// Builds and stores the checkpoints of the runs a batch ended (see
    /// [`crate::restore::checkpoint_run`]). Backends call this at the end of
    /// `append`. Failures are not append failures (the
    /// events are committed): a run whose checkpoint could not be built gets
    /// it rebuilt on its first restore.
    async fn checkpoint_ended_runs(&self, tenant: &str, thread: &str, plan: &BatchPlan) {
        for run in plan.runs.iter().filter(|r| r.ended) {
            let _ = restore::checkpoint_run(self, tenant, thread, &run.run_id).await;
        }
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
