//! The full-softmax head of a step: every term that is a function of the logits (NLL, DEV's
//! (log Z)², unlikelihood) evaluated on a detached copy of the logits z = h·Wᵀ + b, and their
//! gradient G = ∂L/∂z handed back explicitly:
//!
//! - the hidden states get G·W (exactly the autodiff gradient of the same terms),
//! - W's output side gets (gates ⊙ G)ᵀ·h — without gates MLE's gradient, with AGG's gates the
//!   paper's "NLL of stop_grad(h)·Wᵀ with gated logits" (Yu et al. 2022, §4),
//! - the bias gets Σ_p G_p.
//!
//! The returned graph sum(h ⊙ G·W) + sum(W ⊙ (gates⊙G)ᵀ·h) + sum(b ⊙ Σ_p G_p) has exactly those
//! gradients, so one backward pass trains the network. It costs the three matmuls of plain MLE
//! (z, G·W, Gᵀ·h) instead of AGG's two logits products, and one elementwise product for the gates.

use burn::prelude::*;
use burn::tensor::IndexingUpdateOp;

use super::{mle, self_norm, unlikelihood};
use crate::model::output::{log_partition, tied_logits};

/// Which logit terms are on, and the gates.
#[derive(Default)]
pub struct HeadTerms {
    /// DEV's α (0 = off).
    pub dev: f64,
    /// Unlikelihood's α with its candidates `(indices [P, T], mask [P, T])`.
    pub unlikelihood: Option<(f64, Tensor<2, Int>, Tensor<2>)>,
    /// AGG's or gradient-part freezing's gates for W's output gradient.
    pub gates: Option<RowGates>,
}

/// Gates in factored form: position p's row is `g1 + rare_target_p·(g2 − g1)`, and the target's
/// own column is always 1. Cheaper than a `[P, N]` gate matrix: the own-column fix is a sparse
/// correction of P rows instead of a one-hot mask over P×N.
pub struct RowGates {
    /// g1 `[N]`: used at positions whose target is not rare.
    pub g1: Tensor<1>,
    /// g2 `[N]`: used at positions whose target is rare.
    pub g2: Tensor<1>,
    /// 1 where the position's target is rare, else 0, `[P]`.
    pub rare_target: Tensor<1>,
}

pub struct HeadOutput {
    /// Mean token NLL (the value reported, AGG or not).
    pub nll: Tensor<1>,
    /// The weighted values of the other terms (DEV, UL), detached.
    pub penalties: Vec<Tensor<1>>,
    /// The graph to differentiate.
    pub graph: Tensor<1>,
}

/// (gate ⊙ G)ᵀ·h with the gate of row p = g1 + r_p·(g2 − g1) and 1 in the target's column: the
/// dense product with the row gates, plus (1 − gate_{p,y_p})·G_{p,y_p}·h_p added to row y_p.
fn gated_output_gradient(
    g: Tensor<2>,
    hidden: Tensor<2>,
    targets: Tensor<1, Int>,
    gates: RowGates,
) -> Tensor<2> {
    let [p, n] = g.dims();
    let r = gates.rare_target.reshape([p, 1]);
    let g1 = gates.g1.reshape([1, n]);
    let diff = gates.g2.reshape([1, n]) - g1.clone();
    let row_gates = g1.clone() + r.clone() * diff.clone();
    let dense = mle::output_gradient(g.clone() * row_gates, hidden.clone());
    // The target column's gate should have been 1.
    let y = targets.clone().reshape([p, 1]);
    let own_gate = g1.reshape([n]).select(0, targets.clone()).reshape([p, 1])
        + r * diff.reshape([n]).select(0, targets.clone()).reshape([p, 1]);
    let own = g.gather(1, y) * (own_gate.neg() + 1.0);
    dense.select_assign(0, targets, own * hidden, IndexingUpdateOp::Add)
}

#[derive(Debug, thiserror::Error)]
#[error("the logits have no gradient (is the device an autodiff device?)")]
pub struct NoGradient;

pub fn full_softmax_head(
    hidden: Tensor<2>,
    w: Tensor<2>,
    bias: Option<Tensor<1>>,
    targets: Tensor<1, Int>,
    terms: HeadTerms,
) -> Result<HeadOutput, NoGradient> {
    let h_fixed = hidden.clone().detach();
    let w_fixed = w.clone().detach();
    let logits = tied_logits(
        h_fixed.clone(),
        w_fixed.clone(),
        bias.clone().map(Tensor::detach),
    )
    // A fresh leaf: the gradient of the head terms stops here.
    .detach()
    .require_grad();
    let [p, _] = logits.dims();
    // log Z once: the log-probabilities and DEV's (log Z)² share it.
    let log_z = log_partition(logits.clone());
    let log_probs = logits.clone() - log_z.clone();
    let nll = mle::nll_from_log_probs(log_probs.clone(), targets.clone());
    let mut head = nll.clone();
    let mut penalties = Vec::new();
    if terms.dev > 0.0 {
        let log_z = log_z.reshape([p]);
        let pen = self_norm::dev_penalty(log_z).mul_scalar(terms.dev);
        penalties.push(pen.clone().detach());
        head = head + pen;
    }
    if let Some((alpha, idx, mask)) = terms.unlikelihood {
        let pen = unlikelihood::unlikelihood(log_probs, idx, mask).mul_scalar(alpha);
        penalties.push(pen.clone().detach());
        head = head + pen;
    }
    let head_grads = head.backward();
    let g = logits.grad(&head_grads).ok_or(NoGradient)?;
    let to_hidden = g.clone().matmul(w_fixed);
    let to_w = match terms.gates {
        None => mle::output_gradient(g.clone(), h_fixed),
        Some(gates) => gated_output_gradient(g.clone(), h_fixed, targets, gates),
    };
    let mut graph = (hidden * to_hidden).sum() + (w * to_w).sum();
    if let Some(b) = bias {
        let [n] = b.dims();
        graph = graph + (b * g.sum_dim(0).reshape([n])).sum();
    }
    Ok(HeadOutput {
        nll: nll.detach(),
        penalties,
        graph,
    })
}
