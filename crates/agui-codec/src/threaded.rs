//! [`ThreadedReader`]: a stream decoded on a background thread; a big file
//! on two.
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
//! An SSE file is cut where a frame ends after a `\n` (`\n\n`, `\n\r\n`:
//! never inside a CRLF, never inside a frame), and each chunk gets an SSE
//! decoder of its own that knows it starts mid-stream (a byte order mark
//! there is not the stream's). Its events are decoded owned (a frame's
//! data may span lines) and copied into the chunk handed over. An SSE file
//! without such a frame end in its first 64 KiB (CR line ends only) is read
//! on one thread.
//!
//! A JSON array is cut where an element seems to start (a `{` after a `}`
//! and a `,`, see `element_start_at`): a guess, since only a scan from the
//! array's start knows whether that `}` closed an element or something
//! inside one. The chunk before a guess checks it: it decodes from a true
//! element start, so it ends only where its decoder stands before an
//! element, and when the next chunk's start is not such a place it decodes
//! on over that chunk and the reader drops the chunk's own decoding. A wrong
//! guess so costs time, never a different result. Its elements are
//! validated in place and copied into the chunk handed over.
//!
//! A split file's chunk is read into one buffer and decoded in place
//! ([`EventChunk`]: the events are slices of that buffer), so decoding costs
//! no allocation per event. A reader opened with
//! [`ThreadedReader::open_chunked`] hands those chunks over as they are
//! ([`ThreadedReader::next_chunk`]) and takes their buffers back for the
//! next read; one opened with [`ThreadedReader::open`] hands over owned
//! [`Event`]s, copied on the decoding thread.
//!
//! With one decoding thread, the caller's thread may take a share of the
//! decoding ([`Split::caller_helps`]): chunks are then taken in order from
//! one counter, and whenever the caller would wait for its next chunk it
//! decodes the next chunk nobody has taken, then reads on in order. A
//! command whose own work per event is lighter than decoding (`compact`)
//! so keeps both cores busy, and one whose work is heavier (`verify`)
//! rarely helps at all.
//!
//! Memory: a thread of a split file holds the chunk it decodes and at most
//! [`CHUNK_QUEUE`] more ahead of the caller ([`HELPED_QUEUE`] messages
//! with a helping caller, which holds one chunk of its own), the
//! sequential thread at most [`QUEUE`] batches of [`BATCH`] events, so the
//! reader's memory does not grow with the file.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use agui_protocol::Event;

use crate::buffer::Buffer;
use crate::chunk::{Piece, decode_ndjson};
use crate::{
    DecodeError, DecodeOptions, Detection, EventChunk, Format, Position, Reader, detect_format,
};

/// Events per batch handed to the caller on the sequential path.
const BATCH: usize = 1024;
/// Batches a decoding thread of the sequential path may hold ahead of the
/// caller.
const QUEUE: usize = 4;
/// Chunks a decoding thread of a split file may hold ahead of the caller
/// (beside the one it decodes): a chunk is about 512 KiB of text, a batch
/// about 170 KB.
const CHUNK_QUEUE: usize = 1;
/// Messages the one decoding thread of a split file with a helping caller
/// may hold ahead of it: a chunk's events and its end, and the next chunk's
/// events (measured: with one message the thread waited while the caller
/// decoded, and `verify` got slower; three keep it busy).
const HELPED_QUEUE: usize = 3;
/// Bytes read at once.
pub(crate) const PIECE: usize = 1 << 18;
/// Bytes first read past a chunk's nominal end to finish its last line
/// (then twice as many each time, up to [`PIECE`]).
const TAIL: usize = 1 << 14;

/// How decoded events are handed to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handover {
    /// Owned events, copied on the decoding thread.
    Events,
    /// Chunks of events that are slices of one buffer.
    Chunks,
}

/// What a decoding thread sends, in order.
enum Msg {
    /// Decoded events.
    Events(Vec<Event>),
    /// Decoded events, slices of one buffer.
    Chunk(EventChunk),
    /// A decoding error; positions are relative to the chunk for `index`
    /// and `line`, absolute for bytes.
    Error(DecodeError),
    /// The format, once the sequential decoder knows it.
    Format(Option<Format>),
    /// The chunk is done: how many event indexes and line ends it held,
    /// and how many chunks after it it decoded over (a JSON array chunk
    /// whose successors did not start where an element does; the reader
    /// drops their messages).
    End { events: u64, lines: u64, skip: u64 },
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
    /// How many chunks from `chunk` on are dropped (decoded over by the
    /// chunk before them).
    skip: usize,
    /// How many chunks were dropped so far.
    dropped: usize,
    /// Event index and line of the current chunk's start.
    base_index: u64,
    base_line: u64,
    batch: std::vec::IntoIter<Event>,
    /// The chunk lent by [`ThreadedReader::next_chunk`], and the thread it
    /// came from.
    lent: Option<(EventChunk, usize)>,
    /// Where each decoding thread takes used chunks back (split files only).
    spare: Vec<mpsc::Sender<EventChunk>>,
    /// The caller's share of the decoding (see [`Split::caller_helps`]).
    helper: Option<Helper>,
    /// The chunk being read was decoded by the caller.
    from_caller: bool,
    done: bool,
}

/// [`ThreadedReader::source_thread`] of a chunk the caller decoded.
const CALLER: usize = usize::MAX - 1;

/// What the caller's thread needs to decode chunks of a split file itself.
/// Chunks are taken in order through `claim`, by the decoding thread and
/// by the caller alike; the thread's chunks arrive on its channel in the
/// order it took them, and the one chunk the caller took is decoded into
/// `messages` before the caller reads on. So when the caller wants chunk
/// `c`, either it took `c` itself or the thread did, and then `c` is the
/// next chunk on the thread's channel.
struct Helper {
    file: Arc<dyn Source>,
    options: DecodeOptions,
    size: u64,
    len: u64,
    format: Format,
    handover: Handover,
    /// The next chunk nobody has taken.
    claim: Arc<AtomicU64>,
    /// The chunk the caller decoded and has not read to its end yet.
    taken: Option<u64>,
    /// Its messages, in order (sent before they are read: unbounded).
    tx: mpsc::Sender<Msg>,
    messages: Receiver<Msg>,
    /// The caller's used chunks, for its next decode.
    spare_tx: mpsc::Sender<EventChunk>,
    spare: Receiver<EventChunk>,
    keep: Option<EventChunk>,
    /// How many chunks the caller decoded.
    decoded: u64,
}

impl Helper {
    /// Takes the next chunk nobody has taken, if there is one, and decodes
    /// it into `messages`.
    fn help(&mut self, chunks: u64) {
        if self.taken.is_some() {
            return;
        }
        let k = self.claim.fetch_add(1, Ordering::AcqRel);
        if k >= chunks {
            return;
        }
        self.taken = Some(k);
        self.decoded += 1;
        let span = ChunkSpan {
            index: k,
            size: self.size,
            len: self.len,
            format: self.format,
        };
        let to = Sink {
            tx: Tx::Unbounded(&self.tx),
            spare: &self.spare,
            handover: self.handover,
        };
        // A fatal error ends the chunk's messages with it; the receiver
        // (this reader) cannot be gone.
        let _ = decode_chunk(&*self.file, span, &self.options, &to, &mut self.keep);
    }
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
    /// Files at least this large (and NDJSON or SSE) are cut into chunks decoded
    /// on `threads` threads (one thread still decodes each chunk in place).
    pub threshold: u64,
    /// The nominal chunk size (chunks end at the first line end at or after
    /// each multiple of it).
    pub chunk: u64,
    /// Decoding threads for a split file.
    pub threads: usize,
    /// With one decoding thread: the caller's thread decodes a chunk
    /// itself whenever it would otherwise wait for one (the next chunk no
    /// thread has taken yet), so that a caller whose own work is lighter
    /// than decoding lends the decoder its spare time. Events, errors and
    /// positions stay exactly the same.
    pub caller_helps: bool,
}

impl Default for Split {
    fn default() -> Split {
        Split {
            threshold: ThreadedReader::PARALLEL_THRESHOLD,
            // Small enough that both threads decode at once and memory stays
            // low (each thread holds about three chunks: the one it decodes,
            // one queued, one lent or given back). Measured before chunks
            // were handed over whole, `agui convert --to sse`, 1M events
            // (165 MB), 2 cores, medians: 149 ms in 1 MiB chunks, 207 ms in
            // 8 MiB chunks, 221 ms on one decoding thread. With whole chunks,
            // `agui convert --to ndjson`, three runs each: 1 MiB chunks
            // 0.11 to 0.13 s and 13.5 to 14.1 MB from NDJSON, 0.15 to 0.20 s
            // and 18.0 to 19.1 MB from SSE, 0.15 to 0.17 s and 17.5 to 17.9
            // MB from a JSON array; 512 KiB chunks 0.11 s and 10.3 to 10.5
            // MB, 0.14 to 0.16 s and 14.0 to 14.2 MB, 0.13 to 0.14 s and
            // 12.5 to 12.8 MB.
            chunk: 1 << 19,
            threads: 2,
            caller_helps: false,
        }
    }
}

impl ThreadedReader {
    /// Files from this size on are decoded on two threads.
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
        ThreadedReader::start(path, options, split, Handover::Events)
    }

    /// Like [`ThreadedReader::open_with`], for a caller that takes events as
    /// [`EventChunk`]s ([`ThreadedReader::next_chunk`]): a split file's
    /// events are then never copied.
    pub fn open_chunked(
        path: &Path,
        options: DecodeOptions,
        split: Split,
    ) -> io::Result<ThreadedReader> {
        ThreadedReader::start(path, options, split, Handover::Chunks)
    }

    fn start(
        path: &Path,
        options: DecodeOptions,
        split: Split,
        handover: Handover,
    ) -> io::Result<ThreadedReader> {
        let file = Arc::new(File::open(path)?);
        let len = file.metadata()?.len();
        // Read as a stream, from the file's own position, when it is not
        // split (as a path that is not a regular file must be).
        let stream = SharedFile(Arc::clone(&file));
        ThreadedReader::start_source(file, len, Box::new(stream), options, split, handover)
    }

    /// [`ThreadedReader::start`] over any source read at offsets, `len`
    /// bytes long; `stream` reads the same bytes in order, for a source
    /// that is not split.
    fn start_source(
        file: Arc<dyn Source>,
        len: u64,
        stream: Box<dyn Read + Send>,
        options: DecodeOptions,
        split: Split,
        handover: Handover,
    ) -> io::Result<ThreadedReader> {
        let mut format = options.format;
        if format.is_none() {
            let mut head = vec![0u8; (len.min(1 << 16)) as usize];
            let n = read_at_most(&*file, 0, &mut head)?;
            head.truncate(n);
            if let Detection::Format(found) = detect_format(&head, n as u64 == len) {
                format = Some(found);
            }
        }
        // An empty file has no chunk to decode: it goes through one thread.
        let big = len > 0 && len >= split.threshold && split.threads >= 1 && split.chunk > 0;
        // An SSE file is cut where frames end after a `\n`; one without
        // such an end near its start (CR or CRLF line ends only) is read
        // on one thread rather than as one huge chunk.
        let split_as = match format {
            Some(Format::Sse) if big && frames_end_with_lf(&*file, len)? => Some(Format::Sse),
            Some(found @ (Format::Ndjson | Format::Json)) if big => Some(found),
            _ => None,
        };
        if let Some(split_as) = split_as {
            let chunks = len.div_ceil(split.chunk);
            let threads = split.threads.min(chunks as usize).max(1);
            let mut channels = Vec::with_capacity(threads);
            let mut workers = Vec::with_capacity(threads);
            let mut spare = Vec::with_capacity(threads);
            // With a helping caller, chunks are taken in order from one
            // counter; otherwise thread `t` decodes chunks `t`, `t + threads`, ...
            let claim = (split.caller_helps && threads == 1).then(|| Arc::new(AtomicU64::new(0)));
            // A helping caller may be busy with its own chunk while the
            // thread finishes the next one: room for that chunk's messages,
            // so the thread decodes on instead of waiting.
            let queue = if claim.is_some() {
                HELPED_QUEUE
            } else {
                CHUNK_QUEUE
            };
            for first in 0..threads {
                let (tx, rx) = mpsc::sync_channel(queue);
                let (spare_tx, spare_rx) = mpsc::channel();
                let file = Arc::clone(&file);
                let claim = claim.clone();
                let worker = std::thread::Builder::new()
                    .name(format!("agui-decode-{first}"))
                    .spawn(move || {
                        let mut k = first as u64;
                        // A chunk whose events were copied out, for reuse.
                        let mut keep = None;
                        loop {
                            if let Some(claim) = &claim {
                                k = claim.fetch_add(1, Ordering::AcqRel);
                            }
                            if k >= chunks {
                                return;
                            }
                            let span = ChunkSpan {
                                index: k,
                                size: split.chunk,
                                len,
                                format: split_as,
                            };
                            let to = Sink {
                                tx: Tx::Bounded(&tx),
                                spare: &spare_rx,
                                handover,
                            };
                            if decode_chunk(&*file, span, &options, &to, &mut keep).is_err() {
                                return;
                            }
                            k += threads as u64;
                        }
                    })?;
                channels.push(rx);
                workers.push(worker);
                spare.push(spare_tx);
            }
            let mut reader = ThreadedReader::with_channels(format, channels, workers);
            reader.chunks = chunks as usize;
            reader.spare = spare;
            reader.helper = claim.map(|claim| {
                let (tx, messages) = mpsc::channel();
                let (spare_tx, spare) = mpsc::channel();
                Helper {
                    file,
                    options,
                    size: split.chunk,
                    len,
                    format: split_as,
                    handover,
                    claim,
                    taken: None,
                    tx,
                    messages,
                    spare_tx,
                    spare,
                    keep: None,
                    decoded: 0,
                }
            });
            return Ok(reader);
        }
        let mut reader = ThreadedReader::sequential(stream, options, handover)?;
        reader.format = format;
        Ok(reader)
    }

    /// Decodes any byte source (standard input, a pipe) on one background
    /// thread; the format is detected unless given.
    pub fn from_read<R: Read + Send + 'static>(
        source: R,
        options: DecodeOptions,
    ) -> io::Result<ThreadedReader> {
        ThreadedReader::sequential(source, options, Handover::Events)
    }

    /// Like [`ThreadedReader::from_read`], for a caller that takes events as
    /// [`EventChunk`]s.
    pub fn from_read_chunked<R: Read + Send + 'static>(
        source: R,
        options: DecodeOptions,
    ) -> io::Result<ThreadedReader> {
        ThreadedReader::sequential(source, options, Handover::Chunks)
    }

    fn sequential<R: Read + Send + 'static>(
        source: R,
        options: DecodeOptions,
        handover: Handover,
    ) -> io::Result<ThreadedReader> {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let worker = std::thread::Builder::new()
            .name("agui-decode".to_owned())
            .spawn(move || decode_sequential(source, options, handover, &tx))?;
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
            skip: 0,
            dropped: 0,
            base_index: 0,
            base_line: 1,
            batch: Vec::new().into_iter(),
            lent: None,
            spare: Vec::new(),
            helper: None,
            from_caller: false,
            done: false,
        }
    }

    /// The format: given, detected from the file's first bytes, or (when
    /// those were all whitespace) known once decoding has got that far.
    pub fn format(&self) -> Option<Format> {
        self.format
    }

    /// How many chunks of a split file the caller's thread decoded itself
    /// so far (see [`Split::caller_helps`]).
    pub fn chunks_decoded_by_caller(&self) -> u64 {
        self.helper.as_ref().map_or(0, |h| h.decoded)
    }

    /// How many chunks of a split JSON array were dropped so far because
    /// their start was a wrong guess (the chunk before decoded over them),
    /// and how many chunks the file was cut into.
    pub fn chunks_dropped(&self) -> (usize, usize) {
        (self.dropped, self.chunks)
    }

    /// True when the file is decoded on more than one thread (a helping
    /// caller's counts).
    pub fn is_parallel(&self) -> bool {
        self.channels.len() > 1 || self.helper.is_some()
    }

    /// The next batch of events (at least one), or an error, or `None` at
    /// the end. Batches are how the reader hands events over; taking them
    /// whole saves a move per event.
    pub fn next_batch(&mut self) -> Option<Result<Vec<Event>, DecodeError>> {
        if self.batch.len() > 0 {
            return Some(Ok(std::mem::take(&mut self.batch).collect()));
        }
        match self.receive()? {
            Ok(Batch::Events(events)) => Some(Ok(events)),
            Ok(Batch::Chunk(chunk)) => {
                let events = chunk.to_events();
                self.give_back(chunk);
                Some(Ok(events))
            }
            Err(err) => Some(Err(err)),
        }
    }

    /// The next chunk of events (at least one), or an error, or `None` at
    /// the end. The chunk is lent until the next call, which gives its
    /// buffers back to the thread that decoded it. A reader opened with
    /// [`ThreadedReader::open_chunked`] or
    /// [`ThreadedReader::from_read_chunked`] hands over the chunks it
    /// decoded; any other copies its events into one.
    pub fn next_chunk(&mut self) -> Option<Result<&EventChunk, DecodeError>> {
        let chunk = if self.batch.len() > 0 {
            let batch = std::mem::take(&mut self.batch);
            self.fill(batch)
        } else {
            match self.receive()? {
                Ok(Batch::Events(events)) => self.fill(events.into_iter()),
                Ok(Batch::Chunk(chunk)) => {
                    let from = self.source_thread();
                    self.give_back_lent();
                    self.lent.insert((chunk, from))
                }
                Err(err) => return Some(Err(err)),
            }
        };
        Some(Ok(&chunk.0))
    }

    /// The lent chunk, refilled with copies of `events`.
    fn fill(&mut self, events: impl Iterator<Item = Event>) -> &mut (EventChunk, usize) {
        let lent = self
            .lent
            .get_or_insert_with(|| (EventChunk::new(), usize::MAX));
        lent.0.clear();
        for event in events {
            lent.0.push(event.as_event_ref());
        }
        lent
    }

    /// The decoding thread of the chunk last received ([`CALLER`] when the
    /// caller decoded it).
    fn source_thread(&self) -> usize {
        if self.from_caller {
            return CALLER;
        }
        self.chunk % self.channels.len().max(1)
    }

    /// Gives the lent chunk's buffers back to its decoding thread.
    fn give_back_lent(&mut self) {
        if let Some((chunk, from)) = self.lent.take() {
            self.give_back_to(chunk, from);
        }
    }

    /// Gives a chunk's buffers back to the thread of the chunk last received.
    fn give_back(&mut self, chunk: EventChunk) {
        self.give_back_to(chunk, self.source_thread());
    }

    fn give_back_to(&mut self, chunk: EventChunk, from: usize) {
        if from == CALLER {
            if let Some(helper) = &self.helper {
                let _ = helper.spare_tx.send(chunk);
            }
        } else if let Some(spare) = self.spare.get(from) {
            let _ = spare.send(chunk);
        }
    }

    /// The next message of the chunk being read: from the caller's own
    /// decode when it took that chunk, else from its thread's channel
    /// (decoding the next untaken chunk meanwhile when nothing is there
    /// yet and the caller helps). `None`: the thread is gone.
    fn next_msg(&mut self) -> Option<Msg> {
        let chunk = self.chunk as u64;
        if let Some(helper) = &mut self.helper {
            if helper.taken == Some(chunk) {
                self.from_caller = true;
                return helper.messages.try_recv().ok();
            }
            self.from_caller = false;
            let channel = &self.channels[0];
            match channel.try_recv() {
                Ok(msg) => return Some(msg),
                Err(mpsc::TryRecvError::Disconnected) => return None,
                Err(mpsc::TryRecvError::Empty) => {
                    helper.help(self.chunks as u64);
                    if helper.taken == Some(chunk) {
                        // Nobody had taken the chunk being read: the caller
                        // just decoded it.
                        self.from_caller = true;
                        return helper.messages.try_recv().ok();
                    }
                }
            }
            return channel.recv().ok();
        }
        self.channels[self.chunk % self.channels.len()].recv().ok()
    }

    fn receive(&mut self) -> Option<Result<Batch, DecodeError>> {
        loop {
            if self.done {
                return None;
            }
            let Some(msg) = self.next_msg() else {
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
                // A chunk decoded over by the one before it: dropped.
                Msg::Chunk(chunk) if self.skip > 0 => self.give_back(chunk),
                Msg::Events(_) | Msg::Error(_) if self.skip > 0 => {}
                Msg::Events(events) => return Some(Ok(Batch::Events(events))),
                Msg::Chunk(chunk) => return Some(Ok(Batch::Chunk(chunk))),
                Msg::Format(format) => self.format = self.format.or(format),
                Msg::Error(err) => {
                    let err = err.shifted(self.base_index, self.base_line - 1, 0);
                    if !err.is_recoverable() {
                        self.done = true;
                    }
                    return Some(Err(err));
                }
                Msg::End {
                    events,
                    lines,
                    skip,
                } => {
                    if let Some(helper) = &mut self.helper
                        && helper.taken == Some(self.chunk as u64)
                    {
                        helper.taken = None;
                    }
                    if self.skip > 0 {
                        self.skip -= 1;
                        self.dropped += 1;
                    } else {
                        self.base_index += events;
                        self.base_line += lines;
                        self.skip = skip as usize;
                    }
                    self.chunk += 1;
                    if self.chunk + self.skip >= self.chunks {
                        self.done = true;
                    }
                }
            }
        }
    }
}

/// What [`ThreadedReader::receive`] got.
enum Batch {
    Events(Vec<Event>),
    Chunk(EventChunk),
}

impl Iterator for ThreadedReader {
    type Item = Result<Event, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(event) = self.batch.next() {
                return Some(Ok(event));
            }
            match self.next_batch()? {
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

/// What a split file is read from: bytes at offsets, from any thread at
/// once. A file; in tests, a source that fails where it is told to.
pub(crate) trait Source: Send + Sync {
    /// Reads into `buf` from `offset`: how many bytes (0 at the end), as
    /// `pread` does.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl Source for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
}

/// A file shared with the split path, read as a stream.
struct SharedFile(Arc<File>);

impl Read for SharedFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self.0).read(buf)
    }
}

/// Reads into `buf` from `offset` until it is full or the file ends.
fn read_at_most(file: &dyn Source, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
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
fn decode_sequential<R: Read>(
    source: R,
    options: DecodeOptions,
    handover: Handover,
    tx: &SyncSender<Msg>,
) {
    let mut reader = Reader::with_options(BufReader::with_capacity(PIECE, source), options);
    let mut batch = Vec::with_capacity(BATCH);
    let mut format_sent = false;
    let send = |batch: &mut Vec<Event>| {
        let events = std::mem::replace(batch, Vec::with_capacity(BATCH));
        tx.send(match handover {
            Handover::Events => Msg::Events(events),
            Handover::Chunks => {
                let mut chunk = EventChunk::new();
                for event in &events {
                    chunk.push(event.as_event_ref());
                }
                Msg::Chunk(chunk)
            }
        })
        .is_ok()
    };
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
                if batch.len() == BATCH && !send(&mut batch) {
                    return;
                }
            }
            Err(err) => {
                if (!batch.is_empty() && !send(&mut batch)) || tx.send(Msg::Error(err)).is_err() {
                    return;
                }
            }
        }
    }
    if !format_sent {
        let _ = tx.send(Msg::Format(reader.format()));
    }
    if !batch.is_empty() && !send(&mut batch) {
        return;
    }
    let _ = tx.send(Msg::End {
        events: 0,
        lines: 0,
        skip: 0,
    });
}

/// Chunk `index` of a file of `len` bytes cut every `size` bytes.
#[derive(Clone, Copy)]
struct ChunkSpan {
    index: u64,
    size: u64,
    len: u64,
    /// NDJSON, cut where lines end; SSE, cut where frames end; or a JSON
    /// array, cut where elements start.
    format: Format,
}

/// Where a decoding thread of a split file sends its chunks, and where it
/// takes used chunks back.
struct Sink<'a> {
    tx: Tx<'a>,
    spare: &'a Receiver<EventChunk>,
    handover: Handover,
}

/// A decoding thread's bounded channel, or the caller's own unbounded one
/// (it sends a whole chunk's messages before it reads them).
enum Tx<'a> {
    Bounded(&'a SyncSender<Msg>),
    Unbounded(&'a mpsc::Sender<Msg>),
}

impl Tx<'_> {
    fn send(&self, msg: Msg) -> Result<(), ()> {
        match self {
            Tx::Bounded(tx) => tx.send(msg).map_err(drop),
            Tx::Unbounded(tx) => tx.send(msg).map_err(drop),
        }
    }
}

/// The receiver is gone, or a fatal error ended decoding: stop.
struct Hangup;

/// A read error at `byte` of a split file (its chunk-relative index and
/// line are the chunk's start; the reader shifts them).
fn io_error(source: io::Error, byte: u64) -> Msg {
    Msg::Error(DecodeError::Io {
        at: Position {
            index: 0,
            line: 1,
            byte,
        },
        source,
    })
}

/// Decodes one NDJSON chunk: from the line start at or after `index * size`
/// to the line start at or after `(index + 1) * size` (a line start: offset
/// 0, or right after a `\n`). The chunk is read into one buffer and its
/// events are slices of it.
fn decode_chunk(
    file: &dyn Source,
    span: ChunkSpan,
    options: &DecodeOptions,
    to: &Sink<'_>,
    keep: &mut Option<EventChunk>,
) -> Result<(), Hangup> {
    let send = |msg: Msg| to.tx.send(msg).map_err(|_| Hangup);
    let io_error = |source: io::Error, byte: u64| send(io_error(source, byte));
    // Chunks start where lines start (NDJSON), where frames start (SSE) or
    // where elements seem to start (a JSON array).
    let boundary = match span.format {
        Format::Ndjson => line_start_at,
        Format::Sse => frame_start_at,
        Format::Json => element_start_at,
    };
    let nominal = span.index * span.size;
    let start = if span.index == 0 {
        0
    } else {
        match boundary(file, nominal, span.len) {
            Ok(start) => start,
            Err(e) => {
                io_error(e, nominal)?;
                // A JSON chunk may be one the reader drops (its start a
                // wrong guess): it must end for the reader to go on.
                if span.format == Format::Json {
                    send(Msg::End {
                        events: 0,
                        lines: 0,
                        skip: 0,
                    })?;
                }
                return Ok(());
            }
        }
    };
    match span.format {
        Format::Ndjson => {}
        Format::Sse => {
            return decode_copied_chunk::<crate::SseEventDecoder>(
                file, span, start, options, to, keep,
            );
        }
        Format::Json => {
            return decode_copied_chunk::<crate::JsonArrayDecoder>(
                file, span, start, options, to, keep,
            );
        }
    }
    // Bytes before `limit` surely belong to this chunk; it ends at the first
    // line end at or after `limit - 1`, i.e. at the next line start at or
    // after `limit`.
    let limit = (nominal + span.size).min(span.len);
    let spare = keep.take().or_else(|| to.spare.try_recv().ok());
    // The buffer keeps its length: `read_chunk` overwrites what it reads
    // and cuts the rest, so a reused buffer is not zeroed again.
    let (mut buf, spare) = spare.unwrap_or_default().into_buffer();
    if start >= limit {
        buf.clear();
    } else if let Err(e) = read_chunk(
        file,
        start,
        limit,
        span.len,
        options.max_event_size,
        &mut buf,
    ) {
        return io_error(e, start);
    }
    let mut spare_events = None;
    let counts = decode_ndjson(buf, start, span.index == 0, options, spare, &mut |piece| {
        let msg = match piece {
            Piece::Events(chunk) => match to.handover {
                Handover::Chunks => Msg::Chunk(chunk),
                Handover::Events => {
                    let events = chunk.to_events();
                    spare_events = Some(chunk);
                    Msg::Events(events)
                }
            },
            Piece::Error(err) => Msg::Error(err),
        };
        to.tx.send(msg).is_ok()
    });
    *keep = spare_events;
    let Some((events, lines)) = counts else {
        return Err(Hangup);
    };
    send(Msg::End {
        events,
        lines,
        skip: 0,
    })
}

/// Reads the chunk from `start` (a line start) into `buf`: up to `limit`,
/// then on to the first line end at or after `limit - 1` (or the file's
/// end at `len`). A line that runs on for more than `max + 1` bytes past
/// the last line end is read no further: it is too large, which decoding
/// reports.
fn read_chunk(
    file: &dyn Source,
    start: u64,
    limit: u64,
    len: u64,
    max: usize,
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    let want = (limit - start) as usize;
    // Room for the tail of the last line too, so the buffer need not grow.
    buf.reserve_exact((want + TAIL).saturating_sub(buf.len()));
    buf.resize(want, 0);
    let n = read_at_most(file, start, buf)?;
    buf.truncate(n);
    let mut pos = start + n as u64;
    if n < want || buf.last() == Some(&b'\n') {
        return Ok(());
    }
    // Where the last line of what was read starts.
    let line_start = memchr::memrchr(b'\n', buf).map_or(0, |i| i + 1);
    let mut step = TAIL;
    while pos < len {
        let have = buf.len();
        let piece = (len - pos).min(step as u64) as usize;
        step = (step * 2).min(PIECE);
        buf.resize(have + piece, 0);
        let got = read_at_most(file, pos, &mut buf[have..])?;
        buf.truncate(have + got);
        if got == 0 {
            break;
        }
        if let Some(i) = memchr::memchr(b'\n', &buf[have..]) {
            buf.truncate(have + i + 1);
            break;
        }
        pos += got as u64;
        if buf.len() - line_start > max.saturating_add(1) {
            break;
        }
    }
    Ok(())
}

/// True when the first 64 KiB of the file hold a frame end after a `\n`
/// (see [`frame_start_at`]).
fn frames_end_with_lf(file: &dyn Source, len: u64) -> io::Result<bool> {
    let mut head = vec![0u8; len.min(1 << 16) as usize];
    let n = read_at_most(file, 0, &mut head)?;
    let head = &head[..n];
    Ok(memchr::memmem::find(head, b"\n\n").is_some()
        || memchr::memmem::find(head, b"\n\r\n").is_some())
}

/// The first frame start at or after `offset` (`len` when there is none
/// before the end): right after a `\n` followed by an empty line (`\n\n` or
/// `\n\r\n`). An empty line ends the frame before it, and since the byte
/// before such a start is a `\n`, it never splits a CRLF. A chunk's end is
/// the next chunk's start, so the two are found by this one rule.
pub(crate) fn frame_start_at(file: &dyn Source, offset: u64, len: u64) -> io::Result<u64> {
    if offset >= len {
        return Ok(len);
    }
    // A frame start right at `offset` follows a pattern of up to three
    // bytes before it.
    let mut pos = offset.saturating_sub(3);
    let mut buf = vec![0u8; 1 << 14];
    while pos < len {
        let want = (len - pos).min(buf.len() as u64) as usize;
        let n = read_at_most(file, pos, &mut buf[..want])?;
        if n == 0 {
            break;
        }
        let window = &buf[..n];
        let at_eof = pos + n as u64 >= len;
        let mut from = 0;
        let mut next = pos + n as u64;
        while let Some(i) = memchr::memchr(b'\n', &window[from..]).map(|i| from + i) {
            from = i + 1;
            let end = match (window.get(i + 1), window.get(i + 2)) {
                (Some(b'\n'), _) => i + 2,
                (Some(b'\r'), Some(b'\n')) => i + 3,
                (Some(b'\r'), None) | (None, _) if !at_eof => {
                    // The pattern runs past the window: read on from here.
                    next = pos + i as u64;
                    break;
                }
                _ => continue,
            };
            let end = pos + end as u64;
            if end >= offset {
                return Ok(end);
            }
        }
        if next <= pos {
            // Cannot happen with a 16 KiB window (the `\n` is near its end),
            // but never loop in place.
            next = pos + 1;
        }
        pos = next;
    }
    Ok(len)
}

/// The decoder of a chunk of a split file whose events are copied into the
/// chunk handed over (SSE and JSON arrays: an event is not a slice of what
/// was read), with what [`decode_copied_chunk`] needs to know of its format.
/// Each format implements it beside its decoder.
pub(crate) trait ChunkDecoder: crate::PushDecoder {
    /// Where the chunk after chunk `k` starts (see [`frame_start_at`] and
    /// [`element_start_at`]).
    const START_AT: fn(&dyn Source, u64, u64) -> io::Result<u64>;
    /// Whether those starts are guesses that a chunk may find wrong (see
    /// [`decode_copied_chunk`]), so that a chunk may be one the reader drops.
    const GUESSED_STARTS: bool;
    /// Bytes read at once.
    const PIECE: usize;
    /// Whether the chunk's end ends a piece of the stream that stands
    /// alone (its decoder is finished there), or only the file's end does.
    const FINISH_AT_CHUNK_END: bool;

    /// A decoder for the stream's first chunk, or for one that starts at
    /// a chunk start.
    fn starting(first: bool, options: &DecodeOptions) -> Self;
    /// The next event appended to `chunk` as a copy of its text (no event
    /// of its own is allocated), with its member table when `tables` (see
    /// [`crate::PushDecoder::pull`]).
    fn pull_into(
        &mut self,
        chunk: &mut EventChunk,
        tables: bool,
    ) -> Option<Result<(), DecodeError>>;
    /// Event indexes taken so far.
    fn indexes(&self) -> u64;
    /// Line ends consumed so far.
    fn line_ends(&self) -> u64;
    /// The decoder's input buffer, and whether the decoder failed.
    fn buffer(&mut self) -> (&mut Buffer, bool);
    /// True when it stands where the next chunk's decoder starts.
    fn at_chunk_start(&self) -> bool;
    /// True when decoding is over, `fatal` telling whether the last error
    /// it gave was one that ends the stream.
    fn stopped(&self, fatal: bool) -> bool;

    /// Pushes what `read` reads (at most `max` bytes), read straight into
    /// the decoder's buffer; how many bytes that was.
    fn push_read(
        &mut self,
        max: usize,
        read: impl FnOnce(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let (buf, failed) = self.buffer();
        let n = buf.fill(max, read)?;
        if failed {
            // A decoder that failed keeps nothing (as `push` does).
            buf.clear();
        }
        Ok(n)
    }
}

/// Decodes one chunk of an SSE stream or a JSON array of events, from the
/// chunk start at or after `index * size` to the next chunk's start, with
/// a decoder of its own that starts mid-stream, each event validated and
/// copied into the chunk handed over. Events, errors and
/// positions are those the whole stream's decoder gives there; the counts
/// its end hands back (event indexes, line ends) shift the next chunk's
/// positions.
///
/// An SSE chunk starts where a frame does, and frames never cross a
/// chunk's edge. A JSON chunk starts where an element *seems* to start, by
/// how the bytes around it look, so the start may be wrong: the `},{`
/// before it may lie in a string or in an array nested in an event. The
/// chunk before it knows, because it decodes from a true start (chunk 0
/// from the array's `[`): it stops only where its decoder stands before an
/// element, exactly as a decoder that starts there does. When the next
/// chunk's start is not such a place, it decodes on through that chunk
/// (and as many more as it takes), and its end tells the reader to drop the
/// chunks it decoded over. So a wrong guess costs a chunk decoded twice,
/// and a chunk that may be dropped always ends, whatever went wrong, so the
/// reader can go on past it.
fn decode_copied_chunk<D: ChunkDecoder>(
    file: &dyn Source,
    span: ChunkSpan,
    start: u64,
    options: &DecodeOptions,
    to: &Sink<'_>,
    keep: &mut Option<EventChunk>,
) -> Result<(), Hangup> {
    let send = |msg: Msg| to.tx.send(msg).map_err(|_| Hangup);
    let droppable = D::GUESSED_STARTS && span.index > 0;
    let ended = |events: u64, lines: u64, skip: u64| {
        send(Msg::End {
            events,
            lines,
            skip,
        })
    };
    // A read error ends the reader, unless this chunk is one it drops: so
    // such a chunk still ends, and the thread goes on to its next.
    let io_error = |source: io::Error, byte: u64| {
        send(io_error(source, byte))?;
        if droppable { ended(0, 0, 0) } else { Ok(()) }
    };
    // The start of the chunk after chunk `k`.
    let start_after = |k: u64| D::START_AT(file, (k + 1) * span.size, span.len);
    let mut last = span.index;
    let mut end = match start_after(last) {
        Ok(end) => end,
        Err(e) => return io_error(e, (last + 1) * span.size),
    };
    let mut skip = 0;
    let mut out = Filling::new(to, keep);
    // The events' text is at most the chunk's bytes.
    out.chunk.reserve(end.saturating_sub(start) as usize);
    let mut decoder = D::starting(span.index == 0, options);
    let piece = D::PIECE.min(end.saturating_sub(start) as usize);
    let mut pos = start;
    while start < end {
        if pos < end {
            pos = match push_next_piece(file, pos, end, piece, &mut decoder) {
                Ok(pos) => pos,
                Err(e) => return io_error(e, pos),
            };
        }
        if pos >= end && (D::FINISH_AT_CHUNK_END || end >= span.len) {
            decoder.finish();
        }
        let mut fatal = false;
        while let Some(item) = decoder.pull_into(&mut out.chunk, options.member_tables) {
            // A chunk that decodes over the ones after it hands its events
            // over about two chunks' worth at a time, so a file whose
            // guesses all fail is not held whole (a chunk that ends where
            // it should never holds that much).
            if out.chunk.text_len() as u64 > 2 * span.size {
                out.flush()?;
            }
            if let Err(err) = item {
                out.flush()?;
                fatal = !err.is_recoverable();
                send(Msg::Error(err.shifted(0, 0, start)))?;
                if fatal {
                    break;
                }
            }
        }
        if decoder.stopped(fatal) {
            // The reader ends at this error, unless this chunk is one it
            // drops: then end the chunk, and the thread goes on to its next.
            if !droppable {
                return Err(Hangup);
            }
            break;
        }
        if pos < end {
            continue;
        }
        if end >= span.len || decoder.at_chunk_start() {
            break;
        }
        // The next chunk does not start where an element does: decode on
        // through it.
        skip += 1;
        last += 1;
        end = match start_after(last) {
            Ok(end) => end,
            Err(e) => return io_error(e, (last + 1) * span.size),
        };
    }
    out.done(keep)?;
    ended(decoder.indexes(), decoder.line_ends(), skip)
}

/// Reads the next piece (at most `piece` bytes) of the bytes from `pos` to
/// `end` straight into `decoder`'s buffer; the position after it (`end`
/// when the file got shorter since it was opened).
fn push_next_piece<D: ChunkDecoder>(
    file: &dyn Source,
    pos: u64,
    end: u64,
    piece: usize,
    decoder: &mut D,
) -> io::Result<u64> {
    let want = (end - pos).min(piece as u64) as usize;
    match decoder.push_read(want, |buf| read_at_most(file, pos, buf))? {
        0 => Ok(end),
        n => Ok(pos + n as u64),
    }
}

/// Where a chunk of a JSON array of events starts: the first `{` at or after
/// `offset` that looks like an element's start (`len` when none does). It
/// looks like one when only whitespace and a `,` lie between it and a `}`
/// before it, and a `"` (after whitespace) follows it; one followed by a
/// `"type"` key is preferred within [`PREFER_WITHIN`] bytes of `offset`,
/// since nested objects seldom start with that key and events mostly do.
/// The look is only a guess (see [`decode_copied_chunk`]); what matters is
/// that it depends on the file and `offset` alone, so a chunk's end and the
/// next chunk's start agree.
pub(crate) fn element_start_at(file: &dyn Source, offset: u64, len: u64) -> io::Result<u64> {
    /// The first window is small (a start is usually a few hundred bytes
    /// on, and each chunk looks for two); each next one is twice as large,
    /// up to [`WINDOW`].
    const FIRST: usize = 1 << 12;
    const WINDOW: usize = 1 << 16;
    /// Bytes of look-back and look-ahead around a candidate `{`.
    const MARGIN: usize = 256;
    if offset >= len {
        return Ok(len);
    }
    let is_ws = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let mut buf = vec![0u8; FIRST];
    // Candidates before `from` were looked at in the window before.
    let mut from = offset;
    let mut plain = None;
    loop {
        let pos = from.saturating_sub(MARGIN as u64);
        let want = (len - pos).min(buf.len() as u64) as usize;
        let n = read_at_most(file, pos, &mut buf[..want])?;
        let window = &buf[..n];
        // (A read shorter than asked: the file got shorter since it was
        // opened; look no further.)
        let at_eof = n < want || pos + n as u64 >= len;
        // A candidate needs its look-ahead inside this window (unless the
        // file ends there): those nearer the end wait for the next one.
        let upto = if at_eof { n } else { n.saturating_sub(MARGIN) };
        let lo = (from - pos) as usize;
        for i in memchr::memchr_iter(b'{', &window[lo.min(upto)..upto]).map(|i| lo + i) {
            let mut j = i;
            while j > 0 && is_ws(window[j - 1]) {
                j -= 1;
            }
            if j == 0 || window[j - 1] != b',' {
                continue;
            }
            j -= 1;
            while j > 0 && is_ws(window[j - 1]) {
                j -= 1;
            }
            if j == 0 || window[j - 1] != b'}' {
                continue;
            }
            let mut k = i + 1;
            while k < n && is_ws(window[k]) {
                k += 1;
            }
            if window.get(k) != Some(&b'"') {
                continue;
            }
            let at = pos + i as u64;
            if window[k..].starts_with(b"\"type\"") {
                return Ok(at);
            }
            if at - offset >= PREFER_WITHIN {
                return Ok(plain.unwrap_or(at));
            }
            plain.get_or_insert(at);
        }
        if at_eof || n == 0 {
            return Ok(plain.unwrap_or(len));
        }
        from = pos + upto as u64;
        if buf.len() < WINDOW {
            buf.resize(buf.len() * 2, 0);
        }
        if let Some(plain) = plain
            && from - offset >= PREFER_WITHIN
        {
            return Ok(plain);
        }
    }
}

/// How far past a chunk's nominal start [`element_start_at`] looks for an
/// element that starts with a `"type"` key before it settles for any.
const PREFER_WITHIN: u64 = 1 << 16;

/// The chunk a decoding thread fills with copies of the events it decodes
/// (an SSE or JSON chunk, whose events are not slices of what it read),
/// handed over as the caller takes events: the chunk itself, or owned
/// events copied out of it.
struct Filling<'a, 's> {
    chunk: EventChunk,
    to: &'a Sink<'s>,
}

impl<'a, 's> Filling<'a, 's> {
    /// An empty chunk: the one the thread kept, or one the reader gave back.
    fn new(to: &'a Sink<'s>, keep: &mut Option<EventChunk>) -> Filling<'a, 's> {
        let mut chunk = keep
            .take()
            .or_else(|| to.spare.try_recv().ok())
            .unwrap_or_default();
        chunk.clear();
        Filling { chunk, to }
    }

    /// Hands the events gathered so far over (nothing when there are none).
    fn flush(&mut self) -> Result<(), Hangup> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        let msg = match self.to.handover {
            // The reader gives the chunk back through the spare channel,
            // one for each the thread takes, so buffers are neither piled
            // up nor made anew.
            Handover::Chunks => Msg::Chunk(std::mem::take(&mut self.chunk)),
            Handover::Events => {
                let events = self.chunk.to_events();
                self.chunk.clear();
                Msg::Events(events)
            }
        };
        self.to.tx.send(msg).map_err(|_| Hangup)
    }

    /// The chunk's end: hands the last events over, and keeps the buffers
    /// of a chunk whose events were copied out for the thread's next.
    fn done(mut self, keep: &mut Option<EventChunk>) -> Result<(), Hangup> {
        self.flush()?;
        if self.to.handover == Handover::Events {
            *keep = Some(self.chunk);
        }
        Ok(())
    }
}

/// The first line start at or after `offset`: `offset` itself when the byte
/// before it is `\n`, else the byte after the next `\n` (or `len`).
fn line_start_at(file: &dyn Source, offset: u64, len: u64) -> io::Result<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    const INJECTED: &str = "injected device error";

    /// Bytes that fail to read from `fail_at` on: a read that would reach
    /// that byte returns an error, as a disk with a bad sector does.
    struct Failing {
        bytes: Vec<u8>,
        fail_at: u64,
        fault: Fault,
        /// Whether a read failed yet.
        failed: AtomicBool,
    }

    /// Which reads that reach the bad byte fail.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Fault {
        /// Every one.
        Always,
        /// The first only (a transient error: a later read gets the bytes).
        Once,
        /// Those of one decoding thread: the same read from another
        /// thread (the chunk before, searching for its end where this
        /// one searches for its start) gets the bytes.
        OnThread(&'static str),
    }

    impl Source for Failing {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            let len = self.bytes.len() as u64;
            let end = (offset + buf.len() as u64).min(len);
            let fails = offset < len
                && end > self.fail_at
                && match self.fault {
                    Fault::Always => true,
                    Fault::Once => !self.failed.swap(true, Ordering::AcqRel),
                    Fault::OnThread(name) => std::thread::current().name() == Some(name),
                };
            if fails {
                return Err(io::Error::other(INJECTED));
            }
            let from = offset.min(len) as usize;
            let n = end as usize - from;
            buf[..n].copy_from_slice(&self.bytes[from..end as usize]);
            Ok(n)
        }
    }

    /// A [`Source`] read as a stream, for a source that is not split.
    struct Stream(Arc<Failing>, u64);

    impl Read for Stream {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.read_at(buf, self.1)?;
            self.1 += n as u64;
            Ok(n)
        }
    }

    fn encode(events: &[Event], format: Format) -> Vec<u8> {
        let mut w = crate::Writer::new(Vec::new(), format);
        for e in events {
            w.write_event(e).unwrap();
        }
        w.finish().unwrap()
    }

    /// Realistic events, every tenth one holding what looks like the start
    /// of an array element (`},{"type"`) inside it, so that many guessed
    /// JSON chunk starts are wrong and their chunks are dropped.
    fn corpus() -> Vec<Event> {
        let mut events = agui_testkit::realistic(1500, 11);
        for (i, e) in events.iter_mut().enumerate().filter(|(i, _)| i % 10 == 5) {
            let rows = (0..8)
                .map(|k| format!(r#"{{"type":"row","n":{k},"i":{i}}}"#))
                .collect::<Vec<_>>()
                .join(" , ");
            let text = format!(r#"{{"type":"CUSTOM","name":"rows","value":[{rows}]}}"#);
            *e = Event::from_json(&text).unwrap();
        }
        events
    }

    /// Everything the reader yields (events as text, errors as messages)
    /// until it ends, checking that three more calls yield nothing, and how
    /// many chunks it dropped; on another thread, so that a reader that
    /// never ends fails the test instead of hanging it.
    fn drain(mut reader: ThreadedReader, chunks: bool) -> (Vec<Result<String, String>>, usize) {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                let item = if chunks {
                    reader.next_chunk().map(|item| {
                        item.map(|c| c.iter().map(|e| e.json().to_owned()).collect::<Vec<_>>())
                    })
                } else {
                    reader
                        .next_batch()
                        .map(|item| item.map(|b| b.iter().map(|e| e.json().to_owned()).collect()))
                };
                match item {
                    None => break,
                    Some(Ok(events)) => got.extend(events.into_iter().map(Ok)),
                    Some(Err(e)) => got.push(Err(e.to_string())),
                }
            }
            for _ in 0..3 {
                assert!(reader.next_chunk().is_none(), "an item after the end");
            }
            let _ = tx.send((got, reader.chunks_dropped().0));
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the reader ended (no hang, no panic)")
    }

    /// A read error anywhere in a split file, on every path (a chunk's
    /// boundary search, its body, the tail of its last line, a JSON chunk
    /// that decodes over others, the caller's own chunk): the reader hands
    /// over the file's first events in order, then the one read error, then
    /// nothing; it never hangs, panics or hands over an event twice. An
    /// error that happens once may be met only by a chunk the reader drops
    /// (a wrong JSON guess); the file then reads whole.
    #[test]
    fn a_read_error_anywhere_in_a_split_file_ends_it_cleanly() {
        let events = corpus();
        let expected: Vec<String> = events.iter().map(|e| e.json().to_owned()).collect();
        let mut dropped = 0;
        let mut whole = 0;
        for (format, fault) in [
            (Format::Ndjson, Fault::Always),
            (Format::Sse, Fault::Always),
            (Format::Json, Fault::Always),
            (Format::Json, Fault::Once),
            (Format::Json, Fault::OnThread("agui-decode-1")),
            (Format::Ndjson, Fault::Once),
        ] {
            let strict = fault == Fault::Always;
            let bytes = encode(&events, format);
            let len = bytes.len() as u64;
            // Where each event's text ends in the file (written in order,
            // so each is found after the one before).
            let mut ends = Vec::new();
            let mut from = 0;
            for text in &expected {
                let at = memchr::memmem::find(&bytes[from..], text.as_bytes()).unwrap() + from;
                from = at + text.len();
                ends.push(from as u64);
            }
            let mut fail_ats = vec![0, 1, 4095, 4096, 70_000, len - 2, len - 1];
            fail_ats.extend((1..24).map(|k| k * len / 24 + 17));
            if !strict {
                // Where chunks start: the boundary searches of a chunk and
                // of the one before it read there, in either order.
                fail_ats.extend((1..len / 4096).map(|k| k * 4096 + 1));
                fail_ats.extend((1..len / 9000).map(|k| k * 9000 + 1));
            }
            let policies = [
                (4096, 2, false, "2 threads"),
                (9000, 3, false, "3 threads"),
                (4096, 1, true, "a helping caller"),
            ];
            for fail_at in fail_ats {
                for (chunk, threads, caller_helps, name) in policies {
                    let split = Split {
                        threshold: 0,
                        chunk,
                        threads,
                        caller_helps,
                    };
                    for handover in [Handover::Chunks, Handover::Events] {
                        let source = Arc::new(Failing {
                            bytes: bytes.clone(),
                            fail_at,
                            fault,
                            failed: AtomicBool::new(false),
                        });
                        let stream = Box::new(Stream(Arc::clone(&source), 0));
                        let what = format!(
                            "{format:?}, {fault:?} at {fail_at} of {len}, {name}, {handover:?}"
                        );
                        let started = ThreadedReader::start_source(
                            source,
                            len,
                            stream,
                            DecodeOptions::default(),
                            split,
                            handover,
                        );
                        let reader = match started {
                            Ok(reader) => reader,
                            Err(e) => {
                                // Only the format's detection reads before
                                // the reader starts (its first 64 KiB).
                                assert!(fail_at < 1 << 16, "{what}: {e}");
                                assert!(e.to_string().contains(INJECTED), "{what}: {e}");
                                continue;
                            }
                        };
                        let (got, drops) = drain(reader, handover == Handover::Chunks);
                        dropped += drops;
                        if !strict && got.len() == expected.len() && got.iter().all(Result::is_ok) {
                            // Only chunks the reader dropped met the error.
                            whole += 1;
                            let got: Vec<&String> = got.iter().flatten().collect();
                            assert!(got.iter().zip(&expected).all(|(a, b)| *a == b), "{what}");
                            continue;
                        }
                        let (last, ok) = got.split_last().expect("at least the error");
                        let last = last.as_ref().expect_err(&what);
                        assert!(
                            last.contains("read error") && last.contains(INJECTED),
                            "{what}: {last}"
                        );
                        let ok: Vec<&String> =
                            ok.iter().map(|r| r.as_ref().expect(&what)).collect();
                        // The events before it are the file's first ones.
                        assert!(ok.len() <= expected.len(), "{what}");
                        for (i, (a, b)) in ok.iter().zip(&expected).enumerate() {
                            assert_eq!(*a, b, "{what}: event {i}");
                        }
                        // Every event that ends well before the bad byte
                        // (further than a chunk's boundary search reads
                        // ahead, 64 KiB, and three chunks) is there; where
                        // every read of it fails, none that ends past it.
                        assert!(
                            !strict || ok.is_empty() || ends[ok.len() - 1] <= fail_at,
                            "{what}: an event past the bad byte"
                        );
                        let surely = ends
                            .iter()
                            .take_while(|&&end| end + (1 << 16) + 3 * chunk < fail_at)
                            .count();
                        assert!(
                            ok.len() >= surely,
                            "{what}: {} events, {surely} expected",
                            ok.len()
                        );
                    }
                }
            }
        }
        // The JSON runs went through dropped chunks, and some transient
        // errors were met only by them.
        assert!(dropped > 0, "no chunk dropped");
        eprintln!("{dropped} chunks dropped; {whole} reads whole past a transient error");
    }
}
