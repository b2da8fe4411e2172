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
