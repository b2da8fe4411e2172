//! Server-sent events, as the WHATWG HTML standard parses them
//! (§9.2.6 "Interpreting an event stream").
//!
//! - Lines end with CRLF, LF or CR, in any mix; a CRLF split across two reads
//!   is one line end.
//! - A leading UTF-8 byte order mark is skipped.
//! - `:` starts a comment; `field:value` drops one space after the colon; a
//!   line without a colon is a field with an empty value.
//! - `data` lines are joined with `\n`; `event`, `id` (ignored when it holds
//!   U+0000) and `retry` (ASCII digits only) are kept; other fields are ignored.
//! - An empty line dispatches the frame; a frame without `data` is not
//!   dispatched.
//!
//! Two deliberate differences from WHATWG, both following the official
//! `@ag-ui/client` consumer: a final frame that is not followed by an empty
//! line is still dispatched at the end of the stream, and field lines that
//! are not valid UTF-8 are an error instead of being decoded with U+FFFD.

use std::io;

use agui_protocol::Event;

use crate::buffer::Buffer;
use crate::threaded::{self, ChunkDecoder, Source};
use crate::{DecodeError, DecodeOptions, Position, PushDecoder};

/// One dispatched SSE frame.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseFrame {
    /// The `id` field set within this frame, if any (the WHATWG "last event
    /// ID", which persists across frames, is [`SseDecoder::last_event_id`]).
    pub id: Option<String>,
    /// The `event` field set within this frame, if any.
    pub event: Option<String>,
    /// The `retry` field set within this frame, if any (milliseconds).
    pub retry: Option<u64>,
    /// The `data` lines joined with `\n`.
    pub data: String,
}

/// How much longer than the maximum event size a line may be: room for a
/// field name (`data: `). A frame's joined data must still fit the maximum.
const LINE_SLACK: usize = 16;

/// The fields of the frame being read.
#[derive(Debug, Default)]
struct Frame {
    data: String,
    has_data: bool,
    event: Option<String>,
    id: Option<String>,
    retry: Option<u64>,
    last_event_id: String,
    last_retry: Option<u64>,
    /// Where the frame's first data line starts.
    at: Position,
    /// A line of this frame was bad: ignore the rest of it.
    poisoned: bool,
}

impl Frame {
    fn reset(&mut self) {
        self.data.clear();
        self.has_data = false;
        self.event = None;
        self.id = None;
        self.retry = None;
        self.poisoned = false;
    }

    /// Processes one non-empty line.
    fn field(&mut self, line: &[u8], at: Position, max: usize) -> Result<(), DecodeError> {
        if line[0] == b':' || self.poisoned {
            return Ok(());
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &line[line.len()..]),
        };
        let text = |bytes| utf8(line, bytes, at);
        match name {
            b"data" => {
                let value = text(value)?;
                if !self.has_data {
                    self.at = at;
                    self.has_data = true;
                } else {
                    self.data.push('\n');
                }
                if self.data.len() + value.len() > max {
                    return Err(DecodeError::TooLarge {
                        at: self.at,
                        limit: max,
                    });
                }
                self.data.push_str(value);
            }
            b"event" => self.event = Some(text(value)?.to_owned()),
            b"id" if !value.contains(&0) => {
                let value = text(value)?;
                self.last_event_id.clear();
                self.last_event_id.push_str(value);
                self.id = Some(value.to_owned());
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Out-of-range values are ignored, as unparsable ones are.
                if let Ok(ms) = text(value)?.parse::<u64>() {
                    self.retry = Some(ms);
                    self.last_retry = Some(ms);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// `bytes` (a suffix of `line`) as text. Checked with `simdutf8` (about
/// twice as fast as `std` on event text: it was a ninth of the time of
/// reading a big SSE file); on bad bytes `std` finds where.
fn utf8<'a>(line: &[u8], bytes: &'a [u8], at: Position) -> Result<&'a str, DecodeError> {
    if let Ok(text) = simdutf8::basic::from_utf8(bytes) {
        return Ok(text);
    }
    std::str::from_utf8(bytes).map_err(|e| {
        let offset = line.len() - bytes.len();
        DecodeError::InvalidUtf8 {
            at,
            bad_byte: at.byte + (offset + e.valid_up_to()) as u64,
        }
    })
}

/// The frame-level state machine, shared by [`SseDecoder`] and
/// [`SseEventDecoder`].
#[derive(Debug)]
struct SseCore {
    buf: Buffer,
    /// How far (from the buffer start) we already know there is no line end.
    scanned: usize,
    /// The previous line ended with `\r`: a `\n` right after it is part of
    /// that line end.
    after_cr: bool,
    /// Line number (from 1) of the buffer start, counting every line end.
    line: u64,
    frame: Frame,
    /// Frames dispatched or rejected so far.
    frames: u64,
    max: usize,
    bom_done: bool,
    failed: bool,
}

/// What a step of the core produced.
enum Step {
    /// A frame is ready in `frame`.
    Frame,
    /// More input is needed (or the stream is over).
    Pending,
}

impl SseCore {
    fn new(options: &DecodeOptions) -> SseCore {
        SseCore {
            buf: Buffer::new(),
            scanned: 0,
            after_cr: false,
            line: 1,
            frame: Frame::default(),
            frames: 0,
            max: options.max_event_size,
            bom_done: false,
            failed: false,
        }
    }

    fn at(&self) -> Position {
        Position {
            index: self.frames,
            line: self.line,
            byte: self.buf.offset(),
        }
    }

    fn fail(&mut self, err: DecodeError) -> Result<Step, DecodeError> {
        self.failed = true;
        self.buf.clear();
        self.frame = Frame::default();
        Err(err)
    }

    /// Ends the frame at an empty line or the end of the stream.
    fn dispatch(&mut self) -> Option<Step> {
        if self.frame.has_data && !self.frame.poisoned {
            self.frame.has_data = false;
            self.frames += 1;
            Some(Step::Frame)
        } else {
            self.frame.reset();
            None
        }
    }

    /// Runs until a frame is ready, more input is needed, or an error.
    fn step(&mut self) -> Result<Step, DecodeError> {
        if self.failed {
            return Ok(Step::Pending);
        }
        if !self.bom_done {
            if !self.buf.skip_bom() {
                return Ok(Step::Pending);
            }
            self.bom_done = true;
        }
        loop {
            if self.after_cr {
                match self.buf.bytes().first() {
                    Some(b'\n') => {
                        self.buf.consume_counted(1, 0);
                        self.after_cr = false;
                    }
                    Some(_) => self.after_cr = false,
                    None if self.buf.eof => self.after_cr = false,
                    None => return Ok(Step::Pending),
                }
            }
            let bytes = self.buf.bytes();
            let (line_len, consumed) = match memchr::memchr2(b'\n', b'\r', &bytes[self.scanned..]) {
                Some(i) => {
                    let end = self.scanned + i;
                    if bytes[end] == b'\r' {
                        self.after_cr = true;
                    }
                    (end, end + 1)
                }
                None if self.buf.eof => {
                    if bytes.is_empty() {
                        // End of stream: dispatch what is pending.
                        return Ok(self.dispatch().unwrap_or(Step::Pending));
                    }
                    (bytes.len(), bytes.len())
                }
                None => {
                    self.scanned = bytes.len();
                    if bytes.len() > self.max.saturating_add(LINE_SLACK) {
                        let at = self.at();
                        let limit = self.max;
                        return self.fail(DecodeError::TooLarge { at, limit });
                    }
                    return Ok(Step::Pending);
                }
            };
            self.scanned = 0;
            if line_len == 0 {
                self.buf.consume_counted(consumed, 0);
                self.line += 1;
                match self.dispatch() {
                    Some(step) => return Ok(step),
                    None => continue,
                }
            }
            let at = self.at();
            if line_len > self.max.saturating_add(LINE_SLACK) {
                let limit = self.max;
                return self.fail(DecodeError::TooLarge { at, limit });
            }
            let result = self.frame.field(&bytes[..line_len], at, self.max);
            self.buf.consume_counted(consumed, 0);
            self.line += 1;
            match result {
                Ok(()) => {}
                Err(err @ DecodeError::TooLarge { .. }) => return self.fail(err),
                Err(err) => {
                    // The frame is unusable; skip to its end, keep its index.
                    if !self.frame.poisoned {
                        self.frame.poisoned = true;
                        self.frames += 1;
                    }
                    return Err(err);
                }
            }
        }
    }
}

/// Push decoder for SSE frames (the frame layer: ids, event names, retry).
#[derive(Debug)]
pub struct SseDecoder {
    core: SseCore,
}

impl SseDecoder {
    /// A frame decoder with the given options (the format in them is ignored).
    pub fn new(options: &DecodeOptions) -> SseDecoder {
        SseDecoder {
            core: SseCore::new(options),
        }
    }

    /// The WHATWG "last event ID": the value of the most recent `id` field,
    /// kept across frames (empty when none was seen).
    pub fn last_event_id(&self) -> &str {
        &self.core.frame.last_event_id
    }

    /// The most recent valid `retry` value, kept across frames.
    pub fn last_retry(&self) -> Option<u64> {
        self.core.frame.last_retry
    }
}

impl Default for SseDecoder {
    fn default() -> Self {
        SseDecoder::new(&DecodeOptions::default())
    }
}

impl PushDecoder for SseDecoder {
    type Item = SseFrame;

    fn push(&mut self, bytes: &[u8]) {
        if !self.core.failed {
            self.core.buf.push(bytes);
        }
    }

    fn finish(&mut self) {
        self.core.buf.eof = true;
    }

    fn pull(&mut self) -> Option<Result<SseFrame, DecodeError>> {
        match self.core.step() {
            Ok(Step::Pending) => None,
            Err(e) => Some(Err(e)),
            Ok(Step::Frame) => {
                let core = &mut self.core;
                let frame = SseFrame {
                    id: core.frame.id.take(),
                    event: core.frame.event.take(),
                    retry: core.frame.retry.take(),
                    data: std::mem::take(&mut core.frame.data),
                };
                core.frame.reset();
                Some(Ok(frame))
            }
        }
    }

    fn position(&self) -> Position {
        self.core.at()
    }
}

/// Push decoder for AG-UI events framed as SSE: each frame's data is one
/// event (the `event`, `id` and `retry` fields are not part of the event).
#[derive(Debug)]
pub struct SseEventDecoder {
    core: SseCore,
}

impl SseEventDecoder {
    /// An event decoder with the given options (the format in them is ignored).
    pub fn new(options: &DecodeOptions) -> SseEventDecoder {
        SseEventDecoder {
            core: SseCore::new(options),
        }
    }

    /// See [`SseDecoder::last_event_id`].
    pub fn last_event_id(&self) -> &str {
        &self.core.frame.last_event_id
    }

    /// A decoder for a piece of a stream that starts right after a frame's
    /// end (a split file's chunk): a byte order mark there is not the
    /// stream's and is not skipped.
    pub(crate) fn mid_stream(options: &DecodeOptions) -> SseEventDecoder {
        let mut decoder = SseEventDecoder::new(options);
        decoder.core.bom_done = true;
        decoder
    }
}

impl ChunkDecoder for SseEventDecoder {
    const START_AT: fn(&dyn Source, u64, u64) -> io::Result<u64> = threaded::frame_start_at;
    const GUESSED_STARTS: bool = false;
    const PIECE: usize = threaded::PIECE;
    // Frames never cross a chunk's edge.
    const FINISH_AT_CHUNK_END: bool = true;

    fn starting(first: bool, options: &DecodeOptions) -> Self {
        if first {
            SseEventDecoder::new(options)
        } else {
            SseEventDecoder::mid_stream(options)
        }
    }

    fn pull_into(
        &mut self,
        chunk: &mut crate::EventChunk,
        tables: bool,
    ) -> Option<Result<(), DecodeError>> {
        match self.core.step() {
            Ok(Step::Pending) => None,
            Err(e) => Some(Err(e)),
            Ok(Step::Frame) => {
                let at = self.core.frame.at;
                let result = chunk.push_checked_str(&self.core.frame.data, at, tables);
                self.core.frame.reset();
                Some(result)
            }
        }
    }

    /// Dispatched frames and bad ones.
    fn indexes(&self) -> u64 {
        self.core.frames
    }

    fn line_ends(&self) -> u64 {
        self.core.line - 1
    }

    fn buffer(&mut self) -> (&mut Buffer, bool) {
        (&mut self.core.buf, self.core.failed)
    }

    fn at_chunk_start(&self) -> bool {
        true
    }

    fn stopped(&self, fatal: bool) -> bool {
        fatal
    }
}

impl PushDecoder for SseEventDecoder {
    type Item = Event;

    fn push(&mut self, bytes: &[u8]) {
        if !self.core.failed {
            self.core.buf.push(bytes);
        }
    }

    fn finish(&mut self) {
        self.core.buf.eof = true;
    }

    fn pull(&mut self) -> Option<Result<Event, DecodeError>> {
        match self.core.step() {
            Ok(Step::Pending) => None,
            Err(e) => Some(Err(e)),
            Ok(Step::Frame) => {
                let at = self.core.frame.at;
                let result = Event::from_json(&self.core.frame.data)
                    .map_err(|source| DecodeError::Envelope { at, source });
                self.core.frame.reset();
                Some(result)
            }
        }
    }

    fn position(&self) -> Position {
        self.core.at()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Texts, check_splits, run_chunked};

    fn frames(input: &str) -> Vec<Result<SseFrame, String>> {
        check_splits(SseDecoder::default, input.as_bytes())
    }

    fn data(d: &str) -> Result<SseFrame, String> {
        Ok(SseFrame {
            data: d.to_owned(),
            ..SseFrame::default()
        })
    }

    #[test]
    fn one_space_after_the_colon_is_dropped() {
        assert_eq!(
            frames("data: a\n\ndata:b\n\ndata:  c\n\n"),
            vec![data("a"), data("b"), data(" c")]
        );
    }

    #[test]
    fn data_lines_are_joined_with_lf() {
        assert_eq!(
            frames("data: {\"a\":\ndata: 1}\n\ndata\ndata\n\n"),
            vec![data("{\"a\":\n1}"), data("\n")]
        );
    }

    #[test]
    fn empty_data_is_a_frame_and_no_data_is_none() {
        assert_eq!(frames("data:\n\n"), vec![data("")]);
        assert_eq!(frames("data\n\n"), vec![data("")]);
        assert_eq!(frames("event: x\n\nid: 1\n\n: hi\n\nretry: 5\n\n"), vec![]);
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        assert_eq!(
            frames(": comment\ndata: a\n:another\nfoo: bar\nDATA: no\ndata : no\n\n"),
            vec![data("a")]
        );
    }

    #[test]
    fn cr_lf_and_crlf_line_ends_mix() {
        let expected = vec![data("a"), data("b\nc"), data("d")];
        assert_eq!(
            frames("data: a\r\rdata: b\r\ndata: c\n\r\ndata: d\n\n"),
            expected
        );
        assert_eq!(
            frames("data: a\r\n\r\ndata: b\rdata: c\r\rdata: d\r\n\r\n"),
            expected
        );
        // A CR followed by LF is one line end, even split across reads; two
        // CRs are two line ends.
        assert_eq!(frames("data: x\r\r"), vec![data("x")]);
        assert_eq!(frames("data: x\r\n"), vec![data("x")]);
    }

    #[test]
    fn id_event_and_retry_fields() {
        let input = "id: 7\nevent: update\nretry: 1500\ndata: a\n\ndata: b\n\nid\ndata: c\n\n";
        let got = frames(input);
        assert_eq!(
            got,
            vec![
                Ok(SseFrame {
                    id: Some("7".into()),
                    event: Some("update".into()),
                    retry: Some(1500),
                    data: "a".into(),
                }),
                data("b"),
                Ok(SseFrame {
                    id: Some(String::new()),
                    data: "c".into(),
                    ..SseFrame::default()
                }),
            ]
        );
    }

    #[test]
    fn last_event_id_persists_and_nul_ids_are_ignored() {
        let mut d = SseDecoder::default();
        d.push(b"id: 1\ndata: a\n\ndata: b\n\nid: x\0y\ndata: c\n\nid: 2\n\n");
        d.finish();
        let mut seen = Vec::new();
        while let Some(f) = d.pull() {
            seen.push((f.unwrap().id, d.last_event_id().to_owned()));
        }
        assert_eq!(
            seen,
            vec![
                (Some("1".to_owned()), "1".to_owned()),
                (None, "1".to_owned()),
                (None, "1".to_owned()),
            ]
        );
        assert_eq!(d.last_event_id(), "2");
    }

    #[test]
    fn invalid_retry_values_are_ignored() {
        let got = frames(
            "retry: 12a\ndata: a\n\nretry:\ndata: b\n\nretry: 99999999999999999999999\ndata: c\n\nretry: -1\ndata: d\n\n",
        );
        assert_eq!(got, vec![data("a"), data("b"), data("c"), data("d")]);
    }

    #[test]
    fn leading_bom_is_skipped_once() {
        assert_eq!(frames("\u{feff}data: a\n\n"), vec![data("a")]);
        // A second BOM is part of a field name, so the field is unknown.
        assert_eq!(
            frames("\u{feff}\u{feff}data: a\n\ndata: b\n\n"),
            vec![data("b")]
        );
    }

    #[test]
    fn a_final_frame_without_empty_line_is_dispatched() {
        assert_eq!(frames("data: a\n\ndata: b"), vec![data("a"), data("b")]);
        assert_eq!(frames("data: a\ndata: b\n"), vec![data("a\nb")]);
        assert_eq!(frames(""), vec![]);
        assert_eq!(frames("\n\n\r\n"), vec![]);
    }

    #[test]
    fn invalid_utf8_skips_only_its_frame() {
        let got = check_splits(
            SseDecoder::default,
            b"data: a\n\ndata: \xff\ndata: x\n\ndata: b\n\n",
        );
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], data("a"));
        let err = got[1].as_ref().unwrap_err();
        assert!(err.contains("invalid UTF-8 at byte 15"), "{err}");
        assert!(err.contains("event 1 (line 3, byte 9)"), "{err}");
        assert_eq!(got[2], data("b"));
    }

    #[test]
    fn frames_larger_than_the_maximum_fail() {
        let opts = DecodeOptions::default().with_max_event_size(8);
        let ok = run_chunked(SseDecoder::new(&opts), b"data: 12345678\n\n", &[]);
        assert_eq!(ok, vec![data("12345678")]);
        let joined = check_splits(
            || SseDecoder::new(&opts),
            b"data: 1234\ndata: 5678\n\ndata: a\n\n",
        );
        assert_eq!(joined.len(), 1);
        assert!(
            joined[0]
                .as_ref()
                .unwrap_err()
                .contains("maximum size of 8 bytes")
        );
        let long_line = check_splits(
            || SseDecoder::new(&opts),
            format!(": {}\n\ndata: a\n\n", "x".repeat(40)).as_bytes(),
        );
        assert_eq!(long_line.len(), 1);
        assert!(long_line[0].is_err());
        // Memory stays bounded when a line never ends.
        let mut d = SseDecoder::new(&opts);
        d.push(b"data: ");
        assert!(d.pull().is_none());
        d.push(&[b'x'; 64]);
        assert!(matches!(d.pull(), Some(Err(DecodeError::TooLarge { .. }))));
        assert!(d.pull().is_none());
    }

    fn events(input: &[u8]) -> Vec<Result<String, String>> {
        check_splits(
            || Texts(SseEventDecoder::new(&DecodeOptions::default())),
            input,
        )
    }

    #[test]
    fn events_are_the_frames_data() {
        let input = "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\n\
                     event: ignored\nid: 3\ndata: {\"type\":\"X\",\ndata:  \"n\": 1.10}\n\n";
        assert_eq!(
            events(input.as_bytes()),
            vec![
                Ok(r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#.to_owned()),
                Ok(r#"{"type":"X","n":1.10}"#.to_owned()),
            ]
        );
    }

    #[test]
    fn a_bad_event_says_where_and_decoding_goes_on() {
        let input = b": hello\ndata: {\"type\":\"A\"}\n\ndata: {\"type\":\n\ndata: [1]\n\ndata: {\"type\":\"B\"}\n\n";
        let got = events(input);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], Ok(r#"{"type":"A"}"#.to_owned()));
        let e1 = got[1].as_ref().unwrap_err();
        assert!(
            e1.starts_with("event 1 (line 4, byte 28): not an AG-UI event: invalid JSON"),
            "{e1}"
        );
        let e2 = got[2].as_ref().unwrap_err();
        assert!(e2.starts_with("event 2 (line 6, byte 44)"), "{e2}");
        assert!(e2.contains("must be a JSON object"), "{e2}");
        assert_eq!(got[3], Ok(r#"{"type":"B"}"#.to_owned()));
    }
}
