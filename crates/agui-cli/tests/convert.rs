//! `agui convert`, run as a process.

use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};

const EVENTS: [&str; 4] = [
    r#"{"type":"RUN_STARTED","threadId":"t1","runId":"r1"}"#,
    r#"{"type":"CUSTOM","name":"x","value":{"big":12345678901234567890123,"f":1.10,"s":"\u00e9\ud83d\ude00"}}"#,
    r#"{"type":"SOMETHING_NEW","extra":null}"#,
    r#"{"type":"RUN_FINISHED","threadId":"t1","runId":"r1"}"#,
];

fn agui(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agui"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let body = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&body);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn ok(args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let out = agui(args, stdin);
    assert!(
        out.status.success(),
        "agui {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
    out.stdout
}

fn ndjson() -> String {
    EVENTS.iter().map(|e| format!("{e}\n")).collect()
}

#[test]
fn converts_losslessly_between_every_format() {
    let original = ndjson();
    let sse = ok(&["convert", "--to", "sse"], original.as_bytes());
    let expected_sse: String = EVENTS.iter().map(|e| format!("data: {e}\n\n")).collect();
    assert_eq!(String::from_utf8(sse.clone()).unwrap(), expected_sse);
    let json = ok(&["convert", "-", "--to", "json"], &sse);
    assert_eq!(
        String::from_utf8(json.clone()).unwrap(),
        format!("[\n{}\n]\n", EVENTS.join(",\n"))
    );
    let back = ok(&["convert", "--to", "ndjson"], &json);
    assert_eq!(String::from_utf8(back).unwrap(), original);
}

#[test]
fn reads_files_and_detects_their_format() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.sse");
    let crlf: String = EVENTS
        .iter()
        .map(|e| format!(": ping\r\nid: 9\r\ndata: {e}\r\n\r\n"))
        .collect();
    std::fs::write(&path, format!("\u{feff}{crlf}")).unwrap();
    let out = ok(&["convert", path.to_str().unwrap(), "--to", "ndjson"], b"");
    assert_eq!(String::from_utf8(out).unwrap(), ndjson());
}

#[test]
fn numbers_sse_frames_on_request() {
    let out = ok(
        &["convert", "--to", "sse", "--sse-ids", "5"],
        ndjson().as_bytes(),
    );
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with(&format!("id: 5\ndata: {}\n\nid: 6\n", EVENTS[0])),
        "{text}"
    );
    assert_eq!(text.matches("id: ").count(), EVENTS.len());
}

#[test]
fn bad_input_fails_with_where_and_keeps_what_came_before() {
    let input = format!("{}\n{{\"type\":\n{}\n", EVENTS[0], EVENTS[1]);
    let out = agui(&["convert", "--to", "ndjson"], input.as_bytes());
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("cannot decode <stdin>: event 1 (line 2, byte 52): not an AG-UI event"),
        "{stderr}"
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{}\n", EVENTS[0])
    );

    let out = agui(&["convert", "--to", "json"], b"<html>");
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("cannot detect the stream format"),
        "{stderr}"
    );

    let out = agui(
        &["convert", "--to", "json", "--max-event-size", "20"],
        ndjson().as_bytes(),
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("maximum size of 20 bytes")
    );

    let out = agui(&["convert", "/nonexistent/file", "--to", "json"], b"");
    assert!(!out.status.success());
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("/nonexistent/file")
    );

    let out = agui(&["convert", "--to", "xml"], b"");
    assert!(!out.status.success());
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("unknown format \"xml\"")
    );
}

#[test]
fn the_format_can_be_forced() {
    // Read as SSE, NDJSON text is not a frame: nothing comes out.
    assert!(
        ok(
            &["convert", "--from", "sse", "--to", "ndjson"],
            ndjson().as_bytes()
        )
        .is_empty()
    );
    let out = agui(
        &["convert", "--from", "json", "--to", "ndjson"],
        ndjson().as_bytes(),
    );
    assert!(!out.status.success());
}

#[test]
fn expands_chunks_as_the_official_client() {
    let input = [
        r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#,
        r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"Hel"}"#,
        r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"lo"}"#,
        r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r"}"#,
    ]
    .map(|e| format!("{e}\n"))
    .concat();
    let out = ok(
        &["convert", "--to", "ndjson", "--expand-chunks"],
        input.as_bytes(),
    );
    let types: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        types,
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    // Without the flag, chunks pass through untouched.
    assert_eq!(
        String::from_utf8(ok(&["convert", "--to", "ndjson"], input.as_bytes())).unwrap(),
        input
    );
    // A chunk that cannot open a message is an error that names the event.
    let bad = "{\"type\":\"TEXT_MESSAGE_CHUNK\",\"delta\":\"x\"}\n";
    let out = agui(
        &["convert", "--to", "ndjson", "--expand-chunks"],
        bad.as_bytes(),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("event 0: cannot expand chunks"), "{stderr}");
}

#[test]
fn a_closed_pipe_is_not_an_error() {
    let line = format!("{}\n", EVENTS[1]);
    let big = line.repeat(200_000);
    let mut child = Command::new(env!("CARGO_BIN_EXE_agui"))
        .args(["convert", "--to", "sse"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(big.as_bytes());
    });
    let mut stdout = child.stdout.take().unwrap();
    let mut head = [0u8; 100];
    stdout.read_exact(&mut head).unwrap();
    assert!(head.starts_with(b"data: {"));
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
