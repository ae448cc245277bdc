//! A profile from the AWS shared files (`~/.aws/credentials` and
//! `~/.aws/config`, INI), as the AWS SDK that Triton links reads them: keys
//! from the credentials file's `[name]`, then the config file's
//! `[profile name]` (`[default]` for the default profile).

use std::collections::HashMap;
use std::io;
use std::path::Path;

use crate::error::CloudError;

/// What a profile sets; `None` where it sets nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsProfile {
    pub key_id: Option<String>,
    pub secret_key: Option<String>,
    pub session_token: Option<String>,
    pub region: Option<String>,
}

type Sections = HashMap<String, HashMap<String, String>>;

/// Reads `profile` from the two files; `None` when neither has it. A
/// missing file counts as empty.
pub fn read_profile(
    profile: &str,
    credentials: &Path,
    config: &Path,
) -> Result<Option<AwsProfile>, CloudError> {
    let credentials = sections(credentials)?;
    let config = sections(config)?;
    let config_name = match profile {
        "default" => "default".to_string(),
        name => format!("profile {name}"),
    };
    let from_credentials = credentials.get(profile);
    let from_config = config
        .get(&config_name)
        .or_else(|| config.get(&format!("profile {profile}")));
    if from_credentials.is_none() && from_config.is_none() {
        return Ok(None);
    }
    let get = |key: &str| {
        from_credentials
            .and_then(|s| s.get(key))
            .or_else(|| from_config.and_then(|s| s.get(key)))
            .cloned()
    };
    Ok(Some(AwsProfile {
        key_id: get("aws_access_key_id"),
        secret_key: get("aws_secret_access_key"),
        session_token: get("aws_session_token"),
        region: get("region"),
    }))
}

fn sections(path: &Path) -> Result<Sections, CloudError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(parse_ini(&text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Sections::new()),
        Err(source) => Err(CloudError::AwsFile {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// `[section]` headers and `key = value` lines; `#` and `;` start
/// comments; indented lines (a nested block such as `s3 =`) are skipped.
fn parse_ini(text: &str) -> Sections {
    let mut sections = Sections::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            sections.entry(name.clone()).or_default();
            current = Some(name);
            continue;
        }
        let (Some(section), Some((key, value))) = (&current, line.split_once('=')) else {
            continue;
        };
        if let Some(keys) = sections.get_mut(section) {
            keys.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREDENTIALS: &str = "\
# a comment
[default]
aws_access_key_id = AKIDEFAULT
aws_secret_access_key=secret-default

[ci]
aws_access_key_id = AKICI
aws_secret_access_key = secret-ci
aws_session_token = token-ci
";

    const CONFIG: &str = "\
[default]
region = us-west-2

[profile ci]
region = eu-central-1
s3 =
  addressing_style = path
[profile only-config]
aws_access_key_id = AKICONFIG
aws_secret_access_key = secret-config
";

    fn files() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let credentials = dir.path().join("credentials");
        let config = dir.path().join("config");
        std::fs::write(&credentials, CREDENTIALS).unwrap();
        std::fs::write(&config, CONFIG).unwrap();
        (dir, credentials, config)
    }

    #[test]
    fn profiles_merge_both_files() {
        let (_dir, credentials, config) = files();
        let default = read_profile("default", &credentials, &config)
            .unwrap()
            .unwrap();
        assert_eq!(default.key_id.as_deref(), Some("AKIDEFAULT"));
        assert_eq!(default.secret_key.as_deref(), Some("secret-default"));
        assert_eq!(default.region.as_deref(), Some("us-west-2"));
        let ci = read_profile("ci", &credentials, &config).unwrap().unwrap();
        assert_eq!(ci.session_token.as_deref(), Some("token-ci"));
        assert_eq!(ci.region.as_deref(), Some("eu-central-1"));
        let only = read_profile("only-config", &credentials, &config)
            .unwrap()
            .unwrap();
        assert_eq!(only.key_id.as_deref(), Some("AKICONFIG"));
        assert_eq!(only.region, None);
    }

    #[test]
    fn absent_profiles_and_files() {
        let (dir, credentials, config) = files();
        assert_eq!(read_profile("nope", &credentials, &config).unwrap(), None);
        let missing = dir.path().join("missing");
        assert_eq!(read_profile("default", &missing, &missing).unwrap(), None);
    }
}
