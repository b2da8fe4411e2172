//! The pure history core of agui.
//!
//! - [`reduce`]: events to `{messages, state}`, exactly as the official client.
//! - [`compact`]: fewer events with the same meaning (deltas, snapshot, latest).
//! - [`lineage`]: the run tree of a thread, branches and time travel.
//! - [`artifact`]: the compacted message snapshot artifact of one run.
//!
//! Invariant: no I/O, no async, no clock. Everything here is a function of
//! its inputs.

pub mod artifact;
pub mod compact;
pub mod lineage;
pub mod reduce;
