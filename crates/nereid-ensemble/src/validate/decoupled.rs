//! Decoupled branching: a decoupled model answers a request with any number
//! of responses, so tensors it writes arrive on their own schedule. A step
//! (or the ensemble's outputs) may not combine tensors that descend from
//! different decoupled steps, as their responses could never be paired.
//! This is the traversal at the end of Triton's `ValidateEnsembleConfig`.

use std::collections::VecDeque;

use super::tensors::TensorGraph;
use crate::EnsembleError;

/// Walks the data flow from the ensemble's inputs, labelling each tensor
/// with the decoupled step it descends from (0: none). Returns whether any
/// decoupled step was reached, which makes the ensemble decoupled.
pub(super) fn any_decoupled(
    ensemble: &str,
    graph: &mut TensorGraph,
) -> Result<bool, EnsembleError> {
    let nodes = &mut graph.nodes;
    let mut labels = 0;
    let mut queue = VecDeque::new();
    for &input in &graph.inputs {
        nodes[input].visited = true;
        queue.push_back(input);
    }
    while let Some(current) = queue.pop_front() {
        for k in 0..nodes[current].next.len() {
            let next = nodes[current].next[k];
            if nodes[next].visited || !nodes[next].prev.iter().all(|&p| nodes[p].visited) {
                continue;
            }
            let inherited = nodes[next].prev.first().map_or(0, |&p| nodes[p].label);
            if nodes[next]
                .prev
                .iter()
                .any(|&p| nodes[p].label != inherited)
            {
                return Err(EnsembleError::DecoupledBranching {
                    ensemble: ensemble.to_owned(),
                    model: nodes[next].model.clone(),
                });
            }
            // All outputs of one step share its label, so a decoupled step
            // starts a single new branch however many tensors it writes.
            let sibling = nodes[next].sibling.filter(|&s| nodes[s].visited);
            let label = match sibling {
                Some(s) => nodes[s].label,
                None if nodes[next].decoupled => {
                    labels += 1;
                    labels
                }
                None => inherited,
            };
            if let Some(s) = nodes[next].sibling {
                nodes[s].label = label;
                nodes[s].visited = true;
            }
            nodes[next].label = label;
            nodes[next].visited = true;
            queue.push_back(next);
        }
    }
    Ok(labels != 0)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use nereid_repository::parse_config_text;

    use super::super::{Composing, compose};
    use crate::EnsembleError;

    const REPEAT: &str = r#"name: "repeat" max_batch_size: 0 model_transaction_policy { decoupled: true }
        input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]"#;
    const ADD: &str = r#"name: "add" max_batch_size: 0
        input [ { name: "A" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]"#;

    /// An ensemble with input `IN` and the given outputs and steps.
    fn run(outputs: &[&str], steps: &str) -> Result<bool, EnsembleError> {
        let outputs: Vec<String> = outputs
            .iter()
            .map(|o| format!(r#"{{ name: "{o}" data_type: TYPE_INT32 dims: [ 1 ] }}"#))
            .collect();
        let text = format!(
            r#"name: "e" platform: "ensemble" ensemble_scheduling {{ step [ {steps} ] }}
            input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ] output [ {} ]"#,
            outputs.join(",")
        );
        let config = parse_config_text(&text).unwrap();
        let repeat = Arc::new(parse_config_text(REPEAT).unwrap());
        let add = Arc::new(parse_config_text(ADD).unwrap());
        let lookup = move |name: &str, _: i64| match name {
            "repeat" => Composing::Loaded(repeat.clone()),
            "add" => Composing::Loaded(add.clone()),
            _ => Composing::Missing,
        };
        compose(&config, &lookup).map(|c| c.decoupled)
    }

    fn repeat_step(out: &str, idx: Option<&str>) -> String {
        let idx = idx.map_or(String::new(), |t| {
            format!(r#"output_map {{ key: "IDX" value: "{t}" }}"#)
        });
        format!(
            r#"{{ model_name: "repeat" input_map {{ key: "IN" value: "IN" }} output_map {{ key: "OUT" value: "{out}" }} {idx} }}"#
        )
    }

    fn add_step(a: &str, b: &str, sum: &str) -> String {
        format!(
            r#"{{ model_name: "add" input_map {{ key: "A" value: "{a}" }} input_map {{ key: "B" value: "{b}" }} output_map {{ key: "SUM" value: "{sum}" }} }}"#
        )
    }

    #[test]
    fn one_decoupled_step_makes_the_ensemble_decoupled() {
        let steps = format!(
            "{},{}",
            repeat_step("r", Some("i")),
            add_step("r", "i", "OUT")
        );
        assert_eq!(run(&["OUT"], &steps), Ok(true));
        let plain = add_step("IN", "IN", "OUT");
        assert_eq!(run(&["OUT"], &plain), Ok(false));
    }

    #[test]
    fn two_decoupled_branches_may_not_meet_in_a_step() {
        // Triton names the model that first named the tensor being
        // computed: `add` for `s`, but it would be the ensemble for `OUT`.
        let steps = format!(
            "{},{},{},{}",
            repeat_step("r1", None),
            repeat_step("r2", None),
            add_step("r1", "r2", "s"),
            add_step("s", "s", "OUT")
        );
        let err = run(&["OUT"], &steps).unwrap_err();
        assert_eq!(
            err.to_string(),
            "in ensemble e, step of model 'add' receives inputs originated from different decoupled models"
        );
    }

    #[test]
    fn nor_in_the_ensembles_outputs() {
        let steps = format!("{},{}", repeat_step("A", None), repeat_step("B", None));
        let err = run(&["A", "B"], &steps).unwrap_err();
        assert!(
            matches!(&err, EnsembleError::DecoupledBranching { model, .. } if model == "e"),
            "{err}"
        );
    }

    #[test]
    fn a_decoupled_tensor_may_not_meet_an_ensemble_input() {
        // The input carries no decoupled label and `r` carries one.
        let steps = format!("{},{}", repeat_step("r", None), add_step("r", "IN", "OUT"));
        assert!(matches!(
            run(&["OUT"], &steps),
            Err(EnsembleError::DecoupledBranching { .. })
        ));
    }
}
