//! conelab: train language models and watch their tied token embeddings degenerate — or not.
//!
//! Module map (DEVELOPERS.md): `data` holds corpora, vocabulary, frequency groups and batching;
//! `atomic` the crash-safe writes every file that matters goes through.

pub mod atomic;
pub mod data;
