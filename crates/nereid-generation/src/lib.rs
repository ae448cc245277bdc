//! Generation scheduling for language models, the part of vLLM's design
//! that Nereid owns: iteration-level batching ([`scheduler`]), KV memory
//! as a ledger of fixed-size blocks shared between sequences with a common
//! prefix ([`blocks`]), sampling ([`sampling`]) and the text a sequence
//! streams, cut at stop strings ([`text`]).
//!
//! Nothing here runs a model: a backend asks the scheduler for each
//! step's plan, has its runtime compute it, and reports back. So all of it
//! is tested without one. It depends on no other Nereid crate.

pub mod blocks;
mod plan;
pub mod sampling;
pub mod scheduler;
pub mod text;

pub use blocks::Slot;
pub use scheduler::{Chunk, Counters, KvOp, Limits, Plan, Refusal, Scheduler, SeqId};
