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
use super::squash::{SQUASH_WIDTH, squash};
use crate::model::output::{log_partition, target_scores};

/// The two terms of the AND loss, kept apart so the step reports the data term and the penalty.
pub struct AndTerms {
    /// −(1/P)·Σ_t s_t[y_t].
    pub data: Tensor<1>,
    /// α/γ·(1/P)·Σ_{t∈S} (log Z_t)² (zero-sized work when α = 0: not computed, a zero).
    pub penalty: Tensor<1>,
}

use conelab_core::objective::AndSettings;

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

/// The shift b that centres the squashed model's log Z over the positions of `logits` `[P, N]`:
/// mean_t log Σ_v exp(squash(s_tv + b)) = 0, by bisection (the mean increases with b). It lies
/// between ln N − 10 (every score squashed to −10) and ln N + 10, so it exists only while
/// ln N < 10 (N < 22,027); for a larger vocabulary the lowest mean log Z AND can reach is
/// ln N − 10 > 0, and a b that reaches it is returned. `None` when the scores are not finite.
pub fn squashed_centring(logits: Tensor<2>) -> Option<f64> {
    let logits = logits.detach();
    let finite = |t: Tensor<1>| {
        t.try_into_vec_as::<f64>()
            .ok()
            .and_then(|v| v.first().copied())
            .filter(|v| v.is_finite())
    };
    let reach = finite(logits.clone().abs().max())?;
    // At |s + b| ≥ 10 widths, tanh is within 1e-8 of ±1: all of log Z's range is inside.
    let margin = 10.0 * SQUASH_WIDTH;
    let (mut lo, mut hi) = (-reach - margin, reach + margin);
    let mean_log_z = |b: f64| finite(log_partition(squash(logits.clone().add_scalar(b))).mean());
    if mean_log_z(lo)? >= 0.0 {
        return Some(lo);
    }
    // Bounded: where |b| is so large that f64 cannot halve the bracket, stop anyway.
    for _ in 0..200 {
        if hi - lo <= 1e-6 {
            break;
        }
        let mid = 0.5 * (lo + hi);
        if mean_log_z(mid)? < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(0.5 * (lo + hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeviceSpecExt;
    use conelab_core::model::DeviceSpec;

    fn scores(rows: usize, cols: usize, values: Vec<f32>) -> Tensor<2> {
        let dev = DeviceSpec::Cpu.training_device().expect("cpu");
        Tensor::from_data(TensorData::new(values, [rows, cols]), &dev)
    }

    #[test]
    fn the_centring_shift_solves_for_a_zero_mean_log_z_in_closed_form() {
        // Equal scores c over N = 100: log Z = ln N + 10·tanh((c + b)/5) = 0 at
        // b = 5·atanh(−ln N / 10) − c, whatever c is.
        for c in [0.0f32, 3.0, -7.5] {
            let b = squashed_centring(scores(2, 100, vec![c; 200])).expect("finite");
            let want = 5.0 * (-(100f64).ln() / 10.0).atanh() - c as f64;
            assert!((b - want).abs() < 1e-4, "c = {c}: b = {b}, want {want}");
        }
    }

    #[test]
    fn the_centring_shift_of_unequal_scores_centres_the_mean_by_direct_sum() {
        let values: Vec<f32> = (0..3 * 50)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.7)
            .collect();
        let b = squashed_centring(scores(3, 50, values.clone())).expect("finite");
        let mean: f64 = values
            .chunks(50)
            .map(|row| {
                row.iter()
                    .map(|&s| (10.0 * ((s as f64 + b) / 5.0).tanh()).exp())
                    .sum::<f64>()
                    .ln()
            })
            .sum::<f64>()
            / 3.0;
        assert!(mean.abs() < 1e-4, "mean log Z {mean} at b = {b}");
    }

    #[test]
    fn past_e_to_the_ten_words_the_shift_takes_log_z_as_low_as_it_goes() {
        // N = 30,000: every score at −10 still gives log Z = ln N − 10 ≈ 0.31 > 0.
        let b = squashed_centring(scores(1, 30_000, vec![0.0; 30_000])).expect("finite");
        let floor = (30_000f64).ln() - 10.0;
        let log_z = ((30_000f64) * (10.0 * (b / 5.0).tanh()).exp()).ln();
        assert!(
            (log_z - floor).abs() < 1e-6,
            "log Z {log_z} vs floor {floor}"
        );
    }

    #[test]
    fn scores_that_are_not_finite_have_no_centring_shift() {
        assert!(squashed_centring(scores(1, 3, vec![0.0, f32::NAN, 1.0])).is_none());
        assert!(squashed_centring(scores(1, 3, vec![0.0, f32::INFINITY, 1.0])).is_none());
    }
}
