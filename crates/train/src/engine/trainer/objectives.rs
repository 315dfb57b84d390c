//! A step's objective: the data term (MLE, NCE, NCE-R, AND, unlikelihood) through the fused head, the regularisers on W, and the gates of AGG and gradient-part freezing.

use super::forward::Forward;
use super::{Trainer, step_seed};

use burn::prelude::*;

use crate::engine::EngineError;
use crate::objective::agg::{Gates, TokenCounter, agg_gates, part_freeze_gates, row_gates};
use crate::objective::and_loss::and_loss;
use crate::objective::head::{HeadOutput, HeadTerms, full_softmax_head};
use crate::objective::self_norm::{
    UnigramSampler, nce_loss, sample_positions, sampled_log_z_penalty,
};
use crate::objective::spectrum::{
    orthogonality_penalty, prior_penalty, prior_targets, spectrum_penalty,
};
use crate::objective::{cosreg, laplacian, unlikelihood};
use conelab_core::model::DeviceSpec;
use conelab_core::objective::{GateParts, LossKind, Objectives, SigmaUpdate};
use conelab_data::Batch;

/// One step's objective.
pub(super) struct StepObjective {
    /// The data term's value, detached (reported).
    pub(super) data_loss: Tensor<1>,
    /// What is differentiated: the data term's graph and every penalty.
    pub(super) graph: Tensor<1>,
    /// Each penalty, detached (their sum is reported).
    pub(super) penalties: Vec<Tensor<1>>,
    /// W's output-side gradient when the head hands it back outside the graph.
    pub(super) w_from_head: Option<Tensor<2>>,
}

/// Salts of the step seed for the objectives' own random draws.
pub(super) const NCE_NOISE_SALT: u64 = 0x4E43_455F_4E4F_4953;

pub(super) const NCE_POSITIONS_SALT: u64 = 0x4E43_455F_504F_5353;

impl Trainer {
    /// The step's objective: the data term of the run's loss (MLE with the head's terms, NCE,
    /// NCE-R, AND) and the regularisers on W and the hidden states.
    pub(super) fn objective(
        &mut self,
        objectives: &Objectives,
        batch: &Batch,
        forward: &Forward,
        targets: Tensor<1, Int>,
        gates: Option<&Gates>,
        next: u64,
    ) -> Result<StepObjective, EngineError> {
        let Forward {
            hidden,
            w,
            spectral,
            ..
        } = forward;
        let vocab = self.corpus.vocab().len();
        let positions = batch.batch * batch.time;
        let bias = self.model.output_bias();
        // The data term: its value (reported) and a graph whose gradient is the step's.
        let mut penalties: Vec<Tensor<1>> = Vec::new();
        // W's output-side gradient when the head hands it back outside the graph (W is then the
        // parameter itself: no spectrum control), added to W's gradient after the backward pass.
        let mut w_from_head: Option<Tensor<2>> = None;
        let (data_loss, objective) = match objectives.loss {
            LossKind::Mle => {
                let head = self.full_softmax_terms(
                    objectives,
                    batch,
                    hidden.clone(),
                    w.clone(),
                    bias.clone(),
                    targets.clone(),
                    gates,
                    !spectral,
                )?;
                penalties.extend(head.penalties);
                w_from_head = head.w_gradient;
                (head.nll, head.graph)
            }
            LossKind::Nce | LossKind::NceR => {
                let sampler = self
                    .sampler
                    .get_or_insert_with(|| UnigramSampler::new(self.corpus.vocab().counts()));
                let noise_k = objectives.nce.noise;
                let noise =
                    sampler.sample(noise_k, step_seed(self.config.seed ^ NCE_NOISE_SALT, next));
                let ln_k = (noise_k as f32).ln();
                let log_kq: Vec<f32> = sampler.log_q().iter().map(|&l| l + ln_k).collect();
                let loss = nce_loss(
                    hidden.clone(),
                    w.clone(),
                    bias.clone(),
                    targets.clone(),
                    Tensor::from_data(TensorData::new(noise, [noise_k]), &self.device),
                    Tensor::from_data(TensorData::new(log_kq, [vocab]), &self.device),
                );
                let mut graph = loss.clone();
                if objectives.loss == LossKind::NceR && objectives.nce.alpha > 0.0 {
                    let pen = sampled_log_z_penalty(
                        hidden.clone(),
                        w.clone(),
                        bias.clone(),
                        self.sampled_positions(positions, objectives.nce.fraction, next),
                        objectives.nce.fraction,
                        false,
                    )
                    .mul_scalar(objectives.nce.alpha);
                    penalties.push(pen.clone().detach());
                    graph = graph + pen;
                }
                (loss.detach(), graph)
            }
            LossKind::And => {
                let settings = objectives.and_lm.settings();
                let terms = and_loss(
                    hidden.clone(),
                    w.clone(),
                    bias.clone(),
                    targets.clone(),
                    self.sampled_positions(positions, settings.fraction, next),
                    settings,
                );
                penalties.push(terms.penalty.clone().detach());
                (terms.data.clone().detach(), terms.data + terms.penalty)
            }
        };

        let objective = self.regularised(objectives, forward, targets, objective, &mut penalties);
        Ok(StepObjective {
            data_loss,
            graph: objective,
            penalties,
            w_from_head,
        })
    }

    /// `objective` plus the regularisers on W (and the detached hidden states) that are on;
    /// each term's value is added to `penalties`.
    pub(super) fn regularised(
        &self,
        objectives: &Objectives,
        forward: &Forward,
        targets: Tensor<1, Int>,
        mut objective: Tensor<1>,
        penalties: &mut Vec<Tensor<1>>,
    ) -> Tensor<1> {
        let Forward { hidden, w, .. } = forward;
        let vocab = self.corpus.vocab().len();
        let mut add = |objective: Tensor<1>, term: Tensor<1>| {
            penalties.push(term.clone().detach());
            objective + term
        };
        if objectives.cos.enabled && objectives.cos.weight > 0.0 {
            objective = add(
                objective,
                cosreg::cos_penalty(w.clone()).mul_scalar(objectives.cos.weight),
            );
        }
        if objectives.lap.enabled && objectives.lap.weight > 0.0 {
            let a = w.clone().select(0, targets);
            objective = add(
                objective,
                laplacian::laplacian_penalty(hidden.clone(), a, vocab)
                    .mul_scalar(objectives.lap.weight),
            );
        }
        if let (Some(s), Some(c1)) = (self.model.spectral(), self.state.spectrum_c1) {
            let d = s.sigma.dims()[0];
            let targets = prior_targets(&objectives.spectrum, c1, d);
            let config = &objectives.spectrum;
            if config.sigma == SigmaUpdate::Proximal {
                // The prior acts in the σ step (`update`), out of the loss's gradient and so out
                // of the clipping norm; its value is still reported with the penalties.
                objective = add(objective, orthogonality_penalty(s, config));
                let prior =
                    prior_penalty(s.sigma.val().detach(), &targets).mul_scalar(config.lambda_prior);
                penalties.push(prior);
            } else {
                objective = add(objective, spectrum_penalty(s, config, &targets));
            }
        }
        objective
    }

    /// The full-softmax terms (NLL, DEV, unlikelihood) with the step's gates
    /// (`objective/head.rs`); with `w_outside_graph` W's output-side gradient comes back beside
    /// the graph instead of in it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn full_softmax_terms(
        &self,
        objectives: &Objectives,
        batch: &Batch,
        hidden: Tensor<2>,
        w: Tensor<2>,
        bias: Option<Tensor<1>>,
        targets: Tensor<1, Int>,
        gates: Option<&Gates>,
        w_outside_graph: bool,
    ) -> Result<HeadOutput, EngineError> {
        let unlikelihood = (objectives.ul.enabled && objectives.ul.weight > 0.0).then(|| {
            let (idx, mask) =
                unlikelihood::candidates(&batch.inputs, &batch.targets, batch.batch, batch.time);
            let shape = [batch.batch * batch.time, batch.time];
            (
                objectives.ul.weight,
                Tensor::from_data(TensorData::new(idx, shape), &self.device),
                Tensor::from_data(TensorData::new(mask, shape), &self.device),
            )
        });
        let terms = HeadTerms {
            dev: objectives.dev.active(),
            unlikelihood,
            gates: gates.map(|g| row_gates(g, &batch.targets, &self.device)),
            // burn-flex's logits are in host memory: the fused host pass reads them in place.
            host_targets: (self.device_spec == DeviceSpec::Cpu).then(|| batch.targets.clone()),
            w_outside_graph,
        };
        full_softmax_head(hidden, w, bias, targets, terms)
            .map_err(EngineError::backend("the softmax head"))
    }

    /// The gates of this step: gradient-part freezing's static ones, or AGG's from the counter
    /// (which first takes in this batch's targets); `None` when nothing is gated.
    pub(super) fn step_gates(
        &mut self,
        next: u64,
        targets: &[u32],
        objectives: &Objectives,
    ) -> Result<Option<Gates>, EngineError> {
        if objectives.gate_freeze != GateParts::None {
            return Ok(Some(part_freeze_gates(
                self.corpus.groups(),
                objectives.gate_freeze,
            )));
        }
        if !objectives.agg.enabled {
            self.counter = None;
            self.static_gates = None;
            return Ok(None);
        }
        let memory = objectives.agg.memory.unwrap_or(self.windows_per_epoch) as usize;
        let alpha = objectives.agg.alpha;
        let mode = objectives.agg.counter;
        if objectives.agg.static_groups && next > self.windows_per_epoch {
            if self.static_gates.is_none() {
                // The groups as they stood at the end of epoch 1, replayed from the data order.
                let counter = self.replay_counter(self.windows_per_epoch, memory)?;
                self.static_gates = Some(agg_gates(&counter, alpha, objectives.agg.gates, mode));
            }
            return Ok(self.static_gates.clone());
        }
        self.static_gates = None;
        let in_sync =
            matches!(&self.counter, Some((c, s)) if c.memory() == memory && *s == next - 1);
        if !in_sync {
            // Switched on mid-run, resumed, or the memory changed: the counter is a function of
            // the (deterministic) data order, so rebuild it from the windows it remembers.
            self.counter = Some((self.replay_counter(next - 1, memory)?, next - 1));
        }
        let Some((counter, at)) = self.counter.as_mut() else {
            return Ok(None);
        };
        counter.push(targets);
        *at = next;
        Ok(Some(agg_gates(counter, alpha, objectives.agg.gates, mode)))
    }

    /// The token counter after optimizer step `step`, from the windows of steps
    /// step − min(step, memory) + 1 ..= step.
    pub(super) fn replay_counter(
        &self,
        step: u64,
        memory: usize,
    ) -> Result<TokenCounter, EngineError> {
        let mut counter = TokenCounter::new(self.corpus.vocab().len(), memory);
        let first = step.saturating_sub(memory as u64) + 1;
        for s in first..=step {
            let k = ((s - 1) % self.windows_per_epoch) as usize;
            let batch = self
                .window(k)
                .ok_or_else(|| EngineError::Config(format!("no training window {k}").into()))?;
            counter.push(&batch.targets);
        }
        Ok(counter)
    }

    /// The positions of step `next` whose exact log Z NCE-R's and AND's penalty computes: ⌈γ·P⌉
    /// of `positions`, deterministic in (seed, step).
    pub(super) fn sampled_positions(
        &self,
        positions: usize,
        fraction: f64,
        next: u64,
    ) -> Tensor<1, Int> {
        let sampled = sample_positions(
            positions,
            fraction,
            step_seed(self.config.seed ^ NCE_POSITIONS_SALT, next),
        );
        let m = sampled.len();
        Tensor::from_data(TensorData::new(sampled, [m]), &self.device)
    }
}
