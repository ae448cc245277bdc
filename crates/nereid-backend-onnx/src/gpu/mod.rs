//! `KIND_GPU` instances: ONNX Runtime's CUDA execution provider on the
//! instance's GPU (after the TensorRT provider when the config asks for
//! it), from the same runtime-loaded library as CPU instances. That takes
//! the `onnxruntime-gpu` build of the library; with the CPU build a GPU
//! instance fails to load, and never falls back to CPU unannounced.

mod settings;
pub(crate) mod tensorrt;

use std::path::Path;

use ort::ep::{
    self, ArbitrarilyConfigurableExecutionProvider, ExecutionProvider, ExecutionProviderDispatch,
};

pub(crate) use settings::GpuSettings;

/// Whether the loaded library has the CUDA execution provider built in
/// (not whether CUDA itself can be loaded: that shows when one registers).
pub(crate) fn cuda_available() -> bool {
    provider_available::<ep::CUDA>()
}

fn provider_available<E: ExecutionProvider>() -> bool {
    E::is_available().unwrap_or_else(|e| {
        tracing::warn!(
            provider = E::NAME,
            "cannot list ONNX Runtime's execution providers: {e}"
        );
        false
    })
}

/// A provider to register, with the name to give when it fails.
pub(crate) struct Provider {
    pub(crate) name: &'static str,
    pub(crate) dispatch: ExecutionProviderDispatch,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The execution providers of an instance on GPU `device`, most preferred
/// first, each set to fail the load when it cannot register; or why the
/// instance cannot run there (to follow "model 'm' ... on GPU n: ").
pub(crate) fn providers(
    settings: &GpuSettings,
    device: u32,
    library: &Path,
) -> Result<Vec<Provider>, String> {
    let device = i32::try_from(device).map_err(|_| format!("GPU id {device} is out of range"))?;
    let mut providers = Vec::with_capacity(2);
    if let Some(options) = &settings.tensorrt {
        // Before asking ONNX Runtime: its own failure to load libnvinfer
        // comes only when the session is created, and says less.
        tensorrt::find_runtime()?;
        if !provider_available::<ep::TensorRT>() {
            return Err(missing_provider(library, "TensorRT"));
        }
        let trt = options.iter().fold(ep::TensorRT::default(), |trt, (k, v)| {
            trt.with_arbitrary_config(k, v)
        });
        providers.push(Provider {
            name: "TensorRT execution provider",
            dispatch: trt.with_device_id(device).build().error_on_failure(),
        });
    }
    if !cuda_available() {
        return Err(missing_provider(library, "CUDA"));
    }
    let cuda = settings
        .cuda
        .iter()
        .fold(ep::CUDA::default(), |cuda, (k, v)| {
            cuda.with_arbitrary_config(k, v)
        });
    providers.push(Provider {
        name: "CUDA execution provider",
        dispatch: cuda.with_device_id(device).build().error_on_failure(),
    });
    Ok(providers)
}

fn missing_provider(library: &Path, provider: &str) -> String {
    format!(
        "the ONNX Runtime library at '{}' was built without the {provider} execution provider; \
         install onnxruntime-gpu and point ORT_DYLIB_PATH at its libonnxruntime.so \
         (`make run GPU=1` sets it up), or use instance_group kind KIND_CPU",
        library.display()
    )
}
