//! One training run, step by step, synchronously. The engine thread drives it; the benchmark and
//! the tests drive it directly.
//!
//! Here: the trainer's state and the step's outline — dispatch one step (window, forward,
//! objective, gradients, update), read it back, pipeline the next. Each job has its file:
//! [`build`] (a new or restored trainer, the memory it needs), [`data`] (the windows a step
//! reads), [`forward`], [`objectives`] (the data term, the regularisers, the gates), [`update`]
//! (gradients, their norm and clip, the optimizers), [`device`] (LibTorch's queued step and
//! device-side norms), [`evaluate`], [`snapshot`] (W for the analysis, the weights check) and
//! [`commands`] (what a command changes between two steps). The model is reached through its
//! tied-embedding interface only (`crate::model::TiedLm`).

mod build;
mod commands;
mod data;
mod device;
mod evaluate;
mod forward;
mod objectives;
mod snapshot;
mod update;

pub use build::{memory_refusal, training_bytes_needed};
pub use update::clip_global_norm;
pub(crate) use update::{build_optimizer, spectral_optimizer};

use data::ResidentSplit;
use device::{DeviceFlag, HostCopy};
use forward::Forward;
use update::{SquaredNorm, scale_to_norm, squared_grad_norm};

use std::sync::Arc;
use std::time::Instant;

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::prelude::*;

use super::{EngineError, RunState};
use crate::model::lstm::detach_state;
use crate::model::precision::Autocast;
use crate::model::{LanguageModel, RecurrentState};
use crate::objective::agg::{Gates, TokenCounter};
use crate::objective::freeze::frozen_ranges;
use crate::objective::self_norm::UnigramSampler;
use conelab_core::events::StepStats;
use conelab_core::model::{DeviceSpec, ModelConfig};
use conelab_core::objective::Objectives;
use conelab_core::train_config::{OptimizerKind, TrainConfig};
use conelab_data::{Corpus, Group};

/// What [`Trainer::step_pipelined`] read back: each step read, in order, and the divergence
/// that ended the call, if one did (the trainer then stands before that step).
#[derive(Debug, Default)]
pub struct ReadBack {
    pub steps: Vec<StepStats>,
    /// (step, loss + penalty) of a step whose loss or penalties were not finite.
    pub diverged: Option<(u64, f64)>,
}

impl ReadBack {
    /// Takes in one step's outcome: `Ok(true)` to go on, `Ok(false)` after a divergence.
    fn take(&mut self, outcome: Result<StepStats, EngineError>) -> Result<bool, EngineError> {
        match outcome {
            Ok(stats) => {
                self.steps.push(stats);
                Ok(true)
            }
            Err(EngineError::Diverged { step, loss }) => {
                self.diverged = Some((step, loss));
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

/// A step up to its host read.
enum Dispatched {
    /// Read at once: the guard ran on the host (burn-flex, the host paths) or nothing was
    /// pipelined.
    Read(StepStats),
    /// Queued on the device, its values on their way to the host.
    #[cfg_attr(not(feature = "tch"), allow(dead_code))]
    Queued(Box<Pending>),
}

/// A step's stats completed with what the host read back.
trait ReadStats {
    fn read(self, values: &[f64], grad_norm: f64, positions: usize, seconds: f64) -> Self;
}

impl ReadStats for StepStats {
    /// `values`: the data loss and the penalties' sum (then the squared norm, unused here).
    fn read(self, values: &[f64], grad_norm: f64, positions: usize, seconds: f64) -> Self {
        let seconds = seconds.max(1e-9);
        StepStats {
            loss: values[0],
            penalty: values[1],
            grad_norm,
            tokens_per_sec: positions as f64 / seconds,
            step_ms: seconds * 1e3,
            ..self
        }
    }
}

/// The parameters a step's optimizers stepped (what to take back if the device skipped it).
#[derive(Default)]
pub(super) struct SteppedParams {
    main: Vec<burn::module::ParamId>,
    spectral: Vec<burn::module::ParamId>,
}

/// A step queued on the device and not read back yet.
#[cfg_attr(not(feature = "tch"), allow(dead_code))]
struct Pending {
    /// Its stats, but for the values still on their way.
    stats: StepStats,
    started: Instant,
    positions: usize,
    values: HostCopy,
    /// 1 on the device where this step or one before it still unread went wrong.
    found_inf: DeviceFlag,
    /// The recurrent state the step started from (what to carry again if it is taken back).
    carried_before: Option<RecurrentState>,
    stepped: SteppedParams,
}

pub struct Trainer {
    corpus: Arc<Corpus>,
    /// The training text in the order the run reads it: the corpus's, or its lines shuffled by
    /// `--data-seed`.
    train_stream: Arc<[u32]>,
    model_config: ModelConfig,
    config: TrainConfig,
    device_spec: DeviceSpec,
    device: Device,
    model: LanguageModel,
    optim: ModuleOptimizer,
    state: RunState,
    carried: Option<RecurrentState>,
    windows_per_epoch: u64,
    /// AdamW/SGD state of U, σ, V while spectrum control is on: its own optimizer, so switching
    /// control off and on again starts from fresh moments.
    spectral_optim: Option<ModuleOptimizer>,
    /// AGG's token counter, with the step it is up to date with.
    counter: Option<(TokenCounter, u64)>,
    /// AGG's gates frozen after epoch 1 (static-groups ablation).
    static_gates: Option<Gates>,
    sampler: Option<UnigramSampler>,
    /// An LSTM's layers run on the host (`model/lstm_host.rs`): where the tensors already live in
    /// host memory (burn-flex, LibTorch CPU: `DeviceSpec::host_memory`); CUDA keeps burn's graph.
    host_lstm: bool,
    /// Host paths where the tensors live in host memory: an LSTM's layers (with `host_lstm`),
    /// dropout masks drawn on the host, AdamW's host pass. Off: the paths CUDA takes.
    host_paths: bool,
    /// [`Trainer::step_pipelined`] may pipeline (`set_pipelining`).
    pipelining: bool,
    /// The step queued on the device, not read back yet.
    pending: Option<Box<Pending>>,
    /// A step read back early (by `dispatch`), for `step_pipelined` to report first.
    early: Option<StepStats>,
    /// When the last step was read back: a pipelined step's time is the time between reads.
    last_read: Option<Instant>,
    /// The training split on the device (the paths a GPU takes), uploaded at the first step.
    resident: Option<ResidentSplit>,
}

/// The largest |weight| a checkpoint may hold ([`Trainer::weights_check`]). A language model's
/// weights are O(1)–O(10) (embeddings, layer norms' gains, LSTM gates; a self-normalising bias
/// near −log N); 1e6 is far beyond any of them and far below what a blow-up reaches.
pub const WEIGHT_BOUND: f64 = 1e6;

/// Commands `RunState::commands` keeps, the newest.
pub const COMMAND_LOG: usize = 1_000;

/// Seed of the device RNG for a step (SplitMix64 of seed and step).
pub(super) fn step_seed(seed: u64, step: u64) -> u64 {
    let mut z = seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Trainer {
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

    pub fn device_spec(&self) -> DeviceSpec {
        self.device_spec
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn optimizer(&self) -> &ModuleOptimizer {
        &self.optim
    }

    /// The optimizer of the spectrum-control factors, while control is on.
    pub fn spectral_optimizer(&self) -> Option<&ModuleOptimizer> {
        self.spectral_optim.as_ref()
    }

    /// The objectives in force for the next step.
    pub fn objectives(&self) -> &Objectives {
        &self.state.objectives
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

    /// At the last step, or stopped early ([`Self::stopped_early`]).
    pub fn is_done(&self) -> bool {
        self.state.step >= self.config.steps || self.stopped_early().is_some()
    }

    /// `Some(n)` once `--patience n` validation evaluations in a row have not improved on the
    /// best: the run ends there (early stopping).
    pub fn stopped_early(&self) -> Option<u64> {
        self.config
            .patience
            .filter(|&p| self.state.evals_since_best >= p)
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

    /// One optimizer step on the next training window: the forward pass, the step's objective,
    /// the gradients, one host read of the loss, the update. A loss that is not finite leaves
    /// the model as it was ([`EngineError::Diverged`]). A step still queued by
    /// [`Trainer::step_pipelined`] is read back first and its stats dropped: a pipelined
    /// trainer is driven by `step_pipelined` and `settle`.
    pub fn train_step(&mut self) -> Result<StepStats, EngineError> {
        self.settle()?;
        match self.dispatch(false)? {
            Dispatched::Read(stats) => Ok(stats),
            Dispatched::Queued(pending) => self.read_back(*pending, None),
        }
    }

    /// One optimizer step, pipelined where the run allows it ([`Trainer::pipelines`]): the
    /// step is queued on the device without the host waiting for it, and what comes back is
    /// the step before, read meanwhile (nothing after the first). So the host never waits on
    /// the device within a step, and an accelerator runs step n while the host dispatches step
    /// n + 1. A step whose loss turns out not to be finite is still reported at its own step
    /// (`ReadBack::diverged`): the device left it and every later step undone (the sticky flag
    /// of `aten::step_guard`), and the trainer is put back as it stood before it (step count,
    /// carried state, AdamW's counts), exactly as `train_step` leaves it. Elsewhere this is
    /// `train_step`. Every call dispatches exactly one step, unless a divergence is reported.
    pub fn step_pipelined(&mut self) -> Result<ReadBack, EngineError> {
        let mut back = ReadBack::default();
        let pipelined = self.pipelines();
        if !pipelined && let Some(p) = self.pending.take() {
            // Pipelining went off: the step still queued is read first.
            if !back.take(self.read_back(*p, None))? {
                return Ok(back);
            }
        }
        // The step before stays pending while this one is dispatched: its flag is this one's
        // sticky start (`device_guard`).
        match self.dispatch(pipelined) {
            Ok(Dispatched::Queued(now)) if pipelined => {
                if let Some(b) = self.pending.take()
                    && !back.take(self.read_back(*b, Some(&now)))?
                {
                    return Ok(back); // `now` was left undone by the device with it
                }
                self.pending = Some(now);
            }
            Ok(Dispatched::Queued(now)) => {
                back.take(self.read_back(*now, None))?;
            }
            Ok(Dispatched::Read(stats)) => {
                back.steps.extend(self.early.take());
                back.steps.push(stats);
            }
            Err(e) => {
                back.take(Err(e))?;
            }
        }
        Ok(back)
    }

    /// Reads back the step still queued by [`Trainer::step_pipelined`], if any: its stats, or
    /// [`EngineError::Diverged`] with the trainer put back as it stood before it. Every
    /// checkpoint, evaluation, snapshot, command and pause comes after this, so none of them
    /// sees a step whose loss is not known to be finite.
    pub fn settle(&mut self) -> Result<Option<StepStats>, EngineError> {
        match self.pending.take() {
            None => Ok(None),
            Some(p) => self.read_back(*p, None).map(Some),
        }
    }

    /// Whether [`Trainer::step_pipelined`] pipelines: AdamW as one fused step on a LibTorch
    /// device (CUDA; LibTorch CPU on the device paths), and pipelining not switched off.
    pub fn pipelines(&self) -> bool {
        cfg!(feature = "tch")
            && self.pipelining
            && !self.host_paths
            && self.config.optimizer == OptimizerKind::Adamw
            && matches!(
                self.device_spec,
                DeviceSpec::LibtorchCpu | DeviceSpec::Cuda(_)
            )
    }

    /// Pipelining on (the default) or off ([`Trainer::step_pipelined`]): off, every step is
    /// read back before the next is dispatched (`bench train --step-sync` times both).
    pub fn set_pipelining(&mut self, on: bool) {
        self.pipelining = on;
    }

    /// One step up to the host read: read at once (`Read`) where the step's guard runs on the
    /// host or `pipelined` is off, else queued with its values on their way to the host.
    fn dispatch(&mut self, pipelined: bool) -> Result<Dispatched, EngineError> {
        let start = Instant::now();
        let next = self.state.step + 1;
        // Tests of the failure paths: a backend that panics mid-run (e.g. CUDA out of memory).
        if let Err(e) = conelab_base::fault::check("engine.panic") {
            if e.kind() == std::io::ErrorKind::OutOfMemory {
                // What tch's unwrap of libtorch's CUDA allocator error carries.
                panic!(
                    "called `Result::unwrap()` on an `Err` value: Torch(\"CUDA out of memory. \
                     Tried to allocate 4.06 GiB (injected at step {next}).\\nException raised \
                     from malloc at CUDACachingAllocator.cpp:1335\")"
                );
            }
            panic!("injected backend panic at step {next}");
        }
        // Dropout masks depend only on (seed, step): a resumed run draws the same ones. Where
        // tensors live in host memory (burn-flex, LibTorch CPU) they are drawn on the host
        // (model/dropout.rs), the same masks on both; on CUDA by the device.
        let seed = step_seed(self.config.seed, next);
        self.device.seed(seed);
        crate::model::dropout::seed_host_masks(self.host_paths.then_some(seed));
        let k = (self.state.step % self.windows_per_epoch) as usize;
        let batch = self
            .window(k)
            .ok_or_else(|| EngineError::Config(format!("no training window {k}").into()))?;
        let carried_before = self.carried.clone();
        if k == 0 {
            // A new epoch starts the streams from the beginning: no state to carry.
            self.carried = None;
        }
        let objectives = self.state.objectives.clone();
        let positions = batch.batch * batch.time;
        let frozen = frozen_ranges(self.corpus.groups(), objectives.freeze.at_step(next));
        let gates = self.step_gates(next, &batch.targets, &objectives)?;
        let rare_tokens = gates.as_ref().map(|g| g.rare_count);
        let rare_g1 = gates.as_ref().and_then(Gates::mean_rare_g1);
        let rare_group = self.corpus.groups().range(Group::Rare);
        let rare_in_group = gates.as_ref().map(|g| {
            g.rare
                .get(rare_group)
                .map_or(0, |r| r.iter().filter(|&&x| x).count())
        });
        let (inputs, targets) = self.window_tensors(k, &batch);

        // The model's products in the run's precision, forward and backward (model/precision.rs).
        let autocast = Autocast::enter(self.config.precision);
        let forward = self.forward(inputs)?;
        let mut objective =
            self.objective(&objectives, &batch, &forward, targets, gates.as_ref(), next)?;
        if conelab_base::fault::check("engine.nan").is_err() {
            // Tests of a divergence: this step's loss and gradients not finite, as in a blow-up.
            objective.data_loss = objective.data_loss.mul_scalar(f32::NAN);
            objective.graph = objective.graph.mul_scalar(f32::NAN);
        }
        let penalty_sum = objective
            .penalties
            .into_iter()
            .reduce(|a, b| a + b)
            .unwrap_or_else(|| Tensor::zeros([1], &self.device));
        let Forward {
            state,
            host_window,
            w,
            w_composed,
            spectral_leaf,
            ..
        } = forward;
        let grads = self.gradients(
            objective.graph,
            host_window,
            spectral_leaf.then_some((&w, &w_composed)),
            objective.w_from_head,
            &frozen,
        )?;
        drop(autocast);
        let lr = self.current_lr();
        let stats = StepStats {
            step: next,
            epoch: next as f64 / self.windows_per_epoch as f64,
            loss: f64::NAN,
            penalty: f64::NAN,
            lr,
            grad_norm: f64::NAN,
            tokens_per_sec: 0.0,
            step_ms: 0.0,
            rare_tokens,
            rare_g1,
            rare_in_group,
        };
        let squared_norm = squared_grad_norm(&self.model, &grads);

        // On a LibTorch device the step's guard — finite or not, and the clip's factor — is
        // decided there, and the host reads the values when it gets to them.
        #[cfg(feature = "tch")]
        if !self.host_paths
            && !self.proximal_sigma()
            && let Some(SquaredNorm::Device(sq)) = &squared_norm
            && let Some(guard) =
                self.device_guard(&objective.data_loss, &penalty_sum, sq, pipelined)?
        {
            let state = state.map(detach_state);
            let values =
                HostCopy::start(&guard.values).map_err(EngineError::backend("reading the loss"))?;
            if !pipelined {
                // The step's one host read, before its update.
                let values = values
                    .wait()
                    .map_err(EngineError::backend("reading the loss"))?;
                if let Err(diverged) = Self::check_finite(next, &values) {
                    self.carried = carried_before;
                    return Err(diverged);
                }
                let grad_norm = values[2].sqrt();
                let device_guard = crate::aten::DeviceGuard {
                    found_inf: None,
                    grad_scale: guard.divisor.as_ref(),
                };
                self.update(grads, lr, &frozen, Some(device_guard))?;
                self.carried = state;
                self.state.step = next;
                self.last_read = Some(Instant::now());
                return Ok(Dispatched::Read(stats.read(
                    &values,
                    grad_norm,
                    positions,
                    start.elapsed().as_secs_f64(),
                )));
            }
            // The clip is AdamW's kernel dividing the gradients as it reads them; the flag
            // leaves the update undone where this step or the one before went wrong.
            let device_guard = crate::aten::DeviceGuard {
                found_inf: Some(&guard.found_inf),
                grad_scale: guard.divisor.as_ref(),
            };
            let stepped = self.update(grads, lr, &frozen, Some(device_guard))?;
            self.carried = state;
            self.state.step = next;
            return Ok(Dispatched::Queued(Box::new(Pending {
                stats,
                started: start,
                positions,
                values,
                found_inf: guard.found_inf,
                carried_before,
                stepped,
            })));
        }
        if let Some(p) = self.pending.take() {
            // No guard on the device for this step (never on the models conelab builds: their
            // gradients are all LibTorch's), so the step before is read before this one's
            // update: a divergence there ends here, this step's work dropped with it.
            let earlier = self.read_back(*p, None)?;
            self.early = Some(earlier);
        }
        let _ = (pipelined, &carried_before);

        // One host read per step, queued after the backward pass so an accelerator runs forward
        // and backward without waiting on the host: data loss, the sum of the penalties and the
        // squared gradient norm. A non-finite loss still leaves the model untouched.
        let norm_on_device = match &squared_norm {
            Some(SquaredNorm::Device(t)) => (**t).clone(),
            _ => Tensor::zeros([1], &self.device),
        };
        let values = Tensor::cat(vec![objective.data_loss, penalty_sum, norm_on_device], 0)
            .try_into_vec_as::<f64>()
            .map_err(EngineError::backend("reading the loss"))?;
        if let Err(diverged) = Self::check_finite(next, &values) {
            // Left as it was: the model, the step count and the state the step started from.
            self.carried = carried_before;
            return Err(diverged);
        }
        let grad_norm = match squared_norm {
            Some(SquaredNorm::Host(s)) => s,
            _ => values[2],
        }
        .sqrt();
        let grads = scale_to_norm(&self.model, grads, grad_norm, self.config.clip_norm);
        self.update(grads, lr, &frozen, None)?;
        self.carried = state.map(detach_state);
        self.state.step = next;
        self.last_read = Some(Instant::now());
        Ok(Dispatched::Read(stats.read(
            &values,
            grad_norm,
            positions,
            start.elapsed().as_secs_f64(),
        )))
    }

    /// `Diverged` at `step` where the loss or the penalties (`values[0..2]`) are not finite.
    fn check_finite(step: u64, values: &[f64]) -> Result<(), EngineError> {
        let (loss, penalty) = (values[0], values[1]);
        if loss.is_finite() && penalty.is_finite() {
            Ok(())
        } else {
            Err(EngineError::Diverged {
                step,
                loss: loss + penalty,
            })
        }
    }

    /// Reads a queued step's values (waiting only for that step's work on the device): its
    /// stats, or `Diverged` with the trainer put back as it stood before the step (`later`: a
    /// step queued after it, which the device left undone too).
    fn read_back(
        &mut self,
        pending: Pending,
        later: Option<&Pending>,
    ) -> Result<StepStats, EngineError> {
        let Pending {
            stats,
            started,
            positions,
            values,
            carried_before,
            stepped,
            ..
        } = pending;
        let values = values
            .wait()
            .map_err(EngineError::backend("reading the loss"))?;
        if let Err(diverged) = Self::check_finite(stats.step, &values) {
            // The device wrote none of this step's update nor any later one's; burn's
            // AdamW state counted them all: take them back, the latest first.
            let mut undo = vec![&stepped];
            undo.extend(later.map(|l| &l.stepped));
            for ids in undo.into_iter().rev() {
                self.rewind(ids);
            }
            self.state.step = stats.step - 1;
            self.carried = carried_before;
            self.last_read = None;
            return Err(diverged);
        }
        // The time between two reads is the step's in a pipeline (the device's pace); the first
        // is timed from its dispatch.
        let now = Instant::now();
        let since = match self.last_read {
            Some(t) if t > started => t,
            _ => started,
        };
        self.last_read = Some(now);
        let seconds = now.duration_since(since).as_secs_f64();
        Ok(stats.read(&values, values[2].sqrt(), positions, seconds))
    }
}
