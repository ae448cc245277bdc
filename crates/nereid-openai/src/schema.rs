//! The OpenAI request and response bodies this frontend reads and writes,
//! with the fields Triton's OpenAI frontend knows. Unknown request fields
//! are refused, as Triton's schema refuses them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `stop`: one sequence or several.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn sequences(&self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s.clone()],
            Stop::Many(all) => all.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// A completion's `prompt`: text, texts, tokens or token lists.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<i64>),
    TokenLists(Vec<Vec<i64>>),
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Prompt,
    pub best_of: Option<u32>,
    pub echo: Option<bool>,
    pub frequency_penalty: Option<f64>,
    pub ignore_eos: Option<bool>,
    pub logit_bias: Option<Map<String, Value>>,
    pub logprobs: Option<u32>,
    pub max_tokens: Option<u32>,
    pub min_tokens: Option<u32>,
    pub n: Option<u32>,
    pub presence_penalty: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub suffix: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    #[expect(
        dead_code,
        reason = "accepted and ignored, as Triton's frontend ignores it"
    )]
    pub user: Option<String>,
}

/// A chat message's `content`: text, or a list of parts.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Value>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub frequency_penalty: Option<f64>,
    pub ignore_eos: Option<bool>,
    pub logit_bias: Option<Map<String, Value>>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u32>,
    pub max_completion_tokens: Option<u32>,
    pub max_tokens: Option<u32>,
    pub min_tokens: Option<u32>,
    pub n: Option<u32>,
    pub presence_penalty: Option<f64>,
    pub response_format: Option<Value>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    #[expect(
        dead_code,
        reason = "accepted and ignored, as Triton's frontend ignores it"
    )]
    pub parallel_tool_calls: Option<bool>,
    #[expect(
        dead_code,
        reason = "accepted and ignored, as Triton's frontend ignores it"
    )]
    pub user: Option<String>,
    pub function_call: Option<Value>,
    pub functions: Option<Vec<Value>>,
}

/// An embeddings `input`: text, texts, tokens or token lists.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<i64>),
    TokenLists(Vec<Vec<i64>>),
}

/// `POST /v1/embeddings`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingRequest {
    pub model: String,
    pub input: EmbeddingInput,
    pub dimensions: Option<u32>,
    pub encoding_format: Option<String>,
    #[expect(
        dead_code,
        reason = "accepted and ignored, as Triton's frontend ignores it"
    )]
    pub user: Option<String>,
}

/// Token counts, when the model reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// An embeddings response's counts (no completion).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EmbeddingUsage {
    pub prompt_tokens: u64,
    pub total_tokens: u64,
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
}

#[derive(Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Serialize)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<Value>,
    pub finish_reason: Option<&'static str>,
}

/// A completion, a chat completion, or one chunk of either streamed: the
/// same envelope around choices of its kind, which `object` names.
#[derive(Debug, Serialize)]
pub struct Completion<C> {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<C>,
    pub system_fingerprint: Option<String>,
    pub usage: Option<Usage>,
}

#[derive(Debug, Serialize)]
pub struct AssistantMessage {
    pub role: &'static str,
    pub content: String,
}

#[derive(Debug, Serialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub logprobs: Option<Value>,
    pub finish_reason: &'static str,
}

#[derive(Debug, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    pub content: String,
}

#[derive(Debug, Serialize)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub logprobs: Option<Value>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Serialize)]
pub struct Embedding {
    pub object: &'static str,
    pub embedding: Value,
    pub index: usize,
}

#[derive(Debug, Serialize)]
pub struct EmbeddingList {
    pub object: &'static str,
    pub data: Vec<Embedding>,
    pub model: String,
    pub usage: Option<EmbeddingUsage>,
}
