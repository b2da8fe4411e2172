//! Opaque paging cursors, shared by every backend so that a cursor's format
//! is the same everywhere.
//!
//! A cursor is the hex encoding of a small JSON array naming the last item of
//! the previous page. Hex keeps hostile ids (NUL, RTL marks, anything) safe to
//! carry in a URL or a header.

use crate::error::{Result, StoreError};
use crate::types::{
    RunFilter, RunPage, RunRecord, ThreadFilter, ThreadInfo, ThreadPage, Timestamp, page_size,
};

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

impl ThreadCursor {
    /// The position just after `thread`.
    pub fn after(thread: &ThreadInfo) -> ThreadCursor {
        ThreadCursor {
            updated_at: thread.updated_at,
            thread_id: thread.thread_id.clone(),
        }
    }

    /// True when `thread` comes after this position (newest activity
    /// first, ties by id ascending).
    pub fn precedes(&self, thread: &ThreadInfo) -> bool {
        thread_key(thread) > (std::cmp::Reverse(self.updated_at), self.thread_id.as_str())
    }
}

impl RunCursor {
    /// The position just after `run`.
    pub fn after(run: &RunRecord) -> RunCursor {
        RunCursor {
            started_at: run.started_at,
            thread_id: run.thread_id.clone(),
            first_seq: run.first_seq,
        }
    }

    /// True when `run` comes after this position (oldest start first).
    pub fn precedes(&self, run: &RunRecord) -> bool {
        run_key(run) > (self.started_at, self.thread_id.as_str(), self.first_seq)
    }
}

/// The sort key of a run in "oldest start first" order: start time, then
/// thread id, then first sequence number.
pub fn run_key(run: &RunRecord) -> (Timestamp, &str, u64) {
    (run.started_at, run.thread_id.as_str(), run.first_seq)
}

/// The sort key of a thread in "newest activity first" order: latest
/// activity descending, then id ascending.
pub fn thread_key(thread: &ThreadInfo) -> (std::cmp::Reverse<Timestamp>, &str) {
    (
        std::cmp::Reverse(thread.updated_at),
        thread.thread_id.as_str(),
    )
}

impl RunFilter {
    /// The decoded `cursor`: `Invalid` when it is not a run cursor.
    pub fn after(&self) -> Result<Option<RunCursor>> {
        self.cursor.as_deref().map(RunCursor::decode).transpose()
    }

    /// The page size asked for, clamped (see [`page_size`]).
    pub fn page_size(&self) -> usize {
        page_size(self.limit)
    }

    /// True when `run` passes the filter's parent, status and start-time
    /// terms and comes after `after`. The thread term is the caller's: it
    /// picks the threads whose runs it passes.
    pub fn matches(&self, run: &RunRecord, after: Option<&RunCursor>) -> bool {
        self.parent_run_id
            .as_ref()
            .is_none_or(|p| run.parent_run_id.as_ref() == Some(p))
            && self.status.is_none_or(|s| run.status == s)
            && self.started_from.is_none_or(|t| run.started_at >= t)
            && self.started_before.is_none_or(|t| run.started_at < t)
            && after.is_none_or(|c| c.precedes(run))
    }
}

impl ThreadFilter {
    /// The decoded `cursor`: `Invalid` when it is not a thread cursor.
    pub fn after(&self) -> Result<Option<ThreadCursor>> {
        self.cursor.as_deref().map(ThreadCursor::decode).transpose()
    }

    /// The page size asked for, clamped (see [`page_size`]).
    pub fn page_size(&self) -> usize {
        page_size(self.limit)
    }

    /// True when a thread whose agent is `agent` passes the filter.
    pub fn wants_agent(&self, agent: Option<&String>) -> bool {
        self.agent.as_ref().is_none_or(|a| agent == Some(a))
    }
}

/// A page of runs from the runs that follow the cursor, in order: `runs`
/// holds up to `limit + 1` of them (callers fetch one more than the page);
/// the page keeps the first `limit` and, when there were more, the cursor
/// of the next page.
pub fn run_page(mut runs: Vec<RunRecord>, limit: usize) -> RunPage {
    let more = runs.len() > limit;
    runs.truncate(limit);
    let next_cursor = match runs.last() {
        Some(r) if more => Some(RunCursor::after(r).encode()),
        _ => None,
    };
    RunPage { runs, next_cursor }
}

/// A page of threads from a tenant's threads held in memory (in any order):
/// those of `filter`'s agent after its cursor, most recently active first.
/// What a backend without an activity index answers `list_threads` with.
pub fn page_threads(
    threads: impl IntoIterator<Item = ThreadInfo>,
    filter: &ThreadFilter,
) -> Result<ThreadPage> {
    let after = filter.after()?;
    let limit = filter.page_size();
    let mut page: Vec<ThreadInfo> = threads
        .into_iter()
        .filter(|t| filter.wants_agent(t.agent.as_ref()))
        .filter(|t| after.as_ref().is_none_or(|c| c.precedes(t)))
        .collect();
    page.sort_by(|a, b| thread_key(a).cmp(&thread_key(b)));
    page.truncate(limit.saturating_add(1));
    Ok(thread_page(page, limit))
}

/// A page of threads, as [`run_page`] cuts one of runs.
pub fn thread_page(mut threads: Vec<ThreadInfo>, limit: usize) -> ThreadPage {
    let more = threads.len() > limit;
    threads.truncate(limit);
    let next_cursor = match threads.last() {
        Some(t) if more => Some(ThreadCursor::after(t).encode()),
        _ => None,
    };
    ThreadPage {
        threads,
        next_cursor,
    }
}

/// A page of the runs (of the threads the caller picked) that pass
/// `filter` and follow `after` (the filter's decoded cursor), oldest start
/// first: for the backends that hold their run index in memory.
pub fn filter_runs<'a>(
    runs: impl IntoIterator<Item = &'a RunRecord>,
    filter: &RunFilter,
    after: Option<&RunCursor>,
) -> RunPage {
    let limit = filter.page_size();
    let mut runs: Vec<&RunRecord> = runs
        .into_iter()
        .filter(|r| filter.matches(r, after))
        .collect();
    runs.sort_by(|a, b| run_key(a).cmp(&run_key(b)));
    runs.truncate(limit.saturating_add(1));
    run_page(runs.into_iter().cloned().collect(), limit)
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

    fn run(thread: &str, at: i64, first_seq: u64) -> RunRecord {
        RunRecord {
            thread_id: thread.into(),
            run_id: format!("{thread}-{first_seq}"),
            parent_run_id: None,
            agent: None,
            status: crate::RunStatus::Finished,
            started_at: Timestamp(at),
            finished_at: None,
            first_seq,
            last_seq: first_seq,
            event_count: 1,
            bytes: 1,
            thread_instance: 0,
        }
    }

    #[test]
    fn pages_are_cut_at_the_limit_with_a_cursor_only_when_more_follow() {
        let runs = vec![run("a", 1, 1), run("b", 1, 1), run("a", 2, 5)];
        let page = run_page(runs.clone(), 2);
        assert_eq!(page.runs, runs[..2]);
        assert_eq!(page.next_cursor, Some(RunCursor::after(&runs[1]).encode()));
        assert_eq!(run_page(runs.clone(), 3).next_cursor, None);

        let filter = RunFilter {
            limit: 1,
            ..RunFilter::default()
        };
        // Out of order in, oldest start first out, then the rest after the
        // cursor.
        let shuffled = [runs[2].clone(), runs[1].clone(), runs[0].clone()];
        let first = filter_runs(&shuffled, &filter, None);
        assert_eq!(first.runs, runs[..1]);
        let after = RunCursor::decode(first.next_cursor.as_deref().unwrap()).unwrap();
        let second = filter_runs(&shuffled, &filter, Some(&after));
        assert_eq!(second.runs, runs[1..2]);
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
