//! The system shared memory RPCs over the engine's registry, and the CUDA
//! ones' answers on a build without CUDA. An empty name means every
//! region, as in Triton.

use std::collections::HashMap;

use nereid_core::Error;
use nereid_engine::Engine;
use nereid_protocol::inference::system_shared_memory_status_response::RegionStatus;
use nereid_protocol::inference::*;

use crate::shared_memory::{CUDA_UNSUPPORTED, cuda_region_not_found};

pub fn system_status(
    engine: &Engine,
    request: SystemSharedMemoryStatusRequest,
) -> Result<SystemSharedMemoryStatusResponse, Error> {
    let name = (!request.name.is_empty()).then_some(request.name.as_str());
    let regions: HashMap<String, RegionStatus> = engine
        .shared_memory()
        .status(name)?
        .into_iter()
        .map(|r| {
            let status = RegionStatus {
                name: r.name.clone(),
                key: r.key,
                offset: r.offset,
                byte_size: r.byte_size,
            };
            (r.name, status)
        })
        .collect();
    Ok(SystemSharedMemoryStatusResponse { regions })
}

pub fn system_register(
    engine: &Engine,
    request: SystemSharedMemoryRegisterRequest,
) -> Result<SystemSharedMemoryRegisterResponse, Error> {
    engine.shared_memory().register(
        &request.name,
        &request.key,
        request.offset,
        request.byte_size,
    )?;
    Ok(SystemSharedMemoryRegisterResponse {})
}

/// Unregisters one region, or all of them; an unknown name is no error.
pub fn system_unregister(
    engine: &Engine,
    request: SystemSharedMemoryUnregisterRequest,
) -> SystemSharedMemoryUnregisterResponse {
    if request.name.is_empty() {
        engine.shared_memory().unregister_all();
    } else {
        engine.shared_memory().unregister(&request.name);
    }
    SystemSharedMemoryUnregisterResponse {}
}

/// No CUDA region can be registered: none is listed, a named one is not
/// found.
pub fn cuda_status(
    request: CudaSharedMemoryStatusRequest,
) -> Result<CudaSharedMemoryStatusResponse, Error> {
    if request.name.is_empty() {
        Ok(CudaSharedMemoryStatusResponse::default())
    } else {
        Err(cuda_region_not_found(&request.name))
    }
}

pub fn cuda_register() -> Result<CudaSharedMemoryRegisterResponse, Error> {
    Err(Error::unsupported(CUDA_UNSUPPORTED))
}
