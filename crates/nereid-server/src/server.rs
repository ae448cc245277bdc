//! Starting and stopping the whole server: backends, engine, listeners,
//! frontends, and the initial model load.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::backends::{self, BackendSettings};
use crate::metrics::MetricsOptions;
use anyhow::Context;
use nereid_edge::info;
use nereid_edge::limits::{ConnectionLimit, Limits};
use nereid_edge::logging::LogControl;
use nereid_edge::restricted::Restrictions;
use nereid_edge::tls::{EndpointTls, ServerTls};
use nereid_edge::{Endpoint, Frontend};
use nereid_engine::{Engine, EngineOptions, LoadFailure, ModelControl};
use nereid_kafka::{Kafka, KafkaConfig};
use nereid_openai::{OpenAi, OpenAiEndpoint};
use nereid_trace::{TraceOptions, Tracer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Everything the server needs, validated, before a port is bound.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub engine: EngineOptions,
    pub model_control: ModelControl,
    /// Stop when a model fails to load at startup (`--exit-on-error`).
    pub exit_on_error: bool,
    /// `None` turns the endpoint off.
    pub http: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
    pub metrics: Option<SocketAddr>,
    /// What the metrics endpoint reports.
    pub metrics_options: MetricsOptions,
    /// How long in-flight requests may take to finish at shutdown.
    pub exit_timeout: Duration,
    pub onnxruntime_library: Option<PathBuf>,
    /// The folder of TensorFlow's C API (`libtensorflow_cc.so.2`); `None`:
    /// the loader's path.
    pub tensorflow_library_dir: Option<PathBuf>,
    /// The interpreter Python models' workers run on.
    pub python: PathBuf,
    /// The log settings `/v2/logging` and `LogSettings` read and change.
    pub logging: LogControl,
    /// Request tracing as the `--trace-config` flags ask for it.
    pub trace: TraceOptions,
    /// What one client may take (sizes, time, streams, connections).
    pub limits: Limits,
    /// API groups that need a header (`--http-restricted-api`,
    /// `--grpc-restricted-protocol`).
    pub restricted: RestrictedApis,
    /// TLS on the HTTP and gRPC endpoints.
    pub tls: EndpointTls,
    /// The OpenAI-compatible endpoint; `None` turns it off.
    pub openai: Option<OpenAiEndpoint>,
    /// Where routed requests and shadow comparisons are logged.
    pub route_log: Option<PathBuf>,
    /// The Kafka routes (`--kafka-config`); `None` turns Kafka off.
    pub kafka: Option<KafkaConfig>,
}

/// The restricted API groups of each endpoint.
#[derive(Debug, Clone, Default)]
pub struct RestrictedApis {
    pub http: Restrictions,
    pub grpc: Restrictions,
}

/// A started server; drop it or call [`RunningServer::shutdown`] to stop.
#[derive(Debug)]
pub struct RunningServer {
    engine: Engine,
    tracer: Tracer,
    /// Open connections of the HTTP and gRPC endpoints.
    connections: [ConnectionLimit; 2],
    http_addr: Option<SocketAddr>,
    grpc_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    openai_addr: Option<SocketAddr>,
    exit_timeout: Duration,
    stop: watch::Sender<bool>,
    frontends: Vec<JoinHandle<anyhow::Result<()>>>,
    loading: Option<JoinHandle<Vec<LoadFailure>>>,
    exit_on_error: bool,
    /// The Kafka frontend, when configured; drained first at shutdown.
    kafka: Option<Kafka>,
}

/// Binds every endpoint, starts serving and begins loading the models in
/// the background: the server is live at once and ready when they loaded.
pub async fn start(config: ServerConfig) -> anyhow::Result<RunningServer> {
    tracing::info!(
        "Nereid {} starting (it answers as Triton Inference Server 2.51: server name '{}')",
        info::SERVER_VERSION,
        info::SERVER_NAME
    );
    let engine = engine(&config).await?;
    let tracer = Tracer::new(config.trace.clone())?;
    let connections = [
        ConnectionLimit::new(config.limits.http_max_connections),
        ConnectionLimit::new(config.limits.grpc_max_connections),
    ];
    // Before the metrics endpoint, which reports it; its consumer waits
    // for the routes' models, so the background load below is no race.
    let kafka = match config.kafka.clone() {
        Some(kafka) => Some(
            Kafka::start(kafka, engine.clone(), config.exit_timeout)
                .context("cannot start the Kafka frontend")?,
        ),
        None => None,
    };
    let (stop, stopped) = watch::channel(false);
    let mut serving = Serving {
        config: &config,
        engine: &engine,
        tracer: &tracer,
        stopped,
        frontends: Vec::new(),
    };
    let http_addr = serving.http(&connections[0]).await?;
    let grpc_addr = serving.grpc(&connections[1]).await?;
    let metrics_addr = serving.metrics(kafka.as_ref()).await?;
    let openai_addr = serving.openai().await?;
    let frontends = serving.frontends;
    Ok(RunningServer {
        loading: Some(load_in_background(&engine)),
        engine,
        tracer,
        connections,
        http_addr,
        grpc_addr,
        metrics_addr,
        openai_addr,
        exit_timeout: config.exit_timeout,
        stop,
        frontends,
        exit_on_error: config.exit_on_error,
        kafka,
    })
}

/// The engine with its backends, route log and response cache. Before a
/// port is bound: without its Redis, the server does not start (as
/// tritonserver); once started, a Redis that goes away is a miss.
async fn engine(config: &ServerConfig) -> anyhow::Result<Engine> {
    let engine = backends::engine(
        config.engine.clone(),
        config.model_control.clone(),
        &BackendSettings {
            onnxruntime_library: config.onnxruntime_library.clone(),
            tensorflow_library_dir: config.tensorflow_library_dir.clone(),
            python: config.python.clone(),
        },
    );
    if let Some(path) = &config.route_log {
        engine.set_route_observer(Arc::new(crate::route_log::RouteLog::open(path)?));
    }
    engine
        .connect_cache()
        .await
        .context("cannot use the response cache")?;
    Ok(engine)
}

/// Loads the repository's models in the background.
fn load_in_background(engine: &Engine) -> JoinHandle<Vec<LoadFailure>> {
    let loader = engine.clone();
    tokio::task::spawn_blocking(move || match loader.load_all() {
        Ok(failures) => failures,
        Err(e) => {
            tracing::error!(error = %e, "model repository could not be loaded");
            vec![LoadFailure {
                model: String::new(),
                reason: e.to_string(),
            }]
        }
    })
}

/// Starts the endpoints the config asks for, one by one; each answers
/// the address it bound, `None` when it is off.
struct Serving<'a> {
    config: &'a ServerConfig,
    engine: &'a Engine,
    tracer: &'a Tracer,
    stopped: watch::Receiver<bool>,
    frontends: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Serving<'_> {
    fn frontend(&self, restrictions: &Restrictions) -> Frontend {
        Frontend {
            engine: self.engine.clone(),
            log: self.config.logging.clone(),
            tracer: self.tracer.clone(),
            limits: self.config.limits.clone(),
            restrictions: restrictions.clone(),
        }
    }

    async fn http(&mut self, connections: &ConnectionLimit) -> anyhow::Result<Option<SocketAddr>> {
        let Some(addr) = self.config.http else {
            return Ok(None);
        };
        let tls = self.config.tls.http.clone();
        let listener = bind(addr, HTTP, tls.as_ref()).await?;
        let local = listener.local_addr()?;
        let endpoint = Endpoint {
            listener,
            connections: connections.clone(),
            tls,
        };
        let frontend = self.frontend(&self.config.restricted.http);
        let stop = signal(&self.stopped);
        self.frontends
            .push(tokio::spawn(nereid_http::serve(frontend, endpoint, stop)));
        Ok(Some(local))
    }

    async fn grpc(&mut self, connections: &ConnectionLimit) -> anyhow::Result<Option<SocketAddr>> {
        let Some(addr) = self.config.grpc else {
            return Ok(None);
        };
        let tls = self.config.tls.grpc.clone();
        let listener = bind(addr, GRPC, tls.as_ref()).await?;
        let local = listener.local_addr()?;
        let endpoint = Endpoint {
            listener,
            connections: connections.clone(),
            tls,
        };
        let frontend = self.frontend(&self.config.restricted.grpc);
        let stop = signal(&self.stopped);
        self.frontends
            .push(tokio::spawn(nereid_grpc::serve(frontend, endpoint, stop)));
        Ok(Some(local))
    }

    async fn metrics(&mut self, kafka: Option<&Kafka>) -> anyhow::Result<Option<SocketAddr>> {
        let Some(addr) = self.config.metrics else {
            return Ok(None);
        };
        let listener = bind(addr, METRICS, None).await?;
        let local = listener.local_addr()?;
        self.frontends.push(tokio::spawn(crate::metrics::serve(
            self.engine.clone(),
            kafka.map(Kafka::status),
            self.config.metrics_options.clone(),
            listener,
            signal(&self.stopped),
        )));
        Ok(Some(local))
    }

    async fn openai(&mut self) -> anyhow::Result<Option<SocketAddr>> {
        let Some(openai) = &self.config.openai else {
            return Ok(None);
        };
        let listener = bind(openai.address, OPENAI, None).await?;
        let local = listener.local_addr()?;
        self.frontends.push(tokio::spawn(nereid_openai::serve(
            OpenAi::new(self.engine.clone()),
            openai.api_key.clone(),
            self.config.limits.http_max_input_bytes,
            listener,
            signal(&self.stopped),
        )));
        Ok(Some(local))
    }
}

/// An endpoint, named as the log and its errors name it, with the flags
/// that set its address: a port in use must say which flag moves it.
struct Listener {
    what: &'static str,
    flags: &'static str,
}

const HTTP: Listener = Listener {
    what: "HTTP",
    flags: "--http-port, --http-address",
};
const GRPC: Listener = Listener {
    what: "gRPC",
    flags: "--grpc-port, --grpc-address",
};
const METRICS: Listener = Listener {
    what: "metrics",
    flags: "--metrics-port, --metrics-address",
};
const OPENAI: Listener = Listener {
    what: "OpenAI",
    flags: "--openai-port, --openai-address",
};

async fn bind(
    addr: SocketAddr,
    endpoint: Listener,
    tls: Option<&ServerTls>,
) -> anyhow::Result<TcpListener> {
    let Listener { what, flags } = endpoint;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot bind the {what} endpoint to {addr} (set by {flags})"))?;
    let security = match tls {
        None => "",
        Some(tls) if tls.is_mutual() => " (mutual TLS)",
        Some(_) => " (TLS)",
    };
    tracing::info!(
        "started {what} endpoint at {}{security}",
        listener.local_addr()?
    );
    Ok(listener)
}

/// A future that completes when the server is told to stop.
fn signal(stopped: &watch::Receiver<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut stopped = stopped.clone();
    async move {
        let _ = stopped.wait_for(|&s| s).await;
    }
}

impl RunningServer {
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_addr
    }

    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    pub fn openai_addr(&self) -> Option<SocketAddr> {
        self.openai_addr
    }

    /// Waits until the initial model load has finished (each model ready
    /// or failed). With `exit_on_error`, a failed model is an error, as
    /// tritonserver's "failed to load all models"; without, it is logged
    /// and the others serve.
    pub async fn wait_loaded(&mut self) -> anyhow::Result<()> {
        let Some(loading) = self.loading.take() else {
            return Ok(());
        };
        let failures = loading.await.context("the model loading task panicked")?;
        if failures.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = failures
            .iter()
            .map(|f| {
                // A reason may end with a version's "...;\n": the list
                // puts its own "; " between models.
                let reason = f.reason.trim_end().trim_end_matches(';');
                match f.model.as_str() {
                    "" => reason.to_owned(),
                    model => format!("'{model}': {reason}"),
                }
            })
            .collect();
        if self.exit_on_error {
            anyhow::bail!("failed to load all models: {}", list.join("; "));
        }
        tracing::error!(
            "failed to load all models (--exit-on-error=false: serving the others): {}",
            list.join("; ")
        );
        Ok(())
    }

    /// Drains, then stops: the Kafka frontend, if any, stops taking records
    /// and finishes and commits those it took; the server turns not ready at once and answers
    /// new requests UNAVAILABLE (503) while the requests it accepted
    /// finish, within the exit timeout; then the endpoints close (open
    /// streams end once their answers are sent) and the trace file is
    /// written.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + self.exit_timeout;
        if let Some(kafka) = self.kafka.take() {
            // Kafka first, while the engine still takes requests: the
            // records already taken finish and are committed (their
            // readiness turned false at once), within the exit timeout.
            kafka.shutdown().await;
        }
        self.engine.begin_shutdown();
        let accepted = self.engine.in_flight();
        let [http, grpc] = self.connections.each_ref().map(ConnectionLimit::open);
        tracing::info!(
            in_flight = accepted,
            http_connections = http,
            grpc_connections = grpc,
            "draining: not ready, new requests are refused, waiting for {accepted} accepted requests ({http} HTTP and {grpc} gRPC connections open)"
        );
        while self.engine.in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let left = self.engine.in_flight();
        if left > 0 {
            tracing::warn!(in_flight = left, timeout = ?self.exit_timeout, "{left} requests did not finish before the exit timeout");
        } else {
            tracing::info!(
                "every accepted request was answered ({accepted} at the start of the drain)"
            );
        }
        let _ = self.stop.send(true);
        let frontends = std::mem::take(&mut self.frontends);
        let all = futures::future::join_all(frontends);
        let finished = tokio::time::timeout_at(deadline, all).await;
        self.tracer.close();
        match finished {
            Ok(results) => {
                for result in results {
                    result.context("a frontend task panicked")??;
                }
                Ok(())
            }
            Err(_) => {
                let [http, grpc] = self.connections.each_ref().map(ConnectionLimit::open);
                tracing::warn!(timeout = ?self.exit_timeout, "{http} HTTP and {grpc} gRPC connections were still open at the exit timeout");
                Ok(())
            }
        }
    }
}
