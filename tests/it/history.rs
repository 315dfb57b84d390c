//! A run's history read back from its store folds to the view its live events folded to: one
//! fold (`RunView::on_event`) for a live run and a finished one, and the store's replay
//! (`conelab_store::history`) gives it the events the run sent.

use std::path::Path;

use conelab_core::change::{Change, ConfigChange};
use conelab_core::events::{
    AppliedCommand, Command, EmbeddingStats, EvalStats, Event, FinishReason, ReferencePpl,
    RunStarted, SplitReferencePpl, StepStats,
};
use conelab_core::objective::{ObjectiveChange, Objectives, Term};
use conelab_data::{FrequencyGroups, GroupBounds};
use conelab_metrics::embedding::SetStats;
use conelab_metrics::hidden::HiddenStats;
use conelab_metrics::{OutputAccumulator, OutputBatch};
use conelab_store::{RunRecord, StoreWriter};

use conelab_protocol::view::{RunInfo, RunStatus, RunView};

fn step(step: u64, lr: f64) -> Event {
    Event::Step(StepStats {
        step,
        epoch: step as f64 / 10.0,
        loss: 6.0 - (step as f64).ln(),
        penalty: 0.0,
        lr,
        grad_norm: 0.5,
        tokens_per_sec: 1000.0,
        step_ms: 4.0,
        rare_tokens: None,
        rare_g1: None,
        rare_in_group: None,
    })
}

fn eval(step: u64, split: &str, hidden: Option<HiddenStats>) -> Event {
    let mut acc = OutputAccumulator::new(FrequencyGroups::new(10, GroupBounds::default()));
    let targets: Vec<u32> = (0..10).collect();
    let lp: Vec<f32> = (0..10)
        .map(|i| -1.0 - 0.1 * i as f32 - step as f32 / 100.0)
        .collect();
    let ones = vec![1.0f32; 10];
    acc.add(OutputBatch {
        targets: &targets,
        target_log_probs: &lp,
        log_z: &ones,
        entropy: &ones,
        argmax: &targets,
        prob_sum: &ones,
    })
    .expect("batch");
    Event::Eval(EvalStats::from_outputs(
        step,
        split.into(),
        acc.finish(10, 0.0),
        1.0,
        hidden.map(Box::new),
    ))
}

fn hidden(step: u64) -> HiddenStats {
    HiddenStats {
        positions: 4096,
        mean_cos: 0.5 + step as f64 / 1000.0,
        isoscore: 0.25,
        self_sim: vec![0.1, 0.2, f64::NAN],
        self_sim_types: [64, 64, 0],
        separable: step > 10,
        margin: if step > 10 { 0.125 } else { 0.0 },
        certificate: 0.126,
        proven: true,
        support: 3,
        neg_u_rare_cos: if step > 10 { 0.75 } else { f64::NAN },
        direction: Vec::new(),
        weights: Vec::new(),
    }
}

fn embedding(step: u64) -> Event {
    let set = |g: f64| SetStats {
        rows: 10,
        i1: 0.1 * g + step as f64 / 100.0,
        i2: 0.2,
        mean_norm: 1.0 + g,
        sv_norm: Vec::new(),
        sv_max: 3.0,
        effective_rank: 5.0,
        mean_cos: 0.3,
        mean_cos_to_mean: 0.4,
        i1_unit: 0.5,
        i2_unit: 0.6,
        isoscore: 0.7,
        isoscore_random: 0.8,
        abtt_top_variance: 0.1,
        abtt_mean_cos: 0.05,
        rogue_share: 0.2,
    };
    let mut total = set(3.0);
    total.sv_norm = vec![1.0, 0.5, 0.25];
    Event::Embedding(Box::new(EmbeddingStats {
        step,
        total,
        groups: [set(0.0), set(1.0), set(2.0)],
        rare_frequent_cos: 0.125,
        seconds: 0.5,
        spectral: None,
        second_tier: None,
    }))
}

fn applied(step: u64, command: Command, change: Change) -> Event {
    Event::Applied(AppliedCommand {
        step,
        command,
        change,
        ticket: None,
        coalesced: false,
    })
}

/// 30 steps of a run as its engine reports them: a reference, evaluations on valid (with the
/// hidden-state geometry from step 20) and test, snapshots, CosReg switched on at 16, a pause
/// with an lr change that stops the schedule at 21, a checkpoint, a warning, a refused command.
fn run_events(dir: &Path) -> Vec<Event> {
    let mut cos = Objectives::default();
    cos.apply(
        &ObjectiveChange::Enable {
            term: Term::Cos,
            on: true,
        },
        [10, 10, 10],
    )
    .expect("cos");
    let mut events = vec![
        Event::Started(Box::new(RunStarted {
            step: 0,
            total_steps: 30,
            windows_per_epoch: 10,
            parameters: 1234,
            device: "cpu".into(),
            run_dir: Some(dir.to_path_buf()),
            objective: "MLE".into(),
            objectives: Objectives::default(),
        })),
        Event::ConfigChanged {
            step: 0,
            change: ConfigChange::Steps {
                before: 20,
                after: 30,
            },
        },
        Event::Reference(Box::new(ReferencePpl {
            step: 0,
            splits: vec![SplitReferencePpl {
                split: "valid".into(),
                kn3: vec![90.0, 900.0, 9000.0, 150.0],
                unigram: vec![100.0, 1000.0, 10000.0, 200.0],
            }],
        })),
    ];
    for s in 1..=30 {
        let lr = if s > 20 { 1e-4 } else { 1e-3 };
        events.push(step(s, lr));
        if s % 10 == 0 {
            events.push(eval(s, "valid", (s >= 20).then(|| hidden(s))));
            events.push(eval(s, "test", None));
            events.push(embedding(s));
        }
        match s {
            10 => events.push(Event::Checkpoint {
                step: 10,
                path: dir.join("step-000010"),
            }),
            12 => {
                events.push(Event::Warning {
                    step: 12,
                    message: "a warning".into(),
                });
                events.push(Event::WeightsBroken {
                    step: 12,
                    reason: "weights past 1e12".into(),
                });
            }
            13 => events.push(Event::Rejected {
                step: 14,
                command: Command::SetLr { lr: -1.0 },
                reason: "lr must be positive".into(),
                ticket: None,
            }),
            15 => events.push(applied(
                16,
                Command::Objective {
                    change: ObjectiveChange::Enable {
                        term: Term::Cos,
                        on: true,
                    },
                },
                Change::Objectives {
                    before: Box::new(Objectives::default().into()),
                    after: Box::new(cos.clone().into()),
                },
            )),
            20 => {
                events.push(applied(21, Command::Pause, Change::Paused));
                events.push(Event::Paused { step: 20 });
                events.push(applied(
                    21,
                    Command::SetLr { lr: 1e-4 },
                    Change::Lr {
                        before: 1e-3,
                        after: 1e-4,
                        schedule_off_from: Some(21),
                    },
                ));
                events.push(applied(21, Command::Resume, Change::Resumed));
                events.push(Event::Resumed { step: 20 });
            }
            _ => {}
        }
    }
    events.push(Event::Finished {
        step: 30,
        reason: FinishReason::Completed,
    });
    events
}

#[test]
fn a_stored_run_folds_to_the_view_its_live_events_did() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let events = run_events(dir);
    let record = RunRecord::new("h", String::new(), "synthetic".into(), "cpu".into());
    let mut writer = StoreWriter::open(dir, &record).expect("store");
    let mut live = RunView::new(Objectives::default());
    for e in &events {
        writer.record(e).expect("record");
        live.on_event(e);
    }
    writer.flush().expect("flush");
    let history = conelab_store::history::read(dir).expect("history");
    assert!(history.warnings.is_empty(), "{:?}", history.warnings);
    let info = RunInfo {
        name: "h".into(),
        device: "cpu".into(),
        total_steps: 30,
        ..RunInfo::default()
    };
    let stored =
        RunView::from_history(&history, info, live.objectives.clone(), live.status.clone());
    // The log, line for line: the changes in the words they were made in, at their steps.
    let lines = |v: &RunView| -> Vec<(u64, String)> {
        v.log.iter().map(|l| (l.step, l.text.clone())).collect()
    };
    assert_eq!(lines(&stored), lines(&live));
    let texts: Vec<String> = lines(&live).into_iter().map(|l| l.1).collect();
    for expected in [
        "started: MLE",
        "steps: 20 → 30",
        "MLE → CosReg γ=1",
        "paused after step 20",
        "lr=1.000000e-3 → lr=1.000000e-4 (schedule off from step 21)",
        "resumed",
        "refused lr -1: lr must be positive",
        "a warning",
        "finished (completed)",
    ] {
        assert!(texts.iter().any(|t| t == expected), "{expected}: {texts:?}");
    }
    // The weights' breakage, typed in the store, reads back with the one advice (issue #58).
    let broken = format!(
        "weights past 1e12: resuming here diverges again whatever the lr; {}",
        conelab_core::events::diverged_advice(true)
    );
    assert!(texts.contains(&broken), "{texts:?}");
    assert_eq!(stored.interventions, live.interventions);
    assert_eq!(live.interventions, vec![16, 21]);
    assert_eq!((stored.lr, stored.lr_fixed_from), (Some(1e-4), Some(21)));
    assert_eq!((live.lr, live.lr_fixed_from), (Some(1e-4), Some(21)));
    assert_eq!(stored.loss, live.loss);
    assert_eq!(stored.valid_loss, live.valid_loss);
    assert_eq!(stored.last_step, live.last_step);
    assert_eq!(stored.reference_valid, live.reference_valid);
    assert_eq!(stored.first_spectrum, Some(vec![1.0, 0.5, 0.25]));
    assert_eq!(stored.first_spectrum, live.first_spectrum);
    assert_eq!(
        stored.embedding.iter().map(|e| e.i1).collect::<Vec<_>>(),
        live.embedding.iter().map(|e| e.i1).collect::<Vec<_>>()
    );
    let (s, l) = (
        stored.last_eval.as_ref().expect("stored eval"),
        live.last_eval.as_ref().expect("live eval"),
    );
    assert_eq!(
        (s.step, s.ppl, s.groups, s.positions, s.outputs.uniq),
        (l.step, l.ppl, l.groups, l.positions, l.outputs.uniq)
    );
    assert_eq!(
        (stored.info.parameters, stored.info.windows_per_epoch),
        (1234, 10)
    );
    assert_eq!(
        stored.status,
        RunStatus::Finished {
            reason: FinishReason::Completed
        }
    );
    // The hidden-state geometry from step 20 on, as the live events had it.
    for view in [&live, &stored] {
        let steps: Vec<u64> = view.hidden.iter().map(|h| h.step).collect();
        assert_eq!(steps, vec![20, 30]);
        assert_eq!(view.hidden[0].margin, 0.125);
        assert_eq!(view.hidden[0].mean_cos, 0.52);
        let h = view.last_eval.as_ref().and_then(|e| e.hidden.as_deref());
        let h = h.expect("hidden");
        assert!(h.separable && h.proven);
        assert_eq!(
            (h.positions, h.support, h.self_sim_types),
            (4096, 3, [64, 64, 0])
        );
        assert_eq!(
            (h.margin, h.neg_u_rare_cos, h.mean_cos),
            (0.125, 0.75, 0.53)
        );
        assert_eq!(&h.self_sim[..2], &[0.1, 0.2]);
        assert!(h.self_sim[2].is_nan());
    }
}

/// Issue #61: a store with a segment set aside as corrupt reads without its rows, and the
/// workbench's log says so every time the run is opened (not only in the resume that set it
/// aside).
#[test]
fn a_set_aside_segment_is_in_the_workbench_log() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let events = run_events(dir);
    let record = RunRecord::new("h", String::new(), "synthetic".into(), "cpu".into());
    let mut writer = StoreWriter::open(dir, &record).expect("store");
    for e in &events {
        writer.record(e).expect("record");
    }
    writer.flush().expect("flush");
    drop(writer);
    let corrupt = dir.join("store").join("corrupt");
    std::fs::create_dir_all(&corrupt).expect("mkdir");
    std::fs::write(corrupt.join("metrics-000001.parquet"), b"not parquet").expect("write");
    let history = conelab_store::history::read(dir).expect("history");
    assert_eq!(history.warnings.len(), 1, "{:?}", history.warnings);
    let view = RunView::from_history(
        &history,
        RunInfo::default(),
        Objectives::default(),
        RunStatus::Running,
    );
    let said: Vec<&str> = view
        .log
        .iter()
        .filter(|l| l.text.contains("metrics-000001.parquet"))
        .map(|l| l.text.as_str())
        .collect();
    assert_eq!(said.len(), 1, "{:?}", view.log);
    assert!(
        said[0].starts_with("store: ") && said[0].contains("not in this read"),
        "{said:?}"
    );
}
