//! `agui reduce` end to end. Expected outputs under `fixtures/reduce/cli`
//! were produced by the official reducer (`oracle/reduce.mjs`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(rel: &str) -> PathBuf {
    root().join("fixtures").join(rel)
}

fn agui(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agui"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agui runs");
    if let Some(bytes) = stdin {
        // A command that refuses its arguments may exit before reading its
        // input: a closed pipe is its answer, not a failure of the test.
        if let Err(e) = child.stdin.take().expect("stdin").write_all(bytes) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
        }
    }
    child.wait_with_output().expect("agui exits")
}

fn json_file(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("fixture JSON")
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "agui failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

#[test]
fn reduces_a_file_like_the_official_client() {
    let stream = fixture("examples/conversation.ndjson");
    let out = agui(&["reduce", stream.to_str().unwrap()], None);
    assert_eq!(
        stdout_json(&out),
        json_file(&fixture("reduce/cli/conversation.expected.json"))
    );
    // Pretty-printed, keys in protocol order.
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("{\n  \"messages\": ["), "{text}");
}

#[test]
fn starts_from_a_run_agent_input() {
    let stream = fixture("examples/conversation.ndjson");
    let input = fixture("reduce/cli/run-agent-input.json");
    let out = agui(
        &[
            "reduce",
            stream.to_str().unwrap(),
            "--from-input",
            input.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(
        stdout_json(&out),
        json_file(&fixture("reduce/cli/conversation.from-input.expected.json"))
    );
}

#[test]
fn reads_standard_input_in_any_format() {
    let ndjson = std::fs::read_to_string(fixture("examples/conversation.ndjson")).unwrap();
    let expected = json_file(&fixture("reduce/cli/conversation.expected.json"));
    let sse: String = ndjson
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("data: {l}\n\n"))
        .collect();
    let array = format!(
        "[{}]",
        ndjson
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join(",")
    );
    for body in [ndjson.clone(), sse, array] {
        let out = agui(&["reduce", "-"], Some(body.as_bytes()));
        assert_eq!(stdout_json(&out), expected);
        let out = agui(&["reduce"], Some(body.as_bytes()));
        assert_eq!(stdout_json(&out), expected);
    }
}

#[test]
fn an_empty_stream_gives_the_starting_point() {
    let out = agui(&["reduce", "-"], Some(b""));
    assert_eq!(
        stdout_json(&out),
        serde_json::json!({"messages": [], "state": {}})
    );
}

#[test]
fn a_decode_error_names_the_event_and_fails() {
    let body = b"{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n{\"type\":\"TEXT_MESSAGE_START\",\n";
    let out = agui(&["reduce", "-"], Some(body));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error at event #1"), "{err}");
    assert!(err.contains("cannot decode"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_reduce_error_names_the_event_and_fails() {
    // A chunk that opens nothing and has no id: the official pipeline throws.
    let body = b"{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n{\"type\":\"TEXT_MESSAGE_CHUNK\",\"delta\":\"x\"}\n";
    let out = agui(&["reduce", "-"], Some(body));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error at event #1 (TEXT_MESSAGE_CHUNK)"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_bad_run_agent_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("input.json");
    std::fs::write(&bad, "[1, 2]").unwrap();
    let out = agui(
        &["reduce", "--from-input", bad.to_str().unwrap(), "-"],
        Some(b""),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("must be a JSON object"), "{err}");
    let missing = dir.path().join("missing.json");
    let out = agui(
        &["reduce", "--from-input", missing.to_str().unwrap(), "-"],
        Some(b""),
    );
    assert!(!out.status.success());
}
