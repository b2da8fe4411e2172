//! Streaming framing of AG-UI events: JSON arrays, NDJSON and SSE.
//!
//! This crate cuts byte streams into [`Event`]s and writes events back out.
//! It knows framing only and never interprets an event beyond its envelope:
//! each event's JSON text is kept verbatim, so decoding and re-encoding in
//! any format is lossless.
//!
//! # Layers
//!
//! - **Sans-IO push decoders** ([`PushDecoder`]): push bytes in any chunks,
//!   pull events out. [`Decoder`] detects the format and dispatches to
//!   [`JsonArrayDecoder`], [`NdjsonDecoder`] or [`SseEventDecoder`];
//!   [`SseDecoder`] exposes the SSE frame layer ([`SseFrame`]: `id`, `event`,
//!   `retry`, `data`).
//! - **Blocking**: [`Reader`] iterates over a [`std::io::BufRead`];
//!   [`ThreadedReader`] decodes a file on background threads (two at once for
//!   big NDJSON files), with the same events, errors and positions.
//! - **Async**: [`AsyncReader`] over a tokio `AsyncBufRead` (or `AsyncRead`
//!   via [`AsyncReader::from_async_read`]), and [`ByteStreamDecoder`] over a
//!   `Stream<Item = Result<Bytes, E>>` such as reqwest's `bytes_stream()`.
//!   Both are `futures_core::Stream`s.
//! - **Encoding**: [`Writer`] for the three formats, and
//!   [`encode_sse_frame`] / [`encode_ndjson_line`] for pre-framed bytes.
//!
//! # Errors
//!
//! A [`DecodeError`] says what went wrong and where ([`Position`]: event
//! index from 0, line from 1, byte offset). Errors about one event whose
//! framing was intact are recoverable ([`DecodeError::is_recoverable`]) and
//! decoding goes on; any other error ends the stream. No input panics.
//!
//! # Memory
//!
//! Decoders keep only the unconsumed bytes: the unfinished event plus what is
//! left of the last chunk. An event (an NDJSON line, a JSON array element, an
//! SSE frame's data) larger than [`DecodeOptions::max_event_size`] (64 MiB by
//! default) is an error.

mod buffer;
mod chunk;
mod encode;
mod error;
mod json;
mod ndjson;
mod reader;
mod sse;
mod stream;
#[cfg(test)]
mod testutil;
mod threaded;

use agui_protocol::{Checked, Event};

pub use chunk::{EventChunk, decode_ndjson_buffer};
pub use encode::{
    SSE_KEEP_ALIVE, Writer, encode_ndjson_line, encode_sse_frame, write_ndjson_line,
    write_sse_frame,
};
pub use error::{DecodeError, Position};
pub use json::JsonArrayDecoder;
pub use ndjson::NdjsonDecoder;
pub use reader::Reader;
pub use sse::{SseDecoder, SseEventDecoder, SseFrame};
pub use stream::{AsyncReader, ByteStreamDecoder};
pub use threaded::{Split, ThreadedReader};

/// The default maximum size of one event: 64 MiB.
pub const DEFAULT_MAX_EVENT_SIZE: usize = 64 << 20;

/// A framing of an event stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// A JSON array of event objects.
    Json,
    /// One event per line.
    Ndjson,
    /// Server-sent events, one event per frame's data.
    Sse,
}

impl Format {
    /// The name used on the command line: `json`, `ndjson` or `sse`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Ndjson => "ndjson",
            Format::Sse => "sse",
        }
    }

    /// The HTTP media type of the format.
    pub fn media_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Ndjson => "application/x-ndjson",
            Format::Sse => "text/event-stream",
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "json" => Ok(Format::Json),
            "ndjson" | "jsonl" => Ok(Format::Ndjson),
            "sse" => Ok(Format::Sse),
            other => Err(format!(
                "unknown format {other:?}: expected json, ndjson or sse"
            )),
        }
    }
}

/// The outcome of [`detect_format`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detection {
    /// The format is known.
    Format(Format),
    /// The bytes so far are whitespace or a prefix of an SSE field name.
    NeedMore,
    /// The stream is empty (or only whitespace): there is nothing to decode.
    Empty,
    /// The first non-whitespace bytes fit no format.
    Unknown {
        /// Offset of the first non-whitespace byte.
        at: usize,
    },
}

/// Detects the format from the start of a stream.
///
/// A leading UTF-8 byte order mark and whitespace are skipped; then `[` means
/// a JSON array, `{` NDJSON, and `data:`, `id:`, `event:`, `retry:` or `:`
/// SSE. `complete` says that `prefix` is the whole stream.
pub fn detect_format(prefix: &[u8], complete: bool) -> Detection {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    const SSE_FIELDS: [&[u8]; 5] = [b":", b"data:", b"id:", b"event:", b"retry:"];
    let mut bytes = prefix;
    if bytes.starts_with(BOM) {
        bytes = &bytes[3..];
    } else if !complete && BOM.starts_with(bytes) && !bytes.is_empty() {
        return Detection::NeedMore;
    }
    let skipped = bytes
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .unwrap_or(bytes.len());
    let at = prefix.len() - bytes.len() + skipped;
    let rest = &bytes[skipped..];
    match rest.first() {
        None if complete => Detection::Empty,
        None => Detection::NeedMore,
        Some(b'[') => Detection::Format(Format::Json),
        Some(b'{') => Detection::Format(Format::Ndjson),
        Some(_) => {
            if SSE_FIELDS.iter().any(|f| rest.starts_with(f)) {
                Detection::Format(Format::Sse)
            } else if !complete && SSE_FIELDS.iter().any(|f| f.starts_with(rest)) {
                Detection::NeedMore
            } else {
                Detection::Unknown { at }
            }
        }
    }
}

/// How to decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// The format, or `None` to detect it from the first bytes.
    pub format: Option<Format>,
    /// The largest event accepted, in bytes.
    pub max_event_size: usize,
    /// Whether events decoded in place ([`EventChunk`]s) keep the member
    /// table their envelope scan recorded (on by default): readers of
    /// their fields then walk no text. A caller that reads no fields (a
    /// format conversion) turns it off and saves the recording.
    pub member_tables: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            format: None,
            max_event_size: DEFAULT_MAX_EVENT_SIZE,
            member_tables: true,
        }
    }
}

impl DecodeOptions {
    /// Options for a known format.
    pub fn format(format: Format) -> DecodeOptions {
        DecodeOptions {
            format: Some(format),
            ..DecodeOptions::default()
        }
    }

    /// The same options without member tables (see
    /// [`DecodeOptions::member_tables`]).
    pub fn without_member_tables(self) -> DecodeOptions {
        DecodeOptions {
            member_tables: false,
            ..self
        }
    }

    /// The same options with another maximum event size.
    pub fn with_max_event_size(self, max_event_size: usize) -> DecodeOptions {
        DecodeOptions {
            max_event_size,
            ..self
        }
    }
}

/// A sans-IO decoder: push bytes, pull items.
///
/// Call [`push`](PushDecoder::push) with input in chunks of any size (split
/// anywhere, even inside a UTF-8 sequence or a CRLF), and
/// [`pull`](PushDecoder::pull) until it returns `None`, which means "more
/// input needed". After [`finish`](PushDecoder::finish) (end of input),
/// `None` from `pull` means the stream is over.
pub trait PushDecoder {
    /// What the decoder yields.
    type Item;
    /// Appends input.
    fn push(&mut self, bytes: &[u8]);
    /// Marks the end of input.
    fn finish(&mut self);
    /// The next item, an error, or `None` (more input needed, or done after
    /// [`finish`](PushDecoder::finish)).
    fn pull(&mut self) -> Option<Result<Self::Item, DecodeError>>;
    /// How far decoding has got: the next event's index and the position of
    /// the first unconsumed byte.
    fn position(&self) -> Position;
}

/// Reads one complete frame's bytes as an event.
pub(crate) fn parse_event(bytes: &[u8], at: Position) -> Result<Event, DecodeError> {
    check_event(bytes, at).map(Checked::into_event)
}

/// Like [`parse_event`], borrowing the event's text where it can.
pub(crate) fn check_event(bytes: &[u8], at: Position) -> Result<Checked<'_>, DecodeError> {
    let text = std::str::from_utf8(bytes).map_err(|e| DecodeError::InvalidUtf8 {
        at,
        bad_byte: at.byte + e.valid_up_to() as u64,
    })?;
    Event::check(text).map_err(|source| DecodeError::Envelope { at, source })
}

/// The format-detecting event decoder (or one for a fixed format).
#[derive(Debug)]
pub struct Decoder {
    inner: Inner,
    options: DecodeOptions,
}

#[derive(Debug)]
enum Inner {
    Detecting {
        head: Vec<u8>,
        eof: bool,
    },
    Json(JsonArrayDecoder),
    Ndjson(NdjsonDecoder),
    Sse(SseEventDecoder),
    /// Empty stream, or detection failed.
    Done,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new(DecodeOptions::default())
    }
}

impl Decoder {
    /// A decoder with these options.
    pub fn new(options: DecodeOptions) -> Decoder {
        let inner = match options.format {
            None => Inner::Detecting {
                head: Vec::new(),
                eof: false,
            },
            Some(format) => Decoder::inner_for(format, &options),
        };
        Decoder { inner, options }
    }

    /// A decoder for a known format, with the default maximum event size.
    pub fn with_format(format: Format) -> Decoder {
        Decoder::new(DecodeOptions::format(format))
    }

    fn inner_for(format: Format, options: &DecodeOptions) -> Inner {
        match format {
            Format::Json => Inner::Json(JsonArrayDecoder::new(options)),
            Format::Ndjson => Inner::Ndjson(NdjsonDecoder::new(options)),
            Format::Sse => Inner::Sse(SseEventDecoder::new(options)),
        }
    }

    /// The format, once known (given, or detected from the first bytes).
    pub fn format(&self) -> Option<Format> {
        match self.inner {
            Inner::Json(_) => Some(Format::Json),
            Inner::Ndjson(_) => Some(Format::Ndjson),
            Inner::Sse(_) => Some(Format::Sse),
            Inner::Detecting { .. } | Inner::Done => None,
        }
    }

    /// Tries to settle the format. Returns an error when detection fails.
    fn detect(&mut self) -> Result<(), DecodeError> {
        let Inner::Detecting { head, eof } = &mut self.inner else {
            return Ok(());
        };
        match detect_format(head, *eof) {
            Detection::NeedMore => {
                if head.len() > self.options.max_event_size {
                    let byte = head.len() as u64;
                    self.inner = Inner::Done;
                    return Err(DecodeError::TooLarge {
                        at: Position {
                            index: 0,
                            line: 1,
                            byte,
                        },
                        limit: self.options.max_event_size,
                    });
                }
                Ok(())
            }
            Detection::Empty => {
                self.inner = Inner::Done;
                Ok(())
            }
            Detection::Unknown { at } => {
                let found = match head[at] {
                    b if b.is_ascii_graphic() => format!("`{}`", b as char),
                    b => format!("byte 0x{b:02x}"),
                };
                self.inner = Inner::Done;
                Err(DecodeError::UnknownFormat {
                    byte: at as u64,
                    found,
                })
            }
            Detection::Format(format) => {
                let head = std::mem::take(head);
                let eof = *eof;
                let mut inner = Decoder::inner_for(format, &self.options);
                match &mut inner {
                    Inner::Json(d) => feed(d, &head, eof),
                    Inner::Ndjson(d) => feed(d, &head, eof),
                    Inner::Sse(d) => feed(d, &head, eof),
                    Inner::Detecting { .. } | Inner::Done => {}
                }
                self.inner = inner;
                Ok(())
            }
        }
    }
}

fn feed<D: PushDecoder>(decoder: &mut D, bytes: &[u8], eof: bool) {
    decoder.push(bytes);
    if eof {
        decoder.finish();
    }
}

impl PushDecoder for Decoder {
    type Item = Event;

    fn push(&mut self, bytes: &[u8]) {
        match &mut self.inner {
            Inner::Detecting { head, .. } => head.extend_from_slice(bytes),
            Inner::Json(d) => d.push(bytes),
            Inner::Ndjson(d) => d.push(bytes),
            Inner::Sse(d) => d.push(bytes),
            Inner::Done => {}
        }
    }

    fn finish(&mut self) {
        match &mut self.inner {
            Inner::Detecting { eof, .. } => *eof = true,
            Inner::Json(d) => d.finish(),
            Inner::Ndjson(d) => d.finish(),
            Inner::Sse(d) => d.finish(),
            Inner::Done => {}
        }
    }

    fn pull(&mut self) -> Option<Result<Event, DecodeError>> {
        if let Err(e) = self.detect() {
            return Some(Err(e));
        }
        match &mut self.inner {
            Inner::Detecting { .. } | Inner::Done => None,
            Inner::Json(d) => d.pull(),
            Inner::Ndjson(d) => d.pull(),
            Inner::Sse(d) => d.pull(),
        }
    }

    fn position(&self) -> Position {
        match &self.inner {
            Inner::Detecting { .. } | Inner::Done => Position {
                index: 0,
                line: 1,
                byte: 0,
            },
            Inner::Json(d) => d.position(),
            Inner::Ndjson(d) => d.position(),
            Inner::Sse(d) => d.position(),
        }
    }
}

/// Decodes a complete in-memory stream (format detected unless given).
///
/// Returns the events, or the first error.
pub fn decode_all(bytes: &[u8], options: DecodeOptions) -> Result<Vec<Event>, DecodeError> {
    let mut decoder = Decoder::new(options);
    decoder.push(bytes);
    decoder.finish();
    let mut events = Vec::new();
    while let Some(item) = decoder.pull() {
        events.push(item?);
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Texts, check_splits};

    #[test]
    fn detection_from_the_first_bytes() {
        let cases: [(&[u8], bool, Detection); 16] = [
            (b"[", false, Detection::Format(Format::Json)),
            (b" \r\n\t{", false, Detection::Format(Format::Ndjson)),
            (b"\xEF\xBB\xBF[", false, Detection::Format(Format::Json)),
            (b"\xEF\xBB", false, Detection::NeedMore),
            (b"data:", false, Detection::Format(Format::Sse)),
            (b"\nid: 1", false, Detection::Format(Format::Sse)),
            (b"event:x", false, Detection::Format(Format::Sse)),
            (b"retry: 1", false, Detection::Format(Format::Sse)),
            (b": hi", false, Detection::Format(Format::Sse)),
            (b"dat", false, Detection::NeedMore),
            (b"dat", true, Detection::Unknown { at: 0 }),
            (b"  ", false, Detection::NeedMore),
            (b"  ", true, Detection::Empty),
            (b"", true, Detection::Empty),
            (b"\xEF\xBB\xBF  x", false, Detection::Unknown { at: 5 }),
            (b"datum:", false, Detection::Unknown { at: 0 }),
        ];
        for (input, complete, expected) in cases {
            assert_eq!(detect_format(input, complete), expected, "{input:?}");
        }
    }

    fn auto(input: &[u8]) -> Vec<Result<String, String>> {
        check_splits(|| Texts(Decoder::default()), input)
    }

    #[test]
    fn the_decoder_detects_every_format() {
        let expected = vec![
            Ok(r#"{"type":"A"}"#.to_owned()),
            Ok(r#"{"type":"B"}"#.to_owned()),
        ];
        assert_eq!(
            auto(b"\xEF\xBB\xBF [{\"type\":\"A\"},{\"type\":\"B\"}]"),
            expected
        );
        assert_eq!(auto(b"\n{\"type\":\"A\"}\n{\"type\":\"B\"}\n"), expected);
        assert_eq!(
            auto(b"\r\n: x\r\ndata: {\"type\":\"A\"}\r\n\r\nid: 1\ndata: {\"type\":\"B\"}\n\n"),
            expected
        );
        assert_eq!(auto(b" \n "), vec![]);
        assert_eq!(
            auto(b"  hello"),
            vec![Err("byte 2: cannot detect the stream format: expected `[` (JSON array), `{` (NDJSON) or an SSE field (`data:`, `id:`, `event:`, `retry:`, `:`), found `h`".to_owned())]
        );
    }

    #[test]
    fn the_decoder_reports_its_format() {
        let mut d = Decoder::default();
        assert_eq!(d.format(), None);
        d.push(b"da");
        assert!(d.pull().is_none());
        assert_eq!(d.format(), None);
        d.push(b"ta: {\"type\":\"A\"}\n\n");
        assert!(d.pull().is_some_and(|r| r.is_ok()));
        assert_eq!(d.format(), Some(Format::Sse));
    }

    #[test]
    fn detection_does_not_buffer_without_bound() {
        let mut d = Decoder::new(DecodeOptions::default().with_max_event_size(16));
        d.push(&[b'\n'; 64]);
        assert!(matches!(d.pull(), Some(Err(DecodeError::TooLarge { .. }))));
        assert!(d.pull().is_none());
    }

    #[test]
    fn decode_all_stops_at_the_first_error() {
        let events = decode_all(b"{\"type\":\"A\"}\n", DecodeOptions::default()).unwrap();
        assert_eq!(events.len(), 1);
        let err = decode_all(b"{\"type\":\"A\"}\nnope\n", DecodeOptions::default()).unwrap_err();
        assert_eq!(
            err.position(),
            Some(Position {
                index: 1,
                line: 2,
                byte: 13
            })
        );
        assert!(err.is_recoverable());
        assert_eq!("jsonl".parse::<Format>(), Ok(Format::Ndjson));
        assert!("xml".parse::<Format>().is_err());
    }
}
