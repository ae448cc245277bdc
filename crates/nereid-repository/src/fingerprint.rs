//! A cheap summary of a model folder, so a watcher can tell whether a model
//! changed without reading its files.

use std::fs::Metadata;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::path::Path;
use std::time::UNIX_EPOCH;

/// Symlinked folders are followed this deep, which also stops link cycles.
const MAX_DEPTH: usize = 32;

/// Hashes the relative path, type, size and modification time of every
/// entry under `path` (following symlinks), in sorted order. Equal folders
/// give equal values within one process; any added, removed, resized or
/// touched file changes it. File contents are not read.
pub fn fingerprint(path: &Path) -> io::Result<u64> {
    folder_fingerprint(path, false)
}

/// [`fingerprint`] of a model folder, leaving out its traffic file
/// (`traffic.json`): that file moves labels and weights, it is not the
/// model, and changing it reloads nothing.
pub fn model_fingerprint(path: &Path) -> io::Result<u64> {
    folder_fingerprint(path, true)
}

fn folder_fingerprint(path: &Path, skip_traffic: bool) -> io::Result<u64> {
    let mut hasher = DefaultHasher::new();
    hash_entry(&mut hasher, Path::new(""), &std::fs::metadata(path)?);
    walk(&mut hasher, path, Path::new(""), 0, skip_traffic)?;
    Ok(hasher.finish())
}

fn walk(
    hasher: &mut DefaultHasher,
    dir: &Path,
    rel: &Path,
    depth: usize,
    skip_traffic: bool,
) -> io::Result<()> {
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    let mut names: Vec<_> = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    names.sort();
    for name in names {
        if skip_traffic && depth == 0 && name == crate::traffic::TRAFFIC_FILE {
            continue;
        }
        let path = dir.join(&name);
        let rel = rel.join(&name);
        let metadata = match std::fs::metadata(&path) {
            Ok(m) => m,
            // Removed while we walked, or a dangling symlink: hash the link itself.
            Err(e) if e.kind() == io::ErrorKind::NotFound => match std::fs::symlink_metadata(&path)
            {
                Ok(m) => m,
                Err(_) => continue,
            },
            Err(e) => return Err(e),
        };
        hash_entry(hasher, &rel, &metadata);
        if let Ok(target) = std::fs::read_link(&path) {
            target.hash(hasher);
        }
        if metadata.is_dir() {
            walk(hasher, &path, &rel, depth + 1, skip_traffic)?;
        }
    }
    Ok(())
}

fn hash_entry(hasher: &mut DefaultHasher, rel: &Path, metadata: &Metadata) {
    rel.hash(hasher);
    metadata.is_dir().hash(hasher);
    metadata.len().hash(hasher);
    let modified = metadata
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .unwrap_or_default();
    modified.hash(hasher);
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::{Duration, SystemTime};

    use super::*;

    #[test]
    fn detects_changes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("1")).unwrap();
        fs::write(root.join("1/model.onnx"), b"abc").unwrap();
        fs::write(root.join("config.pbtxt"), b"name: \"m\"").unwrap();
        let first = fingerprint(root).unwrap();
        assert_eq!(
            fingerprint(root).unwrap(),
            first,
            "stable when nothing changes"
        );

        fs::write(root.join("1/model.onnx"), b"abcd").unwrap();
        let resized = fingerprint(root).unwrap();
        assert_ne!(resized, first);

        let file = fs::File::options()
            .write(true)
            .open(root.join("1/model.onnx"))
            .unwrap();
        file.set_modified(SystemTime::now() + Duration::from_secs(60))
            .unwrap();
        let touched = fingerprint(root).unwrap();
        assert_ne!(touched, resized);

        fs::create_dir(root.join("2")).unwrap();
        let added = fingerprint(root).unwrap();
        assert_ne!(added, touched);
        fs::remove_dir(root.join("2")).unwrap();
        // The root folder's own mtime changed too, so the value differs from before.
        assert_ne!(fingerprint(root).unwrap(), added);
    }

    #[test]
    fn missing_folder_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(fingerprint(&dir.path().join("nope")).is_err());
    }
}
