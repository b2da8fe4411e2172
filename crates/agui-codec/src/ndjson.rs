//! NDJSON: one event per line.
//!
//! Lines end with `\n` or `\r\n`; blank lines (spaces, tabs, a lone `\r`) are
//! skipped and take no event index. The last line needs no line end.

use agui_protocol::Event;

use crate::buffer::Buffer;
use crate::{DecodeError, DecodeOptions, Position, PushDecoder, parse_event};

/// Push decoder for NDJSON.
#[derive(Debug)]
pub struct NdjsonDecoder {
    buf: Buffer,
    /// How far (from the buffer start) we already know there is no `\n`.
    scanned: usize,
    index: u64,
    max: usize,
    bom_done: bool,
    failed: bool,
}

impl NdjsonDecoder {
    /// A decoder with the given options (the format in them is ignored).
    pub fn new(options: &DecodeOptions) -> NdjsonDecoder {
        NdjsonDecoder {
            buf: Buffer::new(),
            scanned: 0,
            index: 0,
            max: options.max_event_size,
            bom_done: false,
            failed: false,
        }
    }

    fn at(&self) -> Position {
        Position {
            index: self.index,
            line: self.buf.line(),
            byte: self.buf.offset(),
        }
    }

    fn fail(&mut self, err: DecodeError) -> Option<Result<Event, DecodeError>> {
        self.failed = true;
        self.buf.clear();
        Some(Err(err))
    }
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r'))
}

/// What one whole line (without its `\n`) is.
enum LineKind<'a> {
    /// Longer than the maximum event size.
    TooLarge,
    /// Spaces, tabs and `\r` only: skipped, and takes no event index.
    Blank,
    /// An event's text (a final `\r` dropped).
    Event(&'a [u8]),
}

/// The line rules that [`NdjsonDecoder`] and [`Lines`] share.
fn classify(line: &[u8], max: usize) -> LineKind<'_> {
    let line = match line {
        [rest @ .., b'\r'] => rest,
        _ => line,
    };
    // The limit applies to blank lines too, so that the outcome does not
    // depend on whether a line arrived whole or in pieces.
    if line.len() > max {
        LineKind::TooLarge
    } else if is_blank(line) {
        LineKind::Blank
    } else {
        LineKind::Event(line)
    }
}

/// A non-blank line of a piece of NDJSON held whole, or the error that ends
/// the piece.
pub(crate) enum Line {
    /// An event's text is `piece[start..end]`; `at` is its position.
    Event {
        start: usize,
        end: usize,
        at: Position,
    },
    /// The line is longer than the maximum event size (decoding ends).
    TooLarge(DecodeError),
}

/// The lines of a piece of NDJSON held whole (it starts at a line start and
/// ends at a line end or at the stream's end), by the same rules as
/// [`NdjsonDecoder`]: a byte order mark at the stream's start is skipped,
/// `\r\n` ends a line too, blank lines take no event index, a line over the
/// maximum size ends decoding.
pub(crate) struct Lines {
    /// Offset in the piece of the next line.
    pos: usize,
    /// Offset of the piece in the stream.
    base: u64,
    /// The piece is the stream's start (its byte order mark is not data).
    first: bool,
    max: usize,
    index: u64,
    line: u64,
    done: bool,
}

impl Lines {
    pub(crate) fn new(base: u64, first: bool, max: usize) -> Lines {
        Lines {
            pos: 0,
            base,
            first,
            max,
            index: 0,
            line: 1,
            done: false,
        }
    }

    /// The next line; `bytes` holds the piece from byte `offset` on (the
    /// caller may move what remains of the piece elsewhere between calls).
    pub(crate) fn next_in(&mut self, bytes: &[u8], offset: usize) -> Option<Line> {
        if self.done {
            return None;
        }
        if std::mem::take(&mut self.first)
            && self.pos == 0
            && offset == 0
            && bytes.starts_with(b"\xEF\xBB\xBF")
        {
            self.pos = 3;
        }
        loop {
            let rest = &bytes[(self.pos - offset).min(bytes.len())..];
            if rest.is_empty() {
                self.done = true;
                return None;
            }
            let (line_len, consumed) = match memchr::memchr(b'\n', rest) {
                Some(i) => (i, i + 1),
                None => (rest.len(), rest.len()),
            };
            let at = Position {
                index: self.index,
                line: self.line,
                byte: self.base + self.pos as u64,
            };
            let start = self.pos;
            let kind = classify(&rest[..line_len], self.max);
            self.pos += consumed;
            self.line += u64::from(consumed > line_len);
            match kind {
                LineKind::TooLarge => {
                    self.done = true;
                    let limit = self.max;
                    return Some(Line::TooLarge(DecodeError::TooLarge { at, limit }));
                }
                LineKind::Blank => continue,
                LineKind::Event(line) => {
                    self.index += 1;
                    let end = start + line.len();
                    return Some(Line::Event { start, end, at });
                }
            }
        }
    }

    /// How many event indexes and line ends the piece held so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.index, self.line - 1)
    }
}

impl PushDecoder for NdjsonDecoder {
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
            let bytes = self.buf.bytes();
            let (line_len, consumed) = match memchr::memchr(b'\n', &bytes[self.scanned..]) {
                Some(i) => (self.scanned + i, self.scanned + i + 1),
                None if self.buf.eof => {
                    if bytes.is_empty() {
                        return None;
                    }
                    (bytes.len(), bytes.len())
                }
                None => {
                    self.scanned = bytes.len();
                    // One byte of slack for a `\r` before the line end.
                    if bytes.len() > self.max.saturating_add(1) {
                        let at = self.at();
                        let limit = self.max;
                        return self.fail(DecodeError::TooLarge { at, limit });
                    }
                    return None;
                }
            };
            self.scanned = 0;
            let line = match classify(&bytes[..line_len], self.max) {
                LineKind::TooLarge => {
                    let at = self.at();
                    let limit = self.max;
                    return self.fail(DecodeError::TooLarge { at, limit });
                }
                LineKind::Blank => {
                    self.buf.consume_counted(consumed, 1);
                    continue;
                }
                LineKind::Event(line) => line,
            };
            let at = self.at();
            let result = parse_event(line, at);
            self.index += 1;
            self.buf
                .consume_counted(consumed, u64::from(consumed > line_len));
            return Some(result);
        }
    }

    fn position(&self) -> Position {
        self.at()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Texts, check_splits};

    fn decode(input: &[u8], max: usize) -> Vec<Result<String, String>> {
        let opts = DecodeOptions::default().with_max_event_size(max);
        check_splits(|| Texts(NdjsonDecoder::new(&opts)), input)
    }

    fn ok(s: &str) -> Result<String, String> {
        Ok(s.to_owned())
    }

    #[test]
    fn lines_blank_lines_crlf_and_no_final_newline() {
        let input = b"{\"type\":\"A\"}\n\n  \t\r\n{\"type\":\"B\",\"x\":1.10}\r\n{\"type\":\"C\"}";
        assert_eq!(
            decode(input, 1 << 20),
            vec![
                ok(r#"{"type":"A"}"#),
                ok(r#"{"type":"B","x":1.10}"#),
                ok(r#"{"type":"C"}"#)
            ]
        );
        assert_eq!(decode(b"", 100), vec![]);
        assert_eq!(decode(b"\n\r\n \n", 100), vec![]);
    }

    #[test]
    fn leading_bom_is_skipped() {
        assert_eq!(
            decode(b"\xEF\xBB\xBF{\"type\":\"A\"}\n", 100),
            vec![ok(r#"{"type":"A"}"#)]
        );
    }

    #[test]
    fn bad_lines_say_where_and_decoding_goes_on() {
        let input = b"{\"type\":\"A\"}\n\n{\"type\":1}\n{\"type\":\"B\"} x\n\xff\xfe\n[]\n{\"type\":\"C\"}\n";
        let got = decode(input, 1 << 20);
        assert_eq!(got.len(), 6);
        assert_eq!(got[0], ok(r#"{"type":"A"}"#));
        let errs: Vec<&String> = got[1..5].iter().map(|r| r.as_ref().unwrap_err()).collect();
        assert!(
            errs[0].starts_with("event 1 (line 3, byte 14): not an AG-UI event"),
            "{}",
            errs[0]
        );
        assert!(errs[0].contains("\"type\" must be a string"));
        assert!(
            errs[1].starts_with("event 2 (line 4, byte 25)"),
            "{}",
            errs[1]
        );
        assert_eq!(
            errs[2],
            "event 3 (line 5, byte 40): invalid UTF-8 at byte 40"
        );
        assert!(
            errs[3].starts_with("event 4 (line 6, byte 43)"),
            "{}",
            errs[3]
        );
        assert_eq!(got[5], ok(r#"{"type":"C"}"#));
    }

    #[test]
    fn lines_longer_than_the_maximum_end_the_stream() {
        let input = b"{\"type\":\"A\"}\n{\"type\":\"BBBBBB\"}\n{\"type\":\"C\"}\n";
        let got = decode(input, 12);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], ok(r#"{"type":"A"}"#));
        assert_eq!(
            got[1],
            Err("event 1 (line 2, byte 13): event exceeds the maximum size of 12 bytes".to_owned())
        );
        // Exactly the maximum is fine, with or without CR.
        assert_eq!(
            decode(b"{\"type\":\"A\"}\r\n", 12),
            vec![ok(r#"{"type":"A"}"#)]
        );
        // A line that never ends is cut off early.
        let mut d = NdjsonDecoder::new(&DecodeOptions::default().with_max_event_size(12));
        d.push(&[b' '; 100]);
        assert!(matches!(d.pull(), Some(Err(DecodeError::TooLarge { .. }))));
        assert!(d.pull().is_none());
    }

    #[test]
    fn long_blank_lines_fail_whether_whole_or_in_pieces() {
        // Found by fuzzing: a long blank line was skipped when it arrived
        // whole but rejected when it arrived in pieces.
        let input = format!("{}\n{{\"type\":\"A\"}}\n", " ".repeat(20));
        let got = decode(input.as_bytes(), 12);
        assert_eq!(
            got,
            vec![Err(
                "event 0 (line 1, byte 0): event exceeds the maximum size of 12 bytes".to_owned()
            )]
        );
    }
}
