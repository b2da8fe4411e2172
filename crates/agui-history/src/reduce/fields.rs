//! A lazy view of an event's top-level fields.
//!
//! The reducer reads a handful of fields per event. This view keeps each
//! value as its raw JSON text and parses only what a rule needs. A key that
//! appears twice keeps its last value, as `JSON.parse` does.
//!
//! An event's text is valid JSON (the wire layer checked it), so the view
//! is read with [`agui_protocol::members_of_valid`], one walk that
//! checks nothing again; an object with an escaped key is read by
//! `serde_json` instead (a test holds the two ways to the same fields).

use std::borrow::Cow;
use std::fmt;

use agui_protocol::ObjectKey;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use super::js::{self, KeyRef};

pub(crate) struct Fields<'a> {
    items: Vec<(Cow<'a, str>, &'a str)>,
}

impl<'a> Fields<'a> {
    /// The members of an event's text, which must be valid JSON (an
    /// [`agui_protocol::Event`]'s: on other text the walk's answer means
    /// nothing). An escaped key sends the text through `serde_json`.
    pub(crate) fn parse(json: &'a str) -> Result<Fields<'a>, serde_json::Error> {
        let mut items = Vec::with_capacity(8);
        if agui_protocol::members_of_valid(json, |key, value| {
            items.push((Cow::Borrowed(key), value));
        }) {
            return Ok(Fields { items });
        }
        Fields::parse_slow(json)
    }

    /// [`Fields::parse`] through `serde_json`.
    fn parse_slow(json: &'a str) -> Result<Fields<'a>, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// The raw value of a field (`None` when absent).
    pub(crate) fn raw(&self, name: &str) -> Option<&'a str> {
        self.items
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }

    /// A field as a JSON value (`None` when absent).
    pub(crate) fn value(&self, name: &str) -> Result<Option<Value>, serde_json::Error> {
        self.raw(name).map(serde_json::from_str).transpose()
    }

    /// A field as an id for `===` look-ups.
    pub(crate) fn key(&self, name: &str) -> Result<KeyRef<'a>, serde_json::Error> {
        js::key_of_raw(self.raw(name))
    }

    /// A field as a string when it is one (borrowed when it has no escapes).
    pub(crate) fn str(&self, name: &str) -> Result<Option<Cow<'a, str>>, serde_json::Error> {
        match self.raw(name) {
            Some(text) if text.starts_with('"') => {
                if !text.contains('\\') && text.len() >= 2 {
                    Ok(Some(Cow::Borrowed(&text[1..text.len() - 1])))
                } else {
                    serde_json::from_str::<String>(text).map(|s| Some(Cow::Owned(s)))
                }
            }
            _ => Ok(None),
        }
    }

    /// True when the field is present and not `null` (`x != null`).
    pub(crate) fn is_set(&self, name: &str) -> bool {
        self.raw(name).is_some_and(|r| r != "null")
    }
}

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut items = Vec::with_capacity(8);
                while let Some(ObjectKey(k)) = map.next_key::<ObjectKey<'de>>()? {
                    let v: &'de RawValue = map.next_value()?;
                    items.push((k, v.get()));
                }
                Ok(Fields { items })
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agui_protocol::Event;

    fn members<'a>(f: &Fields<'a>) -> Vec<(String, &'a str)> {
        f.items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// Event texts with the keys the reducer reads, repeated keys, escaped
    /// keys, nested look-alikes and odd spacing.
    fn event_text() -> proptest::strategy::BoxedStrategy<String> {
        agui_testkit::texts::object_text(
            "TEXT_MESSAGE_CONTENT",
            &[
                "messageId",
                "delta",
                "role",
                "snapshot",
                "toolCallId",
                "message\\u0049d",
                "d\\\\x",
            ],
            &[
                "null",
                "\"m1\"",
                "\"m\\\"1\\u00e9\"",
                "-0.0",
                "1e2",
                "true",
                "{\"messageId\":\"inner\",\"a\":[1,{}]}",
                "[\"}\",{\"delta\":null}]",
            ],
            12,
            16,
        )
    }

    #[test]
    fn an_escaped_key_is_read_by_the_library() {
        let text = r#"{"type":"X","message\u0049d":"a","messageId":"b"}"#;
        let f = Fields::parse(text).unwrap();
        assert_eq!(f.raw("messageId"), Some("\"b\""));
        assert_eq!(members(&f), members(&Fields::parse_slow(text).unwrap()));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// The walk over an event's valid text reads what the library reads,
        /// and every look-up answers the same.
        #[test]
        fn the_walk_reads_the_fields_the_library_reads(text in event_text()) {
            let event = Event::from_json(&text).unwrap();
            let fast = Fields::parse(event.json()).unwrap();
            let slow = Fields::parse_slow(event.json()).unwrap();
            proptest::prop_assert_eq!(members(&fast), members(&slow));
            for name in ["messageId", "delta", "role", "snapshot", "toolCallId", "k3"] {
                proptest::prop_assert_eq!(fast.raw(name), slow.raw(name));
                proptest::prop_assert_eq!(fast.is_set(name), slow.is_set(name));
                proptest::prop_assert_eq!(
                    fast.str(name).unwrap(),
                    slow.str(name).unwrap()
                );
            }
        }
    }
}
