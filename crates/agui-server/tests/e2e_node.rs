//! The official `@ag-ui/client` 1.0.0 `HttpAgent` (installed from npm by
//! `scripts/e2e-setup` into `e2e/node_modules`) talking to the gateway.
//!
//! These tests need Node.js and the installed client. They find them through
//! `AGUI_E2E_DIR` (default: the repository's `e2e/`) and fail with a clear
//! message when they are missing: run `scripts/e2e-setup` first.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use agui_server::{GatewayConfig, SessionMode, config::parse_agent_flag};
use agui_store::{EventStore, MemoryStore};
use common::*;
use serde_json::{Value, json};

fn e2e_dir() -> PathBuf {
    let dir = std::env::var_os("AGUI_E2E_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../e2e"));
    let client = dir.join("node_modules/@ag-ui/client/package.json");
    assert!(
        client.is_file(),
        "the official @ag-ui/client is not installed in {} (AGUI_E2E_DIR); run scripts/e2e-setup",
        dir.display()
    );
    dir
}

/// Runs the node client with a plan; returns its JSON report.
async fn node(plan: Value) -> Value {
    let dir = e2e_dir();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(std::env::var("AGUI_NODE").unwrap_or_else(|_| "node".into()))
            .arg(dir.join("node/client.mjs"))
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

fn turns(list: &[(&str, &str)]) -> Value {
    Value::Array(
        list.iter()
            .map(|(run, text)| json!({"runId": run, "text": text}))
            .collect(),
    )
}

fn all_ok(report: &Value) {
    for t in report["turns"].as_array().unwrap() {
        assert_eq!(t["ok"], true, "a turn failed: {report}");
    }
}

#[tokio::test]
async fn http_agent_conversation_equals_history_and_direct_talk() {
    let g = start(GatewayConfig::default()).await;
    let plan_turns = turns(&[("r1", "hello"), ("r2", "what is up"), ("r3", "bye now")]);
    let via = node(json!({"op":"conversation","url":format!("{}/agents/demo/run", g.base),"threadId":"th","turns":plan_turns})).await;
    all_ok(&via);
    let direct = node(json!({"op":"conversation","url":format!("{}/demo/agent", g.base),"threadId":"th","turns":plan_turns})).await;
    all_ok(&direct);
    assert_eq!(via["messages"], direct["messages"]);
    assert_eq!(via["state"], direct["state"]);
    let (_, hist) = get_json(&format!("{}/threads/th/messages", g.base)).await;
    assert_eq!(hist["messages"], via["messages"]);
    assert_eq!(hist["state"], via["state"]);
    // 3 user + 3 assistant (with a tool call) + 3 tool results.
    assert_eq!(via["messages"].as_array().unwrap().len(), 9);
    assert_eq!(via["state"]["turn"], 3);
    // A demo error midway through a message reaches the client as RUN_ERROR.
    let err = node(json!({"op":"conversation","url":format!("{}/agents/demo/run", g.base),"threadId":"th-err","turns":turns(&[("e1","please error")])})).await;
    assert_eq!(err["turns"][0]["ok"], false);
    g.shutdown().await;
}

#[tokio::test]
async fn branch_from_run_one_leaves_runs_two_and_three_out() {
    let g = start(GatewayConfig::default()).await;
    let url = format!("{}/agents/demo/run", g.base);
    let r = node(json!({"op":"conversation","url":url,"threadId":"b","turns":turns(&[("r1","one"),("r2","two"),("r3","three")])})).await;
    all_ok(&r);
    // Branch from r1: the client holds the conversation as it was after r1.
    let (_, at1) = get_json(&format!("{}/threads/b/messages?run=r1", g.base)).await;
    let mut msgs = at1["messages"].as_array().unwrap().clone();
    msgs.push(json!({"id":"b-u-alt","role":"user","content":"alternative two"}));
    let body = json!({"threadId":"b","runId":"r4","parentRunId":"r1","state":at1["state"],"messages":msgs,"tools":[],"context":[],"forwardedProps":{}});
    let (status, frames, _) = run(&g.base, "demo", &body).await;
    assert_eq!(status, 200);
    assert_eq!(frames[0].data["parentRunId"], "r1");
    let (_, at4) = get_json(&format!("{}/threads/b/messages?run=r4", g.base)).await;
    let text = at4["messages"].to_string();
    assert!(text.contains("alternative two") && text.contains("one"));
    for gone in ["msg-r2-1", "msg-r3-1", "\"two\"", "three"] {
        assert!(!text.contains(gone), "{gone} in {text}");
    }
    // The branch's events leave runs 2 and 3 out.
    let resp = client()
        .get(format!("{}/threads/b/events?branch=r4", g.base))
        .send()
        .await
        .unwrap();
    let events = parse_sse(&resp.text().await.unwrap());
    let runs: Vec<&str> = events
        .iter()
        .filter(|f| f.ty() == "RUN_STARTED")
        .map(|f| f.data["runId"].as_str().unwrap())
        .collect();
    assert_eq!(runs, vec!["r1", "r4"]);
    // The latest run is r4, so the default history is the branch's.
    let (_, latest) = get_json(&format!("{}/threads/b/messages", g.base)).await;
    assert_eq!(latest["messages"], at4["messages"]);
    let (_, thread) = get_json(&format!("{}/threads/b", g.base)).await;
    let kids: Vec<&str> = thread["tree"][0]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["runId"].as_str().unwrap())
        .collect();
    assert_eq!(kids, vec!["r2", "r4"]);
    g.shutdown().await;
}

#[tokio::test]
async fn server_session_thin_client_sends_only_new_messages() {
    let g = start(GatewayConfig {
        agents: vec![parse_agent_flag("thin=demo", SessionMode::Server).unwrap()],
        ..GatewayConfig::default()
    })
    .await;
    let url = format!("{}/agents/thin/run", g.base);
    let r = node(json!({"op":"conversation","url":url,"threadId":"s","thin":true,"turns":turns(&[("r1","alpha"),("r2","beta"),("r3","gamma")])})).await;
    all_ok(&r);
    let (_, hist) = get_json(&format!("{}/threads/s/messages", g.base)).await;
    let users: Vec<&str> = hist["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(users, vec!["alpha", "beta", "gamma"]);
    // The upstream saw the whole conversation on the last turn.
    assert_eq!(hist["state"]["turn"], 3);
    // And the thin client ends up holding it too (the official reducer
    // appends RUN_STARTED.input's messages after the ones it holds).
    let by_id = |v: &Value| {
        let mut m: Vec<Value> = v.as_array().unwrap().clone();
        m.sort_by_key(|x| x["id"].as_str().unwrap().to_owned());
        Value::Array(m)
    };
    assert_eq!(by_id(&r["messages"]), by_id(&hist["messages"]));
    g.shutdown().await;
}

#[tokio::test]
async fn connect_agent_restores_the_thread_through_the_subclass() {
    let g = start(GatewayConfig::default()).await;
    let url = format!("{}/agents/demo/run", g.base);
    let r = node(json!({"op":"conversation","url":url,"threadId":"c","turns":turns(&[("r1","first"),("r2","second")])})).await;
    all_ok(&r);
    let c = node(json!({"op":"connect","url":url,"threadId":"c","runId":"reconnect-1"})).await;
    let (_, hist) = get_json(&format!("{}/threads/c/messages", g.base)).await;
    assert_eq!(c["messages"], hist["messages"]);
    assert_eq!(c["state"], hist["state"]);
    assert_eq!(c["messages"], r["messages"]);
    g.shutdown().await;
}

#[tokio::test]
async fn restore_after_a_gateway_restart_and_interrupted_runs() {
    let mem = MemoryStore::new();
    let store: Arc<dyn EventStore> = Arc::new(mem.reopen());
    let g = start_with(store, GatewayConfig::default()).await;
    let url = format!("{}/agents/demo/run", g.base);
    let r = node(json!({"op":"conversation","url":url,"threadId":"rs","turns":turns(&[("r1","one"),("r2","two")])})).await;
    all_ok(&r);
    // A run in flight when the gateway dies (its task is aborted, no shutdown).
    let mut slow = input("rs", "r3", "a b c d e f g h i j");
    slow["forwardedProps"] = json!({"demo": {"delayMs": 300}});
    let resp = client().post(&url).json(&slow).send().await.unwrap();
    let seen = read_frames(resp, 2).await;
    g.done.abort();
    let store2: Arc<dyn EventStore> = Arc::new(mem.reopen());
    let before = store2.read_run("default", "rs", "r3").await.unwrap();
    assert!(before.len() >= seen.len());
    let g2 = start_with(store2.clone(), GatewayConfig::default()).await;
    assert_eq!(g2.gw.recover().await.unwrap(), 1);
    let run3 = store2.run("default", "rs", "r3").await.unwrap();
    assert_eq!(run3.status, agui_store::RunStatus::Interrupted);
    let after = store2.read_run("default", "rs", "r3").await.unwrap();
    // Nothing stored was lost; open items were ended, then RUN_ERROR.
    for (a, b) in before.iter().zip(&after) {
        assert_eq!(a.event.json(), b.event.json());
    }
    let last = after.last().unwrap();
    assert_eq!(last.event.type_name(), "RUN_ERROR");
    assert!(last.event.json().contains("\"interrupted\""));
    // The restored history after r2 is what the client had.
    let (_, hist) = get_json(&format!("{}/threads/rs/messages?run=r2", g2.base)).await;
    assert_eq!(hist["messages"], r["messages"]);
    // The thread goes on after the restart.
    let r4 = node(json!({"op":"conversation","url":format!("{}/agents/demo/run", g2.base),"threadId":"rs","turns":turns(&[("r4","after restart")])})).await;
    all_ok(&r4);
    g2.shutdown().await;
}
