//! Gradients and the update: backward, the global norm and its clip, frozen rows kept, the optimizers' steps (spectrum control's factors apart), and a step taken back.

use super::device::DeviceGuard;
use super::{SteppedParams, Trainer};

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};
use burn::prelude::*;

use crate::engine::fused_adamw::FusedAdamW;
use crate::engine::{EngineError, grad_norm};
use crate::model::{HostLstmWindow, LanguageModel, constant};
use crate::objective::freeze::{restore_rows, zero_rows};
use crate::objective::spectrum::{prior_targets, proximal_sigma_step};
use conelab_core::objective::SigmaUpdate;
use conelab_core::train_config::{OptimizerKind, TrainConfig};

/// The optimizer of U, σ, V: the run's, without weight decay (decay would shrink U and V away from
/// the orthonormality their penalties hold them to).
pub(crate) fn spectral_optimizer(config: &TrainConfig, host_pass: bool) -> ModuleOptimizer {
    optimizer(
        &TrainConfig {
            weight_decay: 0.0,
            ..config.clone()
        },
        host_pass,
    )
}

pub(crate) fn build_optimizer(config: &TrainConfig) -> ModuleOptimizer {
    optimizer(config, true)
}

/// The run's optimizer; `host_pass`: AdamW may take its host pass (`fused_adamw.rs`).
pub(super) fn optimizer(config: &TrainConfig, host_pass: bool) -> ModuleOptimizer {
    match config.optimizer {
        // burn's AdamW with its update fused into one pass on burn-flex and LibTorch CPU
        // (fused_adamw.rs); the same state, so checkpoints load into either.
        OptimizerKind::Adamw => ModuleOptimizer::from(
            FusedAdamW::new(
                config.beta1 as f32,
                config.beta2 as f32,
                config.epsilon as f32,
                config.weight_decay as f32,
            )
            .with_host_pass(host_pass),
        ),
        OptimizerKind::Sgd => SgdConfig::new()
            .with_momentum((config.momentum > 0.0).then(|| {
                MomentumConfig::new()
                    .with_momentum(config.momentum)
                    .with_dampening(0.0)
            }))
            .with_weight_decay(
                (config.weight_decay > 0.0)
                    .then(|| WeightDecayConfig::new(config.weight_decay as f32)),
            )
            .init(),
    }
}

/// Scales all gradients so their global L2 norm is at most `max_norm` (0 = no clipping); returns
/// the norm before clipping. burn's own clipping works per parameter, not globally.
pub fn clip_global_norm(
    model: &LanguageModel,
    grads: GradientsParams,
    max_norm: f64,
) -> (GradientsParams, f64) {
    let norm = match squared_grad_norm(model, &grads) {
        None => return (grads, 0.0),
        Some(SquaredNorm::Host(s)) => s.sqrt(),
        Some(SquaredNorm::Device(t)) => (t.into_scalar::<f32>() as f64).sqrt(),
    };
    (scale_to_norm(model, grads, norm, max_norm), norm)
}

/// The parameters of `model` that have a gradient in `grads`.
pub(super) fn ids_with_gradients(
    model: &LanguageModel,
    grads: &GradientsParams,
) -> Vec<burn::module::ParamId> {
    struct Ids<'a> {
        grads: &'a GradientsParams,
        ids: Vec<burn::module::ParamId>,
    }
    impl ModuleVisitor for Ids<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if self.grads.get::<D>(param.id).is_some() {
                self.ids.push(param.id);
            }
        }
    }
    let mut ids = Ids {
        grads,
        ids: Vec::new(),
    };
    model.visit(&mut ids);
    ids.ids
}

/// Adds `from`'s gradients into `into`, parameter by parameter (a parameter in one only keeps it).
pub(super) fn add_gradients(
    model: &LanguageModel,
    into: &mut GradientsParams,
    mut from: GradientsParams,
) {
    struct Add<'a> {
        into: &'a mut GradientsParams,
        from: &'a mut GradientsParams,
    }
    impl ModuleVisitor for Add<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.from.remove::<D>(param.id) {
                let sum = match self.into.remove::<D>(param.id) {
                    Some(existing) => existing + g,
                    None => g,
                };
                self.into.register(param.id, sum);
            }
        }
    }
    model.visit(&mut Add {
        into,
        from: &mut from,
    });
}

/// The squared global L2 norm of the gradients.
pub(super) enum SquaredNorm {
    /// Summed on the host from burn-flex's buffers (`grad_norm.rs`).
    Host(f64),
    /// A one-element tensor left on the device (no host read); boxed, as a tensor handle is
    /// large beside an f64.
    Device(Box<Tensor<1>>),
}

/// The squared global L2 norm of the gradients; `None` when no parameter has a gradient.
pub(super) fn squared_grad_norm(
    model: &LanguageModel,
    grads: &GradientsParams,
) -> Option<SquaredNorm> {
    struct HostSums<'a> {
        grads: &'a GradientsParams,
        sum: Option<f64>,
        count: usize,
    }
    impl ModuleVisitor for HostSums<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let (Some(g), Some(sum)) = (self.grads.get::<D>(param.id), self.sum) {
                self.sum = grad_norm::squared_sum(&g).map(|s| sum + s);
                self.count += 1;
            }
        }
    }
    struct SquaredNorms<'a> {
        grads: &'a GradientsParams,
        parts: Vec<Tensor<1>>,
    }
    impl ModuleVisitor for SquaredNorms<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.grads.get::<D>(param.id) {
                self.parts.push(g.square().sum());
            }
        }
    }
    let mut host = HostSums {
        grads,
        sum: Some(0.0),
        count: 0,
    };
    model.visit(&mut host);
    match host.sum {
        Some(_) if host.count == 0 => return None,
        Some(s) => return Some(SquaredNorm::Host(s)),
        None => {}
    }
    #[cfg(feature = "tch")]
    if let Some(norm) = super::device::libtorch_grads::squared_norm(model, grads) {
        return Some(SquaredNorm::Device(Box::new(norm)));
    }
    let mut norms = SquaredNorms {
        grads,
        parts: Vec::new(),
    };
    model.visit(&mut norms);
    (!norms.parts.is_empty())
        .then(|| SquaredNorm::Device(Box::new(Tensor::cat(norms.parts, 0).sum())))
}

/// Scales the gradients, whose global norm is `norm`, down to `max_norm` when above it (0 = never).
pub(super) fn scale_to_norm(
    model: &LanguageModel,
    grads: GradientsParams,
    norm: f64,
    max_norm: f64,
) -> GradientsParams {
    struct Scale<'a> {
        grads: &'a mut GradientsParams,
        factor: f64,
    }
    impl ModuleVisitor for Scale<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.grads.remove::<D>(param.id) {
                self.grads.register(param.id, g.mul_scalar(self.factor));
            }
        }
    }
    if max_norm > 0.0 && norm > max_norm {
        let factor = max_norm / (norm + 1e-6);
        #[cfg(feature = "tch")]
        let grads = match super::device::libtorch_grads::scale(model, grads, factor) {
            Ok(scaled) => return scaled,
            Err(grads) => grads,
        };
        let mut grads = grads;
        let mut scale = Scale {
            grads: &mut grads,
            factor,
        };
        model.visit(&mut scale);
        return grads;
    }
    grads
}

impl Trainer {
    /// Takes back AdamW's count of a step the device skipped, for the parameters it stepped.
    pub(super) fn rewind(&mut self, stepped: &SteppedParams) {
        self.model =
            crate::engine::fused_adamw::rewind(&mut self.optim, self.model.clone(), &stepped.main);
        if let (Some(optim), false) = (self.spectral_optim.as_mut(), stepped.spectral.is_empty()) {
            let (model, factors) = self.model.clone().take_spectral();
            let factors =
                factors.map(|f| crate::engine::fused_adamw::rewind(optim, f, &stepped.spectral));
            self.model = model.set_spectral_raw(factors);
        }
    }

    /// The step's gradients: backward through `graph` (and the host LSTM's layers), W's
    /// gradient from the head added where it came outside the graph, frozen rows zeroed.
    pub(super) fn gradients(
        &self,
        graph: Tensor<1>,
        host_window: Option<HostLstmWindow>,
        spectral_leaf: Option<(&Tensor<2>, &Tensor<2>)>,
        w_from_head: Option<Tensor<2>>,
        frozen: &[std::ops::Range<usize>],
    ) -> Result<GradientsParams, EngineError> {
        let raw = graph.backward();
        let mut grads = match host_window {
            None => GradientsParams::from_grads(raw, &self.model),
            Some(window) => self.host_lstm_gradients(window, raw, spectral_leaf)?,
        };
        let w_id = self.model.embedding_param_id();
        if let Some(from_head) = w_from_head {
            let from_head = from_head.inner();
            let sum = match grads.remove::<2>(w_id) {
                Some(g) => g + from_head,
                None => from_head,
            };
            grads.register(w_id, sum);
        }
        if !frozen.is_empty()
            && let Some(g) = grads.remove::<2>(w_id)
        {
            grads.register(w_id, zero_rows(g, frozen));
        }
        Ok(grads)
    }

    /// The optimizer step at `lr`: the model's parameters, the spectral factors with their own
    /// optimizer under spectrum control, and the frozen rows of W put back as they were.
    ///
    /// `guard` (a LibTorch device): what the device decided about the step, which the fused
    /// AdamW reads there — the clip's divisor, and for a pipelined step the flag that leaves
    /// it undone. Every parameter must then take the fused step. The parameters stepped are
    /// returned, for taking a skipped step back.
    pub(super) fn update(
        &mut self,
        mut grads: GradientsParams,
        lr: f64,
        frozen: &[std::ops::Range<usize>],
        guard: Option<DeviceGuard<'_>>,
    ) -> Result<SteppedParams, EngineError> {
        let mut stepped = SteppedParams::default();
        if guard.is_some() {
            stepped.main = ids_with_gradients(&self.model, &grads);
        }
        // On LibTorch off the host pass, AdamW's steps below are queued and written at once by
        // the flush (`fused_adamw::AdamWBatch`), before anything reads the new parameters.
        #[cfg(feature = "tch")]
        let batch = crate::engine::fused_adamw::AdamWBatch::open();
        let w_before = (!frozen.is_empty()).then(|| constant(self.model.embedding()));
        let proximal = self.proximal_sigma();
        let mut sigma_grad = None;
        let spectral_grads = self.model.spectral().map(|s| {
            let mut g = GradientsParams::new();
            if let Some(t) = grads.remove::<2>(s.u.id) {
                g.register(s.u.id, t);
            }
            if let Some(t) = grads.remove::<1>(s.sigma.id) {
                if proximal {
                    sigma_grad = Some(t);
                } else {
                    g.register(s.sigma.id, t);
                }
            }
            if let Some(t) = grads.remove::<2>(s.v.id) {
                g.register(s.v.id, t);
            }
            if guard.is_some() {
                stepped.spectral = [s.u.id, s.sigma.id, s.v.id]
                    .into_iter()
                    .filter(|id| stepped.main.contains(id))
                    .collect();
                stepped.main.retain(|id| !stepped.spectral.contains(id));
            }
            g
        });
        self.model = self.optim.step(lr, self.model.clone(), grads);
        if let Some(g) = spectral_grads {
            let (model, factors) = self.model.clone().take_spectral();
            let optim = self
                .spectral_optim
                .get_or_insert_with(|| spectral_optimizer(&self.config, self.host_paths));
            let mut factors = factors.map(|f| optim.step(lr, f, g));
            if proximal && let (Some(f), Some(c1)) = (factors.as_mut(), self.state.spectrum_c1) {
                let config = &self.state.objectives.spectrum;
                let targets = prior_targets(config, c1, f.sigma.dims()[0]);
                // η_σ follows the schedule (warmup, decay) as the rate of every other parameter.
                let eta = config.sigma_lr * lr / self.config.lr;
                let sigma = f.sigma.val().inner();
                let sigma =
                    proximal_sigma_step(sigma, sigma_grad, eta, config.lambda_prior, &targets);
                f.sigma = f
                    .sigma
                    .clone()
                    .map(|_| Tensor::from_inner(sigma).require_grad());
            }
            self.model = model.set_spectral_raw(factors);
        }
        #[cfg(feature = "tch")]
        {
            let expected = stepped.main.len() + stepped.spectral.len();
            let flushed = batch
                .flush_guarded(guard.unwrap_or_default())
                .map_err(EngineError::backend("the optimizer step"))?;
            if guard.is_some() && flushed != expected {
                // A parameter burn's AdamW stepped outside the fused step: neither the clip
                // nor the device's flag reached it. Never so for conelab's models (all f32
                // LibTorch parameters, AdamW).
                return Err(EngineError::backend_says(format!(
                    "the fused optimizer step updated {flushed} of {expected} parameters"
                )));
            }
        }
        if let Some(old) = w_before {
            let new = restore_rows(constant(self.model.embedding()), old, frozen);
            self.model = self.model.clone().replace_embedding_weight(new);
        }
        Ok(stepped)
    }

    /// Spectrum control is on with the proximal σ step: σ is stepped outside the fused AdamW, so
    /// the step takes the host-read path (its loss read before the update) instead of the
    /// device's guard, which only AdamW's kernel reads.
    pub(super) fn proximal_sigma(&self) -> bool {
        self.state.spectrum_c1.is_some()
            && self.state.objectives.spectrum.sigma == SigmaUpdate::Proximal
    }
}
