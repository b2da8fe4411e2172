//! Codec throughput, side by side in one run.
//!
//! Generates a realistic stream (`agui_testkit::gen::realistic`, 1,000,000
//! events unless `AGUI_BENCH_EVENTS` says otherwise) into temporary NDJSON,
//! SSE and JSON-array files, then measures decode + encode from file to
//! memory for:
//!
//! - this crate (NDJSON, SSE, JSON array, and NDJSON to SSE);
//! - a `serde_json::Value` baseline: parse and serialize every line;
//! - Node: `JSON.parse` + `JSON.stringify` of every line
//!   (`oracle/bench-json.mjs`, timed inside Node, so start-up is excluded);
//! - SIMD JSON parsers (dev-dependencies only, measured for issue 11):
//!   `simd-json` (tape, on a mutable copy of each line, the copy counted) and
//!   `sonic-rs` (`IgnoredAny`, and a checked walk of the top-level object),
//!   each line validated whole. Before timing, every validator is checked
//!   to reject a set of malformed lines.
//!
//! Each row is the best of `AGUI_BENCH_RUNS` runs (default 3). The machine is
//! shared and noisy: read the ratios, not the absolute figures.
//!
//! Run: `cargo bench -p agui-codec --bench codec`.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agui_codec::{DecodeOptions, Format, Reader, ThreadedReader, Writer};
use agui_protocol::Event;

struct Row {
    name: String,
    events: u64,
    bytes: u64,
    best: Duration,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn best_of<F: FnMut() -> u64>(runs: usize, mut f: F) -> (u64, Duration) {
    let mut best = Duration::MAX;
    let mut events = 0;
    for _ in 0..runs {
        let start = Instant::now();
        events = f();
        best = best.min(start.elapsed());
    }
    (events, best)
}

fn write_file(path: &Path, events: &[Event], format: Format) -> u64 {
    let mut w = Writer::new(
        BufWriter::with_capacity(1 << 20, File::create(path).unwrap()),
        format,
    );
    for e in events {
        w.write_event(e).unwrap();
    }
    w.finish().unwrap();
    std::fs::metadata(path).unwrap().len()
}

/// Decodes `path` as `from` and encodes every event as `to` into `out`.
fn ours(path: &Path, from: Format, to: Format, out: &mut Vec<u8>) -> u64 {
    out.clear();
    let reader = Reader::with_format(
        BufReader::with_capacity(1 << 16, File::open(path).unwrap()),
        from,
    );
    let mut w = Writer::new(&mut *out, to);
    let mut n = 0;
    for event in reader {
        w.write_event(&event.expect("the generated stream decodes"))
            .unwrap();
        n += 1;
    }
    w.finish().unwrap();
    n
}

/// The envelope alone: `Event::from_json` on every line of an in-memory
/// NDJSON file (no framing, no output), to show what framing adds.
fn envelope_only(path: &Path) -> u64 {
    let text = std::fs::read(path).unwrap();
    let mut n = 0;
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let line = std::str::from_utf8(line).unwrap();
        std::hint::black_box(Event::from_json(line).unwrap());
        n += 1;
    }
    n
}

/// The same through [`ThreadedReader`] (background decoding; two threads for
/// an NDJSON file above its threshold).
fn threaded(path: &Path, to: Format, out: &mut Vec<u8>) -> u64 {
    out.clear();
    let mut reader = ThreadedReader::open(path, DecodeOptions::default()).unwrap();
    let mut w = Writer::new(&mut *out, to);
    let mut n = 0;
    while let Some(batch) = reader.next_batch() {
        for event in batch.expect("the generated stream decodes") {
            w.write_event(&event).unwrap();
            n += 1;
        }
    }
    w.finish().unwrap();
    n
}

/// Ceiling: find every line end of the file (read whole) with `memchr`.
fn memchr_scan(text: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', text).count() as u64
}

/// Ceiling: copy the file (read whole) once; `lines` is its event count.
fn memcpy(text: &[u8], lines: u64, out: &mut Vec<u8>) -> u64 {
    out.clear();
    out.extend_from_slice(text);
    std::hint::black_box(&out);
    lines
}

/// The reference envelope path (`serde_json` + a byte pass), what
/// `Event::from_json` did for every event before the one-pass scanner.
fn reference_envelope(text: &[u8]) -> u64 {
    let mut n = 0;
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let line = std::str::from_utf8(line).unwrap();
        std::hint::black_box(Event::from_json_reference(line).unwrap());
        n += 1;
    }
    n
}

/// Validation alone with `serde_json` (`IgnoredAny`): no type, no copy.
fn serde_validate(text: &[u8]) -> u64 {
    let mut n = 0;
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let _: serde::de::IgnoredAny = serde_json::from_slice(line).unwrap();
        n += 1;
    }
    n
}

/// The lines of an in-memory NDJSON file, blank lines skipped.
fn lines_of(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split(|&b| b == b'\n').filter(|l| !l.is_empty())
}

/// `simd-json` validation of one line: copies it into `buf` (simd-json
/// parses in place, so the copy is part of the cost) and builds its tape.
fn simd_json_ok(line: &[u8], buf: &mut Vec<u8>, buffers: &mut simd_json::Buffers) -> bool {
    buf.clear();
    buf.extend_from_slice(line);
    match simd_json::to_tape_with_buffers(buf, buffers) {
        Ok(tape) => {
            std::hint::black_box(&tape);
            true
        }
        Err(_) => false,
    }
}

/// `simd-json` tape of every line (validation of the whole line).
fn simd_json_tape(text: &[u8]) -> u64 {
    let mut buf = Vec::with_capacity(1 << 16);
    let mut buffers = simd_json::Buffers::default();
    let mut n = 0;
    for line in lines_of(text) {
        assert!(simd_json_ok(line, &mut buf, &mut buffers));
        n += 1;
    }
    n
}

/// `simd-json` tape of every line, then the `type` string read from it.
fn simd_json_type(text: &[u8]) -> u64 {
    use simd_json::prelude::*;
    let mut buf = Vec::with_capacity(1 << 16);
    let mut buffers = simd_json::Buffers::default();
    let mut n = 0;
    for line in lines_of(text) {
        buf.clear();
        buf.extend_from_slice(line);
        let tape = simd_json::to_tape_with_buffers(&mut buf, &mut buffers).unwrap();
        let ty = tape.as_value().get_str("type").map(str::len);
        std::hint::black_box(ty.unwrap());
        n += 1;
    }
    n
}

/// `sonic-rs` validation of one line: `IgnoredAny` through its serde
/// deserializer (skips every value checked, UTF-8 and trailing bytes too).
fn sonic_ok(line: &[u8]) -> bool {
    sonic_rs::from_slice::<serde::de::IgnoredAny>(line).is_ok()
}

fn sonic_validate(text: &[u8]) -> u64 {
    let mut n = 0;
    for line in lines_of(text) {
        assert!(sonic_ok(line));
        n += 1;
    }
    n
}

/// `sonic-rs` full parse of every line into its own `Value` (its DOM path).
fn sonic_value(text: &[u8]) -> u64 {
    let mut n = 0;
    for line in lines_of(text) {
        let v: sonic_rs::Value = sonic_rs::from_slice(line).unwrap();
        std::hint::black_box(&v);
        n += 1;
    }
    n
}

/// `Event::from_json` on every line of the file already in memory (the
/// row above also reads the file), for a like-for-like comparison with the
/// validator rows.
fn envelope_in_memory(text: &[u8]) -> u64 {
    let mut n = 0;
    for line in lines_of(text) {
        let line = std::str::from_utf8(line).unwrap();
        std::hint::black_box(Event::from_json(line).unwrap());
        n += 1;
    }
    n
}

/// `sonic-rs` checked walk of the top-level object: every key with its value
/// skipped checked (`to_object_iter`), keeping the `type` string and the
/// offset and length of each value's raw bytes (what our scanner records),
/// after a UTF-8 check of the line, then a check that nothing follows the
/// object (the iterator does neither). Returns
/// `None` when the line is rejected.
fn sonic_walk(line: &[u8], fields: &mut Vec<(usize, usize)>) -> Option<usize> {
    let line = std::str::from_utf8(line).ok()?;
    fields.clear();
    let mut ty = None;
    for item in sonic_rs::to_object_iter(line) {
        let (key, value) = item.ok()?;
        let raw = value.as_raw_str();
        fields.push((raw.as_ptr() as usize - line.as_ptr() as usize, raw.len()));
        if key == "type" {
            ty = Some(raw.len());
        }
    }
    // The iterator stops at the closing brace without looking past it: the
    // rest of the line must be that brace alone, JSON whitespace around it.
    let end = fields.last().map(|&(at, len)| at + len)?;
    let tail = line[end..].trim_matches([' ', '\t', '\n', '\r']);
    (tail == "}").then_some(ty?)
}

fn sonic_fields(text: &[u8]) -> u64 {
    let mut fields = Vec::with_capacity(16);
    let mut n = 0;
    for line in lines_of(text) {
        std::hint::black_box(sonic_walk(line, &mut fields).unwrap());
        std::hint::black_box(&fields);
        n += 1;
    }
    n
}

/// A validator under check: does it accept this line?
type Validator = dyn FnMut(&[u8]) -> bool;

/// Checks, before timing, that every validator measured rejects malformed
/// lines (one error each, anywhere in the line, not only before `type`), and
/// prints where they disagree on the debatable ones.
fn check_validators() {
    let must_reject: &[&[u8]] = &[
        br#"{"type":"RUN_STARTED""#,
        br#"{"type":"RUN_STARTED",}"#,
        br#"{"type":"RUN_STARTED"} x"#,
        br#"{"type":"RUN_STARTED"}{}"#,
        br#"{"type":"RUN_STARTED","a":"\x"}"#,
        br#"{"type":"RUN_STARTED","a":"\u12"}"#,
        b"{\"type\":\"RUN_STARTED\",\"a\":\"\x01\"}",
        b"{\"type\":\"RUN_STARTED\",\"a\":\"\xff\"}",
        br#"{"type":"RUN_STARTED","a":01}"#,
        br#"{"type":"RUN_STARTED","a":1.}"#,
        br#"{"type":"RUN_STARTED","a":-}"#,
        br#"{"type":"RUN_STARTED","a":tru}"#,
        br#"{"type":"RUN_STARTED",'a':1}"#,
        br#"{"type":"RUN_STARTED","a" 1}"#,
        br#"{"type":"RUN_STARTED","a":[1,2}"#,
        br#"{"type":"RUN_STARTED","a":{"b":[1,2,]}}"#,
        br#"{"type":"RUN_STARTED","a":{"b":1,}}"#,
    ];
    let debatable: &[(&str, &[u8])] = &[
        ("lone surrogate", br#"{"type":"RUN_STARTED","a":"\ud800"}"#),
        (
            "duplicate key",
            br#"{"type":"RUN_STARTED","type":"RUN_FINISHED"}"#,
        ),
        ("no type", br#"{"a":1}"#),
        ("array", br#"[1]"#),
    ];
    let mut buf = Vec::new();
    let mut buffers = simd_json::Buffers::default();
    let mut fields = Vec::new();
    let mut validators: Vec<(&str, Box<Validator>)> = vec![
        (
            "serde_json IgnoredAny",
            Box::new(|l| serde_json::from_slice::<serde::de::IgnoredAny>(l).is_ok()),
        ),
        (
            "Event::from_json",
            Box::new(|l| std::str::from_utf8(l).is_ok_and(|s| Event::from_json(s).is_ok())),
        ),
        (
            "simd-json tape",
            Box::new(move |l| simd_json_ok(l, &mut buf, &mut buffers)),
        ),
        ("sonic-rs IgnoredAny", Box::new(sonic_ok)),
        (
            "sonic-rs Value",
            Box::new(|l| sonic_rs::from_slice::<sonic_rs::Value>(l).is_ok()),
        ),
        (
            "sonic-rs object walk",
            Box::new(move |l| sonic_walk(l, &mut fields).is_some()),
        ),
    ];
    for (name, ok) in &mut validators {
        let missed: Vec<String> = must_reject
            .iter()
            .filter(|bad| ok(bad))
            .map(|bad| format!("{:?}", String::from_utf8_lossy(bad)))
            .collect();
        // `serde_json` deserializing `IgnoredAny` from bytes does not check
        // the UTF-8 of ignored strings: that row is shown, not required.
        assert!(
            missed.is_empty() || (*name == "serde_json IgnoredAny" && missed.len() == 1),
            "{name} accepts malformed {missed:?}"
        );
        let verdicts: Vec<String> = debatable
            .iter()
            .map(|(what, l)| format!("{what}: {}", if ok(l) { "accepted" } else { "rejected" }))
            .collect();
        println!(
            "{name}: {} of {} malformed lines rejected{}; {}",
            must_reject.len() - missed.len(),
            must_reject.len(),
            if missed.is_empty() {
                String::new()
            } else {
                format!(" (accepted {})", missed.join(", "))
            },
            verdicts.join(", ")
        );
    }
}

/// Parses every NDJSON line into a `serde_json::Value` and serializes it.
fn value_baseline(path: &Path, out: &mut Vec<u8>) -> u64 {
    out.clear();
    let mut reader = BufReader::with_capacity(1 << 16, File::open(path).unwrap());
    let mut line = String::new();
    let mut n = 0;
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        serde_json::to_writer(&mut *out, &value).unwrap();
        out.push(b'\n');
        n += 1;
    }
    n
}

/// Runs `oracle/bench-json.mjs`; `None` when Node cannot be run.
fn node(path: &Path, runs: usize) -> Option<(u64, Duration)> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../oracle/bench-json.mjs");
    let mut child = Command::new("node")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()?;
    let request = serde_json::json!({ "path": path, "repeat": runs });
    child
        .stdin
        .take()?
        .write_all(request.to_string().as_bytes())
        .ok()?;
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let best = v["runs_ms"]
        .as_array()?
        .iter()
        .filter_map(|r| r.as_f64())
        .fold(f64::INFINITY, f64::min);
    Some((
        v["events"].as_u64()?,
        Duration::from_secs_f64(best / 1000.0),
    ))
}

fn main() {
    // `cargo bench` passes `--bench`; other arguments are not used.
    let n_events = env_usize("AGUI_BENCH_EVENTS", 1_000_000);
    let runs = env_usize("AGUI_BENCH_RUNS", 3).max(1);
    let dir = tempfile::tempdir().unwrap();
    check_validators();
    // simd-json picks its kernel at run time; sonic-rs at compile time, and
    // needs AVX2 and PCLMULQDQ enabled by RUSTFLAGS to use its SIMD path.
    println!(
        "simd-json kernel: {:?}; sonic-rs built with avx2+pclmulqdq: {}",
        simd_json::Deserializer::algorithm(),
        cfg!(all(target_feature = "avx2", target_feature = "pclmulqdq"))
    );

    let events = agui_testkit::r#gen::realistic(n_events, 0xA6_01);
    let total: usize = events.iter().map(Event::len_bytes).sum();
    let mut mix: Vec<(String, usize)> = Vec::new();
    for e in &events {
        let name = e.type_name();
        match mix.iter_mut().find(|(n, _)| n == name) {
            Some((_, c)) => *c += 1,
            None => mix.push((name.to_owned(), 1)),
        }
    }
    mix.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    println!(
        "stream: {} events, {:.1} MB of event JSON, mean {:.0} bytes/event, {} distinct types",
        events.len(),
        total as f64 / 1e6,
        total as f64 / events.len().max(1) as f64,
        mix.len()
    );
    let top: Vec<String> = mix
        .iter()
        .take(8)
        .map(|(n, c)| format!("{n} {:.1}%", *c as f64 * 100.0 / events.len().max(1) as f64))
        .collect();
    println!("mix: {}", top.join(", "));

    let ndjson = dir.path().join("events.ndjson");
    let sse = dir.path().join("events.sse");
    let json = dir.path().join("events.json");
    let ndjson_len = write_file(&ndjson, &events, Format::Ndjson);
    let sse_len = write_file(&sse, &events, Format::Sse);
    let json_len = write_file(&json, &events, Format::Json);
    drop(events);

    let mut out = Vec::with_capacity(sse_len as usize + (1 << 20));
    let mut rows = Vec::new();
    let mut measure = |name: &str, bytes: u64, f: &mut dyn FnMut(&mut Vec<u8>) -> u64| {
        let (events, best) = best_of(runs, || f(&mut out));
        rows.push(Row {
            name: name.to_owned(),
            events,
            bytes,
            best,
        });
    };
    measure("agui-codec NDJSON -> NDJSON", ndjson_len, &mut |o| {
        ours(&ndjson, Format::Ndjson, Format::Ndjson, o)
    });
    measure("agui-codec SSE -> SSE", sse_len, &mut |o| {
        ours(&sse, Format::Sse, Format::Sse, o)
    });
    measure("agui-codec JSON array -> JSON array", json_len, &mut |o| {
        ours(&json, Format::Json, Format::Json, o)
    });
    measure("agui-codec NDJSON -> SSE", ndjson_len, &mut |o| {
        ours(&ndjson, Format::Ndjson, Format::Sse, o)
    });
    measure(
        "agui-codec NDJSON -> SSE, ThreadedReader",
        ndjson_len,
        &mut |o| threaded(&ndjson, Format::Sse, o),
    );
    let whole = std::fs::read(&ndjson).unwrap();
    let lines = memchr_scan(&whole);
    measure(
        "ceiling: memchr line scan (file in memory)",
        ndjson_len,
        &mut |_| memchr_scan(&whole),
    );
    measure("ceiling: memcpy (file in memory)", ndjson_len, &mut |o| {
        memcpy(&whole, lines, o)
    });
    measure(
        "serde_json IgnoredAny validate per line",
        ndjson_len,
        &mut |_| serde_validate(&whole),
    );
    measure(
        "simd-json tape per line (copy + validate)",
        ndjson_len,
        &mut |_| simd_json_tape(&whole),
    );
    measure("simd-json tape per line + type", ndjson_len, &mut |_| {
        simd_json_type(&whole)
    });
    measure(
        "sonic-rs IgnoredAny validate per line",
        ndjson_len,
        &mut |_| sonic_validate(&whole),
    );
    measure("sonic-rs Value parse per line", ndjson_len, &mut |_| {
        sonic_value(&whole)
    });
    measure(
        "sonic-rs object walk: type + field offsets",
        ndjson_len,
        &mut |_| sonic_fields(&whole),
    );
    measure(
        "Event::from_json_reference per line (before)",
        ndjson_len,
        &mut |_| reference_envelope(&whole),
    );
    measure(
        "Event::from_json per line (file read whole)",
        ndjson_len,
        &mut |_| envelope_only(&ndjson),
    );
    measure(
        "Event::from_json per line (file in memory)",
        ndjson_len,
        &mut |_| envelope_in_memory(&whole),
    );
    measure(
        "serde_json::Value parse + serialize (NDJSON)",
        ndjson_len,
        &mut |o| value_baseline(&ndjson, o),
    );
    let node_row = node(&ndjson, runs).map(|(events, best)| Row {
        name: "Node JSON.parse + JSON.stringify (NDJSON)".to_owned(),
        events,
        bytes: ndjson_len,
        best,
    });
    let node_rate = node_row
        .as_ref()
        .map(|r| r.events as f64 / r.best.as_secs_f64());
    if node_row.is_none() {
        println!("(Node could not be run: no Node baseline)");
    }
    rows.extend(node_row);

    println!();
    println!(
        "| {:<46} | {:>9} | {:>8} | {:>8} | {:>9} | {:>7} |",
        "decode + encode, file to memory", "events", "best s", "MB/s", "Mevents/s", "x Node"
    );
    println!(
        "|{:-<48}|{:->11}|{:->10}|{:->10}|{:->11}|{:->9}|",
        "", "", "", "", "", ""
    );
    for r in &rows {
        let secs = r.best.as_secs_f64();
        let rate = r.events as f64 / secs;
        let ratio = node_rate.map_or("-".to_owned(), |n| format!("{:.1}", rate / n));
        println!(
            "| {:<46} | {:>9} | {:>8.3} | {:>8.0} | {:>9.2} | {:>7} |",
            r.name,
            r.events,
            secs,
            r.bytes as f64 / 1e6 / secs,
            rate / 1e6,
            ratio
        );
    }
}
