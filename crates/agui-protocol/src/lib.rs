//! The AG-UI 1.0 wire model.
//!
//! - [`Event`]: the lossless envelope every other crate passes around.
//! - [`EventType`]: the `type` discriminator.
//! - [`model`]: typed structs for every event, message and run input, with
//!   strict and tolerant reading.
//! - [`verify`]: the sequence rules of the official client's `verifyEvents`.
//! - [`chunks`]: chunk expansion, as the official `transformChunks`.
//!
//! This crate does no I/O. Framing (JSON arrays, NDJSON, SSE) lives in
//! `agui-codec`.

mod event;
mod event_type;

pub mod chunks;
mod key;
pub mod model;
mod scan;
pub mod verify;

pub use event::{Checked, EnvelopeError, Event, EventCow, EventRef, MAX_DEPTH};
pub use event_type::EventType;
pub use key::ObjectKey;
pub use scan::Member;
pub use scan::{
    elements_of_valid, for_each_member, members_of_valid, objects_of_valid, value_end_of_valid,
};
