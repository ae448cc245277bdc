//! Backends for other crates' tests (the `testing` feature): a backend
//! made of a name and the function that answers each batch, and the
//! element-wise INT32 arithmetic such test models do.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::{Backend, BackendError, Batch, ModelInstance, ModelIo, ModelSource, Tensor};

type Execute = dyn Fn(&Batch) -> Result<Vec<Tensor>, BackendError> + Send + Sync;

/// A backend called `name` whose every instance answers a batch with
/// `execute`. Its platform is `<name>_platform` and a version folder
/// holds `model.<name>` (any content). It declares no inputs or outputs:
/// the tests' configs do.
pub struct FnBackend {
    name: &'static str,
    platform: &'static str,
    default_model_filename: &'static str,
    execute: Arc<Execute>,
}

impl FnBackend {
    pub fn new(
        name: &'static str,
        execute: impl Fn(&Batch) -> Result<Vec<Tensor>, BackendError> + Send + Sync + 'static,
    ) -> FnBackend {
        // Test code: two short strings per backend live for the process.
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        FnBackend {
            name,
            platform: leak(format!("{name}_platform")),
            default_model_filename: leak(format!("model.{name}")),
            execute: Arc::new(execute),
        }
    }
}

impl std::fmt::Debug for FnBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnBackend")
            .field("name", &self.name)
            .finish()
    }
}

struct FnInstance(Arc<Execute>);

impl Backend for FnBackend {
    fn name(&self) -> &'static str {
        self.name
    }
    fn platform(&self) -> &'static str {
        self.platform
    }
    fn default_model_filename(&self) -> &'static str {
        self.default_model_filename
    }
    fn inspect(&self, _: &Path) -> Result<ModelIo, BackendError> {
        Ok(ModelIo::default())
    }
    fn load(&self, _: &ModelSource) -> Result<Box<dyn ModelInstance>, BackendError> {
        Ok(Box::new(FnInstance(Arc::clone(&self.execute))))
    }
}

impl ModelInstance for FnInstance {
    fn execute(&mut self, batch: &Batch) -> Result<Vec<Tensor>, BackendError> {
        (self.0)(batch)
    }
}

/// The elements of an INT32 tensor's data.
pub fn int32s(data: &[u8]) -> Vec<i32> {
    data.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `input`, an INT32 tensor, with `f` applied to each element, as the
/// output `name`.
pub fn map_int32(input: &Tensor, name: &str, f: impl Fn(i32) -> i32) -> Tensor {
    let data: Vec<u8> = int32s(&input.data)
        .into_iter()
        .flat_map(|v| f(v).to_le_bytes())
        .collect();
    Tensor {
        name: name.to_owned(),
        data: Bytes::from(data),
        ..input.clone()
    }
}

/// A config named `name` with string `parameters`, as backends' tests of
/// their settings and loads build them.
pub fn config_with(name: &str, parameters: &[(&str, &str)]) -> crate::model_config::ModelConfig {
    let mut config = crate::model_config::ModelConfig {
        name: name.into(),
        ..Default::default()
    };
    for (key, value) in parameters {
        config.parameters.insert(
            key.to_string(),
            crate::model_config::ModelParameter {
                string_value: value.to_string(),
            },
        );
    }
    config
}
