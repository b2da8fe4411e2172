//! `agui`: the command line of the agui toolkit.
//!
//! Every subcommand lives in its own module under `cmd/` and exposes an
//! `Args` struct (clap) and a `run` function returning the process exit code.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
mod io;

/// Persist, compact, restore and branch AG-UI event streams.
#[derive(Parser)]
#[command(name = "agui", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check an event stream against the AG-UI sequence rules
    Verify(cmd::verify::Args),
    /// Convert an event stream between JSON, NDJSON and SSE, losslessly
    Convert(cmd::convert::Args),
    /// Reduce events to the final {messages, state}, as the official client does
    Reduce(cmd::reduce::Args),
    /// Compact an event stream without changing its meaning
    Compact(cmd::compact::Args),
    /// Show a thread's run tree, time-travel to any run, or extract a branch
    History(cmd::history::Args),
    /// Export the compacted message snapshot artifact of one run
    ExportArtifact(cmd::export_artifact::Args),
    /// Strictly validate a compacted message snapshot artifact
    ValidateArtifact(cmd::validate_artifact::Args),
    /// Import, export, migrate and inspect event stores
    Store(cmd::store::Args),
    /// Run the AG-UI gateway: persist, restore, attach and branch every run
    Serve(cmd::serve::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Verify(args) => cmd::verify::run(args),
        Command::Convert(args) => cmd::convert::run(args),
        Command::Reduce(args) => cmd::reduce::run(args),
        Command::Compact(args) => cmd::compact::run(args),
        Command::History(args) => cmd::history::run(args),
        Command::ExportArtifact(args) => cmd::export_artifact::run(args),
        Command::ValidateArtifact(args) => cmd::validate_artifact::run(args),
        Command::Store(args) => cmd::store::run(args),
        Command::Serve(args) => cmd::serve::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) if io::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("agui: {err:#}");
            ExitCode::from(2)
        }
    }
}
