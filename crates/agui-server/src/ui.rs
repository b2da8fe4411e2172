//! The web console at `/ui/`: three static files compiled into the binary
//! (`crates/agui-server/ui/`), served with a strict Content-Security-Policy.
//! The console reads everything through the public HTTP API with the user's
//! bearer token; these routes serve no data, so they need no token.
//!
//! No JavaScript build step: the files are plain HTML, CSS and JavaScript
//! (an ES module), written to be read as they are (see ARCHITECTURE.md).

use std::sync::Arc;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::error::ApiError;
use crate::gateway::Gateway;

/// The console's policy: scripts, styles and fetches from this origin only;
/// no inline script or style, no eval, no framing, no plugins.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

const INDEX: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const APP_CSS: &str = include_str!("../ui/app.css");
const ICON: &str = include_str!("../ui/icon.svg");

/// The console's routes (merged into the gateway's router unless `--ui off`).
pub(crate) fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(index))
        .route("/ui/threads/{id}", get(index))
        .route("/ui/assets/{file}", get(asset))
}

fn page(content_type: &'static str, body: &'static str) -> Response {
    let mut res = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

async fn index() -> Response {
    page("text/html; charset=utf-8", INDEX)
}

async fn asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    Ok(match file.as_str() {
        "app.js" => page("text/javascript; charset=utf-8", APP_JS),
        "app.css" => page("text/css; charset=utf-8", APP_CSS),
        "icon.svg" => page("image/svg+xml", ICON),
        _ => return Err(ApiError::not_found("no such console file")),
    })
}
