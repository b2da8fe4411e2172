//! Gateway configuration: agents, sessions, limits, auth, CORS, shutdown.
//!
//! Everything the `agui serve` flags can say, a TOML file can say too
//! ([`ServeFile`]); the CLI merges both into a [`GatewayConfig`].

use std::collections::HashMap;
use std::time::Duration;

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

/// One agent the gateway serves at `/agents/{name}/run`.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The name in the URL.
    pub name: String,
    /// Where runs go.
    pub upstream: Upstream,
    /// Session mode.
    pub sessions: SessionMode,
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
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_body_bytes: 4 * 1024 * 1024,
            max_event_bytes: 4 * 1024 * 1024,
            max_events_per_run: 1_000_000,
            upstream_connect_timeout: Duration::from_secs(5),
            upstream_idle_timeout: Duration::from_secs(120),
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
    /// How long in-flight runs may go on after a shutdown signal before the
    /// gateway closes them with `RUN_ERROR`.
    pub shutdown_grace: Duration,
    /// Close runs left `running` by a previous process at start-up. Turn off
    /// for a replica that shares its database with a live gateway.
    pub recover_on_start: bool,
}

impl Default for GatewayConfig {
    fn default() -> GatewayConfig {
        GatewayConfig {
            agents: Vec::new(),
            limits: Limits::default(),
            auth: Auth::Open,
            cors_origins: Vec::new(),
            shutdown_grace: Duration::from_secs(10),
            recover_on_start: true,
        }
    }
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
    })
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
/// shutdown_grace_ms = 10000
/// recover_on_start = true
///
/// [agents.weather]
/// url = "http://127.0.0.1:9000/agent"
/// history = "server"
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
    /// Shutdown grace.
    pub shutdown_grace_ms: Option<u64>,
    /// Recovery at start-up.
    pub recover_on_start: Option<bool>,
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
}

impl ServeFile {
    /// Parses the TOML text.
    pub fn parse(text: &str) -> Result<ServeFile, ServerError> {
        toml::from_str(text).map_err(|e| ServerError::Config(format!("config file: {e}")))
    }

    /// The agents of the file, with `default_mode` where they name none.
    pub fn agents(&self, default_mode: SessionMode) -> Result<Vec<AgentConfig>, ServerError> {
        self.agents
            .iter()
            .map(|(name, a)| agent(name, &a.url, a.history.unwrap_or(default_mode)))
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
}
