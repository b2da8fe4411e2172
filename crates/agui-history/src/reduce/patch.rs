//! JSON Patch exactly as the official client applies it.
//!
//! The reference reducer calls fast-json-patch 3.1.1 as
//! `applyPatch(document, patch, /* validate */ true, /* mutate */ false)` for
//! both `STATE_DELTA` and `ACTIVITY_DELTA`, and keeps the old value when it
//! throws. This module reproduces that call on JSON values, including the
//! library's own reading of RFC 6902 where it differs from the RFC:
//!
//! - the patch is atomic: the document is copied first, so a failing
//!   operation leaves the caller's value as it was;
//! - validation runs while walking the path: `add` may create one missing
//!   level only, `replace`/`remove` need the exact path, `move`/`copy` need a
//!   resolvable `from`, `test` is checked by deep equality;
//! - array tokens: `-` is the end, any all-digit token is an index (leading
//!   zeros included, `""` is `0`, large values wrap like JavaScript's `~~`),
//!   an index past the end is refused for `add` only;
//! - a path on a root that is a string, number or boolean validates against
//!   the value's JavaScript properties and then changes nothing;
//! - properties inherited from `Object.prototype` (`toString`, ...) count as
//!   existing; `__proto__` and `constructor/prototype` are refused;
//! - `remove` at the root gives `null`; `move`/`copy` to the root take the
//!   `from` value without removing it; the undocumented `_get` operation is a
//!   no-op that needs its path to exist.
//!
//! What JavaScript can do but JSON cannot hold (moving an inherited function
//! or the whole document into itself) is refused with
//! [`PatchError::Unrepresentable`].

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::js::number_f64;

/// Why a patch was refused (fast-json-patch's error names, plus the
/// JavaScript `TypeError`s it can throw).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch is not an array (`SEQUENCE_NOT_AN_ARRAY`).
    #[error("a patch must be an array of operations")]
    SequenceNotAnArray,
    /// `OPERATION_NOT_AN_OBJECT`.
    #[error("operation {index} is not an object")]
    NotAnObject { index: usize },
    /// `OPERATION_OP_INVALID`.
    #[error("operation {index}: `op` is not an RFC 6902 operation")]
    OpInvalid { index: usize },
    /// `OPERATION_PATH_INVALID`.
    #[error("operation {index}: `path` is not a string starting with \"/\"")]
    PathInvalid { index: usize },
    /// `OPERATION_FROM_REQUIRED`.
    #[error("operation {index}: `from` is required and must be a string")]
    FromRequired { index: usize },
    /// `OPERATION_VALUE_REQUIRED`.
    #[error("operation {index}: `value` is required")]
    ValueRequired { index: usize },
    /// `OPERATION_PATH_CANNOT_ADD`.
    #[error("operation {index}: cannot add at this path (its parent does not exist)")]
    PathCannotAdd { index: usize },
    /// `OPERATION_PATH_UNRESOLVABLE`.
    #[error("operation {index}: the path does not exist")]
    PathUnresolvable { index: usize },
    /// `OPERATION_FROM_UNRESOLVABLE`.
    #[error("operation {index}: the `from` path does not exist")]
    FromUnresolvable { index: usize },
    /// `OPERATION_PATH_ILLEGAL_ARRAY_INDEX`.
    #[error("operation {index}: an array index must be an unsigned integer or \"-\"")]
    IllegalArrayIndex { index: usize },
    /// `OPERATION_VALUE_OUT_OF_BOUNDS`.
    #[error("operation {index}: the index is past the end of the array")]
    OutOfBounds { index: usize },
    /// `TEST_OPERATION_FAILED`.
    #[error("operation {index}: test failed")]
    TestFailed { index: usize },
    /// A JavaScript `TypeError` thrown by the library (prototype keys,
    /// property access on `null` or `undefined`).
    #[error("operation {index}: {reason}")]
    TypeError { index: usize, reason: &'static str },
    /// The JavaScript result cannot be held as JSON (a function taken from
    /// a prototype, or the document moved into itself).
    #[error("operation {index}: {reason}")]
    Unrepresentable { index: usize, reason: &'static str },
}

/// Applies `patch` to a copy of `document`, as the official client does.
///
/// Returns the new document, or the error that made the library throw; in
/// that case the caller keeps `document`. A result the library would leave
/// `undefined` (a root `copy` from a missing path) is reported as
/// [`PatchError::Unrepresentable`].
pub fn apply_patch(document: &Value, patch: &Value) -> Result<Value, PatchError> {
    match apply_patch_js(Some(document), patch)? {
        Some(v) => Ok(v),
        None => Err(PatchError::Unrepresentable {
            index: 0,
            reason: "the patched document is undefined",
        }),
    }
}

/// Like [`apply_patch`], with JavaScript's `undefined` as `None` on both
/// sides (the library copies an `undefined` document as `null`).
pub fn apply_patch_js(
    document: Option<&Value>,
    patch: &Value,
) -> Result<Option<Value>, PatchError> {
    let mut doc = document.cloned();
    apply_patch_in_place(&mut doc, patch)?;
    Ok(doc)
}

/// Applies `patch` to `document` in place, with the same result as
/// [`apply_patch_js`] and without copying the document: every change is
/// logged and undone when an operation fails, so on error `document` is
/// exactly as it was. Cost is that of the operations, not of the document.
pub fn apply_patch_in_place(document: &mut Option<Value>, patch: &Value) -> Result<(), PatchError> {
    let Value::Array(ops) = patch else {
        return Err(PatchError::SequenceNotAnArray);
    };
    let mut undo: Vec<Undo> = Vec::new();
    let original_undefined = document.is_none();
    if original_undefined {
        // `_deepClone(undefined)` is `null`.
        *document = Some(Value::Null);
    }
    for (index, op) in ops.iter().enumerate() {
        if let Err(e) = apply_operation(document, op, index, &mut undo) {
            rollback(document, undo);
            if original_undefined {
                *document = None;
            }
            return Err(e);
        }
    }
    Ok(())
}

/// One logged change, with what restores it.
enum Undo {
    /// The whole document was replaced.
    Root(Option<Value>),
    /// An element was inserted at this index.
    ArrInserted(Vec<Step>, usize),
    /// An element was removed from this index.
    ArrRemoved(Vec<Step>, usize, Value),
    /// An element was overwritten.
    ArrReplaced(Vec<Step>, usize, Value),
    /// A new key was added.
    ObjAdded(Vec<Step>, String),
    /// An existing key's value was overwritten (its position is kept).
    ObjReplaced(Vec<Step>, String, Value),
    /// A key was removed from this position.
    ObjRemoved(Vec<Step>, usize, String, Value),
}

fn rollback(doc: &mut Option<Value>, undo: Vec<Undo>) {
    for u in undo.into_iter().rev() {
        match u {
            Undo::Root(old) => *doc = old,
            Undo::ArrInserted(steps, at) => {
                match doc.as_mut().and_then(|d| resolve_mut(d, &steps)) {
                    Some(Value::Array(a)) if at < a.len() => {
                        a.remove(at);
                    }
                    _ => {}
                }
            }
            Undo::ArrRemoved(steps, at, v) => {
                if let Some(Value::Array(a)) = doc.as_mut().and_then(|d| resolve_mut(d, &steps)) {
                    a.insert(at.min(a.len()), v);
                }
            }
            Undo::ArrReplaced(steps, at, v) => {
                match doc.as_mut().and_then(|d| resolve_mut(d, &steps)) {
                    Some(Value::Array(a)) if at < a.len() => a[at] = v,
                    _ => {}
                }
            }
            Undo::ObjAdded(steps, k) => {
                if let Some(Value::Object(m)) = doc.as_mut().and_then(|d| resolve_mut(d, &steps)) {
                    m.shift_remove(&k);
                }
            }
            Undo::ObjReplaced(steps, k, v) => {
                if let Some(Value::Object(m)) = doc.as_mut().and_then(|d| resolve_mut(d, &steps)) {
                    m.insert(k, v);
                }
            }
            Undo::ObjRemoved(steps, at, k, v) => {
                if let Some(Value::Object(m)) = doc.as_mut().and_then(|d| resolve_mut(d, &steps)) {
                    let at = at.min(m.len());
                    m.shift_insert(at, k, v);
                }
            }
        }
    }
}

/// `map.insert(key, value)`, logged.
fn obj_set(
    map: &mut Map<String, Value>,
    steps: &[Step],
    key: String,
    value: Value,
    undo: &mut Vec<Undo>,
) {
    match map.insert(key.clone(), value) {
        Some(old) => undo.push(Undo::ObjReplaced(steps.to_vec(), key, old)),
        None => undo.push(Undo::ObjAdded(steps.to_vec(), key)),
    }
}

/// `map.shift_remove(key)`, logged; `keep` returns a copy of the value.
fn obj_remove(
    map: &mut Map<String, Value>,
    steps: &[Step],
    key: &str,
    keep: bool,
    undo: &mut Vec<Undo>,
) -> Option<Value> {
    let at = map.keys().position(|k| k == key)?;
    let old = map.shift_remove(key)?;
    let copy = keep.then(|| old.clone());
    undo.push(Undo::ObjRemoved(steps.to_vec(), at, key.to_owned(), old));
    copy
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Add,
    Remove,
    Replace,
    Move,
    Copy,
    Test,
    Get,
}

impl Op {
    fn parse(v: Option<&Value>) -> Option<Op> {
        Some(match v?.as_str()? {
            "add" => Op::Add,
            "remove" => Op::Remove,
            "replace" => Op::Replace,
            "move" => Op::Move,
            "copy" => Op::Copy,
            "test" => Op::Test,
            "_get" => Op::Get,
            _ => return None,
        })
    }
}

/// One validated operation.
struct Operation<'p> {
    op: Op,
    path: &'p str,
    from: Option<&'p str>,
    value: Option<&'p Value>,
    index: usize,
}

/// The structural checks of the library's `validator` (no document).
fn validate_structure(op: &Value, index: usize) -> Result<Operation<'_>, PatchError> {
    let Value::Object(map) = op else {
        return Err(PatchError::NotAnObject { index });
    };
    let kind = Op::parse(map.get("op")).ok_or(PatchError::OpInvalid { index })?;
    let path = map
        .get("path")
        .and_then(Value::as_str)
        .ok_or(PatchError::PathInvalid { index })?;
    if !path.is_empty() && !path.starts_with('/') {
        return Err(PatchError::PathInvalid { index });
    }
    let from = map.get("from").and_then(Value::as_str);
    if matches!(kind, Op::Move | Op::Copy) && from.is_none() {
        return Err(PatchError::FromRequired { index });
    }
    let value = map.get("value");
    if matches!(kind, Op::Add | Op::Replace | Op::Test) && value.is_none() {
        return Err(PatchError::ValueRequired { index });
    }
    Ok(Operation {
        op: kind,
        path,
        from,
        value,
        index,
    })
}

/// `obj[key]` as JavaScript reads it.
enum Got<'a> {
    Undefined,
    Own(Cow<'a, Value>),
    /// A property found on a prototype (a function, or an array's length).
    Inherited,
}

impl Got<'_> {
    fn is_undefined(&self) -> bool {
        matches!(self, Got::Undefined)
    }
}

const OBJECT_PROTO: &[&str] = &[
    "constructor",
    "__defineGetter__",
    "__defineSetter__",
    "hasOwnProperty",
    "__lookupGetter__",
    "__lookupSetter__",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "toString",
    "valueOf",
    "__proto__",
    "toLocaleString",
];

const ARRAY_PROTO: &[&str] = &[
    "length",
    "at",
    "concat",
    "copyWithin",
    "fill",
    "find",
    "findIndex",
    "findLast",
    "findLastIndex",
    "lastIndexOf",
    "pop",
    "push",
    "reverse",
    "shift",
    "unshift",
    "slice",
    "sort",
    "splice",
    "includes",
    "indexOf",
    "join",
    "keys",
    "entries",
    "values",
    "forEach",
    "filter",
    "flat",
    "flatMap",
    "map",
    "every",
    "some",
    "reduce",
    "reduceRight",
    "toReversed",
    "toSorted",
    "toSpliced",
    "with",
];

const STRING_PROTO: &[&str] = &[
    "anchor",
    "at",
    "big",
    "blink",
    "bold",
    "charAt",
    "charCodeAt",
    "codePointAt",
    "concat",
    "endsWith",
    "fontcolor",
    "fontsize",
    "fixed",
    "includes",
    "indexOf",
    "isWellFormed",
    "italics",
    "lastIndexOf",
    "link",
    "localeCompare",
    "match",
    "matchAll",
    "normalize",
    "padEnd",
    "padStart",
    "repeat",
    "replace",
    "replaceAll",
    "search",
    "slice",
    "small",
    "split",
    "strike",
    "sub",
    "substr",
    "substring",
    "sup",
    "startsWith",
    "toString",
    "toWellFormed",
    "trim",
    "trimStart",
    "trimLeft",
    "trimEnd",
    "trimRight",
    "toLocaleLowerCase",
    "toLocaleUpperCase",
    "toLowerCase",
    "toUpperCase",
    "valueOf",
];

const NUMBER_PROTO: &[&str] = &[
    "toExponential",
    "toFixed",
    "toPrecision",
    "toString",
    "valueOf",
    "toLocaleString",
];

/// The canonical array index a property name denotes, if any.
fn canonical_index(key: &str) -> Option<usize> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if key.len() > 1 && key.starts_with('0') {
        return None;
    }
    let n: u64 = key.parse().ok()?;
    (n < u32::MAX as u64).then_some(n as usize)
}

fn js_get<'a>(obj: Option<&'a Value>, key: &str) -> Result<Got<'a>, &'static str> {
    let Some(obj) = obj else {
        return Err("cannot read properties of undefined");
    };
    Ok(match obj {
        Value::Null => return Err("cannot read properties of null"),
        Value::Object(map) => match map.get(key) {
            Some(v) => Got::Own(Cow::Borrowed(v)),
            None if OBJECT_PROTO.contains(&key) => Got::Inherited,
            None => Got::Undefined,
        },
        Value::Array(items) => match canonical_index(key) {
            Some(i) if i < items.len() => Got::Own(Cow::Borrowed(&items[i])),
            _ if ARRAY_PROTO.contains(&key) || OBJECT_PROTO.contains(&key) => Got::Inherited,
            _ => Got::Undefined,
        },
        Value::String(s) => {
            let units = s.encode_utf16().count();
            match canonical_index(key) {
                Some(i) if i < units => {
                    let unit: Vec<u16> = s.encode_utf16().skip(i).take(1).collect();
                    Got::Own(Cow::Owned(Value::String(String::from_utf16_lossy(&unit))))
                }
                _ if key == "length" => Got::Own(Cow::Owned(Value::from(units))),
                _ if STRING_PROTO.contains(&key) || OBJECT_PROTO.contains(&key) => Got::Inherited,
                _ => Got::Undefined,
            }
        }
        Value::Number(_) | Value::Bool(_) => {
            if NUMBER_PROTO.contains(&key) || OBJECT_PROTO.contains(&key) {
                Got::Inherited
            } else {
                Got::Undefined
            }
        }
    })
}

/// The library's `isInteger`: all ASCII digits (the empty string included).
fn is_integer(key: &str) -> bool {
    key.bytes().all(|b| b.is_ascii_digit())
}

/// `~~key` for an all-digit key (ECMAScript ToInt32 of its numeric value).
fn to_int32(key: &str) -> i64 {
    let f: f64 = if key.is_empty() {
        0.0
    } else {
        key.parse().unwrap_or(f64::INFINITY)
    };
    if !f.is_finite() {
        return 0;
    }
    let m = f.trunc().rem_euclid(4_294_967_296.0);
    if m >= 2_147_483_648.0 {
        (m - 4_294_967_296.0) as i64
    } else {
        m as i64
    }
}

fn unescape(token: &str) -> Cow<'_, str> {
    if token.contains('~') {
        Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
    } else {
        Cow::Borrowed(token)
    }
}

/// JavaScript truthiness of the document (the validator skips its
/// document checks for a falsy one).
fn doc_truthy(doc: Option<&Value>) -> bool {
    super::js::truthy(doc)
}

/// fast-json-patch's `_areEquals` (deep equality, numbers by value).
fn are_equal(a: Option<&Value>, b: &Value) -> bool {
    let Some(a) = a else { return false };
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => number_f64(x) == number_f64(y),
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| are_equal(Some(p), q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| are_equal(Some(v), w)))
        }
        _ => false,
    }
}

fn got_equal(got: &Got<'_>, value: &Value) -> bool {
    match got {
        Got::Own(v) => are_equal(Some(v), value),
        Got::Undefined | Got::Inherited => false,
    }
}

/// One step from a container to a child that exists.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

fn resolve<'d>(doc: &'d Value, steps: &[Step]) -> &'d Value {
    let mut cur = doc;
    for step in steps {
        cur = match (step, cur) {
            (Step::Key(k), Value::Object(m)) => m.get(k).unwrap_or(&Value::Null),
            (Step::Index(i), Value::Array(a)) => a.get(*i).unwrap_or(&Value::Null),
            _ => &Value::Null,
        };
    }
    cur
}

fn resolve_mut<'d>(doc: &'d mut Value, steps: &[Step]) -> Option<&'d mut Value> {
    let mut cur = doc;
    for step in steps {
        cur = match (step, cur) {
            (Step::Key(k), Value::Object(m)) => m.get_mut(k)?,
            (Step::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// JavaScript's `splice` start for an insertion or removal at `idx`.
fn splice_start(idx: i64, len: usize) -> usize {
    if idx < 0 {
        (len as i64 + idx).max(0) as usize
    } else {
        (idx as usize).min(len)
    }
}

fn banned(key: &str, previous_raw: &str) -> bool {
    key == "__proto__" || (key == "prototype" && previous_raw == "constructor")
}

const PROTO_BANNED: &str = "modifying `__proto__` or `constructor/prototype` is banned";

/// Where a validated non-root operation acts.
enum Target {
    Array(Vec<Step>, i64),
    Object(Vec<Step>, String),
}

/// Applies one operation with validation (`applyOperation(doc, op, true, true)`).
fn apply_operation(
    doc: &mut Option<Value>,
    raw_op: &Value,
    index: usize,
    undo: &mut Vec<Undo>,
) -> Result<(), PatchError> {
    let op = validate_structure(raw_op, index)?;
    if op.path.is_empty() {
        return apply_root(doc, &op, undo);
    }
    match locate(doc.as_ref(), &op)? {
        Target::Array(steps, idx) => array_op(doc, &steps, idx, &op, undo),
        Target::Object(steps, key) => object_op(doc, &steps, &key, &op, undo),
    }
}

/// The library's validated walk of a non-empty path (reads only).
fn locate(doc: Option<&Value>, op: &Operation<'_>) -> Result<Target, PatchError> {
    let index = op.index;
    let keys: Vec<&str> = op.path.split('/').collect();
    let len = keys.len();
    let mut steps: Vec<Step> = Vec::new();
    let mut fragment_set = false;
    let mut t = 1;
    loop {
        let key = unescape(keys[t]);
        if banned(&key, keys[t - 1]) {
            return Err(PatchError::TypeError {
                index,
                reason: PROTO_BANNED,
            });
        }
        let obj = doc.map(|d| resolve(d, &steps));
        // Existence check, done once, at the first missing token (or the last).
        if !fragment_set {
            let got =
                js_get(obj, &key).map_err(|reason| PatchError::TypeError { index, reason })?;
            let fragment = if got.is_undefined() {
                Some(keys[..t].join("/"))
            } else if t == len - 1 {
                Some(op.path.to_owned())
            } else {
                None
            };
            if let Some(fragment) = fragment {
                fragment_set = true;
                validate_against(doc, op, &fragment)?;
            }
        }
        t += 1;
        let Some(obj) = obj else {
            return Err(PatchError::TypeError {
                index,
                reason: "cannot read properties of undefined",
            });
        };
        if let Value::Array(arr) = obj {
            let arr_len = arr.len();
            let idx: i64 = if key == "-" {
                arr_len as i64
            } else if !is_integer(&key) {
                return Err(PatchError::IllegalArrayIndex { index });
            } else {
                to_int32(&key)
            };
            if t >= len {
                if op.op == Op::Add && idx > arr_len as i64 {
                    return Err(PatchError::OutOfBounds { index });
                }
                return Ok(Target::Array(steps, idx));
            }
            match usize::try_from(idx) {
                Ok(i) if i < arr_len => steps.push(Step::Index(i)),
                _ => return Err(PatchError::PathUnresolvable { index }),
            }
        } else {
            if t >= len {
                return Ok(Target::Object(steps, key.into_owned()));
            }
            match js_get(Some(obj), &key) {
                Ok(Got::Own(_)) => steps.push(Step::Key(key.into_owned())),
                _ => return Err(PatchError::PathUnresolvable { index }),
            }
        }
        // The next value must be a non-null object (arrays included).
        let next = doc.map(|d| resolve(d, &steps));
        if !matches!(next, Some(Value::Object(_) | Value::Array(_))) {
            return Err(PatchError::PathUnresolvable { index });
        }
    }
}

/// The document-aware half of the library's `validator`.
fn validate_against(
    doc: Option<&Value>,
    op: &Operation<'_>,
    fragment: &str,
) -> Result<(), PatchError> {
    if !doc_truthy(doc) {
        return Ok(());
    }
    let index = op.index;
    match op.op {
        Op::Add => {
            let path_len = op.path.split('/').count();
            let existing_len = fragment.split('/').count();
            if path_len != existing_len + 1 && path_len != existing_len {
                return Err(PatchError::PathCannotAdd { index });
            }
        }
        Op::Replace | Op::Remove | Op::Get => {
            if op.path != fragment {
                return Err(PatchError::PathUnresolvable { index });
            }
        }
        Op::Move | Op::Copy => {
            // `validate([{op: "_get", path: from}], document)`: only an
            // unresolvable `from` counts; other library errors are ignored,
            // a TypeError propagates.
            let from = op.from.unwrap_or("");
            let probe = Operation {
                op: Op::Get,
                path: from,
                from: None,
                value: None,
                index: 0,
            };
            if from.is_empty() || !from.starts_with('/') {
                return Ok(());
            }
            match locate(doc, &probe) {
                Err(PatchError::PathUnresolvable { .. }) => {
                    return Err(PatchError::FromUnresolvable { index });
                }
                Err(PatchError::TypeError { reason, .. }) => {
                    return Err(PatchError::TypeError { index, reason });
                }
                _ => {}
            }
        }
        Op::Test => {}
    }
    Ok(())
}

fn apply_root(
    doc: &mut Option<Value>,
    op: &Operation<'_>,
    undo: &mut Vec<Undo>,
) -> Result<(), PatchError> {
    let index = op.index;
    match op.op {
        Op::Add | Op::Replace => {
            let old = std::mem::replace(doc, op.value.cloned());
            undo.push(Undo::Root(old));
        }
        Op::Move | Op::Copy => {
            let from = op.from.unwrap_or("");
            if !from.is_empty() {
                let new = match raw_get(doc.as_ref(), from, index)? {
                    Got::Own(v) => Some(v.into_owned()),
                    Got::Undefined => None,
                    Got::Inherited => {
                        return Err(PatchError::Unrepresentable {
                            index,
                            reason: "the value is an inherited JavaScript function",
                        });
                    }
                };
                let old = std::mem::replace(doc, new);
                undo.push(Undo::Root(old));
            }
        }
        Op::Test => {
            let value = op.value.unwrap_or(&Value::Null);
            if !are_equal(doc.as_ref(), value) {
                return Err(PatchError::TestFailed { index });
            }
        }
        Op::Remove => {
            let old = doc.replace(Value::Null);
            undo.push(Undo::Root(old));
        }
        Op::Get => {}
    }
    Ok(())
}

fn array_op(
    doc: &mut Option<Value>,
    steps: &[Step],
    idx: i64,
    op: &Operation<'_>,
    undo: &mut Vec<Undo>,
) -> Result<(), PatchError> {
    let index = op.index;
    match op.op {
        Op::Move | Op::Copy => return move_or_copy(doc, op, undo),
        Op::Get => return Ok(()),
        _ => {}
    }
    let Some(Value::Array(arr)) = doc.as_mut().and_then(|d| resolve_mut(d, steps)) else {
        return Err(PatchError::PathUnresolvable { index });
    };
    match op.op {
        Op::Add => {
            let at = splice_start(idx, arr.len());
            arr.insert(at, op.value.cloned().unwrap_or(Value::Null));
            undo.push(Undo::ArrInserted(steps.to_vec(), at));
        }
        Op::Remove => {
            let at = splice_start(idx, arr.len());
            if at < arr.len() {
                let old = arr.remove(at);
                undo.push(Undo::ArrRemoved(steps.to_vec(), at, old));
            }
        }
        Op::Replace => match usize::try_from(idx) {
            Ok(i) if i < arr.len() => {
                let old = std::mem::replace(&mut arr[i], op.value.cloned().unwrap_or(Value::Null));
                undo.push(Undo::ArrReplaced(steps.to_vec(), i, old));
            }
            // A negative index sets a property JSON does not show.
            _ => {}
        },
        Op::Test => {
            let current = usize::try_from(idx).ok().and_then(|i| arr.get(i));
            if !are_equal(current, op.value.unwrap_or(&Value::Null)) {
                return Err(PatchError::TestFailed { index });
            }
        }
        Op::Move | Op::Copy | Op::Get => {}
    }
    Ok(())
}

fn object_op(
    doc: &mut Option<Value>,
    steps: &[Step],
    key: &str,
    op: &Operation<'_>,
    undo: &mut Vec<Undo>,
) -> Result<(), PatchError> {
    let index = op.index;
    match op.op {
        Op::Move | Op::Copy => return move_or_copy(doc, op, undo),
        Op::Get => return Ok(()),
        Op::Test => {
            let root = doc.as_ref();
            let obj = root.map(|d| resolve(d, steps));
            let got = js_get(obj, key).map_err(|reason| PatchError::TypeError { index, reason })?;
            if !got_equal(&got, op.value.unwrap_or(&Value::Null)) {
                return Err(PatchError::TestFailed { index });
            }
            return Ok(());
        }
        _ => {}
    }
    let target = doc.as_mut().and_then(|d| resolve_mut(d, steps));
    match target {
        Some(Value::Object(map)) => match op.op {
            Op::Add | Op::Replace => {
                let value = op.value.cloned().unwrap_or(Value::Null);
                obj_set(map, steps, key.to_owned(), value, undo);
            }
            Op::Remove => {
                obj_remove(map, steps, key, false, undo);
            }
            _ => {}
        },
        // Assigning to or deleting from a primitive root does nothing (the
        // library runs in sloppy mode).
        Some(_) => {}
        None => {
            return Err(PatchError::TypeError {
                index,
                reason: "cannot set properties of undefined",
            });
        }
    }
    Ok(())
}

fn move_or_copy(
    doc: &mut Option<Value>,
    op: &Operation<'_>,
    undo: &mut Vec<Undo>,
) -> Result<(), PatchError> {
    let index = op.index;
    let from = op.from.unwrap_or("");
    let value = if op.op == Op::Move {
        if from.is_empty() {
            return Err(PatchError::Unrepresentable {
                index,
                reason: "moving the whole document into itself makes a cycle",
            });
        }
        raw_remove(doc, from, index, undo)?
    } else if from.is_empty() {
        Got::Own(Cow::Owned(doc.clone().unwrap_or(Value::Null)))
    } else {
        // `_deepClone(undefined)` is `null`.
        match raw_get(doc.as_ref(), from, index)? {
            Got::Own(v) => Got::Own(Cow::Owned(v.into_owned())),
            Got::Undefined => Got::Own(Cow::Owned(Value::Null)),
            Got::Inherited => Got::Inherited,
        }
    };
    let value = match value {
        Got::Own(v) => v.into_owned(),
        Got::Undefined | Got::Inherited => {
            return Err(PatchError::Unrepresentable {
                index,
                reason: "the moved value is undefined or an inherited JavaScript function",
            });
        }
    };
    raw_add(doc, op.path, value, index, undo)
}

/// Where an unvalidated walk ends: the parent and the final key.
enum Parent {
    Container(Vec<Step>, ParentKey),
    /// The parent is a string, number or boolean: writes do nothing.
    Primitive,
}

enum ParentKey {
    Prop(String),
    Index(i64),
}

/// The unvalidated walk of `applyOperation(document, {op, path})`.
fn walk_unvalidated(doc: Option<&Value>, path: &str, index: usize) -> Result<Parent, PatchError> {
    let type_err = |reason| PatchError::TypeError { index, reason };
    let keys: Vec<&str> = path.split('/').collect();
    let len = keys.len();
    let mut steps: Vec<Step> = Vec::new();
    let Some(root) = doc else {
        return Err(type_err("cannot read properties of undefined"));
    };
    let mut t = 1;
    loop {
        // A path without "/" reads the property named "undefined".
        let key: Cow<'_, str> = match keys.get(t) {
            Some(k) => unescape(k),
            None => Cow::Borrowed("undefined"),
        };
        if keys.get(t).is_some() && banned(&key, keys[t - 1]) {
            return Err(type_err(PROTO_BANNED));
        }
        t += 1;
        let cur = resolve(root, &steps);
        match cur {
            Value::Null => return Err(type_err("cannot read properties of null")),
            Value::Array(arr) => {
                if keys.get(t - 1).is_none() {
                    return Err(type_err("cannot read properties of undefined"));
                }
                let idx = if key == "-" {
                    Some(arr.len() as i64)
                } else if is_integer(&key) {
                    Some(to_int32(&key))
                } else {
                    None
                };
                if t >= len {
                    return Ok(match idx {
                        Some(i) => Parent::Container(steps, ParentKey::Index(i)),
                        None => Parent::Container(steps, ParentKey::Prop(key.into_owned())),
                    });
                }
                match idx.and_then(|i| usize::try_from(i).ok()) {
                    Some(i) if i < arr.len() => steps.push(Step::Index(i)),
                    _ => return Err(type_err("cannot read properties of undefined")),
                }
            }
            Value::Object(map) => {
                if t >= len {
                    return Ok(Parent::Container(steps, ParentKey::Prop(key.into_owned())));
                }
                match map.get(key.as_ref()) {
                    Some(Value::Null) => return Err(type_err("cannot read properties of null")),
                    Some(_) => steps.push(Step::Key(key.into_owned())),
                    None => return Err(type_err("cannot read properties of undefined")),
                }
            }
            _ => {
                if t >= len {
                    return Ok(Parent::Primitive);
                }
                // A property of a primitive: undefined for our purposes.
                return Err(type_err("cannot read properties of undefined"));
            }
        }
    }
}

/// `getValueByPointer(document, pointer)` without validation.
fn raw_get<'a>(doc: Option<&'a Value>, path: &str, index: usize) -> Result<Got<'a>, PatchError> {
    if path.is_empty() {
        return Ok(match doc {
            Some(v) => Got::Own(Cow::Borrowed(v)),
            None => Got::Undefined,
        });
    }
    match walk_unvalidated(doc, path, index)? {
        Parent::Primitive => Ok(Got::Undefined),
        Parent::Container(steps, key) => {
            let Some(root) = doc else {
                return Ok(Got::Undefined);
            };
            let parent = resolve(root, &steps);
            match key {
                ParentKey::Prop(k) => js_get(Some(parent), &k)
                    .map_err(|reason| PatchError::TypeError { index, reason }),
                ParentKey::Index(i) => Ok(match (parent, usize::try_from(i)) {
                    (Value::Array(a), Ok(i)) if i < a.len() => Got::Own(Cow::Borrowed(&a[i])),
                    _ => Got::Undefined,
                }),
            }
        }
    }
}

/// The `remove` inside `move` (unvalidated); returns the removed value.
fn raw_remove(
    doc: &mut Option<Value>,
    path: &str,
    index: usize,
    undo: &mut Vec<Undo>,
) -> Result<Got<'static>, PatchError> {
    match walk_unvalidated(doc.as_ref(), path, index)? {
        Parent::Primitive => Ok(Got::Undefined),
        Parent::Container(steps, key) => {
            let Some(parent) = doc.as_mut().and_then(|d| resolve_mut(d, &steps)) else {
                return Ok(Got::Undefined);
            };
            Ok(match (parent, key) {
                (Value::Object(map), ParentKey::Prop(k)) => {
                    match obj_remove(map, &steps, &k, true, undo) {
                        Some(v) => Got::Own(Cow::Owned(v)),
                        None if OBJECT_PROTO.contains(&k.as_str()) => Got::Inherited,
                        None => Got::Undefined,
                    }
                }
                (Value::Array(arr), ParentKey::Index(i)) => {
                    let at = splice_start(i, arr.len());
                    if at < arr.len() {
                        let v = arr.remove(at);
                        undo.push(Undo::ArrRemoved(steps.clone(), at, v.clone()));
                        Got::Own(Cow::Owned(v))
                    } else {
                        Got::Undefined
                    }
                }
                _ => Got::Undefined,
            })
        }
    }
}

/// The `add` inside `move`/`copy` (unvalidated).
fn raw_add(
    doc: &mut Option<Value>,
    path: &str,
    value: Value,
    index: usize,
    undo: &mut Vec<Undo>,
) -> Result<(), PatchError> {
    if path.is_empty() {
        let old = doc.replace(value);
        undo.push(Undo::Root(old));
        return Ok(());
    }
    match walk_unvalidated(doc.as_ref(), path, index)? {
        Parent::Primitive => Ok(()),
        Parent::Container(steps, key) => {
            let Some(parent) = doc.as_mut().and_then(|d| resolve_mut(d, &steps)) else {
                return Err(PatchError::TypeError {
                    index,
                    reason: "cannot set properties of undefined",
                });
            };
            match (parent, key) {
                (Value::Object(map), ParentKey::Prop(k)) => {
                    obj_set(map, &steps, k, value, undo);
                }
                (Value::Array(arr), ParentKey::Index(i)) => {
                    let at = splice_start(i, arr.len());
                    arr.insert(at, value);
                    undo.push(Undo::ArrInserted(steps.clone(), at));
                }
                // A named property on an array is invisible in JSON.
                _ => {}
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(doc: Value, patch: Value) -> Value {
        apply_patch(&doc, &patch).unwrap()
    }

    #[test]
    fn rfc_basics() {
        assert_eq!(
            ok(json!({}), json!([{"op":"add","path":"/a","value":1}])),
            json!({"a":1})
        );
        assert_eq!(
            ok(
                json!({"a":[1,2]}),
                json!([{"op":"add","path":"/a/-","value":3}])
            ),
            json!({"a":[1,2,3]})
        );
        assert_eq!(
            ok(
                json!({"a":[1,2]}),
                json!([{"op":"add","path":"/a/0","value":0}])
            ),
            json!({"a":[0,1,2]})
        );
        assert_eq!(
            ok(json!({"a":1,"b":2}), json!([{"op":"remove","path":"/a"}])),
            json!({"b":2})
        );
        assert_eq!(
            ok(
                json!({"a":1}),
                json!([{"op":"move","from":"/a","path":"/b"}])
            ),
            json!({"b":1})
        );
        assert_eq!(
            ok(
                json!({"a":{"x":1}}),
                json!([{"op":"copy","from":"/a","path":"/b"}])
            ),
            json!({"a":{"x":1},"b":{"x":1}})
        );
        assert_eq!(
            ok(
                json!({"a":1}),
                json!([{"op":"test","path":"/a","value":1.0}])
            ),
            json!({"a":1})
        );
        assert_eq!(
            ok(json!({"a":1}), json!([{"op":"remove","path":""}])),
            Value::Null
        );
    }

    #[test]
    fn failures_are_atomic_and_named() {
        let doc = json!({"a":1});
        let patch = json!([{"op":"add","path":"/b","value":2},{"op":"test","path":"/a","value":2}]);
        assert_eq!(
            apply_patch(&doc, &patch),
            Err(PatchError::TestFailed { index: 1 })
        );
        assert_eq!(doc, json!({"a":1}));
        assert_eq!(
            apply_patch(&doc, &json!([{"op":"replace","path":"/x","value":2}])),
            Err(PatchError::PathUnresolvable { index: 0 })
        );
        assert_eq!(
            apply_patch(&doc, &json!([{"op":"add","path":"/x/y","value":2}])),
            Err(PatchError::PathCannotAdd { index: 0 })
        );
        assert_eq!(
            apply_patch(
                &json!({"a":[]}),
                &json!([{"op":"add","path":"/a/1","value":2}])
            ),
            Err(PatchError::OutOfBounds { index: 0 })
        );
        assert_eq!(
            apply_patch(
                &json!({"a":[]}),
                &json!([{"op":"add","path":"/a/x","value":2}])
            ),
            Err(PatchError::IllegalArrayIndex { index: 0 })
        );
        assert_eq!(
            apply_patch(&doc, &json!({})),
            Err(PatchError::SequenceNotAnArray)
        );
        assert_eq!(
            apply_patch(&doc, &json!([{"op":"nope","path":"/a"}])),
            Err(PatchError::OpInvalid { index: 0 })
        );
        assert_eq!(
            apply_patch(&doc, &json!([{"op":"add","path":"/__proto__","value":1}])),
            Err(PatchError::TypeError {
                index: 0,
                reason: PROTO_BANNED
            })
        );
        assert_eq!(
            apply_patch(&doc, &json!([{"op":"move","from":"/nope","path":"/b"}])),
            Err(PatchError::FromUnresolvable { index: 0 })
        );
    }

    #[test]
    fn library_quirks() {
        // Leading zeros and the empty token are array indexes.
        assert_eq!(
            ok(json!([1, 2]), json!([{"op":"add","path":"/01","value":9}])),
            json!([1, 9, 2])
        );
        assert_eq!(
            ok(json!([1]), json!([{"op":"add","path":"/","value":0}])),
            json!([0, 1])
        );
        // Inherited names exist: replacing one creates it, removing one is a no-op.
        assert_eq!(
            ok(
                json!({}),
                json!([{"op":"replace","path":"/toString","value":1}])
            ),
            json!({"toString":1})
        );
        assert_eq!(
            ok(json!({}), json!([{"op":"remove","path":"/valueOf"}])),
            json!({})
        );
        // A primitive root validates against its properties and stays as it is.
        assert_eq!(
            ok(
                json!("abc"),
                json!([{"op":"replace","path":"/length","value":1}])
            ),
            json!("abc")
        );
        assert!(
            apply_patch(
                &json!("abc"),
                &json!([{"op":"replace","path":"/x","value":1}])
            )
            .is_err()
        );
        // A null root throws on any non-root path.
        assert!(apply_patch(&Value::Null, &json!([{"op":"add","path":"/a","value":1}])).is_err());
        // Root move takes the value without removing it.
        assert_eq!(
            ok(
                json!({"a":{"b":1}}),
                json!([{"op":"move","from":"/a","path":""}])
            ),
            json!({"b":1})
        );
        // Move to an index past the end appends.
        assert_eq!(
            ok(
                json!([1, 2, 3]),
                json!([{"op":"move","from":"/0","path":"/7"}])
            ),
            json!([2, 3, 1])
        );
        // _get is a validated no-op.
        assert_eq!(
            ok(json!({"a":1}), json!([{"op":"_get","path":"/a"}])),
            json!({"a":1})
        );
        assert!(apply_patch(&json!({"a":1}), &json!([{"op":"_get","path":"/b"}])).is_err());
        // Undefined document (JS) is copied as null.
        assert_eq!(apply_patch_js(None, &json!([])).unwrap(), Some(Value::Null));
    }

    #[test]
    fn a_failing_patch_in_place_restores_the_document_exactly() {
        let orig = json!({"a":1,"b":[1,2,3],"c":{"d":"x","z":0},"k":null});
        let mut doc = Some(orig.clone());
        let patch = json!([
            {"op":"remove","path":"/a"},
            {"op":"add","path":"/a","value":9},
            {"op":"remove","path":"/b/0"},
            {"op":"add","path":"/b/-","value":4},
            {"op":"replace","path":"/b/0","value":0},
            {"op":"move","from":"/c/d","path":"/e"},
            {"op":"copy","from":"/b","path":"/f"},
            {"op":"replace","path":"/k","value":{"n":1}},
            {"op":"replace","path":"","value":[1]},
            {"op":"add","path":"/0","value":2},
            {"op":"test","path":"/0","value":3}
        ]);
        assert_eq!(
            apply_patch_in_place(&mut doc, &patch),
            Err(PatchError::TestFailed { index: 10 })
        );
        // Same value and same key order.
        assert_eq!(
            serde_json::to_string(&doc).unwrap(),
            serde_json::to_string(&Some(orig)).unwrap()
        );
        let mut undefined = None;
        assert!(
            apply_patch_in_place(&mut undefined, &json!([{"op":"add","path":"/a","value":1}]))
                .is_err()
        );
        assert_eq!(undefined, None);
    }

    #[test]
    fn in_place_and_copying_agree_on_success() {
        let doc = json!({"a":{"b":[1,{"c":2}]},"x":"y"});
        let patch = json!([
            {"op":"move","from":"/a/b/1","path":"/moved"},
            {"op":"copy","from":"/moved","path":"/a/b/0"},
            {"op":"remove","path":"/x"},
            {"op":"add","path":"/x","value":[]}
        ]);
        let copied = apply_patch(&doc, &patch).unwrap();
        let mut in_place = Some(doc);
        apply_patch_in_place(&mut in_place, &patch).unwrap();
        assert_eq!(in_place, Some(copied.clone()));
        assert_eq!(
            copied,
            json!({"a":{"b":[{"c":2},1]},"moved":{"c":2},"x":[]})
        );
    }
}
