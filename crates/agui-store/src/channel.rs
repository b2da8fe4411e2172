//! Channels: what a gateway keeps per agent and thread to continue that
//! agent (its session mode, the upstream thread ids per branch, the last run
//! it was sent). The store keeps a channel's state as an opaque JSON object
//! per `(tenant, thread, agent)`; the gateway and the session documents give
//! it meaning.

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::types::{Timestamp, check_id};

/// One agent's channel on one thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channel {
    /// The agent's name.
    pub agent: String,
    /// The channel's state: the JSON text of an object, opaque to the store.
    pub state: String,
    /// When the state was last written.
    pub updated_at: Timestamp,
}

impl Channel {
    /// A channel with the state's text as given and `updated_at` now.
    pub fn new(agent: impl Into<String>, state: impl Into<String>) -> Channel {
        Channel {
            agent: agent.into(),
            state: state.into(),
            updated_at: Timestamp::now(),
        }
    }

    /// Checks what every backend requires before storing a channel: a valid
    /// agent id and a state that is a JSON object.
    pub fn check(&self) -> Result<()> {
        check_id("agent", &self.agent)?;
        let first = self.state.bytes().find(|b| !b.is_ascii_whitespace());
        let parsed = serde_json::from_str::<&serde_json::value::RawValue>(&self.state);
        if first != Some(b'{') || parsed.is_err() {
            return Err(StoreError::invalid(format!(
                "the channel state of agent {:?} is not a JSON object",
                self.agent
            )));
        }
        Ok(())
    }
}
