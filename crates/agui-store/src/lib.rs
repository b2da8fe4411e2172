//! The storage engine of agui: a persistent, tenant-scoped log of AG-UI
//! events per thread, with a run index, checkpoints and live subscriptions.
//!
//! - [`Store`]: the engine, one concrete type over any backend; what the
//!   server, the CLI and the Python package hold. It plans every batch,
//!   builds checkpoints off the append path, restores, and reads branches.
//! - [`Backend`]: the storage primitives every backend implements (object
//!   safe); it commits a planned [`Batch`] over the head it was planned
//!   against, or reports the head moved ([`Commit`]).
//! - [`StoreError`] / [`ErrorKind`]: the portable error every backend maps
//!   its native errors onto; `Display` never shows SQL, paths or secrets.
//! - [`index`]: how a batch changes the run index (the engine's planning;
//!   `RunTable` for backends that keep runs in memory).
//! - [`checkpoint`]: self-checking checkpoint blobs, full or delta.
//! - [`restore`]: building delta checkpoints at run end and restoring runs
//!   through them (the engine's).
//! - [`aside`]: where a run that cannot join its thread's log yet is
//!   written (concurrent branches).
//! - [`subscribe`]: catch-up-then-live subscriptions without gap or duplicate.
//! - [`channel`]: per-agent channel state of a thread.
//! - [`MemoryStore`]: the in-memory backend (`memory://`).
//! - [`migrate`]: copy threads between stores, resumably, with digests.
//! - [`bench`]: the store benchmark, for any backend.
//! - [`check`]: verify a whole store (checksums, run index, checkpoints).
//! - [`sample`]: realistic event sequences.
//! - `conformance` (feature `conformance`): the suite every backend runs, and
//!   the crash harness.
//!
//! Invariant: no SQL, no file layout. Event semantics come from
//! `agui-history`.

mod backend;
mod engine;
mod error;
mod types;

pub mod aside;
pub mod bench;
pub mod channel;
pub mod check;
pub mod checkpoint;
pub mod cursor;
pub mod frame;
pub mod index;
pub mod memory;
pub mod migrate;
pub mod sample;
pub mod subscribe;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use agui_history::reduce::Conversation;
pub use backend::{Backend, Batch, CheckpointChain, Commit, Notice};
pub use channel::Channel;
pub use engine::restore::{self, restore_run};
pub use engine::{Restored, Store};
pub use error::{ErrorKind, Result, SeqConflict, StoreError};
pub use memory::MemoryStore;
pub use subscribe::EventStream;
pub use types::{
    AppendRequest, Appended, Checkpoints, Durability, EventPage, MAX_ID_BYTES, MAX_PAGE, RunFilter,
    RunPage, RunRecord, RunStatus, StoreStats, StoredEvent, ThreadFilter, ThreadInfo, ThreadPage,
    Timestamp, check_id, page_size,
};
