//! conelab: train language models and watch their tied token embeddings degenerate — or not.
//!
//! Module map (DEVELOPERS.md): `data` holds corpora, vocabulary, frequency groups and batching;
//! `model` the architectures with tied embeddings and the devices they run on; `engine` the
//! training loop on its own thread; `checkpoint` run directories; `store` the metrics store;
//! `run` a run's lifecycle as a process of its own, its control socket and its viewers' end;
//! `tui` the workbench. `atomic` is the crash-safe writes every file that matters goes through,
//! `lockfile` the OS locks, `fault` the injected I/O failures of the tests.

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
pub mod tui;
