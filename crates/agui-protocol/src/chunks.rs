//! Chunk expansion, exactly as the official client's `transformChunks`
//! (`@ag-ui/client` 1.0.0, `src/chunks/transform.ts`).
//!
//! `TEXT_MESSAGE_CHUNK`, `TOOL_CALL_CHUNK` and `REASONING_MESSAGE_CHUNK` are a
//! shorthand: a producer sends only chunks and the consumer synthesizes the
//! start, content and end events. [`ChunkExpander`] does that one event at a
//! time; [`expand_chunks`] does it for a whole slice.
//!
//! # The rules, in short
//!
//! - **Lanes.** One item (text message, tool call or reasoning message) can be
//!   mid-assembly per *lane*; a lane is a `subagentRunId`, and the parent
//!   agent's lane is the absent tag (`null` reads as absent).
//! - **Which lane a chunk continues.** A chunk naming an id continues the lane
//!   holding an open item of its kind with that id (a disagreeing tag is an
//!   error), else opens in the lane its own tag names. An id-less chunk goes to
//!   its tag's lane; untagged, to the parent lane if that has an item of its
//!   kind open, else to the sole lane that has one (two or more: ambiguous).
//! - **Continue or open.** A lane with an open item of the same kind whose id
//!   matches (or the chunk names none) continues it; a continuation repeating
//!   `role`/`name` (text) or `toolCallName`/`parentMessageId` (tool) must agree
//!   with the opener. Otherwise the lane's item is closed (synthetic END) and a
//!   new one opens: the first chunk needs its id (and a tool chunk its name).
//!   A text opener's role defaults to `"assistant"`; a reasoning opener always
//!   says `role: "reasoning"`.
//! - **Content.** A chunk with a `delta` or a `rawEvent` gives a content event
//!   (`delta` defaulting to `""`). A continuation that would give nothing but
//!   carries `metadata`, `rawEvent`, `subagentRunId: null` or unknown
//!   properties gives an empty-delta content event to carry them.
//! - **Carried fields.** `metadata` goes on every event synthesized from the
//!   chunk (never on the END closing a previous item); `rawEvent` and unknown
//!   properties ride the content event (unknown properties go on the opener
//!   when there is no content event; the opener's own fields win). The content
//!   event's tag is the chunk's, else the opener's; an END carries the
//!   opener's. `timestamp` is not carried.
//! - **Closing.** Explicit text, tool-call, reasoning, step, state and custom
//!   events close their own lane's item first; `RUN_STARTED`, `RUN_FINISHED`,
//!   `RUN_ERROR` and `MESSAGES_SNAPSHOT` close every lane (in the order the
//!   lanes opened); `SUBAGENT_FINISHED`/`SUBAGENT_ERROR` close their subagent's
//!   lane; `RAW`, `ACTIVITY_*`, `REASONING_ENCRYPTED_VALUE`, `SUBAGENT_STARTED`
//!   and unknown types close nothing.
//! - **End of stream.** Items still open are not closed: the official operator
//!   computes their ENDs and discards them. [`ChunkExpander::finish`] returns
//!   them for callers that want them; [`expand_chunks`] drops them, as upstream.
//!
//! Non-chunk events pass through unchanged (the same [`Event`], same bytes).
//! When no chunk stream is open, they are not even parsed.
//!
//! Synthesized events are built with the key order the TypeScript code gives
//! its objects, so their JSON text matches `JSON.stringify` of upstream's.
//!
//! Beyond upstream: the id of a chunk (`messageId` / `toolCallId`) and a
//! chunk's `subagentRunId` must be strings (or a `null` tag) when present; the
//! official pipeline rejects anything else in its schema stage before
//! expansion, so this crate reports [`ChunkError::NotAString`] instead.
//! After an error the stream is over, as upstream's observable is: the
//! expander's state is then unspecified (it never panics).

use std::collections::HashMap;

use serde::Deserialize;
use serde::de::Deserializer;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::{Event, EventType};

/// Why chunk expansion failed. Messages follow the official client's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// A chunk that opens an item has no id.
    #[error("First {chunk} must have a {field}")]
    MissingId {
        /// The chunk's type (`TEXT_MESSAGE_CHUNK`, ...).
        chunk: &'static str,
        /// `messageId` or `toolCallId`.
        field: &'static str,
    },
    /// A `TOOL_CALL_CHUNK` that opens a tool call has no `toolCallName`.
    #[error("First TOOL_CALL_CHUNK must have a toolCallName")]
    MissingToolCallName,
    /// A continuation chunk repeats an opener field with another value.
    #[error(
        "Cannot continue {entity} '{id}': chunk {field} '{incoming}' does not match the open stream's {field} {}.",
        established.as_ref().map_or_else(|| "(absent)".to_owned(), |e| format!("'{e}'"))
    )]
    Conflict {
        /// `text message` or `tool call`.
        entity: &'static str,
        /// The open item's id.
        id: String,
        /// The repeated field.
        field: &'static str,
        /// The chunk's value (JSON text, strings without quotes).
        incoming: String,
        /// The opener's value, if it had one.
        established: Option<String>,
    },
    /// A chunk names an item open in another subagent's lane.
    #[error(
        "Cannot continue {entity} '{id}': chunk subagentRunId '{tag}' does not match the open stream's subagent '{}'.",
        holder.as_deref().unwrap_or("(the parent agent)")
    )]
    LaneMismatch {
        /// `text message`, `tool call` or `reasoning message`.
        entity: &'static str,
        /// The item's id.
        id: String,
        /// The chunk's `subagentRunId`.
        tag: String,
        /// The lane holding the item (`None`: the parent agent).
        holder: Option<String>,
    },
    /// An id-less, untagged continuation could belong to several lanes.
    #[error(
        "Ambiguous {chunk}: it carries neither a {field} nor a subagentRunId, but {lanes} lanes have an open {entity}. Attribute the chunk to the subagent it belongs to."
    )]
    Ambiguous {
        /// The chunk's type.
        chunk: &'static str,
        /// `messageId` or `toolCallId`.
        field: &'static str,
        /// How many lanes have an item of this kind open.
        lanes: usize,
        /// `text message`, `tool call` or `reasoning message`.
        entity: &'static str,
    },
    /// A field the expansion keys on is present but not a string.
    #[error("{chunk}: '{field}' must be a string when present")]
    NotAString {
        /// The event's type.
        chunk: &'static str,
        /// The field.
        field: &'static str,
    },
}

/// The kind of item a lane is assembling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Tool,
    Reasoning,
}

impl Kind {
    fn chunk_type(self) -> &'static str {
        match self {
            Kind::Text => "TEXT_MESSAGE_CHUNK",
            Kind::Tool => "TOOL_CALL_CHUNK",
            Kind::Reasoning => "REASONING_MESSAGE_CHUNK",
        }
    }
    fn id_field(self) -> &'static str {
        match self {
            Kind::Tool => "toolCallId",
            _ => "messageId",
        }
    }
    fn entity(self) -> &'static str {
        match self {
            Kind::Text => "text message",
            Kind::Tool => "tool call",
            Kind::Reasoning => "reasoning message",
        }
    }
    /// The properties the official chunk schema describes; anything else is
    /// "remainder" and is carried over.
    fn described(self, key: &str) -> bool {
        matches!(
            key,
            "type" | "timestamp" | "rawEvent" | "metadata" | "subagentRunId"
        ) || match self {
            Kind::Text => matches!(key, "messageId" | "role" | "delta" | "name"),
            Kind::Tool => matches!(
                key,
                "toolCallId" | "toolCallName" | "parentMessageId" | "delta"
            ),
            Kind::Reasoning => matches!(key, "messageId" | "delta"),
        }
    }
}

/// A `subagentRunId` as written: absent, `null`, or a value.
#[derive(Debug, Clone, PartialEq)]
enum Tag {
    Absent,
    Null,
    Id(String),
}

impl Tag {
    /// The lane it names (`null` reads as the parent).
    fn lane(&self) -> Option<&str> {
        match self {
            Tag::Id(s) => Some(s),
            _ => None,
        }
    }
    fn is_absent(&self) -> bool {
        matches!(self, Tag::Absent)
    }
    /// The tag as JSON text, when present.
    fn json(&self) -> Option<String> {
        match self {
            Tag::Absent => None,
            Tag::Null => Some("null".to_owned()),
            Tag::Id(s) => Some(quote(s)),
        }
    }
}

/// What the opener of a lane's item established.
#[derive(Debug, Clone)]
struct Pending {
    kind: Kind,
    id: String,
    /// The opener's fields as JSON text. Text: the role (explicit, or the
    /// `"assistant"` default); reasoning: `"reasoning"`.
    role: String,
    /// Text: `name`; tool: `toolCallName`.
    name: Option<String>,
    /// Tool: `parentMessageId`.
    parent: Option<String>,
    tag: Tag,
}

/// Expands chunk events one at a time (see the module docs for the rules).
#[derive(Debug, Default, Clone)]
pub struct ChunkExpander {
    /// Open items by lane, in the order the lanes opened.
    lanes: Vec<(Option<String>, Pending)>,
}

impl ChunkExpander {
    /// An expander with no open lanes.
    pub fn new() -> ChunkExpander {
        ChunkExpander::default()
    }

    /// True when some lane has an item mid-assembly.
    pub fn has_open(&self) -> bool {
        !self.lanes.is_empty()
    }

    /// Expands one event into the events that replace it: for a chunk, the
    /// synthesized ones (maybe none); for any other event, the ENDs of the
    /// items it closes followed by the event itself.
    pub fn push(&mut self, event: &Event) -> Result<Vec<Event>, ChunkError> {
        let closes = match event.event_type() {
            EventType::TextMessageChunk => return self.chunk(event, Kind::Text),
            EventType::ToolCallChunk => return self.chunk(event, Kind::Tool),
            EventType::ReasoningMessageChunk => return self.chunk(event, Kind::Reasoning),
            EventType::RunStarted
            | EventType::RunFinished
            | EventType::RunError
            | EventType::MessagesSnapshot => Closes::All,
            EventType::Raw
            | EventType::ActivitySnapshot
            | EventType::ActivityDelta
            | EventType::ReasoningEncryptedValue
            | EventType::SubagentStarted
            | EventType::Unknown(_) => Closes::Nothing,
            EventType::SubagentFinished | EventType::SubagentError => Closes::OwnLaneIfTagged,
            EventType::TextMessageStart
            | EventType::TextMessageContent
            | EventType::TextMessageEnd
            | EventType::ToolCallStart
            | EventType::ToolCallArgs
            | EventType::ToolCallEnd
            | EventType::ToolCallResult
            | EventType::StateSnapshot
            | EventType::StateDelta
            | EventType::Custom
            | EventType::StepStarted
            | EventType::StepFinished
            | EventType::ReasoningStart
            | EventType::ReasoningMessageStart
            | EventType::ReasoningMessageContent
            | EventType::ReasoningMessageEnd
            | EventType::ReasoningEnd => Closes::OwnLane,
        };
        if self.lanes.is_empty() || matches!(closes, Closes::Nothing) {
            return Ok(vec![event.clone()]);
        }
        let mut out = match closes {
            Closes::All => self.close_all(),
            Closes::Nothing => Vec::new(),
            Closes::OwnLane | Closes::OwnLaneIfTagged => {
                let tag = read_tag_of(event);
                match tag {
                    // A non-string tag names no lane that can exist.
                    TagOf::Other => Vec::new(),
                    TagOf::Tag(Tag::Id(lane)) => self.close_lane(Some(&lane)),
                    TagOf::Tag(_) if matches!(closes, Closes::OwnLaneIfTagged) => Vec::new(),
                    TagOf::Tag(_) => self.close_lane(None),
                }
            }
        };
        out.push(event.clone());
        Ok(out)
    }

    /// The ENDs of the items still open, in lane order, and forget them.
    ///
    /// The official operator computes these when the stream completes and
    /// **discards** them; [`expand_chunks`] does the same. Use this only when
    /// you deliberately want a stream cut mid-chunk to read as closed.
    pub fn finish(&mut self) -> Vec<Event> {
        self.close_all()
    }

    fn close_all(&mut self) -> Vec<Event> {
        let lanes = std::mem::take(&mut self.lanes);
        lanes.into_iter().map(|(_, p)| end_event(&p)).collect()
    }

    fn close_lane(&mut self, lane: Option<&str>) -> Vec<Event> {
        match self.lanes.iter().position(|(l, _)| l.as_deref() == lane) {
            Some(i) => {
                let (_, p) = self.lanes.remove(i);
                vec![end_event(&p)]
            }
            None => Vec::new(),
        }
    }

    fn lane(&self, lane: Option<&str>) -> Option<&Pending> {
        self.lanes
            .iter()
            .find(|(l, _)| l.as_deref() == lane)
            .map(|(_, p)| p)
    }

    /// Which lane a chunk belongs to (upstream's `resolveLane`).
    fn resolve_lane(
        &self,
        kind: Kind,
        id: Option<&str>,
        tag: Option<&str>,
    ) -> Result<Option<String>, ChunkError> {
        if let Some(id) = id {
            let holder = self
                .lanes
                .iter()
                .find(|(_, p)| p.kind == kind && p.id == id)
                .map(|(l, _)| l.clone());
            if let Some(holder) = holder {
                if let Some(tag) = tag
                    && Some(tag) != holder.as_deref()
                {
                    return Err(ChunkError::LaneMismatch {
                        entity: kind.entity(),
                        id: id.to_owned(),
                        tag: tag.to_owned(),
                        holder,
                    });
                }
                return Ok(holder);
            }
            return Ok(tag.map(str::to_owned));
        }
        if let Some(tag) = tag {
            return Ok(Some(tag.to_owned()));
        }
        if self.lane(None).is_some_and(|p| p.kind == kind) {
            return Ok(None);
        }
        let mut candidates = self.lanes.iter().filter(|(_, p)| p.kind == kind);
        match (candidates.next(), candidates.next()) {
            (Some((l, _)), None) => Ok(l.clone()),
            (Some(_), Some(_)) => Err(ChunkError::Ambiguous {
                chunk: kind.chunk_type(),
                field: kind.id_field(),
                lanes: self.lanes.iter().filter(|(_, p)| p.kind == kind).count(),
                entity: kind.entity(),
            }),
            _ => Ok(None),
        }
    }

    fn chunk(&mut self, event: &Event, kind: Kind) -> Result<Vec<Event>, ChunkError> {
        let chunk_type = kind.chunk_type();
        let fields = Fields::parse(event.json());
        let id = match fields.get(kind.id_field()) {
            None => None,
            Some(raw) => Some(as_string(raw).ok_or(ChunkError::NotAString {
                chunk: chunk_type,
                field: kind.id_field(),
            })?),
        };
        let tag = match fields.get("subagentRunId") {
            None => Tag::Absent,
            Some("null") => Tag::Null,
            Some(raw) => Tag::Id(as_string(raw).ok_or(ChunkError::NotAString {
                chunk: chunk_type,
                field: "subagentRunId",
            })?),
        };
        let remainder = fields.remainder(kind);
        let metadata = fields.get("metadata");
        let raw_event = fields.get("rawEvent");
        let delta = fields.get("delta");

        let lane = self.resolve_lane(kind, id.as_deref(), tag.lane())?;
        let mut out: Vec<Obj> = Vec::new();
        let mut ends: Vec<Event> = Vec::new();

        let continuing = self
            .lane(lane.as_deref())
            .is_some_and(|p| p.kind == kind && id.as_deref().is_none_or(|id| id == p.id));
        let opener: Pending = if continuing {
            let open = self
                .lane(lane.as_deref())
                .cloned()
                .ok_or(ChunkError::MissingId {
                    chunk: chunk_type,
                    field: kind.id_field(),
                })?;
            match kind {
                Kind::Text => {
                    agree(&open, "role", fields.get("role"), Some(&open.role))?;
                    agree(&open, "name", fields.get("name"), open.name.as_deref())?;
                }
                Kind::Tool => {
                    agree(
                        &open,
                        "toolCallName",
                        fields.get("toolCallName"),
                        open.name.as_deref(),
                    )?;
                    agree(
                        &open,
                        "parentMessageId",
                        fields.get("parentMessageId"),
                        open.parent.as_deref(),
                    )?;
                }
                Kind::Reasoning => {}
            }
            open
        } else {
            ends = self.close_lane(lane.as_deref());
            let Some(id) = id.clone() else {
                return Err(ChunkError::MissingId {
                    chunk: chunk_type,
                    field: kind.id_field(),
                });
            };
            let name = match kind {
                Kind::Text => fields.get("name").map(str::to_owned),
                Kind::Tool => match fields.get("toolCallName") {
                    Some(n) => Some(n.to_owned()),
                    None => return Err(ChunkError::MissingToolCallName),
                },
                Kind::Reasoning => None,
            };
            let pending = Pending {
                kind,
                id,
                role: match kind {
                    Kind::Text => fields.get("role").unwrap_or("\"assistant\"").to_owned(),
                    Kind::Tool => String::new(),
                    Kind::Reasoning => "\"reasoning\"".to_owned(),
                },
                name,
                parent: match kind {
                    Kind::Tool => fields.get("parentMessageId").map(str::to_owned),
                    _ => None,
                },
                tag: tag.clone(),
            };
            self.lanes.push((lane, pending.clone()));
            let mut start: Obj = Vec::with_capacity(6);
            match kind {
                Kind::Text => {
                    start.push(("type", "\"TEXT_MESSAGE_START\"".into()));
                    start.push(("messageId", quote(&pending.id)));
                    start.push(("role", pending.role.clone()));
                    if let Some(name) = &pending.name {
                        start.push(("name", name.clone()));
                    }
                }
                Kind::Tool => {
                    start.push(("type", "\"TOOL_CALL_START\"".into()));
                    start.push(("toolCallId", quote(&pending.id)));
                    start.push(("toolCallName", pending.name.clone().unwrap_or_default()));
                    if let Some(parent) = &pending.parent {
                        start.push(("parentMessageId", parent.clone()));
                    }
                }
                Kind::Reasoning => {
                    start.push(("type", "\"REASONING_MESSAGE_START\"".into()));
                    start.push(("messageId", quote(&pending.id)));
                    start.push(("role", pending.role.clone()));
                }
            }
            if let Some(t) = tag.json() {
                start.push(("subagentRunId", t));
            }
            if let Some(m) = metadata {
                start.push(("metadata", m.to_owned()));
            }
            out.push(start);
            pending
        };

        let (content_type, id_key) = match kind {
            Kind::Text => ("\"TEXT_MESSAGE_CONTENT\"", "messageId"),
            Kind::Tool => ("\"TOOL_CALL_ARGS\"", "toolCallId"),
            Kind::Reasoning => ("\"REASONING_MESSAGE_CONTENT\"", "messageId"),
        };
        // The content event's owner: the chunk's own tag, else the opener's.
        let owner = if tag.is_absent() {
            opener.tag.json()
        } else {
            tag.json()
        };
        let mut carried = false;
        if delta.is_some() || raw_event.is_some() {
            let mut content: Obj = Vec::with_capacity(6);
            content.push(("type", content_type.into()));
            content.push((id_key, quote(&opener.id)));
            content.push(("delta", delta.unwrap_or("\"\"").to_owned()));
            if let Some(o) = &owner {
                content.push(("subagentRunId", o.clone()));
            }
            if let Some(m) = metadata {
                content.push(("metadata", m.to_owned()));
            }
            if let Some(r) = raw_event {
                content.push(("rawEvent", r.to_owned()));
            }
            out.push(content);
            carried = true;
        }
        if out.is_empty()
            && (metadata.is_some()
                || raw_event.is_some()
                || tag == Tag::Null
                || !remainder.is_empty())
        {
            let mut content: Obj = Vec::with_capacity(6);
            content.push(("type", content_type.into()));
            content.push((id_key, quote(&opener.id)));
            content.push(("delta", "\"\"".into()));
            if let Some(m) = metadata {
                content.push(("metadata", m.to_owned()));
            }
            if let Some(r) = raw_event {
                content.push(("rawEvent", r.to_owned()));
            }
            if let Some(o) = &owner {
                content.push(("subagentRunId", o.clone()));
            }
            out.push(content);
            carried = true;
        }

        let mut events = ends;
        let n = out.len();
        for (k, obj) in out.into_iter().enumerate() {
            let text = if remainder.is_empty() {
                render(&[], &obj)
            } else if carried && k + 1 == n {
                // The content event: `{...remainder, ...described}`.
                render(&remainder, &obj)
            } else if !carried && k + 1 == n {
                // No content event: the remainder goes on the opener, whose
                // own fields win a clash (keeping the remainder's position).
                render(&remainder, &obj)
            } else {
                render(&[], &obj)
            };
            events.push(build_text(text));
        }
        Ok(events)
    }
}

enum Closes {
    All,
    Nothing,
    OwnLane,
    OwnLaneIfTagged,
}

/// A continuation's repeat of an opener field must equal it. Strings,
/// numbers, booleans and `null` compare by value; objects and arrays never
/// compare equal (JavaScript's `!==` on two parsed objects).
fn agree(
    open: &Pending,
    field: &'static str,
    incoming: Option<&str>,
    established: Option<&str>,
) -> Result<(), ChunkError> {
    let Some(incoming) = incoming else {
        return Ok(());
    };
    let same = match established {
        Some(_) if incoming.starts_with(['{', '[']) => false,
        Some(e) if incoming == e => true,
        Some(e) => {
            let a: Option<Value> = serde_json::from_str(incoming).ok();
            let b: Option<Value> = serde_json::from_str(e).ok();
            a.is_some() && a == b
        }
        None => false,
    };
    if same {
        return Ok(());
    }
    Err(ChunkError::Conflict {
        entity: open.kind.entity(),
        id: open.id.clone(),
        field,
        incoming: display_raw(incoming),
        established: established.map(display_raw),
    })
}

/// JSON text for messages: a string without its quotes, anything else as written.
fn display_raw(raw: &str) -> String {
    as_string(raw).unwrap_or_else(|| raw.to_owned())
}

/// The string a JSON text holds, if it is a string.
fn as_string(raw: &str) -> Option<String> {
    if raw.starts_with('"') {
        serde_json::from_str::<String>(raw).ok()
    } else {
        None
    }
}

/// A string as JSON text.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// An object under construction: keys and their values as JSON text.
type Obj = Vec<(&'static str, String)>;

/// Writes `{...first, ...second}` as JavaScript's spread does: the keys of
/// `first` in order (with `second`'s value where both have the key), then
/// the other keys of `second`.
fn render(first: &[(String, String)], second: &Obj) -> String {
    let mut text = String::with_capacity(128);
    text.push('{');
    let mut comma = false;
    let mut put = |text: &mut String, key: &str, value: &str| {
        if comma {
            text.push(',');
        }
        comma = true;
        text.push_str(&quote(key));
        text.push(':');
        text.push_str(value);
    };
    for (k, v) in first {
        let value = second
            .iter()
            .find(|(k2, _)| *k2 == k.as_str())
            .map_or(v.as_str(), |(_, v2)| v2.as_str());
        put(&mut text, k, value);
    }
    for (k, v) in second {
        if !first.iter().any(|(k1, _)| k1 == k) {
            put(&mut text, k, v);
        }
    }
    text.push('}');
    text
}

/// The top-level fields of a chunk, as JSON text, in order.
struct Fields<'a> {
    entries: Vec<(String, &'a str)>,
}

impl<'a> Fields<'a> {
    fn parse(json: &'a str) -> Fields<'a> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<(String, &'de str)>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut entries: Vec<(String, &'de str)> = Vec::new();
                // Position of each key in `entries`: a wide object is read in
                // linear time.
                let mut positions: HashMap<String, usize> = HashMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value: &'de RawValue = map.next_value()?;
                    // A repeated key keeps its first position and last value,
                    // as JSON.parse does.
                    match positions.get(&key).and_then(|&at| entries.get_mut(at)) {
                        Some(slot) => slot.1 = value.get(),
                        None => {
                            positions.insert(key.clone(), entries.len());
                            entries.push((key, value.get()));
                        }
                    }
                }
                Ok(entries)
            }
        }
        let mut de = serde_json::Deserializer::from_str(json);
        // An Event always holds a JSON object, so this cannot fail.
        let entries = serde::Deserializer::deserialize_map(&mut de, V).unwrap_or_default();
        Fields { entries }
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// The properties the chunk schema does not describe, in order.
    fn remainder(&self, kind: Kind) -> Vec<(String, String)> {
        self.entries
            .iter()
            .filter(|(k, _)| !kind.described(k))
            .map(|(k, v)| (k.clone(), (*v).to_owned()))
            .collect()
    }
}

fn end_event(p: &Pending) -> Event {
    let (ty, key) = match p.kind {
        Kind::Text => ("\"TEXT_MESSAGE_END\"", "messageId"),
        Kind::Tool => ("\"TOOL_CALL_END\"", "toolCallId"),
        Kind::Reasoning => ("\"REASONING_MESSAGE_END\"", "messageId"),
    };
    let mut obj: Obj = vec![("type", ty.to_owned()), (key, quote(&p.id))];
    if let Some(t) = p.tag.json() {
        obj.push(("subagentRunId", t));
    }
    build_text(render(&[], &obj))
}

fn build_text(text: String) -> Event {
    // The text is an object with a string "type" assembled from valid JSON
    // pieces, so this cannot fail; fall back to a minimal event rather than
    // panic.
    Event::from_json_string(text).unwrap_or_else(|_| fallback_event())
}

fn fallback_event() -> Event {
    match Event::from_json(r#"{"type":"RAW","event":null}"#) {
        Ok(e) => e,
        Err(_) => unreachable!("a fixed valid event"),
    }
}

/// `subagentRunId` of a non-chunk event, as the closing rules read it.
enum TagOf {
    Tag(Tag),
    Other,
}

fn read_tag_of(event: &Event) -> TagOf {
    #[derive(Deserialize)]
    struct View {
        #[serde(rename = "subagentRunId", default, deserialize_with = "present")]
        tag: Option<Value>,
    }
    match event.view::<View>() {
        Ok(View { tag: None }) => TagOf::Tag(Tag::Absent),
        Ok(View {
            tag: Some(Value::Null),
        }) => TagOf::Tag(Tag::Null),
        Ok(View {
            tag: Some(Value::String(s)),
        }) => TagOf::Tag(Tag::Id(s)),
        _ => TagOf::Other,
    }
}

/// Deserializes a present field (even `null`) as `Some`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Expands every chunk of a stream (see [`ChunkExpander`]). Items still open
/// at the end are left open, as upstream does. On error, returns the index of
/// the input event that caused it.
pub fn expand_chunks(events: &[Event]) -> Result<Vec<Event>, (usize, ChunkError)> {
    let mut expander = ChunkExpander::new();
    let mut out = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        out.extend(expander.push(e).map_err(|err| (i, err))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(text: &str) -> Event {
        Event::from_json(text).expect("test event")
    }

    fn run(events: &[&str]) -> Result<Vec<String>, (usize, ChunkError)> {
        let events: Vec<Event> = events.iter().map(|t| ev(t)).collect();
        expand_chunks(&events).map(|out| out.iter().map(|e| e.json().to_owned()).collect())
    }

    const RS: &str = r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#;
    const RF: &str = r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r"}"#;

    #[test]
    fn a_text_chunk_becomes_start_and_content_and_the_run_end_closes_it() {
        let out = run(&[
            RS,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"hi"}"#,
            RF,
        ])
        .unwrap();
        assert_eq!(
            out,
            vec![
                RS.to_owned(),
                r#"{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}"#.into(),
                r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hi"}"#.into(),
                r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#.into(),
                RF.to_owned(),
            ]
        );
    }

    #[test]
    fn same_id_and_id_less_continuations_share_one_start() {
        let out = run(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","role":"user","delta":"a"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"b"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","delta":"c","role":"user"}"#,
        ])
        .unwrap();
        assert_eq!(out.iter().filter(|e| e.contains("_START")).count(), 1);
        assert!(out[0].contains(r#""role":"user""#));
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn a_different_id_closes_and_reopens() {
        let out = run(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"a","delta":"x"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"b","delta":"y"}"#,
        ])
        .unwrap();
        assert_eq!(out[2], r#"{"type":"TEXT_MESSAGE_END","messageId":"a"}"#);
        assert!(out[3].starts_with(r#"{"type":"TEXT_MESSAGE_START","messageId":"b""#));
    }

    #[test]
    fn tool_chunks_carry_parent_message_id_only_when_present() {
        let out = run(&[
            r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"f","parentMessageId":"m","delta":"{"}"#,
            r#"{"type":"TOOL_CALL_CHUNK","delta":"}"}"#,
            r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"d","toolCallName":"g"}"#,
        ])
        .unwrap();
        assert_eq!(
            out[0],
            r#"{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f","parentMessageId":"m"}"#
        );
        assert_eq!(
            out[1],
            r#"{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{"}"#
        );
        assert_eq!(
            out[2],
            r#"{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"}"}"#
        );
        assert_eq!(out[3], r#"{"type":"TOOL_CALL_END","toolCallId":"c"}"#);
        assert_eq!(
            out[4],
            r#"{"type":"TOOL_CALL_START","toolCallId":"d","toolCallName":"g"}"#
        );
        assert_eq!(out.len(), 5, "a chunk without delta gives no args event");
    }

    #[test]
    fn first_chunks_need_their_id_and_a_tool_name() {
        let e = run(&[RS, r#"{"type":"TEXT_MESSAGE_CHUNK","delta":"x"}"#]).unwrap_err();
        assert_eq!(e.0, 1);
        assert_eq!(
            e.1.to_string(),
            "First TEXT_MESSAGE_CHUNK must have a messageId"
        );
        let e = run(&[r#"{"type":"TOOL_CALL_CHUNK","delta":"x"}"#]).unwrap_err();
        assert_eq!(
            e.1.to_string(),
            "First TOOL_CALL_CHUNK must have a toolCallId"
        );
        let e = run(&[r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"c"}"#]).unwrap_err();
        assert_eq!(e.1, ChunkError::MissingToolCallName);
        let e = run(&[r#"{"type":"REASONING_MESSAGE_CHUNK","delta":"x"}"#]).unwrap_err();
        assert_eq!(
            e.1.to_string(),
            "First REASONING_MESSAGE_CHUNK must have a messageId"
        );
    }

    #[test]
    fn repeated_fields_must_agree_with_the_opener() {
        let e = run(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","role":"user","delta":"b"}"#,
        ])
        .unwrap_err();
        assert_eq!(e.0, 1);
        assert_eq!(
            e.1.to_string(),
            "Cannot continue text message 'm': chunk role 'user' does not match the open stream's role 'assistant'."
        );
        // A name where the opener had none is a conflict too.
        let e = run(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","name":"n"}"#,
        ])
        .unwrap_err();
        assert!(e.1.to_string().ends_with("name (absent)."), "{}", e.1);
        for (field, a, b) in [("toolCallName", "f", "g"), ("parentMessageId", "p", "q")] {
            let first = format!(
                r#"{{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"f","{field}":"{a}"}}"#
            );
            let second = format!(r#"{{"type":"TOOL_CALL_CHUNK","{field}":"{b}"}}"#);
            let e = run(&[&first, &second]).unwrap_err();
            assert!(matches!(e.1, ChunkError::Conflict { field: f, .. } if f == field));
        }
        // Agreeing repeats are fine.
        assert!(
            run(&[
                r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"f"}"#,
                r#"{"type":"TOOL_CALL_CHUNK","toolCallName":"f","delta":"x"}"#,
            ])
            .is_ok()
        );
    }

    #[test]
    fn reasoning_openers_say_role_reasoning_and_an_empty_id_is_new() {
        let out = run(&[
            r#"{"type":"REASONING_MESSAGE_CHUNK","messageId":"r","delta":"a"}"#,
            r#"{"type":"REASONING_MESSAGE_CHUNK","messageId":"","delta":"b"}"#,
        ])
        .unwrap();
        assert_eq!(
            out[0],
            r#"{"type":"REASONING_MESSAGE_START","messageId":"r","role":"reasoning"}"#
        );
        assert_eq!(
            out[2],
            r#"{"type":"REASONING_MESSAGE_END","messageId":"r"}"#
        );
        assert_eq!(
            out[3],
            r#"{"type":"REASONING_MESSAGE_START","messageId":"","role":"reasoning"}"#
        );
    }

    #[test]
    fn lanes_are_per_subagent_and_close_by_their_own_rules() {
        let out = run(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"p","delta":"a"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"s","delta":"b","subagentRunId":"s1"}"#,
            // An untagged explicit event closes only the parent lane.
            r#"{"type":"CUSTOM","name":"x","value":1}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","delta":"c"}"#,
            r#"{"type":"SUBAGENT_FINISHED","subagentRunId":"s1"}"#,
        ])
        .unwrap();
        let types: Vec<&str> = out
            .iter()
            .map(|e| &e[9..e[9..].find('"').map_or(9, |i| i + 9)])
            .collect();
        assert_eq!(
            types,
            [
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "CUSTOM",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "SUBAGENT_FINISHED",
            ]
        );
        assert!(out[4].contains(r#""messageId":"p""#));
        // The id-less untagged chunk continued the only open text lane (s1).
        assert_eq!(
            out[6],
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"s","delta":"c","subagentRunId":"s1"}"#
        );
        assert_eq!(
            out[7],
            r#"{"type":"TEXT_MESSAGE_END","messageId":"s","subagentRunId":"s1"}"#
        );
    }

    #[test]
    fn run_level_events_close_every_lane_in_opening_order() {
        for closer in [RF, r#"{"type":"MESSAGES_SNAPSHOT","messages":[]}"#, RS] {
            let out = run(&[
                r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"f","subagentRunId":"s2"}"#,
                r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m"}"#,
                closer,
            ])
            .unwrap();
            assert_eq!(
                &out[2..],
                &[
                    r#"{"type":"TOOL_CALL_END","toolCallId":"c","subagentRunId":"s2"}"#.to_owned(),
                    r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#.to_owned(),
                    closer.to_owned(),
                ]
            );
        }
    }

    #[test]
    fn pass_through_events_close_nothing_and_keep_their_bytes() {
        let raw = r#"{"type":"RAW","event":{"a":1.50},"source":"x"}"#;
        let unknown = r#"{"type":"VENDOR_X","n":1}"#;
        let act = r#"{"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"P","content":{}}"#;
        let out = run(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a"}"#,
            raw,
            unknown,
            act,
            r#"{"type":"TEXT_MESSAGE_CHUNK","delta":"b"}"#,
        ])
        .unwrap();
        assert_eq!(out[2], raw);
        assert_eq!(out[3], unknown);
        assert_eq!(out[4], act);
        assert_eq!(out.len(), 6, "still one message: {out:?}");
    }

    #[test]
    fn ambiguous_and_mismatched_lanes_are_errors() {
        let e = run(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"a","subagentRunId":"s1"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"b","subagentRunId":"s2"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","delta":"?"}"#,
        ])
        .unwrap_err();
        assert_eq!(e.0, 2);
        assert!(
            matches!(e.1, ChunkError::Ambiguous { lanes: 2, .. }),
            "{}",
            e.1
        );
        let e = run(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"a","subagentRunId":"s1"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"a","subagentRunId":"s2","delta":"x"}"#,
        ])
        .unwrap_err();
        assert_eq!(
            e.1.to_string(),
            "Cannot continue text message 'a': chunk subagentRunId 's2' does not match the open stream's subagent 's1'."
        );
    }

    #[test]
    fn metadata_goes_on_synthesized_events_but_not_on_the_previous_end() {
        let out = run(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"a","delta":"x","metadata":{"k":1}}"#,
            r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"f","delta":"{","metadata":{"k":2}}"#,
            r#"{"type":"TOOL_CALL_CHUNK","metadata":{"usage":3}}"#,
            r#"{"type":"TOOL_CALL_CHUNK"}"#,
        ])
        .unwrap();
        assert!(out[0].ends_with(r#""metadata":{"k":1}}"#));
        assert!(out[1].ends_with(r#""metadata":{"k":1}}"#));
        assert_eq!(out[2], r#"{"type":"TEXT_MESSAGE_END","messageId":"a"}"#);
        assert!(out[3].ends_with(r#""metadata":{"k":2}}"#));
        assert_eq!(
            out[5],
            r#"{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"","metadata":{"usage":3}}"#
        );
        assert_eq!(out.len(), 6, "an empty continuation gives nothing");
    }

    #[test]
    fn raw_event_and_unknown_properties_ride_the_content_event() {
        let out = run(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"a","rawEvent":{"p":1},"x":"u","timestamp":5}"#,
        ])
        .unwrap();
        assert_eq!(
            out,
            vec![
                r#"{"type":"TEXT_MESSAGE_START","messageId":"a","role":"assistant"}"#.to_owned(),
                r#"{"x":"u","type":"TEXT_MESSAGE_CONTENT","messageId":"a","delta":"","rawEvent":{"p":1}}"#
                    .to_owned(),
            ]
        );
        // No content event: the remainder goes on the opener, whose own
        // fields win a clash.
        let out = run(&[r#"{"type":"REASONING_MESSAGE_CHUNK","messageId":"r","role":"x","y":2}"#])
            .unwrap();
        assert_eq!(
            out,
            vec![r#"{"role":"reasoning","y":2,"type":"REASONING_MESSAGE_START","messageId":"r"}"#]
        );
    }

    #[test]
    fn a_null_tag_reads_as_the_parent_lane_and_is_kept() {
        let out = run(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"a","subagentRunId":null}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","subagentRunId":null}"#,
            r#"{"type":"STEP_STARTED","stepName":"s"}"#,
        ])
        .unwrap();
        assert_eq!(
            out[0],
            r#"{"type":"TEXT_MESSAGE_START","messageId":"a","role":"assistant","subagentRunId":null}"#
        );
        assert_eq!(
            out[1],
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"a","delta":"","subagentRunId":null}"#
        );
        assert_eq!(
            out[2],
            r#"{"type":"TEXT_MESSAGE_END","messageId":"a","subagentRunId":null}"#
        );
    }

    #[test]
    fn open_items_at_the_end_are_dropped_but_finish_reports_them() {
        let chunk = ev(r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"a","delta":"x"}"#);
        let out = expand_chunks(std::slice::from_ref(&chunk)).unwrap();
        assert_eq!(out.len(), 2);
        let mut x = ChunkExpander::new();
        x.push(&chunk).unwrap();
        assert!(x.has_open());
        let ends = x.finish();
        assert_eq!(ends.len(), 1);
        assert_eq!(
            ends[0].json(),
            r#"{"type":"TEXT_MESSAGE_END","messageId":"a"}"#
        );
        assert!(!x.has_open());
    }

    #[test]
    fn non_string_ids_are_typed_errors() {
        let e = run(&[r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":7}"#]).unwrap_err();
        assert_eq!(
            e.1,
            ChunkError::NotAString {
                chunk: "TEXT_MESSAGE_CHUNK",
                field: "messageId"
            }
        );
        let e = run(&[r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"c","subagentRunId":[1]}"#])
            .unwrap_err();
        assert!(matches!(
            e.1,
            ChunkError::NotAString {
                field: "subagentRunId",
                ..
            }
        ));
    }
}
