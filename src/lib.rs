//! conelab: train language models and watch their tied token embeddings degenerate — or not.
//!
//! This crate is the binary's library: the modules below that are not yet crates of their own,
//! and the workspace's crates re-exported under the paths the binary and the tests use (the
//! layout: docs/DEVELOPMENT.md).
//!
//! Here: `allocator` the allocator's settings.
//!
//! Re-exported: `bench` from conelab-bench; `base` (`atomic`, `lockfile`, `fault`, `jsonfloat`, `alloc_count`) from
//! conelab-base; `data` and `metrics` from their crates; `model`, `objective`, `engine`,
//! `checkpoint` and `analysis` from conelab-train; `store` from conelab-store with its
//! `export` from conelab-export; `tui` from conelab-tui; `run` (with `sweep`, `headless`,
//! `run_config`) from conelab-run, and its link to the viewers from conelab-link.

pub use conelab_base as base;
pub use conelab_base::alloc_count;
pub mod allocator;
pub use conelab_base::atomic;
pub use conelab_base::fault;
pub use conelab_base::jsonfloat;
pub use conelab_base::lockfile;
pub use conelab_bench as bench;
pub use conelab_core::baseline;
pub use conelab_data as data;
pub use conelab_metrics as metrics;
pub use conelab_run as run;
pub use conelab_run::{headless, run_config, sweep};
pub use conelab_train::analysis;
pub use conelab_train::checkpoint;
pub use conelab_train::engine;
pub use conelab_train::model;
pub use conelab_train::objective;
/// The metrics store, with its exports under the old path `store::export`.
pub mod store {
    pub use conelab_export as export;
    pub use conelab_store::*;
}
pub use conelab_tui as tui;
