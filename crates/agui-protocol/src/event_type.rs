//! The `type` discriminator of an AG-UI event.

use std::fmt;

macro_rules! event_types {
    ($($variant:ident => $wire:literal,)*) => {
        /// Every event type AG-UI 1.0 defines, plus `Unknown` for anything else.
        ///
        /// The wire name is the upper-snake-case string in the event's `type` field.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum EventType {
            $($variant,)*
            /// A `type` this crate does not know. The event is carried verbatim.
            Unknown(Box<str>),
        }

        impl EventType {
            /// All 31 known types, in protocol order.
            pub const KNOWN: &'static [EventType] = &[$(EventType::$variant,)*];

            /// Reads a wire name. Never fails: unrecognised names become `Unknown`.
            pub fn from_wire(name: &str) -> EventType {
                match name {
                    $($wire => EventType::$variant,)*
                    other => EventType::Unknown(other.into()),
                }
            }

            /// The wire name, exactly as the protocol spells it.
            pub fn as_str(&self) -> &str {
                match self {
                    $(EventType::$variant => $wire,)*
                    EventType::Unknown(name) => name,
                }
            }
        }
    };
}

event_types! {
    RunStarted => "RUN_STARTED",
    RunFinished => "RUN_FINISHED",
    RunError => "RUN_ERROR",
    StepStarted => "STEP_STARTED",
    StepFinished => "STEP_FINISHED",
    TextMessageStart => "TEXT_MESSAGE_START",
    TextMessageContent => "TEXT_MESSAGE_CONTENT",
    TextMessageEnd => "TEXT_MESSAGE_END",
    TextMessageChunk => "TEXT_MESSAGE_CHUNK",
    ToolCallStart => "TOOL_CALL_START",
    ToolCallArgs => "TOOL_CALL_ARGS",
    ToolCallEnd => "TOOL_CALL_END",
    ToolCallChunk => "TOOL_CALL_CHUNK",
    ToolCallResult => "TOOL_CALL_RESULT",
    StateSnapshot => "STATE_SNAPSHOT",
    StateDelta => "STATE_DELTA",
    MessagesSnapshot => "MESSAGES_SNAPSHOT",
    ActivitySnapshot => "ACTIVITY_SNAPSHOT",
    ActivityDelta => "ACTIVITY_DELTA",
    Raw => "RAW",
    Custom => "CUSTOM",
    ReasoningStart => "REASONING_START",
    ReasoningMessageStart => "REASONING_MESSAGE_START",
    ReasoningMessageContent => "REASONING_MESSAGE_CONTENT",
    ReasoningMessageEnd => "REASONING_MESSAGE_END",
    ReasoningMessageChunk => "REASONING_MESSAGE_CHUNK",
    ReasoningEnd => "REASONING_END",
    ReasoningEncryptedValue => "REASONING_ENCRYPTED_VALUE",
    SubagentStarted => "SUBAGENT_STARTED",
    SubagentFinished => "SUBAGENT_FINISHED",
    SubagentError => "SUBAGENT_ERROR",
}

impl EventType {
    /// True for the 31 types of AG-UI 1.0.
    pub fn is_known(&self) -> bool {
        !matches!(self, EventType::Unknown(_))
    }

    /// True for `RUN_FINISHED` and `RUN_ERROR`.
    pub fn is_run_terminal(&self) -> bool {
        matches!(self, EventType::RunFinished | EventType::RunError)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_are_31_known_types_and_names_round_trip() {
        assert_eq!(EventType::KNOWN.len(), 31);
        for t in EventType::KNOWN {
            assert_eq!(&EventType::from_wire(t.as_str()), t);
            assert!(t.is_known());
        }
        let unknown = EventType::from_wire("THINKING_START");
        assert_eq!(unknown.as_str(), "THINKING_START");
        assert!(!unknown.is_known());
    }
}
