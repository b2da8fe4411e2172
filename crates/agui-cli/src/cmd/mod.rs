//! One module per subcommand.

pub mod convert;
pub mod verify;
