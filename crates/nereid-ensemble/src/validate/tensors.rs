//! Ensemble tensors against the composing models' configs: Triton's
//! `ValidateTensorMapping` and `ValidateTensorConsistency`. Each tensor
//! keeps the data type and shape of whoever named it first (the ensemble's
//! own inputs and outputs, then the steps in order); every later view must
//! agree with it.

use std::collections::HashMap;

use nereid_core::model_config::ModelConfig;
use nereid_core::model_config::model_ensembling::Step;

use super::sorted;
use crate::EnsembleError;
use crate::error::{TensorOrigin, data_type_name};

/// Triton's wildcard dimension.
const WILDCARD: i64 = -1;

/// An ensemble tensor, or a symbolic node (the ensemble's sink, or the
/// shared sibling of one step's outputs) with no type or shape.
#[derive(Debug)]
pub(super) struct TensorNode {
    /// The model this tensor's type and shape were inferred from.
    pub(super) model: String,
    data_type: i32,
    dims: Vec<i64>,
    /// `dims` with a leading -1 when that model batches.
    full_dims: Vec<i64>,
    /// Written by a decoupled model.
    pub(super) decoupled: bool,
    pub(super) label: usize,
    pub(super) visited: bool,
    pub(super) prev: Vec<usize>,
    pub(super) next: Vec<usize>,
    /// The node all outputs of the producing step share.
    pub(super) sibling: Option<usize>,
}

impl TensorNode {
    fn new(model: &str, batching: bool, data_type: i32, dims: &[i64]) -> Self {
        let mut full_dims = Vec::with_capacity(dims.len() + 1);
        if batching {
            full_dims.push(WILDCARD);
        }
        full_dims.extend_from_slice(dims);
        TensorNode {
            model: model.to_owned(),
            data_type,
            dims: dims.to_vec(),
            full_dims,
            decoupled: false,
            label: 0,
            visited: false,
            prev: Vec::new(),
            next: Vec::new(),
            sibling: None,
        }
    }

    fn symbolic(model: &str) -> Self {
        TensorNode::new(model, false, 0, &[])
    }

    fn origin(&self) -> Box<TensorOrigin> {
        Box::new(TensorOrigin {
            model: self.model.clone(),
            data_type: data_type_name(self.data_type),
            shape: self.full_dims.clone(),
        })
    }
}

/// The ensemble's tensors as the composing models see them.
#[derive(Debug)]
pub(super) struct TensorGraph {
    pub(super) nodes: Vec<TensorNode>,
    index: HashMap<String, usize>,
    /// The ensemble's inputs, where the data flow starts.
    pub(super) inputs: Vec<usize>,
}

impl TensorGraph {
    /// The ensemble's own inputs and outputs (their `reshape` when set),
    /// each output feeding one sink node.
    pub(super) fn new(config: &ModelConfig) -> Self {
        let mut graph = TensorGraph {
            nodes: Vec::new(),
            index: HashMap::new(),
            inputs: Vec::new(),
        };
        let batching = config.max_batch_size > 0;
        for input in &config.input {
            let dims = input.reshape.as_ref().map_or(&input.dims, |r| &r.shape);
            let node = TensorNode::new(&config.name, batching, input.data_type, dims);
            let idx = graph.first_seen(&input.name, node);
            graph.inputs.push(idx);
        }
        let sink = graph.push(TensorNode::symbolic(&config.name));
        for output in &config.output {
            let dims = output.reshape.as_ref().map_or(&output.dims, |r| &r.shape);
            let node = TensorNode::new(&config.name, batching, output.data_type, dims);
            let idx = graph.first_seen(&output.name, node);
            graph.nodes[sink].prev.push(idx);
            graph.nodes[idx].next.push(sink);
        }
        graph
    }

    fn push(&mut self, node: TensorNode) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// The node named `name`, or `node` under that name if there is none.
    fn first_seen(&mut self, name: &str, node: TensorNode) -> usize {
        if let Some(&idx) = self.index.get(name) {
            return idx;
        }
        let idx = self.push(node);
        self.index.insert(name.to_owned(), idx);
        idx
    }

    /// Adds `node` as `tensor`'s first view, or checks it against the first.
    fn merge(
        &mut self,
        ensemble: &str,
        tensor: &str,
        node: TensorNode,
    ) -> Result<usize, EnsembleError> {
        let Some(&idx) = self.index.get(tensor) else {
            return Ok(self.first_seen(tensor, node));
        };
        consistent(ensemble, tensor, &self.nodes[idx], &node)?;
        Ok(idx)
    }

    /// Maps one step onto the graph, checking its maps against `model`.
    pub(super) fn map_step(
        &mut self,
        ensemble: &str,
        step: &Step,
        model: &ModelConfig,
    ) -> Result<(), EnsembleError> {
        self.map_inputs(ensemble, step, model)?;
        self.map_outputs(ensemble, step, model)?;
        let decoupled = model
            .model_transaction_policy
            .as_ref()
            .is_some_and(|p| p.decoupled);
        let inputs: Vec<usize> = sorted(&step.input_map)
            .into_iter()
            .filter_map(|(_, tensor)| self.index.get(tensor).copied())
            .collect();
        for (_, tensor) in sorted(&step.output_map) {
            let Some(&output) = self.index.get(tensor) else {
                continue;
            };
            self.nodes[output].decoupled = decoupled;
            for &input in &inputs {
                self.nodes[output].prev.push(input);
                self.nodes[input].next.push(output);
            }
        }
        Ok(())
    }

    /// Every mapped input exists, and every input not optional is mapped.
    fn map_inputs(
        &mut self,
        ensemble: &str,
        step: &Step,
        model: &ModelConfig,
    ) -> Result<(), EnsembleError> {
        let name = &step.model_name;
        for (input, tensor) in sorted(&step.input_map) {
            if !model.input.iter().any(|i| i.name == input) {
                return Err(EnsembleError::UnknownInput {
                    ensemble: ensemble.to_owned(),
                    tensor: tensor.to_owned(),
                    input: input.to_owned(),
                    model: name.clone(),
                });
            }
        }
        let batching = model.max_batch_size > 0;
        for input in &model.input {
            match step.input_map.get(&input.name) {
                Some(tensor) => {
                    let node = TensorNode::new(name, batching, input.data_type, &input.dims);
                    self.merge(ensemble, tensor, node)?;
                }
                None if input.optional => {}
                None => {
                    return Err(EnsembleError::InputNotMapped {
                        ensemble: ensemble.to_owned(),
                        input: input.name.clone(),
                        model: name.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Every mapped output exists; unmapped outputs are allowed.
    fn map_outputs(
        &mut self,
        ensemble: &str,
        step: &Step,
        model: &ModelConfig,
    ) -> Result<(), EnsembleError> {
        let outputs = sorted(&step.output_map);
        for &(output, tensor) in &outputs {
            if !model.output.iter().any(|o| o.name == output) {
                return Err(EnsembleError::UnknownOutput {
                    ensemble: ensemble.to_owned(),
                    tensor: tensor.to_owned(),
                    output: output.to_owned(),
                    model: step.model_name.clone(),
                });
            }
        }
        let batching = model.max_batch_size > 0;
        let sibling = self.push(TensorNode::symbolic(&step.model_name));
        for (output, tensor) in outputs {
            let declared = model.output.iter().filter(|o| o.name == output);
            let mut count = 0;
            for o in declared {
                let node = TensorNode::new(&step.model_name, batching, o.data_type, &o.dims);
                let idx = self.merge(ensemble, tensor, node)?;
                self.nodes[idx].sibling = Some(sibling);
                count += 1;
            }
            if count > 1 {
                return Err(EnsembleError::OutputsShareTensor {
                    ensemble: ensemble.to_owned(),
                    model: step.model_name.clone(),
                    tensor: tensor.to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// Same data type, and shapes that match (a -1 matches anything) either as
/// declared or with the batch dimension: a non-batching model's
/// `[-1, 16]` may feed a batching model's `[16]`.
fn consistent(
    ensemble: &str,
    tensor: &str,
    first: &TensorNode,
    second: &TensorNode,
) -> Result<(), EnsembleError> {
    if first.data_type != second.data_type {
        return Err(EnsembleError::InconsistentDataType {
            ensemble: ensemble.to_owned(),
            tensor: tensor.to_owned(),
            first: first.origin(),
            second: second.origin(),
        });
    }
    if !dims_match(&first.dims, &second.dims) && !dims_match(&first.full_dims, &second.full_dims) {
        return Err(EnsembleError::InconsistentShape {
            ensemble: ensemble.to_owned(),
            tensor: tensor.to_owned(),
            first: first.origin(),
            second: second.origin(),
        });
    }
    Ok(())
}

/// Triton's `CompareDimsWithWildcard`.
fn dims_match(a: &[i64], b: &[i64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(&x, &y)| x == WILDCARD || y == WILDCARD || x == y)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(model: &str, batching: bool, dims: &[i64]) -> TensorNode {
        TensorNode::new(model, batching, 11, dims)
    }

    #[test]
    fn wildcards_match_anything_of_the_same_rank() {
        assert!(dims_match(&[-1, 16], &[4, 16]));
        assert!(dims_match(&[], &[]));
        assert!(!dims_match(&[16], &[-1, 16]));
        assert!(!dims_match(&[8, 16], &[4, 16]));
    }

    #[test]
    fn a_non_batching_model_may_feed_a_batching_one() {
        let nobatch = node("n", false, &[-1, 16]);
        let batch = node("b", true, &[16]);
        assert_eq!(consistent("e", "t", &nobatch, &batch), Ok(()));
        assert_eq!(consistent("e", "t", &batch, &nobatch), Ok(()));
        let fixed = node("f", false, &[4, 16]);
        assert_eq!(consistent("e", "t", &fixed, &batch), Ok(()));
    }

    #[test]
    fn shapes_are_reported_with_the_batch_dimension() {
        let small = node("a", true, &[16]);
        let big = node("b", true, &[16, 16, 16]);
        let err = consistent("e", "t", &small, &big).unwrap_err();
        assert_eq!(
            err.to_string(),
            "in ensemble e, ensemble tensor t: inconsistent shape: [-1,16] is inferred from model a while [-1,16,16,16] is inferred from model b"
        );
    }

    #[test]
    fn types_are_compared_first() {
        let fp32 = node("a", true, &[16]);
        let int32 = TensorNode::new("b", true, 8, &[3]);
        let err = consistent("e", "t", &fp32, &int32).unwrap_err();
        assert_eq!(
            err.to_string(),
            "in ensemble e, ensemble tensor t: inconsistent data type: TYPE_FP32 is inferred from model a while TYPE_INT32 is inferred from model b"
        );
    }
}
