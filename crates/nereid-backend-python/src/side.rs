//! The side channel: what a worker asks of the server at any time, from
//! any thread, whether a batch runs or not: log lines, custom metrics
//! (`pb_utils.MetricFamily`) and the model repository calls
//! (`pb_utils.load_model`, `unload_model`, `is_model_ready`). The worker
//! writes these frames to a pipe of their own (its fd 3), which a thread
//! per worker reads, so they never wait for the instance thread. Answers
//! (`reply` frames) go back on the worker's stdin, which the instance
//! thread writes too (one frame at a time, under a lock).
//!
//! Loads and unloads may take long; each runs on a thread of its own, so
//! that the worker's other threads keep logging and counting meanwhile.

use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::Arc;

use nereid_core::custom_metrics::{CustomMetrics, FamilyId, Labels, MetricId, MetricKind};
use nereid_core::{Error, InferService};
use serde_json::{Map, Value, json};

use crate::frame::{FrameReader, ToWorker, log_frame, send_json};
use crate::service::Service;
use crate::shm::{Region, WorkerFiles};

/// What the side thread of one worker needs besides its pipe.
#[derive(Clone)]
pub(crate) struct SideContext {
    /// The worker's model: a load or unload of it while it is being
    /// loaded is refused (that load waits for this worker).
    pub(crate) model: String,
    /// "model 'm' version 1 instance 0", for the log.
    pub(crate) label: String,
    pub(crate) service: Service,
}

impl std::fmt::Debug for SideContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SideContext")
            .field("model", &self.model)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

/// Starts the thread that serves the side channel `pipe` of the worker
/// `pid` until the worker closes it (exits).
pub(crate) fn serve(
    pipe: impl Read + Send + 'static,
    stdin: ToWorker,
    context: SideContext,
    pid: u32,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name(format!("py-side-{pid}"))
        .spawn(move || {
            let mut side = Side {
                context,
                stdin,
                families: Vec::new(),
            };
            side.run(FrameReader::new(pipe));
            side.forget_metrics();
        })
        .map(drop)
}

struct Side {
    context: SideContext,
    stdin: ToWorker,
    /// The metric family handles this worker holds; dropped when it exits.
    families: Vec<FamilyId>,
}

impl Side {
    fn run(&mut self, mut frames: FrameReader<impl Read>) {
        loop {
            match frames.take() {
                Ok(Some(frame)) => self.handle(frame),
                Ok(None) => match frames.fill() {
                    Ok(true) => {}
                    Ok(false) | Err(_) => return,
                },
                Err(e) => {
                    tracing::error!(worker = %self.context.label, error = %e, "the Python worker sent a broken side frame; its side channel is closed");
                    return;
                }
            }
        }
    }

    fn handle(&mut self, frame: Value) {
        let tag = frame["tag"].clone();
        let answer = match frame["op"].as_str().unwrap_or_default() {
            "log" => return log_frame(&self.context.label, &frame),
            "metric_family_delete" => return self.delete_family(&frame),
            "load_model" | "unload_model" => return self.control(frame),
            "model_ready" => self.model_ready(&frame),
            "metric_family" => self.new_family(&frame),
            "metric" => self.new_metric(&frame),
            "metric_update" => self.update_metric(&frame),
            other => Err(Error::invalid_argument(format!(
                "unknown side frame op '{other}'"
            ))),
        };
        reply(&self.stdin, &tag, answer);
    }

    fn service(&self) -> Result<Arc<dyn InferService>, Error> {
        self.context
            .service
            .get()
            .cloned()
            .ok_or_else(|| Error::unavailable("the server is not ready for this call yet"))
    }

    fn metrics(&self) -> Result<Arc<CustomMetrics>, Error> {
        Ok(self.service()?.custom_metrics())
    }

    fn new_family(&mut self, frame: &Value) -> Result<Value, Error> {
        let kind = match frame["kind"].as_str() {
            Some("COUNTER") => MetricKind::Counter,
            Some("GAUGE") => MetricKind::Gauge,
            Some("HISTOGRAM") => MetricKind::Histogram,
            _ => return Err(Error::invalid_argument("Unknown metric kind")),
        };
        let name = frame["name"].as_str().unwrap_or_default();
        let description = frame["description"].as_str().unwrap_or_default();
        let id = self
            .metrics()?
            .family(name, description, kind)
            .map_err(Error::from)?;
        self.families.push(id);
        Ok(json!({"id": id.0}))
    }

    fn new_metric(&self, frame: &Value) -> Result<Value, Error> {
        let family = FamilyId(frame["family"].as_u64().unwrap_or_default());
        let labels = labels(&frame["labels"])?;
        let buckets = match &frame["buckets"] {
            Value::Null => None,
            Value::Array(bounds) => Some(bounds.iter().map(number).collect::<Result<_, _>>()?),
            _ => return Err(Error::invalid_argument("'buckets' is not a list")),
        };
        let id = self
            .metrics()?
            .metric(family, labels, buckets)
            .map_err(Error::from)?;
        Ok(json!({"id": id.0}))
    }

    fn update_metric(&self, frame: &Value) -> Result<Value, Error> {
        let metric = MetricId(frame["metric"].as_u64().unwrap_or_default());
        let metrics = self.metrics()?;
        let action = frame["action"].as_str().unwrap_or_default();
        if action == "value" {
            let value = metrics.value(metric).map_err(Error::from)?;
            return Ok(json!({"value": encode_number(value)}));
        }
        let value = number(&frame["value"])?;
        let done = match action {
            "increment" => metrics.increment(metric, value),
            "set" => metrics.set(metric, value),
            "observe" => metrics.observe(metric, value),
            other => {
                return Err(Error::invalid_argument(format!(
                    "unknown metric action '{other}'"
                )));
            }
        };
        done.map_err(Error::from)?;
        Ok(json!({}))
    }

    fn delete_family(&mut self, frame: &Value) {
        let family = FamilyId(frame["family"].as_u64().unwrap_or_default());
        if let Ok(metrics) = self.metrics() {
            metrics.remove_family(family);
        }
        self.families.retain(|&f| f != family);
    }

    /// The worker is gone: its metrics go with it, as a Triton model's do
    /// when its stub exits.
    fn forget_metrics(&mut self) {
        let Ok(metrics) = self.metrics() else {
            return;
        };
        for family in self.families.drain(..) {
            metrics.remove_family(family);
        }
    }

    fn model_ready(&self, frame: &Value) -> Result<Value, Error> {
        let name = frame["model_name"].as_str().unwrap_or_default();
        let version = frame["model_version"].as_i64().filter(|&v| v >= 0);
        let ready = self.service()?.is_model_ready(name, version);
        Ok(json!({"ready": ready}))
    }

    /// A load or unload, on a thread of its own; answered when done.
    fn control(&self, frame: Value) {
        let tag = frame["tag"].clone();
        let call = match self.control_call(frame) {
            Ok(call) => call,
            Err(e) => return reply(&self.stdin, &tag, Err(e)),
        };
        let stdin = Arc::clone(&self.stdin);
        let spawned = std::thread::Builder::new()
            .name("py-model-control".into())
            .spawn(move || reply(&stdin, &tag, call().map(|()| json!({}))));
        if let Err(e) = spawned {
            tracing::error!(worker = %self.context.label, error = %e, "cannot start a thread for a model control call");
        }
    }

    /// What a `load_model` or `unload_model` frame asks for, checked, as a
    /// call to make; the files of a load are read out of the worker's
    /// arena first (they are valid until the answer).
    fn control_call(
        &self,
        frame: Value,
    ) -> Result<Box<dyn FnOnce() -> Result<(), Error> + Send>, Error> {
        let service = self.service()?;
        let name = frame["model_name"].as_str().unwrap_or_default().to_owned();
        if name == self.context.model && service.is_loading(&name) {
            return Err(Error::unavailable(format!(
                "model '{name}' is being loaded or unloaded, and its own instance cannot load or \
                 unload it until that is done (from initialize or warmup, the call would wait for \
                 itself)"
            )));
        }
        if frame["op"] == "unload_model" {
            let dependents = frame["unload_dependents"] == true;
            return Ok(Box::new(move || service.unload_model(&name, dependents)));
        }
        let config = frame["config"].as_str().unwrap_or_default().to_owned();
        let files = load_files(&frame["files"])?;
        Ok(Box::new(move || service.load_model(&name, &config, files)))
    }
}

/// A load's files: `[{"path": "file:1/model.py", "shm": {...}}]`, their
/// contents copied out of the worker's arena.
fn load_files(files: &Value) -> Result<Vec<(String, Vec<u8>)>, Error> {
    let mut mapped = WorkerFiles::default();
    let entries = files.as_array().map(Vec::as_slice).unwrap_or_default();
    entries
        .iter()
        .map(|entry| {
            let bad = || Error::invalid_argument(format!("bad file entry in load_model: {entry}"));
            let key = entry["path"].as_str().ok_or_else(bad)?;
            let shm = &entry["shm"];
            let region = Region {
                path: PathBuf::from(shm["path"].as_str().ok_or_else(bad)?),
                offset: shm["offset"].as_u64().ok_or_else(bad)? as usize,
                size: shm["size"].as_u64().ok_or_else(bad)? as usize,
            };
            let contents = mapped.read(&region).map_err(|e| {
                Error::internal(format!("cannot read file '{key}' of load_model: {e}"))
            })?;
            Ok((key.to_owned(), contents))
        })
        .collect()
}

/// A metric's labels: a JSON object of strings (`null`: none).
fn labels(labels: &Value) -> Result<Labels, Error> {
    let empty = Map::new();
    let map = match labels {
        Value::Null => &empty,
        Value::Object(map) => map,
        _ => return Err(Error::invalid_argument("Labels must be a dictionary.")),
    };
    map.iter()
        .map(|(name, value)| match value {
            Value::String(text) => Ok((name.clone(), text.clone())),
            // Triton's JSON parser's words for a label that is no string.
            _ => Err(Error::internal(
                "attempt to access JSON non-string as string",
            )),
        })
        .collect()
}

/// A number from a frame: JSON has no NaN nor infinities, which travel as
/// the strings "nan", "inf" and "-inf".
fn number(value: &Value) -> Result<f64, Error> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "nan" => Some(f64::NAN),
            "inf" => Some(f64::INFINITY),
            "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
    .ok_or_else(|| Error::invalid_argument(format!("{value} is not a number")))
}

fn encode_number(value: f64) -> Value {
    match value {
        v if v.is_nan() => json!("nan"),
        v if v == f64::INFINITY => json!("inf"),
        v if v == f64::NEG_INFINITY => json!("-inf"),
        v => json!(v),
    }
}

/// Answers the call `tag` on the worker's stdin (unless the worker is
/// gone): `{"op": "reply", "tag": ..., "error": null, ...the result}` or
/// the error.
fn reply(stdin: &ToWorker, tag: &Value, answer: Result<Value, Error>) {
    let mut frame = match answer {
        Ok(Value::Object(fields)) => fields,
        Ok(_) => Map::new(),
        Err(e) => {
            let code = crate::codes::code_name(e.kind());
            let mut fields = Map::new();
            fields.insert(
                "error".into(),
                json!({"message": e.message(), "code": code}),
            );
            fields
        }
    };
    frame.insert("op".into(), json!("reply"));
    frame.insert("tag".into(), tag.clone());
    frame.entry("error").or_insert(Value::Null);
    let _ = send_json(stdin, &Value::Object(frame));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_travel_as_json_or_as_names() {
        for value in [1.5, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(number(&encode_number(value)).unwrap(), value);
        }
        assert!(number(&encode_number(f64::NAN)).unwrap().is_nan());
        assert!(number(&json!("x")).is_err());
    }

    #[test]
    fn labels_must_be_strings() {
        let parsed = labels(&json!({"b": "2", "a": "1"})).unwrap();
        assert_eq!(parsed.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert!(labels(&Value::Null).unwrap().is_empty());
        let err = labels(&json!({"a": 1})).unwrap_err();
        assert_eq!(err.message(), "attempt to access JSON non-string as string");
    }
}
