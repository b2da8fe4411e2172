//! Shared support of the session tests: a store of every backend, a
//! multi-agent branched thread, and a full picture of a thread to compare.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agui_protocol::{Event, EventType};
use agui_store::{AppendRequest, Channel, RunRecord, Store, Timestamp};
use futures::StreamExt;

pub const TENANT: &str = "acme";

/// The PostgreSQL server of the tests (`AGUI_TEST_POSTGRES_URL`); unset: a
/// failure under `CI`, else a notice and `None`.
pub fn postgres_url() -> Option<String> {
    match std::env::var("AGUI_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var_os("CI").is_some() => {
            panic!(
                "AGUI_TEST_POSTGRES_URL is not set, and CI is: the PostgreSQL tests need a server"
            )
        }
        _ => {
            eprintln!("notice: AGUI_TEST_POSTGRES_URL is not set; skipping PostgreSQL");
            None
        }
    }
}

/// A schema of its own in the test database, dropped at the end.
pub struct PgSchema {
    pub url: String,
    pub name: String,
}

impl PgSchema {
    pub fn new(url: String) -> PgSchema {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "agui_sess_{}_{nanos}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        PgSchema { url, name }
    }

    pub fn store_url(&self) -> String {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}schema={}", self.url, self.name)
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let url = self.url.clone();
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok((client, conn)) =
                    tokio_postgres::connect(&url, tokio_postgres::NoTls).await
                {
                    tokio::spawn(conn);
                    let _ = client.batch_execute(&sql).await;
                }
            });
        })
        .join()
        .ok();
    }
}

/// One store of each backend (PostgreSQL when a server is configured), all
/// fresh. Keep the returned guards alive as long as the stores.
pub struct Backends {
    pub dir: tempfile::TempDir,
    pub pg: Option<PgSchema>,
}

impl Backends {
    pub fn new() -> Backends {
        Backends {
            dir: tempfile::tempdir().unwrap(),
            pg: postgres_url().map(PgSchema::new),
        }
    }

    /// `(name, URL)` of every backend (memory first).
    pub fn urls(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            ("memory", "memory://".to_owned()),
            (
                "file",
                format!("file://{}", self.dir.path().join("file-store").display()),
            ),
            (
                "sqlite",
                format!("sqlite://{}", self.dir.path().join("s.db").display()),
            ),
        ];
        if let Some(pg) = &self.pg {
            out.push(("postgres", pg.store_url()));
        }
        out
    }
}

pub async fn open(url: &str) -> Store {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap();
    match scheme {
        "memory" => agui_store::Store::memory(),
        "file" => agui_store::Store::new(agui_store_file::open(url).await.unwrap()),
        "sqlite" => agui_store::Store::new(agui_store_sqlite::open(url).await.unwrap()),
        "postgres" => agui_store::Store::new(agui_store_postgres::open(url).await.unwrap()),
        other => panic!("no backend {other}"),
    }
}

pub fn ev(text: &str) -> Event {
    Event::from_json(text).unwrap()
}

/// Appends `events` to a thread, one batch per run, the runs going to the
/// agents in turn, at increasing made-up times.
pub async fn put_stream(store: &Store, thread: &str, events: &[Event], agents: &[&str]) {
    let mut batches: Vec<Vec<Event>> = vec![Vec::new()];
    for e in events {
        if *e.event_type() == EventType::RunStarted && !batches.last().unwrap().is_empty() {
            batches.push(Vec::new());
        }
        batches.last_mut().unwrap().push(e.clone());
    }
    for (i, b) in batches.into_iter().enumerate() {
        if b.is_empty() {
            continue;
        }
        let mut req = AppendRequest::new(b);
        if !agents.is_empty() {
            req.agent = Some(agents[i % agents.len()].to_owned());
        }
        req.received_at = Some(Timestamp(1_700_000_000_000_000 + i as i64 * 1_000_003));
        store.append(TENANT, thread, req).await.unwrap();
    }
}

/// A thread of two agents taking turns, with a branch, an error and an
/// unknown event type, and a channel per agent.
pub async fn multi_agent_thread(store: &Store, thread: &str) {
    let run = |id: &str, parent: Option<&str>, text: &str, end: &str| -> Vec<Event> {
        let parent = parent
            .map(|p| format!(",\"parentRunId\":\"{p}\""))
            .unwrap_or_default();
        vec![
            ev(&format!(
                r#"{{"type":"RUN_STARTED","threadId":"{thread}","runId":"{id}"{parent},"input":{{"threadId":"{thread}","runId":"{id}","messages":[{{"id":"u-{id}","role":"user","content":"ask {id}"}}],"tools":[],"context":[],"state":{{}},"forwardedProps":{{}}}}}}"#
            )),
            ev(&format!(
                r#"{{"type":"TEXT_MESSAGE_START","messageId":"m-{id}","role":"assistant"}}"#
            )),
            ev(&format!(
                r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m-{id}","delta":"{text}"}}"#
            )),
            ev(&format!(
                r#"{{"type":"TEXT_MESSAGE_END","messageId":"m-{id}"}}"#
            )),
            ev(&format!(
                r#"{{"type":"X_UNKNOWN_KIND","payload":{{"n":1.50,"z":[]}},"extra":"{id}"}}"#
            )),
            ev(&end.replace("{id}", id).replace("{thread}", thread)),
        ]
    };
    let fin = r#"{"type":"RUN_FINISHED","threadId":"{thread}","runId":"{id}"}"#;
    let err = r#"{"type":"RUN_ERROR","message":"boom","code":"x"}"#;
    let plan: [(&str, Option<&str>, &str, &str, &str); 5] = [
        ("r1", None, "research one", fin, "research"),
        ("r2", Some("r1"), "writer two", fin, "writer"),
        ("r3", Some("r2"), "research three", err, "research"),
        ("r4", Some("r1"), "writer branch", fin, "writer"),
        ("r5", Some("r4"), "research on branch", fin, "research"),
    ];
    for (i, (id, parent, text, end, agent)) in plan.into_iter().enumerate() {
        let events = run(id, parent, text, end);
        let (head, tail) = events.split_at(2);
        for (j, part) in [head, tail].into_iter().enumerate() {
            let mut req = AppendRequest::new(part.to_vec()).agent(agent);
            req.received_at = Some(Timestamp(
                1_700_000_000_000_000 + (i * 2 + j) as i64 * 1_000_001,
            ));
            store.append(TENANT, thread, req).await.unwrap();
        }
    }
    for (agent, last) in [("research", "r5"), ("writer", "r4")] {
        let mut c = Channel::new(
            agent,
            format!(
                r#"{{"sessions":"server","lastRunId":"{last}","upstreamThreads":{{"r1":"up-{agent}-1"}}}}"#
            ),
        );
        c.updated_at = Timestamp(1_700_000_100_000_000);
        store.put_channel(TENANT, thread, c).await.unwrap();
    }
}

/// Everything an import must restore exactly.
#[derive(Debug, PartialEq)]
pub struct Picture {
    pub events: Vec<(u64, i64, serde_json::Value)>,
    pub runs: Vec<RunRecord>,
    pub channels: Vec<Channel>,
    pub conversations: Vec<(String, serde_json::Value)>,
}

pub async fn picture(store: &Store, thread: &str) -> Picture {
    let mut events = Vec::new();
    let mut s = store.read_stream(TENANT, thread, 1);
    while let Some(e) = s.next().await {
        let e = e.unwrap();
        let v: serde_json::Value = serde_json::from_str(e.event.json()).unwrap();
        events.push((e.seq, e.received_at.0, v));
    }
    drop(s);
    let mut runs = store
        .list_runs(
            TENANT,
            &agui_store::RunFilter {
                thread_id: Some(thread.to_owned()),
                limit: agui_store::MAX_PAGE,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .runs;
    runs.sort_by_key(|r| r.first_seq);
    for r in &mut runs {
        r.thread_id = String::new();
    }
    let mut channels = store.channels(TENANT, thread).await.unwrap();
    channels.sort_by(|a, b| a.agent.cmp(&b.agent));
    let mut conversations = Vec::new();
    for r in &runs {
        if r.status == agui_store::RunStatus::Running {
            continue;
        }
        let c = store.restore(TENANT, thread, &r.run_id).await.unwrap();
        conversations.push((r.run_id.clone(), serde_json::from_str(&c.json).unwrap()));
    }
    Picture {
        events,
        runs,
        channels,
        conversations,
    }
}

/// A thread's session document, whole, as text.
pub async fn export_text(store: &Store, thread: &str, layout: agui_session::Layout) -> String {
    let opts = agui_session::ExportOptions {
        layout,
        progress: None,
    };
    let mut s = agui_session::export(store.clone(), TENANT.into(), thread.into(), opts)
        .await
        .unwrap();
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c.unwrap());
    }
    String::from_utf8(out).unwrap()
}

pub fn opts(agents: Option<&[&str]>) -> agui_session::ImportOptions {
    agui_session::ImportOptions {
        tenant: TENANT.into(),
        agents: agents.map(|a| a.iter().map(|s| (*s).to_owned()).collect()),
        ..Default::default()
    }
}

pub async fn import_text(
    store: &Store,
    text: &str,
    opts: agui_session::ImportOptions,
) -> Result<agui_session::ImportReport, agui_session::SessionError> {
    let src: Arc<dyn agui_session::Source> = Arc::new(bytes::Bytes::from(text.as_bytes().to_vec()));
    agui_session::import(store.clone(), src, opts).await
}
