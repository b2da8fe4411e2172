//! Concurrent branches: runs set aside.
//!
//! A thread's log holds one open run at a time, and an AG-UI client reading
//! it cannot take two runs interleaved. So a run that branches from a run
//! other than the one in flight (its `parentRunId` names another run) does
//! not wait: it runs at once, *aside* (see [`agui_store::aside`]). Its
//! events are stored as they arrive, durably, in a thread of their own under
//! the tenant's aside tenant, and its client gets them live (without SSE
//! ids: their sequence numbers are the aside thread's). Once the run has
//! ended and its thread has no run in flight, the run joins the thread: all
//! its events in one atomic append (a reader of the thread sees the run
//! whole or not at all, with the thread's own sequence numbers), then the
//! aside thread is deleted. Until then `GET /threads/{id}` lists it under
//! `runsAside`, and `POST .../stop` stops it like any run.
//!
//! Who joins it: the task that forwarded it, as soon as the thread is free
//! (woken by the end of the thread's run in this process, else polling);
//! should the process stop first, the next start-up joins every run set
//! aside that has ended (recovery closes those left in flight first).
//! Joining holds the thread like a delete does, so no run starts meanwhile,
//! and appends over the head it read, so nothing slips in between. A join
//! interrupted after its append and before the delete is recognized at the
//! next try (the run is in the thread, with the same parent and events)
//! and only the delete is done again.

use std::sync::Arc;
use std::time::Duration;

use agui_history::reduce::{Conversation, Reducer};
use agui_store::aside::{aside_tenant, aside_thread, owner_tenant, parse_aside_thread};
use agui_store::{AppendRequest, ErrorKind, RunFilter, RunRecord, RunStatus, StoreError};
use axum::http::StatusCode;

use crate::error::{ApiError, ServerError};
use crate::gateway::{Gateway, store_error};

/// The run `run` of `thread` set aside and not joined yet: its aside tenant
/// and thread, and its record there.
pub(crate) async fn find(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    run: &str,
) -> Result<Option<(String, String, RunRecord)>, ApiError> {
    let Some(aside) = aside_thread(thread, run) else {
        return Ok(None);
    };
    let aside_tenant = aside_tenant(tenant);
    match gw.store.run(&aside_tenant, &aside, run).await {
        Ok(r) => Ok(Some((aside_tenant, aside, r))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(store_error(e)),
    }
}

/// True when the thread has a run `run` set aside that has not joined it
/// yet (its id is taken).
pub(crate) async fn holds(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    run: &str,
) -> Result<bool, ApiError> {
    let Some(aside) = aside_thread(thread, run) else {
        return Ok(false);
    };
    match gw.store.thread(&aside_tenant(tenant), &aside).await {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(store_error(e)),
    }
}

/// True when run `run` of `thread` is set aside (not joined yet) and has
/// ended.
pub(crate) async fn is_ended(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    run: &str,
) -> Result<bool, ApiError> {
    Ok(find(gw, tenant, thread, run)
        .await?
        .is_some_and(|(_, _, r)| r.status != RunStatus::Running))
}

/// The answer to a `parentRunId` that is not a run of the thread: 409
/// `parent_not_joined` when it names a run set aside that has not joined
/// the thread yet (retry once it has), else 422 `unknown_parent_run`.
pub(crate) async fn unknown_parent(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    parent: &str,
) -> ApiError {
    match find(gw, tenant, thread, parent).await {
        Ok(Some((_, _, r))) => ApiError::new(
            StatusCode::CONFLICT,
            "parent_not_joined",
            format!(
                "parentRunId {parent:?} ran beside another run of this thread and joins the thread's log once that run ends (it is {}); retry then",
                r.status.as_str()
            ),
        ),
        Ok(None) => crate::run::unknown_parent(parent),
        Err(e) => e,
    }
}

/// The answer to a position asked for in a run that is not in the
/// thread's log: 409 `run_not_joined` when it is set aside (positions for
/// time travel come with the thread's sequence numbers, once it joined),
/// else 404.
pub(crate) async fn no_run(gw: &Gateway, tenant: &str, thread: &str, run: &str) -> ApiError {
    match find(gw, tenant, thread, run).await {
        Ok(Some((_, _, r))) => ApiError::new(
            StatusCode::CONFLICT,
            "run_not_joined",
            format!(
                "run {run:?} ran beside another run of this thread and joins the thread's log once that run ends (it is {}); until then it has no positions to travel to (its conversation: GET /threads/{{id}}/messages?run={{run}}, its events: GET /threads/{{id}}/events?branch={{run}})",
                r.status.as_str()
            ),
        ),
        Ok(None) => ApiError::not_found(format!("no run {run:?} in this thread")),
        Err(e) => e,
    }
}

/// The conversation at the end of run `record` set aside (in `a_tenant`,
/// `a_thread`): its parent's conversation (the thread's, or that of a run
/// set aside in turn), with the run's own events reduced on top, as the
/// thread restores it once it joined (the restore of a run in the log is
/// its parent's checkpoint plus its own events, too). Events the reducer
/// refuses are skipped and named in `warnings`.
pub(crate) async fn restore(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    (a_tenant, a_thread): (&str, &str),
    record: &RunRecord,
) -> Result<crate::history::Restored, ApiError> {
    let base = match &record.parent_run_id {
        Some(p) => Box::pin(crate::history::restore(gw, tenant, thread, p)).await?,
        None => crate::history::Restored {
            json: Arc::new(r#"{"messages":[],"state":null}"#.to_owned()),
            last_seq: 0,
            warnings: Vec::new(),
        },
    };
    let conversation: Conversation =
        serde_json::from_str(&base.json).map_err(|_| ApiError::store())?;
    let mut reducer = Reducer::new(conversation);
    let mut warnings = base.warnings;
    let events = gw
        .store
        .read_run(a_tenant, a_thread, &record.run_id)
        .await
        .map_err(store_error)?;
    for (i, e) in events.iter().enumerate() {
        if let Err(err) = reducer.apply(&e.event) {
            tracing::warn!(thread, run = %record.run_id, index = i, error = %err, "skipping an event of a run set aside the reducer refuses");
            warnings.push(format!(
                "event {i} of run {} ({}) was skipped: the AG-UI client cannot apply it",
                record.run_id,
                e.event.type_name()
            ));
        }
    }
    let json =
        serde_json::to_string(&reducer.into_conversation()).map_err(|_| ApiError::store())?;
    Ok(crate::history::Restored {
        json: Arc::new(json),
        last_seq: base.last_seq,
        warnings,
    })
}

/// The runs of `thread` set aside and not joined yet, oldest first (each
/// record's `thread_id` is its aside thread).
pub(crate) async fn runs_of(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
) -> Result<Vec<RunRecord>, StoreError> {
    let mut out: Vec<RunRecord> = all_aside_runs(gw, &aside_tenant(tenant))
        .await?
        .into_iter()
        .filter(|r| parse_aside_thread(&r.thread_id) == Some((thread, r.run_id.as_str())))
        .collect();
    out.sort_by_key(|r| r.started_at);
    Ok(out)
}

async fn all_aside_runs(gw: &Gateway, aside_tenant: &str) -> Result<Vec<RunRecord>, StoreError> {
    crate::run::every_run(gw, aside_tenant, RunFilter::default()).await
}

/// What one attempt to join a run set aside came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Join {
    /// The run is in its thread and its aside thread is gone.
    Joined,
    /// Not now: the run is still in flight, or its thread is busy (a run in
    /// flight, another process holds it, a store error). Try again later.
    Busy,
    /// It cannot join, ever (the thread's log refuses it: its parent is no
    /// run of the thread, or the log already has another run of that id;
    /// or its parent, set aside too, cannot join): left where it is,
    /// logged and counted (`agui_runs_aside_stuck_total`).
    Stuck,
}

/// Tries once to join run `run` of `thread` (set aside) into the thread.
pub(crate) async fn join(gw: &Arc<Gateway>, tenant: &str, thread: &str, run: &str) -> Join {
    let out = try_join(gw, tenant, thread, run).await;
    if let Join::Stuck = out {
        gw.metrics
            .runs_stuck
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    out
}

async fn try_join(gw: &Arc<Gateway>, tenant: &str, thread: &str, run: &str) -> Join {
    let (a_tenant, a_thread, record) = match find(gw, tenant, thread, run).await {
        Ok(Some(found)) => found,
        // Gone: joined (by another process, or an earlier try).
        Ok(None) => return Join::Joined,
        Err(_) => return Join::Busy,
    };
    if record.status == RunStatus::Running {
        return Join::Busy;
    }
    let Ok(hold) = gw.hold_thread(tenant, thread).await else {
        return Join::Busy;
    };
    let out = join_held(gw, tenant, thread, &a_tenant, &a_thread, &record).await;
    hold.release().await;
    out
}

async fn join_held(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    a_tenant: &str,
    a_thread: &str,
    record: &RunRecord,
) -> Join {
    let busy = |what: &str, e: &StoreError| {
        tracing::warn!(thread = %thread, run = %record.run_id, error = %e, "cannot join a run set aside ({what}); retrying later");
        Join::Busy
    };
    // A run set aside from a run set aside joins after its parent: the
    // parent joins first, under the same hold, and one that never can
    // leaves its children where they are too.
    if let Some(p) = &record.parent_run_id {
        match find(gw, tenant, thread, p).await {
            Ok(None) => {}
            Ok(Some((p_tenant, p_thread, parent))) if parent.status != RunStatus::Running => {
                let parent_join = join_held(gw, tenant, thread, &p_tenant, &p_thread, &parent);
                match Box::pin(parent_join).await {
                    Join::Joined => {}
                    Join::Busy => return Join::Busy,
                    Join::Stuck => {
                        tracing::error!(thread = %thread, run = %record.run_id, parent = %p, "a run set aside cannot join its thread: its parent, set aside too, cannot; it stays set aside");
                        return Join::Stuck;
                    }
                }
            }
            Ok(Some(_)) | Err(_) => return Join::Busy,
        }
    }
    let head = match gw.store.thread(tenant, thread).await {
        Ok(info) => info.last_seq,
        Err(e) if e.kind() == ErrorKind::NotFound => 0,
        Err(e) => return busy("reading the thread", &e),
    };
    let running = gw
        .store
        .list_runs(
            tenant,
            &RunFilter {
                thread_id: Some(thread.to_owned()),
                status: Some(RunStatus::Running),
                limit: 1,
                ..RunFilter::default()
            },
        )
        .await;
    match running {
        Ok(page) if !page.runs.is_empty() => return Join::Busy,
        Ok(_) => {}
        Err(e) => return busy("listing running runs", &e),
    }
    let events = match gw.store.read_run(a_tenant, a_thread, &record.run_id).await {
        Ok(events) => events,
        Err(e) => return busy("reading it", &e),
    };
    if !events
        .last()
        .is_some_and(|e| e.event.event_type().is_run_terminal())
    {
        // Interrupted and not closed yet (the store failed its close, tried
        // again in the background): it joins once its log ends.
        return Join::Busy;
    }
    let req = AppendRequest::new(events.into_iter().map(|e| e.event).collect()).expect_seq(head);
    let req = match &record.agent {
        Some(a) => req.agent(a.clone()),
        None => req,
    };
    match gw.store.append(tenant, thread, req).await {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::Conflict => return Join::Busy,
        Err(e) if e.kind() == ErrorKind::Invalid => {
            // Joined already (the delete below failed or the process
            // stopped before it), or it never can.
            let joined = match joined_already(gw, tenant, thread, a_tenant, a_thread, record).await
            {
                Ok(joined) => joined,
                Err(e) => return busy("comparing it with the thread's run of its id", &e),
            };
            if !joined {
                tracing::error!(thread = %thread, run = %record.run_id, error = %e, "a run set aside cannot join its thread; it stays set aside");
                return Join::Stuck;
            }
        }
        Err(e) => return busy("appending it to the thread", &e),
    }
    if let Err(e) = gw.store.delete_thread(a_tenant, a_thread).await
        && e.kind() != ErrorKind::NotFound
    {
        return busy("deleting its aside copy", &e);
    }
    gw.metrics
        .runs_joined
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(thread = %thread, run = %record.run_id, events = record.event_count, "a run set aside joined its thread");
    Join::Joined
}

/// True when the thread's log holds run `record` exactly as set aside: the
/// same parent and the same events, in order (a join whose append landed
/// and whose delete of the aside copy did not). Another run of that id
/// (one that reused it) is not taken for it.
async fn joined_already(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    a_tenant: &str,
    a_thread: &str,
    record: &RunRecord,
) -> Result<bool, StoreError> {
    let in_log = match gw.store.run(tenant, thread, &record.run_id).await {
        Ok(r) => r,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if in_log.parent_run_id != record.parent_run_id || in_log.event_count != record.event_count {
        return Ok(false);
    }
    let logged = gw.store.read_run(tenant, thread, &record.run_id).await?;
    let aside = gw
        .store
        .read_run(a_tenant, a_thread, &record.run_id)
        .await?;
    Ok(logged.len() == aside.len()
        && logged
            .iter()
            .zip(&aside)
            .all(|(l, a)| l.event.json() == a.event.json()))
}

/// Joins run `run` of `thread` (set aside, just ended) into the thread as
/// soon as the thread is free, on a task of the gateway's runs: woken by
/// the end of the thread's run in this process, else trying again after a
/// growing pause (at most one second). Gives up when the gateway closes
/// its runs (the next start-up joins it).
pub(crate) fn join_when_free(gw: &Arc<Gateway>, tenant: &str, thread: &str, run: &str) {
    let (gw2, tenant, thread, run) = (
        gw.clone(),
        tenant.to_owned(),
        thread.to_owned(),
        run.to_owned(),
    );
    gw.runs.spawn(async move {
        let gw = gw2;
        let mut pause = Duration::from_millis(10);
        loop {
            // Listening before trying: an end in between is not missed.
            let ended = gw.thread_ended(&tenant, &thread);
            match join(&gw, &tenant, &thread, &run).await {
                Join::Joined | Join::Stuck => return,
                Join::Busy => {}
            }
            tokio::select! {
                _ = ended => {}
                _ = tokio::time::sleep(pause) => {}
                _ = gw.close_runs.cancelled() => return,
            }
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    });
}

/// At start-up, after recovery: joins every run set aside that has ended,
/// in every tenant; one whose thread is busy joins when it is free.
/// Returns how many joined at once.
pub(crate) async fn join_all(gw: &Arc<Gateway>) -> Result<u64, ServerError> {
    let err = |during: &'static str| {
        move |e: StoreError| ServerError::Store {
            during,
            message: e.to_string(),
        }
    };
    let mut joined = 0;
    for a_tenant in gw.store.tenants().await.map_err(err("listing tenants"))? {
        let Some(tenant) = owner_tenant(&a_tenant) else {
            continue;
        };
        let runs = all_aside_runs(gw, &a_tenant)
            .await
            .map_err(err("listing runs set aside"))?;
        for r in runs.iter().filter(|r| r.status != RunStatus::Running) {
            let Some((thread, run)) = parse_aside_thread(&r.thread_id) else {
                continue;
            };
            match join(gw, tenant, thread, run).await {
                Join::Joined => joined += 1,
                Join::Busy => join_when_free(gw, tenant, thread, run),
                Join::Stuck => {}
            }
        }
    }
    Ok(joined)
}
