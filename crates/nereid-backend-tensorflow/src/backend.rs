//! [`TensorflowBackend`]: reads a SavedModel's signature for autofill and
//! creates instances, each with a session of its own.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use nereid_core::model_config::ModelConfig;
use nereid_core::{Backend, BackendError, Device, ModelInstance, ModelIo, ModelSource};

use crate::binding;
use crate::ffi::{Api, LIBRARY, Session};
use crate::instance::{Bound, TensorflowInstance};
use crate::settings::Settings;
use crate::signature::{self, SAVED_MODEL_FILE};

/// The folder a version holds when the config names none (Triton's).
const DEFAULT_MODEL_FILENAME: &str = "model.savedmodel";

/// Triton's `tensorflow` backend for `tensorflow_savedmodel` models, on
/// TensorFlow's C API. The library is opened when the first model loads;
/// without it, models fail to load with how to install it, and everything
/// else (autofill included) works.
#[derive(Debug)]
pub struct TensorflowBackend {
    /// The folder holding `libtensorflow_cc.so.2`; `None`: the loader's path.
    library_dir: Option<PathBuf>,
    api: OnceLock<Result<Arc<Api>, String>>,
}

impl TensorflowBackend {
    pub fn new(library_dir: Option<PathBuf>) -> Self {
        TensorflowBackend {
            library_dir,
            api: OnceLock::new(),
        }
    }

    /// TensorFlow's version, loading the library if it is not yet: `Err`
    /// says why it cannot load and how to install it.
    pub fn runtime_version(&self) -> Result<String, BackendError> {
        self.api().map(|api| api.version.clone())
    }

    fn api(&self) -> Result<Arc<Api>, BackendError> {
        let loaded = self.api.get_or_init(|| {
            let api = Api::load(self.library_dir.as_deref());
            match &api {
                Ok(api) => tracing::info!(version = %api.version, "loaded TensorFlow's C API"),
                Err(e) => tracing::warn!(error = %e, "TensorFlow's C API is not available"),
            }
            api
        });
        loaded.clone().map_err(|e| {
            let place = self.library_dir.as_ref().map_or_else(
                || "the loader's path".to_owned(),
                |d| format!("'{}'", d.display()),
            );
            BackendError::Runtime(format!(
                "TensorFlow's C API ({LIBRARY}) could not be loaded from {place}: {e}. \
                 Install it with scripts/setup-tensorflow.sh (it prints the folder) and start \
                 nereid with --tensorflow-library-dir=<that folder> or TENSORFLOW_DIR set to it; \
                 `make run TF=1` does both"
            ))
        })
    }
}

impl Backend for TensorflowBackend {
    fn name(&self) -> &'static str {
        "tensorflow"
    }

    fn platform(&self) -> &'static str {
        "tensorflow_savedmodel"
    }

    fn default_model_filename(&self) -> &'static str {
        DEFAULT_MODEL_FILENAME
    }

    /// TF Serving keeps `saved_model.pb` and `variables/` in the version
    /// folder itself; Triton in `model.savedmodel/` inside it. Both serve.
    fn model_path(&self, version_dir: &Path, file: &str) -> PathBuf {
        let triton = version_dir.join(file);
        if !triton.exists() && version_dir.join(SAVED_MODEL_FILE).is_file() {
            return version_dir.to_path_buf();
        }
        triton
    }

    /// A SavedModel runs its graph and nothing else.
    fn compute_only(&self) -> bool {
        true
    }

    fn inspect(&self, model_path: &Path) -> Result<ModelIo, BackendError> {
        self.inspect_for(&ModelConfig::default(), model_path)
    }

    /// The signature the config's parameters choose (or Triton's default),
    /// read from `saved_model.pb`: no library needed.
    fn inspect_for(
        &self,
        config: &ModelConfig,
        model_path: &Path,
    ) -> Result<ModelIo, BackendError> {
        let settings = Settings::from_config(config)?;
        signature::read_signature(model_path, &settings.tag, settings.signature.as_deref())
            .map(|s| s.model_io())
            .map_err(|e| BackendError::Load(e.to_string()))
    }

    fn load(&self, source: &ModelSource) -> Result<Box<dyn ModelInstance>, BackendError> {
        let label = format!("model '{}' version {}", source.model_name, source.version);
        if let Device::Gpu(id) = source.device {
            return Err(BackendError::Unsupported(format!(
                "{label}: instance {} asks for GPU {id}, but the tensorflow-cpu library has no GPU support (use instance_group kind KIND_CPU)",
                source.instance_index
            )));
        }
        let api = self.api()?;
        let settings = Settings::from_config(&source.config)?;
        // `model.savedmodel/`, or the version folder in TF Serving's layout.
        let dir = source.model_path.as_path();
        let signature =
            signature::read_signature(dir, &settings.tag, settings.signature.as_deref())
                .map_err(|e| BackendError::Load(format!("{label}: {e}")))?;
        let (inputs, outputs) = binding::check(&source.config, &signature)?;
        let session = Session::load(
            Arc::clone(&api),
            dir,
            &settings.tag,
            &settings.session_config(),
        )
        .map_err(|e| {
            BackendError::Load(format!(
                "{label}: TensorFlow cannot load the SavedModel '{}': {e}",
                dir.display()
            ))
        })?;
        let bind = |checked: Vec<binding::Checked>| {
            checked
                .into_iter()
                .map(|c| {
                    let graph = session.output(&c.graph_tensor).ok_or_else(|| {
                        BackendError::Load(format!(
                            "{label}: signature '{}' names tensor '{}' for '{}', which the graph does not have",
                            signature.key, c.graph_tensor, c.name
                        ))
                    })?;
                    Ok(Bound {
                        name: c.name,
                        datatype: c.datatype,
                        graph,
                        reported_dims: c.reported_dims,
                    })
                })
                .collect::<Result<Vec<_>, BackendError>>()
        };
        let (inputs, outputs) = (bind(inputs)?, bind(outputs)?);
        tracing::debug!(model = %source.model_name, version = source.version, instance = source.instance_index,
            path = %dir.display(), signature = %signature.key, ?settings, "loaded SavedModel");
        let label = format!("{label} instance {}", source.instance_index);
        Ok(Box::new(TensorflowInstance::new(
            label,
            api,
            session,
            inputs,
            outputs,
            source.config.max_batch_size > 0,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_library_a_load_says_how_to_install_it() {
        let backend = TensorflowBackend::new(Some(PathBuf::from("/nonexistent/tensorflow")));
        let err = backend.runtime_version().unwrap_err().to_string();
        assert!(err.contains("libtensorflow_cc.so.2"), "{err}");
        assert!(err.contains("scripts/setup-tensorflow.sh"), "{err}");
        assert!(err.contains("'/nonexistent/tensorflow'"), "{err}");
    }

    #[test]
    fn a_version_folder_holding_saved_model_pb_is_the_model() {
        let backend = TensorflowBackend::new(None);
        let version = tempfile::tempdir().unwrap();
        let triton = version.path().join(DEFAULT_MODEL_FILENAME);
        assert_eq!(
            backend.model_path(version.path(), DEFAULT_MODEL_FILENAME),
            triton
        );
        std::fs::write(version.path().join(SAVED_MODEL_FILE), b"").unwrap();
        assert_eq!(
            backend.model_path(version.path(), DEFAULT_MODEL_FILENAME),
            version.path(),
            "TF Serving's layout"
        );
        std::fs::create_dir(&triton).unwrap();
        assert_eq!(
            backend.model_path(version.path(), DEFAULT_MODEL_FILENAME),
            triton,
            "Triton's layout wins when both are there"
        );
    }
}
