//! The part of TensorFlow's C API (`tensorflow/c/c_api.h`, `tf_tensor.h`,
//! `tf_tstring.h`) this backend calls, looked up at run time in
//! `libtensorflow_cc.so.2` with `libloading`, and safe types over it:
//! [`Api`], [`Session`] and [`OwnedTensor`]. Nothing links at build time,
//! so the crate builds, and the server starts, without the library.
//!
//! The library is never closed once opened: TensorFlow registers kernels
//! and threads in static state that does not survive a `dlclose`.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::mem::ManuallyDrop;
use std::path::Path;
use std::sync::Arc;

use libloading::Library;

mod tensor;
pub(crate) use tensor::OwnedTensor;

/// The library the C API lives in (with `libtensorflow_framework.so.2`
/// beside it, which it loads itself).
pub(crate) const LIBRARY: &str = "libtensorflow_cc.so.2";

macro_rules! opaque {
    ($($name:ident),*) => {$(
        #[repr(C)]
        pub(crate) struct $name {
            _private: [u8; 0],
        }
    )*};
}
opaque!(
    TfStatus,
    TfGraph,
    TfSessionOptions,
    TfSession,
    TfOperation,
    TfTensor,
    TfBuffer
);

/// `TF_Output`: one output of one graph operation.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct TfOutput {
    oper: *mut TfOperation,
    index: c_int,
}

// SAFETY: a TfOutput points at an operation of a graph a Session owns; only
// TensorFlow dereferences it, through that session, which may run on any
// thread.
unsafe impl Send for TfOutput {}

/// `TF_TString`: 24 bytes, whatever representation the string takes.
#[repr(C, align(8))]
struct TfTString([u8; 24]);

/// `TF_STRING` in `TF_DataType`.
pub(crate) const TF_STRING: c_int = 7;

macro_rules! functions {
    ($($field:ident = $symbol:literal: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        struct Functions {
            $($field: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        impl Functions {
            /// # Safety
            /// `library` must be TensorFlow's C API, whose functions have
            /// these signatures.
            unsafe fn load(library: &Library) -> Result<Self, String> {
                Ok(Functions {
                    $($field: *unsafe { library.get(concat!($symbol, "\0").as_bytes()) }
                        .map_err(|e| format!("{}: {e}", $symbol))?,)*
                })
            }
        }
    };
}

functions! {
    version = "TF_Version": fn() -> *const c_char;
    new_status = "TF_NewStatus": fn() -> *mut TfStatus;
    delete_status = "TF_DeleteStatus": fn(*mut TfStatus);
    get_code = "TF_GetCode": fn(*const TfStatus) -> c_int;
    message = "TF_Message": fn(*const TfStatus) -> *const c_char;
    new_graph = "TF_NewGraph": fn() -> *mut TfGraph;
    delete_graph = "TF_DeleteGraph": fn(*mut TfGraph);
    new_session_options = "TF_NewSessionOptions": fn() -> *mut TfSessionOptions;
    delete_session_options = "TF_DeleteSessionOptions": fn(*mut TfSessionOptions);
    set_config = "TF_SetConfig": fn(*mut TfSessionOptions, *const c_void, usize, *mut TfStatus);
    load_saved_model = "TF_LoadSessionFromSavedModel": fn(
        *const TfSessionOptions, *const TfBuffer, *const c_char, *const *const c_char, c_int,
        *mut TfGraph, *mut TfBuffer, *mut TfStatus) -> *mut TfSession;
    close_session = "TF_CloseSession": fn(*mut TfSession, *mut TfStatus);
    delete_session = "TF_DeleteSession": fn(*mut TfSession, *mut TfStatus);
    operation_by_name = "TF_GraphOperationByName": fn(*mut TfGraph, *const c_char) -> *mut TfOperation;
    session_run = "TF_SessionRun": fn(
        *mut TfSession, *const TfBuffer,
        *const TfOutput, *const *mut TfTensor, c_int,
        *const TfOutput, *mut *mut TfTensor, c_int,
        *const *const TfOperation, c_int, *mut TfBuffer, *mut TfStatus);
    allocate_tensor = "TF_AllocateTensor": fn(c_int, *const i64, c_int, usize) -> *mut TfTensor;
    delete_tensor = "TF_DeleteTensor": fn(*mut TfTensor);
    tensor_data = "TF_TensorData": fn(*const TfTensor) -> *mut c_void;
    tensor_byte_size = "TF_TensorByteSize": fn(*const TfTensor) -> usize;
    num_dims = "TF_NumDims": fn(*const TfTensor) -> c_int;
    dim = "TF_Dim": fn(*const TfTensor, c_int) -> i64;
    tensor_type = "TF_TensorType": fn(*const TfTensor) -> c_int;
    string_init = "TF_StringInit": fn(*mut TfTString);
    string_copy = "TF_StringCopy": fn(*mut TfTString, *const c_char, usize);
    string_data = "TF_StringGetDataPointer": fn(*const TfTString) -> *const c_char;
    string_size = "TF_StringGetSize": fn(*const TfTString) -> usize;
    string_dealloc = "TF_StringDealloc": fn(*mut TfTString);
}

/// TensorFlow's C API, loaded.
pub(crate) struct Api {
    functions: Functions,
    _library: ManuallyDrop<Library>,
    pub(crate) version: String,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("version", &self.version)
            .finish()
    }
}

impl Api {
    /// Opens [`LIBRARY`] in `dir`, or where the loader looks (`LD_LIBRARY_PATH`).
    pub(crate) fn load(dir: Option<&Path>) -> Result<Arc<Api>, String> {
        let path = dir.map_or_else(|| LIBRARY.into(), |d| d.join(LIBRARY));
        // SAFETY: loading TensorFlow runs only its static initialisers.
        let library =
            unsafe { Library::new(&path) }.map_err(|e| nereid_core::error::with_causes(&e))?;
        // SAFETY: the library is TensorFlow's C API; the signatures are
        // c_api.h's, tf_tensor.h's and tf_tstring.h's.
        let functions = unsafe { Functions::load(&library) }?;
        // SAFETY: TF_Version returns a static NUL-terminated string.
        let version = unsafe { CStr::from_ptr((functions.version)()) }
            .to_string_lossy()
            .into_owned();
        Ok(Arc::new(Api {
            functions,
            _library: ManuallyDrop::new(library),
            version,
        }))
    }
}

/// A `TF_Status`, deleted on drop.
struct Status<'a> {
    api: &'a Api,
    raw: *mut TfStatus,
}

impl<'a> Status<'a> {
    fn new(api: &'a Api) -> Self {
        // SAFETY: TF_NewStatus has no preconditions.
        let raw = unsafe { (api.functions.new_status)() };
        Status { api, raw }
    }

    /// `Err` with TensorFlow's message when the call failed.
    fn check(&self) -> Result<(), String> {
        // SAFETY: `raw` is a live status; the message lives as long as it.
        unsafe {
            if (self.api.functions.get_code)(self.raw) == 0 {
                return Ok(());
            }
            Err(CStr::from_ptr((self.api.functions.message)(self.raw))
                .to_string_lossy()
                .into_owned())
        }
    }
}

impl Drop for Status<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from TF_NewStatus and is deleted once.
        unsafe { (self.api.functions.delete_status)(self.raw) }
    }
}

/// A SavedModel loaded into a session, with the graph it runs.
pub(crate) struct Session {
    api: Arc<Api>,
    graph: *mut TfGraph,
    session: *mut TfSession,
}

// SAFETY: TensorFlow's sessions and graphs may be used from any thread, and
// TF_SessionRun concurrently (c_api.h); nothing here is thread-local.
unsafe impl Send for Session {}
// SAFETY: as above; `&Session` only runs the session and looks up operations.
unsafe impl Sync for Session {}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

impl Session {
    /// Loads the SavedModel in `dir`, graph tagged `tag`, with `config` (a
    /// serialized `ConfigProto`; empty: TensorFlow's defaults).
    pub(crate) fn load(
        api: Arc<Api>,
        dir: &Path,
        tag: &str,
        config: &[u8],
    ) -> Result<Self, String> {
        let dir = c_string(&dir.to_string_lossy())?;
        let tag = c_string(tag)?;
        let f = &api.functions;
        let status = Status::new(&api);
        // SAFETY: every pointer is live for the calls; the options are
        // deleted once, the graph is owned by the returned Session (or
        // deleted here when loading failed).
        unsafe {
            let options = (f.new_session_options)();
            if !config.is_empty() {
                (f.set_config)(options, config.as_ptr().cast(), config.len(), status.raw);
            }
            let configured = status.check();
            let graph = (f.new_graph)();
            let tags = [tag.as_ptr()];
            let session = match configured {
                Ok(()) => (f.load_saved_model)(
                    options,
                    std::ptr::null(),
                    dir.as_ptr(),
                    tags.as_ptr(),
                    1,
                    graph,
                    std::ptr::null_mut(),
                    status.raw,
                ),
                Err(_) => std::ptr::null_mut(),
            };
            (f.delete_session_options)(options);
            let loaded = configured.and_then(|()| status.check());
            if let Err(e) = loaded {
                (f.delete_graph)(graph);
                return Err(e);
            }
            drop(status);
            Ok(Session {
                api,
                graph,
                session,
            })
        }
    }

    /// The graph tensor `op:index` (`op` alone is index 0).
    pub(crate) fn output(&self, tensor: &str) -> Option<TfOutput> {
        let (op, index) = match tensor.rsplit_once(':') {
            Some((op, index)) => (op, index.parse().ok()?),
            None => (tensor, 0),
        };
        let op = CString::new(op).ok()?;
        // SAFETY: the graph is live; the name is NUL-terminated.
        let oper = unsafe { (self.api.functions.operation_by_name)(self.graph, op.as_ptr()) };
        (!oper.is_null()).then_some(TfOutput { oper, index })
    }

    /// Feeds `inputs` and fetches `outputs`, in order.
    pub(crate) fn run(
        &self,
        inputs: &[(TfOutput, &OwnedTensor)],
        outputs: &[TfOutput],
    ) -> Result<Vec<OwnedTensor>, String> {
        let feeds: Vec<TfOutput> = inputs.iter().map(|(o, _)| *o).collect();
        let values: Vec<*mut TfTensor> = inputs.iter().map(|(_, t)| t.raw).collect();
        let mut fetched: Vec<*mut TfTensor> = vec![std::ptr::null_mut(); outputs.len()];
        let status = Status::new(&self.api);
        // SAFETY: the arrays have the lengths passed; TensorFlow fills
        // `fetched` with tensors the caller owns when the run succeeds.
        unsafe {
            (self.api.functions.session_run)(
                self.session,
                std::ptr::null(),
                feeds.as_ptr(),
                values.as_ptr(),
                len(feeds.len())?,
                outputs.as_ptr(),
                fetched.as_mut_ptr(),
                len(outputs.len())?,
                std::ptr::null(),
                0,
                std::ptr::null_mut(),
                status.raw,
            );
        }
        let owned: Vec<OwnedTensor> = fetched
            .into_iter()
            .filter(|t| !t.is_null())
            .map(|raw| OwnedTensor {
                api: Arc::clone(&self.api),
                raw,
                own_strings: false,
            })
            .collect();
        status.check()?;
        if owned.len() != outputs.len() {
            return Err(format!(
                "TensorFlow returned {} of {} outputs",
                owned.len(),
                outputs.len()
            ));
        }
        Ok(owned)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let f = &self.api.functions;
        let status = Status::new(&self.api);
        // SAFETY: session and graph are live and deleted once, the session
        // first (it refers to the graph).
        unsafe {
            (f.close_session)(self.session, status.raw);
            (f.delete_session)(self.session, status.raw);
            (f.delete_graph)(self.graph);
        }
        if let Err(e) = status.check() {
            tracing::warn!(error = %e, "closing a TensorFlow session failed");
        }
    }
}

fn c_string(text: &str) -> Result<CString, String> {
    CString::new(text).map_err(|_| format!("'{text}' holds a NUL byte"))
}

fn len(n: usize) -> Result<c_int, String> {
    c_int::try_from(n).map_err(|_| format!("{n} is too many for TensorFlow's C API"))
}
