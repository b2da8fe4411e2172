//! Small, valid AG-UI event sequences for the conformance suite, the crash
//! harness and the benchmark.

use agui_protocol::Event;
use serde_json::json;

/// Builds an event from a JSON object with a string `type` (as every
/// function here does).
///
/// # Panics
/// When `value` is not such an object: callers pass literals.
pub fn event(value: serde_json::Value) -> Event {
    Event::from_serialize(&value).expect("sample events are objects with a string type")
}

/// `RUN_STARTED`, with an optional explicit parent.
pub fn run_started(thread: &str, run: &str, parent: Option<&str>) -> Event {
    match parent {
        Some(p) => {
            event(json!({"type":"RUN_STARTED","threadId":thread,"runId":run,"parentRunId":p}))
        }
        None => event(json!({"type":"RUN_STARTED","threadId":thread,"runId":run})),
    }
}

/// `RUN_FINISHED`.
pub fn run_finished(thread: &str, run: &str) -> Event {
    event(json!({"type":"RUN_FINISHED","threadId":thread,"runId":run}))
}

/// `RUN_ERROR`.
pub fn run_error(message: &str) -> Event {
    event(json!({"type":"RUN_ERROR","message":message}))
}

/// One assistant text message streamed in `chunks` deltas.
pub fn text_message(id: &str, text: &str, chunks: usize) -> Vec<Event> {
    let mut out = vec![event(
        json!({"type":"TEXT_MESSAGE_START","messageId":id,"role":"assistant"}),
    )];
    let chars: Vec<char> = text.chars().collect();
    let per = chars.len().div_ceil(chunks.max(1)).max(1);
    for piece in chars.chunks(per) {
        let delta: String = piece.iter().collect();
        out.push(event(
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":id,"delta":delta}),
        ));
    }
    out.push(event(json!({"type":"TEXT_MESSAGE_END","messageId":id})));
    out
}

/// `STATE_SNAPSHOT`.
pub fn state_snapshot(state: serde_json::Value) -> Event {
    event(json!({"type":"STATE_SNAPSHOT","snapshot":state}))
}

/// A complete run: start, one message, a state snapshot, finish.
pub fn full_run(thread: &str, run: &str, parent: Option<&str>, text: &str) -> Vec<Event> {
    let mut out = vec![run_started(thread, run, parent)];
    out.extend(text_message(&format!("{run}-msg"), text, 3));
    out.push(state_snapshot(json!({"lastRun": run})));
    out.push(run_finished(thread, run));
    out
}

/// A realistic run of exactly `n` events (at least 3): several assistant messages streamed in
/// small deltas, tool calls with results, state deltas, steps. Sizes and
/// shapes follow typical agent traffic (mean near 150 bytes per event).
pub fn realistic_run(thread: &str, run: &str, parent: Option<&str>, n: usize) -> Vec<Event> {
    const WORDS: &[&str] = &[
        "the ",
        "agent ",
        "reads ",
        "your ",
        "files ",
        "and ",
        "then ",
        "writes ",
        "a ",
        "short ",
        "summary ",
        "of ",
        "what ",
        "changed ",
        "since ",
        "yesterday, ",
        "with ",
        "links ",
        "to ",
        "each ",
        "commit. ",
    ];
    let mut out = vec![
        run_started(thread, run, parent),
        state_snapshot(json!({"progress": 0, "files": ["src/lib.rs"]})),
    ];
    let mut i = 0usize;
    let mut msg = 0usize;
    // A message block is at most 22 events; fill the rest with state deltas.
    while out.len() + 24 < n {
        msg += 1;
        let step = format!("step-{msg}");
        out.push(event(json!({"type":"STEP_STARTED","stepName":step})));
        if msg.is_multiple_of(3) {
            let call = format!("{run}-call-{msg}");
            out.push(event(json!({"type":"TOOL_CALL_START","toolCallId":call,"toolCallName":"search_files","parentMessageId":format!("{run}-m{msg}")})));
            out.push(event(json!({"type":"TOOL_CALL_ARGS","toolCallId":call,"delta":"{\"query\":\"changes since yesterday\",\"limit\":20}"})));
            out.push(event(json!({"type":"TOOL_CALL_END","toolCallId":call})));
            out.push(event(json!({"type":"TOOL_CALL_RESULT","messageId":format!("{run}-r{msg}"),"toolCallId":call,"content":"[\"src/lib.rs\",\"src/main.rs\",\"README.md\"]","role":"tool"})));
        }
        let id = format!("{run}-m{msg}");
        out.push(event(
            json!({"type":"TEXT_MESSAGE_START","messageId":id,"role":"assistant"}),
        ));
        for _ in 0..12 {
            let delta: String = (0..4).map(|k| WORDS[(i + k * 7) % WORDS.len()]).collect();
            i += 1;
            out.push(event(
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":id,"delta":delta}),
            ));
        }
        out.push(event(json!({"type":"TEXT_MESSAGE_END","messageId":id})));
        out.push(event(
            json!({"type":"STATE_DELTA","delta":[{"op":"add","path":"/progress","value":msg}]}),
        ));
        out.push(event(json!({"type":"STEP_FINISHED","stepName":step})));
    }
    while out.len() + 1 < n {
        msg += 1;
        out.push(event(
            json!({"type":"STATE_DELTA","delta":[{"op":"add","path":"/progress","value":msg}]}),
        ));
    }
    out.push(run_finished(thread, run));
    out
}
