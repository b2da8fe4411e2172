//! `agui session export|import|validate` end to end through the binary: a
//! two-agent branched thread exported from SQLite, validated, and imported
//! into the file, SQLite and PostgreSQL backends under every restore case
//! (equivalent, enhanced, reduced, empty, invalid, `--as`, `--history-only`),
//! and damaged documents that change nothing.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use agui_protocol::Event;
use agui_store::sample::full_run;
use serde_json::Value;

mod common;
use common::{PgSchema, Server, postgres_url, serve};

fn agui(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agui"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("agui runs")
}

fn ok(args: &[&str]) -> String {
    let out = agui(args);
    assert!(
        out.status.success(),
        "agui {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails(args: &[&str]) -> String {
    let out = agui(args);
    assert_eq!(out.status.code(), Some(2), "agui {args:?} should fail");
    String::from_utf8(out.stderr).unwrap()
}

fn ndjson(events: &[Event]) -> String {
    events.iter().map(|e| format!("{}\n", e.json())).collect()
}

/// Thread "t": run a (research), run b (writer), run c branching from a
/// (research).
fn source(dir: &Path) -> String {
    let store = format!("sqlite://{}", dir.join("src.db").display());
    let parts = [
        ("research", full_run("t", "a", None, "first answer")),
        ("writer", full_run("t", "b", None, "second answer")),
        ("research", full_run("t", "c", Some("a"), "branch from a")),
    ];
    for (i, (agent, events)) in parts.iter().enumerate() {
        let path = dir.join(format!("part{i}.ndjson"));
        std::fs::write(&path, ndjson(events)).unwrap();
        ok(&[
            "store",
            "import",
            path.to_str().unwrap(),
            "--store",
            &store,
            "--thread",
            "t",
            "--agent",
            agent,
        ]);
    }
    store
}

#[test]
fn export_validate_and_every_restore_case_on_every_durable_backend() {
    let dir = tempfile::tempdir().unwrap();
    let src = source(dir.path());
    let doc = dir.path().join("t.session.json");
    ok(&[
        "session",
        "export",
        "--store",
        &src,
        "--thread",
        "t",
        "-o",
        doc.to_str().unwrap(),
    ]);
    let nd = ok(&[
        "session", "export", "--store", &src, "--thread", "t", "--to", "ndjson",
    ]);
    assert!(nd.lines().count() > 5);
    let doc = doc.to_str().unwrap();
    let v: Value = serde_json::from_str(&ok(&["session", "validate", doc])).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["participants"], serde_json::json!(["research", "writer"]));
    assert_eq!(v["runs"], 3);
    let original = ok(&["store", "export", "--store", &src, "--thread", "t"]);

    let schema = postgres_url().map(PgSchema::new);
    let mut stores = vec![
        format!("file://{}", dir.path().join("dst-file").display()),
        format!("sqlite://{}", dir.path().join("dst.db").display()),
    ];
    if let Some(s) = &schema {
        stores.push(s.store_url());
    }
    for store in &stores {
        let import = |extra: &[&str]| {
            let mut args = vec!["session", "import", doc, "--store", store.as_str()];
            args.extend_from_slice(extra);
            args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        };
        let run = |extra: &[&str]| -> Value {
            let args = import(extra);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            serde_json::from_str(&ok(&args)).unwrap()
        };
        let fail = |extra: &[&str]| -> String {
            let args = import(extra);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            fails(&args)
        };
        // Empty: nothing written.
        let e = fail(&["--agents", "critic"]);
        assert!(
            e.contains("none of the session's agents (research, writer)"),
            "{e}"
        );
        assert!(e.contains("--history-only"), "{e}");
        // A thread that is not there: exit 3, the not-found class.
        let out = agui(&["store", "export", "--store", store, "--thread", "t"]);
        assert_eq!(
            out.status.code(),
            Some(3),
            "store export of a missing thread"
        );
        let e = String::from_utf8(out.stderr).unwrap();
        assert!(e.contains("not_found") || e.contains("no such"), "{e}");
        // Equivalent.
        let r = run(&["--agents", "research,writer"]);
        assert_eq!(r["case"], "equivalent", "{store}");
        let back = ok(&["store", "export", "--store", store, "--thread", "t"]);
        assert_eq!(back, original, "{store}: the events, text for text");
        // Invalid: the thread has history now.
        let e = fail(&["--agents", "research,writer"]);
        assert!(
            e.contains("already has events or channel state") && e.contains("--as NEW_ID"),
            "{e}"
        );
        // Enhanced, reduced, history-only, each under a new id.
        let r = run(&["--agents", "research,writer,critic", "--as", "t-en"]);
        assert_eq!(
            (r["case"].as_str(), r["joining"][0].as_str()),
            (Some("enhanced"), Some("critic"))
        );
        let r = run(&["--agents", "writer", "--as", "t-re"]);
        assert_eq!(r["case"], "reduced");
        assert_eq!(r["missing"], serde_json::json!(["research"]));
        let r = run(&["--agents", "critic", "--history-only", "--as", "t-ho"]);
        assert_eq!(r["case"], "history_only");
        for t in ["t-en", "t-re", "t-ho"] {
            assert_eq!(
                ok(&["store", "export", "--store", store, "--thread", t]),
                original
            );
        }
    }

    // Damaged documents: a clear error, and the target unchanged.
    let text = std::fs::read_to_string(doc).unwrap();
    let cases = [
        ("empty", String::new(), "empty"),
        (
            "flipped",
            text.replacen("\"threadId\":\"t\"", "\"threadId\":\"u\"", 1),
            "SHA-256",
        ),
        (
            "future",
            text.replace("agui.session.v1", "agui.session.v2"),
            "unknown format \"agui.session.v2\"",
        ),
        (
            "header",
            format!("{}\n", text.lines().nth(1).unwrap().trim_end_matches(',')),
            "only a header",
        ),
    ];
    let target = format!("sqlite://{}", dir.path().join("damaged.db").display());
    for (name, body, want) in cases {
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, body).unwrap();
        let p = path.to_str().unwrap();
        let e = fails(&["session", "validate", p]);
        assert!(e.contains(want), "{name}: {e}");
        let e = fails(&["session", "import", p, "--store", &target]);
        assert!(e.contains(want), "{name}: {e}");
    }
    let ls = ok(&["store", "ls", "--store", &target]);
    // Only the header line: no thread was imported.
    assert_eq!(ls.lines().count(), 1, "nothing imported: {ls}");
}

/// `agui serve --store STORE` on a free port.
fn gateway(dir: &Path, store: &str) -> Server {
    serve(dir, &["--store", store])
}

/// One HTTP/1.0 exchange: status and body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_owned())
}

/// Atomicity through the binary, on every backend: a document that fails
/// at its last record (its end record's SHA-256, or a last event out of
/// sequence) changes nothing, imported with the CLI or over HTTP: no
/// target thread, no staging thread left, the other threads as they were.
#[test]
fn a_document_failing_at_its_last_record_changes_nothing_via_cli_and_http() {
    let dir = tempfile::tempdir().unwrap();
    let src = source(dir.path());
    let good = ok(&[
        "session", "export", "--store", &src, "--thread", "t", "--to", "ndjson",
    ]);
    let lines: Vec<&str> = good.lines().collect();
    let n = lines.len();
    // The end record's checksum damaged.
    let mut bad_end: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    bad_end[n - 1] = bad_end[n - 1].replace("\"sha256\":\"", "\"sha256\":\"0");
    // The last event (before the end record) with a wrong seq.
    let last_event = lines
        .iter()
        .rposition(|l| l.contains("\"kind\":\"event\""))
        .unwrap();
    let mut bad_seq: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    bad_seq[last_event] = bad_seq[last_event].replacen("\"seq\":", "\"seq\":9", 1);
    let docs = [
        ("end", bad_end.join("\n"), "SHA-256", "checksum_mismatch"),
        ("seq", bad_seq.join("\n"), "seq", "bad_sequence"),
    ];

    let schema = postgres_url().map(PgSchema::new);
    let mut stores = vec![
        "memory://".to_owned(),
        format!("file://{}", dir.path().join("dst-file").display()),
        format!("sqlite://{}", dir.path().join("dst.db").display()),
    ];
    if let Some(s) = &schema {
        stores.push(s.store_url());
    }
    let other = dir.path().join("other.ndjson");
    std::fs::write(&other, ndjson(&full_run("keep", "k", None, "kept"))).unwrap();
    for store in &stores {
        let memory = store.starts_with("memory:");
        if !memory {
            // The CLI: another thread is there before and after.
            ok(&[
                "store",
                "import",
                other.to_str().unwrap(),
                "--store",
                store,
                "--thread",
                "keep",
            ]);
            let before = ok(&["store", "ls", "--store", store]);
            for (name, body, want, _) in &docs {
                let path = dir.path().join(format!("{name}.ndjson"));
                std::fs::write(&path, body).unwrap();
                let e = fails(&[
                    "session",
                    "import",
                    path.to_str().unwrap(),
                    "--store",
                    store,
                    "--history-only",
                ]);
                assert!(e.contains(want), "{store} {name}: {e}");
                assert_eq!(
                    ok(&["store", "ls", "--store", store]),
                    before,
                    "{store} {name}: nothing changed"
                );
            }
        }
        // HTTP: the same documents posted to a gateway on the store.
        let gw = gateway(dir.path(), store);
        let (s, before) = http(&gw.addr, "GET", "/threads", "");
        assert_eq!(s, 200, "{before}");
        for (name, body, _, code) in &docs {
            let (s, v) = http(&gw.addr, "POST", "/threads/import?historyOnly=true", body);
            assert_eq!(s, 422, "{store} {name}: {v}");
            let v: Value = serde_json::from_str(&v).unwrap();
            assert_eq!(v["error"]["code"], *code, "{store} {name}: {v}");
            let (s, _) = http(&gw.addr, "GET", "/threads/t", "");
            assert_eq!(s, 404, "{store} {name}");
            assert_eq!(
                http(&gw.addr, "GET", "/threads", "").1,
                before,
                "{store} {name}: nothing changed"
            );
        }
        // And the good document imports (the staging id renamed to "t").
        let (s, v) = http(&gw.addr, "POST", "/threads/import?historyOnly=true", &good);
        assert_eq!(s, 200, "{store}: {v}");
        let (s, v) = http(&gw.addr, "GET", "/threads", "");
        assert_eq!(s, 200);
        let v: Value = serde_json::from_str(&v).unwrap();
        let ids: Vec<&str> = v["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["threadId"].as_str())
            .collect();
        assert!(ids.contains(&"t"), "{store}: {ids:?}");
        assert!(
            ids.iter().all(|id| !id.starts_with(".agui-import-")),
            "{store}: no staging thread left: {ids:?}"
        );
    }
}

/// `--compact snapshot` is refused with its reason and the alternative.
#[test]
fn export_compact_snapshot_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let src = source(dir.path());
    let e = fails(&[
        "session",
        "export",
        "--store",
        &src,
        "--thread",
        "t",
        "--compact",
        "snapshot",
    ]);
    assert!(e.contains("every event as stored"), "{e}");
    assert!(e.contains("docs/sessions.md"), "{e}");
    assert!(e.contains("agui compact --mode snapshot"), "{e}");
}
