//! Every command that reads events gives byte-identical output, errors and
//! exit status whether its NDJSON input is decoded on one thread or split
//! across two, on the whole generated corpus (and a damaged line).
//!
//! `AGUI_DECODE_SPLIT=BYTES` forces the split on a small file, with chunks
//! small enough that many events land on a boundary; a split file is named
//! on standard error (`agui: AGUI_DECODE_SPLIT: ...`), which the test
//! requires (so it cannot pass by not splitting) and then leaves out of the
//! comparison.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use agui_protocol::Event;
use agui_testkit::{Profile, chunk_soup, invalid_stream, realistic, stream};

const SPLIT_ENV: &str = "AGUI_DECODE_SPLIT";
const NOTE: &str = "agui: AGUI_DECODE_SPLIT: ";

fn agui(args: &[&str], split: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agui"));
    cmd.args(args)
        .env_remove(SPLIT_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(chunk) = split {
        cmd.env(SPLIT_ENV, chunk);
    }
    cmd.output().expect("agui runs")
}

fn write(path: &Path, events: &[Event]) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for e in events {
        f.write_all(e.json().as_bytes()).unwrap();
        f.write_all(b"\n").unwrap();
    }
    f.flush().unwrap();
}

/// A copy of `from` with a broken event (and a broken line end) inserted
/// `fraction` of the way in.
fn damage(from: &Path, to: &Path, fraction: f64) {
    let mut text = std::fs::read(from).unwrap();
    let at = (text.len() as f64 * fraction) as usize;
    text.splice(at..at, b"\n{\"type\":\n".iter().copied());
    std::fs::write(to, &text).unwrap();
}

/// Standard error without the split notes, and how many there were.
fn without_notes(stderr: &[u8], file: &str) -> (String, usize) {
    let text = String::from_utf8_lossy(stderr);
    let mut notes = 0;
    let mut rest = String::new();
    for line in text.split_inclusive('\n') {
        if let Some(note) = line.strip_prefix(NOTE) {
            assert!(note.starts_with(file), "a note for another file: {line}");
            notes += 1;
        } else {
            rest.push_str(line);
        }
    }
    (rest, notes)
}

fn corpus(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut all = Vec::new();
    for &profile in Profile::ALL {
        let events = stream(profile, 11);
        let path = dir.join(format!("{}.ndjson", profile.name()));
        write(&path, &events);
        files.push(path);
        all.extend(events);
    }
    for seed in 0..3 {
        all.extend(invalid_stream(seed));
        all.extend(chunk_soup(seed));
    }
    let whole = dir.join("corpus.ndjson");
    write(&whole, &all);
    files.push(whole);
    // More events than compact takes in one step (4096), so steps, the
    // growth warning and an error after the first step are compared too.
    let big = dir.join("realistic.ndjson");
    write(&big, &realistic(12_000, 5));
    files.push(big.clone());
    // A thread of many short runs: snapshot passes 4x the input (the
    // growth warning, with the sizes read and written when it fires).
    let demo = dir.join("demo-thread.ndjson");
    std::fs::write(&demo, demo_thread(400)).unwrap();
    files.push(demo);
    // A damaged line mid-file: the error must point at the same place.
    let damaged = dir.join("damaged.ndjson");
    damage(&files[0], &damaged, 0.5);
    files.push(damaged);
    let damaged_big = dir.join("damaged-realistic.ndjson");
    damage(&big, &damaged_big, 0.6);
    files.push(damaged_big);
    files
}

/// A demo-agent thread of `runs` runs (a user message in the input, a
/// worded answer), as NDJSON.
fn demo_thread(runs: usize) -> String {
    let mut out = String::new();
    for k in 1..=runs {
        let text = format!("hello number {k}, tell me about the weather");
        let mut push = |v: serde_json::Value| {
            out.push_str(&v.to_string());
            out.push('\n');
        };
        push(
            serde_json::json!({"type": "RUN_STARTED", "threadId": "t", "runId": format!("r{k}"),
            "input": {"threadId": "t", "runId": format!("r{k}"),
                      "messages": [{"id": format!("u{k}"), "role": "user", "content": text}],
                      "tools": [], "context": [], "state": {}, "forwardedProps": {}}}),
        );
        push(
            serde_json::json!({"type": "TEXT_MESSAGE_START", "messageId": format!("a{k}"), "role": "assistant"}),
        );
        for word in text.split(' ') {
            push(
                serde_json::json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": format!("a{k}"), "delta": format!("{word} ")}),
            );
        }
        push(serde_json::json!({"type": "TEXT_MESSAGE_END", "messageId": format!("a{k}")}));
        push(
            serde_json::json!({"type": "RUN_FINISHED", "threadId": "t", "runId": format!("r{k}")}),
        );
    }
    out
}

#[test]
fn split_and_whole_decoding_give_the_same_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let files = corpus(dir.path());
    let mut compared = 0;
    let mut failures = 0;
    let mut split_runs = 0;
    let mut warnings = 0;
    for path in &files {
        let file = path.to_str().unwrap();
        let len = std::fs::metadata(path).unwrap().len();
        assert!(len > 97, "{file}: too small to split");
        let single_pass: &[&[&str]] = &[
            &["compact", file],
            &["compact", file, "--mode", "snapshot"],
            &["verify", file],
            &["verify", "--all", file],
            &["reduce", file],
            &["convert", "--to", "sse", file],
            &["convert", "--to", "json", "--expand-chunks", file],
            &["history", "--tree", file],
        ];
        // Read more than once: `latest` from a file, and `--runs` (which
        // counts the runs first).
        let several_passes: &[&[&str]] = &[
            &["compact", file, "--mode", "latest"],
            &["compact", file, "--mode", "snapshot", "--runs", "2"],
        ];
        let cases = single_pass
            .iter()
            .map(|a| (a, true))
            .chain(several_passes.iter().map(|a| (a, false)));
        for (args, once) in cases {
            let whole = agui(args, None);
            let (whole_err, whole_notes) = without_notes(&whole.stderr, file);
            assert_eq!(whole_notes, 0, "{args:?}: a note without {SPLIT_ENV}");
            warnings += whole_err.matches("warning").count();
            if whole.status.code() != Some(0) {
                failures += 1;
            }
            for chunk in [97u64, 4096, 65536] {
                let split = agui(args, Some(&chunk.to_string()));
                let (split_err, notes) = without_notes(&split.stderr, file);
                // A file of one chunk is decoded on one thread.
                let splits = len > chunk;
                if once {
                    assert_eq!(notes, usize::from(splits), "{args:?} chunk {chunk}");
                } else {
                    assert_eq!(notes >= 1, splits, "{args:?} chunk {chunk}: {notes} notes");
                }
                split_runs += usize::from(splits);
                assert_eq!(
                    split.status.code(),
                    whole.status.code(),
                    "{args:?} chunk {chunk}"
                );
                assert!(
                    split.stdout == whole.stdout,
                    "{args:?} chunk {chunk}: stdout differs"
                );
                assert_eq!(split_err, whole_err, "{args:?} chunk {chunk}");
                compared += 1;
            }
        }
    }
    assert_eq!(compared, files.len() * 10 * 3);
    // Every file at 97 bytes, most at 4096, the big ones at 65536.
    // Every file at 97 bytes; the corpus, the realistic and the demo ones
    // at 65536.
    assert!(
        split_runs >= (files.len() + 4) * 10,
        "{split_runs} split runs"
    );
    assert!(warnings >= 1, "no growth warning compared");
    // The damaged files fail (and not only them): errors were compared.
    assert!(failures >= 2 * 10, "{failures} failing runs");
}

#[test]
fn the_split_knob_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.ndjson");
    write(&path, &stream(Profile::Sequential, 1));
    let file = path.to_str().unwrap();
    let out = agui(&["verify", file], Some("lots"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("AGUI_DECODE_SPLIT must be a positive number of bytes"),
        "{stderr}"
    );
    // Standard input is never split (nor noted).
    let out = Command::new(env!("CARGO_BIN_EXE_agui"))
        .args(["verify", "-"])
        .env(SPLIT_ENV, "97")
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
