//! `agui history`: a thread's run tree, time travel to any run, and the
//! events of one branch.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use agui_codec::{DecodeOptions, Format, Writer};
use agui_history::lineage::{Lineage, LineageError, RunIndex, RunNode};
use agui_history::reduce::Conversation;
use agui_protocol::Event;
use anyhow::Context;

use crate::io;

/// Show the run tree, the conversation at any run, or one branch's events.
///
/// A run continues the run named by its RUN_STARTED.parentRunId, or else the
/// previous run of its thread. A branch's history never includes messages
/// generated on a branch it abandoned.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["tree", "at", "branch"])))]
pub struct Args {
    /// Event stream (JSON array, NDJSON or SSE); `-` or nothing for standard input
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    /// Print the run tree: one run a line, indented under its parent, with
    /// thread, parent, status and event count
    #[arg(long)]
    tree: bool,
    /// With --tree: one JSON object per run (NDJSON) instead of text; times
    /// (`startedAt`, `finishedAt`, from the events' `timestamp`) in RFC 3339
    /// UTC with milliseconds
    #[arg(long, requires = "tree")]
    json: bool,
    /// Print {messages, state} at the end of this run's branch (as `agui reduce`)
    #[arg(long, value_name = "RUN_ID")]
    at: Option<String>,
    /// Print the events of the branch ending at this run
    #[arg(long, value_name = "RUN_ID")]
    branch: Option<String>,
    /// With --at or --branch: stop after the run's event N (0 is its RUN_STARTED)
    #[arg(long, value_name = "N")]
    event: Option<usize>,
    /// With --branch: output format, json, ndjson or sse (default: the input's)
    #[arg(long, value_name = "FORMAT")]
    to: Option<Format>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.event.is_some() && args.tree {
        anyhow::bail!("--event goes with --at or --branch, not --tree");
    }
    if args.to.is_some() && args.branch.is_none() {
        anyhow::bail!("--to goes with --branch");
    }
    let (events, input_format) = read_events(args.file.as_deref())?;
    let index = match RunIndex::build(&events) {
        Ok(index) => index,
        Err(LineageError::Faults(faults)) => {
            for fault in &faults {
                eprintln!("agui: lineage fault: {fault}");
            }
            return Ok(ExitCode::from(1));
        }
        Err(err) => return Err(err.into()),
    };
    if args.tree {
        let mut out = io::stdout();
        if args.json {
            for (_, run) in index.depth_first() {
                io::write_json(&mut out, run, false)?;
                out.write_all(b"\n")?;
            }
        } else {
            out.write_all(tree_text(&index).as_bytes())?;
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let lineage = Lineage::with_index(&events, index)?;
    if let Some(run_id) = &args.at {
        let start = Conversation::default();
        let conversation = match lineage.conversation_at(run_id, args.event, start) {
            Ok(conversation) => conversation,
            Err(err @ LineageError::Reduce { .. }) => {
                eprintln!("agui: {err}");
                return Ok(ExitCode::from(1));
            }
            Err(err) => return Err(err.into()),
        };
        // The same shape and layout as `agui reduce`.
        let mut text = serde_json::to_string_pretty(&conversation)?;
        text.push('\n');
        io::write_all_stdout(text.as_bytes())?;
    } else if let Some(run_id) = &args.branch {
        let branch = lineage.branch(run_id, args.event)?;
        for dropped in &branch.dropped {
            eprintln!(
                "agui: event {}: left out message {:?}, generated on a branch this one abandoned",
                dropped.event_index, dropped.message_id
            );
        }
        let format = args.to.or(input_format).unwrap_or(Format::Ndjson);
        let mut writer = Writer::new(io::stdout(), format);
        for (_, event) in &branch.events {
            writer.write_event(event.as_event_ref())?;
        }
        writer.finish()?.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads a whole event stream, and the format it was in.
pub(crate) fn read_events(
    path: Option<&std::path::Path>,
) -> anyhow::Result<(Vec<Event>, Option<Format>)> {
    let name = path
        .filter(|p| p.as_os_str() != "-")
        .map_or_else(|| "standard input".to_owned(), |p| p.display().to_string());
    let mut reader = io::read_events(path, DecodeOptions::default())?;
    let mut events = Vec::new();
    while let Some(batch) = reader.next_batch() {
        let batch = batch.with_context(|| format!("cannot read {name}"))?;
        if events.is_empty() {
            events = batch;
        } else {
            events.extend(batch);
        }
    }
    Ok((events, reader.format()))
}

/// A run id as printed in the tree: bare when it is plain, quoted otherwise.
fn shown(id: &str) -> String {
    if id.is_empty()
        || id
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"')
    {
        serde_json::Value::from(id).to_string()
    } else {
        id.to_owned()
    }
}

/// The deepest level the tree listing indents.
const MAX_INDENT: usize = 32;

fn tree_line(depth: usize, run: &RunNode) -> String {
    let parent = match (&run.parent_run_id, run.explicit_parent) {
        (None, _) => "-".to_owned(),
        (Some(p), true) => shown(p),
        (Some(p), false) => format!("{}(implicit)", shown(p)),
    };
    // Implicit parents make a long thread a chain as deep as it has runs:
    // past MAX_INDENT levels the depth is written, not indented, so the
    // listing stays linear in the number of runs.
    let indent = if depth > MAX_INDENT {
        format!("{}[depth {depth}] ", "  ".repeat(MAX_INDENT))
    } else {
        "  ".repeat(depth)
    };
    format!(
        "{}{}  thread={}  parent={}  status={}  events={}\n",
        indent,
        shown(&run.run_id),
        shown(&run.thread_id),
        parent,
        run.status,
        run.event_count
    )
}

/// The tree listing: runs depth-first, children indented under parents.
fn tree_text(index: &RunIndex) -> String {
    index
        .depth_first()
        .into_iter()
        .map(|(depth, run)| tree_line(depth, run))
        .collect()
}
