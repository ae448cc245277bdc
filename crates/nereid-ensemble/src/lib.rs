//! Triton's ensembles (`platform: "ensemble"`, `ensemble_scheduling`):
//! the checks Triton makes of an ensemble's config and of the models it
//! composes, and the executor that runs its steps as a DAG.
//!
//! This crate knows composing models only through the engine's interface
//! (their configs, and a handle that runs one request): it must not depend
//! on a wire format, a concrete backend, the repository or the engine.

mod error;
mod executor;
mod validate;

pub use error::{EnsembleError, TensorOrigin};
pub use executor::{Composer, Emit, Pipeline, StepFuture, StepStream};
pub use validate::{
    Composing, Composition, ENSEMBLE_PLATFORM, check_available, check_composition, check_config,
    compose, dependencies, find_cycle,
};
