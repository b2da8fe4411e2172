//! One module per subcommand.

pub mod compact;
pub mod convert;
pub mod export_artifact;
pub mod history;
pub mod reduce;
pub mod serve;
pub mod session;
pub mod store;
pub mod validate_artifact;
pub mod verify;
