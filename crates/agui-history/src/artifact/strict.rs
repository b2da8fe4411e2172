//! A JSON reader for validation: keeps object members in order and rejects
//! duplicate keys (which a plain parse would silently collapse).

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A parsed JSON value that remembers duplicate-free member order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool,
    Number,
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The JSON kind, for messages ("a string", "an object", ...).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool => "a boolean",
            Json::Number => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }
}

/// The key serde_json uses to hand an `arbitrary_precision` number to a
/// visitor as a one-member map.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Json, E> {
        Ok(Json::Bool)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Json, E> {
        Ok(Json::Number)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Json, E> {
        Ok(Json::Number)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Json, E> {
        Ok(Json::Number)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_owned()))
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Json>()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members: Vec<(String, Json)> = Vec::new();
        // Keys seen so far: a set, so that a wide object is checked in
        // linear time rather than by comparing every pair.
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == NUMBER_TOKEN && members.is_empty() {
                map.next_value::<de::IgnoredAny>()?;
                return Ok(Json::Number);
            }
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
            }
            let value = map.next_value::<Json>()?;
            members.push((key, value));
        }
        Ok(Json::Object(members))
    }
}

/// Parses one JSON document (surrounding whitespace allowed, nothing else).
pub(crate) fn parse(text: &str) -> Result<Json, serde_json::Error> {
    serde_json::from_str(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_rejects_duplicates() {
        let j = parse(r#" {"b":1,"a":[true,null,"x",{"n":1.5e3}]} "#).unwrap();
        let Json::Object(m) = j else { panic!() };
        assert_eq!(m[0], ("b".to_owned(), Json::Number));
        assert_eq!(m[1].0, "a");
        let err = parse(r#"{"a":1,"a":2}"#).unwrap_err().to_string();
        assert!(err.contains("duplicate key \"a\""), "{err}");
        assert!(parse(r#"{"x":{"a":1,"a":1}}"#).is_err());
        assert!(parse(r#"{} {}"#).is_err());
        assert!(parse("").is_err());
    }
}
