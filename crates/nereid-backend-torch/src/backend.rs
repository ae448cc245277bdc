//! [`TorchBackend`]: reads forward()'s arguments for autofill and creates
//! instances, sharing a module between instances when asked to.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::SystemTime;

use nereid_core::{
    Backend, BackendError, DataType, Device, IoSpec, ModelInstance, ModelIo, ModelSource,
};
use parking_lot::Mutex;

use crate::binding;
use crate::ffi::{self, ArgKind, LoadOn, Module};
use crate::instance::TorchInstance;
use crate::settings::Settings;

/// The file a version folder holds when the config names none.
const DEFAULT_MODEL_FILENAME: &str = "model.pt";

/// Modules shared under `ENABLE_WEIGHT_SHARING`: one per model version,
/// file (as it was when loaded) and device. Weak, so the module goes when
/// its last instance does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ShareKey {
    model: String,
    version: i64,
    path: PathBuf,
    modified: Option<SystemTime>,
    device: LoadOn,
}

/// libtorch's thread pools are process-wide: the first model that sizes
/// one sizes it for every model (Triton documents the same).
#[derive(Debug, Default)]
struct Threads {
    intra_op: Option<(i32, String)>,
    inter_op: Option<(i32, String)>,
}

/// Triton's `pytorch` backend (platform `pytorch_libtorch`): TorchScript
/// files run by libtorch through `tch`.
#[derive(Debug, Default)]
pub struct TorchBackend {
    shared: Mutex<HashMap<ShareKey, Weak<Module>>>,
    threads: Mutex<Threads>,
}

impl TorchBackend {
    pub fn new() -> Self {
        TorchBackend::default()
    }

    /// Sizes libtorch's pools as the first model asking for a size wants.
    fn apply_threads(&self, settings: &Settings, model: &str) -> Result<(), BackendError> {
        let mut guard = self.threads.lock();
        let threads = &mut *guard;
        let mut intra = 0;
        let mut inter = 0;
        for (wanted, slot, set, key) in [
            (
                settings.intra_op_threads,
                &mut threads.intra_op,
                &mut intra,
                "INTRA_OP_THREAD_COUNT",
            ),
            (
                settings.inter_op_threads,
                &mut threads.inter_op,
                &mut inter,
                "INTER_OP_THREAD_COUNT",
            ),
        ] {
            let Some(n) = wanted else { continue };
            match slot {
                None => {
                    *slot = Some((n, model.to_owned()));
                    *set = n;
                }
                Some((current, owner)) if *current != n => tracing::warn!(
                    model,
                    "{key} {n} ignored: libtorch's pool is process-wide and model '{owner}' already set it to {current}"
                ),
                Some(_) => {}
            }
        }
        if intra == 0 && inter == 0 {
            return Ok(());
        }
        ffi::set_threads(intra, inter).map_err(|e| {
            BackendError::Load(format!(
                "model '{model}': cannot size libtorch's thread pools: {e}"
            ))
        })?;
        tracing::info!(
            model,
            intra_op = intra,
            inter_op = inter,
            "sized libtorch's process-wide thread pools"
        );
        Ok(())
    }

    /// The module for an instance: a new one, or under weight sharing the
    /// one another instance of this version already loaded on `device`.
    fn module(
        &self,
        source: &ModelSource,
        path: &Path,
        device: LoadOn,
        settings: &Settings,
        label: &str,
    ) -> Result<Arc<Module>, BackendError> {
        let load = || {
            Module::load(path, device, settings.exec.inference_mode)
                .map(Arc::new)
                .map_err(|e| {
                    BackendError::Load(format!(
                        "{label}: failed to load model '{}': {e}",
                        source.model_name
                    ))
                })
        };
        if !settings.weight_sharing {
            return load();
        }
        let key = ShareKey {
            model: source.model_name.clone(),
            version: source.version,
            path: path.to_path_buf(),
            modified: std::fs::metadata(path).and_then(|m| m.modified()).ok(),
            device,
        };
        let mut shared = self.shared.lock();
        shared.retain(|_, module| module.strong_count() > 0);
        if let Some(module) = shared.get(&key).and_then(Weak::upgrade) {
            tracing::info!(model = %source.model_name, instance = source.instance_index, "reusing the TorchScript module of an earlier instance");
            return Ok(module);
        }
        let module = load()?;
        shared.insert(key, Arc::downgrade(&module));
        Ok(module)
    }
}

/// Triton reads `<path>/model.pt` when the model path is a folder.
fn model_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(DEFAULT_MODEL_FILENAME)
    } else {
        path.to_path_buf()
    }
}

/// Says which parameters do nothing where this instance runs.
fn log_inapplicable(settings: &Settings, source: &ModelSource) {
    let model = &source.model_name;
    if settings.cache_cleaning {
        tracing::info!(
            model,
            "ENABLE_CACHE_CLEANING accepted; it empties the CUDA cache, which Nereid does not do yet (there is none on the CPU)"
        );
    }
    if settings.nvfuser.is_some() {
        tracing::info!(
            model,
            "ENABLE_NVFUSER accepted and ignored: nvFuser is no longer part of libtorch"
        );
    }
}

impl Backend for TorchBackend {
    fn name(&self) -> &'static str {
        "pytorch"
    }

    fn platform(&self) -> &'static str {
        "pytorch_libtorch"
    }

    fn default_model_filename(&self) -> &'static str {
        DEFAULT_MODEL_FILENAME
    }

    /// libtorch's CUDA library loads and sees a device: models without an
    /// instance kind then run on every GPU, as in Triton.
    fn gpu_capable(&self) -> bool {
        ffi::cuda_ready(0).is_ok()
    }

    /// A TorchScript module's forward() runs the graph and nothing else.
    fn compute_only(&self) -> bool {
        true
    }

    /// forward()'s argument names: all a TorchScript file says of its
    /// inputs. `List[str]` arguments are BYTES; nothing else has a type or
    /// shape here, and outputs have no names at all.
    fn inspect(&self, model_path: &Path) -> Result<ModelIo, BackendError> {
        let path = model_file(model_path);
        let module = Module::load(&path, LoadOn::Cpu, true).map_err(|e| {
            BackendError::Load(format!(
                "cannot read TorchScript model '{}': {e}",
                path.display()
            ))
        })?;
        let inputs = module
            .arguments
            .iter()
            .filter(|a| a.kind != ArgKind::Dict)
            .map(|a| IoSpec {
                name: a.name.clone(),
                datatype: (a.kind == ArgKind::StringList).then_some(DataType::Bytes),
                dims: None,
            })
            .collect();
        Ok(ModelIo {
            inputs,
            outputs: Vec::new(),
        })
    }

    fn load(&self, source: &ModelSource) -> Result<Box<dyn ModelInstance>, BackendError> {
        let label = format!("model '{}' version {}", source.model_name, source.version);
        // KIND_MODEL: the module keeps the devices it was saved on and its
        // inputs are prepared on the CPU, as in Triton's PyTorch backend.
        let device = match source.device {
            Device::Cpu | Device::Model => None,
            Device::Gpu(id) => {
                ffi::cuda_ready(id).map_err(|e| {
                    BackendError::Unsupported(format!(
                        "{label}: instance {} asks for GPU {id}, but {e} (use instance_group kind KIND_CPU)",
                        source.instance_index
                    ))
                })?;
                Some(id)
            }
        };
        let path = model_file(&source.model_path);
        if !path.is_file() {
            return Err(BackendError::Load(format!(
                "{label}: unable to find '{}'",
                path.display()
            )));
        }
        let settings = Settings::from_config(&source.config)?;
        self.apply_threads(&settings, &source.model_name)?;
        log_inapplicable(&settings, source);
        let load_on = match (source.device, device) {
            (Device::Model, _) => LoadOn::AsSaved,
            (_, Some(id)) => LoadOn::Cuda(id),
            (_, None) => LoadOn::Cpu,
        };
        let module = self.module(source, &path, load_on, &settings, &label)?;
        let config = binding::with_sequence_tensors(&source.config)?;
        let inputs = binding::bind_inputs(&config, &module.arguments)?;
        let outputs = binding::bind_outputs(&config)?;
        tracing::debug!(model = %source.model_name, version = source.version, instance = source.instance_index,
            path = %path.display(), ?settings, ?inputs, "loaded TorchScript module");
        let label = format!("{label} instance {}", source.instance_index);
        Ok(Box::new(TorchInstance::new(
            label, module, inputs, outputs, settings, device,
        )))
    }
}
