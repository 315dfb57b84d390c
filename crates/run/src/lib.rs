//! A run's lifecycle: a run is a process of its own — the engine, the metrics store and a control
//! server — that never depends on a terminal; viewers come and go (zellij's client/server split).
//!
//! - [`launch`]: a new run or a resumed one, every option checked before anything is created.
//! - [`serve`]: the run process itself, until the run ends; its exit status; [`log`]: its
//!   train.log.
//! - [`detach`]: starting the run process in the background (its own session, `output.log`).
//! - [`choice_arg`]: the command line's parser for core's named settings.
//! - [`options`]: the training options the command line and sweeps parse; [`run_config`]: a
//!   run's settings from preset, file and flags.
//! - [`headless`]: the reporter on stdout; [`sweep`]: grids of runs, local or on SLURM.
//!
//! The link to the viewers (protocol, view, hub, server, transports, attach, follow, live, list,
//! labels) is the `conelab_link` crate, re-exported here under its old paths.

pub mod choice_arg;
pub mod detach;
pub mod gpu;
pub mod headless;
pub mod launch;
pub mod log;
pub mod notify;
pub mod options;
pub mod run_config;
pub mod serve;
pub mod sweep;

pub use conelab_link::{
    RunError, answer, attach, client, follow, hub, index, labels, list, live, protocol, say,
    server, view,
};
pub use options::TrainOptions;
