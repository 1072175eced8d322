//! The chat completion as sent and read: messages, the request body, the parts of a reply we
//! read, async-openai's errors mapped onto ours, and the prompt tokens a request is estimated at.

use super::transport::HttpFailure;
use super::{CachedReply, ConnectKind, LlmError};
use async_openai::error::OpenAIError;
use serde::{Deserialize, Serialize};

/// Who speaks in a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The instructions.
    System,
    /// The request.
    User,
    /// The model's earlier reply (before a re-ask).
    Assistant,
}

/// A chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message with this role.
    #[must_use]
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self { role, content: content.into() }
    }
}

/// The request body we send (async-openai's "bring your own types" path).
#[derive(Debug, Serialize)]
pub(super) struct ChatRequest<'a> {
    pub(super) model: &'a str,
    pub(super) messages: &'a [Message],
    pub(super) temperature: f32,
    /// `max_tokens`, not `max_completion_tokens`: local servers ignore the latter.
    pub(super) max_tokens: u32,
    pub(super) seed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) response_format: Option<&'a serde_json::Value>,
    pub(super) stream: bool,
}

/// The parts of a chat completion we read; everything else may be missing.
#[derive(Debug, Deserialize)]
pub(super) struct ChatResponse {
    #[serde(default)]
    pub(super) choices: Vec<Choice>,
    #[serde(default)]
    pub(super) usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Choice {
    pub(super) message: ChoiceMessage,
    #[serde(default)]
    pub(super) finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ChoiceMessage {
    #[serde(default)]
    pub(super) content: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Usage {
    #[serde(default)]
    pub(super) prompt_tokens: u64,
    #[serde(default)]
    pub(super) completion_tokens: u64,
}

/// Which failures a call retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RetryOn {
    /// 429, 5xx, connection errors and timeouts.
    Transient,
    /// The same, but an error answer that names the response format is final.
    Probe,
}

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The message content.
    pub content: String,
    /// Cut off by `max_tokens` (`finish_reason: length`).
    pub truncated: bool,
}

/// The reply of a chat completion.
pub(super) fn reply_from(response: ChatResponse) -> Result<CachedReply, LlmError> {
    let usage = response.usage.unwrap_or_default();
    let choice = response.choices.into_iter().next().ok_or_else(|| LlmError::Body("no choices".into()))?;
    Ok(CachedReply {
        content: choice.message.content.unwrap_or_default(),
        finish_reason: choice.finish_reason,
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        abandoned: 0,
    })
}

/// The reply of a chat completion given as JSON (a batch result's body).
pub(super) fn reply_of(body: serde_json::Value) -> Result<CachedReply, LlmError> {
    let response: ChatResponse = serde_json::from_value(body).map_err(|e| LlmError::Body(e.to_string()))?;
    reply_from(response)
}

pub(super) fn completion(reply: &CachedReply) -> Completion {
    Completion { content: reply.content.clone(), truncated: reply.finish_reason.as_deref() == Some("length") }
}

/// Maps async-openai's error onto ours (`loopback`: the endpoint is on this machine).
pub(super) fn classify(error: OpenAIError, loopback: bool) -> LlmError {
    match error {
        OpenAIError::Boxed(boxed) => match boxed.downcast::<HttpFailure>() {
            Ok(failure) => LlmError::Http {
                status: failure.status,
                message: failure.message,
                retry_after: failure.retry_after,
            },
            Err(other) => {
                let kind = ConnectKind::of(other.as_ref(), loopback);
                LlmError::Connect { kind, source: std::sync::Arc::from(other) }
            }
        },
        OpenAIError::Reqwest(e) => LlmError::connect(e, loopback),
        OpenAIError::ApiError(e) => {
            LlmError::Http { status: e.status_code.as_u16(), message: e.api_error.message, retry_after: None }
        }
        OpenAIError::JSONDeserialize(e, _) => LlmError::Body(e.to_string()),
        other => LlmError::Body(other.to_string()),
    }
}

/// Loads the tables [`estimate_tokens`] counts with, once per process (some 50 ms of work that
/// the first call to it would otherwise wait for).
pub fn load_token_counter() {
    tiktoken_rs::cl100k_base_singleton();
}

/// Prompt tokens of a request, as cl100k counts them: the messages, a few per message, and the
/// `response_format` (servers count a JSON schema as prompt).
#[must_use]
pub fn estimate_tokens(messages: &[Message], response_format: Option<&serde_json::Value>) -> u32 {
    let bpe = tiktoken_rs::cl100k_base_singleton();
    let text: usize = messages.iter().map(|m| bpe.encode_ordinary(&m.content).len() + 4).sum();
    let format = response_format.map_or(0, |f| bpe.encode_ordinary(&f.to_string()).len());
    u32::try_from(text + format).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_format_counts_as_prompt() {
        let messages = [Message::new(Role::User, "Reply with JSON.")];
        let schema = serde_json::json!({"type": "json_schema", "json_schema": {"name": "queries", "schema": {
            "type": "object", "properties": {"queries": {"type": "array", "items": {"type": "string"}}}}}});
        let bare = estimate_tokens(&messages, None);
        assert_eq!(bare, 4 + 4, "four tokens of text, four per message");
        assert!(estimate_tokens(&messages, Some(&schema)) > bare + 20);
    }

    #[test]
    fn roles_are_written_as_the_chat_api_names_them() {
        let messages = [Message::new(Role::System, "s"), Message::new(Role::Assistant, "a")];
        assert_eq!(
            serde_json::to_string(&messages).unwrap(),
            r#"[{"role":"system","content":"s"},{"role":"assistant","content":"a"}]"#
        );
    }
}
