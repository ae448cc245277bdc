//! The server a backend's models call (BLS, model control, custom
//! metrics), set once the engine exists; its own file so that the
//! instance, the side channel and BLS all name it without naming each
//! other.

use std::sync::{Arc, OnceLock};

use nereid_core::InferService;

/// The server, for the calls models make; set once the engine exists.
pub(crate) type Service = Arc<OnceLock<Arc<dyn InferService>>>;
