//! Test helpers: a gateway on a free port over a memory store, SSE reading,
//! small real HTTP upstreams that misbehave on purpose, and the end-to-end
//! peers' folder (`scripts/e2e-setup`): its node clients and spawned agents.
#![allow(dead_code)]

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command};
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

/// The end-to-end peers' folder: `AGUI_E2E_DIR`, else `e2e/` of the
/// repository (`scripts/e2e-setup` fills it).
pub fn e2e_dir() -> PathBuf {
    std::env::var_os("AGUI_E2E_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../e2e"))
}

/// Runs one of the e2e folder's node scripts with a plan (the official
/// `@ag-ui/client` must be installed there); returns its JSON report.
pub async fn node_script(script: &'static str, plan: Value) -> Value {
    let dir = e2e_dir();
    assert!(
        dir.join("node_modules/@ag-ui/client/package.json")
            .is_file(),
        "the official @ag-ui/client is not installed in {} (AGUI_E2E_DIR); run scripts/e2e-setup",
        dir.display()
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new(std::env::var("AGUI_NODE").unwrap_or_else(|_| "node".into()))
            .arg(dir.join(script))
            .arg(plan.to_string())
            .current_dir(&dir)
            .output()
    })
    .await
    .unwrap()
    .expect("node must be installed (AGUI_NODE or `node` on PATH)");
    assert!(
        out.status.success(),
        "node client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs the e2e folder's node client (`node/client.mjs`) with a plan.
pub async fn node(plan: Value) -> Value {
    node_script("node/client.mjs", plan).await
}

/// A free port on 127.0.0.1 (for a spawned agent to listen on).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Waits up to `seconds` for a spawned agent to listen on `port`; panics,
/// naming it `what`, when it exits first or never listens (killing it).
pub fn wait_listening(child: &mut Child, port: u16, seconds: u64, what: &str) {
    for _ in 0..seconds * 10 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited at start-up: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("{what} did not start listening");
}

/// An upstream that records every request body and answers each run with
/// one assistant message, "I saw N messages" (its own `RUN_STARTED` omits
/// `input`), pausing `forwardedProps.pauseMs` milliseconds before the
/// run's end.
pub async fn recording_upstream() -> (String, Arc<std::sync::Mutex<Vec<Value>>>) {
    use axum::body::Body;
    use axum::response::IntoResponse;
    let seen: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
    let seen2 = seen.clone();
    let app = Router::new().route(
        "/agent",
        axum::routing::post(move |body: axum::Json<Value>| {
            let seen = seen2.clone();
            async move {
                let input = body.0;
                seen.lock().unwrap().push(input.clone());
                let (t, r) = (&input["threadId"], input["runId"].as_str().unwrap());
                let n = input["messages"].as_array().map_or(0, Vec::len);
                let pause = input["forwardedProps"]["pauseMs"].as_u64().unwrap_or(0);
                let head = [
                    json!({"type":"RUN_STARTED","threadId":t,"runId":r}),
                    json!({"type":"TEXT_MESSAGE_START","messageId":format!("a-{r}"),"role":"assistant"}),
                    json!({"type":"TEXT_MESSAGE_CONTENT","messageId":format!("a-{r}"),"delta":format!("I saw {n} messages")}),
                    json!({"type":"TEXT_MESSAGE_END","messageId":format!("a-{r}")}),
                ];
                let tail = json!({"type":"RUN_FINISHED","threadId":t,"runId":r});
                let first: String = head.iter().map(|e| format!("data: {e}\n\n")).collect();
                let chunks = futures::stream::iter([(first, 0), (format!("data: {tail}\n\n"), pause)])
                    .then(|(text, ms)| async move {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        Ok::<_, std::convert::Infallible>(text)
                    });
                ([("content-type", "text/event-stream")], Body::from_stream(chunks)).into_response()
            }
        }),
    );
    (format!("{}/agent", serve_upstream(app).await), seen)
}

/// Waits (bounded) until the thread's summary satisfies `done`.
pub async fn wait_thread(base: &str, thread: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..400 {
        let (s, v) = get_json(&format!("{base}/threads/{thread}")).await;
        if s == 200 && done(&v) {
            return v;
        }
        last = v;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("thread {thread} never got there: {last}");
}

/// Waits (10 s at most) until run `run` of `thread` has `status` in the
/// thread's summary; returns the summary. Panics with the last summary
/// seen when it never does.
pub async fn wait_for_run_status(base: &str, thread: &str, run: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (s, v) = get_json(&format!("{base}/threads/{thread}")).await;
        let now = v["runs"]
            .as_array()
            .and_then(|runs| runs.iter().find(|r| r["runId"] == run))
            .map(|r| r["status"].clone());
        if s == 200 && now.as_ref().is_some_and(|now| now == status) {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("run {run} of {thread} never got status {status}: {v}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub fn ids_and_statuses(runs: &Value) -> Vec<(String, String)> {
    runs.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["runId"].as_str().unwrap().to_owned(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The thread's stored events as JSON, with their ids.
pub async fn thread_events(base: &str, thread: &str) -> Vec<Frame> {
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

/// The gateway's `/metrics` text.
pub async fn metrics_text(base: &str) -> String {
    client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Every line the gateways of this test binary logged, at every level, from
/// the first call on: one subscriber for the process (tests that read the
/// log call this before they start their gateway, and each looks only for
/// its own thread's lines or for strings no other test uses).
pub fn logged() -> &'static std::sync::Mutex<Vec<u8>> {
    use std::sync::{Mutex, OnceLock};
    #[derive(Clone)]
    struct Sink(&'static Mutex<Vec<u8>>);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static LOGS: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        let sink = Sink(logs);
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .try_init()
            .expect("the only subscriber of this test binary");
        logs
    })
}

/// Appends `events` (JSON values) to `thread` of the default tenant straight
/// into the store, as a gateway would have left them.
pub async fn append_json(store: &Store, thread: &str, events: Vec<Value>) {
    let events = events
        .into_iter()
        .map(|v| agui_protocol::Event::from_json(&v.to_string()).unwrap())
        .collect();
    store
        .append("default", thread, agui_store::AppendRequest::new(events))
        .await
        .unwrap();
}

/// A run left in flight: its start and a message half written.
pub fn half_run(thread: &str, run: &str, message: &str) -> Vec<Value> {
    vec![
        json!({"type": "RUN_STARTED", "threadId": thread, "runId": run}),
        json!({"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"}),
        json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": "half"}),
    ]
}
