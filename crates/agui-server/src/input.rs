//! Reading a `RunAgentInput` request body: what the gateway needs to route,
//! store and merge a run, with errors that name the field.
//!
//! The gateway checks the fields it relies on (`threadId`, `runId`,
//! `parentRunId`, `messages[*].id`/`role`, `state`) and forwards everything
//! else untouched; the upstream agent validates the rest.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// A parsed request body.
#[derive(Debug, Clone)]
pub struct RunInput {
    /// The whole body as a JSON object (key order and numbers kept).
    pub object: Map<String, Value>,
    /// `threadId`.
    pub thread_id: String,
    /// `runId`.
    pub run_id: String,
    /// `parentRunId`, when given.
    pub parent_run_id: Option<String>,
}

fn invalid(path: &str, what: &str) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        format!("RunAgentInput {path}: {what}"),
    )
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Max id length accepted (bytes), as the store's.
const MAX_ID: usize = 64 * 1024;

fn id_field(
    obj: &Map<String, Value>,
    key: &str,
    required: bool,
) -> Result<Option<String>, ApiError> {
    match obj.get(key) {
        None if required => Err(invalid(key, "is required")),
        None => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Err(invalid(key, "must not be empty")),
        Some(Value::String(s)) if s.len() > MAX_ID => {
            Err(invalid(key, "is longer than 65536 bytes"))
        }
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(invalid(
            key,
            &format!("must be a string, found {}", kind(other)),
        )),
    }
}

/// Parses and checks a body.
pub fn parse(body: &[u8]) -> Result<RunInput, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(
            "invalid_json",
            format!(
                "the body is not valid JSON (line {}, column {})",
                e.line(),
                e.column()
            ),
        )
    })?;
    let Value::Object(mut object) = value else {
        return Err(invalid(
            "(body)",
            &format!("must be a JSON object, found {}", kind(&value)),
        ));
    };
    let thread_id = id_field(&object, "threadId", true)?.unwrap_or_default();
    let run_id = id_field(&object, "runId", true)?.unwrap_or_default();
    let parent_run_id = match object.get("parentRunId") {
        Some(Value::Null) => {
            // Read as absent, and forwarded as absent: the official client
            // refuses a `RUN_STARTED.input` with `parentRunId: null`, and
            // the stored `RUN_STARTED` carries the input sent upstream.
            object.shift_remove("parentRunId");
            None
        }
        _ => id_field(&object, "parentRunId", false)?,
    };
    match object.get("messages") {
        None => return Err(invalid("messages", "is required")),
        Some(Value::Array(msgs)) => {
            for (i, m) in msgs.iter().enumerate() {
                let Value::Object(m) = m else {
                    return Err(invalid(
                        &format!("messages[{i}]"),
                        &format!("must be an object, found {}", kind(m)),
                    ));
                };
                match m.get("id") {
                    Some(Value::String(_)) => {}
                    None => return Err(invalid(&format!("messages[{i}].id"), "is required")),
                    Some(o) => {
                        return Err(invalid(
                            &format!("messages[{i}].id"),
                            &format!("must be a string, found {}", kind(o)),
                        ));
                    }
                }
                match m.get("role") {
                    Some(Value::String(_)) => {}
                    None => return Err(invalid(&format!("messages[{i}].role"), "is required")),
                    Some(o) => {
                        return Err(invalid(
                            &format!("messages[{i}].role"),
                            &format!("must be a string, found {}", kind(o)),
                        ));
                    }
                }
            }
        }
        Some(other) => {
            return Err(invalid(
                "messages",
                &format!("must be an array, found {}", kind(other)),
            ));
        }
    }
    for key in ["tools", "context", "resume"] {
        if let Some(v) = object.get(key).filter(|v| !v.is_array()) {
            return Err(invalid(
                key,
                &format!("must be an array, found {}", kind(v)),
            ));
        }
    }
    // The legacy nulls the official client reads as absent (`forwardedProps`,
    // `tools[].parameters`, ...) are forwarded as absent: the stored
    // `RUN_STARTED.input` then passes the schema the gateway checks.
    let mut value = Value::Object(object);
    agui_protocol::model::strip_legacy_input_nulls(&mut value);
    let Value::Object(object) = value else {
        return Err(invalid("(body)", "must be a JSON object"));
    };
    Ok(RunInput {
        object,
        thread_id,
        run_id,
        parent_run_id,
    })
}

impl RunInput {
    /// The messages (checked to be objects with string ids).
    pub fn messages(&self) -> &[Value] {
        self.object
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The body as JSON text.
    pub fn to_json(&self) -> String {
        // A map of plain values always serializes.
        serde_json::to_string(&self.object).unwrap_or_else(|_| "{}".to_owned())
    }

    /// Merges a stored conversation under the client's messages: stored
    /// messages first (replaced in place by a client message with the same
    /// id), then the client's new ones, in order. The stored state is used
    /// when the client sent none (absent, `null` or `{}`).
    pub fn merge_stored(&mut self, stored_messages: &[Value], stored_state: Option<&Value>) {
        let merged = merge_messages(stored_messages, self.messages());
        self.object.insert("messages".into(), Value::Array(merged));
        let client_state_empty = match self.object.get("state") {
            None | Some(Value::Null) => true,
            Some(Value::Object(o)) => o.is_empty(),
            _ => false,
        };
        if let (true, Some(s)) = (client_state_empty, stored_state) {
            self.object.insert("state".into(), s.clone());
        }
    }
}

fn id_of(m: &Value) -> Option<&str> {
    m.get("id").and_then(Value::as_str)
}

/// `history` with `messages` merged in by id: the first message with the id
/// of a history message replaces it in place, the others follow in order.
/// Duplicate ids in `history` keep their first copy.
pub fn merge_messages(history: &[Value], messages: &[Value]) -> Vec<Value> {
    let mut merged: Vec<Value> = Vec::with_capacity(history.len() + messages.len());
    let mut index: std::collections::HashMap<&str, usize> = Default::default();
    for m in history {
        match id_of(m) {
            Some(id) if index.contains_key(id) => {}
            Some(id) => {
                index.insert(id, merged.len());
                merged.push(m.clone());
            }
            None => merged.push(m.clone()),
        }
    }
    // A history message is replaced by the first message with its id; a
    // message is never dropped, even one whose id repeats among `messages`
    // (it then follows, as sent).
    let mut taken: std::collections::HashSet<&str> = Default::default();
    for m in messages {
        match id_of(m) {
            Some(id) if !taken.insert(id) => merged.push(m.clone()),
            Some(id) => match index.get(id) {
                Some(&pos) => merged[pos] = m.clone(),
                None => merged.push(m.clone()),
            },
            None => merged.push(m.clone()),
        }
    }
    merged
}

/// The normalized form of a run's input messages for `RUN_STARTED.input`:
/// the messages not already in the branch history `history` (same id, same
/// JSON). The exact upstream messages are `merge_messages(history, result)`.
/// When they cannot be rebuilt that way (a client that sent a history
/// reordered or cut against the stored one), the messages are kept whole.
pub fn normalize(history: &[Value], messages: &[Value]) -> Vec<Value> {
    if history.is_empty() {
        return messages.to_vec();
    }
    let known: std::collections::HashMap<&str, &Value> = history
        .iter()
        .filter_map(|m| Some((id_of(m)?, m)))
        .collect();
    let fresh: Vec<Value> = messages
        .iter()
        .filter(|m| {
            id_of(m)
                .and_then(|id| known.get(id))
                .is_none_or(|h| *h != *m)
        })
        .cloned()
        .collect();
    if merge_messages(history, &fresh) == messages {
        fresh
    } else {
        messages.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_what_http_agent_sends() {
        let body = br#"{"threadId":"t","runId":"r","protocolVersion":"1.0","state":{},"messages":[{"id":"u1","role":"user","content":"hi"}],"tools":[],"context":[],"forwardedProps":{}}"#;
        let i = parse(body).unwrap();
        assert_eq!((i.thread_id.as_str(), i.run_id.as_str()), ("t", "r"));
        assert_eq!(i.parent_run_id, None);
        assert_eq!(i.to_json(), std::str::from_utf8(body).unwrap());
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse(b"{").unwrap_err();
        assert_eq!(e.code, "invalid_json");
        let e = parse(b"[]").unwrap_err();
        assert_eq!(e.code, "invalid_input");
        let e = parse(br#"{"runId":"r","messages":[]}"#).unwrap_err();
        assert!(e.message.contains("threadId"), "{}", e.message);
        let e = parse(br#"{"threadId":"t","runId":"r","messages":[{"id":"a","role":"user"},{"id":3,"role":"user"}]}"#).unwrap_err();
        assert!(e.message.contains("messages[1].id"), "{}", e.message);
        let e = parse(br#"{"threadId":"t","runId":"r","messages":{}}"#).unwrap_err();
        assert!(
            e.message.contains("messages: must be an array"),
            "{}",
            e.message
        );
        let e = parse(br#"{"threadId":"","runId":"r","messages":[]}"#).unwrap_err();
        assert!(
            e.message.contains("threadId: must not be empty"),
            "{}",
            e.message
        );
        let e = parse(br#"{"threadId":"t","runId":"r","messages":[],"tools":1}"#).unwrap_err();
        assert!(e.message.contains("tools"), "{}", e.message);
    }

    #[test]
    fn normalized_messages_rebuild_the_exact_input() {
        let h = vec![
            json!({"id":"u1","role":"user","content":"a"}),
            json!({"id":"a1","role":"assistant","content":"b"}),
        ];
        let u2 = json!({"id":"u2","role":"user","content":"c"});
        // A full client: only the new message is kept.
        let full = vec![h[0].clone(), h[1].clone(), u2.clone()];
        assert_eq!(normalize(&h, &full), vec![u2.clone()]);
        assert_eq!(merge_messages(&h, &normalize(&h, &full)), full);
        // An edited message stays (it differs from the stored copy).
        let edited = vec![
            h[0].clone(),
            json!({"id":"a1","role":"assistant","content":"B"}),
            u2.clone(),
        ];
        let n = normalize(&h, &edited);
        assert_eq!(n.len(), 2);
        assert_eq!(merge_messages(&h, &n), edited);
        // A client that dropped the history cannot be rebuilt: kept whole.
        let cut = vec![u2.clone()];
        assert_eq!(normalize(&h, &cut), cut);
        // Reordered: kept whole too.
        let swapped = vec![h[1].clone(), h[0].clone(), u2];
        assert_eq!(normalize(&h, &swapped), swapped);
        assert_eq!(normalize(&[], &swapped), swapped);
    }

    #[test]
    fn a_null_parent_run_id_is_read_and_forwarded_as_absent() {
        let i = parse(br#"{"threadId":"t","parentRunId":null,"runId":"r","messages":[]}"#).unwrap();
        assert_eq!(i.parent_run_id, None);
        assert_eq!(i.to_json(), r#"{"threadId":"t","runId":"r","messages":[]}"#);
    }

    #[test]
    fn legacy_nulls_are_forwarded_as_absent() {
        let i = parse(br#"{"threadId":"t","runId":"r","messages":[],"tools":[{"name":"x","description":"d","parameters":null}],"forwardedProps":null,"state":null}"#).unwrap();
        assert_eq!(
            i.to_json(),
            r#"{"threadId":"t","runId":"r","messages":[],"tools":[{"name":"x","description":"d"}],"state":null}"#
        );
    }

    #[test]
    fn merge_keeps_every_client_message_when_the_client_repeats_an_id() {
        // Found by the run_input fuzz target: the second client message
        // with a repeated id replaced the first, which was lost.
        let mut i = parse(br#"{"threadId":"t","runId":"r","messages":[{"id":"a","role":"user","content":"1"},{"id":"a","role":"user","content":"2"},{"id":"b","role":"user","content":"3"}]}"#).unwrap();
        let client = i.messages().to_vec();
        let stored = vec![
            json!({"id":"a","role":"user","content":"old"}),
            json!({"id":"s","role":"assistant","content":"S"}),
        ];
        i.merge_stored(&stored, None);
        let contents: Vec<&str> = i
            .messages()
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(contents, vec!["1", "S", "2", "3"]);
        for m in &client {
            assert!(i.messages().contains(m));
        }
    }

    #[test]
    fn merge_by_id_without_duplicates() {
        let mut i = parse(br#"{"threadId":"t","runId":"r","messages":[{"id":"b","role":"user","content":"B2"},{"id":"c","role":"user","content":"C"}]}"#).unwrap();
        let stored = vec![
            json!({"id":"a","role":"user","content":"A"}),
            json!({"id":"b","role":"user","content":"B"}),
        ];
        i.merge_stored(&stored, Some(&json!({"turn":1})));
        let ids: Vec<&str> = i
            .messages()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, vec!["a", "b", "c"]);
        assert_eq!(i.messages()[1]["content"], "B2");
        assert_eq!(i.object["state"], json!({"turn":1}));
    }
}
