//! Keeps every file a model names (its model file, label files, warmup
//! data) inside the model's folder: a name that is absolute or climbs out
//! with `..` is refused, and so is one that leaves the folder through a
//! symbolic link. The model folder itself may be a link (repositories often
//! link models in); what it contains may not point elsewhere.

use std::path::{Component, Path, PathBuf};

/// `name` inside `folder`, or why it is not. A name that does not exist
/// yet is checked by its words alone; reading it fails later with the
/// reader's own error.
pub fn inside(folder: &Path, name: &str) -> Result<PathBuf, String> {
    let relative = Path::new(name)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !relative {
        return Err(format!(
            "'{name}' must be a relative path that stays inside '{}'",
            folder.display()
        ));
    }
    let path = folder.join(name);
    let (Ok(real_folder), Ok(real_path)) = (folder.canonicalize(), path.canonicalize()) else {
        return Ok(path);
    };
    if real_path.starts_with(&real_folder) {
        Ok(path)
    } else {
        Err(format!(
            "'{name}' leads outside '{}' (to '{}') through a symbolic link",
            folder.display(),
            real_path.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_leave_the_folder_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m");
        std::fs::create_dir_all(model.join("1")).unwrap();
        std::fs::write(model.join("1/model.onnx"), b"x").unwrap();
        std::fs::write(dir.path().join("secret"), b"s").unwrap();
        assert_eq!(
            inside(&model, "1/model.onnx").unwrap(),
            model.join("1/model.onnx")
        );
        assert!(inside(&model, "not-yet-there").is_ok());
        for bad in ["../secret", "1/../../secret", "/etc/passwd"] {
            let err = inside(&model, bad).unwrap_err();
            assert!(err.contains("must be a relative path"), "{bad}: {err}");
        }
        std::os::unix::fs::symlink(dir.path().join("secret"), model.join("labels.txt")).unwrap();
        let err = inside(&model, "labels.txt").unwrap_err();
        assert!(err.contains("through a symbolic link"), "{err}");
        std::os::unix::fs::symlink(dir.path(), model.join("2")).unwrap();
        assert!(inside(&model, "2/secret").is_err());
    }

    #[test]
    fn a_linked_model_folder_and_links_inside_it_are_fine() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir_all(real.join("1")).unwrap();
        std::fs::write(real.join("1/model.onnx"), b"x").unwrap();
        std::os::unix::fs::symlink("model.onnx", real.join("1/current.onnx")).unwrap();
        let linked = dir.path().join("linked");
        std::os::unix::fs::symlink(&real, &linked).unwrap();
        assert!(inside(&linked, "1/model.onnx").is_ok());
        assert!(inside(&linked, "1/current.onnx").is_ok());
    }
}
