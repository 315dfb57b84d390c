//! conelab: train language models and watch their tied token embeddings degenerate — or not.
//!
//! Module map (DEVELOPERS.md): `data` holds corpora, vocabulary, frequency groups and batching;
//! `model` the architectures with tied embeddings and the devices they run on; `engine` the
//! training loop on its own thread; `checkpoint` run directories; `store` the metrics store;
//! `run` a run's lifecycle as a process of its own, its control socket and its viewers' end;
//! `tui` the workbench. `atomic` is the crash-safe writes every file that matters goes through,
//! `lockfile` the OS locks, `fault` the injected I/O failures of the tests.

pub mod alloc_count;
pub mod allocator;
pub mod analysis;
pub mod atomic;
pub mod bench;
pub mod checkpoint;
pub mod data;
pub mod engine;
pub(crate) mod fastmath;
pub mod fault;
pub mod headless;
pub mod jsonfloat;
pub mod lockfile;
pub mod metrics;
pub mod model;
pub mod objective;
pub mod run;
pub mod run_config;
pub mod store;
pub mod sweep;
pub mod tui;
