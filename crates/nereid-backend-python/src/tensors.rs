//! Tensors and responses as the frames carry them: descriptors of regions
//! in shared-memory files, response entries, parameters and error codes.

use std::path::PathBuf;

use nereid_core::{BackendError, DataType, ErrorKind, Parameter, Parameters, Tensor};
use serde_json::{Map, Value, json};

use crate::message::Entry;
use std::sync::Arc;

use crate::shm::{Hold, Region, WorkerFiles};

/// A tensor's descriptor: its name, type, shape and region.
pub(crate) fn descriptor(name: &str, datatype: DataType, shape: &[i64], region: &Region) -> Value {
    json!({
        "name": name,
        "datatype": datatype.wire_name(),
        "shape": shape,
        "shm": {"path": region.path, "offset": region.offset, "size": region.size},
    })
}

/// Request or response parameters as a JSON object.
pub(crate) fn parameters(parameters: &Parameters) -> Value {
    let map: Map<String, Value> = parameters
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Parameter::Bool(b) => json!(b),
                Parameter::Int64(i) => json!(i),
                Parameter::Uint64(u) => json!(u),
                Parameter::Double(d) => json!(d),
                Parameter::String(s) => json!(s),
            };
            (k.clone(), v)
        })
        .collect();
    Value::Object(map)
}

/// Reads the worker's files; errors name `label`, the worker.
pub(crate) struct Reader<'a> {
    pub(crate) files: &'a mut WorkerFiles,
    pub(crate) label: &'a str,
    /// Holds the message being read while views of its outputs live;
    /// without one, outputs are copied.
    pub(crate) hold: Option<Arc<Hold>>,
}

impl Reader<'_> {
    fn fail(&self, message: impl std::fmt::Display) -> BackendError {
        BackendError::Execute(format!("{}: {message}", self.label))
    }

    /// The outputs of a binary response entry, copied out of the worker's
    /// files or viewed there (see `shm::VIEW_MIN`), or the error it
    /// carries.
    pub(crate) fn entry(&mut self, entry: Entry) -> Result<Vec<Tensor>, BackendError> {
        let outputs = entry.map_err(BackendError::Request)?;
        outputs
            .into_iter()
            .map(|(name, datatype, shape, region)| {
                let data = self
                    .files
                    .bytes(&region, self.hold.as_ref())
                    .map_err(|e| self.fail(format_args!("output '{name}': {e}")))?;
                Ok(Tensor {
                    name,
                    datatype,
                    shape,
                    data,
                })
            })
            .collect()
    }

    /// The tensor a descriptor names, copied out of the worker's file.
    pub(crate) fn tensor(&mut self, d: &Value) -> Result<Tensor, BackendError> {
        let bad = || self.fail(format_args!("the worker sent a bad output descriptor: {d}"));
        let name = d["name"].as_str().ok_or_else(bad)?.to_owned();
        let datatype = d["datatype"]
            .as_str()
            .and_then(DataType::from_wire_name)
            .ok_or_else(bad)?;
        let shape: Vec<i64> = d["shape"]
            .as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|v| v.as_i64().ok_or_else(bad))
            .collect::<Result<_, _>>()?;
        let region = Region {
            path: PathBuf::from(d["shm"]["path"].as_str().unwrap_or_default()),
            offset: d["shm"]["offset"].as_u64().ok_or_else(bad)? as usize,
            size: d["shm"]["size"].as_u64().ok_or_else(bad)? as usize,
        };
        let data = self
            .files
            .read(&region)
            .map_err(|e| self.fail(format_args!("output '{name}': {e}")))?;
        Ok(Tensor {
            name,
            datatype,
            shape,
            data: data.into(),
        })
    }
}

/// The error kind of a TritonError code name (INTERNAL for unknown ones).
pub(crate) fn kind_of(code: &str) -> ErrorKind {
    use ErrorKind as K;
    match code {
        "INVALID_ARG" => K::InvalidArgument,
        "NOT_FOUND" => K::NotFound,
        "UNAVAILABLE" => K::Unavailable,
        "UNSUPPORTED" => K::Unsupported,
        "ALREADY_EXISTS" => K::AlreadyExists,
        "CANCELLED" => K::Cancelled,
        _ => K::Internal,
    }
}

/// TritonError's code name for an error kind.
pub(crate) fn code_name(kind: ErrorKind) -> &'static str {
    use ErrorKind as K;
    match kind {
        K::InvalidArgument => "INVALID_ARG",
        K::NotFound => "NOT_FOUND",
        K::Unavailable => "UNAVAILABLE",
        K::Unsupported => "UNSUPPORTED",
        K::AlreadyExists => "ALREADY_EXISTS",
        K::Cancelled => "CANCELLED",
        K::Internal => "INTERNAL",
    }
}
