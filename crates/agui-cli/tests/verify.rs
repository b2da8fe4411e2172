//! `agui verify`: exit codes and output lines.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn agui(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agui"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agui runs");
    let mut input = child.stdin.take().expect("stdin");
    // A command that refuses its arguments may exit before reading its
    // input: a closed pipe is its answer, not a failure of the test.
    if let Err(e) = input.write_all(stdin.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
    }
    drop(input);
    child.wait_with_output().expect("agui finishes")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const VALID: &str = r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}
{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"hi"}
{"type":"VENDOR_PING"}
{"type":"RUN_FINISHED","threadId":"t","runId":"r"}
"#;

#[test]
fn a_valid_stream_prints_ok_and_exits_0() {
    let out = agui(&["verify"], VALID);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout(&out), "ok (4 events)\n");
    // `-` is standard input too, and a file works.
    let out = agui(&["verify", "-"], VALID);
    assert_eq!(stdout(&out), "ok (4 events)\n");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.json");
    let array = format!("[{}]", VALID.trim().lines().collect::<Vec<_>>().join(","));
    std::fs::write(&path, array).expect("write");
    let out = agui(&["verify", path.to_str().expect("utf-8 path")], "");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "ok (4 events)\n");
}

#[test]
fn the_first_violation_is_reported_with_its_index_and_type() {
    let stream = r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}
{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}
{"type":"RUN_FINISHED","threadId":"t","runId":"r"}
{"type":"CUSTOM","name":"x","value":1}
"#;
    let out = agui(&["verify"], stream);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        "error at event #1 (TEXT_MESSAGE_CONTENT): Cannot send 'TEXT_MESSAGE_CONTENT' event: No active text message found with ID 'm'. Start a text message with 'TEXT_MESSAGE_START' first.\n"
    );
    let out = agui(&["verify", "--all"], stream);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("error at event #1 (TEXT_MESSAGE_CONTENT): "));
    assert!(lines[1].starts_with("error at event #3 (CUSTOM): Cannot send event type 'CUSTOM'"));
    assert_eq!(lines[2], "2 problems");
}

#[test]
fn undecodable_input_names_the_event_and_fails() {
    let stream =
        "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n{\"type\": oops}\n";
    let out = agui(&["verify"], stream);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.starts_with("error at event #1: cannot decode: "),
        "{text}"
    );
}

#[test]
fn chunk_errors_are_verification_errors() {
    let stream = r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}
{"type":"TOOL_CALL_CHUNK","toolCallId":"c","delta":"{"}
"#;
    let out = agui(&["verify"], stream);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        "error at event #1 (TOOL_CALL_CHUNK): First TOOL_CALL_CHUNK must have a toolCallName\n"
    );
}
