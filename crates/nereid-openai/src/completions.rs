//! `POST /v1/completions`: one prompt, one choice, streamed or whole.
//! What Triton's frontend refuses is refused with its words.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::error::ApiError;
use super::generate::{self, DEFAULT_MAX_TOKENS, Generation, SamplingParameters};
use super::models::{Use, resolve};
use super::schema::{Completion, CompletionChoice, CompletionRequest, Prompt, Usage};
use super::stream::{self, Chunks};
use super::{OpenAi, Reply, parse};

pub async fn create(State(state): State<OpenAi>, body: Bytes) -> Result<Response, ApiError> {
    let request: CompletionRequest = parse(&body)?;
    let model = resolve(&state, &request.model, Use::Generate).await?;
    let generation = generation(&request)?;
    let answer = state.infer(generation.request(&model.config)?).await?;
    let reply = Reply::new("cmpl", request.model);
    if generation.stream {
        let include_usage = request
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        let steps = generate::steps(answer);
        return Ok(stream::respond(
            steps,
            CompletionChunks(reply),
            generation,
            include_usage,
        ));
    }
    let (text, tally) = generate::collect(answer).await?;
    let usage = tally.usage();
    let finish = generation.finish_reason(usage);
    Ok(Json(reply.completion(text, Some(finish), usage)).into_response())
}

/// The generation a request asks for, once checked as Triton's frontend
/// checks it.
fn generation(request: &CompletionRequest) -> Result<Generation, ApiError> {
    refuse_unsupported(request)?;
    let prompt = match &request.prompt {
        Prompt::Text(text) => text.clone(),
        _ => {
            return Err(ApiError::invalid_param(
                "prompt",
                "only single string input is supported",
            ));
        }
    };
    let max_tokens = request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    Ok(Generation {
        prompt,
        stream: request.stream.unwrap_or(false),
        echo: request.echo.unwrap_or(false),
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
            temperature: request.temperature.unwrap_or(1.0),
            top_p: request.top_p.unwrap_or(1.0),
            max_tokens,
        },
    })
}

fn refuse_unsupported(request: &CompletionRequest) -> Result<(), ApiError> {
    if request.suffix.is_some() {
        return Err(ApiError::invalid_param(
            "suffix",
            "suffix is not currently supported",
        ));
    }
    let empty = match &request.prompt {
        Prompt::Text(text) => text.is_empty(),
        Prompt::Texts(all) => all.is_empty(),
        Prompt::Tokens(all) => all.is_empty(),
        Prompt::TokenLists(all) => all.is_empty(),
    };
    if empty {
        return Err(ApiError::invalid_param(
            "prompt",
            "prompt must be non-empty",
        ));
    }
    if let Some(n) = request.n.filter(|n| *n > 1) {
        return Err(ApiError::invalid_param(
            "n",
            format!("Received n={n}, but only single choice (n=1) is currently supported"),
        ));
    }
    if let Some(best_of) = request.best_of.filter(|b| *b > 1) {
        return Err(ApiError::invalid_param(
            "best_of",
            format!(
                "Received best_of={best_of}, but only single choice (best_of=1) is currently supported"
            ),
        ));
    }
    if request.logit_bias.is_some() {
        return Err(ApiError::invalid_param(
            "logit_bias",
            "logit bias is not supported",
        ));
    }
    if request.logprobs.is_some_and(|l| l > 0) {
        return Err(ApiError::invalid_param(
            "logprobs",
            "logprobs are currently available only for the vLLM backend",
        ));
    }
    if request.stream_options.is_some() && !request.stream.unwrap_or(false) {
        return Err(ApiError::invalid_param(
            "stream_options",
            "`stream_options` can only be used when `stream` is True",
        ));
    }
    Ok(())
}

impl Reply {
    fn completion(
        &self,
        text: String,
        finish: Option<&'static str>,
        usage: Option<Usage>,
    ) -> Completion<CompletionChoice> {
        let choice = CompletionChoice {
            index: 0,
            text,
            logprobs: None,
            finish_reason: finish,
        };
        self.completion_with(vec![choice], usage)
    }

    fn completion_with(
        &self,
        choices: Vec<CompletionChoice>,
        usage: Option<Usage>,
    ) -> Completion<CompletionChoice> {
        self.envelope("text_completion", choices, usage)
    }
}

struct CompletionChunks(Reply);

impl Chunks for CompletionChunks {
    fn opening(&self) -> Option<String> {
        None
    }

    fn piece(&self, text: String, finish: Option<&'static str>) -> String {
        json(&self.0.completion(text, finish, None))
    }

    fn usage(&self, usage: Usage) -> String {
        json(&self.0.completion_with(Vec::new(), Some(usage)))
    }
}

fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: serde_json::Value) -> CompletionRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn a_request_maps_to_a_generation_with_openais_defaults() {
        let g = generation(&request(serde_json::json!({
            "model": "m", "prompt": "one two", "stop": ["x"], "echo": true, "seed": 1,
        })))
        .unwrap();
        assert_eq!(g.prompt, "one two");
        assert!(g.echo && !g.stream);
        assert_eq!((g.max_tokens, g.sampling.max_tokens), (16, 16));
        assert_eq!(g.stop, ["x"]);
        assert_eq!((g.sampling.temperature, g.sampling.top_p), (1.0, 1.0));
        assert_eq!(g.sampling.seed, Some(1));
    }

    #[test]
    fn what_tritons_frontend_refuses_is_refused_with_its_words() {
        let refused = |body: serde_json::Value| {
            let mut full = serde_json::json!({"model": "m", "prompt": "p"});
            full.as_object_mut()
                .unwrap()
                .extend(body.as_object().unwrap().clone());
            generation(&request(full)).unwrap_err().message
        };
        assert_eq!(
            refused(serde_json::json!({"n": 2})),
            "Received n=2, but only single choice (n=1) is currently supported"
        );
        assert_eq!(
            refused(serde_json::json!({"suffix": "s"})),
            "suffix is not currently supported"
        );
        assert_eq!(
            refused(serde_json::json!({"prompt": ""})),
            "prompt must be non-empty"
        );
        assert_eq!(
            refused(serde_json::json!({"prompt": ["a", "b"]})),
            "only single string input is supported"
        );
        assert_eq!(
            refused(serde_json::json!({"logprobs": 1})),
            "logprobs are currently available only for the vLLM backend"
        );
        assert_eq!(
            refused(serde_json::json!({"stream_options": {"include_usage": true}})),
            "`stream_options` can only be used when `stream` is True"
        );
        assert!(
            serde_json::from_value::<CompletionRequest>(
                serde_json::json!({"model": "m", "prompt": "p", "bogus": 1})
            )
            .is_err()
        );
    }
}
