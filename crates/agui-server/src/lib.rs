//! `agui serve`: the AG-UI gateway.
//!
//! It sits between AG-UI clients and agents: `POST /agents/{name}/run` takes a
//! `RunAgentInput`, forwards it to the upstream agent (HTTP POST + SSE),
//! stores every event in an [`agui_store::Store`] and only then streams it
//! back as SSE with `id: <thread sequence number>`. History, attach (with
//! `Last-Event-ID`), AG-UI `connect`, branching and server-managed sessions
//! are built on the stored log. See `docs/server.md`.
//!
//! The crate is generic over the store: it holds an `Store` and
//! never names a backend.

mod app;
mod aside;
mod copilotkit;
mod gateway;
mod history;
#[doc(hidden)]
pub mod input;
#[doc(hidden)]
pub mod merge;
mod outbox;
mod run;
mod session;
mod stop;
mod tracker;
mod travel;
pub mod ui;
pub mod upstream;
mod upstream_thread;

pub mod config;
pub mod demo;
pub mod error;
pub mod metrics;
pub mod sse;

pub use app::{router, serve};
pub use config::{
    AgentConfig, Auth, GatewayConfig, Limits, OnDisconnect, ServeFile, SessionMode, Upstream,
    UpstreamThread,
};
pub use error::{ApiError, ServerError};
pub use gateway::{DEFAULT_TENANT, Gateway};
