//! The gateway end to end over real HTTP, with the demo agent and with small
//! real upstream servers that fail on purpose.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::*;
use agui_server::{Auth, GatewayConfig, SessionMode, config::parse_agent_flag};
use axum::Router;
use axum::body::Body;
use axum::routing::post;
use serde_json::{Value, json};

fn with_agents(agents: &[&str]) -> GatewayConfig {
    GatewayConfig {
        agents: agents
            .iter()
            .map(|a| parse_agent_flag(a, SessionMode::Client).unwrap())
            .collect(),
        ..GatewayConfig::default()
    }
}

#[tokio::test]
async fn demo_run_is_stored_then_streamed_with_thread_seqs() {
    let g = start(GatewayConfig::default()).await;
    let (status, frames, _) = run(&g.base, "demo", &input("t1", "r1", "hello there")).await;
    assert_eq!(status, 200);
    assert_eq!(frames.first().unwrap().ty(), "RUN_STARTED");
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    let ids: Vec<u64> = frames.iter().map(|f| f.id.unwrap()).collect();
    assert_eq!(ids, (1..=frames.len() as u64).collect::<Vec<_>>());
    // RUN_STARTED carries the exact input the upstream received.
    assert_eq!(frames[0].data["input"], input("t1", "r1", "hello there"));
    assert!(frames[0].data.get("parentRunId").is_none());
    // What the store holds is what the client saw, frame for frame.
    let resp = client()
        .get(format!("{}/threads/t1/events", g.base))
        .send()
        .await
        .unwrap();
    let stored = parse_sse(&resp.text().await.unwrap());
    assert_eq!(stored.len(), frames.len());
    for (a, b) in stored.iter().zip(&frames) {
        assert_eq!(a.id, b.id);
        assert_eq!(a.data, b.data);
    }
    // Second turn: parentRunId is the previous run.
    let (_, frames2, _) = run(&g.base, "demo", &input("t1", "r2", "more")).await;
    assert_eq!(frames2[0].data["parentRunId"], "r1");
    assert_eq!(frames2[0].id, Some(frames.len() as u64 + 1));
    let (_, thread) = get_json(&format!("{}/threads/t1", g.base)).await;
    assert_eq!(thread["runCount"], 2);
    assert_eq!(thread["runs"][1]["parentRunId"], "r1");
    assert_eq!(thread["tree"][0]["children"][0]["runId"], "r2");
    g.shutdown().await;
}

#[tokio::test]
async fn demo_error_midway_is_passed_through() {
    let g = start(GatewayConfig::default()).await;
    let (_, frames, _) = run(&g.base, "demo", &input("t", "r", "please error")).await;
    let types: Vec<&str> = frames.iter().map(Frame::ty).collect();
    assert_eq!(types.last(), Some(&"RUN_ERROR"));
    assert_eq!(frames.last().unwrap().data["code"], "demo_error");
    assert!(!types.contains(&"TEXT_MESSAGE_END"));
    let thread = wait_run_end(&g.base, "t").await;
    assert_eq!(thread["runs"][0]["status"], "error");
    g.shutdown().await;
}

#[tokio::test]
async fn upstream_down_is_a_recorded_run_error() {
    // A port nobody listens on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/", l.local_addr().unwrap());
    drop(l);
    let g = start(with_agents(&[&format!("down={dead}")])).await;
    let (status, frames, _) = run(&g.base, "down", &input("t", "r", "hi")).await;
    assert_eq!(status, 200);
    let types: Vec<&str> = frames.iter().map(Frame::ty).collect();
    assert_eq!(types, vec!["RUN_STARTED", "RUN_ERROR"]);
    assert_eq!(frames[1].data["code"], "upstream_unreachable");
    assert!(
        !frames[1].data["message"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1")
    );
    let thread = wait_run_end(&g.base, "t").await;
    assert_eq!(thread["runs"][0]["status"], "error");
    assert_eq!(thread["lastSeq"], 2);
    g.shutdown().await;
}

fn sse_body(text: &'static str, close_early: bool) -> Router {
    Router::new().route(
        "/",
        post(move || async move {
            let chunks: Vec<Result<String, std::io::Error>> = if close_early {
                vec![Ok(text.to_owned()), Err(std::io::Error::other("cut"))]
            } else {
                vec![Ok(text.to_owned())]
            };
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures::stream::iter(chunks)))
                .unwrap()
        }),
    )
}

#[tokio::test]
async fn upstream_closing_mid_message_gets_its_message_and_tool_call_ended() {
    let up = serve_upstream(sse_body(
        "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\n\
         data: {\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\",\"role\":\"assistant\"}\n\n\
         data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"hi\"}\n\n\
         data: {\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c\",\"toolCallName\":\"f\"}\n\n",
        false,
    ))
    .await;
    let g = start(with_agents(&[&format!("a={up}/")])).await;
    let (_, frames, _) = run(&g.base, "a", &input("t", "r", "hi")).await;
    let types: Vec<&str> = frames.iter().map(Frame::ty).collect();
    assert_eq!(
        types,
        vec![
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TOOL_CALL_START",
            "TOOL_CALL_END",
            "TEXT_MESSAGE_END",
            "RUN_ERROR"
        ]
    );
    assert_eq!(frames[6].data["code"], "upstream_closed");
    // The upstream's RUN_STARTED got the input added.
    assert_eq!(frames[0].data["input"]["runId"], "r");
    g.shutdown().await;
}

#[tokio::test]
async fn run_started_with_null_input_and_parent_is_completed_as_if_omitted() {
    let up = serve_upstream(sse_body(
        "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r2\",\"parentRunId\":null,\"input\":null,\"x\":1}\n\n\
         data: {\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r2\"}\n\n",
        false,
    ))
    .await;
    let g = start(with_agents(&[&format!("a={up}/"), "d=demo"])).await;
    run(&g.base, "d", &input("t", "r1", "first")).await;
    let (_, frames, raw) = run(&g.base, "a", &input("t", "r2", "second")).await;
    assert_eq!(frames[0].ty(), "RUN_STARTED");
    // One key each (no duplicate `input`), filled in, the rest kept in order.
    let line = raw.lines().find(|l| l.contains("RUN_STARTED")).unwrap();
    assert_eq!(line.matches("\"input\"").count(), 1, "{line}");
    assert_eq!(line.matches("\"parentRunId\"").count(), 1, "{line}");
    assert!(line.starts_with(r#"data: {"type":"RUN_STARTED","threadId":"t","runId":"r2","parentRunId":"r1","input":{"#), "{line}");
    assert_eq!(frames[0].data["input"]["runId"], "r2");
    assert_eq!(frames[0].data["x"], 1);
    let (_, thread) = get_json(&format!("{}/threads/t", g.base)).await;
    assert_eq!(thread["runs"][1]["parentRunId"], "r1");
    g.shutdown().await;
}

#[tokio::test]
async fn upstream_garbage_and_broken_connections_are_closed_cleanly() {
    let garbage = serve_upstream(sse_body(
        "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\ndata: hello\n\n",
        false,
    ))
    .await;
    let cut = serve_upstream(sse_body(
        "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\n",
        true,
    ))
    .await;
    let status500 = serve_upstream(Router::new().route(
        "/",
        post(|| async {
            (
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "secret-token-xyz",
            )
        }),
    ))
    .await;
    let g = start(with_agents(&[
        &format!("g={garbage}/"),
        &format!("c={cut}/"),
        &format!("s={status500}/"),
    ]))
    .await;
    let (_, f, _) = run(&g.base, "g", &input("t1", "r", "x")).await;
    assert_eq!(f.last().unwrap().data["code"], "upstream_garbage");
    let (_, f, _) = run(&g.base, "c", &input("t2", "r", "x")).await;
    let code = f.last().unwrap().data["code"].as_str().unwrap().to_owned();
    assert!(
        code == "upstream_error" || code == "upstream_closed",
        "{code}"
    );
    let (_, f, text) = run(&g.base, "s", &input("t3", "r", "x")).await;
    assert_eq!(f.last().unwrap().data["code"], "upstream_status");
    assert!(!text.contains("secret-token-xyz"));
    for t in ["t1", "t2", "t3"] {
        let thread = wait_run_end(&g.base, t).await;
        assert_eq!(thread["runs"][0]["status"], "error");
    }
    // The store is unharmed: every thread is listed and replays in full.
    let (_, list) = get_json(&format!("{}/threads", g.base)).await;
    assert_eq!(list["threads"].as_array().unwrap().len(), 3);
    for t in ["t1", "t2", "t3"] {
        let text = client()
            .get(format!("{}/threads/{t}/events", g.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let frames = parse_sse(&text);
        assert_eq!(frames.first().unwrap().ty(), "RUN_STARTED");
        assert_eq!(frames.last().unwrap().ty(), "RUN_ERROR");
    }
    g.shutdown().await;
}

#[tokio::test]
async fn a_second_run_in_flight_is_refused_and_the_run_outlives_its_client() {
    let g = start(GatewayConfig::default()).await;
    let mut slow = input("t", "r1", "slow one");
    slow["forwardedProps"] = json!({"demo": {"delayMs": 40}});
    let resp = client()
        .post(format!("{}/agents/demo/run", g.base))
        .json(&slow)
        .send()
        .await
        .unwrap();
    let first = read_frames(resp, 1).await; // then the client goes away
    assert_eq!(first[0].ty(), "RUN_STARTED");
    let resp = client()
        .post(format!("{}/agents/demo/run", g.base))
        .json(&input("t", "r2", "again"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["code"], "run_in_flight");
    let thread = wait_run_end(&g.base, "t").await;
    assert_eq!(thread["runs"][0]["status"], "finished");
    // Now the thread is free again, and a reused run id is refused.
    let (s, _, _) = run(&g.base, "demo", &input("t", "r1", "again")).await;
    assert_eq!(s, 409);
    let (s, f, _) = run(&g.base, "demo", &input("t", "r2", "again")).await;
    assert_eq!(s, 200);
    assert_eq!(f.last().unwrap().ty(), "RUN_FINISHED");
    g.shutdown().await;
}

#[tokio::test]
async fn attach_with_last_event_id_has_no_gap_and_no_duplicate() {
    let g = start(GatewayConfig::default()).await;
    let mut slow = input("t", "r1", "a b c d e f g h");
    slow["forwardedProps"] = json!({"demo": {"delayMs": 15}});
    let resp = client()
        .post(format!("{}/agents/demo/run", g.base))
        .json(&slow)
        .send()
        .await
        .unwrap();
    let seen = read_frames(resp, 4).await;
    let last = seen.last().unwrap().id.unwrap();
    // Drop the run's own stream; attach from where we were.
    let resp = client()
        .get(format!("{}/threads/t/events", g.base))
        .header("Last-Event-ID", last.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let rest = parse_sse(&resp.text().await.unwrap());
    assert_eq!(rest.first().unwrap().id, Some(last + 1));
    assert_eq!(rest.last().unwrap().ty(), "RUN_FINISHED");
    let all: Vec<u64> = seen.iter().chain(&rest).map(|f| f.id.unwrap()).collect();
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>());
    g.shutdown().await;
}

#[tokio::test]
async fn request_errors_are_json_with_codes() {
    let g = start(GatewayConfig::default()).await;
    let c = client();
    let post = |path: &str, body: Vec<u8>| {
        c.post(format!("{}{path}", g.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let check = |resp: reqwest::Response, status: u16, code: &'static str| async move {
        assert_eq!(resp.status().as_u16(), status);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], code, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    };
    check(
        post("/agents/nope/run", b"{}".to_vec()).await.unwrap(),
        404,
        "unknown_agent",
    )
    .await;
    check(
        post("/agents/demo/run", b"{not json".to_vec())
            .await
            .unwrap(),
        400,
        "invalid_json",
    )
    .await;
    check(
        post(
            "/agents/demo/run",
            br#"{"threadId":"t","runId":"r","messages":[{"id":1}]}"#.to_vec(),
        )
        .await
        .unwrap(),
        422,
        "invalid_input",
    )
    .await;
    check(
        post("/agents/demo/run", vec![b' '; 5 * 1024 * 1024])
            .await
            .unwrap(),
        413,
        "body_too_large",
    )
    .await;
    check(
        c.get(format!("{}/threads/none", g.base))
            .send()
            .await
            .unwrap(),
        404,
        "not_found",
    )
    .await;
    check(
        c.get(format!("{}/nowhere", g.base)).send().await.unwrap(),
        404,
        "not_found",
    )
    .await;
    let mut bad_parent = input("t", "r", "x");
    bad_parent["parentRunId"] = json!("ghost");
    check(
        post("/agents/demo/run", serde_json::to_vec(&bad_parent).unwrap())
            .await
            .unwrap(),
        422,
        "unknown_parent_run",
    )
    .await;
    // Nothing was stored by any of those.
    let (_, list) = get_json(&format!("{}/threads", g.base)).await;
    assert_eq!(list["threads"], json!([]));
    let (s, _) = get_json(&format!("{}/healthz", g.base)).await;
    assert_eq!(s, 200);
    g.shutdown().await;
}

#[tokio::test]
async fn tenants_are_isolated_and_tokens_required() {
    let tokens: HashMap<String, String> = [
        ("tok-a".to_owned(), "acme".to_owned()),
        ("tok-b".to_owned(), "globex".to_owned()),
    ]
    .into();
    let g = start(GatewayConfig {
        auth: Auth::Tokens(tokens),
        ..GatewayConfig::default()
    })
    .await;
    let c = client();
    let resp = c
        .post(format!("{}/agents/demo/run", g.base))
        .json(&input("t", "r", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let resp = c
        .post(format!("{}/agents/demo/run", g.base))
        .bearer_auth("wrong")
        .json(&input("t", "r", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let resp = c
        .post(format!("{}/agents/demo/run", g.base))
        .bearer_auth("tok-a")
        .json(&input("t", "r", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let _ = resp.text().await.unwrap();
    let get = |path: &str, tok: &str| {
        c.get(format!("{}{path}", g.base))
            .bearer_auth(tok.to_owned())
            .send()
    };
    assert_eq!(
        get("/threads/t", "tok-a").await.unwrap().status().as_u16(),
        200
    );
    assert_eq!(
        get("/threads/t", "tok-b").await.unwrap().status().as_u16(),
        404
    );
    assert_eq!(
        get("/threads/t/events", "tok-b")
            .await
            .unwrap()
            .status()
            .as_u16(),
        404
    );
    assert_eq!(
        get("/threads/t/messages", "tok-b")
            .await
            .unwrap()
            .status()
            .as_u16(),
        404
    );
    let list: Value = get("/threads", "tok-b")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["threads"], json!([]));
    let list: Value = get("/threads", "tok-a")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["threads"][0]["threadId"], "t");
    let del = c
        .delete(format!("{}/threads/t", g.base))
        .bearer_auth("tok-b")
        .send()
        .await
        .unwrap();
    assert_eq!(del.status().as_u16(), 404);
    // The same thread id for the other tenant is a different thread.
    let resp = c
        .post(format!("{}/agents/demo/run", g.base))
        .bearer_auth("tok-b")
        .json(&input("t", "r", "x"))
        .send()
        .await
        .unwrap();
    let frames = parse_sse(&resp.text().await.unwrap());
    assert_eq!(frames[0].id, Some(1));
    g.shutdown().await;
}

#[tokio::test]
async fn shutdown_closes_runs_past_the_grace_period() {
    let g = start(GatewayConfig {
        shutdown_grace: Duration::from_millis(100),
        ..GatewayConfig::default()
    })
    .await;
    let mut slow = input("t", "r", "a b c d e f g h i j k l m n o p");
    slow["forwardedProps"] = json!({"demo": {"delayMs": 200}});
    let resp = client()
        .post(format!("{}/agents/demo/run", g.base))
        .json(&slow)
        .send()
        .await
        .unwrap();
    let store = g.store.clone();
    let reader = tokio::spawn(async move { parse_sse(&resp.text().await.unwrap()) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    g.shutdown().await;
    let frames = reader.await.unwrap();
    let last = frames.last().unwrap();
    assert_eq!(last.ty(), "RUN_ERROR");
    assert_eq!(last.data["code"], "shutdown");
    let run = store.run("default", "t", "r").await.unwrap();
    assert_eq!(run.status, agui_store::RunStatus::Error);
    assert_eq!(run.last_seq, last.id.unwrap());
}

#[tokio::test]
async fn metrics_count_runs_and_events() {
    let g = start(GatewayConfig::default()).await;
    let (_, frames, _) = run(&g.base, "demo", &input("t", "r", "hi")).await;
    let text = metrics_text(&g.base).await;
    assert!(
        text.contains(&format!("agui_events_stored_total {}\n", frames.len())),
        "{text}"
    );
    assert!(text.contains("agui_runs_total{status=\"finished\"} 1\n"));
    assert!(text.contains("agui_runs_in_flight 0\n"));
    g.shutdown().await;
}

#[tokio::test]
async fn artifact_of_a_finished_run_validates() {
    let g = start(GatewayConfig::default()).await;
    let (_, _, _) = run(&g.base, "demo", &input("t", "r1", "hello artifact")).await;
    let resp = client()
        .get(format!("{}/threads/t/runs/r1/artifact", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
    agui_history::artifact::validate(&text).unwrap();
    assert!(text.contains("hello artifact"), "{text}");
    let (s, v) = get_json(&format!("{}/threads/t/runs/nope/artifact", g.base)).await;
    assert_eq!((s, v["error"]["code"].as_str()), (404, Some("not_found")));
    g.shutdown().await;
}

#[tokio::test]
async fn artifact_of_a_branch_leaves_out_messages_resent_from_another_branch() {
    let g = start(GatewayConfig::default()).await;
    let user = |id: &str, text: &str| json!({"id": id, "role": "user", "content": text});
    let mut r1 = input("t", "r1", "first");
    r1["messages"] = json!([user("u1", "first")]);
    run(&g.base, "demo", &r1).await;
    let (_, after1) = get_json(&format!("{}/threads/t/messages?run=r1", g.base)).await;
    let mut r2 = input("t", "r2", "second");
    r2["messages"] = after1["messages"].clone();
    r2["messages"]
        .as_array_mut()
        .unwrap()
        .push(user("u2", "second"));
    run(&g.base, "demo", &r2).await;
    let (_, after2) = get_json(&format!("{}/threads/t/messages?run=r2", g.base)).await;
    // A client branches from r1 but resends r2's whole conversation, r2's
    // answer included: that answer belongs to the other branch.
    let mut r3 = input("t", "r3", "third");
    r3["parentRunId"] = json!("r1");
    r3["messages"] = after2["messages"].clone();
    r3["messages"]
        .as_array_mut()
        .unwrap()
        .push(user("u3", "third"));
    let (status, _, _) = run(&g.base, "demo", &r3).await;
    assert_eq!(status, 200);
    let text = client()
        .get(format!("{}/threads/t/runs/r3/artifact", g.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    agui_history::artifact::validate(&text).unwrap();
    assert!(!text.contains("You said: second"), "{text}");
    assert!(text.contains("You said: third"), "{text}");
    // Equal to the history core's export over the thread's whole log (what
    // `agui export-artifact --run r3` gives on an export of the thread).
    let log = client()
        .get(format!("{}/threads/t/events", g.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events: Vec<agui_protocol::Event> = parse_sse(&log)
        .iter()
        .map(|f| agui_protocol::Event::from_serialize(&f.data).unwrap())
        .collect();
    let (_, thread) = get_json(&format!("{}/threads/t", g.base)).await;
    let r3_record = &thread["runs"][2];
    let options = agui_history::artifact::ExportOptions {
        source: None,
        started_at: r3_record["startedAt"].as_str().map(str::to_owned),
        finished_at: r3_record["finishedAt"].as_str().map(str::to_owned),
    };
    let expected = agui_history::artifact::export(&events, "r3", &options).unwrap();
    let got: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(got, serde_json::to_value(&expected.artifact).unwrap());
    g.shutdown().await;
}

#[tokio::test]
async fn limits_close_runs_with_clear_codes() {
    // An upstream that starts, sends one big event, or hangs.
    let big = serve_upstream(sse_body(
        "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\ndata: {\"type\":\"CUSTOM\",\"name\":\"x\",\"value\":\"0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789\"}\n\n",
        false,
    ))
    .await;
    let hang = serve_upstream(Router::new().route(
        "/",
        post(|| async {
            let head = futures::stream::once(async {
                Ok::<_, std::io::Error>(
                    "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\n"
                        .to_owned(),
                )
            });
            let body = futures::StreamExt::chain(head, futures::stream::pending());
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(body))
                .unwrap()
        }),
    ))
    .await;
    let mut config = with_agents(&[
        &format!("big={big}/"),
        &format!("hang={hang}/"),
        "demo=demo",
    ]);
    config.limits.max_event_bytes = 200;
    config.limits.upstream_idle_timeout = Duration::from_millis(200);
    config.limits.max_events_per_run = 5;
    let g = start(config).await;
    let (_, f, _) = run(&g.base, "big", &input("t1", "r", "x")).await;
    assert_eq!(f.last().unwrap().data["code"], "event_too_large");
    let (_, f, _) = run(&g.base, "hang", &input("t2", "r", "x")).await;
    assert_eq!(f.last().unwrap().data["code"], "upstream_timeout");
    let (_, f, _) = run(&g.base, "demo", &input("t3", "r", "a b c d e f")).await;
    let last = f.last().unwrap();
    assert_eq!(last.data["code"], "event_limit");
    // The open message was ended before the RUN_ERROR.
    assert_eq!(f[f.len() - 2].ty(), "TEXT_MESSAGE_END");
    g.shutdown().await;
}

#[tokio::test]
async fn threads_page_by_cursor_and_filter_by_agent() {
    let g = start(with_agents(&["a=demo", "b=demo"])).await;
    for (agent, t) in [("a", "t1"), ("a", "t2"), ("b", "t3")] {
        let (s, _, _) = run(&g.base, agent, &input(t, "r", "x")).await;
        assert_eq!(s, 200);
    }
    let (_, p1) = get_json(&format!("{}/threads?limit=2", g.base)).await;
    assert_eq!(p1["threads"].as_array().unwrap().len(), 2);
    let cursor = p1["nextCursor"].as_str().unwrap().to_owned();
    let (_, p2) = get_json(&format!("{}/threads?limit=2&cursor={cursor}", g.base)).await;
    let mut all: Vec<String> = p1["threads"]
        .as_array()
        .unwrap()
        .iter()
        .chain(p2["threads"].as_array().unwrap())
        .map(|t| t["threadId"].as_str().unwrap().to_owned())
        .collect();
    all.sort();
    assert_eq!(all, vec!["t1", "t2", "t3"]);
    let (_, only_b) = get_json(&format!("{}/threads?agent=b", g.base)).await;
    assert_eq!(only_b["threads"].as_array().unwrap().len(), 1);
    assert_eq!(only_b["threads"][0]["threadId"], "t3");
    // limit=0 is not "everything": a 422 that names the field.
    let (status, zero) = get_json(&format!("{}/threads?limit=0", g.base)).await;
    assert_eq!(status, 422, "{zero}");
    assert_eq!(zero["error"]["code"], "invalid_limit");
    // One vocabulary: counts by name, times RFC 3339 UTC with milliseconds.
    let t = &only_b["threads"][0];
    assert_eq!(t["eventCount"], t["lastSeq"]);
    assert_eq!(t["runCount"], 1);
    let created = t["createdAt"].as_str().unwrap();
    assert_eq!(created.len(), "2026-01-01T00:00:00.000Z".len(), "{created}");
    let (_, thread) = get_json(&format!("{}/threads/t3", g.base)).await;
    let started = thread["runs"][0]["startedAt"].as_str().unwrap();
    assert_eq!(started.len(), created.len(), "{started}");
    g.shutdown().await;
}

#[tokio::test]
async fn a_prefix_search_reads_past_pages_without_a_match() {
    let g = start(GatewayConfig::default()).await;
    // The five matches are the oldest of 2,505 threads: more than one page
    // of the store's listing holds none of them.
    let ids: Vec<String> = (0..5)
        .map(|i| format!("old-{i}"))
        .chain((0..2_500).map(|i| format!("new-{i:04}")))
        .collect();
    for id in &ids {
        g.store
            .append(
                "default",
                id,
                agui_store::AppendRequest::new(agui_store::sample::full_run(id, "r", None, "hi")),
            )
            .await
            .unwrap();
    }
    let list = |query: String| {
        let base = g.base.clone();
        async move {
            let (status, v) = get_json(&format!("{base}/threads?{query}")).await;
            assert_eq!(status, 200, "{v}");
            let names: Vec<String> = v["threads"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["threadId"].as_str().unwrap().to_owned())
                .collect();
            (names, v["nextCursor"].as_str().map(str::to_owned))
        }
    };
    // The order every search must keep: the whole listing, filtered.
    let (everything, none_left) = list("limit=10000".into()).await;
    assert_eq!((everything.len(), none_left), (ids.len(), None));
    let expected: Vec<String> = everything
        .iter()
        .filter(|t| t.starts_with("old-"))
        .cloned()
        .collect();
    assert_eq!(expected.len(), 5);
    // Followed page by page, every match comes once, in order.
    for limit in [1, 2, 3, 5, 100] {
        let mut got = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let query = match &cursor {
                None => format!("prefix=old-&limit={limit}"),
                Some(c) => format!("prefix=old-&limit={limit}&cursor={c}"),
            };
            let (names, next) = list(query).await;
            assert!(
                !names.is_empty() || next.is_none(),
                "limit {limit}: an empty page with a cursor"
            );
            assert!(names.len() <= limit);
            got.extend(names);
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(got, expected, "limit {limit}");
    }
    // No match anywhere: an empty list and nothing to follow.
    assert_eq!(list("prefix=nothing-".into()).await, (vec![], None));
    // The newest ones, on the first page of the listing, as before.
    let (first, next) = list("prefix=new-&limit=3".into()).await;
    assert_eq!(first, everything[..3].to_vec());
    assert!(next.is_some());
    g.shutdown().await;
}

#[tokio::test]
async fn compacted_history_and_cors() {
    let g = start(GatewayConfig {
        cors_origins: vec!["http://app.example".into()],
        ..GatewayConfig::default()
    })
    .await;
    run(&g.base, "demo", &input("t", "r1", "one two three")).await;
    run(&g.base, "demo", &input("t", "r2", "four")).await;
    let text = client()
        .get(format!("{}/threads/t/events?compact=latest", g.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let frames = parse_sse(&text);
    let types: Vec<&str> = frames.iter().map(Frame::ty).collect();
    assert_eq!(types.iter().filter(|t| **t == "RUN_STARTED").count(), 1);
    assert_eq!(types.last(), Some(&"RUN_FINISHED"));
    // Only the last frame carries an id: the last sequence covered.
    assert!(frames[..frames.len() - 1].iter().all(|f| f.id.is_none()));
    let (_, thread) = get_json(&format!("{}/threads/t", g.base)).await;
    assert_eq!(frames.last().unwrap().id, thread["lastSeq"].as_u64());
    let bad = client()
        .get(format!("{}/threads/t/events?compact=bogus", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let pre = client()
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/agents/demo/run", g.base),
        )
        .header("Origin", "http://app.example")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "content-type,authorization",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        pre.headers().get("access-control-allow-origin").unwrap(),
        "http://app.example"
    );
    g.shutdown().await;
}

/// With CORS off (the default) a browser's preflight is refused, and the
/// answer says which flag turns CORS on.
#[tokio::test]
async fn a_preflight_without_cors_names_the_flag() {
    let g = start(GatewayConfig::default()).await;
    let pre = client()
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/agents/demo/run", g.base),
        )
        .header("Origin", "http://localhost:5173")
        .header("Access-Control-Request-Method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status().as_u16(), 405);
    assert!(pre.headers().get("access-control-allow-origin").is_none());
    let body: Value = pre.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("--cors-origin"), "{message}");
    // Any other wrong method keeps the plain answer.
    let put = client()
        .put(format!("{}/agents/demo/run", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 405);
    let body: Value = put.json().await.unwrap();
    assert_eq!(
        body["error"]["message"],
        "this route does not take that method"
    );
    g.shutdown().await;
}

/// Lets the first two listings of running runs return only once both
/// listed, as two gateways starting at once after a crash would.
struct ListTogether {
    calls: std::sync::atomic::AtomicUsize,
    both: tokio::sync::Barrier,
}

#[async_trait::async_trait]
impl agui_store::conformance::hooked::Hooks for ListTogether {
    async fn list_runs(
        &self,
        inner: &dyn agui_store::Backend,
        tenant: &str,
        filter: &agui_store::RunFilter,
    ) -> agui_store::Result<agui_store::RunPage> {
        let page = inner.list_runs(tenant, filter).await;
        if filter.status == Some(agui_store::RunStatus::Running)
            && self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2
        {
            self.both.wait().await;
        }
        page
    }
}

/// Two gateways recovering one store at once both find the run left in
/// flight; it is closed once, its open message ended, one `RUN_ERROR`.
#[tokio::test]
async fn two_gateways_recovering_at_once_close_a_run_once() {
    let hooked = std::sync::Arc::new(agui_store::conformance::hooked::Hooked::new(
        agui_store::MemoryStore::new(),
        ListTogether {
            calls: Default::default(),
            both: tokio::sync::Barrier::new(2),
        },
    ));
    let store = agui_store::Store::from_arc(hooked);
    let events = [
        r#"{"type":"RUN_STARTED","threadId":"t","runId":"r1"}"#,
        r#"{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}"#,
        r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"half"}"#,
    ]
    .map(|e| agui_protocol::Event::from_json(e).unwrap());
    store
        .append(
            "default",
            "t",
            agui_store::AppendRequest::new(events.to_vec()),
        )
        .await
        .unwrap();
    let gateway = || {
        std::sync::Arc::new(
            agui_server::Gateway::new(store.clone(), GatewayConfig::default()).unwrap(),
        )
    };
    let (a, b) = (gateway(), gateway());
    let (x, y) = tokio::join!(a.recover(), b.recover());
    assert_eq!(x.unwrap() + y.unwrap(), 1);
    let types: Vec<String> = store
        .read_run("default", "t", "r1")
        .await
        .unwrap()
        .iter()
        .map(|e| e.event.type_name().to_owned())
        .collect();
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
}

/// A subscriber attached to a fast run gets its events gathered: after a
/// write, the next waits until 2 ms have passed (the gateway's linger), so
/// a run with a thousand subscribers costs a write per subscriber every
/// 2 ms at most rather than one per event, each event still arriving once
/// and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_subscriber_gets_a_fast_run_in_few_writes() {
    use futures::StreamExt;
    let g = start(GatewayConfig::default()).await;
    append_json(
        &g.store,
        "t",
        vec![
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}),
        ],
    )
    .await;
    let resp = client()
        .get(format!("{}/threads/t/events", g.base))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut text = Vec::new();
    while text.windows(2).filter(|w| w == b"\n\n").count() < 2 {
        text.extend_from_slice(&body.next().await.unwrap().unwrap());
    }
    // 300 events, one at a time, a little apart (about a millisecond, the
    // timer's resolution): without the linger each is a write of its own.
    let n = 300;
    let store = g.store.clone();
    let writer = tokio::spawn(async move {
        let started = std::time::Instant::now();
        for i in 0..n {
            let delta = format!("token {i} ");
            append_json(
                &store,
                "t",
                vec![json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": delta})],
            )
            .await;
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        append_json(
            &store,
            "t",
            vec![
                json!({"type": "TEXT_MESSAGE_END", "messageId": "m"}),
                json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}),
            ],
        )
        .await;
        started.elapsed()
    });
    let mut writes = 0;
    while let Some(chunk) = body.next().await {
        text.extend_from_slice(&chunk.unwrap());
        writes += 1;
    }
    let span = writer.await.unwrap();
    let frames = parse_sse(std::str::from_utf8(&text).unwrap());
    let ids: Vec<u64> = frames.iter().map(|f| f.id.unwrap()).collect();
    assert_eq!(
        ids,
        (1..=n as u64 + 4).collect::<Vec<_>>(),
        "every event once, in order"
    );
    assert_eq!(frames.last().unwrap().ty(), "RUN_FINISHED");
    // The writes happen while the events are published and up to one
    // linger after: at most one per 2 ms of that, and one at the start.
    let bound = span.as_millis() as usize / 2 + 3;
    assert!(
        writes <= bound,
        "{writes} writes for {} events in {span:?} (at most {bound} with a 2 ms linger)",
        n + 2
    );
    g.shutdown().await;
}

/// A run the gateway closes (here: its upstream answers HTTP 500) is
/// counted once, as `closed_by_gateway`, not also as an upstream `error`.
#[tokio::test]
async fn a_run_the_gateway_closes_is_counted_once() {
    let up = serve_upstream(axum::Router::new().route(
        "/",
        axum::routing::post(|| async { (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "no") }),
    ))
    .await;
    let g = start(GatewayConfig {
        agents: vec![parse_agent_flag(&format!("bad={up}/"), SessionMode::Client).unwrap()],
        ..GatewayConfig::default()
    })
    .await;
    let (_, frames, _) = run(&g.base, "bad", &input("t", "r1", "hi")).await;
    assert_eq!(frames.last().unwrap().ty(), "RUN_ERROR");
    let metrics = metrics_text(&g.base).await;
    for (status, n) in [("error", 0), ("closed_by_gateway", 1), ("finished", 0)] {
        let line = format!("agui_runs_total{{status=\"{status}\"}} {n}\n");
        assert!(metrics.contains(&line), "{line}{metrics}");
    }
    g.shutdown().await;
}
