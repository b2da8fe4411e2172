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

/// Creates the schema of a new database, or upgrades a schema-1 one (its
/// batches copied into the schema-2 table, in one transaction: a crash
/// leaves schema 1 whole). `Unsupported` for any other version.
fn create_or_upgrade(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(SCHEMA)
        .map_err(|e| map(e, "create the schema"))?;
    let version: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(map(e, "read the schema version")),
        })?;
    // Added by schema 3 to a table of before (any file of schema 1 or 2).
    let has_base_run = conn
        .prepare("SELECT 1 FROM pragma_table_info('checkpoints') WHERE name = 'base_run'")
        .and_then(|mut st| st.exists([]))
        .map_err(|e| map(e, "read the schema"))?;
    let base_run = if has_base_run { "" } else { BASE_RUN };
    let (before, after) = match version.as_deref() {
        Some(VERSION) => return Ok(()),
        None => ("", ""),
        Some(VERSION_2) => {
            let sql = format!(
                "BEGIN IMMEDIATE; {base_run}
                 UPDATE meta SET value = '{VERSION}' WHERE key = 'schema'; COMMIT;"
            );
            return conn.execute_batch(&sql).map_err(|e| {
                let _ = conn.execute_batch("ROLLBACK");
                map(e, "upgrade the schema")
            });
        }
        // Schema 2's table is created once schema 1's is renamed away.
        Some(VERSION_1) => (
            "ALTER TABLE chunks RENAME TO chunks_1;",
            "INSERT INTO chunks SELECT thread_id, first_seq, last_seq, received_at, codec,
                 raw_len, crc, data FROM chunks_1 ORDER BY thread_id, first_seq;
             DROP TABLE chunks_1;",
        ),
        Some(_) => {
            return Err(StoreError::new(
                ErrorKind::Unsupported,
                "the database was written by another version of the store",
            ));
        }
    };
    let sql = format!(
        "BEGIN IMMEDIATE; {base_run} {before} {CHUNKS} {after}
         INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', '{VERSION}'); COMMIT;"
    );
    conn.execute_batch(&sql).map_err(|e| {
        let _ = conn.execute_batch("ROLLBACK");
        map(e, "create or upgrade the schema")
    })
}

/// Opens a connection with the store's pragmas. `write` connections create
/// the file and the schema.
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
        create_or_upgrade(&conn)?;
    }
    conn.pragma_update(None, "cache_size", -32_768)
        .map_err(|e| map(e, "be opened"))?;
    Ok(conn)
}

/// Checks that `path` is an existing agui database, without creating or
/// changing anything: `NotFound` when there is no file or no agui schema in
/// it, `Unsupported` when another version of the store wrote it.
/// `Ok(true)` when the file has schema 3's `checkpoints.base_run`.
pub fn probe_read_only(path: &Path) -> Result<bool, StoreError> {
    if !path.is_file() {
        return Err(StoreError::new(
            ErrorKind::NotFound,
            "no SQLite database at this path",
        ));
    }
    let conn = connect(path, false)?;
    let version: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .map(Some)
        .or_else(|e| match &e {
            rusqlite::Error::SqliteFailure(_, Some(msg)) if msg.contains("no such table") => {
                Ok(None)
            }
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            _ => Err(map(e, "read the schema version")),
        })?;
    match version.as_deref() {
        None => Err(StoreError::new(
            ErrorKind::NotFound,
            "the SQLite database holds no agui store",
        )),
        Some(VERSION) => Ok(true),
        Some(VERSION_2 | VERSION_1) => Ok(false),
        Some(_) => Err(StoreError::new(
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
    use std::error::Error as _;

    /// The text of `err` and of each of its causes.
    fn chain(err: &StoreError) -> Vec<String> {
        let mut all = vec![err.to_string()];
        let mut cause = err.source();
        while let Some(c) = cause {
            all.push(c.to_string());
            cause = c.source();
        }
        all
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
}
