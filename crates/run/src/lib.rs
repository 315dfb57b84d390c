//! A run's lifecycle: a run is a process of its own — the engine, the metrics store and a control
//! server — that never depends on a terminal; viewers come and go (zellij's client/server split).
//!
//! - [`launch`]: a new run or a resumed one, every option checked before anything is created.
//! - [`serve`]: the run process itself, until the run ends; its exit status; [`log`]: its
//!   train.log.
//! - [`detach`]: starting the run process in the background (its own session, `output.log`).
//! - [`choice_arg`]: the command line's parser for core's named settings.
//! - [`options`]: the training options the command line and sweeps parse; [`config_file`]: a
//!   run's settings from preset, file and flags.
//! - [`headless`]: the reporter on stdout; [`sweep`]: grids of runs, local or on SLURM.
//! - The run's side of the link to its viewers (zellij's server): [`hub`] (the run's view, fed by
//!   its events, fanned out to viewers), [`server`] (the control socket), [`answers`] (requests
//!   only a run answers, live or from its folder), [`local_link`] (a viewer in the run's own
//!   process) and [`archive`] (a finished run's history and answers for a viewer).

pub mod answers;
pub mod archive;
pub mod choice_arg;
pub mod config_file;
pub mod detach;
pub mod gpu;
pub mod headless;
pub mod hub;
pub mod launch;
pub mod local_link;
pub mod log;
pub mod notify;
pub mod options;
pub mod serve;
pub mod server;
pub mod sweep;
