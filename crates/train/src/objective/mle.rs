//! MLE: the mean token negative log-likelihood with tied weights,
//! L = −(1/P) Σ_p log softmax(h_p·Wᵀ + b)[y_p] over the P = B·T positions of the batch.
//!
//! The composed step (`engine/trainer.rs`) evaluates every full-softmax term on a detached copy of
//! the logits and hands their gradient G = ∂L/∂z back explicitly: the hidden states get G·W,
//! W gets (gate ⊙ G)ᵀ·h. Without gates that is exactly the MLE gradient; with AGG's gates it
//! is the paper's split of the two paths, at the cost of one extra elementwise product instead
//! of a second logits matmul.

use burn::prelude::*;

/// Mean token NLL from log-probabilities `[P, N]`.
pub fn nll_from_log_probs(log_probs: Tensor<2>, targets: Tensor<1, Int>) -> Tensor<1> {
    let [p, _] = log_probs.dims();
    log_probs.gather(1, targets.reshape([p, 1])).mean().neg()
}

/// The output-side gradient of W from the logits' gradient `g` `[P, N]` and the (detached)
/// hidden states `[P, d]`: gᵀ·h, `[N, d]`.
pub fn output_gradient(g: Tensor<2>, hidden: Tensor<2>) -> Tensor<2> {
    crate::model::precision::matmul(g.transpose(), hidden)
}
