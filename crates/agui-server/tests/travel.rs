//! Time travel, branch pages, compare and the console's static files over
//! HTTP, checked against the history core's lineage on the stored log.

use crate::common::*;
use agui_history::lineage::conversation_at;
use agui_history::reduce::Conversation;
use agui_protocol::Event;
use agui_server::GatewayConfig;
use serde_json::{Value, json};

/// r1 ← r2 ← r3, and r1 ← r4 (a fork), on thread `t`.
async fn forked(base: &str) {
    for (run, parent, text) in [
        ("r1", None, "hello"),
        ("r2", Some("r1"), "second"),
        ("r3", Some("r2"), "third"),
        ("r4", Some("r1"), "a fork"),
    ] {
        let mut body = input("t", run, text);
        if let Some(p) = parent {
            body["parentRunId"] = json!(p);
        }
        let (status, _, text) = run_req(base, &body).await;
        assert_eq!(status, 200, "{text}");
    }
}

async fn run_req(base: &str, body: &Value) -> (u16, Vec<Frame>, String) {
    run(base, "demo", body).await
}

async fn log(g: &Running) -> Vec<Event> {
    let info = g.store.thread("default", "t").await.unwrap();
    g.store
        .read_range("default", "t", 1, info.last_seq)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect()
}

#[tokio::test]
async fn every_position_equals_the_lineage_in_both_directions() {
    let g = start(GatewayConfig::default()).await;
    forked(&g.base).await;
    let events = log(&g).await;
    let (_, thread) = get_json(&format!("{}/threads/t", g.base)).await;
    // The tree carries each run's event count.
    assert_eq!(
        thread["tree"][0]["eventCount"],
        thread["runs"][0]["eventCount"]
    );
    for r in thread["runs"].as_array().unwrap() {
        let run = r["runId"].as_str().unwrap();
        let count = r["eventCount"].as_u64().unwrap() as usize;
        let first = r["firstSeq"].as_u64().unwrap();
        // Forward (kept reducers continue), then backward (rebuilt).
        let order: Vec<usize> = (0..count).chain((0..count).rev()).collect();
        for n in order {
            let want = conversation_at(&events, run, Some(n), Conversation::default()).unwrap();
            let (s, got) = get_json(&format!(
                "{}/threads/t/messages?run={run}&event={n}",
                g.base
            ))
            .await;
            assert_eq!(s, 200, "{got}");
            assert_eq!(got["messages"], json!(want.messages), "{run} event {n}");
            assert_eq!(got["state"], want.state, "{run} event {n}");
            assert_eq!(got["seq"], json!(first + n as u64));
        }
        // By sequence number: the same position.
        let seq = first + (count as u64) / 2;
        let (_, by_seq) = get_json(&format!("{}/threads/t/messages?seq={seq}", g.base)).await;
        let (_, by_event) = get_json(&format!(
            "{}/threads/t/messages?run={run}&event={}",
            g.base,
            count / 2
        ))
        .await;
        assert_eq!(by_seq, by_event);
        // Past the end: a clear error.
        let (s, err) = get_json(&format!(
            "{}/threads/t/messages?run={run}&event={count}",
            g.base
        ))
        .await;
        assert_eq!(s, 400);
        assert_eq!(err["error"]["code"], "event_out_of_range");
    }
    // A sequence number of another run than the one named.
    let r2_first = thread["runs"][1]["firstSeq"].as_u64().unwrap();
    let (s, _) = get_json(&format!(
        "{}/threads/t/messages?run=r1&seq={r2_first}",
        g.base
    ))
    .await;
    assert_eq!(s, 400);
    let (s, _) = get_json(&format!("{}/threads/t/messages?seq=99999", g.base)).await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn branch_pages_are_the_branch_in_order() {
    let g = start(GatewayConfig::default()).await;
    forked(&g.base).await;
    let want: Vec<u64> = g
        .store
        .read_branch("default", "t", "r3")
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    let mut got = Vec::new();
    let mut offset = 0;
    loop {
        let (s, page) = get_json(&format!(
            "{}/threads/t/branch?run=r3&offset={offset}&limit=7",
            g.base
        ))
        .await;
        assert_eq!(s, 200, "{page}");
        assert_eq!(page["total"], json!(want.len()));
        let evs = page["events"].as_array().unwrap();
        if evs.is_empty() {
            break;
        }
        for e in evs {
            got.push(e["seq"].as_u64().unwrap());
            assert_eq!(e["type"], e["event"]["type"]);
        }
        offset += evs.len();
    }
    assert_eq!(got, want);
    let (_, page) = get_json(&format!("{}/threads/t/branch?run=r3", g.base)).await;
    let runs: Vec<&str> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert_eq!(runs, ["r1", "r2", "r3"]);
    let (_, starts) = get_json(&format!(
        "{}/threads/t/branch?run=r3&type=RUN_STARTED",
        g.base
    ))
    .await;
    assert_eq!(starts["total"], 3);
    let (s, _) = get_json(&format!("{}/threads/t/branch?run=nope", g.base)).await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn compare_names_the_fork_and_patches_the_state() {
    let g = start(GatewayConfig::default()).await;
    forked(&g.base).await;
    let (s, c) = get_json(&format!("{}/threads/t/compare?a=r3&b=r4", g.base)).await;
    assert_eq!(s, 200, "{c}");
    assert_eq!(c["commonAncestor"], "r1");
    assert_eq!(c["firstDivergence"], json!({"a": "r2", "b": "r4"}));
    let (_, a) = get_json(&format!("{}/threads/t/messages?run=r3", g.base)).await;
    let (_, b) = get_json(&format!("{}/threads/t/messages?run=r4", g.base)).await;
    // r1's three messages are shared; r2's and r3's are only in a.
    assert_eq!(c["commonMessages"], 3);
    assert_eq!(c["onlyA"].as_array().unwrap().len(), 6);
    assert_eq!(c["onlyB"].as_array().unwrap().len(), 3);
    let mut state = a["state"].clone();
    let patch: json_patch::Patch = serde_json::from_value(c["statePatch"].clone()).unwrap();
    json_patch::patch(&mut state, &patch).unwrap();
    assert_eq!(state, b["state"]);
    // An ancestor against its descendant: nothing diverges on its side.
    let (_, c) = get_json(&format!("{}/threads/t/compare?a=r1&b=r3", g.base)).await;
    assert_eq!(c["firstDivergence"], json!({"a": null, "b": "r2"}));
    assert_eq!(c["onlyA"], json!([]));
}

#[tokio::test]
async fn console_files_carry_a_strict_policy_and_can_be_turned_off() {
    let g = start(GatewayConfig::default()).await;
    for (path, ty) in [
        ("/ui/", "text/html"),
        ("/ui/threads/any%20thread", "text/html"),
        ("/ui/assets/app.js", "text/javascript"),
        ("/ui/assets/app.css", "text/css"),
    ] {
        let resp = client()
            .get(format!("{}{path}", g.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let h = resp.headers();
        assert!(h["content-type"].to_str().unwrap().starts_with(ty));
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"));
        assert_eq!(h["x-content-type-options"], "nosniff");
    }
    let (s, _) = get_json(&format!("{}/ui/assets/secret.txt", g.base)).await;
    assert_eq!(s, 404);
    // The page loads one module and no inline script.
    let html = client()
        .get(format!("{}/ui/", g.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(html.matches("<script").count(), 1);
    assert!(html.contains(r#"<script type="module" src="/ui/assets/app.js"></script>"#));
    let off = start(GatewayConfig {
        ui: false,
        ..GatewayConfig::default()
    })
    .await;
    let (s, _) = get_json(&format!("{}/ui/", off.base)).await;
    assert_eq!(s, 404);
}
