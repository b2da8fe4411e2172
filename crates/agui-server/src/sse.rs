//! SSE on the wire, through `agui-codec`: one mechanism for both ways.
//!
//! Output frames (`id: <seq>\ndata: <json>\n\n`) are written with
//! [`agui_codec::write_sse_frame`] into one buffer per batch, so a batch of
//! events goes out in one write. The upstream's response is read with
//! [`agui_codec::SseEventDecoder`] (WHATWG SSE parsing, as the official
//! client reads it: frames end at a blank line, `data:` lines are joined with
//! `\n`, a final unterminated frame is still dispatched); this module only
//! maps its errors onto the gateway's run-closing reasons.

use agui_codec::{DecodeOptions, Format, PushDecoder, SseEventDecoder};
use agui_protocol::Event;
use bytes::Bytes;

/// Appends one SSE frame for `event` to `buf`, with `id: <seq>` when given.
pub fn put_frame(buf: &mut Vec<u8>, event: &Event, seq: Option<u64>) {
    agui_codec::write_sse_frame(buf, event, seq);
}

/// Appends one SSE frame (no `id:`) for the event
/// `{"type":"<ty>","<key>":<value>}`, where `value` is JSON text that is
/// already known to be valid and compact (a conversation the store composed,
/// or messages the gateway wrote from it): the frame is written around it
/// without checking it again, which for a conversation of tens of megabytes
/// costs more than everything else in the answer. Text with a line break
/// (never in such JSON, and it would split the `data:` line) goes through
/// the envelope check instead, whose error is returned.
pub fn put_frame_around(
    buf: &mut Vec<u8>,
    ty: &'static str,
    key: &'static str,
    value: &str,
) -> Result<(), agui_protocol::EnvelopeError> {
    if memchr::memchr2(b'\n', b'\r', value.as_bytes()).is_some() {
        let text = format!("{{\"type\":\"{ty}\",\"{key}\":{value}}}");
        put_frame(buf, &Event::from_json_string(text)?, None);
        return Ok(());
    }
    buf.reserve(value.len() + ty.len() + key.len() + 24);
    buf.extend_from_slice(b"data: {\"type\":\"");
    buf.extend_from_slice(ty.as_bytes());
    buf.extend_from_slice(b"\",\"");
    buf.extend_from_slice(key.as_bytes());
    buf.extend_from_slice(b"\":");
    buf.extend_from_slice(value.as_bytes());
    buf.extend_from_slice(b"}\n\n");
    Ok(())
}

/// One frame as bytes.
pub fn frame(event: &Event, seq: Option<u64>) -> Bytes {
    agui_codec::encode_sse_frame(event, seq)
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

impl DecodeError {
    fn from_codec(e: agui_codec::DecodeError) -> DecodeError {
        let index = e.position().map(|p| p.index).unwrap_or(0);
        match e {
            agui_codec::DecodeError::TooLarge { limit, .. } => DecodeError::TooLarge { limit },
            agui_codec::DecodeError::InvalidUtf8 { .. } => DecodeError::NotUtf8 { index },
            other => DecodeError::NotAnEvent {
                index,
                reason: other.to_string(),
            },
        }
    }
}

/// The upstream's SSE, decoded incrementally: push bytes, get events.
pub struct SseDecoder {
    inner: SseEventDecoder,
}

impl SseDecoder {
    /// A decoder refusing events (frames' data) larger than `max_event` bytes.
    pub fn new(max_event: usize) -> SseDecoder {
        let mut options = DecodeOptions::format(Format::Sse);
        options.max_event_size = max_event;
        SseDecoder {
            inner: SseEventDecoder::new(&options),
        }
    }

    /// Feeds bytes; appends the complete events found to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<Event>) -> Result<(), DecodeError> {
        self.inner.push(chunk);
        self.drain(out)
    }

    /// Ends the stream: decodes a final unterminated frame, if any.
    pub fn finish(&mut self, out: &mut Vec<Event>) -> Result<(), DecodeError> {
        self.inner.finish();
        self.drain(out)
    }

    fn drain(&mut self, out: &mut Vec<Event>) -> Result<(), DecodeError> {
        while let Some(r) = self.inner.pull() {
            out.push(r.map_err(DecodeError::from_codec)?);
        }
        Ok(())
    }
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

    #[test]
    fn a_frame_written_around_valid_json_is_the_event_frame() {
        for (ty, key, value) in [
            (
                "MESSAGES_SNAPSHOT",
                "messages",
                r#"[{"id":"a","role":"user","content":"x\"}\\n"}]"#,
            ),
            ("STATE_SNAPSHOT", "snapshot", r#"{"n":1.50,"s":"é"}"#),
            ("STATE_SNAPSHOT", "snapshot", "null"),
        ] {
            let mut got = Vec::new();
            put_frame_around(&mut got, ty, key, value).unwrap();
            let mut want = Vec::new();
            let text = format!(r#"{{"type":"{ty}","{key}":{value}}}"#);
            put_frame(&mut want, &Event::from_json(&text).unwrap(), None);
            assert_eq!(got, want, "{value}");
        }
        // A line break goes through the envelope check: one data line, or
        // the check's error for text that is not JSON.
        let mut got = Vec::new();
        put_frame_around(&mut got, "STATE_SNAPSHOT", "snapshot", "{\n\"a\": 1\r\n}").unwrap();
        assert_eq!(got.iter().filter(|&&b| b == b'\n').count(), 2, "{got:?}");
        assert!(put_frame_around(&mut Vec::new(), "STATE_SNAPSHOT", "snapshot", "{\n").is_err());
    }
}
