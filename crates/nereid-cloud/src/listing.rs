//! One listing of the repository's objects, grouped by model folder. A
//! model's fingerprint hashes each object's key, size, ETag and
//! modification time, so any upload, removal or overwrite changes it and
//! nothing is read to tell.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::SystemTime;

use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore};

use crate::error::CloudError;
use crate::url::CloudUrl;

/// One object of a model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RemoteFile {
    /// Its path inside the model's folder (`1/model.onnx`).
    pub relative: String,
    pub location: ObjectPath,
    pub size: u64,
    pub e_tag: Option<String>,
    pub modified: SystemTime,
}

/// A model folder in the store: its objects, by relative path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteModel {
    pub files: Vec<RemoteFile>,
}

impl RemoteModel {
    /// Equal for equal listings within one process.
    pub fn fingerprint(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.files.hash(&mut hasher);
        hasher.finish()
    }

    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Lists every object below the repository's folder, in one paginated
/// listing, and groups them by model.
pub async fn list_models(
    store: &dyn ObjectStore,
    url: &CloudUrl,
) -> Result<BTreeMap<String, RemoteModel>, CloudError> {
    let prefix = ObjectPath::from(url.prefix.as_str());
    let prefix = (!url.prefix.is_empty()).then_some(&prefix);
    let objects: Vec<ObjectMeta> =
        store
            .list(prefix)
            .try_collect()
            .await
            .map_err(|source| CloudError::List {
                url: url.to_string(),
                source,
            })?;
    let depth = prefix.map_or(0, |p| p.parts().count());
    Ok(group(objects, depth))
}

/// Groups objects `depth` parts below the bucket's root by their first
/// part below that: the model. Objects beside the models and hidden
/// folders (`.name`, as a local scan skips them) are left out, and so are
/// empty "folder" objects that consoles create (`models/m/1/`).
pub fn group(objects: Vec<ObjectMeta>, depth: usize) -> BTreeMap<String, RemoteModel> {
    let mut models: BTreeMap<String, RemoteModel> = BTreeMap::new();
    for meta in objects {
        let parts: Vec<String> = meta
            .location
            .parts()
            .skip(depth)
            .map(|p| p.as_ref().to_string())
            .collect();
        let Some((model, inside)) = parts.split_first() else {
            continue;
        };
        if model.starts_with('.') || (inside.is_empty() && meta.size > 0) {
            continue;
        }
        let files = &mut models.entry(model.clone()).or_default().files;
        if inside.is_empty() {
            continue;
        }
        files.push(RemoteFile {
            relative: inside.join("/"),
            location: meta.location,
            size: meta.size,
            e_tag: meta.e_tag,
            modified: meta.last_modified.into(),
        });
    }
    for model in models.values_mut() {
        drop_folder_markers(&mut model.files);
        model.files.sort_by(|a, b| a.relative.cmp(&b.relative));
    }
    models
}

/// Removes empty objects whose path is a folder of another object.
fn drop_folder_markers(files: &mut Vec<RemoteFile>) {
    let folders: BTreeSet<String> = files
        .iter()
        .flat_map(|f| {
            let parts: Vec<&str> = f.relative.split('/').collect();
            (1..parts.len())
                .map(|n| parts[..n].join("/"))
                .collect::<Vec<_>>()
        })
        .collect();
    files.retain(|f| f.size > 0 || !folders.contains(&f.relative));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn meta(key: &str, size: u64, tag: &str) -> ObjectMeta {
        ObjectMeta {
            location: ObjectPath::parse(key).unwrap(),
            last_modified: (std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000)).into(),
            size,
            e_tag: Some(tag.into()),
            version: None,
        }
    }

    #[test]
    fn objects_group_by_model() {
        let objects = vec![
            meta("repo/simple/config.pbtxt", 10, "a"),
            meta("repo/simple/1/model.onnx", 20, "b"),
            meta("repo/simple/1/", 0, "dir"),
            meta("repo/simple/", 0, "dir"),
            meta("repo/other/config.pbtxt", 5, "c"),
            meta("repo/README.md", 3, "d"),
            meta("repo/.hidden/config.pbtxt", 3, "e"),
            meta("repo/empty/", 0, "dir"),
        ];
        let models = group(objects, 1);
        let names: Vec<&String> = models.keys().collect();
        assert_eq!(names, ["empty", "other", "simple"]);
        let files: Vec<&str> = models["simple"]
            .files
            .iter()
            .map(|f| f.relative.as_str())
            .collect();
        assert_eq!(files, ["1/model.onnx", "config.pbtxt"]);
        assert!(models["empty"].files.is_empty());
        assert_eq!(models["simple"].bytes(), 30);
    }

    #[test]
    fn fingerprints_follow_content() {
        let one = group(vec![meta("m/1/model.onnx", 20, "b")], 0);
        let same = group(vec![meta("m/1/model.onnx", 20, "b")], 0);
        let retagged = group(vec![meta("m/1/model.onnx", 20, "c")], 0);
        let more = group(
            vec![
                meta("m/1/model.onnx", 20, "b"),
                meta("m/2/model.onnx", 1, "x"),
            ],
            0,
        );
        let fp = |m: &BTreeMap<String, RemoteModel>| m["m"].fingerprint();
        assert_eq!(fp(&one), fp(&same));
        assert_ne!(fp(&one), fp(&retagged));
        assert_ne!(fp(&one), fp(&more));
    }
}
