//! Language models from GGUF files (`backend: "llamacpp"`), served as
//! Triton's vLLM backend serves its models: decoupled, with its inputs and
//! outputs (`text_input`, `stream`, `sampling_parameters`, ...;
//! `text_output`, token counts, finish reason), so the generate extension,
//! gRPC streams and the OpenAI routes work unchanged.
//!
//! Each instance owns one model and one KV cache, driven by a thread of its
//! own ([`runner`]) that runs `nereid-generation`'s scheduler step by step:
//! continuous batching, KV memory in blocks, prefix sharing, preemption.
//! llama.cpp computes each step (its kernels, tokenizer and KV cells);
//! what is scheduled, shared and evicted is decided here.
//!
//! Depends on `nereid-core` and `nereid-generation`; knows no frontend,
//! engine or scheduler of the server.

mod gguf;
mod instance;
mod job;
mod llama;
mod metrics;
mod respond;
mod runner;
mod settings;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use parking_lot::Mutex;

use nereid_core::custom_metrics::CustomMetrics;
use nereid_core::model_config::ModelConfig;
use nereid_core::{Backend, BackendError, ModelInstance, ModelIo, ModelSource};

pub use gguf::{Gguf, GgufError};
pub use settings::Settings;

/// The backend's name in `config.pbtxt`.
pub const BACKEND_NAME: &str = "llamacpp";

/// The file a version folder holds when the config names none.
pub const DEFAULT_MODEL_FILENAME: &str = "model.gguf";

/// GGUF language models through llama.cpp.
#[derive(Debug, Default)]
pub struct LlmBackend {
    /// Where the models' metrics go, once the server has made them.
    metrics: OnceLock<Arc<CustomMetrics>>,
    /// Chat templates read from GGUF files, by path and modification time
    /// (a chat request asks for its model's template every time).
    templates: Mutex<HashMap<PathBuf, Template>>,
}

/// A GGUF file's `tokenizer_config.json` (`None`: the file has no chat
/// template), as of the file's modification time.
type Template = (Option<SystemTime>, Option<String>);

impl LlmBackend {
    pub fn new() -> LlmBackend {
        LlmBackend::default()
    }

    /// Connects the backend to the server's metric families (once).
    pub fn set_metrics(&self, metrics: Arc<CustomMetrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// The Jinja chat template that a GGUF file carries, with its special
    /// tokens, as Hugging Face's `tokenizer_config.json` holds them
    /// (`chat_template`, `bos_token`, `eos_token`): how a frontend that
    /// renders chats finds a GGUF model's template.
    pub fn tokenizer_config(model_path: &Path) -> Result<Option<String>, GgufError> {
        let gguf = Gguf::read(model_path)?;
        let Some(template) = gguf.chat_template() else {
            return Ok(None);
        };
        let config = serde_json::json!({
            "chat_template": template,
            "bos_token": gguf.special_token("bos").unwrap_or_default(),
            "eos_token": gguf.special_token("eos").unwrap_or_default(),
        });
        Ok(Some(config.to_string()))
    }
}

impl Backend for LlmBackend {
    fn name(&self) -> &'static str {
        BACKEND_NAME
    }

    fn platform(&self) -> &'static str {
        ""
    }

    fn default_model_filename(&self) -> &'static str {
        DEFAULT_MODEL_FILENAME
    }

    fn inspect(&self, model_path: &Path) -> Result<ModelIo, BackendError> {
        Gguf::read(model_path).map_err(|e| BackendError::Load(e.to_string()))?;
        Ok(respond::model_io())
    }

    fn auto_complete(
        &self,
        config: &ModelConfig,
        model_path: &Path,
    ) -> Option<Result<ModelConfig, BackendError>> {
        Some(
            Gguf::read(model_path)
                .map_err(|e| BackendError::Load(e.to_string()))
                .map(|_| respond::complete(config)),
        )
    }

    /// A GGUF file's chat template, as `tokenizer_config.json`.
    fn embedded_file(&self, model_path: &Path, name: &str) -> Option<Vec<u8>> {
        if name != "tokenizer_config.json" {
            return None;
        }
        let modified = std::fs::metadata(model_path)
            .and_then(|m| m.modified())
            .ok();
        let mut templates = self.templates.lock();
        if let Some((when, config)) = templates.get(model_path)
            && *when == modified
        {
            return config.clone().map(String::into_bytes);
        }
        let config = LlmBackend::tokenizer_config(model_path).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the GGUF file's chat template");
            None
        });
        templates.insert(model_path.to_owned(), (modified, config.clone()));
        config.map(String::into_bytes)
    }

    fn load(&self, source: &ModelSource) -> Result<Box<dyn ModelInstance>, BackendError> {
        let metrics = self.metrics.get().cloned();
        let instance = instance::LlmInstance::load(source, metrics)?;
        Ok(Box::new(instance))
    }
}
