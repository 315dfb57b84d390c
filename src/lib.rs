//! conelab: train language models and watch their tied token embeddings degenerate — or not.
//!
//! This crate is the binary's library: the modules below that are not yet crates of their own,
//! and the workspace's crates re-exported under the paths the binary and the tests use (the
//! layout: docs/DEVELOPMENT.md).
//!
//! Here: `run` a run's lifecycle as a process of its own; `sweep` grids of runs, local or on
//! SLURM; `bench` the benchmarks; `headless` the reporter on stdout; `run_config` a run's
//! settings from preset, file and flags; `allocator` the allocator's settings.
//!
//! Re-exported: `base` (`atomic`, `lockfile`, `fault`, `jsonfloat`, `alloc_count`) from
//! conelab-base; `data` and `metrics` from their crates; `model`, `objective`, `engine`,
//! `checkpoint` and `analysis` from conelab-train; `store` from conelab-store with its
//! `export` from conelab-export; `tui` from conelab-tui; `run`'s link to its viewers from
//! conelab-link.

pub use conelab_base as base;
pub use conelab_base::alloc_count;
pub mod allocator;
pub use conelab_base::atomic;
pub use conelab_train::analysis;
pub mod bench;
pub use conelab_base::fault;
pub use conelab_data as data;
pub use conelab_train::checkpoint;
pub use conelab_train::engine;
pub mod headless;
pub use conelab_base::jsonfloat;
pub use conelab_base::lockfile;
pub use conelab_metrics as metrics;
pub use conelab_train::model;
pub use conelab_train::objective;
pub mod run;
pub mod run_config;
/// The metrics store, with its exports under the old path `store::export`.
pub mod store {
    pub use conelab_export as export;
    pub use conelab_store::*;
}
pub mod sweep;
pub use conelab_tui as tui;
