//! The generators' own contract: deterministic per seed, and every valid
//! stream is accepted by the official client pipeline (enforcement, chunk
//! expansion, verification).

use agui_testkit::r#gen::{self as g, Mutation, Profile};
use agui_testkit::oracle;
use serde_json::Value;

fn as_values(events: &[agui_protocol::Event]) -> Value {
    Value::Array(events.iter().map(|e| e.to_value()).collect())
}

#[test]
fn same_seed_same_stream_and_seeds_differ() {
    for &p in Profile::ALL {
        let a = g::stream(p, 7);
        let b = g::stream(p, 7);
        let c = g::stream(p, 8);
        assert_eq!(
            a.iter().map(|e| e.json()).collect::<Vec<_>>(),
            b.iter().map(|e| e.json()).collect::<Vec<_>>(),
            "{} is not deterministic",
            p.name()
        );
        assert_ne!(
            a.iter().map(|e| e.json()).collect::<Vec<_>>(),
            c.iter().map(|e| e.json()).collect::<Vec<_>>(),
            "{}: seeds 7 and 8 gave the same stream",
            p.name()
        );
        assert!(a.len() >= 3, "{}: stream too short", p.name());
    }
    let x = g::invalid_stream(3);
    let y = g::invalid_stream(3);
    assert_eq!(
        x.iter().map(|e| e.json()).collect::<Vec<_>>(),
        y.iter().map(|e| e.json()).collect::<Vec<_>>()
    );
}

#[test]
fn realistic_has_the_requested_size_and_mean_event_size() {
    let events = g::realistic(20_000, 1);
    assert_eq!(events.len(), 20_000);
    let bytes: usize = events.iter().map(|e| e.len_bytes()).sum();
    let mean = bytes as f64 / events.len() as f64;
    eprintln!("realistic: mean event size {mean:.1} bytes");
    assert!(
        (145.0..=185.0).contains(&mean),
        "mean event size {mean:.1} bytes is far from ~166"
    );
}

#[test]
fn profiles_exercise_what_they_promise() {
    let has = |p: Profile, ty: &str| {
        (0..40u64).any(|s| g::stream(p, s).iter().any(|e| e.type_name() == ty))
    };
    assert!(has(Profile::Chunks, "TEXT_MESSAGE_CHUNK"));
    assert!(has(Profile::Chunks, "TOOL_CALL_CHUNK"));
    assert!(has(Profile::Chunks, "REASONING_MESSAGE_CHUNK"));
    assert!(has(Profile::Encrypted, "REASONING_ENCRYPTED_VALUE"));
    assert!(has(Profile::SnapshotMidStream, "MESSAGES_SNAPSHOT"));
    assert!(has(Profile::ErrorRecovery, "RUN_ERROR"));
    assert!(has(Profile::Activity, "ACTIVITY_DELTA"));
    assert!(has(Profile::Reasoning, "REASONING_START"));
    assert!(has(Profile::Subagents, "SUBAGENT_STARTED"));
    assert!(has(Profile::State, "STATE_DELTA"));
    assert!(has(Profile::Unknown, "X_VENDOR_HEARTBEAT"));
    // In flight: the last run has no terminal.
    let in_flight = (0..20u64)
        .filter(|&s| {
            let ev = g::stream(Profile::InFlight, s);
            let last_start = ev.iter().rposition(|e| e.type_name() == "RUN_STARTED");
            let last_end = ev
                .iter()
                .rposition(|e| matches!(e.type_name(), "RUN_FINISHED" | "RUN_ERROR"));
            last_end < last_start
        })
        .count();
    assert!(
        in_flight > 10,
        "only {in_flight} of 20 in-flight streams end mid-run"
    );
    // Branching: parentRunId naming a run other than the previous one.
    assert!((0..20u64).any(|s| {
        let ev = g::stream(Profile::Branching, s);
        let mut runs = Vec::new();
        ev.iter()
            .filter(|e| e.type_name() == "RUN_STARTED")
            .any(|e| {
                let v = e.to_value();
                let hit = v.get("parentRunId").is_some_and(|p| Some(p) != runs.last());
                runs.push(v["runId"].clone());
                hit
            })
    }));
    // Every mutation occurs.
    let mut seen = std::collections::HashSet::new();
    for s in 0..400u64 {
        seen.insert(g::invalid_stream_with(s).1);
    }
    for m in Mutation::ALL {
        assert!(seen.contains(m), "mutation {m:?} never applied");
    }
}

#[test]
fn valid_streams_pass_the_official_pipeline() {
    let mut cases = Vec::new();
    let mut names = Vec::new();
    for &p in Profile::ALL {
        for seed in 0..40u64 {
            cases.push(as_values(&g::stream(p, seed)));
            names.push(format!("{}#{seed}", p.name()));
        }
    }
    let results = oracle::run("verify.mjs", &Value::Array(cases));
    let results = results.as_array().expect("an array of results");
    let bad: Vec<String> = results
        .iter()
        .zip(&names)
        .filter(|(r, _)| r["ok"] != true)
        .map(|(r, n)| format!("{n}: {r}"))
        .collect();
    assert!(
        bad.is_empty(),
        "{} rejected:\n{}",
        bad.len(),
        bad[..bad.len().min(15)].join("\n")
    );
}
