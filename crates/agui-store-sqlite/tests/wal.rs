//! The WAL is checkpointed beside the writer, never inside its commits
//! (SQLite's automatic checkpoint is off on the write connection), and it
//! does not grow without bound: a flush leaves it empty, and so does a quiet
//! moment after writes.

use std::time::{Duration, Instant};

use agui_store::sample::realistic_run;
use agui_store::{AppendRequest, Store};
use agui_store_sqlite::SqliteStore;

fn wal_len(path: &std::path::Path) -> u64 {
    let mut p = path.as_os_str().to_owned();
    p.push("-wal");
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

async fn write_some(s: &Store, thread: &str) {
    for (k, batch) in realistic_run(thread, "r", None, 2000)
        .chunks(10)
        .enumerate()
    {
        s.append("t", thread, AppendRequest::new(batch.to_vec()))
            .await
            .unwrap_or_else(|e| panic!("batch {k}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_leaves_the_wal_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let s = Store::new(SqliteStore::open_path(&path).await.unwrap());
    write_some(&s, "a").await;
    s.flush().await.unwrap();
    assert_eq!(wal_len(&path), 0, "everything is in the database file");
    assert_eq!(
        s.read_range("t", "a", 1, u64::MAX).await.unwrap().len(),
        2000
    );
    s.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_moment_after_writes_starts_the_wal_over() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let s = Store::new(SqliteStore::open_path(&path).await.unwrap());
    write_some(&s, "b").await;
    assert!(wal_len(&path) > 0, "commits go to the WAL first");
    // The checkpointer copies within a round or two once the writer is
    // quiet (100 ms rounds); the bound is generous for a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(30);
    while wal_len(&path) > 0 {
        assert!(Instant::now() < deadline, "the WAL was never started over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Reads and writes go on as before.
    write_some(&s, "c").await;
    assert_eq!(
        s.read_range("t", "b", 1, u64::MAX).await.unwrap().len(),
        2000
    );
    assert_eq!(
        s.read_range("t", "c", 1, u64::MAX).await.unwrap().len(),
        2000
    );
    s.close().await.unwrap();
}

/// A reader that holds an old snapshot (an export from another process,
/// say) keeps the checkpointer from starting the WAL over; the truncating
/// checkpoint it keeps trying must not hold the writer back meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reader_never_stalls_appends_behind_the_checkpointer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let s = Store::new(SqliteStore::open_path(&path).await.unwrap());
    write_some(&s, "d").await;
    let reader = rusqlite::Connection::open_with_flags(
        &path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let n: i64 = reader
        .query_row("SELECT COUNT(*) FROM chunks", [], |r| r.get(0))
        .unwrap();
    assert!(n > 0);
    let mut slowest = Duration::ZERO;
    for k in 0..20 {
        // Quiet rounds between appends: the checkpointer tries to start the
        // WAL over each time and is refused by the reader.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let t = Instant::now();
        let e =
            agui_store::sample::event(serde_json::json!({"type":"CUSTOM","name":"n","value":k}));
        s.append("t", "d", AppendRequest::new(vec![e]))
            .await
            .unwrap();
        slowest = slowest.max(t.elapsed());
    }
    // A stall behind a waiting checkpoint lasted its busy timeout (it was
    // 5 s); a generous bound for a loaded machine.
    assert!(
        slowest < Duration::from_secs(2),
        "an append took {slowest:?}"
    );
    reader.execute_batch("COMMIT").unwrap();
    assert_eq!(
        s.read_range("t", "d", 1, u64::MAX).await.unwrap().len(),
        2020
    );
    s.close().await.unwrap();
}
