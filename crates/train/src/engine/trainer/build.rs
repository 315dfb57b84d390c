//! Building a trainer: a new one from its settings (the memory it needs checked first), one restored from a checkpoint's state, and the paths it runs on.

use super::Trainer;
use super::update::optimizer;
use super::update::{build_optimizer, spectral_optimizer};
use std::sync::Arc;

use burn::optim::ModuleOptimizer;
use burn::prelude::*;

use crate::engine::{EngineError, RunState};
use crate::model::DeviceSpecExt;
use crate::model::{LanguageModel, RecurrentState};
use conelab_core::model::{DeviceSpec, ModelConfig};
use conelab_core::objective::LossKind;
use conelab_core::train_config::{Precision, TrainConfig};
use conelab_data::{Corpus, Group, PartialWindow, Split, StreamBatcher};

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
            "this model needs at least {:.1} GiB to train at batch {} ({:.3e} parameters with their gradients and AdamW's moments, the logits and the activations), and {has} {:.1} GiB available",
            gib(need),
            config.batch,
            model_config.parameter_count(vocab),
            gib(available as f64)
        )
    })
}

/// Sizes of the frequency groups (frequent, medium, rare).
pub(super) fn group_sizes(corpus: &Corpus) -> [usize; 3] {
    Group::ALL.map(|g| corpus.groups().size(g))
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
            let spectrum = trainer.state.objectives.spectrum;
            trainer
                .switch_spectrum(true, &spectrum)
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
    /// `[B·T, N]` logits (with their gradient), 4 a kept activation (an LSTM layer's four gates
    /// and cell state at each of the B·T positions), and with AGG 4 bytes a token of K updates:
    /// the refusal comes exactly above that, names the memory, and says both sizes in GiB.
    #[test]
    fn a_run_is_refused_exactly_when_its_lower_bound_exceeds_the_memory() {
        let (model, layers) = lstm();
        let n = 1_000usize;
        let mut config = TrainConfig {
            batch: 4,
            ..TrainConfig::default()
        };
        let params = n as f64 * 8.0 + layers;
        let activations = 4.0 * (4.0 * 5.0) * 5.0 * 8.0;
        let need = 16.0 * params + 8.0 * (4.0 * 5.0) * n as f64 + activations;
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
