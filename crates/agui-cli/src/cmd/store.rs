//! `agui store`: import, export, migrate, inspect and benchmark event stores.
//!
//! This module is where store URLs become backends ([`open_store`]):
//! `memory://`, `sqlite:///PATH`, `file:///DIR` and `postgres://...`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use agui_codec::{Format, Reader, Writer};
use agui_history::compact::Mode;
use agui_protocol::{Event, EventType};
use agui_store::bench::{BenchOptions, BenchReport};
use agui_store::migrate::{all_threads, copy_thread, digest};
use agui_store::{AppendRequest, Durability, EventStore, ThreadFilter};
use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::json;

/// The tenant used when none is given.
pub const DEFAULT_TENANT: &str = "default";

/// Arguments of `agui store`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Import an event stream (JSON, NDJSON or SSE) into a store: runs and
    /// lineage are indexed and checkpoints built
    Import(ImportArgs),
    /// Export a thread (or one branch of it), optionally compacted
    Export(ExportArgs),
    /// Copy every thread of one store into another (resumable, verified)
    Migrate(MigrateArgs),
    /// Totals: threads, runs, events, raw and stored bytes
    Stats(StoreArg),
    /// List threads, most recently active first (one JSON object per line)
    Ls(LsArgs),
    /// Delete a thread and everything of it
    Rm(RmArgs),
    /// Benchmark stores: append, read back, restore, size
    Bench(BenchArgs),
}

#[derive(clap::Args)]
struct StoreArg {
    /// Store URL: sqlite:///PATH, file:///DIR, postgres://..., memory://
    #[arg(long)]
    store: String,
}

#[derive(clap::Args)]
struct ImportArgs {
    /// Input file (`-` or nothing for standard input)
    input: Option<PathBuf>,
    /// Store URL
    #[arg(long)]
    store: String,
    /// Thread to import into (default: each run's `threadId`)
    #[arg(long)]
    thread: Option<String>,
    /// Tenant
    #[arg(long, default_value = DEFAULT_TENANT)]
    tenant: String,
    /// Agent name recorded on the thread and its runs
    #[arg(long)]
    agent: Option<String>,
    /// Flush to stable storage after every batch instead of at run ends
    #[arg(long)]
    sync_every_batch: bool,
}

#[derive(clap::Args)]
struct ExportArgs {
    /// Store URL
    #[arg(long)]
    store: String,
    /// Thread to export
    #[arg(long)]
    thread: String,
    /// Tenant
    #[arg(long, default_value = DEFAULT_TENANT)]
    tenant: String,
    /// Export only the branch ending at this run (root to run)
    #[arg(long, value_name = "RUN_ID")]
    branch: Option<String>,
    /// Compact the events: deltas, snapshot or latest
    #[arg(long, value_parser = parse_mode)]
    compact: Option<Mode>,
    /// Output format
    #[arg(long, value_parser = parse_format, default_value = "ndjson")]
    to: Format,
}

#[derive(clap::Args)]
struct MigrateArgs {
    /// Source store URL
    #[arg(long)]
    from: String,
    /// Destination store URL
    #[arg(long)]
    to: String,
}

#[derive(clap::Args)]
struct LsArgs {
    /// Store URL
    #[arg(long)]
    store: String,
    /// Only this tenant (default: every tenant)
    #[arg(long)]
    tenant: Option<String>,
    /// Only threads of this agent
    #[arg(long)]
    agent: Option<String>,
    /// At most this many threads per tenant
    #[arg(long, default_value_t = 100)]
    limit: usize,
}

#[derive(clap::Args)]
struct RmArgs {
    /// Store URL
    #[arg(long)]
    store: String,
    /// Thread to delete
    #[arg(long)]
    thread: String,
    /// Tenant
    #[arg(long, default_value = DEFAULT_TENANT)]
    tenant: String,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Store URL to benchmark (repeatable; each should be empty)
    #[arg(long = "store", required = true)]
    stores: Vec<String>,
    /// Events appended by 1 writer, and in total by 8 writers
    #[arg(long, default_value_t = 200_000)]
    events: usize,
    /// Events per append
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Runs of the restore thread
    #[arg(long, default_value_t = 1000)]
    restore_runs: usize,
    /// Events per run of the restore thread
    #[arg(long, default_value_t = 1000)]
    restore_run_len: usize,
    /// Restores measured
    #[arg(long, default_value_t = 200)]
    samples: usize,
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse()
        .map_err(|e: agui_history::compact::UnknownMode| e.to_string())
}

/// Opens a store by URL: the one place that names backends.
pub async fn open_store(url: &str) -> anyhow::Result<Arc<dyn EventStore>> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or_default();
    match scheme {
        "memory" => Ok(Arc::new(agui_store::MemoryStore::open(url)?)),
        "sqlite" => Ok(Arc::new(
            agui_store_sqlite::open(url)
                .await
                .context("cannot open the SQLite store")?,
        )),
        "file" => Ok(Arc::new(
            agui_store_file::open(url)
                .await
                .context("cannot open the file store")?,
        )),
        "postgres" | "postgresql" => Ok(Arc::new(
            agui_store_postgres::open(url)
                .await
                .context("cannot open the PostgreSQL store")?,
        )),
        _ => bail!(
            "unsupported store URL (expected sqlite:///PATH, file:///DIR, postgres://... or memory://)"
        ),
    }
}

/// Runs `agui store`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        match args.command {
            Command::Import(a) => import(a).await,
            Command::Export(a) => export(a).await,
            Command::Migrate(a) => migrate(a).await,
            Command::Stats(a) => stats(a).await,
            Command::Ls(a) => ls(a).await,
            Command::Rm(a) => rm(a).await,
            Command::Bench(a) => bench(a).await,
        }
    })
}

/// Closes the store whatever `result` is, and keeps the first error.
async fn finish<T>(store: &dyn EventStore, result: anyhow::Result<T>) -> anyhow::Result<T> {
    let closed = store.close().await.context("cannot close the store");
    let value = result?;
    closed?;
    Ok(value)
}

#[derive(Deserialize)]
struct ThreadOf<'a> {
    #[serde(rename = "threadId", borrow, default)]
    thread_id: Option<std::borrow::Cow<'a, str>>,
}

/// Appends what is pending for one thread.
async fn append_batch(
    store: &dyn EventStore,
    tenant: &str,
    thread: &str,
    events: Vec<Event>,
    args: &ImportArgs,
) -> anyhow::Result<()> {
    let mut req = AppendRequest::new(events).durability(if args.sync_every_batch {
        Durability::Append
    } else {
        Durability::RunEnd
    });
    req.agent = args.agent.clone();
    store
        .append(tenant, thread, req)
        .await
        .with_context(|| format!("cannot append to thread {thread:?}"))?;
    Ok(())
}

async fn import(args: ImportArgs) -> anyhow::Result<ExitCode> {
    let input = crate::io::open_input(args.input.as_deref())?;
    let store = open_store(&args.store).await?;
    let result = import_into(&*store, input, &args).await;
    let (events, threads) = finish(&*store, result).await?;
    eprintln!("imported {events} events into {threads} thread(s)");
    Ok(ExitCode::SUCCESS)
}

async fn import_into(
    store: &dyn EventStore,
    input: Box<dyn std::io::BufRead>,
    args: &ImportArgs,
) -> anyhow::Result<(u64, usize)> {
    const BATCH: usize = 1000;
    let mut threads: HashMap<String, u64> = HashMap::new();
    // Events before the first run that names its thread wait for it.
    let mut current: Option<String> = args.thread.clone();
    let mut pending: Vec<Event> = Vec::new();
    let mut total = 0u64;
    for (index, item) in Reader::new(input).enumerate() {
        let event = item.with_context(|| format!("cannot decode the input at event {index}"))?;
        let starts_run = event.event_type() == &EventType::RunStarted;
        if starts_run && args.thread.is_none() {
            let named = event
                .view::<ThreadOf>()
                .ok()
                .and_then(|v| v.thread_id.map(|t| t.into_owned()));
            let Some(named) = named else {
                bail!("event {index}: RUN_STARTED has no threadId; give --thread");
            };
            if current.as_deref() != Some(named.as_str()) {
                if let Some(thread) = current.take() {
                    let batch = std::mem::take(&mut pending);
                    total += batch.len() as u64;
                    *threads.entry(thread.clone()).or_default() += batch.len() as u64;
                    append_batch(store, &args.tenant, &thread, batch, args).await?;
                }
                current = Some(named);
            }
        }
        let cut = pending.len() >= BATCH || (starts_run && !pending.is_empty());
        if let Some(thread) = current.as_deref().filter(|_| cut) {
            let batch = std::mem::take(&mut pending);
            total += batch.len() as u64;
            *threads.entry(thread.to_owned()).or_default() += batch.len() as u64;
            append_batch(store, &args.tenant, thread, batch, args).await?;
        }
        pending.push(event);
    }
    if !pending.is_empty() {
        let Some(thread) = current else {
            bail!("no RUN_STARTED names a threadId; give --thread");
        };
        total += pending.len() as u64;
        *threads.entry(thread.clone()).or_default() += pending.len() as u64;
        append_batch(store, &args.tenant, &thread, pending, args).await?;
    }
    store.flush().await.context("cannot flush the store")?;
    Ok((total, threads.len()))
}

async fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let store = open_store(&args.store).await?;
    let result = export_from(&*store, &args).await;
    finish(&*store, result).await?;
    Ok(ExitCode::SUCCESS)
}

async fn export_from(store: &dyn EventStore, args: &ExportArgs) -> anyhow::Result<()> {
    let stored = match &args.branch {
        Some(run) => store
            .read_branch(&args.tenant, &args.thread, run)
            .await
            .with_context(|| format!("cannot read branch {run:?} of thread {:?}", args.thread))?,
        None => store
            .read_range(&args.tenant, &args.thread, 1, u64::MAX)
            .await
            .with_context(|| format!("cannot read thread {:?}", args.thread))?,
    };
    let mut writer = Writer::new(crate::io::stdout(), args.to);
    match args.compact {
        None => {
            for e in &stored {
                if args.to == Format::Sse {
                    writer.write_event_with_id(&e.event, e.seq)?;
                } else {
                    writer.write_event(&e.event)?;
                }
            }
        }
        Some(mode) => {
            let events = stored.into_iter().map(|e| e.event);
            let compacted = agui_history::compact::compact(
                events,
                mode,
                &agui_store::Conversation::default(),
                args.branch.as_deref(),
            )
            .context("cannot compact the thread")?;
            for e in &compacted {
                writer.write_event(e)?;
            }
        }
    }
    writer.finish().context("cannot write to standard output")?;
    Ok(())
}

async fn migrate(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let src = open_store(&args.from).await.context("source")?;
    let dst = match open_store(&args.to).await.context("destination") {
        Ok(d) => d,
        Err(e) => {
            let _ = src.close().await;
            return Err(e);
        }
    };
    let result = migrate_all(&*src, &*dst).await;
    let closed = src.close().await;
    let result = finish(&*dst, result).await;
    closed.context("cannot close the source store")?;
    let (threads, events, copied) = result?;
    eprintln!(
        "migrated {threads} thread(s), {events} events ({copied} copied now); counts and SHA-256 digests verified"
    );
    Ok(ExitCode::SUCCESS)
}

async fn migrate_all(
    src: &dyn EventStore,
    dst: &dyn EventStore,
) -> anyhow::Result<(usize, u64, u64)> {
    let threads = all_threads(src)
        .await
        .context("cannot list the source's threads")?;
    let total: u64 = threads.iter().map(|t| t.2).sum();
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} events ({per_sec}, eta {eta}) {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut copied = 0u64;
    for (i, (tenant, thread, _)) in threads.iter().enumerate() {
        bar.set_message(format!("thread {}/{}", i + 1, threads.len()));
        // Already-present events count as done.
        let have = dst
            .thread(tenant, thread)
            .await
            .map(|t| t.last_seq)
            .unwrap_or(0);
        bar.inc(have);
        let mut last = 0;
        let n = copy_thread(src, dst, tenant, thread, |c| {
            bar.inc(c - last);
            last = c;
        })
        .await
        .with_context(|| format!("cannot copy thread {thread:?} of tenant {tenant:?}"))?;
        copied += n;
    }
    bar.finish_and_clear();
    // Verify every thread: counts and digests.
    for (tenant, thread, _) in &threads {
        let a = digest(src, tenant, thread)
            .await
            .context("cannot digest the source")?;
        let b = digest(dst, tenant, thread)
            .await
            .context("cannot digest the destination")?;
        if a != b {
            bail!(
                "verification failed for thread {thread:?} of tenant {tenant:?}: source {} events {}, destination {} events {}",
                a.events,
                a.sha256,
                b.events,
                b.sha256
            );
        }
    }
    let (s, d) = (src.stats().await?, dst.stats().await?);
    if (s.threads, s.runs, s.events, s.raw_bytes) != (d.threads, d.runs, d.events, d.raw_bytes) {
        bail!(
            "verification failed: source has {} threads, {} runs, {} events; destination {}, {}, {}",
            s.threads,
            s.runs,
            s.events,
            d.threads,
            d.runs,
            d.events
        );
    }
    Ok((threads.len(), total, copied))
}

async fn stats(args: StoreArg) -> anyhow::Result<ExitCode> {
    let store = open_store(&args.store).await?;
    let result = store.stats().await.context("cannot compute statistics");
    let s = finish(&*store, result).await?;
    let text = format!(
        "tenants\t{}\nthreads\t{}\nruns\t{}\nevents\t{}\nraw_bytes\t{}\nstored_bytes\t{}\ncompression_ratio\t{:.2}\n",
        s.tenants,
        s.threads,
        s.runs,
        s.events,
        s.raw_bytes,
        s.stored_bytes,
        s.compression_ratio()
    );
    crate::io::write_all_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

async fn ls(args: LsArgs) -> anyhow::Result<ExitCode> {
    let store = open_store(&args.store).await?;
    let result = ls_lines(&*store, &args).await;
    let text = finish(&*store, result).await?;
    crate::io::write_all_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

async fn ls_lines(store: &dyn EventStore, args: &LsArgs) -> anyhow::Result<String> {
    let tenants = match &args.tenant {
        Some(t) => vec![t.clone()],
        None => store.tenants().await.context("cannot list tenants")?,
    };
    let mut out = String::new();
    for tenant in tenants {
        let page = store
            .list_threads(
                &tenant,
                &ThreadFilter {
                    agent: args.agent.clone(),
                    limit: args.limit,
                    cursor: None,
                },
            )
            .await
            .context("cannot list threads")?;
        for t in page.threads {
            // JSON keeps hostile ids (control characters, RTL marks) inert.
            let line = json!({
                "tenant": tenant,
                "thread": t.thread_id,
                "agent": t.agent,
                "events": t.last_seq,
                "runs": t.run_count,
                "bytes": t.bytes,
                "createdAt": micros_to_rfc3339(t.created_at.0),
                "updatedAt": micros_to_rfc3339(t.updated_at.0),
            });
            out.push_str(&line.to_string());
            out.push('\n');
        }
    }
    Ok(out)
}

fn micros_to_rfc3339(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_default()
}

async fn rm(args: RmArgs) -> anyhow::Result<ExitCode> {
    let store = open_store(&args.store).await?;
    let result = store
        .delete_thread(&args.tenant, &args.thread)
        .await
        .with_context(|| format!("cannot delete thread {:?}", args.thread));
    finish(&*store, result).await?;
    eprintln!("deleted thread {:?}", args.thread);
    Ok(ExitCode::SUCCESS)
}

async fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let opts = BenchOptions {
        append_events: args.events,
        batch: args.batch,
        restore_runs: args.restore_runs,
        restore_run_len: args.restore_run_len,
        restore_samples: args.samples,
        ..BenchOptions::default()
    };
    let mut reports: Vec<(String, BenchReport)> = Vec::new();
    for url in &args.stores {
        let store = open_store(url).await?;
        let name = url
            .split_once("://")
            .map(|(s, _)| s)
            .unwrap_or(url)
            .to_owned();
        let result =
            agui_store::bench::run(store.clone(), &opts, |line| eprintln!("{name}: {line}"))
                .await
                .with_context(|| format!("the benchmark failed on {name}"));
        reports.push((name, finish(&*store, result).await?));
    }
    let mut text = String::from(
        "backend\tappend_1w_ev_s\tappend_8w_ev_s\tread_ev_s\tlong_thread_append_ev_s\trestore_p50_ms\trestore_p99_ms\tconversation_bytes\traw_bytes\tstored_bytes\tratio\n",
    );
    for (name, r) in reports {
        text.push_str(&format!(
            "{name}\t{:.0}\t{:.0}\t{:.0}\t{:.0}\t{:.3}\t{:.3}\t{}\t{}\t{}\t{:.2}\n",
            r.append_1,
            r.append_8,
            r.read,
            r.append_long_thread,
            r.restore_p50.as_secs_f64() * 1e3,
            r.restore_p99.as_secs_f64() * 1e3,
            r.restore_json_bytes,
            r.raw_bytes,
            r.stored_bytes,
            r.raw_bytes as f64 / r.stored_bytes.max(1) as f64
        ));
    }
    crate::io::write_all_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
