//! History, attach and threads: `GET /threads`, `GET|DELETE /threads/{id}`,
//! `GET /threads/{id}/messages`, `GET /threads/{id}/events`,
//! `POST /agents/{name}/connect`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use agui_history::compact::{Mode, compact};
use agui_protocol::Event;
use agui_store::{Conversation, EventStream, RunRecord, RunStatus, StoredEvent, ThreadFilter};
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{FutureExt, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::gateway::{Gateway, store_error};
use crate::run::{POLL, all_runs, read_body, sse_response, unknown_agent};
use crate::sse::{put_frame, put_frame_around};

/// `GET /threads` query.
#[derive(Deserialize)]
pub struct ListQuery {
    agent: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
    /// Only threads whose id starts with this (within each page).
    prefix: Option<String>,
    /// `latestRun`: add each thread's latest run (id and status).
    include: Option<String>,
}

/// RFC 3339 UTC with milliseconds, the one time format of the API, the CLI's
/// JSON output and the docs (the store keeps microseconds; the receive time
/// of a batch is not more precise than that).
pub(crate) fn ts(t: agui_store::Timestamp) -> Value {
    match chrono::DateTime::from_timestamp_millis(t.as_micros().div_euclid(1000)) {
        Some(d) => Value::String(d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        None => Value::Null,
    }
}

fn thread_json(t: &agui_store::ThreadInfo) -> Value {
    json!({
        "threadId": t.thread_id,
        "agent": t.agent,
        "createdAt": ts(t.created_at),
        "updatedAt": ts(t.updated_at),
        "lastSeq": t.last_seq,
        "eventCount": t.last_seq,
        "runCount": t.run_count,
        "bytes": t.bytes,
    })
}

fn run_json(r: &RunRecord) -> Value {
    json!({
        "runId": r.run_id,
        "parentRunId": r.parent_run_id,
        "agent": r.agent,
        "status": r.status.as_str(),
        "startedAt": ts(r.started_at),
        "finishedAt": r.finished_at.map(ts),
        "firstSeq": r.first_seq,
        "lastSeq": r.last_seq,
        "eventCount": r.event_count,
        "bytes": r.bytes,
    })
}

/// A run set aside (see `aside`): what `run_json` gives but its sequence
/// numbers, which are its aside thread's.
fn aside_run_json(r: &RunRecord) -> Value {
    let mut v = run_json(r);
    if let Some(o) = v.as_object_mut() {
        o.remove("firstSeq");
        o.remove("lastSeq");
    }
    v
}

/// `GET /threads`.
pub async fn list_threads(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let tenant = gw.tenant(&headers)?;
    if q.limit == Some(0) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_limit",
            format!(
                "limit must be between 1 and {} (a larger one is capped)",
                agui_store::MAX_PAGE
            ),
        ));
    }
    let limit = agui_store::page_size(q.limit.unwrap_or(100));
    let (found, next_cursor) = match q.prefix.as_deref().filter(|p| !p.is_empty()) {
        None => {
            let page = gw
                .store
                .list_threads(
                    &tenant,
                    &ThreadFilter {
                        agent: q.agent,
                        limit,
                        cursor: q.cursor,
                    },
                )
                .await
                .map_err(store_error)?;
            (page.threads, page.next_cursor)
        }
        Some(prefix) => threads_with_prefix(&gw, &tenant, q.agent, q.cursor, prefix, limit).await?,
    };
    let latest = q.include.as_deref() == Some("latestRun");
    let mut threads = Vec::with_capacity(found.len());
    for t in &found {
        let mut v = thread_json(t);
        if latest {
            let runs = all_runs(&gw, &tenant, &t.thread_id).await?;
            v["latestRun"] = match runs.last() {
                Some(r) => json!({"runId": r.run_id, "status": r.status.as_str()}),
                None => Value::Null,
            };
        }
        threads.push(v);
    }
    Ok(Json(json!({
        "threads": threads,
        "nextCursor": next_cursor,
    })))
}

/// Threads looked at per `GET /threads?prefix=` request before it answers
/// with what it found and a cursor to go on from.
const PREFIX_SCAN: usize = 100_000;

/// Up to `limit` threads whose id starts with `prefix`, newest activity
/// first, from `cursor` on: pages are read until `limit` match, the threads
/// run out, or [`PREFIX_SCAN`] were looked at. The cursor returned is the
/// position after the last thread looked at (the last match when the page
/// filled up), so following it neither skips nor repeats a match.
async fn threads_with_prefix(
    gw: &Gateway,
    tenant: &str,
    agent: Option<String>,
    mut cursor: Option<String>,
    prefix: &str,
    limit: usize,
) -> Result<(Vec<agui_store::ThreadInfo>, Option<String>), ApiError> {
    let mut found = Vec::new();
    let mut scanned = 0;
    loop {
        let page = gw
            .store
            .list_threads(
                tenant,
                &ThreadFilter {
                    agent: agent.clone(),
                    limit: agui_store::MAX_PAGE.min(limit.max(1_000)),
                    cursor: cursor.take(),
                },
            )
            .await
            .map_err(store_error)?;
        let count = page.threads.len();
        for (i, t) in page.threads.into_iter().enumerate() {
            if !t.thread_id.starts_with(prefix) {
                continue;
            }
            let position = agui_store::cursor::ThreadCursor {
                updated_at: t.updated_at,
                thread_id: t.thread_id.clone(),
            };
            found.push(t);
            if found.len() == limit {
                let last_of_all = i + 1 == count && page.next_cursor.is_none();
                return Ok((found, (!last_of_all).then(|| position.encode())));
            }
        }
        scanned += count;
        match page.next_cursor {
            Some(next) if scanned < PREFIX_SCAN => cursor = Some(next),
            next => return Ok((found, next)),
        }
    }
}

/// `GET /threads/{id}`: summary and run tree.
pub async fn get_thread(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(thread): Path<String>,
) -> Result<Response, ApiError> {
    let tenant = gw.tenant(&headers)?;
    let info = gw
        .store
        .thread(&tenant, &thread)
        .await
        .map_err(store_error)?;
    let runs = all_runs(&gw, &tenant, &thread).await?;
    let aside = crate::aside::runs_of(&gw, &tenant, &thread)
        .await
        .map_err(store_error)?;
    let mut out = thread_json(&info);
    out["runs"] = Value::Array(runs.iter().map(run_json).collect());
    out["runsAside"] = Value::Array(aside.iter().map(aside_run_json).collect());
    // A placeholder, written by `run_tree` below: the tree is as deep as the
    // thread's longest chain of runs, too deep for a `Value` (serializing
    // and dropping one recurse) on a thread of a few thousand turns.
    out["tree"] = Value::Null;
    let channels = gw
        .store
        .channels(&tenant, &thread)
        .await
        .map_err(store_error)?;
    out["participants"] = crate::session::participants(&gw, &runs, &channels);
    let no_fields = serde_json::Map::new();
    let fields = out.as_object().unwrap_or(&no_fields);
    let mut body = String::with_capacity(256 + runs.len() * 320);
    body.push('{');
    for (i, (key, value)) in fields.into_iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&json_text(&Value::String(key.clone())));
        body.push(':');
        if key == "tree" {
            run_tree(&runs, &mut body);
        } else {
            body.push_str(&json_text(value));
        }
    }
    body.push('}');
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

fn json_text(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned())
}

/// Writes the runs as a forest, each node a run with its `children`:
/// `[{"runId", "status", "eventCount", "children": [...]}, ...]`. Without
/// recursion (a stack of its own), so a chain of any length is written in
/// full and cannot overflow the stack.
fn run_tree(runs: &[RunRecord], out: &mut String) {
    let ids: std::collections::HashSet<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
    let mut children: HashMap<&str, Vec<&RunRecord>> = HashMap::new();
    let mut roots = Vec::new();
    for r in runs {
        match r.parent_run_id.as_deref() {
            Some(p) if ids.contains(p) && p != r.run_id => children.entry(p).or_default().push(r),
            _ => roots.push(r),
        }
    }
    // Each entry: a list of sibling nodes and how many are written. A node
    // is opened when written and closed when its children list is done.
    // Runs on a parent cycle are not reachable from a root and are left out,
    // and every run is written at most once (each has one parent).
    let mut stack: Vec<(&[&RunRecord], usize)> = vec![(&roots, 0)];
    out.push('[');
    while let Some((list, next)) = stack.last_mut() {
        let Some(r) = list.get(*next).copied() else {
            stack.pop();
            out.push_str(if stack.is_empty() { "]" } else { "]}" });
            continue;
        };
        if *next > 0 {
            out.push(',');
        }
        *next += 1;
        out.push_str("{\"runId\":");
        out.push_str(&json_text(&Value::String(r.run_id.clone())));
        out.push_str(",\"status\":\"");
        out.push_str(r.status.as_str());
        out.push_str("\",\"eventCount\":");
        out.push_str(&r.event_count.to_string());
        out.push_str(",\"children\":[");
        let kids = children
            .get(r.run_id.as_str())
            .map_or(&[][..], Vec::as_slice);
        stack.push((kids, 0));
    }
}

/// `DELETE /threads/{id}`.
pub async fn delete_thread(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(thread): Path<String>,
) -> Result<Response, ApiError> {
    let tenant = gw.tenant(&headers)?;
    // A run of this process holds the thread from its request on, before it
    // stored anything; the hold also keeps new runs off while deleting.
    let hold = gw.hold_thread(&tenant, &thread).await?;
    // So does a run set aside here, before it stored anything.
    if let Some(run) = gw.aside_here(&tenant, &thread, None) {
        hold.release().await;
        return Err(crate::gateway::in_flight_error(&run));
    }
    let runs = match all_runs(&gw, &tenant, &thread).await {
        Ok(r) => r,
        Err(e) => {
            hold.release().await;
            return Err(e);
        }
    };
    // Runs set aside go with the thread, but not while one is in flight.
    let aside = match crate::aside::runs_of(&gw, &tenant, &thread).await {
        Ok(a) => a,
        Err(e) => {
            hold.release().await;
            return Err(store_error(e));
        }
    };
    if let Some(r) = runs
        .iter()
        .chain(&aside)
        .find(|r| r.status == RunStatus::Running)
    {
        hold.release().await;
        return Err(crate::gateway::in_flight_error(&r.run_id));
    }
    let aside_tenant = agui_store::aside::aside_tenant(&tenant);
    let mut deleted = Ok(());
    for r in &aside {
        match gw.store.delete_thread(&aside_tenant, &r.thread_id).await {
            Err(e) if e.kind() != agui_store::ErrorKind::NotFound => {
                deleted = Err(e);
                break;
            }
            _ => {}
        }
    }
    if deleted.is_ok() {
        deleted = gw.store.delete_thread(&tenant, &thread).await;
    }
    hold.release().await;
    deleted.map_err(store_error)?;
    gw.positions.forget(&tenant, &thread);
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `?run=&event=&seq=` query.
#[derive(Deserialize)]
pub struct RunQuery {
    run: Option<String>,
    /// After this event of the run (0 is its `RUN_STARTED`).
    event: Option<usize>,
    /// After the event with this sequence number.
    seq: Option<u64>,
}

/// A run's conversation, as far as its stored events allow.
pub(crate) struct Restored {
    /// `{"messages":[...],"state":...}`, shared with the store's engine.
    pub json: Arc<String>,
    /// The last sequence number covered.
    pub last_seq: u64,
    /// Why events were skipped (empty when the store's restore succeeded).
    pub warnings: Vec<String>,
}

/// Restores a run's conversation through the store; when the stored log
/// holds events the reducer refuses (written by versions that stored
/// upstream events unchecked), replays the run's branch here, skipping each
/// refused event with a warning, so such a thread restores as far as it
/// goes instead of failing for good.
pub(crate) async fn restore(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    run: &str,
) -> Result<Restored, ApiError> {
    match gw.store.restore(tenant, thread, run).await {
        Ok(r) => Ok(Restored {
            json: r.json,
            last_seq: r.last_seq,
            warnings: Vec::new(),
        }),
        Err(e) if e.kind() == agui_store::ErrorKind::NotFound => {
            // A run set aside that has not joined the log yet.
            match crate::aside::find(gw, tenant, thread, run).await? {
                Some((a_tenant, a_thread, record)) => {
                    crate::aside::restore(gw, tenant, thread, (&a_tenant, &a_thread), &record).await
                }
                None => Err(store_error(e)),
            }
        }
        Err(e) if e.kind() == agui_store::ErrorKind::Invalid => {
            tracing::warn!(thread, run, error = %e, "the stored events cannot all be reduced; restoring as far as they go");
            let events = gw
                .store
                .read_branch(tenant, thread, run)
                .await
                .map_err(store_error)?;
            let mut reducer = agui_history::reduce::Reducer::new(Conversation::default());
            let mut warnings = Vec::new();
            let mut last_seq = 0;
            for e in &events {
                last_seq = e.seq;
                if let Err(err) = reducer.apply(&e.event) {
                    tracing::warn!(thread, run, seq = e.seq, error = %err, "skipping a stored event the reducer refuses");
                    warnings.push(format!(
                        "event {} ({}) was skipped: the AG-UI client cannot apply it",
                        e.seq,
                        e.event.type_name()
                    ));
                }
            }
            let json = serde_json::to_string(&reducer.into_conversation())
                .map_err(|_| ApiError::store())?;
            Ok(Restored {
                json: Arc::new(json),
                last_seq,
                warnings,
            })
        }
        Err(e) => Err(store_error(e)),
    }
}

/// The `messages` and `state` members of a restored conversation's JSON
/// (`{"messages":[...],"state":...}`), as slices of it. The conversation is
/// served and forwarded as the store composed it, never parsed into a tree
/// and serialized again: on a long thread that costs hundreds of times the
/// restore itself. A conversation without `state` has `null`.
pub(crate) fn parts(json: &str) -> Result<(&str, &str), ApiError> {
    match crate::merge::split(json) {
        Some((messages, state)) => Ok((messages, state.unwrap_or("null"))),
        None => {
            tracing::error!("a restored conversation is not {{messages, state}} JSON");
            Err(ApiError::store())
        }
    }
}

/// The body of `GET /threads/{id}/messages` at the end of a run:
/// `{"messages":...,"state":...,"runId":...}` and `"warnings"` when events
/// were skipped. A restored conversation is always a serialized
/// [`Conversation`] (`{"messages":[...],"state":...}`, in that order), so the
/// body is its own bytes up to the closing brace, then the run id and that
/// brace: not parsed, not scanned, not even copied (the store's engine shares
/// the text, so a conversation of tens of megabytes is answered at the pace
/// of the socket).
fn messages_body(restored: Restored, run: &str) -> Result<Body, ApiError> {
    let Restored { json, warnings, .. } = restored;
    if !json.starts_with("{\"messages\":") || !json.ends_with('}') {
        tracing::error!("a restored conversation is not {{messages, state}} JSON");
        return Err(ApiError::store());
    }
    let mut tail = String::from(",\"runId\":");
    tail.push_str(&serde_json::to_string(run).map_err(|_| ApiError::store())?);
    if !warnings.is_empty() {
        tail.push_str(",\"warnings\":");
        tail.push_str(&serde_json::to_string(&warnings).map_err(|_| ApiError::store())?);
    }
    tail.push('}');
    let head = Bytes::from_owner(SharedText(json));
    let head = head.slice(..head.len() - 1);
    Ok(Body::new(Pieces(vec![head, Bytes::from(tail)])))
}

/// A shared text, as the owner of a [`Bytes`] (no copy).
struct SharedText(Arc<String>);

impl AsRef<[u8]> for SharedText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// A response body of a few pieces sent one after another without being
/// joined into one buffer, with its exact length known (so the response has a
/// `content-length`).
struct Pieces(Vec<Bytes>);

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let next = (!self.0.is_empty()).then(|| Ok(http_body::Frame::data(self.0.remove(0))));
        std::task::Poll::Ready(next)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.0.iter().map(|b| b.len() as u64).sum())
    }
}

/// `GET /threads/{id}/messages[?run=RUN_ID]`.
pub async fn get_messages(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(thread): Path<String>,
    Query(q): Query<RunQuery>,
) -> Result<Response, ApiError> {
    let tenant = gw.tenant(&headers)?;
    gw.store
        .thread(&tenant, &thread)
        .await
        .map_err(store_error)?;
    let runs = all_runs(&gw, &tenant, &thread).await?;
    if let Some(r) = q
        .run
        .as_deref()
        .filter(|r| !runs.iter().any(|x| x.run_id == *r))
    {
        // A run set aside: its conversation as it will join the thread (no
        // time travel inside it until it has).
        if q.event.is_none()
            && q.seq.is_none()
            && crate::aside::find(&gw, &tenant, &thread, r)
                .await?
                .is_some()
        {
            let restored = restore(&gw, &tenant, &thread, r).await?;
            let body = messages_body(restored, r)?;
            return Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response());
        }
        return Err(crate::aside::no_run(&gw, &tenant, &thread, r).await);
    }
    let position = crate::travel::resolve_position(&runs, q.run.as_deref(), q.event, q.seq)?;
    let Some((record, event)) = position else {
        return Ok(Json(json!({"messages": [], "state": null, "runId": null})).into_response());
    };
    let run = record.run_id.clone();
    let Some(n) = event else {
        let restored = restore(&gw, &tenant, &thread, &run).await?;
        let body = messages_body(restored, &run)?;
        return Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response());
    };
    let conv = crate::travel::conversation_after(&gw, &tenant, &thread, &runs, record, n).await?;
    Ok(Json(json!({
        "messages": conv.get("messages").cloned().unwrap_or_else(|| json!([])),
        "state": conv.get("state").cloned().unwrap_or(Value::Null),
        "runId": run,
        "event": n,
        "seq": record.first_seq + n as u64,
    }))
    .into_response())
}

/// `GET /threads/{id}/events` query.
#[derive(Deserialize)]
pub struct EventsQuery {
    after: Option<u64>,
    branch: Option<String>,
    compact: Option<String>,
}

fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    match headers.get("last-event-id") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(Some)
            .ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_last_event_id",
                    "Last-Event-ID must be a sequence number",
                )
            }),
    }
}

/// `GET /threads/{id}/events`.
pub async fn get_events(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(thread): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    let tenant = gw.tenant(&headers)?;
    let mode = match q.compact.as_deref() {
        None | Some("none") => None,
        Some(m) => Some(m.parse::<Mode>().map_err(|_| {
            ApiError::bad_request(
                "invalid_compact",
                "compact must be none, deltas, snapshot or latest",
            )
        })?),
    };
    let after = last_event_id(&headers)?.or(q.after).unwrap_or(0);
    let info = gw
        .store
        .thread(&tenant, &thread)
        .await
        .map_err(store_error)?;
    let replays_all = matches!(mode, Some(Mode::Snapshot | Mode::Latest));
    let invalid_after = || {
        ApiError::bad_request(
            "invalid_after",
            "compact=snapshot and compact=latest replay from the start; drop after and Last-Event-ID",
        )
    };
    // A branch may end at a run set aside (not in the log yet), which may
    // join the log at any moment (its aside copy deleted right after):
    // found in neither place, or gone when its events are read, the runs
    // are listed again.
    let mut tries = 0;
    let runs = loop {
        let runs = all_runs(&gw, &tenant, &thread).await?;
        let Some(b) = q
            .branch
            .as_ref()
            .filter(|b| !runs.iter().any(|r| &r.run_id == *b))
        else {
            break runs;
        };
        tries += 1;
        if let Some(found) = crate::aside::find(&gw, &tenant, &thread, b).await? {
            if replays_all && after > 0 {
                return Err(invalid_after());
            }
            if let Some(answer) = aside_events(&gw, &tenant, &thread, found, after, mode).await? {
                return Ok(answer);
            }
        }
        if tries == 3 {
            return Err(ApiError::not_found(format!("no run {b:?} in this thread")));
        }
    };
    let running = runs
        .iter()
        .find(|r| r.status == RunStatus::Running)
        .cloned();
    if q.branch.is_none() && mode.is_none() {
        // Everything from `after` on, then live: one subscription.
        let sub = gw
            .store
            .subscribe(&tenant, &thread, after.saturating_add(1))
            .await
            .map_err(store_error)?;
        let body = follow(
            gw.clone(),
            tenant,
            thread,
            sub,
            after,
            info.last_seq,
            running.is_some(),
            Vec::new(),
            true,
        );
        return Ok(sse_response(body));
    }
    if replays_all && after > 0 {
        return Err(invalid_after());
    }
    // Stored part of the branch (or of the whole thread).
    let stored: Vec<StoredEvent> = match &q.branch {
        Some(b) => gw
            .store
            .read_branch(&tenant, &thread, b)
            .await
            .map_err(store_error)?,
        None => gw
            .store
            .read_range(&tenant, &thread, 1, info.last_seq)
            .await
            .map_err(store_error)?,
    };
    let stored: Vec<StoredEvent> = stored.into_iter().filter(|e| e.seq > after).collect();
    let last_seq = stored.last().map(|e| e.seq).unwrap_or(after).max(after);
    let mut buf = Vec::new();
    match mode {
        None => {
            for e in &stored {
                put_frame(&mut buf, &e.event, Some(e.seq));
            }
        }
        Some(m) => {
            let events: Vec<Event> = stored.iter().map(|e| e.event.clone()).collect();
            let out =
                compact(events, m, &Conversation::default(), q.branch.as_deref()).map_err(|e| {
                    ApiError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "cannot_compact",
                        format!("the stored events cannot be compacted: {e}"),
                    )
                })?;
            let n = out.len();
            for (i, e) in out.iter().enumerate() {
                put_frame(&mut buf, e, (i + 1 == n).then_some(last_seq));
            }
        }
    }
    // The live tail, when the branch asked for is the run in flight.
    let live = match (&running, &q.branch) {
        (Some(r), None) => Some(r),
        (Some(r), Some(b)) if &r.run_id == b => Some(r),
        _ => None,
    };
    match live {
        Some(_) => {
            let sub = gw
                .store
                .subscribe(&tenant, &thread, last_seq.saturating_add(1))
                .await
                .map_err(store_error)?;
            Ok(sse_response(follow(
                gw.clone(),
                tenant,
                thread,
                sub,
                last_seq,
                last_seq,
                true,
                buf,
                true,
            )))
        }
        None => Ok(sse_response(Body::from(Bytes::from(buf)))),
    }
}

/// `GET /threads/{id}/events?branch=RUN` for a run set aside (see
/// `aside`): the branch up to its parent from the thread's log (with their
/// ids), then the run's own events, and while it runs, its live events;
/// the run's events carry no ids (their sequence numbers are its aside
/// thread's). Compacted, no frame has an id. `None` when the run joined
/// its thread meanwhile (its aside copy is gone): the log has it.
async fn aside_events(
    gw: &Arc<Gateway>,
    tenant: &str,
    thread: &str,
    (a_tenant, a_thread, record): (String, String, RunRecord),
    after: u64,
    mode: Option<Mode>,
) -> Result<Option<Response>, ApiError> {
    // A parent set aside may join its thread (its aside copy deleted)
    // between finding it and reading it: the branch is then read again,
    // and that parent found in the log.
    let mut tries = 0;
    let (stored, own, own_last) = 'read: loop {
        tries += 1;
        let gone = |e: agui_store::StoreError| {
            if e.kind() == agui_store::ErrorKind::NotFound && tries < 3 {
                None
            } else {
                Some(store_error(e))
            }
        };
        // Its parent may be set aside in turn (ended, not joined yet): the
        // branch goes through each such run up to one in the log.
        let mut above = Vec::new();
        let mut parent = record.parent_run_id.clone();
        while let Some(p) = parent.take() {
            match crate::aside::find(gw, tenant, thread, &p).await? {
                // Runs set aside form no cycle (a parent exists before its
                // child starts); the bound only guards against a damaged
                // store.
                Some(found) if above.len() < 10_000 => {
                    parent = found.2.parent_run_id.clone();
                    above.push(found);
                }
                Some(_) => return Err(ApiError::store()),
                None => {
                    parent = Some(p);
                    break;
                }
            }
        }
        let mut stored = match &parent {
            Some(p) => match gw.store.read_branch(tenant, thread, p).await {
                Ok(events) => events,
                Err(e) => match gone(e) {
                    Some(err) => return Err(err),
                    None => continue 'read,
                },
            },
            None => Vec::new(),
        };
        stored.retain(|e| e.seq > after);
        let mut own = Vec::new();
        for (t, th, _) in above.iter().rev() {
            match gw.store.read_range(t, th, 1, u64::MAX).await {
                Ok(events) => own.extend(events),
                Err(e) => match gone(e) {
                    Some(err) => return Err(err),
                    None => continue 'read,
                },
            }
        }
        let mine = match gw.store.read_range(&a_tenant, &a_thread, 1, u64::MAX).await {
            Ok(events) => events,
            Err(e) if e.kind() == agui_store::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(store_error(e)),
        };
        let own_last = mine.last().map_or(0, |e| e.seq);
        own.extend(mine);
        break (stored, own, own_last);
    };
    let mut buf = Vec::new();
    match mode {
        None => {
            for e in &stored {
                put_frame(&mut buf, &e.event, Some(e.seq));
            }
            for e in &own {
                put_frame(&mut buf, &e.event, None);
            }
        }
        Some(m) => {
            let events: Vec<Event> = stored.iter().chain(&own).map(|e| e.event.clone()).collect();
            let out = compact(events, m, &Conversation::default(), Some(&record.run_id)).map_err(
                |e| {
                    ApiError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "cannot_compact",
                        format!("the stored events cannot be compacted: {e}"),
                    )
                },
            )?;
            for e in &out {
                put_frame(&mut buf, e, None);
            }
        }
    }
    if record.status != RunStatus::Running {
        return Ok(Some(sse_response(Body::from(Bytes::from(buf)))));
    }
    let sub = gw
        .store
        .subscribe(&a_tenant, &a_thread, own_last + 1)
        .await
        .map_err(store_error)?;
    Ok(Some(sse_response(follow(
        gw.clone(),
        a_tenant,
        a_thread,
        sub,
        own_last,
        own_last,
        true,
        buf,
        false,
    ))))
}

/// The shortest time between two writes of live frames to one subscriber.
/// Each write is a system call and a TCP segment per subscriber, and the
/// kernel's send path is about two thirds of the gateway's CPU time when a
/// run has many subscribers: the events of a fast run that arrive within
/// this window of the previous write are gathered and sent in one. A
/// stream quieter than one event per window (a model's tokens, typically)
/// is never held; a faster one is delayed by at most this much.
const LINGER: Duration = Duration::from_millis(2);

/// Streams a subscription as SSE: first `prefix`, then events until the
/// thread has nothing in flight and everything up to its head was sent.
/// `ids`: frames carry their sequence numbers as `id:` (not for a run set
/// aside, whose numbers are not its thread's).
#[allow(clippy::too_many_arguments)]
fn follow(
    gw: Arc<Gateway>,
    tenant: String,
    thread: String,
    sub: EventStream,
    after: u64,
    head: u64,
    running: bool,
    prefix: Vec<u8>,
    ids: bool,
) -> Body {
    struct S {
        gw: Arc<Gateway>,
        tenant: String,
        thread: String,
        sub: EventStream,
        last: u64,
        head: u64,
        running: bool,
        prefix: Option<Bytes>,
        done: bool,
        /// When the last batch of live frames was handed to the connection.
        wrote: Option<Instant>,
        /// The gateway shut down and its runs ended: the stream ends once
        /// it reached the head, whatever another process still runs.
        stopping: bool,
        _count: SubscriberCount,
    }
    gw.metrics.subscribers.fetch_add(1, Relaxed);
    let state = S {
        _count: SubscriberCount(gw.clone()),
        gw,
        tenant,
        thread,
        sub,
        last: after,
        head,
        running,
        prefix: (!prefix.is_empty()).then(|| Bytes::from(prefix)),
        done: false,
        wrote: None,
        stopping: false,
    };
    let stream = futures::stream::unfold(state, move |mut s| async move {
        if let Some(p) = s.prefix.take() {
            return Some((Ok::<Bytes, Infallible>(p), s));
        }
        loop {
            if s.done || (!s.running && s.last >= s.head) {
                return None;
            }
            // At shutdown the stream goes on while this gateway's runs finish
            // (their ends, `RUN_ERROR` `shutdown` past the grace period,
            // reach it like any event), then ends at the thread's head.
            let runs_ended = async {
                s.gw.shutting_down.cancelled().await;
                s.gw.runs.wait().await;
            };
            let next = tokio::select! {
                n = tokio::time::timeout(POLL, s.sub.next()) => n,
                () = runs_ended, if !s.stopping => {
                    s.stopping = true;
                    refresh(&mut s.running, &mut s.head, &s.gw, &s.tenant, &s.thread).await;
                    s.running = false;
                    continue;
                }
            };
            match next {
                Err(_) => {
                    // Quiet: is anything still in flight?
                    refresh(&mut s.running, &mut s.head, &s.gw, &s.tenant, &s.thread).await;
                    s.running &= !s.stopping;
                    continue;
                }
                Ok(None) => return None,
                Ok(Some(Err(e))) => {
                    // A damaged chunk or a failing store mid-stream: the
                    // client must see the stream end in error, not quietly.
                    tracing::error!(tenant = %s.tenant, thread = %s.thread, after = s.last, error = %e, source = ?std::error::Error::source(&e), "cannot read the thread's stored events; ending the stream with an error frame");
                    s.done = true;
                    return Some((Ok(error_frame(&e)), s));
                }
                Ok(Some(Ok(first))) => {
                    // Events arriving faster than one write per LINGER are
                    // gathered for the rest of it and leave in one write
                    // (see LINGER); a quieter stream is written at once.
                    if let Some(at) = s.wrote {
                        let since = at.elapsed();
                        if since < LINGER {
                            tokio::time::sleep(LINGER - since).await;
                        }
                    }
                    let mut buf = Vec::new();
                    let mut ended = false;
                    let mut take = |e: &StoredEvent, buf: &mut Vec<u8>, last: &mut u64| {
                        put_frame(buf, &e.event, ids.then_some(e.seq));
                        *last = e.seq;
                        if e.event.event_type().is_run_terminal() {
                            ended = true;
                        }
                    };
                    take(&first, &mut buf, &mut s.last);
                    // Whether every ready event was taken (not cut at the
                    // cap): only then is the next write held (a subscriber
                    // catching up has more ready and goes on at once).
                    let mut drained = false;
                    for _ in 0..1024 {
                        match s.sub.next().now_or_never() {
                            Some(Some(Ok(e))) => take(&e, &mut buf, &mut s.last),
                            Some(Some(Err(e))) => {
                                tracing::error!(tenant = %s.tenant, thread = %s.thread, after = s.last, error = %e, source = ?std::error::Error::source(&e), "cannot read the thread's stored events; ending the stream with an error frame");
                                buf.extend_from_slice(&error_frame(&e));
                                s.done = true;
                                break;
                            }
                            Some(None) => {
                                s.done = true;
                                break;
                            }
                            None => {
                                drained = true;
                                break;
                            }
                        }
                    }
                    if ended {
                        refresh(&mut s.running, &mut s.head, &s.gw, &s.tenant, &s.thread).await;
                        s.running &= !s.stopping;
                    }
                    s.head = s.head.max(s.last);
                    s.wrote = drained.then(Instant::now);
                    return Some((Ok(Bytes::from(buf)), s));
                }
            }
        }
    });
    Body::from_stream(stream)
}

/// An SSE `event: error` frame: the stream ends because the stored events
/// cannot be read (the cause is logged, not sent).
fn error_frame(e: &agui_store::StoreError) -> Bytes {
    let code = match e.kind() {
        agui_store::ErrorKind::Unavailable => "store_unavailable",
        _ => "store_error",
    };
    let body = json!({"error": {"code": code, "message": "the stored events cannot be read; see the gateway log"}});
    Bytes::from(format!("event: error\ndata: {body}\n\n"))
}

async fn refresh(running: &mut bool, head: &mut u64, gw: &Gateway, tenant: &str, thread: &str) {
    match all_runs(gw, tenant, thread).await {
        Ok(runs) => *running = runs.iter().any(|r| r.status == RunStatus::Running),
        Err(_) => *running = false,
    }
    if let Ok(info) = gw.store.thread(tenant, thread).await {
        *head = (*head).max(info.last_seq);
    }
}

struct SubscriberCount(Arc<Gateway>);

impl Drop for SubscriberCount {
    fn drop(&mut self) {
        self.0.metrics.subscribers.fetch_sub(1, Relaxed);
    }
}

/// `POST /agents/{name}/connect`: the thread's latest branch as one run
/// envelope, then the live tail of a run in flight.
pub async fn connect(
    State(gw): State<Arc<Gateway>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let tenant = gw.tenant(&headers)?;
    if !gw.agents.contains_key(&name) {
        return Err(unknown_agent(&name));
    }
    let bytes = read_body(&gw, body).await?;
    let input = crate::input::parse(&bytes)?;
    let thread = input.thread_id.clone();
    let runs = match gw.store.thread(&tenant, &thread).await {
        Ok(_) => all_runs(&gw, &tenant, &thread).await?,
        Err(e) if e.kind() == agui_store::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(store_error(e)),
    };
    let running = runs
        .last()
        .filter(|r| r.status == RunStatus::Running)
        .cloned();
    let base = match &running {
        Some(r) => r
            .parent_run_id
            .clone()
            .filter(|p| runs.iter().any(|x| &x.run_id == p)),
        None => runs.last().map(|r| r.run_id.clone()),
    };
    let mut buf = Vec::new();
    let put = |v: Value, buf: &mut Vec<u8>| {
        if let Ok(e) = Event::from_serialize(&v) {
            put_frame(buf, &e, None);
        }
    };
    put(
        json!({"type":"RUN_STARTED","threadId":thread,"runId":input.run_id}),
        &mut buf,
    );
    let mut last_seq = 0;
    if let Some(b) = &base {
        let restored = restore(&gw, &tenant, &thread, b).await?;
        last_seq = restored.last_seq;
        // The snapshots are written around the restored bytes, not rebuilt
        // from a parsed tree, nor checked again.
        let (messages, state) = parts(&restored.json)?;
        let around = |buf: &mut Vec<u8>, ty, key, value| {
            put_frame_around(buf, ty, key, value).map_err(|e| {
                tracing::error!(error = %e, "a restored conversation does not make a snapshot");
                ApiError::store()
            })
        };
        around(&mut buf, "MESSAGES_SNAPSHOT", "messages", messages)?;
        if state != "null" {
            around(&mut buf, "STATE_SNAPSHOT", "snapshot", state)?;
        }
    }
    put(
        json!({"type":"RUN_FINISHED","threadId":thread,"runId":input.run_id}),
        &mut buf,
    );
    match running {
        Some(r) => {
            let sub = gw
                .store
                .subscribe(&tenant, &thread, r.first_seq)
                .await
                .map_err(store_error)?;
            let from = r
                .first_seq
                .saturating_sub(1)
                .max(last_seq.min(r.first_seq.saturating_sub(1)));
            Ok(sse_response(follow(
                gw.clone(),
                tenant,
                thread,
                sub,
                from,
                from,
                true,
                buf,
                true,
            )))
        }
        None => Ok(sse_response(Body::from(Bytes::from(buf)))),
    }
}

/// `GET /threads/{id}/runs/{run}/artifact`: the compacted message snapshot
/// artifact of a finished run (`?source=snapshot|derived`).
pub async fn get_artifact(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path((thread, run)): Path<(String, String)>,
    Query(q): Query<ArtifactQuery>,
) -> Result<Response, ApiError> {
    use agui_history::artifact::{ExportOptions, Source, export};
    let tenant = gw.tenant(&headers)?;
    let record = gw
        .store
        .run(&tenant, &thread, &run)
        .await
        .map_err(store_error)?;
    let source = match q.source.as_deref() {
        None => None,
        Some(s) => Some(s.parse::<Source>().map_err(|_| {
            ApiError::bad_request("invalid_source", "source must be snapshot or derived")
        })?),
    };
    // The whole thread, not the store's branch: the history core resolves
    // the run's branch itself and drops messages restated from other
    // branches (lineage provenance), exactly as `agui export-artifact` does
    // on the thread's log.
    let info = gw
        .store
        .thread(&tenant, &thread)
        .await
        .map_err(store_error)?;
    let events: Vec<Event> = gw
        .store
        .read_range(&tenant, &thread, 1, info.last_seq.max(record.last_seq))
        .await
        .map_err(store_error)?
        .into_iter()
        .map(|e| e.event)
        .collect();
    let time = |t: agui_store::Timestamp| ts(t).as_str().map(str::to_owned);
    let options = ExportOptions {
        source,
        started_at: time(record.started_at),
        finished_at: record.finished_at.and_then(time),
    };
    let exported = export(&events, &run, &options).map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "cannot_export",
            format!("no artifact for this run: {e}"),
        )
    })?;
    Ok(Json(serde_json::to_value(&exported.artifact).unwrap_or(Value::Null)).into_response())
}

/// `?source=` query.
#[derive(Deserialize)]
pub struct ArtifactQuery {
    source: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body the handler built before it served restored bytes as they
    /// are: the conversation parsed into a tree and serialized again.
    fn through_a_tree(restored: &Restored, run: &str) -> String {
        let v: Value = serde_json::from_str(&restored.json).unwrap();
        let mut out = json!({
            "messages": v.get("messages").cloned().unwrap_or_else(|| json!([])),
            "state": v.get("state").cloned().unwrap_or(Value::Null),
            "runId": run,
        });
        if !restored.warnings.is_empty() {
            out["warnings"] = json!(restored.warnings);
        }
        serde_json::to_string(&out).unwrap()
    }

    /// A body's text, checking that it announced its exact length.
    fn text(body: Body) -> String {
        use http_body::Body as _;
        let exact = body.size_hint().exact().expect("the length is known");
        let bytes = futures::executor::block_on(axum::body::to_bytes(body, usize::MAX)).unwrap();
        assert_eq!(bytes.len() as u64, exact);
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    /// The restored text is sent as it is, not copied into a new buffer.
    #[test]
    fn the_restored_text_is_shared_not_copied() {
        let json = Arc::new(r#"{"messages":[],"state":null}"#.to_owned());
        let r = Restored {
            json: Arc::clone(&json),
            last_seq: 0,
            warnings: Vec::new(),
        };
        let body = messages_body(r, "r").unwrap();
        assert_eq!(
            Arc::strong_count(&json),
            2,
            "the body holds the text itself"
        );
        assert_eq!(text(body), r#"{"messages":[],"state":null,"runId":"r"}"#);
        assert_eq!(Arc::strong_count(&json), 1);
    }

    fn restored(conversation: &Value, warnings: &[&str]) -> Restored {
        Restored {
            json: Arc::new(serde_json::to_string(conversation).unwrap()),
            last_seq: 0,
            warnings: warnings.iter().map(|w| w.to_string()).collect(),
        }
    }

    #[test]
    fn the_messages_body_is_the_bytes_a_tree_would_give() {
        let cases = [
            json!({"messages": [], "state": null}),
            json!({"messages": [], "state": {}}),
            json!({
                "messages": [
                    {"id": "m1", "role": "user", "content": "caf\u{e9} \"q\" \\ \n \u{1F600} </script>"},
                    {"id": "m2", "role": "assistant", "toolCalls": [{"id": "t", "type": "function",
                        "function": {"name": "f", "arguments": "{\"a\":1}"}}], "z": 1, "a": 2}
                ],
                "state": {"n": 12345678901234567890123_u128.to_string(), "x": 1.5e300, "nested": [true, null]}
            }),
        ];
        for conversation in &cases {
            for warnings in [&[][..], &["event 3 (TEXT_MESSAGE_CONTENT) was skipped"][..]] {
                for run in ["r1", "run \"quoted\" \u{e9}"] {
                    let r = restored(conversation, warnings);
                    let expected = through_a_tree(&r, run);
                    let body = text(messages_body(r, run).unwrap());
                    assert_eq!(body, expected, "{conversation}");
                    let _: Value = serde_json::from_str(&body).unwrap();
                }
            }
        }
    }

    #[test]
    fn numbers_keep_their_text() {
        let r = Restored {
            json: Arc::new(r#"{"messages":[{"id":"m","role":"user","content":"x","n":1.000000000000000000001}],"state":{"big":123456789012345678901234567890}}"#.into()),
            last_seq: 0,
            warnings: Vec::new(),
        };
        let body = text(messages_body(r, "r").unwrap());
        assert!(body.contains("1.000000000000000000001"), "{body}");
        assert!(body.contains("123456789012345678901234567890"), "{body}");
    }

    #[test]
    fn a_restored_text_that_is_not_a_conversation_is_a_store_error() {
        for json in ["", "[]", "{\"state\":1}", "{\"messages\":[", "nope"] {
            assert!(parts(json).is_err(), "{json:?}");
        }
        // The messages body checks the ends of the shape only.
        for json in ["", "[]", "{\"state\":1}", "{\"messages\":[", "nope"] {
            let r = Restored {
                json: Arc::new(json.to_owned()),
                last_seq: 0,
                warnings: Vec::new(),
            };
            let err = messages_body(r, "r").unwrap_err();
            assert_eq!(err.status, StatusCode::INTERNAL_SERVER_ERROR, "{json:?}");
        }
    }
}
