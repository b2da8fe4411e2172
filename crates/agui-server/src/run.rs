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
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{AgentConfig, OnDisconnect, SessionMode, Upstream, UpstreamThread};
use crate::error::ApiError;
use crate::gateway::{AgentOpt, Gateway, RunSlot, in_flight_error, run_error, store_error};
use crate::input::{self, RunInput};
use crate::merge::{History, Messages};
use crate::sse::{put_frame, put_frame_around};
use crate::upstream::{Close, RunIds, UpstreamReader};

/// Reads a request body up to the size limit and within the body read
/// timeout: a JSON 413 beyond the size, 408 `body_timeout` beyond the time.
pub(crate) async fn read_body(gw: &Gateway, body: Body) -> Result<Bytes, ApiError> {
    let limit = gw.config.limits.max_body_bytes;
    let timeout = gw.config.limits.body_read_timeout;
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "the request body did not arrive within {} ms",
                timeout.as_millis()
            ),
        )),
        Ok(Err(e)) => {
            // A body over the limit, or a connection that broke mid-body.
            let mut too_large = false;
            let mut cause: Option<&dyn std::error::Error> = Some(&e);
            while let Some(c) = cause {
                too_large |= c.to_string().contains("length limit");
                cause = c.source();
            }
            if too_large {
                Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    format!("the request body is larger than {limit} bytes"),
                ))
            } else {
                Err(ApiError::bad_request(
                    "body_unreadable",
                    "the request body could not be read",
                ))
            }
        }
        Ok(Ok(b)) => Ok(b),
    }
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
    let Some(agent) = gw.agents.get(&name).cloned() else {
        // Name the thread too: on a thread imported without this agent
        // (restore case reduced), its runs are refused until it is configured.
        let bytes = read_body(&gw, body).await?;
        let thread = input::parse(&bytes).ok().map(|i| i.thread_id);
        return Err(unknown_agent_on(&name, thread.as_deref()));
    };
    if gw.shutting_down.is_cancelled() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the gateway is shutting down",
        ));
    }
    let bytes = read_body(&gw, body).await?;
    let input = input::parse(&bytes)?;
    let slot = gw
        .reserve(
            &tenant,
            &input.thread_id,
            &input.run_id,
            input.parent_run_id.as_deref(),
        )
        .await?;
    let prep = match prepare(&gw, &tenant, &agent, &input, slot.aside).await {
        Ok(p) => p,
        Err(e) => {
            slot.release().await;
            return Err(e);
        }
    };
    // The input the run would store in its `RUN_STARTED` (the gateway's own
    // when the upstream sends none or one that is refused) must be one the
    // official client accepts, or the stored log would fail it: checked
    // here, before anything is stored or sent upstream.
    let probe = RunIds {
        thread: input.thread_id.clone(),
        run: input.run_id.clone(),
        parent: prep.parent.clone(),
        input_json: prep.input_json,
        stored_input_json: prep.stored_input_json.clone(),
        upstream_thread: prep.upstream_thread.clone(),
    };
    if let Err(e) = agui_protocol::model::parse_event(&probe.synthetic_started()) {
        slot.release().await;
        let reason = e.to_string();
        let reason = reason.strip_prefix("RUN_STARTED: ").unwrap_or(&reason);
        let reason = reason.strip_prefix("input.").unwrap_or(reason);
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            format!("RunAgentInput {reason}"),
        ));
    }
    if slot.aside {
        gw.metrics.runs_aside.fetch_add(1, Relaxed);
        // Its fork of a per-branch upstream thread is recorded now, not only
        // at its end: should the process stop mid-run, the run still joins
        // (interrupted), and a run continuing it must go on under its fork.
        if let Some(branch) = prep.upstream_branch.as_deref() {
            crate::session::record_channel(
                &gw,
                &tenant,
                &input.thread_id,
                &agent,
                &input.run_id,
                Some((branch, prep.upstream_thread.as_str())),
            )
            .await;
        }
    }
    let (tx, rx) = crate::outbox::outbox(gw.config.limits.client_buffer_bytes);
    let upstream_headers = upstream_headers(&gw, &agent, &headers);
    let (log_tenant, log_thread) = slot.log();
    let ctx = RunCtx {
        gw: gw.clone(),
        log_tenant,
        log_thread,
        aside: slot.aside,
        tenant,
        upstream_headers,
        agent,
        thread: input.thread_id.clone(),
        run_id: input.run_id.clone(),
        parent: prep.parent,
        input_json: probe.input_json,
        stored_input_json: prep.stored_input_json,
        prelude: prep.prelude,
        upstream_thread: prep.upstream_thread,
        upstream_branch: prep.upstream_branch,
        head: prep.head,
        stop: slot.stop.clone(),
        slot: Some(slot),
    };
    gw.runs.spawn(drive(ctx, tx));
    let stream = rx.map(Ok::<_, Infallible>);
    Ok(sse_response(Body::from_stream(stream)))
}

/// The headers of the upstream request besides `Content-Type` and `Accept`:
/// the client's headers on the allow-lists (gateway-wide and the agent's),
/// then the agent's configured headers, which win over a forwarded one of
/// the same name. Values are marked sensitive so no debug output shows them.
pub(crate) fn upstream_headers(gw: &Gateway, agent: &AgentConfig, client: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in gw
        .config
        .forward_headers
        .iter()
        .chain(&agent.forward_headers)
    {
        if out.contains_key(name) {
            continue;
        }
        for v in client.get_all(name) {
            let mut v = v.clone();
            v.set_sensitive(true);
            out.append(name.clone(), v);
        }
    }
    for (name, _) in &agent.upstream_headers.0 {
        out.remove(name);
    }
    for (name, value) in &agent.upstream_headers.0 {
        out.append(name.clone(), value.clone());
    }
    out
}

pub(crate) fn unknown_agent(name: &str) -> ApiError {
    unknown_agent_on(name, None)
}

/// 404 `unknown_agent`, naming the thread when the request named one.
pub(crate) fn unknown_agent_on(name: &str, thread: Option<&str>) -> ApiError {
    let message = match thread {
        Some(t) => format!(
            "no agent named {name:?} is configured on this gateway; thread {t:?} cannot run it until it is"
        ),
        None => format!("no agent named {name:?} is configured"),
    };
    ApiError::new(StatusCode::NOT_FOUND, "unknown_agent", message)
}

struct Prepared {
    /// The thread id the upstream sees.
    upstream_thread: String,
    /// With per-branch upstream threads: the branch's first run, under which
    /// the agent's channel records `upstream_thread`.
    upstream_branch: Option<String>,
    parent: Option<String>,
    head: u64,
    /// The exact input sent upstream.
    input_json: Arc<str>,
    /// `RUN_STARTED.input` as stored: messages normalized against the
    /// branch history.
    stored_input_json: String,
    /// Snapshots for a thin client, sent after `RUN_STARTED`.
    prelude: Option<Bytes>,
}

/// Checks the thread and resolves lineage (and, in server mode, the
/// conversation to forward).
async fn prepare(
    gw: &Gateway,
    tenant: &str,
    agent: &AgentConfig,
    input: &RunInput,
    aside: bool,
) -> Result<Prepared, ApiError> {
    let store = &gw.store;
    let thread = input.thread_id.clone();
    let began = Instant::now();
    let mut head = match store.thread(tenant, &thread).await {
        Ok(info) => info.last_seq,
        Err(e) if e.kind() == ErrorKind::NotFound => 0,
        Err(e) => return Err(store_error(e)),
    };
    let mut parent = input.parent_run_id.clone();
    let mut runs = Vec::new();
    if head > 0 {
        runs = all_runs(gw, tenant, &thread).await?;
        if !aside && let Some(r) = runs.iter().find(|r| r.status == RunStatus::Running) {
            return Err(in_flight_error(&r.run_id));
        }
        if !aside && close_interrupted_tail(gw, tenant, &thread, &runs, head).await? {
            head = store
                .thread(tenant, &thread)
                .await
                .map_err(store_error)?
                .last_seq;
        }
        if runs.iter().any(|r| r.run_id == input.run_id) {
            return Err(run_exists(&input.run_id));
        }
        match &parent {
            Some(p) if !runs.iter().any(|r| &r.run_id == p) => {
                // A run set aside is a parent for a run set aside in turn
                // (which joins after it), once it ended.
                if !aside || !crate::aside::is_ended(gw, tenant, &thread, p).await? {
                    return Err(crate::aside::unknown_parent(gw, tenant, &thread, p).await);
                }
            }
            Some(_) => {}
            None => parent = runs.last().map(|r| r.run_id.clone()),
        }
    } else if let Some(p) = &parent {
        return Err(crate::aside::unknown_parent(gw, tenant, &thread, p).await);
    }
    // A run set aside that has not joined the log yet holds its id too:
    // stored, or in flight in this process before it stored anything.
    if !aside
        && gw
            .aside_here(tenant, &thread, Some(&input.run_id))
            .is_some()
        || crate::aside::holds(gw, tenant, &thread, &input.run_id).await?
    {
        return Err(run_exists(&input.run_id));
    }
    let head = if aside { 0 } else { head };
    let looked_up = began.elapsed();
    let mut restored_in = Duration::ZERO;
    // The branch history the run continues (empty for a thread's first run),
    // read in place: never parsed into a tree (see `merge`).
    let history = match &parent {
        Some(p) => {
            let restored = crate::history::restore(gw, tenant, &thread, p).await?;
            restored_in = began.elapsed().saturating_sub(looked_up);
            History::read(restored.json).map_err(|e| {
                tracing::error!(error = %e, thread = %thread, run = %p, "cannot continue a branch");
                ApiError::store()
            })?
        }
        None => History::empty(),
    };
    // Per-branch upstream threads: a fork goes upstream under an id of its
    // own, with its branch's whole history.
    let (upstream_thread, fork, upstream_branch) = match agent.upstream_thread {
        UpstreamThread::Shared => (thread.clone(), false, None),
        UpstreamThread::PerBranch => {
            let recorded =
                crate::session::recorded_upstream_threads(gw, tenant, &thread, &agent.name).await;
            let starts = recorded.keys().map(String::as_str).collect();
            let new = crate::upstream_thread::for_new_run(
                &thread,
                &runs,
                &starts,
                &input.run_id,
                parent.as_deref(),
                aside,
            );
            // A branch this agent's channel knows under another upstream id
            // (the thread was imported under a new id): the upstream has
            // never seen this one, so it gets the whole history, as a fork.
            let fork = new.fork || recorded.get(&new.branch).is_some_and(|r| *r != new.id);
            (new.id, fork, Some(new.branch))
        }
    };
    let mut prelude = None;
    let msgs = Messages::new(&history, input.messages());
    let client = msgs.client();
    // The messages forwarded upstream, and the stored state to forward with
    // them (server-managed sessions, when the client sent none).
    let mut forwarded = None;
    let mut state = None;
    if fork && agent.sessions == SessionMode::Client {
        forwarded = Some(msgs.merge(&client));
    }
    if agent.sessions == SessionMode::Server && parent.is_some() {
        let merged = msgs.merge(&client);
        let same_order = merged.len() == client.len()
            && merged
                .iter()
                .zip(&client)
                .all(|(&m, &c)| msgs.id(m) == msgs.id(c));
        if !same_order {
            prelude = Some(thin_client_prelude(&msgs.to_json(&merged)));
        }
        forwarded = Some(merged);
        if input.state_is_empty() {
            state = history.state();
        }
    }
    let forwarded = forwarded.unwrap_or(client);
    // What RUN_STARTED records: only the messages the branch history lacks.
    let recorded = msgs.to_json(&msgs.normalize(&forwarded));
    let mut replace = vec![("messages", recorded.as_str())];
    replace.extend(state.map(|s| ("state", s)));
    let stored_input_json = input.to_json_with(&replace);
    let forwarded = msgs.to_json(&forwarded);
    replace[0].1 = &forwarded;
    let upstream_thread_json = serde_json::to_string(&upstream_thread).unwrap_or_default();
    if upstream_thread != thread {
        replace.push(("threadId", &upstream_thread_json));
    }
    let input_json = Arc::<str>::from(input.to_json_with(&replace));
    tracing::debug!(
        thread = %thread,
        run = %input.run_id,
        history_messages = history.len(),
        lookup_us = looked_up.as_micros() as u64,
        restore_us = restored_in.as_micros() as u64,
        total_us = began.elapsed().as_micros() as u64,
        "run input prepared"
    );
    Ok(Prepared {
        upstream_thread,
        upstream_branch,
        parent,
        head,
        input_json,
        stored_input_json,
        prelude,
    })
}

/// Ends the thread's last run in its log when recovery marked it
/// interrupted but could not close it yet (the store failed the close,
/// which is tried again in the background): the new run's `RUN_STARTED`
/// would otherwise follow a run without an end, leaving it so for good and
/// the thread's log invalid. One read of the thread's last event when the
/// last run is interrupted; true when this call appended the close.
async fn close_interrupted_tail(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    runs: &[agui_store::RunRecord],
    head: u64,
) -> Result<bool, ApiError> {
    let Some(last) = runs.iter().max_by_key(|r| r.last_seq) else {
        return Ok(false);
    };
    if last.status != RunStatus::Interrupted
        || !gw
            .left_without_end(tenant, last, head)
            .await
            .map_err(store_error)?
    {
        return Ok(false);
    }
    let closed = gw
        .close_one_interrupted(tenant, thread, &last.run_id)
        .await
        .map_err(store_error)?;
    if closed {
        tracing::info!(thread = %thread, run = %last.run_id, "an interrupted run is closed before the thread's next run");
    }
    Ok(closed)
}

/// What a client that sent less than the conversation (a thin client in
/// server-session mode) gets right after `RUN_STARTED`: an empty
/// `MESSAGES_SNAPSHOT`, then one of the merged conversation. The official
/// clients keep the local order of messages a snapshot lists and append the
/// others, so clearing first puts the conversation in its stored order. Sent
/// to this client only (unnumbered, not stored): the stored log already
/// holds the conversation.
fn thin_client_prelude(merged: &str) -> Bytes {
    let mut buf = Vec::with_capacity(merged.len() + 96);
    for messages in ["[]", merged] {
        if let Err(e) = put_frame_around(&mut buf, "MESSAGES_SNAPSHOT", "messages", messages) {
            tracing::error!(error = %e, "the merged conversation is not an event");
        }
    }
    Bytes::from(buf)
}

pub(crate) fn unknown_parent(p: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "unknown_parent_run",
        format!("parentRunId {p:?} is not a run of this thread"),
    )
}

/// 409 `run_exists`.
pub(crate) fn run_exists(run: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "run_exists",
        format!("run {run:?} already exists in this thread; use a new runId"),
    )
}

/// Every run of a thread, oldest first.
pub(crate) async fn all_runs(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
) -> Result<Vec<agui_store::RunRecord>, ApiError> {
    let filter = RunFilter {
        thread_id: Some(thread.to_owned()),
        ..RunFilter::default()
    };
    let mut out = every_run(gw, tenant, filter).await.map_err(store_error)?;
    out.sort_by_key(|r| r.first_seq);
    Ok(out)
}

/// Every run of the tenant `filter` keeps, page after page (its `limit`
/// and `cursor` are the pager's).
pub(crate) async fn every_run(
    gw: &Gateway,
    tenant: &str,
    mut filter: RunFilter,
) -> Result<Vec<agui_store::RunRecord>, agui_store::StoreError> {
    let mut out = Vec::new();
    filter.limit = agui_store::MAX_PAGE;
    filter.cursor = None;
    loop {
        let page = gw.store.list_runs(tenant, &filter).await?;
        out.extend(page.runs);
        match page.next_cursor {
            Some(c) => filter.cursor = Some(c),
            None => return Ok(out),
        }
    }
}

pub(crate) struct RunCtx {
    pub(crate) gw: Arc<Gateway>,
    pub(crate) tenant: String,
    /// Where the run's events are written: the thread, or for a run set
    /// aside (see [`crate::aside`]) its aside tenant and thread.
    pub(crate) log_tenant: String,
    pub(crate) log_thread: String,
    /// The run is set aside: its frames carry no `id` (its sequence numbers
    /// are its aside thread's, not the thread's).
    pub(crate) aside: bool,
    /// Forwarded and configured headers for the upstream request (secret).
    pub(crate) upstream_headers: HeaderMap,
    pub(crate) agent: AgentConfig,
    pub(crate) thread: String,
    pub(crate) run_id: String,
    pub(crate) parent: Option<String>,
    /// The exact input sent upstream (shared with the upstream reader's ids
    /// and the request body: never copied).
    pub(crate) input_json: Arc<str>,
    /// `RUN_STARTED.input` as recorded (normalized messages).
    pub(crate) stored_input_json: String,
    /// Frames a thin client gets after `RUN_STARTED`.
    pub(crate) prelude: Option<Bytes>,
    /// The thread id the upstream sees (the user's unless per-branch).
    pub(crate) upstream_thread: String,
    /// With per-branch upstream threads: the branch's first run.
    pub(crate) upstream_branch: Option<String>,
    pub(crate) head: u64,
    /// Cancelled by `POST /threads/{id}/runs/{run}/stop` (or a dropped
    /// client under `on_disconnect = cancel`).
    pub(crate) stop: CancellationToken,
    /// Released before the client's stream ends.
    slot: Option<RunSlot>,
}

pub(crate) struct RunState {
    pub(crate) seq: u64,
    pub(crate) reader: UpstreamReader,
    pub(crate) client: Option<crate::outbox::Outbox>,
    pub(crate) store_failed: bool,
    /// Something else appended to the thread (a stop sent to another
    /// replica): the run is not ours to write any more.
    pub(crate) foreign: bool,
    /// The client got the run's end (stored or relayed).
    pub(crate) finished: bool,
    /// The client's stream was cut: it fell too far behind.
    pub(crate) client_cut: bool,
    /// What is stored now is the gateway's end of the run (counted by its
    /// writer), not the upstream's.
    pub(crate) gateway_end: bool,
    /// Sequence numbers up to this one are (or are about to be) ours.
    pub(crate) own_seq: Arc<std::sync::atomic::AtomicU64>,
    /// Frames for this client only, sent right after `RUN_STARTED`.
    pub(crate) prelude: Option<Bytes>,
}

impl RunCtx {
    pub(crate) fn ids(&self) -> RunIds {
        RunIds {
            thread: self.thread.clone(),
            run: self.run_id.clone(),
            parent: self.parent.clone(),
            input_json: self.input_json.clone(),
            stored_input_json: self.stored_input_json.clone(),
            upstream_thread: self.upstream_thread.clone(),
        }
    }
}

/// Shared JSON text as a request body.
struct SharedText(Arc<str>);

impl AsRef<[u8]> for SharedText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// The upstream's response body as a byte stream, and its content type.
type ByteStream = BoxStream<'static, Result<Bytes, String>>;

async fn open_upstream(ctx: &RunCtx) -> Result<(ByteStream, Option<String>), Close> {
    match &ctx.agent.upstream {
        Upstream::Demo => crate::demo::stream_for(ctx.input_json.as_bytes())
            .map(|s| {
                (
                    s.map(Ok::<_, String>).boxed(),
                    Some("text/event-stream".to_owned()),
                )
            })
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
                .client_for(&ctx.agent.name)
                .post(url)
                .headers(ctx.upstream_headers.clone())
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "text/event-stream")
                .body(Bytes::from_owner(SharedText(ctx.input_json.clone())))
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
            let content_type = resp
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            Ok((
                resp.bytes_stream()
                    .map(|r| r.map_err(|e| e.to_string()))
                    .boxed(),
                content_type,
            ))
        }
    }
}

async fn drive(mut ctx: RunCtx, tx: crate::outbox::Outbox) {
    let gw = ctx.gw.clone();
    let limits = &gw.config.limits;
    let own_seq = Arc::new(std::sync::atomic::AtomicU64::new(ctx.head));
    // A stop sent to another replica shows as events this run did not write.
    // A store no other process writes (`shared` false) needs no watch: in
    // this process only this run writes its thread while it is in flight
    // (a stop here cancels it directly), and should anything else write
    // it, the run's next append finds the head moved and the run ends as
    // stopped elsewhere. Measured: the watch's subscription cost 1,000
    // concurrent streams about 15% of their throughput (memory store).
    let _watch = if gw.store.shared() {
        crate::stop::watch_foreign(
            &ctx.gw,
            &ctx.log_tenant,
            &ctx.log_thread,
            ctx.head,
            own_seq.clone(),
            ctx.stop.clone(),
        )
        .await
    } else {
        None
    };
    if ctx.agent.on_disconnect == OnDisconnect::Cancel {
        let (client, stop) = (tx.clone(), ctx.stop.clone());
        ctx.gw.runs.spawn(async move {
            tokio::select! {
                _ = client.closed() => stop.cancel(),
                _ = stop.cancelled() => {}
            }
        });
    }
    let mut st = RunState {
        seq: ctx.head,
        reader: UpstreamReader::new(
            ctx.ids(),
            limits.max_event_bytes,
            limits.max_events_per_run,
            None,
        ),
        client: Some(tx),
        store_failed: false,
        foreign: false,
        finished: false,
        client_cut: false,
        gateway_end: false,
        own_seq,
        prelude: ctx.prelude.take(),
    };
    tracing::info!(agent = %ctx.agent.name, thread = %ctx.thread, run = %ctx.run_id, "run started");
    let outcome = tokio::select! {
        r = open_upstream(&ctx) => r,
        _ = gw.close_runs.cancelled() => Err(Close::new("shutdown", "the gateway shut down before the upstream answered")),
        _ = ctx.stop.cancelled() => Err(Close::new(STOPPED, "the run was stopped")),
    };
    let close = match outcome {
        Err(c) => Some(c),
        Ok((body, content_type)) => {
            st.reader = UpstreamReader::new(
                ctx.ids(),
                limits.max_event_bytes,
                limits.max_events_per_run,
                content_type,
            );
            pump(&ctx, &mut st, body).await
        }
    };
    ctx.stop.cancel(); // ends the watchers
    let close = match close {
        Some(c) if c.code == STOPPED && !st.foreign => {
            crate::stop::finish_cancelled(&ctx, &mut st).await;
            None
        }
        c => c,
    };
    if st.foreign && !st.finished {
        crate::stop::relay_foreign(&ctx, &mut st).await;
    }
    if let Some(c) = close.filter(|_| !st.foreign) {
        if c.code != "shutdown" && c.code != "store_error" {
            gw.metrics.upstream_errors.fetch_add(1, Relaxed);
        }
        tracing::warn!(thread = %ctx.thread, run = %ctx.run_id, code = c.code, "{}", c.message);
        finish_with_error(&ctx, &mut st, c).await;
        gw.metrics.runs_closed_by_gateway.fetch_add(1, Relaxed);
    }
    if st.client_cut {
        gw.metrics.clients_cut.fetch_add(1, Relaxed);
        tracing::warn!(thread = %ctx.thread, run = %ctx.run_id, limit = limits.client_buffer_bytes, "the run's client fell too far behind (it stopped reading); its stream was cut, it can attach again with Last-Event-ID");
    }
    if st.store_failed && !st.foreign && st.reader.started() {
        // What the store took of the run ends as its client saw it, once
        // the store takes writes again.
        gw.end_failed_run_later(
            ctx.log_tenant.clone(),
            ctx.log_thread.clone(),
            ctx.run_id.clone(),
        );
    }
    if st.reader.started() && !st.store_failed {
        let upstream = ctx
            .upstream_branch
            .as_deref()
            .map(|branch| (branch, ctx.upstream_thread.as_str()));
        crate::session::record_channel(
            &gw,
            &ctx.tenant,
            &ctx.thread,
            &ctx.agent,
            &ctx.run_id,
            upstream,
        )
        .await;
    }
    tracing::info!(thread = %ctx.thread, run = %ctx.run_id, events = st.reader.count(), "run ended");
    // The thread is free before the client sees its stream end.
    if let Some(slot) = ctx.slot.take() {
        slot.release().await;
    }
    drop(st);
    if ctx.aside {
        crate::aside::join_when_free(&gw, &ctx.tenant, &ctx.thread, &ctx.run_id);
    }
}

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

/// Reads the upstream to its end. Returns why the gateway must close the
/// run, or `None` when the upstream ended it.
async fn pump(ctx: &RunCtx, st: &mut RunState, body: ByteStream) -> Option<Close> {
    let mut body = read_ahead(body);
    let mut events: Vec<Event> = Vec::new();
    let idle = ctx.gw.config.limits.upstream_idle_timeout;
    loop {
        let next = tokio::select! {
            n = tokio::time::timeout(idle, body.next()) => n,
            _ = ctx.gw.close_runs.cancelled() => return Some(Close::new("shutdown", "the gateway shut down while the run was in flight")),
            _ = ctx.stop.cancelled() => return Some(Close::new(STOPPED, "the run was stopped")),
        };
        // Why the reading stops, once what was read is stored.
        let mut stop: Option<Close> = None;
        let mut done = false;
        match next {
            Err(_) => {
                return Some(Close::new(
                    "upstream_timeout",
                    format!("the upstream agent was silent for {} ms", idle.as_millis()),
                ));
            }
            Ok(Some(Err(_))) => stop = Some(st.reader.broken()),
            Ok(Some(Ok(chunk))) => {
                if let Err(c) = st.reader.push(&chunk, &mut events) {
                    stop = Some(c);
                } else {
                    // Take whatever else arrived meanwhile, to store it in one batch.
                    for _ in 0..READ_AHEAD_CHUNKS {
                        match body.next().now_or_never() {
                            Some(Some(Ok(more))) => {
                                if let Err(c) = st.reader.push(&more, &mut events) {
                                    stop = Some(c);
                                    break;
                                }
                            }
                            Some(Some(Err(_))) => {
                                stop = Some(st.reader.broken());
                                break;
                            }
                            Some(None) => {
                                done = true;
                                break;
                            }
                            None => break,
                        }
                    }
                }
            }
            Ok(None) => done = true,
        }
        if done && stop.is_none() && !st.reader.ended() {
            stop = st.reader.finish(&mut events).err();
        }
        // Keep the good events read before whatever stops the run.
        if !events.is_empty() {
            store_and_send(ctx, st, std::mem::take(&mut events)).await;
        }
        if st.foreign {
            return Some(Close::new(STOPPED, "the run was stopped elsewhere"));
        }
        if st.store_failed {
            return Some(Close::new(
                "store_error",
                "the gateway could not store the run",
            ));
        }
        if stop.is_some() {
            return stop;
        }
        if st.reader.ended() {
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

/// Appends a batch, then sends it to the client (if still connected).
pub(crate) async fn store_and_send(ctx: &RunCtx, st: &mut RunState, batch: Vec<Event>) {
    if st.store_failed {
        return;
    }
    let gw = &ctx.gw;
    let t0 = Instant::now();
    let bytes: usize = batch.iter().map(Event::len_bytes).sum();
    let n = batch.len();
    st.own_seq
        .store(st.seq + n as u64, std::sync::atomic::Ordering::SeqCst);
    let req = AppendRequest::new(batch)
        .expect_seq(st.seq)
        .agent_opt(Some(ctx.agent.name.clone()));
    match gw
        .store
        .append(&ctx.log_tenant, &ctx.log_thread, req.clone())
        .await
    {
        Ok(appended) => {
            gw.metrics.append_latency.observe(t0.elapsed());
            gw.metrics.events_stored.fetch_add(n as u64, Relaxed);
            gw.metrics.bytes_stored.fetch_add(bytes as u64, Relaxed);
            st.seq = appended.last_seq;
            let mut buf = Vec::with_capacity(bytes + n * 24);
            for (e, seq) in req.events.iter().zip(appended.seqs()) {
                put_frame(&mut buf, e, (!ctx.aside).then_some(seq));
                if *e.event_type() == EventType::RunStarted
                    && let Some(p) = st.prelude.take()
                {
                    buf.extend_from_slice(&p);
                }
                if e.event_type().is_run_terminal() {
                    st.finished = true;
                }
            }
            send(st, Bytes::from(buf));
            if st.finished {
                // The run's end: let the client's connection write this
                // frame before the run's cleanup (watchers woken, channel
                // recorded, slot released) and the checkpoint worker queued
                // by this append take the thread.
                tokio::task::yield_now().await;
            }
            // The upstream's own end, counted by the status it gives the
            // run; an end the gateway writes (a stop, a failure it closes)
            // is counted where it is written, once.
            if !st.gateway_end {
                for e in &req.events {
                    let counter = match e.event_type() {
                        EventType::RunFinished if agui_store::index::is_cancelled(e) => {
                            &gw.metrics.runs_cancelled
                        }
                        EventType::RunFinished => &gw.metrics.runs_finished,
                        EventType::RunError => &gw.metrics.runs_error,
                        _ => continue,
                    };
                    counter.fetch_add(1, Relaxed);
                }
            }
        }
        Err(e) if e.kind() == ErrorKind::Conflict => {
            // Another writer appended to the thread: a stop through another
            // replica. The run is no longer ours to write.
            tracing::info!(thread = %ctx.thread, run = %ctx.run_id, "another writer appended to the thread (a stop through another process)");
            st.foreign = true;
            st.store_failed = true;
        }
        Err(e) => {
            gw.metrics.store_errors.fetch_add(1, Relaxed);
            tracing::error!(thread = %ctx.thread, run = %ctx.run_id, events = n, error = %e, source = ?std::error::Error::source(&e), "cannot store the run's events; the run ends with RUN_ERROR store_error");
            st.store_failed = true;
        }
    }
}

pub(crate) fn send(st: &mut RunState, bytes: Bytes) {
    let Some(tx) = &st.client else {
        return;
    };
    match tx.send(bytes) {
        Ok(()) => {}
        // The client went away; the run goes on.
        Err(crate::outbox::Refused::Gone) => st.client = None,
        Err(crate::outbox::Refused::Lagged) => {
            // It stopped reading: its stream ends after the frame it is
            // receiving; everything is stored, so it can attach again.
            st.client = None;
            st.client_cut = true;
        }
    }
}

/// Ends what is open and records a `RUN_ERROR`; the client receives it.
/// When the store failed, nothing more is stored: the client gets an
/// unnumbered `RUN_ERROR` (`store_error`) after the frames it already has,
/// whichever batch failed (the terminal one included).
async fn finish_with_error(ctx: &RunCtx, st: &mut RunState, close: Close) {
    if !st.store_failed {
        if st.reader.ended() {
            return;
        }
        let mut batch = Vec::new();
        if !st.reader.started() {
            let s = st.reader.ids().synthetic_started();
            st.reader.own(&s);
            batch.push(s);
        }
        batch.extend(st.reader.closers());
        let err = run_error(close.code, &close.message);
        st.reader.own(&err);
        batch.push(err);
        st.gateway_end = true;
        store_and_send(ctx, st, batch).await;
        if !st.store_failed {
            return;
        }
    }
    let e = run_error("store_error", "the gateway could not store the run");
    send(st, crate::sse::frame(&e, None));
}

/// The close code of a stopped run (it ends with `RUN_FINISHED`, outcome
/// `cancelled`, not with a `RUN_ERROR`).
pub(crate) const STOPPED: &str = "stopped";

/// How long a stream waits before checking again whether it should end.
pub(crate) const POLL: Duration = Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(merged: &str) -> Vec<u8> {
        let mut want = Vec::new();
        for messages in ["[]", merged] {
            let text = format!(r#"{{"type":"MESSAGES_SNAPSHOT","messages":{messages}}}"#);
            put_frame(&mut want, &Event::from_json(&text).unwrap(), None);
        }
        want
    }

    #[test]
    fn the_thin_client_prelude_is_the_two_snapshot_frames() {
        for merged in [
            "[]",
            r#"[{"id":"a","role":"user","content":"x\"\\n}"},{"id":"b","role":"assistant","content":"é"}]"#,
        ] {
            assert_eq!(
                &thin_client_prelude(merged)[..],
                &frames(merged)[..],
                "{merged}"
            );
        }
        // A line break in the text (never written by the gateway) goes
        // through the envelope check: still one frame per event.
        let spaced = "[\n{\"id\":\"a\",\"role\":\"user\",\"content\":\"x\"}\r\n]";
        let got = thin_client_prelude(spaced);
        assert_eq!(got.iter().filter(|&&b| b == b'\n').count(), 4, "{got:?}");
    }
}
