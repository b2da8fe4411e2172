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

use std::borrow::Cow;

use foldhash::HashMap;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::{Event, EventRef, EventType};

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
    fn start_type(self) -> EventType {
        match self {
            Kind::Text => EventType::TextMessageStart,
            Kind::Tool => EventType::ToolCallStart,
            Kind::Reasoning => EventType::ReasoningMessageStart,
        }
    }
    fn content_type(self) -> EventType {
        match self {
            Kind::Text => EventType::TextMessageContent,
            Kind::Tool => EventType::ToolCallArgs,
            Kind::Reasoning => EventType::ReasoningMessageContent,
        }
    }
    fn end_type(self) -> EventType {
        match self {
            Kind::Text => EventType::TextMessageEnd,
            Kind::Tool => EventType::ToolCallEnd,
            Kind::Reasoning => EventType::ReasoningMessageEnd,
        }
    }
    fn entity(self) -> &'static str {
        match self {
            Kind::Text => "text message",
            Kind::Tool => "tool call",
            Kind::Reasoning => "reasoning message",
        }
    }
}

/// A `subagentRunId` as written: absent, `null`, or a value.
#[derive(Debug, Clone, PartialEq)]
enum Tag<'a> {
    Absent,
    Null,
    Id(Cow<'a, str>),
}

impl Tag<'_> {
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
}

/// The lane a chunk goes to: one of [`ChunkExpander::lanes`], or a lane
/// that holds no item (by its name).
enum LaneOf<'t> {
    Open(usize),
    Idle(Option<&'t str>),
}

/// What the opener of a lane's item established.
#[derive(Debug, Clone)]
struct Pending {
    kind: Kind,
    id: String,
    /// `id` as JSON text.
    id_json: String,
    /// The opener's fields as JSON text. Text: the role (explicit, or the
    /// `"assistant"` default); reasoning: `"reasoning"`.
    role: String,
    /// Text: `name`; tool: `toolCallName`.
    name: Option<String>,
    /// Tool: `parentMessageId`.
    parent: Option<String>,
    /// The opener's `subagentRunId` as JSON text, when present.
    tag_json: Option<String>,
}

/// Expands chunk events one at a time (see the module docs for the rules).
#[derive(Debug, Default, Clone)]
pub struct ChunkExpander {
    /// Open items by lane, in the order the lanes opened.
    lanes: Vec<(Option<String>, Pending)>,
}

/// Takes the events a [`ChunkExpander`] synthesizes, in order.
///
/// A list of events renders each one as its JSON text; the verifier keeps
/// only the fields its rules read, and renders none.
pub(crate) trait Sink {
    /// Takes the event `{...first, ...second}` of type `ty` (see
    /// [`spread`]): `first` holds a chunk's remainder (keys as read, with
    /// no escapes), `second` the members synthesized (keys of ours, letters
    /// only).
    fn put(&mut self, ty: EventType, first: &[(&str, &str)], second: &[(&'static str, &str)]);
}

impl Sink for Vec<Event> {
    fn put(&mut self, ty: EventType, first: &[(&str, &str)], second: &[(&'static str, &str)]) {
        self.push(Event::from_trusted_text(render(first, second), ty));
    }
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
        let mut out = Vec::new();
        if self.push_into(event, &mut out)? {
            out.push(event.clone());
        }
        Ok(out)
    }

    /// [`ChunkExpander::push`] without a new vector per event: appends to
    /// `out` the events synthesized for `event` (for a chunk, its expansion;
    /// for any other event, the ENDs of the items it closes) and returns
    /// `true` when `event` itself comes next (every event that is not a
    /// chunk); it is then not appended. After an error, what was appended is
    /// unspecified.
    pub fn push_into<'e>(
        &mut self,
        event: impl Into<EventRef<'e>>,
        out: &mut Vec<Event>,
    ) -> Result<bool, ChunkError> {
        self.push_to(event.into(), out)
    }

    /// [`ChunkExpander::push_into`], into any [`Sink`].
    pub(crate) fn push_to(
        &mut self,
        event: EventRef<'_>,
        out: &mut impl Sink,
    ) -> Result<bool, ChunkError> {
        self.push_to_known(event, KnownTag::Unread, out)
    }

    /// [`ChunkExpander::push_to`], for a caller that may already have read
    /// the event's `subagentRunId` (`tag`, as [`KnownTag::Read`] says), so
    /// that an event that closes its lane is not walked again for it.
    pub(crate) fn push_to_known(
        &mut self,
        event: EventRef<'_>,
        tag: KnownTag<'_>,
        out: &mut impl Sink,
    ) -> Result<bool, ChunkError> {
        let closes = match event.event_type() {
            EventType::TextMessageChunk => {
                return self.chunk(event, Kind::Text, out).map(|()| false);
            }
            EventType::ToolCallChunk => return self.chunk(event, Kind::Tool, out).map(|()| false),
            EventType::ReasoningMessageChunk => {
                return self.chunk(event, Kind::Reasoning, out).map(|()| false);
            }
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
        if self.lanes.is_empty() {
            return Ok(true);
        }
        match closes {
            Closes::All => self.close_all_into(out),
            Closes::Nothing => {}
            Closes::OwnLane | Closes::OwnLaneIfTagged => match tag.or_read(event) {
                // A non-string tag names no lane that can exist.
                TagOf::Other => {}
                TagOf::Tag(Tag::Id(lane)) => self.close_lane(Some(&lane), out),
                TagOf::Tag(_) if matches!(closes, Closes::OwnLaneIfTagged) => {}
                TagOf::Tag(_) => self.close_lane(None, out),
            },
        }
        Ok(true)
    }

    /// The ENDs of the items still open, in lane order, and forget them.
    ///
    /// The official operator computes these when the stream completes and
    /// **discards** them; [`expand_chunks`] does the same. Use this only when
    /// you deliberately want a stream cut mid-chunk to read as closed.
    pub fn finish(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        self.close_all_into(&mut out);
        out
    }

    fn close_all_into(&mut self, out: &mut impl Sink) {
        for (_, p) in self.lanes.drain(..) {
            put_end(&p, out);
        }
    }

    fn close_lane(&mut self, lane: Option<&str>, out: &mut impl Sink) {
        if let Some(i) = self.lanes.iter().position(|(l, _)| l.as_deref() == lane) {
            let (_, p) = self.lanes.remove(i);
            put_end(&p, out);
        }
    }

    fn lane(&self, lane: Option<&str>) -> Option<&Pending> {
        self.lanes
            .iter()
            .find(|(l, _)| l.as_deref() == lane)
            .map(|(_, p)| p)
    }

    /// Which lane a chunk belongs to (upstream's `resolveLane`).
    fn resolve_lane<'t>(
        &self,
        kind: Kind,
        id: Option<&str>,
        tag: Option<&'t str>,
    ) -> Result<LaneOf<'t>, ChunkError> {
        let named = |lane: Option<&'t str>| {
            self.lanes
                .iter()
                .position(|(l, _)| l.as_deref() == lane)
                .map_or(LaneOf::Idle(lane), LaneOf::Open)
        };
        if let Some(id) = id {
            let holder = self
                .lanes
                .iter()
                .position(|(_, p)| p.kind == kind && p.id == id);
            if let Some(i) = holder {
                let holder = &self.lanes[i].0;
                if let Some(tag) = tag
                    && Some(tag) != holder.as_deref()
                {
                    return Err(ChunkError::LaneMismatch {
                        entity: kind.entity(),
                        id: id.to_owned(),
                        tag: tag.to_owned(),
                        holder: holder.clone(),
                    });
                }
                return Ok(LaneOf::Open(i));
            }
            return Ok(named(tag));
        }
        if tag.is_some() {
            return Ok(named(tag));
        }
        if self.lane(None).is_some_and(|p| p.kind == kind) {
            return Ok(named(None));
        }
        let mut candidates = self
            .lanes
            .iter()
            .enumerate()
            .filter(|(_, (_, p))| p.kind == kind);
        match (candidates.next(), candidates.next()) {
            (Some((i, _)), None) => Ok(LaneOf::Open(i)),
            (Some(_), Some(_)) => Err(ChunkError::Ambiguous {
                chunk: kind.chunk_type(),
                field: kind.id_field(),
                lanes: self.lanes.iter().filter(|(_, p)| p.kind == kind).count(),
                entity: kind.entity(),
            }),
            _ => Ok(named(None)),
        }
    }

    fn chunk(
        &mut self,
        event: EventRef<'_>,
        kind: Kind,
        events: &mut impl Sink,
    ) -> Result<(), ChunkError> {
        let chunk_type = kind.chunk_type();
        let fields = ChunkFields::parse(event, kind);
        let id = match fields.id {
            None => None,
            Some(raw) => Some(as_str(raw).ok_or(ChunkError::NotAString {
                chunk: chunk_type,
                field: kind.id_field(),
            })?),
        };
        // The tag, and as JSON text: as written unless it has escapes (a
        // string without any is its own JSON text).
        let (tag, tag_json) = match fields.tag {
            None => (Tag::Absent, None),
            Some("null") => (Tag::Null, Some(Cow::Borrowed("null"))),
            Some(raw) => match as_str(raw) {
                Some(Cow::Borrowed(s)) => (Tag::Id(Cow::Borrowed(s)), Some(Cow::Borrowed(raw))),
                Some(Cow::Owned(s)) => {
                    let json = quote(&s);
                    (Tag::Id(Cow::Owned(s)), Some(Cow::Owned(json)))
                }
                None => {
                    return Err(ChunkError::NotAString {
                        chunk: chunk_type,
                        field: "subagentRunId",
                    });
                }
            },
        };
        let remainder = fields.remainder.pairs();
        let metadata = fields.metadata;
        let raw_event = fields.raw_event;
        let delta = fields.delta;

        let at = match self.resolve_lane(kind, id.as_deref(), tag.lane())? {
            LaneOf::Open(i) => Ok(i),
            LaneOf::Idle(lane) => Err(lane),
        };
        let continuing = at.ok().filter(|&i| {
            let p = &self.lanes[i].1;
            p.kind == kind && id.as_deref().is_none_or(|id| id == p.id)
        });
        let opened = match continuing {
            Some(i) => {
                let open = &self.lanes[i].1;
                match kind {
                    Kind::Text => {
                        agree(open, "role", fields.role, Some(&open.role))?;
                        agree(open, "name", fields.name, open.name.as_deref())?;
                    }
                    Kind::Tool => {
                        agree(open, "toolCallName", fields.name, open.name.as_deref())?;
                        agree(
                            open,
                            "parentMessageId",
                            fields.parent,
                            open.parent.as_deref(),
                        )?;
                    }
                    Kind::Reasoning => {}
                }
                false
            }
            None => {
                let lane = match at {
                    Ok(i) => {
                        let (lane, p) = self.lanes.remove(i);
                        put_end(&p, events);
                        lane
                    }
                    Err(lane) => lane.map(str::to_owned),
                };
                let Some(id) = id else {
                    return Err(ChunkError::MissingId {
                        chunk: chunk_type,
                        field: kind.id_field(),
                    });
                };
                let name = match kind {
                    Kind::Text => fields.name.map(str::to_owned),
                    Kind::Tool => match fields.name {
                        Some(n) => Some(n.to_owned()),
                        None => return Err(ChunkError::MissingToolCallName),
                    },
                    Kind::Reasoning => None,
                };
                // A borrowed id had no escape: its text is its JSON text.
                let id_json = match (&id, fields.id) {
                    (Cow::Borrowed(_), Some(raw)) => raw.to_owned(),
                    _ => quote(&id),
                };
                let pending = Pending {
                    kind,
                    id_json,
                    id: id.into_owned(),
                    role: match kind {
                        Kind::Text => fields.role.unwrap_or("\"assistant\"").to_owned(),
                        Kind::Tool => String::new(),
                        Kind::Reasoning => "\"reasoning\"".to_owned(),
                    },
                    name,
                    parent: fields.parent.map(str::to_owned),
                    tag_json: tag_json.as_deref().map(str::to_owned),
                };
                self.lanes.push((lane, pending));
                true
            }
        };
        let opener = match continuing {
            Some(i) => &self.lanes[i].1,
            None => &self.lanes[self.lanes.len() - 1].1,
        };

        // At most two events: the opener's START and one content event. A
        // continuation that would give nothing but carries something gives
        // an empty content event to carry it.
        let content = delta.is_some() || raw_event.is_some();
        let empty_content = !content
            && !opened
            && (metadata.is_some()
                || raw_event.is_some()
                || tag == Tag::Null
                || !remainder.is_empty());
        // The remainder rides the last event: the content event
        // (`{...remainder, ...described}`), or when there is none the opener,
        // whose own fields win a clash (keeping the remainder's position).
        if opened {
            let mut start = Obj::new();
            match kind {
                Kind::Text => {
                    start.push(("type", "\"TEXT_MESSAGE_START\""));
                    start.push(("messageId", &opener.id_json));
                    start.push(("role", &opener.role));
                    if let Some(name) = &opener.name {
                        start.push(("name", name));
                    }
                }
                Kind::Tool => {
                    start.push(("type", "\"TOOL_CALL_START\""));
                    start.push(("toolCallId", &opener.id_json));
                    start.push(("toolCallName", opener.name.as_deref().unwrap_or_default()));
                    if let Some(parent) = &opener.parent {
                        start.push(("parentMessageId", parent));
                    }
                }
                Kind::Reasoning => {
                    start.push(("type", "\"REASONING_MESSAGE_START\""));
                    start.push(("messageId", &opener.id_json));
                    start.push(("role", &opener.role));
                }
            }
            if let Some(t) = &tag_json {
                start.push(("subagentRunId", t));
            }
            if let Some(m) = metadata {
                start.push(("metadata", m));
            }
            let first: &[(&str, &str)] = if content { &[] } else { &remainder };
            events.put(kind.start_type(), first, start.as_slice());
        }

        let (content_type, id_key) = match kind {
            Kind::Text => ("\"TEXT_MESSAGE_CONTENT\"", "messageId"),
            Kind::Tool => ("\"TOOL_CALL_ARGS\"", "toolCallId"),
            Kind::Reasoning => ("\"REASONING_MESSAGE_CONTENT\"", "messageId"),
        };
        // The content event's owner: the chunk's own tag, else the opener's.
        let owner = if tag.is_absent() {
            opener.tag_json.as_deref()
        } else {
            tag_json.as_deref()
        };
        if content {
            let mut content = Obj::new();
            content.push(("type", content_type));
            content.push((id_key, &opener.id_json));
            content.push(("delta", delta.unwrap_or("\"\"")));
            if let Some(o) = owner {
                content.push(("subagentRunId", o));
            }
            if let Some(m) = metadata {
                content.push(("metadata", m));
            }
            if let Some(r) = raw_event {
                content.push(("rawEvent", r));
            }
            events.put(kind.content_type(), &remainder, content.as_slice());
        } else if empty_content {
            let mut content = Obj::new();
            content.push(("type", content_type));
            content.push((id_key, &opener.id_json));
            content.push(("delta", "\"\""));
            if let Some(m) = metadata {
                content.push(("metadata", m));
            }
            if let Some(r) = raw_event {
                content.push(("rawEvent", r));
            }
            if let Some(o) = owner {
                content.push(("subagentRunId", o));
            }
            events.put(kind.content_type(), &remainder, content.as_slice());
        }
        Ok(())
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
    as_str(raw).map(Cow::into_owned)
}

/// The string a JSON text holds, if it is a string (borrowed when it has no
/// escapes).
fn as_str(raw: &str) -> Option<Cow<'_, str>> {
    if !raw.starts_with('"') {
        return None;
    }
    match raw.get(1..raw.len().saturating_sub(1)) {
        Some(body) if raw.len() >= 2 && memchr::memchr(b'\\', body.as_bytes()).is_none() => {
            Some(Cow::Borrowed(body))
        }
        _ => serde_json::from_str::<String>(raw).ok().map(Cow::Owned),
    }
}

/// A string as JSON text.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_quoted(&mut out, s);
    out
}

/// Appends `s` as JSON text, escaped as `JSON.stringify` and serde_json do.
fn push_quoted(out: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned()));
    }
}

/// An object under construction: keys and their values as JSON text, at
/// most [`Obj::CAP`] of them (the most any synthesized event has), held in
/// place: a chunk's expansion allocates none of them.
#[derive(Clone, Copy)]
struct Obj<'a> {
    members: [(&'static str, &'a str); Obj::CAP],
    len: usize,
}

impl<'a> Obj<'a> {
    const CAP: usize = 6;

    fn new() -> Obj<'a> {
        Obj {
            members: [("", ""); Obj::CAP],
            len: 0,
        }
    }

    fn push(&mut self, member: (&'static str, &'a str)) {
        // Every caller pushes at most `CAP` members (a type, an id and at
        // most four optional fields); a seventh would be a bug here.
        debug_assert!(self.len < Obj::CAP, "an object with too many members");
        if let Some(slot) = self.members.get_mut(self.len) {
            *slot = member;
            self.len += 1;
        }
    }

    fn as_slice(&self) -> &[(&'static str, &'a str)] {
        &self.members[..self.len]
    }
}

/// The members of `{...first, ...second}`, in the order JavaScript's spread
/// writes them: the keys of `first` in order (with `second`'s value where
/// both have the key), then the other keys of `second`. `f` takes each key,
/// its value, and whether the key is one of `second`'s only (one of ours,
/// letters only).
pub(crate) fn spread<'v>(
    first: &[(&str, &'v str)],
    second: &[(&'static str, &'v str)],
    mut f: impl FnMut(&str, &'v str, bool),
) {
    for &(k, v) in first {
        let value = second
            .iter()
            .find(|(k2, _)| *k2 == k)
            .map_or(v, |(_, v2)| *v2);
        f(k, value, false);
    }
    for &(k, v) in second {
        if !first.iter().any(|(k1, _)| *k1 == k) {
            f(k, v, true);
        }
    }
}

/// Writes `{...first, ...second}` (see [`spread`]) as JSON text.
fn render(first: &[(&str, &str)], second: &[(&'static str, &str)]) -> String {
    let len = first
        .iter()
        .chain(second.iter())
        .map(|(k, v)| k.len() + v.len() + 4)
        .sum::<usize>();
    let mut text = String::with_capacity(len + 2);
    text.push('{');
    let mut comma = false;
    // `ours`: the key is one of ours, letters only, written as it is.
    spread(first, second, |key, value, ours| {
        if comma {
            text.push(',');
        }
        comma = true;
        if ours {
            debug_assert!(key.bytes().all(|b| b.is_ascii_alphabetic()), "{key}");
            text.push('"');
            text.push_str(key);
            text.push('"');
        } else {
            push_quoted(&mut text, key);
        }
        text.push(':');
        text.push_str(value);
    });
    text.push('}');
    text
}

/// The members of a chunk, as JSON text: those the official chunk schema
/// describes for its kind, each by name (a repeated key gives its last
/// value, as `JSON.parse` does), and the others (the remainder).
#[derive(Debug, PartialEq)]
struct ChunkFields<'a> {
    kind: Kind,
    /// `messageId`, or for a tool call `toolCallId`.
    id: Option<&'a str>,
    /// `subagentRunId`.
    tag: Option<&'a str>,
    metadata: Option<&'a str>,
    raw_event: Option<&'a str>,
    delta: Option<&'a str>,
    /// Text: `role`.
    role: Option<&'a str>,
    /// Text: `name`; tool: `toolCallName`.
    name: Option<&'a str>,
    /// Tool: `parentMessageId`.
    parent: Option<&'a str>,
    /// The properties the schema does not describe, carried over.
    remainder: Fields<'a>,
}

impl<'a> ChunkFields<'a> {
    fn new(kind: Kind) -> ChunkFields<'a> {
        ChunkFields {
            kind,
            id: None,
            tag: None,
            metadata: None,
            raw_event: None,
            delta: None,
            role: None,
            name: None,
            parent: None,
            remainder: Fields::default(),
        }
    }

    /// Reads the members of a chunk of `kind`: from its recorded member
    /// table, or in one walk over its text, which is already valid; the JSON
    /// library reads an object with an escaped key.
    fn parse(event: EventRef<'a>, kind: Kind) -> ChunkFields<'a> {
        let mut fields = ChunkFields::new(kind);
        if event.for_each_member(|key, value| fields.put(Cow::Borrowed(key), value)) {
            return fields;
        }
        ChunkFields::parse_slow(event.json(), kind)
    }

    /// [`ChunkFields::parse`] through the JSON library (any object text).
    fn parse_slow(json: &'a str, kind: Kind) -> ChunkFields<'a> {
        struct V(Kind);
        impl<'de> Visitor<'de> for V {
            type Value = ChunkFields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = ChunkFields::new(self.0);
                while let Some(crate::ObjectKey(key)) = map.next_key::<crate::ObjectKey<'de>>()? {
                    let value: &'de RawValue = map.next_value()?;
                    fields.put(key, value.get());
                }
                Ok(fields)
            }
        }
        let mut de = serde_json::Deserializer::from_str(json);
        // An Event always holds a JSON object, so this cannot fail.
        serde::Deserializer::deserialize_map(&mut de, V(kind))
            .unwrap_or_else(|_| ChunkFields::new(kind))
    }

    /// Adds one member.
    fn put(&mut self, key: Cow<'a, str>, value: &'a str) {
        let slot = match (&*key, self.kind) {
            ("type" | "timestamp", _) => return,
            ("subagentRunId", _) => &mut self.tag,
            ("metadata", _) => &mut self.metadata,
            ("rawEvent", _) => &mut self.raw_event,
            ("delta", _) => &mut self.delta,
            ("messageId", Kind::Text | Kind::Reasoning) | ("toolCallId", Kind::Tool) => {
                &mut self.id
            }
            ("role", Kind::Text) => &mut self.role,
            ("name", Kind::Text) | ("toolCallName", Kind::Tool) => &mut self.name,
            ("parentMessageId", Kind::Tool) => &mut self.parent,
            _ => return self.remainder.put(key, value),
        };
        *slot = Some(value);
    }
}

/// Member lists longer than this index their keys to find repeated ones, so
/// a wide object is read in linear time.
const INDEX_KEYS_FROM: usize = 16;

/// Members as JSON text, in order.
#[derive(Debug, Default, PartialEq)]
struct Fields<'a> {
    entries: Vec<(Cow<'a, str>, &'a str)>,
    /// Position of each key in `entries`, once there are many.
    positions: Option<HashMap<Cow<'a, str>, usize>>,
}

impl<'a> Fields<'a> {
    /// Adds one member. A repeated key keeps its first position and last
    /// value, as `JSON.parse` does.
    fn put(&mut self, key: Cow<'a, str>, value: &'a str) {
        let at = match &self.positions {
            Some(p) => p.get(&key).copied(),
            None => self.entries.iter().position(|(k, _)| *k == key),
        };
        match at {
            Some(at) => self.entries[at].1 = value,
            None => {
                if let Some(p) = &mut self.positions {
                    p.insert(key.clone(), self.entries.len());
                }
                self.entries.push((key, value));
                if self.positions.is_none() && self.entries.len() > INDEX_KEYS_FROM {
                    self.positions = Some(
                        self.entries
                            .iter()
                            .enumerate()
                            .map(|(i, (k, _))| (k.clone(), i))
                            .collect(),
                    );
                }
            }
        }
    }

    /// The members, in order.
    fn pairs(&self) -> Vec<(&str, &'a str)> {
        self.entries.iter().map(|(k, v)| (k.as_ref(), *v)).collect()
    }
}

fn put_end(p: &Pending, out: &mut impl Sink) {
    let (ty, key) = match p.kind {
        Kind::Text => ("\"TEXT_MESSAGE_END\"", "messageId"),
        Kind::Tool => ("\"TOOL_CALL_END\"", "toolCallId"),
        Kind::Reasoning => ("\"REASONING_MESSAGE_END\"", "messageId"),
    };
    let mut obj = Obj::new();
    obj.push(("type", ty));
    obj.push((key, &p.id_json));
    if let Some(t) = &p.tag_json {
        obj.push(("subagentRunId", t));
    }
    out.put(p.kind.end_type(), &[], obj.as_slice());
}

/// `subagentRunId` of a non-chunk event, as the closing rules read it.
#[derive(Debug, PartialEq)]
enum TagOf<'a> {
    Tag(Tag<'a>),
    Other,
}

/// An event's `subagentRunId`, when its reader already found it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KnownTag<'a> {
    /// Not read: [`ChunkExpander::push_to_known`] reads it.
    Unread,
    /// Read by one walk over the event's top-level members (its member
    /// table, or its text; not the JSON library's reader): the raw value
    /// of the last `subagentRunId` member (`None`: there is none), and
    /// whether there were several.
    Read {
        raw: Option<&'a str>,
        repeated: bool,
    },
}

impl<'a> KnownTag<'a> {
    /// The tag as [`read_tag_of`] reads it.
    fn or_read(self, event: EventRef<'a>) -> TagOf<'a> {
        match self {
            KnownTag::Unread => read_tag_of(event),
            KnownTag::Read { raw, repeated } => tag_of(raw, repeated),
        }
    }
}

/// True when `known`, what a reader found of `event`'s tag, reads as the
/// expander reads the event itself (a check for the readers' tests).
#[cfg(test)]
pub(crate) fn known_tag_agrees(event: EventRef<'_>, known: KnownTag<'_>) -> bool {
    known.or_read(event) == read_tag_of(event)
}

/// The tag of an event whose last `subagentRunId` member has the raw value
/// `found` (repeated: there were several).
fn tag_of(found: Option<&str>, repeated: bool) -> TagOf<'_> {
    match found {
        _ if repeated => TagOf::Other,
        None => TagOf::Tag(Tag::Absent),
        Some("null") => TagOf::Tag(Tag::Null),
        Some(raw) => as_str(raw).map_or(TagOf::Other, |s| TagOf::Tag(Tag::Id(s))),
    }
}

/// Reads only `subagentRunId` (a repeated one names no lane).
fn read_tag_of(event: EventRef<'_>) -> TagOf<'_> {
    // Most events have no such member. Its name is all letters, so any
    // spelling of it in the text is the name itself or holds a `\u` escape:
    // without either, no member at any depth has that name. An event with
    // a member table reads it instead, which costs less than the search.
    let text = event.json().as_bytes();
    if event.members().is_none()
        && memchr::memmem::find(text, b"subagentRunId").is_none()
        && memchr::memmem::find(text, b"\\u").is_none()
    {
        return TagOf::Tag(Tag::Absent);
    }
    // One walk over the valid text; the JSON library reads an event with
    // an escaped key.
    let mut found: Option<&str> = None;
    let mut repeated = false;
    if event.for_each_member(|key, value| {
        if key == "subagentRunId" {
            repeated |= found.is_some();
            found = Some(value);
        }
    }) {
        return tag_of(found, repeated);
    }
    read_tag_slow(event)
}

/// [`read_tag_of`] through the JSON library (any event text).
fn read_tag_slow(event: EventRef<'_>) -> TagOf<'static> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Tag<'static>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an event object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tag<'static>, A::Error> {
            let mut tag: Option<Tag<'static>> = None;
            while let Some(crate::ObjectKey(key)) = map.next_key::<crate::ObjectKey<'de>>()? {
                if key == "subagentRunId" {
                    if tag.is_some() {
                        return Err(de::Error::custom("subagentRunId appears twice"));
                    }
                    tag = Some(map.next_value::<TagValue>()?.0);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(tag.unwrap_or(Tag::Absent))
        }
    }
    let mut de = serde_json::Deserializer::from_str(event.json());
    match serde::Deserializer::deserialize_map(&mut de, V) {
        Ok(tag) => TagOf::Tag(tag),
        Err(_) => TagOf::Other,
    }
}

/// A present `subagentRunId`: `null`, a string, or (an error) anything else.
struct TagValue(Tag<'static>);

impl<'de> Deserialize<'de> for TagValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TagValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("null or a string")
            }
            fn visit_unit<E: de::Error>(self) -> Result<TagValue, E> {
                Ok(TagValue(Tag::Null))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<TagValue, E> {
                Ok(TagValue(Tag::Id(Cow::Owned(s.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<TagValue, E> {
                Ok(TagValue(Tag::Id(Cow::Owned(s))))
            }
        }
        d.deserialize_any(V)
    }
}

/// Expands every chunk of a stream (see [`ChunkExpander`]). Items still open
/// at the end are left open, as upstream does. On error, returns the index of
/// the input event that caused it.
pub fn expand_chunks(events: &[Event]) -> Result<Vec<Event>, (usize, ChunkError)> {
    let mut expander = ChunkExpander::new();
    let mut out = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        if expander.push_into(e, &mut out).map_err(|err| (i, err))? {
            out.push(e.clone());
        }
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
    fn an_id_without_escapes_is_its_own_json_text_and_an_escaped_one_is_rewritten() {
        for raw in [
            r#""m""#,
            r#""""#,
            r#""café 🚀 /<>'""#,
            r#""a\u00e9""#,
            r#""a\/b""#,
        ] {
            let id = as_str(raw).unwrap();
            if let Cow::Borrowed(_) = id {
                assert_eq!(quote(&id), raw);
            }
        }
        let out = run(&[
            RS,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m\u00e9\/","delta":"a"}"#,
            r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"café","toolCallName":"t","delta":"b"}"#,
        ])
        .unwrap();
        assert_eq!(
            out[1..],
            [
                r#"{"type":"TEXT_MESSAGE_START","messageId":"mé/","role":"assistant"}"#,
                r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"mé/","delta":"a"}"#,
                r#"{"type":"TEXT_MESSAGE_END","messageId":"mé/"}"#,
                r#"{"type":"TOOL_CALL_START","toolCallId":"café","toolCallName":"t"}"#,
                r#"{"type":"TOOL_CALL_ARGS","toolCallId":"café","delta":"b"}"#,
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

    /// Object texts with repeated keys (described by the chunk schema or
    /// not), escaped keys, nested look-alikes, odd spacing and wide objects
    /// (the key index).
    fn object_text() -> proptest::strategy::BoxedStrategy<String> {
        agui_testkit::texts::object_text(
            "X_TEST",
            &[
                "subagentRunId",
                "messageId",
                "toolCallId",
                "toolCallName",
                "parentMessageId",
                "role",
                "name",
                "delta",
                "metadata",
                "rawEvent",
                "timestamp",
                "subagent\\u0052unId",
                "tool\\u0043allId",
                "m\\\\x",
            ],
            &[
                "null",
                "\"lane\"",
                "\"la\\\"ne\\u00e9\"",
                "12.50",
                "false",
                "{\"subagentRunId\":\"inner\",\"a\":[1,{}]}",
                "[\"}\",{\"subagentRunId\":null}]",
            ],
            24,
            23,
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// The walk over valid text, and the member table the envelope scan
        /// records, read what the JSON library reads.
        #[test]
        fn fields_and_tags_read_by_the_walk_agree_with_the_library(text in object_text()) {
            let event = Event::from_json(&text).unwrap();
            let mut members = Vec::new();
            let checked = Event::check_recording(event.json(), &mut members).unwrap();
            proptest::prop_assert_eq!(checked.json(), event.json());
            let recorded = EventRef::from_checked_members(event.json(), event.event_type(), &members);
            for kind in [Kind::Text, Kind::Tool, Kind::Reasoning] {
                let slow = ChunkFields::parse_slow(event.json(), kind);
                proptest::prop_assert_eq!(&ChunkFields::parse(event.as_event_ref(), kind), &slow);
                proptest::prop_assert_eq!(&ChunkFields::parse(recorded, kind), &slow);
            }
            let tag = read_tag_slow(event.as_event_ref());
            proptest::prop_assert_eq!(&read_tag_of(event.as_event_ref()), &tag);
            proptest::prop_assert_eq!(&read_tag_of(recorded), &tag);
        }
    }
}
