//! The check of the `upstream_reader` fuzz target, shared with its
//! regression replay (`crates/agui-server/tests/fuzz_regressions.rs`).
//!
//! Fuzzes the gateway's reading of an upstream body: arbitrary bytes, split
//! at arbitrary points. No panic; the same events and the same close
//! whatever the split; the first event kept is a `RUN_STARTED` with the
//! gateway's ids; and what a run would store (the events kept, then, when
//! the reading ends early, the closers and a `RUN_ERROR`) passes the official
//! client's checks (`@ag-ui/core` schema and `verifyEvents`).
//!
//! Input: one byte giving the number of cuts (mod 8), that many bytes giving
//! the cut points (as fractions of the body), then the body.

use agui_protocol::Event;
use agui_server::upstream::{Close, RunIds, UpstreamReader};

fn ids() -> RunIds {
    RunIds::new(
        "t",
        "r",
        Some("p"),
        r#"{"threadId":"t","runId":"r","parentRunId":"p","messages":[]}"#,
    )
}

/// Reads `body` pushed in pieces ending at `cuts`; returns what a run
/// stores: the events kept, and the close (with closers and `RUN_ERROR`).
fn read(body: &[u8], cuts: &[usize], max_event: usize) -> (Vec<String>, Option<Close>) {
    let mut r = UpstreamReader::new(ids(), max_event, 64, Some("text/event-stream".into()));
    let mut out: Vec<Event> = Vec::new();
    let mut last = 0;
    let mut close = None;
    for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
        let cut = cut.clamp(last, body.len());
        if let Err(c) = r.push(&body[last..cut], &mut out) {
            close = Some(c);
            break;
        }
        last = cut;
    }
    if close.is_none() && !r.ended() {
        close = r.finish(&mut out).err();
    }
    if let Some(c) = close.as_ref().filter(|_| !r.ended()) {
        if !r.started() {
            let s = r.ids().synthetic_started();
            r.own(&s);
            out.push(s);
        }
        out.extend(r.closers());
        let e = Event::from_json(
            &serde_json::json!({"type":"RUN_ERROR","message":c.message,"code":c.code}).to_string(),
        )
        .expect("a RUN_ERROR");
        r.own(&e);
        out.push(e);
    }
    (out.iter().map(|e| e.json().to_owned()).collect(), close)
}

/// Panics when the property does not hold for `data`.
pub fn check(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = (n % 8) as usize;
    if rest.len() < n {
        return;
    }
    let (picks, body) = rest.split_at(n);
    let mut cuts: Vec<usize> = picks
        .iter()
        .map(|&p| p as usize * body.len() / 255)
        .collect();
    cuts.sort_unstable();
    let max_event = if n % 2 == 1 { 128 } else { 1 << 20 };
    let whole = read(body, &[], max_event);
    let split = read(body, &cuts, max_event);
    assert_eq!(whole, split, "cuts at {cuts:?}");
    let (events, _) = whole;
    if events.is_empty() {
        return;
    }
    let parsed: Vec<Event> = events
        .iter()
        .map(|t| Event::from_json(t).unwrap())
        .collect();
    let first: serde_json::Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(first["type"], "RUN_STARTED");
    assert_eq!(first["threadId"], "t");
    assert_eq!(first["runId"], "r");
    assert_eq!(first["parentRunId"], "p");
    for e in &parsed {
        agui_protocol::model::parse_event(e)
            .unwrap_or_else(|err| panic!("stored event fails the schema: {err}"));
    }
    agui_protocol::verify::verify_events(parsed.iter())
        .unwrap_or_else(|(i, err)| panic!("stored event {i} fails verifyEvents: {err}"));
}
