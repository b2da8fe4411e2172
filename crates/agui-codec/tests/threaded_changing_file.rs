//! A split file that changes while `ThreadedReader` reads it.
//!
//! A split reader takes the file's length once, at open, and every read of
//! every chunk stops there. So a file that grows is read as it was at open:
//! the appended bytes are never read (a line cut at the old length is
//! decoded as it was, cut). A file that shrinks is read up to its new end:
//! a read that comes back short ends its chunk there, and the chunks after
//! it find no line start and are empty. Either way the reader yields the
//! events of a prefix of the lines, then, when the prefix ends inside a
//! line, that line's error (recoverable, so decoding just ends after it).
//!
//! The decoding threads start at open, so the first chunks may be read
//! before the test changes the file: with two threads and one message of
//! room each, at most chunks 0 and 1 (about 2 MiB). The files here are cut
//! well after that, so the outcome does not depend on timing.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use agui_codec::{DecodeError, DecodeOptions, Position, Split, ThreadedReader};
use agui_protocol::Event;

const MIB: u64 = 1 << 20;

/// An NDJSON file's text, its lines (without `\n`) and where each starts.
struct Text {
    bytes: Vec<u8>,
    lines: Vec<String>,
    starts: Vec<u64>,
}

/// Line `i`: a valid event, different from every other line, 80 to 250
/// bytes long.
fn line(tag: &str, i: usize) -> String {
    let delta = "abcdefghij".repeat(i % 17 + 1);
    format!(r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"{tag}{i}","delta":"{delta}"}}"#)
}

/// At least `len` bytes of lines, each ended by `\n`.
fn text(tag: &str, len: u64) -> Text {
    let mut t = Text {
        bytes: Vec::new(),
        lines: Vec::new(),
        starts: Vec::new(),
    };
    while (t.bytes.len() as u64) < len {
        let l = line(tag, t.lines.len());
        t.starts.push(t.bytes.len() as u64);
        t.bytes.extend_from_slice(l.as_bytes());
        t.bytes.push(b'\n');
        t.lines.push(l);
    }
    t
}

/// Large enough that `ThreadedReader::open` splits it (17 chunks of 1 MiB,
/// the last one half full).
fn big() -> Text {
    text("m", ThreadedReader::PARALLEL_THRESHOLD + MIB / 2)
}

type Outcome = Vec<Result<String, DecodeError>>;

fn drain_events(reader: ThreadedReader) -> Outcome {
    reader
        .map(|item| item.map(|e| e.json().to_owned()))
        .collect()
}

fn drain_chunks(mut reader: ThreadedReader) -> Outcome {
    let mut got = Vec::new();
    while let Some(item) = reader.next_chunk() {
        match item {
            Ok(chunk) => {
                assert!(!chunk.is_empty(), "an empty chunk was handed over");
                got.extend(chunk.iter().map(|e| Ok(e.json().to_owned())));
            }
            Err(e) => got.push(Err(e)),
        }
    }
    got
}

/// The reader `name` of a split file: owned events from `open`, chunks
/// from `open_chunked` with the default split.
fn open(name: &str, path: &Path) -> ThreadedReader {
    let options = DecodeOptions::default();
    let reader = match name {
        "open" => ThreadedReader::open(path, options),
        _ => ThreadedReader::open_chunked(path, options, Split::default()),
    };
    let reader = reader.unwrap();
    assert!(reader.is_parallel());
    reader
}

fn drain(name: &str, reader: ThreadedReader) -> Outcome {
    match name {
        "open" => drain_events(reader),
        _ => drain_chunks(reader),
    }
}

/// Asserts that `got` is exactly the events of the first `whole` lines of
/// `t`, then, when the file ends `cut` bytes into line `whole`, that line's
/// error: not an event (the JSON ends early), at the line's position.
fn assert_lines_then_cut(got: &Outcome, t: &Text, whole: usize, cut: usize, what: &str) {
    let events = got.iter().take_while(|item| item.is_ok()).count();
    assert_eq!(events, whole, "{what}: events before the end or an error");
    for (i, item) in got[..whole].iter().enumerate() {
        let json = item.as_ref().unwrap();
        assert!(*json == t.lines[i], "{what}: event {i} is {json:?}");
    }
    let rest = &got[whole..];
    if cut == 0 {
        assert!(
            rest.is_empty(),
            "{what}: after the events: {:?}",
            &rest[..rest.len().min(3)]
        );
        return;
    }
    assert_eq!(
        rest.len(),
        1,
        "{what}: after the events: {:?}",
        &rest[..rest.len().min(3)]
    );
    let err = rest[0].as_ref().unwrap_err();
    let at = Position {
        index: whole as u64,
        line: whole as u64 + 1,
        byte: t.starts[whole],
    };
    assert!(
        matches!(err, DecodeError::Envelope { at: found, .. } if *found == at),
        "{what}: {err:?}"
    );
    assert!(err.is_recoverable());
    let cut_line = &t.lines[whole][..cut];
    let source = Event::check(cut_line).expect_err("a cut line is no event");
    assert_eq!(
        err.to_string(),
        format!("{at}: not an AG-UI event: {source}"),
        "{what}"
    );
    assert!(err.to_string().contains("EOF while parsing"), "{err}");
}

/// The line that holds byte `n`, and how far into it `n` is.
fn line_at(t: &Text, n: u64) -> (usize, usize) {
    let i = t.starts.partition_point(|&s| s <= n) - 1;
    (i, (n - t.starts[i]) as usize)
}

#[test]
fn a_file_that_shrinks_while_read_yields_the_lines_it_still_holds() {
    let t = big();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shrinks.ndjson");
    // Where the file is cut, each well past the two chunks that may have
    // been read already:
    let cuts = [
        // at a line start inside chunk 5: a short read that ends at a line
        // end, so no error;
        t.starts[line_at(&t, 5 * MIB + 1234).0 + 1],
        // in the middle of a line inside chunk 9 (a short read);
        9 * MIB + MIB / 2,
        // in the line that runs past chunk 11's nominal end, after that
        // end: chunk 11 reads its whole nominal span, then the file ends
        // while it reads on to finish the line, and chunk 12 finds no line
        // start.
        12 * MIB + 1,
    ];
    let (i, into) = line_at(&t, cuts[2]);
    assert!(
        t.starts[i] < 12 * MIB && into < t.lines[i].len() - 1,
        "the third cut must fall inside the line that crosses 12 MiB"
    );
    for n in cuts {
        let (whole, cut) = line_at(&t, n);
        // A cut before a line's last byte (`}`) leaves text that is no event.
        assert!(
            cut < t.lines[whole].len(),
            "cut at {n}: after the event's text"
        );
        for name in ["open", "open_chunked"] {
            std::fs::write(&path, &t.bytes).unwrap();
            let reader = open(name, &path);
            OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(n)
                .unwrap();
            let got = drain(name, reader);
            assert_lines_then_cut(&got, &t, whole, cut, &format!("{name}, cut at {n}"));
        }
    }
}

#[test]
fn a_file_that_grows_while_read_yields_what_it_held_at_open() {
    let t = big();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grows.ndjson");
    let appended = text("appended", MIB);
    for name in ["open", "open_chunked"] {
        // The file ends with a whole line at open; a megabyte of lines is
        // appended: none of them is read.
        std::fs::write(&path, &t.bytes).unwrap();
        let reader = open(name, &path);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&appended.bytes).unwrap();
        drop(f);
        let got = drain(name, reader);
        assert_lines_then_cut(&got, &t, t.lines.len(), 0, &format!("{name}, grown"));

        // The file ends inside a line at open (a writer is half-way through
        // it); the rest of the line and more lines are appended: the line
        // is decoded as it was at open, cut, and nothing after it is read.
        let (whole, cut) = line_at(&t, t.starts[t.lines.len() - 1] + 20);
        std::fs::write(&path, &t.bytes[..(t.starts[whole] as usize + cut)]).unwrap();
        let reader = open(name, &path);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&t.bytes[t.starts[whole] as usize + cut..])
            .unwrap();
        f.write_all(&appended.bytes).unwrap();
        drop(f);
        let got = drain(name, reader);
        assert_lines_then_cut(&got, &t, whole, cut, &format!("{name}, grown mid-line"));
    }
}
