//! Building the restating events of `snapshot` and `latest`, and checking
//! them against the reducer before they are emitted.

use foldhash::{HashSet, HashSetExt};

use agui_protocol::{Event, EventType, MAX_DEPTH};
use serde_json::{Map, Value, json};

use super::CompactError;
use crate::reduce::{Conversation, Reducer};

/// Applies `events` to a copy of `from` (the reducer expands chunks); `None`
/// when the reducer refuses one of them.
pub(crate) fn replay(from: &Conversation, events: &[Event]) -> Option<Conversation> {
    replay_owned(from.clone(), events)
}

/// [`replay`] on a conversation the caller gives up (no copy).
pub(crate) fn replay_owned(from: Conversation, events: &[Event]) -> Option<Conversation> {
    let mut reducer = Reducer::new(from);
    for event in events {
        reducer.apply(event).ok()?;
    }
    Some(reducer.into_conversation())
}

/// True when two conversations hold the same messages (in order) and state.
pub(crate) fn same(a: &Conversation, b: &Conversation) -> bool {
    a.messages == b.messages && a.state == b.state
}

/// The string ids of the messages in `lists`, to look up once per input
/// message of a `RUN_STARTED` (a client that resends its whole history
/// would otherwise cost a scan of the conversation per input message): an
/// id `held(...).contains` is one a message `m` of the lists has as
/// `m.get("id") == Some(&Value::String(id))`.
pub(crate) fn held_ids<'a>(lists: &[&'a [Value]]) -> HashSet<&'a str> {
    lists
        .iter()
        .flat_map(|list| list.iter())
        .filter_map(|m| m.get("id").and_then(Value::as_str))
        .collect()
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

/// What applying a normalized `RUN_STARTED` appends to the messages, when
/// it can be told without the reducer (see [`normalize_run_started_reading`]).
pub(crate) enum Appended {
    /// These messages, in order (`subagentRunId: null` removed, as the
    /// reducer removes it).
    Messages(Vec<Value>),
    /// Undecided (an input that is not a list of objects with string ids):
    /// only the reducer can tell.
    Unknown,
}

/// [`normalize_run_started`], and what the normalized event appends to a
/// conversation whose string ids are exactly those `known` accepts: every
/// remaining input message, each of which then has a string id not held
/// and not repeated (the reducer appends an input message whose id it does
/// not find).
pub(crate) fn normalize_run_started_reading(
    event: &Event,
    mut known: impl FnMut(&Value) -> bool,
) -> Result<(Event, Appended), CompactError> {
    let mut value = event.to_value();
    if !value.is_object() {
        // Not decoded (`to_value` gives `null` for text it cannot decode,
        // e.g. a lone surrogate): only the reducer can tell what it does.
        return Ok((normalize_run_started(event, known)?, Appended::Unknown));
    }
    let Some(messages) = value
        .get_mut("input")
        .and_then(|input| input.get_mut("messages"))
        .and_then(Value::as_array_mut)
    else {
        // The reducer reads `input.messages` only from an object `input`
        // and does nothing when it is absent or `null`.
        let read = value
            .get("input")
            .and_then(Value::as_object)
            .and_then(|input| input.get("messages"));
        let appended = match read {
            None | Some(Value::Null) => Appended::Messages(Vec::new()),
            Some(_) => Appended::Unknown,
        };
        return Ok((event.clone(), appended));
    };
    let before = messages.len();
    let mut seen: HashSet<String> = HashSet::new();
    let mut plain = true;
    messages.retain(|m| {
        let id = m.get("id");
        let Some(Value::String(id)) = id else {
            // Kept, as [`normalize_run_started`] keeps it.
            plain = false;
            return true;
        };
        if known(&Value::String(id.clone())) || seen.contains(id) {
            return false;
        }
        seen.insert(id.clone());
        true
    });
    let appended = if plain && messages.iter().all(Value::is_object) {
        Appended::Messages(
            messages
                .iter()
                .map(|m| {
                    let mut m = m.clone();
                    if let Value::Object(map) = &mut m
                        && matches!(map.get("subagentRunId"), Some(Value::Null))
                    {
                        map.shift_remove("subagentRunId");
                    }
                    m
                })
                .collect(),
        )
    } else {
        Appended::Unknown
    };
    if messages.len() == before {
        return Ok((event.clone(), appended));
    }
    let event = Event::from_serialize(&value).map_err(CompactError::Synthesized)?;
    Ok((event, appended))
}

/// The compact JSON text of each message of a list, and how deep each
/// nests, kept by a caller that restates the list often (`snapshot` mode):
/// each message is serialized and measured once, and its text reused by
/// every later restatement until the message changes.
#[derive(Debug, Default)]
pub(crate) struct MessageTexts {
    texts: Vec<String>,
    /// How deep each message nests (see [`nesting`]).
    depths: Vec<usize>,
}

impl MessageTexts {
    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    /// The text of message `i`.
    pub(crate) fn text(&self, i: usize) -> &str {
        &self.texts[i]
    }

    /// Keeps the first `n` messages' texts.
    pub(crate) fn truncate(&mut self, n: usize) {
        self.texts.truncate(n);
        self.depths.truncate(n);
    }

    /// Appends the text of the next message.
    pub(crate) fn push(&mut self, message: &Value) -> Result<(), CompactError> {
        self.texts
            .push(serde_json::to_string(message).map_err(CompactError::Json)?);
        self.depths.push(nesting(message));
        Ok(())
    }
}

/// A `MESSAGES_SNAPSHOT` of `messages`. With `authoritative`, it claims every
/// activity type (`@ag-ui/client` metadata), so activity messages it leaves
/// out are removed. `texts`, when the caller keeps them, are those of
/// `messages` (`texts.text(i)` is `messages[i]` serialized): the same
/// bytes, without serializing every message again, and without checking
/// the event's text again.
pub(crate) fn messages_snapshot_with(
    messages: &[Value],
    texts: Option<&MessageTexts>,
    authoritative: bool,
) -> Result<Event, CompactError> {
    // Written straight from the messages: the same text as serializing
    // `{"type", "messages", "metadata"?}`, without copying the conversation
    // into a new JSON tree first (a snapshot restates all of it).
    match texts.filter(|t| t.len() == messages.len()) {
        Some(texts) => messages_snapshot_of(texts, authoritative),
        None => {
            let mut text = String::with_capacity(64);
            text.push_str(r#"{"type":"MESSAGES_SNAPSHOT","messages":"#);
            text.push_str(&serde_json::to_string(messages).map_err(CompactError::Json)?);
            finish_messages_snapshot(text, None, authoritative)
        }
    }
}

/// A `MESSAGES_SNAPSHOT` of the messages whose texts are `texts`, as
/// [`messages_snapshot_with`] writes it.
pub(crate) fn messages_snapshot_of(
    texts: &MessageTexts,
    authoritative: bool,
) -> Result<Event, CompactError> {
    // serde_json's compact array: `[`, the elements joined by `,`, `]`.
    let len: usize = texts.texts.iter().map(|t| t.len() + 1).sum();
    let mut text = String::with_capacity(len + 128);
    text.push_str(r#"{"type":"MESSAGES_SNAPSHOT","messages":"#);
    text.push('[');
    for (i, t) in texts.texts.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(t);
    }
    text.push(']');
    finish_messages_snapshot(text, Some(texts), authoritative)
}

/// Ends a `MESSAGES_SNAPSHOT`'s text that holds its messages, and makes
/// the event (`texts`: those the messages were written from, if kept).
fn finish_messages_snapshot(
    mut text: String,
    texts: Option<&MessageTexts>,
    authoritative: bool,
) -> Result<Event, CompactError> {
    if authoritative {
        text.push_str(r#","metadata":"#);
        let metadata = json!({"@ag-ui/client": {"authoritativeActivityTypes": null}});
        text.push_str(&serde_json::to_string(&metadata).map_err(CompactError::Json)?);
    }
    text.push('}');
    // The text is serde_json's writing of values, so it is one line of
    // valid JSON with no lone surrogate, and its only top-level keys are
    // ours: all `Event::from_json` would check is how deep it nests (the
    // event's object and the list hold each message two levels down), which
    // kept texts know. A conversation can nest deeper than any one event
    // did (a patch or a merge moves values down), and then the full check
    // says so; without kept texts, it checks everything.
    let deepest = texts.map(|t| t.depths.iter().copied().max().unwrap_or(0));
    if deepest.is_some_and(|d| d + 2 <= MAX_DEPTH) {
        Ok(Event::from_assembled(text, EventType::MessagesSnapshot))
    } else {
        Event::from_json_string(text).map_err(CompactError::Synthesized)
    }
}

/// How many arrays and objects deep `value` nests: a scalar 0, `[]` and
/// `{}` 1, `[{}]` 2. Walks without recursion.
fn nesting(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1)];
    while let Some((value, depth)) = stack.pop() {
        let children: &mut dyn Iterator<Item = &Value> = match value {
            Value::Array(items) => &mut items.iter(),
            Value::Object(map) => &mut map.values(),
            _ => continue,
        };
        deepest = deepest.max(depth);
        stack.extend(
            children
                .filter(|child| child.is_array() || child.is_object())
                .map(|child| (child, depth + 1)),
        );
    }
    deepest
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
    let mut seen = HashSet::new();
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
///
/// For a caller done with `target` (`latest` mode): its messages' texts are
/// kept and its tree dropped before the check replays the restating events,
/// so one conversation tree is held at a time, not two. The check compares
/// what the replay reached with the kept texts: serde_json writes equal
/// trees alike, so equal texts mean equal trees.
/// (The converse fails only for an object equal in value with its keys in
/// another order, which a replay of these texts does not make: such a
/// check would fail and the caller fall back to `deltas` form, never pass
/// wrongly.)
pub(crate) fn restate_target(
    local: &Conversation,
    target: Conversation,
    head: &[Event],
    tail: &[Event],
) -> Result<Option<Vec<Event>>, CompactError> {
    if has_duplicate_ids(&target.messages) {
        return Ok(None);
    }
    let with_state = state_exists(&target.state) || local.state != target.state;
    let mut texts = MessageTexts::default();
    for message in &target.messages {
        texts.push(message)?;
    }
    let state = serde_json::to_string(&target.state).map_err(CompactError::Json)?;
    let state_event = with_state
        .then(|| state_snapshot(&target.state))
        .transpose()?;
    drop(target);
    for authoritative in [false, true] {
        let mut body = Vec::with_capacity(2);
        body.push(messages_snapshot_of(&texts, authoritative)?);
        body.extend(state_event.iter().cloned());
        if let Some(reached) = replay_owned(local.clone(), &body)
            && writes_as(&reached, &texts, &state)?
        {
            let mut all: Vec<Event> = head.to_vec();
            all.extend(body);
            all.extend(tail.iter().cloned());
            return Ok(Some(all));
        }
    }
    Ok(None)
}

/// True when `conversation`'s messages are written as `texts` and its
/// state as `state`, compared message by message (no whole text made).
fn writes_as(
    conversation: &Conversation,
    texts: &MessageTexts,
    state: &str,
) -> Result<bool, CompactError> {
    if conversation.messages.len() != texts.len() {
        return Ok(false);
    }
    let mut written = Vec::new();
    for (i, message) in conversation.messages.iter().enumerate() {
        written.clear();
        serde_json::to_writer(&mut written, message).map_err(CompactError::Json)?;
        if written != texts.text(i).as_bytes() {
            return Ok(false);
        }
    }
    written.clear();
    serde_json::to_writer(&mut written, &conversation.state).map_err(CompactError::Json)?;
    Ok(written == state.as_bytes())
}

/// The restating events as [`restate_target`] finds them, for a caller that
/// goes on from `target` (`snapshot` mode), so `target` is borrowed and
/// compared as a tree; `local` is given up: the first try replays it
/// without a copy, and `again` makes it anew for the second (rare) try.
/// Also returns what the consumer holds after the restating events, which
/// is `target` (checked), so the caller need not copy `target` either.
pub(crate) fn restate_owned(
    local: Conversation,
    again: impl FnOnce() -> Option<Conversation>,
    target: &Conversation,
    target_texts: Option<&MessageTexts>,
    head: &[Event],
    tail: &[Event],
) -> Result<Option<(Vec<Event>, Conversation)>, CompactError> {
    if has_duplicate_ids(&target.messages) {
        return Ok(None);
    }
    let with_state = state_exists(&target.state) || local.state != target.state;
    let mut local = Some(local);
    let mut again = Some(again);
    for authoritative in [false, true] {
        let from = match local.take() {
            Some(from) => from,
            None => match again.take().and_then(|f| f()) {
                Some(from) => from,
                None => return Ok(None),
            },
        };
        let mut body = Vec::with_capacity(2);
        body.push(messages_snapshot_with(
            &target.messages,
            target_texts,
            authoritative,
        )?);
        if with_state {
            body.push(state_snapshot(&target.state)?);
        }
        if let Some(reached) = replay_owned(from, &body)
            && same(&reached, target)
        {
            let mut all: Vec<Event> = head.to_vec();
            all.extend(body);
            all.extend(tail.iter().cloned());
            return Ok(Some((all, reached)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(messages: &[Value]) -> MessageTexts {
        let mut texts = MessageTexts::default();
        for m in messages {
            texts.push(m).unwrap();
        }
        texts
    }

    /// Kept message texts give exactly the bytes of serializing the list.
    #[test]
    fn a_snapshot_from_kept_texts_is_byte_identical() {
        let messages: Vec<Value> = vec![
            json!({"id": "u1", "role": "user", "content": "héllo \"quoted\" \\ \n\t\u{1F600} </script>"}),
            json!({"id": "a1", "role": "assistant", "content": null,
                   "toolCalls": [{"id": "t1", "type": "function",
                                  "function": {"name": "f", "arguments": "{\"x\":1.5e300}"}}]}),
            json!({"id": 7, "role": "tool", "content": [1, -2, 0.1, 1e-7, 18446744073709551615u64], "toolCallId": "t1"}),
            json!({"id": "e", "role": "user", "content": "", "nested": {"b": {}, "a": []}}),
        ];
        for n in 0..=messages.len() {
            let texts = kept(&messages[..n]);
            for authoritative in [false, true] {
                let want = messages_snapshot_with(&messages[..n], None, authoritative).unwrap();
                let got =
                    messages_snapshot_with(&messages[..n], Some(&texts), authoritative).unwrap();
                assert_eq!(got.json(), want.json(), "{n} {authoritative}");
            }
        }
        // Both are what serializing the whole event writes, and what the
        // envelope check accepts unchanged.
        for authoritative in [false, true] {
            let mut whole = json!({"type": "MESSAGES_SNAPSHOT", "messages": messages});
            if authoritative {
                whole["metadata"] = json!({"@ag-ui/client": {"authoritativeActivityTypes": null}});
            }
            let want = Event::from_serialize(&whole).unwrap();
            let got =
                messages_snapshot_with(&messages, Some(&kept(&messages)), authoritative).unwrap();
            assert_eq!(got.json(), want.json());
            assert_eq!(got.event_type(), &EventType::MessagesSnapshot);
        }
        // Texts that do not match the list in length are not used.
        let got = messages_snapshot_with(&messages, Some(&kept(&messages[..1])), false).unwrap();
        assert_eq!(
            got.json(),
            messages_snapshot_with(&messages, None, false)
                .unwrap()
                .json()
        );
    }

    /// A message `levels` arrays and objects deep: an object whose
    /// `content` nests the rest as arrays.
    fn message_nesting(levels: usize) -> Value {
        let mut content = json!([]);
        for _ in 2..levels {
            content = json!([content]);
        }
        json!({"id": "m", "role": "user", "content": content})
    }

    /// A snapshot is built without the envelope check only when its
    /// messages nest shallowly enough; one that would nest deeper than an
    /// event may is refused, as the envelope check refuses it.
    #[test]
    fn a_snapshot_nests_no_deeper_than_an_event_may() {
        for (value, depth) in [
            (json!(1), 0),
            (json!("s"), 0),
            (json!([]), 1),
            (json!({}), 1),
            (json!([[]]), 2),
            (json!({"a": [1, {"b": 2}]}), 3),
            (json!({"a": [1, {"b": []}], "c": {}}), 4),
        ] {
            assert_eq!(nesting(&value), depth, "{value}");
        }
        for levels in [MAX_DEPTH - 3, MAX_DEPTH - 2, MAX_DEPTH - 1, MAX_DEPTH + 5] {
            let m = message_nesting(levels);
            assert_eq!(nesting(&m), levels);
            let messages = vec![json!({"id": "a", "role": "user", "content": "x"}), m];
            let texts = kept(&messages);
            let whole = json!({"type": "MESSAGES_SNAPSHOT", "messages": messages});
            let checked = Event::from_json(&whole.to_string());
            for kept in [None, Some(&texts)] {
                let built = messages_snapshot_with(&messages, kept, false);
                match (&checked, &built) {
                    (Ok(want), Ok(got)) => assert_eq!(got.json(), want.json(), "{levels}"),
                    (Err(_), Err(CompactError::Synthesized(_))) => {}
                    _ => panic!("{levels}: envelope check {checked:?}, built {built:?}"),
                }
            }
            assert_eq!(checked.is_ok(), levels + 2 <= MAX_DEPTH, "{levels}");
        }
    }
}
