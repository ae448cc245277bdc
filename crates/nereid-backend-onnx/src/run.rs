//! The two ways an instance runs a batch through its session.
//!
//! `Direct` hands the inputs to `Session::run`, which is what a CPU
//! session wants. `IoBinding` binds them, and binds each output to host
//! memory, before running: a GPU session then copies each input to the
//! device once and writes each output straight into host memory, where the
//! direct path would leave outputs on the device for another copy (as
//! Triton's backend binds them, with `BindOutputToDevice`). Either way the
//! results are copied once more out of ONNX Runtime into the response.

use std::borrow::Cow;
use std::ffi::CString;

use nereid_core::Tensor;
use ort::AsPointer;
use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
use ort::session::{
    IoBinding, NoSelectedOutputs, OutputSelector, RunOptions, Session, SessionInputValue,
    SessionOutputs,
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
/// run config entries `run_config` on the run.
pub(crate) fn run(
    path: RunPath,
    session: &mut Session,
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
        RunPath::Direct => run_direct(session, inputs, names, options),
        RunPath::IoBinding => run_bound(session, &inputs, names, &options),
    }
}

fn run_direct(
    session: &mut Session,
    inputs: Inputs<'_>,
    names: &[&str],
    options: RunOptions<NoSelectedOutputs>,
) -> Result<Vec<Tensor>, String> {
    let selector = names
        .iter()
        .fold(OutputSelector::no_default(), |s, name| s.with(*name));
    let options = options.with_outputs(selector);
    let results = session
        .run_with_options(inputs, &options)
        .map_err(|e| e.to_string())?;
    collect(results, names)
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
