//! The headless reporter: a run's events on stdout — an indicatif progress bar on a terminal,
//! plain log lines in a pipe or file (never escape codes there). A stdout that went away (a
//! closed pipe, a dead terminal) changes nothing for the run: lines are then dropped.

use std::convert::Infallible;
use std::io::Write;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use conelab_base::exit::ExitStatus;
use conelab_core::events::EventSink;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use conelab_core::events::{EmbeddingStats, EvalStats, Event, FinishReason, RunStarted};

/// How the run ended, for the exit status.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    Completed { step: u64 },
    Stopped { step: u64 },
    Diverged { step: u64, loss: f64 },
    Failed { message: String },
}

impl RunOutcome {
    /// The run's exit status (README, "Exit statuses"): success when completed or stopped,
    /// diverged, failed; a stop by signal is told apart by the caller ([`ExitStatus::Stopped`]).
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            RunOutcome::Completed { .. } | RunOutcome::Stopped { .. } => ExitStatus::Success,
            RunOutcome::Diverged { .. } => ExitStatus::Diverged,
            RunOutcome::Failed { .. } => ExitStatus::Failed,
        }
    }
}

/// Reports events until the run's final event. `tty` draws a progress bar; otherwise a plain line
/// every `log_every` steps. `first` is given every event before the reporter (the run's
/// train.log).
pub fn report(
    events: &Receiver<Event>,
    tty: bool,
    log_every: u64,
    mut first: impl EventSink<Error = Infallible>,
) -> RunOutcome {
    let mut reporter = Reporter::new(tty, log_every);
    let outcome = loop {
        let Ok(event) = events.recv() else {
            break RunOutcome::Failed {
                message: "the run's threads ended without a final event".into(),
            };
        };
        let Ok(()) = (&mut first, &mut reporter).on_event(&event);
        if let Some(outcome) = reporter.outcome.take() {
            break outcome;
        }
    };
    reporter.finish();
    outcome
}

/// The run on stdout: a progress bar on a terminal, plain lines otherwise.
pub struct Reporter {
    bar: Option<ProgressBar>,
    log_every: u64,
    last_valid: Option<f64>,
    last_i1: Option<f64>,
    diverged: Option<(u64, f64)>,
    /// How the run ended, once its final event came.
    pub outcome: Option<RunOutcome>,
}

impl Reporter {
    pub fn new(tty: bool, log_every: u64) -> Self {
        let bar = tty.then(|| {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stdout());
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps (eta {eta}) {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        Self {
            bar,
            log_every,
            last_valid: None,
            last_i1: None,
            diverged: None,
            outcome: None,
        }
    }

    /// Clears the progress bar.
    pub fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }

    fn line(&self, text: String) {
        match &self.bar {
            Some(b) => b.println(text),
            None => {
                let _ = writeln!(std::io::stdout(), "{text}");
            }
        }
    }
}

impl EventSink for Reporter {
    type Error = Infallible;

    fn on_event(&mut self, event: &Event) -> Result<(), Infallible> {
        match event {
            Event::Started(s) => {
                let RunStarted {
                    step,
                    total_steps,
                    windows_per_epoch,
                    parameters,
                    device,
                    run_dir,
                    objective,
                    ..
                } = &**s;
                if let Some(b) = &self.bar {
                    b.set_length(*total_steps);
                    b.set_position(*step);
                }
                let dir = run_dir
                    .as_ref()
                    .map(|d| d.display().to_string())
                    .unwrap_or_else(|| "none".into());
                self.line(format!(
                    "start step={step} total={total_steps} windows/epoch={windows_per_epoch} params={parameters} device={device} run_dir={dir} objective=\"{objective}\""
                ));
            }
            Event::Step(s) => {
                if let Some(b) = &self.bar {
                    b.set_position(s.step);
                    let valid = self
                        .last_valid
                        .map(|p| format!(" valid ppl {p:.2}"))
                        .unwrap_or_default();
                    let i1 = self
                        .last_i1
                        .map(|v| format!(" I1 {v:.3}"))
                        .unwrap_or_default();
                    let valid = format!("{valid}{i1}");
                    b.set_message(format!(
                        "loss {:.4}{valid} | {:.0} tok/s | lr {:.2e}",
                        s.loss, s.tokens_per_sec, s.lr
                    ));
                } else if self.log_every > 0 && s.step.is_multiple_of(self.log_every) {
                    // Only what is on: a penalty when a regulariser runs, the rare set under gates.
                    let penalty = if s.penalty != 0.0 {
                        format!(" penalty={:.4}", s.penalty)
                    } else {
                        String::new()
                    };
                    let rare = s
                        .rare_tokens
                        .map(|r| format!(" rare_tokens={r}"))
                        .unwrap_or_default()
                        + &s.rare_in_group
                            .map(|n| format!(" rare_in_group={n}"))
                            .unwrap_or_default()
                        + &s.rare_g1
                            .map(|g| format!(" rare_g1={g:.4}"))
                            .unwrap_or_default();
                    self.line(format!(
                        "step={} epoch={:.3} loss={:.4}{penalty}{rare} lr={:.3e} grad_norm={:.3} tok/s={:.0} ms/step={:.1}",
                        s.step, s.epoch, s.loss, s.lr, s.grad_norm, s.tokens_per_sec, s.step_ms
                    ));
                }
            }
            Event::Eval(e) => {
                if e.split == "valid" {
                    self.last_valid = Some(e.ppl);
                }
                self.line(eval_line(e));
            }
            Event::Snapshot { .. }
            | Event::Projection(_)
            | Event::Recorded(_)
            | Event::CheckpointStaged { .. }
            | Event::System(_) => {}
            // The bar says it; plain lines wait for the result (a line every 200 ms would bury
            // the steps).
            Event::EvalProgress {
                split, done, total, ..
            } => {
                if let Some(b) = &self.bar {
                    let pct = if *total == 0 {
                        0.0
                    } else {
                        100.0 * *done as f64 / *total as f64
                    };
                    b.set_message(format!("evaluating {split} {pct:.0} %"));
                }
            }
            Event::ConfigChanged { step, change } => self.line(format!(
                "config step={step} {}: {} -> {}",
                change.key(),
                change.before_text(),
                change.after_text()
            )),
            Event::Reference(r) => {
                if self.bar.is_none()
                    && let Some(k) = r.kn3("valid")
                {
                    self.line(format!(
                        "reference valid kn3_ppl={:.1} kn3_ppl_frequent={:.1} kn3_ppl_medium={:.1} kn3_ppl_rare={:.1}",
                        k[3], k[0], k[1], k[2]
                    ));
                }
            }
            Event::Embedding(e) => {
                self.last_i1 = Some(e.total.i1);
                if self.bar.is_none() {
                    self.line(embedding_line(e));
                }
            }
            Event::Applied(a) if a.coalesced => {}
            Event::Applied(a) => self.line(format!(
                "applied step={} {}: {} -> {}",
                a.step,
                a.command,
                a.change.before_text(),
                a.change.after_text()
            )),
            Event::Rejected {
                step,
                command,
                reason,
                ..
            } => self.line(format!("rejected step={step} {command}: {reason}")),
            Event::Checkpoint { step, path } => {
                self.line(format!("checkpoint step={step} {}", path.display()))
            }
            Event::Paused { step } => self.line(format!("paused step={step}")),
            Event::Resumed { step } => self.line(format!("resumed step={step}")),
            Event::Warning { step, message } => self.line(format!("warning step={step} {message}")),
            Event::WeightsBroken { step, reason } => {
                self.line(format!("error step={step} {reason}"))
            }
            Event::WorseThanUniform {
                step,
                measure,
                value,
                bound,
                steps,
            } => self.line(format!(
                "warning step={step} {}",
                Event::worse_than_uniform_text(*measure, *value, *bound, *steps)
            )),
            Event::Diverged { step, loss } => {
                self.diverged = Some((*step, *loss));
                self.line(format!(
                    "diverged step={step} loss={loss}: the step was not applied"
                ));
            }
            Event::Finished { step, reason } => {
                self.line(format!("finished step={step} ({})", reason.name()));
                let step = *step;
                self.outcome = Some(match reason {
                    FinishReason::Completed => RunOutcome::Completed { step },
                    FinishReason::Stopped => RunOutcome::Stopped { step },
                    FinishReason::Diverged => {
                        // The step that diverged (the one after the last trained).
                        let (step, loss) = self.diverged.unwrap_or((step + 1, f64::NAN));
                        RunOutcome::Diverged { step, loss }
                    }
                });
            }
            Event::Failed { step, message } => {
                self.line(format!("failed step={step}: {message}"));
                self.outcome = Some(RunOutcome::Failed {
                    message: message.clone(),
                });
            }
        }
        Ok(())
    }
}

pub fn eval_line(e: &EvalStats) -> String {
    let [f, m, r] = e.groups;
    // Three decimals; a diverged run's 10⁷⁵ in scientific notation, not its 76 digits.
    let ppl = |v: f64| {
        if v.abs() < 1e16 {
            format!("{v:.3}")
        } else {
            format!("{v:.4e}")
        }
    };
    format!(
        "eval step={} split={} ppl={} frequent={} medium={} rare={} uniq={} mu_z={:.3} sigma_z={:.3} positions={} seconds={:.2}",
        e.step,
        e.split,
        ppl(e.ppl),
        ppl(f.0),
        ppl(m.0),
        ppl(r.0),
        e.outputs.uniq,
        e.outputs.mu_z,
        e.outputs.sigma_z,
        e.positions,
        e.seconds
    )
}

pub fn embedding_line(e: &EmbeddingStats) -> String {
    let [f, m, r] = &e.groups;
    format!(
        "embedding step={} i1={:.4} i1_frequent={:.4} i1_medium={:.4} i1_rare={:.4} i1_unit={:.4} isoscore={:.4} isoscore_frequent={:.4} isoscore_medium={:.4} isoscore_rare={:.4} mean_cos={:.4} rare_frequent_cos={:.4} mean_norm={:.4} effective_rank={:.1} seconds={:.2}",
        e.step,
        e.total.i1,
        f.i1,
        m.i1,
        r.i1,
        e.total.i1_unit,
        e.total.isoscore,
        f.isoscore,
        m.isoscore,
        r.isoscore,
        e.total.mean_cos,
        e.rare_frequent_cos,
        e.total.mean_norm,
        e.total.effective_rank,
        e.seconds
    )
}
