//! The Redis cache (`--cache-config redis,host=...,port=...`): answers in
//! a Redis server that replicas share, one string value per answer
//! (`encoding.rs`), read with GET and written with SET on a pool of
//! multiplexed connections.
//!
//! Redis is a help, never a dependency of a request. Every command has a
//! time limit (`socket_timeout`); a command that fails is a miss (or an
//! answer not stored), counted in [`RedisHealth`] and logged at most every
//! [`LOG_EVERY`]. A failure of the connection itself drops the pool, and
//! until a background task has connected again (retrying with back-off
//! up to [`MAX_RETRY`]) requests skip Redis at once: a dead Redis costs a
//! request at most one command's time limit, and most nothing.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use nereid_core::InferResponse;
use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncCommands, AsyncConnectionConfig, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo,
    RedisConnectionInfo, RedisError, TlsCertificates,
};
use tokio::runtime::Handle;

use super::encoding::{decode_response, encode_response, redis_key};
use super::{CacheKey, CacheUsage, ScopeStore, Store};

/// The first wait before connecting again after a failure.
const FIRST_RETRY: Duration = Duration::from_millis(100);
/// The longest wait between two tries to connect.
const MAX_RETRY: Duration = Duration::from_secs(1);
/// At most one log line about failures in this time.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// How to reach the Redis server: tritonserver's redis cache settings.
#[derive(Clone, PartialEq)]
pub struct RedisOptions {
    pub host: String,
    pub port: u16,
    /// ACL user; Redis's `default` when unset.
    pub user: Option<String>,
    pub password: Option<String>,
    pub db: i64,
    /// How long connecting may take; `None`: no limit.
    pub connect_timeout: Option<Duration>,
    /// How long one command may take; `None`: no limit.
    pub socket_timeout: Option<Duration>,
    /// How many connections commands are spread over (each carries many
    /// commands at once).
    pub pool_size: usize,
    pub tls: Option<RedisTls>,
}

impl RedisOptions {
    /// Default limits: tritonserver's are none ("0 means wait forever"),
    /// which would let a Redis that stops answering hold requests.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    pub const DEFAULT_SOCKET_TIMEOUT: Duration = Duration::from_millis(100);

    /// `host:port`, for messages.
    pub fn address(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }
}

impl fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisOptions")
            .field("address", &self.address())
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("db", &self.db)
            .field("connect_timeout", &self.connect_timeout)
            .field("socket_timeout", &self.socket_timeout)
            .field("pool_size", &self.pool_size)
            .field("tls", &self.tls)
            .finish()
    }
}

/// TLS to the Redis server: PEM files, as tritonserver names them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RedisTls {
    /// The client's certificate and key, for mutual TLS.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Certificates to trust instead of the system's: a file, and every
    /// file in a folder.
    pub cacert: Option<PathBuf>,
    pub cacert_dir: Option<PathBuf>,
}

/// Why the Redis server could not be used.
#[derive(Debug, thiserror::Error)]
#[error("failed to connect to Redis ({address}): {reason}")]
pub struct ConnectError {
    pub address: String,
    pub reason: String,
}

/// The Redis cache's state, for the metrics endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RedisHealth {
    /// Whether commands go to Redis now.
    pub connected: bool,
    /// Lookups that failed (and were misses).
    pub get_errors: u64,
    /// Answers that could not be stored.
    pub set_errors: u64,
    /// Tries to connect that failed.
    pub connect_errors: u64,
}

/// The Redis cache. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct RedisCache {
    shared: Arc<Shared>,
}

impl fmt::Debug for RedisCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCache")
            .field("options", &self.shared.options)
            .field("health", &self.health())
            .finish()
    }
}

struct Shared {
    options: RedisOptions,
    link: Mutex<Link>,
    get_errors: AtomicU64,
    set_errors: AtomicU64,
    connect_errors: AtomicU64,
    complaints: Mutex<Complaints>,
    /// Where reconnecting runs: the runtime `connect` was called on, which
    /// lives as long as the server (a connection thread's may stop first).
    runtime: Mutex<Option<Handle>>,
}

/// The pool, when connected.
#[derive(Default)]
struct Link {
    connections: Vec<MultiplexedConnection>,
    next: usize,
    reconnecting: bool,
}

/// What the last log line said, and what was left unsaid since.
#[derive(Default)]
struct Complaints {
    last: Option<Instant>,
    unsaid: u64,
}

/// Which command failed.
#[derive(Debug, Clone, Copy)]
enum Operation {
    Get,
    Set,
    Connect,
}

impl Store for RedisCache {
    fn connect(&self) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(RedisCache::connect(self))
    }

    fn usage(&self) -> CacheUsage {
        CacheUsage::Redis(self.health())
    }

    /// Keys name the model and version, which every replica shares.
    fn scope(&self, model: &str, version: i64) -> Box<dyn ScopeStore> {
        Box::new(RedisScope {
            cache: self.clone(),
            model: model.to_string(),
            version,
        })
    }
}

/// One loaded version's keys in Redis.
#[derive(Debug)]
struct RedisScope {
    cache: RedisCache,
    model: String,
    version: i64,
}

impl ScopeStore for RedisScope {
    fn id(&self) -> u64 {
        0
    }

    fn get<'a>(&'a self, key: &'a CacheKey) -> BoxFuture<'a, Option<InferResponse>> {
        Box::pin(async move {
            let key = redis_key(&self.model, self.version, key);
            self.cache.get(&key).await
        })
    }

    fn insert<'a>(&'a self, key: CacheKey, response: &'a InferResponse) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let key = redis_key(&self.model, self.version, &key);
            self.cache.set(key, encode_response(response)).await;
        })
    }
}

impl RedisCache {
    /// A cache that connects when [`RedisCache::connect`] is called, or in
    /// the background on first use.
    pub fn new(options: RedisOptions) -> RedisCache {
        RedisCache {
            shared: Arc::new(Shared {
                options,
                link: Mutex::new(Link::default()),
                get_errors: AtomicU64::new(0),
                set_errors: AtomicU64::new(0),
                connect_errors: AtomicU64::new(0),
                complaints: Mutex::new(Complaints::default()),
                runtime: Mutex::new(Handle::try_current().ok()),
            }),
        }
    }

    /// Connects the pool and checks that Redis answers a PING.
    pub async fn connect(&self) -> Result<(), ConnectError> {
        *self.shared.runtime.lock() = Some(Handle::current());
        let connections = open(&self.shared.options).await?;
        let mut link = self.shared.link.lock();
        link.connections = connections;
        tracing::info!(
            redis = %self.shared.options.address(),
            "the response cache is in Redis"
        );
        Ok(())
    }

    pub fn health(&self) -> RedisHealth {
        let shared = &self.shared;
        RedisHealth {
            connected: !shared.link.lock().connections.is_empty(),
            get_errors: shared.get_errors.load(Ordering::Relaxed),
            set_errors: shared.set_errors.load(Ordering::Relaxed),
            connect_errors: shared.connect_errors.load(Ordering::Relaxed),
        }
    }

    /// The answer under `key`; `None` for a miss and for any failure.
    pub(super) async fn get(&self, key: &str) -> Option<InferResponse> {
        let mut connection = self.connection()?;
        match connection.get::<_, Option<Bytes>>(key).await {
            Ok(value) => {
                let response = decode_response(value?);
                if response.is_none() {
                    self.failed(Operation::Get, &"a stored value that does not decode");
                }
                response
            }
            Err(e) => {
                self.failed_command(Operation::Get, &e);
                None
            }
        }
    }

    /// Stores `value` under `key`, or counts why not.
    pub(super) async fn set(&self, key: String, value: Vec<u8>) {
        let Some(mut connection) = self.connection() else {
            return;
        };
        if let Err(e) = connection.set::<_, _, ()>(key, value).await {
            self.failed_command(Operation::Set, &e);
        }
    }

    /// A connection of the pool, in turn; `None` while there is none (a
    /// reconnect is then under way).
    fn connection(&self) -> Option<MultiplexedConnection> {
        let mut link = self.shared.link.lock();
        if link.connections.is_empty() {
            drop(link);
            self.reconnect();
            return None;
        }
        link.next = link.next.wrapping_add(1);
        Some(link.connections[link.next % link.connections.len()].clone())
    }

    /// A command failed: when the connection did, it is dropped and made
    /// again in the background.
    fn failed_command(&self, operation: Operation, error: &RedisError) {
        self.failed(operation, error);
        let connection_failed = error.is_io_error()
            || error.is_timeout()
            || error.is_connection_dropped()
            || error.is_connection_refusal();
        if connection_failed {
            self.shared.link.lock().connections.clear();
            self.reconnect();
        }
    }

    fn failed(&self, operation: Operation, error: &dyn fmt::Display) {
        self.shared.failed(operation, error);
    }

    /// Starts the background task that connects again, unless it runs.
    fn reconnect(&self) {
        let mut link = self.shared.link.lock();
        if link.reconnecting || !link.connections.is_empty() {
            return;
        }
        let runtime = self.shared.runtime.lock().clone();
        let Some(runtime) = runtime.or_else(|| Handle::try_current().ok()) else {
            return;
        };
        link.reconnecting = true;
        runtime.spawn(reconnect(Arc::downgrade(&self.shared)));
    }
}

impl Shared {
    fn failed(&self, operation: Operation, error: &dyn fmt::Display) {
        let counter = match operation {
            Operation::Get => &self.get_errors,
            Operation::Set => &self.set_errors,
            Operation::Connect => &self.connect_errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let mut complaints = self.complaints.lock();
        let now = Instant::now();
        if complaints
            .last
            .is_some_and(|last| now.duration_since(last) < LOG_EVERY)
        {
            complaints.unsaid += 1;
            return;
        }
        complaints.last = Some(now);
        let unsaid = std::mem::take(&mut complaints.unsaid);
        drop(complaints);
        tracing::warn!(
            redis = %self.options.address(),
            ?operation,
            error = %error,
            failures_since_last_report = unsaid,
            "the Redis response cache failed: requests are answered without it until it works again"
        );
    }
}

/// Connects again, waiting longer after each failure, until it succeeds
/// or the cache is gone.
async fn reconnect(shared: Weak<Shared>) {
    let mut wait = FIRST_RETRY;
    loop {
        tokio::time::sleep(wait).await;
        let Some(options) = shared.upgrade().map(|s| s.options.clone()) else {
            return;
        };
        let opened = open(&options).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match opened {
            Ok(connections) => {
                let mut link = shared.link.lock();
                link.connections = connections;
                link.reconnecting = false;
                tracing::info!(redis = %options.address(), "the Redis response cache works again");
                return;
            }
            Err(e) => shared.failed(Operation::Connect, &e.reason),
        }
        wait = (wait * 2).min(MAX_RETRY);
    }
}

/// The pool's connections, each checked with a PING.
async fn open(options: &RedisOptions) -> Result<Vec<MultiplexedConnection>, ConnectError> {
    let error = |reason: String| ConnectError {
        address: options.address(),
        reason,
    };
    let client = client(options).map_err(error)?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(options.connect_timeout)
        .set_response_timeout(options.socket_timeout);
    let mut connections = Vec::with_capacity(options.pool_size);
    for _ in 0..options.pool_size.max(1) {
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| error(e.to_string()))?;
        redis::cmd("PING")
            .query_async::<()>(&mut connection)
            .await
            .map_err(|e| error(e.to_string()))?;
        connections.push(connection);
    }
    Ok(connections)
}

fn client(options: &RedisOptions) -> Result<redis::Client, String> {
    let mut settings = RedisConnectionInfo::default().set_db(options.db);
    if let Some(user) = &options.user {
        settings = settings.set_username(user);
    }
    if let Some(password) = &options.password {
        settings = settings.set_password(password);
    }
    let host = options.host.clone();
    let port = options.port;
    let Some(tls) = &options.tls else {
        let info = ConnectionAddr::Tcp(host, port)
            .into_connection_info()
            .map_err(|e| e.to_string())?;
        return redis::Client::open(info.set_redis_settings(settings)).map_err(|e| e.to_string());
    };
    // redis picks rustls's process-wide provider; make sure there is one.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let info = ConnectionAddr::TcpTls {
        host,
        port,
        insecure: false,
        tls_params: None,
    }
    .into_connection_info()
    .map_err(|e| e.to_string())?;
    redis::Client::build_with_tls(info.set_redis_settings(settings), certificates(tls)?)
        .map_err(|e| e.to_string())
}

/// The PEM files `tls` names, read.
fn certificates(tls: &RedisTls) -> Result<TlsCertificates, String> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let client_tls = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: read(key)?,
        }),
        (None, None) => None,
        _ => return Err("TLS needs both 'cert' and 'key', or neither".into()),
    };
    let mut roots = Vec::new();
    if let Some(cacert) = &tls.cacert {
        roots.extend(read(cacert)?);
        roots.push(b'\n');
    }
    if let Some(dir) = &tls.cacert_dir {
        let entries =
            std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for file in files {
            roots.extend(read(&file)?);
            roots.push(b'\n');
        }
    }
    Ok(TlsCertificates {
        client_tls,
        root_cert: (!roots.is_empty()).then_some(roots),
    })
}

#[cfg(test)]
mod tests;
