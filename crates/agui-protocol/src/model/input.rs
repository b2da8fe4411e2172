//! The run input (`RunAgentInput`) and what it refers to: tools, context,
//! interrupts and resume entries; run outcomes and token usage.

use serde_json::{Map, Value};

use super::error::{SchemaError, SchemaErrorKind};
use super::json::{FromValue, json_enum, json_object, json_union};
use super::message::Message;
use super::primitives::{Metadata, TokenCount};

json_object! {
    /// A tool the agent may call.
    pub struct Tool {
        /// `name`.
        "name" => name: String = req,
        /// `description`.
        "description" => description: String = req,
        /// `parameters`: a JSON Schema; anything but a bare `null`.
        "parameters" => parameters: Option<Value> = opt_non_null,
        /// `metadata`.
        "metadata" => metadata: Option<Metadata> = opt,
    }
}

json_object! {
    /// A piece of context handed to the agent.
    pub struct Context {
        /// `description`.
        "description" => description: String = req,
        /// `value`.
        "value" => value: String = req,
    }
}

json_enum! {
    /// A resume entry's `status`.
    pub enum ResumeStatus {
        /// `resolved`
        Resolved = "resolved",
        /// `cancelled`
        Cancelled = "cancelled",
    }
}

json_object! {
    /// An answer to one open interrupt, in `RunAgentInput.resume`.
    pub struct ResumeEntry {
        /// `interruptId`.
        "interruptId" => interrupt_id: String = req,
        /// `status`.
        "status" => status: ResumeStatus = req,
        /// `payload`: anything but a bare `null`.
        "payload" => payload: Option<Value> = opt_non_null,
        /// `metadata`.
        "metadata" => metadata: Option<Metadata> = opt,
    }
}

json_object! {
    /// A reason the run paused, in a `RUN_FINISHED` interrupt outcome.
    pub struct Interrupt {
        /// `id`.
        "id" => id: String = req,
        /// `reason`: `tool_call`, `input_required`, `confirmation`, or a namespaced custom reason.
        "reason" => reason: String = req,
        /// `message`.
        "message" => message: Option<String> = opt,
        /// `toolCallId`.
        "toolCallId" => tool_call_id: Option<String> = opt,
        /// `responseSchema`: a JSON object.
        "responseSchema" => response_schema: Option<Map<String, Value>> = opt,
        /// `expiresAt`: ISO-8601 text.
        "expiresAt" => expires_at: Option<String> = opt,
        /// `metadata`.
        "metadata" => metadata: Option<Metadata> = opt,
        /// `subagentRunId`: the subagent that raised it.
        "subagentRunId" => subagent_run_id: Option<String> = opt,
    }
}

/// A non-empty list of interrupts.
#[derive(Debug, Clone, PartialEq)]
pub struct Interrupts(Vec<Interrupt>);

impl Interrupts {
    /// `None` when `list` is empty.
    pub fn new(list: Vec<Interrupt>) -> Option<Interrupts> {
        (!list.is_empty()).then_some(Interrupts(list))
    }

    /// The interrupts (at least one).
    pub fn as_slice(&self) -> &[Interrupt] {
        &self.0
    }

    /// The interrupts, mutably (the list cannot be emptied through this).
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Interrupt> {
        self.0.iter_mut()
    }

    /// The list.
    pub fn into_vec(self) -> Vec<Interrupt> {
        self.0
    }
}

impl FromValue for Interrupts {
    fn from_value(value: Value) -> Result<Self, SchemaError> {
        let list = Vec::<Interrupt>::from_value(value)?;
        Interrupts::new(list).ok_or(SchemaError::new(SchemaErrorKind::TooFew {
            min: 1,
            found: 0,
        }))
    }
}

impl serde::Serialize for Interrupts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

json_object! {
    /// `{"type":"success"}`: the run completed.
    tag "type" = "success";
    pub struct SuccessOutcome {
        /// `pendingToolCallIds`: calls started and not answered, in call order.
        "pendingToolCallIds" => pending_tool_call_ids: Option<Vec<String>> = opt,
    }
}

json_object! {
    /// `{"type":"interrupt","interrupts":[...]}`: the run paused for outside input.
    tag "type" = "interrupt";
    pub struct InterruptOutcome {
        /// `interrupts`: at least one.
        "interrupts" => interrupts: Interrupts = req,
    }
}

json_object! {
    /// `{"type":"cancelled"}`: the run was stopped without failing.
    tag "type" = "cancelled";
    pub struct CancelledOutcome {
    }
}

json_union! {
    /// `RUN_FINISHED.outcome`, discriminated by `type`. Absent means success.
    tag "type";
    pub enum RunOutcome {
        /// `success`
        Success(SuccessOutcome) = "success",
        /// `interrupt`
        Interrupt(InterruptOutcome) = "interrupt",
        /// `cancelled`
        Cancelled(CancelledOutcome) = "cancelled",
    }
}

json_object! {
    /// `{"type":"success"}`: the subagent completed.
    tag "type" = "success";
    pub struct SubagentSuccessOutcome {
    }
}

json_object! {
    /// `{"type":"suspended"}`: the subagent paused, waiting for outside input.
    tag "type" = "suspended";
    pub struct SubagentSuspendedOutcome {
        /// `interruptIds`: the run-level interrupts it raised itself.
        "interruptIds" => interrupt_ids: Option<Vec<String>> = opt,
    }
}

json_union! {
    /// `SUBAGENT_FINISHED.outcome`, discriminated by `type`.
    tag "type";
    pub enum SubagentOutcome {
        /// `success`
        Success(SubagentSuccessOutcome) = "success",
        /// `suspended`
        Suspended(SubagentSuspendedOutcome) = "suspended",
    }
}

json_object! {
    /// Token usage for one (provider, model).
    pub struct TokenUsage {
        /// `provider`.
        "provider" => provider: Option<String> = opt,
        /// `model`.
        "model" => model: Option<String> = opt,
        /// `inputTokens`.
        "inputTokens" => input_tokens: Option<TokenCount> = opt,
        /// `outputTokens`.
        "outputTokens" => output_tokens: Option<TokenCount> = opt,
        /// `totalTokens`.
        "totalTokens" => total_tokens: Option<TokenCount> = opt,
        /// `reasoningTokens`.
        "reasoningTokens" => reasoning_tokens: Option<TokenCount> = opt,
        /// `cachedInputTokens`.
        "cachedInputTokens" => cached_input_tokens: Option<TokenCount> = opt,
        /// `cacheWriteInputTokens`.
        "cacheWriteInputTokens" => cache_write_input_tokens: Option<TokenCount> = opt,
    }
}

json_object! {
    /// The body of a run request, also carried as `RUN_STARTED.input`.
    ///
    /// Read a request body with [`RunAgentInput::from_json`]; errors name the
    /// field path (`messages[1].content[0].source.mimeType: required field is missing`).
    pub struct RunAgentInput {
        /// `threadId`.
        "threadId" => thread_id: String = req,
        /// `runId`.
        "runId" => run_id: String = req,
        /// `protocolVersion`: the consumer's protocol version (e.g. `"1.0"`).
        "protocolVersion" => protocol_version: Option<String> = opt,
        /// `parentRunId`: branching lineage.
        "parentRunId" => parent_run_id: Option<String> = opt,
        /// `state`: any JSON. A bare `null` is accepted and kept as
        /// `Some(Value::Null)`; it means "no state" (see [`RunAgentInput::state`]).
        "state" => state: Option<Value> = opt,
        /// `messages`.
        "messages" => messages: Vec<Message> = req,
        /// `tools`: absent reads as `[]`.
        "tools" => tools: Option<Vec<Tool>> = opt,
        /// `context`: absent reads as `[]`.
        "context" => context: Option<Vec<Context>> = opt,
        /// `forwardedProps`: anything but a bare `null`.
        "forwardedProps" => forwarded_props: Option<Value> = opt_non_null,
        /// `resume`: answers to the previous run's open interrupts.
        "resume" => resume: Option<Vec<ResumeEntry>> = opt,
    }
}

/// Why a request body is not a `RunAgentInput`.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The body is not JSON.
    #[error("invalid JSON: {0}")]
    Syntax(#[source] serde_json::Error),
    /// The body is JSON but does not match the schema.
    #[error("{0}")]
    Schema(#[from] SchemaError),
}

impl RunAgentInput {
    /// Reads a request body. Unknown keys are kept at every depth.
    ///
    /// ```
    /// use agui_protocol::model::RunAgentInput;
    ///
    /// let body = r#"{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":"hi"}],"x":1}"#;
    /// let input = RunAgentInput::from_json(body).unwrap();
    /// assert_eq!(input.messages[0].id(), "u");
    /// assert_eq!(input.extra["x"], 1);
    ///
    /// let err = RunAgentInput::from_json(r#"{"threadId":"t","runId":"r","messages":[{"id":"u"}]}"#)
    ///     .unwrap_err();
    /// assert_eq!(err.to_string(), "messages[0].role: required field is missing");
    /// ```
    pub fn from_json(text: &str) -> Result<RunAgentInput, InputError> {
        let value: Value = serde_json::from_str(text).map_err(InputError::Syntax)?;
        Ok(RunAgentInput::from_value(value)?)
    }

    /// The state, reading an explicit `null` as "no state".
    pub fn state(&self) -> Option<&Value> {
        self.state.as_ref().filter(|v| !v.is_null())
    }

    /// The tools (absent reads as empty).
    pub fn tools(&self) -> &[Tool] {
        self.tools.as_deref().unwrap_or_default()
    }

    /// The context entries (absent reads as empty).
    pub fn context(&self) -> &[Context] {
        self.context.as_deref().unwrap_or_default()
    }
}
