//! The check of the `run_input` fuzz target, shared with its regression
//! replay (`crates/agui-server/tests/fuzz_regressions.rs`).
//!
//! Fuzzes the gateway's `RunAgentInput` reading and the server-session
//! merge: no panic; a body the gateway accepts is forwarded as JSON it
//! accepts again with the same ids; merging a stored conversation keeps
//! every client message (the client's version wins), keeps message ids
//! unique when they were unique on each side, and yields an input the
//! gateway still accepts.
//!
//! Input: `BODY \0 STORED` where STORED is a JSON `{messages, state}` (or
//! anything: garbage there is skipped, as a conversation would never be).

use std::collections::HashSet;

use serde_json::Value;

/// Panics when the property does not hold for `data`.
pub fn check(data: &[u8]) {
    let (body, stored) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let Ok(mut input) = agui_server::input::parse(body) else {
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
    let stored_msgs: Vec<Value> = conv
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let client: Vec<Value> = input.messages().to_vec();
    let id = |m: &Value| m.get("id").and_then(Value::as_str).map(str::to_owned);
    let unique = |ms: &[Value]| {
        let ids: Vec<String> = ms.iter().filter_map(id).collect();
        ids.len() == ids.iter().collect::<HashSet<_>>().len()
    };
    let both_unique = unique(&client) && unique(&stored_msgs);
    input.merge_stored(&stored_msgs, conv.get("state"));
    let merged = input.messages();
    for m in &client {
        assert!(merged.contains(m), "a client message was lost in the merge");
    }
    if both_unique {
        assert!(unique(merged), "the merge duplicated a message id");
    }
    // Stored messages without an id or role make an input the gateway
    // would refuse from a client; with well-formed stored messages the
    // merged input must be accepted again.
    let well_formed = stored_msgs.iter().all(|m| {
        m.get("id").is_some_and(Value::is_string) && m.get("role").is_some_and(Value::is_string)
    });
    if well_formed {
        agui_server::input::parse(input.to_json().as_bytes())
            .expect("a merged input is accepted again");
    }
}
