//! The check of the `run_input` fuzz target, shared with its regression
//! replay (`crates/agui-server/tests/fuzz_regressions.rs`).
//!
//! Fuzzes the gateway's `RunAgentInput` reading and the server-session
//! merge: no panic; a body the gateway accepts is forwarded as JSON it
//! accepts again with the same ids; merging a stored conversation keeps
//! every client message (the client's version wins), keeps message ids
//! unique when they were unique on each side, and yields an input the
//! gateway still accepts; the in-place read of the stored conversation
//! (`merge::History`) agrees with a full parse; the recorded (normalized)
//! messages rebuild the forwarded ones.
//!
//! Input: `BODY \0 STORED` where STORED is a JSON `{messages, state}` (or
//! anything: garbage there is skipped, as a conversation would never be).

use std::collections::HashSet;
use std::sync::Arc;

use agui_server::merge::{History, Messages, split};
use serde_json::Value;

/// Panics when the property does not hold for `data`.
pub fn check(data: &[u8]) {
    let (body, stored) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    // Whatever the stored text, reading it in place never panics.
    if let Ok(text) = std::str::from_utf8(stored) {
        let _ = History::read(Arc::new(text.to_owned()));
        let _ = split(text);
    }
    let Ok(input) = agui_server::input::parse(body) else {
        return;
    };
    let again = agui_server::input::parse(input.to_json().as_bytes())
        .expect("an accepted input, forwarded, is accepted again");
    assert_eq!(again.thread_id, input.thread_id);
    assert_eq!(again.run_id, input.run_id);
    assert_eq!(again.parent_run_id, input.parent_run_id);

    let Ok(conv) = serde_json::from_slice::<Value>(stored) else {
        return;
    };
    let Some(stored_msgs) = conv.get("messages").and_then(Value::as_array).cloned() else {
        return;
    };
    // The in-place read agrees with a full parse: each message's slice is
    // that message, its id the parsed id, and the state the parsed state.
    let text = std::str::from_utf8(stored).expect("JSON is UTF-8");
    let history = History::read(Arc::new(text.to_owned()))
        .expect("a conversation serde_json reads is read in place too");
    assert_eq!(history.len(), stored_msgs.len());
    for (i, m) in stored_msgs.iter().enumerate() {
        let slice: Value = serde_json::from_str(history.message(i)).expect("a message slice");
        assert_eq!(&slice, m, "message {i} was sliced wrong");
        assert_eq!(
            history.id(i),
            m.get("id").and_then(Value::as_str),
            "message {i}'s id"
        );
    }
    let state: Option<Value> = history
        .state()
        .map(|s| serde_json::from_str(s).expect("state"));
    assert_eq!(
        state.as_ref(),
        conv.get("state"),
        "the state was sliced wrong"
    );
    // So does the split `connect` serves its snapshots from.
    let (messages, state) = split(text).expect("a conversation serde_json reads is split too");
    let messages: Value = serde_json::from_str(messages).expect("split messages");
    assert_eq!(Some(&messages), conv.get("messages"), "split messages");
    let state: Option<Value> = state.map(|s| serde_json::from_str(s).expect("split state"));
    assert_eq!(state.as_ref(), conv.get("state"), "split state");

    let client: Vec<Value> = input.messages().to_vec();
    let id = |m: &Value| m.get("id").and_then(Value::as_str).map(str::to_owned);
    let unique = |ms: &[Value]| {
        let ids: Vec<String> = ms.iter().filter_map(id).collect();
        ids.len() == ids.iter().collect::<HashSet<_>>().len()
    };
    let both_unique = unique(&client) && unique(&stored_msgs);
    let msgs = Messages::new(&history, &client);
    let merged = msgs.merge(&msgs.client());
    let merged_json = msgs.to_json(&merged);
    let merged_values: Vec<Value> = serde_json::from_str(&merged_json).expect("merged JSON");
    for m in &client {
        assert!(
            merged_values.contains(m),
            "a client message was lost in the merge"
        );
    }
    if both_unique {
        assert!(unique(&merged_values), "the merge duplicated a message id");
    }
    // What a run records rebuilds what it forwarded (or is all of it).
    let recorded = msgs.normalize(&merged);
    if recorded != merged {
        let rebuilt = msgs.merge(&recorded);
        assert_eq!(
            rebuilt.len(),
            merged.len(),
            "normalized messages do not rebuild"
        );
        for (a, b) in rebuilt.iter().zip(&merged) {
            assert!(msgs.same(*a, *b), "normalized messages do not rebuild");
        }
    }
    // Stored messages without an id or role make an input the gateway
    // would refuse from a client; with well-formed stored messages the
    // merged input must be accepted again.
    let well_formed = stored_msgs.iter().all(|m| {
        m.get("id").is_some_and(Value::is_string) && m.get("role").is_some_and(Value::is_string)
    });
    if well_formed {
        let mut replace = vec![("messages", merged_json.as_str())];
        replace.extend(history.state().map(|s| ("state", s)));
        agui_server::input::parse(input.to_json_with(&replace).as_bytes())
            .expect("a merged input is accepted again");
    }
}
