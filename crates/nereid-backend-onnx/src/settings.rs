//! Session options from a model's config, with the keys and meanings of
//! Triton's ONNX Runtime backend: `parameters { key: "intra_op_thread_count"
//! value: { string_value: "2" } }` and `optimization { graph { level: 1 } }`.
//! Unknown parameters are ignored, as Triton ignores them; a known one with
//! a bad value fails the load, as in Triton.
//!
//! One default differs from Triton's: a session whose config sets no
//! thread parameter (`intra_op_thread_count`, `inter_op_thread_count`,
//! parallel `execution_mode`) runs on the process-wide thread pool (one
//! thread per core, shared by every such session; see `runtime.rs`), not on
//! a pool of its own with a thread per core. Per-session pools
//! oversubscribe the machine as soon as a model has two instances (Triton's
//! default on CPU), and their idle threads spin, taking the cores the other
//! instance and the request path need. A config that sets a thread
//! parameter gets its own pool, as in Triton (`"0"` meaning ONNX Runtime's
//! default size).
//!
//! Threads that spin between runs (ONNX Runtime's default, and the shared
//! pool's) answer the next run sooner, but burn the cores while the model
//! is idle. A model batching to a latency target (`nereid.latency_target_ms`)
//! is idle on purpose while its batcher waits for clients coming back, and
//! spinning threads then take the CPU those clients need to come back: it
//! gets a pool of its own whose threads sleep (measured in
//! docs/latency-target.md). ONNX Runtime's own key
//! `session.intra_op.allow_spinning` ("0" or "1") sets it for any model,
//! with a pool of its own.

use nereid_core::model_config::{LATENCY_TARGET_PARAMETER, ModelConfig, parse_bool_parameter};
use nereid_core::{BackendError, ParameterReader};
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};

/// What a config asks of an ONNX Runtime session. `None` leaves ONNX
/// Runtime's default.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SessionSettings {
    /// The session has a thread pool of its own (the config set a thread
    /// parameter) instead of the process-wide one.
    pub(crate) own_threads: bool,
    pub(crate) intra_op_threads: Option<usize>,
    pub(crate) inter_op_threads: Option<usize>,
    pub(crate) parallel_execution: bool,
    pub(crate) optimization: GraphOptimizationLevel,
    pub(crate) mem_arena: Option<bool>,
    pub(crate) mem_pattern: Option<bool>,
    /// Whether the session's own pool spins between runs (`None`: ONNX
    /// Runtime's default, which spins).
    pub(crate) spinning: Option<bool>,
    /// Session config entries passed through verbatim.
    pub(crate) config_entries: Vec<(String, String)>,
    /// Run config entries, set on every run's options.
    pub(crate) run_config_entries: Vec<(String, String)>,
}

/// Session config keys Triton passes straight to ONNX Runtime.
const SESSION_KEYS: [&str; 1] = ["session.use_device_allocator_for_initializers"];

/// ONNX Runtime's session key for spinning intra-op threads.
const SPINNING_KEY: &str = "session.intra_op.allow_spinning";

/// Run config keys Triton passes straight to ONNX Runtime.
const RUN_KEYS: [&str; 1] = ["memory.enable_memory_arena_shrinkage"];

impl SessionSettings {
    /// Reads the settings from `config`, naming the model in errors.
    pub(crate) fn from_config(config: &ModelConfig) -> Result<Self, BackendError> {
        let reader = ParameterReader::new(config);
        let threads = |key: &str| -> Result<Option<usize>, BackendError> {
            match reader.value(key) {
                None => Ok(None),
                Some(v) => match v.parse::<i64>() {
                    // Triton treats 0 (and below) as "let ONNX Runtime pick".
                    Ok(n) if n <= 0 => Ok(None),
                    Ok(n) => usize::try_from(n)
                        .map(Some)
                        .map_err(|_| reader.bad(key, v, "a thread count")),
                    Err(_) => Err(reader.bad(key, v, "an integer")),
                },
            }
        };
        let flag = |key: &str| -> Result<Option<bool>, BackendError> {
            reader
                .value(key)
                .map(|v| {
                    parse_bool_parameter(v)
                        .ok_or_else(|| reader.bad(key, v, "1/0, true/false, on/off"))
                })
                .transpose()
        };
        let parallel_execution = match reader.value("execution_mode") {
            None | Some("0") => false,
            Some("1") => true,
            Some(v) => {
                return Err(reader.bad("execution_mode", v, "0 (sequential) or 1 (parallel)"));
            }
        };
        let level = config
            .optimization
            .as_ref()
            .and_then(|o| o.graph.as_ref())
            .map_or(0, |g| g.level);
        let entries = |keys: &[&str]| -> Vec<(String, String)> {
            keys.iter()
                .filter_map(|key| reader.value(key).map(|v| (key.to_string(), v.to_string())))
                .collect()
        };
        let spinning = match flag(SPINNING_KEY)? {
            Some(spin) => Some(spin),
            None if reader.value(LATENCY_TARGET_PARAMETER).is_some() => Some(false),
            None => None,
        };
        let own_threads = parallel_execution
            || spinning.is_some()
            || ["intra_op_thread_count", "inter_op_thread_count"]
                .iter()
                .any(|key| reader.value(key).is_some());
        // A pool of its own that only the spinning asked for is as large
        // as the shared one.
        let intra_op_threads = match threads("intra_op_thread_count")? {
            None if spinning.is_some() => Some(crate::runtime::shared_pool_threads()),
            n => n,
        };
        Ok(SessionSettings {
            own_threads,
            intra_op_threads,
            inter_op_threads: threads("inter_op_thread_count")?,
            parallel_execution,
            optimization: optimization_level(level),
            mem_arena: flag("enable_mem_arena")?,
            mem_pattern: flag("enable_mem_pattern")?,
            spinning,
            config_entries: entries(&SESSION_KEYS),
            run_config_entries: entries(&RUN_KEYS),
        })
    }

    /// Whether the instances of a model may share one session (`shared.rs`)
    /// without running on fewer threads than sessions of their own would:
    /// on the process-wide pool, which they share anyway, or on one
    /// thread each, the caller's, when ONNX Runtime makes no pool at all.
    /// A pool of more threads stays each instance's own, as in Triton.
    pub(crate) fn shareable(&self) -> bool {
        !self.own_threads || (self.intra_op_threads == Some(1) && !self.parallel_execution)
    }

    /// Applies the settings to a session builder.
    pub(crate) fn apply(&self, mut builder: SessionBuilder) -> Result<SessionBuilder, ort::Error> {
        builder = builder.with_optimization_level(self.optimization)?;
        if self.own_threads {
            builder = builder.with_independent_thread_pool()?;
        }
        if let Some(n) = self.intra_op_threads {
            builder = builder.with_intra_threads(n)?;
        }
        if let Some(n) = self.inter_op_threads {
            builder = builder.with_inter_threads(n)?;
        }
        if let Some(spin) = self.spinning {
            builder = builder.with_intra_op_spinning(spin)?;
        }
        if self.parallel_execution {
            builder = builder.with_parallel_execution(true)?;
        }
        if let Some(enable) = self.mem_pattern {
            builder = builder.with_memory_pattern(enable)?;
        }
        // ort's CPU provider disables the arena unless told otherwise, so it
        // is registered only when the config decides.
        if let Some(enable) = self.mem_arena {
            let cpu = ort::ep::CPU::default().with_arena_allocator(enable).build();
            builder = builder.with_execution_providers([cpu])?;
        }
        for (key, value) in &self.config_entries {
            builder = builder.with_config_entry(key, value)?;
        }
        Ok(builder)
    }
}

/// Triton's graph levels: -1 basic, 1 basic plus extended, 2 none, anything
/// else (0 by default) all.
fn optimization_level(level: i32) -> GraphOptimizationLevel {
    match level {
        -1 => GraphOptimizationLevel::Level1,
        1 => GraphOptimizationLevel::Level2,
        2 => GraphOptimizationLevel::Disable,
        _ => GraphOptimizationLevel::All,
    }
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::{ModelOptimizationPolicy, model_optimization_policy};

    use super::*;

    fn config(params: &[(&str, &str)]) -> ModelConfig {
        crate::tests::config_with("m", params)
    }

    #[test]
    fn defaults_leave_ort_alone_on_the_shared_pool() {
        let s = SessionSettings::from_config(&config(&[])).unwrap();
        assert!(!s.own_threads);
        assert_eq!(s.intra_op_threads, None);
        assert_eq!(s.inter_op_threads, None);
        assert!(!s.parallel_execution);
        assert_eq!(s.optimization, GraphOptimizationLevel::All);
        assert_eq!(s.mem_arena, None);
        assert_eq!(s.spinning, None);
        assert!(s.config_entries.is_empty());
        assert!(s.run_config_entries.is_empty());
    }

    #[test]
    fn a_latency_target_gets_a_pool_of_its_own_that_does_not_spin() {
        let s = SessionSettings::from_config(&config(&[(LATENCY_TARGET_PARAMETER, "50")])).unwrap();
        assert!(s.own_threads);
        assert_eq!(s.spinning, Some(false));
        let cores = std::thread::available_parallelism().unwrap().get();
        assert_eq!(s.intra_op_threads, Some(cores));

        // The thread count and the spinning can each be set as well.
        let s = SessionSettings::from_config(&config(&[
            (LATENCY_TARGET_PARAMETER, "50"),
            (SPINNING_KEY, "1"),
            ("intra_op_thread_count", "1"),
        ]))
        .unwrap();
        assert_eq!((s.spinning, s.intra_op_threads), (Some(true), Some(1)));

        let s = SessionSettings::from_config(&config(&[(SPINNING_KEY, "off")])).unwrap();
        assert!(s.own_threads);
        assert_eq!(s.spinning, Some(false));
        let err =
            SessionSettings::from_config(&config(&[(SPINNING_KEY, "sometimes")])).unwrap_err();
        assert!(err.to_string().contains(SPINNING_KEY), "{err}");
    }

    #[test]
    fn reads_triton_parameters_and_ignores_unknown_ones() {
        let s = SessionSettings::from_config(&config(&[
            ("intra_op_thread_count", "2"),
            ("inter_op_thread_count", "0"),
            ("execution_mode", "1"),
            ("enable_mem_arena", "false"),
            ("enable_mem_pattern", "ON"),
            ("session.use_device_allocator_for_initializers", "1"),
            ("memory.enable_memory_arena_shrinkage", "cpu:0"),
            ("something_else", "whatever"),
        ]))
        .unwrap();
        assert_eq!(s.intra_op_threads, Some(2));
        assert_eq!(s.inter_op_threads, None);
        assert!(s.parallel_execution);
        assert_eq!(s.mem_arena, Some(false));
        assert_eq!(s.mem_pattern, Some(true));
        assert_eq!(
            s.config_entries,
            vec![(
                "session.use_device_allocator_for_initializers".to_string(),
                "1".to_string()
            )]
        );
        assert_eq!(
            s.run_config_entries,
            vec![(
                "memory.enable_memory_arena_shrinkage".to_string(),
                "cpu:0".to_string()
            )]
        );
    }

    #[test]
    fn a_thread_parameter_gets_a_pool_of_its_own() {
        for (key, value) in [
            ("intra_op_thread_count", "0"),
            ("intra_op_thread_count", "3"),
            ("inter_op_thread_count", "1"),
            ("execution_mode", "1"),
        ] {
            let s = SessionSettings::from_config(&config(&[(key, value)])).unwrap();
            assert!(s.own_threads, "{key}: {value}");
        }
        let s = SessionSettings::from_config(&config(&[("intra_op_thread_count", "0")])).unwrap();
        assert_eq!(
            s.intra_op_threads, None,
            "0 asks for ONNX Runtime's default"
        );
        let s = SessionSettings::from_config(&config(&[("execution_mode", "0")])).unwrap();
        assert!(!s.own_threads, "sequential execution is the default");
    }

    #[test]
    fn instances_share_a_session_unless_each_has_a_pool_of_threads() {
        let shareable = |params: &[(&str, &str)]| {
            SessionSettings::from_config(&config(params))
                .unwrap()
                .shareable()
        };
        assert!(shareable(&[]));
        assert!(shareable(&[("intra_op_thread_count", "1")]));
        assert!(shareable(&[
            ("intra_op_thread_count", "1"),
            (SPINNING_KEY, "0")
        ]));
        assert!(!shareable(&[("intra_op_thread_count", "2")]));
        assert!(!shareable(&[("intra_op_thread_count", "0")]));
        assert!(!shareable(&[
            ("intra_op_thread_count", "1"),
            ("execution_mode", "1")
        ]));
    }

    #[test]
    fn bad_values_name_the_parameter() {
        let err =
            SessionSettings::from_config(&config(&[("intra_op_thread_count", "two")])).unwrap_err();
        assert_eq!(
            err,
            BackendError::Load(
                "model 'm': parameter 'intra_op_thread_count' is 'two', expected an integer".into()
            )
        );
        let err = SessionSettings::from_config(&config(&[("execution_mode", "2")])).unwrap_err();
        assert!(err.to_string().contains("'execution_mode' is '2'"), "{err}");
        let err =
            SessionSettings::from_config(&config(&[("enable_mem_arena", "maybe")])).unwrap_err();
        assert!(err.to_string().contains("'enable_mem_arena'"), "{err}");
    }

    #[test]
    fn graph_level_follows_triton() {
        let mut c = config(&[]);
        for (level, expected) in [
            (-1, GraphOptimizationLevel::Level1),
            (0, GraphOptimizationLevel::All),
            (1, GraphOptimizationLevel::Level2),
            (2, GraphOptimizationLevel::Disable),
        ] {
            c.optimization = Some(ModelOptimizationPolicy {
                graph: Some(model_optimization_policy::Graph { level }),
                ..Default::default()
            });
            assert_eq!(
                SessionSettings::from_config(&c).unwrap().optimization,
                expected
            );
        }
    }
}
