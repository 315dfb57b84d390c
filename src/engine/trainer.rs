//! One training run, step by step, synchronously. The engine thread drives it; the benchmark and
//! the tests drive it directly.

use std::sync::Arc;
use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamWConfig, GradientsParams, ModuleOptimizer, SgdConfig};
use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::config::{OptimizerKind, Schedule, TrainConfig};
use super::protocol::{AppliedCommand, Command, EvalStats, Snapshot, StepStats};
use super::{EngineError, eval};
use crate::data::{Corpus, PartialWindow, Split, StreamBatcher};
use crate::model::lstm::detach_state;
use crate::model::output::mean_nll;
use crate::model::{DeviceSpec, LanguageModel, ModelConfig, RecurrentState};

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
    /// Every command applied so far, with its step.
    pub commands: Vec<AppliedCommand>,
}

impl Default for RunState {
    fn default() -> Self {
        Self {
            step: 0,
            lr_scale: 1.0,
            lr_override: None,
            best_valid_ppl: None,
            commands: Vec::new(),
        }
    }
}

pub struct Trainer {
    corpus: Arc<Corpus>,
    model_config: ModelConfig,
    config: TrainConfig,
    device_spec: DeviceSpec,
    device: Device,
    model: LanguageModel,
    optim: ModuleOptimizer,
    state: RunState,
    carried: Option<RecurrentState>,
    windows_per_epoch: u64,
}

impl Trainer {
    /// A fresh run: the model is initialised from `config.seed`.
    pub fn new(
        corpus: Arc<Corpus>,
        model_config: ModelConfig,
        config: TrainConfig,
        device_spec: DeviceSpec,
    ) -> Result<Self, EngineError> {
        model_config.validate().map_err(EngineError::Config)?;
        config.validate().map_err(EngineError::Config)?;
        let window = model_config.window();
        let train = corpus.split(Split::Train);
        let windows_per_epoch = StreamBatcher::new(train, config.batch, window, PartialWindow::Drop)
            .map_err(|e| EngineError::Config(e.to_string()))?
            .num_windows() as u64;
        if windows_per_epoch == 0 {
            return Err(EngineError::Config(format!(
                "the train split has {} tokens: too few for batch {} × window {}",
                train.len(),
                config.batch,
                window
            )));
        }
        for split in [Split::Valid, Split::Test] {
            StreamBatcher::new(
                corpus.split(split),
                config.eval_batch,
                window,
                PartialWindow::Keep,
            )
            .map_err(|e| EngineError::Config(format!("{split} split: {e}")))?;
        }
        let device = device_spec.training_device()?;
        device.seed(config.seed);
        let model = LanguageModel::new(&model_config, corpus.vocab().len(), &device);
        let optim = build_optimizer(&config);
        Ok(Self {
            corpus,
            model_config,
            config,
            device_spec,
            device,
            model,
            optim,
            state: RunState::default(),
            carried: None,
            windows_per_epoch,
        })
    }

    /// Replaces model, optimizer state and counters with those of a checkpoint.
    pub(crate) fn restore(
        &mut self,
        model: LanguageModel,
        optim: ModuleOptimizer,
        state: RunState,
        carried: Option<RecurrentState>,
    ) {
        self.model = model;
        self.optim = optim;
        self.state = state;
        self.carried = carried;
    }

    pub fn corpus(&self) -> &Arc<Corpus> {
        &self.corpus
    }

    pub fn model(&self) -> &LanguageModel {
        &self.model
    }

    pub fn model_config(&self) -> &ModelConfig {
        &self.model_config
    }

    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// Changes the length of the run (e.g. from `--epochs`, once the corpus is known).
    pub fn set_total_steps(&mut self, steps: u64) {
        self.config.steps = steps.max(1);
    }

    pub fn device_spec(&self) -> DeviceSpec {
        self.device_spec
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn optimizer(&self) -> &ModuleOptimizer {
        &self.optim
    }

    pub fn state(&self) -> &RunState {
        &self.state
    }

    pub fn carried_state(&self) -> Option<&RecurrentState> {
        self.carried.as_ref()
    }

    pub fn windows_per_epoch(&self) -> u64 {
        self.windows_per_epoch
    }

    pub fn parameters(&self) -> usize {
        self.model.num_params()
    }

    pub fn is_done(&self) -> bool {
        self.state.step >= self.config.steps
    }

    /// Learning rate of the next step.
    pub fn current_lr(&self) -> f64 {
        if let Some(lr) = self.state.lr_override {
            return lr;
        }
        self.config
            .scheduled_lr(self.config.lr, self.state.step + 1)
            * self.state.lr_scale
    }

    /// One optimizer step on the next training window. A NaN or infinite loss is reported as
    /// [`EngineError::Diverged`] and the step is not applied.
    pub fn train_step(&mut self) -> Result<StepStats, EngineError> {
        let start = Instant::now();
        let next = self.state.step + 1;
        // Dropout masks depend only on (seed, step): a resumed run draws the same ones.
        self.device.seed(step_seed(self.config.seed, next));
        let k = (self.state.step % self.windows_per_epoch) as usize;
        let window = self.model_config.window();
        let batch = StreamBatcher::new(
            self.corpus.split(Split::Train),
            self.config.batch,
            window,
            PartialWindow::Drop,
        )
        .ok()
        .and_then(|b| b.window(k))
        .ok_or_else(|| EngineError::Config(format!("no training window {k}")))?;
        if k == 0 {
            // A new epoch starts the streams from the beginning: no state to carry.
            self.carried = None;
        }
        let inputs = Tensor::<2, Int>::from_data(
            TensorData::new(batch.inputs, [batch.batch, batch.time]),
            &self.device,
        );
        let targets = Tensor::<1, Int>::from_data(
            TensorData::new(batch.targets, [batch.batch * batch.time]),
            &self.device,
        );
        let (hidden, state) = self.model.hidden(inputs, self.carried.take());
        let loss = mean_nll(self.model.logits(hidden), targets);
        let loss_value = loss.clone().into_scalar::<f32>() as f64;
        if !loss_value.is_finite() {
            return Err(EngineError::Diverged {
                step: next,
                loss: loss_value,
            });
        }
        let grads = GradientsParams::from_grads(loss.backward(), &self.model);
        let (grads, grad_norm) = clip_global_norm(&self.model, grads, self.config.clip_norm);
        let lr = self.current_lr();
        self.model = self.optim.step(lr, self.model.clone(), grads);
        self.carried = state.map(detach_state);
        self.state.step = next;
        let seconds = start.elapsed().as_secs_f64();
        let tokens = (batch.batch * batch.time) as f64;
        Ok(StepStats {
            step: next,
            epoch: next as f64 / self.windows_per_epoch as f64,
            loss: loss_value,
            lr,
            grad_norm,
            tokens_per_sec: tokens / seconds,
            step_ms: seconds * 1e3,
        })
    }

    /// Exact perplexity over a whole split, total and per group.
    pub fn evaluate(&self, split: Split) -> Result<EvalStats, EngineError> {
        let stats = eval::evaluate(
            &self.model,
            &self.device.clone().inner(),
            &self.corpus,
            &eval::EvalRequest {
                split,
                streams: self.config.eval_batch,
                window: self.model_config.window(),
                step: self.state.step,
                // The Theorem-2 threshold's cosine weight: no cosine regulariser exists yet (#5).
                cosine_weight: 0.0,
            },
        )?;
        Ok(stats)
    }

    /// Records a validation result; the plateau schedule divides the rate when it did not improve.
    pub(crate) fn observe_valid(&mut self, ppl: f64) -> Option<(f64, f64)> {
        let improved = self.state.best_valid_ppl.is_none_or(|b| ppl < b);
        if improved {
            self.state.best_valid_ppl = Some(ppl);
            return None;
        }
        if self.config.schedule == Schedule::Plateau && self.state.lr_override.is_none() {
            let before = self.current_lr();
            self.state.lr_scale /= self.config.plateau_factor;
            return Some((before, self.current_lr()));
        }
        None
    }

    /// A copy of W on the host.
    pub fn snapshot(&self) -> Result<Snapshot, EngineError> {
        let w = self.model.embedding().inner();
        let [n, d] = w.dims();
        let weights = w
            .try_into_vec_as::<f32>()
            .map_err(|e| EngineError::Backend(format!("reading W: {e:?}")))?;
        Ok(Snapshot {
            step: self.state.step,
            n,
            d,
            weights,
        })
    }

    /// Applies a command between two steps. Returns the record, or why it was refused.
    pub fn apply(&mut self, command: &Command) -> Result<AppliedCommand, String> {
        let step = self.state.step + 1;
        let record = |before: String, after: String| AppliedCommand {
            step,
            command: command.clone(),
            before,
            after,
        };
        let applied = match command {
            Command::SetLr { lr } => {
                if !(lr.is_finite() && *lr > 0.0) {
                    return Err(format!("learning rate {lr} must be a positive number"));
                }
                let before = self.current_lr();
                self.state.lr_override = Some(*lr);
                record(format!("lr={before:.6e}"), format!("lr={lr:.6e}"))
            }
            Command::Pause => record("running".into(), "paused".into()),
            Command::Resume => record("paused".into(), "running".into()),
            Command::Stop { save } => record("running".into(), format!("stopped (save={save})")),
            Command::SaveCheckpoint => record(String::new(), "checkpoint".into()),
        };
        self.state.commands.push(applied.clone());
        Ok(applied)
    }
}

pub(crate) fn build_optimizer(config: &TrainConfig) -> ModuleOptimizer {
    match config.optimizer {
        OptimizerKind::Adamw => AdamWConfig::new()
            .with_beta_1(config.beta1 as f32)
            .with_beta_2(config.beta2 as f32)
            .with_epsilon(config.epsilon as f32)
            .with_weight_decay(config.weight_decay as f32)
            .init(),
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

/// Seed of the device RNG for a step (SplitMix64 of seed and step).
fn step_seed(seed: u64, step: u64) -> u64 {
    let mut z = seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Scales all gradients so their global L2 norm is at most `max_norm` (0 = no clipping); returns
/// the norm before clipping. burn's own clipping works per parameter, not globally.
pub fn clip_global_norm(
    model: &LanguageModel,
    mut grads: GradientsParams,
    max_norm: f64,
) -> (GradientsParams, f64) {
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
    let mut norms = SquaredNorms {
        grads: &grads,
        parts: Vec::new(),
    };
    model.visit(&mut norms);
    if norms.parts.is_empty() {
        return (grads, 0.0);
    }
    let norm = (Tensor::cat(norms.parts, 0).sum().into_scalar::<f32>() as f64).sqrt();
    if max_norm > 0.0 && norm > max_norm {
        let mut scale = Scale {
            grads: &mut grads,
            factor: max_norm / (norm + 1e-6),
        };
        model.visit(&mut scale);
    }
    (grads, norm)
}
