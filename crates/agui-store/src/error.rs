//! The portable error type every backend maps its native errors onto.
//!
//! A [`StoreError`] has a [`ErrorKind`] (what a caller branches on), a short
//! public message that never contains SQL, file paths or credentials (safe to
//! show to an HTTP client), and an optional native source error that carries
//! the details for operators (logs, the CLI's `{:#}` chain).

use std::fmt;

/// What went wrong, independent of the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The tenant, thread, run or checkpoint does not exist.
    NotFound,
    /// An append stated the sequence number it expected to follow and the
    /// thread had moved on (or was shorter). Nothing was written.
    Conflict,
    /// The request is malformed: an empty or oversized id, an empty batch, a
    /// `RUN_STARTED` without a `runId` or reusing one, a bad cursor, ...
    Invalid,
    /// The backend cannot serve the request now (closed, disk full, database
    /// down, lock timeout). Retrying later may succeed.
    Unavailable,
    /// Stored data failed an integrity check (checksum, decompression,
    /// decoding). The store refuses to return it rather than return garbage.
    Corrupt,
    /// The backend does not support this operation.
    Unsupported,
    /// Anything else: a bug or an unexpected native error.
    Internal,
}

impl ErrorKind {
    /// A stable lower-case name (`not_found`, `conflict`, ...), for logs and
    /// machine-readable error bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The details of a [`ErrorKind::Conflict`] on append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqConflict {
    /// The sequence number the append said it expected to follow.
    pub expected: u64,
    /// The thread's actual last sequence number (0 for an empty thread).
    pub actual: u64,
}

/// The error of every [`crate::Store`] and [`crate::Backend`] call.
///
/// `Display` shows the kind and the public message only; native details are
/// reachable through [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct StoreError {
    kind: ErrorKind,
    message: String,
    conflict: Option<SeqConflict>,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// The result type of the store API.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    /// A new error of `kind` with a public `message` (no SQL, no paths).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> StoreError {
        StoreError {
            kind,
            message: message.into(),
            conflict: None,
            source: None,
        }
    }

    /// Attaches the native error that caused this one (kept out of `Display`).
    pub fn with_source(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> StoreError {
        self.source = Some(source.into());
        self
    }

    /// `NotFound` for `what` (e.g. `"thread"`, `"run"`).
    pub fn not_found(what: &str) -> StoreError {
        StoreError::new(ErrorKind::NotFound, format!("{what} not found"))
    }

    /// `Invalid` with a public message.
    pub fn invalid(message: impl Into<String>) -> StoreError {
        StoreError::new(ErrorKind::Invalid, message)
    }

    /// `Unavailable` with a public message.
    pub fn unavailable(message: impl Into<String>) -> StoreError {
        StoreError::new(ErrorKind::Unavailable, message)
    }

    /// `Corrupt` with a public message.
    pub fn corrupt(message: impl Into<String>) -> StoreError {
        StoreError::new(ErrorKind::Corrupt, message)
    }

    /// `Internal` with a public message.
    pub fn internal(message: impl Into<String>) -> StoreError {
        StoreError::new(ErrorKind::Internal, message)
    }

    /// `Conflict`: the append expected to follow `expected`, the thread is at
    /// `actual`.
    pub fn conflict(expected: u64, actual: u64) -> StoreError {
        StoreError {
            kind: ErrorKind::Conflict,
            message: format!(
                "append expected to follow sequence {expected}, the thread is at {actual}"
            ),
            conflict: Some(SeqConflict { expected, actual }),
            source: None,
        }
    }

    /// `Conflict`: a thread renamed to `thread`, which already has events or
    /// channel state.
    pub fn thread_exists(thread: &str) -> StoreError {
        StoreError::new(
            ErrorKind::Conflict,
            format!("thread {thread:?} already has events or channel state"),
        )
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The public message (without the kind prefix).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The sequence numbers of a `Conflict`, when this is one.
    pub fn seq_conflict(&self) -> Option<SeqConflict> {
        self.conflict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn display_hides_the_native_source() {
        let native = std::io::Error::other("open /secret/path/db.sqlite: SELECT * FROM x");
        let e = StoreError::unavailable("the store cannot be opened").with_source(native);
        let shown = e.to_string();
        assert_eq!(shown, "unavailable: the store cannot be opened");
        assert!(e.source().unwrap().to_string().contains("/secret/path"));
    }

    #[test]
    fn conflict_carries_both_sequences() {
        let e = StoreError::conflict(3, 7);
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert_eq!(
            e.seq_conflict(),
            Some(SeqConflict {
                expected: 3,
                actual: 7
            })
        );
        assert!(e.to_string().contains("follow sequence 3"));
    }
}
