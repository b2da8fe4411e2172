//! Stopping a run: `POST /threads/{id}/runs/{run}/stop`.
//!
//! A stopped run ends like any run the gateway closes itself: what it has
//! open (text messages, tool calls, reasoning) gets its `*_END` event, then
//! `RUN_FINISHED` with `outcome: {"type": "cancelled"}` is stored and sent
//! to every attached client, and the upstream request is dropped (the
//! upstream sees the disconnect). The run index records it as `cancelled`.
//!
//! Across replicas: the replica that receives the stop and does not forward
//! the run itself appends the closing events to the thread directly (with
//! optimistic concurrency on the thread's head). The replica forwarding the
//! run notices a write it did not make, through its own subscription to the
//! thread or through a conflict on its next append, drops the upstream and
//! relays the stored end of the run to its client.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agui_protocol::{Event, EventType};
use agui_store::{ErrorKind, RunStatus};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::gateway::{Closed, Gateway, RunEnd, run_error, store_error};
use crate::run::{RunCtx, RunState, send, store_and_send};
use crate::sse::put_frame;

/// `RUN_FINISHED` with the `cancelled` outcome.
pub(crate) fn cancelled_finish(thread: &str, run: &str) -> Event {
    Event::from_serialize(&json!({
        "type": "RUN_FINISHED",
        "threadId": thread,
        "runId": run,
        "outcome": {"type": "cancelled"},
    }))
    .unwrap_or_else(|_| run_error("internal", "internal error"))
}

/// Aborts a task when dropped.
pub(crate) struct TaskGuard(tokio::task::AbortHandle);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Watches the thread for events this run did not write (sequence numbers
/// beyond `own`): another replica stopped the run. Cancels `stop` then.
pub(crate) async fn watch_foreign(
    gw: &Arc<Gateway>,
    tenant: &str,
    thread: &str,
    head: u64,
    own: Arc<AtomicU64>,
    stop: CancellationToken,
) -> Option<TaskGuard> {
    let mut sub = match gw.store.subscribe(tenant, thread, head + 1).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "no subscription to watch for a stop from another replica");
            return None;
        }
    };
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                next = sub.next() => match next {
                    Some(Ok(e)) if e.seq > own.load(Ordering::SeqCst) => {
                        stop.cancel();
                        return;
                    }
                    Some(Ok(_)) => {}
                    _ => return,
                },
            }
        }
    });
    Some(TaskGuard(task.abort_handle()))
}

/// Ends a stopped run: closers, then `RUN_FINISHED` (cancelled), stored and
/// sent. When another writer got there first, the caller relays its events;
/// when the store fails, the client gets an unnumbered `RUN_ERROR`
/// (`store_error`), as for any run.
pub(crate) async fn finish_cancelled(ctx: &RunCtx, st: &mut RunState) {
    if st.foreign || st.store_failed || st.reader.ended() {
        return;
    }
    let mut batch = Vec::new();
    if !st.reader.started() {
        let s = st.reader.ids().synthetic_started();
        st.reader.own(&s);
        batch.push(s);
    }
    batch.extend(st.reader.closers());
    let fin = cancelled_finish(&ctx.thread, &ctx.run_id);
    st.reader.own(&fin);
    batch.push(fin);
    st.gateway_end = true;
    store_and_send(ctx, st, batch).await;
    if st.foreign {
        // relayed by the caller
    } else if st.store_failed {
        let e = run_error("store_error", "the gateway could not store the run");
        send(st, crate::sse::frame(&e, None));
    } else {
        ctx.gw
            .metrics
            .runs_cancelled
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(thread = %ctx.thread, run = %ctx.run_id, "run stopped");
    }
}

/// Sends the client what another writer stored after this run's last own
/// event, up to the run's end; when the run has no stored end, an
/// unnumbered `RUN_ERROR`.
pub(crate) async fn relay_foreign(ctx: &RunCtx, st: &mut RunState) {
    let store = &ctx.gw.store;
    let mut ended = false;
    let (tenant, thread) = (&ctx.log_tenant, &ctx.log_thread);
    if let Ok(info) = store.thread(tenant, thread).await
        && info.last_seq > st.seq
        && let Ok(events) = store
            .read_range(tenant, thread, st.seq + 1, info.last_seq)
            .await
    {
        let mut buf = Vec::new();
        for e in &events {
            if *e.event.event_type() == EventType::RunStarted {
                break;
            }
            put_frame(&mut buf, &e.event, (!ctx.aside).then_some(e.seq));
            if e.event.event_type().is_run_terminal() {
                ended = true;
                break;
            }
        }
        send(st, Bytes::from(buf));
    }
    if !ended {
        let e = run_error(
            "store_error",
            "another writer changed the thread while the run was in flight",
        );
        send(st, crate::sse::frame(&e, None));
    }
    st.finished = true;
    tracing::info!(thread = %ctx.thread, run = %ctx.run_id, "run ended by another writer (stopped elsewhere)");
}

/// How long a stop waits for the run to end before answering.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// `POST /threads/{id}/runs/{run}/stop`.
pub async fn stop_handler(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path((thread, run)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let tenant = gw.tenant(&headers)?;
    stop_run(&gw, &tenant, &thread, &run).await
}

/// Stops a run of a thread wherever it runs (set aside or not); 404 for
/// an unknown run, 409 for a run that already ended.
pub(crate) async fn stop_run(
    gw: &Arc<Gateway>,
    tenant: &str,
    thread: &str,
    run: &str,
) -> Result<Json<Value>, ApiError> {
    let not_found = || ApiError::not_found(format!("no run {run:?} in this thread"));
    // Where the run's events are: the thread, or its aside thread.
    let stored = match gw.store.run(tenant, thread, run).await {
        Ok(r) => Some((tenant.to_owned(), thread.to_owned(), r)),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            crate::aside::find(gw, tenant, thread, run).await?
        }
        Err(e) => return Err(store_error(e)),
    };
    // Nothing stored yet: the run is in flight here, before its upstream
    // answered.
    let unstored = stored.is_none();
    let (log_tenant, log_thread) = match stored {
        Some((log_tenant, log_thread, record)) => {
            if record.status != RunStatus::Running {
                return Err(not_running(run, record.status));
            }
            if gw.stop_local(&log_tenant, &log_thread, run).is_none() {
                stop_remote(gw, &log_tenant, &log_thread, thread, run).await?;
            }
            (log_tenant, log_thread)
        }
        // In flight in this process with nothing stored yet (its upstream
        // has not answered): it stops at once and stores its start and its
        // end (`RUN_FINISHED`, as for any stopped run).
        None => {
            let aside = agui_store::aside::aside_thread(thread, run)
                .map(|a| (agui_store::aside::aside_tenant(tenant), a));
            [Some((tenant.to_owned(), thread.to_owned())), aside]
                .into_iter()
                .flatten()
                .find(|(t, th)| gw.stop_local(t, th, run).is_some())
                .ok_or_else(not_found)?
        }
    };
    // Wait for the run's end to be stored (by this or another replica).
    let deadline = tokio::time::Instant::now() + STOP_WAIT;
    loop {
        // Whether the run still holds its slot here, asked before the store
        // is read: a run releases it only once it stored what it stores.
        let held = unstored && gw.holds_run(&log_tenant, &log_thread, run);
        let now = match gw.store.run(&log_tenant, &log_thread, run).await {
            Ok(now) => Some(now),
            // Set aside, ended, and joined its thread meanwhile; or nothing
            // stored yet.
            Err(e) if e.kind() == ErrorKind::NotFound && log_tenant != tenant => {
                match gw.store.run(tenant, thread, run).await {
                    Ok(now) => Some(now),
                    Err(e) if e.kind() == ErrorKind::NotFound => None,
                    Err(e) => return Err(store_error(e)),
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(store_error(e)),
        };
        if now.is_none() && unstored && !held {
            // It ended without storing anything: its start was refused (a
            // reused run id, a parent not joined, an invalid input), so
            // there never was such a run.
            return Err(not_found());
        }
        let status = now.map_or(RunStatus::Running, |r| r.status);
        if status != RunStatus::Running || tokio::time::Instant::now() >= deadline {
            return Ok(Json(json!({
                "threadId": thread,
                "runId": run,
                "status": status.as_str(),
            })));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn not_running(run: &str, status: RunStatus) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "run_not_running",
        format!(
            "run {run:?} already ended (status {}); only a running run can be stopped",
            status.as_str()
        ),
    )
}

/// Closes a run this process does not forward: appends its closers and
/// `RUN_FINISHED` (cancelled) at the head of the thread that holds it
/// (`tenant`, `thread`: its aside thread for a run set aside; `event_thread`
/// is the `threadId` its events name), as [`Gateway::close_run`] closes
/// any run: retrying when the forwarding replica appended meanwhile, and
/// leaving a run that ended meanwhile as it is.
async fn stop_remote(
    gw: &Arc<Gateway>,
    tenant: &str,
    thread: &str,
    event_thread: &str,
    run: &str,
) -> Result<(), ApiError> {
    let end = RunEnd {
        event: cancelled_finish(event_thread, run),
        status: RunStatus::Running,
    };
    match gw.close_run(tenant, thread, run, &end).await {
        Ok(Closed::Now) => {
            gw.metrics
                .runs_cancelled
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(thread = %thread, run = %run, "run stopped (forwarded by another process)");
            Ok(())
        }
        // Ended meanwhile.
        Ok(Closed::Already) => Ok(()),
        Ok(Closed::Gone) => Err(ApiError::not_found("no such thread or run")),
        Err(e) if e.kind() == ErrorKind::Conflict => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            "the run kept changing while it was being stopped; retry",
        )),
        Err(e) => Err(store_error(e)),
    }
}
