//! The engine's side of residency (`nereid_residency`): loads on a model's
//! first request (on-demand model control), room made under the memory
//! budget before a load, each new version's footprint settled after it
//! (see `footprint.rs`), and eviction, which is an unload.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::FutureExt;
use nereid_core::Error;
use nereid_core::model_config::parse_bool_parameter;
use nereid_residency::{LoadCause, Models, Need, Place, Released, own_resident_bytes};

use crate::footprint::{Footprint, Held, clock};
use crate::handle::Engine;
use crate::model::LoadedVersion;
use crate::options::ControlMode;

/// The model config parameter that pins a model (`"true"`) or leaves it
/// evictable (`"false"`) whatever loaded it.
pub const PINNED_PARAMETER: &str = "nereid.pinned";

/// The engine's loaded versions, as residency sees them.
pub(crate) struct Resident<'a>(pub(crate) &'a Engine);

impl Models for Resident<'_> {
    fn resident(&self) -> Vec<nereid_residency::Resident> {
        let now = clock();
        let registry = self.0.inner.registry.read();
        let mut resident = Vec::new();
        for (name, version) in registry.loaded() {
            let footprint = &version.footprint;
            let idle = now.saturating_sub(footprint.last_used_ms.load(Ordering::Relaxed));
            let host = nereid_residency::Resident {
                model: name.to_string(),
                version: version.version,
                bytes: footprint.bytes(),
                place: Place::Host,
                last_used: Instant::now() - Duration::from_millis(idle),
                in_flight: footprint.active.load(Ordering::Relaxed) + version.stats.pending(),
                pinned: footprint.pinned.load(Ordering::Relaxed),
            };
            for (&gpu, &bytes) in footprint.gpus.lock().iter() {
                resident.push(nereid_residency::Resident {
                    bytes,
                    place: Place::Gpu(gpu),
                    ..host.clone()
                });
            }
            resident.push(host);
        }
        resident
    }

    fn evict(&self, model: &str) -> Option<Released> {
        let dropped = self.0.unload_if_idle(model)?;
        // As an unload through the API: the ensembles that use it go too.
        self.0.unload_cascade(model, false);
        Some(Box::new(move || dropped.iter().all(|f| f.returned())))
    }
}

impl Engine {
    /// In on-demand model control (`--model-control-mode=on_demand`),
    /// loads `model` when it is in the repository and not loaded, and
    /// waits for it (or joins the load in progress), up to `timeout`; the
    /// answer keeps the model from eviction while it lives, so a request
    /// on its way to the model finds it. [`Engine::infer`] does it for every
    /// request; a frontend that looks a model's config or metadata up first
    /// calls it before and keeps the answer until the request is made.
    /// Anything else (a model the repository does not have, another
    /// control mode) is left to the usual answers.
    pub async fn load_on_request(
        &self,
        model: &str,
        timeout: Option<Duration>,
    ) -> Result<KeptLoaded, Error> {
        if self.control_mode() != ControlMode::OnDemand {
            return Ok(KeptLoaded::default());
        }
        let deadline = timeout.map(|timeout| tokio::time::Instant::now() + timeout);
        // A model may be evicted between its load and the hold: load again.
        for _ in 0..3 {
            if let Some(kept) = self.keep_loaded(model) {
                return Ok(kept);
            }
            if self.inner.repository.entry(model).is_none() {
                return Ok(KeptLoaded::default());
            }
            let engine = self.clone();
            let name = model.to_string();
            let load = move || {
                let loading = engine.clone();
                let handle = engine.blocking(move || loading.load_on_demand(&name));
                async move {
                    handle.await.unwrap_or_else(|e| {
                        Err(Error::internal(format!("the load task failed: {e}")))
                    })
                }
                .boxed()
            };
            self.inner.residency.wait_for(model, deadline, load).await?;
        }
        Ok(self.keep_loaded(model).unwrap_or_default())
    }

    /// Holds every serving version of `model` from eviction; `None` when
    /// none serves.
    fn keep_loaded(&self, model: &str) -> Option<KeptLoaded> {
        let registry = self.inner.registry.read();
        let held: Vec<Held> = registry
            .get(model)?
            .versions
            .values()
            .filter_map(|v| v.serving())
            .map(|v| v.footprint.hold())
            .collect();
        (!held.is_empty()).then_some(KeptLoaded { _held: held })
    }

    /// Unloads `name` unless a request runs on it or is on its way to it,
    /// checked and done under the registry's lock, where holds are taken.
    fn unload_if_idle(&self, name: &str) -> Option<Vec<Arc<Footprint>>> {
        let lock = self.model_lock(name);
        let _serialized = lock.lock();
        let mut registry = self.inner.registry.write();
        let busy = registry.get(name).is_some_and(|m| {
            m.versions
                .values()
                .filter_map(|v| v.loaded.as_ref())
                .any(|v| v.footprint.in_use())
        });
        if busy {
            return None;
        }
        let dropped = registry.unload(name);
        drop(registry);
        self.inner.traffic.remove(name);
        let footprints = dropped.iter().map(|v| Arc::clone(&v.footprint)).collect();
        self.inner.janitor.retire(dropped);
        Some(footprints)
    }

    fn load_on_demand(&self, name: &str) -> Result<(), Error> {
        self.measured_load(name, LoadCause::Demand, || {
            let found = self.find_model(name)?;
            let source = crate::source::for_request(name, Default::default(), found)?;
            self.load_composing(&source, &mut vec![name.to_string()]);
            self.sync_model(source, false)
        })
    }

    /// Runs `load` of `name` for `cause`: first makes room for it under
    /// the memory budget (evicting), then measures what it took and
    /// whether it is pinned, and keeps the budget after.
    pub(crate) fn measured_load(
        &self,
        name: &str,
        cause: LoadCause,
        load: impl FnOnce() -> Result<(), Error>,
    ) -> Result<(), Error> {
        let residency = &self.inner.residency;
        let _turn = residency.measuring();
        let files = self
            .inner
            .repository
            .entry(name)
            .map_or(0, |entry| folder_bytes(&entry.path));
        // A GPU's share is known from the model's last load there; a first
        // load is not sized, and the budget is kept after it.
        let gpus = residency.budgeted_gpus();
        let mut need = vec![(
            Place::Host,
            Need {
                expected: residency.estimate(name, Place::Host).unwrap_or(files),
                at_least: files,
            },
        )];
        need.extend(gpus.iter().map(|&id| {
            let place = Place::Gpu(id);
            // Measured on the GPU alone, loads one at a time: trusted.
            let bytes = residency.estimate(name, place).unwrap_or(0);
            (place, Need::exactly(bytes))
        }));
        residency.make_room(&Resident(self), name, &need)?;
        let meter = residency.meter();
        let gpu_before: Vec<Option<u64>> =
            gpus.iter().map(|&id| meter.used(Place::Gpu(id))).collect();
        let before = own_resident_bytes();
        let started = Instant::now();
        load()?;
        let grown = before
            .zip(own_resident_bytes())
            .map_or(0, |(b, a)| a.saturating_sub(b));
        let bytes = grown.max(files);
        let on_gpus: BTreeMap<u32, u64> = gpus
            .iter()
            .zip(gpu_before)
            .filter_map(|(&id, before)| {
                let after = meter.used(Place::Gpu(id))?;
                Some((id, after.saturating_sub(before?)))
            })
            .filter(|&(_, bytes)| bytes > 0)
            .collect();
        self.settle_footprint(name, bytes, &on_gpus, residency.pins(cause));
        residency.remember(name, Place::Host, bytes);
        for (&id, &bytes) in &on_gpus {
            residency.remember(name, Place::Gpu(id), bytes);
        }
        residency.loaded(cause, started.elapsed());
        residency.enforce(&Resident(self), Some(name));
        Ok(())
    }

    /// Sets the footprint and pin of `name`'s loaded versions after a
    /// load: `bytes` shared among the versions that have none yet; pinned
    /// as `pinned` unless the config's `nereid.pinned` says otherwise.
    pub(crate) fn settle_footprint(
        &self,
        name: &str,
        bytes: u64,
        on_gpus: &BTreeMap<u32, u64>,
        pinned: bool,
    ) {
        let registry = self.inner.registry.read();
        let Some(model) = registry.get(name) else {
            return;
        };
        // The versions this load made have no measure yet.
        let versions: Vec<(&Arc<LoadedVersion>, bool)> = model
            .versions
            .values()
            .filter_map(|v| v.loaded.as_ref())
            .map(|v| (v, v.footprint.bytes() == 0))
            .collect();
        let fresh = versions.iter().filter(|(_, fresh)| *fresh).count().max(1) as u64;
        for (version, is_fresh) in versions {
            if is_fresh {
                version
                    .footprint
                    .bytes
                    .store(bytes / fresh, Ordering::Relaxed);
                *version.footprint.gpus.lock() =
                    on_gpus.iter().map(|(&id, &b)| (id, b / fresh)).collect();
            }
            let pin = version
                .config
                .parameters
                .get(PINNED_PARAMETER)
                .and_then(|p| parse_bool_parameter(p.string_value.trim()))
                .unwrap_or(pinned);
            version.footprint.pinned.store(pin, Ordering::Relaxed);
        }
    }

    /// After models loaded in parallel (at startup, or poll mode's
    /// changes), which one measure cannot tell apart: each new version's
    /// footprint is its model files' size until its first request adds
    /// its growth; pinned as `--pin-loaded-models` says for `cause`.
    pub(crate) fn settle_parallel_footprints(&self, names: &[String], cause: LoadCause) {
        let folders: Vec<(&String, std::path::PathBuf)> = {
            let registry = self.inner.registry.read();
            names
                .iter()
                .filter_map(|name| {
                    let model = registry.get(name)?;
                    let loaded = model.versions.values().find_map(|v| v.loaded.as_ref())?;
                    Some((name, loaded.folder.clone()))
                })
                .collect()
        };
        let pinned = self.inner.residency.pins(cause);
        for (name, folder) in folders {
            self.settle_footprint(name, folder_bytes(&folder), &BTreeMap::new(), pinned);
        }
    }

    /// The metric families of residency (loads by cause, load times,
    /// evictions, waits, each loaded version's bytes, budgets) when it is
    /// at work; none otherwise.
    pub fn residency_families(&self) -> Vec<nereid_core::exposition::Family> {
        if !self.residency_shown() {
            return Vec::new();
        }
        self.inner.residency.families(&Resident(self))
    }

    /// Whether residency is at work (on-demand model control, or a memory
    /// budget), and so shown: otherwise the repository index and the
    /// metrics stay as Triton's.
    pub(crate) fn residency_shown(&self) -> bool {
        self.control_mode() == ControlMode::OnDemand
            || !self.inner.residency.options().budget.is_empty()
    }
}

/// A model kept from eviction while this lives (see
/// [`Engine::load_on_request`]); empty outside on-demand model control.
#[derive(Debug, Default)]
pub struct KeptLoaded {
    /// Released on drop.
    _held: Vec<Held>,
}

impl LoadedVersion {
    /// The bytes this version holds, as measured (the repository index
    /// and `nereid_model_memory_bytes` show it).
    pub fn memory_bytes(&self) -> u64 {
        self.footprint.bytes()
    }
}

/// The size of the files under `folder`, all versions together.
fn folder_bytes(folder: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => folder_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}
