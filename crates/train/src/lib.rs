//! Training: the only crate that links burn. The tied-embedding Transformer and LSTM ([`model`]),
//! the objectives and regularisers as tensor functions ([`objective`]), the engine that runs a
//! trainer on its own thread ([`engine`]), checkpoints of a trainer ([`checkpoint`]) and the
//! offline analysis behind `eval` and `inspect` ([`analysis`]), and starting a run's trainer, new or
//! resumed, in one call ([`start`]). The data these speak in (settings,
//! commands, events, the run folder) is `conelab_core`'s. LibTorch builds also carry our own ATen
//! extension ([`aten`], `csrc/`).

pub mod analysis;
pub mod aten;
pub mod checkpoint;
pub mod engine;
pub mod model;
pub mod objective;
pub mod start;
pub mod translation_trainer;
