//! JSON Patch (RFC 6902) operations, as `STATE_DELTA.delta` and
//! `ACTIVITY_DELTA.patch` carry them. Members an operation does not define are
//! kept in `extra`, as the RFC asks.

use serde_json::Value;

use super::json::{json_object, json_union};
use super::primitives::JsonPointer;

json_object! {
    /// `{"op":"add","path":...,"value":...}`.
    tag "op" = "add";
    pub struct AddOperation {
        /// `path`.
        "path" => path: JsonPointer = req,
        /// `value` (the key must be present; `null` is a value).
        "value" => value: Value = req,
    }
}

json_object! {
    /// `{"op":"remove","path":...}`.
    tag "op" = "remove";
    pub struct RemoveOperation {
        /// `path`.
        "path" => path: JsonPointer = req,
    }
}

json_object! {
    /// `{"op":"replace","path":...,"value":...}`.
    tag "op" = "replace";
    pub struct ReplaceOperation {
        /// `path`.
        "path" => path: JsonPointer = req,
        /// `value` (the key must be present; `null` is a value).
        "value" => value: Value = req,
    }
}

json_object! {
    /// `{"op":"move","from":...,"path":...}`.
    tag "op" = "move";
    pub struct MoveOperation {
        /// `from`.
        "from" => from: JsonPointer = req,
        /// `path`.
        "path" => path: JsonPointer = req,
    }
}

json_object! {
    /// `{"op":"copy","from":...,"path":...}`.
    tag "op" = "copy";
    pub struct CopyOperation {
        /// `from`.
        "from" => from: JsonPointer = req,
        /// `path`.
        "path" => path: JsonPointer = req,
    }
}

json_object! {
    /// `{"op":"test","path":...,"value":...}`.
    tag "op" = "test";
    pub struct TestOperation {
        /// `path`.
        "path" => path: JsonPointer = req,
        /// `value` (the key must be present; `null` is a value).
        "value" => value: Value = req,
    }
}

json_union! {
    /// One JSON Patch operation, discriminated by `op`.
    tag "op";
    pub enum PatchOperation {
        /// `add`
        Add(AddOperation) = "add",
        /// `remove`
        Remove(RemoveOperation) = "remove",
        /// `replace`
        Replace(ReplaceOperation) = "replace",
        /// `move`
        Move(MoveOperation) = "move",
        /// `copy`
        Copy(CopyOperation) = "copy",
        /// `test`
        Test(TestOperation) = "test",
    }
}

impl PatchOperation {
    /// The operation's `path`.
    pub fn path(&self) -> &JsonPointer {
        match self {
            PatchOperation::Add(o) => &o.path,
            PatchOperation::Remove(o) => &o.path,
            PatchOperation::Replace(o) => &o.path,
            PatchOperation::Move(o) => &o.path,
            PatchOperation::Copy(o) => &o.path,
            PatchOperation::Test(o) => &o.path,
        }
    }
}

/// A JSON Patch document: an ordered list of operations (empty is a no-op).
pub type JsonPatch = Vec<PatchOperation>;
