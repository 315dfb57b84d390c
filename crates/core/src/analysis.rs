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

use crate::events::{EmbeddingStats, Event, ProjectionFrame, SecondTierStats, Snapshot};
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

#[derive(Debug, thiserror::Error)]
pub enum SecondTierError {
    #[error(transparent)]
    Matrix(#[from] MatrixError),
    #[error(transparent)]
    Hull(#[from] conelab_metrics::hull::HullError),
    /// An injected failure (`CONELAB_FAULT=metrics.second_tier:…`).
    #[error("injected: {0}")]
    Injected(#[from] std::io::Error),
}

/// The second tier of one snapshot (one thread): see [`second_tier_stats`].
pub fn second_tier(
    snapshot: &Snapshot,
    groups: &RowGroups,
) -> Result<SecondTierStats, SecondTierError> {
    conelab_base::fault::check("metrics.second_tier")?;
    let w = Embeddings::new(snapshot.n, snapshot.d, &snapshot.weights)?;
    second_tier_stats(w, groups, None, Threads::Sequential)
}

/// The metrics over all pairs of W's rows, per group: neighbour frequency mix, TwoNN, and the
/// cheap test's bound on stolen rows (with the output bias `bias`, where there is one) — the
/// live workbench's slower tier and `inspect --second-tier`.
pub fn second_tier_stats(
    w: Embeddings<'_>,
    groups: &RowGroups,
    bias: Option<&[f32]>,
    threads: Threads,
) -> Result<SecondTierStats, SecondTierError> {
    let start = Instant::now();
    let tier = conelab_metrics::second_tier::second_tier(w, groups, threads)?;
    let bound = conelab_metrics::hull::can_win_upper_bound(w, bias, threads)?;
    let stolen_at_most = conelab_data::Group::ALL
        .iter()
        .map(|&g| {
            groups
                .members(g)
                .iter()
                .filter(|&&i| !bound.proven.get(i as usize).copied().unwrap_or(false))
                .count()
        })
        .collect();
    Ok(SecondTierStats {
        same_group: tier.neighbour_mix.same_group.to_vec(),
        two_nn: tier.two_nn.iter().map(|t| t.dimension).collect(),
        two_nn_duplicates: tier.two_nn.iter().map(|t| t.duplicates).collect(),
        stolen_at_most,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// When the second tier is due: on the first snapshot, then once at least ten times its last
/// duration has passed since it last started — it takes at most about a tenth of the metrics
/// thread, and the panel of the snapshots in between is not held up more than that.
#[derive(Debug, Default)]
struct SecondTierClock {
    last: Option<(Instant, f64)>,
}

impl SecondTierClock {
    /// The share of the metrics thread the second tier may take.
    const DUTY: f64 = 0.1;

    fn due(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|(at, secs)| now.duration_since(at).as_secs_f64() * Self::DUTY >= secs)
    }
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
                let mut clock = SecondTierClock::default();
                // A metric that failed on this snapshot: a warning, and whether anyone heard it.
                let warn = |step: u64, what: &str, e: &(dyn std::error::Error + 'static)| {
                    let message = format!("{what} skipped: {}", conelab_base::error::chain(e));
                    events.send(Event::Warning { step, message }).is_ok()
                };
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
                            if !warn(step, "embedding metrics", &e) {
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
                    let mut stats = analysis.stats(start.elapsed().as_secs_f64());
                    if clock.due(Instant::now()) {
                        let began = Instant::now();
                        let tier = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            second_tier(&analysis.snapshot, &groups)
                        }));
                        clock.last = Some((began, began.elapsed().as_secs_f64()));
                        match tier {
                            Ok(Ok(t)) => {
                                if let Some(s) = stats.as_mut() {
                                    s.second_tier = Some(t);
                                }
                            }
                            Ok(Err(e)) => {
                                if !warn(step, "second-tier metrics", &e) {
                                    break;
                                }
                            }
                            Err(panic) => {
                                fault.set(format!(
                                    "the metrics thread panicked at step {step} (second tier): {}",
                                    crate::run_fault::panic_message(panic.as_ref())
                                ));
                                break;
                            }
                        }
                    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The second tier runs on the first snapshot, then waits ten times its own duration: a
    /// tier that took 2 s is due again 20 s after it started, not before.
    #[test]
    fn the_second_tier_takes_a_tenth_of_the_metrics_thread() {
        let mut clock = SecondTierClock::default();
        let t0 = Instant::now();
        assert!(clock.due(t0));
        clock.last = Some((t0, 2.0));
        assert!(!clock.due(t0 + Duration::from_secs(2)));
        assert!(!clock.due(t0 + Duration::from_millis(19_900)));
        assert!(clock.due(t0 + Duration::from_secs(20)));
    }

    /// The live tier on a small W with groups: every group's numbers present, the bound a count
    /// of the group's rows at most.
    #[test]
    fn the_second_tier_of_a_snapshot_has_every_group() {
        let (n, d) = (300, 8);
        let weights: Vec<f32> = (0..n * d)
            .map(|k| ((k * 7919 % 1000) as f32 / 1000.0 - 0.5) + if k % d == 0 { 1.0 } else { 0.0 })
            .collect();
        let snapshot = Snapshot {
            step: 1,
            n,
            d,
            weights,
            spectral: None,
        };
        let groups = RowGroups::from_ranks(&conelab_data::FrequencyGroups::new(
            n,
            conelab_data::GroupBounds::default(),
        ));
        let t = second_tier(&snapshot, &groups).expect("tier");
        assert_eq!(t.same_group.len(), 3);
        assert!(t.same_group.iter().all(|v| (0.0..=1.0).contains(v)));
        assert!(t.two_nn.iter().all(|v| v.is_finite() && *v > 0.0));
        for (g, size) in [90, 150, 60].into_iter().enumerate() {
            assert!(t.stolen_at_most[g] <= size);
        }
    }
}
