//! Page-locked host buffers for copies from GPUs, up to tritonserver's
//! `--pinned-memory-pool-byte-size`. A copy into pinned memory is one DMA;
//! into ordinary memory the driver stages it through a pinned buffer of
//! its own. Buffers are kept for reuse by power-of-two size; once the pool
//! is spent, copies use ordinary memory, as tritonserver's do.
#![expect(
    unsafe_code,
    reason = "pinned memory comes from cuMemHostAlloc as a raw pointer; this module owns it"
)]

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use cudarc::driver::result;
use parking_lot::Mutex;

/// `CU_MEMHOSTALLOC_PORTABLE`: pinned for every context, not only the
/// current one.
const PORTABLE: u32 = 1;

#[derive(Debug)]
pub(crate) struct PinnedPool {
    limit: u64,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    /// Bytes allocated, in use or free.
    allocated: u64,
    /// Free buffers by size class.
    free: HashMap<usize, Vec<HostPointer>>,
}

/// A pinned allocation's address.
#[derive(Debug, Clone, Copy)]
struct HostPointer(*mut u8);

// SAFETY: the pointer is owned by exactly one buffer or the free list.
unsafe impl Send for HostPointer {}

impl PinnedPool {
    pub(crate) fn new(limit: u64) -> PinnedPool {
        PinnedPool {
            limit,
            state: Mutex::new(PoolState::default()),
        }
    }

    /// A buffer of `len` bytes, pinned when the pool has room. Needs a
    /// current CUDA context.
    pub(crate) fn buffer(self: &Arc<Self>, len: usize) -> HostBuffer {
        match self.take(len) {
            Some(pointer) => HostBuffer::Pinned(PinnedBuffer {
                pointer,
                len,
                pool: Arc::clone(self),
            }),
            None => HostBuffer::Plain(vec![0; len]),
        }
    }

    fn take(&self, len: usize) -> Option<HostPointer> {
        let class = len.max(1).checked_next_power_of_two()?;
        let mut state = self.state.lock();
        if let Some(pointer) = state.free.get_mut(&class).and_then(Vec::pop) {
            return Some(pointer);
        }
        if state.allocated + class as u64 > self.limit {
            return None;
        }
        // SAFETY: a plain allocation; the memory is written before it is read.
        let pointer = unsafe { result::malloc_host(class, PORTABLE) }.ok()?;
        state.allocated += class as u64;
        Some(HostPointer(pointer.cast()))
    }

    fn give_back(&self, pointer: HostPointer, len: usize) {
        let class = len.max(1).next_power_of_two();
        self.state
            .lock()
            .free
            .entry(class)
            .or_default()
            .push(pointer);
    }
}

impl Drop for PinnedPool {
    fn drop(&mut self) {
        for pointer in self.state.get_mut().free.drain().flat_map(|(_, v)| v) {
            // SAFETY: allocated by malloc_host; no buffer holds it.
            let _ = unsafe { result::free_host(pointer.0.cast()) };
        }
    }
}

/// Host memory a copy lands in.
pub(crate) enum HostBuffer {
    Pinned(PinnedBuffer),
    Plain(Vec<u8>),
}

impl HostBuffer {
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            HostBuffer::Pinned(b) => b.pointer.0,
            HostBuffer::Plain(v) => v.as_mut_ptr(),
        }
    }

    /// The buffer as `Bytes`; a pinned one goes back to the pool when the
    /// last reference is dropped.
    pub(crate) fn into_bytes(self) -> Bytes {
        match self {
            HostBuffer::Pinned(b) => Bytes::from_owner(b),
            HostBuffer::Plain(v) => Bytes::from(v),
        }
    }
}

pub(crate) struct PinnedBuffer {
    pointer: HostPointer,
    len: usize,
    pool: Arc<PinnedPool>,
}

impl AsRef<[u8]> for PinnedBuffer {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the allocation has at least `len` bytes, written by the
        // copy before the buffer became `Bytes`.
        unsafe { std::slice::from_raw_parts(self.pointer.0, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        self.pool.give_back(self.pointer, self.len);
    }
}

// SAFETY: the buffer owns its allocation; `as_ref` only reads it.
unsafe impl Send for PinnedBuffer {}
// SAFETY: as above.
unsafe impl Sync for PinnedBuffer {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_pool_gives_ordinary_memory() {
        // A zero limit never calls the driver, which this machine lacks.
        let pool = Arc::new(PinnedPool::new(0));
        let mut buffer = pool.buffer(8);
        assert!(matches!(buffer, HostBuffer::Plain(_)));
        assert!(!buffer.as_mut_ptr().is_null());
        assert_eq!(buffer.into_bytes().len(), 8);
    }
}
