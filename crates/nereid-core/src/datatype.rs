//! Tensor element types, with their KServe v2 wire names and Triton's
//! `TYPE_*` config names.

use std::fmt;

use crate::model_config::DataType as ConfigDataType;

/// The element type of a tensor. `Bytes` holds variable-length elements,
/// each serialized as a 4-byte little-endian length followed by its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Bf16,
    Fp32,
    Fp64,
    Bytes,
}

impl DataType {
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Bf16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
    ];

    /// The KServe v2 name ("INT32", "FP16", "BYTES", ...).
    pub fn wire_name(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Bf16 => "BF16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
        }
    }

    /// Parses a KServe v2 name; `None` for anything else.
    pub fn from_wire_name(name: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|dt| dt.wire_name() == name)
    }

    /// Size of one element in bytes; `None` for variable-length `Bytes`.
    pub fn element_size(self) -> Option<usize> {
        match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => Some(1),
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => Some(2),
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => Some(4),
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => Some(8),
            DataType::Bytes => None,
        }
    }

    /// The type a config's `TYPE_*` names; `None` for `TYPE_INVALID`.
    pub fn from_config(dt: ConfigDataType) -> Option<DataType> {
        Some(match dt {
            ConfigDataType::TypeInvalid => return None,
            ConfigDataType::TypeBool => DataType::Bool,
            ConfigDataType::TypeUint8 => DataType::Uint8,
            ConfigDataType::TypeUint16 => DataType::Uint16,
            ConfigDataType::TypeUint32 => DataType::Uint32,
            ConfigDataType::TypeUint64 => DataType::Uint64,
            ConfigDataType::TypeInt8 => DataType::Int8,
            ConfigDataType::TypeInt16 => DataType::Int16,
            ConfigDataType::TypeInt32 => DataType::Int32,
            ConfigDataType::TypeInt64 => DataType::Int64,
            ConfigDataType::TypeFp16 => DataType::Fp16,
            ConfigDataType::TypeBf16 => DataType::Bf16,
            ConfigDataType::TypeFp32 => DataType::Fp32,
            ConfigDataType::TypeFp64 => DataType::Fp64,
            ConfigDataType::TypeString => DataType::Bytes,
        })
    }

    /// The config enum for this type (`Bytes` is `TYPE_STRING`).
    pub fn to_config(self) -> ConfigDataType {
        match self {
            DataType::Bool => ConfigDataType::TypeBool,
            DataType::Uint8 => ConfigDataType::TypeUint8,
            DataType::Uint16 => ConfigDataType::TypeUint16,
            DataType::Uint32 => ConfigDataType::TypeUint32,
            DataType::Uint64 => ConfigDataType::TypeUint64,
            DataType::Int8 => ConfigDataType::TypeInt8,
            DataType::Int16 => ConfigDataType::TypeInt16,
            DataType::Int32 => ConfigDataType::TypeInt32,
            DataType::Int64 => ConfigDataType::TypeInt64,
            DataType::Fp16 => ConfigDataType::TypeFp16,
            DataType::Bf16 => ConfigDataType::TypeBf16,
            DataType::Fp32 => ConfigDataType::TypeFp32,
            DataType::Fp64 => ConfigDataType::TypeFp64,
            DataType::Bytes => ConfigDataType::TypeString,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip() {
        for dt in DataType::ALL {
            assert_eq!(DataType::from_wire_name(dt.wire_name()), Some(dt));
            assert_eq!(DataType::from_config(dt.to_config()), Some(dt));
        }
        assert_eq!(DataType::from_wire_name("int32"), None);
        assert_eq!(DataType::from_config(ConfigDataType::TypeInvalid), None);
    }
}
