//! Test support for agui (a dev-dependency only).
//!
//! - [`gen`]: seeded generators of realistic and invalid AG-UI event streams.
//! - [`oracle`]: runs the official TypeScript SDK (pinned in `oracle/`) on a
//!   batch of cases, so differential tests can compare with it.
//! - [`texts`]: proptest strategies for JSON texts that exercise member
//!   walks.

pub mod r#gen;
pub mod oracle;
pub mod texts;

// `gen` is a reserved word in edition 2024, so callers write
// `agui_testkit::r#gen::...`; the main entry points are also re-exported here.
pub use r#gen::{
    Mutation, Profile, chunk_soup, invalid_stream, invalid_stream_with, realistic, stream,
};
