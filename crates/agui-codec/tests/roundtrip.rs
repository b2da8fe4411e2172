//! Property tests: arbitrary events survive encoding and decoding in every
//! format, through every decoding path, split anywhere, as the same text and
//! the same JSON value.

mod common;

use std::fmt::Write as _;

use agui_codec::Format;
use agui_protocol::Event;
use proptest::prelude::*;

/// A JSON string literal holding any Unicode, written with a random mix of
/// raw characters, short escapes and `\u` escapes (surrogate pairs beyond the
/// BMP).
fn json_string() -> impl Strategy<Value = String> {
    prop::collection::vec((any::<char>(), 0u8..4), 0..10).prop_map(|chars| {
        let mut s = String::from("\"");
        for (c, mode) in chars {
            match (c, mode) {
                ('"', _) => s.push_str("\\\""),
                ('\\', _) => s.push_str("\\\\"),
                ('\n', 1) => s.push_str("\\n"),
                ('/', 1) => s.push_str("\\/"),
                (c, _) if (c as u32) < 0x20 => {
                    let _ = write!(s, "\\u{:04x}", c as u32);
                }
                (c, 0) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(s, "\\u{unit:04X}");
                    }
                }
                (c, _) => s.push(c),
            }
        }
        s.push('"');
        s
    })
}

/// A JSON number, often longer or more precise than an f64.
fn json_number() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("12345678901234567890123".to_owned()),
        Just("1.10".to_owned()),
        Just("-0".to_owned()),
        Just("1e400".to_owned()),
        "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?",
    ]
}

fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        json_number(),
        json_string(),
    ];
    leaf.prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((json_string(), inner), 0..5).prop_map(|kv| {
                let body: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", body.join(","))
            }),
        ]
    })
}

fn event_type() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "RUN_STARTED",
            "TEXT_MESSAGE_CONTENT",
            "TOOL_CALL_ARGS",
            "STATE_DELTA",
            "STATE_SNAPSHOT",
            "MESSAGES_SNAPSHOT",
            "CUSTOM",
            "RAW",
        ])
        .prop_map(|t| format!("\"{t}\"")),
        json_string(),
    ]
}

/// An event: a `type` (known or not) among random fields, with random
/// spaces and tabs between tokens.
fn event() -> impl Strategy<Value = Event> {
    let ws = prop::sample::select(vec!["", "", "", " ", "\t", "  "]);
    (
        event_type(),
        prop::collection::vec((json_string(), json_value(), ws.clone()), 0..6),
        0usize..6,
        ws,
    )
        .prop_filter_map("a field named type", |(ty, fields, at, ws)| {
            let mut parts = Vec::new();
            for (k, v, w) in &fields {
                if k == "\"type\"" {
                    return None;
                }
                parts.push(format!("{k}{w}:{w}{v}"));
            }
            parts.insert(at.min(parts.len()), format!("\"type\"{ws}:{ws}{ty}"));
            let text = format!("{{{ws}{}{ws}}}", parts.join(&format!("{ws},{ws}")));
            Some(Event::from_json(&text).expect("generated events are valid"))
        })
}

fn check(events: &[Event], cuts: &[usize], buf_cap: usize) {
    let expected: common::Outcome = events.iter().map(|e| Ok(e.json().to_owned())).collect();
    for format in [Format::Json, Format::Ndjson, Format::Sse] {
        for ids in [false, true] {
            let bytes = common::encode(events, format, ids);
            let cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
            let got = common::decode_every_way(&bytes, format, &cuts, buf_cap);
            assert_eq!(got, expected, "{format} (ids: {ids})");
            for (text, original) in got.iter().zip(events) {
                let decoded = Event::from_json(text.as_ref().unwrap()).unwrap();
                assert_eq!(decoded.to_value(), original.to_value());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn events_survive_every_codec(
        events in prop::collection::vec(event(), 0..8),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
        buf_cap in 1usize..24,
    ) {
        check(&events, &cuts, buf_cap);
    }
}

#[test]
fn handpicked_events_survive_every_codec() {
    let texts = [
        r#"{"type":"CUSTOM","name":"n","value":{"big":12345678901234567890123,"precise":1.10,"exp":-1.5E+300}}"#,
        r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"\ud83d\ude00 \u2028 \"q\" \\ \/ \b\f\n\r\t"}"#,
        r#"{"unknown":null,"type":"SOMETHING_NEW","nested":{"type":1,"a":[null,[],{}]}}"#,
        "{ \"type\" :\t\"RAW\" , \"event\" : \"data: x\\n\\ndata: y\" }",
        r#"{"type":"STATE_DELTA","delta":[{"op":"add","path":"/a\u0000b","value":"é€𝄞"}]}"#,
    ];
    let events: Vec<Event> = texts.iter().map(|t| Event::from_json(t).unwrap()).collect();
    for cap in [1, 2, 3, 7, 64] {
        let cuts: Vec<usize> = (0..40).map(|i| i * 13 + cap).collect();
        check(&events, &cuts, cap);
    }
}
