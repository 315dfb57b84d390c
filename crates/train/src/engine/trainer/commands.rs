//! Commands between two steps: the learning rate, pause and stop, and objective changes with their side effects (spectrum control factorising or collapsing W, a self-normalising bias, AGG's α from a rare fraction).

use super::build::group_sizes;
use super::{COMMAND_LOG, Trainer};

use burn::module::Module;
use burn::prelude::*;

use crate::engine::EngineError;
use crate::model::SpectralEmbedding;
use crate::model::output::log_partition;
use crate::objective::agg::{RareChoice, alpha_for_rare_fraction};
use crate::objective::and_loss::squashed_centring;
use conelab_base::error::Invalid;
use conelab_core::change::{Change, ObjectivesInForce, RareAlpha};
use conelab_core::events::{AppliedCommand, Command};
use conelab_core::objective::{LossKind, ObjectiveChange, Objectives, SpectrumC1, Term};
use conelab_core::train_config::Schedule;
use conelab_data::Split;

/// The mean of a tensor as a finite f64.
pub(super) fn mean_of<const D: usize>(values: Tensor<D>) -> Result<f64, EngineError> {
    values
        .mean()
        .try_into_vec_as::<f64>()
        .ok()
        .and_then(|v| v.first().copied())
        .filter(|v| v.is_finite())
        .ok_or_else(|| EngineError::backend_says("mean log Z is not a finite number"))
}

impl Trainer {
    /// Applies a command between two steps. Returns the record, or why it was refused.
    pub fn apply(&mut self, command: &Command) -> Result<AppliedCommand, Invalid> {
        let step = self.state.step + 1;
        let record = |change: Change| AppliedCommand {
            step,
            command: command.clone(),
            change,
            ticket: None,
            coalesced: false,
        };
        let applied = match command {
            Command::SetLr { lr } => {
                // The same range as `--lr` and the config file.
                conelab_core::train_config::check_lr(*lr)?;
                let before = self.current_lr();
                // The schedule stops here (said, so nobody waits for a decay that will not
                // come): the rate stays as set until the next change, a resume included.
                let scheduled = self.state.lr_override.is_none()
                    && !(self.config.schedule == Schedule::Constant && step > self.config.warmup);
                self.state.lr_override = Some(*lr);
                record(Change::Lr {
                    before,
                    after: *lr,
                    schedule_off_from: scheduled.then_some(step),
                })
            }
            Command::Pause => record(Change::Paused),
            Command::Resume => record(Change::Resumed),
            Command::Stop { save } => record(Change::Stopping { save: *save }),
            Command::SaveCheckpoint => record(Change::Checkpoint),
            Command::Objective { change } => {
                let before = self.objectives_in_force();
                self.change_objectives(change)?;
                let mut applied = record(Change::Objectives {
                    before: Box::new(before),
                    after: Box::new(self.objectives_in_force()),
                });
                // α chosen from a rare fraction is the run's: the viewers, which fold the
                // acknowledged change into their copy, get the objectives as the run has them.
                if self.state.objectives.agg.rare_fraction.is_some() {
                    applied.command = Command::Objective {
                        change: ObjectiveChange::Set {
                            objectives: Box::new(self.state.objectives.clone()),
                        },
                    };
                }
                applied
            }
        };
        self.state.commands.push(applied.clone());
        // A bounded log (every command is in the store's events too): a flood of commands
        // cannot grow state.json, which every checkpoint carries.
        if self.state.commands.len() > COMMAND_LOG {
            let extra = self.state.commands.len() - COMMAND_LOG;
            self.state.commands.drain(..extra);
        }
        Ok(applied)
    }

    /// The objectives as a change records them: under spectrum control with the prior's c1
    /// (chosen when control is switched on), under a rare fraction with the α it chose.
    pub(super) fn objectives_in_force(&self) -> ObjectivesInForce {
        let o = &self.state.objectives;
        let rare_alpha = if o.agg.enabled {
            self.resolve_rare_fraction(&mut o.clone())
                .map(|c| RareAlpha {
                    alpha: c.alpha,
                    expected: c.expected,
                    target: c.target,
                    vocab: self.corpus.vocab().len(),
                })
        } else {
            None
        };
        ObjectivesInForce {
            objectives: o.clone(),
            spectrum_c1: self.state.spectrum_c1,
            rare_alpha,
        }
    }

    /// `agg=rare:F` (issue #38): sets α to the value whose steady-state rare set is the nearest
    /// achievable to F·N tokens, from the training counts and the tokens per update.
    pub(super) fn resolve_rare_fraction(&self, o: &mut Objectives) -> Option<RareChoice> {
        let f = o.agg.rare_fraction?;
        let choice = alpha_for_rare_fraction(
            self.corpus.vocab().counts(),
            self.corpus.split(Split::Train).len() as u64,
            (self.config.batch * self.model_config.window()) as u64,
            f,
        );
        o.agg.alpha = choice.alpha;
        Some(choice)
    }

    /// The checks a change to `objectives` meets before it is applied (a resume asking for them
    /// is refused before it writes anything, not rejected once the run is under way).
    pub fn check_objectives(&self, objectives: &Objectives) -> Result<(), Invalid> {
        let mut o = objectives.clone();
        self.resolve_rare_fraction(&mut o);
        o.validate(group_sizes(&self.corpus))
    }

    /// Replaces the objectives wholesale between two steps (benchmarks, tests), with the same
    /// side effects and checks as a change by command.
    pub fn set_objectives(&mut self, mut objectives: Objectives) -> Result<(), Invalid> {
        self.resolve_rare_fraction(&mut objectives);
        objectives.validate(group_sizes(&self.corpus))?;
        self.self_normalising_bias(&objectives)?;
        let spectrum_on = objectives.spectrum.enabled;
        if spectrum_on != self.state.spectrum_c1.is_some() {
            self.switch_spectrum(spectrum_on, &objectives.spectrum)?;
        }
        self.keep_fixed_c1(&objectives);
        self.state.objectives = objectives;
        self.counter = None;
        self.static_gates = None;
        Ok(())
    }

    /// Applies an objective change between two steps, with its side effects (spectrum control
    /// factorises or collapses W). All or nothing: when a side effect fails, the objectives stay
    /// as they were and the change is refused.
    pub(super) fn change_objectives(&mut self, change: &ObjectiveChange) -> Result<(), Invalid> {
        let sizes = group_sizes(&self.corpus);
        let mut next = self.state.objectives.clone();
        next.apply(change, sizes)?;
        self.resolve_rare_fraction(&mut next);
        // Each side effect changes nothing when it fails; the bias comes first because it cannot
        // be undone, and it leaves the model's outputs as they were.
        self.self_normalising_bias(&next)?;
        let was_on = self.state.spectrum_c1.is_some();
        let spectrum_on = next.spectrum.enabled;
        if spectrum_on != was_on {
            self.switch_spectrum(spectrum_on, &next.spectrum)?;
        }
        self.keep_fixed_c1(&next);
        self.state.objectives = next;
        if matches!(
            change,
            ObjectiveChange::Enable {
                term: Term::Agg,
                ..
            } | ObjectiveChange::Set { .. }
        ) {
            self.counter = None;
            self.static_gates = None;
        }
        Ok(())
    }

    /// A configured c1 takes effect at once while control stays on (an `auto` c1 stays the σ_1
    /// chosen at switch-on).
    pub(super) fn keep_fixed_c1(&mut self, next: &Objectives) {
        if let (Some(_), SpectrumC1::Fixed(c1)) = (self.state.spectrum_c1, next.spectrum.c1) {
            self.state.spectrum_c1 = Some(c1);
        }
    }

    /// Self-normalisation (DEV, NCE, NCE-R, AND) switched on in a model without an output bias:
    /// add one equal to −μ_z, the current mean log Z over the next training window (≈ −log N for
    /// a fresh model). A uniform shift of the logits leaves every probability, and so the NLL, as
    /// it was, while log Z starts near 0 instead of having to be learnt down from log N. Under
    /// AND's squash the bias sits inside 10·tanh(·/5), where −μ_z does not centre log Z: the
    /// bias is the b with mean log Σ exp(squash(s + b)) = 0 instead (`and::squashed_centring`).
    pub(super) fn self_normalising_bias(&mut self, next: &Objectives) -> Result<(), Invalid> {
        let self_normalising = next.loss != LossKind::Mle || next.dev.enabled;
        if !self_normalising || self.model.output_bias().is_some() {
            return Ok(());
        }
        let refused = "self-normalisation could not centre log Z";
        let logits = self.window_logits().map_err(Invalid::because(refused))?;
        let shift = if next.squashed_scores() {
            squashed_centring(logits).ok_or("the scores are not finite numbers")?
        } else {
            -mean_of(log_partition(logits)).map_err(Invalid::because(refused))?
        };
        let vocab = self.corpus.vocab().len();
        let bias = Tensor::<1>::full([vocab], shift, &self.device);
        self.model = self.model.clone().add_output_bias(bias);
        self.model_config.set_output_bias(true);
        self.state.output_bias_added = true;
        Ok(())
    }

    /// The model's scores (inference mode) over the next training window, `[positions, N]`.
    pub(super) fn window_logits(&self) -> Result<Tensor<2>, EngineError> {
        let k = (self.state.step % self.windows_per_epoch) as usize;
        let batch = self
            .window(k)
            .ok_or_else(|| EngineError::Config(format!("no training window {k}").into()))?;
        let device = self.device.clone().inner();
        let model = self.model.valid();
        let inputs = Tensor::<2, Int>::from_data(
            TensorData::new(batch.inputs, [batch.batch, batch.time]),
            &device,
        );
        let (hidden, _) = model.hidden(inputs, None);
        Ok(model.logits(hidden))
    }

    /// Spectrum control on: W = U·diag(σ)·Vᵀ from the SVD of the current W (the model's outputs do
    /// not change), c1 = σ_1 (`auto`), the scale giving the prior W's Frobenius norm (`norm`) or
    /// the configured number. Off: W = U·diag(σ)·Vᵀ written back into the plain embedding.
    pub(super) fn switch_spectrum(
        &mut self,
        on: bool,
        spectrum: &conelab_core::objective::SpectrumConfig,
    ) -> Result<(), Invalid> {
        let refused = "spectrum control could not factorise W";
        conelab_base::fault::check("spectrum.switch").map_err(Invalid::because(refused))?;
        if on {
            let snapshot = self.snapshot().map_err(Invalid::because(refused))?;
            let factors = SpectralEmbedding::from_matrix(
                &snapshot.weights,
                snapshot.n,
                snapshot.d,
                &self.device,
            )
            .map_err(Invalid::because(refused))?;
            let sigma = factors
                .sigma
                .val()
                .try_into_vec_as::<f64>()
                .map_err(Invalid::because("spectrum control could not read σ"))?;
            let c1 = match spectrum.c1 {
                SpectrumC1::Auto => sigma.first().copied().unwrap_or(0.0),
                SpectrumC1::MatchNorm => {
                    // ‖W‖_F = ‖σ‖₂; the prior's norm is c1 times that of its shape at c1 = 1.
                    let unit =
                        crate::objective::spectrum::prior_targets(spectrum, 1.0, sigma.len());
                    let shape = unit
                        .iter()
                        .map(|&t| f64::from(t).powi(2))
                        .sum::<f64>()
                        .sqrt();
                    let w = sigma.iter().map(|s| s * s).sum::<f64>().sqrt();
                    if shape > 0.0 { w / shape } else { 0.0 }
                }
                SpectrumC1::Fixed(c1) => c1,
            };
            self.model = self.model.clone().set_spectral(Some(factors));
            self.state.spectrum_c1 = Some(c1);
        } else {
            self.model = self.model.clone().set_spectral(None);
            self.state.spectrum_c1 = None;
        }
        // Fresh moments for fresh factors.
        self.spectral_optim = None;
        Ok(())
    }
}
