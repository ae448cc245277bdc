//! The response cache, used by models whose config has
//! `response_cache { enable: true }`. Two kinds, as in Triton's
//! `--cache-config`: `local` keeps answers in this process, bounded by
//! bytes with LRU eviction (`local.rs`); `redis` keeps them in a Redis
//! server that several replicas share (`redis.rs`), under keys every
//! replica computes alike (`encoding.rs`). Both key on everything that
//! decides an answer: the model and version, the inputs, the outputs asked
//! for and the request parameters a model may read.
//!
//! In the local cache each loaded version has a scope of its own, so a
//! reload never answers from the version it replaced, and the scope's
//! entries go when the version is dropped. Redis keys name the model and
//! version instead, which every replica shares; a Redis cache that fails
//! is a miss, never a failed request.
//!
//! The engine holds the cache through the [`Store`] trait; this crate
//! depends on `nereid-core` only: never on the engine, a wire format, a
//! frontend or a backend.

mod encoding;
mod local;
mod redis;

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use nereid_core::exposition::Family;
use nereid_core::{DataType, InferRequest, InferResponse, Parameters};

pub use self::redis::{ConnectError, RedisCache, RedisHealth, RedisOptions, RedisTls};
pub use local::LocalCache;

/// Request parameters that change how an answer travels, not what it is
/// (priority and timeout too, but those are routing facts, not parameters).
const TRANSPORT_PARAMETERS: [&str; 3] = [
    "binary_data_output",
    "triton_enable_empty_final_response",
    "headers",
];

/// Output parameters that change how an output travels, not what it is.
const TRANSPORT_OUTPUT_PARAMETERS: [&str; 1] = ["binary_data"];

/// Which cache the server keeps (`--cache-config`).
#[derive(Debug, Clone, PartialEq)]
pub enum CacheConfig {
    /// `local,size=BYTES`.
    Local { bytes: u64 },
    /// `redis,host=...,port=...`.
    Redis(Box<RedisOptions>),
}

/// Where answers are kept: one implementation per kind of cache (the
/// local one, Redis). The engine sees a cache only through this trait.
pub trait Store: fmt::Debug + Send + Sync {
    /// Makes sure the store can be used (a Redis cache connects and
    /// answers a PING), or says why not.
    fn connect(&self) -> BoxFuture<'_, Result<(), ConnectError>>;

    /// The store's state now, for the metrics endpoint.
    fn usage(&self) -> CacheUsage;

    /// The part of the store for one loaded version of `model`.
    fn scope(&self, model: &str, version: i64) -> Box<dyn ScopeStore>;
}

/// One loaded version's part of a [`Store`].
pub trait ScopeStore: fmt::Debug + Send + Sync {
    /// The scope's number in a key: a local scope's own, 0 where keys
    /// name the model and version instead.
    fn id(&self) -> u64;

    /// The answer stored under `key`, if any; a store that cannot be read
    /// has none.
    fn get<'a>(&'a self, key: &'a CacheKey) -> BoxFuture<'a, Option<InferResponse>>;

    /// Stores `response` under `key`; a store that cannot be written stays
    /// as it was.
    fn insert<'a>(&'a self, key: CacheKey, response: &'a InferResponse) -> BoxFuture<'a, ()>;
}

/// The server's one response cache, shared by every model that enables it.
/// Cheap to clone; clones share everything.
#[derive(Debug, Clone)]
pub struct ResponseCache(Arc<dyn Store>);

impl ResponseCache {
    /// The cache `config` asks for. A Redis cache connects in the
    /// background, or at [`ResponseCache::connect`].
    pub fn new(config: &CacheConfig) -> ResponseCache {
        match config {
            CacheConfig::Local { bytes } => ResponseCache(Arc::new(LocalCache::new(*bytes))),
            CacheConfig::Redis(options) => {
                ResponseCache(Arc::new(RedisCache::new(RedisOptions::clone(options))))
            }
        }
    }

    /// Makes sure the cache can be used: a Redis cache connects and
    /// answers a PING, or says why not (tritonserver does not start
    /// without its Redis either).
    pub async fn connect(&self) -> Result<(), ConnectError> {
        self.0.connect().await
    }

    /// The cache's state now, for the metrics endpoint.
    pub fn usage(&self) -> CacheUsage {
        self.0.usage()
    }

    /// A scope for one loaded version of `model`.
    pub fn scope(&self, model: &str, version: i64) -> CacheScope {
        CacheScope(self.0.scope(model, version))
    }
}

/// The response cache's state at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheUsage {
    /// How full the local cache is.
    Local(LocalUsage),
    /// Whether the Redis server is reachable, and how often it failed.
    Redis(RedisHealth),
}

impl CacheUsage {
    /// The whole cache's metric families: for the local cache Triton's
    /// `nv_cache_num_entries` and `nv_cache_util`; for a Redis cache, whose
    /// size is Redis's to report, Nereid's `nereid_cache_errors_total` (by
    /// `operation`: get, set, connect) and `nereid_cache_connected`.
    pub fn families(&self) -> Vec<Family> {
        match self {
            CacheUsage::Local(usage) => {
                let mut entries = Family::gauge(
                    "nv_cache_num_entries",
                    "Number of responses stored in response cache",
                );
                entries.add(Vec::new(), usage.entries as f64);
                let mut util = Family::gauge("nv_cache_util", "Cache utilization [0.0 - 1.0]");
                util.add(
                    Vec::new(),
                    usage.bytes as f64 / usage.capacity.max(1) as f64,
                );
                vec![entries, util]
            }
            CacheUsage::Redis(health) => health.families(),
        }
    }
}

impl RedisHealth {
    /// `nereid_cache_errors_total` by operation and `nereid_cache_connected`.
    pub fn families(&self) -> Vec<Family> {
        let mut errors = Family::counter(
            "nereid_cache_errors_total",
            "Response cache operations that failed (each a miss or an answer not stored), by operation",
        );
        for (operation, count) in [
            ("get", self.get_errors),
            ("set", self.set_errors),
            ("connect", self.connect_errors),
        ] {
            errors.add(vec![("operation", operation.to_string())], count as f64);
        }
        let mut connected = Family::gauge(
            "nereid_cache_connected",
            "Whether the response cache's Redis server is in use (1) or being reconnected to (0)",
        );
        connected.add(Vec::new(), f64::from(u8::from(self.connected)));
        vec![errors, connected]
    }
}

/// The local cache's size at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalUsage {
    pub entries: u64,
    pub bytes: u64,
    pub capacity: u64,
}

/// One loaded version's part of the cache.
#[derive(Debug)]
pub struct CacheScope(Box<dyn ScopeStore>);

impl CacheScope {
    /// The key of `request` (which must already be validated) in this
    /// scope. It shares the request's input data.
    pub fn key(&self, request: &InferRequest) -> CacheKey {
        CacheKey::new(self.0.id(), request)
    }

    /// The answer stored under `key`, if any; a cache that cannot be read
    /// has none.
    pub async fn get(&self, key: &CacheKey) -> Option<InferResponse> {
        self.0.get(key).await
    }

    /// Stores `response` under `key`; a cache that cannot be written
    /// stays as it was.
    pub async fn insert(&self, key: CacheKey, response: &InferResponse) {
        self.0.insert(key, response).await;
    }
}

/// What decides an answer: the loaded version (the local cache's scope;
/// Redis keys name the model and version), the inputs, the outputs asked
/// for (with their parameters, such as `classification`) and the request
/// parameters a model may read.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    scope: u64,
    inputs: Vec<CachedInput>,
    outputs: Vec<(String, String)>,
    parameters: String,
}

impl CacheKey {
    fn new(scope: u64, request: &InferRequest) -> CacheKey {
        let inputs = request
            .inputs
            .iter()
            .map(|i| CachedInput {
                name: i.name.clone(),
                datatype: i.datatype,
                shape: i.shape.clone(),
                data: i.data.clone(),
            })
            .collect();
        let outputs = request
            .outputs
            .iter()
            .map(|o| {
                let parameters = parameters_text(&o.parameters, &TRANSPORT_OUTPUT_PARAMETERS);
                (o.name.clone(), parameters)
            })
            .collect();
        CacheKey {
            scope,
            inputs,
            outputs,
            parameters: parameters_text(&request.parameters, &TRANSPORT_PARAMETERS),
        }
    }

    fn bytes(&self) -> usize {
        self.inputs
            .iter()
            .map(|i| i.data.len() + i.name.len() + 8 * i.shape.len())
            .sum::<usize>()
            + self.parameters.len()
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CachedInput {
    name: String,
    datatype: DataType,
    shape: Vec<i64>,
    data: Bytes,
}

/// Parameters as stable text (they hold floats, which have no `Eq`),
/// leaving out `skip`.
fn parameters_text(parameters: &Parameters, skip: &[&str]) -> String {
    parameters
        .iter()
        .filter(|(k, _)| !skip.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v:?};"))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use nereid_core::{InputTensor, Parameter, RequestedOutput};

    /// An answer of model `m` version 1: one UINT8 output holding `data`.
    pub fn uint8_response(data: Vec<u8>) -> InferResponse {
        InferResponse {
            model_name: "m".into(),
            model_version: 1,
            id: String::new(),
            outputs: vec![nereid_core::Tensor {
                name: "OUT".into(),
                datatype: DataType::Uint8,
                shape: vec![data.len() as i64],
                data: Bytes::from(data),
            }],
            parameters: Parameters::new(),
            in_shared_memory: Vec::new(),
        }
    }

    pub(crate) fn request(data: &[u8]) -> InferRequest {
        InferRequest {
            model_name: "m".into(),
            inputs: vec![InputTensor {
                name: "IN".into(),
                datatype: DataType::Uint8,
                shape: vec![data.len() as i64],
                data: Bytes::copy_from_slice(data),
                parameters: Parameters::new(),
            }],
            ..InferRequest::default()
        }
    }

    #[test]
    fn keys_differ_by_data_and_outputs_but_not_by_transport() {
        let key = |r: &InferRequest| CacheKey::new(1, r);
        assert_eq!(key(&request(b"abc")), key(&request(b"abc")));
        assert_ne!(key(&request(b"abc")), key(&request(b"abd")));
        let mut other_output = request(b"abc");
        other_output.outputs.push(RequestedOutput {
            name: "OUT".into(),
            parameters: [("classification".to_string(), Parameter::Int64(2))].into(),
        });
        assert_ne!(key(&request(b"abc")), key(&other_output));
        let mut transport_only = request(b"abc");
        transport_only
            .parameters
            .insert("binary_data_output".into(), Parameter::Bool(true));
        assert_eq!(key(&request(b"abc")), key(&transport_only));
    }
}
