//! What residency tracks of each loaded version (`nereid_residency`): the
//! memory it holds, whether it may be evicted, the requests running on it
//! and when it last ran one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use nereid_residency::own_resident_bytes;
use parking_lot::Mutex;

/// What residency tracks of one loaded version.
#[derive(Debug)]
pub(crate) struct Footprint {
    /// Host bytes it holds, measured at its load and first batch.
    pub(crate) bytes: AtomicU64,
    /// Bytes it holds on each GPU with a budget, measured at its load.
    pub(crate) gpus: Mutex<BTreeMap<u32, u64>>,
    /// Never evicted. A version is pinned until a load on demand says
    /// otherwise, so that nothing loaded another way is ever evicted.
    pub(crate) pinned: AtomicBool,
    /// Its first batch's growth was measured.
    first_use: AtomicBool,
    /// Its instances alive: their memory is returned once none is.
    instances: AtomicU64,
    /// Requests running on it or on their way to it now.
    pub(crate) active: AtomicU64,
    /// When it last took a request or loaded, in ms of [`clock`].
    pub(crate) last_used_ms: AtomicU64,
}

impl Default for Footprint {
    fn default() -> Footprint {
        Footprint {
            bytes: AtomicU64::new(0),
            gpus: Mutex::default(),
            pinned: AtomicBool::new(true),
            first_use: AtomicBool::new(false),
            instances: AtomicU64::new(0),
            active: AtomicU64::new(0),
            last_used_ms: AtomicU64::new(clock()),
        }
    }
}

/// A request running on a version, until dropped.
pub(crate) struct Active<'a> {
    footprint: &'a Footprint,
}

impl Footprint {
    /// Marks a request running on the version.
    pub(crate) fn enter(&self) -> Active<'_> {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.last_used_ms.store(clock(), Ordering::Relaxed);
        Active { footprint: self }
    }

    /// Marks the version in use by whoever holds the answer (a request on
    /// its way to it), so that it is not evicted meanwhile.
    pub(crate) fn hold(self: &Arc<Self>) -> Held {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.last_used_ms.store(clock(), Ordering::Relaxed);
        Held(Arc::clone(self))
    }

    /// The process's resident bytes now, when the version has not run a
    /// batch yet: its first batch is measured ([`Footprint::grew_from`]),
    /// as ONNX Runtime sizes its arena then. Measured around the batch, not
    /// the request, so that little else runs meanwhile.
    pub(crate) fn first_batch(&self) -> Option<u64> {
        if self.first_use.swap(true, Ordering::Relaxed) {
            None
        } else {
            own_resident_bytes()
        }
    }

    pub(crate) fn grew_from(&self, before: u64) {
        if let Some(after) = own_resident_bytes() {
            self.bytes
                .fetch_add(after.saturating_sub(before), Ordering::Relaxed);
        }
    }

    pub(crate) fn instance_started(&self) {
        self.instances.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn instance_stopped(&self) {
        self.instances.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether every instance of the version has been dropped, and with
    /// them the memory they held (under a budget, the allocator unmaps
    /// weights at once: see `memory::map_large_blocks`).
    pub(crate) fn returned(&self) -> bool {
        self.instances.load(Ordering::SeqCst) == 0
    }

    /// Whether a request runs on the version or is on its way to it.
    pub(crate) fn in_use(&self) -> bool {
        self.active.load(Ordering::Relaxed) > 0
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.footprint.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A version kept from eviction while held (see [`Footprint::hold`]).
#[derive(Debug)]
pub struct Held(Arc<Footprint>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Milliseconds since the first call: the clock of `last_used_ms`.
pub(crate) fn clock() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}
