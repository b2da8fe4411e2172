//! Test support for agui (a dev-dependency only).
//!
//! - [`oracle`]: runs the official TypeScript SDK (pinned in `oracle/`) on a
//!   batch of cases, so differential tests can compare with it.

pub mod oracle;
