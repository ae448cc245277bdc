//! A model's traffic settings: `traffic.json` beside its `config.pbtxt`
//! (a file of Nereid's own, so `config.pbtxt` stays valid for Triton), or
//! the same JSON sent through the repository API or Nereid's traffic
//! endpoint. It names version labels, how requests that name no version
//! are split across versions, a shadow version, a fallback model and what
//! the route log records. See docs/traffic.md for the format.
//!
//! This module only reads, checks and merges the settings; the engine
//! applies them to the versions that are loaded.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The file's name inside a model folder. It is not part of the model:
/// changing it moves labels and weights without a reload.
pub const TRAFFIC_FILE: &str = "traffic.json";

/// The request parameter a sticky split reads when the settings name none.
pub const DEFAULT_STICKY_KEY: &str = "routing_key";

/// How many shadow requests may wait when the settings say nothing.
const DEFAULT_SHADOW_QUEUE: usize = 64;

/// A model's traffic settings, checked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficSpec {
    /// Label → version, e.g. `stable` → 3.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, i64>,
    /// Weights of the versions a request that names no version goes to,
    /// each keyed by a label or a version number.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub split: BTreeMap<String, u32>,
    /// The request parameter whose value keeps one caller on one version;
    /// [`DEFAULT_STICKY_KEY`] when unset. Requests without it are spread
    /// at random by the weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<FallbackSpec>,
    /// The share (0 to 1) of routed requests whose inputs and outputs the
    /// route log also records.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub log_tensors: f64,
}

/// A version that also receives a share of the model's requests; its
/// answers are compared with the served ones and logged, never returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShadowSpec {
    /// A label or a version number.
    pub version: String,
    /// The share (0 to 1) of requests copied to it.
    pub fraction: f64,
    /// Copies that may wait; past it they are dropped and counted.
    #[serde(default = "default_shadow_queue")]
    pub queue: usize,
    /// Outputs whose elements differ by at most this much match.
    #[serde(default)]
    pub tolerance: f64,
}

/// A model that takes the requests while this one's queue is too long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackSpec {
    pub model: String,
    /// Requests go to the fallback while the mean time requests spent
    /// queued for this model passes this many milliseconds.
    pub queue_ms: f64,
}

fn default_shadow_queue() -> usize {
    DEFAULT_SHADOW_QUEUE
}

fn is_zero(value: &f64) -> bool {
    *value == 0.0
}

/// Why traffic settings were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid traffic settings for model '{model}': {reason}")]
pub struct TrafficError {
    pub model: String,
    pub reason: String,
}

impl From<TrafficError> for nereid_core::Error {
    fn from(e: TrafficError) -> Self {
        nereid_core::Error::invalid_argument(e.to_string())
    }
}

/// When a traffic file was last changed, to apply each change once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
}

impl TrafficSpec {
    /// Parses and checks settings for `model`.
    pub fn from_json(model: &str, text: &str) -> Result<TrafficSpec, TrafficError> {
        let spec: TrafficSpec = serde_json::from_str(text).map_err(|e| TrafficError {
            model: model.to_string(),
            reason: e.to_string(),
        })?;
        spec.check(model)?;
        Ok(spec)
    }

    /// The settings with `update` applied: a field it names replaces the
    /// current one (`null` clears it), except `labels`, which are merged
    /// label by label (`"canary": null` removes one).
    pub fn merged(&self, model: &str, update: &str) -> Result<TrafficSpec, TrafficError> {
        let invalid = |reason: String| TrafficError {
            model: model.to_string(),
            reason,
        };
        let update: Value = serde_json::from_str(update).map_err(|e| invalid(e.to_string()))?;
        let Value::Object(update) = update else {
            return Err(invalid("expected a JSON object".into()));
        };
        let Value::Object(mut merged) =
            serde_json::to_value(self).map_err(|e| invalid(e.to_string()))?
        else {
            return Err(invalid("the current settings are not an object".into()));
        };
        for (field, value) in update {
            match (field.as_str(), value) {
                ("labels", Value::Object(labels)) => {
                    let current = merged
                        .entry("labels")
                        .or_insert_with(|| Value::Object(Default::default()));
                    let Value::Object(current) = current else {
                        unreachable!("labels serialize as an object");
                    };
                    for (label, version) in labels {
                        match version {
                            Value::Null => current.remove(&label),
                            version => current.insert(label, version),
                        };
                    }
                }
                (_, Value::Null) => {
                    merged.remove(&field);
                }
                (_, value) => {
                    merged.insert(field, value);
                }
            }
        }
        let spec: TrafficSpec =
            serde_json::from_value(Value::Object(merged)).map_err(|e| invalid(e.to_string()))?;
        spec.check(model)?;
        Ok(spec)
    }

    /// The JSON the settings read back as.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The request parameter a sticky split reads.
    pub fn sticky_key(&self) -> &str {
        self.sticky_key.as_deref().unwrap_or(DEFAULT_STICKY_KEY)
    }

    /// The version `name` (a label or a number) stands for, by these
    /// settings' labels; `None` for an unknown label.
    pub fn version_of(&self, name: &str) -> Option<i64> {
        match parse_number(name) {
            Some(version) => Some(version),
            None => self.labels.get(name).copied(),
        }
    }

    /// Checks what can be checked without knowing which versions are
    /// loaded: label names, weights, shares and references to labels.
    fn check(&self, model: &str) -> Result<(), TrafficError> {
        let invalid = |reason: String| {
            Err(TrafficError {
                model: model.to_string(),
                reason,
            })
        };
        for (label, &version) in &self.labels {
            if !is_label(label) {
                return invalid(format!(
                    "'{label}' cannot be a label: a label starts with a letter and holds letters, digits, '_', '-' or '.', at most 64 characters"
                ));
            }
            if version < 1 {
                return invalid(format!("label '{label}' names version {version}"));
            }
        }
        for target in self.split.keys() {
            if self.version_of(target).is_none() {
                return invalid(format!(
                    "the split names '{target}', which is neither a version number nor one of the labels"
                ));
            }
        }
        if !self.split.is_empty() && self.split.values().all(|&w| w == 0) {
            return invalid("every weight of the split is 0".into());
        }
        if let Some(shadow) = &self.shadow {
            if self.version_of(&shadow.version).is_none() {
                return invalid(format!(
                    "the shadow names '{}', which is neither a version number nor one of the labels",
                    shadow.version
                ));
            }
            if !(0.0..=1.0).contains(&shadow.fraction) {
                return invalid("the shadow's fraction must be between 0 and 1".into());
            }
            if shadow.queue == 0 {
                return invalid("the shadow's queue must hold at least 1 request".into());
            }
            if !shadow.tolerance.is_finite() || shadow.tolerance < 0.0 {
                return invalid("the shadow's tolerance must be 0 or more".into());
            }
        }
        if let Some(fallback) = &self.fallback {
            if fallback.model == model {
                return invalid("a model cannot be its own fallback".into());
            }
            if !fallback.queue_ms.is_finite() || fallback.queue_ms < 0.0 {
                return invalid("the fallback's queue_ms must be 0 or more".into());
            }
        }
        if !(0.0..=1.0).contains(&self.log_tensors) {
            return invalid("log_tensors must be between 0 and 1".into());
        }
        Ok(())
    }
}

/// Whether `name` can be a version label: it can never be read as a
/// version number, and it fits in a URL path segment unescaped.
pub fn is_label(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= 64
        && bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A version number as Triton spells one: digits only.
fn parse_number(name: &str) -> Option<i64> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// Reads `model_dir`'s traffic file: `None` when there is none.
pub fn read_traffic_file(
    model: &str,
    model_dir: &Path,
) -> Result<Option<(TrafficSpec, FileStamp)>, TrafficError> {
    let path = model_dir.join(TRAFFIC_FILE);
    let Some(stamp) = traffic_file_stamp(model_dir) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path).map_err(|e| TrafficError {
        model: model.to_string(),
        reason: format!("cannot read {}: {e}", path.display()),
    })?;
    Ok(Some((TrafficSpec::from_json(model, &text)?, stamp)))
}

/// The stamp of `model_dir`'s traffic file now; `None` when there is none.
pub fn traffic_file_stamp(model_dir: &Path) -> Option<FileStamp> {
    let metadata = std::fs::metadata(model_dir.join(TRAFFIC_FILE)).ok()?;
    metadata.is_file().then(|| FileStamp {
        modified: metadata.modified().ok(),
        len: metadata.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_parses() {
        let spec = TrafficSpec::from_json(
            "m",
            r#"{"labels": {"stable": 3, "canary": 4},
                "split": {"stable": 90, "canary": 10},
                "sticky_key": "user",
                "shadow": {"version": "5", "fraction": 0.5},
                "fallback": {"model": "small", "queue_ms": 20},
                "log_tensors": 0.01}"#,
        )
        .unwrap();
        assert_eq!(spec.labels["canary"], 4);
        assert_eq!(spec.version_of("stable"), Some(3));
        assert_eq!(spec.version_of("7"), Some(7));
        assert_eq!(spec.version_of("beta"), None);
        assert_eq!(spec.sticky_key(), "user");
        assert_eq!(spec.shadow.as_ref().unwrap().queue, DEFAULT_SHADOW_QUEUE);
    }

    #[test]
    fn bad_settings_are_refused_with_their_reason() {
        let refused = |text: &str| TrafficSpec::from_json("m", text).unwrap_err().reason;
        assert!(refused(r#"{"labels": {"3": 3}}"#).contains("cannot be a label"));
        assert!(refused(r#"{"labels": {"a b": 3}}"#).contains("cannot be a label"));
        assert!(refused(r#"{"labels": {"x": 0}}"#).contains("names version 0"));
        assert!(refused(r#"{"split": {"canary": 1}}"#).contains("neither a version"));
        assert!(refused(r#"{"split": {"1": 0}}"#).contains("every weight"));
        assert!(refused(r#"{"fallback": {"model": "m", "queue_ms": 1}}"#).contains("own"));
        assert!(refused(r#"{"shadow": {"version": "2", "fraction": 2}}"#).contains("fraction"));
        assert!(refused(r#"{"lables": {}}"#).contains("unknown field"));
    }

    #[test]
    fn an_update_merges_labels_and_replaces_the_rest() {
        let spec = TrafficSpec::from_json(
            "m",
            r#"{"labels": {"stable": 3, "canary": 4}, "split": {"stable": 1}}"#,
        )
        .unwrap();
        let moved = spec
            .merged("m", r#"{"labels": {"stable": 4, "canary": null}}"#)
            .unwrap();
        assert_eq!(moved.labels, BTreeMap::from([("stable".into(), 4)]));
        assert_eq!(moved.split, spec.split);
        let cleared = moved.merged("m", r#"{"split": null}"#).unwrap();
        assert!(cleared.split.is_empty());
        let err = spec
            .merged("m", r#"{"labels": {"stable": null}}"#)
            .unwrap_err();
        assert!(err.reason.contains("'stable'"), "{err}");
    }

    #[test]
    fn files_are_read_with_a_stamp() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_traffic_file("m", dir.path()).unwrap(), None);
        std::fs::write(dir.path().join(TRAFFIC_FILE), r#"{"labels": {"a": 1}}"#).unwrap();
        let (spec, stamp) = read_traffic_file("m", dir.path()).unwrap().unwrap();
        assert_eq!(spec.labels["a"], 1);
        assert_eq!(traffic_file_stamp(dir.path()), Some(stamp));
        std::fs::write(dir.path().join(TRAFFIC_FILE), "{").unwrap();
        assert!(read_traffic_file("m", dir.path()).is_err());
    }
}
