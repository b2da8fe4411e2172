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
        // Valid JSON (a slice of an event's text): walked in place unless
        // a key has escapes, which the JSON library decodes.
        let mut map = RawMap::default();
        if agui_protocol::members_of_valid(raw, |key, value| {
            map.insert(key.to_owned(), value.to_owned())
        }) {
            return Some(map);
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
/// writes it once parsed. A literal, a number without an exponent, and a
/// string, object or array already in that form (`is_canonical`: no blank
/// between tokens, no repeated or reserved key, no exponent, only the
/// library's own escapes) are copied; anything else is parsed and written
/// again (escapes, spacing and repeated keys change, and an exponent gets
/// its sign written: `1e5` is `1e+5`).
pub(crate) fn push_canonical(text: &mut String, raw: &str) -> Result<(), serde_json::Error> {
    let plain = match raw.as_bytes().first() {
        Some(b'{' | b'[') => is_canonical(raw),
        Some(b'"') => string_body(raw).is_some_and(|b| canonical_body(b.as_bytes())),
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

/// True when the body of a JSON string (its text between the quotes, from
/// valid JSON) is written as the JSON library writes the string it decodes
/// to: every escape is one the library writes (`\"`, `\\`, `\b`, `\f`, `\n`,
/// `\r`, `\t`, and `\u00xx` in lowercase hex for the other control
/// characters); no `\/`, no other `\u`.
pub(crate) fn canonical_body(body: &[u8]) -> bool {
    let mut i = 0;
    while let Some(off) = body[i..].iter().position(|&b| b == b'\\') {
        let at = i + off;
        match body.get(at + 1) {
            Some(b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't') => i = at + 2,
            Some(b'u') => {
                let Some(&[b'0', b'0', high, low]) = body.get(at + 2..at + 6) else {
                    return false;
                };
                let low = match low {
                    b'0'..=b'9' => low - b'0',
                    b'a'..=b'f' => low - b'a' + 10,
                    _ => return false,
                };
                let code = match high {
                    b'0' => low,
                    b'1' => 16 + low,
                    _ => return false,
                };
                // These five have their short escapes.
                if matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                    return false;
                }
                i = at + 6;
            }
            _ => return false,
        }
    }
    true
}

/// True when `raw`, an object or array from valid JSON, is written as the
/// JSON library writes it once parsed: no blank between tokens, strings in
/// [`canonical_body`] form, numbers without an exponent, no key repeated
/// within an object and none that starts with `$` (the library's reserved
/// keys do). Conservative: `false` only costs a parse.
pub(crate) fn is_canonical(raw: &str) -> bool {
    let b = raw.as_bytes();
    // Per open container: for an object, the keys seen so far, and whether
    // the next string is a key.
    let mut stack: Vec<Option<Vec<&[u8]>>> = Vec::new();
    let mut expect_key = false;
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'{' => {
                stack.push(Some(Vec::new()));
                expect_key = true;
                i += 1;
            }
            b'[' => {
                stack.push(None);
                expect_key = false;
                i += 1;
            }
            b'}' | b']' => {
                stack.pop();
                expect_key = false;
                i += 1;
            }
            b',' => {
                expect_key = matches!(stack.last(), Some(Some(_)));
                i += 1;
            }
            b':' => {
                expect_key = false;
                i += 1;
            }
            b'"' => {
                let start = i + 1;
                let mut j = start;
                loop {
                    match b.get(j) {
                        Some(b'"') => break,
                        Some(b'\\') => j += 2,
                        Some(_) => j += 1,
                        None => return false,
                    }
                }
                let body = &b[start..j];
                if !canonical_body(body) {
                    return false;
                }
                if expect_key {
                    let Some(Some(keys)) = stack.last_mut() else {
                        return false;
                    };
                    if body.first() == Some(&b'$') || keys.contains(&body) {
                        return false;
                    }
                    keys.push(body);
                }
                i = j + 1;
            }
            b't' | b'n' => i += 4,
            b'f' => i += 5,
            b'-' | b'0'..=b'9' => {
                while let Some(&d) = b.get(i) {
                    match d {
                        b'-' | b'+' | b'.' | b'0'..=b'9' => i += 1,
                        b'e' | b'E' => return false,
                        _ => break,
                    }
                }
            }
            _ => return false,
        }
    }
    stack.is_empty()
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

    /// What the JSON library writes for a raw value once parsed.
    fn library(raw: &str) -> String {
        serde_json::to_string(&serde_json::from_str::<serde_json::Value>(raw).unwrap()).unwrap()
    }

    #[test]
    fn canonical_values_are_written_as_they_are_and_others_as_parsed() {
        let cases = [
            r#"{"a":1,"b":[true,false,null,"x"],"c":{}}"#,
            r#"{"a":"tab\there","b":"\u001f\u0000","c":"\"\\"}"#,
            r#"{"a":"\u001F"}"#,
            r#"{"a":"\u0009"}"#,
            r#"{"a":"\/"}"#,
            r#"{"a":"\u00e9"}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":{"b":1},"b":{"b":2}}"#,
            r#"{"a":{"b":1,"b":1}}"#,
            r#"{"$x":1}"#,
            r#"{"a":1e5}"#,
            r#"{"a":-0.50,"b":[1.0,-2,3.25]}"#,
            r#"{ "a":1}"#,
            r#"[[],{},[{"a":[]}],"é\n"]"#,
            r#"[1,{"k":"v","k2":"v"},{"k":"w"}]"#,
        ];
        for raw in cases {
            let mut text = String::new();
            push_canonical(&mut text, raw).unwrap();
            assert_eq!(text, library(raw), "{raw}");
            // Sound always; complete but for the conservative `$` rule.
            if is_canonical(raw) || !raw.contains('$') {
                assert_eq!(is_canonical(raw), raw == library(raw), "{raw}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 512,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// A string body is canonical exactly when the library writes the
        /// string it decodes to with the same body.
        #[test]
        fn canonical_bodies_are_the_library_s(
            s in proptest::string::string_regex("[a-z\"\\\\/\u{0}-\u{1f}\u{7f}é\u{2028}]{0,12}").unwrap(),
            pick in proptest::collection::vec(0u8..4, 12),
        ) {
            // The same string written with different escapes.
            let mut body = String::new();
            for (c, p) in s.chars().zip(pick.iter().cycle()) {
                match (c, p) {
                    ('/', 0) => body.push_str("\\/"),
                    (c, 1) => body.push_str(&format!("\\u{:04x}", c as u32 & 0xffff)),
                    (c, 2) => body.push_str(&format!("\\u{:04X}", c as u32 & 0xffff)),
                    (c, _) => {
                        let w = serde_json::to_string(&c.to_string()).unwrap();
                        body.push_str(&w[1..w.len() - 1]);
                    }
                }
            }
            let raw = format!("\"{body}\"");
            if let Ok(decoded) = serde_json::from_str::<String>(&raw) {
                let written = serde_json::to_string(&decoded).unwrap();
                proptest::prop_assert_eq!(canonical_body(body.as_bytes()), written == raw, "{}", raw);
                let mut text = String::new();
                push_canonical(&mut text, &raw).unwrap();
                proptest::prop_assert_eq!(text, written);
            }
        }

        /// Objects and arrays, written compactly, pretty, and with repeated
        /// keys: `push_canonical` gives what the library gives.
        #[test]
        fn containers_are_written_as_the_library_writes_them(
            value in arbitrary_json(),
            pretty in proptest::bool::ANY,
            repeat in proptest::bool::ANY,
        ) {
            let mut raw = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                serde_json::to_string(&value).unwrap()
            };
            if repeat && raw.starts_with("{\"") {
                raw = format!("{{\"k\":1,{}", &raw[1..]).replacen("{\"k\":1,", "{\"k\":1,\"k\":[2],", 1);
            }
            if raw.starts_with('{') || raw.starts_with('[') {
                let mut text = String::new();
                push_canonical(&mut text, &raw).unwrap();
                proptest::prop_assert_eq!(&text, &library(&raw));
                if is_canonical(&raw) || !raw.contains('$') {
                    proptest::prop_assert_eq!(is_canonical(&raw), raw == library(&raw));
                }
            }
        }
    }

    fn arbitrary_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[a-z$\"\\\\/\n\u{1}é]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::vec(("[a-c$\n]{0,3}", inner), 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
