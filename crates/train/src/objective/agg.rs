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
