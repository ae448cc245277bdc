//! The Python side ships inside the binary: the worker and the
//! `triton_python_backend_utils` module are written to a private folder at
//! start-up and put on the workers' PYTHONPATH, so an installed `nereid`
//! needs nothing beside it.

use std::io;
use std::path::Path;

use tempfile::TempDir;

/// Every file of `python/` a worker needs, by path relative to it.
const SOURCES: [(&str, &str); 20] = [
    (
        "nereid_worker.py",
        include_str!("../python/nereid_worker.py"),
    ),
    (
        "triton_python_backend_utils.py",
        include_str!("../python/triton_python_backend_utils.py"),
    ),
    (
        "nereid_pb/__init__.py",
        include_str!("../python/nereid_pb/__init__.py"),
    ),
    (
        "nereid_pb/calls.py",
        include_str!("../python/nereid_pb/calls.py"),
    ),
    (
        "nereid_pb/channel.py",
        include_str!("../python/nereid_pb/channel.py"),
    ),
    (
        "nereid_pb/dlpack.py",
        include_str!("../python/nereid_pb/dlpack.py"),
    ),
    (
        "nereid_pb/dtypes.py",
        include_str!("../python/nereid_pb/dtypes.py"),
    ),
    (
        "nereid_pb/errors.py",
        include_str!("../python/nereid_pb/errors.py"),
    ),
    (
        "nereid_pb/gpu.py",
        include_str!("../python/nereid_pb/gpu.py"),
    ),
    (
        "nereid_pb/inbox.py",
        include_str!("../python/nereid_pb/inbox.py"),
    ),
    (
        "nereid_pb/inference.py",
        include_str!("../python/nereid_pb/inference.py"),
    ),
    (
        "nereid_pb/logger.py",
        include_str!("../python/nereid_pb/logger.py"),
    ),
    (
        "nereid_pb/messages.py",
        include_str!("../python/nereid_pb/messages.py"),
    ),
    (
        "nereid_pb/metrics.py",
        include_str!("../python/nereid_pb/metrics.py"),
    ),
    (
        "nereid_pb/model_config.py",
        include_str!("../python/nereid_pb/model_config.py"),
    ),
    (
        "nereid_pb/model_control.py",
        include_str!("../python/nereid_pb/model_control.py"),
    ),
    (
        "nereid_pb/runtime.py",
        include_str!("../python/nereid_pb/runtime.py"),
    ),
    (
        "nereid_pb/shm.py",
        include_str!("../python/nereid_pb/shm.py"),
    ),
    (
        "nereid_pb/tensor.py",
        include_str!("../python/nereid_pb/tensor.py"),
    ),
    (
        "nereid_pb/wire.py",
        include_str!("../python/nereid_pb/wire.py"),
    ),
];

/// Writes the Python sources into a new private folder, removed on drop.
pub(crate) fn unpack() -> io::Result<TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("nereid-python-")
        .tempdir()?;
    for (rel, text) in SOURCES {
        let path = dir.path().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)?;
    }
    Ok(dir)
}

/// The worker program inside an unpacked folder.
pub(crate) fn worker_program(dir: &Path) -> std::path::PathBuf {
    dir.join("nereid_worker.py")
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_python_file_is_shipped() {
        let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
        let mut on_disk: Vec<String> = ["", "nereid_pb"]
            .iter()
            .flat_map(|sub| std::fs::read_dir(python.join(sub)).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "py"))
            .map(|p| {
                p.strip_prefix(&python)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        on_disk.sort();
        let mut shipped: Vec<String> = super::SOURCES.iter().map(|(p, _)| p.to_string()).collect();
        shipped.sort();
        assert_eq!(shipped, on_disk);
    }
}
