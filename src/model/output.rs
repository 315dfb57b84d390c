//! The tied output layer and the token NLL: the one place logits are made, so every objective
//! (MLE now; the regularisers of methods.md §3 later) sees the same computation.

use burn::prelude::*;
use burn::tensor::activation::log_softmax;

/// `logits = h · Wᵀ (+ b)`: `hidden` is `[positions, d]`, `w` is the tied embedding `[N, d]`.
pub fn tied_logits(hidden: Tensor<2>, w: Tensor<2>, bias: Option<Tensor<1>>) -> Tensor<2> {
    let logits = hidden.matmul(w.transpose());
    match bias {
        Some(b) => logits + b.unsqueeze::<2>(),
        None => logits,
    }
}

/// Log-probability of each target, `[positions]`: `log softmax(logits)[y]`.
pub fn target_log_probs(logits: Tensor<2>, targets: Tensor<1, Int>) -> Tensor<1> {
    let [n, _] = logits.dims();
    log_softmax(logits, 1)
        .gather(1, targets.reshape([n, 1]))
        .reshape([n])
}

/// Mean token negative log-likelihood.
pub fn mean_nll(logits: Tensor<2>, targets: Tensor<1, Int>) -> Tensor<1> {
    target_log_probs(logits, targets).mean().neg()
}
