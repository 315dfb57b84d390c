//! Self-normalisation (Goldberger & Melamud 2018; methods.md §3): objectives after which log Z ≈ 0,
//! so that exp(s) can be used as a probability without the softmax sum.
//!
//! - DEV: + α·mean_t (log Z_t)² on top of MLE.
//! - NCE: binary classification of the target against k noise tokens drawn from the unigram
//!   distribution q, with the model's unnormalised score s (log Z fixed at 0) and
//!   m = s − log(k·q): L = mean_t [softplus(−m_{y_t}) + Σ_j softplus(m_{n_j})]. The k noise
//!   tokens are drawn once per batch and shared by its positions (one `[P, k]` score matmul
//!   instead of P·k row gathers; the estimate of each position's gradient is unchanged in
//!   expectation).
//! - NCE-R: NCE + α/γ·(1/P)·Σ over a random fraction γ of positions of (log Z_t)², whose
//!   expectation is α·mean_t (log Z_t)²; only those γ·P positions pay for a full softmax sum.
//!
//! The output bias is initialised to −log N for these objectives (log Z starts near 0).

use burn::prelude::*;
use burn::tensor::activation::softplus;

use super::squash::squash;
use crate::model::output::{log_partition, target_scores, tied_logits};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

/// mean_t (log Z_t)² (multiply by α).
pub fn dev_penalty(log_z: Tensor<1>) -> Tensor<1> {
    log_z.square().mean()
}

/// Draws tokens from the unigram distribution of the training counts.
#[derive(Debug, Clone)]
pub struct UnigramSampler {
    cumulative: Vec<f64>,
    log_q: Vec<f32>,
}

impl UnigramSampler {
    /// From training counts in id order; a zero count is treated as 1 so that every token has a
    /// finite log q (special tokens may never occur in the training text).
    pub fn new(counts: &[u64]) -> Self {
        let total: f64 = counts.iter().map(|&c| c.max(1) as f64).sum();
        let mut acc = 0.0;
        let cumulative = counts
            .iter()
            .map(|&c| {
                acc += c.max(1) as f64 / total;
                acc
            })
            .collect();
        let log_q = counts
            .iter()
            .map(|&c| (c.max(1) as f64 / total).ln() as f32)
            .collect();
        Self { cumulative, log_q }
    }

    pub fn log_q(&self) -> &[f32] {
        &self.log_q
    }

    /// `k` draws with replacement, deterministic in `seed`.
    pub fn sample(&self, k: usize, seed: u64) -> Vec<u32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let last = self.cumulative.len().saturating_sub(1);
        (0..k)
            .map(|_| {
                let u = (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
                self.cumulative.partition_point(|&c| c <= u).min(last) as u32
            })
            .collect()
    }
}

/// The NCE loss. `hidden` `[P, d]`, `w` `[N, d]`, `bias` `[N]` if any, `targets` `[P]`,
/// `noise` `[k]` token ids, `log_kq` = log(k·q) of every token `[N]`.
pub fn nce_loss(
    hidden: Tensor<2>,
    w: Tensor<2>,
    bias: Option<Tensor<1>>,
    targets: Tensor<1, Int>,
    noise: Tensor<1, Int>,
    log_kq: Tensor<1>,
) -> Tensor<1> {
    let [p, _] = hidden.dims();
    let [k] = noise.dims();
    let s_target = target_scores(hidden.clone(), w.clone(), bias.clone(), targets.clone());
    let mut s_noise = hidden.matmul(w.select(0, noise.clone()).transpose());
    if let Some(b) = bias {
        s_noise = s_noise + b.select(0, noise.clone()).unsqueeze::<2>();
    }
    let m_target = s_target - log_kq.clone().select(0, targets);
    let m_noise = s_noise - log_kq.select(0, noise).reshape([1, k]);
    let data = softplus(m_target.neg(), 1.0).sum();
    let contrast = softplus(m_noise, 1.0).sum();
    (data + contrast).div_scalar(p as f64)
}

/// Positions for NCE-R's (log Z)² term: ⌈γ·P⌉ distinct positions, deterministic in `seed`.
pub fn sample_positions(positions: usize, fraction: f64, seed: u64) -> Vec<i64> {
    let m = ((fraction * positions as f64).ceil() as usize).clamp(1, positions.max(1));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Partial Fisher–Yates: the first m of a random permutation.
    let mut all: Vec<i64> = (0..positions as i64).collect();
    for i in 0..m.min(positions) {
        let j = i + (rng.next_u64() % (positions - i) as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(m);
    all
}

/// NCE-R's and AND's penalty (multiply by α): (1/γ)·(1/P)·Σ over the sampled positions of
/// (log Z_t)², of the squashed scores 10·tanh(s/5) when `squashed`.
pub fn sampled_log_z_penalty(
    hidden: Tensor<2>,
    w: Tensor<2>,
    bias: Option<Tensor<1>>,
    sampled: Tensor<1, Int>,
    fraction: f64,
    squashed: bool,
) -> Tensor<1> {
    let [p, _] = hidden.dims();
    let mut logits = tied_logits(hidden.select(0, sampled), w, bias);
    if squashed {
        logits = squash(logits);
    }
    log_partition(logits)
        .square()
        .sum()
        .div_scalar(fraction * p as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampler_follows_the_unigram_distribution() {
        let s = UnigramSampler::new(&[600, 300, 100, 0]);
        let draws = s.sample(100_000, 7);
        let mut hist = [0usize; 4];
        for d in draws {
            hist[d as usize] += 1;
        }
        // q = [600, 300, 100, 1]/1001; 100k draws: ±1% absolute is > 4 standard deviations.
        for (i, want) in [600.0, 300.0, 100.0, 1.0].iter().enumerate() {
            let got = hist[i] as f64 / 100_000.0;
            assert!((got - want / 1001.0).abs() < 0.01, "token {i}: {got}");
        }
        assert!((s.log_q()[0] as f64 - (600.0f64 / 1001.0).ln()).abs() < 1e-6);
    }

    #[test]
    fn sampled_positions_are_distinct_and_sized() {
        let p = sample_positions(100, 0.1, 3);
        assert_eq!(p.len(), 10);
        let mut q = p.clone();
        q.sort();
        q.dedup();
        assert_eq!(q.len(), 10);
        assert_eq!(sample_positions(5, 1.0, 1).len(), 5);
    }
}
