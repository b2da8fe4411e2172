//! The shared conformance suite against the SQLite backend, one database
//! file per test.

use agui_store::conformance::Harness;
use agui_store::{Result, StoreError};
use agui_store_sqlite::SqliteStore;

struct Sqlite(tempfile::TempDir);

impl Sqlite {
    fn db(&self) -> std::path::PathBuf {
        self.0.path().join("store.db")
    }
}

#[async_trait::async_trait]
impl Harness for Sqlite {
    type Store = SqliteStore;

    async fn open(&self) -> Result<SqliteStore> {
        SqliteStore::open_path(&self.db()).await
    }

    async fn remove_checkpoint(
        &self,
        _store: &SqliteStore,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<()> {
        // Below the API: a separate connection deletes the row.
        let conn = rusqlite::Connection::open(self.db())
            .map_err(|e| StoreError::internal(e.to_string()))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| StoreError::internal(e.to_string()))?;
        let n = conn
            .execute(
                "DELETE FROM checkpoints WHERE run_id = ?3 AND thread_id =
                 (SELECT id FROM threads WHERE tenant = ?1 AND thread = ?2)",
                rusqlite::params![tenant.as_bytes(), thread.as_bytes(), run_id.as_bytes()],
            )
            .map_err(|e| StoreError::internal(e.to_string()))?;
        if n == 1 {
            Ok(())
        } else {
            Err(StoreError::not_found("checkpoint"))
        }
    }

    async fn damage_checkpoint(
        &self,
        _store: &SqliteStore,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<()> {
        // Below the API: flip a byte of the stored blob in place.
        let conn = rusqlite::Connection::open(self.db())
            .map_err(|e| StoreError::internal(e.to_string()))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| StoreError::internal(e.to_string()))?;
        let n = conn
            .execute(
                "UPDATE checkpoints SET blob = CAST(substr(blob, 1, length(blob) / 2)
                   || X'5A' || substr(blob, length(blob) / 2 + 2) AS BLOB)
                 WHERE run_id = ?3 AND thread_id =
                 (SELECT id FROM threads WHERE tenant = ?1 AND thread = ?2)",
                rusqlite::params![tenant.as_bytes(), thread.as_bytes(), run_id.as_bytes()],
            )
            .map_err(|e| StoreError::internal(e.to_string()))?;
        if n == 1 {
            Ok(())
        } else {
            Err(StoreError::not_found("checkpoint"))
        }
    }
}

agui_store::conformance_tests!(async {
    Sqlite(tempfile::tempdir().expect("a temporary directory"))
});
