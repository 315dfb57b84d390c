//! The foundation every other conelab crate stands on; it knows nothing of training or the UI.
//!
//! - [`exit`]: the exit statuses, one type for every process conelab starts.
//! - [`error`]: typed errors with their causes, written as one line.
//! - [`atomic`]: the crash-safe writes every file that matters goes through.
//! - [`lockfile`]: the OS locks that keep two processes off one run folder.
//! - [`fault`]: the I/O failures the tests inject (`CONELAB_FAULT`).
//! - [`pump`]: a thread that hands on what a channel receives.
//! - [`jsonfloat`]: floats in JSON that survive NaN and infinity.
//! - [`revision`]: the source revision the binary was built from.
//! - [`alloc_count`]: the counting allocator behind the benchmarks' memory columns.

pub mod alloc_count;
pub mod atomic;
pub mod error;
pub mod exit;
pub mod fault;
pub mod jsonfloat;
pub mod lockfile;
pub mod pump;
pub mod revision;
