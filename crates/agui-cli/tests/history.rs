//! `agui history`: the run tree, time travel and branch extraction, run as
//! the real binary on the lineage fixtures.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn fixture(case: &str, file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/lineage")
        .join(case)
        .join(file)
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
        .unwrap();
    if let Some(bytes) = stdin {
        // A command that refuses its arguments may exit before reading its
        // input: a closed pipe is its answer, not a failure of the test.
        if let Err(e) = child.stdin.take().unwrap().write_all(bytes) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
        }
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn tree_lists_one_run_a_line_for_every_fixture() {
    for case in ["forked", "linear", "threads", "snapshots"] {
        let events = fixture(case, "events.ndjson");
        let out = agui(&["history", path(&events), "--tree"], None);
        assert!(out.status.success(), "{case}: {}", text(&out.stderr));
        let want = fs::read_to_string(fixture(case, "tree.txt")).unwrap();
        assert_eq!(text(&out.stdout), want, "{case}");
    }
}

#[test]
fn tree_reads_standard_input_in_any_format() {
    let ndjson = fs::read(fixture("forked", "events.ndjson")).unwrap();
    let want = fs::read_to_string(fixture("forked", "tree.txt")).unwrap();
    let out = agui(&["history", "-", "--tree"], Some(&ndjson));
    assert_eq!(text(&out.stdout), want);
    // The same log as a JSON array.
    let lines: Vec<&str> = std::str::from_utf8(&ndjson).unwrap().lines().collect();
    let array = format!("[{}]", lines.join(",\n"));
    let out = agui(&["history", "--tree"], Some(array.as_bytes()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), want);
}

#[test]
fn tree_json_gives_one_object_per_run() {
    let out = agui(
        &[
            "history",
            path(&fixture("forked", "events.ndjson")),
            "--tree",
            "--json",
        ],
        None,
    );
    assert!(out.status.success());
    let runs: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = runs.iter().map(|r| r["runId"].as_str().unwrap()).collect();
    assert_eq!(ids, ["r1", "r2", "r3", "r4", "r5"]);
    assert_eq!(runs[4]["parentRunId"], "r4");
    assert_eq!(runs[4]["explicitParent"], false);
    assert_eq!(runs[4]["status"], "error");
    assert_eq!(runs[4]["eventCount"], 5);
    // Times as everywhere else: RFC 3339 UTC with milliseconds.
    assert_eq!(runs[0]["startedAt"], "2026-01-01T10:00:00.000Z");
    assert_eq!(runs[0]["finishedAt"], "2026-01-01T10:00:00.020Z");
}

#[test]
fn lineage_faults_are_reported_with_exit_1() {
    for case in [
        "fault-parent-not-found",
        "fault-parent-other-thread",
        "fault-duplicate-run-id",
        "fault-cycle",
        "fault-self-parent",
        "fault-several",
    ] {
        let expect: Value =
            serde_json::from_str(&fs::read_to_string(fixture(case, "expect.json")).unwrap())
                .unwrap();
        let out = agui(
            &["history", path(&fixture(case, "events.ndjson")), "--tree"],
            None,
        );
        assert_eq!(out.status.code(), Some(1), "{case}");
        assert!(out.stdout.is_empty(), "{case}");
        let stderr = text(&out.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        let faults = expect["faults"].as_array().unwrap();
        assert_eq!(lines.len(), faults.len(), "{case}: {stderr}");
        for (line, fault) in lines.iter().zip(faults) {
            assert_eq!(
                *line,
                format!(
                    "agui: lineage fault: {}",
                    fault["message"].as_str().unwrap()
                ),
                "{case}"
            );
        }
    }
}

fn messages_of(stdout: &[u8]) -> (Vec<String>, Value) {
    let v: Value = serde_json::from_slice(stdout).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["messages", "state"]);
    let ids = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    (ids, v["state"].clone())
}

#[test]
fn at_gives_messages_and_state_at_any_run_and_event() {
    let events = fixture("forked", "events.ndjson");
    let expect: Value =
        serde_json::from_str(&fs::read_to_string(fixture("forked", "expect.json")).unwrap())
            .unwrap();
    for at in expect["messagesAt"].as_array().unwrap() {
        let run = at["run"].as_str().unwrap();
        let mut args = vec!["history", path(&events), "--at", run];
        let n = at["event"].as_u64().map(|n| n.to_string());
        if let Some(n) = &n {
            args.extend(["--event", n.as_str()]);
        }
        let out = agui(&args, None);
        assert!(out.status.success(), "{at}: {}", text(&out.stderr));
        let (ids, _) = messages_of(&out.stdout);
        assert_eq!(serde_json::json!(ids), at["ids"], "{at}");
    }
    let linear = fixture("linear", "events.ndjson");
    let out = agui(
        &["history", path(&linear), "--at", "s1", "--event", "4"],
        None,
    );
    let (ids, state) = messages_of(&out.stdout);
    assert_eq!(ids, ["q1", "b1"]);
    assert_eq!(state, serde_json::json!({"step": 0}));
}

#[test]
fn at_reports_unknown_runs_and_events() {
    let events = fixture("forked", "events.ndjson");
    let out = agui(&["history", path(&events), "--at", "zz"], None);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr), "agui: no run \"zz\" in this log\n");
    let out = agui(
        &["history", path(&events), "--at", "r2", "--event", "9"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "agui: run \"r2\" has 5 events (0 to 4), there is no event 9\n"
    );
    let out = agui(&["history", path(&events)], None);
    assert_eq!(out.status.code(), Some(2), "a mode is required");
}

#[test]
fn branch_extracts_a_replayable_branch_in_every_format() {
    let events = fixture("forked", "events.ndjson");
    let out = agui(
        &["history", path(&events), "--branch", "r5", "--to", "ndjson"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let types: Vec<(String, Option<String>)> = stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["type"].as_str().unwrap().to_owned(),
                v["runId"].as_str().map(str::to_owned),
            )
        })
        .collect();
    let runs: Vec<&str> = types
        .iter()
        .filter(|(t, _)| t == "RUN_STARTED")
        .filter_map(|(_, r)| r.as_deref())
        .collect();
    assert_eq!(runs, ["r1", "r4", "r5"]);
    assert_eq!(types.len(), 1 + 6 + 5 + 5);
    assert!(
        !stdout.contains("\"a2\""),
        "the abandoned answer is not restated"
    );
    assert!(text(&out.stderr).contains("left out message \"a2\""));

    // Replaying the extracted branch gives the same conversation.
    let replayed = agui(&["history", "-", "--at", "r5"], Some(stdout.as_bytes()));
    let direct = agui(&["history", path(&events), "--at", "r5"], None);
    assert!(replayed.status.success(), "{}", text(&replayed.stderr));
    assert_eq!(replayed.stdout, direct.stdout);

    let json = agui(
        &["history", path(&events), "--branch", "r3", "--to", "json"],
        None,
    );
    let array: Vec<Value> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(array.len(), 1 + 6 + 5);
    let sse = agui(
        &["history", path(&events), "--branch", "r3", "--to", "sse"],
        None,
    );
    let frames = text(&sse.stdout);
    assert_eq!(frames.matches("data: ").count(), 12);
    // Default: the input's format (NDJSON here), cut after an event.
    let cut = agui(
        &["history", path(&events), "--branch", "r2", "--event", "0"],
        None,
    );
    assert_eq!(text(&cut.stdout).lines().count(), 1 + 6 + 1);
}

#[test]
fn at_prints_what_agui_reduce_prints_for_a_log_without_forks() {
    let linear = fixture("linear", "events.ndjson");
    let at = agui(&["history", path(&linear), "--at", "s3"], None);
    let reduce = agui(&["reduce", path(&linear)], None);
    assert!(reduce.status.success(), "{}", text(&reduce.stderr));
    assert_eq!(text(&at.stdout), text(&reduce.stdout));
}

#[test]
fn a_branch_the_reducer_refuses_exits_1_naming_the_log_event() {
    let log = b"{\"type\":\"CUSTOM\",\"name\":\"x\",\"value\":1}\n\
{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\
{\"type\":\"TEXT_MESSAGE_CHUNK\",\"delta\":\"no id\"}\n";
    let out = agui(&["history", "-", "--at", "r"], Some(log));
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("agui: replaying the branch failed at log event 2; the reducer says: "),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// A thread of many runs is a chain (each run continues the previous one):
/// the listing indents at most 32 levels and writes deeper depths, so its
/// size stays linear in the number of runs.
#[test]
fn tree_of_a_long_thread_stays_linear() {
    let runs = 2_000;
    let mut log = String::new();
    for i in 0..runs {
        log.push_str(&format!(
            "{{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r{i}\"}}\n{{\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r{i}\"}}\n"
        ));
    }
    let out = agui(&["history", "--tree"], Some(log.as_bytes()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing = text(&out.stdout);
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), runs);
    assert!(
        lines[0].starts_with("r0  thread=t  parent=-"),
        "{}",
        lines[0]
    );
    assert!(
        lines[32].starts_with(&format!("{}r32  ", "  ".repeat(32))),
        "{}",
        lines[32]
    );
    assert!(
        lines[33].starts_with(&format!("{}[depth 33] r33  ", "  ".repeat(32))),
        "{}",
        lines[33]
    );
    assert!(listing.len() < runs * 160, "{} bytes", listing.len());
}
