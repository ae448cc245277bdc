//! Version folders and the version policy, as Triton's
//! `ModelRepositoryManager::VersionsToLoad` (core/src/model_repository_manager.cc).

use std::collections::BTreeSet;
use std::path::Path;

use nereid_core::model_config::ModelVersionPolicy;
use nereid_core::model_config::model_version_policy::{Latest, PolicyChoice};

/// The numeric version folders of a model folder. Like Triton, a folder
/// whose name is not a number, or has a leading zero ("01"), is ignored.
pub(crate) fn list_versions(model_dir: &Path) -> std::io::Result<BTreeSet<i64>> {
    let mut versions = BTreeSet::new();
    for entry in std::fs::read_dir(model_dir)? {
        let entry = entry?;
        // `metadata` follows symlinks: a linked version folder counts.
        if !std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        match parse_version(name) {
            Some(version) => {
                versions.insert(version);
            }
            None if name.starts_with('.') => {}
            None => tracing::debug!(
                folder = %entry.path().display(),
                "ignoring a folder that is not a version number"
            ),
        }
    }
    Ok(versions)
}

fn parse_version(name: &str) -> Option<i64> {
    let digits_only = !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = name.len() > 1 && name.starts_with('0');
    if !digits_only || leading_zero {
        return None;
    }
    name.parse().ok()
}

/// The policy Triton applies when the config names none: the latest version.
pub(crate) fn default_policy() -> ModelVersionPolicy {
    ModelVersionPolicy {
        policy_choice: Some(PolicyChoice::Latest(Latest { num_versions: 1 })),
    }
}

/// The versions `policy` selects among `on_disk`, ascending. A version that
/// `specific` names but that has no folder is logged and skipped, as Triton
/// does; the model still loads with the others.
pub(crate) fn select(
    policy: &ModelVersionPolicy,
    on_disk: &BTreeSet<i64>,
    model: &str,
) -> Vec<i64> {
    match &policy.policy_choice {
        None => select(&default_policy(), on_disk, model),
        Some(PolicyChoice::All(_)) => on_disk.iter().copied().collect(),
        Some(PolicyChoice::Latest(latest)) => {
            let n = usize::try_from(latest.num_versions).unwrap_or(usize::MAX);
            let mut newest: Vec<i64> = on_disk.iter().rev().take(n).copied().collect();
            newest.reverse();
            newest
        }
        Some(PolicyChoice::Specific(specific)) => {
            let mut chosen = BTreeSet::new();
            for &version in &specific.versions {
                if on_disk.contains(&version) {
                    chosen.insert(version);
                } else {
                    tracing::error!(
                        model,
                        version,
                        "version {version} is specified for model '{model}', but the version directory is not present"
                    );
                }
            }
            chosen.into_iter().collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::model_version_policy::{All, Specific};

    use super::*;

    fn policy(choice: PolicyChoice) -> ModelVersionPolicy {
        ModelVersionPolicy {
            policy_choice: Some(choice),
        }
    }

    fn disk(versions: &[i64]) -> BTreeSet<i64> {
        versions.iter().copied().collect()
    }

    #[test]
    fn latest_defaults_to_one() {
        assert_eq!(
            select(&ModelVersionPolicy::default(), &disk(&[1, 3, 2]), "m"),
            vec![3]
        );
        assert_eq!(
            select(&default_policy(), &disk(&[]), "m"),
            Vec::<i64>::new()
        );
    }

    #[test]
    fn latest_n_is_ascending() {
        let p = policy(PolicyChoice::Latest(Latest { num_versions: 2 }));
        assert_eq!(select(&p, &disk(&[1, 10, 2, 7]), "m"), vec![7, 10]);
        let p = policy(PolicyChoice::Latest(Latest { num_versions: 9 }));
        assert_eq!(select(&p, &disk(&[1, 2]), "m"), vec![1, 2]);
        let p = policy(PolicyChoice::Latest(Latest { num_versions: 0 }));
        assert_eq!(select(&p, &disk(&[1, 2]), "m"), Vec::<i64>::new());
    }

    #[test]
    fn all_selects_everything() {
        let p = policy(PolicyChoice::All(All {}));
        assert_eq!(select(&p, &disk(&[3, 1, 2]), "m"), vec![1, 2, 3]);
    }

    #[test]
    fn specific_skips_missing_versions() {
        let p = policy(PolicyChoice::Specific(Specific {
            versions: vec![4, 1, 1, 9],
        }));
        assert_eq!(select(&p, &disk(&[1, 2, 4]), "m"), vec![1, 4]);
        let p = policy(PolicyChoice::Specific(Specific { versions: vec![9] }));
        assert!(select(&p, &disk(&[1]), "m").is_empty());
    }

    #[test]
    fn version_folder_names() {
        assert_eq!(parse_version("1"), Some(1));
        assert_eq!(parse_version("0"), Some(0));
        assert_eq!(parse_version("42"), Some(42));
        for bad in [
            "",
            "01",
            "1a",
            "-1",
            "+1",
            "v1",
            ".1",
            "99999999999999999999",
        ] {
            assert_eq!(parse_version(bad), None, "{bad}");
        }
    }

    #[test]
    fn lists_numeric_folders_only() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["1", "3", "007", "latest", ".2", "warmup"] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        std::fs::write(dir.path().join("5"), "a file, not a folder").unwrap();
        assert_eq!(list_versions(dir.path()).unwrap(), disk(&[1, 3]));
    }
}
