//! Vectorised `exp` and what is built on it: the log-sum-exps of the isotropy metric (4·N·d
//! exponentials per panel: both signs of every direction, total and groups) and the softmax pass
//! of the training head on the CPU (P·N exponentials per step). libm's scalar `exp` made both the
//! slowest part of their work. Their inputs are f32 (a relative error of ~1e-7 already), so an f32
//! `exp` accurate to ~1e-7 costs nothing in accuracy; the sums are in f64. On x86-64 the loops
//! have AVX2 + FMA versions, picked at run time.

const LOG2_E: f32 = std::f32::consts::LOG2_E;
// ln 2 split so that k·LN2_HI is exact in f32 for |k| < 2^14.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
// 1.5·2^23: adding it rounds to an integer held in the low mantissa bits.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// `exp(x)` for `x ≤ 0`, relative error < 2e-7. Arguments below −80 are treated as −80
/// (≈2e-35): in a sum whose largest term is 1 the difference is far below f32 resolution. NaN
/// gives NaN (a sum it enters says so).
#[inline(always)]
pub fn exp_nonpositive(x: f32) -> f32 {
    // Explicitly: a NaN's payload bits would otherwise be shifted into the exponent below.
    if x.is_nan() {
        return x;
    }
    let x = if x < -80.0 { -80.0 } else { x };
    let t = x * LOG2_E + ROUND_MAGIC;
    let k = t - ROUND_MAGIC;
    let r = (x - k * LN2_HI) - k * LN2_LO;
    // Taylor to r^7 on |r| ≤ ln2/2: remainder < 6e-9.
    let mut p = 1.0 / 5_040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    // Scale by 2^k: the low bits of t's mantissa hold k (two's complement), shifted into the
    // exponent field; the wrapping add handles negative k.
    f32::from_bits(p.to_bits().wrapping_add(t.to_bits() << 23))
}

const LANES: usize = 8;

/// The 8 lanes of a `chunks_exact(LANES)` chunk, for the AVX2 loops (which run only where the
/// CPU has AVX2, checked at run time).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn load8(c: &[f32]) -> std::arch::x86_64::__m256 {
    let lanes: &[f32; LANES] = c.try_into().expect("chunks_exact gives LANES values");
    // SAFETY: 8 readable f32s; loadu has no alignment requirement.
    unsafe { std::arch::x86_64::_mm256_loadu_ps(lanes.as_ptr()) }
}

/// Writes 8 lanes into a `chunks_exact_mut(LANES)` chunk.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn store8(c: &mut [f32], v: std::arch::x86_64::__m256) {
    let lanes: &mut [f32; LANES] = c.try_into().expect("chunks_exact gives LANES values");
    // SAFETY: 8 writable f32s; storeu has no alignment requirement.
    unsafe { std::arch::x86_64::_mm256_storeu_ps(lanes.as_mut_ptr(), v) }
}

#[inline(always)]
fn log_sum_exp_both_signs_generic(x: &[f32]) -> (f64, f64) {
    let mut lo = [f32::INFINITY; LANES];
    let mut hi = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks.clone() {
        for l in 0..LANES {
            lo[l] = if c[l] < lo[l] { c[l] } else { lo[l] };
            hi[l] = if c[l] > hi[l] { c[l] } else { hi[l] };
        }
    }
    let mut min = lo.iter().copied().fold(f32::INFINITY, f32::min);
    let mut max = hi.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for &v in rest {
        min = min.min(v);
        max = max.max(v);
    }
    let mut plus = [0f64; LANES];
    let mut minus = [0f64; LANES];
    for c in chunks {
        for l in 0..LANES {
            plus[l] += exp_nonpositive(c[l] - max) as f64;
            minus[l] += exp_nonpositive(min - c[l]) as f64;
        }
    }
    for &v in rest {
        plus[0] += exp_nonpositive(v - max) as f64;
        minus[0] += exp_nonpositive(min - v) as f64;
    }
    let (p, m): (f64, f64) = (plus.iter().sum(), minus.iter().sum());
    (max as f64 + p.ln(), -(min as f64) + m.ln())
}

/// `exp_nonpositive` on 8 lanes with FMA: the same reduction and polynomial, so the same error
/// bound. (Left to the autovectoriser, the generic loop came out 4 lanes wide, without FMA and
/// with its constants spilled: ~2 ns an exponential.)
///
/// # Safety
/// The CPU must have AVX2 and FMA ([`has_avx2_fma`]).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub fn exp_nonpositive_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // maxps returns its second operand when either is NaN: a NaN argument stays NaN.
    let x = _mm256_max_ps(_mm256_set1_ps(-80.0), x);
    let t = _mm256_fmadd_ps(x, _mm256_set1_ps(LOG2_E), _mm256_set1_ps(ROUND_MAGIC));
    let k = _mm256_sub_ps(t, _mm256_set1_ps(ROUND_MAGIC));
    let r = _mm256_fnmadd_ps(k, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(k, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(1.0 / 5_040.0);
    for c in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let scaled = _mm256_add_epi32(
        _mm256_castps_si256(p),
        _mm256_slli_epi32::<23>(_mm256_castps_si256(t)),
    );
    // NaN lanes stay NaN: shifted, a NaN's payload bits could make a finite number.
    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
    _mm256_blendv_ps(_mm256_castsi256_ps(scaled), x, nan)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn log_sum_exp_both_signs_avx2(x: &[f32]) -> (f64, f64) {
    use std::arch::x86_64::*;
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    let load = load8;
    let (mut lo, mut hi) = (
        _mm256_set1_ps(f32::INFINITY),
        _mm256_set1_ps(f32::NEG_INFINITY),
    );
    for c in chunks.clone() {
        let v = load(c);
        // Operand order as the generic loop: a NaN value keeps the running extreme.
        lo = _mm256_min_ps(v, lo);
        hi = _mm256_max_ps(v, hi);
    }
    let (mut lo_lanes, mut hi_lanes) = ([0f32; LANES], [0f32; LANES]);
    // SAFETY: both arrays hold 8 writable f32s.
    unsafe {
        _mm256_storeu_ps(lo_lanes.as_mut_ptr(), lo);
        _mm256_storeu_ps(hi_lanes.as_mut_ptr(), hi);
    }
    let mut min = lo_lanes.iter().copied().fold(f32::INFINITY, f32::min);
    let mut max = hi_lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for &v in rest {
        min = min.min(v);
        max = max.max(v);
    }
    let (vmin, vmax) = (_mm256_set1_ps(min), _mm256_set1_ps(max));
    let widen_add = |acc: &mut [__m256d; 2], e: __m256| {
        acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(e)));
    };
    let mut plus = [_mm256_setzero_pd(); 2];
    let mut minus = [_mm256_setzero_pd(); 2];
    for c in chunks {
        let v = load(c);
        widen_add(&mut plus, exp_nonpositive_avx2(_mm256_sub_ps(v, vmax)));
        widen_add(&mut minus, exp_nonpositive_avx2(_mm256_sub_ps(vmin, v)));
    }
    let total = |acc: [__m256d; 2]| {
        let mut lanes = [0f64; 4];
        // SAFETY: `lanes` holds 4 writable f64s.
        unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), _mm256_add_pd(acc[0], acc[1])) };
        lanes.iter().sum::<f64>()
    };
    let (mut p, mut m) = (total(plus), total(minus));
    for &v in rest {
        p += exp_nonpositive(v - max) as f64;
        m += exp_nonpositive(min - v) as f64;
    }
    (max as f64 + p.ln(), -(min as f64) + m.ln())
}

/// `(logsumexp(x), logsumexp(−x))` of f32 values, summed in f64.
pub fn log_sum_exp_both_signs(x: &[f32]) -> (f64, f64) {
    if x.is_empty() {
        return (f64::NEG_INFINITY, f64::NEG_INFINITY);
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA, checked just above.
        return unsafe { log_sum_exp_both_signs_avx2(x) };
    }
    log_sum_exp_both_signs_generic(x)
}

/// Whether this CPU has AVX2 and FMA (the detection is cached by std; inlined into the kernels' loops).
#[inline]
pub fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The largest value (NaN values are passed over; −∞ for an empty slice).
pub fn max_f32(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA, checked just above.
        return unsafe { max_f32_avx2(x) };
    }
    x.iter()
        .copied()
        .fold(f32::NEG_INFINITY, |m, v| if v > m { v } else { m })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn max_f32_avx2(x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    let mut hi = _mm256_set1_ps(f32::NEG_INFINITY);
    for c in chunks {
        let v = load8(c);
        // A NaN value keeps the running maximum (maxps returns its second operand then).
        hi = _mm256_max_ps(v, hi);
    }
    let mut lanes = [0f32; LANES];
    // SAFETY: `lanes` holds 8 writable f32s.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), hi) };
    lanes
        .iter()
        .chain(rest)
        .copied()
        .fold(f32::NEG_INFINITY, |m, v| if v > m { v } else { m })
}

/// x_i ← exp(x_i − shift) for `shift ≥ max x`, returning Σ exp(x_i − shift) summed in f64.
pub fn exp_shifted_in_place(x: &mut [f32], shift: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA, checked just above.
        return unsafe { exp_shifted_in_place_avx2(x, shift) };
    }
    let mut sum = 0f64;
    for v in x.iter_mut() {
        *v = exp_nonpositive(*v - shift);
        sum += *v as f64;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn exp_shifted_in_place_avx2(x: &mut [f32], shift: f32) -> f64 {
    use std::arch::x86_64::*;
    let mut chunks = x.chunks_exact_mut(LANES);
    let vshift = _mm256_set1_ps(shift);
    let mut acc = [_mm256_setzero_pd(); 2];
    for c in chunks.by_ref() {
        let e = exp_nonpositive_avx2(_mm256_sub_ps(load8(c), vshift));
        store8(c, e);
        acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(e)));
    }
    let mut lanes = [0f64; 4];
    // SAFETY: `lanes` holds 4 writable f64s.
    unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), _mm256_add_pd(acc[0], acc[1])) };
    let mut sum: f64 = lanes.iter().sum();
    for v in chunks.into_remainder() {
        *v = exp_nonpositive(*v - shift);
        sum += *v as f64;
    }
    sum
}

/// `Σ widen(a_i)·b_i` with 16 f32 lanes (vectorises); `widen` turns a stored element into f32.
#[inline(always)]
pub fn dot_widened<T: Copy>(a: &[T], b: &[f32], widen: impl Fn(T) -> f32) -> f32 {
    const LANES: usize = 16;
    let mut acc = [0f32; LANES];
    let ca = a.chunks_exact(LANES);
    let cb = b.chunks_exact(LANES);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] += widen(x[l]) * y[l];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (&x, y) in ra.iter().zip(rb) {
        s += widen(x) * y;
    }
    s
}

/// `Σ a_i b_i` of two f32 slices, for the neighbour scan.
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    dot_widened(a, b, |x| x)
}

/// `Σ a_i b_i` with `a` in bfloat16 (widened by a shift, which vectorises without F16C).
#[inline]
pub fn dot_bf16(a: &[u16], b: &[f32]) -> f32 {
    dot_widened(a, b, |x| f32::from_bits((x as u32) << 16))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_libm_to_2e7() {
        let mut worst = 0f64;
        let mut x = -90.0f32;
        while x <= 0.0 {
            let got = exp_nonpositive(x) as f64;
            let want = (x.max(-80.0) as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.000_37;
        }
        assert!(worst < 2e-7, "worst relative error {worst:e}");
        assert_eq!(exp_nonpositive(0.0), 1.0);
    }

    /// The 8-lane kernel against libm over the whole range, every lane position used.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_exp_matches_libm_to_2e7() {
        use std::arch::x86_64::*;
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI's machine is expected to have AVX2 and FMA"
            );
            eprintln!("skipped: no AVX2/FMA on this CPU");
            return;
        }
        let mut worst = 0f64;
        let mut x = -90.0f32;
        while x <= 0.0 {
            let v: [f32; 8] = std::array::from_fn(|l| (x - l as f32 * 0.013).max(-95.0));
            let mut out = [0f32; 8];
            // SAFETY: AVX2 and FMA checked above; both arrays hold 8 f32s.
            unsafe {
                _mm256_storeu_ps(
                    out.as_mut_ptr(),
                    exp_nonpositive_avx2(_mm256_loadu_ps(v.as_ptr())),
                )
            };
            for (&got, &xv) in out.iter().zip(&v) {
                let want = (xv.max(-80.0) as f64).exp();
                worst = worst.max(((got as f64 - want) / want).abs());
            }
            x += 0.000_37;
        }
        assert!(worst < 2e-7, "worst relative error {worst:e}");
    }

    #[test]
    fn log_sum_exp_of_every_short_length_matches_the_naive_sum() {
        for n in 1..40usize {
            let x: Vec<f32> = (0..n).map(|i| ((i * 13 % 17) as f32 - 8.0) * 0.7).collect();
            let want_p = x.iter().map(|&v| (v as f64).exp()).sum::<f64>().ln();
            let want_m = x.iter().map(|&v| (-v as f64).exp()).sum::<f64>().ln();
            let (p, m) = log_sum_exp_both_signs(&x);
            assert!((p - want_p).abs() < 2e-7, "n = {n}: {p} vs {want_p}");
            assert!((m - want_m).abs() < 2e-7, "n = {n}: {m} vs {want_m}");
        }
    }

    #[test]
    fn log_sum_exp_matches_the_naive_sum() {
        let x: Vec<f32> = (0..1001)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let naive_plus = x.iter().map(|&v| (v as f64).exp()).sum::<f64>().ln();
        let naive_minus = x.iter().map(|&v| (-v as f64).exp()).sum::<f64>().ln();
        let (p, m) = log_sum_exp_both_signs(&x);
        assert!((p - naive_plus).abs() < 2e-7, "{p} vs {naive_plus}");
        assert!((m - naive_minus).abs() < 2e-7, "{m} vs {naive_minus}");
        // Both code paths (AVX2 + FMA and generic) agree to their rounding, and the AVX2 one
        // was taken where the CPU has it (its remainder loop alone is scalar).
        let g = log_sum_exp_both_signs_generic(&x);
        assert!((g.0 - p).abs() < 2e-7 && (g.1 - m).abs() < 2e-7);
        assert!((g.0 - naive_plus).abs() < 2e-7 && (g.1 - naive_minus).abs() < 2e-7);
        // Far outside exp's range the shifted form still works.
        let big = [1000.0f32, 999.0];
        let (p, m) = log_sum_exp_both_signs(&big);
        assert!((p - (1000.0 + (1.0 + (-1f64).exp()).ln())).abs() < 1e-6);
        assert!((m - (-999.0 + (1.0 + (-1f64).exp()).ln())).abs() < 1e-6);
    }

    #[test]
    fn max_and_shifted_exp_match_scalar_loops_at_every_length() {
        for n in 0..41usize {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 29 % 31) as f32 - 15.0) * 0.9)
                .collect();
            let want_max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max_f32(&x), want_max, "n = {n}");
            let mut e = x.clone();
            let shift = want_max.max(0.0);
            let sum = exp_shifted_in_place(&mut e, shift);
            let want_sum: f64 = x.iter().map(|&v| ((v - shift) as f64).exp()).sum();
            assert!(
                (sum - want_sum).abs() <= 2e-7 * want_sum.max(1e-30),
                "n = {n}"
            );
            for (&got, &v) in e.iter().zip(&x) {
                let want = ((v - shift) as f64).exp();
                assert!(
                    ((got as f64 - want) / want).abs() < 2e-7,
                    "n = {n}, x = {v}"
                );
            }
        }
        // A NaN is passed over by the maximum, and makes the sum of exponentials NaN (in the
        // vector lanes and in the remainder).
        let with_nan = [1.0, f32::NAN, 3.0, 2.0, 0.0, 0.0, 0.0, 0.0, -1.0];
        assert_eq!(max_f32(&with_nan), 3.0);
        assert!(exp_shifted_in_place(&mut with_nan.clone(), 3.0).is_nan());
        let mut tail_nan = [0.0f32; 9];
        tail_nan[8] = f32::NAN;
        assert!(exp_shifted_in_place(&mut tail_nan, 0.0).is_nan());
        // A NaN with payload bits (0x7FC00001) stays NaN in both paths, lane and remainder.
        let payload = f32::from_bits(0x7FC0_0001);
        let mut lanes = [payload; 9];
        exp_shifted_in_place(&mut lanes, 0.0);
        assert!(lanes.iter().all(|v| v.is_nan()), "{lanes:?}");
        assert!(exp_nonpositive(payload).is_nan());
        assert!(log_sum_exp_both_signs(&with_nan).0.is_nan());
    }

    #[test]
    fn dot_matches_f64() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..37).map(|i| (i % 5) as f32 - 2.0).collect();
        let want: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
        assert!((dot_f32(&a, &b) as f64 - want).abs() < 1e-4);
    }
}
