//! The engine builds checkpoints online, from the committed batches it holds
//! (off the append path); a deferred thread gets them rebuilt from the log
//! by its first restore. Both must give the same conversation for every run,
//! on every profile of the generator, however the log is cut into batches,
//! and so must the stored checkpoints read by a fresh engine (a restart,
//! nothing cached); and each run's conversation is its branch's as the
//! history core's lineage gives it (lineage provenance included).

use agui_protocol::Event;
use agui_store::{AppendRequest, Checkpoints, Conversation, MemoryStore, RunFilter, Store};
use agui_testkit::r#gen::{Profile, stream};
use proptest::prelude::*;

const T: &str = "t";

/// Cuts `events` into batches of the given sizes (cycled).
fn cut(events: &[Event], sizes: &[usize]) -> Vec<Vec<Event>> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut k = 0;
    while at < events.len() {
        let n = sizes[k % sizes.len()].max(1).min(events.len() - at);
        out.push(events[at..at + n].to_vec());
        at += n;
        k += 1;
    }
    out
}

/// Appends every batch; `None` when the store refuses one (then the other
/// store must refuse the same batch).
async fn fill(store: &Store, batches: &[Vec<Event>], how: Checkpoints) -> Vec<bool> {
    let mut accepted = Vec::new();
    for b in batches {
        let req = AppendRequest::new(b.clone()).checkpoints(how);
        accepted.push(store.append(T, "th", req).await.is_ok());
    }
    accepted
}

async fn runs(store: &Store) -> Vec<String> {
    let filter = RunFilter {
        thread_id: Some("th".into()),
        limit: agui_store::MAX_PAGE,
        ..RunFilter::default()
    };
    match store.list_runs(T, &filter).await {
        Ok(page) => page.runs.into_iter().map(|r| r.run_id).collect(),
        Err(_) => Vec::new(),
    }
}

/// Every run's restore, as `Ok(json)` or the error's kind.
async fn restores(store: &Store, ids: &[String]) -> Vec<Result<String, agui_store::ErrorKind>> {
    let mut out = Vec::new();
    for id in ids {
        out.push(
            store
                .restore(T, "th", id)
                .await
                .map(|r| r.json.to_string())
                .map_err(|e| e.kind()),
        );
    }
    out
}

fn check(profile: Profile, seed: u64, sizes: Vec<usize>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let events = stream(profile, seed);
        let batches = cut(&events, &sizes);
        let online_mem = MemoryStore::new();
        let online = Store::new(online_mem.clone());
        let deferred = Store::memory();
        let a = fill(&online, &batches, Checkpoints::Build).await;
        let b = fill(&deferred, &batches, Checkpoints::Defer).await;
        prop_assert_eq!(&a, &b, "{}: the same batches are accepted", profile.name());
        online.settle().await;
        let ids = runs(&online).await;
        prop_assert_eq!(&ids, &runs(&deferred).await);
        let built = restores(&online, &ids).await;
        let rebuilt = restores(&deferred, &ids).await;
        prop_assert_eq!(&built, &rebuilt, "{} seed {}", profile.name(), seed);
        // The stored checkpoints alone (a fresh engine caches nothing).
        let fresh = Store::new(online_mem.clone());
        let stored = restores(&fresh, &ids).await;
        prop_assert_eq!(&built, &stored, "{} seed {}: stored", profile.name(), seed);
        // Every run restores to its branch's conversation as the history
        // core's lineage gives it (messages restated from other branches
        // left out), wherever the whole log was taken.
        if a.iter().all(|ok| *ok) {
            let lineage = agui_history::lineage::Lineage::new(&events);
            if let Ok(lineage) = lineage {
                for (id, got) in ids.iter().zip(&built) {
                    let want = lineage
                        .conversation_at(id, None, Conversation::default())
                        .map(|c| serde_json::to_string(&c).expect("serializes"));
                    if let (Ok(want), Ok(got)) = (want, got) {
                        prop_assert_eq!(
                            got,
                            &want,
                            "{} seed {}: run {} against lineage",
                            profile.name(),
                            seed,
                            id
                        );
                    }
                }
            }
        }
        Ok(())
    })
}

proptest! {
    // 512 cases by default: a restatement from another branch is rare in
    // the generator's streams (at 512, an engine that did not apply
    // lineage provenance failed 4 runs of 4; the fixed profile test below
    // never meets one).
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(512)
    ))]

    #[test]
    fn online_checkpoints_equal_the_rebuilt_ones(
        profile in proptest::sample::select(Profile::ALL.to_vec()),
        seed in 0u64..1_000_000,
        sizes in proptest::collection::vec(1usize..40, 1..6),
    ) {
        check(profile, seed, sizes)?;
    }
}

/// Every profile at least once, whatever proptest draws.
#[test]
fn every_profile_builds_the_same_checkpoints_online() {
    for (k, &profile) in Profile::ALL.iter().enumerate() {
        check(profile, 7 + k as u64, vec![1, 5, 17]).unwrap();
    }
}
