//! The MLE head's terms and their gradient in closed form with tensor ops, for devices whose
//! memory the host does not read in place (LibTorch CPU, CUDA): the counterpart of
//! `host_softmax` without the host pass.
//!
//! For each position p with logits z_p ∈ ℝᴺ and target y_p, m_p = max_v z_pv, e_p = exp(z_p − m_p),
//! s_p = Σ_v e_pv:
//!
//!   log Z_p = m_p + ln s_p,   ℓ_p = log Z_p − z_{p,y_p},   NLL = 1/P Σ_p ℓ_p,
//!   DEV     = α·1/P Σ_p (log Z_p)²,
//!   G_p     = ∂(NLL + DEV)/∂z_p = [e_p · (1 + 2α·log Z_p) / s_p − onehot(y_p)] / P.
//!
//! Why: burn's autodiff graph of the same terms (log Z, the log-probabilities, the gather, and
//! their backward with the exponentials recomputed) is about a dozen passes over the `[P, N]`
//! logits, each into a fresh buffer; on LibTorch CPU each fresh 40 MB buffer (`tiny`, N = 10,000)
//! is also page-faulted in, and that graph was three quarters of a `tiny` step (250 of 330 ms).
//! Here: the gather and the maximum read z, then the shift, the exponential, the row sum, the
//! scale and the one-hot correction; the shift, the exponential and the scale in place where the
//! backend reuses a buffer nobody else holds (burn-tch's scatter-add makes one fresh copy).
//!
//! Unlikelihood stays on burn's graph (its candidates' correction is not written out here).

use burn::prelude::*;
use burn::tensor::IndexingUpdateOp;

/// The values and G of the head's terms.
pub struct DeviceHead {
    /// Mean token NLL, `[1]`.
    pub nll: Tensor<1>,
    /// DEV's α·mean (log Z)², `[1]`, when α > 0.
    pub dev: Option<Tensor<1>>,
    /// ∂(NLL + DEV)/∂z, `[P, N]`.
    pub g: Tensor<2>,
}

/// NLL, DEV (weight `dev`, 0 = off) and G from the logits `[P, N]` (not tracked) and the
/// targets `[P]`.
pub fn device_head(logits: Tensor<2>, targets: Tensor<1, Int>, dev: f64) -> DeviceHead {
    #[cfg(feature = "tch")]
    if let Some(head) = libtorch_head(&logits, &targets, dev) {
        return head;
    }
    let [p, _] = logits.dims();
    let device = logits.device();
    let y = targets.reshape([p, 1]);
    let target_logit = logits.clone().gather(1, y.clone());
    let max = logits.clone().max_dim(1);
    // `logits` is dropped here, so the shift and the exponential may reuse its buffer.
    let e = (logits - max.clone()).exp();
    let sums = e.clone().sum_dim(1);
    let log_z = max + sums.clone().log();
    let nll = (log_z.clone() - target_logit).mean();
    let positions = p as f32;
    let (row_scale, dev_value) = if dev > 0.0 {
        let value = log_z.clone().square().mean().mul_scalar(dev);
        let scale = log_z.mul_scalar(2.0 * dev).add_scalar(1.0) / sums.mul_scalar(positions);
        (scale, Some(value))
    } else {
        (sums.mul_scalar(positions).recip(), None)
    };
    let g = (e * row_scale).scatter(
        1,
        y,
        Tensor::full([p, 1], -1.0 / positions, &device),
        IndexingUpdateOp::Add,
    );
    DeviceHead {
        nll,
        dev: dev_value,
        g,
    }
}

/// On LibTorch, the same terms and G in one call of our extension (`aten::softmax_head`: a
/// fused log-softmax, G written in place over it, four passes over the logits); `None` where the
/// tensors are not LibTorch's or libtorch refused (the composed form then runs, and says why
/// once).
#[cfg(feature = "tch")]
#[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
fn libtorch_head(logits: &Tensor<2>, targets: &Tensor<1, Int>, dev: f64) -> Option<DeviceHead> {
    use burn::backend::{Autodiff, AutodiffBackend, LibTorch, libtorch::TchTensor};
    let autodiff = logits.is_autodiff();
    let z = if autodiff {
        logits.clone().inner()
    } else {
        logits.clone()
    }
    .try_into_primitive::<LibTorch>()
    .ok()?;
    let y = if targets.is_autodiff() {
        targets.clone().inner()
    } else {
        targets.clone()
    }
    .try_into_primitive::<LibTorch>()
    .ok()?;
    let (nll, dev_value, g) =
        crate::aten::AtenError::or_composed(crate::aten::softmax_head(&z.tensor, &y.tensor, dev))?;
    let back = |t: tch::Tensor| -> Tensor<1> {
        let t = TchTensor::new(t.reshape([-1]));
        if autodiff {
            Tensor::from_primitive::<Autodiff<LibTorch>>(Autodiff::<LibTorch>::from_inner(t))
        } else {
            Tensor::from_primitive::<LibTorch>(t)
        }
    };
    let g = TchTensor::new(g);
    let g = if autodiff {
        Tensor::<2>::from_primitive::<Autodiff<LibTorch>>(Autodiff::<LibTorch>::from_inner(g))
    } else {
        Tensor::<2>::from_primitive::<LibTorch>(g)
    };
    Some(DeviceHead {
        nll: back(nll),
        dev: dev_value.map(back),
        g,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeviceSpec;
    use crate::model::DeviceSpecExt;

    /// Logits with rows of very different scales (one far from 0, one nearly flat), so the max
    /// shift matters, and targets that repeat across rows.
    fn case() -> (Vec<f32>, Vec<i64>, usize, usize) {
        let (p, n) = (4, 7);
        let z: Vec<f32> = (0..p * n)
            .map(|i| {
                let (row, col) = (i / n, i % n);
                let base = ((i * 13) % 17) as f32 / 4.0 - 2.0;
                match row {
                    // exp(100) overflows f32: without the shift this row is NaN.
                    1 => base + 100.0,
                    2 => base * 1e-3,
                    _ => base * (col as f32 + 1.0) / 3.0,
                }
            })
            .collect();
        (z, vec![3, 0, 3, 6], p, n)
    }

    /// The terms and G written out in f64 from the formulas (module documentation).
    fn reference(z: &[f32], y: &[i64], p: usize, n: usize, dev: f64) -> (f64, f64, Vec<f64>) {
        let (mut nll, mut dev_sum, mut g) = (0.0, 0.0, vec![0.0; p * n]);
        for row in 0..p {
            let zr: Vec<f64> = z[row * n..(row + 1) * n]
                .iter()
                .map(|&v| v as f64)
                .collect();
            let m = zr.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = zr.iter().map(|v| (v - m).exp()).sum();
            let log_z = m + s.ln();
            nll += log_z - zr[y[row] as usize];
            dev_sum += log_z * log_z;
            for col in 0..n {
                let softmax = (zr[col] - log_z).exp();
                let onehot = if col as i64 == y[row] { 1.0 } else { 0.0 };
                g[row * n + col] = (softmax * (1.0 + 2.0 * dev * log_z) - onehot) / p as f64;
            }
        }
        (nll / p as f64, dev * dev_sum / p as f64, g)
    }

    fn scalar(t: Tensor<1>) -> f64 {
        t.try_into_vec_as::<f64>().expect("read")[0]
    }

    /// burn-flex's composed form, and LibTorch's fused call in a `tch` build.
    fn devices() -> Vec<DeviceSpec> {
        #[allow(unused_mut)]
        let mut specs = vec![DeviceSpec::Cpu];
        #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
        specs.push(DeviceSpec::LibtorchCpu);
        specs
    }

    #[test]
    fn the_terms_and_g_match_the_formulas_in_f64() {
        for spec in devices() {
            the_terms_and_g_match_the_formulas_on(spec);
        }
    }

    /// On LibTorch the head is the extension's one call: a fused log-softmax, not the composed
    /// form's max, exp and sums (which would give the same values, slower).
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    #[test]
    fn libtorch_takes_the_fused_head() {
        let device = DeviceSpec::LibtorchCpu.training_device().expect("libtorch");
        let (z, y, p, n) = case();
        let logits = Tensor::<2>::from_data(TensorData::new(z, [p, n]), &device);
        let targets = Tensor::<1, Int>::from_data(TensorData::new(y, [p]), &device);
        let (_, ops) =
            crate::aten::count_ops(|| device_head(logits, targets, 0.1)).expect("counted");
        assert!(ops.contains_key("aten::_log_softmax"), "{ops:?}");
        for composed in ["aten::max", "aten::amax", "aten::sum", "aten::log"] {
            assert!(
                !ops.contains_key(composed),
                "the composed form ran: {ops:?}"
            );
        }
    }

    fn the_terms_and_g_match_the_formulas_on(spec: DeviceSpec) {
        let device = spec.device().expect("device");
        let (z, y, p, n) = case();
        for dev in [0.0, 0.3] {
            let logits = Tensor::<2>::from_data(TensorData::new(z.clone(), [p, n]), &device);
            let targets = Tensor::<1, Int>::from_data(TensorData::new(y.clone(), [p]), &device);
            let out = device_head(logits, targets, dev);
            let (nll, dev_value, g) = reference(&z, &y, p, n, dev);
            assert!((scalar(out.nll) - nll).abs() < 1e-5 * nll.abs().max(1.0));
            match out.dev {
                Some(v) => assert!(dev > 0.0 && (scalar(v) - dev_value).abs() < 1e-4 * dev_value),
                None => assert_eq!(dev, 0.0, "DEV's value is given when it is on"),
            }
            let got = out.g.try_into_vec_as::<f32>().expect("read");
            for (i, (a, b)) in got.iter().zip(&g).enumerate() {
                assert!(
                    (*a as f64 - b).abs() < 1e-6 * b.abs().max(1.0),
                    "G[{i}] = {a}, want {b} (α {dev})"
                );
            }
        }
    }

    /// A second algorithm: burn's autodiff of NLL + α·mean (log Z)² on the same logits (the
    /// logits an autodiff tensor, as the trainer hands them over).
    #[test]
    fn g_is_the_autodiff_gradient_of_the_terms() {
        for spec in devices() {
            g_is_the_autodiff_gradient_of_the_terms_on(spec);
        }
    }

    fn g_is_the_autodiff_gradient_of_the_terms_on(spec: DeviceSpec) {
        let device = spec.training_device().expect("device with autodiff");
        let (z, y, p, n) = case();
        let dev = 0.25;
        let logits = Tensor::<2>::from_data(TensorData::new(z, [p, n]), &device);
        let targets = Tensor::<1, Int>::from_data(TensorData::new(y, [p]), &device);
        let out = device_head(logits.clone(), targets.clone(), dev);
        let leaf = logits.require_grad();
        let log_probs = burn::tensor::activation::log_softmax(leaf.clone(), 1);
        let nll = log_probs
            .clone()
            .gather(1, targets.reshape([p, 1]))
            .mean()
            .neg();
        let log_z = (leaf.clone() - log_probs).slice([0..p, 0..1]).reshape([p]);
        let loss = nll + log_z.square().mean().mul_scalar(dev);
        let grads = loss.backward();
        let want = leaf.grad(&grads).expect("a gradient");
        let want = want.try_into_vec_as::<f32>().expect("read");
        let got = out.g.try_into_vec_as::<f32>().expect("read");
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() < 1e-6 * b.abs().max(1.0),
                "G[{i}] = {a}, autodiff {b}"
            );
        }
    }
}
