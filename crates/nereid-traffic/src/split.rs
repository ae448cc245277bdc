//! Choosing a version by weight: at random, or by a key so that one
//! caller always lands on the same version while the weights stay put.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};

/// Versions with cumulative weights, ascending by version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// (version, weight up to and including it).
    bounds: Vec<(i64, u64)>,
    total: u64,
}

impl Split {
    /// A split over `(version, weight)` pairs; `None` when every weight is
    /// 0. Weights of a version named twice (by a label and its number) add.
    pub fn new(weights: impl IntoIterator<Item = (i64, u32)>) -> Option<Split> {
        let mut by_version = std::collections::BTreeMap::new();
        for (version, weight) in weights {
            *by_version.entry(version).or_insert(0u64) += u64::from(weight);
        }
        let mut total = 0;
        let bounds = by_version
            .into_iter()
            .filter(|&(_, w)| w > 0)
            .map(|(v, w)| {
                total += w;
                (v, total)
            })
            .collect();
        (total > 0).then_some(Split { bounds, total })
    }

    /// The version for `key`, or for a random draw without one.
    pub fn choose(&self, key: Option<&str>) -> i64 {
        let draw = match key {
            Some(key) => key_hash(key),
            None => random(),
        };
        self.at(draw % self.total)
    }

    fn at(&self, point: u64) -> i64 {
        let i = self.bounds.partition_point(|&(_, bound)| bound <= point);
        self.bounds[i].0
    }

    /// Each version's share, for display.
    pub fn shares(&self) -> impl Iterator<Item = (i64, f64)> + '_ {
        let mut below = 0;
        self.bounds.iter().map(move |&(v, bound)| {
            let share = (bound - below) as f64 / self.total as f64;
            below = bound;
            (v, share)
        })
    }
}

/// A hash of `key` that is the same in every process and release, so a
/// caller keeps its version across restarts and replicas: FNV-1a, then
/// SplitMix64's finalizer to spread similar keys.
pub fn key_hash(key: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    mix(hash)
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

thread_local! {
    static STATE: Cell<u64> = Cell::new({
        // Seeded per thread from the std hasher's random keys.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(0);
        hasher.finish() | 1
    });
}

/// A uniform 64-bit draw (SplitMix64 over a per-thread state): cheap, and
/// good enough to spread requests by weight.
pub fn random() -> u64 {
    STATE.with(|state| {
        let next = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(next);
        mix(next)
    })
}

/// A draw in [0, 1).
pub fn unit() -> f64 {
    (random() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pearson's chi-square statistic of `counts` against `shares`.
    fn chi_square(counts: &[(i64, u64)], split: &Split) -> f64 {
        let n: u64 = counts.iter().map(|c| c.1).sum();
        split
            .shares()
            .map(|(v, share)| {
                let seen = counts.iter().find(|c| c.0 == v).map_or(0, |c| c.1) as f64;
                let expected = share * n as f64;
                (seen - expected).powi(2) / expected
            })
            .sum()
    }

    fn tally(split: &Split, draws: impl Iterator<Item = i64>) -> Vec<(i64, u64)> {
        let mut counts: Vec<(i64, u64)> = split.shares().map(|(v, _)| (v, 0)).collect();
        for v in draws {
            counts.iter_mut().find(|c| c.0 == v).unwrap().1 += 1;
        }
        counts
    }

    // The 99.9999th percentile of chi-square with 1 and 2 degrees of
    // freedom: a fair split fails once in a million runs, and a share off
    // by a fifth over 10,000 draws still fails (chi-square about 44).
    const CHI2_1DF: f64 = 23.93;
    const CHI2_2DF: f64 = 27.63;

    #[test]
    fn random_draws_follow_the_weights() {
        let split = Split::new([(3, 90), (4, 10)]).unwrap();
        let counts = tally(&split, (0..10_000).map(|_| split.choose(None)));
        assert!(chi_square(&counts, &split) < CHI2_1DF, "{counts:?}");
    }

    #[test]
    fn keyed_draws_follow_the_weights_and_stick() {
        let split = Split::new([(1, 50), (2, 30), (3, 20)]).unwrap();
        let keys: Vec<String> = (0..10_000).map(|i| format!("user-{i}")).collect();
        let counts = tally(&split, keys.iter().map(|k| split.choose(Some(k))));
        assert!(chi_square(&counts, &split) < CHI2_2DF, "{counts:?}");
        for key in &keys[..100] {
            let first = split.choose(Some(key));
            assert!((0..10).all(|_| split.choose(Some(key)) == first));
        }
    }

    #[test]
    fn zero_weights_are_left_out_and_names_of_one_version_add() {
        assert_eq!(Split::new([(1, 0)]), None);
        let split = Split::new([(1, 0), (2, 5), (2, 5)]).unwrap();
        assert_eq!(split.shares().collect::<Vec<_>>(), [(2, 1.0)]);
        assert_eq!(split.choose(None), 2);
    }

    #[test]
    fn the_key_hash_is_fixed() {
        // A caller keeps its version across processes and releases.
        assert_eq!(key_hash("user-1"), key_hash("user-1"));
        assert_eq!(key_hash(""), mix(0xcbf2_9ce4_8422_2325));
    }
}
