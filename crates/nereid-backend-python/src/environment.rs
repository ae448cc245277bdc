//! Triton's `EXECUTION_ENV_PATH`: a model runs on the Python of its own
//! environment, a folder or a packed archive (conda-pack's `.tar.gz`, or a
//! plain `.tar`), named by the model's `EXECUTION_ENV_PATH` parameter with
//! `$$TRITON_MODEL_DIRECTORY` standing for the model's folder. An archive
//! is unpacked once into the backend's own folder, and again when the
//! archive changes; the environment must hold `bin/activate`, as Triton
//! requires, and its worker runs `bin/python3` (else `bin/python`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nereid_core::BackendError;
use nereid_core::model_config::ModelConfig;
use parking_lot::Mutex;
use tempfile::TempDir;

/// The parameter that names a model's environment.
const PARAMETER: &str = "EXECUTION_ENV_PATH";

/// Where archives are unpacked, and which are.
#[derive(Debug, Default)]
pub(crate) struct Environments {
    unpacked: Mutex<Option<Unpacked>>,
}

#[derive(Debug)]
struct Unpacked {
    root: TempDir,
    /// archive -> (its folder, the archive's modification time then)
    archives: HashMap<PathBuf, (PathBuf, SystemTime)>,
    /// Folders made so far: each unpacking gets a new one, so that
    /// workers on an earlier copy keep theirs.
    made: usize,
}

impl Environments {
    /// The interpreter for the model `config` in `model_dir`: its
    /// environment's, or `None` when it names none.
    pub(crate) fn python_for(
        &self,
        config: &ModelConfig,
        model_dir: &Path,
    ) -> Result<Option<PathBuf>, BackendError> {
        let Some(parameter) = config.parameters.get(PARAMETER) else {
            return Ok(None);
        };
        let named = parameter.string_value.replacen(
            "$$TRITON_MODEL_DIRECTORY",
            &model_dir.to_string_lossy(),
            1,
        );
        let path = std::fs::canonicalize(&named).map_err(|e| {
            BackendError::Load(format!(
                "Failed to get the canonical path for {named}: {e}."
            ))
        })?;
        let env = if path.is_dir() {
            path
        } else {
            self.unpack(&path)?
        };
        let activate = env.join("bin/activate");
        if !activate.is_file() {
            return Err(BackendError::Load(format!(
                "Path {} does not exist. The Python environment should contain an 'activate' script.",
                activate.display()
            )));
        }
        let python = ["bin/python3", "bin/python"]
            .iter()
            .map(|name| env.join(name))
            .find(|p| p.exists())
            .ok_or_else(|| {
                BackendError::Load(format!(
                    "the Python environment {} has no bin/python3 or bin/python",
                    env.display()
                ))
            })?;
        tracing::info!(model = %config.name, env = %env.display(), "Using Python execution env");
        Ok(Some(python))
    }

    /// Unpacks `archive` unless it is already, unchanged; its folder.
    fn unpack(&self, archive: &Path) -> Result<PathBuf, BackendError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            BackendError::Load(format!(
                "cannot {what} the Python environment {}: {e}",
                archive.display()
            ))
        };
        let modified = std::fs::metadata(archive)
            .and_then(|m| m.modified())
            .map_err(|e| fail("read", &e))?;
        let mut unpacked = self.unpacked.lock();
        if unpacked.is_none() {
            let root = tempfile::Builder::new()
                .prefix("nereid-python-env-")
                .tempdir()
                .map_err(|e| fail("make a folder for", &e))?;
            *unpacked = Some(Unpacked {
                root,
                archives: HashMap::new(),
                made: 0,
            });
        }
        let Some(unpacked) = unpacked.as_mut() else {
            unreachable!("set just above")
        };
        if let Some((folder, when)) = unpacked.archives.get(archive)
            && *when == modified
        {
            return Ok(folder.clone());
        }
        let folder = unpacked.root.path().join(unpacked.made.to_string());
        unpacked.made += 1;
        std::fs::create_dir_all(&folder).map_err(|e| fail("unpack", &e))?;
        let file = std::fs::File::open(archive).map_err(|e| fail("open", &e))?;
        let gzipped = archive.extension().is_some_and(|e| e == "gz" || e == "tgz");
        let result = if gzipped {
            tar::Archive::new(flate2::read::GzDecoder::new(file)).unpack(&folder)
        } else {
            tar::Archive::new(file).unpack(&folder)
        };
        result.map_err(|e| fail("unpack", &e))?;
        unpacked
            .archives
            .insert(archive.to_path_buf(), (folder.clone(), modified));
        Ok(folder)
    }
}
