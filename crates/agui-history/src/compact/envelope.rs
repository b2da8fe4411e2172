//! Building the restating events of `snapshot` and `latest`, and checking
//! them against the reducer before they are emitted.

use agui_protocol::Event;
use serde_json::{Map, Value, json};

use super::CompactError;
use crate::reduce::{Conversation, Reducer};

/// Applies `events` to a copy of `from` (the reducer expands chunks); `None`
/// when the reducer refuses one of them.
pub(crate) fn replay(from: &Conversation, events: &[Event]) -> Option<Conversation> {
    let mut reducer = Reducer::new(from.clone());
    for event in events {
        reducer.apply(event).ok()?;
    }
    Some(reducer.into_conversation())
}

/// True when two conversations hold the same messages (in order) and state.
pub(crate) fn same(a: &Conversation, b: &Conversation) -> bool {
    a.messages == b.messages && a.state == b.state
}

/// `RUN_STARTED` with every `input.messages` entry whose id is already held
/// (`known`) removed, duplicates within the input included. The event is
/// returned as it was when nothing is removed.
pub(crate) fn normalize_run_started(
    event: &Event,
    mut known: impl FnMut(&Value) -> bool,
) -> Result<Event, CompactError> {
    let mut value = event.to_value();
    let Some(messages) = value
        .get_mut("input")
        .and_then(|input| input.get_mut("messages"))
        .and_then(Value::as_array_mut)
    else {
        return Ok(event.clone());
    };
    let before = messages.len();
    let mut seen: Vec<Value> = Vec::new();
    messages.retain(|m| {
        let id = m.get("id").cloned().unwrap_or(Value::Null);
        // Only plain ids are compared; anything else is kept (the reducer
        // decides, and keeping is always meaning-neutral).
        if !id.is_string() {
            return true;
        }
        if known(&id) || seen.contains(&id) {
            return false;
        }
        seen.push(id);
        true
    });
    if messages.len() == before {
        return Ok(event.clone());
    }
    Event::from_serialize(&value).map_err(CompactError::Synthesized)
}

/// A `MESSAGES_SNAPSHOT` of `messages`. With `authoritative`, it claims every
/// activity type (`@ag-ui/client` metadata), so activity messages it leaves
/// out are removed.
pub(crate) fn messages_snapshot(
    messages: &[Value],
    authoritative: bool,
) -> Result<Event, CompactError> {
    let mut event = Map::new();
    event.insert("type".into(), Value::String("MESSAGES_SNAPSHOT".into()));
    event.insert("messages".into(), Value::Array(messages.to_vec()));
    if authoritative {
        event.insert(
            "metadata".into(),
            json!({"@ag-ui/client": {"authoritativeActivityTypes": null}}),
        );
    }
    Event::from_serialize(&Value::Object(event)).map_err(CompactError::Synthesized)
}

/// A `STATE_SNAPSHOT` of `state`.
pub(crate) fn state_snapshot(state: &Value) -> Result<Event, CompactError> {
    let mut event = Map::new();
    event.insert("type".into(), Value::String("STATE_SNAPSHOT".into()));
    event.insert("snapshot".into(), state.clone());
    Event::from_serialize(&Value::Object(event)).map_err(CompactError::Synthesized)
}

/// True when `state` says something: anything but an empty object.
pub(crate) fn state_exists(state: &Value) -> bool {
    !matches!(state, Value::Object(m) if m.is_empty())
}

/// True when two messages share an id. The reducer can then hold one object
/// at two positions (a `MESSAGES_SNAPSHOT` replaces every local message with
/// that id by the same snapshot object), so a later event that writes the
/// first one writes both; a restated snapshot holds two separate objects and
/// cannot carry that, so such a conversation is never restated.
fn has_duplicate_ids(messages: &[Value]) -> bool {
    let mut seen = std::collections::HashSet::new();
    messages
        .iter()
        .filter_map(|m| m.get("id").and_then(Value::as_str))
        .any(|id| !seen.insert(id))
}

/// The restating events between a run's `RUN_STARTED` and its terminal that
/// take `local` (what the consumer holds right after `RUN_STARTED`) to
/// `target`, checked with the reducer. `None` when no single
/// `MESSAGES_SNAPSHOT` can (the reducer keeps the local order of messages it
/// already holds, and keeps reasoning messages a snapshot without reasoning
/// does not mention), or when two messages share an id.
pub(crate) fn restate(
    local: &Conversation,
    target: &Conversation,
    head: &[Event],
    tail: &[Event],
) -> Result<Option<Vec<Event>>, CompactError> {
    if has_duplicate_ids(&target.messages) {
        return Ok(None);
    }
    let with_state = state_exists(&target.state) || local.state != target.state;
    for authoritative in [false, true] {
        let mut body = Vec::with_capacity(2);
        body.push(messages_snapshot(&target.messages, authoritative)?);
        if with_state {
            body.push(state_snapshot(&target.state)?);
        }
        let mut all: Vec<Event> = head.to_vec();
        all.extend(body.iter().cloned());
        all.extend(tail.iter().cloned());
        if let Some(reached) = replay(local, &body)
            && same(&reached, target)
        {
            return Ok(Some(all));
        }
    }
    Ok(None)
}
