//! Gateway configuration: agents, sessions, limits, auth, CORS, shutdown.
//!
//! Everything the `agui serve` flags can say, a TOML file can say too
//! ([`ServeFile`]); the CLI merges both into a [`GatewayConfig`].

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue};
use serde::Deserialize;

use crate::error::ServerError;

/// How a thread's conversation reaches the upstream agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// The client's messages are passed through as they are.
    #[default]
    Client,
    /// The stored conversation of the parent run is merged with the client's
    /// messages (by id, no duplicates) before forwarding.
    Server,
}

impl SessionMode {
    /// Reads `client` or `server`.
    pub fn parse(s: &str) -> Result<SessionMode, ServerError> {
        match s {
            "client" => Ok(SessionMode::Client),
            "server" => Ok(SessionMode::Server),
            other => Err(ServerError::Config(format!(
                "history mode must be `client` or `server`, not `{other}`"
            ))),
        }
    }
}

/// Where an agent lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// An AG-UI agent over HTTP POST + SSE at this URL.
    Http(String),
    /// The built-in demo agent, served by the gateway itself at
    /// `/demo/agent` (the gateway forwards to it over HTTP like any other).
    Demo,
}

/// What a run does when its client disconnects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDisconnect {
    /// The run goes on and is stored to its end (attach to it later).
    #[default]
    Continue,
    /// The run is stopped as by `POST /threads/{id}/runs/{run}/stop`.
    Cancel,
}

impl OnDisconnect {
    /// Reads `continue` or `cancel`.
    pub fn parse(s: &str) -> Result<OnDisconnect, ServerError> {
        match s {
            "continue" => Ok(OnDisconnect::Continue),
            "cancel" => Ok(OnDisconnect::Cancel),
            other => Err(ServerError::Config(format!(
                "on_disconnect must be `continue` or `cancel`, not `{other}`"
            ))),
        }
    }
}

/// Which thread id the upstream agent sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamThread {
    /// The user's thread id for every run (stateless upstreams, or stateful
    /// ones on a thread that never branches).
    #[default]
    Shared,
    /// A run that does not continue the upstream's latest state of its
    /// thread goes upstream under a branch-specific thread id with its
    /// branch's whole history (stateful frameworks: ADK, LangGraph).
    PerBranch,
}

impl UpstreamThread {
    /// Reads `shared` or `per-branch`.
    pub fn parse(s: &str) -> Result<UpstreamThread, ServerError> {
        match s {
            "shared" => Ok(UpstreamThread::Shared),
            "per-branch" => Ok(UpstreamThread::PerBranch),
            other => Err(ServerError::Config(format!(
                "upstream_thread must be `shared` or `per-branch`, not `{other}`"
            ))),
        }
    }
}

/// Headers the gateway adds to every request to one upstream (an API key,
/// for instance). Their values never appear in logs, `Debug` output, stored
/// events, exports or error messages.
#[derive(Clone, Default)]
pub struct UpstreamHeaders(pub Vec<(HeaderName, HeaderValue)>);

impl std::fmt::Debug for UpstreamHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(n, _)| format!("{n}: <redacted>")))
            .finish()
    }
}

/// One agent the gateway serves at `/agents/{name}/run`.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The name in the URL.
    pub name: String,
    /// Where runs go.
    pub upstream: Upstream,
    /// Session mode.
    pub sessions: SessionMode,
    /// Client request headers forwarded to this agent (lower case), besides
    /// the gateway-wide [`GatewayConfig::forward_headers`].
    pub forward_headers: Vec<HeaderName>,
    /// Headers added to every request to this agent (they win over a
    /// forwarded header of the same name).
    pub upstream_headers: UpstreamHeaders,
    /// A PEM file of extra CA certificates trusted for this agent's HTTPS
    /// upstream (besides the system's and the bundled roots).
    pub ca_file: Option<PathBuf>,
    /// What a run does when its client disconnects.
    pub on_disconnect: OnDisconnect,
    /// Which thread id the upstream sees.
    pub upstream_thread: UpstreamThread,
}

/// Limits, with clear errors when exceeded.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Largest event from an upstream, in bytes of JSON.
    pub max_event_bytes: usize,
    /// Most events in one run (the gateway closes the run beyond it).
    pub max_events_per_run: u64,
    /// Upstream TCP connect timeout.
    pub upstream_connect_timeout: Duration,
    /// Longest silence from an upstream (waiting for headers, or between
    /// two reads of the body) before the run is closed with `RUN_ERROR`.
    pub upstream_idle_timeout: Duration,
    /// Longest wait for a client's request head (line and headers); the
    /// connection is closed beyond it.
    pub header_read_timeout: Duration,
    /// Longest wait for a client's whole request body (408 `body_timeout`).
    pub body_read_timeout: Duration,
    /// Most client connections open at once; beyond it a new connection
    /// gets 503 `too_many_connections` and is closed.
    pub max_connections: usize,
    /// Most bytes of a run's frames waiting for the client that started it
    /// (not yet taken by its connection); beyond it the client's stream is
    /// cut and it reattaches with `Last-Event-ID` (see `outbox`).
    pub client_buffer_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_body_bytes: 4 * 1024 * 1024,
            max_event_bytes: 4 * 1024 * 1024,
            max_events_per_run: 1_000_000,
            upstream_connect_timeout: Duration::from_secs(5),
            upstream_idle_timeout: Duration::from_secs(120),
            // Generous for a phone on a poor network: a request head is a
            // few hundred bytes, a 4 MiB body at 1 Mbit/s takes about 35 s.
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(120),
            max_connections: 4096,
            // Four times the largest event: a client that keeps reading
            // never gets near it, one that stopped holds at most this.
            client_buffer_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Who may call the gateway.
#[derive(Debug, Clone, Default)]
pub enum Auth {
    /// Anyone; everything belongs to the tenant `default`.
    #[default]
    Open,
    /// `Authorization: Bearer <token>` required; each token maps to a tenant.
    Tokens(HashMap<String, String>),
}

impl Auth {
    /// Reads a tokens file: one `TOKEN TENANT` pair a line, `#` comments and
    /// blank lines ignored.
    pub fn parse_tokens_file(text: &str) -> Result<HashMap<String, String>, ServerError> {
        let mut map = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(token), Some(tenant), None) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(ServerError::Config(format!(
                    "tokens file line {}: expected `TOKEN TENANT`",
                    i + 1
                )));
            };
            // Control characters are refused: the store keeps a tenant's
            // runs set aside under its name and `\u{1f}aside`.
            if tenant.chars().any(char::is_control) {
                return Err(ServerError::Config(format!(
                    "tokens file line {}: the tenant name holds a control character",
                    i + 1
                )));
            }
            if map.insert(token.to_owned(), tenant.to_owned()).is_some() {
                return Err(ServerError::Config(format!(
                    "tokens file line {}: the token is listed twice",
                    i + 1
                )));
            }
        }
        if map.is_empty() {
            return Err(ServerError::Config("the tokens file lists no token".into()));
        }
        Ok(map)
    }
}

/// Everything the gateway needs besides its store.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The agents; empty means the demo agent under the name `demo`.
    pub agents: Vec<AgentConfig>,
    /// Limits.
    pub limits: Limits,
    /// Auth.
    pub auth: Auth,
    /// Origins allowed by CORS (`*` for any); empty disables CORS.
    pub cors_origins: Vec<String>,
    /// Request headers CORS allows besides the built-in list (the forwarded
    /// headers are allowed too).
    pub cors_headers: Vec<HeaderName>,
    /// Client request headers forwarded to every upstream (lower case).
    pub forward_headers: Vec<HeaderName>,
    /// How long in-flight runs may go on after a shutdown signal before the
    /// gateway closes them with `RUN_ERROR`.
    pub shutdown_grace: Duration,
    /// Close runs left `running` by a previous process at start-up. Turn off
    /// for a replica that shares its database with a live gateway.
    pub recover_on_start: bool,
    /// Serve the web console at `/ui/`.
    pub ui: bool,
    /// Serve CopilotKit's runtime routes (`{prefix}/info`,
    /// `{prefix}/agent/{name}/run|connect|stop/{threadId}`) under this path
    /// prefix (normalized by [`copilotkit_prefix`]: `""` is the root); `None`
    /// serves none.
    pub copilotkit_prefix: Option<String>,
}

impl Default for GatewayConfig {
    fn default() -> GatewayConfig {
        GatewayConfig {
            agents: Vec::new(),
            limits: Limits::default(),
            auth: Auth::Open,
            cors_origins: Vec::new(),
            cors_headers: Vec::new(),
            forward_headers: Vec::new(),
            shutdown_grace: Duration::from_secs(10),
            recover_on_start: true,
            ui: true,
            copilotkit_prefix: None,
        }
    }
}

/// Checks and normalizes the path prefix of CopilotKit's routes: it starts
/// with `/`, has no trailing `/` (`/` alone is the root, `""`), no empty
/// segment, and no `{`, `}`, `?`, `#` or `*`.
pub fn copilotkit_prefix(p: &str) -> Result<String, ServerError> {
    let bad = |why: &str| {
        ServerError::Config(format!(
            "the CopilotKit prefix `{p}` {why} (expected a path such as /copilotkit)"
        ))
    };
    if !p.starts_with('/') {
        return Err(bad("does not start with /"));
    }
    let trimmed = p.trim_end_matches('/');
    if trimmed.contains("//") {
        return Err(bad("has an empty segment"));
    }
    if trimmed.contains(['{', '}', '?', '#', '*', ' ']) {
        return Err(bad("holds a character a route path cannot"));
    }
    Ok(trimmed.to_owned())
}

/// Parses `NAME=URL` (an `--agent` flag). The URL `demo` names the built-in
/// demo agent.
pub fn parse_agent_flag(s: &str, sessions: SessionMode) -> Result<AgentConfig, ServerError> {
    let (name, url) = s
        .split_once('=')
        .ok_or_else(|| ServerError::Config(format!("--agent needs NAME=URL, got `{s}`")))?;
    agent(name, url, sessions)
}

/// Parses `NAME=client|server` (an `--agent-history` flag): the session
/// mode of one agent, overriding the default `--history`.
pub fn parse_agent_history_flag(s: &str) -> Result<(String, SessionMode), ServerError> {
    let (name, mode) = s.split_once('=').ok_or_else(|| {
        ServerError::Config(format!(
            "--agent-history needs NAME=client|server, got `{s}`"
        ))
    })?;
    Ok((name.to_owned(), SessionMode::parse(mode)?))
}

/// Sets the session mode of the agent named `name`; an error when no such
/// agent is configured.
pub fn set_agent_history(
    agents: &mut [AgentConfig],
    name: &str,
    mode: SessionMode,
) -> Result<(), ServerError> {
    let agent = agents.iter_mut().find(|a| a.name == name).ok_or_else(|| {
        ServerError::Config(format!(
            "--agent-history {name}=...: no agent named `{name}` is configured"
        ))
    })?;
    agent.sessions = mode;
    Ok(())
}

fn agent(name: &str, url: &str, sessions: SessionMode) -> Result<AgentConfig, ServerError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Err(ServerError::Config(format!(
            "agent name `{name}` must be non-empty ASCII letters, digits, `-`, `_` or `.`"
        )));
    }
    let upstream = if url == "demo" {
        Upstream::Demo
    } else if url.starts_with("http://") || url.starts_with("https://") {
        Upstream::Http(url.to_owned())
    } else {
        return Err(ServerError::Config(format!(
            "agent `{name}`: the URL must start with http:// or https:// (or be `demo`)"
        )));
    };
    Ok(AgentConfig {
        name: name.to_owned(),
        upstream,
        sessions,
        forward_headers: Vec::new(),
        upstream_headers: UpstreamHeaders::default(),
        ca_file: None,
        on_disconnect: OnDisconnect::default(),
        upstream_thread: UpstreamThread::default(),
    })
}

/// The demo agent under `name`.
pub fn demo_agent(name: &str) -> AgentConfig {
    AgentConfig {
        name: name.to_owned(),
        upstream: Upstream::Demo,
        sessions: SessionMode::Client,
        forward_headers: Vec::new(),
        upstream_headers: UpstreamHeaders::default(),
        ca_file: None,
        on_disconnect: OnDisconnect::default(),
        upstream_thread: UpstreamThread::default(),
    }
}

/// Headers the gateway sets itself or that belong to one hop only: never
/// forwarded from a client nor set by configuration.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "accept",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-connection",
];

/// Reads a header name for `--forward-header` / `forward_headers` /
/// `cors_headers` (lower-cased); hop-by-hop and gateway-set headers are
/// refused.
pub fn parse_header_name(what: &str, name: &str) -> Result<HeaderName, ServerError> {
    let h = HeaderName::from_bytes(name.trim().to_ascii_lowercase().as_bytes())
        .map_err(|_| ServerError::Config(format!("{what}: `{name}` is not a header name")))?;
    if RESERVED_HEADERS.contains(&h.as_str()) {
        return Err(ServerError::Config(format!(
            "{what}: `{h}` is set by the gateway itself and cannot be forwarded or configured"
        )));
    }
    Ok(h)
}

/// Expands `${VAR}` in a configured header value from the environment.
/// Errors name the header and the variable, never the value.
fn expand_env(
    agent: &str,
    header: &str,
    value: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ServerError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| {
            ServerError::Config(format!(
                "agent `{agent}` header `{header}`: an unclosed `${{` in its value"
            ))
        })?;
        let var = &after[..end];
        let v = env(var).ok_or_else(|| {
            ServerError::Config(format!(
                "agent `{agent}` header `{header}`: the environment variable `{var}` is not set"
            ))
        })?;
        out.push_str(&v);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Parses `NAME=VALUE` for a per-agent flag.
fn name_value<'a>(flag: &str, s: &'a str, what: &str) -> Result<(&'a str, &'a str), ServerError> {
    s.split_once('=')
        .ok_or_else(|| ServerError::Config(format!("{flag} needs NAME={what}, got `{s}`")))
}

/// The agent named `name`, for a per-agent flag.
pub fn agent_mut<'a>(
    agents: &'a mut [AgentConfig],
    flag: &str,
    name: &str,
) -> Result<&'a mut AgentConfig, ServerError> {
    agents.iter_mut().find(|a| a.name == name).ok_or_else(|| {
        ServerError::Config(format!(
            "{flag} {name}=...: no agent named `{name}` is configured"
        ))
    })
}

/// Applies `--agent-upstream-thread NAME=shared|per-branch`.
pub fn apply_upstream_thread_flag(agents: &mut [AgentConfig], s: &str) -> Result<(), ServerError> {
    let flag = "--agent-upstream-thread";
    let (name, v) = name_value(flag, s, "shared|per-branch")?;
    let mode = UpstreamThread::parse(v)?;
    agent_mut(agents, flag, name)?.upstream_thread = mode;
    Ok(())
}

/// Applies `--agent-on-disconnect NAME=continue|cancel`.
pub fn apply_on_disconnect_flag(agents: &mut [AgentConfig], s: &str) -> Result<(), ServerError> {
    let flag = "--agent-on-disconnect";
    let (name, v) = name_value(flag, s, "continue|cancel")?;
    let policy = OnDisconnect::parse(v)?;
    agent_mut(agents, flag, name)?.on_disconnect = policy;
    Ok(())
}

/// Applies `--agent-ca-file NAME=PATH`.
pub fn apply_ca_file_flag(agents: &mut [AgentConfig], s: &str) -> Result<(), ServerError> {
    let flag = "--agent-ca-file";
    let (name, v) = name_value(flag, s, "PATH")?;
    agent_mut(agents, flag, name)?.ca_file = Some(PathBuf::from(v));
    Ok(())
}

/// The `--config FILE` TOML: every flag of `agui serve`.
///
/// ```toml
/// listen = "127.0.0.1:8080"
/// store = "sqlite://./.agui/agui.db"
/// history = "client"            # default session mode
/// auth_token = "secret"         # or tokens_file = "tokens.txt"
/// cors_origins = ["http://localhost:3000"]
/// max_body_bytes = 4194304
/// max_event_bytes = 4194304
/// max_events_per_run = 1000000
/// upstream_connect_timeout_ms = 5000
/// upstream_idle_timeout_ms = 120000
/// header_read_timeout_ms = 30000
/// body_read_timeout_ms = 120000
/// max_connections = 4096
/// client_buffer_bytes = 16777216
/// shutdown_grace_ms = 10000
/// recover_on_start = true
///
/// cors_headers = ["x-app-version"]
/// forward_headers = ["x-request-id"]
///
/// [agents.weather]
/// url = "https://weather.example/agent"
/// history = "server"
/// forward_headers = ["authorization"]
/// ca_file = "/etc/agui/internal-ca.pem"
/// on_disconnect = "cancel"            # or "continue" (default)
/// upstream_thread = "per-branch"      # or "shared" (default)
/// [agents.weather.headers]
/// x-api-key = "${WEATHER_API_KEY}"    # ${VAR}: from the environment
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeFile {
    /// Listen address.
    pub listen: Option<String>,
    /// Store URL.
    pub store: Option<String>,
    /// Default session mode.
    pub history: Option<SessionMode>,
    /// Single bearer token (tenant `default`).
    pub auth_token: Option<String>,
    /// Tokens file path.
    pub tokens_file: Option<String>,
    /// CORS origins.
    pub cors_origins: Option<Vec<String>>,
    /// Limits.
    pub max_body_bytes: Option<usize>,
    /// Limits.
    pub max_event_bytes: Option<usize>,
    /// Limits.
    pub max_events_per_run: Option<u64>,
    /// Limits.
    pub upstream_connect_timeout_ms: Option<u64>,
    /// Limits.
    pub upstream_idle_timeout_ms: Option<u64>,
    /// Limits.
    pub header_read_timeout_ms: Option<u64>,
    /// Limits.
    pub body_read_timeout_ms: Option<u64>,
    /// Limits.
    pub max_connections: Option<usize>,
    /// Limits.
    pub client_buffer_bytes: Option<usize>,
    /// Shutdown grace.
    pub shutdown_grace_ms: Option<u64>,
    /// Recovery at start-up.
    pub recover_on_start: Option<bool>,
    /// The web console at `/ui/` (default on).
    pub ui: Option<bool>,
    /// Extra request headers CORS allows.
    pub cors_headers: Option<Vec<String>>,
    /// Client headers forwarded to every upstream.
    pub forward_headers: Option<Vec<String>>,
    /// The path prefix of CopilotKit's runtime routes (none when absent).
    pub copilotkit_prefix: Option<String>,
    /// Agents by name.
    #[serde(default)]
    pub agents: std::collections::BTreeMap<String, FileAgent>,
}

/// One agent in the config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAgent {
    /// Upstream URL (or `demo`).
    pub url: String,
    /// Session mode of this agent (default: the file's or flag's `history`).
    pub history: Option<SessionMode>,
    /// Client headers forwarded to this agent.
    #[serde(default)]
    pub forward_headers: Vec<String>,
    /// Headers sent to this agent (values may hold `${VAR}`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Extra CA certificates (PEM) for this agent's HTTPS upstream.
    pub ca_file: Option<PathBuf>,
    /// What a run does when its client disconnects.
    pub on_disconnect: Option<OnDisconnect>,
    /// Which thread id the upstream sees.
    pub upstream_thread: Option<UpstreamThread>,
}

impl ServeFile {
    /// Parses the TOML text.
    pub fn parse(text: &str) -> Result<ServeFile, ServerError> {
        toml::from_str(text).map_err(|e| ServerError::Config(format!("config file: {e}")))
    }

    /// The agents of the file, with `default_mode` where they name none.
    pub fn agents(&self, default_mode: SessionMode) -> Result<Vec<AgentConfig>, ServerError> {
        self.agents_with_env(default_mode, &|k| std::env::var(k).ok())
    }

    /// [`ServeFile::agents`] with `${VAR}` read through `env`.
    pub fn agents_with_env(
        &self,
        default_mode: SessionMode,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<AgentConfig>, ServerError> {
        self.agents
            .iter()
            .map(|(name, a)| -> Result<AgentConfig, ServerError> {
                let mut c = agent(name, &a.url, a.history.unwrap_or(default_mode))?;
                let what = format!("agent `{name}` forward_headers");
                c.forward_headers = a
                    .forward_headers
                    .iter()
                    .map(|h| parse_header_name(&what, h))
                    .collect::<Result<_, _>>()?;
                for (h, v) in &a.headers {
                    let hn = parse_header_name(&format!("agent `{name}` headers"), h)?;
                    let value = expand_env(name, h, v, env)?;
                    let mut hv = HeaderValue::from_str(&value).map_err(|_| {
                        ServerError::Config(format!(
                            "agent `{name}` header `{h}`: the value is not a valid header value"
                        ))
                    })?;
                    hv.set_sensitive(true);
                    c.upstream_headers.0.push((hn, hv));
                }
                c.ca_file = a.ca_file.clone();
                c.on_disconnect = a.on_disconnect.unwrap_or_default();
                c.upstream_thread = a.upstream_thread.unwrap_or_default();
                Ok(c)
            })
            .collect()
    }

    /// The file's `forward_headers`, checked.
    pub fn forward_header_names(&self) -> Result<Vec<HeaderName>, ServerError> {
        self.forward_headers
            .iter()
            .flatten()
            .map(|h| parse_header_name("forward_headers", h))
            .collect()
    }

    /// The file's `cors_headers`, checked.
    pub fn cors_header_names(&self) -> Result<Vec<HeaderName>, ServerError> {
        self.cors_headers
            .iter()
            .flatten()
            .map(|h| parse_header_name("cors_headers", h))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_flags() {
        let a = parse_agent_flag("w=http://x:1/a", SessionMode::Server).unwrap();
        assert_eq!(a.upstream, Upstream::Http("http://x:1/a".into()));
        assert_eq!(a.sessions, SessionMode::Server);
        assert_eq!(
            parse_agent_flag("d=demo", SessionMode::Client)
                .unwrap()
                .upstream,
            Upstream::Demo
        );
        assert!(parse_agent_flag("nourl", SessionMode::Client).is_err());
        assert!(parse_agent_flag("a b=http://x", SessionMode::Client).is_err());
        assert!(parse_agent_flag("a=ftp://x", SessionMode::Client).is_err());
    }

    #[test]
    fn per_agent_history_flags() {
        let mut agents = vec![
            parse_agent_flag("a=demo", SessionMode::Client).unwrap(),
            parse_agent_flag("b=http://x/", SessionMode::Client).unwrap(),
        ];
        let (name, mode) = parse_agent_history_flag("b=server").unwrap();
        set_agent_history(&mut agents, &name, mode).unwrap();
        assert_eq!(agents[0].sessions, SessionMode::Client);
        assert_eq!(agents[1].sessions, SessionMode::Server);
        assert!(parse_agent_history_flag("b").is_err());
        assert!(parse_agent_history_flag("b=both").is_err());
        assert!(set_agent_history(&mut agents, "zzz", SessionMode::Server).is_err());
    }

    #[test]
    fn tokens_file() {
        let m = Auth::parse_tokens_file("# c\n\nt1 acme\nt2  globex \n").unwrap();
        assert_eq!(m.get("t1").map(String::as_str), Some("acme"));
        assert_eq!(m.get("t2").map(String::as_str), Some("globex"));
        assert!(Auth::parse_tokens_file("t1\n").is_err());
        let aside = Auth::parse_tokens_file("t1 acme\u{1f}aside\n").unwrap_err();
        assert!(aside.to_string().contains("control character"), "{aside}");
        assert!(Auth::parse_tokens_file("t1 a\nt1 b\n").is_err());
        assert!(Auth::parse_tokens_file("# nothing\n").is_err());
    }

    #[test]
    fn config_file() {
        let f = ServeFile::parse(
            "listen = \"127.0.0.1:1\"\nhistory = \"server\"\n[agents.x]\nurl = \"demo\"\n[agents.y]\nurl = \"http://h/\"\nhistory = \"client\"\n",
        )
        .unwrap();
        assert_eq!(f.listen.as_deref(), Some("127.0.0.1:1"));
        let agents = f.agents(f.history.unwrap()).unwrap();
        assert_eq!(agents.len(), 2);
        assert_eq!(agents[0].sessions, SessionMode::Server);
        assert_eq!(agents[1].sessions, SessionMode::Client);
        assert!(ServeFile::parse("bogus = 1").is_err());
    }

    #[test]
    fn agent_headers_from_the_environment_stay_secret() {
        let f = ServeFile::parse(
            "forward_headers = [\"X-Request-Id\"]\n[agents.x]\nurl = \"https://h/\"\nforward_headers = [\"Authorization\"]\nupstream_thread = \"per-branch\"\non_disconnect = \"cancel\"\nca_file = \"/ca.pem\"\n[agents.x.headers]\nx-api-key = \"k-${KEY}-${KEY}\"\n",
        )
        .unwrap();
        let env = |k: &str| (k == "KEY").then(|| "s3cret".to_owned());
        let agents = f.agents_with_env(SessionMode::Client, &env).unwrap();
        let a = &agents[0];
        assert_eq!(a.upstream_thread, UpstreamThread::PerBranch);
        assert_eq!(a.on_disconnect, OnDisconnect::Cancel);
        assert_eq!(
            a.forward_headers,
            vec![HeaderName::from_static("authorization")]
        );
        assert_eq!(a.upstream_headers.0[0].1, "k-s3cret-s3cret");
        assert_eq!(a.ca_file.as_deref(), Some(std::path::Path::new("/ca.pem")));
        assert!(!format!("{a:?}").contains("s3cret"));
        assert_eq!(
            f.forward_header_names().unwrap(),
            vec![HeaderName::from_static("x-request-id")]
        );
        // A missing variable is named; no value is shown.
        let e = f
            .agents_with_env(SessionMode::Client, &|_| None)
            .unwrap_err();
        assert!(e.to_string().contains("`KEY` is not set"), "{e}");
        // Hop-by-hop and gateway-set headers are refused.
        assert!(parse_header_name("f", "Content-Length").is_err());
        assert!(parse_header_name("f", "bad header").is_err());
    }

    #[test]
    fn per_agent_flags() {
        let mut agents = vec![parse_agent_flag("a=demo", SessionMode::Client).unwrap()];
        apply_upstream_thread_flag(&mut agents, "a=per-branch").unwrap();
        apply_on_disconnect_flag(&mut agents, "a=cancel").unwrap();
        apply_ca_file_flag(&mut agents, "a=/x.pem").unwrap();
        assert_eq!(agents[0].upstream_thread, UpstreamThread::PerBranch);
        assert_eq!(agents[0].on_disconnect, OnDisconnect::Cancel);
        assert!(apply_upstream_thread_flag(&mut agents, "a=forked").is_err());
        assert!(apply_on_disconnect_flag(&mut agents, "b=cancel").is_err());
    }
}
