//! The shared conformance suite against the in-memory backend.

use agui_store::conformance::Harness;
use agui_store::{MemoryStore, Result, StoreError};

/// One memory store per test; `open` after `close` is a reopen on the same data.
struct Memory(MemoryStore);

#[async_trait::async_trait]
impl Harness for Memory {
    type Store = MemoryStore;

    async fn open(&self) -> Result<MemoryStore> {
        Ok(self.0.reopen())
    }

    async fn remove_checkpoint(
        &self,
        store: &MemoryStore,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<()> {
        if store.remove_checkpoint(tenant, thread, run_id) {
            Ok(())
        } else {
            Err(StoreError::not_found("checkpoint"))
        }
    }
}

agui_store::conformance_tests!(async { Memory(MemoryStore::new()) });
