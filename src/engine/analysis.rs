//! The embedding metrics of each W snapshot, computed on their own thread so that training never
//! waits for them (methods.md §2, issue: "off the training thread"). Latest wins: if the worker is
//! still busy when a newer snapshot arrives, the older pending one is skipped.

use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use serde::Serialize;

use super::protocol::{Event, Snapshot};
use crate::metrics::{
    EmbeddingPanel, Embeddings, PanelOptions, ProjectionMode, RowGroups, SetStats, Threads,
};

/// The numbers of one snapshot's analysis, as an event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbeddingStats {
    pub step: u64,
    pub total: SetStats,
    /// Frequent, medium, rare.
    pub groups: [SetStats; 3],
    pub rare_frequent_cos: f64,
    pub seconds: f64,
}

impl EmbeddingStats {
    /// The metrics of a panel computed with groups; `None` without them.
    pub fn from_panel(step: u64, panel: &EmbeddingPanel, seconds: f64) -> Option<Self> {
        Some(Self {
            step,
            total: panel.total.clone(),
            groups: panel.groups.clone()?,
            rare_frequent_cos: panel.rare_frequent_cos.unwrap_or(f64::NAN),
            seconds,
        })
    }
}

/// A snapshot with its full analysis (including the 2-D projection), for the UI.
#[derive(Debug, Clone)]
pub struct EmbeddingAnalysis {
    pub snapshot: Arc<Snapshot>,
    pub panel: EmbeddingPanel,
}

/// Latest-wins hand-over of analyses to the UI.
#[derive(Debug, Clone, Default)]
pub struct AnalysisSlot(Arc<Mutex<Option<Arc<EmbeddingAnalysis>>>>);

impl AnalysisSlot {
    fn put(&self, a: EmbeddingAnalysis) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(a));
    }

    pub fn take(&self) -> Option<Arc<EmbeddingAnalysis>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[derive(Default)]
struct Pending {
    snapshot: Option<Arc<Snapshot>>,
    closed: bool,
}

type Shared = Arc<(Mutex<Pending>, Condvar)>;

pub(crate) struct AnalysisWorker {
    shared: Shared,
    thread: Option<JoinHandle<()>>,
}

impl AnalysisWorker {
    pub(crate) fn start(groups: RowGroups, events: Sender<Event>, out: AnalysisSlot) -> Self {
        let shared: Shared = Arc::default();
        let inbox = shared.clone();
        let thread = std::thread::Builder::new()
            .name("conelab-metrics".into())
            .spawn(move || {
                while let Some(snapshot) = next(&inbox) {
                    let start = Instant::now();
                    let result = Embeddings::new(snapshot.n, snapshot.d, &snapshot.weights)
                        .and_then(|w| {
                            // One thread: the cores belong to training.
                            let options = PanelOptions {
                                projection: Some(ProjectionMode::Uncentred),
                                also_centred: true,
                                threads: Threads::Sequential,
                            };
                            EmbeddingPanel::compute(w, Some(&groups), &options)
                        });
                    let event = match result {
                        Ok(panel) => {
                            // Groups were given, so the stats exist.
                            let stats = EmbeddingStats::from_panel(
                                snapshot.step,
                                &panel,
                                start.elapsed().as_secs_f64(),
                            );
                            out.put(EmbeddingAnalysis {
                                snapshot: snapshot.clone(),
                                panel,
                            });
                            match stats {
                                Some(s) => Event::Embedding(Box::new(s)),
                                None => Event::Warning {
                                    step: snapshot.step,
                                    message: "embedding metrics without groups".into(),
                                },
                            }
                        }
                        Err(e) => Event::Warning {
                            step: snapshot.step,
                            message: format!("embedding metrics skipped: {e}"),
                        },
                    };
                    if events.send(event).is_err() {
                        break;
                    }
                }
            })
            .ok();
        Self { shared, thread }
    }

    /// Queues a snapshot, replacing one that has not been started yet.
    pub(crate) fn submit(&self, snapshot: Arc<Snapshot>) {
        let (lock, cv) = &*self.shared;
        lock.lock().unwrap_or_else(|e| e.into_inner()).snapshot = Some(snapshot);
        cv.notify_one();
    }

    /// Lets the worker finish what is queued, then ends it.
    pub(crate) fn finish(&mut self) {
        {
            let (lock, cv) = &*self.shared;
            lock.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
            cv.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AnalysisWorker {
    fn drop(&mut self) {
        self.finish();
    }
}

fn next(shared: &Shared) -> Option<Arc<Snapshot>> {
    let (lock, cv) = &**shared;
    let mut p = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(s) = p.snapshot.take() {
            return Some(s);
        }
        if p.closed {
            return None;
        }
        p = cv.wait(p).unwrap_or_else(|e| e.into_inner());
    }
}
