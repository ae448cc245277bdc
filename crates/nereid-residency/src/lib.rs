//! Which models stay loaded when a repository holds more than memory
//! does. A model that is not loaded loads on its first request (one load
//! for every request waiting for it, a bounded number at once, a failed
//! one not tried again until its back-off has passed); when a load would
//! pass the memory budget, the least recently used versions with no
//! request in flight are unloaded first; pinned ones never are.
//!
//! The engine's loaded versions come in through the [`Models`] trait, and
//! the memory in use through a [`Meter`]: this crate must not depend on
//! the engine, a wire format, a frontend or a backend.

mod budget;
mod evict;
mod flight;
mod meter;
mod metrics;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use nereid_core::Error;
use nereid_core::exposition::Family;
use parking_lot::Mutex;

pub use budget::{Budget, Place, human};
pub use evict::Need;
pub use flight::Waited;
pub use meter::{Meter, ProcessMemory, own_resident_bytes};

use flight::Flights;
use metrics::Counters;

/// A loaded version, as eviction sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Resident {
    pub model: String,
    pub version: i64,
    /// The memory it holds, as measured at its load and first requests.
    pub bytes: u64,
    pub place: Place,
    /// When it last ran a request, or loaded.
    pub last_used: Instant,
    /// Requests accepted and not answered yet.
    pub in_flight: u64,
    pub pinned: bool,
}

/// Whether an evicted model's memory has been returned (its instances
/// dropped, the allocator trimmed): until then it counts as free anyway.
pub type Released = Box<dyn Fn() -> bool + Send + Sync>;

/// The engine's side: what is loaded, and a way to unload a model.
pub trait Models: Send + Sync {
    fn resident(&self) -> Vec<Resident>;
    /// Unloads every version of `model`, unless a request runs on it or is
    /// on its way to it (then `None`: it was not evicted).
    fn evict(&self, model: &str) -> Option<Released>;
}

/// Why a model loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoadCause {
    Startup,
    /// The repository API (`POST /v2/repository/models/{m}/load`).
    Api,
    /// Poll mode noticed a new or changed model.
    Poll,
    /// A request for a model that was not loaded.
    Demand,
}

impl LoadCause {
    pub fn as_str(self) -> &'static str {
        match self {
            LoadCause::Startup => "startup",
            LoadCause::Api => "api",
            LoadCause::Poll => "poll",
            LoadCause::Demand => "demand",
        }
    }
}

/// How residency is set up (`--model-memory-budget`,
/// `--model-load-limit`, `--pin-loaded-models`).
#[derive(Debug, Clone)]
pub struct Options {
    pub budget: Budget,
    /// Loads on first request that may run at once.
    pub load_limit: usize,
    /// Models loaded at startup, by the repository API or by poll mode are
    /// pinned: never evicted.
    pub pin_loaded: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            budget: Budget::none(),
            load_limit: 4,
            pin_loaded: true,
        }
    }
}

/// Loads on demand, the memory budget and the counts of both.
#[derive(Debug)]
pub struct Residency {
    options: Options,
    meter: Arc<dyn Meter>,
    flights: Flights,
    counters: Counters,
    /// One eviction pass at a time, so two loads do not both evict for
    /// the same room.
    evicting: Mutex<()>,
    /// Memory evicted versions are returning.
    releasing: evict::Releasing,
    /// Under a budget, one load at a time is measured.
    measuring: Mutex<()>,
    /// The footprint each model last had at each place, to size its next
    /// load there.
    footprints: Mutex<HashMap<(String, Place), u64>>,
}

impl Residency {
    pub fn new(options: Options, meter: Arc<dyn Meter>) -> Residency {
        Residency {
            flights: Flights::new(options.load_limit),
            options,
            meter,
            counters: Counters::default(),
            evicting: Mutex::new(()),
            releasing: evict::Releasing::default(),
            measuring: Mutex::new(()),
            footprints: Mutex::default(),
        }
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    pub fn meter(&self) -> &dyn Meter {
        &*self.meter
    }

    /// Under a budget, the turn of one load to make room, load and be
    /// measured: loads that overlap would each count the other's memory.
    /// `None` without a budget, where loads run side by side.
    pub fn measuring(&self) -> Option<parking_lot::MutexGuard<'_, ()>> {
        (!self.options.budget.is_empty()).then(|| self.measuring.lock())
    }

    /// Whether a load for `cause` pins the model.
    pub fn pins(&self, cause: LoadCause) -> bool {
        cause != LoadCause::Demand && self.options.pin_loaded
    }

    /// Waits until `model` has loaded on demand (see [`Flights`]'s rules),
    /// counting the wait.
    pub async fn wait_for(
        &self,
        model: &str,
        deadline: Option<tokio::time::Instant>,
        load: impl FnOnce() -> BoxFuture<'static, Result<(), Error>>,
    ) -> Result<(), Error> {
        let started = Instant::now();
        let result = self.flights.wait(model, deadline, load).await;
        self.counters.waited(started.elapsed(), result.is_ok());
        result.map(drop)
    }

    /// Makes room for what `model` needs at each place before it loads,
    /// evicting the least recently used versions. Errs when the budget
    /// cannot hold what it takes at least, even with everything evictable
    /// gone.
    pub fn make_room(
        &self,
        models: &dyn Models,
        model: &str,
        need: &[(Place, Need)],
    ) -> Result<(), Error> {
        let _one = self.evicting.lock();
        for &(place, need) in need {
            let Some(limit) = self.options.budget.limit(place) else {
                continue;
            };
            self.evict_at(models, place, limit, need, Some(model))?;
        }
        Ok(())
    }

    /// Evicts at `place` until `need` fits under `limit`, sparing
    /// `spare`, and counts what went (also when that was not enough).
    fn evict_at(
        &self,
        models: &dyn Models,
        place: Place,
        limit: u64,
        need: Need,
        spare: Option<&str>,
    ) -> Result<(), Error> {
        let outcome = evict::make_room(
            models,
            &*self.meter,
            &self.releasing,
            place,
            limit,
            need,
            spare,
        );
        let (evicted, error) = match outcome {
            Ok(evicted) => (evicted, None),
            Err((evicted, error)) => (evicted, Some(error)),
        };
        self.counters.evicted(&evicted.models);
        error.map_or(Ok(()), Err)
    }

    /// Brings the memory in use back under every budget, once models have
    /// grown (ONNX Runtime's arena grows on first use, a first load on a
    /// GPU is not sized before): evicts what it can, sparing `loaded` (the
    /// model just loaded, which its request is about to use), and says so
    /// when that is not enough.
    pub fn enforce(&self, models: &dyn Models, loaded: Option<&str>) {
        let _one = self.evicting.lock();
        for (place, limit) in self.options.budget.places() {
            if let Err(error) = self.evict_at(models, place, limit, Need::exactly(0), loaded) {
                tracing::warn!(%place, error = %error.message(), "over the memory budget");
            }
        }
    }

    /// Counts a load that succeeded, and how long it took.
    pub fn loaded(&self, cause: LoadCause, took: Duration) {
        self.counters.loaded(cause, took);
    }

    /// The footprint `model` had at `place` when last measured, to size
    /// its next load there.
    pub fn estimate(&self, model: &str, place: Place) -> Option<u64> {
        self.footprints
            .lock()
            .get(&(model.to_string(), place))
            .copied()
    }

    pub fn remember(&self, model: &str, place: Place, bytes: u64) {
        self.footprints
            .lock()
            .insert((model.to_string(), place), bytes);
    }

    /// The GPUs that have a budget: a load there is measured.
    pub fn budgeted_gpus(&self) -> Vec<u32> {
        self.options
            .budget
            .places()
            .filter_map(|(place, _)| match place {
                Place::Gpu(id) => Some(id),
                Place::Host => None,
            })
            .collect()
    }

    /// A new start for `model` (an operator's load, changed files): a
    /// failed load on demand is no longer backed off from.
    pub fn forget_failure(&self, model: &str) {
        self.flights.forget_failure(model);
    }

    /// The metric families: loads by cause and their times, evictions,
    /// waits for a load, each loaded version's bytes, budgets and use.
    pub fn families(&self, models: &dyn Models) -> Vec<Family> {
        let used = self
            .options
            .budget
            .places()
            .map(|(place, limit)| (place, limit, self.meter.used(place)))
            .collect::<Vec<_>>();
        self.counters
            .families(&models.resident(), &used, self.flights.loading())
    }
}
