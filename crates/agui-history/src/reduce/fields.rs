//! A lazy view of an event's top-level fields.
//!
//! The reducer reads a handful of fields per event. This view keeps each
//! value as its raw JSON text and parses only what a rule needs. A key that
//! appears twice keeps its last value, as `JSON.parse` does.

use std::borrow::Cow;
use std::fmt;

use agui_protocol::ObjectKey;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use super::js::{self, KeyRef};

pub(crate) struct Fields<'a> {
    items: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> Fields<'a> {
    pub(crate) fn parse(json: &'a str) -> Result<Fields<'a>, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// The raw value of a field (`None` when absent).
    pub(crate) fn raw(&self, name: &str) -> Option<&'a RawValue> {
        self.items
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }

    /// A field as a JSON value (`None` when absent).
    pub(crate) fn value(&self, name: &str) -> Result<Option<Value>, serde_json::Error> {
        self.raw(name)
            .map(|raw| serde_json::from_str(raw.get()))
            .transpose()
    }

    /// A field as an id for `===` look-ups.
    pub(crate) fn key(&self, name: &str) -> Result<KeyRef<'a>, serde_json::Error> {
        js::key_of_raw(self.raw(name))
    }

    /// A field as a string when it is one (borrowed when it has no escapes).
    pub(crate) fn str(&self, name: &str) -> Result<Option<Cow<'a, str>>, serde_json::Error> {
        match self.raw(name) {
            Some(raw) if raw.get().starts_with('"') => {
                let text = raw.get();
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
        self.raw(name).is_some_and(|r| r.get() != "null")
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
                    items.push((k, v));
                }
                Ok(Fields { items })
            }
        }
        d.deserialize_map(V)
    }
}
