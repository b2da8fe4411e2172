//! `agui compact` end to end: modes, formats, flags, the summary and errors.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/compact")
        .join(name)
}

fn agui(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agui"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agui starts");
    let mut pipe = child.stdin.take().expect("stdin");
    if let Some(bytes) = stdin {
        // A command that refuses its arguments exits without reading its
        // input: a closed pipe is its answer, not a failure of the test.
        if let Err(e) = pipe.write_all(bytes) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
        }
    }
    drop(pipe);
    child.wait_with_output().expect("agui runs")
}

fn lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
        .collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect()
}

fn path(name: &str) -> String {
    fixture(name).to_str().expect("utf-8 path").to_owned()
}

#[test]
fn deltas_is_the_default_and_matches_the_fixture_byte_for_byte() {
    for name in ["overlap", "error-open"] {
        let out = agui(&["compact", &path(&format!("{name}.ndjson"))], None);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expected = std::fs::read(fixture(&format!("{name}.deltas.ndjson"))).expect("fixture");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&expected),
            "{name}"
        );
    }
}

#[test]
fn the_summary_reports_events_and_bytes_in_and_out() {
    let out = agui(&["compact", &path("overlap.ndjson")], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let input = std::fs::read_to_string(fixture("overlap.ndjson")).expect("fixture");
    let in_bytes: usize = input.lines().map(str::len).sum();
    let out_events = lines(&out.stdout);
    let out_bytes: usize = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::len)
        .sum();
    let expected = format!(
        "agui compact (deltas): 12 events, {in_bytes} bytes in -> {} events, {out_bytes} bytes out",
        out_events.len()
    );
    assert!(stderr.contains(&expected), "{stderr}\nexpected: {expected}");
    assert_eq!(out_events.len(), 9);
}

#[test]
fn snapshot_and_latest_match_their_fixtures() {
    for mode in ["snapshot", "latest"] {
        let out = agui(
            &["compact", &path("error-open.ndjson"), "--mode", mode],
            None,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expected =
            std::fs::read(fixture(&format!("error-open.{mode}.ndjson"))).expect("fixture");
        assert_eq!(lines(&out.stdout), lines(&expected), "{mode}");
    }
    let latest = lines(
        &agui(
            &["compact", &path("error-open.ndjson"), "--mode", "latest"],
            None,
        )
        .stdout,
    );
    assert_eq!(
        types(&latest),
        ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    );
    assert_eq!(
        latest[0]["parentRunId"], "r1",
        "the implicit parent is made explicit"
    );
}

#[test]
fn branch_picks_another_run() {
    let out = agui(
        &[
            "compact",
            &path("error-open.ndjson"),
            "--mode",
            "latest",
            "--branch",
            "r1",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = lines(&out.stdout);
    assert_eq!(
        types(&events),
        ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_ERROR"]
    );
    let messages = events[1]["messages"].as_array().expect("messages");
    let ids: Vec<&str> = messages.iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["u1", "a1"], "r1 ends before u2 and a2 exist");
    assert_eq!(messages[1]["content"], "Let me check.");
}

#[test]
fn formats_and_standard_input() {
    let input = std::fs::read(fixture("overlap.ndjson")).expect("fixture");
    let json = agui(&["compact", "-", "--to", "json"], Some(&input));
    assert!(json.status.success());
    let array: Vec<Value> = serde_json::from_slice(&json.stdout).expect("a JSON array");
    assert_eq!(array.len(), 9);
    let sse = agui(&["compact", "--to", "sse"], Some(&input));
    let text = String::from_utf8_lossy(&sse.stdout);
    assert_eq!(text.matches("data: ").count(), 9);
    // The JSON array compacts to the same events, written as its input was.
    let again = agui(&["compact"], Some(&json.stdout));
    let again: Vec<Value> = serde_json::from_slice(&again.stdout).expect("JSON stays JSON");
    assert_eq!(again, array);
}

#[test]
fn compacting_twice_changes_nothing() {
    for mode in ["deltas", "snapshot", "latest"] {
        let once = agui(
            &["compact", &path("error-open.ndjson"), "--mode", mode],
            None,
        );
        let twice = agui(&["compact", "--mode", mode], Some(&once.stdout));
        assert!(twice.status.success());
        assert_eq!(lines(&twice.stdout), lines(&once.stdout), "{mode}");
    }
}

#[test]
fn from_input_is_the_starting_point() {
    let dir = tempfile::tempdir().expect("temp dir");
    let start = dir.path().join("input.json");
    std::fs::write(
        &start,
        r#"{"threadId":"t","runId":"r0","messages":[{"id":"s0","role":"system","content":"be brief"}],"state":{"mode":"x"}}"#,
    )
    .expect("write");
    let start = start.to_str().expect("utf-8 path");
    let out = agui(
        &[
            "compact",
            &path("overlap.ndjson"),
            "--mode",
            "snapshot",
            "--from-input",
            start,
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = lines(&out.stdout);
    let ids: Vec<&str> = events[1]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        ["s0", "m"],
        "the starting messages are kept in the checkpoint"
    );
    assert_eq!(events[2]["snapshot"]["a"], 1);
    assert!(
        events[2]["snapshot"].get("mode").is_none(),
        "the stream's snapshot replaced it"
    );
}

#[test]
fn bad_usage_and_bad_input_are_errors() {
    let out = agui(
        &["compact", &path("overlap.ndjson"), "--branch", "r1"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--branch only applies"));
    let out = agui(
        &[
            "compact",
            &path("overlap.ndjson"),
            "--mode",
            "latest",
            "--branch",
            "nope",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no run with runId \"nope\""));
    let out = agui(&["compact", "--mode", "everything"], Some(b""));
    assert_eq!(out.status.code(), Some(2));
    let out = agui(&["compact"], Some(b"{\"type\":\"RAW\"}\nnot json\n"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read standard input"));
    let out = agui(&["compact", "/nonexistent/file.ndjson"], None);
    assert_eq!(out.status.code(), Some(2));
}

/// A demo-agent thread of `runs` runs (user message, worded answer, a tool
/// call and its result), as NDJSON.
fn demo_thread(runs: usize) -> String {
    let mut out = String::new();
    for k in 1..=runs {
        let text = format!("hello number {k}, tell me about the weather");
        let mut push = |v: Value| {
            out.push_str(&v.to_string());
            out.push('\n');
        };
        push(
            serde_json::json!({"type": "RUN_STARTED", "threadId": "t", "runId": format!("r{k}"),
            "input": {"threadId": "t", "runId": format!("r{k}"), "messages": [{"id": format!("u{k}"), "role": "user", "content": text}],
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
fn snapshot_warns_as_soon_as_the_output_passes_four_times_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("long.ndjson");
    std::fs::write(&file, demo_thread(300)).unwrap();
    let out = agui(
        &["compact", file.to_str().unwrap(), "--mode", "snapshot"],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(out.stdout.len() > 4 * std::fs::metadata(&file).unwrap().len() as usize);
    assert_eq!(err.matches("warning").count(), 1, "{err}");
    assert!(
        err.contains("more than 4x the input") && err.contains("--runs N"),
        "{err}"
    );
    // Piped: no progress bar, no escape sequences.
    assert!(!err.contains('\u{1b}'), "{err:?}");
    // deltas never grows: no warning.
    let out = agui(&["compact", file.to_str().unwrap()], None);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
}

#[test]
fn snapshot_runs_restates_only_the_last_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.ndjson");
    std::fs::write(&file, demo_thread(40)).unwrap();
    let f = file.to_str().unwrap();
    let full = agui(&["compact", f, "--mode", "snapshot"], None);
    let last = agui(&["compact", f, "--mode", "snapshot", "--runs", "3"], None);
    let reduce = |bytes: &[u8]| {
        let out = agui(&["reduce", "-"], Some(bytes));
        assert!(out.status.success());
        out.stdout
    };
    let original = reduce(&std::fs::read(&file).unwrap());
    assert_eq!(reduce(&last.stdout), original);
    assert_eq!(reduce(&full.stdout), original);
    let snapshots = |out: &Output| {
        types(&lines(&out.stdout))
            .iter()
            .filter(|t| **t == "MESSAGES_SNAPSHOT")
            .count()
    };
    assert_eq!(snapshots(&full), 40);
    assert_eq!(snapshots(&last), 3);
    assert!(
        last.stdout.len() < full.stdout.len() / 2,
        "{} vs {}",
        last.stdout.len(),
        full.stdout.len()
    );
    // Only with snapshot, and only from a file.
    let out = agui(&["compact", f, "--runs", "3"], None);
    assert!(!out.status.success());
    let out = agui(
        &["compact", "-", "--mode", "snapshot", "--runs", "3"],
        Some(&std::fs::read(&file).unwrap()),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("give a file"),
        "{err}"
    );
}
