//! The process lock of a writable SQLite store: an exclusive `flock` on
//! `<database>.lock`, held while the store is open and released by the
//! kernel when the process dies, so two gateways never share one database
//! file (the second would mark the first one's live runs `interrupted`).
//! The holder writes its process id into the file so that a refused opener
//! can name it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use agui_store::{ErrorKind, StoreError};

/// The lock file of database `db`.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Holds the lock until dropped.
#[derive(Debug)]
pub struct ProcessLock {
    _file: File,
}

/// Takes the exclusive lock of database `db`, or says who holds it.
pub fn acquire(db: &Path) -> Result<ProcessLock, StoreError> {
    let path = lock_path(db);
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| {
            StoreError::unavailable("the store could not open its lock file").with_source(e)
        })?;
    // SAFETY: flock on a descriptor this function owns; no memory involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        let holder = text
            .trim()
            .parse::<u32>()
            .map(|pid| format!(" (pid {pid})"))
            .unwrap_or_default();
        return Err(StoreError::new(
            ErrorKind::Unavailable,
            format!(
                "the database {} is in use by another process{holder}; \
                 stop it, or read with a read-only command (`agui store export|ls|stats|check`)",
                db.display()
            ),
        ));
    }
    // Best effort: the pid only improves the message of a refused opener.
    let _ = file
        .set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| writeln!(file, "{}", std::process::id()));
    Ok(ProcessLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_with_the_holders_pid() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let held = acquire(&db).unwrap();
        let err = acquire(&db).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert!(
            err.to_string()
                .contains(&format!("(pid {})", std::process::id())),
            "{err}"
        );
        drop(held);
        acquire(&db).unwrap();
    }
}
