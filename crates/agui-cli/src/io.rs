//! Input and output plumbing shared by the subcommands.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::os::fd::AsFd;
use std::path::Path;

use agui_codec::{DecodeError, DecodeOptions, EventChunk, Format, Split, ThreadedReader};
use agui_protocol::Event;
use anyhow::{Context, bail};

/// Opens `path` for reading, or standard input for `-` or no path.
pub fn open_input(path: Option<&Path>) -> anyhow::Result<Box<dyn BufRead>> {
    match path {
        None => Ok(Box::new(BufReader::with_capacity(1 << 16, io::stdin()))),
        Some(p) if p.as_os_str() == "-" => {
            Ok(Box::new(BufReader::with_capacity(1 << 16, io::stdin())))
        }
        Some(p) => {
            let file = File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
            Ok(Box::new(BufReader::with_capacity(1 << 16, file)))
        }
    }
}

/// An input as messages name it: its path, or `standard input` for `-` or
/// no path.
pub fn input_name(path: Option<&Path>) -> String {
    match path {
        Some(p) if p.as_os_str() != "-" => p.display().to_string(),
        _ => "standard input".to_owned(),
    }
}

/// A decoding error that is a failure to read the input (a directory, a
/// device error) rather than bad data in it, as an error naming the input
/// (`cannot read PATH: Is a directory`), which exits 2 like any input that
/// cannot be read. Any other decoding error comes back as it was.
pub fn unreadable(err: DecodeError, path: Option<&Path>) -> Result<anyhow::Error, DecodeError> {
    match err {
        DecodeError::Io { at, source } => {
            let name = input_name(path);
            let what = if at.byte == 0 {
                format!("cannot read {name}")
            } else {
                format!("cannot read {name} after byte {}", at.byte)
            };
            Ok(anyhow::Error::new(source).context(what))
        }
        other => Err(other),
    }
}

/// The test knob that splits every NDJSON file, whatever its size, into
/// chunks of about this many bytes decoded on two threads (see
/// [`read_events`]).
pub const SPLIT_ENV: &str = "AGUI_DECODE_SPLIT";

/// Decodes `path` (standard input for `-` or no path) on background
/// threads, for a command whose own work per event is light next to
/// decoding (`convert`, reading a whole stream into memory, counting runs):
/// the caller's thread gets decoded events in batches, and a file of
/// 16 MiB or more is decoded on two threads ([`ThreadedReader`], in its
/// default 512 KiB chunks). Events, errors and their positions are those
/// of [`agui_codec::Reader`] over the same input.
///
/// The file is opened read-only. A path that is not a regular file (a
/// directory, a named pipe, a device) is read as a stream, on one thread.
///
/// `AGUI_DECODE_SPLIT=BYTES` (for tests) splits every non-empty NDJSON file
/// into chunks of about that many bytes, and says so on standard error
/// (`agui: AGUI_DECODE_SPLIT: ...`) for each file it splits.
pub fn read_events(path: Option<&Path>, options: DecodeOptions) -> anyhow::Result<Events> {
    decode(path, options, Split::default(), false)
}

/// Like [`read_events`], for a caller that takes events as chunks
/// ([`Events::next_chunk`]) and never keeps one: the events of a split file
/// are then slices of the buffers it was read into, never copied.
pub fn read_event_chunks(path: Option<&Path>, options: DecodeOptions) -> anyhow::Result<Events> {
    decode(path, options, Split::default(), true)
}

/// Like [`read_events`], but a big file too is decoded on one background
/// thread (unless `AGUI_DECODE_SPLIT` is set), for a command whose own work
/// per event weighs more than decoding and that keeps events (`reduce`,
/// `store import`, each pass of `compact --mode latest` over a file): decoding then keeps up on one thread, and a
/// second one would only compete with the caller for the two cores. On 1M
/// events (165 MB), medians: `agui compact` 206 ms on one decoding thread,
/// 272 ms split in 1 MiB chunks; `agui verify` (before it read chunks)
/// 488 ms against 524 ms; `agui reduce` the same either way.
pub fn read_events_on_one_thread(
    path: Option<&Path>,
    options: DecodeOptions,
) -> anyhow::Result<Events> {
    let one = Split {
        threshold: u64::MAX,
        ..Split::default()
    };
    decode(path, options, one, false)
}

/// Like [`read_event_chunks`] on one decoding thread (unless
/// `AGUI_DECODE_SPLIT` is set), in chunks of 256 KiB, for a command that
/// copies only the events it keeps (`verify`, `compact`): an NDJSON file is
/// still read in chunks decoded in place, so its events are copied only by
/// the caller, and each keeps the member table its scan recorded. The
/// caller's thread decodes a chunk itself whenever it would wait for one
/// (`Split::caller_helps`), so the two cores share the decoding and the
/// command's own work whichever is heavier.
pub fn read_event_chunks_on_one_thread(
    path: Option<&Path>,
    options: DecodeOptions,
) -> anyhow::Result<Events> {
    let one = Split {
        // Not 0: an empty file has no chunk to decode.
        threshold: 1,
        threads: 1,
        // A quarter of the default: as fast, and less at peak. 1M events,
        // four runs each with the caller helping: 512 KiB chunks, `compact`
        // 0.17 to 0.19 s, 14.4 to 15.4 MB; 256 KiB, 0.17 to 0.19 s, 12.0
        // to 12.9 MB; 128 KiB, 0.17 to 0.20 s, 11.2 to 11.8 MB (`verify`
        // 0.25 to 0.28 s at every size).
        chunk: 1 << 18,
        caller_helps: true,
    };
    decode(path, options, one, true)
}

fn decode(
    path: Option<&Path>,
    options: DecodeOptions,
    default: Split,
    chunked: bool,
) -> anyhow::Result<Events> {
    let forced = split_override()?;
    let Some(path) = path.filter(|p| p.as_os_str() != "-") else {
        let reader = if chunked {
            ThreadedReader::from_read_chunked(io::stdin(), options)
        } else {
            ThreadedReader::from_read(io::stdin(), options)
        }
        .context("cannot start reading standard input")?;
        return Ok(Events {
            reader: Some(reader),
            stdin: true,
        });
    };
    let cannot_open = || format!("cannot open {}", path.display());
    let file = File::open(path).with_context(cannot_open)?;
    let reader = if file.metadata().is_ok_and(|m| m.is_file()) {
        drop(file);
        let split = forced.unwrap_or(default);
        let reader = if chunked {
            ThreadedReader::open_chunked(path, options, split)
        } else {
            ThreadedReader::open_with(path, options, split)
        }
        .with_context(cannot_open)?;
        if forced.is_some() && reader.is_parallel() {
            eprintln!(
                "agui: {SPLIT_ENV}: {} decoded in chunks of {} bytes on {} threads",
                path.display(),
                split.chunk,
                split.threads
            );
        }
        reader
    } else {
        // Read as a stream, as a pipe must be; reading errors (a directory)
        // come out of the decoder as they always did.
        if chunked {
            ThreadedReader::from_read_chunked(file, options)
        } else {
            ThreadedReader::from_read(file, options)
        }
        .with_context(cannot_open)?
    };
    Ok(Events {
        reader: Some(reader),
        stdin: false,
    })
}

/// The split forced by [`SPLIT_ENV`], if set.
fn split_override() -> anyhow::Result<Option<Split>> {
    let Some(value) = std::env::var_os(SPLIT_ENV).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let chunk = match value.to_str().map(str::parse::<u64>) {
        Some(Ok(chunk)) if chunk > 0 => chunk,
        _ => bail!("{SPLIT_ENV} must be a positive number of bytes, not {value:?}"),
    };
    Ok(Some(Split {
        // Not 0: an empty file has no chunk to decode.
        threshold: 1,
        chunk,
        threads: 2,
        caller_helps: false,
    }))
}

/// The events of an input being decoded on background threads (from
/// [`read_events`]): an iterator of events or errors, as
/// [`agui_codec::Reader`] yields them.
#[derive(Debug)]
pub struct Events {
    /// Taken only when dropped.
    reader: Option<ThreadedReader>,
    stdin: bool,
}

impl Events {
    fn reader(&mut self) -> &mut ThreadedReader {
        self.reader
            .as_mut()
            .expect("the reader is taken only on drop")
    }

    /// The next batch of events, an error, or `None` at the end.
    pub fn next_batch(&mut self) -> Option<Result<Vec<Event>, DecodeError>> {
        self.reader().next_batch()
    }

    /// The next chunk of events (lent until the next call), an error, or
    /// `None` at the end.
    pub fn next_chunk(&mut self) -> Option<Result<&EventChunk, DecodeError>> {
        self.reader().next_chunk()
    }

    /// The input's format: given, detected, or (for input that began with
    /// whitespace) known once decoding got that far.
    pub fn format(&self) -> Option<Format> {
        self.reader.as_ref().and_then(ThreadedReader::format)
    }
}

impl Iterator for Events {
    type Item = Result<Event, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.reader().next()
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let Some(reader) = self.reader.take() else {
            return;
        };
        if self.stdin {
            // Dropping the reader waits for its thread, which may be blocked
            // reading a terminal or a live pipe that never ends: a command
            // that stops early (at an error) must not wait for more input.
            // The thread ends with the process.
            std::mem::forget(reader);
        } else {
            // A file's threads stop at their next batch.
            drop(reader);
        }
    }
}

/// A buffered standard output.
pub type Stdout = BufWriter<StdoutSink>;

/// A buffered standard output, written through its own descriptor while
/// the standard library's handle stays locked (so nothing else writes in
/// between). The library's handle is line-buffered: it searches every
/// write for its last line end, a pass over each large write (a snapshot
/// event of many megabytes) that nothing here needs.
///
/// Every error it returns says it was writing to standard output
/// ([`StdoutError`]) and keeps the kind of the error underneath, so a
/// closed pipe is still [`io::ErrorKind::BrokenPipe`]. A standard output
/// that was closed when the process started (`agui ... >&-`) fails every
/// write with `EBADF`, as `cat` does, instead of writing into the
/// `/dev/null` the standard library put in its place.
pub fn stdout() -> Stdout {
    let mut lock = io::stdout().lock();
    let fd = if stdout_closed_at_start() {
        Err(io::Error::from_raw_os_error(EBADF))
    } else {
        lock.flush()
            .and_then(|()| lock.as_fd().try_clone_to_owned())
            .map(File::from)
    };
    BufWriter::with_capacity(1 << 16, StdoutSink { fd, _lock: lock })
}

/// Where [`stdout`] writes: a duplicate of the standard output's
/// descriptor, with the handle held locked beside it; or, when there is
/// none to write to, why not (each write returns that error).
pub struct StdoutSink {
    fd: Result<File, io::Error>,
    _lock: io::StdoutLock<'static>,
}

impl StdoutSink {
    fn file(&mut self) -> io::Result<&mut File> {
        match &mut self.fd {
            Ok(file) => Ok(file),
            Err(err) => Err(StdoutError::wrap(copy_error(err))),
        }
    }
}

impl Write for StdoutSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file()?.write(buf).map_err(StdoutError::wrap)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.file()?.write_vectored(bufs).map_err(StdoutError::wrap)
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.fd {
            // A file has nothing of its own to flush.
            Ok(file) => file.flush().map_err(StdoutError::wrap),
            // Nothing written, nothing lost.
            Err(_) => Ok(()),
        }
    }
}

/// `err` again (an `io::Error` is not `Clone`): its OS code, or its kind
/// and text.
fn copy_error(err: &io::Error) -> io::Error {
    match err.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(err.kind(), err.to_string()),
    }
}

/// A failed write to standard output: `cannot write to standard output:
/// CAUSE`, carried inside an [`io::Error`] of the cause's kind.
#[derive(Debug)]
pub struct StdoutError(io::Error);

impl StdoutError {
    /// `err` as an error of the same kind that says where it happened.
    fn wrap(err: io::Error) -> io::Error {
        if err.get_ref().is_some_and(|inner| inner.is::<StdoutError>()) {
            return err;
        }
        io::Error::new(err.kind(), StdoutError(err))
    }
}

impl std::fmt::Display for StdoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write to standard output: {}", self.0)
    }
}

impl std::error::Error for StdoutError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// `EBADF`, the same number on every Unix.
const EBADF: i32 = 9;

/// True when the process started with its standard output closed.
///
/// The standard library's start-up opens `/dev/null` on a standard
/// descriptor it finds closed, so by `main` a closed standard output looks
/// like `> /dev/null`. A function in `.init_array` runs before that start-up
/// (the C runtime calls it before `main`) and records what it finds. Where
/// there is no such section to use, a closed standard output is not
/// detected.
pub fn stdout_closed_at_start() -> bool {
    #[cfg(target_os = "linux")]
    {
        at_start::STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(target_os = "linux")]
mod at_start {
    use std::ffi::c_int;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Set before `main` when descriptor 1 was closed.
    pub static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

    /// Runs before the standard library's start-up (see
    /// [`super::stdout_closed_at_start`]).
    #[used]
    #[unsafe(link_section = ".init_array")]
    static RECORD: extern "C" fn() = record;

    /// `F_GETFD` (the same on every Linux architecture).
    const F_GETFD: c_int = 1;

    unsafe extern "C" {
        fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
    }

    extern "C" fn record() {
        // SAFETY: `fcntl(fd, F_GETFD)` only reads the descriptor's flags and
        // takes no third argument; on a closed descriptor it returns -1
        // (EBADF). Nothing here can panic or allocate.
        let flags = unsafe { fcntl(1, F_GETFD) };
        if flags == -1 {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
        }
    }
}

/// Writes and flushes, for one-shot outputs.
pub fn write_all_stdout(bytes: &[u8]) -> io::Result<()> {
    let mut out = stdout();
    out.write_all(bytes)?;
    out.flush()
}

/// Writes `value` as JSON to `out` (pretty-printed or on one line); a
/// failed write comes back as the writer's own `io::Error`, not inside a
/// `serde_json::Error`, so it keeps its kind and message.
pub fn write_json<T: serde::Serialize + ?Sized>(
    out: &mut impl Write,
    value: &T,
    pretty: bool,
) -> io::Result<()> {
    let written = if pretty {
        serde_json::to_writer_pretty(out, value)
    } else {
        serde_json::to_writer(out, value)
    };
    written.map_err(io::Error::from)
}

/// True when the error chain ends in a closed pipe: the reader went away
/// (`agui ... | head`), which is not a failure. Looks at every cause, and
/// inside a `serde_json::Error` at the write error it carries.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == Some(io::ErrorKind::BrokenPipe)
    })
}
