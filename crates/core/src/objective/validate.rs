//! The checks of a run's objectives before they are used: weights and their combinations.

use super::*;

/// The largest weight any term or coefficient may be given: far above every useful value (the
/// papers' are ≤ 10), far below what overflows a loss.
pub const MAX_WEIGHT: f64 = 1e6;

/// The most updates AGG's token counter may remember (an epoch of WikiText-103 at B = 1 is
/// fewer); it keeps each one's targets.
pub const MAX_AGG_MEMORY: u64 = 1_000_000;

impl Objectives {
    /// Checks weights and combinations; the message names the setting. The CLI and a command
    /// over the socket go through the same checks, so neither can ask for what the other
    /// refuses: every weight lies in [0, [`MAX_WEIGHT`]], NCE's k in [1, N].
    pub fn validate(&self, group_sizes: [usize; 3]) -> Result<(), Invalid> {
        let finite_nonneg = |what: &str, x: f64| {
            if x.is_finite() && (0.0..=MAX_WEIGHT).contains(&x) {
                Ok(())
            } else {
                Err(format!(
                    "{what} weight {} must be a number ≥ 0 and at most {MAX_WEIGHT:.0e}",
                    conelab_base::number::said(x)
                ))
            }
        };
        if let Some(f) = self.agg.rare_fraction
            && !(f > 0.0 && f < 1.0)
        {
            return Err(format!(
                "agg rare fraction {f} must be between 0 and 1 (exclusive), e.g. 0.2"
            )
            .into());
        }
        // AGG's weight is its α, which must be > 0: checked below with that bound.
        for term in Term::ALL.into_iter().filter(|&t| t != Term::Agg) {
            let (_, w) = self.term(term);
            finite_nonneg(term.name(), w)?;
        }
        finite_nonneg("nce-r alpha", self.nce.alpha)?;
        finite_nonneg("and alpha", self.and_lm.alpha)?;
        if !(self.and_lm.gamma > 0.0 && self.and_lm.gamma <= 1.0) {
            return Err(format!("and fraction γ = {} must be in (0, 1]", self.and_lm.gamma).into());
        }
        finite_nonneg("spectrum lambda_orth", self.spectrum.lambda_orth)?;
        finite_nonneg("spectrum lambda_spec", self.spectrum.lambda_spec)?;
        if !(self.agg.alpha > 0.0 && self.agg.alpha <= MAX_WEIGHT) {
            return Err(format!(
                "agg α = {} must be > 0 and at most {MAX_WEIGHT:.0e}",
                self.agg.alpha
            )
            .into());
        }
        if let Some(m) = self.agg.memory
            && !(1..=MAX_AGG_MEMORY).contains(&m)
        {
            // The counter keeps each remembered update's targets: K · B · T · 4 bytes.
            return Err(
                format!("agg memory {m} must be from 1 to {MAX_AGG_MEMORY} updates").into(),
            );
        }
        if self.nce.noise == 0 {
            return Err("nce noise samples k must be at least 1".into());
        }
        if !(self.nce.fraction > 0.0 && self.nce.fraction <= 1.0) {
            return Err(format!("nce fraction γ = {} must be in (0, 1]", self.nce.fraction).into());
        }
        let positive = |x: f64| x > 0.0 && x <= MAX_WEIGHT;
        if !positive(self.spectrum.gamma) {
            return Err(format!(
                "spectrum γ = {} must be > 0 and at most {MAX_WEIGHT:.0e}",
                self.spectrum.gamma
            )
            .into());
        }
        if !positive(self.spectrum.c2) {
            return Err(format!(
                "spectrum c2 = {} must be > 0 and at most {MAX_WEIGHT:.0e}",
                self.spectrum.c2
            )
            .into());
        }
        if !positive(self.spectrum.sigma_lr) {
            return Err(format!(
                "spectrum sigma-lr = {} must be > 0 and at most {MAX_WEIGHT:.0e}",
                self.spectrum.sigma_lr
            )
            .into());
        }
        if let SpectrumC1::Fixed(c1) = self.spectrum.c1
            && !positive(c1)
        {
            return Err(format!(
                "spectrum c1 = {c1} must be a number > 0 (or auto: σ_1 at switch-on)"
            )
            .into());
        }
        if self.loss == LossKind::And && self.and_lm.alpha == 0.0 && !self.and_lm.squash {
            return Err("and with α = 0 and no squash has no bound: −s[y] alone drives the scores to infinity (give α > 0 or use and:squash)".into());
        }
        let gated = self.agg.enabled || self.gate_freeze != GateParts::None;
        if !self.loss.is_full_softmax() {
            let name = self.loss.name();
            if gated {
                return Err(format!(
                    "{name} cannot be combined with gradient gating (agg, gate-freeze): gates act on the full-softmax gradient"
                ).into());
            }
            if self.ul.enabled {
                return Err(format!(
                    "{name} cannot be combined with unlikelihood: it needs the full softmax"
                )
                .into());
            }
            if self.dev.enabled {
                return Err(format!(
                    "{name} cannot be combined with dev: NCE fixes log Z at 0, NCE-R and AND carry their own (log Z)² term"
                ).into());
            }
        }
        if self.agg.enabled && self.gate_freeze != GateParts::None {
            return Err("agg and gate-freeze cannot both be on: gate-freeze is AGG with static groups and gates 0".into());
        }
        if self.spectrum.enabled && self.freeze.any() {
            return Err("spectrum control and group freezing cannot both be on: under spectrum control W = U·diag(σ)·Vᵀ has no rows of its own to freeze".into());
        }
        for (group, size) in Group::ALL.into_iter().zip(group_sizes) {
            if self.freeze.is_frozen(group) && size == 0 {
                return Err(format!("cannot freeze the {group} group: it is empty").into());
            }
        }
        if self.gate_freeze != GateParts::None && group_sizes[2] == 0 {
            return Err("gate-freeze acts on the rare group, which is empty".into());
        }
        // k noise words per position are drawn and scored: beyond the vocabulary they only
        // repeat words, at k·B·T·d floats (10¹³ asked for 40 TB at the first step).
        // Saturating: a caller that knows no group sizes passes usize::MAX for each.
        let vocab = group_sizes.iter().fold(0usize, |n, s| n.saturating_add(*s));
        let samples_noise = matches!(self.loss, LossKind::Nce | LossKind::NceR);
        if samples_noise && vocab > 0 && self.nce.noise > vocab {
            return Err(format!(
                "nce noise samples k = {} must be at most the vocabulary size N = {vocab}",
                self.nce.noise
            )
            .into());
        }
        Ok(())
    }
}
