//! `agui store check` on every durable backend (intact, then damaged), the
//! read-only commands that never create a store, the one-writer lock of
//! `agui serve`, and the exit codes shared by every command.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use agui_store::sample::full_run;

mod common;
use common::{PgSchema, Server, postgres_url, serve};

fn agui(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agui"))
        .args(args)
        .env_remove("AGUI_DATA_DIR")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agui runs");
    if let Some(bytes) = stdin {
        child.stdin.take().unwrap().write_all(bytes).unwrap();
    }
    child.wait_with_output().expect("agui finishes")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Two threads of two runs each, as NDJSON.
fn stream() -> Vec<u8> {
    let mut out = Vec::new();
    for thread in ["alpha", "beta"] {
        let mut events = full_run(thread, &format!("{thread}-1"), None, "hello there");
        events.extend(full_run(
            thread,
            &format!("{thread}-2"),
            Some(&format!("{thread}-1")),
            "and again",
        ));
        for e in events {
            out.extend_from_slice(e.json().as_bytes());
            out.push(b'\n');
        }
    }
    out
}

fn import(url: &str) {
    let out = agui(&["store", "import", "--store", url], Some(&stream()));
    assert!(out.status.success(), "import: {}", text(&out.stderr));
}

fn check(url: &str) -> (Option<i32>, String) {
    let out = agui(&["store", "check", "--store", url], None);
    (out.status.code(), text(&out.stdout) + &text(&out.stderr))
}

fn assert_clean(url: &str) {
    let (code, out) = check(url);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("checked 1 tenant(s), 2 thread(s)"), "{out}");
    assert!(
        out.contains("4 run index entries, 4 checkpoint(s)"),
        "{out}"
    );
    assert!(out.ends_with("no damage found\n"), "{out}");
}

/// `--defer-checkpoints` stores none (the check notes them missing, no
/// damage); without it every run gets its checkpoint on import.
#[test]
fn import_with_deferred_checkpoints_stores_none() {
    let dir = tempfile::tempdir().unwrap();
    for (db, flag, checkpoints) in [("d.db", true, 0), ("b.db", false, 4)] {
        let url = format!("sqlite://{}", dir.path().join(db).display());
        let mut args = vec!["store", "import", "--store", &url];
        if flag {
            args.push("--defer-checkpoints");
        }
        let out = agui(&args, Some(&stream()));
        assert!(out.status.success(), "import: {}", text(&out.stderr));
        let (code, out) = check(&url);
        assert_eq!(code, Some(0), "{out}");
        assert!(
            out.contains(&format!("4 run index entries, {checkpoints} checkpoint(s)")),
            "{out}"
        );
        assert_eq!(
            out.contains("4 note(s) (missing or stale checkpoints"),
            flag,
            "{out}"
        );
    }
}

#[test]
fn check_finds_a_damaged_chunk_and_checkpoint_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let url = format!("sqlite://{}", db.display());
    import(&url);
    assert_clean(&url);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (thread_id, run_id, mut blob): (i64, Vec<u8>, Vec<u8>) = conn
        .query_row(
            "SELECT thread_id, run_id, blob FROM checkpoints ORDER BY thread_id, run_id LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let at = blob.len() / 2;
    blob[at] ^= 0x5a;
    conn.execute(
        "UPDATE checkpoints SET blob = ?1 WHERE thread_id = ?2 AND run_id = ?3",
        rusqlite::params![blob, thread_id, run_id],
    )
    .unwrap();
    let (code, out) = check(&url);
    assert_eq!(code, Some(1), "{out}");
    // The damaged checkpoint, and the delta checkpoint built on it.
    assert!(
        out.contains("run \"alpha-1\": corrupt: checkpoint damaged"),
        "{out}"
    );
    assert!(
        out.contains("run \"alpha-2\": its base checkpoint (run \"alpha-1\")"),
        "{out}"
    );
    assert!(out.contains("2 damaged item(s) found"), "{out}");
    let (thread_id, first, mut data): (i64, i64, Vec<u8>) = conn
        .query_row(
            "SELECT thread_id, first_seq, data FROM chunks ORDER BY thread_id, first_seq LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let at = data.len() / 2;
    data[at] ^= 0x5a;
    conn.execute(
        "UPDATE chunks SET data = ?1 WHERE thread_id = ?2 AND first_seq = ?3",
        rusqlite::params![data, thread_id, first],
    )
    .unwrap();
    drop(conn);
    let (code, out) = check(&url);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("the events are unreadable"), "{out}");
    // Commands that need the damaged data fail with the damage code.
    let out = agui(
        &["store", "export", "--store", &url, "--thread", "alpha"],
        None,
    );
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
}

#[test]
fn check_finds_damage_in_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let url = format!("file://{}", store.display());
    import(&url);
    assert_clean(&url);
    let seg = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".seg"))
        .unwrap();
    let original = std::fs::read(&seg).unwrap();
    // Walk the records: (offset, length, kind).
    let mut recs = Vec::new();
    let mut pos = 8;
    while pos + 8 <= original.len() {
        let len = u32::from_le_bytes(original[pos..pos + 4].try_into().unwrap()) as usize;
        recs.push((pos, 8 + len, original[pos + 8]));
        pos += 8 + len;
    }
    // A damaged checkpoint record (with records after it): opens, reported.
    let (off, len, _) = recs[..recs.len() - 1]
        .iter()
        .copied()
        .find(|r| r.2 == 2)
        .unwrap();
    let mut data = original.clone();
    data[off + len - 3] ^= 0x41;
    std::fs::write(&seg, &data).unwrap();
    let (code, out) = check(&url);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("corrupt: checkpoint damaged"), "{out}");
    // A damaged batch in the middle: the store does not open; reported.
    let mut data = original.clone();
    data[recs[0].0 + 20] ^= 0x41;
    std::fs::write(&seg, &data).unwrap();
    let (code, out) = check(&url);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("damage: the store does not open"), "{out}");
    assert!(out.contains("segment 0000000000000001"), "{out}");
    assert_eq!(std::fs::read(&seg).unwrap(), data, "check changed nothing");
    // serve refuses to start on it, and other commands fail, with the
    // damage code (`agui serve --repair` would cut the log at the damage).
    let out = agui(&["serve", "--listen", "127.0.0.1:0", "--store", &url], None);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let out = agui(&["store", "ls", "--store", &url], None);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    // `agui serve --repair` cuts the log at a damaged batch in the middle
    // and starts; what was before the damage is kept, and the store is
    // clean again.
    let batches: Vec<(usize, usize, u8)> = recs.iter().copied().filter(|r| r.2 == 8).collect(); // framed batch records
    assert!(batches.len() >= 3, "{batches:?}");
    let (off, _, _) = batches[1];
    let mut data = original.clone();
    data[off + 20] ^= 0x41;
    std::fs::write(&seg, &data).unwrap();
    let (code, out) = check(&url);
    assert_eq!(code, Some(1), "{out}");
    let cwd = tempfile::tempdir().unwrap();
    drop(serve(cwd.path(), &["--store", &url, "--repair"]));
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), off as u64);
    let (code, out) = check(&url);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.ends_with("no damage found\n"), "{out}");
    let out = agui(&["store", "ls", "--store", &url, "--json"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stdout).trim().is_empty(),
        "the first batch is kept"
    );
}

#[test]
fn check_finds_a_damaged_chunk_in_postgres() {
    let Some(base) = postgres_url() else { return };
    let schema = PgSchema::new(base.clone());
    let url = schema.store_url();
    import(&url);
    assert_clean(&url);
    let name = url.split("schema=").nth(1).unwrap().to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .batch_execute(&format!(
                "UPDATE \"{name}\".chunks SET data = overlay(data placing '\\x5a'::bytea from 3 for 1) \
                 WHERE (thread_id, first_seq) = (SELECT thread_id, first_seq FROM \"{name}\".chunks ORDER BY thread_id, first_seq LIMIT 1)"
            ))
            .await
            .unwrap();
    });
    let (code, out) = check(&url);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("the events are unreadable"), "{out}");
}

#[test]
fn read_only_commands_never_create_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let urls = [
        format!("sqlite://{}/typo.db", dir.path().display()),
        format!("file://{}/typo", dir.path().display()),
        "sqlite://relative/typo.db".to_owned(),
        "memory://".to_owned(),
    ];
    for url in &urls {
        for cmd in [
            vec!["store", "ls", "--store", url],
            vec!["store", "stats", "--store", url],
            vec!["store", "check", "--store", url],
            vec!["store", "export", "--store", url, "--thread", "t"],
            vec!["store", "migrate", "--from", url, "--to", "memory://"],
            vec![
                "export-artifact",
                "--store",
                url,
                "--thread",
                "t",
                "--run",
                "r",
            ],
            vec!["session", "export", "--store", url, "--thread", "t"],
            // Not read-only, but there is nothing to delete from either.
            vec!["store", "rm", "--store", url, "--thread", "t"],
        ] {
            let out = Command::new(env!("CARGO_BIN_EXE_agui"))
                .args(&cmd)
                .current_dir(dir.path())
                .output()
                .unwrap();
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(3), "{cmd:?}: {err}");
            assert!(
                err.contains(&format!("no store at {url}")),
                "{cmd:?}: {err}"
            );
            // Said once: no kind prefix, no backend rewording of it.
            assert_eq!(err.matches("no ").count(), 1, "{cmd:?}: {err}");
            assert!(!err.contains("not_found"), "{cmd:?}: {err}");
        }
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing was created"
    );
    let Some(base) = postgres_url() else { return };
    let schema = PgSchema::new(base.clone());
    let url = schema.store_url();
    let out = agui(&["store", "stats", "--store", &url], None);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no store at"));
    let name = url.split("schema=").nth(1).unwrap().to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let exists = rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .query_one(
                "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1",
                &[&name],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    });
    assert_eq!(exists, 0, "no schema was created");
    // A database that does not exist: no store there for a read-only
    // command; a setting to fix (`unavailable`, named), not `internal`,
    // for one that would create the store.
    let (head, _) = base.rsplit_once('/').unwrap();
    let nowhere = format!("{head}/agui_no_such_database");
    let out = agui(&["store", "ls", "--store", &nowhere], None);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("no store at {nowhere} (no such database)")),
        "{err}"
    );
    let out = agui(
        &["store", "import", "--store", &nowhere, "--thread", "t"],
        Some(b""),
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("unavailable: no such database"), "{err}");
    assert!(err.contains("agui_no_such_database"), "{err}");
    assert!(!err.contains("internal"), "{err}");
}

#[test]
fn a_password_in_a_url_is_never_shown() {
    let out = agui(
        &[
            "store",
            "ls",
            "--store",
            "postgres://agui:s3cret@127.0.0.1:1/nowhere?connect_timeout=1",
        ],
        None,
    );
    let err = text(&out.stderr);
    assert!(!err.contains("s3cret"), "{err}");
    assert!(err.contains("agui:***@127.0.0.1:1"), "{err}");
    assert_eq!(out.status.code(), Some(4), "unreachable: {err}");
}

fn serve_on(dir: &Path, store: &str) -> Server {
    serve(dir, &["--store", store])
}

#[test]
fn a_second_gateway_on_the_same_store_is_refused_and_read_only_commands_still_work() {
    let dir = tempfile::tempdir().unwrap();
    for (url, shown) in [
        (
            format!("sqlite://{}/one.db", dir.path().display()),
            format!("{}/one.db", dir.path().display()),
        ),
        (
            format!("file://{}/dir", dir.path().display()),
            format!("{}/dir", dir.path().display()),
        ),
    ] {
        import(&url);
        let first = serve_on(dir.path(), &url);
        let pid = first.child.id();
        let out = agui(&["serve", "--listen", "127.0.0.1:0", "--store", &url], None);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{err}");
        assert!(err.contains(&shown), "names the store: {err}");
        assert!(
            err.contains(&format!("in use by another process (pid {pid})")),
            "{err}"
        );
        assert_eq!(err.matches("pid ").count(), 1, "said once: {err}");
        // Writers are refused too; readers work beside the gateway.
        let out = agui(&["store", "import", "--store", &url], Some(&stream()));
        assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
        let out = agui(&["store", "ls", "--store", &url], None);
        assert!(out.status.success(), "{}", text(&out.stderr));
        // The header line, then alpha and beta.
        assert_eq!(text(&out.stdout).lines().count(), 3);
        assert_clean(&url);
    }
}

#[test]
fn exit_codes_are_documented_in_help() {
    let out = agui(&["--help"], None);
    let help = text(&out.stdout);
    for line in [
        "Exit codes",
        "1  what was checked is invalid or damaged",
        "2  usage error or bad input",
        "3  not found: no store at the URL given",
        "4  store unavailable",
        "5  the store holds damaged data",
    ] {
        assert!(help.contains(line), "{line}: {help}");
    }
    // The same class, the same code: a missing thread in any store command.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/s.db", dir.path().display());
    import(&url);
    for cmd in [
        vec!["store", "export", "--store", &url, "--thread", "nope"],
        vec!["store", "rm", "--store", &url, "--thread", "nope"],
    ] {
        let out = agui(&cmd, None);
        assert_eq!(out.status.code(), Some(3), "{cmd:?}: {}", text(&out.stderr));
    }
}

/// A run row whose start time no longer matches its `RUN_STARTED`'s
/// receive time (a flipped bit in the row): readers order runs by it, so a
/// branch export took the thread's second run for its first and exported a
/// run twice, while `store check` found nothing.
#[test]
fn check_finds_a_run_start_time_that_disagrees_with_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let url = format!("sqlite://{}", db.display());
    import(&url);
    assert_clean(&url);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let changed = conn
        .execute(
            "UPDATE runs SET started_at = started_at + 1000000000 WHERE rowid = (SELECT min(rowid) FROM runs)",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    let (code, out) = check(&url);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("the run index disagrees with the log: started at"),
        "{out}"
    );
}
