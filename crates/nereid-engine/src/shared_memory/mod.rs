//! Triton's shared memory extensions, system and CUDA: the regions
//! clients register, one registry for every frontend (system and CUDA
//! regions share one namespace, as in Triton), and the inputs and outputs
//! requests place in them ([`io`]).

mod cuda;
mod io;
mod region;

use std::collections::BTreeMap;
use std::sync::Arc;

use nereid_core::Error;
use nereid_device::{DeviceError, Devices};

/// The size of a CUDA IPC memory handle (`cudaIpcMemHandle_t`), for the
/// frontends that decode one.
pub use nereid_device::IPC_HANDLE_BYTES;
use parking_lot::Mutex;

use cuda::CudaRegion;
pub use cuda::CudaRegionStatus;
pub use io::SharedMemoryPlan;
use region::Region;
pub use region::RegionStatus;

/// What went wrong with a region, in Triton's words.
#[derive(Debug, thiserror::Error)]
pub enum SharedMemoryError {
    #[error("shared memory region '{0}' already in manager")]
    AlreadyRegistered(String),
    #[error("Unable to open shared memory region: '{key}'")]
    Open {
        key: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to register shared memory region '{name}': invalid args")]
    OutsideFile { name: String },
    #[error("failed to register shared memory region '{name}': byte_size must be greater than 0")]
    Empty { name: String },
    #[error("failed to register shared memory region '{name}': {source}")]
    Map {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("Unable to find system shared memory region: '{0}'")]
    NoStatus(String),
    #[error("Unable to find cuda shared memory region: '{0}'")]
    NoCudaStatus(String),
    #[error("The region named '{0}' is registered as CUDA shared memory, not system shared memory")]
    IsCuda(String),
    #[error("The region named '{0}' is registered as system shared memory, not CUDA shared memory")]
    IsSystem(String),
    /// This machine has no GPU to map a CUDA region on.
    #[error("CUDA shared memory is not supported: {0}; use system shared memory")]
    NoCuda(String),
    /// The handle, device or size does not open; Triton tells the client
    /// no more than this and logs the driver's reason.
    #[error("failed to register shared memory region '{name}': invalid args")]
    CudaOpen {
        name: String,
        #[source]
        source: DeviceError,
    },
    #[error(
        "cannot copy '{tensor}' between the host and CUDA shared memory region '{region}': {source}"
    )]
    Copy {
        tensor: String,
        region: String,
        #[source]
        source: DeviceError,
    },
    #[error("Unable to find shared memory region: '{0}'")]
    Unknown(String),
    #[error("Invalid offset for shared memory region: '{0}'")]
    Offset(String),
    #[error("Invalid offset + byte size for shared memory region: '{0}'")]
    Range(String),
    #[error(
        "shared memory size specified with the request for output '{output}' ({given} bytes) should be at least {needed} bytes to hold the results"
    )]
    OutputTooSmall {
        output: String,
        given: u64,
        needed: usize,
    },
    #[error("cannot write output '{output}' into shared memory region '{region}': {source}")]
    Write {
        output: String,
        region: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<SharedMemoryError> for Error {
    fn from(e: SharedMemoryError) -> Error {
        use SharedMemoryError as E;
        let message = e.to_string();
        match e {
            E::AlreadyRegistered(_) => Error::new(nereid_core::ErrorKind::AlreadyExists, message),
            // Triton answers a key that cannot be opened and an output
            // region too small with 500 (internal); the mistake is the
            // client's.
            E::Open { .. } | E::OutsideFile { .. } | E::Empty { .. } | E::Map { .. } => {
                Error::invalid_argument(message)
            }
            E::Offset(_) | E::Range(_) | E::OutputTooSmall { .. } => {
                Error::invalid_argument(message)
            }
            E::NoStatus(_) | E::NoCudaStatus(_) | E::IsCuda(_) | E::IsSystem(_) | E::Unknown(_) => {
                Error::not_found(message)
            }
            E::NoCuda(_) => Error::unsupported(message),
            E::CudaOpen { .. } => Error::invalid_argument(message),
            E::Write { .. } | E::Copy { .. } => Error::internal(message),
        }
    }
}

/// A registered region of either kind.
#[derive(Debug, Clone)]
enum Registered {
    System(Arc<Region>),
    Cuda(Arc<CudaRegion>),
}

/// Which extension a region belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    System,
    Cuda,
}

impl Registered {
    fn kind(&self) -> Kind {
        match self {
            Registered::System(_) => Kind::System,
            Registered::Cuda(_) => Kind::Cuda,
        }
    }
}

/// The registered regions, by name, and the devices CUDA regions live on.
#[derive(Debug)]
pub struct SharedMemoryRegistry {
    regions: Mutex<BTreeMap<String, Registered>>,
    devices: Devices,
}

impl Default for SharedMemoryRegistry {
    fn default() -> Self {
        SharedMemoryRegistry::new(Devices::none("no device layer was given"))
    }
}

impl SharedMemoryRegistry {
    pub fn new(devices: Devices) -> Self {
        SharedMemoryRegistry {
            regions: Mutex::new(BTreeMap::new()),
            devices,
        }
    }

    /// Maps `byte_size` bytes at `offset` of the object `key` under `name`.
    pub fn register(
        &self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<(), SharedMemoryError> {
        self.check_free(name)?;
        let region = Region::open(RegionStatus {
            name: name.to_string(),
            key: key.to_string(),
            offset,
            byte_size,
        })?;
        self.insert(name, Registered::System(Arc::new(region)))?;
        tracing::debug!(
            region = name,
            key,
            offset,
            byte_size,
            "registered system shared memory"
        );
        Ok(())
    }

    /// Opens `raw_handle`, a `cudaIpcMemHandle_t`, on GPU `device_id` and
    /// registers `byte_size` bytes of it under `name`.
    pub fn register_cuda(
        &self,
        name: &str,
        raw_handle: &[u8],
        device_id: u64,
        byte_size: u64,
    ) -> Result<(), SharedMemoryError> {
        self.check_cuda()?;
        self.check_free(name)?;
        let memory = self
            .devices
            .open_ipc(device_id, raw_handle, byte_size)
            .map_err(|source| {
                tracing::error!(region = name, device_id, error = %source, "failed to open a CUDA IPC handle");
                SharedMemoryError::CudaOpen {
                    name: name.to_string(),
                    source,
                }
            })?;
        let region = CudaRegion::new(name, memory);
        self.insert(name, Registered::Cuda(Arc::new(region)))?;
        tracing::debug!(
            region = name,
            device_id,
            byte_size,
            "registered CUDA shared memory"
        );
        Ok(())
    }

    fn check_free(&self, name: &str) -> Result<(), SharedMemoryError> {
        if self.regions.lock().contains_key(name) {
            return Err(SharedMemoryError::AlreadyRegistered(name.to_string()));
        }
        Ok(())
    }

    /// Another registration of the name may have won while this one mapped.
    fn insert(&self, name: &str, region: Registered) -> Result<(), SharedMemoryError> {
        let mut regions = self.regions.lock();
        if regions.contains_key(name) {
            return Err(SharedMemoryError::AlreadyRegistered(name.to_string()));
        }
        regions.insert(name.to_string(), region);
        Ok(())
    }

    /// Forgets the system region `name`; an unknown name, or a CUDA
    /// region's, is no error and changes nothing, as in Triton. Requests
    /// in flight keep the mapping until they finish.
    pub fn unregister(&self, name: &str) {
        self.forget(Some(name), Kind::System);
    }

    /// Forgets the CUDA region `name`, as [`SharedMemoryRegistry::unregister`].
    pub fn unregister_cuda(&self, name: &str) {
        self.forget(Some(name), Kind::Cuda);
    }

    /// Forgets every system region.
    pub fn unregister_all(&self) {
        self.forget(None, Kind::System);
    }

    /// Forgets every CUDA region.
    pub fn unregister_all_cuda(&self) {
        self.forget(None, Kind::Cuda);
    }

    /// Forgets the region `name` (every region when `None`) if it is of
    /// `kind`.
    fn forget(&self, name: Option<&str>, kind: Kind) {
        let mut regions = self.regions.lock();
        let before = regions.len();
        regions.retain(|n, r| r.kind() != kind || name.is_some_and(|name| name != n));
        let count = before - regions.len();
        if count > 0 {
            tracing::debug!(count, region = name, ?kind, "unregistered shared memory");
        }
    }

    /// Every system region, or the one named (which must exist and be a
    /// system region), sorted by name.
    pub fn status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>, SharedMemoryError> {
        let regions = self.regions.lock();
        let system = |r: &Registered| match r {
            Registered::System(r) => Some(r.status.clone()),
            Registered::Cuda(_) => None,
        };
        match name {
            None => Ok(regions.values().filter_map(system).collect()),
            Some(name) => match regions.get(name) {
                None => Err(SharedMemoryError::NoStatus(name.to_string())),
                Some(Registered::Cuda(_)) => Err(SharedMemoryError::IsCuda(name.to_string())),
                Some(r) => Ok(system(r).into_iter().collect()),
            },
        }
    }

    /// Every CUDA region, or the one named, as [`SharedMemoryRegistry::status`].
    pub fn cuda_status(
        &self,
        name: Option<&str>,
    ) -> Result<Vec<CudaRegionStatus>, SharedMemoryError> {
        let regions = self.regions.lock();
        let cuda = |r: &Registered| match r {
            Registered::Cuda(r) => Some(r.status()),
            Registered::System(_) => None,
        };
        match name {
            None => Ok(regions.values().filter_map(cuda).collect()),
            Some(name) => match regions.get(name) {
                None => Err(SharedMemoryError::NoCudaStatus(name.to_string())),
                Some(Registered::System(_)) => Err(SharedMemoryError::IsSystem(name.to_string())),
                Some(r) => Ok(cuda(r).into_iter().collect()),
            },
        }
    }

    /// Whether CUDA regions can be registered here (a GPU exists).
    pub fn cuda_supported(&self) -> bool {
        self.devices.absence().is_none()
    }

    /// Fails, saying why, where no CUDA region can be registered; a
    /// frontend asks before it reads a registration's body.
    pub fn check_cuda(&self) -> Result<(), SharedMemoryError> {
        match self.devices.absence() {
            Some(reason) => Err(SharedMemoryError::NoCuda(reason.to_string())),
            None => Ok(()),
        }
    }

    /// The region `name`, for a request to use.
    fn get(&self, name: &str) -> Result<Registered, SharedMemoryError> {
        self.regions
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| SharedMemoryError::Unknown(name.to_string()))
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
