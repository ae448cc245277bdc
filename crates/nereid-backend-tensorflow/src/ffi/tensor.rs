//! [`OwnedTensor`]: a `TF_Tensor` this side made or was handed, with its
//! bytes or `tf.string` elements.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use super::{Api, TF_STRING, TfTString, TfTensor, len};

/// A `TF_Tensor` this side owns (deleted on drop).
pub(crate) struct OwnedTensor {
    pub(super) api: Arc<Api>,
    pub(super) raw: *mut TfTensor,
    /// Its `TF_TString`s were made here and are freed here: TF_DeleteTensor
    /// frees a tensor from TF_AllocateTensor without freeing its strings.
    pub(super) own_strings: bool,
}

impl std::fmt::Debug for OwnedTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedTensor")
            .field("dtype", &self.dtype())
            .field("dims", &self.dims())
            .finish()
    }
}

impl OwnedTensor {
    fn allocate(api: &Arc<Api>, dtype: c_int, dims: &[i64], bytes: usize) -> Result<Self, String> {
        // SAFETY: `dims` has the length passed; TF_AllocateTensor returns
        // an owned tensor of `bytes` uninitialised bytes (or null).
        let raw = unsafe {
            (api.functions.allocate_tensor)(dtype, dims.as_ptr(), len(dims.len())?, bytes)
        };
        if raw.is_null() {
            return Err(format!(
                "TensorFlow could not allocate a tensor of {bytes} bytes"
            ));
        }
        Ok(OwnedTensor {
            api: Arc::clone(api),
            raw,
            own_strings: false,
        })
    }

    /// A tensor of fixed-size elements holding a copy of `data`.
    pub(crate) fn fixed(
        api: &Arc<Api>,
        dtype: c_int,
        dims: &[i64],
        data: &[u8],
    ) -> Result<Self, String> {
        let tensor = Self::allocate(api, dtype, dims, data.len())?;
        if tensor.byte_size() != data.len() {
            return Err(format!(
                "a tensor of shape {dims:?} cannot hold {} bytes",
                data.len()
            ));
        }
        if !data.is_empty() {
            // SAFETY: the tensor's buffer holds exactly `data.len()` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), tensor.data_ptr().cast(), data.len());
            }
        }
        Ok(tensor)
    }

    /// A `tf.string` tensor of `elements`.
    pub(crate) fn strings(
        api: &Arc<Api>,
        dims: &[i64],
        elements: &[&[u8]],
    ) -> Result<Self, String> {
        let size = std::mem::size_of::<TfTString>();
        let mut tensor = Self::allocate(api, TF_STRING, dims, elements.len() * size)?;
        if tensor.byte_size() != elements.len() * size {
            return Err(format!(
                "a tensor of shape {dims:?} cannot hold {} strings",
                elements.len()
            ));
        }
        let base: *mut TfTString = tensor.data_ptr().cast();
        for (i, element) in elements.iter().enumerate() {
            // SAFETY: element `i` lies inside the buffer, which
            // TF_AllocateTensor aligns for any type; it is initialised
            // before it is written.
            unsafe {
                let slot = base.add(i);
                (api.functions.string_init)(slot);
                (api.functions.string_copy)(slot, element.as_ptr().cast(), element.len());
            }
        }
        tensor.own_strings = true;
        Ok(tensor)
    }

    pub(crate) fn dtype(&self) -> c_int {
        // SAFETY: the tensor is live.
        unsafe { (self.api.functions.tensor_type)(self.raw) }
    }

    pub(crate) fn dims(&self) -> Vec<i64> {
        let f = &self.api.functions;
        // SAFETY: the tensor is live and `i` is below its rank.
        unsafe {
            (0..(f.num_dims)(self.raw))
                .map(|i| (f.dim)(self.raw, i))
                .collect()
        }
    }

    fn byte_size(&self) -> usize {
        // SAFETY: the tensor is live.
        unsafe { (self.api.functions.tensor_byte_size)(self.raw) }
    }

    fn data_ptr(&self) -> *mut c_void {
        // SAFETY: the tensor is live.
        unsafe { (self.api.functions.tensor_data)(self.raw) }
    }

    /// The bytes of a tensor of fixed-size elements.
    pub(crate) fn data(&self) -> &[u8] {
        let size = self.byte_size();
        if size == 0 {
            return &[];
        }
        // SAFETY: the buffer holds `size` initialised bytes while the
        // tensor lives, which the returned slice cannot outlive.
        unsafe { std::slice::from_raw_parts(self.data_ptr().cast(), size) }
    }

    /// The elements of a `tf.string` tensor.
    pub(crate) fn string_elements(&self) -> Vec<&[u8]> {
        let count = self.byte_size() / std::mem::size_of::<TfTString>();
        let base: *const TfTString = self.data_ptr().cast();
        let f = &self.api.functions;
        (0..count)
            .map(|i| {
                // SAFETY: element `i` is an initialised TF_TString inside the
                // buffer; its bytes live as long as the tensor.
                unsafe {
                    let s = base.add(i);
                    let (data, size) = ((f.string_data)(s), (f.string_size)(s));
                    if size == 0 {
                        &[][..]
                    } else {
                        std::slice::from_raw_parts(data.cast::<u8>(), size)
                    }
                }
            })
            .collect()
    }
}

impl Drop for OwnedTensor {
    fn drop(&mut self) {
        let f = &self.api.functions;
        // SAFETY: the strings were initialised here (own_strings) and are
        // freed once; the tensor is deleted once.
        unsafe {
            if self.own_strings {
                let count = self.byte_size() / std::mem::size_of::<TfTString>();
                let base: *mut TfTString = self.data_ptr().cast();
                for i in 0..count {
                    (f.string_dealloc)(base.add(i));
                }
            }
            (f.delete_tensor)(self.raw);
        }
    }
}
