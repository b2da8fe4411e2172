//! Robustness properties, in the spirit of the codec fuzz targets: arbitrary
//! text and arbitrary event sequences go through every reader of this crate
//! (envelope, typed model, run input, verifier, chunk expansion) and come
//! back as values or errors, never as a panic. Deeply nested documents that
//! `serde_json` accepts (127 levels inside an event) do not overflow the
//! stack either.

use agui_protocol::chunks::{ChunkExpander, expand_chunks};
use agui_protocol::model::{self, ReadMode, RunAgentInput};
use agui_protocol::verify::{Verifier, verify_all, verify_events};
use agui_protocol::{Event, EventType};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Every reader of one event; none may panic.
fn read_everything(event: &Event) {
    let _ = model::parse_event(event);
    let _ = model::read(event, 0, ReadMode::Strict);
    if let Ok(checked) = model::read(event, 0, ReadMode::Tolerant) {
        let _ = checked.event.to_value();
        let _ = checked.event.to_event();
    }
    // `Event::to_value` is not used here: see
    // `serde_json_private_number_keys_do_not_panic`.
    if let Ok(mut value) = serde_json::from_str(event.json()) {
        let _ = model::strip_legacy_event_nulls(&mut value);
    }
    let _ = verify_events(std::slice::from_ref(event));
    let _ = expand_chunks(std::slice::from_ref(event));
}

/// `{"type":ty, key:value...}` from JSON texts of the values.
fn object(ty: &str, fields: &[(&str, String)]) -> String {
    let mut text = format!("{{\"type\":{ty:?}");
    for (k, v) in fields {
        text.push_str(&format!(",{k:?}:{v}"));
    }
    text.push('}');
    text
}

/// Text that looks like an event often enough to reach the typed readers:
/// a known type and a few fields with arbitrary JSON-ish values.
fn eventish() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("-0.5e400".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just(r#"[{"op":"add","path":"/a","value":1}]"#.to_owned()),
        Just(r#"[{"id":"m","role":"user","content":[{"type":"image"}]}]"#.to_owned()),
        Just(r#"{"type":"success"}"#.to_owned()),
        "[a-z]{0,3}".prop_map(|s| format!("{s:?}")),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
    ];
    let key = prop::sample::select(vec![
        "messageId",
        "toolCallId",
        "toolCallName",
        "delta",
        "role",
        "content",
        "messages",
        "snapshot",
        "timestamp",
        "outcome",
        "input",
        "patch",
        "threadId",
        "runId",
        "parentRunId",
        "subagentRunId",
        "parentMessageId",
        "name",
        "value",
        "event",
        "rawEvent",
        "result",
        "interrupts",
        "usage",
    ]);
    let ty = prop::sample::select(
        EventType::KNOWN
            .iter()
            .map(|t| t.as_str().to_owned())
            .chain(["NOT_A_TYPE".to_owned()])
            .collect::<Vec<_>>(),
    );
    (ty, prop::collection::vec((key, value), 0..6)).prop_map(|(ty, fields)| object(&ty, &fields))
}

/// One event of a small world: few ids, so that starts, contents and ends
/// of messages, tool calls, steps, runs and subagents collide in every order.
fn world_event() -> impl Strategy<Value = String> {
    let id = prop_oneof![
        Just("\"a\"".to_owned()),
        Just("\"b\"".to_owned()),
        Just("null".to_owned()),
        Just("7".to_owned()),
    ];
    let ty = prop::sample::select(
        EventType::KNOWN
            .iter()
            .map(|t| t.as_str().to_owned())
            .collect::<Vec<_>>(),
    );
    let key = prop::sample::select(vec![
        "messageId",
        "toolCallId",
        "threadId",
        "runId",
        "parentRunId",
        "subagentRunId",
        "stepName",
        "toolCallName",
        "delta",
        "parentMessageId",
        "name",
    ]);
    (ty, prop::collection::vec((key, id), 0..5)).prop_map(|(ty, fields)| object(&ty, &fields))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        if let Ok(event) = Event::from_json(&text) {
            read_everything(&event);
        }
        let _ = RunAgentInput::from_json(&text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(event) = Event::from_json(&text) {
            read_everything(&event);
        }
        let _ = RunAgentInput::from_json(&text);
    }

    #[test]
    fn eventish_text_never_panics(text in eventish()) {
        let event = Event::from_json(&text).unwrap();
        read_everything(&event);
        let _ = RunAgentInput::from_json(&text);
    }

    #[test]
    fn arbitrary_sequences_never_panic(texts in prop::collection::vec(world_event(), 0..40)) {
        let events: Vec<Event> = texts.iter().map(|t| Event::from_json(t).unwrap()).collect();
        let _ = verify_events(&events);
        let _ = verify_all(&events);
        let mut streaming = Verifier::collecting();
        for e in &events {
            let _ = streaming.push_expanded(e);
        }
        let _ = expand_chunks(&events);
        let mut expander = ChunkExpander::new();
        for e in &events {
            if let Ok(out) = expander.push(e) {
                let _ = verify_events(&out);
            }
        }
        let _ = expander.finish();
    }
}

/// `depth` nested arrays around `inner`.
fn nest(depth: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
}

/// `depth` nested `{"a":...}` objects around `inner`.
fn nest_objects(depth: usize, inner: &str) -> String {
    format!("{}{inner}{}", "{\"a\":".repeat(depth), "}".repeat(depth))
}

#[test]
fn deep_documents_are_read_without_overflow() {
    // 1 level for the event object, 126 inside: the deepest the envelope takes
    // (`agui_protocol::MAX_DEPTH`, what a full serde_json parse accepts).
    for deep in [nest(126, "1"), nest_objects(126, "null")] {
        let texts = [
            format!(r#"{{"type":"STATE_SNAPSHOT","snapshot":{deep}}}"#),
            format!(r#"{{"type":"CUSTOM","name":"n","value":{deep}}}"#),
            format!(r#"{{"type":"RAW","event":{deep},"rawEvent":{deep}}}"#),
            format!(r#"{{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"d","x":{deep}}}"#),
            format!(r#"{{"type":"TOOL_CALL_CHUNK","toolCallId":{deep}}}"#),
            format!(r#"{{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{deep}}}"#),
            format!(r#"{{"type":"NOT_A_TYPE","x":{deep}}}"#),
        ];
        for text in &texts {
            let event = Event::from_json(text).unwrap();
            read_everything(&event);
        }
        let input = format!(r#"{{"threadId":"t","runId":"r","messages":[],"state":{deep}}}"#);
        let _ = RunAgentInput::from_json(&input);
    }
    // Deeper: the run input is a syntax error, and the envelope refuses the
    // event with a clear error, so no reader ever sees it.
    for depth in [127, 100_000] {
        let too_deep = format!(
            r#"{{"threadId":"t","runId":"r","messages":[],"state":{}}}"#,
            nest(depth, "1")
        );
        assert!(RunAgentInput::from_json(&too_deep).is_err());
        for text in [
            format!(
                r#"{{"type":"CUSTOM","name":"n","value":{}}}"#,
                nest(depth, "1")
            ),
            format!(
                r#"{{"type":"NOT_A_TYPE","x":{}}}"#,
                nest_objects(depth, "1")
            ),
            format!(
                r#"{{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"f","x":{}}}"#,
                nest(depth, "1")
            ),
        ] {
            assert!(
                matches!(
                    Event::from_json(&text),
                    Err(agui_protocol::EnvelopeError::TooDeep { .. })
                ),
                "{depth}"
            );
        }
    }
}

/// Seconds `f` takes on a document with `n` extra keys.
fn timed(n: usize, f: impl Fn(&str)) -> f64 {
    let mut extra = String::new();
    for i in 0..n {
        extra.push_str(&format!(",\"k{i}\":0"));
    }
    let started = std::time::Instant::now();
    f(&extra);
    started.elapsed().as_secs_f64()
}

/// Events with many keys are read in time linear in their size (the codec
/// accepts events of up to 64 MiB): no check compares every pair of keys.
/// A million keys take a few seconds here (debug build); a pairwise reader
/// would make 5 * 10^11 comparisons, hours. The bound, 60 s, separates the
/// two however loaded the machine is, so the test measures the complexity,
/// not the speed.
#[test]
fn wide_events_are_read_in_linear_time() {
    let read = |extra: &str| {
        let chunk =
            format!(r#"{{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"d"{extra}}}"#);
        let events = [
            Event::from_json(r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#).unwrap(),
            Event::from_json(&chunk).unwrap(),
        ];
        assert_eq!(expand_chunks(&events).unwrap().len(), 3);
        verify_events(&events).unwrap();
        model::parse_event(&events[1]).unwrap();
    };
    let took = timed(1_000_000, read);
    assert!(took < 60.0, "a million keys took {took:.1}s");
}

/// With `arbitrary_precision`, serde_json reads an object whose first key is
/// `$serde_json::private::Number` as a number and fails when the member is
/// not a numeric string. The envelope accepts such text (it is valid JSON),
/// so every reader of an event must handle the failed parse.
#[test]
fn serde_json_private_number_keys_do_not_panic() {
    let odd = r#"{"$serde_json::private::Number":5}"#;
    assert!(serde_json::from_str::<serde_json::Value>(odd).is_err());
    let texts = [
        format!(r#"{{"type":"NOT_A_TYPE","x":{odd}}}"#),
        format!(r#"{{"type":"CUSTOM","name":"n","value":{odd}}}"#),
        format!(r#"{{"type":"MESSAGES_SNAPSHOT","messages":[{odd}]}}"#),
        format!(r#"{{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"d","x":{odd}}}"#),
        format!(r#"{{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{odd}}}"#),
    ];
    // A full parse would turn such an object into a number, so the envelope
    // refuses it: an Event always reads back exactly.
    for text in &texts {
        assert!(
            matches!(
                Event::from_json(text),
                Err(agui_protocol::EnvelopeError::ReservedKey)
            ),
            "{text}"
        );
    }
    let input = format!(r#"{{"threadId":"t","runId":"r","messages":[],"state":{odd}}}"#);
    assert!(RunAgentInput::from_json(&input).is_err());
}
