//! The state window of `deltas` mode, exactly as the official 1.0.0
//! `compactEvents` flushes it.
//!
//! `STATE_SNAPSHOT` and `STATE_DELTA` events are collected and flushed just
//! before each `RUN_STARTED`, `RUN_FINISHED` and `RUN_ERROR`, and at the end of
//! the input. A window without a snapshot is emitted verbatim (deltas alone
//! are relative to a state the window never saw). A window with a snapshot
//! becomes one `STATE_SNAPSHOT`: the last snapshot with every later delta
//! applied (a delta that fails is skipped, as the reducer skips it), carrying
//! the last-write-wins fold of every window event's metadata.
//!
//! Two departures, both meaning-neutral, keep the guarantees of this crate:
//! a window whose events cannot be read as the reducer reads them (a snapshot
//! without `snapshot`, a delta whose `delta` is not an array) is emitted
//! verbatim, and so is a window whose folded snapshot would be longer than
//! the events it replaces (a `copy` can double a document), so that the
//! output is never longer than the input. Such a fallback keeps the whole
//! window, so compacting again takes the same decision. Memory: a window holds
//! its state events until the run ends (one run's worth, never the log's).

use agui_protocol::Event;
use serde_json::{Map, Value};

use super::CompactError;
use super::deltas::merge_metadata;
use super::fields::Fields;
use crate::reduce::patch;

#[derive(Default)]
pub(crate) struct StateWindow {
    /// The window's events, for the verbatim cases.
    verbatim: Vec<Event>,
    verbatim_bytes: usize,
    /// From the last snapshot on: the folded state, `None` when no snapshot
    /// was seen or the window cannot be folded.
    folded: Option<Value>,
    /// The metadata fold over every event of the window.
    metadata: Option<Map<String, Value>>,
    /// Some event's metadata is not an object: the fold would not be the
    /// official one, so the window is passed through.
    opaque: bool,
    has_snapshot: bool,
}

impl StateWindow {
    pub(crate) fn push(&mut self, event: Event) {
        let is_snapshot = event.event_type() == &agui_protocol::EventType::StateSnapshot;
        let fields = Fields::read(&event, ["snapshot", "delta", "metadata"]);
        let Some(fields) = fields else {
            self.make_opaque();
            self.keep(event);
            return;
        };
        match fields.raw(2) {
            None => {}
            Some(raw) => match serde_json::from_str::<Map<String, Value>>(raw) {
                Ok(map) => merge_metadata(&mut self.metadata, map),
                Err(_) => self.make_opaque(),
            },
        }
        if is_snapshot {
            self.has_snapshot = true;
            if !self.opaque {
                self.folded = fields
                    .raw(0)
                    .and_then(|raw| serde_json::from_str::<Value>(raw).ok());
            }
        } else if let Some(state) = self.folded.as_mut() {
            match fields
                .raw(1)
                .and_then(|raw| serde_json::from_str::<Value>(raw).ok())
            {
                Some(ops @ Value::Array(_)) => {
                    // A failing patch leaves the state unchanged, as in the
                    // reducer.
                    if let Ok(next) = patch::apply_patch(state, &ops) {
                        *state = next;
                    }
                }
                _ => self.folded = None,
            }
        }
        self.keep(event);
    }

    /// Events held.
    pub(crate) fn len(&self) -> usize {
        self.verbatim.len()
    }

    fn keep(&mut self, event: Event) {
        self.verbatim_bytes += event.len_bytes();
        self.verbatim.push(event);
    }

    fn make_opaque(&mut self) {
        self.opaque = true;
        self.folded = None;
    }

    /// Emits the window into `out` and empties it.
    pub(crate) fn flush(&mut self, out: &mut impl Extend<Event>) -> Result<(), CompactError> {
        let window = std::mem::take(self);
        if window.verbatim.is_empty() {
            return Ok(());
        }
        if window.has_snapshot
            && !window.opaque
            && let Some(state) = window.folded
        {
            let mut text = String::from("{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":");
            text.push_str(&serde_json::to_string(&state).map_err(CompactError::Json)?);
            if let Some(metadata) = &window.metadata {
                text.push_str(",\"metadata\":");
                text.push_str(&serde_json::to_string(metadata).map_err(CompactError::Json)?);
            }
            text.push('}');
            if text.len() <= window.verbatim_bytes {
                // The official shape.
                out.extend([Event::from_json_string(text).map_err(CompactError::Synthesized)?]);
                return Ok(());
            }
        }
        out.extend(window.verbatim);
        Ok(())
    }
}
