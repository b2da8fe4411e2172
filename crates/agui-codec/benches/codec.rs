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
//!   (`oracle/bench-json.mjs`, timed inside Node, so start-up is excluded).
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
