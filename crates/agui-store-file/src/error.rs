//! The native errors of the file backend and their portable kinds.

use agui_store::{ErrorKind, StoreError};

/// What went wrong below the API. `Display` may name paths and offsets (for
/// operators); the mapped [`StoreError`] shows only a public message.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A record or block failed its checksum, or decodes to nonsense.
    #[error("segment {segment:016x}, offset {offset}: {why}")]
    Damaged {
        /// The segment.
        segment: u64,
        /// The logical offset in the segment.
        offset: u64,
        /// What is wrong.
        why: &'static str,
    },
    /// An intact record of a kind this version does not know: a newer
    /// version of the store wrote it. Not damage: a repair never cuts it.
    #[error(
        "segment {segment:016x}, offset {offset}: a record of kind {kind}, which this version does not know"
    )]
    Newer {
        /// The segment.
        segment: u64,
        /// The logical offset in the segment.
        offset: u64,
        /// The record's kind byte.
        kind: u8,
    },
    /// A payload is not shaped as its kind says.
    #[error("malformed record: {0}")]
    Malformed(&'static str),
    /// A batch or blob exceeds the 1 GiB record limit.
    #[error("a record would exceed 1 GiB")]
    TooLarge,
    /// Another process holds the store's lock. `Display` names the
    /// directory only: the mapped [`StoreError`]'s message says "in use by
    /// another process (pid N)", and an error line shows both.
    #[error("{0} is locked")]
    Locked(String, Option<u32>),
    /// The store URL or options are not usable.
    #[error("{0}")]
    BadUrl(&'static str),
    /// A read-only open found no store (no directory, or no segment in it).
    #[error("no store in {0}")]
    NoStore(String),
    /// A write on a store opened read-only.
    #[error("the store was opened read-only")]
    ReadOnly,
    /// A write after a sync of the log failed: the kernel may have dropped
    /// the pages it could not write, so nothing written since can be
    /// promised durable until the store is reopened (and its log checked).
    #[error("a sync of the log failed earlier; the store refuses writes until reopened")]
    FlushFailed,
}

impl FileError {
    pub fn io(op: &'static str, path: &std::path::Path, source: std::io::Error) -> FileError {
        FileError::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }

    /// The portable kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            FileError::Io { source, .. } => match source.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
                    ErrorKind::Unavailable
                }
                std::io::ErrorKind::InvalidData => ErrorKind::Corrupt,
                _ => ErrorKind::Unavailable,
            },
            FileError::Damaged { .. } | FileError::Malformed(_) => ErrorKind::Corrupt,
            FileError::TooLarge | FileError::BadUrl(_) => ErrorKind::Invalid,
            FileError::Locked(..) | FileError::FlushFailed => ErrorKind::Unavailable,
            FileError::NoStore(_) => ErrorKind::NotFound,
            FileError::ReadOnly | FileError::Newer { .. } => ErrorKind::Unsupported,
        }
    }

    fn public(&self) -> &'static str {
        match self {
            FileError::Io { op, .. } => op,
            FileError::Damaged { .. } | FileError::Malformed(_) => "stored data is damaged",
            FileError::TooLarge => "a batch or checkpoint larger than 1 GiB is not accepted",
            FileError::Locked(..) => "the store is in use by another process",
            FileError::BadUrl(why) => why,
            FileError::NoStore(_) => "no file store in this directory",
            FileError::ReadOnly => "the store was opened read-only",
            FileError::FlushFailed => {
                "the store could not flush its log to disk earlier; it refuses writes until reopened"
            }
            FileError::Newer { .. } => {
                "the store was written by a newer version of agui; open it with that version"
            }
        }
    }
}

fn pid_note(pid: Option<u32>) -> String {
    pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
}

impl From<FileError> for StoreError {
    fn from(e: FileError) -> StoreError {
        let message = match &e {
            FileError::Io { op, .. } => format!("the file store cannot {op}"),
            FileError::Locked(_, pid) => {
                format!("the store is in use by another process{}", pid_note(*pid))
            }
            other => other.public().to_owned(),
        };
        StoreError::new(e.kind(), message).with_source(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_messages_never_show_paths() {
        let e = FileError::io(
            "write a segment",
            std::path::Path::new("/secret/dir/0001.seg"),
            std::io::Error::other("disk full"),
        );
        assert!(e.to_string().contains("/secret/dir"));
        let s: StoreError = e.into();
        assert_eq!(s.kind(), ErrorKind::Unavailable);
        assert!(!s.to_string().contains("/secret"), "{s}");
        let s: StoreError = FileError::Locked("/secret/x".into(), Some(7)).into();
        assert!(!s.to_string().contains("/secret"));
        assert_eq!(
            s.to_string(),
            "unavailable: the store is in use by another process (pid 7)"
        );
        // The operator's line (message, then native source) says it once.
        let source = std::error::Error::source(&s).map(|e| e.to_string());
        assert_eq!(source.as_deref(), Some("/secret/x is locked"));
        let s: StoreError = FileError::Damaged {
            segment: 1,
            offset: 2,
            why: "checksum",
        }
        .into();
        assert_eq!(s.kind(), ErrorKind::Corrupt);
        let s: StoreError = FileError::Newer {
            segment: 1,
            offset: 2,
            kind: 99,
        }
        .into();
        assert_eq!(s.kind(), ErrorKind::Unsupported);
        assert!(s.to_string().contains("newer version"), "{s}");
    }
}
