//! The compacted message snapshot artifact: data-driven export cases under
//! `fixtures/artifact/export/`, and validation of every valid and malformed
//! example under `fixtures/artifact/{valid,malformed}/`.

use std::fs;
use std::path::{Path, PathBuf};

use agui_history::artifact::{
    self, Artifact, ExportOptions, MAX_ERROR_MESSAGE_CHARS, Malformed, Source, TerminalEvent,
};
use agui_protocol::Event;
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/artifact")
}

fn dirs(path: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    out.sort();
    out
}

fn read_events(path: &Path) -> Vec<Event> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| Event::from_json(l).unwrap())
        .collect()
}

#[test]
fn export_cases() {
    let cases = dirs(&fixtures().join("export"));
    assert!(cases.len() >= 12);
    for dir in cases {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let events = read_events(&dir.join("events.ndjson"));
        let case: Value =
            serde_json::from_str(&fs::read_to_string(dir.join("case.json")).unwrap()).unwrap();
        let args = &case["args"];
        let options = ExportOptions {
            source: args["source"].as_str().map(|s| s.parse().unwrap()),
            started_at: args["startedAt"].as_str().map(str::to_owned),
            finished_at: args["finishedAt"].as_str().map(str::to_owned),
        };
        let result = artifact::export(&events, args["run"].as_str().unwrap(), &options);
        match case.get("error") {
            Some(error) => {
                let err = result.expect_err(&name);
                assert_eq!(err.to_string(), error.as_str().unwrap(), "{name}");
            }
            None => {
                let export = result.unwrap_or_else(|e| panic!("{name}: {e}"));
                let written = serde_json::to_value(&export.artifact).unwrap();
                assert_eq!(written, case["artifact"], "{name}");
                // Key order is the documented one.
                let keys: Vec<&String> = written.as_object().unwrap().keys().collect();
                let want: Vec<&String> = case["artifact"].as_object().unwrap().keys().collect();
                assert_eq!(keys, want, "{name}");
                assert_eq!(export.source.to_string(), case["source"], "{name}");
                let skipped: Vec<String> = export
                    .skipped
                    .iter()
                    .map(|s| s.reason.to_string())
                    .collect();
                assert_eq!(json!(skipped), case["skipped"], "{name}");
                assert_eq!(
                    export.error_message_cut_from.map(|n| n as u64),
                    case.get("errorMessageCutFrom").and_then(Value::as_u64),
                    "{name}"
                );
                // What we write, we read back whole.
                let text = serde_json::to_string_pretty(&export.artifact).unwrap();
                assert_eq!(artifact::validate(&text), Ok(export.artifact), "{name}");
            }
        }
    }
}

#[test]
fn a_valid_export_of_an_errored_run_with_a_parent() {
    let events = read_events(&fixtures().join("export/errored/events.ndjson"));
    let export = artifact::export(&events, "bad", &ExportOptions::default()).unwrap();
    let a = &export.artifact;
    assert_eq!(a.terminal_event, TerminalEvent::RunError);
    assert_eq!(a.error_code.as_deref(), Some("upstream_5xx"));
    let message = a.error_message.as_deref().unwrap();
    assert_eq!(message.chars().count(), MAX_ERROR_MESSAGE_CHARS);
    assert!(message.ends_with('…'));

    let events = read_events(&fixtures().join("export/parent/events.ndjson"));
    let export = artifact::export(&events, "run-3", &ExportOptions::default()).unwrap();
    assert_eq!(export.source, Source::Derived);
    assert_eq!(export.artifact.parent_run_id_ref.as_deref(), Some("run-1"));
    assert!(
        export.artifact.messages.iter().all(|m| m.id != "b2"),
        "run-2's answer leaked"
    );
}

#[test]
fn valid_examples_validate() {
    let files = dirs(&fixtures().join("valid"));
    assert!(files.len() >= 5);
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        let artifact: Artifact =
            artifact::validate(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // Re-serializing gives the same JSON value.
        let again: Value = serde_json::to_value(&artifact).unwrap();
        let original: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(again, original, "{}", file.display());
    }
}

#[test]
fn every_malformed_example_is_rejected_with_its_reason() {
    let dir = fixtures().join("malformed");
    let reasons: serde_json::Map<String, Value> =
        serde_json::from_str(&fs::read_to_string(dir.join("reasons.json")).unwrap()).unwrap();
    let files: Vec<PathBuf> = dirs(&dir)
        .into_iter()
        .filter(|p| p.file_name().unwrap() != "reasons.json")
        .collect();
    assert_eq!(files.len(), reasons.len(), "every example has a reason");
    for file in files {
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        let text = fs::read_to_string(&file).unwrap();
        let err = artifact::validate(&text).expect_err(&name);
        match &reasons[&name] {
            Value::String(reason) => assert_eq!(&err.to_string(), reason, "{name}"),
            _ => assert!(matches!(err, Malformed::Syntax(_)), "{name}: {err}"),
        }
    }
}

#[test]
fn validation_never_panics_on_mangled_artifacts() {
    let text = fs::read_to_string(fixtures().join("valid/errored-with-parent.json")).unwrap();
    // Every prefix, and every single-byte deletion, is either valid or an
    // error value (mostly syntax errors).
    let bytes = text.as_bytes();
    for cut in 0..bytes.len() {
        if let Ok(prefix) = std::str::from_utf8(&bytes[..cut]) {
            let _ = artifact::validate(prefix);
        }
        let mut deleted = bytes.to_vec();
        deleted.remove(cut);
        if let Ok(s) = std::str::from_utf8(&deleted) {
            let _ = artifact::validate(s);
        }
    }
}
