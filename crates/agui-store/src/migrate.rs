//! Copying threads between stores (any two backends), resumably, and the
//! digests that verify a copy.
//!
//! A copy preserves every event's sequence number, exact JSON and receive
//! time, the original batch boundaries (so runs start in the same batches)
//! and the agent of every run. The destination rebuilds its run index from
//! the events, as on any append; checkpoints are deferred
//! ([`crate::Checkpoints::Defer`]) and built by each thread's first restore,
//! so a copy holds one batch at a time whatever the thread's size (building
//! them during the copy kept the whole conversation of a long thread in
//! memory: gigabytes for a million-event thread).

use sha2::{Digest, Sha256};

use crate::Store;
use crate::error::{Result, StoreError};
use crate::types::{AppendRequest, Durability, MAX_PAGE, RunFilter, StoredEvent, ThreadFilter};

/// Events per append when copying (batches are also cut where the source's
/// batches were, and before every `RUN_STARTED`).
const COPY_BATCH: usize = 1000;

/// A thread's fingerprint: its event count and the SHA-256 over every
/// event's sequence number, receive time and JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadDigest {
    /// Number of events.
    pub events: u64,
    /// Lower-case hex SHA-256.
    pub sha256: String,
}

/// Computes a thread's [`ThreadDigest`] by streaming its log.
pub async fn digest(store: &Store, tenant: &str, thread: &str) -> Result<ThreadDigest> {
    let mut hasher = Sha256::new();
    let mut events = 0u64;
    let mut next = Some(1);
    while let Some(from) = next {
        let page = store.read(tenant, thread, from, MAX_PAGE).await?;
        for e in &page.events {
            hasher.update(e.seq.to_le_bytes());
            hasher.update(e.received_at.0.to_le_bytes());
            hasher.update((e.event.len_bytes() as u64).to_le_bytes());
            hasher.update(e.event.json().as_bytes());
            events += 1;
        }
        next = page.next_seq;
    }
    let sha: [u8; 32] = hasher.finalize().into();
    Ok(ThreadDigest {
        events,
        sha256: sha.iter().map(|b| format!("{b:02x}")).collect(),
    })
}

/// Every (tenant, thread) of a store, with each thread's event count.
pub async fn all_threads(store: &Store) -> Result<Vec<(String, String, u64)>> {
    let mut out = Vec::new();
    for tenant in store.tenants().await? {
        let mut cursor = None;
        loop {
            let page = store
                .list_threads(
                    &tenant,
                    &ThreadFilter {
                        limit: MAX_PAGE,
                        cursor,
                        ..ThreadFilter::default()
                    },
                )
                .await?;
            out.extend(
                page.threads
                    .into_iter()
                    .map(|t| (tenant.clone(), t.thread_id, t.last_seq)),
            );
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
    }
    Ok(out)
}

/// Copies one thread from `src` to `dst`, resuming after whatever prefix of
/// it `dst` already holds (checked event by event at the boundary). Calls
/// `progress(n)` after each batch with the events copied in it. Returns the
/// number of events copied.
///
/// `Conflict` when `dst` holds a thread of that id that is not a prefix of
/// the source's.
pub async fn copy_thread(
    src: &Store,
    dst: &Store,
    tenant: &str,
    thread: &str,
    mut progress: impl FnMut(u64) + Send,
) -> Result<u64> {
    let src_info = src.thread(tenant, thread).await?;
    let have = match dst.thread(tenant, thread).await {
        Ok(info) => info.last_seq,
        Err(e) if e.kind() == crate::ErrorKind::NotFound => 0,
        Err(e) => return Err(e),
    };
    if have > src_info.last_seq {
        return Err(StoreError::new(
            crate::ErrorKind::Conflict,
            "the destination thread is longer than the source's",
        ));
    }
    if have > 0 {
        let a = src.read_range(tenant, thread, have, have).await?;
        let b = dst.read_range(tenant, thread, have, have).await?;
        let same = match (a.first(), b.first()) {
            (Some(x), Some(y)) => {
                x.event.json() == y.event.json() && x.received_at == y.received_at
            }
            _ => false,
        };
        if !same {
            return Err(StoreError::new(
                crate::ErrorKind::Conflict,
                "the destination thread differs from the source's",
            ));
        }
    }
    // The agent of every run, to restate it on the batch that starts it.
    let mut agents = std::collections::HashMap::new();
    let mut cursor = None;
    loop {
        let page = src
            .list_runs(
                tenant,
                &RunFilter {
                    thread_id: Some(thread.to_owned()),
                    limit: MAX_PAGE,
                    cursor,
                    ..RunFilter::default()
                },
            )
            .await?;
        for r in page.runs {
            agents.insert(r.first_seq, r.agent);
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let mut copied = 0u64;
    let mut last = have;
    let mut next = Some(have + 1);
    let mut pending: Vec<StoredEvent> = Vec::new();
    while let Some(from) = next.filter(|&f| f <= src_info.last_seq) {
        let page = src.read(tenant, thread, from, MAX_PAGE).await?;
        next = page.next_seq;
        for e in page.events {
            let cut = pending.first().is_some_and(|p| {
                p.received_at != e.received_at
                    || pending.len() >= COPY_BATCH
                    || e.event.event_type() == &agui_protocol::EventType::RunStarted
            });
            if cut {
                last = flush(
                    dst,
                    tenant,
                    thread,
                    &mut pending,
                    last,
                    &agents,
                    &src_info.agent,
                )
                .await?;
                copied = last - have;
                progress(copied);
            }
            pending.push(e);
        }
    }
    if !pending.is_empty() {
        last = flush(
            dst,
            tenant,
            thread,
            &mut pending,
            last,
            &agents,
            &src_info.agent,
        )
        .await?;
        copied = last - have;
        progress(copied);
    }
    dst.flush().await?;
    Ok(copied)
}

async fn flush(
    dst: &Store,
    tenant: &str,
    thread: &str,
    pending: &mut Vec<StoredEvent>,
    last: u64,
    agents: &std::collections::HashMap<u64, Option<String>>,
    thread_agent: &Option<String>,
) -> Result<u64> {
    let batch = std::mem::take(pending);
    let Some(first) = batch.first() else {
        return Ok(last);
    };
    let agent = agents
        .get(&first.seq)
        .cloned()
        .unwrap_or_else(|| thread_agent.clone());
    let received_at = first.received_at;
    let req = AppendRequest {
        events: batch.into_iter().map(|e| e.event).collect(),
        expected_seq: Some(last),
        agent,
        durability: Durability::RunEnd,
        received_at: Some(received_at),
        checkpoints: crate::Checkpoints::Defer,
    };
    Ok(dst.append(tenant, thread, req).await?.last_seq)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use crate::sample::{full_run, realistic_run};

    #[tokio::test]
    async fn copies_resume_and_verify() {
        let src = Store::memory();
        for k in 0..3 {
            let run = format!("r{k}");
            src.append(
                "t",
                "th",
                AppendRequest::new(realistic_run("th", &run, None, 60)).agent(format!("agent{k}")),
            )
            .await
            .unwrap();
        }
        src.append(
            "t",
            "other",
            AppendRequest::new(full_run("other", "x", None, "hi")),
        )
        .await
        .unwrap();
        let dst = Store::memory();
        // A partial copy first: the first batch, as an interrupted
        // migration leaves it.
        let head = src.read_range("t", "th", 1, 60).await.unwrap();
        let at = head[0].received_at;
        dst.append(
            "t",
            "th",
            AppendRequest {
                events: head.into_iter().map(|e| e.event).collect(),
                expected_seq: Some(0),
                agent: Some("agent0".into()),
                durability: Durability::RunEnd,
                received_at: Some(at),
                checkpoints: crate::Checkpoints::Build,
            },
        )
        .await
        .unwrap();
        let mut seen = Vec::new();
        let n = copy_thread(&src, &dst, "t", "th", |c| seen.push(c))
            .await
            .unwrap();
        assert_eq!(n, 180 - 60);
        assert_eq!(seen.last(), Some(&n));
        assert_eq!(
            digest(&src, "t", "th").await.unwrap(),
            digest(&dst, "t", "th").await.unwrap()
        );
        // Runs and agents came along; checkpoints were deferred: the first
        // restore replays the log and builds them, the next one reads them.
        let th_runs = RunFilter {
            thread_id: Some("th".into()),
            ..RunFilter::default()
        };
        let a = src.list_runs("t", &th_runs).await.unwrap().runs;
        let b = dst.list_runs("t", &th_runs).await.unwrap().runs;
        assert_eq!(a, b);
        let first = dst.restore("t", "th", "r2").await.unwrap();
        assert!(!first.from_checkpoint);
        let again = dst.restore("t", "th", "r2").await.unwrap();
        assert!(again.from_checkpoint);
        assert_eq!(again.json, first.json);
        assert_eq!(again.json, src.restore("t", "th", "r2").await.unwrap().json);
        // Copying again copies nothing.
        assert_eq!(copy_thread(&src, &dst, "t", "th", |_| {}).await.unwrap(), 0);
        // A destination that diverged is a conflict.
        copy_thread(&src, &dst, "t", "other", |_| {}).await.unwrap();
        dst.append(
            "t",
            "other",
            AppendRequest::new(vec![crate::sample::run_error("x")]),
        )
        .await
        .unwrap();
        let e = copy_thread(&src, &dst, "t", "other", |_| {})
            .await
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Conflict);
        let threads = all_threads(&src).await.unwrap();
        assert_eq!(threads.len(), 2);
    }
}
