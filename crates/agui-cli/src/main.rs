//! `agui`: the command line of the agui toolkit.
//!
//! Every subcommand lives in its own module under `cmd/` and exposes an
//! `Args` struct (clap) and a `run` function returning the process exit code.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc instead of the system allocator: the commands allocate and free
/// one buffer per event, often on two threads (a reading thread decodes, the
/// main thread drops), where glibc's allocator spends a fifth of the CPU
/// time (measured: ARCHITECTURE.md, "Allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cmd;
mod io;
mod progress;

/// Exit codes, the same in every command, and the environment variable
/// that shows an error's every cause (shown by `agui --help`).
const AFTER_HELP: &str = "\
Exit codes (the same in every command):
  0  success
  1  what was checked is invalid or damaged (verify, reduce, history, validate-artifact, store check)
  2  usage error or bad input (unreadable or malformed file, bad option, unknown run)
  3  not found: no store at the URL given (read-only commands never create one),
     or no such thread or run in it
  4  store unavailable: in use by another process (e.g. a second `agui serve` on
     the same SQLite file or directory), unreachable, or not permitted
  5  the store holds damaged data (`agui store check` reports what)

Errors show a store's own message, never the database's or driver's error
beneath it (which can hold SQL text or server details). AGUI_DEBUG=1 shows
every cause, those included.";

/// Set to anything but empty or `0`: error messages show every cause,
/// including a store backend's native error.
const DEBUG_ENV: &str = "AGUI_DEBUG";

/// Persist, compact, restore and branch AG-UI event streams.
#[derive(Parser)]
#[command(name = "agui", version, about, long_about = None, after_help = AFTER_HELP)]
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
    /// Export, import and validate session documents (a thread whole, portable)
    Session(cmd::session::Args),
    /// Run the AG-UI gateway: persist, restore, attach and branch every run
    Serve(Box<cmd::serve::Args>),
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
        Command::Serve(args) => cmd::serve::run(*args),
        Command::Session(args) => cmd::session::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) if io::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("agui: {}", describe(&err));
            ExitCode::from(exit_code(&err))
        }
    }
}

/// The exit code of an error's class (see [`AFTER_HELP`]).
fn exit_code(err: &anyhow::Error) -> u8 {
    use agui_store::ErrorKind;
    for cause in err.chain() {
        if cause.downcast_ref::<cmd::store::NoStore>().is_some() {
            return 3;
        }
        if let Some(e) = cause.downcast_ref::<agui_store::StoreError>() {
            return match e.kind() {
                ErrorKind::NotFound => 3,
                ErrorKind::Unavailable => 4,
                ErrorKind::Corrupt => 5,
                _ => 2,
            };
        }
    }
    2
}

/// The error and its causes on one line, `outer: cause: root`, leaving out a
/// cause whose text the line already carries (library errors often show
/// their source in their own message and expose it as the source too).
///
/// Below a store error, only causes known to be safe to show are written
/// (see [`shown_below_a_store_error`]): a store error's message is written
/// to be shown, while its source may be a database driver's error, whose
/// text can hold the SQL it ran (SQLite) or the server's own message and
/// `DETAIL` line with key values (PostgreSQL). The line ends at the first
/// cause of any other kind, unless [`DEBUG_ENV`] asks for every cause.
fn describe(err: &anyhow::Error) -> String {
    let debug = std::env::var_os(DEBUG_ENV).is_some_and(|v| !v.is_empty() && v != "0");
    describe_with(err, debug)
}

/// [`describe`], showing every cause when `debug`.
fn describe_with(err: &anyhow::Error, debug: bool) -> String {
    let mut line = String::new();
    let mut below_store = false;
    for cause in err.chain() {
        if below_store && !debug && !shown_below_a_store_error(cause) {
            break;
        }
        below_store |= cause.is::<agui_store::StoreError>();
        let text = cause.to_string();
        if !line.contains(text.as_str()) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line
}

/// True for the causes an error line may show below a store error: agui's
/// own errors (a nested store error, the file backend's, which names a
/// segment and offset or a file and the OS error, a reduce or envelope
/// error) and I/O and JSON errors. Not a database driver's error, nor
/// anything else not known here.
fn shown_below_a_store_error(cause: &(dyn std::error::Error + 'static)) -> bool {
    cause.is::<agui_store::StoreError>()
        || cause.is::<agui_store_file::FileError>()
        || cause.is::<agui_history::reduce::ReduceError>()
        || cause.is::<agui_protocol::EnvelopeError>()
        || cause.is::<std::io::Error>()
        || cause.is::<serde_json::Error>()
}

#[cfg(test)]
mod tests {
    use super::describe_with;

    /// An error that shows its source in its own message and exposes it as
    /// its source too, as many library errors do.
    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "line 1: not an AG-UI event: {}", self.0)
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_written_once() {
        let inner = std::io::Error::other("invalid JSON: expected ident");
        let err = anyhow::Error::new(Outer(inner)).context("reading events.ndjson");
        assert_eq!(
            describe_with(&err, false),
            "reading events.ndjson: line 1: not an AG-UI event: invalid JSON: expected ident"
        );
    }

    #[test]
    fn distinct_causes_are_all_written() {
        let err = anyhow::anyhow!("disk full").context("writing out.json");
        assert_eq!(describe_with(&err, false), "writing out.json: disk full");
    }

    /// A database driver's error, as tokio-postgres shows one.
    #[derive(Debug)]
    struct Driver;

    impl std::fmt::Display for Driver {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(
                "db error: ERROR: duplicate key value violates unique constraint \"runs_pkey\"\n\
                 DETAIL: Key (thread_id, run_id)=(1, \\x72) already exists.",
            )
        }
    }

    impl std::error::Error for Driver {}

    /// A store error whose native source holds what must not be shown.
    fn store_error() -> anyhow::Error {
        let native = Driver;
        let err = agui_store::StoreError::invalid("a runId is already used in this thread")
            .with_source(native);
        anyhow::Error::new(err).context("cannot append to thread \"t\"")
    }

    #[test]
    fn a_store_error_ends_the_line() {
        assert_eq!(
            describe_with(&store_error(), false),
            "cannot append to thread \"t\": invalid: a runId is already used in this thread"
        );
    }

    #[test]
    fn an_io_error_below_a_store_error_is_shown() {
        let native = std::io::Error::other("No space left on device");
        let err = agui_store::StoreError::unavailable("the file store cannot write a segment")
            .with_source(native);
        assert_eq!(
            describe_with(&anyhow::Error::new(err), false),
            "unavailable: the file store cannot write a segment: No space left on device"
        );
    }

    #[test]
    fn debug_shows_the_store_error_source() {
        let line = describe_with(&store_error(), true);
        assert!(line.contains("DETAIL: Key"), "{line}");
    }
}
