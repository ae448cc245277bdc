//! The two ways an instance runs a batch through its session.
//!
//! `Direct` hands the inputs to ONNX Runtime's `Run`, which is what a CPU
//! session (shared by the instances of a version) wants. `IoBinding` binds them, and binds each output to host
//! memory, before running: a GPU session then copies each input to the
//! device once and writes each output straight into host memory, where the
//! direct path would leave outputs on the device for another copy (as
//! Triton's backend binds them, with `BindOutputToDevice`). Either way the
//! results are copied once more out of ONNX Runtime into the response.

use std::borrow::Cow;
use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use nereid_core::Tensor;
use ort::AsPointer;
use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
use ort::session::{
    IoBinding, NoSelectedOutputs, RunOptions, Session, SessionInputValue, SessionOutputs,
};
use ort::value::DynValue;

use crate::convert;

/// How an instance runs its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunPath {
    Direct,
    IoBinding,
}

/// Inputs named as the session names them.
pub(crate) type Inputs<'b> = Vec<(Cow<'b, str>, SessionInputValue<'b>)>;

/// Host memory, where bound outputs are written.
pub(crate) fn host_memory() -> ort::Result<MemoryInfo<'static>> {
    MemoryInfo::new(
        AllocationDevice::CPU,
        0,
        AllocatorType::Device,
        MemoryType::Default,
    )
}

/// Runs `inputs` through `session` for the outputs `names`, setting the
/// run config entries `run_config` on the run. The IO-binding path needs
/// the session to itself; the direct one shares it.
pub(crate) fn run(
    path: RunPath,
    session: &mut Arc<Session>,
    inputs: Inputs<'_>,
    names: &[&str],
    run_config: &[(String, String)],
) -> Result<Vec<Tensor>, String> {
    let mut options = RunOptions::new().map_err(|e| e.to_string())?;
    for (key, value) in run_config {
        options
            .set(key, value)
            .map_err(|e| format!("run option '{key}': {e}"))?;
    }
    match path {
        RunPath::Direct => run_direct(session, &inputs, names, &options),
        RunPath::IoBinding => {
            let session = Arc::get_mut(session)
                .ok_or("a session shared by instances cannot run through an IO binding")?;
            run_bound(session, &inputs, names, &options)
        }
    }
}

/// Runs `inputs` through ONNX Runtime's own `Run`, on a session other
/// instances may be running at the same time.
///
/// Not `Session::run_with_options`: ort 2.0.0-rc.15 takes the session by
/// `&mut`, its maintainers distrusting concurrent runs, where ONNX Runtime
/// documents `Run` as safe to call from several threads at once on one
/// session (its own fixes say so: the TensorRT provider's lock, #19301).
/// Only CPU sessions are shared (`shared.rs`); a GPU session stays its
/// instance's own and runs through `run_bound`.
#[expect(
    unsafe_code,
    reason = "ort's safe run needs &mut Session, which a session shared by instances cannot give"
)]
fn run_direct(
    session: &Session,
    inputs: &Inputs<'_>,
    names: &[&str],
    options: &RunOptions<NoSelectedOutputs>,
) -> Result<Vec<Tensor>, String> {
    let c_names = |names: &mut dyn Iterator<Item = &str>| {
        names
            .map(|n| CString::new(n).map_err(|_| format!("name '{n}' contains NUL")))
            .collect::<Result<Vec<_>, _>>()
    };
    let input_names = c_names(&mut inputs.iter().map(|(name, _)| name.as_ref()))?;
    let output_names = c_names(&mut names.iter().copied())?;
    let input_name_ptrs: Vec<_> = input_names.iter().map(|n| n.as_ptr()).collect();
    let output_name_ptrs: Vec<_> = output_names.iter().map(|n| n.as_ptr()).collect();
    let input_ptrs: Vec<_> = inputs.iter().map(|(_, value)| value.ptr()).collect();
    let mut output_ptrs = vec![std::ptr::null_mut(); names.len()];
    // SAFETY: every pointer is live for the call and each array has the
    // length passed with it; ONNX Runtime fills `output_ptrs` with values
    // it allocated, owned from here on by the values wrapping them.
    let status = unsafe {
        ort::Error::result_from_status((ort::api().Run)(
            session.ptr().cast_mut(),
            options.ptr(),
            input_name_ptrs.as_ptr(),
            input_ptrs.as_ptr(),
            input_ptrs.len(),
            output_name_ptrs.as_ptr(),
            output_name_ptrs.len(),
            output_ptrs.as_mut_ptr(),
        ))
    };
    // Each output is wrapped, so released, before any is read: a failed
    // conversion must not leak the others.
    let values: Vec<Option<DynValue>> = output_ptrs
        .into_iter()
        .map(|ptr| {
            // SAFETY: a non-null output is a value ONNX Runtime allocated
            // with the session's allocator and handed over to us.
            NonNull::new(ptr)
                .map(|ptr| unsafe { DynValue::from_ptr(ptr, Some(session.allocator())) })
        })
        .collect();
    status.map_err(|e| e.to_string())?;
    names
        .iter()
        .zip(&values)
        .map(|(name, value)| {
            let value = value
                .as_ref()
                .ok_or_else(|| format!("no value for output '{name}'"))?;
            convert::output_tensor(name, value)
        })
        .collect()
}

fn run_bound(
    session: &mut Session,
    inputs: &[(Cow<'_, str>, SessionInputValue<'_>)],
    names: &[&str],
    options: &RunOptions<NoSelectedOutputs>,
) -> Result<Vec<Tensor>, String> {
    // A binding per run: it refers to its inputs, which may borrow the
    // batch's bytes, so it must not outlive this call.
    let mut binding = session.create_binding().map_err(|e| e.to_string())?;
    for (name, value) in inputs {
        bind_input(&mut binding, name, value)
            .map_err(|e| format!("cannot bind input '{name}': {e}"))?;
    }
    binding.synchronize_inputs().map_err(|e| e.to_string())?;
    let host = host_memory().map_err(|e| e.to_string())?;
    for name in names {
        binding
            .bind_output_to_device(*name, &host)
            .map_err(|e| format!("cannot bind output '{name}': {e}"))?;
    }
    let results = session
        .run_binding_with_options(&binding, options)
        .map_err(|e| e.to_string())?;
    collect(results, names)
}

/// Binds `value` to the input `name` through ONNX Runtime's own
/// `BindInput`, which copies it to the device the session wants it on, or
/// refers to it where it is.
///
/// Not `IoBinding::bind_input`: for an input the session takes where it
/// already is (any input of a CPU session; a CPU-side input of a GPU one),
/// ort 2.0.0-rc.15 first clones a tensor that borrows its data, a copy this
/// path exists to avoid, and does it through its copy sessions, whose lock
/// it takes again while holding it: the run never returns.
#[expect(
    unsafe_code,
    reason = "ort's safe bind_input deadlocks on borrowed CPU tensors; this is its one FFI call without the clone"
)]
fn bind_input(binding: &mut IoBinding, name: &str, value: &DynValue) -> ort::Result<()> {
    let name = CString::new(name).map_err(|_| ort::Error::new("input name contains NUL"))?;
    // SAFETY: the binding, name and value are live for the call. ONNX
    // Runtime keeps the value (or its device copy) in the binding, which
    // `run_bound` drops before the batch whose bytes the value may borrow.
    unsafe {
        ort::Error::result_from_status((ort::api().BindInput)(
            binding.ptr_mut(),
            name.as_ptr(),
            value.ptr(),
        ))
    }
}

/// The outputs `names`, in that order, copied out of ONNX Runtime.
fn collect(mut results: SessionOutputs<'_>, names: &[&str]) -> Result<Vec<Tensor>, String> {
    names
        .iter()
        .map(|name| {
            let value = results
                .remove(*name)
                .ok_or_else(|| format!("no value for output '{name}'"))?;
            convert::output_tensor(name, &value)
        })
        .collect()
}
