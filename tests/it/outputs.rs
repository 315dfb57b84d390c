//! Model-output metrics (methods.md §2) on hand-made logits, against values computed by hand.

use burn::prelude::*;
use conelab_core::model::DeviceSpec;
use conelab_data::{FrequencyGroups, GroupBounds};
use conelab_metrics::{OutputAccumulator, OutputBatch};
use conelab_train::model::DeviceSpecExt;
use conelab_train::model::output::output_tensors;

fn device() -> Device {
    DeviceSpec::Cpu.device().expect("cpu device")
}

/// Runs logits `[P, N]` and targets through the device computation and the accumulator.
fn metrics(
    logits: &[Vec<f32>],
    targets: &[u32],
    groups: FrequencyGroups,
    gamma: f64,
) -> conelab_metrics::OutputMetrics {
    let (p, n) = (logits.len(), logits[0].len());
    let flat: Vec<f32> = logits.iter().flatten().copied().collect();
    let dev = device();
    let l = Tensor::<2>::from_data(TensorData::new(flat, [p, n]), &dev);
    let y = Tensor::<1, Int>::from_data(TensorData::new(targets.to_vec(), [p]), &dev);
    let out = output_tensors(l, y);
    let f = |t: Tensor<1>| t.try_into_vec_as::<f32>().expect("read");
    let argmax: Vec<u32> = out
        .argmax
        .try_into_vec_as::<i64>()
        .expect("read")
        .into_iter()
        .map(|a| a as u32)
        .collect();
    let mut acc = OutputAccumulator::new(groups);
    acc.add(OutputBatch {
        targets,
        target_log_probs: &f(out.target_log_probs),
        log_z: &f(out.log_z),
        entropy: &f(out.entropy),
        argmax: &argmax,
        prob_sum: &f(out.prob_sum),
    })
    .expect("consistent batch");
    acc.finish(7, gamma)
}

fn lse(row: &[f32]) -> f64 {
    row.iter().map(|&x| (x as f64).exp()).sum::<f64>().ln()
}

#[test]
fn a_three_token_model_by_hand() {
    // N = 3 with bounds 0.34, 0.67: groups {0}, {1}, {2}.
    let groups = FrequencyGroups::new(3, GroupBounds::new(0.34, 0.67).expect("bounds"));
    let logits = vec![
        vec![2.0, 0.0, -1.0], // predicts 0
        vec![0.5, 1.5, 0.0],  // predicts 1
        vec![3.0, 1.0, 0.0],  // predicts 0
        vec![0.0, 0.0, 4.0],  // predicts 2
    ];
    let targets = [0u32, 0, 1, 2];
    let m = metrics(&logits, &targets, groups, 0.0);
    let nll: Vec<f64> = logits
        .iter()
        .zip(&targets)
        .map(|(row, &y)| lse(row) - row[y as usize] as f64)
        .collect();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-5 * b.abs().max(1.0);
    // Group of the target: 0 for positions 0 and 1, 1 for position 2, 2 for position 3.
    assert!(close(m.groups[0].ppl, ((nll[0] + nll[1]) / 2.0).exp()));
    assert!(close(m.groups[1].ppl, nll[2].exp()));
    assert!(close(m.groups[2].ppl, nll[3].exp()));
    assert!(close(m.ppl, (nll.iter().sum::<f64>() / 4.0).exp()));
    assert_eq!(
        [
            m.groups[0].positions,
            m.groups[1].positions,
            m.groups[2].positions
        ],
        [2, 1, 1]
    );
    // Predicted ids {0, 1, 2}: Uniq 3, one per group; targets {0, 1, 2} likewise.
    assert_eq!(m.uniq, 3);
    assert_eq!(
        [m.groups[0].uniq, m.groups[1].uniq, m.groups[2].uniq],
        [1, 1, 1]
    );
    assert_eq!(m.human_uniq, 3);
    assert_eq!(m.block_length, 7);
    // log Z statistics, entropy correlation, unnormalised PPL.
    let lz: Vec<f64> = logits.iter().map(|r| lse(r)).collect();
    let mu = lz.iter().sum::<f64>() / 4.0;
    let sd = (lz.iter().map(|z| (z - mu).powi(2)).sum::<f64>() / 4.0).sqrt();
    assert!(close(m.mu_z, mu) && close(m.sigma_z, sd));
    let mean_score: f64 = logits
        .iter()
        .zip(&targets)
        .map(|(r, &y)| r[y as usize] as f64)
        .sum::<f64>()
        / 4.0;
    assert!(close(m.unnormalised_ppl, (-mean_score).exp()));
    let h: Vec<f64> = logits
        .iter()
        .map(|r| {
            let z = lse(r);
            -r.iter()
                .map(|&s| {
                    let lp = s as f64 - z;
                    lp.exp() * lp
                })
                .sum::<f64>()
        })
        .collect();
    let mh = h.iter().sum::<f64>() / 4.0;
    let cov: f64 = h.iter().zip(&lz).map(|(a, b)| (a - mh) * (b - mu)).sum();
    let vh: f64 = h.iter().map(|a| (a - mh).powi(2)).sum();
    let vz: f64 = lz.iter().map(|b| (b - mu).powi(2)).sum();
    assert!((m.entropy_log_z_corr - cov / (vh * vz).sqrt()).abs() < 1e-5);
    assert_eq!(m.histogram.counts.iter().sum::<u64>(), 4);
}

#[test]
fn uniq_counts_predictions_in_a_group_whatever_the_target() {
    let groups = FrequencyGroups::new(3, GroupBounds::new(0.34, 0.67).expect("bounds"));
    // Always predicts token 2 (rare), while every target is token 0.
    let logits = vec![vec![0.0, 0.0, 5.0]; 3];
    let m = metrics(&logits, &[0, 0, 0], groups, 0.0);
    assert_eq!(m.uniq, 1);
    assert_eq!(
        [m.groups[0].uniq, m.groups[1].uniq, m.groups[2].uniq],
        [0, 0, 1]
    );
    assert_eq!([m.groups[0].human_uniq, m.groups[2].human_uniq], [1, 0]);
    assert!(m.groups[2].ppl.is_nan(), "no position has a rare target");
}

#[test]
fn exact_log_probabilities_have_zero_log_z() {
    // Logits that are already log-probabilities: log Z = 0 everywhere, so μ_z = σ_z = 0 and the
    // unnormalised PPL equals the PPL.
    let probs = [[0.7f64, 0.2, 0.1], [0.1, 0.1, 0.8], [0.25, 0.5, 0.25]];
    let logits: Vec<Vec<f32>> = probs
        .iter()
        .map(|r| r.iter().map(|p| p.ln() as f32).collect())
        .collect();
    let groups = FrequencyGroups::new(3, GroupBounds::default());
    let m = metrics(&logits, &[0, 2, 1], groups, 0.0);
    assert!(m.mu_z.abs() < 1e-6, "μ_z = {}", m.mu_z);
    assert!(m.sigma_z.abs() < 1e-6, "σ_z = {}", m.sigma_z);
    assert!((m.unnormalised_ppl - m.ppl).abs() < 1e-5 * m.ppl);
    let want = (-(0.7f64.ln() + 0.8f64.ln() + 0.5f64.ln()) / 3.0).exp();
    assert!((m.ppl - want).abs() < 1e-5 * want);
}

#[test]
fn theorem2_counts_tokens_below_the_threshold() {
    // N = 3, γ chosen so the threshold is exp(−4γ·2/9) = 0.5: a token meets the condition when
    // its mean probability exceeds 0.5.
    let gamma = 0.5f64.ln() / (-4.0 * 2.0 / 9.0);
    let probs = [[0.9f64, 0.05, 0.05], [0.8, 0.1, 0.1]];
    let logits: Vec<Vec<f32>> = probs
        .iter()
        .map(|r| r.iter().map(|p| p.ln() as f32).collect())
        .collect();
    let groups = FrequencyGroups::new(3, GroupBounds::new(0.34, 0.67).expect("bounds"));
    let m = metrics(&logits, &[0, 1], groups, gamma);
    assert!((m.theorem2_threshold.expect("γ > 0") - 0.5).abs() < 1e-12);
    // Mean p: token 0 = 0.85 (1 − 0.85 = 0.15 < 0.5), tokens 1 and 2 = 0.075 (0.925 > 0.5).
    assert_eq!(
        [
            m.groups[0].theorem2_below,
            m.groups[1].theorem2_below,
            m.groups[2].theorem2_below
        ],
        [Some(1), Some(0), Some(0)]
    );
    // Without a cosine regulariser (γ = 0) the threshold is 1 and every token "meets" it: not
    // applicable, not a count.
    let groups = FrequencyGroups::new(3, GroupBounds::new(0.34, 0.67).expect("bounds"));
    let m = metrics(&logits, &[0, 1], groups, 0.0);
    assert_eq!(m.theorem2_threshold, None);
    assert!(m.groups.iter().all(|g| g.theorem2_below.is_none()));
}

/// The shifted model of Goldberger & Melamud (log p̃ = s − shift): its numbers from
/// `OutputMetrics::shifted` equal those of the same logits with the shift subtracted, run through
/// the whole computation again, and its unnormalised PPL is exp(−mean (s[y] − shift)) by hand.
#[test]
fn the_shifted_model_is_the_model_with_every_score_lowered_by_the_shift() {
    let groups = FrequencyGroups::new(4, GroupBounds::new(0.3, 0.8).expect("bounds"));
    let logits = vec![
        vec![2.0, 0.0, -1.0, 0.5],
        vec![0.5, 1.5, 0.0, 3.0],
        vec![3.0, 1.0, 0.0, -2.0],
        vec![0.0, 0.0, 4.0, 1.0],
        vec![1.0, -1.0, 0.5, 0.0],
    ];
    let targets = [0u32, 3, 1, 2, 0];
    let shift = 2.75;
    let base = metrics(&logits, &targets, groups, 0.0);
    let lowered: Vec<Vec<f32>> = logits
        .iter()
        .map(|r| r.iter().map(|&x| x - shift as f32).collect())
        .collect();
    let again = metrics(&lowered, &targets, groups, 0.0);
    let s = base.shifted(shift);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-5 * b.abs().max(1.0);
    assert_eq!(s.shift, shift);
    assert!(close(s.mu_z, again.mu_z), "{} vs {}", s.mu_z, again.mu_z);
    assert!(close(s.sigma_z, again.sigma_z));
    assert!(close(s.ppl, again.ppl));
    assert!(close(s.unnormalised_ppl, again.unnormalised_ppl));
    let by_hand = (-(logits
        .iter()
        .zip(&targets)
        .map(|(r, &y)| r[y as usize] as f64 - shift)
        .sum::<f64>())
        / targets.len() as f64)
        .exp();
    assert!(
        close(s.unnormalised_ppl, by_hand),
        "{} vs {by_hand}",
        s.unnormalised_ppl
    );
    // Shifting by the split's own μ_z centres it exactly.
    assert!(base.shifted(base.mu_z).mu_z.abs() < 1e-12);
}
