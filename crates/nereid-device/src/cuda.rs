//! The device layer over the CUDA driver API, loaded at run time by
//! `cudarc` (`dynamic-loading`): discovery, the primary context of each
//! GPU, and CUDA IPC mappings of clients' memory.
//!
//! Every driver call is `unsafe`: it takes raw handles the driver gave out.
//! The invariants kept here are few: a context is retained before it is
//! made current and released only when the layer is dropped; a mapping's
//! pointer is used only while the mapping lives, within its checked size.
#![expect(
    unsafe_code,
    reason = "the CUDA driver is a C API; this module is the one place that calls it"
)]

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys;
use parking_lot::Mutex;

use crate::nvml::Sampler;
use crate::pinned::PinnedPool;
use crate::{
    DeviceError, DeviceLayer, DeviceMemory, DeviceOptions, Gpu, GpuSample, IPC_HANDLE_BYTES,
    check_range,
};

/// A GPU's primary context. The driver shares primary contexts across a
/// process and any thread may make one current, so the handle may move.
#[derive(Debug, Clone, Copy)]
struct Context(sys::CUcontext);

// SAFETY: a primary context is process-wide; the driver synchronizes its use.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Makes the context current on the calling thread.
    fn enter(self) -> Result<(), DeviceError> {
        // SAFETY: the context was retained and is released only on drop of the layer.
        unsafe { sys::cuCtxSetCurrent(self.0) }
            .result()
            .map_err(|e| failed("cuCtxSetCurrent", e))
    }
}

#[derive(Debug)]
pub(crate) struct CudaLayer {
    gpus: Vec<Gpu>,
    /// By GPU id; retained on first use.
    contexts: Mutex<HashMap<u32, Context>>,
    nvml: Option<Sampler>,
    pinned: Arc<PinnedPool>,
}

impl CudaLayer {
    /// Loads the driver and lists the GPUs that reach the minimum compute
    /// capability. Fails, with the reason, when there is no driver.
    pub(crate) fn open(options: &DeviceOptions) -> Result<CudaLayer, DeviceError> {
        // SAFETY: only tries to load the library; creating anything
        // without it would panic inside cudarc.
        if !unsafe { sys::is_culib_present() } {
            return Err(DeviceError::NoDriver(
                "the CUDA driver library libcuda.so.1 was not found".into(),
            ));
        }
        result::init().map_err(|e| DeviceError::NoDriver(format!("cuInit failed: {e}")))?;
        let count = result::device::get_count().map_err(|e| failed("cuDeviceGetCount", e))?;
        let mut gpus = Vec::new();
        for ordinal in 0..count {
            let gpu = describe(ordinal)?;
            if gpu.compute_capability_value() < options.min_compute_capability {
                tracing::warn!(
                    gpu = gpu.id,
                    name = %gpu.name,
                    compute_capability = gpu.compute_capability_value(),
                    minimum = options.min_compute_capability,
                    "not using a GPU below the minimum supported compute capability"
                );
                continue;
            }
            gpus.push(gpu);
        }
        Ok(CudaLayer {
            nvml: Sampler::open(),
            gpus,
            contexts: Mutex::new(HashMap::new()),
            pinned: Arc::new(PinnedPool::new(options.pinned_pool_bytes)),
        })
    }

    fn context(&self, id: u32) -> Result<Context, DeviceError> {
        let mut contexts = self.contexts.lock();
        if let Some(context) = contexts.get(&id) {
            return Ok(*context);
        }
        let device = result::device::get(ordinal(id)?).map_err(|e| failed("cuDeviceGet", e))?;
        // SAFETY: `device` came from cuDeviceGet.
        let context = Context(
            unsafe { result::primary_ctx::retain(device) }
                .map_err(|e| failed("cuDevicePrimaryCtxRetain", e))?,
        );
        contexts.insert(id, context);
        Ok(context)
    }
}

impl Drop for CudaLayer {
    fn drop(&mut self) {
        for id in self.contexts.lock().keys() {
            if let Ok(device) = ordinal(*id)
                .and_then(|o| result::device::get(o).map_err(|e| failed("cuDeviceGet", e)))
            {
                // SAFETY: retained once in `context`, released once here.
                let _ = unsafe { result::primary_ctx::release(device) };
            }
        }
    }
}

/// A device's name, compute capability, memory and UUID.
fn describe(ordinal: i32) -> Result<Gpu, DeviceError> {
    let device = result::device::get(ordinal).map_err(|e| failed("cuDeviceGet", e))?;
    let attribute = |attribute| {
        // SAFETY: `device` came from cuDeviceGet.
        unsafe { result::device::get_attribute(device, attribute) }
            .map_err(|e| failed("cuDeviceGetAttribute", e))
    };
    let major = attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    // SAFETY: `device` came from cuDeviceGet.
    let memory_total =
        unsafe { result::device::total_mem(device) }.map_err(|e| failed("cuDeviceTotalMem", e))?;
    let uuid = result::device::get_uuid(device).map_err(|e| failed("cuDeviceGetUuid", e))?;
    Ok(Gpu {
        id: u32::try_from(ordinal).unwrap_or_default(),
        uuid: format_uuid(&uuid.bytes.map(|b| b as u8)),
        name: result::device::get_name(device).map_err(|e| failed("cuDeviceGetName", e))?,
        compute_capability: (
            u32::try_from(major).unwrap_or_default(),
            u32::try_from(minor).unwrap_or_default(),
        ),
        memory_total: memory_total as u64,
    })
}

/// `GPU-` and the 16 bytes as 8-4-4-4-12 hex digits, as NVML writes it.
pub(crate) fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn ordinal(id: u32) -> Result<i32, DeviceError> {
    i32::try_from(id).map_err(|_| DeviceError::NoSuchGpu(u64::from(id)))
}

fn failed(call: &'static str, e: DriverError) -> DeviceError {
    let message = e
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    DeviceError::Cuda { call, message }
}

impl DeviceLayer for CudaLayer {
    fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    fn sample(&self, gpu: &Gpu) -> Option<GpuSample> {
        self.nvml.as_ref().map(|nvml| nvml.sample(&gpu.uuid))
    }

    fn open_ipc(
        &self,
        device: u32,
        handle: &[u8],
        byte_size: u64,
    ) -> Result<Box<dyn DeviceMemory>, DeviceError> {
        let bytes: [u8; IPC_HANDLE_BYTES] = handle
            .try_into()
            .map_err(|_| DeviceError::HandleSize(handle.len()))?;
        let context = self.context(device)?;
        context.enter()?;
        let handle = sys::CUipcMemHandle {
            reserved: bytes.map(|b| b as std::ffi::c_char),
        };
        let mut pointer: sys::CUdeviceptr = 0;
        // SAFETY: the handle is 64 bytes as the driver expects; it checks them.
        unsafe {
            sys::cuIpcOpenMemHandle_v2(
                &mut pointer,
                handle,
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
            )
        }
        .result()
        .map_err(|e| failed("cuIpcOpenMemHandle", e))?;
        let mapping = IpcMemory {
            device,
            context,
            pointer,
            len: byte_size,
            pinned: Arc::clone(&self.pinned),
        };
        let actual = mapping.allocation_size()?;
        if byte_size > actual {
            return Err(DeviceError::TooSmall {
                requested: byte_size,
                actual,
            });
        }
        Ok(Box::new(mapping))
    }
}

/// A client's device memory, mapped into this process until dropped.
#[derive(Debug)]
struct IpcMemory {
    device: u32,
    context: Context,
    pointer: sys::CUdeviceptr,
    len: u64,
    pinned: Arc<PinnedPool>,
}

impl IpcMemory {
    /// The bytes of the allocation from the mapped pointer to its end.
    fn allocation_size(&self) -> Result<u64, DeviceError> {
        let mut base: sys::CUdeviceptr = 0;
        let mut size: usize = 0;
        // SAFETY: `pointer` is a live mapping; the outputs are plain integers.
        unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, self.pointer) }
            .result()
            .map_err(|e| failed("cuMemGetAddressRange", e))?;
        Ok((base + size as u64).saturating_sub(self.pointer))
    }
}

impl DeviceMemory for IpcMemory {
    fn device(&self) -> u32 {
        self.device
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, len: usize) -> Result<Bytes, DeviceError> {
        check_range(offset, len, self.len)?;
        self.context.enter()?;
        let mut buffer = self.pinned.buffer(len);
        // SAFETY: offset..offset+len lies within the mapping (checked), and
        // `buffer` has `len` writable bytes.
        unsafe { sys::cuMemcpyDtoH_v2(buffer.as_mut_ptr().cast(), self.pointer + offset, len) }
            .result()
            .map_err(|e| failed("cuMemcpyDtoH", e))?;
        Ok(buffer.into_bytes())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_range(offset, data.len(), self.len)?;
        self.context.enter()?;
        // SAFETY: the destination range lies within the mapping (checked).
        unsafe { sys::cuMemcpyHtoD_v2(self.pointer + offset, data.as_ptr().cast(), data.len()) }
            .result()
            .map_err(|e| failed("cuMemcpyHtoD", e))
    }
}

impl Drop for IpcMemory {
    fn drop(&mut self) {
        if self.context.enter().is_ok() {
            // SAFETY: opened by cuIpcOpenMemHandle, closed once.
            let _ = unsafe { sys::cuIpcCloseMemHandle(self.pointer) };
        }
    }
}

// SAFETY: a device pointer is an integer; the driver synchronizes copies.
unsafe impl Send for IpcMemory {}
// SAFETY: as above.
unsafe impl Sync for IpcMemory {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_read_as_nvml_writes_them() {
        let bytes: [u8; 16] = std::array::from_fn(|i| i as u8 * 17);
        assert_eq!(
            format_uuid(&bytes),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }
}
