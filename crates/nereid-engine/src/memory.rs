//! Giving an unloaded model's memory back to the operating system.
//!
//! Instances are created and freed on threads that come and go with each
//! load, so glibc spreads their allocations over its per-thread arenas
//! and keeps what they free there for reuse. Nothing leaks, but a server
//! that reloads models shows an RSS that climbs until every arena holds a
//! model's worth of free pages (the "memory growth across load/unload
//! cycles" Triton users report). Once the instances of retired versions
//! are gone, `malloc_trim` returns those pages.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::model::LoadedVersion;

/// How often to check whether retired versions are gone.
const CHECK_EVERY: Duration = Duration::from_millis(50);
/// Their instance threads drop the instances just after the queue closes.
const GRACE: Duration = Duration::from_millis(200);

/// Watches retired versions and trims the allocator once they are freed.
#[derive(Debug)]
pub struct Janitor {
    retired: Sender<Weak<LoadedVersion>>,
}

impl Janitor {
    pub fn start() -> Janitor {
        let (retired, queue) = crossbeam_channel::unbounded();
        let spawned = std::thread::Builder::new()
            .name("memory-janitor".into())
            .spawn(move || run(&queue));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the memory janitor; freed model memory stays with the allocator");
        }
        Janitor { retired }
    }

    /// Drops `versions` (requests in flight keep theirs until done) and
    /// trims once they are all freed.
    pub fn retire(&self, versions: Vec<Arc<LoadedVersion>>) {
        for version in versions {
            // A closed channel only means no trimming: the memory is freed anyway.
            let _ = self.retired.send(Arc::downgrade(&version));
        }
    }
}

fn run(queue: &Receiver<Weak<LoadedVersion>>) {
    let mut waiting: Vec<Weak<LoadedVersion>> = Vec::new();
    while let Ok(first) = queue.recv() {
        waiting.push(first);
        while !waiting.is_empty() {
            waiting.extend(queue.try_iter());
            waiting.retain(|w| w.strong_count() > 0);
            std::thread::sleep(CHECK_EVERY);
        }
        std::thread::sleep(GRACE);
        if queue.is_empty() {
            trim();
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "glibc's malloc_trim takes no pointers and is thread-safe"
)]
fn trim() {
    unsafe extern "C" {
        /// glibc: returns free memory of every arena to the system.
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    let released = unsafe { malloc_trim(0) };
    tracing::debug!(
        released = released != 0,
        "returned freed model memory to the system"
    );
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

/// Blocks of this size or more are mapped on their own and unmapped when
/// freed (see [`map_large_blocks`]).
const MMAP_THRESHOLD: std::ffi::c_int = 1 << 20;

/// For a server that loads and evicts models all day: glibc maps blocks
/// over its mmap threshold on their own and unmaps them when freed, but it
/// raises the threshold to the size of each such block freed (up to 32
/// MiB), after which a model's weights land in the heap arenas and come
/// back only as far as fragmentation lets them. Fixing the threshold at 1
/// MiB keeps every weight buffer a mapping of its own: over 200 load and
/// evict cycles of a 100 MB model, the resident memory grew 17 MB without
/// it and under 1 MB with it (test_many_models). Left alone when the
/// operator set `MALLOC_MMAP_THRESHOLD_`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "glibc's mallopt takes two integers and is thread-safe"
)]
pub(crate) fn map_large_blocks() {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        return;
    }
    unsafe extern "C" {
        fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
    }
    /// glibc's `M_MMAP_THRESHOLD`.
    const M_MMAP_THRESHOLD: std::ffi::c_int = -3;
    let set = unsafe { mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) };
    tracing::debug!(
        set = set == 1,
        bytes = MMAP_THRESHOLD,
        "blocks of this size or more are mapped on their own"
    );
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn map_large_blocks() {}
