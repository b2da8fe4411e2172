//! Concurrent branches: a run that branches from another run while a run
//! on another branch of the same thread is in flight runs at once, set
//! aside, and joins the thread's log, whole, once the thread is free;
//! also across a restart, a stop, and a delete.

use std::time::Duration;

use crate::common::*;
use agui_protocol::Event;
use agui_server::GatewayConfig;
use agui_store::aside::{aside_tenant, aside_thread};
use agui_store::{AppendRequest, RunStatus, Store};
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

/// Starts a run and returns a task reading its whole answer.
async fn start_run(base: &str, body: &Value) -> tokio::task::JoinHandle<Vec<Frame>> {
    let resp = client()
        .post(format!("{base}/agents/demo/run"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    tokio::spawn(async move { parse_sse(&resp.text().await.unwrap()) })
}

/// Each run's events are contiguous in the log: a `RUN_STARTED` only after
/// the previous run's end. Returns the runs in log order.
fn runs_are_contiguous(frames: &[Frame]) -> Vec<String> {
    let mut open: Option<String> = None;
    let mut order = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f.id, Some(i as u64 + 1), "ids follow the log");
        match f.ty() {
            "RUN_STARTED" => {
                assert!(open.is_none(), "run {open:?} still open at event {i}");
                let id = f.data["runId"].as_str().unwrap().to_owned();
                order.push(id.clone());
                open = Some(id);
            }
            "RUN_FINISHED" | "RUN_ERROR" => {
                assert!(open.take().is_some(), "an end outside a run at event {i}");
            }
            _ => assert!(open.is_some(), "event {i} outside a run"),
        }
    }
    assert!(open.is_none());
    order
}

fn texts(messages: &Value) -> Vec<String> {
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn a_branch_runs_beside_the_run_in_flight_and_joins_the_log_after_it() {
    let g = start(GatewayConfig::default()).await;
    let (s, _, _) = run(&g.base, "demo", &input("t", "r1", "first")).await;
    assert_eq!(s, 200);
    let r2 = start_run(&g.base, &slow("t", "r2", 150)).await;
    // Not a branch, or a branch from the run in flight: refused at once.
    let (s, _, body) = run(&g.base, "demo", &input("t", "r3", "x")).await;
    assert_eq!(s, 409, "{body}");
    let (s, _, body) = run(&g.base, "demo", &branch("t", "r3", "r2", "x")).await;
    assert_eq!(s, 409, "{body}");
    // A branch from r1 runs at once, to its end, while r2 is in flight.
    let (s, frames, body) = run(&g.base, "demo", &branch("t", "r3", "r1", "second")).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(frames[0].ty(), "RUN_STARTED");
    assert_eq!(frames[0].data["parentRunId"], "r1");
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    // Its sequence numbers are not the thread's yet: no ids.
    assert!(frames.iter().all(|f| f.id.is_none()), "{body}");
    assert!(!r2.is_finished(), "r2 should still be in flight");
    let (_, v) = get_json(&format!("{}/threads/t", g.base)).await;
    assert_eq!(
        ids_and_statuses(&v["runs"]),
        [
            ("r1".into(), "finished".into()),
            ("r2".into(), "running".into())
        ]
    );
    assert_eq!(
        ids_and_statuses(&v["runsAside"]),
        [("r3".into(), "finished".into())]
    );
    assert_eq!(v["runsAside"][0]["parentRunId"], "r1");
    assert!(v["runsAside"][0].get("firstSeq").is_none());
    // Its id is taken; its conversation is restored as it will join.
    let (s, _, body) = run(&g.base, "demo", &branch("t", "r3", "r1", "again")).await;
    assert_eq!(s, 409, "{body}");
    assert!(body.contains("run_exists"), "{body}");
    let (s, m3) = get_json(&format!("{}/threads/t/messages?run=r3", g.base)).await;
    assert_eq!(s, 200, "{m3}");
    assert_eq!(m3["runId"], "r3");
    let resp = client()
        .get(format!("{}/threads/t/messages?run=r3&event=0", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    assert!(resp.text().await.unwrap().contains("run_not_joined"));
    // It is a parent: the branch goes on beside r2 (set aside in turn, with
    // r3's conversation as its history).
    let (s, f4, body) = run(&g.base, "demo", &branch("t", "r4", "r3", "third")).await;
    assert_eq!(s, 200, "{body}");
    assert!(f4.iter().all(|f| f.id.is_none()), "{body}");
    let (s, m4) = get_json(&format!("{}/threads/t/messages?run=r4", g.base)).await;
    assert_eq!(s, 200, "{m4}");
    let got4 = texts(&m4["messages"]);
    assert_eq!(
        got4[..texts(&m3["messages"]).len()],
        texts(&m3["messages"])[..]
    );
    assert!(got4.iter().any(|t| t == "third"), "{got4:?}");
    // A stop of a run that ended: 409, as for any run.
    let stop = client()
        .post(format!("{}/threads/t/runs/r3/stop", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status().as_u16(), 409);
    // r2 ends; r3 joins the log after it, whole, then r4 after its parent.
    let r2 = r2.await.unwrap();
    assert_eq!(r2.last().unwrap().ty(), "RUN_FINISHED");
    let v = wait_thread(&g.base, "t", |v| v["runsAside"] == json!([])).await;
    assert_eq!(
        ids_and_statuses(&v["runs"]),
        [
            ("r1".into(), "finished".into()),
            ("r2".into(), "finished".into()),
            ("r3".into(), "finished".into()),
            ("r4".into(), "finished".into())
        ]
    );
    assert_eq!(v["runs"][2]["parentRunId"], "r1");
    assert_eq!(v["runs"][2]["eventCount"], frames.len());
    assert_eq!(v["runs"][3]["parentRunId"], "r3");
    let log = thread_events(&g.base, "t").await;
    assert_eq!(runs_are_contiguous(&log), ["r1", "r2", "r3", "r4"]);
    // The joined runs' events are the ones their clients got, in order.
    let r3_start = log.len() - f4.len() - frames.len();
    for (stored, sent) in log[r3_start..].iter().zip(frames.iter().chain(&f4)) {
        assert_eq!(stored.data, sent.data);
    }
    // Their conversations are the ones restored while they were aside.
    for (run, before) in [("r3", &m3), ("r4", &m4)] {
        let (_, now) = get_json(&format!("{}/threads/t/messages?run={run}", g.base)).await;
        assert_eq!(now["messages"], before["messages"], "{run}");
        assert_eq!(now["state"], before["state"], "{run}");
    }
    // Its branch holds r1 and r3, never r2.
    let (_, m) = get_json(&format!("{}/threads/t/messages?run=r3", g.base)).await;
    let got = texts(&m["messages"]);
    assert_eq!(got[0], "first");
    assert!(got.iter().any(|t| t == "second"), "{got:?}");
    assert!(!got.iter().any(|t| t.contains("a b c")), "{got:?}");
    // A parent like any other run of the thread.
    let (s, _, body) = run(&g.base, "demo", &branch("t", "r5", "r3", "fourth")).await;
    assert_eq!(s, 200, "{body}");
    let metrics = metrics_text(&g.base).await;
    assert!(metrics.contains("agui_runs_aside_total 2"), "{metrics}");
    assert!(metrics.contains("agui_runs_joined_total 2"), "{metrics}");
    g.shutdown().await;
}

/// Two branches beside one run in flight, one of them still going when the
/// run ends: each joins whole, after the run, in the order the thread gets
/// free for it.
#[tokio::test]
async fn branches_beside_a_run_join_one_after_another() {
    let g = start(GatewayConfig::default()).await;
    run(&g.base, "demo", &input("t", "r1", "first")).await;
    let r2 = start_run(&g.base, &slow("t", "r2", 60)).await;
    let mut long = branch("t", "b1", "r1", "a b c d e f g h i j k l");
    long["forwardedProps"] = json!({"demo": {"delayMs": 80}});
    let b1 = start_run(&g.base, &long).await;
    let (s, _, body) = run(&g.base, "demo", &branch("t", "b2", "r1", "quick")).await;
    assert_eq!(s, 200, "{body}");
    r2.await.unwrap();
    let b1 = b1.await.unwrap();
    assert_eq!(b1.last().unwrap().ty(), "RUN_FINISHED");
    let v = wait_thread(&g.base, "t", |v| {
        v["runsAside"] == json!([]) && v["runs"].as_array().unwrap().len() == 4
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
    let order = runs_are_contiguous(&thread_events(&g.base, "t").await);
    assert_eq!(&order[..2], ["r1", "r2"]);
    let mut rest = order[2..].to_vec();
    rest.sort();
    assert_eq!(rest, ["b1", "b2"]);
    g.shutdown().await;
}

#[tokio::test]
async fn a_run_set_aside_is_stopped_like_any_run() {
    let g = start(GatewayConfig::default()).await;
    run(&g.base, "demo", &input("t", "r1", "first")).await;
    let r2 = start_run(&g.base, &slow("t", "r2", 100)).await;
    let mut aside = branch("t", "r3", "r1", "a b c d e f g h");
    aside["forwardedProps"] = json!({"demo": {"delayMs": 200}});
    let r3 = start_run(&g.base, &aside).await;
    wait_thread(&g.base, "t", |v| v["runsAside"][0]["runId"] == "r3").await;
    let stop = client()
        .post(format!("{}/threads/t/runs/r3/stop", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status().as_u16(), 200);
    let body: Value = stop.json().await.unwrap();
    assert_eq!(body["status"], "cancelled");
    let r3 = r3.await.unwrap();
    let last = r3.last().unwrap();
    assert_eq!(last.ty(), "RUN_FINISHED");
    assert_eq!(last.data["outcome"]["type"], "cancelled");
    assert!(!r2.is_finished());
    r2.await.unwrap();
    let v = wait_thread(&g.base, "t", |v| v["runsAside"] == json!([])).await;
    assert_eq!(
        ids_and_statuses(&v["runs"]),
        [
            ("r1".into(), "finished".into()),
            ("r2".into(), "finished".into()),
            ("r3".into(), "cancelled".into())
        ]
    );
    runs_are_contiguous(&thread_events(&g.base, "t").await);
    g.shutdown().await;
}

#[tokio::test]
async fn a_thread_with_a_run_aside_in_flight_is_not_deleted_and_an_ended_one_goes_with_it() {
    let g = start(GatewayConfig::default()).await;
    run(&g.base, "demo", &input("t", "r1", "first")).await;
    let r2 = start_run(&g.base, &slow("t", "r2", 40)).await;
    let mut aside = branch("t", "r3", "r1", "a b c d e f g h i j k l m n o p");
    aside["forwardedProps"] = json!({"demo": {"delayMs": 100}});
    let r3 = start_run(&g.base, &aside).await;
    r2.await.unwrap();
    wait_thread(&g.base, "t", |v| v["runs"][1]["status"] == "finished").await;
    let del = client()
        .delete(format!("{}/threads/t", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(del.status().as_u16(), 409);
    r3.await.unwrap();
    wait_thread(&g.base, "t", |v| v["runsAside"] == json!([])).await;
    // An ended run aside that has not joined (its thread busy) is deleted
    // with the thread.
    let r4 = start_run(&g.base, &slow("t", "r4", 100)).await;
    let (s, _, _) = run(&g.base, "demo", &branch("t", "r5", "r1", "quick")).await;
    assert_eq!(s, 200);
    r4.abort();
    let stop = client()
        .post(format!("{}/threads/t/runs/r4/stop", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status().as_u16(), 200);
    // The thread may be deleted once r4 ended, whether r5 joined or not.
    let mut status = 0;
    for _ in 0..100 {
        status = client()
            .delete(format!("{}/threads/t", g.base))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if status == 204 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, 204);
    let aside = g
        .store
        .list_threads(&aside_tenant("default"), &Default::default())
        .await
        .unwrap();
    assert!(aside.threads.is_empty(), "{:?}", aside.threads);
    g.shutdown().await;
}

fn ev(v: Value) -> Event {
    Event::from_json(&v.to_string()).unwrap()
}

/// A gateway that stopped with runs set aside: the next start closes the
/// one left in flight (as `interrupted`) and joins every ended one; a run
/// that had joined but whose aside copy was left is not joined twice.
#[tokio::test]
async fn runs_set_aside_join_at_the_next_start() {
    let store = Store::memory();
    let tenant = "default";
    let started = |run: &str, parent: &str| {
        ev(json!({"type":"RUN_STARTED","threadId":"t","runId":run,"parentRunId":parent}))
    };
    let finished = |run: &str| ev(json!({"type":"RUN_FINISHED","threadId":"t","runId":run}));
    let text = |id: &str, words: &str| {
        vec![
            ev(json!({"type":"TEXT_MESSAGE_START","messageId":id,"role":"assistant"})),
            ev(json!({"type":"TEXT_MESSAGE_CONTENT","messageId":id,"delta":words})),
        ]
    };
    let mut r1 = vec![ev(
        json!({"type":"RUN_STARTED","threadId":"t","runId":"r1"}),
    )];
    r1.extend(text("m1", "one"));
    r1.push(ev(json!({"type":"TEXT_MESSAGE_END","messageId":"m1"})));
    r1.push(finished("r1"));
    store
        .append(tenant, "t", AppendRequest::new(r1))
        .await
        .unwrap();
    let at = aside_tenant(tenant);
    // In flight when the gateway stopped: an open message, no end.
    let mut a = vec![started("a", "r1")];
    a.extend(text("ma", "left open"));
    let a_thread = aside_thread("t", "a").unwrap();
    store
        .append(&at, &a_thread, AppendRequest::new(a))
        .await
        .unwrap();
    // Ended, not joined.
    let mut b = vec![started("b", "r1")];
    b.extend(text("mb", "done"));
    b.push(ev(json!({"type":"TEXT_MESSAGE_END","messageId":"mb"})));
    b.push(finished("b"));
    let b_thread = aside_thread("t", "b").unwrap();
    store
        .append(&at, &b_thread, AppendRequest::new(b.clone()))
        .await
        .unwrap();
    // Joined, but its aside copy was left behind.
    let mut c = vec![started("c", "r1")];
    c.push(finished("c"));
    let c_thread = aside_thread("t", "c").unwrap();
    store
        .append(&at, &c_thread, AppendRequest::new(c.clone()))
        .await
        .unwrap();
    store
        .append(tenant, "t", AppendRequest::new(c))
        .await
        .unwrap();

    let g = start_with(store.clone(), GatewayConfig::default()).await;
    g.gw.recover_at_start().await.unwrap();
    let v = wait_thread(&g.base, "t", |v| {
        v["runsAside"] == json!([]) && v["runs"].as_array().unwrap().len() == 4
    })
    .await;
    let mut runs = ids_and_statuses(&v["runs"]);
    assert_eq!(
        runs[..2],
        [
            ("r1".into(), "finished".into()),
            ("c".into(), "finished".into())
        ]
    );
    runs.sort();
    assert_eq!(
        runs,
        [
            ("a".into(), "interrupted".into()),
            ("b".into(), "finished".into()),
            ("c".into(), "finished".into()),
            ("r1".into(), "finished".into())
        ]
    );
    let log = thread_events(&g.base, "t").await;
    runs_are_contiguous(&log);
    // The interrupted one got its open message ended and a RUN_ERROR.
    let a_events: Vec<&Frame> = log
        .iter()
        .skip_while(|f| !(f.ty() == "RUN_STARTED" && f.data["runId"] == "a"))
        .take_while(|f| !(f.ty() == "RUN_STARTED" && f.data["runId"] != "a"))
        .collect();
    let types: Vec<&str> = a_events.iter().map(|f| f.ty()).collect();
    assert_eq!(
        types,
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_ERROR"
        ]
    );
    assert_eq!(a_events.last().unwrap().data["code"], "interrupted");
    assert_eq!(
        store.run(tenant, "t", "b").await.unwrap().status,
        RunStatus::Finished
    );
    let left = store.list_threads(&at, &Default::default()).await.unwrap();
    assert!(left.threads.is_empty(), "{:?}", left.threads);
    g.shutdown().await;
}

/// A run set aside that never can join (the thread's log refuses it: its
/// parent is no run of the thread) stays set aside, logged and counted,
/// and so does a run set aside from it: neither is tried again and again,
/// and the thread goes on.
#[tokio::test]
async fn a_run_set_aside_that_cannot_join_stays_aside_with_its_children() {
    let store = Store::memory();
    let tenant = "default";
    let r1 = vec![
        ev(json!({"type":"RUN_STARTED","threadId":"t","runId":"r1"})),
        ev(json!({"type":"RUN_FINISHED","threadId":"t","runId":"r1"})),
    ];
    store
        .append(tenant, "t", AppendRequest::new(r1))
        .await
        .unwrap();
    let at = aside_tenant(tenant);
    for (run, parent) in [("b", "gone"), ("c", "b")] {
        let events = vec![
            ev(json!({"type":"RUN_STARTED","threadId":"t","runId":run,"parentRunId":parent})),
            ev(json!({"type":"RUN_FINISHED","threadId":"t","runId":run})),
        ];
        store
            .append(
                &at,
                &aside_thread("t", run).unwrap(),
                AppendRequest::new(events),
            )
            .await
            .unwrap();
    }
    let g = start_with(store.clone(), GatewayConfig::default()).await;
    g.gw.recover_at_start().await.unwrap();
    // Both found unable to join at start-up: the child through its parent.
    let mut metrics = String::new();
    for _ in 0..200 {
        metrics = metrics_text(&g.base).await;
        if metrics.contains("agui_runs_aside_stuck_total 2") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        metrics.contains("agui_runs_aside_stuck_total 2"),
        "{metrics}"
    );
    assert!(metrics.contains("agui_runs_joined_total 0"), "{metrics}");
    let (_, v) = get_json(&format!("{}/threads/t", g.base)).await;
    let mut aside = ids_and_statuses(&v["runsAside"]);
    aside.sort();
    assert_eq!(
        aside,
        [
            ("b".into(), "finished".into()),
            ("c".into(), "finished".into())
        ]
    );
    // The thread goes on.
    let (s, _, body) = run(&g.base, "demo", &input("t", "r2", "next")).await;
    assert_eq!(s, 200, "{body}");
    let v = wait_thread(&g.base, "t", |v| v["runs"].as_array().unwrap().len() == 2).await;
    assert_eq!(
        ids_and_statuses(&v["runs"]),
        [
            ("r1".into(), "finished".into()),
            ("r2".into(), "finished".into())
        ]
    );
    // Nothing retried them meanwhile.
    let metrics = metrics_text(&g.base).await;
    assert!(
        metrics.contains("agui_runs_aside_stuck_total 2"),
        "{metrics}"
    );
    g.shutdown().await;
}

/// A new run waits for a hold on its thread (a run set aside joining it, a
/// delete; here one by another process, in the store) rather than failing:
/// it starts once the hold ends, and gets 409 only after the bound.
#[tokio::test]
async fn a_new_run_waits_for_a_hold_on_its_thread() {
    let store = Store::memory();
    let g = start_with(store.clone(), GatewayConfig::default()).await;
    let (s, _, _) = run(&g.base, "demo", &input("t", "r1", "first")).await;
    assert_eq!(s, 200);
    // Held, then released while the run waits.
    assert_eq!(store.claim_thread("default", "t", "").await.unwrap(), None);
    let base = g.base.clone();
    let waiting = tokio::spawn(async move { run(&base, "demo", &input("t", "r2", "next")).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the run should wait for the hold");
    store.release_thread("default", "t", "").await.unwrap();
    let (s, frames, body) = waiting.await.unwrap();
    assert_eq!(s, 200, "{body}");
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    // Held for good: 409 once the bound (five seconds) has passed.
    assert_eq!(store.claim_thread("default", "t", "").await.unwrap(), None);
    let began = std::time::Instant::now();
    let (s, _, body) = run(&g.base, "demo", &input("t", "r3", "again")).await;
    assert_eq!(s, 409, "{body}");
    assert!(body.contains("run_in_flight"), "{body}");
    assert!(
        began.elapsed() >= Duration::from_secs(4),
        "{:?}",
        began.elapsed()
    );
    store.release_thread("default", "t", "").await.unwrap();
    let (_, v) = get_json(&format!("{}/threads/t", g.base)).await;
    assert_eq!(
        ids_and_statuses(&v["runs"]),
        [
            ("r1".into(), "finished".into()),
            ("r2".into(), "finished".into())
        ]
    );
    g.shutdown().await;
}

/// Two gateways sharing one store, as replicas share a PostgreSQL
/// database: a branch sent to the one that does not forward the run in
/// flight runs aside there, can be stopped through the other, and joins
/// once the thread is free (the gateway that forwarded it polls).
#[tokio::test]
async fn a_branch_on_another_replica_runs_aside_and_joins() {
    let store = Store::memory();
    let a = start_with(store.clone(), GatewayConfig::default()).await;
    let b = start_with(store.clone(), GatewayConfig::default()).await;
    run(&a.base, "demo", &input("t", "r1", "first")).await;
    let r2 = start_run(&a.base, &slow("t", "r2", 100)).await;
    wait_thread(&b.base, "t", |v| v["runs"][1]["status"] == "running").await;
    let (s, _, body) = run(&b.base, "demo", &input("t", "x", "not a branch")).await;
    assert_eq!(s, 409, "{body}");
    let (s, frames, body) = run(&b.base, "demo", &branch("t", "r3", "r1", "second")).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    let mut long = branch("t", "r4", "r1", "a b c d e f g h");
    long["forwardedProps"] = json!({"demo": {"delayMs": 200}});
    let r4 = start_run(&b.base, &long).await;
    wait_thread(&a.base, "t", |v| {
        v["runsAside"].as_array().unwrap().len() == 2
    })
    .await;
    // Stopped through the gateway that does not forward it.
    let stop = client()
        .post(format!("{}/threads/t/runs/r4/stop", a.base))
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status().as_u16(), 200);
    let r4 = r4.await.unwrap();
    assert_eq!(r4.last().unwrap().data["outcome"]["type"], "cancelled");
    assert!(!r2.is_finished());
    r2.await.unwrap();
    let v = wait_thread(&a.base, "t", |v| v["runsAside"] == json!([])).await;
    let mut runs = ids_and_statuses(&v["runs"]);
    runs.sort();
    assert_eq!(
        runs,
        [
            ("r1".into(), "finished".into()),
            ("r2".into(), "finished".into()),
            ("r3".into(), "finished".into()),
            ("r4".into(), "cancelled".into())
        ]
    );
    runs_are_contiguous(&thread_events(&b.base, "t").await);
    a.shutdown().await;
    b.shutdown().await;
}

/// A client attaches to a run set aside as to any run in flight: the
/// branch up to its parent from the log (with ids), then the run's events
/// so far and live to its end (without ids); compacted too.
#[tokio::test]
async fn a_run_set_aside_is_attached_to_while_in_flight() {
    let g = start(GatewayConfig::default()).await;
    run(&g.base, "demo", &input("t", "r1", "first")).await;
    let r2 = start_run(&g.base, &slow("t", "r2", 150)).await;
    let mut aside = branch("t", "r3", "r1", "a b c d e");
    aside["forwardedProps"] = json!({"demo": {"delayMs": 60}});
    let r3 = start_run(&g.base, &aside).await;
    wait_thread(&g.base, "t", |v| v["runsAside"][0]["runId"] == "r3").await;
    // Not a parent while in flight.
    let (s, _, body) = run(&g.base, "demo", &branch("t", "r4", "r3", "x")).await;
    assert_eq!(s, 409, "{body}");
    assert!(body.contains("parent_not_joined"), "{body}");
    let attached = client()
        .get(format!("{}/threads/t/events?branch=r3", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(attached.status().as_u16(), 200);
    let attached = parse_sse(&attached.text().await.unwrap());
    let sent = r3.await.unwrap();
    assert!(!r2.is_finished(), "r3 joined before its end was read");
    let (_, r1) = get_json(&format!("{}/threads/t", g.base)).await;
    let r1_len = r1["runs"][0]["eventCount"].as_u64().unwrap() as usize;
    assert_eq!(attached.len(), r1_len + sent.len());
    for (i, f) in attached[..r1_len].iter().enumerate() {
        assert_eq!(f.id, Some(i as u64 + 1));
    }
    for (got, want) in attached[r1_len..].iter().zip(&sent) {
        assert_eq!(got.id, None);
        assert_eq!(got.data, want.data);
    }
    // Ended, not joined: the same events, and compacted.
    let again = client()
        .get(format!(
            "{}/threads/t/events?branch=r3&compact=snapshot",
            g.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 200);
    let again = parse_sse(&again.text().await.unwrap());
    assert!(again.iter().all(|f| f.id.is_none()));
    assert!(
        again.iter().any(|f| f.ty() == "MESSAGES_SNAPSHOT"),
        "{again:?}"
    );
    assert_eq!(again.last().unwrap().ty(), "RUN_FINISHED");
    r2.await.unwrap();
    wait_thread(&g.base, "t", |v| v["runsAside"] == json!([])).await;
    let (s, m) = get_json(&format!("{}/threads/t/messages?run=r3", g.base)).await;
    assert_eq!(s, 200);
    assert_eq!(m["runId"], "r3");
    g.shutdown().await;
}

/// With per-branch upstream threads (stateful frameworks), a run set aside
/// forks: it goes upstream under an id of its own with its branch's whole
/// history, even from a run with no child yet; and its children continue
/// that id after it joined as its parent's first child.
#[tokio::test]
async fn per_branch_upstream_threads_with_a_run_set_aside() {
    use agui_server::config::parse_agent_flag;
    use agui_server::{SessionMode, UpstreamThread};
    let (url, seen) = recording_upstream().await;
    let mut a = parse_agent_flag(&format!("st={url}"), SessionMode::Client).unwrap();
    a.upstream_thread = UpstreamThread::PerBranch;
    let g = start(GatewayConfig {
        agents: vec![a],
        ..GatewayConfig::default()
    })
    .await;
    let body = |run: &str, parent: Option<&str>, messages: Value, pause: u64| {
        let mut b = json!({"threadId": "p", "runId": run, "state": {}, "messages": messages,
            "tools": [], "context": [], "forwardedProps": {"pauseMs": pause}});
        if let Some(p) = parent {
            b["parentRunId"] = json!(p);
        }
        b
    };
    let user = |id: &str| json!({"id": id, "role": "user", "content": id});
    let with = |base: Value, id: &str| {
        let mut v = base.as_array().unwrap().clone();
        v.push(user(id));
        Value::Array(v)
    };
    let messages = |run: &'static str| {
        let base = g.base.clone();
        async move {
            get_json(&format!("{base}/threads/p/messages?run={run}"))
                .await
                .1["messages"]
                .clone()
        }
    };
    let ok = |r: (u16, Vec<Frame>, String)| assert_eq!(r.0, 200, "{}", r.2);
    ok(run(&g.base, "st", &body("r1", None, json!([user("u1")]), 0)).await);
    ok(run(
        &g.base,
        "st",
        &body("r2", Some("r1"), with(messages("r1").await, "u2"), 0),
    )
    .await);
    ok(run(
        &g.base,
        "st",
        &body("x1", Some("r1"), with(messages("r1").await, "ux"), 0),
    )
    .await);
    // r3 in flight; b1 branches from x1, which has no child yet.
    let resp = client()
        .post(format!("{}/agents/st/run", g.base))
        .json(&body(
            "r3",
            Some("r2"),
            with(messages("r2").await, "u3"),
            800,
        ))
        .send()
        .await
        .unwrap();
    let r3 = tokio::spawn(async move { resp.text().await.unwrap() });
    let x1_history = messages("x1").await;
    let resp = client()
        .post(format!("{}/agents/st/run", g.base))
        .json(&body("b1", Some("x1"), json!([user("ub")]), 300))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let b1 = tokio::spawn(async move { resp.text().await.unwrap() });
    // Its fork is recorded as it starts, not only at its end: a run that
    // a stopped process left in flight still joins, and its children must
    // go on under its fork.
    let recorded = g
        .store
        .channel("default", "p", "st")
        .await
        .unwrap()
        .unwrap();
    let recorded: Value = serde_json::from_str(&recorded.state).unwrap();
    assert_eq!(recorded["upstreamThreads"]["b1"], "p~b1", "{recorded}");
    assert!(!b1.is_finished());
    assert!(b1.await.unwrap().contains("RUN_FINISHED"));
    assert!(!r3.is_finished());
    r3.await.unwrap();
    wait_thread(&g.base, "p", |v| v["runsAside"] == json!([])).await;
    ok(run(
        &g.base,
        "st",
        &body("c1", Some("b1"), json!([user("uc")]), 0),
    )
    .await);
    let seen = seen.lock().unwrap().clone();
    let sent = |run: &str| seen.iter().find(|x| x["runId"] == run).unwrap().clone();
    assert_eq!(sent("r1")["threadId"], "p");
    assert_eq!(sent("r2")["threadId"], "p");
    assert_eq!(sent("x1")["threadId"], "p~x1");
    assert_eq!(sent("r3")["threadId"], "p");
    // The run set aside forked, with the whole branch.
    assert_eq!(sent("b1")["threadId"], "p~b1");
    assert_eq!(sent("b1")["messages"], with(x1_history, "ub"));
    // Its child continues its upstream thread and sends what the client sent.
    assert_eq!(sent("c1")["threadId"], "p~b1");
    assert_eq!(sent("c1")["messages"], json!([user("uc")]));
    g.shutdown().await;
}
