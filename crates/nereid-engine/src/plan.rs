//! What a (re)load does with each version, decided on plain data: keep a
//! serving version whose config and files are unchanged, load the others
//! beside what serves, retire those the version policy no longer selects.

use std::collections::{BTreeMap, BTreeSet};

use nereid_core::model_config::ModelConfig;

/// A version that serves now, as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Serving {
    /// Its folder's fingerprint when it was loaded.
    pub fingerprint: Option<u64>,
    /// Whether it was loaded with the config about to be applied.
    pub same_config: bool,
}

/// A version the (new) config selects, with its folder's fingerprint now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub version: i64,
    pub fingerprint: Option<u64>,
}

/// The decision for every version, each list ascending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Serving and unchanged: left alone.
    pub keep: Vec<i64>,
    /// New, changed or not serving: loaded beside what serves, then swapped in.
    pub load: Vec<i64>,
    /// Known but no longer selected: drained and unloaded.
    pub retire: Vec<i64>,
}

/// Plans a reload. `known` holds every version the model has a row for
/// (serving or not); `force` reloads even unchanged versions (an explicit
/// load request does). A version whose fingerprint is unknown is reloaded.
pub fn plan(
    serving: &BTreeMap<i64, Serving>,
    known: &BTreeSet<i64>,
    targets: &[Target],
    force: bool,
) -> Plan {
    let mut result = Plan::default();
    for target in targets {
        let unchanged = serving.get(&target.version).is_some_and(|s| {
            s.same_config && s.fingerprint.is_some() && s.fingerprint == target.fingerprint
        });
        if unchanged && !force {
            result.keep.push(target.version);
        } else {
            result.load.push(target.version);
        }
    }
    let selected: BTreeSet<i64> = targets.iter().map(|t| t.version).collect();
    result.retire = known.difference(&selected).copied().collect();
    result.keep.sort_unstable();
    result.load.sort_unstable();
    result
}

/// Whether two configs load the same way. The version policy only picks
/// versions, so changing it alone does not reload the versions kept.
pub fn same_config(a: &ModelConfig, b: &ModelConfig) -> bool {
    if a.version_policy == b.version_policy {
        return a == b;
    }
    let strip = |c: &ModelConfig| ModelConfig {
        version_policy: None,
        ..c.clone()
    };
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::ModelVersionPolicy;

    use super::*;

    fn serving(rows: &[(i64, u64, bool)]) -> BTreeMap<i64, Serving> {
        rows.iter()
            .map(|&(v, fp, same_config)| {
                (
                    v,
                    Serving {
                        fingerprint: Some(fp),
                        same_config,
                    },
                )
            })
            .collect()
    }

    fn targets(rows: &[(i64, u64)]) -> Vec<Target> {
        rows.iter()
            .map(|&(version, fp)| Target {
                version,
                fingerprint: Some(fp),
            })
            .collect()
    }

    fn known(versions: &[i64]) -> BTreeSet<i64> {
        versions.iter().copied().collect()
    }

    #[test]
    fn unchanged_versions_are_kept() {
        let p = plan(
            &serving(&[(1, 10, true)]),
            &known(&[1]),
            &targets(&[(1, 10)]),
            false,
        );
        assert_eq!(p.keep, [1]);
        assert!(p.load.is_empty() && p.retire.is_empty());
    }

    #[test]
    fn changed_files_or_config_reload() {
        let p = plan(
            &serving(&[(1, 10, true), (2, 20, true)]),
            &known(&[1, 2]),
            &targets(&[(1, 11), (2, 20)]),
            false,
        );
        assert_eq!((p.keep, p.load), (vec![2], vec![1]));
        let p = plan(
            &serving(&[(1, 10, false)]),
            &known(&[1]),
            &targets(&[(1, 10)]),
            false,
        );
        assert_eq!(p.load, [1]);
    }

    #[test]
    fn a_forced_load_reloads_everything() {
        let p = plan(
            &serving(&[(1, 10, true)]),
            &known(&[1]),
            &targets(&[(1, 10)]),
            true,
        );
        assert_eq!(p.load, [1]);
    }

    #[test]
    fn new_versions_load_and_unselected_retire() {
        // latest:1 moves from version 1 to a new version 2.
        let p = plan(
            &serving(&[(1, 10, true)]),
            &known(&[1]),
            &targets(&[(2, 20)]),
            false,
        );
        assert_eq!(p.load, [2]);
        assert_eq!(p.retire, [1]);
        // A failed version (known, not serving) is retried.
        let p = plan(&serving(&[]), &known(&[3]), &targets(&[(3, 30)]), false);
        assert_eq!(p.load, [3]);
    }

    #[test]
    fn unknown_fingerprints_reload() {
        let p = plan(
            &BTreeMap::from([(
                1,
                Serving {
                    fingerprint: None,
                    same_config: true,
                },
            )]),
            &known(&[1]),
            &[Target {
                version: 1,
                fingerprint: None,
            }],
            false,
        );
        assert_eq!(p.load, [1]);
    }

    #[test]
    fn the_version_policy_alone_does_not_change_the_config() {
        let a = ModelConfig {
            name: "m".into(),
            max_batch_size: 4,
            ..Default::default()
        };
        let b = ModelConfig {
            version_policy: Some(ModelVersionPolicy::default()),
            ..a.clone()
        };
        assert!(same_config(&a, &b));
        let c = ModelConfig {
            max_batch_size: 8,
            ..b.clone()
        };
        assert!(!same_config(&b, &c));
    }
}
