//! A run's frames on their way to the client that started it, bounded.
//!
//! The run goes at its upstream's pace, never at its client's: a frame is
//! queued and the run goes on. A client that stops reading would make the
//! queue hold the whole run (a run of 10 MB held 10 MB per connection, for
//! as long as the connection stayed open), so the queue is bounded: when the
//! frames a client has not taken pass the bound, they are dropped and its
//! stream ends after the frame it is receiving. Every frame is stored before
//! it is queued, so such a client attaches again with `Last-Event-ID` and
//! reads the rest from the store. The bound counts only queued frames, never
//! the one the connection is writing: one large frame (a restored
//! conversation) is never a reason to cut.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use futures::Stream;
use tokio::sync::Notify;

/// Why a frame was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The client's response is gone (it disconnected).
    Gone,
    /// The client fell further behind than the bound; its stream ends.
    Lagged,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Bytes>,
    /// Bytes in `queue`.
    queued: usize,
    senders: usize,
    /// The queue was dropped for lag: the stream ends.
    cut: bool,
    /// The stream (the client's response body) was dropped.
    gone: bool,
    waker: Option<Waker>,
}

struct Shared {
    state: Mutex<State>,
    /// Told when the stream is dropped.
    gone: Notify,
    /// Most bytes queued and not taken before the client is cut off.
    limit: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The run's end of the queue (cloned for watchers; the stream ends once
/// every clone is dropped and the queue is empty).
pub(crate) struct Outbox {
    shared: Arc<Shared>,
}

/// The client's end: the response body.
pub(crate) struct OutboxStream {
    shared: Arc<Shared>,
}

/// A queue whose client is cut off once more than `limit` bytes wait in it.
pub(crate) fn outbox(limit: usize) -> (Outbox, OutboxStream) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            senders: 1,
            ..State::default()
        }),
        gone: Notify::new(),
        limit,
    });
    (
        Outbox {
            shared: shared.clone(),
        },
        OutboxStream { shared },
    )
}

impl Outbox {
    /// Queues a frame for the client.
    pub(crate) fn send(&self, frame: Bytes) -> Result<(), Refused> {
        let waker = {
            let mut s = self.shared.lock();
            if s.gone {
                return Err(Refused::Gone);
            }
            if s.cut {
                return Err(Refused::Lagged);
            }
            if s.queued > self.shared.limit {
                s.cut = true;
                s.queue = VecDeque::new();
                s.queued = 0;
                let waker = s.waker.take();
                drop(s);
                if let Some(w) = waker {
                    w.wake();
                }
                return Err(Refused::Lagged);
            }
            s.queued += frame.len();
            s.queue.push_back(frame);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    /// Resolves once the client's response is dropped (it disconnected, or
    /// it read the end of its stream).
    pub(crate) async fn closed(&self) {
        loop {
            let notified = self.shared.gone.notified();
            if self.shared.lock().gone {
                return;
            }
            notified.await;
        }
    }
}

impl Clone for Outbox {
    fn clone(&self) -> Outbox {
        self.shared.lock().senders += 1;
        Outbox {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.shared.lock();
            s.senders -= 1;
            if s.senders > 0 {
                return;
            }
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Stream for OutboxStream {
    type Item = Bytes;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let mut s = self.shared.lock();
        if let Some(frame) = s.queue.pop_front() {
            s.queued -= frame.len();
            return Poll::Ready(Some(frame));
        }
        if s.cut || s.senders == 0 {
            return Poll::Ready(None);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for OutboxStream {
    fn drop(&mut self) {
        {
            let mut s = self.shared.lock();
            s.gone = true;
            s.queue = VecDeque::new();
            s.queued = 0;
        }
        self.shared.gone.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn frame(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[tokio::test]
    async fn frames_arrive_in_order_and_the_stream_ends_with_the_last_sender() {
        let (tx, mut rx) = outbox(100);
        let watcher = tx.clone();
        tx.send(Bytes::from_static(b"a")).unwrap();
        tx.send(Bytes::from_static(b"b")).unwrap();
        drop(tx);
        assert_eq!(rx.next().await.unwrap(), "a");
        assert_eq!(rx.next().await.unwrap(), "b");
        // A watcher's clone still holds the stream open.
        let pending = futures::poll!(rx.next());
        assert!(pending.is_pending());
        drop(watcher);
        assert_eq!(rx.next().await, None);
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_is_cut_off_and_its_frames_dropped() {
        let (tx, mut rx) = outbox(1000);
        // The connection took one large frame and writes it: never counted.
        tx.send(frame(5000)).unwrap();
        assert_eq!(rx.next().await.unwrap().len(), 5000);
        for _ in 0..10 {
            tx.send(frame(100)).unwrap();
        }
        tx.send(frame(100)).unwrap();
        assert_eq!(tx.shared.lock().queued, 1100);
        // Past the bound: refused, the queue dropped, the stream ends.
        assert_eq!(tx.send(frame(100)), Err(Refused::Lagged));
        assert_eq!(tx.shared.lock().queued, 0);
        assert_eq!(tx.send(frame(1)), Err(Refused::Lagged));
        assert_eq!(rx.next().await, None);
    }

    #[tokio::test]
    async fn a_client_that_keeps_up_is_never_cut_off() {
        let (tx, mut rx) = outbox(1000);
        for _ in 0..10_000 {
            tx.send(frame(600)).unwrap();
            assert_eq!(rx.next().await.unwrap().len(), 600);
        }
    }

    #[tokio::test]
    async fn a_dropped_response_refuses_frames_and_wakes_closed() {
        let (tx, rx) = outbox(1000);
        let watcher = tx.clone();
        let waiting = tokio::spawn(async move { watcher.closed().await });
        tx.send(frame(10)).unwrap();
        drop(rx);
        waiting.await.unwrap();
        assert_eq!(tx.send(frame(10)), Err(Refused::Gone));
        assert_eq!(tx.shared.lock().queued, 0);
    }
}
