//! The official AG-UI TypeScript SDK as a test oracle.
//!
//! Each oracle is a Node script in the workspace's `oracle/` folder. It reads
//! one JSON document from standard input (by convention an array of cases) and
//! writes one JSON document to standard output (an array of results, one per
//! case). Batching keeps the cost of starting Node to once per test.
//!
//! The SDK is installed by `scripts/test` (`npm ci` in `oracle/`). A test that
//! needs the oracle fails with a clear message when it is missing: it is never
//! skipped silently.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The `oracle/` folder: `$AGUI_ORACLE_DIR`, else `<workspace>/oracle`.
///
/// # Panics
/// When the official SDK is not installed there (tests only).
pub fn oracle_dir() -> PathBuf {
    let dir = std::env::var_os("AGUI_ORACLE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../oracle"));
    assert!(
        dir.join("node_modules/@ag-ui/client").is_dir(),
        "the official AG-UI SDK is not installed in {}: run `npm ci` there (scripts/test does it)",
        dir.display()
    );
    dir
}

/// Runs `node oracle/<script>` with `input` on standard input and parses its
/// standard output as JSON.
///
/// # Panics
/// When Node is missing, the script fails, or its output is not JSON (tests only).
pub fn run(script: &str, input: &serde_json::Value) -> serde_json::Value {
    let dir = oracle_dir();
    let mut child = Command::new("node")
        .arg(dir.join(script))
        .current_dir(&dir)
        .env("SUPPRESS_TRANSFORMATION_WARNINGS", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start node: is Node.js installed?");
    let body = serde_json::to_vec(input).expect("oracle input serializes");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let writer = std::thread::spawn(move || {
        // The script may exit early on error; a broken pipe is reported below.
        let _ = stdin.write_all(&body);
    });
    let out = child.wait_with_output().expect("node runs");
    writer.join().expect("writer thread");
    assert!(
        out.status.success(),
        "oracle {script} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "oracle {script} printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
                .chars()
                .take(2000)
                .collect::<String>()
        )
    })
}

/// Runs `node oracle/<script>` in line mode (`AGUI_ORACLE_LINES=1`: one case
/// per input line, one result per output line) over `cases`, calling
/// `check(tag, result)` for each result in order as it arrives. Cases are
/// made, written and answered one by one, so neither this process nor Node
/// holds the corpus: memory stays bounded by the cases in flight (at most
/// `IN_FLIGHT` tags, plus the pipes' buffers).
///
/// Each item of `cases` is the case's JSON and a tag the caller gets back
/// with its result (what it needs to check that result). Returns the number
/// of cases.
///
/// # Panics
/// When Node is missing, the script fails, answers a line that is not JSON,
/// or answers fewer results than cases (tests only).
pub fn run_each<T, I, F>(script: &str, cases: I, mut check: F) -> usize
where
    T: Send + 'static,
    I: Iterator<Item = (serde_json::Value, T)> + Send + 'static,
    F: FnMut(T, serde_json::Value),
{
    use std::io::{BufRead, BufReader, BufWriter, Read};
    const IN_FLIGHT: usize = 64;
    let dir = oracle_dir();
    let mut child = Command::new("node")
        .arg(dir.join(script))
        .current_dir(&dir)
        .env("SUPPRESS_TRANSFORMATION_WARNINGS", "1")
        .env("AGUI_ORACLE_LINES", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start node: is Node.js installed?");
    let stdin = child.stdin.take().expect("piped stdin");
    let (tags_tx, tags) = std::sync::mpsc::sync_channel::<T>(IN_FLIGHT);
    let writer = std::thread::spawn(move || {
        let mut stdin = BufWriter::new(stdin);
        for (case, tag) in cases {
            // The tag goes first: the reader waits for it once the result
            // is in, and the bounded channel keeps this thread at most
            // IN_FLIGHT cases ahead of Node.
            if tags_tx.send(tag).is_err() {
                return;
            }
            let line = serde_json::to_vec(&case).expect("oracle input serializes");
            drop(case);
            // The script may exit early on error; that is reported below.
            if stdin.write_all(&line).is_err() || stdin.write_all(b"\n").is_err() {
                return;
            }
            if stdin.flush().is_err() {
                return;
            }
        }
    });
    let mut stderr = child.stderr.take().expect("piped stderr");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let stdout = BufReader::with_capacity(1 << 16, child.stdout.take().expect("piped stdout"));
    let mut count = 0;
    for line in stdout.lines() {
        let line = line.expect("oracle output is UTF-8");
        if line.is_empty() {
            continue;
        }
        let result: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!(
                "oracle {script} printed a line that is not JSON ({e}): {}",
                line.chars().take(2000).collect::<String>()
            )
        });
        let tag = tags
            .recv()
            .unwrap_or_else(|_| panic!("oracle {script} answered more results than cases"));
        check(tag, result);
        count += 1;
    }
    writer.join().expect("writer thread");
    let status = child.wait().expect("node runs");
    let errors = errors.join().unwrap_or_default();
    assert!(
        status.success(),
        "oracle {script} failed ({status}):\n{errors}"
    );
    assert!(
        tags.try_recv().is_err(),
        "oracle {script} answered {count} results, fewer than its cases:\n{errors}"
    );
    count
}
