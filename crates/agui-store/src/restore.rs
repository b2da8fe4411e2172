//! Restoring a run's conversation through checkpoints (shared by every
//! backend through [`EventStore::restore`]).

use agui_history::reduce::Reducer;

use crate::error::Result;
use crate::store::{Restored, checkpointable, reduce_failed, usable_checkpoint};
use crate::types::{RunFilter, StoredEvent};
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

/// See [`EventStore::restore`].
pub(crate) async fn restore<S: EventStore + ?Sized>(
    store: &S,
    tenant: &str,
    thread: &str,
    run_id: &str,
) -> Result<Restored> {
    let path = store.branch(tenant, thread, run_id).await?;
    // The deepest run of the branch with a usable checkpoint.
    let mut start: Option<(usize, Conversation)> = None;
    for (i, run) in path.iter().enumerate().rev() {
        if !checkpointable(run.status) {
            continue;
        }
        let blob = store.load_checkpoint(tenant, thread, &run.run_id).await?;
        if let Some(conversation) = blob.and_then(|b| usable_checkpoint(&b, run.last_seq)) {
            start = Some((i, conversation));
            break;
        }
    }
    let target = &path[path.len() - 1];
    let (from, mut conversation) = match start {
        Some((i, c)) if i + 1 == path.len() => {
            return Ok(Restored {
                run_id: target.run_id.clone(),
                last_seq: target.last_seq,
                conversation: c,
                from_checkpoint: true,
                rebuilt: 0,
            });
        }
        Some((i, c)) => (i + 1, c),
        None => {
            let mut reducer = Reducer::new(Conversation::default());
            for e in preamble(store, tenant, thread).await? {
                reducer
                    .apply(&e.event)
                    .map_err(|err| reduce_failed(&path[0].run_id, err))?;
            }
            (0, reducer.into_conversation())
        }
    };
    let mut rebuilt = 0;
    for run in &path[from..] {
        let mut reducer = Reducer::new(conversation);
        for e in store
            .read_range(tenant, thread, run.first_seq, run.last_seq)
            .await?
        {
            reducer
                .apply(&e.event)
                .map_err(|err| reduce_failed(&run.run_id, err))?;
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
        run_id: target.run_id.clone(),
        last_seq: target.last_seq,
        conversation,
        from_checkpoint: false,
        rebuilt,
    })
}
