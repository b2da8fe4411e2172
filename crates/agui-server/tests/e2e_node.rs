//! The official `@ag-ui/client` 1.0.0 `HttpAgent`, and 0.0.59 (under the npm
//! alias `ag-ui-client-0059`), installed from npm by `scripts/e2e-setup` into
//! `e2e/node_modules`, talking to the gateway.
//!
//! These tests need Node.js and the installed client. They find them through
//! `AGUI_E2E_DIR` (default: the repository's `e2e/`) and fail with a clear
//! message when they are missing: run `scripts/e2e-setup` first.

use crate::common::*;
use agui_server::{GatewayConfig, SessionMode, config::parse_agent_flag};
use agui_store::{MemoryStore, Store};
use serde_json::{Value, json};

/// Checks that every official client the tests drive is installed.
fn clients_installed() {
    let dir = e2e_dir();
    for pkg in CLIENTS.iter().chain(&["@copilotkit/core"]) {
        let client = dir.join(format!("node_modules/{pkg}/package.json"));
        assert!(
            client.is_file(),
            "the official client {pkg} is not installed in {} (AGUI_E2E_DIR); run scripts/e2e-setup",
            dir.display()
        );
    }
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
    // And the thin client ends up holding it too, in the same order (the
    // gateway sends it the merged conversation after RUN_STARTED).
    assert_eq!(r["messages"], hist["messages"]);
    // A full client of the same agent holds the same, in the same order.
    let full = node(json!({"op":"conversation","url":url,"threadId":"s2","turns":turns(&[("r1","alpha"),("r2","beta"),("r3","gamma")])})).await;
    all_ok(&full);
    let (_, hist2) = get_json(&format!("{}/threads/s2/messages", g.base)).await;
    assert_eq!(full["messages"], hist2["messages"]);
    let roles = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|m| format!("{}:{}", m["role"], m["content"]))
            .collect()
    };
    assert_eq!(roles(&r["messages"]), roles(&full["messages"]));
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
    let store: Store = Store::new(mem.reopen());
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
    let store2: Store = Store::new(mem.reopen());
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

/// The two official client versions the gateway is tested with: 1.0.0 and
/// 0.0.59 (installed under an npm alias; CopilotKit's packages depend on it).
const CLIENTS: [&str; 2] = ["@ag-ui/client", "ag-ui-client-0059"];

#[tokio::test]
async fn both_client_versions_converse_reconnect_and_branch() {
    clients_installed();
    let g = start(GatewayConfig {
        agents: vec![
            parse_agent_flag("demo=demo", SessionMode::Client).unwrap(),
            parse_agent_flag("thin=demo", SessionMode::Server).unwrap(),
        ],
        ..GatewayConfig::default()
    })
    .await;
    let url = format!("{}/agents/demo/run", g.base);
    let mut finals = Vec::new();
    for (i, pkg) in CLIENTS.iter().enumerate() {
        let t = format!("v{i}");
        // Converse: the client ends holding the stored conversation.
        let conv = node(json!({"client":pkg,"op":"conversation","url":url,"threadId":t,"turns":turns(&[("r1","one"),("r2","two")])})).await;
        all_ok(&conv);
        let (_, hist) = get_json(&format!("{}/threads/{t}/messages", g.base)).await;
        assert_eq!(conv["messages"], hist["messages"], "{pkg}");
        assert_eq!(conv["state"], hist["state"], "{pkg}");
        assert_eq!(hist["messages"].as_array().unwrap().len(), 6, "{pkg}");
        // Reconnect: a fresh client restores it through /connect.
        let c =
            node(json!({"client":pkg,"op":"connect","url":url,"threadId":t,"runId":"reconnect"}))
                .await;
        assert_eq!(c["messages"], hist["messages"], "{pkg}");
        assert_eq!(c["state"], hist["state"], "{pkg}");
        // Branch from r1 through the client: run 2 is not in the branch.
        let (_, at1) = get_json(&format!("{}/threads/{t}/messages?run=r1", g.base)).await;
        let b = node(json!({"client":pkg,"op":"branch","url":url,"threadId":t,"parentRunId":"r1","runId":"b1","messages":at1["messages"],"state":at1["state"],"text":"another two"})).await;
        all_ok(&b);
        let (_, atb) = get_json(&format!("{}/threads/{t}/messages?run=b1", g.base)).await;
        assert_eq!(b["messages"], atb["messages"], "{pkg}");
        assert_eq!(b["state"], atb["state"], "{pkg}");
        let text = atb["messages"].to_string();
        assert!(
            text.contains("another two") && text.contains("one"),
            "{pkg}: {text}"
        );
        assert!(
            !text.contains("msg-r2-1") && !text.contains("\"two\""),
            "{pkg}: {text}"
        );
        let (_, thread) = get_json(&format!("{}/threads/{t}", g.base)).await;
        let b1 = thread["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["runId"] == "b1")
            .unwrap()
            .clone();
        assert_eq!(b1["parentRunId"], "r1", "{pkg}");
        // A thin client in server-session mode holds the conversation in
        // its stored order.
        let thin = node(json!({"client":pkg,"op":"conversation","url":format!("{}/agents/thin/run", g.base),"threadId":format!("thin{i}"),"thin":true,"turns":turns(&[("r1","alpha"),("r2","beta"),("r3","gamma")])})).await;
        all_ok(&thin);
        let (_, th) = get_json(&format!("{}/threads/thin{i}/messages", g.base)).await;
        assert_eq!(thin["messages"], th["messages"], "{pkg}");
        finals.push((
            conv["messages"].clone(),
            c["messages"].clone(),
            b["messages"].clone(),
        ));
    }
    // Both versions end with the same conversations (the demo agent's ids
    // depend only on run ids; the user message ids on the thread id).
    let strip = |v: &Value| v.to_string().replace("v0", "vX").replace("v1", "vX");
    assert_eq!(strip(&finals[0].0), strip(&finals[1].0));
    assert_eq!(strip(&finals[0].2), strip(&finals[1].2));
    g.shutdown().await;
}

/// CopilotKit's own client core, unchanged, with its `runtimeUrl` set to the
/// gateway's CopilotKit prefix: a two-turn conversation, a fresh core (a
/// reload) restoring it through connect, then a fresh core attaching to a
/// run in flight and stopping it with CopilotKit's stop.
#[tokio::test]
async fn copilotkit_client_converses_restores_attaches_and_stops() {
    clients_installed();
    let g = start(GatewayConfig {
        copilotkit_prefix: Some("/copilotkit".into()),
        ..GatewayConfig::default()
    })
    .await;
    let rt = format!("{}/copilotkit", g.base);
    let ck = |plan: Value| node_script("node/copilotkit.mjs", plan);
    let conv = ck(json!({"op":"conversation","runtimeUrl":rt,"agent":"demo","threadId":"ck","texts":["hello","what is up"]})).await;
    let (_, hist) = get_json(&format!("{}/threads/ck/messages", g.base)).await;
    assert_eq!(conv["messages"], hist["messages"]);
    assert_eq!(conv["state"], hist["state"]);
    assert_eq!(hist["state"]["turn"], 2);
    let (_, thread) = get_json(&format!("{}/threads/ck", g.base)).await;
    assert_eq!(thread["runs"].as_array().unwrap().len(), 2, "{thread}");
    // A reload: a fresh core restores the conversation through connect.
    let restored = ck(json!({"op":"restore","runtimeUrl":rt,"agent":"demo","threadId":"ck"})).await;
    assert_eq!(restored["messages"], hist["messages"]);
    assert_eq!(restored["state"], hist["state"]);
    // A slow run in flight (started by another client); a fresh core
    // attaches to it and stops it.
    let mut msgs = hist["messages"].as_array().unwrap().clone();
    msgs.push(json!({"id":"ck-u3","role":"user","content":"tell me a long story"}));
    let body = json!({"threadId":"ck","runId":"slow","messages":msgs,"state":hist["state"],"tools":[],"context":[],"forwardedProps":{"demo":{"delayMs":200,"extraDeltas":200}}});
    let resp = client()
        .post(format!("{rt}/agent/demo/run"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let seen = read_frames(resp, 2).await;
    assert_eq!(seen[0].ty(), "RUN_STARTED");
    let stopped =
        ck(json!({"op":"attach_and_stop","runtimeUrl":rt,"agent":"demo","threadId":"ck"})).await;
    assert_eq!(stopped["sawPartial"], true, "{stopped}");
    let (_, thread) = get_json(&format!("{}/threads/ck", g.base)).await;
    let slow = thread["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["runId"] == "slow")
        .unwrap()
        .clone();
    assert_eq!(slow["status"], "cancelled", "{thread}");
    let (_, after) = get_json(&format!("{}/threads/ck/messages", g.base)).await;
    assert_eq!(stopped["messages"], after["messages"]);
    // The stopped answer is kept as far as it went, and ended.
    let last = after["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "assistant", "{after}");
    // Discovery lists the configured agents.
    let (status, info) = get_json(&format!("{rt}/info")).await;
    assert_eq!(status, 200);
    assert!(info["agents"]["demo"].is_object(), "{info}");
    g.shutdown().await;
}

/// A run stopped mid-stream, seen by each client version: 1.0.0 accepts the
/// `cancelled` outcome; 0.0.59's schema refuses it, after applying the
/// closing events, so its state still holds the stopped answer as stored.
#[tokio::test]
async fn a_stopped_run_as_each_client_version_sees_it() {
    clients_installed();
    let g = start(GatewayConfig::default()).await;
    let url = format!("{}/agents/demo/run", g.base);
    for (i, pkg) in CLIENTS.iter().enumerate() {
        let t = format!("stop{i}");
        let plan = json!({"client":pkg,"op":"conversation","url":url,"threadId":t,"turns":[
            {"runId":"r1","text":"a long answer please","forwardedProps":{"demo":{"delayMs":100,"extraDeltas":200}}}]});
        let client_run = tokio::spawn(node(plan));
        // Wait for the run's answer to start streaming, then stop it.
        let mut streaming = false;
        for _ in 0..200 {
            let (_, events) = get_json(&format!("{}/threads/{t}/messages", g.base)).await;
            if events["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "assistant"))
            {
                streaming = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        assert!(streaming, "{pkg}: the run never streamed");
        let stop = client()
            .post(format!("{}/threads/{t}/runs/r1/stop", g.base))
            .send()
            .await
            .unwrap();
        assert_eq!(stop.status().as_u16(), 200, "{pkg}");
        let report = client_run.await.unwrap();
        let (_, hist) = get_json(&format!("{}/threads/{t}/messages", g.base)).await;
        let (_, thread) = get_json(&format!("{}/threads/{t}", g.base)).await;
        assert_eq!(thread["runs"][0]["status"], "cancelled", "{pkg}");
        assert_eq!(report["messages"], hist["messages"], "{pkg}: {report}");
        let ok = report["turns"][0]["ok"].as_bool().unwrap();
        match *pkg {
            "@ag-ui/client" => assert!(ok, "1.0.0 refused the stopped run: {report}"),
            _ => assert!(!ok, "0.0.59 accepted the cancelled outcome: {report}"),
        }
    }
    g.shutdown().await;
}

/// Concurrent branches through both official client versions: while a run
/// of the thread is in flight, the client branches from an earlier run; the
/// branch runs at once, set aside (its frames carry no ids, which the
/// clients do not need), the client ends holding the branch's conversation,
/// and once the run in flight ended the branch joins the thread's log, where
/// its restored conversation is the one the client holds.
#[tokio::test]
async fn a_branch_beside_a_run_in_flight_through_both_client_versions() {
    clients_installed();
    let g = start(GatewayConfig::default()).await;
    let url = format!("{}/agents/demo/run", g.base);
    for (i, pkg) in CLIENTS.iter().enumerate() {
        let t = format!("c{i}");
        let conv = node(json!({"client":pkg,"op":"conversation","url":url,"threadId":t,"turns":turns(&[("r1","one")])})).await;
        all_ok(&conv);
        let (_, at1) = get_json(&format!("{}/threads/{t}/messages?run=r1", g.base)).await;
        // r2 in flight for a while (a plain HTTP client, paced demo agent).
        let mut slow = input(&t, "r2", "a b c d e f g h");
        slow["parentRunId"] = json!("r1");
        slow["forwardedProps"] = json!({"demo": {"delayMs": 250}});
        let resp = client().post(&url).json(&slow).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let r2 = tokio::spawn(async move { resp.text().await.unwrap() });
        let b = node(json!({"client":pkg,"op":"branch","url":url,"threadId":t,"parentRunId":"r1","runId":"b1","messages":at1["messages"],"state":at1["state"],"text":"beside"})).await;
        all_ok(&b);
        assert!(!r2.is_finished(), "{pkg}: the branch waited for r2");
        let text = b["messages"].to_string();
        assert!(
            text.contains("beside") && text.contains("one"),
            "{pkg}: {text}"
        );
        r2.await.unwrap();
        let mut joined = false;
        for _ in 0..200 {
            let (_, th) = get_json(&format!("{}/threads/{t}", g.base)).await;
            if th["runsAside"] == json!([]) && th["runs"].as_array().unwrap().len() == 3 {
                joined = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        assert!(joined, "{pkg}: b1 did not join");
        let (_, atb) = get_json(&format!("{}/threads/{t}/messages?run=b1", g.base)).await;
        assert_eq!(b["messages"], atb["messages"], "{pkg}");
        assert_eq!(b["state"], atb["state"], "{pkg}");
        assert!(!atb["messages"].to_string().contains("a b c"), "{pkg}");
    }
    g.shutdown().await;
}
