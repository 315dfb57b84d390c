//! Evaluation: exact perplexity of a split per group, and what validation decides (the best step, early stopping).

use super::Trainer;

use crate::engine::{EngineError, eval};
use crate::model::precision::Autocast;
use conelab_core::events::EvalStats;
use conelab_core::model::DeviceSpec;
use conelab_core::train_config::Schedule;
use conelab_data::Split;

impl Trainer {
    /// Exact perplexity over a whole split, total and per group.
    pub fn evaluate(&self, split: Split) -> Result<EvalStats, EngineError> {
        self.evaluate_reporting(split, &mut |_, _| {})
    }

    /// [`Self::evaluate`], telling `progress(done, total)` the prediction positions scored.
    pub fn evaluate_reporting(
        &self,
        split: Split,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<EvalStats, EngineError> {
        self.evaluate_into(split, progress, None)
    }

    /// [`Self::evaluate`] with every position's target log-probability, indexed by the target's
    /// place in the split (`eval::evaluate_scored`).
    pub fn evaluate_scored(&self, split: Split) -> Result<(EvalStats, Vec<f32>), EngineError> {
        self.evaluate_scored_reporting(split, &mut |_, _| {})
    }

    /// [`Self::evaluate_scored`], telling `progress(done, total)` the positions scored.
    pub fn evaluate_scored_reporting(
        &self,
        split: Split,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(EvalStats, Vec<f32>), EngineError> {
        let mut log_probs = Vec::new();
        let stats = self.evaluate_into(split, progress, Some(&mut log_probs))?;
        Ok((stats, log_probs))
    }

    pub(super) fn evaluate_into(
        &self,
        split: Split,
        progress: &mut dyn FnMut(u64, u64),
        log_probs: Option<&mut Vec<f32>>,
    ) -> Result<EvalStats, EngineError> {
        let _autocast = Autocast::enter(self.config.precision);
        let stats = eval::evaluate_scored(
            &self.model,
            &self.device.clone().inner(),
            &self.corpus,
            &eval::EvalRequest {
                split,
                streams: self.config.eval_batch,
                window: self.model_config.window(),
                step: self.state.step,
                // The Theorem-2 threshold uses the cosine regulariser's weight when it is on.
                cosine_weight: self.state.objectives.cos.active(),
                squash: self.state.objectives.squashed_scores(),
                host: self.device_spec == DeviceSpec::Cpu,
                host_lstm: self.host_lstm,
                hidden: true,
            },
            progress,
            log_probs,
        )?;
        Ok(stats)
    }

    /// Whether a validation PPL is better than every one before (a non-finite one never is).
    pub(crate) fn improves_valid(&self, ppl: f64) -> bool {
        ppl.is_finite() && self.state.best_valid_ppl.is_none_or(|b| ppl < b)
    }

    /// Records a validation result; the plateau schedule divides the rate when it did not improve.
    pub(crate) fn observe_valid(&mut self, ppl: f64) -> Option<(f64, f64)> {
        if self.improves_valid(ppl) {
            self.state.best_valid_ppl = Some(ppl);
            self.state.evals_since_best = 0;
            return None;
        }
        self.state.evals_since_best += 1;
        if self.config.schedule == Schedule::Plateau && self.state.lr_override.is_none() {
            let before = self.current_lr();
            self.state.lr_scale /= self.config.plateau_factor;
            return Some((before, self.current_lr()));
        }
        None
    }
}
