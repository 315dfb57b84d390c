//! Sampling uncertainty of a held-out perplexity (methods.md §4): a bootstrap over the sentences of
//! the evaluated split. A sentence is resampled whole — its positions' NLLs are not independent —
//! and each replicate's PPL is exp(Σ NLL / Σ positions) over the drawn sentences, per frequency
//! group of the target and in total. The interval is the replicates' 2.5 and 97.5 percentiles.
//!
//! Two runs scored on the same split are compared by a paired bootstrap: each replicate draws one
//! set of sentences and scores both runs on it, so the interval of PPL_B − PPL_A carries only the
//! runs' disagreement, not the split's own spread (which both share).

use conelab_data::order::below;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

/// Frequent, medium, rare, total.
pub const SETS: usize = 4;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BootstrapError {
    #[error("{0} log-probabilities for a split of {1} tokens")]
    Length(usize, usize),
    #[error("the split has no sentence with a scored position")]
    Empty,
    #[error(
        "--bootstrap {0}: the number of replicates must be from {MIN_REPLICATES} (a 95 % interval needs a replicate in each 2.5 % tail) to {MAX_REPLICATES}"
    )]
    Replicates(usize),
    #[error(
        "the two runs were not scored on the same split ({0} and {1} sentences, or different positions per group): a paired comparison needs one corpus and vocabulary"
    )]
    Unpaired(usize, usize),
}

/// At most this many replicates (each one a pass over the sentences).
pub const MAX_REPLICATES: usize = 100_000;

/// At least this many: the 2.5 % and 97.5 % percentiles of fewer replicates are the smallest and
/// largest ones themselves (with one replicate the "interval" excluded the PPL it was about).
pub const MIN_REPLICATES: usize = 40;

/// Each sentence's NLL sum and scored positions, per set.
#[derive(Debug, Clone, PartialEq)]
pub struct SentenceScores {
    nll: Vec<[f64; SETS]>,
    positions: Vec<[u32; SETS]>,
}

/// A point estimate (on the whole split) and its 95 % bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub estimate: f64,
    pub lo: f64,
    pub hi: f64,
}

impl SentenceScores {
    /// `log_probs[i]` is the model's log-probability of token `i` of the split as the target
    /// (`i ≥ 1`; entry 0, never predicted, is ignored). A sentence ends with its `eos`; the
    /// target at `i` belongs to the sentence token `i` is in. `group_of` gives a token's group,
    /// 0–2.
    pub fn new(
        tokens: &[u32],
        log_probs: &[f32],
        eos: u32,
        group_of: impl Fn(u32) -> usize,
    ) -> Result<Self, BootstrapError> {
        if log_probs.len() != tokens.len() {
            return Err(BootstrapError::Length(log_probs.len(), tokens.len()));
        }
        let mut nll = Vec::new();
        let mut positions = Vec::new();
        let (mut sum, mut count) = ([0f64; SETS], [0u32; SETS]);
        for (i, (&token, &lp)) in tokens.iter().zip(log_probs).enumerate() {
            if i > 0 {
                for set in [group_of(token).min(2), SETS - 1] {
                    sum[set] -= f64::from(lp);
                    count[set] += 1;
                }
            }
            // A sentence with no target (the split's first token an <eos>) is no sample.
            if (token == eos || i + 1 == tokens.len()) && count[SETS - 1] > 0 {
                nll.push(std::mem::take(&mut sum));
                positions.push(std::mem::take(&mut count));
            }
        }
        if nll.is_empty() {
            return Err(BootstrapError::Empty);
        }
        Ok(Self { nll, positions })
    }

    pub fn sentences(&self) -> usize {
        self.nll.len()
    }

    /// PPL per set over every sentence (NaN for a set with no position).
    pub fn ppl(&self) -> [f64; SETS] {
        let all: Vec<usize> = (0..self.sentences()).collect();
        self.ppl_of(&all)
    }

    fn ppl_of(&self, drawn: &[usize]) -> [f64; SETS] {
        let (mut sum, mut count) = ([0f64; SETS], [0u64; SETS]);
        for &s in drawn {
            for set in 0..SETS {
                sum[set] += self.nll[s][set];
                count[set] += u64::from(self.positions[s][set]);
            }
        }
        std::array::from_fn(|set| match count[set] {
            0 => f64::NAN,
            n => (sum[set] / n as f64).exp(),
        })
    }
}

fn check_replicates(replicates: usize) -> Result<(), BootstrapError> {
    if (MIN_REPLICATES..=MAX_REPLICATES).contains(&replicates) {
        Ok(())
    } else {
        Err(BootstrapError::Replicates(replicates))
    }
}

/// The replicates' sentence draws: `replicates` × `sentences` indices, uniform with replacement,
/// the same for the same seed.
fn draws(sentences: usize, replicates: usize, seed: u64) -> impl Iterator<Item = Vec<usize>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..replicates).map(move |_| (0..sentences).map(|_| below(&mut rng, sentences)).collect())
}

/// The 2.5 and 97.5 percentiles of `values` (linear interpolation between order statistics;
/// NaNs left out).
pub fn percentile_interval(values: &mut Vec<f64>) -> (f64, f64) {
    values.retain(|v| !v.is_nan());
    values.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let Some(last) = values.len().checked_sub(1) else {
            return f64::NAN;
        };
        let x = q * last as f64;
        let (i, frac) = (x.floor() as usize, x.fract());
        let next = values[(i + 1).min(last)];
        values[i] + frac * (next - values[i])
    };
    (at(0.025), at(0.975))
}

/// PPL per set with its 95 % interval from `replicates` resamplings of the sentences.
pub fn bootstrap_ppl(
    scores: &SentenceScores,
    replicates: usize,
    seed: u64,
) -> Result<[Interval; SETS], BootstrapError> {
    bootstrap_ppl_reporting(scores, replicates, seed, &mut |_| {})
}

/// [`bootstrap_ppl`], telling `progress(done)` the replicates drawn after each (a bar's
/// position; the total is `replicates`).
pub fn bootstrap_ppl_reporting(
    scores: &SentenceScores,
    replicates: usize,
    seed: u64,
    progress: &mut dyn FnMut(usize),
) -> Result<[Interval; SETS], BootstrapError> {
    check_replicates(replicates)?;
    let mut samples: [Vec<f64>; SETS] = std::array::from_fn(|_| Vec::with_capacity(replicates));
    for (done, drawn) in draws(scores.sentences(), replicates, seed).enumerate() {
        for (set, ppl) in scores.ppl_of(&drawn).into_iter().enumerate() {
            samples[set].push(ppl);
        }
        progress(done + 1);
    }
    let estimate = scores.ppl();
    Ok(std::array::from_fn(|set| {
        let (lo, hi) = percentile_interval(&mut samples[set]);
        Interval {
            estimate: estimate[set],
            lo,
            hi,
        }
    }))
}

/// PPL_B − PPL_A per set with its 95 % interval from a paired resampling: every replicate scores
/// both runs on the same drawn sentences. `a` and `b` must come from one split (the same
/// sentences and positions per group).
pub fn paired_bootstrap(
    a: &SentenceScores,
    b: &SentenceScores,
    replicates: usize,
    seed: u64,
) -> Result<[Interval; SETS], BootstrapError> {
    paired_bootstrap_reporting(a, b, replicates, seed, &mut |_| {})
}

/// [`paired_bootstrap`], telling `progress(done)` the replicates drawn after each.
pub fn paired_bootstrap_reporting(
    a: &SentenceScores,
    b: &SentenceScores,
    replicates: usize,
    seed: u64,
    progress: &mut dyn FnMut(usize),
) -> Result<[Interval; SETS], BootstrapError> {
    check_replicates(replicates)?;
    if a.positions != b.positions {
        return Err(BootstrapError::Unpaired(a.sentences(), b.sentences()));
    }
    let mut samples: [Vec<f64>; SETS] = std::array::from_fn(|_| Vec::with_capacity(replicates));
    for (done, drawn) in draws(a.sentences(), replicates, seed).enumerate() {
        let (pa, pb) = (a.ppl_of(&drawn), b.ppl_of(&drawn));
        for set in 0..SETS {
            samples[set].push(pb[set] - pa[set]);
        }
        progress(done + 1);
    }
    let (pa, pb) = (a.ppl(), b.ppl());
    Ok(std::array::from_fn(|set| {
        let (lo, hi) = percentile_interval(&mut samples[set]);
        Interval {
            estimate: pb[set] - pa[set],
            lo,
            hi,
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EOS: u32 = 0;

    /// Three sentences "1 2 <eos>", "3 <eos>", "4 5 6 <eos>", tokens 1–3 frequent, 4–5 medium, 6
    /// and <eos> rare.
    fn split() -> (Vec<u32>, Vec<f32>) {
        let tokens = vec![1, 2, EOS, 3, EOS, 4, 5, 6, EOS];
        let lp = vec![0.0, -1.0, -2.0, -0.5, -0.25, -3.0, -1.5, -0.75, -1.0];
        (tokens, lp)
    }

    fn group(t: u32) -> usize {
        match t {
            1..=3 => 0,
            4 | 5 => 1,
            _ => 2,
        }
    }

    #[test]
    fn sentences_and_perplexities_by_hand() {
        let (tokens, lp) = split();
        let s = SentenceScores::new(&tokens, &lp, EOS, group).expect("scores");
        assert_eq!(s.sentences(), 3);
        // Sentence 1 scores tokens 1..=2 (2, <eos>), sentence 2 (3, <eos>), sentence 3 (4, 5, 6,
        // <eos>): token 0 is never a target.
        assert_eq!(s.positions[0], [1, 0, 1, 2]);
        assert_eq!(s.positions[1], [1, 0, 1, 2]);
        assert_eq!(s.positions[2], [0, 2, 2, 4]);
        let ppl = s.ppl();
        // Total: the mean NLL of the 8 targets (−Σ lp[1..]) = 10/8.
        assert!((ppl[3] - (10.0f64 / 8.0).exp()).abs() < 1e-12);
        // Frequent: tokens 2 and 3 (NLL 1 and 0.5).
        assert!((ppl[0] - 0.75f64.exp()).abs() < 1e-12);
        // Rare: the three <eos> and 6 (2 + 0.25 + 0.75 + 1).
        assert!((ppl[2] - (4.0f64 / 4.0).exp()).abs() < 1e-12);
    }

    #[test]
    fn the_interval_brackets_the_estimate_and_is_reproducible() {
        let (tokens, lp) = split();
        let s = SentenceScores::new(&tokens, &lp, EOS, group).expect("scores");
        let a = bootstrap_ppl(&s, 2000, 7).expect("bootstrap");
        assert_eq!(a, bootstrap_ppl(&s, 2000, 7).expect("again"));
        let t = a[3];
        assert!(t.lo < t.estimate && t.estimate < t.hi, "{t:?}");
        // The extremes of any replicate: every draw the cheapest sentence (the second: NLL
        // 0.75 over 2 positions) or the dearest (the third: 6.25 over 4).
        assert!(t.lo >= 0.375f64.exp() - 1e-12 && t.hi <= 1.5625f64.exp() + 1e-12);
        for few in [0, 1, MIN_REPLICATES - 1] {
            assert_eq!(
                bootstrap_ppl(&s, few, 7).expect_err("too few"),
                BootstrapError::Replicates(few)
            );
        }
        assert!(bootstrap_ppl(&s, MIN_REPLICATES, 7).is_ok());
    }

    #[test]
    fn progress_hears_every_replicate_in_order_and_changes_nothing() {
        let (tokens, lp) = split();
        let s = SentenceScores::new(&tokens, &lp, EOS, group).expect("scores");
        let mut heard = Vec::new();
        let reported =
            bootstrap_ppl_reporting(&s, 300, 7, &mut |d| heard.push(d)).expect("bootstrap");
        assert_eq!(heard, (1..=300).collect::<Vec<_>>());
        assert_eq!(reported, bootstrap_ppl(&s, 300, 7).expect("plain"));
        heard.clear();
        let paired =
            paired_bootstrap_reporting(&s, &s, 250, 7, &mut |d| heard.push(d)).expect("paired");
        assert_eq!(heard.len(), 250);
        assert_eq!(heard.last(), Some(&250));
        assert_eq!(paired, paired_bootstrap(&s, &s, 250, 7).expect("plain"));
    }

    #[test]
    fn a_paired_comparison_of_a_run_with_itself_is_zero_and_a_shift_is_exact() {
        let (tokens, lp) = split();
        let a = SentenceScores::new(&tokens, &lp, EOS, group).expect("a");
        let same = paired_bootstrap(&a, &a, 500, 1).expect("paired");
        assert!(
            same.iter()
                .all(|i| i.estimate == 0.0 && i.lo == 0.0 && i.hi == 0.0)
        );
        // B is A with every log-probability 0.1 lower: PPL_B = PPL_A·e^0.1 on every draw, so the
        // difference's interval lies within [min, max] of PPL_A·(e^0.1 − 1) over the draws.
        let shifted: Vec<f32> = lp.iter().map(|x| x - 0.1).collect();
        let b = SentenceScores::new(&tokens, &shifted, EOS, group).expect("b");
        let d = paired_bootstrap(&a, &b, 500, 1).expect("paired")[3];
        let factor = 0.1f64.exp() - 1.0;
        assert!((d.estimate - a.ppl()[3] * factor).abs() < 1e-5, "{d:?}");
        assert!(d.lo > 0.0 && d.lo <= d.estimate && d.estimate <= d.hi);
        // A split with a sentence less is not the same split.
        let c = SentenceScores::new(&tokens[..5], &lp[..5], EOS, group).expect("c");
        assert!(matches!(
            paired_bootstrap(&a, &c, 100, 1),
            Err(BootstrapError::Unpaired(3, 2))
        ));
    }

    /// One position per sentence: ln PPL is the mean NLL, and the bootstrap interval of a mean
    /// approaches the normal one, mean ± 1.96·s/√n (n = 400, 4,000 replicates).
    #[test]
    fn with_one_position_per_sentence_the_interval_is_the_normal_one_of_the_mean() {
        let n = 400;
        let mut tokens = vec![EOS];
        let mut lp = vec![0.0f32];
        let nll: Vec<f64> = (0..n)
            .map(|i| 1.0 + ((i * 7919) % 1000) as f64 / 250.0)
            .collect();
        for &x in &nll {
            tokens.push(EOS);
            lp.push(-(x as f32));
        }
        let s = SentenceScores::new(&tokens, &lp, EOS, |_| 2).expect("scores");
        assert_eq!(
            s.sentences(),
            n,
            "the first <eos> has no target: no sentence"
        );
        let t = bootstrap_ppl(&s, 4000, 3).expect("bootstrap")[3];
        let mean = nll.iter().sum::<f64>() / n as f64;
        let sd = (nll.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
        let half = 1.96 * sd / (n as f64).sqrt();
        assert!((t.estimate.ln() - mean).abs() < 1e-6);
        for (got, want) in [(t.lo.ln(), mean - half), (t.hi.ln(), mean + half)] {
            assert!((got - want).abs() < 0.1 * half, "{got} vs {want} (±{half})");
        }
    }

    #[test]
    fn percentiles_interpolate_between_order_statistics() {
        let mut v: Vec<f64> = (0..=40).map(f64::from).rev().collect();
        v.push(f64::NAN);
        // 41 values 0..=40: the 2.5 % point is at 0.025·40 = 1, the 97.5 % at 39.
        assert_eq!(percentile_interval(&mut v), (1.0, 39.0));
    }
}
