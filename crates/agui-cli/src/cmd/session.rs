//! `agui session`: export a thread as a session document
//! (`agui.session.v1`), import one with its restore case, or validate one.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use agui_session::{ExportOptions, ImportOptions, Layout};
use anyhow::{Context, bail};
use futures::StreamExt;

use crate::cmd::store::{DEFAULT_TENANT, open_store, open_store_read_only};
use crate::progress::{self, Unit};

/// Arguments of `agui session`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Export a thread whole: events, runs, agents and channels, with a SHA-256
    Export(ExportArgs),
    /// Import a session document; reports the restore case met
    Import(ImportArgs),
    /// Check a session document (schema, sequence, lineage, checksum)
    Validate(ValidateArgs),
}

#[derive(clap::Args)]
struct ExportArgs {
    /// Store URL: sqlite:///PATH, file:///DIR, postgres://..., memory://
    #[arg(long)]
    store: String,
    /// Thread to export
    #[arg(long)]
    thread: String,
    /// Tenant
    #[arg(long, default_value = DEFAULT_TENANT)]
    tenant: String,
    /// Layout: json (one document) or ndjson (one record a line, for big threads)
    #[arg(long, default_value = "json", value_parser = ["json", "ndjson"])]
    to: String,
    /// Events mode: refused; documents hold every event as stored (see
    /// docs/sessions.md, "Why no snapshot mode")
    #[arg(long, value_parser = ["snapshot"])]
    compact: Option<String>,
    /// Output file (default: standard output)
    #[arg(long, short)]
    output: Option<PathBuf>,
}

#[derive(clap::Args)]
struct ImportArgs {
    /// The session document (JSON or NDJSON)
    file: PathBuf,
    /// Store URL
    #[arg(long)]
    store: String,
    /// Tenant
    #[arg(long, default_value = DEFAULT_TENANT)]
    tenant: String,
    /// Import under this thread id instead of the document's
    #[arg(long = "as", value_name = "NEW_ID")]
    as_id: Option<String>,
    /// The agents available here, comma-separated (default: every
    /// participant of the document)
    #[arg(long, value_delimiter = ',')]
    agents: Option<Vec<String>>,
    /// Import the history even when none of the document's agents is available
    #[arg(long)]
    history_only: bool,
}

#[derive(clap::Args)]
struct ValidateArgs {
    /// The session document (JSON or NDJSON)
    file: PathBuf,
}

/// Runs `agui session`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        match args.command {
            Command::Export(a) => export(a).await,
            Command::Import(a) => import(a).await,
            Command::Validate(a) => validate(a).await,
        }
    })
}

/// The shared bar (rounded rate and ETA, only on a terminal, only after a
/// second of work); `None` for a count whose total is not known.
fn bar(total: Option<u64>, what: &str) -> indicatif::ProgressBar {
    progress::bar(total, Unit::Events, what)
}

async fn export(a: ExportArgs) -> anyhow::Result<ExitCode> {
    if a.compact.is_some() {
        bail!(
            "--compact snapshot is refused: agui.session.v1 documents hold every event as stored \
             (a snapshot-compacted session would grow with the square of the runs and could not \
             restore the thread's sequence numbers; see docs/sessions.md). For a compacted copy \
             of the events: agui store export ... | agui compact --mode snapshot"
        );
    }
    let store = open_store_read_only(&a.store).await?;
    let result = async {
        let total = store
            .thread(&a.tenant, &a.thread)
            .await
            .with_context(|| format!("cannot export thread {:?}", a.thread))?
            .last_seq;
        let bar = bar(Some(total), "session export");
        let b = bar.clone();
        let opts = ExportOptions {
            layout: if a.to == "ndjson" {
                Layout::Ndjson
            } else {
                Layout::Json
            },
            progress: Some(Arc::new(move |n| b.set_position(n))),
        };
        let mut out: Box<dyn Write> = match &a.output {
            Some(p) => Box::new(std::io::BufWriter::new(
                std::fs::File::create(p)
                    .with_context(|| format!("cannot create {}", p.display()))?,
            )),
            None => Box::new(crate::io::stdout()),
        };
        let mut chunks =
            agui_session::export(store.clone(), a.tenant.clone(), a.thread.clone(), opts).await?;
        while let Some(chunk) = chunks.next().await {
            out.write_all(&chunk?)
                .context("cannot write the document")?;
        }
        out.flush().context("cannot write the document")?;
        bar.finish_and_clear();
        anyhow::Ok(())
    }
    .await;
    let closed = store.close().await;
    result?;
    closed.context("cannot close the store")?;
    Ok(ExitCode::SUCCESS)
}

async fn import(a: ImportArgs) -> anyhow::Result<ExitCode> {
    let store = open_store(&a.store).await?;
    let bar = bar(None, "session import");
    let b = bar.clone();
    let opts = ImportOptions {
        tenant: a.tenant.clone(),
        target: a.as_id.clone(),
        agents: a.agents.clone(),
        history_only: a.history_only,
        progress: Some(Arc::new(move |n| b.set_position(n))),
    };
    let source: Arc<dyn agui_session::Source> = Arc::new(a.file.clone());
    let result = agui_session::import(store.clone(), source, opts).await;
    bar.finish_and_clear();
    let closed = store.close().await;
    let report = result.with_context(|| format!("cannot import {}", a.file.display()))?;
    closed.context("cannot close the store")?;
    // The thread is committed: say so first, so that a report that cannot
    // be written still leaves the outcome on standard error.
    eprintln!(
        "imported thread {:?} ({} events, {} runs): {}{}",
        report.thread_id,
        report.events,
        report.runs,
        report.case.as_str(),
        if report.missing.is_empty() {
            String::new()
        } else {
            format!(
                "; not configured here, channels kept: {}",
                report.missing.join(", ")
            )
        }
    );
    let mut line = serde_json::to_string(&report)?;
    line.push('\n');
    crate::io::write_all_stdout(line.as_bytes()).with_context(|| {
        format!(
            "thread {:?} was imported, but its report was not written",
            report.thread_id
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn validate(a: ValidateArgs) -> anyhow::Result<ExitCode> {
    let file = a.file.clone();
    let summary = tokio::task::spawn_blocking(move || agui_session::validate(&file))
        .await
        .context("the validation task failed")?
        .with_context(|| format!("{} is not a valid session document", a.file.display()))?;
    let report = serde_json::json!({
        "valid": true,
        "format": summary.format,
        "threadId": summary.thread_id,
        "participants": summary.participants,
        "runs": summary.runs.len(),
        "events": summary.events,
        "channels": summary.channels,
        "sha256": summary.sha256,
    });
    crate::io::write_all_stdout(format!("{report}\n").as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
