//! A database of schema 1 (batches in a `WITHOUT ROWID` table, bodies
//! without type codes) opens read-only as it is, and a writer's open
//! upgrades it to the current schema (3) in place: every event reads back unchanged,
//! appends go on, and the file shrinks once batches are stored the new way.

use agui_store::sample::{full_run, realistic_run};
use agui_store::{AppendRequest, Store};
use agui_store_sqlite::SqliteStore;
use rusqlite::{Connection, params};

const T: &str = "t";

fn texts(events: &[agui_store::StoredEvent]) -> Vec<String> {
    events.iter().map(|e| e.event.json().to_owned()).collect()
}

/// Rewrites a schema-2 database as schema 1 wrote it: the `WITHOUT ROWID`
/// table, and each body re-framed without type codes (codec 0, or 1 when
/// zstd level 1 saves an eighth), as the store of before wrote them.
fn downgrade_to_schema_1(path: &std::path::Path) {
    let c = Connection::open(path).unwrap();
    // One schema-1 row per stored batch (a packed row holds several):
    // (thread, first, last, received_at, untyped body).
    let mut rows: Vec<(i64, i64, i64, i64, Vec<u8>)> = Vec::new();
    {
        let mut st = c
            .prepare(
                "SELECT thread_id, first_seq, last_seq, received_at, codec, raw_len, crc, data
                 FROM chunks",
            )
            .unwrap();
        type Stored = (i64, i64, i64, i64, i64, i64, i64, Vec<u8>);
        let all: Vec<Stored> = st
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                ))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for (thread, first, last, at, codec, len, crc, data) in all {
            let n = (last - first + 1) as u64;
            let d = agui_store::frame::decode_timed(codec, Some(len), Some(crc), data, n).unwrap();
            let batches = if d.batches.is_empty() {
                vec![(n as u32, agui_store::Timestamp(at))]
            } else {
                d.batches
            };
            let mut events = d.events.iter();
            let mut seq = first;
            for (k, at) in batches {
                let mut body = Vec::new();
                for e in events.by_ref().take(k as usize) {
                    body.extend_from_slice(&(e.len_bytes() as u32).to_le_bytes());
                    body.extend_from_slice(e.json().as_bytes());
                }
                rows.push((thread, seq, seq + i64::from(k) - 1, at.0, body));
                seq += i64::from(k);
            }
        }
    }
    c.execute_batch(
        "DROP TABLE chunks;
         CREATE TABLE chunks (
            thread_id INTEGER NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
            received_at INTEGER NOT NULL, codec INTEGER NOT NULL, raw_len INTEGER NOT NULL,
            crc INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (thread_id, first_seq)
         ) WITHOUT ROWID;
         ALTER TABLE checkpoints DROP COLUMN base_run;
         UPDATE meta SET value = 'agui-store-sqlite/1' WHERE key = 'schema';",
    )
    .unwrap();
    for (thread, first, last, at, body) in rows {
        let crc = i64::from(crc32fast::hash(&body));
        let z = zstd::bulk::compress(&body, 1).unwrap();
        let (codec, data) = if z.len() < body.len() - body.len() / 8 {
            (1i64, z)
        } else {
            (0, body.clone())
        };
        c.execute(
            "INSERT INTO chunks VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![thread, first, last, at, codec, body.len() as i64, crc, data],
        )
        .unwrap();
    }
}

fn schema(path: &std::path::Path) -> (String, String) {
    let c = Connection::open(path).unwrap();
    let version = c
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .unwrap();
    let sql = c
        .query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'chunks'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    (version, sql)
}

#[tokio::test]
async fn a_schema_1_database_reads_as_it_is_and_a_writer_upgrades_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let s = Store::new(SqliteStore::open_path(&path).await.unwrap());
    let mut parent = None;
    for k in 0..5 {
        let run = format!("r{k}");
        let mut events = realistic_run("th", &run, parent.as_deref(), 300);
        if k == 4 {
            // An event of a type the codec has no code for.
            events.insert(
                1,
                agui_store::sample::event(serde_json::json!({"type":"MY_OWN","x":1})),
            );
        }
        for batch in events.chunks(37) {
            s.append(T, "th", AppendRequest::new(batch.to_vec()))
                .await
                .unwrap();
        }
        parent = Some(run);
    }
    let want = texts(&s.read_range(T, "th", 1, u64::MAX).await.unwrap());
    let restored = s.restore(T, "th", "r4").await.unwrap().json;
    s.close().await.unwrap();
    drop(s);

    downgrade_to_schema_1(&path);
    assert_eq!(schema(&path).0, "agui-store-sqlite/1");

    // Read-only: as it is, nothing changed.
    let r = Store::new(SqliteStore::open_read_only(&path).await.unwrap());
    assert_eq!(
        texts(&r.read_range(T, "th", 1, u64::MAX).await.unwrap()),
        want
    );
    r.close().await.unwrap();
    drop(r);
    let (version, sql) = schema(&path);
    assert_eq!(version, "agui-store-sqlite/1");
    assert!(sql.contains("WITHOUT ROWID"), "{sql}");

    // A writer upgrades.
    let s = Store::new(SqliteStore::open_path(&path).await.unwrap());
    let (version, sql) = schema(&path);
    assert_eq!(version, "agui-store-sqlite/3");
    assert!(!sql.contains("WITHOUT ROWID"), "{sql}");
    assert_eq!(
        texts(&s.read_range(T, "th", 1, u64::MAX).await.unwrap()),
        want
    );
    assert_eq!(s.restore(T, "th", "r4").await.unwrap().json, restored);
    // Old rows and new ones side by side.
    let more = full_run("th", "r5", Some("r4"), "more");
    let n_more = more.len();
    s.append(T, "th", AppendRequest::new(more)).await.unwrap();
    let after = texts(&s.read_range(T, "th", 1, u64::MAX).await.unwrap());
    assert_eq!(&after[..want.len()], &want[..]);
    assert_eq!(after.len(), want.len() + n_more);
    let report = agui_store::check::check_store(&s, |_| {}).await.unwrap();
    assert!(report.is_clean(), "{:?}", report.damage);
    assert_eq!(report.events, after.len() as u64);
    s.close().await.unwrap();
}

/// Where the child process of [`the_upgrade_is_atomic_under_kills`] finds
/// its database.
const CHILD_DB: &str = "AGUI_UPGRADE_CHILD_DB";

/// The child of [`the_upgrade_is_atomic_under_kills`]: opens its database
/// for writing (which upgrades it), says when it starts and how long the
/// open took, and exits. Does nothing when run on its own.
#[tokio::test]
#[ignore = "a child process of the_upgrade_is_atomic_under_kills"]
async fn upgrade_child() {
    let Ok(path) = std::env::var(CHILD_DB) else {
        return;
    };
    println!("opening");
    let t = std::time::Instant::now();
    let s = SqliteStore::open_path(std::path::Path::new(&path))
        .await
        .unwrap();
    println!("opened {}", t.elapsed().as_micros());
    drop(s);
}

/// Starts the child on `db`; returns it once it is about to open.
fn start_child(db: &std::path::Path) -> (std::process::Child, impl std::io::BufRead) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "upgrade_child", "--ignored", "--nocapture"])
        .env(CHILD_DB, db)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let status = child.wait();
        panic!("the child has no stdout: {status:?}");
    };
    let mut out = std::io::BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            let status = child.wait();
            panic!("the child ended before opening: {status:?}");
        }
        if line.trim() == "opening" {
            return (child, out);
        }
    }
}

/// A writer's open upgrades schema 1 in one transaction. Killed (SIGKILL)
/// at random moments of that open, the database is left either as schema
/// 1, whole (the batches table as schema 1 made it, every event readable),
/// or as schema 2, whole; never in between. The next writer's open then
/// upgrades it, with every event read back unchanged and the store clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_is_atomic_under_kills() {
    const KILLS: usize = 24;
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.db");
    let s = Store::new(SqliteStore::open_path(&base).await.unwrap());
    let mut parent: Option<String> = None;
    for k in 0..40 {
        let run = format!("r{k}");
        let events = realistic_run("th", &run, parent.as_deref(), 400);
        for batch in events.chunks(3) {
            s.append(T, "th", AppendRequest::new(batch.to_vec()))
                .await
                .unwrap();
        }
        parent = Some(run);
    }
    let want = texts(&s.read_range(T, "th", 1, u64::MAX).await.unwrap());
    s.close().await.unwrap();
    drop(s);
    downgrade_to_schema_1(&base);

    let work = dir.path().join("work.db");
    let fresh_copy = || {
        for ext in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{ext}", work.display()));
        }
        std::fs::copy(&base, &work).unwrap();
    };
    // How long an upgrade takes here, uninterrupted.
    fresh_copy();
    let (mut child, mut out) = start_child(&work);
    let mut line = String::new();
    use std::io::BufRead;
    out.read_line(&mut line).unwrap();
    let took: u64 = line
        .trim()
        .strip_prefix("opened ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the child said {line:?}"));
    assert!(child.wait().unwrap().success());
    assert_eq!(schema(&work).0, "agui-store-sqlite/3");

    // Kills spread over three times that, from the moment the child opens.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let (mut left_1, mut left_2) = (0, 0);
    for i in 0..KILLS {
        fresh_copy();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = seed % (3 * took.max(1000));
        let (mut child, _out) = start_child(&work);
        std::thread::sleep(std::time::Duration::from_micros(delay));
        let _ = child.kill();
        child.wait().unwrap();
        // The database as the kill left it (a plain connection recovers the
        // WAL, as any next open would).
        let (version, sql) = schema(&work);
        match version.as_str() {
            "agui-store-sqlite/1" => {
                assert!(sql.contains("WITHOUT ROWID"), "kill {i}: {sql}");
                let r = Store::new(SqliteStore::open_read_only(&work).await.unwrap());
                let got = texts(&r.read_range(T, "th", 1, u64::MAX).await.unwrap());
                assert!(got == want, "kill {i}: schema 1 lost events");
                r.close().await.unwrap();
                left_1 += 1;
            }
            "agui-store-sqlite/3" => {
                assert!(!sql.contains("WITHOUT ROWID"), "kill {i}: {sql}");
                left_2 += 1;
            }
            other => panic!("kill {i} after {delay} µs left schema {other:?}"),
        }
        let s = Store::new(SqliteStore::open_path(&work).await.unwrap());
        assert_eq!(schema(&work).0, "agui-store-sqlite/3", "kill {i}");
        let got = texts(&s.read_range(T, "th", 1, u64::MAX).await.unwrap());
        assert!(got == want, "kill {i}: events differ after the upgrade");
        let report = agui_store::check::check_store(&s, |_| {}).await.unwrap();
        assert!(report.is_clean(), "kill {i}: {:?}", report.damage);
        s.close().await.unwrap();
    }
    println!(
        "upgrade of {} events took {took} µs; {KILLS} kills left schema 1 {left_1} times, schema 2 {left_2} times",
        want.len()
    );
    assert!(
        left_1 > 0 && left_2 > 0,
        "kills should land before and after the upgrade's commit (schema 1: {left_1}, schema 2: {left_2})"
    );
}

/// A schema-2 file (no `checkpoints.base_run`) restores read-only as it is
/// (each run's own checkpoint read, the chain walked link by link); a
/// writer's open adds the column, and restores go on giving the same text.
#[tokio::test]
async fn a_schema_2_database_restores_read_only_and_a_writer_upgrades_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.db");
    let s = Store::new(SqliteStore::open_path(&path).await.unwrap());
    let mut parent: Option<String> = None;
    for r in 0..12 {
        let run = format!("r{r}");
        let events = realistic_run("th", &run, parent.as_deref(), 40);
        s.append(T, "th", AppendRequest::new(events)).await.unwrap();
        parent = Some(run);
    }
    s.flush().await.unwrap();
    let want = s.restore(T, "th", "r11").await.unwrap().json;
    s.close().await.unwrap();
    let c = Connection::open(&path).unwrap();
    let deltas: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM checkpoints WHERE base_run IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(deltas > 0, "the chain has deltas");
    c.execute_batch(
        "ALTER TABLE checkpoints DROP COLUMN base_run;
         UPDATE meta SET value = 'agui-store-sqlite/2' WHERE key = 'schema';",
    )
    .unwrap();
    drop(c);
    let r = Store::new(SqliteStore::open_read_only(&path).await.unwrap());
    let got = r.restore(T, "th", "r11").await.unwrap();
    assert_eq!(got.json, want);
    r.close().await.unwrap();
    let s = Store::new(SqliteStore::open_path(&path).await.unwrap());
    assert_eq!(schema(&path).0, "agui-store-sqlite/3");
    let got = s.restore(T, "th", "r11").await.unwrap();
    assert_eq!(got.json, want);
    assert!(got.from_checkpoint);
    s.close().await.unwrap();
}
