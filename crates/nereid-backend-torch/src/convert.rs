//! Between Nereid tensors (raw little-endian bytes, `BYTES` in Triton's
//! framing) and libtorch: datatypes, input tensors, output bytes.

use bytes::Bytes;
use nereid_core::tensor::{bytes_elements, fixed_byte_size, push_bytes_element};
use nereid_core::{DataType, Tensor};
use tch::Kind;

/// The libtorch element type of a Triton datatype. Triton's PyTorch
/// backend knows all but BF16 (which Nereid adds) and the unsigned types
/// above 8 bits (which libtorch cannot compute with).
pub(crate) fn kind_of(datatype: DataType) -> Option<Kind> {
    Some(match datatype {
        DataType::Bool => Kind::Bool,
        DataType::Uint8 => Kind::Uint8,
        DataType::Int8 => Kind::Int8,
        DataType::Int16 => Kind::Int16,
        DataType::Int32 => Kind::Int,
        DataType::Int64 => Kind::Int64,
        DataType::Fp16 => Kind::Half,
        DataType::Bf16 => Kind::BFloat16,
        DataType::Fp32 => Kind::Float,
        DataType::Fp64 => Kind::Double,
        DataType::Uint16 | DataType::Uint32 | DataType::Uint64 | DataType::Bytes => return None,
    })
}

/// The Triton datatype of a libtorch element type, if it has one.
pub(crate) fn datatype_of(kind: Kind) -> Option<DataType> {
    Some(match kind {
        Kind::Bool => DataType::Bool,
        Kind::Uint8 => DataType::Uint8,
        Kind::Int8 => DataType::Int8,
        Kind::Int16 => DataType::Int16,
        Kind::Int => DataType::Int32,
        Kind::Int64 => DataType::Int64,
        Kind::Half => DataType::Fp16,
        Kind::BFloat16 => DataType::Bf16,
        Kind::Float => DataType::Fp32,
        Kind::Double => DataType::Fp64,
        _ => return None,
    })
}

/// A CPU tensor holding a copy of `tensor`'s bytes. The size is checked
/// first: libtorch would read past a short buffer.
pub(crate) fn input_tensor(tensor: &Tensor) -> Result<tch::Tensor, String> {
    let kind = kind_of(tensor.datatype).ok_or_else(|| {
        format!(
            "input '{}' is {}, which libtorch cannot hold",
            tensor.name, tensor.datatype
        )
    })?;
    let expected = fixed_byte_size(tensor.datatype, &tensor.shape).ok_or_else(|| {
        format!(
            "input '{}' has an invalid shape {:?}",
            tensor.name, tensor.shape
        )
    })?;
    if tensor.data.len() != expected {
        return Err(format!(
            "input '{}' has {} bytes, shape {:?} of {} needs {expected}",
            tensor.name,
            tensor.data.len(),
            tensor.shape,
            tensor.datatype
        ));
    }
    tch::Tensor::f_from_data_size(&tensor.data, &tensor.shape, kind)
        .map_err(|e| format!("input '{}': {e}", tensor.name))
}

/// The elements of a `BYTES` input, borrowed from its buffer.
pub(crate) fn input_strings(tensor: &Tensor) -> Result<Vec<&[u8]>, String> {
    bytes_elements(&tensor.data)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("input '{}': {e}", tensor.name))
}

/// A returned tensor as a Nereid tensor of `datatype`, which the config
/// declares; a tensor of another type is Triton's error.
pub(crate) fn output_tensor(
    name: &str,
    datatype: DataType,
    value: &tch::Tensor,
) -> Result<Tensor, String> {
    let kind = value
        .f_kind()
        .map_err(|e| format!("output '{name}': {e}"))?;
    let actual = datatype_of(kind);
    if actual != Some(datatype) {
        let provides = actual.map_or_else(
            || format!("{kind:?}"),
            |d| d.to_config().as_str_name().to_owned(),
        );
        return Err(format!(
            "configuration expects datatype {} for output '{name}', model provides {provides}",
            datatype.to_config().as_str_name()
        ));
    }
    let shape = value.size();
    if shape.is_empty() {
        return Err(format!(
            "output '{name}' is a scalar which is not supported."
        ));
    }
    let numel = value.numel();
    let mut data = vec![0u8; numel * kind.elt_size_in_bytes()];
    value
        .f_copy_data_u8(&mut data, numel)
        .map_err(|e| format!("output '{name}': {e}"))?;
    Ok(Tensor {
        name: name.to_owned(),
        datatype,
        shape,
        data: Bytes::from(data),
    })
}

/// A returned `List[str]` as a one-dimensional `BYTES` tensor.
pub(crate) fn output_strings(
    name: &str,
    datatype: DataType,
    strings: &[&[u8]],
) -> Result<Tensor, String> {
    if datatype != DataType::Bytes {
        return Err(format!(
            "configuration expects datatype {} for output '{name}', model provides List[str] (TYPE_STRING)",
            datatype.to_config().as_str_name()
        ));
    }
    let mut data = Vec::with_capacity(strings.iter().map(|s| s.len() + 4).sum());
    for s in strings {
        push_bytes_element(&mut data, s);
    }
    Ok(Tensor {
        name: name.to_owned(),
        datatype,
        shape: vec![strings.len() as i64],
        data: Bytes::from(data),
    })
}
