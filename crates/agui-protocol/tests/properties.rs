//! Property tests: generated events (every known type, random unknown keys at
//! every depth, nulls, big and precise numbers, any Unicode) and unknown event
//! types round-trip through the envelope and the typed model with equal JSON
//! values; a single broken field is reported at its exact path.

mod support;

use agui_protocol::Event;
use agui_protocol::model::{self, FromValue, ReadMode, RunAgentInput, TypedEvent};
use proptest::prelude::*;
use serde_json::Value;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn known_events_round_trip(value in support::known_event()) {
        let event = Event::from_serialize(&value).unwrap();
        prop_assert_eq!(&event.to_value(), &value);
        let typed = model::parse_event(&event)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{value}")))?;
        prop_assert!(!matches!(typed, TypedEvent::Opaque(_)));
        let ty = typed.event_type();
        prop_assert_eq!(ty.as_str(), value["type"].as_str().unwrap());
        // Serialize through serde_json's text and back.
        let text = serde_json::to_string(&typed).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(&back, &value);
        // And through a new envelope, read again: the same typed value.
        let again = typed.to_event().unwrap();
        prop_assert!(again.same_value(&event));
        prop_assert_eq!(model::parse_event(&again).unwrap(), typed);
    }

    #[test]
    fn unknown_event_types_are_kept_verbatim(value in support::unknown_event()) {
        let event = Event::from_serialize(&value).unwrap();
        for mode in [ReadMode::Strict, ReadMode::Tolerant] {
            let checked = model::read(&event, 0, mode).unwrap();
            prop_assert!(checked.diagnostic.is_none());
            match &checked.event {
                TypedEvent::Opaque(e) => prop_assert_eq!(e.json(), event.json()),
                other => prop_assert!(false, "typed an unknown type: {:?}", other),
            }
            prop_assert_eq!(&checked.event.to_value(), &value);
        }
    }

    #[test]
    fn one_broken_field_is_reported_at_its_path((_, site, broken) in support::broken_event()) {
        let event = Event::from_serialize(&broken).unwrap();
        let index = 7;
        let err = match model::read(&event, index, ReadMode::Strict) {
            Ok(c) => return Err(TestCaseError::fail(format!(
                "accepted after {site:?}: {broken}\n{:?}", c.event))),
            Err(e) => e,
        };
        prop_assert_eq!(err.index, index);
        prop_assert_eq!(err.error.path().to_string(), site.expected_path.clone(),
            "{} after {:?}", err, site);
        let shown = err.to_string();
        let prefix = format!("event #7: {}: {}: ", broken["type"].as_str().unwrap(), site.expected_path);
        prop_assert!(shown.starts_with(&prefix), "{}", shown);

        let tolerant = model::read(&event, index, ReadMode::Tolerant).unwrap();
        prop_assert_eq!(tolerant.diagnostic, Some(err));
        match tolerant.event {
            TypedEvent::Opaque(e) => prop_assert_eq!(e.json(), event.json()),
            other => prop_assert!(false, "typed a broken event: {:?}", other),
        }
    }

    #[test]
    fn run_inputs_round_trip(value in support::value(&support::INPUT, 0)) {
        let input = RunAgentInput::from_value(value.clone())
            .map_err(|e| TestCaseError::fail(format!("{e}\n{value}")))?;
        prop_assert_eq!(&input.to_value(), &value);
        let text = serde_json::to_string(&value).unwrap();
        let parsed: RunAgentInput = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(parsed, input);
    }

    #[test]
    fn one_broken_input_field_is_reported_at_its_path((_, site, broken) in support::broken_input()) {
        let err = match RunAgentInput::from_value(broken.clone()) {
            Ok(_) => return Err(TestCaseError::fail(format!("accepted after {site:?}: {broken}"))),
            Err(e) => e,
        };
        prop_assert_eq!(err.path().to_string(), site.expected_path.clone(), "{} after {:?}", err, site);
        prop_assert!(err.to_string().starts_with(&format!("{}: ", site.expected_path)), "{}", err);
    }

    /// Arbitrary objects under a known type: reading never panics, and
    /// whatever it accepts round-trips.
    #[test]
    fn arbitrary_objects_never_panic(
        ty in prop::sample::select(agui_protocol::EventType::KNOWN.to_vec()),
        fields in prop::collection::vec((
            prop_oneof![
                prop::sample::select(vec!["messageId", "delta", "role", "content", "messages",
                    "snapshot", "timestamp", "metadata", "outcome", "usage", "input", "patch",
                    "threadId", "runId", "toolCallId", "subagentRunId", "name", "value", "event"])
                    .prop_map(str::to_owned),
                "[a-z]{1,6}",
            ],
            support::json(),
        ), 0..8),
    ) {
        let mut map = serde_json::Map::new();
        map.insert("type".into(), Value::String(ty.as_str().to_owned()));
        for (k, v) in fields {
            if k != "type" {
                map.insert(k, v);
            }
        }
        let value = Value::Object(map);
        let event = Event::from_serialize(&value).unwrap();
        if let Ok(typed) = model::parse_event(&event) {
            prop_assert_eq!(typed.to_value(), value);
        }
        let tolerant = model::read(&event, 0, ReadMode::Tolerant).unwrap();
        prop_assert_eq!(tolerant.event.to_value(), event.to_value());
    }
}

/// Events of the streaming types `check_event` walks (and one it does not),
/// written as text: each member drawn from the fields it checks and their
/// wrong kinds, repeated keys, escaped keys, timestamps of every spelling.
fn streamed_event_text() -> impl Strategy<Value = String> {
    let ty = prop::sample::select(vec![
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "REASONING_MESSAGE_CONTENT",
        "TEXT_MESSAGE_START",
    ]);
    let key = prop::sample::select(vec![
        "messageId",
        "toolCallId",
        "delta",
        "subagentRunId",
        "rawEvent",
        "metadata",
        "timestamp",
        "role",
        "extra",
        "m\\u0065ssageId",
        "del\\u0074a",
    ]);
    let value = prop::sample::select(vec![
        "\"m1\"",
        "\"\"",
        "\"a\\\"b\\u00e9\"",
        "null",
        "false",
        "1",
        "-0",
        "1.5",
        "1.0",
        "1e3",
        "123456789012345",
        "-123456789012345",
        "1234567890123456",
        "9007199254740993",
        "{}",
        "{\"k\":[1,null]}",
        "[]",
        "\"assistant\"",
    ]);
    let members = prop::collection::vec((key, value), 0..7);
    (ty, members, any::<bool>()).prop_map(|(ty, members, well_formed)| {
        let mut text = format!("{{\"type\":\"{ty}\"");
        if well_formed {
            // Most cases start from a valid event, so the walk's `Ok` is
            // exercised as much as its doubts.
            let id = if ty.starts_with("TOOL") {
                "toolCallId"
            } else {
                "messageId"
            };
            text.push_str(&format!(",\"{id}\":\"x\",\"delta\":\"y\""));
        }
        for (k, v) in members {
            text.push_str(&format!(",\"{k}\":{v}"));
        }
        text.push('}');
        text
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..config() })]

    /// `check_event` gives `parse_event`'s verdict, and its error.
    #[test]
    fn check_event_agrees_with_parse_event(text in streamed_event_text()) {
        let event = Event::from_json(&text).unwrap();
        let fast = model::check_event(&event).map_err(|e| e.to_string());
        let full = model::parse_event(&event).map(|_| ()).map_err(|e| e.to_string());
        prop_assert_eq!(fast, full, "{}", text);
    }

    /// The generated valid events of every known type pass.
    #[test]
    fn check_event_accepts_generated_events(value in support::known_event()) {
        let event = Event::from_serialize(&value).unwrap();
        prop_assert!(model::check_event(&event).is_ok(), "{}", value);
    }

    /// Each generated event with one broken field fails, with the full
    /// parse's error.
    #[test]
    fn check_event_refuses_generated_breakages((_, _, broken) in support::broken_event()) {
        let event = Event::from_serialize(&broken).unwrap();
        let fast = model::check_event(&event).map_err(|e| e.to_string());
        let full = model::parse_event(&event).map(|_| ()).map_err(|e| e.to_string());
        prop_assert!(fast.is_err());
        prop_assert_eq!(fast, full);
    }
}
