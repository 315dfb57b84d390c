//! A run's lifecycle: a run is a process of its own — the engine, the metrics store and a control
//! server — that never depends on a terminal; viewers come and go (zellij's client/server split).
//!
//! - [`launch`]: a new run or a resumed one, every option checked before anything is created.
//! - [`serve`]: the run process itself, until the run ends; its exit status; [`log`]: its
//!   train.log.
//! - [`detach`]: starting the run process in the background (its own session, `output.log`).
//! - [`hub`], [`server`], [`protocol`]: one typed message enum each way between the run and its
//!   viewers, over a Unix socket in the run directory.
//! - [`client`]: a viewer's end, one interface with a socket, an in-process and a stored
//!   transport; [`view`]: what a viewer knows of a run; [`answer`]: requests only a run answers.
//! - [`live`]: whether a run is alive (an OS lock) and how it ended; [`list`]: `conelab runs`;
//!   [`attach`]: which run `conelab attach` means and how to reach it; [`follow`]: runs read
//!   from their folders as they go (the compare view).

pub mod answer;
pub mod attach;
pub mod client;
pub mod clock;
pub mod detach;
pub mod follow;
pub mod hub;
pub mod labels;
pub mod launch;
pub mod list;
pub mod live;
pub mod log;
pub mod options;
pub mod protocol;
pub mod serve;
pub mod server;
pub mod view;

pub use options::TrainOptions;

/// Says a line on stderr (the terminal, or a background run's output.log) and drops it when
/// stderr has gone (the starter of a detached run exited as the run announced itself, a
/// `2>&1 | tee` died): `eprintln!` panics on a failed write, and a run must never lose the
/// thread that serves a viewer or hears a signal, nor abort at its end, over a line nobody
/// can read.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

use conelab_base::exit::ExitStatus;

use crate::checkpoint::CheckpointError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad input: an option, a corpus, a folder (exit 2).
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Live(#[from] live::LiveError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("metrics store: {0}")]
    Polars(#[from] polars::prelude::PolarsError),
    /// The OS refused something the run needs (a thread, a socket).
    #[error("{0}")]
    Internal(String),
    /// The background run could not start; `message` is what it said (one line), `status` its
    /// exit status.
    #[error("{message}")]
    Child { status: ExitStatus, message: String },
}

impl RunError {
    /// The exit status for this error.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            RunError::Child { status, .. } => *status,
            RunError::Internal(_) => ExitStatus::Failed,
            _ => ExitStatus::BadInput,
        }
    }
}
