//! One ONNX Runtime session for all the CPU instances of a model version,
//! so `count: 4` holds the weights once (Triton's backend holds them once
//! per instance: onnxruntime_backend#18).
//!
//! Each instance keeps its own thread, label and statistics and runs one
//! batch at a time; only the session underneath is shared, and ONNX
//! Runtime runs concurrent `Run` calls on one session (see `run.rs`). The
//! backend keeps a weak reference per session: the session, and its
//! weights, go when the last instance holding it is dropped. A session is
//! found again only for the same model, version, file (path, size,
//! modification time and inode, so a changed file loads afresh) and
//! settings.

use std::collections::HashMap;
use std::hash::Hash;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::SystemTime;

use parking_lot::Mutex;

use crate::settings::SessionSettings;

/// What a shared session was made from: instances whose keys are equal
/// would build the same session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SessionKey {
    model: String,
    version: i64,
    file: FileIdentity,
    settings: SessionSettings,
}

impl SessionKey {
    /// The key of `file` loaded for `model` version `version` with
    /// `settings`; an unreadable file's error names it.
    pub(crate) fn new(
        model: &str,
        version: i64,
        file: &Path,
        settings: &SessionSettings,
    ) -> std::io::Result<Self> {
        Ok(SessionKey {
            model: model.to_string(),
            version,
            file: FileIdentity::of(file)?,
            settings: settings.clone(),
        })
    }
}

/// A model file as it is now: rewriting it in place changes its size or
/// modification time, replacing it changes its inode.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FileIdentity {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

impl FileIdentity {
    fn of(path: &Path) -> std::io::Result<Self> {
        let path = path.canonicalize()?;
        let meta = std::fs::metadata(&path)?;
        Ok(FileIdentity {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode: inode(&meta),
            path,
        })
    }
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

#[cfg(not(unix))]
fn inode(_meta: &std::fs::Metadata) -> u64 {
    0
}

/// Values shared while anyone holds them, built once per key: instances
/// that load at the same time (each on its own thread) wait for the first
/// one's build instead of building their own.
#[derive(Debug)]
pub(crate) struct SharedCache<K, V> {
    slots: Mutex<HashMap<K, Arc<Mutex<Weak<V>>>>>,
}

impl<K, V> Default for SharedCache<K, V> {
    fn default() -> Self {
        SharedCache {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash, V> SharedCache<K, V> {
    /// The live value for `key`, or the one `build` makes (and that later
    /// calls get while it lives). A failed build leaves nothing behind.
    pub(crate) fn get_or_build<E>(
        &self,
        key: K,
        build: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<V>, E> {
        let slot = {
            let mut slots = self.slots.lock();
            slots.retain(|_, slot| in_use(slot));
            Arc::clone(slots.entry(key).or_default())
        };
        // The slot's lock, not the map's, is held while building: other
        // keys load meanwhile.
        let mut weak = slot.lock();
        if let Some(value) = weak.upgrade() {
            return Ok(value);
        }
        let value = Arc::new(build()?);
        *weak = Arc::downgrade(&value);
        Ok(value)
    }

    /// How many keys have a live value or a build under way.
    #[cfg(test)]
    fn len(&self) -> usize {
        let mut slots = self.slots.lock();
        slots.retain(|_, slot| in_use(slot));
        slots.len()
    }
}

/// A slot is in use while its value lives or a caller holds the slot
/// (building it, or about to look). Called with the map locked, so when
/// the map holds the only reference nobody can take the slot meanwhile
/// and its lock is free.
fn in_use<V>(slot: &Arc<Mutex<Weak<V>>>) -> bool {
    Arc::strong_count(slot) > 1 || slot.lock().strong_count() > 0
}

#[cfg(test)]
mod tests {
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn a_value_is_shared_while_held_and_released_with_the_last_holder() {
        let cache = SharedCache::<&str, String>::default();
        let a = cache
            .get_or_build("m", || Ok::<_, ()>("first".into()))
            .unwrap();
        let b = cache
            .get_or_build("m", || Ok::<_, ()>("second".into()))
            .unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(cache.len(), 1);
        let weak = Arc::downgrade(&a);
        drop((a, b));
        assert!(
            weak.upgrade().is_none(),
            "the cache keeps no strong reference"
        );
        assert_eq!(cache.len(), 0);
        let c = cache
            .get_or_build("m", || Ok::<_, ()>("again".into()))
            .unwrap();
        assert_eq!(*c, "again");
    }

    #[test]
    fn keys_do_not_share_and_failures_leave_nothing() {
        let cache = SharedCache::<&str, String>::default();
        let a = cache.get_or_build("a", || Ok::<_, ()>("a".into())).unwrap();
        let b = cache.get_or_build("b", || Ok::<_, ()>("b".into())).unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(cache.get_or_build("c", || Err("bad")), Err("bad"));
        assert_eq!(cache.len(), 2);
        let c = cache.get_or_build("c", || Ok::<_, ()>("c".into())).unwrap();
        assert_eq!(*c, "c");
    }

    #[test]
    fn concurrent_loads_build_once() {
        let cache = SharedCache::<&str, usize>::default();
        let builds = AtomicUsize::new(0);
        let start = Barrier::new(4);
        let values: Vec<Arc<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        cache
                            .get_or_build("m", || {
                                std::thread::sleep(std::time::Duration::from_millis(20));
                                Ok::<_, ()>(builds.fetch_add(1, Ordering::SeqCst))
                            })
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        assert!(values.iter().all(|v| Arc::ptr_eq(v, &values[0])));
    }

    #[test]
    fn a_rewritten_file_is_another_key() {
        let dir = std::env::temp_dir().join(format!("nereid-shared-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("model.onnx");
        std::fs::write(&file, b"one").unwrap();
        let settings = SessionSettings::from_config(&crate::tests::config_with("m", &[])).unwrap();
        let key = |version| SessionKey::new("m", version, &file, &settings).unwrap();
        let before = key(1);
        assert_eq!(before, key(1));
        assert_ne!(before, key(2));
        std::fs::write(&file, b"two!").unwrap();
        assert_ne!(before, key(1), "a new size");
        let replacement = dir.join("new.onnx");
        std::fs::write(&replacement, b"two!").unwrap();
        let rewritten = key(1);
        std::fs::rename(&replacement, &file).unwrap();
        assert_ne!(rewritten, key(1), "a new inode");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
