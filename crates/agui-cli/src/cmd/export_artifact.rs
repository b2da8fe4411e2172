//! `agui export-artifact`: the compacted message snapshot artifact of one run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use agui_history::artifact::{self, ExportOptions, Source};

use crate::cmd::history::read_events;
use crate::io;

/// Export the compacted message snapshot artifact of one run: its identity,
/// its plain-text messages and how it ended, as one JSON object.
#[derive(clap::Args)]
pub struct Args {
    /// Event stream (JSON array, NDJSON or SSE); `-` or nothing for standard input
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
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
    let (events, _) = read_events(args.file.as_deref())?;
    let options = ExportOptions {
        source,
        started_at: args.started_at,
        finished_at: args.finished_at,
    };
    let export = artifact::export(&events, &args.run, &options)?;
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
