//! A model that does worse than a uniform guess over its vocabulary (issue #58: `--lr 10` on PTB
//! trained to a loss of ~2,000 and a PPL of 10¹⁰⁵, and the run "completed" without a word).
//!
//! A uniform model puts 1/V on every token: its NLL per token is −log(1/V) = ln V and its
//! perplexity exp(ln V) = V. A model above either has learned less than nothing:
//!
//! - the training NLL above ln V for [`STEPS`] steps in a row (MLE only: NCE's and AND's losses
//!   are not an NLL), or
//! - a validation's total PPL above V (one evaluation is already an average over the split).
//!
//! A group's PPL above V is not a finding: the rare tokens of a healthy run get less than 1/V
//! each (a PTB run's Rare PPL of 124,368 at V = 10,000, issue #58's own table).
//!
//! Each is said once a spell: again only after the measure has come back under its bound.

use conelab_core::events::{Event, UniformMeasure};

/// Training steps in a row with the NLL above ln V before it is said: a freshly initialised
/// model starts at about ln V and is below it within a few steps when it learns at all.
pub const STEPS: u64 = 50;

/// Watches a run's steps and evaluations for a model worse than uniform.
#[derive(Debug, Clone)]
pub struct UniformWatch {
    vocab: f64,
    /// Steps in a row with the training NLL above ln V.
    above: u64,
    said_loss: bool,
    said_ppl: bool,
}

impl UniformWatch {
    pub fn new(vocab: usize) -> Self {
        Self {
            vocab: vocab as f64,
            above: 0,
            said_loss: false,
            said_ppl: false,
        }
    }

    /// The finding `event` completes, if any. `loss_is_nll`: the run's training loss is the
    /// token NLL (MLE) at this step.
    pub fn observe(&mut self, event: &Event, loss_is_nll: bool) -> Option<Event> {
        match event {
            Event::Step(s) => self.step(s.step, s.loss, loss_is_nll),
            Event::Eval(e) if e.split == "valid" => self.validation(e.step, e.ppl),
            _ => None,
        }
    }

    /// A training step's loss.
    pub fn step(&mut self, step: u64, loss: f64, loss_is_nll: bool) -> Option<Event> {
        let bound = self.vocab.ln();
        if !(loss_is_nll && loss > bound) {
            self.above = 0;
            self.said_loss = false;
            return None;
        }
        self.above += 1;
        if self.above < STEPS || self.said_loss {
            return None;
        }
        self.said_loss = true;
        Some(Event::WorseThanUniform {
            step,
            measure: UniformMeasure::TrainLoss,
            value: loss,
            bound,
            steps: self.above,
        })
    }

    /// A validation's total PPL.
    pub fn validation(&mut self, step: u64, ppl: f64) -> Option<Event> {
        // (A NaN PPL, a split without positions, is no finding.)
        if ppl.is_nan() || ppl <= self.vocab {
            self.said_ppl = false;
            return None;
        }
        if self.said_ppl {
            return None;
        }
        self.said_ppl = true;
        Some(Event::WorseThanUniform {
            step,
            measure: UniformMeasure::ValidPpl,
            value: ppl,
            bound: self.vocab,
            steps: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conelab_core::events::StepStats;

    fn step(n: u64, loss: f64) -> Event {
        Event::Step(StepStats {
            step: n,
            epoch: 0.0,
            loss,
            penalty: 0.0,
            lr: 1.0,
            grad_norm: 1.0,
            tokens_per_sec: 1.0,
            step_ms: 1.0,
            rare_tokens: None,
            rare_g1: None,
            rare_in_group: None,
        })
    }

    /// ln 10,000 = 9.2103…: a loss of 9.3 is above it, 9.1 below.
    #[test]
    fn fifty_steps_above_ln_v_are_said_once_a_spell() {
        let mut w = UniformWatch::new(10_000);
        let said: Vec<u64> = (1..=200)
            .filter_map(|n| {
                // Above for steps 1-120, below for 121-130, above again from 131.
                let loss = if (121..=130).contains(&n) { 9.1 } else { 9.3 };
                w.observe(&step(n, loss), true)
            })
            .map(|e| match e {
                Event::WorseThanUniform {
                    step,
                    measure,
                    bound,
                    steps,
                    ..
                } => {
                    assert_eq!(measure, UniformMeasure::TrainLoss);
                    assert!((bound - 10_000f64.ln()).abs() < 1e-12);
                    assert_eq!(steps, STEPS);
                    step
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(said, vec![STEPS, 130 + STEPS]);
    }

    #[test]
    fn a_loss_that_is_not_an_nll_is_never_compared_with_ln_v() {
        let mut w = UniformWatch::new(100);
        assert!((1..=500).all(|n| w.observe(&step(n, 50.0), false).is_none()));
        // Nor is a NaN loss (a divergence, said as one).
        assert!((1..=500).all(|n| w.observe(&step(n, f64::NAN), true).is_none()));
    }

    #[test]
    fn a_validation_above_v_is_said_and_again_only_after_it_came_back() {
        let mut w = UniformWatch::new(1_000);
        let said: Vec<u64> = [(10, 5e105), (20, f64::INFINITY), (30, 999.0), (40, 1_001.0)]
            .into_iter()
            .filter_map(|(s, p)| w.validation(s, p))
            .map(|e| e.step())
            .collect();
        assert_eq!(said, vec![10, 40]);
        // A NaN PPL (no positions) is not a finding.
        assert!(UniformWatch::new(1_000).validation(5, f64::NAN).is_none());
    }
}
