//! The system and CUDA shared memory RPCs over the engine's registry. An
//! empty name means every region of the kind, as in Triton.

use std::collections::HashMap;

use nereid_core::Error;
use nereid_engine::Engine;
use nereid_protocol::inference::cuda_shared_memory_status_response::RegionStatus as CudaRegion;
use nereid_protocol::inference::system_shared_memory_status_response::RegionStatus;
use nereid_protocol::inference::*;

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

/// Every CUDA region, or the one named.
pub fn cuda_status(
    engine: &Engine,
    request: CudaSharedMemoryStatusRequest,
) -> Result<CudaSharedMemoryStatusResponse, Error> {
    let name = (!request.name.is_empty()).then_some(request.name.as_str());
    let regions = engine
        .shared_memory()
        .cuda_status(name)?
        .into_iter()
        .map(|r| {
            let status = CudaRegion {
                name: r.name.clone(),
                device_id: r.device_id,
                byte_size: r.byte_size,
            };
            (r.name, status)
        })
        .collect();
    Ok(CudaSharedMemoryStatusResponse { regions })
}

/// Registers a client's `cudaIpcMemHandle_t`. A negative device id names
/// no GPU.
pub fn cuda_register(
    engine: &Engine,
    request: CudaSharedMemoryRegisterRequest,
) -> Result<CudaSharedMemoryRegisterResponse, Error> {
    let device_id = u64::try_from(request.device_id).unwrap_or(u64::MAX);
    engine.shared_memory().register_cuda(
        &request.name,
        &request.raw_handle,
        device_id,
        request.byte_size,
    )?;
    Ok(CudaSharedMemoryRegisterResponse {})
}

/// Unregisters one CUDA region, or all of them; an unknown name is no error.
pub fn cuda_unregister(
    engine: &Engine,
    request: CudaSharedMemoryUnregisterRequest,
) -> CudaSharedMemoryUnregisterResponse {
    if request.name.is_empty() {
        engine.shared_memory().unregister_all_cuda();
    } else {
        engine.shared_memory().unregister_cuda(&request.name);
    }
    CudaSharedMemoryUnregisterResponse {}
}
