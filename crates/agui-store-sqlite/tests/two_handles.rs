//! One writer per database file: a second writable open (another gateway,
//! or `agui store import` beside a running `agui serve`) is refused, naming
//! the holder's process id; read-only handles (as `agui store ls|stats|
//! export|check` use) work beside the writer and create nothing.

use agui_store::sample::event;
use agui_store::{AppendRequest, ErrorKind};
use agui_store_sqlite::SqliteStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_is_refused_and_readers_work_beside_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let a = agui_store::Store::new(SqliteStore::open_path(&path).await.unwrap());
    let err = match SqliteStore::open_path(&path).await {
        Ok(_) => panic!("a second writer opened the same file"),
        Err(e) => e,
    };
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(
        err.to_string().contains(&format!(
            "in use by another process (pid {})",
            std::process::id()
        )),
        "{err}"
    );
    let reader = agui_store::Store::new(SqliteStore::open_read_only(&path).await.unwrap());
    for i in 0..5u64 {
        let e = event(serde_json::json!({"type":"CUSTOM","name":"n","value":i}));
        a.append("t", "th", AppendRequest::new(vec![e]))
            .await
            .unwrap();
    }
    // The reader sees the writer's commits, and cannot write.
    let all = reader.read_range("t", "th", 1, u64::MAX).await.unwrap();
    assert_eq!(all.len(), 5);
    let e = event(serde_json::json!({"type":"CUSTOM","name":"n","value":9}));
    let refused = reader
        .append("t", "th", AppendRequest::new(vec![e]))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Unsupported);
    assert_eq!(
        reader.mark_interrupted().await.unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    reader.close().await.unwrap();
    // Closing the writer releases the lock.
    a.close().await.unwrap();
    let b = agui_store::Store::new(SqliteStore::open_path(&path).await.unwrap());
    assert_eq!(b.thread("t", "th").await.unwrap().last_seq, 5);
    b.close().await.unwrap();
}

#[tokio::test]
async fn a_read_only_open_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo.db");
    let err = match SqliteStore::open_read_only(&missing).await {
        Ok(_) => panic!("opened a missing database"),
        Err(e) => e,
    };
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // An SQLite file that is not an agui store is not one either.
    let other = dir.path().join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE x (y INTEGER)")
        .unwrap();
    let err = match SqliteStore::open_read_only(&other).await {
        Ok(_) => panic!("opened a foreign database"),
        Err(e) => e,
    };
    assert_eq!(err.kind(), ErrorKind::NotFound);
}
