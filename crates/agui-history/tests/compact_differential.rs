//! Differential tests of `deltas` compaction against the official
//! `compactEvents` (`@ag-ui/client` 1.0.0, through `oracle/compact.mjs`).
//!
//! For every generator profile, 1,000 seeded streams (the count;
//! `AGUI_COMPACT_DIFF_SEEDS=N` sets another):
//!
//! - wherever the official function is right (the stream is *plain*: at most
//!   one text or tool-call stream open at a time, none left open at a run
//!   boundary or at the end, nothing touching an open stream in the middle of
//!   it) and none of the kinds we merge beyond upstream occurs (reasoning
//!   message content, chunks, activity deltas), our output equals the
//!   official output;
//! - everywhere, our output reduces (with this crate's reducer, itself
//!   differential-tested against the official one) to the conversation of
//!   the original at the end of every run, is idempotent, and is never longer.
//!
//! A smaller sample per profile also runs the official pipeline (chunk
//! expansion, verifier, reducer) on the original, the official output and
//! ours: ours must reduce like the original, and verify whenever the
//! original does. The official output's failures are counted, not asserted:
//! they are what this crate fixes.

use std::collections::HashSet;

use agui_history::compact::{compact_deltas, compact_snapshot_last};
use agui_history::reduce::{Conversation, Reducer};
use agui_protocol::{Event, EventType};
use agui_testkit::{Profile, oracle, stream};
use serde::Deserialize;
use serde_json::{Value, json};

/// Seeded streams per profile: 1,000 (the count), or
/// `AGUI_COMPACT_DIFF_SEEDS` (the official `compactEvents` runs in Node,
/// batched per profile; 1,000 per profile takes about three minutes on two
/// cores).
fn seeds() -> u64 {
    std::env::var("AGUI_COMPACT_DIFF_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

const OFFICIAL_PIPELINE_SEEDS: u64 = 40;

#[derive(Deserialize)]
struct Ids {
    #[serde(rename = "messageId", default)]
    message_id: Option<Value>,
    #[serde(rename = "toolCallId", default)]
    tool_call_id: Option<Value>,
    #[serde(rename = "parentMessageId", default)]
    parent_message_id: Option<Value>,
}

fn key(prefix: &str, v: &Option<Value>) -> Option<String> {
    v.as_ref()
        .and_then(Value::as_str)
        .map(|s| format!("{prefix}{s}"))
}

/// A stream on which the official `compactEvents` keeps the meaning and
/// which holds none of the kinds we merge beyond it.
fn plain(events: &[Event]) -> bool {
    let mut open: HashSet<String> = HashSet::new();
    for e in events {
        let Ok(ids) = e.view::<Ids>() else {
            return false;
        };
        let m = key("m:", &ids.message_id);
        let t = key("t:", &ids.tool_call_id);
        let p = key("m:", &ids.parent_message_id);
        let touches_open = |k: &Option<String>| k.as_ref().is_some_and(|k| open.contains(k));
        match e.event_type() {
            EventType::TextMessageStart | EventType::ToolCallStart => {
                let k = if e.event_type() == &EventType::TextMessageStart {
                    m
                } else {
                    t.clone()
                };
                let Some(k) = k else { return false };
                if !open.is_empty() || touches_open(&p) {
                    return false;
                }
                open.insert(k);
            }
            EventType::TextMessageContent | EventType::TextMessageEnd => {
                let Some(k) = m else { return false };
                if !open.contains(&k) {
                    return false;
                }
                if e.event_type() == &EventType::TextMessageEnd {
                    open.remove(&k);
                }
            }
            EventType::ToolCallArgs | EventType::ToolCallEnd => {
                let Some(k) = t else { return false };
                if !open.contains(&k) {
                    return false;
                }
                if e.event_type() == &EventType::ToolCallEnd {
                    open.remove(&k);
                }
            }
            EventType::RunStarted | EventType::RunFinished | EventType::RunError
                if !open.is_empty() =>
            {
                return false;
            }
            EventType::MessagesSnapshot
            | EventType::ActivityDelta
            | EventType::ReasoningMessageContent
            | EventType::TextMessageChunk
            | EventType::ToolCallChunk
            | EventType::ReasoningMessageChunk => return false,
            EventType::ToolCallResult
            | EventType::ActivitySnapshot
            | EventType::ReasoningMessageStart
            | EventType::ReasoningMessageEnd
                if touches_open(&m) =>
            {
                return false;
            }
            _ => {}
        }
    }
    open.is_empty()
}

fn checkpoints(events: &[Event]) -> Option<Vec<Conversation>> {
    let mut reducer = Reducer::new(Conversation::default());
    let mut out = Vec::new();
    for event in events {
        reducer.apply(event).ok()?;
        if event.event_type().is_run_terminal() {
            out.push(reducer.conversation().clone());
        }
    }
    out.push(reducer.into_conversation());
    Some(out)
}

fn values(events: &[Event]) -> Vec<Value> {
    events.iter().map(Event::to_value).collect()
}

fn bytes(events: &[Event]) -> usize {
    events.iter().map(Event::len_bytes).sum()
}

/// Our side of one seed, checked on its own: compaction never grows the
/// stream, is idempotent and keeps the meaning at every run end. Returns the
/// case for the official side and what the comparison needs.
fn our_side(profile: Profile, seed: u64) -> (Value, (u64, bool, Value)) {
    let events = stream(profile, seed);
    let ours = compact_deltas(events.clone()).expect("deltas never fails on valid JSON");
    let name = profile.name();
    assert!(
        ours.len() <= events.len(),
        "{name} seed {seed}: more events"
    );
    assert!(
        bytes(&ours) <= bytes(&events),
        "{name} seed {seed}: more bytes"
    );
    let again = compact_deltas(ours.clone()).expect("deltas again");
    assert_eq!(
        values(&again),
        values(&ours),
        "{name} seed {seed}: not idempotent"
    );
    if let Some(original) = checkpoints(&events) {
        assert_eq!(
            checkpoints(&ours).as_ref(),
            Some(&original),
            "{name} seed {seed}: meaning changed"
        );
    }
    let is_plain = plain(&events);
    (
        json!({ "events": events }),
        (seed, is_plain, Value::Array(values(&ours))),
    )
}

#[test]
fn deltas_equals_the_official_output_where_it_is_right_and_keeps_meaning_everywhere() {
    let seeds = seeds();
    let mut report = Vec::new();
    let mut plain_total = 0;
    for &profile in Profile::ALL {
        // Streamed through the official side one seed at a time: the
        // corpus (17,000 streams in all) is never held at once.
        let mut equal = 0;
        let mut n_plain = 0;
        let mut equal_anyway = 0;
        let cases = (0..seeds).map(move |seed| our_side(profile, seed));
        let n = oracle::run_each("compact.mjs", cases, |(seed, is_plain, ours), result| {
            let official = &result["official"];
            let same = ours == *official;
            if is_plain {
                n_plain += 1;
                assert!(
                    same,
                    "{} seed {seed}: differs from the official output on a plain stream\nours:     {}\nofficial: {}",
                    profile.name(),
                    ours,
                    official
                );
                equal += 1;
            } else if same {
                equal_anyway += 1;
            }
        });
        assert_eq!(n as u64, seeds, "{}: every seed answered", profile.name());
        plain_total += n_plain;
        report.push(format!(
            "{:20} plain {n_plain:4}/{seeds}, equal on all of them; equal on {equal_anyway} others",
            profile.name()
        ));
        assert_eq!(equal, n_plain);
    }
    eprintln!("{}", report.join("\n"));
    // The comparison must not be vacuous.
    assert!(
        plain_total >= 3 * seeds as usize,
        "only {plain_total} plain streams"
    );
}

#[test]
fn deltas_reduces_and_verifies_like_the_original_in_the_official_pipeline() {
    let mut report = Vec::new();
    for &profile in Profile::ALL {
        let mut cases = Vec::new();
        for seed in 0..OFFICIAL_PIPELINE_SEEDS {
            let events = stream(profile, seed);
            let ours = compact_deltas(events.clone()).expect("deltas");
            cases.push(json!({ "events": events, "ours": ours, "reduce": true, "verify": true }));
        }
        let results = oracle::run("compact.mjs", &Value::Array(cases));
        let mut official_wrong = 0;
        let mut official_unverified = 0;
        for (seed, r) in results.as_array().expect("results").iter().enumerate() {
            assert!(
                r["reduced"].get("error").is_none(),
                "the official reducer refused the input"
            );
            assert_eq!(
                r["reducedOurs"],
                r["reduced"],
                "{} seed {seed}: the official reducer sees another conversation",
                profile.name()
            );
            if r["verified"] == json!(true) {
                assert_eq!(
                    r["verifiedOurs"],
                    json!(true),
                    "{} seed {seed}: the official verifier rejects our output",
                    profile.name()
                );
                if r["verifiedOfficial"] != json!(true) {
                    official_unverified += 1;
                }
            }
            if r["reducedOfficial"] != r["reduced"] {
                official_wrong += 1;
            }
        }
        report.push(format!(
            "{:20} official compactEvents: meaning changed {official_wrong}/{OFFICIAL_PIPELINE_SEEDS}, verification broken {official_unverified}; ours: 0, 0",
            profile.name()
        ));
    }
    eprintln!("{}", report.join("\n"));
}

/// `snapshot --runs N` (and every run restated) in the official pipeline:
/// the official reducer sees the original's conversation, and the official
/// verifier accepts the output whenever it accepts the original.
#[test]
fn snapshot_of_the_last_runs_reduces_and_verifies_like_the_original_in_the_official_pipeline() {
    let mut report = Vec::new();
    for &profile in Profile::ALL {
        for last in [1, u64::MAX] {
            let cases = (0..OFFICIAL_PIPELINE_SEEDS / 2).filter_map(move |seed| {
                let events = stream(profile, seed);
                // Outside the guarantees when our reducer refuses the input.
                let ours =
                    compact_snapshot_last(events.clone(), &Conversation::default(), last).ok()?;
                Some((
                    json!({ "events": events, "ours": ours, "reduce": true, "verify": true }),
                    seed,
                ))
            });
            let mut checked = 0;
            oracle::run_each("compact.mjs", cases, |seed, r| {
                if r["reduced"].get("error").is_some() {
                    return;
                }
                assert_eq!(
                    r["reducedOurs"],
                    r["reduced"],
                    "{} seed {seed} --runs {last}: the official reducer sees another conversation",
                    profile.name()
                );
                if r["verified"] == json!(true) {
                    assert_eq!(
                        r["verifiedOurs"],
                        json!(true),
                        "{} seed {seed} --runs {last}: the official verifier rejects our output",
                        profile.name()
                    );
                }
                checked += 1;
            });
            report.push(format!(
                "{:20} --runs {last}: {checked} streams",
                profile.name()
            ));
        }
    }
    eprintln!("{}", report.join("\n"));
}
