//! The HTTP surface: routes, CORS, and serving with graceful shutdown.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::error::{ApiError, ServerError};
use crate::gateway::Gateway;
use crate::{demo, history, run};

/// The gateway's routes.
pub fn router(gw: Arc<Gateway>) -> Router {
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/agents/{name}/run", post(run::run_handler))
        .route("/agents/{name}/connect", post(history::connect))
        .route("/threads", get(history::list_threads))
        .route(
            "/threads/{id}",
            get(history::get_thread).delete(history::delete_thread),
        )
        .route("/threads/{id}/messages", get(history::get_messages))
        .route("/threads/{id}/events", get(history::get_events))
        .route(
            "/threads/{id}/runs/{run}/artifact",
            get(history::get_artifact),
        )
        .route("/demo/agent", post(demo::handler))
        .fallback(not_found)
        .with_state(gw.clone());
    if let Some(cors) = cors_layer(&gw.config.cors_origins) {
        app = app.layer(cors);
    }
    app
}

fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect::<Vec<_>>(),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
            .allow_headers([
                header::CONTENT_TYPE,
                header::AUTHORIZATION,
                header::ACCEPT,
                HeaderName::from_static("last-event-id"),
            ]),
    )
}

async fn healthz() -> impl IntoResponse {
    axum::Json(serde_json::json!({"status": "ok"}))
}

async fn metrics(State(gw): State<Arc<Gateway>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        gw.metrics.render(),
    )
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

/// Serves until `shutdown` resolves, then stops accepting, lets in-flight
/// runs finish up to the grace period, closes the rest with `RUN_ERROR`, and
/// flushes the store.
pub async fn serve(
    gw: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let app = router(gw.clone());
    let gw2 = gw.clone();
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections; waiting for runs in flight");
        gw2.begin_shutdown();
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(signal);
    let drained = async {
        gw.shutting_down.cancelled().await;
        gw.drain_runs().await;
    };
    // The server ends when every connection closed; runs are drained
    // meanwhile (their client streams end with them).
    let (served, ()) = tokio::join!(server.into_future(), drained);
    served.map_err(ServerError::Serve)?;
    if let Err(e) = gw.store.flush().await {
        tracing::error!(error = %e, "cannot flush the store at shutdown");
    }
    Ok(())
}
