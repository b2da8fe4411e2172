//! The few JavaScript value semantics the official reducer relies on.
//!
//! The reference reducer runs on unvalidated events (no schema enforcement
//! between chunk expansion and apply), so a field may hold any JSON value.
//! These helpers reproduce what JavaScript does with such a value: strict
//! equality of ids (`===`), truthiness, string conversion in a template
//! literal, the `+` operator, and object spread.

use std::borrow::Cow;

use serde_json::{Map, Number, Value};

/// The identity of an id as JavaScript's `===` (and `Map`/`Set` lookups) sees
/// it. Objects and arrays are never equal to anything read from another JSON
/// document, so they have no key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// The property is absent (`undefined`).
    Undefined,
    Null,
    Bool(bool),
    /// An IEEE double, `-0` folded onto `0` (JSON cannot spell `NaN`).
    Num(u64),
    Str(Box<str>),
}

/// A borrowed id, for look-ups that must not allocate.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum KeyRef<'a> {
    Undefined,
    Null,
    Bool(bool),
    Num(u64),
    Str(Cow<'a, str>),
    /// An object or array: equal to nothing.
    Never,
}

impl KeyRef<'_> {
    pub(crate) fn to_owned_key(&self) -> Option<Key> {
        Some(match self {
            KeyRef::Undefined => Key::Undefined,
            KeyRef::Null => Key::Null,
            KeyRef::Bool(b) => Key::Bool(*b),
            KeyRef::Num(n) => Key::Num(*n),
            KeyRef::Str(s) => Key::Str(s.as_ref().into()),
            KeyRef::Never => return None,
        })
    }
}

fn num_bits(n: &Number) -> u64 {
    let f = number_f64(n);
    if f == 0.0 {
        0.0f64.to_bits()
    } else {
        f.to_bits()
    }
}

/// A JSON number as JavaScript reads it (overflow gives an infinity).
pub(crate) fn number_f64(n: &Number) -> f64 {
    n.as_f64()
        .or_else(|| n.to_string().parse::<f64>().ok())
        .unwrap_or(f64::NAN)
}

/// The key of an optional value (absent is `undefined`).
pub(crate) fn key_of(value: Option<&Value>) -> KeyRef<'_> {
    match value {
        None => KeyRef::Undefined,
        Some(Value::Null) => KeyRef::Null,
        Some(Value::Bool(b)) => KeyRef::Bool(*b),
        Some(Value::Number(n)) => KeyRef::Num(num_bits(n)),
        Some(Value::String(s)) => KeyRef::Str(Cow::Borrowed(s)),
        Some(_) => KeyRef::Never,
    }
}

/// The key of an optional raw value, borrowing string ids when possible.
pub(crate) fn key_of_raw(raw: Option<&str>) -> Result<KeyRef<'_>, serde_json::Error> {
    let Some(text) = raw else {
        return Ok(KeyRef::Undefined);
    };
    Ok(match text.as_bytes().first() {
        Some(b'"') => KeyRef::Str(serde_json::from_str::<Cow<'_, str>>(text)?),
        Some(b'{' | b'[') => KeyRef::Never,
        _ => {
            let v: Value = serde_json::from_str(text)?;
            match v {
                Value::Null => KeyRef::Null,
                Value::Bool(b) => KeyRef::Bool(b),
                Value::Number(n) => KeyRef::Num(num_bits(&n)),
                _ => KeyRef::Never,
            }
        }
    })
}

/// The id (`.id`) of a message as JavaScript reads it: primitives and arrays
/// have none.
pub(crate) fn prop<'v>(message: &'v Value, name: &str) -> Option<&'v Value> {
    match message {
        Value::Object(map) => map.get(name),
        _ => None,
    }
}

/// `value === "text"`.
pub(crate) fn is_str(value: Option<&Value>, text: &str) -> bool {
    matches!(value, Some(Value::String(s)) if s == text)
}

/// JavaScript truthiness.
pub(crate) fn truthy(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => {
            let f = number_f64(n);
            f != 0.0 && !f.is_nan()
        }
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}

/// `a === b` for two values read from separate documents (objects and
/// arrays are distinct references, hence never equal).
pub(crate) fn strict_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    let ka = key_of(a);
    ka != KeyRef::Never && ka == key_of(b)
}

/// `String(value)`, as a template literal converts it.
pub(crate) fn to_js_string(value: Option<&Value>, out: &mut String) {
    match value {
        None => out.push_str("undefined"),
        Some(Value::Null) => out.push_str("null"),
        Some(Value::Bool(b)) => out.push_str(if *b { "true" } else { "false" }),
        Some(Value::Number(n)) => out.push_str(&number_to_js_string(number_f64(n))),
        Some(Value::String(s)) => out.push_str(s),
        Some(Value::Array(items)) => {
            // Array.prototype.join(","): null and undefined become "".
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if !item.is_null() {
                    to_js_string(Some(item), out);
                }
            }
        }
        Some(Value::Object(_)) => out.push_str("[object Object]"),
    }
}

/// ECMAScript `Number::toString(x)` (radix 10).
pub(crate) fn number_to_js_string(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x == 0.0 {
        return "0".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    // Shortest round-trip digits and exponent, from Rust's `{:e}` formatting.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i64;
    let e: i64 = exp.parse().unwrap_or(0);
    let n = e + 1; // position of the decimal point relative to the digits
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let sign_e = if n - 1 < 0 { '-' } else { '+' };
        let abs_e = (n - 1).abs();
        if k == 1 {
            format!("{digits}e{sign_e}{abs_e}")
        } else {
            format!("{}.{}e{sign_e}{abs_e}", &digits[..1], &digits[1..])
        }
    };
    format!("{sign}{body}")
}

/// `ToNumber` of a primitive (`None` for objects and strings, which make `+`
/// concatenate).
fn to_number_primitive(value: Option<&Value>) -> Option<f64> {
    match value {
        None => Some(f64::NAN),
        Some(Value::Null) => Some(0.0),
        Some(Value::Bool(b)) => Some(if *b { 1.0 } else { 0.0 }),
        Some(Value::Number(n)) => Some(number_f64(n)),
        Some(_) => None,
    }
}

/// A JavaScript number as a JSON value (`NaN` and infinities serialize as `null`).
pub(crate) fn js_number(x: f64) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    let text = number_to_js_string(x);
    serde_json::from_str::<Number>(&text)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

/// `a + b` (`a += b`) for JSON values: numeric addition when both are
/// non-string primitives, string concatenation otherwise.
pub(crate) fn js_add(a: Option<&Value>, b: Option<&Value>) -> Value {
    if let (Some(x), Some(y)) = (to_number_primitive(a), to_number_primitive(b)) {
        return js_number(x + y);
    }
    let mut out = String::new();
    to_js_string(a, &mut out);
    to_js_string(b, &mut out);
    Value::String(out)
}

/// `{ ...value }`: the own enumerable properties of a value, in order.
pub(crate) fn spread_into(target: &mut Map<String, Value>, value: Option<&Value>) {
    match value {
        Some(Value::Object(map)) => {
            for (k, v) in map {
                target.insert(k.clone(), v.clone());
            }
        }
        Some(Value::Array(items)) => {
            for (i, v) in items.iter().enumerate() {
                target.insert(i.to_string(), v.clone());
            }
        }
        Some(Value::String(s)) => {
            for (i, c) in s.chars().enumerate() {
                target.insert(i.to_string(), Value::String(c.to_string()));
            }
        }
        _ => {}
    }
}

/// `mergeMetadata(existing, incoming)` of `@ag-ui/core`: `incoming` absent
/// keeps `existing`; otherwise a new object `{...existing, ...incoming}`.
pub(crate) fn merge_metadata(existing: Option<&Value>, incoming: &Value) -> Value {
    let mut out = Map::new();
    spread_into(&mut out, existing);
    spread_into(&mut out, Some(incoming));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_print_like_javascript() {
        for (x, s) in [
            (1.0, "1"),
            (-2.5, "-2.5"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (123.456, "123.456"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(number_to_js_string(x), s);
        }
    }

    #[test]
    fn plus_and_template_strings() {
        assert_eq!(js_add(Some(&json!("a")), Some(&json!(1))), json!("a1"));
        assert_eq!(js_add(None, Some(&json!("x"))), json!("undefinedx"));
        assert_eq!(js_add(Some(&json!(1)), Some(&json!(true))), json!(2));
        let mut s = String::new();
        to_js_string(Some(&json!([1, null, [2, 3], {}])), &mut s);
        assert_eq!(s, "1,,2,3,[object Object]");
    }

    #[test]
    fn strict_equality_of_ids() {
        assert!(strict_eq(Some(&json!(1)), Some(&json!(1.0))));
        assert!(strict_eq(None, None));
        assert!(!strict_eq(Some(&json!({})), Some(&json!({}))));
        assert!(!strict_eq(Some(&json!("1")), Some(&json!(1))));
    }

    #[test]
    fn metadata_merge_is_a_shallow_last_write_wins_spread() {
        let merged = merge_metadata(
            Some(&json!({"a": {"x": 1}, "b": 1})),
            &json!({"a": {"y": 2}}),
        );
        assert_eq!(merged, json!({"a": {"y": 2}, "b": 1}));
        assert_eq!(merge_metadata(None, &json!(null)), json!({}));
        assert_eq!(merge_metadata(None, &json!([7])), json!({"0": 7}));
    }
}
