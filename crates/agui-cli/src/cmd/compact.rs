//! `agui compact`: fewer events, the same meaning.
//!
//! Reading and decoding run on a background thread (`ThreadedReader`) that
//! lends the events of an NDJSON file as slices of its read buffer, so
//! decoding and compaction overlap on two cores, and `deltas` copies only the
//! events it holds back (the pieces it merges, most of a log, never are).
//! Memory stays bounded by what is open at once (`deltas`, `snapshot`). `latest` reads a
//! file two or three times and holds the run index and the conversation, not
//! the events; from standard input (which cannot be read again) it holds
//! the log.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agui_codec::{DecodeOptions, Format, Writer};
use agui_history::compact::{self, DeltaCompactor, LatestOptions, Mode, SnapshotCompactor};
use agui_history::reduce::Conversation;
use agui_protocol::{Event, EventRef};
use anyhow::{Context, bail};
use serde_json::Value;

use crate::io::{
    Events, read_event_chunks_on_one_thread, read_events, read_events_on_one_thread, stdout,
};
use crate::progress::{self, Unit};

/// Compact an event stream without changing its meaning.
///
/// Which mode for what (sizes for a 200-run demo thread of 0.54 MB, see
/// docs/compaction.md):
///   deltas    the same log, every event in place, streams merged
///             (0.25 MB). For storing and replaying a log.
///   latest    one run envelope restoring the thread (0.11 MB). For
///             handing a client the current conversation.
///   snapshot  one checkpoint per run, each restating the whole
///             conversation so far (11.5 MB): the output grows with the
///             square of the number of runs. For logs whose every run must
///             restore on its own; --runs N restates only the last N runs.
///
/// A warning is printed as soon as the output passes 4x the input read.
#[derive(clap::Args)]
pub struct Args {
    /// The event stream (JSON array, NDJSON or SSE, detected); `-` or nothing
    /// for standard input.
    pub file: Option<PathBuf>,
    /// deltas: merged streams, every event in place; snapshot: one checkpoint
    /// per run, restating the conversation (grows with the square of the
    /// runs); latest: one run envelope restoring the thread.
    #[arg(long, default_value = "deltas", value_parser = parse_mode)]
    pub mode: Mode,
    /// With --mode snapshot: checkpoints for the last N runs only, the
    /// earlier runs as in deltas (the same guarantees, linear size).
    #[arg(long, value_name = "N")]
    pub runs: Option<u64>,
    /// With --mode latest: restate this run (its branch) instead of the last.
    #[arg(long, value_name = "RUN_ID")]
    pub branch: Option<String>,
    /// The RunAgentInput (or {messages, state}) the consumer starts from;
    /// snapshot and latest restate the conversation, so they need it.
    #[arg(long, value_name = "F")]
    pub from_input: Option<PathBuf>,
    /// Output format (default: the input's).
    #[arg(long, value_parser = parse_format)]
    pub to: Option<Format>,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse::<Mode>().map_err(|e| e.to_string())
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse::<Format>().map_err(|e| e.to_string())
}

/// Events compacted between two writes of the output (and updates of the
/// progress bar and checks of the output's growth). A fixed count, not the
/// decoder's batches: the output, its growth warning and what is written
/// before an input error do not depend on how decoding was split.
const STEP: usize = 4096;

/// Counts of one side of the compaction.
#[derive(Default, Clone, Copy)]
struct Tally {
    events: u64,
    bytes: u64,
}

impl Tally {
    /// Counts one event of `len` bytes.
    fn add(&mut self, len: usize) {
        self.events += 1;
        self.bytes += len as u64;
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.branch.is_some() && args.mode != Mode::Latest {
        bail!("--branch only applies to --mode latest");
    }
    if args.runs.is_some() && args.mode != Mode::Snapshot {
        bail!("--runs only applies to --mode snapshot");
    }
    let start = match &args.from_input {
        Some(path) => read_start(path)?,
        None => Conversation::default(),
    };
    if args.mode == Mode::Latest
        && let Some(path) = args.file.as_deref().filter(|p| p.as_os_str() != "-")
    {
        let (read, out) = latest_from_file(&args, &start, path)?;
        summary(&args, read, out);
        return Ok(ExitCode::SUCCESS);
    }
    // `--runs N` needs the number of runs before the first one is written
    // (counted before decoding starts: from standard input, it is an error).
    let total_runs = match args.runs {
        Some(_) => Some(count_runs(args.file.as_deref())?),
        None => None,
    };
    // Decoding on one background thread: compaction keeps the other core
    // busy (see `read_event_chunks_on_one_thread`).
    let input = read_event_chunks_on_one_thread(args.file.as_deref(), DecodeOptions::default())?;
    let bar = progress::bar(input_size(args.file.as_deref()), Unit::Bytes, "compact");
    let mut read = Tally::default();
    let mut out = Tally::default();
    let result = compact_stream(&args, &start, input, &mut read, &mut out, &bar, total_runs);
    bar.finish_and_clear();
    result?;
    summary(&args, read, out);
    Ok(ExitCode::SUCCESS)
}

/// The summary line on standard error.
fn summary(args: &Args, read: Tally, out: Tally) {
    let pct = |o: u64, i: u64| {
        if i == 0 {
            100.0
        } else {
            100.0 * o as f64 / i as f64
        }
    };
    eprintln!(
        "agui compact ({}): {} events, {} bytes in -> {} events, {} bytes out ({:.1}% of events, {:.1}% of bytes)",
        args.mode,
        read.events,
        read.bytes,
        out.events,
        out.bytes,
        pct(out.events, read.events),
        pct(out.bytes, read.bytes),
    );
}

/// `latest` over a file, read anew for each pass of
/// [`compact::compact_latest_from`].
fn latest_from_file(
    args: &Args,
    start: &Conversation,
    path: &Path,
) -> anyhow::Result<(Tally, Tally)> {
    File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let failure: RefCell<Option<anyhow::Error>> = RefCell::new(None);
    let detected: Cell<Option<Format>> = Cell::new(None);
    let read = Cell::new(Tally::default());
    let passes = Cell::new(0u32);
    let (failure_ref, detected_ref, read_ref) = (&failure, &detected, &read);
    let source = || {
        let (failure, detected, read) = (failure_ref, detected_ref, read_ref);
        passes.set(passes.get() + 1);
        let first = passes.get() == 1;
        // Each pass decodes the file anew on a background thread.
        let mut reader = match read_events_on_one_thread(Some(path), DecodeOptions::default()) {
            Ok(reader) => Some(reader),
            Err(e) => {
                failure.replace(Some(e));
                None
            }
        };
        std::iter::from_fn(move || {
            let r = reader.as_mut()?;
            if failure.borrow().is_some() {
                return None;
            }
            match r.next() {
                Some(Ok(event)) => {
                    if first {
                        let mut t = read.get();
                        t.add(event.len_bytes());
                        read.set(t);
                        if detected.get().is_none() {
                            detected.set(r.format());
                        }
                    }
                    Some(event)
                }
                Some(Err(e)) => {
                    failure.replace(Some(anyhow::Error::new(e).context(cannot_read(Some(path)))));
                    None
                }
                None => {
                    if first && detected.get().is_none() {
                        detected.set(r.format());
                    }
                    None
                }
            }
        })
    };
    let options = LatestOptions {
        start: start.clone(),
        branch: args.branch.clone(),
    };
    let mut out = Tally::default();
    let mut writer: Option<Writer<_>> = None;
    let mut emit = |event: Event| -> Result<(), compact::CompactError> {
        let w = writer.get_or_insert_with(|| {
            let format = args.to.or(detected.get()).unwrap_or(Format::Ndjson);
            Writer::new(stdout(), format)
        });
        out.add(event.len_bytes());
        w.write_event(&event)
            .map_err(|e| compact::CompactError::Emit(Box::new(e)))
    };
    let result = compact::compact_latest_from(source, &options, &mut emit);
    if let Some(err) = failure.take() {
        return Err(err);
    }
    result?;
    let w = match writer {
        Some(w) => w,
        None => Writer::new(
            stdout(),
            args.to.or(detected.get()).unwrap_or(Format::Ndjson),
        ),
    };
    let mut inner = w.finish().context("cannot write the output")?;
    inner.flush().context("cannot write the output")?;
    Ok((read.get(), out))
}

/// The output size, past this many times the input read so far, gets a
/// warning on standard error.
const GROWTH_WARNING: u64 = 4;

fn compact_stream(
    args: &Args,
    start: &Conversation,
    mut input: Events,
    read: &mut Tally,
    tally: &mut Tally,
    bar: &indicatif::ProgressBar,
    total_runs: Option<u64>,
) -> anyhow::Result<()> {
    let mut work = match args.mode {
        Mode::Deltas => Work::Deltas(DeltaCompactor::new()),
        Mode::Snapshot => Work::Snapshot(match (total_runs, args.runs) {
            (Some(total), Some(last)) => SnapshotCompactor::last_runs(start, total, last),
            _ => SnapshotCompactor::new(start),
        }),
        Mode::Latest => Work::Latest(Vec::new()),
    };
    let mut output = Output {
        writer: None,
        to: args.to,
        mode: args.mode,
        warned: false,
        pending: Vec::new(),
        marks: Vec::new(),
    };
    // Events of the step being taken.
    let mut taken = 0usize;
    while let Some(item) = input.next_chunk() {
        // The events of a step cut short by an input error are left out.
        let chunk = match item {
            Ok(chunk) => chunk,
            Err(err) => {
                output.write(input.format(), tally, bar)?;
                return Err(anyhow::Error::new(err).context(cannot_read(args.file.as_deref())));
            }
        };
        let mut failed = None;
        for event in chunk.iter() {
            read.add(event.len_bytes());
            if let Err(err) = work.push(event) {
                failed = Some(err);
                break;
            }
            taken += 1;
            if taken == STEP {
                taken = 0;
                // A write that failed is not tried again.
                output.step(&mut work, *read, tally, bar)?;
            }
        }
        // The chunk is given back: the format is known by now, and the
        // steps it completed are written (before a compaction error too).
        output.write(input.format(), tally, bar)?;
        if let Some(err) = failed {
            return Err(err);
        }
        bar.set_position(read.bytes + read.events);
    }
    work.finish(start, args.branch.as_ref())?;
    output.step(&mut work, *read, tally, bar)?;
    let writer = output.write(input.format(), tally, bar)?;
    let mut inner = writer
        .take()
        .unwrap_or_else(|| Writer::new(stdout(), args.to.unwrap_or(Format::Ndjson)))
        .finish()
        .context("cannot write the output")?;
    inner.flush().context("cannot write the output")?;
    Ok(())
}

/// What a mode does with the events it reads.
// One value per process: the size of its variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Work {
    Deltas(DeltaCompactor),
    Snapshot(SnapshotCompactor),
    /// The whole log (read from standard input, which cannot be read twice),
    /// then its one run envelope.
    Latest(Vec<Event>),
    /// `latest`'s output, once the log is in.
    LatestDone(Vec<Event>),
}

impl Work {
    fn push(&mut self, event: EventRef<'_>) -> anyhow::Result<()> {
        match self {
            // The compactor copies only the events it holds back.
            Work::Deltas(compactor) => compactor.push(event)?,
            Work::Snapshot(compactor) => compactor.push(event.to_event())?,
            Work::Latest(events) => events.push(event.to_event()),
            Work::LatestDone(_) => bail!("an event after the end of the input"),
        }
        Ok(())
    }

    /// Moves what is ready into `out`.
    fn drain_into(&mut self, out: &mut Vec<Event>) {
        match self {
            Work::Deltas(compactor) => out.extend(compactor.drain()),
            Work::Snapshot(compactor) => out.extend(compactor.drain()),
            Work::Latest(_) => {}
            Work::LatestDone(events) => out.append(events),
        }
    }

    fn finish(&mut self, start: &Conversation, branch: Option<&String>) -> anyhow::Result<()> {
        match self {
            Work::Deltas(compactor) => compactor.finish()?,
            Work::Snapshot(compactor) => compactor.finish()?,
            Work::Latest(events) => {
                let options = LatestOptions {
                    start: start.clone(),
                    branch: branch.cloned(),
                };
                *self =
                    Work::LatestDone(compact::compact_latest(std::mem::take(events), &options)?);
            }
            Work::LatestDone(_) => {}
        }
        Ok(())
    }
}

/// The output, written step by step once the format is known.
struct Output {
    writer: Option<Writer<crate::io::Stdout>>,
    to: Option<Format>,
    mode: Mode,
    warned: bool,
    /// Released events not written yet.
    pending: Vec<Event>,
    /// The end of each step in `pending`, and the input read by then.
    marks: Vec<(usize, Tally)>,
}

impl Output {
    /// Ends a step: what `work` released is written now when the format is
    /// known, or else with the next [`Output::write`].
    fn step(
        &mut self,
        work: &mut Work,
        read: Tally,
        tally: &mut Tally,
        bar: &indicatif::ProgressBar,
    ) -> anyhow::Result<()> {
        // With the format known and nothing waiting, the compactor's events
        // go straight to the writer, borrowed.
        if let (Some(writer), Work::Deltas(compactor), true) =
            (self.writer.as_mut(), &mut *work, self.marks.is_empty())
        {
            compactor
                .drain_each(|event| {
                    tally.add(event.len_bytes());
                    writer.write_event(event)
                })
                .context("cannot write the output")?;
            progress_of(&mut self.warned, self.mode, read, *tally, bar);
            return Ok(());
        }
        work.drain_into(&mut self.pending);
        self.marks.push((self.pending.len(), read));
        if self.writer.is_some() {
            self.write(None, tally, bar)?;
        }
        Ok(())
    }

    /// Writes the finished steps, in the format given, detected (`format`)
    /// or NDJSON; returns the writer for the end.
    fn write(
        &mut self,
        format: Option<Format>,
        tally: &mut Tally,
        bar: &indicatif::ProgressBar,
    ) -> anyhow::Result<&mut Option<Writer<crate::io::Stdout>>> {
        if self.marks.is_empty() {
            return Ok(&mut self.writer);
        }
        let to = self.to;
        let writer = self
            .writer
            .get_or_insert_with(|| Writer::new(stdout(), to.or(format).unwrap_or(Format::Ndjson)));
        let mut from = 0;
        let marks = std::mem::take(&mut self.marks);
        for &(end, read) in &marks {
            for event in &self.pending[from..end] {
                tally.add(event.len_bytes());
                writer
                    .write_event(event)
                    .context("cannot write the output")?;
            }
            from = end;
            progress_of(&mut self.warned, self.mode, read, *tally, bar);
        }
        self.pending.clear();
        Ok(&mut self.writer)
    }
}

/// Shows how far the input is read and the output's size, and warns once
/// (`warned`) when the output outgrows the input.
fn progress_of(
    warned: &mut bool,
    mode: Mode,
    read: Tally,
    tally: Tally,
    bar: &indicatif::ProgressBar,
) {
    // Event bytes plus a separator each: the input's size for NDJSON, close
    // to it for the other framings.
    bar.set_position(read.bytes + read.events);
    bar.set_message(format!(
        "-> {} out",
        progress::amount(tally.bytes as f64, Unit::Bytes)
    ));
    if !*warned && read.bytes > 0 && tally.bytes > GROWTH_WARNING * read.bytes {
        *warned = true;
        progress::warn(bar, &growth_warning(mode, tally.bytes, read.bytes));
    }
}

/// The warning printed once the output passes [`GROWTH_WARNING`] times the
/// input read so far.
fn growth_warning(mode: Mode, out: u64, read: u64) -> String {
    let mut line = format!(
        "agui compact: warning: the output ({}) is already more than {GROWTH_WARNING}x the input read so far ({})",
        progress::amount(out as f64, Unit::Bytes),
        progress::amount(read as f64, Unit::Bytes),
    );
    if mode == Mode::Snapshot {
        line.push_str(
            ": every snapshot checkpoint restates the whole conversation, so the output grows \
             with the square of the number of runs. --mode snapshot --runs N restates only the \
             last N runs; --mode deltas keeps the log small; --mode latest restores the thread \
             in one run",
        );
    }
    line
}

/// The size of the input file, when it is one.
fn input_size(path: Option<&Path>) -> Option<u64> {
    let path = path.filter(|p| p.as_os_str() != "-")?;
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// The runs (`RUN_STARTED` events) of the input file, counted in a first
/// pass for `--runs`.
/// What failed to read, naming the input (what and where).
fn cannot_read(path: Option<&Path>) -> String {
    match path.filter(|p| p.as_os_str() != "-") {
        Some(p) => format!("cannot read {}", p.display()),
        None => "cannot read standard input".to_owned(),
    }
}

fn count_runs(path: Option<&Path>) -> anyhow::Result<u64> {
    let Some(path) = path.filter(|p| p.as_os_str() != "-") else {
        bail!(
            "--runs reads the input twice (it counts the runs first): give a file, not standard input"
        );
    };
    let mut runs = 0u64;
    for event in read_events(Some(path), DecodeOptions::default())? {
        let event = event.with_context(|| cannot_read(Some(path)))?;
        if event.event_type() == &agui_protocol::EventType::RunStarted {
            runs += 1;
        }
    }
    Ok(runs)
}

/// The starting conversation from a RunAgentInput or a `{messages, state}`.
fn read_start(path: &Path) -> anyhow::Result<Conversation> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let Value::Object(mut object) = value else {
        bail!(
            "{} must hold a JSON object (a RunAgentInput)",
            path.display()
        );
    };
    let messages = match object.remove("messages") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(messages)) => messages,
        Some(_) => bail!("{}: \"messages\" must be an array", path.display()),
    };
    let state = match object.remove("state") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(state) => state,
    };
    Ok(Conversation { messages, state })
}
