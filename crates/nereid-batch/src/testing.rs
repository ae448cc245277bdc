//! Builders the crate's tests share: model `m`, which batches up to 8, its
//! tensors, and an answer of it.

use nereid_core::{DataType, InferResponse, ModelVersion, Parameters, Tensor};

use crate::spec::{ModelSpec, TensorSpec};

/// A required tensor whose rows have `dims`.
pub(crate) fn spec(name: &str, datatype: DataType, dims: &[i64]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        datatype,
        row_dims: dims.to_vec(),
        optional: false,
    }
}

/// Model `m` (any version), batching up to 8.
pub(crate) fn model(inputs: Vec<TensorSpec>, outputs: Vec<TensorSpec>) -> ModelSpec {
    ModelSpec {
        name: "m".into(),
        version: ModelVersion::Latest,
        batching: true,
        max_batch_size: 8,
        inputs,
        outputs,
    }
}

/// An answer of version 1 of `m` with `outputs`.
pub(crate) fn response(outputs: Vec<Tensor>) -> InferResponse {
    InferResponse {
        model_name: "m".into(),
        model_version: 1,
        id: String::new(),
        outputs,
        parameters: Parameters::new(),
        in_shared_memory: Vec::new(),
    }
}
