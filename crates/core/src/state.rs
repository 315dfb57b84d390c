//! A run's counters and settings that change while it trains: saved with every checkpoint
//! (`state.json`) so that a resumed run continues exactly.

use serde::{Deserialize, Serialize};

use crate::events::AppliedCommand;
use crate::objective::{AggCounter, Objectives, SigmaUpdate};

/// Counters and settings that change during a run; saved with every checkpoint so a resumed run
/// continues exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Optimizer steps completed.
    pub step: u64,
    /// Multiplier applied by the plateau schedule (1 until a plateau).
    pub lr_scale: f64,
    /// A learning rate set by command, replacing the schedule.
    pub lr_override: Option<f64>,
    pub best_valid_ppl: Option<f64>,
    /// Validation evaluations in a row since the best one (for `--patience`).
    #[serde(default)]
    pub evals_since_best: u64,
    /// Every command applied so far, with its step.
    pub commands: Vec<AppliedCommand>,
    /// The objectives in force (the config's at the start, then as changed by commands).
    #[serde(default)]
    pub objectives: Objectives,
    /// c1 of the spectrum prior (σ_1 when control was switched on, or the configured number);
    /// `Some` exactly while the embedding is factorised as U·diag(σ)·Vᵀ.
    #[serde(default)]
    pub spectrum_c1: Option<f64>,
    /// The model got an output bias during the run (DEV switched on without one): a resumed run
    /// builds its model with one.
    #[serde(default)]
    pub output_bias_added: bool,
    /// [`STATE_FORMAT`] when written; 0 for checkpoints older than the field.
    #[serde(default)]
    pub format: u32,
}

/// The checkpoint state's format. 1: AGG's counter is recorded (`objectives.agg.counter`);
/// states before it ran with the `warm` counter and resume with it. 2: spectrum control's σ
/// update is recorded (`objectives.spectrum.sigma`); states before it stepped σ with AdamW and
/// resume so.
pub const STATE_FORMAT: u32 = 2;

impl RunState {
    /// Brings a state read from an older checkpoint up to [`STATE_FORMAT`], as it ran.
    pub fn upgrade(&mut self) {
        if self.format < 1 {
            self.objectives.agg.counter = AggCounter::Warm;
        }
        if self.format < 2 {
            self.objectives.spectrum.sigma = SigmaUpdate::Adamw;
        }
        self.format = STATE_FORMAT;
    }
}

impl Default for RunState {
    fn default() -> Self {
        Self {
            step: 0,
            lr_scale: 1.0,
            lr_override: None,
            best_valid_ppl: None,
            evals_since_best: 0,
            commands: Vec::new(),
            objectives: Objectives::default(),
            spectrum_c1: None,
            output_bias_added: false,
            format: STATE_FORMAT,
        }
    }
}
