//! The engine handle: [`Engine`], cheap to clone, and what its clones
//! share ([`Inner`]). The engine's work is in the rooms that extend it:
//! `infer.rs` (the one entry every frontend calls), `control.rs` (loads,
//! unloads, model control), `status.rs` (readiness, metadata, statistics),
//! `lifecycle.rs`, `routing.rs`, `ensemble.rs`, `mirrors.rs`. This file
//! names none of them, so that none of them is part of a cycle with it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crossbeam_channel::Sender;
use nereid_cache::ResponseCache;
use nereid_core::Backend;
use nereid_core::custom_metrics::CustomMetrics;
use nereid_repository::Repository;
use parking_lot::{Mutex, RwLock};

use crate::memory::Janitor;
use crate::model::LoadedVersion;
use crate::options::{EngineOptions, ModelControl};
use crate::registry::Registry;
use crate::shared_memory::SharedMemoryRegistry;
use crate::traffic::Traffic;

/// A condition of readiness that a part of the server outside the engine
/// owns; see [`Engine::add_readiness_check`].
pub type ReadinessCheck = Arc<dyn Fn() -> bool + Send + Sync>;

/// The model manager. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) options: EngineOptions,
    pub(crate) control: ModelControl,
    pub(crate) repository: Repository,
    pub(crate) backends: Vec<Arc<dyn Backend>>,
    pub(crate) registry: RwLock<Registry>,
    /// One lock per model name: loads and unloads of a model never overlap.
    pub(crate) locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Poll mode's repository watcher, once started.
    pub(crate) watcher: Mutex<Option<Watcher>>,
    pub(crate) janitor: Janitor,
    /// The response cache, when the server has one.
    pub(crate) cache: Option<ResponseCache>,
    /// Regions registered through the shared memory extension, by any frontend.
    pub(crate) shared_memory: SharedMemoryRegistry,
    /// Which models ensembles loaded or unloaded on their own account.
    pub(crate) links: Mutex<Links>,
    pub(crate) started: AtomicBool,
    /// Loads on demand, the memory budget, eviction.
    pub(crate) residency: nereid_residency::Residency,
    /// The server has been ready once (what `Readiness::Startup` asks).
    pub(crate) ready_once: AtomicBool,
    pub(crate) stopping: AtomicBool,
    /// Requests accepted by [`Engine::infer`] and not yet answered, and
    /// streams not yet ended.
    pub(crate) in_flight: Arc<AtomicUsize>,
    /// The families and metrics models create (Triton's custom metrics).
    pub(crate) custom_metrics: Arc<CustomMetrics>,
    /// Version labels, splits, shadows and fallbacks of the models.
    pub(crate) traffic: Traffic<LoadedVersion>,
    /// Conditions other parts of the server add to readiness (a Kafka
    /// consumer that has not joined its group yet).
    pub(crate) readiness: RwLock<Vec<ReadinessCheck>>,
    /// The runtime the engine was made on, when there was one: repository
    /// loads and unloads run on its blocking pool, whichever runtime the
    /// request came in on (a connection thread's may stop first).
    pub(crate) runtime: Option<tokio::runtime::Handle>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

/// Poll mode's repository watcher, while it runs: dropping it stops the
/// poll thread.
#[derive(Debug)]
pub(crate) struct Watcher {
    pub(crate) _stop: Sender<()>,
}

/// Models loaded or unloaded because of ensembles rather than by request.
#[derive(Debug, Default)]
pub(crate) struct Links {
    /// Ensembles unloaded because a model they use was: they load again
    /// when it does.
    pub(crate) forced: BTreeSet<String>,
    /// Models loaded only because an ensemble needed them: unloading that
    /// ensemble with `unload_dependents` unloads them too.
    pub(crate) pulled_in: BTreeSet<String>,
}

impl Links {
    /// `model` was loaded or unloaded by request: it is nobody's now.
    pub(crate) fn loaded_explicitly(&mut self, model: &str) {
        self.forced.remove(model);
        self.pulled_in.remove(model);
    }
}

/// Counts a request or stream in flight while it lives.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    pub(crate) fn enter(counter: &Arc<AtomicUsize>) -> InFlight {
        counter.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(counter))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
