//! Time travel over the stored log, for the console and any client:
//! the conversation after any event of a run (`GET /threads/{id}/messages
//! ?run=RUN&event=N` or `?seq=S`), one branch's events a page at a time
//! (`GET /threads/{id}/branch`), and the comparison of two runs
//! (`GET /threads/{id}/compare`).
//!
//! A position is computed from checkpoints, never by replaying the thread
//! from its start: the conversation at the end of the run's parent is
//! restored (its checkpoint chain), and only the run's own events up to the
//! position are reduced on top. The reducer of the last few positions asked
//! for is kept, so stepping forward reduces only the events stepped over.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use agui_history::reduce::{Conversation, Reducer};
use agui_store::{RunRecord, RunStatus};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::gateway::{Gateway, store_error};
use crate::run::all_runs;

/// How many positions (reducers) are kept, for all threads together.
const KEPT_POSITIONS: usize = 8;
/// Largest page of `GET /threads/{id}/branch`.
const MAX_BRANCH_PAGE: usize = 1000;

/// The reducers of the latest positions asked for (least recent first).
#[derive(Default)]
pub(crate) struct Positions {
    kept: Mutex<VecDeque<Position>>,
}

struct Position {
    tenant: String,
    thread: String,
    run_id: String,
    first_seq: u64,
    /// Events of the run applied so far.
    applied: usize,
    reducer: Reducer,
}

impl Positions {
    /// Takes the kept reducer of this run that applied the most events but
    /// at most `upto`.
    fn take(&self, tenant: &str, thread: &str, run: &RunRecord, upto: usize) -> Option<Position> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let best = kept
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                p.tenant == tenant
                    && p.thread == thread
                    && p.run_id == run.run_id
                    && p.first_seq == run.first_seq
                    && p.applied <= upto
            })
            .max_by_key(|(_, p)| p.applied)
            .map(|(i, _)| i)?;
        kept.remove(best)
    }

    fn put(&self, p: Position) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= KEPT_POSITIONS {
            kept.pop_front();
        }
        kept.push_back(p);
    }

    /// Forgets everything kept of a thread (it was deleted).
    pub(crate) fn forget(&self, tenant: &str, thread: &str) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|p| !(p.tenant == tenant && p.thread == thread));
    }
}

/// The runs of the branch ending at `run` (root first), from the thread's
/// run list: parent links to earlier runs only, as the store follows them.
pub(crate) fn branch_path<'r>(runs: &'r [RunRecord], run: &str) -> Option<Vec<&'r RunRecord>> {
    let by_id: HashMap<&str, &RunRecord> = runs.iter().map(|r| (r.run_id.as_str(), r)).collect();
    let mut cur = *by_id.get(run)?;
    let mut path = vec![cur];
    while let Some(p) = cur.parent_run_id.as_deref().and_then(|p| by_id.get(p)) {
        if p.first_seq >= cur.first_seq {
            break;
        }
        path.push(p);
        cur = p;
    }
    path.reverse();
    Some(path)
}

fn find_run<'r>(runs: &'r [RunRecord], run: &str) -> Result<&'r RunRecord, ApiError> {
    runs.iter()
        .find(|r| r.run_id == run)
        .ok_or_else(|| ApiError::not_found(format!("no run {run:?} in this thread")))
}

fn corrupt() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "corrupt_checkpoint",
        "a stored conversation could not be read",
    )
}

fn parse_conversation(json: &str) -> Result<Conversation, ApiError> {
    serde_json::from_str(json).map_err(|_| corrupt())
}

fn reduce_error() -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "cannot_reduce",
        "the stored events cannot be reduced to a conversation",
    )
}

/// `{messages, state}` after event `n` of `run` (0 is its `RUN_STARTED`),
/// as `agui history --at RUN --event N` computes it on the thread's log.
pub(crate) async fn conversation_after(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    runs: &[RunRecord],
    run: &RunRecord,
    n: usize,
) -> Result<Value, ApiError> {
    let count = usize::try_from(run.event_count).unwrap_or(usize::MAX);
    if n >= count {
        return Err(ApiError::bad_request(
            "event_out_of_range",
            format!(
                "run {:?} has {} events (0 to {}); there is no event {n}",
                run.run_id,
                count,
                count.saturating_sub(1)
            ),
        ));
    }
    if n + 1 == count && run.status != RunStatus::Running {
        // The end of a run: its own checkpoint.
        let restored = gw
            .store
            .restore(tenant, thread, &run.run_id)
            .await
            .map_err(store_error)?;
        return serde_json::from_str(&restored.json).map_err(|_| corrupt());
    }
    let mut pos = match gw.positions.take(tenant, thread, run, n + 1) {
        Some(p) => p,
        None => {
            let base = base_of(gw, tenant, thread, runs, run).await?;
            Position {
                tenant: tenant.to_owned(),
                thread: thread.to_owned(),
                run_id: run.run_id.clone(),
                first_seq: run.first_seq,
                applied: 0,
                reducer: Reducer::new(base),
            }
        }
    };
    if pos.applied < n + 1 {
        let from = run.first_seq + pos.applied as u64;
        let to = run.first_seq + n as u64;
        let events = gw
            .store
            .read_range(tenant, thread, from, to)
            .await
            .map_err(store_error)?;
        for e in &events {
            pos.reducer.apply(&e.event).map_err(|_| reduce_error())?;
        }
        pos.applied += events.len();
    }
    let out = serde_json::to_value(pos.reducer.conversation()).map_err(|_| reduce_error())?;
    gw.positions.put(pos);
    Ok(out)
}

/// The conversation a run starts from: its parent's (restored from
/// checkpoints), or for a root run the thread's preamble reduced.
async fn base_of(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    runs: &[RunRecord],
    run: &RunRecord,
) -> Result<Conversation, ApiError> {
    let parent = run
        .parent_run_id
        .as_deref()
        .and_then(|p| runs.iter().find(|r| r.run_id == p))
        .filter(|p| p.first_seq < run.first_seq);
    match parent {
        Some(p) => {
            let restored = gw
                .store
                .restore(tenant, thread, &p.run_id)
                .await
                .map_err(store_error)?;
            parse_conversation(&restored.json)
        }
        None => {
            let first = runs.iter().map(|r| r.first_seq).min().unwrap_or(1);
            let mut reducer = Reducer::new(Conversation::default());
            if first > 1 {
                for e in gw
                    .store
                    .read_range(tenant, thread, 1, first - 1)
                    .await
                    .map_err(store_error)?
                {
                    reducer.apply(&e.event).map_err(|_| reduce_error())?;
                }
            }
            Ok(reducer.into_conversation())
        }
    }
}

/// `?run=&event=&seq=` of `GET /threads/{id}/messages`, resolved: the run
/// and the event within it (`None`: the run's end).
pub(crate) fn resolve_position<'r>(
    runs: &'r [RunRecord],
    run: Option<&str>,
    event: Option<usize>,
    seq: Option<u64>,
) -> Result<Option<(&'r RunRecord, Option<usize>)>, ApiError> {
    match (run, event, seq) {
        (_, Some(_), Some(_)) => Err(ApiError::bad_request(
            "invalid_position",
            "give event (with run) or seq, not both",
        )),
        (r, None, Some(s)) => {
            let found = runs
                .iter()
                .find(|x| x.first_seq <= s && s <= x.last_seq)
                .ok_or_else(|| {
                    ApiError::not_found(format!("no event with sequence number {s} in a run"))
                })?;
            if let Some(r) = r.filter(|r| *r != found.run_id) {
                return Err(ApiError::bad_request(
                    "invalid_position",
                    format!(
                        "sequence number {s} belongs to run {:?}, not {r:?}",
                        found.run_id
                    ),
                ));
            }
            Ok(Some((found, Some((s - found.first_seq) as usize))))
        }
        (Some(r), e, None) => Ok(Some((find_run(runs, r)?, e))),
        (None, e, None) => Ok(runs.last().map(|r| (r, e))),
    }
}

/// `GET /threads/{id}/branch` query.
#[derive(Deserialize)]
pub struct BranchQuery {
    run: Option<String>,
    offset: Option<usize>,
    limit: Option<usize>,
    #[serde(rename = "type")]
    event_type: Option<String>,
}

/// `GET /threads/{id}/branch?run=RUN&offset=&limit=&type=`: a page of the
/// events of the branch ending at `run` (default: the latest run), each
/// with its run, its index in the run, its sequence number, receive time
/// and size; plus the branch's runs with their offsets.
pub async fn get_branch(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(thread): Path<String>,
    Query(q): Query<BranchQuery>,
) -> Result<Json<Value>, ApiError> {
    let tenant = gw.tenant(&headers)?;
    gw.store
        .thread(&tenant, &thread)
        .await
        .map_err(store_error)?;
    let runs = all_runs(&gw, &tenant, &thread).await?;
    let Some(tip) = q
        .run
        .clone()
        .or_else(|| runs.last().map(|r| r.run_id.clone()))
    else {
        return Ok(Json(
            json!({"runId": null, "total": 0, "runs": [], "events": []}),
        ));
    };
    find_run(&runs, &tip)?;
    let path = branch_path(&runs, &tip).unwrap_or_default();
    let offset = q.offset.unwrap_or(0);
    let limit = q.limit.unwrap_or(200).clamp(1, MAX_BRANCH_PAGE);
    let mut run_list = Vec::with_capacity(path.len());
    let mut at = 0u64;
    for r in &path {
        run_list.push(json!({
            "runId": r.run_id, "firstSeq": r.first_seq, "eventCount": r.event_count,
            "status": r.status.as_str(), "offset": at,
        }));
        at += r.event_count;
    }
    let entry = |r: &RunRecord, e: &agui_store::StoredEvent| {
        json!({
            "seq": e.seq,
            "runId": r.run_id,
            "index": e.seq - r.first_seq,
            "type": e.event.type_name(),
            "receivedAt": crate::history::ts(e.received_at),
            "bytes": e.event.len_bytes(),
            "event": e.event.to_value(),
        })
    };
    let mut events = Vec::new();
    let total;
    match &q.event_type {
        None => {
            total = at;
            // Skip whole runs before the offset, then read only the page.
            let mut skip = offset as u64;
            for r in &path {
                if events.len() >= limit {
                    break;
                }
                if skip >= r.event_count {
                    skip -= r.event_count;
                    continue;
                }
                let from = r.first_seq + skip;
                let want = (limit - events.len()) as u64;
                let to = r.last_seq.min(from + want - 1);
                skip = 0;
                for e in gw
                    .store
                    .read_range(&tenant, &thread, from, to)
                    .await
                    .map_err(store_error)?
                {
                    events.push(entry(r, &e));
                }
            }
        }
        Some(t) => {
            let mut matched = 0u64;
            for r in &path {
                for e in gw
                    .store
                    .read_range(&tenant, &thread, r.first_seq, r.last_seq)
                    .await
                    .map_err(store_error)?
                {
                    if e.event.type_name() == t {
                        if matched >= offset as u64 && events.len() < limit {
                            events.push(entry(r, &e));
                        }
                        matched += 1;
                    }
                }
            }
            total = matched;
        }
    }
    Ok(Json(json!({
        "runId": tip,
        "total": total,
        "offset": offset,
        "runs": run_list,
        "events": events,
    })))
}

/// `GET /threads/{id}/compare` query.
#[derive(Deserialize)]
pub struct CompareQuery {
    a: String,
    b: String,
}

/// `GET /threads/{id}/compare?a=RUN&b=RUN`: where the branches ending at
/// the two runs part, the messages only one of them holds, and the state
/// difference as a JSON Patch from `a`'s state to `b`'s.
pub async fn compare(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(thread): Path<String>,
    Query(q): Query<CompareQuery>,
) -> Result<Json<Value>, ApiError> {
    let tenant = gw.tenant(&headers)?;
    gw.store
        .thread(&tenant, &thread)
        .await
        .map_err(store_error)?;
    let runs = all_runs(&gw, &tenant, &thread).await?;
    find_run(&runs, &q.a)?;
    find_run(&runs, &q.b)?;
    let pa = branch_path(&runs, &q.a).unwrap_or_default();
    let pb = branch_path(&runs, &q.b).unwrap_or_default();
    let shared = pa
        .iter()
        .zip(&pb)
        .take_while(|(x, y)| x.run_id == y.run_id)
        .count();
    let id = |r: Option<&&RunRecord>| r.map(|r| r.run_id.clone());
    let ancestor = shared.checked_sub(1).and_then(|k| id(pa.get(k)));
    let mut convs = Vec::new();
    for r in [&q.a, &q.b] {
        let restored = gw
            .store
            .restore(&tenant, &thread, r)
            .await
            .map_err(store_error)?;
        convs.push(parse_conversation(&restored.json)?);
    }
    let (ca, cb) = (&convs[0], &convs[1]);
    let common = ca
        .messages
        .iter()
        .zip(&cb.messages)
        .take_while(|(x, y)| x == y)
        .count();
    let only = |x: &Conversation, y: &Conversation| -> Vec<Value> {
        x.messages
            .iter()
            .filter(|m| !y.messages.contains(m))
            .cloned()
            .collect()
    };
    let patch = json_patch::diff(&ca.state, &cb.state);
    Ok(Json(json!({
        "a": q.a,
        "b": q.b,
        "commonAncestor": ancestor,
        "firstDivergence": {"a": id(pa.get(shared)), "b": id(pb.get(shared))},
        "branchA": pa.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>(),
        "branchB": pb.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>(),
        "commonMessages": common,
        "onlyA": only(ca, cb),
        "onlyB": only(cb, ca),
        "statePatch": patch,
    })))
}
