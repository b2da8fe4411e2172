//! CopilotKit's runtime routes, so a CopilotKit app sets its `runtimeUrl` to
//! the gateway and needs no CopilotKit runtime of its own.
//!
//! The shapes are those of CopilotKit's client core (`@copilotkit/core`, its
//! `ProxiedCopilotRuntimeAgent` in the REST transport), under the configured
//! prefix `P` ([`crate::GatewayConfig::copilotkit_prefix`]):
//!
//! - `GET P/info`: `{version, agents: {name: {description}}, mode: "sse"}`;
//!   the client discovers the agents from it;
//! - `POST P/agent/{name}/run`: a `RunAgentInput`, answered as
//!   `POST /agents/{name}/run` (stored, then streamed);
//! - `POST P/agent/{name}/connect`: a `RunAgentInput`, answered as
//!   `POST /agents/{name}/connect` (the stored conversation, then the live
//!   tail of a run in flight);
//! - `POST P/agent/{name}/stop/{threadId}`, body `{runId}` (or none, for
//!   the thread's run in flight): stops the run as
//!   `POST /threads/{id}/runs/{run}/stop`.

use std::sync::Arc;

use agui_store::RunStatus;
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::run::{all_runs, read_body, unknown_agent};
use crate::{history, run, stop};

/// The routes under `prefix` (normalized: `""` or `/a/b`).
pub(crate) fn routes(prefix: &str) -> Router<Arc<Gateway>> {
    Router::new()
        .route(&format!("{prefix}/info"), get(info))
        .route(
            &format!("{prefix}/agent/{{name}}/run"),
            post(run::run_handler),
        )
        .route(
            &format!("{prefix}/agent/{{name}}/connect"),
            post(history::connect),
        )
        .route(
            &format!("{prefix}/agent/{{name}}/stop/{{thread}}"),
            post(stop_agent),
        )
}

/// `GET P/info`: the runtime's description as CopilotKit's client reads it.
async fn info(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    gw.tenant(&headers)?;
    let mut agents = Map::new();
    for a in gw.agents() {
        agents.insert(
            a.name.clone(),
            json!({"description": format!("{} through agui serve", a.name)}),
        );
    }
    Ok(Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "agents": agents,
        "mode": "sse",
    })))
}

/// `POST P/agent/{name}/stop/{threadId}` with an optional `{runId}` body.
async fn stop_agent(
    State(gw): State<Arc<Gateway>>,
    Path((name, thread)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let tenant = gw.tenant(&headers)?;
    if !gw.agents.contains_key(&name) {
        return Err(unknown_agent(&name));
    }
    let bytes = read_body(&gw, body).await?;
    let run_id = if bytes.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let v: Value = serde_json::from_slice(&bytes).map_err(|_| {
            ApiError::bad_request("invalid_json", "the body must be a JSON object {runId}")
        })?;
        match v.get("runId") {
            None | Some(Value::Null) => None,
            Some(Value::String(r)) => Some(r.clone()),
            Some(_) => {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    "runId must be a string",
                ));
            }
        }
    };
    let run_id = match run_id {
        Some(r) => r,
        None => {
            // No run named: the thread's run in flight.
            let runs = all_runs(&gw, &tenant, &thread).await?;
            match runs.iter().rev().find(|r| r.status == RunStatus::Running) {
                Some(r) => r.run_id.clone(),
                None => {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "run_not_running",
                        "no run of this thread is in flight",
                    ));
                }
            }
        }
    };
    stop::stop_run(&gw, &tenant, &thread, &run_id).await
}
