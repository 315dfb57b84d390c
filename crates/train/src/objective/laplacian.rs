//! LapReg (Zhang et al. 2020, §3.2): a graph over the P = B·T target positions of the batch with
//! edge weights s_pq = cos(h_p, h_q) of the **detached** hidden states, pulling together the
//! output embeddings a_p = w_{y_p} of positions with similar contexts:
//!
//! λ/N²·Σ_{p,q} s_pq‖a_p − a_q‖² = λ/N²·2·tr(Aᵀ L A),  L = diag(S·1) − S,
//!
//! computed as 2·(Σ_p deg_p‖a_p‖² − Σ_p a_p·(S A)_p): memory O(P² + P·d), nothing larger.

use burn::prelude::*;

/// The unweighted penalty (multiply by λ): `hidden` `[P, d]` (detached here), `a` = rows of W at
/// the targets `[P, d]`, `vocab` = N.
pub fn laplacian_penalty(hidden: Tensor<2>, a: Tensor<2>, vocab: usize) -> Tensor<1> {
    let h = hidden.detach();
    let unit = h.clone() / h.square().sum_dim(1).sqrt().clamp_min(1e-12);
    let s = unit.clone().matmul(unit.transpose());
    let degree = s.clone().sum_dim(1);
    let own = (degree * a.clone().square().sum_dim(1)).sum();
    let cross = (a.clone() * s.matmul(a)).sum();
    let n = vocab as f64;
    (own - cross).mul_scalar(2.0 / (n * n))
}
