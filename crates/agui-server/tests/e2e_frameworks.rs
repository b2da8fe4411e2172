//! Stateful frameworks behind the gateway: Google ADK through `ag_ui_adk`
//! (`emit_messages_snapshot=True`) and LangGraph through `ag_ui_langgraph`
//! (with a checkpointer), each with an offline scripted model
//! (`e2e/python/adk_agent.py`, `e2e/python/langgraph_agent.py`, installed
//! from PyPI by `scripts/e2e-setup` into `e2e/.venv-adk` and
//! `e2e/.venv-langgraph`), driven by the official `HttpAgent`.
//!
//! For each: a two-turn conversation whose client state equals the stored
//! history; a branch from run 1 whose history holds no turn-2 message and
//! whose framework state started from run 1 (`per-branch` upstream threads);
//! a thin client in server mode holding the conversation in order; a stop
//! mid-stream ending `cancelled`, with the framework seeing its request
//! dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;
use agui_server::{GatewayConfig, SessionMode, UpstreamThread, config::parse_agent_flag};
use futures::StreamExt;
use serde_json::{Value, json};

struct Agent {
    child: Child,
    url: String,
    disconnects: tempfile::NamedTempFile,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    fn disconnects(&self) -> usize {
        std::fs::read_to_string(self.disconnects.path())
            .unwrap_or_default()
            .lines()
            .count()
    }
}

fn start_agent(venv: &str, script: &str) -> Agent {
    let python = e2e_dir().join(venv).join("bin/python");
    assert!(
        python.is_file(),
        "{} is missing; run scripts/e2e-setup",
        python.display()
    );
    let port = free_port();
    let disconnects = tempfile::NamedTempFile::new().unwrap();
    let child = Command::new(&python)
        .arg(e2e_dir().join("python").join(script))
        .arg(port.to_string())
        .env("AGUI_E2E_DISCONNECT_LOG", disconnects.path())
        .env("PYTHONWARNINGS", "ignore")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cannot start the agent");
    let mut agent = Agent {
        child,
        url: format!("http://127.0.0.1:{port}/"),
        disconnects,
    };
    wait_listening(&mut agent.child, port, 60, script);
    agent
}

fn all_ok(r: &Value) {
    for t in r["turns"].as_array().unwrap() {
        assert_eq!(t["ok"], true, "{r}");
    }
}

/// `role: content` of each message, for comparisons across threads.
fn texts(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{}: {}",
                m["role"].as_str().unwrap_or(""),
                m["content"].as_str().unwrap_or("")
            )
        })
        .collect()
}

async fn messages(base: &str, thread: &str, run: Option<&str>) -> Value {
    let q = run.map(|r| format!("?run={r}")).unwrap_or_default();
    let (s, v) = get_json(&format!("{base}/threads/{thread}/messages{q}")).await;
    assert_eq!(s, 200, "{v}");
    v["messages"].clone()
}

async fn exercise(agent: Agent) {
    let mut full = parse_agent_flag(&format!("fw={}", agent.url), SessionMode::Client).unwrap();
    full.upstream_thread = UpstreamThread::PerBranch;
    let mut thin = parse_agent_flag(&format!("thin={}", agent.url), SessionMode::Server).unwrap();
    thin.upstream_thread = UpstreamThread::PerBranch;
    let g = start(GatewayConfig {
        agents: vec![full, thin],
        ..GatewayConfig::default()
    })
    .await;
    let url = format!("{}/agents/fw/run", g.base);
    // 1. Two turns through the official client: its state is the history.
    let r = node(
        json!({"op":"conversation","url":url,"threadId":"c","turns":[
        {"runId":"r1","text":"first question"},{"runId":"r2","text":"second question"}]}),
    )
    .await;
    all_ok(&r);
    let hist = messages(&g.base, "c", None).await;
    assert_eq!(
        r["messages"], hist,
        "client state differs from the stored history"
    );
    let t = texts(&hist);
    assert!(
        t.iter().any(|m| m == "assistant: Turn 2: second question"),
        "{t:?}"
    );
    // 2. A branch from run 1: the framework starts from run 1's state.
    let mut branch = messages(&g.base, "c", Some("r1")).await;
    branch
        .as_array_mut()
        .unwrap()
        .push(json!({"id":"ub","role":"user","content":"other question"}));
    let body = json!({"threadId":"c","runId":"b1","parentRunId":"r1","state":{},
        "messages":branch,"tools":[],"context":[],"forwardedProps":{}});
    let (s, frames, _) = run(&g.base, "fw", &body).await;
    assert_eq!((s, frames.last().unwrap().ty()), (200, "RUN_FINISHED"));
    let b = texts(&messages(&g.base, "c", Some("b1")).await);
    assert!(b.iter().all(|m| !m.contains("second question")), "{b:?}");
    assert!(
        b.iter().any(|m| m == "assistant: Turn 2: other question"),
        "the framework did not continue from run 1: {b:?}"
    );
    // 3. A thin client in server mode holds the conversation in order.
    let thin_url = format!("{}/agents/thin/run", g.base);
    let r = node(
        json!({"op":"conversation","url":thin_url,"threadId":"s","thin":true,"turns":[
        {"runId":"s1","text":"first question"},{"runId":"s2","text":"second question"}]}),
    )
    .await;
    all_ok(&r);
    let hist = messages(&g.base, "s", None).await;
    assert_eq!(texts(&r["messages"]), texts(&hist));
    let users = texts(&hist)
        .iter()
        .filter(|m| m.starts_with("user"))
        .count();
    assert_eq!(users, 2, "{hist}");
    // 4. Stop mid-stream: cancelled, and the framework sees the disconnect.
    let before = agent.disconnects();
    let resp = client()
        .post(&url)
        .json(&input("x", "x1", "a slow answer please"))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    while !parse_sse(&text)
        .iter()
        .any(|f| f.ty() == "TEXT_MESSAGE_CONTENT")
    {
        text.push_str(std::str::from_utf8(&body.next().await.unwrap().unwrap()).unwrap());
    }
    let stop = client()
        .post(format!("{}/threads/x/runs/x1/stop", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status().as_u16(), 200);
    while let Some(Ok(chunk)) = body.next().await {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let frames = parse_sse(&text);
    let last = frames.last().unwrap();
    assert_eq!(last.ty(), "RUN_FINISHED");
    assert_eq!(last.data["outcome"], json!({"type":"cancelled"}));
    for _ in 0..100 {
        if agent.disconnects() > before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        agent.disconnects() > before,
        "the framework never saw the request dropped"
    );
    let (_, th) = get_json(&format!("{}/threads/x", g.base)).await;
    assert_eq!(th["runs"][0]["status"], "cancelled");
    g.shutdown().await;
}

fn venv_ready(venv: &str) -> bool {
    Path::new(&e2e_dir())
        .join(venv)
        .join("bin/python")
        .is_file()
}

#[tokio::test]
async fn langgraph_with_a_checkpointer_through_the_gateway() {
    assert!(venv_ready(".venv-langgraph"), "run scripts/e2e-setup");
    exercise(start_agent(".venv-langgraph", "langgraph_agent.py")).await;
}

#[tokio::test]
async fn google_adk_through_the_gateway() {
    assert!(venv_ready(".venv-adk"), "run scripts/e2e-setup");
    exercise(start_agent(".venv-adk", "adk_agent.py")).await;
}
