//! The single writer thread: every write goes through it, grouped into one
//! transaction per wake-up (group commit), each request in its own savepoint
//! so that one failing request does not fail the others.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use agui_store::frame;
use agui_store::index::ThreadHead;
use agui_store::{Batch, Commit, Result, RunRecord, RunStatus, StoreError, Timestamp};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use tokio::sync::oneshot;

use crate::db::{self, map, status_code, status_from};

/// A thread's row id and head as stored, `None` when it does not exist.
pub(crate) fn load_head(conn: &Connection, tenant: &str, thread: &str) -> Result<Option<Head>> {
    let row = conn
        .prepare_cached(
            "SELECT id, last_seq, updated_at, last_run, last_run_status FROM threads
                 WHERE tenant = ?1 AND thread = ?2",
        )
        .and_then(|mut st| {
            st.query_row(params![tenant.as_bytes(), thread.as_bytes()], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<Vec<u8>>>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                ))
            })
            .optional()
        })
        .map_err(|e| map(e, "read a thread"))?;
    let Some((id, last_seq, updated_at, last_run, status)) = row else {
        return Ok(None);
    };
    let last_run = match (last_run, status) {
        (Some(r), Some(s)) => Some((db::text(r)?, status_from(s)?)),
        _ => None,
    };
    Ok(Some(Head {
        id,
        head: ThreadHead {
            last_seq: db::count(last_seq)?,
            updated_at: Some(Timestamp(updated_at)),
            last_run,
        },
    }))
}

/// Why a store whose flush failed refuses a write (and is not ready).
pub(crate) const REFUSING: &str =
    "the store could not flush its log to disk earlier; it refuses writes until reopened";

/// Requests grouped into one transaction at most.
const GROUP: usize = 512;
/// Thread heads kept in memory at most.
const HEADS: usize = 100_000;

/// One write request.
pub enum Op {
    Append {
        tenant: String,
        thread: String,
        batch: Batch,
        reply: oneshot::Sender<Result<Commit>>,
    },
    SaveCheckpoint {
        tenant: String,
        thread: String,
        run_id: String,
        blob: Vec<u8>,
        /// The base run the blob names (`checkpoint::base_run`).
        base: Option<String>,
        reply: oneshot::Sender<Result<()>>,
    },
    Delete {
        tenant: String,
        thread: String,
        reply: oneshot::Sender<Result<()>>,
    },
    PutChannel {
        tenant: String,
        thread: String,
        channel: agui_store::Channel,
        reply: oneshot::Sender<Result<()>>,
    },
    Rename {
        tenant: String,
        from: String,
        to: String,
        reply: oneshot::Sender<Result<()>>,
    },
    /// Answers the runs marked, with their tenants, as they now stand.
    MarkInterrupted {
        reply: oneshot::Sender<Result<Vec<(String, RunRecord)>>>,
    },
    Flush {
        reply: oneshot::Sender<Result<()>>,
    },
    /// Replaces rows of a thread with one packed frame (see `pack.rs`) if
    /// they are still exactly `old`; answers 1 when it did, 0 when they
    /// changed (nothing written).
    Pack {
        pack: Box<Pack>,
        reply: oneshot::Sender<Result<u64>>,
    },
}

/// What [`Op::Pack`] replaces and with what.
pub struct Pack {
    pub thread_id: i64,
    /// The rows as the packer read them: first and last sequence, stored bytes.
    pub old: Vec<(i64, i64, Vec<u8>)>,
    /// Receive time of the first batch (the row's own column).
    pub received_at: i64,
    /// Events in `frame`: those of the rows, or the pack is refused.
    pub events: u64,
    pub frame: frame::Frame,
}

/// What the writer tells the packer after each commit.
pub enum Note {
    /// A thread got `n` events.
    Appended(i64, u64),
    /// A thread's row id is gone (deleted; a new thread may reuse it).
    Gone(i64),
    /// Stop packing (the store closes).
    Stop,
}

impl Op {
    fn needs_sync(&self) -> bool {
        match self {
            Op::Append { batch, .. } => batch.must_sync(),
            Op::Flush { .. }
            | Op::MarkInterrupted { .. }
            | Op::Delete { .. }
            | Op::Rename { .. } => true,
            Op::SaveCheckpoint { .. } | Op::PutChannel { .. } | Op::Pack { .. } => false,
        }
    }
}

#[derive(Clone)]
pub(crate) struct Head {
    id: i64,
    pub(crate) head: ThreadHead,
}

/// The outcome of one request, delivered after the commit.
enum Done {
    Append {
        reply: oneshot::Sender<Result<Commit>>,
        result: Result<Commit>,
    },
    Unit {
        reply: oneshot::Sender<Result<()>>,
        result: Result<()>,
    },
    Count {
        reply: oneshot::Sender<Result<u64>>,
        result: Result<u64>,
    },
    Runs {
        reply: oneshot::Sender<Result<Vec<(String, RunRecord)>>>,
        result: Result<Vec<(String, RunRecord)>>,
    },
}

impl Done {
    fn fail(self, err: &StoreError) {
        let again = || StoreError::new(err.kind(), err.message().to_owned());
        match self {
            Done::Append { reply, .. } => drop(reply.send(Err(again()))),
            Done::Unit { reply, .. } => drop(reply.send(Err(again()))),
            Done::Count { reply, .. } => drop(reply.send(Err(again()))),
            Done::Runs { reply, .. } => drop(reply.send(Err(again()))),
        }
    }

    fn send(self) {
        match self {
            Done::Append { reply, result } => drop(reply.send(result)),
            Done::Unit { reply, result } => drop(reply.send(result)),
            Done::Count { reply, result } => drop(reply.send(result)),
            Done::Runs { reply, result } => drop(reply.send(result)),
        }
    }

    fn is_ok(&self) -> bool {
        match self {
            Done::Append { result, .. } => result.is_ok(),
            Done::Unit { result, .. } => result.is_ok(),
            Done::Count { result, .. } => result.is_ok(),
            Done::Runs { result, .. } => result.is_ok(),
        }
    }

    /// True when the request wrote something (an append over a head that
    /// moved wrote nothing: its reply waits for no flush).
    fn wrote(&self) -> bool {
        match self {
            Done::Append { result, .. } => matches!(result, Ok(Commit::Done { .. })),
            _ => self.is_ok(),
        }
    }
}

/// The writer: owns the write connection and the cache of thread heads.
///
/// Durability. A group whose only durable requests are appends commits in
/// `synchronous = NORMAL` (the WAL written, not flushed), and the
/// [`Syncer`] acknowledges those appends after one `fdatasync` of the WAL
/// file; everything else is acknowledged at once. So the writer goes on
/// committing other threads' appends while a run's end reaches the disk,
/// instead of holding them behind the flush (an fsync here takes 0.2 to
/// 4 ms, and more under load). Any other durable request (delete, rename,
/// marking runs interrupted, flush) commits in `FULL`, as SQLite flushes it.
pub struct Writer {
    conn: Connection,
    heads: HashMap<(String, String), Head>,
    synchronous_full: bool,
    syncer: Syncer,
    /// `PRAGMA data_version` when the heads were last known true: another
    /// process committing changes it, and the cache is then dropped.
    data_version: i64,
    checkpointer: Checkpointer,
    /// Where the packer hears of commits (none in tests that run no packer).
    notes: Option<mpsc::Sender<Note>>,
    /// Notes of the transaction in progress, sent once it commits.
    pending_notes: Vec<Note>,
}

/// How often the checkpointer looks for committed WAL frames to copy back.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);
/// WAL frames (pages) past which the checkpointer starts the WAL over even
/// while the writer is busy (65,536 pages: 256 MiB); an idle writer gets it
/// started over after one quiet round, and [`Op::Flush`] does it at once.
const RESTART_FRAMES: i64 = 65_536;

/// Makes committed WAL frames durable off the writer thread, then sends the
/// replies that waited for it: one `fdatasync` for whatever is waiting when
/// it wakes (concurrent run ends share a flush).
///
/// Why this is sound: in WAL mode a commit is its frames in the WAL file,
/// written in order; flushing the file (from any descriptor: the flush is of
/// the file's pages) makes every frame written before the flush durable,
/// the WAL's header included. Recovery replays frames up to the last valid
/// commit, so no later commit can survive without an earlier one. A
/// checkpoint in `NORMAL` flushes the WAL before copying from it, so it
/// never copies a frame that is not on disk.
///
/// A failed flush breaks the store: Linux may drop the pages it could not
/// write, so nothing after it can be promised; every later write fails.
struct Syncer {
    tx: Option<mpsc::Sender<Vec<Done>>>,
    broken: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Syncer {
    /// Starts the syncer of the WAL file at `wal` (opened at its first
    /// flush: SQLite creates the file with the first commit).
    fn start(wal: std::path::PathBuf) -> Result<Syncer> {
        let (tx, rx) = mpsc::channel::<Vec<Done>>();
        let broken = Arc::new(AtomicBool::new(false));
        let flag = broken.clone();
        let thread = std::thread::Builder::new()
            .name("agui-sqlite-sync".into())
            .spawn(move || {
                let mut file: Option<std::fs::File> = None;
                while let Ok(mut waiting) = rx.recv() {
                    while let Ok(more) = rx.try_recv() {
                        waiting.extend(more);
                    }
                    let flushed = if flag.load(Ordering::Acquire) {
                        Err(std::io::Error::other("an earlier flush failed"))
                    } else {
                        let opened = match file.take() {
                            Some(f) => Ok(f),
                            None => std::fs::OpenOptions::new().write(true).open(&wal),
                        };
                        opened.and_then(|f| {
                            let r = f.sync_data();
                            file = Some(f);
                            r
                        })
                    };
                    match flushed {
                        Ok(()) => waiting.into_iter().for_each(Done::send),
                        Err(e) => {
                            flag.store(true, Ordering::Release);
                            // (An I/O error's text names no path.)
                            let err = StoreError::unavailable(format!(
                                "the store could not flush its log to disk ({e}); it refuses writes until reopened"
                            ));
                            for d in waiting {
                                d.fail(&err);
                            }
                        }
                    }
                }
            })
            .map_err(|e| StoreError::unavailable("cannot start the syncer").with_source(e))?;
        Ok(Syncer {
            tx: Some(tx),
            broken,
            thread: Some(thread),
        })
    }

    /// Sends `waiting` once the WAL is flushed.
    fn after_flush(&self, waiting: Vec<Done>) {
        if let Some(tx) = &self.tx
            && let Err(mpsc::SendError(waiting)) = tx.send(waiting)
        {
            let err = StoreError::unavailable("the store's syncer stopped");
            for d in waiting {
                d.fail(&err);
            }
        }
    }

    fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// Waits until every reply handed over is sent.
    fn stop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Copies the WAL back into the database on a thread of its own, so that the
/// writer never does it inside a commit. SQLite's automatic checkpoint (every
/// 1,000 WAL pages, run by the committing connection) stalled the writer for
/// milliseconds, with an fsync of the database file, every few hundred
/// commits: the p99 of every append behind it (measured through the gateway:
/// added latency p99 5 ms with it; see `crates/agui-store/BENCHMARK.md`).
/// A passive checkpoint runs beside the writer and never blocks it.
///
/// Only one connection can checkpoint at a time: SQLite answers a second one
/// `SQLITE_BUSY` at once, without waiting. The writer's own truncating
/// checkpoint (a flush) therefore takes [`Checkpointer::turn`] first, so it
/// never runs into one of the checkpointer's rounds and leaves the WAL full.
struct Checkpointer {
    /// Set by each commit; cleared by the checkpointer when it runs.
    dirty: Arc<AtomicBool>,
    /// Held by whoever checkpoints (the checkpointer's rounds, a flush).
    turn: Arc<Mutex<()>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    fn start(path: &Path) -> Result<Checkpointer> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| map(e, "be opened"))?;
        // Only a truncating checkpoint waits (a passive one never does), and
        // while it waits for readers it holds new writers back: it gives up
        // after 10 ms rather than stall appends behind a long read, such as
        // an export from another process. It is tried again after the next
        // commit and quiet round; meanwhile the WAL keeps its size (passive
        // checkpoints go on copying it back).
        conn.busy_timeout(Duration::from_millis(10))
            .map_err(|e| map(e, "be opened"))?;
        let dirty = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let turn = Arc::new(Mutex::new(()));
        let (d, st, tn) = (dirty.clone(), stop.clone(), turn.clone());
        let thread = std::thread::Builder::new()
            .name("agui-sqlite-checkpoint".into())
            .spawn(move || {
                let checkpoint = |mode: &str| {
                    let _turn = tn.lock().unwrap_or_else(|p| p.into_inner());
                    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
                        r.get::<_, i64>(1)
                    })
                    .unwrap_or(0)
                };
                // WAL frames left after the last passive checkpoint.
                let mut left = 0;
                while !st.load(Ordering::Acquire) {
                    std::thread::park_timeout(CHECKPOINT_EVERY);
                    if d.swap(false, Ordering::AcqRel) {
                        // Copies what is committed, beside the writer. Busy
                        // (a reader holds old frames) only means the next
                        // round copies them.
                        left = checkpoint("PASSIVE");
                        // Under steady writes the WAL never drains to its
                        // end, so SQLite never starts it over: past a hard
                        // cap, a truncating checkpoint (which waits for the
                        // writer's commit in progress and holds the next
                        // one while it copies the few frames left) does.
                        if left >= RESTART_FRAMES {
                            checkpoint("TRUNCATE");
                            left = 0;
                        }
                    } else if left > 0 {
                        // A round without a commit: the writer is idle, and
                        // starting the WAL over holds nobody up.
                        checkpoint("TRUNCATE");
                        left = 0;
                    }
                }
            })
            .map_err(|e| StoreError::unavailable("cannot start the checkpointer").with_source(e))?;
        Ok(Checkpointer {
            dirty,
            turn,
            stop,
            thread: Some(thread),
        })
    }

    fn committed(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// Starts the WAL over from `conn` (the writer's), waiting for a round of
    /// the checkpointer in progress rather than colliding with it; readers
    /// are waited for by the connection's busy timeout. A reader holding an
    /// old snapshot past that timeout keeps the WAL as it is (its frames
    /// stay, durable, and are copied back later).
    fn truncate(&self, conn: &Connection) {
        let _turn = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Writer {
    /// Opens the write connection (creating the schema), with SQLite's
    /// automatic checkpoint off and a [`Checkpointer`] beside it.
    pub fn open(path: &Path, notes: Option<mpsc::Sender<Note>>) -> Result<Writer> {
        let conn = db::connect(path, true)?;
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(|e| map(e, "be opened"))?;
        // The WAL's path as SQLite resolved the database's.
        let main: String = conn
            .query_row(
                "SELECT file FROM pragma_database_list WHERE name = 'main'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| map(e, "be opened"))?;
        let syncer = Syncer::start(format!("{main}-wal").into())?;
        Ok(Writer {
            conn,
            heads: HashMap::new(),
            synchronous_full: false,
            syncer,
            data_version: -1,
            checkpointer: Checkpointer::start(path)?,
            notes,
            pending_notes: Vec::new(),
        })
    }

    /// The flag the syncer sets when a flush fails (the store then refuses
    /// writes; readiness reports it).
    pub fn broken(&self) -> Arc<AtomicBool> {
        self.syncer.broken.clone()
    }

    /// Serves requests until every sender is gone, then checkpoints the WAL.
    pub fn run(mut self, rx: mpsc::Receiver<Op>) {
        while let Ok(first) = rx.recv() {
            let mut group = vec![first];
            while group.len() < GROUP {
                match rx.try_recv() {
                    Ok(op) => group.push(op),
                    Err(_) => break,
                }
            }
            self.process(group);
        }
        // Replies waiting for a flush are sent before the WAL is emptied.
        self.syncer.stop();
        // A clean close leaves everything in the main file.
        self.checkpointer.stop();
        let _ = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }

    fn process(&mut self, group: Vec<Op>) {
        if self.syncer.is_broken() {
            return fail_all(group, &StoreError::unavailable(REFUSING));
        }
        // Durable appends wait for the syncer; any other durable request
        // makes the whole group commit in FULL (see [`Writer`]).
        let full = group
            .iter()
            .any(|op| op.needs_sync() && !matches!(op, Op::Append { .. }));
        let flush = group.iter().any(|op| matches!(op, Op::Flush { .. }));
        if full != self.synchronous_full {
            let mode = if full { "FULL" } else { "NORMAL" };
            match self.conn.pragma_update(None, "synchronous", mode) {
                Ok(()) => self.synchronous_full = full,
                Err(e) => return fail_all(group, &map(e, "configure durability")),
            }
        }
        if let Err(e) = self.conn.execute_batch("BEGIN IMMEDIATE") {
            return fail_all(group, &map(e, "start a transaction"));
        }
        // Another process may have written since: then cached heads are stale.
        match self
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0))
        {
            Ok(v) if v == self.data_version => {}
            Ok(v) => {
                self.heads.clear();
                self.data_version = v;
            }
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                return fail_all(group, &map(e, "start a transaction"));
            }
        }
        let mut overlay: HashMap<(String, String), Option<Head>> = HashMap::new();
        // Each request's outcome, and whether its reply waits for the syncer.
        let mut done: Vec<(Done, bool)> = Vec::with_capacity(group.len());
        for op in group {
            let defer = !full && op.needs_sync();
            if let Err(e) = self.conn.execute_batch("SAVEPOINT op") {
                let err = map(e, "start a savepoint");
                done.push((failed(op, err), false));
                continue;
            }
            let mut local: HashMap<(String, String), Option<Head>> = HashMap::new();
            let resets_heads = matches!(op, Op::MarkInterrupted { .. });
            let noted = self.pending_notes.len();
            let d = self.apply(op, &overlay, &mut local, full || defer);
            if d.is_ok() {
                let _ = self.conn.execute_batch("RELEASE op");
                if resets_heads {
                    // Heads of this group may name runs whose status changed:
                    // forget them (the connection sees the truth).
                    overlay.clear();
                }
                overlay.extend(local);
            } else {
                let _ = self.conn.execute_batch("ROLLBACK TO op; RELEASE op");
                self.pending_notes.truncate(noted);
            }
            let defer = defer && d.wrote();
            done.push((d, defer));
        }
        if let Err(e) = self.conn.execute_batch("COMMIT") {
            let err = map(e, "commit");
            let _ = self.conn.execute_batch("ROLLBACK");
            self.heads.clear();
            self.pending_notes.clear();
            for (d, _) in done {
                d.fail(&err);
            }
            return;
        }
        if let Some(notes) = &self.notes {
            for n in self.pending_notes.drain(..) {
                let _ = notes.send(n);
            }
        } else {
            self.pending_notes.clear();
        }
        if flush {
            // A flush also leaves the WAL empty (the database file holds
            // everything), whatever the checkpointer has done so far.
            self.checkpointer.truncate(&self.conn);
        } else {
            self.checkpointer.committed();
        }
        if self.heads.len() + overlay.len() > HEADS {
            self.heads.clear();
        }
        for (k, v) in overlay {
            match v {
                Some(h) => {
                    self.heads.insert(k, h);
                }
                None => {
                    self.heads.remove(&k);
                }
            }
        }
        let mut waiting = Vec::new();
        for (d, defer) in done {
            if defer {
                waiting.push(d);
            } else {
                d.send();
            }
        }
        if !waiting.is_empty() {
            self.syncer.after_flush(waiting);
        }
    }

    fn apply(
        &mut self,
        op: Op,
        overlay: &HashMap<(String, String), Option<Head>>,
        local: &mut HashMap<(String, String), Option<Head>>,
        sync: bool,
    ) -> Done {
        match op {
            Op::Append {
                tenant,
                thread,
                batch,
                reply,
            } => {
                let result = self.append(&tenant, &thread, &batch, overlay, local, sync);
                Done::Append { reply, result }
            }
            Op::SaveCheckpoint {
                tenant,
                thread,
                run_id,
                blob,
                base,
                reply,
            } => Done::Unit {
                reply,
                result: self.save_checkpoint(&tenant, &thread, &run_id, &blob, base.as_deref()),
            },
            Op::PutChannel {
                tenant,
                thread,
                channel,
                reply,
            } => Done::Unit {
                reply,
                result: self.put_channel(&tenant, &thread, &channel),
            },
            Op::Delete {
                tenant,
                thread,
                reply,
            } => {
                let result = self.delete(&tenant, &thread);
                local.insert((tenant, thread), None);
                Done::Unit { reply, result }
            }
            Op::Rename {
                tenant,
                from,
                to,
                reply,
            } => {
                let result = self.rename(&tenant, &from, &to, overlay);
                let result = result.map(|head| {
                    // The head moves with the thread (same row id).
                    local.insert((tenant.clone(), from.clone()), None);
                    local.insert((tenant.clone(), to), head);
                });
                Done::Unit { reply, result }
            }
            Op::MarkInterrupted { reply } => {
                let result = self.mark_interrupted();
                // Cached heads may name a run that changed status.
                self.heads.clear();
                Done::Runs { reply, result }
            }
            Op::Flush { reply } => Done::Unit {
                reply,
                result: Ok(()),
            },
            Op::Pack { pack, reply } => Done::Count {
                reply,
                result: self.pack(&pack),
            },
        }
    }

    /// Replaces a thread's rows with a packed frame of the same events if
    /// the rows are still byte for byte what the packer read (a thread
    /// deleted and another created since may have the same row id and
    /// sequence numbers, never the same bytes and checksums over them).
    fn pack(&self, p: &Pack) -> Result<u64> {
        let (Some(first), Some(last)) = (p.old.first(), p.old.last()) else {
            return Ok(0);
        };
        let (first, last) = (first.0, last.1);
        if u64::try_from(last - first + 1).ok() != Some(p.events) {
            return Ok(0);
        }
        let now = self
            .conn
            .prepare_cached(
                "SELECT first_seq, last_seq, data FROM chunks
                 WHERE thread_id = ?1 AND first_seq BETWEEN ?2 AND ?3 ORDER BY first_seq",
            )
            .and_then(|mut st| {
                st.query_map(params![p.thread_id, first, last], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?
                .collect::<rusqlite::Result<Vec<(i64, i64, Vec<u8>)>>>()
            })
            .map_err(|e| map(e, "pack events"))?;
        if now != p.old {
            return Ok(0);
        }
        let f = &p.frame;
        self.conn
            .prepare_cached(
                "DELETE FROM chunks WHERE thread_id = ?1 AND first_seq BETWEEN ?2 AND ?3",
            )
            .and_then(|mut st| st.execute(params![p.thread_id, first, last]))
            .and_then(|_| {
                self.conn
                    .prepare_cached(
                        "INSERT INTO chunks (thread_id, first_seq, last_seq, received_at, codec,
                         raw_len, crc, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    )?
                    .execute(params![
                        p.thread_id,
                        first,
                        last,
                        p.received_at,
                        f.codec,
                        f.raw_len,
                        f.crc,
                        f.data
                    ])
            })
            .map_err(|e| map(e, "pack events"))?;
        Ok(1)
    }

    fn append(
        &mut self,
        tenant: &str,
        thread: &str,
        batch: &Batch,
        overlay: &HashMap<(String, String), Option<Head>>,
        local: &mut HashMap<(String, String), Option<Head>>,
        sync: bool,
    ) -> Result<Commit> {
        let key = (tenant.to_owned(), thread.to_owned());
        let current = match overlay.get(&key) {
            Some(h) => h.clone(),
            None => match self.heads.get(&key) {
                Some(h) => Some(h.clone()),
                None => load_head(&self.conn, tenant, thread)?,
            },
        };
        if let Some(now) = batch.moved_from(current.as_ref().map(|h| &h.head)) {
            return Ok(Commit::HeadMoved(now));
        }
        let (plan, events) = (&batch.plan, &batch.events);
        let conn = &self.conn;
        let thread_id = current.as_ref().map(|h| h.id);
        let at = plan.received_at.0;
        let id = match thread_id {
            Some(id) => id,
            None => {
                conn.prepare_cached(
                    "INSERT INTO threads (tenant, thread, agent, created_at, updated_at,
                     last_seq, bytes, run_count) VALUES (?1, ?2, NULL, ?3, ?3, 0, 0, 0)",
                )
                .and_then(|mut st| st.execute(params![tenant.as_bytes(), thread.as_bytes(), at]))
                .map_err(|e| map(e, "create a thread"))?;
                conn.last_insert_rowid()
            }
        };
        let mut seq = plan.first_seq;
        for part in events.chunks(frame::CHUNK_EVENTS) {
            let c = frame::encode(part)?;
            let last = seq + part.len() as u64 - 1;
            conn.prepare_cached(
                "INSERT INTO chunks (thread_id, first_seq, last_seq, received_at, codec,
                 raw_len, crc, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    id,
                    seq as i64,
                    last as i64,
                    at,
                    c.codec,
                    c.raw_len,
                    c.crc,
                    c.data
                ])
            })
            .map_err(|e| map(e, "write events"))?;
            seq = last + 1;
        }
        let mut new_runs = 0i64;
        for u in &plan.runs {
            if u.new {
                new_runs += 1;
                conn.prepare_cached(
                    "INSERT INTO runs (thread_id, run_id, tenant, parent_run_id, agent, status,
                     started_at, finished_at, first_seq, last_seq, event_count, bytes)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                )
                .and_then(|mut st| {
                    st.execute(params![
                        id,
                        u.run_id.as_bytes(),
                        tenant.as_bytes(),
                        u.parent_run_id.as_deref().map(str::as_bytes),
                        u.agent.as_deref().map(str::as_bytes),
                        status_code(u.status),
                        u.started_at.0,
                        u.finished_at.map(|t| t.0),
                        u.first_seq as i64,
                        u.last_seq as i64,
                        u.add_events as i64,
                        u.add_bytes as i64
                    ])
                })
                .map_err(|e| match e.sqlite_error_code() {
                    // The primary key (thread, run id): a reused run id.
                    Some(rusqlite::ErrorCode::ConstraintViolation) => StoreError::invalid(format!(
                        "runId {:?} is already used in this thread",
                        u.run_id
                    )),
                    _ => map(e, "index a run"),
                })?;
            } else {
                conn.prepare_cached(
                    "UPDATE runs SET status = ?3, finished_at = COALESCE(?4, finished_at),
                     last_seq = ?5, event_count = event_count + ?6, bytes = bytes + ?7
                     WHERE thread_id = ?1 AND run_id = ?2",
                )
                .and_then(|mut st| {
                    st.execute(params![
                        id,
                        u.run_id.as_bytes(),
                        status_code(u.status),
                        u.finished_at.map(|t| t.0),
                        u.last_seq as i64,
                        u.add_events as i64,
                        u.add_bytes as i64
                    ])
                })
                .map_err(|e| map(e, "index a run"))?;
            }
        }
        let (last_run, last_status) = match &plan.head.last_run {
            Some((r, s)) => (Some(r.as_bytes()), Some(status_code(*s))),
            None => (None, None),
        };
        conn.prepare_cached(
            "UPDATE threads SET updated_at = ?2, last_seq = ?3, bytes = bytes + ?4,
             run_count = run_count + ?5, agent = COALESCE(?6, agent), last_run = ?7,
             last_run_status = ?8 WHERE id = ?1",
        )
        .and_then(|mut st| {
            st.execute(params![
                id,
                at,
                plan.last_seq() as i64,
                plan.bytes as i64,
                new_runs,
                batch.agent.as_deref().map(str::as_bytes),
                last_run,
                last_status
            ])
        })
        .map_err(|e| map(e, "update a thread"))?;
        local.insert(
            key,
            Some(Head {
                id,
                head: plan.head.clone(),
            }),
        );
        self.pending_notes
            .push(Note::Appended(id, events.len() as u64));
        Ok(Commit::Done { durable: sync })
    }

    fn thread_id(&self, tenant: &str, thread: &str) -> Result<Option<i64>> {
        self.conn
            .prepare_cached("SELECT id FROM threads WHERE tenant = ?1 AND thread = ?2")
            .and_then(|mut st| {
                st.query_row(params![tenant.as_bytes(), thread.as_bytes()], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| map(e, "read a thread"))
    }

    fn save_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run: &str,
        blob: &[u8],
        base: Option<&str>,
    ) -> Result<()> {
        let id = self
            .thread_id(tenant, thread)?
            .ok_or_else(|| StoreError::not_found("thread"))?;
        let exists = self
            .conn
            .prepare_cached("SELECT 1 FROM runs WHERE thread_id = ?1 AND run_id = ?2")
            .and_then(|mut st| st.exists(params![id, run.as_bytes()]))
            .map_err(|e| map(e, "read the run index"))?;
        if !exists {
            return Err(StoreError::not_found("run"));
        }
        self.conn
            .prepare_cached(
                "INSERT INTO checkpoints (thread_id, run_id, blob, base_run) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (thread_id, run_id) DO UPDATE
                 SET blob = excluded.blob, base_run = excluded.base_run",
            )
            .and_then(|mut st| {
                st.execute(params![id, run.as_bytes(), blob, base.map(str::as_bytes)])
            })
            .map_err(|e| map(e, "store a checkpoint"))?;
        Ok(())
    }

    fn put_channel(&self, tenant: &str, thread: &str, ch: &agui_store::Channel) -> Result<()> {
        let id = self
            .thread_id(tenant, thread)?
            .ok_or_else(|| StoreError::not_found("thread"))?;
        self.conn
            .prepare_cached(
                "INSERT INTO channels (thread_id, agent, state, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (thread_id, agent) DO UPDATE
                 SET state = excluded.state, updated_at = excluded.updated_at",
            )
            .and_then(|mut st| {
                st.execute(params![
                    id,
                    ch.agent.as_bytes(),
                    ch.state.as_bytes(),
                    ch.updated_at.0
                ])
            })
            .map_err(|e| map(e, "store a channel"))?;
        Ok(())
    }

    /// Renames `from` to `to`; returns the moved head.
    fn rename(
        &self,
        tenant: &str,
        from: &str,
        to: &str,
        overlay: &HashMap<(String, String), Option<Head>>,
    ) -> Result<Option<Head>> {
        let key = (tenant.to_owned(), from.to_owned());
        let head = match overlay.get(&key) {
            Some(h) => h.clone(),
            None => match self.heads.get(&key) {
                Some(h) => Some(h.clone()),
                None => load_head(&self.conn, tenant, from)?,
            },
        };
        let Some(head) = head else {
            return Err(StoreError::not_found("thread"));
        };
        if from == to {
            return Ok(Some(head));
        }
        if self.thread_id(tenant, to)?.is_some() {
            return Err(StoreError::thread_exists(to));
        }
        self.conn
            .prepare_cached("UPDATE threads SET thread = ?1 WHERE id = ?2")
            .and_then(|mut st| st.execute(params![to.as_bytes(), head.id]))
            .map_err(|e| map(e, "rename a thread"))?;
        Ok(Some(head))
    }

    fn delete(&mut self, tenant: &str, thread: &str) -> Result<()> {
        let id = self
            .thread_id(tenant, thread)?
            .ok_or_else(|| StoreError::not_found("thread"))?;
        self.pending_notes.push(Note::Gone(id));
        for sql in [
            "DELETE FROM chunks WHERE thread_id = ?1",
            "DELETE FROM runs WHERE thread_id = ?1",
            "DELETE FROM checkpoints WHERE thread_id = ?1",
            "DELETE FROM channels WHERE thread_id = ?1",
            "DELETE FROM threads WHERE id = ?1",
        ] {
            self.conn
                .prepare_cached(sql)
                .and_then(|mut st| st.execute(params![id]))
                .map_err(|e| map(e, "delete a thread"))?;
        }
        Ok(())
    }

    /// Marks every running run interrupted; returns the runs marked, with
    /// their tenants, as they now stand. They are read first, then updated,
    /// in the writer's transaction: no other connection writes meanwhile.
    fn mark_interrupted(&self) -> Result<Vec<(String, RunRecord)>> {
        let now = Timestamp::now().0;
        let running = status_code(RunStatus::Running);
        let interrupted = status_code(RunStatus::Interrupted);
        let mut marked = Vec::new();
        {
            // The status as a literal, so that the partial index of running
            // runs serves it (a bound parameter could be any status).
            let mut st = self
                .conn
                .prepare_cached(&format!(
                    "SELECT r.tenant, {} FROM runs r JOIN threads t ON t.id = r.thread_id
                     WHERE r.status = {running} ORDER BY r.thread_id, r.first_seq",
                    crate::RUN_COLUMNS
                ))
                .map_err(|e| map(e, "mark runs interrupted"))?;
            let mut rows = st.query([]).map_err(|e| map(e, "mark runs interrupted"))?;
            while let Some(row) = rows.next().map_err(|e| map(e, "mark runs interrupted"))? {
                let tenant = db::text(row.get(0).map_err(|e| map(e, "mark runs interrupted"))?)?;
                let mut run = crate::run_from_row_at(row, 1)?;
                run.status = RunStatus::Interrupted;
                run.finished_at = Some(Timestamp(now));
                marked.push((tenant, run));
            }
        }
        self.conn
            .execute(
                &format!("UPDATE runs SET status = ?1, finished_at = ?2 WHERE status = {running}"),
                params![interrupted, now],
            )
            .map_err(|e| map(e, "mark runs interrupted"))?;
        self.conn
            .execute(
                "UPDATE threads SET last_run_status = ?1 WHERE last_run_status = ?2",
                params![interrupted, running],
            )
            .map_err(|e| map(e, "mark runs interrupted"))?;
        Ok(marked)
    }
}

fn failed(op: Op, err: StoreError) -> Done {
    match op {
        Op::Append { reply, .. } => Done::Append {
            reply,
            result: Err(err),
        },
        Op::SaveCheckpoint { reply, .. }
        | Op::PutChannel { reply, .. }
        | Op::Delete { reply, .. }
        | Op::Rename { reply, .. }
        | Op::Flush { reply } => Done::Unit {
            reply,
            result: Err(err),
        },
        Op::MarkInterrupted { reply } => Done::Runs {
            reply,
            result: Err(err),
        },
        Op::Pack { reply, .. } => Done::Count {
            reply,
            result: Err(err),
        },
    }
}

fn fail_all(group: Vec<Op>, err: &StoreError) {
    for op in group {
        failed(op, StoreError::new(err.kind(), err.message().to_owned())).fail(err);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agui_store::ErrorKind;

    fn waiting() -> (Done, oneshot::Receiver<Result<()>>) {
        let (reply, rx) = oneshot::channel();
        (
            Done::Unit {
                reply,
                result: Ok(()),
            },
            rx,
        )
    }

    #[test]
    fn the_syncer_answers_after_a_flush() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("x.db-wal");
        std::fs::write(&wal, b"frames").unwrap();
        let mut syncer = Syncer::start(wal).unwrap();
        let (a, ra) = waiting();
        let (b, rb) = waiting();
        syncer.after_flush(vec![a]);
        syncer.after_flush(vec![b]);
        syncer.stop();
        assert!(ra.blocking_recv().unwrap().is_ok());
        assert!(rb.blocking_recv().unwrap().is_ok());
        assert!(!syncer.is_broken());
    }

    /// After a failed flush the writer refuses every request, an append
    /// that needs no flush included, and writes nothing.
    #[test]
    fn a_writer_whose_flush_failed_refuses_writes() {
        use agui_store::Durability;
        use agui_store::index::plan_batch;
        use agui_store::sample::run_started;
        let dir = tempfile::tempdir().unwrap();
        let mut w = Writer::open(&dir.path().join("w.db"), None).unwrap();
        let events = vec![run_started("th", "r", None)];
        let head = ThreadHead::default();
        let plan = plan_batch(&head, &events, None, Timestamp::now(), |_| Ok(false)).unwrap();
        let batch = Batch {
            head,
            plan,
            events,
            agent: None,
            durability: Durability::RunEnd,
        };
        let append = |w: &mut Writer| {
            let (reply, mut rx) = oneshot::channel();
            w.process(vec![Op::Append {
                tenant: "t".into(),
                thread: "th".into(),
                batch: batch.clone(),
                reply,
            }]);
            rx.try_recv().unwrap()
        };
        w.syncer.broken.store(true, Ordering::Release);
        let err = append(&mut w).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert!(err.message().contains("reopen"), "{err}");
        let stored: i64 = w
            .conn
            .query_row("SELECT count(*) FROM chunks", [], |r| r.get(0))
            .unwrap();
        assert_eq!(stored, 0);
        // The same writer, healthy: the append is stored.
        w.syncer.broken.store(false, Ordering::Release);
        assert_eq!(append(&mut w).unwrap(), Commit::Done { durable: false });
    }

    #[test]
    fn a_failed_flush_fails_its_waiters_and_breaks_the_store() {
        let dir = tempfile::tempdir().unwrap();
        // No file to flush: the flush fails as an I/O error would.
        let syncer = Syncer::start(dir.path().join("missing-wal")).unwrap();
        let (a, ra) = waiting();
        syncer.after_flush(vec![a]);
        let err = ra.blocking_recv().unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert!(err.message().contains("could not flush"), "{err}");
        assert!(syncer.is_broken());
        // Later waiters fail too, even once the file exists.
        std::fs::write(dir.path().join("missing-wal"), b"").unwrap();
        let (b, rb) = waiting();
        syncer.after_flush(vec![b]);
        assert_eq!(
            rb.blocking_recv().unwrap().unwrap_err().kind(),
            ErrorKind::Unavailable
        );
    }

    /// A pack replaces rows only when they are still byte for byte what
    /// the packer read: rows of another thread under a reused row id, with
    /// the same sequence numbers, stay as they are.
    #[test]
    fn a_pack_over_rows_that_changed_writes_nothing() {
        use agui_store::sample::realistic_run;
        let dir = tempfile::tempdir().unwrap();
        let mut w = Writer::open(&dir.path().join("w.db"), None).unwrap();
        let events = realistic_run("th", "r", None, 30);
        let mut stored = Vec::new();
        let mut parts = Vec::new();
        for (i, part) in events.chunks(10).enumerate() {
            let f = frame::encode(part).unwrap();
            let (first, at) = (i as i64 * 10 + 1, 1_000 + i as i64);
            w.conn
                .execute(
                    "INSERT INTO chunks VALUES (7, ?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![first, first + 9, at, f.codec, f.raw_len, f.crc, f.data],
                )
                .unwrap();
            let r = frame::records(
                f.codec,
                i64::from(f.raw_len),
                i64::from(f.crc),
                &f.data,
                10,
                Timestamp(at),
            )
            .unwrap()
            .unwrap();
            parts.push(r);
            stored.push((first, first + 9, f.data));
        }
        let pack = |old: Vec<(i64, i64, Vec<u8>)>| Pack {
            thread_id: 7,
            old,
            received_at: 1_000,
            events: 30,
            frame: frame::pack(&parts).unwrap(),
        };
        let run = |w: &mut Writer, p: Pack| {
            let (reply, mut rx) = oneshot::channel();
            w.process(vec![Op::Pack {
                pack: Box::new(p),
                reply,
            }]);
            rx.try_recv().unwrap().unwrap()
        };
        let count = |w: &Writer| -> i64 {
            w.conn
                .query_row("SELECT count(*) FROM chunks", [], |r| r.get(0))
                .unwrap()
        };
        let mut other = stored.clone();
        other[1].2[0] ^= 1;
        assert_eq!(run(&mut w, pack(other)), 0);
        assert_eq!(
            run(&mut w, pack(stored[..2].to_vec())),
            0,
            "the frame holds more events than the rows"
        );
        assert_eq!(count(&w), 3);
        assert_eq!(run(&mut w, pack(stored)), 1);
        assert_eq!(count(&w), 1);
        let (codec, raw_len, crc, data, at): (i64, i64, i64, Vec<u8>, i64) = w
            .conn
            .query_row(
                "SELECT codec, raw_len, crc, data, received_at FROM chunks",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .unwrap();
        assert_eq!((codec, at), (frame::PACKED, 1_000));
        let d = frame::decode_timed(codec, Some(raw_len), Some(crc), data, 30).unwrap();
        let texts =
            |e: &[agui_protocol::Event]| e.iter().map(|e| e.json().to_owned()).collect::<Vec<_>>();
        assert_eq!(texts(&d.events), texts(&events));
        assert_eq!(
            d.batches,
            vec![
                (10, Timestamp(1_000)),
                (10, Timestamp(1_001)),
                (10, Timestamp(1_002))
            ]
        );
    }
}
