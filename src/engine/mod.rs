//! The training engine: a [`Trainer`] on its own thread, a command channel in, an event channel
//! out (see [`protocol`]). The UI never waits on training and training never waits on the UI.

pub mod analysis;
pub mod config;
mod eval;
pub mod protocol;
mod trainer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;

pub use config::{OptimizerKind, Schedule, TrainConfig};
pub use protocol::{
    AppliedCommand, Command, EvalStats, Event, FinishReason, Snapshot, SnapshotSlot, StepStats,
};
pub use trainer::{RunState, Trainer, clip_global_norm};
pub(crate) use trainer::{build_optimizer, spectral_optimizer};

use crate::checkpoint::{self, CheckpointError, RunDir};
use crate::data::{Corpus, DataError, GroupBounds, LoadOptions, Split};
use crate::metrics::RowGroups;
use crate::model::{DeviceError, DeviceSpec};
use analysis::{AnalysisSlot, AnalysisWorker};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("loss is {loss} at step {step}")]
    Diverged { step: u64, loss: f64 },
    #[error("backend error: {0}")]
    Backend(String),
}

/// Rebuilds a run from its directory and its newest checkpoint (or the `step-NNNNNN` folder given),
/// optionally with a new total step count.
pub fn resume(path: &Path, steps: Option<u64>) -> Result<(Trainer, RunDir), EngineError> {
    resume_on(path, steps, None)
}

/// [`resume`] on another device than the run's own (e.g. evaluating a GPU run on a laptop).
pub fn resume_on(
    path: &Path,
    steps: Option<u64>,
    device: Option<DeviceSpec>,
) -> Result<(Trainer, RunDir), EngineError> {
    let run = RunDir::open(path)?;
    let spec = run.spec().clone();
    let bounds = GroupBounds::new(spec.group_bounds[0], spec.group_bounds[1])?;
    let corpus = Corpus::load(
        &spec.corpus.to_source(),
        &LoadOptions {
            groups: bounds,
            ..LoadOptions::default()
        },
    )?;
    let saved = run.vocab_tokens()?;
    if saved.as_slice() != corpus.vocab().tokens() {
        return Err(CheckpointError::Mismatch {
            path: run.path().join("vocab.tsv"),
            reason: format!(
                "the run's vocabulary ({} tokens) differs from the corpus's ({} tokens): was the corpus changed?",
                saved.len(),
                corpus.vocab().len()
            ),
        }
        .into());
    }
    let mut train = spec.train.clone();
    if let Some(s) = steps {
        train.steps = s;
    }
    let device = match device {
        Some(d) => d,
        None => spec
            .device
            .parse()
            .map_err(|e: DeviceError| EngineError::Config(e.to_string()))?,
    };
    let mut trainer = Trainer::new(Arc::new(corpus), spec.model.clone(), train, device)?;
    let step_dir: PathBuf = if path.join("model.safetensors").exists() {
        path.to_path_buf()
    } else {
        run.latest_checkpoint()?
    };
    let loaded = checkpoint::load(
        &step_dir,
        &spec.model,
        trainer.corpus().vocab().len(),
        trainer.config(),
        trainer.device(),
    )?;
    trainer.restore(
        loaded.model,
        loaded.optimizer,
        loaded.spectral_optimizer,
        loaded.state,
        loaded.carried,
    );
    Ok((trainer, run))
}

/// The UI's end of a running engine.
pub struct EngineHandle {
    commands: Sender<Command>,
    events: Receiver<Event>,
    snapshots: SnapshotSlot,
    analyses: AnalysisSlot,
    thread: Option<JoinHandle<()>>,
    /// Threads that sit between the engine and the consumer (the metrics store's recorder).
    taps: Vec<JoinHandle<()>>,
}

impl EngineHandle {
    /// Puts `tap` between the engine and the consumer: it gets the engine's events and a sender
    /// for the ones the consumer should see, and runs on a thread of its own named `name` (so
    /// neither training nor drawing waits on it). `join` waits for it too. Fails only when the OS
    /// refuses a thread; the caller should then stop the process.
    pub fn tap_events<F>(mut self, name: &str, tap: F) -> std::io::Result<Self>
    where
        F: FnOnce(Receiver<Event>, Sender<Event>) + Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        let upstream = std::mem::replace(&mut self.events, rx);
        let t = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || tap(upstream, tx))?;
        self.taps.push(t);
        Ok(self)
    }

    /// Sends a command; it is applied before the next optimizer step.
    pub fn send(&self, command: Command) {
        // The engine thread may already have finished; then there is nobody to obey.
        let _ = self.commands.send(command);
    }

    /// A second sender, e.g. for a signal handler.
    pub fn command_sender(&self) -> Sender<Command> {
        self.commands.clone()
    }

    pub fn events(&self) -> &Receiver<Event> {
        &self.events
    }

    pub fn snapshots(&self) -> &SnapshotSlot {
        &self.snapshots
    }

    /// The newest snapshot's embedding analysis (metrics and 2-D projection).
    pub fn analyses(&self) -> &AnalysisSlot {
        &self.analyses
    }

    /// Waits for the engine thread to end.
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        for t in self.taps.drain(..) {
            let _ = t.join();
        }
    }
}

/// Starts the engine thread.
pub fn spawn(trainer: Trainer, run: Option<RunDir>) -> EngineHandle {
    let (command_tx, command_rx) = mpsc::channel();
    let (event_tx, event_rx) = mpsc::channel();
    let snapshots = SnapshotSlot::default();
    let slot = snapshots.clone();
    let analyses = AnalysisSlot::default();
    let analysis_out = analyses.clone();
    let thread = std::thread::Builder::new()
        .name("conelab-engine".into())
        .spawn(move || {
            let groups = RowGroups::from_ranks(trainer.corpus().groups());
            let analysis = AnalysisWorker::start(groups, event_tx.clone(), analysis_out);
            let mut engine = Engine {
                trainer,
                run,
                events: event_tx,
                snapshots: slot,
                analysis,
                last_saved: None,
            };
            let step = engine.trainer.state().step;
            let result =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.run(command_rx)));
            match result {
                Ok(Ok(())) => {}
                Ok(Err(e)) => engine.emit(Event::Failed {
                    step: engine.trainer.state().step,
                    message: e.to_string(),
                }),
                Err(panic) => {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "the backend panicked".into());
                    engine.emit(Event::Failed { step, message });
                }
            }
        });
    EngineHandle {
        commands: command_tx,
        events: event_rx,
        snapshots,
        analyses,
        thread: thread.ok(),
        taps: Vec::new(),
    }
}

struct Engine {
    trainer: Trainer,
    run: Option<RunDir>,
    events: Sender<Event>,
    snapshots: SnapshotSlot,
    analysis: AnalysisWorker,
    /// Step of the newest checkpoint written, so the end of a run does not write it twice.
    last_saved: Option<u64>,
}

enum Flow {
    Continue,
    Pause,
    Resume,
    Stop,
}

impl Engine {
    fn emit(&self, event: Event) {
        // A consumer that went away does not stop training.
        let _ = self.events.send(event);
    }

    fn step(&self) -> u64 {
        self.trainer.state().step
    }

    fn run(&mut self, commands: Receiver<Command>) -> Result<(), EngineError> {
        self.emit(Event::Started {
            step: self.step(),
            total_steps: self.trainer.config().steps,
            windows_per_epoch: self.trainer.windows_per_epoch(),
            parameters: self.trainer.parameters(),
            device: self.trainer.device_spec().to_string(),
            run_dir: self.run.as_ref().map(|r| r.path().to_path_buf()),
            objective: self.trainer.objectives().label(),
        });
        let mut paused = false;
        loop {
            // Commands are applied here, between two optimizer steps.
            loop {
                let command = if paused {
                    match commands.recv() {
                        Ok(c) => c,
                        // Nobody is left to resume a paused run: end it, keeping its state.
                        Err(_) => Command::Stop { save: true },
                    }
                } else {
                    match commands.try_recv() {
                        Ok(c) => c,
                        Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                    }
                };
                match self.handle(command)? {
                    Flow::Continue => {}
                    Flow::Pause => paused = true,
                    Flow::Resume => paused = false,
                    Flow::Stop => return Ok(()),
                }
            }
            if paused {
                continue;
            }
            if self.trainer.is_done() {
                self.finish()?;
                return Ok(());
            }
            match self.trainer.train_step() {
                Ok(stats) => self.emit(Event::Step(stats)),
                Err(EngineError::Diverged { step, loss }) => {
                    self.emit(Event::Diverged { step, loss });
                    self.emit(Event::Paused { step: self.step() });
                    paused = true;
                    continue;
                }
                Err(e) => return Err(e),
            }
            self.after_step()?;
        }
    }

    fn handle(&mut self, command: Command) -> Result<Flow, EngineError> {
        let applied = match self.trainer.apply(&command) {
            Ok(a) => a,
            Err(reason) => {
                self.emit(Event::Rejected {
                    step: self.step() + 1,
                    command,
                    reason,
                });
                return Ok(Flow::Continue);
            }
        };
        self.emit(Event::Applied(applied));
        Ok(match command {
            Command::Pause => {
                self.emit(Event::Paused { step: self.step() });
                Flow::Pause
            }
            Command::Resume => {
                self.emit(Event::Resumed { step: self.step() });
                Flow::Resume
            }
            Command::SetLr { .. } | Command::Objective { .. } => Flow::Continue,
            Command::SaveCheckpoint => {
                self.save()?;
                Flow::Continue
            }
            Command::Stop { save } => {
                if save {
                    self.save()?;
                }
                self.analysis.finish();
                self.emit(Event::Finished {
                    step: self.step(),
                    reason: FinishReason::Stopped,
                });
                Flow::Stop
            }
        })
    }

    fn after_step(&mut self) -> Result<(), EngineError> {
        let step = self.step();
        let cfg = self.trainer.config();
        let (eval_every, snapshot_every, checkpoint_every) =
            (cfg.eval_every, cfg.snapshot_every, cfg.checkpoint_every);
        let due = |every: u64| every > 0 && step.is_multiple_of(every);
        if due(eval_every) {
            self.evaluate_valid()?;
        }
        if due(snapshot_every) {
            self.take_snapshot()?;
        }
        if due(checkpoint_every) {
            self.save()?;
        }
        Ok(())
    }

    fn evaluate_valid(&mut self) -> Result<(), EngineError> {
        let stats = self.trainer.evaluate(Split::Valid)?;
        let ppl = stats.ppl;
        self.emit(Event::Eval(stats));
        if let Some((before, after)) = self.trainer.observe_valid(ppl) {
            self.emit(Event::Warning {
                step: self.step(),
                message: format!(
                    "validation PPL did not improve: plateau schedule lowers lr {before:.3e} → {after:.3e}"
                ),
            });
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), EngineError> {
        let step = self.step();
        let cfg = self.trainer.config();
        if cfg.eval_every == 0 || !step.is_multiple_of(cfg.eval_every) {
            self.evaluate_valid()?;
        }
        self.emit(Event::Eval(self.trainer.evaluate(Split::Test)?));
        self.take_snapshot()?;
        if self.last_saved != Some(step) {
            self.save()?;
        }
        // The last snapshot's metrics come before Finished.
        self.analysis.finish();
        self.emit(Event::Finished {
            step,
            reason: FinishReason::Completed,
        });
        Ok(())
    }

    /// Copies W to the host once; the UI and the metrics worker share the copy.
    fn take_snapshot(&mut self) -> Result<(), EngineError> {
        let snapshot = Arc::new(self.trainer.snapshot()?);
        self.snapshots.put(snapshot.clone());
        self.analysis.submit(snapshot);
        self.emit(Event::Snapshot { step: self.step() });
        Ok(())
    }

    fn save(&mut self) -> Result<(), EngineError> {
        let Some(run) = &self.run else {
            return Ok(());
        };
        let path = checkpoint::save(run, &self.trainer, self.trainer.config().keep_checkpoints)?;
        self.last_saved = Some(self.step());
        self.emit(Event::Checkpoint {
            step: self.step(),
            path,
        });
        Ok(())
    }
}
