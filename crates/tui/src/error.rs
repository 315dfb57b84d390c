//! Why a view could not go on.

use std::io;

use conelab_client::link::LinkError;

#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    #[error("cannot use the terminal: {0}")]
    Terminal(#[from] io::Error),
    #[error("cannot listen to the run: {0}")]
    Link(#[from] LinkError),
}
