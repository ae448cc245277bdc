//! Tensor data in JSON: nested arrays of numbers, booleans or strings in
//! row-major order <-> the raw little-endian layout (and `BYTES` framing)
//! that core tensors carry. FP16 and BF16 travel in binary only: Triton
//! refuses them in JSON both ways, with the words below.

use nereid_core::tensor::{bytes_elements, push_bytes_element};
use nereid_core::{DataType, Error};
use serde::ser::{Error as _, Serialize, SerializeSeq, Serializer};
use serde_json::Value;

/// Encodes the JSON `data` of input `name` as raw bytes. `expected` is the
/// element count the shape implies; a different count is an error before
/// anything is allocated for the elements.
pub fn encode(
    name: &str,
    datatype: DataType,
    data: &Value,
    expected: u64,
) -> Result<Vec<u8>, Error> {
    // Triton reads no data at all for an empty shape, so only then is a
    // half-float input in JSON let through.
    if is_binary_only(datatype) && expected != 0 {
        return Err(Error::invalid_argument(format!(
            "receiving {datatype} data via JSON is not supported. Please use the binary data format for input {name}"
        )));
    }
    let mut flat = Vec::new();
    flatten(data, &mut flat);
    if flat.len() as u64 != expected {
        return Err(Error::invalid_argument(format!(
            "Unable to parse 'data' of input '{name}': the shape holds {expected} elements but 'data' has {}",
            flat.len()
        )));
    }
    let mut out = Vec::with_capacity(flat.len() * datatype.element_size().unwrap_or(8));
    for (index, value) in flat.into_iter().enumerate() {
        push_element(&mut out, datatype, value).ok_or_else(|| {
            Error::invalid_argument(format!(
                "Unable to parse 'data' of input '{name}': element {index} ({value}) is not a valid {datatype}"
            ))
        })?;
    }
    Ok(out)
}

/// Whether tensors of `datatype` are never sent as JSON, as in Triton.
fn is_binary_only(datatype: DataType) -> bool {
    matches!(datatype, DataType::Fp16 | DataType::Bf16)
}

/// Refuses an output of `datatype` requested as JSON, in Triton's words
/// (which, unlike the input's, name no tensor).
pub fn check_output(datatype: DataType) -> Result<(), Error> {
    if is_binary_only(datatype) {
        return Err(Error::invalid_argument(format!(
            "sending {datatype} data via JSON is not supported. Please use the binary data format for output"
        )));
    }
    Ok(())
}

fn flatten<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| flatten(v, out)),
        other => out.push(other),
    }
}

/// Appends one element; `None` when the value does not fit the type.
fn push_element(out: &mut Vec<u8>, datatype: DataType, value: &Value) -> Option<()> {
    macro_rules! int {
        ($t:ty) => {{
            let v: $t = match value {
                Value::Number(n) => n
                    .as_i64()
                    .and_then(|i| <$t>::try_from(i).ok())
                    .or_else(|| n.as_u64().and_then(|u| <$t>::try_from(u).ok()))?,
                _ => return None,
            };
            out.extend_from_slice(&v.to_le_bytes());
        }};
    }
    match datatype {
        DataType::Bool => out.push(u8::from(value.as_bool()?)),
        DataType::Uint8 => int!(u8),
        DataType::Uint16 => int!(u16),
        DataType::Uint32 => int!(u32),
        DataType::Uint64 => int!(u64),
        DataType::Int8 => int!(i8),
        DataType::Int16 => int!(i16),
        DataType::Int32 => int!(i32),
        DataType::Int64 => int!(i64),
        // Refused by `encode` before any element is read.
        DataType::Fp16 | DataType::Bf16 => return None,
        DataType::Fp32 => out.extend_from_slice(&(value.as_f64()? as f32).to_le_bytes()),
        DataType::Fp64 => out.extend_from_slice(&value.as_f64()?.to_le_bytes()),
        DataType::Bytes => push_bytes_element(out, value.as_str()?.as_bytes()),
    }
    Some(())
}

/// Serializes raw tensor bytes as a flat JSON array of its elements.
#[derive(Debug)]
pub struct JsonData<'a> {
    pub datatype: DataType,
    pub data: &'a [u8],
}

impl Serialize for JsonData<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        macro_rules! each {
            ($t:ty, $n:expr, $conv:expr) => {{
                let chunks = self.data.chunks_exact($n);
                let mut seq = serializer.serialize_seq(Some(chunks.len()))?;
                for c in chunks {
                    let v = <$t>::from_le_bytes(c.try_into().map_err(S::Error::custom)?);
                    seq.serialize_element(&$conv(v))?;
                }
                seq.end()
            }};
        }
        match self.datatype {
            DataType::Bool => each!(u8, 1, |v: u8| v != 0),
            DataType::Uint8 => each!(u8, 1, |v| v),
            DataType::Uint16 => each!(u16, 2, |v| v),
            DataType::Uint32 => each!(u32, 4, |v| v),
            DataType::Uint64 => each!(u64, 8, |v| v),
            DataType::Int8 => each!(i8, 1, |v| v),
            DataType::Int16 => each!(i16, 2, |v| v),
            DataType::Int32 => each!(i32, 4, |v| v),
            DataType::Int64 => each!(i64, 8, |v| v),
            // `encode_infer_response` refuses these before serializing.
            DataType::Fp16 | DataType::Bf16 => Err(S::Error::custom(format!(
                "{} data is sent in binary only",
                self.datatype
            ))),
            DataType::Fp32 => each!(f32, 4, |v| v),
            DataType::Fp64 => each!(f64, 8, |v| v),
            DataType::Bytes => {
                let mut seq = serializer.serialize_seq(None)?;
                for element in bytes_elements(self.data) {
                    let element = element.map_err(S::Error::custom)?;
                    seq.serialize_element(&String::from_utf8_lossy(element))?;
                }
                seq.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn round_trip(datatype: DataType, data: Value, n: u64) -> Value {
        let bytes = encode("X", datatype, &data, n).unwrap();
        serde_json::to_value(JsonData {
            datatype,
            data: &bytes,
        })
        .unwrap()
    }

    #[test]
    fn every_type_round_trips() {
        assert_eq!(
            round_trip(DataType::Bool, json!([[true, false]]), 2),
            json!([true, false])
        );
        assert_eq!(
            round_trip(DataType::Int8, json!([-128, 127]), 2),
            json!([-128, 127])
        );
        assert_eq!(
            round_trip(DataType::Uint64, json!([u64::MAX]), 1),
            json!([u64::MAX])
        );
        assert_eq!(
            round_trip(DataType::Int64, json!([i64::MIN]), 1),
            json!([i64::MIN])
        );
        assert_eq!(round_trip(DataType::Fp32, json!([0.25]), 1), json!([0.25]));
        assert_eq!(
            round_trip(DataType::Fp64, json!([1e300]), 1),
            json!([1e300])
        );
        assert_eq!(
            round_trip(DataType::Bytes, json!(["a", "", "é"]), 3),
            json!(["a", "", "é"])
        );
    }

    #[test]
    fn half_floats_are_refused_in_json_as_triton_refuses_them() {
        let e = encode("INPUT0", DataType::Fp16, &json!([1.5, -2.0]), 2).unwrap_err();
        assert_eq!(
            e.message(),
            "receiving FP16 data via JSON is not supported. Please use the binary data format for input INPUT0"
        );
        let e = encode("X", DataType::Bf16, &json!([[1.5]]), 1).unwrap_err();
        assert!(e.message().starts_with("receiving BF16 data"), "{e}");
        // An empty tensor carries no data to refuse.
        assert_eq!(encode("X", DataType::Fp16, &json!([]), 0).unwrap(), b"");
        let e = check_output(DataType::Fp16).unwrap_err();
        assert_eq!(
            e.message(),
            "sending FP16 data via JSON is not supported. Please use the binary data format for output"
        );
        assert!(check_output(DataType::Fp32).is_ok());
    }

    #[test]
    fn out_of_range_and_wrong_counts_are_errors() {
        assert!(encode("X", DataType::Uint8, &json!([256]), 1).is_err());
        assert!(encode("X", DataType::Int32, &json!([1.5]), 1).is_err());
        assert!(encode("X", DataType::Bool, &json!([1]), 1).is_err());
        assert!(encode("X", DataType::Int32, &json!([1, 2]), 3).is_err());
        assert!(encode("X", DataType::Int32, &json!([1, 2]), u64::MAX).is_err());
    }
}
