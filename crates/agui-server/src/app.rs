//! The HTTP surface: routes, CORS, and serving with graceful shutdown.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::error::{ApiError, ServerError};
use crate::gateway::Gateway;
use crate::{copilotkit, demo, history, run, session, stop, travel, ui};

/// The gateway's routes.
pub fn router(gw: Arc<Gateway>) -> Router {
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/agents/{name}/run", post(run::run_handler))
        .route("/agents/{name}/connect", post(history::connect))
        .route("/threads", get(history::list_threads))
        .route(
            "/threads/{id}",
            get(history::get_thread).delete(history::delete_thread),
        )
        .route("/threads/import", post(session::import))
        .route("/threads/{id}/session", get(session::get_session))
        .route("/threads/{id}/messages", get(history::get_messages))
        .route("/threads/{id}/events", get(history::get_events))
        .route("/threads/{id}/branch", get(travel::get_branch))
        .route("/threads/{id}/compare", get(travel::compare))
        .route(
            "/threads/{id}/runs/{run}/artifact",
            get(history::get_artifact),
        )
        .route("/threads/{id}/runs/{run}/stop", post(stop::stop_handler))
        .route("/demo/agent", post(demo::handler));
    if gw.config.ui {
        app = app.merge(ui::routes());
    }
    if let Some(prefix) = &gw.config.copilotkit_prefix {
        app = app.merge(copilotkit::routes(prefix));
    }
    let mut app = app
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(gw.clone());
    if let Some(cors) = cors_layer(&gw) {
        app = app.layer(cors);
    }
    app.layer(axum::middleware::from_fn(json_errors))
}

/// Longest request target (path and query) routed, in bytes; longer gets a
/// JSON 414. (hyper itself answers 414 with an empty body beyond 65,534.)
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// Makes every error answer JSON, whoever wrote it: the extractors'
/// rejections (query and path decoding, 405, 413 of a body limit) are plain
/// text in axum; they become `{"error":{"code","message"}}` here, with a
/// code that says what failed. Overlong request targets get 414 before
/// routing.
async fn json_errors(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("the request target is longer than {MAX_URI_BYTES} bytes"),
        )
        .into_response();
    }
    // A query whose escapes do not decode to UTF-8 (`?prefix=%FF`) would
    // reach the handlers with U+FFFD in place of its bytes (the query
    // extractor decodes lossily) and be answered as if it were valid.
    if let Some(q) = req.uri().query()
        && percent_encoding::percent_decode_str(q)
            .decode_utf8()
            .is_err()
    {
        return ApiError::bad_request(
            "bad_request",
            "the query string does not decode: a percent escape is not UTF-8",
        )
        .into_response();
    }
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let code = match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "body_timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::URI_TOO_LONG => "uri_too_long",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_request",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    };
    let (parts, body) = resp.into_parts();
    // The rejections' texts are axum's (what failed to decode, and where);
    // they carry no secrets. Bounded all the same.
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let mut message = String::from_utf8_lossy(&text).trim().to_owned();
    if message.is_empty() {
        message = status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_owned();
    }
    let mut out = ApiError::new(status, code, message).into_response();
    for (k, v) in parts.headers.iter() {
        if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
            out.headers_mut().insert(k.clone(), v.clone());
        }
    }
    out
}

/// A 405. A browser's CORS preflight only gets here when CORS is off (the
/// CORS layer answers preflights itself), so it is told how to turn it on.
async fn method_not_allowed(method: Method, headers: axum::http::HeaderMap) -> ApiError {
    let preflight =
        method == Method::OPTIONS && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let message = if preflight {
        "a CORS preflight, and CORS is off: start the gateway with --cors-origin ORIGIN \
         (`cors_origins` in its config file) to let a browser app on that origin in"
    } else {
        "this route does not take that method"
    };
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        message,
    )
}

/// CORS for every route (the layer answers preflights itself, for any
/// path): the configured origins; the built-in request headers, the
/// configured `cors_headers` and every forwarded header.
fn cors_layer(gw: &Gateway) -> Option<CorsLayer> {
    let origins = &gw.config.cors_origins;
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
            .allow_headers(cors_headers(gw)),
    )
}

/// The request headers CORS allows.
fn cors_headers(gw: &Gateway) -> Vec<HeaderName> {
    let mut out = vec![
        header::CONTENT_TYPE,
        header::AUTHORIZATION,
        header::ACCEPT,
        HeaderName::from_static("last-event-id"),
    ];
    let agents = gw.agents().flat_map(|a| a.forward_headers.iter());
    for h in gw
        .config
        .cors_headers
        .iter()
        .chain(&gw.config.forward_headers)
        .chain(agents)
    {
        if !out.contains(h) {
            out.push(h.clone());
        }
    }
    out
}

async fn healthz() -> impl IntoResponse {
    axum::Json(serde_json::json!({"status": "ok"}))
}

/// How long readiness waits for the store's answer.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Readiness, for load balancers and orchestrators (liveness is
/// `/healthz`): 200 while the gateway takes runs; 503 with the reason
/// while it shuts down, or while its store does not take writes (a store
/// whose flush to disk failed refuses them until reopened; a database that
/// does not answer within 2 s).
async fn readyz(State(gw): State<Arc<Gateway>>) -> Response {
    if gw.shutting_down.is_cancelled() {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the gateway is shutting down",
        )
        .into_response();
    }
    match store_ready(&gw).await {
        Ok(()) => axum::Json(serde_json::json!({"status": "ready"})).into_response(),
        Err(message) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            message,
        )
        .into_response(),
    }
}

/// Whether the store takes writes, within [`READY_TIMEOUT`]; else why, in
/// the store's own words (no SQL, no path: the native error, kept as the
/// source, goes to the log only).
async fn store_ready(gw: &Gateway) -> Result<(), String> {
    match tokio::time::timeout(READY_TIMEOUT, gw.store.ready()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, source = ?std::error::Error::source(&e), "the store is not ready");
            Err(e.message().to_owned())
        }
        Err(_) => {
            tracing::warn!("the store did not answer the readiness check in time");
            Err("the store did not answer within 2 s".to_owned())
        }
    }
}

async fn metrics(State(gw): State<Arc<Gateway>>) -> impl IntoResponse {
    let mut text = gw.metrics.render();
    let ready = u8::from(store_ready(&gw).await.is_ok());
    text.push_str(&format!(
        "# HELP agui_store_ready 1 while the store takes writes (see /readyz), else 0.\n\
         # TYPE agui_store_ready gauge\nagui_store_ready {ready}\n"
    ));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

/// Serves until `shutdown` resolves, then stops accepting, lets in-flight
/// runs finish up to the grace period, closes the rest with `RUN_ERROR`, and
/// flushes the store.
///
/// Connections are HTTP/1.1 driven by hyper directly (not `axum::serve`), for
/// what a server exposed to real clients needs: a request head must arrive
/// within [`crate::Limits::header_read_timeout`], and at most
/// [`crate::Limits::max_connections`] connections are open at once (a
/// connection beyond that gets a JSON 503 and is closed).
pub async fn serve(
    gw: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let app = router(gw.clone());
    let limits = gw.config.limits.clone();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let conns = tokio_util::task::TaskTracker::new();
    let stop_conns = tokio_util::sync::CancellationToken::new();
    let drained = {
        let gw = gw.clone();
        async move {
            gw.shutting_down.cancelled().await;
            gw.drain_runs().await;
        }
    };
    let drain_task = tokio::spawn(drained);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => break,
        };
        let (stream, _) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: wait a little.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            gw.metrics
                .connections_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            conns.spawn(refuse(stream, limits.max_connections));
            continue;
        };
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = http
            .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
            .with_upgrades();
        let stop = stop_conns.clone();
        conns.spawn(async move {
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    tracing::info!("shutting down: no new connections; waiting for runs in flight");
    gw.begin_shutdown();
    // Idle keep-alive connections close now; streams end with their runs.
    stop_conns.cancel();
    conns.close();
    let _ = drain_task.await;
    conns.wait().await;
    if let Err(e) = gw.store.flush().await {
        tracing::error!(error = %e, "cannot flush the store at shutdown");
    }
    Ok(())
}

/// Answers a connection over the cap with a JSON 503 and closes it.
async fn refuse(mut stream: tokio::net::TcpStream, max: usize) {
    use tokio::io::AsyncWriteExt;
    let body = serde_json::json!({"error": {"code": "too_many_connections", "message": format!("the gateway serves at most {max} connections at once; retry later")}}).to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(body.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}
