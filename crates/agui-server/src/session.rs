//! Multi-agent threads and session documents over HTTP: the participants of
//! a thread, each agent's channel (kept in the store at every run), and
//! `GET /threads/{id}/session`, `POST /threads/import`.

use std::collections::BTreeMap;
use std::sync::Arc;

use agui_session::{ExportOptions, ImportOptions, Layout, SessionError};
use agui_store::{Channel, RunRecord};
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::{AgentConfig, SessionMode};
use crate::error::ApiError;
use crate::gateway::{Gateway, store_error};
use crate::run::read_body;

/// The participants of a thread: every agent that ran on it or holds a
/// channel, with its run count, last run and whether it is configured here.
pub(crate) fn participants(gw: &Gateway, runs: &[RunRecord], channels: &[Channel]) -> Value {
    let mut by: BTreeMap<&str, (u64, Option<&RunRecord>)> = BTreeMap::new();
    for r in runs {
        if let Some(a) = r.agent.as_deref() {
            let e = by.entry(a).or_default();
            e.0 += 1;
            e.1 = Some(r);
        }
    }
    for c in channels {
        by.entry(c.agent.as_str()).or_default();
    }
    Value::Array(
        by.into_iter()
            .map(|(name, (count, last))| {
                json!({
                    "agent": name,
                    "runs": count,
                    "lastRunId": last.map(|r| r.run_id.as_str()),
                    "lastRunAt": last.map(|r| crate::history::ts(r.started_at)),
                    "configured": gw.agents.contains_key(name),
                })
            })
            .collect(),
    )
}

/// The upstream thread ids the agent's channel on the thread records, by
/// branch (its first run): `upstreamThreads`. Empty when there is none or
/// it cannot be read (logged).
pub(crate) async fn recorded_upstream_threads(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    agent: &str,
) -> std::collections::HashMap<String, String> {
    let channel = match gw.store.channel(tenant, thread, agent).await {
        Ok(Some(channel)) => channel,
        Ok(None) => return Default::default(),
        Err(e) => {
            tracing::warn!(thread = %thread, agent = %agent, error = %e, "cannot read a channel");
            return Default::default();
        }
    };
    let state: Value = serde_json::from_str(&channel.state).unwrap_or(Value::Null);
    state
        .get("upstreamThreads")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// Records what the gateway needs to continue `agent` on `thread`: its
/// session mode, the last run it was sent and, with per-branch upstream
/// threads, `upstream` = (the branch's first run, the upstream thread id it
/// used) under `upstreamThreads`. Fields the gateway does not know are kept
/// as they are.
pub(crate) async fn record_channel(
    gw: &Gateway,
    tenant: &str,
    thread: &str,
    agent: &AgentConfig,
    run_id: &str,
    upstream: Option<(&str, &str)>,
) {
    // Read, change, write: two runs of the thread ending at once (branches
    // side by side) must not lose each other's entries.
    let _serial = gw.channel_lock(tenant, thread).await;
    let mut state = match gw.store.channel(tenant, thread, &agent.name).await {
        Ok(Some(c)) => {
            serde_json::from_str::<serde_json::Map<String, Value>>(&c.state).unwrap_or_default()
        }
        Ok(None) => serde_json::Map::new(),
        Err(e) => {
            tracing::error!(thread = %thread, agent = %agent.name, error = %e, "cannot read a channel");
            return;
        }
    };
    let mode = match agent.sessions {
        SessionMode::Client => "client",
        SessionMode::Server => "server",
    };
    state.insert("sessions".into(), Value::String(mode.into()));
    state.insert("lastRunId".into(), Value::String(run_id.into()));
    if let Some((branch, id)) = upstream {
        let threads = state
            .entry("upstreamThreads")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if !threads.is_object() {
            *threads = Value::Object(serde_json::Map::new());
        }
        if let Some(threads) = threads.as_object_mut() {
            threads.insert(branch.to_owned(), Value::String(id.to_owned()));
        }
    }
    let text = Value::Object(state).to_string();
    if let Err(e) = gw
        .store
        .put_channel(tenant, thread, Channel::new(agent.name.clone(), text))
        .await
    {
        tracing::error!(thread = %thread, agent = %agent.name, error = %e, "cannot store a channel");
    }
}

/// Query of `GET /threads/{id}/session`.
#[derive(Deserialize)]
pub struct ExportQuery {
    /// `json` (default) or `ndjson`.
    #[serde(default)]
    format: Option<String>,
}

/// `GET /threads/{id}/session`: the thread as a session document, streamed.
pub async fn get_session(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(thread): Path<String>,
    Query(q): Query<ExportQuery>,
) -> Result<Response, ApiError> {
    let tenant = gw.tenant(&headers)?;
    let (layout, ctype) = match q.format.as_deref() {
        None | Some("json") => (Layout::Json, "application/json"),
        Some("ndjson") => (Layout::Ndjson, "application/x-ndjson"),
        Some(other) => {
            return Err(ApiError::bad_request(
                "bad_format",
                format!("format must be json or ndjson, not {other:?}"),
            ));
        }
    };
    let opts = ExportOptions {
        layout,
        progress: None,
    };
    let chunks = agui_session::export(gw.store.clone(), tenant, thread, opts)
        .await
        .map_err(session_error)?;
    let body = Body::from_stream(chunks.map(|c| {
        c.map_err(|e| {
            tracing::error!(error = %e, "session export failed midway");
            std::io::Error::other("the export failed")
        })
    }));
    Ok(([(header::CONTENT_TYPE, ctype)], body).into_response())
}

/// Query of `POST /threads/import`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportQuery {
    /// Import under this thread id.
    #[serde(rename = "as", default)]
    as_id: Option<String>,
    /// Import even when no participant is configured here.
    #[serde(default)]
    history_only: bool,
}

/// `POST /threads/import`: a session document into the caller's tenant, with
/// the gateway's agents as the available ones. 200 with the import report;
/// 409 `thread_exists`; 422 `no_agents` or the document's damage code.
pub async fn import(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Query(q): Query<ImportQuery>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let tenant = gw.tenant(&headers)?;
    let bytes = read_body(&gw, body).await?;
    let opts = ImportOptions {
        tenant: tenant.clone(),
        target: q.as_id,
        agents: Some(gw.agents.keys().cloned().collect()),
        history_only: q.history_only,
        progress: None,
    };
    let report = agui_session::import(gw.store.clone(), Arc::new(bytes), opts)
        .await
        .map_err(session_error)?;
    let closed = close_orphaned_runs(&gw, &tenant, &report.thread_id).await?;
    let mut body = serde_json::to_value(&report).map_err(|e| {
        tracing::error!(error = %e, "the import report is not JSON");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the import report could not be written",
        )
    })?;
    if let Value::Object(map) = &mut body {
        map.insert("closedRuns".into(), json!(closed));
    }
    Ok(Json(body))
}

/// Ends the runs of an imported thread that the document left `running`
/// (exported while they were in flight): no process forwards them here, so
/// left as they are they would hold the thread (409 `run_in_flight`) and
/// keep attachers waiting until a restart. Each gets its open items closed
/// and `RUN_ERROR` `interrupted`, and is counted as an interrupted run.
/// Returns their ids.
async fn close_orphaned_runs(
    gw: &Arc<Gateway>,
    tenant: &str,
    thread: &str,
) -> Result<Vec<String>, ApiError> {
    let filter = agui_store::RunFilter {
        thread_id: Some(thread.to_owned()),
        status: Some(agui_store::RunStatus::Running),
        ..Default::default()
    };
    let running = gw
        .store
        .list_runs(tenant, &filter)
        .await
        .map_err(store_error)?;
    let mut closed = Vec::new();
    for run in running.runs {
        let end = crate::gateway::RunEnd::orphaned();
        match gw.close_run(tenant, thread, &run.run_id, &end).await {
            Ok(crate::gateway::Closed::Now) => {
                gw.metrics
                    .runs_interrupted
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(thread = %thread, run = %run.run_id, "an imported run left in flight is closed (interrupted)");
                closed.push(run.run_id);
            }
            Ok(_) => {}
            Err(e) => return Err(store_error(e)),
        }
    }
    Ok(closed)
}

fn session_error(e: SessionError) -> ApiError {
    match e {
        SessionError::Damaged { damage, .. } => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            damage.code(),
            e.to_string(),
        ),
        SessionError::ThreadExists { .. } => {
            ApiError::new(StatusCode::CONFLICT, "thread_exists", e.to_string())
        }
        SessionError::NoAgents { .. } => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "no_agents", e.to_string())
        }
        SessionError::Io(_) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "unreadable_body",
            "the request body could not be read",
        ),
        SessionError::Store(s) => store_error(s),
    }
}
