//! What goes into the engine (commands) and what comes out (events).
//!
//! Commands are applied between two optimizer steps, recorded with the step they first affect, and
//! acknowledged by an [`Event::Applied`]. Events are small and go through an unbounded channel, so
//! the training thread never waits for a slow consumer; the one large payload, a snapshot of W,
//! goes through a latest-wins slot instead ([`SnapshotSlot`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::analysis::EmbeddingStats;
use crate::metrics::OutputMetrics;
use crate::objective::ObjectiveChange;

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

/// A command as applied: the step it first affected, and what changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppliedCommand {
    /// The first optimizer step (1-based) that runs with the change.
    pub step: u64,
    pub command: Command,
    pub before: String,
    pub after: String,
}

/// Numbers of one optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepStats {
    /// Steps completed (1-based: the first step reports 1).
    pub step: u64,
    /// Fractional epoch: windows read so far / windows per epoch.
    pub epoch: f64,
    /// The data term: token NLL for MLE (AGG included: the plain NLL), the NCE loss for NCE.
    pub loss: f64,
    /// Sum of the weighted regularisers and penalties (0 when none is on).
    pub penalty: f64,
    pub lr: f64,
    /// Global L2 norm of the gradient before clipping.
    pub grad_norm: f64,
    pub tokens_per_sec: f64,
    pub step_ms: f64,
    /// Size of the gated rare set (AGG's live rare group, or the Rare group under gate-freeze).
    pub rare_tokens: Option<usize>,
}

/// Perplexity of the whole split, total and per group of the **target** token.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalStats {
    pub step: u64,
    pub split: String,
    /// Mean NLL over all positions.
    pub loss: f64,
    pub ppl: f64,
    /// Frequent, medium, rare: (PPL, positions). PPL is NaN for a group with no positions.
    pub groups: [(f64, u64); 3],
    pub positions: u64,
    pub seconds: f64,
    /// Every model-output metric (Uniq, μ_z, σ_z, histogram, Theorem 2, …).
    pub outputs: Box<OutputMetrics>,
}

/// The embedding matrix at one step, row-major `[n, d]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub step: u64,
    pub n: usize,
    pub d: usize,
    pub weights: Vec<f32>,
}

/// Latest-wins hand-over of snapshots: the engine overwrites, a consumer takes when it is ready.
#[derive(Debug, Clone, Default)]
pub struct SnapshotSlot(Arc<Mutex<Option<Arc<Snapshot>>>>);

impl SnapshotSlot {
    pub fn put(&self, snapshot: Arc<Snapshot>) {
        // A poisoned lock only means a consumer panicked mid-take; the slot is still usable.
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *slot = Some(snapshot);
    }

    pub fn take(&self) -> Option<Arc<Snapshot>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Why a run ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    Completed,
    Stopped,
}

/// Everything the engine reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    Started {
        step: u64,
        total_steps: u64,
        windows_per_epoch: u64,
        parameters: usize,
        device: String,
        run_dir: Option<PathBuf>,
        /// The objectives in force, as a label (`MLE`, `CosReg γ=1 + freeze rare`, …).
        objective: String,
    },
    Step(StepStats),
    Eval(EvalStats),
    /// Embedding metrics of a snapshot (total and per group), computed off the training thread;
    /// the full analysis with the 2-D projection is in the analysis slot.
    Embedding(Box<EmbeddingStats>),
    /// A snapshot of W was put in the slot.
    Snapshot {
        step: u64,
    },
    Applied(AppliedCommand),
    /// A command that could not be applied (e.g. an invalid learning rate).
    Rejected {
        step: u64,
        command: Command,
        reason: String,
    },
    Checkpoint {
        step: u64,
        path: PathBuf,
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
        loss: f64,
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
}
