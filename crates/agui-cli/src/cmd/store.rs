//! `agui store`: import, export, migrate, inspect and benchmark event stores.
//!
//! This module is where store URLs become backends ([`open_store`]):
//! `memory://`, `sqlite:///PATH`, `file:///DIR` and `postgres://...`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use agui_codec::{DecodeOptions, Format, Writer};
use agui_history::compact::Mode;
use agui_protocol::{Event, EventType};
use agui_store::bench::{BenchOptions, BenchReport};
use agui_store::migrate::{all_threads, copy_thread, digest};
use agui_store::{AppendRequest, Checkpoints, Durability, Store, ThreadFilter};
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
    /// Totals: tenants, threads, runs, events, raw and stored bytes
    Stats(StatsArgs),
    /// List threads, most recently active first
    Ls(LsArgs),
    /// Delete a thread and everything of it
    Rm(RmArgs),
    /// Verify a whole store: every checksum, chunk, checkpoint and run index
    /// entry (read-only). Exits 1 when it finds damage
    Check(CheckArgs),
    /// Benchmark stores: append, read back, restore, size
    Bench(BenchArgs),
}

#[derive(clap::Args)]
struct StatsArgs {
    /// Store URL: sqlite:///PATH, file:///DIR, postgres://..., memory://
    #[arg(long)]
    store: String,
    /// One JSON object (the names the text uses, camelCase) instead of
    /// `name<TAB>value` lines
    #[arg(long)]
    json: bool,
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
    /// Build no checkpoints while importing (memory bounded by a batch
    /// whatever a thread's size); the first restore of a run builds them
    #[arg(long)]
    defer_checkpoints: bool,
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
    /// One JSON object per thread (NDJSON), with the names of the HTTP API
    /// (`threadId`, `eventCount`, `runCount`, RFC 3339 times), instead of a
    /// table
    #[arg(long)]
    json: bool,
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
struct CheckArgs {
    /// Store URL: sqlite:///PATH, file:///DIR, postgres://...
    #[arg(long)]
    store: String,
    /// Also list what is not damage (missing or stale checkpoints, which
    /// the next restore rebuilds)
    #[arg(long)]
    verbose: bool,
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

/// How a command opens its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    /// Create the store when missing; take the backend's process lock.
    #[default]
    ReadWrite,
    /// Like `ReadWrite`, and cut a file store's log at a damaged record
    /// instead of refusing to open (`--repair`).
    Repair,
    /// Open an existing store without creating or changing anything, beside
    /// a running gateway if need be; a missing store is [`NoStore`].
    ReadOnly,
}

/// A read-only command was given a URL where no store exists (nothing was
/// created there).
#[derive(Debug)]
pub struct NoStore {
    /// The URL, its password hidden.
    pub url: String,
    /// What the backend found there instead (its public message, e.g. `no
    /// agui store in schema "agui"`), when it says more than the URL does.
    pub detail: Option<String>,
}

impl std::fmt::Display for NoStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no store at {}", self.url)?;
        if let Some(detail) = &self.detail {
            write!(f, " ({detail})")?;
        }
        Ok(())
    }
}

impl std::error::Error for NoStore {}

/// The URL as it may be shown: a password in it is replaced by `***`.
pub fn shown_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Opens a store by URL, creating it when missing: the one place that
/// names backends.
pub async fn open_store(url: &str) -> anyhow::Result<Store> {
    open_store_with(url, Access::ReadWrite).await
}

/// Opens an existing store read-only (see [`Access::ReadOnly`]).
pub async fn open_store_read_only(url: &str) -> anyhow::Result<Store> {
    open_store_with(url, Access::ReadOnly).await
}

/// Opens a store by URL with the given access.
pub async fn open_store_with(url: &str, access: Access) -> anyhow::Result<Store> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or_default();
    let ro = access == Access::ReadOnly;
    let missing = |e: &agui_store::StoreError| ro && e.kind() == agui_store::ErrorKind::NotFound;
    let store: agui_store::Result<Store> = match scheme {
        // A memory store is empty on every run: there is nothing to read.
        "memory" if ro => {
            return Err(NoStore {
                url: shown_url(url),
                detail: None,
            }
            .into());
        }
        "memory" => Ok(Store::new(agui_store::MemoryStore::open(url)?)),
        "sqlite" if ro => agui_store_sqlite::open_read_only(url).await.map(Store::new),
        "sqlite" => agui_store_sqlite::open(url).await.map(Store::new),
        "file" if ro => agui_store_file::open_read_only(url).await.map(Store::new),
        "file" => {
            let url = if access == Access::Repair {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}repair=true")
            } else {
                url.to_owned()
            };
            agui_store_file::open(&url).await.map(Store::new)
        }
        "postgres" | "postgresql" if ro => agui_store_postgres::open_existing(url)
            .await
            .map(Store::new),
        "postgres" | "postgresql" => agui_store_postgres::open(url).await.map(Store::new),
        _ => bail!(
            "unsupported store URL {} (expected sqlite:///PATH, file:///DIR, postgres://... or memory://)",
            shown_url(url)
        ),
    };
    match store {
        Ok(s) => Ok(s),
        // Said once: the SQLite and file backends' wording ("no SQLite
        // database at this path", "no file store in this directory")
        // repeats what "no store at URL" says; PostgreSQL's names the
        // schema, which the URL may leave to the default.
        Err(e) if missing(&e) => Err(NoStore {
            url: shown_url(url),
            detail: Some(e.message().to_owned()).filter(|_| scheme.starts_with("postgres")),
        }
        .into()),
        Err(e) => {
            let backend = match scheme {
                "sqlite" => "SQLite store",
                "file" => "file store",
                "postgres" | "postgresql" => "PostgreSQL store",
                _ => "store",
            };
            Err(anyhow::Error::new(e)
                .context(format!("cannot open the {backend} {}", shown_url(url))))
        }
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
            Command::Check(a) => check(a).await,
            Command::Bench(a) => bench(a).await,
        }
    })
}

/// Closes the store whatever `result` is, and keeps the first error.
async fn finish<T>(store: &Store, result: anyhow::Result<T>) -> anyhow::Result<T> {
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
    store: &Store,
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
    if args.defer_checkpoints {
        req.checkpoints = Checkpoints::Defer;
    }
    store
        .append(tenant, thread, req)
        .await
        .with_context(|| format!("cannot append to thread {thread:?}"))?;
    Ok(())
}

async fn import(args: ImportArgs) -> anyhow::Result<ExitCode> {
    // Appending to the store outweighs decoding: one decoding thread.
    // A file is read through once before the store is opened: input that
    // cannot be decoded writes nothing (standard input, read once, is
    // checked as it is imported).
    if let Some(path) = args.input.as_deref().filter(|p| p.as_os_str() != "-") {
        precheck(path, &args)?;
    }
    let input =
        crate::io::read_events_on_one_thread(args.input.as_deref(), DecodeOptions::default())?;
    let store = open_store(&args.store).await?;
    let size = args
        .input
        .as_deref()
        .filter(|p| p.as_os_str() != "-")
        .and_then(|p| std::fs::metadata(p).ok())
        .map(|m| m.len());
    let bar = crate::progress::bar(size, crate::progress::Unit::Bytes, "import");
    let mut written = Written::default();
    let result = import_into(&store, input, &args, &bar, &mut written).await;
    bar.finish_and_clear();
    let result = result.map_err(|e| {
        if written.events == 0 {
            return e;
        }
        // What an import that failed midway left behind is said, never
        // silent: those events stay (a retry of the same file would find
        // their run ids used).
        let mut names: Vec<&String> = written.threads.keys().collect();
        names.sort();
        e.context(format!(
            "{} events were imported into thread(s) {names:?} before this; they stay in the store",
            written.events
        ))
    });
    finish(&store, result).await?;
    eprintln!(
        "imported {} events into {} thread(s)",
        written.events,
        written.threads.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// What an import has appended so far.
#[derive(Default)]
struct Written {
    events: u64,
    threads: HashMap<String, u64>,
}

impl Written {
    fn add(&mut self, thread: &str, n: usize) {
        self.events += n as u64;
        *self.threads.entry(thread.to_owned()).or_default() += n as u64;
    }
}

/// Decodes every event of `path` and checks that each can be given a
/// thread, as [`import_into`] will, without a store.
fn precheck(path: &std::path::Path, args: &ImportArgs) -> anyhow::Result<()> {
    let input = crate::io::read_events_on_one_thread(Some(path), DecodeOptions::default())?;
    let (mut named, mut any) = (args.thread.is_some(), false);
    for (index, item) in input.enumerate() {
        any = true;
        let event = item.with_context(|| {
            format!("cannot decode the input at event {index} (nothing was imported)")
        })?;
        if event.event_type() == &EventType::RunStarted && args.thread.is_none() {
            let has = event
                .view::<ThreadOf>()
                .ok()
                .is_some_and(|v| v.thread_id.is_some());
            if !has {
                bail!(
                    "event {index}: RUN_STARTED has no threadId; give --thread (nothing was imported)"
                );
            }
            named = true;
        }
    }
    if any && !named {
        bail!("no RUN_STARTED names a threadId; give --thread (nothing was imported)");
    }
    Ok(())
}

async fn import_into(
    store: &Store,
    input: crate::io::Events,
    args: &ImportArgs,
    bar: &indicatif::ProgressBar,
    written: &mut Written,
) -> anyhow::Result<()> {
    let mut read = 0u64;
    const BATCH: usize = 1000;
    // Events before the first run that names its thread wait for it.
    let mut current: Option<String> = args.thread.clone();
    let mut pending: Vec<Event> = Vec::new();
    for (index, item) in input.enumerate() {
        let event = item.with_context(|| format!("cannot decode the input at event {index}"))?;
        // Event bytes and a separator each: the file's size for NDJSON.
        read += event.len_bytes() as u64 + 1;
        if index % 1024 == 0 {
            bar.set_position(read);
            bar.set_message(format!("{index} events"));
        }
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
                    let n = batch.len();
                    append_batch(store, &args.tenant, &thread, batch, args).await?;
                    written.add(&thread, n);
                }
                current = Some(named);
            }
        }
        let cut = pending.len() >= BATCH || (starts_run && !pending.is_empty());
        if let Some(thread) = current.as_deref().filter(|_| cut) {
            let batch = std::mem::take(&mut pending);
            let n = batch.len();
            append_batch(store, &args.tenant, thread, batch, args).await?;
            written.add(thread, n);
        }
        pending.push(event);
    }
    if !pending.is_empty() {
        let Some(thread) = current else {
            bail!("no RUN_STARTED names a threadId; give --thread");
        };
        let n = pending.len();
        append_batch(store, &args.tenant, &thread, pending, args).await?;
        written.add(&thread, n);
    }
    store.flush().await.context("cannot flush the store")?;
    Ok(())
}

async fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let store = open_store_read_only(&args.store).await?;
    let result = export_from(&store, &args).await;
    finish(&store, result).await?;
    Ok(ExitCode::SUCCESS)
}

async fn export_from(store: &Store, args: &ExportArgs) -> anyhow::Result<()> {
    let stored = match &args.branch {
        Some(run) => store
            .read_branch(&args.tenant, &args.thread, run)
            .await
            .with_context(|| format!("cannot read branch {run:?} of thread {:?}", args.thread))?,
        None if args.compact.is_none() => {
            // Page by page, with progress; written as read below.
            let total = store
                .thread(&args.tenant, &args.thread)
                .await
                .with_context(|| format!("cannot read thread {:?}", args.thread))?
                .last_seq;
            let b = crate::progress::bar(Some(total), crate::progress::Unit::Events, "export");
            return export_pages(store, args, &b).await;
        }
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

/// A whole thread, read a page at a time and written as it is read.
async fn export_pages(
    store: &Store,
    args: &ExportArgs,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    let mut writer = Writer::new(crate::io::stdout(), args.to);
    let mut from = 1;
    loop {
        let page = store
            .read(&args.tenant, &args.thread, from, agui_store::MAX_PAGE)
            .await
            .with_context(|| format!("cannot read thread {:?}", args.thread))?;
        for e in &page.events {
            if args.to == Format::Sse {
                writer.write_event_with_id(&e.event, e.seq)?;
            } else {
                writer.write_event(&e.event)?;
            }
        }
        bar.inc(page.events.len() as u64);
        match page.next_seq {
            Some(next) if next > from => from = next,
            _ => break,
        }
    }
    bar.finish_and_clear();
    writer.finish().context("cannot write to standard output")?;
    Ok(())
}

async fn migrate(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let src = open_store_read_only(&args.from)
        .await
        .context("the source")?;
    let dst = match open_store(&args.to).await.context("the destination") {
        Ok(d) => d,
        Err(e) => {
            let _ = src.close().await;
            return Err(e);
        }
    };
    let result = migrate_all(&src, &dst).await;
    let closed = src.close().await;
    let result = finish(&dst, result).await;
    closed.context("cannot close the source store")?;
    let (threads, events, copied) = result?;
    eprintln!(
        "migrated {threads} thread(s), {events} events ({copied} copied now); counts and SHA-256 digests verified"
    );
    Ok(ExitCode::SUCCESS)
}

async fn migrate_all(src: &Store, dst: &Store) -> anyhow::Result<(usize, u64, u64)> {
    let threads = all_threads(src)
        .await
        .context("cannot list the source's threads")?;
    let total: u64 = threads.iter().map(|t| t.2).sum();
    // Rates and ETAs rounded, from the first second; silent when piped.
    let bar = crate::progress::bar(Some(total), crate::progress::Unit::Events, "migrate");
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

async fn stats(args: StatsArgs) -> anyhow::Result<ExitCode> {
    let store = open_store_read_only(&args.store).await?;
    let result = store.stats().await.context("cannot compute statistics");
    let s = finish(&store, result).await?;
    // `storedPerRawByte` says which way it points: stored bytes per byte of
    // event JSON (below 1: the store compresses; above 1: its indexes and
    // checkpoints outweigh the events).
    let ratio = (s.stored_per_raw_byte() * 100.0).round() / 100.0;
    let fields: [(&str, serde_json::Value); 7] = [
        ("tenantCount", s.tenants.into()),
        ("threadCount", s.threads.into()),
        ("runCount", s.runs.into()),
        ("eventCount", s.events.into()),
        ("rawBytes", s.raw_bytes.into()),
        ("storedBytes", s.stored_bytes.into()),
        ("storedPerRawByte", ratio.into()),
    ];
    let text = if args.json {
        let object: serde_json::Map<String, serde_json::Value> =
            fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        format!("{}\n", serde_json::Value::Object(object))
    } else {
        fields.iter().map(|(k, v)| format!("{k}\t{v}\n")).collect()
    };
    crate::io::write_all_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

async fn ls(args: LsArgs) -> anyhow::Result<ExitCode> {
    let store = open_store_read_only(&args.store).await?;
    let result = ls_lines(&store, &args).await;
    let text = finish(&store, result).await?;
    crate::io::write_all_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

async fn ls_lines(store: &Store, args: &LsArgs) -> anyhow::Result<String> {
    let tenants = match &args.tenant {
        Some(t) => vec![t.clone()],
        None => store.tenants().await.context("cannot list tenants")?,
    };
    let mut out = String::new();
    if !args.json {
        out.push_str("THREAD\tTENANT\tAGENT\tRUNS\tEVENTS\tBYTES\tUPDATED\n");
    }
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
            if !args.json {
                out.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                    shown(&t.thread_id),
                    shown(&tenant),
                    t.agent.as_deref().map_or_else(|| "-".to_owned(), shown),
                    t.run_count,
                    t.last_seq,
                    t.bytes,
                    micros_to_rfc3339(t.updated_at.0),
                ));
                continue;
            }
            // The shape of `GET /threads`, plus the tenant. JSON keeps
            // hostile ids (control characters, RTL marks) inert.
            let line = json!({
                "tenant": tenant,
                "threadId": t.thread_id,
                "agent": t.agent,
                "createdAt": micros_to_rfc3339(t.created_at.0),
                "updatedAt": micros_to_rfc3339(t.updated_at.0),
                "lastSeq": t.last_seq,
                "eventCount": t.last_seq,
                "runCount": t.run_count,
                "bytes": t.bytes,
            });
            out.push_str(&line.to_string());
            out.push('\n');
        }
    }
    Ok(out)
}

/// RFC 3339 UTC with milliseconds, as the HTTP API writes times.
fn micros_to_rfc3339(micros: i64) -> String {
    chrono::DateTime::from_timestamp_millis(micros.div_euclid(1000))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// An id in the `ls` table: bare when plain, JSON-quoted when it holds
/// spaces, quotes or control characters (a hostile id stays inert).
fn shown(id: &str) -> String {
    if id.is_empty()
        || id
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || !c.is_ascii())
    {
        serde_json::Value::from(id).to_string()
    } else {
        id.to_owned()
    }
}

async fn rm(args: RmArgs) -> anyhow::Result<ExitCode> {
    // Deleting from a store that is not there is "no store at URL", not a
    // new empty store (a typo in the URL creates nothing).
    let probe = open_store_read_only(&args.store).await?;
    let _ = probe.close().await;
    drop(probe);
    let store = open_store(&args.store).await?;
    let result = store
        .delete_thread(&args.tenant, &args.thread)
        .await
        .with_context(|| format!("cannot delete thread {:?}", args.thread));
    finish(&store, result).await?;
    eprintln!("deleted thread {:?}", args.thread);
    Ok(ExitCode::SUCCESS)
}

async fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let store = match open_store_read_only(&args.store).await {
        Ok(s) => s,
        // A store too damaged to open is the check's finding, not an error.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<agui_store::StoreError>()
                    .is_some_and(agui_store::check::is_damage)
            }) =>
        {
            let text = format!(
                "damage: the store does not open: {}\n1 damaged item found\n",
                crate::describe(&e)
            );
            crate::io::write_all_stdout(text.as_bytes())?;
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e),
    };
    let bar = crate::progress::bar(Some(0), crate::progress::Unit::Threads, "check");
    let result = agui_store::check::check_store(&store, |p| {
        bar.set_length(p.total);
        bar.set_position(p.done);
    })
    .await
    .context("cannot check the store");
    bar.finish_and_clear();
    let report = finish(&store, result).await?;
    let mut text = format!(
        "checked {} tenant(s), {} thread(s), {} event(s), {} run index entries, {} checkpoint(s)\n",
        report.tenants, report.threads, report.events, report.runs, report.checkpoints
    );
    for d in &report.damage {
        text.push_str(&format!("damage: {d}\n"));
    }
    if args.verbose {
        for n in &report.notes {
            text.push_str(&format!("note: {n}\n"));
        }
    } else if !report.notes.is_empty() {
        text.push_str(&format!(
            "{} note(s) (missing or stale checkpoints, rebuilt on the next restore; --verbose lists them)\n",
            report.notes.len()
        ));
    }
    if report.is_clean() {
        text.push_str("no damage found\n");
    } else {
        text.push_str(&format!("{} damaged item(s) found\n", report.damage.len()));
    }
    crate::io::write_all_stdout(text.as_bytes())?;
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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
        reports.push((name, finish(&store, result).await?));
    }
    let mut text = String::from(
        "backend\tappend_1w_ev_s\tappend_8w_ev_s\tread_ev_s\tlong_thread_append_ev_s\trestore_p50_ms\trestore_p99_ms\tcold_restore_p50_ms\tcold_restore_p99_ms\tconversation_bytes\traw_bytes\tstored_bytes\tstored_per_raw_byte\tappend_latency_p50_ms\tappend_latency_p99_ms\trun_end_latency_p50_ms\trun_end_latency_p99_ms\n",
    );
    for (name, r) in reports {
        text.push_str(&format!(
            "{name}\t{:.0}\t{:.0}\t{:.0}\t{:.0}\t{:.3}\t{:.3}\t{:.3}\t{:.3}\t{}\t{}\t{}\t{:.2}\t{:.3}\t{:.3}\t{:.3}\t{:.3}\n",
            r.append_1,
            r.append_8,
            r.read,
            r.append_long_thread,
            r.restore_p50.as_secs_f64() * 1e3,
            r.restore_p99.as_secs_f64() * 1e3,
            r.restore_cold_p50.as_secs_f64() * 1e3,
            r.restore_cold_p99.as_secs_f64() * 1e3,
            r.restore_json_bytes,
            r.raw_bytes,
            r.stored_bytes,
            r.stored_bytes as f64 / r.raw_bytes.max(1) as f64,
            r.append_latency_p50.as_secs_f64() * 1e3,
            r.append_latency_p99.as_secs_f64() * 1e3,
            r.run_end_latency_p50.as_secs_f64() * 1e3,
            r.run_end_latency_p99.as_secs_f64() * 1e3
        ));
    }
    crate::io::write_all_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
