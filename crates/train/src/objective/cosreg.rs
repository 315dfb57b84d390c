//! CosReg (Gao et al. 2019, §5): γ·(‖Σ_i ŵ_i‖² − N)/N² with ŵ_i = w_i/‖w_i‖, over the whole
//! vocabulary every step, the gradient flowing through the normalisation.
//!
//! ‖Σ ŵ_i‖² = Σ_ij cos(w_i, w_j), so the penalty is the mean pairwise cosine over i ≠ j scaled
//! by (N−1)/N: O(N·d), never the N×N matrix.

use burn::prelude::*;

/// The unweighted penalty (‖Σ_i ŵ_i‖² − N)/N² of `w` `[N, d]` (multiply by γ).
pub fn cos_penalty(w: Tensor<2>) -> Tensor<1> {
    let [n, _] = w.dims();
    let norms = w.clone().square().sum_dim(1).sqrt().clamp_min(1e-12);
    let sum = (w / norms).sum_dim(0);
    let n = n as f64;
    (sum.square().sum() - n) / (n * n)
}
