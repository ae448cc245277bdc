//! Triton's repository URLs: `s3://bucket/path`, `s3://host:port/bucket/path`
//! (an S3-compatible server; `s3://https://host:port/...` for TLS),
//! `gs://bucket/path` and `as://account/container/path`. Repeated slashes
//! collapse and a trailing slash is dropped, as Triton cleans S3 paths.

use std::fmt;

use crate::error::UrlError;

/// Which store holds the repository, and which bucket or container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    S3 {
        /// `http://host:port` or `https://host:port`; `None` for AWS.
        endpoint: Option<String>,
        bucket: String,
    },
    Gcs {
        bucket: String,
    },
    Azure {
        /// The account, without `.blob.core.windows.net`.
        account: String,
        container: String,
    },
}

/// A parsed cloud repository URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudUrl {
    pub location: Location,
    /// The repository's folder in the bucket, without leading or trailing
    /// slashes; empty for the bucket's root.
    pub prefix: String,
    /// As the user wrote it: credentials in `TRITON_CLOUD_CREDENTIAL_PATH`
    /// are matched against this, as Triton matches them.
    pub text: String,
}

/// Whether `text` names a cloud repository rather than a local folder.
pub fn is_cloud_url(text: &str) -> bool {
    ["s3://", "gs://", "as://"]
        .iter()
        .any(|scheme| text.starts_with(scheme))
}

/// A URL scheme Nereid does not read (`http://...`, `s3a://...`): a
/// repository that is neither local nor one of the three stores.
pub fn unknown_scheme(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let plain = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c));
    (plain && !is_cloud_url(text)).then_some(scheme)
}

impl CloudUrl {
    pub fn parse(text: &str) -> Result<CloudUrl, UrlError> {
        let bad = |reason: &str| UrlError {
            url: text.to_string(),
            reason: reason.to_string(),
        };
        let (location, prefix) = if let Some(rest) = text.strip_prefix("s3://") {
            parse_s3(rest).map_err(|r| bad(&r))?
        } else if let Some(rest) = text.strip_prefix("gs://") {
            parse_gcs(rest).map_err(|r| bad(&r))?
        } else if let Some(rest) = text.strip_prefix("as://") {
            parse_azure(rest).map_err(|r| bad(&r))?
        } else {
            return Err(bad(
                "not a cloud URL: it must start with s3://, gs:// or as://",
            ));
        };
        check_prefix(&prefix).map_err(|r| bad(&r))?;
        Ok(CloudUrl {
            location,
            prefix,
            text: text.to_string(),
        })
    }

    /// The environment variable naming the folder copies go to, Triton's.
    pub fn mount_variable(&self) -> &'static str {
        match self.location {
            Location::S3 { .. } => "TRITON_AWS_MOUNT_DIRECTORY",
            Location::Gcs { .. } => "TRITON_GCS_MOUNT_DIRECTORY",
            Location::Azure { .. } => "TRITON_AZURE_MOUNT_DIRECTORY",
        }
    }

    /// The URL of the object at `key` below the repository's folder.
    pub fn object(&self, key: &str) -> String {
        match key {
            "" => self.to_string(),
            key => format!("{}/{key}", self.to_string().trim_end_matches('/')),
        }
    }
}

/// The cleaned URL: `s3://bucket/path`, `s3://host:port/bucket/path` with
/// an endpoint (`s3://https://host:port/...` over TLS), `gs://...`,
/// `as://account/container/path`.
impl fmt::Display for CloudUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let root = match &self.location {
            Location::S3 {
                endpoint: Some(endpoint),
                bucket,
            } => {
                let endpoint = endpoint.strip_prefix("http://").unwrap_or(endpoint);
                format!("s3://{endpoint}/{bucket}")
            }
            Location::S3 {
                endpoint: None,
                bucket,
            } => format!("s3://{bucket}"),
            Location::Gcs { bucket } => format!("gs://{bucket}"),
            Location::Azure { account, container } => format!("as://{account}/{container}"),
        };
        match self.prefix.as_str() {
            "" => write!(f, "{root}"),
            prefix => write!(f, "{root}/{prefix}"),
        }
    }
}

/// Parts of a path between slashes; repeated and outer slashes vanish.
fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

fn parse_s3(rest: &str) -> Result<(Location, String), String> {
    let (scheme, rest) = if let Some(r) = rest.strip_prefix("https://") {
        (Some("https"), r)
    } else if let Some(r) = rest.strip_prefix("http://") {
        (Some("http"), r)
    } else {
        (None, rest)
    };
    let parts = segments(rest);
    let Some((first, others)) = parts.split_first() else {
        return Err("no bucket name found".into());
    };
    let endpoint = match host_port(first) {
        Some((host, port)) => {
            let scheme = scheme.unwrap_or("http");
            Some(format!("{scheme}://{host}:{port}"))
        }
        None if scheme.is_some() => {
            return Err(format!(
                "'{first}' is not host:port: an endpoint is written s3://{}://host:port/bucket/path",
                scheme.unwrap_or("http")
            ));
        }
        None => None,
    };
    let (bucket, path) = match endpoint {
        Some(_) => match others.split_first() {
            Some((bucket, path)) => (*bucket, path),
            None => return Err(format!("no bucket name found after the endpoint '{first}'")),
        },
        None => (*first, others),
    };
    check_bucket(bucket)?;
    let location = Location::S3 {
        endpoint,
        bucket: bucket.to_string(),
    };
    Ok((location, path.join("/")))
}

/// `host:port` as Triton's S3 pattern reads it: a host of letters, digits,
/// dots and dashes, and a port.
fn host_port(segment: &str) -> Option<(&str, u16)> {
    let (host, port) = segment.rsplit_once(':')?;
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    let port = port.parse::<u16>().ok().filter(|p| *p > 0)?;
    host_ok.then_some((host, port))
}

fn parse_gcs(rest: &str) -> Result<(Location, String), String> {
    let parts = segments(rest);
    let Some((bucket, path)) = parts.split_first() else {
        return Err("no bucket name found".into());
    };
    check_bucket(bucket)?;
    let location = Location::Gcs {
        bucket: bucket.to_string(),
    };
    Ok((location, path.join("/")))
}

/// Triton's pattern: `as://([^/]+)/([^/?]+)(?:/([^?]*))?(\?.*)?`; the
/// query is dropped.
fn parse_azure(rest: &str) -> Result<(Location, String), String> {
    let rest = rest.split_once('?').map_or(rest, |(path, _)| path);
    let (host, after) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() {
        return Err("no account name found: write as://account/container/path".into());
    }
    let account = host.strip_suffix(".blob.core.windows.net").unwrap_or(host);
    if !account.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(format!(
            "'{account}' is not a storage account name (letters and digits)"
        ));
    }
    let parts = segments(after);
    let Some((container, path)) = parts.split_first() else {
        return Err("no container name found: write as://account/container/path".into());
    };
    let container_ok = container
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '$');
    if !container_ok {
        return Err(format!(
            "'{container}' is not a container name (letters, digits and dashes)"
        ));
    }
    let location = Location::Azure {
        account: account.to_string(),
        container: container.to_string(),
    };
    Ok((location, path.join("/")))
}

fn check_bucket(bucket: &str) -> Result<(), String> {
    let ok = bucket
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{bucket}' is not a bucket name (letters, digits, dots, dashes and underscores)"
        ))
    }
}

/// A folder the object store's paths can hold: no `.` or `..` parts.
fn check_prefix(prefix: &str) -> Result<(), String> {
    match segments(prefix).iter().find(|s| **s == "." || **s == "..") {
        Some(part) => Err(format!("the path may not hold a '{part}' part")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(endpoint: Option<&str>, bucket: &str) -> Location {
        Location::S3 {
            endpoint: endpoint.map(str::to_string),
            bucket: bucket.into(),
        }
    }

    fn parsed(text: &str) -> (Location, String) {
        let url = CloudUrl::parse(text).unwrap();
        (url.location, url.prefix)
    }

    #[test]
    fn s3_urls_as_triton_reads_them() {
        assert_eq!(parsed("s3://bucket"), (s3(None, "bucket"), "".into()));
        assert_eq!(
            parsed("s3://bucket//models/dir/"),
            (s3(None, "bucket"), "models/dir".into())
        );
        assert_eq!(
            parsed("s3://127.0.0.1:9000/bucket/models"),
            (s3(Some("http://127.0.0.1:9000"), "bucket"), "models".into())
        );
        assert_eq!(
            parsed("s3://https://minio.local:443/b/m"),
            (s3(Some("https://minio.local:443"), "b"), "m".into())
        );
        assert_eq!(
            parsed("s3://http://localhost:9000/b"),
            (s3(Some("http://localhost:9000"), "b"), "".into())
        );
    }

    #[test]
    fn gcs_and_azure_urls() {
        assert_eq!(
            parsed("gs://bucket/a/b"),
            (
                Location::Gcs {
                    bucket: "bucket".into()
                },
                "a/b".into()
            )
        );
        let azure = |account: &str| Location::Azure {
            account: account.into(),
            container: "models".into(),
        };
        assert_eq!(
            parsed("as://acct/models/repo/x"),
            (azure("acct"), "repo/x".into())
        );
        assert_eq!(
            parsed("as://acct.blob.core.windows.net/models?sv=1"),
            (azure("acct"), "".into())
        );
    }

    #[test]
    fn malformed_urls_say_why() {
        let cases = [
            ("s3://", "no bucket name"),
            ("s3:///", "no bucket name"),
            ("s3://host:9000", "no bucket name found after the endpoint"),
            ("s3://http://bucket/x", "is not host:port"),
            ("s3://my bucket/x", "not a bucket name"),
            ("gs://", "no bucket name"),
            ("gs://b/../x", "'..' part"),
            ("as://acct", "no container name"),
            ("as:///c/x", "no account name"),
            ("as://a_b/c", "not a storage account name"),
            ("as://acct/c_d", "not a container name"),
        ];
        for (text, reason) in cases {
            let err = CloudUrl::parse(text).unwrap_err();
            assert!(err.reason.contains(reason), "{text}: {err}");
            assert!(err.to_string().contains(text), "{err}");
        }
    }

    #[test]
    fn display_and_objects() {
        let url = CloudUrl::parse("s3://localhost:9000/b//models/").unwrap();
        assert_eq!(url.to_string(), "s3://localhost:9000/b/models");
        assert_eq!(
            url.object("simple/1/model.onnx"),
            "s3://localhost:9000/b/models/simple/1/model.onnx"
        );
        let tls = CloudUrl::parse("s3://https://h:443/b").unwrap();
        assert_eq!(tls.to_string(), "s3://https://h:443/b");
        let root = CloudUrl::parse("gs://b").unwrap();
        assert_eq!(root.object("m/config.pbtxt"), "gs://b/m/config.pbtxt");
        assert_eq!(root.mount_variable(), "TRITON_GCS_MOUNT_DIRECTORY");
    }

    #[test]
    fn schemes() {
        assert!(is_cloud_url("s3://b") && is_cloud_url("gs://b") && is_cloud_url("as://a/c"));
        assert!(!is_cloud_url("/models"));
        assert_eq!(unknown_scheme("http://host/models"), Some("http"));
        assert_eq!(unknown_scheme("s3a://b/m"), Some("s3a"));
        assert_eq!(unknown_scheme("s3://b"), None);
        assert_eq!(unknown_scheme("/srv/a://b"), None);
        assert_eq!(unknown_scheme("models"), None);
    }
}
