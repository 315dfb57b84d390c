//! The runs on disk (the catalogue a user's runs make): which run a name means ([`find`]), the
//! per-user index that finds runs from anywhere ([`index`]), `conelab runs` ([`list`]), a run's
//! labels edited live or on disk ([`labels`]), and following runs from their folders for the
//! compare view ([`follow`]). It reads the runs' stores, so the viewer side does not.

pub mod find;
pub mod follow;
pub mod index;
pub mod labels;
pub mod list;
pub mod remove;

use conelab_base::error::Invalid;
use conelab_base::exit::ExitStatus;
use conelab_client::open::OpenError;
use conelab_core::run_dir::CheckpointError;
use conelab_core::run_dir::live::LiveError;
use conelab_store::StoreError;

/// What stops a command on a run — `train`, `attach`, `runs`, `tag`, a sweep: bad input (exit 2)
/// or a failure of the machine (4), with its cause.
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
    /// A file the command needs is damaged, and nothing the command would write is written
    /// (exit 5), in our words with the damage as the cause.
    #[error(transparent)]
    Damaged(Invalid),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Live(#[from] LiveError),
    /// A run that could not be opened for a viewer.
    #[error(transparent)]
    Open(#[from] OpenError),
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
            RunError::Damaged(_)
            | RunError::Checkpoint(CheckpointError::Corrupt { .. })
            | RunError::Live(LiveError::Corrupt { .. })
            | RunError::Store(StoreError::Corrupt { .. }) => ExitStatus::Damaged,
            _ => ExitStatus::BadInput,
        }
    }
}
