//! Issue 10, the gateway's half: no run is lost or misstated, whatever the
//! upstream, the store or the client does. Each test failed before its fix.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::*;
use agui_protocol::Event;
use agui_protocol::verify::verify_events;
use agui_server::{Auth, GatewayConfig, SessionMode, config::parse_agent_flag};
use agui_store::conformance::hooked::{Hooked, Hooks};
use agui_store::{
    AppendRequest, Backend, Batch, Commit, EventPage, MemoryStore, Result, RunRecord, Store,
    StoreError,
};
use axum::Router;
use axum::body::Body;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn with_agents(agents: &[&str]) -> GatewayConfig {
    GatewayConfig {
        agents: agents
            .iter()
            .map(|a| parse_agent_flag(a, SessionMode::Client).unwrap())
            .collect(),
        ..GatewayConfig::default()
    }
}

/// Failures on purpose, in front of a memory store: appends holding a
/// terminal event (or every append), and subscriptions that break after
/// their first event.
#[derive(Default)]
struct Faults {
    not_ready: AtomicBool,
    fail_terminal: AtomicBool,
    fail_all: AtomicBool,
    break_subscriptions: AtomicBool,
}

#[async_trait::async_trait]
impl Hooks for Faults {
    async fn ready(&self, inner: &dyn Backend) -> Result<()> {
        if self.not_ready.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable(
                "the store could not flush its log to disk earlier (test)",
            ));
        }
        inner.ready().await
    }

    async fn commit(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        batch: &Batch,
    ) -> Result<Commit> {
        let terminal = batch
            .events
            .iter()
            .any(|e| e.event_type().is_run_terminal());
        if self.fail_all.load(Ordering::SeqCst)
            || (terminal && self.fail_terminal.load(Ordering::SeqCst))
        {
            return Err(StoreError::unavailable("the disk is gone (test)"));
        }
        inner.commit(tenant, thread, batch).await
    }
    /// With `break_subscriptions`, the log reads as damaged after its first
    /// event (what a subscription's catch-up then meets).
    async fn read(
        &self,
        inner: &dyn Backend,
        t: &str,
        th: &str,
        from: u64,
        limit: usize,
    ) -> Result<EventPage> {
        if !self.break_subscriptions.load(Ordering::SeqCst) {
            return inner.read(t, th, from, limit).await;
        }
        if from > 1 {
            return Err(StoreError::corrupt(
                "chunk 7 of the thread fails its checksum (test)",
            ));
        }
        inner.read(t, th, from, 1).await
    }
}

/// A memory store behind [`Faults`].
fn faulty() -> Arc<Hooked<Faults>> {
    Arc::new(Hooked::new(MemoryStore::new(), Faults::default()))
}

async fn events_of(base: &str, thread: &str) -> Vec<Frame> {
    let text = client()
        .get(format!("{base}/threads/{thread}/events"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    parse_sse(&text)
}

fn verify_frames(frames: &[Frame]) {
    let events: Vec<Event> = frames
        .iter()
        .map(|f| Event::from_json(&f.data.to_string()).unwrap())
        .collect();
    verify_events(events.iter()).unwrap_or_else(|(i, e)| panic!("stored event {i}: {e}"));
}

#[tokio::test]
async fn a_failed_append_of_the_terminal_batch_reaches_the_client_as_run_error() {
    logged();
    let faulty = faulty();
    let store = Store::from_arc(faulty.clone());
    faulty.hooks().fail_terminal.store(true, Ordering::SeqCst);
    let g = start_with(store.clone(), GatewayConfig::default()).await;
    let (status, frames, _) = run(&g.base, "demo", &input("t-fails-at-end", "r", "hello")).await;
    assert_eq!(status, 200);
    let last = frames.last().expect("the client gets frames");
    assert_eq!(last.ty(), "RUN_ERROR");
    assert_eq!(last.data["code"], "store_error");
    assert_eq!(
        last.id, None,
        "nothing more is stored: the error is unnumbered"
    );
    // Every numbered frame the client saw is stored.
    let stored = events_of(&g.base, "t-fails-at-end").await;
    let seen: Vec<&Frame> = frames.iter().filter(|f| f.id.is_some()).collect();
    assert_eq!(stored.len(), seen.len());
    // And when even the first batch fails, the client still hears of it.
    faulty.hooks().fail_all.store(true, Ordering::SeqCst);
    let (status, frames, _) = run(&g.base, "demo", &input("t-fails-at-once", "r", "hello")).await;
    assert_eq!(status, 200);
    let types: Vec<&str> = frames.iter().map(Frame::ty).collect();
    assert_eq!(types, vec!["RUN_ERROR"]);
    assert_eq!(frames[0].data["code"], "store_error");
    faulty.hooks().fail_all.store(false, Ordering::SeqCst);
    // Each failure is logged at error level, naming the thread and the run.
    for thread in ["t-fails-at-end", "t-fails-at-once"] {
        let lines = error_lines_with(&["cannot store the run's events", thread, "run=r"]);
        assert_eq!(lines.len(), 1, "{thread}: {lines:?}");
    }
    // A run whose first events were stored and whose end the store
    // failed: once the store takes writes again, the run ends in its log
    // as its client saw it, and its thread takes new runs. (A database
    // that restarted under a run left it `running`, and its thread refused
    // every new run until the gateway restarted.)
    faulty.hooks().fail_terminal.store(true, Ordering::SeqCst);
    let mut slow = input("t-recovers", "r", "one two three four five");
    slow["forwardedProps"] = json!({"demo": {"delayMs": 20}});
    let (status, frames, _) = run(&g.base, "demo", &slow).await;
    assert_eq!(status, 200);
    assert_eq!(frames.last().unwrap().data["code"], "store_error");
    assert!(frames.iter().filter(|f| f.id.is_some()).count() > 1);
    faulty.hooks().fail_terminal.store(false, Ordering::SeqCst);
    wait_for_run_status(&g.base, "t-recovers", "r", "error").await;
    let stored = events_of(&g.base, "t-recovers").await;
    let last = stored.last().unwrap();
    assert_eq!(
        (last.ty(), &last.data["code"]),
        ("RUN_ERROR", &json!("store_error"))
    );
    verify_frames(&stored);
    let (status, frames, _) = run(&g.base, "demo", &input("t-recovers", "r2", "again")).await;
    assert_eq!(status, 200);
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    g.shutdown().await;
}

/// The error-level lines logged so far that contain every one of `words`.
fn error_lines_with(words: &[&str]) -> Vec<String> {
    let text = String::from_utf8_lossy(&logged().lock().unwrap()).into_owned();
    text.lines()
        .filter(|l| l.contains("ERROR") && words.iter().all(|w| l.contains(w)))
        .map(str::to_owned)
        .collect()
}

/// An upstream that answers after `delay` with a short, valid run.
fn slow_upstream(delay: Duration) -> Router {
    Router::new().route(
        "/",
        post(move |body: axum::body::Bytes| async move {
            tokio::time::sleep(delay).await;
            let v: Value = serde_json::from_slice(&body).unwrap();
            let (t, r) = (v["threadId"].clone(), v["runId"].clone());
            let text = format!(
                "data: {}\n\ndata: {}\n\n",
                json!({"type":"RUN_STARTED","threadId":t,"runId":r}),
                json!({"type":"RUN_FINISHED","threadId":t,"runId":r})
            );
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from(text))
                .unwrap()
        }),
    )
}

#[tokio::test]
async fn delete_while_a_run_has_stored_nothing_yet_is_409() {
    let up = serve_upstream(slow_upstream(Duration::from_millis(800))).await;
    let g = start(with_agents(&[&format!("slow={up}/")])).await;
    let (_, first, _) = run(&g.base, "slow", &input("t", "r1", "one")).await;
    assert_eq!(first.last().unwrap().ty(), "RUN_FINISHED");
    // The second run's upstream is still silent: nothing of it is stored.
    let base = g.base.clone();
    let second = tokio::spawn(async move { run(&base, "slow", &input("t", "r2", "two")).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let resp = client()
        .delete(format!("{}/threads/t", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "run_in_flight");
    let (_, frames, _) = second.await.unwrap();
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    let thread = wait_run_end(&g.base, "t").await;
    assert_eq!(thread["runCount"], 2);
    // Once nothing is in flight, DELETE works.
    let resp = client()
        .delete(format!("{}/threads/t", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    g.shutdown().await;
}

#[tokio::test]
async fn another_gateway_on_the_same_store_sees_a_run_that_stored_nothing_yet() {
    // Two gateways sharing one store, as replicas share a PostgreSQL
    // database: the store's claims make a run in flight visible to both.
    let up = serve_upstream(slow_upstream(Duration::from_millis(800))).await;
    let store: Store = Store::memory();
    let a = start_with(store.clone(), with_agents(&[&format!("slow={up}/")])).await;
    let b = start_with(store.clone(), with_agents(&[&format!("slow={up}/")])).await;
    let (_, first, _) = run(&a.base, "slow", &input("t", "r1", "one")).await;
    assert_eq!(first.last().unwrap().ty(), "RUN_FINISHED");
    let base = a.base.clone();
    let second = tokio::spawn(async move { run(&base, "slow", &input("t", "r2", "two")).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let resp = client()
        .delete(format!("{}/threads/t", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    let (status, _, text) = run(&b.base, "slow", &input("t", "r3", "three")).await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("run_in_flight"), "{text}");
    let (_, frames, _) = second.await.unwrap();
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    // Released at the run's end: the other gateway can go on at once.
    let (_, frames, _) = run(&b.base, "slow", &input("t", "r3", "three")).await;
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    let resp = client()
        .delete(format!("{}/threads/t", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    a.shutdown().await;
    b.shutdown().await;
}

fn sse_upstream(text: String) -> Router {
    Router::new().route(
        "/",
        post(move || {
            let text = text.clone();
            async move {
                axum::response::Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Body::from(text))
                    .unwrap()
            }
        }),
    )
}

fn wire(events: &[Value]) -> String {
    events.iter().map(|e| format!("data: {e}\n\n")).collect()
}

#[tokio::test]
async fn the_gateway_owns_run_started_ids() {
    let up = serve_upstream(sse_upstream(wire(&[
        json!({"type":"RUN_STARTED","threadId":"elsewhere","runId":"mine","parentRunId":"mine"}),
        json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
        json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hi"}),
        json!({"type":"TEXT_MESSAGE_END","messageId":"m"}),
        json!({"type":"RUN_FINISHED","threadId":"elsewhere","runId":"mine"}),
    ])))
    .await;
    let g = start(with_agents(&[&format!("odd={up}/")])).await;
    for (run_id, parent) in [("r1", None), ("r2", Some("r1"))] {
        let (_, frames, _) = run(&g.base, "odd", &input("t", run_id, "x")).await;
        let started = &frames[0].data;
        assert_eq!(started["threadId"], "t");
        assert_eq!(started["runId"], run_id);
        match parent {
            Some(p) => assert_eq!(started["parentRunId"], p),
            None => assert!(started.get("parentRunId").is_none()),
        }
        assert_eq!(
            started["aguiUpstream"],
            json!({"threadId":"elsewhere","runId":"mine","parentRunId":"mine"})
        );
        assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    }
    let (_, thread) = get_json(&format!("{}/threads/t", g.base)).await;
    let runs: Vec<&str> = thread["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert_eq!(runs, vec!["r1", "r2"]);
    assert_eq!(thread["tree"][0]["children"][0]["runId"], "r2");
    let (s, msgs) = get_json(&format!("{}/threads/t/messages", g.base)).await;
    assert_eq!(s, 200, "{msgs}");
    let (s, _) = get_json(&format!("{}/threads/t/runs/r2/artifact", g.base)).await;
    assert_eq!(s, 200);
    g.shutdown().await;
}

#[tokio::test]
async fn upstream_events_the_client_rejects_are_never_stored() {
    let start_ev = json!({"type":"RUN_STARTED","threadId":"t","runId":"r"});
    let cases: Vec<(&str, Vec<Value>, usize, &str)> = vec![
        (
            "snapshot",
            vec![
                start_ev.clone(),
                json!({"type":"MESSAGES_SNAPSHOT","messages":"x"}),
            ],
            1,
            "MESSAGES_SNAPSHOT",
        ),
        (
            "nostart",
            vec![
                start_ev.clone(),
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}),
            ],
            1,
            "TEXT_MESSAGE_CONTENT",
        ),
        (
            "dupstart",
            vec![
                start_ev.clone(),
                json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
                json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
            ],
            2,
            "TEXT_MESSAGE_START",
        ),
        (
            "argsafterend",
            vec![
                start_ev.clone(),
                json!({"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f"}),
                json!({"type":"TOOL_CALL_END","toolCallId":"c"}),
                json!({"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{}"}),
            ],
            3,
            "TOOL_CALL_ARGS",
        ),
    ];
    let mut agents = Vec::new();
    for (name, events, _, _) in &cases {
        let mut events = events.clone();
        events.push(json!({"type":"RUN_FINISHED","threadId":"t","runId":"r"}));
        let up = serve_upstream(sse_upstream(wire(&events))).await;
        agents.push(format!("{name}={up}/"));
    }
    let refs: Vec<&str> = agents.iter().map(String::as_str).collect();
    let g = start(with_agents(&refs)).await;
    for (name, events, index, ty) in &cases {
        let thread = format!("t-{name}");
        let (_, frames, _) = run(&g.base, name, &input(&thread, "r", "x")).await;
        let last = frames.last().unwrap();
        assert_eq!(last.ty(), "RUN_ERROR", "{name}");
        assert_eq!(last.data["code"], "upstream_protocol", "{name}");
        let message = last.data["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("event {index} ({ty})")),
            "{name}: {message}"
        );
        // Nothing of the rejected event: the stored log is what the client
        // saw, and it passes the client's rules.
        let stored = events_of(&g.base, &thread).await;
        assert_eq!(stored.len(), frames.len(), "{name}");
        for (a, b) in stored.iter().zip(&frames) {
            assert_eq!(a.data, b.data, "{name}");
        }
        assert!(stored.len() <= events.len() + 2, "{name}");
        verify_frames(&stored);
        let (s, body) = get_json(&format!("{}/threads/{thread}/messages", g.base)).await;
        assert_eq!(s, 200, "{name}: {body}");
        let resp = client()
            .post(format!("{}/agents/{name}/connect", g.base))
            .json(&input(&thread, "c", ""))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{name}");
    }
    g.shutdown().await;
}

#[tokio::test]
async fn a_stored_log_the_client_rejects_restores_as_far_as_it_goes() {
    // Stored by an older version, which kept upstream events unchecked.
    let store: Store = Store::memory();
    let events: Vec<Event> = [
        json!({"type":"RUN_STARTED","threadId":"t","runId":"r1","input":{"threadId":"t","runId":"r1","messages":[{"id":"u1","role":"user","content":"hi"}]}}),
        json!({"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}),
        json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"kept"}),
        json!({"type":"TEXT_MESSAGE_END","messageId":"m1"}),
        json!({"type":"MESSAGES_SNAPSHOT","messages":"x"}),
        json!({"type":"RUN_FINISHED","threadId":"t","runId":"r1"}),
    ]
    .iter()
    .map(|v| Event::from_json(&v.to_string()).unwrap())
    .collect();
    store
        .append("default", "t", AppendRequest::new(events))
        .await
        .unwrap();
    let g = start_with(store, GatewayConfig::default()).await;
    let (s, body) = get_json(&format!("{}/threads/t/messages", g.base)).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["messages"][1]["content"], "kept", "{body}");
    assert!(
        body["warnings"][0]
            .as_str()
            .unwrap()
            .contains("MESSAGES_SNAPSHOT"),
        "{body}"
    );
    // The thread goes on: a new run from it, and connect.
    let (_, frames, _) = run(&g.base, "demo", &input("t", "r2", "again")).await;
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    let resp = client()
        .post(format!("{}/agents/demo/connect", g.base))
        .json(&input("t", "c", ""))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    g.shutdown().await;
}

#[tokio::test]
async fn a_damaged_chunk_ends_the_event_stream_with_a_visible_error() {
    logged();
    let faulty = faulty();
    let store = Store::from_arc(faulty.clone());
    let g = start_with(store.clone(), GatewayConfig::default()).await;
    let (_, frames, _) = run(&g.base, "demo", &input("t-damaged", "r", "hello")).await;
    assert!(frames.len() > 2);
    faulty
        .hooks()
        .break_subscriptions
        .store(true, Ordering::SeqCst);
    let resp = client()
        .get(format!("{}/threads/t-damaged/events", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
    assert_eq!(parse_sse(&text).len(), 2, "{text}");
    assert!(
        text.contains("event: error\ndata: {\"error\":{\"code\":\"store_error\""),
        "{text}"
    );
    // And the gateway's log says so at error level, naming the thread.
    let lines = error_lines_with(&["cannot read the thread's stored events", "t-damaged"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    g.shutdown().await;
}

#[tokio::test]
async fn last_event_id_at_u64_max_replays_nothing() {
    let g = start(GatewayConfig::default()).await;
    run(&g.base, "demo", &input("t", "r", "hello")).await;
    let resp = client()
        .get(format!("{}/threads/t/events", g.base))
        .header("Last-Event-ID", u64::MAX.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.text().await.unwrap(), "");
    let resp = client()
        .get(format!("{}/threads/t/events?after={}", g.base, u64::MAX))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.text().await.unwrap(), "");
    g.shutdown().await;
}

async fn json_error(resp: reqwest::Response) -> (u16, String) {
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = resp.text().await.unwrap();
    assert!(ct.starts_with("application/json"), "{status} {ct}: {text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    (status, v["error"]["code"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn every_error_body_is_json() {
    let mut config = GatewayConfig::default();
    config.limits.max_body_bytes = 1000;
    let g = start(config).await;
    let c = client();
    let b = &g.base;
    let cases = [
        (c.get(format!("{b}/nowhere")), 404, "not_found"),
        (c.put(format!("{b}/threads")), 405, "method_not_allowed"),
        (
            c.get(format!("{b}/agents/demo/run")),
            405,
            "method_not_allowed",
        ),
        (
            c.get(format!("{b}/threads/t/events?after=abc")),
            400,
            "bad_request",
        ),
        (c.get(format!("{b}/threads?limit=-1")), 400, "bad_request"),
        // An escape that is not UTF-8 (it reached the handler as U+FFFD).
        (c.get(format!("{b}/threads?prefix=%FF")), 400, "bad_request"),
        (c.get(format!("{b}/threads/%FF%FE")), 400, "bad_request"),
        (
            c.get(format!("{b}/threads/{}", "x".repeat(10_000))),
            414,
            "uri_too_long",
        ),
        (
            c.post(format!("{b}/demo/agent")).body("x".repeat(2000)),
            413,
            "body_too_large",
        ),
        (
            c.post(format!("{b}/agents/demo/connect"))
                .body("x".repeat(2000)),
            413,
            "body_too_large",
        ),
        (
            c.post(format!("{b}/agents/demo/run"))
                .body("x".repeat(2000)),
            413,
            "body_too_large",
        ),
    ];
    for (req, status, code) in cases {
        let (s, got) = json_error(req.send().await.unwrap()).await;
        assert_eq!((s, got.as_str()), (status, code));
    }
    g.shutdown().await;
}

#[tokio::test]
async fn the_demo_agent_route_sits_behind_auth() {
    let config = GatewayConfig {
        auth: Auth::Tokens([("tok".to_owned(), "acme".to_owned())].into()),
        ..GatewayConfig::default()
    };
    let g = start(config).await;
    let url = format!("{}/demo/agent", g.base);
    let resp = client()
        .post(&url)
        .json(&input("t", "r", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(json_error(resp).await, (401, "unauthorized".to_owned()));
    let resp = client()
        .post(&url)
        .bearer_auth("tok")
        .json(&input("t", "r", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let frames = parse_sse(&resp.text().await.unwrap());
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    g.shutdown().await;
}

#[tokio::test]
async fn upstream_error_codes_say_what_happened() {
    let html = serve_upstream(Router::new().route(
        "/",
        post(|| async {
            axum::response::Response::builder()
                .header("content-type", "text/html")
                .body(Body::from("<html>not an agent</html>"))
                .unwrap()
        }),
    ))
    .await;
    // A frame cut in the middle, then the connection closes cleanly.
    let cut = serve_upstream(sse_upstream(
        "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\ndata: {\"type\":\"TEXT_MESSAGE_ST"
            .to_owned(),
    ))
    .await;
    let g = start(with_agents(&[
        &format!("html={html}/"),
        &format!("cut={cut}/"),
    ]))
    .await;
    let (_, f, _) = run(&g.base, "html", &input("t1", "r", "x")).await;
    let last = &f.last().unwrap().data;
    assert_eq!(last["code"], "upstream_garbage");
    assert!(
        last["message"].as_str().unwrap().contains("text/html"),
        "{last}"
    );
    let (_, f, _) = run(&g.base, "cut", &input("t2", "r", "x")).await;
    assert_eq!(f.last().unwrap().data["code"], "upstream_closed");
    g.shutdown().await;
}

#[tokio::test]
async fn slow_clients_are_timed_out_and_connections_are_capped() {
    let mut config = GatewayConfig::default();
    config.limits.header_read_timeout = Duration::from_millis(500);
    config.limits.body_read_timeout = Duration::from_millis(500);
    config.limits.max_connections = 2;
    let g = start(config).await;
    let addr = g.base.trim_start_matches("http://").to_owned();
    // A request head that never ends: the connection is closed.
    let mut partial = tokio::net::TcpStream::connect(&addr).await.unwrap();
    partial
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), partial.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the partial head held the connection");
    // A body that never arrives: 408 in JSON.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(
        b"POST /agents/demo/run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"thr",
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("body_timeout"), "{text}");
    drop(slow);
    drop(partial);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Two idle connections hold both slots; the third is refused in JSON.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut b = vec![0u8; 1024];
        let _ = s.read(&mut b).await.unwrap();
        held.push(s);
    }
    let mut third = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("too_many_connections"), "{text}");
    drop(held);
    g.shutdown().await;
}

/// Found by the chaos soak (crates/agui-cli/tests/chaos.rs): the run tree
/// of `GET /threads/{id}` nests as deep as the thread's chain of runs, and
/// was built, serialized and dropped as a recursive `Value`: a thread of a
/// few thousand turns overflowed the stack and aborted the whole gateway
/// (3,000 chained runs were enough), and beyond 10,000 levels runs were
/// silently left out of the tree. Now it is written without recursion, in
/// full, and the gateway stays up.
#[tokio::test]
async fn a_thread_of_twenty_thousand_chained_runs_lists_without_overflowing_the_stack() {
    const N: usize = 20_000;
    let g = start(with_agents(&[])).await;
    let mut events = Vec::with_capacity(2 * N);
    for i in 0..N {
        let mut started = json!({"type":"RUN_STARTED","threadId":"t","runId":format!("r{i}")});
        if i > 0 {
            started["parentRunId"] = json!(format!("r{}", i - 1));
        }
        events.push(Event::from_json(&started.to_string()).unwrap());
        let finished = json!({"type":"RUN_FINISHED","threadId":"t","runId":format!("r{i}")});
        events.push(Event::from_json(&finished.to_string()).unwrap());
    }
    for batch in events.chunks(2_000) {
        g.store
            .append("default", "t", AppendRequest::new(batch.to_vec()))
            .await
            .unwrap();
    }
    let resp = client()
        .get(format!("{}/threads/t", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let body = resp.text().await.unwrap();
    // Too deep for serde_json's own parser (128 levels), as for many
    // clients; the runs come first and parse on their own.
    let at = body.find("\"runs\":").unwrap() + "\"runs\":".len();
    let runs: Value = serde_json::Deserializer::from_str(&body[at..])
        .into_iter::<Value>()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(runs.as_array().unwrap().len(), N);
    // The tree: one root, each run the only child of the one before, in
    // full (every run named once more, after the runs list).
    let tree = &body[body.find("\"tree\":").unwrap()..];
    let node = |i: usize| {
        format!("{{\"runId\":\"r{i}\",\"status\":\"finished\",\"eventCount\":2,\"children\":[")
    };
    let chain: String = (0..N).map(node).collect();
    let closing = "]}".repeat(N);
    assert!(
        tree.starts_with(&format!("\"tree\":[{chain}{closing}],")),
        "{}",
        &tree[..200]
    );
    // Still up.
    let (status, _) = get_json(&format!("{}/healthz", g.base)).await;
    assert_eq!(status, 200);
}

/// The official client's checks on stored frames: schema, then sequence.
fn check_stored(frames: &[Frame]) {
    for f in frames {
        let e = Event::from_json(&f.data.to_string()).unwrap();
        agui_protocol::model::parse_event(&e)
            .unwrap_or_else(|err| panic!("stored {}: {err}", f.data));
    }
    verify_frames(frames);
}

/// Found by the chaos soak: an upstream `RUN_STARTED` the official client
/// rejects was not stored, yet counted as the run's start, so the log got a
/// lone `RUN_ERROR` (no `RUN_STARTED`, no run in the run index, `agui
/// verify` failing, later runs of the thread refused as branches of an
/// unknown run). Now the gateway writes its own `RUN_STARTED` first.
#[tokio::test]
async fn a_rejected_run_started_is_replaced_by_the_gateways_own() {
    let up = serve_upstream(sse_upstream(wire(&[
        json!({"type":"RUN_STARTED","threadId":"t","runId":"r1","timestamp":"noon"}),
        json!({"type":"RUN_FINISHED","threadId":"t","runId":"r1"}),
    ])))
    .await;
    let g = start(with_agents(&[&format!("odd={up}/"), "demo=demo"])).await;
    let (status, frames, _) = run(&g.base, "odd", &input("t", "r1", "x")).await;
    assert_eq!(status, 200);
    let types: Vec<&str> = frames.iter().map(Frame::ty).collect();
    assert_eq!(types, ["RUN_STARTED", "RUN_ERROR"]);
    assert_eq!(frames[0].data["runId"], "r1");
    assert!(frames[0].data.get("timestamp").is_none());
    assert_eq!(frames[1].data["code"], "upstream_protocol");
    let stored = events_of(&g.base, "t").await;
    let data = |f: &[Frame]| f.iter().map(|x| (x.id, x.data.clone())).collect::<Vec<_>>();
    assert_eq!(data(&stored), data(&frames));
    check_stored(&stored);
    let (_, thread) = get_json(&format!("{}/threads/t", g.base)).await;
    assert_eq!(thread["runs"][0]["runId"], "r1");
    assert_eq!(thread["runs"][0]["status"], "error");
    // The thread goes on: a branch from that run, then its restore.
    let mut next = input("t", "r2", "again");
    next["parentRunId"] = json!("r1");
    let (status, frames, _) = run(&g.base, "demo", &next).await;
    assert_eq!(status, 200);
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    check_stored(&events_of(&g.base, "t").await);
    let (status, _) = get_json(&format!("{}/threads/t/messages", g.base)).await;
    assert_eq!(status, 200);
}

/// Found by the chaos soak: a client input with `"parentRunId": null` (read
/// as no parent) was forwarded as it was; the stored `RUN_STARTED.input`
/// then failed the official client's schema, the run ended with
/// `upstream_protocol` blaming the upstream, and its log held a lone
/// `RUN_ERROR`. The same for any input the client's schema refuses (a
/// message content that is a number): now refused at the door with 422
/// `invalid_input`, before anything is stored or sent upstream.
#[tokio::test]
async fn client_inputs_are_checked_against_the_schema_of_the_stored_run_started() {
    let g = start(with_agents(&["demo=demo"])).await;
    let mut body = input("t", "r1", "hi");
    body["parentRunId"] = Value::Null;
    let (status, frames, _) = run(&g.base, "demo", &body).await;
    assert_eq!(status, 200);
    assert_eq!(frames[0].ty(), "RUN_STARTED");
    assert!(frames[0].data["input"].get("parentRunId").is_none());
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    check_stored(&events_of(&g.base, "t").await);

    let mut bad = input("u", "r1", "hi");
    bad["messages"][0]["content"] = json!(5);
    let resp = client()
        .post(format!("{}/agents/demo/run", g.base))
        .json(&bad)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 422);
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["code"], "invalid_input", "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("RunAgentInput messages[0].content: "),
        "{message}"
    );
    let (status, _) = get_json(&format!("{}/threads/u", g.base)).await;
    assert_eq!(status, 404, "nothing of a refused input is stored");
}

/// `/readyz` follows the store: 503 `store_unavailable`, with the store's
/// reason, while it refuses writes; `/healthz` (liveness) stays 200.
#[tokio::test]
async fn readiness_follows_the_store() {
    let faulty = faulty();
    let store = Store::from_arc(faulty.clone());
    let g = start_with(store.clone(), GatewayConfig::default()).await;
    let (status, body) = get_json(&format!("{}/readyz", g.base)).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ready")));
    faulty.hooks().not_ready.store(true, Ordering::SeqCst);
    let (status, body) = get_json(&format!("{}/readyz", g.base)).await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "store_unavailable");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("could not flush"),
        "{body}"
    );
    let (status, _) = get_json(&format!("{}/healthz", g.base)).await;
    assert_eq!(status, 200);
    let metrics = |base: String| async move {
        client()
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    assert!(
        metrics(g.base.clone())
            .await
            .contains("\nagui_store_ready 0\n")
    );
    faulty.hooks().not_ready.store(false, Ordering::SeqCst);
    assert!(
        metrics(g.base.clone())
            .await
            .contains("\nagui_store_ready 1\n")
    );
    let (status, _) = get_json(&format!("{}/readyz", g.base)).await;
    assert_eq!(status, 200);
    // A closed store is not ready either.
    store.close().await.unwrap();
    let (status, body) = get_json(&format!("{}/readyz", g.base)).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (503, &json!("store_unavailable"))
    );
}

/// Once the gateway starts shutting down, `/readyz` says so (to a client
/// whose connection is still served), whatever the store says; `/healthz`
/// still answers.
#[tokio::test]
async fn readiness_ends_when_the_gateway_shuts_down() {
    let g = start(GatewayConfig::default()).await;
    let (status, _) = get_json(&format!("{}/readyz", g.base)).await;
    assert_eq!(status, 200);
    g.gw.begin_shutdown();
    let (status, body) = get_json(&format!("{}/readyz", g.base)).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (503, &json!("shutting_down")),
        "{body}"
    );
    let (status, _) = get_json(&format!("{}/healthz", g.base)).await;
    assert_eq!(status, 200);
    g.shutdown().await;
}

/// Fails claim releases while `fail_release` is set: what a database that
/// restarted under the gateway does to the release at a run's end.
#[derive(Default)]
struct ReleaseFaults {
    fail_release: AtomicBool,
    failed: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl Hooks for ReleaseFaults {
    async fn release_thread(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        run: &str,
    ) -> Result<()> {
        if self.fail_release.load(Ordering::SeqCst) {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::unavailable("the database restarts (test)"));
        }
        inner.release_thread(tenant, thread, run).await
    }
}

/// A run whose claim the store failed to release at its end: while the
/// release fails the claim holds the thread (409 `run_in_flight`); once the
/// store takes it again, the gateway releases it in the background and the
/// thread takes new runs, without a restart.
#[tokio::test]
async fn a_claim_whose_release_failed_is_released_once_the_store_takes_it() {
    let hooked = Arc::new(Hooked::new(MemoryStore::new(), ReleaseFaults::default()));
    let backend = hooked.hooks();
    backend.fail_release.store(true, Ordering::SeqCst);
    let g = start_with(Store::from_arc(hooked.clone()), GatewayConfig::default()).await;
    let (status, frames, body) = run(&g.base, "demo", &input("t-claim", "r1", "hello")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    assert!(backend.failed.load(Ordering::SeqCst) >= 1);
    // The claim is left: the thread refuses a new run.
    let (status, _, body) = run(&g.base, "demo", &input("t-claim", "r2", "again")).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("run_in_flight"), "{body}");
    // A background retry fails too while the store refuses.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while backend.failed.load(Ordering::SeqCst) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the release was never tried again"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    backend.fail_release.store(false, Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, frames, body) = run(&g.base, "demo", &input("t-claim", "r2", "again")).await;
        if status == 200 {
            assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED", "{body}");
            break;
        }
        assert_eq!(status, 409, "{body}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the thread still refuses new runs: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let thread = wait_for_run_status(&g.base, "t-claim", "r2", "finished").await;
    assert_eq!(
        ids_and_statuses(&thread["runs"]),
        [
            ("r1".to_owned(), "finished".to_owned()),
            ("r2".to_owned(), "finished".to_owned())
        ]
    );
    g.shutdown().await;
}

/// Fails every append of a run's end to one thread while `on`: the first
/// thread such an append is tried on (a store fault that hits one close
/// and lasts).
#[derive(Default)]
struct FailOneClose {
    on: AtomicBool,
    victim: std::sync::Mutex<Option<String>>,
    failed: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl Hooks for FailOneClose {
    async fn commit(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        batch: &Batch,
    ) -> Result<Commit> {
        let terminal = batch
            .events
            .iter()
            .any(|e| e.event_type().is_run_terminal());
        if terminal && self.on.load(Ordering::SeqCst) {
            let mut victim = self.victim.lock().unwrap();
            if victim.get_or_insert_with(|| thread.to_owned()) == thread {
                self.failed.fetch_add(1, Ordering::SeqCst);
                return Err(StoreError::unavailable("the database restarts (test)"));
            }
        }
        inner.commit(tenant, thread, batch).await
    }
}

/// Runs left in flight by a gateway that died, and a store fault on the
/// first close at the next start-up: the other runs are closed all the
/// same, and the one whose close failed is closed in the background once
/// the store takes it. (Recovery gave up at the first failed close: the
/// runs after it, already marked `interrupted`, never got their
/// `RUN_ERROR`, and no later recovery looks at `interrupted` runs again.)
#[tokio::test]
async fn a_failed_close_of_an_interrupted_run_leaves_no_run_unclosed() {
    let hooked = Arc::new(Hooked::new(MemoryStore::new(), FailOneClose::default()));
    let store = Store::from_arc(hooked.clone());
    let threads = ["t-int-0", "t-int-1", "t-int-2"];
    for t in threads {
        append_json(&store, t, half_run(t, "r", &format!("m-{t}"))).await;
    }
    hooked.hooks().on.store(true, Ordering::SeqCst);
    let g = start_with(store.clone(), GatewayConfig::default()).await;
    let closed = g.gw.recover_at_start().await;
    let victim = hooked.hooks().victim.lock().unwrap().clone();
    let victim = victim.expect("a close was tried");
    assert!(hooked.hooks().failed.load(Ordering::SeqCst) >= 1);
    // The runs whose close the store took are closed by the start-up, the
    // other one is not yet.
    let last_of = |t: &'static str| {
        let base = g.base.clone();
        async move { events_of(&base, t).await.last().unwrap().data.clone() }
    };
    for t in threads {
        let last = last_of(t).await;
        if t == victim {
            assert_eq!(last["type"], "TEXT_MESSAGE_CONTENT", "{t}: {last}");
        } else {
            assert_eq!(
                (&last["type"], &last["code"]),
                (&json!("RUN_ERROR"), &json!("interrupted")),
                "{t}: {last}"
            );
        }
    }
    hooked.hooks().on.store(false, Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for t in threads {
        loop {
            let last = last_of(t).await;
            if last["type"] == "RUN_ERROR" {
                assert_eq!(last["code"], "interrupted", "{t}: {last}");
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{t} never got its RUN_ERROR: {last}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let stored = events_of(&g.base, t).await;
        verify_frames(&stored);
        assert_eq!(
            stored.iter().filter(|f| f.ty() == "RUN_ERROR").count(),
            1,
            "{t}: one end"
        );
        wait_for_run_status(&g.base, t, "r", "interrupted").await;
    }
    // The start-up counts the runs it closed itself; the metric counts the
    // one closed later too.
    assert_eq!(closed.unwrap(), 2);
    let metric = &g.gw.metrics().runs_interrupted;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while metric.load(Ordering::SeqCst) < 3 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(metric.load(Ordering::SeqCst), 3);
    g.shutdown().await;
}

/// A run marked interrupted at start-up whose close the store fails, and
/// the gateway stops before the store takes writes again (its retry in
/// the background ends with it): the next start-up, on the healed store,
/// closes it, and only it. (Start-up looked at `running` runs only: the
/// run stayed `interrupted` with no `RUN_ERROR` in its log for good.)
/// Interrupted runs of the past are left as they are: one closed already,
/// and one whose thread went on with another run.
#[tokio::test]
async fn an_interrupted_run_whose_close_failed_is_closed_by_the_next_start() {
    let hooked = Arc::new(Hooked::new(MemoryStore::new(), FailOneClose::default()));
    let store = Store::from_arc(hooked.clone());
    let append = |thread: &'static str, events: Vec<Value>| {
        let store = store.clone();
        async move { append_json(&store, thread, events).await }
    };
    let t = "t-unclosed";
    append(t, half_run(t, "r", "m")).await;
    // Closed at an earlier start.
    let closed = "t-closed-before";
    append(
        closed,
        vec![
            json!({"type":"RUN_STARTED","threadId":closed,"runId":"c"}),
            json!({"type":"RUN_ERROR","message":"gone","code":"interrupted"}),
        ],
    )
    .await;
    // Interrupted by the next run's start.
    let followed = "t-followed";
    append(
        followed,
        vec![
            json!({"type":"RUN_STARTED","threadId":followed,"runId":"f1"}),
            json!({"type":"RUN_STARTED","threadId":followed,"runId":"f2"}),
            json!({"type":"RUN_FINISHED","threadId":followed,"runId":"f2"}),
        ],
    )
    .await;
    for (thread, run) in [(closed, "c"), (followed, "f1")] {
        let r = store.run("default", thread, run).await.unwrap();
        assert_eq!(r.status, agui_store::RunStatus::Interrupted, "{thread}");
    }
    let before = |thread: &'static str| {
        let store = store.clone();
        async move {
            store
                .read_range("default", thread, 1, u64::MAX)
                .await
                .unwrap()
                .len()
        }
    };
    let others = [before(closed).await, before(followed).await];

    // The first gateway: the close fails, and goes on failing, through a
    // retry in the background, until the gateway stops.
    hooked.hooks().on.store(true, Ordering::SeqCst);
    let g = start_with(store.clone(), GatewayConfig::default()).await;
    assert_eq!(g.gw.recover_at_start().await.unwrap(), 0);
    assert_eq!(hooked.hooks().victim.lock().unwrap().as_deref(), Some(t));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while hooked.hooks().failed.load(Ordering::SeqCst) < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no retry");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    g.shutdown().await;
    let r = store.run("default", t, "r").await.unwrap();
    assert_eq!(r.status, agui_store::RunStatus::Interrupted);
    let log = store.read_range("default", t, 1, u64::MAX).await.unwrap();
    assert_eq!(
        log.last().unwrap().event.type_name(),
        "TEXT_MESSAGE_CONTENT"
    );

    // The store heals; a new gateway (a new process: a new engine over the
    // same storage) starts.
    hooked.hooks().on.store(false, Ordering::SeqCst);
    let g = start_with(Store::from_arc(hooked.clone()), GatewayConfig::default()).await;
    assert_eq!(g.gw.recover_at_start().await.unwrap(), 1);
    let log = events_of(&g.base, t).await;
    verify_frames(&log);
    assert_eq!(
        log.iter().filter(|f| f.ty() == "RUN_ERROR").count(),
        1,
        "one end"
    );
    let last = &log.last().unwrap().data;
    assert_eq!(
        (&last["type"], &last["code"]),
        (&json!("RUN_ERROR"), &json!("interrupted")),
        "{last}"
    );
    assert!(
        log.iter()
            .any(|f| f.ty() == "TEXT_MESSAGE_END" && f.data["messageId"] == "m"),
        "the open message is ended"
    );
    wait_for_run_status(&g.base, t, "r", "interrupted").await;
    // The runs interrupted before are as they were.
    assert_eq!([before(closed).await, before(followed).await], others);
    // A start after that finds nothing more to close.
    let again = start_with(Store::from_arc(hooked.clone()), GatewayConfig::default()).await;
    assert_eq!(again.gw.recover_at_start().await.unwrap(), 0);
    assert_eq!(events_of(&again.base, t).await.len(), log.len());
    again.shutdown().await;
    g.shutdown().await;
}

/// Counts the background sweep's calls, over a memory store that says it
/// is shared by other processes or not.
#[derive(Default)]
struct Sweeps {
    shared: bool,
    calls: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl Hooks for Sweeps {
    async fn mark_interrupted_elsewhere(
        &self,
        inner: &dyn Backend,
    ) -> Result<Vec<(String, RunRecord)>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        inner.mark_interrupted_elsewhere().await
    }

    fn shared(&self, _inner: &dyn Backend) -> bool {
        self.shared
    }
}

/// The sweep for the runs of processes that are gone runs only over a
/// store other processes share (PostgreSQL): over one that a single
/// process opens (SQLite, file, memory), where it can find nothing, it
/// woke up every second for as long as the gateway ran.
#[tokio::test]
async fn the_sweep_runs_only_over_a_store_other_processes_share() {
    for shared in [false, true] {
        let hooked = Arc::new(Hooked::new(
            MemoryStore::new(),
            Sweeps {
                shared,
                ..Sweeps::default()
            },
        ));
        let g = start_with(Store::from_arc(hooked.clone()), GatewayConfig::default()).await;
        assert_eq!(g.gw.recover_at_start().await.unwrap(), 0);
        // The sweep looks every 250 ms after a start.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let calls = hooked.hooks().calls.load(Ordering::SeqCst);
        if shared {
            assert!(calls >= 2, "shared: {calls} sweeps");
        } else {
            assert_eq!(calls, 0, "not shared: no sweep");
        }
        g.shutdown().await;
    }
}

/// A run set aside, interrupted, whose close the store fails at start-up:
/// it joins its thread only once its close is done, never before (its
/// thread's log would hold a run without an end, which readers reject).
#[tokio::test]
async fn an_interrupted_run_set_aside_joins_only_once_closed() {
    use agui_store::aside::{aside_tenant, aside_thread};
    let hooked = Arc::new(Hooked::new(MemoryStore::new(), FailOneClose::default()));
    let store = Store::from_arc(hooked.clone());
    let ev = |v: Value| Event::from_json(&v.to_string()).unwrap();
    let t = "t-aside-closed";
    store
        .append(
            "default",
            t,
            AppendRequest::new(vec![
                ev(json!({"type":"RUN_STARTED","threadId":t,"runId":"r1"})),
                ev(json!({"type":"RUN_FINISHED","threadId":t,"runId":"r1"})),
            ]),
        )
        .await
        .unwrap();
    let a_thread = aside_thread(t, "a").unwrap();
    store
        .append(
            &aside_tenant("default"),
            &a_thread,
            AppendRequest::new(vec![
                ev(json!({"type":"RUN_STARTED","threadId":t,"runId":"a","parentRunId":"r1"})),
                ev(json!({"type":"TEXT_MESSAGE_START","messageId":"ma","role":"assistant"})),
                ev(json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"ma","delta":"left open"})),
            ]),
        )
        .await
        .unwrap();
    hooked.hooks().on.store(true, Ordering::SeqCst);
    let g = start_with(store.clone(), GatewayConfig::default()).await;
    assert_eq!(g.gw.recover_at_start().await.unwrap(), 0);
    assert_eq!(
        hooked.hooks().victim.lock().unwrap().as_deref(),
        Some(a_thread.as_str())
    );
    // Start-up tried to join it: it is still set aside, and the thread's
    // log holds r1 alone.
    let (_, v) = get_json(&format!("{}/threads/{t}", g.base)).await;
    assert_eq!(
        ids_and_statuses(&v["runsAside"]),
        [("a".to_owned(), "interrupted".to_owned())],
        "{v}"
    );
    assert_eq!(ids_and_statuses(&v["runs"]).len(), 1, "{v}");
    hooked.hooks().on.store(false, Ordering::SeqCst);
    let v = wait_thread(&g.base, t, |v| {
        v["runsAside"] == json!([]) && v["runs"].as_array().is_some_and(|r| r.len() == 2)
    })
    .await;
    assert_eq!(
        ids_and_statuses(&v["runs"]),
        [
            ("r1".to_owned(), "finished".to_owned()),
            ("a".to_owned(), "interrupted".to_owned())
        ]
    );
    let log = events_of(&g.base, t).await;
    verify_frames(&log);
    let last = &log.last().unwrap().data;
    assert_eq!(
        (&last["type"], &last["code"]),
        (&json!("RUN_ERROR"), &json!("interrupted")),
        "{last}"
    );
    g.shutdown().await;
}

/// Fails the first `left` appends of a run's end (a store fault that hits
/// one close and is gone at once).
struct FailFirstCloses {
    left: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl Hooks for FailFirstCloses {
    async fn commit(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        batch: &Batch,
    ) -> Result<Commit> {
        let terminal = batch
            .events
            .iter()
            .any(|e| e.event_type().is_run_terminal());
        if terminal
            && self
                .left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Err(StoreError::unavailable("the database restarts (test)"));
        }
        inner.commit(tenant, thread, batch).await
    }
}

/// A run marked interrupted at start-up whose close the store failed, and
/// a new run on its thread before the close is tried again: the new run
/// ends the interrupted one first, so its `RUN_STARTED` never follows a run
/// without an end. (It did: the close tried later found another run after
/// it and left it, and the thread's log failed verification for good.)
#[tokio::test]
async fn a_new_run_ends_the_interrupted_run_its_close_left_open() {
    let hooked = Arc::new(Hooked::new(
        MemoryStore::new(),
        FailFirstCloses {
            left: std::sync::atomic::AtomicU64::new(1),
        },
    ));
    let store = Store::from_arc(hooked.clone());
    let t = "t-next";
    append_json(&store, t, half_run(t, "r1", "m1")).await;
    let g = start_with(store.clone(), GatewayConfig::default()).await;
    assert_eq!(
        g.gw.recover_at_start().await.unwrap(),
        0,
        "the close failed"
    );
    // At once, before the close is tried again in the background.
    let (status, frames, _) = run(&g.base, "demo", &input(t, "r2", "next")).await;
    assert_eq!(status, 200);
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    let stored = events_of(&g.base, t).await;
    verify_frames(&stored);
    let types: Vec<&str> = stored.iter().map(|f| f.ty()).collect();
    assert_eq!(
        &types[..6],
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_ERROR",
            "RUN_STARTED"
        ]
    );
    assert_eq!(stored[4].data["code"], "interrupted");
    assert_eq!(stored[5].data["runId"], "r2");
    // The retry in the background finds it closed and adds nothing.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(events_of(&g.base, t).await.len(), stored.len());
    wait_for_run_status(&g.base, t, "r1", "interrupted").await;
    g.shutdown().await;
}

/// A client that starts a run and stops reading: the run goes on at its
/// upstream's pace and is stored whole, but what waits for that client is
/// bounded (`client_buffer_bytes`): past it the client's stream is cut and
/// counted, and the client gets the rest by attaching with
/// `Last-Event-ID`. Before, the gateway held the whole run for the
/// connection (10 MB a run, for as long as the socket stayed open).
#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off_and_attaches_for_the_rest() {
    let mut config = GatewayConfig::default();
    config.limits.client_buffer_bytes = 64 * 1024;
    let g = start(config).await;
    let body = json!({"threadId": "t", "runId": "r1", "messages": [], "tools": [],
        "context": [], "state": {}, "forwardedProps": {"demo": {"extraDeltas": 100_000}}})
    .to_string();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut conn = socket
        .connect(g.base.trim_start_matches("http://").parse().unwrap())
        .await
        .unwrap();
    conn.write_all(
        format!(
            "POST /agents/demo/run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // The run ends, stored whole, while its client reads nothing.
    let thread = wait_run_end(&g.base, "t").await;
    assert_eq!(thread["runs"][0]["status"], "finished", "{thread}");
    let stored = thread["lastSeq"].as_u64().unwrap();
    assert!(stored > 100_000, "{thread}");
    let metrics = metrics_text(&g.base).await;
    assert!(
        metrics.contains("agui_clients_cut_total 1\n"),
        "the cut is counted: {metrics}"
    );
    // The client now reads: a prefix of the run, then its stream's end.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while !got.ends_with(b"\r\n0\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(30), conn.read(&mut buf))
            .await
            .expect("the cut stream ends")
            .unwrap();
        assert!(n > 0, "the connection closed before the stream's end");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    let last_id: u64 = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .next_back()
        .expect("frames before the cut")
        .parse()
        .unwrap();
    assert!(last_id < stored, "cut at {last_id} of {stored}");
    // Everything after it, from the store.
    let resp = client()
        .get(format!("{}/threads/t/events", g.base))
        .header("Last-Event-ID", last_id.to_string())
        .send()
        .await
        .unwrap();
    let rest = parse_sse(&resp.text().await.unwrap());
    assert_eq!(rest.len() as u64, stored - last_id);
    assert_eq!(rest.last().unwrap().ty(), "RUN_FINISHED");
    g.shutdown().await;
}
