//! The local cache (`--cache-config local,size=N`): answers in this
//! process, bounded by bytes with LRU eviction (moka). Each loaded version
//! has a scope of its own; its entries go when the version is dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use moka::sync::Cache;
use nereid_core::InferResponse;

use futures::future::BoxFuture;

use super::{CacheKey, CacheUsage, ConnectError, LocalUsage, ScopeStore, Store};

/// Bytes counted for an entry beyond its tensors' data.
const ENTRY_OVERHEAD: usize = 256;

/// The local cache. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct LocalCache {
    entries: Cache<Arc<CacheKey>, Arc<InferResponse>>,
    next_scope: Arc<AtomicU64>,
}

impl std::fmt::Debug for LocalCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCache")
            .field("entries", &self.entries.entry_count())
            .field("bytes", &self.entries.weighted_size())
            .finish()
    }
}

impl LocalCache {
    /// A cache holding at most `capacity` bytes of keys and answers.
    pub fn new(capacity: u64) -> LocalCache {
        let entries = Cache::builder()
            .max_capacity(capacity)
            .weigher(|key: &Arc<CacheKey>, response: &Arc<InferResponse>| {
                let bytes = key.bytes() + response_bytes(response) + ENTRY_OVERHEAD;
                u32::try_from(bytes).unwrap_or(u32::MAX)
            })
            .support_invalidation_closures()
            .build();
        LocalCache {
            entries,
            next_scope: Arc::new(AtomicU64::new(1)),
        }
    }

    /// How full the cache is now.
    pub fn usage(&self) -> LocalUsage {
        // moka counts lazily; bring the counts up to date first.
        self.entries.run_pending_tasks();
        LocalUsage {
            entries: self.entries.entry_count(),
            bytes: self.entries.weighted_size(),
            capacity: self.entries.policy().max_capacity().unwrap_or(0),
        }
    }

    /// A scope for one loaded version; its entries are dropped with it.
    pub(super) fn scope(&self) -> LocalScope {
        LocalScope {
            cache: self.clone(),
            id: self.next_scope.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl Store for LocalCache {
    fn connect(&self) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn usage(&self) -> CacheUsage {
        CacheUsage::Local(LocalCache::usage(self))
    }

    /// Each loaded version has a scope of its own, so a reload never
    /// answers from the version it replaced.
    fn scope(&self, _model: &str, _version: i64) -> Box<dyn ScopeStore> {
        Box::new(LocalCache::scope(self))
    }
}

impl ScopeStore for LocalScope {
    fn id(&self) -> u64 {
        self.id
    }

    fn get<'a>(&'a self, key: &'a CacheKey) -> BoxFuture<'a, Option<InferResponse>> {
        Box::pin(std::future::ready(LocalScope::get(self, key)))
    }

    fn insert<'a>(&'a self, key: CacheKey, response: &'a InferResponse) -> BoxFuture<'a, ()> {
        LocalScope::insert(self, key, response);
        Box::pin(std::future::ready(()))
    }
}

/// One loaded version's part of the local cache.
#[derive(Debug)]
pub struct LocalScope {
    cache: LocalCache,
    id: u64,
}

impl LocalScope {
    pub(super) fn get(&self, key: &CacheKey) -> Option<InferResponse> {
        self.cache
            .entries
            .get(key)
            .map(|hit| InferResponse::clone(&hit))
    }

    /// Stores `response` under `key`. Tensor data is copied in: a request's
    /// inputs are slices of its whole body and a batched model's outputs
    /// slices of the whole batch's, which the cache must neither keep alive
    /// nor leave out of its byte count.
    pub(super) fn insert(&self, mut key: CacheKey, response: &InferResponse) {
        for input in &mut key.inputs {
            input.data = Bytes::copy_from_slice(&input.data);
        }
        let mut response = response.clone();
        for output in &mut response.outputs {
            output.data = Bytes::copy_from_slice(&output.data);
        }
        self.cache.entries.insert(Arc::new(key), Arc::new(response));
    }
}

impl Drop for LocalScope {
    fn drop(&mut self) {
        let id = self.id;
        // Fails only when closures are not enabled, which `new` does.
        let _ = self
            .cache
            .entries
            .invalidate_entries_if(move |key, _| key.scope == id);
    }
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
    use crate::tests::request;
    use crate::tests::uint8_response;

    fn key(scope: &LocalScope, data: &[u8]) -> CacheKey {
        CacheKey::new(scope.id, &request(data))
    }

    #[test]
    fn the_same_request_hits_and_a_different_one_misses() {
        let scope = LocalCache::new(1 << 20).scope();
        scope.insert(key(&scope, b"abc"), &uint8_response(vec![1; 4]));
        assert_eq!(
            scope.get(&key(&scope, b"abc")),
            Some(uint8_response(vec![1; 4]))
        );
        assert!(scope.get(&key(&scope, b"abd")).is_none());
    }

    #[test]
    fn a_new_scope_does_not_see_an_old_ones_answers_and_dropping_clears_them() {
        let cache = LocalCache::new(1 << 20);
        let old = cache.scope();
        old.insert(key(&old, b"x"), &uint8_response(vec![1; 4]));
        let new = cache.scope();
        assert!(new.get(&key(&new, b"x")).is_none());
        drop(old);
        assert_eq!(cache.usage().entries, 0);
    }

    #[test]
    fn entries_are_bounded_by_bytes() {
        let cache = LocalCache::new(10_000);
        let scope = cache.scope();
        for i in 0..100u8 {
            scope.insert(key(&scope, &[i]), &uint8_response(vec![1; 1_000]));
        }
        let usage = cache.usage();
        assert!(usage.bytes <= 10_000, "{usage:?}");
        assert!(usage.entries < 100, "{usage:?}");
    }
}
