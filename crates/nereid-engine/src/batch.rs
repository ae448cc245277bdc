//! Gathering requests into one batch and scattering a batch's outputs back.
//! A single request passes through without a copy; several are copied once
//! into one contiguous buffer per input. Outputs go back to each request as
//! `Bytes` slices of the batch output, never copied again.

use bytes::{Bytes, BytesMut};
use nereid_core::tensor::{bytes_elements, element_count};
use nereid_core::{Batch, DataType, Error, Tensor};

use crate::validate::ValidatedRequest;

/// Builds the batch for `requests`, which the scheduler guarantees share
/// input names and non-batch shapes. `batching` says whether the model has
/// a batch dimension.
pub fn gather(requests: &[&ValidatedRequest], batching: bool) -> Batch {
    let mut outputs: Vec<String> = Vec::new();
    for r in requests {
        for name in &r.outputs {
            if !outputs.contains(name) {
                outputs.push(name.clone());
            }
        }
    }
    let inputs = match requests {
        [single] => single.request.inputs.iter().map(input_tensor).collect(),
        _ => concat_inputs(requests, batching),
    };
    Batch { inputs, outputs }
}

fn input_tensor(input: &nereid_core::InputTensor) -> Tensor {
    Tensor {
        name: input.name.clone(),
        datatype: input.datatype,
        shape: input.shape.clone(),
        data: input.data.clone(),
    }
}

fn concat_inputs(requests: &[&ValidatedRequest], batching: bool) -> Vec<Tensor> {
    let Some(first) = requests.first() else {
        return Vec::new();
    };
    first
        .request
        .inputs
        .iter()
        .map(|proto| {
            let parts: Vec<&Bytes> = requests
                .iter()
                .filter_map(|r| r.request.inputs.iter().find(|i| i.name == proto.name))
                .map(|i| &i.data)
                .collect();
            let mut data = BytesMut::with_capacity(parts.iter().map(|p| p.len()).sum());
            for part in parts {
                data.extend_from_slice(part);
            }
            let mut shape = proto.shape.clone();
            if batching && !shape.is_empty() {
                shape[0] = requests.iter().map(|r| r.batch_size as i64).sum();
            }
            Tensor {
                name: proto.name.clone(),
                datatype: proto.datatype,
                shape,
                data: data.freeze(),
            }
        })
        .collect()
}

/// Splits batch outputs back into one output list per request, in request
/// order, each holding the outputs that request asked for.
pub fn scatter(
    requests: &[&ValidatedRequest],
    outputs: Vec<Tensor>,
) -> Result<Vec<Vec<Tensor>>, Error> {
    if let [single] = requests {
        return Ok(vec![pick(&single.outputs, outputs)?]);
    }
    let mut per_request: Vec<Vec<Tensor>> = requests.iter().map(|_| Vec::new()).collect();
    let sizes: Vec<u64> = requests.iter().map(|r| r.batch_size).collect();
    for output in outputs {
        let slices = split_rows(&output, &sizes)?;
        for ((slot, request), tensor) in per_request.iter_mut().zip(requests).zip(slices) {
            if request.outputs.contains(&tensor.name) {
                slot.push(tensor);
            }
        }
    }
    for (slot, request) in per_request.iter_mut().zip(requests) {
        slot.sort_by_key(|t| request.outputs.iter().position(|n| *n == t.name));
    }
    Ok(per_request)
}

/// Orders a single request's outputs as it asked, checking none is missing.
pub fn pick(names: &[String], mut outputs: Vec<Tensor>) -> Result<Vec<Tensor>, Error> {
    names
        .iter()
        .map(|name| {
            let pos = outputs
                .iter()
                .position(|t| &t.name == name)
                .ok_or_else(|| Error::internal(format!("backend returned no output '{name}'")))?;
            Ok(outputs.swap_remove(pos))
        })
        .collect()
}

/// Splits `output` along its first dimension into pieces of `sizes` rows,
/// slices of its data (BYTES rows found by walking their framing). Also
/// for callers that cut a response of several rows back into its rows (a
/// batch job's requests of several records).
pub fn split_rows(output: &Tensor, sizes: &[u64]) -> Result<Vec<Tensor>, Error> {
    let total: u64 = sizes.iter().sum();
    let rows = output.shape.first().copied().unwrap_or(0);
    if rows < 0 || rows as u64 != total {
        return Err(Error::internal(format!(
            "output '{}' has {rows} rows for a batch of {total}",
            output.name
        )));
    }
    let row_elements = element_count(&output.shape[1..]).unwrap_or(0);
    let offsets = row_offsets(output, row_elements, total)?;
    let mut start_row = 0usize;
    Ok(sizes
        .iter()
        .map(|&n| {
            let end_row = start_row + n as usize;
            let data = output.data.slice(offsets[start_row]..offsets[end_row]);
            start_row = end_row;
            let mut shape = output.shape.clone();
            shape[0] = n as i64;
            Tensor {
                name: output.name.clone(),
                datatype: output.datatype,
                shape,
                data,
            }
        })
        .collect())
}

/// Byte offset where each row starts, plus the end, for `rows` rows.
fn row_offsets(output: &Tensor, row_elements: u64, rows: u64) -> Result<Vec<usize>, Error> {
    if output.datatype != DataType::Bytes {
        let row_bytes = if rows == 0 {
            0
        } else {
            output.data.len() / rows as usize
        };
        return Ok((0..=rows as usize).map(|r| r * row_bytes).collect());
    }
    let mut offsets = vec![0];
    let mut pos = 0usize;
    let mut in_row = 0u64;
    for element in bytes_elements(&output.data) {
        let element =
            element.map_err(|e| Error::internal(format!("output '{}': {e}", output.name)))?;
        pos += 4 + element.len();
        in_row += 1;
        if in_row == row_elements {
            offsets.push(pos);
            in_row = 0;
        }
    }
    if row_elements == 0 {
        offsets.resize(rows as usize + 1, 0);
    }
    if offsets.len() != rows as usize + 1 {
        return Err(Error::internal(format!(
            "output '{}' has a partial row",
            output.name
        )));
    }
    Ok(offsets)
}
