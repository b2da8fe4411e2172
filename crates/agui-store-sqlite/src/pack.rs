//! The packer: merges a thread's small chunk rows, after they are
//! committed, into packed frames (`agui_store::frame::PACKED`) of about
//! [`frame::PACK_EVENTS`] events, off the append path.
//!
//! A gateway commits a few events per row, and zstd finds little to share
//! inside one small batch even over the shipped dictionary; over a thousand
//! events of one thread it finds much more (measured in
//! `crates/agui-store/BENCHMARK.md`, session 23). The packer runs on a
//! thread of its own with its own read connection: it reads the rows,
//! merges their typed records without parsing an event (each batch keeps
//! its receive time in the frame's table) and compresses them there; the
//! writer only checks that the rows are still byte for byte what was read
//! and swaps them for the packed row, in its next group commit
//! ([`Op::Pack`]). A reader sees the old rows or the packed one, never
//! both, never neither (one transaction; SQLite's snapshot for readers).
//!
//! When. A thread is packed once it has taken [`frame::PACK_EVENTS`] events
//! since the last look (full frames only: its tail keeps growing), and once
//! it has been quiet for [`QUIET`] (its tail too, even when small, so that a
//! conversation of short runs is packed; a later look merges that small
//! frame with what follows). Rows of at least half a packed frame's size
//! (a large batch), and rows of the untyped codecs, are left as they are.
//! One swap replaces at most [`PACK_ROWS`] rows, since the writer's cost
//! (and the wait of the appends behind it) grows with the rows it deletes:
//! a gateway's rows of one event each become frames of 64 events, and a
//! later look merges those into frames of about 1,024.
//!
//! What a crash does: nothing. A pack is one transaction over rows that
//! never change once written; killed before its commit the old rows stay,
//! after it the packed row holds the same events and receive times.

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agui_store::{Result, StoreError, Timestamp, frame};
use rusqlite::{Connection, params};
use tokio::sync::oneshot;

use crate::db::{self, map};
use crate::writer::{Note, Op, Pack};

/// How long a thread must be quiet before its tail is packed.
pub(crate) const QUIET: Duration = Duration::from_secs(1);

/// The packer's niceness: under contention (appends on both cores) it gets
/// about a tenth of a core's share and its work waits; on an idle machine
/// it runs at full speed.
const NICE: i32 = 10;

/// Lowers the calling thread's scheduling priority to [`NICE`] (Linux: a
/// thread's own niceness). Best effort: an error leaves it as it was.
pub(crate) fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `gettid` takes nothing and cannot fail; `setpriority` on
        // the calling thread's own id only changes its niceness. No memory
        // is shared with either call.
        let rc = unsafe {
            let tid = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, NICE)
        };
        let _ = rc;
    }
}

/// Rows swapped for one packed row at most: the writer deletes each in its
/// group commit (about a microsecond a row, measured: 1,024 one-event rows
/// took 0.9 ms, 64 took 0.13 ms), while appends wait. Rows of one event (a
/// gateway's) become frames of 64 events first, merged again later.
const PACK_ROWS: usize = 64;

/// Thread resume points kept at most (forgotten past it: a thread is then
/// read from its start again, once).
const KNOWN: usize = 100_000;

/// One stored row's framing, as the packer plans with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Row {
    first: i64,
    last: i64,
    codec: i64,
    raw_len: i64,
}

impl Row {
    fn events(&self) -> u64 {
        (self.last - self.first + 1).max(0) as u64
    }

    /// Left as it is: an untyped codec, or already large enough that
    /// merging it buys little.
    fn settled(&self) -> bool {
        !matches!(self.codec, frame::TYPED | frame::TYPED_ZSTD | frame::PACKED)
            || self.events() * 2 >= frame::PACK_EVENTS as u64
            || self.raw_len.max(0) as u64 * 2 >= frame::PACK_BYTES as u64
    }
}

/// The groups of consecutive rows to merge, from rows in sequence order:
/// each group as full as [`frame::PACK_EVENTS`] or [`frame::PACK_BYTES`]
/// allows, or ended by a settled row; the tail (a group that may still
/// grow) only when `tail`. Also the sequence number before which nothing is
/// left to pack once those groups are packed (where the next look starts).
fn plan(rows: &[Row], tail: bool) -> (Vec<std::ops::Range<usize>>, Option<i64>) {
    let mut groups = Vec::new();
    let mut resume = None;
    let (mut start, mut events, mut bytes) = (0usize, 0u64, 0u64);
    for (i, r) in rows.iter().enumerate() {
        if r.settled() {
            if i - start >= 2 {
                groups.push(start..i);
            }
            resume = Some(r.last + 1);
            (start, events, bytes) = (i + 1, 0, 0);
            continue;
        }
        events += r.events();
        bytes += r.raw_len.max(0) as u64;
        if events >= frame::PACK_EVENTS as u64 || bytes >= frame::PACK_BYTES as u64 {
            if i + 1 - start >= 2 {
                groups.push(start..i + 1);
            }
            resume = Some(r.last + 1);
            (start, events, bytes) = (i + 1, 0, 0);
        } else if i + 1 - start >= PACK_ROWS {
            // Merged now, and again with its neighbours at a later look (the
            // next look starts no later than here).
            groups.push(start..i + 1);
            (start, events, bytes) = (i + 1, 0, 0);
        }
    }
    if tail && rows.len() - start >= 2 {
        groups.push(start..rows.len());
    }
    (groups, resume)
}

/// The packer's thread state.
pub(crate) struct Packer {
    conn: Connection,
    ops: mpsc::Sender<Op>,
    /// Per thread row id: where the rows that may still be packed start.
    resume: HashMap<i64, i64>,
    /// Threads with commits not looked at yet: events since, last commit.
    busy: HashMap<i64, (u64, Instant)>,
}

impl Packer {
    pub(crate) fn open(path: &Path, ops: mpsc::Sender<Op>) -> Result<Packer> {
        Ok(Packer {
            conn: db::connect(path, false)?,
            ops,
            resume: HashMap::new(),
            busy: HashMap::new(),
        })
    }

    /// Serves the writer's notes until told to stop (or the writer is gone).
    pub(crate) fn run(mut self, notes: mpsc::Receiver<Note>) {
        lower_priority();
        // Quiet threads are looked for a few times per QUIET, not after
        // every note: a note costs O(1) however many threads are busy.
        let sweep_every = QUIET / 4;
        let mut last_sweep = Instant::now();
        loop {
            let wait = if self.busy.is_empty() {
                Duration::from_secs(3600)
            } else {
                sweep_every.saturating_sub(last_sweep.elapsed())
            };
            match notes.recv_timeout(wait) {
                Ok(Note::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Ok(Note::Gone(id)) => {
                    self.busy.remove(&id);
                    self.resume.remove(&id);
                }
                Ok(Note::Appended(id, n)) => {
                    let e = self.busy.entry(id).or_insert((0, Instant::now()));
                    e.0 += n;
                    e.1 = Instant::now();
                    if e.0 >= frame::PACK_EVENTS as u64 {
                        e.0 = 0;
                        if self.thread(id, false).is_err() {
                            return;
                        }
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if last_sweep.elapsed() < sweep_every {
                continue;
            }
            last_sweep = Instant::now();
            let quiet: Vec<i64> = self
                .busy
                .iter()
                .filter(|(_, (_, at))| at.elapsed() >= QUIET)
                .map(|(&id, _)| id)
                .collect();
            for id in quiet {
                self.busy.remove(&id);
                if self.thread(id, true).is_err() {
                    return;
                }
            }
        }
    }

    /// Packs what is ready in one thread (its tail too when `tail`).
    /// `Err` only when the writer is gone; a damaged or changed row leaves
    /// the rows as they are.
    fn thread(&mut self, id: i64, tail: bool) -> std::result::Result<(), ()> {
        // A look merges one level (rows into frames of up to PACK_ROWS
        // rows, those into frames of PACK_EVENTS); a quiet thread is looked
        // at again until nothing more merges, so that it ends up packed.
        for _ in 0..if tail { 4 } else { 1 } {
            let from = self.resume.get(&id).copied().unwrap_or(1);
            let Ok(rows) = self.rows(id, from) else {
                return Ok(());
            };
            let (groups, resume) = plan(&rows, tail);
            let mut merged = false;
            for g in groups {
                match self.pack(id, &rows[g]) {
                    Ok(done) => merged |= done,
                    Err(e) if e.kind() == agui_store::ErrorKind::Unavailable => return Err(()),
                    Err(_) => {}
                }
            }
            if let Some(r) = resume {
                if self.resume.len() >= KNOWN {
                    self.resume.clear();
                }
                self.resume.insert(id, r);
            }
            if !merged {
                break;
            }
        }
        Ok(())
    }

    /// The framing of a thread's rows from `from` on (their bytes unread).
    fn rows(&self, id: i64, from: i64) -> Result<Vec<Row>> {
        self.conn
            .prepare_cached(
                "SELECT first_seq, last_seq, codec, raw_len FROM chunks
                 WHERE thread_id = ?1 AND first_seq >= ?2 ORDER BY first_seq",
            )
            .and_then(|mut st| {
                st.query_map(params![id, from], |r| {
                    Ok(Row {
                        first: r.get(0)?,
                        last: r.get(1)?,
                        codec: r.get(2)?,
                        raw_len: r.get(3)?,
                    })
                })?
                .collect()
            })
            .map_err(|e| map(e, "read events to pack"))
    }

    /// Merges one group of rows and has the writer swap it in. `Ok(false)`
    /// when the rows changed or packing would not make them smaller.
    fn pack(&self, id: i64, group: &[Row]) -> Result<bool> {
        let (first, last) = (group[0].first, group[group.len() - 1].last);
        let mut old = Vec::with_capacity(group.len());
        let mut parts = Vec::with_capacity(group.len());
        let mut received_at = None;
        {
            let mut st = self
                .conn
                .prepare_cached(
                    "SELECT first_seq, last_seq, received_at, codec, raw_len, crc, data FROM chunks
                     WHERE thread_id = ?1 AND first_seq BETWEEN ?2 AND ?3 ORDER BY first_seq",
                )
                .map_err(|e| map(e, "read events to pack"))?;
            let mut rows = st
                .query(params![id, first, last])
                .map_err(|e| map(e, "read events to pack"))?;
            while let Some(r) = rows.next().map_err(|e| map(e, "read events to pack"))? {
                let g = |e| map(e, "read events to pack");
                let (f, l): (i64, i64) = (r.get(0).map_err(g)?, r.get(1).map_err(g)?);
                let at = Timestamp(r.get(2).map_err(g)?);
                let data: Vec<u8> = r.get(6).map_err(g)?;
                let Some(records) = frame::records(
                    r.get(3).map_err(g)?,
                    r.get(4).map_err(g)?,
                    r.get(5).map_err(g)?,
                    &data,
                    (l - f + 1).max(0) as u64,
                    at,
                )?
                else {
                    return Ok(false);
                };
                received_at.get_or_insert(at.0);
                parts.push(records);
                old.push((f, l, data));
            }
        }
        // The rows read must be the rows planned, contiguous.
        let planned: Vec<(i64, i64)> = group.iter().map(|r| (r.first, r.last)).collect();
        let read: Vec<(i64, i64)> = old.iter().map(|(f, l, _)| (*f, *l)).collect();
        if planned != read || group.windows(2).any(|w| w[1].first != w[0].last + 1) {
            return Ok(false);
        }
        let packed = frame::pack(&parts)?;
        let before: usize = old.iter().map(|(_, _, d)| d.len()).sum();
        if packed.data.len() >= before {
            return Ok(false);
        }
        let (reply, rx) = oneshot::channel();
        let op = Op::Pack {
            pack: Box::new(Pack {
                thread_id: id,
                old,
                received_at: received_at.unwrap_or_default(),
                events: parts.iter().map(frame::Records::events).sum(),
                frame: packed,
            }),
            reply,
        };
        let gone = || StoreError::unavailable("the store's writer stopped");
        self.ops.send(op).map_err(|_| gone())?;
        Ok(rx.blocking_recv().map_err(|_| gone())?? == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_packer_runs_at_a_lower_priority_than_the_rest() {
        let nice = || {
            // SAFETY: reads the calling thread's own niceness.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
        };
        let before = nice();
        let inside = std::thread::spawn(move || {
            lower_priority();
            nice()
        })
        .join()
        .unwrap();
        if before <= NICE {
            assert_eq!(inside, NICE);
        }
        assert_eq!(nice(), before, "only the packer's own thread changed");
    }

    fn row(first: i64, n: i64, codec: i64) -> Row {
        Row {
            first,
            last: first + n - 1,
            codec,
            raw_len: n * 100,
        }
    }

    fn rows(sizes: &[i64]) -> Vec<Row> {
        let mut out = Vec::new();
        let mut seq = 1;
        for &n in sizes {
            out.push(row(seq, n, frame::TYPED_ZSTD));
            seq += n;
        }
        out
    }

    #[test]
    fn groups_fill_up_and_the_tail_waits_for_quiet() {
        let r = rows(&[300, 300, 300, 300, 10, 10]);
        let (g, resume) = plan(&r, false);
        assert_eq!(g, vec![0..4]);
        assert_eq!(resume, Some(1201));
        let (g, _) = plan(&r, true);
        assert_eq!(g, vec![0..4, 4..6]);
    }

    #[test]
    fn a_large_row_is_left_and_ends_a_group() {
        let r = rows(&[5, 5, 600, 5, 5, 5]);
        let (g, resume) = plan(&r, false);
        assert_eq!(g, vec![0..2]);
        assert_eq!(resume, Some(611));
        assert_eq!(plan(&r, true).0, vec![0..2, 3..6]);
        // One small row alone is not worth a pack.
        assert_eq!(
            plan(&rows(&[5, 600, 5]), true).0,
            Vec::<std::ops::Range<usize>>::new()
        );
    }

    #[test]
    fn untyped_rows_are_left_as_they_are() {
        let mut r = rows(&[5, 5, 5, 5]);
        r[2].codec = frame::ZSTD;
        assert_eq!(plan(&r, true).0, vec![0..2]);
    }

    #[test]
    fn many_small_rows_are_merged_in_steps() {
        let r = rows(&[1; 200]);
        let (g, resume) = plan(&r, false);
        assert_eq!(g, vec![0..64, 64..128, 128..192]);
        assert_eq!(resume, None, "merged again at the next look");
        // A later look: 17 frames of 64 events (and new small rows) merge
        // into a frame of 1,024 events.
        let mut next: Vec<Row> = (0..17)
            .map(|k| row(1 + 64 * k, 64, frame::PACKED))
            .collect();
        next.extend((1089..1189).map(|s| row(s, 1, frame::TYPED)));
        let (g, resume) = plan(&next, false);
        assert_eq!(g, vec![0..16, 16..80]);
        assert_eq!(resume, Some(1025));
    }

    #[test]
    fn bytes_also_fill_a_group() {
        let mut r = rows(&[10, 10, 10]);
        for x in &mut r {
            x.raw_len = frame::PACK_BYTES as i64 / 3 + 1;
        }
        let (g, resume) = plan(&r, false);
        assert_eq!(g, vec![0..3]);
        assert_eq!(resume, Some(31));
    }
}
