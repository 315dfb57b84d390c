//! The training engine: a [`Trainer`] on its own thread, a command channel in, an event channel
//! out (see [`protocol`]). The UI never waits on training and training never waits on the UI.
//!
//! The engine knows nothing of run directories: checkpoints go through a [`CheckpointSink`]
//! given by its owner (`checkpoint::Checkpointer`), so `checkpoint` builds on `engine`, never the
//! other way round.

mod eval;
pub mod fused_adamw;
mod grad_norm;
mod trainer;
pub mod worse_than_uniform;

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use conelab_core::events::{
    AppliedCommand, Command, CommandSender, DivergencePolicy, Envelope, EvalStats, Event,
    FinishReason, RunStarted,
};
use conelab_core::run_fault::{Fault, backend_panic_message};
use conelab_core::state::RunState;
pub use trainer::{
    COMMAND_LOG, ReadBack, Trainer, WEIGHT_BOUND, clip_global_norm, memory_refusal,
    training_bytes_needed,
};
pub(crate) use trainer::{build_optimizer, spectral_optimizer};

use conelab_base::error::{BoxError, Invalid, chain};
use conelab_core::analysis::{AnalysisWorker, LatestAnalysis};
use conelab_core::model::DeviceError;
use conelab_core::objective::{FreezeConfig, ObjectiveChange};
use conelab_core::run_dir::CheckpointError;
use conelab_data::DataError;
use conelab_metrics::RowGroups;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A setting, a corpus or a change that cannot work; where another error refuses it (a split
    /// too short for the batch, a test terminal), that error is its source.
    #[error("invalid configuration: {0}")]
    Config(#[source] Invalid),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("checkpoint: {what}")]
    Checkpoint {
        what: &'static str,
        #[source]
        source: CheckpointError,
    },
    #[error("loss is {loss} at step {step}")]
    Diverged { step: u64, loss: f64 },
    /// The backend refused (reading a tensor back, a device, a thread), with its own error
    /// where it gave one.
    #[error("backend error: {what}")]
    Backend {
        what: Cow<'static, str>,
        #[source]
        source: Option<BoxError>,
    },
}

impl EngineError {
    /// For `map_err`: the backend's error, with what was being done.
    /// `what` is borrowed when it is a literal: the steps call this on every read-back, and a
    /// step that succeeds allocates nothing for it.
    pub fn backend<E: Into<BoxError>>(
        what: impl Into<Cow<'static, str>>,
    ) -> impl FnOnce(E) -> Self {
        let what = what.into();
        move |e| EngineError::Backend {
            what,
            source: Some(e.into()),
        }
    }

    /// For `map_err`: `what` is not a configuration that can work, as the error says.
    pub fn invalid<E: Into<BoxError>>(what: impl Into<String>) -> impl FnOnce(E) -> Self {
        let what = what.into();
        move |e| EngineError::Config(Invalid::because(what)(e))
    }

    /// A backend failure no library error stands behind (a number that is not finite).
    pub fn backend_says(what: impl Into<Cow<'static, str>>) -> Self {
        EngineError::Backend {
            what: what.into(),
            source: None,
        }
    }
}

/// Where a checkpoint went.
#[derive(Debug, Clone, PartialEq)]
pub enum SavedCheckpoint {
    /// The checkpoint is in place (`step-NNNNNN`).
    Committed(PathBuf),
    /// Written and fsynced in a staging folder; its owner puts it in place once the metrics store
    /// is durable up to its step (see [`Event::CheckpointStaged`]).
    Staged { staging: PathBuf, keep: usize },
}

/// Writes checkpoints of a trainer (a run directory's `checkpoint::Checkpointer`).
pub trait CheckpointSink: Send {
    /// The run directory, reported in [`Event::Started`].
    fn run_dir(&self) -> Option<PathBuf>;
    /// Writes a checkpoint of the trainer at its current step.
    fn save(&mut self, trainer: &Trainer) -> Result<SavedCheckpoint, CheckpointError>;
    /// Keeps the trainer as the run's best checkpoint if `ppl`, its validation perplexity, is
    /// lower than the one kept (`best/`); the path when it did.
    fn save_best(
        &mut self,
        trainer: &Trainer,
        ppl: f64,
    ) -> Result<Option<PathBuf>, CheckpointError>;
}

/// How an engine is wired to its owner.
#[derive(Default)]
pub struct EngineOptions {
    pub checkpoints: Option<Box<dyn CheckpointSink>>,
    pub divergence: DivergencePolicy,
    pub fault: Fault,
    /// Where the newest embedding analysis is published.
    pub latest: LatestAnalysis,
    /// Events emitted right after [`Event::Started`] (settings a resume changed).
    pub announce: Vec<Event>,
    /// Commands applied before the first step (a resume's new objectives or lr): given here, not
    /// sent after the start, so that no step can run before them.
    pub initial_commands: Vec<Command>,
    /// Take a snapshot of the starting step before the first step: a resumed run whose
    /// checkpoint's analysis never reached the store (a kill just after the checkpoint).
    pub snapshot_first: bool,
}

impl EngineOptions {
    pub fn with_checkpoints(sink: impl CheckpointSink + 'static) -> Self {
        Self {
            checkpoints: Some(Box::new(sink)),
            ..Self::default()
        }
    }
}

/// The owner's end of a running engine.
pub struct EngineHandle {
    commands: CommandSender,
    events: Receiver<Event>,
    latest: LatestAnalysis,
    thread: Option<JoinHandle<()>>,
}

impl EngineHandle {
    /// Sends a command; it is applied before the next optimizer step.
    pub fn send(&self, command: Command) {
        // The engine thread may already have finished; then there is nobody to obey.
        let _ = self.commands.send(command);
    }

    /// A second sender, e.g. for a signal handler.
    pub fn command_sender(&self) -> CommandSender {
        self.commands.clone()
    }

    pub fn events(&self) -> &Receiver<Event> {
        &self.events
    }

    /// The newest snapshot's analysis (W, metrics and 2-D projections).
    pub fn latest_analysis(&self) -> &LatestAnalysis {
        &self.latest
    }

    /// Hands the event stream to another owner (the metrics store's recorder); the handle keeps
    /// the command channel and the thread.
    pub fn take_events(self) -> (EngineControl, Receiver<Event>) {
        (
            EngineControl {
                commands: self.commands,
                latest: self.latest,
                thread: self.thread,
            },
            self.events,
        )
    }

    /// Waits for the engine thread to end.
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An engine whose events someone else reads.
pub struct EngineControl {
    pub commands: CommandSender,
    pub latest: LatestAnalysis,
    thread: Option<JoinHandle<()>>,
}

impl EngineControl {
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the engine thread. Fails only when the OS refuses a thread.
pub fn spawn(trainer: Trainer, options: EngineOptions) -> std::io::Result<EngineHandle> {
    let (command_tx, command_rx) = mpsc::channel();
    let (event_tx, event_rx) = mpsc::channel();
    let latest = options.latest.clone();
    let groups = RowGroups::from_ranks(trainer.corpus().groups());
    let analysis = AnalysisWorker::start(
        groups,
        event_tx.clone(),
        options.latest.clone(),
        options.fault.clone(),
    )?;
    let thread = std::thread::Builder::new()
        .name("conelab-engine".into())
        .spawn(move || {
            let uniform = worse_than_uniform::UniformWatch::new(trainer.corpus().vocab().len());
            let mut engine = Engine {
                trainer,
                uniform,
                checkpoints: options.checkpoints,
                events: event_tx,
                analysis,
                last_saved: None,
                last_applied: None,
                divergence: options.divergence,
                fault: options.fault,
                announce: options.announce,
                initial_commands: options.initial_commands,
                snapshot_first: options.snapshot_first,
                diverged: false,
                weights_broken: false,
                orphaned: false,
            };
            let result =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.run(command_rx)));
            // The step the engine had reached, not the one it started from.
            let step = engine.step();
            match result {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    engine.analysis.finish();
                    engine.emit(Event::Failed {
                        step,
                        message: chain(&e),
                    })
                }
                Err(panic) => {
                    engine.analysis.finish();
                    engine.emit(Event::Failed {
                        step,
                        message: backend_panic_message(panic.as_ref()),
                    });
                }
            }
        })?;
    Ok(EngineHandle {
        commands: CommandSender::from_channel(command_tx),
        events: event_rx,
        latest,
        thread: Some(thread),
    })
}

struct Engine {
    trainer: Trainer,
    /// Whether the model does worse than a uniform guess (said as an event of its own).
    uniform: worse_than_uniform::UniformWatch,
    checkpoints: Option<Box<dyn CheckpointSink>>,
    events: Sender<Event>,
    analysis: AnalysisWorker,
    /// Step of the newest checkpoint written, so the end of a run does not write it twice.
    last_saved: Option<u64>,
    divergence: DivergencePolicy,
    fault: Fault,
    announce: Vec<Event>,
    initial_commands: Vec<Command>,
    snapshot_first: bool,
    /// Paused after a divergence and not resumed since: a stop ends the run as diverged.
    diverged: bool,
    /// Paused after a divergence whose steps before broke the weights ([`Event::WeightsBroken`]).
    weights_broken: bool,
    /// Nobody reads the events any more (the recorder died): the run stops after saving.
    orphaned: bool,
    /// The newest setting command applied, and the step it was applied after (coalescing).
    last_applied: Option<(u64, Command)>,
}

/// Commands applied between two steps at most; the rest wait, in order, for the next.
pub const COMMANDS_PER_STEP: usize = 32;

/// While paused no step paces the commands: [`COMMANDS_PER_STEP`] of them per this long instead,
/// so a flood of commands cannot grow a paused run's log and store without bound (10,846 a second
/// were applied, logged and stored before).
pub const PAUSED_COMMAND_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

enum CommandFlow {
    Continue,
    Pause,
    Resume,
    Stop,
}

impl Engine {
    fn emit(&mut self, event: Event) {
        let loss_is_nll = self.trainer.objectives().loss == conelab_core::objective::LossKind::Mle;
        let finding = self.uniform.observe(&event, loss_is_nll);
        for event in std::iter::once(event).chain(finding) {
            if self.events.send(event).is_err() {
                self.orphaned = true;
            }
        }
    }

    fn step(&self) -> u64 {
        self.trainer.state().step
    }

    fn run(&mut self, commands: Receiver<Envelope>) -> Result<(), EngineError> {
        let objectives = self.trainer.objectives().clone();
        self.emit(Event::Started(Box::new(RunStarted {
            step: self.step(),
            total_steps: self.trainer.config().steps,
            windows_per_epoch: self.trainer.windows_per_epoch(),
            parameters: self.trainer.parameters(),
            device: self.trainer.device_spec().to_string(),
            run_dir: self.checkpoints.as_ref().and_then(|c| c.run_dir()),
            objective: objectives.label(),
            objectives,
        })));
        for event in std::mem::take(&mut self.announce) {
            self.emit(event);
        }
        if std::mem::take(&mut self.snapshot_first) {
            // The starting checkpoint's analysis, which never reached the store.
            self.take_snapshot()?;
        }
        let mut paused = false;
        for command in std::mem::take(&mut self.initial_commands) {
            match self.handle(Envelope {
                command,
                ticket: None,
            })? {
                CommandFlow::Continue => {}
                CommandFlow::Pause => paused = true,
                CommandFlow::Resume => paused = false,
                CommandFlow::Stop => return Ok(()),
            }
        }
        loop {
            if let Some(message) = self.fault.get() {
                // The step still queued is read first: only a finite one is saved.
                if let Ok(CommandFlow::Stop) = self.settle() {
                    return Ok(());
                }
                return self.fail_after_saving(message);
            }
            if self.orphaned {
                // Nobody records or shows anything any more: keep what was trained and end.
                if let Ok(CommandFlow::Stop) = self.settle() {
                    return Ok(());
                }
                let _ = self.save();
                self.analysis.finish();
                return Ok(());
            }
            // Commands are applied here, between two optimizer steps: at most
            // `COMMANDS_PER_STEP` each time, the rest waiting in order for the next (a flood of
            // commands cannot stall training).
            let mut handled = 0;
            // When the first command of this round was taken (the pace while paused).
            let mut first_taken: Option<std::time::Instant> = None;
            loop {
                if handled == COMMANDS_PER_STEP {
                    if let (true, Some(first)) = (paused, first_taken) {
                        std::thread::sleep(PAUSED_COMMAND_PERIOD.saturating_sub(first.elapsed()));
                    }
                    break;
                }
                handled += 1;
                let envelope = if paused {
                    match commands.recv_timeout(std::time::Duration::from_millis(200)) {
                        Ok(c) => c,
                        // Look at faults while paused too.
                        Err(mpsc::RecvTimeoutError::Timeout) => break,
                        // Nobody is left to resume a paused run: end it, keeping its state.
                        Err(mpsc::RecvTimeoutError::Disconnected) => Envelope {
                            command: Command::Stop { save: true },
                            ticket: None,
                        },
                    }
                } else {
                    match commands.try_recv() {
                        Ok(c) => c,
                        Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                    }
                };
                first_taken.get_or_insert_with(std::time::Instant::now);
                // A command applies to a step whose loss is known: the one queued is read first.
                match self.settle()? {
                    CommandFlow::Pause => paused = true,
                    CommandFlow::Stop => return Ok(()),
                    CommandFlow::Continue | CommandFlow::Resume => {}
                }
                match self.handle(envelope)? {
                    CommandFlow::Continue => {}
                    CommandFlow::Pause => paused = true,
                    CommandFlow::Resume => paused = false,
                    CommandFlow::Stop => return Ok(()),
                }
            }
            if paused {
                continue;
            }
            if self.trainer.is_done() {
                match self.settle()? {
                    CommandFlow::Pause => {
                        paused = true;
                        continue;
                    }
                    CommandFlow::Stop => return Ok(()),
                    // A divergence at the last step put the run back before it.
                    _ if !self.trainer.is_done() => continue,
                    CommandFlow::Continue | CommandFlow::Resume => {}
                }
                self.finish()?;
                return Ok(());
            }
            // Thawing only lifts a constraint, so it is never refused (and never repeated).
            if let Some(change) = self.freeze_expiry() {
                match self.settle()? {
                    CommandFlow::Pause => {
                        paused = true;
                        continue;
                    }
                    CommandFlow::Stop => return Ok(()),
                    CommandFlow::Continue | CommandFlow::Resume => {}
                }
                let command = Command::Objective { change };
                self.handle(Envelope {
                    command,
                    ticket: None,
                })?;
            }
            // Step n is queued on a GPU while step n − 1's values are read back
            // (`Trainer::step_pipelined`): a viewer sees each step one step late.
            let back = self.trainer.step_pipelined()?;
            match self.report(back) {
                CommandFlow::Continue | CommandFlow::Resume => {}
                CommandFlow::Pause => {
                    paused = true;
                    continue;
                }
                CommandFlow::Stop => return Ok(()),
            }
            match self.after_step()? {
                CommandFlow::Continue | CommandFlow::Resume => {}
                CommandFlow::Pause => paused = true,
                CommandFlow::Stop => return Ok(()),
            }
        }
    }

    /// Emits the steps the trainer read back; a divergence pauses the run (someone watches)
    /// or ends it.
    fn report(&mut self, back: ReadBack) -> CommandFlow {
        for stats in back.steps {
            self.emit(Event::Step(stats));
        }
        let Some((step, loss)) = back.diverged else {
            return CommandFlow::Continue;
        };
        self.emit(Event::Diverged { step, loss });
        if self.divergence.pauses() {
            self.diverged = true;
            let at = self.step();
            self.emit(Event::Paused { step: at });
            // The diverging step was not applied, but the steps before it may have blown the
            // weights up with a finite loss (an lr of 1e9: one step to weights of 1e9, the next
            // loss NaN): then a lower lr cannot help, and the user is told what can.
            if let Err(why) = self.trainer.weights_check() {
                self.weights_broken = true;
                self.emit(Event::WeightsBroken {
                    step: at,
                    reason: format!(
                        "the weights did not survive the steps before the divergence ({why})"
                    ),
                });
            }
            return CommandFlow::Pause;
        }
        // Nobody watches: end now, keeping the last good checkpoint as it is.
        self.analysis.finish();
        let at = self.step();
        self.emit(Event::Finished {
            step: at,
            reason: FinishReason::Diverged,
        });
        CommandFlow::Stop
    }

    /// Reads back the step still queued on the device, if any ([`Trainer::settle`]), and
    /// reports it: before every checkpoint, evaluation, snapshot, command and the end.
    fn settle(&mut self) -> Result<CommandFlow, EngineError> {
        let back = match self.trainer.settle() {
            Ok(stats) => ReadBack {
                steps: stats.into_iter().collect(),
                diverged: None,
            },
            Err(EngineError::Diverged { step, loss }) => ReadBack {
                steps: Vec::new(),
                diverged: Some((step, loss)),
            },
            Err(e) => return Err(e),
        };
        Ok(self.report(back))
    }

    /// `--freeze GROUP@N` ends at step N. The trainer would thaw the groups by itself
    /// ([`conelab_core::objective::FreezeConfig::at_step`]); made an applied change instead, the thaw is
    /// in the store, in the log and in every viewer's Controls pane, at the step it happens.
    fn freeze_expiry(&self) -> Option<ObjectiveChange> {
        let objectives = self.trainer.objectives();
        let until = objectives.freeze.until?;
        if self.step() + 1 < until {
            return None;
        }
        let mut thawed = objectives.clone();
        thawed.freeze = FreezeConfig::default();
        Some(ObjectiveChange::Set {
            objectives: Box::new(thawed),
        })
    }

    /// Another thread of the run died: save what was trained, then end with its message.
    fn fail_after_saving(&mut self, message: String) -> Result<(), EngineError> {
        let saved = self.save();
        self.analysis.finish();
        let message = match saved {
            Ok(()) => message,
            Err(e) => format!(
                "{message}; the checkpoint could not be written: {}",
                chain(&e)
            ),
        };
        let step = self.step();
        self.emit(Event::Failed { step, message });
        Ok(())
    }

    fn handle(&mut self, envelope: Envelope) -> Result<CommandFlow, EngineError> {
        let Envelope { command, ticket } = envelope;
        let step = self.step();
        // The same setting again at the same step changes nothing: answered, not applied or
        // recorded again, so a flood of one command (a stuck key, a script in a loop) neither
        // grows the run's logs nor writes a checkpoint twice. Pause, resume and stop change
        // the flow and are always handled.
        let settles = matches!(
            command,
            Command::SetLr { .. } | Command::Objective { .. } | Command::SaveCheckpoint
        );
        if settles
            && let Some((at, last)) = &self.last_applied
            && *at == step
            && *last == command
        {
            self.emit(Event::Applied(AppliedCommand {
                step: step + 1,
                command,
                change: conelab_core::change::Change::Unchanged,
                ticket,
                coalesced: true,
            }));
            return Ok(CommandFlow::Continue);
        }
        let mut applied = match self.trainer.apply(&command) {
            Ok(a) => a,
            Err(refused) => {
                let step = self.step() + 1;
                self.emit(Event::Rejected {
                    step,
                    command,
                    reason: chain(&refused),
                    ticket,
                });
                return Ok(CommandFlow::Continue);
            }
        };
        applied.ticket = ticket;
        // An objective change that changes nothing (a regulariser switched off that was off)
        // is answered as such: no "MLE → MLE" in the logs, no intervention mark.
        applied.coalesced = applied.change.changes_nothing();
        self.emit(Event::Applied(applied));
        self.last_applied = settles.then(|| (step, command.clone()));
        Ok(match command {
            Command::Pause => {
                self.emit(Event::Paused { step });
                CommandFlow::Pause
            }
            Command::Resume => {
                self.diverged = false;
                self.weights_broken = false;
                self.emit(Event::Resumed { step });
                CommandFlow::Resume
            }
            Command::SetLr { .. } | Command::Objective { .. } => CommandFlow::Continue,
            // The checkpoint of this step is written already (by its schedule): once.
            Command::SaveCheckpoint if self.last_saved == Some(step) => CommandFlow::Continue,
            Command::SaveCheckpoint => {
                if let Err(e) = self.save() {
                    self.emit(Event::Warning {
                        step,
                        message: format!("checkpoint failed: {}; training goes on", chain(&e)),
                    });
                }
                CommandFlow::Continue
            }
            Command::Stop { save } => {
                // Broken weights are never saved (a resume could not train from them): the
                // newest checkpoint stays the last good state, and the run ends as diverged.
                let save = save && !self.weights_broken;
                if save && let Err(e) = self.save() {
                    self.analysis.finish();
                    self.emit(Event::Failed {
                        step,
                        message: format!(
                            "stopped, but the checkpoint could not be written: {}",
                            chain(&e)
                        ),
                    });
                    return Ok(CommandFlow::Stop);
                }
                self.analysis.finish();
                let reason = if self.diverged {
                    FinishReason::Diverged
                } else {
                    FinishReason::Stopped
                };
                self.emit(Event::Finished { step, reason });
                CommandFlow::Stop
            }
        })
    }

    fn after_step(&mut self) -> Result<CommandFlow, EngineError> {
        let step = self.step();
        let cfg = self.trainer.config();
        let (eval_every, snapshot_every, checkpoint_every) =
            (cfg.eval_every, cfg.snapshot_every, cfg.checkpoint_every);
        let due = |every: u64| every > 0 && step.is_multiple_of(every);
        if [eval_every, snapshot_every, checkpoint_every]
            .into_iter()
            .any(due)
        {
            // Only a step known to be finite is evaluated, analysed or saved.
            match self.settle()? {
                CommandFlow::Continue | CommandFlow::Resume => {}
                other => return Ok(other),
            }
        }
        if due(eval_every) {
            self.evaluate_valid()?;
        }
        if due(snapshot_every) {
            self.take_snapshot()?;
        }
        if due(checkpoint_every)
            && let Err(e) = self.save()
        {
            self.emit(Event::Warning {
                step,
                message: format!(
                    "checkpoint failed: {}; training goes on (the newest checkpoint is the one before)",
                    chain(&e)
                ),
            });
        }
        Ok(CommandFlow::Continue)
    }

    /// At most this often an evaluation says how far it is.
    const EVAL_PROGRESS_EVERY: Duration = Duration::from_millis(200);

    /// Evaluates a split, telling the viewers how far it is (the first word at once, then at
    /// most five a second: a WikiText-2 pass takes a minute and a half on the CPU).
    fn evaluate(&mut self, split: conelab_data::Split) -> Result<EvalStats, EngineError> {
        let events = self.events.clone();
        let step = self.step();
        let mut last: Option<Instant> = None;
        let mut orphaned = false;
        let stats = self.trainer.evaluate_reporting(split, &mut |done, total| {
            if last.is_some_and(|t| t.elapsed() < Self::EVAL_PROGRESS_EVERY) || done == total {
                return;
            }
            last = Some(Instant::now());
            let progress = Event::EvalProgress {
                step,
                split: split.name().to_owned(),
                done,
                total,
            };
            orphaned |= events.send(progress).is_err();
        });
        self.orphaned |= orphaned;
        stats
    }

    fn evaluate_valid(&mut self) -> Result<(), EngineError> {
        let stats = self.evaluate(conelab_data::Split::Valid)?;
        let ppl = stats.ppl;
        self.emit(Event::Eval(stats));
        let plateau = self.trainer.observe_valid(ppl);
        // After `observe_valid`: best/state.json records this PPL as the best. Every evaluation
        // is offered: the sink keeps it only if it beats what best/ itself holds (a run resumed
        // from before best/ existed, a write that failed before).
        if let Err(e) = self.save_best(ppl) {
            let step = self.step();
            self.emit(Event::Warning {
                step,
                message: format!(
                    "the best checkpoint could not be written: {}; training goes on (best/ keeps the one before)",
                    chain(&e)
                ),
            });
        }
        if self.trainer.config().eval_test {
            let test = self.evaluate(conelab_data::Split::Test)?;
            self.emit(Event::Eval(test));
        }
        if let Some((before, after)) = plateau {
            let step = self.step();
            self.emit(Event::Warning {
                step,
                message: format!(
                    "validation PPL did not improve: plateau schedule lowers lr {before:.3e} → {after:.3e}"
                ),
            });
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), EngineError> {
        let step = self.step();
        if let Some(patience) = self.trainer.stopped_early() {
            let best = self.trainer.state().best_valid_ppl.unwrap_or(f64::NAN);
            self.emit(Event::Warning {
                step,
                message: format!(
                    "stopped early at step {step} of {}: validation PPL has not improved in {patience} evaluations (best {best:.3}, kept in best/)",
                    self.trainer.config().steps
                ),
            });
        }
        let cfg = self.trainer.config();
        let (eval_test, evaluated) = (
            cfg.eval_test,
            cfg.eval_every > 0 && step.is_multiple_of(cfg.eval_every),
        );
        if !evaluated {
            self.evaluate_valid()?;
        }
        // With --eval-test the validation just done evaluated test too.
        if !eval_test {
            let test = self.evaluate(conelab_data::Split::Test)?;
            self.emit(Event::Eval(test));
        }
        self.take_snapshot()?;
        if self.last_saved != Some(step) {
            self.save().map_err(|source| EngineError::Checkpoint {
                what: "the final checkpoint could not be written",
                source,
            })?;
        }
        // The last snapshot's metrics come before Finished.
        self.analysis.finish();
        self.emit(Event::Finished {
            step,
            reason: FinishReason::Completed,
        });
        Ok(())
    }

    /// Copies W to the host once; the metrics worker analyses the copy.
    fn take_snapshot(&mut self) -> Result<(), EngineError> {
        let snapshot = Arc::new(self.trainer.snapshot()?);
        self.analysis.submit(snapshot);
        let step = self.step();
        self.emit(Event::Snapshot { step });
        Ok(())
    }

    /// Keeps the model as `best/` (its validation PPL just improved).
    fn save_best(&mut self, ppl: f64) -> Result<(), CheckpointError> {
        let Some(sink) = &mut self.checkpoints else {
            return Ok(());
        };
        let step = self.trainer.state().step;
        self.trainer
            .weights_check()
            .map_err(|reason| CheckpointError::Unhealthy { step, reason })?;
        sink.save_best(&self.trainer, ppl)?;
        Ok(())
    }

    fn save(&mut self) -> Result<(), CheckpointError> {
        if self.checkpoints.is_none() {
            return Ok(());
        }
        let step = self.step();
        // Never commit weights that a resume could not train from (Trainer::weights_check).
        self.trainer
            .weights_check()
            .map_err(|reason| CheckpointError::Unhealthy { step, reason })?;
        let Some(sink) = &mut self.checkpoints else {
            return Ok(());
        };
        let saved = sink.save(&self.trainer)?;
        self.last_saved = Some(step);
        match saved {
            SavedCheckpoint::Committed(path) => self.emit(Event::Checkpoint { step, path }),
            SavedCheckpoint::Staged { staging, keep } => self.emit(Event::CheckpointStaged {
                step,
                staging,
                keep,
            }),
        }
        Ok(())
    }
}
