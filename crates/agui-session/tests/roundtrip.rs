//! Round trips: a thread exported from one backend and imported into the
//! next (SQLite → PostgreSQL → file) is restored exactly: events (same JSON
//! values, sequence numbers and times), runs (lineage, agents, statuses,
//! times), channels, and every run's conversation; and the document exported
//! again is byte for byte the first one.

mod common;

use agui_session::Layout;
use agui_testkit::r#gen::{self as streams, Profile};
use common::*;

async fn chain(thread: &str, fill: impl AsyncFnOnce(&agui_store::Store)) {
    let b = Backends::new();
    let mut urls: Vec<(&str, String)> = b
        .urls()
        .into_iter()
        .filter(|(n, _)| *n != "memory")
        .collect();
    // SQLite → PostgreSQL → file.
    urls.sort_by_key(|(n, _)| match *n {
        "sqlite" => 0,
        "postgres" => 1,
        _ => 2,
    });
    let first = open(&urls[0].1).await;
    fill(&first).await;
    let want = picture(&first, thread).await;
    let json_doc = export_text(&first, thread, Layout::Json).await;
    let mut doc = json_doc.clone();
    first.close().await.unwrap();
    for (i, (name, url)) in urls.iter().enumerate().skip(1) {
        let layout = if i % 2 == 0 {
            Layout::Json
        } else {
            Layout::Ndjson
        };
        let store = open(url).await;
        let report = import_text(&store, &doc, opts(None)).await.unwrap();
        assert_eq!(report.case.as_str(), "equivalent");
        assert!(
            report.status_differences.is_empty(),
            "{:?}",
            report.status_differences
        );
        let got = picture(&store, thread).await;
        assert_eq!(
            got, want,
            "{thread}: the picture after importing into {name}"
        );
        let again = export_text(&store, thread, Layout::Json).await;
        assert_eq!(
            again, json_doc,
            "{thread}: the document exported again from {name}"
        );
        doc = export_text(&store, thread, layout).await;
        store.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_generator_profile_round_trips_sqlite_postgres_file() {
    for (i, profile) in Profile::ALL.iter().enumerate() {
        let events = streams::stream(*profile, 11 + i as u64);
        let thread = format!("profile-{}", profile.name());
        let t = thread.clone();
        chain(&thread, async move |s: &agui_store::Store| {
            put_stream(s, &t, &events, &["research", "writer"]).await;
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_agent_branched_thread_round_trips_sqlite_postgres_file() {
    chain("multi", async |s: &agui_store::Store| {
        multi_agent_thread(s, "multi").await;
    })
    .await;
}
