//! A request's tensors in shared memory: inputs become slices of their
//! region (no copy) before the request is validated; outputs are located
//! before it runs (so a bad region fails it early, as in Triton) and
//! written once it has answered.

use std::ops::Range;
use std::sync::Arc;

use nereid_core::{Error, InferRequest, InferResponse, SharedMemoryRef};

use super::region::Region;
use super::{SharedMemoryError, SharedMemoryRegistry};

/// The outputs of a request that go into shared memory.
#[derive(Debug, Default)]
pub struct SharedMemoryPlan {
    outputs: Vec<OutputTarget>,
}

#[derive(Debug)]
struct OutputTarget {
    output: String,
    region: Arc<Region>,
    range: Range<usize>,
}

impl SharedMemoryRegistry {
    /// Replaces the data of the request's inputs in shared memory with
    /// their bytes, and locates its outputs in shared memory. The shared
    /// memory parameters are removed, so backends never see them.
    pub fn prepare(&self, request: &mut InferRequest) -> Result<SharedMemoryPlan, Error> {
        for input in &mut request.inputs {
            if let Some(place) = SharedMemoryRef::take(&mut input.parameters)? {
                let (region, range) = self.locate(&place)?;
                input.data = region
                    .slice(range)
                    .ok_or_else(|| SharedMemoryError::Range(place.region.clone()))?;
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
    ) -> Result<(Arc<Region>, Range<usize>), SharedMemoryError> {
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
        // Both fit in the mapping's length, which is a usize.
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
            target
                .region
                .write(target.range.start as u64, &tensor.data)
                .map_err(|source| SharedMemoryError::Write {
                    output: target.output.clone(),
                    region: target.region.status.name.clone(),
                    source,
                })?;
            tensor.data = bytes::Bytes::new();
            response.in_shared_memory.push(target.output);
        }
        Ok(())
    }
}
