//! Where a tensor placed in a registered shared memory region is: the
//! `shared_memory_region`, `shared_memory_offset` and
//! `shared_memory_byte_size` parameters of an input or a requested output
//! (Triton's shared memory extensions), read the same way whichever
//! protocol carried them.

use crate::{Error, Parameter, Parameters};

/// The parameter naming the registered region a tensor is in.
pub const REGION: &str = "shared_memory_region";
/// Where in the region the tensor starts (default 0).
pub const OFFSET: &str = "shared_memory_offset";
/// How many bytes of the region the tensor may use.
pub const BYTE_SIZE: &str = "shared_memory_byte_size";

/// A tensor's place in a registered shared memory region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedMemoryRef {
    pub region: String,
    pub offset: u64,
    /// `None` when the request did not say; no region can then hold it.
    pub byte_size: Option<u64>,
}

impl SharedMemoryRef {
    /// Removes the shared memory parameters from `params`, so that backends
    /// never see them; `None` when no region is named. A region without a
    /// name leaves the offset and size parameters alone, as Triton ignores
    /// them then. The messages are Triton's.
    pub fn take(params: &mut Parameters) -> Result<Option<SharedMemoryRef>, Error> {
        let region = match params.remove(REGION) {
            None => return Ok(None),
            Some(Parameter::String(region)) => region,
            Some(_) => {
                return Err(unparsable(
                    REGION,
                    "attempt to access JSON non-string as string",
                ));
            }
        };
        let offset = take_unsigned(params, OFFSET)?.unwrap_or(0);
        let byte_size = take_unsigned(params, BYTE_SIZE)?;
        Ok(Some(SharedMemoryRef {
            region,
            offset,
            byte_size,
        }))
    }

    /// Whether `params` place their tensor in shared memory.
    pub fn is_in(params: &Parameters) -> bool {
        params.contains_key(REGION)
    }
}

fn take_unsigned(params: &mut Parameters, key: &str) -> Result<Option<u64>, Error> {
    match params.remove(key) {
        None => Ok(None),
        Some(Parameter::Uint64(v)) => Ok(Some(v)),
        Some(Parameter::Int64(v)) => u64::try_from(v).map(Some).map_err(|_| not_unsigned(key)),
        Some(_) => Err(not_unsigned(key)),
    }
}

fn not_unsigned(key: &str) -> Error {
    unparsable(
        key,
        "attempt to access JSON non-unsigned-integer as unsigned-integer",
    )
}

/// Triton's words; Triton answers 500 (internal), but the mistake is the
/// client's.
fn unparsable(key: &str, detail: &str) -> Error {
    Error::invalid_argument(format!("Unable to parse '{key}': {detail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(entries: &[(&str, Parameter)]) -> Parameters {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn takes_region_offset_and_size() {
        let mut p = params(&[
            (REGION, Parameter::String("r".into())),
            (OFFSET, Parameter::Int64(8)),
            (BYTE_SIZE, Parameter::Uint64(64)),
            ("other", Parameter::Bool(true)),
        ]);
        let r = SharedMemoryRef::take(&mut p).unwrap().unwrap();
        assert_eq!(r.region, "r");
        assert_eq!(r.offset, 8);
        assert_eq!(r.byte_size, Some(64));
        assert_eq!(p.len(), 1);
    }

    #[test]
    fn no_region_means_no_ref() {
        let mut p = params(&[(OFFSET, Parameter::Int64(8))]);
        assert_eq!(SharedMemoryRef::take(&mut p).unwrap(), None);
        assert_eq!(p.len(), 1);
    }

    #[test]
    fn mistyped_parameters_are_refused_with_tritons_words() {
        let mut p = params(&[(REGION, Parameter::Int64(5))]);
        let e = SharedMemoryRef::take(&mut p).unwrap_err();
        assert_eq!(
            e.message(),
            "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string"
        );
        let mut p = params(&[
            (REGION, Parameter::String("r".into())),
            (BYTE_SIZE, Parameter::Int64(-1)),
        ]);
        let e = SharedMemoryRef::take(&mut p).unwrap_err();
        assert_eq!(
            e.message(),
            "Unable to parse 'shared_memory_byte_size': attempt to access JSON non-unsigned-integer as unsigned-integer"
        );
    }
}
