//! Triton's ensembles (`platform: "ensemble"`, `ensemble_scheduling`):
//! the checks Triton makes of an ensemble's config and of the models it
//! composes, and the executor that runs its steps as a DAG.
//!
//! This crate knows composing models only through the engine's interface
//! (their configs, and a handle that runs one request): it must not depend
//! on a wire format, a concrete backend, the repository or the engine.
