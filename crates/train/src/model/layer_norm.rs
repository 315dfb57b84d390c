//! Layer normalisation over the last dimension, as one graph node on LibTorch:
//!
//!   y = (x − μ)·r·γ + β,   μ = mean(x),   r = 1/√(var(x) + ε)   (biased variance, ε = 1e-5)
//!
//! backward (x̂ = (x − μ)·r, g = ∂L/∂y, n the last dimension, means over it):
//!
//!   ∂L/∂γ = Σ g·x̂,   ∂L/∂β = Σ g,   ∂L/∂x = r · (gγ − mean(gγ) − x̂ · mean(gγ·x̂))
//!
//! burn's `LayerNorm` composes it from a mean, a variance, a subtraction, a square root, a
//! division and the affine map, each a node of burn's graph with its own backward kernels.
//! On LibTorch (CPU and CUDA) it is here torch's fused `native_layer_norm` forward and
//! `native_layer_norm_backward` through our ATen extension: two operators a norm instead of
//! about twenty. Elsewhere (burn-flex), and for a norm without β, burn's `LayerNorm`.

use burn::nn::LayerNorm;
use burn::prelude::*;

/// burn's `LayerNormConfig` default ε, the one every norm of conelab's models is built with
/// (burn keeps the field private; the tests compare the two computations, so a change shows).
pub const EPSILON: f64 = 1e-5;

/// `ln` applied to `x`: one fused node on LibTorch, burn's composition elsewhere.
pub fn layer_norm<const D: usize>(ln: &LayerNorm, x: Tensor<D>) -> Tensor<D> {
    #[cfg(feature = "tch")]
    if let Some(y) = libtorch::fused(ln, &x) {
        return y;
    }
    ln.forward(x)
}

/// burn marks its LibTorch backend deprecated (in favour of CubeCL); it is conelab's LibTorch
/// path all the same.
#[cfg(feature = "tch")]
#[allow(deprecated)]
mod libtorch {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::{Autodiff, LibTorch, libtorch::TchTensor};
    use burn::nn::LayerNorm;
    use burn::prelude::*;

    use super::EPSILON;
    use crate::aten::{self, AtenError};

    type Ad = Autodiff<LibTorch>;

    /// What the backward reads: the forward's input, statistics and affine parameters.
    #[derive(Clone, Debug)]
    struct Saved {
        x: TchTensor,
        mean: TchTensor,
        rstd: TchTensor,
        gamma: TchTensor,
        beta: TchTensor,
    }

    #[derive(Debug)]
    struct LayerNormBackward;

    impl Backward<LibTorch, 3> for LayerNormBackward {
        type State = Saved;

        fn backward(self, ops: Ops<Saved, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
            let grad_out: TchTensor = grads.consume::<LibTorch>(&ops.node);
            let s = ops.state;
            let want = ops.parents.each_ref().map(Option::is_some);
            let computed = aten::layer_norm_backward(
                &grad_out.tensor,
                &s.x.tensor,
                &s.mean.tensor,
                &s.rstd.tensor,
                &s.gamma.tensor,
                &s.beta.tensor,
                want,
            );
            // The forward ran the same checks on the same tensors: a failure here is libtorch
            // failing (out of memory), which burn's own backward ops panic on as well.
            let computed = match computed {
                Ok(g) => g,
                Err(e) => panic!("{e}"),
            };
            for (parent, grad) in ops.parents.into_iter().zip(computed) {
                if let (Some(node), Some(grad)) = (parent, grad) {
                    grads.register::<LibTorch>(node.id, TchTensor::new(grad));
                }
            }
        }
    }

    /// The fused norm where `x`, γ and β are LibTorch tensors (tracked by burn's autodiff or
    /// plain); `None` elsewhere or without β, and where libtorch refuses (burn's composition
    /// then says what is wrong, if anything is).
    pub(super) fn fused<const D: usize>(ln: &LayerNorm, x: &Tensor<D>) -> Option<Tensor<D>> {
        let beta = ln.beta.as_ref()?.val();
        let gamma = ln.gamma.val();
        if x.device().is_autodiff() {
            let (x, gamma, beta) = (
                x.clone().try_into_primitive::<Ad>().ok()?,
                gamma.try_into_primitive::<Ad>().ok()?,
                beta.try_into_primitive::<Ad>().ok()?,
            );
            let f = AtenError::or_composed(aten::layer_norm(
                &x.primitive().tensor,
                &gamma.primitive().tensor,
                &beta.primitive().tensor,
                EPSILON,
            ))?;
            let out = TchTensor::new(f.out);
            let node = match LayerNormBackward
                .prepare::<NoCheckpointing>([x.node(), gamma.node(), beta.node()])
                .compute_bound()
                .stateful()
            {
                OpsKind::Tracked(prep) => prep.finish(
                    Saved {
                        x: x.primitive().clone(),
                        mean: TchTensor::new(f.mean),
                        rstd: TchTensor::new(f.rstd),
                        gamma: gamma.primitive().clone(),
                        beta: beta.primitive().clone(),
                    },
                    out,
                ),
                OpsKind::UnTracked(prep) => prep.finish(out),
            };
            return Some(Tensor::from_primitive::<Ad>(node));
        }
        let (x, gamma, beta) = (
            x.clone().try_into_primitive::<LibTorch>().ok()?,
            gamma.try_into_primitive::<LibTorch>().ok()?,
            beta.try_into_primitive::<LibTorch>().ok()?,
        );
        let f = AtenError::or_composed(aten::layer_norm(
            &x.tensor,
            &gamma.tensor,
            &beta.tensor,
            EPSILON,
        ))?;
        Some(Tensor::from_primitive::<LibTorch>(TchTensor::new(f.out)))
    }
}

#[cfg(all(test, feature = "tch", not(feature = "tch-doc-only")))]
mod tests {
    use burn::module::Param;
    use burn::nn::LayerNormConfig;
    use burn::prelude::*;

    use super::*;
    use crate::model::DeviceSpecExt;
    use conelab_core::model::DeviceSpec;

    /// Deterministic values of mixed sign and scale.
    fn wave(n: usize, salt: f32) -> Vec<f32> {
        (0..n)
            .map(|i| (i as f32 * 0.61 + salt).sin() * (0.5 + (i % 3) as f32))
            .collect()
    }

    fn norm(d: usize, device: &Device) -> LayerNorm {
        let mut ln = LayerNormConfig::new(d).init(device);
        ln.gamma = Param::from_tensor(Tensor::from_data(
            TensorData::new(wave(d, 1.0), [d]),
            device,
        ));
        ln.beta = Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(wave(d, 2.0), [d]),
            device,
        )));
        ln
    }

    fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        t.try_into_vec_as::<f32>().expect("values")
    }

    /// L = Σ y·w for fixed weights w: its gradients test every part of the backward.
    fn loss(y: Tensor<3>, device: &Device) -> Tensor<1> {
        let n = y.shape().num_elements();
        let w = Tensor::<3>::from_data(TensorData::new(wave(n, 3.0), y.shape()), device);
        (y * w).sum()
    }

    /// The fused node against burn's composed `LayerNorm` (a second implementation): output
    /// and the gradients of x, γ and β within 1e-5.
    #[test]
    fn the_fused_norm_and_its_gradients_match_burns_composition() {
        let device = DeviceSpec::LibtorchCpu.training_device().expect("device");
        let (b, t, d) = (2, 3, 16);
        let ln = norm(d, &device);
        let x0 = Tensor::<3>::from_data(TensorData::new(wave(b * t * d, 0.0), [b, t, d]), &device);
        let run = |fused: bool| {
            let x = x0.clone().detach().require_grad();
            let _turn = crate::aten::tests::turn();
            let ((y, grads), ops) = crate::aten::count_ops(|| {
                let y = if fused {
                    layer_norm(&ln, x.clone())
                } else {
                    ln.forward(x.clone())
                };
                let grads = loss(y.clone(), &device).backward();
                (y, grads)
            })
            .expect("counted");
            // The path taken: torch's two fused kernels, or none of them.
            let n = usize::from(fused) as u64;
            for op in [
                "aten::native_layer_norm",
                "aten::native_layer_norm_backward",
            ] {
                assert_eq!(
                    ops.get(op).copied().unwrap_or(0),
                    n,
                    "{op} (fused: {fused})"
                );
            }
            let out = values(y);
            let gx = values(x.grad(&grads).expect("x's gradient"));
            let gg = values(ln.gamma.val().grad(&grads).expect("γ's gradient"));
            let beta = ln.beta.as_ref().expect("β").val();
            let gb = values(beta.grad(&grads).expect("β's gradient"));
            (out, gx, gg, gb)
        };
        let (fused, composed) = (run(true), run(false));
        for (name, a, b) in [
            ("output", &fused.0, &composed.0),
            ("∂x", &fused.1, &composed.1),
            ("∂γ", &fused.2, &composed.2),
            ("∂β", &fused.3, &composed.3),
        ] {
            assert_eq!(a.len(), b.len(), "{name}");
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                    "{name}: {x} against {y}"
                );
            }
        }
        // Not a zero test: the gradients are there and differ from element to element.
        assert!(
            fused.1.iter().any(|g| g.abs() > 1e-3),
            "∂x: {:?}",
            &fused.1[..4]
        );
    }

    /// The gradient of x against central differences of the loss, computed in f64 from the
    /// formula of the module documentation (an independent forward).
    #[test]
    fn the_gradient_of_x_matches_finite_differences() {
        let device = DeviceSpec::LibtorchCpu.training_device().expect("device");
        let d = 8;
        let ln = norm(d, &device);
        let xs = wave(2 * d, 0.5);
        let (gamma, beta, w) = (wave(d, 1.0), wave(d, 2.0), wave(2 * d, 3.0));
        let reference_loss = |x: &[f64]| -> f64 {
            x.chunks(d)
                .enumerate()
                .map(|(row, r)| {
                    let mean = r.iter().sum::<f64>() / d as f64;
                    let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
                    let rstd = 1.0 / (var + EPSILON).sqrt();
                    r.iter()
                        .enumerate()
                        .map(|(i, v)| {
                            let y = (v - mean) * rstd * gamma[i] as f64 + beta[i] as f64;
                            y * w[row * d + i] as f64
                        })
                        .sum::<f64>()
                })
                .sum()
        };
        let x =
            Tensor::<3>::from_data(TensorData::new(xs.clone(), [1, 2, d]), &device).require_grad();
        let grads = loss(layer_norm(&ln, x.clone()), &device).backward();
        let got = values(x.grad(&grads).expect("x's gradient"));
        let h = 1e-4;
        for i in 0..2 * d {
            let mut up: Vec<f64> = xs.iter().map(|&v| v as f64).collect();
            let mut down = up.clone();
            up[i] += h;
            down[i] -= h;
            let want = (reference_loss(&up) - reference_loss(&down)) / (2.0 * h);
            assert!(
                (got[i] as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "∂x{i}: {} against {want}",
                got[i]
            );
        }
    }

    /// Without autodiff (evaluation) the norm is the same forward, through the same kernel.
    #[test]
    fn the_plain_forward_matches_burns() {
        let device = DeviceSpec::LibtorchCpu.device().expect("device");
        let ln = norm(12, &device);
        let x = Tensor::<2>::from_data(TensorData::new(wave(36, 0.2), [3, 12]), &device);
        let (a, b) = (values(layer_norm(&ln, x.clone())), values(ln.forward(x)));
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{x} against {y}");
        }
    }
}
