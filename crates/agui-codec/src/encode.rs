//! Encoding: events are written verbatim (their stored JSON text), so
//! converting between formats is lossless.
//!
//! - JSON array: `[`, one event per line separated by `,`, `]`.
//! - NDJSON: each event on its own line.
//! - SSE: an optional `id: <n>` line, `data: <json>`, then an empty line, as
//!   the official encoder frames it. An event's text never contains a line
//!   break, so one `data:` line always suffices.

use std::io::{self, Write};

use agui_protocol::{Event, EventRef};
use bytes::Bytes;

use crate::Format;

/// An SSE comment frame, for keeping idle connections open.
pub const SSE_KEEP_ALIVE: &[u8] = b":\n\n";

/// Appends one SSE frame for `event` to `out`, with an `id:` line when `id`
/// is given.
pub fn write_sse_frame(out: &mut Vec<u8>, event: &Event, id: Option<u64>) {
    out.reserve(event.len_bytes() + 32);
    if let Some(id) = id {
        // Formatted in place: no string per frame (a fan-out writes one
        // frame per event per subscriber). Writing to a Vec cannot fail.
        let _ = writeln!(out, "id: {id}");
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(event.json().as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// One SSE frame for `event`, with an `id:` line when `id` is given.
pub fn encode_sse_frame(event: &Event, id: Option<u64>) -> Bytes {
    let mut out = Vec::with_capacity(event.len_bytes() + 32);
    write_sse_frame(&mut out, event, id);
    Bytes::from(out)
}

/// Appends `event` and a line end to `out`.
pub fn write_ndjson_line(out: &mut Vec<u8>, event: &Event) {
    out.reserve(event.len_bytes() + 1);
    out.extend_from_slice(event.json().as_bytes());
    out.push(b'\n');
}

/// `event` as one NDJSON line (with its line end).
pub fn encode_ndjson_line(event: &Event) -> Bytes {
    let mut out = Vec::with_capacity(event.len_bytes() + 1);
    write_ndjson_line(&mut out, event);
    Bytes::from(out)
}

/// Writes events in one format.
///
/// Call [`Writer::finish`] at the end: it closes a JSON array and flushes.
/// The writer does not buffer; give it a buffered writer.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    format: Format,
    written: u64,
}

impl<W: Write> Writer<W> {
    /// A writer of `format` into `out`.
    pub fn new(out: W, format: Format) -> Writer<W> {
        Writer {
            out,
            format,
            written: 0,
        }
    }

    /// The output format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// How many events were written.
    pub fn events_written(&self) -> u64 {
        self.written
    }

    /// Writes one event.
    pub fn write_event<'e>(&mut self, event: impl Into<EventRef<'e>>) -> io::Result<()> {
        self.write_inner(event.into(), None)
    }

    /// Writes one event with a sequence number: SSE frames get an `id: <seq>`
    /// line; the other formats have no place for it and ignore it.
    pub fn write_event_with_id<'e>(
        &mut self,
        event: impl Into<EventRef<'e>>,
        seq: u64,
    ) -> io::Result<()> {
        self.write_inner(event.into(), Some(seq))
    }

    fn write_inner(&mut self, event: EventRef<'_>, id: Option<u64>) -> io::Result<()> {
        let json = event.json().as_bytes();
        match self.format {
            Format::Json => {
                self.out
                    .write_all(if self.written == 0 { b"[\n" } else { b",\n" })?;
                self.out.write_all(json)?;
            }
            Format::Ndjson => {
                self.out.write_all(json)?;
                self.out.write_all(b"\n")?;
            }
            Format::Sse => {
                if let Some(id) = id {
                    writeln!(self.out, "id: {id}")?;
                }
                self.out.write_all(b"data: ")?;
                self.out.write_all(json)?;
                self.out.write_all(b"\n\n")?;
            }
        }
        self.written += 1;
        Ok(())
    }

    /// Ends the output (closes a JSON array), flushes and gives back the
    /// underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        if self.format == Format::Json {
            self.out
                .write_all(if self.written == 0 { b"[]\n" } else { b"\n]\n" })?;
        }
        self.out.flush()?;
        Ok(self.out)
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(text: &str) -> Event {
        Event::from_json(text).unwrap()
    }

    fn written(format: Format, events: &[Event], ids: bool) -> String {
        let mut w = Writer::new(Vec::new(), format);
        for (i, e) in events.iter().enumerate() {
            if ids {
                w.write_event_with_id(e, i as u64 + 1).unwrap();
            } else {
                w.write_event(e).unwrap();
            }
        }
        assert_eq!(w.events_written(), events.len() as u64);
        String::from_utf8(w.finish().unwrap()).unwrap()
    }

    #[test]
    fn every_format_writes_the_text_verbatim() {
        let events = [
            ev(r#"{"type":"A","n":1.10}"#),
            ev(r#"{"type":"B","s":"\u00e9"}"#),
        ];
        assert_eq!(
            written(Format::Json, &events, false),
            "[\n{\"type\":\"A\",\"n\":1.10},\n{\"type\":\"B\",\"s\":\"\\u00e9\"}\n]\n"
        );
        assert_eq!(written(Format::Json, &[], false), "[]\n");
        assert_eq!(
            written(Format::Ndjson, &events, true),
            "{\"type\":\"A\",\"n\":1.10}\n{\"type\":\"B\",\"s\":\"\\u00e9\"}\n"
        );
        assert_eq!(
            written(Format::Sse, &events, false),
            "data: {\"type\":\"A\",\"n\":1.10}\n\ndata: {\"type\":\"B\",\"s\":\"\\u00e9\"}\n\n"
        );
        assert_eq!(
            written(Format::Sse, &events, true),
            "id: 1\ndata: {\"type\":\"A\",\"n\":1.10}\n\nid: 2\ndata: {\"type\":\"B\",\"s\":\"\\u00e9\"}\n\n"
        );
    }

    #[test]
    fn frame_helpers() {
        let e = ev(r#"{"type":"A"}"#);
        assert_eq!(
            &encode_sse_frame(&e, None)[..],
            b"data: {\"type\":\"A\"}\n\n"
        );
        assert_eq!(
            &encode_sse_frame(&e, Some(42))[..],
            b"id: 42\ndata: {\"type\":\"A\"}\n\n"
        );
        assert_eq!(&encode_ndjson_line(&e)[..], b"{\"type\":\"A\"}\n");
    }
}
