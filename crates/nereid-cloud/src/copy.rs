//! Copies one model folder from the store into a local folder. Each object
//! is read only if it still has the ETag it was listed with and must bring
//! the listed number of bytes, so an object overwritten during the copy
//! fails it instead of mixing two uploads. Files and folders take the
//! objects' modification times (see [`stamp`]), so a version that did not
//! change keeps its local fingerprint in the next copy and is not
//! reloaded, and one that did gets another.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use object_store::{GetOptions, ObjectStore};
use tokio::io::AsyncWriteExt;

use crate::error::CloudError;
use crate::listing::{RemoteFile, RemoteModel};
use crate::url::CloudUrl;

/// Objects of one model read at once.
const PARALLEL_FILES: usize = 8;

/// Copies `model`, the folder `name` of `url`, into `dest` (made here).
pub async fn copy_model(
    store: &Arc<dyn ObjectStore>,
    url: &CloudUrl,
    name: &str,
    model: &RemoteModel,
    dest: &Path,
) -> Result<(), CloudError> {
    let local = |source| CloudError::Local {
        url: url.object(name),
        path: dest.to_path_buf(),
        source,
    };
    tokio::fs::create_dir_all(dest).await.map_err(local)?;
    futures::stream::iter(&model.files)
        .map(|file| copy_file(store, url, name, file, dest))
        .buffer_unordered(PARALLEL_FILES)
        .try_collect::<()>()
        .await?;
    date_folders(dest, &model.files).map_err(local)
}

async fn copy_file(
    store: &Arc<dyn ObjectStore>,
    url: &CloudUrl,
    model: &str,
    file: &RemoteFile,
    dest: &Path,
) -> Result<(), CloudError> {
    let object = url.object(&format!("{model}/{}", file.relative));
    let path = dest.join(&file.relative);
    let write_error = |source| CloudError::Write {
        url: object.clone(),
        path: path.clone(),
        source,
    };
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(write_error)?;
    }
    let options = GetOptions {
        if_match: file.e_tag.clone(),
        ..GetOptions::default()
    };
    let read_error = |source| match source {
        object_store::Error::Precondition { .. } => CloudError::Changed {
            url: object.clone(),
            detail: "its ETag is no longer the one listed".into(),
        },
        source => CloudError::Get {
            url: object.clone(),
            source,
        },
    };
    let mut body = store
        .get_opts(&file.location, options)
        .await
        .map_err(read_error)?
        .into_stream();
    let mut out = tokio::fs::File::create(&path).await.map_err(write_error)?;
    let mut written = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(read_error)?;
        out.write_all(&chunk).await.map_err(write_error)?;
        written += chunk.len() as u64;
    }
    out.flush().await.map_err(write_error)?;
    if written != file.size {
        return Err(CloudError::Changed {
            url: object,
            detail: format!("listed with {} bytes, read {written}", file.size),
        });
    }
    let out = out.into_std().await;
    out.set_modified(stamp(file)).map_err(write_error)
}

/// The modification time a copy gets: the object's, plus a fraction of a
/// second drawn from its ETag. Stores give times to the second (S3, Azure)
/// or millisecond, so an object overwritten within the same second with as
/// many bytes would otherwise look unchanged to the engine's fingerprint.
pub fn stamp(file: &RemoteFile) -> SystemTime {
    let mut hasher = DefaultHasher::new();
    file.e_tag.hash(&mut hasher);
    file.size.hash(&mut hasher);
    file.modified + Duration::from_nanos(hasher.finish() % 1_000_000_000)
}

/// Gives each folder the newest modification time of the objects below it.
fn date_folders(dest: &Path, files: &[RemoteFile]) -> std::io::Result<()> {
    let mut newest: BTreeMap<PathBuf, SystemTime> = BTreeMap::new();
    for file in files {
        let stamp = stamp(file);
        for folder in Path::new(&file.relative).ancestors().skip(1) {
            let time = newest.entry(folder.to_path_buf()).or_insert(stamp);
            *time = (*time).max(stamp);
        }
    }
    // Deepest first: dating a folder does not touch its parent.
    let mut folders: Vec<_> = newest.into_iter().collect();
    folders.sort_by_key(|(folder, _)| std::cmp::Reverse(folder.components().count()));
    for (folder, time) in folders {
        std::fs::File::open(dest.join(folder))?.set_modified(time)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};

    use super::*;
    use crate::listing::list_models;

    async fn store_with(files: &[(&str, &str)]) -> Arc<dyn ObjectStore> {
        let store = Arc::new(InMemory::new());
        for (key, body) in files {
            let payload = PutPayload::from(body.as_bytes().to_vec());
            store.put(&(*key).into(), payload).await.unwrap();
        }
        store
    }

    #[tokio::test]
    async fn a_model_is_copied_with_its_dates() {
        let store = store_with(&[
            ("repo/m/config.pbtxt", "name: \"m\""),
            ("repo/m/1/model.onnx", "onnx"),
        ])
        .await;
        let url = CloudUrl::parse("s3://bucket/repo").unwrap();
        let models = list_models(store.as_ref(), &url).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("m");
        copy_model(&store, &url, "m", &models["m"], &dest)
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(dest.join("1/model.onnx")).unwrap(),
            "onnx"
        );
        let listed = stamp(&models["m"].files[0]);
        let modified = |p: &str| std::fs::metadata(dest.join(p)).unwrap().modified().unwrap();
        assert_eq!(modified("1/model.onnx"), listed);
        assert_eq!(modified("1"), listed);
        // Copied again, the folder fingerprints the same.
        let again = dir.path().join("again");
        copy_model(&store, &url, "m", &models["m"], &again)
            .await
            .unwrap();
        let fingerprint = |p: &Path| nereid_repository::fingerprint(&p.join("1")).unwrap();
        assert_eq!(fingerprint(&dest), fingerprint(&again));
    }

    #[test]
    fn an_overwrite_within_the_second_changes_the_stamp() {
        let file = |tag: &str| RemoteFile {
            relative: "1/model.onnx".into(),
            location: "m/1/model.onnx".into(),
            size: 3,
            e_tag: Some(tag.into()),
            modified: std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        };
        assert_eq!(stamp(&file("a")), stamp(&file("a")));
        assert_ne!(stamp(&file("a")), stamp(&file("b")));
        let offset = stamp(&file("a"))
            .duration_since(file("a").modified)
            .unwrap();
        assert!(offset < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn an_object_overwritten_meanwhile_fails_the_copy() {
        let store = store_with(&[("m/1/model.onnx", "old")]).await;
        let url = CloudUrl::parse("gs://bucket").unwrap();
        let models = list_models(store.as_ref(), &url).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let payload = PutPayload::from(b"newer".to_vec());
        store.put(&"m/1/model.onnx".into(), payload).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let err = copy_model(&store, &url, "m", &models["m"], dir.path())
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("gs://bucket/m/1/model.onnx changed while it was copied"),
            "{text}"
        );
    }
}
