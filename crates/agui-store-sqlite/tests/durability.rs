//! The durability choices as documented: `Append` fsyncs every append,
//! `RunEnd` only appends that end a run (and groups that contain one).

use agui_store::sample::{event, run_finished, run_started};
use agui_store::{AppendRequest, Durability};
use agui_store_sqlite::SqliteStore;

#[tokio::test]
async fn acknowledgements_say_what_was_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let s = agui_store::Store::new(
        SqliteStore::open_path(&dir.path().join("d.db"))
            .await
            .unwrap(),
    );
    let custom = || event(serde_json::json!({"type":"CUSTOM","name":"n","value":1}));
    let run_end = |events| AppendRequest::new(events).durability(Durability::RunEnd);
    let a = s
        .append("t", "th", run_end(vec![run_started("th", "r", None)]))
        .await
        .unwrap();
    assert!(!a.durable, "RunEnd does not flush a run's middle");
    let a = s
        .append(
            "t",
            "th",
            AppendRequest::new(vec![custom()]).durability(Durability::Append),
        )
        .await
        .unwrap();
    assert!(a.durable, "Append flushes");
    let a = s
        .append("t", "th", run_end(vec![custom(), run_finished("th", "r")]))
        .await
        .unwrap();
    assert!(a.durable, "RunEnd flushes the append that ends a run");
    s.close().await.unwrap();
}
