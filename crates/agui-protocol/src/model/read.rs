//! Reading envelopes into typed events, strictly or tolerantly.

use serde_json::Value;

use super::error::{SchemaError, StreamSchemaError};
use super::events::TypedEvent;
use super::json::Obj;
use crate::Event;

/// The verdict of [`parse_event`] without the typed event: `Ok` exactly when
/// `parse_event` succeeds, and then the same error.
///
/// The events that stream a run's text (`TEXT_MESSAGE_CONTENT`,
/// `TEXT_MESSAGE_END`, `TOOL_CALL_ARGS`, `TOOL_CALL_END`,
/// `REASONING_MESSAGE_CONTENT`) are checked in one walk over their members,
/// without building a JSON tree. Every other event, and any such event the
/// walk is not sure of (an escaped key, a timestamp that is not a short
/// integer, a field of the wrong kind), is read by `parse_event`.
///
/// The walk relies on what every [`Event`] holds: valid JSON without a key
/// the JSON library reserves (which would make a full parse read an object
/// as a number or raw text).
pub fn check_event(event: &Event) -> Result<(), SchemaError> {
    if streamed_event_is_valid(event) {
        return Ok(());
    }
    parse_event(event).map(|_| ())
}

/// True when `event` is one of the streaming events of [`check_event`] and
/// its schema surely holds: its required string fields are present and
/// strings, `subagentRunId` is a string, `rawEvent` is not `null`,
/// `metadata` is an object and `timestamp` a short integer. Each occurrence
/// of a repeated key is checked, so the last one (what a parse keeps) is.
fn streamed_event_is_valid(event: &Event) -> bool {
    use crate::EventType;
    let (id, delta) = match event.event_type() {
        EventType::TextMessageContent | EventType::ReasoningMessageContent => {
            ("messageId", Some("delta"))
        }
        EventType::ToolCallArgs => ("toolCallId", Some("delta")),
        EventType::TextMessageEnd => ("messageId", None),
        EventType::ToolCallEnd => ("toolCallId", None),
        _ => return false,
    };
    let string = |v: &str| v.starts_with('"');
    let (mut has_id, mut has_delta, mut sure) = (false, delta.is_none(), true);
    let walked = event.for_each_member(|key, value| {
        sure &= match key {
            "type" => true,
            k if k == id => {
                has_id = true;
                string(value)
            }
            k if Some(k) == delta => {
                has_delta = true;
                string(value)
            }
            "subagentRunId" => string(value),
            "rawEvent" => value != "null",
            "metadata" => value.starts_with('{'),
            "timestamp" => short_integer(value),
            _ => true,
        };
    });
    walked && sure && has_id && has_delta
}

/// An integer of at most 15 digits (within ±(2^53−1) whatever they are).
fn short_integer(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    (1..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())
}

/// How [`read`] treats a known event that does not match its schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadMode {
    /// It is an error naming the event index, type and field path.
    Strict,
    /// It is kept as [`TypedEvent::Opaque`] with a diagnostic, so a damaged
    /// history still restores as far as it goes.
    Tolerant,
}

/// One event as [`read`] saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The typed event; `Opaque` for unknown types and (tolerant mode) for
    /// events that failed their schema.
    pub event: TypedEvent,
    /// Why the event was kept opaque, in tolerant mode.
    pub diagnostic: Option<StreamSchemaError>,
}

/// Reads an envelope into its typed event under the AG-UI 1.0 schema.
///
/// An unknown `type` is not an error: it becomes [`TypedEvent::Opaque`].
/// A known type that breaks its schema is an error naming the type and the
/// field path. Unknown keys are kept at every depth, so serializing the
/// result gives back the same JSON value.
pub fn parse_event(event: &Event) -> Result<TypedEvent, SchemaError> {
    let ty = event.event_type();
    if !ty.is_known() {
        return Ok(TypedEvent::Opaque(event.clone()));
    }
    let value: Value = serde_json::from_str(event.json()).map_err(|_| {
        // An `Event` always holds a JSON object, but serde_json (with
        // `arbitrary_precision`) cannot make a `Value` of one holding
        // `{"$serde_json::private::Number": <not a numeric string>}`.
        SchemaError::new(super::SchemaErrorKind::WrongType {
            expected: "JSON that serde_json can represent",
            found: "an object keyed by a key the JSON library reserves",
        })
        .in_event(ty)
    })?;
    let mut obj = Obj::new(value).map_err(|e| e.in_event(ty))?;
    // The envelope has already checked `type`; it is not kept as a field.
    obj.discard("type");
    match TypedEvent::from_known(ty, obj) {
        Some(result) => result.map_err(|e| e.in_event(ty)),
        None => Ok(TypedEvent::Opaque(event.clone())),
    }
}

/// Reads the event at `index` of a stream in the given mode.
///
/// Strict: a schema error is returned with the index. Tolerant: never fails;
/// a bad event becomes [`TypedEvent::Opaque`] and the error its diagnostic.
///
/// ```
/// use agui_protocol::Event;
/// use agui_protocol::model::{read, ReadMode, TypedEvent};
///
/// let bad = Event::from_json(r#"{"type":"STEP_STARTED","stepName":"s","timestamp":1.5}"#).unwrap();
/// let err = read(&bad, 4, ReadMode::Strict).unwrap_err();
/// assert_eq!(err.to_string(),
///     "event #4: STEP_STARTED: timestamp: expected an integer within ±(2^53−1), found 1.5");
///
/// let kept = read(&bad, 4, ReadMode::Tolerant).unwrap();
/// assert!(matches!(kept.event, TypedEvent::Opaque(_)));
/// assert_eq!(kept.diagnostic, Some(err));
/// ```
pub fn read(event: &Event, index: usize, mode: ReadMode) -> Result<Checked, StreamSchemaError> {
    match parse_event(event) {
        Ok(typed) => Ok(Checked {
            event: typed,
            diagnostic: None,
        }),
        Err(error) => {
            let error = StreamSchemaError { index, error };
            match mode {
                ReadMode::Strict => Err(error),
                ReadMode::Tolerant => Ok(Checked {
                    event: TypedEvent::Opaque(event.clone()),
                    diagnostic: Some(error),
                }),
            }
        }
    }
}

/// Reads a whole stream: [`read`] for each event, with its index.
pub fn read_all(events: &[Event], mode: ReadMode) -> Result<Vec<Checked>, StreamSchemaError> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| read(e, i, mode))
        .collect()
}

impl TypedEvent {
    /// The event as an envelope (for `Opaque`, the original one).
    pub fn to_event(&self) -> Result<Event, crate::EnvelopeError> {
        match self {
            TypedEvent::Opaque(e) => Ok(e.clone()),
            typed => Event::from_serialize(typed),
        }
    }

    /// The event as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            // Not `Event::to_value`: valid JSON that serde_json cannot hold
            // in a `Value` (see `parse_event`) must not panic.
            TypedEvent::Opaque(e) => serde_json::from_str(e.json()).unwrap_or(Value::Null),
            typed => serde_json::to_value(typed).unwrap_or(Value::Null),
        }
    }
}
