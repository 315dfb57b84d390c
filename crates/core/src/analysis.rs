//! The embedding metrics of each W snapshot, computed on their own thread so that training never
//! waits for them (methods.md §2, issue: "off the training thread"). Latest wins: if the worker is
//! still busy when a newer snapshot arrives, the older pending one is skipped.
//!
//! Each analysis goes out three ways: its 2-D projections as an [`Event::Projection`] (the store
//! keeps them for the time scrub), its numbers as an [`Event::Embedding`], and the whole of it
//! (W included) in [`LatestAnalysis`], where the run answers viewers' neighbour and projection
//! requests from.

use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::events::{EmbeddingStats, Event, ProjectionFrame, Snapshot};
use crate::run_fault::Fault;
use conelab_metrics::{
    EmbeddingPanel, Embeddings, MatrixError, PanelOptions, ProjectionMode, RowGroups, Threads,
};

/// A snapshot with its full analysis (including the 2-D projections).
#[derive(Debug, Clone)]
pub struct EmbeddingAnalysis {
    pub snapshot: Arc<Snapshot>,
    pub panel: EmbeddingPanel,
}

impl EmbeddingAnalysis {
    /// The projections of this analysis as a frame of the time scrub.
    pub fn frame(&self) -> ProjectionFrame {
        ProjectionFrame {
            step: self.snapshot.step,
            uncentred: self.panel.projection.clone(),
            centred: self.panel.centred.clone(),
            spectrum: self.panel.total.sv_norm.clone(),
        }
    }

    /// The analysis as an event's numbers (`None` without groups): spectrum control's σ, where
    /// the snapshot has it, compared with W's singular values as the panel found them.
    pub fn stats(&self, seconds: f64) -> Option<EmbeddingStats> {
        let mut stats = EmbeddingStats::from_panel(self.snapshot.step, &self.panel, seconds)?;
        let total = &self.panel.total;
        let w_sv: Vec<f64> = total.sv_norm.iter().map(|v| v * total.sv_max).collect();
        stats.spectral = self.snapshot.spectral.clone().map(|s| s.against_w(&w_sv));
        Some(stats)
    }
}

/// The newest analysis, for whoever needs W or the projections of the newest snapshot (the run's
/// answers to viewers). Reading does not take it away.
#[derive(Debug, Clone, Default)]
pub struct LatestAnalysis(Arc<Mutex<Option<Arc<EmbeddingAnalysis>>>>);

impl LatestAnalysis {
    pub fn put(&self, a: Arc<EmbeddingAnalysis>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(a);
    }

    pub fn get(&self) -> Option<Arc<EmbeddingAnalysis>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[derive(Default)]
struct Pending {
    snapshot: Option<Arc<Snapshot>>,
    closed: bool,
}

type Shared = Arc<(Mutex<Pending>, Condvar)>;

pub struct AnalysisWorker {
    shared: Shared,
    thread: Option<JoinHandle<()>>,
}

/// Analyses one snapshot (one thread: the cores belong to training).
pub fn analyse(
    snapshot: Arc<Snapshot>,
    groups: &RowGroups,
) -> Result<EmbeddingAnalysis, MatrixError> {
    let w = Embeddings::new(snapshot.n, snapshot.d, &snapshot.weights)?;
    let options = PanelOptions {
        projection: Some(ProjectionMode::Uncentred),
        also_centred: true,
        scale_free: true,
        threads: Threads::Sequential,
    };
    let panel = EmbeddingPanel::compute(w, Some(groups), &options)?;
    Ok(EmbeddingAnalysis { snapshot, panel })
}

impl AnalysisWorker {
    /// Starts the worker. A panic inside an analysis ends the worker and is reported through
    /// `fault` (the engine then stops the run); so is a thread the OS refuses.
    pub fn start(
        groups: RowGroups,
        events: Sender<Event>,
        latest: LatestAnalysis,
        fault: Fault,
    ) -> Result<Self, std::io::Error> {
        let shared: Shared = Arc::default();
        let inbox = shared.clone();
        let thread = std::thread::Builder::new()
            .name("conelab-metrics".into())
            .spawn(move || {
                while let Some(snapshot) = next(&inbox) {
                    let step = snapshot.step;
                    let start = Instant::now();
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        if conelab_base::fault::check("metrics.panic").is_err() {
                            panic!("injected metrics panic");
                        }
                        analyse(snapshot, &groups)
                    }));
                    let analysis = match result {
                        Ok(Ok(a)) => a,
                        Ok(Err(e)) => {
                            let warning = Event::Warning {
                                step,
                                message: format!(
                                    "embedding metrics skipped: {}",
                                    conelab_base::error::chain(&e)
                                ),
                            };
                            if events.send(warning).is_err() {
                                break;
                            }
                            continue;
                        }
                        Err(panic) => {
                            fault.set(format!(
                                "the metrics thread panicked at step {step}: {}",
                                crate::run_fault::panic_message(panic.as_ref())
                            ));
                            break;
                        }
                    };
                    let analysis = Arc::new(analysis);
                    let stats = analysis.stats(start.elapsed().as_secs_f64());
                    latest.put(analysis.clone());
                    let projection = Event::Projection(Arc::new(analysis.frame()));
                    // Groups were given, so the stats exist.
                    let event = match stats {
                        Some(s) => Event::Embedding(Box::new(s)),
                        None => Event::Warning {
                            step,
                            message: "embedding metrics without groups".into(),
                        },
                    };
                    if events.send(projection).is_err() || events.send(event).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues a snapshot, replacing one that has not been started yet.
    pub fn submit(&self, snapshot: Arc<Snapshot>) {
        let (lock, cv) = &*self.shared;
        lock.lock().unwrap_or_else(|e| e.into_inner()).snapshot = Some(snapshot);
        cv.notify_one();
    }

    /// Lets the worker finish what is queued, then ends it.
    pub fn finish(&mut self) {
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
