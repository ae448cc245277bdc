//! What residency tracks of each loaded version (`nereid_residency`): the
//! memory it holds, whether it may be evicted, the requests running on it
//! and when it last ran one.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use nereid_residency::own_resident_bytes;
use parking_lot::Mutex;

/// What residency tracks of one loaded version.
#[derive(Debug)]
pub(crate) struct Footprint {
    /// Host bytes it holds, measured at its load and first request.
    pub(crate) bytes: AtomicU64,
    /// Bytes it holds on each GPU with a budget, measured at its load.
    pub(crate) gpus: Mutex<BTreeMap<u32, u64>>,
    /// Never evicted. A version is pinned until a load on demand says
    /// otherwise, so that nothing loaded another way is ever evicted.
    pub(crate) pinned: AtomicBool,
    /// Its first request's growth was measured.
    first_use: AtomicBool,
    /// Requests running on it now.
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
            active: AtomicU64::new(0),
            last_used_ms: AtomicU64::new(clock()),
        }
    }
}

/// A request running on a version, until dropped.
pub(crate) struct Active<'a> {
    footprint: &'a Footprint,
    /// The process's resident bytes before the version's first request.
    first: Option<u64>,
}

impl Footprint {
    /// Marks a request running; the first request's growth of the process
    /// (ONNX Runtime sizes its arena then) is added when it ends.
    pub(crate) fn enter(&self) -> Active<'_> {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.last_used_ms.store(clock(), Ordering::Relaxed);
        let first = if self.first_use.swap(true, Ordering::Relaxed) {
            None
        } else {
            own_resident_bytes()
        };
        Active {
            footprint: self,
            first,
        }
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.footprint.active.fetch_sub(1, Ordering::Relaxed);
        if let (Some(before), Some(after)) = (self.first, own_resident_bytes()) {
            self.footprint
                .bytes
                .fetch_add(after.saturating_sub(before), Ordering::Relaxed);
        }
    }
}

/// Milliseconds since the first call: the clock of `last_used_ms`.
pub(crate) fn clock() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}
