//! The numbers the worker's messages use for Triton's names: a data type
//! is its `TRITONSERVER_DataType` number, an error its TritonError code's
//! place in [`CODES`] (`python/README.md` lists both).

use nereid_core::{DataType, ErrorKind};

/// TritonError's codes in the order of their numbers on the wire.
const CODES: [&str; 8] = [
    "UNKNOWN",
    "INTERNAL",
    "NOT_FOUND",
    "INVALID_ARG",
    "UNAVAILABLE",
    "UNSUPPORTED",
    "ALREADY_EXISTS",
    "CANCELLED",
];

pub(crate) fn number_to_code(n: u8) -> &'static str {
    CODES.get(n as usize).copied().unwrap_or("INTERNAL")
}

/// An error kind's number on the wire.
pub(crate) fn number_of_kind(kind: ErrorKind) -> u8 {
    let name = code_name(kind);
    CODES.iter().position(|&c| c == name).unwrap_or(1) as u8
}

/// TRITONSERVER_DataType's number for a type.
pub(crate) fn type_number(datatype: DataType) -> u8 {
    use DataType as D;
    match datatype {
        D::Bool => 1,
        D::Uint8 => 2,
        D::Uint16 => 3,
        D::Uint32 => 4,
        D::Uint64 => 5,
        D::Int8 => 6,
        D::Int16 => 7,
        D::Int32 => 8,
        D::Int64 => 9,
        D::Fp16 => 10,
        D::Fp32 => 11,
        D::Fp64 => 12,
        D::Bytes => 13,
        D::Bf16 => 14,
    }
}

pub(crate) fn type_of_number(n: u8) -> Option<DataType> {
    DataType::ALL.into_iter().find(|&d| type_number(d) == n)
}

/// The error kind of a TritonError code name (INTERNAL for unknown ones).
pub(crate) fn kind_of(code: &str) -> ErrorKind {
    use ErrorKind as K;
    match code {
        "INVALID_ARG" => K::InvalidArgument,
        "NOT_FOUND" => K::NotFound,
        "UNAVAILABLE" => K::Unavailable,
        "UNSUPPORTED" => K::Unsupported,
        "ALREADY_EXISTS" => K::AlreadyExists,
        "CANCELLED" => K::Cancelled,
        _ => K::Internal,
    }
}

/// TritonError's code name for an error kind.
pub(crate) fn code_name(kind: ErrorKind) -> &'static str {
    use ErrorKind as K;
    match kind {
        K::InvalidArgument => "INVALID_ARG",
        K::NotFound => "NOT_FOUND",
        K::Unavailable => "UNAVAILABLE",
        K::Unsupported => "UNSUPPORTED",
        K::AlreadyExists => "ALREADY_EXISTS",
        K::Cancelled => "CANCELLED",
        K::Internal => "INTERNAL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_numbers_are_tritons() {
        assert_eq!(type_number(DataType::Fp32), 11);
        assert_eq!(type_number(DataType::Bf16), 14);
        for d in DataType::ALL {
            assert_eq!(type_of_number(type_number(d)), Some(d));
        }
        assert_eq!(kind_of(number_to_code(2)), ErrorKind::NotFound);
    }
}
