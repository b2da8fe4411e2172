//! `snapshot` mode: every run as a self-contained checkpoint.
//!
//! Each run (`RUN_STARTED` up to its `RUN_FINISHED` / `RUN_ERROR`) becomes its
//! `RUN_STARTED` with `input.messages` normalized (messages the consumer
//! already holds removed; `parentRunId` and everything else kept), one
//! `MESSAGES_SNAPSHOT` of the conversation at the end of the run, one
//! `STATE_SNAPSHOT` when there is state, and its terminal event as it was.
//!
//! Every checkpoint is checked with the reducer before it is emitted: applied
//! to what a consumer of the output holds at that point, it must give exactly
//! the conversation the original stream gives at the end of the run. When no
//! single `MESSAGES_SNAPSHOT` can (the reducer keeps messages it already holds
//! in their local order, so a tool result inserted between older messages
//! cannot be restated; and it keeps reasoning messages a snapshot without
//! reasoning leaves out), the run is emitted in `deltas` form instead.
//! Events outside runs, and a run still in flight at the end of the input,
//! are emitted in `deltas` form too (a live tail can continue the open
//! streams). Memory: the current conversation plus the current run's events
//! in `deltas` form.

use agui_protocol::{Event, EventType};

use super::envelope::{normalize_run_started, replay, restate};
use super::{CompactError, DeltaCompactor};
use crate::reduce::{Conversation, Reducer};

/// The segment being read: a run, or events outside any run.
struct Segment {
    /// The run's `RUN_STARTED` (`None` outside runs).
    started: Option<Event>,
    /// The segment in `deltas` form, in case it cannot be restated.
    deltas: DeltaCompactor,
    buffered: Vec<Event>,
}

impl Segment {
    fn new(started: Option<Event>) -> Result<Segment, CompactError> {
        let mut segment = Segment {
            started: None,
            deltas: DeltaCompactor::new(),
            buffered: Vec::new(),
        };
        if let Some(started) = started {
            segment.push(started.clone())?;
            segment.started = Some(started);
        }
        Ok(segment)
    }

    fn push(&mut self, event: Event) -> Result<(), CompactError> {
        self.deltas.push(event)?;
        self.buffered.extend(self.deltas.drain());
        Ok(())
    }

    fn into_deltas(mut self) -> Result<Vec<Event>, CompactError> {
        self.deltas.finish()?;
        self.buffered.extend(self.deltas.drain());
        Ok(self.buffered)
    }
}

/// Streaming `snapshot` compactor: [`SnapshotCompactor::push`] each event,
/// take output with [`SnapshotCompactor::drain`], then
/// [`SnapshotCompactor::finish`].
pub struct SnapshotCompactor {
    /// The original stream's reducer.
    original: Reducer,
    /// What a consumer of the output holds so far.
    replayed: Conversation,
    segment: Option<Segment>,
    ready: Vec<Event>,
    index: usize,
}

impl SnapshotCompactor {
    /// A compactor for a consumer that starts from `start`.
    pub fn new(start: &Conversation) -> SnapshotCompactor {
        SnapshotCompactor {
            original: Reducer::new(start.clone()),
            replayed: start.clone(),
            segment: None,
            ready: Vec::new(),
            index: 0,
        }
    }

    /// Takes the events released so far.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Event> {
        self.ready.drain(..)
    }

    /// Feeds one event.
    pub fn push(&mut self, event: Event) -> Result<(), CompactError> {
        let index = self.index;
        self.index += 1;
        self.original
            .apply(&event)
            .map_err(|source| CompactError::Reduce { index, source })?;
        match event.event_type() {
            EventType::RunStarted => {
                self.close_segment()?;
                self.segment = Some(Segment::new(Some(event))?);
            }
            EventType::RunFinished | EventType::RunError => {
                match self.segment.take() {
                    Some(segment) if segment.started.is_some() => self.end_run(segment, event)?,
                    other => {
                        // A terminal outside a run (e.g. RUN_ERROR after
                        // RUN_FINISHED) stays in place.
                        let mut segment = match other {
                            Some(s) => s,
                            None => Segment::new(None)?,
                        };
                        segment.push(event)?;
                        self.segment = Some(segment);
                    }
                }
            }
            _ => {
                if self.segment.is_none() {
                    self.segment = Some(Segment::new(None)?);
                }
                if let Some(segment) = self.segment.as_mut() {
                    segment.push(event)?;
                }
            }
        }
        Ok(())
    }

    /// Ends the input: a run still in flight, and events outside runs, are
    /// emitted in `deltas` form.
    pub fn finish(&mut self) -> Result<(), CompactError> {
        self.close_segment()
    }

    /// Emits the open segment in `deltas` form.
    fn close_segment(&mut self) -> Result<(), CompactError> {
        if let Some(segment) = self.segment.take() {
            let events = segment.into_deltas()?;
            self.emit_replayed(events);
        }
        Ok(())
    }

    fn emit_replayed(&mut self, events: Vec<Event>) {
        // By the `deltas` guarantee this reaches the original's conversation;
        // follow what the output really does all the same.
        self.replayed =
            replay(&self.replayed, &events).unwrap_or_else(|| self.original.conversation().clone());
        self.ready.extend(events);
    }

    fn end_run(&mut self, mut segment: Segment, terminal: Event) -> Result<(), CompactError> {
        let Some(started) = segment.started.clone() else {
            return Err(CompactError::Internal("a run segment without RUN_STARTED"));
        };
        let held = &self.replayed;
        let normalized = normalize_run_started(&started, |id| {
            held.messages.iter().any(|m| m.get("id") == Some(id))
        })?;
        let target = self.original.conversation();
        let restated = match replay(&self.replayed, std::slice::from_ref(&normalized)) {
            Some(local) => restate(
                &local,
                target,
                &[normalized],
                std::slice::from_ref(&terminal),
            )?,
            None => None,
        };
        match restated {
            Some(events) => {
                self.replayed = target.clone();
                self.ready.extend(events);
            }
            None => {
                segment.push(terminal)?;
                let events = segment.into_deltas()?;
                self.emit_replayed(events);
            }
        }
        Ok(())
    }
}

/// Compacts a whole sequence in `snapshot` mode from `start`.
pub fn compact_snapshot<I>(events: I, start: &Conversation) -> Result<Vec<Event>, CompactError>
where
    I: IntoIterator<Item = Event>,
{
    let mut compactor = SnapshotCompactor::new(start);
    let mut out = Vec::new();
    for event in events {
        compactor.push(event)?;
        out.extend(compactor.drain());
    }
    compactor.finish()?;
    out.extend(compactor.drain());
    Ok(out)
}
