//! conelab: train language models and watch their tied token embeddings degenerate — or not.
//!
//! Module map (DEVELOPERS.md): `data` holds corpora, vocabulary, frequency groups and batching;
//! `model` the architectures with tied embeddings and the devices they run on; `engine` the
//! training loop on its own thread; `checkpoint` run directories; `atomic` the crash-safe writes
//! every file that matters goes through.

pub mod alloc_count;
pub mod analysis;
pub mod atomic;
pub mod bench;
pub mod checkpoint;
pub mod data;
pub mod engine;
pub mod headless;
pub mod metrics;
pub mod model;
pub mod objective;
pub mod run_config;
pub mod store;
pub mod tui;
