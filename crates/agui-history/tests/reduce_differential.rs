//! The reducer against the official one (`transformChunks` then
//! `defaultApplyEvents` of `@ag-ui/client` 1.0.0, run by `oracle/reduce.mjs`)
//! on seeded generated streams: every result must be the same JSON value.

use agui_history::reduce::{Conversation, Reducer, RunOutcome};
use agui_protocol::Event;
use agui_testkit::{r#gen as streams, oracle};
use serde_json::{Value, json};

/// Seeds per generator profile: 1,000, or `AGUI_REDUCE_DIFF_SEEDS`
/// (`scripts/test --quick` sets a small count).
fn seeds_per_profile() -> u64 {
    std::env::var("AGUI_REDUCE_DIFF_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// Numbers as JavaScript holds them (doubles), so `1.0` and `1` compare equal.
fn normalize(v: &Value) -> Value {
    match v {
        Value::Number(n) => {
            let f = n
                .as_f64()
                .or_else(|| n.to_string().parse().ok())
                .unwrap_or(f64::NAN);
            serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
        }
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), normalize(v))).collect())
        }
        other => other.clone(),
    }
}

/// A starting point for some seeds: the conversation of another stream and a
/// non-empty state, so that `RUN_STARTED.input.messages` meets existing ids.
fn start_for(profile: streams::Profile, seed: u64) -> Conversation {
    if seed % 4 != 3 {
        return Conversation::default();
    }
    let prior = streams::stream(profile, seed.wrapping_add(10_000));
    let mut start =
        agui_history::reduce::reduce(&prior, Conversation::default()).unwrap_or_default();
    start.state = json!({ "seed": seed, "nested": { "list": [1, 2, 3] } });
    start
}

fn ours(events: &[Event], start: Conversation) -> Value {
    let mut reducer = Reducer::new(start);
    for e in events {
        if let Err(err) = reducer.apply(e) {
            return json!({ "ok": false, "message": err.to_string() });
        }
    }
    let outcome = match reducer.last_outcome() {
        None => Value::Null,
        Some(RunOutcome::Success {
            result,
            pending_tool_call_ids,
        }) => {
            let mut o = json!({ "type": "success", "pendingToolCallIds": pending_tool_call_ids });
            if let Some(r) = result {
                o["result"] = r.clone();
            }
            o
        }
        Some(RunOutcome::Interrupt) => json!({ "type": "interrupt" }),
        Some(RunOutcome::Cancelled) => json!({ "type": "cancelled" }),
    };
    let pending = reducer.pending_interrupts().to_vec();
    let conv = reducer.into_conversation();
    json!({
        "ok": true,
        "messages": conv.messages,
        "state": conv.state,
        "pendingInterrupts": pending,
        "outcome": outcome,
    })
}

/// Compares a batch against the official reducer, streamed one case at a
/// time through the oracle (the corpus is never held at once); returns
/// (cases, mismatches) and prints the first few.
fn compare_batch<I>(label: &str, cases: I) -> (usize, usize)
where
    I: Iterator<Item = (u64, Vec<Event>, Conversation)> + Send + 'static,
{
    let cases = cases.map(|(seed, events, start)| {
        let case = json!({
            "events": events.iter().map(Event::to_value).collect::<Vec<_>>(),
            "messages": start.messages,
            "state": start.state,
        });
        (case, (seed, events, start))
    });
    let mut mismatches = 0;
    let n = oracle::run_each("reduce.mjs", cases, |(seed, events, start), want| {
        let got = ours(&events, start);
        let same = if want["ok"] == json!(true) {
            normalize(&got) == normalize(&want)
        } else {
            got["ok"] == json!(false)
        };
        if !same {
            mismatches += 1;
            if mismatches <= 3 {
                eprintln!(
                    "[{label}] seed {seed}: mismatch\n  official: {}\n  ours:     {}\n  events: {}",
                    want,
                    got,
                    serde_json::to_string(&events).unwrap_or_default()
                );
            }
        }
    });
    (n, mismatches)
}

/// One profile, [`seeds_per_profile`] seeds, streamed through one oracle.
fn check_profile(profile: streams::Profile) {
    let seeds = seeds_per_profile();
    let cases = (0..seeds).map(move |seed| {
        (
            seed,
            streams::stream(profile, seed),
            start_for(profile, seed),
        )
    });
    let (n, bad) = compare_batch(profile.name(), cases);
    assert_eq!(n as u64, seeds, "{}: every seed answered", profile.name());
    eprintln!("{}: {} streams, {} mismatches", profile.name(), n, bad);
    assert_eq!(
        bad,
        0,
        "{}: {bad} of {n} streams differ from the official reducer",
        profile.name()
    );
}

macro_rules! profile_tests {
    ($($name:ident => $profile:ident,)*) => {
        $(
            #[test]
            fn $name() {
                check_profile(streams::Profile::$profile);
            }
        )*

        /// Every generator profile has a test above.
        #[test]
        fn every_profile_is_covered() {
            let covered = [$(streams::Profile::$profile),*];
            for p in streams::Profile::ALL {
                assert!(covered.contains(p), "no differential test for {}", p.name());
            }
        }
    };
}

profile_tests! {
    profile_sequential => Sequential,
    profile_parallel_tools => ParallelTools,
    profile_concurrent_text => ConcurrentText,
    profile_tool_in_message => ToolInMessage,
    profile_encrypted => Encrypted,
    profile_snapshot_mid_stream => SnapshotMidStream,
    profile_error_recovery => ErrorRecovery,
    profile_activity => Activity,
    profile_reasoning => Reasoning,
    profile_chunks => Chunks,
    profile_subagents => Subagents,
    profile_branching => Branching,
    profile_in_flight => InFlight,
    profile_state => State,
    profile_metadata => Metadata,
    profile_unknown => Unknown,
    profile_mixed => Mixed,
}

#[test]
fn invalid_streams_match_the_official_reducer() {
    // Streams that break one verification or chunk rule: the reducer runs
    // without verification, so they either reduce to the same value or make
    // both pipelines throw (chunk errors).
    let seeds = seeds_per_profile();
    let cases =
        (0..seeds).map(|seed| (seed, streams::invalid_stream(seed), Conversation::default()));
    let (n, bad) = compare_batch("invalid", cases);
    assert_eq!(n as u64, seeds);
    eprintln!("invalid: {n} streams, {bad} mismatches");
    assert_eq!(
        bad, 0,
        "{bad} of {n} invalid streams differ from the official reducer"
    );
}

#[test]
fn hand_made_edge_cases_match_the_official_reducer() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/reduce/edge-cases.json"
    ))
    .expect("fixtures/reduce/edge-cases.json");
    let fixtures: Vec<Value> = serde_json::from_str(&text).expect("fixture JSON");
    let cases: Vec<_> = fixtures
        .iter()
        .enumerate()
        .map(|(i, case)| {
            let events: Vec<Event> = case["events"]
                .as_array()
                .expect("events")
                .iter()
                .map(|e| Event::from_serialize(e).expect("event"))
                .collect();
            let start = Conversation {
                messages: case["messages"].as_array().cloned().unwrap_or_default(),
                state: case.get("state").cloned().unwrap_or_else(|| json!({})),
            };
            (i as u64, events, start)
        })
        .collect();
    let (n, bad) = compare_batch("edge-cases", cases.into_iter());
    eprintln!("edge cases: {n} streams, {bad} mismatches");
    assert_eq!(
        bad, 0,
        "{bad} of {n} hand-made streams differ from the official reducer"
    );
}
