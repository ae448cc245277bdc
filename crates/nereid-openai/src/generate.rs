//! Text generation as Triton's OpenAI frontend maps it onto a model: the
//! prompt in `text_input`, `stream`, the sampling parameters as JSON in
//! `sampling_parameters` (vLLM's backend) or as tensors of their own
//! (`max_tokens`, `stop_words`, `temperature`, ...: TensorRT-LLM's),
//! `exclude_input_in_output`, and `return_num_input_tokens` /
//! `return_num_output_tokens`; only the inputs the model declares are sent.
//! The answer is read from `text_output`, and `usage` from
//! `num_input_tokens` / `num_output_tokens`.

use futures::Stream;
use nereid_core::InferResponse;
use nereid_core::model_config::ModelConfig;
use nereid_engine::Answer;
use serde::Serialize;

use super::error::ApiError;
use super::schema::{Stop, Usage};
use super::tensors::{self, Value};

/// `max_tokens` when a request sets none (Triton's `--default-max-tokens`).
pub const DEFAULT_MAX_TOKENS: u32 = 16;

/// What a completion or a chat request asks the model for.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub prompt: String,
    pub stream: bool,
    /// Whether the answer repeats the prompt (`echo`).
    pub echo: bool,
    pub max_tokens: u32,
    pub stop: Vec<String>,
    pub sampling: SamplingParameters,
}

/// The `sampling_parameters` JSON, with the fields Triton's frontend puts
/// in it: the request's sampling fields with the OpenAI defaults, unset
/// optional ones left out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SamplingParameters {
    pub frequency_penalty: f64,
    pub ignore_eos: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<u32>,
    pub n: u32,
    pub presence_penalty: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    pub temperature: f64,
    pub top_p: f64,
    pub max_tokens: u32,
}

impl Generation {
    /// The request to `model`, with the inputs it declares.
    pub fn request(&self, model: &ModelConfig) -> Result<nereid_core::InferRequest, ApiError> {
        tensors::request(model, |name| self.value_for(name))
    }

    /// What Triton's frontend sends to the input called `name`, if it
    /// sends anything there.
    pub fn value_for(&self, name: &str) -> Option<Value> {
        let sampling = &self.sampling;
        Some(match name {
            "text_input" => Value::Texts(vec![self.prompt.clone()]),
            "stream" => Value::Bool(self.stream),
            "sampling_parameters" => Value::Texts(vec![serde_json::to_string(sampling).ok()?]),
            "exclude_input_in_output" | "sampling_param_exclude_input_from_output" => {
                Value::Bool(!self.echo)
            }
            "return_num_input_tokens" | "return_num_output_tokens" => Value::Bool(true),
            // Log probabilities are refused before a request is made.
            "return_logprobs" => Value::Bool(false),
            "max_tokens" => Value::Int(i64::from(self.max_tokens)),
            "stop_words" if !self.stop.is_empty() => Value::Texts(self.stop.clone()),
            "temperature" => Value::Float(sampling.temperature),
            "top_p" => Value::Float(sampling.top_p),
            "frequency_penalty" => Value::Float(sampling.frequency_penalty),
            "presence_penalty" => Value::Float(sampling.presence_penalty),
            "seed" => Value::Int(sampling.seed?),
            _ => return None,
        })
    }

    /// Why the model stopped: `length` when it made `max_tokens` tokens
    /// (as its counts tell), `stop` otherwise.
    pub fn finish_reason(&self, usage: Option<Usage>) -> &'static str {
        match usage {
            Some(u) if self.max_tokens > 0 && u.completion_tokens >= u64::from(self.max_tokens) => {
                "length"
            }
            _ => "stop",
        }
    }
}

/// What one response of the model said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Piece {
    pub text: String,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
}

impl Piece {
    pub fn read(response: &InferResponse) -> Result<Piece, ApiError> {
        Ok(Piece {
            text: tensors::text(response, "text_output")?.unwrap_or_default(),
            prompt_tokens: tensors::count(response, "num_input_tokens"),
            completion_tokens: tensors::count(response, "num_output_tokens"),
        })
    }
}

/// Token counts over a request's responses, added up as Triton's frontend
/// adds them: the prompt's from the first response that has both counts,
/// the completion's summed over all.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tally {
    prompt: Option<u64>,
    completion: u64,
}

impl Tally {
    pub fn add(&mut self, piece: &Piece) {
        let (Some(prompt), Some(completion)) = (piece.prompt_tokens, piece.completion_tokens)
        else {
            return;
        };
        self.prompt.get_or_insert(prompt);
        self.completion += completion;
    }

    /// `None` when the model reported no counts.
    pub fn usage(&self) -> Option<Usage> {
        self.prompt.map(|prompt| Usage {
            prompt_tokens: prompt,
            completion_tokens: self.completion,
            total_tokens: prompt + self.completion,
        })
    }
}

/// One response of the model as it comes; `last` on the final one.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub piece: Piece,
    pub last: bool,
}

/// The model's responses one by one; an error ends the stream. Dropping
/// it cancels a decoupled model's request.
pub fn steps(answer: Answer) -> impl Stream<Item = Result<Step, ApiError>> + Send {
    async_stream::stream! {
        let mut stream = match answer {
            Answer::One(response) => {
                yield Piece::read(&response).map(|piece| Step { piece, last: true });
                return;
            }
            Answer::Stream(stream) => stream,
        };
        loop {
            let Some(streamed) = stream.next().await else {
                yield Err(ApiError::server("the model ended its responses without a final one"));
                return;
            };
            let step = match streamed.response {
                None => Ok(Step { piece: Piece::default(), last: streamed.last }),
                Some(Ok(response)) => {
                    Piece::read(&response).map(|piece| Step { piece, last: streamed.last })
                }
                Some(Err(error)) => Err(ApiError::engine(&error)),
            };
            let end = streamed.last || step.is_err();
            yield step;
            if end {
                return;
            }
        }
    }
}

/// Every response's text joined, and the counts added up.
pub async fn collect(answer: Answer) -> Result<(String, Tally), ApiError> {
    use futures::StreamExt;
    let mut text = String::new();
    let mut tally = Tally::default();
    let steps = steps(answer);
    futures::pin_mut!(steps);
    while let Some(step) = steps.next().await {
        let step = step?;
        tally.add(&step.piece);
        text.push_str(&step.piece.text);
    }
    Ok((text, tally))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generation() -> Generation {
        Generation {
            prompt: "hello".into(),
            stream: true,
            echo: false,
            max_tokens: 5,
            stop: vec!["x".into()],
            sampling: SamplingParameters {
                frequency_penalty: 0.0,
                ignore_eos: false,
                min_tokens: None,
                n: 1,
                presence_penalty: 0.0,
                seed: Some(3),
                stop: Some(Stop::One("x".into())),
                temperature: 1.0,
                top_p: 1.0,
                max_tokens: 5,
            },
        }
    }

    #[test]
    fn sampling_parameters_are_the_json_tritons_frontend_sends() {
        let Some(Value::Texts(json)) = generation().value_for("sampling_parameters") else {
            panic!("no sampling parameters");
        };
        let json: serde_json::Value = serde_json::from_str(&json[0]).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "frequency_penalty": 0.0, "ignore_eos": false, "n": 1,
                "presence_penalty": 0.0, "seed": 3, "stop": "x",
                "temperature": 1.0, "top_p": 1.0, "max_tokens": 5,
            })
        );
    }

    #[test]
    fn inputs_of_both_request_formats() {
        let g = generation();
        assert_eq!(
            g.value_for("text_input"),
            Some(Value::Texts(vec!["hello".into()]))
        );
        assert_eq!(g.value_for("stream"), Some(Value::Bool(true)));
        assert_eq!(
            g.value_for("exclude_input_in_output"),
            Some(Value::Bool(true))
        );
        assert_eq!(
            g.value_for("return_num_output_tokens"),
            Some(Value::Bool(true))
        );
        assert_eq!(g.value_for("max_tokens"), Some(Value::Int(5)));
        assert_eq!(
            g.value_for("stop_words"),
            Some(Value::Texts(vec!["x".into()]))
        );
        assert_eq!(g.value_for("seed"), Some(Value::Int(3)));
        assert_eq!(g.value_for("lora_task_id"), None);
        let plain = Generation {
            stop: Vec::new(),
            echo: true,
            ..generation()
        };
        assert_eq!(plain.value_for("stop_words"), None);
        assert_eq!(
            plain.value_for("exclude_input_in_output"),
            Some(Value::Bool(false))
        );
    }

    #[test]
    fn counts_add_up_as_tritons_frontend_adds_them() {
        let mut tally = Tally::default();
        tally.add(&Piece::default());
        assert_eq!(tally.usage(), None);
        for _ in 0..3 {
            tally.add(&Piece {
                text: "a".into(),
                prompt_tokens: Some(4),
                completion_tokens: Some(1),
            });
        }
        let usage = tally.usage().unwrap();
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.total_tokens
            ),
            (4, 3, 7)
        );
        let g = generation();
        assert_eq!(g.finish_reason(Some(usage)), "stop");
        let full = Usage {
            completion_tokens: 5,
            ..usage
        };
        assert_eq!(g.finish_reason(Some(full)), "length");
        assert_eq!(g.finish_reason(None), "stop");
    }
}
