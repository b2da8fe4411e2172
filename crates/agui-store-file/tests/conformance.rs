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

/// A run's checkpoint chain is read in one go, each delta's base found in
/// its blob: a cold restore composes it at once, and it equals what the
/// engine restores.
#[tokio::test]
async fn a_cold_restore_reads_the_whole_checkpoint_chain_at_once() {
    use agui_store::sample::full_run;
    use agui_store::{AppendRequest, Backend, Store, checkpoint};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    let mut parent: Option<String> = None;
    for k in 0..40 {
        let run = format!("r{k}");
        let events = full_run("t", &run, parent.as_deref(), &format!("answer {k}"));
        store
            .append("ten", "t", AppendRequest::new(events))
            .await
            .unwrap();
        parent = Some(run);
    }
    store.close().await.unwrap();
    let backend = FileStore::open(dir.path(), FileOptions::default())
        .await
        .unwrap();
    for k in [39, 38, 31, 24, 0] {
        let run = format!("r{k}");
        let chain = backend.checkpoint_chain("ten", "t", &run).await.unwrap();
        let composed = checkpoint::compose_links(&run, chain.last_seq, &chain.links)
            .unwrap_or_else(|| {
                panic!(
                    "run {run}: the chain read does not compose ({} links)",
                    chain.links.len()
                )
            });
        let store = Store::new(backend.clone());
        let restored = store.restore("ten", "t", &run).await.unwrap();
        assert!(restored.from_checkpoint);
        assert_eq!(composed, *restored.json, "run {run}");
        if k == 39 {
            assert!(
                chain.links.len() > 1,
                "the last run's checkpoint is a delta"
            );
        }
    }
}
