//! conelab's shared vocabulary: the data that the trainer, the run process, the store and the
//! viewer all speak of. Nothing here holds a tensor, so the viewer can depend on it without burn.
//!
//! - [`choice`]: settings that take one of a few names, with a line of help each.
//! - [`objective`]: which loss and regularisers a run uses ([`objective::Objectives`]) and how a
//!   command changes them.
//! - [`model`]: the architectures' settings and `--device`.
//! - [`train_config`]: the optimizer, schedule and run length.
//! - [`change`]: what a command or a resume changed, typed, and its words.
//! - [`events`]: the engine's commands in and events out.
//! - [`state`]: the counters a checkpoint saves (`state.json`).
//! - [`analysis`]: the background embedding analysis and its result.
//! - [`baseline`]: a corpus's reference n-gram models per group (cached).
//! - [`run_dir`]: the run folder on disk (`run.toml`, `vocab.tsv`, `step-NNNNNN/`).
//! - [`labels`]: a run's name, tags and notes.
//! - [`series`]: the names of the stored metric series (split, group, metric) and their key.
//! - [`run_fault`]: the first fatal failure of one of a run's threads.

pub mod analysis;
pub mod baseline;
pub mod change;
pub mod choice;
pub mod events;
pub mod labels;
pub mod model;
pub mod objective;
pub mod run_dir;
pub mod run_fault;
pub mod series;
pub mod state;
pub mod train_config;
pub mod words;
