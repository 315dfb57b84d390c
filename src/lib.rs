//! conelab: train language models and watch their tied token embeddings degenerate — or not.
//!
//! This crate is the binary's library: the allocator's settings. Everything else is a crate of
//! the workspace (the layout: docs/DEVELOPMENT.md), each named by its own path.

pub mod allocator;
