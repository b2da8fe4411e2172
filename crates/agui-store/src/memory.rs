//! The in-memory backend (`memory://`): the reference implementation of the
//! contract, for tests and ephemeral gateways. Nothing survives the process.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::cursor::{filter_runs, page_threads};
use crate::error::{Result, StoreError};
use crate::index::{RunTable, ThreadHead};
use crate::types::{
    EventPage, RunFilter, RunPage, RunRecord, StoreStats, StoredEvent, ThreadFilter, ThreadInfo,
    ThreadPage, Timestamp, page_size,
};
use crate::{Backend, Batch, Channel, CheckpointChain, Commit};

/// The in-memory store. Cloning gives another handle on the same data.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    state: Arc<Mutex<State>>,
    closed: AtomicBool,
    /// (tenant, thread) → the run that claimed it (see `claim_thread`).
    claims: Mutex<std::collections::HashMap<(String, String), String>>,
    /// Pages read through [`Backend::read`] (see [`MemoryStore::pages_read`]).
    pages_read: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct State {
    /// (tenant, thread) → thread.
    threads: BTreeMap<(String, String), Thread>,
    /// The last thread instance drawn: each thread made gets the next one,
    /// so that engines sharing the store tell a thread deleted and written
    /// again from the one they cached ([`RunRecord::thread_instance`]).
    instances: u64,
}

struct Thread {
    events: Vec<StoredEvent>,
    runs: RunTable,
    /// Each run's checkpoint blob, with the base run a delta names
    /// ([`crate::checkpoint::base_run`]), so a chain is read in one go.
    checkpoints: HashMap<String, (bytes::Bytes, Option<String>)>,
    channels: BTreeMap<String, Channel>,
    agent: Option<String>,
    created_at: Timestamp,
    head: ThreadHead,
    bytes: u64,
}

impl Thread {
    fn info(&self, id: &str) -> ThreadInfo {
        ThreadInfo {
            thread_id: id.to_owned(),
            agent: self.agent.clone(),
            created_at: self.created_at,
            updated_at: self.head.updated_at.unwrap_or(self.created_at),
            last_seq: self.head.last_seq,
            run_count: self.runs.len() as u64,
            bytes: self.bytes,
        }
    }
}

impl MemoryStore {
    /// A new, empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// Opens `memory://` (anything after the scheme is ignored): always a
    /// new, empty store.
    pub fn open(url: &str) -> Result<MemoryStore> {
        if !url.starts_with("memory:") {
            return Err(StoreError::invalid("not a memory:// URL"));
        }
        Ok(MemoryStore::new())
    }

    /// A new handle on the same data, open even if this one was closed:
    /// what reopening a durable store is, for tests that close and reopen.
    pub fn reopen(&self) -> MemoryStore {
        MemoryStore {
            inner: Arc::new(Inner {
                state: self.inner.state.clone(),
                closed: AtomicBool::new(false),
                // A reopened store is another process: earlier claims lapse.
                claims: Mutex::default(),
                pages_read: Default::default(),
            }),
        }
    }

    /// How many pages [`Backend::read`] served on this handle: what tests of
    /// the engine count to show that it reads nothing back.
    pub fn pages_read(&self) -> u64 {
        self.inner.pages_read.load(Ordering::Relaxed)
    }

    /// Removes a run's checkpoint, bypassing the API (for tests of the
    /// rebuild path). Returns whether there was one.
    pub fn remove_checkpoint(&self, tenant: &str, thread: &str, run_id: &str) -> bool {
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        state
            .threads
            .get_mut(&key(tenant, thread))
            .is_some_and(|t| t.checkpoints.remove(run_id).is_some())
    }

    fn state(&self) -> Result<MutexGuard<'_, State>> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(StoreError::unavailable("the store is closed"));
        }
        Ok(self.inner.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn read_now(
        &self,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<EventPage> {
        let state = self.state()?;
        let t = state
            .threads
            .get(&(tenant.to_owned(), thread.to_owned()))
            .ok_or_else(|| StoreError::not_found("thread"))?;
        let start = usize::try_from(from_seq.max(1) - 1).unwrap_or(usize::MAX);
        let limit = page_size(limit);
        let events: Vec<StoredEvent> = t.events.iter().skip(start).take(limit).cloned().collect();
        Ok(EventPage::new(events, t.head.last_seq))
    }
}

fn key(tenant: &str, thread: &str) -> (String, String) {
    (tenant.to_owned(), thread.to_owned())
}

#[async_trait]
impl Backend for MemoryStore {
    async fn head(&self, tenant: &str, thread: &str) -> Result<ThreadHead> {
        let state = self.state()?;
        let t = state.threads.get(&key(tenant, thread));
        Ok(t.map(|t| t.head.clone()).unwrap_or_default())
    }

    async fn commit(&self, tenant: &str, thread: &str, batch: &Batch) -> Result<Commit> {
        let mut state = self.state()?;
        let existing = state.threads.get(&key(tenant, thread));
        if let Some(now) = batch.moved_from(existing.map(|t| &t.head)) {
            return Ok(Commit::HeadMoved(now));
        }
        if let Some(t) = existing {
            t.runs.refuse_reused(&batch.plan)?;
        }
        let plan = &batch.plan;
        let state = &mut *state;
        let instances = &mut state.instances;
        let t = state
            .threads
            .entry(key(tenant, thread))
            .or_insert_with(|| Thread {
                events: Vec::new(),
                runs: RunTable::of_instance({
                    *instances += 1;
                    *instances
                }),
                checkpoints: HashMap::new(),
                channels: BTreeMap::new(),
                agent: None,
                created_at: plan.received_at,
                head: ThreadHead::default(),
                bytes: 0,
            });
        t.events.extend(plan.stored(batch.events.clone()));
        t.runs.apply(thread, plan);
        if batch.agent.is_some() {
            t.agent = batch.agent.clone();
        }
        t.bytes += plan.bytes;
        t.head = plan.head.clone();
        Ok(Commit::Done { durable: false })
    }

    async fn read(
        &self,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<EventPage> {
        self.inner.pages_read.fetch_add(1, Ordering::Relaxed);
        self.read_now(tenant, thread, from_seq, limit)
    }

    async fn run(&self, tenant: &str, thread: &str, run_id: &str) -> Result<RunRecord> {
        let state = self.state()?;
        let t = state
            .threads
            .get(&key(tenant, thread))
            .ok_or_else(|| StoreError::not_found("thread"))?;
        t.runs.get(run_id).cloned()
    }

    async fn list_runs(&self, tenant: &str, filter: &RunFilter) -> Result<RunPage> {
        let after = filter.after()?;
        let state = self.state()?;
        let runs = state
            .threads
            .iter()
            .filter(|((tn, th), _)| {
                tn == tenant && filter.thread_id.as_ref().is_none_or(|want| want == th)
            })
            .flat_map(|(_, t)| t.runs.iter());
        Ok(filter_runs(runs, filter, after.as_ref()))
    }

    async fn thread(&self, tenant: &str, thread: &str) -> Result<ThreadInfo> {
        let state = self.state()?;
        state
            .threads
            .get(&key(tenant, thread))
            .map(|t| t.info(thread))
            .ok_or_else(|| StoreError::not_found("thread"))
    }

    async fn list_threads(&self, tenant: &str, filter: &ThreadFilter) -> Result<ThreadPage> {
        let state = self.state()?;
        let mine = state.threads.iter().filter(|((tn, _), _)| tn == tenant);
        page_threads(mine.map(|((_, id), t)| t.info(id)), filter)
    }

    async fn delete_thread(&self, tenant: &str, thread: &str) -> Result<()> {
        let mut state = self.state()?;
        if state.threads.remove(&key(tenant, thread)).is_none() {
            return Err(StoreError::not_found("thread"));
        }
        Ok(())
    }

    async fn rename_thread(&self, tenant: &str, from: &str, to: &str) -> Result<()> {
        let mut state = self.state()?;
        if !state.threads.contains_key(&key(tenant, from)) {
            return Err(StoreError::not_found("thread"));
        }
        if from == to {
            return Ok(());
        }
        if state.threads.contains_key(&key(tenant, to)) {
            return Err(StoreError::thread_exists(to));
        }
        let mut t = state
            .threads
            .remove(&key(tenant, from))
            .ok_or_else(|| StoreError::not_found("thread"))?;
        t.runs.rename(to);
        state.threads.insert(key(tenant, to), t);
        Ok(())
    }

    async fn channels(&self, tenant: &str, thread: &str) -> Result<Vec<Channel>> {
        let state = self.state()?;
        Ok(state
            .threads
            .get(&key(tenant, thread))
            .map(|t| t.channels.values().cloned().collect())
            .unwrap_or_default())
    }

    async fn put_channel(&self, tenant: &str, thread: &str, channel: Channel) -> Result<()> {
        let mut state = self.state()?;
        let t = state
            .threads
            .get_mut(&key(tenant, thread))
            .ok_or_else(|| StoreError::not_found("thread"))?;
        t.channels.insert(channel.agent.clone(), channel);
        Ok(())
    }

    async fn tenants(&self) -> Result<Vec<String>> {
        let state = self.state()?;
        let mut out: Vec<String> = state.threads.keys().map(|(t, _)| t.clone()).collect();
        out.dedup();
        Ok(out)
    }

    async fn load_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<Option<Vec<u8>>> {
        let state = self.state()?;
        let t = state
            .threads
            .get(&key(tenant, thread))
            .ok_or_else(|| StoreError::not_found("thread"))?;
        Ok(t.checkpoints.get(run_id).map(|(blob, _)| blob.to_vec()))
    }

    async fn save_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
        blob: Vec<u8>,
    ) -> Result<()> {
        let mut state = self.state()?;
        let t = state
            .threads
            .get_mut(&key(tenant, thread))
            .ok_or_else(|| StoreError::not_found("thread"))?;
        if !t.runs.contains(run_id) {
            return Err(StoreError::not_found("run"));
        }
        let base = crate::checkpoint::base_run(&blob);
        t.checkpoints.insert(run_id.to_owned(), (blob.into(), base));
        Ok(())
    }

    /// The run and its whole checkpoint chain, followed through the base
    /// each blob names (checked by the engine as it composes).
    async fn checkpoint_chain(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<CheckpointChain> {
        let state = self.state()?;
        let t = state
            .threads
            .get(&key(tenant, thread))
            .ok_or_else(|| StoreError::not_found("thread"))?;
        let run = t.runs.get(run_id)?;
        let mut links = Vec::new();
        let mut next = Some(run_id);
        while let Some(id) = next
            && links.len() < crate::checkpoint::MAX_CHAIN
            && let Some((blob, base)) = t.checkpoints.get(id)
        {
            links.push((id.to_owned(), blob.clone()));
            next = base.as_deref();
        }
        Ok(CheckpointChain {
            status: run.status,
            last_seq: run.last_seq,
            links,
        })
    }

    async fn mark_interrupted(&self) -> Result<Vec<(String, RunRecord)>> {
        let mut state = self.state()?;
        let now = Timestamp::now();
        let mut marked = Vec::new();
        for ((tenant, _), t) in state.threads.iter_mut() {
            let runs = t.runs.interrupt_running(&mut t.head, now);
            marked.extend(runs.into_iter().map(|r| (tenant.clone(), r)));
        }
        Ok(marked)
    }

    async fn ready(&self) -> Result<()> {
        self.state().map(drop)
    }

    async fn stats(&self) -> Result<StoreStats> {
        let state = self.state()?;
        let mut s = StoreStats::default();
        let mut last_tenant: Option<&str> = None;
        for ((tenant, _), t) in &state.threads {
            if last_tenant != Some(tenant.as_str()) {
                s.tenants += 1;
                last_tenant = Some(tenant);
            }
            s.threads += 1;
            s.runs += t.runs.len() as u64;
            s.events += t.head.last_seq;
            s.raw_bytes += t.bytes;
            s.stored_bytes += t.bytes
                + t.checkpoints
                    .values()
                    .map(|(c, _)| c.len() as u64)
                    .sum::<u64>();
        }
        Ok(s)
    }

    async fn claim_thread(&self, tenant: &str, thread: &str, run: &str) -> Result<Option<String>> {
        drop(self.state()?);
        let mut claims = self.inner.claims.lock().unwrap_or_else(|p| p.into_inner());
        let key = (tenant.to_owned(), thread.to_owned());
        if let Some(holder) = claims.get(&key) {
            return Ok(Some(holder.clone()));
        }
        claims.insert(key, run.to_owned());
        Ok(None)
    }

    async fn release_thread(&self, tenant: &str, thread: &str, run: &str) -> Result<()> {
        let mut claims = self.inner.claims.lock().unwrap_or_else(|p| p.into_inner());
        let key = (tenant.to_owned(), thread.to_owned());
        if claims.get(&key).is_some_and(|r| r == run) {
            claims.remove(&key);
        }
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        self.state().map(drop)
    }

    async fn close(&self) -> Result<()> {
        self.inner.closed.store(true, Ordering::Release);
        Ok(())
    }
}
