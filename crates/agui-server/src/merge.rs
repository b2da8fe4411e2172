//! Merging a run's input messages with its branch's stored conversation,
//! without parsing the conversation.
//!
//! A run that continues a branch gets the branch's restored conversation as
//! one JSON text (`{"messages":[...],"state":...}`, shared by the store's
//! engine). [`History::read`] finds each stored message's slice of that text
//! and its id in one walk over trusted text (the store composed it); no
//! message is parsed. Merging and normalizing work on a list of [`Msg`]s,
//! each either a stored slice or a client message, and the forwarded and
//! recorded inputs are written from those slices. A stored message is
//! parsed only when it must be compared with a client message of the same
//! id whose JSON text differs from it byte for byte.
//!
//! The rules:
//! - **merge** (server-managed sessions; a fork in client mode): the stored
//!   messages first, each replaced in place by the first client message with
//!   its id, then the client's other messages in order. Duplicate stored ids
//!   keep their first copy; a client message is never dropped, even one whose
//!   id repeats among the client's (it then follows, as sent).
//! - **normalize** (what `RUN_STARTED.input` records): the messages the
//!   branch history lacks (a new id, or a known id with other JSON), when the
//!   forwarded list is exactly `merge(history, those)`; otherwise the whole
//!   forwarded list (a client that sent a history reordered or cut against
//!   the stored one).

use std::cell::{OnceCell, RefCell};
use std::collections::hash_map::Entry;
use std::ops::Range;
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// A branch's stored conversation: its restored text and where each message
/// and the state lie in it.
#[derive(Debug, Clone, Default)]
pub struct History {
    text: Arc<String>,
    messages: Vec<Stored>,
    /// The `state` member's value (`null` included), when present.
    state: Option<Range<usize>>,
}

#[derive(Debug, Clone)]
struct Stored {
    range: Range<usize>,
    /// The message's `id` when it is a string.
    id: Option<Box<str>>,
}

/// The restored text is not a `{messages: [...], state}` object.
#[derive(Debug, Clone, thiserror::Error)]
#[error("a restored conversation is not a {{\"messages\":[...]}} JSON object")]
pub struct NotAConversation;

impl History {
    /// No stored conversation (a thread's first run).
    pub fn empty() -> History {
        History::default()
    }

    /// Reads a restored conversation in place. The text is walked once
    /// without checking its grammar (the store wrote it); text the walk
    /// cannot read (an escaped key, say) is read with `serde_json` instead.
    /// Either way an error means the text is not a JSON object with a
    /// `messages` array.
    pub fn read(text: Arc<String>) -> Result<History, NotAConversation> {
        let (messages, state) = match walk(&text) {
            Some(found) => found,
            None => parse(&text).ok_or(NotAConversation)?,
        };
        Ok(History {
            text,
            messages,
            state,
        })
    }

    /// How many stored messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// True without stored messages.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Stored message `i`'s JSON text.
    pub fn message(&self, i: usize) -> &str {
        &self.text[self.messages[i].range.clone()]
    }

    /// Stored message `i`'s id, when a string.
    pub fn id(&self, i: usize) -> Option<&str> {
        self.messages[i].id.as_deref()
    }

    /// The stored state's JSON text (`null` included), when the conversation
    /// has a `state` member.
    pub fn state(&self) -> Option<&str> {
        self.state.clone().map(|r| &self.text[r])
    }
}

type Found = (Vec<Stored>, Option<Range<usize>>);

/// Where `part` (a slice of `text`) lies in `text`.
fn range_in(text: &str, part: &str) -> Range<usize> {
    let start = part.as_ptr() as usize - text.as_ptr() as usize;
    start..start + part.len()
}

/// The fast read: one walk over trusted text in the layout the store
/// writes, `{"messages":[...],"state":...}` (any other goes the slow way).
fn walk(text: &str) -> Option<Found> {
    let body = text.strip_prefix(MESSAGES)?;
    let mut messages = Vec::new();
    let end = agui_protocol::objects_of_valid(body, "id", |m, id| {
        messages.push(Stored {
            range: range_in(text, m),
            id: id.and_then(string_value),
        })
    })?;
    let state = state_after(&body[end..])?;
    Some((messages, state.map(|s| range_in(text, s))))
}

const MESSAGES: &str = r#"{"messages":"#;

/// What JSON counts as white space (Unicode's other spaces are not).
const JSON_SPACE: [char; 4] = [' ', '\t', '\n', '\r'];

/// What follows the messages in the store's layout: `}`, or
/// `,"state":VALUE}`, whose `VALUE` is returned.
fn state_after(rest: &str) -> Option<Option<&str>> {
    let rest = rest.trim_end_matches(JSON_SPACE);
    if rest == "}" {
        return Some(None);
    }
    let value = rest.strip_prefix(r#","state":"#)?.strip_suffix('}')?;
    let n = agui_protocol::value_end_of_valid(value)?;
    (!value.starts_with(JSON_SPACE) && value[n..].trim_matches(JSON_SPACE).is_empty())
        .then(|| Some(&value[..n]))
}

/// The `messages` and `state` members of a restored conversation's text,
/// as slices of it (`state` when present, `null` included): one walk over
/// trusted text in the store's layout, `serde_json` for any other. `None`
/// when the text is not an object with a `messages` array.
pub fn split(text: &str) -> Option<(&str, Option<&str>)> {
    if let Some(body) = text.strip_prefix(MESSAGES)
        && let Some(end) = agui_protocol::value_end_of_valid(body)
        && body.starts_with('[')
        && let Some(state) = state_after(&body[end..])
    {
        return Some((&body[..end], state));
    }
    let Members(members) = serde_json::from_str(text).ok()?;
    let last = |key: &str| {
        members
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|m| m.1.get())
    };
    let messages = last("messages").filter(|m| m.starts_with('['))?;
    Some((messages, last("state")))
}

/// A JSON string value's content (`None` for any other value).
fn string_value(raw: &str) -> Option<Box<str>> {
    let body = raw.strip_prefix('"')?.strip_suffix('"')?;
    if !body.contains('\\') {
        return Some(body.into());
    }
    serde_json::from_str::<String>(raw)
        .ok()
        .map(String::into_boxed_str)
}

/// The slow read, for text the walk leaves: `serde_json` with borrowed raw
/// values, a key given twice read as its last value (as `JSON.parse` does).
fn parse(text: &str) -> Option<Found> {
    let Members(members) = serde_json::from_str(text).ok()?;
    let last = |key: &str| members.iter().rev().find(|(k, _)| k == key).map(|m| m.1);
    let list: Vec<&RawValue> = serde_json::from_str(last("messages")?.get()).ok()?;
    let messages = list
        .iter()
        .map(|m| Stored {
            range: range_in(text, m.get()),
            id: serde_json::from_str::<Value>(m.get())
                .ok()
                .as_ref()
                .and_then(id_of)
                .map(Into::into),
        })
        .collect();
    Some((messages, last("state").map(|s| range_in(text, s.get()))))
}

/// A JSON object's members in order, values borrowed raw.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Members<'de>, A::Error> {
                let mut out = Vec::new();
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    out.push(member);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// One message of a list being merged: stored message `i` of the history,
/// or the client's message `i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Msg {
    /// A stored message (its index in the [`History`]).
    Stored(usize),
    /// A client message (its index in the client's `messages`).
    Client(usize),
}

/// A branch history and a client's messages, merged and compared without
/// parsing the history.
pub struct Messages<'a> {
    history: &'a History,
    client: &'a [Value],
    /// Each client message's id, read once.
    client_ids: Vec<Option<&'a str>>,
    /// Each client message's JSON text, written once when first needed (to
    /// compare it with a stored copy, or to forward it).
    client_text: Vec<OnceCell<String>>,
    base: OnceCell<Base<'a>>,
    /// Stored message `i` parsed, once needed.
    parsed: RefCell<HashMap<usize, Option<Value>>>,
    /// Stored message `i` against client message `j`.
    same: RefCell<HashMap<(usize, usize), bool>>,
}

/// The history indexed once for every merge and normalization.
struct Base<'a> {
    /// The stored messages, later copies of a repeated id left out: what
    /// every merge starts from.
    list: Vec<Msg>,
    /// Per id: where its first copy is in `list`, and which stored message
    /// is its last copy.
    ids: HashMap<&'a str, (usize, usize)>,
}

fn id_of(m: &Value) -> Option<&str> {
    m.get("id").and_then(Value::as_str)
}

impl<'a> Messages<'a> {
    /// `history` and the client's `messages`.
    pub fn new(history: &'a History, client: &'a [Value]) -> Messages<'a> {
        Messages {
            history,
            client,
            client_ids: client.iter().map(id_of).collect(),
            client_text: client.iter().map(|_| OnceCell::new()).collect(),
            base: OnceCell::new(),
            parsed: RefCell::default(),
            same: RefCell::default(),
        }
    }

    /// The client's messages, in order.
    pub fn client(&self) -> Vec<Msg> {
        (0..self.client.len()).map(Msg::Client).collect()
    }

    /// A message's id, when a string.
    pub fn id(&self, m: Msg) -> Option<&'a str> {
        match m {
            Msg::Stored(i) => self.history.id(i),
            Msg::Client(i) => self.client_ids[i],
        }
    }

    /// True when two messages are the same JSON value (key order aside, as
    /// `serde_json::Value` compares).
    pub fn same(&self, a: Msg, b: Msg) -> bool {
        match (a, b) {
            (Msg::Client(i), Msg::Client(j)) => i == j || self.client[i] == self.client[j],
            (Msg::Stored(i), Msg::Stored(j)) => {
                i == j
                    || self.history.message(i) == self.history.message(j)
                    || matches!(
                        (self.stored_value(i), self.stored_value(j)),
                        (Some(x), Some(y)) if x == y
                    )
            }
            (Msg::Stored(i), Msg::Client(j)) | (Msg::Client(j), Msg::Stored(i)) => {
                if let Some(&known) = self.same.borrow().get(&(i, j)) {
                    return known;
                }
                // The stored text is what serializing an equal value gives
                // nearly always; only a mismatch parses the stored copy.
                let same = self.client_text(j) == self.history.message(i)
                    || self.stored_value(i).is_some_and(|v| v == self.client[j]);
                self.same.borrow_mut().insert((i, j), same);
                same
            }
        }
    }

    /// Client message `j` as JSON text (a map of plain values always
    /// serializes).
    fn client_text(&self, j: usize) -> &str {
        self.client_text[j]
            .get_or_init(|| serde_json::to_string(&self.client[j]).unwrap_or_default())
    }

    fn stored_value(&self, i: usize) -> Option<Value> {
        self.parsed
            .borrow_mut()
            .entry(i)
            .or_insert_with(|| serde_json::from_str(self.history.message(i)).ok())
            .clone()
    }

    fn base(&self) -> &Base<'a> {
        self.base.get_or_init(|| {
            let h = self.history;
            let mut list = Vec::with_capacity(h.len());
            let mut ids: HashMap<&str, (usize, usize)> = HashMap::with_capacity(h.len());
            for i in 0..h.len() {
                match h.id(i) {
                    Some(id) => match ids.entry(id) {
                        Entry::Occupied(mut e) => e.get_mut().1 = i,
                        Entry::Vacant(e) => {
                            e.insert((list.len(), i));
                            list.push(Msg::Stored(i));
                        }
                    },
                    None => list.push(Msg::Stored(i)),
                }
            }
            Base { list, ids }
        })
    }

    /// The history with `messages` merged in by id (module docs).
    pub fn merge(&self, messages: &[Msg]) -> Vec<Msg> {
        let base = self.base();
        let mut merged = Vec::with_capacity(base.list.len() + messages.len());
        merged.extend_from_slice(&base.list);
        let mut taken: HashSet<&str> = HashSet::new();
        for &m in messages {
            match self.id(m) {
                Some(id) if !taken.insert(id) => merged.push(m),
                Some(id) => match base.ids.get(id) {
                    Some(&(pos, _)) => merged[pos] = m,
                    None => merged.push(m),
                },
                None => merged.push(m),
            }
        }
        merged
    }

    /// What `RUN_STARTED.input` records of the forwarded `messages` (module
    /// docs): `merge(history, result)` is `messages` again.
    pub fn normalize(&self, messages: &[Msg]) -> Vec<Msg> {
        if self.history.is_empty() {
            return messages.to_vec();
        }
        // A repeated stored id: its last copy is the one compared.
        let ids = &self.base().ids;
        let fresh: Vec<Msg> = messages
            .iter()
            .copied()
            .filter(|&m| {
                self.id(m)
                    .and_then(|id| ids.get(id))
                    .is_none_or(|&(_, last)| !self.same(Msg::Stored(last), m))
            })
            .collect();
        let rebuilt = self.merge(&fresh);
        let exact = rebuilt.len() == messages.len()
            && rebuilt.iter().zip(messages).all(|(&a, &b)| self.same(a, b));
        if exact { fresh } else { messages.to_vec() }
    }

    /// `messages` as a JSON array, stored ones copied from the history's
    /// text.
    pub fn to_json(&self, messages: &[Msg]) -> String {
        let size: usize = messages
            .iter()
            .map(|m| match *m {
                Msg::Stored(i) => self.history.messages[i].range.len() + 1,
                Msg::Client(j) => self.client_text(j).len() + 1,
            })
            .sum();
        let mut out = String::with_capacity(size + 2);
        out.push('[');
        for (k, m) in messages.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            match *m {
                Msg::Stored(i) => out.push_str(self.history.message(i)),
                // A map of plain values always serializes.
                Msg::Client(i) => out.push_str(self.client_text(i)),
            }
        }
        out.push(']');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn history(messages: &[Value], state: Option<Value>) -> History {
        let mut conv = serde_json::Map::new();
        conv.insert("messages".into(), Value::Array(messages.to_vec()));
        if let Some(s) = state {
            conv.insert("state".into(), s);
        }
        History::read(Arc::new(serde_json::to_string(&conv).unwrap())).unwrap()
    }

    fn values(m: &Messages<'_>, list: &[Msg]) -> Vec<Value> {
        serde_json::from_str(&m.to_json(list)).unwrap()
    }

    #[test]
    fn reads_messages_ids_and_state_in_place() {
        let text = r#"{"messages":[{"id":"a","role":"user","content":"x]"},{"role":"user","id":"b\u00e9"},{"id":7},3],"state":{"n":[1]}}"#;
        let h = History::read(Arc::new(text.to_owned())).unwrap();
        assert_eq!(h.len(), 4);
        assert_eq!(h.message(0), r#"{"id":"a","role":"user","content":"x]"}"#);
        assert_eq!(h.id(0), Some("a"));
        assert_eq!(h.id(1), Some("bé"));
        assert_eq!((h.id(2), h.id(3)), (None, None));
        assert_eq!(h.state(), Some(r#"{"n":[1]}"#));
        let h = History::read(Arc::new(r#"{"messages":[],"state":null}"#.into())).unwrap();
        assert_eq!((h.len(), h.state()), (0, Some("null")));
        let h = History::read(Arc::new(r#"{"messages":[]}"#.into())).unwrap();
        assert_eq!(h.state(), None);
    }

    #[test]
    fn split_finds_messages_and_state_either_way() {
        let fast = r#"{"messages":[{"id":"a","x":"]}"}],"state":{"s":[1]}}"#;
        assert_eq!(
            split(fast),
            Some((r#"[{"id":"a","x":"]}"}]"#, Some(r#"{"s":[1]}"#)))
        );
        assert_eq!(split(r#"{"messages":[]}"#), Some(("[]", None)));
        let slow = r#" { "state" : null , "messages" : [ 1 ] } "#;
        assert_eq!(split(slow), Some(("[ 1 ]", Some("null"))));
        for bad in [
            "",
            "[]",
            r#"{"state":1}"#,
            r#"{"messages":["#,
            r#"{"messages":{}}"#,
            "nope",
            // Only JSON's four white space characters may end the text.
            "{\"messages\":[],\"state\":1}\u{a0}",
        ] {
            assert_eq!(split(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_escaped_key_is_read_the_slow_way_alike() {
        let text =
            r#" { "messages" : [ {"\u0069d":"a","role":"user"} , {"id":"b"} ] , "state" : 1 } "#;
        let h = History::read(Arc::new(text.to_owned())).unwrap();
        assert_eq!((h.id(0), h.id(1)), (Some("a"), Some("b")));
        assert_eq!(h.message(1), r#"{"id":"b"}"#);
        assert_eq!(h.state(), Some("1"));
        for bad in ["[]", "{}", r#"{"messages":{}}"#, "{", ""] {
            assert!(History::read(Arc::new(bad.to_owned())).is_err(), "{bad}");
        }
    }

    #[test]
    fn merge_replaces_by_id_and_keeps_every_client_message() {
        let h = history(
            &[
                json!({"id":"a","role":"user","content":"old"}),
                json!({"id":"s","role":"assistant","content":"S"}),
                json!({"id":"a","role":"user","content":"dup"}),
            ],
            None,
        );
        let client = vec![
            json!({"id":"a","role":"user","content":"1"}),
            json!({"id":"a","role":"user","content":"2"}),
            json!({"id":"b","role":"user","content":"3"}),
        ];
        let m = Messages::new(&h, &client);
        let merged = m.merge(&m.client());
        let contents: Vec<String> = values(&m, &merged)
            .iter()
            .map(|v| v["content"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(contents, ["1", "S", "2", "3"]);
    }

    #[test]
    fn normalized_messages_rebuild_the_exact_input() {
        let stored = [
            json!({"id":"u1","role":"user","content":"a"}),
            json!({"id":"a1","role":"assistant","content":"b"}),
        ];
        let h = history(&stored, None);
        let u2 = json!({"id":"u2","role":"user","content":"c"});
        let check = |client: Vec<Value>, want_fresh: Vec<Value>| {
            let m = Messages::new(&h, &client);
            let n = m.normalize(&m.client());
            assert_eq!(values(&m, &n), want_fresh);
            if want_fresh.len() < client.len() {
                assert_eq!(values(&m, &m.merge(&n)), client);
            }
        };
        // A full client: only the new message is kept.
        check(
            vec![stored[0].clone(), stored[1].clone(), u2.clone()],
            vec![u2.clone()],
        );
        // The same message with its keys in another order is the same.
        check(
            vec![
                json!({"content":"a","role":"user","id":"u1"}),
                stored[1].clone(),
                u2.clone(),
            ],
            vec![u2.clone()],
        );
        // An edited message stays.
        let edited = json!({"id":"a1","role":"assistant","content":"B"});
        check(
            vec![stored[0].clone(), edited.clone(), u2.clone()],
            vec![edited, u2.clone()],
        );
        // Cut or reordered against the history: kept whole.
        check(vec![u2.clone()], vec![u2.clone()]);
        let swapped = vec![stored[1].clone(), stored[0].clone(), u2.clone()];
        check(swapped.clone(), swapped);
        // A server-session merge normalizes to the client's new messages.
        let client = vec![u2.clone()];
        let m = Messages::new(&h, &client);
        let merged = m.merge(&m.client());
        assert_eq!(m.normalize(&merged), vec![Msg::Client(0)]);
    }

    #[test]
    fn a_stored_copy_written_otherwise_is_compared_as_a_value() {
        // Another escape of the same string: byte-different, same value.
        let text = r#"{"messages":[{"id":"u1","role":"user","content":"\u00e9"}]}"#;
        let h = History::read(Arc::new(text.to_owned())).unwrap();
        let client = vec![json!({"id":"u1","role":"user","content":"é"})];
        let m = Messages::new(&h, &client);
        assert!(m.same(Msg::Stored(0), Msg::Client(0)));
        assert!(m.normalize(&m.client()).is_empty());
    }

    /// The rules over parsed values, as the gateway applied them before it
    /// read histories in place: the reference.
    fn reference_merge(history: &[Value], messages: &[Value]) -> Vec<Value> {
        let mut merged: Vec<Value> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for m in history {
            match id_of(m) {
                Some(id) if index.contains_key(id) => {}
                Some(id) => {
                    index.insert(id, merged.len());
                    merged.push(m.clone());
                }
                None => merged.push(m.clone()),
            }
        }
        let mut taken: HashSet<&str> = HashSet::new();
        for m in messages {
            match id_of(m) {
                Some(id) if !taken.insert(id) => merged.push(m.clone()),
                Some(id) => match index.get(id) {
                    Some(&pos) => merged[pos] = m.clone(),
                    None => merged.push(m.clone()),
                },
                None => merged.push(m.clone()),
            }
        }
        merged
    }

    fn reference_normalize(history: &[Value], messages: &[Value]) -> Vec<Value> {
        if history.is_empty() {
            return messages.to_vec();
        }
        let known: HashMap<&str, &Value> = history
            .iter()
            .filter_map(|m| Some((id_of(m)?, m)))
            .collect();
        let fresh: Vec<Value> = messages
            .iter()
            .filter(|m| {
                id_of(m)
                    .and_then(|id| known.get(id))
                    .is_none_or(|h| *h != *m)
            })
            .cloned()
            .collect();
        if reference_merge(history, &fresh) == messages {
            fresh
        } else {
            messages.to_vec()
        }
    }

    fn message() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        (
            prop_oneof![
                Just(json!("a")),
                Just(json!("b")),
                Just(json!("c")),
                Just(json!(1)),
                Just(Value::Null)
            ],
            prop_oneof![Just("x"), Just("y"), Just("é")],
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(id, content, has_id, reversed)| {
                let mut fields = vec![("role", json!("user")), ("content", json!(content))];
                if has_id {
                    fields.insert(0, ("id", id));
                }
                if reversed {
                    fields.reverse();
                }
                Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            })
    }

    proptest::proptest! {
        #[test]
        fn merge_and_normalize_agree_with_the_value_reference(
            stored in proptest::collection::vec(message(), 0..6),
            client in proptest::collection::vec(message(), 0..6),
            escaped in proptest::bool::ANY,
        ) {
            let mut text = serde_json::to_string(&json!({"messages": stored, "state": {}})).unwrap();
            if escaped {
                // The same values, written with other bytes.
                text = text.replace('é', "\\u00e9");
            }
            let h = History::read(Arc::new(text)).unwrap();
            let m = Messages::new(&h, &client);
            let merged = m.merge(&m.client());
            let want = reference_merge(&stored, &client);
            proptest::prop_assert_eq!(values(&m, &merged), want.clone());
            if !escaped {
                // Byte for byte what serializing the values wrote before
                // (member order and number text included).
                proptest::prop_assert_eq!(m.to_json(&merged), serde_json::to_string(&want).unwrap());
                let fresh = m.normalize(&merged);
                let want_fresh = reference_normalize(&stored, &want);
                proptest::prop_assert_eq!(m.to_json(&fresh), serde_json::to_string(&want_fresh).unwrap());
            }
            proptest::prop_assert_eq!(
                values(&m, &m.normalize(&m.client())),
                reference_normalize(&stored, &client)
            );
            proptest::prop_assert_eq!(
                values(&m, &m.normalize(&merged)),
                reference_normalize(&stored, &want)
            );
        }
    }
}
