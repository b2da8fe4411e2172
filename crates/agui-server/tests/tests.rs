//! The gateway's integration tests, one binary (one link, the dependencies'
//! generic code built once instead of once per file). Each module is a topic;
//! `cargo test -p agui-server --test integration <module>::` runs one.
//! `fuzz_regressions.rs` stays a binary of its own: it includes the fuzz
//! targets' checks by path.

/// Helpers shared by every module: a gateway on a free port, SSE reading,
/// misbehaving upstreams, the end-to-end peers, the log capture.
mod common;

/// Concurrent branches as an attacker or an unlucky operator meets them.
mod branch_races;
/// Concurrent branches: set aside, joined, across restarts, stops, deletes.
mod branches;
/// Google ADK and LangGraph behind the gateway, driven by `HttpAgent`.
mod e2e_frameworks;
/// The official `HttpAgent` (1.0.0 and 0.0.59) and CopilotKit's client.
mod e2e_node;
/// pydantic-ai's AG-UI adapter behind the gateway.
mod e2e_python;
/// The gateway end to end over real HTTP, with failing upstreams.
mod gateway;
/// Multi-agent threads and session documents.
mod multi_agent;
/// Store faults, damaged data, hostile clients: what reaches whom.
mod robustness;
/// Server-managed sessions: thin clients, restated inputs.
mod sessions;
/// Stopping runs.
mod stop;
/// Time travel: every position of a forked thread.
mod travel;
/// Upstream TLS, headers and secrets.
mod upstreams;
