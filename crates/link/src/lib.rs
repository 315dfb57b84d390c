//! The link between a run and its viewers (zellij's client/server split, the wire between them
//! in one crate): neither side needs the trainer, so nothing here links burn.
//!
//! - [`protocol`]: one typed message enum each way, over a Unix socket in the run directory;
//!   [`view`]: what a viewer knows of a run.
//! - The run's side: [`hub`] (the run's view, fed by its events, fanned out to viewers),
//!   [`server`] (the control socket) and [`answer`] (requests only a run answers).
//! - The viewer's side: [`client`] (one interface with a socket, an in-process and a stored
//!   transport), [`attach`] (which run `conelab attach` means and how to reach it), [`follow`]
//!   (runs read from their folders as they go), [`labels`] (names, tags, notes).
//! - On disk: [`live`] (whether a run is alive, an OS lock, and how it ended), [`list`]
//!   (`conelab runs`), [`index`] (the per-user index that finds runs by name from anywhere).

pub mod answer;
pub mod attach;
pub mod client;
pub mod follow;
pub mod hub;
pub mod index;
pub mod labels;
pub mod list;
pub mod live;
pub mod protocol;
pub mod server;
pub mod view;

use conelab_base::error::Invalid;
use conelab_base::exit::ExitStatus;
use conelab_core::run_dir::CheckpointError;
use conelab_store::StoreError;

/// 64-bit FNV-1a: names that must not change between conelab versions (a socket outside its
/// run folder, an index entry, a cached row) and fingerprints.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    conelab_base::hash::fnv1a(bytes)
}

/// Says a line on stderr (the terminal, or a background run's output.log) and drops it when
/// stderr has gone (the starter of a detached run exited as the run announced itself, a
/// `2>&1 | tee` died): `eprintln!` panics on a failed write, and a run must never lose the
/// thread that serves a viewer or hears a signal, nor abort at its end, over a line nobody
/// can read.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad input: an option, a corpus, a folder (exit 2), with what read it and refused it
    /// (a config file's parser, a socket) where something did.
    #[error(transparent)]
    Usage(Invalid),
    /// Bad input that another error explains: a config file, a corpus, a trainer that cannot be
    /// built from the options (exit 2).
    #[error(transparent)]
    BadInput(conelab_base::error::BoxError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Live(#[from] live::LiveError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A matrix named on the command line (`--compare`) that cannot be read.
    #[error(transparent)]
    Matrix(#[from] conelab_core::run_dir::matrix::MatrixFileError),
    /// The OS refused something the run needs (a thread, a socket), with its error where it
    /// gave one.
    #[error("{what}")]
    Internal {
        what: String,
        #[source]
        source: Option<conelab_base::error::BoxError>,
    },
    /// The background run could not start; `message` is what it said (one line), `status` its
    /// exit status.
    #[error("{message}")]
    Child { status: ExitStatus, message: String },
}

impl RunError {
    /// For `map_err`: what could not be done, and the error that stopped it.
    pub fn internal<E: Into<conelab_base::error::BoxError>>(
        what: impl Into<String>,
    ) -> impl FnOnce(E) -> Self {
        let what = what.into();
        move |e| RunError::Internal {
            what,
            source: Some(e.into()),
        }
    }

    /// For `map_err`: bad input that `e` explains.
    pub fn bad_input<E: Into<conelab_base::error::BoxError>>(e: E) -> Self {
        RunError::BadInput(e.into())
    }

    /// For `map_err`: bad input at `what` (a path, a socket), explained by the error.
    pub fn bad_input_at<E: Into<conelab_base::error::BoxError>>(
        what: impl Into<String>,
    ) -> impl FnOnce(E) -> Self {
        let what = what.into();
        move |e| RunError::Usage(Invalid::because(what)(e))
    }

    /// Something went wrong that no library error stands behind.
    pub fn internal_says(what: impl Into<String>) -> Self {
        RunError::Internal {
            what: what.into(),
            source: None,
        }
    }

    /// The exit status for this error.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            RunError::Child { status, .. } => *status,
            RunError::Internal { .. } => ExitStatus::Failed,
            _ => ExitStatus::BadInput,
        }
    }
}
