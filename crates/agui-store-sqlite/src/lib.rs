//! The SQLite backend of `agui-store` (`sqlite:///PATH`), the embedded
//! default of `agui serve`.
//!
//! - WAL mode; one writer thread owns the write connection and commits every
//!   request that is waiting in one transaction (group commit), each request
//!   in its own savepoint; readers use a small pool of read-only connections
//!   on blocking threads, so reads never wait for writes.
//! - Each appended batch is stored as one chunk row (up to 1,024 events per
//!   row) in the batch codec of `agui_store::frame`: each event's type code
//!   and exact text, zstd-compressed over the shipped dictionary when that
//!   saves at least an eighth, with a CRC-32; read back without parsing.
//! - A packer thread (`pack.rs`) later merges a thread's small rows into
//!   packed frames of about 1,024 events each (where zstd finds far more to
//!   share), keeping every batch's receive time; the writer swaps them in
//!   only if the rows are unchanged.
//! - Tables: `threads` (indexed by tenant and activity, and by agent),
//!   `chunks` (a rowid table, unique by thread and first sequence: schema 3,
//!   whose rows may be packed; a writer's open upgrades a schema-2 file by
//!   its version and a schema-1 file, whose `WITHOUT ROWID` table
//!   spilled every row of over about 1 KB into an overflow page), `runs` (thread and run, thread and
//!   sequence, tenant and parent run, tenant and start time, running runs),
//!   `checkpoints`.
//!
//! # Durability
//!
//! | [`Durability`](agui_store::Durability) | commit | what a crash can lose |
//! | --- | --- | --- |
//! | `Append` | `synchronous=FULL`: the WAL is fsynced before the append is acknowledged | nothing acknowledged |
//! | `RunEnd` | `synchronous=NORMAL`, except that a batch carrying `RUN_FINISHED`/`RUN_ERROR` commits with `FULL` | a process crash loses nothing acknowledged (the WAL is written before the acknowledgement); an OS crash or power loss may lose the appends acknowledged since the last `FULL` commit |
//!
//! Requests grouped in one transaction share one fsync: the group is `FULL`
//! when any of them needs it.
//!
//! The WAL is copied back into the database by a checkpointer thread with
//! its own connection (passive checkpoints, every 100 ms after a commit),
//! never by the writer inside a commit; the WAL is started over (truncated)
//! when the writer has been quiet for a round, on `flush`, or once it holds
//! 256 MiB.

mod db;
mod lock;
mod pack;
mod writer;

pub use crate::db::NotAStore;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use agui_store::cursor::{run_page, thread_page};
use agui_store::index::ThreadHead;
use agui_store::{
    Backend, Batch, CheckpointChain, Commit, EventPage, Result, RunFilter, RunPage, RunRecord,
    StoreError, StoreStats, ThreadFilter, ThreadInfo, ThreadPage, Timestamp, page_size,
};
use agui_store::{checkpoint, frame};
use async_trait::async_trait;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use crate::db::{count, map, status_code, status_from, text};
use crate::writer::{Note, Op, Writer};

/// Links of a checkpoint chain read in one query at most.
const MAX_CHAIN: i64 = agui_store::checkpoint::MAX_CHAIN as i64;

/// A run's status and last sequence number, with its checkpoint and each
/// base's after it, in chain order (no row: no such run; a row without a
/// blob: no checkpoint).
const CHAIN_SQL: &str = "WITH RECURSIVE
    r AS (SELECT r.thread_id, r.status, r.last_seq FROM runs r JOIN threads t ON t.id = r.thread_id
          WHERE t.tenant = ?1 AND t.thread = ?2 AND r.run_id = ?3),
    ch(run_id, base_run, blob, depth) AS (
        SELECT c.run_id, c.base_run, c.blob, 1 FROM r JOIN checkpoints c
            ON c.thread_id = r.thread_id AND c.run_id = ?3
        UNION ALL
        SELECT c.run_id, c.base_run, c.blob, ch.depth + 1 FROM ch
            JOIN r JOIN checkpoints c ON c.thread_id = r.thread_id AND c.run_id = ch.base_run
            WHERE ch.depth < ?4)
    SELECT r.status, r.last_seq, ch.run_id, ch.blob FROM r LEFT JOIN ch ORDER BY ch.depth";

/// [`CHAIN_SQL`] for a file without `checkpoints.base_run` (schemas 1 and
/// 2, opened read-only): the run's own checkpoint only.
const OWN_CHECKPOINT_SQL: &str = "SELECT r.status, r.last_seq, r.run_id, k.blob FROM runs r
    JOIN threads t ON t.id = r.thread_id
    LEFT JOIN checkpoints k ON k.thread_id = r.thread_id AND k.run_id = r.run_id
    WHERE t.tenant = ?1 AND t.thread = ?2 AND r.run_id = ?3 AND ?4 > 0";

/// Read connections kept open at most.
const READERS: usize = 8;

/// The SQLite store. Cloning gives another handle on the same store.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    tx: Mutex<Option<mpsc::Sender<Op>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// The packer's thread and how to stop it (see `pack.rs`); none when
    /// read-only.
    packer: Mutex<Option<(mpsc::Sender<Note>, JoinHandle<()>)>>,
    readers: Mutex<Vec<Connection>>,
    closed: AtomicBool,
    /// Opened with [`SqliteStore::open_read_only`]: no writer, no lock.
    read_only: bool,
    /// The process lock of a writable store, released at close.
    lock: Mutex<Option<lock::ProcessLock>>,
    /// The file keeps each delta checkpoint's base run beside it (schema
    /// 3): a restore reads the whole chain in one query.
    chains: bool,
    /// The writer's flag of a failed flush (see `writer::Syncer`); none
    /// when read-only.
    broken: Option<Arc<AtomicBool>>,
}

/// Reads the path of a `sqlite://` URL: `sqlite:///abs/path.db` or
/// `sqlite://relative/path.db`.
pub fn path_of(url: &str) -> Result<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .ok_or_else(|| StoreError::invalid("not a sqlite:// URL"))?;
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    if rest.is_empty() {
        return Err(StoreError::invalid("a sqlite:// URL needs a path"));
    }
    Ok(PathBuf::from(rest))
}

/// Opens `sqlite:///PATH` (see [`SqliteStore::open_path`]).
pub async fn open(url: &str) -> Result<SqliteStore> {
    let path = path_of(url)?;
    SqliteStore::open_path(&path).await
}

/// Opens an existing `sqlite:///PATH` read-only (see
/// [`SqliteStore::open_read_only`]).
pub async fn open_read_only(url: &str) -> Result<SqliteStore> {
    let path = path_of(url)?;
    SqliteStore::open_read_only(&path).await
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`. Opening after a
    /// crash recovers the WAL; runs left `running` stay so until
    /// [`Backend::mark_interrupted`]. An SQLite database that holds
    /// something else is refused with nothing changed in it
    /// ([`NotAStore`]): another application's (tables, no agui schema row)
    /// as `Invalid`, a store whose schema row is lost as `Corrupt`; an
    /// empty one (no tables) becomes a store.
    ///
    /// The store holds an exclusive process lock on `PATH.lock` while open:
    /// a second writable open of the same file, from any process, fails
    /// with `Unavailable` naming the holder's process id (two writers would
    /// each take the other's live runs for crashed ones). Use
    /// [`SqliteStore::open_read_only`] beside a running writer.
    pub async fn open_path(path: &Path) -> Result<SqliteStore> {
        let path = path.to_path_buf();
        // Another application's database is refused before the lock file
        // is created beside it (the writer's open checks again under the
        // lock).
        let probe = path.clone();
        tokio::task::spawn_blocking(move || db::refuse_foreign(&probe))
            .await
            .map_err(|_| StoreError::internal("the store could not be opened"))??;
        let held = lock::acquire(&path)?;
        let open_path = path.clone();
        let (note_tx, note_rx) = mpsc::channel();
        let notes = note_tx.clone();
        let writer = tokio::task::spawn_blocking(move || Writer::open(&open_path, Some(notes)))
            .await
            .map_err(|_| StoreError::internal("the store could not be opened"))??;
        let broken = writer.broken();
        let (tx, rx) = mpsc::channel();
        let packer = pack::Packer::open(&path, tx.clone())?;
        let handle = std::thread::Builder::new()
            .name("agui-sqlite-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| StoreError::unavailable("cannot start the writer").with_source(e))?;
        let packing = std::thread::Builder::new()
            .name("agui-sqlite-pack".into())
            .spawn(move || packer.run(note_rx))
            .map_err(|e| StoreError::unavailable("cannot start the packer").with_source(e))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                tx: Mutex::new(Some(tx)),
                writer: Mutex::new(Some(handle)),
                packer: Mutex::new(Some((note_tx, packing))),
                readers: Mutex::new(Vec::new()),
                closed: AtomicBool::new(false),
                read_only: false,
                lock: Mutex::new(Some(held)),
                chains: true,
                broken: Some(broken),
            }),
        })
    }

    /// Opens an existing database read-only: no lock, no writer, nothing
    /// created, so it works beside a running gateway. `NotFound` when there
    /// is no file at `path` or it holds no agui store, `Corrupt` when it
    /// has agui's tables but no readable schema row ([`NotAStore::Damaged`]).
    /// Every write (and a
    /// restore that would store a rebuilt checkpoint) fails with
    /// `Unsupported`.
    pub async fn open_read_only(path: &Path) -> Result<SqliteStore> {
        let path = path.to_path_buf();
        let probe = path.clone();
        let chains = tokio::task::spawn_blocking(move || db::probe_read_only(&probe))
            .await
            .map_err(|_| StoreError::internal("the store could not be opened"))??;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                tx: Mutex::new(None),
                writer: Mutex::new(None),
                packer: Mutex::new(None),
                readers: Mutex::new(Vec::new()),
                closed: AtomicBool::new(false),
                read_only: true,
                lock: Mutex::new(None),
                chains,
                broken: None,
            }),
        })
    }

    /// True when opened with [`SqliteStore::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(StoreError::unavailable("the store is closed"));
        }
        Ok(())
    }

    async fn write<T>(&self, make: impl FnOnce(oneshot::Sender<Result<T>>) -> Op) -> Result<T> {
        self.check_open()?;
        if self.inner.read_only {
            return Err(StoreError::new(
                agui_store::ErrorKind::Unsupported,
                "the store was opened read-only",
            ));
        }
        let (reply, rx) = oneshot::channel();
        {
            let tx = self.inner.tx.lock().unwrap_or_else(|p| p.into_inner());
            let tx = tx
                .as_ref()
                .ok_or_else(|| StoreError::unavailable("the store is closed"))?;
            tx.send(make(reply))
                .map_err(|_| StoreError::unavailable("the store's writer stopped"))?;
        }
        rx.await
            .map_err(|_| StoreError::unavailable("the store's writer stopped"))?
    }

    /// Runs `f` on a read connection, on a blocking thread.
    async fn read_with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.check_open()?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.with_reader(f))
            .await
            .map_err(|_| StoreError::internal("a read task failed"))?
    }
}

impl Inner {
    /// Stops the packer (it holds a sender of the writer's: the writer
    /// stops only once it is gone). A pack in progress finishes first.
    fn stop_packer(&self) -> Option<JoinHandle<()>> {
        let (notes, handle) = self
            .packer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()?;
        let _ = notes.send(Note::Stop);
        Some(handle)
    }

    fn with_reader<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let pooled = self.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match pooled {
            Some(c) => c,
            None => db::connect(&self.path, false)?,
        };
        let result = f(&conn);
        let mut pool = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < READERS && !self.closed.load(Ordering::Acquire) {
            pool.push(conn);
        }
        result
    }
}

fn thread_row(conn: &Connection, tenant: &str, thread: &str) -> Result<Option<(i64, u64)>> {
    conn.prepare_cached("SELECT id, last_seq FROM threads WHERE tenant = ?1 AND thread = ?2")
        .and_then(|mut st| {
            st.query_row(params![tenant.as_bytes(), thread.as_bytes()], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })
            .optional()
        })
        .map_err(|e| map(e, "read a thread"))?
        .map(|(id, last)| Ok((id, count(last)?)))
        .transpose()
}

fn read_page(
    conn: &Connection,
    tenant: &str,
    thread: &str,
    from_seq: u64,
    limit: usize,
) -> Result<EventPage> {
    let tx = conn
        .unchecked_transaction()
        .map_err(|e| map(e, "read events"))?;
    let (id, last_seq) =
        thread_row(&tx, tenant, thread)?.ok_or_else(|| StoreError::not_found("thread"))?;
    let from = from_seq.max(1);
    let limit = page_size(limit);
    let mut events = Vec::with_capacity(limit.min(4096));
    if from <= last_seq {
        let mut st = tx
            .prepare_cached(
                "SELECT first_seq, last_seq, received_at, codec, raw_len, crc, data FROM chunks
                 WHERE thread_id = ?1 AND first_seq >= COALESCE(
                   (SELECT MAX(first_seq) FROM chunks WHERE thread_id = ?1 AND first_seq <= ?2), 1)
                 ORDER BY first_seq",
            )
            .map_err(|e| map(e, "read events"))?;
        let mut rows = st
            .query(params![id, from as i64])
            .map_err(|e| map(e, "read events"))?;
        let mut expect: Option<u64> = None;
        while let Some(row) = rows.next().map_err(|e| map(e, "read events"))? {
            let first = count(row.get(0).map_err(|e| map(e, "read events"))?)?;
            let last = count(row.get(1).map_err(|e| map(e, "read events"))?)?;
            if expect.is_some_and(|x| x != first) || last < first {
                return Err(StoreError::corrupt("the stored log has a gap"));
            }
            expect = Some(last + 1);
            let received_at = Timestamp(row.get(2).map_err(|e| map(e, "read events"))?);
            let decoded = frame::decode_window(
                row.get(3).map_err(|e| map(e, "read events"))?,
                row.get(4).map_err(|e| map(e, "read events"))?,
                row.get(5).map_err(|e| map(e, "read events"))?,
                row.get(6).map_err(|e| map(e, "read events"))?,
                last - first + 1,
                from.saturating_sub(first),
                limit - events.len(),
            )?;
            EventPage::push_frame(&mut events, decoded, first, received_at, from, limit);
            if events.len() >= limit {
                break;
            }
        }
    }
    EventPage::starting_at(events, from, last_seq)
}

const RUN_COLUMNS: &str = "t.thread, r.run_id, r.parent_run_id, r.agent, r.status, r.started_at,
    r.finished_at, r.first_seq, r.last_seq, r.event_count, r.bytes";

fn run_from_row(row: &rusqlite::Row<'_>) -> Result<RunRecord> {
    run_from_row_at(row, 0)
}

/// A run from [`RUN_COLUMNS`] starting at column `at`.
fn run_from_row_at(row: &rusqlite::Row<'_>, at: usize) -> Result<RunRecord> {
    let g = |e| map(e, "read the run index");
    Ok(RunRecord {
        thread_id: text(row.get(at).map_err(g)?)?,
        run_id: text(row.get(at + 1).map_err(g)?)?,
        parent_run_id: row
            .get::<_, Option<Vec<u8>>>(at + 2)
            .map_err(g)?
            .map(text)
            .transpose()?,
        agent: row
            .get::<_, Option<Vec<u8>>>(at + 3)
            .map_err(g)?
            .map(text)
            .transpose()?,
        status: status_from(row.get(at + 4).map_err(g)?)?,
        started_at: Timestamp(row.get(at + 5).map_err(g)?),
        finished_at: row.get::<_, Option<i64>>(at + 6).map_err(g)?.map(Timestamp),
        first_seq: count(row.get(at + 7).map_err(g)?)?,
        last_seq: count(row.get(at + 8).map_err(g)?)?,
        event_count: count(row.get(at + 9).map_err(g)?)?,
        bytes: count(row.get(at + 10).map_err(g)?)?,
        thread_instance: 0,
    })
}

fn thread_from_row(row: &rusqlite::Row<'_>) -> Result<ThreadInfo> {
    let g = |e| map(e, "read a thread");
    Ok(ThreadInfo {
        thread_id: text(row.get(0).map_err(g)?)?,
        agent: row
            .get::<_, Option<Vec<u8>>>(1)
            .map_err(g)?
            .map(text)
            .transpose()?,
        created_at: Timestamp(row.get(2).map_err(g)?),
        updated_at: Timestamp(row.get(3).map_err(g)?),
        last_seq: count(row.get(4).map_err(g)?)?,
        run_count: count(row.get(5).map_err(g)?)?,
        bytes: count(row.get(6).map_err(g)?)?,
    })
}

const THREAD_COLUMNS: &str = "thread, agent, created_at, updated_at, last_seq, run_count, bytes";

#[async_trait]
impl Backend for SqliteStore {
    async fn head(&self, tenant: &str, thread: &str) -> Result<ThreadHead> {
        let (tenant, thread) = (tenant.to_owned(), thread.to_owned());
        self.read_with(move |c| {
            Ok(crate::writer::load_head(c, &tenant, &thread)?
                .map(|h| h.head)
                .unwrap_or_default())
        })
        .await
    }

    async fn commit(&self, tenant: &str, thread: &str, batch: &Batch) -> Result<Commit> {
        let (tenant_s, thread_s) = (tenant.to_owned(), thread.to_owned());
        // The writer thread owns what it writes: the events are shared
        // (one reference count each), the plan is small.
        let batch = batch.clone();
        self.write(|reply| Op::Append {
            tenant: tenant_s,
            thread: thread_s,
            batch,
            reply,
        })
        .await
    }

    async fn read(
        &self,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<EventPage> {
        let (tenant, thread) = (tenant.to_owned(), thread.to_owned());
        self.read_with(move |c| read_page(c, &tenant, &thread, from_seq, limit))
            .await
    }

    async fn run(&self, tenant: &str, thread: &str, run_id: &str) -> Result<RunRecord> {
        let (tenant, thread, run_id) = (tenant.to_owned(), thread.to_owned(), run_id.to_owned());
        self.read_with(move |c| {
            let sql = format!(
                "SELECT {RUN_COLUMNS} FROM runs r JOIN threads t ON t.id = r.thread_id
                 WHERE t.tenant = ?1 AND t.thread = ?2 AND r.run_id = ?3"
            );
            let mut st = c
                .prepare_cached(&sql)
                .map_err(|e| map(e, "read the run index"))?;
            let mut rows = st
                .query(params![
                    tenant.as_bytes(),
                    thread.as_bytes(),
                    run_id.as_bytes()
                ])
                .map_err(|e| map(e, "read the run index"))?;
            match rows.next().map_err(|e| map(e, "read the run index"))? {
                Some(row) => run_from_row(row),
                None => match thread_row(c, &tenant, &thread)? {
                    Some(_) => Err(StoreError::not_found("run")),
                    None => Err(StoreError::not_found("thread")),
                },
            }
        })
        .await
    }

    async fn list_runs(&self, tenant: &str, filter: &RunFilter) -> Result<RunPage> {
        let after = filter.after()?;
        let tenant = tenant.to_owned();
        let filter = filter.clone();
        self.read_with(move |c| {
            let limit = filter.page_size();
            // Only the filters given go into the statement (an `?N IS NULL
            // OR ...` term would keep SQLite from using the thread's index).
            // With a thread, `+r.tenant` keeps the planner off the runs'
            // tenant-and-time index: the thread's own index is the short way
            // (0.05 ms against 3 ms on a store of 10,000 threads).
            let tenant_term = if filter.thread_id.is_some() {
                "+r.tenant = ?1 AND t.tenant = ?1"
            } else {
                "r.tenant = ?1"
            };
            let mut sql = format!(
                "SELECT {RUN_COLUMNS} FROM runs r JOIN threads t ON t.id = r.thread_id
                 WHERE {tenant_term}"
            );
            let mut args: Vec<SqlValue> = vec![SqlValue::Blob(tenant.as_bytes().to_vec())];
            let mut and = |term: &str, values: Vec<SqlValue>| {
                // Each `?` of the term becomes the number of its value.
                sql.push_str(" AND ");
                let mut pieces = term.split('?');
                sql.push_str(pieces.next().unwrap_or_default());
                for (piece, v) in pieces.zip(values) {
                    args.push(v);
                    sql.push_str(&format!("?{}{piece}", args.len()));
                }
            };
            if let Some(t) = &filter.thread_id {
                and("t.thread = ?", vec![SqlValue::Blob(t.as_bytes().to_vec())]);
            }
            if let Some(p) = &filter.parent_run_id {
                and(
                    "r.parent_run_id = ?",
                    vec![SqlValue::Blob(p.as_bytes().to_vec())],
                );
            }
            if let Some(s) = filter.status {
                and("r.status = ?", vec![SqlValue::Integer(status_code(s))]);
            }
            if let Some(t) = filter.started_from {
                and("r.started_at >= ?", vec![SqlValue::Integer(t.0)]);
            }
            if let Some(t) = filter.started_before {
                and("r.started_at < ?", vec![SqlValue::Integer(t.0)]);
            }
            if let Some(a) = &after {
                and(
                    "(r.started_at, t.thread, r.first_seq) > (?, ?, ?)",
                    vec![
                        SqlValue::Integer(a.started_at.0),
                        SqlValue::Blob(a.thread_id.as_bytes().to_vec()),
                        SqlValue::Integer(a.first_seq as i64),
                    ],
                );
            }
            args.push(SqlValue::Integer((limit + 1) as i64));
            sql.push_str(&format!(
                " ORDER BY r.started_at, t.thread, r.first_seq LIMIT ?{}",
                args.len()
            ));
            let mut st = c
                .prepare_cached(&sql)
                .map_err(|e| map(e, "read the run index"))?;
            let mut rows = st
                .query(rusqlite::params_from_iter(args))
                .map_err(|e| map(e, "read the run index"))?;
            let mut runs = Vec::new();
            while let Some(row) = rows.next().map_err(|e| map(e, "read the run index"))? {
                runs.push(run_from_row(row)?);
            }
            Ok(run_page(runs, limit))
        })
        .await
    }

    async fn thread(&self, tenant: &str, thread: &str) -> Result<ThreadInfo> {
        let (tenant, thread) = (tenant.to_owned(), thread.to_owned());
        self.read_with(move |c| {
            let sql =
                format!("SELECT {THREAD_COLUMNS} FROM threads WHERE tenant = ?1 AND thread = ?2");
            let mut st = c
                .prepare_cached(&sql)
                .map_err(|e| map(e, "read a thread"))?;
            let mut rows = st
                .query(params![tenant.as_bytes(), thread.as_bytes()])
                .map_err(|e| map(e, "read a thread"))?;
            match rows.next().map_err(|e| map(e, "read a thread"))? {
                Some(row) => thread_from_row(row),
                None => Err(StoreError::not_found("thread")),
            }
        })
        .await
    }

    async fn list_threads(&self, tenant: &str, filter: &ThreadFilter) -> Result<ThreadPage> {
        let after = filter.after()?;
        let tenant = tenant.to_owned();
        let filter = filter.clone();
        self.read_with(move |c| {
            let limit = filter.page_size();
            let sql = format!(
                "SELECT {THREAD_COLUMNS} FROM threads
                 WHERE tenant = ?1 AND (?2 IS NULL OR agent = ?2)
                   AND (?3 IS NULL OR updated_at < ?3 OR (updated_at = ?3 AND thread > ?4))
                 ORDER BY updated_at DESC, thread ASC LIMIT ?5"
            );
            let mut st = c.prepare_cached(&sql).map_err(|e| map(e, "list threads"))?;
            let mut rows = st
                .query(params![
                    tenant.as_bytes(),
                    filter.agent.as_deref().map(str::as_bytes),
                    after.as_ref().map(|a| a.updated_at.0),
                    after.as_ref().map(|a| a.thread_id.as_bytes()),
                    (limit + 1) as i64
                ])
                .map_err(|e| map(e, "list threads"))?;
            let mut threads = Vec::new();
            while let Some(row) = rows.next().map_err(|e| map(e, "list threads"))? {
                threads.push(thread_from_row(row)?);
            }
            Ok(thread_page(threads, limit))
        })
        .await
    }

    async fn delete_thread(&self, tenant: &str, thread: &str) -> Result<()> {
        let (tenant, thread) = (tenant.to_owned(), thread.to_owned());
        self.write(|reply| Op::Delete {
            tenant,
            thread,
            reply,
        })
        .await
    }

    async fn rename_thread(&self, tenant: &str, from: &str, to: &str) -> Result<()> {
        let (t, f, n) = (tenant.to_owned(), from.to_owned(), to.to_owned());
        self.write(|reply| Op::Rename {
            tenant: t,
            from: f,
            to: n,
            reply,
        })
        .await?;
        Ok(())
    }

    async fn channels(&self, tenant: &str, thread: &str) -> Result<Vec<agui_store::Channel>> {
        let (tenant, thread) = (tenant.to_owned(), thread.to_owned());
        self.read_with(move |c| {
            let Some((id, _)) = thread_row(c, &tenant, &thread)? else {
                return Ok(Vec::new());
            };
            let doing = "read channels";
            let mut st = c
                .prepare_cached(
                    "SELECT agent, state, updated_at FROM channels WHERE thread_id = ?1 ORDER BY agent",
                )
                .map_err(|e| map(e, doing))?;
            let mut rows = st.query(params![id]).map_err(|e| map(e, doing))?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().map_err(|e| map(e, doing))? {
                out.push(agui_store::Channel {
                    agent: text(row.get(0).map_err(|e| map(e, doing))?)?,
                    state: text(row.get(1).map_err(|e| map(e, doing))?)?,
                    updated_at: agui_store::Timestamp(row.get(2).map_err(|e| map(e, doing))?),
                });
            }
            Ok(out)
        })
        .await
    }

    async fn put_channel(
        &self,
        tenant: &str,
        thread: &str,
        channel: agui_store::Channel,
    ) -> Result<()> {
        let (tenant, thread) = (tenant.to_owned(), thread.to_owned());
        self.write(|reply| Op::PutChannel {
            tenant,
            thread,
            channel,
            reply,
        })
        .await
    }

    async fn tenants(&self) -> Result<Vec<String>> {
        self.read_with(|c| {
            let mut st = c
                .prepare_cached("SELECT DISTINCT tenant FROM threads ORDER BY tenant")
                .map_err(|e| map(e, "list tenants"))?;
            let mut rows = st.query([]).map_err(|e| map(e, "list tenants"))?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().map_err(|e| map(e, "list tenants"))? {
                out.push(text(row.get(0).map_err(|e| map(e, "list tenants"))?)?);
            }
            Ok(out)
        })
        .await
    }

    async fn load_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<Option<Vec<u8>>> {
        let (tenant, thread, run_id) = (tenant.to_owned(), thread.to_owned(), run_id.to_owned());
        self.read_with(move |c| {
            let (id, _) =
                thread_row(c, &tenant, &thread)?.ok_or_else(|| StoreError::not_found("thread"))?;
            c.prepare_cached("SELECT blob FROM checkpoints WHERE thread_id = ?1 AND run_id = ?2")
                .and_then(|mut st| {
                    // Whatever is stored is handed over as bytes: a blob of
                    // the wrong type is damaged, and the caller rebuilds it.
                    st.query_row(params![id, run_id.as_bytes()], |r| {
                        Ok(match r.get_ref(0)? {
                            rusqlite::types::ValueRef::Blob(b)
                            | rusqlite::types::ValueRef::Text(b) => b.to_vec(),
                            _ => Vec::new(),
                        })
                    })
                    .optional()
                })
                .map_err(|e| map(e, "read a checkpoint"))
        })
        .await
    }

    async fn save_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
        blob: Vec<u8>,
    ) -> Result<()> {
        let (tenant, thread, run_id) = (tenant.to_owned(), thread.to_owned(), run_id.to_owned());
        // Kept beside the blob, so that a restore reads the chain in one
        // query (here, off the writer's thread).
        let base = checkpoint::base_run(&blob);
        self.write(|reply| Op::SaveCheckpoint {
            tenant,
            thread,
            run_id,
            blob,
            base,
            reply,
        })
        .await
    }

    async fn mark_interrupted(&self) -> Result<Vec<(String, RunRecord)>> {
        self.write(|reply| Op::MarkInterrupted { reply }).await
    }

    async fn ready(&self) -> Result<()> {
        self.check_open()?;
        if self
            .inner
            .broken
            .as_ref()
            .is_some_and(|b| b.load(Ordering::Acquire))
        {
            return Err(StoreError::unavailable(crate::writer::REFUSING));
        }
        let writer = self.inner.writer.lock().unwrap_or_else(|p| p.into_inner());
        if writer.as_ref().is_some_and(|w| w.is_finished()) {
            return Err(StoreError::unavailable("the store's writer stopped"));
        }
        Ok(())
    }

    async fn stats(&self) -> Result<StoreStats> {
        let path = self.inner.path.clone();
        self.read_with(move |c| {
            let g = |e| map(e, "compute statistics");
            let (tenants, threads, events, raw): (i64, i64, i64, i64) = c
                .query_row(
                    "SELECT COUNT(DISTINCT tenant), COUNT(*), COALESCE(SUM(last_seq), 0),
                     COALESCE(SUM(bytes), 0) FROM threads",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .map_err(g)?;
            let runs: i64 = c
                .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
                .map_err(g)?;
            let mut stored = 0u64;
            for suffix in ["", "-wal"] {
                let mut p = path.clone().into_os_string();
                p.push(suffix);
                stored += std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            }
            Ok(StoreStats {
                tenants: count(tenants)?,
                threads: count(threads)?,
                runs: count(runs)?,
                events: count(events)?,
                raw_bytes: count(raw)?,
                stored_bytes: stored,
            })
        })
        .await
    }

    /// One query for the run and its checkpoint chain (following the
    /// `base_run` kept beside each blob), or, in a file of an older schema
    /// opened read-only, for the run and its own checkpoint.
    async fn checkpoint_chain(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<CheckpointChain> {
        let (t, th, r) = (tenant.to_owned(), thread.to_owned(), run_id.to_owned());
        let sql = if self.inner.chains {
            CHAIN_SQL
        } else {
            OWN_CHECKPOINT_SQL
        };
        type Link = (i64, i64, Option<(Vec<u8>, Vec<u8>)>);
        let rows: Vec<Link> = self
            .read_with(move |c| {
                c.prepare_cached(sql)
                    .and_then(|mut st| {
                        st.query_map(
                            params![t.as_bytes(), th.as_bytes(), r.as_bytes(), MAX_CHAIN],
                            |row| {
                                let link = match (row.get_ref(2)?, row.get_ref(3)?) {
                                    (
                                        rusqlite::types::ValueRef::Blob(id),
                                        rusqlite::types::ValueRef::Blob(b),
                                    ) => Some((id.to_vec(), b.to_vec())),
                                    _ => None,
                                };
                                Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, link))
                            },
                        )?
                        .collect()
                    })
                    .map_err(|e| map(e, "read a checkpoint"))
            })
            .await?;
        let Some(&(status, last_seq, _)) = rows.first() else {
            // Say which is missing, the thread or the run.
            self.run(tenant, thread, run_id).await?;
            return Err(StoreError::not_found("run"));
        };
        let mut links = Vec::with_capacity(rows.len());
        for (_, _, link) in rows {
            if let Some((id, blob)) = link {
                links.push((text(id)?, blob.into()));
            }
        }
        Ok(CheckpointChain {
            status: status_from(status)?,
            last_seq: count(last_seq)?,
            links,
        })
    }

    async fn flush(&self) -> Result<()> {
        if self.inner.read_only {
            return self.check_open();
        }
        self.write(|reply| Op::Flush { reply }).await
    }

    async fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if let Some(h) = self.inner.stop_packer() {
            tokio::task::spawn_blocking(move || h.join())
                .await
                .map_err(|_| StoreError::internal("the packer could not be stopped"))?
                .map_err(|_| StoreError::internal("the packer stopped abnormally"))?;
        }
        // Dropping the sender lets the writer drain, checkpoint and stop.
        drop(
            self.inner
                .tx
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
        let handle = self
            .inner
            .writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(h) = handle {
            tokio::task::spawn_blocking(move || h.join())
                .await
                .map_err(|_| StoreError::internal("the writer could not be stopped"))?
                .map_err(|_| StoreError::internal("the writer stopped abnormally"))?;
        }
        self.inner
            .readers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        // Only now may another process open the file for writing.
        drop(
            self.inner
                .lock
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Without an explicit close, stop the packer, then the writer (it
        // drains first).
        if let Some(h) = self.stop_packer() {
            let _ = h.join();
        }
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(h) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agui_store::sample::run_started;
    use agui_store::{AppendRequest, ErrorKind, Store};

    /// After a failed flush (the syncer's flag) the store is not ready and
    /// says why without naming its file; reads go on.
    #[tokio::test]
    async fn a_store_whose_flush_failed_is_not_ready() {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open_path(&dir.path().join("r.db"))
            .await
            .unwrap();
        let broken = sqlite.inner.broken.clone().unwrap();
        let store = Store::new(sqlite);
        store.ready().await.expect("a new store is ready");
        let start = vec![run_started("th", "r", None)];
        store
            .append("t", "th", AppendRequest::new(start))
            .await
            .unwrap();
        broken.store(true, Ordering::Release);
        let err = store.ready().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert!(err.message().contains("refuses writes"), "{err}");
        assert!(!err.message().contains("r.db"), "{err}");
        let more = vec![run_started("th2", "r", None)];
        let err = store
            .append("t", "th2", AppendRequest::new(more))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert_eq!(store.thread("t", "th").await.unwrap().last_seq, 1);
        store.close().await.unwrap();
    }
}
