//! The lossless event envelope.
//!
//! An [`Event`] is the exact JSON text of one AG-UI event plus its decoded
//! `type`. Nothing else is parsed up front: readers that need a field parse a
//! borrowed view with [`Event::view`], and writers emit [`Event::json`]
//! unchanged. This is what makes the wire layer lossless by construction
//! (unknown fields, unknown types, `null` versus absent, number spelling and
//! string escapes all survive because the bytes are never rebuilt) and fast
//! (no DOM per event).

use std::fmt;
use std::sync::Arc;

use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::EventType;
use crate::scan::{self, Member};

/// One AG-UI event, kept as its JSON text.
///
/// Cloning is cheap (the text is shared). The text is always a single JSON
/// object with a string `type`, and never contains a raw line break, so it can
/// be framed as one NDJSON line or one SSE `data:` line as it is.
#[derive(Clone)]
pub struct Event {
    json: Arc<str>,
    ty: EventType,
}

/// Why some text is not an event envelope.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// The text is not JSON at all.
    #[error("invalid JSON: {0}")]
    Syntax(#[source] serde_json::Error),
    /// The JSON is not an object.
    #[error("an event must be a JSON object, found {found}")]
    NotObject {
        /// What was found instead (`array`, `string`, ...).
        found: &'static str,
    },
    /// The object has no `type` key.
    #[error("an event must have a \"type\" field")]
    MissingType,
    /// `type` is present but is not a string.
    #[error("an event's \"type\" must be a string")]
    TypeNotString,
    /// `type` appears more than once, so its meaning is ambiguous.
    #[error("an event has more than one \"type\" field")]
    DuplicateType,
    /// Arrays and objects nest deeper than [`MAX_DEPTH`] levels.
    #[error("an event nests {depth} levels deep; at most {MAX_DEPTH} are supported")]
    TooDeep {
        /// How deep the text nests (the event object itself is level 1).
        depth: usize,
    },
    /// The event uses a key that the JSON library reserves for its own
    /// encodings (`$serde_json::private::Number` for exact numbers,
    /// `$serde_json::private::RawValue` for raw values), so it could not be
    /// read back without changing its value.
    #[error(
        "an event uses a key the JSON library reserves (\"$serde_json::private::Number\" or \"$serde_json::private::RawValue\")"
    )]
    ReservedKey,
}

/// The deepest nesting of arrays and objects an event may have (the event
/// object itself counts as level 1). This is the depth a full parse of the
/// JSON library accepts, so every `Event` can be read as a value.
pub const MAX_DEPTH: usize = 127;

/// One event borrowed from a buffer that holds it: its exact JSON text and
/// its `type`. Decoders that hand out many events as slices of one buffer
/// yield these; [`Event::as_event_ref`] borrows an owned event the same way,
/// so code that only reads events takes an `EventRef` and serves both.
///
/// An `EventRef` only comes from text that was validated as an event (by
/// [`Event::check`] or an owned [`Event`]), so [`EventRef::to_event`] copies
/// it without validating it again. One made from a scan that recorded the
/// event's top-level members ([`EventRef::from_checked_members`]) keeps
/// their table, and reading its fields walks no text.
#[derive(Clone, Copy)]
pub struct EventRef<'a> {
    json: &'a str,
    ty: &'a EventType,
    /// The members [`Event::check_recording`] recorded for `json`, if any.
    members: Option<&'a [Member]>,
}

/// The outcome of [`Event::check`]: valid event text, borrowed where it could
/// be kept as it is. Only `check` makes one (its variants cannot be built
/// elsewhere), so [`Checked::into_event`] never validates again.
#[derive(Debug, Clone)]
pub enum Checked<'a> {
    /// The event is `json`, a slice of the checked text (surrounding
    /// whitespace dropped).
    #[non_exhaustive]
    Slice {
        /// The exact text of the event.
        json: &'a str,
        /// Its `type`.
        ty: EventType,
    },
    /// The text spanned lines; this is its one-line form.
    #[non_exhaustive]
    Rewritten {
        /// The event, re-written on one line.
        event: Event,
    },
}

impl<'a> Checked<'a> {
    /// The event's text.
    pub fn json(&self) -> &str {
        match self {
            Checked::Slice { json, .. } => json,
            Checked::Rewritten { event } => event.json(),
        }
    }

    /// The event's `type`.
    pub fn event_type(&self) -> &EventType {
        match self {
            Checked::Slice { ty, .. } => ty,
            Checked::Rewritten { event } => &event.ty,
        }
    }

    /// The event as an owned [`Event`] (a copy of a slice, never validated
    /// again).
    pub fn into_event(self) -> Event {
        match self {
            Checked::Slice { json, ty } => Event {
                json: json.into(),
                ty,
            },
            Checked::Rewritten { event } => event,
        }
    }
}

impl<'a> EventRef<'a> {
    /// An event of `ty` whose text is `json`.
    ///
    /// The caller guarantees that `json` and `ty` are exactly
    /// [`Event::json`] and [`Event::event_type`] of a valid event: a slice
    /// [`Event::check`] returned, or text copied from one. Debug builds check
    /// it.
    pub fn from_checked(json: &'a str, ty: &'a EventType) -> EventRef<'a> {
        debug_assert!(
            Event::from_json(json).is_ok_and(|e| e.json() == json && &e.ty == ty),
            "borrowed event text is not a valid envelope of its type: {json}"
        );
        EventRef {
            json,
            ty,
            members: None,
        }
    }

    /// [`EventRef::from_checked`] for an event whose top-level members
    /// [`Event::check_recording`] recorded: `members` is the table it
    /// appended for `json` (an empty table means none was recorded, and
    /// the members are then found by walking the text).
    ///
    /// The caller guarantees what `from_checked` asks, and that `members`
    /// was recorded from exactly this text. Debug builds check both.
    pub fn from_checked_members(
        json: &'a str,
        ty: &'a EventType,
        members: &'a [Member],
    ) -> EventRef<'a> {
        debug_assert!(
            members.is_empty() || {
                let mut again = Vec::new();
                Event::check_recording(json, &mut again).is_ok() && again == members
            },
            "a member table that was not recorded from this text: {json}"
        );
        EventRef {
            members: (!members.is_empty()).then_some(members),
            ..EventRef::from_checked(json, ty)
        }
    }

    /// The member table recorded for this event, if any (see
    /// [`EventRef::from_checked_members`]).
    pub fn members(&self) -> Option<&'a [Member]> {
        self.members
    }

    /// The exact JSON text of the event (one line).
    pub fn json(&self) -> &'a str {
        self.json
    }

    /// The event's `type`.
    pub fn event_type(&self) -> &'a EventType {
        self.ty
    }

    /// The event's `type` as written on the wire.
    pub fn type_name(&self) -> &'a str {
        self.ty.as_str()
    }

    /// Size of the JSON text in bytes.
    pub fn len_bytes(&self) -> usize {
        self.json.len()
    }

    /// Parses a borrowed view of the event (see [`Event::view`]).
    pub fn view<T: Deserialize<'a>>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.json)
    }

    /// Walks the event's top-level members, as [`Event::for_each_member`]:
    /// from the recorded member table when there is one (no walk over the
    /// text), by walking the text otherwise.
    pub fn for_each_member(&self, mut f: impl FnMut(&'a str, &'a str)) -> bool {
        match self.members {
            Some(members) => {
                for m in members {
                    if let Some((key, value)) = m.of(self.json) {
                        f(key, value);
                    }
                }
                true
            }
            None => scan::members_of_valid(self.json, f),
        }
    }

    /// The event as an owned [`Event`]: a copy of the text, not validated
    /// again.
    pub fn to_event(&self) -> Event {
        Event {
            json: self.json.into(),
            ty: self.ty.clone(),
        }
    }
}

impl<'a> From<&'a Event> for EventRef<'a> {
    fn from(event: &'a Event) -> EventRef<'a> {
        event.as_event_ref()
    }
}

impl fmt::Debug for EventRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json)
    }
}

impl fmt::Display for EventRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json)
    }
}

/// An event that is either owned or borrowed from a buffer its caller
/// reuses. Code that reads every event it is given but keeps only some (a
/// compactor merges most deltas away and holds back only a few events)
/// takes this: it reads the event in place ([`EventCow::as_ref`]) and copies
/// a borrowed one only when it keeps it ([`EventCow::into_event`]), while an
/// owned one is moved, never copied.
#[derive(Clone, Debug)]
pub enum EventCow<'a> {
    /// A slice of a buffer, valid for `'a`.
    Borrowed(EventRef<'a>),
    /// An event the caller hands over.
    Owned(Event),
}

impl EventCow<'_> {
    /// The event, borrowed.
    pub fn as_ref(&self) -> EventRef<'_> {
        match self {
            EventCow::Borrowed(event) => *event,
            EventCow::Owned(event) => event.as_event_ref(),
        }
    }

    /// The event's `type`.
    pub fn event_type(&self) -> &EventType {
        match self {
            EventCow::Borrowed(event) => event.event_type(),
            EventCow::Owned(event) => event.event_type(),
        }
    }

    /// The event as an owned [`Event`]: moved when owned, copied (not
    /// validated again) when borrowed.
    pub fn into_event(self) -> Event {
        match self {
            EventCow::Borrowed(event) => event.to_event(),
            EventCow::Owned(event) => event,
        }
    }
}

impl From<Event> for EventCow<'_> {
    fn from(event: Event) -> Self {
        EventCow::Owned(event)
    }
}

impl<'a> From<EventRef<'a>> for EventCow<'a> {
    fn from(event: EventRef<'a>) -> Self {
        EventCow::Borrowed(event)
    }
}

impl<'a> From<&'a Event> for EventCow<'a> {
    fn from(event: &'a Event) -> Self {
        EventCow::Borrowed(event.as_event_ref())
    }
}

impl Event {
    /// Reads one event from its JSON text.
    ///
    /// The text is validated as JSON and must be an object with a string
    /// `type`. Surrounding whitespace is dropped; whitespace inside is kept,
    /// except that text spanning several lines is re-written on one line
    /// (insignificant whitespace only, so the JSON value is unchanged).
    pub fn from_json(text: &str) -> Result<Event, EnvelopeError> {
        Ok(Event::check(text)?.into_event())
    }

    /// Validates `text` as [`Event::from_json`] does, without copying it:
    /// the event borrows `text` unless its text spans lines (then it is
    /// re-written on one line, as `from_json` does). This is what decoders
    /// that hand out events as slices of their read buffer are built on.
    pub fn check(text: &str) -> Result<Checked<'_>, EnvelopeError> {
        let text = trim(text);
        if let Some(ty) = fast_type(text) {
            return Ok(Checked::Slice { json: text, ty });
        }
        check_reference(text)
    }

    /// [`Event::check`] that also records where each top-level member of the
    /// event's text lies: when the one-pass scanner accepts the text, the
    /// table of its members (offsets from the start of the returned
    /// [`Checked::json`]) is appended to `members`; when the text takes the
    /// reference path (an escaped key, a line break, an escape a full parse
    /// must judge), nothing is appended. An event always has its `type`
    /// member, so an empty addition means "not recorded". Decoders that hand
    /// out events as slices of one buffer keep these tables beside them
    /// ([`EventRef::from_checked_members`]), so that no later reader walks
    /// the text again.
    pub fn check_recording<'t>(
        text: &'t str,
        members: &mut Vec<Member>,
    ) -> Result<Checked<'t>, EnvelopeError> {
        let text = trim(text);
        let mark = members.len();
        if let Some(scanned) = scan::scan(text.as_bytes(), members) {
            let ty = EventType::from_wire(&text[scanned.ty.0..scanned.ty.1]);
            return Ok(Checked::Slice { json: text, ty });
        }
        // The scan may have recorded members before it deferred the text.
        members.truncate(mark);
        check_reference(text)
    }

    /// The event at the start of `text`, when the one-pass scanner accepts
    /// it there: its type and length (the offset after its closing `}`),
    /// with its member table appended to `members`; whatever follows is not
    /// read. For `text[..len]`, [`Event::check_recording`] gives exactly
    /// this (a slice of that type, the same table), so a decoder of a JSON
    /// array finds and checks an element in one pass. `None` (nothing
    /// appended) when the text does not start with an event the scanner
    /// accepts: the caller then finds the object's end by other means and
    /// checks its exact text, which may still be an event (one the
    /// reference path accepts). The bytes are not checked as UTF-8: that is
    /// the caller's, on `text[..len]`.
    pub fn scan_prefix_recording(
        text: &[u8],
        members: &mut Vec<Member>,
    ) -> Option<(EventType, usize)> {
        let mark = members.len();
        let found = scan::scan_object(text, members).and_then(|(scanned, len)| {
            // A type that is not UTF-8: the caller's check of the text
            // reports it.
            let name = std::str::from_utf8(&text[scanned.ty.0..scanned.ty.1]).ok()?;
            Some((EventType::from_wire(name), len))
        });
        if found.is_none() {
            members.truncate(mark);
        }
        found
    }

    /// The reference path of [`Event::from_json`]: `serde_json` validates and
    /// finds the `type`, then a byte pass checks depth, line breaks and the
    /// escapes a full parse must judge. [`Event::from_json`] takes it only
    /// for the text its one-pass scanner defers; it is public for the
    /// differential tests and the fuzz target that compare the two.
    #[doc(hidden)]
    pub fn from_json_reference(text: &str) -> Result<Event, EnvelopeError> {
        Ok(check_reference(trim(text))?.into_event())
    }

    /// Like [`Event::from_json`], for owned text (avoids a copy when possible).
    pub fn from_json_string(text: String) -> Result<Event, EnvelopeError> {
        let trimmed = trim(&text);
        if trimmed.len() != text.len() {
            return Event::from_json(trimmed);
        }
        if let Some(ty) = fast_type(&text) {
            return Ok(Event {
                json: text.into(),
                ty,
            });
        }
        if text.contains(['\n', '\r']) {
            return Event::from_json_reference(&text);
        }
        let ty = read_type(&text)?;
        Shape::of(&text)?;
        Ok(Event {
            json: text.into(),
            ty,
        })
    }

    /// Builds an event by serializing `value` (a `serde_json::Value`, a typed
    /// event, or any serializable object with a string `type`).
    pub fn from_serialize<T: Serialize + ?Sized>(value: &T) -> Result<Event, EnvelopeError> {
        let text = serde_json::to_string(value).map_err(EnvelopeError::Syntax)?;
        Event::from_json_string(text)
    }

    /// An event from text this crate assembled itself, without validating it
    /// again (chunk expansion synthesizes many events per input event).
    ///
    /// The caller guarantees what [`Event::from_json`] would check: `text` is
    /// one line of JSON, an object whose only `type` key is the string that
    /// `ty` spells, built from a fixed key set plus keys and raw values taken
    /// from validated events (so it nests no deeper than they do, has no lone
    /// surrogate and no reserved key). Debug builds check all of it.
    pub(crate) fn from_trusted_text(text: String, ty: EventType) -> Event {
        debug_assert!(
            Event::from_json(&text).is_ok_and(|e| e.json() == text && e.ty == ty),
            "assembled event text is not a valid envelope of its type: {text}"
        );
        Event {
            json: text.into(),
            ty,
        }
    }

    /// An event whose text a caller assembled from parts of validated
    /// events, without validating it again (compaction writes each merged
    /// event this way).
    ///
    /// The caller guarantees what [`Event::from_json`] would check and
    /// keep unchanged: `text` is one line of JSON with no blank around it,
    /// an object whose only `type` key is the string that `ty` spells,
    /// built from keys, raw values and escaped string bodies taken from
    /// validated events, each written in a valid form (escaped string
    /// bodies may be concatenated: JSON escapes do not span bodies, and a
    /// validated body holds no lone surrogate), so that it nests no deeper
    /// than they do and holds no lone surrogate and no reserved key. Debug
    /// builds check all of it (every test of the compactor runs that check
    /// on each event it assembles).
    pub fn from_assembled(text: String, ty: EventType) -> Event {
        Event::from_trusted_text(text, ty)
    }

    /// An event read back from storage that checksummed it, without
    /// validating the text again.
    ///
    /// The caller guarantees that `text` is exactly [`Event::json`] of an
    /// event whose type was `ty` when it was written, and that a checksum
    /// over the stored bytes verified that they are unchanged since (a batch
    /// codec that stores each event's type code beside its text, as
    /// `agui-store`'s does, reads events back this way with no parse). Text
    /// from anywhere else must go through [`Event::from_json`]. Debug builds
    /// check the guarantee.
    pub fn from_checked_storage(text: &str, ty: EventType) -> Event {
        debug_assert!(
            Event::from_json(text).is_ok_and(|e| e.json() == text && e.ty == ty),
            "stored event text is not a valid envelope of its type: {text}"
        );
        Event {
            json: text.into(),
            ty,
        }
    }

    /// The event's `type`.
    pub fn event_type(&self) -> &EventType {
        &self.ty
    }

    /// The event's `type` as written on the wire.
    pub fn type_name(&self) -> &str {
        self.ty.as_str()
    }

    /// The exact JSON text of the event (one line).
    pub fn json(&self) -> &str {
        &self.json
    }

    /// Walks the event's top-level members: `f(key, raw_value)` for each, in
    /// the order written (see [`crate::for_each_member`]), without
    /// validating the text again (it was validated when the event was
    /// made). `false` when a key has escapes: read the event another way.
    pub fn for_each_member<'a>(&'a self, f: impl FnMut(&'a str, &'a str)) -> bool {
        scan::members_of_valid(&self.json, f)
    }

    /// The event borrowed as an [`EventRef`] (no copy).
    pub fn as_event_ref(&self) -> EventRef<'_> {
        EventRef {
            json: &self.json,
            ty: &self.ty,
            members: None,
        }
    }

    /// The JSON text as a shared string (no copy).
    pub fn shared_json(&self) -> Arc<str> {
        self.json.clone()
    }

    /// Size of the JSON text in bytes.
    pub fn len_bytes(&self) -> usize {
        self.json.len()
    }

    /// Parses a borrowed view of the event. Views are plain serde structs that
    /// name only the fields they need; string fields may borrow from the event.
    pub fn view<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.json)
    }

    /// The whole event as a JSON value (lossless: key order and number
    /// spelling are kept).
    pub fn to_value(&self) -> serde_json::Value {
        // Construction guarantees the text is JSON a full parse accepts
        // (depth and reserved keys are checked by `Shape::of`); a failure here
        // would be a bug, and degrades to `null` rather than a panic.
        serde_json::from_str(&self.json).unwrap_or(serde_json::Value::Null)
    }

    /// True when both events hold the same JSON value (key order ignored,
    /// numbers compared as written).
    pub fn same_value(&self, other: &Event) -> bool {
        self.json == other.json || self.to_value() == other.to_value()
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.json)
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.json)
    }
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Emit the stored text as it is when the serializer is serde_json's.
        let raw: &RawValue = serde_json::from_str(&self.json).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Event::from_json(raw.get()).map_err(de::Error::custom)
    }
}

/// Drops the whitespace JSON allows around a value.
fn trim(text: &str) -> &str {
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    // The usual event, `{...}` on its own, needs no search.
    match text.as_bytes() {
        [first, .., last] if !blank(first) && !blank(last) => return text,
        _ => {}
    }
    text.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'))
}

/// The reference path of [`Event::check`] on trimmed text: `serde_json`
/// validates and finds the `type`, then a byte pass checks depth, line
/// breaks and the escapes a full parse must judge.
fn check_reference(text: &str) -> Result<Checked<'_>, EnvelopeError> {
    let ty = read_type(text)?;
    let shape = Shape::of(text)?;
    Ok(if shape.line_breaks {
        Checked::Rewritten {
            event: Event {
                json: one_line(text).into(),
                ty,
            },
        }
    } else {
        Checked::Slice { json: text, ty }
    })
}

/// The fast path: the `type` of `text` when the one-pass scanner vouches
/// that the reference path would accept `text` unchanged.
#[inline]
fn fast_type(text: &str) -> Option<EventType> {
    // The scanner defers any key that is (or could decode to) the reserved
    // key, so the reference path judges those.
    let scanned = scan::scan(text.as_bytes(), &mut ())?;
    Some(EventType::from_wire(&text[scanned.ty.0..scanned.ty.1]))
}

/// Validates `text` as a JSON object and returns its `type`.
fn read_type(text: &str) -> Result<EventType, EnvelopeError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let found = de.deserialize_any(TypeFinder).map_err(|e| {
        // Our own visitor errors carry their meaning in the message.
        match e.to_string().as_str() {
            m if m.starts_with(NOT_OBJECT_PREFIX) => EnvelopeError::NotObject {
                found: kind_of(text),
            },
            m if m.starts_with(TYPE_NOT_STRING) => EnvelopeError::TypeNotString,
            m if m.starts_with(DUPLICATE_TYPE) => EnvelopeError::DuplicateType,
            _ => EnvelopeError::Syntax(e),
        }
    })?;
    de.end().map_err(EnvelopeError::Syntax)?;
    match found {
        Some(name) => Ok(EventType::from_wire(&name)),
        None => Err(EnvelopeError::MissingType),
    }
}

const NOT_OBJECT_PREFIX: &str = "agui: not an object";
const TYPE_NOT_STRING: &str = "agui: type not a string";
const DUPLICATE_TYPE: &str = "agui: duplicate type";

fn kind_of(text: &str) -> &'static str {
    match text.as_bytes().first() {
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b'n') => "null",
        Some(b't' | b'f') => "a boolean",
        _ => "a number",
    }
}

struct TypeFinder;

impl<'de> Visitor<'de> for TypeFinder {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(NOT_OBJECT_PREFIX)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut ty: Option<String> = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "type" {
                if ty.is_some() {
                    return Err(de::Error::custom(DUPLICATE_TYPE));
                }
                let value: TypeValue = map.next_value()?;
                match value {
                    TypeValue::Str(s) => ty = Some(s),
                    TypeValue::Other => return Err(de::Error::custom(TYPE_NOT_STRING)),
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(ty)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Err(E::custom(NOT_OBJECT_PREFIX))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Err(E::custom(NOT_OBJECT_PREFIX))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Err(E::custom(NOT_OBJECT_PREFIX))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Err(E::custom(NOT_OBJECT_PREFIX))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Err(E::custom(NOT_OBJECT_PREFIX))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Err(E::custom(NOT_OBJECT_PREFIX))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(de::Error::custom(NOT_OBJECT_PREFIX))
    }
    // arbitrary_precision numbers arrive as a one-entry map with a private key;
    // they still are not objects, and visit_map above would accept them, but
    // serde_json only produces that map when asked for a Number, never for
    // `deserialize_any` at the top level of a document that starts with a digit.
}

/// `type`'s value: a string, or anything else (which is an error).
enum TypeValue {
    Str(String),
    Other,
}

impl<'de> Deserialize<'de> for TypeValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TypeValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<TypeValue, E> {
                Ok(TypeValue::Str(s.to_owned()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<TypeValue, E> {
                Ok(TypeValue::Str(s))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<TypeValue, E> {
                Ok(TypeValue::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<TypeValue, E> {
                Ok(TypeValue::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<TypeValue, E> {
                Ok(TypeValue::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<TypeValue, E> {
                Ok(TypeValue::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<TypeValue, E> {
                Ok(TypeValue::Other)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<TypeValue, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(TypeValue::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<TypeValue, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(TypeValue::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// What one byte pass over valid JSON text tells: whether it spans lines, and
/// whether a full parse would read it back exactly.
struct Shape {
    line_breaks: bool,
}

impl Shape {
    fn of(text: &str) -> Result<Shape, EnvelopeError> {
        let bytes = text.as_bytes();
        let mut depth = 0usize;
        let mut max_depth = 0usize;
        let mut line_breaks = false;
        let mut ascii_escape = false;
        let mut in_string = false;
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if in_string {
                match b {
                    b'\\' => {
                        // Two escapes need a full parse: `\u00XX` for a printable
                        // ASCII character (it could spell the reserved key in
                        // disguise) and a surrogate `\uD800`-`\uDFFF` (a lone one
                        // is refused by a full parse).
                        if bytes.get(i + 1) == Some(&b'u') {
                            let hex = (bytes.get(i + 2), bytes.get(i + 3), bytes.get(i + 4));
                            ascii_escape |=
                                matches!(hex, (Some(b'0'), Some(b'0'), Some(b'2'..=b'7')));
                            ascii_escape |= matches!(
                                hex,
                                (
                                    Some(b'd' | b'D'),
                                    Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F'),
                                    _,
                                )
                            );
                        }
                        i += 1;
                    }
                    b'"' => in_string = false,
                    _ => {}
                }
            } else {
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => {
                        depth += 1;
                        max_depth = max_depth.max(depth);
                    }
                    b'}' | b']' => depth = depth.saturating_sub(1),
                    b'\n' | b'\r' => line_breaks = true,
                    _ => {}
                }
            }
            i += 1;
        }
        if max_depth > MAX_DEPTH {
            return Err(EnvelopeError::TooDeep { depth: max_depth });
        }
        if ascii_escape || text.contains("serde_json") {
            check_reserved_key(text)?;
        }
        Ok(Shape { line_breaks })
    }
}

/// The slow path, for the rare text with surrogate escapes or that could hold
/// a reserved key: a full parse must succeed (a lone surrogate fails it),
/// and no object key may decode to a reserved key (a full parse would turn
/// that object into a number or raw text).
fn check_reserved_key(text: &str) -> Result<(), EnvelopeError> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'"' {
            i += 1;
            continue;
        }
        // A string literal from `i` to its closing quote `end`.
        let mut end = i + 1;
        while end < bytes.len() && bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        let literal = &text[i..=end.min(bytes.len() - 1)];
        let mut next = end + 1;
        while next < bytes.len() && matches!(bytes[next], b' ' | b'\t' | b'\n' | b'\r') {
            next += 1;
        }
        if bytes.get(next) == Some(&b':') {
            let key: String = serde_json::from_str(literal).map_err(EnvelopeError::Syntax)?;
            if RESERVED_KEYS.contains(&key.as_str()) {
                return Err(EnvelopeError::ReservedKey);
            }
        }
        i = end + 1;
    }
    serde_json::from_str::<serde_json::Value>(text).map_err(EnvelopeError::Syntax)?;
    Ok(())
}

/// The keys serde_json reserves for itself: with its exact-number mode an
/// object keyed by the first is read as a number, with its raw-value mode one
/// keyed by the second as raw JSON text; neither round-trips as a value.
pub(crate) const RESERVED_KEYS: [&str; 2] = [
    "$serde_json::private::Number",
    "$serde_json::private::RawValue",
];

/// Removes insignificant whitespace from valid JSON text.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else {
            match c {
                ' ' | '\t' | '\n' | '\r' => {}
                '"' => {
                    in_string = true;
                    out.push(c);
                }
                _ => out.push(c),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_text_exactly() {
        let text = r#"{"type":"CUSTOM","name":"x","value":12345678901234567890123,"f":1.10,"n":null,"s":"\ud83d\ude00\u00e9","extra":{"deep":[1,2]}}"#;
        let e = Event::from_json(text).unwrap();
        assert_eq!(e.json(), text);
        assert_eq!(e.event_type(), &EventType::Custom);
        // Through a Value the escapes are decoded, but the value is the same
        // and numbers keep their spelling.
        let v = e.to_value();
        let expected = r#"{"type":"CUSTOM","name":"x","value":12345678901234567890123,"f":1.10,"n":null,"s":"😀é","extra":{"deep":[1,2]}}"#;
        assert_eq!(serde_json::to_string(&v).unwrap(), expected);
    }

    #[test]
    fn unknown_types_are_carried() {
        let e = Event::from_json(r#"{"type":"META","metaType":"x","payload":{}}"#).unwrap();
        assert_eq!(e.type_name(), "META");
        assert!(!e.event_type().is_known());
    }

    #[test]
    fn multi_line_text_becomes_one_line_with_the_same_value() {
        let text = "{\n  \"type\": \"RAW\",\n  \"event\": \"a b\\n\"\r\n}";
        let e = Event::from_json(text).unwrap();
        assert!(!e.json().contains('\n'));
        assert_eq!(e.json(), r#"{"type":"RAW","event":"a b\n"}"#);
    }

    #[test]
    fn rejects_what_is_not_an_event() {
        assert!(matches!(
            Event::from_json("[1]"),
            Err(EnvelopeError::NotObject { found: "an array" })
        ));
        assert!(matches!(
            Event::from_json("12"),
            Err(EnvelopeError::NotObject { .. })
        ));
        assert!(matches!(
            Event::from_json("{}"),
            Err(EnvelopeError::MissingType)
        ));
        assert!(matches!(
            Event::from_json(r#"{"type":1}"#),
            Err(EnvelopeError::TypeNotString)
        ));
        assert!(matches!(
            Event::from_json(r#"{"type":"RAW","type":"RAW"}"#),
            Err(EnvelopeError::DuplicateType)
        ));
        assert!(matches!(
            Event::from_json(r#"{"type":"RAW""#),
            Err(EnvelopeError::Syntax(_))
        ));
        assert!(matches!(
            Event::from_json(r#"{"type":"RAW"} x"#),
            Err(EnvelopeError::Syntax(_))
        ));
    }

    #[test]
    fn depth_is_limited_to_what_a_full_parse_accepts() {
        let nested = |levels: usize| {
            let inner = "[".repeat(levels - 1) + &"]".repeat(levels - 1);
            format!(r#"{{"type":"RAW","event":{inner}}}"#)
        };
        let ok = Event::from_json(&nested(MAX_DEPTH)).unwrap();
        assert_eq!(ok.to_value().to_string(), nested(MAX_DEPTH));
        assert!(matches!(
            Event::from_json(&nested(MAX_DEPTH + 1)),
            Err(EnvelopeError::TooDeep { depth: 128 })
        ));
        assert!(matches!(
            Event::from_json(&nested(100_000)),
            Err(EnvelopeError::TooDeep { .. })
        ));
        // Brackets inside strings do not count.
        let text = format!(r#"{{"type":"RAW","event":"{}"}}"#, "[".repeat(1000));
        assert!(Event::from_json(&text).is_ok());
    }

    #[test]
    fn the_reserved_keys_are_refused_in_every_spelling() {
        for text in [
            r#"{"type":"RAW","event":{"$serde_json::private::Number":"5"}}"#,
            r#"{"type":"RAW","event":{"\u0024serde_json::private::Number":"5"}}"#,
            r#"{"type":"RAW","event":{"\u0024serde\u005fjson\u003a\u003aprivate::Number":"5"}}"#,
            r#"{"type":"RAW","event":{"$serde_json::private::RawValue":"5"}}"#,
            r#"{"$serde_json::private::RawValue":"{}","type":"TOOL_CALL_END","toolCallId":"t"}"#,
            r#"{"type":"TEXT_MESSAGE_END","messageId":"m","metadata":{"\u0024serde_json::private::RawValue":"5"}}"#,
        ] {
            assert!(
                matches!(Event::from_json(text), Err(EnvelopeError::ReservedKey)),
                "{text}"
            );
        }
        // Mentioning it as data is fine, and so are ordinary escapes.
        for text in [
            r#"{"type":"RAW","event":"$serde_json::private::Number"}"#,
            r#"{"type":"RAW","event":{"\u0041":1,"k":"\u00e9\u0024"}}"#,
        ] {
            let e = Event::from_json(text).unwrap();
            assert_eq!(e.json(), text);
            let _ = e.to_value();
        }
    }

    #[test]
    fn surrogate_escapes_must_pair() {
        let pair = r#"{"type":"RAW","event":"\ud83d\ude00 \uD83D\uDE00"}"#;
        assert_eq!(Event::from_json(pair).unwrap().to_value()["event"], "😀 😀");
        for lone in [
            r#"{"type":"RAW","event":"\ud800"}"#,
            r#"{"type":"RAW","event":"\udc00x"}"#,
            r#"{"type":"RAW","\uD800":1}"#,
        ] {
            assert!(
                matches!(Event::from_json(lone), Err(EnvelopeError::Syntax(_))),
                "{lone}"
            );
        }
    }

    #[test]
    fn serde_round_trip_is_verbatim() {
        let text = r#"[{"type":"RAW","event":1.50},{"type":"X","a":null}]"#;
        let events: Vec<Event> = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&events).unwrap(), text);
    }

    #[test]
    fn borrowed_views() {
        #[derive(Deserialize)]
        struct Content<'a> {
            #[serde(rename = "messageId")]
            message_id: &'a str,
            delta: std::borrow::Cow<'a, str>,
        }
        let e =
            Event::from_json(r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"a\"b"}"#)
                .unwrap();
        let v: Content = e.view().unwrap();
        assert_eq!(v.message_id, "m1");
        assert_eq!(v.delta, "a\"b");
    }
}
