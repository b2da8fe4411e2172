//! Sequence verification: every rule of the official client's `verifyEvents`
//! (`@ag-ui/client` 1.0.0, `src/verify/verify.ts`).
//!
//! # Pipeline
//!
//! The official client runs `enforceEvents -> transformChunks -> verifyEvents`.
//! agui verifies raw stored events, so:
//!
//! - **Chunks are expanded first** ([`crate::chunks::ChunkExpander`]), exactly
//!   as upstream; an error in an event synthesized by the expansion is
//!   reported at the index of the input event whose push produced it (a
//!   synthetic END is produced by the event that closes the chunk stream).
//!   Chunk expansion errors are verification errors ([`VerifyError::Chunk`]).
//! - **Unknown event types are ignored entirely.** Upstream's enforcement stage
//!   drops them before verification, so they neither count as the first event
//!   nor break "nothing after `RUN_FINISHED`"; the verifier skips them the same
//!   way (they also pass chunk expansion without closing anything, as they do
//!   upstream).
//! - **Fields the rules key on must be present strings** (`messageId`,
//!   `toolCallId`, `stepName`, `entityId`, and `subagentRunId` when present).
//!   Upstream's schema stage rejects such events before verification; this
//!   verifier reports [`VerifyError::BadField`] for them. It is not a schema
//!   validator otherwise (see `model` for that).
//!
//! # The rules (in upstream's order)
//!
//! 1. After `RUN_ERROR` only `RUN_STARTED` may follow; after `RUN_FINISHED`
//!    only `RUN_STARTED` or `RUN_ERROR`. The first event must be `RUN_STARTED`
//!    or `RUN_ERROR`; `RUN_STARTED` while a run is active is an error; a new
//!    run resets all per-run tracking.
//! 2. `subagentRunId: null` is rejected on every event; on `SUBAGENT_*` a
//!    `null` optional field is rejected, `outcome.type` must be `success` or
//!    `suspended`, `outcome.interruptIds` must be an array of strings; on
//!    `RUN_FINISHED` an interrupt with `subagentRunId: null` is rejected.
//! 3. Text messages, tool calls, reasoning spans and reasoning messages open
//!    and close by id; steps by (subagent, name); subagents by id, never
//!    reused within a run, with a started parent.
//! 4. Ownership: each entity kind (message, tool call, activity, reasoning)
//!    records its opener's `subagentRunId` (absent = the parent agent) for the
//!    whole run; a tagged continuation must agree; an absent tag always
//!    agrees. `MESSAGES_SNAPSHOT` seeds owners authoritatively and
//!    `RUN_STARTED.input.messages` non-authoritatively.
//! 5. `RUN_FINISHED` requires no open steps, text messages, reasoning
//!    messages, reasoning spans, tool calls or subagents (checked in that
//!    order).
//!
//! # Cost
//!
//! Linear time: each event is parsed once into a borrowed view. Memory holds
//! the open items plus the owners recorded in the current run (upstream keeps
//! owners for the whole run, because continuations may legally follow a
//! close); everything is dropped when the next run starts.
//!
//! # Collecting every diagnostic
//!
//! [`verify_all`] keeps going after an error. A rejected event changes no
//! state (it is skipped), with two exceptions that follow the producer's
//! evident intent: a `RUN_STARTED` rejected because a run is active still
//! starts a new run, and a `RUN_FINISHED` rejected because items are open
//! still ends the run. A rejected chunk is skipped.

use std::borrow::{Borrow, Cow};
use std::fmt;

use foldhash::HashMap;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::chunks::{self, ChunkError, ChunkExpander, KnownTag, Sink};
use crate::{Event, EventRef, EventType, scan};

/// The kinds of item that open and close by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// `TEXT_MESSAGE_*`.
    TextMessage,
    /// `TOOL_CALL_*`.
    ToolCall,
    /// `REASONING_START` / `REASONING_END`.
    ReasoningSpan,
    /// `REASONING_MESSAGE_*`.
    ReasoningMessage,
}

impl ItemKind {
    fn noun(self) -> &'static str {
        match self {
            ItemKind::TextMessage => "text message",
            ItemKind::ToolCall => "tool call",
            ItemKind::ReasoningSpan => "reasoning span",
            ItemKind::ReasoningMessage => "reasoning message",
        }
    }
    fn start(self) -> &'static str {
        match self {
            ItemKind::TextMessage => "TEXT_MESSAGE_START",
            ItemKind::ToolCall => "TOOL_CALL_START",
            ItemKind::ReasoningSpan => "REASONING_START",
            ItemKind::ReasoningMessage => "REASONING_MESSAGE_START",
        }
    }
    fn end(self) -> &'static str {
        match self {
            ItemKind::TextMessage => "TEXT_MESSAGE_END",
            ItemKind::ToolCall => "TOOL_CALL_END",
            ItemKind::ReasoningSpan => "REASONING_END",
            ItemKind::ReasoningMessage => "REASONING_MESSAGE_END",
        }
    }
}

fn parent_or(owner: &Option<String>) -> &str {
    owner.as_deref().unwrap_or("(the parent agent)")
}

/// Why a stream breaks a sequence rule. Messages follow the official client's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// Chunk expansion failed on this event.
    #[error("{0}")]
    Chunk(#[from] ChunkError),
    /// A field the rules key on is missing or not a string.
    #[error("Cannot send '{event_type}': '{field}' must be a string")]
    BadField {
        /// The event's type.
        event_type: String,
        /// The field.
        field: &'static str,
    },
    /// Anything but `RUN_STARTED` after `RUN_ERROR`.
    #[error(
        "Cannot send event type '{event_type}': The run has already errored with 'RUN_ERROR'. No further events can be sent."
    )]
    AfterRunError {
        /// The event's type.
        event_type: String,
    },
    /// Anything but `RUN_STARTED` / `RUN_ERROR` after `RUN_FINISHED`.
    #[error(
        "Cannot send event type '{event_type}': The run has already finished with 'RUN_FINISHED'. Start a new run with 'RUN_STARTED'."
    )]
    AfterRunFinished {
        /// The event's type.
        event_type: String,
    },
    /// The first event is neither `RUN_STARTED` nor `RUN_ERROR`.
    #[error("First event must be 'RUN_STARTED'")]
    FirstEventNotRunStarted,
    /// `RUN_STARTED` while a run is active.
    #[error(
        "Cannot send 'RUN_STARTED' while a run is still active. The previous run must be finished with 'RUN_FINISHED' before starting a new run."
    )]
    RunStillActive,
    /// `subagentRunId: null` on an event.
    #[error(
        "Cannot send '{event_type}' with 'subagentRunId: null'. The field is optional — omit it entirely."
    )]
    NullSubagentRunId {
        /// The event's type.
        event_type: String,
    },
    /// `null` in an optional field of a `SUBAGENT_*` event.
    #[error(
        "Cannot send '{event_type}' with '{field}: null'. The field is optional — omit it entirely."
    )]
    NullLifecycleField {
        /// The event's type.
        event_type: String,
        /// The field.
        field: &'static str,
    },
    /// A `SUBAGENT_*` outcome whose `type` is neither `success` nor `suspended`.
    #[error(
        "Cannot send '{event_type}' with outcome type '{found}'. The outcome is either {{ type: \"success\" }} or {{ type: \"suspended\" }}."
    )]
    BadSubagentOutcome {
        /// The event's type.
        event_type: String,
        /// The `type` found (as JavaScript would print it).
        found: String,
    },
    /// `outcome.interruptIds: null`.
    #[error(
        "Cannot send '{event_type}' with 'outcome.interruptIds: null'. The field is optional — omit it entirely."
    )]
    NullInterruptIds {
        /// The event's type.
        event_type: String,
    },
    /// A non-string entry in `outcome.interruptIds`.
    #[error(
        "Cannot send '{event_type}' with a non-string entry in 'outcome.interruptIds'. Interrupt ids are strings."
    )]
    NonStringInterruptId {
        /// The event's type.
        event_type: String,
    },
    /// An interrupt with `subagentRunId: null` in `RUN_FINISHED.outcome`.
    #[error(
        "Cannot send 'RUN_FINISHED' with an interrupt (id '{interrupt_id}') carrying 'subagentRunId: null'. The field is optional — omit it entirely."
    )]
    NullInterruptSubagent {
        /// The interrupt's id.
        interrupt_id: String,
    },
    /// A replayed message (snapshot or run input) with `subagentRunId: null`.
    #[error(
        "Cannot send a message (id '{message_id}') with 'subagentRunId: null'. The field is optional — omit it entirely."
    )]
    NullMessageSubagent {
        /// The message's id.
        message_id: String,
    },
    /// A start for an id that is already open.
    #[error(
        "Cannot send '{}' event: A {} with ID '{id}' is already in progress. Complete it with '{}' first.",
        kind.start(), kind.noun(), kind.end()
    )]
    AlreadyOpen {
        /// What kind of item.
        kind: ItemKind,
        /// Its id.
        id: String,
    },
    /// A continuation or end for an id that is not open.
    #[error("Cannot send '{event_type}' event: No active {} found with ID '{id}'. {}",
        kind.noun(),
        if event_type == kind.end() { format!("A '{}' event must be sent first.", kind.start()) }
        else { format!("Start a {} with '{}' first.", kind.noun(), kind.start()) })]
    NotOpen {
        /// The event's type.
        event_type: String,
        /// What kind of item.
        kind: ItemKind,
        /// Its id.
        id: String,
    },
    /// A tagged event disagrees with the owner recorded for its entity.
    #[error(
        "Cannot send '{event_type}': subagentRunId '{tag}' does not match the {entity} '{id}' opener's subagent '{}'.",
        parent_or(owner)
    )]
    OwnerMismatch {
        /// The event's type.
        event_type: String,
        /// The event's `subagentRunId`.
        tag: String,
        /// `message`, `tool call`, `reasoning message`, `activity`.
        entity: &'static str,
        /// The entity's id.
        id: String,
        /// The recorded owner (`None`: the parent agent).
        owner: Option<String>,
    },
    /// A tool call tagged differently from its parent message's owner.
    #[error(
        "Cannot send 'TOOL_CALL_START': subagentRunId '{tag}' does not match its parent message '{parent}' owner '{}'. A tool call belongs to the message that carries it.",
        parent_or(owner)
    )]
    ToolParentMismatch {
        /// The event's tag.
        tag: String,
        /// `parentMessageId`.
        parent: String,
        /// The parent message's owner.
        owner: Option<String>,
    },
    /// An untagged re-open of a tool call under a parent message with another owner.
    #[error(
        "Cannot send 'TOOL_CALL_START': tool call '{id}' is owned by '{}' but its parent message '{parent}' is owned by '{}'. A tool call belongs to the message that carries it.",
        parent_or(owner),
        parent_or(parent_owner)
    )]
    ToolReopenMismatch {
        /// The tool call id.
        id: String,
        /// Its recorded owner.
        owner: Option<String>,
        /// `parentMessageId`.
        parent: String,
        /// The parent message's owner.
        parent_owner: Option<String>,
    },
    /// `STEP_STARTED` for a (subagent, name) already open.
    #[error("Step \"{name}\" is already active for 'STEP_STARTED'{}",
        owner.as_ref().map(|o| format!(" in subagent '{o}'")).unwrap_or_default())]
    StepAlreadyActive {
        /// The step name.
        name: String,
        /// The step's owner.
        owner: Option<String>,
    },
    /// `STEP_FINISHED` for a name open only under another owner.
    #[error(
        "Cannot send 'STEP_FINISHED' for step \"{name}\" attributed to {}: that step is open under {}. A step must be finished by whoever started it.",
        who(owner),
        who(open_under)
    )]
    StepOwnerMismatch {
        /// The step name.
        name: String,
        /// The event's tag.
        owner: Option<String>,
        /// The owner that has it open.
        open_under: Option<String>,
    },
    /// `STEP_FINISHED` for a step that is not open.
    #[error("Cannot send 'STEP_FINISHED' for step \"{name}\" that was not started")]
    StepNotStarted {
        /// The step name.
        name: String,
    },
    /// A `SUBAGENT_*` event without its `subagentRunId`.
    #[error("Cannot send '{event_type}' without a 'subagentRunId'.")]
    SubagentWithoutId {
        /// The event's type.
        event_type: String,
    },
    /// `SUBAGENT_STARTED` without a string `name`.
    #[error("Cannot send 'SUBAGENT_STARTED' without a 'name'.")]
    SubagentWithoutName,
    /// `SUBAGENT_ERROR` without a string `message`.
    #[error("Cannot send 'SUBAGENT_ERROR' without a 'message'.")]
    SubagentErrorWithoutMessage,
    /// `SUBAGENT_STARTED` for an active subagent.
    #[error(
        "Cannot send 'SUBAGENT_STARTED': subagent '{id}' is already active. Finish it with 'SUBAGENT_FINISHED' first."
    )]
    SubagentAlreadyActive {
        /// The subagent run id.
        id: String,
    },
    /// `SUBAGENT_STARTED` for an id already finished in this run.
    #[error(
        "Cannot send 'SUBAGENT_STARTED': subagent '{id}' has already finished in this run. Subagent IDs are per-invocation and cannot be reused."
    )]
    SubagentReused {
        /// The subagent run id.
        id: String,
    },
    /// `SUBAGENT_STARTED` naming a parent never started in this run.
    #[error(
        "Cannot send 'SUBAGENT_STARTED': parentSubagentRunId '{parent}' has not been started in this run."
    )]
    SubagentUnknownParent {
        /// `parentSubagentRunId`.
        parent: String,
    },
    /// `SUBAGENT_FINISHED` / `SUBAGENT_ERROR` for a subagent that is not active.
    #[error(
        "Cannot send '{event_type}': no active subagent found with ID '{id}'. A 'SUBAGENT_STARTED' event must be sent first."
    )]
    SubagentNotActive {
        /// The event's type.
        event_type: String,
        /// The subagent run id.
        id: String,
    },
    /// `RUN_FINISHED` while items are open.
    #[error("Cannot send 'RUN_FINISHED' while {what} are still active: {}", open.join(", "))]
    OpenAtRunFinished {
        /// `steps`, `text messages`, `reasoning messages`, `reasoning spans`,
        /// `tool calls` or `subagents`.
        what: &'static str,
        /// The open items, in the order they opened.
        open: Vec<String>,
    },
}

fn who(owner: &Option<String>) -> String {
    match owner {
        Some(o) => format!("subagent '{o}'"),
        None => "the parent agent".to_owned(),
    }
}

/// One problem found by [`verify_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Index (from 0) of the input event.
    pub index: usize,
    /// The input event's type.
    pub event_type: String,
    /// What is wrong.
    pub error: VerifyError,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "event #{} ({}): {}",
            self.index, self.event_type, self.error
        )
    }
}

// ---------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------

/// A JSON value read loosely: absent, `null`, a string, `false`, or anything else.
#[derive(Debug, Default)]
enum Loose<'a> {
    #[default]
    Absent,
    Null,
    Str(Cow<'a, str>),
    False,
    Other,
}

/// True when the string `raw` (a valid JSON string, quotes included) holds
/// an escape: its first special byte is not its closing quote.
#[inline(always)]
fn has_escape(raw: &str) -> bool {
    let b = raw.as_bytes();
    let from = scan::skip_plain(b, 1).unwrap_or(1).min(b.len());
    b[from..].iter().rev().skip(1).any(|&c| c == b'\\')
}

impl<'a> Loose<'a> {
    /// [`Loose::of`], told whether `raw` is known to be a string without
    /// escapes (`plain`; its body is then the string, read unchecked).
    #[inline(always)]
    fn of_known(raw: &'a str, plain: bool) -> Loose<'a> {
        if plain
            && raw.starts_with('"')
            && let Some(body) = raw.get(1..raw.len() - 1)
        {
            return Loose::Str(Cow::Borrowed(body));
        }
        Loose::of(raw)
    }

    /// Reads a raw JSON value (valid: it comes from an event).
    fn of(raw: &'a str) -> Loose<'a> {
        match raw.as_bytes().first() {
            Some(b'"') => match raw.get(1..raw.len() - 1) {
                Some(body) if !has_escape(raw) => Loose::Str(Cow::Borrowed(body)),
                _ => serde_json::from_str::<String>(raw)
                    .map_or(Loose::Other, |s| Loose::Str(Cow::Owned(s))),
            },
            Some(b'n') => Loose::Null,
            Some(b'f') => Loose::False,
            _ => Loose::Other,
        }
    }

    fn str(&self) -> Option<&str> {
        match self {
            Loose::Str(s) => Some(s),
            _ => None,
        }
    }
    fn is_null(&self) -> bool {
        matches!(self, Loose::Null)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Loose<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Loose<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Loose<'a>, E> {
                Ok(Loose::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Loose<'a>, E> {
                Ok(Loose::Str(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Loose<'a>, E> {
                Ok(Loose::Str(Cow::Owned(s)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Loose<'a>, E> {
                Ok(Loose::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Loose<'a>, E> {
                Ok(Loose::Null)
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Loose<'a>, E> {
                Ok(if b { Loose::Other } else { Loose::False })
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Loose<'a>, E> {
                Ok(Loose::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Loose<'a>, E> {
                Ok(Loose::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Loose<'a>, E> {
                Ok(Loose::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Loose<'a>, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Loose::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Loose<'a>, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Loose::Other)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

fn raw<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// How many fields a [`View`] holds (see [`field_of`]).
const FIELDS: usize = 17;

/// Every field the rules read, each as its raw JSON value borrowed from the
/// event's text (`None`: absent), numbered as [`field_of`] numbers them.
/// A value is read (see [`Loose::of`]) only when a rule asks for it.
#[derive(Default, Debug, Clone, Copy)]
struct View<'a> {
    raw: [Option<&'a str>; FIELDS],
    /// The fields known to be strings without escapes, one bit each (as
    /// the envelope scan recorded them; a clear bit tells nothing).
    plain: u32,
}

/// Accessors of [`View`], one per field, named after it.
macro_rules! view_fields {
    ($($loose:ident = $n:literal),+ ; $($raw:ident = $m:literal),+ $(,)?) => {
        impl<'a> View<'a> {
            $(
                #[inline(always)]
                fn $loose(&self) -> Loose<'a> {
                    let plain = self.plain & (1 << $n) != 0;
                    self.raw[$n].map_or(Loose::Absent, |raw| Loose::of_known(raw, plain))
                }
            )+
            $(
                #[inline(always)]
                fn $raw(&self) -> Option<&'a RawValue> {
                    self.raw[$m].and_then(|value| serde_json::from_str::<&RawValue>(value).ok())
                }
            )+
        }
    };
}

view_fields!(
    subagent_run_id = 0,
    message_id = 1,
    tool_call_id = 2,
    parent_message_id = 3,
    step_name = 4,
    entity_id = 5,
    subtype = 6,
    replace = 7,
    name = 8,
    message = 9,
    description = 10,
    parent_subagent_run_id = 11,
    parent_tool_call_id = 12,
    code = 13;
    outcome = 14,
    messages = 15,
    input = 16,
);

/// The field number of `subagentRunId`.
const SUBAGENT_RUN_ID: usize = 0;

/// Every field [`View`] holds, as the JSON library reads them: the
/// reader of an event with an escaped key. A field given twice is an
/// error (so the whole view is empty).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct DerivedView<'a> {
    #[serde(default, borrow, deserialize_with = "raw")]
    subagent_run_id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    message_id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    tool_call_id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    parent_message_id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    step_name: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    entity_id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    subtype: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    replace: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    name: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    message: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    description: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    parent_subagent_run_id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    parent_tool_call_id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    code: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    outcome: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    messages: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw")]
    input: Option<&'a RawValue>,
}

impl<'a> From<DerivedView<'a>> for View<'a> {
    fn from(d: DerivedView<'a>) -> View<'a> {
        View {
            raw: [
                d.subagent_run_id,
                d.message_id,
                d.tool_call_id,
                d.parent_message_id,
                d.step_name,
                d.entity_id,
                d.subtype,
                d.replace,
                d.name,
                d.message,
                d.description,
                d.parent_subagent_run_id,
                d.parent_tool_call_id,
                d.code,
                d.outcome,
                d.messages,
                d.input,
            ]
            .map(|value| value.map(RawValue::get)),
            plain: 0,
        }
    }
}

/// An event's [`View`], and its `subagentRunId` as the chunk expander's
/// closing rules read it.
struct Read<'a> {
    view: View<'a>,
    tag: KnownTag<'a>,
}

impl<'a> View<'a> {
    /// The fields of `event`, read from its member table when it has one,
    /// else in one walk over its members (the JSON library reads an event
    /// with an escaped key). As with the derived reader, a field given
    /// twice makes the whole view empty.
    #[cfg(test)]
    fn read(event: EventRef<'a>) -> View<'a> {
        View::read_tagged(event).view
    }

    /// [`View::read`], with the event's `subagentRunId` as the walk found
    /// it (unread when the JSON library read the event).
    #[inline]
    fn read_tagged(event: EventRef<'a>) -> Read<'a> {
        let mut filling = Filling::default();
        let json = event.json();
        // From the member table: a key is matched as bytes, and only the
        // value of a key the rules read is sliced out.
        let scanned = match event.members() {
            Some(members) => {
                for m in members {
                    let key = json.as_bytes().get(m.key.0 as usize..m.key.1 as usize);
                    if let Some(field) = key.and_then(field_of)
                        && let Some(value) = json.get(m.value.0 as usize..m.value.1 as usize)
                    {
                        filling.put(field, value, m.plain);
                    }
                }
                true
            }
            None => scan::members_of_valid(json, |key, value| {
                if let Some(field) = field_of(key.as_bytes()) {
                    filling.put(field, value, false);
                }
            }),
        };
        if !scanned {
            return Read {
                view: event
                    .view::<DerivedView<'a>>()
                    .map(View::from)
                    .unwrap_or_default(),
                tag: KnownTag::Unread,
            };
        }
        let tag = KnownTag::Read {
            raw: filling.view.raw[SUBAGENT_RUN_ID],
            repeated: filling.repeated & (1 << SUBAGENT_RUN_ID) != 0,
        };
        Read {
            view: filling.done(),
            tag,
        }
    }
}

/// A [`View`] filled one member at a time, each given as its field (see
/// [`field_of`]) and its raw value.
#[derive(Default)]
struct Filling<'a> {
    view: View<'a>,
    /// The fields given so far, one bit each.
    seen: u32,
    /// The fields given more than once, one bit each.
    repeated: u32,
}

impl<'a> Filling<'a> {
    /// `plain`: `value` is known to be a string without escapes.
    #[inline(always)]
    fn put(&mut self, field: u32, value: &'a str, plain: bool) {
        let bit = 1 << field;
        self.repeated |= self.seen & bit;
        self.seen |= bit;
        self.view.plain = (self.view.plain & !bit) | if plain { bit } else { 0 };
        if let Some(slot) = self.view.raw.get_mut(field as usize) {
            *slot = Some(value);
        }
    }

    /// The view; empty when a field was given twice.
    #[inline(always)]
    fn done(self) -> View<'a> {
        if self.repeated != 0 {
            return View::default();
        }
        self.view
    }
}

/// The [`View`] field a top-level key fills (its bit in [`Filling`]), if
/// any: dispatched on the key's length, then compared as a whole word.
#[inline(always)]
fn field_of(key: &[u8]) -> Option<u32> {
    macro_rules! pick {
        ($($word:literal => $field:expr),+ $(,)?) => {{
            $(if key == $word { return Some($field); })+
            None
        }};
    }
    match key.len() {
        4 => pick!(b"name" => 8, b"code" => 13),
        5 => pick!(b"input" => 16),
        7 => pick!(b"subtype" => 6, b"replace" => 7, b"message" => 9, b"outcome" => 14),
        8 => pick!(b"stepName" => 4, b"entityId" => 5, b"messages" => 15),
        9 => pick!(b"messageId" => 1),
        10 => pick!(b"toolCallId" => 2),
        11 => pick!(b"description" => 10),
        13 => pick!(b"subagentRunId" => 0),
        15 => pick!(b"parentMessageId" => 3),
        16 => pick!(b"parentToolCallId" => 12),
        19 => pick!(b"parentSubagentRunId" => 11),
        _ => None,
    }
}

/// A message replayed by a snapshot or a run input, as the seeding reads it.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MessageView<'a> {
    #[serde(default, borrow)]
    id: Loose<'a>,
    #[serde(default, borrow)]
    role: Loose<'a>,
    #[serde(default, borrow)]
    subagent_run_id: Loose<'a>,
    #[serde(default, borrow, deserialize_with = "raw")]
    tool_calls: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct IdView<'a> {
    #[serde(default, borrow)]
    id: Loose<'a>,
}

#[derive(Deserialize, Default)]
struct InputView<'a> {
    #[serde(default, borrow, deserialize_with = "raw")]
    messages: Option<&'a RawValue>,
}

/// The events a chunk expands into, as the rules read them: each one's type
/// and the members its [`View`] reads, their values copied here. The
/// expander hands over each event's members (see [`Sink`]), so no event is
/// rendered as text only to be read back.
#[derive(Default, Debug)]
struct Expanded {
    /// The values, back to back.
    values: String,
    /// Each member read: its field (see [`field_of`]) and where its value
    /// lies in `values`.
    fields: Vec<(u32, usize, usize)>,
    /// Each event: its type and where its members end in `fields` (they
    /// start where the previous event's end).
    events: Vec<(EventType, usize)>,
}

impl Expanded {
    fn len(&self) -> usize {
        self.events.len()
    }

    fn clear(&mut self) {
        self.values.clear();
        self.fields.clear();
        self.events.clear();
    }

    /// Event `i`: its type and its view.
    fn get(&self, i: usize) -> Option<(&EventType, View<'_>)> {
        let (ty, end) = self.events.get(i)?;
        let start = match i {
            0 => 0,
            _ => self.events.get(i - 1)?.1,
        };
        let mut filling = Filling::default();
        for &(field, from, to) in self.fields.get(start..*end)? {
            filling.put(field, self.values.get(from..to)?, false);
        }
        Some((ty, filling.done()))
    }
}

impl Sink for Expanded {
    fn put(&mut self, ty: EventType, first: &[(&str, &str)], second: &[(&'static str, &str)]) {
        chunks::spread(first, second, |key, value, _| {
            if let Some(field) = field_of(key.as_bytes()) {
                let from = self.values.len();
                self.values.push_str(value);
                self.fields.push((field, from, self.values.len()));
            }
        });
        self.events.push((ty, self.fields.len()));
    }
}

// ---------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------

type Owner = Option<String>;

/// An insertion-ordered set with O(1) insert and remove.
#[derive(Default, Debug)]
struct OrderedSet {
    seq: u64,
    items: HashMap<String, u64>,
}

impl OrderedSet {
    fn contains(&self, k: &str) -> bool {
        self.items.contains_key(k)
    }
    fn insert(&mut self, k: &str) {
        if !self.items.contains_key(k) {
            self.seq += 1;
            self.items.insert(k.to_owned(), self.seq);
        }
    }
    fn remove(&mut self, k: &str) -> bool {
        self.items.remove(k).is_some()
    }
    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    fn clear(&mut self) {
        self.items.clear();
    }
    fn in_order(&self) -> Vec<String> {
        let mut v: Vec<(&String, &u64)> = self.items.iter().collect();
        v.sort_by_key(|(_, s)| **s);
        v.into_iter().map(|(k, _)| k.clone()).collect()
    }
}

/// One id an entity kind has seen in the current run: its owner and, for
/// each of the kind's open sets (see [`Entities`]), where it was opened
/// among that set's open items (`0`: not open).
#[derive(Debug)]
struct Entity {
    owner: Owner,
    opened: [u64; 2],
}

/// The ids of one entity kind (message, tool call, activity, reasoning)
/// seen in the current run: each one's owner and whether it is open, in
/// one map, so that an event continuing an open item costs one lookup.
///
/// A kind has up to two open sets (reasoning: spans `0`, messages `1`;
/// the others use set `0` only). Every open id has an entry, so the open
/// sets are the entries marked open; they are kept in the order opened.
#[derive(Default, Debug)]
struct Entities {
    items: HashMap<String, Entity>,
    /// The order given to the last item opened.
    seq: u64,
    /// How many items each set holds open.
    open: [usize; 2],
}

impl Entities {
    fn owner(&self, id: &str) -> Option<&Owner> {
        self.items.get(id).map(|e| &e.owner)
    }

    fn contains_key(&self, id: &str) -> bool {
        self.items.contains_key(id)
    }

    /// Records `owner` as `id`'s, keeping whether it is open.
    fn set_owner(&mut self, id: &str, owner: Owner) {
        match self.items.get_mut(id) {
            Some(e) => e.owner = owner,
            None => {
                self.items.insert(
                    id.to_owned(),
                    Entity {
                        owner,
                        opened: [0; 2],
                    },
                );
            }
        }
    }

    /// Opens `id` in `set`: `Ok(false)` (nothing changed) when it is open
    /// there already; else `agree` checks an existing owner (an error
    /// changes nothing), and a new id is recorded as owned by `owner`.
    fn open(
        &mut self,
        set: usize,
        id: &str,
        agree: impl FnOnce(&Owner) -> Result<(), VerifyError>,
        owner: impl FnOnce() -> Owner,
    ) -> Result<bool, VerifyError> {
        match self.items.get_mut(id) {
            Some(e) => {
                if e.opened[set] != 0 {
                    return Ok(false);
                }
                agree(&e.owner)?;
                self.seq += 1;
                e.opened[set] = self.seq;
            }
            None => {
                self.seq += 1;
                let mut opened = [0; 2];
                opened[set] = self.seq;
                self.items.insert(
                    id.to_owned(),
                    Entity {
                        owner: owner(),
                        opened,
                    },
                );
            }
        }
        self.open[set] += 1;
        Ok(true)
    }

    /// Continues `id`'s open item in `set`: `Ok(false)` when it is not open
    /// there; else `agree` checks its owner, and when that holds and
    /// `close` is set, the item is closed.
    fn carry_on(
        &mut self,
        set: usize,
        id: &str,
        close: bool,
        agree: impl FnOnce(&Owner) -> Result<(), VerifyError>,
    ) -> Result<bool, VerifyError> {
        let Some(e) = self.items.get_mut(id).filter(|e| e.opened[set] != 0) else {
            return Ok(false);
        };
        agree(&e.owner)?;
        if close {
            e.opened[set] = 0;
            self.open[set] -= 1;
        }
        Ok(true)
    }

    fn any_open(&self, set: usize) -> bool {
        self.open[set] != 0
    }

    /// The ids open in `set`, in the order they were opened.
    fn open_in_order(&self, set: usize) -> Vec<String> {
        let mut v: Vec<(&String, u64)> = self
            .items
            .iter()
            .filter(|(_, e)| e.opened[set] != 0)
            .map(|(k, e)| (k, e.opened[set]))
            .collect();
        v.sort_by_key(|(_, s)| *s);
        v.into_iter().map(|(k, _)| k.clone()).collect()
    }

    fn clear(&mut self) {
        self.items.clear();
        self.open = [0; 2];
    }
}

/// The open set of text messages (in [`Rules::messages`]), tool calls
/// ([`Rules::tool_calls`]) and reasoning spans ([`Rules::reasoning`]).
const OPEN: usize = 0;
/// The open set of reasoning messages (in [`Rules::reasoning`]).
const OPEN_MESSAGES: usize = 1;

/// Verifies a stream one event at a time (see the module docs).
///
/// [`Verifier::push`] takes raw events (chunks included) and expands chunks
/// itself; [`Verifier::push_expanded`] takes events already expanded.
#[derive(Default, Debug)]
pub struct Verifier {
    expander: ChunkExpander,
    /// The events a chunk expands into, as the rules read them (reused, so
    /// that an event costs no allocation here).
    expanded: Expanded,
    count: usize,
    rules: Rules,
}

/// The state of the sequence rules (everything but chunk expansion).
#[derive(Default, Debug)]
struct Rules {
    /// Message owners; open text messages.
    messages: Entities,
    /// Tool call owners; open tool calls.
    tool_calls: Entities,
    /// Activity owners.
    activities: Entities,
    /// Reasoning owners; open reasoning spans and messages.
    reasoning: Entities,
    /// Open steps: (owner, name) -> order; owners in the order first seen.
    steps: HashMap<(Owner, String), u64>,
    step_owner_order: HashMap<Owner, u64>,
    step_seq: u64,
    subagents: OrderedSet,
    closed_subagents: HashMap<String, ()>,
    run_started: bool,
    run_finished: bool,
    run_error: bool,
    first_seen: bool,
    /// Keep going after an error (see [`verify_all`]).
    lenient: bool,
}

impl Verifier {
    /// A verifier at the start of a stream.
    pub fn new() -> Verifier {
        Verifier::default()
    }

    /// A verifier that keeps going after an error, as [`verify_all`] does
    /// (see the module docs for how a rejected event is treated).
    pub fn collecting() -> Verifier {
        Verifier {
            rules: Rules {
                lenient: true,
                ..Rules::default()
            },
            ..Verifier::default()
        }
    }

    /// How many input events were accepted so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Verifies one raw event (a chunk is expanded first, and every event it
    /// expands into is verified). Unknown event types are accepted without
    /// any check.
    pub fn push<'e>(&mut self, event: impl Into<EventRef<'e>>) -> Result<(), VerifyError> {
        let event = event.into();
        if !event.event_type().is_known() {
            self.count += 1;
            return Ok(());
        }
        // `expanded` is empty between pushes.
        let result = self.push_expanding(event);
        self.expanded.clear();
        result?;
        self.count += 1;
        Ok(())
    }

    /// Expands `event` into `self.expanded` and verifies each event it
    /// stands for.
    fn push_expanding(&mut self, event: EventRef<'_>) -> Result<(), VerifyError> {
        let ty = event.event_type();
        if matches!(
            ty,
            EventType::TextMessageChunk
                | EventType::ToolCallChunk
                | EventType::ReasoningMessageChunk
        ) {
            // A chunk stands for the events it expands into, never itself.
            self.expander.push_to(event, &mut self.expanded)?;
            return self.check_expanded();
        }
        // The view is read first: the expander's closing rules read its tag.
        let Read { view, tag } = View::read_tagged(event);
        let itself = self
            .expander
            .push_to_known(event, tag, &mut self.expanded)?;
        self.check_expanded()?;
        if itself {
            self.rules.check(ty, &view)?;
        }
        Ok(())
    }

    /// Verifies the events in `self.expanded`, in order.
    fn check_expanded(&mut self) -> Result<(), VerifyError> {
        for i in 0..self.expanded.len() {
            if let Some((ty, view)) = self.expanded.get(i) {
                self.rules.check(ty, &view)?;
            }
        }
        Ok(())
    }

    /// Verifies one event that is already chunk-expanded (a chunk event given
    /// here is checked only by the global rules, as upstream would).
    pub fn push_expanded<'e>(&mut self, event: impl Into<EventRef<'e>>) -> Result<(), VerifyError> {
        let event = event.into();
        let ty = event.event_type();
        if !ty.is_known() {
            return Ok(());
        }
        let view = View::read_tagged(event).view;
        self.rules.check(ty, &view)
    }
}

impl Rules {
    fn reset_run(&mut self) {
        self.messages.clear();
        self.tool_calls.clear();
        self.activities.clear();
        self.reasoning.clear();
        self.steps.clear();
        self.step_owner_order.clear();
        self.subagents.clear();
        self.closed_subagents.clear();
        self.run_finished = false;
        self.run_error = false;
        self.run_started = true;
    }

    fn check(&mut self, ty: &EventType, v: &View<'_>) -> Result<(), VerifyError> {
        let name = ty.as_str();
        let is_run_started = *ty == EventType::RunStarted;
        if self.run_error && !is_run_started {
            return Err(VerifyError::AfterRunError {
                event_type: name.to_owned(),
            });
        }
        if self.run_finished && *ty != EventType::RunError && !is_run_started {
            return Err(VerifyError::AfterRunFinished {
                event_type: name.to_owned(),
            });
        }
        if !self.first_seen {
            self.first_seen = true;
            if !is_run_started && *ty != EventType::RunError {
                return Err(VerifyError::FirstEventNotRunStarted);
            }
        } else if is_run_started {
            if self.run_started && !self.run_finished && !self.run_error {
                if self.lenient {
                    // The producer evidently started a new run.
                    self.reset_run();
                }
                return Err(VerifyError::RunStillActive);
            }
            if self.run_finished || self.run_error {
                self.reset_run();
            }
        }

        let sub = v.subagent_run_id();
        if sub.is_null() {
            return Err(VerifyError::NullSubagentRunId {
                event_type: name.to_owned(),
            });
        }
        let lifecycle = matches!(
            ty,
            EventType::SubagentStarted | EventType::SubagentFinished | EventType::SubagentError
        );
        if lifecycle {
            self.check_lifecycle_nulls(ty, v)?;
        }
        if *ty == EventType::RunFinished
            && let Some(outcome) = v.outcome()
        {
            check_interrupts(outcome)?;
        }

        let tag: Option<&str> = match &sub {
            Loose::Absent => None,
            Loose::Str(s) => Some(s),
            // A non-string tag on a lifecycle event is reported by its own
            // rule below; the run-level events have no such field (the
            // official client strips it) and no rule reads it; elsewhere it
            // is a malformed field.
            _ if lifecycle
                || matches!(
                    ty,
                    EventType::RunStarted
                        | EventType::RunFinished
                        | EventType::RunError
                        | EventType::MessagesSnapshot
                ) =>
            {
                None
            }
            _ => {
                return Err(VerifyError::BadField {
                    event_type: name.to_owned(),
                    field: "subagentRunId",
                });
            }
        };
        let field = |f: &Loose<'_>, field: &'static str| -> Result<String, VerifyError> {
            f.str().map(str::to_owned).ok_or(VerifyError::BadField {
                event_type: name.to_owned(),
                field,
            })
        };

        match ty {
            EventType::TextMessageStart => {
                let raw_id = v.message_id();
                let id = str_field(name, &raw_id, "messageId")?;
                let opened = self.messages.open(
                    OPEN,
                    id,
                    |owner| tag_agrees(name, tag, owner, "message", id),
                    || tag.map(str::to_owned),
                )?;
                if !opened {
                    return Err(VerifyError::AlreadyOpen {
                        kind: ItemKind::TextMessage,
                        id: id.to_owned(),
                    });
                }
            }
            EventType::TextMessageContent | EventType::TextMessageEnd => {
                let raw_id = v.message_id();
                let id = str_field(name, &raw_id, "messageId")?;
                let close = *ty == EventType::TextMessageEnd;
                let open = self.messages.carry_on(OPEN, id, close, |owner| {
                    tag_agrees(name, tag, owner, "message", id)
                })?;
                if !open {
                    return Err(VerifyError::NotOpen {
                        event_type: name.to_owned(),
                        kind: ItemKind::TextMessage,
                        id: id.to_owned(),
                    });
                }
            }
            EventType::ToolCallStart => {
                let raw_id = v.tool_call_id();
                let id = str_field(name, &raw_id, "toolCallId")?;
                let tools = &mut self.tool_calls;
                let existing = tools.items.get_mut(id);
                if existing.as_ref().is_some_and(|e| e.opened[OPEN] != 0) {
                    return Err(VerifyError::AlreadyOpen {
                        kind: ItemKind::ToolCall,
                        id: id.to_owned(),
                    });
                }
                let parent = v.parent_message_id();
                let parent = parent.str();
                let mut inherited: Option<&Owner> = None;
                if let Some(parent) = parent
                    && let Some(parent_owner) = self.messages.owner(parent)
                {
                    if let Some(t) = tag
                        && Some(t) != parent_owner.as_deref()
                    {
                        return Err(VerifyError::ToolParentMismatch {
                            tag: t.to_owned(),
                            parent: parent.to_owned(),
                            owner: parent_owner.clone(),
                        });
                    }
                    inherited = Some(parent_owner);
                }
                match existing {
                    Some(e) => {
                        tag_agrees(name, tag, &e.owner, "tool call", id)?;
                        if tag.is_none()
                            && let Some(inh) = inherited
                            && *inh != e.owner
                        {
                            return Err(VerifyError::ToolReopenMismatch {
                                id: id.to_owned(),
                                owner: e.owner.clone(),
                                parent: parent.unwrap_or_default().to_owned(),
                                parent_owner: inh.clone(),
                            });
                        }
                        tools.seq += 1;
                        e.opened[OPEN] = tools.seq;
                    }
                    None => {
                        let owner = match tag {
                            Some(t) => Some(t.to_owned()),
                            None => inherited.cloned().unwrap_or(None),
                        };
                        tools.seq += 1;
                        let mut opened = [0; 2];
                        opened[OPEN] = tools.seq;
                        tools.items.insert(id.to_owned(), Entity { owner, opened });
                    }
                }
                tools.open[OPEN] += 1;
            }
            EventType::ToolCallArgs | EventType::ToolCallEnd => {
                let raw_id = v.tool_call_id();
                let id = str_field(name, &raw_id, "toolCallId")?;
                let close = *ty == EventType::ToolCallEnd;
                let open = self.tool_calls.carry_on(OPEN, id, close, |owner| {
                    tag_agrees(name, tag, owner, "tool call", id)
                })?;
                if !open {
                    return Err(VerifyError::NotOpen {
                        event_type: name.to_owned(),
                        kind: ItemKind::ToolCall,
                        id: id.to_owned(),
                    });
                }
            }
            EventType::ToolCallResult => {
                if let Some(mid) = v.message_id().str() {
                    self.messages.set_owner(mid, tag.map(str::to_owned));
                }
            }
            EventType::StepStarted => {
                let step = field(&v.step_name(), "stepName")?;
                let owner: Owner = tag.map(str::to_owned);
                self.touch_step_owner(&owner);
                let key = (owner, step);
                if self.steps.contains_key(&key) {
                    return Err(VerifyError::StepAlreadyActive {
                        name: key.1,
                        owner: key.0,
                    });
                }
                self.step_seq += 1;
                self.steps.insert(key, self.step_seq);
            }
            EventType::StepFinished => {
                let step = field(&v.step_name(), "stepName")?;
                let owner: Owner = tag.map(str::to_owned);
                self.touch_step_owner(&owner);
                let key = (owner, step);
                if self.steps.remove(&key).is_none() {
                    let (owner, step) = key;
                    let other = self
                        .steps
                        .keys()
                        .filter(|(o, n)| *n == step && *o != owner)
                        .min_by_key(|(o, _)| self.step_owner_order.get(o).copied().unwrap_or(0))
                        .map(|(o, _)| o.clone());
                    return Err(match other {
                        Some(open_under) => VerifyError::StepOwnerMismatch {
                            name: step,
                            owner,
                            open_under,
                        },
                        None => VerifyError::StepNotStarted { name: step },
                    });
                }
            }
            EventType::ActivitySnapshot => {
                let raw_id = v.message_id();
                let id = str_field(name, &raw_id, "messageId")?;
                let is_new = !self.activities.contains_key(id);
                if is_new || !matches!(v.replace(), Loose::False) {
                    self.activities.set_owner(id, tag.map(str::to_owned));
                }
            }
            EventType::ActivityDelta => {
                let raw_id = v.message_id();
                let id = str_field(name, &raw_id, "messageId")?;
                if let Some(owner) = self.activities.owner(id) {
                    tag_agrees(name, tag, owner, "activity", id)?;
                }
            }
            EventType::ReasoningStart | EventType::ReasoningMessageStart => {
                let raw_id = v.message_id();
                let id = str_field(name, &raw_id, "messageId")?;
                let (set, kind) = match ty {
                    EventType::ReasoningStart => (OPEN, ItemKind::ReasoningSpan),
                    _ => (OPEN_MESSAGES, ItemKind::ReasoningMessage),
                };
                let opened = self.reasoning.open(
                    set,
                    id,
                    |owner| tag_agrees(name, tag, owner, "reasoning message", id),
                    || tag.map(str::to_owned),
                )?;
                if !opened {
                    return Err(VerifyError::AlreadyOpen {
                        kind,
                        id: id.to_owned(),
                    });
                }
            }
            EventType::ReasoningMessageContent
            | EventType::ReasoningMessageEnd
            | EventType::ReasoningEnd => {
                let raw_id = v.message_id();
                let id = str_field(name, &raw_id, "messageId")?;
                let (set, kind) = match ty {
                    EventType::ReasoningEnd => (OPEN, ItemKind::ReasoningSpan),
                    _ => (OPEN_MESSAGES, ItemKind::ReasoningMessage),
                };
                let close = *ty != EventType::ReasoningMessageContent;
                let open = self.reasoning.carry_on(set, id, close, |owner| {
                    tag_agrees(name, tag, owner, "reasoning message", id)
                })?;
                if !open {
                    return Err(VerifyError::NotOpen {
                        event_type: name.to_owned(),
                        kind,
                        id: id.to_owned(),
                    });
                }
            }
            EventType::ReasoningEncryptedValue => {
                let raw_id = v.entity_id();
                let id = str_field(name, &raw_id, "entityId")?;
                let (owner, label) = match v.subtype().str() {
                    Some("tool-call") => (self.tool_calls.owner(id), "tool call"),
                    Some("message") => (
                        self.messages.owner(id).or_else(|| self.reasoning.owner(id)),
                        "message",
                    ),
                    _ => (self.reasoning.owner(id), "reasoning message"),
                };
                if let Some(owner) = owner {
                    tag_agrees(name, tag, owner, label, id)?;
                }
            }
            EventType::SubagentStarted => {
                let Some(id) = sub.str() else {
                    return Err(VerifyError::SubagentWithoutId {
                        event_type: name.to_owned(),
                    });
                };
                if v.name().str().is_none() {
                    return Err(VerifyError::SubagentWithoutName);
                }
                if self.subagents.contains(id) {
                    return Err(VerifyError::SubagentAlreadyActive { id: id.to_owned() });
                }
                if self.closed_subagents.contains_key(id) {
                    return Err(VerifyError::SubagentReused { id: id.to_owned() });
                }
                match &v.parent_subagent_run_id() {
                    Loose::Absent => {}
                    Loose::Str(p)
                        if self.subagents.contains(p)
                            || self.closed_subagents.contains_key(&**p) => {}
                    other => {
                        return Err(VerifyError::SubagentUnknownParent {
                            parent: match other {
                                Loose::Str(p) => p.to_string(),
                                _ => "(not a string)".to_owned(),
                            },
                        });
                    }
                }
                self.subagents.insert(id);
            }
            EventType::SubagentFinished | EventType::SubagentError => {
                let Some(id) = sub.str() else {
                    return Err(VerifyError::SubagentWithoutId {
                        event_type: name.to_owned(),
                    });
                };
                if *ty == EventType::SubagentError && v.message().str().is_none() {
                    return Err(VerifyError::SubagentErrorWithoutMessage);
                }
                if !self.subagents.remove(id) {
                    return Err(VerifyError::SubagentNotActive {
                        event_type: name.to_owned(),
                        id: id.to_owned(),
                    });
                }
                self.closed_subagents.insert(id.to_owned(), ());
            }
            EventType::MessagesSnapshot => {
                if let Some(messages) = v.messages() {
                    self.seed(messages, true)?;
                }
            }
            EventType::RunStarted => {
                self.run_started = true;
                if let Some(input) = v.input()
                    && let Ok(InputView {
                        messages: Some(messages),
                    }) = serde_json::from_str::<InputView<'_>>(input.get())
                {
                    self.seed(messages, false)?;
                }
            }
            EventType::RunFinished => {
                if let Some(err) = self.open_at_finish() {
                    if self.lenient {
                        self.run_finished = true;
                    }
                    return Err(err);
                }
                self.run_finished = true;
            }
            EventType::RunError => {
                self.run_error = true;
            }
            _ => {}
        }
        Ok(())
    }

    fn touch_step_owner(&mut self, owner: &Owner) {
        if !self.step_owner_order.contains_key(owner) {
            self.step_seq += 1;
            self.step_owner_order.insert(owner.clone(), self.step_seq);
        }
    }

    fn check_lifecycle_nulls(&self, ty: &EventType, v: &View<'_>) -> Result<(), VerifyError> {
        let name = ty.as_str();
        let outcome_null = v.outcome().is_some_and(|o| o.get() == "null");
        let optionals: &[(&'static str, bool)] = match ty {
            EventType::SubagentStarted => &[
                ("description", v.description().is_null()),
                ("parentSubagentRunId", v.parent_subagent_run_id().is_null()),
                ("parentToolCallId", v.parent_tool_call_id().is_null()),
                ("parentMessageId", v.parent_message_id().is_null()),
            ],
            EventType::SubagentFinished => &[("outcome", outcome_null)],
            _ => &[("code", v.code().is_null())],
        };
        for (field, is_null) in optionals {
            if *is_null {
                return Err(VerifyError::NullLifecycleField {
                    event_type: name.to_owned(),
                    field,
                });
            }
        }
        let Some(outcome) = v.outcome() else {
            return Ok(());
        };
        if outcome_null {
            return Ok(());
        }
        let value: serde_json::Value = serde_json::from_str(outcome.get()).unwrap_or_default();
        let ty_field = value.get("type");
        let ok = matches!(ty_field, Some(serde_json::Value::String(s)) if s == "success" || s == "suspended");
        if !ok {
            return Err(VerifyError::BadSubagentOutcome {
                event_type: name.to_owned(),
                found: js_string(ty_field),
            });
        }
        match value.get("interruptIds") {
            Some(serde_json::Value::Null) => Err(VerifyError::NullInterruptIds {
                event_type: name.to_owned(),
            }),
            Some(serde_json::Value::Array(ids)) if ids.iter().any(|i| !i.is_string()) => {
                Err(VerifyError::NonStringInterruptId {
                    event_type: name.to_owned(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Seeds owners from replayed messages (upstream's `seedOwnersFromMessages`).
    fn seed(&mut self, messages: &RawValue, authoritative: bool) -> Result<(), VerifyError> {
        let Ok(list) = serde_json::from_str::<Vec<&RawValue>>(messages.get()) else {
            return Ok(()); // not an array: nothing to seed
        };
        for raw in list {
            let Ok(m) = serde_json::from_str::<MessageView<'_>>(raw.get()) else {
                continue; // not an object
            };
            let Some(id) = m.id.str() else { continue };
            if m.subagent_run_id.is_null() {
                return Err(VerifyError::NullMessageSubagent {
                    message_id: id.to_owned(),
                });
            }
            let owner: Owner = m.subagent_run_id.str().map(str::to_owned);
            let bucket = match m.role.str() {
                Some("reasoning") => &mut self.reasoning,
                Some("activity") => &mut self.activities,
                _ => &mut self.messages,
            };
            if authoritative || !bucket.contains_key(id) {
                bucket.set_owner(id, owner.clone());
            }
            if let Some(calls) = m.tool_calls
                && let Ok(calls) = serde_json::from_str::<Vec<&RawValue>>(calls.get())
            {
                for call in calls {
                    if let Ok(IdView {
                        id: Loose::Str(cid),
                    }) = serde_json::from_str::<IdView<'_>>(call.get())
                        && (authoritative || !self.tool_calls.contains_key(&cid))
                    {
                        self.tool_calls.set_owner(&cid, owner.clone());
                    }
                }
            }
        }
        Ok(())
    }

    fn open_at_finish(&self) -> Option<VerifyError> {
        if !self.steps.is_empty() {
            let mut open: Vec<(&(Owner, String), &u64)> = self.steps.iter().collect();
            open.sort_by_key(|((o, _), seq)| {
                (self.step_owner_order.get(o).copied().unwrap_or(0), **seq)
            });
            let open = open
                .into_iter()
                .map(|((o, n), _)| match o {
                    Some(o) => format!("{n} (subagent '{o}')"),
                    None => n.clone(),
                })
                .collect();
            return Some(VerifyError::OpenAtRunFinished {
                what: "steps",
                open,
            });
        }
        for (what, items, set) in [
            ("text messages", &self.messages, OPEN),
            ("reasoning messages", &self.reasoning, OPEN_MESSAGES),
            ("reasoning spans", &self.reasoning, OPEN),
            ("tool calls", &self.tool_calls, OPEN),
        ] {
            if items.any_open(set) {
                return Some(VerifyError::OpenAtRunFinished {
                    what,
                    open: items.open_in_order(set),
                });
            }
        }
        if !self.subagents.is_empty() {
            return Some(VerifyError::OpenAtRunFinished {
                what: "subagents",
                open: self.subagents.in_order(),
            });
        }
        None
    }
}

/// `RUN_FINISHED.outcome.interrupts[*].subagentRunId` must not be `null`.
fn check_interrupts(outcome: &RawValue) -> Result<(), VerifyError> {
    // Cheap pre-check: most outcomes are not interrupts.
    if !outcome.get().contains("interrupt") {
        return Ok(());
    }
    let value: serde_json::Value = serde_json::from_str(outcome.get()).unwrap_or_default();
    if value.get("type").and_then(|t| t.as_str()) != Some("interrupt") {
        return Ok(());
    }
    if let Some(serde_json::Value::Array(list)) = value.get("interrupts") {
        for i in list {
            if let Some(serde_json::Value::Null) = i.get("subagentRunId") {
                return Err(VerifyError::NullInterruptSubagent {
                    interrupt_id: js_string(i.get("id")),
                });
            }
        }
    }
    Ok(())
}

/// `String(x)` for a JSON value, roughly as JavaScript prints it.
fn js_string(v: Option<&serde_json::Value>) -> String {
    match v {
        None => "undefined".to_owned(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Object(_)) => "[object Object]".to_owned(),
        Some(other) => other.to_string(),
    }
}

/// A string field of an event, borrowed; `BadField` when it is anything else.
fn str_field<'v>(
    event_type: &str,
    value: &'v Loose<'_>,
    field: &'static str,
) -> Result<&'v str, VerifyError> {
    value.str().ok_or_else(|| VerifyError::BadField {
        event_type: event_type.to_owned(),
        field,
    })
}

/// An absent tag always agrees; a present one must equal the owner.
fn tag_agrees(
    event_type: &str,
    tag: Option<&str>,
    owner: &Owner,
    entity: &'static str,
    id: &str,
) -> Result<(), VerifyError> {
    match tag {
        Some(t) if Some(t) != owner.as_deref() => Err(VerifyError::OwnerMismatch {
            event_type: event_type.to_owned(),
            tag: t.to_owned(),
            entity,
            id: id.to_owned(),
            owner: owner.clone(),
        }),
        _ => Ok(()),
    }
}

/// Verifies a whole stream of raw events. Returns how many events were
/// checked, or the index (from 0) of the first bad event and why.
pub fn verify_events<I>(events: I) -> Result<usize, (usize, VerifyError)>
where
    I: IntoIterator,
    I::Item: Borrow<Event>,
{
    let mut v = Verifier::new();
    let mut n = 0;
    for (i, e) in events.into_iter().enumerate() {
        v.push(e.borrow()).map_err(|err| (i, err))?;
        n = i + 1;
    }
    Ok(n)
}

/// Verifies a whole stream and lists every problem found, in order (empty
/// when the stream is valid). See the module docs for how it continues
/// after an error.
pub fn verify_all<I>(events: I) -> Vec<Diagnostic>
where
    I: IntoIterator,
    I::Item: Borrow<Event>,
{
    let mut v = Verifier::collecting();
    let mut out = Vec::new();
    for (i, e) in events.into_iter().enumerate() {
        let e = e.borrow();
        if let Err(error) = v.push(e) {
            out.push(Diagnostic {
                index: i,
                event_type: e.type_name().to_owned(),
                error,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field name, as `DerivedView` (the JSON library) names it.
    const NAMES: [&str; FIELDS] = [
        "subagentRunId",
        "messageId",
        "toolCallId",
        "parentMessageId",
        "stepName",
        "entityId",
        "subtype",
        "replace",
        "name",
        "message",
        "description",
        "parentSubagentRunId",
        "parentToolCallId",
        "code",
        "outcome",
        "messages",
        "input",
    ];

    #[test]
    fn field_of_finds_each_name_and_nothing_else() {
        let reference = |k: &[u8]| {
            NAMES
                .iter()
                .position(|n| n.as_bytes() == k)
                .map(|i| i as u32)
        };
        for (field, name) in NAMES.iter().enumerate() {
            assert_eq!(field_of(name.as_bytes()), Some(field as u32), "{name}");
            // The same length with any one byte changed, a byte more, a
            // byte less, a trailing NUL: what the plain comparison says.
            let b = name.as_bytes();
            let mut keys = vec![
                b[..b.len() - 1].to_vec(),
                [b, b"x"].concat(),
                [b, &[0u8][..]].concat(),
            ];
            for i in 0..b.len() {
                for flip in [1u8, 0x20, 0x80] {
                    let mut k = b.to_vec();
                    k[i] ^= flip;
                    keys.push(k);
                }
            }
            for k in keys {
                assert_eq!(
                    field_of(&k),
                    reference(&k),
                    "{:?}",
                    String::from_utf8_lossy(&k)
                );
            }
        }
        for other in [
            "",
            "type",
            "timestamp",
            "delta",
            "role",
            "rawEvent",
            "metadata",
            "runId",
        ] {
            assert_eq!(field_of(other.as_bytes()), None, "{other}");
        }
        // A NUL-padded key of a shorter length never matches a longer name.
        assert_eq!(field_of(b"nam\0"), None);
        assert_eq!(field_of(&[0u8; 16]), None);
        assert_eq!(field_of(&[0u8; 19]), None);
    }

    /// The reader the views were first written as (every field decoded by
    /// the JSON library as the rules read it): the reference the views are
    /// tested against. Its fields are read only through `Debug`.
    #[allow(dead_code)]
    #[derive(Deserialize, Default, Debug)]
    #[serde(rename_all = "camelCase")]
    struct LooseView<'a> {
        #[serde(default, borrow)]
        subagent_run_id: Loose<'a>,
        #[serde(default, borrow)]
        message_id: Loose<'a>,
        #[serde(default, borrow)]
        tool_call_id: Loose<'a>,
        #[serde(default, borrow)]
        parent_message_id: Loose<'a>,
        #[serde(default, borrow)]
        step_name: Loose<'a>,
        #[serde(default, borrow)]
        entity_id: Loose<'a>,
        #[serde(default, borrow)]
        subtype: Loose<'a>,
        #[serde(default, borrow)]
        replace: Loose<'a>,
        #[serde(default, borrow)]
        name: Loose<'a>,
        #[serde(default, borrow)]
        message: Loose<'a>,
        #[serde(default, borrow)]
        description: Loose<'a>,
        #[serde(default, borrow)]
        parent_subagent_run_id: Loose<'a>,
        #[serde(default, borrow)]
        parent_tool_call_id: Loose<'a>,
        #[serde(default, borrow)]
        code: Loose<'a>,
        #[serde(default, borrow, deserialize_with = "raw")]
        outcome: Option<&'a RawValue>,
        #[serde(default, borrow, deserialize_with = "raw")]
        messages: Option<&'a RawValue>,
        #[serde(default, borrow, deserialize_with = "raw")]
        input: Option<&'a RawValue>,
    }

    /// `v` as the reference reader shows it.
    fn shown(v: &View<'_>) -> String {
        format!(
            "{:?}",
            LooseView {
                subagent_run_id: v.subagent_run_id(),
                message_id: v.message_id(),
                tool_call_id: v.tool_call_id(),
                parent_message_id: v.parent_message_id(),
                step_name: v.step_name(),
                entity_id: v.entity_id(),
                subtype: v.subtype(),
                replace: v.replace(),
                name: v.name(),
                message: v.message(),
                description: v.description(),
                parent_subagent_run_id: v.parent_subagent_run_id(),
                parent_tool_call_id: v.parent_tool_call_id(),
                code: v.code(),
                outcome: v.outcome(),
                messages: v.messages(),
                input: v.input(),
            }
        )
    }

    /// The reference reader's view of `text`, shown.
    fn derived(text: &str) -> String {
        let view: LooseView<'_> = serde_json::from_str(text).unwrap_or_default();
        format!("{view:?}")
    }

    /// The escape check finds a backslash wherever it stands, on either side
    /// of the sixteen- and eight-byte steps of the string skip.
    #[test]
    fn an_escape_is_found_at_every_position_of_strings_of_every_length() {
        for len in 0..48 {
            let plain = format!("\"{}\"", "a".repeat(len));
            assert!(!has_escape(&plain), "{plain}");
            for at in 0..len {
                let mut body = "a".repeat(len).into_bytes();
                body[at] = b'\\';
                let body = String::from_utf8(body).unwrap();
                // `\\` keeps the string valid JSON; the check reads bytes.
                let raw = format!("\"{}\\\\{}\"", &body[..at], &body[at + 1..]);
                assert!(has_escape(&raw), "{raw}");
                assert!(
                    matches!(Loose::of(&raw), Loose::Str(Cow::Owned(_))),
                    "{raw}"
                );
            }
        }
        assert!(matches!(Loose::of("\"\""), Loose::Str(Cow::Borrowed(""))));
        assert!(matches!(Loose::of("\"é\\u00e9\""), Loose::Str(s) if s == "éé"));
    }

    /// Each key the rules read fills its own field, whatever else the event
    /// holds, from a member table and from a walk over the text alike.
    #[test]
    fn every_read_key_fills_its_field_from_a_table_and_from_the_text() {
        let json = r#"{"type":"CUSTOM","subagentRunId":"a","messageId":"b","toolCallId":"c","parentMessageId":"d","stepName":"e","entityId":"f","subtype":"g","replace":false,"name":"i","message":"j","description":"k","parentSubagentRunId":"l","parentToolCallId":"m","code":"n","outcome":{"o":1},"messages":[2],"input":{"p":3},"delta":"x","timestamp":1,"metadata":{}}"#;
        let ty = EventType::Custom;
        let mut table = Vec::new();
        Event::check_recording(json, &mut table).unwrap();
        for event in [
            EventRef::from_checked_members(json, &ty, &table),
            EventRef::from_checked(json, &ty),
        ] {
            let v = View::read(event);
            let strs = [
                v.subagent_run_id(),
                v.message_id(),
                v.tool_call_id(),
                v.parent_message_id(),
                v.step_name(),
                v.entity_id(),
                v.subtype(),
                v.name(),
                v.message(),
                v.description(),
                v.parent_subagent_run_id(),
                v.parent_tool_call_id(),
                v.code(),
            ]
            .map(|l| l.str().map(str::to_owned));
            let want = [
                "a", "b", "c", "d", "e", "f", "g", "i", "j", "k", "l", "m", "n",
            ]
            .map(|s| Some(s.to_owned()));
            assert_eq!(strs, want);
            assert!(matches!(v.replace(), Loose::False));
            assert_eq!(v.outcome().map(RawValue::get), Some(r#"{"o":1}"#));
            assert_eq!(v.messages().map(RawValue::get), Some("[2]"));
            assert_eq!(v.input().map(RawValue::get), Some(r#"{"p":3}"#));
        }
        // A field given twice empties the view, as the derived reader does.
        let twice = r#"{"type":"CUSTOM","messageId":"b","messageId":"c"}"#;
        let mut table = Vec::new();
        Event::check_recording(twice, &mut table).unwrap();
        let v = View::read(EventRef::from_checked_members(twice, &ty, &table));
        assert!(matches!(v.message_id(), Loose::Absent));
    }

    /// The text of every event of the generator's profiles, seeds
    /// `0..seeds`.
    fn profile_texts(seeds: u64) -> Vec<String> {
        let mut texts = Vec::new();
        for &profile in agui_testkit::Profile::ALL {
            for seed in 0..seeds {
                texts.extend(
                    agui_testkit::stream(profile, seed)
                        .iter()
                        .map(|e| e.json().to_owned()),
                );
            }
        }
        texts
    }

    /// The one-pass view reads what the derived reader reads, on every
    /// event of the generated profiles and on spellings the scanner defers.
    #[test]
    fn the_scanned_view_equals_the_derived_one() {
        let mut texts = profile_texts(4);
        texts.extend(
            [
                r#"{"type":"TEXT_MESSAGE_START","messageId":"m\u00e9","name":null,"code":false,"replace":true}"#,
                r#"{"type":"TEXT_MESSAGE_START","messageId":"a","messageId":"b"}"#,
                r#"{"type":"TEXT_MESSAGE_START","message\u0049d":"a"}"#,
                r#"{"type":"RUN_FINISHED","outcome":{"type":"success"},"input":[1],"messages":null}"#,
                r#"{"type":"STEP_STARTED","stepName":"s\"q","entityId":{"a":[1]},"subtype":7}"#,
            ]
            .map(str::to_owned),
        );
        let mut recorded = 0;
        for text in &texts {
            let event = Event::from_json(text).unwrap();
            let derived = derived(text);
            assert_eq!(shown(&View::read(event.as_event_ref())), derived, "{text}");
            // The same view from the member table the envelope scan records.
            let mut members = Vec::new();
            Event::check_recording(event.json(), &mut members).unwrap();
            recorded += usize::from(!members.is_empty());
            let from_table =
                EventRef::from_checked_members(event.json(), event.event_type(), &members);
            assert_eq!(shown(&View::read(from_table)), derived, "{text}");
        }
        assert!(recorded > 1000, "{recorded}");
        assert!(texts.len() > 1000, "{}", texts.len());
    }

    /// The tag a view's walk finds reads as the chunk expander's own read
    /// of it, on every event of the generated profiles and on tags written
    /// every way (repeated, `null`, escaped, not strings, escaped keys).
    #[test]
    fn the_tag_found_by_the_view_is_the_one_the_expander_reads() {
        let mut texts = profile_texts(2);
        for tag in [
            r#""sa""#,
            r#""s\u0061""#,
            "null",
            "7",
            "{}",
            r#""a","subagentRunId":"b""#,
            r#""a","subagentRunId":null"#,
            r#""a","subagent\u0052unId":"b""#,
        ] {
            for ty in ["TEXT_MESSAGE_CONTENT", "SUBAGENT_FINISHED", "CUSTOM"] {
                texts.push(format!(
                    r#"{{"type":"{ty}","messageId":"m","subagentRunId":{tag},"delta":"x"}}"#
                ));
            }
        }
        let (mut read, mut unread) = (0, 0);
        for text in &texts {
            let event = Event::from_json(text).unwrap();
            let mut members = Vec::new();
            Event::check_recording(event.json(), &mut members).unwrap();
            for event in [
                event.as_event_ref(),
                EventRef::from_checked_members(event.json(), event.event_type(), &members),
            ] {
                let tag = View::read_tagged(event).tag;
                match tag {
                    KnownTag::Read { .. } => read += 1,
                    KnownTag::Unread => unread += 1,
                }
                assert!(chunks::known_tag_agrees(event, tag), "{text}");
            }
        }
        assert!(read > 1000 && unread >= 6, "{read} {unread}");
    }

    /// Expands `stream` twice, rendering the events and handing them to the
    /// verifier's [`Expanded`], and checks that each synthesized event reads
    /// the same both ways (and as the derived reader reads its text).
    /// Returns how many events were compared.
    fn expanded_agrees_with_rendered(stream: &[String]) -> usize {
        let mut rendering = ChunkExpander::new();
        let mut reading = ChunkExpander::new();
        let mut expanded = Expanded::default();
        let mut compared = 0;
        for text in stream {
            let event = Event::from_json(text).expect("test event");
            let mut rendered = Vec::new();
            let a = rendering.push_into(&event, &mut rendered);
            expanded.clear();
            let b = reading.push_to(event.as_event_ref(), &mut expanded);
            assert_eq!(a, b, "{text}");
            if a.is_err() {
                // The stream is over (the expanders' states are unspecified).
                break;
            }
            assert_eq!(rendered.len(), expanded.len(), "{text}");
            for (i, e) in rendered.iter().enumerate() {
                let (ty, view) = expanded.get(i).expect("each event is there");
                assert_eq!(ty, e.event_type(), "{e}");
                let read = shown(&view);
                assert_eq!(read, shown(&View::read(e.as_event_ref())), "{e}");
                assert_eq!(read, derived(e.json()), "{e}");
                compared += 1;
            }
        }
        compared
    }

    /// The verifier reads a chunk's expansion without rendering it, and
    /// reads what it would read from the rendered events: every chunk kind,
    /// lanes, metadata, raw events, unknown properties (with keys the rules
    /// read, and escaped ones), escaped ids, and each kind of close.
    #[test]
    fn expanded_events_read_as_the_rendered_ones() {
        let mut compared = 0;
        for seed in 0..1000 {
            let stream: Vec<String> = agui_testkit::chunk_soup(seed)
                .iter()
                .map(|e| e.json().to_owned())
                .collect();
            compared += expanded_agrees_with_rendered(&stream);
        }
        let stream = [
            RS,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m\"\u00e9","delta":"a","metadata":{"k":1},"subagentRunId":"s\u0031"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","delta":"b","rawEvent":{"p":1},"stepName":"x","outcome":null}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","subagentRunId":"s1","toolCallId":"t","parentMessageId":7}"#,
            r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"f","parentMessageId":"p","message\u0049d":"q","k\"ey":1}"#,
            r#"{"type":"TOOL_CALL_CHUNK","delta":"{}","subagentRunId":null,"messages":[1],"input":{"a":2}}"#,
            r#"{"type":"REASONING_MESSAGE_CHUNK","messageId":"r","role":"x","code":null,"subagent\u0052unId":"z"}"#,
            r#"{"type":"REASONING_MESSAGE_CHUNK","messageId":"r","metadata":{}}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"o","subagentRunId":"s2","replace":false,"entityId":"e"}"#,
            r#"{"type":"CUSTOM","name":"c","value":1}"#,
            r#"{"type":"SUBAGENT_FINISHED","subagentRunId":"s2"}"#,
            r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"d","toolCallName":"g","subagentRunId":"s1","description":"d","name":"n"}"#,
            RF,
        ]
        .map(str::to_owned);
        let of_the_stream = expanded_agrees_with_rendered(&stream);
        assert!(of_the_stream >= 14, "{of_the_stream}");
        compared += of_the_stream;
        assert!(compared > 2000, "{compared}");
    }

    /// Chunk texts, mostly ones that expand: every chunk kind, an id from
    /// a small pool (or none), a tag (absent, `null` or one of two lanes),
    /// and more members with keys the expansion and the rules read (escaped
    /// too) or unknown ones, with values of every kind; and events that
    /// close lanes or not.
    fn chunk_text() -> proptest::strategy::BoxedStrategy<String> {
        use proptest::prelude::*;
        let keys = [
            "delta",
            "metadata",
            "rawEvent",
            "timestamp",
            "role",
            "name",
            "parentMessageId",
            "stepName",
            "outcome",
            "message\\u0049d",
            "subagent\\u0052unId",
            "k\\\"ey",
        ];
        let values = [
            "\"a\"",
            "\"s1\"",
            "\"assistant\"",
            "null",
            "\"\"",
            "\"m\\u00e9\"",
            "\"x\\\"y\"",
            "12.50",
            "false",
            "{\"subagentRunId\":\"inner\",\"a\":[1]}",
        ];
        let kind = proptest::sample::select(vec![
            ("TEXT_MESSAGE_CHUNK", "messageId", ""),
            ("TOOL_CALL_CHUNK", "toolCallId", r#","toolCallName":"f""#),
            ("REASONING_MESSAGE_CHUNK", "messageId", ""),
        ]);
        let id = proptest::option::weighted(
            0.7,
            proptest::sample::select(vec!["a", "b", "c\\\"\\u00e9"]),
        );
        let tag = proptest::sample::select(vec![
            "",
            "",
            r#","subagentRunId":null"#,
            r#","subagentRunId":"s1""#,
            r#","subagentRunId":"s2""#,
        ]);
        let rest = agui_testkit::texts::object_text("X", &keys, &values, 2, 4);
        let chunk = (kind, id, tag, rest).prop_map(|((ty, id_key, name), id, tag, rest)| {
            let id = id
                .map(|id| format!(r#","{id_key}":"{id}""#))
                .unwrap_or_default();
            let rest = rest.strip_prefix(r#"{"type":"X""#).unwrap_or("}");
            format!(r#"{{"type":"{ty}"{id}{name}{tag}{rest}"#)
        });
        let closers = proptest::sample::select(vec![
            RF.to_owned(),
            r#"{"type":"CUSTOM","name":"c","value":1}"#.to_owned(),
            r#"{"type":"STEP_STARTED","stepName":"s","subagentRunId":"s1"}"#.to_owned(),
            r#"{"type":"SUBAGENT_FINISHED","subagentRunId":"s2"}"#.to_owned(),
            r#"{"type":"RAW","event":{}}"#.to_owned(),
        ]);
        prop_oneof![4 => chunk, 1 => closers].boxed()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// [`expanded_events_read_as_the_rendered_ones`] on generated streams.
        #[test]
        fn generated_expansions_read_as_the_rendered_ones(
            stream in proptest::collection::vec(chunk_text(), 1..12)
        ) {
            expanded_agrees_with_rendered(&stream);
        }
    }

    /// Parses a compact test notation: one JSON event per line.
    fn events(text: &str) -> Vec<Event> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| Event::from_json(l).expect("test event"))
            .collect()
    }

    fn check(text: &str) -> Result<usize, (usize, VerifyError)> {
        verify_events(events(text))
    }

    fn err_at(text: &str) -> (usize, VerifyError) {
        check(text).expect_err("the stream should be rejected")
    }

    const RS: &str = r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#;
    const RF: &str = r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r"}"#;
    const RE: &str = r#"{"type":"RUN_ERROR","message":"boom"}"#;

    fn s(parts: &[&str]) -> String {
        parts.join("\n")
    }

    #[test]
    fn the_first_event_must_start_a_run_or_error_it() {
        let (i, e) = err_at(r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#);
        assert_eq!((i, e), (0, VerifyError::FirstEventNotRunStarted));
        assert_eq!(check(&s(&[RE, RS, RF])), Ok(3));
        assert_eq!(check(""), Ok(0));
    }

    #[test]
    fn run_lifecycle() {
        assert_eq!(err_at(&s(&[RS, RS])), (1, VerifyError::RunStillActive));
        let (i, e) = err_at(&s(&[RS, RF, r#"{"type":"CUSTOM","name":"x","value":1}"#]));
        assert_eq!(i, 2);
        assert!(matches!(e, VerifyError::AfterRunFinished { .. }));
        // RUN_ERROR is allowed after RUN_FINISHED, then nothing but a new run.
        assert_eq!(check(&s(&[RS, RF, RE, RS, RF])), Ok(5));
        let (i, e) = err_at(&s(&[RS, RE, r#"{"type":"STEP_STARTED","stepName":"s"}"#]));
        assert_eq!(i, 2);
        assert_eq!(
            e.to_string(),
            "Cannot send event type 'STEP_STARTED': The run has already errored with 'RUN_ERROR'. No further events can be sent."
        );
        assert!(matches!(
            err_at(&s(&[RS, RE, RE])).1,
            VerifyError::AfterRunError { .. }
        ));
        // Message ids may be reused by a later run; an errored run may leave items open.
        let m = r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#;
        let me = r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#;
        assert_eq!(check(&s(&[RS, m, RE, RS, m, me, RF])), Ok(7));
    }

    #[test]
    fn unknown_types_are_ignored_entirely() {
        let x = r#"{"type":"VENDOR_PING","n":1}"#;
        assert_eq!(check(&s(&[x, RS, RF, x, RS, RF])), Ok(6));
    }

    #[test]
    fn text_messages_pair_by_id() {
        let start = r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#;
        let content = r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}"#;
        let end = r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#;
        assert_eq!(check(&s(&[RS, start, content, end, RF])), Ok(5));
        let (i, e) = err_at(&s(&[RS, content]));
        assert_eq!(i, 1);
        assert_eq!(
            e.to_string(),
            "Cannot send 'TEXT_MESSAGE_CONTENT' event: No active text message found with ID 'm'. Start a text message with 'TEXT_MESSAGE_START' first."
        );
        assert_eq!(
            err_at(&s(&[RS, end])).1.to_string(),
            "Cannot send 'TEXT_MESSAGE_END' event: No active text message found with ID 'm'. A 'TEXT_MESSAGE_START' event must be sent first."
        );
        assert_eq!(
            err_at(&s(&[RS, start, start])),
            (
                2,
                VerifyError::AlreadyOpen {
                    kind: ItemKind::TextMessage,
                    id: "m".into()
                }
            )
        );
        let (i, e) = err_at(&s(&[RS, start, RF]));
        assert_eq!(i, 2);
        assert_eq!(
            e.to_string(),
            "Cannot send 'RUN_FINISHED' while text messages are still active: m"
        );
    }

    #[test]
    fn tool_calls_pair_by_id_and_nest_in_messages() {
        let stream = s(&[
            RS,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#,
            r#"{"type":"TOOL_CALL_START","toolCallId":"a","toolCallName":"f","parentMessageId":"m"}"#,
            r#"{"type":"TOOL_CALL_START","toolCallId":"b","toolCallName":"f"}"#,
            r#"{"type":"TOOL_CALL_ARGS","toolCallId":"b","delta":"{}"}"#,
            r#"{"type":"STATE_SNAPSHOT","snapshot":{}}"#,
            r#"{"type":"TOOL_CALL_END","toolCallId":"b"}"#,
            r#"{"type":"TOOL_CALL_END","toolCallId":"a"}"#,
            r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#,
            RF,
        ]);
        assert_eq!(check(&stream), Ok(10));
        let (i, e) = err_at(&s(&[
            RS,
            r#"{"type":"TOOL_CALL_ARGS","toolCallId":"z","delta":""}"#,
        ]));
        assert_eq!(i, 1);
        assert!(matches!(
            e,
            VerifyError::NotOpen {
                kind: ItemKind::ToolCall,
                ..
            }
        ));
        let open = r#"{"type":"TOOL_CALL_START","toolCallId":"a","toolCallName":"f"}"#;
        assert!(matches!(
            err_at(&s(&[RS, open, open])).1,
            VerifyError::AlreadyOpen { .. }
        ));
        assert_eq!(
            err_at(&s(&[RS, open, RF])).1.to_string(),
            "Cannot send 'RUN_FINISHED' while tool calls are still active: a"
        );
    }

    #[test]
    fn reasoning_spans_and_messages_are_tracked_separately() {
        let ok = s(&[
            RS,
            r#"{"type":"REASONING_START","messageId":"r"}"#,
            r#"{"type":"REASONING_MESSAGE_START","messageId":"r","role":"reasoning"}"#,
            r#"{"type":"REASONING_MESSAGE_CONTENT","messageId":"r","delta":"x"}"#,
            r#"{"type":"REASONING_MESSAGE_END","messageId":"r"}"#,
            r#"{"type":"REASONING_END","messageId":"r"}"#,
            RF,
        ]);
        assert_eq!(check(&ok), Ok(7));
        let (_, e) = err_at(&s(&[RS, r#"{"type":"REASONING_END","messageId":"r"}"#]));
        assert_eq!(
            e.to_string(),
            "Cannot send 'REASONING_END' event: No active reasoning span found with ID 'r'. A 'REASONING_START' event must be sent first."
        );
        let (i, e) = err_at(&s(&[
            RS,
            r#"{"type":"REASONING_START","messageId":"r"}"#,
            r#"{"type":"REASONING_MESSAGE_START","messageId":"q","role":"reasoning"}"#,
            RF,
        ]));
        assert_eq!(i, 3);
        assert_eq!(
            e.to_string(),
            "Cannot send 'RUN_FINISHED' while reasoning messages are still active: q"
        );
    }

    #[test]
    fn steps_are_keyed_by_owner_and_name() {
        let ok = s(&[
            RS,
            r#"{"type":"STEP_STARTED","stepName":"tools"}"#,
            r#"{"type":"STEP_STARTED","stepName":"tools","subagentRunId":"s1"}"#,
            r#"{"type":"STEP_FINISHED","stepName":"tools","subagentRunId":"s1"}"#,
            r#"{"type":"STEP_FINISHED","stepName":"tools"}"#,
            RF,
        ]);
        assert_eq!(check(&ok), Ok(6));
        let (_, e) = err_at(&s(&[
            RS,
            r#"{"type":"STEP_STARTED","stepName":"tools"}"#,
            r#"{"type":"STEP_FINISHED","stepName":"tools","subagentRunId":"s1"}"#,
        ]));
        assert_eq!(
            e.to_string(),
            "Cannot send 'STEP_FINISHED' for step \"tools\" attributed to subagent 's1': that step is open under the parent agent. A step must be finished by whoever started it."
        );
        assert_eq!(
            err_at(&s(&[RS, r#"{"type":"STEP_FINISHED","stepName":"x"}"#])).1,
            VerifyError::StepNotStarted { name: "x".into() }
        );
        let dup = r#"{"type":"STEP_STARTED","stepName":"x","subagentRunId":"s"}"#;
        assert_eq!(
            err_at(&s(&[RS, dup, dup])).1.to_string(),
            "Step \"x\" is already active for 'STEP_STARTED' in subagent 's'"
        );
        let (_, e) = err_at(&s(&[
            RS,
            r#"{"type":"STEP_STARTED","stepName":"a","subagentRunId":"s"}"#,
            r#"{"type":"STEP_STARTED","stepName":"b"}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#,
            RF,
        ]));
        assert_eq!(
            e.to_string(),
            "Cannot send 'RUN_FINISHED' while steps are still active: a (subagent 's'), b"
        );
    }

    #[test]
    fn subagent_lifecycle() {
        let start = |id: &str| {
            format!(r#"{{"type":"SUBAGENT_STARTED","subagentRunId":"{id}","name":"n"}}"#)
        };
        let fin = |id: &str| format!(r#"{{"type":"SUBAGENT_FINISHED","subagentRunId":"{id}"}}"#);
        let (a, fa) = (start("a"), fin("a"));
        assert_eq!(check(&s(&[RS, &a, &fa, RF])), Ok(4));
        assert!(matches!(
            err_at(&s(&[RS, &a, &a])).1,
            VerifyError::SubagentAlreadyActive { .. }
        ));
        assert!(matches!(
            err_at(&s(&[RS, &a, &fa, &a])).1,
            VerifyError::SubagentReused { .. }
        ));
        assert!(matches!(
            err_at(&s(&[RS, &fa])).1,
            VerifyError::SubagentNotActive { .. }
        ));
        assert_eq!(
            err_at(&s(&[RS, &a, RF])).1.to_string(),
            "Cannot send 'RUN_FINISHED' while subagents are still active: a"
        );
        // A parent may be open or already closed, but must have started.
        let child = r#"{"type":"SUBAGENT_STARTED","subagentRunId":"b","name":"n","parentSubagentRunId":"a"}"#;
        assert_eq!(check(&s(&[RS, &a, &fa, child])), Ok(4));
        assert!(matches!(
            err_at(&s(&[RS, child])).1,
            VerifyError::SubagentUnknownParent { .. }
        ));
        assert_eq!(
            err_at(&s(&[
                RS,
                r#"{"type":"SUBAGENT_STARTED","subagentRunId":"a"}"#
            ]))
            .1,
            VerifyError::SubagentWithoutName
        );
        assert_eq!(
            err_at(&s(&[
                RS,
                &a,
                r#"{"type":"SUBAGENT_ERROR","subagentRunId":"a"}"#
            ]))
            .1,
            VerifyError::SubagentErrorWithoutMessage
        );
        assert!(matches!(
            err_at(&s(&[RS, r#"{"type":"SUBAGENT_FINISHED"}"#])).1,
            VerifyError::SubagentWithoutId { .. }
        ));
        // Ids are per run.
        assert_eq!(check(&s(&[RS, &a, &fa, RF, RS, &a, &fa, RF])), Ok(8));
    }

    #[test]
    fn null_checks() {
        assert_eq!(
            err_at(&s(&[
                RS,
                r#"{"type":"CUSTOM","name":"x","value":1,"subagentRunId":null}"#
            ]))
            .1
            .to_string(),
            "Cannot send 'CUSTOM' with 'subagentRunId: null'. The field is optional — omit it entirely."
        );
        let e = err_at(&s(&[
            RS,
            r#"{"type":"SUBAGENT_STARTED","subagentRunId":"a","name":"n","description":null}"#,
        ]))
        .1;
        assert_eq!(
            e,
            VerifyError::NullLifecycleField {
                event_type: "SUBAGENT_STARTED".into(),
                field: "description"
            }
        );
        let a = r#"{"type":"SUBAGENT_STARTED","subagentRunId":"a","name":"n"}"#;
        for (outcome, expected) in [
            (
                r#"null"#,
                "Cannot send 'SUBAGENT_FINISHED' with 'outcome: null'. The field is optional — omit it entirely.",
            ),
            (
                r#"{"type":"done"}"#,
                "Cannot send 'SUBAGENT_FINISHED' with outcome type 'done'. The outcome is either { type: \"success\" } or { type: \"suspended\" }.",
            ),
            (
                r#"{"type":"suspended","interruptIds":null}"#,
                "Cannot send 'SUBAGENT_FINISHED' with 'outcome.interruptIds: null'. The field is optional — omit it entirely.",
            ),
            (
                r#"{"type":"suspended","interruptIds":["i",2]}"#,
                "Cannot send 'SUBAGENT_FINISHED' with a non-string entry in 'outcome.interruptIds'. Interrupt ids are strings.",
            ),
        ] {
            let fin = format!(
                r#"{{"type":"SUBAGENT_FINISHED","subagentRunId":"a","outcome":{outcome}}}"#
            );
            assert_eq!(err_at(&s(&[RS, a, &fin])).1.to_string(), expected);
        }
        let fin = r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i1","reason":"x","subagentRunId":null}]}}"#;
        assert_eq!(
            err_at(&s(&[RS, fin])).1,
            VerifyError::NullInterruptSubagent {
                interrupt_id: "i1".into()
            }
        );
        let snap = r#"{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"m","role":"user","content":"x","subagentRunId":null}]}"#;
        assert_eq!(
            err_at(&s(&[RS, snap])).1,
            VerifyError::NullMessageSubagent {
                message_id: "m".into()
            }
        );
    }

    #[test]
    fn continuations_must_agree_with_the_owner() {
        let (_, e) = err_at(&s(&[
            RS,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x","subagentRunId":"s1"}"#,
        ]));
        assert_eq!(
            e.to_string(),
            "Cannot send 'TEXT_MESSAGE_CONTENT': subagentRunId 's1' does not match the message 'm' opener's subagent '(the parent agent)'."
        );
        // An absent tag always agrees; owners outlive the close.
        let ok = s(&[
            RS,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"s1"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}"#,
            r#"{"type":"TEXT_MESSAGE_END","messageId":"m","subagentRunId":"s1"}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#,
            r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#,
            RF,
        ]);
        assert_eq!(check(&ok), Ok(7));
        let (i, _) = err_at(&s(&[
            RS,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"s1"}"#,
            r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"s2"}"#,
        ]));
        assert_eq!(i, 3);
        // Activity: a replace:false snapshot does not re-own.
        let (i, e) = err_at(&s(&[
            RS,
            r#"{"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"P","content":{}}"#,
            r#"{"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"P","content":{},"replace":false,"subagentRunId":"s1"}"#,
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"P","patch":[],"subagentRunId":"s1"}"#,
        ]));
        assert_eq!(i, 3);
        assert!(matches!(
            e,
            VerifyError::OwnerMismatch {
                entity: "activity",
                ..
            }
        ));
    }

    #[test]
    fn tool_calls_belong_to_their_parent_message() {
        let m = r#"{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"s1"}"#;
        let (_, e) = err_at(&s(&[
            RS,
            m,
            r#"{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f","parentMessageId":"m","subagentRunId":"s2"}"#,
        ]));
        assert!(matches!(e, VerifyError::ToolParentMismatch { .. }), "{e}");
        // An untagged call inherits the parent's owner...
        let (i, e) = err_at(&s(&[
            RS,
            m,
            r#"{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f","parentMessageId":"m"}"#,
            r#"{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"","subagentRunId":"s2"}"#,
        ]));
        assert_eq!(i, 3);
        assert!(
            matches!(e, VerifyError::OwnerMismatch { ref owner, .. } if owner.as_deref() == Some("s1"))
        );
        // ... and an untagged reopen under a differently owned parent is rejected.
        let (i, e) = err_at(&s(&[
            RS,
            r#"{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f"}"#,
            r#"{"type":"TOOL_CALL_END","toolCallId":"c"}"#,
            m,
            r#"{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f","parentMessageId":"m"}"#,
        ]));
        assert_eq!(i, 4);
        assert!(matches!(e, VerifyError::ToolReopenMismatch { .. }), "{e}");
    }

    #[test]
    fn results_and_replays_seed_owners() {
        // TOOL_CALL_RESULT mints a message owned by its tag.
        let (i, _) = err_at(&s(&[
            RS,
            r#"{"type":"TOOL_CALL_RESULT","messageId":"tm","toolCallId":"c","content":"x","subagentRunId":"s1"}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"tm","subagentRunId":"s2"}"#,
        ]));
        assert_eq!(i, 2);
        // A snapshot seeds authoritatively, tool calls under their message's owner.
        let snap = r#"{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"m","role":"assistant","subagentRunId":"s1","toolCalls":[{"id":"c","type":"function","function":{"name":"f","arguments":""}}]}]}"#;
        let (i, e) = err_at(&s(&[
            RS,
            snap,
            r#"{"type":"REASONING_ENCRYPTED_VALUE","subtype":"tool-call","entityId":"c","encryptedValue":"e","subagentRunId":"s2"}"#,
        ]));
        assert_eq!(i, 2);
        assert!(matches!(
            e,
            VerifyError::OwnerMismatch {
                entity: "tool call",
                ..
            }
        ));
        // RUN_STARTED input seeds too; reasoning messages in their own bucket.
        let rs = r#"{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[{"id":"q","role":"reasoning","content":"x","subagentRunId":"s1"}]}}"#;
        let (i, e) = err_at(&s(&[
            rs,
            r#"{"type":"REASONING_ENCRYPTED_VALUE","subtype":"message","entityId":"q","encryptedValue":"e","subagentRunId":"s2"}"#,
        ]));
        assert_eq!(i, 1);
        assert!(matches!(
            e,
            VerifyError::OwnerMismatch {
                entity: "message",
                ..
            }
        ));
        // The input seeds only ids nothing claimed; the snapshot overrides.
        let ok = s(&[
            RS,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"s1"}"#,
            r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#,
            r#"{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"m","role":"assistant","content":"x"}]}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#,
            r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#,
            RF,
        ]);
        assert_eq!(check(&ok), Ok(7));
    }

    #[test]
    fn chunks_are_expanded_and_errors_map_to_input_indexes() {
        let ok = s(&[
            RS,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a"}"#,
            r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"f","parentMessageId":"m","delta":"{}"}"#,
            RF,
        ]);
        assert_eq!(check(&ok), Ok(4));
        // The synthesized TEXT_MESSAGE_START collides with an open message:
        // reported at the chunk.
        let (i, e) = err_at(&s(&[
            RS,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a"}"#,
        ]));
        assert_eq!(i, 2);
        assert!(matches!(e, VerifyError::AlreadyOpen { .. }));
        // A synthesized END that fails is reported at the event that closed it.
        let (i, e) = err_at(&s(&[
            RS,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a"}"#,
            r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#,
        ]));
        assert_eq!(i, 2);
        assert!(matches!(e, VerifyError::NotOpen { .. }), "{e}");
        let (i, e) = err_at(&s(&[RS, r#"{"type":"TOOL_CALL_CHUNK","delta":"x"}"#]));
        assert_eq!(i, 1);
        assert!(matches!(
            e,
            VerifyError::Chunk(ChunkError::MissingId { .. })
        ));
    }

    #[test]
    fn fields_the_rules_key_on_must_be_strings() {
        let (i, e) = err_at(&s(&[RS, r#"{"type":"TEXT_MESSAGE_START"}"#]));
        assert_eq!(i, 1);
        assert_eq!(
            e,
            VerifyError::BadField {
                event_type: "TEXT_MESSAGE_START".into(),
                field: "messageId"
            }
        );
        let (_, e) = err_at(&s(&[
            RS,
            r#"{"type":"STEP_STARTED","stepName":"s","subagentRunId":3}"#,
        ]));
        assert!(matches!(
            e,
            VerifyError::BadField {
                field: "subagentRunId",
                ..
            }
        ));
        // Run-level events have no tag to read: a stray one is ignored.
        let rs = r#"{"type":"RUN_STARTED","threadId":"t","runId":"r","subagentRunId":5}"#;
        assert_eq!(check(&s(&[rs, RF])), Ok(2));
    }

    #[test]
    fn verify_all_continues_after_errors() {
        let stream = events(&s(&[
            r#"{"type":"CUSTOM","name":"x","value":1}"#,
            RS,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#,
            RS,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#,
            RF,
            r#"{"type":"STATE_DELTA","delta":[]}"#,
        ]));
        let diags = verify_all(&stream);
        let at: Vec<usize> = diags.iter().map(|d| d.index).collect();
        // #0 not a run start; #2 no open message; #4 run still active (starts
        // a new run anyway); #6 open message (ends the run anyway); #7 after
        // the run finished.
        assert_eq!(at, [0, 2, 4, 6, 7], "{diags:?}");
        assert_eq!(
            diags[1].to_string(),
            "event #2 (TEXT_MESSAGE_CONTENT): Cannot send 'TEXT_MESSAGE_CONTENT' event: No active text message found with ID 'm'. Start a text message with 'TEXT_MESSAGE_START' first."
        );
        assert_eq!(verify_events(&stream).unwrap_err().0, 0);
        assert!(verify_all(events(&s(&[RS, RF]))).is_empty());
    }

    #[test]
    fn the_verifier_counts_and_streams() {
        let mut v = Verifier::new();
        for e in events(&s(&[RS, r#"{"type":"RAW","event":null}"#, RF])) {
            v.push(&e).unwrap();
        }
        assert_eq!(v.count(), 3);
    }

    fn no_check(_: &Owner) -> Result<(), VerifyError> {
        Ok(())
    }

    #[test]
    fn entities_keep_owners_and_open_sets_in_one_map() {
        let mut e = Entities::default();
        let a = || Some("a".to_owned());
        // Opening records the owner of a new id; a second open is refused.
        assert!(e.open(OPEN, "x", no_check, a).unwrap());
        assert!(!e.open(OPEN, "x", no_check, || None).unwrap());
        assert_eq!(e.owner("x"), Some(&a()));
        // The other set is separate, and the owner is checked, not replaced.
        let refuse = |_: &Owner| Err(VerifyError::SubagentWithoutName);
        assert!(e.open(OPEN_MESSAGES, "x", refuse, || None).is_err());
        assert!(!e.any_open(OPEN_MESSAGES));
        assert!(e.open(OPEN_MESSAGES, "x", no_check, || None).unwrap());
        assert_eq!(e.owner("x"), Some(&a()));
        // A known id that is not open opens with its owner kept.
        e.set_owner("y", None);
        assert!(!e.carry_on(OPEN, "y", false, no_check).unwrap());
        assert!(e.open(OPEN, "y", no_check, a).unwrap());
        assert_eq!(e.owner("y"), Some(&None));
        assert!(e.open(OPEN, "w", no_check, a).unwrap());
        assert_eq!(e.open_in_order(OPEN), ["x", "y", "w"]);
        // Setting an owner keeps an item open.
        e.set_owner("y", a());
        assert_eq!(e.owner("y"), Some(&a()));
        // A refused continuation closes nothing; an agreeing close does.
        assert!(e.carry_on(OPEN, "y", true, refuse).is_err());
        assert!(e.carry_on(OPEN, "y", false, no_check).unwrap());
        assert!(e.carry_on(OPEN, "y", true, no_check).unwrap());
        assert!(!e.carry_on(OPEN, "y", true, no_check).unwrap());
        assert!(e.contains_key("y"));
        assert_eq!(e.open_in_order(OPEN), ["x", "w"]);
        assert_eq!(e.open_in_order(OPEN_MESSAGES), ["x"]);
        // Reopened, an item goes last.
        assert!(e.open(OPEN, "y", no_check, || None).unwrap());
        assert_eq!(e.open_in_order(OPEN), ["x", "w", "y"]);
        for id in ["x", "w", "y"] {
            assert!(e.carry_on(OPEN, id, true, no_check).unwrap());
        }
        assert!(!e.any_open(OPEN));
        assert!(e.any_open(OPEN_MESSAGES));
        e.clear();
        assert!(!e.any_open(OPEN_MESSAGES) && !e.contains_key("x"));
    }

    #[test]
    fn an_item_reopened_after_its_close_keeps_its_first_owner() {
        let stream = events(&s(&[
            RS,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"a"}"#,
            r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"b"}"#,
        ]));
        let (at, err) = verify_events(&stream).unwrap_err();
        assert_eq!(at, 3);
        assert!(matches!(err, VerifyError::OwnerMismatch { .. }), "{err:?}");
        let stream = events(&s(&[
            RS,
            r#"{"type":"REASONING_START","messageId":"r"}"#,
            r#"{"type":"REASONING_MESSAGE_START","messageId":"r"}"#,
            r#"{"type":"REASONING_END","messageId":"r"}"#,
            RF,
        ]));
        let (at, err) = verify_events(&stream).unwrap_err();
        assert_eq!(at, 4);
        assert!(
            matches!(&err, VerifyError::OpenAtRunFinished { what: "reasoning messages", open } if open == &["r"]),
            "{err:?}"
        );
    }
}
