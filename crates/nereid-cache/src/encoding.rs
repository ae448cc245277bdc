//! What the Redis cache stores, and under which key: both the same on
//! every replica and every run, so that replicas share answers.
//!
//! **Key**: `nereid:cache:v1:` and the lowercase hex SHA-256 of a canonical
//! encoding of the model name, the version and the [`CacheKey`]: the count
//! of inputs, each input's name, datatype (KServe name), dims and data; the
//! count of requested outputs, each one's name and parameters; the request
//! parameters (parameters as `key=value;` text, sorted by key, without
//! those that only change how the answer travels). Each field goes in as
//! its length (a little-endian u64) and its bytes, numbers and counts as
//! their little-endian bytes, so no two requests encode alike; nothing in
//! it depends on the process (no random hashing seed).
//!
//! **Value**: the answer in a binary layout of its own, little-endian:
//!
//! ```text
//! "NRC1"                                  magic and layout version
//! str model_name, i64 model_version
//! u32 n, n × (str key, u8 kind, value)    response parameters; kind 0 bool
//!                                         (u8), 1 int64, 2 uint64, 3 double
//!                                         (8 bytes each), 4 string (str)
//! u32 n, n × output:                      outputs
//!     str name, str datatype (KServe name, "FP32"), u32 rank,
//!     rank × i64 dim, u64 length, length bytes of data
//! u32 n, n × str                          outputs left in shared memory
//! ```
//!
//! where `str` is a u32 length and UTF-8 bytes. The response's `id` is
//! not stored: a hit carries the id of the request it answers. A value
//! that does not decode (another layout, a truncated write) is a miss.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use nereid_core::{DataType, InferResponse, Parameter, Parameters, Tensor};
use sha2::{Digest, Sha256};

use super::CacheKey;

/// The start of every key; the version changes with the key's encoding.
const KEY_PREFIX: &str = "nereid:cache:v1:";
/// The start of every value; its last byte is the layout's version.
const MAGIC: &[u8; 4] = b"NRC1";

/// The Redis key of `key` for `model` version `version`.
pub(super) fn redis_key(model: &str, version: i64, key: &CacheKey) -> String {
    let mut hash = Sha256::new();
    let mut bytes = |data: &[u8]| {
        hash.update((data.len() as u64).to_le_bytes());
        hash.update(data);
    };
    bytes(model.as_bytes());
    bytes(&version.to_le_bytes());
    bytes(&(key.inputs.len() as u32).to_le_bytes());
    for input in &key.inputs {
        bytes(input.name.as_bytes());
        bytes(input.datatype.wire_name().as_bytes());
        let dims: Vec<u8> = input.shape.iter().flat_map(|d| d.to_le_bytes()).collect();
        bytes(&dims);
        bytes(&input.data);
    }
    bytes(&(key.outputs.len() as u32).to_le_bytes());
    for (name, parameters) in &key.outputs {
        bytes(name.as_bytes());
        bytes(parameters.as_bytes());
    }
    bytes(key.parameters.as_bytes());
    let digest = hash.finalize();
    let mut text = String::with_capacity(KEY_PREFIX.len() + 2 * digest.len());
    text.push_str(KEY_PREFIX);
    for byte in digest {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    text
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `response` as the value layout above.
pub(super) fn encode_response(response: &InferResponse) -> Vec<u8> {
    let data: usize = response.outputs.iter().map(|t| t.data.len()).sum();
    let mut out = BytesMut::with_capacity(data + 256);
    out.put_slice(MAGIC);
    put_str(&mut out, &response.model_name);
    out.put_i64_le(response.model_version);
    out.put_u32_le(response.parameters.len() as u32);
    for (key, value) in &response.parameters {
        put_str(&mut out, key);
        put_parameter(&mut out, value);
    }
    out.put_u32_le(response.outputs.len() as u32);
    for tensor in &response.outputs {
        put_str(&mut out, &tensor.name);
        put_str(&mut out, tensor.datatype.wire_name());
        out.put_u32_le(tensor.shape.len() as u32);
        for dim in &tensor.shape {
            out.put_i64_le(*dim);
        }
        out.put_u64_le(tensor.data.len() as u64);
        out.put_slice(&tensor.data);
    }
    out.put_u32_le(response.in_shared_memory.len() as u32);
    for name in &response.in_shared_memory {
        put_str(&mut out, name);
    }
    out.to_vec()
}

/// The answer `value` holds; `None` when it is not a whole value of this
/// layout. Tensor data are slices of `value`.
pub(super) fn decode_response(value: Bytes) -> Option<InferResponse> {
    let mut value = value;
    if value.get(..MAGIC.len())? != MAGIC {
        return None;
    }
    value.advance(MAGIC.len());
    let model_name = take_str(&mut value)?;
    let model_version = take_i64(&mut value)?;
    let mut parameters = Parameters::new();
    for _ in 0..take_u32(&mut value)? {
        let key = take_str(&mut value)?;
        parameters.insert(key, take_parameter(&mut value)?);
    }
    let count = take_u32(&mut value)?;
    let mut outputs = Vec::new();
    for _ in 0..count {
        outputs.push(take_tensor(&mut value)?);
    }
    let mut in_shared_memory = Vec::new();
    for _ in 0..take_u32(&mut value)? {
        in_shared_memory.push(take_str(&mut value)?);
    }
    value.is_empty().then_some(InferResponse {
        model_name,
        model_version,
        id: String::new(),
        outputs,
        parameters,
        in_shared_memory,
    })
}

fn put_str(out: &mut BytesMut, text: &str) {
    out.put_u32_le(text.len() as u32);
    out.put_slice(text.as_bytes());
}

fn put_parameter(out: &mut BytesMut, value: &Parameter) {
    match value {
        Parameter::Bool(b) => {
            out.put_u8(0);
            out.put_u8(u8::from(*b));
        }
        Parameter::Int64(i) => {
            out.put_u8(1);
            out.put_i64_le(*i);
        }
        Parameter::Uint64(u) => {
            out.put_u8(2);
            out.put_u64_le(*u);
        }
        Parameter::Double(d) => {
            out.put_u8(3);
            out.put_f64_le(*d);
        }
        Parameter::String(s) => {
            out.put_u8(4);
            put_str(out, s);
        }
    }
}

fn take_parameter(value: &mut Bytes) -> Option<Parameter> {
    Some(match take_bytes(value, 1)?[0] {
        0 => Parameter::Bool(take_bytes(value, 1)?[0] != 0),
        1 => Parameter::Int64(take_i64(value)?),
        2 => Parameter::Uint64(take_u64(value)?),
        3 => Parameter::Double(f64::from_bits(take_u64(value)?)),
        4 => Parameter::String(take_str(value)?),
        _ => return None,
    })
}

fn take_tensor(value: &mut Bytes) -> Option<Tensor> {
    let name = take_str(value)?;
    let datatype = DataType::from_wire_name(&take_str(value)?)?;
    let rank = take_u32(value)?;
    let mut shape = Vec::new();
    for _ in 0..rank {
        shape.push(take_i64(value)?);
    }
    let length = usize::try_from(take_u64(value)?).ok()?;
    let data = take_bytes(value, length)?;
    Some(Tensor {
        name,
        datatype,
        shape,
        data,
    })
}

/// The next `n` bytes, if there are as many.
fn take_bytes(value: &mut Bytes, n: usize) -> Option<Bytes> {
    (value.len() >= n).then(|| value.split_to(n))
}

fn take_u32(value: &mut Bytes) -> Option<u32> {
    let bytes = take_bytes(value, 4)?;
    Some(u32::from_le_bytes(bytes.as_ref().try_into().ok()?))
}

fn take_u64(value: &mut Bytes) -> Option<u64> {
    let bytes = take_bytes(value, 8)?;
    Some(u64::from_le_bytes(bytes.as_ref().try_into().ok()?))
}

fn take_i64(value: &mut Bytes) -> Option<i64> {
    take_u64(value).map(|u| u as i64)
}

fn take_str(value: &mut Bytes) -> Option<String> {
    let length = usize::try_from(take_u32(value)?).ok()?;
    String::from_utf8(take_bytes(value, length)?.to_vec()).ok()
}

#[cfg(test)]
mod tests;
