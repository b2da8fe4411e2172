//! The shared conformance suite against the PostgreSQL backend, one schema
//! per test (created on open, dropped afterwards). Needs
//! `AGUI_TEST_POSTGRES_URL`; without it the tests are skipped with a notice,
//! or fail when `CI` is set.

mod common;

use agui_store::Result;
use agui_store::conformance::Harness;
use agui_store_postgres::PgStore;
use common::Schema;

struct Pg(Schema);

#[async_trait::async_trait]
impl Harness for Pg {
    type Store = PgStore;

    async fn open(&self) -> Result<PgStore> {
        self.0.open().await
    }

    async fn remove_checkpoint(
        &self,
        _store: &PgStore,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<()> {
        // Below the API: another connection deletes the row.
        self.0
            .on_checkpoint(
                "DELETE FROM checkpoints c USING threads t WHERE c.thread_id = t.id \
                 AND t.tenant = $1 AND t.thread = $2 AND c.run_id = $3",
                tenant,
                thread,
                run_id,
            )
            .await
    }

    async fn damage_checkpoint(
        &self,
        _store: &PgStore,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<()> {
        // Below the API: flip bits of the middle byte in place.
        self.0
            .on_checkpoint(
                "UPDATE checkpoints c SET blob = set_byte(c.blob, length(c.blob) / 2, \
                   get_byte(c.blob, length(c.blob) / 2) # 90) \
                 FROM threads t WHERE c.thread_id = t.id \
                 AND t.tenant = $1 AND t.thread = $2 AND c.run_id = $3",
                tenant,
                thread,
                run_id,
            )
            .await
    }
}

/// A fresh schema, or (without a server URL, outside CI) `None`.
fn backend() -> Option<std::future::Ready<Pg>> {
    common::url().map(|u| std::future::ready(Pg(Schema::new(u))))
}

agui_store::conformance_tests!(match backend() {
    Some(b) => b,
    None => return,
});
