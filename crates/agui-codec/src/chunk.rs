//! [`EventChunk`]: many events as slices of one buffer.
//!
//! A decoder that reads a piece of NDJSON into one buffer validates every
//! line in place and records where each event's text starts and ends, so a
//! piece of thousands of events costs one buffer and one table, not an
//! allocation per event. The same scan records where each event's top-level
//! members lie ([`Event::check_recording`]); the chunk keeps those tables,
//! so a reader of an event's fields walks no text. Readers hand such chunks
//! over whole; code that only
//! reads events (writing, verifying) takes each one as an [`EventRef`] and
//! never copies it, and code that keeps events makes owned [`Event`]s from
//! them with [`EventRef::to_event`] (a copy, not validated again).

use agui_protocol::{Checked, Event, EventRef, EventType, Member};

use crate::ndjson::{Line, Lines};
use crate::{DecodeError, check_event};

/// Events held as slices of one text buffer (or, for the rare event whose
/// text had to be re-written, on their own).
#[derive(Debug, Default, Clone)]
pub struct EventChunk {
    text: String,
    spans: Vec<Span>,
    /// The member tables of the slice spans, one after another.
    members: Vec<Member>,
}

#[derive(Debug, Clone)]
enum Span {
    /// `text[start..start + len]`, validated as an event of type `ty`;
    /// `members[members.0..members.1]` is its member table (empty when none
    /// was recorded).
    Slice {
        start: usize,
        len: usize,
        ty: EventType,
        members: (u32, u32),
    },
    /// An event whose text is not a slice of `text`.
    Owned(Event),
}

/// The event that starts `bytes` when the one-pass scanner accepts it there
/// ([`Event::scan_prefix_recording`], its members appended to `members`),
/// it is at most `max` bytes long and valid UTF-8: its type and text.
/// `None` leaves `members` as it was.
pub(crate) fn scan_whole<'b>(
    bytes: &'b [u8],
    members: &mut Vec<Member>,
    max: usize,
) -> Option<(EventType, &'b str)> {
    let recorded = members.len();
    let (ty, len) = Event::scan_prefix_recording(bytes, members)?;
    let text = (len <= max)
        .then(|| simdutf8::basic::from_utf8(&bytes[..len]).ok())
        .flatten();
    if text.is_none() {
        members.truncate(recorded);
    }
    Some((ty, text?))
}

impl EventChunk {
    /// An empty chunk.
    pub fn new() -> EventChunk {
        EventChunk::default()
    }

    /// How many events the chunk holds.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True when the chunk holds no event.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Event `i`, borrowed.
    pub fn get(&self, i: usize) -> Option<EventRef<'_>> {
        self.spans.get(i).map(|span| self.event(span))
    }

    /// The events in order, borrowed.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = EventRef<'_>> + '_ {
        self.spans.iter().map(|span| self.event(span))
    }

    /// Appends a copy of `event` (and of its member table, if it has one).
    pub fn push(&mut self, event: EventRef<'_>) {
        let start = self.text.len();
        self.text.push_str(event.json());
        let first = self.members.len();
        self.members
            .extend_from_slice(event.members().unwrap_or_default());
        let members = self.table(first);
        self.spans.push(Span::Slice {
            start,
            len: event.len_bytes(),
            ty: event.event_type().clone(),
            members,
        });
    }

    /// The range of the member table that starts at `first` and ends at the
    /// end of `members`. A chunk holds at most a few MiB of text, so far
    /// fewer than `u32::MAX` members (each takes at least four bytes).
    fn table(&self, first: usize) -> (u32, u32) {
        let end = self.members.len();
        (
            u32::try_from(first).unwrap_or(u32::MAX),
            u32::try_from(end).unwrap_or(u32::MAX),
        )
    }

    /// Owned copies of the events.
    pub fn to_events(&self) -> Vec<Event> {
        self.iter().map(|e| e.to_event()).collect()
    }

    /// Empties the chunk, keeping its buffers for reuse.
    pub fn clear(&mut self) {
        self.text.clear();
        self.spans.clear();
        self.members.clear();
    }

    fn event<'a>(&'a self, span: &'a Span) -> EventRef<'a> {
        match span {
            // Every slice span covers text `Event::check` accepted as an
            // event of `ty` (see `decode_ndjson`) or text copied from an
            // `EventRef` (`push`).
            // Its member table was recorded from that very text (see
            // `decode_text`) or copied with it (`push`).
            Span::Slice {
                start,
                len,
                ty,
                members,
            } => EventRef::from_checked_members(
                &self.text[*start..*start + *len],
                ty,
                self.members
                    .get(members.0 as usize..members.1 as usize)
                    .unwrap_or_default(),
            ),
            Span::Owned(event) => event.as_event_ref(),
        }
    }

    /// Appends a checked event: a copy of a slice, or the re-written event.
    /// `recorded` is where the check's member table starts in `members`
    /// (it runs to the end; an empty table when nothing was recorded).
    fn add(&mut self, checked: Checked<'_>, recorded: usize) {
        match checked {
            Checked::Slice { json, ty, .. } => {
                let start = self.text.len();
                self.text.push_str(json);
                let members = self.table(recorded);
                self.spans.push(Span::Slice {
                    start,
                    len: json.len(),
                    ty,
                    members,
                });
            }
            Checked::Rewritten { event, .. } => {
                self.members.truncate(recorded);
                self.spans.push(Span::Owned(event));
            }
        }
    }

    /// Bytes of event text held as slices.
    pub(crate) fn text_len(&self) -> usize {
        self.text.len()
    }

    /// Makes room for `text` more bytes of event text, so a chunk filled
    /// to a size known in advance grows its buffer once, not by doubling
    /// (each doubling would leave the old buffer's pages to the allocator).
    pub(crate) fn reserve(&mut self, text: usize) {
        self.text.reserve(text);
    }

    /// Appends the event that starts `bytes` when the one-pass scanner
    /// accepts it there ([`Event::scan_prefix_recording`]), is valid UTF-8
    /// and at most `max` bytes long: a copy of its text, with its member
    /// table when `tables`; returns its length. `None` (the chunk as it
    /// was): the caller finds the element's end and checks it with
    /// [`EventChunk::push_checked`], which gives the same for an event this
    /// accepts and says what is wrong with any other.
    pub(crate) fn push_prefix(&mut self, bytes: &[u8], tables: bool, max: usize) -> Option<usize> {
        let recorded = self.members.len();
        let (ty, json) = scan_whole(bytes, &mut self.members, max)?;
        let len = json.len();
        if !tables {
            self.members.truncate(recorded);
        }
        let start = self.text.len();
        self.text.push_str(json);
        let members = self.table(recorded);
        self.spans.push(Span::Slice {
            start,
            len,
            ty,
            members,
        });
        Some(len)
    }

    /// Validates `bytes` as one event (found at `at`) and appends a copy of
    /// it, with its member table when `tables`; an error says what and
    /// where, and leaves the chunk as it was.
    pub(crate) fn push_checked(
        &mut self,
        bytes: &[u8],
        at: crate::Position,
        tables: bool,
    ) -> Result<(), DecodeError> {
        let text = match simdutf8::basic::from_utf8(bytes) {
            Ok(text) => text,
            // `std` tells where the bad byte is.
            Err(_) => std::str::from_utf8(bytes).map_err(|e| DecodeError::InvalidUtf8 {
                at,
                bad_byte: at.byte + e.valid_up_to() as u64,
            })?,
        };
        self.push_checked_str(text, at, tables)
    }

    /// [`EventChunk::push_checked`] for text already known to be UTF-8.
    pub(crate) fn push_checked_str(
        &mut self,
        text: &str,
        at: crate::Position,
        tables: bool,
    ) -> Result<(), DecodeError> {
        let recorded = self.members.len();
        let checked = if tables {
            Event::check_recording(text, &mut self.members)
        } else {
            Event::check(text)
        };
        match checked {
            Ok(checked) => {
                self.add(checked, recorded);
                Ok(())
            }
            Err(source) => {
                self.members.truncate(recorded);
                Err(DecodeError::Envelope { at, source })
            }
        }
    }

    /// The buffer back, for the next read (the chunk is left empty).
    pub(crate) fn into_buffer(mut self) -> (Vec<u8>, EventChunk) {
        let text = std::mem::take(&mut self.text);
        self.spans.clear();
        self.members.clear();
        (text.into_bytes(), self)
    }
}

/// Decodes an NDJSON stream held whole in memory, keeping its events as
/// slices of `bytes`: one [`EventChunk`] while no line fails, and the events
/// after each failed line in further chunks, with the errors between them.
/// Events, errors and positions are those of [`crate::NdjsonDecoder`] on the
/// same bytes; decoding ends after an error that is not recoverable (an
/// event over the maximum size).
pub fn decode_ndjson_buffer(
    bytes: Vec<u8>,
    options: &crate::DecodeOptions,
) -> Vec<Result<EventChunk, DecodeError>> {
    let mut out = Vec::new();
    decode_ndjson(bytes, 0, true, options, EventChunk::new(), &mut |piece| {
        out.push(match piece {
            Piece::Events(chunk) => Ok(chunk),
            Piece::Error(err) => Err(err),
        });
        true
    });
    out
}

/// What decoding one piece of NDJSON gave: chunks of events with the errors
/// between them, in stream order.
pub(crate) enum Piece {
    Events(EventChunk),
    Error(DecodeError),
}

/// Decodes `bytes`, a piece of an NDJSON stream that starts at a line start
/// (at byte `base` of the stream; `first` when it is the stream's start,
/// where a byte order mark is skipped) and ends at a line end or at the
/// stream's end; calls `out` with the events and errors in order.
///
/// Positions in errors count events from 0 and lines from 1 at the piece's
/// start, and bytes from the stream's start, as a chunk of
/// [`crate::ThreadedReader`] reports them. Returns how many event indexes
/// and line ends the piece held, or `None` when `out` asked to stop (it
/// returned `false`) or a fatal error ended decoding. A line over the
/// maximum event size is fatal and always reported: its error goes to `out`
/// even when `out` asked to stop while the events before it were handed
/// over. The buffers of `spare` are reused. `options.format` is not read.
pub(crate) fn decode_ndjson(
    bytes: Vec<u8>,
    base: u64,
    first: bool,
    options: &crate::DecodeOptions,
    spare: EventChunk,
    out: &mut dyn FnMut(Piece) -> bool,
) -> Option<(u64, u64)> {
    let max = options.max_event_size;
    match into_string(bytes) {
        // The usual case: the whole piece is UTF-8, so every event is a
        // slice of it.
        Ok(text) => decode_text(text, base, first, max, options.member_tables, spare, out),
        // Some line is not: decode line by line, copying events out.
        Err(e) => decode_bytes(e.as_bytes(), base, first, max, spare, out),
    }
}

/// `bytes` as a `String`, checked with SIMD where the processor has it
/// (`simdutf8`: with AVX2 about 0.05 instructions a byte on event text
/// against `std`'s 0.1); on invalid bytes, `std`'s error (it tells where).
fn into_string(bytes: Vec<u8>) -> Result<String, std::string::FromUtf8Error> {
    if simdutf8::basic::from_utf8(&bytes).is_ok() {
        // SAFETY: `simdutf8::basic::from_utf8` has just found `bytes` to be
        // valid UTF-8, which is all `from_utf8_unchecked` requires
        // (`into_string_is_std_s` tests the two agree).
        return Ok(unsafe { String::from_utf8_unchecked(bytes) });
    }
    String::from_utf8(bytes)
}

fn decode_text(
    text: String,
    base: u64,
    first: bool,
    max: usize,
    tables: bool,
    mut chunk: EventChunk,
    out: &mut dyn FnMut(Piece) -> bool,
) -> Option<(u64, u64)> {
    chunk.clear();
    let mut lines = Lines::new(base, first, max);
    // The piece from byte `offset` on. Until the first error, the chunk's
    // events are slices of it, and it becomes the chunk's buffer when the
    // chunk is handed over; after an error, the rest of the piece is copied
    // into new chunks (the events before it left with the buffer).
    let mut piece = text;
    let mut offset = 0;
    let mut copying = false;
    let handed_over = |chunk: &mut EventChunk, piece: &mut String, copying: bool| {
        if !copying {
            chunk.text = std::mem::take(piece);
        }
    };
    loop {
        let (start, end, at) = match lines.next_in(piece.as_bytes(), offset) {
            None => break,
            Some(Line::Event { start, end, at }) => (start, end, at),
            Some(Line::TooLarge(err)) => {
                handed_over(&mut chunk, &mut piece, copying);
                return too_large(&mut chunk, out, err);
            }
        };
        let first = chunk.members.len();
        let line = &piece[start - offset..end - offset];
        let checked = if tables {
            Event::check_recording(line, &mut chunk.members)
        } else {
            Event::check(line)
        };
        match checked {
            Ok(Checked::Slice { json, ty, .. }) if !copying => {
                let start = json.as_ptr() as usize - piece.as_ptr() as usize;
                let len = json.len();
                let members = chunk.table(first);
                chunk.spans.push(Span::Slice {
                    start,
                    len,
                    ty,
                    members,
                });
            }
            Ok(checked) => chunk.add(checked, first),
            Err(source) => {
                if !copying {
                    let rest = piece[end..].to_owned();
                    chunk.text = std::mem::replace(&mut piece, rest);
                    offset = end;
                    copying = true;
                }
                let err = DecodeError::Envelope { at, source };
                if !bad_line(&mut chunk, out, err) {
                    return None;
                }
            }
        }
    }
    handed_over(&mut chunk, &mut piece, copying);
    finish(&mut chunk, out, &lines)
}

fn decode_bytes(
    bytes: &[u8],
    base: u64,
    first: bool,
    max: usize,
    mut chunk: EventChunk,
    out: &mut dyn FnMut(Piece) -> bool,
) -> Option<(u64, u64)> {
    chunk.clear();
    let mut lines = Lines::new(base, first, max);
    loop {
        match lines.next_in(bytes, 0) {
            None => break,
            Some(Line::Event { start, end, at }) => match check_event(&bytes[start..end], at) {
                Ok(checked) => {
                    let recorded = chunk.members.len();
                    chunk.add(checked, recorded)
                }
                Err(err) => {
                    if !bad_line(&mut chunk, out, err) {
                        return None;
                    }
                }
            },
            Some(Line::TooLarge(err)) => return too_large(&mut chunk, out, err),
        }
    }
    finish(&mut chunk, out, &lines)
}

// The steps `decode_text` and `decode_bytes` share. Before each one,
// `decode_text` makes sure the chunk owns the text its events are slices of.

/// A line that is not an event: hands over the events before it, then its
/// error. False when `out` asked to stop.
fn bad_line(chunk: &mut EventChunk, out: &mut dyn FnMut(Piece) -> bool, err: DecodeError) -> bool {
    flush(chunk, out) && out(Piece::Error(err))
}

/// A line over the maximum size ends decoding: hands over the events before
/// it, then its error.
fn too_large(
    chunk: &mut EventChunk,
    out: &mut dyn FnMut(Piece) -> bool,
    err: DecodeError,
) -> Option<(u64, u64)> {
    flush(chunk, out);
    out(Piece::Error(err));
    None
}

/// The piece's end: hands over the last events; the counts of `lines`, or
/// `None` when `out` asked to stop.
fn finish(
    chunk: &mut EventChunk,
    out: &mut dyn FnMut(Piece) -> bool,
    lines: &Lines,
) -> Option<(u64, u64)> {
    flush(chunk, out).then(|| lines.counts())
}

/// Hands the events gathered so far to `out` (nothing when there are none).
fn flush(chunk: &mut EventChunk, out: &mut dyn FnMut(Piece) -> bool) -> bool {
    if chunk.is_empty() {
        return true;
    }
    let full = std::mem::take(chunk);
    out(Piece::Events(full))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DecodeOptions, NdjsonDecoder, PushDecoder};

    proptest::proptest! {
        /// `into_string` gives what `String::from_utf8` gives, on bytes that
        /// are mostly UTF-8 (long enough for the SIMD blocks) with invalid
        /// bytes and cut sequences mixed in.
        #[test]
        fn into_string_is_std_s(
            text in "[a-z\u{e9}\u{20ac}\u{1f600}{}\"]{0,200}",
            breaks in proptest::collection::vec((0usize..400, 0x80u8..=0xff), 0..3),
        ) {
            let mut bytes = text.into_bytes();
            for (at, b) in breaks {
                let at = at.min(bytes.len());
                bytes.insert(at, b);
            }
            let ours = into_string(bytes.clone()).map_err(|e| e.utf8_error());
            let std = String::from_utf8(bytes).map_err(|e| e.utf8_error());
            proptest::prop_assert_eq!(ours, std);
        }
    }

    /// Events and error messages, as `NdjsonDecoder` gives them.
    fn reference(input: &[u8], max: usize) -> Vec<Result<String, String>> {
        let mut d = NdjsonDecoder::new(&DecodeOptions::default().with_max_event_size(max));
        d.push(input);
        d.finish();
        std::iter::from_fn(|| d.pull())
            .map(|r| r.map(|e| e.json().to_owned()).map_err(|e| e.to_string()))
            .collect()
    }

    fn chunked(input: &[u8], max: usize) -> Vec<Result<String, String>> {
        let mut got = Vec::new();
        let options = DecodeOptions::default().with_max_event_size(max);
        decode_ndjson(
            input.to_vec(),
            0,
            true,
            &options,
            EventChunk::new(),
            &mut |p| {
                match p {
                    Piece::Events(c) => {
                        for e in c.iter() {
                            same_members(e);
                        }
                        got.extend(c.iter().map(|e| Ok(e.json().to_owned())));
                    }
                    Piece::Error(e) => got.push(Err(e.to_string())),
                }
                true
            },
        );
        got
    }

    /// An event's members, read from its recorded table when it has one,
    /// are those the walk over its text finds; `true` when it had a table.
    fn same_members(event: EventRef<'_>) -> bool {
        let mut read = Vec::new();
        let read_all = event.for_each_member(|k, v| read.push((k, v)));
        let mut walked = Vec::new();
        let walked_all = agui_protocol::members_of_valid(event.json(), |k, v| walked.push((k, v)));
        assert_eq!((read_all, read), (walked_all, walked), "{}", event.json());
        event.members().is_some()
    }

    #[test]
    fn each_event_keeps_the_member_table_its_scan_recorded() {
        // Plain events, an event after a bad line (copied out of the piece),
        // one with an escaped key (the scanner defers it: no table) and one
        // with a carriage return inside (re-written on one line: no table).
        let input = "{\"type\":\"A\",\"n\":[1,{\"k\":2}],\"s\":\"x\"}\n\
                     {\"type\":\"B\"}\n\
                     nope\n\
                     {\"type\":\"C\",\"m\":null}\n\
                     {\"type\":\"D\",\"\\u0061\":1}\n\
                     {\"type\":\r\"E\"}\n";
        let mut tables = Vec::new();
        let mut copy = EventChunk::new();
        decode_ndjson(
            input.as_bytes().to_vec(),
            0,
            true,
            &DecodeOptions::default(),
            EventChunk::new(),
            &mut |p| {
                if let Piece::Events(c) = p {
                    for e in c.iter() {
                        tables.push((e.type_name().to_owned(), same_members(e)));
                        copy.push(e);
                    }
                }
                true
            },
        );
        let expected = [
            ("A", true),
            ("B", true),
            ("C", true),
            ("D", false),
            ("E", false),
        ];
        let expected: Vec<_> = expected.map(|(t, m)| (t.to_owned(), m)).into();
        assert_eq!(tables, expected);
        // A copy keeps the tables.
        let copied: Vec<bool> = copy.iter().map(same_members).collect();
        assert_eq!(copied, [true, true, true, false, false]);
    }

    #[test]
    fn a_piece_decodes_as_the_push_decoder_does() {
        let cases: &[&[u8]] = &[
            b"",
            b"\n\r\n \n",
            b"{\"type\":\"A\"}\n\n  \t\r\n{\"type\":\"B\",\"x\":1.10}\r\n{\"type\":\"C\"}",
            b"\xEF\xBB\xBF{\"type\":\"A\"}\n",
            b"\xEF\xBB",
            b"{\"type\":\"A\"}\n\n{\"type\":1}\n{\"type\":\"B\"} x\n\xff\xfe\n[]\n{\"type\":\"C\"}\n",
            b"{\"type\":\"A\"}\n{\"type\":\"BBBBBB\"}\n{\"type\":\"C\"}\n",
            b"  {\"type\":\"A\"}  \n{\"type\":\r\"B\"}\n{\"type\":\"C\"}\n",
            b"{\"type\":\"A\"}\n{\"type\":2}\n{\"type\":\"D\"}\n{\"type\":\"E\"\n{\"type\":\"F\"}\n",
            b"                    \n{\"type\":\"A\"}\n",
        ];
        for max in [12, 16, 1 << 20] {
            for input in cases {
                assert_eq!(
                    chunked(input, max),
                    reference(input, max),
                    "{:?} max {max}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    #[test]
    fn without_member_tables_the_same_events_come_without_tables() {
        let input = b"{\"type\":\"A\",\"n\":[1,{\"k\":2}]}\nnope\n{\"type\":\"B\",\"s\":\"x\"}\n";
        let decode = |options: &DecodeOptions| {
            decode_ndjson_buffer(input.to_vec(), options)
                .into_iter()
                .map(|item| {
                    item.map(|chunk| {
                        chunk
                            .iter()
                            .map(|e| (e.json().to_owned(), e.members().map(<[_]>::len)))
                            .collect::<Vec<_>>()
                    })
                    .map_err(|e| e.to_string())
                })
                .collect::<Vec<_>>()
        };
        let with = decode(&DecodeOptions::default());
        let without = decode(&DecodeOptions::default().without_member_tables());
        assert_eq!(with.len(), 3, "{with:?}");
        assert_eq!(with[0].as_ref().expect("events")[0].1, Some(2));
        // Each item: its events' texts and table lengths, or its error.
        type Decoded = Result<Vec<(String, Option<usize>)>, String>;
        let strip = |items: &[Decoded]| {
            items
                .iter()
                .map(|item| {
                    item.as_ref()
                        .map(|events| {
                            events
                                .iter()
                                .map(|(json, _)| json.clone())
                                .collect::<Vec<_>>()
                        })
                        .map_err(Clone::clone)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(&with), strip(&without));
        assert!(
            without
                .iter()
                .flatten()
                .flatten()
                .all(|(_, table)| table.is_none()),
            "{without:?}"
        );
    }

    #[test]
    fn events_are_slices_of_the_piece_and_copies_equal_them() {
        let input = b"{\"type\":\"A\",\"n\":1}\n{\"type\":\"X_CUSTOM\"}\n";
        let mut chunks = Vec::new();
        decode_ndjson(
            input.to_vec(),
            0,
            true,
            &DecodeOptions::default(),
            EventChunk::new(),
            &mut |p| {
                if let Piece::Events(c) = p {
                    chunks.push(c);
                }
                true
            },
        );
        assert_eq!(chunks.len(), 1);
        let chunk = &chunks[0];
        assert_eq!(chunk.len(), 2);
        assert_eq!(chunk.get(1).unwrap().type_name(), "X_CUSTOM");
        let owned = chunk.to_events();
        assert_eq!(owned[0].json(), r#"{"type":"A","n":1}"#);
        assert_eq!(owned[0].event_type(), &EventType::from_wire("A"));
        let mut copy = EventChunk::new();
        for e in chunk.iter() {
            copy.push(e);
        }
        let texts = |c: &EventChunk| c.iter().map(|e| e.json().to_owned()).collect::<Vec<_>>();
        assert_eq!(texts(&copy), texts(chunk));
    }
}
