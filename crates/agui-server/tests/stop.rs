//! Stopping a run: `POST /threads/{id}/runs/{run}/stop`, the `cancelled`
//! outcome, the `on_disconnect` policy, and a stop sent to another gateway
//! sharing the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use agui_server::config::parse_agent_flag;
use agui_server::{GatewayConfig, OnDisconnect, SessionMode};
use agui_store::Store;
use axum::Router;
use axum::body::Body;
use axum::response::IntoResponse;
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};

/// An upstream that opens a message and a tool call, then streams text
/// forever (one delta every 20 ms) and records when its client goes away.
#[derive(Clone, Default)]
struct Endless {
    disconnected: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
}

struct OnDrop(Arc<AtomicBool>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Endless {
    async fn serve(&self) -> String {
        let me = self.clone();
        let app = Router::new().route(
            "/agent",
            post(move |body: axum::Json<Value>| {
                let me = me.clone();
                async move {
                    me.requests.fetch_add(1, Ordering::SeqCst);
                    let t = body.0["threadId"].clone();
                    let r = body.0["runId"].clone();
                    let guard = OnDrop(me.disconnected.clone());
                    let head = [
                        json!({"type":"RUN_STARTED","threadId":t,"runId":r}),
                        json!({"type":"TOOL_CALL_START","toolCallId":"tc","toolCallName":"search"}),
                        json!({"type":"TOOL_CALL_ARGS","toolCallId":"tc","delta":"{\"q\":"}),
                        json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
                    ];
                    let head = futures::stream::iter(head.into_iter().map(|e| format!("data: {e}\n\n")));
                    let tail = futures::stream::unfold((0u64, guard), |(i, g)| async move {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let e = json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":format!("w{i} ")});
                        Some((format!("data: {e}\n\n"), (i + 1, g)))
                    });
                    let s = head.chain(tail).map(Ok::<_, std::convert::Infallible>);
                    ([("content-type", "text/event-stream")], Body::from_stream(s)).into_response()
                }
            }),
        );
        format!("{}/agent", serve_upstream(app).await)
    }

    async fn wait_disconnect(&self) {
        for _ in 0..200 {
            if self.disconnected.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the upstream never saw its request dropped");
    }
}

fn agent(name: &str, url: &str) -> agui_server::AgentConfig {
    parse_agent_flag(&format!("{name}={url}"), SessionMode::Client).unwrap()
}

/// Starts run `r1` of `thread` on agent `slow` (an [`Endless`] upstream)
/// and reads its first six frames: the run is in flight, a message and a
/// tool call open. Returns the rest of its stream and the text read.
async fn start_slow_run(
    base: &str,
    thread: &str,
) -> (
    impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin + use<>,
    String,
) {
    let resp = client()
        .post(format!("{base}/agents/slow/run"))
        .json(&input(thread, "r1", "go"))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    while parse_sse(&text).len() < 6 {
        text.push_str(std::str::from_utf8(&body.next().await.unwrap().unwrap()).unwrap());
    }
    (body, text)
}

async fn stop(base: &str, thread: &str, run: &str) -> (u16, Value) {
    let resp = client()
        .post(format!("{base}/threads/{thread}/runs/{run}/stop"))
        .send()
        .await
        .unwrap();
    let s = resp.status().as_u16();
    (s, resp.json().await.unwrap_or(Value::Null))
}

fn ends_cancelled(frames: &[Frame]) {
    let n = frames.len();
    let tail: Vec<&str> = frames[n - 3..].iter().map(Frame::ty).collect();
    assert_eq!(
        tail,
        ["TOOL_CALL_END", "TEXT_MESSAGE_END", "RUN_FINISHED"],
        "{frames:?}"
    );
    assert_eq!(frames[n - 1].data["outcome"], json!({"type": "cancelled"}));
}

#[tokio::test]
async fn stop_ends_open_items_stores_cancelled_and_drops_the_upstream() {
    let up = Endless::default();
    let url = up.serve().await;
    let g = start(GatewayConfig {
        agents: vec![agent("slow", &url)],
        ..GatewayConfig::default()
    })
    .await;
    let (mut body, mut text) = start_slow_run(&g.base, "t").await;
    // A second client attached live.
    let attached = client()
        .get(format!("{}/threads/t/events", g.base))
        .send()
        .await
        .unwrap();
    let attached = tokio::spawn(async move { attached.text().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(stop(&g.base, "t", "nope").await.0, 404);
    assert_eq!(stop(&g.base, "zzz", "r1").await.0, 404);
    let (status, v) = stop(&g.base, "t", "r1").await;
    assert_eq!(
        (status, v["status"].as_str()),
        (200, Some("cancelled")),
        "{v}"
    );
    // The run's own client gets the end and its stream closes.
    while let Some(Ok(chunk)) = body.next().await {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let frames = parse_sse(&text);
    ends_cancelled(&frames);
    let ids: Vec<u64> = frames.iter().map(|f| f.id.unwrap()).collect();
    assert_eq!(ids, (1..=frames.len() as u64).collect::<Vec<_>>());
    // The attached client too, with the same events.
    let att = parse_sse(&attached.await.unwrap());
    ends_cancelled(&att);
    assert_eq!(att.last().unwrap().id, frames.last().unwrap().id);
    up.wait_disconnect().await;
    // Run index and tree say cancelled; stopping again is a 409.
    let (_, thread) = get_json(&format!("{}/threads/t", g.base)).await;
    assert_eq!(thread["runs"][0]["status"], "cancelled", "{thread}");
    assert_eq!(thread["tree"][0]["status"], "cancelled", "{thread}");
    let (status, v) = stop(&g.base, "t", "r1").await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("run_not_running"))
    );
    // Counted once, as cancelled (it was also counted finished before).
    let metrics = metrics_text(&g.base).await;
    for (status, n) in [("finished", 0), ("cancelled", 1), ("error", 0)] {
        let line = format!("agui_runs_total{{status=\"{status}\"}} {n}\n");
        assert!(metrics.contains(&line), "{line}{metrics}");
    }
    // The partial answer is history; the thread goes on.
    let (_, msgs) = get_json(&format!("{}/threads/t/messages", g.base)).await;
    let last = msgs["messages"].as_array().unwrap().last().unwrap().clone();
    assert!(
        last["content"].as_str().unwrap().starts_with("w0 "),
        "{msgs}"
    );
    assert_eq!(
        g.store
            .run("default", "t", "r1")
            .await
            .unwrap()
            .status
            .as_str(),
        "cancelled"
    );
    g.shutdown().await;
}

#[tokio::test]
async fn on_disconnect_cancel_stops_the_run_when_its_client_goes_away() {
    let up = Endless::default();
    let url = up.serve().await;
    let mut a = agent("slow", &url);
    a.on_disconnect = OnDisconnect::Cancel;
    let keep = agent("keep", &url);
    let g = start(GatewayConfig {
        agents: vec![a, keep],
        ..GatewayConfig::default()
    })
    .await;
    let resp = client()
        .post(format!("{}/agents/slow/run", g.base))
        .json(&input("d", "r1", "go"))
        .send()
        .await
        .unwrap();
    let frames = read_frames(resp, 5).await; // then dropped
    assert!(frames.len() >= 5);
    up.wait_disconnect().await;
    let thread = wait_run_end(&g.base, "d").await;
    assert_eq!(thread["runs"][0]["status"], "cancelled", "{thread}");
    // Default policy: the run outlives its client.
    let resp = client()
        .post(format!("{}/agents/keep/run", g.base))
        .json(&input("k", "r1", "go"))
        .send()
        .await
        .unwrap();
    let _ = read_frames(resp, 5).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, thread) = get_json(&format!("{}/threads/k", g.base)).await;
    assert_eq!(thread["runs"][0]["status"], "running", "{thread}");
    assert_eq!(stop(&g.base, "k", "r1").await.0, 200);
    g.shutdown().await;
}

#[tokio::test]
async fn a_stop_sent_to_another_gateway_on_the_same_store_stops_the_run() {
    let up = Endless::default();
    let url = up.serve().await;
    let store: Store = Store::memory();
    let config = || GatewayConfig {
        agents: vec![agent("slow", &url)],
        recover_on_start: false,
        ..GatewayConfig::default()
    };
    let a = start_with(store.clone(), config()).await;
    let b = start_with(store.clone(), config()).await;
    let (mut body, mut text) = start_slow_run(&a.base, "x").await;
    let (status, v) = stop(&b.base, "x", "r1").await;
    assert_eq!(
        (status, v["status"].as_str()),
        (200, Some("cancelled")),
        "{v}"
    );
    while let Some(Ok(chunk)) = body.next().await {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let frames = parse_sse(&text);
    ends_cancelled(&frames);
    // A's client saw each stored event once, in order, with its id.
    let ids: Vec<u64> = frames.iter().map(|f| f.id.unwrap()).collect();
    assert_eq!(ids, (1..=frames.len() as u64).collect::<Vec<_>>());
    let head = store.thread("default", "x").await.unwrap().last_seq;
    assert_eq!(head, frames.len() as u64);
    up.wait_disconnect().await;
    let (_, thread) = get_json(&format!("{}/threads/x", a.base)).await;
    assert_eq!(thread["runs"][0]["status"], "cancelled");
    a.shutdown().await;
    b.shutdown().await;
}

/// The CopilotKit-shaped routes under a prefix: discovery, run, and stop by
/// `{runId}` or, with no body, the thread's run in flight.
#[tokio::test]
async fn copilotkit_routes_run_and_stop_under_the_prefix() {
    let up = Endless::default();
    let url = up.serve().await;
    let g = start(GatewayConfig {
        agents: vec![agent("slow", &url)],
        copilotkit_prefix: Some(agui_server::config::copilotkit_prefix("/api/ck/").unwrap()),
        ..GatewayConfig::default()
    })
    .await;
    let ck = format!("{}/api/ck", g.base);
    let (status, info) = get_json(&format!("{ck}/info")).await;
    assert_eq!(status, 200);
    assert_eq!(info["mode"], "sse");
    assert!(info["agents"]["slow"]["description"].is_string(), "{info}");
    let post = |path: String, body: Option<Value>| async move {
        let mut req = client().post(path);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json::<Value>().await.unwrap_or(Value::Null))
    };
    // Nothing in flight yet: 409; unknown agent: 404.
    let (s, v) = post(format!("{ck}/agent/slow/stop/t"), None).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("run_not_running"))
    );
    assert_eq!(post(format!("{ck}/agent/nope/stop/t"), None).await.0, 404);
    for (run, body) in [("r1", Some(json!({"runId": "r1"}))), ("r2", None)] {
        let resp = client()
            .post(format!("{ck}/agent/slow/run"))
            .json(&input("t", run, "go"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let mut stream = resp.bytes_stream();
        let mut text = String::new();
        while parse_sse(&text).len() < 5 {
            text.push_str(std::str::from_utf8(&stream.next().await.unwrap().unwrap()).unwrap());
        }
        let (s, v) = post(format!("{ck}/agent/slow/stop/t"), body).await;
        assert_eq!((s, v["status"].as_str()), (200, Some("cancelled")), "{v}");
        while let Some(Ok(chunk)) = stream.next().await {
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        ends_cancelled(&parse_sse(&text));
    }
    // A finished run named in the body: 409; an unknown one: 404.
    let (s, _) = post(
        format!("{ck}/agent/slow/stop/t"),
        Some(json!({"runId": "r1"})),
    )
    .await;
    assert_eq!(s, 409);
    let (s, _) = post(
        format!("{ck}/agent/slow/stop/t"),
        Some(json!({"runId": "zz"})),
    )
    .await;
    assert_eq!(s, 404);
    let (_, thread) = get_json(&format!("{}/threads/t", g.base)).await;
    let statuses: Vec<&str> = thread["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["cancelled", "cancelled"]);
    // Bad prefixes are refused.
    for bad in ["copilotkit", "/a//b", "/a/{x}"] {
        assert!(
            agui_server::config::copilotkit_prefix(bad).is_err(),
            "{bad}"
        );
    }
    assert_eq!(agui_server::config::copilotkit_prefix("/").unwrap(), "");
    g.shutdown().await;
}

/// At shutdown a client attached to a run in flight keeps receiving it
/// through the grace period, up to the run's end (`RUN_ERROR` `shutdown`
/// once the grace is over), like the run's own client; before, attach
/// streams ended the moment shutdown began, without the run's end.
#[tokio::test]
async fn at_shutdown_an_attached_client_gets_the_run_to_its_end() {
    let up = Endless::default();
    let url = up.serve().await;
    let g = start(GatewayConfig {
        agents: vec![agent("slow", &url)],
        shutdown_grace: Duration::from_millis(300),
        ..GatewayConfig::default()
    })
    .await;
    let (mut body, mut text) = start_slow_run(&g.base, "t").await;
    let attached = client()
        .get(format!("{}/threads/t/events", g.base))
        .send()
        .await
        .unwrap();
    let attached = tokio::spawn(async move { attached.text().await.unwrap() });
    let own = tokio::spawn(async move {
        while let Some(Ok(chunk)) = body.next().await {
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        text
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    g.shutdown().await;
    let own = parse_sse(&own.await.unwrap());
    let att = parse_sse(&attached.await.unwrap());
    let end = own.last().unwrap();
    assert_eq!(end.ty(), "RUN_ERROR");
    assert_eq!(end.data["code"], "shutdown", "{:?}", end.data);
    let last = att.last().unwrap();
    assert_eq!(
        last.ty(),
        "RUN_ERROR",
        "the attached client missed the run's end"
    );
    assert_eq!(last.id, end.id);
}
