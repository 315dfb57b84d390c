//! Starting a run's trainer, new or resumed, in one call: a new one from its settings; a resumed
//! one restored from the newest checkpoint that loads and passes the weights check, with what
//! the resume changes at its step boundary applied (cadences, length, early stopping, the
//! device) and announced, the objectives and the learning rate it asks for as the commands
//! applied before its first step, and the run's `run.toml` written once with the result. The
//! run folder's own concerns — its lock, where its corpus lives now, a store set aside — are the
//! caller's (`conelab_run::launch`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use conelab_base::error::{BoxError, Invalid, chain};
use conelab_core::change::ConfigChange;
use conelab_core::events::{Command, Event};
use conelab_core::model::{DeviceSpec, ModelConfig};
use conelab_core::objective::{ObjectiveChange, Objectives};
use conelab_core::run_dir::{CheckpointError, RunDir};
use conelab_core::train_config::TrainConfig;
use conelab_data::Corpus;

use crate::checkpoint;
use crate::engine::Trainer;

/// Why a trainer could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// What was asked for cannot be (a length behind the run, early stopping out of range).
    #[error(transparent)]
    Usage(Invalid),
    /// The run's checkpoints, corpus or folder.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The trainer could not be built from the settings.
    #[error(transparent)]
    Build(BoxError),
}

/// A new run's trainer, initialised from `train.seed`; `epochs` sets its length in passes over
/// the training text instead of `train.steps`.
pub fn new(
    corpus: Arc<Corpus>,
    model: ModelConfig,
    train: TrainConfig,
    device: DeviceSpec,
    epochs: Option<f64>,
) -> Result<Trainer, StartError> {
    let mut trainer =
        Trainer::new(corpus, model, train, device).map_err(|e| StartError::Build(e.into()))?;
    if let Some(epochs) = epochs {
        let steps = steps_for_epochs(epochs, trainer.windows_per_epoch());
        trainer.set_total_steps(steps);
    }
    Ok(trainer)
}

fn steps_for_epochs(epochs: f64, windows_per_epoch: u64) -> u64 {
    (epochs * windows_per_epoch as f64).ceil().max(1.0) as u64
}

/// A change of the objectives in force (the command line's objective flags).
pub type ObjectivesEdit<'a> = &'a dyn Fn(&mut Objectives) -> Result<(), Invalid>;

/// What a resume may change at the step it resumes from. Each `None` keeps the run's own.
#[derive(Default)]
pub struct ResumeChanges<'a> {
    /// Where to train from now on.
    pub device: Option<DeviceSpec>,
    pub eval_every: Option<u64>,
    pub checkpoint_every: Option<u64>,
    pub snapshot_every: Option<u64>,
    pub keep: Option<usize>,
    pub steps: Option<u64>,
    /// The length in passes over the training text (instead of `steps`).
    pub epochs: Option<f64>,
    /// Early stopping's patience in evaluations.
    pub patience: Option<u64>,
    /// Changes the objectives in force at the checkpoint (the command line's objective flags):
    /// what differs becomes a command applied before the first step.
    pub objectives: Option<ObjectivesEdit<'a>>,
    /// A learning rate set from the first step on (the schedule off).
    pub lr: Option<f64>,
}

/// A resumed run's trainer, ready to serve.
pub struct Resumed {
    pub trainer: Trainer,
    /// What the resume changed and what it skipped, as the events that say so after the start.
    pub announcements: Vec<Event>,
    /// The objectives and the learning rate asked for, applied before the first step.
    pub commands: Vec<Command>,
}

/// The trainer of the run in `run` at `from` (a checkpoint folder named on the command line:
/// that one or nothing), else at its newest intact checkpoint, else (none) at step 0 of its
/// `run.toml`, with `changes` applied; `run.toml` records the changed settings.
pub fn resume(
    run: &mut RunDir,
    from: Option<&Path>,
    changes: &ResumeChanges<'_>,
) -> Result<Resumed, StartError> {
    let (mut trainer, skipped) = match from {
        Some(dir) => (
            checkpoint::restore_trainer(run, Some(dir), None, changes.device)?,
            Vec::new(),
        ),
        None => newest_intact(run, changes.device)?,
    };
    let at = trainer.state().step;
    let mut announcements = Vec::new();
    if !skipped.is_empty() {
        let why: Vec<String> = skipped
            .iter()
            .map(|(dir, why)| format!("{} ({why})", dir.display()))
            .collect();
        announcements.push(Event::Warning {
            step: at,
            message: format!(
                "resumed from step {at}, not from the newer checkpoint(s) {}: the steps after {at} are trained again",
                why.join("; ")
            ),
        });
    }
    let mut config_changes = Vec::new();
    if let Some(d) = changes.device {
        config_changes.push(ConfigChange::Device {
            before: run.spec().device.clone(),
            after: d.to_string(),
        });
    }
    let cfg = trainer.config().clone();
    let next = changed_config(&cfg, changes, trainer.windows_per_epoch())?;
    if next.steps < at {
        return Err(StartError::Usage(
            format!(
                "--steps {} is behind the run, which is at step {at}",
                next.steps
            )
            .into(),
        ));
    }
    config_changes.extend([
        ConfigChange::EvalEvery {
            before: cfg.eval_every,
            after: next.eval_every,
        },
        ConfigChange::CheckpointEvery {
            before: cfg.checkpoint_every,
            after: next.checkpoint_every,
        },
        ConfigChange::SnapshotEvery {
            before: cfg.snapshot_every,
            after: next.snapshot_every,
        },
        ConfigChange::Keep {
            before: cfg.keep_checkpoints as u64,
            after: next.keep_checkpoints as u64,
        },
        ConfigChange::Steps {
            before: cfg.steps,
            after: next.steps,
        },
        ConfigChange::Patience {
            before: cfg.patience,
            after: next.patience,
        },
    ]);
    announcements.extend(
        config_changes
            .into_iter()
            .filter(ConfigChange::is_change)
            .map(|change| Event::ConfigChanged { step: at, change }),
    );
    *trainer.config_mut() = next.clone();
    let mut commands = Vec::new();
    if let Some(apply) = changes.objectives {
        let mut objectives = trainer.objectives().clone();
        apply(&mut objectives).map_err(StartError::Usage)?;
        if &objectives != trainer.objectives() {
            trainer
                .check_objectives(&objectives)
                .map_err(StartError::Usage)?;
            commands.push(Command::Objective {
                change: ObjectiveChange::Set {
                    objectives: Box::new(objectives),
                },
            });
        }
    }
    if let Some(lr) = changes.lr {
        commands.push(Command::SetLr { lr });
    }
    if announcements
        .iter()
        .any(|e| matches!(e, Event::ConfigChanged { .. }))
    {
        let mut spec = run.spec().clone();
        spec.train.eval_every = next.eval_every;
        spec.train.checkpoint_every = next.checkpoint_every;
        spec.train.snapshot_every = next.snapshot_every;
        spec.train.keep_checkpoints = next.keep_checkpoints;
        spec.train.steps = next.steps;
        spec.train.patience = next.patience;
        if let Some(d) = changes.device {
            spec.device = d.to_string();
        }
        run.update_spec(spec)?;
    }
    Ok(Resumed {
        trainer,
        announcements,
        commands,
    })
}

/// The run's settings with the resume's changes, checked.
fn changed_config(
    cfg: &TrainConfig,
    changes: &ResumeChanges<'_>,
    windows_per_epoch: u64,
) -> Result<TrainConfig, StartError> {
    let mut next = cfg.clone();
    let set = |slot: &mut u64, v: Option<u64>| {
        if let Some(v) = v {
            *slot = v;
        }
    };
    set(&mut next.eval_every, changes.eval_every);
    set(&mut next.checkpoint_every, changes.checkpoint_every);
    set(&mut next.snapshot_every, changes.snapshot_every);
    if let Some(k) = changes.keep {
        next.keep_checkpoints = k;
    }
    set(&mut next.steps, changes.steps);
    if changes.patience.is_some() {
        next.patience = changes.patience;
        next.validate().map_err(StartError::Usage)?;
    }
    if let Some(epochs) = changes.epochs {
        next.steps = steps_for_epochs(epochs, windows_per_epoch);
    }
    Ok(next)
}

/// The run restored from its newest checkpoint that loads and whose weights pass
/// [`Trainer::weights_check`], with the newer ones skipped and why. A failure that is not the
/// checkpoint's own (the corpus, the device) ends the search; when no checkpoint is intact, the
/// newest one's error is the answer. A run without a checkpoint starts from `run.toml`.
fn newest_intact(
    run: &RunDir,
    device: Option<DeviceSpec>,
) -> Result<(Trainer, Vec<(PathBuf, String)>), StartError> {
    let candidates = run.checkpoints()?;
    if candidates.is_empty() {
        return Ok((
            checkpoint::restore_trainer(run, None, None, device)?,
            Vec::new(),
        ));
    }
    let mut skipped = Vec::new();
    let mut first_error = None;
    for dir in candidates.iter().rev() {
        let error = match checkpoint::restore_trainer(run, Some(dir), None, device) {
            Ok(trainer) => match trainer.weights_check() {
                Ok(_) => return Ok((trainer, skipped)),
                Err(reason) => CheckpointError::Unhealthy {
                    step: trainer.state().step,
                    reason,
                },
            },
            Err(e) if concerns(&e, dir) => e,
            Err(e) => return Err(e.into()),
        };
        skipped.push((dir.clone(), chain(&error)));
        first_error.get_or_insert(error);
    }
    Err(first_error
        .map(StartError::from)
        .unwrap_or_else(|| StartError::Usage("no checkpoint".into())))
}

/// Whether `e` is about a file of the checkpoint folder `dir` (so an older checkpoint may do).
fn concerns(e: &CheckpointError, dir: &Path) -> bool {
    match e {
        CheckpointError::Io { path, .. }
        | CheckpointError::Corrupt { path, .. }
        | CheckpointError::Mismatch { path, .. }
        | CheckpointError::Encode { path, .. } => path.starts_with(dir),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_become_steps_rounded_up_and_never_zero() {
        assert_eq!(steps_for_epochs(1.5, 10), 15);
        assert_eq!(steps_for_epochs(0.01, 10), 1);
        assert_eq!(steps_for_epochs(0.25, 10), 3);
    }

    #[test]
    fn a_resume_changes_what_it_names_and_keeps_the_rest() {
        let cfg = TrainConfig::default();
        let changes = ResumeChanges {
            eval_every: Some(7),
            keep: Some(2),
            epochs: Some(2.0),
            ..ResumeChanges::default()
        };
        let next = changed_config(&cfg, &changes, 50).expect("valid");
        assert_eq!(
            (next.eval_every, next.keep_checkpoints, next.steps),
            (7, 2, 100)
        );
        assert_eq!(
            (next.checkpoint_every, next.lr, next.batch),
            (cfg.checkpoint_every, cfg.lr, cfg.batch)
        );
        let bad = ResumeChanges {
            patience: Some(0),
            ..ResumeChanges::default()
        };
        assert!(matches!(
            changed_config(&cfg, &bad, 50),
            Err(StartError::Usage(_))
        ));
    }
}
