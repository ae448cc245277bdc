//! A cloud repository kept as a local folder. Its root holds one entry per
//! model: a link to the model's newest complete copy (`copies/<n>/<model>`),
//! or, for a model listed but not asked for yet (explicit model control),
//! an empty folder so the repository index shows it. A changed model is
//! copied into a new folder and its link swapped at once; the copy before
//! it stays on disk, since the version that serves may still be reading
//! it, and older ones are deleted.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use nereid_repository::{CopyFailure, Mirror, MirrorError, Scope};
use object_store::ObjectStore;
use parking_lot::Mutex;

use crate::copy::copy_model;
use crate::credentials::{Vars, credential_for, process_vars};
use crate::error::CloudError;
use crate::listing::{RemoteModel, list_models};
use crate::store::build_store;
use crate::url::CloudUrl;

/// Models copied at once.
const PARALLEL_MODELS: usize = 4;

/// A cloud repository mirrored into a local folder, which is deleted when
/// this is dropped.
pub struct CloudRepository {
    url: CloudUrl,
    origin: String,
    store: Arc<dyn ObjectStore>,
    runtime: Option<tokio::runtime::Runtime>,
    root: PathBuf,
    copies: PathBuf,
    state: Mutex<State>,
    /// Deleted on close or drop.
    folder: Mutex<Option<tempfile::TempDir>>,
}

/// What is copied, by model.
#[derive(Debug, Default)]
struct State {
    models: BTreeMap<String, Copied>,
    next_copy: u64,
}

#[derive(Debug)]
struct Copied {
    fingerprint: u64,
    folder: PathBuf,
    /// The copy before it, kept while an older version may still serve.
    previous: Option<PathBuf>,
}

impl std::fmt::Debug for CloudRepository {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudRepository")
            .field("origin", &self.origin)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl CloudRepository {
    /// Opens `url` with the credentials and mount folder the process's
    /// environment names. Nothing is listed or copied yet.
    pub fn open(url: CloudUrl) -> Result<CloudRepository, CloudError> {
        CloudRepository::open_with(url, &process_vars)
    }

    pub fn open_with(url: CloudUrl, vars: Vars<'_>) -> Result<CloudRepository, CloudError> {
        let credential = credential_for(&url, vars)?;
        let store = build_store(&url, &credential, vars)?;
        let mount = vars(url.mount_variable()).map_or_else(std::env::temp_dir, PathBuf::from);
        let local = |source| CloudError::Local {
            url: url.to_string(),
            path: mount.clone(),
            source,
        };
        let folder = tempfile::Builder::new()
            .prefix("nereid-repository-")
            .tempdir_in(&mount)
            .map_err(local)?;
        let root = folder.path().join("models");
        let copies = folder.path().join("copies");
        std::fs::create_dir(&root).map_err(local)?;
        std::fs::create_dir(&copies).map_err(local)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cloud-repository")
            .enable_all()
            .build()
            .map_err(CloudError::Runtime)?;
        Ok(CloudRepository {
            origin: url.to_string(),
            url,
            store,
            runtime: Some(runtime),
            root,
            copies,
            state: Mutex::new(State::default()),
            folder: Mutex::new(Some(folder)),
        })
    }

    pub fn url(&self) -> &CloudUrl {
        &self.url
    }

    fn block_on<F: Future>(&self, work: F) -> F::Output {
        match &self.runtime {
            Some(runtime) => runtime.block_on(work),
            None => unreachable!("the runtime lives until drop"),
        }
    }

    /// Lists the store and brings the local entries in line with it.
    fn sync(&self, scope: Scope<'_>) -> Result<Vec<CopyFailure>, CloudError> {
        let mut state = self.state.lock();
        let remote = self.block_on(list_models(self.store.as_ref(), &self.url))?;
        self.forget_removed(&mut state, &remote);
        let wanted: Vec<(&String, &RemoteModel)> = remote
            .iter()
            .filter(|(name, model)| {
                scope.includes(name)
                    && state.models.get(*name).map(|c| c.fingerprint) != Some(model.fingerprint())
            })
            .collect();
        let first = state.next_copy;
        state.next_copy += wanted.len() as u64;
        let copied = self.block_on(self.copy_all(&wanted, first));
        let mut failures = Vec::new();
        for ((name, model), (folder, result)) in wanted.into_iter().zip(copied) {
            match result.and_then(|()| self.swap_in(name, &folder)) {
                Ok(()) => self.record(&mut state, name, model.fingerprint(), folder),
                Err(error) => {
                    tracing::error!(model = %name, error = %error, "cannot copy the model from the cloud repository");
                    let _ = std::fs::remove_dir_all(folder.parent().unwrap_or(&folder));
                    failures.push(CopyFailure {
                        model: name.clone(),
                        error: Box::new(error),
                    });
                }
            }
        }
        self.list_others(&state, &remote, &failures);
        Ok(failures)
    }

    /// Copies each model into `copies/<n>/<name>`, several at once.
    async fn copy_all(
        &self,
        wanted: &[(&String, &RemoteModel)],
        first: u64,
    ) -> Vec<(PathBuf, Result<(), CloudError>)> {
        let jobs = wanted.iter().enumerate().map(|(i, (name, model))| {
            let folder = self.copies.join((first + i as u64).to_string()).join(name);
            async move {
                let started = Instant::now();
                let result = copy_model(&self.store, &self.url, name, model, &folder).await;
                if result.is_ok() {
                    tracing::info!(
                        model = %name,
                        from = %self.url.object(name),
                        files = model.files.len(),
                        bytes = model.bytes(),
                        seconds = started.elapsed().as_secs_f64(),
                        "model copied from the cloud repository"
                    );
                }
                (folder, result)
            }
        });
        futures::stream::iter(jobs)
            .buffered(PARALLEL_MODELS)
            .collect()
            .await
    }

    /// Points the model's entry at `folder`, in one rename.
    fn swap_in(&self, name: &str, folder: &Path) -> Result<(), CloudError> {
        let entry = self.root.join(name);
        let staged = folder.with_file_name(format!(".link-{name}"));
        let local = |source| CloudError::Local {
            url: self.url.object(name),
            path: entry.clone(),
            source,
        };
        std::os::unix::fs::symlink(folder, &staged).map_err(local)?;
        if entry.is_dir() && !entry.is_symlink() {
            // The empty folder that listed the model.
            std::fs::remove_dir(&entry).map_err(local)?;
        }
        std::fs::rename(&staged, &entry).map_err(local)
    }

    fn record(&self, state: &mut State, name: &str, fingerprint: u64, folder: PathBuf) {
        let previous = state.models.remove(name).map(|old| {
            if let Some(older) = old.previous {
                remove_copy(&older);
            }
            old.folder
        });
        state.models.insert(
            name.to_string(),
            Copied {
                fingerprint,
                folder,
                previous,
            },
        );
    }

    /// Drops the entries of models no longer in the store. Their last copy
    /// stays until exit: a model that serves is unloaded after this.
    fn forget_removed(&self, state: &mut State, remote: &BTreeMap<String, RemoteModel>) {
        for name in local_entries(&self.root) {
            if !remote.contains_key(&name) {
                let entry = self.root.join(&name);
                let removed = match entry.is_symlink() {
                    true => std::fs::remove_file(&entry),
                    false => std::fs::remove_dir(&entry),
                };
                if let Err(e) = removed {
                    tracing::warn!(path = %entry.display(), error = %e, "cannot remove a model gone from the cloud repository");
                }
            }
        }
        state.models.retain(|name, copied| {
            let keep = remote.contains_key(name);
            if !keep && let Some(previous) = &copied.previous {
                remove_copy(previous);
            }
            keep
        });
    }

    /// Gives every listed model without an entry an empty folder, so the
    /// index lists it, except those whose copy just failed.
    fn list_others(
        &self,
        state: &State,
        remote: &BTreeMap<String, RemoteModel>,
        failures: &[CopyFailure],
    ) {
        for name in remote.keys() {
            let entry = self.root.join(name);
            let failed = failures.iter().any(|f| &f.model == name);
            if failed || state.models.contains_key(name) || entry.symlink_metadata().is_ok() {
                continue;
            }
            if let Err(e) = std::fs::create_dir(&entry) {
                tracing::warn!(path = %entry.display(), error = %e, "cannot list a cloud model locally");
            }
        }
    }
}

fn local_entries(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect()
}

/// Deletes `copies/<n>/<model>` with its `copies/<n>`.
fn remove_copy(folder: &Path) {
    let numbered = folder.parent().unwrap_or(folder);
    if let Err(e) = std::fs::remove_dir_all(numbered)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %numbered.display(), error = %e, "cannot delete an old copy of a cloud model");
    }
}

impl Mirror for CloudRepository {
    fn root(&self) -> &Path {
        &self.root
    }

    fn origin(&self) -> &str {
        &self.origin
    }

    fn refresh(&self, scope: Scope<'_>) -> Result<Vec<CopyFailure>, MirrorError> {
        self.sync(scope).map_err(|e| Box::new(e) as MirrorError)
    }

    fn close(&self) {
        let _copies = self.state.lock();
        if let Some(folder) = self.folder.lock().take()
            && let Err(e) = folder.close()
        {
            tracing::warn!(root = %self.root.display(), error = %e, "cannot delete the copies of a cloud repository");
        }
    }
}

impl Drop for CloudRepository {
    /// Stops the client's threads without waiting: the last handle may be
    /// dropped on an async runtime, where a blocking shutdown panics.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
