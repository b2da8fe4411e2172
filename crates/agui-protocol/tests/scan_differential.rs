//! The one-pass envelope scanner (the fast path of `Event::from_json`) against
//! the reference path (`serde_json` plus a byte pass): the same verdict, the
//! same text, the same type and the same error, on generated corpora, on
//! every fixture, on grammar-built JSON and on byte-level mutations of it.

use std::path::Path;

use agui_protocol::Event;
use agui_testkit::{Profile, chunk_soup, invalid_stream, realistic, stream};
use proptest::prelude::*;

/// Both paths' outcomes, comparable.
fn outcome(
    result: Result<Event, agui_protocol::EnvelopeError>,
) -> Result<(String, String), String> {
    result
        .map(|e| (e.json().to_owned(), e.type_name().to_owned()))
        .map_err(|e| format!("{e:?}"))
}

fn same(text: &str) {
    let fast = outcome(Event::from_json(text));
    let reference = outcome(Event::from_json_reference(text));
    assert_eq!(fast, reference, "text: {text:?}");
    let owned = outcome(Event::from_json_string(text.to_owned()));
    assert_eq!(owned, reference, "owned text: {text:?}");
    // Recording the members gives the same verdict, and the table it
    // records holds exactly the members the walk over the valid text finds.
    let mut members = vec![];
    let recorded = Event::check_recording(text, &mut members);
    let recorded_outcome = match &recorded {
        Ok(c) => Ok((c.json().to_owned(), c.event_type().as_str().to_owned())),
        Err(e) => Err(format!("{e:?}")),
    };
    assert_eq!(recorded_outcome, reference, "recorded: {text:?}");
    if let Ok(checked) = recorded
        && !members.is_empty()
    {
        let json = checked.json();
        let from_table: Vec<_> = members.iter().map(|m| m.of(json).unwrap()).collect();
        let mut walked = vec![];
        assert!(agui_protocol::members_of_valid(json, |k, v| walked.push((k, v))));
        assert_eq!(from_table, walked, "members of {text:?}");
    }
    same_as_a_prefix(text);
}

/// The scan of an event at the start of longer text (a JSON array's
/// element) agrees with the check of its exact text: whatever follows it,
/// it finds the same length, type and member table, or declines.
fn same_as_a_prefix(text: &str) {
    let mut whole = vec![];
    let checked = Event::check_recording(text, &mut whole);
    for suffix in ["", ",", "]", " ,{\"type\":\"X\"}", "}", "x\n", "\u{e9}"] {
        let longer = format!("{text}{suffix}");
        let mut members = vec![];
        let found = Event::scan_prefix_recording(longer.as_bytes(), &mut members);
        match &found {
            Some((ty, len)) => {
                let len = *len;
                let mut exact = vec![];
                let checked = Event::check_recording(&longer[..len], &mut exact)
                    .unwrap_or_else(|e| panic!("{longer:?}: prefix of {len} bytes: {e}"));
                assert_eq!(checked.json(), &longer[..len], "{longer:?}");
                assert_eq!(checked.event_type(), ty, "{longer:?}");
                assert!(!members.is_empty(), "{longer:?}: no table");
                assert_eq!(members, exact, "{longer:?}");
            }
            None => assert!(members.is_empty(), "{longer:?}: a table left behind"),
        }
        // An event the scanner takes whole, with nothing around it, is
        // found as a prefix of any longer text.
        if let Ok(c) = &checked
            && !whole.is_empty()
            && c.json().len() == text.len()
        {
            assert_eq!(
                found.as_ref().map(|&(_, len)| len),
                Some(text.len()),
                "{longer:?}"
            );
        }
    }
}

#[test]
fn every_generated_event_reads_the_same() {
    let mut count = 0;
    for &profile in Profile::ALL {
        for seed in 0..20 {
            for event in stream(profile, seed) {
                same(event.json());
                count += 1;
            }
        }
    }
    for event in realistic(20_000, 3) {
        same(event.json());
        count += 1;
    }
    for seed in 0..50 {
        for event in invalid_stream(seed).into_iter().chain(chunk_soup(seed)) {
            same(event.json());
            count += 1;
        }
    }
    assert!(count > 50_000, "{count}");
}

/// Every line of every fixture file, and each fixture file whole.
#[test]
fn every_fixture_line_reads_the_same() {
    fn walk(dir: &Path, texts: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("fixtures readable") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, texts);
            } else if let Ok(text) = std::fs::read(&path) {
                let text = String::from_utf8_lossy(&text).into_owned();
                for line in text.lines() {
                    texts.push(line.to_owned());
                    if let Some(data) = line.strip_prefix("data:") {
                        texts.push(data.to_owned());
                    }
                }
                texts.push(text);
            }
        }
    }
    let mut texts = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"),
        &mut texts,
    );
    assert!(texts.len() > 1000, "{}", texts.len());
    for text in &texts {
        same(text);
    }
}

#[test]
fn hand_picked_edges_read_the_same() {
    let nested = |levels: usize| {
        let inner = "[".repeat(levels - 1) + &"]".repeat(levels - 1);
        format!(r#"{{"type":"RAW","event":{inner}}}"#)
    };
    let mut cases: Vec<String> = [
        r#"{"type":"A"}"#,
        r#" {"type":"A"} "#,
        "\t{\"type\":\"A\"}\r\n",
        "{\"type\":\"A\",\n\"b\":1}",
        r#"{"type":"A","b":"\u0041"}"#,
        r#"{"type":"A","b":"\u00e9\ud83d\ude00"}"#,
        r#"{"type":"A","b":"\ud800"}"#,
        r#"{"type":"A","b":"$serde_json::private::Number"}"#,
        r#"{"type":"A","b":{"$serde_json::private::Number":"1"}}"#,
        r#"{"type":"A","b":"$serde_json::private::RawValue"}"#,
        r#"{"type":"A","b":{"$serde_json::private::RawValue":"1"}}"#,
        r#"{"$serde_json::private::RawValue":"{}","type":"A"}"#,
        r#"{"typ\u0065":"A"}"#,
        r#"{"type":"A\u00e9"}"#,
        r#"{"type":"A","type":"B"}"#,
        r#"{"type":1}"#,
        r#"{"type":null}"#,
        r#"{"type":["A"]}"#,
        r#"{"type":{"a":1}}"#,
        r#"{"a":1}"#,
        "{}",
        "[]",
        "1",
        "\"x\"",
        "",
        r#"{"type":"A","n":-0,"m":0.5e-7,"k":1E+2,"big":123456789012345678901234567890}"#,
        r#"{"type":"A","n":01}"#,
        r#"{"type":"A","n":1.}"#,
        r#"{"type":"A","n":-}"#,
        r#"{"type":"A","n":1e}"#,
        r#"{"type":"A","n":Infinity}"#,
        r#"{"type":"A","b":[1,2,]}"#,
        r#"{"type":"A",}"#,
        r#"{"type":"A"}x"#,
        r#"{"type":"A"}}"#,
        r#"{"type":"A","b":"tab	inside"}"#,
        "{\"type\":\"A\",\"b\":\"\u{7f}\u{80}\u{10ffff}\"}",
        r#"{"type":"A","b":"\/\b\f\n\r\t\"\\"}"#,
        r#"{"type":"A","b":"\x"}"#,
        r#"{"type":"A","b":"\u12g4"}"#,
        r#"{"type":"A","b":{"c":[{"d":null}],"e":{}}}"#,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    cases.push(nested(agui_protocol::MAX_DEPTH));
    cases.push(nested(agui_protocol::MAX_DEPTH + 1));
    cases.push(nested(10_000));
    for text in &cases {
        same(text);
    }
}

/// A JSON value built from a small grammar that reaches every branch of the
/// scanner: escapes of each kind, numbers of each shape, nesting.
fn json_value() -> impl Strategy<Value = String> {
    let string = prop::collection::vec(
        prop_oneof![
            "[a-zA-Z0-9 _:$]{0,6}",
            Just("\\n".to_owned()),
            Just("\\\"".to_owned()),
            Just("\\\\".to_owned()),
            Just("\\/".to_owned()),
            Just("\\u00e9".to_owned()),
            Just("\\u0041".to_owned()),
            Just("\\ud83d\\ude00".to_owned()),
            Just("\\udc00".to_owned()),
            Just("é€😀".to_owned()),
            Just("serde_json".to_owned()),
            Just("\t".to_owned()),
        ],
        0..4,
    )
    .prop_map(|parts| format!("\"{}\"", parts.concat()));
    let number = prop_oneof![
        Just("0".to_owned()),
        Just("-0".to_owned()),
        Just("12".to_owned()),
        Just("-3.25".to_owned()),
        Just("1e5".to_owned()),
        Just("6.02E-23".to_owned()),
        Just("123456789012345678901234567890".to_owned()),
    ];
    let leaf = prop_oneof![
        string.clone(),
        number,
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("null".to_owned()),
    ];
    let ws = prop_oneof![Just(""), Just(""), Just(" "), Just("\t"), Just("\n")];
    leaf.prop_recursive(5, 40, 5, move |inner| {
        prop_oneof![
            prop::collection::vec((inner.clone(), ws.clone()), 0..5).prop_map(|items| {
                let items: Vec<String> =
                    items.into_iter().map(|(v, w)| format!("{w}{v}")).collect();
                format!("[{}]", items.join(","))
            }),
            prop::collection::vec((string.clone(), inner, ws.clone()), 0..5).prop_map(|items| {
                let items: Vec<String> = items
                    .into_iter()
                    .map(|(k, v, w)| format!("{k}{w}:{v}"))
                    .collect();
                format!("{{{}}}", items.join(","))
            }),
        ]
    })
}

fn event_text() -> impl Strategy<Value = String> {
    let ty = prop_oneof![
        Just("\"TEXT_MESSAGE_CONTENT\"".to_owned()),
        Just("\"RUN_STARTED\"".to_owned()),
        Just("\"META\"".to_owned()),
        Just("\"A\\u00e9\"".to_owned()),
        Just("1".to_owned()),
        Just("[\"A\"]".to_owned()),
    ];
    let key = prop_oneof![
        Just("\"type\"".to_owned()),
        Just("\"delta\"".to_owned()),
        Just("\"typ\\u0065\"".to_owned()),
        Just("\"messageId\"".to_owned()),
        Just("\"\"".to_owned()),
    ];
    (
        prop::collection::vec((key, json_value()), 0..5),
        ty,
        0usize..6,
    )
        .prop_map(|(members, ty, at)| {
            let mut parts: Vec<String> = members
                .into_iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            let at = at.min(parts.len());
            parts.insert(at, format!("\"type\":{ty}"));
            format!("{{{}}}", parts.join(","))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn grammar_built_events_read_the_same(text in event_text()) {
        same(&text);
    }

    /// Byte-level damage: a byte replaced, removed or inserted, the text cut.
    #[test]
    fn mutated_events_read_the_same(
        text in event_text(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..4, prop::sample::select(
            b"{}[]\",:\\ \t\n0123456789-+.eEtrufalsn\x00\x1f\x7f".to_vec()
        )), 1..4),
    ) {
        let mut bytes = text.into_bytes();
        for (at, op, byte) in edits {
            if bytes.is_empty() {
                break;
            }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => { bytes.remove(i); }
                2 => bytes.insert(i, byte),
                _ => bytes.truncate(i),
            }
        }
        if let Ok(text) = String::from_utf8(bytes) {
            same(&text);
        }
    }
}
