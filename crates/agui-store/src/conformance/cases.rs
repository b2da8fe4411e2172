//! The conformance cases. Each takes a fresh [`Harness`], runs against the
//! engine over its backend, and panics on a contract violation.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use agui_history::reduce::Reducer;
use agui_protocol::Event;
use futures::StreamExt;
use serde_json::json;

use super::Harness;
use super::events::{event, full_run, run_error, run_finished, run_started, text_message};
use crate::{
    AppendRequest, Checkpoints, Conversation, Durability, ErrorKind, MAX_ID_BYTES, RunFilter,
    RunRecord, RunStatus, Store, StoredEvent, ThreadFilter,
};

const T: &str = "tenant-a";
/// How long a subscription may stay silent before the suite calls it stuck.
const STUCK: Duration = Duration::from_secs(20);

/// The engine over a backend under test, and the backend itself (for what
/// the harness does below the API).
struct Opened<B: Harness> {
    store: Store,
    raw: Arc<B::Store>,
}

impl<B: Harness> std::ops::Deref for Opened<B> {
    type Target = Store;

    fn deref(&self) -> &Store {
        &self.store
    }
}

async fn open<B: Harness>(b: &B) -> Opened<B> {
    let raw = Arc::new(b.open().await.expect("the backend opens"));
    Opened {
        store: Store::from_arc(raw.clone()),
        raw,
    }
}

async fn append(s: &Store, tenant: &str, thread: &str, events: Vec<Event>) {
    s.append(tenant, thread, AppendRequest::new(events))
        .await
        .expect("append");
}

async fn all(s: &Store, tenant: &str, thread: &str) -> Vec<StoredEvent> {
    s.read_range(tenant, thread, 1, u64::MAX)
        .await
        .expect("read back")
}

fn custom(n: u64) -> Event {
    event(json!({"type":"CUSTOM","name":"n","value":n}))
}

fn conversation_text(c: &Conversation) -> String {
    serde_json::to_string(c).expect("a conversation serializes")
}

fn reduce_all(events: &[StoredEvent]) -> String {
    let mut r = Reducer::new(Conversation::default());
    for e in events {
        r.apply(&e.event).expect("the suite's events reduce");
    }
    conversation_text(&r.into_conversation())
}

/// The tenant, thread and run id of each run `mark_interrupted` returned,
/// sorted; each must be returned `interrupted`, with its end time, exactly
/// as the store now gives it.
async fn marked_ids(s: &Store, marked: Vec<(String, RunRecord)>) -> Vec<(String, String, String)> {
    let mut ids = Vec::with_capacity(marked.len());
    for (tenant, run) in marked {
        assert_eq!(run.status, RunStatus::Interrupted, "{run:?}");
        assert!(run.finished_at.is_some(), "{run:?}");
        let stored = s.run(&tenant, &run.thread_id, &run.run_id).await.unwrap();
        assert_eq!(run, stored, "a marked run as it now stands");
        ids.push((tenant, run.thread_id, run.run_id));
    }
    ids.sort();
    ids
}

/// A `parentRunId` must name a run of the thread, from an earlier batch or
/// earlier in the same batch (the history core's lineage rule): an unknown
/// one fails the whole batch and stores nothing, instead of silently
/// starting a new root.
pub async fn an_unknown_parent_run_is_refused<B: Harness>(b: &B) {
    let s = open(b).await;
    let th = "parents";
    append(&s, T, th, full_run(th, "a", None, "one")).await;
    let before = s.thread(T, th).await.unwrap().last_seq;
    let e = s
        .append(
            T,
            th,
            AppendRequest::new(full_run(th, "b", Some("nowhere"), "x")),
        )
        .await
        .expect_err("an unknown parent is refused");
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("nowhere"), "{e}");
    assert_eq!(
        s.thread(T, th).await.unwrap().last_seq,
        before,
        "nothing stored"
    );
    // A run of another thread is not a parent either.
    append(&s, T, "elsewhere", full_run("elsewhere", "z", None, "z")).await;
    let e = s
        .append(T, th, AppendRequest::new(full_run(th, "b", Some("z"), "x")))
        .await
        .expect_err("a run of another thread is refused");
    assert_eq!(e.kind(), ErrorKind::Invalid);
    // Known parents: an earlier batch's run, and one earlier in the batch.
    let mut batch = full_run(th, "b", Some("a"), "two");
    batch.extend(full_run(th, "c", Some("b"), "three"));
    append(&s, T, th, batch).await;
    let c = s.run(T, th, "c").await.unwrap();
    assert_eq!(c.parent_run_id.as_deref(), Some("b"));
    let path: Vec<String> = s
        .branch(T, th, "c")
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(path, ["a", "b", "c"]);
}

/// Sequence numbers start at 1, are contiguous, are returned by append, and
/// reads return exactly what was appended in order. Bad batches are refused.
pub async fn ordering_and_sequence_numbers<B: Harness>(b: &B) {
    let s = open(b).await;
    let a = s
        .append(T, "th", AppendRequest::new((1..=3).map(custom).collect()))
        .await
        .unwrap();
    assert_eq!((a.first_seq, a.last_seq), (1, 3));
    let a2 = s
        .append(T, "th", AppendRequest::new(vec![custom(4)]).expect_seq(3))
        .await
        .unwrap();
    assert_eq!((a2.first_seq, a2.last_seq), (4, 4));
    assert!(a2.received_at >= a.received_at);
    let got = all(&s, T, "th").await;
    assert_eq!(got.len(), 4);
    for (i, e) in got.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1);
        assert_eq!(e.event.json(), custom(i as u64 + 1).json());
    }
    assert_eq!(got[0].received_at, a.received_at);
    assert_eq!(got[3].received_at, a2.received_at);
    // From the middle.
    let page = s.read(T, "th", 3, 10).await.unwrap();
    assert_eq!(
        page.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [3, 4]
    );
    assert_eq!(page.next_seq, None);
    // Past the end: empty.
    assert!(s.read(T, "th", 9, 10).await.unwrap().events.is_empty());
    // Conflicts: stale and future expectations write nothing.
    for expected in [0, 2, 5] {
        let e = s
            .append(
                T,
                "th",
                AppendRequest::new(vec![custom(99)]).expect_seq(expected),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict);
        let c = e.seq_conflict().unwrap();
        assert_eq!((c.expected, c.actual), (expected, 4));
    }
    // A new thread accepts "expect empty".
    s.append(T, "new", AppendRequest::new(vec![custom(1)]).expect_seq(0))
        .await
        .unwrap();
    // Empty batch, missing thread.
    let e = s
        .append(T, "th", AppendRequest::new(vec![]))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    let e = s.read(T, "missing", 1, 10).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    // A batch refused by the run rules writes nothing.
    let bad = vec![
        custom(5),
        event(json!({"type":"RUN_STARTED","threadId":"th"})),
    ];
    let e = s
        .append(T, "th", AppendRequest::new(bad))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert_eq!(all(&s, T, "th").await.len(), 4);
    let info = s.thread(T, "th").await.unwrap();
    assert_eq!(info.last_seq, 4);
    // Durability `Append` is acknowledged as durable by durable backends and
    // at least accepted by all.
    let d = s
        .append(
            T,
            "th",
            AppendRequest::new(vec![custom(5)]).durability(Durability::Append),
        )
        .await
        .unwrap();
    assert_eq!(d.last_seq, 5);
    s.flush().await.unwrap();
}

/// The exact JSON text survives: unknown types and fields, number spelling,
/// escapes, nulls, key order.
pub async fn events_are_kept_losslessly<B: Harness>(b: &B) {
    let s = open(b).await;
    let texts = [
        r#"{"type":"SOMETHING_NEW","z":1,"a":{"deep":[1,2.50,-0.0,1e400]},"n":null}"#,
        r#"{"type":"CUSTOM","name":"x","value":123456789012345678901234567890.000001}"#,
        r#"{"type":"RAW","event":"\u0000\ud83d\ude00 é \"q\" \\ \u202e","source":"s"}"#,
        r#"{"b":2,"type":"CUSTOM","a":1,"name":"order","value":{"y":1,"x":2}}"#,
    ];
    let events: Vec<Event> = texts.iter().map(|t| Event::from_json(t).unwrap()).collect();
    append(&s, T, "lossless", events).await;
    let got = all(&s, T, "lossless").await;
    let back: Vec<&str> = got.iter().map(|e| e.event.json()).collect();
    assert_eq!(back, texts);
    assert_eq!(got[0].event.type_name(), "SOMETHING_NEW");
}

/// The engine plans each batch against the thread's head and the backend
/// commits it only over that head: the head a backend reports is the one
/// the last plan left; a batch planned over an older head writes nothing
/// and gets the head as it is; two engines over one storage (two replicas)
/// append in turn, each planning over a head the other moved, and every
/// batch lands once, numbered in order, with each run's parent right.
pub async fn a_commit_over_a_moved_head_writes_nothing<B: Harness>(b: &B) {
    use crate::index::{ThreadHead, plan_batch};
    use crate::{Backend, Batch, Commit, Timestamp};

    let o = open(b).await;
    let backend: Arc<dyn Backend> = o.raw.clone();
    let first = full_run("t", "r1", None, "first");
    let n = first.len() as u64;
    let a = o
        .store
        .append(T, "t", AppendRequest::new(first))
        .await
        .unwrap();
    let head = backend.head(T, "t").await.unwrap();
    assert_eq!(
        head,
        ThreadHead {
            last_seq: n,
            updated_at: Some(a.received_at),
            last_run: Some(("r1".to_owned(), RunStatus::Finished)),
        },
        "the head as stored is the one the plan left"
    );
    assert_eq!(
        backend.head(T, "none").await.unwrap(),
        ThreadHead::default()
    );

    // Planned over the empty thread it no longer is.
    let events = vec![run_started("t", "r2", None)];
    let stale = ThreadHead::default();
    let plan = plan_batch(&stale, &events, None, Timestamp::now(), |_| Ok(false)).unwrap();
    let batch = Batch {
        head: stale,
        plan,
        events,
        agent: None,
        durability: Durability::RunEnd,
    };
    let c = backend.commit(T, "t", &batch).await.unwrap();
    assert_eq!(c, Commit::HeadMoved(head.clone()));
    assert_eq!(
        o.thread(T, "t").await.unwrap().last_seq,
        n,
        "nothing written"
    );
    assert!(o.run(T, "t", "r2").await.is_err(), "no run indexed");

    // Two engines over one storage, in turn: each one's cached head is
    // stale every other append.
    let other = Store::from_arc(backend.clone());
    let mut want_last = n;
    for i in 2..8 {
        let s = if i % 2 == 0 { &other } else { &o.store };
        let run = format!("r{i}");
        let events = full_run("t", &run, None, "turn");
        let len = events.len() as u64;
        let a = s.append(T, "t", AppendRequest::new(events)).await.unwrap();
        assert_eq!((a.first_seq, a.last_seq), (want_last + 1, want_last + len));
        want_last += len;
        let r = s.run(T, "t", &run).await.unwrap();
        assert_eq!(
            r.parent_run_id,
            Some(format!("r{}", i - 1)),
            "parent of {run}"
        );
        assert_eq!(r.first_seq, a.first_seq);
    }
    let seqs: Vec<u64> = all(&o, T, "t").await.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=want_last).collect::<Vec<_>>());

    // `expected_seq` is checked against the stored head, never against a
    // stale cache: `other` last appended two turns ago.
    let stale_seq = want_last - full_run("t", "x", None, "turn").len() as u64;
    let err = other
        .append(
            T,
            "t",
            AppendRequest::new(vec![custom(1)]).expect_seq(stale_seq),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert_eq!(err.seq_conflict().unwrap().actual, want_last);
    // `first` appended last but one; its cache is stale too, yet the right
    // expected sequence number succeeds.
    let ok = other
        .append(
            T,
            "t",
            AppendRequest::new(vec![custom(2)]).expect_seq(want_last),
        )
        .await
        .unwrap();
    assert_eq!(ok.first_seq, want_last + 1);
    let ok = o
        .store
        .append(
            T,
            "t",
            AppendRequest::new(vec![custom(3)]).expect_seq(want_last + 1),
        )
        .await
        .unwrap();
    assert_eq!(ok.first_seq, want_last + 2);
    // A run id another engine used is refused, though this one never saw it.
    let err = o
        .store
        .append(
            T,
            "t",
            AppendRequest::new(full_run("t", "r6", None, "again")),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    o.store.close().await.unwrap();
}

/// An open store is ready (it takes writes); a closed one says it is not,
/// through the engine and the backend alike.
pub async fn ready_while_open_and_not_after_close<B: Harness>(b: &B) {
    use crate::Backend;
    let o = open(b).await;
    o.ready().await.expect("a new store is ready");
    append(&o, T, "t", full_run("t", "r1", None, "hello")).await;
    o.ready().await.expect("ready after an append");
    o.raw.ready().await.expect("the backend is ready");
    o.close().await.unwrap();
    assert_eq!(o.ready().await.unwrap_err().kind(), ErrorKind::Unavailable);
    assert_eq!(
        o.raw.ready().await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
}

/// Eight appenders that all expect the empty thread: exactly one wins, the
/// others get `Conflict`, nothing interleaves.
pub async fn optimistic_concurrency_under_eight_appenders<B: Harness>(b: &B) {
    let s = open(b).await.store;
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let (s, barrier) = (s.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let batch = (0..5).map(|i| custom(w * 100 + i)).collect();
            s.append(T, "race", AppendRequest::new(batch).expect_seq(0))
                .await
        }));
    }
    let mut won = Vec::new();
    for (w, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(a) => won.push((w as u64, a)),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
                assert_eq!(e.seq_conflict().unwrap().actual, 5);
            }
        }
    }
    assert_eq!(won.len(), 1, "exactly one appender wins");
    let (w, a) = &won[0];
    assert_eq!((a.first_seq, a.last_seq), (1, 5));
    let got = all(&s, T, "race").await;
    let want: Vec<String> = (0..5)
        .map(|i| custom(w * 100 + i).json().to_owned())
        .collect();
    let got: Vec<String> = got.iter().map(|e| e.event.json().to_owned()).collect();
    assert_eq!(got, want);

    // Then eight appenders that retry on conflict: all land, in order.
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0u32;
            for k in 0..10u64 {
                loop {
                    let last = s.thread(T, "race").await.unwrap().last_seq;
                    let batch = (0..3).map(|i| custom(1000 + w * 100 + k * 3 + i)).collect();
                    match s
                        .append(T, "race", AppendRequest::new(batch).expect_seq(last))
                        .await
                    {
                        Ok(a) => {
                            assert_eq!(a.first_seq, last + 1);
                            break;
                        }
                        Err(e) if e.kind() == ErrorKind::Conflict => conflicts += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            conflicts
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let got = all(&s, T, "race").await;
    assert_eq!(got.len(), 5 + 8 * 10 * 3);
    check_batches(&got[5..], 3);
}

/// Each batch of `size` events written by one appender is contiguous in the
/// log (values `base + k*size + i` for i in 0..size, in order).
fn check_batches(events: &[StoredEvent], size: usize) {
    let values: Vec<u64> = events
        .iter()
        .map(|e| {
            e.event.to_value()["value"]
                .as_u64()
                .expect("a numeric value")
        })
        .collect();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            e.seq,
            events[0].seq + i as u64,
            "sequence numbers contiguous"
        );
    }
    let distinct: HashSet<u64> = values.iter().copied().collect();
    assert_eq!(distinct.len(), values.len(), "no event twice");
    for chunk in values.chunks(size) {
        for pair in chunk.windows(2) {
            assert_eq!(pair[1], pair[0] + 1, "a batch was interleaved: {chunk:?}");
        }
    }
}

/// Eight appenders without expectations: every batch lands whole and
/// contiguous, sequence numbers have no gap.
pub async fn concurrent_appenders_never_interleave_a_batch<B: Harness>(b: &B) {
    let s = open(b).await.store;
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for k in 0..25u64 {
                let batch = (0..4).map(|i| custom(w * 1000 + k * 4 + i)).collect();
                s.append(T, "many", AppendRequest::new(batch))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let got = all(&s, T, "many").await;
    assert_eq!(got.len(), 8 * 25 * 4);
    assert_eq!(got[0].seq, 1);
    check_batches(&got, 4);
    assert_eq!(s.thread(T, "many").await.unwrap().last_seq, 800);
}

/// Paged reads cover the log exactly once; the streamed read too.
pub async fn reads_page_and_stream<B: Harness>(b: &B) {
    let s = open(b).await;
    for k in 0..10u64 {
        append(
            &s,
            T,
            "pages",
            (k * 25 + 1..=k * 25 + 25).map(custom).collect(),
        )
        .await;
    }
    let mut seen = Vec::new();
    let mut next = Some(1);
    let mut pages = 0;
    while let Some(from) = next {
        let page = s.read(T, "pages", from, 7).await.unwrap();
        assert!(page.events.len() <= 7);
        assert!(!page.events.is_empty());
        seen.extend(page.events.iter().map(|e| e.seq));
        next = page.next_seq;
        pages += 1;
    }
    assert_eq!(pages, 250usize.div_ceil(7));
    assert_eq!(seen, (1..=250).collect::<Vec<_>>());
    let streamed: Vec<u64> = s
        .read_stream(T, "pages", 100)
        .map(|e| e.unwrap().seq)
        .collect()
        .await;
    assert_eq!(streamed, (100..=250).collect::<Vec<_>>());
    let range = s.read_range(T, "pages", 10, 12).await.unwrap();
    assert_eq!(
        range.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [10, 11, 12]
    );
    // limit 0 means a default page, never an empty one.
    assert!(!s.read(T, "pages", 1, 0).await.unwrap().events.is_empty());
}

/// Threads list newest activity first, page by cursor without loss or
/// repetition, and filter by agent.
pub async fn threads_page_by_cursor_and_filter_by_agent<B: Harness>(b: &B) {
    let s = open(b).await;
    for i in 0..23u64 {
        let agent = if i % 3 == 0 { "alpha" } else { "beta" };
        s.append(
            T,
            &format!("thread-{i:02}"),
            AppendRequest::new(vec![custom(i)]).agent(agent),
        )
        .await
        .unwrap();
        // Distinct activity times, so that the order is fully determined.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Touch thread-05 last: it becomes the newest.
    append(&s, T, "thread-05", vec![custom(100)]).await;
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let page = s
            .list_threads(
                T,
                &ThreadFilter {
                    limit: 5,
                    cursor: cursor.clone(),
                    ..ThreadFilter::default()
                },
            )
            .await
            .unwrap();
        assert!(page.threads.len() <= 5);
        ids.extend(page.threads.iter().map(|t| t.thread_id.clone()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let mut want: Vec<String> = (0..23).rev().map(|i| format!("thread-{i:02}")).collect();
    want.retain(|t| t != "thread-05");
    want.insert(0, "thread-05".into());
    assert_eq!(ids, want);
    let alpha = s
        .list_threads(
            T,
            &ThreadFilter {
                agent: Some("alpha".into()),
                limit: 100,
                ..ThreadFilter::default()
            },
        )
        .await
        .unwrap();
    let got: BTreeSet<String> = alpha.threads.iter().map(|t| t.thread_id.clone()).collect();
    let want: BTreeSet<String> = (0..23)
        .filter(|i| i % 3 == 0)
        .map(|i| format!("thread-{i:02}"))
        .collect();
    assert_eq!(got, want);
    assert!(alpha.next_cursor.is_none());
    let info = &alpha.threads[0];
    assert_eq!(info.agent.as_deref(), Some("alpha"));
    assert_eq!(info.last_seq, 1);
    assert!(info.bytes > 0);
    let e = s
        .list_threads(
            T,
            &ThreadFilter {
                cursor: Some("not a cursor".into()),
                ..ThreadFilter::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
}

/// The run index: ids, parents (explicit and implicit), agent, statuses,
/// times, counts and bytes; `mark_interrupted`.
pub async fn run_index_and_statuses<B: Harness>(b: &B) {
    let s = open(b).await;
    let th = "runs";
    let pre = vec![custom(0)];
    append(&s, T, th, pre).await;
    let r1 = full_run(th, "r1", None, "hello");
    let r1_bytes: u64 = r1.iter().map(|e| e.len_bytes() as u64).sum();
    let r1_len = r1.len() as u64;
    s.append(T, th, AppendRequest::new(r1).agent("agent-x"))
        .await
        .unwrap();
    // r2 errors; r3 is superseded by r4 (interrupted); r4 stays running.
    let mut batch = vec![run_started(th, "r2", None), run_error("boom")];
    batch.push(run_started(th, "r3", Some("r1")));
    batch.extend(text_message("m3", "partial", 2));
    append(&s, T, th, batch).await;
    append(&s, T, th, vec![run_started(th, "r4", None), custom(7)]).await;

    let r1 = s.run(T, th, "r1").await.unwrap();
    assert_eq!(r1.status, RunStatus::Finished);
    assert_eq!(r1.parent_run_id, None);
    assert_eq!(r1.agent.as_deref(), Some("agent-x"));
    assert_eq!((r1.first_seq, r1.last_seq), (2, 1 + r1_len));
    assert_eq!(r1.event_count, r1_len);
    assert_eq!(r1.bytes, r1_bytes);
    assert!(r1.finished_at.is_some_and(|f| f >= r1.started_at));
    let r2 = s.run(T, th, "r2").await.unwrap();
    assert_eq!(r2.status, RunStatus::Error);
    assert_eq!(r2.parent_run_id.as_deref(), Some("r1"), "implicit parent");
    assert_eq!(r2.event_count, 2);
    let r3 = s.run(T, th, "r3").await.unwrap();
    assert_eq!(r3.status, RunStatus::Interrupted);
    assert_eq!(r3.parent_run_id.as_deref(), Some("r1"), "explicit parent");
    assert_eq!(r3.event_count, 5);
    let r4 = s.run(T, th, "r4").await.unwrap();
    assert_eq!(r4.status, RunStatus::Running);
    assert_eq!(r4.parent_run_id.as_deref(), Some("r3"));
    assert_eq!(r4.finished_at, None);
    assert_eq!(s.thread(T, th).await.unwrap().run_count, 4);
    // Events of one run.
    let events = s.read_run(T, th, "r3").await.unwrap();
    assert_eq!(events.len(), 5);
    assert_eq!(events[0].event.type_name(), "RUN_STARTED");
    // A reused run id (not the last run's: the commit refuses it) is
    // refused, and nothing of the batch is written (r4 is not interrupted).
    let before = s.thread(T, th).await.unwrap();
    let e = s
        .append(T, th, AppendRequest::new(vec![run_started(th, "r1", None)]))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    let after = s.thread(T, th).await.unwrap();
    assert_eq!((after.last_seq, after.run_count), (before.last_seq, 4));
    assert_eq!(s.run(T, th, "r4").await.unwrap().status, RunStatus::Running);
    assert_eq!(
        s.run(T, th, "nope").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // After a crash the server marks running runs interrupted, in every
    // tenant (a run of another tenant and one left running in a thread
    // of its own too; ended runs are left alone), and gets them back with
    // their tenants, as they now stand.
    append(
        &s,
        "tenant-b",
        th,
        vec![run_started(th, "rb", None), custom(8)],
    )
    .await;
    append(&s, T, "runs-2", full_run("runs-2", "done", None, "hi")).await;
    append(&s, T, "runs-2", vec![run_started("runs-2", "r6", None)]).await;
    let marked = marked_ids(&s, s.mark_interrupted().await.unwrap()).await;
    assert_eq!(
        marked,
        [
            (T.to_owned(), th.to_owned(), "r4".to_owned()),
            (T.to_owned(), "runs-2".to_owned(), "r6".to_owned()),
            ("tenant-b".to_owned(), th.to_owned(), "rb".to_owned()),
        ]
    );
    let r4 = s.run(T, th, "r4").await.unwrap();
    assert_eq!(r4.status, RunStatus::Interrupted);
    assert!(r4.finished_at.is_some());
    assert_eq!(
        s.run(T, "runs-2", "done").await.unwrap().status,
        RunStatus::Finished
    );
    assert!(s.mark_interrupted().await.unwrap().is_empty());
    // A new run after that has r4 as its parent.
    append(&s, T, th, full_run(th, "r5", None, "again")).await;
    let r5 = s.run(T, th, "r5").await.unwrap();
    assert_eq!(r5.parent_run_id.as_deref(), Some("r4"));
    assert_eq!(r5.status, RunStatus::Finished);
}

/// Runs page by cursor and filter by thread, parent, status and time.
pub async fn runs_page_by_cursor_and_filter<B: Harness>(b: &B) {
    let s = open(b).await;
    for th in ["x", "y"] {
        for k in 0..6 {
            let parent = if k == 0 { None } else { Some("k0") };
            append(&s, T, th, full_run(th, &format!("k{k}"), parent, "text")).await;
        }
    }
    let mid = s.run(T, "y", "k0").await.unwrap().started_at;
    let mut got = Vec::new();
    let mut cursor = None;
    loop {
        let page = s
            .list_runs(
                T,
                &RunFilter {
                    limit: 4,
                    cursor: cursor.clone(),
                    ..RunFilter::default()
                },
            )
            .await
            .unwrap();
        got.extend(
            page.runs
                .iter()
                .map(|r| (r.thread_id.clone(), r.run_id.clone())),
        );
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(got.len(), 12);
    let distinct: HashSet<_> = got.iter().cloned().collect();
    assert_eq!(distinct.len(), 12);
    let x_first: Vec<_> = got
        .iter()
        .filter(|(t, _)| t == "x")
        .map(|(_, r)| r.clone())
        .collect();
    assert_eq!(x_first, ["k0", "k1", "k2", "k3", "k4", "k5"]);
    let children = s
        .list_runs(
            T,
            &RunFilter {
                thread_id: Some("x".into()),
                parent_run_id: Some("k0".into()),
                ..RunFilter::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(children.runs.len(), 5);
    let later = s
        .list_runs(
            T,
            &RunFilter {
                started_from: Some(mid),
                ..RunFilter::default()
            },
        )
        .await
        .unwrap();
    assert!(later.runs.iter().all(|r| r.started_at >= mid));
    assert!(
        later
            .runs
            .iter()
            .any(|r| r.thread_id == "y" && r.run_id == "k0")
    );
    let before = s
        .list_runs(
            T,
            &RunFilter {
                started_before: Some(mid),
                ..RunFilter::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(before.runs.len() + later.runs.len(), 12);
    let finished = s
        .list_runs(
            T,
            &RunFilter {
                status: Some(RunStatus::Finished),
                ..RunFilter::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(finished.runs.len(), 12);
    let running = s
        .list_runs(
            T,
            &RunFilter {
                status: Some(RunStatus::Running),
                ..RunFilter::default()
            },
        )
        .await
        .unwrap();
    assert!(running.runs.is_empty());
}

async fn next_seq(stream: &mut crate::EventStream) -> u64 {
    tokio::time::timeout(STUCK, stream.next())
        .await
        .expect("a subscription stalled")
        .expect("a subscription ended early")
        .expect("a subscription failed")
        .seq
}

/// A subscription from the middle of a thread yields the committed tail,
/// then live appends, each once, in order, even while appends race the
/// catch-up.
pub async fn subscription_catch_up_then_live<B: Harness>(b: &B) {
    let s = open(b).await.store;
    append(&s, T, "live", (1..=50).map(custom).collect()).await;
    let mut sub = s.subscribe(T, "live", 20).await.unwrap();
    let writer = {
        let s = s.clone();
        tokio::spawn(async move {
            for k in 0..50u64 {
                append(&s, T, "live", vec![custom(51 + 2 * k), custom(52 + 2 * k)]).await;
                if k % 10 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    for want in 20..=150 {
        assert_eq!(next_seq(&mut sub).await, want);
    }
    writer.await.unwrap();
    // Nothing more is pending.
    let extra = tokio::time::timeout(Duration::from_millis(100), sub.next()).await;
    assert!(extra.is_err(), "a duplicate or phantom event arrived");
    // Events delivered are the stored ones.
    append(&s, T, "live", vec![custom(999)]).await;
    let e = tokio::time::timeout(STUCK, sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(e.seq, 151);
    assert_eq!(e.event.json(), custom(999).json());
}

/// Many subscribers attached at different points while a writer appends:
/// each sees exactly its range.
pub async fn many_subscribers_see_everything_once<B: Harness>(b: &B) {
    let s = open(b).await.store;
    append(&s, T, "fan", (1..=10).map(custom).collect()).await;
    let total = 10 + 200 * 3;
    let writer = {
        let s = s.clone();
        tokio::spawn(async move {
            for k in 0..200u64 {
                append(
                    &s,
                    T,
                    "fan",
                    (0..3).map(|i| custom(100 + k * 3 + i)).collect(),
                )
                .await;
            }
        })
    };
    let mut readers = Vec::new();
    for i in 0..32u64 {
        let from = 1 + (i * 37) % 300;
        let sub = s.subscribe(T, "fan", from).await.unwrap();
        readers.push(tokio::spawn(async move {
            let mut sub = sub;
            let mut got = Vec::new();
            while got.last().copied().unwrap_or(0) < total {
                got.push(next_seq(&mut sub).await);
            }
            (from, got)
        }));
        tokio::task::yield_now().await;
    }
    writer.await.unwrap();
    for r in readers {
        let (from, got) = r.await.unwrap();
        assert_eq!(got, (from..=total).collect::<Vec<_>>());
    }
}

/// A subscription may start before its thread exists; deleting the thread
/// ends it.
pub async fn subscription_before_the_thread_exists_and_after_delete<B: Harness>(b: &B) {
    let s = open(b).await;
    let mut sub = s.subscribe(T, "later", 1).await.unwrap();
    append(&s, T, "later", vec![custom(1), custom(2)]).await;
    assert_eq!(next_seq(&mut sub).await, 1);
    assert_eq!(next_seq(&mut sub).await, 2);
    s.delete_thread(T, "later").await.unwrap();
    let end = tokio::time::timeout(STUCK, sub.next()).await.expect("ends");
    assert!(end.is_none(), "deleting a thread ends its subscriptions");
}

/// At the end of each run its checkpoint is stored; restore uses it, and
/// equals reducing the branch's events.
pub async fn checkpoints_are_used<B: Harness>(b: &B) {
    let s = open(b).await;
    let th = "ck";
    append(&s, T, th, text_message("pre", "preamble words", 1)).await;
    append(&s, T, th, full_run(th, "a", None, "first answer")).await;
    // A run split across appends; the checkpoint appears when it ends.
    append(&s, T, th, vec![run_started(th, "b", None)]).await;
    assert!(s.load_checkpoint(T, th, "b").await.unwrap().is_none());
    append(&s, T, th, text_message("mb", "second answer", 4)).await;
    append(&s, T, th, vec![run_finished(th, "b")]).await;
    for run in ["a", "b"] {
        let blob = s.load_checkpoint(T, th, run).await.unwrap();
        assert!(blob.is_some(), "run {run} has a checkpoint");
        let r = s.restore(T, th, run).await.unwrap();
        assert!(r.from_checkpoint, "run {run} restored from its checkpoint");
        assert_eq!(r.rebuilt, 0);
        let want = reduce_all(&s.read_branch(T, th, run).await.unwrap());
        assert_eq!(*r.json, want);
    }
    let b_text = s.restore(T, th, "b").await.unwrap().json;
    assert!(b_text.contains("second answer") && b_text.contains("first answer"));
    assert!(
        b_text.contains("preamble words"),
        "the preamble is part of every branch"
    );
    // A running run restores from its parent's checkpoint plus its events.
    append(&s, T, th, vec![run_started(th, "c", None)]).await;
    append(&s, T, th, text_message("mc", "third", 1)).await;
    let r = s.restore(T, th, "c").await.unwrap();
    assert!(!r.from_checkpoint);
    assert_eq!(r.rebuilt, 0, "a running run gets no checkpoint");
    assert!(r.json.contains("third"));
    assert!(s.load_checkpoint(T, th, "c").await.unwrap().is_none());
}

/// Restoring the same run again, unchanged, answers with the text the engine
/// kept (shared, not composed again). A run that changed since, another run
/// restored in between, or a thread deleted and written again never gets a
/// stale text.
pub async fn repeated_restores_share_the_text<B: Harness>(b: &B) {
    let s = open(b).await;
    let th = "kept";
    append(&s, T, th, full_run(th, "a", None, "first answer")).await;
    append(&s, T, th, full_run(th, "b", Some("a"), "second answer")).await;
    let first = s.restore(T, th, "b").await.unwrap();
    let again = s.restore(T, th, "b").await.unwrap();
    assert!(
        Arc::ptr_eq(&first.json, &again.json),
        "the kept text is shared"
    );
    assert_eq!(again.last_seq, first.last_seq);
    assert!(again.from_checkpoint);
    // Another run in between, then b again: equal, whichever way it came.
    let a = s.restore(T, th, "a").await.unwrap();
    assert!(a.json.contains("first answer") && !a.json.contains("second answer"));
    assert_eq!(*s.restore(T, th, "b").await.unwrap().json, *first.json);
    // b grows after its end: the kept text no longer covers it.
    append(
        &s,
        T,
        th,
        vec![event(
            json!({"type":"STATE_SNAPSHOT","snapshot":{"late":true}}),
        )],
    )
    .await;
    let grown = s.restore(T, th, "b").await.unwrap();
    assert_eq!(grown.last_seq, first.last_seq + 1);
    assert_eq!(
        *grown.json,
        reduce_all(&s.read_branch(T, th, "b").await.unwrap())
    );
    assert!(grown.json.contains("\"late\":true"), "{}", grown.json);
    // The thread deleted and written again under the same run ids.
    s.delete_thread(T, th).await.unwrap();
    append(&s, T, th, full_run(th, "a", None, "other answer")).await;
    append(&s, T, th, full_run(th, "b", Some("a"), "another answer")).await;
    let fresh = s.restore(T, th, "b").await.unwrap();
    assert!(fresh.json.contains("another answer"), "{}", fresh.json);
    assert!(!fresh.json.contains("second answer"), "{}", fresh.json);
    assert_eq!(
        *fresh.json,
        reduce_all(&s.read_branch(T, th, "b").await.unwrap())
    );
    s.close().await.unwrap();
}

/// A missing or damaged checkpoint is rebuilt from the log, never trusted.
pub async fn checkpoints_are_rebuilt_when_missing_or_damaged<B: Harness>(b: &B) {
    let s = open(b).await;
    let th = "rebuild";
    for k in 0..4 {
        append(
            &s,
            T,
            th,
            full_run(th, &format!("r{k}"), None, &format!("answer {k}")),
        )
        .await;
    }
    let want = s.restore(T, th, "r3").await.unwrap().json;
    b.damage_checkpoint(&s.raw, T, th, "r3").await.unwrap();
    s.forget(T, th);
    let r = s.restore(T, th, "r3").await.unwrap();
    assert!(!r.from_checkpoint, "a damaged checkpoint is not used");
    assert_eq!(r.rebuilt, 1, "rebuilt from the parent's checkpoint");
    assert_eq!(*r.json, *want);
    assert!(
        s.restore(T, th, "r3").await.unwrap().from_checkpoint,
        "stored again"
    );

    b.remove_checkpoint(&s.raw, T, th, "r3").await.unwrap();
    s.forget(T, th);
    b.remove_checkpoint(&s.raw, T, th, "r2").await.unwrap();
    s.forget(T, th);
    b.damage_checkpoint(&s.raw, T, th, "r1").await.unwrap();
    s.forget(T, th);
    assert!(s.load_checkpoint(T, th, "r3").await.unwrap().is_none());
    let r = s.restore(T, th, "r3").await.unwrap();
    assert_eq!(r.rebuilt, 3);
    assert_eq!(*r.json, *want);
    for k in 0..4 {
        let r = s.restore(T, th, &format!("r{k}")).await.unwrap();
        assert!(r.from_checkpoint);
    }
    // A checkpoint whose blob is valid but stale (a late event joined the run)
    // is not used either.
    append(&s, T, th, vec![custom(1)]).await;
    let r = s.restore(T, th, "r3").await.unwrap();
    assert!(!r.from_checkpoint);
    assert_eq!(r.last_seq, s.run(T, th, "r3").await.unwrap().last_seq);
}

/// The run ids and stored blobs' bases of a thread's runs.
async fn bases(s: &Store, th: &str, runs: &[String]) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for r in runs {
        let blob = s
            .load_checkpoint(T, th, r)
            .await
            .unwrap()
            .expect("a checkpoint");
        let d = crate::checkpoint::decode(&blob).expect("an intact checkpoint");
        out.push(d.base.map(|b| b.run_id));
    }
    out
}

/// A thread of `n` runs with branches, late edits of old messages and
/// state: its batches (a preamble, most runs in one batch, some split in
/// two), its run ids and its whole log.
fn branchy_thread(th: &str, n: usize) -> (Vec<Vec<Event>>, Vec<String>, Vec<Event>) {
    let mut log: Vec<Event> = text_message("pre", "preamble", 1);
    let mut batches = vec![log.clone()];
    let mut runs: Vec<String> = Vec::new();
    for k in 0..n {
        let run = format!("r{k}");
        // Every 7th run branches from three runs back.
        let parent = (k % 7 == 5).then(|| runs[k - 3].clone());
        let mut events = vec![run_started(th, &run, parent.as_deref())];
        events.extend(text_message(
            &format!("{run}-msg"),
            &format!("answer {k}"),
            2,
        ));
        if k % 4 == 1 {
            // An edit of the first message of the branch.
            events.push(event(
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"pre","delta":format!(" +{k}")}),
            ));
        }
        if k % 5 == 2 && k > 0 {
            // An edit of the parent run's message.
            let p = parent.clone().unwrap_or_else(|| runs[k - 1].clone());
            events.push(event(
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":format!("{p}-msg"),"delta":" (edited)"}),
            ));
        }
        if k % 3 == 0 {
            events.push(event(json!({"type":"STATE_SNAPSHOT","snapshot":{"k":k}})));
        }
        events.push(run_finished(th, &run));
        log.extend(events.iter().cloned());
        if k % 6 == 4 {
            let rest = events.split_off(2);
            batches.push(events);
            batches.push(rest);
        } else {
            batches.push(events);
        }
        runs.push(run);
    }
    (batches, runs, log)
}

/// Every run's conversation as the history core's lineage gives it.
fn lineage_conversations(log: &[Event], runs: &[String]) -> Vec<String> {
    runs.iter()
        .map(|r| {
            let c = agui_history::lineage::conversation_at(log, r, None, Conversation::default())
                .expect("the suite's log has a clean lineage");
            conversation_text(&c)
        })
        .collect()
}

/// A long thread with branches, late edits of old messages and state:
/// every run restores (through the delta checkpoints the engine builds)
/// to exactly what reducing its branch gives (the history core's
/// lineage), and stays so after a reopen.
pub async fn delta_checkpoints_restore_every_run_of_a_branchy_thread<B: Harness>(b: &B) {
    let s = open(b).await;
    let th = "branchy";
    let (batches, runs, log) = branchy_thread(th, 40);
    for batch in batches {
        append(&s, T, th, batch).await;
    }
    let want = lineage_conversations(&log, &runs);
    for (r, w) in runs.iter().zip(&want) {
        let got = s.restore(T, th, r).await.unwrap();
        assert!(got.from_checkpoint, "run {r} restored from checkpoints");
        assert_eq!(&*got.json, w, "run {r}");
    }
    let deltas = bases(&s, th, &runs).await.iter().flatten().count();
    assert!(deltas >= 30, "most checkpoints are deltas ({deltas})");
    s.close().await.unwrap();
    let s = open(b).await;
    for (r, w) in runs.iter().zip(&want).rev() {
        assert_eq!(
            &*s.restore(T, th, r).await.unwrap().json,
            w,
            "run {r} after reopen"
        );
    }
}

/// Appends with [`Checkpoints::Defer`] (a bulk import) store no checkpoint;
/// the first restore of a run replays its branch once, stores its
/// checkpoints (deltas after the first, the engine builds them) and
/// gives exactly the conversation of a thread appended with checkpoints, for
/// every run. Appends with checkpoints continue a deferred thread.
pub async fn deferred_checkpoints_are_built_by_the_first_restore<B: Harness>(b: &B) {
    let s = open(b).await;
    let (th, built) = ("deferred", "built");
    let (batches, runs, log) = branchy_thread(th, 40);
    let mut seq = 0;
    for batch in &batches {
        let req = AppendRequest::new(batch.clone())
            .expect_seq(seq)
            .checkpoints(Checkpoints::Defer);
        seq = s.append(T, th, req).await.expect("append").last_seq;
        append(&s, T, built, batch.clone()).await;
    }
    for r in &runs {
        assert!(
            s.load_checkpoint(T, th, r).await.unwrap().is_none(),
            "run {r}: no checkpoint built on a deferred append"
        );
    }
    let want = lineage_conversations(&log, &runs);
    // The last run first: one replay of its branch stores every checkpoint
    // along it.
    let last = runs.len() - 1;
    let got = s.restore(T, th, &runs[last]).await.unwrap();
    assert_eq!(*got.json, want[last]);
    assert!(!got.from_checkpoint);
    let branch = s.branch(T, th, &runs[last]).await.unwrap();
    assert_eq!(got.rebuilt, branch.len(), "one checkpoint per run replayed");
    for run in &branch {
        assert!(
            s.load_checkpoint(T, th, &run.run_id)
                .await
                .unwrap()
                .is_some(),
            "run {} of the branch got its checkpoint",
            run.run_id
        );
    }
    let ids: Vec<String> = branch.iter().map(|r| r.run_id.clone()).collect();
    let deltas = bases(&s, th, &ids).await.iter().flatten().count();
    assert_eq!(
        deltas,
        ids.len() - 1,
        "the replay stores deltas after the first"
    );
    for (r, w) in runs.iter().zip(&want) {
        let got = s.restore(T, th, r).await.unwrap();
        assert_eq!(&*got.json, w, "run {r}");
        let reference = s.restore(T, built, r).await.unwrap();
        assert_eq!(*got.json, *reference.json, "run {r} as with checkpoints");
    }
    for r in &runs {
        assert!(
            s.restore(T, th, r).await.unwrap().from_checkpoint,
            "run {r} restores from its stored checkpoints"
        );
    }
    // A run appended with checkpoints continues the deferred thread.
    append(&s, T, th, full_run(th, "next", None, "after the import")).await;
    let mut log = log;
    log.extend(full_run(th, "next", None, "after the import"));
    let next = s.restore(T, th, "next").await.unwrap();
    assert!(next.from_checkpoint, "built on the append");
    assert_eq!(
        *next.json,
        lineage_conversations(&log, &["next".to_owned()])[0]
    );
    s.close().await.unwrap();
    let s = open(b).await;
    for (r, w) in runs.iter().zip(&want).rev() {
        assert_eq!(
            &*s.restore(T, th, r).await.unwrap().json,
            w,
            "run {r} after reopen"
        );
    }
}

/// A delta checkpoint whose base is damaged or missing is never trusted: the
/// base is rebuilt from the log and the run restores exactly.
pub async fn damaged_or_missing_delta_bases_are_rebuilt<B: Harness>(b: &B) {
    let s = open(b).await;
    let th = "bases";
    let runs: Vec<String> = (0..12).map(|k| format!("r{k}")).collect();
    for (k, r) in runs.iter().enumerate() {
        append(&s, T, th, full_run(th, r, None, &format!("answer {k}"))).await;
    }
    let mut want = Vec::new();
    for r in &runs {
        want.push(reduce_all(&s.read_branch(T, th, r).await.unwrap()));
    }
    let based = bases(&s, th, &runs).await;
    // The latest run with a base, and its base: damaged, then missing.
    let Some((at, Some(base))) = based
        .iter()
        .cloned()
        .enumerate()
        .rev()
        .find(|(_, b)| b.is_some())
    else {
        panic!("the engine builds delta checkpoints");
    };
    b.damage_checkpoint(&s.raw, T, th, &base).await.unwrap();
    s.forget(T, th);
    let r = s.restore(T, th, &runs[at]).await.unwrap();
    assert_eq!(*r.json, want[at]);
    assert!(
        !r.from_checkpoint && r.rebuilt >= 1,
        "the damaged base was rebuilt"
    );
    let r = s.restore(T, th, &runs[at]).await.unwrap();
    assert!(r.from_checkpoint && r.rebuilt == 0, "and stored again");
    b.remove_checkpoint(&s.raw, T, th, &base).await.unwrap();
    s.forget(T, th);
    let r = s.restore(T, th, &runs[at]).await.unwrap();
    assert_eq!(*r.json, want[at]);
    assert!(r.rebuilt >= 1, "the missing base was rebuilt");
    // Damage every base at once: every run still restores exactly.
    for b2 in based.iter().flatten().collect::<BTreeSet<_>>() {
        b.damage_checkpoint(&s.raw, T, th, b2).await.unwrap();
        s.forget(T, th);
    }
    for (r, w) in runs.iter().zip(&want).rev() {
        assert_eq!(&*s.restore(T, th, r).await.unwrap().json, w, "run {r}");
    }
    for r in &runs {
        assert!(
            s.restore(T, th, r).await.unwrap().from_checkpoint,
            "{r} repaired"
        );
    }
}

/// A branch is its root-to-run path: runs of a sibling branch are absent
/// from its events and its conversation.
pub async fn branches_read_and_restore_their_own_lineage<B: Harness>(b: &B) {
    let s = open(b).await;
    let th = "tree";
    append(&s, T, th, full_run(th, "root", None, "root says hi")).await;
    append(&s, T, th, full_run(th, "left", Some("root"), "left branch")).await;
    append(
        &s,
        T,
        th,
        full_run(th, "right", Some("root"), "right branch"),
    )
    .await;
    append(&s, T, th, full_run(th, "right2", None, "after right")).await;
    let path: Vec<String> = s
        .branch(T, th, "right2")
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(path, ["root", "right", "right2"]);
    let events = s.read_branch(T, th, "right2").await.unwrap();
    let left = s.run(T, th, "left").await.unwrap();
    assert!(
        events
            .iter()
            .all(|e| e.seq < left.first_seq || e.seq > left.last_seq)
    );
    let text = s.restore(T, th, "right2").await.unwrap().json;
    assert!(text.contains("right branch") && text.contains("root says hi"));
    assert!(!text.contains("left branch"));
    let text = s.restore(T, th, "left").await.unwrap().json;
    assert!(text.contains("left branch") && !text.contains("right branch"));
}

/// A branch whose `RUN_STARTED.input.messages` restates a message that
/// another branch generated does not take that message in (lineage
/// provenance): the store restores, reads and checkpoints each run exactly
/// as the history core's `conversation_at` gives it, before and after a
/// reopen, whether the runs come in one batch each or all at once.
pub async fn a_message_restated_from_another_branch_does_not_leak_into_this_one<B: Harness>(b: &B) {
    let s = open(b).await;
    let th = "restated";
    let mut log = Vec::new();
    let root = full_run(th, "root", None, "root says hi");
    let left = full_run(th, "left", Some("root"), "left branch");
    // The client went back to `root` but sent everything it had seen,
    // the left branch's answer included, plus a new question.
    let mut right = vec![event(json!({
        "type": "RUN_STARTED", "threadId": th, "runId": "right", "parentRunId": "root",
        "input": {"threadId": th, "runId": "right", "state": {}, "tools": [], "context": [],
          "forwardedProps": {}, "messages": [
            {"id": "root-msg", "role": "assistant", "content": "root says hi"},
            {"id": "left-msg", "role": "assistant", "content": "left branch"},
            {"id": "u-right", "role": "user", "content": "and on the right?"}
        ]}
    }))];
    right.extend(text_message("right-msg", "right branch", 2));
    right.push(run_finished(th, "right"));
    // A later run on the right branch that restates the left message in a
    // snapshot as well.
    let mut right2 = vec![run_started(th, "right2", None)];
    right2.push(event(json!({"type":"MESSAGES_SNAPSHOT","messages":[
        {"id": "root-msg", "role": "assistant", "content": "root says hi"},
        {"id": "left-msg", "role": "assistant", "content": "left branch"},
        {"id": "right-msg", "role": "assistant", "content": "right branch"}
    ]})));
    right2.push(run_finished(th, "right2"));
    for batch in [root, left, right, right2] {
        log.extend(batch.iter().cloned());
        append(&s, T, th, batch).await;
    }
    let runs: Vec<String> = ["root", "left", "right", "right2"]
        .map(String::from)
        .to_vec();
    let want = lineage_conversations(&log, &runs);
    assert!(
        !want[2].contains("left branch") && !want[3].contains("left branch"),
        "the history core drops the restated message: {want:?}"
    );
    for (r, w) in runs.iter().zip(&want) {
        assert_eq!(&*s.restore(T, th, r).await.unwrap().json, w, "run {r}");
        // The branch's events, as read, reduce to the same conversation.
        assert_eq!(
            &reduce_all(&s.read_branch(T, th, r).await.unwrap()),
            w,
            "branch of {r}"
        );
    }
    let branch = s.read_branch(T, th, "right").await.unwrap();
    assert!(
        branch
            .iter()
            .all(|e| !e.event.json().contains("left branch")),
        "the left branch's message is not read on the right one"
    );
    let (left, right) = (
        s.run(T, th, "left").await.unwrap(),
        s.run(T, th, "right").await.unwrap(),
    );
    assert_eq!(
        branch.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..left.first_seq)
            .chain(right.first_seq..=right.last_seq)
            .collect::<Vec<_>>(),
        "every event of the branch, with its own sequence number"
    );
    // The same log in one batch, on another thread.
    let one = "restated-at-once";
    let relabeled: Vec<Event> = log
        .iter()
        .map(|e| {
            let mut v = e.to_value();
            if v.get("threadId").is_some() {
                v["threadId"] = json!(one);
            }
            event(v)
        })
        .collect();
    append(&s, T, one, relabeled).await;
    for (r, w) in runs.iter().zip(&want) {
        assert_eq!(
            &*s.restore(T, one, r).await.unwrap().json,
            w,
            "run {r} (one batch)"
        );
    }
    // The thread deleted and written again: what the engine knew of the
    // old one's messages is not used (here the client sends the id first,
    // so it is the client's message).
    s.delete_thread(T, one).await.unwrap();
    let mut again = vec![event(json!({
        "type": "RUN_STARTED", "threadId": one, "runId": "x",
        "input": {"threadId": one, "runId": "x", "state": {}, "tools": [], "context": [],
          "forwardedProps": {}, "messages": [
            {"id": "left-msg", "role": "user", "content": "mine now"}
        ]}
    }))];
    again.extend(text_message("x-msg", "answer", 1));
    again.push(run_finished(one, "x"));
    let mine = lineage_conversations(&again, &["x".to_owned()]);
    append(&s, T, one, again).await;
    assert!(mine[0].contains("mine now"));
    assert_eq!(
        &*s.restore(T, one, "x").await.unwrap().json,
        &mine[0],
        "rewritten thread"
    );
    assert_eq!(
        &reduce_all(&s.read_branch(T, one, "x").await.unwrap()),
        &mine[0]
    );
    s.close().await.unwrap();
    let s = open(b).await;
    for (r, w) in runs.iter().zip(&want).rev() {
        assert_eq!(
            &*s.restore(T, th, r).await.unwrap().json,
            w,
            "run {r} after reopen"
        );
    }
}

/// Nothing of one tenant is visible to another, even with equal thread ids.
pub async fn tenants_are_isolated<B: Harness>(b: &B) {
    let s = open(b).await;
    append(
        &s,
        "t1",
        "same",
        full_run("same", "run", None, "tenant one"),
    )
    .await;
    append(&s, "t2", "same", vec![custom(1)]).await;
    append(&s, "t1", "only-t1", vec![custom(1)]).await;
    assert_eq!(all(&s, "t2", "same").await.len(), 1);
    assert_eq!(
        s.run("t2", "same", "run").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        s.read("t2", "only-t1", 1, 10).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        s.restore("t2", "same", "run").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let t2 = s
        .list_threads("t2", &ThreadFilter::default())
        .await
        .unwrap();
    assert_eq!(t2.threads.len(), 1);
    let runs = s.list_runs("t2", &RunFilter::default()).await.unwrap();
    assert!(runs.runs.is_empty());
    assert_eq!(
        s.delete_thread("t2", "only-t1").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // A subscription in t2 does not see t1's appends.
    let mut sub = s.subscribe("t2", "same", 2).await.unwrap();
    append(&s, "t1", "same", vec![custom(9)]).await;
    append(&s, "t2", "same", vec![custom(2)]).await;
    let e = tokio::time::timeout(STUCK, sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((e.seq, e.event.json()), (2, custom(2).json()));
    s.delete_thread("t2", "same").await.unwrap();
    assert_eq!(
        all(&s, "t1", "same").await.len(),
        full_run("same", "run", None, "tenant one").len() + 1
    );
    let tenants = s.tenants().await.unwrap();
    assert_eq!(tenants, ["t1"]);
}

/// Deleting a thread removes its events, runs and checkpoints; its id can be
/// used again from sequence 1.
pub async fn delete_removes_everything<B: Harness>(b: &B) {
    let s = open(b).await;
    append(&s, T, "gone", full_run("gone", "r", None, "bye")).await;
    append(&s, T, "kept", vec![custom(1)]).await;
    s.delete_thread(T, "gone").await.unwrap();
    assert_eq!(
        s.read(T, "gone", 1, 10).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        s.thread(T, "gone").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        s.run(T, "gone", "r").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let runs = s
        .list_runs(
            T,
            &RunFilter {
                thread_id: Some("gone".into()),
                ..RunFilter::default()
            },
        )
        .await
        .unwrap();
    assert!(runs.runs.is_empty());
    let listed = s.list_threads(T, &ThreadFilter::default()).await.unwrap();
    let ids: Vec<&str> = listed
        .threads
        .iter()
        .map(|t| t.thread_id.as_str())
        .collect();
    assert_eq!(ids, ["kept"]);
    assert_eq!(
        s.delete_thread(T, "gone").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let a = s
        .append(
            T,
            "gone",
            AppendRequest::new(full_run("gone", "r", None, "again")).expect_seq(0),
        )
        .await
        .unwrap();
    assert_eq!(a.first_seq, 1);
    assert!(s.load_checkpoint(T, "gone", "r").await.unwrap().is_some());
    let stats = s.stats().await.unwrap();
    assert_eq!(stats.threads, 2);
    assert_eq!(stats.runs, 1);
    assert_eq!(stats.events, a.last_seq + 1);
}

/// One event of 10 MB round-trips exactly.
pub async fn a_ten_megabyte_event<B: Harness>(b: &B) {
    let s = open(b).await;
    let big: String = (0..10 * 1024 * 1024 / 16)
        .map(|i| format!("{:015x}-", i * 2_654_435_761u64 % (1 << 60)))
        .collect();
    let e = event(json!({"type":"CUSTOM","name":"big","value":big}));
    assert!(e.len_bytes() >= 10 * 1024 * 1024);
    append(&s, T, "big", vec![custom(1), e.clone(), custom(3)]).await;
    let got = all(&s, T, "big").await;
    assert_eq!(got.len(), 3);
    assert_eq!(got[1].event.json(), e.json());
    assert_eq!(
        s.thread(T, "big").await.unwrap().bytes,
        got.iter().map(|e| e.event.len_bytes() as u64).sum::<u64>()
    );
}

/// Hostile ids are data: they round-trip through every call; empty and
/// oversized ids are `Invalid`.
pub async fn hostile_ids_round_trip<B: Harness>(b: &B) {
    let s = open(b).await;
    let long = "x".repeat(10_000);
    let ids = [
        "../x",
        "../../etc/passwd",
        "a\0b",
        long.as_str(),
        "\u{202e}rtl\u{202c} عربى",
        "emoji 😀👩‍👩‍👧",
        "/",
        ".",
        "CON",
        "a/b\\c",
        "' OR 1=1; --",
        "%00%2e%2e",
    ];
    for (i, id) in ids.iter().enumerate() {
        let tenant = format!("tenant {id}");
        let run = format!("run {id}");
        append(
            &s,
            &tenant,
            id,
            full_run(id, &run, None, &format!("text {i}")),
        )
        .await;
        let got = all(&s, &tenant, id).await;
        assert_eq!(got[0].event.json(), run_started(id, &run, None).json());
        let r = s.run(&tenant, id, &run).await.unwrap();
        assert_eq!(
            (r.thread_id.as_str(), r.run_id.as_str()),
            (*id, run.as_str())
        );
        assert!(s.restore(&tenant, id, &run).await.unwrap().from_checkpoint);
        let listed = s
            .list_threads(&tenant, &ThreadFilter::default())
            .await
            .unwrap();
        assert_eq!(listed.threads.len(), 1);
        assert_eq!(listed.threads[0].thread_id, *id);
    }
    // The same ids as threads of one tenant do not collide.
    for id in ids {
        append(&s, T, id, vec![custom(1)]).await;
    }
    let listed = s
        .list_threads(
            T,
            &ThreadFilter {
                limit: 100,
                ..ThreadFilter::default()
            },
        )
        .await
        .unwrap();
    let got: BTreeSet<&str> = listed
        .threads
        .iter()
        .map(|t| t.thread_id.as_str())
        .collect();
    assert_eq!(got, ids.iter().copied().collect::<BTreeSet<_>>());
    let too_long = "y".repeat(MAX_ID_BYTES + 1);
    for (tenant, thread) in [("", "t"), (T, ""), (T, too_long.as_str())] {
        let e = s
            .append(tenant, thread, AppendRequest::new(vec![custom(1)]))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid);
        // A channel is refused the same way, on an existing thread's tenant
        // or not; a rename to such an id too, and the thread keeps its id.
        let e = s
            .put_channel(tenant, thread, crate::Channel::new("a", "{}"))
            .await
            .unwrap_err();
        assert_eq!(
            e.kind(),
            ErrorKind::Invalid,
            "channel {tenant:?}/{thread:?}"
        );
        if tenant == T {
            let e = s.rename_thread(T, ids[0], thread).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Invalid, "rename to {thread:?}");
            assert_eq!(all(&s, T, ids[0]).await.len(), 1, "the thread is as it was");
        }
    }
}

/// Closing and reopening keeps everything: events, runs, checkpoints,
/// threads; a closed handle refuses calls.
pub async fn reopen_reads_everything_back<B: Harness>(b: &B) {
    let s = open(b).await;
    append(&s, T, "keep", full_run("keep", "r1", None, "durable words")).await;
    s.append(
        T,
        "keep",
        AppendRequest::new(vec![run_started("keep", "r2", None), custom(5)])
            .durability(Durability::Append),
    )
    .await
    .unwrap();
    append(&s, "other", "t", vec![custom(1)]).await;
    let before = all(&s, T, "keep").await;
    let runs_before = s.list_runs(T, &RunFilter::default()).await.unwrap().runs;
    let info_before = s.thread(T, "keep").await.unwrap();
    let stats_before = s.stats().await.unwrap();
    s.close().await.unwrap();
    assert_eq!(
        s.read(T, "keep", 1, 10).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    drop(s);
    let s = open(b).await;
    let after = all(&s, T, "keep").await;
    assert_eq!(after.len(), before.len());
    for (x, y) in before.iter().zip(&after) {
        assert_eq!(
            (x.seq, x.received_at, x.event.json()),
            (y.seq, y.received_at, y.event.json())
        );
    }
    let runs_after = s.list_runs(T, &RunFilter::default()).await.unwrap().runs;
    assert_eq!(runs_after, runs_before);
    assert_eq!(s.thread(T, "keep").await.unwrap(), info_before);
    let stats = s.stats().await.unwrap();
    assert_eq!(
        (
            stats.tenants,
            stats.threads,
            stats.runs,
            stats.events,
            stats.raw_bytes
        ),
        (
            stats_before.tenants,
            stats_before.threads,
            stats_before.runs,
            stats_before.events,
            stats_before.raw_bytes
        )
    );
    assert!(s.restore(T, "keep", "r1").await.unwrap().from_checkpoint);
    // Appending continues where it was.
    let a = s
        .append(
            T,
            "keep",
            AppendRequest::new(vec![custom(6)]).expect_seq(before.len() as u64),
        )
        .await
        .unwrap();
    assert_eq!(a.first_seq, before.len() as u64 + 1);
    // And the run left open can be marked interrupted.
    let marked = marked_ids(&s, s.mark_interrupted().await.unwrap()).await;
    assert_eq!(marked, [(T.to_owned(), "keep".to_owned(), "r2".to_owned())]);
}

/// Channels: one per (thread, agent), replaced on put, isolated by tenant and
/// thread, kept exactly (hostile agent names and any JSON object), surviving
/// a reopen, removed with their thread; a put on a missing thread or with a
/// state that is not a JSON object is refused and changes nothing.
pub async fn channels_are_kept_per_thread_and_agent<B: Harness>(b: &B) {
    use crate::Channel;
    let s = open(b).await;
    assert!(s.channels(T, "c").await.unwrap().is_empty());
    let missing = s
        .put_channel(T, "c", Channel::new("a", "{}"))
        .await
        .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    append(&s, T, "c", full_run("c", "r", None, "hi")).await;
    append(&s, T, "other", full_run("other", "r", None, "hi")).await;
    append(&s, "tenant-b", "c", full_run("c", "r", None, "hi")).await;
    let hostile = "w\u{0}r\u{202e}ter 🚀 ../x";
    let state_a = r#"{"sessions":"server","lastRunId":"r","upstreamThreads":{"r":"u-1"},"n":1.50}"#;
    let mut a = Channel::new("research", state_a);
    a.updated_at = crate::Timestamp(1_700_000_000_000_001);
    let mut w = Channel::new(hostile, r#"{"x":[1,{"y":null}]}"#);
    w.updated_at = crate::Timestamp(1_700_000_000_000_002);
    s.put_channel(T, "c", a.clone()).await.unwrap();
    s.put_channel(T, "c", w.clone()).await.unwrap();
    let bad = s
        .put_channel(T, "c", Channel::new("research", "[1]"))
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::Invalid);
    let bad = s
        .put_channel(T, "c", Channel::new("", "{}"))
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::Invalid);
    let mut got = s.channels(T, "c").await.unwrap();
    got.sort_by(|x, y| x.agent.cmp(&y.agent));
    let mut want = vec![a.clone(), w.clone()];
    want.sort_by(|x, y| x.agent.cmp(&y.agent));
    assert_eq!(got, want);
    assert_eq!(s.channel(T, "c", hostile).await.unwrap(), Some(w.clone()));
    assert!(s.channels(T, "other").await.unwrap().is_empty());
    assert!(s.channels("tenant-b", "c").await.unwrap().is_empty());
    // Replace.
    let mut a2 = Channel::new("research", r#"{"lastRunId":"r2"}"#);
    a2.updated_at = crate::Timestamp(1_700_000_000_000_003);
    s.put_channel(T, "c", a2.clone()).await.unwrap();
    assert_eq!(
        s.channel(T, "c", "research").await.unwrap(),
        Some(a2.clone())
    );
    assert_eq!(s.channels(T, "c").await.unwrap().len(), 2);
    // Reopen.
    s.close().await.unwrap();
    drop(s);
    let s = open(b).await;
    assert_eq!(s.channel(T, "c", "research").await.unwrap(), Some(a2));
    assert_eq!(s.channel(T, "c", hostile).await.unwrap(), Some(w));
    // Delete takes them along, and a new thread of the same id starts clean.
    s.delete_thread(T, "c").await.unwrap();
    assert!(s.channels(T, "c").await.unwrap().is_empty());
    append(&s, T, "c", full_run("c", "r", None, "hi")).await;
    assert!(s.channels(T, "c").await.unwrap().is_empty());
    s.close().await.unwrap();
}

/// Renaming a thread moves everything of it (events, runs, checkpoints,
/// channels) in one step, survives a reopen, and refuses a target that has
/// events; the old id is free again.
pub async fn rename_moves_everything<B: Harness>(b: &B) {
    use crate::Channel;
    let s = open(b).await;
    append(&s, T, "stage", full_run("stage", "r1", None, "one")).await;
    append(&s, T, "stage", full_run("stage", "r2", Some("r1"), "two")).await;
    let ch = Channel::new("a", r#"{"x":1}"#);
    s.put_channel(T, "stage", ch.clone()).await.unwrap();
    let texts = |page: Vec<StoredEvent>| -> Vec<(u64, i64, String)> {
        page.into_iter()
            .map(|e| (e.seq, e.received_at.0, e.event.json().to_owned()))
            .collect()
    };
    let events = texts(s.read(T, "stage", 1, 1000).await.unwrap().events);
    let last = events.len() as u64;
    let run_ids = async |s: &Store, id: &str| -> Vec<(String, String, RunStatus, u64)> {
        let filter = RunFilter {
            thread_id: Some(id.into()),
            ..RunFilter::default()
        };
        let mut runs: Vec<_> = s
            .list_runs(T, &filter)
            .await
            .unwrap()
            .runs
            .into_iter()
            .map(|r| (r.thread_id, r.run_id, r.status, r.first_seq))
            .collect();
        runs.sort_by_key(|r| r.3);
        runs
    };
    assert_eq!(run_ids(&s, "stage").await.len(), 2);
    let restored = s.restore(T, "stage", "r2").await.unwrap().json;
    append(&s, T, "busy", vec![custom(1)]).await;
    // A target with events: refused, nothing changed.
    let e = s.rename_thread(T, "stage", "busy").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert_eq!(
        texts(s.read(T, "stage", 1, 1000).await.unwrap().events),
        events
    );
    assert_eq!(s.thread(T, "busy").await.unwrap().last_seq, 1);
    // An unknown source.
    let e = s.rename_thread(T, "nothing", "new").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    s.rename_thread(T, "stage", "final").await.unwrap();
    let check = async |s: &Store, when: &str| {
        assert_eq!(
            s.thread(T, "stage").await.unwrap_err().kind(),
            ErrorKind::NotFound,
            "{when}"
        );
        assert!(s.channels(T, "stage").await.unwrap().is_empty(), "{when}");
        assert!(run_ids(s, "stage").await.is_empty(), "{when}");
        assert_eq!(
            texts(s.read(T, "final", 1, 1000).await.unwrap().events),
            events,
            "{when}"
        );
        let info = s.thread(T, "final").await.unwrap();
        assert_eq!((info.thread_id.as_str(), info.last_seq), ("final", last));
        assert_eq!(s.channels(T, "final").await.unwrap(), vec![ch.clone()]);
        let runs = run_ids(s, "final").await;
        assert_eq!(runs.len(), 2, "{when}");
        assert!(runs.iter().all(|r| r.0 == "final"), "{when}: {runs:?}");
        assert_eq!(s.run(T, "final", "r2").await.unwrap().thread_id, "final");
        assert_eq!(s.restore(T, "final", "r2").await.unwrap().json, restored);
        let ids: Vec<String> = s
            .list_threads(T, &ThreadFilter::default())
            .await
            .unwrap()
            .threads
            .into_iter()
            .map(|t| t.thread_id)
            .collect();
        assert!(
            ids.contains(&"final".to_owned()) && !ids.contains(&"stage".to_owned()),
            "{when}: {ids:?}"
        );
    };
    check(&s, "after the rename").await;
    s.close().await.unwrap();
    drop(s);
    let s = open(b).await;
    check(&s, "after a reopen").await;
    // Appends continue under the new id; the old id starts afresh.
    append(&s, T, "final", vec![custom(7)]).await;
    assert_eq!(s.thread(T, "final").await.unwrap().last_seq, last + 1);
    append(&s, T, "stage", vec![custom(8)]).await;
    assert_eq!(s.thread(T, "stage").await.unwrap().last_seq, 1);
    s.close().await.unwrap();
}
