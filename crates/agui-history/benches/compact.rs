//! End-to-end benchmark of `agui compact` (deltas, snapshot, latest) against
//! Node running the official `compactEvents` (`oracle/bench-compact.mjs`) on
//! the same file: read, parse, compact, write, each as its own process,
//! measured in one run (wall time and peak resident memory, through
//! `/usr/bin/time -v`). Every timed run writes to `/dev/null`, as a user
//! piping the output on would see it without the page cache's cost of a
//! file; the output the event counts are taken from comes from one untimed
//! run of each side before the rounds. Also `agui verify` against Node's `JSON.parse` +
//! `transformChunks` + `verifyEvents` (`oracle/bench-verify.mjs`) and
//! `agui convert` (NDJSON, SSE and JSON arrays, each to the other two)
//! against `JSON.parse` + `JSON.stringify` of every event
//! (`oracle/bench-convert.mjs`), unless `AGUI_BENCH_COMPACT_ONLY` is set, and
//! the ceilings of the same run: a memchr newline scan and a memcpy of the
//! file in memory. Then `agui reduce` end to end against the official
//! reducer end to end (see `reduce_end_to_end`).
//!
//! ```text
//! cargo build --release -p agui-cli
//! cargo bench -p agui-history --bench compact
//! ```
//!
//! `AGUI_BENCH_DELTAS_ONLY` leaves out the snapshot and latest rows (about
//! 35 s a round on 1M events) and every conversion but NDJSON to SSE;
//! `AGUI_BENCH_NO_MODES` leaves out only the snapshot and latest rows.
//! `AGUI_BENCH_EVENTS` sets the stream length (default 1,000,000 events of
//! `agui_testkit::realistic`), `AGUI_BENCH_ROUNDS` the rounds (default 3;
//! the median is reported), `AGUI_BIN` the `agui` binary (default
//! `<target>/release/agui`). `AGUI_BENCH_BASE` names a second `agui`
//! binary (an earlier build) whose `compact` (deltas) and `verify` rows run
//! in the same rounds, for before/after ratios measured side by side.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

struct Measure {
    wall_s: f64,
    peak_kb: u64,
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
    // Our own summary lines (the official reducer's warnings are many).
    for line in stderr.lines().filter(|l| l.starts_with("agui")) {
        eprintln!("    {line}");
    }
    Measure { wall_s, peak_kb }
}

/// Events (non-blank lines) and bytes of an NDJSON output file.
fn count_output(path: &Path) -> (usize, u64) {
    let text = std::fs::read_to_string(path).expect("output readable");
    (
        text.lines().filter(|l| !l.trim().is_empty()).count(),
        text.len() as u64,
    )
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
    // The untimed runs whose output is counted.
    eprintln!("untimed: agui compact (deltas) and node compactEvents into files");
    measure(
        &agui,
        &["compact", &input_s, "--to", "ndjson"],
        &agui_out,
        &dir,
    );
    measure(
        Path::new("node"),
        &["bench-compact.mjs", &input_s, &node_out_s],
        Path::new("/dev/null"),
        &oracle,
    );

    // Every row, each round in turn, so that load drifts hit all alike.
    struct Job {
        name: String,
        program: PathBuf,
        args: Vec<String>,
        cwd: PathBuf,
        /// The official row this one is compared with.
        versus: Option<String>,
    }
    let dev_null = PathBuf::from("/dev/null");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let ours = |name: &str, args: &[&str], versus: Option<&str>| Job {
        name: name.to_owned(),
        program: agui.clone(),
        args: s(args),
        cwd: dir.clone(),
        versus: versus.map(str::to_owned),
    };
    let theirs = |name: &str, args: &[&str]| Job {
        name: name.to_owned(),
        program: node.clone(),
        args: s(args),
        cwd: oracle.clone(),
        versus: None,
    };
    const COMPACT: &str = "node compactEvents";
    const VERIFY: &str = "node JSON.parse + verifyEvents";
    let mut jobs = vec![
        ours(
            "agui compact (deltas)",
            &["compact", &input_s, "--to", "ndjson"],
            Some(COMPACT),
        ),
        theirs(COMPACT, &["bench-compact.mjs", &input_s]),
    ];
    let base = std::env::var_os("AGUI_BENCH_BASE").map(PathBuf::from);
    if let Some(base) = &base {
        assert!(
            base.exists(),
            "AGUI_BENCH_BASE {} is missing",
            base.display()
        );
        jobs.push(Job {
            program: base.clone(),
            ..ours(
                "base compact (deltas)",
                &["compact", &input_s, "--to", "ndjson"],
                Some(COMPACT),
            )
        });
    }
    // `AGUI_BENCH_NO_MODES`: every row but snapshot and latest (which take
    // most of a run's time).
    if std::env::var_os("AGUI_BENCH_DELTAS_ONLY").is_none()
        && std::env::var_os("AGUI_BENCH_NO_MODES").is_none()
    {
        jobs.extend([
            ours(
                "agui compact --mode snapshot",
                &["compact", &input_s, "--mode", "snapshot"],
                Some(COMPACT),
            ),
            ours(
                "agui compact --mode latest",
                &["compact", &input_s, "--mode", "latest"],
                Some(COMPACT),
            ),
        ]);
    }
    if std::env::var_os("AGUI_BENCH_COMPACT_ONLY").is_none() {
        if let Some(base) = &base {
            jobs.push(Job {
                program: base.clone(),
                ..ours("base verify", &["verify", &input_s], Some(VERIFY))
            });
        }
        jobs.extend([
            ours("agui verify", &["verify", &input_s], Some(VERIFY)),
            theirs(VERIFY, &["bench-verify.mjs", &input_s]),
        ]);
        // Conversions: NDJSON to SSE always; every other direction between
        // NDJSON, SSE and a JSON array unless `AGUI_BENCH_DELTAS_ONLY`
        // (the SSE and JSON inputs are the same events, written by an
        // untimed `agui convert`).
        let mut inputs = vec![("ndjson", input_s.clone())];
        let mut directions = vec![("ndjson", "sse")];
        if std::env::var_os("AGUI_BENCH_DELTAS_ONLY").is_none() {
            for to in ["sse", "json"] {
                let file = dir.join(format!("realistic-{n}.{to}"));
                if !file.exists() {
                    eprintln!("untimed: agui convert --to {to} into {}", file.display());
                    measure(&agui, &["convert", "--to", to, &input_s], &file, &dir);
                }
                inputs.push((to, file.to_str().expect("utf-8 path").to_owned()));
            }
            directions = vec![
                ("ndjson", "sse"),
                ("ndjson", "json"),
                ("sse", "ndjson"),
                ("sse", "json"),
                ("json", "ndjson"),
                ("json", "sse"),
            ];
        }
        for (from, to) in directions {
            let file = &inputs.iter().find(|(f, _)| *f == from).expect("input").1;
            let node_name = format!("node JSON.parse + JSON.stringify, {from} to {to}");
            jobs.push(ours(
                &format!("agui convert, {from} to {to}"),
                &["convert", "--to", to, file],
                Some(&node_name),
            ));
            jobs.push(theirs(&node_name, &["bench-convert.mjs", file, to]));
        }
    }
    let mut walls: Vec<Vec<f64>> = vec![Vec::new(); jobs.len()];
    let mut peaks: Vec<Vec<f64>> = vec![Vec::new(); jobs.len()];
    let whole = std::fs::read(&input).expect("input readable");
    let mut ceiling_scan = Vec::new();
    let mut ceiling_copy = Vec::new();
    for round in 0..rounds {
        // Ceilings on the same file, in this process: a newline scan with
        // memchr and one memcpy (the file is in memory; process start and
        // the read are not in them).
        let started = Instant::now();
        let lines = memchr::memchr_iter(b'\n', &whole).count();
        ceiling_scan.push(started.elapsed().as_secs_f64());
        assert!(lines >= n);
        let started = Instant::now();
        let copy = whole.clone();
        ceiling_copy.push(started.elapsed().as_secs_f64());
        std::hint::black_box(copy);
        for (i, job) in jobs.iter().enumerate() {
            eprintln!("round {}: {}", round + 1, job.name);
            let args: Vec<&str> = job.args.iter().map(String::as_str).collect();
            let m = measure(&job.program, &args, &dev_null, &job.cwd);
            walls[i].push(m.wall_s);
            peaks[i].push(m.peak_kb as f64);
        }
    }
    let (node_events, _) = count_output(&node_out);
    let (agui_events, agui_bytes) = count_output(&agui_out);
    println!(
        "input: {n} events, {:.1} MB ({})",
        in_bytes as f64 / 1e6,
        input.display()
    );
    println!(
        "ceiling, memchr newline scan of the file in memory: {:.4} s; memcpy of it: {:.4} s (median of {rounds})",
        median(ceiling_scan.clone()),
        median(ceiling_copy.clone())
    );
    let wall_of = |name: &str| {
        jobs.iter()
            .position(|j| j.name == name)
            .map(|i| median(walls[i].clone()))
    };
    println!("| row | median s | M events/s | peak MB | x official (same run) | x memchr scan |");
    println!("|---|---:|---:|---:|---:|---:|");
    let scan = median(ceiling_scan);
    for (i, job) in jobs.iter().enumerate() {
        let w = median(walls[i].clone());
        let p = median(peaks[i].clone()) / 1024.0;
        let versus = job
            .versus
            .as_deref()
            .and_then(wall_of)
            .map_or("".to_owned(), |t| format!("{:.1}x", t / w));
        println!(
            "| {} | {w:.3} | {:.2} | {p:.1} | {versus} | {:.0}x slower |",
            job.name,
            n as f64 / w / 1e6,
            w / scan
        );
    }
    println!(
        "agui compact (deltas) -> {agui_events} events, {:.1} MB; node compactEvents -> {node_events} events (untimed runs into files; timed runs write to /dev/null)",
        agui_bytes as f64 / 1e6
    );
    reduce_end_to_end(&agui, &node, &oracle, &dir, &input, rounds);
}

/// `agui reduce` end to end (process start, read, parse, reduce, write the
/// conversation) on the first 10k, 100k and 1M events of the input, and the
/// official reducer end to end (`oracle/bench-reduce-file.mjs`: read,
/// `JSON.parse`, `transformChunks` + `defaultApplyEvents`, write) on the
/// sizes up to `AGUI_BENCH_REDUCE_NODE_MAX` events (default 10,000: the
/// official reducer is quadratic, 100k events take it hours). Skipped when
/// `AGUI_BENCH_COMPACT_ONLY` is set.
fn reduce_end_to_end(
    agui: &Path,
    node: &Path,
    oracle: &Path,
    dir: &Path,
    input: &Path,
    rounds: usize,
) {
    if std::env::var_os("AGUI_BENCH_COMPACT_ONLY").is_some() {
        return;
    }
    let node_max = env_usize("AGUI_BENCH_REDUCE_NODE_MAX", 10_000);
    let text = std::fs::read_to_string(input).expect("input readable");
    let dev_null = PathBuf::from("/dev/null");
    println!(
        "| reduce, end to end | events | median s | M events/s | peak MB | official s | x official |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for size in [10_000usize, 100_000, 1_000_000] {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .take(size)
            .collect();
        if lines.len() < size {
            break;
        }
        let file = dir.join(format!("reduce-{size}.ndjson"));
        std::fs::write(&file, lines.join("\n") + "\n").expect("reduce input");
        let file_s = file.to_str().expect("utf-8 path");
        let mut walls = Vec::new();
        let mut peaks = Vec::new();
        for _ in 0..rounds {
            let m = measure(agui, &["reduce", file_s], &dev_null, dir);
            walls.push(m.wall_s);
            peaks.push(m.peak_kb as f64 / 1024.0);
        }
        let ours = median(walls);
        let official = (size <= node_max)
            .then(|| measure(node, &["bench-reduce-file.mjs", file_s], &dev_null, oracle).wall_s);
        println!(
            "| agui reduce | {size} | {ours:.3} | {:.2} | {:.1} | {} | {} |",
            size as f64 / ours / 1e6,
            median(peaks),
            official.map_or("not run".to_owned(), |t| format!("{t:.1}")),
            official.map_or("".to_owned(), |t| format!("{:.0}x", t / ours)),
        );
    }
}
