//! Test support: an independent, table-driven description of the AG-UI 1.0
//! event schema (written from `@ag-ui/core` 1.0.0's zod schemas, separately
//! from the model under test), proptest strategies that generate valid events
//! with random unknown keys at every depth, and a mutator that breaks one
//! field and says where.

#![allow(dead_code)]

use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Strategy};
use serde_json::{Map, Value};

/// What a field accepts.
#[derive(Debug)]
pub enum Kind {
    /// A string.
    Str,
    /// A boolean.
    Bool,
    /// Any JSON value, `null` included.
    Any,
    /// Any JSON value except a bare `null`.
    AnyNonNull,
    /// A JSON object with arbitrary content (metadata, activity content).
    Object,
    /// An integer within ±(2^53−1).
    Timestamp,
    /// A non-negative integer ≤ 2^53−1.
    Count,
    /// A JSON Pointer.
    Pointer,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// An array.
    Array(&'static Kind),
    /// An array with at least one element.
    NonEmpty(&'static Kind),
    /// An object with these declared fields (unknown keys allowed).
    Obj(&'static [Field]),
    /// Objects told apart by a tag key.
    Union(&'static str, &'static [(&'static str, &'static [Field])]),
    /// A string, or an array of content parts.
    Content,
}

/// A declared key.
#[derive(Debug)]
pub struct Field {
    pub key: &'static str,
    pub kind: Kind,
    pub required: bool,
}

const fn req(key: &'static str, kind: Kind) -> Field {
    Field {
        key,
        kind,
        required: true,
    }
}

const fn opt(key: &'static str, kind: Kind) -> Field {
    Field {
        key,
        kind,
        required: false,
    }
}

use Kind::*;

static STR: Kind = Str;
static FUNCTION: &[Field] = &[req("name", Str), req("arguments", Str)];
static TOOL_CALL: Kind = Obj(&[
    req("id", Str),
    req("type", OneOf(&["function"])),
    req("function", Obj(FUNCTION)),
    opt("encryptedValue", Str),
    opt("metadata", Object),
]);
const SOURCE: Kind = Union(
    "type",
    &[
        ("data", &[req("value", Str), req("mimeType", Str)]),
        ("url", &[req("value", Str), opt("mimeType", Str)]),
        (
            "file",
            &[
                req("value", Str),
                opt("provider", Str),
                opt("mimeType", Str),
            ],
        ),
    ],
);
static MEDIA: &[Field] = &[
    opt("id", Str),
    req("source", SOURCE),
    opt("metadata", AnyNonNull),
];
pub static PART: Kind = Union(
    "type",
    &[
        (
            "text",
            &[
                opt("id", Str),
                req("text", Str),
                opt("metadata", AnyNonNull),
            ],
        ),
        ("image", MEDIA),
        ("audio", MEDIA),
        ("video", MEDIA),
        ("document", MEDIA),
    ],
);
pub static MESSAGE: Kind = Union(
    "role",
    &[
        (
            "developer",
            &[
                req("id", Str),
                req("content", Str),
                opt("name", Str),
                opt("encryptedValue", Str),
                opt("metadata", Object),
                opt("subagentRunId", Str),
            ],
        ),
        (
            "system",
            &[
                req("id", Str),
                req("content", Str),
                opt("name", Str),
                opt("encryptedValue", Str),
                opt("metadata", Object),
                opt("subagentRunId", Str),
            ],
        ),
        (
            "assistant",
            &[
                req("id", Str),
                opt("content", Str),
                opt("toolCalls", Array(&TOOL_CALL)),
                opt("name", Str),
                opt("encryptedValue", Str),
                opt("metadata", Object),
                opt("subagentRunId", Str),
            ],
        ),
        (
            "user",
            &[
                req("id", Str),
                req("content", Content),
                opt("name", Str),
                opt("encryptedValue", Str),
                opt("metadata", Object),
                opt("subagentRunId", Str),
            ],
        ),
        (
            "tool",
            &[
                req("id", Str),
                req("content", Content),
                req("toolCallId", Str),
                opt("error", Str),
                opt("encryptedValue", Str),
                opt("metadata", Object),
                opt("subagentRunId", Str),
            ],
        ),
        (
            "activity",
            &[
                req("id", Str),
                req("activityType", Str),
                req("content", Object),
                opt("metadata", Object),
                opt("subagentRunId", Str),
            ],
        ),
        (
            "reasoning",
            &[
                req("id", Str),
                req("content", Str),
                opt("encryptedValue", Str),
                opt("metadata", Object),
                opt("subagentRunId", Str),
            ],
        ),
    ],
);
static OP: Kind = Union(
    "op",
    &[
        ("add", &[req("path", Pointer), req("value", Any)]),
        ("remove", &[req("path", Pointer)]),
        ("replace", &[req("path", Pointer), req("value", Any)]),
        ("move", &[req("from", Pointer), req("path", Pointer)]),
        ("copy", &[req("from", Pointer), req("path", Pointer)]),
        ("test", &[req("path", Pointer), req("value", Any)]),
    ],
);
static USAGE: Kind = Obj(&[
    opt("provider", Str),
    opt("model", Str),
    opt("inputTokens", Count),
    opt("outputTokens", Count),
    opt("totalTokens", Count),
    opt("reasoningTokens", Count),
    opt("cachedInputTokens", Count),
    opt("cacheWriteInputTokens", Count),
]);
static INTERRUPT: Kind = Obj(&[
    req("id", Str),
    req("reason", Str),
    opt("message", Str),
    opt("toolCallId", Str),
    opt("responseSchema", Object),
    opt("expiresAt", Str),
    opt("metadata", Object),
    opt("subagentRunId", Str),
]);
static TOOL: Kind = Obj(&[
    req("name", Str),
    req("description", Str),
    opt("parameters", AnyNonNull),
    opt("metadata", Object),
]);
static CONTEXT: Kind = Obj(&[req("description", Str), req("value", Str)]);
static RESUME: Kind = Obj(&[
    req("interruptId", Str),
    req("status", OneOf(&["resolved", "cancelled"])),
    opt("payload", AnyNonNull),
    opt("metadata", Object),
]);
pub static INPUT: Kind = Obj(&[
    req("threadId", Str),
    req("runId", Str),
    opt("protocolVersion", Str),
    opt("parentRunId", Str),
    opt("state", Any),
    req("messages", Array(&MESSAGE)),
    opt("tools", Array(&TOOL)),
    opt("context", Array(&CONTEXT)),
    opt("forwardedProps", AnyNonNull),
    opt("resume", Array(&RESUME)),
]);

/// Whether an event type declares `subagentRunId`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Attribution {
    None,
    Optional,
    Required,
}

/// Every known event type: wire name, attribution, specific fields.
pub static EVENTS: &[(&str, Attribution, &[Field])] = &[
    (
        "RUN_STARTED",
        Attribution::None,
        &[
            req("threadId", Str),
            req("runId", Str),
            opt("protocolVersion", Str),
            opt("parentRunId", Str),
            opt("input", Obj(&[])),
        ],
    ),
    (
        "RUN_FINISHED",
        Attribution::None,
        &[
            req("threadId", Str),
            req("runId", Str),
            opt("result", AnyNonNull),
            opt(
                "outcome",
                Union(
                    "type",
                    &[
                        ("success", &[opt("pendingToolCallIds", Array(&STR))]),
                        ("interrupt", &[req("interrupts", NonEmpty(&INTERRUPT))]),
                        ("cancelled", &[]),
                    ],
                ),
            ),
            opt("usage", Array(&USAGE)),
        ],
    ),
    (
        "RUN_ERROR",
        Attribution::None,
        &[
            req("message", Str),
            opt("code", Str),
            opt("usage", Array(&USAGE)),
        ],
    ),
    (
        "STEP_STARTED",
        Attribution::Optional,
        &[req("stepName", Str)],
    ),
    (
        "STEP_FINISHED",
        Attribution::Optional,
        &[req("stepName", Str)],
    ),
    (
        "TEXT_MESSAGE_START",
        Attribution::Optional,
        &[
            req("messageId", Str),
            opt("role", OneOf(&["developer", "system", "assistant", "user"])),
            opt("name", Str),
        ],
    ),
    (
        "TEXT_MESSAGE_CONTENT",
        Attribution::Optional,
        &[req("messageId", Str), req("delta", Str)],
    ),
    (
        "TEXT_MESSAGE_END",
        Attribution::Optional,
        &[req("messageId", Str)],
    ),
    (
        "TEXT_MESSAGE_CHUNK",
        Attribution::Optional,
        &[
            opt("messageId", Str),
            opt("role", OneOf(&["developer", "system", "assistant", "user"])),
            opt("delta", Str),
            opt("name", Str),
        ],
    ),
    (
        "TOOL_CALL_START",
        Attribution::Optional,
        &[
            req("toolCallId", Str),
            req("toolCallName", Str),
            opt("parentMessageId", Str),
        ],
    ),
    (
        "TOOL_CALL_ARGS",
        Attribution::Optional,
        &[req("toolCallId", Str), req("delta", Str)],
    ),
    (
        "TOOL_CALL_END",
        Attribution::Optional,
        &[req("toolCallId", Str)],
    ),
    (
        "TOOL_CALL_CHUNK",
        Attribution::Optional,
        &[
            opt("toolCallId", Str),
            opt("toolCallName", Str),
            opt("parentMessageId", Str),
            opt("delta", Str),
        ],
    ),
    (
        "TOOL_CALL_RESULT",
        Attribution::Optional,
        &[
            req("messageId", Str),
            req("toolCallId", Str),
            req("content", Content),
            opt("role", OneOf(&["tool"])),
        ],
    ),
    (
        "STATE_SNAPSHOT",
        Attribution::Optional,
        &[req("snapshot", Any)],
    ),
    (
        "STATE_DELTA",
        Attribution::Optional,
        &[req("delta", Array(&OP))],
    ),
    (
        "MESSAGES_SNAPSHOT",
        Attribution::None,
        &[req("messages", Array(&MESSAGE))],
    ),
    (
        "ACTIVITY_SNAPSHOT",
        Attribution::Optional,
        &[
            req("messageId", Str),
            req("activityType", Str),
            req("content", Object),
            opt("replace", Bool),
        ],
    ),
    (
        "ACTIVITY_DELTA",
        Attribution::Optional,
        &[
            req("messageId", Str),
            req("activityType", Str),
            req("patch", Array(&OP)),
        ],
    ),
    (
        "RAW",
        Attribution::Optional,
        &[req("event", Any), opt("source", Str)],
    ),
    (
        "CUSTOM",
        Attribution::Optional,
        &[req("name", Str), req("value", Any)],
    ),
    (
        "REASONING_START",
        Attribution::Optional,
        &[req("messageId", Str)],
    ),
    (
        "REASONING_MESSAGE_START",
        Attribution::Optional,
        &[req("messageId", Str), req("role", OneOf(&["reasoning"]))],
    ),
    (
        "REASONING_MESSAGE_CONTENT",
        Attribution::Optional,
        &[req("messageId", Str), req("delta", Str)],
    ),
    (
        "REASONING_MESSAGE_END",
        Attribution::Optional,
        &[req("messageId", Str)],
    ),
    (
        "REASONING_MESSAGE_CHUNK",
        Attribution::Optional,
        &[opt("messageId", Str), opt("delta", Str)],
    ),
    (
        "REASONING_END",
        Attribution::Optional,
        &[req("messageId", Str)],
    ),
    (
        "REASONING_ENCRYPTED_VALUE",
        Attribution::Optional,
        &[
            req("subtype", OneOf(&["tool-call", "message"])),
            req("entityId", Str),
            req("encryptedValue", Str),
        ],
    ),
    (
        "SUBAGENT_STARTED",
        Attribution::Required,
        &[
            req("name", Str),
            opt("description", Str),
            opt("parentSubagentRunId", Str),
            opt("parentToolCallId", Str),
            opt("parentMessageId", Str),
        ],
    ),
    (
        "SUBAGENT_FINISHED",
        Attribution::Required,
        &[
            opt("result", AnyNonNull),
            opt(
                "outcome",
                Union(
                    "type",
                    &[
                        ("success", &[]),
                        ("suspended", &[opt("interruptIds", Array(&STR))]),
                    ],
                ),
            ),
        ],
    ),
    (
        "SUBAGENT_ERROR",
        Attribution::Required,
        &[req("message", Str), opt("code", Str)],
    ),
];

static BASE: &[Field] = &[
    opt("timestamp", Timestamp),
    opt("rawEvent", AnyNonNull),
    opt("metadata", Object),
];

/// The declared fields of an event type, base and attribution included.
pub fn event_fields(ty: &str) -> Vec<&'static Field> {
    static SUB_OPT: Field = opt("subagentRunId", Str);
    static SUB_REQ: Field = req("subagentRunId", Str);
    let (_, attribution, fields) = EVENTS
        .iter()
        .find(|(name, _, _)| *name == ty)
        .unwrap_or_else(|| panic!("unknown type {ty}"));
    let mut all: Vec<&'static Field> = fields.iter().collect();
    match attribution {
        Attribution::None => {}
        Attribution::Optional => all.push(&SUB_OPT),
        Attribution::Required => all.push(&SUB_REQ),
    }
    all.extend(BASE.iter());
    all
}

// RUN_STARTED.input is declared as a placeholder (`Obj(&[])`) in the event
// table, because a field holds its kind by value and `INPUT` is a static.
fn resolve(field: &'static Field) -> &'static Kind {
    match (field.key, &field.kind) {
        ("input", Obj([])) => &INPUT,
        (_, kind) => kind,
    }
}

/// Variants of a union, with the source placeholder resolved.
fn variant_fields(
    variants: &'static [(&'static str, &'static [Field])],
    tag: &str,
) -> Option<&'static [Field]> {
    variants.iter().find(|(t, _)| *t == tag).map(|(_, f)| *f)
}

// ---------------------------------------------------------------------------
// Generators

/// Number spellings: integers of any size, fractions with trailing zeros,
/// exponents, negative zero.
pub fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        "-?[1-9][0-9]{15,30}",
        "-?(0|[1-9][0-9]{0,6})\\.[0-9]{1,6}0{0,3}",
        "-?[1-9]\\.[0-9]{1,4}[eE][+-]?[0-9]{1,3}",
        Just("-0".to_owned()),
        Just("1.10".to_owned()),
        Just("12345678901234567890123".to_owned()),
    ]
    .prop_map(|text| serde_json::from_str::<Value>(&text).expect("a JSON number"))
    .boxed()
}

/// Any string: arbitrary Unicode, controls, quotes, backslashes, astral
/// characters (surrogate pairs once escaped).
pub fn string() -> BoxedStrategy<String> {
    prop_oneof![
        3 => any::<String>(),
        1 => "[a-z0-9_\\-]{0,12}",
        1 => "[\"\\\\/\u{0}-\u{1f}\u{2028}\u{2029}😀🎉𝄞é中]{0,8}",
    ]
    .boxed()
}

/// Any JSON value, nested up to a few levels.
pub fn json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((string(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
    .boxed()
}

fn any_object() -> BoxedStrategy<Value> {
    prop::collection::vec((string(), json()), 0..4)
        .prop_map(|kv| Value::Object(kv.into_iter().collect()))
        .boxed()
}

/// Unknown keys: never a declared name (they all start with `x-`).
pub fn extras() -> BoxedStrategy<Vec<(String, Value)>> {
    prop_oneof![
        2 => Just(Vec::new()),
        1 => prop::collection::vec((string().prop_map(|k| format!("x-{k}")), json()), 1..3),
    ]
    .boxed()
}

fn pointer() -> BoxedStrategy<Value> {
    prop::collection::vec(
        prop_oneof![
            string().prop_map(|s| s.replace('~', "~0").replace('/', "~1")),
            Just("-".to_owned())
        ],
        0..4,
    )
    .prop_map(|tokens| Value::String(tokens.iter().map(|t| format!("/{t}")).collect()))
    .boxed()
}

fn safe_integer(min: i64) -> BoxedStrategy<Value> {
    const MAX: i64 = 9_007_199_254_740_991;
    (
        prop_oneof![
            min..=MAX,
            Just(MAX),
            Just(min),
            Just(0i64).prop_filter("", move |_| min <= 0)
        ],
        0..3u8,
    )
        .prop_map(|(n, spelling)| {
            let text = match spelling {
                0 => n.to_string(),
                1 => format!("{n}.0"),
                _ => format!("{n}.000"),
            };
            serde_json::from_str::<Value>(&text).expect("a JSON number")
        })
        .boxed()
}

/// A valid value of `kind`, with unknown keys on every object.
pub fn value(kind: &'static Kind, depth: u32) -> BoxedStrategy<Value> {
    match kind {
        Str => string().prop_map(Value::String).boxed(),
        Bool => any::<bool>().prop_map(Value::Bool).boxed(),
        Any => json(),
        AnyNonNull => json().prop_filter("not null", |v| !v.is_null()).boxed(),
        Object => any_object(),
        Timestamp => safe_integer(-9_007_199_254_740_991),
        Count => safe_integer(0),
        Pointer => pointer(),
        OneOf(values) => prop::sample::select(*values)
            .prop_map(|s| Value::String(s.to_owned()))
            .boxed(),
        Array(item) | NonEmpty(item) => {
            let min = usize::from(matches!(kind, NonEmpty(_)));
            let max = if depth > 2 { min + 1 } else { min + 3 };
            prop::collection::vec(value(item, depth + 1), min..max)
                .prop_map(Value::Array)
                .boxed()
        }
        Obj(fields) => object(fields.iter().collect(), None, depth),
        Union(tag, variants) => {
            let tag: &'static str = tag;
            let options: Vec<BoxedStrategy<Value>> = variants
                .iter()
                .map(|(name, fields)| object(fields.iter().collect(), Some((tag, name)), depth))
                .collect();
            prop::sample::select((0..options.len()).collect::<Vec<_>>())
                .prop_flat_map(move |i| options[i].clone())
                .boxed()
        }
        Content => prop_oneof![
            string().prop_map(Value::String),
            value(&CONTENT_PARTS, depth),
        ]
        .boxed(),
    }
}

static CONTENT_PARTS: Kind = Array(&PART);

/// An object of these fields (optional ones present or not), a fixed tag if
/// given, and random unknown keys.
pub fn object(
    fields: Vec<&'static Field>,
    tag: Option<(&'static str, &'static str)>,
    depth: u32,
) -> BoxedStrategy<Value> {
    let parts: Vec<BoxedStrategy<Option<(String, Value)>>> = fields
        .into_iter()
        .map(|f| {
            let kind = resolve(f);
            let key = f.key.to_owned();
            let v = value(kind, depth + 1).prop_map(move |v| (key.clone(), v));
            if f.required {
                v.prop_map(Some).boxed()
            } else {
                prop::option::weighted(0.5, v).boxed()
            }
        })
        .collect();
    (parts, extras())
        .prop_map(move |(present, extra)| {
            let mut map = Map::new();
            if let Some((k, v)) = tag {
                map.insert(k.to_owned(), Value::String(v.to_owned()));
            }
            for (k, v) in present.into_iter().flatten() {
                map.insert(k, v);
            }
            for (k, v) in extra {
                map.insert(k, v);
            }
            Value::Object(map)
        })
        .boxed()
}

/// A valid event of a random known type.
pub fn known_event() -> BoxedStrategy<Value> {
    let all: Vec<BoxedStrategy<Value>> = EVENTS
        .iter()
        .map(|(ty, _, _)| object(event_fields(ty), Some(("type", ty)), 0))
        .collect();
    prop::sample::select((0..all.len()).collect::<Vec<_>>())
        .prop_flat_map(move |i| all[i].clone())
        .boxed()
}

/// An event of a type that is not one of the 31, with random fields.
pub fn unknown_event() -> BoxedStrategy<Value> {
    (
        "[A-Z_]{1,20}|[a-z.]{1,12}",
        prop::collection::vec((string(), json()), 0..5),
    )
        .prop_filter("not a known type", |(ty, _)| {
            !EVENTS.iter().any(|(t, _, _)| t == ty)
        })
        .prop_map(|(ty, fields)| {
            let mut map = Map::new();
            map.insert("type".into(), Value::String(ty));
            for (k, v) in fields {
                if k != "type" {
                    map.insert(k, v);
                }
            }
            Value::Object(map)
        })
        .boxed()
}

// ---------------------------------------------------------------------------
// Mutation

/// One way to break a valid value at `path`, with the path the error must name.
#[derive(Debug, Clone)]
pub struct Site {
    /// Where the change is made: keys and indices from the root.
    pub at: Vec<Step>,
    /// What is done there.
    pub change: Change,
    /// Path the error must report, as `a.b[0].c`.
    pub expected_path: String,
}

#[derive(Debug, Clone)]
pub enum Step {
    Key(String),
    Index(usize),
}

#[derive(Debug, Clone)]
pub enum Change {
    /// Remove the key at the end of the path.
    Remove,
    /// Replace the value at the path.
    Set(Value),
}

fn show(path: &[Step]) -> String {
    let mut out = String::new();
    for (i, s) in path.iter().enumerate() {
        match s {
            Step::Index(n) => out.push_str(&format!("[{n}]")),
            Step::Key(k) => {
                if i > 0 {
                    out.push('.');
                }
                out.push_str(k);
            }
        }
    }
    out
}

fn wrong_for(kind: &Kind) -> Vec<Value> {
    use serde_json::json;
    match kind {
        Str => vec![json!(7), Value::Null, json!(["s"])],
        Bool => vec![json!("true"), Value::Null],
        Any => vec![],
        AnyNonNull => vec![Value::Null],
        Object => vec![Value::Null, json!([]), json!("o")],
        Timestamp => vec![
            json!(1.5),
            json!("1"),
            Value::Null,
            json!(9007199254740993u64),
        ],
        Count => vec![json!(-1), json!(0.5), Value::Null],
        Pointer => vec![json!("no-slash"), json!("/a~2"), json!(5)],
        OneOf(_) => vec![json!("zzz-not-allowed"), json!(1)],
        Array(_) => vec![json!({}), Value::Null],
        NonEmpty(_) => vec![json!([]), Value::Null],
        Obj(_) | Union(_, _) => vec![json!("x"), Value::Null, json!([])],
        Content => vec![json!(3), Value::Null, json!({})],
    }
}

fn sites_in_fields(
    fields: &[&'static Field],
    map: &Map<String, Value>,
    path: &mut Vec<Step>,
    out: &mut Vec<Site>,
) {
    for f in fields {
        let kind = resolve(f);
        path.push(Step::Key(f.key.to_owned()));
        match map.get(f.key) {
            None => {}
            Some(v) => {
                if f.required {
                    out.push(Site {
                        at: path.clone(),
                        change: Change::Remove,
                        expected_path: show(path),
                    });
                }
                for bad in wrong_for(kind) {
                    out.push(Site {
                        at: path.clone(),
                        change: Change::Set(bad),
                        expected_path: show(path),
                    });
                }
                sites_in(kind, v, path, out);
            }
        }
        path.pop();
    }
}

fn sites_in(kind: &'static Kind, v: &Value, path: &mut Vec<Step>, out: &mut Vec<Site>) {
    match (kind, v) {
        (Array(item) | NonEmpty(item), Value::Array(items)) => {
            for (i, x) in items.iter().enumerate() {
                path.push(Step::Index(i));
                for bad in wrong_for(item) {
                    out.push(Site {
                        at: path.clone(),
                        change: Change::Set(bad),
                        expected_path: show(path),
                    });
                }
                sites_in(item, x, path, out);
                path.pop();
            }
        }
        (Content, Value::Array(_)) => sites_in(&CONTENT_PARTS, v, path, out),
        (Obj(fields), Value::Object(map)) => {
            let fields: Vec<&'static Field> = fields.iter().collect();
            sites_in_fields(&fields, map, path, out);
        }
        (Union(tag, variants), Value::Object(map)) => {
            let Some(Value::String(t)) = map.get(*tag) else {
                return;
            };
            let Some(fields) = variant_fields(variants, t) else {
                return;
            };
            path.push(Step::Key((*tag).to_owned()));
            for bad in [Value::String("zzz-unknown-variant".into()), Value::Null] {
                out.push(Site {
                    at: path.clone(),
                    change: Change::Set(bad),
                    expected_path: show(path),
                });
            }
            out.push(Site {
                at: path.clone(),
                change: Change::Remove,
                expected_path: show(path),
            });
            path.pop();
            let fields: Vec<&'static Field> = fields.iter().collect();
            sites_in_fields(&fields, map, path, out);
        }
        _ => {}
    }
}

/// Every single-field change that makes a valid event invalid.
pub fn sites(event: &Value) -> Vec<Site> {
    let Some(ty) = event.get("type").and_then(Value::as_str) else {
        return Vec::new();
    };
    let Value::Object(map) = event else {
        return Vec::new();
    };
    let mut out = Vec::new();
    sites_in_fields(&event_fields(ty), map, &mut Vec::new(), &mut out);
    out
}

/// Every single-field change that makes a valid `RunAgentInput` invalid.
pub fn input_sites(input: &Value) -> Vec<Site> {
    let mut out = Vec::new();
    sites_in(&INPUT, input, &mut Vec::new(), &mut out);
    out
}

/// Applies a site's change to a copy of `event`.
pub fn apply(event: &Value, site: &Site) -> Value {
    let mut copy = event.clone();
    let (last, parents) = site.at.split_last().expect("a non-empty path");
    let mut cur = &mut copy;
    for step in parents {
        cur = match step {
            Step::Key(k) => cur.get_mut(k.as_str()).expect("path exists"),
            Step::Index(i) => cur.get_mut(*i).expect("path exists"),
        };
    }
    match (last, &site.change) {
        (Step::Key(k), Change::Remove) => {
            cur.as_object_mut()
                .expect("an object")
                .shift_remove(k.as_str());
        }
        (Step::Key(k), Change::Set(v)) => {
            cur.as_object_mut()
                .expect("an object")
                .insert(k.clone(), v.clone());
        }
        (Step::Index(i), Change::Set(v)) => cur[*i] = v.clone(),
        (Step::Index(_), Change::Remove) => unreachable!("array elements are never removed"),
    }
    copy
}

/// A valid run input, one way to break it, and the broken input.
pub fn broken_input() -> BoxedStrategy<(Value, Site, Value)> {
    (value(&INPUT, 0), any::<prop::sample::Index>())
        .prop_map(|(input, pick)| {
            let sites = input_sites(&input);
            // `threadId` is required, so there is always something to break.
            let site = sites[pick.index(sites.len())].clone();
            let broken = apply(&input, &site);
            (input, site, broken)
        })
        .boxed()
}

/// A valid event, one way to break it, and the broken event.
pub fn broken_event() -> BoxedStrategy<(Value, Site, Value)> {
    (known_event(), any::<prop::sample::Index>())
        .prop_filter_map("an event with something to break", |(event, pick)| {
            let sites = sites(&event);
            if sites.is_empty() {
                return None;
            }
            let site = sites[pick.index(sites.len())].clone();
            let broken = apply(&event, &site);
            Some((event, site, broken))
        })
        .boxed()
}
