//! The shared conformance suite against the file backend, one directory per
//! test.

use agui_store::conformance::Harness;
use agui_store::{Result, StoreError};
use agui_store_file::{FileOptions, FileStore};

struct File(tempfile::TempDir);

#[async_trait::async_trait]
impl Harness for File {
    type Store = FileStore;

    async fn open(&self) -> Result<FileStore> {
        // Small segments, so that sealing and reads from sealed segments
        // happen during the suite too.
        let opts = FileOptions {
            segment_bytes: 256 * 1024,
            block_bytes: 16 * 1024,
            ..FileOptions::default()
        };
        FileStore::open(self.0.path(), opts).await
    }

    async fn remove_checkpoint(
        &self,
        store: &FileStore,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<()> {
        if store.remove_checkpoint(tenant, thread, run_id).await? {
            Ok(())
        } else {
            Err(StoreError::not_found("checkpoint"))
        }
    }
}

agui_store::conformance_tests!(async { File(tempfile::tempdir().expect("a temporary directory")) });
