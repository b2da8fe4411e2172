//! A thread deleted and written again while a subscription's catch-up read
//! of it is in flight: the subscription must end, never yield the new
//! thread's events as if they continued the log it followed.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};

use agui_protocol::Event;
use agui_store::conformance::hooked::{Hooked, Hooks};
use agui_store::{AppendRequest, Backend, EventPage, MemoryStore, Result, Store};
use async_trait::async_trait;
use futures::StreamExt;

type Hook = Box<dyn FnOnce(Store) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// A hook run at the start of the next read, before the backend answers
/// it (the moment a delete and a rewrite can land while a read is in
/// flight).
#[derive(Default)]
struct DuringRead {
    store: OnceLock<Store>,
    before_read: Mutex<Option<Hook>>,
}

#[async_trait]
impl Hooks for DuringRead {
    async fn read(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<EventPage> {
        let hook = self.before_read.lock().unwrap().take();
        if let (Some(hook), Some(store)) = (hook, self.store.get()) {
            hook(store.clone()).await;
        }
        inner.read(tenant, thread, from_seq, limit).await
    }
}

fn custom(n: u64) -> Event {
    Event::from_json(&format!(r#"{{"type":"CUSTOM","name":"n","value":{n}}}"#)).unwrap()
}

#[tokio::test]
async fn a_catch_up_read_that_meets_a_rewrite_ends_the_subscription() {
    let hooked = Arc::new(Hooked::new(MemoryStore::new(), DuringRead::default()));
    let store = Store::from_arc(hooked.clone());
    let _ = hooked.hooks().store.set(store.clone());
    store
        .append("t", "x", AppendRequest::new((1..=5).map(custom).collect()))
        .await
        .unwrap();
    store.settle().await;
    *hooked.hooks().before_read.lock().unwrap() = Some(Box::new(|s: Store| {
        Box::pin(async move {
            s.delete_thread("t", "x").await.unwrap();
            s.append(
                "t",
                "x",
                AppendRequest::new((101..=108).map(custom).collect()),
            )
            .await
            .unwrap();
        })
    }));
    let mut sub = store.subscribe("t", "x", 1).await.unwrap();
    let next = tokio::time::timeout(std::time::Duration::from_secs(10), sub.next())
        .await
        .expect("the subscription neither ended nor answered");
    assert!(
        hooked.hooks().before_read.lock().unwrap().is_none(),
        "no read"
    );
    match next {
        None | Some(Err(_)) => {}
        Some(Ok(e)) => panic!(
            "the subscription went on with the thread written again: seq {} = {}",
            e.seq,
            e.event.json()
        ),
    }
}
