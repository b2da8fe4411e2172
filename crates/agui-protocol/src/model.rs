//! The typed, lossless AG-UI 1.0 model.
//!
//! Every event type, message role, content part, run input, outcome and
//! patch operation has a struct whose fields carry the wire names of the
//! protocol (`threadId` is `thread_id`). Each struct also has `extra`: the
//! keys the protocol does not declare there, kept and written back, so
//! reading then serializing gives the same JSON value at every depth.
//! `null` stays distinct from absent, numbers keep their spelling
//! ([`Timestamp`], [`TokenCount`] and free-form `Value`s), and any Unicode
//! survives.
//!
//! Reading follows the `@ag-ui/core` 1.0.0 zod schemas: required keys, JSON
//! types, optional fields that reject a bare `null`, integer timestamps,
//! JSON Pointer syntax, role and discriminator literals, non-empty interrupt
//! lists, non-negative token counts. Errors name the field path:
//!
//! ```
//! use agui_protocol::{Event, model};
//!
//! let e = Event::from_json(r#"{"type":"MESSAGES_SNAPSHOT","messages":[
//!     {"id":"a","role":"assistant","toolCalls":[{"id":"c","type":"function","function":{"name":7,"arguments":"{}"}}]}]}"#).unwrap();
//! let err = model::parse_event(&e).unwrap_err();
//! assert_eq!(err.to_string(),
//!     "MESSAGES_SNAPSHOT: messages[0].toolCalls[0].function.name: expected a string, found a number");
//! ```
//!
//! [`read`] applies a [`ReadMode`] to one event of a stream: strict mode
//! returns the error with the event's index, tolerant mode keeps the event
//! opaque with a diagnostic. Unknown event types are never errors: they are
//! [`TypedEvent::Opaque`] in both modes (the official client drops them; we
//! keep them as data).
//!
//! Pre-1.0 producers sent `null` in a few optional slots; the official
//! client reads those as absent before validating. [`strip_legacy_event_nulls`]
//! and [`strip_legacy_input_nulls`] do the same on a JSON value (opt-in: the
//! model itself never rewrites input).

mod content;
pub(crate) mod error;
mod events;
mod input;
pub(crate) mod json;
mod legacy;
mod message;
mod patch;
mod primitives;
mod read;

pub use content::{
    AudioPart, Content, ContentPart, DataSource, DocumentPart, FileSource, ImagePart, PartSource,
    TextPart, UrlSource, VideoPart,
};
pub use error::{FieldPath, PathSegment, SchemaError, SchemaErrorKind, StreamSchemaError};
pub use events::{
    ActivityDelta, ActivitySnapshot, Custom, EncryptedValueSubtype, MessagesSnapshot, Raw,
    ReasoningEncryptedValue, ReasoningEnd, ReasoningMessageChunk, ReasoningMessageContent,
    ReasoningMessageEnd, ReasoningMessageStart, ReasoningRole, ReasoningStart, RunError,
    RunFinished, RunStarted, StateDelta, StateSnapshot, StepFinished, StepStarted, SubagentError,
    SubagentFinished, SubagentStarted, TextMessageChunk, TextMessageContent, TextMessageEnd,
    TextMessageRole, TextMessageStart, ToolCallArgs, ToolCallChunk, ToolCallEnd, ToolCallResult,
    ToolCallStart, ToolRole, TypedEvent,
};
pub use input::{
    CancelledOutcome, Context, InputError, Interrupt, InterruptOutcome, Interrupts, ResumeEntry,
    ResumeStatus, RunAgentInput, RunOutcome, SubagentOutcome, SubagentSuccessOutcome,
    SubagentSuspendedOutcome, SuccessOutcome, TokenUsage, Tool,
};
pub use json::FromValue;
pub use legacy::{strip_legacy_event_nulls, strip_legacy_input_nulls};
pub use message::{
    ActivityMessage, AssistantMessage, DeveloperMessage, FunctionCall, Message, ReasoningMessage,
    Role, SystemMessage, ToolCall, ToolCallType, ToolMessage, UserMessage,
};
pub use patch::{
    AddOperation, CopyOperation, JsonPatch, MoveOperation, PatchOperation, RemoveOperation,
    ReplaceOperation, TestOperation,
};
pub use primitives::{EventBase, JsonPointer, Metadata, Timestamp, TokenCount};
pub use read::{Checked, ReadMode, check_event, parse_event, read, read_all};
