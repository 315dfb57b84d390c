//! What a viewer knows of a run: its history, folded from engine events — the run's hub keeps
//! one and sends it to every viewer that attaches, the viewer keeps folding the live events into
//! its copy — or rebuilt from the run's metrics store for a run that is over
//! ([`RunView::from_store`]). Nothing here draws.
//!
//! Curves, embedding history and the log are bounded (older halves thinned), so a view of a
//! 100,000-step run is as small as one of a 2,000-step run.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use conelab_core::events::{
    Command, EmbeddingStats, EvalStats, Event, EventSink, FinishReason, SecondTierStats, StepStats,
    SystemStats,
};
use conelab_core::objective::Objectives;
use conelab_core::series::{series_key, split};
use conelab_metrics::OutputMetrics;
use conelab_metrics::embedding::SetStats;
use conelab_metrics::hidden::HiddenStats;
use conelab_metrics::outputs::{GroupOutputs, Histogram2d};
use conelab_store::{self as store, StoreError, col};

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

/// What the engine's acknowledgement of a learning-rate change says when it stopped a schedule
/// (`lr=X (schedule off from step N)`).
pub const SCHEDULE_OFF: &str = "schedule off from step";

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
            Event::ConfigChanged {
                step,
                key,
                before,
                after,
            } => {
                if key == "steps"
                    && let Ok(t) = after.parse()
                {
                    self.info.total_steps = t;
                }
                if key == "device" {
                    self.info.device = after.clone();
                }
                if key == "eval_every"
                    && let Ok(e) = after.parse()
                {
                    self.info.eval_every = e;
                }
                self.log(
                    *step,
                    LogKind::Intervention,
                    format!("{key}: {before} → {after}"),
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
                match &a.command {
                    Command::Objective { change } => {
                        // Mirror the engine's state: the same change applies the same way here.
                        let _ = self.objectives.apply(change, [usize::MAX; 3]);
                        self.interventions.push(a.step);
                    }
                    Command::SetLr { lr } => {
                        self.lr = Some(*lr);
                        if a.after.contains(SCHEDULE_OFF) {
                            self.lr_fixed_from.get_or_insert(a.step);
                        }
                        self.interventions.push(a.step);
                    }
                    Command::Stop { .. } => self.status = RunStatus::Stopping,
                    Command::Pause | Command::Resume | Command::SaveCheckpoint => {}
                }
                let text = match &a.command {
                    Command::Pause | Command::Resume | Command::SaveCheckpoint => None,
                    _ => Some(format!("{} → {}", a.before, a.after)),
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
                self.log(step + 1, LogKind::Info, "paused".into());
            }
            Event::Resumed { step } => {
                self.status = RunStatus::Running;
                self.log(step + 1, LogKind::Info, "resumed".into());
            }
            Event::Diverged { step, loss } => {
                self.status = RunStatus::Diverged {
                    step: *step,
                    loss: *loss,
                };
                self.log(
                    *step,
                    LogKind::Error,
                    format!("loss {loss} at step {step}: the step was not applied"),
                );
            }
            Event::Warning { step, message } => self.log(*step, LogKind::Warning, message.clone()),
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

    /// The history of a run from its metrics store. `objectives` are those in force at the end
    /// (the newest checkpoint's), `info` the facts from `run.toml`, `status` what the run folder
    /// says; the rest comes from the store.
    pub fn from_store(
        run_dir: &Path,
        info: RunInfo,
        objectives: Objectives,
        status: RunStatus,
    ) -> Result<Self, StoreError> {
        let st = store::load_columns(run_dir, &[col::KEY, col::STEP, col::VALUE, col::EPOCH])?;
        let mut view = Self::new(objectives);
        view.info = info;
        view.status = status;
        let rows = Rows::of(&st.metrics)?;
        // Facts the store keeps about the run itself.
        if let Some(&(_, v)) = rows.get(split::RUN, "total", "parameters").last() {
            view.info.parameters = v as usize;
        }
        if let Some(&(_, v)) = rows.get(split::RUN, "total", "windows_per_epoch").last() {
            view.info.windows_per_epoch = v as u64;
        }
        // Training curve and the newest step.
        let loss = rows.get(split::TRAIN, "total", "loss");
        let h = store::query::decimate(
            &loss.iter().map(|p| p.0).collect::<Vec<_>>(),
            &loss.iter().map(|p| p.1).collect::<Vec<_>>(),
            CURVE_POINTS / 2,
        );
        view.loss = h
            .steps
            .iter()
            .zip(&h.values)
            .map(|(s, v)| (*s as f64, *v))
            .collect();
        if let Some(&(step, loss)) = loss.last() {
            let at = |m: &str| rows.value_at(split::TRAIN, "total", m, step);
            view.last_step = Some(StepStats {
                step,
                epoch: rows.epoch_at(step).unwrap_or(f64::NAN),
                loss,
                penalty: at("penalty").unwrap_or(0.0),
                lr: at("lr").unwrap_or(f64::NAN),
                grad_norm: at("grad_norm").unwrap_or(f64::NAN),
                tokens_per_sec: at("tokens_per_sec").unwrap_or(f64::NAN),
                step_ms: at("step_ms").unwrap_or(f64::NAN),
                rare_tokens: at("rare_tokens").map(|v| v as usize),
                rare_g1: at("rare_g1"),
                rare_in_group: at("rare_in_group").map(|v| v as usize),
            });
            view.lr = at("lr");
        }
        view.valid_loss = rows
            .get(split::VALID, "total", "loss")
            .iter()
            .map(|(s, v)| (*s as f64, *v))
            .collect();
        view.last_eval = rows
            .get(split::VALID, "total", "ppl")
            .last()
            .map(|&(step, _)| rows.eval_at(split::VALID, step));
        for &(step, _) in rows.get(split::VALID, "total", store::writer::H_POSITIONS) {
            if let Some(h) = rows.hidden_at(split::VALID, step) {
                push_capped(&mut view.hidden, HiddenPoint::of(step, &h), CURVE_POINTS);
            }
        }
        // The corpus's reference (recorded at the start of runs since it exists).
        let reference: Vec<f64> = ["frequent", "medium", "rare", "total"]
            .iter()
            .map(|g| {
                rows.get(split::VALID, g, "ref_ppl")
                    .last()
                    .map_or(f64::NAN, |p| p.1)
            })
            .collect();
        view.reference_valid = reference.iter().any(|v| v.is_finite()).then_some(reference);
        // Embedding history.
        for &(step, _) in rows.get(split::EMBEDDING, "total", "i1") {
            let e = rows.embedding_at(step);
            push_capped(
                &mut view.embedding,
                EmbeddingPoint::of(&e),
                EMBEDDING_POINTS,
            );
            if view.first_spectrum.is_none() {
                view.first_spectrum = Some(e.total.sv_norm.clone());
            }
            if let Some(t) = &e.second_tier {
                view.last_second_tier = Some((step, t.clone()));
            }
            view.last_embedding = Some(e);
        }
        view.projection_steps = store::projection::list(&st.dir)?;
        // The log: events and evaluations in step order, the newest LOG_LINES.
        let mut lines: Vec<LogLine> = Vec::new();
        for split_name in [split::VALID, split::TEST] {
            for &(step, _) in rows.get(split_name, "total", "ppl") {
                lines.push(LogLine {
                    step,
                    kind: LogKind::Eval,
                    text: eval_text(&rows.eval_at(split_name, step)),
                });
            }
        }
        let ev = &st.events;
        let (steps, kinds, details, befores, afters) = (
            ev.column(col::STEP)?.u64()?,
            ev.column(col::KIND)?.str()?,
            ev.column(col::DETAIL)?.str()?,
            ev.column(col::BEFORE)?.str()?,
            ev.column(col::AFTER)?.str()?,
        );
        for i in 0..ev.height() {
            let step = steps.get(i).unwrap_or(0);
            let kind = kinds.get(i).unwrap_or("");
            let (detail, before, after) = (
                details.get(i).unwrap_or(""),
                befores.get(i).unwrap_or(""),
                afters.get(i).unwrap_or(""),
            );
            let (kind, text) = match kind {
                "start" => (LogKind::Info, format!("started: {detail}")),
                k if k == "lr" || store::query::OBJECTIVE_CHANGE_KINDS.contains(&k) => {
                    if k == "lr" {
                        if after.contains(SCHEDULE_OFF) {
                            view.lr_fixed_from.get_or_insert(step);
                        }
                        // Changed after the last step (while paused): the step's lr is older.
                        if view.last_step.is_none_or(|s| step > s.step)
                            && let Some(lr) = after
                                .strip_prefix("lr=")
                                .and_then(|v| v.split_whitespace().next())
                                .and_then(|v| v.parse().ok())
                        {
                            view.lr = Some(lr);
                        }
                    }
                    view.interventions.push(step);
                    (LogKind::Intervention, format!("{before} → {after}"))
                }
                "config" => (
                    LogKind::Intervention,
                    format!("{detail}: {before} → {after}"),
                ),
                "stop" => (LogKind::Intervention, format!("{before} → {after}")),
                "pause" => (LogKind::Info, "paused".into()),
                "resume" => (LogKind::Info, "resumed".into()),
                "checkpoint" => (LogKind::Checkpoint, format!("checkpoint {detail}")),
                "rejected" => (LogKind::Warning, format!("refused {detail}")),
                "nan" => (
                    LogKind::Error,
                    format!("{detail} at step {step}: the step was not applied"),
                ),
                "warning" => (LogKind::Warning, detail.to_string()),
                "finish" => (LogKind::Info, format!("finished ({detail})")),
                "failed" => (LogKind::Error, format!("failed: {detail}")),
                other => (LogKind::Info, format!("{other}: {detail}")),
            };
            lines.push(LogLine { step, kind, text });
        }
        // Stable: at one step, evaluations before the events that follow them.
        lines.sort_by_key(|l| l.step);
        view.interventions.sort_unstable();
        for l in lines.into_iter().rev().take(LOG_LINES).rev() {
            view.log.push_back(l);
        }
        Ok(view)
    }
}

/// Every series of a metrics table, by its key, as (step, value) in step order, one row per step
/// (of rows written twice for a step, the later: a resumed run's); one pass.
struct Rows {
    series: HashMap<i64, Vec<(u64, f64)>, BuildHasherDefault<SeriesKeyHasher>>,
    /// Training epoch by step (the train loss rows' epoch column), in step order.
    epochs: Vec<(u64, f64)>,
    /// The spectrum series sv0000, sv0001, … that exist, in order.
    spectrum: Vec<i64>,
}

/// Series keys are 64-bit FNV-1a hashes already ([`conelab_core::series::series_key`]): hashing them again with
/// SipHash was a tenth of opening a long run's store.
#[derive(Default)]
struct SeriesKeyHasher(u64);

impl std::hash::Hasher for SeriesKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn write_i64(&mut self, key: i64) {
        self.0 = key as u64;
    }
}

/// Sorts by step, stably, and keeps the last of the rows of one step.
fn last_per_step<T>(v: &mut Vec<(u64, T)>) {
    v.sort_by_key(|p| p.0);
    let mut out: Vec<(u64, T)> = Vec::with_capacity(v.len());
    for p in v.drain(..) {
        match out.last_mut() {
            Some(q) if q.0 == p.0 => *q = p,
            _ => out.push(p),
        }
    }
    *v = out;
}

impl Rows {
    /// From the key, step, value and epoch columns of a metrics table, in arrival order
    /// (deduplicated or not).
    fn of(df: &store::Frame) -> Result<Self, StoreError> {
        let train_loss = series_key(split::TRAIN, "total", "loss");
        let mut series: HashMap<i64, Vec<(u64, f64)>, BuildHasherDefault<SeriesKeyHasher>> =
            HashMap::default();
        let mut epoch_of = Vec::new();
        for r in store::rows::metric_rows(df)? {
            series
                .entry(r.key)
                .or_default()
                .push((r.step, r.value.unwrap_or(f64::NAN)));
            if r.key == train_loss
                && let Some(e) = r.epoch
            {
                epoch_of.push((r.step, e));
            }
        }
        for v in series.values_mut() {
            // Rows of one series arrive in step order except across a resume.
            last_per_step(v);
        }
        last_per_step(&mut epoch_of);
        let spectrum = (0..)
            .map(|k| {
                series_key(
                    split::SPECTRUM,
                    "total",
                    &conelab_core::series::spectrum_metric(k),
                )
            })
            .take_while(|key| series.contains_key(key))
            .collect();
        Ok(Self {
            series,
            epochs: epoch_of,
            spectrum,
        })
    }

    fn get(&self, split: &str, group: &str, metric: &str) -> &[(u64, f64)] {
        self.series
            .get(&series_key(split, group, metric))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    fn value_at(&self, split: &str, group: &str, metric: &str, step: u64) -> Option<f64> {
        at_step(self.get(split, group, metric), step)
    }

    fn epoch_at(&self, step: u64) -> Option<f64> {
        at_step(&self.epochs, step)
    }

    fn eval_at(&self, split_name: &str, step: u64) -> EvalStats {
        let at = |group: &str, m: &str| self.value_at(split_name, group, m, step);
        let total = |m: &str| at("total", m).unwrap_or(f64::NAN);
        let count = |group: &str, m: &str| at(group, m).unwrap_or(0.0) as usize;
        let groups: [GroupOutputs; 3] = [0, 1, 2].map(|g| {
            let name = conelab_core::series::GROUPS[g + 1];
            GroupOutputs {
                ppl: at(name, "ppl").unwrap_or(f64::NAN),
                positions: count(name, "positions") as u64,
                uniq: count(name, "uniq"),
                human_uniq: count(name, "human_uniq"),
                theorem2_below: at(name, "theorem2_below")
                    .filter(|v| v.is_finite())
                    .map(|v| v as usize),
                tokens: count(name, "tokens"),
            }
        });
        let bins = [
            count("total", store::writer::HIST_ENTROPY_BINS),
            count("total", store::writer::HIST_LOG_Z_BINS),
        ];
        let mut counts = vec![0u64; bins[0] * bins[1]];
        for (i, c) in counts.iter_mut().enumerate() {
            if let Some(v) = at("total", &store::writer::hist_cell(i)) {
                *c = v as u64;
            }
        }
        let outputs = OutputMetrics {
            positions: total("positions") as u64,
            loss: total("loss"),
            ppl: total("ppl"),
            groups: groups.clone(),
            uniq: count("total", "uniq"),
            human_uniq: count("total", "human_uniq"),
            block_length: count("total", "block_length"),
            mu_z: total("mu_z"),
            sigma_z: total("sigma_z"),
            unnormalised_ppl: total("unnormalised_ppl"),
            entropy_log_z_corr: total("entropy_log_z_corr"),
            histogram: Histogram2d {
                entropy_range: [
                    total(store::writer::HIST_ENTROPY_LO),
                    total(store::writer::HIST_ENTROPY_HI),
                ],
                log_z_range: [
                    total(store::writer::HIST_LOG_Z_LO),
                    total(store::writer::HIST_LOG_Z_HI),
                ],
                entropy_bins: bins[0],
                log_z_bins: bins[1],
                counts,
            },
            theorem2_gamma: total("theorem2_gamma"),
            theorem2_threshold: Some(total("theorem2_threshold")).filter(|v| v.is_finite()),
        };
        let hidden = self.hidden_at(split_name, step).map(Box::new);
        EvalStats {
            step,
            split: split_name.to_string(),
            loss: total("loss"),
            ppl: total("ppl"),
            groups: [0, 1, 2].map(|g| (groups[g].ppl, groups[g].positions)),
            positions: total("positions") as u64,
            seconds: total("seconds"),
            outputs: Box::new(outputs),
            hidden,
        }
    }

    fn embedding_at(&self, step: u64) -> EmbeddingStats {
        let set = |group: &str| {
            let at = |m: &str| {
                self.value_at(split::EMBEDDING, group, m, step)
                    .unwrap_or(f64::NAN)
            };
            SetStats {
                rows: self
                    .value_at(split::EMBEDDING, group, "rows", step)
                    .unwrap_or(0.0) as usize,
                i1: at("i1"),
                i2: at("i2"),
                mean_norm: at("mean_norm"),
                sv_norm: Vec::new(),
                sv_max: at("sv_max"),
                effective_rank: at("effective_rank"),
                mean_cos: at("mean_cos"),
                mean_cos_to_mean: at("mean_cos_to_mean"),
                i1_unit: at("i1_unit"),
                i2_unit: at("i2_unit"),
                isoscore: at("isoscore"),
                isoscore_random: at("isoscore_random"),
                abtt_top_variance: at("abtt_top_variance"),
                abtt_mean_cos: at("abtt_mean_cos"),
                rogue_share: at("rogue_share"),
            }
        };
        let mut total = set("total");
        total.sv_norm = self
            .spectrum
            .iter()
            .map_while(|key| {
                let s = self.series.get(key).map(Vec::as_slice).unwrap_or(&[]);
                at_step(s, step)
            })
            .collect();
        EmbeddingStats {
            step,
            total,
            groups: [set("frequent"), set("medium"), set("rare")],
            rare_frequent_cos: self
                .value_at(split::EMBEDDING, "total", "rare_frequent_cos", step)
                .unwrap_or(f64::NAN),
            seconds: self
                .value_at(split::EMBEDDING, "total", "seconds", step)
                .unwrap_or(f64::NAN),
            // The store keeps spectrum control's summaries (`sc_*`), not σ and its targets: the
            // Spectrum pane's line waits for the next snapshot of a live run.
            spectral: None,
            second_tier: self.second_tier_at(step),
        }
    }

    /// The hidden-state geometry of the evaluation of `split_name` at `step`; `None` for a run
    /// from before the sample (no `h_positions`).
    fn hidden_at(&self, split_name: &str, step: u64) -> Option<HiddenStats> {
        use store::writer as w;
        let at = |group: &str, m: &str| self.value_at(split_name, group, m, step);
        let total = |m: &str| at("total", m).unwrap_or(f64::NAN);
        let count = |group: &str, m: &str| at(group, m).unwrap_or(0.0) as usize;
        let positions = at("total", w::H_POSITIONS)?;
        let names = &conelab_core::series::GROUPS[1..];
        Some(HiddenStats {
            positions: positions as usize,
            mean_cos: total(w::H_MEAN_COS),
            isoscore: total(w::H_ISOSCORE),
            self_sim: names
                .iter()
                .map(|g| at(g, w::H_SELF_SIM).unwrap_or(f64::NAN))
                .collect(),
            self_sim_types: [0, 1, 2].map(|g| count(names[g], w::H_SELF_SIM_TYPES)),
            separable: total(w::H_SEPARABLE) == 1.0,
            margin: total(w::H_MARGIN),
            certificate: total(w::H_CERTIFICATE),
            proven: total(w::H_PROVEN) == 1.0,
            support: count("total", w::H_SUPPORT),
            neg_u_rare_cos: total(w::H_NEG_U_RARE_COS),
            direction: Vec::new(),
            weights: Vec::new(),
        })
    }

    /// The second tier of the snapshot at `step`, if it was due there.
    fn second_tier_at(&self, step: u64) -> Option<SecondTierStats> {
        use store::writer as w;
        let seconds = self.value_at(split::EMBEDDING, "total", w::ST_SECONDS, step)?;
        let per_group = |metric: &str| -> Vec<f64> {
            conelab_core::series::GROUPS[1..]
                .iter()
                .map(|g| {
                    self.value_at(split::EMBEDDING, g, metric, step)
                        .unwrap_or(f64::NAN)
                })
                .collect()
        };
        let counts = |metric: &str| -> Vec<usize> {
            per_group(metric)
                .into_iter()
                .map(|v| if v.is_finite() { v as usize } else { 0 })
                .collect()
        };
        Some(SecondTierStats {
            same_group: per_group(w::ST_SAME_GROUP),
            two_nn: per_group(w::ST_TWO_NN),
            two_nn_duplicates: counts(w::ST_TWO_NN_DUPLICATES),
            stolen_at_most: counts(w::ST_STOLEN_AT_MOST),
            seconds,
        })
    }
}

/// The value of a step-ordered series at `step`.
fn at_step(series: &[(u64, f64)], step: u64) -> Option<f64> {
    let i = series.partition_point(|p| p.0 < step);
    series.get(i).filter(|p| p.0 == step).map(|p| p.1)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of a series as a resumed run leaves them (steps 3–4 written twice): step order, and
    /// of two rows of a step the later one.
    #[test]
    fn a_series_keeps_the_last_row_of_each_step_in_step_order() {
        let mut v = vec![
            (1, 'a'),
            (2, 'b'),
            (3, 'c'),
            (4, 'd'),
            (3, 'C'),
            (4, 'D'),
            (5, 'E'),
        ];
        last_per_step(&mut v);
        assert_eq!(v, vec![(1, 'a'), (2, 'b'), (3, 'C'), (4, 'D'), (5, 'E')]);
        let mut empty: Vec<(u64, char)> = Vec::new();
        last_per_step(&mut empty);
        assert!(empty.is_empty());
        assert_eq!(at_step(&[(2, 1.5), (4, 2.5)], 4), Some(2.5));
        assert_eq!(at_step(&[(2, 1.5), (4, 2.5)], 3), None);
    }

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

    /// An evaluation with the hidden-state geometry, recorded by the store and read back, gives
    /// the view the same numbers as the live event did (what a viewer attaching to a finished run
    /// sees), and an evaluation without it (a run from before) gives none.
    #[test]
    fn hidden_state_geometry_survives_the_store() {
        use conelab_data::{FrequencyGroups, GroupBounds};
        use conelab_metrics::{OutputAccumulator, OutputBatch};
        let eval = |step: u64, hidden: Option<HiddenStats>| {
            let mut acc = OutputAccumulator::new(FrequencyGroups::new(10, GroupBounds::default()));
            let targets: Vec<u32> = (0..10).collect();
            let lp = vec![-2.0f32; 10];
            let ones = vec![1.0f32; 10];
            acc.add(OutputBatch {
                targets: &targets,
                target_log_probs: &lp,
                log_z: &ones,
                entropy: &ones,
                argmax: &targets,
                prob_sum: &ones,
            })
            .expect("batch");
            let outputs = acc.finish(10, 0.0);
            Event::Eval(EvalStats::from_outputs(
                step,
                "valid".into(),
                outputs,
                1.0,
                hidden.map(Box::new),
            ))
        };
        let hidden = |step: u64| HiddenStats {
            positions: 4096,
            mean_cos: 0.5 + step as f64 / 1000.0,
            isoscore: 0.25,
            self_sim: vec![0.1, 0.2, f64::NAN],
            self_sim_types: [64, 64, 0],
            separable: step > 10,
            margin: if step > 10 { 0.125 } else { 0.0 },
            certificate: 0.126,
            proven: true,
            support: 3,
            neg_u_rare_cos: if step > 10 { 0.75 } else { f64::NAN },
            direction: Vec::new(),
            weights: Vec::new(),
        };
        let events = [
            eval(5, None),
            eval(10, Some(hidden(10))),
            eval(20, Some(hidden(20))),
        ];
        let tmp = tempfile::tempdir().expect("tmp");
        let record = store::RunRecord::new("h", String::new(), "synthetic".into(), "cpu".into());
        let mut writer = store::StoreWriter::open(tmp.path(), &record).expect("store");
        let mut live = RunView::new(Objectives::default());
        for e in &events {
            writer.record(e).expect("record");
            live.on_event(e);
        }
        writer.flush().expect("flush");
        let stored = RunView::from_store(
            tmp.path(),
            RunInfo::default(),
            Objectives::default(),
            RunStatus::Starting,
        )
        .expect("view");
        for view in [&live, &stored] {
            let steps: Vec<u64> = view.hidden.iter().map(|h| h.step).collect();
            assert_eq!(steps, vec![10, 20]);
            assert_eq!(view.hidden[1].margin, 0.125);
            assert_eq!(view.hidden[0].mean_cos, 0.51);
            let h = view.last_eval.as_ref().and_then(|e| e.hidden.as_deref());
            let h = h.expect("hidden");
            assert!(h.separable && h.proven);
            assert_eq!(
                (h.positions, h.support, h.self_sim_types),
                (4096, 3, [64, 64, 0])
            );
            assert_eq!(
                (h.margin, h.neg_u_rare_cos, h.mean_cos),
                (0.125, 0.75, 0.52)
            );
            assert_eq!(&h.self_sim[..2], &[0.1, 0.2]);
            assert!(h.self_sim[2].is_nan());
        }
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
        assert!(matches!(back.status, RunStatus::Diverged { step: 4, loss } if loss.is_nan()));
        assert_eq!(back.log.len(), 1);
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
            before: "lr=1.000000e-3".into(),
            after: "lr=1.000000e-4 (schedule off from step 1048)".into(),
            ticket: None,
            coalesced: false,
        }));
        view.on_event(&Event::Resumed { step: 1047 });
        let steps: Vec<u64> = view.log.iter().map(|l| l.step).collect();
        assert_eq!(steps, vec![1048, 1048, 1048]);
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
