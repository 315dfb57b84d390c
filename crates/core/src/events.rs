//! What goes into the engine (commands) and what comes out (events).
//!
//! Commands are applied between two optimizer steps, recorded with the step they first affect, and
//! acknowledged by an [`Event::Applied`]. Events are small and go through an unbounded channel, so
//! the training thread never waits for a slow consumer; the large payloads (a snapshot of W, its
//! 2-D projections) are shared behind `Arc`s and never go to a viewer as events.
//!
//! Events are also what a run sends its viewers over the control socket (JSON lines), so every
//! float that may be NaN reads `null` back as NaN (`conelab_base::jsonfloat`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;

use serde::{Deserialize, Serialize};

use crate::change::{Change, ConfigChange};
use crate::objective::{ObjectiveChange, Objectives};
use conelab_metrics::embedding::{Projection, SetStats};
use conelab_metrics::hidden::HiddenStats;
use conelab_metrics::{EmbeddingPanel, OutputMetrics};

/// A request to the running engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum Command {
    Pause,
    Resume,
    /// End the run after the current step; `save` writes a checkpoint first.
    Stop {
        save: bool,
    },
    /// Write a checkpoint now.
    SaveCheckpoint,
    /// Replace the learning rate (the schedule is switched off from this step on).
    SetLr {
        lr: f64,
    },
    /// Switch a regulariser on or off, re-weight it, change the loss, freeze or unfreeze a group.
    Objective {
        change: ObjectiveChange,
    },
}

/// What a command does, in the words of the log and the store: `lr 0.001`, `stop and save`,
/// `cos on`, …
impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Pause => f.write_str("pause"),
            Command::Resume => f.write_str("resume"),
            Command::Stop { save: true } => f.write_str("stop and save"),
            Command::Stop { save: false } => f.write_str("stop"),
            Command::SaveCheckpoint => f.write_str("checkpoint"),
            Command::SetLr { lr } => write!(f, "lr {lr}"),
            Command::Objective { change } => write!(f, "{change}"),
        }
    }
}

/// A command as applied: the step it first affected, and what changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "AppliedCommandRecord")]
pub struct AppliedCommand {
    /// The first optimizer step (1-based) that runs with the change.
    pub step: u64,
    pub command: Command,
    /// What it changed (its words: [`Change::before_text`], [`Change::after_text`]).
    pub change: Change,
    /// The sender's number for the command (a viewer's request), so its acknowledgement can be
    /// matched to it; never saved with a checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<u64>,
    /// It changed nothing — the same command as the one applied just before it at the same
    /// step, or an objective change to what was already in force: answered, not recorded,
    /// logged or drawn (a flood of one command costs nothing; no "MLE → MLE").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub coalesced: bool,
}

/// An applied command as written: typed, or — in a checkpoint's command log from before
/// changes were typed — with the change in words (`before`, `after`).
#[derive(Deserialize)]
struct AppliedCommandRecord {
    step: u64,
    command: Command,
    #[serde(default)]
    change: Option<Change>,
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    ticket: Option<u64>,
    #[serde(default)]
    coalesced: bool,
}

impl From<AppliedCommandRecord> for AppliedCommand {
    fn from(r: AppliedCommandRecord) -> Self {
        let change = r.change.unwrap_or_else(|| {
            Change::from_words(
                &r.command,
                r.before.as_deref().unwrap_or(""),
                r.after.as_deref().unwrap_or(""),
                r.coalesced,
            )
        });
        Self {
            step: r.step,
            command: r.command,
            change,
            ticket: r.ticket,
            coalesced: r.coalesced,
        }
    }
}

/// Numbers of one optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepStats {
    /// Steps completed (1-based: the first step reports 1).
    pub step: u64,
    /// Fractional epoch: windows read so far / windows per epoch.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub epoch: f64,
    /// The data term: token NLL for MLE (AGG included: the plain NLL), the NCE loss for NCE.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub loss: f64,
    /// Sum of the weighted regularisers and penalties (0 when none is on).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub penalty: f64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub lr: f64,
    /// Global L2 norm of the gradient before clipping.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub grad_norm: f64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub tokens_per_sec: f64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub step_ms: f64,
    /// Size of the gated rare set (AGG's live rare group, or the Rare group under gate-freeze).
    pub rare_tokens: Option<usize>,
    /// Mean g1 over that rare set: how strongly AGG damps the push from non-rare contexts (g1 =
    /// a_v scales with the tokens per update, as α does).
    #[serde(default)]
    pub rare_g1: Option<f64>,
    /// How many of that rare set lie in the corpus's Rare group (the overlap a rare-set size
    /// alone does not say: AGG's set is by live counts, the group by rank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rare_in_group: Option<usize>,
}

/// Perplexity of the whole split, total and per group of the **target** token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalStats {
    pub step: u64,
    pub split: String,
    /// Mean NLL over all positions.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub loss: f64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub ppl: f64,
    /// Frequent, medium, rare: (PPL, positions). PPL is NaN for a group with no positions.
    #[serde(deserialize_with = "conelab_base::jsonfloat::group_pairs")]
    pub groups: [(f64, u64); 3],
    pub positions: u64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub seconds: f64,
    /// Every model-output metric (Uniq, μ_z, σ_z, histogram, Theorem 2, …).
    pub outputs: Box<OutputMetrics>,
    /// The hidden states' geometry on the split's fixed sample (absent from runs before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<Box<HiddenStats>>,
}

impl EvalStats {
    /// The evaluation of `split` at `step` whose every position went into `outputs`: the loss,
    /// PPL, per-group PPL and positions are read from them, not given twice.
    pub fn from_outputs(
        step: u64,
        split: String,
        outputs: OutputMetrics,
        seconds: f64,
        hidden: Option<Box<HiddenStats>>,
    ) -> Self {
        Self {
            step,
            split,
            loss: outputs.loss,
            ppl: outputs.ppl,
            groups: [0, 1, 2].map(|g| (outputs.groups[g].ppl, outputs.groups[g].positions)),
            positions: outputs.positions,
            seconds,
            outputs: Box::new(outputs),
            hidden,
        }
    }
}

/// The embedding matrix at one step, row-major `[n, d]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub step: u64,
    pub n: usize,
    pub d: usize,
    pub weights: Vec<f32>,
    /// Spectrum control's factors, while it is on (`sigma_vs_w` still NaN: the analysis fills
    /// it in from W's singular values).
    pub spectral: Option<SpectralStats>,
}

/// Spectrum control's factors W = U·diag(σ)·Vᵀ at a snapshot: whether σ reached the prior, and
/// whether σ still are W's singular values (U and V orthonormal).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpectralStats {
    /// How σ is updated: `proximal` or `adamw`.
    pub update: String,
    /// ‖UᵀU − I‖_F.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub u_orth: f64,
    /// ‖VᵀV − I‖_F.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub v_orth: f64,
    /// σ, descending.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64_vec")]
    pub sigma: Vec<f64>,
    /// The prior's targets t_k, k = 1..d.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64_vec")]
    pub targets: Vec<f64>,
    /// max_k |σ_(k) − s_k(W)| / s_1(W), s_k(W) the singular values of W itself.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub sigma_vs_w: f64,
}

impl SpectralStats {
    /// ‖σ − t‖₂ / ‖t‖₂: how far σ is from the prior, as a fraction of it.
    pub fn prior_gap(&self) -> f64 {
        conelab_metrics::spectral::relative_gap(&self.sigma, &self.targets)
    }

    /// With `sigma_vs_w` from W's singular values, descending (`sv_norm · sv_max`).
    pub fn against_w(mut self, w_singular_values: &[f64]) -> Self {
        self.sigma_vs_w =
            conelab_metrics::spectral::max_deviation_of_scale(&self.sigma, w_singular_values);
        self
    }
}

/// The numbers of one snapshot's analysis, as an event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingStats {
    pub step: u64,
    pub total: SetStats,
    /// Frequent, medium, rare.
    pub groups: [SetStats; 3],
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub rare_frequent_cos: f64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub seconds: f64,
    /// Spectrum control's factors, while it is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spectral: Option<SpectralStats>,
    /// The slower tier, on the snapshots it was due for ([`crate::analysis`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_tier: Option<SecondTierStats>,
}

/// The metrics that need all pairs of rows (methods.md §2, later literature), per group
/// (frequent, medium, rare): computed on some snapshots only, as their cost allows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecondTierStats {
    /// Mean fraction of a row's top-10 cosine neighbours in its own group (Gong et al. 2018).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64_vec")]
    pub same_group: Vec<f64>,
    /// TwoNN intrinsic dimension within the group (Facco et al. 2017).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64_vec")]
    pub two_nn: Vec<f64>,
    /// Rows left out of TwoNN as exact duplicates.
    pub two_nn_duplicates: Vec<usize>,
    /// Rows the cheap test cannot prove able to win the argmax: an UPPER BOUND on the stolen
    /// rows (the exact count is `inspect --stolen`'s).
    pub stolen_at_most: Vec<usize>,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub seconds: f64,
}

impl EmbeddingStats {
    /// Set `g` in the order the tables show them: frequent, medium, rare (0–2), total (3).
    pub fn set(&self, g: usize) -> &SetStats {
        self.groups.get(g).unwrap_or(&self.total)
    }

    /// The metrics of a panel computed with groups; `None` without them.
    pub fn from_panel(step: u64, panel: &EmbeddingPanel, seconds: f64) -> Option<Self> {
        Some(Self {
            step,
            total: panel.total.clone(),
            groups: panel.groups.clone()?,
            rare_frequent_cos: panel.rare_frequent_cos.unwrap_or(f64::NAN),
            seconds,
            spectral: None,
            second_tier: None,
        })
    }
}

/// The run process's CPU and memory and the host's memory at a step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SystemStats {
    pub step: u64,
    /// CPU time over the last interval as a percentage of one core (NaN for the first sample).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub cpu_percent: f64,
    pub rss_bytes: u64,
    pub host_used_bytes: u64,
    pub host_total_bytes: u64,
    /// The run's CUDA device, where the driver reports it (absent in messages from before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuStats>,
}

/// A CUDA device's load as NVML reports it; NaN where the board does not say.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GpuStats {
    /// Share of the last sample period a kernel ran, %.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub util_percent: f64,
    pub mem_used_bytes: u64,
    pub mem_total_bytes: u64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub power_watts: f64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub temp_c: f64,
}

impl SystemStats {
    pub fn from_sample(step: u64, s: &conelab_base::system::Sample, gpu: Option<GpuStats>) -> Self {
        Self {
            step,
            cpu_percent: s.cpu_percent,
            rss_bytes: s.rss_bytes,
            host_used_bytes: s.host_used_bytes,
            host_total_bytes: s.host_total_bytes,
            gpu,
        }
    }
}

/// A held-out split's reference perplexities: frequent, medium, rare, total.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitReferencePpl {
    /// `valid` or `test`.
    pub split: String,
    /// Interpolated modified Kneser–Ney trigram.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64_vec")]
    pub kn3: Vec<f64>,
    /// Unigram (train counts).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64_vec")]
    pub unigram: Vec<f64>,
}

/// The reference models' perplexities on the held-out splits ([`crate::baseline`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReferencePpl {
    pub step: u64,
    pub splits: Vec<SplitReferencePpl>,
}

impl ReferencePpl {
    /// KN-3's PPL on `split` for frequent, medium, rare, total.
    pub fn kn3(&self, split: &str) -> Option<[f64; 4]> {
        let s = self.splits.iter().find(|s| s.split == split)?;
        let v = |i: usize| s.kn3.get(i).copied().unwrap_or(f64::NAN);
        Some([v(0), v(1), v(2), v(3)])
    }
}

/// The 2-D projections of one analysed snapshot (the embedding scatter and its time scrub),
/// with its normalised spectrum (so the Spectrum pane follows the scrub too).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectionFrame {
    pub step: u64,
    pub uncentred: Option<Projection>,
    pub centred: Option<Projection>,
    /// W's singular values over the largest, descending (empty: not known — a frame from a run
    /// made before frames carried it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spectrum: Vec<f64>,
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    Completed,
    Stopped,
    /// The loss became NaN or infinite and nobody resumed the run (the diverging step was not
    /// applied; the last checkpoint is the last good one).
    Diverged,
}

/// What a user can do with a run paused after a divergence, the same words in the workbench's
/// header and its Events pane: lower the lr and resume while the weights are sound; once they
/// are broken ([`Event::WeightsBroken`]), only the newest checkpoint is a way on.
pub fn diverged_advice(weights_broken: bool) -> &'static str {
    if weights_broken {
        "weights broken: stop (q), resume from a checkpoint"
    } else {
        "lower the lr, resume (p) or stop (q)"
    }
}

impl FinishReason {
    pub fn name(self) -> &'static str {
        match self {
            FinishReason::Completed => "completed",
            FinishReason::Stopped => "stopped",
            FinishReason::Diverged => "diverged",
        }
    }
}

/// Whatever takes a run's events, in the engine's order: the metrics store's writer, the run's
/// view (the hub's and every viewer's), train.log and the headless reporter. Each sees every
/// event and keeps what it needs; consumers on one thread are one sink (a pair of sinks is a
/// sink, an absent one takes nothing), so the run hands each event over once.
pub trait EventSink {
    /// What keeps the sink from taking an event (a store that cannot be written); the sink is
    /// given the next one all the same.
    type Error;
    fn on_event(&mut self, event: &Event) -> Result<(), Self::Error>;
}

/// A sink that may be missing (a train.log that could not be opened).
impl<S: EventSink> EventSink for Option<S> {
    type Error = S::Error;
    fn on_event(&mut self, event: &Event) -> Result<(), S::Error> {
        match self {
            Some(sink) => sink.on_event(event),
            None => Ok(()),
        }
    }
}

/// Two sinks, the first first; both always see the event.
impl<A, B> EventSink for (A, B)
where
    A: EventSink<Error = std::convert::Infallible>,
    B: EventSink<Error = std::convert::Infallible>,
{
    type Error = std::convert::Infallible;
    fn on_event(&mut self, event: &Event) -> Result<(), Self::Error> {
        self.0.on_event(event)?;
        self.1.on_event(event)
    }
}

impl<S: EventSink + ?Sized> EventSink for &mut S {
    type Error = S::Error;
    fn on_event(&mut self, event: &Event) -> Result<(), S::Error> {
        (**self).on_event(event)
    }
}

/// What a run starts with: where it stands and what it trains. A struct of its own so that
/// each sink reads the fields it wants; on the wire it is the `started` event's fields, as
/// before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStarted {
    pub step: u64,
    pub total_steps: u64,
    pub windows_per_epoch: u64,
    pub parameters: usize,
    pub device: String,
    pub run_dir: Option<PathBuf>,
    /// The objectives in force, as a label (`MLE`, `CosReg γ=1 + freeze rare`, …).
    pub objective: String,
    /// The same objectives in full (a viewer's Controls pane mirrors them).
    pub objectives: Objectives,
}

/// What was found worse than uniform ([`Event::WorseThanUniform`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UniformMeasure {
    /// The training NLL per token, against ln V.
    TrainLoss,
    /// A validation's total PPL, against V.
    ValidPpl,
}

impl UniformMeasure {
    /// Its name in the store's events and in words.
    pub fn name(self) -> &'static str {
        match self {
            UniformMeasure::TrainLoss => "train loss",
            UniformMeasure::ValidPpl => "valid ppl",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [UniformMeasure::TrainLoss, UniformMeasure::ValidPpl]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

impl Event {
    /// What a [`Event::WorseThanUniform`] says, in words (the Events pane, train.log, a headless
    /// run's output).
    pub fn worse_than_uniform_text(
        measure: UniformMeasure,
        value: f64,
        bound: f64,
        steps: u64,
    ) -> String {
        // Two decimals at most, in scientific notation past what a line holds (10⁷⁵).
        let value = conelab_base::number::fit(value, 12, 2);
        let bound = conelab_base::number::said((bound * 1000.0).round() / 1000.0);
        match measure {
            UniformMeasure::TrainLoss => format!(
                "worse than uniform: the training loss {value} has stayed above ln V = {bound} (a uniform guess) for {steps} steps: lower the lr"
            ),
            UniformMeasure::ValidPpl => format!(
                "worse than uniform: valid PPL {value} is above V = {bound} (a uniform guess)"
            ),
        }
    }
}

/// Everything the engine reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    Started(Box<RunStarted>),
    /// A setting changed when the run was resumed (`--eval-every`, `--steps`, `--device`, …).
    ConfigChanged {
        step: u64,
        change: ConfigChange,
    },
    Step(StepStats),
    Eval(EvalStats),
    /// An evaluation under way: `done` of the split's `total` prediction positions scored. The
    /// first comes as it starts (`done` 0), then a few a second at most; its `Eval` ends it.
    /// Not stored: the viewers show it, nothing else keeps it.
    EvalProgress {
        step: u64,
        split: String,
        done: u64,
        total: u64,
    },
    /// The corpus's reference models' perplexities per group (methods.md §4's bar), sent once as
    /// a new run starts: what the run's own per-group PPL is judged against.
    Reference(Box<ReferencePpl>),
    /// Embedding metrics of a snapshot (total and per group), computed off the training thread.
    /// Its 2-D projections came just before, as [`Event::Projection`].
    Embedding(Box<EmbeddingStats>),
    /// The run process's load and the host's memory, sampled every few seconds off the
    /// training thread (`conelab_base::system`).
    System(SystemStats),
    /// The 2-D projections of an analysed snapshot: kept by the metrics store and answered to
    /// viewers on request, never sent to them as an event.
    #[serde(skip)]
    Projection(Arc<ProjectionFrame>),
    /// A snapshot of W was taken for the metrics.
    Snapshot {
        step: u64,
    },
    Applied(AppliedCommand),
    /// A command that could not be applied (e.g. an invalid learning rate).
    Rejected {
        step: u64,
        command: Command,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ticket: Option<u64>,
    },
    /// A checkpoint is complete on disk and counts: the metrics store is durable up to its step.
    Checkpoint {
        step: u64,
        path: PathBuf,
    },
    /// A checkpoint was written to a staging folder; it becomes `step-NNNNNN` (and a
    /// [`Event::Checkpoint`]) once the metrics store is durable up to its step.
    CheckpointStaged {
        step: u64,
        staging: PathBuf,
        keep: usize,
    },
    Paused {
        step: u64,
    },
    Resumed {
        step: u64,
    },
    /// The loss became NaN or infinite at `step`: the engine paused itself without applying that
    /// step, so the model and the last checkpoint are the last good ones.
    Diverged {
        step: u64,
        #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
        loss: f64,
    },
    /// The model did worse than a uniform guess over its vocabulary: `value` above `bound` —
    /// the training NLL above ln V for `steps` steps in a row, or a validation's total PPL above
    /// V (`steps` 0). Said once a spell (`conelab_train::engine::worse_than_uniform`).
    WorseThanUniform {
        step: u64,
        measure: UniformMeasure,
        #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
        value: f64,
        #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
        bound: f64,
        steps: u64,
    },
    /// After a divergence, the weights themselves are not finite or have blown up (steps before
    /// the divergence did it with a finite loss, as an lr of 1e9 does): resuming from here
    /// diverges again whatever the lr, and a stop saves no checkpoint of them; the newest
    /// checkpoint is the last good state. `reason` says what the check found.
    WeightsBroken {
        step: u64,
        reason: String,
    },
    Warning {
        step: u64,
        message: String,
    },
    Finished {
        step: u64,
        reason: FinishReason,
    },
    /// The engine failed; nothing more will come.
    Failed {
        step: u64,
        message: String,
    },
    /// What a run's stored history keeps of a change only in words — an objective change, a
    /// refused command, a setting this version does not know — replayed with the rest of the
    /// history (`conelab_store::history`); a run never sends it.
    #[serde(skip)]
    Recorded(Recorded),
}

/// A run's history as its metrics store keeps it (`conelab_store::history`): the events that
/// made it, in the order they happened, for a viewer to fold as it folds a live run's.
#[derive(Debug, Clone, Default)]
pub struct StoredHistory {
    pub events: Vec<Event>,
    /// The steps whose 2-D projections are stored (the time scrub).
    pub projection_steps: Vec<u64>,
    /// What the read skipped or could not check (a corrupt segment set aside), in words.
    pub warnings: Vec<String>,
}

/// A line of a run's stored history that is kept only in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub step: u64,
    pub what: RecordedWhat,
    pub text: String,
}

/// What a [`Recorded`] line was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordedWhat {
    /// An objective or learning-rate change: an intervention, marked on the curves.
    Intervention,
    /// Another change (a setting on resume).
    Change,
    /// A command the run refused.
    Refused,
    /// A kind of line this version does not know.
    Other,
}

impl Event {
    /// The step an event belongs to (a projection's: its snapshot's).
    pub fn step(&self) -> u64 {
        match self {
            Event::Started(s) => s.step,
            Event::ConfigChanged { step, .. }
            | Event::Snapshot { step }
            | Event::Rejected { step, .. }
            | Event::Checkpoint { step, .. }
            | Event::CheckpointStaged { step, .. }
            | Event::Paused { step }
            | Event::Resumed { step }
            | Event::EvalProgress { step, .. }
            | Event::Diverged { step, .. }
            | Event::WorseThanUniform { step, .. }
            | Event::WeightsBroken { step, .. }
            | Event::Warning { step, .. }
            | Event::Finished { step, .. }
            | Event::Failed { step, .. } => *step,
            Event::Step(s) => s.step,
            Event::Eval(e) => e.step,
            Event::Embedding(e) => e.step,
            Event::Reference(r) => r.step,
            Event::System(s) => s.step,
            Event::Projection(p) => p.step,
            Event::Applied(a) => a.step,
            Event::Recorded(r) => r.step,
        }
    }

    /// The run's last event: nothing follows it but stragglers of the metrics thread.
    pub fn is_final(&self) -> bool {
        matches!(self, Event::Finished { .. } | Event::Failed { .. })
    }
}

/// What a divergence (NaN/inf loss) does: pause, so that a watching user can decide (lower the
/// rate and resume, or stop), or end the run at once when nobody watches. Shared, so a run's
/// server can switch it as viewers come and go.
#[derive(Debug, Clone)]
pub struct DivergencePolicy(Arc<AtomicBool>);

impl Default for DivergencePolicy {
    /// Pause: the engine's owner is watching.
    fn default() -> Self {
        Self(Arc::new(AtomicBool::new(true)))
    }
}

impl DivergencePolicy {
    pub fn end_run() -> Self {
        Self(Arc::new(AtomicBool::new(false)))
    }

    pub fn set_pause(&self, pause: bool) {
        self.0.store(pause, Ordering::SeqCst);
    }

    pub fn pauses(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A command and the sender's number for it (echoed in its acknowledgement).
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub command: Command,
    pub ticket: Option<u64>,
}

/// A cloneable sender of commands to the engine.
#[derive(Debug, Clone)]
pub struct CommandSender(Sender<Envelope>);

impl CommandSender {
    /// A sender on a channel of one's own (tests, tools that stand in for an engine).
    pub fn from_channel(tx: Sender<Envelope>) -> Self {
        Self(tx)
    }

    /// Sends a command; false when the engine has ended.
    pub fn send(&self, command: Command) -> bool {
        self.0
            .send(Envelope {
                command,
                ticket: None,
            })
            .is_ok()
    }

    /// Sends a command whose acknowledgement carries `ticket`.
    pub fn send_ticketed(&self, command: Command, ticket: u64) -> bool {
        self.0
            .send(Envelope {
                command,
                ticket: Some(ticket),
            })
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    #[test]
    fn the_started_event_keeps_its_wire_form() {
        // The fields as a run of an earlier version wrote them, flat beside the tag.
        let line = serde_json::json!({
            "event": "started",
            "step": 7,
            "total_steps": 100,
            "windows_per_epoch": 10,
            "parameters": 42,
            "device": "cpu",
            "run_dir": "runs/t",
            "objective": "MLE",
            "objectives": Objectives::default(),
        });
        let read: Event = serde_json::from_value(line.clone()).expect("an old line reads");
        let Event::Started(s) = &read else {
            panic!("read as {read:?}");
        };
        assert_eq!((s.step, s.total_steps, s.parameters), (7, 100, 42));
        assert_eq!(s.run_dir.as_deref(), Some(std::path::Path::new("runs/t")));
        assert_eq!(read.step(), 7);
        assert_eq!(serde_json::to_value(&read).expect("writes"), line);
    }

    /// A checkpoint's command log and a viewer of the last version wrote a change in words: such
    /// a line reads as the typed change, and is written back typed.
    #[test]
    fn an_applied_command_in_todays_words_reads_typed() {
        let line = r#"{"step":1048,"command":{"command":"set-lr","lr":0.0001},"before":"lr=1.000000e-3","after":"lr=1.000000e-4 (schedule off from step 1048)"}"#;
        let a: AppliedCommand = serde_json::from_str(line).expect("an old line reads");
        assert_eq!(a.step, 1048);
        assert_eq!(
            a.change,
            Change::Lr {
                before: 1e-3,
                after: 1e-4,
                schedule_off_from: Some(1048)
            }
        );
        let old_objective = r#"{"step":7,"command":{"command":"objective","change":{"change":"enable","term":"cos","on":true}},"before":"MLE","after":"CosReg γ=1"}"#;
        let o: AppliedCommand = serde_json::from_str(old_objective).expect("old objective line");
        assert_eq!(
            (o.change.before_text(), o.change.after_text()),
            ("MLE".to_string(), "CosReg γ=1".to_string())
        );
        let old_repeat = r#"{"step":9,"command":{"command":"pause"},"before":"unchanged (the same command was just applied)","after":"unchanged (the same command was just applied)","coalesced":true}"#;
        let r: AppliedCommand = serde_json::from_str(old_repeat).expect("old repeat");
        assert_eq!((r.change, r.coalesced), (Change::Unchanged, true));
        // Written typed, and read back the same.
        let json = serde_json::to_value(&a).expect("writes");
        assert_eq!(json["change"]["kind"], "lr");
        assert!(json.get("before").is_none(), "{json}");
        let back: AppliedCommand = serde_json::from_value(json).expect("reads");
        assert_eq!(back, a);
    }

    /// Writes the steps it sees into a shared journal, under its name.
    struct Journal<'a>(&'static str, &'a std::cell::RefCell<Vec<String>>);

    impl EventSink for Journal<'_> {
        type Error = Infallible;
        fn on_event(&mut self, event: &Event) -> Result<(), Infallible> {
            self.1
                .borrow_mut()
                .push(format!("{} {}", self.0, event.step()));
            Ok(())
        }
    }

    #[test]
    fn a_pair_gives_each_event_to_both_in_order_and_a_missing_sink_takes_nothing() {
        let journal = std::cell::RefCell::new(Vec::new());
        let mut pair = (
            Journal("log", &journal),
            Some(Journal("reporter", &journal)),
        );
        let mut absent: Option<Journal> = None;
        for step in [3, 4] {
            let event = Event::Paused { step };
            let Ok(()) = pair.on_event(&event);
            let Ok(()) = absent.on_event(&event);
        }
        assert_eq!(
            *journal.borrow(),
            ["log 3", "reporter 3", "log 4", "reporter 4"]
        );
    }
}
