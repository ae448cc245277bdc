//! Repository roots whose model folders are local copies of models kept
//! elsewhere (an object store). The repository reads only the copies; the
//! engine asks a [`Mirror`] to bring them up to date before it scans.

use std::fmt;
use std::path::Path;

/// Why a mirror could not be refreshed, or could not copy one model.
pub type MirrorError = Box<dyn std::error::Error + Send + Sync>;

/// Which models a refresh copies.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// Every model in the store.
    All,
    /// Only these; the others are listed by name (an empty folder each) so
    /// that the repository index shows them, and are copied when asked for.
    Models(&'a [String]),
}

impl Scope<'_> {
    pub fn includes(&self, model: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Models(names) => names.iter().any(|n| n == model),
        }
    }
}

/// A model a refresh could not copy. Its previous copy, if any, stays.
#[derive(Debug)]
pub struct CopyFailure {
    pub model: String,
    pub error: MirrorError,
}

/// A local folder kept as a copy of a remote repository. A refresh lists
/// the remote models, copies each changed one into a new folder and only
/// then swaps it in, so a scan never sees a model half-copied, and removes
/// the models that are gone.
pub trait Mirror: Send + Sync + fmt::Debug {
    /// The local folder the copies are in: a repository root.
    fn root(&self) -> &Path;

    /// Where the models come from, as the user wrote it (`s3://bucket/path`).
    fn origin(&self) -> &str;

    /// Brings the copies `scope` names up to date. Blocks. Fails as a whole
    /// only when the remote repository cannot be listed (nothing changes
    /// then); models that could not be copied are returned. Errors name
    /// the remote repository or object they are about.
    fn refresh(&self, scope: Scope<'_>) -> Result<Vec<CopyFailure>, MirrorError>;

    /// Deletes the local copies, once the server has stopped. (Dropping
    /// the mirror would too, but a thread that is never joined may hold it
    /// when the process exits.)
    fn close(&self);
}

/// Rewrites the local paths of `mirrors`' copies in `text` as their
/// origins, so that an error about a copied file names the object.
pub fn name_origins(mirrors: &[std::sync::Arc<dyn Mirror>], text: &str) -> String {
    mirrors.iter().fold(text.to_string(), |text, mirror| {
        let root = mirror.root().display().to_string();
        text.replace(&root, mirror.origin().trim_end_matches('/'))
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use super::*;

    #[derive(Debug)]
    struct Fixed(PathBuf);

    impl Mirror for Fixed {
        fn root(&self) -> &Path {
            &self.0
        }
        fn origin(&self) -> &str {
            "s3://bucket/models/"
        }
        fn refresh(&self, _: Scope<'_>) -> Result<Vec<CopyFailure>, MirrorError> {
            Ok(Vec::new())
        }
        fn close(&self) {}
    }

    #[test]
    fn local_paths_read_as_objects() {
        let mirrors: Vec<Arc<dyn Mirror>> = vec![Arc::new(Fixed("/tmp/nereid-x/models".into()))];
        let text = "failed to parse /tmp/nereid-x/models/simple/config.pbtxt: line 3";
        assert_eq!(
            name_origins(&mirrors, text),
            "failed to parse s3://bucket/models/simple/config.pbtxt: line 3"
        );
    }

    #[test]
    fn scopes() {
        let names = ["a".to_string()];
        assert!(Scope::All.includes("b"));
        assert!(Scope::Models(&names).includes("a"));
        assert!(!Scope::Models(&names).includes("b"));
    }
}
