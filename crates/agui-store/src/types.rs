//! The values that cross the [`crate::Store`] and [`crate::Backend`] APIs.

use std::time::{SystemTime, UNIX_EPOCH};

use agui_protocol::Event;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};

/// The longest tenant id, thread id or run id accepted, in bytes.
pub const MAX_ID_BYTES: usize = 64 * 1024;

/// The largest page any paged read returns, whatever the caller asks.
pub const MAX_PAGE: usize = 10_000;

/// A point in time: microseconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The current wall-clock time.
    pub fn now() -> Timestamp {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Timestamp(micros)
    }

    /// Microseconds since the Unix epoch.
    pub fn as_micros(self) -> i64 {
        self.0
    }
}

/// How durable an append is when it returns.
///
/// | choice | survives a process crash (SIGKILL) | survives an OS crash or power loss |
/// | --- | --- | --- |
/// | [`Durability::Append`] | everything acknowledged | everything acknowledged |
/// | [`Durability::RunEnd`] | everything acknowledged | everything up to the last acknowledged append that ended a run (`RUN_FINISHED`/`RUN_ERROR`) or asked for `Append`; later appends of a run still open may be lost |
///
/// Backends without stable storage (`memory://`) lose everything on any crash
/// whatever the choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Flush to stable storage before acknowledging every append (fsync or
    /// equivalent; concurrent appends share one flush).
    Append,
    /// Hand every append to the operating system before acknowledging it, and
    /// flush to stable storage only on appends that end a run. Much faster.
    #[default]
    RunEnd,
}

/// Whether an append builds the checkpoints of the runs it ends.
///
/// Checkpoints are an accelerator, never the truth: a run without one is
/// restored by replaying the log from the nearest checkpoint up its branch
/// (or from the thread's start), and that restore stores the checkpoints it
/// builds. Building them as batches arrive needs the thread's current
/// conversation in memory (see [`crate::restore`]), which for a very large
/// thread is the largest cost of copying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Checkpoints {
    /// Build and store the checkpoint of every run the batch ends, on the
    /// engine's background worker after the append returns (what a gateway
    /// appending live runs wants; a restore that comes first replays).
    #[default]
    Build,
    /// Build none: the append holds nothing but its batch. For bulk copies
    /// (`agui session import`, `agui store import`) whose memory must not
    /// grow with the thread's conversation; the first restore of a run
    /// afterwards replays its branch once and stores its checkpoints.
    Defer,
}

/// One atomic batch of events to append to a thread.
#[derive(Debug, Clone)]
pub struct AppendRequest {
    /// The events, in order. At least one.
    pub events: Vec<Event>,
    /// Optimistic concurrency: the sequence number of the thread's last event
    /// as the caller last saw it (`0` for "the thread must be empty"). A
    /// mismatch fails with [`crate::ErrorKind::Conflict`] and writes nothing.
    /// `None` appends after whatever is there.
    pub expected_seq: Option<u64>,
    /// The agent that produced the events, recorded on the thread and on the
    /// runs that start in this batch (filterable in [`ThreadFilter`]).
    pub agent: Option<String>,
    /// When the append must be durable (see [`Durability`]).
    pub durability: Durability,
    /// The receive time to record instead of now. Only for copying a log
    /// between stores (migration, import of a dump that carries times).
    pub received_at: Option<Timestamp>,
    /// Whether the append builds the checkpoints of the runs it ends (see
    /// [`Checkpoints`]).
    pub checkpoints: Checkpoints,
}

impl AppendRequest {
    /// A batch with no expected sequence, no agent and the default durability.
    pub fn new(events: Vec<Event>) -> AppendRequest {
        AppendRequest {
            events,
            expected_seq: None,
            agent: None,
            durability: Durability::default(),
            received_at: None,
            checkpoints: Checkpoints::default(),
        }
    }

    /// Sets [`AppendRequest::expected_seq`].
    pub fn expect_seq(mut self, seq: u64) -> AppendRequest {
        self.expected_seq = Some(seq);
        self
    }

    /// Sets [`AppendRequest::agent`].
    pub fn agent(mut self, agent: impl Into<String>) -> AppendRequest {
        self.agent = Some(agent.into());
        self
    }

    /// Sets [`AppendRequest::checkpoints`].
    pub fn checkpoints(mut self, checkpoints: Checkpoints) -> AppendRequest {
        self.checkpoints = checkpoints;
        self
    }

    /// Sets [`AppendRequest::durability`].
    pub fn durability(mut self, durability: Durability) -> AppendRequest {
        self.durability = durability;
        self
    }
}

/// What an append assigned: the batch got the contiguous sequence numbers
/// `first_seq..=last_seq` and one receive time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Appended {
    /// Sequence number of the batch's first event (sequences start at 1).
    pub first_seq: u64,
    /// Sequence number of the batch's last event, now the thread's last.
    pub last_seq: u64,
    /// The receive time recorded on every event of the batch.
    pub received_at: Timestamp,
    /// True when the batch is on stable storage (see [`Durability`]).
    pub durable: bool,
}

impl Appended {
    /// The sequence numbers assigned, in order.
    pub fn seqs(&self) -> std::ops::RangeInclusive<u64> {
        self.first_seq..=self.last_seq
    }
}

/// One event as stored: its sequence number, receive time and exact JSON.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    /// Position in the thread, from 1, without gaps.
    pub seq: u64,
    /// When the store received the event's batch.
    pub received_at: Timestamp,
    /// The event exactly as received.
    pub event: Event,
}

/// One page of a thread's events.
#[derive(Debug, Clone, Default)]
pub struct EventPage {
    /// Events in sequence order.
    pub events: Vec<StoredEvent>,
    /// Where the next page starts, or `None` when this page reached the
    /// thread's end at the time of the read.
    pub next_seq: Option<u64>,
}

impl EventPage {
    /// The page of `events` (in order) of a thread whose last sequence
    /// number is `last_seq`: the next page starts after the last event,
    /// unless that is the thread's last.
    pub fn new(events: Vec<StoredEvent>, last_seq: u64) -> EventPage {
        let next_seq = match events.last() {
            Some(e) if e.seq < last_seq => Some(e.seq + 1),
            _ => None,
        };
        EventPage { events, next_seq }
    }

    /// [`EventPage::new`] for a page read from `from`: `Corrupt` when its
    /// first event is not `from` (the stored log has a gap).
    pub fn starting_at(events: Vec<StoredEvent>, from: u64, last_seq: u64) -> Result<EventPage> {
        if events.first().is_some_and(|e| e.seq != from) {
            return Err(StoreError::corrupt("the stored log has a gap"));
        }
        Ok(EventPage::new(events, last_seq))
    }

    /// Appends to a page being read from `from` the events of one stored
    /// batch (`first_seq` its first sequence number, all received at
    /// `received_at`): those from `from` on, while the page holds fewer
    /// than `limit`.
    pub fn push_batch(
        events: &mut Vec<StoredEvent>,
        batch: impl IntoIterator<Item = Event>,
        first_seq: u64,
        received_at: Timestamp,
        from: u64,
        limit: usize,
    ) {
        for (event, seq) in batch.into_iter().zip(first_seq..) {
            if seq >= from && events.len() < limit {
                events.push(StoredEvent {
                    seq,
                    received_at,
                    event,
                });
            }
        }
    }

    /// [`EventPage::push_batch`] for a frame read by
    /// [`crate::frame::decode_timed`] or [`crate::frame::decode_window`]
    /// (`first_seq` is the frame's first, whatever it skipped): the events
    /// of a packed frame get their own batch's receive time, any other
    /// frame's `received_at`.
    pub fn push_frame(
        events: &mut Vec<StoredEvent>,
        frame: crate::frame::Decoded,
        first_seq: u64,
        received_at: Timestamp,
        from: u64,
        limit: usize,
    ) {
        let first_seq = first_seq + frame.skipped;
        if frame.batches.is_empty() {
            return EventPage::push_batch(
                events,
                frame.events,
                first_seq,
                received_at,
                from,
                limit,
            );
        }
        let times = frame
            .batches
            .iter()
            .flat_map(|&(n, at)| std::iter::repeat_n(at, n as usize))
            .skip(frame.skipped as usize);
        for ((event, seq), received_at) in frame.events.into_iter().zip(first_seq..).zip(times) {
            if seq >= from && events.len() < limit {
                events.push(StoredEvent {
                    seq,
                    received_at,
                    event,
                });
            }
        }
    }
}

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// `RUN_STARTED` seen, no terminal event yet.
    Running,
    /// Ended by `RUN_FINISHED` (any outcome but `cancelled`).
    Finished,
    /// Ended by `RUN_ERROR`.
    Error,
    /// Never ended: a later run started in the thread first, or
    /// [`crate::Store::mark_interrupted`] found it running (crash).
    Interrupted,
    /// Ended by `RUN_FINISHED` with `outcome: {"type": "cancelled"}` (a
    /// stopped run).
    Cancelled,
}

impl RunStatus {
    /// The wire name (`running`, `finished`, `error`, `interrupted`,
    /// `cancelled`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Error => "error",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Reads a wire name.
    pub fn parse(name: &str) -> Option<RunStatus> {
        Some(match name {
            "running" => RunStatus::Running,
            "finished" => RunStatus::Finished,
            "error" => RunStatus::Error,
            "interrupted" => RunStatus::Interrupted,
            "cancelled" => RunStatus::Cancelled,
            _ => return None,
        })
    }

    /// The small integer the SQL backends store for the status (0 running,
    /// 1 finished, 2 error, 3 interrupted, 4 cancelled). Part of their
    /// schemas: never renumber.
    pub fn code(self) -> u8 {
        match self {
            RunStatus::Running => 0,
            RunStatus::Finished => 1,
            RunStatus::Error => 2,
            RunStatus::Interrupted => 3,
            RunStatus::Cancelled => 4,
        }
    }

    /// Reads a stored [`code`](RunStatus::code); `Corrupt` when unknown.
    pub fn from_code(code: i64) -> Result<RunStatus> {
        Ok(match code {
            0 => RunStatus::Running,
            1 => RunStatus::Finished,
            2 => RunStatus::Error,
            3 => RunStatus::Interrupted,
            4 => RunStatus::Cancelled,
            _ => return Err(StoreError::corrupt("a stored run status is unknown")),
        })
    }
}

/// One entry of the run index.
///
/// Two records are equal when they describe the same run, wherever it is
/// held: [`RunRecord::thread_instance`] is not compared.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// The thread the run belongs to.
    pub thread_id: String,
    /// `RUN_STARTED.runId`.
    pub run_id: String,
    /// `RUN_STARTED.parentRunId`, or when absent the run before it in the
    /// log (lineage rule of `agui-history`); `None` for a root run.
    pub parent_run_id: Option<String>,
    /// The agent named by the append that carried `RUN_STARTED`.
    pub agent: Option<String>,
    /// Current status.
    pub status: RunStatus,
    /// Receive time of `RUN_STARTED`.
    pub started_at: Timestamp,
    /// Receive time of the terminal event (or of the interruption).
    pub finished_at: Option<Timestamp>,
    /// Sequence number of `RUN_STARTED`.
    pub first_seq: u64,
    /// Sequence number of the run's last event so far. A run's events are
    /// `first_seq..=last_seq`: every event up to the next `RUN_STARTED`.
    pub last_seq: u64,
    /// Number of events in the run.
    pub event_count: u64,
    /// Total JSON bytes of the run's events.
    pub bytes: u64,
    /// Which instance of its thread holds the run, in a store that several
    /// processes or engines share (PostgreSQL: the thread's row id; memory:
    /// a number drawn when the thread is made): a thread deleted and written
    /// again is another instance, even with the same runs, times and
    /// counts, so what an engine cached of the old one never passes for the
    /// new one. 0 where one engine owns the store (SQLite, file), which
    /// forgets what it cached of a thread it deletes. Not part of the run's
    /// JSON.
    #[serde(skip)]
    pub thread_instance: u64,
}

impl PartialEq for RunRecord {
    fn eq(&self, other: &RunRecord) -> bool {
        let RunRecord {
            thread_id,
            run_id,
            parent_run_id,
            agent,
            status,
            started_at,
            finished_at,
            first_seq,
            last_seq,
            event_count,
            bytes,
            thread_instance: _,
        } = self;
        *thread_id == other.thread_id
            && *run_id == other.run_id
            && *parent_run_id == other.parent_run_id
            && *agent == other.agent
            && *status == other.status
            && *started_at == other.started_at
            && *finished_at == other.finished_at
            && *first_seq == other.first_seq
            && *last_seq == other.last_seq
            && *event_count == other.event_count
            && *bytes == other.bytes
    }
}

impl Eq for RunRecord {}

/// A filter over the run index of one tenant. Results are ordered by start
/// time, then thread id, then first sequence number.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only this thread's runs.
    pub thread_id: Option<String>,
    /// Only the children of this run (in the thread given, or any thread).
    pub parent_run_id: Option<String>,
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs started at or after this time.
    pub started_from: Option<Timestamp>,
    /// Only runs started before this time.
    pub started_before: Option<Timestamp>,
    /// Page size (clamped to `1..=MAX_PAGE`; 0 means 100).
    pub limit: usize,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// One page of runs.
#[derive(Debug, Clone, Default)]
pub struct RunPage {
    /// The runs, oldest start first.
    pub runs: Vec<RunRecord>,
    /// Opaque cursor of the next page, `None` at the end.
    pub next_cursor: Option<String>,
}

/// A thread as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadInfo {
    /// The thread id.
    pub thread_id: String,
    /// The agent of the thread's latest append that named one.
    pub agent: Option<String>,
    /// Receive time of the first event.
    pub created_at: Timestamp,
    /// Receive time of the latest event.
    pub updated_at: Timestamp,
    /// Sequence number of the last event (= number of events).
    pub last_seq: u64,
    /// Number of runs.
    pub run_count: u64,
    /// Total JSON bytes of the events.
    pub bytes: u64,
}

/// A filter over one tenant's threads, newest activity first.
#[derive(Debug, Clone, Default)]
pub struct ThreadFilter {
    /// Only threads whose agent is this one.
    pub agent: Option<String>,
    /// Page size (clamped to `1..=MAX_PAGE`; 0 means 100).
    pub limit: usize,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// One page of threads.
#[derive(Debug, Clone, Default)]
pub struct ThreadPage {
    /// The threads, most recently active first.
    pub threads: Vec<ThreadInfo>,
    /// Opaque cursor of the next page, `None` at the end.
    pub next_cursor: Option<String>,
}

/// Store-wide totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStats {
    /// Distinct tenants.
    pub tenants: u64,
    /// Threads.
    pub threads: u64,
    /// Runs.
    pub runs: u64,
    /// Events.
    pub events: u64,
    /// Total JSON bytes of the events as received.
    pub raw_bytes: u64,
    /// Bytes the backend uses for them (payloads, indexes, checkpoints; the
    /// whole database or directory where the backend can tell).
    pub stored_bytes: u64,
}

impl StoreStats {
    /// `stored_bytes / raw_bytes`: the bytes on disk per byte of event JSON
    /// (below 1 when the store compresses, above 1 when indexes and
    /// checkpoints outweigh the events); 0 when nothing is stored.
    pub fn stored_per_raw_byte(&self) -> f64 {
        if self.raw_bytes == 0 {
            0.0
        } else {
            self.stored_bytes as f64 / self.raw_bytes as f64
        }
    }
}

/// Checks a tenant, thread or run id: non-empty and at most
/// [`MAX_ID_BYTES`] bytes. Any other content (NUL, `../`, RTL marks, emoji)
/// is data and must round-trip.
pub fn check_id(what: &str, id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(StoreError::invalid(format!("{what} id is empty")));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(StoreError::invalid(format!(
            "{what} id is longer than {MAX_ID_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Clamps a requested page size to `1..=MAX_PAGE` (0 means 100).
pub fn page_size(limit: usize) -> usize {
    match limit {
        0 => 100,
        n => n.min(MAX_PAGE),
    }
}

/// A stream of stored events (subscriptions, streamed reads).
pub type EventStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = crate::error::Result<StoredEvent>> + Send + 'static>,
>;
