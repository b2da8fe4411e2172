//! The file backend of `agui-store` (`file:///DIR`): one directory per store,
//! an append-only log of checksummed records in segment files, full segments
//! sealed with zstd, and an in-memory index rebuilt on open.
//!
//! ```no_run
//! # async fn demo() -> agui_store::Result<()> {
//! use agui_store::Backend;
//! let store = agui_store_file::open("file:///var/lib/agui?durability=append").await?;
//! let stats = store.stats().await?;
//! store.close().await?;
//! # Ok(()) }
//! ```
//!
//! # URL
//!
//! `file:///abs/dir` or `file://relative/dir`, optionally followed by a query
//! of `&`-separated options (no percent-decoding: use a plain path):
//! `durability=append|run_end` (force one [`Durability`] for every append,
//! whatever the request asks), `segment_mb=N` (size at which the active
//! segment is sealed, default 64), `zstd_level=N` (1–22, default 6). See
//! [`FileOptions`].
//!
//! # On-disk format
//!
//! The directory holds a `LOCK` file (an exclusive `flock` while a process
//! has the store open) and segment files named by a 16-digit hexadecimal
//! sequence number. Thread, tenant and run ids never appear in file names:
//! they are stored inside records, so any id (NUL, `../`, `CON`, RTL marks,
//! emoji, 64 KiB) is safe.
//!
//! - `<id>.seg`, a plain segment: the magic `AGUISEG1`, then records. The
//!   highest-numbered one is the active segment, the only file ever appended
//!   to.
//! - `<id>.zseg`, a sealed segment: the magic `AGUIZSG1`, then blocks. Each
//!   block is a header (logical offset of its first byte in the plain
//!   segment: u64; raw length: u32; compressed length: u32; CRC-32 of the
//!   compressed bytes: u32; all little endian) and one zstd frame holding
//!   whole records (about 1 MiB of them). A record keeps its logical offset
//!   when its segment is sealed, so the index never changes.
//! - A record: payload length (u32 LE), CRC-32 of the payload (u32 LE), then
//!   the payload: a kind byte and its fields (strings as u32 length + UTF-8,
//!   integers little endian):
//!
//! | kind | payload |
//! | --- | --- |
//! | 1 batch (written before frames; still read) | tenant, thread, agent (flag byte + string), receive time (i64 µs), first sequence number (u64), event count (u32), then each event's exact JSON text (u32 length + bytes) |
//! | 8 framed batch | tenant, thread, agent, receive time, first sequence number, event count, then the batch as a frame of `agui_store::frame` (codec: u8, body length: u32, body CRC-32: u32, data: u32 length + bytes): each event's type code and exact text, zstd-compressed over the shipped dictionary when that pays |
//! | 2 checkpoint | tenant, thread, run, the checkpoint blob (u32 length + bytes) |
//! | 3 thread deleted | tenant, thread |
//! | 4 runs interrupted | time (i64 µs): every run still `running` became `interrupted` |
//! | 5 checkpoint removed | tenant, thread, run |
//! | 6 channel | tenant, thread, agent, update time (i64 µs), the channel's state (u32 length + JSON object text); replaces the agent's earlier one |
//! | 7 thread renamed | tenant, old thread id, new thread id: everything of the thread (batches, runs, checkpoints, channels) now answers to the new id; later records name the new id |
//!
//! One append is one batch record, so a batch is atomic: on open, a record
//! is either complete with a valid checksum or it is not there.
//!
//! # Opening and recovery
//!
//! Opening replays every record in order and rebuilds the index: per thread
//! its head, counters and run index (with the shared rules of
//! [`agui_store::index`], replayed from the stored receive times so the
//! result is identical), the location of every batch and of every run's
//! latest checkpoint. Payloads are not kept in memory: reads fetch batches
//! by location (a `pread` in a plain segment; one block decompression, with a
//! small cache, in a sealed one).
//!
//! The tail of the active segment is checked record by record. A record that
//! is incomplete or fails its checksum with nothing valid after it is a torn
//! tail (a write cut by a crash): the segment is truncated back to the last
//! complete record and synced, its cut bytes first copied to
//! `torn-<segment>-<offset>.bin` in the store directory, so nothing is
//! destroyed. A complete record that fails its checksum (and is not zeros)
//! is more likely damage than a crash: [`Backend::notices`] says which, and
//! `agui store check` reports it as damage (a cut write as a note), read-only
//! opens included, which cut nothing. A damaged record with valid records after it
//! is not a torn write: a damaged checkpoint is kept (restore detects it and
//! rebuilds it from the log); any other damaged record makes open fail with
//! `Corrupt` rather than silently drop events. A sealed segment is written to
//! a temporary file, synced and renamed; its plain original is removed only
//! afterwards, so a crash during sealing leaves one complete copy.
//!
//! # Durability
//!
//! Every append is written to the active segment (handed to the operating
//! system) before it is acknowledged. Syncs (`fdatasync`) are grouped:
//! concurrent appends that need one share it.
//!
//! | [`Durability`] | synced before the acknowledgement | a process crash (SIGKILL) loses | an OS crash or power loss loses |
//! | --- | --- | --- | --- |
//! | `Append` | every append | nothing acknowledged | nothing acknowledged |
//! | `RunEnd` (default) | appends that end a run (`RUN_FINISHED`, `RUN_ERROR`, or a `RUN_STARTED` that interrupts a running run) | nothing acknowledged | the appends acknowledged since the last synced one (at most the open runs' recent events) |
//!
//! Deleting a thread and marking runs interrupted are always synced.
//! Checkpoints are never synced on their own (they are rebuilt from the log
//! when missing). A segment is synced before the next one is started, and
//! `flush`/`close` sync everything.
//!
//! # Limits
//!
//! Deleted threads and replaced checkpoints stay in their segments until
//! the store is rewritten: space is not reclaimed (there is no compaction
//! yet). Opening replays the whole log, so it takes time proportional to the
//! store's size (every event's envelope is read once). Checkpoints restate
//! a run's whole branch, so on a long single-branch thread their total size
//! grows with the square of the run count and dominates the directory.
//! An `fdatasync` failure is reported to the appender, but the batch was
//! already written and may survive.

mod error;
mod record;
mod segment;
mod state;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, mpsc};
use std::thread::JoinHandle;

use agui_store::cursor::{filter_runs, thread_page};
use agui_store::frame;
use agui_store::index::ThreadHead;
use agui_store::{
    Backend, Batch, CheckpointChain, Commit, Durability, EventPage, Notice, Result, RunFilter,
    RunPage, RunRecord, StoreError, StoreStats, StoredEvent, ThreadFilter, ThreadInfo, ThreadPage,
    Timestamp, page_size,
};
use async_trait::async_trait;

pub use crate::error::FileError;
use crate::record::Frame;
use crate::segment::{Active, BlockCache, Loc, Segment};
use crate::state::{ReplayError, State};

/// How a [`FileStore`] behaves.
#[derive(Debug, Clone)]
pub struct FileOptions {
    /// When set, every append uses this durability whatever its request
    /// asks (e.g. `Some(Durability::Append)`: sync every append).
    pub durability: Option<Durability>,
    /// The active segment is sealed once it holds this many bytes.
    pub segment_bytes: u64,
    /// zstd level of sealed segments (1–22).
    pub zstd_level: i32,
    /// Uncompressed bytes per sealed block (a read decompresses one block).
    pub block_bytes: usize,
    /// Decompressed blocks kept in memory.
    pub cached_blocks: usize,
    /// Open an existing store without its lock and without changing a
    /// byte (see [`open_read_only`]).
    pub read_only: bool,
    /// When the log is damaged in the middle (not a torn tail), cut it at
    /// the first damaged record instead of refusing to open: the records
    /// from there on are dropped (later segments are moved to `damaged/`),
    /// and a warning says how many.
    pub repair: bool,
}

impl Default for FileOptions {
    fn default() -> FileOptions {
        FileOptions {
            durability: None,
            segment_bytes: 64 << 20,
            zstd_level: 6,
            block_bytes: 1 << 20,
            cached_blocks: 16,
            read_only: false,
            repair: false,
        }
    }
}

/// Reads `file:///DIR?opts` into a directory and options.
pub fn parse_url(url: &str) -> Result<(PathBuf, FileOptions)> {
    let rest = url
        .strip_prefix("file://")
        .ok_or_else(|| StoreError::invalid("not a file:// URL"))?;
    let rest = rest.split('#').next().unwrap_or_default();
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, q),
        None => (rest, ""),
    };
    if path.is_empty() {
        return Err(StoreError::invalid("a file:// URL needs a directory"));
    }
    let mut opts = FileOptions::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "durability" => {
                opts.durability = Some(match v {
                    "append" => Durability::Append,
                    "run_end" => Durability::RunEnd,
                    _ => return Err(StoreError::invalid("durability must be append or run_end")),
                })
            }
            "segment_mb" => {
                let mb: u64 = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=1 << 20).contains(n))
                    .ok_or_else(|| StoreError::invalid("segment_mb must be a positive number"))?;
                opts.segment_bytes = mb << 20;
            }
            "zstd_level" => {
                opts.zstd_level = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=22).contains(n))
                    .ok_or_else(|| StoreError::invalid("zstd_level must be 1 to 22"))?;
            }
            "repair" => {
                opts.repair = match v {
                    "" | "1" | "true" => true,
                    "0" | "false" => false,
                    _ => return Err(StoreError::invalid("repair must be true or false")),
                }
            }
            _ => return Err(StoreError::invalid("unknown option in a file:// URL")),
        }
    }
    Ok((PathBuf::from(path), opts))
}

/// Opens `file:///DIR` (creating the directory if needed); see the crate
/// documentation for the URL's options.
pub async fn open(url: &str) -> Result<FileStore> {
    let (dir, opts) = parse_url(url)?;
    FileStore::open(dir, opts).await
}

/// Opens an existing `file:///DIR` store read-only: without its lock (so
/// beside a running gateway), creating nothing, cutting nothing (a torn
/// tail, perhaps a write in progress, is left alone and not read). Every
/// write fails with `Unsupported`. `NotFound` when the directory does not
/// exist or holds no segment.
pub async fn open_read_only(url: &str) -> Result<FileStore> {
    let (dir, mut opts) = parse_url(url)?;
    opts.read_only = true;
    opts.repair = false;
    FileStore::open(dir, opts).await
}

/// The file store. Cloning gives another handle on the same store.
#[derive(Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
}

/// What the sealer thread shares with the store.
struct Shared {
    dir: PathBuf,
    opts: FileOptions,
    segments: RwLock<BTreeMap<u64, Arc<Segment>>>,
    cache: BlockCache,
}

struct Inner {
    shared: Arc<Shared>,
    state: RwLock<State>,
    writer: Mutex<Option<Active>>,
    /// Serializes syncs (waiters find their bytes synced by the one before).
    sync_lock: Mutex<()>,
    /// (segment, length) known to be on stable storage.
    synced: Mutex<(u64, u64)>,
    /// Set when a sync of a segment failed. Linux may drop the pages it
    /// could not write and report the error once, so a later sync that
    /// succeeds proves nothing about them: every write fails from then on,
    /// until the store is reopened (which checks the log).
    broken: AtomicBool,
    #[cfg(test)]
    fail_syncs: AtomicBool,
    closed: AtomicBool,
    sealer: Mutex<Option<(mpsc::Sender<SealJob>, JoinHandle<()>)>>,
    lock: Mutex<Option<std::fs::File>>,
    /// What the open found and set right (see [`Backend::notices`]).
    notices: Vec<Notice>,
}

fn read_lock<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write_lock<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

fn lock<T>(l: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    l.lock().unwrap_or_else(|p| p.into_inner())
}

fn closed() -> StoreError {
    StoreError::unavailable("the store is closed")
}

/// Takes the directory's exclusive lock (released when the file closes,
/// also when the process dies).
fn take_lock(dir: &Path) -> Result<std::fs::File, FileError> {
    use std::os::fd::AsRawFd;
    let path = dir.join("LOCK");
    use std::io::{Read, Seek, Write};
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| FileError::io("open the lock file", &path, e))?;
    // SAFETY: flock on a descriptor this function owns; no memory involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        return Err(FileError::Locked(
            dir.display().to_string(),
            text.trim().parse().ok(),
        ));
    }
    // Best effort: the holder's pid only improves a refused opener's message.
    let _ = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    Ok(file)
}

fn open_blocking(dir: PathBuf, opts: FileOptions) -> Result<FileStore, FileError> {
    let ro = opts.read_only;
    if ro {
        if !dir.is_dir() {
            return Err(FileError::NoStore(dir.display().to_string()));
        }
    } else {
        std::fs::create_dir_all(&dir)
            .map_err(|e| FileError::io("create the store directory", &dir, e))?;
    }
    let mut lock_file = if ro { None } else { Some(take_lock(&dir)?) };
    let mut cuts = 0;
    loop {
        match open_locked(&dir, &opts, &mut lock_file) {
            Err(FileError::Damaged {
                segment,
                offset,
                why,
            }) if opts.repair && !ro && cuts < 8 => {
                cuts += 1;
                repair_cut(&dir, segment, offset, why)?;
            }
            other => return other,
        }
    }
}

/// Copies the bytes of `path` from `from` on to a new file `to` (synced,
/// with its directory) before they are cut from the log.
fn keep_aside(path: &Path, from: u64, to: &Path) -> Result<(), FileError> {
    use std::io::{Seek, SeekFrom};
    let mut src =
        std::fs::File::open(path).map_err(|e| FileError::io("open a segment", path, e))?;
    src.seek(SeekFrom::Start(from))
        .map_err(|e| FileError::io("read a torn tail", path, e))?;
    let mut dst =
        std::fs::File::create(to).map_err(|e| FileError::io("keep a torn tail", to, e))?;
    std::io::copy(&mut src, &mut dst)
        .and_then(|_| dst.sync_all())
        .map_err(|e| FileError::io("keep a torn tail", to, e))?;
    if let Some(dir) = to.parent() {
        segment::sync_dir(dir)?;
    }
    Ok(())
}

/// Cuts the log at a damaged record (`--repair`): the segment is cut before
/// it, every later segment is moved to `damaged/` (kept for inspection).
fn repair_cut(dir: &Path, segment: u64, offset: u64, why: &str) -> Result<(), FileError> {
    let plain = dir.join(segment::plain_name(segment));
    let sealed = dir.join(segment::sealed_name(segment));
    let (mut bytes, mut records) = if sealed.exists() {
        segment::cut_sealed(&sealed, segment, offset)?
    } else {
        let data = std::fs::read(&plain).map_err(|e| FileError::io("read a segment", &plain, e))?;
        let cut = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&plain)
            .map_err(|e| FileError::io("open a segment", &plain, e))?;
        f.set_len(cut as u64)
            .and_then(|()| f.sync_all())
            .map_err(|e| FileError::io("cut a damaged segment", &plain, e))?;
        (
            (data.len() - cut) as u64,
            segment::count_records(&data[cut..]),
        )
    };
    let aside = dir.join("damaged");
    let mut moved = 0;
    let entries =
        std::fs::read_dir(dir).map_err(|e| FileError::io("list the store directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| FileError::io("list the store directory", dir, e))?;
        let name = entry.file_name();
        let Some((id, is_sealed)) = name.to_str().and_then(segment::parse_name) else {
            continue;
        };
        if id <= segment {
            continue;
        }
        let path = entry.path();
        let data = std::fs::read(&path).map_err(|e| FileError::io("read a segment", &path, e))?;
        bytes += data.len() as u64;
        records += if is_sealed {
            0 // counted below when its blocks decompress
        } else {
            segment::count_records(data.get(segment::MAGIC_PLAIN.len()..).unwrap_or_default())
        };
        std::fs::create_dir_all(&aside)
            .map_err(|e| FileError::io("create the damaged/ directory", &aside, e))?;
        let to = aside.join(&name);
        std::fs::rename(&path, &to).map_err(|e| FileError::io("move a segment aside", &to, e))?;
        moved += 1;
    }
    segment::sync_dir(dir)?;
    tracing::warn!(
        segment = format_args!("{segment:016x}"),
        offset,
        reason = why,
        bytes_dropped = bytes,
        records_dropped = records,
        segments_moved_aside = moved,
        "repair: cut the file store's log at a damaged record"
    );
    Ok(())
}

fn open_locked(
    dir: &Path,
    opts: &FileOptions,
    lock_file: &mut Option<std::fs::File>,
) -> Result<FileStore, FileError> {
    let ro = opts.read_only;
    let dir = dir.to_path_buf();
    let opts = opts.clone();
    let mut found: BTreeMap<u64, (bool, bool)> = BTreeMap::new();
    let entries =
        std::fs::read_dir(&dir).map_err(|e| FileError::io("list the store directory", &dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| FileError::io("list the store directory", &dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".zseg.tmp") && !ro {
            // A seal cut short: the plain segment is still there.
            let p = entry.path();
            std::fs::remove_file(&p)
                .map_err(|e| FileError::io("remove a temporary file", &p, e))?;
            continue;
        }
        if let Some((id, sealed)) = segment::parse_name(name) {
            let e = found.entry(id).or_default();
            if sealed {
                e.1 = true;
            } else {
                e.0 = true;
            }
        }
    }
    if ro && found.is_empty() {
        return Err(FileError::NoStore(dir.display().to_string()));
    }
    let last_id = found.keys().next_back().copied();
    let mut state = State::default();
    let mut segments: BTreeMap<u64, Arc<Segment>> = BTreeMap::new();
    let mut to_seal = Vec::new();
    let mut notices = Vec::new();
    let mut active = None;
    for (&id, &(plain, sealed)) in &found {
        let replay = |s: segment::Scanned<'_>, st: &mut State| {
            st.replay(s.payload, s.loc, s.intact).map_err(|e| match e {
                ReplayError::Damaged(why) => FileError::Damaged {
                    segment: s.loc.seg,
                    offset: s.loc.off,
                    why,
                },
                ReplayError::UnknownKind(kind) => FileError::Newer {
                    segment: s.loc.seg,
                    offset: s.loc.off,
                    kind,
                },
            })
        };
        if sealed {
            let path = dir.join(segment::sealed_name(id));
            let seg = segment::scan_sealed(&path, id, |s| replay(s, &mut state))?;
            segments.insert(id, Arc::new(seg));
            if plain && !ro {
                // Sealing finished but the original was not removed yet.
                let p = dir.join(segment::plain_name(id));
                std::fs::remove_file(&p).map_err(|e| FileError::io("remove a segment", &p, e))?;
                segment::sync_dir(&dir)?;
            }
            continue;
        }
        let path = dir.join(segment::plain_name(id));
        let scan = segment::scan_plain(&path, id, |s| replay(s, &mut state))?;
        let is_last = Some(id) == last_id;
        if scan.torn && !is_last {
            return Err(FileError::Damaged {
                segment: id,
                offset: scan.valid_len,
                why: "a full segment ends with an incomplete record",
            });
        }
        if scan.valid_len == 0 {
            // Its creation was cut short: nothing was ever appended to it.
            if !ro {
                std::fs::remove_file(&path)
                    .map_err(|e| FileError::io("remove a segment", &path, e))?;
                segment::sync_dir(&dir)?;
            }
            continue;
        }
        if scan.torn {
            // Kept aside, never destroyed: a tail cut by a crash was never
            // acknowledged, but a damaged complete record may have been.
            let aside = format!("torn-{id:016x}-{}.bin", scan.valid_len);
            let what = format!(
                "segment {id:016x} ends with {} bytes ({} records) that fail their checksums: {}; {}",
                scan.file_len - scan.valid_len,
                scan.torn_records,
                if scan.complete_damaged {
                    "a complete record among them means damage (or a crash on a file system that grows a file before writing it)"
                } else {
                    "a write cut short by a crash"
                },
                if ro {
                    format!(
                        "the next open for writing moves them to {aside} in the store directory"
                    )
                } else {
                    format!("moved to {aside} in the store directory")
                },
            );
            notices.push(Notice {
                what: what.clone(),
                damage: scan.complete_damaged,
            });
            if !ro {
                tracing::warn!(
                    segment = format_args!("{id:016x}"),
                    bytes_dropped = scan.file_len - scan.valid_len,
                    records_dropped = scan.torn_records,
                    kept_bytes = scan.valid_len,
                    "cut a torn tail of the file store's log: {what}"
                );
                keep_aside(&path, scan.valid_len, &dir.join(&aside))?;
            }
        }
        if scan.torn && !ro {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| FileError::io("open a segment", &path, e))?;
            f.set_len(scan.valid_len)
                .and_then(|()| f.sync_all())
                .map_err(|e| FileError::io("cut a torn tail", &path, e))?;
        }
        let file =
            std::fs::File::open(&path).map_err(|e| FileError::io("open a segment", &path, e))?;
        segments.insert(
            id,
            Arc::new(Segment::Plain {
                id,
                file,
                path: path.clone(),
            }),
        );
        if ro {
            continue;
        }
        if is_last && scan.valid_len < opts.segment_bytes {
            active = Some(Active::reopen(&dir, id, scan.valid_len)?);
        } else {
            to_seal.push(id);
        }
    }
    let active = match active {
        _ if ro => None,
        Some(a) => Some(a),
        None => {
            let a = Active::create(&dir, last_id.map_or(1, |i| i + 1))?;
            segments.insert(a.id, Arc::new(a.segment()?));
            Some(a)
        }
    };
    let synced = active.as_ref().map_or((0, 0), |a| (a.id, a.len));
    let shared = Arc::new(Shared {
        dir,
        cache: BlockCache::new(opts.cached_blocks),
        opts,
        segments: RwLock::new(segments),
    });
    let (tx, rx) = mpsc::channel::<SealJob>();
    let sealer_shared = shared.clone();
    let handle = std::thread::Builder::new()
        .name("agui-file-sealer".into())
        .spawn(move || sealer(sealer_shared, rx))
        .map_err(|e| FileError::io("start the sealer", &shared.dir, e))?;
    for id in to_seal {
        let _ = tx.send(SealJob::Seal(id));
    }
    Ok(FileStore {
        inner: Arc::new(Inner {
            shared,
            state: RwLock::new(state),
            writer: Mutex::new(active),
            sync_lock: Mutex::new(()),
            synced: Mutex::new(synced),
            broken: AtomicBool::new(false),
            #[cfg(test)]
            fail_syncs: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            sealer: Mutex::new(Some((tx, handle))),
            lock: Mutex::new(lock_file.take()),
            notices,
        }),
    })
}

/// Work for the sealer thread.
enum SealJob {
    /// Seal this segment.
    Seal(u64),
    /// Answer once every segment sent before is sealed (or failed).
    Barrier(mpsc::Sender<()>),
}

/// Seals the segments it is sent, one after the other, until the store
/// closes. A failed seal leaves the plain segment (retried at next open).
fn sealer(shared: Arc<Shared>, rx: mpsc::Receiver<SealJob>) {
    while let Ok(job) = rx.recv() {
        let id = match job {
            SealJob::Seal(id) => id,
            SealJob::Barrier(done) => {
                let _ = done.send(());
                continue;
            }
        };
        let Ok(seg) = segment::seal(
            &shared.dir,
            id,
            shared.opts.zstd_level,
            shared.opts.block_bytes,
        ) else {
            continue;
        };
        write_lock(&shared.segments).insert(id, Arc::new(seg));
        shared.cache.forget(id);
        let plain = shared.dir.join(segment::plain_name(id));
        if std::fs::remove_file(&plain).is_ok() {
            let _ = segment::sync_dir(&shared.dir);
        }
    }
}

impl FileStore {
    /// Opens (creating if needed) the store in `dir`: takes its lock,
    /// replays the log, cuts a torn tail. Runs left `running` by a crash stay
    /// so until [`Backend::mark_interrupted`].
    pub async fn open(dir: impl AsRef<Path>, options: FileOptions) -> Result<FileStore> {
        let dir = dir.as_ref().to_path_buf();
        tokio::task::spawn_blocking(move || open_blocking(dir, options))
            .await
            .map_err(|_| StoreError::internal("the store could not be opened"))?
            .map_err(StoreError::from)
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.shared.dir
    }

    /// Removes a run's stored checkpoint (it is rebuilt from the log on the
    /// run's next restore). Returns whether there was one.
    pub async fn remove_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<bool> {
        self.check_writable()?;
        let (tenant, thread, run) = (tenant.to_owned(), thread.to_owned(), run_id.to_owned());
        self.blocking(move |i| {
            let mut w = lock(&i.writer);
            let active = w.as_mut().ok_or_else(closed)?;
            let has = read_lock(&i.state)
                .thread(&tenant, &thread)
                .ok_or_else(|| StoreError::not_found("thread"))?
                .checkpoints
                .contains_key(&run);
            if !has {
                return Ok(false);
            }
            let mut rec = record::Writer::new(record::UNCHECKPOINT);
            rec.str(&tenant).str(&thread).str(&run);
            i.write(active, &rec.frame()?)?;
            write_lock(&i.state).set_checkpoint(&tenant, &thread, &run, None);
            Ok(true)
        })
        .await
    }

    /// Seals the active segment now (when it holds any record) and waits
    /// until every full segment is sealed: afterwards the whole log is
    /// compressed. Appends continue in a new segment meanwhile.
    pub async fn seal(&self) -> Result<()> {
        self.check_writable()?;
        self.blocking(|i| {
            {
                let mut w = lock(&i.writer);
                let active = w.as_mut().ok_or_else(closed)?;
                if active.len > segment::MAGIC_PLAIN.len() as u64 {
                    i.rotate(active)?;
                }
            }
            let (done, wait) = mpsc::channel();
            if let Some((tx, _)) = lock(&i.sealer).as_ref() {
                let _ = tx.send(SealJob::Barrier(done));
            }
            // An error only means the sealer stopped (store closing).
            let _ = wait.recv();
            Ok(())
        })
        .await
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        Ok(())
    }

    /// `Unsupported` on a store opened read-only.
    fn check_writable(&self) -> Result<()> {
        if self.inner.shared.opts.read_only {
            return Err(FileError::ReadOnly.into());
        }
        Ok(())
    }

    /// True when opened with [`open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.shared.opts.read_only
    }

    /// Runs `f` on a blocking thread.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.check_open()?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|_| StoreError::internal("a store task failed"))?
    }
}

impl Inner {
    /// Appends a frame to the active segment (rotating it when full).
    fn write(&self, active: &mut Active, frame: &[u8]) -> Result<Loc, FileError> {
        if self.broken.load(Ordering::Acquire) {
            return Err(FileError::FlushFailed);
        }
        let loc = active.append(frame)?;
        if active.len >= self.shared.opts.segment_bytes {
            // A failed rotation leaves the full segment active; the next
            // append tries again.
            let _ = self.rotate(active);
        }
        Ok(loc)
    }

    fn rotate(&self, active: &mut Active) -> Result<(), FileError> {
        self.synced_or_broken(active.sync())?;
        let next = Active::create(&self.shared.dir, active.id + 1)?;
        let seg = next.segment()?;
        write_lock(&self.shared.segments).insert(next.id, Arc::new(seg));
        let old = std::mem::replace(active, next);
        *lock(&self.synced) = (active.id, active.len);
        if let Some((tx, _)) = lock(&self.sealer).as_ref() {
            let _ = tx.send(SealJob::Seal(old.id));
        }
        Ok(())
    }

    /// Passes a sync's result on; a failed sync breaks the store (see
    /// `broken`).
    fn synced_or_broken(&self, r: Result<(), FileError>) -> Result<(), FileError> {
        if r.is_err() {
            self.broken.store(true, Ordering::Release);
        }
        r
    }

    /// Makes everything up to `(seg, end)` durable (one sync serves every
    /// waiter whose bytes it covers). Fails once a sync failed (see
    /// `broken`).
    fn sync_through(&self, seg: u64, end: u64) -> Result<(), FileError> {
        let _one = lock(&self.sync_lock);
        if *lock(&self.synced) >= (seg, end) {
            return Ok(());
        }
        let (file, path, cur) = {
            let w = lock(&self.writer);
            let Some(a) = w.as_ref() else {
                return Ok(()); // closed: close synced everything
            };
            (a.file.clone(), a.path.clone(), (a.id, a.len))
        };
        if seg < cur.0 {
            return Ok(()); // rotation synced that segment
        }
        if self.broken.load(Ordering::Acquire) {
            return Err(FileError::FlushFailed);
        }
        #[cfg(test)]
        if self.fail_syncs.load(Ordering::Acquire) {
            let e = std::io::Error::other("the disk is gone (test)");
            return self.synced_or_broken(Err(FileError::io("sync a segment", &path, e)));
        }
        self.synced_or_broken(
            file.sync_data()
                .map_err(|e| FileError::io("sync a segment", &path, e)),
        )?;
        let mut s = lock(&self.synced);
        if *s < cur {
            *s = cur;
        }
        Ok(())
    }

    fn segment(&self, seg: u64) -> Result<Arc<Segment>, FileError> {
        read_lock(&self.shared.segments)
            .get(&seg)
            .cloned()
            .ok_or(FileError::Damaged {
                segment: seg,
                offset: 0,
                why: "the index names a missing segment",
            })
    }

    /// The frame at `loc`.
    fn read_raw(&self, loc: Loc) -> Result<Vec<u8>, FileError> {
        self.segment(loc.seg)?.read(loc, &self.shared.cache)
    }
}

/// Where an append must be synced to before it is acknowledged: (segment,
/// end offset of its record).
type SyncTo = (u64, u64);

impl Inner {
    /// Writes a planned batch record to the active segment (the page cache)
    /// and indexes it, if the thread's head is still the batch's; else
    /// returns the head as it is. With the record written, returns its end
    /// when the append must be synced before it is acknowledged (the caller
    /// syncs with [`Inner::sync_through`], on a blocking thread).
    fn append(
        &self,
        tenant: &str,
        thread: &str,
        batch: &Batch,
    ) -> Result<std::result::Result<Option<SyncTo>, ThreadHead>> {
        let plan = &batch.plan;
        // Framed (and compressed) before any lock is taken.
        let data = frame::encode(&batch.events)?;
        let frame = record::encode_batch(
            tenant,
            thread,
            batch.agent.as_deref(),
            plan.received_at.0,
            plan.first_seq,
            batch.events.len(),
            &data,
        )?;
        drop(data);
        let mut w = lock(&self.writer);
        let active = w.as_mut().ok_or_else(closed)?;
        {
            // Only writers change the state, and this one holds the writer
            // lock: the head cannot move before `apply_batch`.
            let st = read_lock(&self.state);
            let t = st.thread(tenant, thread);
            if let Some(now) = batch.moved_from(t.map(|t| &t.head)) {
                return Ok(Err(now));
            }
            if let Some(t) = t {
                t.runs.refuse_reused(plan)?;
            }
        }
        let loc = self.write(active, &frame)?;
        drop(frame);
        let count = batch.events.len() as u32;
        write_lock(&self.state).apply_batch(
            tenant,
            thread,
            batch.agent.as_deref(),
            plan,
            count,
            loc,
        );
        drop(w);
        // The store's own durability, when configured, overrides the batch's.
        let durability = self.shared.opts.durability.unwrap_or(batch.durability);
        let sync = plan.must_sync(durability);
        Ok(Ok(sync.then(|| (loc.seg, loc.off + u64::from(loc.len)))))
    }

    fn read_page(
        &self,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<EventPage> {
        let from = from_seq.max(1);
        let limit = page_size(limit);
        let (batches, last_seq) = {
            let st = read_lock(&self.state);
            let t = st
                .thread(tenant, thread)
                .ok_or_else(|| StoreError::not_found("thread"))?;
            (t.batches_from(from, limit), t.head.last_seq)
        };
        let mut events = Vec::with_capacity(limit.min(4096));
        'batches: for b in batches {
            let raw = self.read_raw(b.loc)?;
            let damaged = |why| FileError::Damaged {
                segment: b.loc.seg,
                offset: b.loc.off,
                why,
            };
            let Frame::Ok(payload, _) = record::read_frame(&raw) else {
                return Err(damaged("batch record checksum").into());
            };
            let rec = record::decode_batch(payload)?;
            if rec.first_seq != b.first_seq || rec.events.len() != b.count as usize {
                return Err(damaged("batch record does not match the index").into());
            }
            for (event, seq) in rec.events.into_iter().zip(b.first_seq..) {
                if seq < from {
                    continue;
                }
                if events.len() >= limit {
                    break 'batches;
                }
                events.push(StoredEvent {
                    seq,
                    received_at: b.received_at,
                    event,
                });
            }
        }
        EventPage::starting_at(events, from, last_seq)
    }

    fn stop(&self) -> Result<(), FileError> {
        let active = lock(&self.writer).take();
        let result = active.as_ref().map_or(Ok(()), Active::sync);
        if let Some((tx, handle)) = lock(&self.sealer).take() {
            drop(tx);
            let _ = handle.join();
        }
        drop(lock(&self.lock).take());
        result
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Decodes a checkpoint payload into its blob, tolerating damage (the blob
/// is handed over unchecked; [`agui_store::checkpoint`] checks it).
fn checkpoint_blob(payload: &[u8]) -> Vec<u8> {
    let mut r = record::Reader::new(payload);
    let blob = (|| -> Result<&[u8], FileError> {
        r.u8()?;
        r.str()?;
        r.str()?;
        r.str()?;
        r.bytes()
    })();
    blob.map(<[u8]>::to_vec).unwrap_or_default()
}

#[async_trait]
impl Backend for FileStore {
    fn notices(&self) -> Vec<Notice> {
        self.inner.notices.clone()
    }

    async fn head(&self, tenant: &str, thread: &str) -> Result<ThreadHead> {
        self.check_open()?;
        let st = read_lock(&self.inner.state);
        Ok(st
            .thread(tenant, thread)
            .map(|t| t.head.clone())
            .unwrap_or_default())
    }

    async fn commit(&self, tenant: &str, thread: &str, batch: &Batch) -> Result<Commit> {
        self.check_writable()?;
        self.check_open()?;
        // A write to the page cache takes microseconds: done here, with no
        // hop to a blocking thread. Only a sync (an fdatasync: milliseconds)
        // goes to one. A full segment's rotation also syncs here, once per
        // `segment_mb`.
        let sync_to = match self.inner.append(tenant, thread, batch)? {
            Ok(sync_to) => sync_to,
            Err(head) => return Ok(Commit::HeadMoved(head)),
        };
        let durable = sync_to.is_some();
        if let Some((seg, end)) = sync_to {
            // Not `blocking`: a close in between must not turn a written
            // batch into a failed append (a close syncs everything anyway).
            let inner = self.inner.clone();
            tokio::task::spawn_blocking(move || inner.sync_through(seg, end))
                .await
                .map_err(|_| StoreError::internal("a store task failed"))??;
        }
        Ok(Commit::Done { durable })
    }

    async fn read(
        &self,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<EventPage> {
        let (t, th) = (tenant.to_owned(), thread.to_owned());
        self.blocking(move |i| i.read_page(&t, &th, from_seq, limit))
            .await
    }

    async fn run(&self, tenant: &str, thread: &str, run_id: &str) -> Result<RunRecord> {
        self.check_open()?;
        let st = read_lock(&self.inner.state);
        let t = st
            .thread(tenant, thread)
            .ok_or_else(|| StoreError::not_found("thread"))?;
        t.runs.get(run_id).cloned()
    }

    async fn list_runs(&self, tenant: &str, filter: &RunFilter) -> Result<RunPage> {
        self.check_open()?;
        let after = filter.after()?;
        let st = read_lock(&self.inner.state);
        let Some(ten) = st.tenants.get(tenant) else {
            return Ok(RunPage::default());
        };
        let threads: Vec<&state::ThreadState> = match &filter.thread_id {
            Some(id) => ten.threads.get(id).into_iter().collect(),
            None => ten.threads.values().collect(),
        };
        let runs = threads.into_iter().flat_map(|t| t.runs.iter());
        Ok(filter_runs(runs, filter, after.as_ref()))
    }

    async fn thread(&self, tenant: &str, thread: &str) -> Result<ThreadInfo> {
        self.check_open()?;
        let st = read_lock(&self.inner.state);
        st.thread(tenant, thread)
            .map(|t| t.info(thread))
            .ok_or_else(|| StoreError::not_found("thread"))
    }

    async fn list_threads(&self, tenant: &str, filter: &ThreadFilter) -> Result<ThreadPage> {
        self.check_open()?;
        let after = filter.after()?;
        let limit = filter.page_size();
        let st = read_lock(&self.inner.state);
        let Some(ten) = st.tenants.get(tenant) else {
            return Ok(ThreadPage::default());
        };
        let start = match &after {
            Some(c) => Bound::Excluded((std::cmp::Reverse(c.updated_at), c.thread_id.clone())),
            None => Bound::Unbounded,
        };
        let mut threads = Vec::new();
        for (_, id) in ten.by_activity.range((start, Bound::Unbounded)) {
            let Some(t) = ten.threads.get(id) else {
                continue;
            };
            if !filter.wants_agent(t.agent.as_ref()) {
                continue;
            }
            threads.push(t.info(id));
            // One more than the page tells whether another page follows.
            if threads.len() > limit {
                break;
            }
        }
        Ok(thread_page(threads, limit))
    }

    async fn delete_thread(&self, tenant: &str, thread: &str) -> Result<()> {
        self.check_writable()?;
        let (t, th) = (tenant.to_owned(), thread.to_owned());
        self.blocking(move |i| {
            let mut w = lock(&i.writer);
            let active = w.as_mut().ok_or_else(closed)?;
            if read_lock(&i.state).thread(&t, &th).is_none() {
                return Err(StoreError::not_found("thread"));
            }
            let mut rec = record::Writer::new(record::DELETE);
            rec.str(&t).str(&th);
            let loc = i.write(active, &rec.frame()?)?;
            write_lock(&i.state).delete(&t, &th);
            drop(w);
            i.sync_through(loc.seg, loc.off + u64::from(loc.len))?;
            Ok(())
        })
        .await
    }

    async fn rename_thread(&self, tenant: &str, from: &str, to: &str) -> Result<()> {
        self.check_writable()?;
        let (t, f, n) = (tenant.to_owned(), from.to_owned(), to.to_owned());
        self.blocking(move |i| {
            let mut w = lock(&i.writer);
            let active = w.as_mut().ok_or_else(closed)?;
            {
                let st = read_lock(&i.state);
                if st.thread(&t, &f).is_none() {
                    return Err(StoreError::not_found("thread"));
                }
                if f == n {
                    return Ok(());
                }
                if st.thread(&t, &n).is_some() {
                    return Err(StoreError::thread_exists(&n));
                }
            }
            let mut rec = record::Writer::new(record::RENAME);
            rec.str(&t).str(&f).str(&n);
            let loc = i.write(active, &rec.frame()?)?;
            write_lock(&i.state).rename(&t, &f, &n);
            drop(w);
            i.sync_through(loc.seg, loc.off + u64::from(loc.len))?;
            Ok(())
        })
        .await
    }

    async fn channels(&self, tenant: &str, thread: &str) -> Result<Vec<agui_store::Channel>> {
        self.check_open()?;
        Ok(read_lock(&self.inner.state)
            .thread(tenant, thread)
            .map(|t| t.channels.values().cloned().collect())
            .unwrap_or_default())
    }

    async fn put_channel(
        &self,
        tenant: &str,
        thread: &str,
        channel: agui_store::Channel,
    ) -> Result<()> {
        let (t, th) = (tenant.to_owned(), thread.to_owned());
        self.blocking(move |i| {
            if channel.state.len() > record::MAX_PAYLOAD / 2 {
                return Err(FileError::TooLarge.into());
            }
            let mut rec = record::Writer::new(record::CHANNEL);
            rec.str(&t)
                .str(&th)
                .str(&channel.agent)
                .i64(channel.updated_at.0)
                .str(&channel.state);
            let frame = rec.frame()?;
            let mut w = lock(&i.writer);
            let active = w.as_mut().ok_or_else(closed)?;
            if read_lock(&i.state).thread(&t, &th).is_none() {
                return Err(StoreError::not_found("thread"));
            }
            let loc = i.write(active, &frame)?;
            write_lock(&i.state).set_channel(&t, &th, channel);
            drop(w);
            i.sync_through(loc.seg, loc.off + u64::from(loc.len))?;
            Ok(())
        })
        .await
    }

    async fn tenants(&self) -> Result<Vec<String>> {
        self.check_open()?;
        Ok(read_lock(&self.inner.state)
            .tenants
            .keys()
            .cloned()
            .collect())
    }

    async fn load_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        let loc = {
            let st = read_lock(&self.inner.state);
            let t = st
                .thread(tenant, thread)
                .ok_or_else(|| StoreError::not_found("thread"))?;
            match t.checkpoints.get(run_id) {
                Some(l) => *l,
                None => return Ok(None),
            }
        };
        self.blocking(move |i| {
            let raw = i.read_raw(loc)?;
            Ok(Some(match record::read_frame(&raw) {
                Frame::Ok(p, _) | Frame::Damaged(p, _) => checkpoint_blob(p),
                Frame::Incomplete => Vec::new(),
            }))
        })
        .await
    }

    /// The run's blob and its bases, read in one blocking task: each
    /// delta's base is read from the head of its blob
    /// ([`agui_store::checkpoint::base_run`]), so the engine composes the
    /// chain at once (on two threads when it is large) instead of
    /// repairing it link by link.
    async fn checkpoint_chain(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<CheckpointChain> {
        self.check_open()?;
        let (status, last_seq) = {
            let st = read_lock(&self.inner.state);
            let t = st
                .thread(tenant, thread)
                .ok_or_else(|| StoreError::not_found("thread"))?;
            let run = t.runs.get(run_id)?;
            (run.status, run.last_seq)
        };
        let (tenant, thread, run_id) = (tenant.to_owned(), thread.to_owned(), run_id.to_owned());
        let links = self
            .blocking(move |i| {
                let mut links: Vec<(String, bytes::Bytes)> = Vec::new();
                let mut next = Some(run_id);
                while let Some(id) = next.take()
                    && links.len() < agui_store::checkpoint::MAX_CHAIN
                {
                    let loc = {
                        let st = read_lock(&i.state);
                        match st
                            .thread(&tenant, &thread)
                            .and_then(|t| t.checkpoints.get(&id))
                        {
                            Some(loc) => *loc,
                            None => break,
                        }
                    };
                    let blob = match record::read_frame(&i.read_raw(loc)?) {
                        Frame::Ok(p, _) | Frame::Damaged(p, _) => checkpoint_blob(p),
                        Frame::Incomplete => break,
                    };
                    next = agui_store::checkpoint::base_run(&blob);
                    links.push((id, blob.into()));
                }
                Ok(links)
            })
            .await?;
        Ok(CheckpointChain {
            status,
            last_seq,
            links,
        })
    }

    async fn save_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
        blob: Vec<u8>,
    ) -> Result<()> {
        self.check_writable()?;
        let (t, th, run) = (tenant.to_owned(), thread.to_owned(), run_id.to_owned());
        self.blocking(move |i| {
            if blob.len() > record::MAX_PAYLOAD / 2 {
                return Err(FileError::TooLarge.into());
            }
            let mut rec = record::Writer::new(record::CHECKPOINT);
            rec.str(&t).str(&th).str(&run).bytes(&blob);
            let frame = rec.frame()?;
            let mut w = lock(&i.writer);
            let active = w.as_mut().ok_or_else(closed)?;
            read_lock(&i.state).run_exists(&t, &th, &run)?;
            let loc = i.write(active, &frame)?;
            write_lock(&i.state).set_checkpoint(&t, &th, &run, Some(loc));
            Ok(())
        })
        .await
    }

    async fn mark_interrupted(&self) -> Result<Vec<(String, RunRecord)>> {
        self.check_writable()?;
        self.blocking(|i| {
            let mut w = lock(&i.writer);
            let active = w.as_mut().ok_or_else(closed)?;
            if read_lock(&i.state).running_runs() == 0 {
                return Ok(Vec::new());
            }
            let now = Timestamp::now();
            let mut rec = record::Writer::new(record::INTERRUPTED);
            rec.i64(now.0);
            let loc = i.write(active, &rec.frame()?)?;
            let marked = write_lock(&i.state).interrupt(now);
            drop(w);
            i.sync_through(loc.seg, loc.off + u64::from(loc.len))?;
            Ok(marked)
        })
        .await
    }

    async fn ready(&self) -> Result<()> {
        self.check_open()?;
        if self.inner.broken.load(Ordering::Acquire) {
            return Err(FileError::FlushFailed.into());
        }
        Ok(())
    }

    async fn stats(&self) -> Result<StoreStats> {
        self.check_open()?;
        let mut s = StoreStats::default();
        {
            let st = read_lock(&self.inner.state);
            for ten in st.tenants.values() {
                s.tenants += 1;
                for t in ten.threads.values() {
                    s.threads += 1;
                    s.runs += t.runs.len() as u64;
                    s.events += t.head.last_seq;
                    s.raw_bytes += t.bytes;
                }
            }
        }
        let paths: Vec<PathBuf> = read_lock(&self.inner.shared.segments)
            .values()
            .map(|s| s.path().to_path_buf())
            .collect();
        s.stored_bytes = self
            .blocking(move |_| {
                Ok(paths
                    .iter()
                    .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
                    .sum())
            })
            .await?;
        Ok(s)
    }

    async fn flush(&self) -> Result<()> {
        if self.is_read_only() {
            return self.check_open();
        }
        self.blocking(|i| {
            let cur = lock(&i.writer)
                .as_ref()
                .map(|a| (a.id, a.len))
                .ok_or_else(closed)?;
            i.sync_through(cur.0, cur.1)?;
            Ok(())
        })
        .await
    }

    async fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.stop())
            .await
            .map_err(|_| StoreError::internal("the store could not be closed"))?
            .map_err(StoreError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agui_store::sample::{full_run, run_started};
    use agui_store::{AppendRequest, ErrorKind, Store};

    /// A failed sync breaks the store: the append that waited for it fails,
    /// and every later write fails too (one that needs no sync included,
    /// and after the disk is back), writing nothing; reads go on; the store
    /// is not ready; a reopen finds every append acknowledged before.
    #[tokio::test]
    async fn a_failed_sync_makes_the_store_refuse_writes_until_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap();
        let inner = fs.inner.clone();
        let store = Store::new(fs);
        let kept = full_run("a", "r1", None, "kept");
        let n = kept.len() as u64;
        store
            .append("t", "a", AppendRequest::new(kept))
            .await
            .unwrap();

        inner.fail_syncs.store(true, Ordering::Release);
        let run = full_run("b", "r1", None, "its end waits for a sync");
        let err = store
            .append("t", "b", AppendRequest::new(run))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        // The disk is back; the store still refuses, and says why.
        inner.fail_syncs.store(false, Ordering::Release);
        let start = vec![run_started("c", "r1", None)];
        let err = store
            .append("t", "c", AppendRequest::new(start))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert!(err.message().contains("until reopened"), "{err}");
        assert_eq!(
            store.thread("t", "c").await.unwrap_err().kind(),
            ErrorKind::NotFound,
            "nothing written"
        );
        let not_ready = store.ready().await.unwrap_err();
        assert_eq!(not_ready.kind(), ErrorKind::Unavailable);
        assert!(!not_ready.message().contains(&*dir.path().to_string_lossy()));
        assert_eq!(store.thread("t", "a").await.unwrap().last_seq, n);
        store.close().await.unwrap();

        let store = Store::new(
            FileStore::open(dir.path(), FileOptions::default())
                .await
                .unwrap(),
        );
        store.ready().await.expect("a reopened store is ready");
        assert_eq!(store.thread("t", "a").await.unwrap().last_seq, n);
        store
            .append(
                "t",
                "c",
                AppendRequest::new(vec![run_started("c", "r1", None)]),
            )
            .await
            .expect("a reopened store takes writes");
        store.close().await.unwrap();
    }
}
