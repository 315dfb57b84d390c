//! The wire between a run and its viewers (zellij's `ipc.rs`): one typed message enum each way
//! ([`message`]), read and written as bounded JSON lines ([`wire`]); what a viewer knows of a run,
//! folded from the run's events ([`view`]); and the requests only a run can answer
//! ([`requests`]). Both sides build on it; it reads no file a run writes but `vocab.tsv`, and
//! links neither the trainer nor the store.

pub mod message;
pub mod requests;
pub mod view;
pub mod wire;
