//! The training engine on the CPU (burn-flex): learning, exact resume, commands between steps,
//! divergence, and checkpoints that are corrupt or do not fit.

use std::sync::Arc;
use std::time::Duration;

use conelab_core::events::{Command, Event};
use conelab_core::model::{DeviceSpec, LstmConfig, ModelConfig, Preset, TransformerConfig};
use conelab_core::run_dir::{CorpusSpec, RunDir, RunSpec};
use conelab_core::train_config::{Schedule, TrainConfig};
use conelab_data::{Corpus, CorpusSource, LoadOptions, Split, SynthConfig};
use conelab_train::checkpoint;
use conelab_train::engine::{self, Trainer};
use conelab_train::model::DeviceSpecExt;

use crate::harness::one_trainer;

fn small_synthetic() -> (CorpusSource, Arc<Corpus>) {
    let source = CorpusSource::Synthetic(SynthConfig {
        vocab: 300,
        tokens: 40_000,
        classes: 10,
        ..SynthConfig::default()
    });
    let corpus = Corpus::load(&source, &LoadOptions::default()).expect("synthetic corpus");
    (source, Arc::new(corpus))
}

fn small_transformer() -> ModelConfig {
    ModelConfig::Transformer(TransformerConfig {
        d_model: 32,
        layers: 1,
        heads: 2,
        d_ff: 64,
        context: 16,
        dropout: 0.1,
        init_std: 0.02,
        output_bias: true,
    })
}

fn small_lstm() -> ModelConfig {
    ModelConfig::Lstm(LstmConfig {
        embed: 24,
        hidden: 32,
        layers: 2,
        bptt: 12,
        dropout: 0.2,
        init_range: 0.1,
        output_bias: true,
    })
}

fn train_config(steps: u64) -> TrainConfig {
    TrainConfig {
        batch: 4,
        steps,
        lr: 3e-3,
        warmup: 3,
        schedule: Schedule::Cosine,
        eval_every: 0,
        checkpoint_every: 0,
        snapshot_every: 0,
        eval_batch: 4,
        ..TrainConfig::default()
    }
}

fn run_dir(
    dir: &std::path::Path,
    source: &CorpusSource,
    model: &ModelConfig,
    train: &TrainConfig,
    corpus: &Corpus,
) -> RunDir {
    let spec = RunSpec {
        conelab_version: "test".into(),
        name: "test".into(),
        device: "cpu".into(),
        group_bounds: [0.3, 0.8],
        corpus: CorpusSpec::from_source(source),
        model: model.clone(),
        train: train.clone(),
    };
    RunDir::create(dir, spec, corpus.vocab()).expect("run dir")
}

/// 2k steps straight and k + checkpoint + resume + k give bit-identical losses.
fn exact_resume(model: ModelConfig) {
    let _turn = one_trainer();
    let (source, corpus) = small_synthetic();
    let k = 6;
    let cfg = train_config(2 * k);
    let mut straight =
        Trainer::new(corpus.clone(), model.clone(), cfg.clone(), DeviceSpec::Cpu).expect("trainer");
    let expected: Vec<f64> = (0..2 * k)
        .map(|_| straight.train_step().expect("step").loss)
        .collect();

    let dir = tempfile::tempdir().expect("tempdir");
    let run = run_dir(dir.path(), &source, &model, &cfg, &corpus);
    let mut first =
        Trainer::new(corpus.clone(), model.clone(), cfg.clone(), DeviceSpec::Cpu).expect("trainer");
    let mut got: Vec<f64> = (0..k)
        .map(|_| first.train_step().expect("step").loss)
        .collect();
    checkpoint::save(&run, &first, 2).expect("checkpoint");
    drop(first);
    let (mut resumed, _) = checkpoint::resume(dir.path(), None).expect("resume");
    assert_eq!(resumed.state().step, k);
    got.extend((0..k).map(|_| resumed.train_step().expect("step").loss));
    assert_eq!(got, expected, "resumed losses differ from the straight run");
    // And training moved: the losses are not all one value.
    assert!(expected[0] != expected[2 * k as usize - 1]);
}

#[test]
fn transformer_resumes_exactly() {
    exact_resume(small_transformer());
}

#[test]
fn lstm_resumes_exactly_with_its_carried_state() {
    exact_resume(small_lstm());
}

/// Every float parameter of a model, in visit order.
pub(crate) fn parameters(model: &conelab_train::model::LanguageModel) -> Vec<Vec<f32>> {
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::prelude::Tensor;
    struct Collect(Vec<Vec<f32>>);
    impl ModuleVisitor for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0
                .push(param.val().try_into_vec_as::<f32>().expect("parameter"));
        }
    }
    let mut c = Collect(Vec::new());
    model.visit(&mut c);
    c.0
}

/// The LSTM's layers on the host (model/lstm_host.rs, the default on burn-flex and LibTorch CPU)
/// train exactly as burn's autodiff graph of the same layers: the same losses, gradient norms and
/// every parameter after a few plain-SGD steps (an update proportional to the gradient: AdamW
/// would hide a gradient off by a constant factor), under objectives that reach the hidden states
/// and W in every way the step has (the fused head with AGG's gates, CosReg, freezing; NCE-R; AND; DEV
/// with unlikelihood and the Laplacian; spectrum control, where W is composed from U, σ, V on both
/// sides of the LSTM), with dropout on and the state carried across windows.
#[test]
fn the_host_lstm_trains_exactly_as_burns_graph() {
    use conelab_core::objective::{LossKind, Objectives};
    use conelab_core::train_config::OptimizerKind;
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let mut variants: Vec<(&str, Objectives)> = vec![("MLE", Objectives::default())];
    let mut o = Objectives::default();
    o.agg.enabled = true;
    o.cos.enabled = true;
    o.apply_freeze_arg("rare@2").expect("parses");
    variants.push(("AGG + CosReg + freeze", o));
    variants.push((
        "NCE-R",
        Objectives {
            loss: LossKind::NceR,
            ..Objectives::default()
        },
    ));
    variants.push((
        "AND",
        Objectives {
            loss: LossKind::And,
            ..Objectives::default()
        },
    ));
    let mut o = Objectives::default();
    o.dev.enabled = true;
    o.ul.enabled = true;
    o.lap.enabled = true;
    variants.push(("DEV + UL + Laplacian", o));
    let mut o = Objectives::default();
    o.spectrum.enabled = true;
    variants.push(("spectrum control", o));
    let config = TrainConfig {
        optimizer: OptimizerKind::Sgd,
        lr: 0.5,
        clip_norm: 0.0,
        warmup: 0,
        ..train_config(8)
    };
    for (name, objectives) in variants {
        let run = |host: bool| {
            let mut trainer = Trainer::new(
                corpus.clone(),
                small_lstm(),
                config.clone(),
                DeviceSpec::Cpu,
            )
            .expect("trainer");
            trainer.set_host_lstm(host);
            trainer.set_objectives(objectives.clone()).expect("valid");
            let before = parameters(trainer.model());
            let stats: Vec<(f64, f64)> = (0..4)
                .map(|_| {
                    let s = trainer.train_step().expect("step");
                    (s.loss + s.penalty, s.grad_norm)
                })
                .collect();
            // The comparison means something only if the host run took the host path.
            assert_eq!(trainer.lstm_on_host(), host, "{name}: the path taken");
            let valid = trainer.evaluate(Split::Valid).expect("evaluation");
            let stats = [(valid.ppl, valid.outputs.mu_z)]
                .into_iter()
                .chain(stats)
                .collect::<Vec<_>>();
            (stats, before, parameters(trainer.model()))
        };
        let (graph, host) = (run(false), run(true));
        // Entry 0: the validation PPL and mean log Z after the steps (evaluation on the host
        // too); then each step's loss and gradient norm.
        for (entry, (g, h)) in graph.0.iter().zip(&host.0).enumerate() {
            let pairs = if entry == 0 {
                [
                    ("validation PPL", g.0, h.0),
                    ("validation mean log Z", g.1, h.1),
                ]
            } else {
                [("loss", g.0, h.0), ("gradient norm", g.1, h.1)]
            };
            for (what, a, b) in pairs {
                assert!(
                    (a - b).abs() <= 1e-5 * a.abs().max(1.0),
                    "{name}, entry {entry} (0: evaluation, then steps): {what} {a} (graph) vs {b} (host)"
                );
            }
        }
        assert_eq!(graph.2.len(), host.2.len());
        let mut moved = 0;
        for (i, ((g, h), start)) in graph.2.iter().zip(&host.2).zip(&graph.1).enumerate() {
            let worst = g
                .iter()
                .zip(h)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            let change = g
                .iter()
                .zip(start)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst <= 1e-5 + 1e-3 * change,
                "{name}: parameter {i} differs by {worst} after 4 steps (it moved by {change})"
            );
            moved += usize::from(change > 1e-3);
        }
        // Every LSTM weight and bias (8 per layer, 2 layers) moved, and the embedding.
        assert!(moved >= 17, "{name}: only {moved} parameters moved");
    }
}

/// `Trainer::use_device_paths` (the paths `bench ops` counts, CUDA's): an LSTM in burn's graph
/// and AdamW in burn's tensor ops (burn-flex) train as the host paths do. Dropout off: burn draws other
/// masks than the host's.
#[test]
fn the_device_paths_train_as_the_host_paths() {
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let without_dropout = |model: ModelConfig| match model {
        ModelConfig::Lstm(mut l) => {
            l.dropout = 0.0;
            ModelConfig::Lstm(l)
        }
        ModelConfig::Transformer(mut t) => {
            t.dropout = 0.0;
            ModelConfig::Transformer(t)
        }
    };
    for model in [small_transformer(), small_lstm()].map(without_dropout) {
        let run = |device_paths: bool| {
            let mut trainer = Trainer::new(
                corpus.clone(),
                model.clone(),
                train_config(4),
                DeviceSpec::Cpu,
            )
            .expect("trainer");
            if device_paths {
                trainer.use_device_paths();
            }
            let losses: Vec<f64> = (0..4)
                .map(|_| trainer.train_step().expect("step").loss)
                .collect();
            let lstm = matches!(model, ModelConfig::Lstm(_));
            assert_eq!(
                trainer.lstm_on_host(),
                lstm && !device_paths,
                "the path taken"
            );
            (losses, parameters(trainer.model()))
        };
        let (host, device) = (run(false), run(true));
        for (step, (a, b)) in host.0.iter().zip(&device.0).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * a.abs().max(1.0),
                "step {step}: loss {a} (host paths) vs {b} (device paths)"
            );
        }
        let worst = host
            .1
            .iter()
            .flatten()
            .zip(device.1.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst < 1e-5,
            "parameters differ by {worst} after four steps"
        );
    }
}

#[test]
fn tiny_beats_the_unigram_model_on_the_synthetic_corpus() {
    let _turn = one_trainer();
    let corpus = Arc::new(
        Corpus::load(&CorpusSource::parse("synthetic"), &LoadOptions::default()).expect("corpus"),
    );
    // Unigram PPL on valid from the train counts (add-one smoothed), computed here independently.
    let counts = corpus.vocab().counts();
    let total: f64 = counts.iter().map(|&c| c as f64 + 1.0).sum();
    let valid = corpus.split(Split::Valid);
    let nll: f64 = valid[1..]
        .iter()
        .map(|&y| -((counts[y as usize] as f64 + 1.0) / total).ln())
        .sum::<f64>()
        / (valid.len() - 1) as f64;
    let unigram_ppl = nll.exp();

    let cfg = TrainConfig {
        batch: 8,
        steps: 200,
        lr: 3e-3,
        warmup: 20,
        eval_every: 0,
        checkpoint_every: 0,
        snapshot_every: 0,
        ..TrainConfig::default()
    };
    let mut t =
        Trainer::new(corpus.clone(), Preset::Tiny.config(), cfg, DeviceSpec::Cpu).expect("trainer");
    while !t.is_done() {
        t.train_step().expect("step");
    }
    let eval = t.evaluate(Split::Valid).expect("eval");
    eprintln!("valid PPL {:.1} vs unigram {:.1}", eval.ppl, unigram_ppl);
    assert!(
        eval.ppl < unigram_ppl,
        "valid PPL {} is not below the unigram PPL {}",
        eval.ppl,
        unigram_ppl
    );
    assert_eq!(
        eval.positions as usize,
        valid.len() - 1,
        "every position evaluated once"
    );
    // Per-group PPLs recombine into the total: exp of the position-weighted mean log-PPL.
    let recombined = (eval
        .groups
        .iter()
        .map(|(p, n)| p.ln() * *n as f64)
        .sum::<f64>()
        / eval.positions as f64)
        .exp();
    assert!((recombined - eval.ppl).abs() / eval.ppl < 1e-9);
}

fn next_event(handle: &engine::EngineHandle) -> Event {
    handle
        .events()
        .recv_timeout(Duration::from_secs(120))
        .expect("an engine event")
}

/// Every evaluation says it has begun (done 0 of the split's prediction positions) before its
/// result, its progress never goes back or past the total, and its result counts the same
/// positions (issue #37: a validation pass was invisible).
#[test]
fn an_evaluation_reports_its_progress_before_its_result() {
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let valid_positions = corpus.split(Split::Valid).len() as u64 - 1;
    let trainer = Trainer::new(
        corpus,
        small_transformer(),
        TrainConfig {
            eval_every: 4,
            ..train_config(8)
        },
        DeviceSpec::Cpu,
    )
    .expect("trainer");
    let handle = engine::spawn(trainer, engine::EngineOptions::default()).expect("engine");
    let mut progress: Vec<(String, u64, u64)> = Vec::new();
    let mut evals = Vec::new();
    loop {
        match next_event(&handle) {
            Event::EvalProgress {
                split, done, total, ..
            } => progress.push((split, done, total)),
            Event::Eval(e) => {
                // This evaluation's progress came first, and began at 0.
                let own: Vec<_> = progress.iter().filter(|(s, ..)| *s == e.split).collect();
                let first = own.first().expect("progress before the result");
                assert_eq!(first.1, 0, "{own:?}");
                for w in own.windows(2) {
                    assert!(w[0].1 <= w[1].1, "{own:?}");
                }
                assert!(
                    own.iter().all(|(_, d, t)| d <= t && *t == e.positions),
                    "{own:?} vs {}",
                    e.positions
                );
                if e.split == "valid" {
                    // Every position of the split once: n − 1 for n tokens.
                    assert_eq!(e.positions, valid_positions);
                }
                evals.push((e.split.clone(), e.step));
                progress.clear();
            }
            Event::Finished { .. } => break,
            Event::Failed { message, .. } => panic!("engine failed: {message}"),
            _ => {}
        }
    }
    handle.join();
    // Validation at 4 and 8, then the test pass: each with its progress.
    assert_eq!(
        evals,
        vec![
            ("valid".to_string(), 4),
            ("valid".to_string(), 8),
            ("test".to_string(), 8)
        ]
    );
}

#[test]
fn a_command_takes_effect_at_the_next_step_and_is_recorded_with_it() {
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let trainer = Trainer::new(
        corpus,
        small_transformer(),
        train_config(30),
        DeviceSpec::Cpu,
    )
    .expect("trainer");
    let handle = engine::spawn(trainer, engine::EngineOptions::default()).expect("engine");
    let mut lrs = std::collections::BTreeMap::new();
    let mut applied = None;
    loop {
        match next_event(&handle) {
            Event::Step(s) => {
                lrs.insert(s.step, s.lr);
                if s.step == 3 {
                    handle.send(Command::SetLr { lr: 0.0123 });
                }
            }
            Event::Applied(a) => applied = Some(a),
            Event::Finished { .. } => break,
            Event::Failed { message, .. } => panic!("engine failed: {message}"),
            _ => {}
        }
    }
    handle.join();
    let a = applied.expect("the command was acknowledged");
    assert!(a.step >= 4, "applied at step {}", a.step);
    // The cosine schedule stops there, and the acknowledgement says so.
    assert_eq!(
        a.change.after_text(),
        format!("lr=1.230000e-2 (schedule off from step {})", a.step)
    );
    assert_eq!(
        lrs[&a.step], 0.0123,
        "the step it names ran with the new lr"
    );
    assert_ne!(lrs[&(a.step - 1)], 0.0123, "the step before did not");
    assert!(lrs.range(a.step..).all(|(_, &lr)| lr == 0.0123));
}

/// `--freeze rare@5`: the thaw is an applied change at step 5, once, seen like any other.
#[test]
fn a_freeze_until_a_step_ends_with_an_applied_change_at_that_step() {
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let mut trainer = Trainer::new(
        corpus,
        small_transformer(),
        train_config(8),
        DeviceSpec::Cpu,
    )
    .expect("trainer");
    let mut objectives = trainer.objectives().clone();
    objectives.apply_freeze_arg("rare@5").expect("parses");
    trainer.set_objectives(objectives).expect("valid");
    let handle = engine::spawn(trainer, engine::EngineOptions::default()).expect("engine");
    let mut applied = Vec::new();
    loop {
        match next_event(&handle) {
            Event::Applied(a) => applied.push(a),
            Event::Rejected { reason, .. } => panic!("refused: {reason}"),
            Event::Finished { .. } => break,
            Event::Failed { message, .. } => panic!("engine failed: {message}"),
            _ => {}
        }
    }
    handle.join();
    assert_eq!(applied.len(), 1, "{applied:?}");
    let a = &applied[0];
    assert_eq!(a.step, 5);
    assert_eq!(a.change.before_text(), "freeze rare until 5");
    assert_eq!(a.change.after_text(), "MLE");
    assert!(a.ticket.is_none());
}

/// A paused run takes at most `COMMANDS_PER_STEP` commands a second (no step paces them): a
/// flood of distinct settings is applied in order, all of it, but no faster.
#[test]
fn commands_to_a_paused_run_are_paced() {
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let trainer = Trainer::new(
        corpus,
        small_transformer(),
        train_config(1_000),
        DeviceSpec::Cpu,
    )
    .expect("trainer");
    let handle = engine::spawn(
        trainer,
        engine::EngineOptions {
            initial_commands: vec![Command::Pause],
            ..engine::EngineOptions::default()
        },
    )
    .expect("engine");
    while !matches!(next_event(&handle), Event::Paused { .. }) {}
    let flood = 3 * engine::COMMANDS_PER_STEP;
    let started = std::time::Instant::now();
    for i in 0..flood {
        handle.send(Command::SetLr {
            lr: 1e-3 + i as f64 * 1e-7,
        });
    }
    let mut applied_at = Vec::new();
    while applied_at.len() < flood {
        if let Event::Applied(_) = next_event(&handle) {
            applied_at.push(started.elapsed());
        }
    }
    // Within the first period, no more than a period's share.
    let early = applied_at
        .iter()
        .filter(|t| **t < engine::PAUSED_COMMAND_PERIOD)
        .count();
    assert!(
        early <= engine::COMMANDS_PER_STEP,
        "{early} in the first second"
    );
    // All of them applied by the third period's end, none lost.
    assert_eq!(applied_at.len(), flood);
    handle.send(Command::Stop { save: false });
    while !matches!(next_event(&handle), Event::Finished { .. }) {}
    handle.join();
}

#[test]
fn pause_resume_and_stop_with_save() {
    let _turn = one_trainer();
    let (source, corpus) = small_synthetic();
    let cfg = train_config(1_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let run = run_dir(dir.path(), &source, &small_transformer(), &cfg, &corpus);
    let trainer = Trainer::new(corpus, small_transformer(), cfg, DeviceSpec::Cpu).expect("trainer");
    // The pause is given with the start: sent after it, the first step could win the race.
    let handle = engine::spawn(
        trainer,
        engine::EngineOptions {
            initial_commands: vec![Command::Pause],
            ..engine::EngineOptions::with_checkpoints(checkpoint::Checkpointer::immediate(
                run.clone(),
            ))
        },
    )
    .expect("engine");
    let mut seen_pause = false;
    let mut steps_while_paused = 0;
    loop {
        match next_event(&handle) {
            Event::Paused { .. } => {
                seen_pause = true;
                handle.send(Command::SaveCheckpoint);
                handle.send(Command::Resume);
            }
            Event::Step(s) => {
                if !seen_pause {
                    steps_while_paused += 1;
                }
                if s.step == 5 {
                    handle.send(Command::Stop { save: true });
                }
            }
            Event::Finished { step, .. } => {
                assert!(step >= 5);
                break;
            }
            Event::Failed { message, .. } => panic!("{message}"),
            _ => {}
        }
    }
    handle.join();
    assert!(seen_pause);
    assert_eq!(
        steps_while_paused, 0,
        "a pause sent before the first step holds it"
    );
    let ckpts = run.checkpoints().expect("list");
    assert!(
        ckpts.len() == 2,
        "step-000000 from the save, and the one at stop: {ckpts:?}"
    );
}

#[test]
fn divergence_pauses_the_engine_without_applying_the_step() {
    let _turn = one_trainer();
    let (source, corpus) = small_synthetic();
    let mut cfg = train_config(50);
    cfg.clip_norm = 0.0;
    let dir = tempfile::tempdir().expect("tempdir");
    let run = run_dir(dir.path(), &source, &small_transformer(), &cfg, &corpus);
    let trainer = Trainer::new(corpus, small_transformer(), cfg, DeviceSpec::Cpu).expect("trainer");
    let handle = engine::spawn(
        trainer,
        engine::EngineOptions::with_checkpoints(checkpoint::Checkpointer::immediate(run.clone())),
    )
    .expect("engine");
    handle.send(Command::SaveCheckpoint);
    handle.send(Command::SetLr { lr: 1e30 });
    let diverged_at = loop {
        match next_event(&handle) {
            Event::Diverged { step, loss } => {
                assert!(!loss.is_finite());
                break step;
            }
            Event::Finished { .. } => panic!("a learning rate of 1e30 should diverge"),
            Event::Failed { message, .. } => panic!("{message}"),
            _ => {}
        }
    };
    assert!(matches!(next_event(&handle), Event::Paused { .. }));
    // The step at 1e30 before it took the weights to ~1e30 with a finite loss: resuming at a
    // lower lr cannot recover them, and the run says so, typed (the header's advice follows it).
    match next_event(&handle) {
        Event::WeightsBroken { reason, .. } => {
            assert!(reason.contains("did not survive"), "{reason}");
        }
        other => panic!("expected the weights' breakage, got {other:?}"),
    }
    // Issue #58 item 3: "stop and save" here failed on the unsaveable weights (status failed,
    // exit 4, where headless says diverged, exit 3). The stop saves nothing and ends diverged.
    handle.send(Command::Stop { save: true });
    loop {
        match next_event(&handle) {
            Event::Finished { step, reason } => {
                assert_eq!(step, diverged_at - 1, "the diverging step was not applied");
                assert_eq!(reason, conelab_core::events::FinishReason::Diverged);
                break;
            }
            Event::Failed { message, .. } => panic!("a stop after a divergence failed: {message}"),
            _ => {}
        }
    }
    handle.join();
    let ckpts = run.checkpoints().expect("list");
    assert_eq!(
        ckpts.len(),
        1,
        "only the good checkpoint from before: {ckpts:?}"
    );
}

#[test]
fn a_rejected_command_is_reported_not_applied() {
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let trainer = Trainer::new(
        corpus,
        small_transformer(),
        train_config(3),
        DeviceSpec::Cpu,
    )
    .expect("trainer");
    let handle = engine::spawn(trainer, engine::EngineOptions::default()).expect("engine");
    handle.send(Command::SetLr { lr: -1.0 });
    let mut rejected = false;
    loop {
        match next_event(&handle) {
            Event::Rejected { reason, .. } => {
                assert!(reason.contains("learning rate"));
                rejected = true;
            }
            Event::Applied(a) => panic!("applied {a:?}"),
            Event::Finished { .. } => break,
            _ => {}
        }
    }
    handle.join();
    assert!(rejected);
}

/// The gradients' squared sum in f64, read out parameter by parameter.
fn f64_squared_norm(
    model: &conelab_train::model::LanguageModel,
    grads: &burn::optim::GradientsParams,
) -> f64 {
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::prelude::Tensor;
    struct Sum<'a>(&'a burn::optim::GradientsParams, f64, usize);
    impl ModuleVisitor for Sum<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.0.get::<D>(param.id) {
                let v = g.try_into_vec_as::<f64>().expect("read");
                self.1 += v.iter().map(|x| x * x).sum::<f64>();
                self.2 += 1;
            }
        }
    }
    let mut sum = Sum(grads, 0.0, 0);
    model.visit(&mut sum);
    assert!(sum.2 > 3, "gradients of several parameters");
    sum.1
}

/// The global norm the clip takes (on burn-flex, a host pass over the gradients' buffers)
/// against the gradients read out and summed in f64, and the clipped gradients' norm against
/// the bound.
#[test]
fn the_clip_takes_the_f64_norm_of_every_gradient_and_scales_to_the_bound() {
    use burn::prelude::{Int, Tensor, TensorData};
    let (_, corpus) = small_synthetic();
    let device = DeviceSpec::Cpu.training_device().expect("flex");
    let model = conelab_train::model::LanguageModel::new(
        &small_transformer(),
        corpus.vocab().len(),
        &device,
    );
    let (b, t) = (4, 16);
    let tokens: Vec<i64> = (0..b * t).map(|i| (i * 37 % 300) as i64).collect();
    let targets: Vec<i64> = (0..b * t).map(|i| (i * 11 % 300) as i64).collect();
    let x = Tensor::<2, Int>::from_data(TensorData::new(tokens, [b, t]), &device);
    let y = Tensor::<1, Int>::from_data(TensorData::new(targets, [b * t]), &device);
    let (h, _) = model.hidden(x, None);
    let loss = conelab_train::model::output::mean_nll(model.logits(h), y);
    let grads = burn::optim::GradientsParams::from_grads(loss.backward(), &model);
    let want = f64_squared_norm(&model, &grads).sqrt();
    let bound = want / 3.0;
    let (clipped, norm) = engine::clip_global_norm(&model, grads, bound);
    assert!(
        (norm - want).abs() <= 1e-9 * want,
        "norm {norm} against {want}"
    );
    let after = f64_squared_norm(&model, &clipped).sqrt();
    assert!(
        (after - bound).abs() <= 1e-5 * bound,
        "clipped to {after}, bound {bound}"
    );
}

/// `weights_check` (what may be checkpointed): a fresh model passes with its largest |w| (read
/// back on the host independently), and one step at an lr of 1e30 takes the weights beyond the
/// bound while the step's own loss was finite.
#[test]
fn the_weights_check_gives_the_largest_weight_and_refuses_a_blow_up() {
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let model = Preset::Tiny.config();
    let trainer = Trainer::new(
        corpus.clone(),
        model.clone(),
        train_config(2),
        DeviceSpec::Cpu,
    )
    .expect("trainer");
    let want = parameters(trainer.model())
        .iter()
        .flatten()
        .fold(0f32, |m, w| m.max(w.abs())) as f64;
    let got = trainer.weights_check().expect("a fresh model passes");
    assert_eq!(got, want);
    let config = TrainConfig {
        lr: 1e30,
        warmup: 0,
        clip_norm: 0.0,
        ..train_config(2)
    };
    let mut blown = Trainer::new(corpus, model, config, DeviceSpec::Cpu).expect("trainer");
    let stats = blown.train_step().expect("the first step's loss is finite");
    assert!(stats.loss.is_finite());
    let why = blown.weights_check().expect_err("weights of ~1e30");
    assert!(why.contains("beyond the bound 1e6"), "{why}");
}

/// A command over the socket goes through the same bounds as the flags (issue: `--nce-noise`
/// 10¹³ sent to a live run was acknowledged and ate memory): refused, the objectives unchanged.
#[test]
fn a_command_beyond_the_bounds_is_refused_and_changes_nothing() {
    use conelab_core::objective::{LossKind, ObjectiveChange};
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let mut trainer = Trainer::new(
        corpus,
        Preset::Tiny.config(),
        train_config(2),
        DeviceSpec::Cpu,
    )
    .expect("trainer");
    let before = trainer.objectives().clone();
    let mut huge = before.clone();
    huge.loss = LossKind::Nce;
    huge.nce.noise = 10_000_000_000_000;
    let refused = trainer
        .apply(&Command::Objective {
            change: ObjectiveChange::Set {
                objectives: Box::new(huge),
            },
        })
        .expect_err("k beyond N");
    assert!(
        refused.to_string().contains("at most the vocabulary size"),
        "{refused}"
    );
    assert_eq!(trainer.objectives(), &before);
    let step = trainer.train_step().expect("training goes on");
    assert!(step.loss.is_finite());
}

/// The parameter count written out from the configuration (what the start-time memory bound
/// uses, before anything is allocated) is the built model's, for every preset, with and without
/// an output bias.
#[test]
fn the_parameter_count_from_the_configuration_is_the_models() {
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let vocab = corpus.vocab().len();
    for preset in [Preset::Tiny, Preset::Small, Preset::Lstm, Preset::Awd] {
        for bias in [false, true] {
            let mut model = preset.config();
            model.set_output_bias(bias);
            let trainer = Trainer::new(corpus.clone(), model, train_config(1), DeviceSpec::Cpu)
                .expect("trainer");
            assert_eq!(
                trainer.model_config().parameter_count(vocab),
                trainer.parameters() as f64,
                "{} (output bias {bias})",
                preset.name()
            );
        }
    }
}

/// Counts the checkpoints an engine writes (and the steps they were at).
struct CountingSink(Arc<std::sync::Mutex<Vec<u64>>>);

impl engine::CheckpointSink for CountingSink {
    fn run_dir(&self) -> Option<std::path::PathBuf> {
        None
    }
    fn save(
        &mut self,
        trainer: &Trainer,
    ) -> Result<engine::SavedCheckpoint, conelab_core::run_dir::CheckpointError> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(trainer.state().step);
        Ok(engine::SavedCheckpoint::Committed(
            std::path::PathBuf::from("nowhere"),
        ))
    }
    fn save_best(
        &mut self,
        _: &Trainer,
        _: f64,
    ) -> Result<Option<std::path::PathBuf>, conelab_core::run_dir::CheckpointError> {
        Ok(None)
    }
}

/// A flood of commands cannot stall training or grow the run: 200 `save-checkpoint` and 1,500
/// `set-lr` sent at once are all acknowledged, in order, at most `COMMANDS_PER_STEP` between two
/// steps (training goes on meanwhile); a checkpoint is written once per step however often it is
/// asked for; and the run's command log keeps the newest `COMMAND_LOG`.
#[test]
fn a_flood_of_commands_is_applied_in_order_a_few_per_step() {
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let trainer = Trainer::new(
        corpus,
        small_transformer(),
        train_config(2_000),
        DeviceSpec::Cpu,
    )
    .expect("trainer");
    let saves = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handle = engine::spawn(
        trainer,
        engine::EngineOptions::with_checkpoints(CountingSink(saves.clone())),
    )
    .expect("engine");
    let sent = 1_700usize;
    let mut applied: Vec<(u64, Command)> = Vec::new();
    loop {
        match next_event(&handle) {
            Event::Step(s) if s.step == 2 => {
                for _ in 0..200 {
                    handle.send(Command::SaveCheckpoint);
                }
                for k in 0..1_500 {
                    handle.send(Command::SetLr {
                        lr: 1e-3 + k as f64 * 1e-7,
                    });
                }
            }
            Event::Applied(a) if !matches!(a.command, Command::Stop { .. }) => {
                applied.push((a.step, a.command.clone()));
                if applied.len() == sent {
                    handle.send(Command::Stop { save: false });
                }
            }
            Event::Finished { .. } => break,
            Event::Failed { message, .. } => panic!("engine failed: {message}"),
            _ => {}
        }
    }
    handle.join();
    assert_eq!(applied.len(), sent, "every command acknowledged");
    // In the order sent.
    assert!(
        applied[..200]
            .iter()
            .all(|(_, c)| *c == Command::SaveCheckpoint)
    );
    for (k, (_, c)) in applied[200..].iter().enumerate() {
        assert_eq!(
            *c,
            Command::SetLr {
                lr: 1e-3 + k as f64 * 1e-7
            }
        );
    }
    // A few between two steps: the flood spans many steps.
    let mut per_step = std::collections::BTreeMap::new();
    for (step, _) in &applied {
        *per_step.entry(*step).or_insert(0usize) += 1;
    }
    let most = per_step.values().copied().max().unwrap_or(0);
    assert!(
        most <= engine::COMMANDS_PER_STEP,
        "{most} commands before one step"
    );
    assert!(per_step.len() >= sent / engine::COMMANDS_PER_STEP);
    // One checkpoint a step at most.
    let saves = saves.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut distinct = saves.clone();
    distinct.dedup();
    assert_eq!(
        saves, distinct,
        "a step's checkpoint written once: {saves:?}"
    );
    assert!(
        saves.len() <= 200usize.div_ceil(engine::COMMANDS_PER_STEP) + 1,
        "{saves:?}"
    );
}

/// The run's command log (in `state.json`, carried by every checkpoint) keeps the newest
/// `COMMAND_LOG` commands.
#[test]
fn the_command_log_is_bounded() {
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let mut t = Trainer::new(
        corpus,
        small_transformer(),
        train_config(10),
        DeviceSpec::Cpu,
    )
    .expect("trainer");
    let lr = |k: usize| Command::SetLr {
        lr: 1e-3 + k as f64 * 1e-7,
    };
    for k in 0..1_500 {
        t.apply(&lr(k)).expect("applied");
    }
    let log = &t.state().commands;
    assert_eq!(log.len(), engine::COMMAND_LOG);
    assert_eq!(log.last().map(|a| a.command.clone()), Some(lr(1_499)));
    assert_eq!(log.first().map(|a| a.command.clone()), Some(lr(500)));
}

/// The same command sent again and again (a stuck key, a script in a loop) is answered every
/// time but applied once between two steps: the others come back `coalesced`, unchanged, so
/// the run's logs and its store grow by one command a step, not by the flood.
#[test]
fn repeated_identical_commands_are_coalesced_and_still_answered() {
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let trainer = Trainer::new(
        corpus,
        small_transformer(),
        train_config(2_000),
        DeviceSpec::Cpu,
    )
    .expect("trainer");
    let handle = engine::spawn(trainer, engine::EngineOptions::default()).expect("engine");
    let sent = 300usize;
    let same = Command::SetLr { lr: 2e-3 };
    let mut answers: Vec<(u64, bool)> = Vec::new();
    loop {
        match next_event(&handle) {
            Event::Step(s) if s.step == 2 => {
                for _ in 0..sent {
                    handle.send(same.clone());
                }
            }
            Event::Applied(a) if a.command == same => {
                answers.push((a.step, a.coalesced));
                if a.coalesced {
                    assert_eq!(
                        a.change.before_text(),
                        a.change.after_text(),
                        "a coalesced command changes nothing"
                    );
                }
                if answers.len() == sent {
                    handle.send(Command::Stop { save: false });
                }
            }
            Event::Finished { .. } => break,
            Event::Failed { message, .. } => panic!("engine failed: {message}"),
            _ => {}
        }
    }
    handle.join();
    assert_eq!(answers.len(), sent, "every command answered");
    let mut applied_at: Vec<u64> = answers.iter().filter(|a| !a.1).map(|a| a.0).collect();
    let steps: std::collections::BTreeSet<u64> = answers.iter().map(|a| a.0).collect();
    // Applied once at each step the flood spans (the first of each batch), never twice.
    let n = applied_at.len();
    applied_at.dedup();
    assert_eq!(
        applied_at.len(),
        n,
        "applied twice at one step: {answers:?}"
    );
    assert_eq!(n, steps.len(), "{answers:?}");
    assert!(n <= sent.div_ceil(engine::COMMANDS_PER_STEP), "{n} applied");
    assert!(!answers[0].1 && answers[1].1, "{:?}", &answers[..2]);
}

/// Switching off a regulariser that is off changes nothing: the answer says so (`coalesced`,
/// before = after), so no viewer draws an intervention and no log says "MLE → MLE"; switching
/// it on is a real change.
#[test]
fn an_objective_change_that_changes_nothing_is_answered_as_such() {
    use conelab_core::objective::{ObjectiveChange, Term};
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let trainer = Trainer::new(
        corpus,
        small_transformer(),
        train_config(3),
        DeviceSpec::Cpu,
    )
    .expect("trainer");
    let handle = engine::spawn(trainer, engine::EngineOptions::default()).expect("engine");
    let change = |on| Command::Objective {
        change: ObjectiveChange::Enable {
            term: Term::Cos,
            on,
        },
    };
    handle.send(change(false));
    handle.send(change(true));
    let mut answers = Vec::new();
    loop {
        match next_event(&handle) {
            Event::Applied(a) => {
                answers.push((a.coalesced, a.change.before_text() == a.change.after_text()))
            }
            Event::Finished { .. } => break,
            Event::Failed { message, .. } => panic!("{message}"),
            _ => {}
        }
    }
    handle.join();
    assert_eq!(answers, [(true, true), (false, false)]);
}

/// Issue #38 part 2: the per-position scores a bootstrap resamples. Every target of the split is
/// scored exactly once (the streams, the last shorter window and the leftover after the last
/// stream: 7 streams leave some), their mean is the evaluation's loss, and summed by sentence
/// and group they give the evaluation's own per-group perplexities — for a Transformer and an
/// LSTM (whose state is carried into the leftover).
#[test]
fn scored_positions_cover_the_split_once_and_add_up_to_the_evaluation() {
    use conelab_metrics::bootstrap::SentenceScores;
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    for model in [small_transformer(), small_lstm()] {
        let mut config = train_config(2);
        config.eval_batch = 7;
        let mut t = Trainer::new(corpus.clone(), model, config, DeviceSpec::Cpu).expect("trainer");
        t.train_step().expect("step");
        let (stats, lp) = t.evaluate_scored(Split::Valid).expect("scored");
        let tokens = corpus.split(Split::Valid);
        assert_eq!(lp.len(), tokens.len());
        assert!(lp[0].is_nan(), "token 0 is never a target");
        assert!(
            lp[1..].iter().all(|x| x.is_finite() && *x <= 0.0),
            "every target scored"
        );
        assert_ne!(
            (tokens.len() - 1) % 7,
            0,
            "the split leaves a leftover after 7 streams"
        );
        let mean: f64 = -lp[1..].iter().map(|&x| f64::from(x)).sum::<f64>() / (lp.len() - 1) as f64;
        assert!(
            (mean - stats.loss).abs() < 1e-5 * stats.loss,
            "{mean} vs {}",
            stats.loss
        );
        let groups = corpus.groups();
        let scores = SentenceScores::new(tokens, &lp, corpus.vocab().eos(), |t| {
            groups.group_of(t) as usize
        })
        .expect("scores");
        let ppl = scores.ppl();
        for (g, &(want, _)) in stats.groups.iter().enumerate() {
            assert!(
                (ppl[g] - want).abs() < 1e-4 * want,
                "group {g}: {} vs {want}",
                ppl[g]
            );
        }
        assert!((ppl[3] - stats.ppl).abs() < 1e-4 * stats.ppl);
    }
}

/// `--patience 2`: with a learning rate too small to move an f32 weight (1e-30), every
/// validation PPL equals the first, so none improves on the best: validation at 2 is the best, 4
/// and 6 are two in a row without improvement, and the run ends at step 6 of 100 — completed,
/// with a warning that says why, after the test split's evaluation, and with the state's count.
#[test]
fn patience_ends_a_run_whose_validation_stops_improving() {
    let _turn = one_trainer();
    let (_, corpus) = small_synthetic();
    let trainer = Trainer::new(
        corpus,
        small_transformer(),
        TrainConfig {
            eval_every: 2,
            lr: 1e-30,
            patience: Some(2),
            ..train_config(100)
        },
        DeviceSpec::Cpu,
    )
    .expect("trainer");
    let handle = engine::spawn(trainer, engine::EngineOptions::default()).expect("engine");
    let (mut valid, mut warned, mut tested) = (Vec::new(), None, false);
    let finished = loop {
        match next_event(&handle) {
            Event::Eval(e) if e.split == "valid" => valid.push((e.step, e.ppl)),
            Event::Eval(e) if e.split == "test" => tested = true,
            Event::Warning { step, message } if message.contains("stopped early") => {
                warned = Some((step, message));
            }
            Event::Finished { step, reason } => break (step, reason),
            Event::Failed { message, .. } => panic!("engine failed: {message}"),
            _ => {}
        }
    };
    handle.join();
    assert_eq!(finished, (6, conelab_core::events::FinishReason::Completed));
    assert_eq!(
        valid.iter().map(|v| v.0).collect::<Vec<_>>(),
        [2, 4, 6],
        "{valid:?}"
    );
    assert!(valid.iter().all(|v| v.1 == valid[0].1), "{valid:?}");
    let (step, message) = warned.expect("a warning saying why");
    assert_eq!(step, 6);
    assert!(
        message.contains("in 2 evaluations") && message.contains("of 100"),
        "{message}"
    );
    assert!(tested, "the final test evaluation");
}
