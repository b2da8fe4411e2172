//! Reading a few top-level fields of an event as raw JSON, without building a
//! DOM and without losing the difference between `null` and absent.

use std::borrow::Cow;
use std::fmt;

use serde::Deserializer;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

/// Up to four named top-level fields of one event, each as its raw JSON text.
pub(crate) struct Fields<'a, const N: usize> {
    pub(crate) values: [Option<&'a str>; N],
}

impl<'a, const N: usize> Fields<'a, N> {
    /// Reads `names` from `json`. `None` when the text is not an object or a
    /// wanted key appears twice (JavaScript would keep the last one; callers
    /// treat such events as opaque, which is always safe).
    pub(crate) fn read(json: &'a str, names: [&'static str; N]) -> Option<Self> {
        // The one-pass scanner first (no allocation, no DOM); it defers to
        // the JSON library for what it does not read itself (escaped keys).
        let mut values: [Option<&'a str>; N] = [None; N];
        let mut duplicate = false;
        let scanned = agui_protocol::for_each_member(json, |key, value| {
            if let Some(i) = names.iter().position(|n| *n == key) {
                duplicate |= values[i].is_some();
                values[i] = Some(value);
            }
        });
        if scanned {
            return (!duplicate).then_some(Fields { values });
        }
        let mut de = serde_json::Deserializer::from_str(json);
        de.deserialize_map(FieldsVisitor { names }).ok()
    }

    /// The raw text of field `i`, if present.
    pub(crate) fn raw(&self, i: usize) -> Option<&'a str> {
        self.values[i]
    }

    /// Field `i` as a decoded string: `Some(Ok(s))` for a JSON string,
    /// `Some(Err(()))` for any other JSON value, `None` when absent.
    pub(crate) fn string(&self, i: usize) -> Option<Result<Cow<'a, str>, ()>> {
        let raw = self.raw(i)?;
        if !raw.starts_with('"') {
            return Some(Err(()));
        }
        Some(serde_json::from_str::<Cow<'a, str>>(raw).map_err(|_| ()))
    }
}

struct FieldsVisitor<const N: usize> {
    names: [&'static str; N],
}

impl<'de, const N: usize> Visitor<'de> for FieldsVisitor<N> {
    type Value = Fields<'de, N>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut values: [Option<&'de str>; N] = [None; N];
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match self.names.iter().position(|n| *n == key) {
                Some(i) => {
                    if values[i].is_some() {
                        return Err(de::Error::custom("duplicate field"));
                    }
                    values[i] = Some(map.next_value::<&'de RawValue>()?.get());
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Fields { values })
    }
}

/// Every top-level member of an event: its key (decoded) and its value's
/// raw text, in the order written (a repeated key appears each time; the
/// last one wins, as in JavaScript).
pub(crate) struct Members<'a> {
    list: Vec<(Cow<'a, str>, &'a str)>,
}

impl<'a> Members<'a> {
    /// Reads the members of `json`; `None` when it is not an object.
    pub(crate) fn read(json: &'a str) -> Option<Self> {
        let mut list = Vec::with_capacity(8);
        if agui_protocol::for_each_member(json, |key, value| {
            list.push((Cow::Borrowed(key), value));
        }) {
            return Some(Members { list });
        }
        let mut de = serde_json::Deserializer::from_str(json);
        de.deserialize_map(MembersVisitor).ok()
    }

    /// The value of `key` (its last occurrence).
    pub(crate) fn get(&self, key: &str) -> Option<&'a str> {
        self.list
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| *v)
    }

    /// The members in the order written.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &'a str)> + '_ {
        self.list.iter().map(|(k, v)| (k.as_ref(), *v))
    }
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Members<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut list = Vec::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            list.push((key, map.next_value::<&'de RawValue>()?.get()));
        }
        Ok(Members { list })
    }
}

/// Two raw JSON values with the same meaning: the same text, or, when the
/// texts differ (spacing, escapes, key order), equal as parsed values.
pub(crate) fn same_json(a: &str, b: &str) -> bool {
    a == b
        || matches!(
            (
                serde_json::from_str::<serde_json::Value>(a),
                serde_json::from_str::<serde_json::Value>(b),
            ),
            (Ok(x), Ok(y)) if x == y
        )
}

/// The body of a JSON string literal (its text between the quotes, escapes
/// kept), or `None` when `raw` is not a string.
pub(crate) fn string_body(raw: &str) -> Option<&str> {
    if raw.len() >= 2 && raw.starts_with('"') && raw.ends_with('"') {
        Some(&raw[1..raw.len() - 1])
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_and_absent_differ() {
        let f = Fields::read(r#"{"a":null,"b":"x\"y","c":[1]}"#, ["a", "b", "d"]).unwrap();
        assert_eq!(f.raw(0), Some("null"));
        assert_eq!(f.string(1).unwrap().unwrap(), "x\"y");
        assert!(f.raw(2).is_none());
        assert!(f.string(0).unwrap().is_err());
    }

    #[test]
    fn duplicates_and_non_objects_are_refused() {
        assert!(Fields::read(r#"{"a":1,"a":2}"#, ["a"]).is_none());
        assert!(Fields::read(r#"[1]"#, ["a"]).is_none());
        // A duplicate of a key nobody asked for is not our concern.
        assert!(Fields::read(r#"{"z":1,"z":2}"#, ["a"]).is_some());
    }

    #[test]
    fn string_bodies_keep_escapes() {
        assert_eq!(string_body(r#""a\nb""#), Some(r"a\nb"));
        assert_eq!(string_body("1"), None);
    }
}
