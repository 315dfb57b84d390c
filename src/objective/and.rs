//! AND (Andreas & Klein 2015; methods.md §3; compared in Goldberger & Melamud 2018, Tables 3/4):
//! train the unnormalised score of the target up and keep log Z near 0 with a sampled penalty,
//!
//!   L = −(1/P)·Σ_t s_t[y_t] + α/γ·(1/P)·Σ_{t∈S} (log Z_t)²,
//!
//! S a random fraction γ of the P positions (⌈γ·P⌉ of them), so that only those pay for a softmax
//! sum; the penalty's expectation is α·mean_t (log Z_t)². The data term alone is unbounded below
//! (scores grow without limit): the model trains poorly, and Goldberger & Melamud only made it
//! converge on WikiText-2 by squashing every score, s → 10·tanh(s/5) (Chen et al. 2016). With
//! `squash` the model's scores are the squashed ones everywhere: in both terms here and in
//! evaluation (PPL, log Z) while the objective is in force.

use burn::prelude::*;

use super::self_norm::sampled_log_z_penalty;
use crate::model::output::target_scores;

/// Bound of the squashed scores: s ∈ (−10, 10).
pub const SQUASH_BOUND: f64 = 10.0;
/// Width of the squashing: 10·tanh(s/5) has slope 2 at 0.
pub const SQUASH_WIDTH: f64 = 5.0;

/// s → 10·tanh(s/5), element-wise.
pub fn squash<const D: usize>(scores: Tensor<D>) -> Tensor<D> {
    scores
        .div_scalar(SQUASH_WIDTH)
        .tanh()
        .mul_scalar(SQUASH_BOUND)
}

/// The two terms of the AND loss, kept apart so the step reports the data term and the penalty.
pub struct AndTerms {
    /// −(1/P)·Σ_t s_t[y_t].
    pub data: Tensor<1>,
    /// α/γ·(1/P)·Σ_{t∈S} (log Z_t)² (zero-sized work when α = 0: not computed, a zero).
    pub penalty: Tensor<1>,
}

/// What shapes the AND loss besides the model.
#[derive(Debug, Clone, Copy)]
pub struct AndSettings {
    pub alpha: f64,
    pub fraction: f64,
    pub squash: bool,
}

/// The AND loss. `hidden` `[P, d]`, `w` `[N, d]`, `bias` `[N]` if any, `targets` `[P]`,
/// `sampled` the positions of S (distinct, from `self_norm::sample_positions`).
pub fn and_loss(
    hidden: Tensor<2>,
    w: Tensor<2>,
    bias: Option<Tensor<1>>,
    targets: Tensor<1, Int>,
    sampled: Tensor<1, Int>,
    settings: AndSettings,
) -> AndTerms {
    let mut s_target = target_scores(hidden.clone(), w.clone(), bias.clone(), targets);
    if settings.squash {
        s_target = squash(s_target);
    }
    let data = s_target.mean().neg();
    let penalty = if settings.alpha > 0.0 {
        sampled_log_z_penalty(hidden, w, bias, sampled, settings.fraction, settings.squash)
            .mul_scalar(settings.alpha)
    } else {
        data.zeros_like()
    };
    AndTerms { data, penalty }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeviceSpec;

    #[test]
    fn squash_is_ten_tanh_of_a_fifth() {
        let dev = DeviceSpec::Cpu.training_device().expect("cpu");
        let x = [-100.0f32, -5.0, 0.0, 1.0, 5.0, 100.0];
        let got = squash(Tensor::<1>::from_data(
            TensorData::new(x.to_vec(), [6]),
            &dev,
        ))
        .try_into_vec_as::<f64>()
        .expect("f64");
        for (g, &x) in got.iter().zip(&x) {
            let want = 10.0 * (x as f64 / 5.0).tanh();
            assert!((g - want).abs() < 1e-5, "squash({x}) = {g}, want {want}");
        }
        assert!(got[0] > -10.0 - 1e-6 && got[5] < 10.0 + 1e-6);
    }
}
