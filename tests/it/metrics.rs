//! Embedding metrics and neighbours against independent computations: closed forms, brute force,
//! a cyclic-Jacobi eigensolver and power iteration written here (not faer), and naive f64 sums.
// The reference algorithms are written index by index, like their textbook statements.
#![allow(clippy::needless_range_loop)]

use conelab_data::{FrequencyGroups, Group, GroupBounds};
use conelab_metrics::embedding::isotropy_from_log_z;
use conelab_metrics::neighbors::class_precision;
use conelab_metrics::{
    EmbeddingPanel, Embeddings, NeighborIndex, PanelOptions, ProjectionMode, RowGroups, Similarity,
    Threads,
};

/// splitmix64 + Box–Muller: deterministic test data without depending on an RNG crate's API.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

fn gaussian(n: usize, d: usize, sigma: f64, offset: &[f64], seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    (0..n * d)
        .map(|k| (sigma * rng.normal() + offset.get(k % d).copied().unwrap_or(0.0)) as f32)
        .collect()
}

/// Cyclic Jacobi: eigenvalues (descending) and eigenvectors (columns) of a symmetric matrix.
fn jacobi(a: &[Vec<f64>]) -> (Vec<f64>, Vec<Vec<f64>>) {
    let d = a.len();
    let mut a = a.to_vec();
    let mut v: Vec<Vec<f64>> = (0..d)
        .map(|i| (0..d).map(|j| if i == j { 1.0 } else { 0.0 }).collect())
        .collect();
    for _sweep in 0..100 {
        let off: f64 = (0..d)
            .flat_map(|i| (0..d).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum();
        if off < 1e-30 {
            break;
        }
        for p in 0..d {
            for q in p + 1..d {
                if a[p][q].abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..d {
                    let (akp, akq) = (a[k][p], a[k][q]);
                    a[k][p] = c * akp - s * akq;
                    a[k][q] = s * akp + c * akq;
                }
                for k in 0..d {
                    let (apk, aqk) = (a[p][k], a[q][k]);
                    a[p][k] = c * apk - s * aqk;
                    a[q][k] = s * apk + c * aqk;
                }
                for row in v.iter_mut() {
                    let (vp, vq) = (row[p], row[q]);
                    row[p] = c * vp - s * vq;
                    row[q] = s * vp + c * vq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&i, &j| a[j][j].total_cmp(&a[i][i]));
    let values = order.iter().map(|&i| a[i][i]).collect();
    let vectors = (0..d)
        .map(|r| order.iter().map(|&c| v[r][c]).collect())
        .collect();
    (values, vectors)
}

fn gram(w: &[f32], n: usize, d: usize) -> Vec<Vec<f64>> {
    let mut g = vec![vec![0.0; d]; d];
    for r in 0..n {
        let row = &w[r * d..(r + 1) * d];
        for i in 0..d {
            for j in 0..d {
                g[i][j] += row[i] as f64 * row[j] as f64;
            }
        }
    }
    g
}

/// I1, I2 by definition: Jacobi eigenvectors, each sign flipped at random, both signs of each
/// direction, Z by a plain f64 sum of exponentials.
fn reference_isotropy(w: &[f32], n: usize, d: usize, flip_seed: u64) -> (f64, f64) {
    let (_, vecs) = jacobi(&gram(w, n, d));
    let mut rng = Rng(flip_seed);
    let mut log_z = Vec::new();
    for c in 0..d {
        let sign = if rng.next_u64().is_multiple_of(2) {
            1.0
        } else {
            -1.0
        };
        for s in [sign, -sign] {
            let dots: Vec<f64> = (0..n)
                .map(|r| (0..d).map(|k| w[r * d + k] as f64 * vecs[k][c] * s).sum())
                .collect();
            let m = dots.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            log_z.push(m + dots.iter().map(|x| (x - m).exp()).sum::<f64>().ln());
        }
    }
    let max = log_z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = log_z.iter().copied().fold(f64::INFINITY, f64::min);
    let z: Vec<f64> = log_z.iter().map(|l| (l - max).exp()).collect();
    let mean = z.iter().sum::<f64>() / z.len() as f64;
    let std = (z.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / z.len() as f64).sqrt();
    ((min - max).exp(), std / mean)
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-300)
}

fn panel(w: &[f32], n: usize, d: usize, groups: Option<&RowGroups>) -> EmbeddingPanel {
    let e = Embeddings::new(n, d, w).unwrap();
    EmbeddingPanel::compute(e, groups, &PanelOptions::default()).unwrap()
}

#[test]
fn isotropic_gaussian_rows_give_i1_near_one() {
    let (n, d, sigma) = (20_000, 10, 0.3);
    let w = gaussian(n, d, sigma, &[], 1);
    let p = panel(&w, n, d, None);
    // Z(a)/N has relative standard deviation sqrt((e^{2σ²} − e^{σ²})/N)/e^{σ²/2} for unit a.
    let s2 = sigma * sigma;
    let rsd = ((2.0 * s2).exp() - s2.exp()).sqrt() / (s2 / 2.0).exp() / (n as f64).sqrt();
    assert!(
        p.total.i1 > 1.0 - 8.0 * rsd,
        "I1 = {} (rsd {rsd})",
        p.total.i1
    );
    assert!(p.total.i2 < 4.0 * rsd, "I2 = {} (rsd {rsd})", p.total.i2);
    // And a strongly anisotropic (coned) Gaussian is far from isotropic.
    let coned = gaussian(n, d, sigma, &[3.0], 2);
    let q = panel(&coned, n, d, None);
    // Z(±e1) ≈ N·e^{±3}·e^{σ²/2}: I1 ≈ e^{−6} ≈ 0.0025.
    assert!(q.total.i1 < 0.01, "coned I1 = {}", q.total.i1);
    assert!(
        q.total.mean_cos > 0.5,
        "coned mean cos = {}",
        q.total.mean_cos
    );
}

#[test]
fn matches_an_f64_reference_to_1e6_whatever_the_eigenvector_signs() {
    for (seed, offset) in [(3u64, 0.0), (4, 0.8), (5, 2.5)] {
        let (n, d) = (700, 12);
        let w = gaussian(n, d, 0.7, &[offset, -offset / 2.0], seed);
        let p = panel(&w, n, d, None);
        for flip in [11u64, 12, 13] {
            let (i1, i2) = reference_isotropy(&w, n, d, flip);
            assert!(rel(p.total.i1, i1) < 1e-6, "I1 {} vs {i1}", p.total.i1);
            assert!(rel(p.total.i2, i2) < 1e-6, "I2 {} vs {i2}", p.total.i2);
        }
    }
}

/// More rows than one block of the panel's log-sum-exps (2,048): the blocks' log Z combined
/// agree with the all-f64 definition, over W and over its unit rows.
#[test]
fn several_blocks_of_rows_match_the_f64_reference() {
    let (n, d) = (5_000, 12);
    let w = gaussian(n, d, 0.7, &[0.9, -0.3], 41);
    let p = panel(&w, n, d, None);
    let (i1, i2) = reference_isotropy(&w, n, d, 5);
    assert!(rel(p.total.i1, i1) < 1e-6, "I1 {} vs {i1}", p.total.i1);
    assert!(rel(p.total.i2, i2) < 1e-6, "I2 {} vs {i2}", p.total.i2);
    let unit: Vec<f32> = w
        .chunks_exact(d)
        .flat_map(|r| {
            let norm = r.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
            r.iter().map(move |&x| (x as f64 / norm) as f32)
        })
        .collect();
    let (u1, u2) = reference_isotropy(&unit, n, d, 6);
    assert!(
        rel(p.total.i1_unit, u1) < 1e-5,
        "{} vs {u1}",
        p.total.i1_unit
    );
    assert!(
        rel(p.total.i2_unit, u2) < 1e-5,
        "{} vs {u2}",
        p.total.i2_unit
    );
    // The spectrum from the blocked gram against the Jacobi eigenvalues of the f64 gram.
    let (values, _) = jacobi(&gram(&w, n, d));
    let mut sigma: Vec<f64> = values.iter().map(|l| l.max(0.0).sqrt()).collect();
    sigma.sort_by(|a, b| b.total_cmp(a));
    assert!(rel(p.total.sv_max, sigma[0]) < 1e-6);
    for (k, s) in sigma.iter().enumerate() {
        assert!((p.total.sv_norm[k] - s / sigma[0]).abs() < 1e-6, "σ_{k}");
    }
}

#[test]
fn identical_rows_give_closed_forms() {
    let (n, d) = (50, 6);
    let v = [4.0f32, -8.0, 0.0, 16.0, 2.0, 1.0];
    let len = v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let w: Vec<f32> = (0..n).flat_map(|_| v).collect();
    let p = panel(&w, n, d, None);
    // Z(±v̂) = N e^{±|v|}, Z = N on the 2d−2 directions orthogonal to v.
    // I1 = Z(−v̂)/Z(v̂) = e^{−2|v|}. The projections are f32 (methods allow it), so log Z carries
    // an absolute error of about |w|·1e-7: the relative error of I1 is bounded by that, not 1e-6.
    let log_err = (p.total.i1.ln() + 2.0 * len).abs();
    assert!(
        log_err < 4e-7 * len,
        "I1 {} (log error {log_err:e})",
        p.total.i1
    );
    assert!(p.total.i1 < 1e-15);
    let z: Vec<f64> = [len.exp(), (-len).exp()]
        .into_iter()
        .chain(std::iter::repeat_n(1.0, 2 * d - 2))
        .collect();
    let mean = z.iter().sum::<f64>() / z.len() as f64;
    let std = (z.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / z.len() as f64).sqrt();
    assert!(rel(p.total.i2, std / mean) < 1e-6, "I2 {}", p.total.i2);
    assert!((p.total.mean_cos - 1.0).abs() < 1e-9);
    assert!((p.total.mean_cos_to_mean - 1.0).abs() < 1e-9);
    assert!(rel(p.total.mean_norm, len) < 1e-6);
    assert!(rel(p.total.sv_max, len * (n as f64).sqrt()) < 1e-6);
    assert!(p.total.sv_norm[1..].iter().all(|&s| s < 1e-6));
    assert!((p.total.effective_rank - 1.0).abs() < 1e-6);
}

#[test]
fn orthonormal_rows_give_closed_forms() {
    let d = 8;
    let w: Vec<f32> = (0..d * d)
        .map(|k| if k / d == k % d { 1.0 } else { 0.0 })
        .collect();
    let p = panel(&w, d, d, None);
    let e = std::f64::consts::E;
    let want = ((d - 1) as f64 + 1.0 / e) / ((d - 1) as f64 + e);
    assert!(rel(p.total.i1, want) < 1e-6, "I1 {} vs {want}", p.total.i1);
    assert!(p.total.sv_norm.iter().all(|&s| (s - 1.0).abs() < 1e-9));
    assert!(rel(p.total.effective_rank, d as f64) < 1e-9);
    assert!(p.total.mean_cos.abs() < 1e-12);
    assert!((p.total.mean_norm - 1.0).abs() < 1e-12);
}

#[test]
fn cone_statistics_match_brute_force() {
    let (n, d) = (300, 9);
    let w = gaussian(n, d, 1.0, &[1.5, 0.5], 7);
    let groups = RowGroups::from_ranks(&FrequencyGroups::new(n, GroupBounds::default()));
    let p = panel(&w, n, d, Some(&groups));
    let row = |i: usize| -> Vec<f64> { w[i * d..(i + 1) * d].iter().map(|&x| x as f64).collect() };
    let cos = |a: &[f64], b: &[f64]| {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
        let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
        dot / (na * nb)
    };
    let mut sum = 0.0;
    for i in 0..n {
        for j in 0..n {
            if i != j {
                sum += cos(&row(i), &row(j));
            }
        }
    }
    let brute = sum / (n * (n - 1)) as f64;
    assert!(
        rel(p.total.mean_cos, brute) < 1e-9,
        "{} vs {brute}",
        p.total.mean_cos
    );

    let mean: Vec<f64> = (0..d)
        .map(|k| (0..n).map(|i| row(i)[k]).sum::<f64>() / n as f64)
        .collect();
    let to_mean = (0..n).map(|i| cos(&row(i), &mean)).sum::<f64>() / n as f64;
    assert!(rel(p.total.mean_cos_to_mean, to_mean) < 1e-9);

    let (f, r) = (groups.members(Group::Frequent), groups.members(Group::Rare));
    let mut rf = 0.0;
    for &a in &r {
        for &b in &f {
            rf += cos(&row(a as usize), &row(b as usize));
        }
    }
    let rf = rf / (r.len() * f.len()) as f64;
    assert!(rel(p.rare_frequent_cos.unwrap(), rf) < 1e-9);

    // Each group's numbers are those of its rows taken as a matrix on their own, against the
    // reference isotropy.
    let gs = p.groups.as_ref().unwrap();
    for (k, g) in Group::ALL.into_iter().enumerate() {
        let m = groups.members(g);
        let sub: Vec<f32> = m
            .iter()
            .flat_map(|&i| row(i as usize))
            .map(|x| x as f32)
            .collect();
        let (i1, i2) = reference_isotropy(&sub, m.len(), d, 99);
        assert_eq!(gs[k].rows, m.len());
        assert!(rel(gs[k].i1, i1) < 1e-6, "{g}: I1 {} vs {i1}", gs[k].i1);
        assert!(rel(gs[k].i2, i2) < 1e-6, "{g}: I2 {} vs {i2}", gs[k].i2);
        let norm = m
            .iter()
            .map(|&i| row(i as usize).iter().map(|x| x * x).sum::<f64>().sqrt())
            .sum::<f64>()
            / m.len() as f64;
        assert!(rel(gs[k].mean_norm, norm) < 1e-9);
    }
}

/// IsoScore by its definition (Rudman et al. 2022), from scratch: centre the rows in f64, the
/// covariance's eigenvalues by Jacobi, then the defect and φ.
fn reference_isoscore(w: &[f32], n: usize, d: usize) -> f64 {
    let mean: Vec<f64> = (0..d)
        .map(|k| (0..n).map(|i| w[i * d + k] as f64).sum::<f64>() / n as f64)
        .collect();
    let mut cov = vec![vec![0.0; d]; d];
    for i in 0..n {
        for a in 0..d {
            for b in 0..d {
                cov[a][b] +=
                    (w[i * d + a] as f64 - mean[a]) * (w[i * d + b] as f64 - mean[b]) / n as f64;
            }
        }
    }
    let (v, _) = jacobi(&cov);
    let dd = d as f64;
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let hat: Vec<f64> = v.iter().map(|x| dd.sqrt() * x.max(0.0) / norm).collect();
    let defect =
        hat.iter().map(|h| (h - 1.0).powi(2)).sum::<f64>().sqrt() / (2.0 * (dd - dd.sqrt())).sqrt();
    let phi = (dd - defect * defect * (dd - dd.sqrt())).powi(2) / (dd * dd);
    (dd * phi - 1.0) / (dd - 1.0)
}

#[test]
fn isoscore_is_one_for_a_gaussian_cloud_k_minus_one_over_d_minus_one_on_k_axes_zero_on_a_line() {
    // An isotropic Gaussian cloud, shifted far off the origin (a cone): IsoScore sees the shape,
    // not the offset, so ≈ 1, while the mean cosine sees the cone.
    let (n, d) = (20_000, 10);
    let w = gaussian(n, d, 0.3, &[2.0, -1.0], 21);
    let p = panel(&w, n, d, None);
    assert!(p.total.isoscore > 0.99, "IsoScore {}", p.total.isoscore);
    assert!(p.total.mean_cos > 0.5, "mean cos {}", p.total.mean_cos);

    // Points ±c·e_j, j < k, equally many: variance c²/k on k axes, 0 on the rest, whatever the
    // offset. IsoScore = (k − 1)/(d − 1) exactly.
    let d = 12;
    for k in [1usize, 2, 5, 12] {
        let mut w = Vec::new();
        for j in 0..k {
            for sign in [1.0f32, -1.0] {
                for _copy in 0..3 {
                    let mut row = vec![0.25f32; d];
                    row[j] += sign * 4.0;
                    w.extend(row);
                }
            }
        }
        let n = w.len() / d;
        let p = panel(&w, n, d, None);
        let want = (k as f64 - 1.0) / (d as f64 - 1.0);
        assert!(
            (p.total.isoscore - want).abs() < 1e-9,
            "k = {k}: IsoScore {} vs {want}",
            p.total.isoscore
        );
    }

    // Points on a line through an offset: one dimension used, IsoScore 0.
    let mut rng = Rng(5);
    let dir = [0.3f64, -0.5, 0.2, 0.7, 0.1, -0.35];
    let w: Vec<f32> = (0..500)
        .flat_map(|_| {
            let t = 3.0 * rng.normal();
            dir.map(|x| (1.0 + t * x) as f32)
        })
        .collect();
    let p = panel(&w, 500, 6, None);
    assert!(p.total.isoscore < 1e-6, "IsoScore {}", p.total.isoscore);

    // A general anisotropic cloud, per group too, against the from-scratch reference.
    let (n, d) = (600, 9);
    let mut w = gaussian(n, d, 1.0, &[1.0, 0.5], 8);
    for (k, x) in w.iter_mut().enumerate() {
        *x *= 1.0 + (k % d) as f32 * 0.4;
    }
    let groups = RowGroups::from_ranks(&FrequencyGroups::new(n, GroupBounds::default()));
    let p = panel(&w, n, d, Some(&groups));
    let want = reference_isoscore(&w, n, d);
    assert!(
        rel(p.total.isoscore, want) < 1e-9,
        "{} vs {want}",
        p.total.isoscore
    );
    assert!(
        want > 0.2 && want < 0.95,
        "a cloud between the extremes: {want}"
    );
    for (k, g) in Group::ALL.into_iter().enumerate() {
        let m = groups.members(g);
        let sub: Vec<f32> = m
            .iter()
            .flat_map(|&i| w[i as usize * d..(i as usize + 1) * d].to_vec())
            .collect();
        let want = reference_isoscore(&sub, m.len(), d);
        let got = p.groups.as_ref().unwrap()[k].isoscore;
        assert!(rel(got, want) < 1e-9, "{g}: {got} vs {want}");
    }
}

/// Issue #38: IsoScore beside the value a random matrix of the set's size has. The closed form
/// of methods.md §2, and a random Gaussian matrix measured: within a few thousandths of it.
#[test]
fn isoscore_reads_its_random_baseline_on_a_random_matrix() {
    use conelab_metrics::embedding::isoscore_random;
    assert!((isoscore_random(2_000, 128) - 0.939).abs() < 5e-4);
    assert!((isoscore_random(10_000, 128) - 0.987).abs() < 5e-4);
    assert!(isoscore_random(1, 128).is_nan() && isoscore_random(100, 1).is_nan());
    for (n, d) in [(2_000, 32), (400, 16)] {
        let w = gaussian(n, d, 0.02, &[0.0], 77);
        let p = panel(&w, n, d, None);
        let want = isoscore_random(n, d);
        assert!(
            (p.total.isoscore - want).abs() < 0.01,
            "{n} × {d}: IsoScore {} vs random {want}",
            p.total.isoscore
        );
        assert_eq!(p.total.isoscore_random, want);
        // And a matrix that has left its initialisation (half its axes unused) does not read it.
        let squashed: Vec<f32> = w
            .iter()
            .enumerate()
            .map(|(k, &x)| if k % d < d / 2 { x } else { x * 0.01 })
            .collect();
        assert!(panel(&squashed, n, d, None).total.isoscore < want - 0.3);
    }
}

#[test]
fn unit_row_isotropy_ignores_row_norms_and_zero_rows() {
    let (n, d) = (800, 10);
    let w = gaussian(n, d, 0.6, &[1.2, -0.4], 31);
    let p = panel(&w, n, d, None);
    // By definition: the reference isotropy of the rows normalised in f64.
    let unit: Vec<f32> = w
        .chunks_exact(d)
        .flat_map(|r| {
            let norm = r.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
            r.iter().map(move |&x| (x as f64 / norm) as f32)
        })
        .collect();
    let (i1, i2) = reference_isotropy(&unit, n, d, 77);
    assert!(
        rel(p.total.i1_unit, i1) < 1e-5,
        "{} vs {i1}",
        p.total.i1_unit
    );
    assert!(
        rel(p.total.i2_unit, i2) < 1e-5,
        "{} vs {i2}",
        p.total.i2_unit
    );

    // Every row rescaled by its own factor in [0.01, 10]: I(W) moves, unit-row I1/I2 do not.
    let mut rng = Rng(9);
    let scaled: Vec<f32> = w
        .chunks_exact(d)
        .flat_map(|r| {
            let k = (0.01f64.ln() + rng.uniform() * 1000f64.ln()).exp() as f32;
            r.iter().map(move |&x| x * k).collect::<Vec<_>>()
        })
        .collect();
    let q = panel(&scaled, n, d, None);
    assert!(rel(q.total.i1_unit, p.total.i1_unit) < 1e-5);
    assert!(rel(q.total.i2_unit, p.total.i2_unit) < 1e-5);
    assert!(
        rel(q.total.i1, p.total.i1) > 0.1,
        "{} vs {}",
        q.total.i1,
        p.total.i1
    );

    // Zero rows are left out: appending some changes neither.
    let mut padded = w.clone();
    padded.extend(std::iter::repeat_n(0.0f32, 50 * d));
    let z = panel(&padded, n + 50, d, None);
    assert!(rel(z.total.i1_unit, p.total.i1_unit) < 1e-6);
    assert!(rel(z.total.i2_unit, p.total.i2_unit) < 1e-6);

    // A narrow cone of small rows (mean cosine ≈ 0.95, norm 0.15): I(W) looks isotropic, the
    // scale-free measures do not (methods.md §2's warning).
    let cone = gaussian(n, d, 0.015, &[0.15], 4);
    let c = panel(&cone, n, d, None);
    assert!(c.total.i1 > 0.6, "I1 {}", c.total.i1);
    assert!(c.total.i1_unit < 0.3, "unit-row I1 {}", c.total.i1_unit);
    assert!(c.total.mean_cos > 0.7, "mean cos {}", c.total.mean_cos);
}

#[test]
fn scattered_group_rows_give_the_same_numbers_as_contiguous_ones() {
    // A foreign matrix whose rows are not in rank order: groups from counts gather rows.
    let (n, d) = (200, 7);
    let w = gaussian(n, d, 1.0, &[0.7], 8);
    let counts: Vec<u64> = (0..n as u64).map(|i| (i * 7919) % 1000).collect();
    let groups = RowGroups::from_counts(&counts, GroupBounds::default());
    let p = panel(&w, n, d, Some(&groups));
    let rare = groups.members(Group::Rare);
    let sub: Vec<f32> = rare
        .iter()
        .flat_map(|&i| w[i as usize * d..(i as usize + 1) * d].to_vec())
        .collect();
    let alone = panel(&sub, rare.len(), d, None);
    let got = &p.groups.as_ref().unwrap()[2];
    assert!(rel(got.i1, alone.total.i1) < 1e-9);
    assert!(rel(got.effective_rank, alone.total.effective_rank) < 1e-9);
}

#[test]
fn singular_values_match_power_iteration_and_jacobi() {
    let (n, d) = (120, 10);
    let w = gaussian(n, d, 1.0, &[2.0, 1.0, -1.0], 9);
    let p = panel(&w, n, d, None);
    let g = gram(&w, n, d);
    // Power iteration on WᵀW for the largest singular value.
    let mut x = vec![1.0; d];
    let mut lambda = 0.0;
    for _ in 0..2000 {
        let y: Vec<f64> = (0..d)
            .map(|i| (0..d).map(|j| g[i][j] * x[j]).sum())
            .collect();
        let norm = y.iter().map(|v| v * v).sum::<f64>().sqrt();
        lambda = norm;
        x = y.into_iter().map(|v| v / norm).collect();
    }
    assert!(
        rel(p.total.sv_max, lambda.sqrt()) < 1e-9,
        "{} vs {}",
        p.total.sv_max,
        lambda.sqrt()
    );
    let (values, _) = jacobi(&g);
    for k in 0..d {
        let want = values[k].max(0.0).sqrt() / values[0].sqrt();
        assert!(
            rel(p.total.sv_norm[k], want) < 1e-6,
            "σ{k}: {} vs {want}",
            p.total.sv_norm[k]
        );
    }
    let total: f64 = values.iter().sum();
    let entropy: f64 = values.iter().map(|l| l / total).map(|q| -q * q.ln()).sum();
    assert!(rel(p.total.effective_rank, entropy.exp()) < 1e-9);
}

#[test]
fn projections_are_the_top_axes_with_a_fixed_sign() {
    let (n, d) = (400, 6);
    let w = gaussian(n, d, 1.0, &[3.0, 0.0, 1.0], 10);
    let e = Embeddings::new(n, d, &w).unwrap();
    let row = |i: usize| -> Vec<f64> { w[i * d..(i + 1) * d].iter().map(|&x| x as f64).collect() };
    for mode in [ProjectionMode::Uncentred, ProjectionMode::Centred] {
        let options = PanelOptions {
            projection: Some(mode),
            also_centred: false,
            scale_free: true,
            threads: Threads::Sequential,
        };
        let p = EmbeddingPanel::compute(e, None, &options).unwrap();
        let proj = p.projection.unwrap();
        assert_eq!(proj.mode, mode);
        let mean: Vec<f64> = (0..d)
            .map(|k| (0..n).map(|i| row(i)[k]).sum::<f64>() / n as f64)
            .collect();
        let m = match mode {
            ProjectionMode::Uncentred => gram(&w, n, d),
            ProjectionMode::Centred => {
                let g = gram(&w, n, d);
                (0..d)
                    .map(|i| {
                        (0..d)
                            .map(|j| g[i][j] / n as f64 - mean[i] * mean[j])
                            .collect()
                    })
                    .collect()
            }
        };
        let (_, vecs) = jacobi(&m);
        for axis in 0..2 {
            let coords: Vec<f64> = (0..n)
                .map(|i| {
                    let r = row(i);
                    (0..d)
                        .map(|k| {
                            let x = if mode == ProjectionMode::Centred {
                                r[k] - mean[k]
                            } else {
                                r[k]
                            };
                            x * vecs[k][axis]
                        })
                        .sum()
                })
                .collect();
            let sign = if coords.iter().sum::<f64>() < 0.0 {
                -1.0
            } else {
                1.0
            };
            for i in 0..n {
                let got = proj.points[i][axis] as f64;
                assert!(
                    (got - sign * coords[i]).abs() < 1e-4 * (1.0 + coords[i].abs()),
                    "{mode:?} axis {axis} row {i}"
                );
            }
            assert!(proj.points.iter().map(|p| p[axis] as f64).sum::<f64>() >= 0.0);
        }
    }
}

#[test]
fn isotropy_from_log_z_is_shift_invariant_and_exact() {
    let (i1, i2) = isotropy_from_log_z(&[0.0, 2f64.ln()]);
    assert!((i1 - 0.5).abs() < 1e-15);
    // Z = {1, 2}: std 0.5, mean 1.5.
    assert!((i2 - 1.0 / 3.0).abs() < 1e-15);
    let (j1, j2) = isotropy_from_log_z(&[1000.0, 1000.0 + 2f64.ln()]);
    assert!((j1 - i1).abs() < 1e-12 && (j2 - i2).abs() < 1e-12);
}

#[test]
fn neighbours_match_brute_force() {
    let (n, d) = (500, 16);
    let w = gaussian(n, d, 1.0, &[0.5], 11);
    let e = Embeddings::new(n, d, &w).unwrap();
    let row = |i: usize| -> Vec<f64> { w[i * d..(i + 1) * d].iter().map(|&x| x as f64).collect() };
    for threads in [Threads::All, Threads::Sequential] {
        let index = NeighborIndex::new(e, threads);
        for q in [0usize, 17, 250, 499] {
            let qr = row(q);
            let qn = qr.iter().map(|x| x * x).sum::<f64>().sqrt();
            let mut cos: Vec<(f64, usize)> = (0..n)
                .filter(|&i| i != q)
                .map(|i| {
                    let r = row(i);
                    let rn = r.iter().map(|x| x * x).sum::<f64>().sqrt();
                    (
                        r.iter().zip(&qr).map(|(a, b)| a * b).sum::<f64>() / (rn * qn),
                        i,
                    )
                })
                .collect();
            cos.sort_by(|a, b| b.0.total_cmp(&a.0));
            let got = index.query(q as u32, 10, Similarity::Cosine);
            assert_eq!(got.len(), 10);
            for (g, want) in got.iter().zip(&cos) {
                assert_eq!(g.id as usize, want.1, "query {q}");
                assert!((g.score as f64 - want.0).abs() < 1e-5);
            }
            let mut dist: Vec<(f64, usize)> = (0..n)
                .filter(|&i| i != q)
                .map(|i| {
                    (
                        row(i)
                            .iter()
                            .zip(&qr)
                            .map(|(a, b)| (a - b).powi(2))
                            .sum::<f64>()
                            .sqrt(),
                        i,
                    )
                })
                .collect();
            dist.sort_by(|a, b| a.0.total_cmp(&b.0));
            let got = index.query(q as u32, 10, Similarity::Euclidean);
            for (g, want) in got.iter().zip(&dist) {
                assert_eq!(g.id as usize, want.1, "euclidean query {q}");
                assert!((g.score as f64 - want.0).abs() < 1e-4 * (1.0 + want.0));
            }
        }
        // Blocked all-pairs top-k agrees with single queries.
        let all = index.all_top_k(5);
        for q in [3u32, 333] {
            let single: Vec<u32> = index
                .query(q, 5, Similarity::Cosine)
                .iter()
                .map(|nb| nb.id)
                .collect();
            assert_eq!(all[q as usize], single);
        }
    }
}

#[test]
fn class_precision_is_one_for_separated_classes_and_low_for_noise() {
    // Three tight clusters on orthogonal axes: every neighbour is in the same class.
    let (per, d) = (30, 6);
    let mut rng = Rng(12);
    let mut w = Vec::new();
    let mut classes = Vec::new();
    for c in 0..3 {
        for _ in 0..per {
            for k in 0..d {
                let base = if k == 2 * c { 5.0 } else { 0.0 };
                w.push((base + 0.1 * rng.normal()) as f32);
            }
            classes.push(Some(c as u32));
        }
    }
    let n = 3 * per;
    let groups = RowGroups::from_ranks(&FrequencyGroups::new(n, GroupBounds::default()));
    let index = NeighborIndex::new(Embeddings::new(n, d, &w).unwrap(), Threads::All);
    let p = class_precision(&index, &classes, &groups, 5).unwrap();
    assert_eq!(p.total, 1.0);
    // Random classes on the same rows: about 1/3.
    let random: Vec<Option<u32>> = (0..n).map(|_| Some((rng.next_u64() % 3) as u32)).collect();
    let q = class_precision(&index, &random, &groups, 5).unwrap();
    assert!(q.total < 0.6, "{}", q.total);
    // Rows without a class are skipped; a wrong-length class list is an error.
    assert!(class_precision(&index, &classes[1..], &groups, 5).is_err());
}

/// The same matrix gives the same bits on every evaluation, on all threads and on one (issue:
/// two checkpoints with bit-identical frozen Rare rows reported mean cosines that differed in
/// the last digit: parallel sums in a varying order).
#[test]
fn the_same_matrix_gives_bit_identical_metrics_every_time() {
    let (n, d) = (6_000, 24);
    let w = gaussian(n, d, 0.7, &[0.5, -0.2], 17);
    let groups = RowGroups::from_ranks(&FrequencyGroups::new(n, GroupBounds::default()));
    let e = Embeddings::new(n, d, &w).unwrap();
    let run = |threads: Threads| {
        let options = PanelOptions {
            threads,
            ..PanelOptions::default()
        };
        format!(
            "{:?}",
            EmbeddingPanel::compute(e, Some(&groups), &options).unwrap()
        )
    };
    let first = run(Threads::All);
    for round in 0..6 {
        // Compared whole, reported briefly (the panel's text is long).
        assert!(
            run(Threads::All) == first,
            "evaluation {round} on all threads differs"
        );
    }
    assert!(run(Threads::Sequential) == first, "one thread differs");
}

/// All-but-the-top and the rogue share in the panel (from the moments it already has) against a
/// direct computation: the covariance's eigenvectors by Jacobi, each centred row projected off
/// the top D by hand, the mean cosine of the residuals and each coordinate's contribution to the
/// mean cosine pair by pair. d = 101 removes D = ⌈101/100⌉ = 2 components; a planted direction
/// with a large spread and an offset make the numbers far from their isotropic values.
#[test]
fn all_but_the_top_and_rogue_share_match_a_direct_computation() {
    let (n, d) = (160, 101);
    let mut rng = Rng(17);
    let w: Vec<f32> = (0..n * d)
        .map(|k| {
            let c = k % d;
            let spread = match c {
                0 => 9.0,
                1 => 5.0,
                _ => 1.0,
            };
            (spread * rng.normal() + if c == 7 { 4.0 } else { 0.0 }) as f32
        })
        .collect();
    let counts: Vec<u64> = (0..n as u64).map(|i| 10_000 / (i + 1)).collect();
    let groups = RowGroups::from_counts(&counts, GroupBounds::default());
    let p = panel(&w, n, d, Some(&groups));
    let reference = |rows: &[usize]| -> (f64, f64, f64) {
        let m = rows.len();
        let mean: Vec<f64> = (0..d)
            .map(|k| rows.iter().map(|&i| w[i * d + k] as f64).sum::<f64>() / m as f64)
            .collect();
        let centred: Vec<Vec<f64>> = rows
            .iter()
            .map(|&i| (0..d).map(|k| w[i * d + k] as f64 - mean[k]).collect())
            .collect();
        let mut cov = vec![vec![0.0; d]; d];
        for x in &centred {
            for a in 0..d {
                for b in 0..d {
                    cov[a][b] += x[a] * x[b] / m as f64;
                }
            }
        }
        let (values, vectors) = jacobi(&cov);
        let top = values[0] + values[1];
        let total: f64 = values.iter().map(|v| v.max(0.0)).sum();
        let residual: Vec<Vec<f64>> = centred
            .iter()
            .map(|x| {
                let mut r = x.clone();
                for c in 0..2 {
                    let along: f64 = (0..d).map(|k| x[k] * vectors[k][c]).sum();
                    for k in 0..d {
                        r[k] -= along * vectors[k][c];
                    }
                }
                r
            })
            .collect();
        let cos = |a: &[f64], b: &[f64]| {
            let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            dot / (a.iter().map(|x| x * x).sum::<f64>() * b.iter().map(|x| x * x).sum::<f64>())
                .sqrt()
        };
        let mut after = 0.0;
        for i in 0..m {
            for j in 0..m {
                if i != j {
                    after += cos(&residual[i], &residual[j]);
                }
            }
        }
        after /= (m * (m - 1)) as f64;
        // Coordinate k's contribution: mean over pairs of x̂_k ŷ_k.
        let units: Vec<Vec<f64>> = rows
            .iter()
            .map(|&i| {
                let r: Vec<f64> = (0..d).map(|k| w[i * d + k] as f64).collect();
                let norm = r.iter().map(|x| x * x).sum::<f64>().sqrt();
                r.into_iter().map(|x| x / norm).collect()
            })
            .collect();
        let mut contribution = vec![0.0; d];
        for i in 0..m {
            for j in 0..m {
                if i != j {
                    for k in 0..d {
                        contribution[k] += units[i][k] * units[j][k] / (m * (m - 1)) as f64;
                    }
                }
            }
        }
        let all: f64 = contribution.iter().sum();
        contribution.sort_by(|a, b| b.total_cmp(a));
        (
            top / total,
            after,
            contribution[..3].iter().sum::<f64>() / all,
        )
    };
    let all: Vec<usize> = (0..n).collect();
    let sets = [
        (&p.total, all),
        (&p.groups.as_ref().unwrap()[0], (0..48).collect()),
        (&p.groups.as_ref().unwrap()[2], (128..160).collect()),
    ];
    for (stats, rows) in sets {
        let (top, after, rogue) = reference(&rows);
        assert!(
            rel(stats.abtt_top_variance, top) < 1e-9,
            "{} vs {top}",
            stats.abtt_top_variance
        );
        assert!(
            (stats.abtt_mean_cos - after).abs() < 1e-9,
            "{} vs {after}",
            stats.abtt_mean_cos
        );
        assert!(
            rel(stats.rogue_share, rogue) < 1e-9,
            "{} vs {rogue}",
            stats.rogue_share
        );
    }
    // The planted directions make the top two components most of the variance, and the offset on
    // coordinate 7 most of the mean cosine.
    assert!(p.total.abtt_top_variance > 0.4);
    assert!(p.total.rogue_share > 0.6);
}
