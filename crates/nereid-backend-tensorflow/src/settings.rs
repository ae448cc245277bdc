//! Triton's TensorFlow backend parameters, read from a model's config:
//! `parameters { key: "TF_SIGNATURE_DEF" value: { string_value: "multiply" } }`.
//!
//! Read: `TF_GRAPH_TAG`, `TF_SIGNATURE_DEF`, `TF_NUM_INTRA_THREADS`,
//! `TF_NUM_INTER_THREADS`, `TF_USE_PER_SESSION_THREADS` (they go into the
//! session's `ConfigProto`). Accepted and logged: `MAX_SESSION_SHARE_COUNT`
//! (each instance has its own session, Triton's default). Refused:
//! `TF_INIT_OPS_FILE`, which runs an init-ops graph Nereid does not load.
//! A known key with a value that does not parse fails the load, as in
//! Triton; unknown keys are ignored.

use nereid_core::model_config::ModelConfig;
use nereid_core::{BackendError, ParameterReader};
use prost::Message;

use crate::signature::DEFAULT_TAG;

/// What a model's parameters ask of the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The graph tag to load (`serve` by default).
    pub(crate) tag: String,
    /// The signature to serve; `None`: Triton's default choice.
    pub(crate) signature: Option<String>,
    /// `TF_NUM_INTRA_THREADS`; 0 lets TensorFlow choose.
    pub(crate) intra_op_threads: i32,
    /// `TF_NUM_INTER_THREADS`; 0 lets TensorFlow choose.
    pub(crate) inter_op_threads: i32,
    /// `TF_USE_PER_SESSION_THREADS`: pools of this session's own.
    pub(crate) per_session_threads: bool,
}

/// The fields of TensorFlow's `ConfigProto` (tensorflow/core/protobuf/
/// config.proto) these parameters set.
#[derive(Clone, PartialEq, Message)]
struct ConfigProto {
    #[prost(int32, tag = "2")]
    intra_op_parallelism_threads: i32,
    #[prost(int32, tag = "5")]
    inter_op_parallelism_threads: i32,
    #[prost(bool, tag = "9")]
    use_per_session_threads: bool,
}

impl Settings {
    /// Settings from a config's parameters (only the graph tag and the
    /// signature when autofill reads a config that may be incomplete).
    pub(crate) fn from_config(config: &ModelConfig) -> Result<Self, BackendError> {
        let reader = ParameterReader::new(config);
        if reader.value("TF_INIT_OPS_FILE").is_some() {
            return Err(BackendError::Unsupported(format!(
                "model '{}': parameter 'TF_INIT_OPS_FILE' is not supported by Nereid's TensorFlow backend",
                config.name
            )));
        }
        if let Some(count) = reader.value("MAX_SESSION_SHARE_COUNT") {
            match count.parse::<i64>() {
                Ok(n) if n > 0 => tracing::info!(
                    model = %config.name,
                    "MAX_SESSION_SHARE_COUNT {n} accepted; each instance has a session of its own"
                ),
                _ => return Err(reader.bad("MAX_SESSION_SHARE_COUNT", count, "a positive number")),
            }
        }
        Ok(Settings {
            tag: reader
                .value("TF_GRAPH_TAG")
                .filter(|t| !t.is_empty())
                .unwrap_or(DEFAULT_TAG)
                .to_owned(),
            signature: reader
                .value("TF_SIGNATURE_DEF")
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            intra_op_threads: threads(&reader, "TF_NUM_INTRA_THREADS", 0)?,
            inter_op_threads: threads(&reader, "TF_NUM_INTER_THREADS", i32::MIN)?,
            per_session_threads: reader.flag("TF_USE_PER_SESSION_THREADS")?.unwrap_or(false),
        })
    }

    /// The session's `ConfigProto`, serialized; empty when nothing is set.
    pub(crate) fn session_config(&self) -> Vec<u8> {
        let proto = ConfigProto {
            intra_op_parallelism_threads: self.intra_op_threads,
            inter_op_parallelism_threads: self.inter_op_threads,
            use_per_session_threads: self.per_session_threads,
        };
        proto.encode_to_vec()
    }
}

/// A thread count no lower than `min` (Triton refuses a negative intra
/// count; TensorFlow reads a negative inter count as "run ops on the
/// caller's thread").
fn threads(reader: &ParameterReader<'_>, key: &str, min: i32) -> Result<i32, BackendError> {
    let Some(v) = reader.value(key) else {
        return Ok(0);
    };
    match v.parse::<i32>() {
        Ok(n) if n >= min => Ok(n),
        Ok(_) => Err(reader.bad(key, v, "a non-negative number")),
        Err(_) => Err(reader.bad(key, v, "an integer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(params: &[(&str, &str)]) -> ModelConfig {
        nereid_core::testing::config_with("m", params)
    }

    #[test]
    fn defaults_are_tritons() {
        let s = Settings::from_config(&config(&[])).unwrap();
        assert_eq!(s.tag, "serve");
        assert_eq!(s.signature, None);
        assert_eq!((s.intra_op_threads, s.inter_op_threads), (0, 0));
        assert!(!s.per_session_threads);
        assert!(s.session_config().is_empty(), "nothing set, nothing sent");
    }

    #[test]
    fn reads_every_parameter_into_the_session_config() {
        let s = Settings::from_config(&config(&[
            ("TF_GRAPH_TAG", "gpu"),
            ("TF_SIGNATURE_DEF", "multiply"),
            ("TF_NUM_INTRA_THREADS", "2"),
            ("TF_NUM_INTER_THREADS", "1"),
            ("TF_USE_PER_SESSION_THREADS", "yes"),
            ("MAX_SESSION_SHARE_COUNT", "2"),
            ("SOMETHING_ELSE", "x"),
        ]))
        .unwrap();
        assert_eq!(s.tag, "gpu");
        assert_eq!(s.signature.as_deref(), Some("multiply"));
        // Field 2 = 2, field 5 = 1, field 9 = true, as protoc encodes them.
        assert_eq!(s.session_config(), vec![0x10, 2, 0x28, 1, 0x48, 1]);
    }

    #[test]
    fn bad_values_name_the_parameter() {
        let err = Settings::from_config(&config(&[("TF_NUM_INTRA_THREADS", "-1")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "model 'm': parameter 'TF_NUM_INTRA_THREADS' is '-1', expected a non-negative number"
        );
        let err = Settings::from_config(&config(&[("MAX_SESSION_SHARE_COUNT", "0")])).unwrap_err();
        assert!(
            err.to_string().contains("'MAX_SESSION_SHARE_COUNT' is '0'"),
            "{err}"
        );
        let err = Settings::from_config(&config(&[("TF_INIT_OPS_FILE", "init.pb")])).unwrap_err();
        assert!(matches!(err, BackendError::Unsupported(_)), "{err}");
    }
}
