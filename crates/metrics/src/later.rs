//! Measures from the later literature on a set of rows (methods.md §2, "Measures from later
//! literature"), each a pure function of the rows:
//!
//! - **All-but-the-top** (Mu & Viswanath 2018): with D = ⌈d/100⌉, the fraction of the centred
//!   variance in the top D principal components, and the mean pairwise cosine of the rows after
//!   the mean and those D components are removed.
//! - **Rogue dimensions** (Timkey & van Schijndel 2021): the mean pairwise cosine is a sum over
//!   coordinates, cos(x̂, ŷ) = Σ_k x̂_k ŷ_k; the share of it the 3 largest coordinate-wise
//!   contributions carry.
//! - **TwoNN intrinsic dimension** (Facco et al. 2017): for each row μ = r₂/r₁ (second over first
//!   nearest-neighbour euclidean distance, exact), d̂ = n / Σ ln μ over the n rows with r₁ > 0;
//!   duplicate rows (r₁ = 0) left out and counted. O(n²d): for groups, in a slower tier.

use faer::{Mat, Par};

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

/// [`AllButTheTop`] of `w`'s rows; NaN figures for fewer than two rows.
pub fn all_but_the_top(w: Embeddings<'_>) -> Result<AllButTheTop, MatrixError> {
    let (n, d) = (w.n(), w.d());
    let removed = d.div_ceil(100).min(d);
    if n < 2 {
        return Ok(AllButTheTop {
            removed,
            top_variance: f64::NAN,
            mean_cos_after: f64::NAN,
        });
    }
    let mut mean = vec![0.0f64; d];
    for i in 0..n {
        for (m, &x) in mean.iter_mut().zip(w.row(i)) {
            *m += f64::from(x);
        }
    }
    mean.iter_mut().for_each(|m| *m /= n as f64);
    let centred = Mat::<f64>::from_fn(n, d, |i, k| f64::from(w.row(i)[k]) - mean[k]);
    let cov = centred.transpose() * &centred;
    let (values, vectors) = crate::embedding::eigen_descending(cov.as_ref(), Par::Seq)?;
    let total: f64 = values.iter().map(|v| v.max(0.0)).sum();
    let top: f64 = values[..removed].iter().map(|v| v.max(0.0)).sum();
    let top_variance = if total > 0.0 { top / total } else { f64::NAN };
    // Each centred row less its top-D part, normalised; the mean cosine from their sum.
    let mut unit_sum = vec![0.0f64; d];
    let mut kept = 0usize;
    let mut x = vec![0.0f64; d];
    for i in 0..n {
        for (k, xk) in x.iter_mut().enumerate() {
            *xk = centred[(i, k)];
        }
        for c in 0..removed {
            let along: f64 = (0..d).map(|k| x[k] * vectors[(k, c)]).sum();
            for (k, xk) in x.iter_mut().enumerate() {
                *xk -= along * vectors[(k, c)];
            }
        }
        let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm > 1e-12 * (1.0 + total.sqrt()) {
            kept += 1;
            for (s, v) in unit_sum.iter_mut().zip(&x) {
                *s += v / norm;
            }
        }
    }
    let mean_cos_after = if kept >= 2 {
        let m = kept as f64;
        (unit_sum.iter().map(|s| s * s).sum::<f64>() - m) / (m * (m - 1.0))
    } else {
        f64::NAN
    };
    Ok(AllButTheTop {
        removed,
        top_variance,
        mean_cos_after,
    })
}

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
    if m < 2 {
        return vec![f64::NAN; d];
    }
    let pairs = m as f64 * (m as f64 - 1.0);
    (0..d)
        .map(|k| (sum[k] * sum[k] - squares[k]) / pairs)
        .collect()
}

/// The share of the mean pairwise cosine carried by its `top` largest coordinate-wise
/// contributions (Timkey & van Schijndel use 3); NaN where the mean cosine is 0 or unknown.
pub fn rogue_share(w: Embeddings<'_>, top: usize) -> f64 {
    let mut c = cosine_contributions(w);
    let total: f64 = c.iter().sum();
    if !total.is_finite() || total.abs() < 1e-12 {
        return f64::NAN;
    }
    c.sort_by(|a, b| b.total_cmp(a));
    c.iter().take(top).sum::<f64>() / total
}

/// The TwoNN estimate of a set's intrinsic dimension.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TwoNn {
    /// d̂ = n / Σ ln(r₂/r₁); NaN with fewer than two rows used.
    pub dimension: f64,
    /// Rows in the estimate (r₁ > 0).
    pub used: usize,
    /// Rows with an exact duplicate (r₁ = 0), left out.
    pub duplicates: usize,
}

/// [`TwoNn`] of `w`'s rows, by exact euclidean nearest neighbours (O(n²d)).
pub fn two_nn(w: Embeddings<'_>) -> TwoNn {
    let n = w.n();
    let (mut log_sum, mut used, mut duplicates) = (0.0f64, 0usize, 0usize);
    for i in 0..n {
        let (mut r1, mut r2) = (f64::INFINITY, f64::INFINITY);
        for j in (0..n).filter(|&j| j != i) {
            let dist: f64 = w
                .row(i)
                .iter()
                .zip(w.row(j))
                .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
                .sum::<f64>()
                .sqrt();
            if dist < r1 {
                r2 = r1;
                r1 = dist;
            } else if dist < r2 {
                r2 = dist;
            }
        }
        if r1 == 0.0 {
            duplicates += 1;
        } else if r2.is_finite() {
            used += 1;
            log_sum += (r2 / r1).ln();
        }
    }
    TwoNn {
        dimension: if used >= 2 && log_sum > 0.0 {
            used as f64 / log_sum
        } else {
            f64::NAN
        },
        used,
        duplicates,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{Rng, SeedableRng};

    /// Standard normal draws (Box–Muller), so the tests need no distribution crate.
    fn normals(rng: &mut ChaCha8Rng, count: usize) -> Vec<f64> {
        let uniform = |rng: &mut ChaCha8Rng| (f64::from(rng.next_u32()) + 0.5) / 4_294_967_296.0;
        (0..count)
            .map(|_| {
                let (u, v) = (uniform(rng), uniform(rng));
                (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
            })
            .collect()
    }

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

    /// Uniform samples of a 2-D square and a 5-D cube, turned into 12-D by a fixed rotation
    /// (the distances are kept): TwoNN finds 2 and 5 (its MLE's spread is ≈ d/√n; the cube's
    /// boundary biases it a little low). A duplicated row is left out and counted.
    #[test]
    fn two_nn_finds_the_dimension_of_uniform_samples() {
        let estimate = |k: usize, n: usize, seed: u64| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let uniform = |rng: &mut ChaCha8Rng| f64::from(rng.next_u32()) / 4_294_967_296.0;
            let d = 12;
            // A rotation: Gram–Schmidt of random normal vectors.
            let raw = normals(&mut rng, d * d);
            let mut basis: Vec<Vec<f64>> = Vec::new();
            for c in 0..d {
                let mut v: Vec<f64> = raw[c * d..(c + 1) * d].to_vec();
                for b in &basis {
                    let along: f64 = v.iter().zip(b).map(|(x, y)| x * y).sum();
                    v.iter_mut().zip(b).for_each(|(x, y)| *x -= along * y);
                }
                let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                basis.push(v.into_iter().map(|x| x / norm).collect());
            }
            let mut data = Vec::with_capacity(n * d);
            for _ in 0..n {
                let p: Vec<f64> = (0..k).map(|_| uniform(&mut rng)).collect();
                let mut x = vec![0.0f64; d];
                for (pc, b) in p.iter().zip(&basis) {
                    x.iter_mut().zip(b).for_each(|(xr, br)| *xr += pc * br);
                }
                data.extend(x.iter().map(|&v| v as f32));
            }
            data
        };
        let square = estimate(2, 2000, 1);
        let got = two_nn(Embeddings::new(2000, 12, &square).expect("square"));
        assert!((got.dimension - 2.0).abs() < 0.15, "{got:?}");
        assert_eq!((got.used, got.duplicates), (2000, 0));
        let cube = estimate(5, 2000, 2);
        let got = two_nn(Embeddings::new(2000, 12, &cube).expect("cube"));
        assert!((got.dimension - 5.0).abs() < 0.6, "{got:?}");
        // Row 1 made a copy of row 0: both have r₁ = 0.
        let mut copy = square.clone();
        copy.copy_within(0..12, 12);
        let got = two_nn(Embeddings::new(2000, 12, &copy).expect("copy"));
        assert_eq!((got.used, got.duplicates), (1998, 2));
    }
}
