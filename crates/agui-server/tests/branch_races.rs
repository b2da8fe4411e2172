//! Probes of concurrent branches (runs set aside) as an attacker or an
//! unlucky operator meets them: races on run ids, deletes and stops, odd
//! and long ids, restarts and store errors: what `branches.rs` does not
//! cover. Seven of them found defects when first written (a run id reused
//! while the run holding it had stored nothing yet, by a branch or by the
//! thread's next run; a delete while a branch waited for its upstream;
//! another run of the same id taken for a join cut short; the branch of a
//! run set aside from a run set aside; the answer to ids too long to set
//! aside; the branch of a run that joined its thread while it was read),
//! fixed with them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::*;
use agui_protocol::Event;
use agui_server::config::{demo_agent, parse_agent_flag};
use agui_server::{GatewayConfig, OnDisconnect, SessionMode};
use agui_store::aside::{aside_tenant, aside_thread};
use agui_store::conformance::hooked::{Hooked, Hooks};
use agui_store::{
    AppendRequest, Backend, Batch, Commit, MemoryStore, RunStatus, Store, StoreError,
};
use axum::Router;
use axum::body::Body;
use axum::response::IntoResponse;
use futures::StreamExt;
use serde_json::{Value, json};

/// A run of the demo agent that takes about `ms` milliseconds per event.
fn slow(thread: &str, run: &str, ms: u64) -> Value {
    let mut body = input(thread, run, "a b c d e f");
    body["forwardedProps"] = json!({"demo": {"delayMs": ms}});
    body
}

fn branch(thread: &str, run: &str, parent: &str, text: &str) -> Value {
    let mut body = input(thread, run, text);
    body["parentRunId"] = json!(parent);
    body
}

/// A run for [`paced_upstream`]: its upstream answers after `first_ms`
/// (nothing of the run is stored before), says `say`, and ends `end_ms`
/// later.
fn paced(
    thread: &str,
    run: &str,
    parent: Option<&str>,
    first_ms: u64,
    end_ms: u64,
    say: &str,
) -> Value {
    let mut body = input(thread, run, "go");
    if let Some(p) = parent {
        body["parentRunId"] = json!(p);
    }
    body["forwardedProps"] = json!({"firstMs": first_ms, "endMs": end_ms, "say": say});
    body
}

/// An upstream (agent `up`) that waits `forwardedProps.firstMs` before it
/// answers at all, then sends `RUN_STARTED` and one assistant message
/// saying `forwardedProps.say`, and `RUN_FINISHED` after
/// `forwardedProps.endMs`.
async fn paced_upstream() -> String {
    let app = Router::new().route(
        "/agent",
        axum::routing::post(move |body: axum::Json<Value>| async move {
            let input = body.0;
            let props = &input["forwardedProps"];
            let first = props["firstMs"].as_u64().unwrap_or(0);
            let end = props["endMs"].as_u64().unwrap_or(0);
            let say = props["say"].as_str().unwrap_or("hello").to_owned();
            tokio::time::sleep(Duration::from_millis(first)).await;
            let (t, r) = (&input["threadId"], input["runId"].as_str().unwrap());
            let m = format!("a-{r}");
            let head = [
                json!({"type":"RUN_STARTED","threadId":t,"runId":r}),
                json!({"type":"TEXT_MESSAGE_START","messageId":m,"role":"assistant"}),
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":m,"delta":say}),
                json!({"type":"TEXT_MESSAGE_END","messageId":m}),
            ];
            let tail = json!({"type":"RUN_FINISHED","threadId":t,"runId":r});
            let head: String = head.iter().map(|e| format!("data: {e}\n\n")).collect();
            let chunks = futures::stream::iter([(head, 0), (format!("data: {tail}\n\n"), end)])
                .then(|(text, ms)| async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok::<_, std::convert::Infallible>(text)
                });
            (
                [("content-type", "text/event-stream")],
                Body::from_stream(chunks),
            )
                .into_response()
        }),
    );
    format!("{}/agent", serve_upstream(app).await)
}

/// The demo agent (`demo`) and the paced upstream (`up`).
async fn with_paced() -> GatewayConfig {
    let url = paced_upstream().await;
    GatewayConfig {
        agents: vec![
            demo_agent("demo"),
            parse_agent_flag(&format!("up={url}"), SessionMode::Client).unwrap(),
        ],
        ..GatewayConfig::default()
    }
}

/// Starts a run in the background; the task gives its status and frames.
fn spawn_run(base: &str, agent: &str, body: Value) -> tokio::task::JoinHandle<(u16, Vec<Frame>)> {
    let (base, agent) = (base.to_owned(), agent.to_owned());
    tokio::spawn(async move {
        let (s, frames, _) = run(&base, &agent, &body).await;
        (s, frames)
    })
}

fn ev(v: Value) -> Event {
    Event::from_json(&v.to_string()).unwrap()
}

/// A whole run: started (from `parent`), one assistant message, finished.
fn whole_run(thread: &str, run: &str, parent: Option<&str>, say: &str) -> Vec<Event> {
    let mut started = json!({"type":"RUN_STARTED","threadId":thread,"runId":run});
    if let Some(p) = parent {
        started["parentRunId"] = json!(p);
    }
    let m = format!("m-{run}-{say}");
    vec![
        ev(started),
        ev(json!({"type":"TEXT_MESSAGE_START","messageId":m,"role":"assistant"})),
        ev(json!({"type":"TEXT_MESSAGE_CONTENT","messageId":m,"delta":say})),
        ev(json!({"type":"TEXT_MESSAGE_END","messageId":m})),
        ev(json!({"type":"RUN_FINISHED","threadId":thread,"runId":run})),
    ]
}

fn texts(messages: &Value) -> Vec<String> {
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn error_code(resp: reqwest::Response) -> (u16, String) {
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    (
        status,
        body["error"]["code"].as_str().unwrap_or("").to_owned(),
    )
}

fn code_of(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Waits (bounded) until the gateway forwards `n` runs (`agui_runs_in_flight`):
/// each has reserved its thread, or its aside thread, whether or not it
/// stored anything yet.
async fn wait_in_flight(base: &str, n: u64) {
    let want = format!("agui_runs_in_flight {n}\n");
    for _ in 0..1000 {
        if metrics_text(base).await.contains(&want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never {n} runs in flight");
}

/// The runs (id, status) of a thread's log, read from the store.
async fn log_runs(store: &Store, thread: &str) -> Vec<(String, RunStatus)> {
    let mut runs = store
        .list_runs(
            "default",
            &agui_store::RunFilter {
                thread_id: Some(thread.to_owned()),
                limit: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .runs;
    runs.sort_by_key(|r| r.first_seq);
    runs.into_iter().map(|r| (r.run_id, r.status)).collect()
}

/// How many runs set aside the default tenant holds (every thread).
async fn aside_count(store: &Store) -> usize {
    store
        .list_runs(&aside_tenant("default"), &Default::default())
        .await
        .unwrap()
        .runs
        .len()
}

// ---------------------------------------------------------------------
// Run ids taken twice
// ---------------------------------------------------------------------

/// The thread's run `r2` has stored nothing yet (its upstream is slow to
/// answer); a branch from `r1` under the same id `r2` must be refused
/// (409 `run_exists`), not run aside under an id the log is about to hold.
/// Accepted, it later "joins" as a join cut short (same parent, same
/// event count as the log's `r2`): its aside copy is deleted and the
/// answer its client got is gone.
#[tokio::test]
async fn a_branch_cannot_take_the_id_of_the_run_in_flight_before_it_stored_anything() {
    let g = start(with_paced().await).await;
    let (s, _, _) = run(&g.base, "demo", &input("t", "r1", "first")).await;
    assert_eq!(s, 200);
    wait_in_flight(&g.base, 0).await;
    let r2 = spawn_run(
        &g.base,
        "up",
        paced("t", "r2", None, 1000, 0, "the log answer"),
    );
    wait_in_flight(&g.base, 1).await;
    let (s, _, body) = run(
        &g.base,
        "up",
        &paced("t", "r2", Some("r1"), 0, 0, "the aside answer"),
    )
    .await;
    let (s2, f2) = r2.await.unwrap();
    assert_eq!(s2, 200);
    assert_eq!(f2.last().unwrap().ty(), "RUN_FINISHED");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, v) = get_json(&format!("{}/threads/t", g.base)).await;
    let (_, m) = get_json(&format!("{}/threads/t/messages?run=r2", g.base)).await;
    assert_eq!(
        s,
        409,
        "a second run r2 was accepted; afterwards runs {:?}, runs set aside {:?}, r2 says {:?}",
        ids_and_statuses(&v["runs"]),
        ids_and_statuses(&v["runsAside"]),
        texts(&m["messages"]),
    );
    assert_eq!(code_of(&body), "run_exists", "{body}");
    g.shutdown().await;
}

/// A branch `x` runs aside; its upstream is slow to answer, so nothing of
/// it is stored yet. The thread's run ends and a new run of the thread
/// takes the same id `x` (from the same parent, same number of events):
/// it must get 409 `run_exists`. Accepted, the join later finds "a run x
/// with the same parent and event count" in the log, takes it for a join
/// cut short and deletes the aside copy: the branch's answer is lost.
#[tokio::test]
async fn a_run_cannot_take_the_id_of_a_run_set_aside_before_it_stored_anything() {
    let g = start(with_paced().await).await;
    run(&g.base, "demo", &input("t", "r1", "first")).await;
    let r2 = spawn_run(&g.base, "up", paced("t", "r2", None, 0, 400, "r2 says"));
    wait_thread(&g.base, "t", |v| v["runs"][1]["status"] == "running").await;
    let x_aside = spawn_run(
        &g.base,
        "up",
        paced("t", "x", Some("r1"), 1500, 0, "the aside answer"),
    );
    let (s, _) = r2.await.unwrap();
    assert_eq!(s, 200);
    wait_thread(&g.base, "t", |v| v["runs"][1]["status"] == "finished").await;
    // The thread is free; x (aside) has stored nothing yet.
    let (s, _, body) = run(
        &g.base,
        "up",
        &paced("t", "x", Some("r1"), 0, 0, "the log answer"),
    )
    .await;
    let (sa, fa) = x_aside.await.unwrap();
    assert_eq!(sa, 200);
    assert_eq!(fa.last().unwrap().ty(), "RUN_FINISHED");
    // Whatever was answered, no answer a client got may vanish.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, v) = get_json(&format!("{}/threads/t", g.base)).await;
    let (_, mx) = get_json(&format!("{}/threads/t/messages?run=x", g.base)).await;
    let said = texts(&mx["messages"]);
    let aside_kept = said.iter().any(|t| t == "the aside answer")
        || v["runsAside"]
            .as_array()
            .is_some_and(|a| a.iter().any(|r| r["runId"] == "x"));
    assert!(
        aside_kept,
        "the branch x its client got whole is gone: thread {v}, messages of x {said:?}"
    );
    assert_eq!(s, 409, "a second run x was accepted: {body}");
    assert_eq!(code_of(&body), "run_exists", "{body}");
    g.shutdown().await;
}

/// Two branches with the same id at once, on two gateways over one store:
/// exactly one runs; every other gets 409 `run_exists`; it joins once.
#[tokio::test]
async fn the_same_branch_id_sent_many_times_at_once_runs_once() {
    let store = Store::memory();
    let a = start_with(store.clone(), GatewayConfig::default()).await;
    let b = start_with(store.clone(), GatewayConfig::default()).await;
    run(&a.base, "demo", &input("t", "r1", "first")).await;
    let r2 = spawn_run(&a.base, "demo", slow("t", "r2", 120));
    wait_thread(&a.base, "t", |v| v["runs"][1]["status"] == "running").await;
    let mut tasks = Vec::new();
    for i in 0..10 {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            run(&base, "demo", &branch("t", "b", "r1", "same id")).await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        let (s, frames, body) = t.await.unwrap();
        match s {
            200 => {
                ok += 1;
                assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
            }
            409 => assert_eq!(code_of(&body), "run_exists", "{body}"),
            _ => panic!("{s}: {body}"),
        }
    }
    assert_eq!(ok, 1);
    r2.await.unwrap();
    let v = wait_thread(&a.base, "t", |v| v["runsAside"] == json!([])).await;
    assert_eq!(
        ids_and_statuses(&v["runs"]),
        [
            ("r1".into(), "finished".into()),
            ("r2".into(), "finished".into()),
            ("b".into(), "finished".into())
        ]
    );
    a.shutdown().await;
    b.shutdown().await;
}

// ---------------------------------------------------------------------
// Delete, stop and new branches racing the thread's run's end and the join
// ---------------------------------------------------------------------

/// A branch runs aside, its upstream slow to answer (nothing stored yet);
/// the thread's run ends; a DELETE must be refused (409) like for any run
/// in flight, not delete the thread under the branch, which then can never
/// join (its parent is gone) and is left behind in the aside tenant of a
/// thread that no longer exists.
#[tokio::test]
async fn a_delete_cannot_slip_in_while_a_branch_waits_for_its_upstream() {
    let g = start(with_paced().await).await;
    run(&g.base, "demo", &input("t", "r1", "first")).await;
    let r2 = spawn_run(&g.base, "up", paced("t", "r2", None, 0, 300, "r2"));
    wait_thread(&g.base, "t", |v| v["runs"][1]["status"] == "running").await;
    let b = spawn_run(&g.base, "up", paced("t", "b", Some("r1"), 1500, 0, "b"));
    r2.await.unwrap();
    wait_thread(&g.base, "t", |v| v["runs"][1]["status"] == "finished").await;
    let del = client()
        .delete(format!("{}/threads/t", g.base))
        .send()
        .await
        .unwrap();
    let (del, code) = error_code(del).await;
    let (s, frames) = b.await.unwrap();
    assert_eq!(s, 200);
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    tokio::time::sleep(Duration::from_millis(800)).await;
    if del == 204 {
        let (st, _) = get_json(&format!("{}/threads/t", g.base)).await;
        let left = aside_count(&g.store).await;
        // Someone else starts a thread of the same id: the deleted
        // thread's branch shows up in it.
        run(&g.base, "demo", &input("t", "r1", "a new thread")).await;
        let (_, v) = get_json(&format!("{}/threads/t", g.base)).await;
        let (sb, m) = get_json(&format!("{}/threads/t/messages?run=b", g.base)).await;
        panic!(
            "the delete went through under the branch in flight: then the thread answered {st} \
             with {left} run(s) left set aside; a new thread \"t\" lists runs set aside {:?} and \
             ?run=b answers {sb} {:?}",
            ids_and_statuses(&v["runsAside"]),
            texts(&m["messages"])
        );
    }
    assert_eq!(del, 409);
    assert_eq!(code, "run_in_flight");
    let v = wait_thread(&g.base, "t", |v| v["runsAside"] == json!([])).await;
    assert_eq!(v["runs"].as_array().unwrap().len(), 3, "{v}");
    g.shutdown().await;
}

/// Deletes sent again and again while a run set aside joins its thread:
/// each is 204 or 409, never a 5xx, and once one is 204 nothing of the
/// thread is left (no aside copy, no thread written again by the join).
#[tokio::test]
async fn a_delete_racing_a_join_leaves_nothing_behind() {
    let g = start(GatewayConfig::default()).await;
    for round in 0..3 {
        let t = format!("t{round}");
        run(&g.base, "demo", &input(&t, "r1", "first")).await;
        let r2 = spawn_run(&g.base, "demo", slow(&t, "r2", 40));
        wait_thread(&g.base, &t, |v| v["runs"][1]["status"] == "running").await;
        let (s, _, body) = run(&g.base, "demo", &branch(&t, "r3", "r1", "aside")).await;
        assert_eq!(s, 200, "{body}");
        let mut deleted = false;
        for _ in 0..2000 {
            let resp = client()
                .delete(format!("{}/threads/{t}", g.base))
                .send()
                .await
                .unwrap();
            match resp.status().as_u16() {
                204 => {
                    deleted = true;
                    break;
                }
                409 => {}
                s => panic!("DELETE answered {s}: {}", resp.text().await.unwrap()),
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert!(deleted);
        r2.await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (s, v) = get_json(&format!("{}/threads/{t}", g.base)).await;
        assert_eq!(s, 404, "{v}");
        assert_eq!(aside_count(&g.store).await, 0);
    }
    g.shutdown().await;
}

/// Stops sent again and again to a run set aside that ended, while it
/// joins its thread: each is 409 `run_not_running`, never 404 (the run is
/// in neither place for an instant) nor 5xx.
#[tokio::test]
async fn a_stop_racing_the_join_of_a_run_set_aside_is_409() {
    let g = start(GatewayConfig::default()).await;
    run(&g.base, "demo", &input("t", "r1", "first")).await;
    let r2 = spawn_run(&g.base, "demo", slow("t", "r2", 40));
    wait_thread(&g.base, "t", |v| v["runs"][1]["status"] == "running").await;
    let (s, _, body) = run(&g.base, "demo", &branch("t", "r3", "r1", "aside")).await;
    assert_eq!(s, 200, "{body}");
    let base = g.base.clone();
    let stops = tokio::spawn(async move {
        let mut seen = Vec::new();
        for _ in 0..3000 {
            let resp = client()
                .post(format!("{base}/threads/t/runs/r3/stop"))
                .send()
                .await
                .unwrap();
            seen.push(error_code(resp).await);
            let (_, v) = get_json(&format!("{base}/threads/t")).await;
            if v["runsAside"] == json!([]) {
                break;
            }
        }
        seen
    });
    r2.await.unwrap();
    let seen = stops.await.unwrap();
    for (s, code) in &seen {
        assert_eq!((*s, code.as_str()), (409, "run_not_running"), "{seen:?}");
    }
    let v = wait_thread(&g.base, "t", |v| v["runsAside"] == json!([])).await;
    assert_eq!(v["runs"][2]["runId"], "r3");
    g.shutdown().await;
}

/// Branches from `r1` started one after another across the instant the
/// thread's run ends: each is accepted (run aside before the end, in the
/// log after it), none is lost, stuck or joined twice, and the log holds
/// one run at a time.
#[tokio::test]
async fn branches_started_as_the_thread_run_ends_all_land_in_the_log() {
    let g = start(GatewayConfig::default()).await;
    run(&g.base, "demo", &input("t", "r1", "first")).await;
    let r2 = spawn_run(&g.base, "demo", slow("t", "r2", 25));
    wait_thread(&g.base, "t", |v| v["runs"][1]["status"] == "running").await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        tasks.push(spawn_run(
            &g.base,
            "demo",
            branch("t", &format!("b{i}"), "r1", "quick"),
        ));
        tokio::time::sleep(Duration::from_millis(12)).await;
    }
    r2.await.unwrap();
    for t in tasks {
        let (s, frames) = t.await.unwrap();
        assert_eq!(s, 200);
        assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    }
    let v = wait_thread(&g.base, "t", |v| {
        v["runsAside"] == json!([]) && v["runs"].as_array().unwrap().len() == 18
    })
    .await;
    assert!(
        v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "finished"),
        "{v}"
    );
    let log = thread_events(&g.base, "t").await;
    let mut open = false;
    for (i, f) in log.iter().enumerate() {
        assert_eq!(f.id, Some(i as u64 + 1));
        match f.ty() {
            "RUN_STARTED" => {
                assert!(!open, "two runs open at event {i}");
                open = true;
            }
            "RUN_FINISHED" | "RUN_ERROR" => open = false,
            _ => assert!(open),
        }
    }
    g.shutdown().await;
}

/// A client that goes away mid-branch: with `on_disconnect = continue`
/// the run set aside goes on to its end and joins; with `cancel` it is
/// stopped (cancelled) and joins as such.
#[tokio::test]
async fn a_client_that_goes_away_mid_branch() {
    let mut cancel = demo_agent("democ");
    cancel.on_disconnect = OnDisconnect::Cancel;
    let g = start(GatewayConfig {
        agents: vec![demo_agent("demo"), cancel],
        ..GatewayConfig::default()
    })
    .await;
    run(&g.base, "demo", &input("t", "r1", "first")).await;
    let mut r2 = input("t", "r2", "a b c d e f g h i j");
    r2["forwardedProps"] = json!({"demo": {"delayMs": 150}});
    let r2 = spawn_run(&g.base, "demo", r2);
    wait_thread(&g.base, "t", |v| v["runs"][1]["status"] == "running").await;
    for (agent, run_id) in [("demo", "b1"), ("democ", "b2")] {
        let mut body = branch("t", run_id, "r1", "a b c");
        body["forwardedProps"] = json!({"demo": {"delayMs": 60}});
        let resp = client()
            .post(format!("{}/agents/{agent}/run", g.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let first = read_frames(resp, 1).await;
        assert_eq!(first[0].ty(), "RUN_STARTED");
        // The response is dropped here: the client is gone.
    }
    let v = wait_thread(&g.base, "t", |v| {
        let a = ids_and_statuses(&v["runsAside"]);
        a.len() == 2 && a.iter().all(|(_, s)| s != "running")
    })
    .await;
    let mut aside = ids_and_statuses(&v["runsAside"]);
    aside.sort();
    assert_eq!(
        aside,
        [
            ("b1".into(), "finished".into()),
            ("b2".into(), "cancelled".into())
        ]
    );
    r2.await.unwrap();
    let v = wait_thread(&g.base, "t", |v| v["runsAside"] == json!([])).await;
    let mut runs = ids_and_statuses(&v["runs"]);
    runs.sort();
    assert_eq!(
        runs,
        [
            ("b1".into(), "finished".into()),
            ("b2".into(), "cancelled".into()),
            ("r1".into(), "finished".into()),
            ("r2".into(), "finished".into())
        ]
    );
    g.shutdown().await;
}

// ---------------------------------------------------------------------
// Chains of runs set aside
// ---------------------------------------------------------------------

/// Thread `t`: r1 ended, r2 in flight (its task, about a second long), and
/// beside it r3 (from r1) and r4 (from r3), both ended and set aside. The
/// frames of r1, r3 and r4.
async fn chain_beside_a_run(
    base: &str,
) -> (
    tokio::task::JoinHandle<(u16, Vec<Frame>)>,
    Vec<Frame>,
    Vec<Frame>,
    Vec<Frame>,
) {
    let (_, f1, _) = run(base, "demo", &input("t", "r1", "first")).await;
    let r2 = spawn_run(base, "demo", slow("t", "r2", 150));
    wait_thread(base, "t", |v| v["runs"][1]["status"] == "running").await;
    let (s, f3, body) = run(base, "demo", &branch("t", "r3", "r1", "second")).await;
    assert_eq!(s, 200, "{body}");
    let (s, f4, body) = run(base, "demo", &branch("t", "r4", "r3", "third")).await;
    assert_eq!(s, 200, "{body}");
    (r2, f1, f3, f4)
}

/// `GET /threads/{id}/events?branch=R` for a run set aside whose parent is
/// a run set aside too (ended, not joined): the branch is r1 from the log
/// (with ids), then the parent's events and the run's own (without), as
/// `?run=` restores it; not a 404.
#[tokio::test]
async fn the_branch_of_a_run_set_aside_from_a_run_set_aside_is_readable() {
    let g = start(GatewayConfig::default()).await;
    let (r2, f1, f3, f4) = chain_beside_a_run(&g.base).await;
    let resp = client()
        .get(format!("{}/threads/t/events?branch=r4", g.base))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let compacted = client()
        .get(format!(
            "{}/threads/t/events?branch=r4&compact=snapshot",
            g.base
        ))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert!(!r2.is_finished(), "r2 ended too early for the probe");
    r2.await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert_eq!(compacted, 200);
    let frames = parse_sse(&text);
    assert_eq!(frames.len(), f1.len() + f3.len() + f4.len(), "{text}");
    for (got, want) in frames.iter().zip(f1.iter().chain(&f3).chain(&f4)) {
        assert_eq!(got.data, want.data);
    }
    g.shutdown().await;
}

/// A gateway stopped with a chain of runs set aside: `p` (from r1, ended)
/// and `c` (from `p`, left in flight). The next start closes `c` as
/// interrupted and joins both, the parent first, whatever order it finds
/// them in.
#[tokio::test]
async fn a_chain_of_runs_set_aside_joins_parent_first_at_the_next_start() {
    let store = Store::memory();
    store
        .append(
            "default",
            "t",
            AppendRequest::new(whole_run("t", "r1", None, "one")),
        )
        .await
        .unwrap();
    let at = aside_tenant("default");
    // The child first, so that a listing by creation finds it first.
    let mut c = whole_run("t", "c", Some("p"), "child");
    c.pop();
    c.pop(); // left open: no TEXT_MESSAGE_END, no RUN_FINISHED
    store
        .append(&at, &aside_thread("t", "c").unwrap(), AppendRequest::new(c))
        .await
        .unwrap();
    store
        .append(
            &at,
            &aside_thread("t", "p").unwrap(),
            AppendRequest::new(whole_run("t", "p", Some("r1"), "parent")),
        )
        .await
        .unwrap();
    let g = start_with(store.clone(), GatewayConfig::default()).await;
    g.gw.recover_at_start().await.unwrap();
    let v = wait_thread(&g.base, "t", |v| {
        v["runsAside"] == json!([]) && v["runs"].as_array().unwrap().len() == 3
    })
    .await;
    assert_eq!(
        ids_and_statuses(&v["runs"]),
        [
            ("r1".into(), "finished".into()),
            ("p".into(), "finished".into()),
            ("c".into(), "interrupted".into())
        ]
    );
    let (_, m) = get_json(&format!("{}/threads/t/messages?run=c", g.base)).await;
    assert_eq!(texts(&m["messages"]), ["one", "parent", "child"]);
    g.shutdown().await;
}

// ---------------------------------------------------------------------
// Restart while a join is half done
// ---------------------------------------------------------------------

/// At start-up the log already holds a run `x` (same parent, same number
/// of events) that is not the run `x` set aside: a different answer. The
/// docs say such a run "stays set aside" (the log already holds a run of
/// its id); it must not be taken for a join cut short and its aside copy
/// deleted.
#[tokio::test]
async fn restart_does_not_take_another_run_of_the_same_id_for_a_join_cut_short() {
    let store = Store::memory();
    let mut log = whole_run("t", "r1", None, "one");
    log.extend(whole_run("t", "x", Some("r1"), "in the log"));
    store
        .append("default", "t", AppendRequest::new(log))
        .await
        .unwrap();
    let at = aside_tenant("default");
    let a_thread = aside_thread("t", "x").unwrap();
    store
        .append(
            &at,
            &a_thread,
            AppendRequest::new(whole_run("t", "x", Some("r1"), "set aside")),
        )
        .await
        .unwrap();
    let g = start_with(store.clone(), GatewayConfig::default()).await;
    g.gw.recover_at_start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let kept = store.read_run(&at, &a_thread, "x").await;
    assert!(
        kept.as_ref().is_ok_and(|e| e.len() == 5),
        "the run set aside, whose answer the log does not hold, was deleted: {:?}",
        kept.map(|e| e.len())
    );
    g.shutdown().await;
}

// ---------------------------------------------------------------------
// Odd and long ids
// ---------------------------------------------------------------------

/// Thread and run ids full of colons and digits (what the aside thread id
/// `{len}:{thread}{run}` is made of): each thread lists only its own runs
/// set aside, reads, stops and joins them, even where a naive
/// concatenation of thread and run ids would be equal.
#[tokio::test]
async fn odd_ids_keep_each_threads_runs_set_aside_apart() {
    let g = start(GatewayConfig::default()).await;
    // (thread, run set aside): "1" + "1:2" and "1:1" + ":2" and "11" + ":2"
    // concatenate to near neighbours; "2:" and ":" are edge cases.
    let cases = [
        ("1", "1:2"),
        ("1:1", ":2"),
        ("11", ":2"),
        ("2:", ":"),
        (":", "0"),
        ("3:abc", "12"),
    ];
    let mut slow_runs = Vec::new();
    for (t, _) in cases {
        let (s, _, body) = run(&g.base, "demo", &input(t, "1", "first")).await;
        assert_eq!(s, 200, "{t}: {body}");
        slow_runs.push(spawn_run(&g.base, "demo", slow(t, "2", 100)));
    }
    for (t, _) in cases {
        wait_thread(&g.base, t, |v| v["runs"][1]["status"] == "running").await;
    }
    for (t, b) in cases {
        let (s, f, body) = run(&g.base, "demo", &branch(t, b, "1", &format!("{t}/{b}"))).await;
        assert_eq!(s, 200, "{t} {b}: {body}");
        assert!(f.iter().all(|f| f.id.is_none()));
        // A second one, stopped.
        let mut long = branch(t, &format!("{b}s"), "1", "a b c d e f g h");
        long["forwardedProps"] = json!({"demo": {"delayMs": 200}});
        let stopped = spawn_run(&g.base, "demo", long);
        wait_thread(&g.base, t, |v| {
            v["runsAside"].as_array().unwrap().len() == 2
        })
        .await;
        let resp = client()
            .post(format!("{}/threads/{t}/runs/{b}s/stop", g.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{t} {b}s");
        stopped.await.unwrap();
    }
    for (t, b) in cases {
        let (_, v) = get_json(&format!("{}/threads/{t}", g.base)).await;
        let mut aside = ids_and_statuses(&v["runsAside"]);
        aside.sort();
        assert_eq!(
            aside,
            [
                (b.to_owned(), "finished".to_owned()),
                (format!("{b}s"), "cancelled".to_owned())
            ],
            "{t}"
        );
        let (s, m) = get_json(&format!("{}/threads/{t}/messages?run={b}", g.base)).await;
        assert_eq!(s, 200, "{t} {b}: {m}");
        assert!(texts(&m["messages"]).contains(&format!("{t}/{b}")), "{m}");
    }
    for r in slow_runs {
        r.await.unwrap();
    }
    for (t, b) in cases {
        let v = wait_thread(&g.base, t, |v| v["runsAside"] == json!([])).await;
        let mut runs = ids_and_statuses(&v["runs"]);
        runs.sort();
        let mut want = vec![
            ("1".to_owned(), "finished".to_owned()),
            ("2".to_owned(), "finished".to_owned()),
            (b.to_owned(), "finished".to_owned()),
            (format!("{b}s"), "cancelled".to_owned()),
        ];
        want.sort();
        assert_eq!(runs, want, "{t}");
    }
    assert_eq!(aside_count(&g.store).await, 0);
    g.shutdown().await;
}

/// The longest ids a run set aside can have: the aside thread id
/// (`{len}:{thread}{run}`) exactly at the store's limit runs aside and
/// joins; one byte more cannot be set aside, and the answer says so
/// rather than telling the client to do what it did (branch with
/// `parentRunId`).
#[tokio::test]
async fn a_branch_whose_aside_id_is_at_the_limit() {
    let g = start(GatewayConfig::default()).await;
    let max = agui_store::MAX_ID_BYTES;
    // "65528:" + 65528 bytes + a 2-byte run id = 65536 bytes.
    let t = "t".repeat(max - 8);
    assert_eq!(aside_thread(&t, "b1").map(|a| a.len()), Some(max));
    assert_eq!(aside_thread(&t, "b12"), None);
    let (s, _, body) = run(&g.base, "demo", &input(&t, "r1", "first")).await;
    assert_eq!(s, 200, "{body}");
    let r2 = spawn_run(&g.base, "demo", slow(&t, "r2", 100));
    for _ in 0..100 {
        if log_runs(&g.store, &t).await.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (s, frames, body) = run(&g.base, "demo", &branch(&t, "b1", "r1", "at the limit")).await;
    assert_eq!(s, 200, "{}", &body[..body.len().min(300)]);
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    let (s, _, body) = run(&g.base, "demo", &branch(&t, "b12", "r1", "over")).await;
    r2.await.unwrap();
    for _ in 0..200 {
        if aside_count(&g.store).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let runs: Vec<String> = log_runs(&g.store, &t)
        .await
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(runs, ["r1", "r2", "b1"]);
    assert_eq!(s, 409);
    let v: Value = serde_json::from_str(&body).unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        !message.contains("branch from another run with parentRunId"),
        "a branch that cannot be set aside (its ids are too long) is told to branch: {body}"
    );
    g.shutdown().await;
}

// ---------------------------------------------------------------------
// Store errors
// ---------------------------------------------------------------------

/// Fails every commit to the thread's log that starts run `run`, while
/// `on` is set.
#[derive(Default)]
struct RefuseJoin {
    on: AtomicBool,
    refused: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl Hooks for RefuseJoin {
    async fn commit(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        batch: &Batch,
    ) -> agui_store::Result<Commit> {
        let starts_r3 = batch
            .events
            .iter()
            .any(|e| e.json().contains("\"RUN_STARTED\"") && e.json().contains("\"runId\":\"r3\""));
        if tenant == "default" && starts_r3 && self.on.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::unavailable("the disk is gone (test)"));
        }
        inner.commit(tenant, thread, batch).await
    }
}

/// The join's append fails (the store is unavailable for a while): the
/// run stays set aside, readable, and joins once the store answers again.
#[tokio::test]
async fn a_join_the_store_refuses_for_a_while_is_tried_again() {
    let hooked = Arc::new(Hooked::new(MemoryStore::new(), RefuseJoin::default()));
    let store = Store::from_arc(hooked.clone());
    let g = start_with(store, GatewayConfig::default()).await;
    run(&g.base, "demo", &input("t", "r1", "first")).await;
    let r2 = spawn_run(&g.base, "demo", slow("t", "r2", 60));
    wait_thread(&g.base, "t", |v| v["runs"][1]["status"] == "running").await;
    let (s, _, body) = run(&g.base, "demo", &branch("t", "r3", "r1", "aside")).await;
    assert_eq!(s, 200, "{body}");
    hooked.hooks().on.store(true, Ordering::SeqCst);
    r2.await.unwrap();
    for _ in 0..200 {
        if hooked.hooks().refused.load(Ordering::SeqCst) >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(hooked.hooks().refused.load(Ordering::SeqCst) >= 2);
    let (_, v) = get_json(&format!("{}/threads/t", g.base)).await;
    assert_eq!(
        ids_and_statuses(&v["runsAside"]),
        [("r3".into(), "finished".into())]
    );
    let (s, m) = get_json(&format!("{}/threads/t/messages?run=r3", g.base)).await;
    assert_eq!(s, 200);
    assert!(texts(&m["messages"]).contains(&"aside".to_owned()));
    hooked.hooks().on.store(false, Ordering::SeqCst);
    let v = wait_thread(&g.base, "t", |v| v["runsAside"] == json!([])).await;
    assert_eq!(v["runs"][2]["runId"], "r3");
    assert_eq!(v["runs"][2]["status"], "finished");
    g.shutdown().await;
}

/// A stop that comes before the upstream answered anything (nothing of the
/// run is stored yet) stops it, a run of the thread and a run set aside
/// alike: each ends stopped (`RUN_FINISHED`, with a start the gateway
/// writes), its client gets that end, and the set-aside one joins.
#[tokio::test]
async fn a_run_is_stopped_before_its_upstream_answered() {
    let g = start(with_paced().await).await;
    let (s, _, body) = run(&g.base, "up", &paced("t", "r1", None, 0, 0, "one")).await;
    assert_eq!(s, 200, "{body}");
    // r2 waits ten seconds for its upstream; b1, a branch beside it, too.
    wait_in_flight(&g.base, 0).await;
    let r2 = spawn_run(&g.base, "up", paced("t", "r2", None, 10_000, 0, "two"));
    wait_in_flight(&g.base, 1).await;
    let b1 = spawn_run(&g.base, "up", paced("t", "b1", Some("r1"), 10_000, 0, "b"));
    // Both reserved, nothing stored.
    wait_in_flight(&g.base, 2).await;
    assert_eq!(log_runs(&g.store, "t").await.len(), 1);
    assert_eq!(aside_count(&g.store).await, 0);
    for run in ["b1", "r2"] {
        let resp = client()
            .post(format!("{}/threads/t/runs/{run}/stop", g.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{run}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["status"], "cancelled", "{run}: {v}");
    }
    for task in [r2, b1] {
        let (s, frames) = task.await.unwrap();
        assert_eq!(s, 200);
        let types: Vec<&str> = frames.iter().map(|f| f.ty()).collect();
        assert_eq!(types, ["RUN_STARTED", "RUN_FINISHED"]);
    }
    let v = wait_thread(&g.base, "t", |v| {
        v["runsAside"] == json!([]) && v["runs"].as_array().unwrap().len() == 3
    })
    .await;
    assert_eq!(
        ids_and_statuses(&v["runs"]),
        [
            ("r1".into(), "finished".into()),
            ("r2".into(), "cancelled".into()),
            ("b1".into(), "cancelled".into())
        ]
    );
    // An unknown run is still 404.
    let resp = client()
        .post(format!("{}/threads/t/runs/nope/stop", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    g.shutdown().await;
}

/// Restores of the thread stall, then fail (the store is gone for a
/// while), once `on` is set; `entered` tells that one began.
#[derive(Default)]
struct StallThenFailRestore {
    on: AtomicBool,
    entered: AtomicBool,
}

#[async_trait::async_trait]
impl Hooks for StallThenFailRestore {
    async fn checkpoint_chain(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> agui_store::Result<agui_store::CheckpointChain> {
        if self.on.load(Ordering::SeqCst) {
            self.entered.store(true, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(800)).await;
            return Err(StoreError::unavailable("the disk is gone (test)"));
        }
        inner.checkpoint_chain(tenant, thread, run_id).await
    }
}

/// A stop that reaches a run before it stored anything, whose start then
/// fails (here its parent's conversation cannot be restored), answers 404
/// once the run is gone: there never was such a run. It answered 200
/// `running` after waiting ten seconds.
#[tokio::test]
async fn a_stop_of_a_run_whose_start_then_fails_is_not_found() {
    let hooked = Arc::new(Hooked::new(
        MemoryStore::new(),
        StallThenFailRestore::default(),
    ));
    let store = Store::from_arc(hooked.clone());
    let g = start_with(store.clone(), GatewayConfig::default()).await;
    let (s, _, body) = run(&g.base, "demo", &input("t", "r1", "first")).await;
    assert_eq!(s, 200, "{body}");
    // r2 continues r1: its start restores r1's conversation from storage.
    store.settle().await;
    store.clear_cache();
    hooked.hooks().on.store(true, Ordering::SeqCst);
    let r2 = spawn_run(&g.base, "demo", input("t", "r2", "second"));
    for _ in 0..500 {
        if hooked.hooks().entered.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(hooked.hooks().entered.load(Ordering::SeqCst));
    let began = std::time::Instant::now();
    let resp = client()
        .post(format!("{}/threads/t/runs/r2/stop", g.base))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(status, 404, "{v}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "the answer waited {:?}",
        began.elapsed()
    );
    let (s, frames) = r2.await.unwrap();
    assert!(s >= 500 || frames.is_empty(), "r2 ran: {s}");
    hooked.hooks().on.store(false, Ordering::SeqCst);
    assert_eq!(log_runs(&g.store, "t").await.len(), 1);
    g.shutdown().await;
}

/// True (and disarmed) when `target` is armed for this tenant and thread.
fn take_target(
    target: &std::sync::Mutex<Option<(String, String)>>,
    tenant: &str,
    thread: &str,
) -> bool {
    let mut target = target.lock().unwrap();
    let fire = target
        .as_ref()
        .is_some_and(|(tn, th)| tn == tenant && th == thread);
    if fire {
        *target = None;
    }
    fire
}

/// Once armed, the first read of `target` answers `NotFound`, as it does
/// when the run set aside there joined its thread (its copy deleted) right
/// after it was found.
#[derive(Default)]
struct JoinedMeanwhile {
    target: std::sync::Mutex<Option<(String, String)>>,
    hit: AtomicBool,
}

#[async_trait::async_trait]
impl Hooks for JoinedMeanwhile {
    async fn read(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> agui_store::Result<agui_store::EventPage> {
        let fire = take_target(&self.target, tenant, thread);
        if fire {
            self.hit.store(true, Ordering::SeqCst);
            return Err(StoreError::not_found("thread"));
        }
        inner.read(tenant, thread, from_seq, limit).await
    }
}

/// `?branch=` of a run set aside whose parent set aside joins its thread
/// while the branch is read: the branch is read again, not a 404.
#[tokio::test]
async fn the_branch_of_a_run_set_aside_is_read_again_when_its_parent_joins_meanwhile() {
    let hooked = Arc::new(Hooked::new(MemoryStore::new(), JoinedMeanwhile::default()));
    let g = start_with(Store::from_arc(hooked.clone()), GatewayConfig::default()).await;
    let (r2, f1, f3, f4) = chain_beside_a_run(&g.base).await;
    *hooked.hooks().target.lock().unwrap() =
        Some((aside_tenant("default"), aside_thread("t", "r3").unwrap()));
    let resp = client()
        .get(format!("{}/threads/t/events?branch=r4", g.base))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    assert!(!r2.is_finished(), "r2 ended too early for the probe");
    r2.await.unwrap();
    assert!(
        hooked.hooks().hit.load(Ordering::SeqCst),
        "the probe never fired"
    );
    assert_eq!(status, 200, "{text}");
    let frames = parse_sse(&text);
    assert_eq!(frames.len(), f1.len() + f3.len() + f4.len(), "{text}");
    g.shutdown().await;
}

/// Holds a hooked store call until opened: `entered` says one is held.
#[derive(Default)]
struct Gate {
    entered: AtomicBool,
    release: AtomicBool,
}

impl Gate {
    /// Marks the call entered and waits (10 s at most) to be opened.
    async fn hold(&self) {
        self.entered.store(true, Ordering::SeqCst);
        for _ in 0..1_000 {
            if self.release.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits (5 s at most) for a call to be held; fails if none came.
    async fn wait_entered(&self) {
        for _ in 0..500 {
            if self.entered.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the probe never fired");
    }

    fn open(&self) {
        self.release.store(true, Ordering::SeqCst);
    }
}

/// A hook that holds one store call at its [`Gate`] once armed.
trait Gated: Hooks {
    fn arm(&self);
    fn gate(&self) -> &Gate;
}

/// The race both probes below set up: r1 ends, r2 runs slowly, r3
/// branches from r1 and is set aside; then `?branch=r3` is asked with the
/// hook armed, and while the hooked call is held r2 ends and r3 joins the
/// log (its aside copy deleted). The read must still answer r1 and r3,
/// whole and in order; gives the frames it answered.
async fn read_a_branch_across_its_join<H: Gated + 'static>(hooks: H) -> Vec<Frame> {
    let hooked = Arc::new(Hooked::new(MemoryStore::new(), hooks));
    let g = start_with(Store::from_arc(hooked.clone()), GatewayConfig::default()).await;
    let (_, f1, _) = run(&g.base, "demo", &input("t", "r1", "first")).await;
    let r2 = spawn_run(&g.base, "demo", slow("t", "r2", 150));
    wait_thread(&g.base, "t", |v| v["runs"][1]["status"] == "running").await;
    let (s, f3, body) = run(&g.base, "demo", &branch("t", "r3", "r1", "second")).await;
    assert_eq!(s, 200, "{body}");
    hooked.hooks().arm();
    let base = g.base.clone();
    let get = tokio::spawn(async move {
        let resp = client()
            .get(format!("{base}/threads/t/events?branch=r3"))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    });
    hooked.hooks().gate().wait_entered().await;
    assert!(!r2.is_finished(), "r2 ended too early for the probe");
    r2.await.unwrap();
    wait_thread(&g.base, "t", |v| {
        v["runs"].as_array().is_some_and(|r| r.len() == 3)
            && v["runsAside"].as_array().is_none_or(|a| a.is_empty())
    })
    .await;
    hooked.hooks().gate().open();
    let (status, text) = get.await.unwrap();
    assert_eq!(status, 200, "{text}");
    let frames = parse_sse(&text);
    assert_eq!(frames.len(), f1.len() + f3.len(), "{text}");
    for (got, want) in frames.iter().zip(f1.iter().chain(&f3)) {
        assert_eq!(got.data, want.data);
    }
    g.shutdown().await;
    frames
}

/// Once armed, the first read of r3's aside thread waits at its gate, then
/// reads: what the store answers then is whatever happened meanwhile.
#[derive(Default)]
struct StallFirstRead {
    target: std::sync::Mutex<Option<(String, String)>>,
    gate: Gate,
}

impl Gated for StallFirstRead {
    fn arm(&self) {
        *self.target.lock().unwrap() =
            Some((aside_tenant("default"), aside_thread("t", "r3").unwrap()));
    }
    fn gate(&self) -> &Gate {
        &self.gate
    }
}

#[async_trait::async_trait]
impl Hooks for StallFirstRead {
    async fn read(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> agui_store::Result<agui_store::EventPage> {
        if take_target(&self.target, tenant, thread) {
            self.gate.hold().await;
        }
        inner.read(tenant, thread, from_seq, limit).await
    }
}

/// `?branch=` of a run set aside that joins its thread while its own
/// events are read (found aside, its aside copy deleted before the read):
/// the branch is read from the log, not a 404.
#[tokio::test]
async fn the_branch_of_a_run_set_aside_that_joins_while_it_is_read_comes_from_the_log() {
    let frames = read_a_branch_across_its_join(StallFirstRead::default()).await;
    // From the log now: every frame has its sequence number.
    assert!(frames.iter().all(|f| f.id.is_some()));
}

/// Once armed, the first listing of thread `t`'s runs is read at once but
/// answered only when its gate opens: a listing that raced whatever
/// happened in between.
#[derive(Default)]
struct StaleListing {
    armed: AtomicBool,
    gate: Gate,
}

impl Gated for StaleListing {
    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }
    fn gate(&self) -> &Gate {
        &self.gate
    }
}

#[async_trait::async_trait]
impl Hooks for StaleListing {
    async fn list_runs(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        filter: &agui_store::RunFilter,
    ) -> agui_store::Result<agui_store::RunPage> {
        let page = inner.list_runs(tenant, filter).await;
        let ours = tenant == "default" && filter.thread_id.as_deref() == Some("t");
        if ours && self.armed.swap(false, Ordering::SeqCst) {
            self.gate.hold().await;
        }
        page
    }
}

/// `?branch=` of a run set aside that joins its thread between the
/// listing of the thread's runs (where it is not yet) and the look for it
/// set aside (where it is no longer): the runs are listed again and the
/// branch read from the log, not a 404.
#[tokio::test]
async fn the_branch_of_a_run_that_joins_between_the_listing_and_the_look_aside_is_found() {
    read_a_branch_across_its_join(StaleListing::default()).await;
}
