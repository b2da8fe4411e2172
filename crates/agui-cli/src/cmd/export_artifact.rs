//! `agui export-artifact`: the compacted message snapshot artifact of one run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use agui_history::artifact::{self, ArtifactError, ExportOptions, Source};
use agui_history::lineage::RunIndex;
use agui_protocol::Event;
use anyhow::Context;

use crate::cmd::history::read_events;
use crate::io;

/// Export the compacted message snapshot artifact of one run: its identity,
/// its plain-text messages and how it ended, as one JSON object.
#[derive(clap::Args)]
pub struct Args {
    /// Event stream (JSON array, NDJSON or SSE); `-` or nothing for standard
    /// input. Not with --store.
    #[arg(value_name = "FILE", conflicts_with = "store")]
    file: Option<PathBuf>,
    /// Read the run from this store instead of a file; events without a
    /// `timestamp` then take the time the store received them
    #[arg(long, value_name = "URL", requires = "thread")]
    store: Option<String>,
    /// With --store: the thread holding the run
    #[arg(long, value_name = "THREAD_ID", requires = "store")]
    thread: Option<String>,
    /// With --store: the tenant
    #[arg(long, default_value = crate::cmd::store::DEFAULT_TENANT, requires = "store")]
    tenant: String,
    /// The run to export
    #[arg(long, value_name = "RUN_ID")]
    run: String,
    /// Messages from the run's own MESSAGES_SNAPSHOT (the default when it
    /// emitted one) or derived from its branch history
    #[arg(long, value_name = "SOURCE", value_parser = ["snapshot", "derived"])]
    source: Option<String>,
    /// Start time (RFC 3339 UTC), used when the run's events carry no timestamp
    #[arg(long, value_name = "TIME")]
    started_at: Option<String>,
    /// Finish time (RFC 3339 UTC), used when the run's events give none
    #[arg(long, value_name = "TIME")]
    finished_at: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let source = args
        .source
        .as_deref()
        .map(str::parse::<Source>)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let mut options = ExportOptions {
        source,
        started_at: args.started_at,
        finished_at: args.finished_at,
    };
    let events = match (&args.store, &args.thread) {
        (Some(url), Some(thread)) => {
            let (events, received) = read_store(url, &args.tenant, thread)?;
            // The store's receive times stand in for timestamps the events
            // do not carry (the library prefers the events' own).
            if let Ok(index) = RunIndex::build(&events)
                && let Some(run) = index.get(&args.run)
            {
                let at = |i: usize| received.get(i).copied().and_then(ms_to_rfc3339);
                if options.started_at.is_none() {
                    options.started_at = at(run.first_event);
                }
                if options.finished_at.is_none() {
                    options.finished_at = run.terminal_event.and_then(at);
                }
            }
            events
        }
        _ => read_events(args.file.as_deref())?.0,
    };
    let export = match artifact::export(&events, &args.run, &options) {
        Ok(export) => export,
        Err(ArtifactError::NoStartTime { run_id }) => anyhow::bail!(
            "run {run_id:?} has no timestamp on any of its events: give its start time with \
             --started-at TIME (RFC 3339 UTC, and --finished-at TIME), or export it from the \
             store that recorded it with --store URL --thread THREAD_ID, which uses the times \
             the store received the events"
        ),
        Err(err) => return Err(err.into()),
    };
    if !export.skipped.is_empty() {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for skipped in &export.skipped {
            *counts.entry(skipped.reason.to_string()).or_default() += 1;
        }
        let detail: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
        eprintln!(
            "agui: left out {} message(s) without plain text ({} source): {}",
            export.skipped.len(),
            export.source,
            detail.join(", ")
        );
    }
    if let Some(chars) = export.error_message_cut_from {
        eprintln!(
            "agui: error_message cut from {chars} to {} characters",
            artifact::MAX_ERROR_MESSAGE_CHARS
        );
    }
    let mut text = serde_json::to_string_pretty(&export.artifact)?;
    text.push('\n');
    io::write_all_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// The events of a stored thread and, beside each, when the store received
/// it (epoch milliseconds).
fn read_store(url: &str, tenant: &str, thread: &str) -> anyhow::Result<(Vec<Event>, Vec<i64>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        let store = crate::cmd::store::open_store_read_only(url).await?;
        let read = store
            .read_range(tenant, thread, 1, u64::MAX)
            .await
            .with_context(|| format!("cannot read thread {thread:?}"));
        let _ = store.close().await;
        let stored = read?;
        let received = stored
            .iter()
            .map(|e| e.received_at.as_micros().div_euclid(1000))
            .collect();
        Ok((stored.into_iter().map(|e| e.event).collect(), received))
    })
}

/// Epoch milliseconds as RFC 3339 UTC with milliseconds.
fn ms_to_rfc3339(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}
