//! Which loaded versions make room: the least recently used that are not
//! pinned and have no request in flight.

use std::time::{Duration, Instant};

use nereid_core::Error;
use parking_lot::Mutex;

use crate::budget::{Place, human};
use crate::meter::Meter;
use crate::{Models, Released, Resident};

/// How long room may wait for busy versions to finish their requests.
const BUSY_WAIT: Duration = Duration::from_secs(2);
const BUSY_STEP: Duration = Duration::from_millis(10);

/// The longest an evicted version's memory counts as free before the meter
/// shows it gone, whatever its [`Released`] says.
const RELEASE: Duration = Duration::from_secs(2);

/// Memory that evicted versions still hold while it is being returned,
/// counted as free until it is, so that a pass of eviction needs neither
/// wait for the memory in use to fall nor evict again for memory already
/// on its way out.
#[derive(Default)]
pub(crate) struct Releasing {
    freed: Mutex<Vec<Freed>>,
}

impl std::fmt::Debug for Releasing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Releasing")
            .field("entries", &self.freed.lock().len())
            .finish()
    }
}

struct Freed {
    place: Place,
    bytes: u64,
    released: Released,
    at: Instant,
}

impl Releasing {
    fn add(&self, place: Place, bytes: u64, released: Released) {
        self.freed.lock().push(Freed {
            place,
            bytes,
            released,
            at: Instant::now(),
        });
    }

    /// The memory in use at `place` as it will be once what was evicted
    /// lately is returned.
    pub(crate) fn used(&self, meter: &dyn Meter, place: Place) -> Option<u64> {
        let used = meter.used(place)?;
        let mut freed = self.freed.lock();
        freed.retain(|f| f.at.elapsed() < RELEASE && !(f.released)());
        let coming: u64 = freed
            .iter()
            .filter(|f| f.place == place)
            .map(|f| f.bytes)
            .sum();
        Some(used.saturating_sub(coming))
    }
}

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

/// What a load needs at a place: what it is expected to take (its last
/// measure), and what it takes at least (its files), which alone decides
/// whether it is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    pub expected: u64,
    pub at_least: u64,
}

impl Need {
    pub fn exactly(bytes: u64) -> Need {
        Need {
            expected: bytes,
            at_least: bytes,
        }
    }
}

/// Unloads least recently used versions at `place` until the `need`
/// expected fits under `limit`, or nothing more can go. Errs, naming the
/// budget, only when what the load takes at least cannot fit, even with
/// everything evictable gone (versions busy now are waited for a moment).
pub(crate) fn make_room(
    models: &dyn Models,
    meter: &dyn Meter,
    releasing: &Releasing,
    place: Place,
    limit: u64,
    need: Need,
    loading: Option<&str>,
) -> Result<Evicted, (Evicted, Error)> {
    let mut evicted = Evicted::default();
    let started = Instant::now();
    loop {
        let Some(used) = releasing.used(meter, place) else {
            return Ok(evicted);
        };
        if used.saturating_add(need.expected) <= limit {
            return Ok(evicted);
        }
        let resident = models.resident();
        let reclaimable: u64 = evictable(&resident, place, loading).map(|r| r.bytes).sum();
        // Evicting is pointless when all that could go would not do.
        let worth = used.saturating_add(need.at_least) <= limit + reclaimable;
        if let Some(victim) = least_recent(&resident, place, loading).filter(|_| worth) {
            if let Some(released) = models.evict(&victim.model) {
                tracing::info!(model = %victim.model, version = victim.version, %place,
                    bytes = victim.bytes, used, limit, "evicted the least recently used model to make room");
                releasing.add(place, victim.bytes, released);
                evicted.models.push(victim.model.clone());
            }
            continue;
        }
        if used.saturating_add(need.at_least) <= limit {
            // Less room than expected, but what it takes at least fits: the
            // budget is kept after the load, on what it really took.
            return Ok(evicted);
        }
        // Versions busy now may be idle in a moment: wait for them a little
        // before refusing.
        let busy: u64 = resident
            .iter()
            .filter(|r| r.place == place && !r.pinned && r.in_flight > 0)
            .filter(|r| Some(r.model.as_str()) != loading)
            .map(|r| r.bytes)
            .sum();
        if used.saturating_add(need.at_least) <= limit + reclaimable + busy
            && started.elapsed() < BUSY_WAIT
        {
            std::thread::sleep(BUSY_STEP);
            continue;
        }
        return Err((
            evicted,
            cannot_fit(loading, place, limit, used, need.at_least),
        ));
    }
}

fn cannot_fit(loading: Option<&str>, place: Place, limit: u64, used: u64, need: u64) -> Error {
    let what = match loading {
        Some(model) if need > 0 => format!("model '{model}' needs at least {}", human(need)),
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
        fn evict(&self, model: &str) -> Option<Released> {
            self.resident.lock().retain(|r| r.model != model);
            Some(Box::new(|| true))
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

    /// "a", "b" and "c", 40 bytes each, "a" the least recently used, over
    /// 20 bytes of the server's own.
    fn three_of_40() -> Arc<Fake> {
        Fake::with(
            vec![
                resident("a", 30, 40),
                resident("b", 20, 40),
                resident("c", 10, 40),
            ],
            20,
        )
    }

    #[test]
    fn room_is_made_oldest_first_and_only_as_much_as_needed() {
        let fake = three_of_40();
        // Room for `need` more bytes under a budget of 160, for "new".
        let room = |need| {
            make_room(
                &*fake,
                &*fake,
                &Releasing::default(),
                Place::Host,
                160,
                Need::exactly(need),
                Some("new"),
            )
        };
        let evicted = room(50).unwrap();
        assert_eq!(evicted.models, ["a"], "20 + 80 + 50 fits in 160");
        let evicted = room(200).unwrap_err();
        assert!(
            evicted.0.models.is_empty(),
            "nothing goes for a load that cannot fit"
        );
        let evicted = room(100).unwrap();
        assert_eq!(evicted.models, ["b"], "20 + 40 + 100 fits in 160");
        let evicted = room(141).unwrap_err();
        assert!(evicted.0.models.is_empty(), "20 + 141 cannot fit");
        let evicted = room(140).unwrap();
        assert_eq!(evicted.models, ["c"], "20 + 140 fits once c is gone");
        let evicted = room(200).unwrap_err();
        let message = evicted.1.message().to_string();
        assert!(
            message.contains("model 'new' needs at least 200 bytes"),
            "{message}"
        );
        assert!(message.contains("budget of 160 bytes"), "{message}");
    }

    #[test]
    fn an_expectation_larger_than_the_room_evicts_but_does_not_refuse() {
        let mut pinned = resident("pinned", 30, 40);
        pinned.pinned = true;
        let fake = Fake::with(vec![pinned, resident("a", 20, 40)], 20);
        // Expected 100 (a measure that counted other work), at least 50:
        // everything evictable goes, and the load goes ahead.
        let need = Need {
            expected: 100,
            at_least: 50,
        };
        let evicted = make_room(
            &*fake,
            &*fake,
            &Releasing::default(),
            Place::Host,
            120,
            need,
            Some("new"),
        )
        .unwrap();
        assert_eq!(evicted.models, ["a"]);
    }

    /// Evicted versions whose memory the meter shows until the test says
    /// it is returned.
    #[derive(Debug)]
    struct Lagging(Arc<Fake>, Arc<std::sync::atomic::AtomicBool>);

    impl Models for Lagging {
        fn resident(&self) -> Vec<Resident> {
            self.0.resident()
        }
        fn evict(&self, model: &str) -> Option<Released> {
            let bytes: u64 = self
                .0
                .resident()
                .iter()
                .filter(|r| r.model == model)
                .map(|r| r.bytes)
                .sum();
            self.0.base.fetch_add(bytes, Ordering::SeqCst);
            let _evicted = self.0.evict(model)?;
            let returned = Arc::clone(&self.1);
            Some(Box::new(move || returned.load(Ordering::SeqCst)))
        }
    }

    #[test]
    fn memory_on_its_way_out_counts_as_free_without_waiting() {
        let fake = three_of_40();
        let returned = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let lagging = Lagging(Arc::clone(&fake), Arc::clone(&returned));
        let releasing = Releasing::default();
        let started = Instant::now();
        let evicted = make_room(
            &lagging,
            &*fake,
            &releasing,
            Place::Host,
            160,
            Need::exactly(50),
            Some("new"),
        )
        .unwrap();
        assert_eq!(evicted.models, ["a"], "a's 40 bytes are on their way out");
        assert!(started.elapsed() < Duration::from_millis(100), "no wait");
        assert_eq!(releasing.used(&*fake, Place::Host), Some(100));
        // Once returned, the meter alone counts: it is not taken off twice.
        fake.base.fetch_sub(40, Ordering::SeqCst);
        returned.store(true, Ordering::SeqCst);
        assert_eq!(releasing.used(&*fake, Place::Host), Some(100));
    }
}
