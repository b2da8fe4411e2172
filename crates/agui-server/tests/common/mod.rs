//! Test helpers: a gateway on a free port over a memory store, SSE reading,
//! and small real HTTP upstreams that misbehave on purpose.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use agui_server::{Gateway, GatewayConfig};
use agui_store::Store;
use axum::Router;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub struct Running {
    pub base: String,
    pub gw: Arc<Gateway>,
    pub store: Store,
    stop: Option<oneshot::Sender<()>>,
    pub done: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Signals shutdown and waits for the server to return.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), &mut self.done).await;
    }
}

pub async fn start(config: GatewayConfig) -> Running {
    start_with(Store::memory(), config).await
}

pub async fn start_with(store: Store, config: GatewayConfig) -> Running {
    let gw = Arc::new(Gateway::new(store.clone(), config).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = oneshot::channel::<()>();
    let gw2 = gw.clone();
    let done = tokio::spawn(async move {
        agui_server::serve(gw2, listener, async {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    Running {
        base,
        gw,
        store,
        stop: Some(tx),
        done,
    }
}

/// Serves a router on a free port; returns its base URL.
pub async fn serve_upstream(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    base
}

/// One SSE frame as read by a client.
#[derive(Debug, Clone)]
pub struct Frame {
    pub id: Option<u64>,
    pub data: Value,
}

impl Frame {
    pub fn ty(&self) -> &str {
        self.data["type"].as_str().unwrap_or("")
    }
}

pub fn parse_sse(text: &str) -> Vec<Frame> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut id = None;
        let mut data = None;
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.parse().unwrap());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = Some(serde_json::from_str(v).unwrap());
            }
        }
        if let Some(data) = data {
            out.push(Frame { id, data });
        }
    }
    out
}

pub fn input(thread: &str, run: &str, text: &str) -> Value {
    json!({
        "threadId": thread, "runId": run, "protocolVersion": "1.0", "state": {},
        "messages": [{"id": format!("u-{run}"), "role": "user", "content": text}],
        "tools": [], "context": [], "forwardedProps": {}
    })
}

pub fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// POSTs a run and reads the whole SSE answer.
pub async fn run(base: &str, agent: &str, body: &Value) -> (u16, Vec<Frame>, String) {
    let resp = client()
        .post(format!("{base}/agents/{agent}/run"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, parse_sse(&text), text)
}

/// Reads an SSE response until `n` frames arrived (or it ends).
pub async fn read_frames(resp: reqwest::Response, n: usize) -> Vec<Frame> {
    let mut buf = String::new();
    let mut s = resp.bytes_stream();
    while let Some(Ok(chunk)) = s.next().await {
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        if parse_sse(&buf).len() >= n && buf.ends_with("\n\n") {
            break;
        }
    }
    parse_sse(&buf)
}

pub async fn get_json(url: &str) -> (u16, Value) {
    let resp = client().get(url).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Waits until the thread's last run is no longer running (bounded).
pub async fn wait_run_end(base: &str, thread: &str) -> Value {
    for _ in 0..400 {
        let (s, v) = get_json(&format!("{base}/threads/{thread}")).await;
        if s == 200
            && v["runs"]
                .as_array()
                .is_some_and(|r| !r.is_empty() && r.iter().all(|r| r["status"] != "running"))
        {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the run of {thread} did not end");
}
