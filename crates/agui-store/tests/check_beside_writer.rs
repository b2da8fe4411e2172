//! `store check` beside a live writer: the check reads a thread's summary,
//! log, run index and checkpoints one after the other, and a writer
//! appending meanwhile made them disagree for a moment, which the check
//! reported as damage on a healthy store ("summary says 2 runs, the run
//! index holds 3").

use agui_store::check::check_store;
use agui_store::sample::full_run;
use agui_store::{AppendRequest, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_beside_a_writer_finds_no_damage_in_a_healthy_store() {
    let store = Store::memory();
    store
        .append(
            "t",
            "th",
            AppendRequest::new(full_run("th", "r0", None, "x")),
        )
        .await
        .unwrap();
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 1..400u32 {
                let (run, parent) = (format!("r{i}"), format!("r{}", i - 1));
                let events = full_run("th", &run, Some(&parent), "some text here");
                // Two appends a run: a run in flight between them.
                let (a, b) = events.split_at(3);
                for part in [a, b] {
                    store
                        .append("t", "th", AppendRequest::new(part.to_vec()))
                        .await
                        .unwrap();
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    let mut checks = 0;
    while !writer.is_finished() {
        let report = check_store(&store, |_| {}).await.unwrap();
        assert!(
            report.damage.is_empty(),
            "a healthy store reported damaged beside its writer: {:?}",
            report.damage
        );
        checks += 1;
    }
    writer.await.unwrap();
    store.settle().await;
    let report = check_store(&store, |_| {}).await.unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert!(
        report
            .notes
            .iter()
            .all(|n| n.thread.is_none() || !n.what.contains("writer"))
    );
    assert!(checks > 0);
}
