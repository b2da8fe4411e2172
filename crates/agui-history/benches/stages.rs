//! Stage profile of the event-reading paths, in one process on a file
//! already in memory: how much of the wall time of `agui compact` (deltas)
//! each stage takes, one stage added at a time, beside the memchr and
//! memcpy ceilings of the same bytes; then the stages the other commands
//! are made of: decoding each input format on one thread (the work one
//! decoding thread of `convert`, `verify` and `compact` does, read from the
//! page cache), writing each output format, verifying, and reducing.
//!
//! ```text
//! cargo bench -p agui-history --bench stages -- FILE.ndjson
//! ```
//!
//! Without a file, `AGUI_BENCH_EVENTS` realistic events (default 1,000,000)
//! are generated. Each row is the best of `AGUI_BENCH_ROUNDS` (default 5).
//! Rows are cumulative: "+ utf-8" is the line split plus UTF-8 validation,
//! and so on; the difference between rows is the stage's own cost.

use std::time::Instant;

use agui_codec::{Format, Writer};
use agui_history::compact::DeltaCompactor;
use agui_protocol::Event;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn best(rounds: usize, mut f: impl FnMut() -> usize) -> (f64, usize) {
    let mut best = f64::INFINITY;
    let mut out = 0;
    for _ in 0..rounds {
        let started = Instant::now();
        out = std::hint::black_box(f());
        best = best.min(started.elapsed().as_secs_f64());
    }
    (best, out)
}

/// The file's lines (without their `\n`), found with memchr.
fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    memchr::memchr_iter(b'\n', bytes)
        .map(move |end| {
            let line = &bytes[start..end];
            start = end + 1;
            line
        })
        .filter(|l| !l.is_empty())
}

/// Where output goes: counted and dropped, behind the same 64 KiB buffer
/// the CLI writes through (so no row pays page faults for a big output).
#[derive(Default)]
struct Count(usize);

impl std::io::Write for Count {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn sink() -> Writer<std::io::BufWriter<Count>> {
    sink_as(Format::Ndjson)
}

fn sink_as(format: Format) -> Writer<std::io::BufWriter<Count>> {
    Writer::new(
        std::io::BufWriter::with_capacity(1 << 16, Count::default()),
        format,
    )
}

fn written(w: Writer<std::io::BufWriter<Count>>) -> usize {
    w.finish()
        .unwrap()
        .into_inner()
        .map_err(|_| "flush")
        .unwrap()
        .0
}

fn main() {
    let rounds = env_usize("AGUI_BENCH_ROUNDS", 5).max(1);
    let file = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let bytes = match &file {
        Some(path) => std::fs::read(path).expect("readable input"),
        None => {
            let n = env_usize("AGUI_BENCH_EVENTS", 1_000_000);
            let mut out = Vec::new();
            for e in agui_testkit::realistic(n, 7) {
                out.extend_from_slice(e.json().as_bytes());
                out.push(b'\n');
            }
            out
        }
    };
    let mb = bytes.len() as f64 / 1e6;
    // `AGUI_STAGES=verify`: only the verifier over decoded chunks (as
    // `agui verify` gets them, member tables included), for a profiler.
    if std::env::var("AGUI_STAGES").is_ok_and(|v| v == "verify") {
        let (t, n) = verify_chunks(rounds, bytes);
        println!(
            "| verify (chunks in memory, member tables) | {:.1} | {:.0} | {n} |",
            t * 1e3,
            mb / t
        );
        return;
    }
    // `AGUI_STAGES=deltas`: only the compaction row, for a profiler.
    let only_deltas = std::env::var("AGUI_STAGES").is_ok_and(|v| v == "deltas");
    let mut rows: Vec<(&str, f64, usize)> = Vec::new();
    if !only_deltas {
        let (t, n) = best(rounds, || {
            let copy = std::hint::black_box(bytes.clone());
            copy.len()
        });
        rows.push(("ceiling: memcpy", t, n));
        let (t, n) = best(rounds, || memchr::memchr_iter(b'\n', &bytes).count());
        rows.push(("ceiling: memchr newline scan", t, n));
        let (t, n) = best(rounds, || lines(&bytes).count());
        rows.push(("line split", t, n));
        let (t, n) = best(rounds, || {
            lines(&bytes)
                .filter(|l| std::str::from_utf8(l).is_ok())
                .count()
        });
        rows.push(("+ utf-8", t, n));
        let (t, n) = best(rounds, || {
            lines(&bytes)
                .filter(|l| {
                    std::str::from_utf8(l)
                        .is_ok_and(|s| agui_protocol::for_each_member(s, |_, _| {}))
                })
                .count()
        });
        rows.push(("+ envelope scan (no copy)", t, n));
        let (t, n) = best(rounds, || {
            lines(&bytes)
                .filter(|l| std::str::from_utf8(l).is_ok_and(|s| Event::from_json(s).is_ok()))
                .count()
        });
        rows.push(("+ Event (scan, copy, drop)", t, n));
    }
    let events: Vec<Event> = lines(&bytes)
        .map(|l| Event::from_json(std::str::from_utf8(l).unwrap()).unwrap())
        .collect();
    let (t, n) = best(rounds, || {
        let mut c = DeltaCompactor::new();
        let mut w = sink();
        for e in events.iter().cloned() {
            c.push(e).unwrap();
            for out in c.drain() {
                w.write_event(&out).unwrap();
            }
        }
        c.finish().unwrap();
        for out in c.drain() {
            w.write_event(&out).unwrap();
        }
        written(w)
    });
    rows.push(("deltas compaction + write (events in memory)", t, n));
    let (t, n) = best(rounds, || {
        let mut w = sink();
        for e in &events {
            w.write_event(e).unwrap();
        }
        written(w)
    });
    rows.push(("write only (NDJSON)", t, n));
    if !only_deltas {
        other_stages(rounds, &events, &mut rows);
    }
    println!(
        "input: {} events, {mb:.1} MB; best of {rounds}",
        events.len()
    );
    println!("| stage | best ms | MB/s | count |");
    println!("| --- | ---: | ---: | ---: |");
    for (name, t, n) in rows {
        println!("| {name} | {:.1} | {:.0} | {n} |", t * 1e3, mb / t);
    }
}

/// The verifier alone, over the events of `bytes` (NDJSON) decoded into
/// chunks first, as `agui verify` receives them from its decoding threads.
fn verify_chunks(rounds: usize, bytes: Vec<u8>) -> (f64, usize) {
    let options = agui_codec::DecodeOptions::default();
    let chunks: Vec<agui_codec::EventChunk> = agui_codec::decode_ndjson_buffer(bytes, &options)
        .into_iter()
        .map(|c| c.expect("a valid stream"))
        .collect();
    best(rounds, || {
        let mut v = agui_protocol::verify::Verifier::new();
        chunks
            .iter()
            .flat_map(|c| c.iter())
            .filter(|e| v.push(*e).is_ok())
            .count()
    })
}

/// The stages of `convert`, `verify` and `reduce`, on the same events.
fn other_stages(rounds: usize, events: &[Event], rows: &mut Vec<(&'static str, f64, usize)>) {
    use agui_codec::{DecodeOptions, Split, ThreadedReader};
    let dir = std::env::temp_dir().join(format!("agui-stages-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    for (format, decode, write) in [
        (
            Format::Ndjson,
            "decode NDJSON on one thread (chunks, from the page cache)",
            "write only (NDJSON)",
        ),
        (
            Format::Sse,
            "decode SSE on one thread (chunks, from the page cache)",
            "write only (SSE)",
        ),
        (
            Format::Json,
            "decode a JSON array on one thread (chunks, from the page cache)",
            "write only (JSON array)",
        ),
    ] {
        let path = dir.join(format.name());
        let mut w = Writer::new(
            std::io::BufWriter::new(std::fs::File::create(&path).unwrap()),
            format,
        );
        for e in events {
            w.write_event(e).unwrap();
        }
        w.finish().unwrap();
        // One decoding thread, as split files are read, without the
        // caller's help: the thread's work alone.
        let split = Split {
            threshold: 0,
            chunk: 1 << 20,
            threads: 1,
            caller_helps: false,
        };
        let (t, n) = best(rounds, || {
            let mut reader =
                ThreadedReader::open_chunked(&path, DecodeOptions::default(), split).unwrap();
            let mut n = 0;
            while let Some(chunk) = reader.next_chunk() {
                n += chunk.unwrap().len();
            }
            n
        });
        rows.push((decode, t, n));
        if format != Format::Ndjson {
            let (t, n) = best(rounds, || {
                let mut w = sink_as(format);
                for e in events {
                    w.write_event(e).unwrap();
                }
                written(w)
            });
            rows.push((write, t, n));
        }
        let _ = std::fs::remove_file(&path);
    }
    let _ = std::fs::remove_dir(&dir);
    let (t, n) = best(rounds, || {
        let mut v = agui_protocol::verify::Verifier::new();
        events.iter().filter(|e| v.push(*e).is_ok()).count()
    });
    rows.push(("verify (events in memory)", t, n));
    let (t, n) = best(rounds.min(2), || {
        let mut r = agui_history::reduce::Reducer::new(Default::default());
        for e in events {
            r.apply(e).unwrap();
        }
        let mut out = Count::default();
        serde_json::to_writer(&mut out, &r.into_conversation()).unwrap();
        out.0
    });
    rows.push(("reduce + write the conversation (events in memory)", t, n));
}
