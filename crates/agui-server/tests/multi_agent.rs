//! Multi-agent threads and session documents through the gateway: two
//! agents (the demo agent and a second real HTTP upstream) take turns on one
//! thread in server-session mode; the second agent's first input holds the
//! first agent's turns; the thread is exported (no secret, URL or tenant in
//! it), imported into a fresh gateway that has only the demo agent (reduced:
//! the history complete, the missing agent refused by name, the demo agent
//! continues), then the second agent is configured again and continues
//! where its channel left off.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::common::*;
use agui_server::{AgentConfig, Auth, GatewayConfig, SessionMode, Upstream};
use agui_store::Store;
use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};

const TOKEN: &str = "tok-5ecret-0f-acme";
const TENANT_NAME: &str = "tenant-acme-corp";

/// The second agent: records every input it gets and answers with one text
/// message saying how many messages it saw.
async fn writer_upstream(seen: Arc<Mutex<Vec<Value>>>) -> String {
    let app = Router::new().route(
        "/writer",
        post(move |body: String| {
            let seen = seen.clone();
            async move {
                let input: Value = serde_json::from_str(&body).unwrap();
                let n = input["messages"].as_array().map_or(0, Vec::len);
                let (t, r) = (input["threadId"].clone(), input["runId"].clone());
                seen.lock().unwrap().push(input);
                let mid = format!("w-{}", r.as_str().unwrap());
                let events = [
                    json!({"type":"RUN_STARTED","threadId":t,"runId":r}),
                    json!({"type":"TEXT_MESSAGE_START","messageId":mid,"role":"assistant"}),
                    json!({"type":"TEXT_MESSAGE_CONTENT","messageId":mid,"delta":format!("writer saw {n} messages")}),
                    json!({"type":"TEXT_MESSAGE_END","messageId":mid}),
                    json!({"type":"RUN_FINISHED","threadId":t,"runId":r}),
                ];
                let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
                ([("content-type", "text/event-stream")], body)
            }
        }),
    );
    format!("{}/writer", serve_upstream(app).await)
}

fn config(agents: Vec<AgentConfig>) -> GatewayConfig {
    GatewayConfig {
        agents,
        auth: Auth::Tokens(HashMap::from([(TOKEN.to_owned(), TENANT_NAME.to_owned())])),
        ..GatewayConfig::default()
    }
}

fn demo() -> AgentConfig {
    AgentConfig {
        name: "demo".into(),
        upstream: Upstream::Demo,
        sessions: SessionMode::Server,
        ..agui_server::config::demo_agent("")
    }
}

fn writer(url: &str) -> AgentConfig {
    AgentConfig {
        name: "writer".into(),
        upstream: Upstream::Http(url.to_owned()),
        sessions: SessionMode::Server,
        ..agui_server::config::demo_agent("")
    }
}

async fn post_run(base: &str, agent: &str, body: &Value) -> (u16, String) {
    let resp = client()
        .post(format!("{base}/agents/{agent}/run"))
        .bearer_auth(TOKEN)
        .json(body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

async fn get(base: &str, path: &str) -> (u16, String) {
    let resp = client()
        .get(format!("{base}{path}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

fn turn(run: &str, parent: Option<&str>, text: &str) -> Value {
    let mut v = input("t", run, text);
    if let Some(p) = parent {
        v["parentRunId"] = json!(p);
    }
    v
}

fn texts(messages: &Value) -> Vec<String> {
    messages
        .as_array()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_export_reduced_import_and_the_second_agent_returns() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let writer_url = writer_upstream(seen.clone()).await;

    // Gateway A: both agents, turns demo → writer → demo.
    let a = start(config(vec![demo(), writer(&writer_url)])).await;
    let (s, _) = post_run(&a.base, "demo", &turn("r1", None, "plan the trip")).await;
    assert_eq!(s, 200);
    wait_run_end_auth(&a.base, "t").await;
    let (s, _) = post_run(&a.base, "writer", &turn("r2", Some("r1"), "write it up")).await;
    assert_eq!(s, 200);
    wait_run_end_auth(&a.base, "t").await;
    // The writer joined later: its first input holds the demo agent's turn.
    let first = seen.lock().unwrap()[0].clone();
    let got = texts(&first["messages"]);
    assert!(got.contains(&"user: plan the trip".to_owned()), "{got:?}");
    assert!(
        got.contains(&"assistant: You said: plan the trip".to_owned()),
        "{got:?}"
    );
    assert_eq!(got.last().unwrap(), "user: write it up");
    let (s, _) = post_run(&a.base, "demo", &turn("r3", Some("r2"), "thanks")).await;
    assert_eq!(s, 200);
    wait_run_end_auth(&a.base, "t").await;

    // Participants and channels.
    let (s, thread) = get(&a.base, "/threads/t").await;
    assert_eq!(s, 200);
    let thread: Value = serde_json::from_str(&thread).unwrap();
    let parts = &thread["participants"];
    assert_eq!(parts[0]["agent"], "demo");
    assert_eq!(parts[0]["runs"], 2);
    assert_eq!(parts[0]["lastRunId"], "r3");
    assert_eq!(parts[1]["agent"], "writer");
    assert_eq!(parts[1]["runs"], 1);
    assert_eq!(parts[1]["lastRunId"], "r2");
    // Both are configured here; each one's last run started when the run
    // index says.
    let started = |run: &str| {
        thread["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["runId"] == run)
            .unwrap()["startedAt"]
            .clone()
    };
    assert_eq!(parts[0]["configured"], true);
    assert_eq!(parts[1]["configured"], true);
    assert_eq!(parts[0]["lastRunAt"], started("r3"));
    assert_eq!(parts[1]["lastRunAt"], started("r2"));
    assert!(parts[0]["lastRunAt"].as_str().unwrap().ends_with('Z'));
    let ch = channel_state(&a.store, "writer", "r2").await;
    assert_eq!(ch, json!({"sessions": "server", "lastRunId": "r2"}));
    channel_state(&a.store, "demo", "r3").await;
    let (_, messages_a) = get(&a.base, "/threads/t/messages").await;

    // Export: no secret, URL or tenant in it.
    let (s, doc) = get(&a.base, "/threads/t/session").await;
    assert_eq!(s, 200);
    for secret in [
        TOKEN,
        TENANT_NAME,
        writer_url.as_str(),
        "127.0.0.1",
        "http://",
    ] {
        assert!(!doc.contains(secret), "the export holds {secret:?}");
    }
    let (s, nd) = get(&a.base, "/threads/t/session?format=ndjson").await;
    assert_eq!(s, 200);
    assert!(nd.lines().count() > 10 && nd.starts_with("{\"kind\":\"header\""));
    a.shutdown().await;

    // Gateway B: the demo agent only.
    let store: Store = Store::memory();
    let b = start_with(store.clone(), config(vec![demo()])).await;
    let resp = client()
        .post(format!("{}/threads/import", b.base))
        .bearer_auth(TOKEN)
        .body(doc.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let report: Value = resp.json().await.unwrap();
    assert_eq!(report["case"], "reduced");
    assert_eq!(report["missing"], json!(["writer"]));
    assert_eq!(report["channels"], json!(["demo", "writer"]));
    let (_, messages_b) = get(&b.base, "/threads/t/messages").await;
    assert_eq!(messages_b, messages_a, "the history is complete");
    // The missing agent is refused, by name, on this thread.
    let (s, body) = post_run(&b.base, "writer", &turn("r4", Some("r3"), "more")).await;
    assert_eq!(s, 404);
    let err: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(err["error"]["code"], "unknown_agent");
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(msg.contains("\"writer\"") && msg.contains("\"t\""), "{msg}");
    // It is still a participant of the thread, shown as not configured here.
    let (_, thread_b) = get(&b.base, "/threads/t").await;
    let thread_b: Value = serde_json::from_str(&thread_b).unwrap();
    let writer_b = thread_b["participants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["agent"] == "writer")
        .unwrap()
        .clone();
    assert_eq!(writer_b["configured"], false);
    assert_eq!(writer_b["lastRunId"], "r2");
    let demo_b = thread_b["participants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["agent"] == "demo")
        .unwrap()
        .clone();
    assert_eq!(demo_b["configured"], true);
    // The demo agent continues the thread.
    let (s, _) = post_run(&b.base, "demo", &turn("r4", Some("r3"), "go on")).await;
    assert_eq!(s, 200);
    wait_run_end_auth(&b.base, "t").await;
    // Importing again: the thread has history now (409), unless under a new id.
    let resp = client()
        .post(format!("{}/threads/import", b.base))
        .bearer_auth(TOKEN)
        .body(doc.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "thread_exists");
    b.shutdown().await;

    // Gateway C over the same store: the writer is configured again and
    // continues where its channel left off (its last run r2), receiving the
    // whole branch since.
    let c = start_with(store.clone(), config(vec![demo(), writer(&writer_url)])).await;
    let ch = store
        .channel(TENANT_NAME, "t", "writer")
        .await
        .unwrap()
        .unwrap();
    let ch: Value = serde_json::from_str(&ch.state).unwrap();
    assert_eq!(ch["lastRunId"], "r2", "the imported channel");
    let (s, _) = post_run(&c.base, "writer", &turn("r5", Some("r4"), "final draft")).await;
    assert_eq!(s, 200);
    wait_run_end_auth(&c.base, "t").await;
    let second = seen.lock().unwrap().last().unwrap().clone();
    let got = texts(&second["messages"]);
    for want in [
        "user: plan the trip",
        "assistant: writer saw 4 messages",
        "user: thanks",
        "user: go on",
        "assistant: You said: go on",
        "user: final draft",
    ] {
        assert!(
            got.contains(&want.to_owned()),
            "{want:?} missing from {got:?}"
        );
    }
    channel_state(&store, "writer", "r5").await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_errors_over_http_have_a_code_per_case() {
    let src: Store = Store::memory();
    let a = start_with(src.clone(), config(vec![demo()])).await;
    let (s, _) = post_run(&a.base, "demo", &turn("r1", None, "hi")).await;
    assert_eq!(s, 200);
    wait_run_end_auth(&a.base, "t").await;
    let (_, doc) = get(&a.base, "/threads/t/session").await;
    a.shutdown().await;

    // A gateway without the demo agent: empty (422 no_agents) unless
    // historyOnly; damaged documents: 422 with their code; tenant-scoped.
    let b = start(config(vec![AgentConfig {
        name: "other".into(),
        upstream: Upstream::Demo,
        sessions: SessionMode::Server,
        ..agui_server::config::demo_agent("")
    }]))
    .await;
    let post_import = |query: &'static str, body: String| {
        let base = b.base.clone();
        async move {
            let resp = client()
                .post(format!("{base}/threads/import{query}"))
                .bearer_auth(TOKEN)
                .body(body)
                .send()
                .await
                .unwrap();
            let s = resp.status().as_u16();
            (s, resp.json::<Value>().await.unwrap())
        }
    };
    let (s, v) = post_import("", doc.clone()).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (422, Some("no_agents")),
        "{v}"
    );
    let (s, v) = post_import("", String::new()).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (422, Some("empty_document")),
        "{v}"
    );
    let flipped = doc.replacen("\"hi\"", "\"ho\"", 1);
    assert_ne!(flipped, doc);
    let (s, v) = post_import("", flipped).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (422, Some("checksum_mismatch")),
        "{v}"
    );
    let (s, v) = post_import("", doc.replace("agui.session.v1", "agui.session.v7")).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (422, Some("unknown_version")),
        "{v}"
    );
    let (s, _) = get(&b.base, "/threads/t").await;
    assert_eq!(s, 404, "nothing was imported");
    let (s, v) = post_import("?historyOnly=true", doc.clone()).await;
    assert_eq!((s, v["case"].as_str()), (200, Some("history_only")), "{v}");
    let (s, v) = post_import("", doc.clone()).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("thread_exists")),
        "{v}"
    );
    let (s, v) = post_import("?as=t2&historyOnly=true", doc.clone()).await;
    assert_eq!((s, v["threadId"].as_str()), (200, Some("t2")), "{v}");
    // The import landed in the caller's tenant.
    assert!(b.store.thread(TENANT_NAME, "t2").await.is_ok());
    // Body limit.
    let big = " ".repeat(5 * 1024 * 1024);
    let (s, v) = post_import("", big).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (413, Some("body_too_large"))
    );
    // Without a token: 401.
    let resp = client()
        .post(format!("{}/threads/import", b.base))
        .body(doc)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    b.shutdown().await;
}

/// The channel state of `agent` on thread `t` once it names `last` as its
/// last run (the gateway writes it right after the run's last event).
async fn channel_state(store: &Store, agent: &str, last: &str) -> Value {
    let mut seen = Value::Null;
    for _ in 0..200 {
        if let Some(c) = store.channel(TENANT_NAME, "t", agent).await.unwrap() {
            seen = serde_json::from_str(&c.state).unwrap();
            if seen["lastRunId"] == last {
                return seen;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the channel of {agent} never named {last}: {seen}");
}

/// [`wait_run_end`] with the bearer token.
async fn wait_run_end_auth(base: &str, thread: &str) {
    for _ in 0..400 {
        let (s, v) = get(base, &format!("/threads/{thread}")).await;
        if s == 200 {
            let v: Value = serde_json::from_str(&v).unwrap();
            if v["runs"]
                .as_array()
                .is_some_and(|r| !r.is_empty() && r.iter().all(|r| r["status"] != "running"))
            {
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("the run of {thread} did not end");
}
