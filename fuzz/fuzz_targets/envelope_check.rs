//! The check of the `envelope` fuzz target, shared with its regression
//! replay (`crates/agui-protocol/tests/fuzz_regressions.rs`).
//!
//! Fuzzes the event envelope: the one-pass scanner (`Event::from_json`'s fast
//! path) must agree with the reference path on every input: the same
//! verdict, the same text and type, the same error. No panic on either.
//! Recording the members (`Event::check_recording`) gives the same verdict
//! and a table equal to the walk over the accepted text, each member's plain
//! bit set exactly when its value is a string without escapes. And on every event
//! it accepts, the schema check's walk
//! (`model::check_event`) gives the full parse's verdict and error.

use agui_protocol::Event;

fn outcome(
    result: Result<Event, agui_protocol::EnvelopeError>,
) -> Result<(String, String), String> {
    result
        .map(|e| (e.json().to_owned(), e.type_name().to_owned()))
        .map_err(|e| format!("{e:?}"))
}

/// Whether a raw JSON value is a string written without escapes: what a
/// member's plain bit must say.
fn plain(value: &str) -> bool {
    value.starts_with('"') && !value.contains('\\')
}

/// Panics when the property does not hold for `data`.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let fast = outcome(Event::from_json(text));
    let reference = outcome(Event::from_json_reference(text));
    assert_eq!(fast, reference, "text: {text:?}");
    let owned = outcome(Event::from_json_string(text.to_owned()));
    assert_eq!(owned, reference, "owned text: {text:?}");
    // Recording the members: the same verdict, and a table that holds
    // exactly what the walk over the accepted text finds.
    let mut members = Vec::new();
    let recorded = Event::check_recording(text, &mut members);
    let recorded_outcome = match &recorded {
        Ok(c) => Ok((c.json().to_owned(), c.event_type().as_str().to_owned())),
        Err(e) => Err(format!("{e:?}")),
    };
    assert_eq!(recorded_outcome, reference, "recorded: {text:?}");
    if let Ok(checked) = &recorded
        && !members.is_empty()
    {
        let json = checked.json();
        let table: Vec<_> = members.iter().map(|m| m.of(json).unwrap()).collect();
        let mut walked = Vec::new();
        assert!(agui_protocol::members_of_valid(json, |k, v| walked.push((k, v))));
        assert_eq!(table, walked, "members of {text:?}");
        for (m, (_, value)) in members.iter().zip(&table) {
            assert_eq!(
                m.is_plain(),
                plain(value),
                "plain bit of {value:?} in {text:?}"
            );
        }
    }
    if let Ok(event) = Event::from_json(text) {
        let walked = agui_protocol::model::check_event(&event).map_err(|e| e.to_string());
        let parsed = agui_protocol::model::parse_event(&event)
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert_eq!(walked, parsed, "schema check of {text:?}");
    }
}
