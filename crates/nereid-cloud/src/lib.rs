//! Cloud model repositories, as Triton reads them: `s3://bucket/path`
//! (also `s3://host:port/bucket/path` for an S3-compatible server),
//! `gs://bucket/path` and `as://account/container/path`, through the
//! `object_store` crate, with Triton's credentials (`AWS_*` and
//! `~/.aws`, `GOOGLE_APPLICATION_CREDENTIALS`, `AZURE_STORAGE_*`,
//! `TRITON_CLOUD_CREDENTIAL_PATH`). A [`CloudRepository`] keeps a local
//! copy of the repository (under `TRITON_*_MOUNT_DIRECTORY` or a temporary
//! folder) and is the engine's [`nereid_repository::Mirror`]: it copies
//! changed models into new folders and swaps them in whole.
//!
//! This crate must not depend on the engine, a backend or a wire format:
//! what it hands on is a local folder the repository code reads like any
//! other. Its async client runs on a small runtime of its own, so that
//! callers block on it from plain threads.

mod aws_keys;
mod aws_profile;
mod copy;
mod credentials;
mod error;
mod listing;
mod mirror;
mod store;
mod url;

pub use error::{CloudError, UrlError};
pub use mirror::CloudRepository;
pub use url::{CloudUrl, Location, is_cloud_url, unknown_scheme};
