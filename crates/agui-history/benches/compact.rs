//! End-to-end benchmark of `agui compact` against Node running the official
//! `compactEvents` (`oracle/bench-compact.mjs`) on the same file: read,
//! parse, compact, write, each as its own process, measured in one run
//! (wall time and peak resident memory, through `/usr/bin/time -v`).
//!
//! ```text
//! cargo build --release -p agui-cli
//! cargo bench -p agui-history --bench compact
//! ```
//!
//! `AGUI_BENCH_EVENTS` sets the stream length (default 1,000,000 events of
//! `agui_testkit::realistic`), `AGUI_BENCH_ROUNDS` the rounds (default 3;
//! the median is reported), `AGUI_BIN` the `agui` binary (default
//! `<target>/release/agui`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

struct Measure {
    wall_s: f64,
    peak_kb: u64,
    out_events: usize,
    out_bytes: u64,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
}

/// Runs `program args` under `/usr/bin/time -v`, standard output to `out`.
fn measure(program: &Path, args: &[&str], out: &Path, cwd: &Path) -> Measure {
    let stdout = File::create(out).expect("output file");
    let started = Instant::now();
    let run = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(program)
        .args(args)
        .current_dir(cwd)
        .env("SUPPRESS_TRANSFORMATION_WARNINGS", "1")
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::piped())
        .output()
        .expect("/usr/bin/time runs");
    let wall_s = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "{} failed:\n{stderr}",
        program.display()
    );
    let peak_kb = stderr
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse().ok())
        .expect("/usr/bin/time -v reports the peak resident set size");
    for line in stderr.lines().filter(|l| !l.starts_with('\t')) {
        eprintln!("    {line}");
    }
    let text = std::fs::read_to_string(out).expect("output readable");
    Measure {
        wall_s,
        peak_kb,
        out_events: text.lines().filter(|l| !l.trim().is_empty()).count(),
        out_bytes: text.len() as u64,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let n = env_usize("AGUI_BENCH_EVENTS", 1_000_000);
    let rounds = env_usize("AGUI_BENCH_ROUNDS", 3).max(1);
    let dir = target_dir().join("bench-compact");
    std::fs::create_dir_all(&dir).expect("bench directory");
    let input = dir.join(format!("realistic-{n}.ndjson"));
    if !input.exists() {
        eprintln!("generating {n} realistic events into {}", input.display());
        let events = agui_testkit::realistic(n, 7);
        let mut w = BufWriter::new(File::create(&input).expect("input file"));
        for e in &events {
            w.write_all(e.json().as_bytes()).expect("write");
            w.write_all(b"\n").expect("write");
        }
        w.flush().expect("flush");
    }
    let in_bytes = std::fs::metadata(&input).expect("input").len();
    let agui = std::env::var_os("AGUI_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("release/agui"));
    assert!(
        agui.exists(),
        "{} is missing: build it first (cargo build --release -p agui-cli)",
        agui.display()
    );
    let oracle = workspace().join("oracle");
    let node = PathBuf::from("node");
    let input_s = input.to_str().expect("utf-8 path").to_owned();
    let agui_out = dir.join("out-agui.ndjson");
    let node_out = dir.join("out-node.ndjson");
    let node_out_s = node_out.to_str().expect("utf-8 path").to_owned();

    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for round in 0..rounds {
        eprintln!("round {}: agui compact", round + 1);
        ours.push(measure(
            &agui,
            &["compact", &input_s, "--to", "ndjson"],
            &agui_out,
            &dir,
        ));
        eprintln!("round {}: node compactEvents", round + 1);
        // Node writes its output file itself; its stdout stays empty.
        let mut m = measure(
            &node,
            &["bench-compact.mjs", &input_s, &node_out_s],
            &dir.join("node-stdout.txt"),
            &oracle,
        );
        let text = std::fs::read_to_string(&node_out).expect("node output");
        m.out_events = text.lines().filter(|l| !l.trim().is_empty()).count();
        m.out_bytes = text.len() as u64;
        theirs.push(m);
    }
    let wall = |v: &[Measure]| median(v.iter().map(|m| m.wall_s).collect());
    let peak = |v: &[Measure]| median(v.iter().map(|m| m.peak_kb as f64).collect());
    let (ow, tw) = (wall(&ours), wall(&theirs));
    let (op, tp) = (peak(&ours), peak(&theirs));
    println!(
        "input: {n} events, {:.1} MB ({})",
        in_bytes as f64 / 1e6,
        input.display()
    );
    println!(
        "agui compact (deltas):  {ow:7.3} s  {:6.2} M events/s  peak {:8.1} MB  -> {} events, {:.1} MB",
        n as f64 / ow / 1e6,
        op / 1024.0,
        ours[0].out_events,
        ours[0].out_bytes as f64 / 1e6
    );
    println!(
        "node compactEvents:     {tw:7.3} s  {:6.2} M events/s  peak {:8.1} MB  -> {} events, {:.1} MB",
        n as f64 / tw / 1e6,
        tp / 1024.0,
        theirs[0].out_events,
        theirs[0].out_bytes as f64 / 1e6
    );
    println!(
        "median of {rounds} rounds: agui is {:.1}x faster and uses {:.1}x less peak memory (goal: >= 20x, >= 10x)",
        tw / ow,
        tp / op
    );
}
