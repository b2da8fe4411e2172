//! Damaged and foreign documents: each fails with a clear error naming the
//! problem and where; unknown fields inside events are kept; the JSON and
//! NDJSON layouts read the same.

mod common;

use agui_session::{Damage, Layout, SessionError};
use common::*;

async fn doc(layout: Layout) -> String {
    let s: agui_store::Store = agui_store::Store::memory();
    multi_agent_thread(&s, "t").await;
    export_text(&s, "t", layout).await
}

fn check(text: &str) -> Result<agui_session::Summary, SessionError> {
    agui_session::read(std::io::Cursor::new(text.as_bytes()), |_| Ok(()))
}

fn damage(text: &str) -> (Damage, u64, String) {
    match check(text) {
        Err(SessionError::Damaged {
            damage,
            record,
            problem,
        }) => (damage, record, problem),
        other => panic!("expected a damaged document, got {other:?}"),
    }
}

/// Recomputes the end record, as a forger would (so that the check that
/// fires is the one under test, not the checksum).
fn reseal(lines: &[String]) -> String {
    let mut sum = agui_session::Checksum::default();
    for l in lines {
        sum.record(l);
    }
    let end = format!(
        r#"{{"kind":"end","records":{},"sha256":"{}"}}"#,
        sum.records(),
        sum.hex()
    );
    let mut out = lines.join("\n");
    out.push('\n');
    out.push_str(&end);
    out.push('\n');
    out
}

fn body(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().map(str::to_owned).collect();
    v.pop(); // the end record
    v
}

#[tokio::test]
async fn both_layouts_read_the_same() {
    let a = check(&doc(Layout::Json).await).unwrap();
    let b = check(&doc(Layout::Ndjson).await).unwrap();
    assert_eq!(a.sha256, b.sha256);
    assert_eq!(a.events, 30);
    assert_eq!(a.runs.len(), 5);
    assert_eq!(a.participants, ["research", "writer"]);
    assert_eq!(a.channels, ["research", "writer"]);
    // Pretty-printed, it still checks (the checksum ignores whitespace
    // outside strings).
    let v: serde_json::Value = serde_json::from_str(&doc(Layout::Json).await).unwrap();
    let pretty = serde_json::to_string_pretty(&v).unwrap();
    assert_eq!(check(&pretty).unwrap().sha256, a.sha256);
}

#[tokio::test]
async fn a_flipped_byte_is_detected() {
    let text = doc(Layout::Ndjson).await;
    // Inside a string of an event: still JSON, the checksum catches it.
    let i = text.find("research one").unwrap();
    let mut bytes = text.clone().into_bytes();
    bytes[i] ^= 0x01;
    let flipped = String::from_utf8(bytes).unwrap();
    let (d, record, problem) = damage(&flipped);
    assert_eq!(d, Damage::Checksum);
    assert!(problem.contains("SHA-256"), "{problem}");
    assert_eq!(record as usize, text.lines().count());
    // On structure: the record is no longer JSON, named by its number.
    let i = text.find("\"seq\":7").unwrap();
    let mut bytes = text.into_bytes();
    bytes[i] = b'{';
    let (d, record, _) = damage(&String::from_utf8(bytes).unwrap());
    assert!(matches!(d, Damage::NotJson | Damage::Schema), "{d:?}");
    assert!(record > 1);
}

#[tokio::test]
async fn a_removed_run_is_named() {
    let text = doc(Layout::Ndjson).await;
    let mut lines = body(&text);
    let pos = lines
        .iter()
        .position(|l| l.contains("\"runId\":\"r3\"") && l.contains("\"kind\":\"run\""))
        .unwrap();
    lines.remove(pos);
    // Unsealed: the sequence check fires before the end is reached.
    let mut unsealed = lines.join("\n");
    unsealed.push('\n');
    unsealed.push_str(text.lines().last().unwrap());
    let (d, _, problem) = damage(&unsealed);
    assert_eq!(d, Damage::Sequence, "{problem}");
    assert!(
        problem.contains("r4") || problem.contains("r3"),
        "{problem}"
    );
    let (d, _, problem) = damage(&reseal(&lines));
    assert_eq!(d, Damage::Sequence, "{problem}");
}

#[tokio::test]
async fn a_cycle_in_the_lineage_is_named() {
    let text = doc(Layout::Ndjson).await;
    let mut lines = body(&text);
    // r1's parent becomes r2, whose parent is r1.
    let pos = lines
        .iter()
        .position(|l| l.contains("\"runId\":\"r1\"") && l.contains("\"kind\":\"run\""))
        .unwrap();
    lines[pos] = lines[pos].replace("\"parentRunId\":null", "\"parentRunId\":\"r2\"");
    let (d, _, problem) = damage(&reseal(&lines));
    assert_eq!(d, Damage::Lineage, "{problem}");
    assert!(problem.contains("cycle"), "{problem}");
    assert!(
        problem.contains("r1") && problem.contains("r2"),
        "{problem}"
    );
    // An unknown parent.
    let mut lines = body(&text);
    lines[pos] = lines[pos].replace("\"parentRunId\":null", "\"parentRunId\":\"ghost\"");
    let (d, _, problem) = damage(&reseal(&lines));
    assert_eq!(d, Damage::Lineage);
    assert!(problem.contains("ghost"), "{problem}");
}

#[tokio::test]
async fn an_unknown_version_or_record_kind_fails_fast() {
    let text = doc(Layout::Ndjson).await;
    let lines = body(&text);
    let mut future = lines.clone();
    future[0] = future[0].replace("agui.session.v1", "agui.session.v2");
    let (d, record, problem) = damage(&reseal(&future));
    assert_eq!((d, record), (Damage::UnknownVersion, 1));
    assert!(
        problem.contains("agui.session.v2") && problem.contains("agui.session.v1"),
        "{problem}"
    );
    // A future version may change anything else too: still this error.
    let (d, _, _) =
        damage("{\"kind\":\"header\",\"format\":\"agui.session.v9\",\"brandNew\":true}\n");
    assert_eq!(d, Damage::UnknownVersion);
    let mut kind = lines.clone();
    kind.insert(3, r#"{"kind":"annotation","text":"hi"}"#.to_owned());
    let (d, record, problem) = damage(&reseal(&kind));
    assert_eq!((d, record), (Damage::UnknownKind, 4));
    assert!(problem.contains("annotation"), "{problem}");
}

#[tokio::test]
async fn empty_and_header_only_documents() {
    let (d, _, problem) = damage("");
    assert_eq!(d, Damage::Empty);
    assert!(problem.contains("empty"), "{problem}");
    let (d, _, _) = damage("  \n\n");
    assert_eq!(d, Damage::Empty);
    let text = doc(Layout::Ndjson).await;
    let header = text.lines().next().unwrap();
    let (d, _, problem) = damage(&format!("{header}\n"));
    assert_eq!(d, Damage::Truncated);
    assert!(problem.contains("only a header"), "{problem}");
    // Cut anywhere else.
    let cut: Vec<&str> = text.lines().take(12).collect();
    let (d, record, problem) = damage(&cut.join("\n"));
    assert_eq!((d, record), (Damage::Truncated, 12), "{problem}");
    let json = doc(Layout::Json).await;
    let (d, _, _) = damage(&json[..json.len() / 2]);
    assert_eq!(d, Damage::Truncated);
}

#[tokio::test]
async fn unknown_fields_inside_events_are_kept_and_records_are_strict() {
    let text = doc(Layout::Ndjson).await;
    let s: agui_store::Store = agui_store::Store::memory();
    import_text(&s, &text, opts(None)).await.unwrap();
    let events = s.read_range(TENANT, "t", 1, u64::MAX).await.unwrap();
    assert!(events.iter().any(|e| {
        e.event
            .json()
            .contains(r#""payload":{"n":1.50,"z":[]},"extra":"r1""#)
    }));
    // An unknown field on a record (not inside an event) is a schema error.
    let mut lines = body(&text);
    lines[1] = lines[1].replacen('{', "{\"surprise\":1,", 1);
    let (d, record, problem) = damage(&reseal(&lines));
    assert_eq!((d, record), (Damage::Schema, 2), "{problem}");
    assert!(problem.contains("surprise"), "{problem}");
}

/// Receive times a store cannot hold are refused by name: one earlier than
/// the event before it (a store keeps them in order, so an import would
/// silently change it and the restore would not be exact), and one past
/// what a time can be written as (the store listed an empty `updatedAt`).
#[tokio::test]
async fn impossible_receive_times_are_refused() {
    let text = doc(Layout::Ndjson).await;
    let lines = body(&text);
    let second = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("\"kind\":\"event\""))
        .nth(1)
        .unwrap()
        .0;
    for (value, says) in [
        (serde_json::json!(1), "earlier than the event before it"),
        (
            serde_json::json!(i64::MAX),
            "outside 1970-01-01 to 9999-12-31",
        ),
        (serde_json::json!(-5), "outside 1970-01-01 to 9999-12-31"),
    ] {
        let mut forged = lines.clone();
        let mut rec: serde_json::Value = serde_json::from_str(&forged[second]).unwrap();
        rec["receivedAt"] = value;
        forged[second] = rec.to_string();
        let (d, record, problem) = damage(&reseal(&forged));
        assert_eq!(d, Damage::Sequence, "{problem}");
        assert_eq!(record, second as u64 + 1, "{problem}");
        assert!(problem.contains("event seq 2"), "{problem}");
        assert!(problem.contains(says), "{problem}");
    }
}
