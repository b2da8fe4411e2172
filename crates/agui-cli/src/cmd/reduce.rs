//! `agui reduce`: events to the final `{messages, state}`, exactly as the
//! official client's reducer (`transformChunks` then `defaultApplyEvents`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use agui_codec::DecodeOptions;
use agui_history::reduce::{Conversation, ReduceError, Reducer};
use anyhow::Context;
use serde_json::Value;

use crate::io::{read_events_on_one_thread, stdout, unreadable, write_json};

/// Reduce an event stream (JSON array, NDJSON or SSE, detected) to the final
/// `{"messages": [...], "state": ...}` the official client would hold.
///
/// Prints the result as pretty-printed JSON (two-space indent) and exits 0.
/// Input that cannot be decoded, or an event that makes the official
/// pipeline throw (a malformed chunk, for example), is reported on standard
/// error as `error at event #I ...` (I counts events from 0) and exits 1.
/// Input that cannot be read (a directory, a device error) exits 2.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The stream to reduce; `-` or nothing reads standard input.
    pub file: Option<PathBuf>,
    /// Start from this RunAgentInput (JSON): its `messages` and `state`
    /// (absent or null: no messages, state `{}`).
    #[arg(long, value_name = "RUN_AGENT_INPUT.json")]
    pub from_input: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let start = match &args.from_input {
        Some(path) => start_from_input(path)?,
        None => Conversation::default(),
    };
    let input = read_events_on_one_thread(args.file.as_deref(), DecodeOptions::default())?;
    let mut reducer = Reducer::new(start);
    for (i, item) in input.enumerate() {
        match item {
            Ok(event) => {
                if let Err(err) = reducer.apply(&event) {
                    eprintln!(
                        "agui reduce: error at {}",
                        describe(&err, i, event.type_name())
                    );
                    return Ok(ExitCode::from(1));
                }
            }
            Err(err) => {
                let err = match unreadable(err, args.file.as_deref()) {
                    Ok(unreadable) => return Err(unreadable),
                    Err(err) => err,
                };
                let index = err.position().map_or(i as u64, |p| p.index);
                eprintln!("agui reduce: error at event #{index}: cannot decode: {err}");
                return Ok(ExitCode::from(1));
            }
        }
    }
    let conversation = reducer.into_conversation();
    let mut out = stdout();
    write_json(&mut out, &conversation, true)?;
    writeln!(out)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `event #I (TYPE): REASON` for a reduce error.
fn describe(err: &ReduceError, index: usize, event_type: &str) -> String {
    let reason = match err {
        ReduceError::Chunk { reason, .. } => format!("chunk expansion failed: {reason}"),
        ReduceError::UnexpandedChunk { .. } => "the chunk was not expanded".to_owned(),
        ReduceError::Throws { reason, .. } => format!("the official reducer throws: {reason}"),
        ReduceError::Field { source, .. } => format!("cannot decode a field: {source}"),
    };
    format!("event #{index} ({event_type}): {reason}")
}

/// The starting point taken from a RunAgentInput file.
fn start_from_input(path: &std::path::Path) -> anyhow::Result<Conversation> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let input: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let Value::Object(input) = input else {
        anyhow::bail!("{}: a RunAgentInput must be a JSON object", path.display());
    };
    let messages = match input.get("messages") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(_) => anyhow::bail!("{}: `messages` must be an array", path.display()),
    };
    let state = match input.get("state") {
        None | Some(Value::Null) => Conversation::default().state,
        Some(v) => v.clone(),
    };
    Ok(Conversation { messages, state })
}
