//! Two store instances on one database (two pools, two listening
//! connections), as two gateway replicas would have.

mod common;

use std::time::Duration;

use agui_protocol::Event;
use agui_store::{AppendRequest, ErrorKind};
use common::Schema;
use futures::StreamExt;

const STUCK: Duration = Duration::from_secs(20);

fn custom(n: u64) -> Event {
    Event::from_json(&format!(r#"{{"type":"CUSTOM","name":"n","value":{n}}}"#)).unwrap()
}

/// Tenant, thread and run of each run `mark_interrupted` returned, in
/// order; each must be returned `interrupted`.
fn ids_of(marked: &[(String, agui_store::RunRecord)]) -> Vec<(&str, &str, &str)> {
    marked
        .iter()
        .map(|(tenant, r)| {
            assert_eq!(r.status, agui_store::RunStatus::Interrupted, "{r:?}");
            assert!(r.finished_at.is_some(), "{r:?}");
            (tenant.as_str(), r.thread_id.as_str(), r.run_id.as_str())
        })
        .collect()
}

async fn next_seq(s: &mut agui_store::EventStream) -> u64 {
    tokio::time::timeout(STUCK, s.next())
        .await
        .expect("a subscription stalled")
        .expect("a subscription ended early")
        .expect("a subscription failed")
        .seq
}

/// A replica publishes its own commits to its subscribers as they commit:
/// nothing it wrote is read back. Another replica reads each batch once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn own_commits_are_published_without_reading_them_back() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let (a, b) = tokio::join!(schema.open(), schema.open());
    let (raw_a, raw_b) = (a.unwrap(), b.unwrap());
    let (a, b) = (
        agui_store::Store::new(raw_a.clone()),
        agui_store::Store::new(raw_b.clone()),
    );
    let mut mine = a.subscribe("t", "own", 1).await.unwrap();
    let mut theirs = b.subscribe("t", "own", 1).await.unwrap();
    for k in 0..20u64 {
        let got = a
            .append("t", "own", AppendRequest::new(vec![custom(k)]))
            .await
            .unwrap();
        for sub in [&mut mine, &mut theirs] {
            let e = tokio::time::timeout(STUCK, sub.next())
                .await
                .expect("the event arrives")
                .unwrap()
                .unwrap();
            assert_eq!(e.seq, got.first_seq);
        }
    }
    assert_eq!(raw_a.ranges_read(), 0, "the writer read nothing back");
    let read = raw_b.ranges_read();
    assert!((1..=20).contains(&read), "the other replica: {read}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subscriber_on_one_replica_sees_appends_through_the_other_live() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    // Both replicas start together: migrations apply once.
    let (a, b) = tokio::join!(schema.open(), schema.open());
    let (a, b) = (
        agui_store::Store::new(a.unwrap()),
        agui_store::Store::new(b.unwrap()),
    );
    a.append("t", "x", AppendRequest::new((1..=5).map(custom).collect()))
        .await
        .unwrap();
    let mut sub = b.subscribe("t", "x", 3).await.unwrap();
    let mut later = b.subscribe("t", "not-yet", 1).await.unwrap();
    assert_eq!(next_seq(&mut sub).await, 3);
    assert_eq!(next_seq(&mut sub).await, 4);
    assert_eq!(next_seq(&mut sub).await, 5);
    // Live: each append through A reaches B's subscriber.
    for k in 0..30u64 {
        let got = a
            .append("t", "x", AppendRequest::new(vec![custom(100 + k)]))
            .await
            .unwrap();
        let e = tokio::time::timeout(STUCK, sub.next())
            .await
            .expect("live event through the other replica")
            .unwrap()
            .unwrap();
        assert_eq!(e.seq, got.first_seq);
        assert_eq!(e.event.json(), custom(100 + k).json());
    }
    // A thread that did not exist when B subscribed.
    a.append(
        "t",
        "not-yet",
        AppendRequest::new(vec![custom(1), custom(2)]),
    )
    .await
    .unwrap();
    assert_eq!(next_seq(&mut later).await, 1);
    assert_eq!(next_seq(&mut later).await, 2);
    // Nothing extra arrives.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), sub.next())
            .await
            .is_err(),
        "a duplicate arrived"
    );
    // Deleting through A ends B's subscription.
    a.delete_thread("t", "x").await.unwrap();
    let end = tokio::time::timeout(STUCK, sub.next()).await.expect("ends");
    assert!(end.is_none());
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn appenders_on_two_replicas_serialize_and_conflict() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let a = agui_store::Store::new(schema.open().await.unwrap());
    let b = agui_store::Store::new(schema.open().await.unwrap());
    let mut sub = a.subscribe("t", "race", 1).await.unwrap();
    let mut tasks = Vec::new();
    for (w, store) in [a.clone(), b.clone(), a.clone(), b.clone()]
        .into_iter()
        .enumerate()
    {
        tasks.push(tokio::spawn(async move {
            for k in 0..25u64 {
                let base = (w as u64) * 1000 + k * 10;
                store
                    .append(
                        "t",
                        "race",
                        AppendRequest::new((0..4).map(|i| custom(base + i)).collect()),
                    )
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let all = b.read_range("t", "race", 1, u64::MAX).await.unwrap();
    assert_eq!(all.len(), 400);
    // Every batch is contiguous: 4 consecutive values in 4 consecutive seqs.
    for chunk in all.chunks(4) {
        let first = custom(0);
        assert_eq!(chunk[0].event.event_type(), first.event_type());
        let values: Vec<u64> = chunk
            .iter()
            .map(|e| e.event.to_value()["value"].as_u64().unwrap())
            .collect();
        assert_eq!(
            values,
            (values[0]..values[0] + 4).collect::<Vec<_>>(),
            "a batch was interleaved"
        );
    }
    for want in 1..=400 {
        assert_eq!(next_seq(&mut sub).await, want);
    }
    // Optimistic concurrency across replicas: both expect 400, one wins.
    let (x, y) = tokio::join!(
        a.append(
            "t",
            "race",
            AppendRequest::new(vec![custom(1)]).expect_seq(400)
        ),
        b.append(
            "t",
            "race",
            AppendRequest::new(vec![custom(2)]).expect_seq(400)
        ),
    );
    let (won, lost) = match (x, y) {
        (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
        other => panic!("exactly one append must win: {other:?}"),
    };
    assert_eq!(won.first_seq, 401);
    assert_eq!(lost.kind(), ErrorKind::Conflict);
    assert_eq!(lost.seq_conflict().unwrap().actual, 401);
}

#[tokio::test]
async fn errors_do_not_show_sql_and_closed_stores_refuse() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let s = agui_store::Store::new(schema.open().await.unwrap());
    let e = s
        .list_threads(
            "t",
            &agui_store::ThreadFilter {
                cursor: Some("zz".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    // Damage a chunk below the API: reads say Corrupt, without SQL.
    s.append("t", "d", AppendRequest::new(vec![custom(1)]))
        .await
        .unwrap();
    let c = schema.client().await.unwrap();
    c.batch_execute("UPDATE chunks SET data = '\\xfffe'")
        .await
        .unwrap();
    let e = s.read("t", "d", 1, 10).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    c.batch_execute("UPDATE chunks SET codec = 1")
        .await
        .unwrap();
    let e = s.read("t", "d", 1, 10).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    let shown = e.to_string().to_lowercase();
    assert!(
        !shown.contains("select") && !shown.contains("chunks"),
        "{shown}"
    );
    s.close().await.unwrap();
    assert_eq!(
        s.thread("t", "d").await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    // An unreachable server is Unavailable, and says nothing of the URL.
    let e = match agui_store_postgres::open("postgres://nobody@127.0.0.1:1/none?schema=x").await {
        Err(e) => e,
        Ok(_) => panic!("port 1 has no PostgreSQL"),
    };
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(!e.to_string().contains("nobody"));
}

#[tokio::test]
async fn durability_chooses_the_commit_mode() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let s = agui_store::Store::new(schema.open().await.unwrap());
    let started = Event::from_json(r#"{"type":"RUN_STARTED","threadId":"d","runId":"r"}"#).unwrap();
    let finished =
        Event::from_json(r#"{"type":"RUN_FINISHED","threadId":"d","runId":"r"}"#).unwrap();
    // RunEnd: a batch inside a run commits asynchronously...
    let a = s
        .append("t", "d", AppendRequest::new(vec![started, custom(1)]))
        .await
        .unwrap();
    assert!(!a.durable);
    // ...the batch that ends it synchronously.
    let a = s
        .append("t", "d", AppendRequest::new(vec![finished]))
        .await
        .unwrap();
    assert!(a.durable);
    // Append: every batch synchronously.
    let a = s
        .append(
            "t",
            "d",
            AppendRequest::new(vec![custom(2)]).durability(agui_store::Durability::Append),
        )
        .await
        .unwrap();
    assert!(a.durable);
    s.flush().await.unwrap();
    assert_eq!(s.thread("t", "d").await.unwrap().last_seq, 4);
}

#[tokio::test]
async fn a_head_changed_by_another_replica_is_not_written_over() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let (a, b, z) = (
        agui_store::Store::new(schema.open().await.unwrap()),
        agui_store::Store::new(schema.open().await.unwrap()),
        agui_store::Store::new(schema.open().await.unwrap()),
    );
    let started = Event::from_json(r#"{"type":"RUN_STARTED","threadId":"x","runId":"r"}"#).unwrap();
    z.append("t", "x", AppendRequest::new(vec![started, custom(1)]))
        .await
        .unwrap();
    // A learns the head (run r running) from a conflicting append.
    let e = a
        .append("t", "x", AppendRequest::new(vec![custom(9)]).expect_seq(7))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict);
    // Z, streaming r, goes away; B (starting up) interrupts r...
    z.close().await.unwrap();
    drop(z);
    let mut marked = Vec::new();
    for _ in 0..100 {
        marked = b.mark_interrupted().await.unwrap();
        if !marked.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ids_of(&marked), [("t", "x", "r")]);
    // ...and A's next append, planned against what A saw, must notice.
    a.append("t", "x", AppendRequest::new(vec![custom(2)]))
        .await
        .unwrap();
    let run = a.run("t", "x", "r").await.unwrap();
    assert_eq!(run.status, agui_store::RunStatus::Interrupted);
    assert_eq!((run.last_seq, run.event_count), (3, 3));
    // B appends, then A (whose head is behind) appends with and without
    // an expectation.
    b.append("t", "x", AppendRequest::new(vec![custom(3)]))
        .await
        .unwrap();
    let lost = a
        .append("t", "x", AppendRequest::new(vec![custom(4)]).expect_seq(3))
        .await
        .unwrap_err();
    assert_eq!(lost.kind(), ErrorKind::Conflict);
    let got = a
        .append("t", "x", AppendRequest::new(vec![custom(4)]))
        .await
        .unwrap();
    assert_eq!(got.first_seq, 5);
    // A thread deleted and re-created through B is a new thread to A.
    b.delete_thread("t", "x").await.unwrap();
    b.append("t", "x", AppendRequest::new(vec![custom(5)]))
        .await
        .unwrap();
    let got = a
        .append("t", "x", AppendRequest::new(vec![custom(6)]))
        .await
        .unwrap();
    assert_eq!(got.first_seq, 2);
    let page = b.read("t", "x", 1, 10).await.unwrap();
    let texts: Vec<&str> = page.events.iter().map(|e| e.event.json()).collect();
    assert_eq!(texts, [custom(5).json(), custom(6).json()]);
}

#[tokio::test]
async fn start_up_interrupts_only_runs_whose_replica_is_gone() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let (a, b) = (
        agui_store::Store::new(schema.open().await.unwrap()),
        agui_store::Store::new(schema.open().await.unwrap()),
    );
    let started = |run: &str| {
        Event::from_json(&format!(
            r#"{{"type":"RUN_STARTED","threadId":"x","runId":"{run}"}}"#
        ))
        .unwrap()
    };
    a.append("t", "a", AppendRequest::new(vec![started("ra"), custom(1)]))
        .await
        .unwrap();
    b.append("t", "b", AppendRequest::new(vec![started("rb"), custom(1)]))
        .await
        .unwrap();
    // A third replica starts while A and B are live: nothing is theirs to
    // interrupt.
    let c = agui_store::Store::new(schema.open().await.unwrap());
    assert!(c.mark_interrupted().await.unwrap().is_empty());
    // A goes away: its run is orphaned, B's is not.
    a.close().await.unwrap();
    drop(a);
    let mut marked = Vec::new();
    for _ in 0..100 {
        marked = c.mark_interrupted().await.unwrap();
        if !marked.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ids_of(&marked), [("t", "a", "ra")]);
    assert_eq!(marked[0].1, c.run("t", "a", "ra").await.unwrap());
    let status = |s: &agui_store::Store, th: &'static str, run: &'static str| {
        let s = s.clone();
        async move { s.run("t", th, run).await.unwrap().status }
    };
    assert_eq!(
        status(&c, "a", "ra").await,
        agui_store::RunStatus::Interrupted
    );
    assert_eq!(status(&c, "b", "rb").await, agui_store::RunStatus::Running);
    // B continues its run undisturbed.
    b.append("t", "b", AppendRequest::new(vec![custom(2)]))
        .await
        .unwrap();
    assert_eq!(status(&b, "b", "rb").await, agui_store::RunStatus::Running);
    // A store marking at its own start-up counts its own runs as stale
    // (the contract's crash recovery, as the conformance suite checks).
    assert_eq!(
        ids_of(&b.mark_interrupted().await.unwrap()),
        [("t", "b", "rb")]
    );
    assert_eq!(
        status(&c, "b", "rb").await,
        agui_store::RunStatus::Interrupted
    );
}

/// A running store's sweep (`mark_interrupted_elsewhere`) never takes its
/// own runs nor a live replica's; a gone replica's it takes once that one
/// has looked gone for the grace, and returns them with their tenants; two
/// replicas sweeping at once share them out, each run to one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sweep_returns_a_gone_replicas_runs_once_each_after_the_grace() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let open = || async { agui_store::Store::new(schema.open().await.unwrap()) };
    let (a, b, c) = (open().await, open().await, open().await);
    let started = |run: &str| {
        Event::from_json(&format!(
            r#"{{"type":"RUN_STARTED","threadId":"x","runId":"{run}"}}"#
        ))
        .unwrap()
    };
    for (tenant, thread, run) in [("t1", "a1", "r1"), ("t2", "a2", "r2")] {
        a.append(
            tenant,
            thread,
            AppendRequest::new(vec![started(run), custom(1)]),
        )
        .await
        .unwrap();
    }
    b.append("t1", "b", AppendRequest::new(vec![started("rb")]))
        .await
        .unwrap();
    for s in [&a, &b, &c] {
        assert!(s.mark_interrupted_elsewhere().await.unwrap().is_empty());
    }
    a.close().await.unwrap();
    drop(a);
    let gone = std::time::Instant::now();
    let mut got: Vec<(String, String, String, agui_store::RunStatus)> = Vec::new();
    while got.len() < 2 && gone.elapsed() < STUCK {
        let (x, y) = tokio::join!(
            b.mark_interrupted_elsewhere(),
            c.mark_interrupted_elsewhere()
        );
        for (tenant, run) in x.unwrap().into_iter().chain(y.unwrap()) {
            assert!(
                gone.elapsed() >= Duration::from_millis(2900),
                "{} taken {:?} after its replica went",
                run.run_id,
                gone.elapsed()
            );
            got.push((tenant, run.thread_id, run.run_id, run.status));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    got.sort_by(|x, y| (&x.0, &x.2).cmp(&(&y.0, &y.2)));
    let interrupted = agui_store::RunStatus::Interrupted;
    assert_eq!(
        got,
        [
            ("t1".into(), "a1".into(), "r1".into(), interrupted),
            ("t2".into(), "a2".into(), "r2".into(), interrupted),
        ]
    );
    for s in [&b, &c] {
        assert!(s.mark_interrupted_elsewhere().await.unwrap().is_empty());
    }
    assert_eq!(
        b.run("t1", "b", "rb").await.unwrap().status,
        agui_store::RunStatus::Running
    );
    assert_eq!(c.run("t2", "a2", "r2").await.unwrap().status, interrupted);
}

#[tokio::test]
async fn a_thread_claimed_by_one_replica_is_seen_by_the_other_until_released_or_gone() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let (a, b) = (
        agui_store::Store::new(schema.open().await.unwrap()),
        agui_store::Store::new(schema.open().await.unwrap()),
    );
    // Nothing of the run is stored yet: the claim alone makes it visible.
    assert_eq!(a.claim_thread("t", "x", "r1").await.unwrap(), None);
    assert_eq!(
        b.claim_thread("t", "x", "").await.unwrap().as_deref(),
        Some("r1")
    );
    // Other threads and tenants are free.
    assert_eq!(b.claim_thread("t", "y", "r2").await.unwrap(), None);
    assert_eq!(b.claim_thread("u", "x", "r3").await.unwrap(), None);
    // Releasing someone else's run changes nothing; the holder's does.
    b.release_thread("t", "x", "r1").await.unwrap();
    assert!(b.claim_thread("t", "x", "r4").await.unwrap().is_some());
    a.release_thread("t", "x", "r1").await.unwrap();
    assert_eq!(b.claim_thread("t", "x", "r4").await.unwrap(), None);
    // A replica that goes away loses its claims.
    assert_eq!(a.claim_thread("t", "z", "r5").await.unwrap(), None);
    a.close().await.unwrap();
    drop(a);
    let mut free = false;
    for _ in 0..100 {
        if b.claim_thread("t", "z", "r6").await.unwrap().is_none() {
            free = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(free, "the claim of a closed replica did not lapse");
}

/// A replica starting up, or sweeping, while another replica's listening
/// connection, the one holding its session lock, is reconnecting leaves
/// that replica's runs alone: a session whose pooled connections are still
/// there is taken only once it stayed lockless for the grace, at start-up
/// too (the start-up call waits for it). Before, a start-up in that gap
/// interrupted a live replica's run in the middle of its stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn start_up_leaves_the_runs_of_a_replica_whose_lock_is_reconnecting() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let a = agui_store::Store::new(schema.open().await.unwrap());
    let started =
        Event::from_json(r#"{"type":"RUN_STARTED","threadId":"x","runId":"ra"}"#).unwrap();
    a.append("t", "x", AppendRequest::new(vec![started, custom(1)]))
        .await
        .unwrap();
    let c = agui_store::Store::new(schema.open().await.unwrap());
    let admin = schema.client().await.unwrap();
    let space = i64::from(agui_store_postgres::session_lock_space(&schema.name));
    let owner: i32 = admin
        .query_one("SELECT owner FROM runs WHERE run_id = 'ra'", &[])
        .await
        .unwrap()
        .get(0);
    let holder = "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
                  AND objsubid = 2 AND classid::text::bigint = $1 \
                  AND objid::text::bigint = $2";
    let pid: i32 = admin
        .query_one(holder, &[&space, &i64::from(owner)])
        .await
        .unwrap()
        .get(0);
    // A's listening connection is cut; A reconnects it 200 ms later.
    admin
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    let mut free = false;
    for _ in 0..200 {
        if admin
            .query_opt(holder, &[&space, &i64::from(owner)])
            .await
            .unwrap()
            .is_none()
        {
            free = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(free, "the lock of A's cut connection was never free");
    // C's sweep in the gap leaves A's run: A's pooled connections are there.
    assert!(c.mark_interrupted_elsewhere().await.unwrap().is_empty());
    // C starts up in the gap: A's run is not its to close.
    assert!(c.mark_interrupted().await.unwrap().is_empty());
    assert_eq!(
        a.run("t", "x", "ra").await.unwrap().status,
        agui_store::RunStatus::Running
    );
    assert!(
        admin
            .query_opt(holder, &[&space, &i64::from(owner)])
            .await
            .unwrap()
            .is_some(),
        "A holds its lock again"
    );
    a.append("t", "x", AppendRequest::new(vec![custom(2)]))
        .await
        .unwrap();
    assert!(c.mark_interrupted_elsewhere().await.unwrap().is_empty());
    assert_eq!(
        c.run("t", "x", "ra").await.unwrap().status,
        agui_store::RunStatus::Running
    );
}
