//! The all-pairs measures of the later literature on a set of rows (methods.md §2, "Measures
//! from later literature"), each a pure function of the rows:
//!
//! - **TwoNN intrinsic dimension** (Facco et al. 2017): for each row μ = r₂/r₁ (second over first
//!   nearest-neighbour euclidean distance, exact), d̂ = n / Σ ln μ over the n rows with r₁ > 0;
//!   duplicate rows (r₁ = 0) left out and counted. Per group, within the group.
//! - **Neighbour frequency mix** (Gong et al. 2018): per group, the mean over its rows of the
//!   fraction of the row's top-10 cosine neighbours (over all N rows) in the same group.
//!
//! Both need all-pairs nearest neighbours, O(N²d), so they form the live panel's
//! [`second_tier`], computed less often than the main panel. Both run as blocked matrix products
//! (a block of rows against all rows, nothing N × N held) with the selection done per block, in
//! parallel over blocks under [`Threads::All`].

use std::time::Instant;

use conelab_data::Group;
use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;
use serde::Serialize;

use crate::Threads;
use crate::matrix::{Embeddings, MatrixError, RowGroups, RowSet};

/// The TwoNN estimate of a set's intrinsic dimension.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TwoNn {
    /// d̂ = n / Σ ln(r₂/r₁); NaN with fewer than two rows used.
    pub dimension: f64,
    /// Rows in the estimate (r₁ > 0).
    pub used: usize,
    /// Rows with an exact duplicate (r₁ = 0), left out.
    pub duplicates: usize,
}

impl TwoNn {
    /// d̂ = n / Σ ln μ from the per-row outcomes, summed in row order (so that any two exact
    /// computations of the same r₁, r₂ agree to the bit).
    fn from_nearest(nearest: impl IntoIterator<Item = (f64, f64)>) -> Self {
        let (mut log_sum, mut used, mut duplicates) = (0.0f64, 0usize, 0usize);
        for (r1, r2) in nearest {
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
}

/// Euclidean distance of two rows, summed directly in f64 (no cancellation: identical rows give
/// exactly 0).
fn direct_distance(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x - y).powi(2))
        .sum::<f64>()
        .sqrt()
}

/// Rows per block of a blocked all-pairs pass: a block's scores against all `n` rows stay under
/// 32 MiB (several blocks are in flight under [`Threads::All`]), and there are enough blocks to
/// keep every thread busy.
fn block_rows(n: usize, bytes_per_value: usize, threads: Threads) -> usize {
    const BLOCK_BYTES: usize = 32 << 20;
    let by_memory = BLOCK_BYTES / (n.max(1) * bytes_per_value);
    let workers = match threads {
        Threads::All => rayon::current_num_threads().max(1),
        Threads::Sequential => 1,
    };
    by_memory.min(n.div_ceil(4 * workers)).clamp(32, 512)
}

/// `f(first row, rows)` over consecutive blocks of `block` rows of `0..n`, results in block
/// order; blocks in parallel under [`Threads::All`] (each block's matrix product then runs
/// single-threaded: the parallelism is across blocks).
fn map_blocks<T: Send>(
    n: usize,
    block: usize,
    threads: Threads,
    f: impl Fn(usize, usize) -> T + Sync + Send,
) -> Vec<T> {
    let starts: Vec<usize> = (0..n).step_by(block.max(1)).collect();
    let run = |&start: &usize| f(start, block.min(n - start));
    match threads {
        Threads::All => starts.par_iter().map(run).collect(),
        Threads::Sequential => starts.iter().map(run).collect(),
    }
}

/// [`TwoNn`] of `w`'s rows, by exact euclidean nearest neighbours: for each row μ = r₂/r₁,
/// d̂ = n / Σ ln μ over the n rows with r₁ > 0, rows with r₁ = 0 (an identical row exists) left
/// out and counted.
///
/// O(n²d) as blocked f64 matrix products, d²(a, b) = ‖a‖² + ‖b‖² − 2a·b, nothing n × n held. That
/// form cancels for near pairs, so it only picks candidates: every row whose approximate d² is
/// within twice the rounding bound of the second smallest (which the true two nearest always
/// are), and the candidates' distances are then recomputed directly from the rows. The result is
/// the same as an all-pairs loop over direct distances; identical rows give r = 0 exactly.
pub fn two_nn(w: Embeddings<'_>, threads: Threads) -> TwoNn {
    let (n, d) = (w.n(), w.d());
    if n < 2 {
        return TwoNn::from_nearest([]);
    }
    // f32 → f64 is exact, so the direct distances below are those of the stored rows.
    let x: Vec<f64> = w.data().iter().map(|&v| f64::from(v)).collect();
    let rows = MatRef::from_row_major_slice(&x, n, d);
    let sq: Vec<f64> = x
        .chunks_exact(d)
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect();
    let max_sq = sq.iter().copied().fold(0.0f64, f64::max);
    // |computed − true| of ‖a‖² + ‖b‖² − 2a·b is at most (d + 3)·ε·(‖a‖² + ‖b‖²) in any
    // summation order (Higham's γ_d bounds for the dot products and norms, two more roundings);
    // doubled for margin.
    let slack = 2.0 * (d as f64 + 4.0) * f64::EPSILON;
    let block = block_rows(n, std::mem::size_of::<f64>(), threads);
    let nearest: Vec<Vec<(f64, f64)>> = map_blocks(n, block, threads, |start, count| {
        let mut dots = vec![0.0f64; n * count];
        matmul(
            MatMut::from_column_major_slice_mut(&mut dots, n, count),
            Accum::Replace,
            rows,
            rows.subrows(start, count).transpose(),
            1.0,
            Par::Seq,
        );
        (0..count)
            .map(|c| {
                let i = start + c;
                let tol = slack * (sq[i] + max_sq);
                nearest_two(&x, d, i, &dots[c * n..(c + 1) * n], &sq, tol)
            })
            .collect()
    });
    TwoNn::from_nearest(nearest.into_iter().flatten())
}

/// (r₁, r₂) of row `i` (∞ where missing), from its dot products with every row: the approximate
/// d² select the candidates, direct distances decide.
fn nearest_two(x: &[f64], d: usize, i: usize, dots: &[f64], sq: &[f64], tol: f64) -> (f64, f64) {
    let approx = |j: usize| sq[i] + sq[j] - 2.0 * dots[j];
    let (mut a1, mut a2) = (f64::INFINITY, f64::INFINITY);
    for j in (0..dots.len()).filter(|&j| j != i) {
        let v = approx(j);
        if v < a1 {
            a2 = a1;
            a1 = v;
        } else if v < a2 {
            a2 = v;
        }
    }
    // The two rows behind a1, a2 are truly within a2 + tol, so the true second smallest is too,
    // and each of the true two nearest has an approximate d² within a2 + 2·tol.
    let bound = a2 + 2.0 * tol;
    let row = |j: usize| &x[j * d..(j + 1) * d];
    let (mut r1, mut r2) = (f64::INFINITY, f64::INFINITY);
    for j in (0..dots.len()).filter(|&j| j != i && approx(j) <= bound) {
        let dist = direct_distance(row(i), row(j));
        if dist < r1 {
            r2 = r1;
            r1 = dist;
        } else if dist < r2 {
            r2 = dist;
        }
    }
    (r1, r2)
}

/// The error for a per-row list whose length is not the matrix's.
fn check_groups(w: Embeddings<'_>, groups: &RowGroups) -> Result<(), MatrixError> {
    if groups.len() != w.n() {
        return Err(MatrixError::RowCount {
            what: "the group assignment".into(),
            got: groups.len(),
            n: w.n(),
        });
    }
    Ok(())
}

/// [`two_nn`] within each group (Frequent, Medium, Rare): each group's rows are the whole set,
/// so r₁ and r₂ are distances to rows of the same group. A group with under three rows has
/// dimension NaN.
pub fn two_nn_groups(
    w: Embeddings<'_>,
    groups: &RowGroups,
    threads: Threads,
) -> Result<[TwoNn; 3], MatrixError> {
    check_groups(w, groups)?;
    Ok(Group::ALL.map(|g| two_nn(RowSet::new(w, &groups.members(g)).view(), threads)))
}

/// Neighbours per row in the live panel's frequency mix (methods.md: top-10).
pub const NEIGHBOUR_MIX_K: usize = 10;

/// The neighbour frequency mix (Gong et al. 2018) of a matrix and its groups.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NeighbourMix {
    /// Neighbours asked for per row.
    pub k: usize,
    /// Per group (Frequent, Medium, Rare): mean over the group's counted rows i of
    /// |{j ∈ top-k(i) : group(j) = group(i)}| / |top-k(i)|; NaN for a group with no counted row.
    pub same_group: [f64; 3],
    /// Rows counted per group (non-zero rows with at least one neighbour).
    pub rows: [usize; 3],
    /// Zero rows per group, left out both as rows and as neighbours (their cosine is undefined).
    pub zero_rows: [usize; 3],
}

/// [`NeighbourMix`]: for every non-zero row i, top-k(i) = the `k` non-zero rows j ≠ i of
/// highest cosine (ties to the lower row), over all N rows; per group g,
/// mix_g = mean over i ∈ g of |{j ∈ top-k(i) : j ∈ g}| / |top-k(i)| (|top-k(i)| < k only when
/// fewer rows exist). A frequency-coded space has high same-group fractions; where groups do not
/// matter to the geometry, mix_g ≈ the share of rows in g.
///
/// Cosines are f32 products of the unit rows (as [`crate::NeighborIndex`] scores them), by
/// blocked matrix products, nothing N × N held; the top k kept per row on the fly.
pub fn neighbour_frequency_mix(
    w: Embeddings<'_>,
    groups: &RowGroups,
    k: usize,
    threads: Threads,
) -> Result<NeighbourMix, MatrixError> {
    check_groups(w, groups)?;
    let d = w.d();
    let mut zero_rows = [0usize; 3];
    let mut group_of = Vec::with_capacity(w.n());
    let mut unit = Vec::with_capacity(w.n() * d);
    for i in 0..w.n() {
        let row = w.row(i);
        let g = groups.group_of(i) as usize;
        let norm = row
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt();
        if norm == 0.0 {
            zero_rows[g] += 1;
            continue;
        }
        group_of.push(g);
        unit.extend(row.iter().map(|&v| (f64::from(v) / norm) as f32));
    }
    let m = group_of.len();
    let mut sum = [0.0f64; 3];
    let mut rows = [0usize; 3];
    if m > 0 && k > 0 {
        let all = MatRef::from_row_major_slice(&unit, m, d);
        let block = block_rows(m, std::mem::size_of::<f32>(), threads);
        let fractions = map_blocks(m, block, threads, |start, count| {
            let mut scores = vec![0.0f32; m * count];
            matmul(
                MatMut::from_column_major_slice_mut(&mut scores, m, count),
                Accum::Replace,
                all,
                all.subrows(start, count).transpose(),
                1.0,
                Par::Seq,
            );
            let mut top = Vec::with_capacity(k + 1);
            let mut fractions = Vec::with_capacity(count);
            for c in 0..count {
                let i = start + c;
                top_k_into(&scores[c * m..(c + 1) * m], k, i, &mut top);
                if !top.is_empty() {
                    let same = top
                        .iter()
                        .filter(|&&(j, _)| group_of[j] == group_of[i])
                        .count();
                    fractions.push((group_of[i], same as f64 / top.len() as f64));
                }
            }
            fractions
        });
        // Summed in row order, so the figure does not depend on the blocks or the threads.
        for (g, fraction) in fractions.into_iter().flatten() {
            sum[g] += fraction;
            rows[g] += 1;
        }
    }
    Ok(NeighbourMix {
        k,
        same_group: std::array::from_fn(|g| {
            if rows[g] == 0 {
                f64::NAN
            } else {
                sum[g] / rows[g] as f64
            }
        }),
        rows,
        zero_rows,
    })
}

/// The `k` highest of `scores` other than index `exclude`, best first, ties to the lower index,
/// into `top` (reused between rows). One pass: a score not above the current k-th costs one
/// comparison.
fn top_k_into(scores: &[f32], k: usize, exclude: usize, top: &mut Vec<(usize, f32)>) {
    top.clear();
    if k == 0 {
        return;
    }
    for (j, &s) in scores.iter().enumerate() {
        if j == exclude {
            continue;
        }
        if top.len() == k {
            match top.last() {
                Some(&(_, kth)) if s > kth => {
                    top.pop();
                }
                _ => continue,
            }
        }
        // After every kept score ≥ s: equal scores keep the lower index first.
        let at = top.iter().position(|&(_, t)| s > t).unwrap_or(top.len());
        top.insert(at, (j, s));
    }
}

/// Wall-clock seconds of each part of the [`SecondTier`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SecondTierSeconds {
    pub neighbour_mix: f64,
    pub two_nn: f64,
}

/// The live panel's second tier (methods.md §2, "Measures from later literature"): the measures
/// that need all-pairs nearest neighbours, so are computed less often than the main panel.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SecondTier {
    /// [`neighbour_frequency_mix`] with k = [`NEIGHBOUR_MIX_K`].
    pub neighbour_mix: NeighbourMix,
    /// [`two_nn_groups`]: TwoNN intrinsic dimension within Frequent, Medium, Rare.
    pub two_nn: [TwoNn; 3],
    pub seconds: SecondTierSeconds,
}

/// The whole [`SecondTier`] of `w` and its groups. Cost O(N²d) for the neighbour mix plus
/// O(Σ_g n_g²·d) for TwoNN: for a 33,278 × 400 matrix with groups 30/50/20 %, about 22
/// CPU-seconds (≈ 12 s wall on two idle cores; the neighbour mix ~60 % of it), measured by the
/// `second_tier_budget_33278x400` test.
pub fn second_tier(
    w: Embeddings<'_>,
    groups: &RowGroups,
    threads: Threads,
) -> Result<SecondTier, MatrixError> {
    let started = Instant::now();
    let neighbour_mix = neighbour_frequency_mix(w, groups, NEIGHBOUR_MIX_K, threads)?;
    let mix_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let two_nn = two_nn_groups(w, groups, threads)?;
    Ok(SecondTier {
        neighbour_mix,
        two_nn,
        seconds: SecondTierSeconds {
            neighbour_mix: mix_seconds,
            two_nn: started.elapsed().as_secs_f64(),
        },
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use conelab_data::{FrequencyGroups, GroupBounds};
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{Rng, SeedableRng};

    /// The reference TwoNN: every pair's distance directly, O(n²d) scalar.
    fn two_nn_scalar(w: Embeddings<'_>) -> TwoNn {
        let n = w.n();
        // The nearest two by brute force; the estimate from them is `from_nearest`'s (the
        // estimator itself is checked against known dimensions below).
        TwoNn::from_nearest((0..n).map(|i| {
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
            (r1, r2)
        }))
    }
    /// Standard normal draws (Box–Muller), so the tests need no distribution crate.
    pub(crate) fn normals(rng: &mut ChaCha8Rng, count: usize) -> Vec<f64> {
        let uniform = |rng: &mut ChaCha8Rng| (f64::from(rng.next_u32()) + 0.5) / 4_294_967_296.0;
        (0..count)
            .map(|_| {
                let (u, v) = (uniform(rng), uniform(rng));
                (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
            })
            .collect()
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
        let got = two_nn(
            Embeddings::new(2000, 12, &square).expect("square"),
            Threads::All,
        );
        assert!((got.dimension - 2.0).abs() < 0.15, "{got:?}");
        assert_eq!((got.used, got.duplicates), (2000, 0));
        let cube = estimate(5, 2000, 2);
        let got = two_nn(
            Embeddings::new(2000, 12, &cube).expect("cube"),
            Threads::Sequential,
        );
        assert!((got.dimension - 5.0).abs() < 0.6, "{got:?}");
        // Row 1 made a copy of row 0: both have r₁ = 0.
        let mut copy = square.clone();
        copy.copy_within(0..12, 12);
        let got = two_nn(
            Embeddings::new(2000, 12, &copy).expect("copy"),
            Threads::All,
        );
        assert_eq!((got.used, got.duplicates), (1998, 2));
    }

    /// Row-major f32 data from f64 rows.
    fn matrix(rows: &[Vec<f64>]) -> Vec<f32> {
        rows.iter().flatten().map(|&v| v as f32).collect()
    }

    fn relative_gap(a: f64, b: f64) -> f64 {
        if a == b {
            0.0
        } else {
            (a - b).abs() / a.abs().max(b.abs())
        }
    }

    /// The fast TwoNN against the scalar loop on sets that stress it: a narrow cone (large norms,
    /// small distances: the ‖a‖² + ‖b‖² − 2a·b form cancels), exact duplicates and
    /// near-duplicates 1e-6 apart (only the direct recomputation tells them apart), an integer
    /// lattice (many exactly tied distances, r₂ = r₁), sizes that leave a ragged last block, and
    /// both thread modes.
    #[test]
    fn fast_two_nn_equals_the_scalar_loop() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut cases: Vec<(usize, usize, Vec<f32>)> = Vec::new();
        let (n, d) = (613, 20);
        let z = normals(&mut rng, n * d);
        let cone: Vec<f32> = (0..n * d).map(|i| (0.05 * z[i] + 40.0) as f32).collect();
        cases.push((n, d, cone.clone()));
        // Far from the origin (‖a‖² ≈ 2·10⁷: the product form rounds d² to steps of 2⁻²⁸ ≈
        // 4e-9), with rows 1, 50, 51, 300 copies of row 0 (a duplicate group of five) and rows
        // 400..440 sharing row 400's large coordinates and differing by ~1e-4 in three
        // coordinates near 0.5: their d² (~3e-8) are a few such steps, so the product form
        // misorders them and only the direct recomputation gets r₁, r₂ right (with no
        // tolerance on the candidates this case fails).
        let mut near: Vec<f32> = (0..n * d).map(|i| (0.05 * z[i] + 1000.0) as f32).collect();
        for r in [1usize, 50, 51, 300] {
            near.copy_within(0..d, r * d);
        }
        let small = normals(&mut rng, 40 * 3);
        for r in 400..440 {
            near.copy_within(400 * d..401 * d, r * d);
            for c in 0..3 {
                near[r * d + c] = (0.5 + 1e-4 * small[(r - 400) * 3 + c]) as f32;
            }
        }
        cases.push((n, d, near));
        let lattice: Vec<f32> = (0..400usize)
            .flat_map(|i| [(i % 20) as f32, (i / 20) as f32, 3.0])
            .collect();
        cases.push((400, 3, lattice));
        let z = normals(&mut rng, 97 * 5);
        cases.push((97, 5, z.iter().map(|&v| v as f32).collect()));
        cases.push((2, 5, vec![1.0, 2.0, 3.0, 4.0, 5.0, 1.0, 2.0, 3.0, 4.0, 6.0]));
        for (n, d, data) in &cases {
            let w = Embeddings::new(*n, *d, data).expect("matrix");
            let want = two_nn_scalar(w);
            for threads in [Threads::All, Threads::Sequential] {
                let got = two_nn(w, threads);
                assert_eq!((got.used, got.duplicates), (want.used, want.duplicates));
                assert!(
                    relative_gap(got.dimension, want.dimension) < 1e-9
                        || (got.dimension.is_nan() && want.dimension.is_nan()),
                    "{n}×{d}: {got:?} vs {want:?}"
                );
            }
        }
        let near = two_nn_scalar(Embeddings::new(n, d, &cases[1].2).expect("near"));
        assert_eq!(near.duplicates, 5, "{near:?}");
        let lattice = two_nn_scalar(Embeddings::new(400, 3, &cases[2].2).expect("lattice"));
        assert!(lattice.dimension.is_nan(), "all ratios 1: {lattice:?}");
        // Two rows: each has no second neighbour, so nothing is used.
        let pair = two_nn(
            Embeddings::new(2, 5, &cases[4].2).expect("pair"),
            Threads::All,
        );
        assert_eq!((pair.used, pair.duplicates), (0, 0));
        assert!(pair.dimension.is_nan());
    }

    /// Groups interleaved row by row: each group's TwoNN is the scalar loop's on that group's
    /// rows alone, gathered here by hand; a group of one row gives NaN.
    #[test]
    fn two_nn_groups_measure_within_each_group() {
        let (n, d) = (301, 6);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let z = normals(&mut rng, n * d);
        let data: Vec<f32> = z.iter().map(|&v| v as f32).collect();
        let w = Embeddings::new(n, d, &data).expect("matrix");
        // Row 300 alone in Frequent (the highest count); the rest alternate Medium / Rare.
        let counts: Vec<u64> = (0..n as u64)
            .map(|i| if i == 300 { 1000 } else { 10 })
            .collect();
        let bounds = GroupBounds::new(1.0 / n as f64, 0.5).expect("bounds");
        let groups = RowGroups::from_counts(&counts, bounds);
        assert_eq!(groups.members(Group::Frequent), vec![300]);
        // Scramble Medium and Rare membership: reassign by hand through the counts.
        let counts: Vec<u64> = (0..n as u64)
            .map(|i| {
                if i == 300 {
                    1000
                } else {
                    10 + (i % 2) * (1 + i)
                }
            })
            .collect();
        let groups = RowGroups::from_counts(&counts, bounds);
        let got = two_nn_groups(w, &groups, Threads::All).expect("groups");
        for g in Group::ALL {
            let members = groups.members(g);
            let rows: Vec<f32> = members
                .iter()
                .flat_map(|&r| w.row(r as usize).to_vec())
                .collect();
            let want = two_nn_scalar(Embeddings::new(members.len(), d, &rows).expect("group"));
            let have = got[g as usize];
            assert_eq!((have.used, have.duplicates), (want.used, want.duplicates));
            assert!(
                relative_gap(have.dimension, want.dimension) < 1e-9
                    || (have.dimension.is_nan() && want.dimension.is_nan()),
                "{g}: {have:?} vs {want:?}"
            );
        }
        assert!(got[Group::Frequent as usize].dimension.is_nan());
        assert!(got[Group::Medium as usize].used > 100);
        let short = RowGroups::from_counts(&counts[..10], bounds);
        assert!(two_nn_groups(w, &short, Threads::All).is_err());
    }

    /// The mix row by row from f64 cosines, sorted in full: the independent computation.
    fn brute_force_mix(rows: &[Vec<f64>], group: &[usize], k: usize) -> [f64; 3] {
        let norm = |r: &Vec<f64>| r.iter().map(|v| v * v).sum::<f64>().sqrt();
        let (mut sum, mut count) = ([0.0f64; 3], [0usize; 3]);
        for (i, a) in rows.iter().enumerate() {
            if norm(a) == 0.0 {
                continue;
            }
            let mut others: Vec<(f64, usize)> = rows
                .iter()
                .enumerate()
                .filter(|&(j, b)| j != i && norm(b) > 0.0)
                .map(|(j, b)| {
                    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
                    (dot / (norm(a) * norm(b)), j)
                })
                .collect();
            others.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
            others.truncate(k);
            if others.is_empty() {
                continue;
            }
            let same = others
                .iter()
                .filter(|&&(_, j)| group[j] == group[i])
                .count();
            sum[group[i]] += same as f64 / others.len() as f64;
            count[group[i]] += 1;
        }
        std::array::from_fn(|g| sum[g] / count[g] as f64)
    }

    /// Groups from an explicit per-row list (Frequent 0, Medium 1, Rare 2), through the counts:
    /// descending counts put the rows in the wanted group whatever the bounds' rounding.
    fn groups_of(group: &[usize]) -> RowGroups {
        let n = group.len();
        let per = [0, 1, 2].map(|g| group.iter().filter(|&&x| x == g).count());
        let counts: Vec<u64> = group.iter().map(|&g| 3 - g as u64).collect();
        let bounds = GroupBounds::new(
            (per[0] as f64 + 0.5) / n as f64,
            (per[0] + per[1]) as f64 / n as f64 + 0.5 / n as f64,
        )
        .expect("bounds");
        let groups = RowGroups::from_counts(&counts, bounds);
        for (i, &g) in group.iter().enumerate() {
            assert_eq!(groups.group_of(i) as usize, g, "row {i}");
        }
        groups
    }

    /// Three groups in three tight clusters about orthogonal directions: every row's ten
    /// nearest are its own group's, so the mix is exactly 1; zero rows are left out and counted.
    #[test]
    fn neighbour_mix_is_one_for_separated_clusters() {
        let (per, d) = (40, 8);
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut rows = Vec::new();
        let mut group = Vec::new();
        for g in 0..3 {
            for _ in 0..per {
                let mut r: Vec<f64> = normals(&mut rng, d).iter().map(|v| 0.05 * v).collect();
                r[g] += 1.0 + 0.5 * f64::from(rng.next_u32() % 4);
                rows.push(r);
                group.push(g);
            }
        }
        rows.push(vec![0.0; d]);
        group.push(1);
        let data = matrix(&rows);
        let w = Embeddings::new(rows.len(), d, &data).expect("matrix");
        for threads in [Threads::All, Threads::Sequential] {
            let mix = neighbour_frequency_mix(w, &groups_of(&group), 10, threads).expect("mix");
            assert_eq!(mix.same_group, [1.0; 3]);
            assert_eq!(mix.rows, [per; 3]);
            assert_eq!(mix.zero_rows, [0, 1, 0]);
        }
    }

    /// Unit directions in the plane at the angles below (with varying lengths: cosine, not
    /// distance, decides), k = 2, nearest by angle:
    ///
    /// | row | angle | group | two nearest      | same |
    /// |-----|-------|-------|------------------|------|
    /// | A   | 0°    | F     | B (10°), C (25°) | 1/2  |
    /// | B   | 10°   | F     | A (10°), C (15°) | 1/2  |
    /// | C   | 25°   | M     | B (15°), A (25°) | 0    |
    /// | D   | 90°   | R     | E (10°), F (30°) | 1/2  |
    /// | E   | 100°  | M     | D (10°), F (20°) | 0    |
    /// | F   | 120°  | R     | E (20°), D (30°) | 1/2  |
    /// | H   | 225°  | M     | F (105°), E (125°) | 1/2 |
    /// | Z   | zero  | F     | left out         |      |
    ///
    /// Frequent 1/2, Medium (0 + 0 + 1/2)/3 = 1/6, Rare 1/2. Were the zero row a neighbour
    /// (cosine 0 beats H's negative ones), H would get F and Z, and Medium 0.
    #[test]
    fn neighbour_mix_counted_by_hand() {
        let at =
            |deg: f64, len: f64| vec![len * deg.to_radians().cos(), len * deg.to_radians().sin()];
        let rows = vec![
            at(0.0, 1.0),
            at(10.0, 3.0),
            at(25.0, 0.5),
            at(90.0, 2.0),
            at(100.0, 0.25),
            at(120.0, 4.0),
            at(225.0, 1.5),
            vec![0.0, 0.0],
        ];
        let group = [0, 0, 1, 2, 1, 2, 1, 0];
        let data = matrix(&rows);
        let w = Embeddings::new(rows.len(), 2, &data).expect("matrix");
        let mix = neighbour_frequency_mix(w, &groups_of(&group), 2, Threads::All).expect("mix");
        let want = [0.5, 1.0 / 6.0, 0.5];
        for (got, want) in mix.same_group.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{mix:?}");
        }
        assert_eq!(brute_force_mix(&rows, &group, 2), mix.same_group);
        assert_eq!((mix.rows, mix.zero_rows, mix.k), ([2, 3, 2], [1, 0, 0], 2));
        // k larger than the rows there are: every other non-zero row is a neighbour.
        let all =
            neighbour_frequency_mix(w, &groups_of(&group), 50, Threads::Sequential).expect("mix");
        assert_eq!(all.same_group, brute_force_mix(&rows, &group, 50));
        let none = neighbour_frequency_mix(w, &groups_of(&group), 0, Threads::All).expect("mix");
        assert!(none.same_group.iter().all(|v| v.is_nan()) && none.rows == [0; 3]);
    }

    /// Random rows in a cone with random groups and a few zero rows, k = 10: the blocked f32
    /// mix equals the f64 brute-force loop (several blocks, both thread modes).
    #[test]
    fn neighbour_mix_equals_a_brute_force_loop() {
        let (n, d) = (450, 16);
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        let mut rows: Vec<Vec<f64>> = (0..n)
            .map(|_| normals(&mut rng, d).iter().map(|v| v + 0.7).collect())
            .collect();
        for r in [3, 200, 449] {
            rows[r] = vec![0.0; d];
        }
        let group: Vec<usize> = (0..n).map(|_| (rng.next_u32() % 3) as usize).collect();
        let groups = groups_of(&group);
        let want = brute_force_mix(&rows, &group, 10);
        let data = matrix(&rows);
        let w = Embeddings::new(n, d, &data).expect("matrix");
        for threads in [Threads::All, Threads::Sequential] {
            let mix = neighbour_frequency_mix(w, &groups, 10, threads).expect("mix");
            for g in 0..3 {
                assert!(
                    (mix.same_group[g] - want[g]).abs() < 1e-12,
                    "{mix:?} vs {want:?}"
                );
            }
            assert_eq!(mix.zero_rows.iter().sum::<usize>(), 3);
            assert_eq!(mix.rows.iter().sum::<usize>(), n - 3);
        }
        assert!(neighbour_frequency_mix(w, &groups_of(&[0, 1, 2, 0]), 10, Threads::All).is_err());
    }

    /// The second tier is its two parts.
    #[test]
    fn second_tier_is_the_mix_and_the_group_dimensions() {
        let (n, d) = (300, 10);
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let data: Vec<f32> = normals(&mut rng, n * d).iter().map(|&v| v as f32).collect();
        let w = Embeddings::new(n, d, &data).expect("matrix");
        let groups = RowGroups::from_ranks(&FrequencyGroups::new(n, GroupBounds::default()));
        let tier = second_tier(w, &groups, Threads::All).expect("tier");
        let mix =
            neighbour_frequency_mix(w, &groups, NEIGHBOUR_MIX_K, Threads::Sequential).expect("mix");
        assert_eq!(tier.neighbour_mix, mix);
        assert_eq!(
            tier.two_nn,
            two_nn_groups(w, &groups, Threads::Sequential).expect("two_nn")
        );
        assert!(tier.seconds.neighbour_mix >= 0.0 && tier.seconds.two_nn >= 0.0);
        assert_eq!(tier.neighbour_mix.rows, [90, 150, 60]);
    }

    /// The live panel's budget: a 33,278 × 400 cone (Gaussian rows plus a shared offset, mean
    /// cosine ≈ 0.5), groups 30/50/20 % by rank, every core. Run with `--release --ignored
    /// --nocapture`.
    #[test]
    #[ignore]
    fn second_tier_budget_33278x400() {
        let (n, d) = (33_278, 400);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let offset = normals(&mut rng, d);
        let z = normals(&mut rng, n * d);
        let data: Vec<f32> = (0..n * d).map(|i| (z[i] + offset[i % d]) as f32).collect();
        let w = Embeddings::new(n, d, &data).expect("matrix");
        let groups = RowGroups::from_ranks(&FrequencyGroups::new(n, GroupBounds::default()));
        let tier = second_tier(w, &groups, Threads::All).expect("tier");
        println!(
            "second tier of {n} × {d} on {} threads: neighbour mix {:.2} s, TwoNN per group \
             {:.2} s, total {:.2} s",
            rayon::current_num_threads(),
            tier.seconds.neighbour_mix,
            tier.seconds.two_nn,
            tier.seconds.neighbour_mix + tier.seconds.two_nn
        );
        println!("{:?}\n{:?}", tier.neighbour_mix, tier.two_nn);
        // Groups do not shape a random cone: each mix ≈ its group's share of the rows.
        for (mix, share) in tier.neighbour_mix.same_group.iter().zip([0.3, 0.5, 0.2]) {
            assert!((mix - share).abs() < 0.05, "{:?}", tier.neighbour_mix);
        }
    }
}
