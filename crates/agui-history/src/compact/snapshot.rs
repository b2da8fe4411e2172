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
//!
//! Size: a `MESSAGES_SNAPSHOT` replaces the whole message list, so each
//! checkpoint restates the conversation so far and the output grows with the
//! square of the number of runs (200 demo runs: 0.54 MB in, about 8 MB
//! out). [`SnapshotCompactor::last_runs`] restates only the last N runs and
//! emits the earlier ones in `deltas` form, through the same path a run that
//! cannot be restated takes, so every guarantee above holds unchanged.

use agui_protocol::{Event, EventType};

use super::envelope::{normalize_run_started, replay, restate_owned};
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
    /// Runs seen so far (`RUN_STARTED` events).
    runs: u64,
    /// Runs with an ordinal below this are emitted in `deltas` form.
    deltas_before: u64,
    /// The compact JSON text of the original conversation's messages as of
    /// the last checkpoint: each message is serialized once and its text
    /// reused by every later checkpoint until the message changes (the
    /// reducer's change mark says from which index on they did).
    texts: Vec<String>,
    /// A `MESSAGES_SNAPSHOT` reached the original since the texts were last
    /// brought up to date: the reducer's change mark counts a message it
    /// replaced by an equal one (keys in another order) as unchanged, but
    /// its text changed, so every text is made again.
    texts_stale: bool,
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
            runs: 0,
            deltas_before: 0,
            texts: Vec::new(),
            texts_stale: false,
        }
    }

    /// A compactor that restates only the last `last` of `total` runs (the
    /// `RUN_STARTED` events of the input, counted beforehand) and emits the
    /// earlier runs in `deltas` form.
    pub fn last_runs(start: &Conversation, total: u64, last: u64) -> SnapshotCompactor {
        let mut compactor = SnapshotCompactor::new(start);
        compactor.deltas_before = total.saturating_sub(last);
        compactor
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
        if *event.event_type() == EventType::MessagesSnapshot {
            self.texts_stale = true;
        }
        match event.event_type() {
            EventType::RunStarted => {
                self.close_segment()?;
                let restated = self.runs >= self.deltas_before;
                self.runs += 1;
                // A run left in `deltas` form is a segment outside runs: it is
                // emitted as it comes, as `deltas` emits it.
                self.segment = Some(if restated {
                    Segment::new(Some(event))?
                } else {
                    let mut segment = Segment::new(None)?;
                    segment.push(event)?;
                    segment
                });
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
        // The ids the consumer holds, looked up once per run (a client that
        // resends its whole history would otherwise cost a scan of the
        // conversation per input message).
        let held: std::collections::HashSet<&str> = self
            .replayed
            .messages
            .iter()
            .filter_map(|m| m.get("id").and_then(serde_json::Value::as_str))
            .collect();
        let normalized = normalize_run_started(&started, |id| {
            id.as_str().is_some_and(|id| held.contains(id))
        })?;
        drop(held);
        // Bring the message texts up to date: only the messages from the
        // change mark on are serialized again.
        let mark = if std::mem::take(&mut self.texts_stale) {
            0
        } else {
            self.original.messages_changed_from()
        };
        self.original.reset_change_mark();
        let target = self.original.conversation();
        self.texts.truncate(mark.min(target.messages.len()));
        for m in &target.messages[self.texts.len()..] {
            self.texts
                .push(serde_json::to_string(m).map_err(CompactError::Json)?);
        }
        let texts = Some(self.texts.as_slice());
        let head = std::slice::from_ref(&normalized);
        let restated = match replay(&self.replayed, head) {
            Some(local) => restate_owned(
                local,
                || replay(&self.replayed, head),
                target,
                texts,
                head,
                std::slice::from_ref(&terminal),
            )?,
            None => None,
        };
        match restated {
            Some((events, reached)) => {
                // `reached` is `target`, checked by `restate_owned`.
                self.replayed = reached;
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

/// The number of runs (`RUN_STARTED` events) of `events`.
pub fn count_runs<'a>(events: impl IntoIterator<Item = &'a Event>) -> u64 {
    events
        .into_iter()
        .filter(|e| e.event_type() == &EventType::RunStarted)
        .count() as u64
}

/// Compacts a whole sequence in `snapshot` mode from `start`, restating only
/// the last `last` runs (earlier runs in `deltas` form).
pub fn compact_snapshot_last(
    events: Vec<Event>,
    start: &Conversation,
    last: u64,
) -> Result<Vec<Event>, CompactError> {
    let total = count_runs(&events);
    let mut compactor = SnapshotCompactor::last_runs(start, total, last);
    let mut out = Vec::new();
    for event in events {
        compactor.push(event)?;
        out.extend(compactor.drain());
    }
    compactor.finish()?;
    out.extend(compactor.drain());
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(json: &str) -> Event {
        Event::from_json(json).unwrap()
    }

    /// Each checkpoint's `MESSAGES_SNAPSHOT` holds the text of the
    /// conversation as the original gives it at the end of the run, even
    /// when a message's text changed without its value changing for the
    /// reducer (a snapshot restating it with its keys in another order):
    /// the kept texts are made again after every `MESSAGES_SNAPSHOT`.
    #[test]
    fn kept_message_texts_follow_the_original_text_for_text() {
        let events = vec![
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"r1"}"#),
            ev(
                r#"{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"m1","role":"user","content":"a"}]}"#,
            ),
            ev(r#"{"type":"TEXT_MESSAGE_START","messageId":"m2","role":"assistant"}"#),
            ev(r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m2","delta":"hi"}"#),
            ev(r#"{"type":"TEXT_MESSAGE_END","messageId":"m2"}"#),
            ev(r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r1"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"r2"}"#),
            ev(
                r#"{"type":"MESSAGES_SNAPSHOT","messages":[{"content":"a","role":"user","id":"m1"},{"id":"m2","role":"assistant","content":"hi"}]}"#,
            ),
            ev(r#"{"type":"TEXT_MESSAGE_START","messageId":"m3","role":"assistant"}"#),
            ev(r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m3","delta":"more"}"#),
            ev(r#"{"type":"TEXT_MESSAGE_END","messageId":"m3"}"#),
            ev(r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r2"}"#),
            ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":"r3"}"#),
            ev(r#"{"type":"TEXT_MESSAGE_START","messageId":"m4","role":"assistant"}"#),
            ev(r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m4","delta":"last"}"#),
            ev(r#"{"type":"TEXT_MESSAGE_END","messageId":"m4"}"#),
            ev(r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r3"}"#),
        ];
        let out = compact_snapshot(events.clone(), &Conversation::default()).unwrap();
        let snapshots: Vec<&Event> = out
            .iter()
            .filter(|e| *e.event_type() == EventType::MessagesSnapshot)
            .collect();
        assert_eq!(snapshots.len(), 3);
        // The conversation after each run, serialized afresh.
        let mut reducer = Reducer::new(Conversation::default());
        let mut ends = Vec::new();
        for e in &events {
            reducer.apply(e).unwrap();
            if *e.event_type() == EventType::RunFinished {
                let messages = &reducer.conversation().messages;
                ends.push(
                    super::super::envelope::messages_snapshot_with(messages, None, false)
                        .unwrap()
                        .json()
                        .to_owned(),
                );
            }
        }
        for (got, want) in snapshots.iter().zip(&ends) {
            assert_eq!(got.json(), want);
        }
        assert!(ends[1].contains(r#"{"content":"a","role":"user","id":"m1"}"#));
    }
}
