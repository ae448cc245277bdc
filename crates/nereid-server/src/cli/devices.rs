//! tritonserver's device flags: which GPUs count, their metrics, and the
//! memory pools for copies between host and devices.

use std::collections::BTreeMap;
use std::sync::Arc;

use clap::builder::BoolishValueParser;
use nereid_device::{DEFAULT_MIN_COMPUTE_CAPABILITY, DeviceOptions, Devices, FakeGpus};

/// Tests set this to a number of GPUs that exist only in the device layer
/// (`FakeGpus`): placement, metrics and CUDA shared memory then run on a
/// CPU machine. Nothing is computed on them.
const FAKE_GPUS_VARIABLE: &str = "NEREID_TEST_FAKE_GPUS";

/// tritonserver's default CUDA memory pool, per GPU.
const DEFAULT_CUDA_POOL_BYTES: u64 = 64 << 20;

#[derive(Debug, clap::Args)]
pub struct DeviceFlags {
    /// GPUs below this CUDA compute capability are not used.
    #[arg(long, default_value_t = DEFAULT_MIN_COMPUTE_CAPABILITY, value_name = "MAJOR.MINOR")]
    pub min_supported_compute_capability: f64,

    /// Report the nv_gpu_* metrics and nv_energy_consumption (ignored
    /// unless --allow-metrics is true).
    #[arg(long, default_value = "true", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub allow_gpu_metrics: bool,

    /// Bytes of page-locked host memory that copies out of CUDA shared
    /// memory may use; beyond it they use ordinary memory.
    #[arg(long, default_value_t = 256 << 20, value_name = "BYTES")]
    pub pinned_memory_pool_byte_size: u64,

    /// `<gpu>:<bytes>`, repeatable: tritonserver's CUDA memory pool for a
    /// GPU. Checked and reported; Nereid makes no device allocations of
    /// its own for it to serve (see docs/gpu.md).
    #[arg(long, value_name = "GPU:BYTES")]
    pub cuda_memory_pool_byte_size: Vec<String>,
}

impl DeviceFlags {
    /// Finds the GPUs (or the fake ones tests ask for) and reports them.
    pub fn devices(&self) -> anyhow::Result<Devices> {
        let options = DeviceOptions {
            min_compute_capability: self.min_supported_compute_capability,
            pinned_pool_bytes: self.pinned_memory_pool_byte_size,
        };
        let devices = match std::env::var(FAKE_GPUS_VARIABLE) {
            Ok(count) => fake(&count, &options)?,
            Err(_) => Devices::detect(&options),
        };
        let pools = cuda_pools(&self.cuda_memory_pool_byte_size)?;
        report(&devices, &pools);
        Ok(devices)
    }
}

fn fake(count: &str, options: &DeviceOptions) -> anyhow::Result<Devices> {
    let count: u32 = count
        .parse()
        .map_err(|_| anyhow::anyhow!("{FAKE_GPUS_VARIABLE}={count}: expected a number of GPUs"))?;
    let physical: Vec<_> = (0..count).map(|id| FakeGpus::gpu(id, (9, 0))).collect();
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let layer = FakeGpus::visible(
        &physical,
        visible.as_deref(),
        options.min_compute_capability,
    );
    tracing::warn!(
        count,
        "{FAKE_GPUS_VARIABLE} is set: the GPUs are fakes for tests; nothing runs on a device"
    );
    Ok(Devices::with_layer(Arc::new(layer)))
}

/// `--cuda-memory-pool-byte-size` values by GPU id; every GPU not named
/// keeps tritonserver's 64 MiB.
fn cuda_pools(values: &[String]) -> anyhow::Result<BTreeMap<u32, u64>> {
    let mut pools = BTreeMap::new();
    for value in values {
        let parsed = value
            .split_once(':')
            .and_then(|(gpu, bytes)| Some((gpu.trim().parse().ok()?, bytes.trim().parse().ok()?)));
        let Some((gpu, bytes)) = parsed else {
            anyhow::bail!(
                "--cuda-memory-pool-byte-size {value}: expected <integer>:<integer>, a GPU id and a byte size"
            );
        };
        pools.insert(gpu, bytes);
    }
    Ok(pools)
}

fn report(devices: &Devices, pools: &BTreeMap<u32, u64>) {
    if let Some(reason) = devices.absence() {
        tracing::info!("no GPU is used: {reason}");
    }
    for gpu in devices.gpus() {
        let (major, minor) = gpu.compute_capability;
        let pool = pools
            .get(&gpu.id)
            .copied()
            .unwrap_or(DEFAULT_CUDA_POOL_BYTES);
        tracing::info!(
            "GPU {}: {} ({}), compute capability {major}.{minor}, {} MiB; CUDA memory pool {} bytes",
            gpu.id,
            gpu.name,
            gpu.uuid,
            gpu.memory_total >> 20,
            pool
        );
    }
    for gpu in pools.keys().filter(|id| devices.gpu(**id).is_none()) {
        tracing::warn!(
            "--cuda-memory-pool-byte-size names GPU {gpu}, which this server does not use"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_parse_as_tritonserver_writes_them() {
        let pools = cuda_pools(&["0:1024".into(), " 3 : 7 ".into()]).unwrap();
        assert_eq!(pools, BTreeMap::from([(0, 1024), (3, 7)]));
        for bad in ["1024", "a:1", "0:-1", "0:"] {
            let err = cuda_pools(&[bad.into()]).unwrap_err().to_string();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn fake_gpus_follow_visibility_and_capability() {
        let options = DeviceOptions::default();
        assert_eq!(fake("3", &options).unwrap().gpus().len(), 3);
        assert!(fake("three", &options).is_err());
        let strict = DeviceOptions {
            min_compute_capability: 9.5,
            ..DeviceOptions::default()
        };
        assert!(fake("2", &strict).unwrap().gpus().is_empty());
    }
}
