//! Probes of the engine over SQLite as an attacker or an unlucky operator
//! would drive it: batches that fail half-way, deletes racing appends on one
//! `Store`, restores racing the run they restore, run ids shared by threads
//! and tenants, ids with odd bytes paged through by cursor, and reads that
//! page while appends go on. One database file per test.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agui_protocol::Event;
use agui_store::sample::{full_run, run_finished, run_started, text_message};
use agui_store::{AppendRequest, ErrorKind, RunFilter, Store, ThreadFilter, Timestamp};
use agui_store_sqlite::SqliteStore;
use futures::StreamExt;

fn custom(n: u64) -> Event {
    Event::from_json(&format!(r#"{{"type":"CUSTOM","name":"n","value":{n}}}"#)).unwrap()
}

async fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open_path(&dir.path().join("probe.db"))
        .await
        .unwrap();
    (dir, Store::new(s))
}

async fn assert_clean(s: &Store) {
    s.settle().await;
    let report = agui_store::check::check_store(s, |_| {}).await.unwrap();
    assert!(report.is_clean(), "{:?}", report.damage);
}

/// A batch whose second run names an unknown parent, or reuses a run id
/// (of the batch itself, or of the thread: refused only where the commit
/// writes), fails whole: on a new thread nothing exists afterwards (no
/// thread, no tenant, no run), on an existing one the head, runs and
/// subscribers see nothing of it, and the next append continues where the
/// log really ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_fails_half_way_leaves_nothing() {
    let (_dir, s) = open().await;
    let mut bad_parent = full_run("n", "r1", None, "ok");
    bad_parent.extend(full_run("n", "r2", Some("nope"), "bad"));
    let e = s
        .append("fresh", "n", AppendRequest::new(bad_parent.clone()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert_eq!(
        s.thread("fresh", "n").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(s.tenants().await.unwrap().is_empty(), "a tenant appeared");
    assert!(s.run("fresh", "n", "r1").await.is_err());

    s.append(
        "t",
        "x",
        AppendRequest::new(full_run("x", "a", None, "one")),
    )
    .await
    .unwrap();
    let before = s.thread("t", "x").await.unwrap();
    let mut sub = s.subscribe("t", "x", before.last_seq + 1).await.unwrap();
    let mut twice = full_run("x", "b", None, "two");
    twice.extend(full_run("x", "b", None, "again"));
    let mut reused = full_run("x", "c", None, "three");
    reused.extend(full_run("x", "a", None, "a again"));
    let mut parent = vec![custom(1)];
    parent.extend(full_run("x", "d", Some("a"), "four"));
    parent.extend(full_run("x", "e", Some("zzz"), "five"));
    for (what, batch) in [("twice", twice), ("reused", reused), ("parent", parent)] {
        let e = s
            .append("t", "x", AppendRequest::new(batch))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{what}: {e}");
        let now = s.thread("t", "x").await.unwrap();
        assert_eq!(now.last_seq, before.last_seq, "{what} wrote events");
        assert_eq!(now.run_count, before.run_count, "{what} indexed runs");
    }
    for run in ["b", "c", "d", "e"] {
        assert!(s.run("t", "x", run).await.is_err(), "run {run} exists");
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(200), sub.next())
            .await
            .is_err(),
        "a subscriber saw a failed batch"
    );
    let got = s
        .append("t", "x", AppendRequest::new(full_run("x", "b", None, "ok")))
        .await
        .unwrap();
    assert_eq!(got.first_seq, before.last_seq + 1);
    let e = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(e.seq, got.first_seq);
    assert_eq!(
        s.run("t", "x", "b").await.unwrap().parent_run_id.as_deref(),
        Some("a")
    );
    assert_clean(&s).await;
}

/// Appenders and a deleter race on one `Store` and one thread: every
/// append either lands in a generation that is deleted later or in the
/// surviving one; the survivor's log is numbered from 1 without a gap, its
/// run index and checkpoints agree with its log, and an append right
/// after a delete starts at 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deletes_racing_appends_on_one_store_leave_a_consistent_thread() {
    let (_dir, s) = open().await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..3u64 {
        let (s, stop) = (s.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                let run = format!("w{w}-{k}");
                // No parentRunId: each run continues whatever is last.
                let r = s
                    .append("t", "x", AppendRequest::new(full_run("x", &run, None, "x")))
                    .await;
                if let Err(e) = r {
                    panic!("append {run}: {e}");
                }
            }
        }));
    }
    let deleter = {
        let s = s.clone();
        tokio::spawn(async move {
            let mut deleted = 0;
            for _ in 0..30 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if s.delete_thread("t", "x").await.is_ok() {
                    deleted += 1;
                }
            }
            deleted
        })
    };
    let deleted = deleter.await.unwrap();
    assert!(deleted > 5, "only {deleted} deletes went through");
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    // Append right after a delete, through the same engine. The writers may
    // all have stopped before writing again after the deleter's last
    // delete: the thread is then gone already.
    match s.delete_thread("t", "x").await {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => panic!("delete: {e}"),
    }
    let got = s
        .append(
            "t",
            "x",
            AppendRequest::new(full_run("x", "after", None, "y")),
        )
        .await
        .unwrap();
    assert_eq!(got.first_seq, 1);
    let run = s.run("t", "x", "after").await.unwrap();
    assert_eq!((run.first_seq, run.parent_run_id), (1, None));
    assert_clean(&s).await;
}

/// Restores of a run race the appends of that run (start, content, late
/// events after its end, the next run): every answer is the conversation
/// of the run as of the `last_seq` it names, and after the race every run
/// restores as a sequential replay of the same log does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restores_racing_the_appends_of_their_run_are_exact() {
    let (_dir, s) = open().await;
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (s, done) = (s.clone(), done.clone());
        tokio::spawn(async move {
            for k in 0..25usize {
                let run = format!("r{k}");
                let parent = if k % 4 == 3 {
                    Some("r0".to_owned())
                } else {
                    None
                };
                s.append(
                    "t",
                    "x",
                    AppendRequest::new(vec![run_started("x", &run, parent.as_deref())]),
                )
                .await
                .unwrap();
                for piece in text_message(&format!("{run}-m"), &format!("answer {k}"), 4) {
                    s.append("t", "x", AppendRequest::new(vec![piece]))
                        .await
                        .unwrap();
                }
                s.append("t", "x", AppendRequest::new(vec![run_finished("x", &run)]))
                    .await
                    .unwrap();
                if k % 3 == 0 {
                    // A late event joins the ended run.
                    let late = text_message(&format!("{run}-late"), "late", 1);
                    s.append("t", "x", AppendRequest::new(late)).await.unwrap();
                }
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (s, done) = (s.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            while !done.load(Ordering::Acquire) {
                if s.thread("t", "x").await.is_err() {
                    tokio::task::yield_now().await;
                    continue;
                }
                let runs = s
                    .list_runs(
                        "t",
                        &RunFilter {
                            thread_id: Some("x".into()),
                            limit: 100,
                            ..RunFilter::default()
                        },
                    )
                    .await
                    .unwrap();
                for r in runs.runs.iter().rev().take(2) {
                    if let Ok(got) = s.restore("t", "x", &r.run_id).await {
                        answers.push((r.run_id.clone(), got.last_seq, got.json));
                    }
                }
            }
            answers
        }));
    }
    writer.await.unwrap();
    let mut answers = Vec::new();
    for r in readers {
        answers.extend(r.await.unwrap());
    }
    s.settle().await;
    // The oracle: the same log replayed into a fresh engine, event by
    // event up to each answer's `last_seq`, then restored there.
    let log = s.read_range("t", "x", 1, u64::MAX).await.unwrap();
    let mut checked = 0;
    let mut seen = BTreeSet::new();
    for (run, last, json) in &answers {
        if !seen.insert((run.clone(), *last)) {
            continue;
        }
        let oracle = Store::memory();
        let upto: Vec<Event> = log
            .iter()
            .filter(|e| e.seq <= *last)
            .map(|e| e.event.clone())
            .collect();
        oracle
            .append("t", "x", AppendRequest::new(upto))
            .await
            .unwrap();
        let want = oracle.restore("t", "x", run).await.unwrap();
        assert_eq!(want.last_seq, *last, "{run}");
        assert_eq!(json, &want.json, "{run} as of seq {last}");
        checked += 1;
    }
    assert!(checked > 5, "only {checked} answers to check");
    let oracle = Store::memory();
    oracle
        .append(
            "t",
            "x",
            AppendRequest::new(log.iter().map(|e| e.event.clone()).collect()),
        )
        .await
        .unwrap();
    s.clear_cache();
    for k in 0..25 {
        let run = format!("r{k}");
        let got = s.restore("t", "x", &run).await.unwrap();
        let want = oracle.restore("t", "x", &run).await.unwrap();
        assert_eq!(got.json, want.json, "{run}");
        assert_eq!(got.last_seq, want.last_seq, "{run}");
    }
    assert_clean(&s).await;
}

/// The same run id in two threads of a tenant and in two tenants: each
/// restores its own conversation, its own branch, and deleting one leaves
/// the others' checkpoints and runs alone.
#[tokio::test]
async fn one_run_id_in_several_threads_and_tenants_stays_apart() {
    let (_dir, s) = open().await;
    let places = [("t1", "a"), ("t1", "b"), ("t2", "a")];
    for (i, (tenant, thread)) in places.iter().enumerate() {
        s.append(
            tenant,
            thread,
            AppendRequest::new(full_run(thread, "root", None, &format!("root {i}"))),
        )
        .await
        .unwrap();
        s.append(
            tenant,
            thread,
            AppendRequest::new(full_run(thread, "same", Some("root"), &format!("same {i}"))),
        )
        .await
        .unwrap();
    }
    s.settle().await;
    for (i, (tenant, thread)) in places.iter().enumerate() {
        let got = s.restore(tenant, thread, "same").await.unwrap();
        assert!(got.from_checkpoint);
        assert!(got.json.contains(&format!("same {i}")), "{}", got.json);
        assert!(got.json.contains(&format!("root {i}")), "{}", got.json);
    }
    let children = s
        .list_runs(
            "t1",
            &RunFilter {
                parent_run_id: Some("root".into()),
                ..RunFilter::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(children.runs.len(), 2, "tenant t1 sees its own runs only");
    s.delete_thread("t1", "a").await.unwrap();
    s.clear_cache();
    for (i, (tenant, thread)) in places.iter().enumerate().skip(1) {
        let got = s.restore(tenant, thread, "same").await.unwrap();
        assert!(got.from_checkpoint, "{tenant}/{thread} lost its checkpoint");
        assert!(got.json.contains(&format!("same {i}")));
    }
    assert_clean(&s).await;
}

/// Thread ids that differ only by NUL, unit separators and prefixes, all
/// active at the same instant (the cursor's tie-break is the id): paging
/// threads and runs by cursor, three at a time, lists each exactly once.
#[tokio::test]
async fn odd_ids_with_equal_times_page_by_cursor_exactly_once() {
    let (_dir, s) = open().await;
    let ids: Vec<String> = [
        "a",
        "a\0",
        "a\0\0",
        "a\0b",
        "a\u{1f}",
        "a\u{1f}aside",
        "\0",
        "\0a",
        "\u{1f}",
        "b",
        "ab",
        "a b",
        "a\u{7f}",
        "a\u{ffff}",
        "😀",
        "a\u{1f}\0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let at = Timestamp(1_700_000_000_000_000);
    for id in &ids {
        let mut req = AppendRequest::new(full_run(id, &format!("run{id}"), None, "x"));
        req.received_at = Some(at);
        s.append("t\0\u{1f}", id, req).await.unwrap();
    }
    let mut listed = Vec::new();
    let mut cursor = None;
    loop {
        let page = s
            .list_threads(
                "t\0\u{1f}",
                &ThreadFilter {
                    limit: 3,
                    cursor: cursor.take(),
                    ..ThreadFilter::default()
                },
            )
            .await
            .unwrap();
        listed.extend(page.threads.into_iter().map(|t| t.thread_id));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let mut sorted = listed.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), listed.len(), "a thread was listed twice");
    let want: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(listed.iter().collect::<BTreeSet<_>>(), want);
    let mut runs = Vec::new();
    let mut cursor = None;
    loop {
        let page = s
            .list_runs(
                "t\0\u{1f}",
                &RunFilter {
                    limit: 3,
                    cursor: cursor.take(),
                    ..RunFilter::default()
                },
            )
            .await
            .unwrap();
        runs.extend(page.runs.into_iter().map(|r| (r.thread_id, r.run_id)));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(runs.len(), ids.len(), "{runs:?}");
    for id in &ids {
        assert!(runs.contains(&(id.clone(), format!("run{id}"))), "{id:?}");
    }
    assert_clean(&s).await;
}

/// Paging through a thread (`read` with `next_seq`, and `read_stream`)
/// while other tasks append to it: every page is contiguous, nothing is
/// skipped or repeated, and each batch's events are found whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_read_while_appending_are_contiguous() {
    let (_dir, s) = open().await;
    let writer = {
        let s = s.clone();
        tokio::spawn(async move {
            for k in 0..300u64 {
                let batch = (0..5).map(|i| custom(k * 5 + i + 1)).collect();
                s.append("t", "x", AppendRequest::new(batch)).await.unwrap();
            }
        })
    };
    let mut next = 1u64;
    while next <= 1500 {
        match s.read("t", "x", next, 7).await {
            Ok(page) => {
                for e in &page.events {
                    assert_eq!(e.seq, next, "a page skipped or repeated");
                    assert_eq!(e.event.to_value()["value"].as_u64(), Some(next));
                    next += 1;
                }
                if let Some(n) = page.next_seq {
                    assert_eq!(n, next, "next_seq points elsewhere");
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => panic!("{e}"),
        }
        tokio::task::yield_now().await;
    }
    writer.await.unwrap();
    let streamed: Vec<u64> = s
        .read_stream("t", "x", 1)
        .map(|e| e.unwrap().seq)
        .collect()
        .await;
    assert_eq!(streamed, (1..=1500).collect::<Vec<_>>());
}

/// A subscriber catching up on a long thread (more than one page) whose
/// thread is deleted and written again, longer, through the same `Store`
/// before it has read the second page: the subscription must end (as a
/// delete ends it when live), never go on with the new thread's events as
/// if they continued the deleted log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_catching_up_ends_when_its_thread_is_rewritten() {
    let (_dir, s) = open().await;
    s.append(
        "t",
        "x",
        AppendRequest::new((1..=1500).map(custom).collect()),
    )
    .await
    .unwrap();
    let mut sub = s.subscribe("t", "x", 1).await.unwrap();
    let first = sub.next().await.unwrap().unwrap();
    assert_eq!(first.seq, 1);
    s.delete_thread("t", "x").await.unwrap();
    s.append(
        "t",
        "x",
        AppendRequest::new((100_001..=102_000).map(custom).collect()),
    )
    .await
    .unwrap();
    let mut spliced = None;
    while let Ok(Some(item)) = tokio::time::timeout(Duration::from_secs(5), sub.next()).await {
        let Ok(e) = item else { break };
        let v = e.event.to_value()["value"].as_u64().unwrap();
        if v > 100_000 {
            spliced = Some((e.seq, v));
            break;
        }
    }
    assert_eq!(
        spliced, None,
        "the subscription went on with the re-created thread (seq, value)"
    );
}
