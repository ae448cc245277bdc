//! Ensembles that depend on themselves: Triton's `CircularDependencyCheck`
//! (model_repository_manager.cc), which walks from an ensemble towards the
//! models it uses and reports the first path that leads back to it.

use std::collections::HashSet;

use crate::EnsembleError;

/// The dependency cycle through the ensemble `name`, as Triton reports it,
/// if any. `steps_of(model)` gives the model names an ensemble's steps use,
/// or `None` for a model that is not an ensemble.
///
/// Triton names the start and the last ensemble before the path returns to
/// it (`a -> ... -> c -> a`). Unlike Triton, each ensemble is visited once,
/// so a cycle that does not pass through `name` is not followed forever; it
/// is found when that cycle's own ensembles are checked.
pub fn find_cycle(
    name: &str,
    steps_of: &dyn Fn(&str) -> Option<Vec<String>>,
) -> Option<EnsembleError> {
    let mut visited = HashSet::new();
    let mut stack = vec![(name.to_owned(), upstreams(name, steps_of))];
    visited.insert(name.to_owned());
    // Depth first, one frame per ensemble on the path, so deep nesting
    // cannot overflow the thread's stack.
    while let Some((current, pending)) = stack.last_mut() {
        let Some(next) = pending.pop() else {
            stack.pop();
            continue;
        };
        if next == name {
            return Some(EnsembleError::CircularDependency {
                start: name.to_owned(),
                last: current.clone(),
            });
        }
        if visited.insert(next.clone()) {
            let frame = upstreams(&next, steps_of);
            stack.push((next, frame));
        }
    }
    None
}

/// The distinct models `model`'s steps use, reversed so that popping gives
/// them in step order.
fn upstreams(model: &str, steps_of: &dyn Fn(&str) -> Option<Vec<String>>) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut names: Vec<String> = steps_of(model)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect();
    names.reverse();
    names
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> impl Fn(&str) -> Option<Vec<String>> {
        let map: HashMap<String, Vec<String>> = edges
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.iter().map(|s| (*s).to_owned()).collect()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn a_self_reference_names_the_ensemble_three_times() {
        let steps = graph(&[("a", &["m", "a"])]);
        let err = find_cycle("a", &steps).unwrap();
        assert_eq!(
            err.to_string(),
            "circular dependency between ensembles: a -> ... -> a -> a"
        );
    }

    #[test]
    fn a_longer_cycle_names_the_last_ensemble_before_the_start() {
        let steps = graph(&[("a", &["m", "b"]), ("b", &["c"]), ("c", &["a"])]);
        let err = find_cycle("a", &steps).unwrap();
        assert_eq!(
            err.to_string(),
            "circular dependency between ensembles: a -> ... -> c -> a"
        );
        let err = find_cycle("b", &steps).unwrap();
        assert_eq!(
            err.to_string(),
            "circular dependency between ensembles: b -> ... -> a -> b"
        );
    }

    #[test]
    fn no_cycle_and_cycles_elsewhere_are_none() {
        let steps = graph(&[("a", &["b", "m"]), ("b", &["m"])]);
        assert_eq!(find_cycle("a", &steps), None);
        assert_eq!(find_cycle("m", &steps), None);
        // b and c loop without a: a's own check ends; b's finds the loop.
        let steps = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["b"])]);
        assert_eq!(find_cycle("a", &steps), None);
        assert!(find_cycle("b", &steps).is_some());
    }
}
