//! Restoring a run's conversation through checkpoints (shared by every
//! backend through [`EventStore::restore`]).

use std::collections::HashMap;
use std::sync::Mutex;

use agui_history::reduce::Reducer;

use crate::error::Result;
use crate::store::{Restored, checkpointable, reduce_failed, usable_checkpoint};
use crate::types::{RunFilter, RunRecord, StoredEvent};
use crate::{Conversation, EventStore, checkpoint};

/// The thread's preamble: the events before its first `RUN_STARTED`.
pub(crate) async fn preamble<S: EventStore + ?Sized>(
    store: &S,
    tenant: &str,
    thread: &str,
) -> Result<Vec<StoredEvent>> {
    let first = store
        .list_runs(
            tenant,
            &RunFilter {
                thread_id: Some(thread.to_owned()),
                limit: 1,
                ..RunFilter::default()
            },
        )
        .await?;
    match first.runs.first() {
        Some(run) if run.first_seq > 1 => {
            store.read_range(tenant, thread, 1, run.first_seq - 1).await
        }
        Some(_) => Ok(Vec::new()),
        None => Ok(Vec::new()),
    }
}

/// The latest conversation built per thread (see
/// [`EventStore::conversation_cache`]), bounded in threads.
#[derive(Default)]
pub struct ConversationCache {
    entries: Mutex<HashMap<(String, String), Cached>>,
}

/// A cached conversation: run id, last sequence number, conversation.
type Cached = (String, u64, Conversation);

/// Threads a [`ConversationCache`] remembers at most.
const CACHED_THREADS: usize = 256;

impl ConversationCache {
    /// An empty cache.
    pub fn new() -> ConversationCache {
        ConversationCache::default()
    }

    fn take(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
        last_seq: u64,
    ) -> Option<Conversation> {
        let mut map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let key = (tenant.to_owned(), thread.to_owned());
        match map.get(&key) {
            Some((r, s, _)) if r == run_id && *s == last_seq => map.remove(&key).map(|e| e.2),
            _ => None,
        }
    }

    fn put(&self, tenant: &str, thread: &str, run_id: &str, last_seq: u64, c: Conversation) {
        let mut map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= CACHED_THREADS {
            map.clear();
        }
        map.insert(
            (tenant.to_owned(), thread.to_owned()),
            (run_id.to_owned(), last_seq, c),
        );
    }

    /// Forgets a thread (deleted).
    pub fn forget(&self, tenant: &str, thread: &str) {
        let mut map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&(tenant.to_owned(), thread.to_owned()));
    }
}

/// Where the replay starts.
enum Base {
    /// A checkpoint's text (parsed only if something must be replayed).
    Text(String),
    /// A conversation already in memory.
    Value(Conversation),
    /// Nothing: replay from the preamble.
    Empty,
}

/// The default [`EventStore::restore`], for backends that override it with a
/// fast path and fall back to this. Walks up from the run to the nearest run
/// with a usable checkpoint (usually the run itself: one lookup and no
/// parsing), then replays the runs below it, storing the checkpoints it
/// rebuilds.
pub async fn restore_run<S: EventStore + ?Sized>(
    store: &S,
    tenant: &str,
    thread: &str,
    run_id: &str,
) -> Result<Restored> {
    let target = store.run(tenant, thread, run_id).await?;
    let cache = store.conversation_cache();
    // Runs to replay, deepest first.
    let mut chain: Vec<RunRecord> = Vec::new();
    let mut cur = target.clone();
    let base = loop {
        if checkpointable(cur.status) {
            let cached = match cache {
                Some(c) if !chain.is_empty() => c.take(tenant, thread, &cur.run_id, cur.last_seq),
                _ => None,
            };
            if let Some(c) = cached {
                break Base::Value(c);
            }
            let blob = store.load_checkpoint(tenant, thread, &cur.run_id).await?;
            if let Some(json) = blob.and_then(|b| usable_checkpoint(&b, cur.last_seq)) {
                break Base::Text(json);
            }
        }
        let parent = match cur.parent_run_id.as_deref() {
            Some(p) => match store.run(tenant, thread, p).await {
                Ok(parent) if parent.first_seq < cur.first_seq => Some(parent),
                Ok(_) => None,
                Err(e) if e.kind() == crate::ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        chain.push(cur);
        match parent {
            Some(p) => cur = p,
            None => break Base::Empty,
        }
    };
    let mut conversation = match base {
        Base::Text(json) if chain.is_empty() => {
            return Ok(Restored {
                run_id: target.run_id,
                last_seq: target.last_seq,
                json,
                from_checkpoint: true,
                rebuilt: 0,
            });
        }
        Base::Text(json) => serde_json::from_str(&json).map_err(|e| {
            crate::StoreError::corrupt("a checkpoint is not a conversation").with_source(e)
        })?,
        Base::Value(c) => c,
        Base::Empty => {
            let mut reducer = Reducer::new(Conversation::default());
            for e in preamble(store, tenant, thread).await? {
                reducer.apply(&e.event).map_err(reduce_failed)?;
            }
            reducer.into_conversation()
        }
    };
    let mut rebuilt = 0;
    let mut json = String::new();
    for run in chain.iter().rev() {
        let mut reducer = Reducer::new(conversation);
        for e in store
            .read_range(tenant, thread, run.first_seq, run.last_seq)
            .await?
        {
            reducer.apply(&e.event).map_err(reduce_failed)?;
        }
        conversation = reducer.into_conversation();
        json = serde_json::to_string(&conversation).map_err(|e| {
            crate::StoreError::internal("a conversation cannot be serialized").with_source(e)
        })?;
        if checkpointable(run.status) {
            store
                .save_checkpoint(
                    tenant,
                    thread,
                    &run.run_id,
                    checkpoint::encode(&json, run.last_seq),
                )
                .await?;
            rebuilt += 1;
        }
    }
    if let Some(cache) = cache.filter(|_| checkpointable(target.status)) {
        cache.put(
            tenant,
            thread,
            &target.run_id,
            target.last_seq,
            conversation,
        );
    }
    Ok(Restored {
        run_id: target.run_id,
        last_seq: target.last_seq,
        json,
        from_checkpoint: false,
        rebuilt,
    })
}
