//! `POST /agents/{name}/run`: forward a run upstream, store every event,
//! then stream it to the client with `id: <thread seq>`.
//!
//! The run is driven by its own task, not by the client's connection: when
//! the client goes away the run goes on and is stored to its end. Each batch
//! of upstream events is appended to the store first and only then sent to
//! the client, so no client ever sees an event the store does not hold.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use agui_protocol::{Event, EventType};
use agui_store::{AppendRequest, ErrorKind, RunFilter, RunStatus};
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::config::{AgentConfig, SessionMode, Upstream};
use crate::error::ApiError;
use crate::gateway::{AgentOpt, Gateway, RunSlot, in_flight_error, run_error, store_error};
use crate::input::{self, RunInput};
use crate::sse::{DecodeError, SseDecoder, put_frame};
use crate::tracker::OpenItems;

/// Reads a request body up to the limit, with a JSON 413 beyond it.
pub(crate) async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is larger than {limit} bytes"),
        )
    })
}

/// An SSE response over pre-framed chunks.
pub(crate) fn sse_response(body: Body) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        body,
    )
        .into_response()
}

/// The handler.
pub async fn run_handler(
    State(gw): State<Arc<Gateway>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let tenant = gw.tenant(&headers)?;
    let agent = gw
        .agents
        .get(&name)
        .cloned()
        .ok_or_else(|| unknown_agent(&name))?;
    if gw.shutting_down.is_cancelled() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the gateway is shutting down",
        ));
    }
    let bytes = read_body(body, gw.config.limits.max_body_bytes).await?;
    let mut input = input::parse(&bytes)?;
    let slot = gw
        .reserve(
            &tenant,
            &input.thread_id,
            &input.run_id,
            input.parent_run_id.as_deref(),
        )
        .await?;
    let prep = prepare(&gw, &tenant, &agent, &mut input).await?;
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let ctx = RunCtx {
        gw: gw.clone(),
        tenant,
        agent,
        thread: input.thread_id.clone(),
        run_id: input.run_id.clone(),
        parent: prep.parent,
        input_json: input.to_json(),
        head: prep.head,
        _slot: slot,
    };
    gw.runs.spawn(drive(ctx, tx));
    let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(Ok::<_, Infallible>);
    Ok(sse_response(Body::from_stream(stream)))
}

pub(crate) fn unknown_agent(name: &str) -> ApiError {
    ApiError::not_found(format!("no agent named {name:?} is configured"))
}

struct Prepared {
    parent: Option<String>,
    head: u64,
}

/// Checks the thread and resolves lineage (and, in server mode, the
/// conversation to forward).
async fn prepare(
    gw: &Gateway,
    tenant: &str,
    agent: &AgentConfig,
    input: &mut RunInput,
) -> Result<Prepared, ApiError> {
    let store = &gw.store;
    let thread = input.thread_id.clone();
    let head = match store.thread(tenant, &thread).await {
        Ok(info) => info.last_seq,
        Err(e) if e.kind() == ErrorKind::NotFound => 0,
        Err(e) => return Err(store_error(e)),
    };
    let mut parent = input.parent_run_id.clone();
    if head > 0 {
        let runs = all_runs(gw, tenant, &thread).await?;
        if let Some(r) = runs.iter().find(|r| r.status == RunStatus::Running) {
            return Err(in_flight_error(&r.run_id));
        }
        if runs.iter().any(|r| r.run_id == input.run_id) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "run_exists",
                format!(
                    "run {:?} already exists in this thread; use a new runId",
                    input.run_id
                ),
            ));
        }
        match &parent {
            Some(p) if !runs.iter().any(|r| &r.run_id == p) => {
                return Err(unknown_parent(p));
            }
            Some(_) => {}
            None => parent = runs.last().map(|r| r.run_id.clone()),
        }
    } else if let Some(p) = &parent {
        return Err(unknown_parent(p));
    }
    if let (SessionMode::Server, Some(p)) = (agent.sessions, &parent) {
        let restored = store
            .restore(tenant, &thread, p)
            .await
            .map_err(store_error)?;
        let conv: serde_json::Value = serde_json::from_str(&restored.json).unwrap_or_default();
        let msgs = conv
            .get("messages")
            .and_then(|m| m.as_array())
            .cloned()
            .unwrap_or_default();
        input.merge_stored(&msgs, conv.get("state"));
    }
    Ok(Prepared { parent, head })
}

fn unknown_parent(p: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "unknown_parent_run",
        format!("parentRunId {p:?} is not a run of this thread"),
    )
}

/// Every run of a thread, oldest first.
pub(crate) async fn all_runs(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
) -> Result<Vec<agui_store::RunRecord>, ApiError> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = gw
            .store
            .list_runs(
                tenant,
                &RunFilter {
                    thread_id: Some(thread.to_owned()),
                    limit: agui_store::MAX_PAGE,
                    cursor: cursor.take(),
                    ..RunFilter::default()
                },
            )
            .await
            .map_err(store_error)?;
        out.extend(page.runs);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    out.sort_by_key(|r| r.first_seq);
    Ok(out)
}

struct RunCtx {
    gw: Arc<Gateway>,
    tenant: String,
    agent: AgentConfig,
    thread: String,
    run_id: String,
    parent: Option<String>,
    input_json: String,
    head: u64,
    _slot: RunSlot,
}

/// Why the gateway closes a run itself.
struct Close {
    code: &'static str,
    message: String,
}

impl Close {
    fn new(code: &'static str, message: impl Into<String>) -> Close {
        Close {
            code,
            message: message.into(),
        }
    }
}

struct RunState {
    seq: u64,
    started: bool,
    ended: bool,
    count: u64,
    open: OpenItems,
    client: Option<mpsc::UnboundedSender<Bytes>>,
    store_failed: bool,
}

#[derive(Deserialize)]
struct StartedView<'a> {
    #[serde(rename = "parentRunId", borrow, default, deserialize_with = "present")]
    parent_run_id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    input: Option<&'a RawValue>,
}

/// `Some` for any field present, `null` included (serde's `Option` would
/// read a `null` as `None`, hiding a key that is there).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

impl RunCtx {
    fn synthetic_started(&self) -> Event {
        let mut text = format!(
            "{{\"type\":\"RUN_STARTED\",\"threadId\":{},\"runId\":{}",
            json_str(&self.thread),
            json_str(&self.run_id)
        );
        if let Some(p) = &self.parent {
            text.push_str(",\"parentRunId\":");
            text.push_str(&json_str(p));
        }
        text.push_str(",\"input\":");
        text.push_str(&self.input_json);
        text.push('}');
        Event::from_json_string(text).unwrap_or_else(|_| run_error("internal", "internal error"))
    }

    /// Adds `parentRunId` and `input` to the upstream's `RUN_STARTED` when it
    /// omitted them, keeping its text otherwise.
    fn complete_started(&self, event: Event) -> Event {
        let Ok(view) = event.view::<StartedView>() else {
            return event;
        };
        // A field present as `null` counts as omitted (AG-UI's optional
        // fields may be sent either way).
        let missing = |v: Option<&RawValue>| v.is_none_or(|r| r.get() == "null");
        let add_parent = missing(view.parent_run_id) && self.parent.is_some();
        let add_input = missing(view.input);
        if !add_parent && !add_input {
            return event;
        }
        if view.parent_run_id.is_some() && add_parent || view.input.is_some() && add_input {
            return self.replace_null_fields(event, add_parent, add_input);
        }
        let json = event.json();
        let Some(body) = json.strip_suffix('}') else {
            return event;
        };
        let mut text = String::with_capacity(json.len() + self.input_json.len() + 64);
        text.push_str(body);
        if let (true, Some(p)) = (add_parent, &self.parent) {
            text.push_str(",\"parentRunId\":");
            text.push_str(&json_str(p));
        }
        if add_input {
            text.push_str(",\"input\":");
            text.push_str(&self.input_json);
        }
        text.push('}');
        Event::from_json_string(text).unwrap_or(event)
    }
}

impl RunCtx {
    /// [`RunCtx::complete_started`] when a field to fill is present as
    /// `null`: rewrites the object, keeping the other fields and their order.
    fn replace_null_fields(&self, event: Event, add_parent: bool, add_input: bool) -> Event {
        let Ok(mut map) =
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(event.json())
        else {
            return event;
        };
        if add_parent && let Some(p) = &self.parent {
            map.insert("parentRunId".into(), serde_json::Value::String(p.clone()));
        }
        if add_input {
            match serde_json::from_str::<serde_json::Value>(&self.input_json) {
                Ok(v) => {
                    map.insert("input".into(), v);
                }
                Err(_) => return event,
            }
        }
        Event::from_serialize(&map).unwrap_or(event)
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// The upstream's response body as a byte stream.
type ByteStream = BoxStream<'static, Result<Bytes, String>>;

async fn open_upstream(ctx: &RunCtx) -> Result<ByteStream, Close> {
    match &ctx.agent.upstream {
        Upstream::Demo => crate::demo::stream_for(ctx.input_json.as_bytes())
            .map(|s| s.map(Ok::<_, String>).boxed())
            .map_err(|e| {
                Close::new(
                    "upstream_error",
                    format!("the demo agent refused the input: {}", e.message),
                )
            }),
        Upstream::Http(url) => {
            let started = Instant::now();
            let req = ctx
                .gw
                .http
                .post(url)
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "text/event-stream")
                .body(ctx.input_json.clone())
                .send();
            let idle = ctx.gw.config.limits.upstream_idle_timeout;
            let resp = match tokio::time::timeout(idle, req).await {
                Err(_) => {
                    return Err(Close::new(
                        "upstream_timeout",
                        format!(
                            "the upstream agent sent no response within {} ms",
                            idle.as_millis()
                        ),
                    ));
                }
                Ok(Err(e)) if e.is_connect() => {
                    return Err(Close::new(
                        "upstream_unreachable",
                        "the upstream agent cannot be reached",
                    ));
                }
                Ok(Err(e)) if e.is_timeout() => {
                    return Err(Close::new(
                        "upstream_timeout",
                        "connecting to the upstream agent timed out",
                    ));
                }
                Ok(Err(_)) => {
                    return Err(Close::new(
                        "upstream_error",
                        "the request to the upstream agent failed",
                    ));
                }
                Ok(Ok(r)) => r,
            };
            ctx.gw.metrics.upstream_ttfb.observe(started.elapsed());
            if !resp.status().is_success() {
                return Err(Close::new(
                    "upstream_status",
                    format!(
                        "the upstream agent answered HTTP {}",
                        resp.status().as_u16()
                    ),
                ));
            }
            Ok(resp
                .bytes_stream()
                .map(|r| r.map_err(|e| e.to_string()))
                .boxed())
        }
    }
}

async fn drive(ctx: RunCtx, tx: mpsc::UnboundedSender<Bytes>) {
    let gw = ctx.gw.clone();
    let mut st = RunState {
        seq: ctx.head,
        started: false,
        ended: false,
        count: 0,
        open: OpenItems::default(),
        client: Some(tx),
        store_failed: false,
    };
    tracing::info!(agent = %ctx.agent.name, thread = %ctx.thread, run = %ctx.run_id, "run started");
    let outcome = tokio::select! {
        r = open_upstream(&ctx) => r,
        _ = gw.close_runs.cancelled() => Err(Close::new("shutdown", "the gateway shut down before the upstream answered")),
    };
    let close = match outcome {
        Err(c) => Some(c),
        Ok(body) => pump(&ctx, &mut st, body).await,
    };
    if let Some(c) = close {
        if c.code != "shutdown" {
            gw.metrics.upstream_errors.fetch_add(1, Relaxed);
        }
        tracing::warn!(thread = %ctx.thread, run = %ctx.run_id, code = c.code, "{}", c.message);
        finish_with_error(&ctx, &mut st, c).await;
        gw.metrics.runs_closed_by_gateway.fetch_add(1, Relaxed);
    }
    tracing::info!(thread = %ctx.thread, run = %ctx.run_id, events = st.count, "run ended");
}

/// Reads the upstream to its end. Returns why the gateway must close the
/// run, or `None` when the upstream ended it.
/// Chunks read ahead of the store at most, per run.
const READ_AHEAD_CHUNKS: usize = 256;

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reads the upstream on a task of its own, ahead of the store: while an
/// append is in flight the next chunks keep arriving, and the pump then takes
/// all of them into one append. (Polled directly, an HTTP body reads only
/// when asked, so nothing would be waiting after an append and every event
/// would cost one append of its own.) The task ends with the returned stream.
fn read_ahead(mut body: ByteStream) -> ByteStream {
    let (tx, rx) = mpsc::channel(READ_AHEAD_CHUNKS);
    let task = tokio::spawn(async move {
        while let Some(item) = body.next().await {
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                break;
            }
        }
    });
    let guard = AbortOnDrop(task.abort_handle());
    tokio_stream::wrappers::ReceiverStream::new(rx)
        .map(move |item| {
            let _keep = &guard;
            item
        })
        .boxed()
}

async fn pump(ctx: &RunCtx, st: &mut RunState, body: ByteStream) -> Option<Close> {
    let mut body = read_ahead(body);
    let limits = &ctx.gw.config.limits;
    let mut decoder = SseDecoder::new(limits.max_event_bytes);
    let mut events: Vec<Event> = Vec::new();
    let idle = limits.upstream_idle_timeout;
    loop {
        let next = tokio::select! {
            n = tokio::time::timeout(idle, body.next()) => n,
            _ = ctx.gw.close_runs.cancelled() => return Some(Close::new("shutdown", "the gateway shut down while the run was in flight")),
        };
        let mut done = false;
        match next {
            Err(_) => {
                return Some(Close::new(
                    "upstream_timeout",
                    format!("the upstream agent was silent for {} ms", idle.as_millis()),
                ));
            }
            Ok(Some(Err(_))) => {
                return Some(Close::new(
                    "upstream_error",
                    "the connection to the upstream agent failed mid-stream",
                ));
            }
            Ok(Some(Ok(chunk))) => {
                if let Err(e) = decoder.push(&chunk, &mut events) {
                    return Some(decode_close(e, st, ctx, &mut events).await);
                }
                // Take whatever else arrived meanwhile, to store it in one batch.
                for _ in 0..READ_AHEAD_CHUNKS {
                    match body.next().now_or_never() {
                        Some(Some(Ok(more))) => {
                            if let Err(e) = decoder.push(&more, &mut events) {
                                return Some(decode_close(e, st, ctx, &mut events).await);
                            }
                        }
                        Some(Some(Err(_))) => {
                            flush_events(ctx, st, &mut events).await;
                            return Some(Close::new(
                                "upstream_error",
                                "the connection to the upstream agent failed mid-stream",
                            ));
                        }
                        Some(None) => {
                            done = true;
                            break;
                        }
                        None => break,
                    }
                }
            }
            Ok(None) => done = true,
        }
        let finished = if done {
            decoder.finish(&mut events)
        } else {
            Ok(())
        };
        if let Err(e) = finished {
            return Some(decode_close(e, st, ctx, &mut events).await);
        }
        if let Some(c) = flush_events(ctx, st, &mut events).await {
            return Some(c);
        }
        if st.ended {
            return None;
        }
        if done {
            return Some(Close::new(
                "upstream_closed",
                "the upstream agent closed the stream before ending the run",
            ));
        }
    }
}

async fn decode_close(
    e: DecodeError,
    st: &mut RunState,
    ctx: &RunCtx,
    events: &mut Vec<Event>,
) -> Close {
    // Keep the good events decoded before the bad one.
    flush_events(ctx, st, events).await;
    match e {
        DecodeError::TooLarge { limit } => Close::new(
            "event_too_large",
            format!("the upstream agent sent an event larger than {limit} bytes"),
        ),
        DecodeError::NotAnEvent { index, .. } | DecodeError::NotUtf8 { index } => Close::new(
            "upstream_garbage",
            format!("the upstream agent sent frame {index}, which is not an AG-UI event"),
        ),
    }
}

/// Checks, completes and stores decoded events, then sends them.
async fn flush_events(ctx: &RunCtx, st: &mut RunState, events: &mut Vec<Event>) -> Option<Close> {
    if events.is_empty() || st.ended {
        events.clear();
        return None;
    }
    let mut batch = Vec::with_capacity(events.len() + 1);
    let mut close = None;
    for e in events.drain(..) {
        if st.ended {
            break; // anything after the run's end is not part of it
        }
        if st.count >= ctx.gw.config.limits.max_events_per_run {
            close = Some(Close::new(
                "event_limit",
                format!(
                    "the run exceeded {} events",
                    ctx.gw.config.limits.max_events_per_run
                ),
            ));
            break;
        }
        let e = if !st.started {
            st.started = true;
            if *e.event_type() == EventType::RunStarted {
                ctx.complete_started(e)
            } else {
                batch.push(ctx.synthetic_started());
                st.count += 1;
                e
            }
        } else if *e.event_type() == EventType::RunStarted {
            close = Some(Close::new(
                "upstream_protocol",
                "the upstream agent started a second run in the same stream",
            ));
            break;
        } else {
            e
        };
        if e.event_type().is_run_terminal() {
            st.ended = true;
        }
        st.open.track(&e);
        st.count += 1;
        batch.push(e);
    }
    if !batch.is_empty() {
        store_and_send(ctx, st, batch).await;
    }
    if st.store_failed {
        return Some(Close::new(
            "store_error",
            "the gateway could not store the run",
        ));
    }
    close
}

/// Appends a batch, then sends it to the client (if still connected).
async fn store_and_send(ctx: &RunCtx, st: &mut RunState, batch: Vec<Event>) {
    if st.store_failed {
        return;
    }
    let gw = &ctx.gw;
    let t0 = Instant::now();
    let bytes: usize = batch.iter().map(Event::len_bytes).sum();
    let req = AppendRequest::new(batch.clone())
        .expect_seq(st.seq)
        .agent_opt(Some(ctx.agent.name.clone()));
    match gw.store.append(&ctx.tenant, &ctx.thread, req).await {
        Ok(appended) => {
            gw.metrics.append_latency.observe(t0.elapsed());
            gw.metrics
                .events_stored
                .fetch_add(batch.len() as u64, Relaxed);
            gw.metrics.bytes_stored.fetch_add(bytes as u64, Relaxed);
            st.seq = appended.last_seq;
            let mut buf = Vec::with_capacity(bytes + batch.len() * 24);
            for (e, seq) in batch.iter().zip(appended.seqs()) {
                put_frame(&mut buf, e, Some(seq));
            }
            send(st, Bytes::from(buf));
            for e in &batch {
                match e.event_type() {
                    EventType::RunFinished => {
                        gw.metrics.runs_finished.fetch_add(1, Relaxed);
                    }
                    EventType::RunError => {
                        gw.metrics.runs_error.fetch_add(1, Relaxed);
                    }
                    _ => {}
                }
            }
        }
        Err(e) => {
            gw.metrics.store_errors.fetch_add(1, Relaxed);
            tracing::error!(thread = %ctx.thread, run = %ctx.run_id, error = %e, source = ?std::error::Error::source(&e), "cannot store the run's events");
            st.store_failed = true;
        }
    }
}

fn send(st: &mut RunState, bytes: Bytes) {
    if let Some(tx) = &st.client
        && tx.send(bytes).is_err()
    {
        // The client went away; the run goes on.
        st.client = None;
    }
}

/// Ends what is open and records a `RUN_ERROR`; the client receives it.
async fn finish_with_error(ctx: &RunCtx, st: &mut RunState, close: Close) {
    if st.ended {
        return;
    }
    let mut batch = Vec::new();
    if !st.started {
        st.started = true;
        batch.push(ctx.synthetic_started());
    }
    batch.extend(st.open.closers());
    batch.push(run_error(close.code, &close.message));
    st.ended = true;
    if st.store_failed {
        // Nothing more can be stored: tell the client what happened, unnumbered.
        let mut buf = Vec::new();
        for e in &batch {
            if *e.event_type() != EventType::RunStarted {
                put_frame(&mut buf, e, None);
            }
        }
        send(st, Bytes::from(buf));
        return;
    }
    store_and_send(ctx, st, batch).await;
    if st.store_failed {
        let e = run_error("store_error", "the gateway could not store the run");
        send(st, crate::sse::frame(&e, None));
    }
}

/// How long a stream waits before checking again whether it should end.
pub(crate) const POLL: Duration = Duration::from_millis(500);
