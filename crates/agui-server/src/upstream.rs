//! Reading one upstream response: bytes in, the events to store out.
//!
//! [`UpstreamReader`] is the whole judgement the gateway passes on an
//! upstream's body, with no I/O, so the fuzz target drives exactly what a run
//! does:
//!
//! 1. the bytes are decoded as SSE (as the official client reads them);
//! 2. the first event is the run's `RUN_STARTED`, owned by the gateway: its
//!    `threadId`, `runId` and `parentRunId` are the ones the gateway resolved;
//!    different values sent by the upstream are replaced and kept under
//!    [`UPSTREAM_IDS_KEY`] (see docs/server.md for why a rewrite and not an
//!    error). An upstream that starts with anything else gets a `RUN_STARTED`
//!    written by the gateway in front. Its `input`, when the gateway adds it
//!    or the upstream echoes the request, is recorded normalized against the
//!    branch history ([`RunIds::stored_input_json`]);
//! 3. every event must pass the official client's checks before it is kept:
//!    the `@ag-ui/core` schema of its type ([`agui_protocol::model`]) and the
//!    sequence rules of `verifyEvents` ([`agui_protocol::verify`]). The first
//!    event refused ends the reading with `upstream_protocol` naming the
//!    event's index, type and reason; nothing of that event is kept;
//! 4. events after the run's terminal event are not part of the run.
//!
//! Whatever ends the reading early is a [`Close`]: the run then gets the
//! [`UpstreamReader::closers`] and a `RUN_ERROR` with the close's code.

use std::sync::Arc;

use agui_protocol::verify::Verifier;
use agui_protocol::{Event, EventType};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::sse::{DecodeError, SseDecoder};
use crate::tracker::OpenItems;

/// The key of the stored `RUN_STARTED` that keeps the ids an upstream stated
/// when they differed from the gateway's: an object with the upstream's
/// `threadId`, `runId` and/or `parentRunId` (only those that differed;
/// `parentRunId: null` when the upstream sent one and the run has none).
pub const UPSTREAM_IDS_KEY: &str = "aguiUpstream";

/// Longest reason quoted in a `RUN_ERROR` message, in bytes.
const MAX_REASON: usize = 300;

/// Why the gateway closes a run itself: a `RUN_ERROR` code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    /// The `RUN_ERROR` code (`upstream_protocol`, `upstream_garbage`, ...).
    pub code: &'static str,
    /// The `RUN_ERROR` message: written by the gateway, never a copy of the
    /// upstream's bytes.
    pub message: String,
}

impl Close {
    /// A close.
    pub fn new(code: &'static str, message: impl Into<String>) -> Close {
        Close {
            code,
            message: message.into(),
        }
    }
}

/// The ids a run's `RUN_STARTED` must carry, and the input sent upstream.
#[derive(Debug, Clone)]
pub struct RunIds {
    /// The thread.
    pub thread: String,
    /// The run.
    pub run: String,
    /// The resolved parent run, if any.
    pub parent: Option<String>,
    /// The exact JSON sent upstream (shared, not copied: a server-managed
    /// session forwards the whole conversation).
    pub input_json: Arc<str>,
    /// `RUN_STARTED.input` as recorded (when the upstream omits it or echoes
    /// `input_json` exactly): its messages normalized against the branch
    /// history (see `merge::Messages::normalize`). Equal to `input_json` for a
    /// thread's first run.
    pub stored_input_json: String,
    /// The thread id the upstream sees: `thread`, or a branch's own id under
    /// `upstream_thread = "per-branch"`. Upstream events naming it get
    /// `thread` back.
    pub upstream_thread: String,
}

impl RunIds {
    /// Ids whose upstream sees the user's thread and whose recorded input is
    /// the exact one.
    pub fn new(thread: &str, run: &str, parent: Option<&str>, input_json: &str) -> RunIds {
        RunIds {
            thread: thread.to_owned(),
            run: run.to_owned(),
            parent: parent.map(str::to_owned),
            input_json: Arc::from(input_json),
            stored_input_json: input_json.to_owned(),
            upstream_thread: thread.to_owned(),
        }
    }
}

/// Decodes, owns, checks and tracks one upstream response (module docs).
pub struct UpstreamReader {
    ids: RunIds,
    decoder: SseDecoder,
    verifier: Verifier,
    open: OpenItems,
    content_type: Option<String>,
    max_events: u64,
    /// Upstream events decoded so far (the index of the next one).
    index: u64,
    /// Events kept (what the run stores), the gateway's own included.
    count: u64,
    started: bool,
    ended: bool,
    /// Bytes received that are not blank.
    saw_bytes: bool,
}

#[derive(Deserialize)]
struct StartedView<'a> {
    #[serde(rename = "threadId", borrow, default, deserialize_with = "present")]
    thread_id: Option<&'a RawValue>,
    #[serde(rename = "runId", borrow, default, deserialize_with = "present")]
    run_id: Option<&'a RawValue>,
    #[serde(rename = "parentRunId", borrow, default, deserialize_with = "present")]
    parent_run_id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    input: Option<&'a RawValue>,
}

/// `Some` for any field present, `null` included (serde's `Option` would
/// read a `null` as `None`, hiding a key that is there).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

fn is_null(v: Option<&RawValue>) -> bool {
    v.is_none_or(|r| r.get() == "null")
}

/// True when a raw JSON value is exactly the string `s`.
fn is_string(v: Option<&RawValue>, s: &str) -> bool {
    v.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
        .is_some_and(|x| x == s)
}

fn truncate(mut s: String) -> String {
    if s.len() > MAX_REASON {
        let mut end = MAX_REASON;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

impl RunIds {
    /// The `RUN_STARTED` the gateway writes when the upstream sent none.
    pub fn synthetic_started(&self) -> Event {
        let mut text = format!(
            "{{\"type\":\"RUN_STARTED\",\"threadId\":{},\"runId\":{}",
            json_str(&self.thread),
            json_str(&self.run)
        );
        if let Some(p) = &self.parent {
            text.push_str(",\"parentRunId\":");
            text.push_str(&json_str(p));
        }
        text.push_str(",\"input\":");
        text.push_str(&self.stored_input_json);
        text.push('}');
        Event::from_json_string(text)
            .unwrap_or_else(|_| crate::gateway::run_error("internal", "internal error"))
    }

    /// The upstream's `RUN_STARTED` as the gateway stores it: its own ids
    /// (the upstream's different ones kept under [`UPSTREAM_IDS_KEY`]),
    /// `parentRunId` and `input` added when omitted (or `null`), an `input`
    /// that echoes the request exactly recorded normalized, the rest of the
    /// upstream's text unchanged.
    pub fn own_started(&self, event: Event) -> Event {
        let Ok(view) = event.view::<StartedView>() else {
            // Not readable field by field (a key given twice): rewritten,
            // reading each key's last value as JavaScript does.
            return self.rewrite_started(event);
        };
        let thread_ok = is_string(view.thread_id, &self.thread);
        let run_ok = is_string(view.run_id, &self.run);
        let parent_ok = match (&self.parent, view.parent_run_id) {
            (_, None) => true,
            (None, Some(v)) => v.get() == "null",
            (Some(p), Some(v)) => v.get() == "null" || is_string(Some(v), p),
        };
        let add_parent = is_null(view.parent_run_id) && self.parent.is_some();
        let echoes = !is_null(view.input)
            && *self.stored_input_json != *self.input_json
            && view
                .input
                .is_some_and(|r| same_json(r.get(), &self.input_json));
        let add_input = is_null(view.input) || echoes;
        if thread_ok && run_ok && parent_ok {
            if !add_parent && !add_input {
                return event;
            }
            if view.parent_run_id.is_none() && view.input.is_none() {
                // The common case: append the fields, keeping the text.
                if let Some(body) = event.json().strip_suffix('}') {
                    let mut text = String::with_capacity(
                        event.len_bytes() + self.stored_input_json.len() + 64,
                    );
                    text.push_str(body);
                    if let (true, Some(p)) = (add_parent, &self.parent) {
                        text.push_str(",\"parentRunId\":");
                        text.push_str(&json_str(p));
                    }
                    if add_input {
                        text.push_str(",\"input\":");
                        text.push_str(&self.stored_input_json);
                    }
                    text.push('}');
                    if let Ok(e) = Event::from_json_string(text) {
                        return e;
                    }
                }
            }
        }
        self.rewrite_started(event)
    }

    /// [`RunIds::own_started`] by rewriting the object: the other fields and
    /// their order are kept, a key given twice is written once (its last
    /// value, as `JSON.parse` reads it).
    fn rewrite_started(&self, event: Event) -> Event {
        let Ok(mut map) = serde_json::from_str::<Map<String, Value>>(event.json()) else {
            return self.synthetic_started();
        };
        let is = |key: &str, want: &str| map.get(key).and_then(Value::as_str) == Some(want);
        let thread_ok = is("threadId", &self.thread);
        let run_ok = is("runId", &self.run);
        let parent_ok = match (&self.parent, map.get("parentRunId")) {
            (_, None | Some(Value::Null)) => true,
            (None, Some(_)) => false,
            (Some(p), Some(_)) => is("parentRunId", p),
        };
        let add_input = map.get("input").is_none_or(Value::is_null);
        let mut upstream = Map::new();
        let mut keep = |key: &str, ok: bool, map: &Map<String, Value>| {
            if !ok {
                upstream.insert(key.to_owned(), map.get(key).cloned().unwrap_or(Value::Null));
            }
        };
        keep("threadId", thread_ok, &map);
        keep("runId", run_ok, &map);
        keep("parentRunId", parent_ok, &map);
        map.insert("threadId".into(), Value::String(self.thread.clone()));
        map.insert("runId".into(), Value::String(self.run.clone()));
        match &self.parent {
            Some(p) => {
                map.insert("parentRunId".into(), Value::String(p.clone()));
            }
            None => {
                map.shift_remove("parentRunId");
            }
        }
        if add_input && let Ok(v) = serde_json::from_str::<Value>(&self.stored_input_json) {
            map.insert("input".into(), v);
        }
        if !upstream.is_empty() {
            map.insert(UPSTREAM_IDS_KEY.into(), Value::Object(upstream));
        }
        Event::from_serialize(&map).unwrap_or(event)
    }

    /// An upstream event other than `RUN_STARTED` naming the per-branch
    /// upstream thread id in `threadId`: the user's thread id instead.
    fn user_thread(&self, event: Event) -> Event {
        if self.upstream_thread == self.thread
            || !matches!(
                event.event_type(),
                EventType::RunFinished | EventType::RunError
            )
        {
            return event;
        }
        let Ok(mut map) = serde_json::from_str::<Map<String, Value>>(event.json()) else {
            return event;
        };
        match map.get("threadId") {
            Some(Value::String(t)) if *t == self.upstream_thread => {
                map.insert("threadId".into(), Value::String(self.thread.clone()));
                Event::from_serialize(&map).unwrap_or(event)
            }
            _ => event,
        }
    }
}

/// True when two JSON texts hold the same value.
fn same_json(a: &str, b: &str) -> bool {
    // The same bytes are the same JSON; only other bytes are parsed.
    if a == b {
        return true;
    }
    match (
        serde_json::from_str::<Value>(a),
        serde_json::from_str::<Value>(b),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

impl UpstreamReader {
    /// A reader for one run. `content_type` is the upstream's, for messages.
    pub fn new(
        ids: RunIds,
        max_event_bytes: usize,
        max_events: u64,
        content_type: Option<String>,
    ) -> UpstreamReader {
        UpstreamReader {
            ids,
            decoder: SseDecoder::new(max_event_bytes),
            verifier: Verifier::new(),
            open: OpenItems::default(),
            content_type,
            max_events,
            index: 0,
            count: 0,
            started: false,
            ended: false,
            saw_bytes: false,
        }
    }

    /// True once the kept events hold the run's terminal event.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// True once a `RUN_STARTED` was kept.
    pub fn started(&self) -> bool {
        self.started
    }

    /// How many events were kept.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The ids the run owns.
    pub fn ids(&self) -> &RunIds {
        &self.ids
    }

    /// Feeds bytes; appends the events to keep to `out`. On an error, `out`
    /// holds the good events before the bad one, and the reading is over.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<Event>) -> Result<(), Close> {
        if !self.saw_bytes && chunk.iter().any(|b| !b.is_ascii_whitespace()) {
            self.saw_bytes = true;
        }
        if self.ended {
            return Ok(()); // nothing after the run's end is read
        }
        let mut decoded = Vec::new();
        let r = self.decoder.push(chunk, &mut decoded);
        self.accept(decoded, out)?;
        if self.ended {
            return Ok(());
        }
        r.map_err(|e| self.decode_close(e, false))
    }

    /// The upstream's body ended: decodes a final unterminated frame. `Ok`
    /// when the run ended; otherwise why it did not.
    pub fn finish(&mut self, out: &mut Vec<Event>) -> Result<(), Close> {
        if self.ended {
            return Ok(());
        }
        let mut decoded = Vec::new();
        let r = self.decoder.finish(&mut decoded);
        self.accept(decoded, out)?;
        if self.ended {
            return Ok(());
        }
        r.map_err(|e| self.decode_close(e, true))?;
        if self.index == 0 && self.saw_bytes {
            return Err(Close::new(
                "upstream_garbage",
                format!(
                    "the upstream agent answered with content type {} and no AG-UI event",
                    self.content_type_text()
                ),
            ));
        }
        Err(Close::new(
            "upstream_closed",
            "the upstream agent closed the stream before ending the run",
        ))
    }

    /// The connection broke mid-stream.
    pub fn broken(&self) -> Close {
        Close::new(
            "upstream_closed",
            "the connection to the upstream agent broke mid-stream",
        )
    }

    fn content_type_text(&self) -> String {
        match &self.content_type {
            Some(c) => format!("{:?}", truncate(c.clone())),
            None => "(none)".to_owned(),
        }
    }

    fn decode_close(&self, e: DecodeError, at_end: bool) -> Close {
        match e {
            DecodeError::TooLarge { limit } => Close::new(
                "event_too_large",
                format!("the upstream agent sent an event larger than {limit} bytes"),
            ),
            DecodeError::NotAnEvent { index, .. } | DecodeError::NotUtf8 { index } if at_end => {
                Close::new(
                    "upstream_closed",
                    format!("the upstream agent closed the stream in the middle of frame {index}"),
                )
            }
            DecodeError::NotAnEvent { index, .. } | DecodeError::NotUtf8 { index } => Close::new(
                "upstream_garbage",
                format!(
                    "the upstream agent (content type {}) sent frame {index}, which is not an AG-UI event",
                    self.content_type_text()
                ),
            ),
        }
    }

    /// Owns, checks and tracks decoded events.
    fn accept(&mut self, decoded: Vec<Event>, out: &mut Vec<Event>) -> Result<(), Close> {
        for e in decoded {
            let index = self.index;
            self.index += 1;
            if self.ended {
                continue; // anything after the run's end is not part of it
            }
            if self.count >= self.max_events {
                return Err(Close::new(
                    "event_limit",
                    format!("the run exceeded {} events", self.max_events),
                ));
            }
            let e = if !self.started {
                if *e.event_type() == EventType::RunStarted {
                    // Started once it passes the checks below: a rejected
                    // RUN_STARTED is not kept, and the run's close then
                    // writes the gateway's own before its RUN_ERROR (a log
                    // never opens with a RUN_ERROR).
                    self.ids.own_started(e)
                } else {
                    let s = self.ids.synthetic_started();
                    // The gateway's own event: valid by construction.
                    let _ = self.verifier.push(&s);
                    self.started = true;
                    self.count += 1;
                    out.push(s);
                    e
                }
            } else if *e.event_type() == EventType::RunStarted {
                return Err(Close::new(
                    "upstream_protocol",
                    format!(
                        "the upstream agent sent event {index} (RUN_STARTED), which starts a second run in the same stream"
                    ),
                ));
            } else {
                self.ids.user_thread(e)
            };
            if let Err(reason) = check(&mut self.verifier, &e) {
                return Err(Close::new(
                    "upstream_protocol",
                    format!(
                        "the upstream agent sent event {index} ({}), which the AG-UI client rejects: {}",
                        truncate(e.type_name().to_owned()),
                        truncate(reason)
                    ),
                ));
            }
            if *e.event_type() == EventType::RunStarted {
                self.started = true;
            }
            if e.event_type().is_run_terminal() {
                self.ended = true;
            }
            self.open.track(&e);
            self.count += 1;
            out.push(e);
        }
        Ok(())
    }

    /// The events that end what the kept events left open, each checked by
    /// the same rules (a closer the client would refuse is left out).
    pub fn closers(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        for e in self.open.closers() {
            if self.verifier.push(&e).is_ok() {
                self.open.track(&e);
                out.push(e);
            }
        }
        out
    }

    /// Records an event the gateway adds itself (its `RUN_STARTED` or
    /// `RUN_ERROR`).
    pub fn own(&mut self, e: &Event) {
        if *e.event_type() == EventType::RunStarted {
            self.started = true;
        }
        if e.event_type().is_run_terminal() {
            self.ended = true;
        }
        let _ = self.verifier.push(e);
        self.count += 1;
    }
}

/// The official client's checks on one event: the schema of its type, then
/// the sequence rules.
fn check(verifier: &mut Verifier, e: &Event) -> Result<(), String> {
    agui_protocol::model::check_event(e).map_err(|err| err.to_string())?;
    verifier.push(e).map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(parent: Option<&str>) -> RunIds {
        RunIds::new(
            "t",
            "r",
            parent,
            r#"{"threadId":"t","runId":"r","messages":[]}"#,
        )
    }

    fn reader(parent: Option<&str>) -> UpstreamReader {
        UpstreamReader::new(ids(parent), 1 << 20, 1000, Some("text/event-stream".into()))
    }

    fn feed(r: &mut UpstreamReader, lines: &[&str]) -> (Vec<Event>, Result<(), Close>) {
        let mut out = Vec::new();
        let mut wire = String::new();
        for l in lines {
            wire.push_str("data: ");
            wire.push_str(l);
            wire.push_str("\n\n");
        }
        let res = r
            .push(wire.as_bytes(), &mut out)
            .and_then(|()| r.finish(&mut out));
        (out, res)
    }

    #[test]
    fn foreign_ids_are_rewritten_and_kept() {
        let mut r = reader(Some("p"));
        let (out, res) = feed(
            &mut r,
            &[
                r#"{"type":"RUN_STARTED","threadId":"other","runId":"r2","parentRunId":"r2","x":1}"#,
                r#"{"type":"RUN_FINISHED","threadId":"other","runId":"r2"}"#,
            ],
        );
        res.unwrap();
        let v: Value = serde_json::from_str(out[0].json()).unwrap();
        assert_eq!(v["threadId"], "t");
        assert_eq!(v["runId"], "r");
        assert_eq!(v["parentRunId"], "p");
        assert_eq!(v["x"], 1);
        assert_eq!(
            v[UPSTREAM_IDS_KEY],
            serde_json::json!({"threadId":"other","runId":"r2","parentRunId":"r2"})
        );
        // A self-parent with no resolved parent is dropped, and kept aside.
        let mut r = reader(None);
        let (out, _) = feed(
            &mut r,
            &[r#"{"type":"RUN_STARTED","threadId":"t","runId":"r","parentRunId":"r"}"#],
        );
        let v: Value = serde_json::from_str(out[0].json()).unwrap();
        assert!(v.get("parentRunId").is_none());
        assert_eq!(v[UPSTREAM_IDS_KEY], serde_json::json!({"parentRunId":"r"}));
    }

    #[test]
    fn a_run_started_that_repeats_a_key_is_owned_too() {
        // Found by the upstream_reader fuzz target: a RUN_STARTED with a
        // key given twice could not be read field by field and was stored as
        // sent, with no parentRunId and the upstream's ids (the last
        // `runId`, the one JSON.parse reads, naming another run).
        let mut r = reader(Some("p"));
        let (out, res) = feed(
            &mut r,
            &[
                r#"{"type":"RUN_STARTED","threadId":"t","runId":"r","runId":"evil","x":1}"#,
                r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r"}"#,
            ],
        );
        res.unwrap();
        assert_eq!(
            out[0].json(),
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r","x":1,"parentRunId":"p","input":{"threadId":"t","runId":"r","messages":[]},"aguiUpstream":{"runId":"evil"}}"#
        );
    }

    #[test]
    fn matching_ids_keep_the_text() {
        let mut r = reader(None);
        let (out, res) = feed(
            &mut r,
            &[
                r#"{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","state":{},"messages":[],"tools":[],"context":[],"forwardedProps":{},"x":1}}"#,
            ],
        );
        assert_eq!(res.unwrap_err().code, "upstream_closed", "{out:?}");
        assert_eq!(
            out[0].json(),
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","state":{},"messages":[],"tools":[],"context":[],"forwardedProps":{},"x":1}}"#
        );
    }

    #[test]
    fn rejected_events_end_the_reading_and_are_not_kept() {
        let start = r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#;
        for (bad, reason) in [
            (
                r#"{"type":"MESSAGES_SNAPSHOT","messages":"x"}"#,
                "MESSAGES_SNAPSHOT",
            ),
            (
                r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}"#,
                "TEXT_MESSAGE_CONTENT",
            ),
        ] {
            let mut r = reader(None);
            let (out, res) = feed(&mut r, &[start, bad]);
            let close = res.unwrap_err();
            assert_eq!(close.code, "upstream_protocol");
            assert!(close.message.contains("event 1"), "{}", close.message);
            assert!(close.message.contains(reason), "{}", close.message);
            assert_eq!(out.len(), 1);
        }
        // A duplicate start, and arguments after a tool call's end.
        let mut r = reader(None);
        let (out, res) = feed(
            &mut r,
            &[
                start,
                r#"{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}"#,
                r#"{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}"#,
            ],
        );
        assert!(res.unwrap_err().message.contains("event 2"));
        assert_eq!(out.len(), 2);
        assert_eq!(r.closers().len(), 1);
        let mut r = reader(None);
        let (out, res) = feed(
            &mut r,
            &[
                start,
                r#"{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f"}"#,
                r#"{"type":"TOOL_CALL_END","toolCallId":"c"}"#,
                r#"{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{}"}"#,
            ],
        );
        let c = res.unwrap_err();
        assert!(
            c.message.contains("event 3 (TOOL_CALL_ARGS)"),
            "{}",
            c.message
        );
        assert_eq!(out.len(), 3);
        assert!(r.closers().is_empty());
    }

    #[test]
    fn garbage_and_cuts_are_named() {
        let mut r = reader(None);
        let mut out = Vec::new();
        r.push(b"<html>hello</html>", &mut out).unwrap();
        let c = r.finish(&mut out).unwrap_err();
        assert_eq!(c.code, "upstream_garbage");
        assert!(c.message.contains("text/event-stream"), "{}", c.message);
        let mut r = reader(None);
        let c = r.push(b"data: hello\n\n", &mut out).unwrap_err();
        assert_eq!(c.code, "upstream_garbage");
        let mut r = reader(None);
        let mut out = Vec::new();
        r.push(
            b"data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\ndata: {\"type\":\"TEXT_MES",
            &mut out,
        )
        .unwrap();
        let c = r.finish(&mut out).unwrap_err();
        assert_eq!(c.code, "upstream_closed");
        assert_eq!(out.len(), 1);
    }
}
