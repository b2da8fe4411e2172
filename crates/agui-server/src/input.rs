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

    /// The body as JSON text with some members' values replaced by the given
    /// JSON texts: in place when the member is there, at the end otherwise
    /// (as `Map::insert` places them). The other members are written as
    /// [`RunInput::to_json`] writes them.
    pub fn to_json_with(&self, replace: &[(&str, &str)]) -> String {
        let size: usize = replace.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
        let mut out = Vec::with_capacity(size + 256);
        out.push(b'{');
        let mut first = true;
        let mut put = |out: &mut Vec<u8>, key: &str, value: Result<&str, &Value>| {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            // Strings and plain values always serialize.
            let _ = serde_json::to_writer(&mut *out, key);
            out.push(b':');
            match value {
                Ok(text) => out.extend_from_slice(text.as_bytes()),
                Err(v) => {
                    let _ = serde_json::to_writer(&mut *out, v);
                }
            }
        };
        for (key, value) in &self.object {
            match replace.iter().find(|(k, _)| k == key) {
                Some((_, text)) => put(&mut out, key, Ok(text)),
                None => put(&mut out, key, Err(value)),
            }
        }
        for (key, text) in replace {
            if !self.object.contains_key(*key) {
                put(&mut out, key, Ok(text));
            }
        }
        out.push(b'}');
        // Written from strings and JSON texts: UTF-8.
        String::from_utf8(out).unwrap_or_else(|_| "{}".to_owned())
    }

    /// True when the client sent no state (absent, `null` or `{}`): a
    /// server-managed session then continues the stored one.
    pub fn state_is_empty(&self) -> bool {
        match self.object.get("state") {
            None | Some(Value::Null) => true,
            Some(Value::Object(o)) => o.is_empty(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn replaced_members_stay_in_place_and_new_ones_follow() {
        let body = br#"{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":"\u00e9 1.50"}],"tools":[],"n":1.50}"#;
        let i = parse(body).unwrap();
        assert_eq!(i.to_json_with(&[]), i.to_json());
        assert_eq!(
            i.to_json_with(&[
                ("messages", "[1]"),
                ("state", "{\"s\":2}"),
                ("threadId", "\"x\"")
            ]),
            r#"{"threadId":"x","runId":"r","messages":[1],"tools":[],"n":1.50,"state":{"s":2}}"#
        );
        assert!(i.state_is_empty());
        for (state, empty) in [
            ("null", true),
            ("{}", true),
            ("{\"a\":1}", false),
            ("3", false),
        ] {
            let body = format!(r#"{{"threadId":"t","runId":"r","messages":[],"state":{state}}}"#);
            assert_eq!(
                parse(body.as_bytes()).unwrap().state_is_empty(),
                empty,
                "{state}"
            );
        }
    }
}
