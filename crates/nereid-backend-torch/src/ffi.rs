//! Safe wrappers over `src/shim.cpp`. All of this crate's `unsafe` lives
//! here: each call hands the shim pointers it reads only for the duration
//! of the call, and each handle is freed exactly once, by its `Drop`.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::Path;
use std::ptr::NonNull;

#[repr(C)]
struct RawModule {
    _private: [u8; 0],
}

#[repr(C)]
struct RawOutputs {
    _private: [u8; 0],
}

#[repr(C)]
struct RawArg {
    name: *const c_char,
    tensor: *mut c_void,
    strings: *const *const c_char,
    string_lens: *const usize,
    string_count: usize,
}

#[repr(C)]
struct RawExecOptions {
    optimized_execution: bool,
    inference_mode: bool,
    jit_profiling: c_int,
    jit_executor: c_int,
    dict_input: bool,
}

unsafe extern "C" {
    fn ntm_free_string(s: *mut c_char);
    fn ntm_cuda_ready(device_index: c_int) -> *mut c_char;
    fn ntm_load(
        path: *const c_char,
        device_index: c_int,
        inference_mode: bool,
        out: *mut *mut RawModule,
    ) -> *mut c_char;
    fn ntm_free(module: *mut RawModule);
    fn ntm_arg_count(module: *const RawModule) -> usize;
    fn ntm_arg_name(module: *const RawModule, i: usize) -> *const c_char;
    fn ntm_arg_type(module: *const RawModule, i: usize) -> *const c_char;
    fn ntm_arg_kind(module: *const RawModule, i: usize) -> c_int;
    fn ntm_set_threads(intra_op: c_int, inter_op: c_int) -> *mut c_char;
    fn ntm_forward(
        module: *const RawModule,
        args: *const RawArg,
        arg_count: usize,
        options: *const RawExecOptions,
        out: *mut *mut RawOutputs,
    ) -> *mut c_char;
    fn ntm_outputs_free(outputs: *mut RawOutputs);
    fn ntm_outputs_count(outputs: *const RawOutputs) -> usize;
    fn ntm_output_kind(outputs: *const RawOutputs, i: usize) -> c_int;
    fn ntm_output_tensor(
        outputs: *const RawOutputs,
        i: usize,
        out: *mut *mut c_void,
    ) -> *mut c_char;
    fn ntm_output_string_count(outputs: *const RawOutputs, i: usize) -> usize;
    fn ntm_output_string(
        outputs: *const RawOutputs,
        i: usize,
        j: usize,
        data: *mut *const c_char,
        len: *mut usize,
    );
}

/// Turns the shim's error (a malloc'd message, or null for success) into a
/// `Result`, freeing the message.
fn check(error: *mut c_char) -> Result<(), String> {
    if error.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null error is a NUL-terminated string the shim
    // allocated for us; it is read once and freed once.
    let message = unsafe { CStr::from_ptr(error) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: as above.
    unsafe { ntm_free_string(error) };
    Err(message)
}

/// Makes libtorch's CUDA half usable and checks that `device` exists.
pub(crate) fn cuda_ready(device: u32) -> Result<(), String> {
    let index = c_int::try_from(device).map_err(|_| format!("no CUDA device {device}"))?;
    // SAFETY: plain value in, error string out.
    check(unsafe { ntm_cuda_ready(index) })
}

/// Sizes libtorch's process-wide intra-op and inter-op pools (0 leaves one
/// as it is).
pub(crate) fn set_threads(intra_op: i32, inter_op: i32) -> Result<(), String> {
    // SAFETY: plain values in, error string out.
    check(unsafe { ntm_set_threads(intra_op, inter_op) })
}

/// What a forward() argument is, as far as the backend cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArgKind {
    Tensor,
    StringList,
    Dict,
    Other,
}

/// One argument of forward(), `self` excluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Argument {
    pub(crate) name: String,
    /// TorchScript's spelling of its type ("Tensor", "List[str]").
    pub(crate) type_name: String,
    pub(crate) kind: ArgKind,
}

/// A loaded TorchScript module.
#[derive(Debug)]
pub(crate) struct Module {
    raw: NonNull<RawModule>,
    pub(crate) arguments: Vec<Argument>,
}

// SAFETY: a torch::jit::Module may be used from any thread, and forward()
// may run on several threads at once (Triton shares one module between
// instances the same way); the handle's schema vectors are never written
// after loading.
unsafe impl Send for Module {}
// SAFETY: see above.
unsafe impl Sync for Module {}

/// A value for one forward() argument.
#[derive(Debug)]
pub(crate) enum Arg<'a> {
    Tensor(&'a tch::Tensor),
    Strings(&'a [&'a [u8]]),
}

/// Triton's per-execution settings (see `settings.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExecOptions {
    pub(crate) optimized_execution: bool,
    pub(crate) inference_mode: bool,
    pub(crate) jit_profiling: Option<bool>,
    pub(crate) jit_executor: Option<bool>,
}

fn tristate(value: Option<bool>) -> c_int {
    value.map_or(-1, c_int::from)
}

fn c_string(text: &str, what: &str) -> Result<CString, String> {
    CString::new(text).map_err(|_| format!("{what} '{text}' contains a NUL byte"))
}

/// Where a module's tensors go when it is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LoadOn {
    Cpu,
    Cuda(u32),
    /// Where they were when the module was saved (`KIND_MODEL`: a module
    /// that spreads itself over devices keeps its layout, as in Triton).
    AsSaved,
}

impl Module {
    /// Loads `path` with its tensors on `device`.
    pub(crate) fn load(path: &Path, device: LoadOn, inference_mode: bool) -> Result<Self, String> {
        let path_text = path
            .to_str()
            .ok_or_else(|| format!("path '{}' is not UTF-8", path.display()))?;
        let c_path = c_string(path_text, "path")?;
        let index = match device {
            LoadOn::Cpu => -1,
            LoadOn::AsSaved => -2,
            LoadOn::Cuda(d) => c_int::try_from(d).map_err(|_| format!("no CUDA device {d}"))?,
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: the path is a valid C string for the call; on success the
        // shim stores a new handle in `raw`, owned from here by `Module`.
        check(unsafe { ntm_load(c_path.as_ptr(), index, inference_mode, &mut raw) })?;
        let raw = NonNull::new(raw).ok_or("the TorchScript loader returned no module")?;
        let mut module = Module {
            raw,
            arguments: Vec::new(),
        };
        module.arguments = module.read_arguments();
        Ok(module)
    }

    fn read_arguments(&self) -> Vec<Argument> {
        let raw = self.raw.as_ptr();
        // SAFETY: `raw` is a live handle; the strings it returns live as
        // long as it does and are copied at once.
        let count = unsafe { ntm_arg_count(raw) };
        (0..count)
            .map(|i| {
                // SAFETY: `i` is below the count the handle reported.
                let (name, type_name, kind) = unsafe {
                    (
                        CStr::from_ptr(ntm_arg_name(raw, i))
                            .to_string_lossy()
                            .into_owned(),
                        CStr::from_ptr(ntm_arg_type(raw, i))
                            .to_string_lossy()
                            .into_owned(),
                        ntm_arg_kind(raw, i),
                    )
                };
                let kind = match kind {
                    0 => ArgKind::Tensor,
                    1 => ArgKind::StringList,
                    2 => ArgKind::Dict,
                    _ => ArgKind::Other,
                };
                Argument {
                    name,
                    type_name,
                    kind,
                }
            })
            .collect()
    }

    /// Runs forward(). With `dict_names`, the arguments (tensors only) go in
    /// as one `Dict[str, Tensor]` keyed by those names.
    pub(crate) fn forward(
        &self,
        args: &[Arg<'_>],
        dict_names: Option<&[&str]>,
        options: ExecOptions,
    ) -> Result<Outputs, String> {
        let names: Vec<CString> = match dict_names {
            Some(names) => names
                .iter()
                .map(|n| c_string(n, "input name"))
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        // Per argument, the element pointers and lengths of a string list;
        // they must outlive the call, so they are built before `raw_args`.
        let strings: Vec<(Vec<*const c_char>, Vec<usize>)> = args
            .iter()
            .map(|arg| match arg {
                Arg::Strings(elements) => (
                    elements
                        .iter()
                        .map(|e| e.as_ptr().cast::<c_char>())
                        .collect(),
                    elements.iter().map(|e| e.len()).collect(),
                ),
                Arg::Tensor(_) => (Vec::new(), Vec::new()),
            })
            .collect();
        let raw_args: Vec<RawArg> = args
            .iter()
            .zip(&strings)
            .enumerate()
            .map(|(i, (arg, (ptrs, lens)))| RawArg {
                name: names.get(i).map_or(std::ptr::null(), |n| n.as_ptr()),
                tensor: match arg {
                    Arg::Tensor(t) => t.as_ptr().cast_mut().cast::<c_void>(),
                    Arg::Strings(_) => std::ptr::null_mut(),
                },
                strings: ptrs.as_ptr(),
                string_lens: lens.as_ptr(),
                string_count: ptrs.len(),
            })
            .collect();
        let raw_options = RawExecOptions {
            optimized_execution: options.optimized_execution,
            inference_mode: options.inference_mode,
            jit_profiling: tristate(options.jit_profiling),
            jit_executor: tristate(options.jit_executor),
            dict_input: dict_names.is_some(),
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: every pointer in `raw_args` points into `args`, `names` or
        // `strings`, all alive for the call; the shim copies what it keeps
        // (tensor handles, string bytes). On success `raw` is a new handle
        // owned from here by `Outputs`.
        check(unsafe {
            ntm_forward(
                self.raw.as_ptr(),
                raw_args.as_ptr(),
                raw_args.len(),
                &raw_options,
                &mut raw,
            )
        })?;
        let raw = NonNull::new(raw).ok_or("forward() returned no outputs")?;
        Ok(Outputs { raw })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: the handle came from ntm_load and is freed only here.
        unsafe { ntm_free(self.raw.as_ptr()) }
    }
}

/// What forward() returned, flattened: one entry per tensor or `List[str]`.
#[derive(Debug)]
pub(crate) struct Outputs {
    raw: NonNull<RawOutputs>,
}

/// One output of forward().
#[derive(Debug)]
pub(crate) enum Output<'a> {
    Tensor(tch::Tensor),
    Strings(Vec<&'a [u8]>),
}

impl Outputs {
    pub(crate) fn len(&self) -> usize {
        // SAFETY: a live handle.
        unsafe { ntm_outputs_count(self.raw.as_ptr()) }
    }

    /// Output `i` (below `len()`): a tensor moved to the CPU and made
    /// contiguous, or the bytes of each string, borrowed from `self`.
    pub(crate) fn get(&self, i: usize) -> Result<Output<'_>, String> {
        if i >= self.len() {
            return Err(format!(
                "forward() returned {} outputs, none at index {i}",
                self.len()
            ));
        }
        let raw = self.raw.as_ptr();
        // SAFETY: `i` is in range for this live handle.
        if unsafe { ntm_output_kind(raw, i) } == 0 {
            let mut tensor = std::ptr::null_mut();
            // SAFETY: on success the shim stores a new `torch::Tensor*`,
            // the representation `tch` owns and frees.
            check(unsafe { ntm_output_tensor(raw, i, &mut tensor) })?;
            if tensor.is_null() {
                return Err(format!("output {i} has no tensor"));
            }
            // SAFETY: see above; ownership passes to `tch`.
            return Ok(Output::Tensor(unsafe {
                tch::Tensor::from_ptr(tensor.cast::<torch_sys::C_tensor>())
            }));
        }
        // SAFETY: a string-list output of a live handle.
        let count = unsafe { ntm_output_string_count(raw, i) };
        let strings = (0..count)
            .map(|j| {
                let (mut data, mut len) = (std::ptr::null(), 0usize);
                // SAFETY: `j` is in range; the bytes belong to the list kept
                // in `self`, which outlives the returned borrow.
                unsafe {
                    ntm_output_string(raw, i, j, &mut data, &mut len);
                    if len == 0 {
                        &[][..]
                    } else {
                        std::slice::from_raw_parts(data.cast::<u8>(), len)
                    }
                }
            })
            .collect();
        Ok(Output::Strings(strings))
    }
}

impl Drop for Outputs {
    fn drop(&mut self) {
        // SAFETY: the handle came from ntm_forward and is freed only here.
        unsafe { ntm_outputs_free(self.raw.as_ptr()) }
    }
}
