//! The web console (`/ui/`) of the real `agui serve` in headless Chromium.
//!
//! Needs Node.js with `e2e/node_modules` (the official `@ag-ui/client` and
//! `puppeteer-core`, installed by `scripts/e2e-setup`) and Debian's
//! `chromium` (installed by `scripts/e2e-setup` when missing; elsewhere set
//! `AGUI_CHROMIUM`). The browser scenarios live in `e2e/node/console.mjs` and
//! run in one browser session; this test makes the data, computes what the
//! console must show from the HTTP API and `agui history`, and checks the
//! browser's report against it. `AGUI_CONSOLE_SHOTS=DIR` keeps the
//! screenshots (docs/console.md shows them; a relative DIR is from the
//! repository's root).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

mod common;
use common::serve;

/// One HTTP/1.0 GET; returns status, headers and body.
fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

fn get_json(addr: &str, path: &str) -> Value {
    let (status, _, body) = get(addr, path, None);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn e2e_dir() -> PathBuf {
    let dir = std::env::var_os("AGUI_E2E_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../e2e"));
    for p in ["@ag-ui/client", "puppeteer-core"] {
        assert!(
            dir.join("node_modules")
                .join(p)
                .join("package.json")
                .is_file(),
            "{p} is not installed in {} (AGUI_E2E_DIR); run scripts/e2e-setup",
            dir.display()
        );
    }
    dir
}

fn chromium() -> String {
    let path = std::env::var("AGUI_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&path).is_file(),
        "no Chromium at {path}: run scripts/e2e-setup (apt-get install chromium chromium-driver) or set AGUI_CHROMIUM"
    );
    path
}

fn node(script: &str, plan: &Value) -> Value {
    let dir = e2e_dir();
    let out = Command::new(std::env::var("AGUI_NODE").unwrap_or_else(|_| "node".into()))
        .arg(dir.join("node").join(script))
        .arg(plan.to_string())
        .current_dir(&dir)
        .output()
        .expect("node must be installed (AGUI_NODE or `node` on PATH)");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A conversation held with the official `HttpAgent`; returns its report.
fn conversation(url: &str, thread: &str, turns: &[(&str, &str)], token: Option<&str>) -> Value {
    let headers = match token {
        Some(t) => json!({"Authorization": format!("Bearer {t}")}),
        None => json!({}),
    };
    let turns: Vec<Value> = turns
        .iter()
        .map(|(run, text)| json!({"runId": run, "text": text}))
        .collect();
    node(
        "client.mjs",
        &json!({"op": "conversation", "url": url, "threadId": thread, "turns": turns, "headers": headers}),
    )
}

fn all_ok(report: &Value) {
    for t in report["turns"].as_array().unwrap() {
        assert_eq!(t["ok"], true, "a turn failed: {report}");
    }
}

/// What the console must render for each message: id, role, text, tool calls.
fn expected(messages: &Value) -> Vec<Value> {
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<String>(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            let calls: Vec<Value> = m["toolCalls"]
                .as_array()
                .map(|c| c.iter().map(|c| c["id"].clone()).collect())
                .unwrap_or_default();
            json!({"id": m["id"], "role": m["role"], "text": text, "toolCalls": calls})
        })
        .collect()
}

/// The conversation after event `n` of `run`, as `agui history` prints it
/// from the thread's exported log.
fn history_at(addr: &str, thread: &str, run: &str, n: u64, dir: &Path) -> Value {
    let (status, _, body) = get(addr, &format!("/threads/{thread}/events"), None);
    assert_eq!(status, 200);
    let ndjson: String = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|l| format!("{l}\n"))
        .collect();
    let file = dir.join("log.ndjson");
    std::fs::write(&file, ndjson).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agui"))
        .args(["history"])
        .arg(&file)
        .args(["--at", run, "--event", &n.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn console_in_headless_chromium() {
    let chromium = chromium();
    e2e_dir();
    let dir = tempfile::tempdir().unwrap();
    let open = serve(dir.path(), &["--store", "memory://"]);
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "tok-a tenant-a\ntok-b tenant-b\n").unwrap();
    let authed = serve(
        dir.path(),
        &[
            "--store",
            "memory://",
            "--tokens-file",
            tokens.to_str().unwrap(),
        ],
    );

    // The console's pages carry a strict policy; `--ui off` removes them.
    let (status, head, _) = get(&open.addr, "/ui/", None);
    assert_eq!(status, 200);
    let csp = head
        .lines()
        .find_map(|l| l.strip_prefix("content-security-policy: "))
        .expect("a Content-Security-Policy header");
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe"));
    let off = serve(dir.path(), &["--store", "memory://", "--ui", "off"]);
    assert_eq!(get(&off.addr, "/ui/", None).0, 404);
    drop(off);

    let url = format!("http://{}/agents/demo/run", open.addr);
    let (thread, runs) = ("console-th", ["run-1", "run-2", "run-3"]);
    let made = conversation(
        &url,
        thread,
        &[
            (runs[0], "hello there"),
            (runs[1], "what is up"),
            (runs[2], "bye now"),
        ],
        None,
    );
    all_ok(&made);
    let payload = r#"<script>window.__xss=1</script><img src=x onerror="window.__xss=2"> <a href="javascript:window.__xss=3">click</a> javascript:window.__xss=4"#;
    // `onerror` holds "error": the demo agent then fails the run midway,
    // which leaves the payload in the user message, the partial answer and
    // the state.
    conversation(&url, "xss-thread", &[("xss-1", payload)], None);
    let a = conversation(
        &format!("http://{}/agents/demo/run", authed.addr),
        "tenant-a-thread",
        &[("a-1", "only for tenant a")],
        Some("tok-a"),
    );
    all_ok(&a);

    let info = get_json(&open.addr, &format!("/threads/{thread}"));
    let r3 = info["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["runId"] == runs[2])
        .unwrap();
    // A position inside the assistant's streamed answer.
    let event = r3["eventCount"].as_u64().unwrap() / 3;
    let want_run2 = expected(
        &get_json(
            &open.addr,
            &format!("/threads/{thread}/messages?run={}", runs[1]),
        )["messages"],
    );
    let history = history_at(&open.addr, thread, runs[2], event, dir.path());
    let want_at = expected(&history["messages"]);
    // The HTTP API agrees with `agui history` at that point.
    let api_at = get_json(
        &open.addr,
        &format!("/threads/{thread}/messages?run={}&event={event}", runs[2]),
    );
    assert_eq!(api_at["messages"], history["messages"]);
    assert_eq!(api_at["state"], history["state"]);

    // A relative directory is taken from the repository's root, as
    // docs/console.md writes it (the browser script runs in e2e/).
    let shots = std::env::var("AGUI_CONSOLE_SHOTS").ok().map(|d| {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(d)
    });
    let downloads = dir.path().join("downloads");
    std::fs::create_dir_all(&downloads).unwrap();
    let report = node(
        "console.mjs",
        &json!({
            "chromium": chromium,
            "base": format!("http://{}", open.addr),
            "authBase": format!("http://{}", authed.addr),
            "tokens": {"a": "tok-a", "b": "tok-b"},
            "thread": thread,
            "runs": runs,
            "event": event,
            "r3Events": r3["eventCount"],
            "xssThread": "xss-thread",
            "slowThread": "slow-thread",
            "tenantThread": "tenant-a-thread",
            "shots": shots,
            "downloads": downloads,
        }),
    );
    assert!(report["failure"].is_null(), "browser: {report:#}");
    assert_eq!(report["pageErrors"], json!([]), "{report:#}");
    assert_eq!(report["csp"], json!([]), "CSP violations: {report:#}");

    // List and tree.
    assert!(
        report["listed"]
            .as_array()
            .unwrap()
            .contains(&json!(thread))
    );
    assert_eq!(report["treeRuns"], json!(runs));
    // Run 2 shows exactly the messages of GET /threads/{id}/messages?run=run-2.
    assert_eq!(report["run2"], json!(want_run2), "{report:#}");
    assert!(!want_run2.is_empty());
    // Time travel: the link and the keyboard land on `agui history --at`.
    assert_eq!(report["atLink"], json!(want_at), "{report:#}");
    assert_eq!(report["atKeys"], json!(want_at), "{report:#}");
    // Inside a run, a branch starts from that run's end (lineage has no
    // mid-run parent), and the console says so.
    assert_eq!(report["midRunBranch"], "Branch after this run");
    assert!(
        report["midRunHint"]
            .as_str()
            .unwrap()
            .contains(&format!("from the end of run {}", runs[2])),
        "{report:#}"
    );
    assert!(
        report["atKeysUrl"]
            .as_str()
            .unwrap()
            .ends_with(&format!("?run={}&event={event}", runs[2]))
    );
    let seq = r3["firstSeq"].as_u64().unwrap() + event;
    assert_eq!(report["logCurrent"], json!(seq.to_string()));

    // Branch from run 1: a fourth run whose parent is run 1, shown as a fork.
    let r4 = report["r4"].as_str().expect("a fourth run").to_owned();
    let after = get_json(&open.addr, &format!("/threads/{thread}"));
    let run4 = after["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["runId"] == r4.as_str())
        .unwrap()
        .clone();
    assert_eq!(run4["parentRunId"], runs[0]);
    assert_eq!(report["forkShown"], "fork: 2 branches");
    let branch_msgs =
        get_json(&open.addr, &format!("/threads/{thread}/messages?run={r4}"))["messages"].clone();
    assert!(
        branch_msgs
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["content"] == "a branch from run one")
    );
    assert_eq!(report["branchConversation"], json!(expected(&branch_msgs)));

    // Downloads of run 2's branch: the files the browser saved hold what the
    // HTTP API serves for that branch (events, compacted, artifact).
    assert_eq!(
        report["downloads"],
        json!([
            "Events (NDJSON)",
            "Compacted: latest",
            "Run artifact (JSON)"
        ])
    );
    let r2 = runs[1];
    let saved = |name: &str| {
        let path = downloads.join(name);
        // The browser writes a download under a temporary name first.
        for _ in 0..100 {
            if path.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("the console saved no {name}: {e}"))
    };
    let sse_lines = |path: &str| {
        let (status, _, body) = get(&open.addr, path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        let mut out = String::new();
        for line in body.lines() {
            if let Some(data) = line.strip_prefix("data: ") {
                out.push_str(data);
                out.push('\n');
            }
        }
        out
    };
    let events = saved(&format!("{thread}-{r2}.ndjson"));
    assert!(events.lines().count() > 3, "{events}");
    assert_eq!(
        events,
        sse_lines(&format!("/threads/{thread}/events?branch={r2}"))
    );
    assert_eq!(
        saved(&format!("{r2}-latest.ndjson")),
        sse_lines(&format!(
            "/threads/{thread}/events?branch={r2}&compact=latest"
        ))
    );
    let artifact: Value = serde_json::from_str(&saved(&format!("{r2}-artifact.json"))).unwrap();
    assert_eq!(
        artifact,
        get_json(&open.addr, &format!("/threads/{thread}/runs/{r2}/artifact"))
    );

    // Compare run 2 and run 4: they part after run 1.
    assert_eq!(report["compareAncestor"], runs[0]);
    assert_eq!(
        report["compareDivergence"],
        json!(format!("{} vs {r4}", runs[1]))
    );

    // Live: the slow run was listed and its text grew while it streamed.
    let live = report["live"].as_array().unwrap();
    let lens: Vec<u64> = live
        .iter()
        .filter(|s| s["status"] == "running")
        .map(|s| s["len"].as_u64().unwrap())
        .collect();
    assert!(
        lens.windows(2).any(|w| w[1] > w[0] && w[0] > 0),
        "the streamed text did not grow: {live:?}"
    );
    assert_eq!(live.last().unwrap()["status"], "finished");

    // XSS payloads are text; nothing ran.
    let xss = &report["xss"];
    assert!(xss["flag"].is_null(), "{xss}");
    assert_eq!(xss["imgs"], 0);
    assert_eq!(xss["links"], 0);
    assert!(
        xss["texts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t.as_str().unwrap() == payload),
        "{xss}"
    );
    assert!(
        xss["state"]
            .as_str()
            .unwrap()
            .contains("<script>window.__xss=1</script>")
    );

    // Phone width: nothing wider than the screen.
    assert!(report["phoneOverflow"].as_i64().unwrap() <= 0, "{report:#}");

    // Tenants: B never sees A's thread; A does.
    assert_eq!(report["loginShown"], true);
    assert!(
        !report["tenantB"]
            .as_array()
            .unwrap()
            .contains(&json!("tenant-a-thread"))
    );
    assert!(
        report["tenantBDirect"]
            .as_str()
            .unwrap()
            .contains("no such thread")
    );
    assert!(
        report["tenantA"]
            .as_array()
            .unwrap()
            .contains(&json!("tenant-a-thread"))
    );
}
