//! The errors of export, validation and import.

use agui_store::StoreError;

/// What is wrong with a damaged document (the code of the HTTP 422).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// Nothing but whitespace.
    Empty,
    /// A record is not JSON.
    NotJson,
    /// A record does not have the fields its kind requires.
    Schema,
    /// The header names a format this agui does not read.
    UnknownVersion,
    /// A record of an unknown kind.
    UnknownKind,
    /// Records out of their order (header, runs, events, channels, end).
    Order,
    /// Events not numbered 1, 2, 3..., or not matching the run records.
    Sequence,
    /// A run's parent is missing, later, or part of a cycle.
    Lineage,
    /// The content does not match its SHA-256.
    Checksum,
    /// The document ends before its end record.
    Truncated,
}

impl Damage {
    /// The machine-readable code.
    pub fn code(self) -> &'static str {
        match self {
            Damage::Empty => "empty_document",
            Damage::NotJson => "invalid_json",
            Damage::Schema => "invalid_record",
            Damage::UnknownVersion => "unknown_version",
            Damage::UnknownKind => "unknown_record_kind",
            Damage::Order => "record_order",
            Damage::Sequence => "bad_sequence",
            Damage::Lineage => "bad_lineage",
            Damage::Checksum => "checksum_mismatch",
            Damage::Truncated => "truncated",
        }
    }
}

/// An export, validation or import failure.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The document is damaged; `record` is its 1-based record number (the
    /// line of an NDJSON document), 0 for the document as a whole.
    #[error("session document, record {record}: {problem}")]
    Damaged {
        /// Which check failed.
        damage: Damage,
        /// The record where it was found.
        record: u64,
        /// What is wrong, in words.
        problem: String,
    },
    /// Restore case *invalid*: the target thread already has events or
    /// channel state.
    #[error(
        "thread {thread:?} already has events or channel state; nothing was imported (import under a new id with --as NEW_ID)"
    )]
    ThreadExists {
        /// The target thread.
        thread: String,
    },
    /// Restore case *empty*: none of the document's agents is available.
    #[error(
        "none of the session's agents ({}) is configured here; nothing was imported (import the history alone with --history-only)",
        participants.join(", ")
    )]
    NoAgents {
        /// The document's participants.
        participants: Vec<String>,
    },
    /// Reading the document failed.
    #[error("cannot read the session document: {0}")]
    Io(#[source] std::io::Error),
    /// The store failed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

impl SessionError {
    pub(crate) fn damaged(damage: Damage, record: u64, problem: impl Into<String>) -> SessionError {
        SessionError::Damaged {
            damage,
            record,
            problem: problem.into(),
        }
    }

    /// The machine-readable code of the error (the HTTP error code).
    pub fn code(&self) -> &'static str {
        match self {
            SessionError::Damaged { damage, .. } => damage.code(),
            SessionError::ThreadExists { .. } => "thread_exists",
            SessionError::NoAgents { .. } => "no_agents",
            SessionError::Io(_) => "io",
            SessionError::Store(_) => "store",
        }
    }
}
