//! Probes of the engine over PostgreSQL as an attacker or an unlucky
//! operator would drive it: two replicas (two `PgStore`s, two engines) on
//! one schema racing, renaming, deleting and re-creating threads under each
//! other, listening connections that die, and ids at the edges of the
//! contract. Each test gets a schema of its own (dropped afterwards).
//! Skipped without `AGUI_TEST_POSTGRES_URL`, as the crate's other tests.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use agui_protocol::Event;
use agui_store::sample::{full_run, run_started};
use agui_store::{AppendRequest, ErrorKind, EventStream, Store, Timestamp};
use common::Schema;
use futures::StreamExt;

const STUCK: Duration = Duration::from_secs(20);

fn custom(n: u64) -> Event {
    Event::from_json(&format!(r#"{{"type":"CUSTOM","name":"n","value":{n}}}"#)).unwrap()
}

fn value(e: &Event) -> u64 {
    e.to_value()["value"].as_u64().unwrap()
}

async fn two_replicas(schema: &Schema) -> (Store, Store) {
    let (a, b) = tokio::join!(schema.open(), schema.open());
    (Store::new(a.unwrap()), Store::new(b.unwrap()))
}

/// Two replicas opened one after the other: B has the higher session
/// number (see `kill_last_listener`).
async fn a_then_b(schema: &Schema) -> (Store, Store) {
    let a = Store::new(schema.open().await.unwrap());
    let b = Store::new(schema.open().await.unwrap());
    (a, b)
}

/// Reads a subscription until it has yielded `through` (every sequence
/// number once, in order) and returns the values seen.
async fn drain_to(sub: &mut EventStream, through: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut want = 1;
    while want <= through {
        let e = tokio::time::timeout(STUCK, sub.next())
            .await
            .unwrap_or_else(|_| panic!("a subscription stalled before seq {want}"))
            .expect("a subscription ended early")
            .expect("a subscription failed");
        assert_eq!(e.seq, want, "a subscriber skipped or repeated an event");
        out.push((e.seq, value(&e.event)));
        want += 1;
    }
    out
}

/// Two replicas, two writers on each: half append blindly, half with
/// `expect_seq` (read the head, append, retry on `Conflict`). A subscriber
/// on each replica gets every event once, in order, exactly as stored, and
/// nothing after; every acknowledged append is where it was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_replicas_with_and_without_expect_seq_deliver_each_event_once_to_both() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let (a, b) = two_replicas(&schema).await;
    let mut sub_a = a.subscribe("t", "race", 1).await.unwrap();
    let mut sub_b = b.subscribe("t", "race", 1).await.unwrap();
    const ROUNDS: u64 = 30;
    let mut tasks = Vec::new();
    for (w, store) in [a.clone(), b.clone(), a.clone(), b.clone()]
        .into_iter()
        .enumerate()
    {
        let optimistic = w >= 2;
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for k in 0..ROUNDS {
                let base = (w as u64 + 1) * 10_000 + k * 10;
                let batch: Vec<Event> = (0..3).map(|i| custom(base + i)).collect();
                let got = if optimistic {
                    loop {
                        let seen = match store.thread("t", "race").await {
                            Ok(info) => info.last_seq,
                            Err(e) if e.kind() == ErrorKind::NotFound => 0,
                            Err(e) => panic!("{e}"),
                        };
                        match store
                            .append(
                                "t",
                                "race",
                                AppendRequest::new(batch.clone()).expect_seq(seen),
                            )
                            .await
                        {
                            Ok(got) => {
                                assert_eq!(got.first_seq, seen + 1, "expect_seq was not honoured");
                                break got;
                            }
                            Err(e) if e.kind() == ErrorKind::Conflict => continue,
                            Err(e) => panic!("{e}"),
                        }
                    }
                } else {
                    store
                        .append("t", "race", AppendRequest::new(batch))
                        .await
                        .unwrap()
                };
                acked.push((got.first_seq, base));
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    let total = 4 * ROUNDS * 3;
    let stored = b.read_range("t", "race", 1, u64::MAX).await.unwrap();
    assert_eq!(stored.len() as u64, total);
    let by_seq: BTreeMap<u64, u64> = stored.iter().map(|e| (e.seq, value(&e.event))).collect();
    for (first, base) in acked {
        for i in 0..3 {
            assert_eq!(
                by_seq[&(first + i)],
                base + i,
                "an acknowledged batch moved"
            );
        }
    }
    let want: Vec<(u64, u64)> = by_seq.into_iter().collect();
    assert_eq!(
        drain_to(&mut sub_a, total).await,
        want,
        "replica A's subscriber"
    );
    assert_eq!(
        drain_to(&mut sub_b, total).await,
        want,
        "replica B's subscriber"
    );
    for sub in [&mut sub_a, &mut sub_b] {
        assert!(
            tokio::time::timeout(Duration::from_millis(300), sub.next())
                .await
                .is_err(),
            "a duplicate arrived"
        );
    }
}

/// Replica B renames thread `y` to `x`. Replica A, which last appended to
/// `y`, appends to `y` again: `y` no longer exists, so the append must
/// start a new thread `y` at sequence 1; `x` must be untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_to_a_thread_renamed_by_another_replica_does_not_follow_the_rename() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let (a, b) = two_replicas(&schema).await;
    a.append(
        "t",
        "y",
        AppendRequest::new(full_run("y", "r1", None, "one")),
    )
    .await
    .unwrap();
    let n = a.thread("t", "y").await.unwrap().last_seq;
    b.rename_thread("t", "y", "x").await.unwrap();
    let got = a
        .append(
            "t",
            "y",
            AppendRequest::new(vec![run_started("y", "r2", None), custom(7)]),
        )
        .await
        .unwrap();
    let x = b.thread("t", "x").await.unwrap();
    assert_eq!(x.last_seq, n, "thread x grew: A's append to y landed in x");
    assert_eq!(got.first_seq, 1, "y was re-created from scratch");
    let r2 = b.run("t", "y", "r2").await.unwrap();
    assert_eq!(r2.first_seq, 1);
    assert!(b.run("t", "x", "r2").await.is_err(), "x has r2");
}

/// Replica A restores run `r` of thread `x`. Replica B deletes `x` and
/// writes it again with the original receive time (as a session import or
/// a migration does: `AppendRequest::received_at`), same run id, same
/// number of events, other content. A's next restore of `r` must give the
/// new conversation, not the text it kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restore_after_another_replica_rewrote_the_thread_is_current() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let (a, b) = two_replicas(&schema).await;
    let at = Timestamp(1_700_000_000_000_000);
    let mut first = AppendRequest::new(full_run("x", "r", None, "the old answer"));
    first.received_at = Some(at);
    a.append("t", "x", first).await.unwrap();
    let old = a.restore("t", "x", "r").await.unwrap();
    assert!(old.json.contains("the old answer"));
    b.delete_thread("t", "x").await.unwrap();
    let mut again = AppendRequest::new(full_run("x", "r", None, "the NEW answer"));
    again.received_at = Some(at);
    b.append("t", "x", again).await.unwrap();
    b.settle().await;
    let want = b.restore("t", "x", "r").await.unwrap();
    assert!(want.json.contains("the NEW answer"));
    let got = a.restore("t", "x", "r").await.unwrap();
    assert_eq!(
        got.json, want.json,
        "replica A answered with the deleted thread's conversation"
    );
}

/// The row of thread `x` is deleted and `x` written again by replica A
/// while replica B's subscriber to `x` is live: the subscription ends; it
/// never goes on with the new thread's events as if they continued the
/// old log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subscription_ends_when_another_replica_deletes_and_rewrites_its_thread() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let (a, b) = two_replicas(&schema).await;
    a.append("t", "x", AppendRequest::new((1..=5).map(custom).collect()))
        .await
        .unwrap();
    let mut sub = b.subscribe("t", "x", 1).await.unwrap();
    drain_to(&mut sub, 5).await;
    a.delete_thread("t", "x").await.unwrap();
    for k in 0..8 {
        a.append("t", "x", AppendRequest::new(vec![custom(100 + k)]))
            .await
            .unwrap();
    }
    match tokio::time::timeout(STUCK, sub.next()).await {
        Ok(None) => {}
        Ok(Some(Err(_))) => {}
        Ok(Some(Ok(e))) => panic!(
            "the subscription went on with the new thread: seq {} value {}",
            e.seq,
            value(&e.event)
        ),
        Err(_) => panic!("the subscription neither ended nor failed"),
    }
}

/// The pid of the listening connection holding `session`'s advisory lock,
/// and every session lock held in the schema's lock space.
async fn listeners(schema: &Schema) -> Vec<(i64, i32)> {
    let c = schema.client().await.unwrap();
    let space = i64::from(agui_store_postgres::session_lock_space(&schema.name));
    let rows = c
        .query(
            "SELECT objid::bigint, pid FROM pg_locks WHERE locktype = 'advisory' \
             AND granted AND objsubid = 2 AND classid::bigint = $1 ORDER BY objid",
            &[&space],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// Kills the listening connection of the replica opened last (the highest
/// session number) and returns its session.
async fn kill_last_listener(schema: &Schema) -> i64 {
    let all = listeners(schema).await;
    let (session, pid) = *all.last().expect("a listening connection");
    let c = schema.client().await.unwrap();
    c.query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    session
}

async fn wait_for_listener(schema: &Schema, session: i64, before: &[(i64, i32)]) {
    for _ in 0..200 {
        let all = listeners(schema).await;
        if all.iter().any(|l| l.0 == session && !before.contains(l)) {
            // LISTEN precedes the lock on the new connection; the nudge
            // follows it.
            tokio::time::sleep(Duration::from_millis(300)).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the listening connection did not come back");
}

/// The connections holding `session`'s presence lock (its pooled ones).
async fn present(schema: &Schema, session: i64) -> Vec<i32> {
    let c = schema.client().await.unwrap();
    let space = i64::from(agui_store_postgres::session_lock_space(&schema.name));
    let rows = c
        .query(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND objsubid = 1 AND classid::bigint = $1 AND objid::bigint = $2 ORDER BY pid",
            &[&space, &session],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// A server that ends idle sessions (`idle_session_timeout`, set here in
/// the connection string's options as an operator may set it for a role
/// or a database) ends none of a store's connections: its listening one is
/// idle by design, and its pooled ones show the replica present. With
/// either ended, another replica could take this live one's runs for a
/// gone replica's. Before, the server ended both 300 ms after their last
/// query (and the connection string's options were dropped).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_session_timeout_ends_no_connection_of_a_store() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let mut o = schema.options();
    let sep = if o.conn.contains('?') { '&' } else { '?' };
    o.conn = format!("{}{sep}options=-c%20idle_session_timeout%3D300", o.conn);
    let store = Store::new(agui_store_postgres::PgStore::open_with(o).await.unwrap());
    store
        .append("t", "x", AppendRequest::new(vec![custom(1)]))
        .await
        .unwrap();
    let before = listeners(&schema).await;
    let &[(session, _)] = before.as_slice() else {
        panic!("one listening connection, not {before:?}")
    };
    let pooled = present(&schema, session).await;
    assert!(!pooled.is_empty(), "a pooled connection is present");
    let c = schema.client().await.unwrap();
    let timeout: String = c
        .query_one(
            "SELECT setting FROM pg_settings WHERE name = 'idle_session_timeout'",
            &[],
        )
        .await
        .map(|r| r.get(0))
        .unwrap_or_default();
    assert_eq!(timeout, "0", "the test's own connection has no timeout");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        listeners(&schema).await,
        before,
        "the listening connection was ended"
    );
    let after = present(&schema, session).await;
    assert!(
        pooled.iter().all(|p| after.contains(p)),
        "pooled connections were ended: {pooled:?} then {after:?}"
    );
    store
        .append("t", "x", AppendRequest::new(vec![custom(2)]))
        .await
        .unwrap();
}

/// Replica B's listening connection dies while replica A appends: once it
/// reconnects, B's subscriber gets everything it missed, once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_listening_connection_loses_no_event() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let (a, b) = a_then_b(&schema).await;
    a.append("t", "x", AppendRequest::new((1..=3).map(custom).collect()))
        .await
        .unwrap();
    let mut sub = b.subscribe("t", "x", 1).await.unwrap();
    drain_to(&mut sub, 3).await;
    let before = listeners(&schema).await;
    let session = kill_last_listener(&schema).await;
    for k in 4..=10 {
        a.append("t", "x", AppendRequest::new(vec![custom(k)]))
            .await
            .unwrap();
    }
    wait_for_listener(&schema, session, &before).await;
    for want in 4..=10u64 {
        let e = tokio::time::timeout(STUCK, sub.next())
            .await
            .expect("an event missed while the listener was down never came")
            .unwrap()
            .unwrap();
        assert_eq!((e.seq, value(&e.event)), (want, want));
    }
    a.append("t", "x", AppendRequest::new(vec![custom(11)]))
        .await
        .unwrap();
    let e = tokio::time::timeout(STUCK, sub.next())
        .await
        .expect("live again")
        .unwrap()
        .unwrap();
    assert_eq!(e.seq, 11);
}

/// Replica B's listening connection dies; meanwhile replica A deletes the
/// thread B's subscriber follows and writes it again (longer than before).
/// After B reconnects, its subscriber must end (the thread it followed is
/// gone), never deliver the new thread's events as a continuation of the
/// old log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thread_rewritten_while_the_listener_was_down_ends_the_subscription() {
    rewritten_while_the_listener_was_down(false).await;
}

/// As above, but B's subscriber began before the thread existed (an
/// attach that waits for a thread's first run): the instance it follows is
/// the one whose appends it was told of, so after the rewrite it ends too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thread_rewritten_while_the_listener_was_down_ends_a_subscription_that_predates_it() {
    rewritten_while_the_listener_was_down(true).await;
}

/// The two probes above; `subscribe_first`: B subscribes before A writes.
async fn rewritten_while_the_listener_was_down(subscribe_first: bool) {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let (a, b) = a_then_b(&schema).await;
    let early = if subscribe_first {
        let sub = b.subscribe("t", "x", 1).await.unwrap();
        // Let the watch's lookup (of a thread that does not exist) finish.
        tokio::time::sleep(Duration::from_millis(200)).await;
        Some(sub)
    } else {
        None
    };
    a.append("t", "x", AppendRequest::new((1..=3).map(custom).collect()))
        .await
        .unwrap();
    let mut sub = match early {
        Some(sub) => sub,
        None => b.subscribe("t", "x", 1).await.unwrap(),
    };
    drain_to(&mut sub, 3).await;
    let (session, before) = rewrite_while_the_last_listener_is_down(&schema, &a).await;
    wait_for_listener(&schema, session, &before).await;
    match tokio::time::timeout(Duration::from_secs(5), sub.next()).await {
        Ok(None) | Ok(Some(Err(_))) => {}
        Ok(Some(Ok(e))) => panic!(
            "the subscriber of the deleted thread got seq {} = value {} of the new one",
            e.seq,
            value(&e.event)
        ),
        Err(_) => panic!("the subscription of a deleted thread neither ended nor failed"),
    }
}

/// Kills the last replica's listening connection, then replica `a`
/// deletes thread `x` and writes it again (values 101 to 106): the session
/// and the listeners before, for [`wait_for_listener`].
async fn rewrite_while_the_last_listener_is_down(
    schema: &Schema,
    a: &Store,
) -> (i64, Vec<(i64, i32)>) {
    let before = listeners(schema).await;
    let session = kill_last_listener(schema).await;
    a.delete_thread("t", "x").await.unwrap();
    a.append(
        "t",
        "x",
        AppendRequest::new((101..=106).map(custom).collect()),
    )
    .await
    .unwrap();
    (session, before)
}

/// Replica B followed a thread once and stopped; its listening connection
/// dies; meanwhile replica A deletes the thread and writes it again; B
/// subscribes anew while still disconnected, and catches up on the new
/// thread. After B reconnects, that subscription must go on (it follows
/// the thread as it is now), not be ended for the instance its earlier
/// subscription followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subscription_begun_during_an_outage_after_a_rewrite_goes_on_after_it() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let (a, b) = a_then_b(&schema).await;
    a.append("t", "x", AppendRequest::new((1..=3).map(custom).collect()))
        .await
        .unwrap();
    let mut first = b.subscribe("t", "x", 1).await.unwrap();
    drain_to(&mut first, 3).await;
    drop(first);
    let (session, before) = rewrite_while_the_last_listener_is_down(&schema, &a).await;
    let mut sub = b.subscribe("t", "x", 1).await.unwrap();
    let caught_up = drain_to(&mut sub, 6).await;
    assert_eq!(caught_up.last(), Some(&(6, 106)));
    // Let the watch's lookup of the thread finish before the reconnect.
    tokio::time::sleep(Duration::from_millis(200)).await;
    wait_for_listener(&schema, session, &before).await;
    a.append("t", "x", AppendRequest::new(vec![custom(107)]))
        .await
        .unwrap();
    match tokio::time::timeout(STUCK, sub.next()).await {
        Ok(Some(Ok(e))) => assert_eq!((e.seq, value(&e.event)), (7, 107)),
        Ok(None) => panic!("the subscription of the thread as it is now was ended"),
        Ok(Some(Err(e))) => panic!("the subscription failed: {e}"),
        Err(_) => panic!("the subscription stalled"),
    }
}

/// Ids are any string of up to `MAX_ID_BYTES` bytes (see `Backend`), but
/// PostgreSQL indexes them, and an index row holds at most about 2.7 KB
/// once compressed. The conformance suite's long id, `"x".repeat(10_000)`,
/// compresses to a few bytes; ids that do not compress work up to that
/// limit, and beyond it are refused as `Invalid` (a retry cannot succeed)
/// with a message that says why, storing nothing.
#[tokio::test]
async fn long_ids_that_do_not_compress() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let s = Store::new(schema.open().await.unwrap());
    // A pseudo-random printable id: nothing for pglz to squeeze.
    let random = |len: usize| {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut id = String::new();
        while id.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            id.push(char::from(b'!' + (x % 90) as u8));
        }
        id
    };
    let fits = random(2000);
    let run = format!("run-{}", &fits[..1000]);
    s.append(
        "t",
        &fits,
        AppendRequest::new(full_run(&fits, &run, None, "x")),
    )
    .await
    .expect("a 2000-byte thread id");
    assert_eq!(s.run("t", &fits, &run).await.unwrap().run_id, run);
    s.append(&fits, "th", AppendRequest::new(vec![custom(1)]))
        .await
        .expect("a 2000-byte tenant id");
    let over = random(3000);
    let e = s
        .append(
            "t",
            &over,
            AppendRequest::new(full_run(&over, "r", None, "x")),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains("too long"), "{e}");
    assert!(s.thread("t", &over).await.is_err(), "nothing is stored");
    assert_eq!(
        s.list_threads("t", &Default::default())
            .await
            .unwrap()
            .threads
            .len(),
        1
    );
}

/// Unique per test: the pool's connections carry it, so a test kills its
/// own connections only.
fn app_name(schema: &Schema) -> String {
    format!("probe_{}", schema.name)
}

/// Every pooled connection of a store dies (a database restart, a
/// failover, an idle-connection killer): `ready()` says `Unavailable`
/// at worst, never another kind, and the store recovers by itself:
/// a later `ready()` and appends succeed, and nothing is lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_make_the_store_unavailable_then_it_recovers() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let mut o = schema.options();
    let name = app_name(&schema);
    o.conn = format!("{} application_name={name}", conninfo(&o.conn));
    let s = Store::new(agui_store_postgres::PgStore::open_with(o).await.unwrap());
    for k in 1..=3 {
        s.append("t", "x", AppendRequest::new(vec![custom(k)]))
            .await
            .unwrap();
    }
    s.ready().await.unwrap();
    let c = schema.client().await.unwrap();
    let killed: i64 = c
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(killed >= 2, "killed {killed}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut recovered = false;
    for _ in 0..20 {
        match s.ready().await {
            Ok(()) => {
                recovered = true;
                break;
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}"),
        }
    }
    assert!(recovered, "ready() never recovered");
    // Appends after the outage: each either fails Unavailable (nothing
    // written) or commits; retried until it does, nothing is doubled.
    for k in 4..=8 {
        let mut done = false;
        for _ in 0..20 {
            match s
                .append(
                    "t",
                    "x",
                    AppendRequest::new(vec![custom(k)]).expect_seq(k - 1),
                )
                .await
            {
                Ok(got) => {
                    assert_eq!(got.first_seq, k);
                    done = true;
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Unavailable => {}
                Err(e) if e.kind() == ErrorKind::Conflict => {
                    // The failed attempt had committed after all.
                    assert_eq!(e.seq_conflict().unwrap().actual, k);
                    done = true;
                    break;
                }
                Err(e) => panic!("append after the outage: {e}"),
            }
        }
        assert!(done, "append {k} never went through");
    }
    let all = s.read_range("t", "x", 1, u64::MAX).await.unwrap();
    let values: Vec<u64> = all.iter().map(|e| value(&e.event)).collect();
    assert_eq!(values, (1..=8).collect::<Vec<_>>());
}

/// The key=value form of a libpq URL (so a setting can be added).
fn conninfo(conn: &str) -> String {
    let cfg: tokio_postgres::Config = conn.parse().unwrap();
    let mut out = String::new();
    if let Some(u) = cfg.get_user() {
        out.push_str(&format!("user={u} "));
    }
    if let Some(tokio_postgres::config::Host::Tcp(h)) = cfg.get_hosts().first() {
        out.push_str(&format!("host={h} "));
    }
    if let Some(p) = cfg.get_ports().first() {
        out.push_str(&format!("port={p} "));
    }
    if let Some(d) = cfg.get_dbname() {
        out.push_str(&format!("dbname={d} "));
    }
    if let Some(pw) = cfg.get_password() {
        out.push_str(&format!("password={} ", String::from_utf8_lossy(pw)));
    }
    out.trim_end().to_owned()
}
