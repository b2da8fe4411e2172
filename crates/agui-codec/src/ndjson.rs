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

    /// A decoder for the rest of a stream cut at a line start: a byte order
    /// mark there is data, not the stream's mark (which only the first
    /// bytes may hold).
    pub(crate) fn continuing(options: &DecodeOptions) -> NdjsonDecoder {
        NdjsonDecoder {
            bom_done: true,
            ..NdjsonDecoder::new(options)
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
            let mut line = &bytes[..line_len];
            if let [rest @ .., b'\r'] = line {
                line = rest;
            }
            self.scanned = 0;
            // The limit applies to blank lines too, so that the outcome does
            // not depend on whether a line arrived whole or in pieces.
            if line.len() > self.max {
                let at = self.at();
                let limit = self.max;
                return self.fail(DecodeError::TooLarge { at, limit });
            }
            if is_blank(line) {
                self.buf.consume_counted(consumed, 1);
                continue;
            }
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
