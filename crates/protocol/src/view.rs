//! What a viewer knows of a run: its history, folded from engine events — the run's hub keeps
//! one and sends it to every viewer that attaches, the viewer keeps folding the live events into
//! its copy — or rebuilt from the run's metrics store for a run that is over
//! ([`RunView::from_store`]). Nothing here draws.
//!
//! Curves, embedding history and the log are bounded (older halves thinned), so a view of a
//! 100,000-step run is as small as one of a 2,000-step run.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use conelab_core::change::{Change, ConfigChange};
use conelab_core::events::{
    Command, EmbeddingStats, EvalStats, Event, EventSink, FinishReason, RecordedWhat,
    SecondTierStats, StepStats, StoredHistory, SystemStats,
};
use conelab_core::objective::Objectives;
use conelab_core::run_dir::live::FinalRecord;
use conelab_metrics::hidden::HiddenStats;

/// Events kept in the log.
pub const LOG_LINES: usize = 500;
/// Points kept per curve; older halves are thinned (every other point) when it fills.
pub const CURVE_POINTS: usize = 4_000;
/// Analysed snapshots kept in the embedding history (thinned the same way).
pub const EMBEDDING_POINTS: usize = 2_000;

/// Where the run stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum RunStatus {
    Starting,
    Running,
    Paused,
    /// A stop was requested; waiting for the engine to finish.
    Stopping,
    Finished {
        reason: FinishReason,
    },
    /// Paused after a divergence, waiting for a decision.
    Diverged {
        step: u64,
        #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
        loss: f64,
        /// The weights did not survive the steps before ([`Event::WeightsBroken`]).
        #[serde(default)]
        weights_broken: bool,
    },
    Failed {
        message: String,
    },
    /// No live process and no final record: the process died (kill -9, power loss).
    Crashed,
}

impl RunStatus {
    /// The engine is still there (training, paused, or paused after a divergence).
    pub fn is_live(&self) -> bool {
        matches!(
            self,
            RunStatus::Starting
                | RunStatus::Running
                | RunStatus::Paused
                | RunStatus::Stopping
                | RunStatus::Diverged { .. }
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogKind {
    Info,
    Intervention,
    Eval,
    Checkpoint,
    Warning,
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLine {
    pub step: u64,
    pub kind: LogKind,
    pub text: String,
}

/// Static facts about the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub name: String,
    pub device: String,
    pub total_steps: u64,
    pub windows_per_epoch: u64,
    pub parameters: usize,
    pub run_dir: Option<PathBuf>,
    /// Steps between validation passes (0: only at the end), for the ETA.
    #[serde(default)]
    pub eval_every: u64,
    /// Target tokens per optimizer update (batch × window): AGG's α is in occurrences per
    /// update, so a default switched on from the Controls is scaled to it.
    #[serde(default)]
    pub tokens_per_update: u64,
}

/// An evaluation under way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluating {
    pub split: String,
    /// Prediction positions scored, of `total`.
    pub done: u64,
    pub total: u64,
}

impl Evaluating {
    pub fn fraction(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            (self.done as f64 / self.total as f64).clamp(0.0, 1.0)
        }
    }
}

/// The run's vocabulary in id order (= frequency rank) with training counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Vocabulary {
    pub tokens: Vec<String>,
    pub counts: Vec<u64>,
}

impl Vocabulary {
    pub fn token(&self, id: u32) -> &str {
        self.tokens
            .get(id as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }

    pub fn count(&self, id: u32) -> u64 {
        self.counts.get(id as usize).copied().unwrap_or(0)
    }

    /// The count when the vocabulary has counts (a foreign matrix without `--counts` has none).
    pub fn known_count(&self, id: u32) -> Option<u64> {
        self.counts.get(id as usize).copied()
    }

    /// `vocab.tsv` of a run directory.
    pub fn read_tsv(path: &Path) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        let mut v = Self::default();
        for line in text.lines() {
            let mut parts = line.split('\t');
            v.tokens.push(parts.next().unwrap_or("").to_string());
            v.counts.push(
                parts
                    .next()
                    .and_then(|c| c.trim().parse().ok())
                    .unwrap_or(0),
            );
        }
        Ok(v)
    }
}

/// The headline numbers of one analysed snapshot, per group (frequent, medium, rare) and total:
/// the Groups pane's history sparklines.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingPoint {
    pub step: u64,
    #[serde(deserialize_with = "quad")]
    pub i1: [f64; 4],
    #[serde(deserialize_with = "quad")]
    pub i2: [f64; 4],
    #[serde(deserialize_with = "quad")]
    pub mean_cos: [f64; 4],
    #[serde(deserialize_with = "quad")]
    pub mean_norm: [f64; 4],
    #[serde(default = "nan_quad", deserialize_with = "quad")]
    pub i1_unit: [f64; 4],
    #[serde(default = "nan_quad", deserialize_with = "quad")]
    pub i2_unit: [f64; 4],
    #[serde(default = "nan_quad", deserialize_with = "quad")]
    pub isoscore: [f64; 4],
}

/// The hidden-state geometry of one validation (the Groups pane's history of it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HiddenPoint {
    pub step: u64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub mean_cos: f64,
    /// The separation margin (0 when not separable).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub margin: f64,
    /// Self-similarity of the Rare group's input types.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub self_sim_rare: f64,
}

impl HiddenPoint {
    pub fn of(step: u64, h: &HiddenStats) -> Self {
        HiddenPoint {
            step,
            mean_cos: h.mean_cos,
            margin: h.margin,
            self_sim_rare: h.self_sim.get(2).copied().unwrap_or(f64::NAN),
        }
    }
}

fn quad<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[f64; 4], D::Error> {
    let v = <[Option<f64>; 4]>::deserialize(d)?;
    Ok(v.map(|x| x.unwrap_or(f64::NAN)))
}

/// Not sent by an older run: not computed.
fn nan_quad() -> [f64; 4] {
    [f64::NAN; 4]
}

impl EmbeddingPoint {
    pub fn of(e: &EmbeddingStats) -> Self {
        let sets = [&e.groups[0], &e.groups[1], &e.groups[2], &e.total];
        Self {
            step: e.step,
            i1: sets.map(|s| s.i1),
            i2: sets.map(|s| s.i2),
            mean_cos: sets.map(|s| s.mean_cos),
            mean_norm: sets.map(|s| s.mean_norm),
            i1_unit: sets.map(|s| s.i1_unit),
            i2_unit: sets.map(|s| s.i2_unit),
            isoscore: sets.map(|s| s.isoscore),
        }
    }
}

/// A run's history as a viewer shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    pub info: RunInfo,
    pub status: RunStatus,
    pub last_step: Option<StepStats>,
    /// (step, training loss).
    #[serde(deserialize_with = "conelab_base::jsonfloat::xy_vec")]
    pub loss: Vec<(f64, f64)>,
    /// (step, validation loss).
    #[serde(deserialize_with = "conelab_base::jsonfloat::xy_vec")]
    pub valid_loss: Vec<(f64, f64)>,
    pub last_eval: Option<EvalStats>,
    /// Every validation's hidden-state geometry, oldest first (capped like the curves).
    #[serde(default)]
    pub hidden: Vec<HiddenPoint>,
    /// Every analysed snapshot's headline numbers (thinned), oldest first.
    pub embedding: Vec<EmbeddingPoint>,
    /// The newest analysed snapshot's numbers in full.
    pub last_embedding: Option<EmbeddingStats>,
    /// The newest second tier and its step (computed on some snapshots only).
    #[serde(default)]
    pub last_second_tier: Option<(u64, SecondTierStats)>,
    /// The newest system sample of the run's process.
    #[serde(default)]
    pub last_system: Option<SystemStats>,
    /// The normalised spectrum of the first analysis, to compare against.
    pub first_spectrum: Option<Vec<f64>>,
    pub objectives: Objectives,
    /// The learning rate in force: the newest step's, or the newest acknowledged change's (a
    /// paused run takes no steps, and its changes must show at once).
    pub lr: Option<f64>,
    /// The step from which the learning rate is fixed by a change (the schedule off).
    pub lr_fixed_from: Option<u64>,
    /// An evaluation under way: its split and how far it is.
    pub evaluating: Option<Evaluating>,
    /// A step's time, smoothed over the recent steps (ms), for the ETA.
    pub step_ms_smoothed: Option<f64>,
    /// Steps at which an intervention (objective change, lr) took effect.
    pub interventions: Vec<u64>,
    pub log: VecDeque<LogLine>,
    /// Steps whose 2-D projections can be asked for (the time scrub).
    pub projection_steps: Vec<u64>,
    /// The corpus's KN-3 perplexity on valid per group (frequent, medium, rare, total): the
    /// Groups pane's context gain ln(KN-3 / PPL).
    #[serde(default, deserialize_with = "conelab_base::jsonfloat::opt_f64_vec")]
    pub reference_valid: Option<Vec<f64>>,
    /// The newest finding that the model did worse than a uniform guess (its step and words):
    /// Progress says it.
    #[serde(default)]
    pub worse_than_uniform: Option<(u64, String)>,
}

impl RunView {
    pub fn new(objectives: Objectives) -> Self {
        Self {
            info: RunInfo::default(),
            status: RunStatus::Starting,
            last_step: None,
            loss: Vec::new(),
            valid_loss: Vec::new(),
            last_eval: None,
            hidden: Vec::new(),
            embedding: Vec::new(),
            last_embedding: None,
            last_second_tier: None,
            last_system: None,
            first_spectrum: None,
            objectives,
            lr: None,
            lr_fixed_from: None,
            evaluating: None,
            step_ms_smoothed: None,
            interventions: Vec::new(),
            log: VecDeque::new(),
            projection_steps: Vec::new(),
            reference_valid: None,
            worse_than_uniform: None,
        }
    }

    pub fn step(&self) -> u64 {
        self.last_step.map(|s| s.step).unwrap_or(0)
    }

    pub fn log(&mut self, step: u64, kind: LogKind, text: String) {
        if self.log.len() == LOG_LINES {
            self.log.pop_front();
        }
        self.log.push_back(LogLine { step, kind, text });
    }

    /// Folds one engine event into the view.
    pub fn on_event(&mut self, event: &Event) {
        match event {
            Event::Started(s) => {
                self.info = RunInfo {
                    name: s
                        .run_dir
                        .as_ref()
                        .and_then(|d| d.file_name())
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_else(|| "run".into()),
                    device: s.device.clone(),
                    total_steps: s.total_steps,
                    windows_per_epoch: s.windows_per_epoch,
                    parameters: s.parameters,
                    run_dir: s.run_dir.clone(),
                    eval_every: self.info.eval_every,
                    tokens_per_update: self.info.tokens_per_update,
                };
                self.objectives = s.objectives.clone();
                self.status = RunStatus::Running;
                self.log(s.step, LogKind::Info, format!("started: {}", s.objective));
            }
            Event::ConfigChanged { step, change } => {
                match change {
                    ConfigChange::Steps { after, .. } => self.info.total_steps = *after,
                    ConfigChange::Device { after, .. } => self.info.device = after.clone(),
                    ConfigChange::EvalEvery { after, .. } => self.info.eval_every = *after,
                    _ => {}
                }
                self.log(
                    *step,
                    LogKind::Intervention,
                    format!(
                        "{}: {} → {}",
                        change.key(),
                        change.before_text(),
                        change.after_text()
                    ),
                );
            }
            Event::Step(s) => {
                push_capped(&mut self.loss, (s.step as f64, s.loss), CURVE_POINTS);
                self.lr = Some(s.lr);
                self.last_step = Some(*s);
                self.evaluating = None;
                if s.step_ms.is_finite() && s.step_ms > 0.0 {
                    // Smoothed so that one slow step (a snapshot's copy, a checkpoint) does not
                    // make the ETA jump.
                    self.step_ms_smoothed = Some(match self.step_ms_smoothed {
                        Some(m) => 0.9 * m + 0.1 * s.step_ms,
                        None => s.step_ms,
                    });
                }
            }
            Event::EvalProgress {
                split, done, total, ..
            } => {
                self.evaluating = Some(Evaluating {
                    split: split.clone(),
                    done: *done,
                    total: *total,
                });
            }
            Event::Eval(e) => {
                self.evaluating = None;
                if e.split == "valid" {
                    push_capped(&mut self.valid_loss, (e.step as f64, e.loss), CURVE_POINTS);
                }
                self.log(e.step, LogKind::Eval, eval_text(e));
                if e.split == "valid" {
                    if let Some(h) = &e.hidden {
                        push_capped(&mut self.hidden, HiddenPoint::of(e.step, h), CURVE_POINTS);
                    }
                    self.last_eval = Some(e.clone());
                }
            }
            Event::Reference(r) => {
                self.reference_valid = r.kn3("valid").map(|v| v.to_vec());
            }
            Event::Embedding(e) => {
                if self.first_spectrum.is_none() {
                    self.first_spectrum = Some(e.total.sv_norm.clone());
                }
                push_capped(&mut self.embedding, EmbeddingPoint::of(e), EMBEDDING_POINTS);
                push_capped(&mut self.projection_steps, e.step, usize::MAX);
                if let Some(t) = &e.second_tier {
                    self.last_second_tier = Some((e.step, t.clone()));
                }
                self.last_embedding = Some((**e).clone());
            }
            Event::System(s) => self.last_system = Some(*s),
            Event::Projection(_) | Event::Snapshot { .. } | Event::CheckpointStaged { .. } => {}
            Event::Applied(a) if a.coalesced => {}
            Event::Applied(a) => {
                match (&a.command, &a.change) {
                    // The objectives as the run has them after the change.
                    (_, Change::Objectives { after, .. }) => {
                        self.objectives = after.objectives.clone();
                        self.interventions.push(a.step);
                    }
                    // A change known only in words: the same change applies the same way here.
                    (Command::Objective { change }, _) => {
                        let _ = self.objectives.apply(change, [usize::MAX; 3]);
                        self.interventions.push(a.step);
                    }
                    (
                        _,
                        Change::Lr {
                            after,
                            schedule_off_from,
                            ..
                        },
                    ) => {
                        self.lr = Some(*after);
                        if let Some(from) = schedule_off_from {
                            self.lr_fixed_from.get_or_insert(*from);
                        }
                        self.interventions.push(a.step);
                    }
                    (Command::Stop { .. }, _) => self.status = RunStatus::Stopping,
                    _ => {}
                }
                let text = match &a.command {
                    Command::Pause | Command::Resume | Command::SaveCheckpoint => None,
                    _ => Some(format!(
                        "{} → {}",
                        a.change.before_text(),
                        a.change.after_text()
                    )),
                };
                if let Some(text) = text {
                    self.log(a.step, LogKind::Intervention, text);
                }
            }
            Event::Rejected {
                step,
                command,
                reason,
                ..
            } => self.log(
                *step,
                LogKind::Warning,
                format!("refused {command}: {reason}"),
            ),
            Event::Checkpoint { step, path } => self.log(
                *step,
                LogKind::Checkpoint,
                format!("checkpoint {}", path.display()),
            ),
            // Logged at the step they come before — the step an lr change takes effect at and
            // a divergence is reported at, and what the store records from the acknowledgement
            // — so one pause reads "1048 paused, 1048 lr=…, 1048 resumed", live and from history.
            Event::Paused { step } => {
                if !matches!(self.status, RunStatus::Diverged { .. }) {
                    self.status = RunStatus::Paused;
                }
                // Listed at the step it comes before, it says the step it came after: the
                // header's count (issue #58: "step 353" above, "354 paused" below).
                self.log(step + 1, LogKind::Info, format!("paused after step {step}"));
            }
            Event::Resumed { step } => {
                self.status = RunStatus::Running;
                self.log(step + 1, LogKind::Info, "resumed".into());
            }
            Event::Diverged { step, loss } => {
                self.status = RunStatus::Diverged {
                    step: *step,
                    loss: *loss,
                    weights_broken: false,
                };
                self.log(
                    *step,
                    LogKind::Error,
                    format!(
                        "loss {loss} at step {step}: the step was not applied; {}",
                        conelab_core::events::diverged_advice(false)
                    ),
                );
            }
            Event::WeightsBroken { step, reason } => {
                if let RunStatus::Diverged { weights_broken, .. } = &mut self.status {
                    *weights_broken = true;
                }
                self.log(
                    *step,
                    LogKind::Error,
                    format!(
                        "{reason}: resuming here diverges again whatever the lr; {}",
                        conelab_core::events::diverged_advice(true)
                    ),
                );
            }
            Event::WorseThanUniform {
                step,
                measure,
                value,
                bound,
                steps,
            } => {
                let text = Event::worse_than_uniform_text(*measure, *value, *bound, *steps);
                self.worse_than_uniform = Some((*step, text.clone()));
                self.log(*step, LogKind::Warning, text);
            }
            Event::Warning { step, message } => self.log(*step, LogKind::Warning, message.clone()),
            Event::Recorded(r) => {
                let kind = match r.what {
                    RecordedWhat::Intervention => {
                        self.interventions.push(r.step);
                        LogKind::Intervention
                    }
                    RecordedWhat::Change => LogKind::Intervention,
                    RecordedWhat::Refused => LogKind::Warning,
                    RecordedWhat::Other => LogKind::Info,
                };
                self.log(r.step, kind, r.text.clone());
            }
            Event::Finished { step, reason } => {
                self.log(
                    *step,
                    LogKind::Info,
                    format!("finished ({})", reason.name()),
                );
                self.status = RunStatus::Finished { reason: *reason };
                self.evaluating = None;
            }
            Event::Failed { step, message } => {
                self.evaluating = None;
                self.log(*step, LogKind::Error, format!("failed: {message}"));
                self.status = RunStatus::Failed {
                    message: message.clone(),
                };
            }
        }
    }

    /// Index into `embedding` of the last snapshot taken before the last intervention took
    /// effect: "the change since the intervention" is measured from there.
    pub fn since_intervention(&self) -> Option<usize> {
        let last = *self.interventions.last()?;
        self.embedding.iter().rposition(|e| e.step < last)
    }

    /// The view of a run from its stored history (`conelab_store::history`), folded event by
    /// event as a live run's is. `objectives` are those in force at the end (the newest
    /// checkpoint's: the store keeps an objective change in words), `info` the facts of
    /// `run.toml`, `status` what the run folder says.
    pub fn from_history(
        history: &StoredHistory,
        info: RunInfo,
        objectives: Objectives,
        status: RunStatus,
    ) -> Self {
        let mut view = Self::new(objectives.clone());
        view.info = info.clone();
        for event in &history.events {
            view.on_event(event);
        }
        // What the run said as it started (its size, its epoch) beside what its folder says now.
        let folded = std::mem::take(&mut view.info);
        view.info = RunInfo {
            parameters: folded.parameters,
            windows_per_epoch: folded.windows_per_epoch,
            ..info
        };
        view.objectives = objectives;
        view.status = status;
        view.evaluating = None;
        view.projection_steps = history.projection_steps.clone();
        // What the read skipped or could not check, said where the history is shown.
        let step = view.step();
        for warning in &history.warnings {
            view.log(step, LogKind::Warning, format!("store: {warning}"));
        }
        view
    }
}

/// The log line of an evaluation.
pub fn eval_text(e: &EvalStats) -> String {
    format!(
        "{} ppl {:.2} (freq {:.1}, med {:.1}, rare {:.1}) uniq {}",
        e.split, e.ppl, e.groups[0].0, e.groups[1].0, e.groups[2].0, e.outputs.uniq
    )
}

/// Appends, thinning the older half when the list is full (the whole run's shape is kept).
pub fn push_capped<T: Clone>(list: &mut Vec<T>, item: T, cap: usize) {
    if list.len() >= cap {
        let half = list.len() / 2;
        let mut thinned: Vec<T> = list[..half].iter().step_by(2).cloned().collect();
        thinned.extend_from_slice(&list[half..]);
        *list = thinned;
    }
    list.push(item);
}

/// The hub's view and every viewer's fold the run's events the same way.
impl EventSink for RunView {
    type Error = std::convert::Infallible;
    fn on_event(&mut self, event: &Event) -> Result<(), Self::Error> {
        RunView::on_event(self, event);
        Ok(())
    }
}

/// How a run ended and where, in words: "completed at step 60", "diverged after step 4 (loss
/// NaN at step 5)" — a final record's step is the steps trained.
pub fn ended_at(f: &FinalRecord) -> String {
    match f.status.as_str() {
        "completed" => format!("completed at step {}", f.step),
        "stopped" => format!("was stopped at step {}", f.step),
        "diverged" if !f.message.is_empty() => {
            format!("diverged after step {} ({})", f.step, f.message)
        }
        "diverged" => format!("diverged after step {}", f.step),
        _ => format!("failed at step {}", f.step),
    }
}

/// How a run ended, from its final record.
pub fn status_of(f: &FinalRecord) -> RunStatus {
    match f.status.as_str() {
        "completed" => RunStatus::Finished {
            reason: FinishReason::Completed,
        },
        "stopped" => RunStatus::Finished {
            reason: FinishReason::Stopped,
        },
        "diverged" => RunStatus::Finished {
            reason: FinishReason::Diverged,
        },
        _ => RunStatus::Failed {
            message: f.message.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_the_first_and_newest_points() {
        let mut v: Vec<u32> = Vec::new();
        for i in 0..100 {
            push_capped(&mut v, i, 10);
        }
        assert!(v.len() <= 10);
        assert_eq!(v[0], 0);
        assert_eq!(*v.last().expect("last"), 99);
        assert!(v.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_view_survives_json_with_nan_numbers() {
        let mut view = RunView::new(Objectives::default());
        view.on_event(&Event::Step(StepStats {
            step: 3,
            epoch: 0.5,
            loss: 4.25,
            penalty: 0.0,
            lr: 1e-3,
            grad_norm: f64::NAN,
            tokens_per_sec: 100.0,
            step_ms: 2.0,
            rare_tokens: None,
            rare_g1: None,
            rare_in_group: None,
        }));
        view.on_event(&Event::Diverged {
            step: 4,
            loss: f64::INFINITY,
        });
        let json = serde_json::to_string(&view).expect("json");
        let back: RunView = serde_json::from_str(&json).expect("back");
        assert_eq!(back.loss, vec![(3.0, 4.25)]);
        assert!(back.last_step.expect("step").grad_norm.is_nan());
        assert!(matches!(
            back.status,
            RunStatus::Diverged { step: 4, loss, weights_broken: false } if loss.is_nan()
        ));
        assert_eq!(back.log.len(), 1);
    }

    /// Issue #58 item 3: the header advised "lower the lr and resume" while the event said
    /// resuming diverges again whatever the lr. The view's status and its log now carry one
    /// advice: the lr while the weights are sound, the newest checkpoint once they are not.
    #[test]
    fn a_divergence_gives_one_advice_in_status_and_log() {
        use conelab_core::events::diverged_advice;
        let mut view = RunView::new(Objectives::default());
        view.on_event(&Event::Diverged {
            step: 9,
            loss: f64::NAN,
        });
        assert!(
            view.log[0].text.contains(diverged_advice(false)),
            "{:?}",
            view.log
        );
        assert!(matches!(
            view.status,
            RunStatus::Diverged {
                weights_broken: false,
                ..
            }
        ));
        view.on_event(&Event::Paused { step: 8 });
        view.on_event(&Event::WeightsBroken {
            step: 8,
            reason: "the weights did not survive (max |w| 3e12)".into(),
        });
        assert!(matches!(
            view.status,
            RunStatus::Diverged {
                step: 9,
                weights_broken: true,
                ..
            }
        ));
        let last = &view.log.back().expect("logged").text;
        assert!(
            last.contains(diverged_advice(true)) && last.contains("3e12"),
            "{last}"
        );
        assert!(!diverged_advice(true).contains("resume (p)"));
        // Resumed: running again, whatever was advised.
        view.on_event(&Event::Resumed { step: 8 });
        assert_eq!(view.status, RunStatus::Running);
    }

    /// Issue #37: one pause read "1047 paused, 1048 lr …, 1047 resumed". Pause and resume are
    /// logged at the step they come before, with the change and the divergence.
    #[test]
    fn a_pause_its_change_and_its_resume_read_at_one_step() {
        let mut view = RunView::new(Objectives::default());
        view.on_event(&Event::Paused { step: 1047 });
        view.on_event(&Event::Applied(conelab_core::events::AppliedCommand {
            step: 1048,
            command: Command::SetLr { lr: 1e-4 },
            change: Change::Lr {
                before: 1e-3,
                after: 1e-4,
                schedule_off_from: Some(1048),
            },
            ticket: None,
            coalesced: false,
        }));
        view.on_event(&Event::Resumed { step: 1047 });
        let steps: Vec<u64> = view.log.iter().map(|l| l.step).collect();
        assert_eq!(steps, vec![1048, 1048, 1048]);
        // Issue #58: the header counts 1047 steps done; the pause line says that number.
        assert_eq!(view.log[0].text, "paused after step 1047");
        assert_eq!(view.lr, Some(1e-4));
        assert_eq!(view.lr_fixed_from, Some(1048));
        // A divergence at step 5 (not applied) and the pause after step 4: both at 5.
        let mut view = RunView::new(Objectives::default());
        view.on_event(&Event::Diverged {
            step: 5,
            loss: f64::NAN,
        });
        view.on_event(&Event::Paused { step: 4 });
        let steps: Vec<u64> = view.log.iter().map(|l| l.step).collect();
        assert_eq!(steps, vec![5, 5]);
    }
}

#[cfg(test)]
mod ended_tests {
    use super::*;

    /// A final record's step is the steps trained: a divergence reads "after" it, with the
    /// step that diverged from the message.
    #[test]
    fn how_a_run_ended_reads_in_words() {
        let f = |status: &str, step: u64, message: &str| FinalRecord {
            status: status.into(),
            step,
            total_steps: 60,
            exit_code: 0,
            message: message.into(),
            by_signal: false,
            finished_unix: 0.0,
            host: "h".into(),
        };
        assert_eq!(ended_at(&f("completed", 60, "")), "completed at step 60");
        assert_eq!(
            ended_at(&f("diverged", 4, "loss NaN at step 5")),
            "diverged after step 4 (loss NaN at step 5)"
        );
        assert_eq!(ended_at(&f("stopped", 7, "")), "was stopped at step 7");
    }
}
