//! The restore cases on every backend (memory, file, SQLite, PostgreSQL),
//! through the library the CLI and the gateway both call: equivalent,
//! enhanced, reduced (channels kept), empty (fails unless history-only),
//! invalid (fails unless imported under a new id), and atomicity (a document
//! that fails at its last record, or changes under the import after the
//! first write, leaves the target as it was).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agui_session::{Layout, SessionError, Source};
use common::*;

/// Target id, available agents, history-only, case, missing, joining.
type Case = (
    &'static str,
    Option<&'static [&'static str]>,
    bool,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
);

async fn source_doc() -> String {
    let s: agui_store::Store = agui_store::Store::memory();
    multi_agent_thread(&s, "t").await;
    export_text(&s, "t", Layout::Ndjson).await
}

async fn for_each_backend(f: impl AsyncFn(&'static str, agui_store::Store)) {
    let b = Backends::new();
    for (name, url) in b.urls() {
        let store = open(&url).await;
        f(name, store.clone()).await;
        store.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equivalent_enhanced_reduced_and_history_only() {
    let doc = source_doc().await;
    let src: agui_store::Store = agui_store::Store::memory();
    multi_agent_thread(&src, "t").await;
    let want = picture(&src, "t").await;
    for_each_backend(async |name, store| {
        let cases: [Case; 5] = [
            (
                "eq",
                Some(&["research", "writer"]),
                false,
                "equivalent",
                &[],
                &[],
            ),
            (
                "en",
                Some(&["research", "writer", "critic"]),
                false,
                "enhanced",
                &[],
                &["critic"],
            ),
            (
                "re",
                Some(&["research"]),
                false,
                "reduced",
                &["writer"],
                &[],
            ),
            (
                "ho",
                Some(&["critic"]),
                true,
                "history_only",
                &["research", "writer"],
                &["critic"],
            ),
            ("all", None, false, "equivalent", &[], &[]),
        ];
        for (id, agents, history_only, case, missing, joining) in cases {
            let mut o = opts(agents);
            o.target = Some(id.to_owned());
            o.history_only = history_only;
            let r = import_text(&store, &doc, o).await.unwrap();
            assert_eq!(r.case.as_str(), case, "{name} {id}");
            assert_eq!(r.missing, missing, "{name} {id}");
            assert_eq!(r.joining, joining, "{name} {id}");
            assert_eq!(r.thread_id, id);
            assert_eq!(r.source_thread_id, "t");
            // Whatever the case, the history and every channel are complete
            // (reduced keeps the missing agents' channels).
            assert_eq!(picture(&store, id).await, want, "{name} {id}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_fails_fast_and_changes_nothing() {
    let doc = source_doc().await;
    for_each_backend(async |name, store| {
        let e = import_text(&store, &doc, opts(Some(&["critic"])))
            .await
            .unwrap_err();
        assert!(matches!(e, SessionError::NoAgents { .. }), "{name}: {e}");
        assert_eq!(e.code(), "no_agents");
        assert!(e.to_string().contains("research, writer"), "{e}");
        assert!(e.to_string().contains("--history-only"), "{e}");
        let e = import_text(&store, &doc, opts(Some(&[])))
            .await
            .unwrap_err();
        assert_eq!(e.code(), "no_agents", "{name}");
        assert!(
            store.thread(TENANT, "t").await.is_err(),
            "{name}: nothing written"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_fails_fast_unless_imported_as_a_new_id() {
    let doc = source_doc().await;
    for_each_backend(async |name, store| {
        // A target with events.
        put_stream(
            &store,
            "t",
            &[ev(r#"{"type":"CUSTOM","name":"x","value":1}"#)],
            &[],
        )
        .await;
        let before = picture(&store, "t").await;
        let e = import_text(&store, &doc, opts(None)).await.unwrap_err();
        assert!(
            matches!(e, SessionError::ThreadExists { .. }),
            "{name}: {e}"
        );
        assert!(e.to_string().contains("--as NEW_ID"), "{e}");
        assert_eq!(picture(&store, "t").await, before, "{name}: unchanged");
        let mut o = opts(None);
        o.target = Some("t-copy".into());
        let r = import_text(&store, &doc, o).await.unwrap();
        assert_eq!(r.thread_id, "t-copy");
        // Into the copy again: it has history now.
        let mut o = opts(None);
        o.target = Some("t-copy".into());
        let e = import_text(&store, &doc, o).await.unwrap_err();
        assert_eq!(e.code(), "thread_exists", "{name}");
        // A target with channel state only counts too (a thread whose
        // events... a channel needs a thread, so: events plus a channel).
        store
            .put_channel(TENANT, "t", agui_store::Channel::new("research", "{}"))
            .await
            .unwrap();
        let e = import_text(&store, &doc, opts(None)).await.unwrap_err();
        assert_eq!(e.code(), "thread_exists", "{name}");
    })
    .await;
}

/// The document with its last record damaged (a wrong checksum): nothing
/// is written on any backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_failing_at_its_last_record_leaves_the_target_unchanged() {
    let doc = source_doc().await;
    let lines: Vec<&str> = doc.lines().collect();
    let last = lines.len() - 1;
    let bad_end = lines[last].replace("\"sha256\":\"", "\"sha256\":\"00");
    let mut damaged: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    damaged[last] = bad_end;
    let damaged = damaged.join("\n");
    for_each_backend(async |name, store| {
        let e = import_text(&store, &damaged, opts(None)).await.unwrap_err();
        assert_eq!(e.code(), "checksum_mismatch", "{name}: {e}");
        assert!(store.thread(TENANT, "t").await.is_err(), "{name}");
        assert!(
            store.channels(TENANT, "t").await.unwrap().is_empty(),
            "{name}"
        );
    })
    .await;
}

/// A source that gives the good document on its first read (the check) and
/// a damaged one afterwards: the import fails after having written, and
/// removes what it wrote.
struct Changing {
    good: bytes::Bytes,
    bad: bytes::Bytes,
    reads: AtomicUsize,
}

impl Source for Changing {
    fn open(&self) -> std::io::Result<Box<dyn std::io::BufRead + Send>> {
        let n = self.reads.fetch_add(1, Ordering::SeqCst);
        let b = if n == 0 { &self.good } else { &self.bad };
        Ok(Box::new(std::io::Cursor::new(b.clone())))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_the_first_write_is_rolled_back() {
    let doc = source_doc().await;
    let last = doc.trim_end().rfind('\n').unwrap();
    let bad = format!(
        "{}\n{}",
        &doc[..last],
        doc[last + 1..].replace("\"sha256\":\"", "\"sha256\":\"f")
    );
    for_each_backend(async |name, store| {
        let src = Arc::new(Changing {
            good: bytes::Bytes::from(doc.clone().into_bytes()),
            bad: bytes::Bytes::from(bad.clone().into_bytes()),
            reads: AtomicUsize::new(0),
        });
        let e = agui_session::import(store.clone(), src.clone(), opts(None))
            .await
            .unwrap_err();
        assert_eq!(e.code(), "checksum_mismatch", "{name}: {e}");
        assert_eq!(src.reads.load(Ordering::SeqCst), 2, "{name}: it did write");
        assert!(
            store.thread(TENANT, "t").await.is_err(),
            "{name}: rolled back"
        );
        assert!(
            store.channels(TENANT, "t").await.unwrap().is_empty(),
            "{name}"
        );
        // And the thread id is free for a good import.
        import_text(&store, &doc, opts(None)).await.unwrap();
    })
    .await;
}

/// While an import writes, the target id shows nothing (the events go to a
/// staging thread, renamed at the end); an importing process that dies
/// midway (here: a panic in its progress callback after the second batch)
/// leaves only the staging thread, never a partial target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_target_appears_whole_or_not_at_all() {
    let doc = source_doc().await;
    let src: agui_store::Store = agui_store::Store::memory();
    multi_agent_thread(&src, "t").await;
    let want = picture(&src, "t").await;
    for_each_backend(async |name, store| {
        let threads = async |store: &agui_store::Store| -> Vec<String> {
            let page = store
                .list_threads(TENANT, &agui_store::ThreadFilter::default())
                .await
                .unwrap();
            page.threads.into_iter().map(|t| t.thread_id).collect()
        };
        // Watching from the progress callback.
        let seen = Arc::new(AtomicUsize::new(0));
        let mut o = opts(None);
        let (watch, count) = (store.clone(), seen.clone());
        o.progress = Some(Arc::new(move |_| {
            let visible = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(watch.thread(TENANT, "t"))
            });
            assert!(visible.is_err(), "the target is visible mid-import");
            count.fetch_add(1, Ordering::SeqCst);
        }));
        import_text(&store, &doc, o).await.unwrap();
        assert!(seen.load(Ordering::SeqCst) >= 2, "{name}: several batches");
        assert_eq!(picture(&store, "t").await, want, "{name}");
        assert_eq!(threads(&store).await, ["t"], "{name}: no staging left");

        // A process dying after two batches.
        let mut o = opts(None);
        o.target = Some("u".into());
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        o.progress = Some(Arc::new(move |_| {
            if c.fetch_add(1, Ordering::SeqCst) == 1 {
                panic!("the importing process dies");
            }
        }));
        let (s, d) = (store.clone(), doc.clone());
        let died = tokio::spawn(async move { import_text(&s, &d, o).await }).await;
        assert!(died.unwrap_err().is_panic(), "{name}");
        assert!(
            store.thread(TENANT, "u").await.is_err(),
            "{name}: no target"
        );
        assert!(store.channels(TENANT, "u").await.unwrap().is_empty());
        let left: Vec<String> = threads(&store)
            .await
            .into_iter()
            .filter(|t| t != "t")
            .collect();
        assert_eq!(left.len(), 1, "{name}: {left:?}");
        assert!(
            left[0].starts_with(agui_session::STAGING_PREFIX),
            "{name}: {left:?}"
        );
        // The staging thread is removed like any thread; "u" imports fine.
        store.delete_thread(TENANT, &left[0]).await.unwrap();
        let mut o = opts(None);
        o.target = Some("u".into());
        import_text(&store, &doc, o).await.unwrap();
        assert_eq!(picture(&store, "u").await, want, "{name}");
    })
    .await;
}
