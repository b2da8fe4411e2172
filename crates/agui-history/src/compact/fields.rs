//! Reading a few top-level fields of an event as raw JSON, without building a
//! DOM and without losing the difference between `null` and absent.

use std::borrow::Cow;
use std::fmt;

use agui_protocol::EventRef;
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
    pub(crate) fn read(event: impl Into<EventRef<'a>>, names: [&'static str; N]) -> Option<Self> {
        // The scan's member table or a walk over the members first (no
        // allocation, no DOM, no second validation); the JSON library reads
        // an event with an escaped key.
        let event = event.into();
        let json = event.json();
        let mut values: [Option<&'a str>; N] = [None; N];
        let mut duplicate = false;
        let scanned = event.for_each_member(|key, value| {
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
    pub(crate) fn read(event: impl Into<EventRef<'a>>) -> Option<Self> {
        let event = event.into();
        let json = event.json();
        let mut list = Vec::with_capacity(8);
        if event.for_each_member(|key, value| {
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

/// A JSON object kept as its members' raw values: merged the way
/// `mergeMetadata` merges (shallow, last write wins, a new key goes last)
/// and written as the JSON library writes the parsed object, without
/// building a DOM for the values.
#[derive(Debug, Default)]
pub(crate) struct RawMap {
    members: Vec<(String, String)>,
}

impl RawMap {
    /// Reads an object's raw text; `None` when it is not an object.
    pub(crate) fn parse(raw: &str) -> Option<RawMap> {
        if !raw.starts_with('{') {
            return None;
        }
        let mut de = serde_json::Deserializer::from_str(raw);
        let members = de.deserialize_map(MembersVisitor).ok()?;
        de.end().ok()?;
        let mut map = RawMap {
            members: Vec::with_capacity(members.list.len()),
        };
        for (key, value) in members.list {
            map.insert(key.into_owned(), value.to_owned());
        }
        Some(map)
    }

    fn insert(&mut self, key: String, value: String) {
        match self.members.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.members.push((key, value)),
        }
    }

    /// Merges `other` into this map, member by member.
    pub(crate) fn merge(&mut self, other: RawMap) {
        for (key, value) in other.members {
            self.insert(key, value);
        }
    }

    /// Appends the object as the JSON library writes it once parsed.
    pub(crate) fn write(&self, text: &mut String) -> Result<(), serde_json::Error> {
        text.push('{');
        for (i, (key, value)) in self.members.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            push_json_string(text, key)?;
            text.push(':');
            push_canonical(text, value)?;
        }
        text.push('}');
        Ok(())
    }
}

/// Merges an incoming object into an optional one (`mergeMetadata`).
pub(crate) fn merge_raw(target: &mut Option<RawMap>, incoming: RawMap) {
    match target {
        None => *target = Some(incoming),
        Some(existing) => existing.merge(incoming),
    }
}

/// Writes `s` as a JSON string, as the JSON library writes it.
pub(crate) fn push_json_string(text: &mut String, s: &str) -> Result<(), serde_json::Error> {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        text.push('"');
        text.push_str(s);
        text.push('"');
    } else {
        text.push_str(&serde_json::to_string(s)?);
    }
    Ok(())
}

/// Writes a raw JSON value (from a validated event) as the JSON library
/// writes it once parsed: a literal, a string without escapes or a number
/// without an exponent is already in that form (numbers keep their
/// spelling, but an exponent gets its sign written: `1e5` is `1e+5`); an
/// escaped string, an exponent, an object or an array is parsed and written
/// again (escapes, spacing and repeated keys change).
pub(crate) fn push_canonical(text: &mut String, raw: &str) -> Result<(), serde_json::Error> {
    let plain = match raw.as_bytes().first() {
        Some(b'{' | b'[') => false,
        Some(b'"') => !raw.contains('\\'),
        Some(b't' | b'f' | b'n') => true,
        _ => !raw.contains(['e', 'E']),
    };
    if plain {
        text.push_str(raw);
    } else {
        let value: serde_json::Value = serde_json::from_str(raw)?;
        text.push_str(&serde_json::to_string(&value)?);
    }
    Ok(())
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
    use agui_protocol::Event;

    fn ev(text: &str) -> Event {
        Event::from_json(text).unwrap()
    }

    #[test]
    fn null_and_absent_differ() {
        let e = ev(r#"{"type":"X","a":null,"b":"x\"y","c":[1]}"#);
        let f = Fields::read(&e, ["a", "b", "d"]).unwrap();
        assert_eq!(f.raw(0), Some("null"));
        assert_eq!(f.string(1).unwrap().unwrap(), "x\"y");
        assert!(f.raw(2).is_none());
        assert!(f.string(0).unwrap().is_err());
    }

    #[test]
    fn duplicates_and_non_objects_are_refused() {
        assert!(Fields::read(&ev(r#"{"type":"X","a":1,"a":2}"#), ["a"]).is_none());
        // A duplicate of a key nobody asked for is not our concern.
        assert!(Fields::read(&ev(r#"{"type":"X","z":1,"z":2}"#), ["a"]).is_some());
        // An escaped key is read by the JSON library, decoded.
        let e = ev(r#"{"type":"X","\u0061":1,"b":2}"#);
        let f = Fields::read(&e, ["a", "b"]).unwrap();
        assert_eq!((f.raw(0), f.raw(1)), (Some("1"), Some("2")));
        assert!(Fields::read(&ev(r#"{"type":"X","a":1,"\u0061":2}"#), ["a"]).is_none());
    }

    /// Parsing, merging and writing raw objects gives what the JSON
    /// library gives with parsed maps and `mergeMetadata`.
    #[test]
    fn raw_maps_merge_and_write_as_parsed_maps_do() {
        use serde_json::{Map, Value};
        let objects = [
            r#"{}"#,
            r#"{"a":1,"b":"x"}"#,
            r#"{ "b" : 2.50 , "c" : [ 1, {"d":null} ] }"#,
            r#"{"a":1e5,"a":"again","\u00e9\n":"\u00e9\/","z":true}"#,
            r#"{"c":{"y":1,"x":2,"y":3},"e":-0.0E-1,"f":false}"#,
        ];
        for a in objects {
            for b in objects {
                let mut raw = RawMap::parse(a);
                merge_raw(&mut raw, RawMap::parse(b).unwrap());
                let mut written = String::new();
                raw.unwrap().write(&mut written).unwrap();
                let mut parsed: Option<Map<String, Value>> = serde_json::from_str(a).ok();
                super::super::deltas::merge_metadata(&mut parsed, serde_json::from_str(b).unwrap());
                assert_eq!(
                    written,
                    serde_json::to_string(&parsed).unwrap(),
                    "{a} + {b}"
                );
            }
        }
        assert!(RawMap::parse("[1]").is_none());
        assert!(RawMap::parse("null").is_none());
    }

    #[test]
    fn string_bodies_keep_escapes() {
        assert_eq!(string_body(r#""a\nb""#), Some(r"a\nb"));
        assert_eq!(string_body("1"), None);
    }
}
