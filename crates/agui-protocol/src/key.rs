//! [`ObjectKey`]: a JSON object key read without copying when it can be.

use std::borrow::Cow;

use serde::de::{self, Deserialize, Deserializer, Visitor};

/// An object key, borrowed from the text when it has no escapes (for readers
/// that walk an event's members with `serde_json` without building a
/// `Value`).
pub struct ObjectKey<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for ObjectKey<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ObjectKey<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<ObjectKey<'de>, E> {
                Ok(ObjectKey(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ObjectKey<'de>, E> {
                Ok(ObjectKey(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<ObjectKey<'de>, E> {
                Ok(ObjectKey(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}
