//! Which backend serves a model, as Triton's `AutoCompleteBackendFields`
//! (core/src/model_config_utils.cc): `backend`, else `platform`, else
//! `default_model_filename`, else the file a version folder holds, else the
//! `<model>.<backend>` folder name. Fills `backend`, `platform` and
//! `default_model_filename` from the chosen backend when they are empty.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use nereid_core::Backend;
use nereid_core::model_config::ModelConfig;

use crate::error::ModelError;

pub(crate) fn resolve_backend(
    config: &mut ModelConfig,
    model_dir: &Path,
    versions: &BTreeSet<i64>,
    backends: &[Arc<dyn Backend>],
) -> Result<Arc<dyn Backend>, ModelError> {
    let backend = choose(config, model_dir, versions, backends)?;
    if !config.platform.is_empty() && config.platform != backend.platform() {
        return Err(ModelError::PlatformBackendMismatch {
            model: config.name.clone(),
            platform: config.platform.clone(),
            backend: backend.name().to_owned(),
        });
    }
    if config.backend.is_empty() {
        config.backend = backend.name().to_owned();
    }
    if config.platform.is_empty() {
        config.platform = backend.platform().to_owned();
    }
    if config.default_model_filename.is_empty() {
        config.default_model_filename = backend.default_model_filename().to_owned();
    }
    Ok(backend)
}

fn choose(
    config: &ModelConfig,
    model_dir: &Path,
    versions: &BTreeSet<i64>,
    backends: &[Arc<dyn Backend>],
) -> Result<Arc<dyn Backend>, ModelError> {
    if !config.backend.is_empty() {
        return by_name(config, &config.backend, backends);
    }
    let platform = &config.platform;
    if let Some(backend) = find(backends, |b| {
        !platform.is_empty() && b.platform() == platform
    }) {
        return Ok(backend);
    }
    // Like Triton, a known default file name picks the backend even when the
    // platform is unknown; the platform/backend pair check then names both.
    let file = &config.default_model_filename;
    if let Some(backend) = find(backends, |b| {
        !file.is_empty() && b.default_model_filename() == file
    }) {
        return Ok(backend);
    }
    if !platform.is_empty() {
        return Err(ModelError::UnknownPlatform {
            model: config.name.clone(),
            platform: platform.clone(),
            available: list(backends, |b| b.platform()),
        });
    }
    if !file.is_empty() {
        return Err(ModelError::CannotDetermineBackend {
            model: config.name.clone(),
        });
    }
    if let Some(backend) = by_version_contents(model_dir, versions, backends) {
        return Ok(backend);
    }
    // Triton's last resort for custom backends: a folder named `model.<backend>`.
    match config.name.split_once('.') {
        Some((_, backend)) => by_name(config, backend, backends),
        None => Err(ModelError::CannotDetermineBackend {
            model: config.name.clone(),
        }),
    }
}

fn by_name(
    config: &ModelConfig,
    name: &str,
    backends: &[Arc<dyn Backend>],
) -> Result<Arc<dyn Backend>, ModelError> {
    find(backends, |b| b.name() == name).ok_or_else(|| ModelError::UnknownBackend {
        model: config.name.clone(),
        backend: name.to_owned(),
        available: list(backends, |b| b.name()),
    })
}

/// The first backend (in the order given) whose default model file exists
/// in a version folder (where the backend looks for it: a SavedModel may
/// fill the version folder itself), looking at versions in ascending order.
fn by_version_contents(
    model_dir: &Path,
    versions: &BTreeSet<i64>,
    backends: &[Arc<dyn Backend>],
) -> Option<Arc<dyn Backend>> {
    versions.iter().find_map(|version| {
        let dir = model_dir.join(version.to_string());
        find(backends, |b| {
            let file = b.default_model_filename();
            !file.is_empty() && b.model_path(&dir, file).exists()
        })
    })
}

fn find(
    backends: &[Arc<dyn Backend>],
    mut pred: impl FnMut(&dyn Backend) -> bool,
) -> Option<Arc<dyn Backend>> {
    backends.iter().find(|b| pred(b.as_ref())).cloned()
}

fn list(backends: &[Arc<dyn Backend>], field: impl Fn(&dyn Backend) -> &'static str) -> String {
    if backends.is_empty() {
        return "none".to_owned();
    }
    let names: Vec<&str> = backends.iter().map(|b| field(b.as_ref())).collect();
    names.join(", ")
}
