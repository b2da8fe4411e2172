//! Messages of the seven roles, and tool calls.

use serde_json::{Map, Value};

use super::content::Content;
use super::json::{json_enum, json_object, json_union};
use super::primitives::Metadata;

json_enum! {
    /// A tool call's `type`: only `"function"`.
    pub enum ToolCallType {
        /// `function`
        Function = "function",
    }
}

json_object! {
    /// A tool call's `function`: `{"name":...,"arguments":<JSON text>}`.
    pub struct FunctionCall {
        /// `name`.
        "name" => name: String = req,
        /// `arguments`: JSON text, possibly partial; not validated.
        "arguments" => arguments: String = req,
    }
}

json_object! {
    /// A tool call inside `assistant.toolCalls`.
    pub struct ToolCall {
        /// `id`.
        "id" => id: String = req,
        /// `type`: always `function`.
        "type" => call_type: ToolCallType = req,
        /// `function`.
        "function" => function: FunctionCall = req,
        /// `encryptedValue`.
        "encryptedValue" => encrypted_value: Option<String> = opt,
        /// `metadata`.
        "metadata" => metadata: Option<Metadata> = opt,
    }
}

json_object! {
    /// `{"role":"developer",...}`.
    tag "role" = "developer";
    pub struct DeveloperMessage {
        /// `id`.
        "id" => id: String = req,
        /// `content`.
        "content" => content: String = req,
        /// `name`.
        "name" => name: Option<String> = opt,
        /// `encryptedValue`.
        "encryptedValue" => encrypted_value: Option<String> = opt,
        /// `metadata`.
        "metadata" => metadata: Option<Metadata> = opt,
        /// `subagentRunId`: the subagent invocation that produced it.
        "subagentRunId" => subagent_run_id: Option<String> = opt,
    }
}

json_object! {
    /// `{"role":"system",...}`.
    tag "role" = "system";
    pub struct SystemMessage {
        /// `id`.
        "id" => id: String = req,
        /// `content`.
        "content" => content: String = req,
        /// `name`.
        "name" => name: Option<String> = opt,
        /// `encryptedValue`.
        "encryptedValue" => encrypted_value: Option<String> = opt,
        /// `metadata`.
        "metadata" => metadata: Option<Metadata> = opt,
        /// `subagentRunId`.
        "subagentRunId" => subagent_run_id: Option<String> = opt,
    }
}

json_object! {
    /// `{"role":"assistant",...}`.
    tag "role" = "assistant";
    pub struct AssistantMessage {
        /// `id`.
        "id" => id: String = req,
        /// `content` (optional for assistants).
        "content" => content: Option<String> = opt,
        /// `toolCalls`.
        "toolCalls" => tool_calls: Option<Vec<ToolCall>> = opt,
        /// `name`.
        "name" => name: Option<String> = opt,
        /// `encryptedValue`.
        "encryptedValue" => encrypted_value: Option<String> = opt,
        /// `metadata`.
        "metadata" => metadata: Option<Metadata> = opt,
        /// `subagentRunId`.
        "subagentRunId" => subagent_run_id: Option<String> = opt,
    }
}

json_object! {
    /// `{"role":"user",...}`.
    tag "role" = "user";
    pub struct UserMessage {
        /// `id`.
        "id" => id: String = req,
        /// `content`: a string or content parts.
        "content" => content: Content = req,
        /// `name`.
        "name" => name: Option<String> = opt,
        /// `encryptedValue`.
        "encryptedValue" => encrypted_value: Option<String> = opt,
        /// `metadata`.
        "metadata" => metadata: Option<Metadata> = opt,
        /// `subagentRunId`.
        "subagentRunId" => subagent_run_id: Option<String> = opt,
    }
}

json_object! {
    /// `{"role":"tool",...}`: a tool's answer to a tool call.
    tag "role" = "tool";
    pub struct ToolMessage {
        /// `id`.
        "id" => id: String = req,
        /// `content`: a string or content parts.
        "content" => content: Content = req,
        /// `toolCallId`: the call it answers.
        "toolCallId" => tool_call_id: String = req,
        /// `error`.
        "error" => error: Option<String> = opt,
        /// `encryptedValue`.
        "encryptedValue" => encrypted_value: Option<String> = opt,
        /// `metadata`.
        "metadata" => metadata: Option<Metadata> = opt,
        /// `subagentRunId`.
        "subagentRunId" => subagent_run_id: Option<String> = opt,
    }
}

json_object! {
    /// `{"role":"activity",...}`: a client-side activity message.
    tag "role" = "activity";
    pub struct ActivityMessage {
        /// `id`.
        "id" => id: String = req,
        /// `activityType` (open set, e.g. `PLAN`).
        "activityType" => activity_type: String = req,
        /// `content`: a JSON object.
        "content" => content: Map<String, Value> = req,
        /// `metadata`.
        "metadata" => metadata: Option<Metadata> = opt,
        /// `subagentRunId`.
        "subagentRunId" => subagent_run_id: Option<String> = opt,
    }
}

json_object! {
    /// `{"role":"reasoning",...}`.
    tag "role" = "reasoning";
    pub struct ReasoningMessage {
        /// `id`.
        "id" => id: String = req,
        /// `content`.
        "content" => content: String = req,
        /// `encryptedValue`.
        "encryptedValue" => encrypted_value: Option<String> = opt,
        /// `metadata`.
        "metadata" => metadata: Option<Metadata> = opt,
        /// `subagentRunId`.
        "subagentRunId" => subagent_run_id: Option<String> = opt,
    }
}

json_union! {
    /// A message, discriminated by `role`.
    tag "role";
    pub enum Message {
        /// `developer`
        Developer(DeveloperMessage) = "developer",
        /// `system`
        System(SystemMessage) = "system",
        /// `assistant`
        Assistant(AssistantMessage) = "assistant",
        /// `user`
        User(UserMessage) = "user",
        /// `tool`
        Tool(ToolMessage) = "tool",
        /// `activity`
        Activity(ActivityMessage) = "activity",
        /// `reasoning`
        Reasoning(ReasoningMessage) = "reasoning",
    }
}

json_enum! {
    /// The seven message roles.
    pub enum Role {
        /// `developer`
        Developer = "developer",
        /// `system`
        System = "system",
        /// `assistant`
        Assistant = "assistant",
        /// `user`
        User = "user",
        /// `tool`
        Tool = "tool",
        /// `activity`
        Activity = "activity",
        /// `reasoning`
        Reasoning = "reasoning",
    }
}

macro_rules! each_message {
    ($self:ident, $m:ident => $e:expr) => {
        match $self {
            Message::Developer($m) => $e,
            Message::System($m) => $e,
            Message::Assistant($m) => $e,
            Message::User($m) => $e,
            Message::Tool($m) => $e,
            Message::Activity($m) => $e,
            Message::Reasoning($m) => $e,
        }
    };
}

impl Message {
    /// The message's `id`.
    pub fn id(&self) -> &str {
        each_message!(self, m => &m.id)
    }

    /// The message's `role`.
    pub fn role(&self) -> Role {
        match self {
            Message::Developer(_) => Role::Developer,
            Message::System(_) => Role::System,
            Message::Assistant(_) => Role::Assistant,
            Message::User(_) => Role::User,
            Message::Tool(_) => Role::Tool,
            Message::Activity(_) => Role::Activity,
            Message::Reasoning(_) => Role::Reasoning,
        }
    }

    /// The message's `metadata`.
    pub fn metadata(&self) -> Option<&Metadata> {
        each_message!(self, m => m.metadata.as_ref())
    }

    /// The message's `subagentRunId`.
    pub fn subagent_run_id(&self) -> Option<&str> {
        each_message!(self, m => m.subagent_run_id.as_deref())
    }
}
