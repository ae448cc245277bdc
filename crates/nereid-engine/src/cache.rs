//! The response cache (`--cache-config local,size=N`, used by models whose
//! config has `response_cache { enable: true }`): answers bounded by bytes
//! with LRU eviction (moka), keyed by everything that decides an answer.
//! Each loaded version has a scope of its own, so a reload never answers
//! from the version it replaced, and the scope's entries go when the version
//! is dropped.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use moka::sync::Cache;
use nereid_core::{DataType, InferRequest, InferResponse, Parameters};

/// Request parameters that change how an answer travels, not what it is.
const TRANSPORT_PARAMETERS: [&str; 5] = [
    "binary_data_output",
    "priority",
    "timeout",
    "triton_enable_empty_final_response",
    "headers",
];

/// Output parameters that change how an output travels, not what it is.
const TRANSPORT_OUTPUT_PARAMETERS: [&str; 1] = ["binary_data"];

/// Bytes counted for an entry beyond its tensors' data.
const ENTRY_OVERHEAD: usize = 256;

/// The server's one response cache, shared by every model that enables it.
#[derive(Clone)]
pub struct ResponseCache {
    entries: Cache<Arc<CacheKey>, Arc<InferResponse>>,
    next_scope: Arc<AtomicU64>,
}

impl std::fmt::Debug for ResponseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseCache")
            .field("entries", &self.entries.entry_count())
            .field("bytes", &self.entries.weighted_size())
            .finish()
    }
}

impl ResponseCache {
    /// A cache holding at most `capacity` bytes of keys and answers.
    pub fn new(capacity: u64) -> ResponseCache {
        let entries = Cache::builder()
            .max_capacity(capacity)
            .weigher(|key: &Arc<CacheKey>, response: &Arc<InferResponse>| {
                let bytes = key.bytes() + response_bytes(response) + ENTRY_OVERHEAD;
                u32::try_from(bytes).unwrap_or(u32::MAX)
            })
            .support_invalidation_closures()
            .build();
        ResponseCache {
            entries,
            next_scope: Arc::new(AtomicU64::new(1)),
        }
    }

    /// How full the cache is now.
    pub fn usage(&self) -> CacheUsage {
        // moka counts lazily; bring the counts up to date first.
        self.entries.run_pending_tasks();
        CacheUsage {
            entries: self.entries.entry_count(),
            bytes: self.entries.weighted_size(),
            capacity: self.entries.policy().max_capacity().unwrap_or(0),
        }
    }

    /// A scope for one loaded version; its entries are dropped with it.
    pub fn scope(&self) -> CacheScope {
        CacheScope {
            cache: self.clone(),
            id: self.next_scope.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// The response cache's size at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheUsage {
    pub entries: u64,
    pub bytes: u64,
    pub capacity: u64,
}

/// One loaded version's part of the cache.
#[derive(Debug)]
pub struct CacheScope {
    cache: ResponseCache,
    id: u64,
}

impl CacheScope {
    /// The key of `request` (which must already be validated). It shares
    /// the request's input data; `insert` stores a copy.
    pub fn key(&self, request: &InferRequest) -> CacheKey {
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
            scope: self.id,
            inputs,
            outputs,
            parameters: parameters_text(&request.parameters, &TRANSPORT_PARAMETERS),
        }
    }

    pub fn get(&self, key: &CacheKey) -> Option<Arc<InferResponse>> {
        self.cache.entries.get(key)
    }

    /// Stores `response` under `key`. Tensor data is copied in: a request's
    /// inputs are slices of its whole body and a batched model's outputs
    /// slices of the whole batch's, which the cache must neither keep alive
    /// nor leave out of its byte count.
    pub fn insert(&self, mut key: CacheKey, mut response: InferResponse) {
        for input in &mut key.inputs {
            input.data = Bytes::copy_from_slice(&input.data);
        }
        for output in &mut response.outputs {
            output.data = Bytes::copy_from_slice(&output.data);
        }
        self.cache.entries.insert(Arc::new(key), Arc::new(response));
    }
}

impl Drop for CacheScope {
    fn drop(&mut self) {
        let id = self.id;
        // Fails only when closures are not enabled, which `new` does.
        let _ = self
            .cache
            .entries
            .invalidate_entries_if(move |key, _| key.scope == id);
    }
}

/// What decides an answer: the loaded version, the inputs, the outputs
/// asked for (with their parameters, such as `classification`) and the
/// request parameters a model may read.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    scope: u64,
    inputs: Vec<CachedInput>,
    outputs: Vec<(String, String)>,
    parameters: String,
}

impl CacheKey {
    fn bytes(&self) -> usize {
        self.inputs
            .iter()
            .map(|i| i.data.len() + i.name.len() + 8 * i.shape.len())
            .sum::<usize>()
            + self.parameters.len()
    }
}

#[derive(Debug, PartialEq, Eq)]
struct CachedInput {
    name: String,
    datatype: DataType,
    shape: Vec<i64>,
    data: Bytes,
}

impl Hash for CachedInput {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.datatype.hash(state);
        self.shape.hash(state);
        self.data.hash(state);
    }
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

fn response_bytes(response: &InferResponse) -> usize {
    response
        .outputs
        .iter()
        .map(|t| t.data.len() + t.name.len() + 8 * t.shape.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::uint8_response;
    use nereid_core::{InputTensor, Parameter, RequestedOutput};

    fn request(data: &[u8]) -> InferRequest {
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
    fn the_same_request_hits_and_a_different_one_misses() {
        let scope = ResponseCache::new(1 << 20).scope();
        scope.insert(scope.key(&request(b"abc")), uint8_response(vec![1; 4]));
        assert!(scope.get(&scope.key(&request(b"abc"))).is_some());
        assert!(scope.get(&scope.key(&request(b"abd"))).is_none());
        let mut other_output = request(b"abc");
        other_output.outputs.push(RequestedOutput {
            name: "OUT".into(),
            parameters: [("classification".to_string(), Parameter::Int64(2))].into(),
        });
        assert!(scope.get(&scope.key(&other_output)).is_none());
        let mut transport_only = request(b"abc");
        transport_only
            .parameters
            .insert("binary_data_output".into(), Parameter::Bool(true));
        assert!(scope.get(&scope.key(&transport_only)).is_some());
    }

    #[test]
    fn a_new_scope_does_not_see_an_old_ones_answers_and_dropping_clears_them() {
        let cache = ResponseCache::new(1 << 20);
        let old = cache.scope();
        old.insert(old.key(&request(b"x")), uint8_response(vec![1; 4]));
        let new = cache.scope();
        assert!(new.get(&new.key(&request(b"x"))).is_none());
        drop(old);
        cache.entries.run_pending_tasks();
        assert_eq!(cache.entries.entry_count(), 0);
    }

    #[test]
    fn entries_are_bounded_by_bytes() {
        let cache = ResponseCache::new(10_000);
        let scope = cache.scope();
        for i in 0..100u8 {
            scope.insert(scope.key(&request(&[i])), uint8_response(vec![1; 1_000]));
        }
        cache.entries.run_pending_tasks();
        assert!(cache.entries.weighted_size() <= 10_000);
        assert!(cache.entries.entry_count() < 100);
    }
}
