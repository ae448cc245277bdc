//! The process-wide ONNX Runtime: the shared library is loaded once and one
//! `ort` environment is created and kept for the life of the process.
//!
//! `ort` allows a single environment per process, and refuses to build a
//! second one even after the first was dropped, so the environment lives in
//! a static and is never released. A failed load leaves nothing behind, so a
//! later attempt (with a corrected path) can still succeed.
//!
//! The environment owns the process-wide intra-op thread pool: one thread
//! per core, shared by every session whose config sets no thread count, so
//! two instances of a model (or two models) busy at once split the cores
//! instead of each running a thread per core, and one instance busy alone
//! has them all. Its threads spin briefly between runs (ONNX Runtime's
//! default): with one pool there is one spinning worker per core at most,
//! not one per core per instance, and measured on the MLPs of
//! `benches/batching.sh` turning it off doubled the small MLP's p50 at
//! concurrency 1 (231 to 451 µs) and won nothing at concurrency 64.

use std::path::{Path, PathBuf};

use nereid_core::BackendError;
use ort::environment::{Environment, GlobalThreadPoolOptions};
use parking_lot::Mutex;

/// The environment variable naming the ONNX Runtime shared library.
pub const ORT_DYLIB_PATH: &str = "ORT_DYLIB_PATH";

/// The loaded runtime: where it came from and the environment built on it.
#[derive(Debug, Clone)]
pub(crate) struct Runtime {
    pub(crate) library: PathBuf,
    pub(crate) environment: Environment,
}

static RUNTIME: Mutex<Option<Runtime>> = Mutex::new(None);

/// The library to load: the explicit path, else `ORT_DYLIB_PATH`, else the
/// platform's library name for the dynamic loader to find.
pub(crate) fn library_path(explicit: Option<PathBuf>) -> PathBuf {
    explicit
        .or_else(|| {
            std::env::var_os(ORT_DYLIB_PATH)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| {
            PathBuf::from(format!(
                "{}onnxruntime{}",
                std::env::consts::DLL_PREFIX,
                std::env::consts::DLL_SUFFIX
            ))
        })
}

/// Loads ONNX Runtime from `library` on first use and returns the shared
/// runtime; later calls must name the same library.
pub(crate) fn runtime(library: &Path) -> Result<Runtime, BackendError> {
    let mut slot = RUNTIME.lock();
    if let Some(runtime) = slot.as_ref() {
        if !same_file(&runtime.library, library) {
            return Err(BackendError::Runtime(format!(
                "ONNX Runtime is already loaded from '{}' in this process; cannot also load '{}'",
                runtime.library.display(),
                library.display()
            )));
        }
        return Ok(runtime.clone());
    }
    let environment = ort::init_from(library)
        .map_err(|e| {
            BackendError::Runtime(format!(
                "cannot load ONNX Runtime from '{}' (set {ORT_DYLIB_PATH} to libonnxruntime.so >= 1.{}): {}",
                library.display(),
                ort::MINOR_VERSION,
                load_error_text(&e)
            ))
        })?
        .with_name("nereid")
        .with_telemetry(false)
        .with_global_thread_pool(shared_pool().map_err(|e| {
            BackendError::Runtime(format!("cannot set up ONNX Runtime's thread pool: {e}"))
        })?)
        .build()
        .map_err(|e| {
            BackendError::Runtime(format!(
                "cannot create an ONNX Runtime environment from '{}': {e}",
                library.display()
            ))
        })?;
    tracing::info!(library = %library.display(), "loaded ONNX Runtime");
    let runtime = Runtime {
        library: library.to_path_buf(),
        environment,
    };
    *slot = Some(runtime.clone());
    Ok(runtime)
}

/// The process-wide pool: a thread per core; inter-op
/// parallelism stays off (sessions that ask for it get a pool of their own).
fn shared_pool() -> ort::Result<GlobalThreadPoolOptions> {
    GlobalThreadPoolOptions::default()
        .with_intra_threads(shared_pool_threads())?
        .with_inter_threads(1)?
        .with_spin_control(true)
}

/// Intra-op threads of the process-wide pool: one per core the process
/// may use.
pub(crate) fn shared_pool_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// The load error with its cause: libloading says only "dlopen failed" and
/// keeps the loader's reason (file not found, wrong ELF class) as its source.
fn load_error_text(e: &ort::LoadDynamicError) -> String {
    let mut text = e.to_string();
    if let ort::LoadDynamicError::Dlopen { error, .. } = e {
        let mut cause = std::error::Error::source(error);
        while let Some(c) = cause {
            text = format!("{text}: {c}");
            cause = c.source();
        }
    }
    text
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b)
}
