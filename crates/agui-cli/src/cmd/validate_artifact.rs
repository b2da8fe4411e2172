//! `agui validate-artifact`: strict validation of a compacted message
//! snapshot artifact.

use std::path::PathBuf;
use std::process::ExitCode;

use agui_history::artifact;
use anyhow::Context;

use crate::io;

/// Strictly validate a compacted message snapshot artifact. Prints `valid`
/// (exit 0) or `malformed: REASON` (exit 1).
#[derive(clap::Args)]
pub struct Args {
    /// The artifact (one JSON object); `-` for standard input
    #[arg(value_name = "FILE")]
    file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut io::open_input(Some(&args.file))?, &mut bytes)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let verdict = match std::str::from_utf8(&bytes) {
        Err(e) => Err(format!("not UTF-8 text (byte {})", e.valid_up_to())),
        Ok(text) => artifact::validate(text).map_err(|e| e.to_string()),
    };
    match verdict {
        Ok(_) => {
            io::write_all_stdout(b"valid\n")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(reason) => {
            io::write_all_stdout(format!("malformed: {reason}\n").as_bytes())?;
            Ok(ExitCode::from(1))
        }
    }
}
