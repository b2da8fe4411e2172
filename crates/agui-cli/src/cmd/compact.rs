//! `agui compact`: fewer events, the same meaning.
//!
//! Reading and decoding run on a background thread (`ThreadedReader`) that
//! hands events over in batches, so decoding and compaction overlap on two
//! cores. Memory stays
//! bounded by what is open at once (`deltas`, `snapshot`). `latest` reads a
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
use agui_protocol::Event;
use anyhow::{Context, bail};
use serde_json::Value;

use crate::io::{Events, read_events, read_events_on_one_thread, stdout};
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
    fn add(&mut self, event: &Event) {
        self.events += 1;
        self.bytes += event.len_bytes() as u64;
    }

    fn add_all(&mut self, batches: &[Vec<Event>]) {
        batches.iter().flatten().for_each(|event| self.add(event));
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
    // busy (see `read_events_on_one_thread`).
    let input = read_events_on_one_thread(args.file.as_deref(), DecodeOptions::default())?;
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
                        t.add(&event);
                        read.set(t);
                        if detected.get().is_none() {
                            detected.set(r.format());
                        }
                    }
                    Some(event)
                }
                Some(Err(e)) => {
                    failure.replace(Some(anyhow::Error::new(e).context("cannot read the input")));
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
        out.add(&event);
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
    // The format is known once the first batch is in (or the input ended).
    let first = input.next_batch();
    let format = args.to.or(input.format()).unwrap_or(Format::Ndjson);
    let mut writer = Writer::new(stdout(), format);
    let mut warned = false;
    let mode = args.mode;
    // Writes what the compactor let go of, after every STEP events read and
    // at the end; `read` is the input taken so far.
    let mut write = |events: &mut dyn Iterator<Item = Event>, read: Tally| -> anyhow::Result<()> {
        for event in events {
            tally.add(&event);
            writer
                .write_event(&event)
                .context("cannot write the output")?;
        }
        // Event bytes plus a separator each: the input's size for NDJSON,
        // close to it for the other framings.
        bar.set_position(read.bytes + read.events);
        bar.set_message(format!(
            "-> {} out",
            progress::amount(tally.bytes as f64, Unit::Bytes)
        ));
        if !warned && read.bytes > 0 && tally.bytes > GROWTH_WARNING * read.bytes {
            warned = true;
            progress::warn(bar, &growth_warning(mode, tally.bytes, read.bytes));
        }
        Ok(())
    };
    let mut steps = Steps::new(first, input);
    match args.mode {
        Mode::Deltas => {
            let mut compactor = DeltaCompactor::new();
            for step in steps.by_ref() {
                let step = step?;
                read.add_all(&step);
                for event in step.into_iter().flatten() {
                    compactor.push(event)?;
                }
                write(&mut compactor.drain(), *read)?;
            }
            compactor.finish()?;
            write(&mut compactor.drain(), *read)?;
        }
        Mode::Snapshot => {
            let mut compactor = match (total_runs, args.runs) {
                (Some(total), Some(last)) => SnapshotCompactor::last_runs(start, total, last),
                _ => SnapshotCompactor::new(start),
            };
            for step in steps.by_ref() {
                let step = step?;
                read.add_all(&step);
                for event in step.into_iter().flatten() {
                    compactor.push(event)?;
                }
                write(&mut compactor.drain(), *read)?;
            }
            compactor.finish()?;
            write(&mut compactor.drain(), *read)?;
        }
        Mode::Latest => {
            let mut events = Vec::new();
            for step in steps.by_ref() {
                let step = step?;
                read.add_all(&step);
                bar.set_position(read.bytes + read.events);
                events.extend(step.into_iter().flatten());
            }
            let options = LatestOptions {
                start: start.clone(),
                branch: args.branch.clone(),
            };
            let compacted = compact::compact_latest(events, &options)?;
            write(&mut compacted.into_iter(), *read)?;
        }
    }
    let mut inner = writer.finish().context("cannot write the output")?;
    inner.flush().context("cannot write the output")?;
    Ok(())
}

/// The input regrouped in steps of [`STEP`] events (the last one shorter),
/// whatever batches the decoder handed over; a step is a few of those
/// batches (one is cut only where it straddles a step's end). An input
/// error ends it, and the events of the step it interrupted are left out,
/// so what is written before the error does not depend on how decoding was
/// split.
struct Steps {
    /// The decoder's first batch, taken to learn the format.
    first: Option<Result<Vec<Event>, agui_codec::DecodeError>>,
    input: Events,
    /// The end of a batch cut at a step's end: the next step's start.
    carry: Option<Vec<Event>>,
    step: Vec<Vec<Event>>,
    /// Events in `step`.
    len: usize,
    done: bool,
}

impl Steps {
    fn new(first: Option<Result<Vec<Event>, agui_codec::DecodeError>>, input: Events) -> Steps {
        Steps {
            first,
            input,
            carry: None,
            step: Vec::new(),
            len: 0,
            done: false,
        }
    }
}

impl Iterator for Steps {
    type Item = anyhow::Result<Vec<Vec<Event>>>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let batch = match (self.carry.take(), self.first.take()) {
                (Some(carry), _) => Some(Ok(carry)),
                (None, Some(first)) => Some(first),
                (None, None) => self.input.next_batch(),
            };
            match batch {
                Some(Ok(mut events)) => {
                    let room = STEP - self.len;
                    if events.len() > room {
                        self.carry = Some(events.split_off(room));
                    }
                    self.len += events.len();
                    self.step.push(events);
                    if self.len == STEP {
                        self.len = 0;
                        return Some(Ok(std::mem::take(&mut self.step)));
                    }
                }
                Some(Err(err)) => {
                    self.done = true;
                    self.step.clear();
                    return Some(Err(anyhow::Error::new(err).context("cannot read the input")));
                }
                None => {
                    self.done = true;
                    if self.len > 0 {
                        return Some(Ok(std::mem::take(&mut self.step)));
                    }
                }
            }
        }
        None
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
fn count_runs(path: Option<&Path>) -> anyhow::Result<u64> {
    let Some(path) = path.filter(|p| p.as_os_str() != "-") else {
        bail!(
            "--runs reads the input twice (it counts the runs first): give a file, not standard input"
        );
    };
    let mut runs = 0u64;
    for event in read_events(Some(path), DecodeOptions::default())? {
        let event = event.context("cannot read the input")?;
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
