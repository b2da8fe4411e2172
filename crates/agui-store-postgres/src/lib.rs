//! The PostgreSQL backend of agui-store (`postgres://...`), for many gateway
//! replicas on one database.
//!
//! - **Open** with [`open`] (`postgres://user@host:port/db?schema=NAME`; the
//!   `schema` parameter is optional, default `agui`) or [`PgStore::open_with`].
//!   The schema is created and migrated on open, under an advisory lock, so
//!   replicas may start together. Calls go through a connection pool
//!   ([`PgOptions::pool_size`]).
//! - **Layout.** `threads` (one row per (tenant, thread): the head of the
//!   log, updated by every append, so appends to one thread serialize on its
//!   row lock while other threads proceed), `chunks` (one row per appended
//!   batch of up to 1,024 events, primary key (thread, first sequence): the
//!   batch codec of `agui_store::frame`: each event's type code and exact
//!   JSON bytes, zstd-compressed over the shipped dictionary when that
//!   pays, with a CRC-32), `runs` (the run index, maintained with
//!   `agui_store::index`; indexes by thread, start time, parent run),
//!   `checkpoints`. Ids are `bytea`, so any string (NUL included)
//!   round-trips. Schema version 1 kept one row per event; migration 2 turns
//!   those rows into one-event chunks in place.
//! - **Appends** (the engine plans them) are one statement (`APPEND_SQL`):
//!   update the head row only if it still is the head the batch was planned
//!   against, and, joined on that update, insert the chunks and new runs,
//!   update continuing runs, set the commit mode and `pg_notify`. The
//!   process remembers each thread's head row after writing it, so a commit
//!   is usually one round trip. When the head row is unknown or has moved
//!   (another writer or replica, a `mark_interrupted`), the statement writes
//!   nothing and the commit goes on in a transaction that locks the head
//!   row first (creating it for a new thread) and writes under the lock, or
//!   reports the head as it is (`Commit::HeadMoved`) for the engine to plan
//!   again. A run id used twice (which the engine's plan already refuses)
//!   would violate `runs_pkey` and is `Invalid`.
//! - **Restore** of a run reads its status, its checkpoint and every base
//!   of its delta chain in one recursive query (each blob's base run is kept
//!   beside it in `checkpoints.base_run`), checks the chain as the shared
//!   code does and composes it with `agui_store::checkpoint::compose`;
//!   anything missing, damaged or stale goes to the shared
//!   `agui_store::restore_run`, which repairs.
//! - **Durability** is per transaction through `synchronous_commit`:
//!   [`Durability::Append`] commits with `synchronous_commit = on` (the
//!   append is on stable storage when it returns); [`Durability::RunEnd`]
//!   commits batches that end a run with `on` and others with `off` (such a
//!   commit survives a crash of the gateway, since the server has it, but an
//!   OS crash of the database host may lose the last few hundred
//!   milliseconds of them). `flush` commits a synchronous write, which makes
//!   every earlier asynchronous commit durable too.
//! - **Live subscriptions across replicas.** Every append notifies (on a
//!   channel per schema) with a short key of (tenant, thread) and the
//!   batch's sequence range; never the events, so payload limits do not
//!   matter. The engine above a store publishes the store's own commits to
//!   its hub as they commit (nothing it wrote is read back), and the store
//!   skips their notices, which carry its session number. Each store keeps one dedicated
//!   listening connection; on another replica's notice for a thread someone
//!   subscribes to, it reads the new rows once by sequence number and
//!   publishes them to the engine's hub (`Backend::attach_hub`; the threads
//!   come from `Backend::watch`), which gives
//!   catch-up-then-live without gap or duplicate (`agui_store::subscribe`).
//!   After the listening connection is lost it reconnects and nudges every
//!   subscription to re-read from the store, so nothing is missed.
//! - **Recovery across replicas.** Each open store is a session (a number
//!   from the `sessions` sequence) and holds the advisory lock
//!   (schema key, session) on its listening connection for as long as it
//!   lives; every append records its session as the owner of the runs it
//!   touches. Every pooled connection of a store also holds a shared
//!   presence lock of its session. A session whose lock no connection holds
//!   is gone at once when none of its connections is left and this store
//!   never saw it live (a process that ended: the server closed its
//!   connections) and the server did not itself start less than 3 s ago
//!   (a restart ends every connection, live replicas' too), and otherwise
//!   once it has stayed lockless for 3 s: a
//!   live replica whose listening connection is reconnecting (200 ms apart)
//!   holds no lock for a moment, and after the database itself restarted
//!   its pooled connections are gone too. `mark_interrupted` (at start-up)
//!   interrupts the calling store's own runs, those with no owner recorded
//!   and those of gone sessions, waiting out the grace (at most 10 s) for
//!   a session still present, so a replica starting up leaves the runs of
//!   live replicas alone, even one that is reconnecting, and a restart
//!   after a crash closes its predecessor's runs without waiting.
//!   `mark_interrupted_elsewhere`, which a running gateway calls every
//!   second (the store says it is `shared`), never takes its own store's
//!   runs and takes another session's by the same rule, across calls.
//!   Both return the runs they marked (one statement marks and returns
//!   them), so of two replicas sweeping at once only one closes each, and
//!   a starting gateway closes exactly the runs it marked. Every connection
//!   switches the server's `idle_session_timeout` off for itself
//!   (`NEVER_IDLE_OUT`): they are idle by design. Limits: a
//!   listening connection lost for longer than the grace looks gone; a host
//!   that vanishes without closing its connections keeps its lock until the
//!   server's TCP keepalives (set to about a minute on that connection)
//!   drop it.
//! - **Errors** map onto the portable kinds; `Display` never shows SQL.

mod error;
mod schema;

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agui_protocol::Event;
use agui_store::cursor::{run_page, thread_page};
use agui_store::frame;
use agui_store::index::{BatchPlan, ThreadHead};
use agui_store::subscribe::Hub;
use agui_store::{
    Backend, Batch, CheckpointChain, Commit, ErrorKind, EventPage, Result, RunFilter, RunPage,
    RunRecord, RunStatus, StoreError, StoreStats, StoredEvent, ThreadFilter, ThreadInfo,
    ThreadPage, Timestamp, checkpoint, page_size,
};
use async_trait::async_trait;
use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use sha2::{Digest, Sha256};
use tokio::task::JoinHandle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, NoTls, Row};

use crate::error::{pg, pool};

/// The schema used when the URL names none.
pub const DEFAULT_SCHEMA: &str = "agui";

/// Threads whose head this process remembers (see `Inner::heads`).
const HEAD_KEYS: usize = 4096;

/// The default bound on waiting for a pooled connection.
pub const DEFAULT_POOL_WAIT: Duration = Duration::from_secs(30);

/// How to open a [`PgStore`].
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// A libpq-style URL or key=value string, without the `schema`
    /// parameter.
    pub conn: String,
    /// The schema holding the store's tables (created if missing):
    /// 1 to 63 ASCII letters, digits or underscores.
    pub schema: String,
    /// Connections in the pool (besides the one listening connection).
    pub pool_size: usize,
    /// How long a store call waits for a free pooled connection before it
    /// fails as `Unavailable` (a bounded wait turns a starved or stuck pool
    /// into an error a client sees, instead of a request that never ends).
    pub pool_wait: Duration,
    /// Fail with `NotFound` instead of creating the schema when it holds no
    /// store (for read-only commands, which must not create anything).
    pub must_exist: bool,
}

impl PgOptions {
    /// Parses `postgres://...[?schema=NAME&...]`: `schema` is taken out, the
    /// rest goes to the driver.
    pub fn from_url(url: &str) -> Result<PgOptions> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(StoreError::invalid("not a postgres:// URL"));
        }
        let mut schema = DEFAULT_SCHEMA.to_owned();
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        let mut kept = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("schema", v)) => schema = v.to_owned(),
                _ if pair.is_empty() => {}
                _ => kept.push(pair),
            }
        }
        let conn = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        if !schema::valid_schema_name(&schema) {
            return Err(StoreError::invalid(
                "the schema name must be 1 to 63 ASCII letters, digits or underscores",
            ));
        }
        Ok(PgOptions {
            conn,
            schema,
            pool_size: 16,
            pool_wait: DEFAULT_POOL_WAIT,
            must_exist: false,
        })
    }
}

/// Opens the PostgreSQL store at `url` (`postgres://user@host:port/db`,
/// optionally `?schema=NAME`), creating and migrating its schema.
pub async fn open(url: &str) -> Result<PgStore> {
    PgStore::open_with(PgOptions::from_url(url)?).await
}

/// Opens the PostgreSQL store at `url` only if its schema already holds a
/// store: `NotFound` otherwise, with nothing created.
pub async fn open_existing(url: &str) -> Result<PgStore> {
    let mut opts = PgOptions::from_url(url)?;
    opts.must_exist = true;
    PgStore::open_with(opts).await
}

/// The PostgreSQL store. Cloning gives another handle on the same pool.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    schema: String,
    channel: String,
    /// The hubs of the engines over this store (`attach_hub`): where other
    /// replicas' batches and deletions are published.
    hubs: Mutex<Vec<Arc<Hub>>>,
    /// Notice key → the (tenant, thread) pairs subscribed under it.
    watched: Mutex<HashMap<String, HashSet<(String, String)>>>,
    /// (tenant, thread) watched → the row id of the thread as it was when
    /// first watched (looked up then), so that after a lost listening
    /// connection a thread deleted and written again meanwhile, whose
    /// delete notice was missed, is told apart (see `nudge_all`).
    instances: Mutex<HashMap<(String, String), i64>>,
    /// Ranges read back for subscribers (see [`PgStore::ranges_read`]).
    ranges_read: std::sync::atomic::AtomicU64,
    closed: AtomicBool,
    listener: Mutex<Option<JoinHandle<()>>>,
    /// (tenant, thread) → the head this process last wrote or read under
    /// lock: appends plan against it and let the database check it.
    heads: Mutex<HashMap<(String, String), KnownHead>>,
    /// This store's session number: the owner of the runs it appends to,
    /// live while the listening connection holds the advisory lock
    /// (`lock_space`, `session`).
    session: i32,
    /// The first key of the session locks of this schema.
    lock_space: i32,
    /// What this store saw of the other sessions with `running` runs.
    sessions_seen: Mutex<SessionsSeen>,
}

/// Other sessions with `running` runs, as this store's recovery calls saw
/// them.
#[derive(Default)]
struct SessionsSeen {
    /// Those whose lock no connection held, since when: their runs are
    /// interrupted once they stay so for [`GONE_GRACE`].
    gone_since: HashMap<i32, std::time::Instant>,
    /// Those seen holding their lock: one of them found lockless a moment
    /// later may be reconnecting after the database itself went away (its
    /// pooled connections gone too), so it gets the grace even with no
    /// connection left.
    seen_live: HashSet<i32>,
}

/// The configuration of every connection of a store on `schema`: the
/// connection string's, with its own options (`options=-c ...`) kept and
/// the schema's search path after them (so it wins), and `agui` as the
/// application name unless it names one.
fn connection_config(conn: &str, schema: &str) -> Result<tokio_postgres::Config> {
    let mut cfg = tokio_postgres::Config::from_str(conn).map_err(|e| {
        StoreError::invalid("the PostgreSQL connection string is malformed").with_source(e)
    })?;
    let search_path = format!("-c search_path={schema}");
    let options = match cfg.get_options().map(str::trim) {
        Some(own) if !own.is_empty() => format!("{own} {search_path}"),
        _ => search_path,
    };
    cfg.options(options);
    if cfg.get_application_name().is_none() {
        cfg.application_name("agui");
    }
    Ok(cfg)
}

/// Turns the server's `idle_session_timeout` (PostgreSQL 14 and later) off
/// for the connection that runs it. A store's connections are idle by
/// design (the listening one waits for notices; pooled ones wait for the
/// next query), and they are how other replicas see this one alive: ended
/// by that timeout, they would make a live replica look gone, and its runs
/// be taken as a dead one's. The pool keeps at most its size of them.
const NEVER_IDLE_OUT: &str = "SELECT set_config('idle_session_timeout', '0', false) \
     WHERE current_setting('server_version_num')::int >= 140000";

/// How long another session must look gone before a running store
/// interrupts its runs: a live replica whose listening connection is
/// reconnecting (200 ms apart) holds no lock for that moment.
const GONE_GRACE: Duration = Duration::from_secs(3);

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

fn status_code(s: RunStatus) -> i16 {
    i16::from(s.code())
}

fn status_from(code: i16) -> Result<RunStatus> {
    RunStatus::from_code(code.into())
}

fn to_i64(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| StoreError::invalid("a number is out of range"))
}

fn to_u64(n: i64) -> Result<u64> {
    u64::try_from(n).map_err(|_| StoreError::corrupt("a stored number is negative"))
}

fn text(bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|_| StoreError::corrupt("a stored id is not UTF-8"))
}

fn opt_text(bytes: Option<Vec<u8>>) -> Result<Option<String>> {
    bytes.map(text).transpose()
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, idx: usize) -> Result<T> {
    row.try_get(idx)
        .map_err(|e| StoreError::corrupt("a stored row has an unexpected shape").with_source(e))
}

/// The short key notices carry for a (tenant, thread).
/// The first key of the advisory locks by which the gateways on `schema`
/// show they are alive (`pg_advisory_lock(space, session)`; `pg_locks` shows
/// it as `classid`, and the session number as `objid`, with `objsubid` 2).
/// Session numbers come from a sequence per schema, so only the space tells
/// two schemas' sessions apart.
pub fn session_lock_space(schema: &str) -> i32 {
    let key = notice_key("sessions", schema);
    // Eight hex digits are a u32; read as an i32, half of them overflowed
    // and every such schema shared space 0 (and so each other's sessions).
    let bits = u32::from_str_radix(&key[..8], 16).unwrap_or(0);
    (bits & 0x7fff_ffff) as i32
}

/// The key of a session's presence lock: every pooled connection of an
/// open store holds it shared (`pg_locks` shows the space as `classid`, the
/// session as `objid`, with `objsubid` 1). A session whose listening
/// connection holds no lock but whose pooled connections are still there is
/// alive and reconnecting; one with neither is gone (its process ended and
/// the server closed its connections).
fn presence_key(space: i32, session: i32) -> i64 {
    (i64::from(space) << 32) | i64::from(session as u32)
}

/// An owner of `running` runs, as a recovery call reads it.
struct Owner {
    /// The session, or `None` for runs with no owner recorded.
    session: Option<i32>,
    /// Its listening connection holds its lock.
    live: bool,
    /// Some connection of it holds its presence lock.
    present: bool,
    /// The database server started less than [`GONE_GRACE`] ago: every
    /// connection made before was ended by its restart, so having none
    /// left says nothing of a replica (the same for every owner of a call).
    young_server: bool,
}

fn notice_key(tenant: &str, thread: &str) -> String {
    let mut h = Sha256::new();
    h.update((tenant.len() as u64).to_le_bytes());
    h.update(tenant.as_bytes());
    h.update(thread.as_bytes());
    hex::encode(&h.finalize()[..12])
}

/// The whole write of one batch, as one statement (so one round trip, and
/// atomic even without an explicit transaction). The head row is updated
/// only if it still is what the batch was planned against (`$1` id under
/// the names `$17` tenant and `$18` thread, so a thread another replica
/// renamed meanwhile is not written to under its old name; `$2` last
/// sequence, `$3` last run's status); every other part joins on that
/// update, so a moved head writes nothing and returns no row. New runs are
/// inserted (a reused run id violates `runs_pkey`), existing ones updated.
/// `synchronous_commit` is set for this transaction only. `$38` is this
/// store's session: the owner of the runs the batch touches.
const APPEND_SQL: &str = "WITH h AS (\
     UPDATE threads SET last_seq = $4, updated_at = $5, \
       created_at = CASE WHEN last_seq = 0 THEN $5 ELSE created_at END, \
       agent = COALESCE($6, agent), run_count = run_count + $7, bytes = bytes + $8, \
       last_run = $9, last_run_status = $10 \
     WHERE id = $1 AND tenant = $17 AND thread = $18 AND last_seq = $2 \
       AND last_run_status IS NOT DISTINCT FROM $3 \
     RETURNING id), \
   c AS (INSERT INTO chunks (thread_id, first_seq, last_seq, received_at, codec, raw_len, \
       crc, data) \
     SELECT h.id, u.f, u.l, $5, u.c, u.n, u.k, u.d FROM h, UNNEST($11::bigint[], \
       $12::bigint[], $13::smallint[], $14::bigint[], $15::bigint[], $16::bytea[]) \
       AS u(f, l, c, n, k, d)), \
   rn AS (INSERT INTO runs (thread_id, run_id, tenant, thread, parent_run_id, agent, status, \
       started_at, finished_at, first_seq, last_seq, event_count, bytes, owner) \
     SELECT h.id, u.r, $17, $18, u.p, u.a, u.s, u.t, u.f, u.fs, u.ls, u.e, u.b, $38 FROM h, \
       UNNEST($19::bytea[], $20::bytea[], $21::bytea[], $22::smallint[], $23::bigint[], \
       $24::bigint[], $25::bigint[], $26::bigint[], $27::bigint[], $28::bigint[]) \
       AS u(r, p, a, s, t, f, fs, ls, e, b)), \
   ru AS (UPDATE runs x SET last_seq = u.ls, event_count = x.event_count + u.e, \
       bytes = x.bytes + u.b, status = u.s, finished_at = COALESCE(u.f, x.finished_at), \
       owner = $38 \
     FROM h, UNNEST($29::bytea[], $30::bigint[], $31::bigint[], $32::bigint[], \
       $33::smallint[], $34::bigint[]) AS u(r, ls, e, b, s, f) \
     WHERE x.thread_id = h.id AND x.run_id = u.r) \
   SELECT set_config('synchronous_commit', $35, true), pg_notify($36, $37) FROM h";

/// The head columns of the `threads` row, in the order [`head_from_row`]
/// reads them (one list for every statement that reads a head).
macro_rules! head_columns {
    () => {
        "id, last_seq, updated_at, last_run, last_run_status"
    };
}

/// Creates the head row if missing and locks it either way.
const LOCK_HEAD_SQL: &str = concat!(
    "INSERT INTO threads (tenant, thread, created_at, updated_at, \
     last_seq) VALUES ($1, $2, $3, $3, 0) \
     ON CONFLICT (tenant, thread) DO UPDATE SET last_seq = threads.last_seq \
     RETURNING ",
    head_columns!()
);

/// True when an error of the append statement is its insert of a new run
/// violating `runs_pkey`: a run the batch starts is already in the thread.
fn is_reused_run(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|d| {
        *d.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
            && d.constraint() == Some("runs_pkey")
    })
}

/// `Invalid` for a reused run id, in the words of the other backends
/// (`RunTable::refuse_reused`, the SQLite writer): one line naming the run
/// (`None` when it is not known which of the batch's runs it was). The
/// server's error (constraint name, the key's bytes in a `DETAIL` line) is
/// not kept as the source: the message says all there is to it.
fn reused_run(run_id: Option<&str>) -> StoreError {
    match run_id {
        Some(run) => StoreError::invalid(format!("runId {run:?} is already used in this thread")),
        None => StoreError::invalid("a runId of the batch is already used in this thread"),
    }
}

/// A thread's head as this process last saw it: row id and head.
type KnownHead = (i64, ThreadHead);

/// The parameters of [`APPEND_SQL`] for one planned batch, owned.
struct AppendParams {
    id: i64,
    expect_seq: i64,
    expect_status: Option<i16>,
    last_seq: i64,
    at: i64,
    agent: Option<Vec<u8>>,
    new_runs: i64,
    bytes: i64,
    last_run: Option<Vec<u8>>,
    last_status: Option<i16>,
    c_first: Vec<i64>,
    c_last: Vec<i64>,
    c_codec: Vec<i16>,
    c_len: Vec<i64>,
    c_crc: Vec<i64>,
    c_data: Vec<Vec<u8>>,
    tenant: Vec<u8>,
    thread: Vec<u8>,
    n_run: Vec<Vec<u8>>,
    n_parent: Vec<Option<Vec<u8>>>,
    n_agent: Vec<Option<Vec<u8>>>,
    n_status: Vec<i16>,
    n_started: Vec<i64>,
    n_finished: Vec<Option<i64>>,
    n_first: Vec<i64>,
    n_last: Vec<i64>,
    n_events: Vec<i64>,
    n_bytes: Vec<i64>,
    u_run: Vec<Vec<u8>>,
    u_last: Vec<i64>,
    u_events: Vec<i64>,
    u_bytes: Vec<i64>,
    u_status: Vec<i16>,
    u_finished: Vec<Option<i64>>,
    sync: &'static str,
    channel: String,
    notice: String,
    session: i32,
}

impl AppendParams {
    /// The batch planned against `head` (the head row `id`).
    #[allow(clippy::too_many_arguments)]
    fn new(
        id: i64,
        head: &ThreadHead,
        plan: &BatchPlan,
        events: &[Event],
        tenant: &str,
        thread: &str,
        agent: Option<&str>,
        sync: bool,
        channel: &str,
        session: i32,
    ) -> Result<AppendParams> {
        let mut p = AppendParams {
            id,
            expect_seq: to_i64(head.last_seq)?,
            expect_status: head.last_run.as_ref().map(|(_, s)| status_code(*s)),
            last_seq: to_i64(plan.last_seq())?,
            at: plan.received_at.0,
            agent: agent.map(|a| a.as_bytes().to_vec()),
            new_runs: plan.runs.iter().filter(|r| r.new).count() as i64,
            bytes: to_i64(plan.bytes)?,
            last_run: plan
                .head
                .last_run
                .as_ref()
                .map(|(r, _)| r.as_bytes().to_vec()),
            last_status: plan.head.last_run.as_ref().map(|(_, s)| status_code(*s)),
            c_first: Vec::new(),
            c_last: Vec::new(),
            c_codec: Vec::new(),
            c_len: Vec::new(),
            c_crc: Vec::new(),
            c_data: Vec::new(),
            tenant: tenant.as_bytes().to_vec(),
            thread: thread.as_bytes().to_vec(),
            n_run: Vec::new(),
            n_parent: Vec::new(),
            n_agent: Vec::new(),
            n_status: Vec::new(),
            n_started: Vec::new(),
            n_finished: Vec::new(),
            n_first: Vec::new(),
            n_last: Vec::new(),
            n_events: Vec::new(),
            n_bytes: Vec::new(),
            u_run: Vec::new(),
            u_last: Vec::new(),
            u_events: Vec::new(),
            u_bytes: Vec::new(),
            u_status: Vec::new(),
            u_finished: Vec::new(),
            sync: if sync { "on" } else { "off" },
            channel: channel.to_owned(),
            session,
            notice: format!(
                "A {} {} {} {session}",
                notice_key(tenant, thread),
                plan.first_seq,
                plan.last_seq()
            ),
        };
        let mut first = plan.first_seq;
        for part in events.chunks(frame::CHUNK_EVENTS) {
            let c = frame::encode(part)?;
            let last = first + part.len() as u64 - 1;
            p.c_first.push(to_i64(first)?);
            p.c_last.push(to_i64(last)?);
            // Codec numbers are small (see `agui_store::frame`).
            p.c_codec.push(c.codec as i16);
            p.c_len.push(i64::from(c.raw_len));
            p.c_crc.push(i64::from(c.crc));
            p.c_data.push(c.data);
            first = last + 1;
        }
        for u in &plan.runs {
            if u.new {
                p.n_run.push(u.run_id.as_bytes().to_vec());
                p.n_parent
                    .push(u.parent_run_id.as_ref().map(|s| s.as_bytes().to_vec()));
                p.n_agent
                    .push(u.agent.as_ref().map(|s| s.as_bytes().to_vec()));
                p.n_status.push(status_code(u.status));
                p.n_started.push(u.started_at.0);
                p.n_finished.push(u.finished_at.map(|t| t.0));
                p.n_first.push(to_i64(u.first_seq)?);
                p.n_last.push(to_i64(u.last_seq)?);
                p.n_events.push(to_i64(u.add_events)?);
                p.n_bytes.push(to_i64(u.add_bytes)?);
            } else {
                p.u_run.push(u.run_id.as_bytes().to_vec());
                p.u_last.push(to_i64(u.last_seq)?);
                p.u_events.push(to_i64(u.add_events)?);
                p.u_bytes.push(to_i64(u.add_bytes)?);
                p.u_status.push(status_code(u.status));
                p.u_finished.push(u.finished_at.map(|t| t.0));
            }
        }
        Ok(p)
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 38] {
        [
            &self.id,
            &self.expect_seq,
            &self.expect_status,
            &self.last_seq,
            &self.at,
            &self.agent,
            &self.new_runs,
            &self.bytes,
            &self.last_run,
            &self.last_status,
            &self.c_first,
            &self.c_last,
            &self.c_codec,
            &self.c_len,
            &self.c_crc,
            &self.c_data,
            &self.tenant,
            &self.thread,
            &self.n_run,
            &self.n_parent,
            &self.n_agent,
            &self.n_status,
            &self.n_started,
            &self.n_finished,
            &self.n_first,
            &self.n_last,
            &self.n_events,
            &self.n_bytes,
            &self.u_run,
            &self.u_last,
            &self.u_events,
            &self.u_bytes,
            &self.u_status,
            &self.u_finished,
            &self.sync,
            &self.channel,
            &self.notice,
            &self.session,
        ]
    }
}

/// Delta checkpoints read at most in one query.
const MAX_CHAIN: i32 = agui_store::checkpoint::MAX_CHAIN as i32;

/// A run's status and last sequence, with its checkpoint and then each base
/// checkpoint in chain order (following the `base_run` kept beside each
/// blob), in one round trip. No row: no such run; a row with no blob: no
/// checkpoint.
const RESTORE_SQL: &str = "WITH RECURSIVE r AS (\
     SELECT r.thread_id, r.status, r.last_seq FROM runs r JOIN threads t ON t.id = r.thread_id \
     WHERE t.tenant = $1 AND t.thread = $2 AND r.run_id = $3), \
   ch AS (SELECT c.run_id, c.base_run, c.blob, 1 AS depth FROM r JOIN checkpoints c \
       ON c.thread_id = r.thread_id AND c.run_id = $3 \
     UNION ALL \
     SELECT c.run_id, c.base_run, c.blob, ch.depth + 1 FROM ch, r, checkpoints c \
     WHERE c.thread_id = r.thread_id AND c.run_id = ch.base_run AND ch.depth < $4) \
   SELECT r.status, r.last_seq, ch.run_id, ch.blob FROM r LEFT JOIN ch ON true \
   ORDER BY ch.depth";

const RUN_COLUMNS: &str = "r.thread, r.run_id, r.parent_run_id, r.agent, r.status, r.started_at, \
     r.finished_at, r.first_seq, r.last_seq, r.event_count, r.bytes, r.thread_id";

fn run_from_row(row: &Row) -> Result<RunRecord> {
    run_from_row_at(row, 0)
}

/// A run from [`RUN_COLUMNS`] starting at column `at`.
fn run_from_row_at(row: &Row, at: usize) -> Result<RunRecord> {
    Ok(RunRecord {
        thread_id: text(get(row, at)?)?,
        run_id: text(get(row, at + 1)?)?,
        parent_run_id: opt_text(get(row, at + 2)?)?,
        agent: opt_text(get(row, at + 3)?)?,
        status: status_from(get(row, at + 4)?)?,
        started_at: Timestamp(get(row, at + 5)?),
        finished_at: get::<Option<i64>>(row, at + 6)?.map(Timestamp),
        first_seq: to_u64(get(row, at + 7)?)?,
        last_seq: to_u64(get(row, at + 8)?)?,
        event_count: to_u64(get(row, at + 9)?)?,
        bytes: to_u64(get(row, at + 10)?)?,
        thread_instance: to_u64(get(row, at + 11)?)?,
    })
}

const THREAD_COLUMNS: &str = "thread, agent, created_at, updated_at, last_seq, run_count, bytes";

fn thread_from_row(row: &Row) -> Result<ThreadInfo> {
    Ok(ThreadInfo {
        thread_id: text(get(row, 0)?)?,
        agent: opt_text(get(row, 1)?)?,
        created_at: Timestamp(get(row, 2)?),
        updated_at: Timestamp(get(row, 3)?),
        last_seq: to_u64(get(row, 4)?)?,
        run_count: to_u64(get(row, 5)?)?,
        bytes: to_u64(get(row, 6)?)?,
    })
}

impl PgStore {
    /// Opens with explicit options: connects the pool, creates and migrates
    /// the schema, starts the listening connection.
    pub async fn open_with(opts: PgOptions) -> Result<PgStore> {
        if !schema::valid_schema_name(&opts.schema) {
            return Err(StoreError::invalid(
                "the schema name must be 1 to 63 ASCII letters, digits or underscores",
            ));
        }
        let cfg = connection_config(&opts.conn, &opts.schema)?;
        let mgr = Manager::from_config(
            cfg.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        // Every pooled connection holds the session's presence lock once the
        // session is known (see `presence_key`).
        let presence = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let key = presence.clone();
        let pool = Pool::builder(mgr)
            .max_size(opts.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .post_create(Hook::async_fn(move |client, _| {
                let key = key.load(Ordering::Acquire);
                Box::pin(async move {
                    client
                        .batch_execute(NEVER_IDLE_OUT)
                        .await
                        .map_err(HookError::Backend)?;
                    if key != 0 {
                        client
                            .query_one("SELECT pg_try_advisory_lock_shared($1)", &[&key])
                            .await
                            .map_err(HookError::Backend)?;
                    }
                    Ok(())
                })
            }))
            .wait_timeout(Some(opts.pool_wait))
            .build()
            .map_err(|e| {
                StoreError::internal("the connection pool cannot be built").with_source(e)
            })?;
        if opts.must_exist {
            let c = pool.get().await.map_err(|e| {
                if crate::error::is_missing_database(&e) {
                    StoreError::new(ErrorKind::NotFound, "no such database").with_source(e)
                } else {
                    pool_err_open(e)
                }
            })?;
            let row = c
                .query_one(
                    "SELECT to_regclass(quote_ident($1) || '.schema_version') IS NOT NULL",
                    &[&opts.schema],
                )
                .await
                .map_err(pg)?;
            if !get::<bool>(&row, 0)? {
                return Err(StoreError::new(
                    ErrorKind::NotFound,
                    format!("no agui store in schema {:?}", opts.schema),
                ));
            }
        }
        migrate(&pool, &opts.schema).await?;
        let lock_space = session_lock_space(&opts.schema);
        let session: i32 = {
            let c = pool.get().await.map_err(pool_err_open)?;
            let row = c
                .query_one("SELECT nextval('sessions')::int", &[])
                .await
                .map_err(pg)?;
            let session = get(&row, 0)?;
            // The connections made so far (this one) take the presence lock
            // here, later ones as they are made.
            let key = presence_key(lock_space, session);
            c.query_one("SELECT pg_try_advisory_lock_shared($1)", &[&key])
                .await
                .map_err(pg)?;
            presence.store(key, Ordering::Release);
            session
        };
        let channel = format!("agui_{}", &notice_key("schema", &opts.schema)[..16]);
        let inner = Arc::new(Inner {
            pool,
            schema: opts.schema,
            channel,
            hubs: Mutex::new(Vec::new()),
            watched: Mutex::new(HashMap::new()),
            instances: Mutex::new(HashMap::new()),
            ranges_read: Default::default(),
            closed: AtomicBool::new(false),
            listener: Mutex::new(None),
            heads: Mutex::new(HashMap::new()),
            sessions_seen: Mutex::new(SessionsSeen::default()),
            session,
            lock_space,
        });
        let ready = listen(cfg, Arc::downgrade(&inner));
        let (task, first) = ready;
        first
            .await
            .map_err(|_| StoreError::unavailable("the listening connection failed"))??;
        *inner.listener.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        Ok(PgStore { inner })
    }

    /// The schema this store lives in.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    async fn conn(&self) -> Result<deadpool_postgres::Object> {
        self.check_open()?;
        self.inner.pool.get().await.map_err(pool)
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(StoreError::unavailable("the store is closed"));
        }
        Ok(())
    }

    /// Events of a thread from `from_seq`, one snapshot for page and head.
    async fn read_page(
        &self,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<EventPage> {
        let c = self.conn().await?;
        let limit = page_size(limit);
        let from = to_i64(from_seq.max(1)).unwrap_or(i64::MAX);
        let until = from.saturating_add(limit as i64 - 1);
        // The chunk holding `from` and every later one starting in the page.
        let st = c
            .prepare_cached(
                "SELECT t.last_seq, c.first_seq, c.last_seq, c.received_at, c.codec, c.raw_len, \
                 c.crc, c.data FROM threads t \
                 LEFT JOIN LATERAL (SELECT * FROM chunks WHERE thread_id = t.id \
                   AND first_seq >= COALESCE((SELECT max(first_seq) FROM chunks \
                     WHERE thread_id = t.id AND first_seq <= $3), 1) \
                   AND first_seq <= $4 AND t.last_seq >= $3 ORDER BY first_seq) c ON true \
                 WHERE t.tenant = $1 AND t.thread = $2",
            )
            .await
            .map_err(pg)?;
        let rows = c
            .query(
                &st,
                &[&tenant.as_bytes(), &thread.as_bytes(), &from, &until],
            )
            .await
            .map_err(pg)?;
        drop(c);
        let Some(first) = rows.first() else {
            return Err(StoreError::not_found("thread"));
        };
        let last_seq = to_u64(get(first, 0)?)?;
        let from = from as u64;
        let mut events = Vec::with_capacity(limit.min(4096));
        let mut expect: Option<u64> = None;
        for row in rows {
            let Some(first) = get::<Option<i64>>(&row, 1)? else {
                continue;
            };
            let first = to_u64(first)?;
            let last = to_u64(get(&row, 2)?)?;
            if expect.is_some_and(|x| x != first) || last < first || last > last_seq {
                return Err(StoreError::corrupt("the stored log has a gap"));
            }
            expect = Some(last + 1);
            let received_at = Timestamp(get(&row, 3)?);
            let decoded = frame::decode(
                i64::from(get::<i16>(&row, 4)?),
                get(&row, 5)?,
                get(&row, 6)?,
                get(&row, 7)?,
                last - first + 1,
            )?;
            EventPage::push_batch(&mut events, decoded, first, received_at, from, limit);
        }
        if events.is_empty() && from <= last_seq {
            return Err(StoreError::corrupt("the stored log has a gap"));
        }
        EventPage::starting_at(events, from, last_seq)
    }
}

/// Creates the schema and applies pending migrations, once across replicas.
async fn migrate(pool: &Pool, schema: &str) -> Result<()> {
    let mut c = pool.get().await.map_err(pool_err_open)?;
    let tx = c.transaction().await.map_err(pg)?;
    // One lock for every agui schema of the database: CREATE SCHEMA races.
    tx.execute("SELECT pg_advisory_xact_lock(7170001)", &[])
        .await
        .map_err(pg)?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
         SET LOCAL search_path = \"{schema}\";
         CREATE TABLE IF NOT EXISTS schema_version (version INT NOT NULL);"
    ))
    .await
    .map_err(pg)?;
    let current: i32 = match tx
        .query_opt("SELECT max(version) FROM schema_version", &[])
        .await
        .map_err(pg)?
    {
        Some(row) => get::<Option<i32>>(&row, 0)?.unwrap_or(0),
        None => 0,
    };
    let known = schema::MIGRATIONS.len() as i32;
    if current > known {
        return Err(StoreError::unavailable(
            "the database schema is newer than this version of agui",
        ));
    }
    for (i, sql) in schema::MIGRATIONS.iter().enumerate().skip(current as usize) {
        tx.batch_execute(sql).await.map_err(pg)?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[&(i as i32 + 1)],
        )
        .await
        .map_err(pg)?;
    }
    tx.commit().await.map_err(pg)
}

/// A pool error at start-up, said once: the pool's own mapping already
/// names what failed (wrapping it again repeated `unavailable: ...`).
fn pool_err_open(e: deadpool_postgres::PoolError) -> StoreError {
    pool(e)
}

type Ready = tokio::sync::oneshot::Receiver<Result<()>>;

/// Starts the listening task. The receiver completes once the first LISTEN
/// is in place (or failed).
fn listen(cfg: tokio_postgres::Config, inner: std::sync::Weak<Inner>) -> (JoinHandle<()>, Ready) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut ready = Some(tx);
        let mut reconnected = false;
        loop {
            let outcome = listen_once(&cfg, &inner, &mut ready, reconnected).await;
            if let Err(e) = outcome
                && let Some(tx) = ready.take()
            {
                let _ = tx.send(Err(e));
                return;
            }
            let Some(strong) = inner.upgrade() else {
                return;
            };
            if strong.closed.load(Ordering::Acquire) {
                return;
            }
            drop(strong);
            reconnected = true;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    (task, rx)
}

/// One listening connection's life. Returns when it is lost.
async fn listen_once(
    cfg: &tokio_postgres::Config,
    weak: &std::sync::Weak<Inner>,
    ready: &mut Option<tokio::sync::oneshot::Sender<Result<()>>>,
    reconnected: bool,
) -> Result<()> {
    let (client, mut connection) = cfg.connect(NoTls).await.map_err(pg)?;
    let (ntx, mut nrx) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(msg) = futures::StreamExt::next(&mut messages).await {
            match msg {
                Ok(AsyncMessage::Notification(n)) => {
                    if ntx.send(n.payload().to_owned()).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    let (channel, space, session) = match weak.upgrade() {
        Some(inner) => (inner.channel.clone(), inner.lock_space, inner.session),
        None => return Ok(()),
    };
    // This connection also holds the session's advisory lock (see
    // `mark_interrupted`); the server-side keepalives make a vanished host
    // release it within a minute.
    let listened = match client
        .batch_execute(&format!(
            "LISTEN {channel}; SET tcp_keepalives_idle = 20; \
             SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 4; {NEVER_IDLE_OUT}"
        ))
        .await
    {
        Ok(()) => client
            .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&space, &session])
            .await
            .map(|row| row.get::<_, bool>(0)),
        Err(e) => Err(e),
    };
    match listened {
        Ok(true) => {}
        Ok(false) => {
            // Another connection holds this session's lock: the previous
            // listening connection, not yet seen gone by the server (the
            // caller tries again), or a session of another schema in the
            // same lock space. Without the lock the other replicas would
            // take this one for dead and interrupt its runs.
            driver.abort();
            return Err(StoreError::unavailable(
                "another connection holds this store's session lock",
            ));
        }
        Err(e) => {
            driver.abort();
            return Err(pg(e));
        }
    }
    if let Some(tx) = ready.take() {
        let _ = tx.send(Ok(()));
    }
    if reconnected && let Some(inner) = weak.upgrade() {
        // Notices may have been missed while disconnected: make every
        // subscription re-read from the store.
        PgStore { inner }.nudge_all().await;
    }
    while let Some(payload) = nrx.recv().await {
        let Some(inner) = weak.upgrade() else {
            break;
        };
        if inner.closed.load(Ordering::Acquire) {
            break;
        }
        PgStore { inner }.on_notice(&payload).await;
    }
    driver.abort();
    drop(client);
    Ok(())
}

impl PgStore {
    /// How many times this store read committed events back to publish
    /// them to its subscribers: another replica's batches, and re-reads
    /// after a lost listening connection. Its own commits are published as
    /// they commit, never read back.
    pub fn ranges_read(&self) -> u64 {
        self.inner.ranges_read.load(Ordering::Relaxed)
    }
}

impl PgStore {
    /// The engines' hubs (usually one).
    fn hubs(&self) -> Vec<Arc<Hub>> {
        self.inner
            .hubs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Handles one notice: `A <key> <first> <last> <session>` (appended) or
    /// `D <key>` (deleted). This store's own appends are published when they
    /// commit (see `commit`): their notices are skipped, so nothing this
    /// process wrote is read back.
    async fn on_notice(&self, payload: &str) {
        let mut parts = payload.split(' ');
        let (Some(kind), Some(key)) = (parts.next(), parts.next()) else {
            return;
        };
        let targets: Vec<(String, String)> = {
            let mut watched = self.inner.watched.lock().unwrap_or_else(|p| p.into_inner());
            let Some(set) = watched.get_mut(key) else {
                return;
            };
            // Pairs no longer watched (and, for a delete, every pair) have
            // their instance looked up afresh when watched again.
            let mut forget = Vec::new();
            set.retain(|pair| {
                let keep = self
                    .hubs()
                    .iter()
                    .any(|h| h.has_listeners(&pair.0, &pair.1));
                if !keep || kind == "D" {
                    forget.push(pair.clone());
                }
                keep
            });
            let out: Vec<_> = set.iter().cloned().collect();
            if set.is_empty() {
                watched.remove(key);
            }
            if !forget.is_empty() {
                let mut instances = self
                    .inner
                    .instances
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                for pair in &forget {
                    instances.remove(pair);
                }
            }
            out
        };
        match kind {
            "D" => {
                for (tn, th) in targets {
                    for hub in self.hubs() {
                        hub.close_thread(&tn, &th);
                    }
                }
            }
            "A" => {
                let first = parts.next().and_then(|s| s.parse::<u64>().ok());
                let last = parts.next().and_then(|s| s.parse::<u64>().ok());
                let (Some(first), Some(last)) = (first, last) else {
                    return;
                };
                let from = parts.next().and_then(|s| s.parse::<i32>().ok());
                // A pair watched before its thread existed (or whose lookup
                // failed) has no instance yet: the thread appended to now
                // is the one its subscriptions read (see `nudge_all`).
                for pair in &targets {
                    self.learn_instance(pair).await;
                }
                if from == Some(self.inner.session) {
                    return;
                }
                for (tn, th) in targets {
                    self.publish_range(&tn, &th, first, last).await;
                }
            }
            _ => {}
        }
    }

    /// Reads `first..=last` and publishes it to the hub. A failed read is
    /// left to the subscribers' gap detection (the next batch re-reads).
    async fn publish_range(&self, tenant: &str, thread: &str, first: u64, last: u64) {
        self.inner.ranges_read.fetch_add(1, Ordering::Relaxed);
        let mut next = first;
        while next <= last {
            let want = usize::try_from(last - next + 1).unwrap_or(usize::MAX);
            let Ok(page) = self.read_page(tenant, thread, next, want).await else {
                return;
            };
            let events: Vec<StoredEvent> =
                page.events.into_iter().filter(|e| e.seq <= last).collect();
            let Some(end) = events.last().map(|e| e.seq) else {
                return;
            };
            next = end + 1;
            for hub in self.hubs() {
                hub.publish(tenant, thread, events.clone());
            }
        }
    }

    /// After a lost listening connection: a watched thread that is gone, or
    /// is another instance than the one first watched (deleted and written
    /// again while the notices were missed), has its subscriptions ended;
    /// each other one gets its latest event published, so a subscription
    /// that is behind sees a gap and catches up from the store.
    async fn nudge_all(&self) {
        let targets: Vec<(String, String)> = {
            let watched = self.inner.watched.lock().unwrap_or_else(|p| p.into_inner());
            watched.values().flatten().cloned().collect()
        };
        for (tn, th) in targets {
            let Ok(now) = self.instance(&tn, &th).await else {
                continue;
            };
            let key = (tn.clone(), th.clone());
            let first = {
                let mut instances = self
                    .inner
                    .instances
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                match (instances.get(&key).copied(), now) {
                    (None, Some(id)) => {
                        instances.insert(key, id);
                        None
                    }
                    (known, _) => known,
                }
            };
            match (first, now) {
                (Some(first), found) if found != Some(first) => {
                    self.inner
                        .instances
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&(tn.clone(), th.clone()));
                    for hub in self.hubs() {
                        hub.close_thread(&tn, &th);
                    }
                }
                _ => {
                    if let Ok(info) = self.thread_info(&tn, &th).await
                        && info.last_seq > 0
                    {
                        self.publish_range(&tn, &th, info.last_seq, info.last_seq)
                            .await;
                    }
                }
            }
        }
    }

    /// Records which instance of a watched thread exists now, unless one is
    /// recorded already.
    async fn learn_instance(&self, pair: &(String, String)) {
        let known = self
            .inner
            .instances
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(pair);
        if known {
            return;
        }
        if let Ok(Some(id)) = self.instance(&pair.0, &pair.1).await {
            self.inner
                .instances
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(pair.clone())
                .or_insert(id);
        }
    }

    /// The row id of a thread (which instance of it exists now), if any.
    async fn instance(&self, tenant: &str, thread: &str) -> Result<Option<i64>> {
        let c = self.conn().await?;
        let row = c
            .query_opt(
                "SELECT id FROM threads WHERE tenant = $1 AND thread = $2",
                &[&tenant.as_bytes(), &thread.as_bytes()],
            )
            .await
            .map_err(pg)?;
        row.map(|r| get(&r, 0)).transpose()
    }

    async fn thread_info(&self, tenant: &str, thread: &str) -> Result<ThreadInfo> {
        let c = self.conn().await?;
        let row = c
            .query_opt(
                &format!("SELECT {THREAD_COLUMNS} FROM threads WHERE tenant = $1 AND thread = $2"),
                &[&tenant.as_bytes(), &thread.as_bytes()],
            )
            .await
            .map_err(pg)?
            .ok_or_else(|| StoreError::not_found("thread"))?;
        thread_from_row(&row)
    }

    /// The head this process last saw of a thread, if any.
    fn known_head(&self, tenant: &str, thread: &str) -> Option<KnownHead> {
        let heads = self.inner.heads.lock().unwrap_or_else(|p| p.into_inner());
        heads.get(&(tenant.to_owned(), thread.to_owned())).cloned()
    }

    /// Remembers a thread's head after a write, unless a newer one is known.
    fn remember_head(&self, tenant: &str, thread: &str, id: i64, head: &ThreadHead) {
        let mut heads = self.inner.heads.lock().unwrap_or_else(|p| p.into_inner());
        let key = (tenant.to_owned(), thread.to_owned());
        if let Some((known_id, known)) = heads.get(&key)
            && *known_id == id
            && known.last_seq >= head.last_seq
        {
            return;
        }
        if heads.len() >= HEAD_KEYS {
            heads.clear();
        }
        heads.insert(key, (id, head.clone()));
    }

    fn forget_head(&self, tenant: &str, thread: &str) {
        let mut heads = self.inner.heads.lock().unwrap_or_else(|p| p.into_inner());
        heads.remove(&(tenant.to_owned(), thread.to_owned()));
    }

    /// Which of `runs` are runs of the thread.
    async fn existing_runs(
        &self,
        tenant: &str,
        thread: &str,
        runs: &[String],
    ) -> Result<Vec<String>> {
        let ids: Vec<&[u8]> = runs.iter().map(|r| r.as_bytes()).collect();
        let c = self.conn().await?;
        let rows = c
            .query(
                "SELECT r.run_id FROM runs r JOIN threads t ON t.id = r.thread_id \
                 WHERE t.tenant = $1 AND t.thread = $2 AND r.run_id = ANY($3)",
                &[&tenant.as_bytes(), &thread.as_bytes(), &ids],
            )
            .await
            .map_err(pg)?;
        rows.iter().map(|row| text(get(row, 0)?)).collect()
    }

    /// Maps an error of the append statement: a reused run id is `Invalid`
    /// naming the run ([`reused_run`]). A batch that starts one run names
    /// it; one that starts several asks which of them the thread has.
    async fn append_failed(
        &self,
        e: tokio_postgres::Error,
        tenant: &str,
        thread: &str,
        batch: &Batch,
    ) -> StoreError {
        if !is_reused_run(&e) {
            return pg(e);
        }
        let new: Vec<String> = batch
            .plan
            .runs
            .iter()
            .filter(|u| u.new)
            .map(|u| u.run_id.clone())
            .collect();
        let run = match new.as_slice() {
            [one] => Some(one.clone()),
            _ => match self.existing_runs(tenant, thread, &new).await {
                Ok(known) => new.into_iter().find(|r| known.contains(r)),
                Err(_) => None,
            },
        };
        reused_run(run.as_deref())
    }

    /// Commits a planned batch. The fast path writes over the head row
    /// this process last saw, when that is the head the batch was planned
    /// against, with one statement ([`APPEND_SQL`]) that checks the head
    /// under the row lock: one round trip. When this process knows no head
    /// for the thread, or the head moved (another writer, another replica),
    /// the slow path locks the head row in a transaction (creating it for a
    /// new thread), compares it with the batch's and writes under the lock,
    /// or reports the head as it is.
    async fn commit_batch(&self, tenant: &str, thread: &str, batch: &Batch) -> Result<Commit> {
        let now = batch.plan.received_at;
        let sync = batch.must_sync();
        let params = |id: i64| {
            AppendParams::new(
                id,
                &batch.head,
                &batch.plan,
                &batch.events,
                tenant,
                thread,
                batch.agent.as_deref(),
                sync,
                &self.inner.channel,
                self.inner.session,
            )
        };
        let known = self
            .known_head(tenant, thread)
            .filter(|(_, h)| *h == batch.head);
        if let Some((id, _)) = known {
            let params = params(id)?;
            let c = self.conn().await?;
            let st = c.prepare_cached(APPEND_SQL).await.map_err(pg)?;
            let rows = c.query(&st, &params.params()).await;
            drop(c);
            let rows = match rows {
                Ok(rows) => rows,
                Err(e) => return Err(self.append_failed(e, tenant, thread, batch).await),
            };
            if !rows.is_empty() {
                self.remember_head(tenant, thread, id, &batch.plan.head);
                return Ok(Commit::Done { durable: sync });
            }
            // The head moved since: take the slow path.
        }
        let mut c = self.conn().await?;
        let tx = c.transaction().await.map_err(pg)?;
        let lock = tx.prepare_cached(LOCK_HEAD_SQL).await.map_err(pg)?;
        let row = tx
            .query_one(&lock, &[&tenant.as_bytes(), &thread.as_bytes(), &now.0])
            .await
            .map_err(pg)?;
        let (id, head) = head_from_row(&row)?;
        if head != batch.head {
            // Rolled back on drop (a head row it created for a new thread
            // goes with it).
            drop(tx);
            if head.last_seq > 0 {
                self.remember_head(tenant, thread, id, &head);
            }
            return Ok(Commit::HeadMoved(head));
        }
        let params = params(id)?;
        let st = tx.prepare_cached(APPEND_SQL).await.map_err(pg)?;
        let rows = match tx.query(&st, &params.params()).await {
            Ok(rows) => rows,
            Err(e) => {
                // Rolled back on drop; the connection goes back first.
                drop(tx);
                drop(c);
                return Err(self.append_failed(e, tenant, thread, batch).await);
            }
        };
        if rows.is_empty() {
            return Err(StoreError::internal(
                "the thread's head changed under its lock",
            ));
        }
        tx.commit().await.map_err(pg)?;
        self.remember_head(tenant, thread, id, &batch.plan.head);
        Ok(Commit::Done { durable: sync })
    }
}

/// A thread's row id and head from a row of the head columns
/// (`head_columns!`). A row with no events yet (made by [`LOCK_HEAD_SQL`]
/// for a new thread) has the default head.
fn head_from_row(row: &tokio_postgres::Row) -> Result<KnownHead> {
    let id: i64 = get(row, 0)?;
    let last_seq = to_u64(get(row, 1)?)?;
    let last_run = match (get::<Option<Vec<u8>>>(row, 3)?, get::<Option<i16>>(row, 4)?) {
        (Some(r), Some(s)) => Some((text(r)?, status_from(s)?)),
        _ => None,
    };
    let head = ThreadHead {
        last_seq,
        updated_at: (last_seq > 0).then_some(Timestamp(get(row, 2)?)),
        last_run,
    };
    Ok((id, head))
}

#[async_trait]
impl Backend for PgStore {
    async fn head(&self, tenant: &str, thread: &str) -> Result<ThreadHead> {
        let c = self.conn().await?;
        let row = c
            .query_opt(
                concat!(
                    "SELECT ",
                    head_columns!(),
                    " FROM threads WHERE tenant = $1 AND thread = $2"
                ),
                &[&tenant.as_bytes(), &thread.as_bytes()],
            )
            .await
            .map_err(pg)?;
        drop(c);
        let Some(row) = row else {
            return Ok(ThreadHead::default());
        };
        let (id, head) = head_from_row(&row)?;
        if head.last_seq > 0 {
            self.remember_head(tenant, thread, id, &head);
        }
        Ok(head)
    }

    async fn known_runs(&self, tenant: &str, thread: &str, ids: &[String]) -> Result<Vec<String>> {
        self.existing_runs(tenant, thread, ids).await
    }

    async fn commit(&self, tenant: &str, thread: &str, batch: &Batch) -> Result<Commit> {
        if batch.events.is_empty() {
            return Err(StoreError::invalid("an append needs at least one event"));
        }
        // The engine publishes it once committed; its notice is skipped here.
        self.commit_batch(tenant, thread, batch).await
    }

    async fn read(
        &self,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<EventPage> {
        self.read_page(tenant, thread, from_seq, limit).await
    }

    async fn run(&self, tenant: &str, thread: &str, run_id: &str) -> Result<RunRecord> {
        let c = self.conn().await?;
        let row = c
            .query_opt(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs r JOIN threads t ON t.id = r.thread_id \
                     WHERE t.tenant = $1 AND t.thread = $2 AND r.run_id = $3"
                ),
                &[&tenant.as_bytes(), &thread.as_bytes(), &run_id.as_bytes()],
            )
            .await
            .map_err(pg)?
            .ok_or_else(|| StoreError::not_found("run"))?;
        run_from_row(&row)
    }

    async fn list_runs(&self, tenant: &str, filter: &RunFilter) -> Result<RunPage> {
        let after = filter.after()?;
        let limit = filter.page_size();
        let c = self.conn().await?;
        let (c_at, c_thread, c_seq) = match &after {
            Some(cur) => (
                Some(cur.started_at.0),
                Some(cur.thread_id.as_bytes()),
                Some(to_i64(cur.first_seq).unwrap_or(i64::MAX)),
            ),
            None => (None, None, None),
        };
        let thread = filter.thread_id.as_deref().map(str::as_bytes);
        let parent = filter.parent_run_id.as_deref().map(str::as_bytes);
        let status = filter.status.map(status_code);
        let from = filter.started_from.map(|t| t.0);
        let before = filter.started_before.map(|t| t.0);
        let fetch = limit as i64 + 1;
        let params: [&(dyn ToSql + Sync); 10] = [
            &tenant.as_bytes(),
            &thread,
            &parent,
            &status,
            &from,
            &before,
            &c_at,
            &c_thread,
            &c_seq,
            &fetch,
        ];
        let rows = c
            .query(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs r WHERE r.tenant = $1 \
                     AND ($2::bytea IS NULL OR r.thread = $2) \
                     AND ($3::bytea IS NULL OR r.parent_run_id = $3) \
                     AND ($4::smallint IS NULL OR r.status = $4) \
                     AND ($5::bigint IS NULL OR r.started_at >= $5) \
                     AND ($6::bigint IS NULL OR r.started_at < $6) \
                     AND ($7::bigint IS NULL OR (r.started_at, r.thread, r.first_seq) > \
                          ($7, $8::bytea, $9::bigint)) \
                     ORDER BY r.started_at, r.thread, r.first_seq LIMIT $10"
                ),
                &params,
            )
            .await
            .map_err(pg)?;
        let runs = rows.iter().map(run_from_row).collect::<Result<Vec<_>>>()?;
        Ok(run_page(runs, limit))
    }

    async fn thread(&self, tenant: &str, thread: &str) -> Result<ThreadInfo> {
        let info = self.thread_info(tenant, thread).await?;
        if info.last_seq == 0 {
            return Err(StoreError::not_found("thread"));
        }
        Ok(info)
    }

    async fn list_threads(&self, tenant: &str, filter: &ThreadFilter) -> Result<ThreadPage> {
        let after = filter.after()?;
        let limit = filter.page_size();
        let c = self.conn().await?;
        let (c_at, c_thread) = match &after {
            Some(cur) => (Some(cur.updated_at.0), Some(cur.thread_id.as_bytes())),
            None => (None, None),
        };
        let agent = filter.agent.as_deref().map(str::as_bytes);
        let fetch = limit as i64 + 1;
        let rows = c
            .query(
                &format!(
                    "SELECT {THREAD_COLUMNS} FROM threads WHERE tenant = $1 AND last_seq > 0 \
                     AND ($2::bytea IS NULL OR agent = $2) \
                     AND ($3::bigint IS NULL OR updated_at < $3 \
                          OR (updated_at = $3 AND thread > $4::bytea)) \
                     ORDER BY updated_at DESC, thread LIMIT $5"
                ),
                &[&tenant.as_bytes(), &agent, &c_at, &c_thread, &fetch],
            )
            .await
            .map_err(pg)?;
        let threads = rows
            .iter()
            .map(thread_from_row)
            .collect::<Result<Vec<_>>>()?;
        Ok(thread_page(threads, limit))
    }

    async fn delete_thread(&self, tenant: &str, thread: &str) -> Result<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await.map_err(pg)?;
        let gone = tx
            .query_opt(
                "DELETE FROM threads WHERE tenant = $1 AND thread = $2 RETURNING last_seq",
                &[&tenant.as_bytes(), &thread.as_bytes()],
            )
            .await
            .map_err(pg)?;
        match gone {
            Some(row) if get::<i64>(&row, 0)? > 0 => {}
            _ => return Err(StoreError::not_found("thread")),
        }
        let notice = format!("D {}", notice_key(tenant, thread));
        tx.execute("SELECT pg_notify($1, $2)", &[&self.inner.channel, &notice])
            .await
            .map_err(pg)?;
        tx.commit().await.map_err(pg)?;
        self.forget_head(tenant, thread);
        Ok(())
    }

    async fn rename_thread(&self, tenant: &str, from: &str, to: &str) -> Result<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await.map_err(pg)?;
        // Both rows locked in a fixed order (by id), so that two renames
        // cannot deadlock.
        let rows = tx
            .query(
                "SELECT thread, last_seq, id FROM threads \
                 WHERE tenant = $1 AND thread IN ($2, $3) ORDER BY id FOR UPDATE",
                &[&tenant.as_bytes(), &from.as_bytes(), &to.as_bytes()],
            )
            .await
            .map_err(pg)?;
        let mut source = None;
        let mut target: Option<i64> = None;
        for row in &rows {
            let name: Vec<u8> = get(row, 0)?;
            let last_seq: i64 = get(row, 1)?;
            if name == from.as_bytes() && last_seq > 0 {
                source = Some(get::<i64>(row, 2)?);
            }
            if name == to.as_bytes() {
                target = Some(last_seq);
            }
        }
        let Some(id) = source else {
            return Err(StoreError::not_found("thread"));
        };
        if from == to {
            return Ok(());
        }
        match target {
            Some(n) if n > 0 => return Err(StoreError::thread_exists(to)),
            // A head row without events (an append that failed): nothing
            // of it is visible; it gives way.
            Some(_) => {
                tx.execute(
                    "DELETE FROM threads WHERE tenant = $1 AND thread = $2",
                    &[&tenant.as_bytes(), &to.as_bytes()],
                )
                .await
                .map_err(pg)?;
            }
            None => {}
        }
        for sql in [
            "UPDATE threads SET thread = $2 WHERE id = $1",
            "UPDATE runs SET thread = $2 WHERE thread_id = $1",
        ] {
            tx.execute(sql, &[&id, &to.as_bytes()]).await.map_err(pg)?;
        }
        for id in [from, to] {
            let notice = format!("D {}", notice_key(tenant, id));
            tx.execute("SELECT pg_notify($1, $2)", &[&self.inner.channel, &notice])
                .await
                .map_err(pg)?;
        }
        tx.commit().await.map_err(pg)?;
        for id in [from, to] {
            self.forget_head(tenant, id);
        }
        Ok(())
    }

    async fn channels(&self, tenant: &str, thread: &str) -> Result<Vec<agui_store::Channel>> {
        let c = self.conn().await?;
        let rows = c
            .query(
                "SELECT c.agent, c.state, c.updated_at FROM channels c \
                 JOIN threads t ON t.id = c.thread_id \
                 WHERE t.tenant = $1 AND t.thread = $2 AND t.last_seq > 0 ORDER BY c.agent",
                &[&tenant.as_bytes(), &thread.as_bytes()],
            )
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|r| {
                Ok(agui_store::Channel {
                    agent: text(get(r, 0)?)?,
                    state: text(get(r, 1)?)?,
                    updated_at: Timestamp(get(r, 2)?),
                })
            })
            .collect()
    }

    async fn put_channel(
        &self,
        tenant: &str,
        thread: &str,
        channel: agui_store::Channel,
    ) -> Result<()> {
        let c = self.conn().await?;
        let n = c
            .execute(
                "INSERT INTO channels (thread_id, agent, state, updated_at) \
                 SELECT t.id, $3, $4, $5 FROM threads t \
                 WHERE t.tenant = $1 AND t.thread = $2 AND t.last_seq > 0 \
                 ON CONFLICT (thread_id, agent) DO UPDATE \
                 SET state = EXCLUDED.state, updated_at = EXCLUDED.updated_at",
                &[
                    &tenant.as_bytes(),
                    &thread.as_bytes(),
                    &channel.agent.as_bytes(),
                    &channel.state.as_bytes(),
                    &channel.updated_at.0,
                ],
            )
            .await
            .map_err(pg)?;
        if n == 0 {
            return Err(StoreError::not_found("thread"));
        }
        Ok(())
    }

    async fn tenants(&self) -> Result<Vec<String>> {
        let c = self.conn().await?;
        let rows = c
            .query(
                "SELECT DISTINCT tenant FROM threads WHERE last_seq > 0 ORDER BY tenant",
                &[],
            )
            .await
            .map_err(pg)?;
        rows.iter().map(|r| text(get(r, 0)?)).collect()
    }

    async fn load_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<Option<Vec<u8>>> {
        let c = self.conn().await?;
        let row = c
            .query_opt(
                "SELECT c.blob FROM threads t LEFT JOIN checkpoints c \
                 ON c.thread_id = t.id AND c.run_id = $3 \
                 WHERE t.tenant = $1 AND t.thread = $2 AND t.last_seq > 0",
                &[&tenant.as_bytes(), &thread.as_bytes(), &run_id.as_bytes()],
            )
            .await
            .map_err(pg)?
            .ok_or_else(|| StoreError::not_found("thread"))?;
        get(&row, 0)
    }

    async fn save_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
        blob: Vec<u8>,
    ) -> Result<()> {
        // The base a delta names is kept beside it, so that a restore
        // fetches the whole chain in one query (read from the start of the
        // blob alone: a hint the restore checks; a damaged chain takes the
        // shared path that repairs it).
        let base: Option<Vec<u8>> = checkpoint::base_run(&blob).map(String::into_bytes);
        let c = self.conn().await?;
        let n = c
            .execute(
                "INSERT INTO checkpoints (thread_id, run_id, blob, base_run) \
                 SELECT r.thread_id, r.run_id, $4, $5 FROM runs r \
                 JOIN threads t ON t.id = r.thread_id \
                 WHERE t.tenant = $1 AND t.thread = $2 AND r.run_id = $3 \
                 ON CONFLICT (thread_id, run_id) DO UPDATE \
                 SET blob = EXCLUDED.blob, base_run = EXCLUDED.base_run",
                &[
                    &tenant.as_bytes(),
                    &thread.as_bytes(),
                    &run_id.as_bytes(),
                    &blob,
                    &base,
                ],
            )
            .await
            .map_err(pg)?;
        if n == 0 {
            return Err(StoreError::not_found("run"));
        }
        Ok(())
    }

    fn attach_hub(&self, hub: Arc<Hub>) {
        self.inner
            .hubs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(hub);
    }

    fn watch(&self, tenant: &str, thread: &str) {
        self.inner
            .watched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(notice_key(tenant, thread))
            .or_default()
            .insert((tenant.to_owned(), thread.to_owned()));
        // Which instance of the thread is watched (see `nudge_all`), looked
        // up in the background (`watch` does not wait) unless known. The
        // entry of a thread nobody else listens to is dropped first: it is
        // what an earlier subscription followed, and the thread may have
        // been deleted and written again since (its notices missed while
        // the listening connection was down); the subscription starting
        // now reads the thread as it is now.
        let key = (tenant.to_owned(), thread.to_owned());
        let others: usize = self
            .hubs()
            .iter()
            .map(|h| h.listener_count(tenant, thread))
            .sum::<usize>()
            .saturating_sub(1);
        let known = {
            let mut instances = self
                .inner
                .instances
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if others == 0 {
                instances.remove(&key);
            }
            instances.contains_key(&key)
        };
        if !known && let Ok(rt) = tokio::runtime::Handle::try_current() {
            let store = self.clone();
            rt.spawn(async move { store.learn_instance(&key).await });
        }
    }

    /// Claims a thread in the `claims` table for this store's session,
    /// after dropping a claim whose session is gone (no connection holds its
    /// advisory lock any more).
    async fn claim_thread(&self, tenant: &str, thread: &str, run: &str) -> Result<Option<String>> {
        let c = self.conn().await?;
        let (t, th) = (tenant.as_bytes(), thread.as_bytes());
        for _ in 0..3 {
            c.execute(
                "WITH live AS (SELECT l.objid::bigint AS s FROM pg_locks l \
                   WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 \
                   AND l.classid::bigint = $3 AND l.database = \
                     (SELECT oid FROM pg_database WHERE datname = current_database())) \
                 DELETE FROM claims WHERE tenant = $1 AND thread = $2 AND owner <> $4 \
                   AND owner NOT IN (SELECT s FROM live)",
                &[
                    &t,
                    &th,
                    &i64::from(self.inner.lock_space),
                    &self.inner.session,
                ],
            )
            .await
            .map_err(pg)?;
            let inserted = c
                .execute(
                    "INSERT INTO claims (tenant, thread, run, owner) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (tenant, thread) DO NOTHING",
                    &[&t, &th, &run.as_bytes(), &self.inner.session],
                )
                .await
                .map_err(pg)?;
            if inserted == 1 {
                return Ok(None);
            }
            let holder = c
                .query_opt(
                    "SELECT run FROM claims WHERE tenant = $1 AND thread = $2",
                    &[&t, &th],
                )
                .await
                .map_err(pg)?;
            if let Some(row) = holder {
                let run: Vec<u8> = get(&row, 0)?;
                return Ok(Some(String::from_utf8_lossy(&run).into_owned()));
            }
            // Released meanwhile: try again.
        }
        Err(StoreError::unavailable(
            "the thread's claim keeps changing hands",
        ))
    }

    async fn release_thread(&self, tenant: &str, thread: &str, run: &str) -> Result<()> {
        let c = self.conn().await?;
        c.execute(
            "DELETE FROM claims WHERE tenant = $1 AND thread = $2 AND run = $3 AND owner = $4",
            &[
                &tenant.as_bytes(),
                &thread.as_bytes(),
                &run.as_bytes(),
                &self.inner.session,
            ],
        )
        .await
        .map_err(pg)?;
        Ok(())
    }

    /// Marks `running` runs `interrupted`, but only those whose owner is
    /// gone: no owner recorded, this very store (the caller is starting up),
    /// or a session whose advisory lock no connection holds any more (its
    /// process exited or lost the database), and returns them. Runs that
    /// live replicas are streaming are left alone (and not returned).
    async fn mark_interrupted(&self) -> Result<Vec<(String, RunRecord)>> {
        self.interrupt_runs_of_gone_owners(true).await
    }

    async fn mark_interrupted_elsewhere(&self) -> Result<Vec<(String, RunRecord)>> {
        self.interrupt_runs_of_gone_owners(false).await
    }

    /// Replicas share the database: runs of one that is gone turn up while
    /// the others run, for their sweep.
    fn shared(&self) -> bool {
        true
    }

    async fn ready(&self) -> Result<()> {
        let c = self.conn().await?;
        c.simple_query("SELECT 1").await.map_err(pg)?;
        Ok(())
    }

    async fn stats(&self) -> Result<StoreStats> {
        let c = self.conn().await?;
        let row = c
            .query_one(
                "SELECT (SELECT count(DISTINCT tenant) FROM threads WHERE last_seq > 0), \
                 (SELECT count(*) FROM threads WHERE last_seq > 0), \
                 (SELECT count(*) FROM runs), \
                 (SELECT COALESCE(sum(last_seq), 0)::bigint FROM threads), \
                 (SELECT COALESCE(sum(bytes), 0)::bigint FROM threads), \
                 (SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint \
                    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                    WHERE n.nspname = $1 AND c.relkind IN ('r', 'm'))",
                &[&self.inner.schema],
            )
            .await
            .map_err(pg)?;
        Ok(StoreStats {
            tenants: to_u64(get(&row, 0)?)?,
            threads: to_u64(get(&row, 1)?)?,
            runs: to_u64(get(&row, 2)?)?,
            events: to_u64(get(&row, 3)?)?,
            raw_bytes: to_u64(get(&row, 4)?)?,
            stored_bytes: to_u64(get(&row, 5)?)?,
        })
    }

    /// One round trip: the run, its checkpoint and its bases'.
    async fn checkpoint_chain(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<CheckpointChain> {
        let c = self.conn().await?;
        let st = c.prepare_cached(RESTORE_SQL).await.map_err(pg)?;
        let rows = c
            .query(
                &st,
                &[
                    &tenant.as_bytes(),
                    &thread.as_bytes(),
                    &run_id.as_bytes(),
                    &MAX_CHAIN,
                ],
            )
            .await
            .map_err(pg)?;
        drop(c);
        let Some(first) = rows.first() else {
            // Say which is missing, the thread or the run.
            self.run(tenant, thread, run_id).await?;
            return Err(StoreError::not_found("run"));
        };
        let status = status_from(get(first, 0)?)?;
        let last_seq = to_u64(get(first, 1)?)?;
        let mut links = Vec::with_capacity(rows.len());
        for row in &rows {
            if let (Some(run), Some(blob)) =
                (get::<Option<&[u8]>>(row, 2)?, get::<Option<&[u8]>>(row, 3)?)
            {
                links.push((text(run.to_vec())?, blob.to_vec().into()));
            }
        }
        Ok(CheckpointChain {
            status,
            last_seq,
            links,
        })
    }

    async fn flush(&self) -> Result<()> {
        // A synchronous commit that writes flushes the WAL up to it, and with
        // it every earlier asynchronous commit.
        let c = self.conn().await?;
        c.batch_execute(
            "BEGIN; SET LOCAL synchronous_commit = on; \
             UPDATE flushes SET at = at + 1 WHERE id = 1; COMMIT;",
        )
        .await
        .map_err(pg)
    }

    async fn close(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let flushed = self.flush().await;
        self.inner.closed.store(true, Ordering::Release);
        if let Some(task) = self
            .inner
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            task.abort();
        }
        self.inner.pool.close();
        flushed
    }
}

impl PgStore {
    /// Bookkeeping of the other sessions with `running` runs (`owners`):
    /// which are gone and may be taken, whether a run has no owner recorded,
    /// and whether some look gone but may yet come back. A session is gone
    /// once it has been lockless for [`GONE_GRACE`], or at once when none
    /// of its connections is left and this store never saw it live (a
    /// process that ended before this store looked, as at a restart), unless
    /// the database server itself restarted within the grace (then a live
    /// replica has lost its connections too, and is reconnecting).
    fn gone_owners(&self, owners: &[Owner]) -> (Vec<i32>, bool, bool) {
        let (mut ripe, mut ownerless, mut waiting) = (Vec::new(), false, false);
        let now = std::time::Instant::now();
        let mut seen = self
            .inner
            .sessions_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let seen = &mut *seen;
        let mut listed = HashSet::new();
        for o in owners {
            let Some(session) = o.session else {
                ownerless = true;
                continue;
            };
            listed.insert(session);
            if o.live {
                seen.seen_live.insert(session);
                seen.gone_since.remove(&session);
                continue;
            }
            let since = *seen.gone_since.entry(session).or_insert(now);
            let unseen_and_absent =
                !o.present && !o.young_server && !seen.seen_live.contains(&session);
            if unseen_and_absent || now.duration_since(since) >= GONE_GRACE {
                ripe.push(session);
            } else {
                waiting = true;
            }
        }
        seen.gone_since.retain(|s, _| listed.contains(s));
        seen.seen_live.retain(|s| listed.contains(s));
        (ripe, ownerless, waiting)
    }

    /// `mark_interrupted` (`include_own`: at start-up, this store's runs
    /// too, and the call waits until every other session that may yet come
    /// back is gone or back; see [`PgStore::gone_owners`]) and
    /// `mark_interrupted_elsewhere` (while it runs: never this store's own
    /// runs, the same rule across calls): the runs marked, with their
    /// tenants, as they now stand. One statement marks and returns them, so of two
    /// replicas sweeping at once only one gets each run. Neither takes the
    /// runs of a live replica whose listening connection (and with it its
    /// lock) is reconnecting.
    async fn interrupt_runs_of_gone_owners(
        &self,
        include_own: bool,
    ) -> Result<Vec<(String, RunRecord)>> {
        const LIVE: &str = "live AS (SELECT l.objid::bigint AS s FROM pg_locks l \
               WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 \
               AND l.classid::bigint = $1 AND l.database = \
                 (SELECT oid FROM pg_database WHERE datname = current_database()))";
        const PRESENT: &str = "present AS (SELECT l.objid::bigint AS s FROM pg_locks l \
               WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
               AND l.classid::bigint = $1 AND l.database = \
                 (SELECT oid FROM pg_database WHERE datname = current_database()))";
        /// How long a start-up call waits at most for sessions that look
        /// gone: past it, those not yet ripe are left to the running sweep.
        const START_UP_WAIT: Duration = Duration::from_secs(10);
        let c = self.conn().await?;
        let space = i64::from(self.inner.lock_space);
        let began = std::time::Instant::now();
        let (ripe, ownerless) = loop {
            // Which other owners of running runs look gone now: one cheap
            // read (running runs are indexed), and nothing more when none.
            let rows = c
                .query(
                    &format!(
                        "WITH {LIVE}, {PRESENT} SELECT DISTINCT r.owner, \
                         COALESCE(r.owner IN (SELECT s FROM live), false), \
                         COALESCE(r.owner IN (SELECT s FROM present), false), \
                         now() - pg_postmaster_start_time() < make_interval(secs => $3) \
                         FROM runs r WHERE r.status = 0 \
                         AND (r.owner IS NULL OR r.owner <> $2)"
                    ),
                    &[&space, &self.inner.session, &GONE_GRACE.as_secs_f64()],
                )
                .await
                .map_err(pg)?;
            let mut owners = Vec::with_capacity(rows.len());
            for row in &rows {
                owners.push(Owner {
                    session: get(row, 0)?,
                    live: get(row, 1)?,
                    present: get(row, 2)?,
                    young_server: get(row, 3)?,
                });
            }
            let (ripe, ownerless, waiting) = self.gone_owners(&owners);
            if !include_own || !waiting || began.elapsed() >= START_UP_WAIT {
                break (ripe, ownerless);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        if !include_own && ripe.is_empty() && !ownerless {
            return Ok(Vec::new());
        }
        let now = Timestamp::now().0;
        let rows = c
            .query(
                &format!(
                    "WITH {LIVE}, \
                     x AS (UPDATE runs r SET status = 3, finished_at = $2 WHERE r.status = 0 \
                       AND (r.owner IS NULL \
                         OR ($3 AND r.owner = $4) \
                         OR (r.owner = ANY($5) AND r.owner <> $4 \
                           AND r.owner NOT IN (SELECT s FROM live))) \
                       RETURNING r.tenant AS run_tenant, {RUN_COLUMNS}), \
                     y AS (UPDATE threads t SET last_run_status = 3 FROM x \
                       WHERE t.id = x.thread_id AND t.last_run = x.run_id \
                       AND t.last_run_status = 0) \
                     SELECT * FROM x"
                ),
                &[&space, &now, &include_own, &self.inner.session, &ripe],
            )
            .await
            .map_err(pg)?;
        let mut marked = Vec::with_capacity(rows.len());
        for row in &rows {
            let tenant = text(get(row, 0)?)?;
            marked.push((tenant, run_from_row_at(row, 1)?));
        }
        // Last-run statuses changed: plan against fresh heads.
        self.inner
            .heads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        Ok(marked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_schema_and_connection() {
        let o = PgOptions::from_url("postgres://u@h:5432/db?schema=s_1").unwrap();
        assert_eq!(
            (o.conn.as_str(), o.schema.as_str()),
            ("postgres://u@h:5432/db", "s_1")
        );
        let o = PgOptions::from_url("postgresql://u@h/db?connect_timeout=3&schema=x").unwrap();
        assert_eq!(o.conn, "postgresql://u@h/db?connect_timeout=3");
        assert_eq!(o.schema, "x");
        assert_eq!(
            PgOptions::from_url("postgres://h/db").unwrap().schema,
            DEFAULT_SCHEMA
        );
        for bad in [
            "postgres://h/db?schema=a;DROP",
            "postgres://h/db?schema=",
            "postgres://h/db?schema=a\"b",
            "sqlite://x",
        ] {
            let e = PgOptions::from_url(bad).unwrap_err();
            assert_eq!(e.kind(), agui_store::ErrorKind::Invalid, "{bad}");
        }
    }

    /// Options for a test's store in a schema of its own (`prefix`, the
    /// process id, the time) under `AGUI_TEST_POSTGRES_URL`, with
    /// `pool_size` connections. `None` (the test is skipped) when the
    /// variable is unset, except under CI, where that is a failure.
    fn test_options(prefix: &str, pool_size: usize) -> Option<PgOptions> {
        let url = match std::env::var("AGUI_TEST_POSTGRES_URL") {
            Ok(url) if !url.is_empty() => url,
            _ => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "AGUI_TEST_POSTGRES_URL is not set, and CI is"
                );
                eprintln!("notice: AGUI_TEST_POSTGRES_URL is not set; skipping");
                return None;
            }
        };
        let mut o = PgOptions::from_url(&url).unwrap();
        o.schema = format!("{prefix}_{}_{}", std::process::id(), Timestamp::now().0);
        o.pool_size = pool_size;
        Some(o)
    }

    /// An owner with no connection left, never seen live, is gone at once,
    /// unless the database server restarted within the grace (its
    /// connections went with the restart): then it gets the grace, and a
    /// live one seen again keeps its runs.
    #[tokio::test]
    async fn an_absent_owner_gets_the_grace_when_the_server_just_restarted() {
        let Some(o) = test_options("agui_y", 2) else {
            return;
        };
        let store = PgStore::open_with(o).await.unwrap();
        let owner = |session, live, young_server| Owner {
            session: Some(session),
            live,
            present: false,
            young_server,
        };
        assert_eq!(
            store.gone_owners(&[owner(901, false, false)]),
            (vec![901], false, false),
            "a process that ended: taken at once"
        );
        assert_eq!(
            store.gone_owners(&[owner(902, false, true)]),
            (vec![], false, true),
            "after a restart: waits"
        );
        assert_eq!(
            store.gone_owners(&[owner(902, true, false)]),
            (vec![], false, false),
            "back: kept"
        );
        store.close().await.unwrap();
    }

    /// A call that finds every pooled connection taken waits at most
    /// `pool_wait`, then fails as `Unavailable`; a freed connection serves
    /// the next call.
    #[tokio::test]
    async fn a_starved_pool_fails_after_the_wait_bound() {
        let Some(mut o) = test_options("agui_w", 1) else {
            return;
        };
        o.pool_wait = Duration::from_millis(150);
        let store = PgStore::open_with(o.clone()).await.unwrap();
        let held = store.conn().await.unwrap();
        let started = std::time::Instant::now();
        let e = store.conn().await.unwrap_err();
        assert_eq!(e.kind(), agui_store::ErrorKind::Unavailable, "{e}");
        assert!(started.elapsed() >= Duration::from_millis(150));
        drop(held);
        let _freed = store
            .conn()
            .await
            .expect("the freed connection serves the next call");
        let (client, conn) = tokio_postgres::connect(&o.conn, NoTls).await.unwrap();
        tokio::spawn(conn);
        client
            .batch_execute(&format!("DROP SCHEMA \"{}\" CASCADE", o.schema))
            .await
            .unwrap();
    }

    /// A database left at schema version 1 (one row per event, plain and
    /// zstd bodies) opens, is migrated, reads back exactly, and appends on.
    #[tokio::test]
    async fn a_version_1_database_is_migrated_on_open() {
        let Some(o) = test_options("agui_m", 2) else {
            return;
        };
        let (client, conn) = tokio_postgres::connect(&o.conn, NoTls).await.unwrap();
        tokio::spawn(conn);
        let schema = o.schema.clone();
        client
            .batch_execute(&format!(
                "CREATE SCHEMA \"{schema}\"; SET search_path = \"{schema}\"; \
                 CREATE TABLE schema_version (version INT NOT NULL); \
                 INSERT INTO schema_version VALUES (1);"
            ))
            .await
            .unwrap();
        client.batch_execute(schema::MIGRATIONS[0]).await.unwrap();
        let texts = [
            r#"{"type":"CUSTOM","name":"a","value":1}"#.to_owned(),
            format!(
                r#"{{"type":"CUSTOM","name":"b","value":"{}","x":1}}"#,
                "long text ".repeat(300)
            ),
            r#"{"type":"RUN_STARTED","threadId":"x","runId":"r1"}"#.to_owned(),
        ];
        let id: i64 = client
            .query_one(
                "INSERT INTO threads (tenant, thread, created_at, updated_at, last_seq, \
                 run_count, bytes, last_run, last_run_status) \
                 VALUES ('t'::bytea, 'x'::bytea, 5, 5, 3, 1, $1, 'r1'::bytea, 0) RETURNING id",
                &[&(texts.iter().map(|t| t.len()).sum::<usize>() as i64)],
            )
            .await
            .unwrap()
            .get(0);
        client
            .execute(
                "INSERT INTO runs VALUES ($1, 'r1'::bytea, 't'::bytea, 'x'::bytea, NULL, NULL, \
                 0, 5, NULL, 3, 3, 1, $2)",
                &[&id, &(texts[2].len() as i64)],
            )
            .await
            .unwrap();
        for (i, t) in texts.iter().enumerate() {
            let (codec, body): (i16, Vec<u8>) = if i == 1 {
                (1, zstd::bulk::compress(t.as_bytes(), 1).unwrap())
            } else {
                (0, t.as_bytes().to_vec())
            };
            client
                .execute(
                    "INSERT INTO events VALUES ($1, $2, 5, $3, $4)",
                    &[&id, &(i as i64 + 1), &codec, &body],
                )
                .await
                .unwrap();
        }
        let store = agui_store::Store::new(PgStore::open_with(o).await.unwrap());
        let page = store.read("t", "x", 1, 100).await.unwrap();
        let got: Vec<&str> = page.events.iter().map(|e| e.event.json()).collect();
        assert_eq!(got, texts.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(
            page.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let end =
            Event::from_json(r#"{"type":"RUN_FINISHED","threadId":"x","runId":"r1"}"#).unwrap();
        let a = store
            .append(
                "t",
                "x",
                agui_store::AppendRequest::new(vec![end]).expect_seq(3),
            )
            .await
            .unwrap();
        assert_eq!((a.first_seq, a.last_seq), (4, 4));
        assert_eq!(store.read("t", "x", 2, 100).await.unwrap().events.len(), 3);
        let run = store.run("t", "x", "r1").await.unwrap();
        assert_eq!((run.status, run.event_count), (RunStatus::Finished, 2));
        let restored = store.restore("t", "x", "r1").await.unwrap();
        assert_eq!(restored.last_seq, 4);
        let v: i32 = client
            .query_one("SELECT max(version) FROM schema_version", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(v as usize, schema::MIGRATIONS.len());
        store.close().await.unwrap();
        client
            .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .await
            .unwrap();
    }

    #[test]
    fn a_connection_strings_own_options_are_kept_before_the_search_path() {
        let cfg = connection_config(
            "postgres://u@h/db?options=-c%20statement_timeout%3D5s&application_name=app",
            "s1",
        )
        .unwrap();
        assert_eq!(
            cfg.get_options(),
            Some("-c statement_timeout=5s -c search_path=s1")
        );
        assert_eq!(cfg.get_application_name(), Some("app"));
        let cfg = connection_config("postgres://u@h/db", "s2").unwrap();
        assert_eq!(cfg.get_options(), Some("-c search_path=s2"));
        assert_eq!(cfg.get_application_name(), Some("agui"));
        let e = connection_config("postgres://u@h/db?sslmode=nonsense", "s").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid);
    }

    #[test]
    fn lock_spaces_spread_over_the_whole_positive_range() {
        let spaces: std::collections::HashSet<i32> = (0..64)
            .map(|i| session_lock_space(&format!("schema_{i}")))
            .collect();
        assert!(spaces.iter().all(|s| *s >= 0));
        // Before the fix, about half of all schemas got space 0.
        assert!(spaces.len() > 60, "{spaces:?}");
    }

    #[test]
    fn notice_keys_separate_tenant_from_thread() {
        assert_ne!(notice_key("ab", "c"), notice_key("a", "bc"));
        assert_eq!(notice_key("a", "b"), notice_key("a", "b"));
        assert_eq!(notice_key("a", "b").len(), 24);
    }
}
