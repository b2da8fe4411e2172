//! The durability choices as documented: `Append` flushes every append,
//! `RunEnd` only appends that end a run (acknowledged by the writer's sync
//! thread after its flush of the WAL; other appends of the same group are
//! acknowledged at once, unflushed).

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

/// Many threads at once, half of them ending their run: every run end is
/// acknowledged flushed, every other append not, all of it there after
/// reopening; the store is opened by a path with a symbolic link in it.
#[tokio::test]
async fn concurrent_run_ends_are_flushed_through_a_linked_path() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("real")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
    let s = agui_store::Store::new(
        SqliteStore::open_path(&dir.path().join("link/d.db"))
            .await
            .unwrap(),
    );
    let mut tasks = Vec::new();
    for i in 0..32 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let th = format!("th-{i}");
            let run = format!("r-{i}");
            let req = |events| AppendRequest::new(events).durability(Durability::RunEnd);
            let a = s
                .append("t", &th, req(vec![run_started(&th, &run, None)]))
                .await
                .unwrap();
            assert!(!a.durable);
            if i % 2 == 0 {
                let a = s
                    .append("t", &th, req(vec![run_finished(&th, &run)]))
                    .await
                    .unwrap();
                assert!(a.durable, "a run's end is flushed");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    s.close().await.unwrap();
    assert!(dir.path().join("real/d.db").is_file());
    let s = agui_store::Store::new(
        SqliteStore::open_path(&dir.path().join("real/d.db"))
            .await
            .unwrap(),
    );
    for i in 0..32 {
        let events = s.read("t", &format!("th-{i}"), 1, 10).await.unwrap();
        assert_eq!(events.events.len(), if i % 2 == 0 { 2 } else { 1 });
    }
    s.close().await.unwrap();
}
