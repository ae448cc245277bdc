//! Where one load reads a model from: its folder in the repository, with
//! an optional config override, or a temporary folder written from a load
//! request's file contents.

use std::collections::HashSet;
use std::path::{Component, Path};
use std::sync::Arc;

use nereid_core::Error;
use nereid_core::model_config::ModelConfig;
use nereid_repository::ModelEntry;

use crate::options::LoadRequest;

/// A model folder to resolve and load.
#[derive(Debug, Clone)]
pub struct Source {
    pub entry: ModelEntry,
    /// Used instead of the folder's `config.pbtxt`.
    pub config: Option<ModelConfig>,
    /// Keeps a folder written from file contents alive.
    pub files: Option<Arc<tempfile::TempDir>>,
}

impl Source {
    /// The model's folder in the repository, as it is on disk.
    pub fn repository(entry: ModelEntry) -> Source {
        Source {
            entry,
            config: None,
            files: None,
        }
    }

    pub fn name(&self) -> &str {
        &self.entry.name
    }
}

/// Builds the source of an explicit load of `name`: the folder `found` in
/// the repository unless the request brings its own files.
pub fn for_request(
    name: &str,
    request: LoadRequest,
    found: Option<ModelEntry>,
) -> Result<Source, Error> {
    if request.files.is_empty() {
        let entry = found.ok_or_else(|| {
            Error::internal(format!(
                "failed to load '{name}', failed to poll from model repository"
            ))
        })?;
        return Ok(Source {
            entry,
            config: request.config,
            files: None,
        });
    }
    check_load_request(name, &request)?;
    let dir = write_files(name, &request.files)?;
    let path = dir.path().join(name);
    Ok(Source {
        entry: ModelEntry {
            name: name.to_string(),
            path,
            duplicates: Vec::new(),
        },
        config: request.config,
        files: Some(Arc::new(dir)),
    })
}

/// Checks, before anything is written, that a load of `name` bringing
/// `file:` contents also brings a config, that `name` can be a folder name
/// and that every file path stays inside the model's folder. A load without
/// files passes. Public so that fuzz and property tests reach it.
pub fn check_load_request(name: &str, request: &LoadRequest) -> Result<(), Error> {
    if request.files.is_empty() {
        return Ok(());
    }
    if request.config.is_none() {
        return Err(Error::invalid_argument(format!(
            "failed to load '{name}': 'file:' parameters need the 'config' parameter too"
        )));
    }
    if !is_plain_relative(Path::new(name)) || name.contains(['/', '\0']) {
        return Err(Error::invalid_argument(format!(
            "failed to load '{name}': not a valid model name"
        )));
    }
    if too_long(name) {
        return Err(Error::invalid_argument(format!(
            "failed to load '{name}': the model name is longer than {NAME_MAX} bytes"
        )));
    }
    for (path, _) in &request.files {
        if too_long(path) {
            return Err(Error::invalid_argument(format!(
                "failed to load '{name}': file path 'file:{path}' has a name longer than {NAME_MAX} bytes or is longer than {PATH_MAX} bytes"
            )));
        }
        if !is_plain_relative(Path::new(path)) || path.contains('\0') || path.ends_with('/') {
            return Err(Error::invalid_argument(format!(
                "failed to load '{name}': file path 'file:{path}' must be relative and stay inside the model folder"
            )));
        }
    }
    no_file_is_a_folder(name, &request.files)
}

/// The longest file name Linux file systems take, and a bound on a whole
/// `file:` path that leaves room for the temporary folder it is written in.
const NAME_MAX: usize = 255;
const PATH_MAX: usize = 3072;

/// A path no file system here could write.
fn too_long(path: &str) -> bool {
    path.len() > PATH_MAX || path.split('/').any(|part| part.len() > NAME_MAX)
}

/// Refuses `file:1/x` beside `file:1/x/y`: the folder could not be written.
fn no_file_is_a_folder(name: &str, files: &[(String, Vec<u8>)]) -> Result<(), Error> {
    let folders: HashSet<&Path> = files
        .iter()
        .flat_map(|(path, _)| Path::new(path).ancestors().skip(1))
        .collect();
    match files
        .iter()
        .find(|(path, _)| folders.contains(Path::new(path)))
    {
        None => Ok(()),
        Some((path, _)) => Err(Error::invalid_argument(format!(
            "failed to load '{name}': file path 'file:{path}' is also the folder of another file"
        ))),
    }
}

/// Writes `files` under `<temporary folder>/<name>/`; [`check_load_request`]
/// has checked every path.
fn write_files(name: &str, files: &[(String, Vec<u8>)]) -> Result<tempfile::TempDir, Error> {
    let io = |e: std::io::Error| {
        Error::internal(format!(
            "failed to load '{name}': cannot write its files: {e}"
        ))
    };
    let dir = tempfile::Builder::new()
        .prefix("nereid-model-")
        .tempdir()
        .map_err(io)?;
    let model_dir = dir.path().join(name);
    std::fs::create_dir(&model_dir).map_err(io)?;
    for (path, contents) in files {
        let target = model_dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&target, contents).map_err(io)?;
    }
    Ok(dir)
}

/// A non-empty relative path of plain names: no `..`, no root, no `.`.
fn is_plain_relative(path: &Path) -> bool {
    path.components().next().is_some()
        && path.components().all(|c| matches!(c, Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(files: &[(&str, &[u8])], config: bool) -> LoadRequest {
        LoadRequest {
            config: config.then(ModelConfig::default),
            files: files
                .iter()
                .map(|(p, c)| (p.to_string(), c.to_vec()))
                .collect(),
            traffic: None,
        }
    }

    #[test]
    fn files_land_in_a_model_folder() {
        let source = for_request("m", request(&[("1/model.onnx", b"abc")], true), None).unwrap();
        assert_eq!(source.entry.name, "m");
        assert!(source.entry.path.ends_with("m"));
        let written = std::fs::read(source.entry.path.join("1/model.onnx")).unwrap();
        assert_eq!(written, b"abc");
        let folder = source.entry.path.clone();
        drop(source);
        assert!(!folder.exists(), "the folder goes with the source");
    }

    #[test]
    fn bad_requests_are_refused() {
        let err = for_request("m", request(&[("1/model.onnx", b"")], false), None).unwrap_err();
        assert!(err.message().contains("'config'"), "{err}");
        for bad in ["../x", "/etc/x", "1/../../x", ""] {
            let err = for_request("m", request(&[(bad, b"")], true), None).unwrap_err();
            assert_eq!(err.kind(), nereid_core::ErrorKind::InvalidArgument, "{bad}");
        }
        let err = for_request("nope", LoadRequest::default(), None).unwrap_err();
        assert_eq!(
            err.message(),
            "failed to load 'nope', failed to poll from model repository"
        );
    }

    /// Found by the load_parameters fuzz target: these could not be
    /// written and were answered as internal errors (HTTP 500).
    #[test]
    fn unwritable_paths_are_client_errors() {
        type Files<'a> = &'a [(&'a str, &'a [u8])];
        let long_name = "n".repeat(256);
        let long_file = format!("1/{}", "f".repeat(256));
        let long_path = format!("1/{}", "d/".repeat(1600));
        let cases: [(&str, Files<'_>); 8] = [
            (&long_name, &[("1/x", b"")]),
            ("m", &[(&long_file, b"")]),
            ("m", &[(long_path.trim_end_matches('/'), b"")]),
            ("m", &[("1/a\0b", b"")]),
            ("m\0", &[("1/x", b"")]),
            ("m", &[("1/x", b""), ("1/x/y", b"")]),
            ("m", &[("1/x/y/", b""), ("1//x", b"")]),
            ("m", &[("1/x/", b"")]),
        ];
        for (name, files) in cases {
            let err = for_request(name, request(files, true), None).unwrap_err();
            assert_eq!(
                err.kind(),
                nereid_core::ErrorKind::InvalidArgument,
                "{name:?} {files:?}: {err}"
            );
        }
        let ok = request(&[("1/x/a", b""), ("1/x/b", b""), ("1/y", b"")], true);
        assert!(check_load_request("m", &ok).is_ok());
    }
}
