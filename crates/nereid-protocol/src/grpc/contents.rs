//! Typed `InferTensorContents` -> the raw little-endian layout (or `BYTES`
//! framing) the engine works on. Each list of the message stands for one
//! datatype; a non-empty list of another kind than the input's datatype is
//! refused with Triton's message. Element counts are left to the engine,
//! which checks byte sizes against the shape with Triton's wording.
//! FP16 and BF16 have no typed list: they come in `raw_input_contents`.

use bytes::Bytes;
use nereid_core::{DataType, Error};

use crate::inference::InferTensorContents;

/// Where an input's typed contents end up, for error messages.
pub(super) struct Target<'a> {
    pub input: &'a str,
    pub model: &'a str,
    pub datatype: DataType,
}

/// Serializes `contents` for the input `target` describes.
pub(super) fn contents_to_raw(
    target: &Target<'_>,
    contents: InferTensorContents,
) -> Result<Bytes, Error> {
    check_kinds(target, &contents)?;
    let c = contents;
    let data = match target.datatype {
        DataType::Bool => pack(&c.bool_contents, |&b| [u8::from(b)]),
        DataType::Int8 => narrow(target, &c.int_contents, i8::to_le_bytes)?,
        DataType::Int16 => narrow(target, &c.int_contents, i16::to_le_bytes)?,
        DataType::Int32 => pack(&c.int_contents, |v| v.to_le_bytes()),
        DataType::Int64 => pack(&c.int64_contents, |v| v.to_le_bytes()),
        DataType::Uint8 => narrow(target, &c.uint_contents, u8::to_le_bytes)?,
        DataType::Uint16 => narrow(target, &c.uint_contents, u16::to_le_bytes)?,
        DataType::Uint32 => pack(&c.uint_contents, |v| v.to_le_bytes()),
        DataType::Uint64 => pack(&c.uint64_contents, |v| v.to_le_bytes()),
        DataType::Fp32 => pack(&c.fp32_contents, |v| v.to_le_bytes()),
        DataType::Fp64 => pack(&c.fp64_contents, |v| v.to_le_bytes()),
        DataType::Bytes => frame(target, &c.bytes_contents)?,
        // No list carries these; check_kinds refused any non-empty one.
        DataType::Fp16 | DataType::Bf16 => Vec::new(),
    };
    Ok(Bytes::from(data))
}

/// Refuses any non-empty list whose kind is not the input's datatype.
fn check_kinds(target: &Target<'_>, c: &InferTensorContents) -> Result<(), Error> {
    let dt = target.datatype;
    // int_contents carries INT8/INT16/INT32, uint_contents UINT8/16/32.
    let int_kind = if matches!(dt, DataType::Int8 | DataType::Int16) {
        dt
    } else {
        DataType::Int32
    };
    let uint_kind = if matches!(dt, DataType::Uint8 | DataType::Uint16) {
        dt
    } else {
        DataType::Uint32
    };
    let present = [
        (!c.bool_contents.is_empty(), DataType::Bool),
        (!c.int_contents.is_empty(), int_kind),
        (!c.int64_contents.is_empty(), DataType::Int64),
        (!c.uint_contents.is_empty(), uint_kind),
        (!c.uint64_contents.is_empty(), DataType::Uint64),
        (!c.fp32_contents.is_empty(), DataType::Fp32),
        (!c.fp64_contents.is_empty(), DataType::Fp64),
        (!c.bytes_contents.is_empty(), DataType::Bytes),
    ];
    match present.iter().find(|&&(set, kind)| set && kind != dt) {
        None => Ok(()),
        Some(&(_, kind)) => Err(Error::invalid_argument(format!(
            "unexpected explicit tensor data for input tensor '{}' for model '{}' of type '{kind}', expected datatype '{dt}'",
            target.input, target.model
        ))),
    }
}

/// Lays out `values` with `to_le`. The output is at most as large as the
/// decoded list (`N` never exceeds the element's in-memory size).
fn pack<T, const N: usize>(values: &[T], to_le: impl Fn(&T) -> [u8; N]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * N);
    for v in values {
        out.extend_from_slice(&to_le(v));
    }
    out
}

/// Lays out 32-bit values as a narrower type, refusing values that do not
/// fit (Triton would silently keep the low bytes).
fn narrow<W, T, const N: usize>(
    target: &Target<'_>,
    values: &[W],
    to_le: fn(T) -> [u8; N],
) -> Result<Vec<u8>, Error>
where
    W: Copy + std::fmt::Display,
    T: TryFrom<W>,
{
    let mut out = Vec::with_capacity(values.len() * N);
    for (index, &v) in values.iter().enumerate() {
        let narrowed = T::try_from(v).map_err(|_| {
            Error::invalid_argument(format!(
                "value {v} at index {index} of input '{}' does not fit datatype '{}'",
                target.input, target.datatype
            ))
        })?;
        out.extend_from_slice(&to_le(narrowed));
    }
    Ok(out)
}

/// Frames each element as a u32 little-endian length and its bytes.
fn frame(target: &Target<'_>, elements: &[Bytes]) -> Result<Vec<u8>, Error> {
    let mut total = 0usize;
    for (index, e) in elements.iter().enumerate() {
        let len = u32::try_from(e.len()).map_err(|_| {
            Error::invalid_argument(format!(
                "element {index} of input '{}' is longer than 4 GiB",
                target.input
            ))
        })?;
        total = total.saturating_add(4).saturating_add(len as usize);
    }
    let mut out = Vec::with_capacity(total);
    for e in elements {
        nereid_core::tensor::push_bytes_element(&mut out, e);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use nereid_core::ErrorKind;

    use super::*;

    fn to_raw(datatype: DataType, contents: InferTensorContents) -> Result<Bytes, Error> {
        let target = Target {
            input: "INPUT0",
            model: "m",
            datatype,
        };
        contents_to_raw(&target, contents)
    }

    fn le<T: Copy, const N: usize>(values: &[T], f: fn(T) -> [u8; N]) -> Vec<u8> {
        values.iter().flat_map(|&v| f(v)).collect()
    }

    fn with(fill: impl FnOnce(&mut InferTensorContents)) -> InferTensorContents {
        let mut c = InferTensorContents::default();
        fill(&mut c);
        c
    }

    fn check(datatype: DataType, contents: InferTensorContents, expected: Vec<u8>) {
        let raw = to_raw(datatype, contents).unwrap();
        assert_eq!(raw.as_ref(), expected.as_slice(), "{datatype}");
    }

    #[test]
    fn every_typed_datatype() {
        let ints = [-2, 0, 7];
        let uints = [0, 9, 200];
        check(
            DataType::Bool,
            with(|c| c.bool_contents = vec![true, false]),
            vec![1, 0],
        );
        let int = || with(|c| c.int_contents = ints.to_vec());
        check(DataType::Int8, int(), le(&[-2i8, 0, 7], i8::to_le_bytes));
        check(DataType::Int16, int(), le(&[-2i16, 0, 7], i16::to_le_bytes));
        check(DataType::Int32, int(), le(&ints, i32::to_le_bytes));
        let int64 = [i64::MIN, 5];
        check(
            DataType::Int64,
            with(|c| c.int64_contents = int64.to_vec()),
            le(&int64, i64::to_le_bytes),
        );
        let uint = || with(|c| c.uint_contents = uints.to_vec());
        check(DataType::Uint8, uint(), vec![0, 9, 200]);
        check(
            DataType::Uint16,
            uint(),
            le(&[0u16, 9, 200], u16::to_le_bytes),
        );
        check(DataType::Uint32, uint(), le(&uints, u32::to_le_bytes));
        let uint64 = [u64::MAX, 1];
        check(
            DataType::Uint64,
            with(|c| c.uint64_contents = uint64.to_vec()),
            le(&uint64, u64::to_le_bytes),
        );
        let fp32 = [1.5f32, -0.0];
        check(
            DataType::Fp32,
            with(|c| c.fp32_contents = fp32.to_vec()),
            le(&fp32, f32::to_le_bytes),
        );
        let fp64 = [2.25f64];
        check(
            DataType::Fp64,
            with(|c| c.fp64_contents = fp64.to_vec()),
            le(&fp64, f64::to_le_bytes),
        );
        let strings = vec![Bytes::from_static(b"a"), Bytes::new()];
        check(
            DataType::Bytes,
            with(|c| c.bytes_contents = strings),
            vec![1, 0, 0, 0, b'a', 0, 0, 0, 0],
        );
    }

    #[test]
    fn empty_contents_give_empty_data() {
        for dt in DataType::ALL {
            assert_eq!(
                to_raw(dt, InferTensorContents::default()).unwrap().len(),
                0,
                "{dt}"
            );
        }
    }

    #[test]
    fn wrong_kind_uses_tritons_message() {
        let c = InferTensorContents {
            fp32_contents: vec![1.0],
            ..Default::default()
        };
        let e = to_raw(DataType::Int32, c).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(
            e.message(),
            "unexpected explicit tensor data for input tensor 'INPUT0' for model 'm' of type 'FP32', expected datatype 'INT32'"
        );
        let c = InferTensorContents {
            int_contents: vec![1],
            ..Default::default()
        };
        let e = to_raw(DataType::Fp32, c).unwrap_err();
        assert!(
            e.message()
                .contains("of type 'INT32', expected datatype 'FP32'"),
            "{e}"
        );
        let c = InferTensorContents {
            fp32_contents: vec![1.0],
            ..Default::default()
        };
        let e = to_raw(DataType::Fp16, c).unwrap_err();
        assert!(
            e.message()
                .contains("of type 'FP32', expected datatype 'FP16'"),
            "{e}"
        );
        // A matching list beside a wrong one is still refused.
        let c = InferTensorContents {
            int_contents: vec![1],
            bool_contents: vec![true],
            ..Default::default()
        };
        assert_eq!(
            to_raw(DataType::Int32, c).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn narrowing_refuses_out_of_range_values() {
        let c = InferTensorContents {
            int_contents: vec![1, 300],
            ..Default::default()
        };
        let e = to_raw(DataType::Int8, c).unwrap_err();
        assert_eq!(
            e.message(),
            "value 300 at index 1 of input 'INPUT0' does not fit datatype 'INT8'"
        );
        let c = InferTensorContents {
            uint_contents: vec![70_000],
            ..Default::default()
        };
        assert_eq!(
            to_raw(DataType::Uint16, c).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }
}
