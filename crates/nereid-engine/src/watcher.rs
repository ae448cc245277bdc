//! Poll mode: follows the repository folders. `notify` events say which
//! model folder changed; a full rescan every poll interval catches what
//! events miss (network mounts, a Kubernetes volume swapping its `..data`
//! link) and first has cloud repositories copy the models that changed. A
//! change is applied once it settled (see [`crate::poll`]), on this
//! module's own thread, never on the async reactor.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use nereid_repository::ModelEntry;
use notify::{EventKind, RecursiveMode, Watcher as _};

use crate::handle::{Engine, Inner, Watcher};
use crate::poll::{ChangeTracker, Look};
use crate::source::Source;

/// How long a folder's fingerprint must stay the same before it loads.
const SETTLE: Duration = Duration::from_millis(500);
/// Events arriving together are handled together, this long after the first.
const EVENT_BATCH: Duration = Duration::from_millis(100);

/// A fingerprint of a model's folder (and of any same-named folders in
/// other roots, which make it ambiguous).
pub fn fingerprint_entry(entry: &ModelEntry) -> std::io::Result<u64> {
    let mut hasher = DefaultHasher::new();
    for path in std::iter::once(&entry.path).chain(&entry.duplicates) {
        path.hash(&mut hasher);
        nereid_repository::model_fingerprint(path)?.hash(&mut hasher);
    }
    Ok(hasher.finish())
}

/// Starts following the repository from the fingerprints applied at startup.
pub fn start(inner: &Arc<Inner>, applied: BTreeMap<String, u64>) -> Option<Watcher> {
    let interval = inner.control.poll_interval;
    if interval.is_zero() {
        tracing::info!("--repository-poll-secs is 0: the model repository is not followed");
        return None;
    }
    let (stop, stopped) = crossbeam_channel::bounded(0);
    let weak = Arc::downgrade(inner);
    let roots = inner.options.repositories.clone();
    let spawned = std::thread::Builder::new()
        .name("repository-poll".into())
        .spawn(move || run(&weak, &roots, interval, applied, &stopped));
    match spawned {
        Ok(_) => Some(Watcher { _stop: stop }),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the repository poll thread");
            None
        }
    }
}

/// Models named by events since the last pass; `all` when an event could
/// not be tied to one model.
#[derive(Debug, Default)]
struct Dirty {
    all: bool,
    names: BTreeSet<String>,
    since: Option<Instant>,
}

fn run(
    weak: &Weak<Inner>,
    roots: &[PathBuf],
    interval: Duration,
    applied: BTreeMap<String, u64>,
    stopped: &Receiver<()>,
) {
    let (events_tx, events) = crossbeam_channel::unbounded();
    let _watcher = watch(roots, events_tx);
    let mut tracker = ChangeTracker::new(SETTLE, applied);
    let mut dirty = Dirty::default();
    let mut next_rescan = Instant::now() + interval;
    loop {
        let deadline = [
            Some(next_rescan),
            tracker.next_look(),
            dirty.since.map(|s| s + EVENT_BATCH),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(next_rescan);
        crossbeam_channel::select! {
            recv(stopped) -> _ => return,
            recv(events) -> event => {
                if let Ok(event) = event {
                    note(&mut dirty, event, roots);
                }
            }
            default(deadline.saturating_duration_since(Instant::now())) => {}
        }
        let now = Instant::now();
        let mut all = false;
        if now >= next_rescan {
            all = true;
            next_rescan = now + interval;
        }
        let mut names: BTreeSet<String> = tracker.due(now).into_iter().collect();
        if dirty.since.is_some_and(|s| now >= s + EVENT_BATCH) {
            all |= dirty.all;
            names.append(&mut dirty.names);
            dirty = Dirty::default();
        }
        if !all && names.is_empty() {
            continue;
        }
        let Some(inner) = weak.upgrade() else { return };
        pass(&Engine { inner }, &mut tracker, all, names);
    }
}

/// Watches every root recursively; `None` (polling only) when the
/// platform's watcher cannot start, e.g. out of inotify watches.
fn watch(
    roots: &[PathBuf],
    events: Sender<notify::Result<notify::Event>>,
) -> Option<notify::RecommendedWatcher> {
    let handler = move |event| {
        let _ = events.send(event);
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the model repository; rescanning every poll interval only");
            return None;
        }
    };
    for root in roots {
        if let Err(e) = watcher.watch(root, RecursiveMode::Recursive) {
            tracing::warn!(root = %root.display(), error = %e, "cannot watch a model repository folder; rescanning it every poll interval only");
        }
    }
    Some(watcher)
}

/// Ties an event to the model folders it touched.
fn note(dirty: &mut Dirty, event: notify::Result<notify::Event>, roots: &[PathBuf]) {
    dirty.since.get_or_insert_with(Instant::now);
    let event = match event {
        Ok(e) => e,
        Err(e) => {
            tracing::debug!(error = %e, "file watcher error; rescanning");
            dirty.all = true;
            return;
        }
    };
    if matches!(event.kind, EventKind::Access(_)) {
        return;
    }
    if event.need_rescan() {
        dirty.all = true;
    }
    for path in &event.paths {
        match model_of(path, roots) {
            Some(name) => {
                dirty.names.insert(name);
            }
            None => dirty.all = true,
        }
    }
}

/// The model folder `path` lies in, if it lies in one: the first component
/// under a root, unless hidden (`..data` and friends touch every model).
fn model_of(path: &Path, roots: &[PathBuf]) -> Option<String> {
    roots.iter().find_map(|root| {
        let rel = path.strip_prefix(root).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?;
        (!first.starts_with('.')).then(|| first.to_string())
    })
}

/// Looks at `names` (every model when `all`) and applies the changes that
/// settled, several models at once.
fn pass(engine: &Engine, tracker: &mut ChangeTracker, all: bool, mut names: BTreeSet<String>) {
    if all {
        // Failures are logged and shown in the index; copies that changed
        // are seen by the scan below, like folders edited in place.
        let _ = engine.refresh_mirrors(nereid_repository::Scope::All);
    }
    let entries = match engine.inner.repository.scan() {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(error = %e, "cannot scan the model repository; trying again later");
            return;
        }
    };
    let by_name: BTreeMap<String, ModelEntry> =
        entries.into_iter().map(|e| (e.name.clone(), e)).collect();
    if all {
        names.extend(by_name.keys().cloned());
        names.extend(tracker.known().cloned());
    }
    let mut settled = Vec::new();
    for name in names {
        let entry = by_name.get(&name);
        let fingerprint = match entry.map(fingerprint_entry).transpose() {
            Ok(fp) => fp,
            Err(e) => {
                tracing::debug!(model = %name, error = %e, "cannot read a model folder now");
                continue;
            }
        };
        match (tracker.look(&name, fingerprint, Instant::now()), entry) {
            (Look::Settled, _) => settled.push((name, entry.cloned(), fingerprint)),
            // The traffic file is not part of the fingerprint: a change to
            // it alone moves labels and weights, reloading nothing.
            (Look::Unchanged, Some(entry)) => engine.refresh_traffic(&name, &entry.path),
            _ => {}
        }
    }
    let mut changed = Vec::new();
    for (name, entry, _) in &settled {
        match entry {
            Some(entry) => {
                tracing::info!(model = %name, "model folder changed: loading");
                changed.push(Source::repository(entry.clone()));
            }
            None => engine.remove_model(name),
        }
    }
    // Failures are logged and shown in the index.
    let _ = engine.load_many(changed, nereid_residency::LoadCause::Poll);
    for (name, _, fingerprint) in settled {
        tracker.applied(&name, fingerprint);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_map_to_model_folders() {
        let roots = [PathBuf::from("/repo/a"), PathBuf::from("/repo/b")];
        let name = |p: &str| model_of(Path::new(p), &roots);
        assert_eq!(
            name("/repo/a/simple/1/model.onnx").as_deref(),
            Some("simple")
        );
        assert_eq!(name("/repo/b/mlp").as_deref(), Some("mlp"));
        assert_eq!(name("/repo/a"), None, "the root itself");
        assert_eq!(name("/repo/a/..data/simple/config.pbtxt"), None);
        assert_eq!(name("/elsewhere/simple"), None);
    }

    #[test]
    fn unattributable_events_rescan_everything() {
        let roots = [PathBuf::from("/repo")];
        let mut dirty = Dirty::default();
        let event = notify::Event::new(EventKind::Any).add_path("/repo/m/config.pbtxt".into());
        note(&mut dirty, Ok(event), &roots);
        assert!(!dirty.all && dirty.names.contains("m") && dirty.since.is_some());
        let read = notify::Event::new(EventKind::Access(notify::event::AccessKind::Any))
            .add_path("/repo/n/1/model.onnx".into());
        note(&mut dirty, Ok(read), &roots);
        assert!(!dirty.names.contains("n"), "reads are not changes");
        let swap = notify::Event::new(EventKind::Any).add_path("/repo/..data".into());
        note(&mut dirty, Ok(swap), &roots);
        assert!(dirty.all);
    }
}
