//! Shared by the CLI tests: a PostgreSQL schema of its own per test, and
//! `agui serve` started as a child process.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The PostgreSQL server of the tests: `AGUI_TEST_POSTGRES_URL`. Unset: a
/// failure under `CI`, otherwise a notice and a skip.
pub fn postgres_url() -> Option<String> {
    match std::env::var("AGUI_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var_os("CI").is_some() => panic!(
            "AGUI_TEST_POSTGRES_URL is not set, and CI is: the PostgreSQL tests need a \
             PostgreSQL server (e.g. postgres://postgres@127.0.0.1:5432/test)"
        ),
        _ => {
            eprintln!("notice: AGUI_TEST_POSTGRES_URL is not set; skipping a PostgreSQL test");
            None
        }
    }
}

/// A schema of its own in the test database, dropped at the end.
pub struct PgSchema {
    url: String,
    name: String,
}

impl PgSchema {
    pub fn new(url: String) -> PgSchema {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!("agui_cli_{}_{nanos}", std::process::id());
        PgSchema { url, name }
    }

    pub fn store_url(&self) -> String {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}schema={}", self.url, self.name)
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = self.url.clone();
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name);
        rt.block_on(async move {
            if let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
                tokio::spawn(conn);
                let _ = client.batch_execute(&sql).await;
            }
        });
    }
}

/// A running `agui serve` child, killed when dropped.
pub struct Server {
    pub child: Child,
    /// `host:port` it listens on.
    pub addr: String,
    /// What it logged up to and including the "listening" line.
    pub startup: Vec<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Resident memory of the gateway process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
}

/// Starts `agui serve --listen 127.0.0.1:0 ARGS` in `dir` (without the
/// environment's data dir and token); reads the address from the start-up
/// log, then keeps draining the log so the server never blocks on a full
/// pipe.
pub fn serve(dir: &Path, args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agui"))
        .arg("serve")
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .current_dir(dir)
        .env_remove("AGUI_DATA_DIR")
        .env_remove("AGUI_AUTH_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut startup = Vec::new();
    let addr = loop {
        let line = lines
            .next()
            .expect("agui serve exited before listening")
            .unwrap();
        let addr = line
            .split("listening on http://")
            .nth(1)
            .map(|rest| rest.trim().to_owned());
        startup.push(line);
        if let Some(addr) = addr {
            break addr;
        }
    };
    std::thread::spawn(move || for _ in lines.by_ref() {});
    Server {
        child,
        addr,
        startup,
    }
}
