//! `agui verify`: checks a stream against the sequence rules of the official
//! client (chunk expansion, then `verifyEvents`), streaming, in bounded memory.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use agui_codec::DecodeOptions;
use agui_protocol::verify::{Diagnostic, Verifier};

use crate::io::{read_event_chunks_on_one_thread, stdout, unreadable};

/// Check an event stream (JSON array, NDJSON or SSE, detected) against the
/// AG-UI sequence rules.
///
/// Prints `ok (N events)` and exits 0 when the stream is valid. Otherwise
/// prints `error at event #I (TYPE): REASON` (I counts events from 0) and
/// exits 1; with `--all`, one such line per problem. Input that cannot be
/// decoded is reported the same way (`error at event #I: ...`) and exits 1.
/// Input that cannot be read (a directory, a device error) is a usage
/// error: `agui: cannot read PATH: ...` on standard error, exit 2.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The stream to check; `-` or nothing reads standard input.
    pub file: Option<PathBuf>,
    /// List every problem, one per line, instead of stopping at the first.
    #[arg(long)]
    pub all: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut input =
        read_event_chunks_on_one_thread(args.file.as_deref(), DecodeOptions::default())?;
    let mut out = stdout();
    let mut verifier = if args.all {
        Verifier::collecting()
    } else {
        Verifier::new()
    };
    let mut problems = 0u64;
    // Events and decoding errors seen so far (an error takes an index too).
    let mut count = 0usize;
    'input: while let Some(item) = input.next_chunk() {
        match item {
            Ok(chunk) => {
                for event in chunk.iter() {
                    let index = count;
                    count += 1;
                    if let Err(error) = verifier.push(event) {
                        problems += 1;
                        let d = Diagnostic {
                            index,
                            event_type: event.type_name().to_owned(),
                            error,
                        };
                        writeln!(out, "error at {d}")?;
                        if !args.all {
                            break 'input;
                        }
                    }
                }
            }
            Err(err) => {
                let err = match unreadable(err, args.file.as_deref()) {
                    Ok(unreadable) => {
                        // Keep what was reported so far, then fail.
                        out.flush()?;
                        return Err(unreadable);
                    }
                    Err(err) => err,
                };
                problems += 1;
                let index = err.position().map_or(count as u64, |p| p.index);
                count += 1;
                writeln!(out, "error at event #{index}: cannot decode: {err}")?;
                if !args.all || !err.is_recoverable() {
                    break;
                }
            }
        }
    }
    if problems == 0 {
        writeln!(out, "ok ({count} events)")?;
    } else if args.all {
        writeln!(
            out,
            "{problems} problem{}",
            if problems == 1 { "" } else { "s" }
        )?;
    }
    out.flush()?;
    Ok(if problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
