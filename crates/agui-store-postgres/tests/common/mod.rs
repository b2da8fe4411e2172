//! Shared test support: the server URL, a unique schema per test (dropped
//! afterwards), and below-the-API helpers.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use agui_store::{Result, StoreError};
use agui_store_postgres::{PgOptions, PgStore};

/// The server URL from `AGUI_TEST_POSTGRES_URL`. When unset: panics with a
/// clear message under `CI`, otherwise prints a notice and returns `None`
/// (the test is skipped).
pub fn url() -> Option<String> {
    match std::env::var("AGUI_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var_os("CI").is_some() => panic!(
            "AGUI_TEST_POSTGRES_URL is not set, and CI is: the PostgreSQL backend tests \
             need a server (e.g. postgres://postgres@127.0.0.1:5432/test)"
        ),
        _ => {
            eprintln!(
                "notice: AGUI_TEST_POSTGRES_URL is not set; skipping a PostgreSQL backend test"
            );
            None
        }
    }
}

/// A schema of its own, dropped (with everything in it) on drop.
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    pub fn new(url: String) -> Schema {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "agui_t_{}_{}_{}",
            std::process::id(),
            nanos,
            N.fetch_add(1, Ordering::Relaxed)
        );
        Schema { url, name }
    }

    pub fn options(&self) -> PgOptions {
        let mut o = PgOptions::from_url(&self.url).expect("AGUI_TEST_POSTGRES_URL is a URL");
        o.schema = self.name.clone();
        o.pool_size = 8;
        o
    }

    pub async fn open(&self) -> Result<PgStore> {
        PgStore::open_with(self.options()).await
    }

    /// A plain connection with the schema on its search path.
    pub async fn client(&self) -> Result<tokio_postgres::Client> {
        let o = self.options();
        let (client, conn) = tokio_postgres::connect(&o.conn, tokio_postgres::NoTls)
            .await
            .map_err(|e| StoreError::unavailable("test connection").with_source(e))?;
        tokio::spawn(conn);
        client
            .batch_execute(&format!("SET search_path = \"{}\"", self.name))
            .await
            .map_err(|e| StoreError::internal("set search_path").with_source(e))?;
        Ok(client)
    }

    /// Runs `sql` on the checkpoint row of a run; NotFound unless exactly
    /// one row changed.
    pub async fn on_checkpoint(
        &self,
        sql: &str,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<()> {
        let c = self.client().await?;
        let n = c
            .execute(
                sql,
                &[&tenant.as_bytes(), &thread.as_bytes(), &run_id.as_bytes()],
            )
            .await
            .map_err(|e| StoreError::internal("checkpoint change").with_source(e))?;
        if n == 1 {
            Ok(())
        } else {
            Err(StoreError::not_found("checkpoint"))
        }
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let conn = self.options().conn;
        let name = self.name.clone();
        // A runtime of its own: drop may run inside (or outside) another.
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let (client, c) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
                    .await
                    .ok()?;
                tokio::spawn(c);
                client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                    .await
                    .ok()
            })
        })
        .join();
        if !matches!(done, Ok(Some(()))) {
            eprintln!("warning: test schema {} could not be dropped", self.name);
        }
    }
}
