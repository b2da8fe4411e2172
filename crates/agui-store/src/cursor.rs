//! Opaque paging cursors, shared by every backend so that a cursor's format
//! is the same everywhere.
//!
//! A cursor is the hex encoding of a small JSON array naming the last item of
//! the previous page. Hex keeps hostile ids (NUL, RTL marks, anything) safe to
//! carry in a URL or a header.

use crate::error::{Result, StoreError};
use crate::types::Timestamp;

/// Position after a thread in "newest activity first" order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCursor {
    /// `updated_at` of the last thread of the page.
    pub updated_at: Timestamp,
    /// Its id (ties on `updated_at` are ordered by id, ascending).
    pub thread_id: String,
}

/// Position after a run in "oldest start first" order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCursor {
    /// `started_at` of the last run of the page.
    pub started_at: Timestamp,
    /// Its thread id.
    pub thread_id: String,
    /// Its first sequence number.
    pub first_seq: u64,
}

fn encode(value: &serde_json::Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len() * 2);
    for b in text.bytes() {
        out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    out
}

fn decode(cursor: &str) -> Result<serde_json::Value> {
    let bad = || StoreError::invalid("malformed cursor");
    if !cursor.len().is_multiple_of(2) || cursor.len() > 4 * crate::types::MAX_ID_BYTES {
        return Err(bad());
    }
    let digit = |c: u8| -> Result<u8> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            _ => Err(bad()),
        }
    };
    let bytes = cursor
        .as_bytes()
        .chunks(2)
        .map(|p| Ok(digit(p[0])? << 4 | digit(p[1])?))
        .collect::<Result<Vec<u8>>>()?;
    serde_json::from_slice(&bytes).map_err(|_| bad())
}

impl ThreadCursor {
    /// The opaque text form.
    pub fn encode(&self) -> String {
        encode(&serde_json::json!(["t", self.updated_at.0, self.thread_id]))
    }

    /// Reads the opaque text form; `Invalid` when it is not one.
    pub fn decode(cursor: &str) -> Result<ThreadCursor> {
        let v = decode(cursor)?;
        match v.as_array().map(Vec::as_slice) {
            Some([t, at, id]) if t == "t" => Ok(ThreadCursor {
                updated_at: Timestamp(at.as_i64().ok_or_else(malformed)?),
                thread_id: id.as_str().ok_or_else(malformed)?.to_owned(),
            }),
            _ => Err(malformed()),
        }
    }
}

impl RunCursor {
    /// The opaque text form.
    pub fn encode(&self) -> String {
        encode(&serde_json::json!([
            "r",
            self.started_at.0,
            self.thread_id,
            self.first_seq
        ]))
    }

    /// Reads the opaque text form; `Invalid` when it is not one.
    pub fn decode(cursor: &str) -> Result<RunCursor> {
        let v = decode(cursor)?;
        match v.as_array().map(Vec::as_slice) {
            Some([t, at, id, seq]) if t == "r" => Ok(RunCursor {
                started_at: Timestamp(at.as_i64().ok_or_else(malformed)?),
                thread_id: id.as_str().ok_or_else(malformed)?.to_owned(),
                first_seq: seq.as_u64().ok_or_else(malformed)?,
            }),
            _ => Err(malformed()),
        }
    }
}

fn malformed() -> StoreError {
    StoreError::invalid("malformed cursor")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn cursors_round_trip_hostile_ids() {
        let c = ThreadCursor {
            updated_at: Timestamp(-5),
            thread_id: "../x\0\u{202e}😀".into(),
        };
        assert_eq!(ThreadCursor::decode(&c.encode()).unwrap(), c);
        let r = RunCursor {
            started_at: Timestamp(17),
            thread_id: "a\"b".into(),
            first_seq: 9,
        };
        assert_eq!(RunCursor::decode(&r.encode()).unwrap(), r);
    }

    #[test]
    fn garbage_is_invalid_not_a_panic() {
        for bad in [
            "",
            "0",
            "zz",
            "5b5d",
            "ff",
            &RunCursor {
                started_at: Timestamp(1),
                thread_id: "t".into(),
                first_seq: 1,
            }
            .encode(),
        ] {
            let e = ThreadCursor::decode(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Invalid);
        }
    }
}
