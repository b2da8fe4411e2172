//! `fixtures/examples/conversation.ndjson`: a realistic two-run conversation
//! that every tool of the workspace can be pointed at. It must read strictly,
//! round-trip, and tell the story it claims to tell.

use std::path::Path;

use agui_protocol::Event;
use agui_protocol::model::{self, Content, Message, ReadMode, TypedEvent};

fn conversation() -> Vec<Event> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/examples/conversation.ndjson");
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .enumerate()
        .map(|(i, line)| Event::from_json(line).unwrap_or_else(|e| panic!("line {}: {e}", i + 1)))
        .collect()
}

#[test]
fn the_conversation_reads_strictly_and_round_trips() {
    let events = conversation();
    let checked = model::read_all(&events, ReadMode::Strict).unwrap_or_else(|e| panic!("{e}"));
    for (event, c) in events.iter().zip(&checked) {
        assert!(!matches!(c.event, TypedEvent::Opaque(_)), "{event}");
        assert!(c.event.to_event().unwrap().same_value(event), "{event}");
    }
}

#[test]
fn the_conversation_has_two_linked_runs_a_streamed_tool_call_and_state() {
    let typed: Vec<TypedEvent> = conversation()
        .iter()
        .map(|e| model::parse_event(e).unwrap())
        .collect();
    let runs: Vec<_> = typed
        .iter()
        .filter_map(|e| match e {
            TypedEvent::RunStarted(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(runs.len(), 2);
    assert_eq!(
        runs[1].parent_run_id.as_deref(),
        Some(runs[0].run_id.as_str())
    );
    let finished = typed
        .iter()
        .filter(|e| matches!(e, TypedEvent::RunFinished(_)))
        .count();
    assert_eq!(finished, 2);

    // The user turn arrives in the input.
    let input = runs[0].input.as_ref().unwrap();
    assert!(
        matches!(&input.messages[0], Message::User(u) if matches!(u.content, Content::Text(_)))
    );

    // A tool call streamed in several ARGS fragments that assemble to JSON,
    // and answered by a TOOL_CALL_RESULT.
    let args: String = typed
        .iter()
        .filter_map(|e| match e {
            TypedEvent::ToolCallArgs(a) => Some(a.delta.as_str()),
            _ => None,
        })
        .collect();
    let parsed: serde_json::Value = serde_json::from_str(&args).unwrap();
    assert_eq!(parsed["city"], "Paris");
    let call_id = typed.iter().find_map(|e| match e {
        TypedEvent::ToolCallStart(s) => Some(s.tool_call_id.clone()),
        _ => None,
    });
    assert!(typed.iter().any(|e| matches!(e,
        TypedEvent::ToolCallResult(r) if Some(&r.tool_call_id) == call_id.as_ref())));

    // State: one snapshot, then deltas.
    assert!(
        typed
            .iter()
            .any(|e| matches!(e, TypedEvent::StateSnapshot(_)))
    );
    assert!(
        typed
            .iter()
            .filter(|e| matches!(e, TypedEvent::StateDelta(_)))
            .count()
            >= 2
    );
}
