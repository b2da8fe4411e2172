//! Every command when its output cannot be written (a full disk, a reader
//! that went away, a standard output closed at start), when its input
//! cannot be read, and what error lines show of a store's native errors.
//!
//! Nothing here waits or races: a closed pipe is one whose read end was
//! closed before the command started, so its first write fails.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::{PgSchema, postgres_url};

/// The example conversation: thread `thread-trip-42`, runs `run-01` and
/// `run-02`.
fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/examples/conversation.ndjson")
}

/// Runs `cmd` (`agui ARGS`, or a shell around it) with no input and
/// standard error read; nothing may end in a panic, whatever failed.
fn run(mut cmd: Command, args: &[&str]) -> Output {
    let output = cmd
        .args(args)
        .env_remove("AGUI_DEBUG")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("agui runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("panicked"),
        "agui {args:?} panicked: {stderr}"
    );
    output
}

/// `agui ARGS` writing to `stdout`.
fn agui_to(args: &[&str], stdout: impl Into<Stdio>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agui"));
    cmd.stdout(stdout);
    run(cmd, args)
}

/// `agui ARGS` with `env` set, its output read.
fn agui_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agui"));
    cmd.envs(env.iter().copied()).stdout(Stdio::piped());
    run(cmd, args)
}

/// `agui ARGS` with no descriptor 1 at all (`agui ... >&-`).
fn agui_closed_stdout(args: &[&str]) -> Output {
    let mut sh = Command::new("sh");
    sh.args(["-c", "exec \"$0\" \"$@\" >&-", env!("CARGO_BIN_EXE_agui")]);
    run(sh, args)
}

/// `/dev/full`: every write fails with ENOSPC.
fn full() -> File {
    File::options().write(true).open("/dev/full").unwrap()
}

/// A pipe whose read end is closed before the command starts: every write
/// fails with EPIPE.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    writer
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(args: &[&str]) -> String {
    let out = agui_to(args, Stdio::piped());
    assert!(out.status.success(), "agui {args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// Asserts exit 2 and the message of a failed write to standard output;
/// returns standard error.
fn fails_writing(out: Output, args: &[&str], cause: &str) -> String {
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "agui {args:?}: {err}");
    assert!(
        err.contains(&format!("cannot write to standard output: {cause}")),
        "agui {args:?}: {err}"
    );
    err
}

/// A SQLite store holding the example thread (`src.db` in `dir`), and its
/// session document.
fn session_document(dir: &Path) -> PathBuf {
    let store = format!("sqlite://{}", dir.join("src.db").display());
    let fixture = fixture();
    let f = fixture.to_str().unwrap();
    ok(&["store", "import", f, "--store", &store]);
    let doc = dir.join("doc.json");
    let d = doc.to_str().unwrap();
    ok(&[
        "session",
        "export",
        "--store",
        &store,
        "--thread",
        "thread-trip-42",
        "-o",
        d,
    ]);
    doc
}

#[test]
fn session_validate_and_import_fail_cleanly_on_a_full_disk() {
    let dir = tempfile::tempdir().unwrap();
    let doc = session_document(dir.path());
    let doc = doc.to_str().unwrap();
    let args = ["session", "validate", doc];
    fails_writing(agui_to(&args, full()), &args, "No space left on device");
    let dst = format!("sqlite://{}", dir.path().join("dst.db").display());
    let args = ["session", "import", doc, "--store", &dst];
    let err = fails_writing(agui_to(&args, full()), &args, "No space left on device");
    // The import itself went through, and the error says so.
    assert!(err.contains("imported thread \"thread-trip-42\""), "{err}");
    assert!(
        err.contains("thread \"thread-trip-42\" was imported, but its report was not written"),
        "{err}"
    );
    let listing = ok(&["store", "ls", "--store", &dst]);
    assert!(listing.contains("thread-trip-42"), "{listing}");
}

#[test]
fn session_commands_succeed_when_the_reader_went_away() {
    let dir = tempfile::tempdir().unwrap();
    let doc = session_document(dir.path());
    let doc = doc.to_str().unwrap();
    let dst = format!("sqlite://{}", dir.path().join("dst.db").display());
    for args in [
        vec!["session", "validate", doc],
        vec!["session", "import", doc, "--store", &dst],
    ] {
        let out = agui_to(&args, closed_pipe());
        assert_eq!(
            out.status.code(),
            Some(0),
            "agui {args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn session_export_to_a_closed_or_full_standard_output_fails() {
    let dir = tempfile::tempdir().unwrap();
    session_document(dir.path());
    let src = format!("sqlite://{}", dir.path().join("src.db").display());
    let args = [
        "session",
        "export",
        "--store",
        &src,
        "--thread",
        "thread-trip-42",
    ];
    fails_writing(agui_closed_stdout(&args), &args, "Bad file descriptor");
    fails_writing(agui_to(&args, full()), &args, "No space left on device");
}

/// A thread of 1,000 runs, the first with a state snapshot of 200 kB: every
/// JSON output of it is larger than the output buffer, so JSON is written
/// to standard output while it is serialized.
fn big_stream(dir: &Path) -> PathBuf {
    let mut text = String::new();
    for i in 0..1000 {
        text.push_str(&format!(
            "{{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r{i}\"}}\n"
        ));
        if i == 0 {
            let big = "x".repeat(200_000);
            text.push_str(&format!(
                "{{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{{\"k\":\"{big}\"}}}}\n"
            ));
        }
        text.push_str(&format!(
            "{{\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r{i}\"}}\n"
        ));
    }
    let path = dir.join("big.ndjson");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn json_writers_succeed_when_the_reader_went_away() {
    let dir = tempfile::tempdir().unwrap();
    let big = big_stream(dir.path());
    let f = big.to_str().unwrap();
    for args in [
        vec!["reduce", f],
        vec!["history", "--tree", "--json", f],
        vec!["history", "--at", "r999", f],
        vec!["convert", "--to", "json", f],
    ] {
        let out = agui_to(&args, closed_pipe());
        assert_eq!(
            out.status.code(),
            Some(0),
            "agui {args:?}: {}",
            stderr(&out)
        );
        assert!(out.stderr.is_empty(), "agui {args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_standard_output_closed_at_start_is_an_error() {
    let fixture = fixture();
    let f = fixture.to_str().unwrap();
    for args in [
        vec!["convert", "--to", "ndjson", f],
        vec!["convert", "--to", "json", f],
        vec!["compact", "--mode", "latest", f],
        vec!["reduce", f],
        vec!["verify", f],
        vec!["history", "--tree", f],
    ] {
        let out = agui_closed_stdout(&args);
        fails_writing(out, &args, "Bad file descriptor");
    }
}

#[test]
fn a_full_disk_is_reported_as_writing_to_standard_output() {
    let fixture = fixture();
    let f = fixture.to_str().unwrap();
    for args in [
        vec!["verify", f],
        vec!["reduce", f],
        vec!["history", "--tree", f],
        vec!["history", "--tree", "--json", f],
        vec!["history", "--at", "run-02", f],
        vec!["history", "--branch", "run-02", f],
        vec!["convert", "--to", "sse", f],
        vec!["compact", f],
    ] {
        let err = fails_writing(agui_to(&args, full()), &args, "No space left on device");
        assert_eq!(err.lines().count(), 1, "agui {args:?}: {err}");
    }
}

#[test]
fn an_unreadable_input_is_bad_input_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().display().to_string();
    for args in [
        vec!["verify", &path],
        vec!["verify", "--all", &path],
        vec!["reduce", &path],
        vec!["compact", &path],
        vec!["compact", "--mode", "latest", &path],
    ] {
        let out = agui_to(&args, Stdio::piped());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "agui {args:?}: {err}");
        assert!(
            err.contains(&format!("agui: cannot read {path}: ")) && err.contains("Is a directory"),
            "agui {args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "agui {args:?}");
    }
}

#[test]
fn a_store_error_is_shown_without_the_native_error_beneath_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("not-a-store.db");
    // Not an SQLite file: rusqlite's error (`file is not a database`,
    // `Error code 26`) is the store error's source.
    std::fs::write(&db, vec![0x5a; 8192]).unwrap();
    let url = format!("sqlite://{}", db.display());
    let args = ["store", "ls", "--store", &url];
    let out = agui_to(&args, Stdio::piped());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(!err.contains("Error code"), "{err}");
    assert!(!err.contains("file is not a database"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // AGUI_DEBUG=1 shows every cause after the same message.
    let debug = agui_env(&args, &[("AGUI_DEBUG", "1")]);
    let debug_err = stderr(&debug);
    assert_eq!(debug.status.code(), Some(5), "{debug_err}");
    assert!(debug_err.starts_with(err.trim_end()), "{debug_err}");
    let help = ok(&["--help"]);
    assert!(help.contains("AGUI_DEBUG=1"), "{help}");
}

#[test]
fn a_postgres_error_shows_no_server_text() {
    let Some(pg) = postgres_url() else { return };
    let schema = PgSchema::new(pg);
    let url = schema.store_url();
    let fixture = fixture();
    let f = fixture.to_str().unwrap();
    ok(&["store", "import", f, "--store", &url]);
    // The same runs again: refused, as on every backend, in one line that
    // shows nothing of the server's error.
    let args = ["store", "import", f, "--store", &url];
    let out = agui_to(&args, Stdio::piped());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for server_text in ["db error", "DETAIL", "ERROR:", "runs_pkey", "constraint"] {
        assert!(!err.contains(server_text), "{server_text}: {err}");
    }
    assert_eq!(err.lines().count(), 1, "{err}");
}
