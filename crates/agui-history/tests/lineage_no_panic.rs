//! Robustness: arbitrary event sequences (runs that restart, repeat ids,
//! name missing, foreign or later parents, restate messages, carry odd
//! timestamps and outcomes) go through the run index, time travel and the
//! artifact exporter, and come back as values or errors, never as a panic.

use agui_history::artifact::{self, ExportOptions, Source};
use agui_history::lineage::{Lineage, RunIndex};
use agui_history::reduce::Conversation;
use agui_protocol::Event;
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const IDS: [&str; 4] = ["\"a\"", "\"b\"", "\"c\"", "null"];

/// One event of a small world where ids collide.
fn world_event() -> impl Strategy<Value = String> {
    let timestamp = prop_oneof![
        Just(String::new()),
        Just(r#","timestamp":1700000000000"#.to_owned()),
        Just(r#","timestamp":1.7e12"#.to_owned()),
        Just(r#","timestamp":-9007199254740991"#.to_owned()),
        Just(r#","timestamp":99999999999999999999"#.to_owned()),
        Just(r#","timestamp":"x""#.to_owned()),
        Just(r#","timestamp":null"#.to_owned()),
    ];
    let messages = prop::collection::vec(
        (
            prop::sample::select(IDS.to_vec()),
            prop::sample::select(vec!["user", "assistant", "tool", "reasoning", "x"]),
            prop::sample::select(vec![
                r#""hi""#,
                r#""""#,
                "null",
                r#"[{"type":"text","text":"t"}]"#,
                r#"[{"type":"image"}]"#,
                "7",
            ]),
        ),
        0..4,
    )
    .prop_map(|ms| {
        let items: Vec<String> = ms
            .into_iter()
            .map(|(id, role, content)| {
                format!(r#"{{"id":{id},"role":"{role}","content":{content}}}"#)
            })
            .collect();
        format!("[{}]", items.join(","))
    });
    let body = prop_oneof![
        (
            prop::sample::select(IDS.to_vec()),
            prop::sample::select(IDS.to_vec()),
            prop::option::of(prop::sample::select(IDS.to_vec())),
            messages.clone(),
        )
            .prop_map(|(thread, run, parent, messages)| {
                let parent = parent.map_or(String::new(), |p| format!(r#","parentRunId":{p}"#));
                format!(
                    r#""type":"RUN_STARTED","threadId":{thread},"runId":{run}{parent},"input":{{"threadId":{thread},"runId":{run},"messages":{messages}}}"#
                )
            }),
        prop::sample::select(vec![
            r#""type":"RUN_FINISHED","threadId":"a","runId":"a""#,
            r#""type":"RUN_FINISHED","threadId":"a","runId":"a","outcome":{"type":"interrupt"}"#,
            r#""type":"RUN_FINISHED","threadId":"a","runId":"a","outcome":{"type":"cancelled"}"#,
            r#""type":"RUN_FINISHED","outcome":7"#,
            r#""type":"RUN_ERROR","message":"boom","code":"c""#,
            r#""type":"RUN_ERROR","message":7"#,
            r#""type":"STATE_SNAPSHOT","snapshot":{"a":1}"#,
            r#""type":"STATE_DELTA","delta":[{"op":"replace","path":"/a","value":2}]"#,
            r#""type":"STATE_DELTA","delta":[{"op":"remove","path":"/zz"}]"#,
        ])
        .prop_map(str::to_owned),
        messages.prop_map(|m| format!(r#""type":"MESSAGES_SNAPSHOT","messages":{m}"#)),
        (
            prop::sample::select(vec![
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "TEXT_MESSAGE_CHUNK",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT",
                "TOOL_CALL_CHUNK",
                "REASONING_MESSAGE_START",
                "ACTIVITY_SNAPSHOT",
            ]),
            prop::sample::select(IDS.to_vec()),
        )
            .prop_map(|(ty, id)| {
                format!(
                    r#""type":"{ty}","messageId":{id},"toolCallId":{id},"parentMessageId":{id},"role":"assistant","delta":"d","toolCallName":"f","content":"c","activityType":"a""#
                )
            }),
    ];
    (body, timestamp).prop_map(|(body, ts)| format!("{{{body}{ts}}}"))
}

fn events(texts: &[String]) -> Vec<Event> {
    texts.iter().map(|t| Event::from_json(t).unwrap()).collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn lineage_of_arbitrary_logs_never_panics(texts in prop::collection::vec(world_event(), 0..30)) {
        let log = events(&texts);
        let mut incremental = RunIndex::new();
        for e in &log {
            let _ = incremental.push(e);
        }
        let Ok(index) = RunIndex::build(&log) else { return Ok(()) };
        let _ = index.depth_first();
        let _ = index.branches();
        let _ = index.threads();
        let runs: Vec<String> = index.runs().iter().map(|r| r.run_id.clone()).collect();
        let lineage = Lineage::with_index(&log, index).unwrap();
        for a in &runs {
            for b in &runs {
                let _ = lineage.index().divergence(a, b);
            }
            let _ = lineage.branch(a, None);
            let _ = lineage.branch(a, Some(0));
            let _ = lineage.branch(a, Some(usize::MAX));
            let _ = lineage.conversation_at(a, None, Conversation::default());
        }
        let _ = lineage.branch("missing", None);
    }

    #[test]
    fn artifact_export_of_arbitrary_logs_never_panics(texts in prop::collection::vec(world_event(), 0..30)) {
        let log = events(&texts);
        let Ok(index) = RunIndex::build(&log) else { return Ok(()) };
        for run in index.runs() {
            for source in [None, Some(Source::Snapshot), Some(Source::Derived)] {
                let options = ExportOptions {
                    source,
                    started_at: Some("2024-01-01T00:00:00Z".to_owned()),
                    finished_at: None,
                };
                if let Ok(export) = artifact::export(&log, &run.run_id, &options) {
                    // Whatever is exported validates.
                    let text = serde_json::to_string(&export.artifact).unwrap();
                    prop_assert!(artifact::validate(&text).is_ok(), "{}", text);
                }
            }
        }
    }
}

/// Valid JSON that serde_json (with `arbitrary_precision`) cannot hold in a
/// `Value` (an object keyed `$serde_json::private::Number`) never reaches the
/// history core: the envelope refuses it with a clear error.
#[test]
fn serde_json_private_number_keys_are_refused_before_lineage() {
    let odd = r#"{"$serde_json::private::Number":5}"#;
    for text in [
        format!(r#"{{"type":"MESSAGES_SNAPSHOT","messages":[{odd}]}}"#),
        format!(r#"{{"type":"RUN_ERROR","message":"m","x":{odd},"timestamp":1}}"#),
    ] {
        assert!(matches!(
            Event::from_json(&text),
            Err(agui_protocol::EnvelopeError::ReservedKey)
        ));
    }
}

/// Events nested as deep as the envelope takes (`agui_protocol::MAX_DEPTH`)
/// do not crash lineage, time travel or export.
#[test]
fn the_deepest_events_do_not_panic() {
    // RUN_STARTED > input > messages > message > x: 5 levels before `deep`.
    let levels = agui_protocol::MAX_DEPTH - 5;
    let deep = format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
    let log = events(&[
        format!(
            r#"{{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{{"threadId":"t","runId":"r","messages":[{{"id":"m","x":{deep}}}]}}}}"#
        ),
        format!(r#"{{"type":"MESSAGES_SNAPSHOT","messages":[{{"id":"m","x":{deep}}}]}}"#),
        format!(r#"{{"type":"RUN_ERROR","message":"m","x":{deep},"timestamp":1}}"#),
    ]);
    check_run_r(&log);
}

/// Indexes `log`, travels to run `r` and exports it from every source.
fn check_run_r(log: &[Event]) {
    let lineage = Lineage::new(log).unwrap();
    let _ = lineage.branch("r", None);
    let _ = lineage.conversation_at("r", None, Conversation::default());
    for source in [None, Some(Source::Snapshot), Some(Source::Derived)] {
        let options = ExportOptions {
            source,
            ..ExportOptions::default()
        };
        let _ = artifact::export(log, "r", &options);
    }
}
