//! Robustness of the strict artifact reader: arbitrary text, mutations of a
//! valid artifact, and the deepest documents serde_json accepts come back as
//! an artifact or a `Malformed`, never as a panic; and big inputs are read
//! in time linear in their size.

use std::time::Instant;

use agui_history::artifact::validate;
use proptest::prelude::*;

const VALID: &str = r#"{"schema":"ag-ui.compacted-message-snapshot.export.v1","framework":"ag_ui","surface":"compacted_message_snapshot_artifact","thread_id_ref":"t","run_id_ref":"r","started_at":"2024-01-01T00:00:00.000Z","finished_at":"2024-01-01T00:00:01.5Z","terminal_event":"RUN_ERROR","error_code":"c","error_message":"m","messages":[{"id":"m1","role":"user","content":"hi","name":"n"}]}"#;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 1024,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let _ = validate(&text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = validate(&String::from_utf8_lossy(&bytes));
    }

    /// Replaces a span of the valid artifact with arbitrary text: times with
    /// multi-byte characters, truncated fractions, wrong kinds, cut documents.
    #[test]
    fn mutated_artifacts_never_panic(
        at in 0..VALID.len(),
        len in 0usize..24,
        insert in prop_oneof![
            any::<String>(),
            Just("é".to_owned()),
            Just(".".to_owned()),
            Just("\"2024-01-01T00:00:00.é\"".to_owned()),
            Just("\"9999-12-31T23:59:60.999999999999999999999Z\"".to_owned()),
            Just("[{\"$serde_json::private::Number\":1}]".to_owned()),
        ],
    ) {
        let mut text = VALID.to_owned();
        let start = (0..=at).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        let end = (start + len).min(text.len());
        let end = (end..=text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
        text.replace_range(start..end, &insert);
        let _ = validate(&text);
    }

    #[test]
    fn arbitrary_times_never_panic(time in "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9é]{0,3})?[Zz+é]?") {
        let text = VALID.replace("2024-01-01T00:00:00.000Z", &time);
        let _ = validate(&text);
    }
}

#[test]
fn the_valid_artifact_is_valid() {
    validate(VALID).unwrap();
}

#[test]
fn deep_documents_are_errors_not_overflows() {
    for depth in [100, 127, 128, 10_000] {
        let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let text = VALID.replace(r#""hi""#, &deep);
        assert!(validate(&text).is_err());
        let deep = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        let text = VALID.replace(r#""hi""#, &deep);
        assert!(validate(&text).is_err());
    }
}

/// Seconds `validate` takes on a message object with `n` distinct keys.
fn timed(n: usize) -> f64 {
    let mut text = String::from("{\"messages\":[{");
    for i in 0..n {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!("\"k{i}\":0"));
    }
    text.push_str("}]}");
    let started = Instant::now();
    assert!(validate(&text).is_err());
    started.elapsed().as_secs_f64()
}

/// An object with many distinct keys is checked without comparing every
/// pair of keys. A million keys take about a second here (debug build); a
/// pairwise check would make 5 * 10^11 comparisons, hours. The bound, 60 s,
/// separates the two however loaded the machine is, so the test measures the
/// complexity, not the speed.
#[test]
fn many_keys_are_checked_in_linear_time() {
    let took = timed(1_000_000);
    assert!(took < 60.0, "a million keys took {took:.1}s");
}
