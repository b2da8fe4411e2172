//! Restoring a run's conversation through checkpoints (shared by every
//! backend through [`EventStore::restore`]).

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

/// See [`EventStore::restore`]. Walks up from the run to the nearest run
/// with a usable checkpoint (usually the run itself, one lookup), then
/// replays the runs below it, storing the checkpoints it rebuilds.
pub(crate) async fn restore<S: EventStore + ?Sized>(
    store: &S,
    tenant: &str,
    thread: &str,
    run_id: &str,
) -> Result<Restored> {
    let target = store.run(tenant, thread, run_id).await?;
    // Runs to replay, deepest first.
    let mut chain: Vec<RunRecord> = Vec::new();
    let mut cur = target.clone();
    let base = loop {
        if checkpointable(cur.status) {
            let blob = store.load_checkpoint(tenant, thread, &cur.run_id).await?;
            if let Some(c) = blob.and_then(|b| usable_checkpoint(&b, cur.last_seq)) {
                break Some(c);
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
            None => break None,
        }
    };
    let mut conversation = match base {
        Some(c) if chain.is_empty() => {
            return Ok(Restored {
                run_id: target.run_id,
                last_seq: target.last_seq,
                conversation: c,
                from_checkpoint: true,
                rebuilt: 0,
            });
        }
        Some(c) => c,
        None => {
            let mut reducer = Reducer::new(Conversation::default());
            for e in preamble(store, tenant, thread).await? {
                reducer.apply(&e.event).map_err(reduce_failed)?;
            }
            reducer.into_conversation()
        }
    };
    let mut rebuilt = 0;
    for run in chain.iter().rev() {
        let mut reducer = Reducer::new(conversation);
        for e in store
            .read_range(tenant, thread, run.first_seq, run.last_seq)
            .await?
        {
            reducer.apply(&e.event).map_err(reduce_failed)?;
        }
        conversation = reducer.into_conversation();
        if checkpointable(run.status) {
            let json = serde_json::to_string(&conversation).map_err(|e| {
                crate::StoreError::internal("a conversation cannot be serialized").with_source(e)
            })?;
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
    Ok(Restored {
        run_id: target.run_id,
        last_seq: target.last_seq,
        conversation,
        from_checkpoint: false,
        rebuilt,
    })
}
