//! Scalars with rules of their own (integer timestamps, token counts, JSON
//! Pointers) and the base fields every event carries.

use serde::{Serialize, Serializer};
use serde_json::{Map, Number, Value};

use super::error::{SchemaError, SchemaErrorKind, quote};
use super::json::{FromValue, MAX_SAFE, Obj, js_number, wrong_type};

/// Free-form metadata: a JSON object (never `null`, never an array); any
/// value, `null` included, may sit under a key.
pub type Metadata = Map<String, Value>;

/// An event timestamp: an integer within ±(2^53−1), kept exactly as written
/// (`1.0` and `1e3` are integers too, as in JavaScript).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timestamp(Number);

impl Timestamp {
    /// A timestamp from an integer; `None` outside ±(2^53−1).
    pub fn new(value: i64) -> Option<Timestamp> {
        (value.unsigned_abs() <= MAX_SAFE as u64).then(|| Timestamp(Number::from(value)))
    }

    /// The value (conventionally epoch milliseconds).
    pub fn as_i64(&self) -> i64 {
        // Checked on construction: an integer within ±(2^53−1), exact in f64.
        js_number(&self.0) as i64
    }

    /// The number as written.
    pub fn as_number(&self) -> &Number {
        &self.0
    }
}

impl FromValue for Timestamp {
    fn from_value(value: Value) -> Result<Self, SchemaError> {
        match value {
            Value::Number(n) => {
                let x = js_number(&n);
                if x.is_finite() && x.fract() == 0.0 && x.abs() <= MAX_SAFE {
                    Ok(Timestamp(n))
                } else {
                    Err(SchemaError::new(SchemaErrorKind::BadNumber {
                        expected: "an integer within ±(2^53−1)",
                        found: n.to_string(),
                    }))
                }
            }
            other => Err(wrong_type("an integer", &other)),
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// A token count: a non-negative integer ≤ 2^53−1, kept exactly as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenCount(Number);

impl TokenCount {
    /// A count from an integer; `None` above 2^53−1.
    pub fn new(value: u64) -> Option<TokenCount> {
        (value <= MAX_SAFE as u64).then(|| TokenCount(Number::from(value)))
    }

    /// The count.
    pub fn as_u64(&self) -> u64 {
        // Checked on construction: a non-negative integer ≤ 2^53−1.
        js_number(&self.0) as u64
    }

    /// The number as written.
    pub fn as_number(&self) -> &Number {
        &self.0
    }
}

impl FromValue for TokenCount {
    fn from_value(value: Value) -> Result<Self, SchemaError> {
        match value {
            Value::Number(n) => {
                let x = js_number(&n);
                if x.is_finite() && x.fract() == 0.0 && (0.0..=MAX_SAFE).contains(&x) {
                    Ok(TokenCount(n))
                } else {
                    Err(SchemaError::new(SchemaErrorKind::BadNumber {
                        expected: "a non-negative integer ≤ 2^53−1",
                        found: n.to_string(),
                    }))
                }
            }
            other => Err(wrong_type("an integer", &other)),
        }
    }
}

impl Serialize for TokenCount {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// A JSON Pointer (RFC 6901), checked syntactically: empty, or `/`-prefixed
/// reference tokens in which `~` appears only as `~0` or `~1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsonPointer(String);

impl JsonPointer {
    /// Checks `text`; `None` when it is not a JSON Pointer.
    pub fn new(text: impl Into<String>) -> Option<JsonPointer> {
        let text = text.into();
        is_json_pointer(&text).then_some(JsonPointer(text))
    }

    /// The pointer as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The reference tokens, unescaped (`~1` → `/`, `~0` → `~`).
    pub fn tokens(&self) -> impl Iterator<Item = String> + '_ {
        self.0
            .split('/')
            .skip(1)
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
    }
}

fn is_json_pointer(text: &str) -> bool {
    if text.is_empty() {
        return true;
    }
    if !text.starts_with('/') {
        return false;
    }
    let bytes = text.as_bytes();
    bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| b != b'~' || matches!(bytes.get(i + 1), Some(b'0' | b'1')))
}

impl FromValue for JsonPointer {
    fn from_value(value: Value) -> Result<Self, SchemaError> {
        match value {
            Value::String(s) if is_json_pointer(&s) => Ok(JsonPointer(s)),
            Value::String(s) => Err(SchemaError::new(SchemaErrorKind::BadPointer {
                found: quote(&s),
            })),
            other => Err(wrong_type("a string", &other)),
        }
    }
}

impl Serialize for JsonPointer {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// The fields every event may carry: `timestamp`, `rawEvent`, `metadata`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventBase {
    /// `timestamp`: an integer within ±(2^53−1), conventionally epoch ms.
    pub timestamp: Option<Timestamp>,
    /// `rawEvent`: the upstream payload; anything but a bare `null`.
    pub raw_event: Option<Value>,
    /// `metadata`: an object.
    pub metadata: Option<Metadata>,
}

impl EventBase {
    pub(crate) fn read_flat(obj: &mut Obj) -> Result<EventBase, SchemaError> {
        Ok(EventBase {
            timestamp: obj.opt("timestamp")?,
            raw_event: obj.opt_non_null("rawEvent")?,
            metadata: obj.opt("metadata")?,
        })
    }

    pub(crate) fn write_flat<M: serde::ser::SerializeMap>(
        &self,
        map: &mut M,
    ) -> Result<(), M::Error> {
        if let Some(t) = &self.timestamp {
            map.serialize_entry("timestamp", t)?;
        }
        if let Some(r) = &self.raw_event {
            map.serialize_entry("rawEvent", r)?;
        }
        if let Some(m) = &self.metadata {
            map.serialize_entry("metadata", m)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn timestamps_follow_javascript_integers() {
        for ok in [
            "0",
            "-0",
            "1700000000000",
            "1.0",
            "1e3",
            "9007199254740991",
            "-9007199254740991",
        ] {
            let t = Timestamp::from_value(num(ok)).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert_eq!(Value::Number(t.as_number().clone()), num(ok));
        }
        for bad in [
            "1.5",
            "9007199254740993",
            "1e400",
            "12345678901234567890123",
        ] {
            let e = Timestamp::from_value(num(bad)).unwrap_err();
            assert!(
                matches!(e.kind(), SchemaErrorKind::BadNumber { .. }),
                "{bad}"
            );
        }
        assert!(Timestamp::from_value(num("\"1\"")).is_err());
        assert_eq!(Timestamp::new(-5).unwrap().as_i64(), -5);
        let spelled = Timestamp::from_value(num("1700000000000.0")).unwrap();
        assert_eq!(spelled.as_number().to_string(), "1700000000000.0");
        assert_eq!(spelled.as_i64(), 1_700_000_000_000);
        assert!(Timestamp::new(i64::MAX).is_none());
    }

    #[test]
    fn token_counts_are_non_negative_safe_integers() {
        assert_eq!(TokenCount::from_value(num("12")).unwrap().as_u64(), 12);
        assert!(TokenCount::from_value(num("-1")).is_err());
        assert!(TokenCount::from_value(num("0.5")).is_err());
        assert!(TokenCount::from_value(num("null")).is_err());
        assert!(TokenCount::new(u64::MAX).is_none());
    }

    #[test]
    fn json_pointers() {
        for ok in ["", "/", "/a", "/a/b", "/~0/~1", "//", "/a~1b", "/é😀"] {
            assert!(JsonPointer::new(ok).is_some(), "{ok:?}");
        }
        for bad in ["a", "a/b", "/~", "/~2", "/a~", "~0"] {
            assert!(JsonPointer::new(bad).is_none(), "{bad:?}");
        }
        let p = JsonPointer::new("/a~1b/c~0d").unwrap();
        assert_eq!(p.tokens().collect::<Vec<_>>(), ["a/b", "c~d"]);
    }
}
