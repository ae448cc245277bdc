//! Credentials as Triton takes them: from `TRITON_CLOUD_CREDENTIAL_PATH`,
//! a JSON file with per-prefix credentials for each store (the longest
//! prefix of the repository URL wins, `""` matches all), or else from the
//! environment (`AWS_*`, `GOOGLE_APPLICATION_CREDENTIALS`,
//! `AZURE_STORAGE_*`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::error::CloudError;
use crate::url::{CloudUrl, Location};

/// Reads an environment variable; tests pass their own.
pub type Vars<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process's environment, empty values counting as unset.
pub fn process_vars(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Triton's S3 credential; empty fields are unset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct S3Credential {
    pub secret_key: String,
    pub key_id: String,
    pub region: String,
    pub session_token: String,
    pub profile: String,
}

/// Triton's GCS credential: the path of a JSON key file (a service
/// account's or an authorized user's); empty for none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct GcsCredential {
    pub path: String,
}

/// Triton's Azure credential; empty fields are unset. `auth_type` is
/// `key` (the default), `managed_identity` or `default`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct AzureCredential {
    pub account_str: String,
    pub account_key: String,
    pub auth_type: String,
    pub client_id: String,
}

/// The credential for one repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    S3(S3Credential),
    Gcs(GcsCredential),
    Azure(AzureCredential),
}

/// The file's layout: per store, credentials by URL prefix.
#[derive(Debug, Default, Deserialize)]
struct CredentialFile {
    #[serde(default)]
    s3: BTreeMap<String, S3Credential>,
    #[serde(default)]
    gs: BTreeMap<String, GcsCredential>,
    #[serde(rename = "as", default)]
    azure: BTreeMap<String, AzureCredential>,
}

/// The credential `url` is read with.
pub fn credential_for(url: &CloudUrl, vars: Vars<'_>) -> Result<Credential, CloudError> {
    match vars("TRITON_CLOUD_CREDENTIAL_PATH") {
        Some(path) => from_file(url, Path::new(&path)),
        None => Ok(from_vars(url, vars)),
    }
}

fn from_vars(url: &CloudUrl, vars: Vars<'_>) -> Credential {
    let var = |name: &str| vars(name).unwrap_or_default();
    match url.location {
        Location::S3 { .. } => Credential::S3(S3Credential {
            secret_key: var("AWS_SECRET_ACCESS_KEY"),
            key_id: var("AWS_ACCESS_KEY_ID"),
            region: var("AWS_DEFAULT_REGION"),
            session_token: var("AWS_SESSION_TOKEN"),
            profile: var("AWS_PROFILE"),
        }),
        Location::Gcs { .. } => Credential::Gcs(GcsCredential {
            path: var("GOOGLE_APPLICATION_CREDENTIALS"),
        }),
        Location::Azure { .. } => {
            let account_key = var("AZURE_STORAGE_KEY");
            let auth_type = match var("AZURE_STORAGE_AUTH_TYPE") {
                // As Triton: a key without an auth type means key auth.
                t if t.is_empty() && !account_key.is_empty() => "key".to_string(),
                t => t,
            };
            Credential::Azure(AzureCredential {
                account_str: var("AZURE_STORAGE_ACCOUNT"),
                account_key,
                auth_type,
                client_id: var("AZURE_STORAGE_CLIENT_ID"),
            })
        }
    }
}

fn from_file(url: &CloudUrl, path: &Path) -> Result<Credential, CloudError> {
    let bad = |reason: String| CloudError::CredentialFile {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let file: CredentialFile = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let missing = |section| CloudError::NoCredential {
        path: path.to_path_buf(),
        url: url.text.clone(),
        section,
    };
    match url.location {
        Location::S3 { .. } => longest_match(&file.s3, &url.text)
            .map(Credential::S3)
            .ok_or_else(|| missing("s3")),
        Location::Gcs { .. } => longest_match(&file.gs, &url.text)
            .map(Credential::Gcs)
            .ok_or_else(|| missing("gs")),
        Location::Azure { .. } => longest_match(&file.azure, &url.text)
            .map(Credential::Azure)
            .ok_or_else(|| missing("as")),
    }
}

/// The credential under the longest key that `text` starts with.
fn longest_match<C: DeserializeOwned + Clone>(
    credentials: &BTreeMap<String, C>,
    text: &str,
) -> Option<C> {
    credentials
        .iter()
        .filter(|(prefix, _)| text.starts_with(prefix.as_str()))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, credential)| credential.clone())
}

/// Where the AWS files are: `AWS_SHARED_CREDENTIALS_FILE` and
/// `AWS_CONFIG_FILE`, else `~/.aws/credentials` and `~/.aws/config`.
pub fn aws_files(vars: Vars<'_>) -> (PathBuf, PathBuf) {
    let home = PathBuf::from(vars("HOME").unwrap_or_default()).join(".aws");
    let file = |var: &str, name: &str| vars(var).map_or_else(|| home.join(name), PathBuf::from);
    (
        file("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
        file("AWS_CONFIG_FILE", "config"),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn url(text: &str) -> CloudUrl {
        CloudUrl::parse(text).unwrap()
    }

    #[test]
    fn environment_variables() {
        let env = vars(&[
            ("AWS_ACCESS_KEY_ID", "id"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/k.json"),
            ("AZURE_STORAGE_ACCOUNT", "acct"),
            ("AZURE_STORAGE_KEY", "a2V5"),
        ]);
        let Credential::S3(s3) = credential_for(&url("s3://b/m"), &env).unwrap() else {
            panic!("not S3")
        };
        assert_eq!(
            (s3.key_id.as_str(), s3.region.as_str()),
            ("id", "eu-west-1")
        );
        assert_eq!(
            credential_for(&url("gs://b"), &env).unwrap(),
            Credential::Gcs(GcsCredential {
                path: "/k.json".into()
            })
        );
        let Credential::Azure(azure) = credential_for(&url("as://a/c"), &env).unwrap() else {
            panic!("not Azure")
        };
        assert_eq!(azure.auth_type, "key");
        assert_eq!(azure.account_str, "acct");
    }

    #[test]
    fn the_file_wins_by_longest_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cloud.json");
        std::fs::write(
            &path,
            r#"{
              "gs": {"": "/default.json", "gs://special": "/special.json"},
              "s3": {"": {"key_id": "default"},
                     "s3://bucket-2": {"key_id": "two", "secret_key": "s", "region": "r"}},
              "as": {"as://acct/c": {"account_str": "acct", "account_key": "k"}}
            }"#,
        )
        .unwrap();
        let env = vars(&[
            ("TRITON_CLOUD_CREDENTIAL_PATH", path.to_str().unwrap()),
            ("AWS_ACCESS_KEY_ID", "from-env"),
        ]);
        let key_id = |text: &str| match credential_for(&url(text), &env).unwrap() {
            Credential::S3(c) => c.key_id,
            other => panic!("{other:?}"),
        };
        assert_eq!(key_id("s3://bucket-2/models"), "two");
        assert_eq!(
            key_id("s3://other/models"),
            "default",
            "the file, not the env"
        );
        let gcs = credential_for(&url("gs://special/m"), &env).unwrap();
        assert_eq!(
            gcs,
            Credential::Gcs(GcsCredential {
                path: "/special.json".into()
            })
        );
        let err = credential_for(&url("as://other/c"), &env).unwrap_err();
        assert!(err.to_string().contains("'as' keys"), "{err}");
    }

    #[test]
    fn a_bad_file_is_named() {
        let env = vars(&[("TRITON_CLOUD_CREDENTIAL_PATH", "/nonexistent/cloud.json")]);
        let err = credential_for(&url("s3://b"), &env).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/cloud.json"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        std::fs::write(&path, "{\"s3\": [").unwrap();
        let env = vars(&[("TRITON_CLOUD_CREDENTIAL_PATH", path.to_str().unwrap())]);
        let err = credential_for(&url("s3://b"), &env).unwrap_err();
        assert!(err.to_string().contains("bad.json"), "{err}");
    }

    #[test]
    fn aws_file_locations() {
        let env = vars(&[("HOME", "/home/u")]);
        assert_eq!(
            aws_files(&env),
            (
                PathBuf::from("/home/u/.aws/credentials"),
                PathBuf::from("/home/u/.aws/config")
            )
        );
        let env = vars(&[("HOME", "/h"), ("AWS_CONFIG_FILE", "/etc/aws.cfg")]);
        assert_eq!(aws_files(&env).1, PathBuf::from("/etc/aws.cfg"));
    }
}
