//! The README's quick start, run as written: its Node client snippet (the
//! official `@ag-ui/client`, installed in `e2e/` by `scripts/e2e-setup`),
//! its curl lines, and the example configuration `examples/gateway.toml`,
//! against a real `agui serve` started with the README's defaults.
//!
//! The snippets are read from README.md (the fenced block after each
//! `<!-- quickstart:NAME -->` marker); only the address changes, to the
//! port the test's gateway got.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::serve;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fenced block that follows `<!-- quickstart:NAME -->` in README.md.
fn snippet(name: &str) -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let marker = format!("<!-- quickstart:{name} -->");
    let after = readme
        .split_once(&marker)
        .unwrap_or_else(|| panic!("README.md has no {marker}"))
        .1;
    let fence = after.find("```").expect("a fenced block after the marker");
    let body = &after[fence..];
    let start = body.find('\n').unwrap() + 1;
    let end = body[start..].find("```").unwrap();
    body[start..start + end].to_owned()
}

fn e2e_dir() -> PathBuf {
    let dir = std::env::var_os("AGUI_E2E_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("e2e"));
    assert!(
        dir.join("node_modules/@ag-ui/client/package.json")
            .is_file(),
        "the official @ag-ui/client is not installed in {} (AGUI_E2E_DIR); run scripts/e2e-setup",
        dir.display()
    );
    dir
}

fn stdout_of(out: std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_node_client_snippet_prints_the_answer_in_a_fresh_thread_each_time() {
    let dir = tempfile::tempdir().unwrap();
    // `agui serve` with no flags: the README's command.
    let server = serve(dir.path(), &[]);
    let code = snippet("node").replace("127.0.0.1:8080", &server.addr);
    assert!(code.contains("@ag-ui/client"), "{code}");
    // Beside e2e/node_modules, so the import resolves as in a user's folder.
    let e2e = e2e_dir();
    let script = e2e.join(format!(".quickstart-{}.mjs", std::process::id()));
    std::fs::write(&script, &code).unwrap();
    let run = || {
        let out = Command::new(std::env::var("AGUI_NODE").unwrap_or_else(|_| "node".into()))
            .arg(&script)
            .current_dir(&e2e)
            .output()
            .expect("node must be installed (AGUI_NODE or `node` on PATH)");
        stdout_of(out, "the README's node snippet")
    };
    let (first, second) = (run(), run());
    let _ = std::fs::remove_file(&script);
    for out in [&first, &second] {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.first(), Some(&"You said: hello"), "{out}");
        assert!(
            lines.get(1).is_some_and(|l| l.starts_with("thread ")),
            "{out}"
        );
    }
    assert_ne!(first, second, "each run uses a fresh thread id");
    // Two threads, one run each: the second run did not continue the first.
    let threads = curl(&format!("http://{}/threads", server.addr));
    let threads: serde_json::Value = serde_json::from_str(&threads).unwrap();
    let list = threads["threads"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{threads}");
    assert!(list.iter().all(|t| t["runCount"] == 1), "{threads}");
    assert!(
        dir.path().join(".agui/agui.db").is_file(),
        "the default store is in ./.agui"
    );
}

fn curl(url: &str) -> String {
    let out = Command::new("curl")
        .args(["-sf", url])
        .output()
        .expect("curl must be installed");
    stdout_of(out, "curl")
}

#[test]
fn the_curl_lines_print_the_answer_and_the_threads() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &[]);
    let code = snippet("curl").replace("127.0.0.1:8080", &server.addr);
    assert!(code.starts_with("curl "), "{code}");
    // Twice in one shell, at once: the second time is a new thread too
    // (an id from the shell's pid and the clock in seconds would repeat,
    // and the second run would be refused, printing an empty line).
    let twice = format!("{code}\n{code}");
    let out = Command::new("sh")
        .args(["-c", &twice])
        .output()
        .expect("sh must be installed");
    let out = stdout_of(out, "the README's curl lines");
    let mut answers = 0;
    let mut threads = Vec::new();
    let mut json = String::new();
    for line in out.lines() {
        if line == "You said: hello" {
            answers += 1;
        } else {
            json.push_str(line);
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&json) {
                threads.push(v);
                json.clear();
            }
        }
    }
    assert_eq!(answers, 2, "{out}");
    assert_eq!(threads.len(), 2, "{out}");
    let last = &threads[1]["threads"];
    assert_eq!(last.as_array().unwrap().len(), 2, "{last}");
    for t in last.as_array().unwrap() {
        assert!(t["threadId"].as_str().unwrap().starts_with("curl-"), "{t}");
    }
}

/// Every setting of `examples/gateway.toml` switched on (`#key = ` lines
/// uncommented).
fn example_all_on() -> String {
    let text = std::fs::read_to_string(repo().join("examples/gateway.toml")).unwrap();
    text.lines()
        .map(|l| match l.strip_prefix('#') {
            Some(rest) if !rest.starts_with(' ') && !rest.is_empty() => rest,
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_example_config_names_every_setting_and_serves() {
    // Every setting, switched on, is one the gateway reads.
    let all = agui_server::ServeFile::parse(&example_all_on())
        .unwrap_or_else(|e| panic!("examples/gateway.toml with every setting on: {e}"));
    // ... and every setting the gateway reads is in the example: an option
    // left out would stay None.
    let shown = format!("{all:?}");
    assert!(
        !shown.contains("None"),
        "a setting of ServeFile is missing from examples/gateway.toml: {shown}"
    );
    assert_eq!(all.agents.len(), 2);
    assert!(all.agents.values().all(|a| a.history.is_some()), "{shown}");

    // As shipped, it is a working configuration.
    let dir = tempfile::tempdir().unwrap();
    let config = repo().join("examples/gateway.toml");
    let server = serve(
        dir.path(),
        &["--config", config.to_str().unwrap(), "--store", "memory://"],
    );
    let code = snippet("curl").replace("127.0.0.1:8080", &server.addr);
    let out = Command::new("sh").args(["-c", &code]).output().unwrap();
    let out = stdout_of(out, "curl against the example config");
    assert!(out.starts_with("You said: hello\n"), "{out}");
    // Its CORS origin answers a browser's preflight.
    let preflight = Command::new("curl")
        .args([
            "-si",
            "-X",
            "OPTIONS",
            &format!("http://{}/agents/demo/run", server.addr),
            "-H",
            "Origin: http://localhost:5173",
            "-H",
            "Access-Control-Request-Method: POST",
            "-H",
            "Access-Control-Request-Headers: content-type",
        ])
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&preflight.stdout).to_lowercase();
    assert!(
        head.contains("access-control-allow-origin: http://localhost:5173"),
        "{head}"
    );
}

/// Relative link targets of a Markdown text: `](target)`, without an
/// `#anchor`, leaving out web addresses and in-page anchors.
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in text.split("](").skip(1) {
        let Some(end) = part.find(')') else { continue };
        let target = part[..end].split('#').next().unwrap_or("").trim();
        let web = ["http://", "https://", "mailto:"]
            .iter()
            .any(|s| target.starts_with(s));
        if !target.is_empty() && !web && !target.contains(' ') {
            out.push(target.to_owned());
        }
    }
    out
}

/// The small things a newcomer trips on, checked: no command in `--help`
/// that does not exist, the data directory ignored by git, logs to a file
/// without colour codes, and docs that link only into the repository and
/// name no machine's paths.
#[test]
fn help_logs_and_docs_hold_no_traps_for_a_newcomer() {
    let help = Command::new(env!("CARGO_BIN_EXE_agui"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .expect("--help lists its commands")
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(commands.contains(&"serve"), "{help}");
    assert!(!commands.contains(&"branch"), "{help}");
    for c in commands.iter().filter(|c| **c != "help") {
        let out = Command::new(env!("CARGO_BIN_EXE_agui"))
            .args([c, "--help"])
            .output()
            .unwrap();
        assert!(out.status.success(), "agui {c} --help");
    }

    let ignored = std::fs::read_to_string(repo().join(".gitignore")).unwrap();
    assert!(ignored.lines().any(|l| l.trim() == ".agui/"), "{ignored}");

    // A log written to a pipe or a file: no ANSI escapes.
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &[]);
    let seen = &server.startup;
    for l in seen {
        assert!(!l.contains('\u{1b}'), "a colour code in a piped log: {l:?}");
    }

    // Docs link only to files of the repository and name no machine paths.
    let mut docs = vec![
        repo().join("README.md"),
        repo().join("ARCHITECTURE.md"),
        repo().join("fuzz/RESULTS.md"),
        repo().join("python/README.md"),
    ];
    for dir in ["docs", "crates"] {
        for entry in walk(&repo().join(dir)) {
            if entry.extension().is_some_and(|e| e == "md") {
                docs.push(entry);
            }
        }
    }
    let mut checked = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for machine in ["/work/", "/root/", "/home/", "/tmp/agui-"] {
            assert!(
                !text.contains(&format!("]({machine}")) && !text.contains(&format!("({machine}")),
                "{} links {machine}",
                doc.display()
            );
        }
        for target in relative_links(&text) {
            let path = doc.parent().unwrap().join(&target);
            let inside = path
                .canonicalize()
                .ok()
                .is_some_and(|p| p.starts_with(repo().canonicalize().unwrap()));
            assert!(
                inside,
                "{} links {target}, which is not a file of the repository",
                doc.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} links found");
}

/// Every file under `dir`, leaving out build and package folders.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        if p.is_dir() {
            if !["target", "node_modules", ".venv"]
                .iter()
                .any(|n| name == *n)
            {
                out.extend(walk(&p));
            }
        } else {
            out.push(p);
        }
    }
    out
}
