//! ONNX Runtime string tensors with explicit element lengths, so `BYTES`
//! elements holding NUL, 0xFF or any other bytes go through byte-exact.
//!
//! `ort`'s safe string API cannot do this: it writes through
//! `FillStringTensor` (NUL-terminated C strings; `CString::new` rejects an
//! interior NUL) and reads into Rust `String`s (rejects non-UTF-8). ONNX
//! Runtime itself stores each element as a `std::string` of any bytes, and
//! its C API has length-aware calls for both directions:
//! `GetResizedStringTensorElementBuffer` (since 1.13) to write and
//! `GetStringTensorElementLength` / `GetStringTensorElement` to read.
#![expect(
    unsafe_code,
    reason = "length-aware string tensor calls exist only in ort::sys"
)]

use std::ffi::c_char;
use std::ptr;

use nereid_core::tensor::bytes_elements;
use ort::AsPointer;
use ort::value::{DynTensor, DynValue};

/// Writes Triton-framed `BYTES` `data` into `tensor`, a freshly created
/// string tensor with exactly as many elements as `data` holds.
pub(crate) fn fill(tensor: &mut DynTensor, data: &[u8]) -> Result<(), ort::Error> {
    let count = tensor.shape().num_elements();
    for (index, element) in bytes_elements(data).enumerate() {
        let element = element.map_err(ort::Error::wrap)?;
        if index >= count {
            return Err(ort::Error::new(format!(
                "more than {count} BYTES elements for the tensor's shape"
            )));
        }
        // A new string tensor's elements are already empty strings.
        if element.is_empty() {
            continue;
        }
        let mut buffer: *mut c_char = ptr::null_mut();
        // SAFETY: `tensor` is a live string tensor (created by the caller)
        // and `index` is below its element count; ONNX Runtime resizes that
        // element's std::string to `element.len()` bytes and stores a
        // pointer to them in `buffer`, or returns an error status.
        let status = unsafe {
            (ort::api().GetResizedStringTensorElementBuffer)(
                tensor.ptr_mut(),
                index,
                element.len(),
                &mut buffer,
            )
        };
        // SAFETY: `status` is what the ONNX Runtime call above returned.
        unsafe { ort::Error::result_from_status(status) }?;
        if buffer.is_null() {
            return Err(ort::Error::new(format!(
                "no buffer for string element {index}"
            )));
        }
        // SAFETY: `buffer` points at `element.len()` writable bytes owned by
        // `tensor`'s element, which cannot overlap `element` (borrowed from
        // the request) and stay valid until the tensor is modified again.
        unsafe { ptr::copy_nonoverlapping(element.as_ptr(), buffer.cast::<u8>(), element.len()) };
    }
    Ok(())
}

/// Reads the `count` elements of string tensor `value` into Triton's
/// `BYTES` framing (u32 little-endian length, then the bytes).
pub(crate) fn read(value: &DynValue, count: usize) -> Result<Vec<u8>, ort::Error> {
    let mut total = 0usize;
    // SAFETY: `value` is a live value; ONNX Runtime checks that it is a
    // string tensor and writes the sum of its element lengths to `total`.
    let status = unsafe { (ort::api().GetStringTensorDataLength)(value.ptr(), &mut total) };
    // SAFETY: `status` is what the ONNX Runtime call above returned.
    unsafe { ort::Error::result_from_status(status) }?;
    let mut out = Vec::with_capacity(total.saturating_add(count.saturating_mul(4)));
    for index in 0..count {
        let mut len = 0usize;
        // SAFETY: as above; ONNX Runtime checks `index` against the
        // tensor's element count and writes the element's length to `len`.
        let status =
            unsafe { (ort::api().GetStringTensorElementLength)(value.ptr(), index, &mut len) };
        // SAFETY: `status` is what the ONNX Runtime call above returned.
        unsafe { ort::Error::result_from_status(status) }?;
        let framed_len = u32::try_from(len).map_err(|_| {
            ort::Error::new(format!(
                "string element {index} is {len} bytes, over BYTES' 4 GiB limit"
            ))
        })?;
        out.extend_from_slice(&framed_len.to_le_bytes());
        if len == 0 {
            continue;
        }
        let start = out.len();
        out.resize(start + len, 0);
        // SAFETY: `out[start..]` is `len` writable bytes; ONNX Runtime
        // copies exactly the element's `len` bytes there (it fails when the
        // given size is smaller than the element).
        let status = unsafe {
            (ort::api().GetStringTensorElement)(
                value.ptr(),
                len,
                index,
                out[start..].as_mut_ptr().cast(),
            )
        };
        // SAFETY: `status` is what the ONNX Runtime call above returned.
        unsafe { ort::Error::result_from_status(status) }?;
    }
    Ok(out)
}
