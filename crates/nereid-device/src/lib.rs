//! The one owner of devices. Which GPUs this server may use, what NVML
//! says about them (the `nv_gpu_*` metrics), the device memory clients
//! share through CUDA IPC (CUDA shared memory) and the pinned host buffers
//! copies from it land in: every other part asks [`Devices`].
//!
//! The CUDA driver and NVML are loaded at run time, never linked: a
//! machine without them is an ordinary CPU machine, where [`Devices`]
//! lists no GPU and says why. Behind [`Devices`] sits [`DeviceLayer`]; the
//! real one talks to the driver ([`Devices::detect`]), [`FakeGpus`]
//! describes any number of GPUs for tests.
//!
//! This crate depends on `nereid-core` alone (for the metric families of
//! `metrics.rs`): it knows devices, not models or requests.

mod cuda;
mod fake;
mod library;
pub mod metrics;
mod nvml;
mod pinned;
mod visible;

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

pub use fake::{FakeGpus, FakeLedger};
pub use library::{LIBNVINFER, find_library};
pub use visible::visible_devices;

/// tritonserver 2.51's `--min-supported-compute-capability` default.
pub const DEFAULT_MIN_COMPUTE_CAPABILITY: f64 = 6.0;

/// Size of a `cudaIpcMemHandle_t`, what a client registers.
pub const IPC_HANDLE_BYTES: usize = 64;

/// One GPU this server may use.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// The CUDA device ordinal, as the driver numbers the visible devices
    /// (after `CUDA_VISIBLE_DEVICES`); what `gpus: [...]` in a config names.
    pub id: u32,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as NVML and
    /// `nvidia-smi -L` write it; the `gpu_uuid` metric label.
    pub uuid: String,
    pub name: String,
    /// (major, minor).
    pub compute_capability: (u32, u32),
    pub memory_total: u64,
}

impl Gpu {
    /// The compute capability as tritonserver compares it (6.1 → 6.1).
    pub fn compute_capability_value(&self) -> f64 {
        let (major, minor) = self.compute_capability;
        f64::from(major) + f64::from(minor) / 10.0
    }
}

/// What NVML reports for one GPU at one moment; `None` where the GPU or
/// driver does not say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSample {
    /// Busy fraction over the driver's last sample period, 0.0 to 1.0.
    pub utilization: Option<f64>,
    pub memory_total_bytes: Option<u64>,
    pub memory_used_bytes: Option<u64>,
    pub power_usage_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    /// The driver's energy counter, in joules since it was last reset.
    pub energy_joules: Option<f64>,
}

/// Why a device operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// No CUDA driver on this machine, or it would not initialize.
    #[error("no CUDA driver is available on this machine ({0})")]
    NoDriver(String),
    /// The id names no GPU this server uses.
    #[error("GPU {0} is not available to this server")]
    NoSuchGpu(u64),
    #[error("a CUDA IPC memory handle has {IPC_HANDLE_BYTES} bytes, not {0}")]
    HandleSize(usize),
    /// The handle opened, but the allocation behind it is smaller than the
    /// size registered.
    #[error("the shared allocation holds {actual} bytes, fewer than the {requested} registered")]
    TooSmall { requested: u64, actual: u64 },
    #[error("bytes {offset}..{end} lie outside the {len} bytes of the device region")]
    OutOfRange { offset: u64, end: u64, len: u64 },
    /// A driver call failed.
    #[error("{call} failed: {message}")]
    Cuda { call: &'static str, message: String },
}

/// Device memory another process shared with this one (a CUDA IPC
/// mapping). Copies are synchronous: when one returns, the bytes have
/// arrived.
pub trait DeviceMemory: Send + Sync + fmt::Debug {
    /// The GPU the memory is on.
    fn device(&self) -> u32;

    /// Its size in bytes, as registered.
    fn len(&self) -> u64;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `len` bytes from `offset` to host memory (pinned when the
    /// pool has room, which makes the copy a single DMA).
    fn read(&self, offset: u64, len: usize) -> Result<Bytes, DeviceError>;

    /// Copies `data` to `offset`.
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError>;
}

/// What sits behind [`Devices`]: the CUDA driver and NVML, or a fake.
pub trait DeviceLayer: Send + Sync + fmt::Debug {
    /// The GPUs this server may use, ascending by id.
    fn gpus(&self) -> &[Gpu];

    /// NVML's figures for `gpu`; `None` when NVML is not available.
    fn sample(&self, gpu: &Gpu) -> Option<GpuSample>;

    /// Opens `handle` (a `cudaIpcMemHandle_t` another process exported) on
    /// `device`, `byte_size` bytes of it.
    fn open_ipc(
        &self,
        device: u32,
        handle: &[u8],
        byte_size: u64,
    ) -> Result<Box<dyn DeviceMemory>, DeviceError>;
}

/// How to look for devices: tritonserver's flags.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceOptions {
    /// GPUs below this compute capability are not used
    /// (`--min-supported-compute-capability`).
    pub min_compute_capability: f64,
    /// Bytes of page-locked host memory copies from GPUs may use
    /// (`--pinned-memory-pool-byte-size`); beyond it they use ordinary
    /// memory.
    pub pinned_pool_bytes: u64,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            min_compute_capability: DEFAULT_MIN_COMPUTE_CAPABILITY,
            pinned_pool_bytes: 256 << 20,
        }
    }
}

/// The devices this server may use. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Devices {
    layer: Arc<dyn DeviceLayer>,
    /// Why there is no GPU, when there is none.
    absent: Option<String>,
}

impl Default for Devices {
    /// No GPU: discovery was not asked for.
    fn default() -> Self {
        Devices::none("GPU discovery was not run")
    }
}

impl Devices {
    /// Asks the CUDA driver which GPUs exist (it applies
    /// `CUDA_VISIBLE_DEVICES`), keeps those with at least the minimum
    /// compute capability, and opens NVML for their figures. Never fails:
    /// without a driver there are no GPUs, and [`Devices::absence`] says why.
    pub fn detect(options: &DeviceOptions) -> Devices {
        match cuda::CudaLayer::open(options) {
            Ok(layer) => {
                let absent = layer
                    .gpus()
                    .is_empty()
                    .then(|| "no GPU meets the minimum compute capability".to_string());
                Devices {
                    layer: Arc::new(layer),
                    absent,
                }
            }
            Err(e) => Devices::none(e.to_string()),
        }
    }

    /// No GPU, for `reason`.
    pub fn none(reason: impl Into<String>) -> Devices {
        Devices {
            layer: Arc::new(FakeGpus::new(Vec::new())),
            absent: Some(reason.into()),
        }
    }

    /// The devices `layer` describes (a [`FakeGpus`] in tests).
    pub fn with_layer(layer: Arc<dyn DeviceLayer>) -> Devices {
        let absent = layer
            .gpus()
            .is_empty()
            .then(|| "the device layer lists no GPU".to_string());
        Devices { layer, absent }
    }

    pub fn gpus(&self) -> &[Gpu] {
        self.layer.gpus()
    }

    /// The ids of [`Devices::gpus`].
    pub fn gpu_ids(&self) -> Vec<u32> {
        self.gpus().iter().map(|g| g.id).collect()
    }

    pub fn gpu(&self, id: u32) -> Option<&Gpu> {
        self.gpus().iter().find(|g| g.id == id)
    }

    /// Why no GPU is used, when none is.
    pub fn absence(&self) -> Option<&str> {
        self.absent.as_deref()
    }

    pub fn sample(&self, gpu: &Gpu) -> Option<GpuSample> {
        self.layer.sample(gpu)
    }

    /// Opens a client's CUDA IPC handle on GPU `device`.
    pub fn open_ipc(
        &self,
        device: u64,
        handle: &[u8],
        byte_size: u64,
    ) -> Result<Box<dyn DeviceMemory>, DeviceError> {
        if let Some(reason) = &self.absent {
            return Err(DeviceError::NoDriver(reason.clone()));
        }
        if handle.len() != IPC_HANDLE_BYTES {
            return Err(DeviceError::HandleSize(handle.len()));
        }
        let id = u32::try_from(device)
            .ok()
            .filter(|id| self.gpu(*id).is_some())
            .ok_or(DeviceError::NoSuchGpu(device))?;
        self.layer.open_ipc(id, handle, byte_size)
    }
}

/// Checks that `offset..offset + len` lies within `size` bytes.
pub(crate) fn check_range(offset: u64, len: usize, size: u64) -> Result<(), DeviceError> {
    let end = offset.saturating_add(len as u64);
    if end > size {
        return Err(DeviceError::OutOfRange {
            offset,
            end,
            len: size,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_means_no_gpus_and_a_reason() {
        let devices = Devices::none("libcuda.so.1 not found");
        assert!(devices.gpus().is_empty());
        assert_eq!(devices.absence(), Some("libcuda.so.1 not found"));
        let err = devices.open_ipc(0, &[0; 64], 16).unwrap_err();
        assert!(matches!(err, DeviceError::NoDriver(_)), "{err}");
    }

    #[test]
    fn detect_never_panics() {
        // On this CPU machine there is no driver; on a GPU machine, GPUs.
        let devices = Devices::detect(&DeviceOptions::default());
        assert_eq!(devices.gpus().is_empty(), devices.absence().is_some());
    }

    #[test]
    fn handles_and_ids_are_checked_before_the_layer() {
        let devices = Devices::with_layer(Arc::new(FakeGpus::with_count(2)));
        assert_eq!(devices.gpu_ids(), vec![0, 1]);
        assert_eq!(
            devices.open_ipc(0, &[0; 10], 16).unwrap_err(),
            DeviceError::HandleSize(10)
        );
        assert_eq!(
            devices.open_ipc(2, &[0; 64], 16).unwrap_err(),
            DeviceError::NoSuchGpu(2)
        );
    }

    #[test]
    fn compute_capability_compares_as_tritonserver() {
        let gpu = FakeGpus::gpu(0, (8, 6));
        assert!((gpu.compute_capability_value() - 8.6).abs() < 1e-9);
    }
}
