//! A PostgreSQL schema of its own per test, shared by the CLI tests.

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
