//! One training run, step by step, synchronously. The engine thread drives it; the benchmark and
//! the tests drive it directly.

use std::sync::Arc;
use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};
use burn::prelude::*;
use burn::tensor::Gradients;

use super::fused_adamw::FusedAdamW;
use super::{EngineError, RunState, eval, grad_norm};
use crate::model::DeviceSpecExt;
use crate::model::lstm::detach_state;
use crate::model::output::log_partition;
use crate::model::precision::Autocast;
use crate::model::{HostLstmWindow, LanguageModel, RecurrentState, SpectralEmbedding, constant};
use crate::objective::agg::{
    Gates, RareChoice, TokenCounter, agg_gates, alpha_for_rare_fraction, part_freeze_gates,
    row_gates,
};
use crate::objective::and_loss::{and_loss, squashed_centring};
use crate::objective::freeze::{frozen_ranges, restore_rows, zero_rows};
use crate::objective::head::{HeadOutput, HeadTerms, full_softmax_head};
use crate::objective::self_norm::{
    UnigramSampler, nce_loss, sample_positions, sampled_log_z_penalty,
};
use crate::objective::spectrum::{
    orthogonality_frobenius, orthogonality_penalty, prior_penalty, prior_targets,
    proximal_sigma_step, spectrum_penalty,
};
use crate::objective::{cosreg, laplacian, unlikelihood};
use conelab_base::error::Invalid;
use conelab_core::change::{Change, ObjectivesInForce, RareAlpha};
use conelab_core::events::{
    AppliedCommand, Command, EvalStats, Snapshot, SpectralStats, StepStats,
};
use conelab_core::model::{DeviceSpec, ModelConfig};
use conelab_core::objective::{
    GateParts, LossKind, ObjectiveChange, Objectives, SigmaUpdate, SpectrumC1, Term,
};
use conelab_core::train_config::{OptimizerKind, Precision, Schedule, TrainConfig};
use conelab_data::{Batch, Corpus, Group, PartialWindow, Split, StreamBatcher};

/// One step's forward pass, as the objective and the backward pass need it.
struct Forward {
    /// The last layer's hidden states, a row per position.
    hidden: Tensor<2>,
    /// The recurrent state to carry into the next window (an LSTM's).
    state: Option<RecurrentState>,
    /// The host LSTM's saved activations, for its written-out backward.
    host_window: Option<HostLstmWindow>,
    /// W as the step reads it; a leaf of its own under spectrum control with the host LSTM
    /// (`spectral_leaf`), else the model's W itself (`w_composed`).
    w: Tensor<2>,
    w_composed: Tensor<2>,
    /// Spectrum control is on: W = U·diag(σ)·Vᵀ.
    spectral: bool,
    spectral_leaf: bool,
}

/// One step's objective.
struct StepObjective {
    /// The data term's value, detached (reported).
    data_loss: Tensor<1>,
    /// What is differentiated: the data term's graph and every penalty.
    graph: Tensor<1>,
    /// Each penalty, detached (their sum is reported).
    penalties: Vec<Tensor<1>>,
    /// W's output-side gradient when the head hands it back outside the graph.
    w_from_head: Option<Tensor<2>>,
}

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

/// The training split on the device, laid out as the step's windows read it: row b is stream b
/// (`StreamBatcher`: tokens b·L .. b·L + L, and one more for the last target), so window k's
/// inputs are columns kT .. kT + T and its targets the same shifted by one.
struct ResidentSplit {
    streams: Tensor<2, Int>,
    batch: usize,
    window: usize,
    windows: usize,
}

/// The most the training split may take on the device as [`ResidentSplit`] (8 bytes a token):
/// 128 M tokens (WikiText-103 fits); a larger split is copied window by window.
const RESIDENT_SPLIT_BYTES: usize = 1 << 30;

impl ResidentSplit {
    fn upload(
        tokens: &[u32],
        batch: usize,
        window: usize,
        windows: u64,
        device: &Device,
    ) -> Option<Self> {
        let sb = StreamBatcher::new(tokens, batch, window, PartialWindow::Drop).ok()?;
        let len = sb.stream_len();
        if batch.checked_mul(len + 1)?.checked_mul(8)? > RESIDENT_SPLIT_BYTES {
            return None;
        }
        let mut rows = Vec::with_capacity(batch * (len + 1));
        for b in 0..batch {
            rows.extend_from_slice(tokens.get(b * len..b * len + len + 1)?);
        }
        Some(Self {
            streams: Tensor::<2, Int>::from_data(TensorData::new(rows, [batch, len + 1]), device),
            batch,
            window,
            windows: windows as usize,
        })
    }

    /// Window `k`'s inputs [B, T] and targets [B·T], where the split was laid out for B and T.
    fn window(
        &self,
        batch: usize,
        window: usize,
        k: usize,
    ) -> Option<(Tensor<2, Int>, Tensor<1, Int>)> {
        if self.batch != batch || self.window != window || k >= self.windows {
            return None;
        }
        let (b, t, start) = (batch, window, k * window);
        let inputs = self.streams.clone().slice([0..b, start..start + t]);
        let targets = self
            .streams
            .clone()
            .slice([0..b, start + 1..start + t + 1])
            .reshape([b * t]);
        Some((inputs, targets))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeviceSpecExt;
    use conelab_core::model::DeviceSpec;

    /// Every window sliced from the split on the device is `StreamBatcher`'s window, for
    /// several B and T (a leftover after the last stream, a partial last window dropped).
    #[test]
    fn the_resident_split_gives_the_batchers_windows() {
        let tokens: Vec<u32> = (0..1_003).map(|i| (i * 7 + 3) % 101).collect();
        let device = DeviceSpec::Cpu.training_device().expect("device");
        for (b, t) in [(1, 7), (3, 5), (4, 10), (16, 35)] {
            let sb = StreamBatcher::new(&tokens, b, t, PartialWindow::Drop).expect("batcher");
            let windows = sb.num_windows();
            let r =
                ResidentSplit::upload(&tokens, b, t, windows as u64, &device).expect("uploaded");
            for k in 0..windows {
                let want = sb.window(k).expect("window");
                let (inputs, targets) = r.window(b, t, k).expect("resident window");
                assert_eq!(inputs.dims(), [b, t]);
                let ints = |v: Vec<i64>| v.into_iter().map(|x| x as u32).collect::<Vec<_>>();
                let inputs = inputs.try_into_vec_as::<i64>().expect("inputs");
                let targets = targets.try_into_vec_as::<i64>().expect("targets");
                assert_eq!(ints(inputs), want.inputs, "B {b}, T {t}, window {k}");
                assert_eq!(ints(targets), want.targets, "B {b}, T {t}, window {k}");
            }
            assert!(r.window(b, t, windows).is_none());
            assert!(r.window(b + 1, t, 0).is_none());
        }
    }
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
struct SteppedParams {
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

/// Salts of the step seed for the objectives' own random draws.
const NCE_NOISE_SALT: u64 = 0x4E43_455F_4E4F_4953;
const NCE_POSITIONS_SALT: u64 = 0x4E43_455F_504F_5353;

/// The bytes a run needs at least to train (a lower bound: activations come on top): the
/// parameters with their gradients and AdamW's two moments, the logits and their gradient, and
/// AGG's memory of K updates' targets (4 bytes a token; K = an epoch's updates by default).
pub fn training_bytes_needed(
    model_config: &ModelConfig,
    config: &TrainConfig,
    vocab: usize,
    windows_per_epoch: u64,
) -> f64 {
    let mut need = model_config.training_bytes_at_least(vocab, config.batch);
    let agg = &config.objectives.agg;
    if agg.enabled {
        let updates = agg.memory.unwrap_or(windows_per_epoch) as f64;
        need += 4.0 * updates * (config.batch * model_config.window()) as f64;
    }
    need
}

/// The one-line refusal of a run whose [`training_bytes_needed`] exceed `available` bytes, or
/// none; `has` names the memory: "the machine has" (available host memory) or "cuda:0 has"
/// (free device memory).
pub fn memory_refusal(
    model_config: &ModelConfig,
    config: &TrainConfig,
    vocab: usize,
    windows_per_epoch: u64,
    available: u64,
    has: &str,
) -> Option<String> {
    let need = training_bytes_needed(model_config, config, vocab, windows_per_epoch);
    let gib = |b: f64| b / f64::from(1u32 << 30);
    (need > available as f64).then(|| {
        format!(
            "this model needs at least {:.1} GiB to train at batch {} ({:.3e} parameters with their gradients and AdamW's moments, and the logits), and {has} {:.1} GiB available",
            gib(need),
            config.batch,
            model_config.parameter_count(vocab),
            gib(available as f64)
        )
    })
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
        let train_stream: Arc<[u32]> = match config.data_seed {
            Some(seed) => conelab_data::order::shuffle_lines(
                corpus.split(Split::Train),
                corpus.vocab().eos(),
                seed,
            )
            .into(),
            None => corpus.split(Split::Train).into(),
        };
        let train = &train_stream[..];
        let windows_per_epoch = StreamBatcher::new(train, config.batch, window, PartialWindow::Drop)
            .map_err(EngineError::invalid("the train split"))?
            .num_windows() as u64;
        if windows_per_epoch == 0 {
            return Err(EngineError::Config(
                format!(
                    "the train split has {} tokens: too few for batch {} × window {}",
                    train.len(),
                    config.batch,
                    window
                )
                .into(),
            ));
        }
        for split in [Split::Valid, Split::Test] {
            StreamBatcher::new(
                corpus.split(split),
                config.eval_batch,
                window,
                PartialWindow::Keep,
            )
            .map_err(EngineError::invalid(format!(
                "{split} split at eval_batch {} (a config-file setting)",
                config.eval_batch
            )))?;
        }
        let objectives = config.objectives.clone();
        objectives
            .validate(group_sizes(&corpus))
            .map_err(EngineError::Config)?;
        // In host memory, a model that cannot fit is refused before anything is allocated (a
        // CUDA device's own memory is read by the launcher, through the driver, with the same
        // estimate: `memory_refusal`).
        if matches!(device_spec, DeviceSpec::Cpu | DeviceSpec::LibtorchCpu)
            && let Some(available) = conelab_base::available_memory()
            && let Some(why) = memory_refusal(
                &model_config,
                &config,
                corpus.vocab().len(),
                windows_per_epoch,
                available,
                "the machine has",
            )
        {
            return Err(EngineError::Config(why.into()));
        }
        let mut model_config = model_config;
        let self_normalising = objectives.loss != LossKind::Mle || objectives.dev.enabled;
        if self_normalising {
            // The papers' self-normalising models have an output bias, initialised to −log N.
            model_config.set_output_bias(true);
        }
        if config.precision == Precision::Bf16 {
            crate::model::check_bf16(device_spec).map_err(|why| {
                EngineError::Config(format!("--precision bf16 on `{device_spec}`: {why}").into())
            })?;
        }
        let device = device_spec.training_device()?;
        device.seed(config.seed);
        let vocab = corpus.vocab().len();
        let mut model = LanguageModel::new(&model_config, vocab, &device);
        if self_normalising {
            model = model.replace_output_bias(Tensor::full([vocab], -(vocab as f64).ln(), &device));
        }
        let optim = build_optimizer(&config);
        let spectrum_on = objectives.spectrum.enabled;
        let mut trainer = Self {
            corpus,
            train_stream,
            model_config,
            config,
            device_spec,
            device,
            model,
            optim,
            state: RunState {
                objectives,
                ..RunState::default()
            },
            carried: None,
            windows_per_epoch,
            spectral_optim: None,
            counter: None,
            static_gates: None,
            sampler: None,
            host_lstm: device_spec.host_memory(),
            host_paths: device_spec.host_memory(),
            pipelining: true,
            pending: None,
            early: None,
            last_read: None,
            resident: None,
        };
        // `agg=rare:F`: α from this corpus's counts and this run's tokens per update.
        let mut resolved = trainer.state.objectives.clone();
        if trainer.resolve_rare_fraction(&mut resolved).is_some() {
            trainer.state.objectives = resolved;
        }
        if trainer.config.precision == Precision::Bf16 {
            // bf16 takes the paths CUDA takes on LibTorch CPU too (the fused LSTM and attention
            // nodes in bf16, AdamW as one fused step): the host paths compute in fp32.
            trainer.use_device_paths();
        }
        if spectrum_on {
            let c1 = trainer.state.objectives.spectrum.c1;
            trainer
                .switch_spectrum(true, c1)
                .map_err(EngineError::Config)?;
        }
        Ok(trainer)
    }

    /// Replaces model, optimizer state and counters with those of a checkpoint.
    pub(crate) fn restore(
        &mut self,
        model: LanguageModel,
        optim: ModuleOptimizer,
        spectral_optim: Option<ModuleOptimizer>,
        state: RunState,
        carried: Option<RecurrentState>,
    ) {
        self.model = model;
        self.optim = optim;
        self.spectral_optim = match (&state.spectrum_c1, spectral_optim) {
            (Some(_), Some(o)) => Some(o),
            (Some(_), None) => Some(spectral_optimizer(&self.config, self.host_paths)),
            (None, _) => None,
        };
        if self.model.output_bias().is_some() {
            self.model_config.set_output_bias(true);
        }
        self.state = state;
        self.state.upgrade();
        self.carried = carried;
        self.counter = None;
        self.static_gates = None;
        if !self.host_paths {
            // A checkpoint's optimizers load with the host pass; keep the paths in force.
            self.use_device_paths();
        }
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
    /// The settings that may change at a step boundary (cadences, checkpoints kept, total steps):
    /// a resumed run given new flags.
    pub fn config_mut(&mut self) -> &mut TrainConfig {
        &mut self.config
    }

    pub fn set_total_steps(&mut self, steps: u64) {
        self.config.steps = steps.max(1);
    }

    /// Whether an LSTM's layers run on the host (the default on burn-flex and LibTorch CPU) or in
    /// burn's graph, in training and evaluation: the same numbers either way (tests/engine.rs
    /// compares them); the graph stays selectable for that comparison and for `bench train
    /// --graph-lstm`.
    pub fn set_host_lstm(&mut self, on: bool) {
        self.host_lstm = on && self.host_paths;
    }

    /// From the next step on, the paths a CUDA device takes, where the tensors live in host
    /// memory too: an LSTM in burn's graph (one `aten::lstm` node a layer on LibTorch), burn's
    /// dropout (other masks than the host's), AdamW as one multi-tensor step on LibTorch (burn's
    /// tensor ops on burn-flex). The same
    /// computation, dispatched as the ATen operators a GPU would
    /// launch (`conelab bench ops` counts them). The optimizers keep their state (a resumed
    /// run continues on the device paths).
    pub fn use_device_paths(&mut self) {
        self.host_paths = false;
        self.host_lstm = false;
        self.optim = optimizer(&self.config, false).load_record(self.optim.to_record());
        if let Some(spectral) = &self.spectral_optim {
            self.spectral_optim =
                Some(spectral_optimizer(&self.config, false).load_record(spectral.to_record()));
        }
    }

    /// Whether the next step runs an LSTM's layers on the host (after a first step: the host
    /// dropout masks are seeded by the step).
    pub fn lstm_on_host(&self) -> bool {
        self.host_lstm && self.model.runs_lstm_on_host(&self.device)
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

    /// Whether the weights may be checkpointed: every parameter finite and none beyond
    /// [`WEIGHT_BOUND`] in absolute value. A blow-up whose own step loss is still finite (an lr
    /// of 1e30 takes one step to weights of 1e30 before the next loss is NaN) must not become
    /// the newest checkpoint, which every resume would then start from. On the device, one
    /// reduction per parameter and one read. `Ok`: the largest |w|; `Err`: what is wrong.
    pub fn weights_check(&self) -> Result<f64, String> {
        struct Extremes {
            parts: Vec<Tensor<1>>,
        }
        impl ModuleVisitor for Extremes {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let w = param.val().inner();
                // The sum is NaN where any weight is (a maximum may skip NaN on some backends).
                self.parts.push(w.clone().abs().max().reshape([1]));
                self.parts.push(w.sum().reshape([1]));
            }
        }
        let mut extremes = Extremes { parts: Vec::new() };
        self.model.visit(&mut extremes);
        if extremes.parts.is_empty() {
            return Ok(0.0);
        }
        let values = Tensor::cat(extremes.parts, 0)
            .try_into_vec_as::<f64>()
            .map_err(|e| format!("the weights could not be read: {e:?}"))?;
        if values.iter().any(|v| !v.is_finite()) {
            return Err("the weights are not finite".into());
        }
        let max_abs = values.iter().step_by(2).fold(0f64, |m, v| m.max(*v));
        if max_abs > WEIGHT_BOUND {
            return Err(format!(
                "a weight reaches {max_abs:.3e}, beyond the bound {WEIGHT_BOUND:.0e}"
            ));
        }
        Ok(max_abs)
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

    /// The step's guard on the device (`aten::step_guard`); `None` where the values are not
    /// LibTorch tensors (the host then reads them).
    #[cfg(feature = "tch")]
    #[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
    fn device_guard(
        &self,
        loss: &Tensor<1>,
        penalty: &Tensor<1>,
        squared_norm: &Tensor<1>,
        pipelined: bool,
    ) -> Result<Option<crate::aten::StepGuard>, EngineError> {
        use burn::backend::LibTorch;
        let tch = |t: &Tensor<1>| {
            // The loss and penalties are autodiff tensors (detached); the norm is not.
            let t = if t.is_autodiff() {
                t.clone().inner()
            } else {
                t.clone()
            };
            t.try_into_primitive::<LibTorch>().ok().map(|t| t.tensor)
        };
        let (Some(loss), Some(penalty), Some(sq)) = (tch(loss), tch(penalty), tch(squared_norm))
        else {
            return Ok(None);
        };
        let sticky = match (&self.pending, pipelined) {
            (Some(p), true) => Some(&p.found_inf),
            _ => None,
        };
        crate::aten::step_guard(&loss, &penalty, &sq, sticky, self.config.clip_norm)
            .map(Some)
            .map_err(EngineError::backend("the step's guard"))
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

    /// Takes back AdamW's count of a step the device skipped, for the parameters it stepped.
    fn rewind(&mut self, stepped: &SteppedParams) {
        self.model = super::fused_adamw::rewind(&mut self.optim, self.model.clone(), &stepped.main);
        if let (Some(optim), false) = (self.spectral_optim.as_mut(), stepped.spectral.is_empty()) {
            let (model, factors) = self.model.clone().take_spectral();
            let factors = factors.map(|f| super::fused_adamw::rewind(optim, f, &stepped.spectral));
            self.model = model.set_spectral_raw(factors);
        }
    }

    /// Window `k`'s inputs [B, T] and targets [B·T] on the device: slices of the training split
    /// kept there ([`ResidentSplit`]) on the paths a GPU takes, so that no step waits on a copy
    /// from host memory (a blocking one, from pageable memory, would wait for the step before
    /// to finish); elsewhere copied from `batch`.
    fn window_tensors(&mut self, k: usize, batch: &Batch) -> (Tensor<2, Int>, Tensor<1, Int>) {
        let (b, t) = (batch.batch, batch.time);
        if !self.host_paths && self.resident.is_none() {
            self.resident = ResidentSplit::upload(
                &self.train_stream,
                b,
                t,
                self.windows_per_epoch,
                &self.device,
            );
        }
        if let Some(window) = self.resident.as_ref().and_then(|r| r.window(b, t, k)) {
            return window;
        }
        (
            Tensor::<2, Int>::from_data(
                TensorData::new(batch.inputs.clone(), [b, t]),
                &self.device,
            ),
            Tensor::<1, Int>::from_data(
                TensorData::new(batch.targets.clone(), [b * t]),
                &self.device,
            ),
        )
    }

    /// The forward pass over `inputs` up to the last hidden states, with W as the step reads it.
    fn forward(&mut self, inputs: Tensor<2, Int>) -> Result<Forward, EngineError> {
        let w_composed = self.model.embedding();
        let spectral = self.model.spectral().is_some();
        // Under spectrum control with the host LSTM, the step sees W as a leaf and the gradient
        // it collects is taken through W = U·diag(σ)·Vᵀ once at the end: the host path's two
        // backward passes would otherwise each differentiate the composition (an N·d² product).
        let spectral_leaf =
            spectral && self.host_lstm && self.model.runs_lstm_on_host(&self.device);
        let w = if spectral_leaf {
            w_composed.clone().detach().require_grad()
        } else {
            w_composed.clone()
        };
        // In host memory (burn-flex, LibTorch CPU) an LSTM's layers run on the host with their
        // backward written out (model/lstm_host.rs); on CUDA burn's graph does it all.
        let mut carried = self.carried.take();
        let host_window = if self.host_lstm {
            self.model
                .hidden_on_host(inputs.clone(), &mut carried, spectral.then(|| w.clone()))
                .map_err(EngineError::backend("the LSTM on the host"))?
        } else {
            None
        };
        let (hidden, state, host_window) = match host_window {
            Some((hidden, state, window)) => (hidden, Some(state), Some(window)),
            None => {
                let (hidden, state) =
                    self.model
                        .hidden_with(inputs, carried, spectral.then(|| w.clone()));
                (hidden, state, None)
            }
        };
        Ok(Forward {
            hidden,
            state,
            host_window,
            w,
            w_composed,
            spectral,
            spectral_leaf,
        })
    }

    /// The step's objective: the data term of the run's loss (MLE with the head's terms, NCE,
    /// NCE-R, AND) and the regularisers on W and the hidden states.
    fn objective(
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
    fn regularised(
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

    /// The step's gradients: backward through `graph` (and the host LSTM's layers), W's
    /// gradient from the head added where it came outside the graph, frozen rows zeroed.
    fn gradients(
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
    fn update(
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
        let batch = super::fused_adamw::AdamWBatch::open();
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

    /// The step's gradients when its LSTM layers ran on the host: those of the loss (`raw`,
    /// differentiated with the last layer's output as a leaf), the layers' own from the host
    /// backward pass, and what reaches W below them through the rebuilt input lookup. Under
    /// spectrum control `spectral` is (W as the step's leaf, W composed from U, σ, V): the
    /// gradient collected for W goes through the composition once.
    fn host_lstm_gradients(
        &self,
        window: HostLstmWindow,
        raw: Gradients,
        spectral: Option<(&Tensor<2>, &Tensor<2>)>,
    ) -> Result<GradientsParams, EngineError> {
        let from_loss = spectral.and_then(|(w, _)| w.grad(&raw));
        let lookup_leaf = spectral.map(|(_, composed)| composed.clone().detach().require_grad());
        let host = self
            .model
            .host_lstm_backward(window, &raw, lookup_leaf.clone())
            .map_err(EngineError::backend("the LSTM's backward on the host"))?;
        let mut grads = GradientsParams::from_grads(raw, &self.model);
        // `None`: the loss never read the hidden states, and the layers get no gradient at all
        // (as in burn's graph: no zeros for AdamW to count and decay).
        let below = host.as_ref().map(|h| h.surrogate.backward());
        let into_w = match (spectral, lookup_leaf) {
            (Some((_, composed)), Some(leaf)) => {
                let d_w = match (from_loss, below.as_ref().and_then(|b| leaf.grad(b))) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                d_w.map(|d_w| (composed.clone() * d_w).sum().backward())
            }
            _ => below,
        };
        if let Some(g) = into_w {
            add_gradients(
                &self.model,
                &mut grads,
                GradientsParams::from_grads(g, &self.model),
            );
        }
        if let Some(host) = host {
            for (id, g) in host.weights {
                grads.register(id, g);
            }
            for (id, g) in host.biases {
                grads.register(id, g);
            }
        }
        Ok(grads)
    }

    /// Training window `k` of the epoch.
    fn window(&self, k: usize) -> Option<Batch> {
        StreamBatcher::new(
            &self.train_stream,
            self.config.batch,
            self.model_config.window(),
            PartialWindow::Drop,
        )
        .ok()
        .and_then(|b| b.window(k))
    }

    /// The full-softmax terms (NLL, DEV, unlikelihood) with the step's gates
    /// (`objective/head.rs`); with `w_outside_graph` W's output-side gradient comes back beside
    /// the graph instead of in it.
    #[allow(clippy::too_many_arguments)]
    fn full_softmax_terms(
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
    fn step_gates(
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
    fn replay_counter(&self, step: u64, memory: usize) -> Result<TokenCounter, EngineError> {
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
        let mut log_probs = Vec::new();
        let stats = self.evaluate_into(split, &mut |_, _| {}, Some(&mut log_probs))?;
        Ok((stats, log_probs))
    }

    fn evaluate_into(
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

    /// Spectrum control is on with the proximal σ step: σ is stepped outside the fused AdamW, so
    /// the step takes the host-read path (its loss read before the update) instead of the
    /// device's guard, which only AdamW's kernel reads.
    fn proximal_sigma(&self) -> bool {
        self.state.spectrum_c1.is_some()
            && self.state.objectives.spectrum.sigma == SigmaUpdate::Proximal
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

    /// A copy of W on the host.
    pub fn snapshot(&self) -> Result<Snapshot, EngineError> {
        let w = self.model.embedding().inner();
        let [n, d] = w.dims();
        let weights = w
            .try_into_vec_as::<f32>()
            .map_err(EngineError::backend("reading W"))?;
        Ok(Snapshot {
            step: self.state.step,
            n,
            d,
            weights,
            spectral: self.spectral_stats()?,
        })
    }

    /// Spectrum control's factors for a snapshot: σ against its targets, and how orthonormal U
    /// and V still are (`None` without control).
    fn spectral_stats(&self) -> Result<Option<SpectralStats>, EngineError> {
        let (Some(s), Some(c1)) = (self.model.spectral(), self.state.spectrum_c1) else {
            return Ok(None);
        };
        let read = |t: Tensor<1>, what: &'static str| {
            t.try_into_vec_as::<f64>()
                .map_err(EngineError::backend(what))
        };
        let mut sigma = read(s.sigma.val().detach(), "reading σ")?;
        sigma.sort_by(|a, b| b.total_cmp(a));
        let config = &self.state.objectives.spectrum;
        let targets = prior_targets(config, c1, sigma.len())
            .into_iter()
            .map(f64::from)
            .collect();
        let orth = |m: Tensor<2>, what| {
            read(orthogonality_frobenius(m.detach()).sqrt(), what).map(|v| v[0])
        };
        Ok(Some(SpectralStats {
            update: config.sigma.name().to_owned(),
            u_orth: orth(s.u.val(), "reading UᵀU")?,
            v_orth: orth(s.v.val(), "reading VᵀV")?,
            sigma,
            targets,
            sigma_vs_w: f64::NAN,
        }))
    }

    /// Applies a command between two steps. Returns the record, or why it was refused.
    pub fn apply(&mut self, command: &Command) -> Result<AppliedCommand, Invalid> {
        let step = self.state.step + 1;
        let record = |change: Change| AppliedCommand {
            step,
            command: command.clone(),
            change,
            ticket: None,
            coalesced: false,
        };
        let applied = match command {
            Command::SetLr { lr } => {
                // The same range as `--lr` and the config file.
                conelab_core::train_config::check_lr(*lr)?;
                let before = self.current_lr();
                // The schedule stops here (said, so nobody waits for a decay that will not
                // come): the rate stays as set until the next change, a resume included.
                let scheduled = self.state.lr_override.is_none()
                    && !(self.config.schedule == Schedule::Constant && step > self.config.warmup);
                self.state.lr_override = Some(*lr);
                record(Change::Lr {
                    before,
                    after: *lr,
                    schedule_off_from: scheduled.then_some(step),
                })
            }
            Command::Pause => record(Change::Paused),
            Command::Resume => record(Change::Resumed),
            Command::Stop { save } => record(Change::Stopping { save: *save }),
            Command::SaveCheckpoint => record(Change::Checkpoint),
            Command::Objective { change } => {
                let before = self.objectives_in_force();
                self.change_objectives(change)?;
                let mut applied = record(Change::Objectives {
                    before: Box::new(before),
                    after: Box::new(self.objectives_in_force()),
                });
                // α chosen from a rare fraction is the run's: the viewers, which fold the
                // acknowledged change into their copy, get the objectives as the run has them.
                if self.state.objectives.agg.rare_fraction.is_some() {
                    applied.command = Command::Objective {
                        change: ObjectiveChange::Set {
                            objectives: Box::new(self.state.objectives.clone()),
                        },
                    };
                }
                applied
            }
        };
        self.state.commands.push(applied.clone());
        // A bounded log (every command is in the store's events too): a flood of commands
        // cannot grow state.json, which every checkpoint carries.
        if self.state.commands.len() > COMMAND_LOG {
            let extra = self.state.commands.len() - COMMAND_LOG;
            self.state.commands.drain(..extra);
        }
        Ok(applied)
    }
}

/// Commands `RunState::commands` keeps, the newest.
pub const COMMAND_LOG: usize = 1_000;

/// Sizes of the frequency groups (frequent, medium, rare).
fn group_sizes(corpus: &Corpus) -> [usize; 3] {
    Group::ALL.map(|g| corpus.groups().size(g))
}

impl Trainer {
    /// The objectives as a change records them: under spectrum control with the prior's c1
    /// (chosen when control is switched on), under a rare fraction with the α it chose.
    fn objectives_in_force(&self) -> ObjectivesInForce {
        let o = &self.state.objectives;
        let rare_alpha = if o.agg.enabled {
            self.resolve_rare_fraction(&mut o.clone())
                .map(|c| RareAlpha {
                    alpha: c.alpha,
                    expected: c.expected,
                    target: c.target,
                    vocab: self.corpus.vocab().len(),
                })
        } else {
            None
        };
        ObjectivesInForce {
            objectives: o.clone(),
            spectrum_c1: self.state.spectrum_c1,
            rare_alpha,
        }
    }

    /// `agg=rare:F` (issue #38): sets α to the value whose steady-state rare set is the nearest
    /// achievable to F·N tokens, from the training counts and the tokens per update.
    fn resolve_rare_fraction(&self, o: &mut Objectives) -> Option<RareChoice> {
        let f = o.agg.rare_fraction?;
        let choice = alpha_for_rare_fraction(
            self.corpus.vocab().counts(),
            self.corpus.split(Split::Train).len() as u64,
            (self.config.batch * self.model_config.window()) as u64,
            f,
        );
        o.agg.alpha = choice.alpha;
        Some(choice)
    }

    /// Replaces the objectives wholesale between two steps (benchmarks, tests), with the same
    /// side effects and checks as a change by command.
    pub fn set_objectives(&mut self, mut objectives: Objectives) -> Result<(), Invalid> {
        self.resolve_rare_fraction(&mut objectives);
        objectives.validate(group_sizes(&self.corpus))?;
        self.self_normalising_bias(&objectives)?;
        let spectrum_on = objectives.spectrum.enabled;
        if spectrum_on != self.state.spectrum_c1.is_some() {
            self.switch_spectrum(spectrum_on, objectives.spectrum.c1)?;
        }
        self.keep_fixed_c1(&objectives);
        self.state.objectives = objectives;
        self.counter = None;
        self.static_gates = None;
        Ok(())
    }

    /// Applies an objective change between two steps, with its side effects (spectrum control
    /// factorises or collapses W). All or nothing: when a side effect fails, the objectives stay
    /// as they were and the change is refused.
    fn change_objectives(&mut self, change: &ObjectiveChange) -> Result<(), Invalid> {
        let sizes = group_sizes(&self.corpus);
        let mut next = self.state.objectives.clone();
        next.apply(change, sizes)?;
        self.resolve_rare_fraction(&mut next);
        // Each side effect changes nothing when it fails; the bias comes first because it cannot
        // be undone, and it leaves the model's outputs as they were.
        self.self_normalising_bias(&next)?;
        let was_on = self.state.spectrum_c1.is_some();
        let spectrum_on = next.spectrum.enabled;
        if spectrum_on != was_on {
            self.switch_spectrum(spectrum_on, next.spectrum.c1)?;
        }
        self.keep_fixed_c1(&next);
        self.state.objectives = next;
        if matches!(
            change,
            ObjectiveChange::Enable {
                term: Term::Agg,
                ..
            } | ObjectiveChange::Set { .. }
        ) {
            self.counter = None;
            self.static_gates = None;
        }
        Ok(())
    }

    /// A configured c1 takes effect at once while control stays on (an `auto` c1 stays the σ_1
    /// chosen at switch-on).
    fn keep_fixed_c1(&mut self, next: &Objectives) {
        if let (Some(_), SpectrumC1::Fixed(c1)) = (self.state.spectrum_c1, next.spectrum.c1) {
            self.state.spectrum_c1 = Some(c1);
        }
    }

    /// Self-normalisation (DEV, NCE, NCE-R, AND) switched on in a model without an output bias:
    /// add one equal to −μ_z, the current mean log Z over the next training window (≈ −log N for
    /// a fresh model). A uniform shift of the logits leaves every probability, and so the NLL, as
    /// it was, while log Z starts near 0 instead of having to be learnt down from log N. Under
    /// AND's squash the bias sits inside 10·tanh(·/5), where −μ_z does not centre log Z: the
    /// bias is the b with mean log Σ exp(squash(s + b)) = 0 instead (`and::squashed_centring`).
    fn self_normalising_bias(&mut self, next: &Objectives) -> Result<(), Invalid> {
        let self_normalising = next.loss != LossKind::Mle || next.dev.enabled;
        if !self_normalising || self.model.output_bias().is_some() {
            return Ok(());
        }
        let refused = "self-normalisation could not centre log Z";
        let logits = self.window_logits().map_err(Invalid::because(refused))?;
        let shift = if next.squashed_scores() {
            squashed_centring(logits).ok_or("the scores are not finite numbers")?
        } else {
            -mean_of(log_partition(logits)).map_err(Invalid::because(refused))?
        };
        let vocab = self.corpus.vocab().len();
        let bias = Tensor::<1>::full([vocab], shift, &self.device);
        self.model = self.model.clone().add_output_bias(bias);
        self.model_config.set_output_bias(true);
        self.state.output_bias_added = true;
        Ok(())
    }

    /// The positions of step `next` whose exact log Z NCE-R's and AND's penalty computes: ⌈γ·P⌉
    /// of `positions`, deterministic in (seed, step).
    fn sampled_positions(&self, positions: usize, fraction: f64, next: u64) -> Tensor<1, Int> {
        let sampled = sample_positions(
            positions,
            fraction,
            step_seed(self.config.seed ^ NCE_POSITIONS_SALT, next),
        );
        let m = sampled.len();
        Tensor::from_data(TensorData::new(sampled, [m]), &self.device)
    }

    /// The model's scores (inference mode) over the next training window, `[positions, N]`.
    fn window_logits(&self) -> Result<Tensor<2>, EngineError> {
        let k = (self.state.step % self.windows_per_epoch) as usize;
        let batch = self
            .window(k)
            .ok_or_else(|| EngineError::Config(format!("no training window {k}").into()))?;
        let device = self.device.clone().inner();
        let model = self.model.valid();
        let inputs = Tensor::<2, Int>::from_data(
            TensorData::new(batch.inputs, [batch.batch, batch.time]),
            &device,
        );
        let (hidden, _) = model.hidden(inputs, None);
        Ok(model.logits(hidden))
    }

    /// Spectrum control on: W = U·diag(σ)·Vᵀ from the SVD of the current W (the model's outputs do
    /// not change), c1 = σ_1 (`auto`) or the configured number. Off: W = U·diag(σ)·Vᵀ written back
    /// into the plain embedding.
    fn switch_spectrum(&mut self, on: bool, c1_setting: SpectrumC1) -> Result<(), Invalid> {
        let refused = "spectrum control could not factorise W";
        conelab_base::fault::check("spectrum.switch").map_err(Invalid::because(refused))?;
        if on {
            let snapshot = self.snapshot().map_err(Invalid::because(refused))?;
            let factors = SpectralEmbedding::from_matrix(
                &snapshot.weights,
                snapshot.n,
                snapshot.d,
                &self.device,
            )
            .map_err(Invalid::because(refused))?;
            let sigma = factors
                .sigma
                .val()
                .try_into_vec_as::<f64>()
                .map_err(Invalid::because("spectrum control could not read σ"))?;
            let c1 = match c1_setting {
                SpectrumC1::Auto => sigma.first().copied().unwrap_or(0.0),
                SpectrumC1::Fixed(c1) => c1,
            };
            self.model = self.model.clone().set_spectral(Some(factors));
            self.state.spectrum_c1 = Some(c1);
        } else {
            self.model = self.model.clone().set_spectral(None);
            self.state.spectrum_c1 = None;
        }
        // Fresh moments for fresh factors.
        self.spectral_optim = None;
        Ok(())
    }
}

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
fn optimizer(config: &TrainConfig, host_pass: bool) -> ModuleOptimizer {
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

/// A flag on the device that a pipelined step's update reads (`aten::StepGuard::found_inf`).
#[cfg(feature = "tch")]
type DeviceFlag = tch::Tensor;
#[cfg(not(feature = "tch"))]
type DeviceFlag = std::convert::Infallible;

#[cfg(feature = "tch")]
use crate::aten::DeviceGuard;
/// Without LibTorch there is no guard on a device.
#[cfg(not(feature = "tch"))]
#[derive(Clone, Copy)]
enum DeviceGuard<'a> {
    #[allow(dead_code)]
    Never(std::convert::Infallible, std::marker::PhantomData<&'a ()>),
}

#[cfg(feature = "tch")]
use crate::aten::HostCopy;
/// Without LibTorch no step is ever queued.
#[cfg(not(feature = "tch"))]
enum HostCopy {}
#[cfg(not(feature = "tch"))]
impl HostCopy {
    fn wait(self) -> Result<Vec<f64>, std::convert::Infallible> {
        match self {}
    }
}

/// The parameters of `model` that have a gradient in `grads`.
fn ids_with_gradients(
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
fn add_gradients(model: &LanguageModel, into: &mut GradientsParams, mut from: GradientsParams) {
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
enum SquaredNorm {
    /// Summed on the host from burn-flex's buffers (`grad_norm.rs`).
    Host(f64),
    /// A one-element tensor left on the device (no host read); boxed, as a tensor handle is
    /// large beside an f64.
    Device(Box<Tensor<1>>),
}

/// The squared global L2 norm of the gradients; `None` when no parameter has a gradient.
fn squared_grad_norm(model: &LanguageModel, grads: &GradientsParams) -> Option<SquaredNorm> {
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
    if let Some(norm) = libtorch_grads::squared_norm(model, grads) {
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
fn scale_to_norm(
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
        let grads = match libtorch_grads::scale(model, grads, factor) {
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

/// The clip's norm and scaling over LibTorch's gradients as foreach operators (`crate::aten`):
/// a handful of ATen operators per step instead of two or three per parameter.
#[cfg(feature = "tch")]
#[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
mod libtorch_grads {
    use burn::backend::{LibTorch, libtorch::TchTensor};
    use burn::module::{ModuleVisitor, Param};
    use burn::optim::GradientsParams;
    use burn::prelude::*;

    use crate::model::LanguageModel;

    /// Σ g² over every gradient, a one-element tensor on their device; `None` when there is none
    /// or one is not a LibTorch tensor, or libtorch refused (the caller's per-tensor ops then say
    /// what is wrong, if anything is).
    pub(super) fn squared_norm(
        model: &LanguageModel,
        grads: &GradientsParams,
    ) -> Option<Tensor<1>> {
        struct Collect<'a> {
            grads: &'a GradientsParams,
            all: Option<Vec<TchTensor>>,
        }
        impl ModuleVisitor for Collect<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                if let (Some(all), Some(g)) = (self.all.as_mut(), self.grads.get::<D>(param.id)) {
                    match g.try_into_primitive::<LibTorch>() {
                        Ok(t) => all.push(t),
                        Err(_) => self.all = None,
                    }
                }
            }
        }
        let mut collect = Collect {
            grads,
            all: Some(Vec::new()),
        };
        model.visit(&mut collect);
        let all = collect.all.filter(|a| !a.is_empty())?;
        let refs: Vec<&tch::Tensor> = all.iter().map(|t| &t.tensor).collect();
        let norm = crate::aten::foreach_squared_norm(&refs).ok()?;
        Some(Tensor::from_primitive::<LibTorch>(TchTensor::new(norm)))
    }

    /// Every gradient times `factor`, in place by one `_foreach_mul_` (a gradient another holder
    /// shares is copied first); `Err` hands the gradients back untouched where one is not a
    /// LibTorch tensor or libtorch refused.
    pub(super) fn scale(
        model: &LanguageModel,
        mut grads: GradientsParams,
        factor: f64,
    ) -> Result<GradientsParams, GradientsParams> {
        struct AllLibTorch<'a> {
            grads: &'a GradientsParams,
            yes: bool,
        }
        impl ModuleVisitor for AllLibTorch<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                if let Some(g) = self.grads.get::<D>(param.id) {
                    self.yes &= g.try_into_primitive::<LibTorch>().is_ok();
                }
            }
        }
        let mut check = AllLibTorch {
            grads: &grads,
            yes: true,
        };
        model.visit(&mut check);
        if !check.yes {
            return Err(grads);
        }
        // Each gradient taken out, made its holder's own, and put back; the shallow handles
        // kept here write into the same storage.
        struct Own<'a> {
            grads: &'a mut GradientsParams,
            handles: Vec<tch::Tensor>,
        }
        impl ModuleVisitor for Own<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let Some(g) = self.grads.remove::<D>(param.id) else {
                    return;
                };
                let Ok(t) = g.try_into_primitive::<LibTorch>() else {
                    return; // checked above: never
                };
                let t = if t.can_mut() && t.tensor.is_contiguous() {
                    t
                } else {
                    // A view of another gradient (the gate weights' slices of one product's
                    // gradient) or a strided one: one dense copy of our own (a single copy
                    // kernel), which the foreach scale then writes and AdamW reads as is.
                    let mut fresh =
                        tch::Tensor::empty(t.tensor.size(), (t.tensor.kind(), t.tensor.device()));
                    fresh.copy_(&t.tensor);
                    TchTensor::new(fresh)
                };
                self.handles.push(t.tensor.shallow_clone());
                self.grads
                    .register(param.id, Tensor::<D>::from_primitive::<LibTorch>(t));
            }
        }
        let mut own = Own {
            grads: &mut grads,
            handles: Vec::new(),
        };
        model.visit(&mut own);
        let handles = own.handles;
        if handles.is_empty() {
            return Ok(grads);
        }
        let refs: Vec<&tch::Tensor> = handles.iter().collect();
        match crate::aten::foreach_mul_(&refs, factor) {
            Ok(()) => Ok(grads),
            // Nothing was scaled (the extension checks before it writes): burn's ops then.
            Err(_) => Err(grads),
        }
    }
}

/// The mean of a tensor as a finite f64.
fn mean_of<const D: usize>(values: Tensor<D>) -> Result<f64, EngineError> {
    values
        .mean()
        .try_into_vec_as::<f64>()
        .ok()
        .and_then(|v| v.first().copied())
        .filter(|v| v.is_finite())
        .ok_or_else(|| EngineError::backend_says("mean log Z is not a finite number"))
}

#[cfg(test)]
mod memory_tests {
    use super::*;
    use conelab_core::model::LstmConfig;

    /// A one-layer LSTM, embedding and hidden width 8, without an output bias: its parameters
    /// are N·8 (the tied W) + 4·8·(8 + 8) + 8·8 (two biases per gate), counted here by hand.
    fn lstm() -> (ModelConfig, f64) {
        let cfg = ModelConfig::Lstm(LstmConfig {
            embed: 8,
            hidden: 8,
            layers: 1,
            bptt: 5,
            dropout: 0.0,
            init_range: 0.1,
            output_bias: false,
        });
        (cfg, 4.0 * 8.0 * 16.0 + 64.0)
    }

    /// 16 bytes a parameter (value, gradient, AdamW's two moments), 8 an entry of the
    /// `[B·T, N]` logits (with their gradient), and with AGG 4 bytes a token of K updates: the
    /// refusal comes exactly above that, names the memory, and says both sizes in GiB.
    #[test]
    fn a_run_is_refused_exactly_when_its_lower_bound_exceeds_the_memory() {
        let (model, layers) = lstm();
        let n = 1_000usize;
        let mut config = TrainConfig {
            batch: 4,
            ..TrainConfig::default()
        };
        let params = n as f64 * 8.0 + layers;
        let need = 16.0 * params + 8.0 * (4.0 * 5.0) * n as f64;
        assert_eq!(training_bytes_needed(&model, &config, n, 50), need);
        let refuse = |config: &TrainConfig, available: u64| {
            memory_refusal(&model, config, n, 50, available, "cuda:0 has")
        };
        assert_eq!(refuse(&config, need as u64), None, "exactly enough");
        let why = refuse(&config, need as u64 - 1).expect("one byte short");
        assert!(
            why.contains("at batch 4") && why.contains("cuda:0 has 0.0 GiB"),
            "{why}"
        );
        // AGG's memory: K updates of B·T targets, an epoch's by default.
        config.objectives.agg.enabled = true;
        let with_epoch = need + 4.0 * 50.0 * 20.0;
        assert_eq!(training_bytes_needed(&model, &config, n, 50), with_epoch);
        config.objectives.agg.memory = Some(7);
        assert_eq!(
            training_bytes_needed(&model, &config, n, 50),
            need + 4.0 * 7.0 * 20.0
        );
        assert!(
            refuse(&config, need as u64).is_some(),
            "AGG's memory counts"
        );
    }
}
