//! `agui store`: import, export, migrate, stats, ls, rm, end to end through
//! the binary, on SQLite stores in temporary directories, and the import →
//! export round trip on every durable backend.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use agui_protocol::Event;
use agui_store::sample::{full_run, realistic_run, run_started, text_message};
use agui_testkit::r#gen::{self as streams, Profile};

mod common;
use common::{PgSchema, postgres_url};

fn agui(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agui"));
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("agui runs");
    if let Some(bytes) = stdin {
        // A command that refuses its arguments may exit before reading its
        // input: a closed pipe is its answer, not a failure of the test.
        if let Err(e) = child.stdin.take().expect("stdin").write_all(bytes) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
        }
    }
    child.wait_with_output().expect("agui finishes")
}

fn ok(args: &[&str], stdin: Option<&[u8]>) -> String {
    let out = agui(args, stdin);
    assert!(
        out.status.success(),
        "agui {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn url(dir: &Path, name: &str) -> String {
    format!("sqlite://{}", dir.join(name).display())
}

/// Two threads: "t1" with three runs (the third branching from the first),
/// "t2" with one; as NDJSON.
fn sample_ndjson() -> String {
    let mut events = text_message("pre", "before any run", 1);
    events.extend(full_run("t1", "a", None, "first answer"));
    events.extend(realistic_run("t1", "b", None, 80));
    events.extend(full_run("t1", "c", Some("a"), "branch from a"));
    events.extend(full_run("t2", "x", None, "other thread"));
    let mut out = String::new();
    for e in &events {
        out.push_str(e.json());
        out.push('\n');
    }
    out
}

fn lines_of(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.is_empty()).collect()
}

#[test]
fn import_then_export_round_trips_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let store = url(dir.path(), "s.db");
    let input = sample_ndjson();
    let out = agui(
        &["store", "import", "-", "--store", &store],
        Some(input.as_bytes()),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("into 2 thread(s)"));
    let t1 = ok(
        &["store", "export", "--store", &store, "--thread", "t1"],
        None,
    );
    let t2 = ok(
        &["store", "export", "--store", &store, "--thread", "t2"],
        None,
    );
    let mut back = t1.clone();
    back.push_str(&t2);
    assert_eq!(back, input, "export(import(x)) == x, byte for byte");
    // JSON and SSE framings of the same events.
    let json = ok(
        &[
            "store", "export", "--store", &store, "--thread", "t2", "--to", "json",
        ],
        None,
    );
    let parsed: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed.len(), lines_of(&t2).len());
    let sse = ok(
        &[
            "store", "export", "--store", &store, "--thread", "t2", "--to", "sse",
        ],
        None,
    );
    assert!(sse.contains("id: 1\n") && sse.contains("data: {"));
}

#[test]
fn export_a_branch_and_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let store = url(dir.path(), "s.db");
    ok(
        &["store", "import", "--store", &store],
        Some(sample_ndjson().as_bytes()),
    );
    let branch = ok(
        &[
            "store", "export", "--store", &store, "--thread", "t1", "--branch", "c",
        ],
        None,
    );
    assert!(
        branch.contains("before any run"),
        "the preamble is on every branch"
    );
    assert!(branch.contains(r#""runId":"c""#) && branch.contains(r#""runId":"a""#));
    assert!(
        !branch.contains(r#""runId":"b""#),
        "the sibling run b is not on c's branch"
    );
    let full = ok(
        &["store", "export", "--store", &store, "--thread", "t1"],
        None,
    );
    for mode in ["deltas", "snapshot", "latest"] {
        let compacted = ok(
            &[
                "store",
                "export",
                "--store",
                &store,
                "--thread",
                "t1",
                "--compact",
                mode,
            ],
            None,
        );
        assert!(
            lines_of(&compacted).len() < lines_of(&full).len(),
            "{mode} compacts"
        );
    }
    let latest = ok(
        &[
            "store",
            "export",
            "--store",
            &store,
            "--thread",
            "t1",
            "--branch",
            "c",
            "--compact",
            "latest",
        ],
        None,
    );
    assert!(latest.contains("branch from a"));
    let out = agui(
        &[
            "store", "export", "--store", &store, "--thread", "t1", "--branch", "zz",
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not_found"));
}

#[test]
fn stats_ls_and_rm() {
    let dir = tempfile::tempdir().unwrap();
    let store = url(dir.path(), "s.db");
    let input = sample_ndjson();
    ok(
        &[
            "store", "import", "--store", &store, "--tenant", "acme", "--agent", "helper",
        ],
        Some(input.as_bytes()),
    );
    let stats = ok(&["store", "stats", "--store", &store], None);
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["store", "stats", "--store", &store, "--json"], None)).unwrap();
    let field = |name: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}\t")))
            .unwrap_or_else(|| panic!("no {name} in {stats}"))
            .parse()
            .unwrap()
    };
    assert_eq!(field("threadCount"), 2);
    assert_eq!(field("runCount"), 4);
    assert_eq!(field("eventCount"), lines_of(&input).len() as u64);
    assert_eq!(
        field("rawBytes"),
        lines_of(&input).iter().map(|l| l.len() as u64).sum::<u64>()
    );
    assert!(field("storedBytes") > 0);
    // The JSON says the same, under the same names.
    for name in [
        "threadCount",
        "runCount",
        "eventCount",
        "rawBytes",
        "storedBytes",
    ] {
        assert_eq!(json[name].as_u64(), Some(field(name)), "{name}: {json}");
    }
    let ratio = json["storedPerRawByte"].as_f64().unwrap();
    let want = field("storedBytes") as f64 / field("rawBytes") as f64;
    assert!((ratio - want).abs() < 0.01, "{ratio} vs {want}");
    let table = ok(&["store", "ls", "--store", &store], None);
    assert!(table.starts_with("THREAD\t"), "{table}");
    assert_eq!(lines_of(&table).len(), 3, "{table}");
    let ls = ok(&["store", "ls", "--store", &store, "--json"], None);
    let rows: Vec<serde_json::Value> = lines_of(&ls)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert!(
        rows.iter()
            .all(|r| r["tenant"] == "acme" && r["agent"] == "helper")
    );
    assert_eq!(rows[0]["threadId"], "t2", "newest activity first");
    assert_eq!(rows[0]["eventCount"], rows[0]["lastSeq"]);
    let created = rows[0]["createdAt"].as_str().unwrap();
    assert_eq!(created.len(), "2026-01-01T00:00:00.000Z".len(), "{created}");
    let none = ok(
        &[
            "store", "ls", "--store", &store, "--agent", "nobody", "--json",
        ],
        None,
    );
    assert!(none.is_empty());
    ok(
        &[
            "store", "rm", "--store", &store, "--thread", "t1", "--tenant", "acme",
        ],
        None,
    );
    let ls = ok(
        &[
            "store", "ls", "--store", &store, "--tenant", "acme", "--json",
        ],
        None,
    );
    assert_eq!(lines_of(&ls).len(), 1);
    let again = agui(
        &[
            "store", "rm", "--store", &store, "--thread", "t1", "--tenant", "acme",
        ],
        None,
    );
    assert!(!again.status.success());
    // The wrong tenant sees nothing.
    let out = agui(
        &["store", "export", "--store", &store, "--thread", "t2"],
        None,
    );
    assert!(!out.status.success());
}

#[test]
fn import_into_a_hostile_thread_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = url(dir.path(), "s.db");
    let id = "../x \u{202e}😀";
    let events = [run_started("whatever", "r", None)];
    let input: String = events.iter().map(|e| format!("{}\n", e.json())).collect();
    ok(
        &["store", "import", "--store", &store, "--thread", id],
        Some(input.as_bytes()),
    );
    let out = ok(
        &["store", "export", "--store", &store, "--thread", id],
        None,
    );
    assert_eq!(out, input);
    let ls = ok(&["store", "ls", "--store", &store, "--json"], None);
    let row: serde_json::Value = serde_json::from_str(lines_of(&ls)[0]).unwrap();
    assert_eq!(row["threadId"], id);
    let table = ok(&["store", "ls", "--store", &store], None);
    assert!(
        table.contains(&serde_json::Value::from(id).to_string()),
        "{table}"
    );
    assert!(!dir.path().join("x").exists(), "ids are never paths");
}

#[test]
fn migrate_copies_verifies_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (url(dir.path(), "a.db"), url(dir.path(), "b.db"));
    let input = sample_ndjson();
    ok(
        &["store", "import", "--store", &a, "--tenant", "t"],
        Some(input.as_bytes()),
    );
    ok(
        &[
            "store", "import", "--store", &a, "--tenant", "u", "--thread", "solo",
        ],
        Some(input.as_bytes()),
    );
    // An interrupted migration leaves a prefix of a thread in the destination.
    let first_batch: String = lines_of(&input)[..2]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    ok(
        &[
            "store", "import", "--store", &b, "--tenant", "u", "--thread", "solo",
        ],
        Some(first_batch.as_bytes()),
    );
    let out = agui(&["store", "migrate", "--from", &a, "--to", &b], None);
    let err = String::from_utf8_lossy(&out.stderr);
    // The prefix was imported in a separate batch (other receive times), so
    // the destination differs from the source and migrate refuses it.
    assert!(!out.status.success() && err.contains("differs"), "{err}");
    ok(
        &[
            "store", "rm", "--store", &b, "--tenant", "u", "--thread", "solo",
        ],
        None,
    );
    let out = agui(&["store", "migrate", "--from", &a, "--to", &b], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("verified"), "{err}");
    // The first attempt copied tenant t's threads before it stopped; this one
    // copies the rest.
    let n = lines_of(&input).len();
    assert!(
        err.contains(&format!("{} events ({n} copied now)", 2 * n)),
        "{err}"
    );
    // Running it again resumes: nothing left to copy, still verified.
    let out = agui(&["store", "migrate", "--from", &a, "--to", &b], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("(0 copied now)"),
        "{err}"
    );
    for (tenant, thread) in [("t", "t1"), ("t", "t2"), ("u", "solo")] {
        let x = ok(
            &[
                "store", "export", "--store", &a, "--tenant", tenant, "--thread", thread,
            ],
            None,
        );
        let y = ok(
            &[
                "store", "export", "--store", &b, "--tenant", tenant, "--thread", thread,
            ],
            None,
        );
        assert_eq!(x, y);
    }
    assert_eq!(
        ok(&["store", "stats", "--store", &a], None)
            .lines()
            .take(5)
            .collect::<Vec<_>>(),
        ok(&["store", "stats", "--store", &b], None)
            .lines()
            .take(5)
            .collect::<Vec<_>>()
    );
}

#[test]
fn migrate_between_sqlite_and_file_backends() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = url(dir.path(), "a.db");
    let file = format!("file://{}", dir.path().join("files").display());
    let back = url(dir.path(), "b.db");
    let input = sample_ndjson();
    ok(
        &["store", "import", "--store", &sqlite],
        Some(input.as_bytes()),
    );
    for (from, to) in [(&sqlite, &file), (&file, &back)] {
        let out = agui(&["store", "migrate", "--from", from, "--to", to], None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && err.contains("verified"), "{err}");
    }
    for thread in ["t1", "t2"] {
        let x = ok(
            &["store", "export", "--store", &sqlite, "--thread", thread],
            None,
        );
        let y = ok(
            &["store", "export", "--store", &file, "--thread", thread],
            None,
        );
        let z = ok(
            &["store", "export", "--store", &back, "--thread", thread],
            None,
        );
        assert_eq!(x, y);
        assert_eq!(x, z);
    }
}

#[test]
fn unknown_and_unbuilt_backends_are_clear_errors() {
    for (store, says) in [
        ("ftp://x", "unsupported store URL"),
        ("sqlite://", "needs a path"),
    ] {
        let out = agui(&["store", "stats", "--store", store], None);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{store}: {err}");
    }
    let out = agui(&["store", "import", "--store", "memory://"], Some(b"[1]"));
    assert!(!out.status.success());
}

#[test]
fn bench_runs_on_a_small_size() {
    let dir = tempfile::tempdir().unwrap();
    let store = url(dir.path(), "bench.db");
    let out = ok(
        &[
            "store",
            "bench",
            "--store",
            "memory://",
            "--store",
            &store,
            "--events",
            "800",
            "--restore-runs",
            "3",
            "--restore-run-len",
            "50",
            "--samples",
            "5",
        ],
        None,
    );
    let rows = lines_of(&out);
    assert_eq!(rows.len(), 3);
    assert!(rows[1].starts_with("memory\t") && rows[2].starts_with("sqlite\t"));
}

/// One stream written as an event file in one of the three formats.
fn event_file(events: &[Event], format: usize) -> String {
    let texts = events.iter().map(Event::json);
    match format % 3 {
        0 => texts.map(|t| format!("{t}\n")).collect(),
        1 => format!("[{}]", texts.collect::<Vec<_>>().join(",")),
        _ => texts.map(|t| format!("data: {t}\n\n")).collect(),
    }
}

/// `agui store import` then `agui store export` gives back the same events,
/// text for text, on the SQLite, file and PostgreSQL backends, for a stream
/// of every generator profile (plain turns, parallel and nested tool calls,
/// errors mid-stream, chunks, activity, reasoning, subagents, branches, a
/// run in flight, ...) read from NDJSON, a JSON array and SSE in turn. (The
/// memory backend lives in one process; the conformance suite checks it
/// keeps events exactly.)
#[test]
fn import_then_export_gives_back_every_generated_stream_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let schema = postgres_url().map(PgSchema::new);
    let mut stores = vec![
        ("sqlite", url(dir.path(), "round-trip.db")),
        (
            "file",
            format!("file://{}", dir.path().join("round-trip").display()),
        ),
    ];
    if let Some(schema) = &schema {
        stores.push(("postgres", schema.store_url()));
    }
    for (backend, store) in &stores {
        for (i, profile) in Profile::ALL.iter().enumerate() {
            let events = streams::stream(*profile, 7 + i as u64);
            let path = dir.path().join(format!("in-{backend}-{i}"));
            std::fs::write(&path, event_file(&events, i)).unwrap();
            let thread = format!("round-trip-{}", profile.name());
            let path = path.display().to_string();
            let args = [
                "store", "import", &path, "--store", store, "--thread", &thread,
            ];
            ok(&args, None);
            let back = ok(
                &["store", "export", "--store", store, "--thread", &thread],
                None,
            );
            let back = lines_of(&back);
            let want: Vec<&str> = events.iter().map(Event::json).collect();
            assert_eq!(
                back,
                want,
                "{backend}, profile {}: export(import(x)) != x",
                profile.name()
            );
        }
    }
}

/// Errors say each thing once: a missing PostgreSQL role is `unavailable`
/// (not `internal`) and named; an SQLite file that cannot be opened says
/// so once.
#[test]
fn store_errors_say_it_once() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the database file should be.
    let blocked = dir.path().join("blocked.db");
    std::fs::create_dir(&blocked).unwrap();
    let out = agui(
        &[
            "store",
            "import",
            "--store",
            &format!("sqlite://{}", blocked.display()),
            "--thread",
            "t",
        ],
        Some(b""),
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert!(!err.contains("could not open the store"), "{err}");
    assert_eq!(err.matches("unavailable").count(), 1, "{err}");
    assert_eq!(err.matches("SQLite store").count(), 1, "{err}");
    let Some(url) = postgres_url() else { return };
    let Some((scheme, rest)) = url.split_once("://") else {
        panic!("{url}")
    };
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let nobody = format!("{scheme}://agui_no_such_role@{host}");
    let out = agui(&["store", "stats", "--store", &nobody], None);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert!(err.contains("unavailable"), "{err}");
    assert!(!err.contains("internal"), "{err}");
    assert!(
        err.contains("agui_no_such_role"),
        "the role is named: {err}"
    );
    assert_eq!(err.matches("unavailable").count(), 1, "{err}");
}

/// An import that fails midway says what it left: a file that cannot be
/// decoded is read through before the store is opened, so nothing is
/// written; a batch the store refuses (a run id used twice) after others
/// were written names what stays. Before, a malformed last line left the
/// first runs committed, dropped the complete run pending in memory, and
/// said nothing of either.
#[test]
fn an_import_that_fails_midway_writes_nothing_or_says_what_stays() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.ndjson");
    let mut text = sample_ndjson();
    text.push_str("{\"type\":\"RUN_STARTED\",\"threadId\":\"t1\",\"runId\":\"z\"\n");
    std::fs::write(&file, &text).unwrap();
    let store = url(dir.path(), "s.db");
    let out = agui(
        &["store", "import", file.to_str().unwrap(), "--store", &store],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("nothing was imported"), "{err}");
    assert!(
        !dir.path().join("s.db").exists(),
        "the store was not even created"
    );

    // Valid JSON, refused by the store: run "a" of t1 started twice.
    let mut text = sample_ndjson();
    for e in full_run("t1", "a", None, "again") {
        text.push_str(e.json());
        text.push('\n');
    }
    std::fs::write(&file, &text).unwrap();
    let out = agui(
        &["store", "import", file.to_str().unwrap(), "--store", &store],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("events were imported into thread(s) [\"t1\", \"t2\"] before this; they stay in the store"),
        "{err}"
    );
}
