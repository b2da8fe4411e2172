//! The in-memory index, rebuilt on open by replaying the log: per thread its
//! head, counters, the location of every batch record (never the payloads),
//! its runs and the location of each run's latest checkpoint.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use agui_protocol::Event;
use agui_store::index::{BatchPlan, RunTable, ThreadHead, plan_batch};
use agui_store::{Result, RunRecord, RunStatus, StoreError, ThreadInfo, Timestamp};

use crate::record::{self, Reader};
use crate::segment::Loc;

/// Where a batch is.
#[derive(Debug, Clone, Copy)]
pub struct BatchLoc {
    pub first_seq: u64,
    pub count: u32,
    pub received_at: Timestamp,
    pub loc: Loc,
}

/// One thread.
pub struct ThreadState {
    pub head: ThreadHead,
    pub agent: Option<String>,
    pub created_at: Timestamp,
    pub bytes: u64,
    pub batches: Vec<BatchLoc>,
    pub runs: RunTable,
    pub checkpoints: HashMap<String, Loc>,
    /// Channels by agent (small: kept in memory, replayed from the log).
    pub channels: BTreeMap<String, agui_store::Channel>,
}

impl ThreadState {
    pub fn info(&self, id: &str) -> ThreadInfo {
        ThreadInfo {
            thread_id: id.to_owned(),
            agent: self.agent.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at(),
            last_seq: self.head.last_seq,
            run_count: self.runs.len() as u64,
            bytes: self.bytes,
        }
    }

    fn updated_at(&self) -> Timestamp {
        self.head.updated_at.unwrap_or(self.created_at)
    }

    /// The batches holding `from..` (at most those needed for `limit` events).
    pub fn batches_from(&self, from: u64, limit: usize) -> Vec<BatchLoc> {
        let start = self
            .batches
            .partition_point(|b| b.first_seq + u64::from(b.count) <= from);
        let mut out = Vec::new();
        let mut n = 0usize;
        for b in &self.batches[start..] {
            if n >= limit {
                break;
            }
            let skip = from.saturating_sub(b.first_seq) as usize;
            n += (b.count as usize).saturating_sub(skip);
            out.push(*b);
        }
        out
    }
}

/// One tenant: threads, and their order by activity.
#[derive(Default)]
pub struct TenantState {
    pub threads: HashMap<String, ThreadState>,
    pub by_activity: BTreeSet<(Reverse<Timestamp>, String)>,
}

/// Everything.
#[derive(Default)]
pub struct State {
    pub tenants: BTreeMap<String, TenantState>,
}

impl State {
    pub fn thread(&self, tenant: &str, thread: &str) -> Option<&ThreadState> {
        self.tenants.get(tenant)?.threads.get(thread)
    }

    fn thread_mut(&mut self, tenant: &str, thread: &str) -> Option<&mut ThreadState> {
        self.tenants.get_mut(tenant)?.threads.get_mut(thread)
    }

    /// Plans a batch against the current state (replaying the log at open:
    /// the engine plans every new batch).
    pub fn plan(
        &self,
        tenant: &str,
        thread: &str,
        events: &[Event],
        agent: Option<&str>,
        now: Timestamp,
    ) -> Result<BatchPlan> {
        let t = self.thread(tenant, thread);
        let head = t.map(|t| t.head.clone()).unwrap_or_default();
        let last_run = head.last_run.as_ref().map(|(id, _)| id.as_str());
        let elsewhere = agui_store::aside::parents_elsewhere(tenant, events, last_run);
        plan_batch(&head, events, agent, now, |id| {
            Ok(t.is_some_and(|t| t.runs.contains(id)) || elsewhere.iter().any(|p| p == id))
        })
    }

    /// Applies a planned batch stored at `loc`.
    pub fn apply_batch(
        &mut self,
        tenant: &str,
        thread: &str,
        agent: Option<&str>,
        plan: &BatchPlan,
        count: u32,
        loc: Loc,
    ) {
        let ten = self.tenants.entry(tenant.to_owned()).or_default();
        let t = ten
            .threads
            .entry(thread.to_owned())
            .or_insert_with(|| ThreadState {
                head: ThreadHead::default(),
                agent: None,
                created_at: plan.received_at,
                bytes: 0,
                batches: Vec::new(),
                runs: RunTable::new(),
                checkpoints: HashMap::new(),
                channels: BTreeMap::new(),
            });
        if !t.batches.is_empty() || t.head.last_seq > 0 {
            ten.by_activity
                .remove(&(Reverse(t.updated_at()), thread.to_owned()));
        }
        t.batches.push(BatchLoc {
            first_seq: plan.first_seq,
            count,
            received_at: plan.received_at,
            loc,
        });
        t.runs.apply(thread, plan);
        if let Some(a) = agent {
            t.agent = Some(a.to_owned());
        }
        t.bytes += plan.bytes;
        t.head = plan.head.clone();
        ten.by_activity
            .insert((Reverse(t.updated_at()), thread.to_owned()));
    }

    /// True when the run exists (checkpoints may be stored for it).
    pub fn run_exists(&self, tenant: &str, thread: &str, run: &str) -> Result<()> {
        let t = self
            .thread(tenant, thread)
            .ok_or_else(|| StoreError::not_found("thread"))?;
        if t.runs.contains(run) {
            Ok(())
        } else {
            Err(StoreError::not_found("run"))
        }
    }

    pub fn set_checkpoint(&mut self, tenant: &str, thread: &str, run: &str, loc: Option<Loc>) {
        if let Some(t) = self.thread_mut(tenant, thread) {
            if !t.runs.contains(run) {
                return;
            }
            match loc {
                Some(l) => t.checkpoints.insert(run.to_owned(), l),
                None => t.checkpoints.remove(run),
            };
        }
    }

    /// Sets one agent's channel of an existing thread.
    pub fn set_channel(&mut self, tenant: &str, thread: &str, channel: agui_store::Channel) {
        if let Some(t) = self.thread_mut(tenant, thread) {
            t.channels.insert(channel.agent.clone(), channel);
        }
    }

    /// Removes a thread; false when it did not exist.
    pub fn delete(&mut self, tenant: &str, thread: &str) -> bool {
        let Some(ten) = self.tenants.get_mut(tenant) else {
            return false;
        };
        let Some(t) = ten.threads.remove(thread) else {
            return false;
        };
        ten.by_activity
            .remove(&(Reverse(t.updated_at()), thread.to_owned()));
        if ten.threads.is_empty() {
            self.tenants.remove(tenant);
        }
        true
    }

    /// Gives thread `from` the id `to` (the caller checked that `to` does
    /// not exist); false when `from` did not exist.
    pub fn rename(&mut self, tenant: &str, from: &str, to: &str) -> bool {
        let Some(ten) = self.tenants.get_mut(tenant) else {
            return false;
        };
        if from == to {
            return ten.threads.contains_key(from);
        }
        let Some(mut t) = ten.threads.remove(from) else {
            return false;
        };
        ten.by_activity
            .remove(&(Reverse(t.updated_at()), from.to_owned()));
        t.runs.rename(to);
        ten.by_activity
            .insert((Reverse(t.updated_at()), to.to_owned()));
        ten.threads.insert(to.to_owned(), t);
        true
    }

    pub fn running_runs(&self) -> u64 {
        self.tenants
            .values()
            .flat_map(|t| t.threads.values())
            .flat_map(|t| t.runs.iter())
            .filter(|r| r.status == RunStatus::Running)
            .count() as u64
    }

    /// Marks every running run interrupted at `at`; returns the runs
    /// marked, with their tenants, as they now stand.
    pub fn interrupt(&mut self, at: Timestamp) -> Vec<(String, RunRecord)> {
        let mut marked = Vec::new();
        for (tenant, ten) in self.tenants.iter_mut() {
            for t in ten.threads.values_mut() {
                let runs = t.runs.interrupt_running(&mut t.head, at);
                marked.extend(runs.into_iter().map(|r| (tenant.clone(), r)));
            }
        }
        marked
    }

    /// Replays one record read from the log at `loc` (`intact` false when
    /// its checksum failed: only a checkpoint may be damaged, and it is
    /// indexed so that restore finds it damaged and rebuilds it).
    pub fn replay(&mut self, payload: &[u8], loc: Loc, intact: bool) -> Result<(), ReplayError> {
        let kind = payload.first().copied().unwrap_or(0);
        if !intact {
            if kind == record::CHECKPOINT {
                let mut r = Reader::new(payload);
                let header = (|| -> Result<_, crate::error::FileError> {
                    r.u8()?;
                    Ok((r.str()?, r.str()?, r.str()?))
                })();
                if let Ok((tenant, thread, run)) = header {
                    self.set_checkpoint(tenant, thread, run, Some(loc));
                    return Ok(());
                }
            }
            return Err(ReplayError::Damaged(
                "a damaged record in the middle of the log",
            ));
        }
        match kind {
            record::BATCH | record::FRAMED_BATCH => {
                let b = record::decode_batch(payload)
                    .map_err(|_| ReplayError::Damaged("a batch record does not decode"))?;
                let events = b.events;
                let plan = self
                    .plan(
                        b.tenant,
                        b.thread,
                        &events,
                        b.agent,
                        Timestamp(b.received_at),
                    )
                    .map_err(|_| ReplayError::Damaged("a stored batch no longer plans"))?;
                if plan.first_seq != b.first_seq || plan.received_at.0 != b.received_at {
                    return Err(ReplayError::Damaged("a stored batch is out of sequence"));
                }
                self.apply_batch(b.tenant, b.thread, b.agent, &plan, events.len() as u32, loc);
            }
            record::CHECKPOINT | record::UNCHECKPOINT => {
                let mut r = Reader::new(payload);
                let header = (|| -> Result<_, crate::error::FileError> {
                    r.u8()?;
                    Ok((r.str()?, r.str()?, r.str()?))
                })()
                .map_err(|_| ReplayError::Damaged("a checkpoint record does not decode"))?;
                let loc = (kind == record::CHECKPOINT).then_some(loc);
                self.set_checkpoint(header.0, header.1, header.2, loc);
            }
            record::DELETE => {
                let mut r = Reader::new(payload);
                let (tenant, thread) = (|| -> Result<_, crate::error::FileError> {
                    r.u8()?;
                    let v = (r.str()?, r.str()?);
                    r.end()?;
                    Ok(v)
                })()
                .map_err(|_| ReplayError::Damaged("a delete record does not decode"))?;
                self.delete(tenant, thread);
            }
            record::RENAME => {
                let mut r = Reader::new(payload);
                let (tenant, from, to) = (|| -> Result<_, crate::error::FileError> {
                    r.u8()?;
                    let v = (r.str()?, r.str()?, r.str()?);
                    r.end()?;
                    Ok(v)
                })()
                .map_err(|_| ReplayError::Damaged("a rename record does not decode"))?;
                if self.thread(tenant, to).is_some() || !self.rename(tenant, from, to) {
                    return Err(ReplayError::Damaged("a rename record does not apply"));
                }
            }
            record::CHANNEL => {
                let mut r = Reader::new(payload);
                let (tenant, thread, channel) = (|| -> Result<_, crate::error::FileError> {
                    r.u8()?;
                    let (tenant, thread) = (r.str()?, r.str()?);
                    let agent = r.str()?.to_owned();
                    let updated_at = Timestamp(r.i64()?);
                    let state = r.str()?.to_owned();
                    r.end()?;
                    let channel = agui_store::Channel {
                        agent,
                        state,
                        updated_at,
                    };
                    Ok((tenant, thread, channel))
                })()
                .map_err(|_| ReplayError::Damaged("a channel record does not decode"))?;
                self.set_channel(tenant, thread, channel);
            }
            record::INTERRUPTED => {
                let mut r = Reader::new(payload);
                let at = (|| -> Result<_, crate::error::FileError> {
                    r.u8()?;
                    let at = r.i64()?;
                    r.end()?;
                    Ok(at)
                })()
                .map_err(|_| ReplayError::Damaged("an interruption record does not decode"))?;
                self.interrupt(Timestamp(at));
            }
            _ => return Err(ReplayError::UnknownKind(kind)),
        }
        Ok(())
    }
}

/// Why the log cannot be replayed.
#[derive(Debug)]
pub enum ReplayError {
    /// A record is damaged or contradicts the log.
    Damaged(&'static str),
    /// An intact record of a kind this version does not know: written by a
    /// newer version of the store, not damage (never cut by a repair).
    UnknownKind(u8),
}
