//! What the gateway records and forwards across runs: normalized
//! `RUN_STARTED.input` (rebuilt exactly into the upstream input), storage that
//! grows with each run and not with the conversation, and per-branch
//! upstream thread ids for stateful frameworks.

use crate::common::*;
use agui_server::config::parse_agent_flag;
use agui_server::{GatewayConfig, SessionMode, UpstreamThread};
use serde_json::{Value, json};

/// The rebuild rule of docs/server.md: the branch history, then the stored
/// messages merged in by id (replacing in place, else appended).
fn rebuild(history: &[Value], stored: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = history.to_vec();
    for m in stored {
        match out.iter().position(|h| h["id"] == m["id"]) {
            Some(i) => out[i] = m.clone(),
            None => out.push(m.clone()),
        }
    }
    out
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": text})
}

fn body(thread: &str, run: &str, parent: Option<&str>, messages: Vec<Value>) -> Value {
    let mut b = json!({"threadId": thread, "runId": run, "state": {}, "messages": messages,
        "tools": [], "context": [], "forwardedProps": {}});
    if let Some(p) = parent {
        b["parentRunId"] = json!(p);
    }
    b
}

async fn messages_at(base: &str, thread: &str, run: &str) -> Vec<Value> {
    let (_, v) = get_json(&format!("{base}/threads/{thread}/messages?run={run}")).await;
    v["messages"].as_array().unwrap().clone()
}

/// Every run's stored RUN_STARTED, by run id.
async fn started(g: &Running, thread: &str) -> Vec<Value> {
    let head = g.store.thread("default", thread).await.unwrap().last_seq;
    g.store
        .read_range("default", thread, 1, head)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.event.event_type().as_str() == "RUN_STARTED")
        .map(|e| serde_json::from_str(e.event.json()).unwrap())
        .collect()
}

#[tokio::test]
async fn stored_input_is_normalized_and_rebuilds_the_exact_upstream_input() {
    let (url, seen) = recording_upstream().await;
    let g = start(GatewayConfig {
        agents: vec![
            parse_agent_flag(&format!("full={url}"), SessionMode::Client).unwrap(),
            parse_agent_flag(&format!("thin={url}"), SessionMode::Server).unwrap(),
        ],
        ..GatewayConfig::default()
    })
    .await;
    // A full client (sends the whole history), four turns and a branch from
    // run 2 with an edited last user message; then a thin client in server
    // mode, three turns and a branch.
    let mut history: Vec<Value> = Vec::new();
    for i in 1..=4 {
        let run = format!("f{i}");
        let mut msgs = history.clone();
        msgs.push(user(&format!("fu{i}"), &format!("question {i}")));
        let (s, frames, _) = run_body(&g.base, "full", &body("f", &run, None, msgs)).await;
        assert_eq!((s, frames.last().unwrap().ty()), (200, "RUN_FINISHED"));
        history = messages_at(&g.base, "f", &run).await;
    }
    let mut branch = messages_at(&g.base, "f", "f1").await;
    branch.push(user("fu2", "question 2, rephrased"));
    let (s, _, _) = run_body(&g.base, "full", &body("f", "fb", Some("f1"), branch)).await;
    assert_eq!(s, 200);
    for i in 1..=3 {
        let run = format!("t{i}");
        let msgs = vec![user(&format!("tu{i}"), &format!("thin {i}"))];
        let (s, _, _) = run_body(&g.base, "thin", &body("t", &run, None, msgs)).await;
        assert_eq!(s, 200);
    }
    let (s, _, _) = run_body(
        &g.base,
        "thin",
        &body("t", "tb", Some("t1"), vec![user("tub", "thin branch")]),
    )
    .await;
    assert_eq!(s, 200);
    // For every run: branch history + stored input == what the upstream got.
    let seen = seen.lock().unwrap().clone();
    let mut checked = 0;
    for thread in ["f", "t"] {
        let (_, info) = get_json(&format!("{}/threads/{thread}", g.base)).await;
        let runs = info["runs"].as_array().unwrap().clone();
        let starts = started(&g, thread).await;
        for (run, start) in runs.iter().zip(&starts) {
            let run_id = run["runId"].as_str().unwrap();
            assert_eq!(start["runId"], run_id);
            let history = match run["parentRunId"].as_str() {
                Some(p) => messages_at(&g.base, thread, p).await,
                None => Vec::new(),
            };
            let stored = start["input"]["messages"].as_array().unwrap();
            let upstream = seen
                .iter()
                .find(|b| b["runId"] == run_id && b["threadId"] == thread)
                .unwrap();
            assert_eq!(
                rebuild(&history, stored),
                *upstream["messages"].as_array().unwrap(),
                "run {run_id}"
            );
            // Normalized: nothing of the branch history is restated.
            let ids: Vec<&Value> = history.iter().map(|m| &m["id"]).collect();
            assert!(
                stored
                    .iter()
                    .all(|m| !ids.contains(&&m["id"]) || run_id == "fb"),
                "run {run_id} restates history: {stored:?}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 9);
    g.shutdown().await;
}

async fn run_body(base: &str, agent: &str, b: &Value) -> (u16, Vec<Frame>, String) {
    run(base, agent, b).await
}

/// Stored bytes per run of a 200-turn conversation through a full client:
/// flat, because no run restates the conversation. Prints the figures.
#[tokio::test]
async fn two_hundred_turns_store_flat_bytes_per_turn() {
    let g = start(GatewayConfig::default()).await;
    let mut history: Vec<Value> = Vec::new();
    let mut full_input_bytes = Vec::new();
    let mut full_messages_bytes = Vec::new();
    for i in 1..=200 {
        let run_id = format!("r{i:03}");
        let mut msgs = history.clone();
        msgs.push(user(
            &format!("u{i:03}"),
            &format!("turn {i:03} of the long thread"),
        ));
        let b = body("long", &run_id, None, msgs);
        full_input_bytes.push(b.to_string().len());
        full_messages_bytes.push(b["messages"].to_string().len() as u64);
        let (s, frames, _) = run(&g.base, "demo", &b).await;
        assert_eq!((s, frames.last().unwrap().ty()), (200, "RUN_FINISHED"));
        // The client's state after the run: its messages plus the answer.
        history = messages_at(&g.base, "long", &run_id).await;
    }
    // From the run index (GET /threads/long nests its 200-deep run tree
    // beyond what serde_json reads by default).
    let mut runs = g
        .store
        .list_runs(
            "default",
            &agui_store::RunFilter {
                thread_id: Some("long".into()),
                limit: agui_store::MAX_PAGE,
                ..agui_store::RunFilter::default()
            },
        )
        .await
        .unwrap()
        .runs;
    runs.sort_by_key(|r| r.first_seq);
    let bytes: Vec<u64> = runs.iter().map(|r| r.bytes).collect();
    let total: u64 = bytes.iter().sum();
    assert_eq!(bytes.len(), 200);
    let (lo, hi) = (
        *bytes[1..].iter().min().unwrap(),
        *bytes[1..].iter().max().unwrap(),
    );
    // What each run would have stored had its RUN_STARTED recorded the
    // client's whole input, as before normalization: the same run with its
    // stored (normalized) messages replaced by the full list it was sent.
    let mut unnormalized = Vec::with_capacity(runs.len());
    for (r, full) in runs.iter().zip(&full_messages_bytes) {
        let first = g
            .store
            .read_range("default", "long", r.first_seq, r.first_seq)
            .await
            .unwrap();
        let started: Value = serde_json::from_str(first[0].event.json()).unwrap();
        assert_eq!(started["type"], "RUN_STARTED");
        let kept = started["input"]["messages"].to_string().len() as u64;
        assert!(
            kept <= *full,
            "run {}: normalized input is longer",
            r.run_id
        );
        unnormalized.push(r.bytes - kept + full);
    }
    println!(
        "200-turn thread: stored bytes per turn: turn 2 {}, turn 100 {}, turn 200 {}; min {lo}, max {hi}; total {} (request body of turn 200: {} bytes)",
        bytes[1], bytes[99], bytes[199], total, full_input_bytes[199]
    );
    println!(
        "without normalization (full input recorded): turn 2 {}, turn 100 {}, turn 200 {}; total {}",
        unnormalized[1],
        unnormalized[99],
        unnormalized[199],
        unnormalized.iter().sum::<u64>()
    );
    assert!(
        (hi as f64) <= lo as f64 * 1.10,
        "bytes per turn not flat within 10%: {lo}..{hi}"
    );
    g.shutdown().await;
}

#[tokio::test]
async fn per_branch_upstream_threads_for_stateful_frameworks() {
    let (url, seen) = recording_upstream().await;
    let mut a = parse_agent_flag(&format!("st={url}"), SessionMode::Client).unwrap();
    a.upstream_thread = UpstreamThread::PerBranch;
    let g = start(GatewayConfig {
        agents: vec![a],
        ..GatewayConfig::default()
    })
    .await;
    let (_, f1, _) = run(
        &g.base,
        "st",
        &body("p", "r1", None, vec![user("u1", "one")]),
    )
    .await;
    let mut h = messages_at(&g.base, "p", "r1").await;
    h.push(user("u2", "two"));
    let _ = run(&g.base, "st", &body("p", "r2", None, h)).await;
    // A branch from r1: forks the upstream thread, with the branch's history.
    let mut b = messages_at(&g.base, "p", "r1").await;
    b.push(user("u2b", "two, again"));
    let (_, fb, _) = run(&g.base, "st", &body("p", "b1", Some("r1"), b.clone())).await;
    // Continuing the branch keeps its upstream thread.
    let mut c = messages_at(&g.base, "p", "b1").await;
    c.push(user("u3b", "three"));
    let _ = run(&g.base, "st", &body("p", "b2", Some("b1"), c)).await;
    let seen = seen.lock().unwrap().clone();
    let tid = |run: &str| {
        seen.iter().find(|x| x["runId"] == run).unwrap()["threadId"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(tid("r1"), "p");
    assert_eq!(tid("r2"), "p");
    assert_eq!(tid("b1"), "p~b1");
    assert_eq!(tid("b2"), "p~b1");
    let fork = seen.iter().find(|x| x["runId"] == "b1").unwrap();
    assert_eq!(fork["messages"].as_array().unwrap(), &b);
    // Clients and the store see the user's thread id only.
    for f in f1.iter().chain(&fb) {
        if let Some(t) = f.data.get("threadId") {
            assert_eq!(t, "p", "{f:?}");
        }
    }
    for s in started(&g, "p").await {
        assert_eq!(s["threadId"], "p");
        assert_eq!(s["input"]["threadId"], "p");
    }
    // The branch's stored history holds no message of r2.
    let branch = messages_at(&g.base, "p", "b2").await;
    assert!(branch.iter().all(|m| m["id"] != "u2" && m["id"] != "a-r2"));
    g.shutdown().await;
}

/// Each agent's channel records the upstream thread id it used per branch
/// (`upstreamThreads`, keyed by the branch's first run). Imported under a
/// new thread id, a branch goes upstream under an id the framework has never
/// seen, so the gateway sends it the branch's whole history (as for a fork)
/// instead of continuing from nothing; on the original thread, continuing
/// the same branch sends only what the client sent.
#[tokio::test]
async fn upstream_threads_are_recorded_per_branch_and_an_import_under_a_new_id_resends_the_history()
{
    let (url, seen) = recording_upstream().await;
    let mut a = parse_agent_flag(&format!("st={url}"), SessionMode::Client).unwrap();
    a.upstream_thread = UpstreamThread::PerBranch;
    let g = start(GatewayConfig {
        agents: vec![a],
        ..GatewayConfig::default()
    })
    .await;
    let _ = run(
        &g.base,
        "st",
        &body("p", "r1", None, vec![user("u1", "one")]),
    )
    .await;
    let mut h = messages_at(&g.base, "p", "r1").await;
    h.push(user("u2", "two"));
    let _ = run(&g.base, "st", &body("p", "r2", None, h)).await;
    let mut b = messages_at(&g.base, "p", "r1").await;
    b.push(user("u2b", "two, again"));
    let _ = run(&g.base, "st", &body("p", "b1", Some("r1"), b)).await;
    let mut c = messages_at(&g.base, "p", "b1").await;
    c.push(user("u3b", "three"));
    let _ = run(&g.base, "st", &body("p", "b2", Some("b1"), c)).await;

    // The session document carries the channel with both branches.
    let doc = client()
        .get(format!("{}/threads/p/session", g.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let parsed: Value = serde_json::from_str(&doc).unwrap();
    let channel = parsed
        .as_array()
        .and_then(|records| records.iter().find(|r| r["kind"] == "channel"))
        .unwrap_or_else(|| panic!("no channel record in {doc}"));
    assert_eq!(
        channel["state"]["upstreamThreads"],
        json!({"r1": "p", "b1": "p~b1"}),
        "{channel}"
    );
    assert_eq!(channel["state"]["lastRunId"], "b2");

    // Imported under a new id on the same gateway.
    let resp = client()
        .post(format!("{}/threads/import?as=q", g.base))
        .body(doc)
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        200,
        "{}",
        resp.text().await.unwrap()
    );
    let thin = vec![user("u4b", "four")];
    let _ = run(&g.base, "st", &body("q", "q3", Some("b2"), thin.clone())).await;
    // The original thread, continued the same way.
    let _ = run(&g.base, "st", &body("p", "p3", Some("b2"), thin.clone())).await;

    let seen = seen.lock().unwrap().clone();
    let sent = |run: &str| seen.iter().find(|x| x["runId"] == run).unwrap().clone();
    let ids = |v: &Value| -> Vec<String> {
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let copy = sent("q3");
    assert_eq!(
        copy["threadId"], "q~b1",
        "the copy never shares the original's upstream state"
    );
    assert_eq!(
        ids(&copy),
        ["u1", "a-r1", "u2b", "a-b1", "u3b", "a-b2", "u4b"],
        "the new upstream thread starts from the branch's history"
    );
    let original = sent("p3");
    assert_eq!(original["threadId"], "p~b1");
    assert_eq!(
        ids(&original),
        ["u4b"],
        "a known upstream thread gets what the client sent"
    );
    // The copy's channel now records its own id for the branch.
    let (_, session) = get_json(&format!("{}/threads/q/session", g.base)).await;
    let text = session.to_string();
    assert!(text.contains(r#""b1":"q~b1""#), "{text}");
    g.shutdown().await;
}

/// A thread exported while its run was in flight, imported under a new id:
/// no process forwards the copy's run, so the import ends it (open message
/// closed, `RUN_ERROR` `interrupted`) and says so; left `running`, it held
/// the copy for good (every new run 409 `run_in_flight`, DELETE 409,
/// attachers waiting) until a restart.
#[tokio::test]
async fn an_import_ends_the_runs_the_document_left_in_flight() {
    let g = start(GatewayConfig::default()).await;
    append_json(&g.store, "t", half_run("t", "r1", "m1")).await;
    let doc = client()
        .get(format!("{}/threads/t/session", g.base))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let resp = client()
        .post(format!("{}/threads/import?as=copy", g.base))
        .body(doc)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let report: Value = resp.json().await.unwrap();
    assert_eq!(report["closedRuns"], json!(["r1"]), "{report}");
    let (_, thread) = get_json(&format!("{}/threads/copy", g.base)).await;
    assert_eq!(thread["runs"][0]["status"], "interrupted", "{thread}");
    let types: Vec<String> = thread_events(&g.base, "copy")
        .await
        .iter()
        .map(|f| f.ty().to_owned())
        .collect();
    assert_eq!(
        types[types.len() - 2..],
        ["TEXT_MESSAGE_END".to_owned(), "RUN_ERROR".to_owned()],
        "{types:?}"
    );
    assert!(
        metrics_text(&g.base)
            .await
            .contains("agui_runs_total{status=\"interrupted\"} 1"),
        "the close is counted"
    );
    // The copy takes new runs; the source, still in flight for all this
    // gateway knows, is left as it was.
    let (status, frames, text) = run(&g.base, "demo", &input("copy", "r2", "next")).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    let (_, source) = get_json(&format!("{}/threads/t", g.base)).await;
    assert_eq!(source["runs"][0]["status"], "running", "{source}");
    g.shutdown().await;
}
