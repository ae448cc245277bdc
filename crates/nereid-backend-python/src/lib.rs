//! Nereid's Python backend: Triton's `model.py` (`class TritonPythonModel`)
//! run in a Python worker process per instance, as Triton's stub does, so
//! instances run in parallel without sharing a GIL and a crashing model
//! never takes the server down.
//!
//! The worker program and the `triton_python_backend_utils` module models
//! import live in `python/`; `python/README.md` is the protocol between
//! server and worker: JSON frames over the worker's stdin and stdout
//! (`frame.rs`), tensor bytes through shared-memory files (`shm.rs`).
//!
//! Work in progress: the transport is here; the worker process management
//! and the `Backend` implementation come next (issue 12). Like the other
//! backends, this crate depends on `nereid-core` only.

// The pieces are used by the backend that is being built on them.
#![cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "the transport is built ahead of the backend that uses it"
    )
)]

mod frame;
mod shm;
