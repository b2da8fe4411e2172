//! What a store's open does with an SQLite file that is not (or no longer
//! readably) an agui store: another application's database is refused by a
//! writer with nothing changed in it, a store whose schema row is lost or
//! unreadable is damage (`Corrupt`), never "no store", and no message of
//! any of these errors, causes included, shows SQL.

use std::error::Error as _;
use std::path::Path;

use agui_store::sample::run_started;
use agui_store::{AppendRequest, ErrorKind, Store, StoreError};
use agui_store_sqlite::{NotAStore, SqliteStore};

/// The error's text and every cause's, as the CLI prints them.
fn chain(err: &StoreError) -> Vec<String> {
    agui_store::conformance::error_texts(err)
}

fn assert_no_sql(err: &StoreError) {
    for text in chain(err) {
        for word in ["CREATE", "INSERT", "SELECT", "COMMIT", "BEGIN"] {
            assert!(!text.contains(word), "SQL in an error message: {text}");
        }
    }
}

async fn open_err(path: &Path) -> StoreError {
    match SqliteStore::open_path(path).await {
        Ok(_) => panic!("opened {} as a store", path.display()),
        Err(e) => e,
    }
}

async fn open_read_only_err(path: &Path) -> StoreError {
    match SqliteStore::open_read_only(path).await {
        Ok(_) => panic!("opened {} read-only as a store", path.display()),
        Err(e) => e,
    }
}

fn not_a_store(err: &StoreError) -> Option<NotAStore> {
    err.source()?.downcast_ref::<NotAStore>().copied()
}

/// Every file in `dir`, with a checksum of its bytes.
fn files(dir: &Path) -> Vec<(String, u32)> {
    let mut all: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                crc32fast::hash(&std::fs::read(e.path()).unwrap()),
            )
        })
        .collect();
    all.sort();
    all
}

/// A store with one run in it, closed (its WAL copied back).
async fn a_store(path: &Path) {
    let store = Store::new(SqliteStore::open_path(path).await.unwrap());
    store
        .append(
            "t",
            "th",
            AppendRequest::new(vec![run_started("th", "r", None)]),
        )
        .await
        .unwrap();
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_writer_refuses_another_applications_database_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE users (id INTEGER, name TEXT);
             INSERT INTO users VALUES (1, 'ann');",
        )
        .unwrap();
    }
    let before = files(dir.path());
    let err = open_err(&path).await;
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert_eq!(
        err.message(),
        "the file is an SQLite database of another application \
         (it has tables and no agui schema); refusing to write into it"
    );
    assert_eq!(not_a_store(&err), Some(NotAStore::Foreign));
    assert_no_sql(&err);
    // Byte for byte: no tables, no WAL switch, no WAL, shm or lock file.
    assert_eq!(files(dir.path()), before);
    let c = rusqlite::Connection::open(&path).unwrap();
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
    drop(c);
    // Read-only, it holds no store.
    let err = open_read_only_err(&path).await;
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}

#[tokio::test]
async fn a_writer_refuses_another_applications_wal_database_and_leaves_nothing_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE users (id INTEGER, name TEXT);
             INSERT INTO users VALUES (1, 'ann');",
        )
        .unwrap();
    }
    let before = files(dir.path());
    assert_eq!(before.len(), 1, "{before:?}");
    let err = open_err(&path).await;
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert_eq!(not_a_store(&err), Some(NotAStore::Foreign));
    assert_eq!(files(dir.path()), before);
}

#[tokio::test]
async fn an_empty_sqlite_file_becomes_a_store() {
    let dir = tempfile::tempdir().unwrap();
    // 0 bytes, and an SQLite database without a table.
    let zero = dir.path().join("zero.db");
    std::fs::write(&zero, b"").unwrap();
    let bare = dir.path().join("bare.db");
    rusqlite::Connection::open(&bare)
        .unwrap()
        .execute_batch("PRAGMA user_version = 7")
        .unwrap();
    assert!(std::fs::metadata(&bare).unwrap().len() > 0);
    for path in [zero, bare] {
        a_store(&path).await;
        let store = Store::new(SqliteStore::open_read_only(&path).await.unwrap());
        assert_eq!(
            store
                .read_range("t", "th", 1, u64::MAX)
                .await
                .unwrap()
                .len(),
            1
        );
        // And it opens again as the store it is.
        a_store_again(&path).await;
    }
}

async fn a_store_again(path: &Path) {
    let store = Store::new(SqliteStore::open_path(path).await.unwrap());
    assert_eq!(
        store
            .read_range("t", "th", 1, u64::MAX)
            .await
            .unwrap()
            .len(),
        1
    );
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_chunks_table_without_a_schema_row_is_refused_without_sql() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other-app.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE chunks (x)")
        .unwrap();
    let before = files(dir.path());
    let err = open_err(&path).await;
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert_eq!(not_a_store(&err), Some(NotAStore::Foreign));
    assert!(err.message().contains("another application"), "{err}");
    assert_no_sql(&err);
    assert_eq!(files(dir.path()), before);
}

#[tokio::test]
async fn a_store_whose_schema_row_is_lost_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("real.db");
    a_store(&path).await;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("DELETE FROM meta")
        .unwrap();
    let err = open_read_only_err(&path).await;
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert_eq!(not_a_store(&err), Some(NotAStore::Damaged));
    assert!(err.message().contains("damaged"), "{err}");
    let before = files(dir.path());
    let err = open_err(&path).await;
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert_eq!(not_a_store(&err), Some(NotAStore::Damaged));
    assert_no_sql(&err);
    // The database unchanged, nothing new beside it (the read-only open's
    // `-wal` and `-shm` may be gone).
    let after = files(dir.path());
    assert!(after.iter().all(|f| before.contains(f)), "{after:?}");
    assert!(after.iter().any(|(n, _)| n == "real.db"));
}

#[tokio::test]
async fn a_damaged_index_of_the_meta_table_is_damage_not_a_missing_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    a_store(&path).await;
    // The autoindex of `meta` holds the key 'schema' alone (record header
    // 3, text of 6 bytes, then the text): one flipped bit in its last
    // byte, and the lookup by key finds no row.
    let mut bytes = std::fs::read(&path).unwrap();
    let needle = b"\x03\x19\tschema";
    let at = bytes
        .windows(needle.len())
        .rposition(|w| w == needle)
        .expect("the meta index entry");
    bytes[at + 8] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let err = open_read_only_err(&path).await;
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    let err = open_err(&path).await;
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert_no_sql(&err);
}
