//! The 31 event types of AG-UI 1.0, and [`TypedEvent`] over them.
//!
//! Every event struct has a `base` ([`EventBase`]: `timestamp`, `rawEvent`,
//! `metadata`) and an `extra` map that keeps undeclared keys. Serializing a
//! struct writes its `type` first.

use serde_json::{Map, Value};

use super::content::Content;
use super::input::{RunAgentInput, RunOutcome, SubagentOutcome, TokenUsage};
use super::json::{json_enum, json_object};
use super::message::Message;
use super::patch::JsonPatch;
use super::primitives::EventBase;

json_enum! {
    /// The roles a streamed text message may take (not `tool`).
    pub enum TextMessageRole {
        /// `developer`
        Developer = "developer",
        /// `system`
        System = "system",
        /// `assistant`
        Assistant = "assistant",
        /// `user`
        User = "user",
    }
}

json_enum! {
    /// `REASONING_MESSAGE_START.role`: only `"reasoning"`.
    pub enum ReasoningRole {
        /// `reasoning`
        Reasoning = "reasoning",
    }
}

json_enum! {
    /// `TOOL_CALL_RESULT.role`: only `"tool"`.
    pub enum ToolRole {
        /// `tool`
        Tool = "tool",
    }
}

json_enum! {
    /// `REASONING_ENCRYPTED_VALUE.subtype`.
    pub enum EncryptedValueSubtype {
        /// `tool-call`: `entityId` is a tool call id.
        ToolCall = "tool-call",
        /// `message`: `entityId` is a (text or reasoning) message id.
        Message = "message",
    }
}

json_object! {
    /// `RUN_STARTED`: `threadId`, `runId`, optional `protocolVersion`, `parentRunId`, `input`.
    tag "type" = "RUN_STARTED";
    pub struct RunStarted {
        /// `threadId`.
        "threadId" => thread_id: String = req,
        /// `runId`.
        "runId" => run_id: String = req,
        /// `protocolVersion`: the producer's protocol version.
        "protocolVersion" => protocol_version: Option<String> = opt,
        /// `parentRunId`: lineage (branching, time travel).
        "parentRunId" => parent_run_id: Option<String> = opt,
        /// `input`: the input as the agent received it.
        "input" => input: Option<RunAgentInput> = opt,
        /// `timestamp`, `rawEvent`, `metadata`.
        "" => base: EventBase = flat,
    }
}

json_object! {
    /// `RUN_FINISHED`: `threadId`, `runId`, optional `result`, `outcome`, `usage`.
    tag "type" = "RUN_FINISHED";
    pub struct RunFinished {
        /// `threadId`.
        "threadId" => thread_id: String = req,
        /// `runId`.
        "runId" => run_id: String = req,
        /// `result`: anything but a bare `null`.
        "result" => result: Option<Value> = opt_non_null,
        /// `outcome`: absent means success.
        "outcome" => outcome: Option<RunOutcome> = opt,
        /// `usage`: one entry per (provider, model).
        "usage" => usage: Option<Vec<TokenUsage>> = opt,
        /// `timestamp`, `rawEvent`, `metadata`.
        "" => base: EventBase = flat,
    }
}

json_object! {
    /// `RUN_ERROR`: `message`, optional `code`, `usage`.
    tag "type" = "RUN_ERROR";
    pub struct RunError {
        /// `message`.
        "message" => message: String = req,
        /// `code`.
        "code" => code: Option<String> = opt,
        /// `usage`: partial usage.
        "usage" => usage: Option<Vec<TokenUsage>> = opt,
        /// `timestamp`, `rawEvent`, `metadata`.
        "" => base: EventBase = flat,
    }
}

macro_rules! simple_event {
    (
        $(#[$meta:meta])* $name:ident = $wire:literal {
            $( $(#[$fmeta:meta])* $key:literal => $field:ident : $ty:ty = $how:ident, )*
        }
    ) => {
        json_object! {
            $(#[$meta])*
            tag "type" = $wire;
            pub struct $name {
                $( $(#[$fmeta])* $key => $field: $ty = $how, )*
                /// `subagentRunId`: the subagent invocation that produced it.
                "subagentRunId" => subagent_run_id: Option<String> = opt,
                /// `timestamp`, `rawEvent`, `metadata`.
                "" => base: EventBase = flat,
            }
        }
    };
}

simple_event! {
    /// `STEP_STARTED`.
    StepStarted = "STEP_STARTED" {
        /// `stepName`.
        "stepName" => step_name: String = req,
    }
}

simple_event! {
    /// `STEP_FINISHED`.
    StepFinished = "STEP_FINISHED" {
        /// `stepName`.
        "stepName" => step_name: String = req,
    }
}

simple_event! {
    /// `TEXT_MESSAGE_START`.
    TextMessageStart = "TEXT_MESSAGE_START" {
        /// `messageId`.
        "messageId" => message_id: String = req,
        /// `role`: absent reads as `assistant`.
        "role" => role: Option<TextMessageRole> = opt,
        /// `name`.
        "name" => name: Option<String> = opt,
    }
}

simple_event! {
    /// `TEXT_MESSAGE_CONTENT`.
    TextMessageContent = "TEXT_MESSAGE_CONTENT" {
        /// `messageId`.
        "messageId" => message_id: String = req,
        /// `delta` (`""` is valid).
        "delta" => delta: String = req,
    }
}

simple_event! {
    /// `TEXT_MESSAGE_END`.
    TextMessageEnd = "TEXT_MESSAGE_END" {
        /// `messageId`.
        "messageId" => message_id: String = req,
    }
}

simple_event! {
    /// `TEXT_MESSAGE_CHUNK`: every field optional.
    TextMessageChunk = "TEXT_MESSAGE_CHUNK" {
        /// `messageId`.
        "messageId" => message_id: Option<String> = opt,
        /// `role`.
        "role" => role: Option<TextMessageRole> = opt,
        /// `delta`.
        "delta" => delta: Option<String> = opt,
        /// `name`.
        "name" => name: Option<String> = opt,
    }
}

simple_event! {
    /// `TOOL_CALL_START`.
    ToolCallStart = "TOOL_CALL_START" {
        /// `toolCallId`.
        "toolCallId" => tool_call_id: String = req,
        /// `toolCallName`.
        "toolCallName" => tool_call_name: String = req,
        /// `parentMessageId`.
        "parentMessageId" => parent_message_id: Option<String> = opt,
    }
}

simple_event! {
    /// `TOOL_CALL_ARGS`.
    ToolCallArgs = "TOOL_CALL_ARGS" {
        /// `toolCallId`.
        "toolCallId" => tool_call_id: String = req,
        /// `delta`: a fragment of the argument text.
        "delta" => delta: String = req,
    }
}

simple_event! {
    /// `TOOL_CALL_END`.
    ToolCallEnd = "TOOL_CALL_END" {
        /// `toolCallId`.
        "toolCallId" => tool_call_id: String = req,
    }
}

simple_event! {
    /// `TOOL_CALL_CHUNK`: every field optional.
    ToolCallChunk = "TOOL_CALL_CHUNK" {
        /// `toolCallId`.
        "toolCallId" => tool_call_id: Option<String> = opt,
        /// `toolCallName`.
        "toolCallName" => tool_call_name: Option<String> = opt,
        /// `parentMessageId`.
        "parentMessageId" => parent_message_id: Option<String> = opt,
        /// `delta`.
        "delta" => delta: Option<String> = opt,
    }
}

simple_event! {
    /// `TOOL_CALL_RESULT`: mints a tool message.
    ToolCallResult = "TOOL_CALL_RESULT" {
        /// `messageId`: the id of the tool message it creates.
        "messageId" => message_id: String = req,
        /// `toolCallId`.
        "toolCallId" => tool_call_id: String = req,
        /// `content`: a string or content parts.
        "content" => content: Content = req,
        /// `role`: only `tool`.
        "role" => role: Option<ToolRole> = opt,
    }
}

simple_event! {
    /// `STATE_SNAPSHOT`: replaces the state.
    StateSnapshot = "STATE_SNAPSHOT" {
        /// `snapshot`: any JSON (`null` included); the key is required.
        "snapshot" => snapshot: Value = req,
    }
}

simple_event! {
    /// `STATE_DELTA`: patches the state.
    StateDelta = "STATE_DELTA" {
        /// `delta`: a JSON Patch.
        "delta" => delta: JsonPatch = req,
    }
}

json_object! {
    /// `MESSAGES_SNAPSHOT`: replaces the messages (no `subagentRunId` on the event).
    tag "type" = "MESSAGES_SNAPSHOT";
    pub struct MessagesSnapshot {
        /// `messages`.
        "messages" => messages: Vec<Message> = req,
        /// `timestamp`, `rawEvent`, `metadata`.
        "" => base: EventBase = flat,
    }
}

simple_event! {
    /// `ACTIVITY_SNAPSHOT`.
    ActivitySnapshot = "ACTIVITY_SNAPSHOT" {
        /// `messageId`.
        "messageId" => message_id: String = req,
        /// `activityType`.
        "activityType" => activity_type: String = req,
        /// `content`: a JSON object.
        "content" => content: Map<String, Value> = req,
        /// `replace`: absent reads as `true`.
        "replace" => replace: Option<bool> = opt,
    }
}

simple_event! {
    /// `ACTIVITY_DELTA`.
    ActivityDelta = "ACTIVITY_DELTA" {
        /// `messageId`.
        "messageId" => message_id: String = req,
        /// `activityType`.
        "activityType" => activity_type: String = req,
        /// `patch`: a JSON Patch.
        "patch" => patch: JsonPatch = req,
    }
}

simple_event! {
    /// `RAW`: an upstream event passed through.
    Raw = "RAW" {
        /// `event`: any JSON (`null` included); the key is required.
        "event" => event: Value = req,
        /// `source`.
        "source" => source: Option<String> = opt,
    }
}

simple_event! {
    /// `CUSTOM`: an application event.
    Custom = "CUSTOM" {
        /// `name`.
        "name" => name: String = req,
        /// `value`: any JSON (`null` included); the key is required.
        "value" => value: Value = req,
    }
}

simple_event! {
    /// `REASONING_START`: opens a reasoning span.
    ReasoningStart = "REASONING_START" {
        /// `messageId`: the span's id.
        "messageId" => message_id: String = req,
    }
}

simple_event! {
    /// `REASONING_MESSAGE_START`.
    ReasoningMessageStart = "REASONING_MESSAGE_START" {
        /// `messageId`.
        "messageId" => message_id: String = req,
        /// `role`: always `reasoning`.
        "role" => role: ReasoningRole = req,
    }
}

simple_event! {
    /// `REASONING_MESSAGE_CONTENT`.
    ReasoningMessageContent = "REASONING_MESSAGE_CONTENT" {
        /// `messageId`.
        "messageId" => message_id: String = req,
        /// `delta`.
        "delta" => delta: String = req,
    }
}

simple_event! {
    /// `REASONING_MESSAGE_END`.
    ReasoningMessageEnd = "REASONING_MESSAGE_END" {
        /// `messageId`.
        "messageId" => message_id: String = req,
    }
}

simple_event! {
    /// `REASONING_MESSAGE_CHUNK`: every field optional.
    ReasoningMessageChunk = "REASONING_MESSAGE_CHUNK" {
        /// `messageId`.
        "messageId" => message_id: Option<String> = opt,
        /// `delta`.
        "delta" => delta: Option<String> = opt,
    }
}

simple_event! {
    /// `REASONING_END`: closes a reasoning span.
    ReasoningEnd = "REASONING_END" {
        /// `messageId`: the span's id.
        "messageId" => message_id: String = req,
    }
}

simple_event! {
    /// `REASONING_ENCRYPTED_VALUE`.
    ReasoningEncryptedValue = "REASONING_ENCRYPTED_VALUE" {
        /// `subtype`.
        "subtype" => subtype: EncryptedValueSubtype = req,
        /// `entityId`: a tool call id or a message id.
        "entityId" => entity_id: String = req,
        /// `encryptedValue`.
        "encryptedValue" => encrypted_value: String = req,
    }
}

json_object! {
    /// `SUBAGENT_STARTED`.
    tag "type" = "SUBAGENT_STARTED";
    pub struct SubagentStarted {
        /// `subagentRunId` (required): the invocation.
        "subagentRunId" => subagent_run_id: String = req,
        /// `name`.
        "name" => name: String = req,
        /// `description`.
        "description" => description: Option<String> = opt,
        /// `parentSubagentRunId`: the enclosing invocation.
        "parentSubagentRunId" => parent_subagent_run_id: Option<String> = opt,
        /// `parentToolCallId`: the tool call that spawned it.
        "parentToolCallId" => parent_tool_call_id: Option<String> = opt,
        /// `parentMessageId`: the message holding that tool call.
        "parentMessageId" => parent_message_id: Option<String> = opt,
        /// `timestamp`, `rawEvent`, `metadata`.
        "" => base: EventBase = flat,
    }
}

json_object! {
    /// `SUBAGENT_FINISHED`.
    tag "type" = "SUBAGENT_FINISHED";
    pub struct SubagentFinished {
        /// `subagentRunId` (required).
        "subagentRunId" => subagent_run_id: String = req,
        /// `result`: anything but a bare `null`.
        "result" => result: Option<Value> = opt_non_null,
        /// `outcome`.
        "outcome" => outcome: Option<SubagentOutcome> = opt,
        /// `timestamp`, `rawEvent`, `metadata`.
        "" => base: EventBase = flat,
    }
}

json_object! {
    /// `SUBAGENT_ERROR`.
    tag "type" = "SUBAGENT_ERROR";
    pub struct SubagentError {
        /// `subagentRunId` (required).
        "subagentRunId" => subagent_run_id: String = req,
        /// `message`.
        "message" => message: String = req,
        /// `code`.
        "code" => code: Option<String> = opt,
        /// `timestamp`, `rawEvent`, `metadata`.
        "" => base: EventBase = flat,
    }
}

macro_rules! typed_event {
    ($( $variant:ident: $attribution:ident, )*) => {
        /// An event read into its typed struct, or kept opaque.
        ///
        /// `Opaque` holds the envelope of an event whose `type` is not one of
        /// the 31, or (in tolerant reading) of a known event that does not
        /// match its schema. Serializing any variant gives back the same JSON
        /// value it was read from.
        #[derive(Debug, Clone)]
        #[allow(clippy::large_enum_variant)]
        pub enum TypedEvent {
            $(
                #[doc = concat!("`", stringify!($variant), "`")]
                $variant($variant),
            )*
            /// An event kept as its envelope.
            Opaque(crate::Event),
        }

        impl TypedEvent {
            /// The event's type.
            pub fn event_type(&self) -> crate::EventType {
                match self {
                    $( TypedEvent::$variant(_) => crate::EventType::$variant, )*
                    TypedEvent::Opaque(e) => e.event_type().clone(),
                }
            }

            /// `timestamp`, `rawEvent` and `metadata`; `None` for `Opaque`.
            pub fn base(&self) -> Option<&EventBase> {
                match self {
                    $( TypedEvent::$variant(e) => Some(&e.base), )*
                    TypedEvent::Opaque(_) => None,
                }
            }

            /// The undeclared keys kept on the event; `None` for `Opaque`.
            pub fn extra(&self) -> Option<&Map<String, Value>> {
                match self {
                    $( TypedEvent::$variant(e) => Some(&e.extra), )*
                    TypedEvent::Opaque(_) => None,
                }
            }

            /// The event's `subagentRunId`, on the types that declare one.
            pub fn subagent_run_id(&self) -> Option<&str> {
                match self {
                    $( TypedEvent::$variant(e) => typed_event!(@sub $attribution, e), )*
                    TypedEvent::Opaque(_) => None,
                }
            }

            pub(crate) fn from_known(
                ty: &crate::EventType,
                obj: super::json::Obj,
            ) -> Option<Result<TypedEvent, super::SchemaError>> {
                match ty {
                    $( crate::EventType::$variant => Some($variant::from_obj(obj).map(TypedEvent::$variant)), )*
                    crate::EventType::Unknown(_) => None,
                }
            }
        }

        /// Typed variants compare field by field; `Opaque` events compare by
        /// JSON value.
        impl PartialEq for TypedEvent {
            fn eq(&self, other: &TypedEvent) -> bool {
                match (self, other) {
                    $( (TypedEvent::$variant(a), TypedEvent::$variant(b)) => a == b, )*
                    (TypedEvent::Opaque(a), TypedEvent::Opaque(b)) => a.same_value(b),
                    _ => false,
                }
            }
        }

        impl serde::Serialize for TypedEvent {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self {
                    $( TypedEvent::$variant(e) => e.serialize(serializer), )*
                    TypedEvent::Opaque(e) => e.serialize(serializer),
                }
            }
        }

        $( impl From<$variant> for TypedEvent {
            fn from(e: $variant) -> TypedEvent {
                TypedEvent::$variant(e)
            }
        } )*
    };
    (@sub none, $e:ident) => {{
        let _ = $e;
        None
    }};
    (@sub opt, $e:ident) => { $e.subagent_run_id.as_deref() };
    (@sub req, $e:ident) => { Some($e.subagent_run_id.as_str()) };
}

typed_event! {
    RunStarted: none,
    RunFinished: none,
    RunError: none,
    StepStarted: opt,
    StepFinished: opt,
    TextMessageStart: opt,
    TextMessageContent: opt,
    TextMessageEnd: opt,
    TextMessageChunk: opt,
    ToolCallStart: opt,
    ToolCallArgs: opt,
    ToolCallEnd: opt,
    ToolCallChunk: opt,
    ToolCallResult: opt,
    StateSnapshot: opt,
    StateDelta: opt,
    MessagesSnapshot: none,
    ActivitySnapshot: opt,
    ActivityDelta: opt,
    Raw: opt,
    Custom: opt,
    ReasoningStart: opt,
    ReasoningMessageStart: opt,
    ReasoningMessageContent: opt,
    ReasoningMessageEnd: opt,
    ReasoningMessageChunk: opt,
    ReasoningEnd: opt,
    ReasoningEncryptedValue: opt,
    SubagentStarted: req,
    SubagentFinished: req,
    SubagentError: req,
}

/// `new(required fields)`: optional fields absent, no base fields, no extra keys.
macro_rules! constructor {
    ($name:ident ( $($arg:ident : $ty:ty),* ) { $($absent:ident),* }) => {
        impl $name {
            #[doc = concat!("A `", stringify!($name), "` with the required fields only.")]
            pub fn new($($arg: impl Into<$ty>),*) -> $name {
                $name {
                    $($arg: $arg.into(),)*
                    $($absent: None,)*
                    base: EventBase::default(),
                    extra: Map::new(),
                }
            }
        }
    };
}

constructor!(RunStarted(thread_id: String, run_id: String) { protocol_version, parent_run_id, input });
constructor!(RunFinished(thread_id: String, run_id: String) { result, outcome, usage });
constructor!(RunError(message: String) { code, usage });
constructor!(StepStarted(step_name: String) { subagent_run_id });
constructor!(StepFinished(step_name: String) { subagent_run_id });
constructor!(TextMessageStart(message_id: String) { role, name, subagent_run_id });
constructor!(TextMessageContent(message_id: String, delta: String) { subagent_run_id });
constructor!(TextMessageEnd(message_id: String) { subagent_run_id });
constructor!(ToolCallStart(tool_call_id: String, tool_call_name: String) { parent_message_id, subagent_run_id });
constructor!(ToolCallArgs(tool_call_id: String, delta: String) { subagent_run_id });
constructor!(ToolCallEnd(tool_call_id: String) { subagent_run_id });
constructor!(ToolCallResult(message_id: String, tool_call_id: String, content: Content) { role, subagent_run_id });
constructor!(StateSnapshot(snapshot: Value) { subagent_run_id });
constructor!(StateDelta(delta: JsonPatch) { subagent_run_id });
constructor!(MessagesSnapshot(messages: Vec<Message>) {});
constructor!(ActivitySnapshot(message_id: String, activity_type: String, content: Map<String, Value>) { replace, subagent_run_id });
constructor!(ActivityDelta(message_id: String, activity_type: String, patch: JsonPatch) { subagent_run_id });
constructor!(Raw(event: Value) { source, subagent_run_id });
constructor!(Custom(name: String, value: Value) { subagent_run_id });
constructor!(SubagentStarted(subagent_run_id: String, name: String) { description, parent_subagent_run_id, parent_tool_call_id, parent_message_id });
constructor!(SubagentFinished(subagent_run_id: String) { result, outcome });
constructor!(SubagentError(subagent_run_id: String, message: String) { code });

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::parse_event;

    #[test]
    fn constructed_events_serialize_with_their_type_and_read_back() {
        let mut finished = RunFinished::new("t", "r");
        finished.base.timestamp = crate::model::Timestamp::new(1_767_225_600_000);
        let events: Vec<TypedEvent> = vec![
            RunStarted::new("t", "r").into(),
            TextMessageContent::new("m", "hi").into(),
            ToolCallResult::new("tm", "c", "done").into(),
            StateSnapshot::new(serde_json::json!({"a": null})).into(),
            Custom::new("n", Value::Null).into(),
            finished.into(),
        ];
        let expected = [
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hi"}"#,
            r#"{"type":"TOOL_CALL_RESULT","messageId":"tm","toolCallId":"c","content":"done"}"#,
            r#"{"type":"STATE_SNAPSHOT","snapshot":{"a":null}}"#,
            r#"{"type":"CUSTOM","name":"n","value":null}"#,
            r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r","timestamp":1767225600000}"#,
        ];
        for (typed, want) in events.iter().zip(expected) {
            let event = typed.to_event().unwrap();
            assert_eq!(event.json(), want);
            assert_eq!(&parse_event(&event).unwrap(), typed);
        }
    }
}
