//! Vectorised `exp` and the log-sum-exps built on it. The isotropy metric needs 4·N·d
//! exponentials per panel (both signs of every direction, total and groups); libm's scalar `exp`
//! made them the slowest part. The projections they read are f32 (a relative error of ~1e-7
//! already), so an f32 `exp` accurate to ~1e-7 costs nothing in accuracy; the sums are in f64.
//! On x86-64 the loop is compiled a second time for AVX2 and picked at run time.

const LOG2_E: f32 = std::f32::consts::LOG2_E;
// ln 2 split so that k·LN2_HI is exact in f32 for |k| < 2^14.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
// 1.5·2^23: adding it rounds to an integer held in the low mantissa bits.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// `exp(x)` for `x ≤ 0`, relative error < 2e-7. Arguments below −80 are treated as −80
/// (≈2e-35): in a sum whose largest term is 1 the difference is far below f32 resolution.
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    let x = x.max(-80.0);
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn log_sum_exp_both_signs_avx2(x: &[f32]) -> (f64, f64) {
    log_sum_exp_both_signs_generic(x)
}

/// `(logsumexp(x), logsumexp(−x))` of f32 values, summed in f64.
pub(crate) fn log_sum_exp_both_signs(x: &[f32]) -> (f64, f64) {
    if x.is_empty() {
        return (f64::NEG_INFINITY, f64::NEG_INFINITY);
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { log_sum_exp_both_signs_avx2(x) };
    }
    log_sum_exp_both_signs_generic(x)
}

/// `Σ widen(a_i)·b_i` with 16 f32 lanes (vectorises); `widen` turns a stored element into f32.
#[inline(always)]
pub(crate) fn dot_widened<T: Copy>(a: &[T], b: &[f32], widen: impl Fn(T) -> f32) -> f32 {
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
pub(crate) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    dot_widened(a, b, |x| x)
}

/// `Σ a_i b_i` with `a` in bfloat16 (widened by a shift, which vectorises without F16C).
#[inline]
pub(crate) fn dot_bf16(a: &[u16], b: &[f32]) -> f32 {
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
        // Both code paths (AVX2 and generic) agree.
        let g = log_sum_exp_both_signs_generic(&x);
        assert!((g.0 - p).abs() < 1e-12 && (g.1 - m).abs() < 1e-12);
        // Far outside exp's range the shifted form still works.
        let big = [1000.0f32, 999.0];
        let (p, m) = log_sum_exp_both_signs(&big);
        assert!((p - (1000.0 + (1.0 + (-1f64).exp()).ln())).abs() < 1e-6);
        assert!((m - (-999.0 + (1.0 + (-1f64).exp()).ln())).abs() < 1e-6);
    }

    #[test]
    fn dot_matches_f64() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..37).map(|i| (i % 5) as f32 - 2.0).collect();
        let want: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
        assert!((dot_f32(&a, &b) as f64 - want).abs() < 1e-4);
    }
}
