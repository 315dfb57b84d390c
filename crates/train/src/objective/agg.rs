//! Adaptive gradient gating (Yu et al. 2022, §4) and gradient-part freezing (§3.3).
//!
//! A counter remembers the target tokens of the last K optimizer updates (the current batch
//! included). As in the paper (Eq. 5), a_v = count_v / K with the memory starting empty, so during
//! the first K updates almost every token is rare ([`AggCounter::Paper`], the default); the
//! `warm` option divides by min(updates, K) instead, the mean occurrences per update seen so far.
//! v is rare iff a_v < α. Only the output-side gradient of W is gated, per position p and column v:
//!
//! - positions whose target is not rare: g1_v = a_v for rare v, 1 otherwise;
//! - positions whose target is rare: g2_v = min(a_v / mean_{r rare} a_r, 1) for rare v, 1 otherwise;
//! - the target's own column always has gate 1.
//!
//! With ∂L/∂z_pv = (p_pv − 1[v = y_p])/P this gives the rows of Yu et al.'s Eq. 23: (p−1)·h at
//! own-target positions, g1·p·h at non-rare-target positions, g2·p·h at rare-target positions.
//! Gradient-part freezing is the same machinery with the corpus's static Rare group and gates 0:
//! g1 = 0 drops part (b), g2 = 0 drops part (c).
//!
//! α is in occurrences per update, so it scales with the tokens per update: the paper's α = 0.03
//! at 32,768 tokens per update is α ≈ 0.03·(B·T)/32,768 for B·T tokens per update if the same
//! tokens are to count as rare — e.g. 9.4e-4 at the default model `tiny`'s 16 × 64 = 1,024
//! tokens per update, 5.1e-4 at `lstm`'s 16 × 35 = 560 (batch 16 by default). The gate
//! g1 = a_v of a rare token scales the same way, so no single α reproduces both the paper's rare
//! set and its gate strength at another batch size: steps report the rare set's size and mean g1.

use std::collections::VecDeque;

use burn::prelude::*;

use super::head::RowGates;
use super::{AggCounter, GateParts, GateSet};
use conelab_data::{FrequencyGroups, Group};

/// What `agg=rare:F` chose: α, and the rare set it gives in steady state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RareChoice {
    pub alpha: f64,
    /// Tokens expected rare once the counter's memory is full (after the first K updates).
    pub expected: usize,
    /// F·N, rounded: what was asked for (ties in the counts make it unreachable in general).
    pub target: usize,
}

/// `agg=rare:F` (issue #38): the α whose steady-state rare set is the nearest achievable to the
/// F·N rarest tokens. A token seen c times in T_train training tokens occurs c·T/T_train times
/// per update of T tokens on average, which is its a_v once the counter's memory is full; it is
/// rare iff that is below α, i.e. iff c < α·T_train/T. Every threshold on the counts gives one
/// set {c < t}; the t whose set size is nearest F·N is taken (the smaller set on a tie) and α
/// is put halfway between the largest count inside and t, so a count's sampling noise does not
/// move it across.
pub fn alpha_for_rare_fraction(
    counts: &[u64],
    train_tokens: u64,
    tokens_per_update: u64,
    fraction: f64,
) -> RareChoice {
    let n = counts.len();
    let target = ((fraction * n as f64).round() as usize).min(n);
    let mut sorted: Vec<u64> = counts.to_vec();
    sorted.sort_unstable();
    // Candidate sets: the first k sorted counts, where k is 0, n, or a boundary between two
    // different counts.
    let mut best: Option<(usize, usize)> = None; // (|k − target|, k)
    for k in 0..=n {
        let boundary = k == 0 || k == n || sorted[k - 1] != sorted[k];
        if !boundary {
            continue;
        }
        let cand = (k.abs_diff(target), k);
        if best.is_none_or(|b| cand < b) {
            best = Some(cand);
        }
    }
    let k = best.map_or(0, |b| b.1);
    // Halfway between the largest count inside and the smallest outside (counts are ≥ 0).
    let threshold = match (k.checked_sub(1).map(|i| sorted[i]), sorted.get(k)) {
        (Some(inside), Some(&outside)) => (inside + outside) as f64 / 2.0,
        (None, Some(&outside)) => outside as f64 / 2.0,
        (Some(inside), None) => inside as f64 + 0.5,
        (None, None) => 0.5,
    };
    let per_update = tokens_per_update as f64 / train_tokens.max(1) as f64;
    RareChoice {
        // Above 0 however small the threshold: α = 0 would make nothing rare by definition.
        alpha: (threshold * per_update).max(f64::MIN_POSITIVE),
        expected: k,
        target,
    }
}

/// Target-token occurrences over the last K updates.
#[derive(Debug, Clone)]
pub struct TokenCounter {
    memory: usize,
    history: VecDeque<Vec<u32>>,
    counts: Vec<u32>,
    updates: u64,
}

impl TokenCounter {
    pub fn new(vocab: usize, memory: usize) -> Self {
        Self {
            memory: memory.max(1),
            history: VecDeque::new(),
            counts: vec![0; vocab],
            updates: 0,
        }
    }

    /// Records one update's target tokens, forgetting the update K ago.
    pub fn push(&mut self, tokens: &[u32]) {
        if self.history.len() == self.memory
            && let Some(old) = self.history.pop_front()
        {
            for &t in &old {
                self.counts[t as usize] -= 1;
            }
        }
        for &t in tokens {
            self.counts[t as usize] += 1;
        }
        self.history.push_back(tokens.to_vec());
        self.updates += 1;
    }

    pub fn updates(&self) -> u64 {
        self.updates
    }

    pub fn memory(&self) -> usize {
        self.memory
    }

    /// a_v: occurrences over the memory divided by K (`Paper`: the memory counts as full from
    /// the start, empty updates included) or by the updates remembered so far (`Warm`).
    pub fn mean_occurrences(&self, mode: AggCounter) -> Vec<f64> {
        let span = match mode {
            AggCounter::Paper => self.memory,
            AggCounter::Warm => self.history.len().max(1),
        } as f64;
        self.counts.iter().map(|&c| c as f64 / span).collect()
    }
}

/// Per-token gates and the rare set they were made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Gates {
    pub g1: Vec<f32>,
    pub g2: Vec<f32>,
    pub rare: Vec<bool>,
    pub rare_count: usize,
}

impl Gates {
    /// Mean g1 over the rare set (how hard the push from non-rare contexts is damped); `None`
    /// when nothing is rare.
    pub fn mean_rare_g1(&self) -> Option<f64> {
        (self.rare_count > 0).then(|| {
            self.g1
                .iter()
                .zip(&self.rare)
                .filter(|(_, r)| **r)
                .map(|(&g, _)| g as f64)
                .sum::<f64>()
                / self.rare_count as f64
        })
    }
}

/// AGG's gates from the counter (methods.md §3).
pub fn agg_gates(counter: &TokenCounter, alpha: f64, set: GateSet, mode: AggCounter) -> Gates {
    let a = counter.mean_occurrences(mode);
    let rare: Vec<bool> = a.iter().map(|&x| x < alpha).collect();
    let rare_count = rare.iter().filter(|&&r| r).count();
    let mean_rare = if rare_count == 0 {
        0.0
    } else {
        a.iter()
            .zip(&rare)
            .filter(|(_, r)| **r)
            .map(|(x, _)| x)
            .sum::<f64>()
            / rare_count as f64
    };
    let g1 = a
        .iter()
        .zip(&rare)
        .map(|(&x, &r)| {
            if r && set != GateSet::G2 {
                x as f32
            } else {
                1.0
            }
        })
        .collect();
    let g2 = a
        .iter()
        .zip(&rare)
        .map(|(&x, &r)| {
            if !r || set == GateSet::G1 {
                1.0
            } else if mean_rare > 0.0 {
                (x / mean_rare).min(1.0) as f32
            } else {
                0.0
            }
        })
        .collect();
    Gates {
        g1,
        g2,
        rare,
        rare_count,
    }
}

/// Gradient-part freezing: the corpus's Rare group, gates 0 for the dropped parts.
pub fn part_freeze_gates(groups: &FrequencyGroups, parts: GateParts) -> Gates {
    let n = groups.len();
    let rare: Vec<bool> = (0..n)
        .map(|v| groups.group_of(v as u32) == Group::Rare)
        .collect();
    let gate = |drop: bool| -> Vec<f32> {
        rare.iter()
            .map(|&r| if r && drop { 0.0 } else { 1.0 })
            .collect()
    };
    Gates {
        g1: gate(parts.drops_b()),
        g2: gate(parts.drops_c()),
        rare_count: groups.size(Group::Rare),
        rare,
    }
}

/// The gates in the factored form the head applies (`objective/head.rs`): g1, g2 and which
/// positions have a rare target.
pub fn row_gates(gates: &Gates, targets_host: &[u32], device: &Device) -> RowGates {
    let n = gates.g1.len();
    let p = targets_host.len();
    let rare_target: Vec<f32> = targets_host
        .iter()
        .map(|&t| if gates.rare[t as usize] { 1.0 } else { 0.0 })
        .collect();
    RowGates {
        g1: Tensor::<1>::from_data(TensorData::new(gates.g1.clone(), [n]), device),
        g2: Tensor::<1>::from_data(TensorData::new(gates.g2.clone(), [n]), device),
        rare_target: Tensor::<1>::from_data(TensorData::new(rare_target, [p]), device),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #38: `agg=rare:F` by hand. Counts sorted 0 1 1 1 2 3 4 5 7 10, half a training text's
    /// worth of tokens per update (a_v = c/2 in steady state).
    #[test]
    fn a_rare_fraction_chooses_the_nearest_achievable_set() {
        let counts = [10, 1, 1, 2, 5, 3, 1, 0, 7, 4];
        // F = 0.3 asks for 3, but the three 1s tie: {0, 1, 1, 1} (4) is nearer than {0} (1).
        // α halfway between counts 1 and 2: 1.5 · 0.5.
        let c = alpha_for_rare_fraction(&counts, 34, 17, 0.3);
        assert_eq!((c.expected, c.target), (4, 3));
        assert!((c.alpha - 0.75).abs() < 1e-12, "{c:?}");
        // F = 0.5: exactly {c ≤ 2}, α = 2.5 · 0.5.
        let c = alpha_for_rare_fraction(&counts, 34, 17, 0.5);
        assert_eq!((c.expected, c.target), (5, 5));
        assert!((c.alpha - 1.25).abs() < 1e-12, "{c:?}");
        // Whatever F, the set the counter's rule gives at that α is the one reported.
        for f in [0.05, 0.2, 0.65, 0.95] {
            let c = alpha_for_rare_fraction(&counts, 34, 17, f);
            let rare = counts.iter().filter(|&&n| n as f64 * 0.5 < c.alpha).count();
            assert_eq!(rare, c.expected, "F = {f}");
        }
    }

    /// The steady state the choice assumes, simulated: a shuffled training stream cut into
    /// updates, the paper's counter over an epoch's memory; after the first epoch the live rare
    /// set is about the expected size.
    #[test]
    fn the_live_rare_set_settles_near_the_chosen_size() {
        let n = 300usize;
        // Zipf-like counts 1 … 600.
        let counts: Vec<u64> = (0..n)
            .map(|r| (600.0 / (r as f64 + 1.0)).ceil() as u64)
            .collect();
        let mut stream: Vec<u32> = counts
            .iter()
            .enumerate()
            .flat_map(|(t, &c)| std::iter::repeat_n(t as u32, c as usize))
            .collect();
        // A deterministic shuffle (xorshift, Fisher–Yates).
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for i in (1..stream.len()).rev() {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            stream.swap(i, (s % (i as u64 + 1)) as usize);
        }
        let per_update = 64;
        let updates = stream.len() / per_update;
        let choice = alpha_for_rare_fraction(&counts, stream.len() as u64, per_update as u64, 0.2);
        let mut counter = TokenCounter::new(n, updates);
        let mut sizes = Vec::new();
        for epoch in 0..2 {
            for u in 0..updates {
                counter.push(&stream[u * per_update..(u + 1) * per_update]);
                if epoch == 1 {
                    let g = agg_gates(&counter, choice.alpha, GateSet::Both, AggCounter::Paper);
                    sizes.push(g.rare_count);
                }
            }
        }
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        assert!(
            (mean - choice.expected as f64).abs() <= 0.1 * choice.expected as f64,
            "live {mean} vs expected {} (target {})",
            choice.expected,
            choice.target
        );
    }

    #[test]
    fn the_counter_forgets_after_k_updates() {
        let warm = AggCounter::Warm;
        let mut c = TokenCounter::new(4, 2);
        c.push(&[0, 0, 1]);
        assert_eq!(c.mean_occurrences(warm), vec![2.0, 1.0, 0.0, 0.0]);
        // The paper's counter: the memory of K = 2 starts empty, so one update is divided by 2.
        assert_eq!(
            c.mean_occurrences(AggCounter::Paper),
            vec![1.0, 0.5, 0.0, 0.0]
        );
        c.push(&[1, 2]);
        assert_eq!(c.mean_occurrences(warm), vec![1.0, 1.0, 0.5, 0.0]);
        // Once the memory is full the two agree.
        assert_eq!(
            c.mean_occurrences(AggCounter::Paper),
            c.mean_occurrences(warm)
        );
        c.push(&[3]);
        // The first update is gone: counts 0:0 1:1 2:1 3:1 over 2 updates.
        assert_eq!(c.mean_occurrences(warm), vec![0.0, 0.5, 0.5, 0.5]);
        assert_eq!(c.updates(), 3);
    }

    #[test]
    fn gates_follow_the_definitions() {
        let warm = AggCounter::Warm;
        let mut c = TokenCounter::new(4, 10);
        c.push(&[0, 0, 0, 0, 1, 2]);
        c.push(&[0, 0, 0, 0, 1, 1]);
        // a = [4, 1.5, 0.5, 0]; α = 1 → rare {2, 3}, mean rare a = 0.25.
        let g = agg_gates(&c, 1.0, GateSet::Both, warm);
        assert_eq!(g.rare, vec![false, false, true, true]);
        assert_eq!(g.g1, vec![1.0, 1.0, 0.5, 0.0]);
        assert_eq!(g.g2, vec![1.0, 1.0, 1.0, 0.0]); // min(0.5/0.25, 1), 0/0.25
        assert_eq!(g.mean_rare_g1(), Some(0.25));
        let g = agg_gates(&c, 2.0, GateSet::Both, warm);
        // rare {1, 2, 3}, mean = 2/3: g2 = [1, min(1.5/(2/3),1)=1, 0.75, 0].
        assert_eq!(g.g2, vec![1.0, 1.0, 0.75, 0.0]);
        assert_eq!(agg_gates(&c, 2.0, GateSet::G1, warm).g2, vec![1.0; 4]);
        assert_eq!(agg_gates(&c, 2.0, GateSet::G2, warm).g1, vec![1.0; 4]);
        // The paper's counter after 2 of K = 10 updates: a = [0.8, 0.3, 0.1, 0]; α = 1 makes
        // every token rare (the paper's early regime), with g1 = a.
        let g = agg_gates(&c, 1.0, GateSet::Both, AggCounter::Paper);
        assert_eq!(g.rare_count, 4);
        let want = [0.8f32, 0.3, 0.1, 0.0];
        assert!(
            g.g1.iter().zip(want).all(|(x, y)| (x - y).abs() < 1e-7),
            "{:?}",
            g.g1
        );
        assert!((g.mean_rare_g1().expect("rare") - 0.3).abs() < 1e-7);
        assert_eq!(
            agg_gates(&c, 1e-9, GateSet::Both, warm).mean_rare_g1(),
            Some(0.0)
        );
        assert_eq!(agg_gates(&c, 1e-9, GateSet::Both, warm).rare_count, 1);
    }
}
