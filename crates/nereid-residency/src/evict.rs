//! Which loaded versions make room: the least recently used that are not
//! pinned and have no request in flight.

use std::time::{Duration, Instant};

use nereid_core::Error;

use crate::budget::{Place, human};
use crate::meter::Meter;
use crate::{Models, Resident};

/// How long an eviction may take to show in the memory in use: the
/// instances drop once their queues close, then the allocator trims.
const SETTLE: Duration = Duration::from_secs(2);
const SETTLE_STEP: Duration = Duration::from_millis(20);
/// How long the figure must stay put to count as settled; longer than the
/// engine's janitor takes to trim after the instances drop.
const STEADY: Duration = Duration::from_millis(400);

/// The version to unload next at `place`, sparing `loading` (the model
/// that needs the room).
pub(crate) fn least_recent<'a>(
    resident: &'a [Resident],
    place: Place,
    loading: Option<&str>,
) -> Option<&'a Resident> {
    evictable(resident, place, loading).min_by_key(|r| r.last_used)
}

/// The versions at `place` that may be evicted for `loading`.
fn evictable<'a>(
    resident: &'a [Resident],
    place: Place,
    loading: Option<&str>,
) -> impl Iterator<Item = &'a Resident> {
    resident
        .iter()
        .filter(move |r| r.place == place && !r.pinned && r.in_flight == 0)
        .filter(move |r| Some(r.model.as_str()) != loading)
}

/// What one pass of eviction did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Evicted {
    pub models: Vec<String>,
}

/// Unloads least recently used versions at `place` until `need` more
/// bytes fit under `limit`. Errs, naming the budget and the need, when
/// everything evictable is gone and they still do not fit.
pub(crate) fn make_room(
    models: &dyn Models,
    meter: &dyn Meter,
    place: Place,
    limit: u64,
    need: u64,
    loading: Option<&str>,
) -> Result<Evicted, (Evicted, Error)> {
    let mut evicted = Evicted::default();
    loop {
        let Some(used) = meter.used(place) else {
            return Ok(evicted);
        };
        if used.saturating_add(need) <= limit {
            return Ok(evicted);
        }
        let resident = models.resident();
        // Evicting is pointless when all that could go would not do.
        let reclaimable: u64 = evictable(&resident, place, loading).map(|r| r.bytes).sum();
        let victim = least_recent(&resident, place, loading);
        let Some(victim) = victim.filter(|_| used.saturating_add(need) <= limit + reclaimable)
        else {
            let error = cannot_fit(loading, place, limit, used, need);
            return Err((evicted, error));
        };
        tracing::info!(model = %victim.model, version = victim.version, %place,
            bytes = victim.bytes, used, limit, "evicting the least recently used model to make room");
        models.evict(&victim.model);
        evicted.models.push(victim.model.clone());
        settle(meter, place, used, victim.bytes);
    }
}

/// Waits until the memory an eviction freed shows at `place`: nine tenths
/// of what the version held, or the figure has stopped falling (the
/// allocator keeps some; it returns the rest a moment after the instances
/// are gone), or [`SETTLE`] has passed.
fn settle(meter: &dyn Meter, place: Place, before: u64, freed: u64) {
    let started = Instant::now();
    let target = before.saturating_sub(freed / 10 * 9);
    let mut last = before;
    let mut steady_since = started;
    while started.elapsed() < SETTLE {
        let Some(used) = meter.used(place) else {
            return;
        };
        if used <= target {
            return;
        }
        if used < last {
            last = used;
            steady_since = Instant::now();
        } else if started.elapsed() >= STEADY && steady_since.elapsed() >= STEADY {
            return;
        }
        std::thread::sleep(SETTLE_STEP);
    }
}

fn cannot_fit(loading: Option<&str>, place: Place, limit: u64, used: u64, need: u64) -> Error {
    let what = match loading {
        Some(model) if need > 0 => format!("model '{model}' needs about {}", human(need)),
        _ => "the models loaded need more".to_string(),
    };
    Error::unavailable(format!(
        "{what}, which the {place} memory budget of {} cannot hold: {} is in use by pinned \
         models, models with requests in flight and the server itself, and nothing else can \
         be evicted (--model-memory-budget)",
        human(limit),
        human(used)
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use parking_lot::Mutex;

    use super::*;

    /// Loaded versions whose eviction frees their bytes at once.
    #[derive(Debug, Default)]
    struct Fake {
        resident: Mutex<Vec<Resident>>,
        base: AtomicU64,
    }

    impl Fake {
        fn with(resident: Vec<Resident>, base: u64) -> Arc<Fake> {
            Arc::new(Fake {
                resident: Mutex::new(resident),
                base: AtomicU64::new(base),
            })
        }
    }

    impl Models for Fake {
        fn resident(&self) -> Vec<Resident> {
            self.resident.lock().clone()
        }
        fn evict(&self, model: &str) {
            self.resident.lock().retain(|r| r.model != model);
        }
    }

    impl Meter for Fake {
        fn used(&self, place: Place) -> Option<u64> {
            let held: u64 = self
                .resident
                .lock()
                .iter()
                .filter(|r| r.place == place)
                .map(|r| r.bytes)
                .sum();
            Some(self.base.load(Ordering::SeqCst) + held)
        }
    }

    fn resident(model: &str, used_s_ago: u64, bytes: u64) -> Resident {
        Resident {
            model: model.into(),
            version: 1,
            bytes,
            place: Place::Host,
            last_used: Instant::now() - Duration::from_secs(used_s_ago),
            in_flight: 0,
            pinned: false,
        }
    }

    #[test]
    fn the_least_recently_used_idle_unpinned_version_goes_first() {
        let mut busy = resident("busy", 100, 10);
        busy.in_flight = 1;
        let mut pinned = resident("pinned", 90, 10);
        pinned.pinned = true;
        let mut gpu = resident("gpu", 80, 10);
        gpu.place = Place::Gpu(0);
        let all = vec![
            busy,
            pinned,
            gpu,
            resident("old", 50, 10),
            resident("new", 1, 10),
        ];
        assert_eq!(least_recent(&all, Place::Host, None).unwrap().model, "old");
        assert_eq!(
            least_recent(&all, Place::Host, Some("old")).unwrap().model,
            "new"
        );
        assert_eq!(
            least_recent(&all, Place::Gpu(0), None).unwrap().model,
            "gpu"
        );
        assert!(least_recent(&all, Place::Gpu(1), None).is_none());
    }

    #[test]
    fn room_is_made_oldest_first_and_only_as_much_as_needed() {
        let fake = Fake::with(
            vec![
                resident("a", 30, 40),
                resident("b", 20, 40),
                resident("c", 10, 40),
            ],
            20,
        );
        let evicted = make_room(&*fake, &*fake, Place::Host, 160, 50, Some("new")).unwrap();
        assert_eq!(evicted.models, ["a"], "20 + 80 + 50 fits in 160");
        let evicted = make_room(&*fake, &*fake, Place::Host, 160, 200, Some("new")).unwrap_err();
        assert!(
            evicted.0.models.is_empty(),
            "nothing goes for a load that cannot fit"
        );
        let evicted = make_room(&*fake, &*fake, Place::Host, 160, 100, Some("new")).unwrap();
        assert_eq!(evicted.models, ["b"], "20 + 40 + 100 fits in 160");
        let evicted = make_room(&*fake, &*fake, Place::Host, 160, 141, Some("new")).unwrap_err();
        assert!(evicted.0.models.is_empty(), "20 + 141 cannot fit");
        let evicted = make_room(&*fake, &*fake, Place::Host, 160, 140, Some("new")).unwrap();
        assert_eq!(evicted.models, ["c"], "20 + 140 fits once c is gone");
        let evicted = make_room(&*fake, &*fake, Place::Host, 160, 200, Some("new")).unwrap_err();
        let message = evicted.1.message().to_string();
        assert!(
            message.contains("model 'new' needs about 200 bytes"),
            "{message}"
        );
        assert!(message.contains("budget of 160 bytes"), "{message}");
    }
}
