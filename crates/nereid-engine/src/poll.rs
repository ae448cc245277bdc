//! Debouncing repository changes, on plain data. A model is applied only
//! once two looks at least `settle` apart found the same fingerprint, so a
//! folder still being copied is never loaded half-written.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What one look at a model folder means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// Same as what was last applied.
    Unchanged,
    /// Different from what was applied, and not settled yet: look again.
    Changing,
    /// Different from what was applied, and stable: apply it now.
    Settled,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    fingerprint: Option<u64>,
    /// When this fingerprint was first seen.
    since: Instant,
}

/// Per model: the fingerprint last applied and a change waiting to settle.
/// A fingerprint of `None` means the folder is absent.
#[derive(Debug)]
pub struct ChangeTracker {
    settle: Duration,
    applied: BTreeMap<String, u64>,
    pending: BTreeMap<String, Pending>,
}

impl ChangeTracker {
    /// Starts from the fingerprints of the models loaded at startup.
    pub fn new(settle: Duration, applied: BTreeMap<String, u64>) -> Self {
        ChangeTracker {
            settle,
            applied,
            pending: BTreeMap::new(),
        }
    }

    /// Records a look at `name` that found `fingerprint` at `now`.
    pub fn look(&mut self, name: &str, fingerprint: Option<u64>, now: Instant) -> Look {
        if let Some(p) = self.pending.get(name)
            && p.fingerprint == fingerprint
        {
            if now.saturating_duration_since(p.since) >= self.settle {
                self.pending.remove(name);
                return Look::Settled;
            }
            return Look::Changing;
        }
        if self.applied.get(name).copied() == fingerprint {
            // Changed and changed back before settling: nothing to do.
            self.pending.remove(name);
            return Look::Unchanged;
        }
        let since = now;
        self.pending
            .insert(name.to_string(), Pending { fingerprint, since });
        Look::Changing
    }

    /// Records that `name` now runs what `fingerprint` describes (`None`:
    /// it was removed).
    pub fn applied(&mut self, name: &str, fingerprint: Option<u64>) {
        match fingerprint {
            Some(fp) => self.applied.insert(name.to_string(), fp),
            None => self.applied.remove(name),
        };
    }

    /// When the earliest waiting change can settle.
    pub fn next_look(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.since + self.settle).min()
    }

    /// Models whose waiting change may have settled by `now`.
    pub fn due(&self, now: Instant) -> Vec<String> {
        self.pending
            .iter()
            .filter(|(_, p)| p.since + self.settle <= now)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Every model applied or waiting, so a rescan notices removals.
    pub fn known(&self) -> impl Iterator<Item = &String> {
        self.applied.keys().chain(self.pending.keys())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTLE: Duration = Duration::from_millis(500);

    fn tracker() -> (ChangeTracker, Instant) {
        let applied = BTreeMap::from([("a".to_string(), 1)]);
        (ChangeTracker::new(SETTLE, applied), Instant::now())
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn unchanged_folders_do_nothing() {
        let (mut t, t0) = tracker();
        assert_eq!(t.look("a", Some(1), t0), Look::Unchanged);
        assert_eq!(t.next_look(), None);
    }

    #[test]
    fn a_change_settles_after_two_equal_looks() {
        let (mut t, t0) = tracker();
        assert_eq!(t.look("a", Some(2), t0), Look::Changing);
        assert_eq!(t.next_look(), Some(t0 + SETTLE));
        assert!(t.due(t0 + ms(100)).is_empty());
        assert_eq!(t.look("a", Some(2), t0 + ms(100)), Look::Changing);
        assert_eq!(t.due(t0 + SETTLE), ["a"]);
        assert_eq!(t.look("a", Some(2), t0 + SETTLE), Look::Settled);
        t.applied("a", Some(2));
        assert_eq!(t.look("a", Some(2), t0 + ms(600)), Look::Unchanged);
    }

    #[test]
    fn a_copy_in_progress_never_settles() {
        let (mut t, t0) = tracker();
        // The file grows between every look: the clock restarts each time.
        for (i, fp) in (10..20).enumerate() {
            let now = t0 + SETTLE * i as u32;
            assert_eq!(t.look("a", Some(fp), now), Look::Changing, "look {i}");
        }
        let last = t0 + SETTLE * 9;
        assert_eq!(t.look("a", Some(19), last + SETTLE), Look::Settled);
    }

    #[test]
    fn new_and_removed_models() {
        let (mut t, t0) = tracker();
        assert_eq!(t.look("b", Some(7), t0), Look::Changing);
        assert_eq!(t.look("b", Some(7), t0 + SETTLE), Look::Settled);
        t.applied("b", Some(7));
        assert_eq!(t.look("a", None, t0), Look::Changing);
        assert_eq!(t.look("a", None, t0 + SETTLE), Look::Settled);
        t.applied("a", None);
        assert_eq!(t.known().cloned().collect::<Vec<_>>(), ["b"]);
        assert_eq!(t.look("a", None, t0 + ms(900)), Look::Unchanged);
    }

    #[test]
    fn a_change_undone_before_settling_is_dropped() {
        let (mut t, t0) = tracker();
        assert_eq!(t.look("a", Some(2), t0), Look::Changing);
        assert_eq!(t.look("a", Some(1), t0 + ms(100)), Look::Unchanged);
        assert_eq!(t.next_look(), None);
    }
}
