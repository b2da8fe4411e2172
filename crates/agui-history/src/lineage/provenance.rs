//! Where each message id comes from, so that a branch's history never takes
//! in messages generated on a branch it abandoned.
//!
//! A message id is *mentioned* three ways:
//! - **sent**: listed in a `RUN_STARTED.input.messages` (the client's request);
//! - **generated**: created by an event of a run's own stream
//!   (`TEXT_MESSAGE_START`, `TOOL_CALL_START` / `TOOL_CALL_RESULT`,
//!   `REASONING_MESSAGE_START`, `ACTIVITY_SNAPSHOT` and their chunks);
//! - **restated**: listed in a `MESSAGES_SNAPSHOT`.
//!
//! A message is *agent-owned* when its first mention in the log is not a
//! sending. Its owners are the runs that generated it, plus the run whose
//! snapshot first listed it. A restatement of an agent-owned message (in an
//! input or a snapshot) is *foreign* on a branch when none of its owners is
//! on that branch: it is removed before the event is replayed there.

use std::borrow::Cow;
use std::collections::HashMap;

use agui_protocol::{Event, EventType};
use serde_json::Value;

use super::index::RunIndex;
use super::view;

/// Who produced an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// The events before the first `RUN_STARTED`.
    Preamble,
    /// A run, by its position in the log (0 for the first `RUN_STARTED`, as
    /// in [`RunIndex::runs`]).
    Run(usize),
}

#[derive(Debug, Clone)]
struct Origin<O> {
    sent_first: bool,
    owners: Vec<O>,
}

impl<O> Default for Origin<O> {
    fn default() -> Self {
        Origin {
            sent_first: false,
            owners: Vec::new(),
        }
    }
}

/// The origin of every message id of a log.
///
/// Build it for a whole log with the run index, or feed it one event at a
/// time with [`Provenance::observe`] (a store appending runs), then ask
/// [`Provenance::is_foreign`] or clean events with [`without_foreign`].
///
/// Owners are [`Owner`]s (positions in a [`RunIndex`]) by default; a store
/// that knows its runs by id may name them so (`O` = the run id, say).
#[derive(Debug, Clone)]
pub struct Provenance<O = Owner> {
    ids: HashMap<String, Origin<O>>,
}

impl<O> Default for Provenance<O> {
    fn default() -> Self {
        Provenance {
            ids: HashMap::new(),
        }
    }
}

impl Provenance {
    /// The provenance of a whole indexed log.
    pub fn build(events: &[Event], index: &RunIndex) -> Provenance {
        let mut prov = Provenance::default();
        for i in index.preamble() {
            if let Some(event) = events.get(i) {
                prov.observe(event, Owner::Preamble);
            }
        }
        for (position, run) in index.runs().iter().enumerate() {
            for i in run.segment() {
                if let Some(event) = events.get(i) {
                    prov.observe(event, Owner::Run(position));
                }
            }
        }
        prov
    }
}

impl<O: Clone + PartialEq> Provenance<O> {
    /// Nothing observed yet.
    pub fn new() -> Provenance<O> {
        Provenance::default()
    }

    /// Records the message ids `event` mentions; `owner` is who produced it.
    /// Events must be observed in log order.
    pub fn observe(&mut self, event: &Event, owner: O) {
        match event.event_type() {
            EventType::RunStarted | EventType::MessagesSnapshot => {
                let sent = *event.event_type() == EventType::RunStarted;
                let value = value_of(event);
                for id in restated_ids(&value) {
                    self.ids.entry(id.to_owned()).or_insert_with(|| Origin {
                        sent_first: sent,
                        owners: if sent {
                            Vec::new()
                        } else {
                            vec![owner.clone()]
                        },
                    });
                }
            }
            _ => {
                if let Some(id) = view::created_message_id(event) {
                    let origin = self.ids.entry(id).or_default();
                    if origin.owners.last() != Some(&owner) {
                        origin.owners.push(owner);
                    }
                }
            }
        }
    }

    /// True when restating `id` on a branch whose runs satisfy `on_path`
    /// would bring in a message generated only elsewhere.
    pub fn is_foreign(&self, id: &str, on_path: impl Fn(&O) -> bool) -> bool {
        match self.ids.get(id) {
            None => false,
            Some(origin) if origin.sent_first => false,
            Some(origin) => !origin.owners.iter().any(on_path),
        }
    }

    /// How many message ids have been observed.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no message id has been observed.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// The event as a JSON value; `null` for the rare valid JSON serde_json
/// cannot hold in a `Value` (an object keyed `$serde_json::private::Number`),
/// which then restates nothing. Not `Event::to_value`, which panics on it.
pub(crate) fn value_of(event: &Event) -> Value {
    serde_json::from_str(event.json()).unwrap_or(Value::Null)
}

/// The `messages` array an event restates: `input.messages` of a
/// `RUN_STARTED`, `messages` of a `MESSAGES_SNAPSHOT`.
fn messages_of(value: &Value) -> Option<&Vec<Value>> {
    match value.get("type").and_then(Value::as_str) {
        Some("RUN_STARTED") => value.get("input")?.get("messages")?.as_array(),
        Some("MESSAGES_SNAPSHOT") => value.get("messages")?.as_array(),
        _ => None,
    }
}

fn messages_of_mut(value: &mut Value) -> Option<&mut Vec<Value>> {
    match value.get("type").and_then(Value::as_str) {
        Some("RUN_STARTED") => value.get_mut("input")?.get_mut("messages")?.as_array_mut(),
        Some("MESSAGES_SNAPSHOT") => value.get_mut("messages")?.as_array_mut(),
        _ => None,
    }
}

fn restated_ids(value: &Value) -> impl Iterator<Item = &str> {
    messages_of(value)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("id").and_then(Value::as_str))
}

/// The ids of the messages `event` restates: those of
/// `RUN_STARTED.input.messages` or `MESSAGES_SNAPSHOT.messages` (string ids
/// only, in order); none for any other event.
pub fn restated_message_ids(event: &Event) -> Vec<String> {
    if !matches!(
        event.event_type(),
        EventType::RunStarted | EventType::MessagesSnapshot
    ) {
        return Vec::new();
    }
    let value = value_of(event);
    restated_ids(&value).map(str::to_owned).collect()
}

/// `event` without the restated messages `foreign` rejects, and the ids
/// removed. The event is returned as it is (borrowed, byte for byte) when
/// nothing is removed.
pub fn without_foreign<'e>(
    event: &'e Event,
    foreign: impl Fn(&str) -> bool,
) -> Result<(Cow<'e, Event>, Vec<String>), agui_protocol::EnvelopeError> {
    if !matches!(
        event.event_type(),
        EventType::RunStarted | EventType::MessagesSnapshot
    ) {
        return Ok((Cow::Borrowed(event), Vec::new()));
    }
    let mut value = value_of(event);
    if !restated_ids(&value).any(&foreign) {
        return Ok((Cow::Borrowed(event), Vec::new()));
    }
    let mut removed = Vec::new();
    if let Some(messages) = messages_of_mut(&mut value) {
        messages.retain(|m| match m.get("id").and_then(Value::as_str) {
            Some(id) if foreign(id) => {
                removed.push(id.to_owned());
                false
            }
            _ => true,
        });
    }
    Ok((Cow::Owned(Event::from_serialize(&value)?), removed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(text: &str) -> Event {
        Event::from_json(text).unwrap()
    }

    #[test]
    fn removes_only_foreign_restatements_and_keeps_the_rest_verbatim() {
        let e = ev(
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[{"id":"u1","role":"user","content":"hi"},{"id":"a2","role":"assistant","content":"x"}],"x":1.50}}"#,
        );
        let (same, removed) = without_foreign(&e, |id| id == "zz").unwrap();
        assert!(matches!(same, Cow::Borrowed(_)));
        assert!(removed.is_empty());
        let (cleaned, removed) = without_foreign(&e, |id| id == "a2").unwrap();
        assert_eq!(removed, vec!["a2".to_owned()]);
        assert_eq!(
            cleaned.json(),
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[{"id":"u1","role":"user","content":"hi"}],"x":1.50}}"#
        );
        let other = ev(r#"{"type":"TEXT_MESSAGE_START","messageId":"a2"}"#);
        assert!(matches!(
            without_foreign(&other, |_| true).unwrap().0,
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn first_mention_decides_ownership() {
        let events: Vec<Event> = [
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r1","input":{"threadId":"t","runId":"r1","messages":[{"id":"u1","role":"user","content":"q"}]}}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"a1"}"#,
            r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r1"}"#,
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r2"}"#,
            r#"{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"q"},{"id":"s2","role":"assistant","content":"s"}]}"#,
            r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r2"}"#,
        ]
        .iter()
        .map(|t| ev(t))
        .collect();
        let index = RunIndex::build(&events).unwrap();
        let prov = Provenance::build(&events, &index);
        let only_r1 = |o: &Owner| *o == Owner::Run(0) || *o == Owner::Preamble;
        assert!(
            !prov.is_foreign("u1", only_r1),
            "sent first: the client's word"
        );
        assert!(!prov.is_foreign("a1", only_r1));
        assert!(
            prov.is_foreign("s2", only_r1),
            "first listed by r2's snapshot"
        );
        assert!(prov.is_foreign("a1", |o| *o == Owner::Run(1)));
        assert!(!prov.is_foreign("never-seen", |_| false));

        // Observed one event at a time, as a store would, it answers alike.
        let mut inc = Provenance::new();
        let mut runs = 0;
        for e in &events {
            if *e.event_type() == EventType::RunStarted {
                runs += 1;
            }
            inc.observe(e, Owner::Run(runs - 1));
        }
        for id in ["u1", "a1", "s2"] {
            for branch in [only_r1, |o: &Owner| *o == Owner::Run(1)] {
                assert_eq!(
                    inc.is_foreign(id, branch),
                    prov.is_foreign(id, branch),
                    "{id}"
                );
            }
        }
    }
}
