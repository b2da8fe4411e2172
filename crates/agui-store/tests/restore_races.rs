//! A thread deleted and written again (under the same run ids, by another
//! replica) while a restore of it is under way: the engine must never keep
//! the old conversation's text under the new thread's run record, or every
//! later restore would answer the old conversation.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use agui_store::conformance::hooked::{Hooked, Hooks};
use agui_store::sample::full_run;
use agui_store::{AppendRequest, Backend, CheckpointChain, MemoryStore, Result, Store};
use async_trait::async_trait;

type Hook = Box<dyn FnOnce(Arc<MemoryStore>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// A hook run right after the next checkpoint chain is read (the moment
/// another replica's writes can land between a restore's reads).
struct Racing {
    inner: Arc<MemoryStore>,
    after_chain: Mutex<Option<Hook>>,
}

#[async_trait]
impl Hooks for Racing {
    async fn checkpoint_chain(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        run: &str,
    ) -> Result<CheckpointChain> {
        let chain = inner.checkpoint_chain(tenant, thread, run).await;
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
    let racing = Arc::new(Hooked::from_arc(
        inner.clone(),
        Racing {
            inner: inner.clone(),
            after_chain: Mutex::new(None),
        },
    ));
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
    *racing.hooks().after_chain.lock().unwrap() = Some(Box::new(|inner: Arc<MemoryStore>| {
        Box::pin(async move {
            tokio::time::sleep(std::time::Duration::from_millis(3)).await;
            inner.delete_thread("ten", "t").await.unwrap();
            let again = full_run("t", "r1", None, "the other conversation");
            // The other replica: its own engine over the same storage.
            Store::from_arc(inner)
                .append("ten", "t", AppendRequest::new(again))
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
