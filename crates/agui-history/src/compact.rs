//! Compaction: fewer events with exactly the same meaning.
//!
//! Three modes (see `docs/compaction.md` for the rules and the guarantees):
//!
//! - [`Mode::Deltas`] ([`DeltaCompactor`], [`compact_deltas`]): every event
//!   kept in its place, each stream's pieces merged into one CONTENT / ARGS
//!   where that cannot change what the reducer or the verifier sees; equal
//!   to the official `compactEvents` wherever that one is right.
//! - [`Mode::Snapshot`] ([`SnapshotCompactor`]): each run as a self-contained
//!   checkpoint: its `RUN_STARTED` (input messages normalized), one
//!   `MESSAGES_SNAPSHOT`, one `STATE_SNAPSHOT`, its terminal event.
//! - [`Mode::Latest`] ([`compact_latest`]): one run envelope holding the
//!   conversation at the end of one run along its own branch.
//!
//! All three are streaming: memory holds what is open at once and the
//! current conversation, never the whole log.

mod deltas;
mod envelope;
mod fields;
mod latest;
mod snapshot;
mod state;

use std::fmt;
use std::str::FromStr;

use agui_protocol::{EnvelopeError, Event};

pub use deltas::{DeltaCompactor, compact_deltas};
pub use latest::{LatestOptions, compact_latest, compact_latest_from};
pub use snapshot::{SnapshotCompactor, compact_snapshot, compact_snapshot_last, count_runs};

use crate::reduce::{Conversation, ReduceError};

/// The compaction modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Merged deltas, every event kept in place (the default).
    #[default]
    Deltas,
    /// One checkpoint per run.
    Snapshot,
    /// One run envelope for the chosen (by default the last) run.
    Latest,
}

impl Mode {
    /// The mode's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Deltas => "deltas",
            Mode::Snapshot => "snapshot",
            Mode::Latest => "latest",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A mode name that is none of `deltas`, `snapshot`, `latest`.
#[derive(Debug, thiserror::Error)]
#[error("unknown compaction mode {0:?} (expected deltas, snapshot or latest)")]
pub struct UnknownMode(pub String);

impl FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "deltas" => Ok(Mode::Deltas),
            "snapshot" => Ok(Mode::Snapshot),
            "latest" => Ok(Mode::Latest),
            other => Err(UnknownMode(other.to_owned())),
        }
    }
}

/// Why compaction stopped.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// A value could not be serialized (not expected for parsed JSON).
    #[error("cannot serialize a compacted value: {0}")]
    Json(#[source] serde_json::Error),
    /// An event built by compaction is not a valid envelope (not expected).
    #[error("a synthesized event is not a valid envelope: {0}")]
    Synthesized(#[source] EnvelopeError),
    /// The reducer refused event `index` (0-based, in the input), so the
    /// conversation that `snapshot` and `latest` restate does not exist.
    #[error("event {index}: the reducer refused it: {source}")]
    Reduce {
        /// Position of the event in the input.
        index: usize,
        /// The reducer's reason.
        #[source]
        source: ReduceError,
    },
    /// `--branch` names a run that is not in the input.
    #[error("no run with runId {0:?} in the input")]
    UnknownRun(String),
    /// The input holds no run at all, so `latest` has nothing to restate.
    #[error("the input holds no RUN_STARTED, so there is no run to restate")]
    NoRun,
    /// The lineage of the chosen run could not be followed.
    #[error("cannot follow the run lineage: {0}")]
    Lineage(String),
    /// The consumer of the output refused an event (an I/O error).
    #[error("cannot write the output: {0}")]
    Emit(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A broken internal invariant (a bug, reported instead of a panic).
    #[error("internal compaction error: {0}")]
    Internal(&'static str),
}

/// Compacts a whole sequence in `mode`, starting from `start` (the messages
/// and state the consumer holds before the first event; `snapshot` and
/// `latest` restate the conversation, so they need it; `deltas` never reads
/// it). `branch` picks the run `latest` restates (default: the last run).
pub fn compact<I>(
    events: I,
    mode: Mode,
    start: &Conversation,
    branch: Option<&str>,
) -> Result<Vec<Event>, CompactError>
where
    I: IntoIterator<Item = Event>,
{
    match mode {
        Mode::Deltas => compact_deltas(events),
        Mode::Snapshot => compact_snapshot(events, start),
        Mode::Latest => compact_latest(
            events,
            &LatestOptions {
                start: start.clone(),
                branch: branch.map(str::to_owned),
            },
        ),
    }
}
