//! Two stores open on one database file (as `agui store` beside a running
//! `agui serve`): appends from either continue the other's sequence.

use agui_store::sample::event;
use agui_store::{AppendRequest, ErrorKind, EventStore};
use agui_store_sqlite::SqliteStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_from_two_handles_interleave_without_collision() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let a = SqliteStore::open_path(&path).await.unwrap();
    let b = SqliteStore::open_path(&path).await.unwrap();
    for i in 0..20u64 {
        let store = if i % 2 == 0 { &a } else { &b };
        let e = event(serde_json::json!({"type":"CUSTOM","name":"n","value":i}));
        let appended = store
            .append("t", "th", AppendRequest::new(vec![e]))
            .await
            .unwrap();
        assert_eq!(appended.first_seq, i + 1);
    }
    // A stale expectation from one handle is a conflict, not an overwrite.
    let e = event(serde_json::json!({"type":"CUSTOM","name":"n","value":99}));
    let err = a
        .append("t", "th", AppendRequest::new(vec![e]).expect_seq(5))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let all = b.read_range("t", "th", 1, u64::MAX).await.unwrap();
    let values: Vec<u64> = all
        .iter()
        .map(|e| e.event.to_value()["value"].as_u64().unwrap())
        .collect();
    assert_eq!(values, (0..20).collect::<Vec<_>>());
    a.close().await.unwrap();
    b.close().await.unwrap();
}
