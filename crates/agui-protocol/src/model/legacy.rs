//! Pre-1.0 whole-`null` optional fields, read as absent.
//!
//! Producers older than 1.0 sent `null` in some optional slots that 1.0's
//! schema rejects. The official client converts them to absent fields at its
//! inbound boundary, before validation; a server that parses request bodies
//! or stored events itself has to do the same if it wants to accept them.
//! These functions do exactly that, on a JSON value, and report every key
//! they removed. They never touch opaque data (state, `value`, metadata
//! values, ...) and never remove anything but a bare `null` in the listed
//! positions, so a modern document passes through unchanged.
//!
//! Not converted (by design, as in the official client): `metadata: null` on
//! events, messages, tool calls, tools, interrupts and resume entries;
//! `subagentRunId: null`; `parentRunId: null`; `protocolVersion: null`.

use serde_json::{Map, Value};

use super::error::{FieldPath, PathSegment};

const MEDIA_PARTS: &[&str] = &["image", "audio", "video", "document"];

/// Removes the legacy nulls of a `RunAgentInput`: `forwardedProps`,
/// `tools[].parameters`, `resume[].payload`, and `metadata` on media parts
/// inside `messages[].content`. Returns the paths removed.
pub fn strip_legacy_input_nulls(input: &mut Value) -> Vec<FieldPath> {
    let mut removed = Vec::new();
    strip_input(input, &mut Vec::new(), &mut removed);
    removed
}

/// Removes the legacy nulls of one event: `rawEvent` (any type), `result`
/// (`RUN_FINISHED`, `SUBAGENT_FINISHED`), `outcome` (`RUN_FINISHED`),
/// `parentMessageId` (`TOOL_CALL_START`, `TOOL_CALL_CHUNK`), media-part
/// `metadata` in `MESSAGES_SNAPSHOT.messages`, and the input nulls of
/// [`strip_legacy_input_nulls`] inside `RUN_STARTED.input`. Returns the paths
/// removed.
pub fn strip_legacy_event_nulls(event: &mut Value) -> Vec<FieldPath> {
    let mut removed = Vec::new();
    let Value::Object(map) = event else {
        return removed;
    };
    let ty = map
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mut path = Vec::new();
    remove_null(map, "rawEvent", &path, &mut removed);
    match ty.as_str() {
        "RUN_FINISHED" => {
            remove_null(map, "result", &path, &mut removed);
            remove_null(map, "outcome", &path, &mut removed);
        }
        "SUBAGENT_FINISHED" => remove_null(map, "result", &path, &mut removed),
        "TOOL_CALL_START" | "TOOL_CALL_CHUNK" => {
            remove_null(map, "parentMessageId", &path, &mut removed)
        }
        "RUN_STARTED" => {
            if let Some(input) = map.get_mut("input") {
                path.push(PathSegment::Key("input".into()));
                strip_input(input, &mut path, &mut removed);
                path.pop();
            }
        }
        "MESSAGES_SNAPSHOT" => {
            if let Some(messages) = map.get_mut("messages") {
                path.push(PathSegment::Key("messages".into()));
                strip_messages(messages, &mut path, &mut removed);
                path.pop();
            }
        }
        _ => {}
    }
    removed
}

fn remove_null(
    map: &mut Map<String, Value>,
    key: &str,
    path: &[PathSegment],
    removed: &mut Vec<FieldPath>,
) {
    if map.get(key).is_some_and(Value::is_null) {
        map.shift_remove(key);
        let mut at = path.to_vec();
        at.push(PathSegment::Key(key.to_owned()));
        removed.push(FieldPath::from_segments(at));
    }
}

/// Calls `f` on each object element of `map[key]` when it is an array.
fn each_object(
    map: &mut Map<String, Value>,
    key: &str,
    path: &mut Vec<PathSegment>,
    mut f: impl FnMut(&mut Map<String, Value>, &mut Vec<PathSegment>),
) {
    let Some(Value::Array(items)) = map.get_mut(key) else {
        return;
    };
    path.push(PathSegment::Key(key.to_owned()));
    for (i, item) in items.iter_mut().enumerate() {
        if let Value::Object(obj) = item {
            path.push(PathSegment::Index(i));
            f(obj, path);
            path.pop();
        }
    }
    path.pop();
}

fn strip_input(input: &mut Value, path: &mut Vec<PathSegment>, removed: &mut Vec<FieldPath>) {
    let Value::Object(map) = input else { return };
    remove_null(map, "forwardedProps", path, removed);
    each_object(map, "tools", path, |tool, p| {
        remove_null(tool, "parameters", p, removed)
    });
    each_object(map, "resume", path, |entry, p| {
        remove_null(entry, "payload", p, removed)
    });
    if let Some(messages) = map.get_mut("messages") {
        path.push(PathSegment::Key("messages".into()));
        strip_messages(messages, path, removed);
        path.pop();
    }
}

fn strip_messages(messages: &mut Value, path: &mut Vec<PathSegment>, removed: &mut Vec<FieldPath>) {
    let Value::Array(items) = messages else {
        return;
    };
    for (i, message) in items.iter_mut().enumerate() {
        let Value::Object(message) = message else {
            continue;
        };
        path.push(PathSegment::Index(i));
        each_object(message, "content", path, |part, p| {
            let media = part
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| MEDIA_PARTS.contains(&t));
            if media {
                remove_null(part, "metadata", p, removed);
            }
        });
        path.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(removed: &[FieldPath]) -> Vec<String> {
        removed.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn input_nulls_become_absent_and_nothing_else_changes() {
        let mut input = json!({
            "threadId": "t", "runId": "r", "forwardedProps": null, "state": null,
            "tools": [{"name": "a", "description": "d", "parameters": null, "metadata": null},
                      {"name": "b", "description": "d", "parameters": {"x": null}}],
            "resume": [{"interruptId": "i", "status": "cancelled", "payload": null}],
            "messages": [
                {"id": "u", "role": "user", "content": [
                    {"type": "text", "text": "x", "metadata": null},
                    {"type": "image", "source": {"type": "url", "value": "u"}, "metadata": null}]},
                {"id": "s", "role": "system", "content": "plain", "metadata": null}]
        });
        let removed = strip_legacy_input_nulls(&mut input);
        assert_eq!(
            paths(&removed),
            [
                "forwardedProps",
                "tools[0].parameters",
                "resume[0].payload",
                "messages[0].content[1].metadata"
            ]
        );
        // Kept: state null (valid), tool metadata null (still invalid), text
        // part metadata null (not a media part), nulls inside data.
        assert_eq!(input["state"], Value::Null);
        assert_eq!(input["tools"][0]["metadata"], Value::Null);
        assert_eq!(input["tools"][1]["parameters"], json!({"x": null}));
        assert_eq!(input["messages"][0]["content"][0]["metadata"], Value::Null);
        assert_eq!(input["messages"][1]["metadata"], Value::Null);
        assert!(input.get("forwardedProps").is_none());
        // A second pass finds nothing.
        assert!(strip_legacy_input_nulls(&mut input).is_empty());
    }

    #[test]
    fn event_nulls_become_absent() {
        let mut e = json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
            "rawEvent": null, "result": null, "outcome": null, "metadata": null});
        assert_eq!(
            paths(&strip_legacy_event_nulls(&mut e)),
            ["rawEvent", "result", "outcome"]
        );
        assert_eq!(
            e,
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "metadata": null})
        );

        let mut e = json!({"type": "TOOL_CALL_CHUNK", "parentMessageId": null, "delta": null});
        assert_eq!(
            paths(&strip_legacy_event_nulls(&mut e)),
            ["parentMessageId"]
        );
        assert_eq!(e["delta"], Value::Null);

        let mut e = json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r",
            "input": {"threadId": "t", "runId": "r", "messages": [], "forwardedProps": null}});
        assert_eq!(
            paths(&strip_legacy_event_nulls(&mut e)),
            ["input.forwardedProps"]
        );

        let mut e = json!({"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "t", "role": "tool",
            "toolCallId": "c", "content": [{"type": "audio", "source": {"type": "url", "value": "u"}, "metadata": null}]}]});
        assert_eq!(
            paths(&strip_legacy_event_nulls(&mut e)),
            ["messages[0].content[0].metadata"]
        );

        // Only the listed types: `result: null` on CUSTOM is its data... and
        // CUSTOM has no `result`, so it stays an unknown key.
        let mut e = json!({"type": "CUSTOM", "name": "n", "value": null, "result": null});
        assert!(strip_legacy_event_nulls(&mut e).is_empty());
        assert_eq!(e["value"], Value::Null);
    }
}
