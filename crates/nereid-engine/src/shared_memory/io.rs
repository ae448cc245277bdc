//! A request's tensors in shared memory. Inputs in a system region become
//! slices of it (no copy), inputs in a CUDA region are copied to host
//! memory, before the request is validated; outputs are located before it
//! runs (so a bad region fails it early, as in Triton) and written once it
//! has answered.

use std::ops::Range;

use bytes::Bytes;
use nereid_core::{Error, InferRequest, InferResponse, SharedMemoryRef};

use super::{Registered, SharedMemoryError, SharedMemoryRegistry};

/// The outputs of a request that go into shared memory.
#[derive(Debug, Default)]
pub struct SharedMemoryPlan {
    outputs: Vec<OutputTarget>,
}

#[derive(Debug)]
struct OutputTarget {
    output: String,
    region: Registered,
    range: Range<usize>,
}

impl Registered {
    fn len(&self) -> u64 {
        match self {
            Registered::System(r) => r.len(),
            Registered::Cuda(r) => r.memory.len(),
        }
    }

    fn name(&self) -> &str {
        match self {
            Registered::System(r) => &r.status.name,
            Registered::Cuda(r) => &r.name,
        }
    }

    /// The bytes of `range`: a slice of a system region, a host copy of a
    /// CUDA one.
    fn input(&self, tensor: &str, range: Range<usize>) -> Result<Bytes, SharedMemoryError> {
        match self {
            Registered::System(r) => r
                .slice(range)
                .ok_or_else(|| SharedMemoryError::Range(r.status.name.clone())),
            Registered::Cuda(r) => {
                r.memory
                    .read(range.start as u64, range.len())
                    .map_err(|source| SharedMemoryError::Copy {
                        tensor: tensor.to_string(),
                        region: r.name.clone(),
                        source,
                    })
            }
        }
    }

    fn write(&self, output: &str, offset: usize, data: &[u8]) -> Result<(), SharedMemoryError> {
        match self {
            Registered::System(r) => {
                r.write(offset as u64, data)
                    .map_err(|source| SharedMemoryError::Write {
                        output: output.to_string(),
                        region: r.status.name.clone(),
                        source,
                    })
            }
            Registered::Cuda(r) => {
                r.memory
                    .write(offset as u64, data)
                    .map_err(|source| SharedMemoryError::Copy {
                        tensor: output.to_string(),
                        region: r.name.clone(),
                        source,
                    })
            }
        }
    }
}

impl SharedMemoryRegistry {
    /// Replaces the data of the request's inputs in shared memory with
    /// their bytes, and locates its outputs in shared memory. The shared
    /// memory parameters are removed, so backends never see them.
    pub fn prepare(&self, request: &mut InferRequest) -> Result<SharedMemoryPlan, Error> {
        for input in &mut request.inputs {
            if let Some(place) = SharedMemoryRef::take(&mut input.parameters)? {
                let (region, range) = self.locate(&place)?;
                input.data = region.input(&input.name, range)?;
            }
        }
        let mut outputs = Vec::new();
        for output in &mut request.outputs {
            if let Some(place) = SharedMemoryRef::take(&mut output.parameters)? {
                let (region, range) = self.locate(&place)?;
                outputs.push(OutputTarget {
                    output: output.name.clone(),
                    region,
                    range,
                });
            }
        }
        Ok(SharedMemoryPlan { outputs })
    }

    /// The region a tensor is in and its byte range there, checked in
    /// Triton's order: the region, the offset, then offset + byte size.
    fn locate(
        &self,
        place: &SharedMemoryRef,
    ) -> Result<(Registered, Range<usize>), SharedMemoryError> {
        let region = self.get(&place.region)?;
        let size = region.len();
        if place.offset >= size {
            return Err(SharedMemoryError::Offset(place.region.clone()));
        }
        let end = place
            .byte_size
            .and_then(|b| place.offset.checked_add(b))
            .filter(|&end| end <= size)
            .ok_or_else(|| SharedMemoryError::Range(place.region.clone()))?;
        // Both fit in the region's length, which was checked against memory.
        let start = usize::try_from(place.offset).unwrap_or(usize::MAX);
        let end = usize::try_from(end).unwrap_or(usize::MAX);
        Ok((region, start..end))
    }
}

impl SharedMemoryPlan {
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }

    /// Writes the planned outputs of `response` into their regions; their
    /// data leaves the response, which names them in `in_shared_memory`.
    pub fn write(self, response: &mut InferResponse) -> Result<(), SharedMemoryError> {
        for target in self.outputs {
            let Some(tensor) = response
                .outputs
                .iter_mut()
                .find(|t| t.name == target.output)
            else {
                continue;
            };
            let given = target.range.len();
            if tensor.data.len() > given {
                return Err(SharedMemoryError::OutputTooSmall {
                    output: target.output,
                    given: given as u64,
                    needed: tensor.data.len(),
                });
            }
            tracing::trace!(output = %target.output, region = target.region.name(), "writing an output to shared memory");
            target
                .region
                .write(&target.output, target.range.start, &tensor.data)?;
            tensor.data = Bytes::new();
            response.in_shared_memory.push(target.output);
        }
        Ok(())
    }
}
