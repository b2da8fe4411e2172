//! Errors: the typed error of the library and the JSON error of the API.
//!
//! Every error a client sees is `{"error":{"code":"...","message":"..."}}`
//! with a stable machine-readable `code`. Messages are written here, never
//! copied from a store or upstream error, so they cannot leak SQL, file paths
//! or upstream secrets.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to an HTTP client.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code (`unknown_agent`, `run_in_flight`, ...).
    pub code: &'static str,
    /// A human-readable explanation, safe to show.
    pub message: String,
}

impl ApiError {
    /// Builds an error.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 with a code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 500 `store_error`, with a fixed message: the cause is logged, not sent.
    pub fn store() -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "store_error",
            "the event store failed; see the gateway log",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

/// Errors of the gateway library outside request handling.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("server error: {0}")]
    Serve(#[source] std::io::Error),
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The store failed during start-up recovery.
    #[error("store error during {during}: {message}")]
    Store {
        /// What was being done.
        during: &'static str,
        /// The store's error text (for the operator's log only).
        message: String,
    },
}
