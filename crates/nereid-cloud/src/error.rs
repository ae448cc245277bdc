//! What goes wrong with a cloud repository. Every error about the store
//! names the bucket (or container) and the key as a URL, and carries the
//! store's own error.

use std::io;
use std::path::PathBuf;

/// A repository URL that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed cloud repository URL '{url}': {reason}")]
pub struct UrlError {
    pub url: String,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    #[error(transparent)]
    Url(#[from] UrlError),

    #[error(
        "cannot read the cloud credential file {path} (TRITON_CLOUD_CREDENTIAL_PATH): {reason}"
    )]
    CredentialFile { path: PathBuf, reason: String },

    #[error(
        "no credential in {path} (TRITON_CLOUD_CREDENTIAL_PATH) matches '{url}': its '{section}' keys must include a prefix of the URL, or \"\""
    )]
    NoCredential {
        path: PathBuf,
        url: String,
        section: &'static str,
    },

    #[error("cannot read the AWS file {path}: {source}")]
    AwsFile { path: PathBuf, source: io::Error },

    #[error("the AWS profile '{profile}' is in neither {credentials} nor {config}")]
    NoAwsProfile {
        profile: String,
        credentials: PathBuf,
        config: PathBuf,
    },

    #[error("cannot set up the client for {url}: {source}")]
    Client {
        url: String,
        source: object_store::Error,
    },

    #[error("cannot list {url}: {source}")]
    List {
        url: String,
        source: object_store::Error,
    },

    #[error("cannot copy {url}: {source}")]
    Get {
        url: String,
        source: object_store::Error,
    },

    #[error("{url} changed while it was copied ({detail}); it is copied again at the next look")]
    Changed { url: String, detail: String },

    #[error("cannot write {path}, the copy of {url}: {source}")]
    Write {
        url: String,
        path: PathBuf,
        source: io::Error,
    },

    #[error("cannot make the local folder for {url} in {path}: {source}")]
    Local {
        url: String,
        path: PathBuf,
        source: io::Error,
    },

    #[error("cannot start the object store client: {0}")]
    Runtime(io::Error),
}
