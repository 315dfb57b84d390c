//! Answers to the requests only a run can answer cheaply: the 2-D projections of a snapshot,
//! the neighbours of words in the newest snapshot, the vocabulary. A live run answers from its
//! newest analysis in memory ([`LiveAnswers`]); a run that is over answers from its store and its
//! newest checkpoint ([`StoredAnswers`]), so a viewer never loads W itself.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::protocol::{ClientMessage, ServerMessage, WordNeighbors};
use super::view::Vocabulary;
use conelab_base::error::chain;
use conelab_core::analysis::LatestAnalysis;
use conelab_core::events::ProjectionFrame;
use conelab_core::labels::{LabelEdit, RunLabels};
use conelab_core::run_dir::CheckpointError;
use conelab_core::run_dir::matrix::MatrixFileError;
use conelab_metrics::{Embeddings, MatrixError, NeighborIndex, Similarity, Threads};
use conelab_store::StoreError;

/// Why a request could not be answered (sent to the viewer as one line, causes included).
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("the newest checkpoint's W")]
    MatrixFile(#[from] MatrixFileError),
    #[error("the snapshot's W")]
    Matrix(#[from] MatrixError),
    #[error(
        "this view is read-only: edit the labels of a run that is over with `conelab tag`, `note` or `rename` on its folder"
    )]
    ReadOnly,
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

/// A neighbour index of one snapshot, rebuilt only when the snapshot changes.
#[derive(Default)]
struct IndexCache(Mutex<Option<(u64, Arc<NeighborIndex>)>>);

impl IndexCache {
    fn get_or_build(
        &self,
        step: u64,
        build: impl FnOnce() -> Result<NeighborIndex, AnswerError>,
    ) -> Result<Arc<NeighborIndex>, AnswerError> {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, index)) = slot.as_ref()
            && *s == step
        {
            return Ok(index.clone());
        }
        let index = Arc::new(build()?);
        *slot = Some((step, index.clone()));
        Ok(index)
    }
}

fn query(index: &NeighborIndex, words: &[u32], k: usize) -> Vec<WordNeighbors> {
    words
        .iter()
        .filter(|&&w| (w as usize) < index.len())
        .map(|&w| WordNeighbors {
            word: w,
            neighbors: index.query(w, k, Similarity::Cosine),
        })
        .collect()
}

/// A live run's answers: from its newest analysis (W and projections in memory), older
/// projections from its store.
pub struct LiveAnswers {
    latest: LatestAnalysis,
    store_dir: PathBuf,
    vocab: Arc<Vocabulary>,
    index: IndexCache,
}

impl LiveAnswers {
    pub fn new(latest: LatestAnalysis, store_dir: PathBuf, vocab: Arc<Vocabulary>) -> Self {
        Self {
            latest,
            store_dir,
            vocab,
            index: IndexCache::default(),
        }
    }
}

impl Answers for LiveAnswers {
    fn projection(&self, step: Option<u64>) -> Result<Option<ProjectionFrame>, AnswerError> {
        let newest = self.latest.get();
        match (step, newest) {
            (None, Some(a)) => Ok(Some(a.frame())),
            (Some(s), Some(a)) if a.snapshot.step == s => Ok(Some(a.frame())),
            (Some(s), _) => Ok(conelab_store::projection::read(&self.store_dir, s)?),
            (None, None) => newest_stored(&self.store_dir),
        }
    }

    fn neighbors(
        &self,
        words: &[u32],
        k: usize,
    ) -> Result<(Option<u64>, Vec<WordNeighbors>), AnswerError> {
        let Some(a) = self.latest.get() else {
            return Ok((None, Vec::new()));
        };
        let snap = &a.snapshot;
        let index = self.index.get_or_build(snap.step, || {
            let w = Embeddings::new(snap.n, snap.d, &snap.weights)?;
            Ok(NeighborIndex::new(w, Threads::Sequential))
        })?;
        Ok((Some(snap.step), query(&index, words, k)))
    }

    fn vocabulary(&self) -> Arc<Vocabulary> {
        self.vocab.clone()
    }

    fn edit_labels(&self, edit: &LabelEdit) -> Result<RunLabels, AnswerError> {
        Ok(conelab_store::labels::edit_record(&self.store_dir, edit)?)
    }
}

fn newest_stored(store_dir: &Path) -> Result<Option<ProjectionFrame>, AnswerError> {
    let steps = conelab_store::projection::list(store_dir)?;
    match steps.last() {
        Some(&s) => Ok(conelab_store::projection::read(store_dir, s)?),
        None => Ok(None),
    }
}

/// A finished run's answers: projections from its store, neighbours from W of its newest
/// checkpoint (loaded on the first request, as `conelab inspect` does).
pub struct StoredAnswers {
    run_dir: PathBuf,
    store_dir: PathBuf,
    vocab: Arc<Vocabulary>,
    index: IndexCache,
}

impl StoredAnswers {
    pub fn new(run_dir: PathBuf, vocab: Arc<Vocabulary>) -> Self {
        let store_dir = conelab_store::store_dir(&run_dir);
        Self {
            run_dir,
            store_dir,
            vocab,
            index: IndexCache::default(),
        }
    }
}

impl Answers for StoredAnswers {
    fn projection(&self, step: Option<u64>) -> Result<Option<ProjectionFrame>, AnswerError> {
        match step {
            Some(s) => Ok(conelab_store::projection::read(&self.store_dir, s)?),
            None => newest_stored(&self.store_dir),
        }
    }

    fn neighbors(
        &self,
        words: &[u32],
        k: usize,
    ) -> Result<(Option<u64>, Vec<WordNeighbors>), AnswerError> {
        let newest = match conelab_core::run_dir::RunDir::open(&self.run_dir)
            .and_then(|r| r.latest_checkpoint())
        {
            Ok(p) => p,
            Err(conelab_core::run_dir::CheckpointError::NoCheckpoint(_)) => {
                return Ok((None, Vec::new()));
            }
            Err(e) => return Err(e.into()),
        };
        let step = conelab_core::run_dir::step_of(&newest).unwrap_or(0);
        let index = self.index.get_or_build(step, || {
            let m = conelab_core::run_dir::matrix::load_matrix(&newest, None)?;
            let w = Embeddings::new(m.n, m.d, &m.data)?;
            Ok(NeighborIndex::new(w, Threads::All))
        })?;
        Ok((Some(step), query(&index, words, k)))
    }

    fn vocabulary(&self) -> Arc<Vocabulary> {
        self.vocab.clone()
    }
}
