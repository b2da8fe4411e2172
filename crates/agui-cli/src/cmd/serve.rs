//! `agui serve`: run the AG-UI gateway.
//!
//! With no arguments it listens on 127.0.0.1:8080, stores everything in
//! `sqlite://<data dir>/agui.db` (data dir: `$AGUI_DATA_DIR`, else `./.agui`,
//! created on first start) and serves the built-in demo agent as `demo`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agui_server::config::{
    apply_ca_file_flag, apply_on_disconnect_flag, apply_upstream_thread_flag, parse_agent_flag,
    parse_agent_history_flag, parse_header_name, set_agent_history,
};
use agui_server::{Auth, GatewayConfig, Limits, ServeFile, SessionMode};
use anyhow::{Context, bail};

/// Arguments of `agui serve`.
#[derive(clap::Args)]
pub struct Args {
    /// Address to listen on [default: 127.0.0.1:8080]
    #[arg(long)]
    listen: Option<String>,
    /// Store URL: sqlite://PATH, file:///DIR, postgres://USER@HOST/DB or
    /// memory:// [default: sqlite://<data dir>/agui.db; data dir:
    /// $AGUI_DATA_DIR, else ./.agui]
    #[arg(long)]
    store: Option<String>,
    /// An upstream agent, NAME=URL (repeatable); URL `demo` is the built-in
    /// demo agent [default: the demo agent as `demo`]
    #[arg(long = "agent", value_name = "NAME=URL")]
    agents: Vec<String>,
    /// Session mode of the agents given with --agent: client (pass the
    /// client's messages through) or server (merge the stored conversation)
    /// [default: client]
    #[arg(long, value_name = "client|server")]
    history: Option<String>,
    /// The session mode of one agent, NAME=client|server (repeatable); wins
    /// over --history and the config file for that agent
    #[arg(long = "agent-history", value_name = "NAME=MODE")]
    agent_history: Vec<String>,
    /// A TOML file holding any of these settings (flags win)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Require `Authorization: Bearer TOKEN` (tenant `default`) [default: no
    /// authentication]
    #[arg(long, env = "AGUI_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    /// A file of `TOKEN TENANT` lines: bearer tokens and their tenants
    #[arg(long, value_name = "FILE")]
    tokens_file: Option<PathBuf>,
    /// Allowed browser origin for CORS (repeatable; `*` for any) [default:
    /// none, so browsers' cross-origin requests are refused]
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    cors_origins: Vec<String>,
    /// Serve CopilotKit's runtime routes under this path prefix (e.g.
    /// /copilotkit), so a CopilotKit app's runtimeUrl can point here
    #[arg(long = "copilotkit-prefix", value_name = "PATH")]
    copilotkit_prefix: Option<String>,
    /// Allow this request header in CORS besides the built-in ones (repeatable)
    #[arg(long = "cors-header", value_name = "NAME")]
    cors_headers: Vec<String>,
    /// Forward this client request header to every upstream (repeatable)
    #[arg(long = "forward-header", value_name = "NAME")]
    forward_headers: Vec<String>,
    /// Which thread id one agent sees, NAME=shared|per-branch (repeatable):
    /// per-branch for stateful frameworks (ADK, LangGraph) so branches branch
    #[arg(long = "agent-upstream-thread", value_name = "NAME=MODE")]
    agent_upstream_thread: Vec<String>,
    /// What one agent's run does when its client disconnects,
    /// NAME=continue|cancel (repeatable) [default: continue]
    #[arg(long = "agent-on-disconnect", value_name = "NAME=POLICY")]
    agent_on_disconnect: Vec<String>,
    /// Extra CA certificates (PEM) trusted for one agent's HTTPS upstream,
    /// NAME=PATH (repeatable)
    #[arg(long = "agent-ca-file", value_name = "NAME=PATH")]
    agent_ca_file: Vec<String>,
    /// Largest request body, in bytes [default: 4194304]
    #[arg(long)]
    max_body_bytes: Option<usize>,
    /// Largest upstream event, in bytes [default: 4194304]
    #[arg(long)]
    max_event_bytes: Option<usize>,
    /// Most events in one run [default: 1000000]
    #[arg(long)]
    max_events_per_run: Option<u64>,
    /// Upstream connect timeout, in milliseconds [default: 5000]
    #[arg(long)]
    upstream_connect_timeout_ms: Option<u64>,
    /// Longest upstream silence, in milliseconds [default: 120000]
    #[arg(long)]
    upstream_idle_timeout_ms: Option<u64>,
    /// Longest wait for a client's request line and headers, in
    /// milliseconds; the connection is closed beyond it [default: 30000]
    #[arg(long)]
    header_read_timeout_ms: Option<u64>,
    /// Longest wait for a client's whole request body, in milliseconds (408
    /// `body_timeout` beyond it) [default: 120000]
    #[arg(long)]
    body_read_timeout_ms: Option<u64>,
    /// Most client connections open at once; a connection beyond it gets
    /// 503 `too_many_connections` [default: 4096]
    #[arg(long)]
    max_connections: Option<usize>,
    /// Most bytes of a run's frames that may wait for the client that
    /// started it; a client further behind (it stopped reading) has its
    /// stream cut and can attach again with `Last-Event-ID`
    /// [default: 16777216]
    #[arg(long)]
    client_buffer_bytes: Option<usize>,
    /// How long in-flight runs may finish after SIGINT/SIGTERM, in
    /// milliseconds [default: 10000]
    #[arg(long)]
    shutdown_grace_ms: Option<u64>,
    /// Skip start-up recovery: leave runs marked running as they are. By
    /// default a starting gateway closes as interrupted the runs whose
    /// gateway is gone (on a shared PostgreSQL database, only those: a live
    /// replica's runs stay running, so replicas need no flag)
    #[arg(long)]
    no_recover: bool,
    /// The web console at /ui/: on or off [default: on]
    #[arg(long, value_name = "on|off")]
    ui: Option<Switch>,
    /// When a file store's log is damaged in the middle (not a torn tail),
    /// cut it at the first damaged record and start, instead of refusing to
    /// start (`agui store check` shows the damage first)
    #[arg(long)]
    repair: bool,
}

/// `on` or `off`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Switch {
    On,
    Off,
}

/// The data directory: `$AGUI_DATA_DIR`, else `./.agui`.
fn data_dir() -> PathBuf {
    std::env::var_os("AGUI_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".agui"))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let file = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read the config file {}", p.display()))?;
            ServeFile::parse(&text)?
        }
        None => ServeFile::default(),
    };
    let mode = match args.history.as_deref() {
        Some(m) => SessionMode::parse(m)?,
        None => file.history.unwrap_or_default(),
    };
    let mut agents = file.agents(mode)?;
    for a in &args.agents {
        let parsed = parse_agent_flag(a, mode)?;
        agents.retain(|x| x.name != parsed.name);
        agents.push(parsed);
    }
    if agents.is_empty() {
        // The implicit demo agent, made explicit to carry the default mode.
        agents.push(parse_agent_flag("demo=demo", mode)?);
    }
    for h in &args.agent_history {
        let (name, mode) = parse_agent_history_flag(h)?;
        set_agent_history(&mut agents, &name, mode)?;
    }
    for f in &args.agent_upstream_thread {
        apply_upstream_thread_flag(&mut agents, f)?;
    }
    for f in &args.agent_on_disconnect {
        apply_on_disconnect_flag(&mut agents, f)?;
    }
    for f in &args.agent_ca_file {
        apply_ca_file_flag(&mut agents, f)?;
    }
    let mut forward_headers = file.forward_header_names()?;
    for h in &args.forward_headers {
        forward_headers.push(parse_header_name("--forward-header", h)?);
    }
    let mut cors_headers = file.cors_header_names()?;
    for h in &args.cors_headers {
        cors_headers.push(parse_header_name("--cors-header", h)?);
    }
    let d = Limits::default();
    let ms = Duration::from_millis;
    let limits = Limits {
        max_body_bytes: args
            .max_body_bytes
            .or(file.max_body_bytes)
            .unwrap_or(d.max_body_bytes),
        max_event_bytes: args
            .max_event_bytes
            .or(file.max_event_bytes)
            .unwrap_or(d.max_event_bytes),
        max_events_per_run: args
            .max_events_per_run
            .or(file.max_events_per_run)
            .unwrap_or(d.max_events_per_run),
        upstream_connect_timeout: args
            .upstream_connect_timeout_ms
            .or(file.upstream_connect_timeout_ms)
            .map(ms)
            .unwrap_or(d.upstream_connect_timeout),
        upstream_idle_timeout: args
            .upstream_idle_timeout_ms
            .or(file.upstream_idle_timeout_ms)
            .map(ms)
            .unwrap_or(d.upstream_idle_timeout),
        header_read_timeout: args
            .header_read_timeout_ms
            .or(file.header_read_timeout_ms)
            .map(ms)
            .unwrap_or(d.header_read_timeout),
        body_read_timeout: args
            .body_read_timeout_ms
            .or(file.body_read_timeout_ms)
            .map(ms)
            .unwrap_or(d.body_read_timeout),
        max_connections: args
            .max_connections
            .or(file.max_connections)
            .unwrap_or(d.max_connections),
        client_buffer_bytes: args
            .client_buffer_bytes
            .or(file.client_buffer_bytes)
            .unwrap_or(d.client_buffer_bytes),
    };
    if limits.max_connections == 0 {
        bail!("--max-connections must be at least 1");
    }
    let auth = match (
        args.auth_token.or(file.auth_token.clone()),
        args.tokens_file
            .or(file.tokens_file.clone().map(PathBuf::from)),
    ) {
        (Some(_), Some(_)) => bail!("give either --auth-token or --tokens-file, not both"),
        (Some(t), None) => {
            if t.is_empty() {
                bail!("--auth-token must not be empty");
            }
            Auth::Tokens([(t, agui_server::DEFAULT_TENANT.to_owned())].into())
        }
        (None, Some(p)) => {
            let text = std::fs::read_to_string(&p)
                .with_context(|| format!("cannot read the tokens file {}", p.display()))?;
            Auth::Tokens(Auth::parse_tokens_file(&text)?)
        }
        (None, None) => Auth::Open,
    };
    let mut cors = file.cors_origins.clone().unwrap_or_default();
    cors.extend(args.cors_origins);
    let config = GatewayConfig {
        agents,
        limits,
        auth,
        cors_origins: cors,
        cors_headers,
        forward_headers,
        shutdown_grace: args
            .shutdown_grace_ms
            .or(file.shutdown_grace_ms)
            .map(ms)
            .unwrap_or(Duration::from_secs(10)),
        recover_on_start: !args.no_recover && file.recover_on_start.unwrap_or(true),
        ui: match args.ui {
            Some(v) => v == Switch::On,
            None => file.ui.unwrap_or(true),
        },
        copilotkit_prefix: args
            .copilotkit_prefix
            .or(file.copilotkit_prefix.clone())
            .map(|p| agui_server::config::copilotkit_prefix(&p))
            .transpose()?,
    };
    let listen = args
        .listen
        .or(file.listen.clone())
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let store_url = match args.store.or(file.store.clone()) {
        Some(u) => u,
        None => {
            let dir = data_dir();
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
            format!("sqlite://{}/agui.db", dir.display())
        }
    };
    init_logging();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let access = if args.repair {
        super::store::Access::Repair
    } else {
        super::store::Access::ReadWrite
    };
    rt.block_on(serve(listen, store_url, access, config))?;
    Ok(ExitCode::SUCCESS)
}

/// In a diagnostic build (`--features taskdump`, with `RUSTFLAGS="--cfg
/// tokio_unstable --cfg tokio_taskdump"`), `SIGUSR1` writes every task's
/// await trace to standard error: where each task of a stalled gateway
/// waits (docs/scaling.md used it to find a pool deadlock).
#[cfg(all(feature = "taskdump", tokio_unstable))]
fn spawn_task_dumper() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut sig) = signal(SignalKind::user_defined1()) else {
        return;
    };
    tokio::spawn(async move {
        while sig.recv().await.is_some() {
            let dump = tokio::runtime::Handle::current().dump().await;
            let mut out = String::new();
            for (i, task) in dump.tasks().iter().enumerate() {
                out.push_str(&format!("task {i}:\n{}\n", task.trace()));
            }
            eprintln!("{out}");
        }
    });
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("AGUI_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, never in a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = if std::env::var("AGUI_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

async fn serve(
    listen: String,
    store_url: String,
    access: super::store::Access,
    config: GatewayConfig,
) -> anyhow::Result<()> {
    #[cfg(all(feature = "taskdump", tokio_unstable))]
    spawn_task_dumper();
    let store = super::store::open_store_with(&store_url, access).await?;
    let recover = config.recover_on_start;
    let ui = config.ui;
    let gw = Arc::new(agui_server::Gateway::new(store, config)?);
    if recover {
        let n = gw.recover_at_start().await?;
        if n > 0 {
            tracing::warn!(
                runs = n,
                "closed runs left in flight by a previous process as interrupted"
            );
        }
    }
    let listener = bind(&listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    let agents: Vec<String> = gw.agents().map(|a| a.name.clone()).collect();
    eprintln!("agui serve: listening on http://{addr}");
    for a in &agents {
        eprintln!(
            "  agent {a}: POST http://{addr}/agents/{a}/run  (connect: POST http://{addr}/agents/{a}/connect)"
        );
    }
    eprintln!(
        "  history: GET http://{addr}/threads  health: GET http://{addr}/healthz, /readyz  metrics: GET http://{addr}/metrics"
    );
    eprintln!("  demo agent (direct): POST http://{addr}/demo/agent");
    if ui {
        eprintln!("  console: http://{addr}/ui/");
    }
    eprintln!("  store: {}", redact(&store_url));
    agui_server::serve(gw.clone(), listener, shutdown_signal()).await?;
    gw.store().close().await.ok();
    Ok(())
}

/// Connections the kernel queues for `accept` at most (it caps the figure at
/// `net.core.somaxconn`). The default of a Tokio listener is 128 here, and a
/// burst of clients beyond it (a thousand attaching to one run at once) had
/// the overflow wait a whole second for the SYN to be sent again.
const LISTEN_BACKLOG: u32 = 4096;

/// Listens on the first address `listen` resolves to where a listener can
/// be made (as Tokio's `bind` does: any failure moves on to the next
/// address, and the last error is the answer).
async fn bind(listen: &str) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host(listen).await? {
        match listen_on(addr) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "could not resolve to any address",
        )
    }))
}

fn listen_on(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As the standard listener does on Unix: a restarted server binds its
    // port while the old connections are in TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A store URL without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}://{}:***{}", &url[..s], &creds[..c], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of connections beyond Tokio's default backlog (128) queues
    /// for `accept` instead of having its SYNs dropped: every connect
    /// completes while the server accepts none.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_burst_of_connections_waits_in_the_accept_queue() {
        // The kernel caps the backlog at `net.core.somaxconn`.
        let cap = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        if cap.is_none_or(|c| c <= 512) {
            eprintln!("skipped: net.core.somaxconn is {cap:?}, below the burst");
            return;
        }
        let listener = bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connects = (0..512).map(|_| tokio::net::TcpStream::connect(addr));
        let all = futures::future::try_join_all(connects);
        // With a backlog of 128 the rest would wait for SYN retries that
        // never get in (nothing accepts), and the timeout would fire.
        let streams = tokio::time::timeout(std::time::Duration::from_secs(20), all)
            .await
            .expect("connections beyond the backlog waited for SYN retries")
            .unwrap();
        assert_eq!(streams.len(), 512);
        drop(listener);
    }

    /// The defaults written in `agui serve --help` are the gateway's.
    #[test]
    fn help_states_the_real_defaults() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let help = Cli::command().render_long_help().to_string();
        let d = Limits::default();
        for (flag, value) in [
            ("--max-body-bytes", d.max_body_bytes.to_string()),
            ("--max-event-bytes", d.max_event_bytes.to_string()),
            ("--max-events-per-run", d.max_events_per_run.to_string()),
            (
                "--upstream-connect-timeout-ms",
                d.upstream_connect_timeout.as_millis().to_string(),
            ),
            (
                "--upstream-idle-timeout-ms",
                d.upstream_idle_timeout.as_millis().to_string(),
            ),
            ("--shutdown-grace-ms", "10000".to_owned()),
            (
                "--header-read-timeout-ms",
                d.header_read_timeout.as_millis().to_string(),
            ),
            (
                "--body-read-timeout-ms",
                d.body_read_timeout.as_millis().to_string(),
            ),
            ("--max-connections", d.max_connections.to_string()),
            ("--client-buffer-bytes", d.client_buffer_bytes.to_string()),
            ("--agent-on-disconnect", "continue".to_owned()),
            ("--ui", "on".to_owned()),
        ] {
            let at = help.find(flag).expect(flag);
            let next = help[at + flag.len()..]
                .find("\n  -")
                .map_or(help.len(), |n| at + flag.len() + n);
            assert!(
                help[at..next].contains(&format!("[default: {value}]")),
                "{flag}: {}",
                &help[at..next]
            );
        }
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact("sqlite://./.agui/agui.db"),
            "sqlite://./.agui/agui.db"
        );
    }
}
