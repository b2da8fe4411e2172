//! [`ThreadedReader`]: a stream decoded on a background thread; a big NDJSON
//! file on two.
//!
//! The caller's thread only receives batches of decoded events, so decoding
//! overlaps with whatever the caller does with them (compaction, reduction,
//! verification, writing). An NDJSON file of at least
//! [`ThreadedReader::PARALLEL_THRESHOLD`] bytes is cut at line boundaries into
//! chunks that two threads scan and validate in turn (chunk `k` on thread
//! `k % 2`); the caller takes the chunks back in order. Events, errors and
//! their positions are exactly those of [`Reader`] over the same file: each
//! chunk is decoded with the same NDJSON decoder (which gives the same
//! outcome however its input is split, a fuzzed property) and its positions
//! are shifted by what the chunks before it held.
//!
//! Memory: each thread reads its chunk in pieces of [`PIECE`] bytes and holds
//! at most [`QUEUE`] batches of [`BATCH`] events ahead of the caller, so the
//! reader's memory does not grow with the file.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use agui_protocol::Event;

use crate::ndjson::NdjsonDecoder;
use crate::{
    DecodeError, DecodeOptions, Detection, Format, Position, PushDecoder, Reader, detect_format,
};

/// Events per batch handed to the caller.
const BATCH: usize = 1024;
/// Batches a decoding thread may hold ahead of the caller.
const QUEUE: usize = 4;
/// Bytes read at once.
const PIECE: usize = 1 << 18;

/// What a decoding thread sends, in order.
enum Msg {
    /// Decoded events.
    Events(Vec<Event>),
    /// A decoding error; positions are relative to the chunk for `index`
    /// and `line`, absolute for bytes.
    Error(DecodeError),
    /// The format, once the sequential decoder knows it.
    Format(Option<Format>),
    /// The chunk is done: how many event indexes and line ends it held.
    End { events: u64, lines: u64 },
}

/// Decodes a file or a stream on background threads; an iterator of events
/// (or errors, as [`Reader`] yields them: it goes on after a recoverable
/// error and ends after any other).
pub struct ThreadedReader {
    format: Option<Format>,
    /// One channel per decoding thread.
    channels: Vec<Receiver<Msg>>,
    workers: Vec<JoinHandle<()>>,
    /// The chunk being taken (its channel is `chunk % channels.len()`).
    chunk: usize,
    /// How many chunks there are.
    chunks: usize,
    /// Event index and line of the current chunk's start.
    base_index: u64,
    base_line: u64,
    batch: std::vec::IntoIter<Event>,
    done: bool,
}

impl std::fmt::Debug for ThreadedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadedReader")
            .field("format", &self.format)
            .field("threads", &self.channels.len())
            .field("chunk", &self.chunk)
            .finish_non_exhaustive()
    }
}

/// How a [`ThreadedReader`] splits its work (tests pick tiny chunks).
#[derive(Debug, Clone, Copy)]
pub struct Split {
    /// Files at least this large (and NDJSON) are decoded on two threads.
    pub threshold: u64,
    /// The nominal chunk size (chunks end at the first line end at or after
    /// each multiple of it).
    pub chunk: u64,
    /// Decoding threads for a split file.
    pub threads: usize,
}

impl Default for Split {
    fn default() -> Split {
        Split {
            threshold: ThreadedReader::PARALLEL_THRESHOLD,
            // Small enough that both threads decode at once: a decoding
            // thread runs at most QUEUE batches (about 0.7 MB of a typical
            // stream) ahead of the caller, so with 8 MiB chunks the thread
            // holding the next chunk soon waits and the two mostly take
            // turns. `agui convert --to sse`, 1M events (165 MB), 2 cores,
            // medians: 149 ms in 1 MiB chunks, 207 ms in 8 MiB chunks, 221
            // ms on one decoding thread.
            chunk: 1 << 20,
            threads: 2,
        }
    }
}

impl ThreadedReader {
    /// NDJSON files from this size on are decoded on two threads.
    pub const PARALLEL_THRESHOLD: u64 = 16 << 20;

    /// Opens `path` and starts decoding it (format detected unless given).
    pub fn open(path: &Path, options: DecodeOptions) -> io::Result<ThreadedReader> {
        ThreadedReader::open_with(path, options, Split::default())
    }

    /// Like [`ThreadedReader::open`], with an explicit split policy.
    pub fn open_with(
        path: &Path,
        options: DecodeOptions,
        split: Split,
    ) -> io::Result<ThreadedReader> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let mut format = options.format;
        if format.is_none() {
            let mut head = vec![0u8; (len.min(1 << 16)) as usize];
            let n = read_at_most(&file, 0, &mut head)?;
            head.truncate(n);
            if let Detection::Format(found) = detect_format(&head, n as u64 == len) {
                format = Some(found);
            }
        }
        let parallel = format == Some(Format::Ndjson)
            && len >= split.threshold
            && split.threads > 1
            && split.chunk > 0;
        if parallel {
            let file = Arc::new(file);
            let chunks = len.div_ceil(split.chunk);
            let threads = split.threads.min(chunks as usize).max(1);
            let mut channels = Vec::with_capacity(threads);
            let mut workers = Vec::with_capacity(threads);
            for first in 0..threads {
                let (tx, rx) = mpsc::sync_channel(QUEUE);
                let file = Arc::clone(&file);
                let worker = std::thread::Builder::new()
                    .name(format!("agui-decode-{first}"))
                    .spawn(move || {
                        let mut k = first as u64;
                        while k < chunks {
                            let span = ChunkSpan {
                                index: k,
                                size: split.chunk,
                                len,
                            };
                            if decode_chunk(&file, span, &options, &tx).is_err() {
                                return;
                            }
                            k += threads as u64;
                        }
                    })?;
                channels.push(rx);
                workers.push(worker);
            }
            let mut reader = ThreadedReader::with_channels(format, channels, workers);
            reader.chunks = chunks as usize;
            return Ok(reader);
        }
        let mut reader = ThreadedReader::from_read(file, options)?;
        reader.format = format;
        Ok(reader)
    }

    /// Decodes any byte source (standard input, a pipe) on one background
    /// thread; the format is detected unless given.
    pub fn from_read<R: Read + Send + 'static>(
        source: R,
        options: DecodeOptions,
    ) -> io::Result<ThreadedReader> {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let worker = std::thread::Builder::new()
            .name("agui-decode".to_owned())
            .spawn(move || decode_sequential(source, options, &tx))?;
        Ok(ThreadedReader::with_channels(
            options.format,
            vec![rx],
            vec![worker],
        ))
    }

    fn with_channels(
        format: Option<Format>,
        channels: Vec<Receiver<Msg>>,
        workers: Vec<JoinHandle<()>>,
    ) -> ThreadedReader {
        ThreadedReader {
            format,
            channels,
            workers,
            chunk: 0,
            chunks: 1,
            base_index: 0,
            base_line: 1,
            batch: Vec::new().into_iter(),
            done: false,
        }
    }

    /// The format: given, detected from the file's first bytes, or (when
    /// those were all whitespace) known once decoding has got that far.
    pub fn format(&self) -> Option<Format> {
        self.format
    }

    /// True when the file is decoded on more than one thread.
    pub fn is_parallel(&self) -> bool {
        self.channels.len() > 1
    }

    /// The next batch of events (at most [`BATCH`], at least one), or an
    /// error, or `None` at the end. Batches are how the reader hands events
    /// over; taking them whole saves a move per event.
    pub fn next_batch(&mut self) -> Option<Result<Vec<Event>, DecodeError>> {
        if self.batch.len() > 0 {
            return Some(Ok(std::mem::take(&mut self.batch).collect()));
        }
        self.receive()
    }

    fn receive(&mut self) -> Option<Result<Vec<Event>, DecodeError>> {
        loop {
            if self.done {
                return None;
            }
            let channel = &self.channels[self.chunk % self.channels.len()];
            let Ok(msg) = channel.recv() else {
                // The thread ended without finishing its chunk: it panicked.
                self.done = true;
                return Some(Err(DecodeError::Io {
                    at: Position {
                        index: self.base_index,
                        line: self.base_line,
                        byte: 0,
                    },
                    source: io::Error::other("a decoding thread failed"),
                }));
            };
            match msg {
                Msg::Events(events) => return Some(Ok(events)),
                Msg::Format(format) => self.format = self.format.or(format),
                Msg::Error(err) => {
                    let err = err.shifted(self.base_index, self.base_line - 1, 0);
                    if !err.is_recoverable() {
                        self.done = true;
                    }
                    return Some(Err(err));
                }
                Msg::End { events, lines } => {
                    self.base_index += events;
                    self.base_line += lines;
                    self.chunk += 1;
                    if self.chunk >= self.chunks {
                        self.done = true;
                    }
                }
            }
        }
    }
}

impl Iterator for ThreadedReader {
    type Item = Result<Event, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(event) = self.batch.next() {
                return Some(Ok(event));
            }
            match self.receive()? {
                Ok(events) => self.batch = events.into_iter(),
                Err(err) => return Some(Err(err)),
            }
        }
    }
}

impl Drop for ThreadedReader {
    fn drop(&mut self) {
        // Closing the channels makes every thread's next send fail, so each
        // stops at its next batch; then wait for them.
        self.channels.clear();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

/// Reads into `buf` from `offset` until it is full or the file ends.
fn read_at_most(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(m) => n += m,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The whole source through one [`Reader`] (any format, detected or given).
fn decode_sequential<R: Read>(source: R, options: DecodeOptions, tx: &SyncSender<Msg>) {
    let mut reader = Reader::with_options(BufReader::with_capacity(PIECE, source), options);
    let mut batch = Vec::with_capacity(BATCH);
    let mut format_sent = false;
    while let Some(item) = reader.next() {
        if !format_sent && reader.format().is_some() {
            format_sent = true;
            if tx.send(Msg::Format(reader.format())).is_err() {
                return;
            }
        }
        match item {
            Ok(event) => {
                batch.push(event);
                if batch.len() == BATCH
                    && tx
                        .send(Msg::Events(std::mem::replace(
                            &mut batch,
                            Vec::with_capacity(BATCH),
                        )))
                        .is_err()
                {
                    return;
                }
            }
            Err(err) => {
                if (!batch.is_empty() && tx.send(Msg::Events(std::mem::take(&mut batch))).is_err())
                    || tx.send(Msg::Error(err)).is_err()
                {
                    return;
                }
            }
        }
    }
    if !format_sent {
        let _ = tx.send(Msg::Format(reader.format()));
    }
    if !batch.is_empty() && tx.send(Msg::Events(batch)).is_err() {
        return;
    }
    let _ = tx.send(Msg::End {
        events: 0,
        lines: 0,
    });
}

/// Chunk `index` of a file of `len` bytes cut every `size` bytes.
#[derive(Clone, Copy)]
struct ChunkSpan {
    index: u64,
    size: u64,
    len: u64,
}

/// The receiver is gone: stop.
struct Hangup;

/// Decodes one NDJSON chunk: from the line start at or after `index * size`
/// to the line start at or after `(index + 1) * size` (a line start: offset
/// 0, or right after a `\n`).
fn decode_chunk(
    file: &File,
    span: ChunkSpan,
    options: &DecodeOptions,
    tx: &SyncSender<Msg>,
) -> Result<(), Hangup> {
    let send = |msg: Msg| tx.send(msg).map_err(|_| Hangup);
    let io_error = |source: io::Error, byte: u64| {
        send(Msg::Error(DecodeError::Io {
            at: Position {
                index: 0,
                line: 1,
                byte,
            },
            source,
        }))
    };
    let nominal = span.index * span.size;
    let start = if span.index == 0 {
        0
    } else {
        match line_start_at(file, nominal, span.len) {
            Ok(start) => start,
            Err(e) => return io_error(e, nominal),
        }
    };
    // Bytes before `limit` surely belong to this chunk; it ends at the first
    // line end at or after `limit - 1`, i.e. at the next line start at or
    // after `limit`.
    let limit = (nominal + span.size).min(span.len);
    let mut decoder = if span.index == 0 {
        NdjsonDecoder::new(options)
    } else {
        NdjsonDecoder::continuing(options)
    };
    let mut batch = Vec::with_capacity(BATCH);
    let drain = |decoder: &mut NdjsonDecoder, batch: &mut Vec<Event>| -> Result<(), Hangup> {
        while let Some(item) = decoder.pull() {
            match item {
                Ok(event) => {
                    batch.push(event);
                    if batch.len() == BATCH {
                        send(Msg::Events(std::mem::replace(
                            batch,
                            Vec::with_capacity(BATCH),
                        )))?;
                    }
                }
                Err(err) => {
                    if !batch.is_empty() {
                        send(Msg::Events(std::mem::take(batch)))?;
                    }
                    let fatal = !err.is_recoverable();
                    send(Msg::Error(err.shifted(0, 0, start)))?;
                    if fatal {
                        return Err(Hangup);
                    }
                }
            }
        }
        Ok(())
    };
    if start < limit {
        let mut buf = vec![0u8; PIECE];
        let mut pos = start;
        loop {
            let want = (span.len - pos).min(PIECE as u64) as usize;
            let n = match read_at_most(file, pos, &mut buf[..want]) {
                Ok(n) => n,
                Err(e) => return io_error(e, pos),
            };
            let piece = &buf[..n];
            // Where this chunk's last line ends within the piece, if it does.
            let search_from = limit.saturating_sub(1).saturating_sub(pos) as usize;
            let end = if search_from < n {
                memchr::memchr(b'\n', &piece[search_from..]).map(|i| search_from + i + 1)
            } else {
                None
            };
            // No line end found: the chunk runs on, up to the end of the file.
            let end = end.or((pos + n as u64 >= span.len).then_some(n));
            let take = end.unwrap_or(n);
            decoder.push(&piece[..take]);
            drain(&mut decoder, &mut batch)?;
            pos += take as u64;
            if end.is_some() || n == 0 {
                break;
            }
        }
    }
    decoder.finish();
    drain(&mut decoder, &mut batch)?;
    if !batch.is_empty() {
        send(Msg::Events(batch))?;
    }
    let at = decoder.position();
    send(Msg::End {
        events: at.index,
        lines: at.line - 1,
    })
}

/// The first line start at or after `offset`: `offset` itself when the byte
/// before it is `\n`, else the byte after the next `\n` (or `len`).
fn line_start_at(file: &File, offset: u64, len: u64) -> io::Result<u64> {
    let mut pos = offset - 1;
    let mut buf = vec![0u8; 1 << 14];
    while pos < len {
        let want = (len - pos).min(buf.len() as u64) as usize;
        let n = read_at_most(file, pos, &mut buf[..want])?;
        if n == 0 {
            break;
        }
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            return Ok(pos + i as u64 + 1);
        }
        pos += n as u64;
    }
    Ok(len)
}
