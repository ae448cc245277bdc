//! The flags of many models on one server (Nereid's; Triton has none):
//! `--model-control-mode=on_demand`'s load limit, the memory budget and
//! pinning (see `nereid_residency`).

use nereid_residency::{Budget, Options};

#[derive(Debug, clap::Args)]
pub struct ResidencyFlags {
    /// Memory the server may hold, loaded models included: BYTES for the
    /// host (the server's and its Python workers' resident memory), or
    /// GPU:BYTES for one GPU; repeat for several. BYTES may end in K, M,
    /// G or Ki, Mi, Gi. When a load would pass it, the least recently used
    /// models that are not pinned and have no request in flight are
    /// unloaded first.
    #[arg(long = "model-memory-budget", value_name = "[GPU:]BYTES")]
    pub model_memory_budget: Vec<String>,

    /// Loads on demand (`--model-control-mode=on_demand`) that run at
    /// once; requests for more models wait for one to finish.
    #[arg(long, default_value_t = Options::default().load_limit as u64, value_parser = clap::value_parser!(u64).range(1..), value_name = "N")]
    pub model_load_limit: u64,

    /// Pin the models loaded at startup, by the repository API or by poll
    /// mode: they are never evicted for the memory budget. Models loaded on
    /// demand never are pinned, unless their config's `nereid.pinned`
    /// parameter says "true" (which "false" undoes for any model).
    #[arg(long, default_value = "true", value_parser = clap::builder::BoolishValueParser::new(), num_args = 1)]
    pub pin_loaded_models: bool,
}

impl ResidencyFlags {
    pub fn options(&self) -> anyhow::Result<Options> {
        Ok(Options {
            budget: Budget::parse(&self.model_memory_budget).map_err(anyhow::Error::msg)?,
            load_limit: self.model_load_limit as usize,
            pin_loaded: self.pin_loaded_models,
        })
    }
}
