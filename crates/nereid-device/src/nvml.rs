//! NVML, loaded at run time, for the `nv_gpu_*` metrics. GPUs are found by
//! UUID, because NVML numbers every GPU on the machine while CUDA numbers
//! only the visible ones.

use nvml_wrapper::Nvml;

use crate::GpuSample;

/// Where the driver installs NVML; the unversioned name exists only with
/// development packages.
const LIBRARY: &str = "libnvidia-ml.so.1";

pub(crate) struct Sampler {
    nvml: Nvml,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler").finish_non_exhaustive()
    }
}

impl Sampler {
    /// NVML, or `None` (logged) when it does not load.
    pub(crate) fn open() -> Option<Sampler> {
        match Nvml::builder().lib_path(LIBRARY.as_ref()).init() {
            Ok(nvml) => Some(Sampler { nvml }),
            Err(e) => {
                tracing::warn!(error = %e, "NVML is not available; GPU metrics will not be reported");
                None
            }
        }
    }

    /// The GPU's figures; a figure the GPU does not report stays `None`.
    pub(crate) fn sample(&self, uuid: &str) -> GpuSample {
        let Ok(device) = self.nvml.device_by_uuid(uuid) else {
            return GpuSample::default();
        };
        let memory = device.memory_info().ok();
        GpuSample {
            utilization: device
                .utilization_rates()
                .ok()
                .map(|u| f64::from(u.gpu) / 100.0),
            memory_total_bytes: memory.as_ref().map(|m| m.total),
            memory_used_bytes: memory.as_ref().map(|m| m.used),
            power_usage_watts: device.power_usage().ok().map(milli),
            power_limit_watts: device.enforced_power_limit().ok().map(milli),
            energy_joules: device
                .total_energy_consumption()
                .ok()
                .map(|mj| mj as f64 / 1000.0),
        }
    }
}

fn milli(value: u32) -> f64 {
    f64::from(value) / 1000.0
}
