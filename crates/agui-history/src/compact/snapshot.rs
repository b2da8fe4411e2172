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
//! Checking: a checkpoint is first decided by a proof over the reducer's
//! `MESSAGES_SNAPSHOT` rule (`SnapshotCompactor::prove`), which looks only
//! at what changed since the previous checkpoint: the consumer then holds
//! exactly that checkpoint's conversation (the reducer's change mark says
//! which of its messages the original still holds unchanged), plus the
//! messages the normalized `RUN_STARTED` appends; the ids of the messages
//! held, and the fact that each one's kept text parses back to itself, are
//! kept from one checkpoint to the next. Where the proof cannot decide (a
//! message without a string id, a dropped activity or reasoning message,
//! an input that is not a list of such messages, the first run after one emitted
//! in `deltas` form, ...), the checkpoint is replayed through the reducer
//! as a whole, as before; a test compares the two on generated streams.
//!
//! Size: a `MESSAGES_SNAPSHOT` replaces the whole message list, so each
//! checkpoint restates the conversation so far and the output grows with the
//! square of the number of runs (200 demo runs: 0.54 MB in, about 11.5 MB
//! out). [`SnapshotCompactor::last_runs`] restates only the last N runs and
//! emits the earlier ones in `deltas` form, through the same path a run that
//! cannot be restated takes, so every guarantee above holds unchanged.

use std::collections::HashMap;

use agui_protocol::{Event, EventType};
use serde_json::Value;

use super::envelope::{
    Appended, MessageTexts, held_ids, messages_snapshot_with, normalize_run_started_reading,
    replay, replay_owned, restate_owned, state_exists, state_snapshot,
};
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
    texts: MessageTexts,
    /// A `MESSAGES_SNAPSHOT` reached the original since the texts were last
    /// brought up to date: the reducer's change mark counts a message it
    /// replaced by an equal one (keys in another order) as unchanged, but
    /// its text changed, so every text is made again.
    texts_stale: bool,
    /// `replayed` equals the original's conversation as of the last reset
    /// of its change mark (so the two share every message below the mark).
    synced: bool,
    /// With `synced`: the first `verified` messages of `replayed` are
    /// objects with distinct string ids, none with `subagentRunId: null`,
    /// and each one's kept text parses back to the message itself.
    verified: usize,
    /// The id of each of the first `verified` messages of `replayed`, with
    /// its index.
    ids: HashMap<String, usize>,
    /// Whether checkpoints are checked by [`SnapshotCompactor::prove`]
    /// before the full replay (off only to compare the two).
    proof: bool,
    /// Checkpoints the proof decided (the others were replayed).
    proven: u64,
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
            texts: MessageTexts::default(),
            texts_stale: false,
            synced: true,
            verified: 0,
            ids: HashMap::new(),
            proof: true,
            proven: 0,
        }
    }

    /// The same compactor checking every checkpoint by a full replay only,
    /// without the incremental proof: the output is the same (tests compare
    /// the two).
    #[doc(hidden)]
    pub fn with_full_replay(mut self) -> SnapshotCompactor {
        self.proof = false;
        self
    }

    /// A compactor that restates only the last `last` of `total` runs (the
    /// `RUN_STARTED` events of the input, counted beforehand) and emits the
    /// earlier runs in `deltas` form.
    pub fn last_runs(start: &Conversation, total: u64, last: u64) -> SnapshotCompactor {
        let mut compactor = SnapshotCompactor::new(start);
        compactor.deltas_before = total.saturating_sub(last);
        compactor
    }

    /// How many checkpoints were checked by the incremental proof rather
    /// than a full replay.
    #[doc(hidden)]
    pub fn proven_checkpoints(&self) -> u64 {
        self.proven
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
        let from = std::mem::take(&mut self.replayed);
        self.replayed =
            replay_owned(from, &events).unwrap_or_else(|| self.original.conversation().clone());
        self.synced = false;
        self.verified = 0;
        self.ids.clear();
        self.ready.extend(events);
    }

    fn end_run(&mut self, mut segment: Segment, terminal: Event) -> Result<(), CompactError> {
        let Some(started) = segment.started.clone() else {
            return Err(CompactError::Internal("a run segment without RUN_STARTED"));
        };
        let (normalized, appended) = if self.synced && self.verified == self.replayed.messages.len()
        {
            // Every id the consumer holds is in `ids`.
            let ids = &self.ids;
            normalize_run_started_reading(&started, |id| {
                id.as_str().is_some_and(|id| ids.contains_key(id))
            })?
        } else {
            // The ids the consumer holds, looked up once per run (a client
            // that resends its whole history would otherwise cost a scan of
            // the conversation per input message).
            let held = held_ids(&[&self.replayed.messages]);
            normalize_run_started_reading(&started, |id| {
                id.as_str().is_some_and(|id| held.contains(id))
            })?
        };
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
        let kept = self.texts.len();
        for m in &target.messages[self.texts.len()..] {
            self.texts.push(m)?;
        }
        if let (true, Appended::Messages(appended)) = (self.proof && self.synced, &appended) {
            // Below `from`, `replayed` (the original as of the last mark)
            // and `target` hold the same, verified messages.
            let from = kept.min(self.verified);
            let head = std::slice::from_ref(&normalized);
            let tail = std::slice::from_ref(&terminal);
            if let Some(events) = self.prove(from, appended, head, tail)? {
                self.follow(from);
                self.proven += 1;
                self.ready.extend(events);
                return Ok(());
            }
        }
        let target = self.original.conversation();
        let texts = Some(&self.texts);
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
                // `reached` is `target`, checked by `restate_owned`: the
                // original as of the mark just reset. Nothing is verified
                // for the proof yet.
                self.replayed = reached;
                self.synced = true;
                self.verified = 0;
                self.ids.clear();
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

impl SnapshotCompactor {
    /// The checkpoint of the run, proven without replaying it, or `None`
    /// when the proof cannot decide (the caller then replays).
    ///
    /// The consumer holds `replayed` followed by `appended` (what the
    /// normalized `RUN_STARTED` appends). The reducer applies a
    /// `MESSAGES_SNAPSHOT` without metadata of the target messages `T` (ids
    /// distinct) to a local list `L` like this: every local message whose id
    /// `T` holds becomes `T`'s message, in the local order; a local message
    /// whose id `T` lacks is dropped, unless it is an activity or reasoning
    /// message `T` has none of (kept); then the messages of `T` not placed
    /// yet follow in `T`'s order. The result is `T` exactly when the local
    /// messages with ids in `T` hold the first ids of `T` in `T`'s order,
    /// none is kept that `T` lacks, and every message of `T` parses back
    /// from its text to itself. Below `from`, `L` and `T` hold the same
    /// verified messages, so only what changed since the last checkpoint
    /// and the appended messages are looked at.
    fn prove(
        &self,
        from: usize,
        appended: &[Value],
        head: &[Event],
        tail: &[Event],
    ) -> Result<Option<Vec<Event>>, CompactError> {
        let target = self.original.conversation();
        let messages = &target.messages;
        if self.texts.len() != messages.len()
            || from > messages.len()
            || from > self.replayed.messages.len()
        {
            return Ok(None);
        }
        // The new messages of `T`: objects with string ids found nowhere
        // else in `T`, each parsing back from its text to itself.
        let mut fresh: HashMap<&str, usize> = HashMap::new();
        for (i, m) in messages.iter().enumerate().skip(from) {
            let Some(Value::String(id)) = m.get("id") else {
                return Ok(None);
            };
            if matches!(m.get("subagentRunId"), Some(Value::Null))
                || self.ids.get(id.as_str()).is_some_and(|&j| j < from)
                || fresh.insert(id.as_str(), i).is_some()
            {
                return Ok(None);
            }
            match serde_json::from_str::<Value>(self.texts.text(i)) {
                Ok(parsed) if parsed == *m => {}
                _ => return Ok(None),
            }
        }
        // The local messages from `from` on.
        let mut next = from;
        for m in self.replayed.messages[from..].iter().chain(appended) {
            let Some(Value::String(id)) = m.get("id") else {
                return Ok(None);
            };
            if self.ids.get(id.as_str()).is_some_and(|&j| j < from) {
                // Twice in the local list: the result would hold it twice.
                return Ok(None);
            }
            match fresh.get(id.as_str()) {
                Some(&i) if i == next => next += 1,
                Some(_) => return Ok(None),
                None => {
                    // Dropped, unless kept as an activity or reasoning
                    // message (undecided here).
                    if matches!(m.get("role"), Some(Value::String(r)) if r == "activity" || r == "reasoning")
                    {
                        return Ok(None);
                    }
                }
            }
        }
        let mut body = Vec::with_capacity(2);
        body.push(messages_snapshot_with(messages, Some(&self.texts), false)?);
        if state_exists(&target.state) || self.replayed.state != target.state {
            let state = state_snapshot(&target.state)?;
            // The state alone, through the reducer (it does not depend on
            // the messages).
            let reached = replay_owned(
                Conversation {
                    messages: Vec::new(),
                    state: Value::Null,
                },
                std::slice::from_ref(&state),
            );
            if reached.is_none_or(|r| r.state != target.state) {
                return Ok(None);
            }
            body.push(state);
        }
        let mut events = head.to_vec();
        events.extend(body);
        events.extend(tail.iter().cloned());
        Ok(Some(events))
    }

    /// After a proven checkpoint: the consumer holds the original's
    /// conversation, every message verified.
    fn follow(&mut self, from: usize) {
        let target = self.original.conversation();
        for m in &self.replayed.messages[from..] {
            if let Some(Value::String(id)) = m.get("id") {
                self.ids.remove(id.as_str());
            }
        }
        self.replayed.messages.truncate(from);
        for (i, m) in target.messages.iter().enumerate().skip(from) {
            if let Some(Value::String(id)) = m.get("id") {
                self.ids.insert(id.clone(), i);
            }
            self.replayed.messages.push(m.clone());
        }
        if self.replayed.state != target.state {
            self.replayed.state = target.state.clone();
        }
        self.verified = target.messages.len();
        self.synced = true;
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

    /// A run shaped like the demo agent's: the user's message in the input,
    /// state, an answer, a tool call and its result.
    fn demo_run(k: usize) -> Vec<Event> {
        let r = format!("r{k}");
        let text = [
            format!(
                r#"{{"type":"RUN_STARTED","threadId":"t","runId":"{r}","input":{{"threadId":"t","runId":"{r}","messages":[{{"id":"u{k}","role":"user","content":"hi {k}"}}],"tools":[],"context":[],"state":{{}},"forwardedProps":{{}}}}}}"#
            ),
            format!(r#"{{"type":"STATE_SNAPSHOT","snapshot":{{"turn":{k}}}}}"#),
            format!(r#"{{"type":"TEXT_MESSAGE_START","messageId":"a{k}","role":"assistant"}}"#),
            format!(r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"a{k}","delta":"ok {k}"}}"#),
            format!(r#"{{"type":"TEXT_MESSAGE_END","messageId":"a{k}"}}"#),
            format!(
                r#"{{"type":"TOOL_CALL_START","toolCallId":"c{k}","toolCallName":"echo","parentMessageId":"a{k}"}}"#
            ),
            format!(r#"{{"type":"TOOL_CALL_ARGS","toolCallId":"c{k}","delta":"{{}}"}}"#),
            format!(r#"{{"type":"TOOL_CALL_END","toolCallId":"c{k}"}}"#),
            format!(
                r#"{{"type":"TOOL_CALL_RESULT","messageId":"x{k}","toolCallId":"c{k}","content":"done","role":"tool"}}"#
            ),
            format!(r#"{{"type":"RUN_FINISHED","threadId":"t","runId":"{r}"}}"#),
        ];
        text.iter().map(|t| ev(t)).collect()
    }

    fn run_all(mut compactor: SnapshotCompactor, events: &[Event]) -> (Vec<String>, u64) {
        let mut out = Vec::new();
        for e in events {
            compactor.push(e.clone()).unwrap();
            out.extend(compactor.drain().map(|e| e.json().to_owned()));
        }
        compactor.finish().unwrap();
        out.extend(compactor.drain().map(|e| e.json().to_owned()));
        (out, compactor.proven_checkpoints())
    }

    /// On a thread that only grows, every checkpoint is proven (none is
    /// replayed), with the bytes the replay gives; a reasoning message the
    /// next snapshot leaves out makes that run replay, after which the proof
    /// takes over again.
    #[test]
    fn growing_threads_are_proven_and_undecided_runs_replayed() {
        let mut events: Vec<Event> = (1..=6).flat_map(demo_run).collect();
        let start = Conversation::default();
        let (proven, count) = run_all(SnapshotCompactor::new(&start), &events);
        let (replayed, none) = run_all(SnapshotCompactor::new(&start).with_full_replay(), &events);
        assert_eq!(proven, replayed);
        assert_eq!((count, none), (6, 0));

        // A run holding a reasoning message, then one whose snapshot in the
        // input replaces it with another reasoning message: the consumer's
        // reasoning message is dropped, which the proof leaves undecided.
        events.extend(demo_run(7));
        let at = events.len() - 1;
        events.insert(
            at,
            ev(r#"{"type":"REASONING_MESSAGE_START","messageId":"z","role":"reasoning"}"#),
        );
        events.insert(
            at + 1,
            ev(r#"{"type":"REASONING_MESSAGE_END","messageId":"z"}"#),
        );
        let mut eighth = demo_run(8);
        eighth.insert(
            1,
            ev(r#"{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"hi 1"},{"id":"y","role":"reasoning","content":"r"}]}"#),
        );
        events.extend(eighth);
        events.extend((9..=10).flat_map(demo_run));
        let (proven, count) = run_all(SnapshotCompactor::new(&start), &events);
        let (replayed, _) = run_all(SnapshotCompactor::new(&start).with_full_replay(), &events);
        assert_eq!(proven, replayed);
        assert_eq!(count, 9);
    }

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
