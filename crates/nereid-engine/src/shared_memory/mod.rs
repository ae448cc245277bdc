//! Triton's system shared memory extension: the regions clients register,
//! one registry for every frontend, and the inputs and outputs requests
//! place in them ([`io`]).

mod io;
mod region;

use std::collections::BTreeMap;
use std::sync::Arc;

use nereid_core::Error;
use parking_lot::Mutex;

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
            E::NoStatus(_) | E::Unknown(_) => Error::not_found(message),
            E::Write { .. } => Error::internal(message),
        }
    }
}

/// The registered regions, by name.
#[derive(Debug, Default)]
pub struct SharedMemoryRegistry {
    regions: Mutex<BTreeMap<String, Arc<Region>>>,
}

impl SharedMemoryRegistry {
    /// Maps `byte_size` bytes at `offset` of the object `key` under `name`.
    pub fn register(
        &self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<(), SharedMemoryError> {
        if self.regions.lock().contains_key(name) {
            return Err(SharedMemoryError::AlreadyRegistered(name.to_string()));
        }
        let region = Region::open(RegionStatus {
            name: name.to_string(),
            key: key.to_string(),
            offset,
            byte_size,
        })?;
        let mut regions = self.regions.lock();
        // Another registration of the name may have won while this one mapped.
        if regions.contains_key(name) {
            return Err(SharedMemoryError::AlreadyRegistered(name.to_string()));
        }
        regions.insert(name.to_string(), Arc::new(region));
        tracing::debug!(
            region = name,
            key,
            offset,
            byte_size,
            "registered system shared memory"
        );
        Ok(())
    }

    /// Forgets `name`; an unknown name is no error, as in Triton. Requests
    /// in flight keep the mapping until they finish.
    pub fn unregister(&self, name: &str) {
        if self.regions.lock().remove(name).is_some() {
            tracing::debug!(region = name, "unregistered system shared memory");
        }
    }

    pub fn unregister_all(&self) {
        let count = std::mem::take(&mut *self.regions.lock()).len();
        tracing::debug!(count, "unregistered all system shared memory");
    }

    /// Every region, or the one named (which must exist), sorted by name.
    pub fn status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>, SharedMemoryError> {
        let regions = self.regions.lock();
        match name {
            None => Ok(regions.values().map(|r| r.status.clone()).collect()),
            Some(name) => regions
                .get(name)
                .map(|r| vec![r.status.clone()])
                .ok_or_else(|| SharedMemoryError::NoStatus(name.to_string())),
        }
    }

    /// The region `name`, for a request to use.
    fn get(&self, name: &str) -> Result<Arc<Region>, SharedMemoryError> {
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
