//! Between Nereid tensors (raw little-endian bytes, `BYTES` in Triton's
//! framing) and ONNX Runtime values.
//!
//! Inputs are borrowed without a copy when the request bytes happen to be
//! aligned for the element type; otherwise they are copied once into an
//! aligned buffer. Outputs are copied once out of ONNX Runtime's buffer.

use bytes::Bytes;
use half::{bf16, f16};
use nereid_core::tensor::{count_bytes_elements, element_count, fixed_byte_size};
use nereid_core::{DataType, Tensor};
use ort::memory::Allocator;
use ort::session::SessionInputValue;
use ort::value::{
    DynTensor, DynValue, PrimitiveTensorElementType, TensorElementType, TensorRef, ValueType,
};

use crate::strings;

/// The Nereid type of an ONNX Runtime element type; `None` for types
/// Triton has no name for (complex, 8-bit and 4-bit floats, ...).
pub(crate) fn datatype_of(ty: TensorElementType) -> Option<DataType> {
    Some(match ty {
        TensorElementType::Bool => DataType::Bool,
        TensorElementType::Uint8 => DataType::Uint8,
        TensorElementType::Uint16 => DataType::Uint16,
        TensorElementType::Uint32 => DataType::Uint32,
        TensorElementType::Uint64 => DataType::Uint64,
        TensorElementType::Int8 => DataType::Int8,
        TensorElementType::Int16 => DataType::Int16,
        TensorElementType::Int32 => DataType::Int32,
        TensorElementType::Int64 => DataType::Int64,
        TensorElementType::Float16 => DataType::Fp16,
        TensorElementType::Bfloat16 => DataType::Bf16,
        TensorElementType::Float32 => DataType::Fp32,
        TensorElementType::Float64 => DataType::Fp64,
        TensorElementType::String => DataType::Bytes,
        _ => return None,
    })
}

/// The element type and dims of a tensor-valued model input or output.
pub(crate) fn tensor_type(ty: &ValueType) -> Option<(TensorElementType, Vec<i64>)> {
    match ty {
        ValueType::Tensor { ty, shape, .. } => Some((*ty, shape.to_vec())),
        _ => None,
    }
}

/// Checks that `tensor.data` holds exactly what its shape and type say.
pub(crate) fn check_size(tensor: &Tensor) -> Result<(), String> {
    let expected = element_count(&tensor.shape).ok_or_else(|| {
        format!(
            "input '{}' has an invalid shape {:?}",
            tensor.name, tensor.shape
        )
    })?;
    match fixed_byte_size(tensor.datatype, &tensor.shape) {
        Some(bytes) if bytes == tensor.data.len() => Ok(()),
        Some(bytes) => Err(format!(
            "input '{}' with shape {:?} needs {bytes} bytes of {} but has {}",
            tensor.name,
            tensor.shape,
            tensor.datatype,
            tensor.data.len()
        )),
        None if tensor.datatype != DataType::Bytes => Err(format!(
            "input '{}' with shape {:?} is too large",
            tensor.name, tensor.shape
        )),
        None => match count_bytes_elements(&tensor.data) {
            Ok(n) if n as u64 == expected => Ok(()),
            Ok(n) => Err(format!(
                "input '{}' with shape {:?} needs {expected} BYTES elements but has {n}",
                tensor.name, tensor.shape
            )),
            Err(e) => Err(format!("input '{}': {e}", tensor.name)),
        },
    }
}

/// An ONNX Runtime input borrowing or copying `tensor`'s bytes. The caller
/// has checked the size with [`check_size`].
pub(crate) fn input_value(tensor: &Tensor) -> Result<SessionInputValue<'_>, ort::Error> {
    match tensor.datatype {
        DataType::Bool => bool_input(tensor),
        DataType::Uint8 => pod_input::<u8>(tensor),
        DataType::Uint16 => pod_input::<u16>(tensor),
        DataType::Uint32 => pod_input::<u32>(tensor),
        DataType::Uint64 => pod_input::<u64>(tensor),
        DataType::Int8 => pod_input::<i8>(tensor),
        DataType::Int16 => pod_input::<i16>(tensor),
        DataType::Int32 => pod_input::<i32>(tensor),
        DataType::Int64 => pod_input::<i64>(tensor),
        DataType::Fp16 => pod_input::<f16>(tensor),
        DataType::Bf16 => pod_input::<bf16>(tensor),
        DataType::Fp32 => pod_input::<f32>(tensor),
        DataType::Fp64 => pod_input::<f64>(tensor),
        DataType::Bytes => string_input(tensor),
    }
}

fn pod_input<T>(tensor: &Tensor) -> Result<SessionInputValue<'_>, ort::Error>
where
    T: PrimitiveTensorElementType + bytemuck::Pod + std::fmt::Debug,
{
    let shape = tensor.shape.clone();
    match bytemuck::try_cast_slice::<u8, T>(&tensor.data) {
        Ok(view) => Ok(TensorRef::from_array_view((shape, view))?.into()),
        Err(_) => {
            let owned: Vec<T> = bytemuck::pod_collect_to_vec(&tensor.data);
            Ok(ort::value::Tensor::from_array((shape, owned))?.into())
        }
    }
}

/// BOOL bytes are borrowed when every byte is 0 or 1, and normalised
/// (nonzero is true) otherwise, since other bytes are not valid `bool`s.
fn bool_input(tensor: &Tensor) -> Result<SessionInputValue<'_>, ort::Error> {
    let shape = tensor.shape.clone();
    match bytemuck::checked::try_cast_slice::<u8, bool>(&tensor.data) {
        Ok(view) => Ok(TensorRef::from_array_view((shape, view))?.into()),
        Err(_) => {
            let owned: Vec<bool> = tensor.data.iter().map(|&b| b != 0).collect();
            Ok(ort::value::Tensor::from_array((shape, owned))?.into())
        }
    }
}

fn string_input(tensor: &Tensor) -> Result<SessionInputValue<'_>, ort::Error> {
    let mut value = DynTensor::new(
        &Allocator::default(),
        TensorElementType::String,
        tensor.shape.clone(),
    )?;
    strings::fill(&mut value, &tensor.data)?;
    Ok(value.into())
}

/// Copies an output out of ONNX Runtime into a Nereid tensor.
pub(crate) fn output_tensor(name: &str, value: &DynValue) -> Result<Tensor, String> {
    let (ty, shape) =
        tensor_type(value.dtype()).ok_or_else(|| format!("output '{name}' is not a tensor"))?;
    let datatype = datatype_of(ty)
        .ok_or_else(|| format!("output '{name}' has unsupported element type {ty}"))?;
    let data = match datatype {
        DataType::Bool => pod_output::<bool>(value),
        DataType::Uint8 => pod_output::<u8>(value),
        DataType::Uint16 => pod_output::<u16>(value),
        DataType::Uint32 => pod_output::<u32>(value),
        DataType::Uint64 => pod_output::<u64>(value),
        DataType::Int8 => pod_output::<i8>(value),
        DataType::Int16 => pod_output::<i16>(value),
        DataType::Int32 => pod_output::<i32>(value),
        DataType::Int64 => pod_output::<i64>(value),
        DataType::Fp16 => pod_output::<f16>(value),
        DataType::Bf16 => pod_output::<bf16>(value),
        DataType::Fp32 => pod_output::<f32>(value),
        DataType::Fp64 => pod_output::<f64>(value),
        DataType::Bytes => element_count(&shape)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| ort::Error::new(format!("invalid shape {shape:?}")))
            .and_then(|n| strings::read(value, n))
            .map(Bytes::from),
    }
    .map_err(|e| format!("cannot read output '{name}': {e}"))?;
    Ok(Tensor {
        name: name.to_string(),
        datatype,
        shape,
        data,
    })
}

fn pod_output<T>(value: &DynValue) -> Result<Bytes, ort::Error>
where
    T: PrimitiveTensorElementType + bytemuck::NoUninit,
{
    let (_, data) = value.try_extract_tensor::<T>()?;
    Ok(Bytes::copy_from_slice(bytemuck::cast_slice::<T, u8>(data)))
}
