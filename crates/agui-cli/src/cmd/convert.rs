//! `agui convert`: re-frame an event stream (JSON array, NDJSON, SSE)
//! losslessly: every event is written as the exact text it was read as.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use agui_codec::{DecodeOptions, Format, Writer};
use agui_protocol::EventRef;
use agui_protocol::chunks::ChunkExpander;
use anyhow::Context;

/// Arguments of `agui convert`.
#[derive(clap::Args)]
pub struct Args {
    /// Input file (`-` or nothing for standard input); its format is detected
    /// from the first bytes unless `--from` is given
    pub input: Option<PathBuf>,
    /// Output format
    #[arg(long, value_parser = parse_format)]
    pub to: Format,
    /// Input format (default: detect `[` JSON array, `{` NDJSON, SSE fields)
    #[arg(long, value_parser = parse_format)]
    pub from: Option<Format>,
    /// Expand TEXT_MESSAGE_CHUNK / TOOL_CALL_CHUNK / REASONING_MESSAGE_CHUNK
    /// into START/CONTENT/END events, as the official client does
    #[arg(long)]
    pub expand_chunks: bool,
    /// Number SSE frames with `id: <n>` lines, counting from this value
    #[arg(long, value_name = "FIRST")]
    pub sse_ids: Option<u64>,
    /// Largest event accepted, in bytes
    #[arg(long, value_name = "BYTES", default_value_t = agui_codec::DEFAULT_MAX_EVENT_SIZE)]
    pub max_event_size: usize,
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
}

/// Runs `agui convert`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let name = match args.input.as_deref() {
        Some(p) if p.as_os_str() != "-" => p.display().to_string(),
        _ => "<stdin>".to_owned(),
    };
    // Conversion reads no fields, unless it expands chunks: only then
    // does the decoder record member tables.
    let options = DecodeOptions {
        format: args.from,
        max_event_size: args.max_event_size,
        member_tables: args.expand_chunks,
    };
    let mut reader = crate::io::read_event_chunks(args.input.as_deref(), options)?;
    let size = args
        .input
        .as_deref()
        .filter(|p| p.as_os_str() != "-")
        .and_then(|p| std::fs::metadata(p).ok())
        .map(|m| m.len());
    let bar = crate::progress::bar(size, crate::progress::Unit::Bytes, "convert");
    let mut read = 0u64;
    let mut index = 0u64;
    let mut writer = Writer::new(crate::io::stdout(), args.to);
    let mut expander = args.expand_chunks.then(ChunkExpander::new);
    let mut next_id = args.sse_ids;
    let mut write = |writer: &mut Writer<_>, event: EventRef<'_>| match next_id.as_mut() {
        Some(id) => {
            let seq = *id;
            *id = id.saturating_add(1);
            writer.write_event_with_id(event, seq)
        }
        None => writer.write_event(event),
    };
    while let Some(item) = reader.next_chunk() {
        let chunk = match item {
            Ok(chunk) => chunk,
            Err(err) => {
                bar.finish_and_clear();
                // Keep what was converted so far, then report (a failed
                // write says it was writing to standard output).
                writer.flush()?;
                return Err(err).with_context(|| format!("cannot decode {name}"));
            }
        };
        for event in chunk.iter() {
            read += event.len_bytes() as u64 + 1;
            match expander.as_mut() {
                None => write(&mut writer, event)?,
                Some(expander) => {
                    let expanded = expander
                        .push(&event.to_event())
                        .with_context(|| format!("{name}: event {index}: cannot expand chunks"))?;
                    for event in &expanded {
                        write(&mut writer, event.as_event_ref())?;
                    }
                }
            }
            index += 1;
        }
        bar.set_position(read);
    }
    // As the official transformChunks, items still open at the end are left
    // open (no synthesized END events).
    let mut out = writer.finish()?;
    out.flush()?;
    bar.finish_and_clear();
    Ok(ExitCode::SUCCESS)
}
