//! The store benchmark, for any backend (run by `agui store bench` and the
//! SQLite crate's bench target).
//!
//! On one store, in one run:
//! 1. append throughput with 1 writer, then with 8 concurrent writers (one
//!    thread each), in batches of realistic runs (`RunEnd` durability);
//! 2. read-back throughput (streamed read of the 1-writer thread);
//! 3. restore latency (p50/p99) of the latest run of one thread of
//!    `restore_runs` runs of `restore_run_len` events: repeated (the engine
//!    answers from the text it kept), then cold (its caches cleared before
//!    each restore, so the checkpoint chain is read, checked and composed);
//! 4. stored bytes against raw JSON bytes;
//! 5. append latency (p50/p99) of one event per append, one writer waiting
//!    for each, over `latency_runs` runs of `latency_run_len` events: every
//!    append but the last of a run, then the run's last (`RUN_FINISHED`,
//!    where `RunEnd` durability flushes). This is the store's share of the
//!    latency a gateway adds to each event it stores before sending.
//!
//! Events are generated before each timed phase; timings are wall clock.

use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::Store;
use crate::error::{Result, StoreError};
use crate::sample::realistic_run;
use crate::types::{AppendRequest, Durability};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Events appended in the 1-writer phase (and in total by the 8 writers).
    pub append_events: usize,
    /// Events per append.
    pub batch: usize,
    /// Events per run in the append phases.
    pub run_len: usize,
    /// Runs in the restore thread.
    pub restore_runs: usize,
    /// Events per run in the restore thread.
    pub restore_run_len: usize,
    /// Restores measured.
    pub restore_samples: usize,
    /// Runs appended one event at a time in the latency phase.
    pub latency_runs: usize,
    /// Events per run in the latency phase.
    pub latency_run_len: usize,
    /// Tenant used (threads are named `bench-*`).
    pub tenant: String,
}

impl Default for BenchOptions {
    fn default() -> BenchOptions {
        BenchOptions {
            append_events: 200_000,
            batch: 100,
            run_len: 1000,
            restore_runs: 1000,
            restore_run_len: 1000,
            restore_samples: 200,
            latency_runs: 200,
            latency_run_len: 20,
            tenant: "bench".into(),
        }
    }
}

/// What was measured.
#[derive(Debug, Clone, Default)]
pub struct BenchReport {
    /// Events appended per second, 1 writer.
    pub append_1: f64,
    /// Events appended per second in total, 8 writers.
    pub append_8: f64,
    /// Events read back per second (streamed, one reader).
    pub read: f64,
    /// Events appended per second while building the restore thread (one
    /// writer; includes building a checkpoint at every run end).
    pub append_long_thread: f64,
    /// Events in the restore thread.
    pub restore_thread_events: u64,
    /// Restore latency of the latest run, median.
    pub restore_p50: Duration,
    /// Restore latency of the latest run, 99th percentile.
    pub restore_p99: Duration,
    /// Cold restore latency of the latest run (the engine's caches cleared
    /// before each), median.
    pub restore_cold_p50: Duration,
    /// Cold restore latency, 99th percentile.
    pub restore_cold_p99: Duration,
    /// Size of the restored conversation's JSON.
    pub restore_json_bytes: usize,
    /// Raw JSON bytes of everything stored.
    pub raw_bytes: u64,
    /// Bytes the backend reports using.
    pub stored_bytes: u64,
    /// Latency of a one-event append inside a run, median.
    pub append_latency_p50: Duration,
    /// Latency of a one-event append inside a run, 99th percentile.
    pub append_latency_p99: Duration,
    /// Latency of a run's last append (`RUN_FINISHED`, flushed), median.
    pub run_end_latency_p50: Duration,
    /// Latency of a run's last append, 99th percentile.
    pub run_end_latency_p99: Duration,
}

fn batches(
    thread: &str,
    prefix: &str,
    total: usize,
    opts: &BenchOptions,
) -> Vec<Vec<agui_protocol::Event>> {
    let mut out = Vec::new();
    let mut made = 0usize;
    let mut k = 0usize;
    while made < total {
        let len = opts.run_len.min(total - made).max(3);
        let run = realistic_run(thread, &format!("{prefix}-run-{k}"), None, len);
        made += run.len();
        k += 1;
        let mut events = run.into_iter().peekable();
        while events.peek().is_some() {
            out.push(events.by_ref().take(opts.batch.max(1)).collect());
        }
    }
    out
}

async fn append_all(
    store: &Store,
    tenant: &str,
    thread: &str,
    batches: Vec<Vec<agui_protocol::Event>>,
) -> Result<u64> {
    let mut n = 0;
    for events in batches {
        n += events.len() as u64;
        store
            .append(
                tenant,
                thread,
                AppendRequest::new(events).durability(Durability::RunEnd),
            )
            .await?;
    }
    Ok(n)
}

fn rate(events: u64, took: Duration) -> f64 {
    events as f64 / took.as_secs_f64().max(1e-9)
}

/// Runs the benchmark on `store` (which should be empty). `log` receives a
/// line per finished phase.
pub async fn run(
    store: Store,
    opts: &BenchOptions,
    mut log: impl FnMut(&str),
) -> Result<BenchReport> {
    let mut report = BenchReport::default();
    let tenant = opts.tenant.as_str();

    // 1 writer.
    let work = batches("bench-w1", "w1", opts.append_events, opts);
    let t = Instant::now();
    let n = append_all(&store, tenant, "bench-w1", work).await?;
    store.flush().await?;
    report.append_1 = rate(n, t.elapsed());
    log(&format!(
        "append, 1 writer: {:.0} events/s ({n} events)",
        report.append_1
    ));

    // 8 writers, one thread each.
    let per = opts.append_events / 8;
    let works: Vec<_> = (0..8)
        .map(|i| batches(&format!("bench-w8-{i}"), &format!("w8-{i}"), per, opts))
        .collect();
    let t = Instant::now();
    let mut tasks = Vec::new();
    for (i, work) in works.into_iter().enumerate() {
        let store = store.clone();
        let tenant = tenant.to_owned();
        tasks.push(tokio::spawn(async move {
            append_all(&store, &tenant, &format!("bench-w8-{i}"), work).await
        }));
    }
    let mut n = 0;
    for task in tasks {
        n += task
            .await
            .map_err(|_| StoreError::internal("a benchmark writer failed"))??;
    }
    store.flush().await?;
    report.append_8 = rate(n, t.elapsed());
    log(&format!(
        "append, 8 writers: {:.0} events/s ({n} events)",
        report.append_8
    ));

    // Read back.
    let t = Instant::now();
    let mut n = 0u64;
    let mut stream = store.read_stream(tenant, "bench-w1", 1);
    while let Some(e) = stream.next().await {
        e?;
        n += 1;
    }
    drop(stream);
    report.read = rate(n, t.elapsed());
    log(&format!(
        "read back: {:.0} events/s ({n} events)",
        report.read
    ));

    // The long thread, then restores of its latest run.
    let thread = "bench-restore";
    let t = Instant::now();
    let mut n = 0u64;
    let mut last_run = String::new();
    for k in 0..opts.restore_runs {
        last_run = format!("long-run-{k}");
        let run = realistic_run(thread, &last_run, None, opts.restore_run_len);
        let mut events = run.into_iter().peekable();
        while events.peek().is_some() {
            let batch: Vec<_> = events.by_ref().take(opts.batch.max(1)).collect();
            n += batch.len() as u64;
            store
                .append(
                    tenant,
                    thread,
                    AppendRequest::new(batch).durability(Durability::RunEnd),
                )
                .await?;
        }
    }
    store.flush().await?;
    report.append_long_thread = rate(n, t.elapsed());
    report.restore_thread_events = n;
    log(&format!(
        "long thread: {} runs, {n} events, appended at {:.0} events/s",
        opts.restore_runs, report.append_long_thread
    ));
    let samples = opts.restore_samples.max(1);
    (
        report.restore_p50,
        report.restore_p99,
        report.restore_json_bytes,
    ) = restore_latency(&store, tenant, thread, &last_run, samples, false).await?;
    (report.restore_cold_p50, report.restore_cold_p99, _) =
        restore_latency(&store, tenant, thread, &last_run, samples, true).await?;
    log(&format!(
        "restore latest run: p50 {:?}, p99 {:?}; cold: p50 {:?}, p99 {:?} ({} bytes of conversation)",
        report.restore_p50,
        report.restore_p99,
        report.restore_cold_p50,
        report.restore_cold_p99,
        report.restore_json_bytes
    ));

    let stats = store.stats().await?;
    report.raw_bytes = stats.raw_bytes;
    report.stored_bytes = stats.stored_bytes;
    log(&format!(
        "size: {} raw JSON bytes, {} stored bytes ({:.2} stored bytes per raw byte)",
        stats.raw_bytes,
        stats.stored_bytes,
        stats.stored_per_raw_byte()
    ));

    // One event per append, each awaited.
    let (mut inside, mut ends) = (Vec::new(), Vec::new());
    for k in 0..opts.latency_runs {
        let run = realistic_run(
            "bench-latency",
            &format!("lat-{k}"),
            None,
            opts.latency_run_len,
        );
        let last = run.len() - 1;
        for (i, e) in run.into_iter().enumerate() {
            let req = AppendRequest::new(vec![e]).durability(Durability::RunEnd);
            let t = Instant::now();
            store.append(tenant, "bench-latency", req).await?;
            if i == last { &mut ends } else { &mut inside }.push(t.elapsed());
        }
    }
    store.flush().await?;
    (report.append_latency_p50, report.append_latency_p99) = quantiles(&mut inside);
    (report.run_end_latency_p50, report.run_end_latency_p99) = quantiles(&mut ends);
    log(&format!(
        "append latency, 1 event per append: p50 {:?}, p99 {:?} ({} appends); a run's last (flushed): p50 {:?}, p99 {:?} ({} runs)",
        report.append_latency_p50,
        report.append_latency_p99,
        inside.len(),
        report.run_end_latency_p50,
        report.run_end_latency_p99,
        ends.len()
    ));
    Ok(report)
}

/// The median and 99th percentile of `took` (zero when empty).
fn quantiles(took: &mut [Duration]) -> (Duration, Duration) {
    if took.is_empty() {
        return (Duration::ZERO, Duration::ZERO);
    }
    took.sort();
    let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

/// The median and 99th percentile of `samples` restores of `run`, each
/// after clearing the engine's caches when `cold`, and the conversation's
/// size.
async fn restore_latency(
    store: &Store,
    tenant: &str,
    thread: &str,
    run: &str,
    samples: usize,
    cold: bool,
) -> Result<(Duration, Duration, usize)> {
    let mut took = Vec::with_capacity(samples);
    let mut bytes = 0;
    for _ in 0..samples {
        if cold {
            store.clear_cache();
        }
        let t = Instant::now();
        let r = store.restore(tenant, thread, run).await?;
        took.push(t.elapsed());
        if !r.from_checkpoint {
            return Err(StoreError::internal(
                "the latest run was not restored from its checkpoint",
            ));
        }
        bytes = r.json.len();
    }
    let (p50, p99) = quantiles(&mut took);
    Ok((p50, p99, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_small_run_measures_every_phase() {
        let store = Store::memory();
        let opts = BenchOptions {
            append_events: 800,
            batch: 50,
            run_len: 200,
            restore_runs: 5,
            restore_run_len: 100,
            restore_samples: 10,
            latency_runs: 3,
            latency_run_len: 10,
            tenant: "b".into(),
        };
        let mut lines = Vec::new();
        let r = run(store.clone(), &opts, |l| lines.push(l.to_owned()))
            .await
            .unwrap();
        assert_eq!(lines.len(), 7);
        assert_eq!(r.restore_thread_events, 500);
        assert!(r.append_1 > 0.0 && r.append_8 > 0.0 && r.read > 0.0);
        assert!(r.restore_p50 <= r.restore_p99);
        assert!(r.restore_cold_p50 <= r.restore_cold_p99);
        assert!(r.append_latency_p50 > Duration::ZERO);
        assert!(r.append_latency_p50 <= r.append_latency_p99);
        assert!(r.run_end_latency_p50 > Duration::ZERO);
        assert!(r.run_end_latency_p50 <= r.run_end_latency_p99);
        let stats = store.stats().await.unwrap();
        // The size is measured before the latency phase's three runs.
        assert!(r.raw_bytes < stats.raw_bytes);
        assert_eq!(stats.events, 800 + 800 + 500 + 3 * 10);
    }
}
