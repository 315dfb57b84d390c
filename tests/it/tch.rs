//! LibTorch (CPU) against burn-flex: the same model, weights and batch give the same loss, and the
//! engine obeys commands at the same step. Built only with `--features tch` (see README).
#![cfg(all(feature = "tch", feature = "flex", not(feature = "tch-doc-only")))]

use std::sync::Arc;
use std::time::Duration;

use burn::prelude::*;
use burn::store::{ModuleSnapshot, SafetensorsStore};
use conelab_core::events::{Command, Event};
use conelab_core::model::{DeviceSpec, LstmConfig, ModelConfig, TransformerConfig};
use conelab_core::train_config::Precision;
use conelab_core::train_config::TrainConfig;
use conelab_data::{
    Corpus, CorpusSource, LoadOptions, PartialWindow, Split, StreamBatcher, SynthConfig,
};
use conelab_train::engine::{self, Trainer};
use conelab_train::model::DeviceSpecExt;
use conelab_train::model::LanguageModel;
use conelab_train::model::output::mean_nll;

fn corpus_source() -> CorpusSource {
    CorpusSource::Synthetic(SynthConfig {
        vocab: 300,
        tokens: 20_000,
        classes: 10,
        ..SynthConfig::default()
    })
}

fn corpus() -> Arc<Corpus> {
    Arc::new(Corpus::load(&corpus_source(), &LoadOptions::default()).expect("corpus"))
}

fn transformer() -> ModelConfig {
    ModelConfig::Transformer(TransformerConfig {
        d_model: 32,
        layers: 2,
        heads: 4,
        d_ff: 64,
        context: 16,
        dropout: 0.0,
        init_std: 0.02,
        output_bias: true,
    })
}

fn lstm() -> ModelConfig {
    ModelConfig::Lstm(LstmConfig {
        embed: 24,
        hidden: 32,
        layers: 2,
        bptt: 16,
        dropout: 0.0,
        init_range: 0.1,
        output_bias: true,
    })
}

/// Loss of one batch on `spec`, with the weights of `weights` (a safetensors file).
fn loss_on(
    spec: DeviceSpec,
    cfg: &ModelConfig,
    vocab: usize,
    weights: &std::path::Path,
    corpus: &Corpus,
) -> f64 {
    let device = spec.device().expect("device");
    let mut model = LanguageModel::new(cfg, vocab, &device);
    model
        .load_from(&mut SafetensorsStore::from_file(weights))
        .expect("weights load");
    let batch = StreamBatcher::new(
        corpus.split(Split::Train),
        4,
        cfg.window(),
        PartialWindow::Drop,
    )
    .expect("batcher")
    .window(3)
    .expect("window");
    let x = Tensor::<2, Int>::from_data(TensorData::new(batch.inputs, [4, batch.time]), &device);
    let y = Tensor::<1, Int>::from_data(TensorData::new(batch.targets, [4 * batch.time]), &device);
    let (h, _) = model.hidden(x, None);
    mean_nll(model.logits(h), y).into_scalar::<f32>() as f64
}

fn same_loss(cfg: ModelConfig) {
    let corpus = corpus();
    let n = corpus.vocab().len();
    let dir = tempfile::tempdir().expect("tempdir");
    let weights = dir.path().join("w.safetensors");
    let flex = DeviceSpec::Cpu.device().expect("flex");
    flex.seed(7);
    LanguageModel::new(&cfg, n, &flex)
        .save_into(&mut SafetensorsStore::from_file(&weights))
        .expect("save");
    let a = loss_on(DeviceSpec::Cpu, &cfg, n, &weights, &corpus);
    let b = loss_on(DeviceSpec::LibtorchCpu, &cfg, n, &weights, &corpus);
    assert!((a - b).abs() / a.abs() <= 1e-4, "flex {a} vs libtorch {b}");
}

/// Steps of training from one saved state on each backend: flex takes the head's gradient in
/// its host pass, LibTorch in closed form (objective/device_softmax.rs); both run an LSTM's
/// layers on the host (model/lstm_host.rs) over their own tensors, draw the same dropout masks
/// on the host and take AdamW's step in one fused pass over their own buffers. The losses of
/// every step, its gradient norm and the penalty (the regularisers', when on) agree within 1e-4.
/// With unlikelihood, flex's host pass and LibTorch's extension call (`csrc/head.cpp`) are two
/// implementations of its gradient. Returns flex's gradient norms.
fn same_training(model: ModelConfig, regs: &[&str]) -> Vec<f64> {
    use conelab_core::objective::Objectives;
    use conelab_core::run_dir::{CorpusSpec, RunDir, RunSpec};
    use conelab_train::checkpoint;
    let source = corpus_source();
    let corpus = corpus();
    let mut objectives = Objectives::default();
    for r in regs {
        objectives.apply_reg_arg(r).expect("reg");
    }
    let train = TrainConfig {
        batch: 4,
        steps: 8,
        lr: 3e-3,
        warmup: 2,
        eval_every: 0,
        checkpoint_every: 0,
        snapshot_every: 0,
        eval_batch: 4,
        objectives,
        ..TrainConfig::default()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = RunSpec {
        conelab_version: "test".into(),
        name: "test".into(),
        device: "cpu".into(),
        group_bounds: [0.3, 0.8],
        corpus: CorpusSpec::from_source(&source),
        model: model.clone(),
        train: train.clone(),
    };
    let run = RunDir::create(dir.path(), spec, corpus.vocab()).expect("run dir");
    let model_cfg = model.clone();
    let mut flex = Trainer::new(corpus, model, train, DeviceSpec::Cpu).expect("trainer");
    flex.train_step().expect("first step");
    checkpoint::save(&run, &flex, 2).expect("checkpoint");
    let (mut libtorch, _) = checkpoint::resume_on(dir.path(), None, Some(DeviceSpec::LibtorchCpu))
        .expect("resume on LibTorch");
    assert_eq!(libtorch.device_spec(), DeviceSpec::LibtorchCpu);
    let is_lstm = matches!(model_cfg, ModelConfig::Lstm(_));
    let mut norms = Vec::new();
    for _ in 0..6 {
        let a = flex.train_step().expect("flex step");
        norms.push(a.grad_norm);
        let b = libtorch.train_step().expect("libtorch step");
        assert_eq!(a.step, b.step);
        assert_eq!(
            libtorch.lstm_on_host(),
            is_lstm,
            "LibTorch's LSTM on the host"
        );
        // The gradient norm checks G itself from the first step on (AdamW would hide a G off
        // by a constant factor in the losses).
        for (what, x, y) in [
            ("loss", a.loss, b.loss),
            ("penalty", a.penalty, b.penalty),
            ("gradient norm", a.grad_norm, b.grad_norm),
        ] {
            assert!(
                (x - y).abs() <= 1e-4 * x.abs().max(1e-3),
                "step {}: {what} flex {x} vs libtorch {y}",
                a.step
            );
        }
        assert_eq!(
            !regs.is_empty(),
            a.penalty != 0.0,
            "the penalty is on when asked"
        );
    }
    norms
}

#[test]
fn transformer_training_matches_between_flex_and_libtorch() {
    same_training(transformer(), &[]);
}

#[test]
fn transformer_training_with_dev_matches_between_flex_and_libtorch() {
    same_training(transformer(), &["dev=0.5"]);
}

#[test]
fn transformer_training_with_unlikelihood_and_dev_matches_between_flex_and_libtorch() {
    same_training(transformer(), &["ul=0.5"]);
    same_training(transformer(), &["ul=0.5", "dev=0.5"]);
}

#[test]
fn lstm_training_matches_between_flex_and_libtorch() {
    same_training(lstm(), &[]);
}

/// `cfg` with dropout `p` (the tests' presets have none).
fn with_dropout(cfg: ModelConfig, p: f64) -> ModelConfig {
    match cfg {
        ModelConfig::Transformer(t) => {
            ModelConfig::Transformer(TransformerConfig { dropout: p, ..t })
        }
        ModelConfig::Lstm(l) => ModelConfig::Lstm(LstmConfig { dropout: p, ..l }),
    }
}

/// With dropout on, both backends draw the step's masks on the host from the step's seed: the
/// same masks, so the same training. And the masks dropped something: the gradients are not
/// the ones of the same training without dropout. (Without an output bias, and the LSTM's
/// weights drawn from ±1 rather than ±0.1: at the preset's initialisation the activations are
/// so small that the loss and the gradient norm move by under 1 % with p = 0.3, and the output
/// bias's gradient, softmax − one-hot summed, dominates the norm whatever the hidden states.)
fn same_training_with_dropout(model: ModelConfig) {
    let model = match model {
        ModelConfig::Transformer(t) => ModelConfig::Transformer(TransformerConfig {
            output_bias: false,
            ..t
        }),
        ModelConfig::Lstm(l) => ModelConfig::Lstm(LstmConfig {
            output_bias: false,
            init_range: 1.0,
            ..l
        }),
    };
    let dropped = same_training(with_dropout(model.clone(), 0.3), &[]);
    let kept = same_training(model, &[]);
    assert!(
        dropped
            .iter()
            .zip(&kept)
            .any(|(a, b)| (a - b).abs() > 1e-2 * b.abs()),
        "dropout changed no gradient norm: {dropped:?} against {kept:?}"
    );
}

#[test]
fn transformer_training_with_dropout_matches_between_flex_and_libtorch() {
    same_training_with_dropout(transformer());
}

#[test]
fn lstm_training_with_dropout_matches_between_flex_and_libtorch() {
    same_training_with_dropout(lstm());
}

#[test]
fn transformer_loss_matches_between_flex_and_libtorch() {
    same_loss(transformer());
}

#[test]
fn lstm_loss_matches_between_flex_and_libtorch() {
    same_loss(lstm());
}

#[test]
fn libtorch_trains_and_applies_commands_at_the_next_step() {
    let cfg = TrainConfig {
        batch: 4,
        steps: 20,
        eval_every: 10,
        checkpoint_every: 0,
        snapshot_every: 5,
        eval_batch: 4,
        warmup: 2,
        ..TrainConfig::default()
    };
    let trainer =
        Trainer::new(corpus(), transformer(), cfg, DeviceSpec::LibtorchCpu).expect("trainer");
    let handle = engine::spawn(trainer, engine::EngineOptions::default()).expect("engine");
    let mut lrs = std::collections::BTreeMap::new();
    let mut losses = Vec::new();
    let mut applied = None;
    loop {
        match handle
            .events()
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Step(s) => {
                lrs.insert(s.step, s.lr);
                losses.push(s.loss);
                if s.step == 3 {
                    handle.send(Command::SetLr { lr: 0.0042 });
                }
            }
            Event::Applied(a) => applied = Some(a.step),
            Event::Finished { .. } => break,
            Event::Failed { message, .. } => panic!("{message}"),
            _ => {}
        }
    }
    handle.join();
    let step = applied.expect("acknowledged");
    assert_eq!(lrs[&step], 0.0042);
    assert_ne!(lrs[&(step - 1)], 0.0042);
    assert!(losses.iter().all(|l| l.is_finite()));
    assert!(losses[losses.len() - 1] < losses[0], "{losses:?}");
}

#[test]
fn libtorch_runs_the_objectives_and_applies_toggles_at_the_next_step() {
    use conelab_core::objective::{ObjectiveChange, Objectives, Term};
    let mut objectives = Objectives::default();
    // AGG from the start exercises the explicit-gradient head on LibTorch.
    objectives.apply_reg_arg("agg=0.2").expect("agg");
    let cfg = TrainConfig {
        batch: 4,
        steps: 16,
        eval_every: 0,
        checkpoint_every: 0,
        snapshot_every: 0,
        eval_batch: 4,
        warmup: 2,
        objectives,
        ..TrainConfig::default()
    };
    let trainer =
        Trainer::new(corpus(), transformer(), cfg, DeviceSpec::LibtorchCpu).expect("trainer");
    let handle = engine::spawn(trainer, engine::EngineOptions::default()).expect("engine");
    let mut steps = std::collections::BTreeMap::new();
    let mut applied = Vec::new();
    loop {
        match handle
            .events()
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Step(s) => {
                steps.insert(s.step, (s.loss, s.penalty, s.rare_tokens));
                if s.step == 3 {
                    handle.send(Command::Objective {
                        change: ObjectiveChange::Enable {
                            term: Term::Cos,
                            on: true,
                        },
                    });
                }
                if s.step == 8 {
                    handle.send(Command::Objective {
                        change: ObjectiveChange::Enable {
                            term: Term::Spectrum,
                            on: true,
                        },
                    });
                }
            }
            Event::Applied(a) => applied.push((a.step, a.change.after_text())),
            Event::Finished { .. } => break,
            Event::Failed { message, .. } => panic!("{message}"),
            _ => {}
        }
    }
    handle.join();
    assert_eq!(applied.len(), 2, "{applied:?}");
    let (cos_step, ref label) = applied[0];
    assert!(label.contains("CosReg"), "{label}");
    assert_eq!(
        steps[&(cos_step - 1)].1,
        0.0,
        "no penalty before the toggle"
    );
    // CosReg is negative below the isotropic mean (its minimum is −1/N): "on" means non-zero.
    assert!(
        steps.range(cos_step..).all(|(_, s)| s.1 != 0.0),
        "{steps:?}"
    );
    assert!(applied[1].1.contains("SC"), "{:?}", applied[1]);
    assert!(
        steps.values().all(|s| s.0.is_finite() && s.2.is_some()),
        "{steps:?}"
    );
}

/// The workbench drives a LibTorch run as it drives a flex one: through a real terminal (tmux),
/// switch CosReg on, wait for the acknowledgement, stop and save; the store has the change.
#[test]
fn the_workbench_drives_a_libtorch_run() {
    if !crate::harness::require_tmux() {
        return;
    }
    let f = crate::harness::Fixture::new();
    let run = f.path("run");
    let exit_file = f.path("exit-status");
    let command = format!(
        "{} train {} --config {} --run-dir {} --device libtorch-cpu --steps 100000000 --eval-every 0 --snapshot-every 20 --checkpoint-every 0; echo $? > {}; sleep 600",
        env!("CARGO_BIN_EXE_conelab"),
        crate::harness::s(&f.path("corpus")),
        crate::harness::s(&f.path("small.toml")),
        crate::harness::s(&run),
        crate::harness::s(&exit_file),
    );
    let tmux = crate::harness::Tmux {
        socket: format!("conelab-tch-e2e-{}", std::process::id()),
        session: "e2e".into(),
    };
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "e2e",
        "-x",
        "120",
        "-y",
        "40",
        &command,
    ]);
    assert!(out.status.success(), "tmux new-session: {out:?}");
    let screen = tmux.wait_for("running");
    assert!(screen.contains("libtorch-cpu"), "{screen}");
    tmux.keys(&["5", "Space"]);
    tmux.wait_for("[x] CosReg");
    tmux.keys(&["q"]);
    tmux.wait_for("quit?");
    tmux.keys(&["s"]);
    assert_eq!(tmux.wait_for_exit(&exit_file), "0", "exit status");
    let st = conelab_store::load(&run).expect("store");
    assert_eq!(st.run().device, "libtorch-cpu");
    let kinds: Vec<String> = st
        .events
        .column("kind")
        .expect("kind")
        .str()
        .expect("str")
        .iter()
        .map(|k| k.unwrap_or_default().to_string())
        .collect();
    assert!(kinds.contains(&"regulariser on".to_string()), "{kinds:?}");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("finish"),
        "{kinds:?}"
    );
}

/// `bench ops` on LibTorch CPU, CUDA's paths: every product of the step is one top-level
/// operator. A Transformer's forward has four products a layer outside attention (qkv, the
/// output projection, the two MLP layers) and the tied head one; the backward takes two for
/// each (the gradient of either factor): 3 · (4 · layers + 1), counted independently of the
/// code. Attention's two products are inside one fused `scaled_dot_product_attention` a layer,
/// the norms (two a layer and the final one) are one `native_layer_norm` each and one backward
/// each, and nothing runs on the host paths, so AdamW's update shows as operators too.
#[test]
fn bench_ops_counts_the_products_of_a_step() {
    use conelab_bench::ops::{OpsBench, bench_ops};
    let layers = 2;
    let b = OpsBench {
        model_name: "test".into(),
        model: transformer(),
        device: DeviceSpec::LibtorchCpu,
        batch: 2,
        vocab: 120,
        warmup: 1,
        seed: 3,
        objectives: Default::default(),
        reference: None,
    };
    let r = bench_ops(&b).expect("counted");
    let ours = &r.conelab;
    assert_eq!(
        ours.by_kind.get("matmul").copied(),
        Some(3 * (4 * layers + 1)),
        "{}",
        r.render()
    );
    for (op, n) in [
        ("aten::scaled_dot_product_attention", layers),
        ("aten::native_layer_norm", 2 * layers + 1),
        ("aten::native_layer_norm_backward", 2 * layers + 1),
    ] {
        assert_eq!(
            ours.by_name.get(op).copied(),
            Some(n),
            "{op}: {}",
            r.render()
        );
    }
    assert_eq!(ours.total, ours.by_name.values().sum::<u64>());
    // Not the host pass: AdamW is one multi-tensor update for all parameters (θ copied into
    // fresh buffers, then torch's fused AdamW), and the clip's norm one foreach norm.
    for (op, n) in [
        ("aten::_fused_adamw_", 1),
        ("aten::_foreach_copy_", 1),
        ("aten::_foreach_norm", 1),
    ] {
        assert_eq!(
            ours.by_name.get(op).copied(),
            Some(n),
            "{op}: {}",
            r.render()
        );
    }
    assert!(r.reference.is_none());
    // With unlikelihood (and DEV) on, the head is still the extension's one call: no autodiff
    // graph over the logits (whose log Z begins with a row maximum and whose backward would
    // differentiate a log-softmax), and the same products.
    let mut objectives = conelab_core::objective::Objectives::default();
    for reg in ["ul=0.5", "dev=0.1"] {
        objectives.apply_reg_arg(reg).expect("reg");
    }
    let with_ul = bench_ops(&OpsBench { objectives, ..b }).expect("counted");
    let theirs = &with_ul.conelab;
    assert!(with_ul.objective.contains("UL"), "{}", with_ul.objective);
    assert_eq!(theirs.by_kind.get("matmul"), ours.by_kind.get("matmul"));
    assert_eq!(theirs.by_name.get("aten::_log_softmax").copied(), Some(1));
    for composed in [
        "aten::max",
        "aten::amax",
        "aten::_log_softmax_backward_data",
    ] {
        assert!(
            !theirs.by_name.contains_key(composed),
            "{composed}: {}",
            with_ul.render()
        );
    }
}

/// On LibTorch CPU, the paths CUDA takes (burn's graph for the LSTM, burn's dropout, AdamW as
/// one `_fused_adamw_` over all parameters, the clip as foreach operators) train as the host
/// paths do: the same losses and parameters after four steps, dropout off (burn draws other
/// masks than the host). Torch's AdamW orders its f32 operations differently from the host
/// pass: a few ulps a step. Both trainers start from one checkpoint: torch's generator is one
/// for the whole test process, so two fresh trainers would not draw the same weights while
/// other tests run.
#[test]
fn the_device_paths_on_libtorch_train_as_the_host_paths() {
    for model in [transformer(), lstm()] {
        let (dir, _run) = saved_at_step_zero(model, 4);
        let run = |device_paths: bool| {
            let (mut trainer, _) = conelab_train::checkpoint::resume_on(
                dir.path(),
                None,
                Some(DeviceSpec::LibtorchCpu),
            )
            .expect("resume");
            if device_paths {
                trainer.use_device_paths();
            }
            let stats: Vec<(f64, f64)> = (0..4)
                .map(|_| {
                    let s = trainer.train_step().expect("step");
                    (s.loss, s.grad_norm)
                })
                .collect();
            (stats, crate::engine::parameters(trainer.model()))
        };
        let (host, device) = (run(false), run(true));
        for (step, ((a, ga), (b, gb))) in host.0.iter().zip(&device.0).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * a.abs().max(1.0),
                "step {step}: loss {a} (host paths) vs {b} (device paths)"
            );
            assert!(
                (ga - gb).abs() <= 1e-4 * ga.abs().max(1e-3),
                "step {step}: gradient norm {ga} vs {gb}"
            );
        }
        assert_eq!(host.1.len(), device.1.len());
        for (a, b) in host.1.iter().zip(&device.1) {
            let worst = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(
                worst < 1e-5,
                "parameters differ by {worst} after four steps"
            );
        }
    }
}

/// A run of `model` on LibTorch CPU saved before its first step (its directory and spec).
fn saved_at_step_zero(
    model: ModelConfig,
    steps: u64,
) -> (tempfile::TempDir, conelab_core::run_dir::RunDir) {
    saved_at_step_zero_in(model, steps, Precision::Fp32)
}

/// [`saved_at_step_zero`] in `precision`.
fn saved_at_step_zero_in(
    model: ModelConfig,
    steps: u64,
    precision: Precision,
) -> (tempfile::TempDir, conelab_core::run_dir::RunDir) {
    let train = TrainConfig {
        batch: 4,
        steps,
        lr: 3e-3,
        warmup: 1,
        eval_every: 0,
        checkpoint_every: 0,
        snapshot_every: 0,
        precision,
        ..TrainConfig::default()
    };
    saved_at_step_zero_with(model, train)
}

/// A run of `model` with `train`, saved before its first step: trainers resumed from it start
/// from the same weights (LibTorch draws them from its one generator, which the tests running
/// beside draw from too).
fn saved_at_step_zero_with(
    model: ModelConfig,
    train: TrainConfig,
) -> (tempfile::TempDir, conelab_core::run_dir::RunDir) {
    use conelab_core::run_dir::{CorpusSpec, RunDir, RunSpec};
    use conelab_train::checkpoint;
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = RunSpec {
        conelab_version: "test".into(),
        name: "test".into(),
        device: "libtorch-cpu".into(),
        group_bounds: [0.3, 0.8],
        corpus: CorpusSpec::from_source(&corpus_source()),
        model: model.clone(),
        train: train.clone(),
    };
    let corpus = corpus();
    let run = RunDir::create(dir.path(), spec, corpus.vocab()).expect("run dir");
    let trainer = Trainer::new(corpus, model, train, DeviceSpec::LibtorchCpu).expect("trainer");
    checkpoint::save(&run, &trainer, 2).expect("checkpoint");
    (dir, run)
}

/// Exact resume on the device paths: a run saved at step 2 and resumed there (the fused
/// AdamW's moments read back from burn's own optimizer record) takes the next three steps to
/// the same bits as the run that went on. Dropout off here: torch's generator is one for the
/// whole test process, and the other tests draw from it meanwhile (a run is one process).
#[test]
fn a_run_resumes_exactly_on_the_device_paths() {
    resumes_exactly(transformer(), Precision::Fp32);
}

/// The same in bf16 (`--precision bf16`), Transformer and LSTM: the casts are deterministic,
/// the weights and the optimizer's state fp32, so a resumed bf16 run is the same bits too.
#[test]
fn a_bf16_run_resumes_exactly() {
    resumes_exactly(transformer(), Precision::Bf16);
    resumes_exactly(lstm(), Precision::Bf16);
}

fn resumes_exactly(model: ModelConfig, precision: Precision) {
    use conelab_train::checkpoint;
    let (dir, run) = saved_at_step_zero_in(model, 5, precision);
    let (mut whole, _) =
        checkpoint::resume_on(dir.path(), None, Some(DeviceSpec::LibtorchCpu)).expect("start");
    whole.use_device_paths();
    for _ in 0..2 {
        whole.train_step().expect("step");
    }
    checkpoint::save(&run, &whole, 2).expect("checkpoint");
    // The run directory resumes from its latest checkpoint: step 2's.
    let (mut resumed, _) =
        checkpoint::resume_on(dir.path(), None, Some(DeviceSpec::LibtorchCpu)).expect("resume");
    resumed.use_device_paths();
    assert_eq!(resumed.state().step, 2);
    for _ in 0..3 {
        let (a, b) = (
            whole.train_step().expect("step"),
            resumed.train_step().expect("resumed step"),
        );
        assert_eq!(a.step, b.step);
        assert_eq!(a.loss.to_bits(), b.loss.to_bits(), "step {}: loss", a.step);
        assert_eq!(
            a.grad_norm.to_bits(),
            b.grad_norm.to_bits(),
            "step {}",
            a.step
        );
    }
    assert_eq!(
        crate::engine::parameters(whole.model()),
        crate::engine::parameters(resumed.model()),
        "the parameters after step 5"
    );
}

/// Dropout with its masks drawn on the device (burn's, the path CUDA takes) and on the host
/// (burn-flex and LibTorch CPU): the masks differ, so the comparison is statistical. Over
/// n = 200,000 ones at p = 0.3 each path drops a share p of the elements and keeps the
/// expectation 1 (the kept ones scaled by 1/(1 − p)): a binomial share's standard deviation is
/// √(p(1 − p)/n) ≈ 0.0010 and the mean's √(p/((1 − p)·n)) ≈ 0.0015; the bounds are five of
/// them. And the two paths' masks are not the same draw.
#[test]
fn dropout_drops_at_its_rate_on_the_device_and_host_paths() {
    use burn::nn::DropoutConfig;
    use conelab_train::model::dropout;
    let (n, p) = (200_000usize, 0.3f64);
    let layer = DropoutConfig::new(p).init();
    let draw = |spec: DeviceSpec, host_seed: Option<u64>| -> Vec<f32> {
        let device = spec.training_device().expect("device");
        dropout::seed_host_masks(host_seed);
        let y = dropout::forward(&layer, Tensor::<1>::ones([n], &device));
        dropout::seed_host_masks(None);
        y.try_into_vec_as::<f32>().expect("values")
    };
    let device_masks = draw(DeviceSpec::LibtorchCpu, None);
    let paths = [
        ("LibTorch, device masks", device_masks.clone()),
        (
            "LibTorch, host masks",
            draw(DeviceSpec::LibtorchCpu, Some(7)),
        ),
        ("burn-flex, host masks", draw(DeviceSpec::Cpu, Some(7))),
    ];
    let sd_share = (p * (1.0 - p) / n as f64).sqrt();
    let sd_mean = (p / ((1.0 - p) * n as f64)).sqrt();
    for (name, y) in &paths {
        let dropped = y.iter().filter(|&&v| v == 0.0).count() as f64 / n as f64;
        let mean = y.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        assert!(
            (dropped - p).abs() < 5.0 * sd_share,
            "{name}: dropped {dropped}"
        );
        assert!((mean - 1.0).abs() < 5.0 * sd_mean, "{name}: mean {mean}");
        let kept = 1.0 / (1.0 - p);
        assert!(
            y.iter()
                .all(|&v| v == 0.0 || ((v as f64) - kept).abs() < 1e-6),
            "{name}: every element is dropped or scaled by 1/(1 − p)"
        );
    }
    // The host masks are one draw on either backend; the device's is another.
    assert_eq!(paths[1].1, paths[2].1, "host masks agree across backends");
    let same = device_masks
        .iter()
        .zip(&paths[1].1)
        .filter(|(a, b)| (**a == 0.0) == (**b == 0.0))
        .count() as f64
        / n as f64;
    // Independent masks agree where both drop or both keep: p² + (1 − p)² = 0.58.
    assert!(
        (same - 0.58).abs() < 0.01,
        "device and host masks agree on {same}"
    );
}

/// 200 steps of `tiny` in bf16 against fp32 on LibTorch CPU, the same seed, batches and paths
/// (the device paths: bf16 takes them, and fp32 is put on them here), so the only difference is
/// the products' precision. Tolerance: every 20-step block's mean loss within 0.02 nats of
/// fp32's (bf16 keeps 8 bits of mantissa, a relative 2⁻⁹ per rounding; what accumulates over
/// the steps is the trajectories drifting apart, measured at most 0.001 here), while the curve
/// itself falls by more than 1 nat; and the bf16 run really ran its products in bf16 (its losses
/// are not fp32's bits).
#[test]
fn bf16_training_follows_the_fp32_loss_curve() {
    let model = conelab_core::model::Preset::Tiny.config();
    let curve = |precision: Precision| -> Vec<f64> {
        let config = TrainConfig {
            batch: 8,
            steps: 200,
            eval_every: 0,
            checkpoint_every: 0,
            snapshot_every: 0,
            precision,
            ..TrainConfig::default()
        };
        let mut t = Trainer::new(corpus(), model.clone(), config, DeviceSpec::LibtorchCpu)
            .expect("trainer");
        t.use_device_paths();
        (0..200)
            .map(|_| t.train_step().expect("step").loss)
            .collect()
    };
    let (fp32, bf16) = (curve(Precision::Fp32), curve(Precision::Bf16));
    let blocks = |c: &[f64]| -> Vec<f64> {
        c.chunks(20)
            .map(|b| b.iter().sum::<f64>() / b.len() as f64)
            .collect()
    };
    let (a, b) = (blocks(&fp32), blocks(&bf16));
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f64, f64::max);
    eprintln!("bf16 against fp32, 20-step means: {a:?} / {b:?}, worst {worst:.4}");
    assert!(worst <= 0.02, "bf16 left fp32's curve by {worst} nats");
    assert!(a[0] - a[9] > 1.0, "the run learned: {a:?}");
    assert!(
        fp32.iter()
            .zip(&bf16)
            .skip(1)
            .any(|(x, y)| x.to_bits() != y.to_bits()),
        "bf16 gave fp32's bits"
    );
}

/// Trainers on the paths CUDA takes (LibTorch CPU), where steps pipeline (AdamW as one fused
/// step, the step's guard on the device), all from the same weights. A small clip (0.05) so
/// that every step is clipped. Without dropout: its masks come from LibTorch's one generator on
/// these paths, which the tests running beside draw from too.
fn pipelining_trainers<const N: usize>(model: ModelConfig) -> (tempfile::TempDir, [Trainer; N]) {
    let train = TrainConfig {
        batch: 4,
        steps: 40,
        lr: 3e-3,
        warmup: 1,
        eval_every: 0,
        checkpoint_every: 0,
        snapshot_every: 0,
        clip_norm: 0.05,
        ..TrainConfig::default()
    };
    let (dir, _run) = saved_at_step_zero_with(model, train);
    let trainers = std::array::from_fn(|_| {
        let (mut t, _) =
            conelab_train::checkpoint::resume_on(dir.path(), None, Some(DeviceSpec::LibtorchCpu))
                .expect("resume");
        t.use_device_paths();
        assert!(t.pipelines(), "the device paths on LibTorch pipeline");
        t
    });
    (dir, trainers)
}

/// `a == b`, without printing a model's worth of numbers when not.
fn same<T: PartialEq>(a: &T, b: &T, what: &str) {
    assert!(a == b, "{what} differ");
}

/// `step_pipelined` reports each step one call late, and the steps are the synchronous ones:
/// the same losses, gradient norms (before the clip, which the device applied) and learning
/// rates bit for bit, the same parameters and optimizer state at the end — the guard and the
/// clip's divisor computed on the device, never read by the host within a step.
#[test]
fn pipelined_steps_are_the_synchronous_steps_read_one_step_late() {
    for model in [transformer(), lstm()] {
        let (_dir, [mut sync, mut piped]) = pipelining_trainers(model);
        sync.set_pipelining(false);
        let want: Vec<_> = (0..8).map(|_| sync.train_step().expect("step")).collect();
        let mut got = Vec::new();
        for call in 1..=8u64 {
            let back = piped.step_pipelined().expect("a pipelined step");
            assert!(back.diverged.is_none());
            // The first call reads nothing back; call n reads step n − 1.
            let steps: Vec<u64> = back.steps.iter().map(|s| s.step).collect();
            let expected: Vec<u64> = if call == 1 { vec![] } else { vec![call - 1] };
            assert_eq!(steps, expected);
            assert_eq!(piped.state().step, call, "one step dispatched per call");
            got.extend(back.steps);
        }
        got.extend(piped.settle().expect("the last step"));
        assert!(piped.settle().expect("nothing left").is_none());
        assert_eq!(got.len(), 8);
        for (a, b) in want.iter().zip(&got) {
            assert_eq!(a.step, b.step);
            assert_eq!(a.loss.to_bits(), b.loss.to_bits(), "step {}: loss", a.step);
            assert_eq!(
                a.grad_norm.to_bits(),
                b.grad_norm.to_bits(),
                "step {}",
                a.step
            );
            assert_eq!(a.lr.to_bits(), b.lr.to_bits());
            assert!(a.grad_norm > 0.05, "step {}: the clip acted", a.step);
        }
        same(
            &crate::engine::parameters(sync.model()),
            &crate::engine::parameters(piped.model()),
            "the parameters",
        );
        // AdamW's moments and counts: the next step depends on them all.
        let (a, b) = (
            sync.train_step().expect("step"),
            piped.train_step().expect("step"),
        );
        assert_eq!(a.loss.to_bits(), b.loss.to_bits());
        same(
            &crate::engine::parameters(sync.model()),
            &crate::engine::parameters(piped.model()),
            "the parameters after another step",
        );
    }
}

/// A step whose loss is not finite (fault point `engine.nan`, the 4th step dispatched), on
/// both paths: the synchronous step says so at once; the pipelined one one call later, at the
/// same step, with the step after it already queued. Both leave the trainer where it stood
/// before the step — parameters, AdamW's moments and step counts (`rewind`), the step count, the
/// LSTM's carried state — so that the steps that follow are the same bits on both, and the same
/// as a run that never met the fault from that point (the fault fires once).
#[test]
fn a_pipelined_divergence_is_reported_at_its_step_and_undone() {
    use conelab_train::engine::EngineError;
    for model in [lstm(), transformer()] {
        let (_dir, [mut sync, mut piped]) = pipelining_trainers(model);
        sync.set_pipelining(false);
        let sync_after = conelab_base::fault::with_plan("engine.nan:4:EIO", || {
            for _ in 0..3 {
                sync.train_step().expect("step");
            }
            match sync.train_step() {
                Err(EngineError::Diverged { step, loss }) => {
                    assert_eq!(step, 4);
                    assert!(loss.is_nan());
                }
                other => panic!("expected a divergence, got {other:?}"),
            }
            assert_eq!(sync.state().step, 3);
            let at_divergence = crate::engine::parameters(sync.model());
            let after: Vec<_> = (0..3).map(|_| sync.train_step().expect("step")).collect();
            (at_divergence, after)
        });
        let piped_after = conelab_base::fault::with_plan("engine.nan:4:EIO", || {
            let mut read = Vec::new();
            for _ in 0..4 {
                let back = piped.step_pipelined().expect("step");
                assert!(back.diverged.is_none());
                read.extend(back.steps.iter().map(|s| s.step));
            }
            assert_eq!(read, vec![1, 2, 3]);
            // The 5th call queues step 5 and reads step 4: the divergence, at step 4.
            let back = piped.step_pipelined().expect("step");
            assert!(back.steps.is_empty());
            let (step, loss) = back.diverged.expect("the divergence");
            assert_eq!(step, 4);
            assert!(loss.is_nan());
            assert_eq!(piped.state().step, 3, "put back before step 4");
            assert!(piped.settle().expect("nothing queued").is_none());
            let at_divergence = crate::engine::parameters(piped.model());
            let mut after = Vec::new();
            while after.len() < 3 {
                after.extend(piped.step_pipelined().expect("step").steps);
            }
            after.extend(piped.settle().expect("settled"));
            (at_divergence, after)
        });
        same(&sync_after.0, &piped_after.0, "the parameters");
        let piped_steps: Vec<u64> = piped_after.1.iter().map(|s| s.step).collect();
        assert_eq!(piped_steps[..3], [4, 5, 6]);
        for (a, b) in sync_after.1.iter().zip(&piped_after.1) {
            assert_eq!(a.step, b.step);
            assert!(a.loss.is_finite());
            assert_eq!(a.loss.to_bits(), b.loss.to_bits(), "step {}: loss", a.step);
            assert_eq!(a.grad_norm.to_bits(), b.grad_norm.to_bits());
        }
    }
}

/// Against a run that never met the fault: after the divergence is undone, the next steps are
/// that run's steps 4, 5, 6 bit for bit — nothing of the skipped steps is left anywhere (a step
/// count off by the two skipped steps would change AdamW's bias corrections).
#[test]
fn an_undone_divergence_leaves_no_trace() {
    let (_dir, [mut clean, mut piped]) = pipelining_trainers(lstm());
    let want: Vec<_> = (0..6).map(|_| clean.train_step().expect("step")).collect();
    let got = conelab_base::fault::with_plan("engine.nan:4:EIO", || {
        let mut got = Vec::new();
        let mut diverged = 0;
        while got.len() < 6 {
            let back = piped.step_pipelined().expect("step");
            diverged += usize::from(back.diverged.is_some());
            got.extend(back.steps);
        }
        assert_eq!(diverged, 1);
        got
    });
    for (a, b) in want.iter().zip(&got) {
        assert_eq!(a.step, b.step);
        assert_eq!(a.loss.to_bits(), b.loss.to_bits(), "step {}", a.step);
    }
}

/// The engine over a pipelined trainer (the paths CUDA takes, on LibTorch CPU): every step is
/// reported once, in order, one step late; an evaluation or snapshot at step s comes after
/// step s's stats (the engine reads the queued step back first); a command sent meanwhile
/// applies at a step boundary; the run ends with every step reported.
#[test]
fn a_pipelined_engine_reports_every_step_once_and_in_order() {
    let (_dir, [mut trainer]) = pipelining_trainers(transformer());
    trainer.set_total_steps(12);
    {
        let c = trainer.config_mut();
        c.eval_every = 5;
        c.snapshot_every = 4;
        c.eval_batch = 4;
    }
    let handle = engine::spawn(trainer, engine::EngineOptions::default()).expect("engine");
    let mut log: Vec<(&str, u64)> = Vec::new();
    let mut lrs = std::collections::BTreeMap::new();
    let mut applied = None;
    loop {
        match handle
            .events()
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Step(s) => {
                assert!(s.loss.is_finite() && s.grad_norm.is_finite());
                lrs.insert(s.step, s.lr);
                log.push(("step", s.step));
                if s.step == 3 {
                    handle.send(Command::SetLr { lr: 0.0042 });
                }
            }
            Event::Eval(e) if e.split == "valid" => log.push(("eval", e.step)),
            Event::Snapshot { step } => log.push(("snapshot", step)),
            Event::Applied(a) => applied = Some(a.step),
            Event::Finished { step, .. } => {
                log.push(("finished", step));
                break;
            }
            Event::Failed { message, .. } => panic!("{message}"),
            _ => {}
        }
    }
    handle.join();
    let steps: Vec<u64> = log
        .iter()
        .filter(|(k, _)| *k == "step")
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(steps, (1..=12).collect::<Vec<_>>(), "{log:?}");
    for (i, (kind, at)) in log.iter().enumerate() {
        if matches!(*kind, "eval" | "snapshot" | "finished") {
            let last_step = log[..i].iter().rev().find(|(k, _)| *k == "step");
            assert_eq!(
                last_step.map(|(_, s)| *s),
                Some(*at),
                "{kind} at {at}: {log:?}"
            );
        }
    }
    assert!(log.contains(&("eval", 5)) && log.contains(&("eval", 10)));
    assert!(log.contains(&("snapshot", 4)) && log.contains(&("snapshot", 8)));
    let step = applied.expect("acknowledged");
    assert_eq!(lrs[&step], 0.0042);
    assert_ne!(lrs[&(step - 1)], 0.0042);
}

/// A blow-up in a pipelined run that nobody watches (`set-lr 1e30`): the divergence is
/// reported at the step whose loss was not finite, no stats of it or of any later step are,
/// and the run ends there, its step count put back before the divergence.
#[test]
fn a_pipelined_engine_reports_a_divergence_at_its_step() {
    let (_dir, [mut trainer]) = pipelining_trainers(transformer());
    trainer.set_total_steps(30);
    let options = engine::EngineOptions {
        divergence: conelab_core::events::DivergencePolicy::end_run(),
        ..engine::EngineOptions::default()
    };
    let handle = engine::spawn(trainer, options).expect("engine");
    let mut steps = Vec::new();
    let mut diverged = None;
    let finished = loop {
        match handle
            .events()
            .recv_timeout(Duration::from_secs(120))
            .expect("event")
        {
            Event::Step(s) => {
                assert!(diverged.is_none(), "stats after the divergence");
                steps.push(s.step);
                if s.step == 2 {
                    handle.send(Command::SetLr { lr: 1e30 });
                }
            }
            Event::Diverged { step, loss } => {
                assert!(!loss.is_finite());
                diverged = Some(step);
            }
            Event::Finished { step, reason } => break (step, reason),
            Event::Failed { message, .. } => panic!("{message}"),
            _ => {}
        }
    };
    handle.join();
    let at = diverged.expect("a divergence");
    assert_eq!(steps, (1..at).collect::<Vec<_>>());
    assert_eq!(
        finished,
        (at - 1, conelab_core::events::FinishReason::Diverged)
    );
}

/// `bench train` on the paths CUDA takes (bf16 puts LibTorch CPU on them): pipelined by default,
/// synchronised with `--step-sync`, each labelled; the figures are the timed steps'.
#[test]
fn bench_train_times_pipelined_and_synchronised_steps() {
    let json = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "bench",
            "train",
            "--device",
            "libtorch-cpu",
            "--precision",
            "bf16",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--batch",
            "2",
            "--bptt",
            "8",
            "--vocab",
            "300",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = crate::harness::conelab(&args);
        crate::harness::succeeded(&out);
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let (piped, synced) = (json(&[]), json(&["--step-sync"]));
    assert_eq!(piped["engine"], "conelab");
    assert_eq!(synced["engine"], "conelab (step sync)");
    for v in [&piped, &synced] {
        assert_eq!(v["steps"], 3);
        assert!(v["tokens_per_sec"].as_f64().expect("number") > 0.0);
        assert!(v["ms_per_step"].as_f64().expect("number") > 0.0);
    }
}
