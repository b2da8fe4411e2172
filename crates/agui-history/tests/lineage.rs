//! Data-driven lineage tests: every case under `fixtures/lineage/` is a log
//! (`events.ndjson`) and what must be true of it (`expect.json`).

use std::fs;
use std::path::{Path, PathBuf};

use agui_history::lineage::{Lineage, LineageError, LineageFault, RunIndex};
use agui_history::reduce::{Conversation, reduce};
use agui_protocol::Event;
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/lineage")
}

fn read_events(path: &Path) -> Vec<Event> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Event::from_json(l).unwrap())
        .collect()
}

fn cases() -> Vec<(String, Vec<Event>, Value)> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 10, "fixtures missing: {dirs:?}");
    dirs.into_iter()
        .map(|d| {
            let name = d.file_name().unwrap().to_string_lossy().into_owned();
            let events = read_events(&d.join("events.ndjson"));
            let expect: Value =
                serde_json::from_str(&fs::read_to_string(d.join("expect.json")).unwrap()).unwrap();
            (name, events, expect)
        })
        .collect()
}

fn empty() -> Conversation {
    Conversation {
        messages: Vec::new(),
        state: json!({}),
    }
}

fn ids(conversation: &Conversation) -> Vec<String> {
    conversation
        .messages
        .iter()
        .map(|m| m["id"].as_str().unwrap_or("?").to_owned())
        .collect()
}

fn opt(v: &Value) -> Option<&str> {
    v.as_str()
}

#[test]
fn fault_fixtures_report_every_fault_in_order() {
    let mut seen = 0;
    for (name, events, expect) in cases() {
        let Some(expected) = expect.get("faults") else {
            continue;
        };
        seen += 1;
        let err = RunIndex::build(&events).expect_err(&name);
        let LineageError::Faults(faults) = err else {
            panic!("{name}: {err}")
        };
        let expected = expected.as_array().unwrap();
        assert_eq!(faults.len(), expected.len(), "{name}: {faults:#?}");
        for (fault, want) in faults.iter().zip(expected) {
            let kind = match fault {
                LineageFault::ParentNotFound { .. } => "parentNotFound",
                LineageFault::ParentInOtherThread { .. } => "parentInOtherThread",
                LineageFault::DuplicateRunId { .. } => "duplicateRunId",
                LineageFault::Cycle { .. } => "cycle",
            };
            assert_eq!(kind, want["kind"], "{name}");
            assert_eq!(fault.event_index() as u64, want["eventIndex"], "{name}");
            assert_eq!(fault.to_string(), want["message"], "{name}");
        }
        // The incremental path stops at the first fault, with the same index
        // (a forward reference is all it cannot resolve).
        let mut index = RunIndex::new();
        let first = events
            .iter()
            .find_map(|e| index.push(e).err())
            .expect("push must fail too");
        assert!(matches!(first, LineageError::Faults(_)), "{name}: {first}");
    }
    assert_eq!(seen, 6);
}

#[test]
fn tree_fixtures_match_runs_leaves_branches_and_divergence() {
    let mut seen = 0;
    for (name, events, expect) in cases() {
        if expect.get("faults").is_some() {
            continue;
        }
        seen += 1;
        let index = RunIndex::build(&events).unwrap_or_else(|e| panic!("{name}: {e}"));
        let runs: Vec<Value> = index
            .runs()
            .iter()
            .map(|r| {
                json!({
                    "runId": r.run_id, "threadId": r.thread_id, "parentRunId": r.parent_run_id,
                    "explicitParent": r.explicit_parent, "status": r.status.as_str(),
                    "eventCount": r.event_count, "startedAt": r.started_at, "finishedAt": r.finished_at,
                })
            })
            .collect();
        assert_eq!(Value::from(runs), expect["runs"], "{name}");
        let leaves: Vec<&str> = index.leaves().iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(json!(leaves), expect["leaves"], "{name}");
        let branches: Vec<Vec<&str>> = index
            .branches()
            .unwrap()
            .iter()
            .map(|b| b.iter().map(|r| r.run_id.as_str()).collect())
            .collect();
        assert_eq!(json!(branches), expect["branches"], "{name}");
        for d in expect["divergence"].as_array().unwrap() {
            let got = index
                .divergence(d["a"].as_str().unwrap(), d["b"].as_str().unwrap())
                .unwrap();
            let id = |r: Option<&agui_history::lineage::RunNode>| r.map(|r| r.run_id.clone());
            assert_eq!(id(got.fork).as_deref(), opt(&d["fork"]), "{name} {d}");
            assert_eq!(id(got.first_a).as_deref(), opt(&d["firstA"]), "{name} {d}");
            assert_eq!(id(got.first_b).as_deref(), opt(&d["firstB"]), "{name} {d}");
        }
        // Pushing event by event gives the same runs.
        let mut inc = RunIndex::new();
        for e in &events {
            inc.push(e).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert_eq!(inc.runs(), index.runs(), "{name}");
    }
    assert_eq!(seen, 4);
}

#[test]
fn time_travel_fixtures_give_each_branch_only_its_own_messages() {
    for (name, events, expect) in cases() {
        if expect.get("faults").is_some() {
            continue;
        }
        let lineage = Lineage::new(&events).unwrap();
        for at in expect["messagesAt"].as_array().unwrap() {
            let run = at["run"].as_str().unwrap();
            let event = at["event"].as_u64().map(|n| n as usize);
            let got = lineage.conversation_at(run, event, empty()).unwrap();
            assert_eq!(json!(ids(&got)), at["ids"], "{name} at {at}");
            // The branch's events, replayed from scratch, say the same.
            let branch = lineage.branch(run, event).unwrap();
            let replay: Vec<Event> = branch
                .events
                .iter()
                .map(|(_, e)| e.clone().into_owned())
                .collect();
            assert_eq!(reduce(&replay, empty()).unwrap(), got, "{name} at {at}");
        }
        for at in expect
            .get("stateAt")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let event = at["event"].as_u64().map(|n| n as usize);
            let got = lineage
                .conversation_at(at["run"].as_str().unwrap(), event, empty())
                .unwrap();
            assert_eq!(got.state, at["state"], "{name} at {at}");
        }
        let mut dropped = Vec::new();
        for leaf in lineage.index().runs() {
            for d in lineage.branch(&leaf.run_id, None).unwrap().dropped {
                let entry = json!({"run": leaf.run_id, "eventIndex": d.event_index, "messageId": d.message_id});
                if !dropped.contains(&entry) {
                    dropped.push(entry);
                }
            }
        }
        assert_eq!(Value::from(dropped), expect["dropped"], "{name}");
    }
}

#[test]
fn a_log_without_forks_reduces_to_the_same_conversation_at_its_last_run() {
    let events = read_events(&fixtures().join("linear/events.ndjson"));
    let whole = reduce(&events, empty()).unwrap();
    let at = Lineage::new(&events)
        .unwrap()
        .conversation_at("s3", None, empty())
        .unwrap();
    assert_eq!(at, whole);
}

#[test]
fn queries_about_missing_runs_and_events_are_errors() {
    let events = read_events(&fixtures().join("forked/events.ndjson"));
    let lineage = Lineage::new(&events).unwrap();
    assert!(matches!(
        lineage.conversation_at("nope", None, empty()),
        Err(LineageError::UnknownRun { .. })
    ));
    let err = lineage.conversation_at("r2", Some(5), empty()).unwrap_err();
    assert!(matches!(
        err,
        LineageError::EventOutOfRange {
            event: 5,
            event_count: 5,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "run \"r2\" has 5 events (0 to 4), there is no event 5"
    );
    assert!(lineage.conversation_at("r2", Some(4), empty()).is_ok());
}
