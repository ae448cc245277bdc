//! One instance of a GGUF model: the model, shared with its generation
//! thread, which owns the KV cache. A request is read and tokenized on the
//! instance's own thread, checked against the context and the cache, and
//! handed to the generation thread, which answers it; the instance is free
//! for the next request at once.

use std::sync::Arc;
use std::sync::mpsc::sync_channel;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use llama_cpp_2::model::LlamaModel;
use nereid_core::custom_metrics::CustomMetrics;
use nereid_core::{
    BackendError, Batch, BatchRequest, Device, Error, ModelInstance, ModelSource, RequestWise,
    Tensor,
};
use nereid_generation::Limits;

use crate::gguf::Gguf;
use crate::job::Job;
use crate::llama;
use crate::metrics::Metrics;
use crate::runner;
use crate::settings::Settings;

/// Requests queued for the generation thread before a new one is refused.
const INBOX: usize = 4096;

pub struct LlmInstance {
    model: Arc<LlamaModel>,
    limits: Limits,
    inbox: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    name: String,
}

impl std::fmt::Debug for LlmInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmInstance")
            .field("name", &self.name)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl LlmInstance {
    pub fn load(
        source: &ModelSource,
        metrics: Option<Arc<CustomMetrics>>,
    ) -> Result<LlmInstance, BackendError> {
        let name = source.config.name.clone();
        if let Device::Gpu(gpu) = source.device {
            return Err(BackendError::Unsupported(format!(
                "model '{name}': this nereid's llamacpp backend runs on CPUs; GPU {gpu} was asked for \
                 (use instance_group {{ kind: KIND_CPU }})"
            )));
        }
        let gguf = Gguf::read(&source.model_path).map_err(|e| BackendError::Load(e.to_string()))?;
        let settings = Settings::from_config(&source.config, gguf.context_length())?;
        let model = Arc::new(llama::load(&name, &source.model_path, &gguf)?);
        let metrics = Metrics::new(metrics, &name, source.version, &source.instance_name);
        let (inbox, jobs) = crossbeam_channel::bounded(INBOX);
        let (ready, started) = sync_channel(1);
        let shared = Arc::clone(&model);
        let thread = std::thread::Builder::new()
            .name(format!("llm-{}", source.instance_name))
            .spawn(move || runner::run(shared, settings, jobs, metrics, ready))
            .map_err(|e| BackendError::Load(format!("cannot start a generation thread: {e}")))?;
        started
            .recv()
            .map_err(|_| BackendError::Load("the generation thread ended at start".into()))??;
        tracing::info!(model = %name, ?settings, "language model ready");
        Ok(LlmInstance {
            model,
            limits: settings.limits(),
            inbox: Some(inbox),
            thread: Some(thread),
            name: source.instance_name.clone(),
        })
    }

    /// Reads, tokenizes and checks one request, then queues it.
    fn submit(&self, request: &BatchRequest<'_>) -> Result<(), Error> {
        let mut job = Job::read(request)?;
        job.tokens = self.tokenize(&job.prompt);
        if job.tokens.is_empty() {
            return Err(Error::invalid_argument("the prompt is empty"));
        }
        // Refused here, before it is queued, with the scheduler's own rule.
        self.limits
            .admits(job.tokens.len())
            .map_err(|refusal| Error::invalid_argument(refusal.to_string()))?;
        let inbox = self
            .inbox
            .as_ref()
            .ok_or_else(|| Error::unavailable("the model is unloading"))?;
        inbox.try_send(job).map_err(|e| match e {
            crossbeam_channel::TrySendError::Full(_) => {
                Error::unavailable(format!("model '{}' has {INBOX} requests queued", self.name))
            }
            crossbeam_channel::TrySendError::Disconnected(_) => {
                Error::unavailable("the model's generation thread stopped")
            }
        })
    }

    /// The prompt's tokens, special tokens (a chat template's) parsed as
    /// such; a BOS the template already wrote is not doubled.
    fn tokenize(&self, prompt: &str) -> Vec<u32> {
        let vocab = self.model.vocab();
        let mut tokens: Vec<u32> = vocab
            .tokenize(prompt.as_bytes(), true, true)
            .into_iter()
            .map(|t| t.0 as u32)
            .collect();
        let bos = vocab.bos().0 as u32;
        if tokens.len() >= 2 && tokens[0] == bos && tokens[1] == bos {
            tokens.remove(0);
        }
        tokens
    }
}

impl ModelInstance for LlmInstance {
    fn execute(&mut self, _: &Batch) -> Result<Vec<Tensor>, BackendError> {
        Err(BackendError::Unsupported(
            "a llamacpp model answers requests one by one (it is decoupled)".into(),
        ))
    }

    fn as_request_wise(&mut self) -> Option<&mut dyn RequestWise> {
        Some(self)
    }
}

impl RequestWise for LlmInstance {
    fn execute_requests(
        &mut self,
        requests: &[BatchRequest<'_>],
    ) -> Vec<Result<Vec<Tensor>, BackendError>> {
        requests
            .iter()
            .map(|r| {
                self.submit(r)
                    .map(|()| Vec::new())
                    .map_err(BackendError::Request)
            })
            .collect()
    }
}

impl Drop for LlmInstance {
    /// Closes the inbox and waits for the generation thread to answer what
    /// it took, so the model's memory is given back when this returns.
    fn drop(&mut self) {
        self.inbox = None;
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!(instance = %self.name, "the generation thread panicked");
        }
    }
}
