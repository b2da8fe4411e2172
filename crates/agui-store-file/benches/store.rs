//! The file store's benchmark, in one run: `cargo bench -p agui-store-file`.
//! Events come from `agui_testkit::r#gen::realistic`. `AGUI_BENCH_SMALL=1`
//! runs a reduced size (for a quick look); `AGUI_BENCH_LONG=N` sets the
//! long thread's event count.
//!
//! 1. append throughput, 1 writer, then 8 concurrent writers, batches of 100
//!    events, each run of a writer's stream in its own thread (a gateway's
//!    many conversations), `RunEnd` durability; then the same two with
//!    `Append` durability (an fsync per append, shared by concurrent
//!    writers);
//! 2. read-back throughput (streamed read of the long thread);
//! 3. a long thread (1M events by default), then restore latency p50/p99 of
//!    its latest run through its checkpoint, warm and after a reopen;
//! 4. stored bytes against raw JSON bytes, before and after sealing the
//!    active segment.

use std::time::{Duration, Instant};

use agui_protocol::{Event, EventType};
use agui_store::{AppendRequest, Durability, Store};
use agui_store_file::{FileOptions, FileStore};
use futures::StreamExt;

const TENANT: &str = "bench";
const BATCH: usize = 100;

fn rate(n: u64, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64().max(1e-9)
}

async fn append_all(
    store: &Store,
    thread: &str,
    events: Vec<Event>,
    durability: Durability,
) -> u64 {
    let mut n = 0;
    let mut it = events.into_iter().peekable();
    while it.peek().is_some() {
        let batch: Vec<Event> = it.by_ref().take(BATCH).collect();
        n += batch.len() as u64;
        store
            .append(
                TENANT,
                thread,
                AppendRequest::new(batch).durability(durability),
            )
            .await
            .expect("append");
    }
    n
}

/// Splits a stream into its runs (each starting at a `RUN_STARTED`).
fn runs_of(events: Vec<Event>) -> Vec<Vec<Event>> {
    let mut out: Vec<Vec<Event>> = Vec::new();
    for e in events {
        if *e.event_type() == EventType::RunStarted || out.is_empty() {
            out.push(Vec::new());
        }
        if let Some(last) = out.last_mut() {
            last.push(e);
        }
    }
    out
}

/// `k` concurrent writers; each appends its realistic stream one run per
/// thread (a gateway's many conversations), in batches of `BATCH`.
async fn writers(store: &Store, name: &str, per: usize, k: usize, d: Durability) -> f64 {
    let work: Vec<Vec<Vec<Event>>> = (0..k)
        .map(|i| runs_of(agui_testkit::r#gen::realistic(per, 100 + i as u64)))
        .collect();
    let t = Instant::now();
    let mut tasks = Vec::new();
    for (i, runs) in work.into_iter().enumerate() {
        let store = store.clone();
        let name = format!("{name}-{i}");
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            for (r, events) in runs.into_iter().enumerate() {
                n += append_all(&store, &format!("{name}-{r}"), events, d).await;
            }
            n
        }));
    }
    let mut n = 0;
    for task in tasks {
        n += task.await.expect("a writer");
    }
    store.flush().await.expect("flush");
    rate(n, t.elapsed())
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

async fn restores(store: &Store, thread: &str, run: &str, n: usize) -> (Duration, Duration) {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = store.restore(TENANT, thread, run).await.expect("restore");
        samples.push(t.elapsed());
        assert!(
            r.from_checkpoint,
            "the latest run restores from its checkpoint"
        );
    }
    percentiles(samples)
}

fn main() {
    let small = std::env::var_os("AGUI_BENCH_SMALL").is_some();
    let (append_n, mut long_n, samples) = if small {
        (20_000, 50_000, 50)
    } else {
        (200_000, 1_000_000, 200)
    };
    // The long thread's size can be chosen (its run-end checkpoints restate
    // the whole branch, so building it costs quadratic time).
    if let Some(n) = std::env::var("AGUI_BENCH_LONG")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        long_n = n;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let opts = FileOptions::default();
    println!(
        "file store: segments {} MiB, zstd level {}, blocks {} KiB",
        opts.segment_bytes >> 20,
        opts.zstd_level,
        opts.block_bytes >> 10
    );
    rt.block_on(async {
        let file = FileStore::open(dir.path(), opts.clone())
            .await
            .expect("open");
        let store = agui_store::Store::new(file.clone());

        // 1. Appends.
        let r = writers(&store, "w1", append_n, 1, Durability::RunEnd).await;
        println!("append, 1 writer, run_end: {r:.0} events/s ({append_n} events, one run per thread)");
        let r = writers(&store, "w8", append_n / 8, 8, Durability::RunEnd).await;
        println!("append, 8 writers, run_end: {r:.0} events/s ({append_n} events, one run per thread)");
        let n_sync = append_n / 10;
        let r = writers(&store, "s1", n_sync, 1, Durability::Append).await;
        println!("append, 1 writer, append (fsync each batch of {BATCH}): {r:.0} events/s ({n_sync} events)");
        let r = writers(&store, "s8", n_sync / 8, 8, Durability::Append).await;
        println!("append, 8 writers, append (grouped fsync): {r:.0} events/s ({n_sync} events)");

        // 3. The long thread, cut after its last run end so its latest run
        // is finished and checkpointed.
        let mut events = agui_testkit::r#gen::realistic(long_n, 7);
        let end = events
            .iter()
            .rposition(|e| e.event_type().is_run_terminal())
            .expect("a finished run");
        events.truncate(end + 1);
        let last_run = events
            .iter()
            .rev()
            .find(|e| *e.event_type() == EventType::RunStarted)
            .and_then(|e| e.view::<serde_json::Value>().ok())
            .and_then(|v| v["runId"].as_str().map(str::to_owned))
            .expect("a run id");
        let t = Instant::now();
        let n = append_all(&store, "long", events, Durability::RunEnd).await;
        store.flush().await.expect("flush");
        let info = store.thread(TENANT, "long").await.expect("thread");
        println!(
            "long thread: {} runs, {n} events, appended at {:.0} events/s (checkpoint at every run end)",
            info.run_count,
            rate(n, t.elapsed())
        );
        // 2. Read back.
        let t = Instant::now();
        let mut n = 0u64;
        let mut stream = store.read_stream(TENANT, "long", 1);
        while let Some(e) = stream.next().await {
            e.expect("read");
            n += 1;
        }
        drop(stream);
        println!("read back (long thread): {:.0} events/s ({n} events)", rate(n, t.elapsed()));

        let (p50, p99) = restores(&store, "long", &last_run, samples).await;
        let json = store.restore(TENANT, "long", &last_run).await.expect("restore").json.len();
        println!("restore latest run (warm): p50 {p50:?}, p99 {p99:?} ({json} bytes of conversation)");

        let s = store.stats().await.expect("stats");
        println!(
            "size at rest: {} raw JSON bytes, {} stored bytes ({:.2} stored bytes per raw byte)",
            s.raw_bytes,
            s.stored_bytes,
            s.stored_per_raw_byte()
        );
        let t = Instant::now();
        file.seal().await.expect("seal");
        let sealed_in = t.elapsed();
        let s = store.stats().await.expect("stats");
        println!(
            "size sealed: {} raw JSON bytes, {} stored bytes ({:.2} stored bytes per raw byte; sealing the active segment took {sealed_in:?})",
            s.raw_bytes,
            s.stored_bytes,
            s.stored_per_raw_byte()
        );
        store.close().await.expect("close");
        drop(store);

        // Reopen: replay time, then cold restores (sealed segments).
        let t = Instant::now();
        let store = agui_store::Store::new(FileStore::open(dir.path(), opts).await.expect("reopen"));
        println!(
            "reopen (replay of {} events): {:?}",
            s.events,
            t.elapsed()
        );
        let (p50, p99) = restores(&store, "long", &last_run, samples).await;
        println!("restore latest run (after reopen, sealed): p50 {p50:?}, p99 {p99:?}");
        store.close().await.expect("close");
    });
}
