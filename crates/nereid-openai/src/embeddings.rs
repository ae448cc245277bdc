//! `POST /v1/embeddings`, mapped as Triton's frontend maps it onto vLLM's
//! backend: one model request per input, its input `embedding_request`
//! holding `{"input": <text or token ids>, "pooling_params": {...}}` as
//! JSON, its output `text_output` holding the embedding as a JSON list of
//! numbers, and `num_input_tokens` for `usage`. A list of inputs is sent
//! as that many requests, [`IN_FLIGHT`] at a time (a long list must not
//! fill the model's bounded queue); the answer keeps their order.

use axum::Json;
use axum::extract::State;
use base64::Engine as _;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use nereid_core::model_config::ModelConfig;
use serde_json::{Value, json};

use super::error::ApiError;
use super::generate;
use super::models::{Use, resolve};
use super::schema::{Embedding, EmbeddingInput, EmbeddingList, EmbeddingRequest, EmbeddingUsage};
use super::tensors::{self, Value as Input};
use super::{OpenAi, parse};

/// The most inputs one request may hold (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// How many of one request's inputs are at the model at once.
pub const IN_FLIGHT: usize = 32;

pub async fn create(
    State(state): State<OpenAi>,
    body: Bytes,
) -> Result<Json<EmbeddingList>, ApiError> {
    let request: EmbeddingRequest = parse(&body)?;
    let model = resolve(&state, &request.model, Use::Embed).await?;
    let base64 = match request.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "encoding_format",
                format!("encoding_format must be 'float' or 'base64', not '{other}'"),
            ));
        }
    };
    let items = items(request.input)?;
    let pooling = match request.dimensions {
        Some(d) => json!({ "dimensions": [d] }),
        None => json!({}),
    };
    let answers: Vec<_> = futures::stream::iter(items)
        .map(|item| {
            let request = json!({"input": item, "pooling_params": pooling});
            embed(&state, &model.config, request)
        })
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    let prompt_tokens: Option<u64> = answers.iter().map(|(_, tokens)| *tokens).sum();
    let data = answers
        .into_iter()
        .enumerate()
        .map(|(index, (vector, _))| Embedding {
            object: "embedding",
            embedding: encode(&vector, base64),
            index,
        })
        .collect();
    Ok(Json(EmbeddingList {
        object: "list",
        data,
        model: request.model,
        usage: prompt_tokens.map(|prompt_tokens| EmbeddingUsage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        }),
    }))
}

/// Each input to embed, as the JSON `input` of its model request.
fn items(input: EmbeddingInput) -> Result<Vec<Value>, ApiError> {
    let items: Vec<Value> = match input {
        EmbeddingInput::Text(text) => vec![Value::String(text)],
        EmbeddingInput::Texts(texts) => texts.into_iter().map(Value::String).collect(),
        EmbeddingInput::Tokens(tokens) => vec![json!(tokens)],
        EmbeddingInput::TokenLists(lists) => lists.into_iter().map(|t| json!(t)).collect(),
    };
    let empty = |item: &Value| match item {
        Value::String(text) => text.is_empty(),
        Value::Array(tokens) => tokens.is_empty(),
        _ => false,
    };
    if items.is_empty() || items.iter().any(empty) {
        return Err(ApiError::invalid_param("input", "input must be non-empty"));
    }
    if items.len() > MAX_INPUTS {
        return Err(ApiError::invalid_param(
            "input",
            format!(
                "input holds {} items; at most {MAX_INPUTS} are allowed",
                items.len()
            ),
        ));
    }
    Ok(items)
}

/// One embedding and the prompt's token count, if the model tells it.
async fn embed(
    state: &OpenAi,
    config: &ModelConfig,
    embedding_request: Value,
) -> Result<(Vec<f32>, Option<u64>), ApiError> {
    let request = tensors::request(config, |name| match name {
        "embedding_request" => Some(Input::Texts(vec![embedding_request.to_string()])),
        "return_num_input_tokens" | "return_num_output_tokens" => Some(Input::Bool(true)),
        _ => None,
    })?;
    let answer = state.infer(request).await?;
    let (text, tally) = generate::collect(answer).await?;
    let vector: Vec<f32> = serde_json::from_str(&text).map_err(|e| {
        ApiError::server(format!(
            "model '{}' answered a text_output that is not a JSON list of numbers: {e}",
            config.name
        ))
    })?;
    Ok((vector, tally.usage().map(|u| u.prompt_tokens)))
}

/// A list of numbers, or base64 of their little-endian float32 bytes (as
/// OpenAI's clients decode it).
fn encode(vector: &[f32], base64: bool) -> Value {
    if !base64 {
        return json!(vector);
    }
    let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(value: Value) -> EmbeddingInput {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn inputs_become_one_request_each() {
        assert_eq!(items(input(json!("a"))).unwrap(), [json!("a")]);
        assert_eq!(
            items(input(json!(["a", "b"]))).unwrap(),
            [json!("a"), json!("b")]
        );
        assert_eq!(items(input(json!([1, 2]))).unwrap(), [json!([1, 2])]);
        assert_eq!(
            items(input(json!([[1], [2, 3]]))).unwrap(),
            [json!([1]), json!([2, 3])]
        );
        for empty in [json!(""), json!([]), json!(["a", ""])] {
            assert_eq!(
                items(input(empty)).unwrap_err().message,
                "input must be non-empty"
            );
        }
    }

    #[test]
    fn base64_is_little_endian_float32() {
        assert_eq!(encode(&[1.0, -2.5], false), json!([1.0, -2.5]));
        let Value::String(b64) = encode(&[1.0], true) else {
            panic!("not a string");
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(bytes, 1.0f32.to_le_bytes());
    }
}
