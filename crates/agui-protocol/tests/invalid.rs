//! Negative fixtures (`fixtures/invalid/*.json`): each case names the field
//! path and the message strict reading must report; tolerant reading must
//! keep the same event opaque with that message as its diagnostic.

use std::path::Path;

use agui_protocol::Event;
use agui_protocol::model::{self, FromValue, ReadMode, RunAgentInput, TypedEvent};
use serde_json::Value;

fn cases(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/invalid")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cases: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert!(!cases.is_empty());
    cases
}

fn field<'a>(case: &'a Value, key: &str) -> &'a str {
    case[key]
        .as_str()
        .unwrap_or_else(|| panic!("case {case} has no string {key:?}"))
}

#[test]
fn invalid_events_fail_strictly_with_their_path_and_stay_opaque_when_tolerant() {
    let cases = cases("events.json");
    assert!(cases.len() >= 40, "{} cases", cases.len());
    for (i, case) in cases.iter().enumerate() {
        let name = field(case, "case");
        let event = Event::from_serialize(&case["event"]).unwrap();
        let index = i * 3 + 1;

        let err = model::read(&event, index, ReadMode::Strict)
            .expect_err(&format!("{name}: strict mode accepted it"));
        assert_eq!(err.index, index);
        assert_eq!(err.error.path().to_string(), field(case, "path"), "{name}");
        assert_eq!(err.error.to_string(), field(case, "message"), "{name}");
        assert_eq!(err.error.event_type(), Some(event.event_type()), "{name}");
        assert_eq!(
            err.to_string(),
            format!("event #{index}: {}", field(case, "message")),
            "{name}"
        );

        let kept = model::read(&event, index, ReadMode::Tolerant).unwrap();
        match &kept.event {
            TypedEvent::Opaque(e) => assert_eq!(e.json(), event.json(), "{name}"),
            other => panic!("{name}: tolerant mode typed it: {other:?}"),
        }
        assert_eq!(kept.diagnostic.as_ref(), Some(&err), "{name}");
    }
}

#[test]
fn a_damaged_stream_restores_as_far_as_it_goes_in_tolerant_mode() {
    let good = Event::from_json(r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#).unwrap();
    let bad = Event::from_json(r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m"}"#).unwrap();
    let unknown = Event::from_json(r#"{"type":"NEW_THING","x":1}"#).unwrap();
    let stream = [good.clone(), bad.clone(), unknown.clone(), good];

    let err = model::read_all(&stream, ReadMode::Strict).unwrap_err();
    assert_eq!(err.index, 1);
    assert_eq!(
        err.to_string(),
        "event #1: TEXT_MESSAGE_CONTENT: delta: required field is missing"
    );

    let checked = model::read_all(&stream, ReadMode::Tolerant).unwrap();
    assert_eq!(checked.len(), 4);
    assert!(matches!(checked[0].event, TypedEvent::TextMessageStart(_)));
    assert!(matches!(&checked[1].event, TypedEvent::Opaque(e) if e.json() == bad.json()));
    assert_eq!(checked[1].diagnostic.as_ref().map(|d| d.index), Some(1));
    // Unknown types are data, not damage: opaque and without a diagnostic.
    assert!(matches!(&checked[2].event, TypedEvent::Opaque(e) if e.json() == unknown.json()));
    assert!(checked[2].diagnostic.is_none());
    assert!(matches!(checked[3].event, TypedEvent::TextMessageStart(_)));
}

#[test]
fn invalid_run_inputs_name_the_field_path() {
    for case in cases("run_agent_input.json") {
        let name = field(&case, "case");
        let err = RunAgentInput::from_value(case["input"].clone())
            .expect_err(&format!("{name}: accepted"));
        assert_eq!(err.path().to_string(), field(&case, "path"), "{name}");
        assert_eq!(err.to_string(), field(&case, "message"), "{name}");
        assert_eq!(err.event_type(), None);
        // The same through the text entry point and through serde.
        let text = serde_json::to_string(&case["input"]).unwrap();
        let via_text = RunAgentInput::from_json(&text).unwrap_err();
        assert_eq!(via_text.to_string(), field(&case, "message"), "{name}");
        let via_serde = serde_json::from_str::<RunAgentInput>(&text).unwrap_err();
        assert!(
            via_serde.to_string().starts_with(field(&case, "message")),
            "{name}: {via_serde}"
        );
    }
    assert!(matches!(
        RunAgentInput::from_json("{\"threadId\":"),
        Err(model::InputError::Syntax(_))
    ));
}
