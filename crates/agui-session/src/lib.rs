//! Session documents (`agui.session.v1`): a thread exported whole (its
//! events exactly as stored, its run tree with agents, statuses and times,
//! and every agent's channel state), checked by a SHA-256 over its content,
//! and imported into any store with explicit restore cases (equivalent,
//! enhanced, reduced, empty, invalid). See `docs/sessions.md`.
//!
//! - [`export()`]: a thread as a stream of document bytes (JSON or NDJSON).
//! - [`read()`]: one streaming pass that checks a document record by record.
//! - [`import()`]: check, decide the case, write; a failed import changes
//!   nothing.
//!
//! Never in a document: upstream URLs, headers, tokens, tenant names or
//! anything of a gateway's configuration.

mod error;
mod export;
mod import;
mod read;
mod record;

pub use error::{Damage, SessionError};
pub use export::{ExportOptions, Layout, export};
pub use import::{
    ImportOptions, ImportReport, RestoreCase, STAGING_PREFIX, Source, import, restore_case,
    validate,
};
pub use read::{Item, Summary, read};
pub use record::{Checksum, FORMAT, PROTOCOL, READABLE_FORMATS, RunRec};
