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

/// The target's score s_t[y_t] = h_t·w_{y_t} (+ b_{y_t}) per position `[P]`, from the target rows
/// alone: no `[P, N]` product.
pub fn target_scores(
    hidden: Tensor<2>,
    w: Tensor<2>,
    bias: Option<Tensor<1>>,
    targets: Tensor<1, Int>,
) -> Tensor<1> {
    let [p, _] = hidden.dims();
    let s = (hidden * w.select(0, targets.clone()))
        .sum_dim(1)
        .reshape([p]);
    match bias {
        Some(b) => s + b.select(0, targets),
        None => s,
    }
}

/// log Z = log Σ_v exp z_v per row, `[P, 1]`, shifted by the (detached) row maximum so that
/// exp cannot overflow; the shift does not change the value or the gradient.
pub fn log_partition(logits: Tensor<2>) -> Tensor<2> {
    let max = logits.clone().detach().max_dim(1);
    (logits - max.clone()).exp().sum_dim(1).log() + max
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

/// Everything the model-output metrics need from one batch of logits `[positions, N]`, computed
/// on the device in one go (methods.md §2): the target's log-probability, log Z, the entropy of
/// the predicted distribution, the argmax, and Σ over positions of p(·|h).
pub struct OutputTensors {
    pub target_log_probs: Tensor<1>,
    pub log_z: Tensor<1>,
    pub entropy: Tensor<1>,
    pub argmax: Tensor<1, Int>,
    pub prob_sum: Tensor<1>,
}

pub fn output_tensors(logits: Tensor<2>, targets: Tensor<1, Int>) -> OutputTensors {
    let [n, v] = logits.dims();
    let log_z = log_partition(logits.clone());
    let log_p = logits.clone() - log_z.clone();
    let p = log_p.clone().exp();
    // H = −Σ p log p; terms with p = 0 (underflow) contribute 0, and so does 0·(finite log p).
    let entropy = (p.clone() * log_p.clone()).sum_dim(1).neg().reshape([n]);
    OutputTensors {
        target_log_probs: log_p.gather(1, targets.reshape([n, 1])).reshape([n]),
        log_z: log_z.reshape([n]),
        entropy,
        argmax: logits.argmax(1).reshape([n]),
        prob_sum: p.sum_dim(0).reshape([v]),
    }
}
