//! One registered CUDA shared memory region: a client's device memory,
//! mapped through its CUDA IPC handle. Inputs in it are copied to host
//! memory when a request arrives (pinned, when the pool has room); outputs
//! are copied into it once the request has answered.

use nereid_device::DeviceMemory;

/// A CUDA region as the status endpoints show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaRegionStatus {
    pub name: String,
    pub device_id: u64,
    pub byte_size: u64,
}

#[derive(Debug)]
pub(super) struct CudaRegion {
    pub(super) name: String,
    pub(super) memory: Box<dyn DeviceMemory>,
}

impl CudaRegion {
    pub(super) fn new(name: &str, memory: Box<dyn DeviceMemory>) -> CudaRegion {
        CudaRegion {
            name: name.to_string(),
            memory,
        }
    }

    pub(super) fn status(&self) -> CudaRegionStatus {
        CudaRegionStatus {
            name: self.name.clone(),
            device_id: u64::from(self.memory.device()),
            byte_size: self.memory.len(),
        }
    }
}
