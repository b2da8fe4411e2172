//! A streaming JSON array of events: `[ {..}, {..} ]`.
//!
//! Elements are cut by scanning string and bracket depth, then validated one
//! by one with [`Event::from_json`], so memory is bounded by the largest event
//! and never by the stream. Elements may span lines and be indented.

use std::io;

use agui_protocol::Event;

use crate::buffer::Buffer;
use crate::chunk::{EventChunk, scan_whole};
use crate::threaded::{self, ChunkDecoder, Source};
use crate::{DecodeError, DecodeOptions, Position, PushDecoder, parse_event};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before `[`.
    Start,
    /// Just after `[`: an element or `]`.
    AfterOpen,
    /// After `,`: an element.
    BeforeElement,
    /// Inside an element that starts at the buffer start.
    InElement,
    /// After an element: `,` or `]`.
    AfterElement,
    /// After `]`: only whitespace may follow.
    Done,
}

/// Push decoder for a JSON array of events.
#[derive(Debug)]
pub struct JsonArrayDecoder {
    buf: Buffer,
    state: State,
    /// Scan position inside the current element, from the buffer start; may
    /// point one past the end after a `\` at the end of the input.
    scan: usize,
    depth: u64,
    in_string: bool,
    index: u64,
    max: usize,
    bom_done: bool,
    failed: bool,
    /// The scan's member table of the last element taken whole by
    /// [`PushDecoder::pull`] (kept for its allocation).
    members: Vec<agui_protocol::Member>,
}

impl JsonArrayDecoder {
    /// A decoder with the given options (the format in them is ignored).
    pub fn new(options: &DecodeOptions) -> JsonArrayDecoder {
        JsonArrayDecoder {
            buf: Buffer::new(),
            state: State::Start,
            scan: 0,
            depth: 0,
            in_string: false,
            index: 0,
            max: options.max_event_size,
            bom_done: false,
            failed: false,
            members: Vec::new(),
        }
    }

    /// A decoder for a piece of an array that starts where an element
    /// starts, right after a `,` (a split file's chunk): no byte order mark
    /// and no `[` are looked for.
    pub(crate) fn mid_stream(options: &DecodeOptions) -> JsonArrayDecoder {
        let mut decoder = JsonArrayDecoder::new(options);
        decoder.state = State::BeforeElement;
        decoder.bom_done = true;
        decoder
    }

    fn at(&self) -> Position {
        Position {
            index: self.index,
            line: self.buf.line(),
            byte: self.buf.offset(),
        }
    }

    fn fail<T>(&mut self, err: DecodeError) -> Option<Result<T, DecodeError>> {
        self.failed = true;
        self.buf.clear();
        Some(Err(err))
    }

    fn unexpected<T>(&mut self, expected: &str) -> Option<Result<T, DecodeError>> {
        let at = self.at();
        let found = describe(self.buf.bytes());
        self.fail(DecodeError::Syntax {
            at,
            message: format!("expected {expected}, found {found}"),
        })
    }

    /// Skips whitespace; returns the next byte, if any is buffered.
    fn skip_ws(&mut self) -> Option<u8> {
        let bytes = self.buf.bytes();
        let n = bytes
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .unwrap_or(bytes.len());
        let next = bytes.get(n).copied();
        self.buf.consume(n);
        next
    }

    /// Advances the element scan; returns the element length once complete.
    fn scan_element(&mut self) -> Option<usize> {
        let bytes = self.buf.bytes();
        let len = bytes.len();
        let mut i = self.scan;
        while i < len {
            if self.in_string {
                match memchr::memchr2(b'"', b'\\', &bytes[i..]) {
                    None => i = len,
                    Some(k) => {
                        i += k;
                        if bytes[i] == b'\\' {
                            i += 2;
                        } else {
                            self.in_string = false;
                            i += 1;
                        }
                    }
                }
            } else {
                match bytes[i] {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            self.scan = 0;
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        self.scan = i;
        None
    }
}

/// How [`JsonArrayDecoder::pull_with`] makes an item of an element.
trait Take {
    type Item;

    /// The element that starts `bytes`, when it can be taken from there
    /// without knowing where it ends (and lies on one line), and its
    /// length; `None` leaves it to [`Take::element`] once the element scan
    /// has found its end. For any element both take, they give the same.
    fn whole(&mut self, _bytes: &[u8]) -> Option<(Self::Item, usize)> {
        None
    }

    /// The element that is exactly `bytes`, found at `at`.
    fn element(&mut self, bytes: &[u8], at: Position) -> Result<Self::Item, DecodeError>;
}

/// Elements as owned events: one the envelope scanner accepts where it
/// starts is found and checked in one pass, as [`IntoChunk`] does.
struct Owned<'m> {
    /// Where the scan records members (dropped: an owned event keeps none).
    members: &'m mut Vec<agui_protocol::Member>,
    max: usize,
}

impl Take for Owned<'_> {
    type Item = Event;

    fn whole(&mut self, bytes: &[u8]) -> Option<(Event, usize)> {
        self.members.clear();
        let (ty, json) = scan_whole(bytes, self.members, self.max)?;
        Some((
            agui_protocol::EventRef::from_checked(json, &ty).to_event(),
            json.len(),
        ))
    }

    fn element(&mut self, bytes: &[u8], at: Position) -> Result<Event, DecodeError> {
        parse_event(bytes, at)
    }
}

/// Elements appended to a chunk: one the envelope scanner accepts where it
/// starts is found and checked in one pass; any other (not buffered whole
/// yet, deferred by the scanner, invalid, too large) is cut by the element
/// scan and checked alone, which says what is wrong with it.
struct IntoChunk<'c> {
    chunk: &'c mut EventChunk,
    tables: bool,
    max: usize,
}

impl Take for IntoChunk<'_> {
    type Item = ();

    fn whole(&mut self, bytes: &[u8]) -> Option<((), usize)> {
        let n = self.chunk.push_prefix(bytes, self.tables, self.max)?;
        Some(((), n))
    }

    fn element(&mut self, bytes: &[u8], at: Position) -> Result<(), DecodeError> {
        self.chunk.push_checked(bytes, at, self.tables)
    }
}

/// A printable description of the byte that starts `bytes`.
fn describe(bytes: &[u8]) -> String {
    match bytes.first() {
        None => "the end of the stream".to_owned(),
        Some(&b) if b.is_ascii_graphic() => format!("`{}`", b as char),
        Some(&b) => format!("byte 0x{b:02x}"),
    }
}

impl ChunkDecoder for JsonArrayDecoder {
    const START_AT: fn(&dyn Source, u64, u64) -> io::Result<u64> = threaded::element_start_at;
    const GUESSED_STARTS: bool = true;
    // Read in small pieces: the decoder copies each into its buffer, which
    // grows with them (measured, `compact` of a 1M-event array, peak: 18.8
    // MB with 256 KiB pieces, 15.4 to 16.1 MB with 64 KiB, 13.6 to 14.3 MB
    // with 16 KiB, as fast).
    const PIECE: usize = threaded::PIECE / 16;
    // The array's `]` ends it.
    const FINISH_AT_CHUNK_END: bool = false;

    fn starting(first: bool, options: &DecodeOptions) -> Self {
        if first {
            JsonArrayDecoder::new(options)
        } else {
            JsonArrayDecoder::mid_stream(options)
        }
    }

    fn pull_into(
        &mut self,
        chunk: &mut EventChunk,
        tables: bool,
    ) -> Option<Result<(), DecodeError>> {
        let max = self.max;
        self.pull_with(&mut IntoChunk { chunk, tables, max })
    }

    /// Decoded elements and bad ones.
    fn indexes(&self) -> u64 {
        self.index
    }

    fn line_ends(&self) -> u64 {
        self.buf.line() - 1
    }

    fn buffer(&mut self) -> (&mut Buffer, bool) {
        (&mut self.buf, self.failed)
    }

    /// Everything pushed is consumed and the next byte must start an
    /// element: the state a [`JsonArrayDecoder::mid_stream`] decoder starts
    /// in, so the next chunk's decoder takes over without a seam.
    fn at_chunk_start(&self) -> bool {
        !self.failed && self.state == State::BeforeElement && self.buf.len() == 0
    }

    fn stopped(&self, _: bool) -> bool {
        self.failed
    }
}

impl PushDecoder for JsonArrayDecoder {
    type Item = Event;

    fn push(&mut self, bytes: &[u8]) {
        if !self.failed {
            self.buf.push(bytes);
        }
    }

    fn finish(&mut self) {
        self.buf.eof = true;
    }

    fn pull(&mut self) -> Option<Result<Event, DecodeError>> {
        let mut members = std::mem::take(&mut self.members);
        let max = self.max;
        let item = self.pull_with(&mut Owned {
            members: &mut members,
            max,
        });
        self.members = members;
        item
    }

    fn position(&self) -> Position {
        self.at()
    }
}

impl JsonArrayDecoder {
    /// The next element, as `take` makes it.
    fn pull_with<T: Take>(&mut self, take: &mut T) -> Option<Result<T::Item, DecodeError>> {
        if self.failed {
            return None;
        }
        if !self.bom_done {
            if !self.buf.skip_bom() {
                return None;
            }
            self.bom_done = true;
        }
        loop {
            match self.state {
                State::Start => match self.skip_ws() {
                    Some(b'[') => {
                        self.buf.consume_counted(1, 0);
                        self.state = State::AfterOpen;
                    }
                    Some(_) => return self.unexpected("`[` to open the array of events"),
                    None if self.buf.eof => {
                        return self.unexpected("`[` to open the array of events");
                    }
                    None => return None,
                },
                State::AfterOpen => match self.skip_ws() {
                    Some(b']') => {
                        self.buf.consume_counted(1, 0);
                        self.state = State::Done;
                    }
                    Some(_) => self.state = State::BeforeElement,
                    None if self.buf.eof => {
                        let at = self.at();
                        return self.fail(DecodeError::Truncated {
                            at,
                            context: "inside the JSON array (no closing `]`)",
                        });
                    }
                    None => return None,
                },
                State::BeforeElement => match self.skip_ws() {
                    Some(b'{') => {
                        self.state = State::InElement;
                        self.scan = 0;
                        self.depth = 0;
                        self.in_string = false;
                    }
                    Some(_) => return self.unexpected("an event object `{`"),
                    None if self.buf.eof => {
                        let at = self.at();
                        return self.fail(DecodeError::Truncated {
                            at,
                            context: "inside the JSON array (no closing `]`)",
                        });
                    }
                    None => return None,
                },
                // A fresh element that can be taken whole from where it
                // starts: no element scan.
                State::InElement if self.scan == 0 => {
                    if let Some((item, n)) = take.whole(self.buf.bytes()) {
                        // It lies on one line.
                        self.buf.consume_counted(n, 0);
                        self.index += 1;
                        self.state = State::AfterElement;
                        return Some(Ok(item));
                    }
                    // The element scan goes on past its `{` (it is not
                    // tried again for this element).
                    self.scan = 1;
                    self.depth = 1;
                }
                State::InElement => match self.scan_element() {
                    Some(n) => {
                        let at = self.at();
                        if n > self.max {
                            let limit = self.max;
                            return self.fail(DecodeError::TooLarge { at, limit });
                        }
                        let result = take.element(&self.buf.bytes()[..n], at);
                        self.buf.consume(n);
                        self.index += 1;
                        self.state = State::AfterElement;
                        return Some(result);
                    }
                    None => {
                        let at = self.at();
                        if self.buf.len() > self.max {
                            let limit = self.max;
                            return self.fail(DecodeError::TooLarge { at, limit });
                        }
                        if self.buf.eof {
                            return self.fail(DecodeError::Truncated {
                                at,
                                context: "inside an event",
                            });
                        }
                        return None;
                    }
                },
                State::AfterElement => match self.skip_ws() {
                    Some(b',') => {
                        self.buf.consume_counted(1, 0);
                        self.state = State::BeforeElement;
                    }
                    Some(b']') => {
                        self.buf.consume_counted(1, 0);
                        self.state = State::Done;
                    }
                    Some(_) => return self.unexpected("`,` or `]` after an event"),
                    None if self.buf.eof => {
                        let at = self.at();
                        return self.fail(DecodeError::Truncated {
                            at,
                            context: "inside the JSON array (no closing `]`)",
                        });
                    }
                    None => return None,
                },
                State::Done => match self.skip_ws() {
                    Some(_) => return self.unexpected("nothing after the closing `]`"),
                    None => return None,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Texts, check_splits};

    fn decode(input: &str) -> Vec<Result<String, String>> {
        decode_max(input, 1 << 20)
    }

    fn decode_max(input: &str, max: usize) -> Vec<Result<String, String>> {
        let opts = DecodeOptions::default().with_max_event_size(max);
        check_splits(|| Texts(JsonArrayDecoder::new(&opts)), input.as_bytes())
    }

    fn ok(s: &str) -> Result<String, String> {
        Ok(s.to_owned())
    }

    #[test]
    fn arrays_of_any_layout() {
        assert_eq!(decode("[]"), vec![]);
        assert_eq!(decode(" \r\n[ \n ] \n"), vec![]);
        assert_eq!(
            decode("[{\"type\":\"A\"},{\"type\":\"B\"}]"),
            vec![ok(r#"{"type":"A"}"#), ok(r#"{"type":"B"}"#)]
        );
        assert_eq!(
            decode("\u{feff}[\n  {\n    \"type\": \"A\",\n    \"n\": [1, {\"x\": 1.10}]\n  }\n]\n"),
            vec![ok(r#"{"type":"A","n":[1,{"x":1.10}]}"#)]
        );
    }

    #[test]
    fn brackets_and_quotes_inside_strings() {
        let text = r#"{"type":"A","s":"}]{[\"\\","t":"\\\"}"}"#;
        assert_eq!(
            decode(&format!("[{text},{text}]")),
            vec![ok(text), ok(text)]
        );
    }

    #[test]
    fn structural_errors_end_the_stream() {
        let cases = [
            (
                "",
                "event 0 (line 1, byte 0): malformed JSON array: expected `[` to open the array of events, found the end of the stream",
            ),
            (
                "{\"type\":\"A\"}",
                "event 0 (line 1, byte 0): malformed JSON array: expected `[` to open the array of events, found `{`",
            ),
            (
                "[",
                "event 0 (line 1, byte 1): the stream ended inside the JSON array (no closing `]`)",
            ),
            (
                "[1]",
                "event 0 (line 1, byte 1): malformed JSON array: expected an event object `{`, found `1`",
            ),
            (
                "[{\"type\":\"A\"},]",
                "event 1 (line 1, byte 14): malformed JSON array: expected an event object `{`, found `]`",
            ),
            (
                "[{\"type\":\"A\"}\n{\"type\":\"B\"}]",
                "event 1 (line 2, byte 14): malformed JSON array: expected `,` or `]` after an event, found `{`",
            ),
            (
                "[{\"type\":\"A\"}] x",
                "event 1 (line 1, byte 15): malformed JSON array: expected nothing after the closing `]`, found `x`",
            ),
            (
                "[{\"type\":\"A\"",
                "event 0 (line 1, byte 1): the stream ended inside an event",
            ),
            (
                "[{\"type\":\"A\"}",
                "event 1 (line 1, byte 13): the stream ended inside the JSON array (no closing `]`)",
            ),
        ];
        for (input, expected) in cases {
            let got = decode(input);
            assert_eq!(got.last(), Some(&Err(expected.to_owned())), "{input}");
        }
    }

    #[test]
    fn a_bad_element_says_where_and_decoding_goes_on() {
        let got = decode("[{\"type\":\"A\"},\n {\"type\":true},\n {\"a\":[}],{\"type\":\"B\"}]");
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], ok(r#"{"type":"A"}"#));
        let e1 = got[1].as_ref().unwrap_err();
        assert!(
            e1.starts_with("event 1 (line 2, byte 16): not an AG-UI event"),
            "{e1}"
        );
        let e2 = got[2].as_ref().unwrap_err();
        assert!(
            e2.starts_with("event 2 (line 3, byte 32): not an AG-UI event: invalid JSON"),
            "{e2}"
        );
        assert_eq!(got[3], ok(r#"{"type":"B"}"#));
    }

    #[test]
    fn elements_larger_than_the_maximum_end_the_stream() {
        assert_eq!(
            decode_max("[{\"type\":\"A\"}]", 12),
            vec![ok(r#"{"type":"A"}"#)]
        );
        let got = decode_max("[{\"type\":\"A\"},{\"type\":\"AB\"},{\"type\":\"C\"}]", 12);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[1],
            Err("event 1 (line 1, byte 14): event exceeds the maximum size of 12 bytes".to_owned())
        );
        let mut d = JsonArrayDecoder::new(&DecodeOptions::default().with_max_event_size(12));
        d.push(b"[{\"s\":\"");
        assert!(d.pull().is_none());
        d.push(&[b'x'; 64]);
        assert!(matches!(d.pull(), Some(Err(DecodeError::TooLarge { .. }))));
        assert!(d.pull().is_none());
    }

    #[test]
    fn memory_is_bounded_by_the_largest_event_not_the_stream() {
        let event = r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"some text"}"#;
        let mut d = JsonArrayDecoder::new(&DecodeOptions::default());
        d.push(b"[");
        let mut decoded = 0;
        let mut peak = 0;
        for i in 0..20_000 {
            let piece = if i == 0 {
                event.to_owned()
            } else {
                format!(",\n{event}")
            };
            for chunk in piece.as_bytes().chunks(37) {
                d.push(chunk);
                while let Some(e) = d.pull() {
                    e.unwrap();
                    decoded += 1;
                }
                peak = peak.max(d.buf.held());
            }
        }
        d.push(b"]");
        d.finish();
        assert!(d.pull().is_none());
        assert_eq!(decoded, 20_000);
        assert!(peak < 4 * event.len(), "peak buffer {peak} bytes");
    }
}
