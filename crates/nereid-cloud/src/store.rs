//! The `object_store` client for one repository, with Triton's credentials
//! and a few variables of the stores' own SDKs for emulators and private
//! endpoints (`STORAGE_EMULATOR_HOST`, `AZURE_STORAGE_USE_EMULATOR`,
//! `AZURITE_BLOB_STORAGE_URL`, `AZURE_STORAGE_ENDPOINT`, `AWS_ENDPOINT_URL`).

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

use crate::aws_keys;
use crate::credentials::{AzureCredential, Credential, GcsCredential, S3Credential, Vars};
use crate::error::CloudError;
use crate::url::{CloudUrl, Location};

/// Builds the client `url` is read with. Reads files a credential names
/// (an AWS profile, a Google key file) now, so a bad one fails at startup.
pub fn build_store(
    url: &CloudUrl,
    credential: &Credential,
    vars: Vars<'_>,
) -> Result<Arc<dyn ObjectStore>, CloudError> {
    let client_error = |source| CloudError::Client {
        url: url.to_string(),
        source,
    };
    let store: Arc<dyn ObjectStore> = match (&url.location, credential) {
        (Location::S3 { endpoint, bucket }, Credential::S3(c)) => {
            let builder = s3_builder(endpoint.as_deref(), bucket, c, vars)?;
            Arc::new(builder.build().map_err(client_error)?)
        }
        (Location::Gcs { bucket }, Credential::Gcs(c)) => {
            Arc::new(gcs_builder(bucket, c, vars).build().map_err(client_error)?)
        }
        (Location::Azure { account, container }, Credential::Azure(c)) => {
            let builder = azure_builder(account, container, c, vars);
            Arc::new(builder.build().map_err(client_error)?)
        }
        _ => unreachable!("credential_for picks the credential of the URL's store"),
    };
    Ok(store)
}

/// A dead endpoint is given up on within about half a minute, not the
/// three minutes `object_store` waits by default; a transfer may take as
/// long as it needs while bytes keep coming.
fn client_options() -> ClientOptions {
    ClientOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout_disabled()
        .with_read_timeout(Duration::from_secs(30))
}

fn retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(4),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: Duration::from_secs(30),
    }
}

/// Path-style requests, as Triton makes them, signed with the keys
/// [`aws_keys::resolve`] picks; object_store's other `AWS_*` settings
/// (`AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, ...) come from the environment.
fn s3_builder(
    endpoint: Option<&str>,
    bucket: &str,
    credential: &S3Credential,
    vars: Vars<'_>,
) -> Result<AmazonS3Builder, CloudError> {
    let mut builder = s3_settings()
        .with_bucket_name(bucket)
        .with_client_options(client_options())
        .with_retry(retry());
    if let Some(endpoint) = endpoint {
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"));
    }
    let keys = aws_keys::resolve(credential, vars)?;
    if keys.has_keys() {
        builder = builder
            .with_access_key_id(keys.key_id)
            .with_secret_access_key(keys.secret_key);
        if !keys.session_token.is_empty() {
            builder = builder.with_token(keys.session_token);
        }
    }
    if !keys.region.is_empty() {
        builder = builder.with_region(keys.region);
    }
    Ok(builder)
}

/// The variables `aws_keys` reads, left out of [`s3_settings`] so that
/// keys from elsewhere are never mixed with these.
const AWS_KEY_VARIABLES: [&str; 5] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
];

/// `AmazonS3Builder::from_env` without the keys and region.
fn s3_settings() -> AmazonS3Builder {
    std::env::vars()
        .filter(|(name, _)| name.starts_with("AWS_") && !AWS_KEY_VARIABLES.contains(&name.as_str()))
        .filter_map(|(name, value)| Some((name.to_ascii_lowercase().parse().ok()?, value)))
        .fold(AmazonS3Builder::new(), |builder, (key, value)| {
            builder.with_config(key, value)
        })
}

/// A key file when one is named, else `object_store`'s defaults; an
/// emulator (`STORAGE_EMULATOR_HOST`, or google-cloud-cpp's
/// `CLOUD_STORAGE_EMULATOR_ENDPOINT`) is read without signing, as Google's
/// clients read it.
fn gcs_builder(
    bucket: &str,
    credential: &GcsCredential,
    vars: Vars<'_>,
) -> GoogleCloudStorageBuilder {
    let builder = GoogleCloudStorageBuilder::from_env()
        .with_bucket_name(bucket)
        .with_retry(retry());
    let emulator =
        vars("STORAGE_EMULATOR_HOST").or_else(|| vars("CLOUD_STORAGE_EMULATOR_ENDPOINT"));
    if let Some(host) = emulator {
        let base = match host.contains("://") {
            true => host,
            false => format!("http://{host}"),
        };
        let http = base.starts_with("http://");
        return builder
            .with_base_url(base.trim_end_matches('/'))
            .with_skip_signature(true)
            .with_client_options(client_options().with_allow_http(http));
    }
    let builder = builder.with_client_options(client_options());
    match credential.path.as_str() {
        "" => builder,
        path => builder.with_application_credentials(path),
    }
}

/// The account is the credential's when it names one (as in Triton), else
/// the URL's. Shared key when a key is given, managed identity or
/// `object_store`'s chain on request, anonymous otherwise.
fn azure_builder(
    account: &str,
    container: &str,
    credential: &AzureCredential,
    vars: Vars<'_>,
) -> MicrosoftAzureBuilder {
    let account = match credential.account_str.as_str() {
        "" => account,
        named => named,
    };
    let mut builder = MicrosoftAzureBuilder::new()
        .with_account(account)
        .with_container_name(container)
        .with_retry(retry());
    let emulator = vars("AZURE_STORAGE_USE_EMULATOR").is_some_and(|v| truthy(&v));
    let endpoint = vars("AZURE_STORAGE_ENDPOINT");
    let http = emulator
        || endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"));
    builder = builder.with_client_options(client_options().with_allow_http(http));
    if emulator {
        builder = builder.with_use_emulator(true);
    }
    if let Some(endpoint) = endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    match credential.auth_type.as_str() {
        "managed_identity" => {
            builder = builder.with_credential_type("managed_identity");
            if !credential.client_id.is_empty() {
                builder = builder.with_client_id(credential.client_id.clone());
            }
            builder
        }
        "default" => builder.with_credential_type("auto"),
        _ if !credential.account_key.is_empty() => {
            builder.with_access_key(credential.account_key.clone())
        }
        // The emulator signs with its well-known key when given none.
        _ if emulator => builder,
        _ => builder.with_skip_signature(true),
    }
}

fn truthy(value: &str) -> bool {
    matches!(
        value.to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> CloudUrl {
        CloudUrl::parse(text).unwrap()
    }

    #[test]
    fn clients_build_without_a_network() {
        let none = |_: &str| None;
        let s3 = Credential::S3(S3Credential {
            key_id: "id".into(),
            secret_key: "secret".into(),
            ..Default::default()
        });
        let store = build_store(&url("s3://127.0.0.1:9000/bucket/m"), &s3, &none).unwrap();
        assert!(store.to_string().contains("bucket"), "{store}");
        let azure = Credential::Azure(AzureCredential {
            account_key: "a2V5".into(),
            ..Default::default()
        });
        build_store(&url("as://acct/container/m"), &azure, &none).unwrap();
        let emulator = |name: &str| (name == "STORAGE_EMULATOR_HOST").then(|| "localhost:1".into());
        build_store(
            &url("gs://b/m"),
            &Credential::Gcs(GcsCredential::default()),
            &emulator,
        )
        .unwrap();
    }

    #[test]
    fn a_missing_key_file_fails_at_once() {
        let none = |_: &str| None;
        let gcs = Credential::Gcs(GcsCredential {
            path: "/nonexistent/key.json".into(),
        });
        let err = build_store(&url("gs://b"), &gcs, &none).unwrap_err();
        assert!(err.to_string().contains("gs://b"), "{err}");
    }
}
