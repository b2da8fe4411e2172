//! `agui export-artifact` and `agui validate-artifact`, run as the real
//! binary on the artifact fixtures.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/artifact")
}

fn agui(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agui"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn sorted(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    out.sort();
    out
}

#[test]
fn export_every_case() {
    for dir in sorted(&fixtures().join("export")) {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let case: Value =
            serde_json::from_str(&fs::read_to_string(dir.join("case.json")).unwrap()).unwrap();
        let events = dir.join("events.ndjson");
        let a = &case["args"];
        let mut args = vec![
            "export-artifact".to_owned(),
            events.to_str().unwrap().to_owned(),
            "--run".to_owned(),
            a["run"].as_str().unwrap().to_owned(),
        ];
        for (flag, key) in [
            ("--source", "source"),
            ("--started-at", "startedAt"),
            ("--finished-at", "finishedAt"),
        ] {
            if let Some(v) = a[key].as_str() {
                args.push(flag.to_owned());
                args.push(v.to_owned());
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = agui(&args);
        // The binary may say more than the library (`cliError`: the flags
        // that help).
        match case.get("cliError").or(case.get("error")) {
            Some(error) => {
                assert_eq!(out.status.code(), Some(2), "{name}");
                assert!(out.stdout.is_empty(), "{name}: no partial output");
                assert_eq!(
                    text(&out.stderr),
                    format!("agui: {}\n", error.as_str().unwrap()),
                    "{name}"
                );
            }
            None => {
                assert!(out.status.success(), "{name}: {}", text(&out.stderr));
                let got: Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(got, case["artifact"], "{name}");
                let skipped = case["skipped"].as_array().unwrap().len();
                let stderr = text(&out.stderr);
                if skipped > 0 {
                    assert!(
                        stderr.contains(&format!("left out {skipped} message(s)")),
                        "{name}: {stderr}"
                    );
                } else {
                    assert!(!stderr.contains("left out"), "{name}: {stderr}");
                }
            }
        }
    }
}

#[test]
fn export_counts_what_it_leaves_out() {
    let events = fixtures().join("export/snapshot/events.ndjson");
    let out = agui(&[
        "export-artifact",
        events.to_str().unwrap(),
        "--run",
        "run-1",
    ]);
    assert_eq!(
        text(&out.stderr),
        "agui: left out 6 message(s) without plain text (snapshot source): 1 activity, 1 empty, \
         1 multimodal, 1 reasoning, 1 tool result, 1 tool-call-only\n"
    );
}

#[test]
fn exported_artifacts_validate() {
    let dir = tempfile::tempdir().unwrap();
    for (case, run) in [
        ("errored", "bad"),
        ("parent", "run-3"),
        ("snapshot", "run-1"),
    ] {
        let events = fixtures().join("export").join(case).join("events.ndjson");
        let out = agui(&["export-artifact", events.to_str().unwrap(), "--run", run]);
        assert!(out.status.success(), "{case}");
        let file = dir.path().join(format!("{case}.json"));
        fs::write(&file, &out.stdout).unwrap();
        let check = agui(&["validate-artifact", file.to_str().unwrap()]);
        assert_eq!(text(&check.stdout), "valid\n", "{case}");
        assert_eq!(check.status.code(), Some(0));
    }
}

#[test]
fn validate_accepts_every_valid_example() {
    for file in sorted(&fixtures().join("valid")) {
        let out = agui(&["validate-artifact", file.to_str().unwrap()]);
        assert_eq!(text(&out.stdout), "valid\n", "{}", file.display());
        assert_eq!(out.status.code(), Some(0));
    }
}

#[test]
fn validate_rejects_every_malformed_example_with_its_reason() {
    let dir = fixtures().join("malformed");
    let reasons: serde_json::Map<String, Value> =
        serde_json::from_str(&fs::read_to_string(dir.join("reasons.json")).unwrap()).unwrap();
    for (name, reason) in &reasons {
        let file = dir.join(format!("{name}.json"));
        let out = agui(&["validate-artifact", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let stdout = text(&out.stdout);
        match reason {
            Value::String(reason) => assert_eq!(stdout, format!("malformed: {reason}\n"), "{name}"),
            _ => assert!(
                stdout.starts_with("malformed: not valid JSON: "),
                "{name}: {stdout}"
            ),
        }
    }
}

#[test]
fn validate_rejects_non_utf8_and_reports_unreadable_files() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("latin1.json");
    fs::write(&file, b"{\"schema\":\"\xe9\"}").unwrap();
    let out = agui(&["validate-artifact", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "malformed: not UTF-8 text (byte 11)\n");
    let out = agui(&[
        "validate-artifact",
        dir.path().join("missing.json").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("agui: cannot open"));
}

/// A run without any `timestamp`: from a file, the error names the flags
/// that help; from the store it was imported into, the store's receive
/// times stand in, with millisecond precision.
#[test]
fn export_from_a_store_uses_its_receive_times() {
    let events = [
        r#"{"type":"RUN_STARTED","threadId":"t","runId":"r1"}"#,
        r#"{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}"#,
        r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"hi"}"#,
        r#"{"type":"TEXT_MESSAGE_END","messageId":"a1"}"#,
        r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r1"}"#,
    ]
    .join("\n");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.ndjson");
    fs::write(&file, &events).unwrap();
    let out = agui(&["export-artifact", file.to_str().unwrap(), "--run", "r1"]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--started-at") && err.contains("--store URL --thread"),
        "{err}"
    );
    let store = format!("sqlite://{}", dir.path().join("s.db").display());
    let before = chrono_now_ms();
    let imported = agui(&["store", "import", file.to_str().unwrap(), "--store", &store]);
    assert!(imported.status.success(), "{}", text(&imported.stderr));
    let out = agui(&[
        "export-artifact",
        "--store",
        &store,
        "--thread",
        "t",
        "--run",
        "r1",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let artifact: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(artifact["messages"][0]["content"], "hi", "{artifact}");
    let started = artifact["started_at"].as_str().unwrap();
    let finished = artifact["finished_at"].as_str().unwrap();
    assert_eq!(started.len(), "2026-01-01T00:00:00.000Z".len(), "{started}");
    assert!(finished >= started, "{started} {finished}");
    assert!(started[..10] >= before[..10], "{started} vs {before}");
    // The artifact validates.
    let path = dir.path().join("a.json");
    fs::write(&path, &out.stdout).unwrap();
    let valid = agui(&["validate-artifact", path.to_str().unwrap()]);
    assert!(valid.status.success(), "{}", text(&valid.stdout));
    // A file and a store at once is a usage error.
    let out = agui(&[
        "export-artifact",
        file.to_str().unwrap(),
        "--store",
        &store,
        "--thread",
        "t",
        "--run",
        "r1",
    ]);
    assert!(!out.status.success());
}

/// Today's date as RFC 3339 (enough for a day comparison), from `date`.
fn chrono_now_ms() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.000Z"])
        .output()
        .unwrap();
    text(&out.stdout).trim().to_owned()
}
