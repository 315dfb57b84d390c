//! The objectives inside the training loop: group freezing keeps rows bit-identical under AdamW
//! with weight decay, spectrum control switches on and off without a loss jump, DEV at α = 0 is
//! MLE, AGG reports its live rare set, and a toggle sent mid-run takes effect at exactly the next
//! step (flex here; tests/tch.rs repeats it on LibTorch CPU).

use std::sync::Arc;
use std::time::Duration;

use burn::prelude::*;
use conelab_core::events::{Command, Event};
use conelab_core::model::{DeviceSpec, ModelConfig, TransformerConfig};
use conelab_core::objective::{LossArg, ObjectiveChange, Objectives, Term};
use conelab_core::run_dir::{CorpusSpec, RunDir, RunSpec};
use conelab_core::train_config::{Schedule, TrainConfig};
use conelab_data::{Corpus, CorpusSource, Group, LoadOptions, Split, SynthConfig};
use conelab_train::checkpoint;
use conelab_train::engine::{self, Trainer};

use crate::harness::one_trainer;

fn source() -> CorpusSource {
    CorpusSource::Synthetic(SynthConfig {
        vocab: 300,
        tokens: 30_000,
        classes: 10,
        ..SynthConfig::default()
    })
}

fn corpus() -> Arc<Corpus> {
    Arc::new(Corpus::load(&source(), &LoadOptions::default()).expect("synthetic corpus"))
}

/// A run folder for `t` (its model config as it is now) trained with `train`.
fn run_dir(dir: &std::path::Path, t: &Trainer, train: TrainConfig) -> RunDir {
    let spec = RunSpec {
        conelab_version: "test".into(),
        name: "test".into(),
        device: "cpu".into(),
        group_bounds: [0.3, 0.8],
        corpus: CorpusSpec::from_source(&source()),
        model: t.model_config().clone(),
        train,
    };
    RunDir::create(dir, spec, t.corpus().vocab()).expect("run dir")
}

fn model(output_bias: bool) -> ModelConfig {
    ModelConfig::Transformer(TransformerConfig {
        d_model: 32,
        layers: 1,
        heads: 2,
        d_ff: 64,
        context: 16,
        dropout: 0.0,
        init_std: 0.02,
        output_bias,
    })
}

fn config(steps: u64, objectives: Objectives) -> TrainConfig {
    TrainConfig {
        batch: 4,
        steps,
        lr: 3e-3,
        warmup: 0,
        schedule: Schedule::Constant,
        weight_decay: 0.1,
        eval_every: 0,
        checkpoint_every: 0,
        snapshot_every: 0,
        eval_batch: 4,
        objectives,
        ..TrainConfig::default()
    }
}

fn trainer(steps: u64, objectives: Objectives, output_bias: bool) -> Trainer {
    Trainer::new(
        corpus(),
        model(output_bias),
        config(steps, objectives),
        DeviceSpec::Cpu,
    )
    .expect("trainer")
}

fn w_rows(t: &Trainer) -> Vec<f32> {
    t.model().embedding().try_into_vec_as::<f32>().expect("W")
}

fn change(t: &mut Trainer, change: ObjectiveChange) {
    t.apply(&Command::Objective { change }).expect("applied");
}

#[test]
fn frozen_rows_stay_bit_identical_under_adamw_and_train_again_when_unfrozen() {
    let _turn = one_trainer();
    let mut o = Objectives::default();
    o.apply_freeze_arg("rare").expect("freeze");
    let mut t = trainer(40, o, true);
    let rare = t.corpus().groups().range(Group::Rare);
    let d = t.model_config().embed_dim();
    let rows = |w: &[f32]| w[rare.start * d..rare.end * d].to_vec();
    let before = w_rows(&t);
    for _ in 0..10 {
        t.train_step().expect("step");
    }
    let after = w_rows(&t);
    assert_eq!(
        rows(&after).iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        rows(&before)
            .iter()
            .map(|x| x.to_bits())
            .collect::<Vec<_>>(),
        "frozen rare rows moved"
    );
    assert_ne!(
        after[..rare.start * d],
        before[..rare.start * d],
        "the other rows train"
    );
    change(
        &mut t,
        ObjectiveChange::Freeze {
            group: Group::Rare,
            frozen: false,
        },
    );
    t.train_step().expect("step");
    let moved = rows(&w_rows(&t))
        .iter()
        .zip(rows(&after))
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert!(
        moved > rows(&after).len() / 2,
        "unfrozen rows train again ({moved} moved)"
    );
}

fn valid_loss(t: &Trainer) -> f64 {
    t.evaluate(Split::Valid).expect("eval").loss
}

/// ‖UᵀU − I‖_F of the spectral factor U.
fn u_orthogonality_error(t: &Trainer) -> f32 {
    let u = t.model().spectral().expect("factors").u.val();
    let [_, k] = u.dims();
    let gram = u.clone().transpose().matmul(u);
    (gram - Tensor::eye(k, &u_device(t)))
        .square()
        .sum()
        .sqrt()
        .into_scalar::<f32>()
}

fn u_device(t: &Trainer) -> Device {
    t.device().clone()
}

#[test]
fn spectrum_control_switches_on_and_off_without_a_loss_jump() {
    let _turn = one_trainer();
    let mut t = trainer(60, Objectives::default(), true);
    for _ in 0..5 {
        t.train_step().expect("step");
    }
    let before = valid_loss(&t);
    change(
        &mut t,
        ObjectiveChange::Enable {
            term: Term::Spectrum,
            on: true,
        },
    );
    assert!(t.model().spectral().is_some());
    assert!(
        u_orthogonality_error(&t) < 1e-4,
        "U starts orthonormal (an SVD)"
    );
    let on = valid_loss(&t);
    assert!(
        ((on - before) / before).abs() <= 1e-5,
        "switching on changed the loss: {before} → {on}"
    );
    for _ in 0..10 {
        let s = t.train_step().expect("step");
        assert!(s.penalty > 0.0, "the spectrum penalty is on");
    }
    let trained = valid_loss(&t);
    change(
        &mut t,
        ObjectiveChange::Enable {
            term: Term::Spectrum,
            on: false,
        },
    );
    assert!(t.model().spectral().is_none());
    let off = valid_loss(&t);
    assert!(
        ((off - trained) / trained).abs() <= 1e-5,
        "switching off changed the loss: {trained} → {off}"
    );
    t.train_step()
        .expect("training goes on with the collapsed W");
}

/// W's singular values, descending, by faer's SVD of the composed W (a second algorithm).
fn singular_values(t: &Trainer) -> Vec<f64> {
    let w = w_rows(t);
    let d = t.model_config().embed_dim();
    let n = w.len() / d;
    let m = faer::Mat::<f64>::from_fn(n, d, |i, j| w[i * d + j] as f64);
    let mut s: Vec<f64> = m.singular_values().expect("svd").into_iter().collect();
    s.sort_by(|a, b| b.total_cmp(a));
    s
}

/// Spectrum control that acts (#38 part 5). A prior ten times W's scale (c1 = 5, W's σ ≈ 0.3):
/// the proximal σ step reaches it within 40 steps while σ in AdamW's group moves about one
/// learning rate a step and stays far; σ stays W's singular values (U, V held orthonormal);
/// and the prior's gradient stays out of the clipping norm, which AdamW's variant puts it in.
#[test]
fn the_proximal_sigma_step_reaches_the_prior_and_adamw_does_not() {
    let _turn = one_trainer();
    let run = |reg: &str, steps: usize| {
        let mut o = Objectives::default();
        o.apply_reg_arg(reg).expect("sc");
        let mut t = trainer(40, o, true);
        let first = t.train_step().expect("step");
        for _ in 1..steps {
            t.train_step().expect("step");
        }
        let spectral = t.snapshot().expect("snapshot").spectral.expect("factors");
        (first.grad_norm, spectral, singular_values(&t))
    };
    let (norm, proximal, w_sv) = run("sc=exp:1:c1=5", 40);
    assert_eq!(proximal.update, "proximal");
    let gap = |sigma: &[f64], targets: &[f64]| {
        let d: f64 = sigma
            .iter()
            .zip(targets)
            .map(|(s, t)| (s - t).powi(2))
            .sum();
        let t: f64 = targets.iter().map(|t| t * t).sum();
        (d / t).sqrt()
    };
    // The targets, independently: 5·exp(−0.01·k).
    for (k, t) in proximal.targets.iter().enumerate() {
        let want = 5.0 * (-0.01 * (k + 1) as f64).exp();
        assert!((t - want).abs() < 1e-5 * want, "t_{k}: {t} vs {want}");
    }
    let reached = gap(&proximal.sigma, &proximal.targets);
    assert!(reached < 0.05, "proximal: ‖σ − t‖/‖t‖ = {reached}");
    assert!((proximal.prior_gap() - reached).abs() < 1e-12);
    // σ are W's singular values: U and V stayed orthonormal under their penalties.
    let off = proximal
        .sigma
        .iter()
        .zip(&w_sv)
        .map(|(s, w)| (s - w).abs())
        .fold(0.0, f64::max)
        / w_sv[0];
    assert!(
        off < 0.05,
        "σ vs W's singular values: {off} (U off by {})",
        proximal.u_orth
    );
    assert!(
        (proximal.clone().against_w(&w_sv).sigma_vs_w - off).abs() < 1e-12,
        "against_w is the same comparison"
    );

    let (adam_norm, adam, _) = run("sc=exp:1:c1=5:sigma-adamw", 40);
    assert_eq!(adam.update, "adamw");
    let stuck = gap(&adam.sigma, &adam.targets);
    assert!(stuck > 0.5, "AdamW's σ: ‖σ − t‖/‖t‖ = {stuck}");

    // A prior ten times further: the proximal step's first clipping norm is the same (the prior is
    // not in it); AdamW's grows with the prior's gradient 2λ(σ − t).
    let (far_norm, _, _) = run("sc=exp:1:c1=50", 1);
    assert!(
        (far_norm - norm).abs() <= 1e-9 * norm,
        "the prior changed the clipping norm: {norm} vs {far_norm}"
    );
    let (adam_far, _, _) = run("sc=exp:1:c1=50:sigma-adamw", 1);
    assert!(
        adam_far > 2.0 * adam_norm,
        "AdamW's σ: the prior's gradient is in the norm ({adam_norm} vs {adam_far})"
    );
}

#[test]
fn the_orthogonality_penalties_keep_u_near_orthonormal() {
    let _turn = one_trainer();
    let run = |orth: &str| {
        let mut o = Objectives::default();
        o.apply_reg_arg(&format!("sc=exp:1:{orth}")).expect("sc");
        let mut t = trainer(40, o, true);
        for _ in 0..40 {
            t.train_step().expect("step");
        }
        u_orthogonality_error(&t)
    };
    let free = run("orth=0:spec=0");
    let held = run("orth=10:spec=10");
    assert!(
        held < free / 2.0 && held < 0.1,
        "‖UᵀU − I‖_F after 40 steps: {held} with the penalties, {free} without"
    );
}

#[test]
fn dev_at_zero_weight_trains_exactly_like_mle() {
    let _turn = one_trainer();
    let mut plain = trainer(10, Objectives::default(), true);
    let a: Vec<f64> = (0..4)
        .map(|_| plain.train_step().expect("step").loss)
        .collect();
    drop(plain);
    let mut o = Objectives::default();
    o.apply_reg_arg("dev=0").expect("dev");
    // DEV initialises the bias to −log N: softmax is shift-invariant, so the NLL is the same.
    let mut dev = trainer(10, o, true);
    let b: Vec<f64> = (0..4)
        .map(|_| dev.train_step().expect("step").loss)
        .collect();
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-5, "MLE {a:?} vs DEV α=0 {b:?}");
    }
}

#[test]
fn agg_reports_its_live_rare_set_and_static_groups_stop_changing() {
    let _turn = one_trainer();
    let mut o = Objectives::default();
    // 64 tokens per update: α = 0.2 occurrences per update marks the tail rare.
    o.apply_reg_arg("agg=0.2:static:memory=20").expect("agg");
    let mut t = trainer(400, o.clone(), true);
    let per_epoch = t.windows_per_epoch();
    let mut sizes = Vec::new();
    for _ in 0..per_epoch + 5 {
        let s = t.train_step().expect("step");
        sizes.push(s.rare_tokens.expect("AGG reports the rare set"));
        // The mean g1 over the rare set is the rare tokens' mean a_v: below α.
        let g1 = s.rare_g1.expect("AGG reports the rare set's mean g1");
        assert!((0.0..0.2).contains(&g1), "mean g1 {g1}");
    }
    let vocab = t.corpus().vocab().len();
    // Issue #38: the overlap with the Rare group, by the static gates' own rare set recounted.
    let s = t.train_step().expect("step");
    let rare_group = t.corpus().groups().size(Group::Rare);
    let overlap = s.rare_in_group.expect("AGG reports the overlap");
    assert!(
        overlap <= rare_group.min(s.rare_tokens.expect("rare")),
        "{overlap}"
    );
    assert!(overlap > 0, "the rarest tokens are in the Rare group");
    assert!(sizes.iter().all(|&r| r > 0), "{sizes:?}");
    assert!(sizes[20..].iter().all(|&r| r < vocab), "{sizes:?}");
    // The paper's counter starts empty and divides by K: the rare set is large at first and
    // shrinks while the memory of 20 updates fills.
    assert!(sizes[0] > sizes[19], "{sizes:?}");
    let tail = &sizes[per_epoch as usize..];
    assert!(
        tail.windows(2).all(|w| w[0] == w[1]),
        "static after epoch 1: {tail:?}"
    );
    drop(t);
    // The warm counter divides by the updates seen: one update's counts are taken at face value,
    // so fewer tokens are rare at step 1.
    o.apply_reg_arg("agg=0.2:static:memory=20:warm")
        .expect("agg");
    assert!(o.label().contains("warm"), "{}", o.label());
    let mut warm = trainer(400, o, true);
    let first = warm.train_step().expect("step").rare_tokens.expect("rare");
    assert!(first < sizes[0], "warm {first} vs paper {}", sizes[0]);
    drop(warm);
    // Gate-freeze gates the Rare group itself: the overlap is the whole set, the group's size.
    let o = Objectives {
        gate_freeze: conelab_core::objective::GateParts::B,
        ..Objectives::default()
    };
    let mut frozen = trainer(400, o, true);
    let s = frozen.train_step().expect("step");
    let rare_group = frozen.corpus().groups().size(Group::Rare);
    assert_eq!(
        (s.rare_tokens, s.rare_in_group),
        (Some(rare_group), Some(rare_group))
    );
}

#[test]
fn dev_switched_on_mid_run_adds_a_bias_that_leaves_the_nll_and_centres_log_z() {
    let _turn = one_trainer();
    let mut t = trainer(40, Objectives::default(), false);
    for _ in 0..5 {
        t.train_step().expect("step");
    }
    assert!(t.model().output_bias().is_none());
    let before = t.evaluate(Split::Valid).expect("eval");
    let vocab = t.corpus().vocab().len() as f64;
    // An MLE model's log Z sits near log N (≈ 5.7 here), far from 0.
    assert!(before.outputs.mu_z > 3.0, "μ_z {}", before.outputs.mu_z);
    change(
        &mut t,
        ObjectiveChange::Enable {
            term: Term::Dev,
            on: true,
        },
    );
    let bias = t.model().output_bias().expect("DEV added an output bias");
    let b: Vec<f32> = bias.try_into_vec_as::<f32>().expect("bias");
    assert!(b.windows(2).all(|p| p[0] == p[1]), "a uniform shift");
    assert!((b[0] as f64 + vocab.ln()).abs() < 1.5, "≈ −log N: {}", b[0]);
    let after = t.evaluate(Split::Valid).expect("eval");
    assert!(
        ((after.loss - before.loss) / before.loss).abs() < 1e-5,
        "the NLL moved: {} → {}",
        before.loss,
        after.loss
    );
    assert!(after.outputs.mu_z.abs() < 0.1, "μ_z {}", after.outputs.mu_z);
    for _ in 0..3 {
        assert!(t.train_step().expect("step").penalty > 0.0, "DEV is on");
    }
    // Off and on again: the bias stays one parameter, not a second one.
    let params = t.parameters();
    change(
        &mut t,
        ObjectiveChange::Enable {
            term: Term::Dev,
            on: false,
        },
    );
    change(
        &mut t,
        ObjectiveChange::Enable {
            term: Term::Dev,
            on: true,
        },
    );
    assert_eq!(t.parameters(), params);
}

#[test]
fn a_bias_added_mid_run_resumes_exactly() {
    let _turn = one_trainer();
    let dev_on = ObjectiveChange::Enable {
        term: Term::Dev,
        on: true,
    };
    let mut straight = trainer(12, Objectives::default(), false);
    let mut expected = Vec::new();
    for step in 0..12 {
        if step == 3 {
            change(&mut straight, dev_on.clone());
        }
        expected.push(straight.train_step().expect("step").loss);
    }
    drop(straight);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = trainer(12, Objectives::default(), false);
    // run.toml says no bias: the checkpoint's state must bring it back.
    let run = run_dir(dir.path(), &first, config(12, Objectives::default()));
    let mut got = Vec::new();
    for step in 0..6 {
        if step == 3 {
            change(&mut first, dev_on.clone());
        }
        got.push(first.train_step().expect("step").loss);
    }
    checkpoint::save(&run, &first, 2).expect("checkpoint");
    drop(first);
    let (mut resumed, _) = checkpoint::resume(dir.path(), None).expect("resume");
    assert!(
        resumed.model().output_bias().is_some(),
        "the bias came back"
    );
    got.extend((0..6).map(|_| resumed.train_step().expect("step").loss));
    assert_eq!(got, expected, "resumed losses differ from the straight run");
}

#[test]
fn a_checkpoint_from_before_the_counter_choice_resumes_with_the_warm_counter() {
    use conelab_core::objective::AggCounter;
    let _turn = one_trainer();
    let mut o = Objectives::default();
    o.apply_reg_arg("agg=0.2:memory=4").expect("agg");
    assert_eq!(
        o.agg.counter,
        AggCounter::Paper,
        "the paper's counter is the default"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let mut t = trainer(8, o.clone(), true);
    let run = run_dir(dir.path(), &t, config(8, o));
    t.train_step().expect("step");
    checkpoint::save(&run, &t, 2).expect("checkpoint");
    drop(t);
    let (resumed, _) = checkpoint::resume(dir.path(), None).expect("resume");
    assert_eq!(resumed.objectives().agg.counter, AggCounter::Paper);
    drop(resumed);
    // The same checkpoint as an older conelab wrote it: no format, no counter.
    let step_dir = conelab_core::run_dir::checkpoints_in(dir.path())
        .expect("list")
        .pop()
        .expect("a checkpoint");
    let state_path = step_dir.join("state.json");
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state_path).expect("read")).expect("json");
    let object = state.as_object_mut().expect("object");
    object.remove("format").expect("format written");
    object.remove("output_bias_added");
    object["objectives"]["agg"]
        .as_object_mut()
        .expect("agg")
        .remove("counter")
        .expect("counter written");
    std::fs::write(&state_path, serde_json::to_vec(&state).expect("json")).expect("write");
    // Checkpoints of that time had no manifest either.
    std::fs::remove_file(step_dir.join(checkpoint::MANIFEST)).expect("no manifest");
    let (old, _) = checkpoint::resume(dir.path(), None).expect("resume an old checkpoint");
    assert_eq!(old.objectives().agg.counter, AggCounter::Warm, "as it ran");
    assert!(old.objectives().label().contains("warm"));
}

/// A spectrum-control checkpoint written before the σ update was a choice (state format 1) stepped
/// σ with AdamW, and resumes so; a new one records the proximal step and keeps it.
#[test]
fn a_spectrum_checkpoint_from_before_the_sigma_choice_resumes_with_adamw() {
    use conelab_core::objective::SigmaUpdate;
    let _turn = one_trainer();
    let mut o = Objectives::default();
    o.apply_reg_arg("sc=exp:1").expect("sc");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut t = trainer(8, o.clone(), true);
    let run = run_dir(dir.path(), &t, config(8, o));
    t.train_step().expect("step");
    checkpoint::save(&run, &t, 2).expect("checkpoint");
    drop(t);
    let (resumed, _) = checkpoint::resume(dir.path(), None).expect("resume");
    assert_eq!(resumed.objectives().spectrum.sigma, SigmaUpdate::Proximal);
    drop(resumed);
    let step_dir = conelab_core::run_dir::checkpoints_in(dir.path())
        .expect("list")
        .pop()
        .expect("a checkpoint");
    let state_path = step_dir.join("state.json");
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state_path).expect("read")).expect("json");
    state["format"] = 1.into();
    let spectrum = state["objectives"]["spectrum"]
        .as_object_mut()
        .expect("spectrum");
    spectrum.remove("sigma").expect("sigma written");
    spectrum.remove("sigma_lr").expect("sigma_lr written");
    std::fs::write(&state_path, serde_json::to_vec(&state).expect("json")).expect("write");
    std::fs::remove_file(step_dir.join(checkpoint::MANIFEST)).expect("no manifest");
    let (mut old, _) = checkpoint::resume(dir.path(), None).expect("resume an old checkpoint");
    assert_eq!(
        old.objectives().spectrum.sigma,
        SigmaUpdate::Adamw,
        "as it ran"
    );
    assert!(old.objectives().label().contains("σ-adamw"));
    old.train_step().expect("it trains on");
}

#[test]
fn a_toggle_sent_mid_run_takes_effect_at_exactly_the_next_step() {
    let _turn = one_trainer();
    let t = trainer(30, Objectives::default(), true);
    let handle = engine::spawn(t, engine::EngineOptions::default()).expect("engine");
    let mut penalties = std::collections::BTreeMap::new();
    let mut applied = None;
    loop {
        match handle
            .events()
            .recv_timeout(Duration::from_secs(120))
            .expect("an engine event")
        {
            Event::Step(s) => {
                penalties.insert(s.step, s.penalty);
                if s.step == 3 {
                    handle.send(Command::Objective {
                        change: ObjectiveChange::Enable {
                            term: Term::Cos,
                            on: true,
                        },
                    });
                }
            }
            Event::Applied(a) => applied = Some(a),
            Event::Finished { .. } => break,
            Event::Failed { message, .. } => panic!("engine failed: {message}"),
            _ => {}
        }
    }
    handle.join();
    let a = applied.expect("acknowledged");
    assert_eq!(a.change.before_text(), "MLE");
    assert_eq!(a.change.after_text(), "CosReg γ=1");
    assert!(a.step >= 4);
    assert_eq!(
        penalties[&(a.step - 1)],
        0.0,
        "the step before ran without it"
    );
    assert!(
        penalties.range(a.step..).all(|(_, &p)| p != 0.0),
        "every step from {} on has the penalty: {penalties:?}",
        a.step
    );
}

#[test]
fn impossible_objectives_are_refused_with_a_reason() {
    let mut o = Objectives::default();
    o.apply_reg_arg("agg=0.03").expect("agg");
    o.loss = conelab_core::objective::LossKind::Nce;
    let err = Trainer::new(corpus(), model(true), config(5, o), DeviceSpec::Cpu)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("gating"), "{err}");
    let mut t = trainer(5, Objectives::default(), true);
    let refused = t.apply(&Command::Objective {
        change: ObjectiveChange::Weight {
            term: Term::Lap,
            weight: -1.0,
        },
    });
    assert!(refused.is_err());
    assert_eq!(t.objectives(), &Objectives::default());
}

/// 2k steps straight and k + checkpoint + resume + k give the same losses with the objectives'
/// own state: AGG's counter (rebuilt from the data order), spectrum control's factors and their
/// optimizer, a frozen group.
fn exact_resume_with(objectives: Objectives) {
    let _turn = one_trainer();
    let k = 6;
    let cfg = config(2 * k, objectives.clone());
    let mut straight = trainer(2 * k, objectives.clone(), true);
    let expected: Vec<f64> = (0..2 * k)
        .map(|_| straight.train_step().expect("step").loss)
        .collect();
    drop(straight);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = trainer(2 * k, objectives, true);
    let run = run_dir(dir.path(), &first, cfg);
    let mut got: Vec<f64> = (0..k)
        .map(|_| first.train_step().expect("step").loss)
        .collect();
    checkpoint::save(&run, &first, 2).expect("checkpoint");
    drop(first);
    let (mut resumed, _) = checkpoint::resume(dir.path(), None).expect("resume");
    got.extend((0..k).map(|_| resumed.train_step().expect("step").loss));
    assert_eq!(got, expected, "resumed losses differ from the straight run");
}

#[test]
fn agg_and_cosreg_resume_exactly() {
    let mut o = Objectives::default();
    o.apply_reg_arg("agg=0.2:memory=4").expect("agg");
    o.apply_reg_arg("cos=1").expect("cos");
    exact_resume_with(o);
}

#[test]
fn spectrum_control_resumes_exactly() {
    let mut o = Objectives::default();
    o.apply_reg_arg("sc=poly:1").expect("sc");
    exact_resume_with(o);
}

#[test]
fn group_freezing_and_unlikelihood_resume_exactly() {
    let mut o = Objectives::default();
    o.apply_freeze_arg("rare").expect("freeze");
    o.apply_reg_arg("ul=0.5").expect("ul");
    exact_resume_with(o);
}

#[test]
fn nce_r_resumes_exactly() {
    let mut o = Objectives {
        loss: conelab_core::objective::LossKind::NceR,
        ..Objectives::default()
    };
    o.nce.noise = 20;
    exact_resume_with(o);
}

#[test]
fn a_command_whose_side_effect_fails_changes_nothing() {
    let _turn = one_trainer();
    let mut t = trainer(10, Objectives::default(), true);
    t.train_step().expect("step");
    let before = t.objectives().clone();
    let w = w_rows(&t);
    // Factorising W for spectrum control fails: the command is refused and nothing changed —
    // not the objectives, not the model, not the record of commands.
    let refused = conelab_base::fault::with_plan("spectrum.switch:1:EIO", || {
        t.apply(&Command::Objective {
            change: ObjectiveChange::Enable {
                term: Term::Spectrum,
                on: true,
            },
        })
    });
    let reason = refused.expect_err("refused");
    assert!(reason.to_string().contains("factorise"), "{reason}");
    // The injected I/O error is kept as the refusal's cause, not folded into its text.
    let cause = std::error::Error::source(&reason)
        .and_then(|c| c.downcast_ref::<std::io::Error>())
        .expect("the I/O error is the cause");
    assert_eq!(cause.raw_os_error(), Some(5), "EIO");
    assert_eq!(t.objectives(), &before);
    assert!(!t.objectives().spectrum.enabled);
    assert!(t.model().spectral().is_none());
    assert!(t.state().spectrum_c1.is_none());
    assert!(t.state().commands.is_empty());
    assert_eq!(w_rows(&t), w);
    // The same command without the failure applies.
    change(
        &mut t,
        ObjectiveChange::Enable {
            term: Term::Spectrum,
            on: true,
        },
    );
    assert!(t.objectives().spectrum.enabled && t.model().spectral().is_some());
}

/// AND from the first step: the target scores rise (the data term −mean s[y] falls), the sampled
/// (log Z)² penalty is paid, nothing diverges; the label names it.
#[test]
fn and_trains_its_target_scores_up_with_a_finite_penalty() {
    let _turn = one_trainer();
    let mut o = Objectives::default();
    LossArg::parse("and").expect("and").apply(&mut o);
    let mut t = trainer(30, o, false);
    assert_eq!(t.objectives().label(), "AND α=1 γ=0.1");
    let steps: Vec<_> = (0..30).map(|_| t.train_step().expect("step")).collect();
    assert!(steps.iter().all(|s| s.loss.is_finite() && s.penalty > 0.0));
    let mean = |s: &[conelab_core::events::StepStats]| {
        s.iter().map(|x| x.loss).sum::<f64>() / s.len() as f64
    };
    assert!(
        mean(&steps[25..]) < mean(&steps[..5]),
        "−mean s[y]: {} → {}",
        mean(&steps[..5]),
        mean(&steps[25..])
    );
}

/// and:squash switched on mid-run: evaluation scores with 10·tanh(s/5). The test recomputes the
/// validation NLL and mean log Z itself — one stream, consecutive windows, the model's raw
/// logits squashed here — and finds the evaluator's numbers, not the unsquashed ones.
#[test]
fn and_squash_switched_on_mid_run_evaluates_the_squashed_scores() {
    let _turn = one_trainer();
    let mut t = trainer(40, Objectives::default(), false);
    for _ in 0..5 {
        t.train_step().expect("step");
    }
    change(
        &mut t,
        ObjectiveChange::Loss {
            kind: conelab_core::objective::LossKind::And,
            squash: true,
        },
    );
    assert!(t.objectives().squashed_scores());
    assert!(t.objectives().label().ends_with("squash"));
    let bias = t.model().output_bias().expect("AND adds a bias");
    let b: Vec<f32> = bias.try_into_vec_as::<f32>().expect("bias");
    assert!(b.windows(2).all(|p| p[0] == p[1]), "a uniform shift");
    // The bias sits inside the squash: −μ_z of the raw scores would leave the squashed log Z
    // near ln N − 8 ≈ −2.4 here; the centring bias puts it near 0.
    let centred = t.evaluate(Split::Valid).expect("eval");
    assert!(
        centred.outputs.mu_z.abs() < 0.2,
        "squashed μ_z {} after switching on",
        centred.outputs.mu_z
    );
    for _ in 0..3 {
        t.train_step().expect("step");
    }
    t.config_mut().eval_batch = 1;
    let eval = t.evaluate(Split::Valid).expect("eval");

    let valid = t.corpus().split(Split::Valid).to_vec();
    let device = t.device().clone().inner();
    let model = t.model().valid();
    let window = 16;
    let (mut nll, mut raw_nll, mut log_z, mut count) = (0.0f64, 0.0f64, 0.0f64, 0usize);
    let mut start = 0;
    while start + 1 < valid.len() {
        let len = window.min(valid.len() - 1 - start);
        let inputs = Tensor::<2, Int>::from_data(
            TensorData::new(valid[start..start + len].to_vec(), [1, len]),
            &device,
        );
        let (hidden, _) = model.hidden(inputs, None);
        let raw: Vec<f64> = model
            .logits(hidden)
            .try_into_vec_as::<f32>()
            .expect("logits")
            .into_iter()
            .map(f64::from)
            .collect();
        let n = raw.len() / len;
        for (i, row) in raw.chunks(n).enumerate() {
            let y = valid[start + i + 1] as usize;
            let lse = |xs: &mut dyn Iterator<Item = f64>| xs.map(f64::exp).sum::<f64>().ln();
            let squashed: Vec<f64> = row.iter().map(|&x| 10.0 * (x / 5.0).tanh()).collect();
            let z = lse(&mut squashed.iter().copied());
            nll += z - squashed[y];
            log_z += z;
            raw_nll += lse(&mut row.iter().copied()) - row[y];
            count += 1;
        }
        start += len;
    }
    assert_eq!(eval.positions as usize, count, "every position once");
    let (nll, raw_nll, log_z) = (
        nll / count as f64,
        raw_nll / count as f64,
        log_z / count as f64,
    );
    assert!(
        (eval.loss - nll).abs() < 1e-4 * nll,
        "{} vs {nll}",
        eval.loss
    );
    assert!(
        (eval.outputs.mu_z - log_z).abs() < 1e-3,
        "{} vs {log_z}",
        eval.outputs.mu_z
    );
    assert!(
        (raw_nll - nll).abs() > 1e-3,
        "the squashing changed nothing here"
    );
}

/// Issue #38: `agg=rare:0.2` makes the run choose α from its own counts and tokens per update,
/// at start and when switched on later: by AGG's rule (a token is rare iff its occurrences per
/// update, count · B·T / train tokens, are below α) the chosen α selects about a fifth of the
/// vocabulary. A hand-set α is an α again.
#[test]
fn a_rare_fraction_chooses_alpha_from_the_runs_counts() {
    let _turn = one_trainer();
    let rare_at = |t: &Trainer| {
        let c = t.corpus();
        let per_update = (4 * model(true).window()) as f64 / c.split(Split::Train).len() as f64;
        let alpha = t.objectives().agg.alpha;
        c.vocab()
            .counts()
            .iter()
            .filter(|&&n| n as f64 * per_update < alpha)
            .count() as f64
            / c.vocab().len() as f64
    };
    let mut o = Objectives::default();
    o.apply_reg_arg("agg=rare:0.2").expect("agg");
    let t = trainer(2, o, true);
    let share = rare_at(&t);
    assert!((share - 0.2).abs() < 0.02, "{share} of the vocabulary rare");
    assert!(t.objectives().label().contains("AGG rare 0.2 α="));
    // Switched on later through a change of the whole objectives, and at 0.5.
    let mut t = trainer(2, Objectives::default(), true);
    let mut o = Objectives::default();
    o.apply_reg_arg("agg=rare:0.5").expect("agg");
    let applied = t
        .apply(&Command::Objective {
            change: ObjectiveChange::Set {
                objectives: Box::new(o),
            },
        })
        .expect("applied");
    let share = rare_at(&t);
    assert!((share - 0.5).abs() < 0.02, "{share} of the vocabulary rare");
    // A viewer folds the acknowledged change into its own copy: it must end with the α the
    // run chose, not the placeholder it asked with.
    let Command::Objective { change: answered } = &applied.command else {
        panic!("{applied:?}")
    };
    let mut viewer = Objectives::default();
    viewer
        .apply(answered, [usize::MAX; 3])
        .expect("the viewer applies it");
    assert_eq!(&viewer, t.objectives());
    assert!(
        applied
            .change
            .after_text()
            .contains("tokens rare after the first epoch"),
        "{}",
        applied.change.after_text()
    );
    change(
        &mut t,
        ObjectiveChange::Weight {
            term: Term::Agg,
            weight: 0.01,
        },
    );
    assert_eq!(t.objectives().agg.rare_fraction, None);
    assert_eq!(t.objectives().agg.alpha, 0.01);
}

/// Issue #38: `--data-seed` reads the training text in another order — every line whole, so the
/// same text — and the same data seed reads it the same way; no data seed is the text's order.
#[test]
fn a_data_seed_changes_the_order_and_only_the_order() {
    let _turn = one_trainer();
    let with = |data_seed: Option<u64>| {
        let mut c = config(3, Objectives::default());
        c.data_seed = data_seed;
        let mut t = Trainer::new(corpus(), model(true), c, DeviceSpec::Cpu).expect("trainer");
        (0..3)
            .map(|_| t.train_step().expect("step").loss)
            .collect::<Vec<f64>>()
    };
    let own = with(None);
    let shuffled = with(Some(7));
    assert_eq!(
        own,
        trainer_losses(3),
        "no data seed: the order runs always had"
    );
    assert_ne!(own, shuffled, "another order, other batches, other losses");
    assert_eq!(shuffled, with(Some(7)), "the same data seed, the same run");
    assert_ne!(shuffled, with(Some(8)));
}

fn trainer_losses(steps: usize) -> Vec<f64> {
    let mut t = trainer(steps as u64, Objectives::default(), true);
    (0..steps)
        .map(|_| t.train_step().expect("step").loss)
        .collect()
}

/// Issue #60 item 3's scale-matched control: spectrum control with `c1=norm` takes c1 so that the
/// prior's spectrum has W's own Frobenius norm at switch-on — Σ_k (c1·f(k))² = Σ_ij W_ij², with
/// f the prior's shape at c1 = 1 (exp(−c2·k^γ)) computed here by hand and W read as it was before
/// the switch.
#[test]
fn the_scale_matched_prior_has_ws_frobenius_norm() {
    let _turn = one_trainer();
    let mut t = trainer(10, Objectives::default(), true);
    for _ in 0..3 {
        t.train_step().expect("step");
    }
    let w = w_rows(&t);
    let frobenius_sq: f64 = w.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    let mut on = Objectives::default();
    on.apply_reg_arg("sc=exp:1:c1=norm:c2=0.05:gamma=1")
        .expect("sc");
    change(
        &mut t,
        ObjectiveChange::Set {
            objectives: Box::new(on.clone()),
        },
    );
    let c1 = t.state().spectrum_c1.expect("c1 taken at switch-on");
    let d = t.model_config().embed_dim();
    let prior_sq: f64 = (1..=d)
        .map(|k| (c1 * (-0.05 * k as f64).exp()).powi(2))
        .sum();
    assert!(
        (prior_sq - frobenius_sq).abs() <= 1e-4 * frobenius_sq,
        "prior ‖·‖² {prior_sq} vs ‖W‖²_F {frobenius_sq} (c1 {c1})"
    );
}
