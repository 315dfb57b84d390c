//! Spectrum control (Wang et al. 2020, §4): W = U·diag(σ)·Vᵀ (see `model/spectral.rs`) trained
//! with
//!
//! + λ_orth·(‖UᵀU − I‖²_F + ‖VᵀV − I‖²_F) + λ_spec·(‖UᵀU − I‖²_2 + ‖VᵀV − I‖²_2)
//! + λ_prior·Σ_k (σ_(k) − target_k)²,
//!
//! target_k = c1·exp(−c2·k^γ) (exponential) or c1·k^(−γ) (polynomial), σ_(k) the k-th largest.
//! **Choice** (methods.md): c1 = σ_1 at the moment control is switched on; c2 and γ configurable.
//! How σ moves is `SigmaUpdate`: by default a proximal step ([`proximal_sigma_step`]) that takes
//! the prior out of the loss's gradient (and so out of the clipping norm) and applies it exactly;
//! U and V train with AdamW and the orthogonality penalties either way.
//!
//! The spectral norm of the symmetric E = MᵀM − I is |xᵀEx| at its top eigenvector x, found by
//! power iteration on the detached E; the gradient flows through E only (x is a constant: at an
//! eigenvector the derivative of the Rayleigh quotient with respect to x vanishes).

use burn::prelude::*;

use super::{Prior, SpectrumConfig};
use crate::model::SpectralEmbedding;

/// target_k for k = 1..=d.
pub fn prior_targets(config: &SpectrumConfig, c1: f64, d: usize) -> Vec<f32> {
    (1..=d)
        .map(|k| {
            let k = k as f64;
            let t = match config.prior {
                Prior::Exponential => c1 * (-config.c2 * k.powf(config.gamma)).exp(),
                Prior::Polynomial => c1 * k.powf(-config.gamma),
            };
            t as f32
        })
        .collect()
}

/// E = MᵀM − I, the Gram matrix's distance from orthonormal columns.
fn gram_minus_identity(m: Tensor<2>) -> Tensor<2> {
    let [_, k] = m.dims();
    let device = m.device();
    m.clone().transpose().matmul(m) - Tensor::eye(k, &device)
}

/// ‖MᵀM − I‖²_F.
pub fn orthogonality_frobenius(m: Tensor<2>) -> Tensor<1> {
    frobenius_squared(gram_minus_identity(m))
}

/// ‖E‖²_F.
fn frobenius_squared(e: Tensor<2>) -> Tensor<1> {
    e.square().sum()
}

/// ‖MᵀM − I‖²_2 (largest |eigenvalue| of the symmetric MᵀM − I, squared).
pub fn orthogonality_spectral(m: Tensor<2>, iterations: usize) -> Tensor<1> {
    spectral_squared(gram_minus_identity(m), iterations)
}

/// ‖E‖²_2 of a symmetric E by power iteration on its detached copy.
fn spectral_squared(e: Tensor<2>, iterations: usize) -> Tensor<1> {
    let [k, _] = e.dims();
    let device = e.device();
    let fixed = e.clone().detach();
    // Start off every eigenvector's null space: a fixed, non-symmetric pattern.
    let start: Vec<f32> = (0..k)
        .map(|i| 1.0 + (i as f32 * 0.618_034).fract())
        .collect();
    let mut x = Tensor::<2>::from_data(TensorData::new(start, [k, 1]), &device);
    for _ in 0..iterations {
        let y = fixed.clone().matmul(x);
        let norm = y
            .clone()
            .square()
            .sum()
            .sqrt()
            .clamp_min(1e-30)
            .unsqueeze::<2>();
        x = y / norm;
    }
    let rayleigh = x.clone().transpose().matmul(e).matmul(x).reshape([1]);
    rayleigh.square()
}

/// Σ_k (σ_(k) − target_k)², σ sorted descending. The order is a constant of the step, found on
/// the device (no host round trip on the training path).
pub fn prior_penalty(sigma: Tensor<1>, targets: &[f32]) -> Tensor<1> {
    let [d] = sigma.dims();
    let device = sigma.device();
    let (_, order) = crate::model::constant(sigma.clone()).sort_descending_with_indices(0);
    let sorted = sigma.select(0, order);
    let target = Tensor::<1>::from_data(TensorData::new(targets[..d].to_vec(), [d]), &device);
    (sorted - target).square().sum()
}

/// One proximal gradient step of σ for the data term's gradient `grad` and the prior
/// λ·Σ_k (σ_(k) − t_k)²: x = σ − η·grad, then the prior's proximal map
///
/// σ_(k) ← argmin_s (s − x_(k))²/(2η) + λ(s − t_k)² = (x_(k) + 2ηλ·t_k) / (1 + 2ηλ),
///
/// taken by the rank of x (the ranks do not change: the map is increasing in x and t is
/// non-increasing). Stable for every ηλ ≥ 0; it closes the fraction 2ηλ/(1 + 2ηλ) of the distance
/// to the targets per step whatever their scale, where AdamW moved σ by about η.
pub fn proximal_sigma_step(
    sigma: Tensor<1>,
    grad: Option<Tensor<1>>,
    eta: f64,
    lambda: f64,
    targets: &[f32],
) -> Tensor<1> {
    let [d] = sigma.dims();
    let device = sigma.device();
    let x = match grad {
        Some(g) => sigma - g.mul_scalar(eta),
        None => sigma,
    };
    let (sorted, order) = x.sort_descending_with_indices(0);
    let pull = 2.0 * eta * lambda;
    let target = Tensor::<1>::from_data(TensorData::new(targets[..d].to_vec(), [d]), &device);
    let moved = (sorted + target.mul_scalar(pull)).div_scalar(1.0 + pull);
    // Back to σ's own order: `order` is a permutation, its argsort the inverse.
    moved.select(0, order.argsort(0))
}

/// The whole weighted penalty of a spectral embedding.
pub fn spectrum_penalty(
    spectral: &SpectralEmbedding,
    config: &SpectrumConfig,
    targets: &[f32],
) -> Tensor<1> {
    prior_penalty(spectral.sigma.val(), targets).mul_scalar(config.lambda_prior)
        + orthogonality_penalty(spectral, config)
}

/// The weighted orthogonality penalties of U and V alone (the proximal σ step applies the prior
/// itself).
pub fn orthogonality_penalty(spectral: &SpectralEmbedding, config: &SpectrumConfig) -> Tensor<1> {
    const POWER_ITERATIONS: usize = 20;
    let mut total = Tensor::zeros([1], &spectral.sigma.val().device());
    if config.lambda_orth <= 0.0 && config.lambda_spec <= 0.0 {
        return total;
    }
    // UᵀU − I once for both norms: U is `[N, d]`, so its Gram matrix and that product's backward
    // are the penalty's large products (taken twice before, 2–3 ms of a `tiny` step).
    let (e_u, e_v) = (
        gram_minus_identity(spectral.u.val()),
        gram_minus_identity(spectral.v.val()),
    );
    if config.lambda_orth > 0.0 {
        total = total
            + (frobenius_squared(e_u.clone()) + frobenius_squared(e_v.clone()))
                .mul_scalar(config.lambda_orth);
    }
    if config.lambda_spec > 0.0 {
        total = total
            + (spectral_squared(e_u, POWER_ITERATIONS) + spectral_squared(e_v, POWER_ITERATIONS))
                .mul_scalar(config.lambda_spec);
    }
    total
}
