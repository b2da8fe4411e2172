//! Inputs on which a compaction guarantee is known not to hold yet. Each is
//! kept as an ignored test so it is run on demand (`--ignored`) and cannot be
//! forgotten; the property tests exclude exactly this shape (see
//! `compact_props.rs`, `chunk_reuses_a_started_id`).

use agui_history::compact::{Mode, compact};
use agui_history::reduce::{Conversation, reduce};
use agui_protocol::Event;

fn same_meaning(input: &[Event]) -> bool {
    let start = Conversation::default();
    let out = compact(input.iter().cloned(), Mode::Deltas, &start, None).unwrap();
    reduce(input, start.clone()).ok() == reduce(&out, start).ok()
}

/// The minimal input `compact_props` found at 10,000 cases.
fn found(chunk_delta: &str) -> Vec<Event> {
    let chunk = format!(
        r#"{{"type":"TOOL_CALL_CHUNK","toolCallId":"a","toolCallName":"h","delta":{chunk_delta},"metadata":{{"k":0}}}}"#
    );
    let texts = [
        r#"{"type":"RUN_STARTED","threadId":"t","runId":"r0","input":{"threadId":"t","runId":"r0","messages":[{"id":"a","role":"user","content":"hi"}],"tools":[],"context":[],"state":{},"forwardedProps":{}},"metadata":{"k":0}}"#,
        r#"{"type":"TOOL_CALL_START","toolCallId":"a","toolCallName":"f0","parentMessageId":7}"#,
        &chunk,
        r#"{"type":"STATE_SNAPSHOT","snapshot":{"n":0},"metadata":{"k":0}}"#,
        r#"{"type":"ACTIVITY_SNAPSHOT","messageId":7,"activityType":"plan","content":{"s":0},"metadata":{"k":0}}"#,
        &chunk,
    ];
    texts.iter().map(|t| Event::from_json(t).unwrap()).collect()
}

/// A tool call re-opened by TOOL_CALL_CHUNKs around a state window and an
/// ACTIVITY_SNAPSHOT whose (numeric, schema-invalid) id equals the tool
/// call's `parentMessageId`: `deltas` mode loses the assistant message.
#[test]
#[ignore = "known gap in deltas mode, found by compact_props at 10,000 cases"]
fn chunks_around_a_state_window_and_an_activity_snapshot() {
    assert!(same_meaning(&found("7")));
}

/// The same with string deltas fails too: the schema-invalid numbers are not
/// the cause; a chunk re-opening a START-opened tool call is.
#[test]
#[ignore = "known gap in deltas mode (string variant)"]
fn the_same_with_string_deltas() {
    assert!(same_meaning(&found(r#""7""#)));
}
