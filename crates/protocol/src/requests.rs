//! The requests only a run can answer cheaply — the 2-D projections of a snapshot, the
//! neighbours of words in the newest snapshot, the vocabulary, a change of labels — and how a
//! message asking one is answered. A live run answers from its newest analysis in memory, a run
//! that is over from its store and its newest checkpoint (the run crate's `answers`): either
//! way a viewer never loads W itself.

use std::sync::Arc;

use conelab_base::error::{BoxError, chain};
use conelab_core::events::ProjectionFrame;
use conelab_core::labels::{LabelEdit, RunLabels};

use crate::message::{ClientMessage, ServerMessage, WordNeighbors};
use crate::view::Vocabulary;

/// Why a request could not be answered (sent to the viewer as one line, causes included).
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// What the answer was read from failed (a store, a checkpoint), in its own words.
    #[error(transparent)]
    Read(BoxError),
    /// Reading `what` failed, for the reason behind it.
    #[error("{what}")]
    Reading {
        what: &'static str,
        #[source]
        source: BoxError,
    },
    #[error(
        "this view is read-only: edit the labels of a run that is over with `conelab tag`, `note` or `rename` on its folder"
    )]
    ReadOnly,
}

impl AnswerError {
    /// For `map_err`: a failure of what the answer is read from.
    pub fn read<E: Into<BoxError>>(e: E) -> Self {
        AnswerError::Read(e.into())
    }

    /// For `map_err`: reading `what` failed.
    pub fn reading<E: Into<BoxError>>(what: &'static str) -> impl FnOnce(E) -> Self {
        move |e| AnswerError::Reading {
            what,
            source: e.into(),
        }
    }
}

/// The most neighbours one request may ask for.
pub const MAX_K: usize = 1_000;
/// The most words one request may ask about.
pub const MAX_WORDS: usize = 64;

pub trait Answers: Send + Sync {
    /// The projections of the snapshot at `step` (`None`: the newest), if there are any.
    fn projection(&self, step: Option<u64>) -> Result<Option<ProjectionFrame>, AnswerError>;
    /// The `k` nearest neighbours of each word in the newest snapshot, and that snapshot's step.
    fn neighbors(
        &self,
        words: &[u32],
        k: usize,
    ) -> Result<(Option<u64>, Vec<WordNeighbors>), AnswerError>;
    fn vocabulary(&self) -> Arc<Vocabulary>;
    /// Applies a change of name, tags or notes to the run's `run.json` (only the run that owns
    /// it can).
    fn edit_labels(&self, edit: &LabelEdit) -> Result<RunLabels, AnswerError> {
        let _ = edit;
        Err(AnswerError::ReadOnly)
    }
}

/// The reply to a request message; `None` for messages that are not requests.
pub fn answer(answers: &dyn Answers, message: &ClientMessage) -> Option<ServerMessage> {
    let error = |id, e: AnswerError| ServerMessage::Error {
        id: Some(id),
        message: chain(&e),
    };
    Some(match message {
        ClientMessage::Projection { id, step } => match answers.projection(*step) {
            Ok(frame) => ServerMessage::Projection { id: *id, frame },
            Err(e) => error(*id, e),
        },
        ClientMessage::Neighbors { id, words, k } => {
            if *k == 0 || *k > MAX_K || words.len() > MAX_WORDS {
                return Some(ServerMessage::Error {
                    id: Some(*id),
                    message: format!(
                        "neighbours: k must be 1…{MAX_K} and at most {MAX_WORDS} words"
                    ),
                });
            }
            match answers.neighbors(words, *k) {
                Ok((step, results)) => ServerMessage::Neighbors {
                    id: *id,
                    step,
                    results,
                },
                Err(e) => error(*id, e),
            }
        }
        ClientMessage::Labels { id, edit } => match answers.edit_labels(edit) {
            Ok(labels) => ServerMessage::Labels { id: *id, labels },
            Err(e) => error(*id, e),
        },
        ClientMessage::Vocabulary { id } => {
            let v = answers.vocabulary();
            ServerMessage::Vocabulary {
                id: *id,
                tokens: v.tokens.clone(),
                counts: v.counts.clone(),
            }
        }
        _ => return None,
    })
}
