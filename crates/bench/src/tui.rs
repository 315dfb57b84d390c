//! `conelab bench tui`: how long one frame takes (rendered into ratatui's `TestBackend`, so the
//! terminal's own speed is left out), and whether training under the workbench keeps the
//! headless throughput (the UI loop and the engine share the CPU).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde::Serialize;

use super::median;
use conelab_core::analysis::EmbeddingAnalysis;
use conelab_core::events::{
    AppliedCommand, Command, EmbeddingStats, EvalStats, Event, RunStarted, Snapshot, StepStats,
};
use conelab_core::train_config::TrainConfig;
use conelab_data::{FrequencyGroups, GroupBounds};
use conelab_metrics::{
    EmbeddingPanel, Embeddings, MatrixError, OutputAccumulator, OutputBatch, PanelOptions,
    RowGroups, Threads,
};
use conelab_train::engine::{self, EngineError, EngineOptions, Trainer};
use conelab_tui::app::{App, Pane, ViewOptions};
use conelab_tui::ui;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Matrix(#[from] MatrixError),
}

// TestBackend cannot fail.
impl From<std::convert::Infallible> for BenchError {
    fn from(e: std::convert::Infallible) -> Self {
        match e {}
    }
}
use conelab_core::model::{DeviceSpec, ModelConfig};
use conelab_core::objective::{ObjectiveChange, Objectives, Term};

#[derive(Debug, Clone, Serialize)]
pub struct FrameRow {
    pub what: String,
    pub width: u16,
    pub height: u16,
    pub median_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputResult {
    pub model: String,
    pub vocab: usize,
    pub steps_per_round: u64,
    pub rounds: usize,
    pub headless_tokens_per_sec: f64,
    pub tui_tokens_per_sec: f64,
    /// Median over rounds of (TUI ÷ headless) tokens/s, measured side by side.
    pub ratio: f64,
    pub frames_drawn: usize,
}

/// A deterministic pseudo-random value in [0, 1).
fn hash01(i: usize) -> f32 {
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 32;
    (x % 1_000_003) as f32 / 1_000_003.0
}

/// W of a degenerating model: a shared offset (the cone) that grows with `drift`, rare rows
/// further out.
fn cone(n: usize, d: usize, drift: f32) -> Vec<f32> {
    (0..n * d)
        .map(|k| {
            let (i, j) = (k / d, k % d);
            let noise = hash01(k) - 0.5;
            let offset = if j < 2 {
                drift * (0.3 + i as f32 / n as f32)
            } else {
                0.0
            };
            0.2 * noise + offset
        })
        .collect()
}

fn analysis(
    step: u64,
    n: usize,
    d: usize,
    groups: &FrequencyGroups,
) -> Result<Arc<EmbeddingAnalysis>, MatrixError> {
    let weights = cone(n, d, 0.2 + step as f32 / 1000.0);
    let panel = EmbeddingPanel::compute(
        Embeddings::new(n, d, &weights)?,
        Some(&RowGroups::from_ranks(groups)),
        &PanelOptions {
            threads: Threads::All,
            ..PanelOptions::default()
        },
    )?;
    Ok(Arc::new(EmbeddingAnalysis {
        snapshot: Arc::new(Snapshot {
            step,
            n,
            d,
            weights,
            spectral: None,
        }),
        panel,
    }))
}

fn eval(step: u64, groups: &FrequencyGroups) -> Event {
    let n = groups.len();
    let mut acc = OutputAccumulator::new(*groups);
    let targets: Vec<u32> = (0..n as u32).collect();
    let lp: Vec<f32> = (0..n).map(|i| -3.0 - 4.0 * hash01(i)).collect();
    let log_z: Vec<f32> = (0..n).map(|i| 2.0 * hash01(i + 7)).collect();
    let entropy: Vec<f32> = (0..n).map(|i| 3.0 + hash01(i + 11)).collect();
    let argmax: Vec<u32> = (0..n as u32).map(|i| i % 97).collect();
    let prob_sum = vec![1.0f32; n];
    let batch = OutputBatch {
        targets: &targets,
        target_log_probs: &lp,
        log_z: &log_z,
        entropy: &entropy,
        argmax: &argmax,
        prob_sum: &prob_sum,
    };
    let _ = acc.add(batch);
    let outputs = acc.finish(n, 0.0);
    Event::Eval(EvalStats::from_outputs(
        step,
        "valid".into(),
        outputs,
        1.0,
        None,
    ))
}

/// A workbench 2,000 steps into a run on an `n × d` W: every step's numbers, ten evaluations,
/// ten embedding analyses, an intervention, a checkpoint.
pub fn demo_app(n: usize, d: usize, steps: u64) -> Result<(App, FrequencyGroups), MatrixError> {
    let groups = FrequencyGroups::new(n, GroupBounds::default());
    let mut app = App::new(Objectives::default(), ViewOptions::default());
    app.on_event(Event::Started(Box::new(RunStarted {
        step: 0,
        total_steps: steps * 2,
        windows_per_epoch: 1_000,
        parameters: 3_000_000,
        device: "cpu".into(),
        run_dir: Some("checkpoints/tiny-synthetic-bench".into()),
        objective: "MLE".into(),
        objectives: Objectives::default(),
    })));
    let every = (steps / 10).max(1);
    for s in 1..=steps {
        app.on_event(Event::Step(StepStats {
            step: s,
            epoch: s as f64 / 1000.0,
            loss: 9.0 - 4.0 * (s as f64 / steps as f64).sqrt() + 0.1 * hash01(s as usize) as f64,
            penalty: 0.01,
            lr: 1e-3,
            grad_norm: 0.8,
            tokens_per_sec: 2_000.0,
            step_ms: 500.0,
            rare_tokens: Some(n / 5),
            rare_g1: Some(0.01),
            rare_in_group: Some(n / 6),
        }));
        if s == steps / 2 {
            app.on_event(Event::Applied(AppliedCommand {
                step: s + 1,
                command: Command::Objective {
                    change: ObjectiveChange::Enable {
                        term: Term::Cos,
                        on: true,
                    },
                },
                change: conelab_core::change::Change::Objectives {
                    before: Box::new(Objectives::default().into()),
                    after: Box::new({
                        let mut cos = Objectives::default();
                        let _ = cos.apply(
                            &ObjectiveChange::Enable {
                                term: Term::Cos,
                                on: true,
                            },
                            [usize::MAX; 3],
                        );
                        cos.into()
                    }),
                },
                ticket: None,
                coalesced: false,
            }));
        }
        if s % every == 0 {
            app.on_event(eval(s, &groups));
            let a = analysis(s, n, d, &groups)?;
            let Some(stats) = EmbeddingStats::from_panel(s, &a.panel, 0.1) else {
                continue;
            };
            app.on_event(Event::Embedding(Box::new(stats)));
            app.on_analysis(a);
        }
    }
    app.on_event(Event::Checkpoint {
        step: steps,
        path: "checkpoints/tiny-synthetic-bench/step-002000".into(),
    });
    Ok((app, groups))
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Frame times of the default layout and of every zoomed pane.
pub fn bench_frames(n: usize, d: usize, frames: usize) -> Result<Vec<FrameRow>, BenchError> {
    let (mut app, groups) = demo_app(n, d, 2_000)?;
    let row_groups = RowGroups::from_ranks(&groups);
    let mut rows = Vec::new();
    let mut cases: Vec<(String, u16, u16, Option<Pane>)> = vec![
        ("default layout".into(), 200, 60, None),
        ("default layout".into(), 120, 40, None),
        ("default layout".into(), 80, 24, None),
    ];
    for pane in Pane::ALL {
        cases.push((format!("zoomed: {}", pane.title()), 200, 60, Some(pane)));
    }
    for (what, w, h, zoom) in cases {
        app.zoom = zoom.is_some();
        if let Some(p) = zoom {
            app.focus = p;
        }
        let mut terminal = Terminal::new(TestBackend::new(w, h))?;
        // Every frame is drawn in full: the buffer is cleared so ratatui's diff cannot skip work.
        let mut ms = Vec::with_capacity(frames);
        for _ in 0..frames.max(1) {
            terminal.clear()?;
            let t = Instant::now();
            terminal.draw(|f| ui::render(f, &app, Some(&row_groups)))?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(f64::total_cmp);
        rows.push(FrameRow {
            what,
            width: w,
            height: h,
            median_ms: percentile(&ms, 0.5),
            p95_ms: percentile(&ms, 0.95),
            max_ms: ms.last().copied().unwrap_or(f64::NAN),
        });
    }
    Ok(rows)
}

/// Trains `steps` steps and returns tokens/s between the first reported step and the last; with
/// `tui`, the consumer does what the workbench's loop does under a steady stream (fold events
/// into the app, draw into a 200×60 `TestBackend` when something changed, at most once a
/// frame), otherwise it only drains events.
fn timed_run(
    model: &ModelConfig,
    corpus: Arc<conelab_data::Corpus>,
    steps: u64,
    tui: bool,
    frames: &mut usize,
) -> Result<f64, EngineError> {
    let config = TrainConfig {
        batch: 16,
        steps,
        seed: 1,
        eval_every: 0,
        checkpoint_every: 0,
        snapshot_every: 5,
        ..TrainConfig::default()
    };
    let trainer = Trainer::new(corpus, model.clone(), config, DeviceSpec::Cpu)?;
    let rows = RowGroups::from_ranks(trainer.corpus().groups());
    let tokens_per_step = (16 * model.window()) as f64;
    let handle = engine::spawn(trainer, EngineOptions::default())
        .map_err(EngineError::backend("no engine thread"))?;
    let mut app = App::new(Objectives::default(), ViewOptions::default());
    let mut analysed = None;
    let mut terminal = Terminal::new(TestBackend::new(200, 60))
        .map_err(EngineError::invalid("a test terminal"))?;
    let mut first: Option<(u64, Instant)> = None;
    let mut last: Option<(u64, Instant)> = None;
    let mut done = false;
    while !done {
        let mut dirty = false;
        loop {
            let event = if tui {
                match handle.events().try_recv() {
                    Ok(e) => e,
                    Err(_) => break,
                }
            } else {
                match handle.events().recv() {
                    Ok(e) => e,
                    Err(_) => {
                        done = true;
                        break;
                    }
                }
            };
            let now = Instant::now();
            match &event {
                Event::Step(s) => {
                    if s.step >= 2 && first.is_none() {
                        first = Some((s.step, now));
                    }
                    last = Some((s.step, now));
                }
                Event::Finished { .. } => done = true,
                Event::Failed { message, .. } => {
                    return Err(EngineError::Config(message.as_str().into()));
                }
                _ => {}
            }
            if tui {
                app.on_event(event);
                dirty = true;
            }
            if done {
                break;
            }
        }
        if tui {
            if let Some(a) = handle.latest_analysis().get()
                && analysed != Some(a.snapshot.step)
            {
                analysed = Some(a.snapshot.step);
                app.on_analysis(a);
                dirty = true;
            }
            if dirty {
                terminal
                    .draw(|f| ui::render(f, &app, Some(&rows)))
                    .map_err(EngineError::invalid("drawing into the test terminal"))?;
                *frames += 1;
            }
            if !done {
                std::thread::sleep(conelab_tui::FRAME);
            }
        }
    }
    handle.join();
    match (first, last) {
        (Some((s0, t0)), Some((s1, t1))) if s1 > s0 => {
            Ok((s1 - s0) as f64 * tokens_per_step / (t1 - t0).as_secs_f64())
        }
        _ => Err(EngineError::Config("too few steps to time".into())),
    }
}

/// Headless and workbench runs of the same training, alternated `rounds` times.
pub fn bench_throughput(
    model_name: &str,
    model: &ModelConfig,
    vocab: usize,
    steps: u64,
    rounds: usize,
) -> Result<ThroughputResult, EngineError> {
    let window = model.window();
    let corpus = Arc::new(crate::random_corpus(
        vocab,
        (steps as usize + 2) * 16 * window,
        1,
    )?);
    let mut ratios = Vec::new();
    let (mut head, mut tui) = (Vec::new(), Vec::new());
    let mut frames = 0;
    for round in 0..rounds.max(1) {
        // Alternate which goes first, so a drift of the machine does not favour one.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut pair = [0.0; 2];
        for with_tui in order {
            let t = timed_run(model, corpus.clone(), steps, with_tui, &mut frames)?;
            pair[usize::from(with_tui)] = t;
        }
        head.push(pair[0]);
        tui.push(pair[1]);
        ratios.push(pair[1] / pair[0]);
        // Let the analysis thread of the last run wind down before the next one starts.
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(ThroughputResult {
        model: model_name.into(),
        vocab: corpus.vocab().len(),
        steps_per_round: steps,
        rounds: rounds.max(1),
        headless_tokens_per_sec: median(head),
        tui_tokens_per_sec: median(tui),
        ratio: median(ratios),
        frames_drawn: frames,
    })
}
/// The frame-time table of `conelab bench tui` (W `n`×`d`).
pub fn render_frames(n: usize, d: usize, frames: &[FrameRow]) -> String {
    let mut out = format!(
        "frame time, W {n}×{d}, 2,000 steps of history (TestBackend, full redraw)\n{:<34} {:>9} {:>10} {:>8} {:>8}\n",
        "layout", "size", "median ms", "p95 ms", "max ms"
    );
    for r in frames {
        out.push_str(&format!(
            "{:<34} {:>9} {:>10.2} {:>8.2} {:>8.2}\n",
            r.what,
            format!("{}×{}", r.width, r.height),
            r.median_ms,
            r.p95_ms,
            r.max_ms
        ));
    }
    out
}

impl ThroughputResult {
    /// Headless vs under the workbench, as `conelab bench tui` prints it.
    pub fn render(&self) -> String {
        format!(
            "training throughput, {} N={} ({} steps × {} rounds, alternated)\nheadless {:.0} tok/s, under the TUI {:.0} tok/s: ratio {:.3} (median of per-round ratios; {} frames drawn)\n",
            self.model,
            self.vocab,
            self.steps_per_round,
            self.rounds,
            self.headless_tokens_per_sec,
            self.tui_tokens_per_sec,
            self.ratio,
            self.frames_drawn
        )
    }
}
