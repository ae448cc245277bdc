//! Command-line flags, named as `tritonserver` names them. A flag Nereid
//! does not know, tritonserver's or not, is an error naming the flag.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{BoolishValueParser, TypedValueParser};
use clap::{Parser, ValueEnum};
use nereid_engine::{ControlMode, EngineOptions, ModelControl, Readiness};

use crate::server::ServerConfig;
use nereid_edge::logging::{LogFormat, LogSettings};

mod batch;
mod cache;
mod devices;
mod limits;
mod openai;
mod repositories;
mod residency;
mod restricted;
mod settings;
mod tls;
mod trace;

pub use batch::{BatchArgs, BatchConfig};
use cache::response_cache;
use devices::DeviceFlags;
use limits::LimitFlags;
use openai::OpenAiFlags;
use repositories::{Repositories, RepositoryArg, open_repositories, parse_repository};
use residency::ResidencyFlags;
use restricted::RestrictedFlags;
use settings::{metrics_options, python_path};
use tls::TlsFlags;
use trace::{OldTraceFlags, trace_options};

/// Nereid: a Triton-compatible inference server.
#[derive(Debug, Parser)]
#[command(
    name = "nereid",
    version,
    about,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Args {
    /// Model repository: a folder, or a cloud repository as tritonserver
    /// takes them (`s3://bucket/path`, `s3://host:port/bucket/path`,
    /// `gs://bucket/path`, `as://account/container/path`), copied to a
    /// local folder before its models load; repeat the flag for several.
    #[arg(
        long = "model-repository",
        alias = "model-store",
        required = true,
        value_name = "PATH",
        value_parser = parse_repository
    )]
    pub model_repository: Vec<RepositoryArg>,

    /// Port of the HTTP/REST endpoint.
    #[arg(long, default_value_t = 8000)]
    pub http_port: u16,

    /// Address the HTTP/REST endpoint binds.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED))]
    pub http_address: IpAddr,

    /// Serve HTTP/REST.
    #[arg(long, default_value = "true", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub allow_http: bool,

    /// Port of the gRPC endpoint.
    #[arg(long, default_value_t = 8001)]
    pub grpc_port: u16,

    /// Address the gRPC endpoint binds.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED))]
    pub grpc_address: IpAddr,

    /// Serve gRPC.
    #[arg(long, default_value = "true", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub allow_grpc: bool,

    /// Port of the Prometheus metrics endpoint.
    #[arg(long, default_value_t = 8002)]
    pub metrics_port: u16,

    /// Address the metrics endpoint binds.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED))]
    pub metrics_address: IpAddr,

    /// Serve Prometheus metrics.
    #[arg(long, default_value = "true", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub allow_metrics: bool,

    /// Report the nv_cpu_* metrics.
    #[arg(long, default_value = "true", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub allow_cpu_metrics: bool,

    /// Milliseconds between refreshes of the metrics that are read per
    /// interval (CPU).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub metrics_interval_ms: u64,

    /// A metrics setting, `<key>=<value>`; repeat for several:
    /// `counter_latencies=<bool>` (the *_duration_us counters, default
    /// true), `summary_latencies=<bool>` (the *_summary_us summaries,
    /// default false), `summary_quantiles=<q>:<error>,...`,
    /// `histogram_latencies=<bool>` (the *_histogram_ms histograms, default
    /// false), `histogram_buckets=<ms>,...` (their bucket bounds).
    #[arg(long = "metrics-config", value_name = "KEY=VALUE")]
    pub metrics_config: Vec<String>,

    /// Require a complete config.pbtxt; when false, missing fields are
    /// filled in from the model file.
    #[arg(long, default_value = "false", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub strict_model_config: bool,

    /// What readiness asks of the models: true (Triton's: every model is
    /// ready), false (the server is up), or startup (Nereid's: ready once
    /// every model has a version serving; later failed loads do not count).
    #[arg(long, default_value = "true", value_parser = readiness, num_args = 1)]
    pub strict_readiness: Readiness,

    /// When models load and unload: none (all at startup, never again),
    /// poll (follow the repository folders), explicit (startup models,
    /// then the repository API), on_demand (Nereid's: explicit, and a
    /// request for a model not loaded loads it).
    #[arg(long, value_enum, ignore_case = true, default_value_t = ModelControlMode::None)]
    pub model_control_mode: ModelControlMode,

    /// A model to load at startup in explicit mode; repeat for several, `*`
    /// for every model.
    #[arg(long = "load-model", value_name = "NAME")]
    pub load_model: Vec<String>,

    /// Poll mode: seconds between full rescans of the repository (file
    /// events are followed at once); 0 stops following it.
    #[arg(long, default_value_t = 15)]
    pub repository_poll_secs: u64,

    /// Exit when a model fails to load at startup; when false, serve the
    /// models that loaded.
    #[arg(long, default_value = "true", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub exit_on_error: bool,

    /// Verbose logging level; 0 is off, 1 adds Nereid's DEBUG lines, 2 and
    /// more add its TRACE lines and every library's DEBUG lines.
    #[arg(long, default_value_t = 0)]
    pub log_verbose: u32,

    /// Write INFO lines.
    #[arg(long, default_value = "true", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub log_info: bool,

    /// Write WARNING lines.
    #[arg(long, default_value = "true", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub log_warning: bool,

    /// Write ERROR lines.
    #[arg(long, default_value = "true", value_parser = BoolishValueParser::new(), num_args = 1)]
    pub log_error: bool,

    /// Layout of log lines: default (`I1203 18:17:07.927805 ...`) or
    /// ISO8601 (`2026-12-03T18:17:07Z I ...`).
    #[arg(long, value_enum, default_value_t = LogFormat::Default)]
    pub log_format: LogFormat,

    /// Append log lines to this file instead of standard output.
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,

    /// Seconds to let in-flight requests finish at shutdown.
    #[arg(long, default_value_t = 30)]
    pub exit_timeout_secs: u64,

    /// Append one JSON line per request to a model with traffic settings
    /// (version, label, how it was routed, latency; sampled tensors) and
    /// per shadow comparison to this file (Nereid; docs/traffic.md).
    #[arg(long, value_name = "PATH")]
    pub route_log: Option<PathBuf>,

    /// Path of the ONNX Runtime shared library (libonnxruntime.so).
    #[arg(long, env = "ORT_DYLIB_PATH", value_name = "PATH")]
    pub onnxruntime_library: Option<PathBuf>,

    /// The folder holding TensorFlow's C API (libtensorflow_cc.so.2 and
    /// libtensorflow_framework.so.2), for SavedModels; scripts/setup-tensorflow.sh
    /// installs it and prints the folder. Default: the loader's path.
    #[arg(long, env = "TENSORFLOW_DIR", value_name = "DIR")]
    pub tensorflow_library_dir: Option<PathBuf>,

    /// A backend setting, `<backend>,<key>=<value>`, as tritonserver takes
    /// them; repeat for several. Nereid reads `python,python-path=PATH`:
    /// the interpreter (with numpy) that runs Python models' workers
    /// (default: `python3` on the PATH). Other settings are logged and
    /// ignored.
    #[arg(long = "backend-config", value_name = "BACKEND,KEY=VALUE")]
    pub backend_config: Vec<String>,

    /// A response cache setting, `<cache>,<key>=<value>`, as tritonserver
    /// takes them; repeat for several. For the models whose config has
    /// `response_cache { enable: true }`: `local,size=BYTES` makes a cache
    /// of that many bytes in the server; `redis,host=HOST` and
    /// `redis,port=PORT` keep answers in a Redis server that replicas
    /// share (also `user`, `password`, `db`, `connect_timeout`,
    /// `socket_timeout` (ms), `pool_size`, `tls_enabled`, `cert`, `key`,
    /// `cacert`, `cacert_dir`; docs/compatibility.md).
    #[arg(long = "cache-config", value_name = "CACHE,KEY=VALUE")]
    pub cache_config: Vec<String>,

    /// The local response cache's size in bytes (tritonserver's older
    /// spelling of `--cache-config local,size=BYTES`).
    #[arg(long, value_name = "BYTES")]
    pub response_cache_byte_size: Option<u64>,

    /// A trace setting, as tritonserver takes them; repeat for several:
    /// `level=OFF|TIMESTAMPS|TENSORS` (repeat to add), `rate=N` (every
    /// N-th request), `count=N` (-1: no limit), `mode=triton|opentelemetry`,
    /// `triton,file=PATH`, `triton,log-frequency=N`, `opentelemetry,url=URL`,
    /// `opentelemetry,resource=KEY=VALUE`, `opentelemetry,bsp_max_queue_size=N`,
    /// `opentelemetry,bsp_schedule_delay=MS`,
    /// `opentelemetry,bsp_max_export_batch_size=N`.
    #[arg(long = "trace-config", value_name = "[MODE,]KEY=VALUE")]
    pub trace_config: Vec<String>,

    #[command(flatten)]
    pub deprecated_trace: OldTraceFlags,

    #[command(flatten)]
    pub devices: DeviceFlags,

    #[command(flatten)]
    pub limits: LimitFlags,

    #[command(flatten)]
    pub residency: ResidencyFlags,

    #[command(flatten)]
    pub restricted: RestrictedFlags,

    #[command(flatten)]
    pub tls: TlsFlags,

    #[command(flatten)]
    pub openai: OpenAiFlags,

    /// A Kafka route file (TOML; docs/streaming.md): the brokers, the
    /// consumer group, and routes from input topics through models to
    /// output topics, delivered at least once. Off unless set.
    #[arg(long, value_name = "PATH")]
    pub kafka_config: Option<PathBuf>,

    /// Without a subcommand, nereid serves.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What nereid does other than serve.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    Batch(BatchArgs),
}

/// `--model-control-mode` values, as tritonserver spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModelControlMode {
    None,
    Poll,
    Explicit,
    #[value(name = "on_demand", alias = "on-demand")]
    OnDemand,
}

impl From<ModelControlMode> for ControlMode {
    fn from(mode: ModelControlMode) -> Self {
        match mode {
            ModelControlMode::None => ControlMode::None,
            ModelControlMode::Poll => ControlMode::Poll,
            ModelControlMode::Explicit => ControlMode::Explicit,
            ModelControlMode::OnDemand => ControlMode::OnDemand,
        }
    }
}

impl Args {
    /// The log settings the `--log-*` flags ask for.
    pub fn log_settings(&self) -> LogSettings {
        LogSettings {
            log_file: self
                .log_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            log_info: self.log_info,
            log_warning: self.log_warning,
            log_error: self.log_error,
            log_verbose_level: self.log_verbose,
            log_format: self.log_format,
        }
    }

    /// Checks the flags and turns them into a server config.
    pub fn into_config(self) -> anyhow::Result<ServerConfig> {
        let Repositories {
            roots: repositories,
            mirrors,
        } = open_repositories(self.model_repository)?;
        if !self.allow_http && !self.allow_grpc && self.openai.openai_port.is_none() {
            anyhow::bail!("--allow-http and --allow-grpc are both false: nothing would serve");
        }
        if !self.load_model.is_empty()
            && !matches!(
                self.model_control_mode,
                ModelControlMode::Explicit | ModelControlMode::OnDemand
            )
        {
            // tritonserver's words.
            anyhow::bail!(
                "Use of '--load-model' requires setting '--model-control-mode=explicit' as well."
            );
        }
        Ok(ServerConfig {
            engine: EngineOptions {
                repositories,
                mirrors,
                strict_model_config: self.strict_model_config,
                strict_readiness: self.strict_readiness,
                response_cache: response_cache(
                    &self.cache_config,
                    self.response_cache_byte_size,
                    |name| std::env::var(name).ok(),
                )?,
                devices: self.devices.devices()?,
            },
            model_control: ModelControl {
                mode: self.model_control_mode.into(),
                startup_models: self.load_model,
                poll_interval: Duration::from_secs(self.repository_poll_secs),
                residency: self.residency.options()?,
            },
            exit_on_error: self.exit_on_error,
            http: self
                .allow_http
                .then_some(SocketAddr::new(self.http_address, self.http_port)),
            grpc: self
                .allow_grpc
                .then_some(SocketAddr::new(self.grpc_address, self.grpc_port)),
            metrics: self
                .allow_metrics
                .then_some(SocketAddr::new(self.metrics_address, self.metrics_port)),
            metrics_options: metrics_options(
                &self.metrics_config,
                self.metrics_interval_ms,
                self.allow_cpu_metrics,
                self.devices.allow_gpu_metrics,
            )?,
            exit_timeout: Duration::from_secs(self.exit_timeout_secs),
            onnxruntime_library: self.onnxruntime_library,
            tensorflow_library_dir: self.tensorflow_library_dir,
            python: python_path(&self.backend_config)?,
            logging: Default::default(),
            trace: trace_options(&self.trace_config, &self.deprecated_trace)?,
            limits: self.limits.limits(),
            restricted: self.restricted.restricted_apis()?,
            tls: self.tls.tls(self.allow_http, self.allow_grpc)?,
            openai: self.openai.endpoint(self.http_address)?,
            kafka: self
                .kafka_config
                .as_deref()
                .map(nereid_kafka::KafkaConfig::from_file)
                .transpose()?,
            route_log: self.route_log,
        })
    }
}

/// `--strict-readiness`: Triton's booleans, or `startup`.
fn readiness(value: &str) -> Result<Readiness, String> {
    if value.eq_ignore_ascii_case("startup") {
        return Ok(Readiness::Startup);
    }
    match BoolishValueParser::new().parse_ref(&clap::Command::new("nereid"), None, value.as_ref()) {
        Ok(true) => Ok(Readiness::Strict),
        Ok(false) => Ok(Readiness::Started),
        Err(_) => Err(format!("'{value}' is not one of true, false or startup")),
    }
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
