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
//! Unlikelihood is written out only in the LibTorch call ([`libtorch_head`], `csrc/head.cpp`: its
//! candidates' columns need an overwriting scatter); elsewhere it stays on burn's graph
//! (`head.rs`).

use burn::prelude::*;
use burn::tensor::IndexingUpdateOp;

/// The values and G of the head's terms.
pub struct DeviceHead {
    /// Mean token NLL, `[1]`.
    pub nll: Tensor<1>,
    /// DEV's α·mean (log Z)², `[1]`, when α > 0.
    pub dev: Option<Tensor<1>>,
    /// Unlikelihood's β/P Σ_p Σ_c −ln(1 − p_pc), `[1]`, when it is on (LibTorch only).
    pub ul: Option<Tensor<1>>,
    /// ∂(NLL + DEV + UL)/∂z, `[P, N]`.
    pub g: Tensor<2>,
}

/// Unlikelihood's weight β and its candidates `(indices [P, T], mask [P, T])`, as
/// [`super::head::HeadTerms`] holds them.
pub type Unlikelihood<'a> = (f64, &'a Tensor<2, Int>, &'a Tensor<2>);

/// NLL, DEV (weight `dev`, 0 = off) and G from the logits `[P, N]` (not tracked) and the
/// targets `[P]`.
pub fn device_head(logits: Tensor<2>, targets: Tensor<1, Int>, dev: f64) -> DeviceHead {
    #[cfg(feature = "tch")]
    if let Some(head) = libtorch_head(&logits, &targets, dev, None) {
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
        ul: None,
        g,
    }
}

/// On LibTorch, the same terms (and unlikelihood's, where given) and G in one call of our
/// extension (`aten::softmax_head`: a fused log-softmax, G written in place over it, four passes
/// over the logits); `None` where the tensors are not LibTorch's or libtorch refused (the
/// composed form then runs, and says why once).
#[cfg(feature = "tch")]
#[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
pub fn libtorch_head(
    logits: &Tensor<2>,
    targets: &Tensor<1, Int>,
    dev: f64,
    unlikelihood: Option<Unlikelihood<'_>>,
) -> Option<DeviceHead> {
    use burn::backend::{Autodiff, AutodiffBackend, LibTorch, libtorch::TchTensor};
    let autodiff = logits.is_autodiff();
    // `inner` leaves a tensor without autodiff as it is.
    let z = logits
        .clone()
        .inner()
        .try_into_primitive::<LibTorch>()
        .ok()?;
    let y = targets
        .clone()
        .inner()
        .try_into_primitive::<LibTorch>()
        .ok()?;
    let candidates = match unlikelihood {
        Some((beta, idx, mask)) => Some((
            beta,
            idx.clone().inner().try_into_primitive::<LibTorch>().ok()?,
            mask.clone().inner().try_into_primitive::<LibTorch>().ok()?,
        )),
        None => None,
    };
    let head = crate::aten::AtenError::or_composed(crate::aten::softmax_head(
        &z.tensor,
        &y.tensor,
        dev,
        candidates
            .as_ref()
            .map(|(beta, idx, mask)| crate::aten::HeadUnlikelihood {
                beta: *beta,
                idx: &idx.tensor,
                mask: &mask.tensor,
            }),
    ))?;
    let back = |t: tch::Tensor| -> Tensor<1> {
        let t = TchTensor::new(t.reshape([-1]));
        if autodiff {
            Tensor::from_primitive::<Autodiff<LibTorch>>(Autodiff::<LibTorch>::from_inner(t))
        } else {
            Tensor::from_primitive::<LibTorch>(t)
        }
    };
    let g = TchTensor::new(head.g);
    let g = if autodiff {
        Tensor::<2>::from_primitive::<Autodiff<LibTorch>>(Autodiff::<LibTorch>::from_inner(g))
    } else {
        Tensor::<2>::from_primitive::<LibTorch>(g)
    };
    Some(DeviceHead {
        nll: back(head.nll),
        dev: head.dev.map(back),
        ul: head.ul.map(back),
        g,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeviceSpecExt;
    use conelab_core::model::DeviceSpec;

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

    /// Row `row` of the `[P, n]` logits in f64, and its log Z = m + ln Σ exp(z − m).
    fn row_log_z(z: &[f32], row: usize, n: usize) -> (Vec<f64>, f64) {
        let zr: Vec<f64> = z[row * n..(row + 1) * n]
            .iter()
            .map(|&v| v as f64)
            .collect();
        let m = zr.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let log_z = m + zr.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        (zr, log_z)
    }

    /// The terms and G written out in f64 from the formulas (module documentation).
    fn reference(z: &[f32], y: &[i64], p: usize, n: usize, dev: f64) -> (f64, f64, Vec<f64>) {
        let (mut nll, mut dev_sum, mut g) = (0.0, 0.0, vec![0.0; p * n]);
        for row in 0..p {
            let (zr, log_z) = row_log_z(z, row, n);
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

    /// Unlikelihood's candidates for [`case`]: row 0 {1, 5}, row 1 {2}, row 2 none, row 3
    /// {0, 1, 2}, padded to 3 with column 0 and mask 0 and never the row's target, as
    /// `unlikelihood::candidates` builds them.
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    fn ul_candidates() -> (Vec<i64>, Vec<f32>, usize) {
        (
            vec![1, 5, 0, 2, 0, 0, 0, 0, 0, 0, 1, 2],
            vec![1., 1., 0., 1., 0., 0., 0., 0., 0., 1., 1., 1.],
            3,
        )
    }

    /// [`reference`] with unlikelihood, its gradient written term by term as the derivative of
    /// −ln(1 − p_c): ∂/∂z_j = p_c·(δ_jc − p_j)/(1 − p_c) (not the module's factored form), with
    /// the clamp at 1 − p_c = 1e-12 (value clamped, gradient 0).
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    #[allow(clippy::too_many_arguments)]
    fn reference_with_ul(
        z: &[f32],
        y: &[i64],
        p: usize,
        n: usize,
        dev: f64,
        beta: f64,
        (idx, mask, width): (&[i64], &[f32], usize),
    ) -> (f64, f64, f64, Vec<f64>) {
        let (nll, dev_value, mut g) = reference(z, y, p, n, dev);
        let mut ul = 0.0;
        for row in 0..p {
            let (zr, log_z) = row_log_z(z, row, n);
            let probs: Vec<f64> = zr.iter().map(|v| (v - log_z).exp()).collect();
            for k in 0..width {
                if mask[row * width + k] == 0.0 {
                    continue;
                }
                let c = idx[row * width + k] as usize;
                let rest = 1.0 - probs[c];
                ul -= rest.max(1e-12).ln();
                if rest <= 1e-12 {
                    continue;
                }
                for (j, pj) in probs.iter().enumerate() {
                    let delta = if j == c { 1.0 } else { 0.0 };
                    g[row * n + j] += beta * probs[c] * (delta - pj) / rest / p as f64;
                }
            }
        }
        (nll, dev_value, beta * ul / p as f64, g)
    }

    /// The LibTorch call with unlikelihood's candidates on, from `z` `[P, N]`.
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    fn libtorch_with_ul(
        z: &[f32],
        y: &[i64],
        (p, n): (usize, usize),
        dev: f64,
        beta: f64,
        (idx, mask, width): (&[i64], &[f32], usize),
    ) -> DeviceHead {
        let device = DeviceSpec::LibtorchCpu.device().expect("libtorch");
        let logits = Tensor::<2>::from_data(TensorData::new(z.to_vec(), [p, n]), &device);
        let targets = Tensor::<1, Int>::from_data(TensorData::new(y.to_vec(), [p]), &device);
        let idx = Tensor::<2, Int>::from_data(TensorData::new(idx.to_vec(), [p, width]), &device);
        let mask = Tensor::<2>::from_data(TensorData::new(mask.to_vec(), [p, width]), &device);
        libtorch_head(&logits, &targets, dev, Some((beta, &idx, &mask))).expect("the fused call")
    }

    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    #[test]
    fn unlikelihood_in_the_libtorch_call_matches_its_derivative_in_f64() {
        let (z, y, p, n) = case();
        let (idx, mask, width) = ul_candidates();
        let beta = 0.7;
        for dev in [0.0, 0.3] {
            let out = libtorch_with_ul(&z, &y, (p, n), dev, beta, (&idx, &mask, width));
            let (nll, dev_value, ul, g) =
                reference_with_ul(&z, &y, p, n, dev, beta, (&idx, &mask, width));
            assert!((scalar(out.nll) - nll).abs() < 1e-5 * nll.abs().max(1.0));
            assert_eq!(
                out.dev.is_some(),
                dev > 0.0,
                "DEV's value exactly when it is on"
            );
            if let Some(v) = out.dev {
                assert!((scalar(v) - dev_value).abs() < 1e-4 * dev_value);
            }
            let got_ul = scalar(out.ul.expect("unlikelihood's value"));
            assert!(
                ul > 0.0 && (got_ul - ul).abs() < 1e-5 * ul,
                "UL {got_ul}, want {ul}"
            );
            let got = out.g.try_into_vec_as::<f32>().expect("read");
            for (i, (a, b)) in got.iter().zip(&g).enumerate() {
                assert!(
                    (*a as f64 - b).abs() < 2e-6 * b.abs().max(1.0),
                    "G[{i}] = {a}, want {b} (α {dev})"
                );
            }
        }
    }

    /// A candidate the model is nearly sure of (1 − p_c ≈ 5e-6, f32's p_c then holds 1 − p_c
    /// to about 1 %), and one past the clamp (1 − p_c ≈ 4e-18): its own column, p_c·(1 + β)/P
    /// here, is as exact as p_c itself though S ≈ 1/(1 − p_c) is 2·10⁵, the clamped one has no
    /// unlikelihood gradient, and nothing is infinite.
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    #[test]
    fn a_nearly_certain_candidate_keeps_its_own_column_exact() {
        let (p, n) = (2, 7);
        let mut z = vec![0.0f32; p * n];
        z[2] = 14.0; // row 0: candidate 2 at 1 − p ≈ 6·e^−14
        z[n + 4] = 40.0; // row 1: candidate 4 past 1e-12
        let y = [5i64, 1];
        let (idx, mask, width) = (vec![2i64, 0, 4, 0], vec![1.0f32, 0.0, 1.0, 0.0], 2);
        let beta = 0.5;
        let out = libtorch_with_ul(&z, &y, (p, n), 0.0, beta, (&idx, &mask, width));
        let (_, _, ul, g) = reference_with_ul(&z, &y, p, n, 0.0, beta, (&idx, &mask, width));
        let got = out.g.try_into_vec_as::<f32>().expect("read");
        assert!(got.iter().all(|v| v.is_finite()), "{got:?}");
        // Row 0's own column: p_c·(1 + β)/P, well conditioned.
        let own = got[2] as f64;
        assert!(
            (own - g[2]).abs() < 1e-6 * g[2].abs(),
            "own column {own}, want {}",
            g[2]
        );
        // The other columns carry β·S with S = p_c/(1 − p_c) ≈ 2·10⁵: as good as 1 − p_c.
        for j in [0, 1, 3, 4, 5, 6] {
            assert!(
                (got[j] as f64 - g[j]).abs() < 2e-2 * g[j].abs(),
                "G[{j}] {}",
                got[j]
            );
        }
        // Row 1: clamped, so its G is MLE's.
        let h = 1.0 / (1.0 + 6.0 * (-40.0f64).exp());
        assert!(
            (got[n + 4] as f64 - h / p as f64).abs() < 1e-6,
            "{}",
            got[n + 4]
        );
        let got_ul = scalar(out.ul.expect("value"));
        assert!((got_ul - ul).abs() < 1e-2 * ul, "UL {got_ul}, want {ul}");
    }
}
