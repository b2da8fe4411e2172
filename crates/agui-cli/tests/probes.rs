//! The probe suite of issue 10 (the gateway's part): the real `agui serve`
//! binary, probed the way an attacker or an unlucky operator would, over
//! plain TCP. Each probe is one test; upstreams that misbehave on purpose
//! are tiny HTTP servers on threads of this process.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::serve;

/// One HTTP/1.0 exchange: (status, headers, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    extra: &[(&str, &str)],
    body: Option<&[u8]>,
) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    if let Some(b) = body {
        let _ = s.write_all(b);
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let headers = String::from_utf8_lossy(&raw[..split]).into_owned();
    let body = raw.get(split + 4..).unwrap_or_default().to_vec();
    let status = headers
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, headers, body)
}

fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let (s, _, b) = http(addr, "GET", path, token, &[], None);
    (s, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

fn post(addr: &str, path: &str, token: Option<&str>, body: &Value) -> (u16, String) {
    let (s, _, b) = http(
        addr,
        "POST",
        path,
        token,
        &[],
        Some(body.to_string().as_bytes()),
    );
    (s, String::from_utf8_lossy(&b).into_owned())
}

fn frames(body: &str) -> Vec<(Option<u64>, Value)> {
    body.split("\n\n")
        .filter_map(|block| {
            let mut id = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = v.parse().ok();
                }
                if let Some(v) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(v).ok();
                }
            }
            Some((id, data?))
        })
        .collect()
}

fn input(thread: &str, run: &str, text: &str) -> Value {
    json!({"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
           "messages": [{"id": format!("u-{run}"), "role": "user", "content": text}],
           "forwardedProps": {}})
}

/// How a test upstream answers a request body.
type Answer = fn(&Value) -> Vec<u8>;

/// A one-route HTTP upstream answering every request with `answer(body)`
/// after `delay`; returns its URL.
fn upstream(delay: Duration, answer: Answer) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Read the head and a Content-Length body.
                let body = loop {
                    let n = s.read(&mut chunk).unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..p]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        while buf.len() < p + 4 + len {
                            let n = s.read(&mut chunk).unwrap_or(0);
                            if n == 0 {
                                return;
                            }
                            buf.extend_from_slice(&chunk[..n]);
                        }
                        break buf[p + 4..p + 4 + len].to_vec();
                    }
                };
                let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                std::thread::sleep(delay);
                let _ = s.write_all(&answer(&v));
            });
        }
    });
    url
}

fn sse_answer(content_type: &str, body: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n{body}")
        .into_bytes()
}

fn wire(events: &[Value]) -> String {
    events.iter().map(|e| format!("data: {e}\n\n")).collect()
}

fn ids(v: &Value) -> (Value, Value) {
    (v["threadId"].clone(), v["runId"].clone())
}

fn wait_idle(addr: &str, thread: &str, token: Option<&str>) -> Value {
    for _ in 0..400 {
        let (s, v) = get(addr, &format!("/threads/{thread}"), token);
        if s == 200
            && v["runs"]
                .as_array()
                .is_some_and(|r| !r.is_empty() && r.iter().all(|r| r["status"] != "running"))
        {
            return v;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("the run of {thread} did not end");
}

fn stored_events(addr: &str, thread: &str, token: Option<&str>) -> String {
    let (s, _, b) = http(
        addr,
        "GET",
        &format!("/threads/{thread}/events"),
        token,
        &[],
        None,
    );
    assert_eq!(s, 200);
    String::from_utf8(b).unwrap()
}

/// `agui verify` on a stored log.
fn agui_verify(dir: &Path, sse: &str) -> (bool, String) {
    let path = dir.join("stored.sse");
    std::fs::write(&path, sse).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agui"))
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn probe_delete_while_the_upstream_is_silent_is_409_and_the_run_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let up = upstream(Duration::from_millis(1500), |v| {
        let (t, r) = ids(v);
        sse_answer(
            "text/event-stream",
            &wire(&[
                json!({"type":"RUN_STARTED","threadId":t,"runId":r}),
                json!({"type":"RUN_FINISHED","threadId":t,"runId":r}),
            ]),
        )
    });
    let agent = format!("slow={up}");
    let server = serve(dir.path(), &["--agent", &agent]);
    let addr = server.addr.clone();
    let (s, body) = post(&addr, "/agents/slow/run", None, &input("t", "r1", "one"));
    assert_eq!(s, 200);
    assert_eq!(frames(&body).last().unwrap().1["type"], "RUN_FINISHED");
    let a = addr.clone();
    let second =
        std::thread::spawn(move || post(&a, "/agents/slow/run", None, &input("t", "r2", "two")));
    std::thread::sleep(Duration::from_millis(400));
    let (s, _, b) = http(&addr, "DELETE", "/threads/t", None, &[], None);
    let err: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(
        (s, err["error"]["code"].as_str()),
        (409, Some("run_in_flight"))
    );
    let (s, body) = second.join().unwrap();
    assert_eq!(s, 200);
    let got = frames(&body);
    assert_eq!(got.last().unwrap().1["type"], "RUN_FINISHED");
    // Every frame the client saw is stored, with the same id.
    let thread = wait_idle(&addr, "t", None);
    assert_eq!(thread["runCount"], 2);
    let stored = frames(&stored_events(&addr, "t", None));
    for f in &got {
        assert!(stored.contains(f), "{f:?} is not stored");
    }
}

#[test]
fn probe_upstream_run_started_with_foreign_ids_is_owned_by_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    // Reuses a runId already in the thread, names another thread, and is
    // its own parent.
    let up = upstream(Duration::ZERO, |_| {
        sse_answer(
            "text/event-stream",
            &wire(&[
                json!({"type":"RUN_STARTED","threadId":"other","runId":"r1","parentRunId":"r1"}),
                json!({"type":"RUN_FINISHED","threadId":"other","runId":"r1"}),
            ]),
        )
    });
    let agent = format!("odd={up}");
    let server = serve(dir.path(), &["--agent", &agent]);
    let addr = &server.addr;
    for run in ["r1", "r2", "r3"] {
        let (s, body) = post(addr, "/agents/odd/run", None, &input("t", run, "x"));
        assert_eq!(s, 200);
        let f = frames(&body);
        assert_eq!(f[0].1["runId"], run, "{body}");
        assert_eq!(f[0].1["threadId"], "t");
        assert_eq!(f[0].1["aguiUpstream"]["threadId"], "other");
        if run != "r1" {
            assert_eq!(f[0].1["aguiUpstream"]["runId"], "r1");
        }
        assert_eq!(f.last().unwrap().1["type"], "RUN_FINISHED", "{body}");
    }
    let thread = wait_idle(addr, "t", None);
    assert_eq!(thread["runCount"], 3);
    assert_eq!(get(addr, "/threads/t/messages", None).0, 200);
    assert_eq!(get(addr, "/threads/t/runs/r3/artifact", None).0, 200);
    let (ok, out) = agui_verify(dir.path(), &stored_events(addr, "t", None));
    assert!(ok, "{out}");
}

#[test]
fn probe_upstream_events_the_client_rejects_end_the_run_and_are_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    let bad: [(&str, Answer); 4] = [
        ("snapshot", |v| {
            let (t, r) = ids(v);
            sse_answer(
                "text/event-stream",
                &wire(&[
                    json!({"type":"RUN_STARTED","threadId":t,"runId":r}),
                    json!({"type":"MESSAGES_SNAPSHOT","messages":"x"}),
                    json!({"type":"RUN_FINISHED","threadId":t,"runId":r}),
                ]),
            )
        }),
        ("nostart", |v| {
            let (t, r) = ids(v);
            sse_answer(
                "text/event-stream",
                &wire(&[
                    json!({"type":"RUN_STARTED","threadId":t,"runId":r}),
                    json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}),
                    json!({"type":"RUN_FINISHED","threadId":t,"runId":r}),
                ]),
            )
        }),
        ("dupstart", |v| {
            let (t, r) = ids(v);
            sse_answer(
                "text/event-stream",
                &wire(&[
                    json!({"type":"RUN_STARTED","threadId":t,"runId":r}),
                    json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
                    json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
                    json!({"type":"RUN_FINISHED","threadId":t,"runId":r}),
                ]),
            )
        }),
        ("argsafterend", |v| {
            let (t, r) = ids(v);
            sse_answer(
                "text/event-stream",
                &wire(&[
                    json!({"type":"RUN_STARTED","threadId":t,"runId":r}),
                    json!({"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f"}),
                    json!({"type":"TOOL_CALL_END","toolCallId":"c"}),
                    json!({"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{}"}),
                    json!({"type":"RUN_FINISHED","threadId":t,"runId":r}),
                ]),
            )
        }),
    ];
    let agents: Vec<String> = bad
        .iter()
        .map(|(name, f)| format!("{name}={}", upstream(Duration::ZERO, *f)))
        .collect();
    let mut args = Vec::new();
    for a in &agents {
        args.push("--agent");
        args.push(a.as_str());
    }
    let server = serve(dir.path(), &args);
    let addr = &server.addr;
    for (name, _) in &bad {
        let thread = format!("t-{name}");
        let (s, body) = post(
            addr,
            &format!("/agents/{name}/run"),
            None,
            &input(&thread, "r", "x"),
        );
        assert_eq!(s, 200);
        let f = frames(&body);
        let last = &f.last().unwrap().1;
        assert_eq!(last["code"], "upstream_protocol", "{name}: {body}");
        wait_idle(addr, &thread, None);
        let stored = stored_events(addr, &thread, None);
        assert_eq!(
            frames(&stored),
            f,
            "{name}: what the client saw is what is stored"
        );
        let (ok, out) = agui_verify(dir.path(), &stored);
        assert!(ok, "{name}: {out}");
        let (s, m) = get(addr, &format!("/threads/{thread}/messages"), None);
        assert_eq!(s, 200, "{name}: {m}");
        let (s, _) = post(
            addr,
            &format!("/agents/{name}/connect"),
            None,
            &input(&thread, "c", ""),
        );
        assert_eq!(s, 200, "{name}");
    }
}

#[test]
fn probe_upstream_garbage_and_cuts_have_their_own_codes() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = upstream(Duration::ZERO, |_| {
        let mut b = b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\nconnection: close\r\n\r\n".to_vec();
        b.extend((0..2000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        b
    });
    let html = upstream(Duration::ZERO, |_| {
        sse_answer("text/html", "<html><body>hello</body></html>")
    });
    let cut = upstream(Duration::ZERO, |v| {
        let (t, r) = ids(v);
        sse_answer(
            "text/event-stream",
            &format!(
                "{}data: {{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\",\"ro",
                wire(&[json!({"type":"RUN_STARTED","threadId":t,"runId":r})])
            ),
        )
    });
    let (a1, a2, a3) = (
        format!("garbage={garbage}"),
        format!("html={html}"),
        format!("cut={cut}"),
    );
    let server = serve(
        dir.path(),
        &["--agent", &a1, "--agent", &a2, "--agent", &a3],
    );
    let addr = &server.addr;
    for (agent, code, needle) in [
        ("garbage", "upstream_garbage", "application/octet-stream"),
        ("html", "upstream_garbage", "text/html"),
        ("cut", "upstream_closed", ""),
    ] {
        let (_, body) = post(
            addr,
            &format!("/agents/{agent}/run"),
            None,
            &input(agent, "r", "x"),
        );
        let f = frames(&body);
        let last = &f.last().unwrap().1;
        assert_eq!(last["code"], code, "{agent}: {body}");
        assert!(
            last["message"].as_str().unwrap().contains(needle),
            "{agent}: {last}"
        );
    }
}

#[test]
fn probe_the_demo_agent_needs_a_token_caps_its_output_and_gives_memory_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &["--auth-token", "s3cret"]);
    let addr = &server.addr;
    let mut big = input("t", "r", "hi");
    big["forwardedProps"] = json!({"demo": {"extraDeltas": 1_000_000}});
    let (s, body) = post(addr, "/demo/agent", None, &big);
    assert_eq!(s, 401, "{body}");
    let (s, _, _) = http(
        addr,
        "POST",
        "/demo/agent",
        Some("s3cret"),
        &[],
        Some(&vec![b' '; 5 << 20]),
    );
    assert_eq!(s, 413);
    // Warm up, then measure around three large responses.
    post(
        addr,
        "/demo/agent",
        Some("s3cret"),
        &input("w", "r", "warm up"),
    );
    let before = server.rss_kib();
    let mut deltas = 0;
    for _ in 0..3 {
        let (s, body) = post(addr, "/demo/agent", Some("s3cret"), &big);
        assert_eq!(s, 200);
        deltas = body.matches("TEXT_MESSAGE_CONTENT").count();
    }
    assert!(
        deltas <= 100_010,
        "the demo output is capped: {deltas} deltas"
    );
    std::thread::sleep(Duration::from_millis(500));
    let after = server.rss_kib();
    eprintln!("demo agent RSS: before {before} KiB, after three capped runs {after} KiB");
    assert!(
        after < before + 32 * 1024,
        "memory did not come back: {before} KiB before, {after} KiB after"
    );
}

#[test]
fn probe_slow_clients_time_out_and_connections_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(
        dir.path(),
        &[
            "--header-read-timeout-ms",
            "1000",
            "--body-read-timeout-ms",
            "1000",
            "--max-connections",
            "4",
        ],
    );
    let addr = &server.addr;
    // A partial request head is dropped after the timeout.
    let t0 = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "held for {:?}",
        t0.elapsed()
    );
    // A body that never completes gets 408 in JSON.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"POST /agents/demo/run HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
        .unwrap();
    let mut buf = [0u8; 2048];
    let n = s.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(
        text.starts_with("HTTP/1.1 408") && text.contains("body_timeout"),
        "{text}"
    );
    drop(s);
    std::thread::sleep(Duration::from_millis(200));
    // Four open connections fill the cap; the fifth is refused in JSON.
    let held: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut fifth = TcpStream::connect(addr).unwrap();
    fifth
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut out = String::new();
    let _ = fifth.read_to_string(&mut out);
    assert!(
        out.starts_with("HTTP/1.1 503") && out.contains("too_many_connections"),
        "{out}"
    );
    drop(held);
    // Slots come back.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(get(addr, "/healthz", None).0, 200);
}

#[test]
fn probe_last_event_id_at_u64_max_replays_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &[]);
    let addr = &server.addr;
    post(addr, "/agents/demo/run", None, &input("t", "r", "hi"));
    let (s, _, body) = http(
        addr,
        "GET",
        "/threads/t/events",
        None,
        &[("Last-Event-ID", "18446744073709551615")],
        None,
    );
    assert_eq!(s, 200);
    assert!(body.is_empty(), "{}", String::from_utf8_lossy(&body));
}

#[test]
fn probe_every_error_body_is_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &["--max-body-bytes", "1000"]);
    let addr = &server.addr;
    let long = format!("/threads/{}", "x".repeat(10_000));
    let big = vec![b'x'; 2000];
    // (method, path, body, status, code)
    type Case<'a> = (&'a str, String, Option<&'a [u8]>, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("GET", "/nowhere".into(), None, 404, "not_found"),
        ("PUT", "/threads".into(), None, 405, "method_not_allowed"),
        (
            "GET",
            "/agents/demo/run".into(),
            None,
            405,
            "method_not_allowed",
        ),
        (
            "GET",
            "/threads/t/events?after=abc".into(),
            None,
            400,
            "bad_request",
        ),
        ("GET", "/threads/%FF".into(), None, 400, "bad_request"),
        ("GET", long, None, 414, "uri_too_long"),
        (
            "POST",
            "/agents/demo/run".into(),
            Some(&big),
            413,
            "body_too_large",
        ),
        (
            "POST",
            "/agents/demo/connect".into(),
            Some(&big),
            413,
            "body_too_large",
        ),
        (
            "POST",
            "/demo/agent".into(),
            Some(&big),
            413,
            "body_too_large",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let (s, headers, b) = http(addr, method, &path, None, &[], body);
        assert_eq!(s, status, "{method} {path}");
        assert!(
            headers
                .to_lowercase()
                .contains("content-type: application/json"),
            "{method} {path}: {headers}"
        );
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["error"]["code"], code, "{method} {path}");
    }
}

#[test]
fn probe_tenants_are_isolated_on_every_route() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokens"), "ta acme\ntb globex\n").unwrap();
    let server = serve(dir.path(), &["--tokens-file", "tokens"]);
    let addr = &server.addr;
    let (a, b) = (Some("ta"), Some("tb"));
    let (s, _) = post(
        addr,
        "/agents/demo/run",
        a,
        &input("t", "r1", "secret of acme"),
    );
    assert_eq!(s, 200);
    wait_idle(addr, "t", a);
    // No token, a wrong token: 401 everywhere.
    for (method, path) in [
        ("GET", "/threads"),
        ("GET", "/threads/t"),
        ("DELETE", "/threads/t"),
        ("GET", "/threads/t/messages"),
        ("GET", "/threads/t/events"),
        ("GET", "/threads/t/runs/r1/artifact"),
        ("POST", "/agents/demo/run"),
        ("POST", "/agents/demo/connect"),
        ("POST", "/demo/agent"),
    ] {
        for token in [None, Some("nope")] {
            let body = input("t", "rx", "x").to_string();
            let (s, _, _) = http(
                addr,
                method,
                path,
                token,
                &[],
                (method == "POST").then_some(body.as_bytes()),
            );
            assert_eq!(s, 401, "{method} {path} {token:?}");
        }
    }
    // The other tenant sees nothing of acme's thread.
    let (s, list) = get(addr, "/threads", b);
    assert_eq!(s, 200);
    assert_eq!(list["threads"], json!([]));
    for path in [
        "/threads/t",
        "/threads/t/messages",
        "/threads/t/events",
        "/threads/t/runs/r1/artifact",
    ] {
        assert_eq!(get(addr, path, b).0, 404, "{path}");
    }
    let (s, _, _) = http(addr, "DELETE", "/threads/t", b, &[], None);
    assert_eq!(s, 404);
    let (s, body) = post(addr, "/agents/demo/connect", b, &input("t", "c", ""));
    assert_eq!(s, 200);
    assert!(!body.contains("secret of acme"), "{body}");
    // The same thread id in globex is another thread.
    let (s, body) = post(
        addr,
        "/agents/demo/run",
        b,
        &input("t", "r1", "globex here"),
    );
    assert_eq!(s, 200);
    assert!(!body.contains("secret of acme"));
    assert!(frames(&body)[0].1.get("parentRunId").is_none());
    wait_idle(addr, "t", b);
    let (_, m) = get(addr, "/threads/t/messages", a);
    assert!(m.to_string().contains("secret of acme"));
    assert!(!m.to_string().contains("globex here"));
    // Acme's thread is still whole after globex deletes its own.
    let (s, _, _) = http(addr, "DELETE", "/threads/t", b, &[], None);
    assert_eq!(s, 204);
    assert_eq!(get(addr, "/threads/t", a).0, 200);
}
