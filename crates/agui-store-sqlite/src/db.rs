//! Connections, schema and native error mapping.

use std::path::Path;
use std::time::Duration;

use agui_store::{ErrorKind, RunStatus, StoreError};
use rusqlite::{Connection, OpenFlags, ffi};

/// The schema. Ids are BLOBs (exact bytes: NUL and any Unicode round-trip).
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS threads (
    id              INTEGER PRIMARY KEY,
    tenant          BLOB NOT NULL,
    thread          BLOB NOT NULL,
    agent           BLOB,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    last_seq        INTEGER NOT NULL,
    bytes           INTEGER NOT NULL,
    run_count       INTEGER NOT NULL,
    last_run        BLOB,
    last_run_status INTEGER,
    UNIQUE (tenant, thread)
);
CREATE INDEX IF NOT EXISTS threads_by_activity ON threads (tenant, updated_at DESC, thread);
CREATE INDEX IF NOT EXISTS threads_by_agent ON threads (tenant, agent, updated_at DESC, thread);
CREATE TABLE IF NOT EXISTS runs (
    thread_id     INTEGER NOT NULL,
    run_id        BLOB NOT NULL,
    tenant        BLOB NOT NULL,
    parent_run_id BLOB,
    agent         BLOB,
    status        INTEGER NOT NULL,
    started_at    INTEGER NOT NULL,
    finished_at   INTEGER,
    first_seq     INTEGER NOT NULL,
    last_seq      INTEGER NOT NULL,
    event_count   INTEGER NOT NULL,
    bytes         INTEGER NOT NULL,
    PRIMARY KEY (thread_id, run_id)
);
CREATE INDEX IF NOT EXISTS runs_by_seq ON runs (thread_id, first_seq);
CREATE INDEX IF NOT EXISTS runs_by_parent ON runs (tenant, parent_run_id);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (tenant, started_at);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status) WHERE status = 0;
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id INTEGER NOT NULL,
    run_id    BLOB NOT NULL,
    blob      BLOB NOT NULL,
    base_run  BLOB,
    PRIMARY KEY (thread_id, run_id)
);
CREATE TABLE IF NOT EXISTS channels (
    thread_id  INTEGER NOT NULL,
    agent      BLOB NOT NULL,
    state      BLOB NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (thread_id, agent)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

/// The schema version this code writes. Schema 3 has schema 2's tables,
/// with the base run a delta checkpoint names kept beside its blob
/// (`checkpoints.base_run`, so a restore reads the whole chain in one
/// query); its chunk rows may be packed frames
/// (`agui_store::frame::PACKED`, see `pack.rs`), which a schema-2 reader
/// would take for damage, so the version tells an older binary that it
/// cannot read the file instead.
const VERSION: &str = "agui-store-sqlite/3";
/// Schema 2: the tables of schema 3 but for `checkpoints.base_run`, no
/// packed rows (read as it is; a writer's open adds the column, empty for
/// the blobs stored before: their restores take the shared path, which
/// walks the chain link by link).
const VERSION_2: &str = "agui-store-sqlite/2";
/// Schema 1, still read and upgraded by a writer's open.
const VERSION_1: &str = "agui-store-sqlite/1";

/// The batches (one row per frame of `agui_store::frame`), since schema 2: a rowid
/// table with a unique index. Schema 1 made it `WITHOUT ROWID`, where a row
/// of more than about 1 KB (a 4 KiB page's index-leaf limit) spills into an
/// overflow page of its own: a 1.7 KB compressed batch took about 4.5 KB on
/// disk. A rowid table keeps rows of up to about 4 KB in its leaf pages.
const CHUNKS: &str = "
CREATE TABLE chunks (
    thread_id   INTEGER NOT NULL,
    first_seq   INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL,
    received_at INTEGER NOT NULL,
    codec       INTEGER NOT NULL,
    raw_len     INTEGER NOT NULL,
    crc         INTEGER NOT NULL,
    data        BLOB NOT NULL
);
CREATE UNIQUE INDEX chunks_by_seq ON chunks (thread_id, first_seq);
";

/// What schemas 1 and 2 lack of schema 3's tables.
const BASE_RUN: &str = "ALTER TABLE checkpoints ADD COLUMN base_run BLOB;";

/// The tables and indexes [`SCHEMA`] creates (no `chunks`: [`CHUNKS`] is
/// created in the transaction that writes the schema row).
const SCHEMA_NAMES: [&str; 11] = [
    "threads",
    "threads_by_activity",
    "threads_by_agent",
    "runs",
    "runs_by_seq",
    "runs_by_parent",
    "runs_by_time",
    "runs_by_status",
    "checkpoints",
    "channels",
    "meta",
];

/// The tables and indexes of [`CHUNKS`].
const CHUNKS_NAMES: [&str; 2] = ["chunks", "chunks_by_seq"];

/// Why a database is not opened as an agui store although it is an SQLite
/// database. The public message of the [`StoreError`] it becomes is this
/// error's text (no SQL, no path), and the error stays its source, so a
/// caller can tell the two apart by downcasting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotAStore {
    /// The database has tables of its own and no agui schema row: another
    /// application's database (a writer refuses it; nothing is changed).
    /// `Invalid`.
    #[error(
        "the file is an SQLite database of another application \
         (it has tables and no agui schema); refusing to write into it"
    )]
    Foreign,
    /// The database has agui's tables but its schema row is missing or
    /// cannot be read (a damaged `meta` table or index). `Corrupt`.
    #[error(
        "the SQLite database has agui's tables but its schema version is missing \
         or unreadable: the store is damaged"
    )]
    Damaged,
}

impl From<NotAStore> for StoreError {
    fn from(e: NotAStore) -> StoreError {
        let kind = match e {
            NotAStore::Foreign => ErrorKind::Invalid,
            NotAStore::Damaged => ErrorKind::Corrupt,
        };
        StoreError::new(kind, e.to_string()).with_source(e)
    }
}

/// What an SQLite database holds, as far as the store is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Found {
    /// No table, index, view or trigger (a new or 0-byte file).
    Empty,
    /// Some of [`SCHEMA`]'s tables, all empty, and nothing else: a first
    /// open of an older binary, which created them outside the
    /// transaction that writes the schema row, stopped half-way.
    Unfinished,
    /// An agui store of this schema version.
    Store(String),
    /// See [`NotAStore`].
    Not(NotAStore),
}

/// The version of an agui schema row: only texts of this store count.
fn agui_version(value: rusqlite::types::Value) -> Option<String> {
    match value {
        rusqlite::types::Value::Text(v) if v.starts_with("agui-store-sqlite/") => Some(v),
        _ => None,
    }
}

/// Looks at what the database holds, reading only (run before anything is
/// written to it). A damaged schema table or a file that is not an SQLite
/// database is an error (`Corrupt`, from [`map`]).
fn inspect(conn: &Connection) -> Result<Found, StoreError> {
    let names: Vec<(String, String)> = conn
        .prepare("SELECT type, name FROM sqlite_master WHERE substr(name, 1, 7) <> 'sqlite_'")
        .and_then(|mut st| {
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()
        })
        .map_err(|e| map(e, "read the schema"))?;
    if names.is_empty() {
        return Ok(Found::Empty);
    }
    let table = |t: &str| names.iter().any(|(ty, n)| ty == "table" && n == t);
    if table("meta") {
        let version = conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get::<_, rusqlite::types::Value>(0)
            })
            .map(agui_version)
            .or_else(|e| match &e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                // Another application's `meta` table, with other columns.
                rusqlite::Error::SqliteFailure(f, _)
                | rusqlite::Error::SqlInputError { error: f, .. }
                    if f.code == ffi::ErrorCode::Unknown =>
                {
                    Ok(None)
                }
                _ => Err(map(e, "read the schema version")),
            })?;
        if let Some(v) = version {
            return Ok(Found::Store(v));
        }
    }
    let ours = |n: &str| SCHEMA_NAMES.contains(&n) || CHUNKS_NAMES.contains(&n);
    if names.iter().any(|(_, n)| !ours(n)) {
        return Ok(Found::Not(NotAStore::Foreign));
    }
    if table("threads") && table("runs") && table("chunks") {
        return Ok(Found::Not(NotAStore::Damaged));
    }
    if names
        .iter()
        .any(|(_, n)| CHUNKS_NAMES.contains(&n.as_str()))
    {
        return Ok(Found::Not(NotAStore::Foreign));
    }
    // Only tables of SCHEMA's names: a creation stopped half-way when each
    // is empty and has SCHEMA's columns (`checkpoints` may lack `base_run`,
    // as before schema 3).
    let reference = Connection::open_in_memory()
        .and_then(|r| r.execute_batch(SCHEMA).map(|()| r))
        .map_err(|e| map(e, "read the schema"))?;
    for (ty, n) in &names {
        if ty != "table" {
            continue;
        }
        let mut have = columns(conn, n)?;
        let mut want = columns(&reference, n)?;
        if n == "checkpoints" && !have.iter().any(|c| c == "base_run") {
            want.retain(|c| c != "base_run");
        }
        have.sort();
        want.sort();
        // `n` is one of SCHEMA_NAMES: no quoting needed.
        let rows: bool = conn
            .query_row(&format!("SELECT EXISTS (SELECT 1 FROM \"{n}\")"), [], |r| {
                r.get(0)
            })
            .map_err(|e| map(e, "read the schema"))?;
        if have != want || rows {
            return Ok(Found::Not(NotAStore::Foreign));
        }
    }
    Ok(Found::Unfinished)
}

/// The column names of `table`.
fn columns(conn: &Connection, table: &str) -> Result<Vec<String>, StoreError> {
    conn.prepare("SELECT name FROM pragma_table_info(?1)")
        .and_then(|mut st| {
            st.query_map([table], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()
        })
        .map_err(|e| map(e, "read the schema"))
}

/// True when `checkpoints` has schema 3's `base_run`.
fn has_base_run(conn: &Connection) -> Result<bool, StoreError> {
    conn.prepare("SELECT 1 FROM pragma_table_info('checkpoints') WHERE name = 'base_run'")
        .and_then(|mut st| st.exists([]))
        .map_err(|e| map(e, "read the schema"))
}

/// Runs `sql` in one `BEGIN IMMEDIATE` transaction, rolled back on error.
fn in_transaction(conn: &Connection, sql: &str, doing: &str) -> Result<(), StoreError> {
    conn.execute_batch(&format!("BEGIN IMMEDIATE; {sql} COMMIT;"))
        .map_err(|e| {
            let _ = conn.execute_batch("ROLLBACK");
            map(e, doing)
        })
}

/// Creates the schema of a new database (tables, indexes and schema row in
/// one transaction), or upgrades a schema-1 one (its batches copied into
/// the schema-2 table, in one transaction: a crash leaves schema 1 whole).
/// `found` is what [`inspect`] found in it; `Unsupported` for a version of
/// the store this code does not know.
fn create_or_upgrade(conn: &Connection, found: Found) -> Result<(), StoreError> {
    let version = match found {
        Found::Not(not) => return Err(not.into()),
        Found::Empty | Found::Unfinished => {
            // An unfinished file of an older binary may lack `base_run`:
            // the column is added in the same transaction.
            let create = || -> Result<(), StoreError> {
                conn.execute_batch(SCHEMA)
                    .map_err(|e| map(e, "create the schema"))?;
                let base_run = if has_base_run(conn)? { "" } else { BASE_RUN };
                conn.execute_batch(&format!(
                    "{base_run} {CHUNKS}
                     INSERT INTO meta (key, value) VALUES ('schema', '{VERSION}');"
                ))
                .map_err(|e| map(e, "create the schema"))
            };
            conn.execute_batch("BEGIN IMMEDIATE")
                .map_err(|e| map(e, "create the schema"))?;
            return match create() {
                Ok(()) => conn
                    .execute_batch("COMMIT")
                    .map_err(|e| map(e, "create the schema")),
                Err(e) => {
                    let _ = conn.execute_batch("ROLLBACK");
                    Err(e)
                }
            };
        }
        Found::Store(v) => v,
    };
    if !matches!(version.as_str(), VERSION | VERSION_2 | VERSION_1) {
        return Err(StoreError::new(
            ErrorKind::Unsupported,
            "the database was written by another version of the store",
        ));
    }
    // Indexes a file of before may lack (each statement a no-op otherwise).
    conn.execute_batch(SCHEMA)
        .map_err(|e| map(e, "create the schema"))?;
    // Added by schema 3 to a table of before (any file of schema 1 or 2).
    let base_run = if has_base_run(conn)? { "" } else { BASE_RUN };
    match version.as_str() {
        VERSION => Ok(()),
        VERSION_2 => in_transaction(
            conn,
            &format!("{base_run} UPDATE meta SET value = '{VERSION}' WHERE key = 'schema';"),
            "upgrade the schema",
        ),
        // Schema 2's table is created once schema 1's is renamed away.
        _ => in_transaction(
            conn,
            &format!(
                "{base_run} ALTER TABLE chunks RENAME TO chunks_1; {CHUNKS}
                 INSERT INTO chunks SELECT thread_id, first_seq, last_seq, received_at, codec,
                     raw_len, crc, data FROM chunks_1 ORDER BY thread_id, first_seq;
                 DROP TABLE chunks_1;
                 UPDATE meta SET value = '{VERSION}' WHERE key = 'schema';"
            ),
            "upgrade the schema",
        ),
    }
}

/// Refuses, before the store takes its lock beside the file, an existing
/// database that is another application's or a damaged store: a refused
/// open then leaves nothing behind. Anything else (no file, an empty one,
/// an agui store, an error reading it) is left to the writer's open, which
/// inspects the file again under the lock. The connection reads only; it
/// is a read-write one (creating nothing) so that, in a WAL-mode file, it
/// removes the `-wal` and `-shm` files its read made when it closes, as a
/// read-only one could not.
pub fn refuse_foreign(path: &Path) -> Result<(), StoreError> {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > 0) {
        return Ok(());
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let Ok(conn) = Connection::open_with_flags(path, flags) else {
        return Ok(());
    };
    if conn.busy_timeout(Duration::from_secs(30)).is_err() {
        return Ok(());
    }
    match inspect(&conn) {
        Ok(Found::Not(not)) => Err(not.into()),
        _ => Ok(()),
    }
}

/// Opens a connection with the store's pragmas. `write` connections create
/// the file and the schema; they refuse a database that holds something
/// else ([`NotAStore`]) before changing anything in it (the WAL mode
/// included).
pub fn connect(path: &Path, write: bool) -> Result<Connection, StoreError> {
    let flags = if write {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(path, flags).map_err(|e| map(e, "be opened"))?;
    conn.busy_timeout(Duration::from_secs(30))
        .map_err(|e| map(e, "be opened"))?;
    conn.set_prepared_statement_cache_capacity(64);
    if write {
        let found = inspect(&conn)?;
        if let Found::Not(not) = found {
            return Err(not.into());
        }
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| map(e, "be opened"))?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| map(e, "be opened"))?;
        // Each request of a group commit runs in a savepoint; past 64 KiB
        // of changed pages SQLite spills a savepoint's journal to a new
        // temporary file (create, unlink, write: about four times a second
        // under the gateway's paced load bench). In memory it is a copy.
        conn.pragma_update(None, "temp_store", "MEMORY")
            .map_err(|e| map(e, "be opened"))?;
        create_or_upgrade(&conn, found)?;
    }
    conn.pragma_update(None, "cache_size", -32_768)
        .map_err(|e| map(e, "be opened"))?;
    Ok(conn)
}

/// Checks that `path` is an existing agui database, without creating or
/// changing anything: `NotFound` when there is no file or no agui store in
/// it (an empty database, another application's), `Corrupt` when it has
/// agui's tables but no readable schema row ([`NotAStore::Damaged`]),
/// `Unsupported` when another version of the store wrote it.
/// `Ok(true)` when the file has schema 3's `checkpoints.base_run`.
pub fn probe_read_only(path: &Path) -> Result<bool, StoreError> {
    if !path.is_file() {
        return Err(StoreError::new(
            ErrorKind::NotFound,
            "no SQLite database at this path",
        ));
    }
    let conn = connect(path, false)?;
    match inspect(&conn)? {
        Found::Empty | Found::Unfinished | Found::Not(NotAStore::Foreign) => Err(StoreError::new(
            ErrorKind::NotFound,
            "the SQLite database holds no agui store",
        )),
        Found::Not(not) => Err(not.into()),
        Found::Store(v) if v == VERSION => Ok(true),
        Found::Store(v) if v == VERSION_2 || v == VERSION_1 => Ok(false),
        Found::Store(_) => Err(StoreError::new(
            ErrorKind::Unsupported,
            "the database was written by another version of the store",
        )),
    }
}

/// Maps a native error onto the portable kinds. The public message says
/// what was being done; the native error (SQL, paths) stays in `source`.
pub fn map(err: rusqlite::Error, doing: &str) -> StoreError {
    let kind = match &err {
        rusqlite::Error::SqliteFailure(e, _) => match e.code {
            ffi::ErrorCode::DatabaseCorrupt | ffi::ErrorCode::NotADatabase => ErrorKind::Corrupt,
            ffi::ErrorCode::DatabaseBusy
            | ffi::ErrorCode::DatabaseLocked
            | ffi::ErrorCode::DiskFull
            | ffi::ErrorCode::SystemIoFailure
            | ffi::ErrorCode::CannotOpen
            | ffi::ErrorCode::ReadOnly
            | ffi::ErrorCode::PermissionDenied
            | ffi::ErrorCode::OutOfMemory
            | ffi::ErrorCode::FileLockingProtocolFailed => ErrorKind::Unavailable,
            ffi::ErrorCode::TooBig => ErrorKind::Invalid,
            _ => ErrorKind::Internal,
        },
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => ErrorKind::Corrupt,
        _ => ErrorKind::Internal,
    };
    // rusqlite shows the whole statement in an input error's text: the
    // source keeps SQLite's code and message only, so no chain of causes
    // (the CLI prints them) shows SQL.
    let err = match err {
        rusqlite::Error::SqlInputError { error, msg, .. } => {
            rusqlite::Error::SqliteFailure(error, Some(msg))
        }
        e => e,
    };
    StoreError::new(kind, format!("the store could not {doing}")).with_source(err)
}

/// Status as stored.
pub fn status_code(s: RunStatus) -> i64 {
    i64::from(s.code())
}

/// Status from its stored code.
pub fn status_from(code: i64) -> Result<RunStatus, StoreError> {
    RunStatus::from_code(code)
}

/// A stored id (BLOB) back to a string.
pub fn text(bytes: Vec<u8>) -> Result<String, StoreError> {
    String::from_utf8(bytes).map_err(|_| StoreError::corrupt("a stored id is not UTF-8"))
}

/// A stored count back to `u64`.
pub fn count(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::corrupt("a stored count is negative"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of `err` and of each of its causes.
    fn chain(err: &StoreError) -> Vec<String> {
        agui_store::conformance::error_texts(err)
    }

    #[test]
    fn no_text_of_a_mapped_error_shows_the_sql() {
        let conn = Connection::open_in_memory().unwrap();
        let native = conn
            .execute_batch("CREATE TABLE a (x); CREATE TABLE a (x);")
            .unwrap_err();
        assert!(native.to_string().contains("CREATE TABLE"), "{native}");
        let err = map(native, "create the schema");
        assert_eq!(
            err.to_string(),
            "internal: the store could not create the schema"
        );
        let texts = chain(&err);
        assert!(texts.len() > 1, "the native error stays the source");
        for text in texts {
            assert!(!text.contains("CREATE"), "{text}");
        }
    }

    #[test]
    fn a_first_open_an_older_binary_left_half_done_is_finished() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("half.db");
        // An older binary ran SCHEMA's statements one by one and stopped
        // after the first table and its indexes, before the schema row.
        let first: Vec<&str> = SCHEMA.split(';').take(3).collect();
        Connection::open(&path)
            .unwrap()
            .execute_batch(&first.join(";"))
            .unwrap();
        let conn = connect(&path, true).unwrap();
        let version: String = conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(version, VERSION);
        assert!(has_base_run(&conn).unwrap());
        drop(conn);
        assert!(probe_read_only(&path).unwrap());
    }

    #[test]
    fn a_meta_table_of_another_application_is_not_an_agui_schema() {
        let dir = tempfile::tempdir().unwrap();
        for (i, sql) in [
            "CREATE TABLE meta (k TEXT, v TEXT)",
            "CREATE TABLE meta (key TEXT, value TEXT); INSERT INTO meta VALUES ('schema', 'v5')",
        ]
        .iter()
        .enumerate()
        {
            let path = dir.path().join(format!("{i}.db"));
            Connection::open(&path).unwrap().execute_batch(sql).unwrap();
            let err = connect(&path, true).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
            assert_eq!(
                probe_read_only(&path).unwrap_err().kind(),
                ErrorKind::NotFound
            );
        }
    }
}
