//! `POST /v1/chat/completions`: the messages rendered into a prompt by the
//! model's chat template, then generated as a completion is. Tools,
//! functions, log probabilities, several choices and JSON mode are refused.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;

use super::error::ApiError;
use super::generate::{self, DEFAULT_MAX_TOKENS, Generation, SamplingParameters};
use super::models::{Use, resolve};
use super::schema::{
    AssistantMessage, ChatChoice, ChatMessage, ChatRequest, ChunkChoice, Content, Delta, Usage,
};
use super::stream::{self, Chunks};
use super::template::{ChatTemplate, TemplateMessage};
use super::{OpenAi, Reply, parse};

pub async fn create(State(state): State<OpenAi>, body: Bytes) -> Result<Response, ApiError> {
    let request: ChatRequest = parse(&body)?;
    let model = resolve(&state, &request.model, Use::Generate).await?;
    refuse_unsupported(&request)?;
    let messages = template_messages(&request.messages)?;
    let template = ChatTemplate::of_model(|file| {
        state
            .engine
            .model_file(&request.model, file)
            .map_err(|e| ApiError::engine(&e))
    })?;
    let generation = generation(&request, template.render(&messages)?);
    let answer = state.infer(generation.request(&model.config)?).await?;
    let reply = Reply::new("chatcmpl", request.model);
    if generation.stream {
        let include_usage = request
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        let steps = generate::steps(answer);
        return Ok(stream::respond(
            steps,
            ChatChunks(reply),
            generation,
            include_usage,
        ));
    }
    let (text, tally) = generate::collect(answer).await?;
    let usage = tally.usage();
    let choice = ChatChoice {
        index: 0,
        message: AssistantMessage {
            role: "assistant",
            content: text,
        },
        logprobs: None,
        finish_reason: generation.finish_reason(usage),
    };
    Ok(Json(reply.envelope("chat.completion", vec![choice], usage)).into_response())
}

fn generation(request: &ChatRequest, prompt: String) -> Generation {
    let max_tokens = request
        .max_completion_tokens
        .or(request.max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    Generation {
        prompt,
        stream: request.stream.unwrap_or(false),
        echo: false,
        max_tokens,
        stop: request
            .stop
            .as_ref()
            .map(|s| s.sequences())
            .unwrap_or_default(),
        sampling: SamplingParameters {
            frequency_penalty: request.frequency_penalty.unwrap_or(0.0),
            ignore_eos: request.ignore_eos.unwrap_or(false),
            min_tokens: request.min_tokens,
            n: request.n.unwrap_or(1),
            presence_penalty: request.presence_penalty.unwrap_or(0.0),
            seed: request.seed,
            stop: request.stop.clone(),
            // Triton's schema defaults a chat's temperature to 0.7.
            temperature: request.temperature.unwrap_or(0.7),
            top_p: request.top_p.unwrap_or(1.0),
            max_tokens,
        },
    }
}

fn refuse_unsupported(request: &ChatRequest) -> Result<(), ApiError> {
    if request.messages.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "messages must be non-empty",
        ));
    }
    if let Some(n) = request.n.filter(|n| *n > 1) {
        return Err(ApiError::invalid_param(
            "n",
            format!("Received n={n}, but only single choice (n=1) is currently supported"),
        ));
    }
    if request.logit_bias.is_some() {
        return Err(ApiError::invalid_param(
            "logit_bias",
            "logit bias is not currently supported",
        ));
    }
    if request.logprobs == Some(true) || request.top_logprobs.is_some() {
        return Err(ApiError::invalid_param(
            "logprobs",
            "logprobs are currently available only for the vLLM backend",
        ));
    }
    refuse_tools(request)?;
    if let Some(format) = &request.response_format {
        let kind = format.get("type").and_then(Value::as_str).unwrap_or("text");
        if kind != "text" {
            return Err(ApiError::invalid_param(
                "response_format",
                format!("response_format '{kind}' is not supported"),
            ));
        }
    }
    if request.stream_options.is_some() && !request.stream.unwrap_or(false) {
        return Err(ApiError::invalid_param(
            "stream_options",
            "`stream_options` can only be used when `stream` is True",
        ));
    }
    Ok(())
}

/// Tool calling needs a tool-call parser (Triton's `--tool-call-parser`),
/// which Nereid does not have: any tool or function is refused.
fn refuse_tools(request: &ChatRequest) -> Result<(), ApiError> {
    let none_chosen = |choice: &Value| choice.as_str() == Some("none");
    let tools = request.tools.as_ref().is_some_and(|t| !t.is_empty());
    let choice = request
        .tool_choice
        .as_ref()
        .is_some_and(|c| !none_chosen(c));
    let functions = request.functions.is_some()
        || request
            .function_call
            .as_ref()
            .is_some_and(|c| !none_chosen(c));
    if tools || choice {
        return Err(ApiError::invalid_param(
            "tools",
            "tool calling is not supported: this server has no tool-call parser",
        ));
    }
    if functions {
        return Err(ApiError::invalid_param(
            "functions",
            "function calling is not supported: this server has no tool-call parser",
        ));
    }
    Ok(())
}

/// The messages as a template sees them: text parts joined by newlines.
fn template_messages(messages: &[ChatMessage]) -> Result<Vec<TemplateMessage>, ApiError> {
    messages
        .iter()
        .map(|m| {
            Ok(TemplateMessage {
                role: m.role.clone(),
                content: text_content(m.content.as_ref())?,
                name: m.name.clone(),
                tool_calls: m.tool_calls.clone(),
                tool_call_id: m.tool_call_id.clone(),
            })
        })
        .collect()
}

fn text_content(content: Option<&Content>) -> Result<String, ApiError> {
    let parts = match content {
        None => return Ok(String::new()),
        Some(Content::Text(text)) => return Ok(text.clone()),
        Some(Content::Parts(parts)) => parts,
    };
    let texts = parts
        .iter()
        .map(|part| match (part.kind.as_str(), &part.text) {
            ("text", Some(text)) => Ok(text.as_str()),
            (kind, _) => Err(ApiError::invalid_param(
                "messages",
                format!("only text message is supported, but got {kind}"),
            )),
        });
    Ok(texts.collect::<Result<Vec<_>, _>>()?.join("\n"))
}

struct ChatChunks(Reply);

impl ChatChunks {
    fn chunk(&self, choices: Vec<ChunkChoice>, usage: Option<Usage>) -> String {
        let chunk = self.0.envelope("chat.completion.chunk", choices, usage);
        serde_json::to_string(&chunk).unwrap_or_default()
    }

    fn choice(
        role: Option<&'static str>,
        content: String,
        finish: Option<&'static str>,
    ) -> ChunkChoice {
        ChunkChoice {
            index: 0,
            delta: Delta { role, content },
            logprobs: None,
            finish_reason: finish,
        }
    }
}

impl Chunks for ChatChunks {
    /// The first chunk names the role, with no content yet.
    fn opening(&self) -> Option<String> {
        let choice = ChatChunks::choice(Some("assistant"), String::new(), None);
        Some(self.chunk(vec![choice], None))
    }

    fn piece(&self, text: String, finish: Option<&'static str>) -> String {
        self.chunk(vec![ChatChunks::choice(None, text, finish)], None)
    }

    fn usage(&self, usage: Usage) -> String {
        self.chunk(Vec::new(), Some(usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(extra: Value) -> ChatRequest {
        let mut body = serde_json::json!({
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
        });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(body).unwrap()
    }

    fn refused(extra: Value) -> String {
        refuse_unsupported(&request(extra)).unwrap_err().message
    }

    #[test]
    fn max_completion_tokens_comes_before_max_tokens() {
        let g = generation(&request(serde_json::json!({"max_tokens": 3})), "p".into());
        assert_eq!(g.max_tokens, 3);
        let both = serde_json::json!({"max_tokens": 3, "max_completion_tokens": 4});
        assert_eq!(generation(&request(both), "p".into()).max_tokens, 4);
        let g = generation(&request(serde_json::json!({})), "p".into());
        assert_eq!((g.max_tokens, g.sampling.temperature), (16, 0.7));
        assert!(!g.echo);
    }

    #[test]
    fn unsupported_features_are_refused() {
        assert!(refuse_unsupported(&request(serde_json::json!({}))).is_ok());
        assert!(refuse_unsupported(&request(serde_json::json!({"tool_choice": "none"}))).is_ok());
        assert_eq!(
            refused(serde_json::json!({"n": 3})),
            "Received n=3, but only single choice (n=1) is currently supported"
        );
        assert_eq!(
            refused(serde_json::json!({"logprobs": true})),
            "logprobs are currently available only for the vLLM backend"
        );
        let tool = serde_json::json!({"type": "function", "function": {"name": "f"}});
        assert!(refused(serde_json::json!({"tools": [tool]})).starts_with("tool calling"));
        assert!(
            refused(serde_json::json!({"response_format": {"type": "json_object"}}))
                .contains("json_object")
        );
        assert_eq!(
            refused(serde_json::json!({"stream_options": {"include_usage": true}})),
            "`stream_options` can only be used when `stream` is True"
        );
        assert_eq!(
            refused(serde_json::json!({"messages": []})),
            "messages must be non-empty"
        );
    }

    #[test]
    fn only_text_parts_are_read() {
        let parts = serde_json::json!([
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}
        ]);
        let content: Content = serde_json::from_value(parts).unwrap();
        assert_eq!(text_content(Some(&content)).unwrap(), "a\nb");
        let image = serde_json::json!([{"type": "image_url", "image_url": {"url": "x"}}]);
        let content: Content = serde_json::from_value(image).unwrap();
        assert_eq!(
            text_content(Some(&content)).unwrap_err().message,
            "only text message is supported, but got image_url"
        );
    }
}
