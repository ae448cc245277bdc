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

    #[error("cannot set up the client for {url}: {}", store_words(source))]
    Client {
        url: String,
        source: object_store::Error,
    },

    #[error("cannot list {url}: {}", store_words(source))]
    List {
        url: String,
        source: object_store::Error,
    },

    #[error("cannot copy {url}: {}", store_words(source))]
    Get {
        url: String,
        source: object_store::Error,
    },

    #[error("{url} changed while it was copied ({detail})")]
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

/// The store's error on one line: an XML error body (S3's and Azure's) is
/// cut down to its code and message.
pub fn store_words(error: &object_store::Error) -> String {
    let mut text = error.to_string();
    // The cause a network error hides under "request or response body
    // error" and the like.
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        let words = inner.to_string();
        if !text.contains(&words) {
            text = format!("{text}: {words}");
        }
        cause = inner.source();
    }
    let (before, body) = match text.split_once("<?xml") {
        Some((before, body)) => (before.trim_end(), Some(body)),
        None => (text.as_str(), None),
    };
    let words = match body.and_then(|b| Some((element(b, "Code")?, element(b, "Message")))) {
        Some((code, Some(message))) => format!("{before} {code}: {message}"),
        Some((code, None)) => format!("{before} {code}"),
        None => text.clone(),
    };
    words.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text of the first `<name>` element in `xml`.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let start = xml.find(&format!("<{name}>"))? + name.len() + 2;
    let end = start + xml[start..].find(&format!("</{name}>"))?;
    Some(xml[start..end].trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: text.to_string().into(),
        }
    }

    #[test]
    fn xml_bodies_read_as_code_and_message() {
        let error = generic(
            "Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\"?>\n<Error><Code>InvalidAccessKeyId</Code><Message>The key\nis unknown.</Message><BucketName>b</BucketName></Error>",
        );
        assert_eq!(
            store_words(&error),
            "Generic S3 error: Server returned non-2xx status code: 403 Forbidden: InvalidAccessKeyId: The key is unknown."
        );
        let plain = generic("connection refused\n(os error 111)");
        assert_eq!(
            store_words(&plain),
            "Generic S3 error: connection refused (os error 111)"
        );
    }
}
