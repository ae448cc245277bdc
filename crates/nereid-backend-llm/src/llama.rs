//! llama.cpp, as this backend uses it: the process-wide backend, its log
//! (to tracing, keeping the last error of the calling thread so a failed
//! load can say why), loading a model, and making its context.

use std::cell::RefCell;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::OnceLock;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::{KvCacheType, LlamaContextParams};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use nereid_core::BackendError;

use crate::gguf::Gguf;
use crate::settings::Settings;

/// Keys and values are kept as 8-bit blocks (Q8_0): half the memory of
/// f16, and it keeps a sequence's tokens independent of what runs beside
/// it. llama.cpp's CPU flash attention has kernels for f16 caches that it
/// picks by the shape of the pass (a tiled one for passes of 64 tokens or
/// more, one that splits the keys across threads for a pass of one token),
/// each rounding differently; for a Q8_0 cache it has one, so greedy
/// decoding batched gives the tokens it gives alone.
const KV_TYPE: KvCacheType = KvCacheType::Q8_0;

thread_local! {
    /// The last error llama.cpp logged on this thread.
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// llama.cpp's backend, initialized once per process.
pub fn backend() -> Result<&'static LlamaBackend, BackendError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            route_logs();
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| BackendError::Runtime(format!("llama.cpp failed to start: {e}")))
}

/// Loads the GGUF model at `path` (whose metadata is `gguf`) for `model`.
pub fn load(model: &str, path: &Path, gguf: &Gguf) -> Result<LlamaModel, BackendError> {
    let backend = backend()?;
    let (loaded, why) =
        with_last_error(|| LlamaModel::load_from_file(backend, path, &LlamaModelParams::default()));
    let architecture = gguf.architecture().unwrap_or("unknown");
    let loaded = loaded.map_err(|_| {
        BackendError::Load(format!(
            "model '{model}': llama.cpp cannot load {} (architecture '{architecture}'): {}",
            path.display(),
            if why.is_empty() {
                "no reason given"
            } else {
                &why
            }
        ))
    })?;
    if loaded.is_recurrent() || loaded.is_hybrid() {
        return Err(BackendError::Unsupported(format!(
            "model '{model}': architecture '{architecture}' keeps a recurrent state, which the \
             llamacpp backend's paged KV cache does not serve; it serves attention-only models \
             (llama, mistral, qwen2, ...)"
        )));
    }
    Ok(loaded)
}

/// The context (KV cache and compute buffers) for `settings`.
pub fn context<'m>(
    model: &'m LlamaModel,
    settings: &Settings,
) -> Result<LlamaContext<'m>, BackendError> {
    let cells = u32::try_from(settings.kv_cache_tokens).unwrap_or(u32::MAX);
    let batch = u32::try_from(settings.tokens_per_step).unwrap_or(u32::MAX);
    let threads = i32::try_from(settings.threads).unwrap_or(1);
    let sequences = u32::try_from(settings.slots()).unwrap_or(1);
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(cells))
        .with_n_batch(batch)
        .with_n_ubatch(batch)
        .with_type_k(KV_TYPE)
        .with_type_v(KV_TYPE)
        .with_n_seq_max(sequences)
        .with_kv_unified(true)
        .with_n_threads(threads)
        .with_n_threads_batch(threads)
        .with_flash_attention_policy(llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED);
    let backend = backend()?;
    let (context, why) = with_last_error(|| model.new_context(backend, params));
    context.map_err(|e| BackendError::Load(format!("llama.cpp cannot make a context: {e} {why}")))
}

/// Runs a llama.cpp call; its result, and the last error llama.cpp logged
/// on this thread during it (empty when none).
fn with_last_error<T>(call: impl FnOnce() -> T) -> (T, String) {
    LAST_ERROR.with(|e| e.borrow_mut().clear());
    let result = call();
    (result, LAST_ERROR.with(|e| e.borrow().trim().to_owned()))
}

#[expect(
    unsafe_code,
    reason = "installs llama.cpp's log callback, which has no safe wrapper"
)]
fn route_logs() {
    // SAFETY: `log` has the signature ggml's callback type declares and
    // reads only what llama.cpp passes it; no user data is given.
    unsafe {
        llama_cpp_sys_2::llama_log_set(Some(log), std::ptr::null_mut());
    }
}

#[expect(
    unsafe_code,
    reason = "a C callback reading the C string llama.cpp passes"
)]
unsafe extern "C" fn log(
    level: llama_cpp_sys_2::ggml_log_level,
    text: *const std::os::raw::c_char,
    _: *mut std::os::raw::c_void,
) {
    if text.is_null() {
        return;
    }
    // SAFETY: llama.cpp passes a NUL-terminated string that lives for
    // the duration of the call.
    let text = unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy();
    let line = text.trim_end();
    match level {
        llama_cpp_sys_2::GGML_LOG_LEVEL_ERROR => {
            LAST_ERROR.with(|e| *e.borrow_mut() = line.to_owned());
            tracing::error!(target: "llama.cpp", "{line}");
        }
        llama_cpp_sys_2::GGML_LOG_LEVEL_WARN => tracing::warn!(target: "llama.cpp", "{line}"),
        _ if !line.is_empty() => tracing::debug!(target: "llama.cpp", "{line}"),
        _ => {}
    }
}
