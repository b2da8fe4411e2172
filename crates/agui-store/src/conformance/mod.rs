//! The conformance suite every backend runs (feature `conformance`).
//!
//! A backend implements [`Harness`] (how to open its store under test, on a
//! fresh database or schema) and expands [`conformance_tests!`] in one of its
//! integration tests. Every case runs against the engine over it,
//! `Store::new(backend)`:
//!
//! ```ignore
//! struct Sqlite(tempfile::TempDir);
//! #[async_trait::async_trait]
//! impl agui_store::conformance::Harness for Sqlite { /* ... */ }
//! agui_store::conformance_tests!(async { Sqlite(tempfile::tempdir().unwrap()) });
//! ```
//!
//! Every case is a public `async fn(&B)` so it can also be called alone. Each
//! test gets its own backend value (own database), so tests run in parallel.
//! Cases panic (assert) on a contract violation.
//!
//! [`crash`] is the crash harness (SIGKILL a child process that appends, then
//! check every durable append is there, once and intact).

mod cases;
pub mod crash;
pub mod hooked;
pub use crate::sample as events;

pub use cases::*;

use async_trait::async_trait;

use crate::{Backend as _, Result};

/// The text of `err` and of each of its causes, as the CLI prints them with
/// `AGUI_DEBUG=1`: what a test of a backend's error messages checks, so no
/// cause shows SQL text or a database server's own words.
pub fn error_texts(err: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut all = vec![err.to_string()];
    let mut cause = err.source();
    while let Some(c) = cause {
        all.push(c.to_string());
        cause = c.source();
    }
    all
}

/// How the suite opens a backend's store under test.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The backend type.
    type Store: crate::Backend + 'static;

    /// Opens the backend under test. Every call opens the same database: a
    /// call after [`crate::Backend::close`] is a reopen and must see
    /// everything acknowledged before.
    async fn open(&self) -> Result<Self::Store>;

    /// Removes a run's checkpoint below the API (the suite checks restore
    /// rebuilds it).
    async fn remove_checkpoint(
        &self,
        store: &Self::Store,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<()>;

    /// Damages a run's checkpoint. The default flips one byte of the blob
    /// through the API; a backend may override it to damage its storage.
    async fn damage_checkpoint(
        &self,
        store: &Self::Store,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<()> {
        let mut blob = store
            .load_checkpoint(tenant, thread, run_id)
            .await?
            .ok_or_else(|| crate::StoreError::not_found("checkpoint"))?;
        let mid = blob.len() / 2;
        if let Some(b) = blob.get_mut(mid) {
            *b ^= 0x5a;
        }
        store.save_checkpoint(tenant, thread, run_id, blob).await
    }
}

/// Expands to one `#[tokio::test]` per conformance case. `$make` is an
/// expression evaluating to a future that yields a fresh [`Harness`].
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@cases $make;
            ordering_and_sequence_numbers,
            events_are_kept_losslessly,
            optimistic_concurrency_under_eight_appenders,
            a_commit_over_a_moved_head_writes_nothing,
            ready_while_open_and_not_after_close,
            concurrent_appenders_never_interleave_a_batch,
            reads_page_and_stream,
            threads_page_by_cursor_and_filter_by_agent,
            run_index_and_statuses,
            an_unknown_parent_run_is_refused,
            runs_page_by_cursor_and_filter,
            subscription_catch_up_then_live,
            many_subscribers_see_everything_once,
            subscription_before_the_thread_exists_and_after_delete,
            checkpoints_are_used,
            repeated_restores_share_the_text,
            checkpoints_are_rebuilt_when_missing_or_damaged,
            delta_checkpoints_restore_every_run_of_a_branchy_thread,
            damaged_or_missing_delta_bases_are_rebuilt,
            deferred_checkpoints_are_built_by_the_first_restore,
            branches_read_and_restore_their_own_lineage,
            a_message_restated_from_another_branch_does_not_leak_into_this_one,
            tenants_are_isolated,
            delete_removes_everything,
            rename_moves_everything,
            a_ten_megabyte_event,
            hostile_ids_round_trip,
            reopen_reads_everything_back,
            channels_are_kept_per_thread_and_agent,
        );
    };
    (@cases $make:expr; $($case:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let backend = $make.await;
                $crate::conformance::$case(&backend).await;
            }
        )*
    };
}
