//! SSE on the wire: pre-framed output and an incremental decoder for the
//! upstream's response.
//!
//! Output frames are built as bytes directly (`id: <seq>\ndata: <json>\n\n`),
//! so a batch of events goes out in one write. The decoder follows the
//! official client (`@ag-ui/client` `src/transform/sse.ts`): frames end at a
//! blank line, `data:` lines (one optional space removed) are joined with
//! `\n`, other fields are ignored. It also accepts `\r\n` line ends.

use agui_protocol::Event;
use bytes::{BufMut, Bytes, BytesMut};

/// Appends one SSE frame for `event` to `buf`, with `id: <seq>` when given.
pub fn put_frame(buf: &mut BytesMut, event: &Event, seq: Option<u64>) {
    let json = event.json();
    buf.reserve(json.len() + 32);
    if let Some(seq) = seq {
        buf.put_slice(b"id: ");
        let n = itoa_buf(seq);
        buf.put_slice(n.as_slice());
        buf.put_u8(b'\n');
    }
    buf.put_slice(b"data: ");
    buf.put_slice(json.as_bytes());
    buf.put_slice(b"\n\n");
}

/// One frame as bytes.
pub fn frame(event: &Event, seq: Option<u64>) -> Bytes {
    let mut buf = BytesMut::new();
    put_frame(&mut buf, event, seq);
    buf.freeze()
}

struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

fn itoa_buf(mut n: u64) -> Digits {
    let mut buf = [0u8; 20];
    let mut i = 20;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    Digits { buf, start: i }
}

/// Why the upstream's SSE could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// A frame's data is not an event envelope.
    #[error("upstream frame {index} is not an AG-UI event: {reason}")]
    NotAnEvent {
        /// 0-based index of the frame among the data frames.
        index: u64,
        /// Why.
        reason: String,
    },
    /// An event (or an unterminated frame) is larger than the limit.
    #[error("upstream event larger than {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The bytes are not UTF-8.
    #[error("upstream frame {index} is not UTF-8")]
    NotUtf8 {
        /// 0-based frame index.
        index: u64,
    },
}

/// An incremental SSE decoder: push bytes, get events.
pub struct SseDecoder {
    buf: BytesMut,
    /// Bytes of `buf` already scanned for a frame end.
    scanned: usize,
    frames: u64,
    max_event: usize,
}

impl SseDecoder {
    /// A decoder refusing events (frames) larger than `max_event` bytes.
    pub fn new(max_event: usize) -> SseDecoder {
        SseDecoder {
            buf: BytesMut::new(),
            scanned: 0,
            frames: 0,
            max_event,
        }
    }

    /// Feeds bytes; appends the complete events found to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<Event>) -> Result<(), DecodeError> {
        self.buf.extend_from_slice(chunk);
        loop {
            let Some((end, next)) = find_frame_end(&self.buf, self.scanned.saturating_sub(3))
            else {
                self.scanned = self.buf.len();
                // A frame carries its own `data: ` prefix and a little more.
                if self.buf.len() > self.max_event.saturating_add(1024) {
                    return Err(DecodeError::TooLarge {
                        limit: self.max_event,
                    });
                }
                return Ok(());
            };
            let frame = self.buf.split_to(next);
            self.scanned = 0;
            self.decode_frame(&frame[..end], out)?;
        }
    }

    /// Ends the stream: decodes a final unterminated frame, if any.
    pub fn finish(&mut self, out: &mut Vec<Event>) -> Result<(), DecodeError> {
        let rest = std::mem::take(&mut self.buf);
        self.scanned = 0;
        if rest.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(());
        }
        self.decode_frame(&rest, out)
    }

    fn decode_frame(&mut self, frame: &[u8], out: &mut Vec<Event>) -> Result<(), DecodeError> {
        let index = self.frames;
        let text = std::str::from_utf8(frame).map_err(|_| DecodeError::NotUtf8 { index })?;
        let mut data: Option<String> = None;
        for line in text.split('\n') {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if let Some(rest) = line.strip_prefix("data:") {
                let rest = rest.strip_prefix(' ').unwrap_or(rest);
                match &mut data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(rest);
                    }
                    None => data = Some(rest.to_owned()),
                }
            }
        }
        let Some(data) = data else { return Ok(()) };
        self.frames += 1;
        if data.len() > self.max_event {
            return Err(DecodeError::TooLarge {
                limit: self.max_event,
            });
        }
        let event = Event::from_json_string(data).map_err(|e| DecodeError::NotAnEvent {
            index,
            reason: e.to_string(),
        })?;
        out.push(event);
        Ok(())
    }
}

/// Finds the first blank line at or after `from`: returns (end of the frame's
/// content, start of what follows).
fn find_frame_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut i = from;
    while let Some(p) = memchr::memchr(b'\n', &buf[i..]) {
        let nl = i + p;
        // "\n\n"
        if buf.get(nl + 1) == Some(&b'\n') {
            return Some((nl, nl + 2));
        }
        // "\n\r\n"
        if buf.get(nl + 1) == Some(&b'\r') && buf.get(nl + 2) == Some(&b'\n') {
            return Some((nl, nl + 3));
        }
        i = nl + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(s: &str) -> Event {
        Event::from_json(s).unwrap()
    }

    #[test]
    fn frames_with_and_without_ids() {
        let e = ev(r#"{"type":"RAW","event":1}"#);
        assert_eq!(
            &frame(&e, Some(0))[..],
            b"id: 0\ndata: {\"type\":\"RAW\",\"event\":1}\n\n"
        );
        assert_eq!(
            &frame(&e, Some(18446744073709551615))[..],
            b"id: 18446744073709551615\ndata: {\"type\":\"RAW\",\"event\":1}\n\n"
        );
        assert_eq!(
            &frame(&e, None)[..],
            b"data: {\"type\":\"RAW\",\"event\":1}\n\n"
        );
    }

    #[test]
    fn decodes_split_frames_byte_by_byte() {
        let wire = "data: {\"type\":\"A\"}\n\n: comment\n\nid: 4\nevent: x\ndata:{\"type\":\ndata: \"B\"}\n\ndata: {\"type\":\"C\",\"s\":\"é\"}\r\n\r\n";
        let mut d = SseDecoder::new(1 << 20);
        let mut out = Vec::new();
        for b in wire.as_bytes() {
            d.push(std::slice::from_ref(b), &mut out).unwrap();
        }
        d.finish(&mut out).unwrap();
        let types: Vec<&str> = out.iter().map(|e| e.type_name()).collect();
        assert_eq!(types, vec!["A", "B", "C"]);
        assert_eq!(out[2].json(), r#"{"type":"C","s":"é"}"#);
    }

    #[test]
    fn final_unterminated_frame_is_decoded() {
        let mut d = SseDecoder::new(100);
        let mut out = Vec::new();
        d.push(b"data: {\"type\":\"A\"}", &mut out).unwrap();
        assert!(out.is_empty());
        d.finish(&mut out).unwrap();
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn garbage_and_oversize_are_errors() {
        let mut d = SseDecoder::new(100);
        let mut out = Vec::new();
        let err = d.push(b"data: hello\n\n", &mut out).unwrap_err();
        assert!(matches!(err, DecodeError::NotAnEvent { index: 0, .. }));
        let mut d = SseDecoder::new(10);
        let err = d
            .push(b"data: {\"type\":\"AAAAAAAAAAAAAAAAAAA\"}\n\n", &mut out)
            .unwrap_err();
        assert_eq!(err, DecodeError::TooLarge { limit: 10 });
        let mut d = SseDecoder::new(10);
        let err = d.push(&[b'x'; 2000], &mut out).unwrap_err();
        assert_eq!(err, DecodeError::TooLarge { limit: 10 });
        let mut d = SseDecoder::new(100);
        let err = d.push(b"data: \xff\n\n", &mut out).unwrap_err();
        assert_eq!(err, DecodeError::NotUtf8 { index: 0 });
    }
}
