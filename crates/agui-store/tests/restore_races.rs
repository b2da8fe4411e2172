//! A thread deleted and written again (under the same run ids, by another
//! replica) while a restore of it is under way: the engine must never keep
//! the old conversation's text under the new thread's run record, or every
//! later restore would answer the old conversation.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use agui_store::sample::full_run;
use agui_store::{
    AppendRequest, Backend, Channel, CheckpointChain, Committed, EventPage, MemoryStore, Result,
    RunFilter, RunPage, RunRecord, Store, StoreStats, ThreadFilter, ThreadInfo, ThreadPage,
};
use async_trait::async_trait;

type Hook = Box<dyn FnOnce(Arc<MemoryStore>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// The memory backend, with a hook run right after the next checkpoint
/// chain is read (the moment another replica's writes can land between a
/// restore's reads).
struct Racing {
    inner: Arc<MemoryStore>,
    after_chain: Mutex<Option<Hook>>,
}

#[async_trait]
impl Backend for Racing {
    async fn commit(&self, tenant: &str, thread: &str, req: AppendRequest) -> Result<Committed> {
        self.inner.commit(tenant, thread, req).await
    }
    async fn read(&self, tenant: &str, thread: &str, from: u64, limit: usize) -> Result<EventPage> {
        self.inner.read(tenant, thread, from, limit).await
    }
    async fn run(&self, tenant: &str, thread: &str, run_id: &str) -> Result<RunRecord> {
        self.inner.run(tenant, thread, run_id).await
    }
    async fn list_runs(&self, tenant: &str, filter: &RunFilter) -> Result<RunPage> {
        self.inner.list_runs(tenant, filter).await
    }
    async fn thread(&self, tenant: &str, thread: &str) -> Result<ThreadInfo> {
        self.inner.thread(tenant, thread).await
    }
    async fn list_threads(&self, tenant: &str, filter: &ThreadFilter) -> Result<ThreadPage> {
        self.inner.list_threads(tenant, filter).await
    }
    async fn delete_thread(&self, tenant: &str, thread: &str) -> Result<()> {
        self.inner.delete_thread(tenant, thread).await
    }
    async fn rename_thread(&self, tenant: &str, from: &str, to: &str) -> Result<()> {
        self.inner.rename_thread(tenant, from, to).await
    }
    async fn tenants(&self) -> Result<Vec<String>> {
        self.inner.tenants().await
    }
    async fn load_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run: &str,
    ) -> Result<Option<Vec<u8>>> {
        self.inner.load_checkpoint(tenant, thread, run).await
    }
    async fn save_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run: &str,
        blob: Vec<u8>,
    ) -> Result<()> {
        self.inner.save_checkpoint(tenant, thread, run, blob).await
    }
    async fn mark_interrupted(&self) -> Result<u64> {
        self.inner.mark_interrupted().await
    }
    async fn stats(&self) -> Result<StoreStats> {
        self.inner.stats().await
    }
    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }
    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
    async fn channels(&self, tenant: &str, thread: &str) -> Result<Vec<Channel>> {
        self.inner.channels(tenant, thread).await
    }
    async fn put_channel(&self, tenant: &str, thread: &str, channel: Channel) -> Result<()> {
        self.inner.put_channel(tenant, thread, channel).await
    }
    async fn checkpoint_chain(
        &self,
        tenant: &str,
        thread: &str,
        run: &str,
    ) -> Result<CheckpointChain> {
        let chain = self.inner.checkpoint_chain(tenant, thread, run).await;
        let hook = self.after_chain.lock().unwrap().take();
        if let Some(hook) = hook {
            hook(self.inner.clone()).await;
        }
        chain
    }
}

fn text_of(json: &str) -> &'static str {
    if json.contains("the first conversation") {
        "first"
    } else if json.contains("the other conversation") {
        "other"
    } else {
        "neither"
    }
}

#[tokio::test]
async fn a_thread_written_again_during_a_restore_is_never_answered_with_its_old_text() {
    let inner = Arc::new(MemoryStore::new());
    let racing = Arc::new(Racing {
        inner: inner.clone(),
        after_chain: Mutex::new(None),
    });
    let store = Store::from_arc(racing.clone());
    let events = full_run("t", "r1", None, "the first conversation");
    store
        .append("ten", "t", AppendRequest::new(events))
        .await
        .unwrap();
    store.settle().await;
    store.clear_cache();

    // Right after the restore reads the chain, another replica deletes the
    // thread and writes it again: same run id, same number of events.
    *racing.after_chain.lock().unwrap() = Some(Box::new(|inner: Arc<MemoryStore>| {
        Box::pin(async move {
            tokio::time::sleep(std::time::Duration::from_millis(3)).await;
            inner.delete_thread("ten", "t").await.unwrap();
            let again = full_run("t", "r1", None, "the other conversation");
            inner
                .commit("ten", "t", AppendRequest::new(again))
                .await
                .unwrap();
        })
    }));
    let during = store.restore("ten", "t", "r1").await.unwrap();
    assert_eq!(text_of(&during.json), "first", "read before the rewrite");
    let run = store.run("ten", "t", "r1").await.unwrap();
    assert_eq!(
        run.last_seq, during.last_seq,
        "the rewrite has as many events"
    );

    for _ in 0..2 {
        let after = store.restore("ten", "t", "r1").await.unwrap();
        assert_eq!(
            text_of(&after.json),
            "other",
            "the thread as it is now, not a text kept from before it was written again"
        );
    }
}
