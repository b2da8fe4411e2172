//! Small borrowed views of the few event fields lineage reads.

use std::borrow::Cow;

use agui_protocol::Event;
use agui_protocol::model::FromValue;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The largest magnitude a protocol `timestamp` may have (±(2^53−1)).
pub const MAX_TIMESTAMP: i64 = (1 << 53) - 1;

/// The identity fields of a `RUN_STARTED` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStart {
    /// `runId`.
    pub run_id: String,
    /// `threadId`.
    pub thread_id: String,
    /// `parentRunId`, when the event names one (`null` reads as absent).
    pub parent_run_id: Option<String>,
}

#[derive(Deserialize)]
struct RunStartedView<'a> {
    #[serde(rename = "threadId", borrow)]
    thread_id: Option<Cow<'a, str>>,
    #[serde(rename = "runId", borrow)]
    run_id: Option<Cow<'a, str>>,
    #[serde(rename = "parentRunId", default, borrow)]
    parent_run_id: Option<Cow<'a, str>>,
}

/// Reads `threadId`, `runId` and `parentRunId` from a `RUN_STARTED` event.
/// The error is a short reason (the caller adds where).
pub(crate) fn run_start(event: &Event) -> Result<RunStart, String> {
    let view: RunStartedView = event.view().map_err(|e| e.to_string())?;
    let run_id = view.run_id.ok_or("it has no \"runId\"")?;
    let thread_id = view.thread_id.ok_or("it has no \"threadId\"")?;
    Ok(RunStart {
        run_id: run_id.into_owned(),
        thread_id: thread_id.into_owned(),
        parent_run_id: view.parent_run_id.map(Cow::into_owned),
    })
}

#[derive(Deserialize)]
struct TimestampView<'a> {
    #[serde(default, borrow)]
    timestamp: Option<&'a RawValue>,
}

/// What an event's `timestamp` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timestamp {
    /// No `timestamp` key (or `null`).
    Absent,
    /// An integer within ±(2^53−1): epoch milliseconds by convention.
    Millis(i64),
    /// Present but not an integer in range.
    Invalid,
}

/// Reads an event's `timestamp`.
pub fn timestamp(event: &Event) -> Timestamp {
    let Ok(view) = event.view::<TimestampView>() else {
        return Timestamp::Invalid;
    };
    match view.timestamp {
        None => Timestamp::Absent,
        Some(raw) if raw.get() == "null" => Timestamp::Absent,
        // The protocol's rule: any spelling of an integer within ±(2^53−1)
        // (`1.7e12` and `1700000000000.0` included, as in JavaScript).
        Some(raw) => match serde_json::from_str(raw.get())
            .ok()
            .and_then(|v| agui_protocol::model::Timestamp::from_value(v).ok())
        {
            Some(t) => Timestamp::Millis(t.as_i64()),
            None => Timestamp::Invalid,
        },
    }
}

#[derive(Deserialize)]
struct OutcomeView<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct RunFinishedView<'a> {
    #[serde(default, borrow)]
    outcome: Option<OutcomeView<'a>>,
}

/// `RUN_FINISHED.outcome.type`, when it is a string.
pub(crate) fn outcome_type(event: &Event) -> Option<String> {
    let view: RunFinishedView = event.view().ok()?;
    view.outcome?.kind.map(Cow::into_owned)
}

/// The message ids an event creates through its own stream (not by restating
/// history): text, reasoning and activity message ids, tool results, and the
/// assistant message a tool call opens.
pub(crate) fn created_message_id(event: &Event) -> Option<String> {
    use agui_protocol::EventType as T;

    #[derive(Deserialize)]
    struct Ids<'a> {
        #[serde(rename = "messageId", default, borrow)]
        message_id: Option<Cow<'a, str>>,
        #[serde(rename = "toolCallId", default, borrow)]
        tool_call_id: Option<Cow<'a, str>>,
        #[serde(rename = "parentMessageId", default, borrow)]
        parent_message_id: Option<Cow<'a, str>>,
    }

    match event.event_type() {
        T::TextMessageStart
        | T::TextMessageChunk
        | T::ReasoningMessageStart
        | T::ReasoningMessageChunk
        | T::ToolCallResult
        | T::ActivitySnapshot => {
            let ids: Ids = event.view().ok()?;
            ids.message_id.map(Cow::into_owned)
        }
        T::ToolCallStart | T::ToolCallChunk => {
            let ids: Ids = event.view().ok()?;
            ids.parent_message_id
                .or(ids.tool_call_id)
                .map(Cow::into_owned)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(text: &str) -> Event {
        Event::from_json(text).unwrap()
    }

    #[test]
    fn reads_run_started_identity() {
        let s = run_start(&ev(
            r#"{"type":"RUN_STARTED","threadId":"t\"1","runId":"r1","parentRunId":null}"#,
        ))
        .unwrap();
        assert_eq!(s.thread_id, "t\"1");
        assert_eq!(s.run_id, "r1");
        assert_eq!(s.parent_run_id, None);
        let err = run_start(&ev(r#"{"type":"RUN_STARTED","threadId":"t"}"#)).unwrap_err();
        assert!(err.contains("runId"), "{err}");
        assert!(run_start(&ev(r#"{"type":"RUN_STARTED","threadId":"t","runId":7}"#)).is_err());
    }

    #[test]
    fn reads_timestamps() {
        assert_eq!(timestamp(&ev(r#"{"type":"X"}"#)), Timestamp::Absent);
        assert_eq!(
            timestamp(&ev(r#"{"type":"X","timestamp":1700000000123}"#)),
            Timestamp::Millis(1_700_000_000_123)
        );
        assert_eq!(
            timestamp(&ev(r#"{"type":"X","timestamp":1.5}"#)),
            Timestamp::Invalid
        );
        assert_eq!(
            timestamp(&ev(r#"{"type":"X","timestamp":"1"}"#)),
            Timestamp::Invalid
        );
        assert_eq!(
            timestamp(&ev(r#"{"type":"X","timestamp":9007199254740992}"#)),
            Timestamp::Invalid
        );
        // Other spellings of an integer are integers, as the protocol reads them.
        for spelled in ["1.7e12", "1700000000000.0", "17000000000000e-1"] {
            let text = format!(r#"{{"type":"X","timestamp":{spelled}}}"#);
            assert_eq!(
                timestamp(&ev(&text)),
                Timestamp::Millis(1_700_000_000_000),
                "{spelled}"
            );
        }
        assert_eq!(
            timestamp(&ev(r#"{"type":"X","timestamp":-9007199254740991}"#)),
            Timestamp::Millis(-MAX_TIMESTAMP)
        );
        assert_eq!(
            timestamp(&ev(r#"{"type":"X","timestamp":1e400}"#)),
            Timestamp::Invalid
        );
    }

    #[test]
    fn finds_created_ids() {
        let id = |t| created_message_id(&ev(t));
        assert_eq!(
            id(r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#).as_deref(),
            Some("m")
        );
        assert_eq!(
            id(r#"{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f"}"#).as_deref(),
            Some("c")
        );
        assert_eq!(
            id(r#"{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f","parentMessageId":"p"}"#)
                .as_deref(),
            Some("p")
        );
        assert_eq!(
            id(r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}"#),
            None
        );
    }
}
