//! The records of a session document and the checksum over them.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

/// The format this crate writes, and the only one it reads today.
pub const FORMAT: &str = "agui.session.v1";

/// Every format this crate reads (the versioning policy: each later version
/// keeps reading all earlier ones).
pub const READABLE_FORMATS: &[&str] = &[FORMAT];

/// The AG-UI protocol version of the events agui stores.
pub const PROTOCOL: &str = "1.0";

/// How the document holds the events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EventsMode {
    /// Every event exactly as stored.
    #[default]
    Lossless,
}

/// Record 1.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Header {
    /// `"header"`.
    pub kind: String,
    /// `agui.session.v1`.
    pub format: String,
    /// The AG-UI protocol version of the events.
    pub protocol: String,
    /// The exported thread's id.
    pub thread_id: String,
    /// How the events are held.
    pub events: EventsMode,
    /// Agent names: every agent of a run or a channel, sorted.
    pub participants: Vec<String>,
}

/// One run of the thread, in the order of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunRec {
    /// `"run"`.
    pub kind: String,
    /// `RUN_STARTED.runId`.
    pub run_id: String,
    /// The parent run (explicit or, when absent, the run before it).
    pub parent_run_id: Option<String>,
    /// The agent the run was sent to.
    pub agent: Option<String>,
    /// `running`, `finished`, `error` or `interrupted`.
    pub status: String,
    /// Receive time of `RUN_STARTED`, µs since the Unix epoch.
    pub started_at: i64,
    /// Receive time of the run's end, µs.
    pub finished_at: Option<i64>,
    /// Sequence number of `RUN_STARTED`.
    pub first_seq: u64,
    /// Sequence number of the run's last event.
    pub last_seq: u64,
}

/// One event, exactly as stored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventRec<'a> {
    /// `"event"`.
    #[allow(dead_code)]
    pub kind: &'a str,
    /// Position in the thread, from 1.
    pub seq: u64,
    /// Receive time, µs.
    pub received_at: i64,
    /// The event's JSON.
    #[serde(borrow)]
    pub event: &'a RawValue,
}

/// One agent's channel.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChannelRec<'a> {
    /// `"channel"`.
    #[allow(dead_code)]
    pub kind: &'a str,
    /// The agent.
    pub agent: String,
    /// When the channel was last written, µs.
    pub updated_at: i64,
    /// The channel's state (a JSON object).
    #[serde(borrow)]
    pub state: &'a RawValue,
}

/// The last record.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndRec {
    /// `"end"`.
    pub kind: String,
    /// How many records come before this one.
    pub records: u64,
    /// Lower-case hex SHA-256 over those records (see [`Checksum`]).
    pub sha256: String,
}

/// Only the kind of a record, read first.
#[derive(Deserialize)]
pub(crate) struct KindOnly<'a> {
    #[serde(borrow)]
    pub kind: Option<std::borrow::Cow<'a, str>>,
}

/// The SHA-256 of a document's content: every record before the end record,
/// each as its JSON text with the whitespace outside strings removed and
/// followed by one `\n`. Reformatting a document (pretty-printing, NDJSON to
/// JSON) keeps it; changing any value, key, record or their order does not.
#[derive(Default, Clone)]
pub struct Checksum {
    hasher: Sha256,
    records: u64,
}

impl Checksum {
    /// Adds one record's text.
    pub fn record(&mut self, text: &str) {
        let bytes = text.as_bytes();
        let mut in_string = false;
        let mut escaped = false;
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
            } else if b == b'"' {
                in_string = true;
            } else if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.hasher.update(&bytes[start..i]);
                start = i + 1;
            }
        }
        self.hasher.update(&bytes[start..]);
        self.hasher.update(b"\n");
        self.records += 1;
    }

    /// Records added so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The hex digest so far.
    pub fn hex(&self) -> String {
        hex::encode(self.hasher.clone().finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_ignores_whitespace_outside_strings_only() {
        let mut a = Checksum::default();
        a.record(r#"{"a":"x y","b":[1,2]}"#);
        let mut b = Checksum::default();
        b.record("{ \"a\" : \"x y\",\n  \"b\": [1, 2] }");
        assert_eq!(a.hex(), b.hex());
        let mut c = Checksum::default();
        c.record(r#"{"a":"xy","b":[1,2]}"#);
        assert_ne!(a.hex(), c.hex());
        let mut d = Checksum::default();
        d.record(r#"{"a":"x\" y","b":[1,2]}"#);
        let mut e = Checksum::default();
        e.record(r#"{"a":"x\"y","b":[1,2]}"#);
        assert_ne!(d.hex(), e.hex());
    }
}
