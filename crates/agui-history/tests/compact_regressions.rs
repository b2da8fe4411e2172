//! Inputs on which a compaction guarantee once failed, kept as regression
//! tests (the property tests in `compact_props.rs` found them).

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

/// A tool call re-opened by TOOL_CALL_CHUNKs around a state event and an
/// ACTIVITY_SNAPSHOT. Chunk expansion closes the chunk lane at the
/// STATE_SNAPSHOT, so the second chunk opens the call again; `deltas` mode
/// used to move the state event to the end of the run, past the second chunk,
/// which then continued the first one instead: the assistant message was lost.
/// State events now stay in place while a chunk lane may be open.
#[test]
fn chunks_around_a_state_window_and_an_activity_snapshot() {
    assert!(same_meaning(&found("7")));
}

/// The same with string deltas: the schema-invalid numbers were not the cause.
#[test]
fn the_same_with_string_deltas() {
    assert!(same_meaning(&found(r#""7""#)));
}

fn lines(texts: &[&str]) -> Vec<Event> {
    texts.iter().map(|t| Event::from_json(t).unwrap()).collect()
}

/// Two messages with one id, which a MESSAGES_SNAPSHOT turned into one
/// object held at two positions: a later event writing the first writes
/// both. A restated snapshot holds two separate objects, so `snapshot` mode
/// used to lose the second write; such a run is now kept in `deltas` form.
#[test]
fn a_snapshot_aliasing_two_messages_is_not_restated() {
    let input = lines(&[
        r#"{"type":"RUN_STARTED","threadId":"t","runId":"r0"}"#,
        r#"{"type":"ACTIVITY_SNAPSHOT","messageId":"c","activityType":"plan","content":{"s":0}}"#,
        r#"{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"g"}"#,
        r#"{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"c","role":"assistant","content":"snap"}]}"#,
        r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r0"}"#,
        r#"{"type":"REASONING_MESSAGE_START","messageId":"c","role":"reasoning","metadata":{"k":48}}"#,
    ]);
    for mode in [Mode::Snapshot, Mode::Latest] {
        let start = Conversation::default();
        let out = compact(input.iter().cloned(), mode, &start, None).unwrap();
        let expected = reduce(&input, start.clone()).unwrap();
        assert_eq!(reduce(&out, start).unwrap(), expected, "{mode}");
    }
}
