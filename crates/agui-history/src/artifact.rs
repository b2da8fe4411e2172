//! The compacted message snapshot artifact: the smallest honest record of one
//! run, for audit and evidence tools.
//!
//! One JSON object, with exactly these keys:
//!
//! | key | |
//! | --- | --- |
//! | `schema` | required, [`SCHEMA`] |
//! | `framework` | required, [`FRAMEWORK`] |
//! | `surface` | required, [`SURFACE`] |
//! | `thread_id_ref`, `run_id_ref` | required: the run's `threadId` and `runId` |
//! | `parent_run_id_ref` | optional: the `parentRunId` the run declared |
//! | `started_at` | required, RFC 3339 UTC |
//! | `finished_at` | optional, RFC 3339 UTC |
//! | `terminal_event` | required, `RUN_FINISHED` or `RUN_ERROR` |
//! | `error_code`, `error_message` | optional, only with `RUN_ERROR`; the message at most [`MAX_ERROR_MESSAGE_CHARS`] characters |
//! | `messages` | required, ordered; each exactly `id`, `role`, `content` (a string) and optionally `name` |
//!
//! [`export`] builds it from a log, [`validate`] reads one back strictly.
//!
//! **Messages.** From the run's own last `MESSAGES_SNAPSHOT` ([`Source::Snapshot`],
//! the default when the run emitted one), otherwise from the branch history at
//! the run's terminal ([`Source::Derived`], see [`crate::lineage`]). Only
//! `user`, `assistant`, `system` and `developer` messages with plain text are
//! kept; text-only part arrays are joined. Tool-call-only, multimodal,
//! reasoning, activity, tool-result and empty messages are left out and
//! listed in [`Export::skipped`].
//!
//! **Times.** `started_at` is the first integer `timestamp` among the run's
//! events; `finished_at` the terminal's, or else the last one before it
//! and after the `RUN_STARTED` (epoch milliseconds, written with [`time::format_rfc3339`]). When the run
//! has none, the caller's fallback ([`ExportOptions`]) is used; without one,
//! a missing start is an error and a missing finish is left out.

mod strict;
pub mod time;

use std::fmt;
use std::str::FromStr;

use agui_protocol::{Event, EventType};
use serde::Serialize;
use serde_json::Value;

use crate::lineage::provenance::value_of;
use crate::lineage::{Lineage, LineageError, RunStatus, Timestamp};
use crate::reduce::Conversation;
use strict::Json;
pub use time::TimeError;

/// The `schema` value.
pub const SCHEMA: &str = "ag-ui.compacted-message-snapshot.export.v1";
/// The `framework` value.
pub const FRAMEWORK: &str = "ag_ui";
/// The `surface` value.
pub const SURFACE: &str = "compacted_message_snapshot_artifact";
/// The longest `error_message`, in characters. Longer messages are cut on
/// export (ending with `…`) and rejected on validation.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 256;

/// The roles whose messages can carry plain text.
pub const TEXT_ROLES: [&str; 4] = ["user", "assistant", "system", "developer"];

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TerminalEvent {
    /// The run ended with `RUN_FINISHED`.
    #[serde(rename = "RUN_FINISHED")]
    RunFinished,
    /// The run ended with `RUN_ERROR`.
    #[serde(rename = "RUN_ERROR")]
    RunError,
}

impl TerminalEvent {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TerminalEvent::RunFinished => "RUN_FINISHED",
            TerminalEvent::RunError => "RUN_ERROR",
        }
    }
}

/// One plain-text message of the artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArtifactMessage {
    /// The message's `id`.
    pub id: String,
    /// One of [`TEXT_ROLES`].
    pub role: String,
    /// The plain text (text parts joined).
    pub content: String,
    /// The message's `name`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A compacted message snapshot artifact (the constant keys are implied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The run's `threadId`.
    pub thread_id_ref: String,
    /// The run's `runId`.
    pub run_id_ref: String,
    /// The `parentRunId` the run declared (never an implicit parent).
    pub parent_run_id_ref: Option<String>,
    /// RFC 3339 UTC start time.
    pub started_at: String,
    /// RFC 3339 UTC finish time, when known.
    pub finished_at: Option<String>,
    /// How the run ended.
    pub terminal_event: TerminalEvent,
    /// `RUN_ERROR.code`, only with [`TerminalEvent::RunError`].
    pub error_code: Option<String>,
    /// `RUN_ERROR.message`, at most [`MAX_ERROR_MESSAGE_CHARS`] characters.
    pub error_message: Option<String>,
    /// The plain-text messages, in order.
    pub messages: Vec<ArtifactMessage>,
}

impl Serialize for Artifact {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            schema: &'static str,
            framework: &'static str,
            surface: &'static str,
            thread_id_ref: &'a str,
            run_id_ref: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            parent_run_id_ref: Option<&'a str>,
            started_at: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            finished_at: Option<&'a str>,
            terminal_event: TerminalEvent,
            #[serde(skip_serializing_if = "Option::is_none")]
            error_code: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error_message: Option<&'a str>,
            messages: &'a [ArtifactMessage],
        }
        Wire {
            schema: SCHEMA,
            framework: FRAMEWORK,
            surface: SURFACE,
            thread_id_ref: &self.thread_id_ref,
            run_id_ref: &self.run_id_ref,
            parent_run_id_ref: self.parent_run_id_ref.as_deref(),
            started_at: &self.started_at,
            finished_at: self.finished_at.as_deref(),
            terminal_event: self.terminal_event,
            error_code: self.error_code.as_deref(),
            error_message: self.error_message.as_deref(),
            messages: &self.messages,
        }
        .serialize(serializer)
    }
}

/// Where the artifact's messages come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The run's own last `MESSAGES_SNAPSHOT`.
    Snapshot,
    /// The branch history reduced up to the run's terminal.
    Derived,
}

impl FromStr for Source {
    type Err = String;
    fn from_str(s: &str) -> Result<Source, String> {
        match s {
            "snapshot" => Ok(Source::Snapshot),
            "derived" => Ok(Source::Derived),
            other => Err(format!(
                "unknown source {other:?} (expected snapshot or derived)"
            )),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Snapshot => "snapshot",
            Source::Derived => "derived",
        })
    }
}

/// Choices for [`export`].
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// `None`: the snapshot when the run emitted one, else derived.
    pub source: Option<Source>,
    /// RFC 3339 UTC start, used only when the run's events carry no timestamp.
    pub started_at: Option<String>,
    /// RFC 3339 UTC finish, used only when the run's events give none.
    pub finished_at: Option<String>,
}

/// Why a message was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// An assistant message with tool calls and no text.
    ToolCallOnly,
    /// Content parts other than text.
    Multimodal,
    /// A `reasoning` message.
    Reasoning,
    /// An `activity` message.
    Activity,
    /// A `tool` message (part of a tool-call stream).
    ToolResult,
    /// No text at all.
    Empty,
    /// A role the protocol does not define, or no role.
    UnknownRole(String),
    /// No string `id`, or not an object.
    Malformed,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::ToolCallOnly => f.write_str("tool-call-only"),
            SkipReason::Multimodal => f.write_str("multimodal"),
            SkipReason::Reasoning => f.write_str("reasoning"),
            SkipReason::Activity => f.write_str("activity"),
            SkipReason::ToolResult => f.write_str("tool result"),
            SkipReason::Empty => f.write_str("empty"),
            SkipReason::UnknownRole(role) => write!(f, "unknown role {role:?}"),
            SkipReason::Malformed => f.write_str("malformed"),
        }
    }
}

/// A message left out of the artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The message's `id`, when it has a string one.
    pub message_id: Option<String>,
    /// Why it was left out.
    pub reason: SkipReason,
}

/// The result of [`export`].
#[derive(Debug, Clone)]
pub struct Export {
    /// The artifact.
    pub artifact: Artifact,
    /// Where the messages came from.
    pub source: Source,
    /// Messages left out, in order.
    pub skipped: Vec<Skipped>,
    /// The error message's length in characters when it had to be cut.
    pub error_message_cut_from: Option<usize>,
}

/// Why an artifact could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The log's lineage is faulty, or the run is not in it.
    #[error(transparent)]
    Lineage(#[from] LineageError),
    /// The run has no terminal event.
    #[error("run {run_id:?} has no RUN_FINISHED or RUN_ERROR (it is {status})")]
    NotTerminated { run_id: String, status: RunStatus },
    /// `--source snapshot` for a run without a `MESSAGES_SNAPSHOT`.
    #[error("run {run_id:?} emitted no MESSAGES_SNAPSHOT (use the derived source)")]
    NoSnapshot { run_id: String },
    /// The snapshot's `messages` is not an array.
    #[error("event {event_index}: MESSAGES_SNAPSHOT has no \"messages\" array")]
    BadSnapshot { event_index: usize },
    /// An event of the run has a `timestamp` that is not an integer in range.
    #[error("event {event_index}: \"timestamp\" is not an integer in ±(2^53−1)")]
    InvalidTimestamp { event_index: usize },
    /// Neither the run's events nor the caller give a start time.
    #[error("run {run_id:?} has no timestamp on any of its events; a start time must be given")]
    NoStartTime { run_id: String },
    /// A time could not be written, or a given time is not RFC 3339 UTC.
    #[error("{field}: {error}")]
    Time {
        field: &'static str,
        error: TimeError,
    },
}

/// Builds the artifact of run `run_id` of `events`.
pub fn export(
    events: &[Event],
    run_id: &str,
    options: &ExportOptions,
) -> Result<Export, ArtifactError> {
    let lineage = Lineage::new(events)?;
    let run = lineage
        .index()
        .get(run_id)
        .ok_or_else(|| LineageError::UnknownRun {
            run_id: run_id.to_owned(),
        })?;
    let Some(terminal_index) = run.terminal_event else {
        return Err(ArtifactError::NotTerminated {
            run_id: run_id.to_owned(),
            status: run.status,
        });
    };
    let own = run.first_event..=terminal_index;
    for i in own.clone() {
        if events.get(i).is_some_and(timestamp_is_invalid) {
            return Err(ArtifactError::InvalidTimestamp { event_index: i });
        }
    }

    let started_at = match (run.started_at, &options.started_at) {
        (Some(ms), _) => format_time("started_at", ms)?,
        (None, Some(given)) => checked_time("started_at", given)?,
        (None, None) => {
            return Err(ArtifactError::NoStartTime {
                run_id: run_id.to_owned(),
            });
        }
    };
    let finished_at = match (run.finished_at, &options.finished_at) {
        (Some(ms), _) => Some(format_time("finished_at", ms)?),
        (None, Some(given)) => Some(checked_time("finished_at", given)?),
        (None, None) => None,
    };

    let terminal = &events[terminal_index];
    let (terminal_event, error_code, mut error_message) = match terminal.event_type() {
        EventType::RunError => {
            let v = value_of(terminal);
            let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
            (TerminalEvent::RunError, text("code"), text("message"))
        }
        _ => (TerminalEvent::RunFinished, None, None),
    };
    let mut error_message_cut_from = None;
    if let Some(message) = &mut error_message {
        let chars = message.chars().count();
        if chars > MAX_ERROR_MESSAGE_CHARS {
            let mut cut: String = message.chars().take(MAX_ERROR_MESSAGE_CHARS - 1).collect();
            cut.push('…');
            *message = cut;
            error_message_cut_from = Some(chars);
        }
    }

    let snapshot = own
        .clone()
        .rev()
        .find(|&i| events.get(i).map(Event::event_type) == Some(&EventType::MessagesSnapshot));
    let source = match (options.source, snapshot) {
        (Some(Source::Snapshot), None) => {
            return Err(ArtifactError::NoSnapshot {
                run_id: run_id.to_owned(),
            });
        }
        (Some(source), _) => source,
        (None, Some(_)) => Source::Snapshot,
        (None, None) => Source::Derived,
    };
    let raw_messages: Vec<Value> = match (source, snapshot) {
        (Source::Snapshot, Some(i)) => match value_of(&events[i]).get_mut("messages") {
            Some(Value::Array(list)) => std::mem::take(list),
            _ => return Err(ArtifactError::BadSnapshot { event_index: i }),
        },
        _ => {
            let start = Conversation::default();
            let upto = terminal_index - run.first_event;
            lineage.conversation_at(run_id, Some(upto), start)?.messages
        }
    };
    let mut messages = Vec::new();
    let mut skipped = Vec::new();
    for message in &raw_messages {
        match plain_text_message(message) {
            Ok(m) => messages.push(m),
            Err(reason) => skipped.push(Skipped {
                message_id: message.get("id").and_then(Value::as_str).map(str::to_owned),
                reason,
            }),
        }
    }

    let parent_run_id_ref = if run.explicit_parent {
        run.parent_run_id.clone()
    } else {
        None
    };
    Ok(Export {
        artifact: Artifact {
            thread_id_ref: run.thread_id.clone(),
            run_id_ref: run.run_id.clone(),
            parent_run_id_ref,
            started_at,
            finished_at,
            terminal_event,
            error_code,
            error_message,
            messages,
        },
        source,
        skipped,
        error_message_cut_from,
    })
}

fn timestamp_is_invalid(event: &Event) -> bool {
    crate::lineage::timestamp(event) == Timestamp::Invalid
}

fn format_time(field: &'static str, ms: i64) -> Result<String, ArtifactError> {
    time::format_rfc3339(ms).map_err(|error| ArtifactError::Time { field, error })
}

fn checked_time(field: &'static str, text: &str) -> Result<String, ArtifactError> {
    time::parse_rfc3339(text).map_err(|error| ArtifactError::Time { field, error })?;
    Ok(text.to_owned())
}

/// The plain-text form of one message, or why it has none.
pub fn plain_text_message(message: &Value) -> Result<ArtifactMessage, SkipReason> {
    let Some(id) = message.get("id").and_then(Value::as_str) else {
        return Err(SkipReason::Malformed);
    };
    let role = match message.get("role") {
        Some(Value::String(role)) => role.as_str(),
        Some(other) => return Err(SkipReason::UnknownRole(other.to_string())),
        None => return Err(SkipReason::UnknownRole(String::new())),
    };
    match role {
        "reasoning" => return Err(SkipReason::Reasoning),
        "activity" => return Err(SkipReason::Activity),
        "tool" => return Err(SkipReason::ToolResult),
        r if TEXT_ROLES.contains(&r) => {}
        other => return Err(SkipReason::UnknownRole(other.to_owned())),
    }
    let has_tool_calls = message
        .get("toolCalls")
        .and_then(Value::as_array)
        .is_some_and(|calls| !calls.is_empty());
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    _ => return Err(SkipReason::Multimodal),
                }
            }
            text
        }
        None | Some(Value::Null) => String::new(),
        Some(_) => return Err(SkipReason::Malformed),
    };
    if text.is_empty() {
        return Err(if has_tool_calls {
            SkipReason::ToolCallOnly
        } else {
            SkipReason::Empty
        });
    }
    let name = message
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(ArtifactMessage {
        id: id.to_owned(),
        role: role.to_owned(),
        content: text,
        name,
    })
}

/// Why a text is not a valid artifact.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Not one JSON document, or an object with a key twice.
    #[error("not valid JSON: {0}")]
    Syntax(String),
    /// The document is not an object.
    #[error("the artifact must be a JSON object, found {found}")]
    NotObject { found: &'static str },
    /// A required key is absent.
    #[error("missing required field {field:?}")]
    MissingField { field: &'static str },
    /// A key the artifact does not define (`path` is empty at the top).
    #[error("unknown key {key:?}{}", in_path(path))]
    UnknownKey { path: String, key: String },
    /// A value of the wrong JSON type.
    #[error("{path} must be {expected}, found {found}")]
    WrongType {
        path: String,
        expected: &'static str,
        found: &'static str,
    },
    /// A constant key with another value.
    #[error("{field} must be {expected:?}, found {found:?}")]
    WrongValue {
        field: &'static str,
        expected: &'static str,
        found: String,
    },
    /// `terminal_event` is neither `RUN_FINISHED` nor `RUN_ERROR`.
    #[error("terminal_event must be \"RUN_FINISHED\" or \"RUN_ERROR\", found {found:?}")]
    WrongTerminal { found: String },
    /// `error_code` or `error_message` without `RUN_ERROR`.
    #[error("{field} is only allowed when terminal_event is \"RUN_ERROR\"")]
    ErrorFieldWithoutRunError { field: &'static str },
    /// `error_message` is too long.
    #[error("error_message has {chars} characters, more than {MAX_ERROR_MESSAGE_CHARS}")]
    ErrorMessageTooLong { chars: usize },
    /// A time that is not RFC 3339 UTC.
    #[error("{field}: {error}")]
    Time {
        field: &'static str,
        error: TimeError,
    },
    /// `finished_at` is earlier than `started_at`.
    #[error("finished_at {finished:?} is earlier than started_at {started:?}")]
    FinishedBeforeStarted { started: String, finished: String },
    /// A message with content that is not a string.
    #[error("messages[{index}].content must be plain text (a string), found {found}")]
    NonTextContent { index: usize, found: &'static str },
    /// A message whose role cannot carry plain text.
    #[error("messages[{index}].role {role:?} is not one of user, assistant, system, developer")]
    WrongRole { index: usize, role: String },
    /// A message without `id`, `role` or `content`.
    #[error("messages[{index}] is missing {field:?}")]
    MessageMissingField { index: usize, field: &'static str },
}

fn in_path(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" in {path}")
    }
}

const KEYS: [&str; 12] = [
    "schema",
    "framework",
    "surface",
    "thread_id_ref",
    "run_id_ref",
    "parent_run_id_ref",
    "started_at",
    "finished_at",
    "terminal_event",
    "error_code",
    "error_message",
    "messages",
];

fn string_at(value: &Json, path: &str) -> Result<String, Malformed> {
    match value {
        Json::String(s) => Ok(s.clone()),
        other => Err(Malformed::WrongType {
            path: path.to_owned(),
            expected: "a string",
            found: other.kind(),
        }),
    }
}

/// Reads an artifact strictly: the whole artifact or the first reason it is
/// malformed, never part of one.
pub fn validate(text: &str) -> Result<Artifact, Malformed> {
    let root = strict::parse(text).map_err(|e| Malformed::Syntax(e.to_string()))?;
    let Json::Object(members) = root else {
        return Err(Malformed::NotObject { found: root.kind() });
    };
    for (key, _) in &members {
        if !KEYS.contains(&key.as_str()) {
            return Err(Malformed::UnknownKey {
                path: String::new(),
                key: key.clone(),
            });
        }
    }
    let get = |k: &str| members.iter().find(|(key, _)| key == k).map(|(_, v)| v);
    let required = |k: &'static str| get(k).ok_or(Malformed::MissingField { field: k });
    let optional_string = |k: &'static str| get(k).map(|v| string_at(v, k)).transpose();

    for (field, expected) in [
        ("schema", SCHEMA),
        ("framework", FRAMEWORK),
        ("surface", SURFACE),
    ] {
        let found = string_at(required(field)?, field)?;
        if found != expected {
            return Err(Malformed::WrongValue {
                field,
                expected,
                found,
            });
        }
    }
    let thread_id_ref = string_at(required("thread_id_ref")?, "thread_id_ref")?;
    let run_id_ref = string_at(required("run_id_ref")?, "run_id_ref")?;
    let parent_run_id_ref = optional_string("parent_run_id_ref")?;
    let started_at = string_at(required("started_at")?, "started_at")?;
    let started = time::parse_rfc3339(&started_at).map_err(|error| Malformed::Time {
        field: "started_at",
        error,
    })?;
    let finished_at = optional_string("finished_at")?;
    if let Some(finished_at) = &finished_at {
        let finished = time::parse_rfc3339(finished_at).map_err(|error| Malformed::Time {
            field: "finished_at",
            error,
        })?;
        if finished < started {
            return Err(Malformed::FinishedBeforeStarted {
                started: started_at,
                finished: finished_at.clone(),
            });
        }
    }
    let terminal_event = match string_at(required("terminal_event")?, "terminal_event")?.as_str() {
        "RUN_FINISHED" => TerminalEvent::RunFinished,
        "RUN_ERROR" => TerminalEvent::RunError,
        other => {
            return Err(Malformed::WrongTerminal {
                found: other.to_owned(),
            });
        }
    };
    let error_code = optional_string("error_code")?;
    let error_message = optional_string("error_message")?;
    if terminal_event != TerminalEvent::RunError {
        for (field, value) in [
            ("error_code", &error_code),
            ("error_message", &error_message),
        ] {
            if value.is_some() {
                return Err(Malformed::ErrorFieldWithoutRunError { field });
            }
        }
    }
    if let Some(message) = &error_message {
        let chars = message.chars().count();
        if chars > MAX_ERROR_MESSAGE_CHARS {
            return Err(Malformed::ErrorMessageTooLong { chars });
        }
    }
    let Json::Array(items) = required("messages")? else {
        return Err(Malformed::WrongType {
            path: "messages".into(),
            expected: "an array",
            found: required("messages")?.kind(),
        });
    };
    let messages = items
        .iter()
        .enumerate()
        .map(|(index, item)| validate_message(index, item))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Artifact {
        thread_id_ref,
        run_id_ref,
        parent_run_id_ref,
        started_at,
        finished_at,
        terminal_event,
        error_code,
        error_message,
        messages,
    })
}

fn validate_message(index: usize, item: &Json) -> Result<ArtifactMessage, Malformed> {
    let path = format!("messages[{index}]");
    let Json::Object(members) = item else {
        return Err(Malformed::WrongType {
            path,
            expected: "an object",
            found: item.kind(),
        });
    };
    for (key, _) in members {
        if !matches!(key.as_str(), "id" | "role" | "content" | "name") {
            return Err(Malformed::UnknownKey {
                path,
                key: key.clone(),
            });
        }
    }
    let get = |k: &'static str| {
        members
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v)
            .ok_or(Malformed::MessageMissingField { index, field: k })
    };
    let id = string_at(get("id")?, &format!("{path}.id"))?;
    let role = string_at(get("role")?, &format!("{path}.role"))?;
    if !TEXT_ROLES.contains(&role.as_str()) {
        return Err(Malformed::WrongRole { index, role });
    }
    let content = match get("content")? {
        Json::String(s) => s.clone(),
        other => {
            return Err(Malformed::NonTextContent {
                index,
                found: other.kind(),
            });
        }
    };
    let name = match get("name") {
        Ok(v) => Some(string_at(v, &format!("{path}.name"))?),
        Err(_) => None,
    };
    Ok(ArtifactMessage {
        id,
        role,
        content,
        name,
    })
}
