//! Decoding errors and the stream positions they point at.

use std::fmt;

use agui_protocol::EnvelopeError;

/// Where in a stream something happened.
///
/// `index` counts events from 0 (an event that fails to decode still takes
/// its index), `line` counts lines from 1 and `byte` is the offset from the
/// start of the stream (a leading byte order mark included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// Index of the event (from 0).
    pub index: u64,
    /// Line number (from 1).
    pub line: u64,
    /// Byte offset from the start of the stream (from 0).
    pub byte: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "event {} (line {}, byte {})",
            self.index, self.line, self.byte
        )
    }
}

/// Why a stream could not be decoded.
///
/// Errors marked *recoverable* (see [`DecodeError::is_recoverable`]) concern a
/// single event whose framing was intact: decoding may go on with the next
/// event. Every other error ends the stream: decoders return nothing more
/// after it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A complete frame was cut, but its text is not an AG-UI event envelope
    /// (invalid JSON, not an object, no string `type`). Recoverable.
    #[error("{at}: not an AG-UI event: {source}")]
    Envelope {
        /// Start of the event.
        at: Position,
        /// What is wrong with it.
        #[source]
        source: EnvelopeError,
    },
    /// A frame's text is not valid UTF-8. Recoverable.
    #[error("{at}: invalid UTF-8 at byte {bad_byte}")]
    InvalidUtf8 {
        /// Start of the event.
        at: Position,
        /// Absolute offset of the first invalid byte.
        bad_byte: u64,
    },
    /// An event (or a line, or an SSE frame) exceeds the configured maximum.
    #[error("{at}: event exceeds the maximum size of {limit} bytes")]
    TooLarge {
        /// Start of the event.
        at: Position,
        /// The configured maximum (`DecodeOptions::max_event_size`).
        limit: usize,
    },
    /// The JSON array around the events is malformed.
    #[error("{at}: malformed JSON array: {message}")]
    Syntax {
        /// Where the unexpected byte is.
        at: Position,
        /// What was expected and found.
        message: String,
    },
    /// The stream ended in the middle of an event or of the array.
    #[error("{at}: the stream ended {context}")]
    Truncated {
        /// Start of the unfinished event, or the end of the stream.
        at: Position,
        /// What was unfinished.
        context: &'static str,
    },
    /// Format auto-detection failed: the stream starts with something that is
    /// neither a JSON array, NDJSON nor SSE.
    #[error(
        "byte {byte}: cannot detect the stream format: expected `[` (JSON array), `{{` (NDJSON) \
         or an SSE field (`data:`, `id:`, `event:`, `retry:`, `:`), found {found}"
    )]
    UnknownFormat {
        /// Offset of the first non-whitespace byte.
        byte: u64,
        /// The byte found there.
        found: String,
    },
    /// Reading the underlying source failed.
    #[error("{at}: read error: {source}")]
    Io {
        /// How far decoding had got.
        at: Position,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The upstream byte stream yielded an error.
    #[error("{at}: upstream stream error: {source}")]
    Upstream {
        /// How far decoding had got.
        at: Position,
        /// The upstream error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl DecodeError {
    /// The position the error points at, if it has one.
    pub fn position(&self) -> Option<Position> {
        match self {
            DecodeError::Envelope { at, .. }
            | DecodeError::InvalidUtf8 { at, .. }
            | DecodeError::TooLarge { at, .. }
            | DecodeError::Syntax { at, .. }
            | DecodeError::Truncated { at, .. }
            | DecodeError::Io { at, .. }
            | DecodeError::Upstream { at, .. } => Some(*at),
            DecodeError::UnknownFormat { .. } => None,
        }
    }

    /// The same error for a stream that started `index` events, `lines`
    /// line ends and `bytes` bytes later (for decoders that start mid-file).
    pub(crate) fn shifted(mut self, index: u64, lines: u64, bytes: u64) -> DecodeError {
        let shift = |at: &mut Position| {
            at.index += index;
            at.line += lines;
            at.byte += bytes;
        };
        match &mut self {
            DecodeError::Envelope { at, .. }
            | DecodeError::TooLarge { at, .. }
            | DecodeError::Syntax { at, .. }
            | DecodeError::Truncated { at, .. }
            | DecodeError::Io { at, .. }
            | DecodeError::Upstream { at, .. } => shift(at),
            DecodeError::InvalidUtf8 { at, bad_byte } => {
                shift(at);
                *bad_byte += bytes;
            }
            DecodeError::UnknownFormat { byte, .. } => *byte += bytes,
        }
        self
    }

    /// True when only one event was bad and decoding may continue.
    pub fn is_recoverable(&self) -> bool {
        matches!(
            self,
            DecodeError::Envelope { .. } | DecodeError::InvalidUtf8 { .. }
        )
    }
}
