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
use burn::tensor::activation::log_softmax;

use super::{mle, self_norm, unlikelihood};
use crate::model::output::tied_logits;

/// Which logit terms are on, and the gates.
#[derive(Default)]
pub struct HeadTerms {
    /// DEV's α (0 = off).
    pub dev: f64,
    /// Unlikelihood's α with its candidates `(indices [P, T], mask [P, T])`.
    pub unlikelihood: Option<(f64, Tensor<2, Int>, Tensor<2>)>,
    /// The gate of every (position, column) for W's output gradient, `[P, N]`.
    pub gates: Option<Tensor<2>>,
}

pub struct HeadOutput {
    /// Mean token NLL (the value reported, AGG or not).
    pub nll: Tensor<1>,
    /// The weighted values of the other terms (DEV, UL), detached.
    pub penalties: Vec<Tensor<1>>,
    /// The graph to differentiate.
    pub graph: Tensor<1>,
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
    let log_probs = log_softmax(logits.clone(), 1);
    let nll = mle::nll_from_log_probs(log_probs.clone(), targets);
    let mut head = nll.clone();
    let mut penalties = Vec::new();
    if terms.dev > 0.0 {
        let log_z = mle::log_z_from(logits.clone(), log_probs.clone());
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
    let g_w = match terms.gates {
        Some(gates) => g.clone() * gates,
        None => g.clone(),
    };
    let to_w = mle::output_gradient(g_w, h_fixed);
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
