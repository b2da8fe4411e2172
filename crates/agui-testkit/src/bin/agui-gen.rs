//! `agui-gen`: writes the seeded generated streams to files, so test suites
//! outside Rust (the Python package's differential tests) run on the same
//! corpus as the Rust ones.
//!
//! - `agui-gen corpus DIR SEEDS`: for every profile and each seed in
//!   `0..SEEDS`, `DIR/<profile>-<seed>.ndjson`; also `DIR/invalid-<seed>.ndjson`
//!   (a mutated stream the verifier rejects) and `DIR/chunk-soup-<seed>.ndjson`.
//! - `agui-gen realistic N SEED`: `N` events of the realistic mixed shape as
//!   NDJSON on standard output (for benchmarks).

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use agui_protocol::Event;
use agui_testkit::{Profile, chunk_soup, invalid_stream, realistic, stream};

fn write(path: &Path, events: &[Event]) -> std::io::Result<()> {
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    for e in events {
        out.write_all(e.json().as_bytes())?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

fn usage() -> ExitCode {
    eprintln!("usage: agui-gen corpus DIR SEEDS | agui-gen realistic N SEED");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |s: &String| s.parse::<u64>().ok();
    match args.as_slice() {
        [cmd, dir, seeds] if cmd == "corpus" => {
            let Some(seeds) = number(seeds) else {
                return usage();
            };
            let dir = Path::new(dir);
            let mut written = 0usize;
            let result = (|| -> std::io::Result<()> {
                std::fs::create_dir_all(dir)?;
                for seed in 0..seeds {
                    for &profile in Profile::ALL {
                        let name = format!("{}-{seed}.ndjson", profile.name());
                        write(&dir.join(name), &stream(profile, seed))?;
                        written += 1;
                    }
                    write(
                        &dir.join(format!("invalid-{seed}.ndjson")),
                        &invalid_stream(seed),
                    )?;
                    write(
                        &dir.join(format!("chunk-soup-{seed}.ndjson")),
                        &chunk_soup(seed),
                    )?;
                    written += 2;
                }
                Ok(())
            })();
            match result {
                Ok(()) => {
                    eprintln!("agui-gen: {written} streams in {}", dir.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("agui-gen: cannot write to {}: {e}", dir.display());
                    ExitCode::FAILURE
                }
            }
        }
        [cmd, n, seed] if cmd == "realistic" => {
            let (Some(n), Some(seed)) = (number(n), number(seed)) else {
                return usage();
            };
            let stdout = std::io::stdout();
            let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
            let result = realistic(n as usize, seed).iter().try_for_each(|e| {
                out.write_all(e.json().as_bytes())?;
                out.write_all(b"\n")
            });
            match result.and_then(|()| out.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("agui-gen: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => usage(),
    }
}
