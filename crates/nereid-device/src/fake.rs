//! A device layer that describes GPUs without a driver, for tests: any
//! number of them, with made-up NVML figures, and "device memory" that is
//! a POSIX shared memory object named in the handle, so the CUDA shared
//! memory paths run end to end on a CPU machine.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

use crate::{DeviceError, DeviceLayer, DeviceMemory, Gpu, GpuSample, check_range};

/// What a fake IPC handle starts with; the shared memory key follows,
/// then NULs up to 64 bytes.
pub const FAKE_HANDLE_PREFIX: &[u8] = b"nereid-fake-ipc:";

/// GPUs that exist only in a test.
#[derive(Debug, Clone)]
pub struct FakeGpus {
    gpus: Vec<Gpu>,
    /// Device memory a test's fake instances hold, which NVML's used
    /// memory then reports; made-up figures without one.
    ledger: Option<Arc<FakeLedger>>,
}

/// Bytes held on each fake GPU, by whatever a test says holds them (a
/// fake backend's GPU instances).
#[derive(Debug, Default)]
pub struct FakeLedger {
    used: parking_lot::Mutex<std::collections::BTreeMap<u32, u64>>,
}

impl FakeLedger {
    pub fn allocate(&self, gpu: u32, bytes: u64) {
        *self.used.lock().entry(gpu).or_default() += bytes;
    }

    pub fn free(&self, gpu: u32, bytes: u64) {
        let mut used = self.used.lock();
        let held = used.entry(gpu).or_default();
        *held = held.saturating_sub(bytes);
    }

    pub fn used(&self, gpu: u32) -> u64 {
        self.used.lock().get(&gpu).copied().unwrap_or_default()
    }
}

impl FakeGpus {
    pub fn new(gpus: Vec<Gpu>) -> FakeGpus {
        FakeGpus { gpus, ledger: None }
    }

    /// These GPUs, their used memory read from `ledger`.
    pub fn with_ledger(mut self, ledger: Arc<FakeLedger>) -> FakeGpus {
        self.ledger = Some(ledger);
        self
    }

    /// `count` identical GPUs, ids 0 to count - 1.
    pub fn with_count(count: u32) -> FakeGpus {
        FakeGpus::new((0..count).map(|id| FakeGpus::gpu(id, (9, 0))).collect())
    }

    /// The physical GPUs that `CUDA_VISIBLE_DEVICES` (`visible`) shows and
    /// that reach `min_compute_capability`, numbered as the driver would.
    pub fn visible(physical: &[Gpu], visible: Option<&str>, min_compute_capability: f64) -> Self {
        let uuids: Vec<String> = physical.iter().map(|g| g.uuid.clone()).collect();
        let gpus = crate::visible_devices(visible, &uuids)
            .into_iter()
            .zip(0u32..)
            .map(|(index, id)| Gpu {
                id,
                ..physical[index].clone()
            })
            .filter(|g| g.compute_capability_value() >= min_compute_capability)
            .collect();
        FakeGpus::new(gpus)
    }

    /// A GPU with an id-derived UUID and 80 GiB.
    pub fn gpu(id: u32, compute_capability: (u32, u32)) -> Gpu {
        Gpu {
            id,
            uuid: format!("GPU-00000000-0000-0000-0000-{id:012x}"),
            name: "Fake GPU".to_string(),
            compute_capability,
            memory_total: 80 << 30,
        }
    }

    /// A handle that opens `/dev/shm/<key>` as device memory.
    pub fn handle(key: &str) -> Option<[u8; crate::IPC_HANDLE_BYTES]> {
        let key = key.strip_prefix('/').unwrap_or(key).as_bytes();
        let mut handle = [0u8; crate::IPC_HANDLE_BYTES];
        let end = FAKE_HANDLE_PREFIX.len() + key.len();
        handle
            .get_mut(..FAKE_HANDLE_PREFIX.len())?
            .copy_from_slice(FAKE_HANDLE_PREFIX);
        handle
            .get_mut(FAKE_HANDLE_PREFIX.len()..end)?
            .copy_from_slice(key);
        Some(handle)
    }
}

impl DeviceLayer for FakeGpus {
    fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    /// Figures that vary with the id, so tests can tell GPUs apart.
    fn sample(&self, gpu: &Gpu) -> Option<GpuSample> {
        let id = f64::from(gpu.id);
        Some(GpuSample {
            utilization: Some(0.25),
            memory_total_bytes: Some(gpu.memory_total),
            memory_used_bytes: Some(match &self.ledger {
                Some(ledger) => ledger.used(gpu.id),
                None => (1 << 30) * (u64::from(gpu.id) + 1),
            }),
            power_usage_watts: Some(100.0 + id),
            power_limit_watts: Some(700.0),
            energy_joules: Some(1000.0 * (id + 1.0)),
        })
    }

    fn open_ipc(
        &self,
        device: u32,
        handle: &[u8],
        byte_size: u64,
    ) -> Result<Box<dyn DeviceMemory>, DeviceError> {
        let invalid = |message: &str| DeviceError::Cuda {
            call: "cuIpcOpenMemHandle",
            message: message.to_string(),
        };
        let key = handle
            .strip_prefix(FAKE_HANDLE_PREFIX)
            .ok_or_else(|| invalid("not a fake handle"))?;
        let key = key.split(|&b| b == 0).next().unwrap_or_default();
        let key = std::str::from_utf8(key).map_err(|_| invalid("key is not UTF-8"))?;
        if key.is_empty() || key.contains('/') || key.starts_with('.') {
            return Err(invalid("bad key"));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/dev/shm/{key}"))
            .map_err(|e| invalid(&e.to_string()))?;
        let actual = file.metadata().map_err(|e| invalid(&e.to_string()))?.len();
        if byte_size > actual {
            return Err(DeviceError::TooSmall {
                requested: byte_size,
                actual,
            });
        }
        Ok(Box::new(FakeMemory {
            device,
            file,
            len: byte_size,
        }))
    }
}

#[derive(Debug)]
struct FakeMemory {
    device: u32,
    file: File,
    len: u64,
}

impl DeviceMemory for FakeMemory {
    fn device(&self) -> u32 {
        self.device
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, len: usize) -> Result<Bytes, DeviceError> {
        check_range(offset, len, self.len)?;
        let mut data = vec![0; len];
        self.file
            .read_exact_at(&mut data, offset)
            .map_err(|e| copy_failed("cuMemcpyDtoH", &e))?;
        Ok(Bytes::from(data))
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_range(offset, data.len(), self.len)?;
        self.file
            .write_all_at(data, offset)
            .map_err(|e| copy_failed("cuMemcpyHtoD", &e))
    }
}

fn copy_failed(call: &'static str, e: &std::io::Error) -> DeviceError {
    DeviceError::Cuda {
        call,
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visibility_and_capability_pick_and_renumber() {
        let physical: Vec<Gpu> = [(7, 0), (5, 2), (8, 0), (9, 0)]
            .into_iter()
            .zip(0..)
            .map(|(cc, id)| FakeGpus::gpu(id, cc))
            .collect();
        let all = FakeGpus::visible(&physical, None, 6.0);
        assert_eq!(
            all.gpus()
                .iter()
                .map(|g| (g.id, g.compute_capability))
                .collect::<Vec<_>>(),
            vec![(0, (7, 0)), (2, (8, 0)), (3, (9, 0))]
        );
        let some = FakeGpus::visible(&physical, Some("3,2"), 6.0);
        assert_eq!(
            some.gpus()
                .iter()
                .map(|g| (g.id, g.uuid.clone()))
                .collect::<Vec<_>>(),
            vec![(0, physical[3].uuid.clone()), (1, physical[2].uuid.clone())]
        );
    }

    #[test]
    fn ipc_memory_round_trips_through_shared_memory() {
        let key = format!("nereid-device-test-{}", std::process::id());
        let path = format!("/dev/shm/{key}");
        std::fs::write(&path, [0u8; 32]).unwrap();
        let gpus = FakeGpus::with_count(1);
        let handle = FakeGpus::handle(&key).unwrap();
        let memory = gpus.open_ipc(0, &handle, 16).unwrap();
        memory.write(4, &[1, 2, 3]).unwrap();
        assert_eq!(&memory.read(3, 5).unwrap()[..], &[0, 1, 2, 3, 0]);
        assert!(matches!(
            memory.read(10, 7),
            Err(DeviceError::OutOfRange { end: 17, .. })
        ));
        assert!(matches!(
            gpus.open_ipc(0, &handle, 33),
            Err(DeviceError::TooSmall { actual: 32, .. })
        ));
        assert!(gpus.open_ipc(0, &[7; 64], 1).is_err());
        std::fs::remove_file(path).unwrap();
    }
}
