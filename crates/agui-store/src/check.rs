//! Checking a whole store (`agui store check`): every event read back
//! (which verifies each backend's chunk and record checksums), every
//! thread's sequence and counters, every run index entry against the index
//! the log itself implies, and every checkpoint (its checksum, its delta
//! chain composing, and how much of its run it covers).
//!
//! Written against [`Store`] alone, so it runs on every backend, and it
//! only reads: nothing is rebuilt or repaired.

use std::collections::HashMap;

use crate::checkpoint::{self, Decoded};
use crate::error::{ErrorKind, Result};
use crate::index::{ThreadHead, plan_batch};
use crate::types::{RunFilter, RunRecord, RunStatus, StoredEvent, ThreadFilter, Timestamp};
use crate::{Store, StoreError};

/// One finding of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The tenant.
    pub tenant: String,
    /// The thread, when the finding is about one.
    pub thread: Option<String>,
    /// The run, when the finding is about one.
    pub run: Option<String>,
    /// What is wrong, in words.
    pub what: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Debug quoting keeps hostile ids (control characters) inert.
        if self.tenant.is_empty() && self.thread.is_none() {
            // About the store's files, not a tenant's data.
            return write!(f, "store: {}", self.what);
        }
        write!(f, "tenant {:?}", self.tenant)?;
        if let Some(t) = &self.thread {
            write!(f, ", thread {t:?}")?;
        }
        if let Some(r) = &self.run {
            write!(f, ", run {r:?}")?;
        }
        write!(f, ": {}", self.what)
    }
}

/// What a check found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Tenants checked.
    pub tenants: u64,
    /// Threads checked.
    pub threads: u64,
    /// Events read back and checked.
    pub events: u64,
    /// Run index entries checked.
    pub runs: u64,
    /// Checkpoints decoded and checked.
    pub checkpoints: u64,
    /// Damage: data that is lost, unreadable or contradicts the log.
    pub damage: Vec<Finding>,
    /// Not damage, but worth knowing (a missing or stale checkpoint, which
    /// the next restore rebuilds from the log).
    pub notes: Vec<Finding>,
}

impl CheckReport {
    /// True when no damage was found.
    pub fn is_clean(&self) -> bool {
        self.damage.is_empty()
    }
}

/// Progress of a check: threads done out of threads known.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Threads checked so far.
    pub done: u64,
    /// Threads to check in all.
    pub total: u64,
}

/// Checks every thread of every tenant. Fails only when the store cannot be
/// listed at all; damage found in a thread is reported and the check goes
/// on with the next one.
pub async fn check_store(store: &Store, mut progress: impl FnMut(Progress)) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    for n in store.notices() {
        let finding = Finding {
            tenant: String::new(),
            thread: None,
            run: None,
            what: n.what,
        };
        if n.damage {
            report.damage.push(finding);
        } else {
            report.notes.push(finding);
        }
    }
    let mut threads: Vec<(String, String)> = Vec::new();
    for tenant in store.tenants().await? {
        report.tenants += 1;
        let mut cursor = None;
        loop {
            let page = store
                .list_threads(
                    &tenant,
                    &ThreadFilter {
                        agent: None,
                        limit: crate::MAX_PAGE,
                        cursor,
                    },
                )
                .await?;
            threads.extend(
                page.threads
                    .into_iter()
                    .map(|t| (tenant.clone(), t.thread_id)),
            );
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
    }
    let total = threads.len() as u64;
    for (done, (tenant, thread)) in threads.iter().enumerate() {
        progress(Progress {
            done: done as u64,
            total,
        });
        report.threads += 1;
        check_thread(store, tenant, thread, &mut report).await;
    }
    progress(Progress { done: total, total });
    Ok(report)
}

/// Times a thread is checked again when a writer changed it during its check.
const TRIES: usize = 5;

/// Checks one thread, adding what it finds to `report`. The thread's
/// summary, log, run index and checkpoints are read one after the other,
/// so a writer running beside the check (a live `agui serve`) can make them
/// disagree for a moment: damage found while the thread changed is not
/// reported as such; the thread is checked again, and if it never held
/// still, a note says so. A thread deleted meanwhile is skipped.
pub async fn check_thread(store: &Store, tenant: &str, thread: &str, report: &mut CheckReport) {
    let state = |info: crate::types::ThreadInfo| (info.last_seq, info.run_count, info.bytes);
    for _ in 0..TRIES {
        let before = match store.thread(tenant, thread).await {
            Ok(info) => state(info),
            Err(e) if e.kind() == ErrorKind::NotFound => return,
            Err(_) => {
                // Unreadable: the check says how.
                check_thread_once(store, tenant, thread, report).await;
                return;
            }
        };
        let mut scratch = CheckReport::default();
        check_thread_once(store, tenant, thread, &mut scratch).await;
        let after = store.thread(tenant, thread).await;
        if matches!(&after, Err(e) if e.kind() == ErrorKind::NotFound) {
            return;
        }
        let still = after.ok().map(state) == Some(before);
        if still || scratch.damage.is_empty() {
            report.events += scratch.events;
            report.runs += scratch.runs;
            report.checkpoints += scratch.checkpoints;
            report.damage.extend(scratch.damage);
            report.notes.extend(scratch.notes);
            return;
        }
    }
    report.notes.push(Finding {
        tenant: tenant.to_owned(),
        thread: Some(thread.to_owned()),
        run: None,
        what: format!(
            "a writer changed the thread during each of {TRIES} checks: not checked (check it again when it is idle)"
        ),
    });
}

async fn check_thread_once(store: &Store, tenant: &str, thread: &str, report: &mut CheckReport) {
    let finding = |run: Option<&str>, what: String| Finding {
        tenant: tenant.to_owned(),
        thread: Some(thread.to_owned()),
        run: run.map(str::to_owned),
        what,
    };
    let info = match store.thread(tenant, thread).await {
        Ok(i) => i,
        Err(e) => {
            report.damage.push(finding(
                None,
                format!("the thread's summary is unreadable: {e}"),
            ));
            return;
        }
    };
    // The log: every event read back (backends check their checksums here).
    let events = match store.read_range(tenant, thread, 1, u64::MAX).await {
        Ok(events) => events,
        Err(e) => {
            report
                .damage
                .push(finding(None, format!("the events are unreadable: {e}")));
            return;
        }
    };
    report.events += events.len() as u64;
    if let Some((i, e)) = events
        .iter()
        .enumerate()
        .find(|(i, e)| e.seq != *i as u64 + 1)
    {
        report.damage.push(finding(
            None,
            format!(
                "the log has a gap: event {} has sequence number {}",
                i + 1,
                e.seq
            ),
        ));
        return;
    }
    if events.len() as u64 != info.last_seq {
        report.damage.push(finding(
            None,
            format!(
                "the thread's summary says {} events, the log holds {}",
                info.last_seq,
                events.len()
            ),
        ));
    }
    let bytes: u64 = events.iter().map(|e| e.event.len_bytes() as u64).sum();
    if bytes != info.bytes {
        report.damage.push(finding(
            None,
            format!(
                "the thread's summary says {} bytes of events, the log holds {bytes}",
                info.bytes
            ),
        ));
    }
    // The run index, against the index the log implies.
    let stored = match all_runs(store, tenant, thread).await {
        Ok(runs) => runs,
        Err(e) => {
            report
                .damage
                .push(finding(None, format!("the run index is unreadable: {e}")));
            return;
        }
    };
    report.runs += stored.len() as u64;
    if stored.len() as u64 != info.run_count {
        report.damage.push(finding(
            None,
            format!(
                "the thread's summary says {} runs, the run index holds {}",
                info.run_count,
                stored.len()
            ),
        ));
    }
    let elsewhere = crate::aside::is_aside_tenant(tenant);
    check_index(tenant, &events, &stored, &mut |run, what| {
        report.damage.push(finding(run, what))
    });
    // Checkpoints: checksum, chain, coverage.
    for run in &stored {
        let blob = match store.load_checkpoint(tenant, thread, &run.run_id).await {
            Ok(b) => b,
            Err(e) => {
                report.damage.push(finding(
                    Some(&run.run_id),
                    format!("the checkpoint is unreadable: {e}"),
                ));
                continue;
            }
        };
        let Some(blob) = blob else {
            if run.status != RunStatus::Running && !elsewhere {
                report.notes.push(finding(
                    Some(&run.run_id),
                    "no checkpoint (the next restore rebuilds it from the log)".into(),
                ));
            }
            continue;
        };
        report.checkpoints += 1;
        let decoded = match checkpoint::decode(&blob) {
            Ok(d) => d,
            Err(e) => {
                report
                    .damage
                    .push(finding(Some(&run.run_id), e.to_string()));
                continue;
            }
        };
        if decoded.last_seq != run.last_seq {
            report.notes.push(finding(
                Some(&run.run_id),
                format!(
                    "the checkpoint covers the thread up to event {}, the run ends at {} (stale: the next restore rebuilds it)",
                    decoded.last_seq, run.last_seq
                ),
            ));
            continue;
        }
        if let Err(what) = compose_chain(store, tenant, thread, decoded).await {
            report.damage.push(finding(Some(&run.run_id), what));
        }
    }
}

/// Every run of a thread, in log order.
async fn all_runs(store: &Store, tenant: &str, thread: &str) -> Result<Vec<RunRecord>> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list_runs(
                tenant,
                &RunFilter {
                    thread_id: Some(thread.to_owned()),
                    limit: crate::MAX_PAGE,
                    cursor,
                    ..RunFilter::default()
                },
            )
            .await?;
        out.extend(page.runs);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    out.sort_by_key(|r| r.first_seq);
    Ok(out)
}

/// Compares the stored run index with the one the log implies (the shared
/// rules of [`crate::index`], replayed over the whole log as one batch;
/// a run set aside names its parent in another thread, see
/// [`crate::aside`]).
fn check_index(
    tenant: &str,
    events: &[StoredEvent],
    stored: &[RunRecord],
    damage: &mut dyn FnMut(Option<&str>, String),
) {
    let list: Vec<_> = events.iter().map(|e| e.event.clone()).collect();
    let elsewhere = crate::aside::parents_elsewhere(tenant, &list, None);
    let expected = if list.is_empty() {
        Vec::new()
    } else {
        match plan_batch(&ThreadHead::default(), &list, None, Timestamp(0), |id| {
            Ok(elsewhere.iter().any(|p| p == id))
        }) {
            Ok(plan) => plan.runs,
            Err(e) => {
                damage(None, format!("the log does not index: {e}"));
                return;
            }
        }
    };
    let mut by_id: HashMap<&str, &RunRecord> =
        stored.iter().map(|r| (r.run_id.as_str(), r)).collect();
    for want in &expected {
        let Some(have) = by_id.remove(want.run_id.as_str()) else {
            damage(
                Some(&want.run_id),
                format!(
                    "the run starts at event {} but is missing from the run index",
                    want.first_seq
                ),
            );
            continue;
        };
        let mut differs = Vec::new();
        if have.first_seq != want.first_seq {
            differs.push(format!(
                "first event {} (log: {})",
                have.first_seq, want.first_seq
            ));
        }
        if have.last_seq != want.last_seq {
            differs.push(format!(
                "last event {} (log: {})",
                have.last_seq, want.last_seq
            ));
        }
        if have.event_count != want.add_events {
            differs.push(format!(
                "{} events (log: {})",
                have.event_count, want.add_events
            ));
        }
        if have.bytes != want.add_bytes {
            differs.push(format!("{} bytes (log: {})", have.bytes, want.add_bytes));
        }
        if have.parent_run_id != want.parent_run_id {
            differs.push(format!(
                "parent {:?} (log: {:?})",
                have.parent_run_id, want.parent_run_id
            ));
        }
        // A run starts when its RUN_STARTED was received; readers order
        // runs by it (the preamble before a thread's first run, listings).
        let first = usize::try_from(want.first_seq)
            .ok()
            .and_then(|s| events.get(s.wrapping_sub(1)));
        if let Some(first) = first
            && have.started_at != first.received_at
        {
            differs.push(format!(
                "started at {} (log: {})",
                have.started_at.0, first.received_at.0
            ));
        }
        // A run the store marked interrupted (a crash) may have been closed
        // in the log afterwards; any other status must be the log's.
        if have.status != want.status && have.status != RunStatus::Interrupted {
            differs.push(format!("status {:?} (log: {:?})", have.status, want.status));
        }
        if !differs.is_empty() {
            damage(
                Some(&want.run_id),
                format!(
                    "the run index disagrees with the log: {}",
                    differs.join(", ")
                ),
            );
        }
    }
    let mut extra: Vec<&str> = by_id.into_keys().collect();
    extra.sort_unstable();
    for run in extra {
        damage(
            Some(run),
            "the run index holds a run the log does not start".into(),
        );
    }
}

/// Loads a delta checkpoint's bases and composes the conversation, as a
/// restore would (without storing anything).
async fn compose_chain(
    store: &Store,
    tenant: &str,
    thread: &str,
    first: Decoded<'_>,
) -> std::result::Result<(), String> {
    let mut chain = vec![first];
    while let Some(base) = chain[chain.len() - 1].base.clone() {
        if chain.len() > checkpoint::MAX_CHAIN {
            return Err("the checkpoint's chain of bases does not end".into());
        }
        let blob = match store.load_checkpoint(tenant, thread, &base.run_id).await {
            Ok(Some(b)) => b,
            Ok(None) => {
                return Err(format!(
                    "the checkpoint's base (run {:?}) has no checkpoint",
                    base.run_id
                ));
            }
            Err(e) => return Err(format!("the checkpoint's base is unreadable: {e}")),
        };
        let decoded = checkpoint::decode(&blob)
            .map(Decoded::into_owned)
            .map_err(|e| format!("its base checkpoint (run {:?}): {e}", base.run_id))?;
        if decoded.last_seq != base.last_seq {
            return Err(format!(
                "the checkpoint's base (run {:?}) covers event {}, the checkpoint expects {}",
                base.run_id, decoded.last_seq, base.last_seq
            ));
        }
        chain.push(decoded);
    }
    checkpoint::compose(&chain)
        .map(drop)
        .map_err(|e| format!("the checkpoint's chain does not compose: {e}"))
}

/// True when an error means the store holds damaged data.
pub fn is_damage(err: &StoreError) -> bool {
    err.kind() == ErrorKind::Corrupt
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::event;
    use crate::{AppendRequest, Store};
    use serde_json::json;

    async fn filled() -> Store {
        let store = Store::memory();
        for (run, parent) in [("r1", None), ("r2", Some("r1"))] {
            let mut started = json!({"type":"RUN_STARTED","threadId":"th","runId":run});
            if let Some(p) = parent {
                started["parentRunId"] = json!(p);
            }
            let events = vec![
                event(started),
                event(
                    json!({"type":"TEXT_MESSAGE_START","messageId":format!("m{run}"),"role":"assistant"}),
                ),
                event(
                    json!({"type":"TEXT_MESSAGE_CONTENT","messageId":format!("m{run}"),"delta":"hi"}),
                ),
                event(json!({"type":"TEXT_MESSAGE_END","messageId":format!("m{run}")})),
                event(json!({"type":"RUN_FINISHED","threadId":"th","runId":run})),
            ];
            store
                .append("t", "th", AppendRequest::new(events))
                .await
                .unwrap();
        }
        store
    }

    #[tokio::test]
    async fn an_intact_store_is_clean() {
        let store = filled().await;
        let report = check_store(&store, |_| {}).await.unwrap();
        assert!(report.is_clean(), "{:?}", report.damage);
        assert_eq!(
            (report.tenants, report.threads, report.events, report.runs),
            (1, 1, 10, 2)
        );
        assert_eq!(report.checkpoints, 2);
    }

    #[tokio::test]
    async fn a_damaged_checkpoint_is_reported() {
        let store = filled().await;
        let mut blob = store
            .load_checkpoint("t", "th", "r1")
            .await
            .unwrap()
            .unwrap();
        let last = blob.len() - 1;
        blob[last] ^= 0x55;
        store.save_checkpoint("t", "th", "r1", blob).await.unwrap();
        let report = check_store(&store, |_| {}).await.unwrap();
        assert!(!report.is_clean());
        let text: Vec<String> = report.damage.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|t| t.contains("run \"r1\"") && t.contains("corrupt: checkpoint damaged")),
            "{text:?}"
        );
    }

    #[test]
    fn a_run_index_that_disagrees_with_the_log_is_reported() {
        let events: Vec<StoredEvent> = [
            json!({"type":"RUN_STARTED","threadId":"th","runId":"a"}),
            json!({"type":"RUN_FINISHED","threadId":"th","runId":"a"}),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, v)| StoredEvent {
            seq: i as u64 + 1,
            received_at: Timestamp(0),
            event: event(v),
        })
        .collect();
        let bytes = events.iter().map(|e| e.event.len_bytes() as u64).sum();
        let good = RunRecord {
            thread_id: "th".into(),
            run_id: "a".into(),
            parent_run_id: None,
            agent: None,
            status: RunStatus::Finished,
            started_at: Timestamp(0),
            finished_at: Some(Timestamp(0)),
            first_seq: 1,
            last_seq: 2,
            event_count: 2,
            bytes,
            thread_instance: 0,
        };
        let mut found = Vec::new();
        check_index("acme", &events, std::slice::from_ref(&good), &mut |_, w| {
            found.push(w)
        });
        assert!(found.is_empty(), "{found:?}");
        // Interrupted by a crash, closed in the log afterwards: consistent.
        let crashed = RunRecord {
            status: RunStatus::Interrupted,
            ..good.clone()
        };
        check_index("acme", &events, &[crashed], &mut |_, w| found.push(w));
        assert!(found.is_empty(), "{found:?}");
        let wrong = RunRecord {
            last_seq: 1,
            status: RunStatus::Running,
            ..good.clone()
        };
        check_index("acme", &events, &[wrong], &mut |_, w| found.push(w));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("last event 1 (log: 2)"), "{found:?}");
        assert!(
            found[0].contains("status Running (log: Finished)"),
            "{found:?}"
        );
        found.clear();
        let extra = RunRecord {
            run_id: "ghost".into(),
            ..good.clone()
        };
        check_index("acme", &events, &[good, extra], &mut |_, w| found.push(w));
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
