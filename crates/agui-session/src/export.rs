//! Export: a thread of a store as a session document, streamed.

use std::collections::BTreeSet;
use std::sync::Arc;

use agui_store::{RunFilter, RunRecord, Store};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::error::SessionError;
use crate::record::{Checksum, EndRec, EventsMode, FORMAT, Header, PROTOCOL, RunRec};

/// NDJSON (one record a line) or one JSON array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// One JSON document: an array of the records.
    #[default]
    Json,
    /// One record a line.
    Ndjson,
}

/// What to export.
#[derive(Clone, Default)]
pub struct ExportOptions {
    /// The layout.
    pub layout: Layout,
    /// Called with the number of events written so far (every 1,000 and at
    /// the end).
    pub progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
}

/// Bytes handed out per chunk, about.
const CHUNK: usize = 256 * 1024;

struct Out {
    tx: mpsc::Sender<Result<Bytes, SessionError>>,
    buf: Vec<u8>,
    sum: Checksum,
    layout: Layout,
    started: bool,
}

impl Out {
    async fn record(&mut self, text: &str) -> Result<(), ()> {
        self.sum.record(text);
        self.put(text).await
    }

    async fn put(&mut self, text: &str) -> Result<(), ()> {
        match self.layout {
            Layout::Ndjson => {
                self.buf.extend_from_slice(text.as_bytes());
                self.buf.push(b'\n');
            }
            Layout::Json => {
                self.buf
                    .extend_from_slice(if self.started { b",\n" } else { b"[\n" });
                self.started = true;
                self.buf.extend_from_slice(text.as_bytes());
            }
        }
        if self.buf.len() >= CHUNK {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), ()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        self.tx.send(Ok(chunk)).await.map_err(|_| ())
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Every run of a thread in log order.
pub(crate) async fn thread_runs(
    store: &Store,
    tenant: &str,
    thread: &str,
) -> Result<Vec<RunRecord>, SessionError> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list_runs(
                tenant,
                &RunFilter {
                    thread_id: Some(thread.to_owned()),
                    limit: agui_store::MAX_PAGE,
                    cursor: cursor.take(),
                    ..RunFilter::default()
                },
            )
            .await?;
        out.extend(page.runs);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    out.sort_by_key(|r| r.first_seq);
    Ok(out)
}

/// Exports a thread as a session document. The thread must exist
/// (`NotFound` otherwise, before any byte). The document is produced as
/// chunks of bytes, reading the events page by page: memory stays bounded
/// whatever the thread's size. Never in it: anything but the thread's own
/// events, runs and channels (no URL, header, token, tenant or
/// configuration).
pub async fn export(
    store: Store,
    tenant: String,
    thread: String,
    opts: ExportOptions,
) -> Result<BoxStream<'static, Result<Bytes, SessionError>>, SessionError> {
    store.thread(&tenant, &thread).await?;
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        let mut out = Out {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK + 64 * 1024),
            sum: Checksum::default(),
            layout: opts.layout,
            started: false,
        };
        if let Err(e) = write_all(&store, &tenant, &thread, &opts, &mut out).await {
            let _ = tx.send(Err(e)).await;
        }
    });
    Ok(tokio_stream::wrappers::ReceiverStream::new(rx).boxed())
}

async fn write_all(
    store: &Store,
    tenant: &str,
    thread: &str,
    opts: &ExportOptions,
    out: &mut Out,
) -> Result<(), SessionError> {
    // A receiver that went away ends the export quietly.
    macro_rules! put {
        ($e:expr) => {
            if $e.await.is_err() {
                return Ok(());
            }
        };
    }
    // A consistent cut of a live thread: the events up to the last run's
    // last event as listed (or the thread's head when it has no run).
    let head = store.thread(tenant, thread).await?.last_seq;
    let runs = thread_runs(store, tenant, thread).await?;
    let head = runs.last().map_or(head, |r| r.last_seq);
    let channels = store.channels(tenant, thread).await?;
    let participants: BTreeSet<String> = runs
        .iter()
        .filter_map(|r| r.agent.clone())
        .chain(channels.iter().map(|c| c.agent.clone()))
        .collect();
    let header = Header {
        kind: "header".into(),
        format: FORMAT.into(),
        protocol: PROTOCOL.into(),
        thread_id: thread.to_owned(),
        events: EventsMode::Lossless,
        participants: participants.into_iter().collect(),
    };
    let text = serde_json::to_string(&header).map_err(internal)?;
    put!(out.record(&text));
    for r in &runs {
        let rec = RunRec {
            kind: "run".into(),
            run_id: r.run_id.clone(),
            parent_run_id: r.parent_run_id.clone(),
            agent: r.agent.clone(),
            status: r.status.as_str().into(),
            started_at: r.started_at.0,
            finished_at: r.finished_at.map(|t| t.0),
            first_seq: r.first_seq,
            last_seq: r.last_seq,
        };
        let text = serde_json::to_string(&rec).map_err(internal)?;
        put!(out.record(&text));
    }
    let mut events = store.read_stream(tenant, thread, 1);
    let mut n = 0u64;
    let mut line = String::new();
    while let Some(e) = events.next().await {
        let e = e?;
        if e.seq > head {
            break;
        }
        line.clear();
        line.push_str("{\"kind\":\"event\",\"seq\":");
        line.push_str(&e.seq.to_string());
        line.push_str(",\"receivedAt\":");
        line.push_str(&e.received_at.0.to_string());
        line.push_str(",\"event\":");
        line.push_str(e.event.json());
        line.push('}');
        put!(out.record(&line));
        n += 1;
        if n.is_multiple_of(1000)
            && let Some(p) = &opts.progress
        {
            p(n);
        }
    }
    drop(events);
    for c in &channels {
        let state: &RawValue = serde_json::from_str(&c.state).map_err(|e| {
            SessionError::Store(
                agui_store::StoreError::corrupt("a stored channel state is not JSON")
                    .with_source(e),
            )
        })?;
        let text = format!(
            "{{\"kind\":\"channel\",\"agent\":{},\"updatedAt\":{},\"state\":{}}}",
            json_str(&c.agent),
            c.updated_at.0,
            state.get()
        );
        put!(out.record(&text));
    }
    let end = EndRec {
        kind: "end".into(),
        records: out.sum.records(),
        sha256: out.sum.hex(),
    };
    let text = serde_json::to_string(&end).map_err(internal)?;
    put!(out.put(&text));
    if out.layout == Layout::Json {
        out.buf.extend_from_slice(b"\n]\n");
    }
    put!(out.flush());
    if let Some(p) = &opts.progress {
        p(n);
    }
    Ok(())
}

fn internal(e: serde_json::Error) -> SessionError {
    SessionError::Store(agui_store::StoreError::internal("cannot write a record").with_source(e))
}
