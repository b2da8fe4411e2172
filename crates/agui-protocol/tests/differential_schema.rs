//! Strict reading against the official zod schemas of `@ag-ui/core` 1.0.0
//! (`oracle/schema.mjs`: `EventSchemas.safeParse`, `RunAgentInputSchema.safeParse`).
//!
//! - Every golden fixture of a known type is accepted by both; unknown types
//!   are rejected by zod and kept opaque by us (a deliberate difference).
//! - Every invalid fixture and every generated single-field breakage is
//!   rejected by both, and zod reports our path or a prefix of it (zod stops
//!   at a plain union such as string-or-parts `content`; we go further in).
//! - Generated valid events and run inputs are accepted by both.
//! - Arbitrary objects under a known type get the same verdict from both.
//! - The example conversation passes the official client's verifier.

mod support;

use std::path::{Path, PathBuf};

use agui_protocol::model::{self, FieldPath, FromValue, PathSegment, RunAgentInput};
use agui_protocol::{Event, EventType};
use agui_testkit::oracle;
use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Our verdict on one case: `Ok` or the error's path.
fn ours(kind: &str, value: &Value) -> Result<(), FieldPath> {
    if kind == "input" {
        return RunAgentInput::from_value(value.clone())
            .map(|_| ())
            .map_err(|e| e.path().clone());
    }
    let event = Event::from_serialize(value).expect("cases are event envelopes");
    model::parse_event(&event)
        .map(|_| ())
        .map_err(|e| e.path().clone())
}

/// zod's verdict on each case: `Ok` or every issue path.
fn zod(cases: &[(&str, Value)]) -> Vec<Result<(), Vec<Vec<Value>>>> {
    let input: Vec<Value> = cases
        .iter()
        .map(|(kind, value)| json!({"kind": kind, "value": value}))
        .collect();
    let out = oracle::run("schema.mjs", &Value::Array(input));
    let results = out.as_array().expect("an array of results");
    assert_eq!(results.len(), cases.len());
    results
        .iter()
        .map(|r| {
            if r["ok"] == json!(true) {
                Ok(())
            } else {
                let paths = r["paths"].as_array().expect("paths");
                Err(paths
                    .iter()
                    .map(|p| p.as_array().expect("a path").clone())
                    .collect())
            }
        })
        .collect()
}

fn as_json_path(path: &FieldPath) -> Vec<Value> {
    path.segments()
        .iter()
        .map(|s| match s {
            PathSegment::Key(k) => json!(k),
            PathSegment::Index(i) => json!(i),
        })
        .collect()
}

/// Both reject, and one of zod's issue paths is our path or a prefix of it.
fn assert_same_rejection(
    what: &str,
    value: &Value,
    ours: Result<(), FieldPath>,
    zod: &Result<(), Vec<Vec<Value>>>,
) {
    let path = match ours {
        Ok(()) => panic!("{what}: we accept what must be rejected: {value}"),
        Err(p) => p,
    };
    let zod_paths = match zod {
        Ok(()) => panic!("{what}: zod accepts what we reject at {path}: {value}"),
        Err(paths) => paths,
    };
    let mine = as_json_path(&path);
    assert!(
        zod_paths.iter().any(|z| mine.starts_with(z)),
        "{what}: we say {path}, zod says {zod_paths:?}: {value}"
    );
}

fn sample<T: std::fmt::Debug>(strategy: BoxedStrategy<T>, n: usize, seed: u8) -> Vec<T> {
    let mut seed_bytes = [7u8; 32];
    seed_bytes[0] = seed;
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        // A filter may give up on a draw; draw again.
        if let Ok(tree) = strategy.new_tree(&mut runner) {
            out.push(tree.current());
        }
    }
    out
}

fn golden_events() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(workspace().join("fixtures/golden"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let items: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for (i, v) in items.into_iter().enumerate() {
            out.push((format!("{name} #{i}"), v));
        }
    }
    out
}

#[test]
fn golden_fixtures_get_the_official_verdict() {
    let golden = golden_events();
    let cases: Vec<(&str, Value)> = golden.iter().map(|(_, v)| ("event", v.clone())).collect();
    let verdicts = zod(&cases);
    for ((name, value), verdict) in golden.iter().zip(&verdicts) {
        let ty = EventType::from_wire(value["type"].as_str().unwrap());
        assert!(ours("event", value).is_ok(), "{name}");
        if ty.is_known() {
            assert!(verdict.is_ok(), "{name}: zod rejects {verdict:?}");
        } else {
            assert!(verdict.is_err(), "{name}: zod accepts an unknown type");
        }
    }
}

#[test]
fn invalid_fixtures_are_rejected_by_both_at_the_same_place() {
    let mut cases = Vec::new();
    for (file, kind, key) in [
        ("events.json", "event", "event"),
        ("run_agent_input.json", "input", "input"),
    ] {
        let path = workspace().join("fixtures/invalid").join(file);
        let items: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for item in items {
            cases.push((
                item["case"].as_str().unwrap().to_owned(),
                kind,
                item[key].clone(),
            ));
        }
    }
    let verdicts = zod(&cases
        .iter()
        .map(|(_, k, v)| (*k, v.clone()))
        .collect::<Vec<_>>());
    for ((name, kind, value), verdict) in cases.iter().zip(&verdicts) {
        assert_same_rejection(name, value, ours(kind, value), verdict);
    }
}

#[test]
fn generated_valid_events_and_inputs_are_accepted_by_both() {
    let events = sample(support::known_event(), 400, 1);
    let inputs = sample(support::value(&support::INPUT, 0), 100, 2);
    let cases: Vec<(&str, Value)> = events
        .into_iter()
        .map(|v| ("event", v))
        .chain(inputs.into_iter().map(|v| ("input", v)))
        .collect();
    let verdicts = zod(&cases);
    for ((kind, value), verdict) in cases.iter().zip(&verdicts) {
        assert!(ours(kind, value).is_ok(), "we reject {value}");
        assert!(verdict.is_ok(), "zod rejects {value}: {verdict:?}");
    }
}

#[test]
fn generated_breakages_are_rejected_by_both_at_the_same_place() {
    let broken = sample(support::broken_event(), 500, 3);
    let cases: Vec<(&str, Value)> = broken
        .iter()
        .map(|(_, _, b)| ("event", b.clone()))
        .collect();
    let verdicts = zod(&cases);
    for ((_, site, value), verdict) in broken.iter().zip(&verdicts) {
        let what = format!("{site:?}");
        assert_same_rejection(&what, value, ours("event", value), verdict);
    }
}

#[test]
fn generated_input_breakages_are_rejected_by_both_at_the_same_place() {
    let broken = sample(support::broken_input(), 200, 5);
    let cases: Vec<(&str, Value)> = broken
        .iter()
        .map(|(_, _, b)| ("input", b.clone()))
        .collect();
    let verdicts = zod(&cases);
    for ((_, site, value), verdict) in broken.iter().zip(&verdicts) {
        let what = format!("{site:?}");
        assert_same_rejection(&what, value, ours("input", value), verdict);
    }
}

#[test]
fn arbitrary_objects_under_known_types_get_the_same_verdict() {
    let keys = prop_keys();
    let strategy = (
        proptest::sample::select(EventType::KNOWN.to_vec()),
        proptest::collection::vec((keys, support::json()), 0..6),
    )
        .prop_map(|(ty, fields)| {
            let mut map = serde_json::Map::new();
            map.insert("type".into(), json!(ty.as_str()));
            for (k, v) in fields {
                if k != "type" {
                    map.insert(k, v);
                }
            }
            Value::Object(map)
        })
        .boxed();
    let values = sample(strategy, 800, 4);
    let cases: Vec<(&str, Value)> = values.iter().map(|v| ("event", v.clone())).collect();
    let verdicts = zod(&cases);
    let mut accepted = 0;
    for (value, verdict) in values.iter().zip(&verdicts) {
        match (ours("event", value), verdict) {
            (Ok(()), Ok(())) => accepted += 1,
            (Err(_), Err(_)) => {}
            (mine, theirs) => panic!("verdicts differ: ours {mine:?}, zod {theirs:?}: {value}"),
        }
    }
    // Some draws must be valid, or the comparison says little.
    assert!(accepted > 20, "only {accepted} accepted");
}

fn prop_keys() -> BoxedStrategy<String> {
    proptest::prop_oneof![
        proptest::sample::select(vec![
            "messageId",
            "delta",
            "role",
            "name",
            "stepName",
            "threadId",
            "runId",
            "toolCallId",
            "toolCallName",
            "snapshot",
            "event",
            "value",
            "timestamp",
            "metadata",
            "rawEvent",
            "subagentRunId",
            "outcome",
            "result",
            "message",
            "content",
            "activityType",
            "patch",
            "messages",
            "usage",
            "subtype",
            "entityId",
            "encryptedValue",
            "replace",
            "source",
        ])
        .prop_map(str::to_owned),
        "[a-z]{1,5}",
    ]
    .boxed()
}

#[test]
fn the_example_conversation_passes_the_official_verifier() {
    let text =
        std::fs::read_to_string(workspace().join("fixtures/examples/conversation.ndjson")).unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let n = events.len();
    let out = oracle::run("verify.mjs", &json!([events]));
    assert_eq!(out[0]["ok"], json!(true), "{out}");
    assert_eq!(out[0]["count"], json!(n));
}
