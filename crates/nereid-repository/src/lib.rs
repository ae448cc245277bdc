//! Nereid's model repository: finds model folders under one or more roots,
//! reads each `config.pbtxt` (protobuf text, Triton's dialect) into
//! `ModelConfig`, completes it from the model file the way Triton's
//! autofill does, fills Triton's defaults, validates it with Triton's rules
//! and messages, applies the version policy and fingerprints folders for
//! hot reload. Its output is what the engine loads and what
//! `/v2/models/<m>/config` shows. A root may be a local copy of a remote
//! repository ([`Mirror`]); the repository itself only reads local folders.
//!
//! This crate must not depend on any backend crate (backends come in as
//! `&[Arc<dyn nereid_core::Backend>]`), on the engine or scheduler, on a
//! wire format or on an async runtime: it is plain, synchronous file and
//! config logic over `nereid-core`.

mod autofill;
mod backend_select;
mod confine;
mod error;
mod fingerprint;
mod mirror;
mod normalize;
mod parse;
mod prepass;
mod repository;
pub mod traffic;
mod validate;
mod versions;

pub use autofill::DEFAULT_MAX_BATCH_SIZE;
pub use confine::inside;
pub use error::{
    ConfigError, ConfigParseError, IoProblem, ModelError, RepositoryError, TensorKind,
};
pub use fingerprint::{fingerprint, model_fingerprint};
pub use mirror::{CopyFailure, Mirror, MirrorError, Scope, name_origins};
pub use parse::parse_config_text;
pub use prepass::insert_list_colons;
pub use repository::{
    CONFIG_FILENAME, ModelEntry, Repository, ResolvedModel, ResolvedVersion, normalize_and_validate,
};
