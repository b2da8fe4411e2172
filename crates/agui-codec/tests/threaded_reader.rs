//! `ThreadedReader` (background threads, big files split across two) yields exactly
//! what `Reader` yields on the same file: the same events, the same errors
//! at the same positions, ending at the same place. Checked on the whole
//! generated corpus with chunks small enough that nearly every event lands
//! on a boundary, and on hand-made damage (bad lines, a byte order mark in
//! the middle, over-long lines, CRLF, blank lines, no final newline).

use std::io::Write;
use std::path::Path;

use agui_codec::{DecodeOptions, Format, Reader, Split, ThreadedReader, Writer};
use agui_testkit::{Profile, chunk_soup, invalid_stream, realistic, stream};
use proptest::prelude::*;

/// Everything a reader yields, comparable (errors by message).
fn outcome(
    items: impl Iterator<Item = Result<agui_protocol::Event, agui_codec::DecodeError>>,
) -> Vec<Result<String, String>> {
    items
        .map(|item| item.map(|e| e.json().to_owned()).map_err(|e| e.to_string()))
        .collect()
}

/// Everything a chunked reader yields, in the same form.
fn chunked_outcome(mut reader: ThreadedReader) -> Vec<Result<String, String>> {
    let mut got = Vec::new();
    while let Some(item) = reader.next_chunk() {
        match item {
            Ok(chunk) => {
                assert!(!chunk.is_empty(), "an empty chunk was handed over");
                got.extend(chunk.iter().map(|e| Ok(e.json().to_owned())));
            }
            Err(e) => got.push(Err(e.to_string())),
        }
    }
    got
}

fn reference(path: &Path, options: DecodeOptions) -> Vec<Result<String, String>> {
    let file = std::fs::File::open(path).unwrap();
    outcome(Reader::with_options(std::io::BufReader::new(file), options))
}

fn split(chunk: u64, threads: usize) -> Split {
    Split {
        threshold: 0,
        chunk,
        threads,
        caller_helps: false,
    }
}

/// One decoding thread, and the caller's thread decoding whatever chunk
/// that thread has not taken when the caller would wait.
fn helped(chunk: u64) -> Split {
    Split {
        caller_helps: true,
        ..split(chunk, 1)
    }
}

fn check(bytes: &[u8], options: DecodeOptions, chunks: &[u64]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input");
    std::fs::write(&path, bytes).unwrap();
    let expected = reference(&path, options);
    for &chunk in chunks {
        let policies = [1, 2, 3]
            .map(|threads| (format!("{threads} threads"), split(chunk, threads)))
            .into_iter()
            .chain([("a helping caller".to_owned(), helped(chunk))]);
        for (threads, policy) in policies {
            let reader = ThreadedReader::open_with(&path, options, policy).unwrap();
            let got = outcome(reader);
            assert_eq!(
                got,
                expected,
                "chunk {chunk}, {threads}, input {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            );
            // Handed over as chunks of slices: the same, in the same order.
            let reader = ThreadedReader::open_chunked(&path, options, policy).unwrap();
            assert_eq!(
                chunked_outcome(reader),
                expected,
                "chunked, chunk {chunk}, {threads}, input {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            );
            // Owned batches from a chunked reader, and chunks from an owned one.
            let mut reader = ThreadedReader::open_chunked(&path, options, policy).unwrap();
            let mut batches = Vec::new();
            while let Some(item) = reader.next_batch() {
                match item {
                    Ok(events) => batches.extend(events.iter().map(|e| Ok(e.json().to_owned()))),
                    Err(e) => batches.push(Err(e.to_string())),
                }
            }
            assert_eq!(batches, expected, "batches of a chunked reader");
            let reader = ThreadedReader::open_with(&path, options, policy).unwrap();
            assert_eq!(
                chunked_outcome(reader),
                expected,
                "chunks of an owned reader"
            );
        }
    }
    // The default policy (sequential below the threshold) too.
    assert_eq!(
        outcome(ThreadedReader::open(&path, options).unwrap()),
        expected
    );
    let source = std::fs::File::open(&path).unwrap();
    assert_eq!(
        chunked_outcome(ThreadedReader::from_read_chunked(source, options).unwrap()),
        expected
    );
}

fn encode(events: &[agui_protocol::Event], format: Format) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), format);
    for e in events {
        w.write_event(e).unwrap();
    }
    w.finish().unwrap()
}

fn ndjson(events: &[agui_protocol::Event]) -> Vec<u8> {
    encode(events, Format::Ndjson)
}

#[test]
fn the_whole_generated_corpus_decodes_the_same_split_or_not() {
    let mut all = Vec::new();
    for &profile in Profile::ALL {
        for seed in 0..3 {
            all.extend(stream(profile, seed));
        }
    }
    for seed in 0..5 {
        all.extend(invalid_stream(seed));
        all.extend(chunk_soup(seed));
    }
    let bytes = ndjson(&all);
    assert!(bytes.len() > 100_000, "{}", bytes.len());
    check(&bytes, DecodeOptions::default(), &[97, 4096, 65_536]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corpus.ndjson");
    std::fs::write(&path, &bytes).unwrap();
    let reader =
        ThreadedReader::open_with(&path, DecodeOptions::default(), split(4096, 2)).unwrap();
    assert!(reader.is_parallel());
    assert_eq!(reader.format(), Some(Format::Ndjson));
}

#[test]
fn damage_is_reported_at_the_same_place() {
    let cases: Vec<Vec<u8>> = vec![
        b"{\"type\":\"A\"}\n\n{\"type\":1}\n{\"type\":\"B\"} x\n\xff\xfe\n[]\n{\"type\":\"C\"}\n"
            .to_vec(),
        b"\xEF\xBB\xBF{\"type\":\"A\"}\n\xEF\xBB\xBF{\"type\":\"B\"}\n{\"type\":\"C\"}".to_vec(),
        b"{\"type\":\"A\"}\r\n\r\n  \t\r\n{\"type\":\"B\",\"x\":1.10}\r\n{\"type\":\"C\"}".to_vec(),
        b"\n\n\n{\"type\":\"A\"}\n".to_vec(),
        format!(
            "{{\"type\":\"A\"}}\n{}\n{{\"type\":\"B\"}}\n",
            "{\"type\":\"L\",\"x\":\"".to_owned() + &"y".repeat(300) + "\"}"
        )
        .into_bytes(),
        b"{\"type\":\"A\"}\n{\"type\":\"A\"\n{\"type\":\"A\"}\n".to_vec(),
        // A line break inside a line (`\r`): the event is re-written on one
        // line, so it is not a slice of the buffer.
        b"{\"type\":\"A\"}\n{\"type\":\r\"B\"}\n{\"type\":1}\n{\"type\":\r\"C\"}\n{\"type\":\"D\"}\n"
            .to_vec(),
        // Invalid UTF-8 among good lines, before and after other damage.
        b"{\"type\":\"A\"}\n{\"type\":\"\xc3\"}\n{\"type\":\"B\"}\n{\"type\":2}\n{\"type\":\"\xe9\"}\n{\"type\":\"C\"}\n"
            .to_vec(),
    ];
    for bytes in &cases {
        check(bytes, DecodeOptions::default(), &[1, 2, 3, 5, 8, 13, 64]);
        check(
            bytes,
            DecodeOptions::format(Format::Ndjson).with_max_event_size(40),
            &[1, 3, 7, 50],
        );
    }
}

#[test]
fn empty_and_unknown_files_go_through_one_thread() {
    for bytes in [&b""[..], b"  \n ", b"hello", b"\xEF\xBB"] {
        check(bytes, DecodeOptions::default(), &[1, 4]);
        // With the format given, too (an empty file has no chunk at all:
        // found by the `decode_json_split` fuzz target).
        for format in [Format::Ndjson, Format::Sse, Format::Json] {
            check(bytes, DecodeOptions::format(format), &[1, 4]);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, b"hello, world").unwrap();
    let reader = ThreadedReader::open_with(&path, DecodeOptions::default(), split(4, 2)).unwrap();
    assert!(!reader.is_parallel());
}

/// The events of `events` written as a JSON array in other layouts than
/// the writer's: all on one line, and indented with members on lines of
/// their own (the way `JSON.stringify(events, null, 2)` writes them).
fn json_layouts(events: &[agui_protocol::Event]) -> Vec<Vec<u8>> {
    let texts: Vec<&str> = events.iter().map(|e| e.json()).collect();
    let one_line = format!("[{}]", texts.join(","));
    let values: Vec<serde_json::Value> = texts
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    let pretty = serde_json::to_string_pretty(&values).unwrap();
    vec![
        encode(events, Format::Json),
        one_line.into_bytes(),
        pretty.replace('\n', "\r\n").into_bytes(),
        pretty.into_bytes(),
    ]
}

/// Events whose insides look like element starts: arrays of objects that
/// start with a `"type"` key (content parts), keys and strings holding
/// `},{`, an event whose first key is not `"type"`.
fn lookalikes() -> Vec<agui_protocol::Event> {
    let parts: Vec<String> = (0..40)
        .map(|i| format!(r#"{{"type":"text","text":"part {i} }},{{ x"}}"#))
        .collect();
    let texts = [
        format!(
            r#"{{"type":"MESSAGES_SNAPSHOT","messages":[{{"id":"u1","role":"user","content":[{}]}},{{"id":"a1","role":"assistant","content":"ok"}}]}}"#,
            parts.join(",")
        ),
        r#"{"type":"CUSTOM","name":"n","value":{"a},{":[{"b":1},{"type":"x"}],"c":"},{\"type\":1}"}}"#
            .to_owned(),
        r#"{"messageId":"m","type":"TEXT_MESSAGE_CONTENT","delta":"},{"}"#.to_owned(),
        format!(
            r#"{{"type":"STATE_SNAPSHOT","snapshot":{{"rows":[{}]}}}}"#,
            (0..60)
                .map(|i| format!(r#"{{"type":"row","n":{i}}}"#))
                .collect::<Vec<_>>()
                .join(",")
        ),
    ];
    texts
        .iter()
        .map(|t| agui_protocol::Event::from_json(t).unwrap())
        .collect()
}

/// A JSON array of events is cut where elements seem to start; a guess
/// that is wrong (inside an event) is found by the chunk before it, which
/// decodes on. Either way the events, errors and positions are those of
/// one decoder over the whole array.
#[test]
fn the_generated_corpus_as_a_json_array_decodes_the_same_split_or_not() {
    let mut all = Vec::new();
    for &profile in Profile::ALL {
        all.extend(stream(profile, 0));
    }
    for seed in 0..3 {
        all.extend(chunk_soup(seed));
        all.extend(lookalikes());
    }
    for bytes in json_layouts(&all) {
        assert!(bytes.len() > 50_000, "{}", bytes.len());
        check(&bytes, DecodeOptions::default(), &[97, 4096, 65_536]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corpus.json");
        std::fs::write(&path, &bytes).unwrap();
        let mut reader =
            ThreadedReader::open_with(&path, DecodeOptions::default(), split(512, 2)).unwrap();
        assert!(reader.is_parallel());
        assert_eq!(reader.format(), Some(Format::Json));
        while reader.next_chunk().is_some() {}
        // The lookalikes make some guesses wrong; most are right.
        let (dropped, chunks) = reader.chunks_dropped();
        assert!(dropped > 0, "no guess was wrong in {chunks} chunks");
        assert!(dropped * 2 < chunks, "{dropped} of {chunks} chunks dropped");
    }
}

/// JSON array damage, split everywhere: bad elements (decoding goes on),
/// bad UTF-8, structural errors and an over-long element (decoding ends),
/// a byte order mark, text after the closing `]`, no closing `]`.
#[test]
fn json_damage_is_reported_at_the_same_place() {
    let cases: Vec<Vec<u8>> = vec![
        b"[{\"type\":\"A\"},{\"type\":1},{\"a\":[}],{\"type\":\"B\"}]".to_vec(),
        b"\xEF\xBB\xBF[\n {\"type\":\"A\"},\n {\"type\":\"\xc3\"},\r\n {\"type\":\"B\"}\n]\n"
            .to_vec(),
        b"[{\"type\":\"A\"},{\"type\":\"B\"}] x".to_vec(),
        b"[{\"type\":\"A\"},{\"type\":\"B\"}".to_vec(),
        b"[{\"type\":\"A\"},{\"type\":\"B\"".to_vec(),
        b"[{\"type\":\"A\"},,{\"type\":\"B\"}]".to_vec(),
        b"[{\"type\":\"A\"} {\"type\":\"B\"},{\"type\":\"C\"}]".to_vec(),
        b"[{\"type\":\"A\"},1,{\"type\":\"B\"}]".to_vec(),
        b"[{\"type\":\"A\",\"s\":\"},{\\\"type\"},{\"type\":\"B\",\"k\":{\"},{\":1}}]".to_vec(),
        format!(
            "[{{\"type\":\"A\"}},{},{{\"type\":\"B\"}}]",
            "{\"type\":\"L\",\"x\":\"".to_owned() + &"y".repeat(300) + "\"}"
        )
        .into_bytes(),
        b"[]".to_vec(),
        b"[{\"type\":\"A\"}]\n\n".to_vec(),
    ];
    for bytes in &cases {
        check(bytes, DecodeOptions::default(), &[1, 2, 3, 5, 8, 13, 64]);
        check(
            bytes,
            DecodeOptions::format(Format::Json).with_max_event_size(40),
            &[1, 3, 7, 50],
        );
    }
}

#[test]
fn a_helping_caller_decodes_chunks_itself_and_changes_nothing() {
    // Chunks of a few events and a caller that does nothing else: it
    // outruns the decoding thread and takes chunks of its own.
    let bytes = ndjson(&realistic(3_000, 5));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input");
    std::fs::write(&path, &bytes).unwrap();
    let options = DecodeOptions::default();
    let expected = reference(&path, options);
    // Whether the caller ever finds its queue empty depends on scheduling:
    // the outputs must be equal on every pass, and some pass of ten must
    // see the caller decode (each pass has about 1,000 chances).
    let mut helped_once = false;
    for _ in 0..10 {
        let mut reader = ThreadedReader::open_chunked(&path, options, helped(512)).unwrap();
        let mut got = Vec::new();
        while let Some(item) = reader.next_chunk() {
            match item {
                Ok(chunk) => got.extend(chunk.iter().map(|e| Ok(e.json().to_owned()))),
                Err(e) => got.push(Err(e.to_string())),
            }
        }
        assert_eq!(got, expected);
        if reader.chunks_decoded_by_caller() > 0 {
            helped_once = true;
            break;
        }
    }
    assert!(
        helped_once,
        "the caller never decoded a chunk of {} bytes in 512-byte chunks, in ten passes",
        bytes.len()
    );
    // Without the policy, it never does.
    let mut reader = ThreadedReader::open_chunked(&path, options, split(512, 1)).unwrap();
    while reader.next_chunk().is_some() {}
    assert_eq!(reader.chunks_decoded_by_caller(), 0);
}

#[test]
fn a_reader_dropped_early_stops_its_threads() {
    let events = realistic(20_000, 5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&ndjson(&events)).unwrap();
    drop(f);
    for policy in [split(1 << 14, 2), helped(1 << 14)] {
        let mut reader =
            ThreadedReader::open_with(&path, DecodeOptions::default(), policy).unwrap();
        assert!(reader.next().is_some());
        drop(reader); // joins its threads: the test would hang otherwise
    }
}

/// What a reader yields call by call through `next_chunk`, `next_batch` or
/// `next`, until the first `None`; then asserts that more calls return
/// `None` too (and return at all).
fn calls_until_none(mut reader: ThreadedReader, how: &str) -> Vec<Result<String, String>> {
    let mut got = Vec::new();
    for calls in 0.. {
        // A reader that never ends fails the test rather than hanging it.
        assert!(calls < 10_000, "{how}: no end after {calls} calls");
        let item = match how {
            "next_chunk" => reader.next_chunk().map(|item| {
                item.map(|chunk| {
                    chunk
                        .iter()
                        .map(|e| e.json().to_owned())
                        .collect::<Vec<_>>()
                })
            }),
            "next_batch" => reader.next_batch().map(|item| {
                item.map(|events| events.iter().map(|e| e.json().to_owned()).collect())
            }),
            _ => reader
                .next()
                .map(|item| item.map(|e| vec![e.json().to_owned()])),
        };
        match item {
            None => break,
            Some(Ok(events)) => got.extend(events.into_iter().map(Ok)),
            Some(Err(e)) => got.push(Err(e.to_string())),
        }
    }
    for _ in 0..3 {
        let more = match how {
            "next_chunk" => reader.next_chunk().map(|item| item.map(|_| ())),
            "next_batch" => reader.next_batch().map(|item| item.map(|_| ())),
            _ => reader.next().map(|item| item.map(|_| ())),
        };
        assert!(more.is_none(), "{how} after the end: {more:?}");
    }
    got
}

/// Yields `data` a few bytes at a time, then fails on every read.
struct FailsAfter(&'static [u8]);

impl std::io::Read for FailsAfter {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.0.is_empty() {
            return Err(std::io::Error::other("disk on fire"));
        }
        let n = buf.len().min(self.0.len()).min(5);
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn after_an_error_that_ends_a_split_file_every_call_returns_none() {
    // A bad line (recoverable: decoding goes on after it) and a line over
    // the maximum (decoding ends), in a file split into many chunks.
    let mut text = String::new();
    for i in 0..200 {
        match i {
            50 => text.push_str("{\"type\":1}\n"),
            150 => text.push_str(&format!(
                "{{\"type\":\"L\",\"x\":\"{}\"}}\n",
                "y".repeat(200)
            )),
            _ => text.push_str(&format!("{{\"type\":\"A\",\"n\":{i}}}\n")),
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input");
    std::fs::write(&path, &text).unwrap();
    let options = DecodeOptions::default().with_max_event_size(100);
    let expected = reference(&path, options);
    assert_eq!(expected.len(), 151);
    assert!(
        expected[50]
            .as_ref()
            .unwrap_err()
            .contains("not an AG-UI event")
    );
    assert_eq!(
        expected[150],
        Err(
            "event 150 (line 151, byte 3031): event exceeds the maximum size of 100 bytes"
                .to_owned()
        )
    );
    for how in ["next_chunk", "next_batch", "next"] {
        for policy in [split(256, 2), helped(256)] {
            let reader = ThreadedReader::open_chunked(&path, options, policy).unwrap();
            assert!(reader.is_parallel());
            let got = calls_until_none(reader, how);
            assert_eq!(got, expected, "open_chunked, {how}, {policy:?}");
            let reader = ThreadedReader::open_with(&path, options, policy).unwrap();
            let got = calls_until_none(reader, how);
            assert_eq!(got, expected, "open_with, {how}, {policy:?}");
        }
    }
}

#[test]
fn after_a_read_error_every_call_returns_none() {
    let data = b"{\"type\":\"A\"}\n{\"type\":\"B\"}\n{\"ty";
    let expected = vec![
        Ok(r#"{"type":"A"}"#.to_owned()),
        Ok(r#"{"type":"B"}"#.to_owned()),
        Err("event 2 (line 3, byte 26): read error: disk on fire".to_owned()),
    ];
    for how in ["next_chunk", "next_batch", "next"] {
        let reader =
            ThreadedReader::from_read_chunked(FailsAfter(data), DecodeOptions::default()).unwrap();
        assert_eq!(
            calls_until_none(reader, how),
            expected,
            "from_read_chunked, {how}"
        );
        let reader = ThreadedReader::from_read(FailsAfter(data), DecodeOptions::default()).unwrap();
        assert_eq!(calls_until_none(reader, how), expected, "from_read, {how}");
    }
}

/// The corpus as SSE, as written (`\n` line ends) and with its line ends
/// turned into CRLF: split at frame ends, it decodes as one stream does.
#[test]
fn the_generated_corpus_as_sse_decodes_the_same_split_or_not() {
    let mut all = Vec::new();
    for &profile in Profile::ALL {
        all.extend(stream(profile, 0));
    }
    for seed in 0..3 {
        all.extend(invalid_stream(seed));
        all.extend(chunk_soup(seed));
    }
    let lf = encode(&all, Format::Sse);
    assert!(lf.len() > 50_000, "{}", lf.len());
    let crlf = String::from_utf8(lf.clone())
        .unwrap()
        .replace('\n', "\r\n")
        .into_bytes();
    for bytes in [&lf, &crlf] {
        check(bytes, DecodeOptions::default(), &[97, 4096, 65_536]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corpus.sse");
        std::fs::write(&path, bytes).unwrap();
        let reader =
            ThreadedReader::open_with(&path, DecodeOptions::default(), split(4096, 2)).unwrap();
        assert!(reader.is_parallel());
        assert_eq!(reader.format(), Some(Format::Sse));
    }
    // CR line ends only: no frame end after a `\n`, so one thread.
    let cr = String::from_utf8(lf)
        .unwrap()
        .replace('\n', "\r")
        .into_bytes();
    check(&cr, DecodeOptions::default(), &[4096]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cr.sse");
    std::fs::write(&path, &cr).unwrap();
    let reader =
        ThreadedReader::open_with(&path, DecodeOptions::default(), split(4096, 2)).unwrap();
    assert!(!reader.is_parallel());
}

/// SSE damage and edge cases, split everywhere: bad JSON, bad UTF-8 in a
/// field, a byte order mark at the start and one after a frame end (not
/// the stream's), comments, multi-line data, `id`/`event`/`retry` fields,
/// mixed line ends, runs of empty lines, a last frame without its empty
/// line, and an over-long line (fatal).
#[test]
fn sse_damage_is_reported_at_the_same_place() {
    let cases: Vec<Vec<u8>> = vec![
        b"data: {\"type\":\"A\"}\n\ndata: {\"type\":1}\n\ndata: x\n\ndata: {\"type\":\"B\"}\n\n".to_vec(),
        b"\xEF\xBB\xBFdata: {\"type\":\"A\"}\n\n\xEF\xBB\xBFdata: {\"type\":\"B\"}\n\ndata: {\"type\":\"C\"}\n\n".to_vec(),
        b": comment\n\nid: 7\nevent: x\nretry: 10\ndata: {\"type\":\n\ndata: \"A\"}\n\n".to_vec(),
        b"data: {\"type\":\ndata: \"A\"}\n\ndata:{\"type\":\"B\"}\r\n\r\ndata: {\"type\":\"C\"}\r\rdata: {\"type\":\"D\"}\n\r\ndata: {\"type\":\"E\"}".to_vec(),
        b"\n\n\n\r\n\r\ndata: {\"type\":\"A\"}\n\n\n\n".to_vec(),
        b"data: {\"type\":\"A\"}\n\ndata: {\"type\":\"\xc3\"}\n\n\xff: x\ndata: {\"type\":\"B\"}\n\ndata: {\"type\":\"C\"}\n\n".to_vec(),
        format!(
            "data: {{\"type\":\"A\"}}\n\ndata: {}\n\ndata: {{\"type\":\"B\"}}\n\n",
            "{\"type\":\"L\",\"x\":\"".to_owned() + &"y".repeat(300) + "\"}"
        )
        .into_bytes(),
    ];
    for bytes in &cases {
        check(bytes, DecodeOptions::default(), &[1, 2, 3, 5, 8, 13, 64]);
        check(
            bytes,
            DecodeOptions::format(Format::Sse).with_max_event_size(40),
            &[1, 3, 7, 50],
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random SSE lines (data, comments, fields, empty lines, damage) with
    /// random line ends, cut into random chunk sizes.
    #[test]
    fn random_sse_lines_decode_the_same(
        lines in prop::collection::vec(prop_oneof![
            Just("data: {\"type\":\"A\",\"delta\":\"x\"}".to_owned()),
            Just("data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"héllo\"}".to_owned()),
            Just("data:{\"type\":".to_owned()),
            Just("data: \"B\"}".to_owned()),
            Just(String::new()),
            Just(String::new()),
            Just(": keep-alive".to_owned()),
            Just("id: 5".to_owned()),
            Just("\u{feff}data: {\"type\":\"B\"}".to_owned()),
            "[a-z{}\":, ]{0,30}",
        ], 0..40),
        ends in prop::collection::vec(prop_oneof![Just("\n"), Just("\r\n"), Just("\r")], 40),
        chunk in 1u64..200,
    ) {
        let mut text = String::new();
        for (line, end) in lines.iter().zip(&ends) {
            text.push_str(line);
            text.push_str(end);
        }
        check(text.as_bytes(), DecodeOptions::format(Format::Sse), &[chunk]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random lines (events, blanks, damage) cut into random chunk sizes.
    #[test]
    fn random_lines_decode_the_same(
        lines in prop::collection::vec(prop_oneof![
            Just("{\"type\":\"A\",\"delta\":\"x\"}".to_owned()),
            Just("{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"héllo\"}".to_owned()),
            Just(String::new()),
            Just("  \r".to_owned()),
            Just("{\"type\":".to_owned()),
            Just("\u{feff}{\"type\":\"B\"}".to_owned()),
            Just("{\"type\":\r\"R\"}".to_owned()),
            "[a-z{}\":,]{0,30}",
        ], 0..40),
        crlf in any::<bool>(),
        last_newline in any::<bool>(),
        chunk in 1u64..200,
    ) {
        let end = if crlf { "\r\n" } else { "\n" };
        let mut text = lines.join(end);
        if last_newline {
            text.push_str(end);
        }
        check(text.as_bytes(), DecodeOptions::default(), &[chunk]);
    }
}

/// A file cut short by another process while it is read (a log rotated, a
/// copy still being written): whatever the format and policy, the reader
/// yields valid events from the start of the file, in order, then an error
/// or its end, and returns `None` from then on; it neither panics nor hangs.
#[test]
fn a_file_cut_short_while_it_is_read_ends_cleanly() {
    let events = realistic(20_000, 7);
    for format in [Format::Ndjson, Format::Sse, Format::Json] {
        let bytes = encode(&events, format);
        for policy in [split(1 << 12, 2), helped(1 << 12)] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("cut");
            std::fs::write(&path, &bytes).unwrap();
            let original: Vec<String> = reference(&path, DecodeOptions::default())
                .into_iter()
                .map(Result::unwrap)
                .collect();
            let mut reader =
                ThreadedReader::open_with(&path, DecodeOptions::default(), policy).unwrap();
            assert!(reader.is_parallel(), "{format:?}");
            let mut got: Vec<Result<String, String>> = Vec::new();
            let first = reader.next_chunk().expect("a first chunk").unwrap();
            got.extend(first.iter().map(|e| Ok(e.json().to_owned())));
            // Cut the file at a third, in the middle of an event.
            let cut = bytes.len() as u64 / 3 + 17;
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(cut)
                .unwrap();
            got.extend(calls_until_none(reader, "next_chunk"));
            let decoded: Vec<&String> = got.iter().map_while(|r| r.as_ref().ok()).collect();
            let how = format!("{format:?}, {policy:?}");
            assert!(
                decoded.len() <= original.len(),
                "{how}: more events than the file held"
            );
            for (i, e) in decoded.iter().enumerate() {
                assert_eq!(**e, original[i], "{how}: event {i} is not the file's");
            }
            // Past the cut, nothing but errors: no event after the first
            // error that stands for text the file no longer has.
            if decoded.len() < original.len() {
                let next = got.get(decoded.len());
                let at = format!("event {} (", decoded.len());
                assert!(
                    matches!(next, Some(Err(e)) if e.starts_with(&at)),
                    "{how}: after {} of {} events, the file having been cut, the reader gave {next:?}",
                    decoded.len(),
                    original.len()
                );
            }
        }
    }
}

/// A split file that grows while it is read (a log still being written)
/// is read as it was when it was opened: its events then, no error, and
/// nothing of what was appended, whatever was appended (whole events, a
/// line cut short, bytes that are not an event).
#[test]
fn a_file_that_grows_while_it_is_read_is_read_as_it_was_opened() {
    let events = realistic(20_000, 9);
    let more = realistic(500, 10);
    for format in [Format::Ndjson, Format::Sse, Format::Json] {
        let bytes = encode(&events, format);
        let appended = [
            encode(&more, format),
            b"{\"type\":\"RUN_STA".to_vec(),
            b"\n\0garbage, not an event\n".to_vec(),
        ];
        for tail in &appended {
            for policy in [split(1 << 12, 2), helped(1 << 12)] {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("growing");
                std::fs::write(&path, &bytes).unwrap();
                let expected = reference(&path, DecodeOptions::default());
                assert!(expected.iter().all(Result::is_ok));
                let mut reader =
                    ThreadedReader::open_chunked(&path, DecodeOptions::default(), policy).unwrap();
                assert!(reader.is_parallel(), "{format:?}");
                let mut got: Vec<Result<String, String>> = Vec::new();
                let first = reader.next_chunk().expect("a first chunk").unwrap();
                got.extend(first.iter().map(|e| Ok(e.json().to_owned())));
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .unwrap()
                    .write_all(tail)
                    .unwrap();
                got.extend(calls_until_none(reader, "next_chunk"));
                assert_eq!(
                    got,
                    expected,
                    "{format:?}, {policy:?}, {} bytes appended",
                    tail.len()
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random elements (events, lookalike insides, damage) between random
    /// whitespace, in a JSON array sometimes left open or followed by junk,
    /// cut into random chunk sizes.
    #[test]
    fn random_json_arrays_decode_the_same(
        elements in prop::collection::vec(prop_oneof![
            Just(r#"{"type":"A","delta":"x"}"#.to_owned()),
            Just(r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"h},{\"type\"éllo"}"#.to_owned()),
            Just(r#"{"type":"S","v":[{"type":"p"},{"type":"q"}],"k":{"},{":1}}"#.to_owned()),
            Just(r#"{"id":"x","type":"B"}"#.to_owned()),
            Just(r#"{"type":1}"#.to_owned()),
            Just("7".to_owned()),
            Just(String::new()),
            "[a-z{}\":, ]{0,30}",
        ], 0..40),
        gaps in prop::collection::vec(prop_oneof![Just(""), Just(" "), Just("\n"), Just("\r\n  "), Just("\t")], 41),
        close in any::<bool>(),
        chunk in 1u64..200,
    ) {
        let mut text = String::from("[");
        for (i, (element, gap)) in elements.iter().zip(&gaps).enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(gap);
            text.push_str(element);
        }
        if close {
            text.push_str(gaps[40]);
            text.push(']');
        }
        check(text.as_bytes(), DecodeOptions::format(Format::Json), &[chunk]);
    }
}

/// Events whose insides are all lookalikes: nearly every guessed chunk
/// start is wrong, so chunks decode over the ones after them. Their events
/// are still handed over a few at a time, not held until a right guess.
#[test]
fn a_chunk_that_decodes_over_others_hands_its_events_over_as_it_goes() {
    let rows: Vec<String> = (0..50)
        .map(|i| format!(r#"{{"type":"r","n":{i}}}"#))
        .collect();
    let event = format!(
        r#"{{"type":"STATE_SNAPSHOT","snapshot":{{"rows":[{}]}}}}"#,
        rows.join(",")
    );
    let text = format!("[{}]", vec![event.as_str(); 400].join(","));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lookalikes.json");
    std::fs::write(&path, &text).unwrap();
    check(text.as_bytes(), DecodeOptions::default(), &[100]);
    let mut reader =
        ThreadedReader::open_chunked(&path, DecodeOptions::default(), split(100, 2)).unwrap();
    let mut most = 0;
    let mut events = 0;
    while let Some(chunk) = reader.next_chunk() {
        let chunk = chunk.unwrap();
        most = most.max(chunk.len());
        events += chunk.len();
    }
    assert_eq!(events, 400);
    let (dropped, chunks) = reader.chunks_dropped();
    assert!(dropped * 2 > chunks, "{dropped} of {chunks} chunks dropped");
    // Each event is over twice the chunk size: one event per hand-over.
    assert_eq!(most, 1, "a chunk of {most} events was handed over");
}
