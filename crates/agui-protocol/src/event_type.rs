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

            /// The wire names of [`EventType::KNOWN`], in the same order.
            const WIRES: &'static [&'static str] = &[$($wire,)*];

            /// Reads a wire name. Never fails: unrecognised names become `Unknown`.
            ///
            /// One hash of four bytes and the length picks the only known
            /// type the name can be ([`SLOTS`], checked free of collisions
            /// when the crate compiles), then one comparison confirms it:
            /// decoding reads every event's type, and a chain of string
            /// comparisons cost several per event.
            pub fn from_wire(name: &str) -> EventType {
                let b = name.as_bytes();
                if let Some(&slot) = slot_of(b).and_then(|h| SLOTS.get(h))
                    && let Some(wire) = EventType::WIRES.get(usize::from(slot))
                    && wire.as_bytes() == b
                    && let Some(known) = EventType::KNOWN.get(usize::from(slot))
                {
                    return known.clone();
                }
                EventType::Unknown(name.into())
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

/// The slot of a name in [`SLOTS`]: a hash of its length and four of its
/// bytes (multipliers found by search, so that the 31 known names land in
/// 31 different slots of 64). `None` for names shorter than any known one.
const fn slot_of(b: &[u8]) -> Option<usize> {
    let n = b.len();
    if n < 3 {
        return None;
    }
    let h =
        n + b[0] as usize + 2 * b[n - 1] as usize + 24 * b[n - 3] as usize + 21 * b[n / 2] as usize;
    Some(h & 63)
}

/// For each slot, the index in [`EventType::KNOWN`] of the type whose wire
/// name hashes there (`u8::MAX`: none). Built when the crate compiles; two
/// names in one slot fail the build.
static SLOTS: [u8; 64] = {
    let mut slots = [u8::MAX; 64];
    let wires = EventType::WIRES;
    let mut i = 0;
    while i < wires.len() {
        let Some(h) = slot_of(wires[i].as_bytes()) else {
            panic!("a known event type name is shorter than three bytes");
        };
        assert!(
            slots[h] == u8::MAX,
            "two known event type names share a slot"
        );
        slots[h] = i as u8;
        i += 1;
    }
    slots
};

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

    #[test]
    fn names_near_the_known_ones_are_unknown() {
        // Every known name with one byte changed, cut, lengthened or in
        // lower case lands in some slot; only the exact name is known.
        for t in EventType::KNOWN {
            let wire = t.as_str();
            let mut near = vec![
                wire.to_lowercase(),
                format!("{wire}_"),
                format!("_{wire}"),
                wire[..wire.len() - 1].to_owned(),
                wire[1..].to_owned(),
            ];
            for i in 0..wire.len() {
                let mut b = wire.as_bytes().to_vec();
                b[i] = if b[i] == b'X' { b'Y' } else { b'X' };
                near.push(String::from_utf8(b).unwrap());
            }
            for name in near {
                let read = EventType::from_wire(&name);
                assert_eq!(read.as_str(), name);
                assert!(!read.is_known(), "{name} read as a known type");
            }
        }
        for short in ["", "R", "RA", "\u{e9}"] {
            assert!(!EventType::from_wire(short).is_known());
        }
    }

    proptest::proptest! {
        /// Any name reads as the type whose wire name it is, else unknown.
        #[test]
        fn any_name_reads_as_the_string_match_would(name in "[A-Z_]{0,30}|.{0,12}") {
            let expected = EventType::KNOWN.iter().find(|t| t.as_str() == name);
            let read = EventType::from_wire(&name);
            match expected {
                Some(t) => proptest::prop_assert_eq!(&read, t),
                None => proptest::prop_assert_eq!(read, EventType::Unknown(name.as_str().into())),
            }
        }
    }
}
