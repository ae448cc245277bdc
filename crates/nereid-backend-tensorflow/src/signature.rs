//! A SavedModel's signatures, read from its `saved_model.pb` without
//! TensorFlow: the few fields of `SavedModel`, `MetaGraphDef`,
//! `SignatureDef` and `TensorInfo` that say which tensors a signature
//! takes and gives (tensorflow/core/protobuf/{saved_model,meta_graph}.proto;
//! field numbers are theirs, every other field is skipped). Autofill works
//! from this on a machine without the library.
//!
//! The signature is chosen as Triton's TensorFlow backend chooses it: the
//! one `TF_SIGNATURE_DEF` names, else `serving_default`, else (when the
//! config names none) the first that is neither the init nor the train
//! op's, in key order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nereid_core::{DataType, IoSpec, ModelIo, Shape};
use prost::Message;

/// The file a SavedModel folder holds its graphs and signatures in.
pub(crate) const SAVED_MODEL_FILE: &str = "saved_model.pb";
/// Triton's default graph tag (`tensorflow::kSavedModelTagServe`).
pub(crate) const DEFAULT_TAG: &str = "serve";
/// Triton's default signature key.
pub(crate) const DEFAULT_SIGNATURE: &str = "serving_default";
/// Keys TensorFlow gives signatures that are no entry point for serving.
const NOT_SERVING: [&str; 2] = ["__saved_model_init_op", "__saved_model_train_op"];

#[derive(Clone, PartialEq, Message)]
struct SavedModelProto {
    #[prost(message, repeated, tag = "2")]
    meta_graphs: Vec<MetaGraphProto>,
}

#[derive(Clone, PartialEq, Message)]
struct MetaGraphProto {
    #[prost(message, optional, tag = "1")]
    meta_info_def: Option<MetaInfoProto>,
    #[prost(btree_map = "string, message", tag = "5")]
    signature_def: BTreeMap<String, SignatureProto>,
}

#[derive(Clone, PartialEq, Message)]
struct MetaInfoProto {
    #[prost(string, repeated, tag = "4")]
    tags: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct SignatureProto {
    #[prost(btree_map = "string, message", tag = "1")]
    inputs: BTreeMap<String, TensorInfoProto>,
    #[prost(btree_map = "string, message", tag = "2")]
    outputs: BTreeMap<String, TensorInfoProto>,
}

#[derive(Clone, PartialEq, Message)]
struct TensorInfoProto {
    /// `oneof encoding`'s dense case; sparse and composite tensors leave it empty.
    #[prost(string, tag = "1")]
    name: String,
    #[prost(int32, tag = "2")]
    dtype: i32,
    #[prost(message, optional, tag = "3")]
    tensor_shape: Option<ShapeProto>,
}

#[derive(Clone, PartialEq, Message)]
struct ShapeProto {
    #[prost(message, repeated, tag = "2")]
    dim: Vec<DimProto>,
    #[prost(bool, tag = "3")]
    unknown_rank: bool,
}

#[derive(Clone, PartialEq, Message)]
struct DimProto {
    #[prost(int64, tag = "1")]
    size: i64,
}

/// One tensor of a signature: the key clients name it by, the graph
/// tensor (`op:index`) it is, its type and shape (`None`: unknown rank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SignatureTensor {
    pub(crate) key: String,
    pub(crate) tensor: String,
    pub(crate) datatype: DataType,
    pub(crate) dims: Option<Shape>,
}

/// The signature a model is served by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signature {
    pub(crate) key: String,
    pub(crate) inputs: Vec<SignatureTensor>,
    pub(crate) outputs: Vec<SignatureTensor>,
}

impl Signature {
    /// What autofill needs: the keys, types and shapes.
    pub(crate) fn model_io(&self) -> ModelIo {
        let spec = |t: &SignatureTensor| IoSpec {
            name: t.key.clone(),
            datatype: Some(t.datatype),
            dims: t.dims.clone(),
        };
        ModelIo {
            inputs: self.inputs.iter().map(spec).collect(),
            outputs: self.outputs.iter().map(spec).collect(),
        }
    }
}

/// Why a SavedModel's signature could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SignatureError {
    #[error("cannot read '{path}': {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("'{path}' is no SavedModel: {reason}")]
    Decode { path: PathBuf, reason: String },
    #[error("the SavedModel has no graph tagged '{tag}' (it has {available})")]
    NoTag { tag: String, available: String },
    #[error("the SavedModel has no signature '{key}' (it has {available})")]
    NoSignature { key: String, available: String },
    #[error("the SavedModel has no serving signature")]
    NoServingSignature,
    #[error("{direction} '{key}' of signature '{signature}' is {reason}")]
    Tensor {
        direction: &'static str,
        key: String,
        signature: String,
        reason: String,
    },
}

/// The folder a SavedModel's path names: `model.savedmodel/` (Triton's
/// layout) or the version folder itself (TF Serving's).
pub(crate) fn saved_model_file(model_path: &Path) -> PathBuf {
    model_path.join(SAVED_MODEL_FILE)
}

/// Reads the signature `wanted` (or Triton's default) of the graph tagged
/// `tag` from the SavedModel folder `model_path`.
pub(crate) fn read_signature(
    model_path: &Path,
    tag: &str,
    wanted: Option<&str>,
) -> Result<Signature, SignatureError> {
    let path = saved_model_file(model_path);
    let bytes = std::fs::read(&path).map_err(|e| SignatureError::Read {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    let saved = SavedModelProto::decode(bytes.as_slice()).map_err(|e| SignatureError::Decode {
        path,
        reason: e.to_string(),
    })?;
    let graph = graph_tagged(saved, tag)?;
    choose_signature(graph.signature_def, wanted)
}

fn graph_tagged(saved: SavedModelProto, tag: &str) -> Result<MetaGraphProto, SignatureError> {
    let tags = |g: &MetaGraphProto| g.meta_info_def.clone().unwrap_or_default().tags;
    let available: Vec<String> = saved
        .meta_graphs
        .iter()
        .map(|g| tags(g).join("+"))
        .collect();
    saved
        .meta_graphs
        .into_iter()
        .find(|g| tags(g).iter().any(|t| t == tag))
        .ok_or_else(|| SignatureError::NoTag {
            tag: tag.to_owned(),
            available: listed(available),
        })
}

fn choose_signature(
    mut signatures: BTreeMap<String, SignatureProto>,
    wanted: Option<&str>,
) -> Result<Signature, SignatureError> {
    let key = wanted.unwrap_or(DEFAULT_SIGNATURE);
    let chosen = match signatures.remove_entry(key) {
        Some(found) => found,
        None if wanted.is_some() => {
            return Err(SignatureError::NoSignature {
                key: key.to_owned(),
                available: listed(signatures.into_keys()),
            });
        }
        None => {
            let other = signatures
                .into_iter()
                .find(|(k, _)| !NOT_SERVING.contains(&k.as_str()))
                .ok_or(SignatureError::NoServingSignature)?;
            tracing::warn!(
                "unable to find serving signature '{DEFAULT_SIGNATURE}'; using signature '{}'",
                other.0
            );
            other
        }
    };
    signature(chosen.0, chosen.1)
}

fn signature(key: String, proto: SignatureProto) -> Result<Signature, SignatureError> {
    let tensors = |direction: &'static str, map: BTreeMap<String, TensorInfoProto>| {
        map.into_iter()
            .map(|(k, info)| {
                tensor(k.clone(), info).map_err(|reason| SignatureError::Tensor {
                    direction,
                    key: k,
                    signature: key.clone(),
                    reason,
                })
            })
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(Signature {
        inputs: tensors("input", proto.inputs)?,
        outputs: tensors("output", proto.outputs)?,
        key,
    })
}

fn tensor(key: String, info: TensorInfoProto) -> Result<SignatureTensor, String> {
    if info.name.is_empty() {
        return Err("not a dense tensor (sparse and composite tensors are not served)".into());
    }
    let datatype = datatype(info.dtype).ok_or_else(|| {
        format!(
            "of unsupported datatype '{}'",
            dtype_name(info.dtype).unwrap_or("unknown")
        )
    })?;
    let dims = info
        .tensor_shape
        .filter(|s| !s.unknown_rank)
        .map(|s| s.dim.iter().map(|d| d.size).collect());
    Ok(SignatureTensor {
        key,
        tensor: info.name,
        datatype,
        dims,
    })
}

/// TensorFlow's `DataType` enum values (tensorflow/core/framework/types.proto)
/// for the types Nereid and TensorFlow share; `tf.string` is BYTES.
const DTYPES: [(i32, DataType, &str); 14] = [
    (1, DataType::Fp32, "DT_FLOAT"),
    (2, DataType::Fp64, "DT_DOUBLE"),
    (3, DataType::Int32, "DT_INT32"),
    (4, DataType::Uint8, "DT_UINT8"),
    (5, DataType::Int16, "DT_INT16"),
    (6, DataType::Int8, "DT_INT8"),
    (7, DataType::Bytes, "DT_STRING"),
    (9, DataType::Int64, "DT_INT64"),
    (10, DataType::Bool, "DT_BOOL"),
    (14, DataType::Bf16, "DT_BFLOAT16"),
    (17, DataType::Uint16, "DT_UINT16"),
    (19, DataType::Fp16, "DT_HALF"),
    (22, DataType::Uint32, "DT_UINT32"),
    (23, DataType::Uint64, "DT_UINT64"),
];

/// Names of TensorFlow types no Triton type matches, for error messages.
const OTHER_DTYPES: [(i32, &str); 6] = [
    (8, "DT_COMPLEX64"),
    (11, "DT_QINT8"),
    (18, "DT_COMPLEX128"),
    (20, "DT_RESOURCE"),
    (21, "DT_VARIANT"),
    (0, "DT_INVALID"),
];

pub(crate) fn datatype(dtype: i32) -> Option<DataType> {
    DTYPES.iter().find(|(v, _, _)| *v == dtype).map(|e| e.1)
}

/// TensorFlow's enum value for `datatype`.
pub(crate) fn dtype(datatype: DataType) -> i32 {
    DTYPES
        .iter()
        .find(|(_, d, _)| *d == datatype)
        .map_or(0, |e| e.0)
}

fn dtype_name(dtype: i32) -> Option<&'static str> {
    DTYPES
        .iter()
        .find(|(v, _, _)| *v == dtype)
        .map(|e| e.2)
        .or_else(|| OTHER_DTYPES.iter().find(|(v, _)| *v == dtype).map(|e| e.1))
}

fn listed(names: impl IntoIterator<Item = String>) -> String {
    let names: Vec<String> = names.into_iter().map(|n| format!("'{n}'")).collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
#[path = "signature_tests.rs"]
mod tests;
