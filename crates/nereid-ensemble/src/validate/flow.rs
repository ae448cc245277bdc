//! The ensemble's data flow as its own config describes it: Triton's
//! `BuildEnsembleGraph` and the reachability checks of
//! `ValidateEnsembleSchedulingConfig`. Nodes are ensemble tensors; an edge
//! runs from each input of a step to each of its outputs.

use std::collections::{HashMap, HashSet, VecDeque};

use nereid_core::model_config::ModelConfig;
use nereid_core::model_config::model_ensembling::Step;

use super::sorted;
use crate::EnsembleError;

#[derive(Debug)]
struct FlowNode {
    name: String,
    /// Some step writes it.
    written: bool,
    /// Computable from the ensemble's inputs.
    ready: bool,
    prev: Vec<usize>,
    next: Vec<usize>,
}

/// Ensemble tensors in the order the steps first name them, which is the
/// order the unused-tensor check reports in (Triton's own order is that of
/// a hash map, so it varies; its tests accept any).
#[derive(Debug)]
pub(super) struct FlowGraph {
    model: String,
    nodes: Vec<FlowNode>,
    index: HashMap<String, usize>,
}

impl FlowGraph {
    /// Links the steps' tensors, refusing a step that lacks a field and a
    /// tensor that two outputs write.
    pub(super) fn build(model: &str, steps: &[Step]) -> Result<Self, EnsembleError> {
        let mut graph = FlowGraph {
            model: model.to_owned(),
            nodes: Vec::new(),
            index: HashMap::new(),
        };
        for (idx, step) in steps.iter().enumerate() {
            graph.add_step(idx, step)?;
        }
        Ok(graph)
    }

    fn add_step(&mut self, idx: usize, step: &Step) -> Result<(), EnsembleError> {
        let missing = |field| EnsembleError::StepFieldMissing {
            model: self.model.clone(),
            step: idx,
            field,
        };
        if step.model_name.is_empty() {
            return Err(missing("model_name"));
        }
        if step.input_map.is_empty() {
            return Err(missing("input_map"));
        }
        if step.output_map.is_empty() {
            return Err(missing("output_map"));
        }
        let mut outputs = Vec::new();
        for (_, tensor) in sorted(&step.output_map) {
            let node = self.node(tensor);
            if self.nodes[node].written {
                return Err(EnsembleError::TensorWrittenTwice {
                    model: self.model.clone(),
                    tensor: tensor.to_owned(),
                    step: idx,
                });
            }
            self.nodes[node].written = true;
            outputs.push(node);
        }
        for (_, tensor) in sorted(&step.input_map) {
            let input = self.node(tensor);
            for &output in &outputs {
                self.nodes[output].prev.push(input);
                self.nodes[input].next.push(output);
            }
        }
        Ok(())
    }

    /// The node of `tensor`, added if new.
    fn node(&mut self, tensor: &str) -> usize {
        if let Some(&idx) = self.index.get(tensor) {
            return idx;
        }
        self.nodes.push(FlowNode {
            name: tensor.to_owned(),
            written: false,
            ready: false,
            prev: Vec::new(),
            next: Vec::new(),
        });
        self.index.insert(tensor.to_owned(), self.nodes.len() - 1);
        self.nodes.len() - 1
    }

    /// Every ensemble input is read, every ensemble output is written from
    /// the inputs, and every other tensor is both computable and read.
    pub(super) fn check_flow(&mut self, config: &ModelConfig) -> Result<(), EnsembleError> {
        let mut queue = VecDeque::new();
        for input in &config.input {
            let Some(&node) = self.index.get(&input.name) else {
                return Err(EnsembleError::InputNotUsed {
                    model: self.model.clone(),
                    input: input.name.clone(),
                });
            };
            self.nodes[node].ready = true;
            queue.push_back(node);
        }
        self.propagate(queue);
        let mut outputs = HashSet::new();
        for output in &config.output {
            let Some(&node) = self.index.get(&output.name) else {
                return Err(EnsembleError::OutputNotUsed {
                    model: self.model.clone(),
                    output: output.name.clone(),
                });
            };
            if !self.nodes[node].ready {
                return Err(self.not_written(node));
            }
            outputs.insert(node);
        }
        let unused =
            self.nodes.iter().enumerate().find(|(idx, node)| {
                !outputs.contains(idx) && (!node.ready || node.next.is_empty())
            });
        match unused {
            Some((_, node)) => Err(EnsembleError::TensorUnused {
                model: self.model.clone(),
                tensor: node.name.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Marks ready every tensor whose producing step's inputs all are.
    fn propagate(&mut self, mut queue: VecDeque<usize>) {
        while let Some(current) = queue.pop_front() {
            for k in 0..self.nodes[current].next.len() {
                let next = self.nodes[current].next[k];
                if self.nodes[next].ready {
                    continue;
                }
                if self.nodes[next].prev.iter().all(|&p| self.nodes[p].ready) {
                    self.nodes[next].ready = true;
                    queue.push_back(next);
                }
            }
        }
    }

    /// The error for an unwritten output, naming (as Triton does) the
    /// furthest unwritten tensor found by always following the first
    /// unwritten, unseen predecessor.
    fn not_written(&self, output: usize) -> EnsembleError {
        let mut seen = HashSet::new();
        let mut last = output;
        let mut frontier = Some(&self.nodes[output].prev);
        while let Some(prev) = frontier.take() {
            for &p in prev {
                if !self.nodes[p].ready && seen.insert(p) {
                    last = p;
                    frontier = Some(&self.nodes[p].prev);
                    break;
                }
            }
        }
        let model = self.model.clone();
        let name = self.nodes[output].name.clone();
        if last == output {
            EnsembleError::OutputNotWritten {
                model,
                output: name,
            }
        } else {
            EnsembleError::OutputNotConnected {
                model,
                output: name,
                tensor: self.nodes[last].name.clone(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use nereid_repository::parse_config_text;

    use super::super::steps;
    use super::*;

    /// An ensemble over `data` -> `prob` whose steps are `(input, output)`
    /// tensor pairs of a one-input, one-output model.
    fn run(steps_text: &[(&str, &str)], outputs: &[&str]) -> Result<(), EnsembleError> {
        let step_list: Vec<String> = steps_text
            .iter()
            .map(|(i, o)| {
                format!(
                    r#"{{ model_name: "m" input_map {{ key: "in" value: "{i}" }} output_map {{ key: "out" value: "{o}" }} }}"#
                )
            })
            .collect();
        let output_list: Vec<String> = outputs
            .iter()
            .map(|o| format!(r#"{{ name: "{o}" data_type: TYPE_FP32 dims: [ 1 ] }}"#))
            .collect();
        let text = format!(
            r#"name: "e" platform: "ensemble" ensemble_scheduling {{ step [ {} ] }}
            input [ {{ name: "data" data_type: TYPE_FP32 dims: [ 1 ] }} ] output [ {} ]"#,
            step_list.join(","),
            output_list.join(",")
        );
        let config = parse_config_text(&text).unwrap();
        let mut graph = FlowGraph::build("e", steps(&config).unwrap())?;
        graph.check_flow(&config)
    }

    #[test]
    fn a_chain_flows() {
        assert_eq!(run(&[("data", "t"), ("t", "prob")], &["prob"]), Ok(()));
    }

    #[test]
    fn a_self_fed_output_is_not_written_and_names_nothing_further() {
        let err = run(&[("data", "prob"), ("p2", "p2")], &["prob", "p2"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "output 'p2' for ensemble 'e' is not written"
        );
    }

    #[test]
    fn an_unwritten_source_is_named() {
        let err = run(
            &[("data", "prob"), ("t", "u"), ("u", "p2")],
            &["prob", "p2"],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "output 'p2' for ensemble 'e' is not written: at least one of its depending tensors, 't', is not connected"
        );
    }

    #[test]
    fn unused_tensors_are_reported_in_first_seen_order() {
        let err = run(&[("data", "prob"), ("x", "y")], &["prob"]).unwrap_err();
        assert_eq!(
            err,
            EnsembleError::TensorUnused {
                model: "e".into(),
                tensor: "y".into()
            }
        );
        let err = run(&[("data", "prob"), ("data", "dead_end")], &["prob"]).unwrap_err();
        assert!(matches!(err, EnsembleError::TensorUnused { tensor, .. } if tensor == "dead_end"));
    }

    #[test]
    fn inputs_and_outputs_must_appear_in_a_step() {
        let err = run(&[("t", "prob")], &["prob"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ensemble input 'data' for ensemble e' is not used"
        );
        let err = run(&[("data", "prob")], &["prob", "other"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ensemble output 'other' for ensemble e' is not used"
        );
    }

    #[test]
    fn a_tensor_is_written_once() {
        let err = run(&[("data", "prob"), ("data", "prob")], &["prob"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ensemble tensor 'prob' can appear in an output map only once for ensemble 'e' step 1"
        );
    }
}
