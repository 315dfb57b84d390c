//! A run's answers to the requests only it can answer cheaply (`conelab_protocol::requests`): a
//! live run's from its newest analysis in memory ([`LiveAnswers`]), a run that is over from its
//! store and its newest checkpoint ([`StoredAnswers`]), so a viewer never loads W itself.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use conelab_core::analysis::LatestAnalysis;
use conelab_core::events::ProjectionFrame;
use conelab_core::labels::{LabelEdit, RunLabels};
use conelab_core::run_dir::CheckpointError;
use conelab_metrics::{Embeddings, NeighborIndex, Similarity, Threads};
use conelab_protocol::message::WordNeighbors;
use conelab_protocol::requests::{AnswerError, Answers};
use conelab_protocol::view::Vocabulary;

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
            (Some(s), _) => {
                conelab_store::projection::read(&self.store_dir, s).map_err(AnswerError::read)
            }
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
            let w = Embeddings::new(snap.n, snap.d, &snap.weights)
                .map_err(AnswerError::reading("the snapshot's W"))?;
            Ok(NeighborIndex::new(w, Threads::Sequential))
        })?;
        Ok((Some(snap.step), query(&index, words, k)))
    }

    fn vocabulary(&self) -> Arc<Vocabulary> {
        self.vocab.clone()
    }

    fn edit_labels(&self, edit: &LabelEdit) -> Result<RunLabels, AnswerError> {
        conelab_store::labels::edit_record(&self.store_dir, edit).map_err(AnswerError::read)
    }
}

fn newest_stored(store_dir: &Path) -> Result<Option<ProjectionFrame>, AnswerError> {
    let steps = conelab_store::projection::list(store_dir).map_err(AnswerError::read)?;
    match steps.last() {
        Some(&s) => conelab_store::projection::read(store_dir, s).map_err(AnswerError::read),
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
            Some(s) => {
                conelab_store::projection::read(&self.store_dir, s).map_err(AnswerError::read)
            }
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
            Err(CheckpointError::NoCheckpoint(_)) => {
                return Ok((None, Vec::new()));
            }
            Err(e) => return Err(AnswerError::read(e)),
        };
        let step = conelab_core::run_dir::step_of(&newest).unwrap_or(0);
        let index = self.index.get_or_build(step, || {
            let m = conelab_core::run_dir::matrix::load_matrix(&newest, None)
                .map_err(AnswerError::reading("the newest checkpoint's W"))?;
            let w = Embeddings::new(m.n, m.d, &m.data)
                .map_err(AnswerError::reading("the snapshot's W"))?;
            Ok(NeighborIndex::new(w, Threads::All))
        })?;
        Ok((Some(step), query(&index, words, k)))
    }

    fn vocabulary(&self) -> Arc<Vocabulary> {
        self.vocab.clone()
    }
}
