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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Verify(args) => cmd::verify::run(args),
        Command::Convert(args) => cmd::convert::run(args),
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
