//! The errors a client sees from the PostgreSQL store say what went wrong
//! in the words of the other backends, with nothing of the server's text
//! (constraint names, `DETAIL` lines with key bytes) in them or their
//! causes. Skipped without `AGUI_TEST_POSTGRES_URL`, as the crate's other
//! tests.

mod common;

use agui_store::sample::{run_finished, run_started};
use agui_store::{AppendRequest, ErrorKind, Store, StoreError};
use common::Schema;

/// The error's text and every cause's, as the CLI prints them.
fn chain(err: &StoreError) -> Vec<String> {
    agui_store::conformance::error_texts(err)
}

async fn append_err(store: &Store, events: Vec<agui_protocol::Event>) -> StoreError {
    match store.append("t", "th", AppendRequest::new(events)).await {
        Ok(_) => panic!("a reused run id was appended"),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_run_id_is_one_line_naming_the_run_as_on_the_other_backends() {
    let Some(url) = common::url() else { return };
    let schema = Schema::new(url);
    let a = Store::new(schema.open().await.unwrap());
    // r1 is not the thread's last run: the engine's plan (which knows
    // the head's last run only) leaves the reuse to the commit.
    a.append(
        "t",
        "th",
        AppendRequest::new(vec![
            run_started("th", "r1", None),
            run_finished("th", "r1"),
            run_started("th", "r2", None),
            run_finished("th", "r2"),
        ]),
    )
    .await
    .unwrap();
    let want = r#"invalid: runId "r1" is already used in this thread"#;
    // The store that wrote the thread (it knows the head: one statement),
    // and another one (another process: the head is locked first).
    let b = Store::new(schema.open().await.unwrap());
    for store in [&a, &b] {
        let err = append_err(store, vec![run_started("th", "r1", None)]).await;
        assert_eq!(err.kind(), ErrorKind::Invalid);
        assert_eq!(chain(&err), vec![want.to_owned()]);
    }
    // A batch that starts two runs, the second one reused: the store asks
    // which one the thread has.
    let two = vec![
        run_started("th", "r3", None),
        run_finished("th", "r3"),
        run_started("th", "r1", None),
    ];
    let err = append_err(&b, two).await;
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert_eq!(chain(&err), vec![want.to_owned()]);
    // Nothing of the refused batches was written.
    let runs: Vec<String> = a
        .read_range("t", "th", 1, u64::MAX)
        .await
        .unwrap()
        .iter()
        .map(|e| e.event.to_value()["runId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(runs, ["r1", "r1", "r2", "r2"]);
    a.close().await.unwrap();
    b.close().await.unwrap();
}
