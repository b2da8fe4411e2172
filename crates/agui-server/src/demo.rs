//! The built-in deterministic demo agent.
//!
//! It answers `POST` with a `RunAgentInput` body by streaming a fixed-shape
//! AG-UI run as SSE, so the gateway works out of the box and tests have a
//! real upstream to talk to. Its behaviour depends only on the input:
//!
//! 1. `RUN_STARTED` with the input's `threadId` and `runId`.
//! 2. State: when the input state is an object holding a numeric `turn`, a
//!    `STATE_DELTA` replacing `/turn` with the number of user messages in the
//!    input and setting `/lastUserMessage`; otherwise a `STATE_SNAPSHOT` that
//!    keeps the input state's other keys (when it is an object) and sets both.
//! 3. An assistant text message `msg-<runId>-1` whose text is
//!    `You said: <last user text>` (or `Hello! Say something.` without one),
//!    streamed in token-sized deltas (a word with its leading space).
//! 4. A tool call `tool-<runId>-1` named `echo`, child of that message, with
//!    the arguments `{"text":"<last user text>"}` streamed in fragments of at
//!    most 8 bytes, ended, and answered by a `TOOL_CALL_RESULT` (message
//!    `result-<runId>-1`) whose content is `echo: <last user text>`.
//! 5. `RUN_FINISHED`.
//!
//! When the last user message contains `error` (any case), the run stops
//! midway through the text message: after half of its deltas it sends a
//! `RUN_ERROR` with code `demo_error` and no `TEXT_MESSAGE_END`.
//!
//! `forwardedProps.demo` tunes the pacing, for tests and benchmarks:
//! `delayMs` (pause before each event after `RUN_STARTED`, at most 60,000)
//! and `extraDeltas` (additional `TEXT_MESSAGE_CONTENT` deltas of one word
//! each, at most 100,000). The events are made one at a time, so a large
//! run never sits in memory.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;

/// The most `extraDeltas` the demo agent honours.
pub const MAX_EXTRA_DELTAS: u64 = 100_000;
/// The longest `delayMs` the demo agent honours.
pub const MAX_DELAY_MS: u64 = 60_000;

#[derive(Deserialize)]
struct DemoInput {
    #[serde(rename = "threadId")]
    thread_id: String,
    #[serde(rename = "runId")]
    run_id: String,
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    state: Option<Value>,
    #[serde(rename = "forwardedProps", default)]
    forwarded_props: Option<Value>,
}

/// Pacing options from `forwardedProps.demo`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pacing {
    /// Pause before each event after the first.
    pub delay: Duration,
    /// Extra one-word deltas appended to the answer.
    pub extra_deltas: u64,
}

fn pacing(props: Option<&Value>) -> Pacing {
    let demo = props.and_then(|p| p.get("demo"));
    let num = |k: &str| demo.and_then(|d| d.get(k)).and_then(Value::as_u64);
    Pacing {
        delay: Duration::from_millis(num("delayMs").unwrap_or(0).min(MAX_DELAY_MS)),
        extra_deltas: num("extraDeltas").unwrap_or(0).min(MAX_EXTRA_DELTAS),
    }
}

/// The text of a message's `content`: a string, or the `text` parts of an
/// array of content parts joined together.
fn content_text(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let mut out = String::new();
            for p in parts {
                let text = p
                    .get("text")
                    .and_then(Value::as_str)
                    .filter(|_| p.get("type").and_then(Value::as_str) == Some("text"));
                out.push_str(text.unwrap_or_default());
            }
            Some(out)
        }
        _ => None,
    }
}

/// Splits text into token-sized pieces: each word keeps its leading spaces.
pub fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(end) = next_token(text, pos) {
        out.push(&text[pos..end]);
        pos = end;
    }
    out
}

/// Splits text in pieces of at most `max` bytes, on char boundaries.
#[cfg(test)]
fn fragments(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(end) = next_fragment(text, pos, max) {
        out.push(&text[pos..end]);
        pos = end;
    }
    out
}

/// The next token of `text` from byte `pos` (see [`tokens`]): its end.
fn next_token(text: &str, pos: usize) -> Option<usize> {
    if pos >= text.len() {
        return None;
    }
    let mut in_word = false;
    for (i, c) in text[pos..].char_indices() {
        if c.is_whitespace() {
            if in_word {
                return Some(pos + i);
            }
        } else {
            in_word = true;
        }
    }
    Some(text.len())
}

/// The next fragment of at most `max` bytes from `pos`, on a char boundary.
fn next_fragment(text: &str, pos: usize, max: usize) -> Option<usize> {
    if pos >= text.len() {
        return None;
    }
    let mut end = (pos + max).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    Some(end)
}

/// Where the script is.
#[derive(Clone, Copy)]
enum Phase {
    Started,
    State,
    MessageStart,
    /// Answer tokens from this byte; `left` more to send.
    Tokens {
        pos: usize,
        left: usize,
    },
    Error,
    Extra(u64),
    MessageEnd,
    ToolStart,
    Args(usize),
    ToolEnd,
    ToolResult,
    Finished,
    Done,
}

/// The events of one demo run, in order, made one at a time (an input of
/// megabytes or a million extra deltas never sits in memory as events).
/// The first event is `RUN_STARTED`; pacing applies to the others.
struct Script {
    thread: String,
    run: String,
    turn: u64,
    last_text: Option<String>,
    state: Option<Value>,
    msg_id: String,
    answer: String,
    args: String,
    wants_error: bool,
    extra_deltas: u64,
    phase: Phase,
}

impl Script {
    fn new(input: DemoInput, extra_deltas: u64) -> Script {
        let user_msgs: Vec<&Value> = input
            .messages
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .collect();
        let turn = user_msgs.len() as u64;
        let last_text = user_msgs
            .last()
            .and_then(|m| content_text(m.get("content")));
        let answer = match &last_text {
            Some(t) => format!("You said: {t}"),
            None => "Hello! Say something.".to_owned(),
        };
        let wants_error = last_text
            .as_deref()
            .is_some_and(|t| t.to_lowercase().contains("error"));
        let args = json!({"text": last_text.clone().unwrap_or_default()}).to_string();
        Script {
            msg_id: format!("msg-{}-1", input.run_id),
            thread: input.thread_id,
            run: input.run_id,
            turn,
            last_text,
            state: input.state,
            answer,
            args,
            wants_error,
            extra_deltas,
            phase: Phase::Started,
        }
    }

    fn call_id(&self) -> String {
        format!("tool-{}-1", self.run)
    }

    fn state_event(&mut self) -> Value {
        let last_for_state = self
            .last_text
            .clone()
            .map(Value::String)
            .unwrap_or(Value::Null);
        match self.state.take() {
            Some(Value::Object(obj)) if obj.get("turn").is_some_and(Value::is_number) => {
                let op = if obj.contains_key("lastUserMessage") {
                    "replace"
                } else {
                    "add"
                };
                json!({"type":"STATE_DELTA","delta":[
                    {"op":"replace","path":"/turn","value":self.turn},
                    {"op":op,"path":"/lastUserMessage","value":last_for_state}
                ]})
            }
            other => {
                let mut snapshot = match other {
                    Some(Value::Object(obj)) => obj,
                    _ => serde_json::Map::new(),
                };
                snapshot.insert("turn".into(), json!(self.turn));
                snapshot.insert("lastUserMessage".into(), last_for_state);
                json!({"type":"STATE_SNAPSHOT","snapshot":Value::Object(snapshot)})
            }
        }
    }
}

impl Iterator for Script {
    type Item = Value;

    fn next(&mut self) -> Option<Value> {
        loop {
            let (next, event) = match self.phase {
                Phase::Started => (
                    Phase::State,
                    Some(json!({"type":"RUN_STARTED","threadId":self.thread,"runId":self.run})),
                ),
                Phase::State => (Phase::MessageStart, Some(self.state_event())),
                Phase::MessageStart => {
                    let count = {
                        let mut n: usize = 0;
                        let mut pos = 0;
                        while let Some(end) = next_token(&self.answer, pos) {
                            n += 1;
                            pos = end;
                        }
                        n
                    };
                    let left = if self.wants_error {
                        count.div_ceil(2)
                    } else {
                        count
                    };
                    (
                        Phase::Tokens { pos: 0, left },
                        Some(
                            json!({"type":"TEXT_MESSAGE_START","messageId":self.msg_id,"role":"assistant"}),
                        ),
                    )
                }
                Phase::Tokens { pos, left } => match next_token(&self.answer, pos) {
                    Some(end) if left > 0 => (
                        Phase::Tokens {
                            pos: end,
                            left: left - 1,
                        },
                        Some(
                            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":self.msg_id,"delta":&self.answer[pos..end]}),
                        ),
                    ),
                    _ if self.wants_error => (Phase::Error, None),
                    _ => (Phase::Extra(0), None),
                },
                Phase::Error => (
                    Phase::Done,
                    Some(
                        json!({"type":"RUN_ERROR","message":"the demo agent was asked for an error","code":"demo_error"}),
                    ),
                ),
                Phase::Extra(i) if i < self.extra_deltas => (
                    Phase::Extra(i + 1),
                    Some(
                        json!({"type":"TEXT_MESSAGE_CONTENT","messageId":self.msg_id,"delta":format!(" w{i}")}),
                    ),
                ),
                Phase::Extra(_) => (Phase::MessageEnd, None),
                Phase::MessageEnd => (
                    Phase::ToolStart,
                    Some(json!({"type":"TEXT_MESSAGE_END","messageId":self.msg_id})),
                ),
                Phase::ToolStart => (
                    Phase::Args(0),
                    Some(
                        json!({"type":"TOOL_CALL_START","toolCallId":self.call_id(),"toolCallName":"echo","parentMessageId":self.msg_id}),
                    ),
                ),
                Phase::Args(pos) => match next_fragment(&self.args, pos, 8) {
                    Some(end) => (
                        Phase::Args(end),
                        Some(
                            json!({"type":"TOOL_CALL_ARGS","toolCallId":self.call_id(),"delta":&self.args[pos..end]}),
                        ),
                    ),
                    None => (Phase::ToolEnd, None),
                },
                Phase::ToolEnd => (
                    Phase::ToolResult,
                    Some(json!({"type":"TOOL_CALL_END","toolCallId":self.call_id()})),
                ),
                Phase::ToolResult => {
                    let echo = self.last_text.clone().unwrap_or_default();
                    (
                        Phase::Finished,
                        Some(
                            json!({"type":"TOOL_CALL_RESULT","messageId":format!("result-{}-1", self.run),"toolCallId":self.call_id(),"content":format!("echo: {echo}"),"role":"tool"}),
                        ),
                    )
                }
                Phase::Finished => (
                    Phase::Done,
                    Some(json!({"type":"RUN_FINISHED","threadId":self.thread,"runId":self.run})),
                ),
                Phase::Done => return None,
            };
            self.phase = next;
            if event.is_some() {
                return event;
            }
        }
    }
}

/// The whole script (tests).
#[cfg(test)]
fn script(input: &DemoInput, extra_deltas: u64) -> Vec<Value> {
    Script::new(
        DemoInput {
            thread_id: input.thread_id.clone(),
            run_id: input.run_id.clone(),
            messages: input.messages.clone(),
            state: input.state.clone(),
            forwarded_props: None,
        },
        extra_deltas,
    )
    .collect()
}

fn frame(v: &Value) -> Bytes {
    let mut s = String::with_capacity(64);
    s.push_str("data: ");
    s.push_str(&v.to_string());
    s.push_str("\n\n");
    Bytes::from(s)
}

/// The demo run for a request body, as a stream of SSE bytes.
pub fn stream_for(
    body: &[u8],
) -> Result<impl futures::Stream<Item = Bytes> + Send + 'static, ApiError> {
    let input: DemoInput = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            format!("the demo agent needs a RunAgentInput: {e}"),
        )
    })?;
    let pace = pacing(input.forwarded_props.as_ref());
    let events = Script::new(input, pace.extra_deltas);
    Ok(paced(events, pace.delay))
}

/// The axum handler of the demo agent: `POST` a `RunAgentInput`, get SSE.
/// It sits behind the gateway's auth and body limit like every route.
pub async fn handler(
    axum::extract::State(gw): axum::extract::State<std::sync::Arc<crate::Gateway>>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Response {
    if let Err(e) = gw.tenant(&headers) {
        return e.into_response();
    }
    let body = match crate::run::read_body(&gw, body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    match stream_for(&body) {
        Err(e) => e.into_response(),
        Ok(stream) => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .body(Body::from_stream(futures::StreamExt::map(
                stream,
                Ok::<_, std::convert::Infallible>,
            )))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()),
    }
}

fn paced(events: Script, delay: Duration) -> impl futures::Stream<Item = Bytes> + Send + 'static {
    // Without a delay the whole run goes out in large writes.
    futures::stream::unfold((events, 0usize), move |(mut it, i)| async move {
        if delay.is_zero() {
            let mut buf = Vec::new();
            for v in it.by_ref().take(256) {
                buf.extend_from_slice(&frame(&v));
            }
            if buf.is_empty() {
                return None;
            }
            return Some((Bytes::from(buf), (it, i + 1)));
        }
        let v = it.next()?;
        if i > 0 {
            tokio::time::sleep(delay).await;
        }
        Some((frame(&v), (it, i + 1)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(text: &str, state: Option<Value>) -> DemoInput {
        DemoInput {
            thread_id: "t".into(),
            run_id: "r".into(),
            messages: vec![json!({"id":"u1","role":"user","content":text})],
            state,
            forwarded_props: None,
        }
    }

    fn types(ev: &[Value]) -> Vec<&str> {
        ev.iter().map(|e| e["type"].as_str().unwrap()).collect()
    }

    #[test]
    fn tokens_keep_leading_spaces() {
        assert_eq!(
            tokens("You said: hi  there"),
            vec!["You", " said:", " hi", "  there"]
        );
        assert_eq!(tokens(""), Vec::<&str>::new());
        assert_eq!(tokens("é ü"), vec!["é", " ü"]);
    }

    #[test]
    fn fragments_respect_char_boundaries() {
        let f = fragments("ééééé", 3);
        assert_eq!(f.concat(), "ééééé");
        assert!(f.iter().all(|p| p.len() <= 4));
    }

    #[test]
    fn normal_run_shape() {
        let ev = script(&input("hello world", None), 0);
        let t = types(&ev);
        assert_eq!(t.first(), Some(&"RUN_STARTED"));
        assert_eq!(t.last(), Some(&"RUN_FINISHED"));
        assert_eq!(t[1], "STATE_SNAPSHOT");
        assert!(t.contains(&"TOOL_CALL_RESULT"));
        let text: String = ev
            .iter()
            .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "You said: hello world");
        let args: String = ev
            .iter()
            .filter(|e| e["type"] == "TOOL_CALL_ARGS")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(args, r#"{"text":"hello world"}"#);
        assert_eq!(ev[1]["snapshot"]["turn"], json!(1));
    }

    #[test]
    fn second_turn_uses_a_delta() {
        let ev = script(
            &input(
                "again",
                Some(json!({"turn":1,"lastUserMessage":"x","keep":true})),
            ),
            0,
        );
        assert_eq!(ev[1]["type"], "STATE_DELTA");
        assert_eq!(ev[1]["delta"][1]["op"], "replace");
    }

    #[test]
    fn error_stops_midway_through_the_message() {
        let ev = script(&input("please ERROR now", None), 0);
        let t = types(&ev);
        assert_eq!(t.last(), Some(&"RUN_ERROR"));
        assert!(t.contains(&"TEXT_MESSAGE_START"));
        assert!(!t.contains(&"TEXT_MESSAGE_END"));
        assert!(t.contains(&"TEXT_MESSAGE_CONTENT"));
    }

    #[test]
    fn extra_deltas_and_pacing() {
        let p = pacing(Some(&json!({"demo":{"delayMs":99999999,"extraDeltas":3}})));
        assert_eq!(p.delay, Duration::from_millis(MAX_DELAY_MS));
        assert_eq!(p.extra_deltas, 3);
        let a = script(&input("x", None), 0).len();
        let b = script(&input("x", None), 3).len();
        assert_eq!(b, a + 3);
    }
}
