//! Model-output metrics over a split (methods.md §2), from per-position numbers the evaluator
//! hands in batch by batch: the target's log-probability, log Z, the entropy of the predicted
//! distribution, the argmax, and Σ_t p(·|h_t) over the vocabulary.

use serde::{Deserialize, Serialize};

use conelab_data::{FrequencyGroups, Group};

/// One batch of per-position outputs (all slices have one entry per position).
#[derive(Debug, Clone, Copy)]
pub struct OutputBatch<'a> {
    pub targets: &'a [u32],
    /// log softmax(s_t)[y_t].
    pub target_log_probs: &'a [f32],
    /// log Z_t = logsumexp(s_t).
    pub log_z: &'a [f32],
    /// H_t = −Σ_v p(v|h_t) log p(v|h_t).
    pub entropy: &'a [f32],
    pub argmax: &'a [u32],
    /// Σ over this batch's positions of p(v|h_t), one entry per vocabulary token.
    pub prob_sum: &'a [f32],
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OutputError {
    #[error("output batch: {what} has {got} entries, expected {want}")]
    Length {
        what: &'static str,
        got: usize,
        want: usize,
    },
    #[error("token id {id} is outside the vocabulary of {n}")]
    TokenId { id: u32, n: usize },
}

/// Accumulates [`OutputBatch`]es; [`OutputAccumulator::finish`] turns them into metrics.
#[derive(Debug, Clone)]
pub struct OutputAccumulator {
    groups: FrequencyGroups,
    nll: [f64; 3],
    count: [u64; 3],
    predicted: Vec<bool>,
    targeted: Vec<bool>,
    prob_sum: Vec<f64>,
    log_z: Vec<f32>,
    entropy: Vec<f32>,
}

/// Bins of the (entropy, log Z) histogram.
pub const HISTOGRAM_BINS: [usize; 2] = [40, 20];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupOutputs {
    /// Perplexity over positions whose target is in the group (NaN when none).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub ppl: f64,
    pub positions: u64,
    /// Distinct predicted ids that lie in the group.
    pub uniq: usize,
    /// Distinct target ids that lie in the group.
    pub human_uniq: usize,
    /// Tokens of the group with 1 − mean_t p(v|h_t) below the Theorem-2 threshold; `None` while no
    /// cosine regulariser is on (γ = 0: the threshold is 1 and the count means nothing).
    #[serde(default)]
    pub theorem2_below: Option<usize>,
    pub tokens: usize,
}

/// A 2-D histogram of (entropy, log Z): `counts[z_bin * entropy_bins + h_bin]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Histogram2d {
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64_pair")]
    pub entropy_range: [f64; 2],
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64_pair")]
    pub log_z_range: [f64; 2],
    pub entropy_bins: usize,
    pub log_z_bins: usize,
    pub counts: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputMetrics {
    pub positions: u64,
    /// Mean NLL (exactly normalised).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub loss: f64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub ppl: f64,
    pub groups: [GroupOutputs; 3],
    pub uniq: usize,
    pub human_uniq: usize,
    /// Positions per window the predictions were made with (teacher forcing within a window).
    pub block_length: usize,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub mu_z: f64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub sigma_z: f64,
    /// exp(−mean_t s_t[y_t]) = PPL·exp(−μ_z).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub unnormalised_ppl: f64,
    /// Pearson correlation of H_t and log Z_t.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub entropy_log_z_corr: f64,
    pub histogram: Histogram2d,
    /// Cosine weight γ the Theorem-2 threshold was computed for, and the threshold
    /// exp(−4γ(N−1)/N²) — `None` when γ = 0 (methods.md §2: only meaningful while a cosine
    /// regulariser is on).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub theorem2_gamma: f64,
    #[serde(default)]
    pub theorem2_threshold: Option<f64>,
}

/// Goldberger & Melamud's shifted model (§5.2, Table 4): log p̃(w|c) = s_w(c) − shift, with shift
/// the mean log Z observed on the validation split. A uniform shift leaves the normalised model
/// (its PPL) as it was and moves every log Z by −shift; what it changes is how well the
/// unnormalised scores exp(s − shift) stand in for probabilities.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ShiftedOutputs {
    /// The subtracted μ_z of the validation split.
    pub shift: f64,
    /// Exact perplexity (unchanged by the shift).
    pub ppl: f64,
    /// exp(−mean_t (s_t[y_t] − shift)).
    pub unnormalised_ppl: f64,
    /// Mean of log Z_t − shift.
    pub mu_z: f64,
    /// Standard deviation of log Z_t (unchanged by the shift).
    pub sigma_z: f64,
}

impl OutputMetrics {
    /// The shifted model's numbers from the unshifted ones: −mean (s[y] − shift) = loss − μ_z +
    /// shift.
    pub fn shifted(&self, shift: f64) -> ShiftedOutputs {
        ShiftedOutputs {
            shift,
            ppl: self.ppl,
            unnormalised_ppl: (self.loss - self.mu_z + shift).exp(),
            mu_z: self.mu_z - shift,
            sigma_z: self.sigma_z,
        }
    }
}

impl OutputAccumulator {
    pub fn new(groups: FrequencyGroups) -> Self {
        let n = groups.len();
        Self {
            groups,
            nll: [0.0; 3],
            count: [0; 3],
            predicted: vec![false; n],
            targeted: vec![false; n],
            prob_sum: vec![0.0; n],
            log_z: Vec::new(),
            entropy: Vec::new(),
        }
    }

    pub fn add(&mut self, batch: OutputBatch<'_>) -> Result<(), OutputError> {
        let p = batch.targets.len();
        let n = self.groups.len();
        for (what, got, want) in [
            ("target_log_probs", batch.target_log_probs.len(), p),
            ("log_z", batch.log_z.len(), p),
            ("entropy", batch.entropy.len(), p),
            ("argmax", batch.argmax.len(), p),
            ("prob_sum", batch.prob_sum.len(), n),
        ] {
            if got != want {
                return Err(OutputError::Length { what, got, want });
            }
        }
        if let Some(&id) = batch
            .targets
            .iter()
            .chain(batch.argmax)
            .find(|&&id| id as usize >= n)
        {
            return Err(OutputError::TokenId { id, n });
        }
        for (&y, &lp) in batch.targets.iter().zip(batch.target_log_probs) {
            let g = self.groups.group_of(y) as usize;
            self.nll[g] -= lp as f64;
            self.count[g] += 1;
            self.targeted[y as usize] = true;
        }
        for &a in batch.argmax {
            self.predicted[a as usize] = true;
        }
        for (s, &x) in self.prob_sum.iter_mut().zip(batch.prob_sum) {
            *s += x as f64;
        }
        self.log_z.extend_from_slice(batch.log_z);
        self.entropy.extend_from_slice(batch.entropy);
        Ok(())
    }

    /// `gamma` is the active cosine-regulariser weight (0 without one).
    pub fn finish(self, block_length: usize, gamma: f64) -> OutputMetrics {
        let n = self.groups.len();
        let positions: u64 = self.count.iter().sum();
        let total_nll: f64 = self.nll.iter().sum();
        let loss = if positions == 0 {
            f64::NAN
        } else {
            total_nll / positions as f64
        };
        let pos = positions.max(1) as f64;
        let mu_z = self.log_z.iter().map(|&z| z as f64).sum::<f64>() / pos;
        let sigma_z = (self
            .log_z
            .iter()
            .map(|&z| (z as f64 - mu_z).powi(2))
            .sum::<f64>()
            / pos)
            .sqrt();
        let threshold =
            (gamma > 0.0).then(|| (-4.0 * gamma * (n as f64 - 1.0) / (n as f64 * n as f64)).exp());
        let count_in =
            |flags: &[bool], g: Group| self.groups.range(g).filter(|&i| flags[i]).count();
        let groups = Group::ALL.map(|g| {
            let gi = g as usize;
            let below = threshold.map(|threshold| {
                self.groups
                    .range(g)
                    .filter(|&v| 1.0 - self.prob_sum[v] / pos < threshold)
                    .count()
            });
            GroupOutputs {
                ppl: if self.count[gi] == 0 {
                    f64::NAN
                } else {
                    (self.nll[gi] / self.count[gi] as f64).exp()
                },
                positions: self.count[gi],
                uniq: count_in(&self.predicted, g),
                human_uniq: count_in(&self.targeted, g),
                theorem2_below: below,
                tokens: self.groups.size(g),
            }
        });
        OutputMetrics {
            positions,
            loss,
            ppl: loss.exp(),
            uniq: self.predicted.iter().filter(|&&b| b).count(),
            human_uniq: self.targeted.iter().filter(|&&b| b).count(),
            groups,
            block_length,
            mu_z,
            sigma_z,
            // −mean s[y] = −mean(log p[y] + log Z) = loss − μ_z.
            unnormalised_ppl: (loss - mu_z).exp(),
            entropy_log_z_corr: pearson(&self.entropy, &self.log_z),
            histogram: histogram(&self.entropy, &self.log_z, HISTOGRAM_BINS),
            theorem2_gamma: gamma,
            theorem2_threshold: threshold,
        }
    }
}

/// Pearson correlation in f64, two-pass; NaN when either side is constant or empty.
pub fn pearson(x: &[f32], y: &[f32]) -> f64 {
    let n = x.len().min(y.len());
    if n == 0 {
        return f64::NAN;
    }
    let mx = x[..n].iter().map(|&v| v as f64).sum::<f64>() / n as f64;
    let my = y[..n].iter().map(|&v| v as f64).sum::<f64>() / n as f64;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (&a, &b) in x.iter().zip(y) {
        let (a, b) = (a as f64 - mx, b as f64 - my);
        sxy += a * b;
        sxx += a * a;
        syy += b * b;
    }
    if sxx == 0.0 || syy == 0.0 {
        f64::NAN
    } else {
        sxy / (sxx * syy).sqrt()
    }
}

fn range_of(v: &[f32]) -> [f64; 2] {
    let lo = v.iter().map(|&x| x as f64).fold(f64::INFINITY, f64::min);
    let hi = v
        .iter()
        .map(|&x| x as f64)
        .fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        [0.0, 1.0]
    } else if hi - lo < 1e-9 {
        [lo - 0.5, hi + 0.5]
    } else {
        [lo, hi]
    }
}

fn histogram(entropy: &[f32], log_z: &[f32], [hb, zb]: [usize; 2]) -> Histogram2d {
    let hr = range_of(entropy);
    let zr = range_of(log_z);
    let bin = |v: f64, r: [f64; 2], bins: usize| {
        (((v - r[0]) / (r[1] - r[0]) * bins as f64) as usize).min(bins - 1)
    };
    let mut counts = vec![0u64; hb * zb];
    for (&h, &z) in entropy.iter().zip(log_z) {
        counts[bin(z as f64, zr, zb) * hb + bin(h as f64, hr, hb)] += 1;
    }
    Histogram2d {
        entropy_range: hr,
        log_z_range: zr,
        entropy_bins: hb,
        log_z_bins: zb,
        counts,
    }
}
