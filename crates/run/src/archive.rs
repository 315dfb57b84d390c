//! What a viewer of a finished run needs from its folder, read from the store and the newest
//! checkpoint here, on the side that links them (`conelab_client::open::RunArchive`).

use std::path::Path;
use std::sync::Arc;

use conelab_base::error::BoxError;
use conelab_client::open::RunArchive;
use conelab_core::events::StoredHistory;
use conelab_core::labels::RunLabels;
use conelab_protocol::requests::Answers;
use conelab_protocol::view::Vocabulary;
use conelab_store::StoreError;

use crate::answers::StoredAnswers;

/// A run's store and checkpoints on disk.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreArchive;

impl RunArchive for StoreArchive {
    fn history(&self, dir: &Path) -> Result<Option<StoredHistory>, BoxError> {
        match conelab_store::history::read(dir) {
            Ok(history) => Ok(Some(history)),
            Err(StoreError::NoStore(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn labels(&self, dir: &Path) -> RunLabels {
        conelab_store::read_run_record(&conelab_store::store_dir(dir))
            .map(|r| r.labels)
            .unwrap_or_default()
    }

    fn answers(&self, dir: &Path, vocab: Arc<Vocabulary>) -> Arc<dyn Answers> {
        Arc::new(StoredAnswers::new(dir.to_path_buf(), vocab))
    }
}
