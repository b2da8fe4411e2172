//! Live subscriptions: catch-up from the store, then the live tail, with no
//! gap and no duplicate.
//!
//! The engine ([`crate::Store`]) owns a [`Hub`] and publishes every batch it
//! commits to it; a backend shared by several processes publishes the
//! others' batches to the same hub (see [`crate::Backend::attach_hub`]).
//! [`catch_up_then_live`] builds the stream:
//! 1. it registers the live listener first,
//! 2. reads committed events from the store page by page from `from_seq`,
//! 3. then yields live batches, dropping every event whose sequence number it
//!    already yielded, and going back to the store whenever it sees a gap
//!    (a batch that starts after the next expected sequence, or a listener
//!    that lagged behind and lost batches).
//!
//! Because the listener exists before the first read, an event committed
//! after the read is always published to it; because of the sequence check,
//! nothing is yielded twice or skipped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use tokio::sync::broadcast;

use crate::error::{Result, StoreError};
use crate::types::{EventPage, StoredEvent};

pub use crate::types::EventStream;

/// How many published batches a slow subscriber may fall behind before it
/// reads the missed ones back from the store.
const CHANNEL_BATCHES: usize = 1024;

/// One published batch, shared by every listener.
pub type Batch = Arc<[StoredEvent]>;

/// In-process fan-out of committed batches, per (tenant, thread).
#[derive(Default)]
pub struct Hub {
    channels: Mutex<HashMap<(String, String), broadcast::Sender<Batch>>>,
}

impl Hub {
    /// A hub with no listener.
    pub fn new() -> Hub {
        Hub::default()
    }

    /// Registers a listener for the thread's future batches.
    pub fn listen(&self, tenant: &str, thread: &str) -> broadcast::Receiver<Arc<[StoredEvent]>> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels
            .entry((tenant.to_owned(), thread.to_owned()))
            .or_insert_with(|| broadcast::channel(CHANNEL_BATCHES).0)
            .subscribe()
    }

    /// Publishes a committed batch. Cheap when nobody listens.
    pub fn publish(&self, tenant: &str, thread: &str, batch: Vec<StoredEvent>) {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        let key = (tenant.to_owned(), thread.to_owned());
        if let Some(tx) = channels.get(&key) {
            if tx.receiver_count() == 0 {
                channels.remove(&key);
            } else {
                // An error only means every receiver went away meanwhile.
                let _ = tx.send(batch.into());
            }
        }
    }

    /// True when someone listens to the thread (lets a backend skip building
    /// the batch to publish).
    pub fn has_listeners(&self, tenant: &str, thread: &str) -> bool {
        let channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels
            .get(&(tenant.to_owned(), thread.to_owned()))
            .is_some_and(|tx| tx.receiver_count() > 0)
    }

    /// How many listen to the thread.
    pub fn listener_count(&self, tenant: &str, thread: &str) -> usize {
        let channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels
            .get(&(tenant.to_owned(), thread.to_owned()))
            .map_or(0, |tx| tx.receiver_count())
    }

    /// Ends every subscription of the thread (it was deleted).
    pub fn close_thread(&self, tenant: &str, thread: &str) {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels.remove(&(tenant.to_owned(), thread.to_owned()));
    }

    /// Ends every subscription (the store closes).
    pub fn close_all(&self) {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels.clear();
    }
}

/// Reads one page of committed events from a sequence number (a backend's
/// `read`, with everything it needs captured).
pub type PageReader = Arc<dyn Fn(u64) -> BoxFuture<'static, Result<EventPage>> + Send + Sync>;

enum Mode {
    CatchUp,
    Live,
    Done,
}

struct State {
    next: u64,
    mode: Mode,
    rx: broadcast::Receiver<Arc<[StoredEvent]>>,
    read: PageReader,
}

/// Runs one store read as a task of its own (when there is a runtime), so
/// that it finishes, and gives back what it holds (a pooled database
/// connection), even while nobody polls the stream it feeds. A reader may
/// leave its stream unpolled in the middle of a read (it polled it with
/// `now_or_never`, a timeout dropped its `next()`, or the HTTP client
/// stopped reading the body) and then wait on another store call: were the
/// read to wait for that reader, such waits could hold every connection of
/// a pool and deadlock the process.
pub(crate) async fn detached<T: Send + 'static>(read: BoxFuture<'static, Result<T>>) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => match rt.spawn(read).await {
            Ok(r) => r,
            Err(e) if e.is_cancelled() => Err(StoreError::unavailable(
                "the runtime shut down during a store read",
            )),
            Err(_) => Err(StoreError::internal("a store read panicked")),
        },
        Err(_) => read.await,
    }
}

/// The subscription stream: events from `from_seq` (1 for the beginning) on,
/// catch-up then live. `rx` must be registered *before* this is called.
/// The stream ends when the thread is deleted or the store closes, and
/// yields an error (then ends) when a catch-up read fails.
pub fn catch_up_then_live(
    rx: broadcast::Receiver<Arc<[StoredEvent]>>,
    from_seq: u64,
    read: PageReader,
) -> EventStream {
    let state = State {
        next: from_seq.max(1),
        mode: Mode::CatchUp,
        rx,
        read,
    };
    let chunks = stream::unfold(state, |mut st| async move {
        loop {
            match st.mode {
                Mode::Done => return None,
                Mode::CatchUp => {
                    // What was published so far is in the log the read
                    // below sees. A closed channel means the thread was
                    // deleted (or the store closed) meanwhile: what the log
                    // holds from here on would be another thread's.
                    loop {
                        match st.rx.try_recv() {
                            Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                            Err(broadcast::error::TryRecvError::Empty) => break,
                            Err(broadcast::error::TryRecvError::Closed) => return None,
                        }
                    }
                    match detached((st.read)(st.next)).await {
                        // A thread that does not exist yet has nothing to catch up.
                        Err(e) if e.kind() == crate::ErrorKind::NotFound => st.mode = Mode::Live,
                        Err(e) => {
                            st.mode = Mode::Done;
                            return Some((vec![Err(e)], st));
                        }
                        // Closed while the read was in flight: the page may
                        // be of the thread written again after the delete.
                        Ok(_) if st.rx.is_closed() => return None,
                        Ok(page) => {
                            let mut out = Vec::with_capacity(page.events.len());
                            for e in page.events {
                                if e.seq == st.next {
                                    st.next += 1;
                                    out.push(Ok(e));
                                } else if e.seq > st.next {
                                    st.mode = Mode::Done;
                                    out.push(Err(StoreError::corrupt(format!(
                                        "sequence gap in the log: expected {}, found {}",
                                        st.next, e.seq
                                    ))));
                                    return Some((out, st));
                                }
                            }
                            if page.next_seq.is_none() {
                                st.mode = Mode::Live;
                            }
                            if !out.is_empty() {
                                return Some((out, st));
                            }
                        }
                    }
                }
                Mode::Live => match st.rx.recv().await {
                    Ok(batch) => {
                        let Some(first) = batch.first() else { continue };
                        if first.seq > st.next {
                            // Published out of order or after a lag: the
                            // store has everything up to this batch.
                            st.mode = Mode::CatchUp;
                            continue;
                        }
                        let out: Vec<_> = batch
                            .iter()
                            .filter(|e| e.seq >= st.next)
                            .cloned()
                            .map(Ok)
                            .collect();
                        if let Some(Ok(last)) = out.last() {
                            st.next = last.seq + 1;
                            return Some((out, st));
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => st.mode = Mode::CatchUp,
                    Err(broadcast::error::RecvError::Closed) => st.mode = Mode::Done,
                },
            }
        }
    });
    Box::pin(chunks.flat_map(stream::iter))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;
    use tokio::sync::Semaphore;

    use super::*;

    /// A subscriber that polls its stream once (a catch-up read starts and
    /// takes the one pooled connection) and then waits on another call that
    /// needs a connection must not wait forever: the read finishes on its
    /// own and gives the connection back. The gateway's attach stream does
    /// exactly this (`now_or_never`, then a run-status check), and with a
    /// PostgreSQL pool it once held every connection this way.
    #[tokio::test]
    async fn a_read_left_unpolled_gives_its_connection_back() {
        let pool = Arc::new(Semaphore::new(1));
        let held = pool.clone();
        let read: PageReader = Arc::new(move |_from| {
            let held = held.clone();
            async move {
                let _conn = held.acquire_owned().await.expect("open pool");
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(EventPage {
                    events: Vec::new(),
                    next_seq: None,
                })
            }
            .boxed()
        });
        let (_tx, rx) = broadcast::channel(16);
        let mut sub = catch_up_then_live(rx, 1, read);
        assert!(sub.next().now_or_never().is_none());
        tokio::task::yield_now().await;
        let other = tokio::time::timeout(Duration::from_secs(5), pool.acquire()).await;
        assert!(other.is_ok(), "the unpolled read kept the connection");
    }
}
