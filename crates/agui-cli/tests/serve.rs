//! `agui serve` as a process: the default SQLite store in the data
//! directory, the demo agent out of the box, and SIGKILL mid-run.

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::{Value, json};

mod common;
use common::{PgSchema, postgres_url, serve};

/// One HTTP/1.0 exchange (the body ends at close: no chunking to undo).
fn request(addr: &str, method: &str, path: &str, body: Option<&Value>) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    s
}

fn split_response(raw: &str) -> (u16, &str) {
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body)
}

fn get_json(addr: &str, path: &str) -> (u16, Value) {
    let mut raw = String::new();
    request(addr, "GET", path, None)
        .read_to_string(&mut raw)
        .unwrap();
    let (status, body) = split_response(&raw);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn frames(body: &str) -> Vec<(u64, Value)> {
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
            Some((id?, data?))
        })
        .collect()
}

fn input(thread: &str, run: &str, text: &str, delay_ms: u64) -> Value {
    json!({"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
           "messages": [{"id": format!("u-{run}"), "role": "user", "content": text}],
           "forwardedProps": {"demo": {"delayMs": delay_ms}}})
}

#[test]
fn serves_the_demo_agent_with_the_default_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &[]);
    assert!(dir.path().join(".agui/agui.db").is_file());
    let (status, health) = get_json(&server.addr, "/healthz");
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
    let mut raw = String::new();
    request(
        &server.addr,
        "POST",
        "/agents/demo/run",
        Some(&input("t", "r1", "hi there", 0)),
    )
    .read_to_string(&mut raw)
    .unwrap();
    let (status, body) = split_response(&raw);
    assert_eq!(status, 200);
    let f = frames(body);
    assert_eq!(f.first().unwrap().1["type"], "RUN_STARTED");
    assert_eq!(f.last().unwrap().1["type"], "RUN_FINISHED");
    let (_, msgs) = get_json(&server.addr, "/threads/t/messages");
    assert_eq!(msgs["messages"][1]["content"], "You said: hi there");
}

#[test]
fn sigkill_mid_run_then_restart_closes_the_run_as_interrupted_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/kill.db", dir.path().display());
    let first = serve(dir.path(), &["--store", &db]);
    // A finished run first, then a slow one in flight.
    let mut raw = String::new();
    request(
        &first.addr,
        "POST",
        "/agents/demo/run",
        Some(&input("k", "r1", "one", 0)),
    )
    .read_to_string(&mut raw)
    .unwrap();
    let (_, before) = get_json(&first.addr, "/threads/k/messages?run=r1");
    let mut stream = request(
        &first.addr,
        "POST",
        "/agents/demo/run",
        Some(&input("k", "r2", "a b c d e f g h i j k l", 150)),
    );
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while frames(&seen).len() < 4 {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the run ended too early");
        seen.push_str(std::str::from_utf8(&buf[..n]).unwrap());
    }
    let seen = frames(seen.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or(&seen));
    drop(first); // SIGKILL
    let second = serve(dir.path(), &["--store", &db]);
    let (_, thread) = get_json(&second.addr, "/threads/k");
    assert_eq!(thread["runs"][0]["status"], "finished");
    assert_eq!(thread["runs"][1]["status"], "interrupted");
    let mut raw = String::new();
    request(&second.addr, "GET", "/threads/k/events", None)
        .read_to_string(&mut raw)
        .unwrap();
    let stored = frames(split_response(&raw).1);
    // Every event a client saw is stored, unchanged, under the same id.
    for (id, data) in &seen {
        let s = stored
            .iter()
            .find(|(i, _)| i == id)
            .expect("a seen event was lost");
        assert_eq!(&s.1, data);
    }
    let (_, last) = stored.last().unwrap();
    assert_eq!(last["type"], "RUN_ERROR");
    assert_eq!(last["code"], "interrupted");
    // The message open at the kill was ended before the RUN_ERROR.
    assert_eq!(stored[stored.len() - 2].1["type"], "TEXT_MESSAGE_END");
    // History survives the restart.
    let (_, after) = get_json(&second.addr, "/threads/k/messages?run=r1");
    assert_eq!(before["messages"], after["messages"]);
}

/// An SSE response read frame by frame as it arrives.
struct SseReader {
    stream: TcpStream,
    buf: Vec<u8>,
    status: Option<u16>,
}

impl SseReader {
    fn new(stream: TcpStream) -> SseReader {
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        SseReader {
            stream,
            buf: Vec::new(),
            status: None,
        }
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        let n = self.stream.read(&mut chunk).expect("the stream stalled");
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    /// The next `(id, event)` frame, or `None` at the end of the response.
    fn next_frame(&mut self) -> Option<(u64, Value)> {
        if self.status.is_none() {
            loop {
                if let Some(p) = find(&self.buf, b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&self.buf[..p]).into_owned();
                    self.status = Some(split_response(&head).0);
                    assert_eq!(self.status, Some(200), "{head}");
                    self.buf.drain(..p + 4);
                    break;
                }
                assert!(self.fill(), "the response ended before its headers");
            }
        }
        loop {
            if let Some(p) = find(&self.buf, b"\n\n") {
                let block: Vec<u8> = self.buf.drain(..p + 2).collect();
                let block = String::from_utf8(block).unwrap();
                match frames(&block).pop() {
                    Some(f) => return Some(f),
                    None => continue, // a comment or keep-alive
                }
            }
            if !self.fill() {
                return None;
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `GET /threads/{thread}/events`, resuming after `last_event_id` when given.
fn attach(addr: &str, thread: &str, last_event_id: Option<u64>) -> SseReader {
    let mut s = TcpStream::connect(addr).unwrap();
    let resume = last_event_id
        .map(|id| format!("Last-Event-ID: {id}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET /threads/{thread}/events HTTP/1.0\r\nHost: {addr}\r\nAccept: text/event-stream\r\n{resume}\r\n"
    )
    .unwrap();
    SseReader::new(s)
}

#[test]
fn two_gateways_on_one_postgres_database_run_through_one_attach_live_through_the_other() {
    let Some(url) = postgres_url() else { return };
    let _one_at_a_time = postgres_tests();
    let schema = PgSchema::new(url);
    let store = schema.store_url();
    let dir = tempfile::tempdir().unwrap();
    let a = serve(dir.path(), &["--store", &store]);
    // A slow run through A: about 40 events, 60 ms apart.
    let words = "one two three four five six seven eight nine ten eleven twelve";
    let mut run = SseReader::new(request(
        &a.addr,
        "POST",
        "/agents/demo/run",
        Some(&input("p", "r1", words, 60)),
    ));
    let mut through_a = Vec::new();
    while through_a.len() < 3 {
        through_a.push(run.next_frame().expect("the run ended too early"));
    }
    // The replica starts while the run is in flight, recovering as every
    // gateway does: on PostgreSQL recovery only closes runs whose owning
    // gateway is gone, so A's live run is left alone.
    let b = serve(dir.path(), &["--store", &store]);
    // An attach through B from the start, dropped after a few live events.
    let mut first = attach(&b.addr, "p", None);
    let mut seen = Vec::new();
    while seen.len() < through_a.len() + 3 {
        seen.push(first.next_frame().expect("the attach ended early"));
    }
    // Live: the run is still going (B reads its status from the shared store).
    let (_, thread) = get_json(&b.addr, "/threads/p");
    assert_eq!(thread["runs"][0]["status"], "running", "{thread}");
    drop(first);
    // Resume with Last-Event-ID through B, and through A: both to the end.
    let resume_from = seen.last().unwrap().0;
    let mut via_b = attach(&b.addr, "p", Some(resume_from));
    let mut via_a = attach(&a.addr, "p", Some(resume_from));
    let rest_b: Vec<(u64, Value)> = std::iter::from_fn(|| via_b.next_frame()).collect();
    let rest_a: Vec<(u64, Value)> = std::iter::from_fn(|| via_a.next_frame()).collect();
    through_a.extend(std::iter::from_fn(|| run.next_frame()));
    // The run's own client got every event once, ids 1..=N.
    let n = through_a.len() as u64;
    assert!(n > 30, "only {n} events");
    let ids: Vec<u64> = through_a.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=n).collect::<Vec<_>>());
    assert_eq!(through_a.last().unwrap().1["type"], "RUN_FINISHED");
    // The attach through B, then its resumption (through either replica),
    // holds exactly the run's events: no gap, no duplicate, same ids.
    for rest in [&rest_b, &rest_a] {
        let mut joined = seen.clone();
        joined.extend(rest.iter().cloned());
        assert_eq!(joined, through_a);
    }
    // The replica's start did not interrupt A's run.
    let (_, thread) = get_json(&b.addr, "/threads/p");
    assert_eq!(thread["runs"][0]["status"], "finished", "{thread}");
    let (_, msgs) = get_json(&b.addr, "/threads/p/messages");
    assert_eq!(msgs["messages"][1]["content"], format!("You said: {words}"));
}

#[test]
fn a_stop_sent_to_one_replica_stops_a_run_streaming_through_the_other_on_postgres() {
    let Some(url) = postgres_url() else { return };
    let _one_at_a_time = postgres_tests();
    let schema = PgSchema::new(url);
    let store = schema.store_url();
    let dir = tempfile::tempdir().unwrap();
    let a = serve(dir.path(), &["--store", &store]);
    let b = serve(dir.path(), &["--store", &store]);
    // A slow run through A: about 40 events, 200 ms apart.
    let words = "one two three four five six seven eight nine ten eleven twelve";
    let mut run = SseReader::new(request(
        &a.addr,
        "POST",
        "/agents/demo/run",
        Some(&input("s", "r1", words, 200)),
    ));
    let mut through_a = Vec::new();
    while through_a.len() < 4 {
        through_a.push(run.next_frame().expect("the run ended too early"));
    }
    // The stop goes to B, which does not forward the run.
    let mut resp = String::new();
    request(&b.addr, "POST", "/threads/s/runs/r1/stop", None)
        .read_to_string(&mut resp)
        .unwrap();
    let (status, body) = split_response(&resp);
    assert_eq!(status, 200, "{resp}");
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["status"], "cancelled", "{v}");
    // A's client gets the end, numbered, right after what it had.
    through_a.extend(std::iter::from_fn(|| run.next_frame()));
    let n = through_a.len() as u64;
    assert!(n < 30, "the run was not stopped early: {n} events");
    let ids: Vec<u64> = through_a.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=n).collect::<Vec<_>>());
    let (_, last) = through_a.last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED");
    assert_eq!(last["outcome"], json!({"type": "cancelled"}));
    assert_eq!(through_a[through_a.len() - 2].1["type"], "TEXT_MESSAGE_END");
    for addr in [&a.addr, &b.addr] {
        let (_, thread) = get_json(addr, "/threads/s");
        assert_eq!(thread["runs"][0]["status"], "cancelled", "{thread}");
        assert_eq!(thread["lastSeq"], n, "{thread}");
    }
    // Stopping it again: 409.
    let mut resp = String::new();
    request(&a.addr, "POST", "/threads/s/runs/r1/stop", None)
        .read_to_string(&mut resp)
        .unwrap();
    assert_eq!(split_response(&resp).0, 409, "{resp}");
}

/// Found by the chaos soak (crates/agui-cli/tests/chaos.rs) under load: a
/// gateway SIGKILLed mid-run and restarted at once on PostgreSQL left the
/// run `running` for good (attach hung on it, new runs of the thread got
/// 409), because the dead gateway's database connection, and with it its
/// session lock, outlived it by a moment and the start-up recovery took the
/// run for a live replica's. Here that connection is played by the test,
/// holding the dead gateway's lock across the restart: once it lets go,
/// the running gateway closes the run as `interrupted`.
#[test]
fn on_postgres_a_run_of_a_gateway_whose_lock_outlives_it_is_interrupted_once_the_lock_goes() {
    let Some(url) = postgres_url() else { return };
    let _one_at_a_time = postgres_tests();
    let schema = PgSchema::new(url.clone());
    let store = schema.store_url();
    let name = store.split("schema=").nth(1).unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let a = serve(dir.path(), &["--store", &store]);
    let mut run = SseReader::new(request(
        &a.addr,
        "POST",
        "/agents/demo/run",
        Some(&input("t", "r1", "one two three four five six", 200)),
    ));
    run.next_frame().expect("RUN_STARTED");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (client, space, session) = rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        // The client may see RUN_STARTED before the run's row is committed:
        // wait for the row and its owner's lock.
        // Session numbers repeat across schemas; the lock space does not.
        let space = agui_store_postgres::session_lock_space(&name);
        let query = format!(
            "SELECT l.classid::text::bigint, r.owner::bigint FROM \"{name}\".runs r \
             JOIN pg_locks l ON l.locktype = 'advisory' AND l.objsubid = 2 \
             AND l.granted AND l.objid::text::bigint = r.owner \
             AND l.classid::text::bigint = {space} WHERE r.run_id = 'r1'"
        );
        let mut row = None;
        for _ in 0..200 {
            row = client.query_opt(&query, &[]).await.unwrap();
            if row.is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let row = row.expect("run r1 stored with its owner's lock held");
        let space: i64 = row.get(0);
        let session: i64 = row.get(1);
        (client, space as u32 as i32, session as i32)
    });
    drop(a); // SIGKILL
    // The lock, taken as the dead gateway's connection lets it go.
    rt.block_on(async {
        client
            .execute("SELECT pg_advisory_lock($1, $2)", &[&space, &session])
            .await
            .unwrap();
    });
    let b = serve(dir.path(), &["--store", &store]);
    let status = |addr: &str| {
        let (_, thread) = get_json(addr, "/threads/t");
        thread["runs"][0]["status"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(status(&b.addr), "running", "its owner looked alive");
    rt.block_on(async {
        client
            .execute("SELECT pg_advisory_unlock($1, $2)", &[&space, &session])
            .await
            .unwrap();
    });
    let mut waited = 0;
    while status(&b.addr) == "running" && waited < 100 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        waited += 1;
    }
    assert_eq!(status(&b.addr), "interrupted");
    let mut raw = String::new();
    request(&b.addr, "GET", "/threads/t/events", None)
        .read_to_string(&mut raw)
        .unwrap();
    let last = frames(split_response(&raw).1).pop().unwrap().1;
    assert_eq!(
        (last["type"].as_str(), last["code"].as_str()),
        (Some("RUN_ERROR"), Some("interrupted"))
    );
}

/// A run left `running` by a process that is gone, written after this
/// gateway started (a killed gateway's last transaction committing late, or
/// a replica dying while this one runs), is closed as `interrupted` by the
/// running gateway's sweep: its open message ended, then `RUN_ERROR`.
#[test]
fn on_postgres_a_run_left_by_a_process_gone_after_start_up_is_interrupted() {
    let Some(url) = postgres_url() else { return };
    let _one_at_a_time = postgres_tests();
    let schema = PgSchema::new(url);
    let store = schema.store_url();
    let dir = tempfile::tempdir().unwrap();
    let b = serve(dir.path(), &["--store", &store]);
    // Another process's store appends a run's first events and goes.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let other = agui_store::Store::new(agui_store_postgres::open(&store).await.unwrap());
        let events = [
            r#"{"type":"RUN_STARTED","threadId":"late","runId":"r1"}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"half"}"#,
        ]
        .map(|e| agui_protocol::Event::from_json(e).unwrap());
        other
            .append(
                agui_server::DEFAULT_TENANT,
                "late",
                agui_store::AppendRequest::new(events.to_vec()),
            )
            .await
            .unwrap();
        other.close().await.unwrap();
    });
    drop(rt);
    let status = || {
        let (_, thread) = get_json(&b.addr, "/threads/late");
        thread["runs"][0]["status"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let mut waited = 0;
    while status() != "interrupted" && waited < 150 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        waited += 1;
    }
    assert_eq!(status(), "interrupted");
    let mut raw = String::new();
    request(&b.addr, "GET", "/threads/late/events", None)
        .read_to_string(&mut raw)
        .unwrap();
    let types: Vec<String> = frames(split_response(&raw).1)
        .into_iter()
        .map(|(_, e)| e["type"].as_str().unwrap_or("").to_owned())
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

/// The PostgreSQL tests of this file run one at a time: each looks up its
/// gateways' advisory locks by session number, which another test's schema
/// may also use at the same moment.
fn postgres_tests() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}
