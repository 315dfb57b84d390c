//! Causal self-attention over heads, q, k, v `[B, heads, T, d]`:
//!
//!   out = dropout(softmax(q·kᵀ/√d + M))·v,   M_ij = 0 for j ≤ i, −∞ for j > i
//!
//! burn composes it from a product, a scale, a mask fill, a softmax, a dropout and a product,
//! each a node of burn's graph with its own backward kernels. On LibTorch it is here one node:
//! torch's `scaled_dot_product_attention` (flash or memory-efficient kernels on CUDA, with the
//! dropout drawn inside from libtorch's generator, which the engine seeds every step) under
//! torch's own autograd (`csrc/island.cpp`). Where this step's dropout masks are drawn on the
//! host (burn-flex and LibTorch CPU, so that the two train alike), and on burn-flex, the
//! composition.

use burn::nn::Dropout;
use burn::prelude::*;
use burn::tensor::activation::softmax;

/// Causal attention of `q`, `k`, `v` with `dropout` on the weights; `causal_mask` is true above
/// the diagonal (the composition fills those scores with −∞).
pub fn causal_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    dropout: &Dropout,
    causal_mask: Tensor<4, Bool>,
) -> Tensor<4> {
    #[cfg(feature = "tch")]
    if let Some(out) = libtorch::fused(&q, &k, &v, dropout) {
        return out;
    }
    composed(q, k, v, dropout, causal_mask)
}

/// The same in burn's ops.
pub fn composed(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    dropout: &Dropout,
    causal_mask: Tensor<4, Bool>,
) -> Tensor<4> {
    let dh = q.dims()[3];
    let matmul = super::precision::matmul;
    let scores = matmul(q, k.transpose())
        .mul_scalar(1.0 / (dh as f64).sqrt())
        .mask_fill(causal_mask, f32::NEG_INFINITY);
    matmul(super::dropout::forward(dropout, softmax(scores, 3)), v)
}

#[cfg(feature = "tch")]
#[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
mod libtorch {
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::autodiff::ops::{Backward, OpsKind};
    use burn::backend::{Autodiff, LibTorch, libtorch::TchTensor};
    use burn::nn::Dropout;
    use burn::prelude::*;

    use crate::aten::{self, AtenError};
    use crate::model::torch_backward::{Saved, TorchBackward};

    type Ad = Autodiff<LibTorch>;

    /// The fused node where q, k, v are LibTorch tensors and the device draws the dropout
    /// masks (or nothing drops); `None` elsewhere, or where libtorch refuses (the composition
    /// then runs, and says what is wrong if anything is).
    pub(super) fn fused(
        q: &Tensor<4>,
        k: &Tensor<4>,
        v: &Tensor<4>,
        dropout: &Dropout,
    ) -> Option<Tensor<4>> {
        let device = q.device();
        let p = crate::model::dropout::device_drop_probability(dropout, &device)?;
        if !device.is_autodiff() {
            let lt = |t: &Tensor<4>| t.clone().try_into_primitive::<LibTorch>().ok();
            let (q, k, v) = (lt(q)?, lt(k)?, lt(v)?);
            let (out, _) = AtenError::or_composed(aten::causal_attention(
                &q.tensor,
                &k.tensor,
                &v.tensor,
                0.0,
                false,
                crate::model::precision::lower(),
            ))?;
            return Some(Tensor::from_primitive::<LibTorch>(TchTensor::new(out)));
        }
        let ad = |t: &Tensor<4>| t.clone().try_into_primitive::<Ad>().ok();
        let inputs = [ad(q)?, ad(k)?, ad(v)?];
        let run = |track: bool| {
            let [q, k, v] = inputs.each_ref().map(|t| &t.primitive().tensor);
            let lower = crate::model::precision::lower();
            AtenError::or_composed(aten::causal_attention(q, k, v, p, track, lower))
        };
        let nodes = inputs.each_ref().map(|t| t.node());
        let out = match TorchBackward::<3>
            .prepare::<NoCheckpointing>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (out, island) = run(true)?;
                let out = TchTensor::new(out);
                let held = inputs.iter().map(|t| t.primitive().clone()).collect();
                let saved = Saved::new(island?, held, &out);
                prep.finish(saved, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(TchTensor::new(run(false)?.0)),
        };
        Some(Tensor::from_primitive::<Ad>(out))
    }
}

#[cfg(all(test, feature = "tch", not(feature = "tch-doc-only")))]
mod tests {
    use burn::nn::DropoutConfig;
    use burn::prelude::*;

    use super::*;
    use crate::model::DeviceSpecExt;
    use conelab_core::model::DeviceSpec;

    fn wave(n: usize, salt: f32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32) * 0.29 + salt).sin() * 1.3)
            .collect()
    }

    fn causal(t: usize, device: &Device) -> Tensor<4, Bool> {
        Tensor::<2, Bool>::tril_mask([t, t], 0, device).unsqueeze::<4>()
    }

    /// Dropout off: the fused node against burn's composition (a second implementation), output
    /// and the gradients of q, k and v within 1e-5; and which path ran.
    #[test]
    fn the_fused_attention_and_its_gradients_match_the_composition() {
        let device = DeviceSpec::LibtorchCpu.training_device().expect("libtorch");
        let shape = [2, 3, 5, 4];
        let n: usize = shape.iter().product();
        let dropout = DropoutConfig::new(0.0).init();
        let make =
            |salt: f32| Tensor::<4>::from_data(TensorData::new(wave(n, salt), shape), &device);
        let weights = make(9.0);
        let run = |fused: bool| {
            let (q, k, v) = (
                make(0.0).require_grad(),
                make(1.0).require_grad(),
                make(2.0).require_grad(),
            );
            let _turn = crate::aten::tests::turn();
            let ((out, grads), ops) = crate::aten::count_ops(|| {
                let out = if fused {
                    causal_attention(
                        q.clone(),
                        k.clone(),
                        v.clone(),
                        &dropout,
                        causal(5, &device),
                    )
                } else {
                    composed(
                        q.clone(),
                        k.clone(),
                        v.clone(),
                        &dropout,
                        causal(5, &device),
                    )
                };
                let grads = (out.clone() * weights.clone()).sum().backward();
                (out, grads)
            })
            .expect("counted");
            assert_eq!(
                ops.get("aten::scaled_dot_product_attention")
                    .copied()
                    .unwrap_or(0),
                u64::from(fused),
                "the path taken (fused: {fused})"
            );
            let mut all = out.try_into_vec_as::<f32>().expect("out");
            for t in [&q, &k, &v] {
                all.extend(
                    t.grad(&grads)
                        .expect("grad")
                        .try_into_vec_as::<f32>()
                        .expect("grad"),
                );
            }
            all
        };
        let (fused, composed) = (run(true), run(false));
        assert_eq!(fused.len(), 4 * n);
        let worst = fused
            .iter()
            .zip(&composed)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-5, "max difference {worst}");
        assert!(
            fused[n..].iter().any(|g| g.abs() > 1e-3),
            "the gradients are not all zero"
        );
    }

    /// Dropout on, drawn inside the fused kernel: statistically right. With q = k = 0 every
    /// query attends uniformly to the i + 1 keys it may see, and with v the identity over the
    /// keys the output row i is its attention weights: each of the n causal weights is
    /// dropped with probability p (the share's standard deviation √(p(1 − p)/n); bound five of
    /// them) and kept as 1/((i + 1)(1 − p)), so that its expectation is the undropped weight;
    /// the positions above the diagonal stay zero.
    #[test]
    fn the_fused_attention_drops_at_its_rate_and_keeps_the_expectation() {
        let device = DeviceSpec::LibtorchCpu.training_device().expect("libtorch");
        let (b, h, t, p) = (16usize, 4usize, 32usize, 0.3f64);
        let dropout = DropoutConfig::new(p).init();
        let zeros = Tensor::<4>::zeros([b, h, t, t], &device);
        let eye = Tensor::<2>::eye(t, &device)
            .unsqueeze::<4>()
            .repeat_dim(0, b)
            .repeat_dim(1, h);
        let out = causal_attention(zeros.clone(), zeros, eye, &dropout, causal(t, &device))
            .try_into_vec_as::<f32>()
            .expect("out");
        let (mut causal_entries, mut dropped) = (0usize, 0usize);
        for (idx, &w) in out.iter().enumerate() {
            let (i, j) = ((idx / t) % t, idx % t);
            if j > i {
                assert_eq!(w, 0.0, "a future key got weight");
                continue;
            }
            causal_entries += 1;
            if w == 0.0 {
                dropped += 1;
            } else {
                let kept = 1.0 / ((i + 1) as f64 * (1.0 - p));
                assert!(
                    (w as f64 - kept).abs() <= 1e-5 * kept,
                    "({i}, {j}): {w} against {kept}"
                );
            }
        }
        let share = dropped as f64 / causal_entries as f64;
        let sd = (p * (1.0 - p) / causal_entries as f64).sqrt();
        assert!(
            (share - p).abs() < 5.0 * sd,
            "dropped {share} of {causal_entries}"
        );
    }
}
