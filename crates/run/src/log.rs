//! `train.log`: every run writes its events to a log file in its folder, whatever its stdout is
//! (a terminal's progress bar, a pipe, `output.log` of a background run), through `tracing`:
//! `RUST_LOG` filters it (default `info`: a step line every `--log-every` steps, every
//! evaluation, analysis, change, checkpoint and the end; `RUST_LOG=conelab=debug` adds every
//! step), `--log-format json` writes one JSON object per line for machines.
//!
//! The lines are written by the run process's reporting thread, never by the training step, and
//! appended: a resumed run continues its file. A write that fails (disk full) loses that line,
//! never the lines before it, and never stops the run; the first loss is said once on stderr
//! (tracing's own complaint, a line per lost event, is never reached).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;

use tracing::{Dispatch, debug, error, info, warn};
use tracing_subscriber::EnvFilter;

use conelab_core::events::Event;
use conelab_core::events::EventSink;

/// The log file in a run folder.
pub const TRAIN_LOG: &str = "train.log";

/// How train.log is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-11-23T22:00:00.000000Z  INFO conelab::step: step step=600 loss=5.81 …`
    #[default]
    Plain,
    /// `{"timestamp":…,"level":"INFO","fields":{"message":"step","step":600,…},"target":…}`
    Json,
}

/// The log file, its failures injectable (`log.write`).
struct LogFile {
    file: File,
    /// The first lost line has been said (a loss is said once, however many follow).
    said_loss: bool,
}

impl LogFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        conelab_base::fault::check("log.write")?;
        self.file.write_all(buf)
    }
}

impl Write for LogFile {
    /// Never fails: a line that cannot be written is lost (and the first loss said), so that
    /// tracing-subscriber does not print its own complaint for every event of a full disk.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Err(e) = self.append(buf) {
            if !self.said_loss {
                conelab_base::stderr::say(&format!(
                    "conelab: warning: {TRAIN_LOG}: {e}; its lines are lost while that lasts \
                     (the store keeps every number)"
                ));
            }
            self.said_loss = true;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// A run's train.log.
pub struct RunLog {
    dispatch: Dispatch,
    /// A step line every this many steps at `info` (the others at `debug`).
    every: u64,
}

impl RunLog {
    /// Opens (appends to) `run_dir/train.log`, filtered by `filter` (`RUST_LOG`'s syntax;
    /// `None` or empty: `info`). Returns also a warning to show when the filter is not valid
    /// (`info` is used then).
    pub fn open(
        run_dir: &Path,
        format: LogFormat,
        every: u64,
        filter: Option<&str>,
    ) -> io::Result<(Self, Option<String>)> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(run_dir.join(TRAIN_LOG))?;
        let (filter, warning) = match filter {
            Some(spec) if !spec.trim().is_empty() => match EnvFilter::try_new(spec) {
                Ok(f) => (f, None),
                Err(e) => (
                    EnvFilter::new("info"),
                    Some(format!(
                        "RUST_LOG={spec:?} is not a filter ({e}); train.log uses `info`"
                    )),
                ),
            },
            _ => (EnvFilter::new("info"), None),
        };
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(Mutex::new(LogFile {
                file,
                said_loss: false,
            }));
        let dispatch = match format {
            LogFormat::Plain => Dispatch::new(builder.finish()),
            LogFormat::Json => Dispatch::new(builder.json().finish()),
        };
        Ok((
            Self {
                dispatch,
                every: every.max(1),
            },
            warning,
        ))
    }

    /// Writes what `event` says (a projection or a snapshot says nothing).
    pub fn event(&self, event: &Event) {
        tracing::dispatcher::with_default(&self.dispatch, || emit(event, self.every));
    }

    /// A failure no event carries (the run's threads ended without a final word).
    pub fn failure(&self, message: &str) {
        tracing::dispatcher::with_default(
            &self.dispatch,
            || error!(target: "conelab::run", error = %message, "failed"),
        );
    }
}

impl EventSink for RunLog {
    type Error = std::convert::Infallible;
    fn on_event(&mut self, event: &Event) -> Result<(), Self::Error> {
        self.event(event);
        Ok(())
    }
}

fn emit(event: &Event, every: u64) {
    match event {
        Event::Started(s) => {
            let dir = s
                .run_dir
                .as_ref()
                .map(|d| d.display().to_string())
                .unwrap_or_default();
            info!(target: "conelab::run", step = s.step, total_steps = s.total_steps,
                windows_per_epoch = s.windows_per_epoch, parameters = s.parameters,
                device = %s.device, run_dir = %dir, objective = %s.objective, "start");
        }
        Event::ConfigChanged { step, change } => info!(target: "conelab::run", step,
            key = %change.key(), before = %change.before_text(), after = %change.after_text(),
            "config changed on resume"),
        Event::Step(s) => {
            macro_rules! step_line {
                ($level:ident) => {
                    $level!(target: "conelab::step", step = s.step, epoch = s.epoch, loss = s.loss,
                        penalty = s.penalty, lr = s.lr, grad_norm = s.grad_norm,
                        tokens_per_sec = s.tokens_per_sec, ms_per_step = s.step_ms,
                        rare_tokens = s.rare_tokens.map(|r| r as u64), rare_g1 = s.rare_g1,
                        "step")
                };
            }
            if s.step.is_multiple_of(every) {
                step_line!(info);
            } else {
                step_line!(debug);
            }
        }
        Event::Eval(e) => {
            let o = &e.outputs;
            info!(target: "conelab::eval", step = e.step, split = %e.split, loss = e.loss,
                ppl = e.ppl, ppl_frequent = e.groups[0].0, ppl_medium = e.groups[1].0,
                ppl_rare = e.groups[2].0, uniq = o.uniq as u64, mu_z = o.mu_z,
                sigma_z = o.sigma_z, positions = e.positions, seconds = e.seconds, "eval");
        }
        Event::Reference(r) => {
            if let Some(k) = r.kn3("valid") {
                info!(target: "conelab::eval", step = r.step, kn3_ppl = k[3],
                    kn3_ppl_frequent = k[0], kn3_ppl_medium = k[1], kn3_ppl_rare = k[2],
                    "reference");
            }
        }
        Event::Embedding(e) => {
            let t = &e.total;
            info!(target: "conelab::embedding", step = e.step, i1 = t.i1, i1_unit = t.i1_unit,
                isoscore = t.isoscore, mean_cos = t.mean_cos, mean_norm = t.mean_norm,
                effective_rank = t.effective_rank, sv_max = t.sv_max, seconds = e.seconds,
                "embedding");
            if let Some(s) = &e.spectral {
                info!(target: "conelab::embedding", step = e.step, sigma_update = %s.update,
                    prior_gap = s.prior_gap(), sigma_vs_w = s.sigma_vs_w, u_orth = s.u_orth,
                    v_orth = s.v_orth, sigma_max = s.sigma.first().copied().unwrap_or(f64::NAN),
                    target_max = s.targets.first().copied().unwrap_or(f64::NAN),
                    "spectrum control");
            }
        }
        Event::Applied(a) if a.coalesced => {}
        Event::Applied(a) => info!(target: "conelab::run", step = a.step,
            command = %a.command, before = %a.change.before_text(),
            after = %a.change.after_text(), "applied"),
        Event::Rejected {
            step,
            command,
            reason,
            ..
        } => warn!(target: "conelab::run", step, command = %command, reason = %reason,
            "rejected"),
        Event::Checkpoint { step, path } => {
            info!(target: "conelab::run", step, path = %path.display(), "checkpoint")
        }
        Event::Paused { step } => info!(target: "conelab::run", step, "paused"),
        Event::Resumed { step } => info!(target: "conelab::run", step, "resumed"),
        Event::Diverged { step, loss } => {
            error!(target: "conelab::run", step, loss, "diverged: paused at the last good step")
        }
        Event::Warning { step, message } => {
            warn!(target: "conelab::run", step, warning = %message, "warning")
        }
        Event::WeightsBroken { step, reason } => {
            error!(target: "conelab::run", step, reason = %reason,
                advice = conelab_core::events::diverged_advice(true), "weights broken")
        }
        Event::WorseThanUniform {
            step,
            measure,
            value,
            bound,
            steps,
        } => warn!(target: "conelab::run", step, measure = %measure.name(), value, bound,
            steps, "worse than uniform"),
        Event::Finished { step, reason } => {
            info!(target: "conelab::run", step, reason = %reason.name(), "finished")
        }
        Event::Failed { step, message } => {
            error!(target: "conelab::run", step, error = %message, "failed")
        }
        // Every 5 s: in the store, and in train.log only at debug level.
        Event::System(s) => {
            debug!(target: "conelab::system", step = s.step, cpu_percent = s.cpu_percent,
                rss_bytes = s.rss_bytes, host_used_bytes = s.host_used_bytes,
                host_total_bytes = s.host_total_bytes, "system")
        }
        Event::Projection(_)
        | Event::Recorded(_)
        | Event::Snapshot { .. }
        | Event::CheckpointStaged { .. }
        | Event::EvalProgress { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conelab_core::events::{FinishReason, StepStats};

    fn step(n: u64) -> Event {
        Event::Step(StepStats {
            step: n,
            epoch: 0.5,
            loss: 4.25,
            penalty: 0.0,
            lr: 1e-3,
            grad_norm: 1.5,
            tokens_per_sec: 1000.0,
            step_ms: 2.0,
            rare_tokens: None,
            rare_g1: None,
            rare_in_group: None,
        })
    }

    #[test]
    fn plain_lines_every_n_steps_and_the_end() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (log, _) = RunLog::open(tmp.path(), LogFormat::Plain, 2, None).expect("open");
        for n in 1..=4 {
            log.event(&step(n));
        }
        log.event(&Event::Finished {
            step: 4,
            reason: FinishReason::Completed,
        });
        let text = std::fs::read_to_string(tmp.path().join(TRAIN_LOG)).expect("log");
        let steps: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("conelab::step"))
            .collect();
        // RUST_LOG unset in tests: info, so steps 2 and 4 only.
        if std::env::var("RUST_LOG").is_err() {
            assert_eq!(steps.len(), 2, "{text}");
            assert!(
                steps[0].contains("INFO conelab::step: step step=2 epoch=0.5 loss=4.25"),
                "{text}"
            );
        }
        assert!(!text.contains('\u{1b}'), "no escape codes: {text:?}");
        let last = text.lines().last().unwrap_or_default();
        assert!(last.contains("finished step=4 reason=completed"), "{text}");
    }

    #[test]
    fn json_lines_parse_and_carry_the_fields() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (log, _) = RunLog::open(tmp.path(), LogFormat::Json, 1, None).expect("open");
        log.event(&step(3));
        let text = std::fs::read_to_string(tmp.path().join(TRAIN_LOG)).expect("log");
        let v: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON object");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["fields"]["message"], "step");
        assert_eq!(v["fields"]["step"], 3);
        assert_eq!(v["fields"]["loss"], 4.25);
        assert!(v["fields"].get("rare_tokens").is_none(), "None is left out");
    }

    #[test]
    fn a_failed_write_loses_that_line_only() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (log, _) = RunLog::open(tmp.path(), LogFormat::Plain, 1, None).expect("open");
        conelab_base::fault::with_plan("log.write:2:ENOSPC", || {
            for n in 1..=3 {
                log.event(&step(n));
            }
        });
        let text = std::fs::read_to_string(tmp.path().join(TRAIN_LOG)).expect("log");
        let steps: Vec<&str> = text.lines().collect();
        assert_eq!(steps.len(), 2, "{text}");
        assert!(
            steps[0].contains("step=1") && steps[1].contains("step=3"),
            "{text}"
        );
        // Appending: a second open (a resume) keeps what is there.
        drop(log);
        let (log, _) = RunLog::open(tmp.path(), LogFormat::Plain, 1, None).expect("open");
        log.event(&step(4));
        let text = std::fs::read_to_string(tmp.path().join(TRAIN_LOG)).expect("log");
        assert_eq!(text.lines().count(), 3);
    }

    #[test]
    fn the_filter_chooses_what_is_written_and_a_bad_one_is_said() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (log, warning) =
            RunLog::open(tmp.path(), LogFormat::Plain, 2, Some("conelab=debug")).expect("open");
        assert!(warning.is_none());
        for n in 1..=4 {
            log.event(&step(n));
        }
        log.failure("the run's threads ended");
        let text = std::fs::read_to_string(tmp.path().join(TRAIN_LOG)).expect("log");
        assert_eq!(
            text.lines().filter(|l| l.contains("DEBUG")).count(),
            2,
            "{text}"
        );
        assert!(
            text.contains("ERROR conelab::run: failed error=the run's threads ended"),
            "{text}"
        );
        let other = tempfile::tempdir().expect("tmp");
        let (log, warning) =
            RunLog::open(other.path(), LogFormat::Plain, 1, Some("conelab::step=off"))
                .expect("open");
        log.event(&step(1));
        assert!(warning.is_none());
        let text = std::fs::read_to_string(other.path().join(TRAIN_LOG)).expect("log");
        assert!(text.is_empty(), "{text}");
        let (_, warning) =
            RunLog::open(other.path(), LogFormat::Plain, 1, Some("=[")).expect("open");
        assert!(warning.is_some_and(|w| w.contains("not a filter")));
    }
}
