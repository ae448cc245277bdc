//! The engine settings of a model, from its config's parameters
//! (`parameters { key: "kv_cache_tokens" value: { string_value: "16384" } }`),
//! with the defaults docs/llm.md lists.

use nereid_core::model_config::ModelConfig;
use nereid_core::{BackendError, ParameterReader};
use nereid_generation::Limits;

/// KV positions per block (vLLM's default block size).
pub const DEFAULT_BLOCK_SIZE: usize = 16;
/// KV cache positions, shared by every sequence of an instance.
pub const DEFAULT_KV_CACHE_TOKENS: usize = 16384;
/// Sequences decoded together at most (vLLM's `max_num_seqs`).
pub const DEFAULT_MAX_SEQUENCES: usize = 64;
/// Tokens one step computes at most (vLLM's `max_num_batched_tokens`).
pub const DEFAULT_TOKENS_PER_STEP: usize = 512;
/// llama.cpp's cache takes at most this many sequence ids.
const MAX_SLOTS: usize = 256;
/// llama.cpp sizes its cache in multiples of this.
const CACHE_GRANULE: usize = 256;

/// How an instance runs its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Positions one sequence may have, prompt and output (`context_length`;
    /// default: what the model was trained with).
    pub context_length: usize,
    /// KV cache positions in all (`kv_cache_tokens`).
    pub kv_cache_tokens: usize,
    pub block_size: usize,
    /// Compute threads (`threads`; default: half the cores, at least 1).
    pub threads: usize,
    /// `max_sequences`.
    pub max_sequences: usize,
    /// `tokens_per_step`.
    pub tokens_per_step: usize,
    /// Whether finished sequences' blocks are kept for later prompts
    /// (`prefix_caching`, on by default).
    pub prefix_caching: bool,
}

impl Settings {
    /// The settings `config` gives, for a model trained with
    /// `trained_context` positions (when the file says).
    pub fn from_config(
        config: &ModelConfig,
        trained_context: Option<usize>,
    ) -> Result<Settings, BackendError> {
        let reader = ParameterReader::new(config);
        let block_size = positive(&reader, "kv_block_size", DEFAULT_BLOCK_SIZE)?;
        let kv = positive(&reader, "kv_cache_tokens", DEFAULT_KV_CACHE_TOKENS)?;
        let kv_cache_tokens = kv.next_multiple_of(CACHE_GRANULE.max(block_size));
        let context = positive(&reader, "context_length", trained_context.unwrap_or(kv))?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let settings = Settings {
            context_length: context,
            kv_cache_tokens,
            block_size,
            threads: positive(&reader, "threads", cores.div_ceil(2))?,
            max_sequences: positive(&reader, "max_sequences", DEFAULT_MAX_SEQUENCES)?,
            tokens_per_step: positive(&reader, "tokens_per_step", DEFAULT_TOKENS_PER_STEP)?,
            prefix_caching: reader.flag("prefix_caching")?.unwrap_or(true),
        };
        settings.check(&reader)
    }

    fn check(self, reader: &ParameterReader<'_>) -> Result<Settings, BackendError> {
        if self.max_sequences > MAX_SLOTS {
            let value = self.max_sequences.to_string();
            return Err(reader.bad("max_sequences", &value, &format!("at most {MAX_SLOTS}")));
        }
        Ok(self)
    }

    /// Sequence ids of the cache: the running sequences', and as many
    /// again to keep finished sequences' prefixes when prefix caching is on.
    pub fn slots(&self) -> usize {
        match self.prefix_caching {
            true => (self.max_sequences * 2).min(MAX_SLOTS),
            false => self.max_sequences,
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            block_size: self.block_size,
            total_blocks: self.kv_cache_tokens / self.block_size,
            max_running: self.max_sequences,
            slots: self.slots(),
            tokens_per_step: self.tokens_per_step,
            context_length: self.context_length.min(self.kv_cache_tokens),
        }
    }
}

fn positive(
    reader: &ParameterReader<'_>,
    key: &str,
    default: usize,
) -> Result<usize, BackendError> {
    let Some(value) = reader.value(key) else {
        return Ok(default);
    };
    match value.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(reader.bad(key, value, "a whole number above 0")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::model_config::ModelParameter;

    fn config(parameters: &[(&str, &str)]) -> ModelConfig {
        ModelConfig {
            name: "lm".into(),
            parameters: parameters
                .iter()
                .map(|(k, v)| {
                    let value = ModelParameter {
                        string_value: (*v).into(),
                    };
                    ((*k).into(), value)
                })
                .collect(),
            ..ModelConfig::default()
        }
    }

    #[test]
    fn defaults_follow_the_model_and_the_machine() {
        let settings = Settings::from_config(&config(&[]), Some(8192)).unwrap();
        assert_eq!(settings.context_length, 8192);
        assert_eq!(settings.kv_cache_tokens, DEFAULT_KV_CACHE_TOKENS);
        assert!(settings.threads >= 1);
        assert_eq!(settings.slots(), 128);
        assert_eq!(settings.limits().total_blocks, 1024);
    }

    #[test]
    fn parameters_set_the_engine_and_bad_ones_are_refused() {
        let settings = Settings::from_config(
            &config(&[
                ("kv_cache_tokens", "1000"),
                ("threads", "2"),
                ("prefix_caching", "off"),
            ]),
            Some(8192),
        )
        .unwrap();
        assert_eq!(
            settings.kv_cache_tokens, 1024,
            "rounded up to llama.cpp's granule"
        );
        assert_eq!(
            settings.limits().context_length,
            1024,
            "no longer than the cache"
        );
        assert_eq!((settings.threads, settings.slots()), (2, 64));
        let error = Settings::from_config(&config(&[("threads", "0")]), None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "model 'lm': parameter 'threads' is '0', expected a whole number above 0"
        );
    }
}
