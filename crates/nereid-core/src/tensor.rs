//! Tensors as bytes: every element type is kept in its little-endian wire
//! layout, `BYTES` in Triton's framing (u32 length, then the element bytes).
//! Data is a `bytes::Bytes`, so a tensor can be a slice of a received body
//! or of a batch output without a copy.

use bytes::Bytes;

use crate::DataType;

/// Tensor dimensions; `-1` in a config means "any size".
pub type Shape = Vec<i64>;

/// A named tensor with its element type, shape and raw data.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Shape,
    pub data: Bytes,
}

/// Number of elements in `shape`, or `None` when a dimension is negative or
/// the product overflows.
pub fn element_count(shape: &[i64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| {
        let d = u64::try_from(d).ok()?;
        acc.checked_mul(d)
    })
}

/// Byte size of a fixed-size tensor of `shape`; `None` for `BYTES`, negative
/// dimensions, or a size that does not fit in memory.
pub fn fixed_byte_size(datatype: DataType, shape: &[i64]) -> Option<usize> {
    let elem = datatype.element_size()? as u64;
    let total = element_count(shape)?.checked_mul(elem)?;
    usize::try_from(total).ok()
}

/// Why a `BYTES` buffer is not a valid sequence of length-prefixed elements.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BytesFramingError {
    #[error("element {index} has a truncated 4-byte length prefix")]
    TruncatedLength { index: usize },
    #[error("element {index} declares {declared} bytes but only {available} remain")]
    TruncatedElement {
        index: usize,
        declared: u64,
        available: usize,
    },
}

/// Iterates over the elements of a `BYTES` buffer, yielding each element's
/// bytes or the first framing error.
pub fn bytes_elements(data: &[u8]) -> BytesElements<'_> {
    BytesElements {
        rest: data,
        index: 0,
        failed: false,
    }
}

/// Iterator returned by [`bytes_elements`].
#[derive(Debug)]
pub struct BytesElements<'a> {
    rest: &'a [u8],
    index: usize,
    failed: bool,
}

impl<'a> Iterator for BytesElements<'a> {
    type Item = Result<&'a [u8], BytesFramingError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        let index = self.index;
        self.index += 1;
        let Some((len, rest)) = self.rest.split_first_chunk::<4>() else {
            self.failed = true;
            return Some(Err(BytesFramingError::TruncatedLength { index }));
        };
        let declared = u32::from_le_bytes(*len) as u64;
        if declared > rest.len() as u64 {
            self.failed = true;
            return Some(Err(BytesFramingError::TruncatedElement {
                index,
                declared,
                available: rest.len(),
            }));
        }
        let (element, rest) = rest.split_at(declared as usize);
        self.rest = rest;
        Some(Ok(element))
    }
}

/// Counts the elements of a `BYTES` buffer, checking its framing.
pub fn count_bytes_elements(data: &[u8]) -> Result<usize, BytesFramingError> {
    bytes_elements(data).try_fold(0, |n, e| e.map(|_| n + 1))
}

/// Appends one element in `BYTES` framing.
pub fn push_bytes_element(out: &mut Vec<u8>, element: &[u8]) {
    let len = u32::try_from(element.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&element[..len as usize]);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn counts_and_sizes() {
        assert_eq!(element_count(&[2, 3, 4]), Some(24));
        assert_eq!(element_count(&[]), Some(1));
        assert_eq!(element_count(&[-1, 3]), None);
        assert_eq!(element_count(&[i64::MAX, i64::MAX]), None);
        assert_eq!(fixed_byte_size(DataType::Fp32, &[2, 8]), Some(64));
        assert_eq!(fixed_byte_size(DataType::Bytes, &[2]), None);
    }

    #[test]
    fn bytes_framing_errors_name_the_element() {
        let mut buf = Vec::new();
        push_bytes_element(&mut buf, b"ab");
        buf.extend_from_slice(&[9, 0]);
        assert_eq!(
            count_bytes_elements(&buf),
            Err(BytesFramingError::TruncatedLength { index: 1 })
        );
        let huge = [0xff, 0xff, 0xff, 0xff, 1];
        assert_eq!(
            count_bytes_elements(&huge),
            Err(BytesFramingError::TruncatedElement {
                index: 0,
                declared: u32::MAX as u64,
                available: 1
            })
        );
    }

    proptest! {
        #[test]
        fn bytes_round_trip(elements in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..20)) {
            let mut buf = Vec::new();
            for e in &elements {
                push_bytes_element(&mut buf, e);
            }
            let back: Vec<&[u8]> = bytes_elements(&buf).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(back.len(), elements.len());
            for (a, b) in back.iter().zip(&elements) {
                prop_assert_eq!(*a, b.as_slice());
            }
        }

        #[test]
        fn framing_never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = count_bytes_elements(&data);
        }
    }
}
