//! Which AWS keys and region an S3 repository is read with, in the order of
//! the AWS SDK's default chain that Triton relies on: the credential's keys
//! (the environment's, or `TRITON_CLOUD_CREDENTIAL_PATH`'s), else the
//! profile's in the AWS files, else the environment's; when none has keys,
//! `object_store` goes on down the chain (web identity, container and
//! instance credentials).

use crate::aws_profile::{AwsProfile, read_profile};
use crate::credentials::{S3Credential, Vars, aws_files};
use crate::error::CloudError;

/// Keys and region to sign with; empty fields are unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsKeys {
    pub key_id: String,
    pub secret_key: String,
    pub session_token: String,
    pub region: String,
}

impl AwsKeys {
    pub fn has_keys(&self) -> bool {
        !self.key_id.is_empty() && !self.secret_key.is_empty()
    }
}

pub fn resolve(credential: &S3Credential, vars: Vars<'_>) -> Result<AwsKeys, CloudError> {
    let given = AwsKeys {
        key_id: credential.key_id.clone(),
        secret_key: credential.secret_key.clone(),
        session_token: credential.session_token.clone(),
        region: credential.region.clone(),
    };
    let profile = profile(credential, vars)?;
    let from_profile = AwsKeys {
        key_id: profile.key_id.unwrap_or_default(),
        secret_key: profile.secret_key.unwrap_or_default(),
        session_token: profile.session_token.unwrap_or_default(),
        region: profile.region.unwrap_or_default(),
    };
    let var = |name: &str| vars(name).unwrap_or_default();
    let from_environment = AwsKeys {
        key_id: var("AWS_ACCESS_KEY_ID"),
        secret_key: var("AWS_SECRET_ACCESS_KEY"),
        session_token: var("AWS_SESSION_TOKEN"),
        region: vars("AWS_REGION").unwrap_or_else(|| var("AWS_DEFAULT_REGION")),
    };
    let regions = [&given, &from_profile, &from_environment].map(|k| k.region.clone());
    let mut keys = [given, from_profile, from_environment]
        .into_iter()
        .find(AwsKeys::has_keys)
        .unwrap_or_default();
    keys.region = regions
        .into_iter()
        .find(|r| !r.is_empty())
        .unwrap_or_default();
    Ok(keys)
}

/// The profile the credential or `AWS_PROFILE` names, else `default`; a
/// profile named must exist.
fn profile(credential: &S3Credential, vars: Vars<'_>) -> Result<AwsProfile, CloudError> {
    let named = !credential.profile.is_empty();
    let name = if named {
        credential.profile.as_str()
    } else {
        "default"
    };
    let (credentials, config) = aws_files(vars);
    match read_profile(name, &credentials, &config)? {
        Some(found) => Ok(found),
        None if named => Err(CloudError::NoAwsProfile {
            profile: name.to_string(),
            credentials,
            config,
        }),
        None => Ok(AwsProfile::default()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn with_home(pairs: &[(&str, &str)]) -> (tempfile::TempDir, impl Fn(&str) -> Option<String>) {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".aws")).unwrap();
        std::fs::write(
            home.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = PROFILE\naws_secret_access_key = p\n",
        )
        .unwrap();
        std::fs::write(
            home.path().join(".aws/config"),
            "[default]\nregion = eu-north-1\n",
        )
        .unwrap();
        let mut map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        map.insert("HOME".into(), home.path().display().to_string());
        (home, move |name: &str| map.get(name).cloned())
    }

    fn keys(id: &str, secret: &str) -> S3Credential {
        S3Credential {
            key_id: id.into(),
            secret_key: secret.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_credential_then_the_profile_then_the_environment() {
        let (_home, vars) = with_home(&[
            ("AWS_ACCESS_KEY_ID", "ENV"),
            ("AWS_SECRET_ACCESS_KEY", "e"),
            ("AWS_SESSION_TOKEN", "env-token"),
        ]);
        let given = resolve(&keys("FILE", "f"), &vars).unwrap();
        assert_eq!(
            (given.key_id.as_str(), given.session_token.as_str()),
            ("FILE", "")
        );
        assert_eq!(given.region, "eu-north-1", "the profile's region");
        let profile = resolve(&keys("", ""), &vars).unwrap();
        assert_eq!(profile.key_id, "PROFILE");
    }

    #[test]
    fn the_environment_when_no_profile_has_keys() {
        let home = tempfile::tempdir().unwrap();
        let home_path = home.path().display().to_string();
        let vars = move |name: &str| match name {
            "HOME" => Some(home_path.clone()),
            "AWS_ACCESS_KEY_ID" => Some("ENV".into()),
            "AWS_SECRET_ACCESS_KEY" => Some("e".into()),
            "AWS_DEFAULT_REGION" => Some("ap-south-1".into()),
            _ => None,
        };
        let found = resolve(&keys("", ""), &vars).unwrap();
        assert_eq!(
            (found.key_id.as_str(), found.region.as_str()),
            ("ENV", "ap-south-1")
        );
        let none = |name: &str| (name == "HOME").then(|| "/nonexistent".to_string());
        assert!(!resolve(&keys("", ""), &none).unwrap().has_keys());
    }

    #[test]
    fn a_named_profile_must_exist() {
        let (_home, vars) = with_home(&[]);
        let named = S3Credential {
            profile: "ci".into(),
            ..Default::default()
        };
        let err = resolve(&named, &vars).unwrap_err();
        assert!(err.to_string().contains("profile 'ci'"), "{err}");
    }
}
