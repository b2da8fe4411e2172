//! The packer merges a thread's small rows into packed frames after they
//! are committed: every read gives back the same events, sequence numbers
//! and receive times as before, from any starting point, while appends go
//! on; the file holds far fewer rows.

use std::time::{Duration, Instant};

use agui_store::sample::realistic_run;
use agui_store::{AppendRequest, Store};
use agui_store_sqlite::SqliteStore;
use rusqlite::Connection;

const T: &str = "t";

/// (rows, packed rows) of a thread's chunks, read beside the store.
fn rows(path: &std::path::Path) -> (i64, i64) {
    let c = Connection::open(path).unwrap();
    c.query_row(
        "SELECT COUNT(*), COALESCE(SUM(codec = 4), 0) FROM chunks",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

async fn read_all(store: &Store, thread: &str, from: u64, limit: usize) -> Vec<(u64, i64, String)> {
    let mut out = Vec::new();
    let mut at = from;
    loop {
        let page = store.read(T, thread, at, limit).await.unwrap();
        out.extend(
            page.events
                .iter()
                .map(|e| (e.seq, e.received_at.0, e.event.json().to_owned())),
        );
        match page.next_seq {
            Some(n) => at = n,
            None => return out,
        }
    }
}

#[tokio::test]
async fn packed_rows_read_back_as_they_were_appended() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let store = Store::new(SqliteStore::open_path(&path).await.unwrap());
    // 3,000 events in appends of 1 to 7 events (a gateway's shape), each
    // append its own receive time, over runs of 150 events.
    let mut expected = Vec::new();
    let mut k = 0usize;
    for r in 0..20 {
        let run = realistic_run("a", &format!("r{r}"), None, 150);
        let mut rest = &run[..];
        while !rest.is_empty() {
            let n = (k % 7 + 1).min(rest.len());
            k += 1;
            let (now, later) = rest.split_at(n);
            rest = later;
            let done = store
                .append(T, "a", AppendRequest::new(now.to_vec()))
                .await
                .unwrap();
            for (e, seq) in now.iter().zip(done.seqs()) {
                expected.push((seq, done.received_at.0, e.json().to_owned()));
            }
        }
    }
    let appends = k as i64;
    // Full frames are packed while the thread takes events, the tail once
    // it is quiet.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (n, packed) = rows(&path);
        if n == packed && n > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not packed: {n} rows, {packed} packed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (n, _) = rows(&path);
    assert!(n <= 4, "{appends} appends in {n} rows");
    assert!(
        expected.windows(2).any(|w| w[0].1 != w[1].1),
        "the appends have different receive times"
    );
    for limit in [1000, 7, 1] {
        assert_eq!(
            read_all(&store, "a", 1, limit).await,
            expected,
            "limit {limit}"
        );
    }
    for from in [2u64, 500, 1023, 1024, 1025, 2999, 3000] {
        let got = read_all(&store, "a", from, 300).await;
        assert_eq!(got, expected[from as usize - 1..], "from {from}");
    }
    // Appends go on after a packed frame, and a reopened store reads the
    // same.
    let more = realistic_run("a", "r-more", Some("r19"), 10);
    let done = store
        .append(T, "a", AppendRequest::new(more.clone()))
        .await
        .unwrap();
    for (e, seq) in more.iter().zip(done.seqs()) {
        expected.push((seq, done.received_at.0, e.json().to_owned()));
    }
    store.close().await.unwrap();
    let store = Store::new(SqliteStore::open_path(&path).await.unwrap());
    assert_eq!(read_all(&store, "a", 1, 1000).await, expected);
    let from_checkpoint = store.restore(T, "a", "r19").await.unwrap();
    store.close().await.unwrap();
    // A restore from the log alone (the checkpoints dropped) reads the
    // packed rows to the same conversation.
    let c = Connection::open(&path).unwrap();
    c.execute("DELETE FROM checkpoints", []).unwrap();
    drop(c);
    let store = Store::new(SqliteStore::open_path(&path).await.unwrap());
    let from_log = store.restore(T, "a", "r19").await.unwrap();
    assert!(!from_log.from_checkpoint);
    assert_eq!(from_log.json, from_checkpoint.json);
    assert_eq!(from_log.last_seq, 3000);
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_thread_deleted_while_packing_is_not_resurrected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.db");
    let store = Store::new(SqliteStore::open_path(&path).await.unwrap());
    for round in 0..5 {
        for i in 0..40 {
            let run = realistic_run("d", &format!("r{round}-{i}"), None, 30);
            for part in run.chunks(3) {
                store
                    .append(T, "d", AppendRequest::new(part.to_vec()))
                    .await
                    .unwrap();
            }
        }
        // The packer is busy with the 1,200 events; the thread goes and
        // comes back under the same name (SQLite may reuse the row id).
        store.delete_thread(T, "d").await.unwrap();
    }
    let run = realistic_run("d", "last", None, 30);
    store
        .append(T, "d", AppendRequest::new(run.clone()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got = read_all(&store, "d", 1, 1000).await;
    let want: Vec<String> = run.iter().map(|e| e.json().to_owned()).collect();
    let texts: Vec<String> = got.into_iter().map(|(_, _, j)| j).collect();
    assert_eq!(texts, want);
    store.close().await.unwrap();
}
