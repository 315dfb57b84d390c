//! GELU(x) = x·Φ(x) = x/2·(1 + erf(x/√2)), the Transformer MLP's activation, computed on the host
//! on the CPU backend.
//!
//! burn-flex computes GELU and its backward element by element on one thread with libm's scalar
//! `erff` (and `expf` in the backward): about 5 % of a `small` step (`perf`; 2 M elements per
//! layer). Here one vectorised, parallel host pass computes
//!
//!   s = GELU′(x) = Φ(x) + x·φ(x)   and   r = GELU(x) − x·s = −x²·φ(x),
//!
//! with φ(x) = exp(−x²/2)/√(2π), and the graph sees y = x ⊙ s + r with s and r constants: its
//! value is GELU(x), and the gradient burn takes through the product, ∂L/∂y ⊙ GELU′(x), is GELU's.
//! One product and one sum stay in the graph, and the backward is one product. Without autodiff
//! (evaluation) the pass writes GELU(x) itself. LibTorch keeps burn's GELU (the host pass would
//! copy each activation off the device and back).
//!
//! Φ comes from erfc (Numerical Recipes' `erfcc`, a Chebyshev fit with relative error below
//! 1.2e-7 everywhere): Φ(x) = erfc(−x/√2)/2 for x < 0 keeps its relative accuracy into the tail
//! (up to the rounding of x²/2 in f32, a relative 6e-8·x²/2), where (1 + erf)/2 would cancel to
//! an absolute error of a few 1e-8. Tested against libm's f64 erfc; GELU′ against
//! finite differences of an f64 GELU.

use burn::nn::Gelu;
use burn::prelude::*;
use rayon::prelude::*;

/// erfc(z) = t·exp(−z² + P(t)) with t = 1/(1 + z/2) for z ≥ 0: P's coefficients from t⁹ down
/// to t⁰.
const ERFC_P: [f32; 10] = [
    0.170_872_77,
    -0.822_152_23,
    1.488_515_9,
    -1.135_204,
    0.278_868_07,
    -0.186_288_06,
    0.096_784_18,
    0.374_091_96,
    1.000_023_7,
    -1.265_512_2,
];
const INV_SQRT_2PI: f32 = 0.398_942_3;
/// Below this argument the exponential is taken as 0 (exp(−80) ≈ 2e-35; `exp_nonpositive` clamps
/// there), so that φ(x) and x·φ(x) vanish for large |x| (a clamped exponential would leave x·φ(x)
/// finite and wrong for huge x).
const EXP_UNDERFLOW: f32 = -80.0;
/// Elements per rayon task.
const CHUNK: usize = 1 << 14;

/// y = GELU(x): on burn-flex through the host pass (see the module documentation), elsewhere
/// burn's `Gelu`.
pub fn forward<const D: usize>(layer: &Gelu, x: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    if !super::device::is_flex(&device) {
        return layer.forward(x);
    }
    let shape = x.shape();
    let Ok(values) = x.clone().try_into_vec_as::<f32>() else {
        return layer.forward(x);
    };
    if device.is_autodiff() {
        let (slope, offset) = slope_and_offset(&values);
        x * Tensor::<D>::from_data(TensorData::new(slope, shape.clone()), &device)
            + Tensor::<D>::from_data(TensorData::new(offset, shape), &device)
    } else {
        Tensor::<D>::from_data(TensorData::new(gelu_values(&values), shape), &device)
    }
}

/// (GELU′(x), GELU(x) − x·GELU′(x)) elementwise.
pub fn slope_and_offset(x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut slope = vec![0f32; x.len()];
    let mut offset = vec![0f32; x.len()];
    x.par_chunks(CHUNK)
        .zip(slope.par_chunks_mut(CHUNK))
        .zip(offset.par_chunks_mut(CHUNK))
        .for_each(|((x, s), r)| {
            #[cfg(target_arch = "x86_64")]
            if conelab_metrics::fastmath::has_avx2_fma() {
                // SAFETY: the CPU has AVX2 and FMA, checked just above.
                unsafe { avx2::slope_and_offset(x, s, r) };
                return;
            }
            for ((&x, s), r) in x.iter().zip(s.iter_mut()).zip(r.iter_mut()) {
                (*s, *r) = slope_offset_scalar(x);
            }
        });
    (slope, offset)
}

/// GELU(x) elementwise.
pub fn gelu_values(x: &[f32]) -> Vec<f32> {
    let mut y = vec![0f32; x.len()];
    x.par_chunks(CHUNK)
        .zip(y.par_chunks_mut(CHUNK))
        .for_each(|(x, y)| {
            #[cfg(target_arch = "x86_64")]
            if conelab_metrics::fastmath::has_avx2_fma() {
                // SAFETY: the CPU has AVX2 and FMA, checked just above.
                unsafe { avx2::values(x, y) };
                return;
            }
            for (&x, y) in x.iter().zip(y.iter_mut()) {
                *y = x * cdf_scalar(x);
            }
        });
    y
}

/// (Φ(x), φ(x)): the standard normal distribution function and density; φ is 0 where exp(−x²/2)
/// underflows. NaN gives NaN.
fn cdf_pdf_scalar(x: f32) -> (f32, f32) {
    let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * z);
    let mut p = ERFC_P[0];
    for c in &ERFC_P[1..] {
        p = p * t + c;
    }
    let q = -z * z;
    let exp = |a: f32| {
        if a < EXP_UNDERFLOW {
            0.0
        } else {
            conelab_metrics::fastmath::exp_nonpositive(a)
        }
    };
    let half_erfc = 0.5 * t * exp(q + p);
    let cdf = if x >= 0.0 { 1.0 - half_erfc } else { half_erfc };
    (cdf, exp(q) * INV_SQRT_2PI)
}

/// Φ(x).
fn cdf_scalar(x: f32) -> f32 {
    cdf_pdf_scalar(x).0
}

fn slope_offset_scalar(x: f32) -> (f32, f32) {
    let (cdf, pdf) = cdf_pdf_scalar(x);
    // pdf = 0: both terms vanish exactly, also for x = ±∞ (∞·0 would be NaN).
    let x_pdf = if pdf == 0.0 { 0.0 } else { x * pdf };
    let offset = if pdf == 0.0 { 0.0 } else { -x * x_pdf };
    (cdf + x_pdf, offset)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::*;
    use conelab_metrics::fastmath::{load8 as load, store8 as store};

    const LANES: usize = 8;

    /// exp(a) for a ≤ ~0, 0 below the underflow (a NaN argument compares false and stays NaN).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp(a: __m256) -> __m256 {
        let under = _mm256_cmp_ps::<_CMP_LT_OQ>(a, _mm256_set1_ps(EXP_UNDERFLOW));
        _mm256_andnot_ps(under, conelab_metrics::fastmath::exp_nonpositive_avx2(a))
    }

    /// [`super::cdf_pdf_scalar`] on 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn cdf_pdf(x: __m256) -> (__m256, __m256) {
        let abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0), x);
        let z = _mm256_mul_ps(abs, _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
        let one = _mm256_set1_ps(1.0);
        let t = _mm256_div_ps(one, _mm256_fmadd_ps(z, _mm256_set1_ps(0.5), one));
        let mut p = _mm256_set1_ps(ERFC_P[0]);
        for c in &ERFC_P[1..] {
            p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(*c));
        }
        let q = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(z, z));
        let half_erfc = _mm256_mul_ps(
            _mm256_mul_ps(_mm256_set1_ps(0.5), t),
            exp(_mm256_add_ps(q, p)),
        );
        let positive = _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_setzero_ps());
        let cdf = _mm256_blendv_ps(half_erfc, _mm256_sub_ps(one, half_erfc), positive);
        (cdf, _mm256_mul_ps(exp(q), _mm256_set1_ps(INV_SQRT_2PI)))
    }

    /// [`super::slope_offset_scalar`] on 8 lanes.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn slope_and_offset(x: &[f32], slope: &mut [f32], offset: &mut [f32]) {
        let xs = x.chunks_exact(LANES);
        let rest = xs.remainder();
        let mut ss = slope.chunks_exact_mut(LANES);
        let mut rs = offset.chunks_exact_mut(LANES);
        for ((xc, sc), rc) in xs.zip(ss.by_ref()).zip(rs.by_ref()) {
            let v = load(xc);
            let (cdf, pdf) = cdf_pdf(v);
            // pdf = 0: both terms vanish exactly, also for x = ±∞ (∞·0 would be NaN).
            let vanishes = _mm256_cmp_ps::<_CMP_EQ_OQ>(pdf, _mm256_setzero_ps());
            let x_pdf = _mm256_andnot_ps(vanishes, _mm256_mul_ps(v, pdf));
            store(sc, _mm256_add_ps(cdf, x_pdf));
            let r = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(v, x_pdf));
            store(rc, _mm256_andnot_ps(vanishes, r));
        }
        let (ss, rs) = (ss.into_remainder(), rs.into_remainder());
        for ((&x, s), r) in rest.iter().zip(ss.iter_mut()).zip(rs.iter_mut()) {
            (*s, *r) = slope_offset_scalar(x);
        }
    }

    /// x·Φ(x) on 8 lanes.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn values(x: &[f32], y: &mut [f32]) {
        let xs = x.chunks_exact(LANES);
        let rest = xs.remainder();
        let mut ys = y.chunks_exact_mut(LANES);
        for (xc, yc) in xs.zip(ys.by_ref()) {
            let v = load(xc);
            store(yc, _mm256_mul_ps(v, cdf_pdf(v).0));
        }
        for (&x, y) in rest.iter().zip(ys.into_remainder().iter_mut()) {
            *y = x * cdf_scalar(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeviceSpecExt;

    /// Φ and GELU in f64 from libm's erfc: an independent reference.
    fn cdf_f64(x: f64) -> f64 {
        0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
    }

    fn gelu_f64(x: f64) -> f64 {
        x * cdf_f64(x)
    }

    /// A grid over [−14, 9] (a length that leaves a remainder after the 8-lane chunks).
    fn grid() -> Vec<f32> {
        (0..92_003).map(|i| -14.0 + i as f32 * 2.5e-4).collect()
    }

    /// The relative error allowed at x: a few f32 steps (the fit's 1.2e-7 and the rounding of its
    /// ten-term polynomial), and the rounding of x²/2 in the exponent (see the module
    /// documentation).
    fn relative(x: f64) -> f64 {
        6e-7 * (1.0 + x * x / 2.0)
    }

    /// Where the exponentials are not yet taken as 0: erfc's argument is −x²/2 + P(t) with
    /// P ≥ −1.27, and must stay above −80.
    fn resolved(x: f64) -> bool {
        x * x / 2.0 < 78.0
    }

    #[test]
    fn phi_keeps_its_relative_accuracy_into_the_tail() {
        let mut worst = 0f64;
        let mut tail = 0;
        for x in grid() {
            let xd = x as f64;
            let (got, want) = (cdf_scalar(x) as f64, cdf_f64(xd));
            if resolved(xd) {
                worst = worst.max((got - want).abs() / (want * relative(xd)));
            } else {
                assert!(got <= want.max(1e-35), "Φ({x}) = {got}");
                tail += 1;
            }
        }
        assert!(worst <= 1.0, "worst error {worst} of the allowed");
        assert!(tail > 1_000, "the grid reaches the tail");
        assert_eq!(cdf_scalar(0.0), 0.5);
        assert_eq!(cdf_scalar(7.0), 1.0);
    }

    #[test]
    fn values_slopes_and_offsets_match_the_f64_reference_and_finite_differences() {
        let x = grid();
        let y = gelu_values(&x);
        let (s, r) = slope_and_offset(&x);
        let h = 1e-4;
        for (i, &xi) in x.iter().enumerate() {
            let xd = xi as f64;
            let want = gelu_f64(xd);
            let allowed = relative(xd) * want.abs() + if resolved(xd) { 0.0 } else { 1e-33 };
            assert!(
                (y[i] as f64 - want).abs() <= allowed,
                "GELU({xi}) = {} against {want}",
                y[i]
            );
            // The derivative against central differences of the f64 reference.
            let slope = (gelu_f64(xd + h) - gelu_f64(xd - h)) / (2.0 * h);
            assert!(
                (s[i] as f64 - slope).abs() <= 1e-6,
                "GELU'({xi}) = {} against {slope}",
                s[i]
            );
            // What the graph computes, x·s + r in f32, is GELU(x): the two terms cancel for
            // negative x (x·s and r are both about x²·φ), so its error is relative to them.
            let through = (xi * s[i] + r[i]) as f64;
            assert!(
                (through - want).abs()
                    <= relative(xd) * (want.abs() + r[i].abs() as f64)
                        + if resolved(xd) { 0.0 } else { 1e-33 },
                "x·s + r at {xi}: {through} against {want}"
            );
        }
    }

    #[test]
    fn the_vector_kernel_is_the_scalar_one() {
        let x = grid();
        let (s, r) = slope_and_offset(&x);
        let y = gelu_values(&x);
        for (i, &xi) in x.iter().enumerate() {
            // FMA against separate roundings, relative to the terms summed (Φ and x·φ cancel
            // in GELU′ for negative x).
            let tolerance = relative(xi as f64) as f32;
            let close = |a: f32, b: f32, scale: f32| (a - b).abs() <= tolerance * scale;
            let (ws, wr) = slope_offset_scalar(xi);
            let (cdf, pdf) = cdf_pdf_scalar(xi);
            assert!(
                close(s[i], ws, cdf + (xi * pdf).abs()) && close(r[i], wr, wr.abs()),
                "at {xi}: {} {ws}, {} {wr}",
                s[i],
                r[i]
            );
            let wy = xi * cdf_scalar(xi);
            assert!(close(y[i], wy, wy.abs()), "at {xi}: {} {wy}", y[i]);
        }
    }

    /// Through burn on burn-flex, with and without autodiff, against burn's own `Gelu` (a second
    /// implementation, libm's erf): values, and the gradient of a weighted sum.
    #[test]
    fn the_graph_gives_burns_values_and_gradients() {
        use conelab_core::model::DeviceSpec;
        let device = DeviceSpec::Cpu.training_device().expect("flex");
        assert!(crate::model::is_flex(&device));
        let shape = [3, 5, 37];
        let n = 3 * 5 * 37;
        let data: Vec<f32> = (0..n)
            .map(|i| ((i * 37) % n) as f32 / n as f32 * 12.0 - 6.0)
            .collect();
        let weights: Vec<f32> = (0..n).map(|i| ((i * 11) % 7) as f32 - 3.0).collect();
        let leaf =
            || Tensor::<3>::from_data(TensorData::new(data.clone(), shape), &device).require_grad();
        let w = Tensor::<3>::from_data(TensorData::new(weights, shape), &device);
        let gelu = Gelu::new();
        let (ours, theirs) = (leaf(), leaf());
        let y_ours = forward(&gelu, ours.clone());
        let y_theirs = gelu.forward(theirs.clone());
        let g_ours = (y_ours.clone() * w.clone()).sum().backward();
        let g_theirs = (y_theirs.clone() * w).sum().backward();
        let read = |t: Tensor<3>| t.try_into_vec_as::<f32>().expect("read");
        let dx_ours = read(ours.grad(&g_ours).expect("a gradient"));
        let dx_theirs = read(theirs.grad(&g_theirs).expect("a gradient"));
        let (y_ours, y_theirs) = (read(y_ours), read(y_theirs));
        for i in 0..n {
            assert!((y_ours[i] - y_theirs[i]).abs() <= 1e-6, "y at {}", data[i]);
            assert!(
                (dx_ours[i] - dx_theirs[i]).abs() <= 3e-6,
                "dx at {}",
                data[i]
            );
        }
        // Evaluation: no autodiff, the values only.
        let plain = DeviceSpec::Cpu.device().expect("flex");
        assert!(crate::model::is_flex(&plain));
        let x = Tensor::<3>::from_data(TensorData::new(data.clone(), shape), &plain);
        let y = read(forward(&gelu, x));
        for i in 0..n {
            assert!((y[i] - y_theirs[i]).abs() <= 1e-6, "eval y at {}", data[i]);
        }
    }

    #[test]
    fn large_and_non_finite_inputs() {
        let x = [f32::NAN, f32::INFINITY, 1e30, -1e30, 40.0, -40.0, 0.0];
        // The scalar path (7 values), and every lane of one 8-lane chunk.
        let mut padded = x.to_vec();
        padded.push(1.0);
        for input in [&x[..], &padded[..]] {
            let (s, r) = slope_and_offset(input);
            let y = gelu_values(input);
            let through = |i: usize| input[i] * s[i] + r[i];
            assert!(y[0].is_nan() && through(0).is_nan(), "NaN stays NaN");
            assert_eq!((y[1], through(1)), (f32::INFINITY, f32::INFINITY));
            assert_eq!((y[2], through(2)), (1e30, 1e30));
            assert_eq!((y[3], through(3)), (0.0, 0.0));
            assert_eq!((s[4], r[4], y[4]), (1.0, 0.0, 40.0));
            assert_eq!((s[5], r[5], y[5]), (0.0, 0.0, 0.0));
            assert_eq!((s[6], r[6], y[6]), (0.5, 0.0, 0.0));
        }
    }
}
