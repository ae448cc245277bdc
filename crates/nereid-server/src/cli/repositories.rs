//! `--model-repository` values: local folders and cloud repositories
//! (`s3://`, `gs://`, `as://`), which are copied to local folders that the
//! engine scans like the others.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use nereid_cloud::{CloudRepository, CloudUrl, is_cloud_url, unknown_scheme};
use nereid_repository::Mirror;

/// One `--model-repository` as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepositoryArg {
    Local(PathBuf),
    Cloud(CloudUrl),
}

/// Parses a `--model-repository` value: a malformed cloud URL, or a URL
/// of a kind Nereid does not read, is refused with the reason.
pub fn parse_repository(text: &str) -> Result<RepositoryArg, String> {
    if is_cloud_url(text) {
        return CloudUrl::parse(text)
            .map(RepositoryArg::Cloud)
            .map_err(|e| e.to_string());
    }
    if let Some(scheme) = unknown_scheme(text) {
        return Err(format!(
            "'{scheme}://' repositories are not supported: use a local folder, s3://, gs:// or as://"
        ));
    }
    Ok(RepositoryArg::Local(PathBuf::from(text)))
}

/// The folders the engine scans, in the order given, and the cloud
/// repositories copied into some of them.
#[derive(Debug, Default)]
pub struct Repositories {
    pub roots: Vec<PathBuf>,
    pub mirrors: Vec<Arc<dyn Mirror>>,
}

/// Opens the repositories: local folders must exist; cloud repositories
/// get their client and local folder now (nothing is read from them
/// before the models load).
pub fn open_repositories(args: Vec<RepositoryArg>) -> anyhow::Result<Repositories> {
    let mut roots = Vec::new();
    let mut mirrors: Vec<Arc<dyn Mirror>> = Vec::new();
    for arg in args {
        match arg {
            RepositoryArg::Local(path) => {
                if !path.is_dir() {
                    anyhow::bail!("--model-repository {} is not a folder", path.display());
                }
                roots.push(path);
            }
            RepositoryArg::Cloud(url) => {
                let text = url.text.clone();
                let cloud = CloudRepository::open(url)
                    .with_context(|| format!("--model-repository {text}"))?;
                roots.push(cloud.root().to_path_buf());
                mirrors.push(Arc::new(cloud));
            }
        }
    }
    Ok(Repositories { roots, mirrors })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_by_kind() {
        assert_eq!(
            parse_repository("/models"),
            Ok(RepositoryArg::Local("/models".into()))
        );
        let Ok(RepositoryArg::Cloud(url)) = parse_repository("s3://localhost:9000/b/m") else {
            panic!("not a cloud repository")
        };
        assert_eq!(url.to_string(), "s3://localhost:9000/b/m");
        let err = parse_repository("gs://").unwrap_err();
        assert!(err.contains("no bucket name"), "{err}");
        let err = parse_repository("https://host/models").unwrap_err();
        assert!(
            err.contains("'https://' repositories are not supported"),
            "{err}"
        );
    }

    #[test]
    fn a_cloud_repository_gets_a_local_folder() {
        let mount = tempfile::tempdir().unwrap();
        let url = CloudUrl::parse("s3://127.0.0.1:1/bucket/models").unwrap();
        let local = RepositoryArg::Local(mount.path().to_path_buf());
        let Repositories { roots, mirrors } =
            open_repositories(vec![local, RepositoryArg::Cloud(url)]).unwrap();
        assert_eq!(roots.len(), 2);
        assert_eq!(mirrors.len(), 1);
        assert_eq!(roots[1], mirrors[0].root());
        assert!(roots[1].is_dir());
        assert_eq!(mirrors[0].origin(), "s3://127.0.0.1:1/bucket/models");
        let folder = roots[1].clone();
        drop(mirrors);
        assert!(!folder.exists(), "the copy goes with the repository");
    }

    #[test]
    fn a_missing_folder_is_named() {
        let err =
            open_repositories(vec![RepositoryArg::Local("/nonexistent/repo".into())]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--model-repository /nonexistent/repo is not a folder"
        );
    }
}
