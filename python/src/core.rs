//! The GIL-free work of each function: bytes in, bytes out, with the same
//! library calls (and so the same verdicts and output) as the `agui` CLI.

use std::any::Any;

use agui_codec::{DecodeOptions, Format, Reader, Writer};
use agui_history::artifact::{self, ExportOptions, Source};
use agui_history::compact::{self, CompactError, DeltaCompactor, Mode, SnapshotCompactor};
use agui_history::lineage::{Lineage, LineageError, RunIndex};
use agui_history::reduce::{Conversation, ReduceError, Reducer};
use agui_protocol::Event;
use agui_protocol::chunks::ChunkExpander;
use agui_protocol::verify::Verifier;
use pyo3::prelude::*;
use serde_json::Value;

/// Which Python exception a failure becomes.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Value,
    Decode,
    Verify,
    Reduce,
    Compact,
    Lineage,
    Artifact,
    Store,
    Internal,
}

/// An attribute value set on the raised exception.
#[derive(Debug, Clone)]
pub enum Attr {
    Int(u64),
    Str(String),
}

/// A failure built without the GIL, raised as a Python exception later.
#[derive(Debug)]
pub struct Failure {
    kind: Kind,
    message: String,
    attrs: Vec<(&'static str, Attr)>,
}

impl Failure {
    pub fn new(kind: Kind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
            attrs: Vec::new(),
        }
    }

    pub fn with(mut self, name: &'static str, value: Attr) -> Failure {
        self.attrs.push((name, value));
        self
    }

    pub fn panic(payload: Box<dyn Any + Send>) -> Failure {
        let what = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "unknown panic".to_owned());
        Failure::new(
            Kind::Internal,
            format!("internal error (a bug in agui): {what}"),
        )
    }

    pub fn into_py_err(self, py: Python<'_>) -> PyErr {
        use crate::*;
        let err = match self.kind {
            Kind::Value => pyo3::exceptions::PyValueError::new_err(self.message.clone()),
            Kind::Decode => AguiDecodeError::new_err(self.message.clone()),
            Kind::Verify => AguiVerifyError::new_err(self.message.clone()),
            Kind::Reduce => AguiReduceError::new_err(self.message.clone()),
            Kind::Compact => AguiCompactError::new_err(self.message.clone()),
            Kind::Lineage => AguiLineageError::new_err(self.message.clone()),
            Kind::Artifact => AguiArtifactError::new_err(self.message.clone()),
            Kind::Store => AguiStoreError::new_err(self.message.clone()),
            Kind::Internal => AguiInternalError::new_err(self.message.clone()),
        };
        let value = err.value(py);
        for (name, attr) in self.attrs {
            let set = match attr {
                Attr::Int(i) => value.setattr(name, i),
                Attr::Str(s) => value.setattr(name, s),
            };
            if let Err(e) = set {
                return e;
            }
        }
        if value.setattr("reason_text", self.message).is_err() {
            // Only informative; the message is the exception's argument.
        }
        err
    }
}

pub type Result<T> = std::result::Result<T, Failure>;

fn format_of(name: &str) -> Result<Format> {
    name.parse::<Format>()
        .map_err(|e| Failure::new(Kind::Value, e))
}

fn decode_failure(err: agui_codec::DecodeError, i: usize) -> Failure {
    let index = err.position().map_or(i as u64, |p| p.index);
    Failure::new(
        Kind::Decode,
        format!("event #{index}: cannot decode: {err}"),
    )
    .with("index", Attr::Int(index))
    .with("reason", Attr::Str(err.to_string()))
}

/// Decodes a whole stream (format detected unless given).
pub fn decode(data: &[u8], format: Option<&str>) -> Result<Vec<Event>> {
    let options = DecodeOptions {
        format: format.map(format_of).transpose()?,
        ..DecodeOptions::default()
    };
    let mut events = Vec::new();
    for (i, item) in Reader::with_options(data, options).enumerate() {
        events.push(item.map_err(|e| decode_failure(e, i))?);
    }
    Ok(events)
}

fn write_events<'a>(
    events: impl IntoIterator<Item = &'a Event>,
    to: Format,
    first_id: Option<u64>,
) -> Result<Vec<u8>> {
    let mut writer = Writer::new(Vec::new(), to);
    let mut next = first_id;
    for event in events {
        let written = match next.as_mut() {
            Some(id) => {
                let seq = *id;
                *id = id.saturating_add(1);
                writer.write_event_with_id(event, seq)
            }
            None => writer.write_event(event),
        };
        written.map_err(|e| Failure::new(Kind::Internal, e.to_string()))?;
    }
    writer
        .finish()
        .map_err(|e| Failure::new(Kind::Internal, e.to_string()))
}

fn to_json(value: &impl serde::Serialize, pretty: bool) -> Result<Vec<u8>> {
    let mut out = if pretty {
        serde_json::to_vec_pretty(value)
    } else {
        serde_json::to_vec(value)
    }
    .map_err(|e| Failure::new(Kind::Internal, e.to_string()))?;
    if pretty {
        out.push(b'\n');
    }
    Ok(out)
}

pub fn encode(
    data: &[u8],
    to: &str,
    first_id: Option<u64>,
    format: Option<&str>,
) -> Result<Vec<u8>> {
    let to = format_of(to)?;
    let events = decode(data, format)?;
    write_events(&events, to, first_id)
}

fn verify_failure(index: usize, event_type: &str, reason: String) -> Failure {
    Failure::new(
        Kind::Verify,
        format!("event #{index} ({event_type}): {reason}"),
    )
    .with("index", Attr::Int(index as u64))
    .with("event_type", Attr::Str(event_type.to_owned()))
    .with("reason", Attr::Str(reason))
}

/// As `agui verify`: the first problem, counted at the input index.
pub fn verify(data: &[u8]) -> Result<usize> {
    let mut verifier = Verifier::new();
    let mut count = 0;
    for (i, item) in Reader::new(data).enumerate() {
        let event = item.map_err(|e| decode_failure(e, i))?;
        verifier
            .push(&event)
            .map_err(|e| verify_failure(i, event.type_name(), e.to_string()))?;
        count = i + 1;
    }
    Ok(count)
}

/// As `agui verify --all`: every problem.
pub fn verify_all(data: &[u8]) -> Result<Vec<(u64, String, String)>> {
    let mut verifier = Verifier::collecting();
    let mut out = Vec::new();
    for (i, item) in Reader::new(data).enumerate() {
        match item {
            Ok(event) => {
                if let Err(e) = verifier.push(&event) {
                    out.push((i as u64, event.type_name().to_owned(), e.to_string()));
                }
            }
            Err(err) => {
                let index = err.position().map_or(i as u64, |p| p.index);
                let recoverable = err.is_recoverable();
                out.push((index, String::new(), format!("cannot decode: {err}")));
                if !recoverable {
                    break;
                }
            }
        }
    }
    Ok(out)
}

/// As `agui convert --expand-chunks`.
pub fn expand_chunks(data: &[u8], to: &str) -> Result<Vec<u8>> {
    let to = format_of(to)?;
    let mut expander = ChunkExpander::new();
    let mut out = Vec::new();
    for (i, item) in Reader::new(data).enumerate() {
        let event = item.map_err(|e| decode_failure(e, i))?;
        let expanded = expander.push(&event).map_err(|e| {
            Failure::new(
                Kind::Reduce,
                format!(
                    "event #{i} ({}): cannot expand chunks: {e}",
                    event.type_name()
                ),
            )
            .with("index", Attr::Int(i as u64))
            .with("event_type", Attr::Str(event.type_name().to_owned()))
            .with("reason", Attr::Str(e.to_string()))
        })?;
        out.extend(expanded);
    }
    write_events(&out, to, None)
}

/// The starting conversation from `{"messages": [...], "state": ...}` JSON
/// (missing or null messages: none; missing or null state: `{}`).
fn start_of(start: Option<&[u8]>) -> Result<Conversation> {
    let Some(bytes) = start else {
        return Ok(Conversation::default());
    };
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| Failure::new(Kind::Value, format!("the start is not JSON: {e}")))?;
    let Value::Object(mut object) = value else {
        return Err(Failure::new(Kind::Value, "the start must be an object"));
    };
    let messages = match object.remove("messages") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(Failure::new(Kind::Value, "`messages` must be a list")),
    };
    let state = match object.remove("state") {
        None | Some(Value::Null) => Conversation::default().state,
        Some(v) => v,
    };
    Ok(Conversation { messages, state })
}

fn reduce_failure(err: &ReduceError, index: usize, event_type: &str) -> Failure {
    let reason = match err {
        ReduceError::Chunk { reason, .. } => format!("chunk expansion failed: {reason}"),
        ReduceError::UnexpandedChunk { .. } => "the chunk was not expanded".to_owned(),
        ReduceError::Throws { reason, .. } => format!("the official reducer throws: {reason}"),
        ReduceError::Field { source, .. } => format!("cannot decode a field: {source}"),
    };
    Failure::new(
        Kind::Reduce,
        format!("event #{index} ({event_type}): {reason}"),
    )
    .with("index", Attr::Int(index as u64))
    .with("event_type", Attr::Str(event_type.to_owned()))
    .with("reason", Attr::Str(reason))
}

/// As `agui reduce [--from-input]`.
pub fn reduce(data: &[u8], start: Option<&[u8]>, pretty: bool) -> Result<Vec<u8>> {
    let mut reducer = Reducer::new(start_of(start)?);
    for (i, item) in Reader::new(data).enumerate() {
        let event = item.map_err(|e| decode_failure(e, i))?;
        reducer
            .apply(&event)
            .map_err(|e| reduce_failure(&e, i, event.type_name()))?;
    }
    to_json(&reducer.into_conversation(), pretty)
}

fn compact_failure(err: CompactError) -> Failure {
    let failure = Failure::new(Kind::Compact, err.to_string());
    match err {
        CompactError::Reduce { index, .. } => failure.with("index", Attr::Int(index as u64)),
        _ => failure,
    }
}

/// As `agui compact --mode MODE [--branch RUN] [--from-input] --to TO`.
pub fn compact(
    data: &[u8],
    mode: &str,
    branch: Option<&str>,
    start: Option<&[u8]>,
    to: &str,
) -> Result<Vec<u8>> {
    let mode: Mode = mode
        .parse()
        .map_err(|e: compact::UnknownMode| Failure::new(Kind::Value, e.to_string()))?;
    if branch.is_some() && mode != Mode::Latest {
        return Err(Failure::new(
            Kind::Value,
            "branch only applies to mode=\"latest\"",
        ));
    }
    let to = format_of(to)?;
    let start = start_of(start)?;
    if mode == Mode::Latest {
        let events = decode(data, None)?;
        let out = compact::compact(events, mode, &start, branch).map_err(compact_failure)?;
        return write_events(&out, to, None);
    }
    compact_streaming(data, mode, &start, to)
}

/// Events decoded per batch handed from the decoding thread to the compactor.
const BATCH: usize = 4096;

/// `deltas` and `snapshot` as `agui compact` runs them: the input is decoded
/// on a second thread, a batch at a time, while this one compacts and
/// writes, so a large input costs about the slower of the two, not their sum.
fn compact_streaming(data: &[u8], mode: Mode, start: &Conversation, to: Format) -> Result<Vec<u8>> {
    enum Compactor {
        Deltas(Box<DeltaCompactor>),
        Snapshot(Box<SnapshotCompactor>),
    }
    impl Compactor {
        fn push(&mut self, event: Event) -> std::result::Result<(), CompactError> {
            match self {
                Compactor::Deltas(c) => c.push(event),
                Compactor::Snapshot(c) => c.push(event),
            }
        }
        fn finish(&mut self) -> std::result::Result<(), CompactError> {
            match self {
                Compactor::Deltas(c) => c.finish(),
                Compactor::Snapshot(c) => c.finish(),
            }
        }
        fn drain_into(&mut self, writer: &mut Writer<Vec<u8>>) -> Result<()> {
            let drained: &mut dyn Iterator<Item = Event> = match self {
                Compactor::Deltas(c) => &mut c.drain(),
                Compactor::Snapshot(c) => &mut c.drain(),
            };
            for event in drained {
                writer
                    .write_event(&event)
                    .map_err(|e| Failure::new(Kind::Internal, e.to_string()))?;
            }
            Ok(())
        }
    }
    let mut compactor = match mode {
        Mode::Snapshot => Compactor::Snapshot(Box::new(SnapshotCompactor::new(start))),
        _ => Compactor::Deltas(Box::default()),
    };
    std::thread::scope(|scope| {
        let (tx, batches) = std::sync::mpsc::sync_channel::<Result<Vec<Event>>>(4);
        scope.spawn(move || {
            let mut batch = Vec::with_capacity(BATCH);
            for (i, item) in Reader::new(data).enumerate() {
                match item {
                    Ok(event) => batch.push(event),
                    Err(err) => {
                        let _ = tx.send(Err(decode_failure(err, i)));
                        return;
                    }
                }
                if batch.len() == BATCH {
                    if tx.send(Ok(std::mem::take(&mut batch))).is_err() {
                        return; // the compactor stopped on an error
                    }
                    batch.reserve(BATCH);
                }
            }
            if !batch.is_empty() {
                let _ = tx.send(Ok(batch));
            }
        });
        // `deltas` output is never longer than its input in one format (a
        // guarantee of the mode), so an allocation of the input's size is
        // seldom outgrown and copied; pages never written cost nothing.
        let capacity = match mode {
            Mode::Deltas => data.len() + data.len() / 16,
            _ => data.len() / 2,
        };
        let mut writer = Writer::new(Vec::with_capacity(capacity), to);
        for batch in batches {
            for event in batch? {
                compactor.push(event).map_err(compact_failure)?;
            }
            compactor.drain_into(&mut writer)?;
        }
        compactor.finish().map_err(compact_failure)?;
        compactor.drain_into(&mut writer)?;
        writer
            .finish()
            .map_err(|e| Failure::new(Kind::Internal, e.to_string()))
    })
}

fn lineage_failure(err: LineageError) -> Failure {
    let failure = Failure::new(Kind::Lineage, err.to_string());
    match err {
        LineageError::Reduce { event_index, .. } => {
            let mut f = failure;
            f.kind = Kind::Reduce;
            f.with("index", Attr::Int(event_index as u64))
        }
        LineageError::UnknownRun { run_id } => failure.with("run_id", Attr::Str(run_id)),
        LineageError::MalformedRunStarted { event_index, .. } => {
            failure.with("index", Attr::Int(event_index as u64))
        }
        _ => failure,
    }
}

/// As `agui history --tree --json`: one JSON object per run, depth first.
pub fn run_tree(data: &[u8]) -> Result<Vec<u8>> {
    let events = decode(data, None)?;
    let index = RunIndex::build(&events).map_err(lineage_failure)?;
    let mut out = Vec::new();
    for (_, run) in index.depth_first() {
        serde_json::to_writer(&mut out, run)
            .map_err(|e| Failure::new(Kind::Internal, e.to_string()))?;
        out.push(b'\n');
    }
    Ok(out)
}

/// As `agui history --at RUN [--event N]`.
pub fn history_at(
    data: &[u8],
    run_id: &str,
    event: Option<usize>,
    start: Option<&[u8]>,
    pretty: bool,
) -> Result<Vec<u8>> {
    let start = start_of(start)?;
    let events = decode(data, None)?;
    let lineage = Lineage::new(&events).map_err(lineage_failure)?;
    let conversation = lineage
        .conversation_at(run_id, event, start)
        .map_err(lineage_failure)?;
    to_json(&conversation, pretty)
}

/// Messages a branch leaves out: (log index, message id).
pub type Dropped = Vec<(usize, String)>;

/// As `agui history --branch RUN [--event N] --to TO`; also the messages
/// left out.
pub fn branch_events(
    data: &[u8],
    run_id: &str,
    event: Option<usize>,
    to: &str,
) -> Result<(Vec<u8>, Dropped)> {
    let to = format_of(to)?;
    let events = decode(data, None)?;
    let lineage = Lineage::new(&events).map_err(lineage_failure)?;
    let branch = lineage.branch(run_id, event).map_err(lineage_failure)?;
    let out = write_events(branch.events.iter().map(|(_, e)| e.as_ref()), to, None)?;
    let dropped = branch
        .dropped
        .iter()
        .map(|d| (d.event_index, d.message_id.clone()))
        .collect();
    Ok((out, dropped))
}

/// As `agui export-artifact --run RUN`.
pub fn export_artifact(
    data: &[u8],
    run_id: &str,
    source: Option<&str>,
    started_at: Option<String>,
    finished_at: Option<String>,
    pretty: bool,
) -> Result<Vec<u8>> {
    let source = source
        .map(str::parse::<Source>)
        .transpose()
        .map_err(|e| Failure::new(Kind::Value, e))?;
    let events = decode(data, None)?;
    let options = ExportOptions {
        source,
        started_at,
        finished_at,
    };
    let export = artifact::export(&events, run_id, &options)
        .map_err(|e| Failure::new(Kind::Artifact, e.to_string()))?;
    to_json(&export.artifact, pretty)
}

/// As `agui validate-artifact`: the artifact, or why it is malformed.
pub fn validate_artifact(data: &[u8]) -> Result<Vec<u8>> {
    let text = std::str::from_utf8(data).map_err(|e| {
        Failure::new(
            Kind::Artifact,
            format!("malformed: not UTF-8 text (byte {})", e.valid_up_to()),
        )
    })?;
    let artifact = artifact::validate(text)
        .map_err(|e| Failure::new(Kind::Artifact, format!("malformed: {e}")))?;
    to_json(&artifact, false)
}
