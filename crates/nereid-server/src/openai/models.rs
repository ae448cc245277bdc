//! `GET /v1/models` and `GET /v1/models/{id}`: the ready models this
//! frontend can use. A text model declares the input `text_input` and the
//! output `text_output`; an embedding model the input `embedding_request`
//! and the output `text_output` (vLLM's backend names). Other models are
//! not listed, and the inference routes refuse them as unknown.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use nereid_core::model_config::ModelConfig;
use nereid_engine::{LoadedVersion, ModelState};

use super::OpenAi;
use super::error::ApiError;
use super::schema::{ModelCard, ModelList};

/// Who Triton's frontend says owns every model.
const OWNED_BY: &str = "Triton Inference Server";

/// What a model can be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    Generate,
    Embed,
}

impl Use {
    /// Whether `config` declares what this use needs.
    pub fn fits(self, config: &ModelConfig) -> bool {
        let input = |name| config.input.iter().any(|i| i.name == name);
        let output = |name| config.output.iter().any(|o| o.name == name);
        let wanted = match self {
            Use::Generate => "text_input",
            Use::Embed => "embedding_request",
        };
        input(wanted) && output("text_output")
    }
}

/// The ready version of `name`, when it fits `use_`; otherwise the
/// "Unknown model" of Triton's frontend.
pub fn resolve(state: &OpenAi, name: &str, use_: Use) -> Result<Arc<LoadedVersion>, ApiError> {
    state
        .engine
        .model(name, None)
        .ok()
        .filter(|m| use_.fits(&m.config))
        .ok_or_else(|| ApiError::unknown_model(name))
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
    cards(&state)
        .into_iter()
        .find(|card| card.id == id)
        .map(Json)
        .ok_or_else(|| ApiError::model_not_found(&id))
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
}
