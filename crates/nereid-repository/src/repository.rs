//! The repository: folders in, validated configs and version paths out.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nereid_core::Backend;
use nereid_core::model_config::ModelConfig;

use crate::autofill::{self, DEFAULT_MAX_BATCH_SIZE};
use crate::backend_select::resolve_backend;
use crate::error::{ModelError, RepositoryError};
use crate::{normalize, parse, validate, versions};

/// The file in a model folder that holds its configuration.
pub const CONFIG_FILENAME: &str = "config.pbtxt";

/// One or more repository roots (`--model-repository`, may repeat) and how
/// strictly configs are read (`--strict-model-config`).
#[derive(Debug, Clone)]
pub struct Repository {
    roots: Vec<PathBuf>,
    strict: bool,
    gpus: Vec<u32>,
    default_max_batch_size: i32,
}

/// A model folder found by [`Repository::scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelEntry {
    /// The folder name, which is the model name.
    pub name: String,
    /// The model folder (in the first root that has it).
    pub path: PathBuf,
    /// Folders of the same name in other roots. When not empty the model is
    /// not unique and [`Repository::resolve`] refuses it, as Triton does.
    pub duplicates: Vec<PathBuf>,
}

/// A model ready to load: its complete config, the backend that runs it and
/// the versions its version policy selects.
#[derive(Clone)]
pub struct ResolvedModel {
    pub name: String,
    /// The config after autofill and Triton's defaults: what
    /// `GET /v2/models/<name>/config` returns.
    pub config: ModelConfig,
    /// The backend that runs it; `None` for an ensemble, which the engine
    /// runs over other models.
    pub backend: Option<Arc<dyn Backend>>,
    /// Ascending by version.
    pub versions: Vec<ResolvedVersion>,
}

impl fmt::Debug for ResolvedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedModel")
            .field("name", &self.name)
            .field("backend", &self.backend.as_ref().map(|b| b.name()))
            .field("versions", &self.versions)
            .finish_non_exhaustive()
    }
}

/// One version to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedVersion {
    pub version: i64,
    /// The model file (or folder) of this version; the version folder
    /// itself when the backend names no file (an ensemble).
    pub model_path: PathBuf,
}

impl Repository {
    /// A repository over `roots`. With `strict`, every model needs a
    /// complete `config.pbtxt` and nothing is read from model files.
    pub fn new(roots: Vec<PathBuf>, strict: bool) -> Self {
        Repository {
            roots,
            strict,
            gpus: Vec::new(),
            default_max_batch_size: DEFAULT_MAX_BATCH_SIZE,
        }
    }

    /// The GPU ids instances may use (none by default): `KIND_AUTO` groups
    /// become GPU groups over these, and `KIND_GPU` groups must name only these.
    pub fn with_gpus(mut self, gpus: Vec<u32>) -> Self {
        self.gpus = gpus;
        self
    }

    /// The `max_batch_size` autofill gives a model that can batch and whose
    /// config sets none (Triton's `default-max-batch-size` backend setting, 4).
    pub fn with_default_max_batch_size(mut self, size: i32) -> Self {
        self.default_max_batch_size = size;
        self
    }

    /// The repository roots, in the order given.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Every model folder in every root, sorted by name. Hidden entries and
    /// plain files are skipped. Fails only when a root cannot be listed.
    pub fn scan(&self) -> Result<Vec<ModelEntry>, RepositoryError> {
        let mut found: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for root in &self.roots {
            let unreadable = |source| RepositoryError::UnreadableRoot {
                path: root.clone(),
                source,
            };
            for entry in std::fs::read_dir(root).map_err(unreadable)? {
                let path = entry.map_err(unreadable)?.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                    tracing::warn!(path = %path.display(), "skipping a folder whose name is not UTF-8");
                    continue;
                };
                if name.starts_with('.') || !path.is_dir() {
                    continue;
                }
                found.entry(name.to_owned()).or_default().push(path);
            }
        }
        Ok(found
            .into_iter()
            .filter_map(|(name, paths)| {
                let (path, others) = paths.split_first()?;
                Some(ModelEntry {
                    name,
                    path: path.clone(),
                    duplicates: others.to_vec(),
                })
            })
            .collect())
    }

    /// The model folder named `name`, as [`Repository::scan`] would list
    /// it, without listing the roots: a name that is not a plain folder
    /// name (a path, hidden) is none.
    pub fn entry(&self, name: &str) -> Option<ModelEntry> {
        if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\', '\0']) {
            return None;
        }
        let mut paths = self
            .roots
            .iter()
            .map(|root| root.join(name))
            .filter(|path| path.is_dir());
        let path = paths.next()?;
        Some(ModelEntry {
            name: name.to_string(),
            path,
            duplicates: paths.collect(),
        })
    }

    /// Reads, autofills, defaults and validates one model's config and
    /// resolves its versions. Any failure is this model's alone.
    pub fn resolve(
        &self,
        entry: &ModelEntry,
        backends: &[Arc<dyn Backend>],
    ) -> Result<ResolvedModel, ModelError> {
        check_unique(entry)?;
        let config = self.read_config(&entry.path)?;
        self.resolve_with_config(entry, config, backends)
    }

    /// Like [`Repository::resolve`], with `config` in place of the folder's
    /// `config.pbtxt` (the repository API's config override). It is
    /// autofilled, defaulted and validated the same way.
    pub fn resolve_with_config(
        &self,
        entry: &ModelEntry,
        mut config: ModelConfig,
        backends: &[Arc<dyn Backend>],
    ) -> Result<ResolvedModel, ModelError> {
        check_unique(entry)?;
        if config.name.is_empty() {
            config.name.clone_from(&entry.name);
        } else if config.name != entry.name {
            return Err(ModelError::NameMismatch {
                directory: entry.name.clone(),
                name: config.name,
            });
        }
        let on_disk = versions::list_versions(&entry.path).map_err(|source| ModelError::Io {
            path: entry.path.clone(),
            source,
        })?;
        // No backend runs an ensemble, and autofill never applies to one.
        let backend = if config.platform == validate::ENSEMBLE_PLATFORM {
            None
        } else {
            let backend = resolve_backend(&mut config, &entry.path, &on_disk, backends)?;
            if !self.strict {
                self.complete(&mut config, &entry.path, &on_disk, backend.as_ref())?;
            }
            Some(backend)
        };
        let gpu_backend = backend.as_ref().is_some_and(|b| b.gpu_capable());
        normalize_and_validate(&mut config, &self.gpus, gpu_backend)?;
        let versions = self.version_paths(&config, &entry.path, &on_disk, backend.as_deref())?;
        Ok(ResolvedModel {
            name: config.name.clone(),
            config,
            backend,
            versions,
        })
    }

    /// The folder's `config.pbtxt` as written (nothing filled in), or an
    /// empty config where the folder has none and configs may be autofilled.
    pub fn read_model_config(&self, entry: &ModelEntry) -> Result<ModelConfig, ModelError> {
        self.read_config(&entry.path)
    }

    fn read_config(&self, model_dir: &Path) -> Result<ModelConfig, ModelError> {
        let path = model_dir.join(CONFIG_FILENAME);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(parse::parse_config_file(&path, &text)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !self.strict => {
                Ok(ModelConfig::default())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(ModelError::MissingConfig { path })
            }
            Err(source) => Err(ModelError::Io { path, source }),
        }
    }

    /// Completes `config`: by the model itself where the backend lets it
    /// (`Backend::auto_complete`), else from what the model file declares
    /// when the config lacks inputs or outputs. Both read the newest
    /// version the (possibly defaulted) version policy selects.
    fn complete(
        &self,
        config: &mut ModelConfig,
        model_dir: &Path,
        on_disk: &BTreeSet<i64>,
        backend: &dyn Backend,
    ) -> Result<(), ModelError> {
        let completes_itself = || {
            let path = self.newest_model_path(config, model_dir, on_disk, backend)?;
            match backend.auto_complete(config, &path) {
                None => Ok(None),
                Some(result) => result
                    .map(Some)
                    .map_err(|source| ModelError::AutoComplete { path, source }),
            }
        };
        if let Some(completed) = completes_itself()? {
            *config = completed;
            return Ok(());
        }
        if !autofill::needs_model_io(config) {
            return Ok(());
        }
        let path = self.newest_model_path(config, model_dir, on_disk, backend)?;
        let io = backend
            .inspect_for(config, &path)
            .map_err(|source| ModelError::Inspect { path, source })?;
        autofill::autofill(config, &io, self.default_max_batch_size)
    }

    /// The model file of the newest version `config`'s policy selects.
    fn newest_model_path(
        &self,
        config: &ModelConfig,
        model_dir: &Path,
        on_disk: &BTreeSet<i64>,
        backend: &dyn Backend,
    ) -> Result<PathBuf, ModelError> {
        let policy = config
            .version_policy
            .clone()
            .unwrap_or_else(versions::default_policy);
        let selected = versions::select(&policy, on_disk, &config.name);
        let Some(&newest) = selected.last() else {
            return Err(ModelError::NoVersion {
                model: config.name.clone(),
            });
        };
        model_path(model_dir, newest, config, Some(backend))
    }

    fn version_paths(
        &self,
        config: &ModelConfig,
        model_dir: &Path,
        on_disk: &BTreeSet<i64>,
        backend: Option<&dyn Backend>,
    ) -> Result<Vec<ResolvedVersion>, ModelError> {
        let policy = config
            .version_policy
            .clone()
            .unwrap_or_else(versions::default_policy);
        let selected = versions::select(&policy, on_disk, &config.name);
        if selected.is_empty() {
            return Err(ModelError::NoVersion {
                model: config.name.clone(),
            });
        }
        selected
            .into_iter()
            .map(|version| {
                let model_path = model_path(model_dir, version, config, backend)?;
                if !model_path.exists() {
                    // Triton fails the whole load when any selected version fails.
                    return Err(ModelError::MissingModelFile {
                        model: config.name.clone(),
                        version,
                        path: model_path,
                    });
                }
                Ok(ResolvedVersion {
                    version,
                    model_path,
                })
            })
            .collect()
    }
}

impl ResolvedModel {
    /// Adds the versions of `pinned` that the version policy left out but
    /// whose folder and model file are in `model_dir`: versions a label
    /// names stay loaded while it names them. Versions stay ascending.
    pub fn pin_versions(&mut self, model_dir: &Path, pinned: &BTreeSet<i64>) {
        for &version in pinned {
            if self.versions.iter().any(|v| v.version == version) {
                continue;
            }
            let Ok(model_path) =
                model_path(model_dir, version, &self.config, self.backend.as_deref())
            else {
                continue;
            };
            if model_dir.join(version.to_string()).is_dir() && model_path.exists() {
                self.versions.push(ResolvedVersion {
                    version,
                    model_path,
                });
            }
        }
        self.versions.sort_by_key(|v| v.version);
    }
}

/// Fills Triton's defaults into `config` and validates it, as a load does
/// after autofill: what a strict repository (`--strict-model-config`)
/// checks of a config that names its backend. No file is read, so fuzz
/// and property tests can reach validation with any parsed config.
/// `gpus` are the GPUs instances may use; `gpu_backend` says whether the
/// model's backend can use them, which decides what kind an instance
/// group that names none (`KIND_AUTO`) gets.
pub fn normalize_and_validate(
    config: &mut ModelConfig,
    gpus: &[u32],
    gpu_backend: bool,
) -> Result<(), ModelError> {
    normalize::normalize(config, gpus, gpu_backend);
    validate::validate(config, gpus)?;
    Ok(())
}

/// Triton refuses a model whose name appears in more than one root.
fn check_unique(entry: &ModelEntry) -> Result<(), ModelError> {
    if entry.duplicates.is_empty() {
        return Ok(());
    }
    let mut paths = vec![entry.path.clone()];
    paths.extend(entry.duplicates.iter().cloned());
    Err(ModelError::NotUnique {
        name: entry.name.clone(),
        paths,
    })
}

/// The version's model file (or folder), which must stay inside the
/// model's folder; where in the version folder it lies is the backend's
/// to say (`Backend::model_path`).
fn model_path(
    model_dir: &Path,
    version: i64,
    config: &ModelConfig,
    backend: Option<&dyn Backend>,
) -> Result<PathBuf, ModelError> {
    let version_dir = version.to_string();
    let checked = match config.default_model_filename.as_str() {
        "" => crate::confine::inside(model_dir, &version_dir),
        // The name may not leave the version folder, nor the version
        // folder (a link) the model's.
        file => crate::confine::inside(&model_dir.join(&version_dir), file)
            .and_then(|_| crate::confine::inside(model_dir, &format!("{version_dir}/{file}")))
            .map(|path| match backend {
                Some(backend) => backend.model_path(&model_dir.join(&version_dir), file),
                None => path,
            }),
    };
    checked.map_err(|reason| ModelError::OutsideModel {
        model: config.name.clone(),
        reason,
    })
}
