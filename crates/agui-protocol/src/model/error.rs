//! Schema errors: what is wrong, and where (event type, field path, event index).

use std::fmt;

use crate::EventType;

/// One step of a [`FieldPath`]: an object key or an array index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathSegment {
    /// An object key, as written on the wire (`toolCalls`).
    Key(String),
    /// An array index, from 0.
    Index(usize),
}

/// Where a field sits inside a JSON document, written like
/// `messages[2].toolCalls[0].function.name`. The empty path is the document
/// itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldPath(Vec<PathSegment>);

impl FieldPath {
    /// The empty path (the document itself).
    pub fn root() -> FieldPath {
        FieldPath(Vec::new())
    }

    /// A path from its segments, outermost first.
    pub fn from_segments(segments: Vec<PathSegment>) -> FieldPath {
        FieldPath(segments)
    }

    /// The segments, outermost first.
    pub fn segments(&self) -> &[PathSegment] {
        &self.0
    }

    /// True for the document itself.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    fn prepend(&mut self, segment: PathSegment) {
        self.0.insert(0, segment);
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                PathSegment::Index(n) => write!(f, "[{n}]")?,
                PathSegment::Key(key) if is_plain_key(key) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(key)?;
                }
                PathSegment::Key(key) => {
                    let quoted = serde_json::to_string(key).map_err(|_| fmt::Error)?;
                    write!(f, "[{quoted}]")?;
                }
            }
        }
        Ok(())
    }
}

fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '@' || c == '-')
}

/// What is wrong with a value, independently of where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaErrorKind {
    /// A required key is absent.
    #[error("required field is missing")]
    Missing,
    /// The value has the wrong JSON type (`null` included).
    #[error("expected {expected}, found {found}")]
    WrongType {
        /// What the schema accepts, e.g. `a string`.
        expected: &'static str,
        /// What was found, e.g. `null` or `a number`.
        found: &'static str,
    },
    /// A string that must be one of a fixed set of values (a literal, an
    /// enum, or a union discriminator) is something else.
    #[error("expected {}, found {found}", one_of(.expected))]
    NotOneOf {
        /// The accepted values.
        expected: &'static [&'static str],
        /// What was found: a JSON-quoted string, or a JSON type.
        found: String,
    },
    /// A number outside what the schema accepts (a fraction, too large, negative).
    #[error("expected {expected}, found {found}")]
    BadNumber {
        /// What the schema accepts.
        expected: &'static str,
        /// The number as written.
        found: String,
    },
    /// A `path` or `from` of a JSON Patch operation is not a JSON Pointer.
    #[error(
        "expected a JSON Pointer (empty, or \"/\"-prefixed tokens using \"~\" only as ~0 or ~1), found {found}"
    )]
    BadPointer {
        /// The string, JSON-quoted.
        found: String,
    },
    /// An array is shorter than the schema allows.
    #[error("expected at least {min} element(s), found {found}")]
    TooFew {
        /// The minimum length.
        min: usize,
        /// The actual length.
        found: usize,
    },
}

fn one_of(expected: &[&str]) -> String {
    match expected {
        [one] => format!("{one:?}"),
        many => {
            let list: Vec<String> = many.iter().map(|s| format!("{s:?}")).collect();
            format!("one of {}", list.join(", "))
        }
    }
}

/// A document that does not match the AG-UI 1.0 schema: the event type (when
/// the document is an event), the field path, and what is wrong.
///
/// Displayed as `RUN_FINISHED: outcome.interrupts: expected at least 1 element(s), found 0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    event_type: Option<EventType>,
    path: FieldPath,
    kind: SchemaErrorKind,
}

impl SchemaError {
    /// An error about the value itself (the empty path).
    pub fn new(kind: SchemaErrorKind) -> SchemaError {
        SchemaError {
            event_type: None,
            path: FieldPath::root(),
            kind,
        }
    }

    /// The event type, when the document is an event.
    pub fn event_type(&self) -> Option<&EventType> {
        self.event_type.as_ref()
    }

    /// Where the bad value is.
    pub fn path(&self) -> &FieldPath {
        &self.path
    }

    /// What is wrong.
    pub fn kind(&self) -> &SchemaErrorKind {
        &self.kind
    }

    /// The same error one key further out.
    pub(crate) fn at_key(mut self, key: &str) -> SchemaError {
        self.path.prepend(PathSegment::Key(key.to_owned()));
        self
    }

    /// The same error one array element further out.
    pub(crate) fn at_index(mut self, index: usize) -> SchemaError {
        self.path.prepend(PathSegment::Index(index));
        self
    }

    pub(crate) fn in_event(mut self, event_type: &EventType) -> SchemaError {
        self.event_type = Some(event_type.clone());
        self
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(ty) = &self.event_type {
            write!(f, "{ty}: ")?;
        }
        if !self.path.is_root() {
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{}", self.kind)
    }
}

impl std::error::Error for SchemaError {}

/// A [`SchemaError`] in a stream: adds the event's index (from 0).
///
/// Displayed as `event #3: TOOL_CALL_START: toolCallName: required field is missing`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event #{index}: {error}")]
pub struct StreamSchemaError {
    /// The event's position in its stream, from 0.
    pub index: usize,
    /// What is wrong with it, and where.
    #[source]
    pub error: SchemaError,
}

/// Describes a JSON value's type for error messages.
pub(crate) fn describe(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A short, JSON-quoted rendering of a string for error messages.
pub(crate) fn quote(s: &str) -> String {
    const MAX: usize = 64;
    let shown: String = s.chars().take(MAX).collect();
    let mut out = serde_json::to_string(&shown).unwrap_or_else(|_| String::from("\"?\""));
    if s.chars().count() > MAX {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_display_like_javascript_accessors() {
        let e = SchemaError::new(SchemaErrorKind::WrongType {
            expected: "a string",
            found: "a number",
        })
        .at_key("name")
        .at_key("function")
        .at_index(0)
        .at_key("toolCalls")
        .at_index(2)
        .at_key("messages")
        .in_event(&EventType::MessagesSnapshot);
        assert_eq!(
            e.to_string(),
            "MESSAGES_SNAPSHOT: messages[2].toolCalls[0].function.name: expected a string, found a number"
        );
        let odd = SchemaError::new(SchemaErrorKind::Missing).at_key("a b");
        assert_eq!(odd.to_string(), "[\"a b\"]: required field is missing");
        let s = StreamSchemaError {
            index: 4,
            error: odd,
        };
        assert_eq!(
            s.to_string(),
            "event #4: [\"a b\"]: required field is missing"
        );
    }

    #[test]
    fn one_of_lists_values() {
        let k = SchemaErrorKind::NotOneOf {
            expected: &["a", "b"],
            found: quote("c"),
        };
        assert_eq!(k.to_string(), "expected one of \"a\", \"b\", found \"c\"");
        let k = SchemaErrorKind::NotOneOf {
            expected: &["function"],
            found: "null".into(),
        };
        assert_eq!(k.to_string(), "expected \"function\", found null");
        assert!(quote(&"x".repeat(100)).ends_with('…'));
    }
}
