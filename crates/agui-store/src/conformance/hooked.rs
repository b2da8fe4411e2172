//! A backend for fault-injection tests: [`Hooked`] forwards every
//! [`Backend`] call to an inner backend, except the few that a test's
//! [`Hooks`] take over (a commit that fails, a read that meets damage, a
//! write that lands between two reads of a restore).
//!
//! ```ignore
//! struct DiskGone;
//! #[async_trait::async_trait]
//! impl Hooks for DiskGone {
//!     async fn commit(&self, inner: &dyn Backend, tenant: &str, thread: &str,
//!                     batch: &Batch) -> Result<Commit> {
//!         Err(StoreError::unavailable("the disk is gone (test)"))
//!     }
//! }
//! let store = Store::new(Hooked::new(MemoryStore::new(), DiskGone));
//! ```

use std::sync::Arc;

use async_trait::async_trait;

use crate::Channel;
use crate::backend::{Backend, Batch, CheckpointChain, Commit};
use crate::error::Result;
use crate::index::ThreadHead;
use crate::subscribe::Hub;
use crate::types::{
    EventPage, RunFilter, RunPage, RunRecord, StoreStats, ThreadFilter, ThreadInfo, ThreadPage,
};

/// The calls a test may take over. Each default calls the inner backend.
#[async_trait]
pub trait Hooks: Send + Sync {
    /// [`Backend::commit`].
    async fn commit(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        batch: &Batch,
    ) -> Result<Commit> {
        inner.commit(tenant, thread, batch).await
    }

    /// [`Backend::ready`].
    async fn ready(&self, inner: &dyn Backend) -> Result<()> {
        inner.ready().await
    }

    /// [`Backend::read`].
    async fn read(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<EventPage> {
        inner.read(tenant, thread, from_seq, limit).await
    }

    /// [`Backend::list_runs`].
    async fn list_runs(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        filter: &RunFilter,
    ) -> Result<RunPage> {
        inner.list_runs(tenant, filter).await
    }

    /// [`Backend::checkpoint_chain`].
    async fn checkpoint_chain(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<CheckpointChain> {
        inner.checkpoint_chain(tenant, thread, run_id).await
    }

    /// [`Backend::mark_interrupted_elsewhere`].
    async fn mark_interrupted_elsewhere(
        &self,
        inner: &dyn Backend,
    ) -> Result<Vec<(String, RunRecord)>> {
        inner.mark_interrupted_elsewhere().await
    }

    /// [`Backend::shared`].
    fn shared(&self, inner: &dyn Backend) -> bool {
        inner.shared()
    }

    /// [`Backend::release_thread`].
    async fn release_thread(
        &self,
        inner: &dyn Backend,
        tenant: &str,
        thread: &str,
        run: &str,
    ) -> Result<()> {
        inner.release_thread(tenant, thread, run).await
    }
}

/// An inner backend with a test's [`Hooks`] in front of it.
pub struct Hooked<H> {
    inner: Arc<dyn Backend>,
    hooks: H,
}

impl<H: Hooks> Hooked<H> {
    /// `inner` behind `hooks`.
    pub fn new(inner: impl Backend + 'static, hooks: H) -> Hooked<H> {
        Hooked::from_arc(Arc::new(inner), hooks)
    }

    /// A shared `inner` (which the test may also call directly) behind
    /// `hooks`.
    pub fn from_arc(inner: Arc<dyn Backend>, hooks: H) -> Hooked<H> {
        Hooked { inner, hooks }
    }

    /// The test's hooks.
    pub fn hooks(&self) -> &H {
        &self.hooks
    }
}

#[async_trait]
impl<H: Hooks> Backend for Hooked<H> {
    async fn head(&self, tenant: &str, thread: &str) -> Result<ThreadHead> {
        self.inner.head(tenant, thread).await
    }
    async fn known_runs(&self, tenant: &str, thread: &str, ids: &[String]) -> Result<Vec<String>> {
        self.inner.known_runs(tenant, thread, ids).await
    }
    async fn commit(&self, tenant: &str, thread: &str, batch: &Batch) -> Result<Commit> {
        self.hooks.commit(&*self.inner, tenant, thread, batch).await
    }
    async fn ready(&self) -> Result<()> {
        self.hooks.ready(&*self.inner).await
    }
    async fn read(&self, tenant: &str, thread: &str, from: u64, limit: usize) -> Result<EventPage> {
        self.hooks
            .read(&*self.inner, tenant, thread, from, limit)
            .await
    }
    async fn run(&self, tenant: &str, thread: &str, run_id: &str) -> Result<RunRecord> {
        self.inner.run(tenant, thread, run_id).await
    }
    async fn list_runs(&self, tenant: &str, filter: &RunFilter) -> Result<RunPage> {
        self.hooks.list_runs(&*self.inner, tenant, filter).await
    }
    async fn thread(&self, tenant: &str, thread: &str) -> Result<ThreadInfo> {
        self.inner.thread(tenant, thread).await
    }
    async fn list_threads(&self, tenant: &str, filter: &ThreadFilter) -> Result<ThreadPage> {
        self.inner.list_threads(tenant, filter).await
    }
    async fn delete_thread(&self, tenant: &str, thread: &str) -> Result<()> {
        self.inner.delete_thread(tenant, thread).await
    }
    async fn rename_thread(&self, tenant: &str, from: &str, to: &str) -> Result<()> {
        self.inner.rename_thread(tenant, from, to).await
    }
    async fn tenants(&self) -> Result<Vec<String>> {
        self.inner.tenants().await
    }
    async fn load_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<Option<Vec<u8>>> {
        self.inner.load_checkpoint(tenant, thread, run_id).await
    }
    async fn save_checkpoint(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
        blob: Vec<u8>,
    ) -> Result<()> {
        self.inner
            .save_checkpoint(tenant, thread, run_id, blob)
            .await
    }
    fn attach_hub(&self, hub: Arc<Hub>) {
        self.inner.attach_hub(hub);
    }
    fn watch(&self, tenant: &str, thread: &str) {
        self.inner.watch(tenant, thread);
    }
    async fn claim_thread(&self, tenant: &str, thread: &str, run: &str) -> Result<Option<String>> {
        self.inner.claim_thread(tenant, thread, run).await
    }
    async fn release_thread(&self, tenant: &str, thread: &str, run: &str) -> Result<()> {
        self.hooks
            .release_thread(&*self.inner, tenant, thread, run)
            .await
    }
    async fn mark_interrupted(&self) -> Result<Vec<(String, RunRecord)>> {
        self.inner.mark_interrupted().await
    }
    async fn mark_interrupted_elsewhere(&self) -> Result<Vec<(String, RunRecord)>> {
        self.hooks.mark_interrupted_elsewhere(&*self.inner).await
    }
    fn shared(&self) -> bool {
        self.hooks.shared(&*self.inner)
    }
    async fn stats(&self) -> Result<StoreStats> {
        self.inner.stats().await
    }
    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }
    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
    async fn channels(&self, tenant: &str, thread: &str) -> Result<Vec<Channel>> {
        self.inner.channels(tenant, thread).await
    }
    async fn put_channel(&self, tenant: &str, thread: &str, channel: Channel) -> Result<()> {
        self.inner.put_channel(tenant, thread, channel).await
    }
    async fn checkpoint_chain(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<CheckpointChain> {
        self.hooks
            .checkpoint_chain(&*self.inner, tenant, thread, run_id)
            .await
    }
}
