//! What a few directions carry of a set of rows (methods.md §2, "Measures from later
//! literature"), each a pure function of the rows:
//!
//! - **All-but-the-top** (Mu & Viswanath 2018): with D = ⌈d/100⌉, the fraction of the centred
//!   variance in the top D principal components, and the mean pairwise cosine of the rows after
//!   the mean and those D components are removed.
//! - **Rogue dimensions** (Timkey & van Schijndel 2021): the mean pairwise cosine is a sum over
//!   coordinates, cos(x̂, ŷ) = Σ_k x̂_k ŷ_k; the share of it the 3 largest coordinate-wise
//!   contributions carry.
//!
//! Both are part of the main panel ([`crate::embedding`]); the all-pairs measures of the same
//! literature are the [`crate::second_tier`].

use faer::{Mat, MatRef, Par};

use crate::embedding::{dot, eigen_descending};
use crate::matrix::{Embeddings, MatrixError};

/// All-but-the-top of a set of rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllButTheTop {
    /// D, the components removed: ⌈d/100⌉.
    pub removed: usize,
    /// The top D components' share of the centred variance (tr Σ), in [0, 1].
    pub top_variance: f64,
    /// Mean pairwise cosine over i ≠ j after subtracting the mean row and projecting out the top
    /// D components (rows that become 0 left out); NaN under two such rows.
    pub mean_cos_after: f64,
}

impl AllButTheTop {
    pub(crate) fn unknown(d: usize) -> Self {
        AllButTheTop {
            removed: abtt_removed(d),
            top_variance: f64::NAN,
            mean_cos_after: f64::NAN,
        }
    }
}

/// D = ⌈d/100⌉, as Mu & Viswanath remove.
fn abtt_removed(d: usize) -> usize {
    d.div_ceil(100).min(d)
}

/// [`AllButTheTop`] of `w`'s rows given their mean μ and covariance Σ = WᵀW/n − μμᵀ: the top D
/// eigenvectors v_c of Σ, then for each row x the residual r = (x − μ) − Σ_c a_c v_c with
/// a_c = (x − μ)·v_c, whose norm is ‖x − μ‖² − Σ_c a_c² (an orthonormal split), and the mean
/// cosine of the residuals from their unit sum: (‖Σ r̂‖² − m)/(m(m − 1)).
pub(crate) fn all_but_the_top_from_moments(
    w: Embeddings<'_>,
    mean: &[f64],
    cov: MatRef<'_, f64>,
    par: Par,
) -> Result<AllButTheTop, MatrixError> {
    let d = w.d();
    let removed = abtt_removed(d);
    if w.n() < 2 {
        return Ok(AllButTheTop::unknown(d));
    }
    let (values, vectors) = eigen_descending(cov, par)?;
    let total: f64 = values.iter().map(|v| v.max(0.0)).sum();
    let top: f64 = values[..removed].iter().map(|v| v.max(0.0)).sum();
    let top_variance = if total > 0.0 { top / total } else { f64::NAN };
    // The D components as rows, for contiguous dot products.
    let axes: Vec<Vec<f64>> = (0..removed)
        .map(|c| (0..d).map(|k| vectors[(k, c)]).collect())
        .collect();
    // A residual this small relative to the spread is rounding, not a direction.
    let floor = 1e-20 * total.max(f64::MIN_POSITIVE);
    let mut centred_sum = vec![0.0f64; d];
    let mut axis_sum = vec![0.0f64; removed];
    let mut along = vec![0.0f64; removed];
    let mut x = vec![0.0f64; d];
    let mut kept = 0usize;
    for i in 0..w.n() {
        for ((xk, &v), m) in x.iter_mut().zip(w.row(i)).zip(mean) {
            *xk = f64::from(v) - m;
        }
        let mut norm2 = dot(&x, &x);
        for (a, axis) in along.iter_mut().zip(&axes) {
            *a = dot(&x, axis);
            norm2 -= *a * *a;
        }
        if norm2 <= floor {
            continue;
        }
        kept += 1;
        let inv = 1.0 / norm2.sqrt();
        centred_sum
            .iter_mut()
            .zip(&x)
            .for_each(|(s, v)| *s += v * inv);
        axis_sum
            .iter_mut()
            .zip(&along)
            .for_each(|(s, a)| *s += a * inv);
    }
    let mean_cos_after = if kept >= 2 {
        // Σ r̂ = Σ (x − μ)/‖r‖ − Σ_c (Σ a_c/‖r‖) v_c.
        for (axis, s) in axes.iter().zip(&axis_sum) {
            centred_sum
                .iter_mut()
                .zip(axis)
                .for_each(|(c, v)| *c -= s * v);
        }
        let m = kept as f64;
        (dot(&centred_sum, &centred_sum) - m) / (m * (m - 1.0))
    } else {
        f64::NAN
    };
    Ok(AllButTheTop {
        removed,
        top_variance,
        mean_cos_after,
    })
}

/// [`AllButTheTop`] of `w`'s rows from their mean and covariance (the panel computes the same from
/// the moments it already has); NaN figures for fewer than two rows.
pub fn all_but_the_top(w: Embeddings<'_>) -> Result<AllButTheTop, MatrixError> {
    let (n, d) = (w.n(), w.d());
    if n < 2 {
        return Ok(AllButTheTop::unknown(d));
    }
    let mut mean = vec![0.0f64; d];
    for i in 0..n {
        for (m, &x) in mean.iter_mut().zip(w.row(i)) {
            *m += f64::from(x);
        }
    }
    mean.iter_mut().for_each(|m| *m /= n as f64);
    let centred = Mat::<f64>::from_fn(n, d, |i, k| f64::from(w.row(i)[k]) - mean[k]);
    let cov = (centred.transpose() * &centred) / faer::Scale(n as f64);
    all_but_the_top_from_moments(w, &mean, cov.as_ref(), Par::Seq)
}

/// How many coordinate-wise contributions the rogue share adds up (Timkey & van Schijndel).
pub const ROGUE_TOP: usize = 3;

/// Each coordinate's contribution to the mean pairwise cosine of the rows (zero rows left out):
/// C_k = ((Σ_i x̂_ik)² − Σ_i x̂_ik²) / (m(m − 1)); they sum to the mean pairwise cosine.
pub fn cosine_contributions(w: Embeddings<'_>) -> Vec<f64> {
    let d = w.d();
    let (mut sum, mut squares) = (vec![0.0f64; d], vec![0.0f64; d]);
    let mut m = 0usize;
    for i in 0..w.n() {
        let row = w.row(i);
        let norm = row
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt();
        if norm == 0.0 {
            continue;
        }
        m += 1;
        for k in 0..d {
            let u = f64::from(row[k]) / norm;
            sum[k] += u;
            squares[k] += u * u;
        }
    }
    contributions_from_sums(&sum, &squares, m)
}

/// C_k from the m unit rows' coordinate sums and sums of squares (the panel has both already);
/// NaN under two rows.
pub(crate) fn contributions_from_sums(sum: &[f64], squares: &[f64], m: usize) -> Vec<f64> {
    if m < 2 {
        return vec![f64::NAN; sum.len()];
    }
    let pairs = m as f64 * (m as f64 - 1.0);
    sum.iter()
        .zip(squares)
        .map(|(s, q)| (s * s - q) / pairs)
        .collect()
}

/// The share of the mean pairwise cosine carried by its `top` largest coordinate-wise
/// contributions (Timkey & van Schijndel use 3); NaN where the mean cosine is 0 or unknown.
pub fn rogue_share(w: Embeddings<'_>, top: usize) -> f64 {
    top_share(cosine_contributions(w), top)
}

/// Σ of the `top` largest of `c` over Σ c; NaN where Σ c is ~0 or not finite.
pub(crate) fn top_share(mut c: Vec<f64>, top: usize) -> f64 {
    let total: f64 = c.iter().sum();
    if !total.is_finite() || total.abs() < 1e-12 {
        return f64::NAN;
    }
    c.sort_by(|a, b| b.total_cmp(a));
    c.iter().take(top).sum::<f64>() / total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::second_tier::tests::normals;
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::SeedableRng;

    /// A planted common direction: isotropic unit noise in d = 128 plus variance 100 along e₀
    /// and e₁ and a constant offset. D = ⌈128/100⌉ = 2 components go; their share of the
    /// variance is (100 + 100 + 2)/(100 + 100 + 128) ≈ 0.616, and what is left is isotropic noise
    /// about a zero mean (mean cosine ≈ 0), where before the offset made a cone.
    #[test]
    fn all_but_the_top_removes_a_planted_common_direction() {
        let (n, d) = (4000, 128);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let z = normals(&mut rng, n * d);
        let data: Vec<f32> = (0..n * d)
            .map(|i| {
                let k = i % d;
                let spread = if k < 2 { 10.0 } else { 1.0 };
                (spread * z[i] + 3.0) as f32
            })
            .collect();
        let w = Embeddings::new(n, d, &data).expect("matrix");
        let abtt = all_but_the_top(w).expect("abtt");
        assert_eq!(abtt.removed, 2);
        let want = 202.0 / 328.0;
        assert!(
            (abtt.top_variance - want).abs() < 0.02,
            "{abtt:?} vs {want}"
        );
        assert!(abtt.mean_cos_after.abs() < 0.01, "{abtt:?}");
        let before: f64 = cosine_contributions(w).iter().sum();
        assert!(before > 0.3, "the offset makes a cone: {before}");
    }

    /// The coordinate-wise contributions add up to the mean pairwise cosine computed pair by
    /// pair; one coordinate carrying a large shared value carries almost all of it.
    #[test]
    fn rogue_dimensions_sum_to_the_pairwise_mean_cosine() {
        let (n, d) = (60, 16);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let z = normals(&mut rng, n * d);
        let data: Vec<f32> = (0..n * d)
            .map(|i| (z[i] + if i % d == 5 { 8.0 } else { 0.0 }) as f32)
            .collect();
        let w = Embeddings::new(n, d, &data).expect("matrix");
        let unit = |i: usize| {
            let r: Vec<f64> = w.row(i).iter().map(|&v| f64::from(v)).collect();
            let norm = r.iter().map(|v| v * v).sum::<f64>().sqrt();
            r.into_iter().map(|v| v / norm).collect::<Vec<_>>()
        };
        let mut pairwise = 0.0;
        for i in 0..n {
            for j in (0..n).filter(|&j| j != i) {
                pairwise += unit(i).iter().zip(unit(j)).map(|(a, b)| a * b).sum::<f64>();
            }
        }
        pairwise /= (n * (n - 1)) as f64;
        let c = cosine_contributions(w);
        assert!((c.iter().sum::<f64>() - pairwise).abs() < 1e-9);
        let share = rogue_share(w, 3);
        assert!(share > 0.9 && share <= 1.2, "{share}");
        let c5 = c[5] / c.iter().sum::<f64>();
        assert!(c5 > 0.9, "coordinate 5 is the rogue one: {c5}");
    }
}
