//! Run lineage and time travel.
//!
//! A log holds runs, each opened by a `RUN_STARTED`. Runs form a tree per
//! thread:
//!
//! - a run with `parentRunId` continues that run (which must exist in the log
//!   and belong to the same thread);
//! - a run without it continues the previous run **of the same thread** in
//!   the log; the first run of a thread is a root.
//!
//! Faults ([`LineageFault`]): a parent not in the log, a parent in another
//! thread, a run id used twice, and cycles of parent links.
//!
//! # What belongs to which run
//!
//! A run's *segment* runs from its `RUN_STARTED` to the next `RUN_STARTED` of
//! the log. Events after a run's terminal and before the next run (outside
//! every run) belong to the run they follow: they replay on its branches and
//! are abandoned with it. Events before the first `RUN_STARTED` (the
//! preamble) are the common base of every branch of every thread.
//!
//! # Branch history
//!
//! The history of a branch ending at run R is the preamble, then the segment
//! of every run from the root down to R, in tree order (not log order), and
//! nothing else: the events of other branches are never replayed. Because
//! clients resend history in `RUN_STARTED.input.messages` (and agents in
//! `MESSAGES_SNAPSHOT`), a run may restate messages another branch generated.
//! Such restatements are removed before replay when the message is
//! agent-generated and none of the runs that generated it lies on the branch
//! (see [`provenance`](self::provenance) for the exact rule). Messages a client
//! *sent* first are its own word and are kept: regenerating an answer resends
//! the same user message on a sibling branch. Every removal is reported by
//! [`Lineage::branch`].
//!
//! # Incremental use
//!
//! [`RunIndex::push`] indexes one event at a time (for stores), and
//! [`RunIndex::resolve_parent`] tells a new run's parent before it is stored.
//! A store that checkpoints each run as `reduce(parent checkpoint, run
//! events)` keeps branches apart the same way by feeding every event to
//! [`Provenance::observe`] and replaying each event through
//! [`without_foreign`] with the run's branch as `on_path`.

mod index;
pub mod provenance;
mod view;

use std::borrow::Cow;

use agui_protocol::Event;

use crate::reduce::{Conversation, ReduceError, Reducer};

pub use index::{Divergence, RunIndex, RunNode, RunStatus};
pub use provenance::{Owner, Provenance, restated_message_ids, without_foreign};
pub use view::{MAX_TIMESTAMP, RunStart, Timestamp, timestamp};

/// A fault in the lineage of a log's runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineageFault {
    /// `parentRunId` names no run of the log.
    #[error(
        "event {event_index}: run {run_id:?} names parentRunId {parent_run_id:?}, which is not a run of this log"
    )]
    ParentNotFound {
        run_id: String,
        parent_run_id: String,
        event_index: usize,
    },
    /// `parentRunId` names a run of another thread.
    #[error(
        "event {event_index}: run {run_id:?} of thread {thread_id:?} names parentRunId {parent_run_id:?}, a run of thread {parent_thread_id:?}"
    )]
    ParentInOtherThread {
        run_id: String,
        thread_id: String,
        parent_run_id: String,
        parent_thread_id: String,
        event_index: usize,
    },
    /// A second `RUN_STARTED` with a run id already used.
    #[error(
        "event {event_index}: run id {run_id:?} is used again (first started at event {first_event})"
    )]
    DuplicateRunId {
        run_id: String,
        first_event: usize,
        event_index: usize,
    },
    /// Parent links that loop; `run_ids` lists the loop from child to parent.
    #[error(
        "event {event_index}: parent links form a cycle: {}",
        cycle_text(run_ids)
    )]
    Cycle {
        run_ids: Vec<String>,
        event_index: usize,
    },
}

fn cycle_text(run_ids: &[String]) -> String {
    let mut parts: Vec<String> = run_ids.iter().map(|r| format!("{r:?}")).collect();
    if let Some(first) = parts.first().cloned() {
        parts.push(first);
    }
    parts.join(" -> ")
}

impl LineageFault {
    /// Log index of the `RUN_STARTED` at fault.
    pub fn event_index(&self) -> usize {
        match self {
            LineageFault::ParentNotFound { event_index, .. }
            | LineageFault::ParentInOtherThread { event_index, .. }
            | LineageFault::DuplicateRunId { event_index, .. }
            | LineageFault::Cycle { event_index, .. } => *event_index,
        }
    }
}

/// Why a lineage query failed.
#[derive(Debug, thiserror::Error)]
pub enum LineageError {
    /// A `RUN_STARTED` without a usable `runId` or `threadId`.
    #[error("event {event_index}: malformed RUN_STARTED: {reason}")]
    MalformedRunStarted { event_index: usize, reason: String },
    /// The log's lineage is faulty (every fault, in log order).
    #[error("{}", faults_text(.0))]
    Faults(Vec<LineageFault>),
    /// No run has this id.
    #[error("no run {run_id:?} in this log")]
    UnknownRun { run_id: String },
    /// `after_event` is past the end of the run's segment.
    #[error("run {run_id:?} has {event_count} events (0 to {}), there is no event {event}", event_count.saturating_sub(1))]
    EventOutOfRange {
        run_id: String,
        event: usize,
        event_count: usize,
    },
    /// The index was built over another log than the one given.
    #[error("the run index covers {indexed} events but the log has {given}")]
    IndexMismatch { indexed: usize, given: usize },
    /// The reducer rejected an event of the branch (`event_index` is the
    /// event's index in the log; the reducer's own index counts replayed
    /// events).
    #[error("replaying the branch failed at log event {event_index}; the reducer says: {error}")]
    Reduce {
        event_index: usize,
        error: ReduceError,
    },
    /// A restating event could not be rebuilt without its foreign messages.
    #[error("event {event_index}: cannot rewrite the event: {error}")]
    Rewrite {
        event_index: usize,
        error: agui_protocol::EnvelopeError,
    },
}

fn faults_text(faults: &[LineageFault]) -> String {
    match faults {
        [one] => format!("lineage fault: {one}"),
        many => {
            let mut out = format!("{} lineage faults:", many.len());
            for f in many {
                out.push_str("\n  ");
                out.push_str(&f.to_string());
            }
            out
        }
    }
}

/// A message restatement removed from a branch's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// Log index of the `RUN_STARTED` or `MESSAGES_SNAPSHOT`.
    pub event_index: usize,
    /// The id of the message removed from it.
    pub message_id: String,
}

/// The events of one branch, ready to replay.
#[derive(Debug, Clone)]
pub struct Branch<'e> {
    /// The runs from the root to the branch's tip.
    pub runs: Vec<&'e RunNode>,
    /// `(log index, event)`: the preamble, then each run's segment, in tree
    /// order. Events are the log's own, except restating events from which
    /// foreign messages were removed.
    pub events: Vec<(usize, Cow<'e, Event>)>,
    /// What was removed, in replay order.
    pub dropped: Vec<Dropped>,
}

/// A log with its run index: the entry point for time travel.
#[derive(Debug)]
pub struct Lineage<'e> {
    events: &'e [Event],
    index: RunIndex,
    provenance: Provenance,
}

impl<'e> Lineage<'e> {
    /// Indexes `events`; fails on any lineage fault.
    pub fn new(events: &'e [Event]) -> Result<Lineage<'e>, LineageError> {
        let index = RunIndex::build(events)?;
        Lineage::with_index(events, index)
    }

    /// Uses an index already built over exactly these events.
    pub fn with_index(events: &'e [Event], index: RunIndex) -> Result<Lineage<'e>, LineageError> {
        if index.len() != events.len() {
            return Err(LineageError::IndexMismatch {
                indexed: index.len(),
                given: events.len(),
            });
        }
        let provenance = Provenance::build(events, &index);
        Ok(Lineage {
            events,
            index,
            provenance,
        })
    }

    /// The run index.
    pub fn index(&self) -> &RunIndex {
        &self.index
    }

    /// The log.
    pub fn events(&self) -> &'e [Event] {
        self.events
    }

    /// The history of the branch ending at `run_id`: up to the end of its
    /// segment, or up to and including its event `after_event` (0-based
    /// within the segment; 0 is its `RUN_STARTED`).
    pub fn branch(
        &self,
        run_id: &str,
        after_event: Option<usize>,
    ) -> Result<Branch<'_>, LineageError> {
        let path = self.index.path_positions(run_id)?;
        let runs: Vec<&RunNode> = path.iter().map(|&p| &self.index.runs()[p]).collect();
        let Some(tip) = runs.last() else {
            return Err(LineageError::UnknownRun {
                run_id: run_id.to_owned(),
            });
        };
        let tip_end = match after_event {
            None => tip.segment().end,
            Some(n) if n < tip.event_count => tip.first_event + n + 1,
            Some(n) => {
                return Err(LineageError::EventOutOfRange {
                    run_id: run_id.to_owned(),
                    event: n,
                    event_count: tip.event_count,
                });
            }
        };
        // A mask, not `path.contains`: every restated id asks, and a long
        // thread (implicit parents make a chain) has a path as long as it.
        let mut on_path_mask = vec![false; self.index.runs().len()];
        for &p in &path {
            if let Some(on) = on_path_mask.get_mut(p) {
                *on = true;
            }
        }
        let on_path = |o: Owner| match o {
            Owner::Preamble => true,
            Owner::Run(p) => on_path_mask.get(p).copied().unwrap_or(false),
        };
        let ranges =
            std::iter::once(self.index.preamble()).chain(runs.iter().enumerate().map(|(k, r)| {
                if k + 1 == runs.len() {
                    r.first_event..tip_end
                } else {
                    r.segment()
                }
            }));
        let mut events = Vec::new();
        let mut dropped = Vec::new();
        for range in ranges {
            for i in range {
                let Some(event) = self.events.get(i) else {
                    continue;
                };
                let (event, removed) = provenance::without_foreign(event, |id| {
                    self.provenance.is_foreign(id, |&o| on_path(o))
                })
                .map_err(|error| LineageError::Rewrite {
                    event_index: i,
                    error,
                })?;
                dropped.extend(removed.into_iter().map(|message_id| Dropped {
                    event_index: i,
                    message_id,
                }));
                events.push((i, event));
            }
        }
        Ok(Branch {
            runs,
            events,
            dropped,
        })
    }

    /// `{messages, state}` after the branch ending at `run_id` (see
    /// [`Lineage::branch`] for `after_event`), reduced from `start`.
    pub fn conversation_at(
        &self,
        run_id: &str,
        after_event: Option<usize>,
        start: Conversation,
    ) -> Result<Conversation, LineageError> {
        let branch = self.branch(run_id, after_event)?;
        let mut reducer = Reducer::new(start);
        for (event_index, event) in &branch.events {
            reducer.apply(event).map_err(|error| LineageError::Reduce {
                event_index: *event_index,
                error,
            })?;
        }
        Ok(reducer.into_conversation())
    }
}

/// `{messages, state}` at a run of `events` (see [`Lineage::conversation_at`]).
pub fn conversation_at(
    events: &[Event],
    run_id: &str,
    after_event: Option<usize>,
    start: Conversation,
) -> Result<Conversation, LineageError> {
    Lineage::new(events)?.conversation_at(run_id, after_event, start)
}
