//! Training settings: optimizer, learning-rate schedule, cadences. Serializable so that a run
//! directory records exactly what it ran with, and overridable from a TOML file.

use serde::{Deserialize, Serialize};

use crate::choice::Choice;

use crate::objective::Objectives;

/// The optimizer (what each is: [`Choice::help`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    Adamw,
    Sgd,
}

impl Choice for OptimizerKind {
    const ALL: &'static [Self] = &[OptimizerKind::Adamw, OptimizerKind::Sgd];

    fn name(self) -> &'static str {
        match self {
            OptimizerKind::Adamw => "adamw",
            OptimizerKind::Sgd => "sgd",
        }
    }

    fn help(self) -> &'static str {
        match self {
            OptimizerKind::Adamw => "AdamW (decoupled weight decay)",
            OptimizerKind::Sgd => {
                "SGD with optional momentum (AWD-LSTM style, usually with the plateau schedule)"
            }
        }
    }
}

/// The learning-rate schedule after the warm-up (what each is: [`Choice::help`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    Constant,
    Cosine,
    InverseSqrt,
    Plateau,
}

impl Choice for Schedule {
    const ALL: &'static [Self] = &[
        Schedule::Constant,
        Schedule::Cosine,
        Schedule::InverseSqrt,
        Schedule::Plateau,
    ];

    fn name(self) -> &'static str {
        match self {
            Schedule::Constant => "constant",
            Schedule::Cosine => "cosine",
            Schedule::InverseSqrt => "inverse-sqrt",
            Schedule::Plateau => "plateau",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Schedule::Constant => "Constant after warm-up",
            Schedule::Cosine => {
                "Cosine decay from lr to lr·min_lr_ratio over the run, after warm-up"
            }
            Schedule::InverseSqrt => {
                "lr·√(warmup / step) after warm-up (the Transformer schedule, without the d_model factor)"
            }
            Schedule::Plateau => {
                "AWD-style: divide lr by `plateau_factor` whenever a validation PPL fails to improve"
            }
        }
    }
}

/// The arithmetic of a training step's matrix products (what each is: [`Choice::help`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    Fp32,
    Bf16,
}

impl Choice for Precision {
    const ALL: &'static [Self] = &[Precision::Fp32, Precision::Bf16];

    fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Precision::Fp32 => "Everything in fp32",
            Precision::Bf16 => {
                "Mixed precision (LibTorch only): the model's matrix products, attention and LSTM layers in bfloat16 with fp32 results; softmax, layer norm, the loss, gradients, the optimizer, the weights and checkpoints in fp32"
            }
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    pub batch: usize,
    /// Optimizer steps in the run.
    pub steps: u64,
    pub lr: f64,
    pub optimizer: OptimizerKind,
    pub beta1: f64,
    pub beta2: f64,
    pub epsilon: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub schedule: Schedule,
    pub warmup: u64,
    pub min_lr_ratio: f64,
    pub plateau_factor: f64,
    /// Clip gradients to this global L2 norm (0 = no clipping).
    pub clip_norm: f64,
    pub eval_every: u64,
    /// `--eval-test`: every validation evaluation also evaluates the test split, so that a
    /// table can read test at the best validation step (methods.md §4).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub eval_test: bool,
    /// Streams used for evaluation (the whole split is always evaluated).
    pub eval_batch: usize,
    pub checkpoint_every: u64,
    /// Newest checkpoints kept in the run directory.
    pub keep_checkpoints: usize,
    /// Emit a snapshot of W every this many steps (0 = never).
    pub snapshot_every: u64,
    pub seed: u64,
    /// `--data-seed`: the training text's lines shuffled by this seed before it is cut into the
    /// batch's streams (`None`: the text's own order, as runs before it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_seed: Option<u64>,
    /// `--patience`: end the run once this many validation evaluations in a row have not
    /// improved on the best (early stopping; `best/` keeps the best checkpoint). `None`: train
    /// to `steps`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patience: Option<u64>,
    /// fp32, or bf16 mixed precision (runs written before it existed are fp32).
    pub precision: Precision,
    /// The loss and regularisers at the start of the run (TOML table `[objectives]`).
    pub objectives: Objectives,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            batch: 16,
            steps: 2_000,
            lr: 1e-3,
            optimizer: OptimizerKind::Adamw,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            weight_decay: 0.01,
            momentum: 0.0,
            schedule: Schedule::Cosine,
            warmup: 100,
            min_lr_ratio: 0.1,
            plateau_factor: 4.0,
            clip_norm: 1.0,
            eval_every: 200,
            eval_test: false,
            eval_batch: 10,
            checkpoint_every: 500,
            keep_checkpoints: 3,
            snapshot_every: 50,
            seed: 1,
            data_seed: None,
            patience: None,
            precision: Precision::Fp32,
            objectives: Objectives::default(),
        }
    }
}

/// The largest batch (sequences a step) and evaluation batch.
pub const MAX_BATCH: usize = 1 << 16;
/// The largest number of steps (and of warm-up steps) a run may ask for.
pub const MAX_STEPS: u64 = 1_000_000_000_000;
/// The most evaluations without improvement `--patience` may wait for.
pub const MAX_PATIENCE: u64 = 1_000_000;
/// The most checkpoints a run keeps.
pub const MAX_KEEP: usize = 10_000;

/// A learning rate: any finite positive number (it grows no resource; one that blows the
/// weights up is a divergence, caught before a checkpoint). The one check of `--lr`, the config
/// file and `set-lr`.
pub fn check_lr(lr: f64) -> Result<(), String> {
    use conelab_base::number::said;
    if lr.is_finite() && lr > 0.0 {
        Ok(())
    } else {
        Err(format!(
            "lr {}: the learning rate must be a positive number",
            said(lr)
        ))
    }
}

impl TrainConfig {
    /// Checks every setting against its documented range (docs/REFERENCE.md, "Ranges"); the
    /// message names the field.
    pub fn validate(&self) -> Result<(), conelab_base::error::Invalid> {
        use conelab_base::number::said;
        let check = |ok: bool, what: String| if ok { Ok(()) } else { Err(what) };
        check(
            (1..=MAX_BATCH).contains(&self.batch),
            format!("batch {} must be from 1 to {MAX_BATCH}", self.batch),
        )?;
        check(
            (1..=MAX_STEPS).contains(&self.steps),
            format!(
                "steps {} must be from 1 to {MAX_STEPS:.0e}",
                self.steps as f64
            ),
        )?;
        check(
            self.warmup <= MAX_STEPS,
            format!(
                "warmup {} must be at most {MAX_STEPS:.0e}",
                self.warmup as f64
            ),
        )?;
        check_lr(self.lr)?;
        if let Some(p) = self.patience {
            check(
                (1..=MAX_PATIENCE).contains(&p),
                format!("patience {p} must be from 1 to {MAX_PATIENCE} evaluations"),
            )?;
        }
        check(
            (0.0..1.0).contains(&self.beta1) && (0.0..1.0).contains(&self.beta2),
            format!(
                "betas {},{} must be in [0, 1)",
                said(self.beta1),
                said(self.beta2)
            ),
        )?;
        check(
            self.epsilon > 0.0 && self.epsilon <= 1.0,
            format!("epsilon {} must be in (0, 1]", said(self.epsilon)),
        )?;
        check(
            (0.0..=10.0).contains(&self.weight_decay),
            format!(
                "weight_decay {} must be from 0 to 10",
                said(self.weight_decay)
            ),
        )?;
        check(
            (0.0..1.0).contains(&self.momentum),
            format!("momentum {} must be in [0, 1)", said(self.momentum)),
        )?;
        check(
            (0.0..=1.0).contains(&self.min_lr_ratio),
            format!("min_lr_ratio {} must be in [0, 1]", said(self.min_lr_ratio)),
        )?;
        check(
            (1.0..=1e6).contains(&self.plateau_factor),
            format!(
                "plateau_factor {} must be from 1 to 1e6",
                said(self.plateau_factor)
            ),
        )?;
        check(
            (0.0..=1e6).contains(&self.clip_norm),
            format!("clip_norm {} must be from 0 to 1e6", said(self.clip_norm)),
        )?;
        check(
            (1..=MAX_BATCH).contains(&self.eval_batch),
            format!(
                "eval_batch {} must be from 1 to {MAX_BATCH}",
                self.eval_batch
            ),
        )?;
        check(
            (1..=MAX_KEEP).contains(&self.keep_checkpoints),
            format!(
                "keep_checkpoints {} must be from 1 to {MAX_KEEP}",
                self.keep_checkpoints
            ),
        )?;
        Ok(())
    }

    /// Scheduled learning rate at optimizer step `step` (1-based), before any plateau decay and
    /// before a user override. `base` is the peak rate.
    pub fn scheduled_lr(&self, base: f64, step: u64) -> f64 {
        let step = step.max(1);
        if step <= self.warmup {
            return base * step as f64 / self.warmup as f64;
        }
        match self.schedule {
            Schedule::Constant | Schedule::Plateau => base,
            Schedule::Cosine => {
                let span = self.steps.saturating_sub(self.warmup).max(1) as f64;
                let progress = ((step - self.warmup) as f64 / span).min(1.0);
                let floor = base * self.min_lr_ratio;
                floor + (base - floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
            }
            Schedule::InverseSqrt => base * (self.warmup.max(1) as f64 / step as f64).sqrt(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(schedule: Schedule) -> TrainConfig {
        TrainConfig {
            schedule,
            warmup: 10,
            steps: 110,
            min_lr_ratio: 0.1,
            ..TrainConfig::default()
        }
    }

    #[test]
    fn warmup_is_linear() {
        let c = cfg(Schedule::Cosine);
        assert!((c.scheduled_lr(1.0, 1) - 0.1).abs() < 1e-12);
        assert!((c.scheduled_lr(1.0, 5) - 0.5).abs() < 1e-12);
        assert!((c.scheduled_lr(1.0, 10) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn cosine_hits_its_closed_form() {
        let c = cfg(Schedule::Cosine);
        // Halfway through the decay: floor + (1 − floor)/2 = 0.55.
        assert!((c.scheduled_lr(1.0, 60) - 0.55).abs() < 1e-12);
        assert!((c.scheduled_lr(1.0, 110) - 0.1).abs() < 1e-12);
        assert!(
            (c.scheduled_lr(1.0, 500) - 0.1).abs() < 1e-12,
            "clamped after the end"
        );
    }

    #[test]
    fn inverse_sqrt_and_constant() {
        let c = cfg(Schedule::InverseSqrt);
        assert!((c.scheduled_lr(2.0, 40) - 1.0).abs() < 1e-12); // 2·√(10/40)
        let c = cfg(Schedule::Constant);
        assert_eq!(c.scheduled_lr(2.0, 1000), 2.0);
    }

    #[test]
    fn no_warmup_starts_at_full_rate() {
        let c = TrainConfig {
            warmup: 0,
            schedule: Schedule::Constant,
            ..TrainConfig::default()
        };
        assert_eq!(c.scheduled_lr(0.5, 1), 0.5);
    }

    #[test]
    fn impossible_settings_are_named() {
        let bad = TrainConfig {
            lr: -1.0,
            ..TrainConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("lr"));
        let bad = TrainConfig {
            batch: 0,
            ..TrainConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("batch"));
    }
}
