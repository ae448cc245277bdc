//! What both frontends answer about CUDA shared memory on a build without
//! CUDA: no region can be registered, so none is listed and unregistering
//! succeeds (Triton's own examples unregister unconditionally at start),
//! while a registration gets a clear error.

use nereid_core::Error;

/// The answer to a CUDA shared memory registration.
pub const CUDA_UNSUPPORTED: &str = "CUDA shared memory is not supported: this nereid build has no GPU support; use system shared memory";

/// Triton's answer to the status of an unknown CUDA region.
pub fn cuda_region_not_found(name: &str) -> Error {
    Error::not_found(format!(
        "Unable to find cuda shared memory region: '{name}'"
    ))
}
