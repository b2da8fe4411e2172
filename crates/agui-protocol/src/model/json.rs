//! Reading typed values out of `serde_json::Value`s, one field at a time,
//! with the field path in every error; and the macros that declare the
//! protocol's objects, literal enums and discriminated unions.

use serde_json::{Map, Number, Value};

use super::error::{SchemaError, SchemaErrorKind, describe, quote};

/// A protocol type that can be read from a JSON value under the AG-UI 1.0
/// schema. Keys the type does not declare are kept (see each type's `extra`).
pub trait FromValue: Sized {
    /// Reads `value`. The error's path is relative to `value`.
    fn from_value(value: Value) -> Result<Self, SchemaError>;
}

pub(crate) fn wrong_type(expected: &'static str, found: &Value) -> SchemaError {
    SchemaError::new(SchemaErrorKind::WrongType {
        expected,
        found: describe(found),
    })
}

impl FromValue for Value {
    fn from_value(value: Value) -> Result<Self, SchemaError> {
        Ok(value)
    }
}

impl FromValue for String {
    fn from_value(value: Value) -> Result<Self, SchemaError> {
        match value {
            Value::String(s) => Ok(s),
            other => Err(wrong_type("a string", &other)),
        }
    }
}

impl FromValue for bool {
    fn from_value(value: Value) -> Result<Self, SchemaError> {
        match value {
            Value::Bool(b) => Ok(b),
            other => Err(wrong_type("a boolean", &other)),
        }
    }
}

/// A JSON object: `metadata`, activity `content`, `responseSchema`.
impl FromValue for Map<String, Value> {
    fn from_value(value: Value) -> Result<Self, SchemaError> {
        match value {
            Value::Object(map) => Ok(map),
            other => Err(wrong_type("an object", &other)),
        }
    }
}

impl<T: FromValue> FromValue for Vec<T> {
    fn from_value(value: Value) -> Result<Self, SchemaError> {
        match value {
            Value::Array(items) => items
                .into_iter()
                .enumerate()
                .map(|(i, item)| T::from_value(item).map_err(|e| e.at_index(i)))
                .collect(),
            other => Err(wrong_type("an array", &other)),
        }
    }
}

/// The numeric value of a JSON number as JavaScript reads it (nearest double).
pub(crate) fn js_number(n: &Number) -> f64 {
    // With `arbitrary_precision` the text is kept; Rust's float parsing rounds
    // to nearest like JavaScript's. Overflow gives an infinity, as in JS.
    n.to_string().parse::<f64>().unwrap_or(f64::NAN)
}

/// 2^53 − 1, JavaScript's `Number.MAX_SAFE_INTEGER`.
pub(crate) const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// An object being read: known keys are taken out, the rest is kept.
pub(crate) struct Obj {
    map: Map<String, Value>,
}

impl Obj {
    pub(crate) fn new(value: Value) -> Result<Obj, SchemaError> {
        match value {
            Value::Object(map) => Ok(Obj { map }),
            other => Err(wrong_type("an object", &other)),
        }
    }

    /// A required key.
    pub(crate) fn req<T: FromValue>(&mut self, key: &str) -> Result<T, SchemaError> {
        match self.map.shift_remove(key) {
            Some(value) => T::from_value(value).map_err(|e| e.at_key(key)),
            None => Err(SchemaError::new(SchemaErrorKind::Missing).at_key(key)),
        }
    }

    /// An optional key: absent is `None`; a present value (`null` included)
    /// must match `T`.
    pub(crate) fn opt<T: FromValue>(&mut self, key: &str) -> Result<Option<T>, SchemaError> {
        match self.map.shift_remove(key) {
            Some(value) => T::from_value(value).map(Some).map_err(|e| e.at_key(key)),
            None => Ok(None),
        }
    }

    /// An optional free-form key that may hold anything but a bare `null`.
    pub(crate) fn opt_non_null(&mut self, key: &str) -> Result<Option<Value>, SchemaError> {
        match self.map.shift_remove(key) {
            Some(Value::Null) => Err(wrong_type("any value except null", &Value::Null).at_key(key)),
            other => Ok(other),
        }
    }

    /// Takes a discriminator and checks it against the accepted values.
    pub(crate) fn tag(
        &mut self,
        key: &str,
        accepted: &'static [&'static str],
    ) -> Result<String, SchemaError> {
        let found = match self.map.shift_remove(key) {
            Some(Value::String(s)) if accepted.contains(&s.as_str()) => return Ok(s),
            Some(Value::String(s)) => quote(&s),
            Some(other) => describe(&other).to_owned(),
            None => return Err(SchemaError::new(SchemaErrorKind::Missing).at_key(key)),
        };
        Err(SchemaError::new(SchemaErrorKind::NotOneOf {
            expected: accepted,
            found,
        })
        .at_key(key))
    }

    /// Drops a key that was read elsewhere.
    pub(crate) fn discard(&mut self, key: &str) {
        self.map.shift_remove(key);
    }

    /// The keys nobody took.
    pub(crate) fn rest(self) -> Map<String, Value> {
        self.map
    }
}

/// Declares a protocol object: a struct with one public field per declared
/// key plus `extra` (every other key, kept verbatim), its reader and writer.
///
/// Field kinds: `req` (key required), `opt` (key optional, `null` must match
/// the type), `opt_non_null` (`Option<Value>`, anything but a bare `null`),
/// `flat` (a group of keys read by another type, e.g. the event base).
/// An optional `tag "key" = "value";` is a fixed discriminator written first.
macro_rules! json_object {
    (
        $(#[$meta:meta])*
        $(tag $tag:literal = $tagval:literal;)?
        pub struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                $wire:literal => $field:ident : $ty:ty = $how:ident,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $(
                $(#[$fmeta])*
                pub $field: $ty,
            )*
            /// Keys the protocol does not declare here, kept and written back.
            pub extra: serde_json::Map<String, serde_json::Value>,
        }

        impl $name {
            /// Reads the declared keys from an object whose discriminator (if
            /// any) was already taken; everything left becomes `extra`.
            #[allow(unused_mut)]
            pub(crate) fn from_obj(
                mut obj: $crate::model::json::Obj,
            ) -> Result<Self, $crate::model::SchemaError> {
                let mut value = Self::read_fields(&mut obj)?;
                value.extra = obj.rest();
                Ok(value)
            }

            #[allow(unused_variables)]
            pub(crate) fn read_fields(
                obj: &mut $crate::model::json::Obj,
            ) -> Result<Self, $crate::model::SchemaError> {
                Ok($name {
                    $( $field: json_object!(@read $how, obj, $wire, $ty), )*
                    extra: serde_json::Map::new(),
                })
            }

            #[allow(unused_variables)]
            pub(crate) fn write_fields<M: serde::ser::SerializeMap>(
                &self,
                map: &mut M,
            ) -> Result<(), M::Error> {
                $( json_object!(@write $how, map, $wire, &self.$field); )*
                for (key, value) in &self.extra {
                    map.serialize_entry(key, value)?;
                }
                Ok(())
            }

            /// The object as a JSON value.
            pub fn to_value(&self) -> serde_json::Value {
                // Serializing plain data into a `Value` cannot fail.
                serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
            }
        }

        impl $crate::model::FromValue for $name {
            fn from_value(value: serde_json::Value) -> Result<Self, $crate::model::SchemaError> {
                #[allow(unused_mut)]
                let mut obj = $crate::model::json::Obj::new(value)?;
                $( obj.tag($tag, &[$tagval])?; )?
                Self::from_obj(obj)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(None)?;
                $( map.serialize_entry($tag, $tagval)?; )?
                self.write_fields(&mut map)?;
                map.end()
            }
        }

        json_object!(@deserialize $name);
    };

    (@deserialize $name:ident) => {
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = <serde_json::Value as serde::Deserialize>::deserialize(deserializer)?;
                <$name as $crate::model::FromValue>::from_value(value)
                    .map_err(<D::Error as serde::de::Error>::custom)
            }
        }
    };

    (@read req, $obj:ident, $wire:literal, $ty:ty) => { $obj.req($wire)? };
    (@read opt, $obj:ident, $wire:literal, $ty:ty) => { $obj.opt($wire)? };
    (@read opt_non_null, $obj:ident, $wire:literal, $ty:ty) => { $obj.opt_non_null($wire)? };
    (@read flat, $obj:ident, $wire:literal, $ty:ty) => { <$ty>::read_flat($obj)? };

    (@write req, $map:ident, $wire:literal, $value:expr) => {
        $map.serialize_entry($wire, $value)?
    };
    (@write opt, $map:ident, $wire:literal, $value:expr) => {
        if let Some(v) = $value {
            $map.serialize_entry($wire, v)?;
        }
    };
    (@write opt_non_null, $map:ident, $wire:literal, $value:expr) => {
        json_object!(@write opt, $map, $wire, $value)
    };
    (@write flat, $map:ident, $wire:literal, $value:expr) => {
        $value.write_flat($map)?
    };
}

/// Declares a closed set of string values (a literal or an enum).
macro_rules! json_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// Every accepted wire value.
            pub const VALUES: &'static [&'static str] = &[$($wire),*];

            /// The value as written on the wire.
            pub fn as_str(&self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl $crate::model::FromValue for $name {
            fn from_value(value: serde_json::Value) -> Result<Self, $crate::model::SchemaError> {
                let found = match &value {
                    $( serde_json::Value::String(s) if s == $wire => return Ok($name::$variant), )*
                    serde_json::Value::String(s) => $crate::model::error::quote(s),
                    other => $crate::model::error::describe(other).to_owned(),
                };
                Err($crate::model::SchemaError::new(
                    $crate::model::SchemaErrorKind::NotOneOf { expected: Self::VALUES, found },
                ))
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        json_object!(@deserialize $name);
    };
}

/// Declares a union of objects told apart by a discriminator key. Each
/// member type is a `json_object!` with the matching `tag`.
macro_rules! json_union {
    (
        $(#[$meta:meta])*
        tag $tag:literal;
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident($ty:ty) = $wire:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub enum $name {
            $( $(#[$vmeta])* $variant($ty), )*
        }

        impl $name {
            /// Every accepted discriminator value.
            pub const TAGS: &'static [&'static str] = &[$($wire),*];

            /// The discriminator as written on the wire.
            pub fn tag(&self) -> &'static str {
                match self {
                    $( $name::$variant(_) => $wire, )*
                }
            }

            /// Keys the protocol does not declare on this member.
            pub fn extra(&self) -> &serde_json::Map<String, serde_json::Value> {
                match self {
                    $( $name::$variant(v) => &v.extra, )*
                }
            }

            /// The value as JSON.
            pub fn to_value(&self) -> serde_json::Value {
                serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
            }
        }

        impl $crate::model::FromValue for $name {
            fn from_value(value: serde_json::Value) -> Result<Self, $crate::model::SchemaError> {
                let mut obj = $crate::model::json::Obj::new(value)?;
                let tag = obj.tag($tag, Self::TAGS)?;
                match tag.as_str() {
                    $( $wire => <$ty>::from_obj(obj).map($name::$variant), )*
                    // `tag` only returns accepted values.
                    _ => Err($crate::model::SchemaError::new(
                        $crate::model::SchemaErrorKind::Missing,
                    ).at_key($tag)),
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self {
                    $( $name::$variant(v) => v.serialize(serializer), )*
                }
            }
        }

        $( impl From<$ty> for $name {
            fn from(value: $ty) -> Self {
                $name::$variant(value)
            }
        } )*

        json_object!(@deserialize $name);
    };
}

pub(crate) use {json_enum, json_object, json_union};
