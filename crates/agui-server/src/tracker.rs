//! What a run has open (text messages, tool calls, reasoning), so the gateway
//! can end them before a `RUN_ERROR` it records itself.

use agui_protocol::{Event, EventType};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
struct Ids<'a> {
    #[serde(rename = "messageId", borrow, default)]
    message_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "toolCallId", borrow, default)]
    tool_call_id: Option<std::borrow::Cow<'a, str>>,
}

/// The open items of a run, in opening order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OpenItems {
    text: Vec<String>,
    tools: Vec<String>,
    reasoning_messages: Vec<String>,
    reasoning: Option<String>,
}

impl OpenItems {
    /// Updates with one event. Cheap for every event type that opens or
    /// closes nothing.
    pub fn track(&mut self, event: &Event) {
        let ty = event.event_type();
        let relevant = matches!(
            ty,
            EventType::TextMessageStart
                | EventType::TextMessageEnd
                | EventType::ToolCallStart
                | EventType::ToolCallEnd
                | EventType::ReasoningStart
                | EventType::ReasoningEnd
                | EventType::ReasoningMessageStart
                | EventType::ReasoningMessageEnd
        );
        if !relevant {
            return;
        }
        let Ok(ids) = event.view::<Ids>() else { return };
        let msg = ids.message_id.map(|c| c.into_owned());
        let tool = ids.tool_call_id.map(|c| c.into_owned());
        match ty {
            EventType::TextMessageStart => push(&mut self.text, msg),
            EventType::TextMessageEnd => remove(&mut self.text, msg),
            EventType::ToolCallStart => push(&mut self.tools, tool),
            EventType::ToolCallEnd => remove(&mut self.tools, tool),
            EventType::ReasoningMessageStart => push(&mut self.reasoning_messages, msg),
            EventType::ReasoningMessageEnd => remove(&mut self.reasoning_messages, msg),
            EventType::ReasoningStart => self.reasoning = Some(msg.unwrap_or_default()),
            EventType::ReasoningEnd => self.reasoning = None,
            _ => {}
        }
    }

    /// True when nothing is open.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
            && self.tools.is_empty()
            && self.reasoning_messages.is_empty()
            && self.reasoning.is_none()
    }

    /// The events that end everything open, innermost (latest) first.
    pub fn closers(&self) -> Vec<Event> {
        let mut out = Vec::new();
        let mut add = |v: serde_json::Value| {
            if let Ok(e) = Event::from_serialize(&v) {
                out.push(e);
            }
        };
        for id in self.tools.iter().rev() {
            add(json!({"type":"TOOL_CALL_END","toolCallId":id}));
        }
        for id in self.text.iter().rev() {
            add(json!({"type":"TEXT_MESSAGE_END","messageId":id}));
        }
        for id in self.reasoning_messages.iter().rev() {
            add(json!({"type":"REASONING_MESSAGE_END","messageId":id}));
        }
        if let Some(id) = &self.reasoning {
            add(json!({"type":"REASONING_END","messageId":id}));
        }
        out
    }
}

fn push(v: &mut Vec<String>, id: Option<String>) {
    if let Some(id) = id.filter(|id| !v.contains(id)) {
        v.push(id);
    }
}

fn remove(v: &mut Vec<String>, id: Option<String>) {
    if let Some(id) = id {
        v.retain(|x| *x != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(s: &str) -> Event {
        Event::from_json(s).unwrap()
    }

    #[test]
    fn closes_what_is_open_in_reverse_order() {
        let mut o = OpenItems::default();
        for s in [
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m1"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"x"}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m2"}"#,
            r#"{"type":"TEXT_MESSAGE_END","messageId":"m1"}"#,
            r#"{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"f"}"#,
            r#"{"type":"REASONING_START","messageId":"r"}"#,
            r#"{"type":"REASONING_MESSAGE_START","messageId":"rm","role":"reasoning"}"#,
        ] {
            o.track(&ev(s));
        }
        let closers: Vec<String> = o.closers().iter().map(|e| e.json().to_owned()).collect();
        assert_eq!(
            closers,
            vec![
                r#"{"type":"TOOL_CALL_END","toolCallId":"c1"}"#,
                r#"{"type":"TEXT_MESSAGE_END","messageId":"m2"}"#,
                r#"{"type":"REASONING_MESSAGE_END","messageId":"rm"}"#,
                r#"{"type":"REASONING_END","messageId":"r"}"#,
            ]
        );
        o.track(&ev(r#"{"type":"TOOL_CALL_END","toolCallId":"c1"}"#));
        o.track(&ev(r#"{"type":"TEXT_MESSAGE_END","messageId":"m2"}"#));
        o.track(&ev(r#"{"type":"REASONING_MESSAGE_END","messageId":"rm"}"#));
        o.track(&ev(r#"{"type":"REASONING_END","messageId":"r"}"#));
        assert!(o.is_empty());
        assert!(o.closers().is_empty());
    }
}
