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
    let Value::Object(object) = value else {
        return Err(invalid(
            "(body)",
            &format!("must be a JSON object, found {}", kind(&value)),
        ));
    };
    let thread_id = id_field(&object, "threadId", true)?.unwrap_or_default();
    let run_id = id_field(&object, "runId", true)?.unwrap_or_default();
    let parent_run_id = match object.get("parentRunId") {
        Some(Value::Null) => None,
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
        let client: Vec<Value> = self.messages().to_vec();
        let id_of = |m: &Value| m.get("id").and_then(Value::as_str).map(str::to_owned);
        let mut merged: Vec<Value> = Vec::with_capacity(stored_messages.len() + client.len());
        let mut index: std::collections::HashMap<String, usize> = Default::default();
        for m in stored_messages {
            match id_of(m) {
                Some(id) if index.contains_key(&id) => {}
                Some(id) => {
                    index.insert(id, merged.len());
                    merged.push(m.clone());
                }
                None => merged.push(m.clone()),
            }
        }
        for m in client {
            match id_of(&m) {
                Some(id) => match index.get(&id) {
                    Some(&pos) => merged[pos] = m,
                    None => {
                        index.insert(id, merged.len());
                        merged.push(m);
                    }
                },
                None => merged.push(m),
            }
        }
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
