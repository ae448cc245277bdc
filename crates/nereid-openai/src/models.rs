//! `GET /v1/models` and `GET /v1/models/{id}`: the ready models this
//! frontend can use. A text model declares the input `text_input` and the
//! output `text_output`; an embedding model the input `embedding_request`
//! and the output `text_output` (vLLM's backends names). Other models are
//! not listed, and the inference routes refuse them saying what they lack;
//! a model that is not served is refused in OpenAI's words (404,
//! `model_not_found`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use nereid_core::ErrorKind;
use nereid_core::model_config::ModelConfig;
use nereid_engine::{LoadedVersion, ModelState};

use super::OpenAi;
use super::error::ApiError;
use super::schema::{ModelCard, ModelList};

/// Who Triton's frontend says owns every model.
const OWNED_BY: &str = "Triton Inference Server";

/// The output every model this frontend uses declares.
const OUTPUT: &str = "text_output";

/// What a model can be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    Generate,
    Embed,
}

impl Use {
    /// The input this use needs besides `text_output`.
    fn input(self) -> &'static str {
        match self {
            Use::Generate => "text_input",
            Use::Embed => "embedding_request",
        }
    }

    /// Whether `config` declares what this use needs.
    pub fn fits(self, config: &ModelConfig) -> bool {
        self.lacks(config).is_empty()
    }

    /// What `config` lacks for this use, as "the input 'x'" and "the
    /// output 'y'"; empty when it fits.
    fn lacks(self, config: &ModelConfig) -> Vec<String> {
        let has_input = config.input.iter().any(|i| i.name == self.input());
        let has_output = config.output.iter().any(|o| o.name == OUTPUT);
        let input = (!has_input).then(|| format!("the input '{}'", self.input()));
        let output = (!has_output).then(|| format!("the output '{OUTPUT}'"));
        input.into_iter().chain(output).collect()
    }

    /// Why the model `name`, which exists, cannot serve this use.
    fn refusal(self, name: &str, config: &ModelConfig) -> ApiError {
        let (kind, needs) = match self {
            Use::Generate => (
                "a text model",
                "v1/completions and v1/chat/completions need",
            ),
            Use::Embed => ("an embedding model", "v1/embeddings needs"),
        };
        ApiError::unusable_model(
            format!(
                "The model `{name}` exists but is not {kind}: it does not declare {}, which {needs}.",
                self.lacks(config).join(" and "),
            ),
            false,
        )
    }
}

/// The ready version of `name` (loaded first in on-demand model
/// control), when it fits `use_`; otherwise why not.
pub async fn resolve(
    state: &OpenAi,
    name: &str,
    use_: Use,
) -> Result<Arc<LoadedVersion>, ApiError> {
    // The request that follows loads it again if it is evicted meanwhile.
    let _kept = state
        .engine
        .load_on_request(name, None)
        .await
        .map_err(|e| ApiError::engine(&e))?;
    let model = served(state, name)?;
    if use_.fits(&model.config) {
        Ok(model)
    } else {
        Err(use_.refusal(name, &model.config))
    }
}

/// The ready version of `name`: OpenAI's 404 when no model has that name,
/// the engine's words when one has but is not ready.
fn served(state: &OpenAi, name: &str) -> Result<Arc<LoadedVersion>, ApiError> {
    state.engine.model(name, None).map_err(|e| match e.kind() {
        ErrorKind::NotFound if state.engine.index().iter().any(|row| row.name == name) => {
            ApiError::unusable_model(
                format!("The model `{name}` is not ready: {}", e.message()),
                true,
            )
        }
        ErrorKind::NotFound => ApiError::model_not_found(name),
        _ => ApiError::engine(&e),
    })
}

/// The usable models, sorted by name.
pub fn cards(state: &OpenAi) -> Vec<ModelCard> {
    let mut names: Vec<String> = state
        .engine
        .index()
        .into_iter()
        .filter(|row| row.state == Some(ModelState::Ready))
        .map(|row| row.name)
        .collect();
    names.dedup();
    names
        .into_iter()
        .filter(|name| {
            state
                .engine
                .model(name, None)
                .is_ok_and(|m| Use::Generate.fits(&m.config) || Use::Embed.fits(&m.config))
        })
        .map(|id| ModelCard {
            id,
            object: "model",
            created: state.started,
            owned_by: OWNED_BY,
        })
        .collect()
}

pub async fn list(State(state): State<OpenAi>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: cards(&state),
    })
}

pub async fn retrieve(
    State(state): State<OpenAi>,
    Path(id): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    if let Some(card) = cards(&state).into_iter().find(|card| card.id == id) {
        return Ok(Json(card));
    }
    served(&state, &id)?;
    Err(ApiError::unusable_model(
        format!(
            "The model `{id}` exists but is neither a text nor an embedding model: a text model declares the input 'text_input' and the output '{OUTPUT}', an embedding model the input 'embedding_request' and the output '{OUTPUT}'."
        ),
        false,
    ))
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::{ModelInput, ModelOutput};

    use super::*;

    fn config(inputs: &[&str], outputs: &[&str]) -> ModelConfig {
        ModelConfig {
            input: inputs
                .iter()
                .map(|n| ModelInput {
                    name: (*n).into(),
                    ..Default::default()
                })
                .collect(),
            output: outputs
                .iter()
                .map(|n| ModelOutput {
                    name: (*n).into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn models_are_used_by_their_tensor_names() {
        let text = config(&["text_input", "stream"], &["text_output"]);
        assert!(Use::Generate.fits(&text) && !Use::Embed.fits(&text));
        let embed = config(&["embedding_request"], &["text_output"]);
        assert!(Use::Embed.fits(&embed) && !Use::Generate.fits(&embed));
        let vllm = config(&["text_input", "embedding_request"], &["text_output"]);
        assert!(Use::Embed.fits(&vllm) && Use::Generate.fits(&vllm));
        let other = config(&["INPUT0"], &["OUTPUT0"]);
        assert!(!Use::Embed.fits(&other) && !Use::Generate.fits(&other));
    }

    #[test]
    fn a_refusal_says_what_the_model_lacks() {
        let refusal = Use::Embed.refusal("echo", &config(&["text_input"], &["text_output"]));
        assert_eq!(refusal.status, axum::http::StatusCode::NOT_FOUND);
        assert_eq!(
            refusal.message,
            "The model `echo` exists but is not an embedding model: it does not declare the input 'embedding_request', which v1/embeddings needs."
        );
        let refusal = Use::Generate.refusal("simple", &config(&["INPUT0"], &["OUTPUT0"]));
        assert_eq!(
            refusal.message,
            "The model `simple` exists but is not a text model: it does not declare the input 'text_input' and the output 'text_output', which v1/completions and v1/chat/completions need."
        );
    }
}
