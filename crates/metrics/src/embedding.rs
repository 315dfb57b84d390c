//! Embedding metrics (methods.md §2) over W as stored — no centering, no row normalisation — for
//! the whole vocabulary and for each frequency group.
//!
//! One d×d symmetric eigendecomposition per set serves three metrics: the eigenvectors E of WᵀW
//! are the isotropy directions, √λ are the singular values, and the top two are the uncentred 2-D
//! projection. WᵀW is accumulated in f64 (f32 rounding there shows in the small singular values);
//! the N×d projections W·E run in f32 and their log-sum-exps in f64.
//!
//! I(W) is scale-dependent (any W with small rows has I1 ≈ 1), so two scale-free companions come
//! with it: I1/I2 of the row-normalised matrix Ŵ (its gram ŴᵀŴ is accumulated in the same pass as
//! WᵀW), and IsoScore (Rudman et al. 2022) from the eigenvalues of the centred covariance
//! WᵀW/N − μμᵀ, which needs no second pass over W.

use faer::diag::Diag;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::evd::{self, ComputeEigenvectors};
use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::{Accum, Mat, MatRef, Par};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::Threads;
use super::matrix::{Embeddings, MatrixError, RowGroups, RowSet};
use crate::dominant_directions::{
    AllButTheTop, ROGUE_TOP, all_but_the_top_from_moments, contributions_from_sums, top_share,
};
use crate::fastmath::log_sum_exp_both_signs;
use conelab_data::Group;

/// Which 2-D projection the scatter shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ProjectionMode {
    /// Top-2 right singular vectors of W as stored (what the papers plot: the cone is visible as
    /// an offset from the origin).
    #[default]
    Uncentred,
    /// PCA: top-2 eigenvectors of the covariance of the rows (the cone's offset removed).
    Centred,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PanelOptions {
    pub projection: Option<ProjectionMode>,
    /// Also the centred projection (PCA), in `EmbeddingPanel::centred` (the live workbench's
    /// uncentred/centred toggle); costs one more d×d eigendecomposition.
    pub also_centred: bool,
    /// I1/I2 of the row-normalised matrix and IsoScore (one more gram, two more d×d
    /// decompositions and one more N×d projection per set). Off only to measure what they cost.
    pub scale_free: bool,
    pub threads: Threads,
}

impl Default for PanelOptions {
    fn default() -> Self {
        Self {
            projection: Some(ProjectionMode::Uncentred),
            also_centred: false,
            scale_free: true,
            threads: Threads::All,
        }
    }
}

/// The metrics of one set of rows (the whole matrix, or one group).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetStats {
    pub rows: usize,
    /// min Z / max Z over the directions E ∪ −E; 1 = isotropic.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub i1: f64,
    /// Population std of Z over E ∪ −E divided by its mean; 0 = isotropic.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub i2: f64,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub mean_norm: f64,
    /// Singular values, descending, divided by the largest.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64_vec")]
    pub sv_norm: Vec<f64>,
    /// The largest singular value (the scale `sv_norm` was divided by).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub sv_max: f64,
    /// exp(entropy of σ²/Σσ²).
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub effective_rank: f64,
    /// Mean cosine over pairs i ≠ j of rows with non-zero norm.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub mean_cos: f64,
    /// Mean cosine of each row to the direction of the set's mean row.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub mean_cos_to_mean: f64,
    /// I1 of the row-normalised matrix (zero rows left out): the directions' balance without the
    /// row norms, which dominate `i1`.
    #[serde(default = "nan", deserialize_with = "conelab_base::jsonfloat::f64")]
    pub i1_unit: f64,
    /// I2 of the row-normalised matrix (zero rows left out).
    #[serde(default = "nan", deserialize_with = "conelab_base::jsonfloat::f64")]
    pub i2_unit: f64,
    /// IsoScore: the mean-centred, scale-free fraction of the d dimensions the rows use; 1 =
    /// isotropic, 0 = a line.
    #[serde(default = "nan", deserialize_with = "conelab_base::jsonfloat::f64")]
    pub isoscore: f64,
    /// The IsoScore of a random Gaussian matrix of the set's size ([`isoscore_random`]): the
    /// value a set that never moved from its initialisation reads.
    #[serde(default = "nan", deserialize_with = "conelab_base::jsonfloat::f64")]
    pub isoscore_random: f64,
    /// All-but-the-top (Mu & Viswanath 2018): the top ⌈d/100⌉ principal components' share of the
    /// centred variance — how much of the cone one removable common direction carries.
    #[serde(default = "nan", deserialize_with = "conelab_base::jsonfloat::f64")]
    pub abtt_top_variance: f64,
    /// Mean pairwise cosine after removing the mean row and those components.
    #[serde(default = "nan", deserialize_with = "conelab_base::jsonfloat::f64")]
    pub abtt_mean_cos: f64,
    /// Rogue dimensions (Timkey & van Schijndel 2021): the share of `mean_cos` carried by its 3
    /// largest coordinate-wise contributions.
    #[serde(default = "nan", deserialize_with = "conelab_base::jsonfloat::f64")]
    pub rogue_share: f64,
}

impl SetStats {
    /// A set nothing is known of (a group of a matrix without counts): every number NaN,
    /// shown as "–".
    pub fn unknown() -> Self {
        Self {
            rows: 0,
            i1: f64::NAN,
            i2: f64::NAN,
            mean_norm: f64::NAN,
            sv_norm: Vec::new(),
            sv_max: f64::NAN,
            effective_rank: f64::NAN,
            mean_cos: f64::NAN,
            mean_cos_to_mean: f64::NAN,
            i1_unit: f64::NAN,
            i2_unit: f64::NAN,
            isoscore: f64::NAN,
            isoscore_random: f64::NAN,
            abtt_top_variance: f64::NAN,
            abtt_mean_cos: f64::NAN,
            rogue_share: f64::NAN,
        }
    }
}

/// A metric a sender did not know of (an older run) reads as "not computed".
fn nan() -> f64 {
    f64::NAN
}

/// A 2-D point per row of the whole matrix, in row order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    pub mode: ProjectionMode,
    #[serde(deserialize_with = "conelab_base::jsonfloat::f32_points")]
    pub points: Vec<[f32; 2]>,
    /// Fraction of Σσ² (uncentred) or of the total variance (centred) on each axis.
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64_pair")]
    pub explained: [f64; 2],
}

#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingPanel {
    pub n: usize,
    pub d: usize,
    pub total: SetStats,
    /// Frequent, medium, rare — when the rows' training counts are known.
    pub groups: Option<[SetStats; 3]>,
    /// Mean cosine between a rare and a frequent row.
    pub rare_frequent_cos: Option<f64>,
    pub projection: Option<Projection>,
    /// The centred projection, when asked for with `also_centred` (and not already `projection`).
    pub centred: Option<Projection>,
}

impl EmbeddingPanel {
    pub fn compute(
        w: Embeddings<'_>,
        groups: Option<&RowGroups>,
        options: &PanelOptions,
    ) -> Result<Self, MatrixError> {
        if let Some(g) = groups
            && g.len() != w.n()
        {
            return Err(MatrixError::RowCount {
                what: "the group assignment".into(),
                got: g.len(),
                n: w.n(),
            });
        }
        let par = options.threads.par();
        let threads = options.threads;
        let sf = options.scale_free;
        // WᵀW and the row sums are additive over rows: with groups, the total's come for free
        // as the sum of the groups'.
        let (total, group_analyses) = match groups {
            None => (
                analyse(w, parts(w, par, threads, sf), par, threads, sf)?,
                None,
            ),
            Some(groups) => {
                let sets: Vec<RowSet<'_>> = Group::ALL
                    .iter()
                    .map(|&g| RowSet::new(w, &groups.members(g)))
                    .collect();
                let group_parts: Vec<Parts> = sets
                    .iter()
                    .map(|set| parts(set.view(), par, threads, sf))
                    .collect();
                let mut total_parts = Parts::zero(w.d());
                for p in &group_parts {
                    total_parts.add(p);
                }
                let mut jobs = vec![(w, total_parts)];
                jobs.extend(sets.iter().map(|set| set.view()).zip(group_parts));
                let analyse_set = |(view, parts): (Embeddings<'_>, Parts)| {
                    if view.n() == 0 {
                        Ok(Analysis::empty(w.d()))
                    } else {
                        analyse(view, parts, par, threads, sf)
                    }
                };
                // The total and the three groups side by side; each analysis splits into its
                // independent parts too (see `analyse`), so rayon keeps both cores busy
                // through work that does not parallelise inside (d×d decompositions at d ≈ 400).
                let mut analyses = match threads {
                    Threads::All => jobs
                        .into_par_iter()
                        .map(analyse_set)
                        .collect::<Result<Vec<_>, _>>()?,
                    Threads::Sequential => jobs
                        .into_iter()
                        .map(analyse_set)
                        .collect::<Result<Vec<_>, _>>()?,
                };
                let total = analyses.remove(0);
                (total, Some(analyses))
            }
        };
        let projection = match options.projection {
            None => None,
            Some(ProjectionMode::Uncentred) => Some(total.uncentred_projection(w, par)),
            Some(ProjectionMode::Centred) => Some(centred_projection(w, &total, par)?),
        };
        let centred = if options.also_centred && options.projection != Some(ProjectionMode::Centred)
        {
            Some(centred_projection(w, &total, par)?)
        } else {
            None
        };
        let mut rare_frequent_cos = None;
        let group_stats = group_analyses.map(|analyses| {
            let (rare, freq) = (&analyses[2], &analyses[0]);
            let (rn, fn_) = (rare.stats.rows_nonzero, freq.stats.rows_nonzero);
            rare_frequent_cos = Some(if rn == 0 || fn_ == 0 {
                f64::NAN
            } else {
                dot(&rare.unit_sum, &freq.unit_sum) / (rn as f64 * fn_ as f64)
            });
            let mut it = analyses.into_iter().map(|a| a.stats.public);
            let mut next = || it.next().expect("three groups");
            [next(), next(), next()]
        });
        Ok(Self {
            n: w.n(),
            d: w.d(),
            total: total.stats.public,
            groups: group_stats,
            rare_frequent_cos,
            projection,
            centred,
        })
    }
}

struct InternalStats {
    public: SetStats,
    rows_nonzero: usize,
}

struct Analysis {
    stats: InternalStats,
    /// Eigenvectors of WᵀW as columns, by descending eigenvalue.
    eigenvectors: Mat<f64>,
    eigenvalues: Vec<f64>,
    gram: Mat<f64>,
    unit_sum: Vec<f64>,
    row_sum: Vec<f64>,
}

impl Analysis {
    fn empty(d: usize) -> Self {
        Analysis {
            stats: InternalStats {
                public: SetStats::unknown(),
                rows_nonzero: 0,
            },
            eigenvectors: Mat::zeros(d, d),
            eigenvalues: vec![0.0; d],
            gram: Mat::zeros(d, d),
            unit_sum: vec![0.0; d],
            row_sum: vec![0.0; d],
        }
    }

    /// Points on the top-2 eigenvectors of WᵀW, each axis signed so that the points' sum is ≥ 0:
    /// eigenvector signs are arbitrary, and a scatter that flips between two snapshots is noise.
    fn uncentred_projection(&self, w: Embeddings<'_>, par: Par) -> Projection {
        let axes = self.eigenvectors.as_ref().subcols(0, 2.min(w.d()));
        let points = project_2d(w, axes, [0.0; 2], par);
        let total: f64 = self.eigenvalues.iter().map(|l| l.max(0.0)).sum();
        let share = |k: usize| {
            self.eigenvalues.get(k).map_or(0.0, |l| l.max(0.0)) / total.max(f64::MIN_POSITIVE)
        };
        Projection {
            mode: ProjectionMode::Uncentred,
            points,
            explained: [share(0), share(1)],
        }
    }
}

pub(crate) fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Row sums, WᵀW and ŴᵀŴ of one set of rows: everything the set's metrics need besides W itself.
struct Parts {
    sums: RowSums,
    gram: Mat<f64>,
    /// The gram of the row-normalised rows (zero rows add nothing).
    unit_gram: Mat<f64>,
}

impl Parts {
    fn zero(d: usize) -> Self {
        Parts {
            sums: RowSums::zero(d),
            gram: Mat::zeros(d, d),
            unit_gram: Mat::zeros(d, d),
        }
    }

    fn add(&mut self, other: &Parts) {
        self.sums.add(&other.sums);
        self.gram += &other.gram;
        self.unit_gram += &other.unit_gram;
    }
}

fn parts(w: Embeddings<'_>, par: Par, threads: Threads, scale_free: bool) -> Parts {
    let (gram, unit_gram) = grams_f64(w, par, scale_free);
    Parts {
        sums: row_sums(w, threads),
        gram,
        unit_gram,
    }
}

/// One set's metrics from its parts. Its three costly pieces are independent — I(W) over the
/// eigenvectors of WᵀW, I(Ŵ) over those of ŴᵀŴ, IsoScore over the covariance's eigenvalues —
/// and with `Threads::All` they run as rayon tasks (their products and decompositions
/// sequential: a task per piece balances two cores better than splitting each product).
fn analyse(
    w: Embeddings<'_>,
    parts: Parts,
    par: Par,
    threads: Threads,
    scale_free: bool,
) -> Result<Analysis, MatrixError> {
    let (n, d) = (w.n(), w.d());
    let Parts {
        sums,
        gram,
        unit_gram,
    } = parts;
    let (par, inner) = match threads {
        Threads::All => (Par::Seq, Threads::Sequential),
        Threads::Sequential => (par, threads),
    };

    // Isotropy over E ∪ −E: log Z for both signs of every eigenvector.
    let isotropy = || -> Result<_, MatrixError> {
        let (eigenvalues, eigenvectors) = eigen_descending(gram.as_ref(), par)?;
        let log_z = log_z_both_signs(w, eigenvectors.as_ref(), None, par, inner);
        Ok((eigenvalues, eigenvectors, isotropy_from_log_z(&log_z)))
    };

    // The same over Ŵ: eigenvectors of ŴᵀŴ, rows scaled to unit norm after the product.
    let unit_isotropy = || -> Result<(f64, f64), MatrixError> {
        if sums.nonzero == 0 || !scale_free {
            return Ok((f64::NAN, f64::NAN));
        }
        let (_, unit_vectors) = eigen_descending(unit_gram.as_ref(), par)?;
        let inverse_norms: Vec<f32> = w
            .data()
            .chunks_exact(d)
            .map(|row| {
                let norm = row.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
                if norm > 0.0 { (1.0 / norm) as f32 } else { 0.0 }
            })
            .collect();
        let zero_rows = (n - sums.nonzero) as f64;
        // A zero row projects to 0 and adds exactly exp(0) = 1 to every Z: taken back out.
        let log_z: Vec<f64> =
            log_z_both_signs(w, unit_vectors.as_ref(), Some(&inverse_norms), par, inner)
                .into_iter()
                .map(|l| l + (-zero_rows * (-l).exp()).ln_1p())
                .collect();
        Ok(isotropy_from_log_z(&log_z))
    };

    // IsoScore from the covariance's participation ratio: no eigendecomposition.
    let isoscore = || -> Result<f64, MatrixError> {
        if n < 2 || !scale_free {
            return Ok(f64::NAN);
        }
        let mean: Vec<f64> = sums.raw.iter().map(|s| s / n as f64).collect();
        let cov: Vec<f64> = (0..d * d)
            .map(|k| {
                let (i, j) = (k / d, k % d);
                gram[(i, j)] / n as f64 - mean[i] * mean[j]
            })
            .collect();
        Ok(isoscore_from_covariance(&cov, d))
    };

    // All-but-the-top from the same moments: one more d×d decomposition (of the covariance) and
    // one pass over the rows for the residuals' norms.
    let abtt = || -> Result<AllButTheTop, MatrixError> {
        if n < 2 || !scale_free {
            return Ok(AllButTheTop::unknown(d));
        }
        let mean: Vec<f64> = sums.raw.iter().map(|s| s / n as f64).collect();
        let cov = Mat::<f64>::from_fn(d, d, |i, j| gram[(i, j)] / n as f64 - mean[i] * mean[j]);
        all_but_the_top_from_moments(w, &mean, cov.as_ref(), par)
    };

    let (main, ((unit, isoscore), abtt)) = match threads {
        Threads::All => rayon::join(isotropy, || {
            rayon::join(|| rayon::join(unit_isotropy, isoscore), abtt)
        }),
        Threads::Sequential => (isotropy(), ((unit_isotropy(), isoscore()), abtt())),
    };
    let (eigenvalues, eigenvectors, (i1, i2)) = main?;
    let (i1_unit, i2_unit) = unit?;
    let isoscore = isoscore?;
    let abtt = abtt?;
    let rogue_share = if scale_free {
        let squares: Vec<f64> = (0..d).map(|k| unit_gram[(k, k)]).collect();
        let c = contributions_from_sums(&sums.unit, &squares, sums.nonzero);
        top_share(c, ROGUE_TOP)
    } else {
        f64::NAN
    };

    let sigma: Vec<f64> = eigenvalues.iter().map(|&l| l.max(0.0).sqrt()).collect();
    let sv_max = sigma[0];
    let sv_norm = if sv_max > 0.0 {
        sigma.iter().map(|s| s / sv_max).collect()
    } else {
        vec![0.0; d]
    };
    let power: f64 = eigenvalues.iter().map(|l| l.max(0.0)).sum();
    let effective_rank = if power > 0.0 {
        let entropy: f64 = eigenvalues
            .iter()
            .map(|l| l.max(0.0) / power)
            .filter(|&p| p > 0.0)
            .map(|p| -p * p.ln())
            .sum();
        entropy.exp()
    } else {
        f64::NAN
    };

    let nz = sums.nonzero;
    let unit_norm2 = dot(&sums.unit, &sums.unit);
    let mean_cos = if nz >= 2 {
        (unit_norm2 - nz as f64) / (nz as f64 * (nz as f64 - 1.0))
    } else {
        f64::NAN
    };
    let mean_len = dot(&sums.raw, &sums.raw).sqrt();
    let mean_cos_to_mean = if nz >= 1 && mean_len > 0.0 {
        dot(&sums.unit, &sums.raw) / (mean_len * nz as f64)
    } else {
        f64::NAN
    };
    Ok(Analysis {
        stats: InternalStats {
            public: SetStats {
                rows: n,
                i1,
                i2,
                mean_norm: sums.norm / n as f64,
                sv_norm,
                sv_max,
                effective_rank,
                mean_cos,
                mean_cos_to_mean,
                i1_unit,
                i2_unit,
                isoscore,
                isoscore_random: isoscore_random(n, d),
                abtt_top_variance: abtt.top_variance,
                abtt_mean_cos: abtt.mean_cos_after,
                rogue_share,
            },
            rows_nonzero: nz,
        },
        eigenvectors,
        eigenvalues,
        gram,
        unit_sum: sums.unit,
        row_sum: sums.raw,
    })
}

/// log Z(a) = logsumexp_i <w_i, a> for a = ±each column of `directions`, as (+, −) pairs flattened;
/// with `row_scale`, row i of W is multiplied by `row_scale[i]` first.
///
/// W is taken in blocks of rows: each block's projections (2,048 × d, a few MB that stay in
/// cache) are reduced to per-direction log-sum-exps at once, and the blocks' are combined in f64
/// (log(eᵃ + eᵇ) exactly), so the N × d projection matrix is never allocated.
fn log_z_both_signs(
    w: Embeddings<'_>,
    directions: MatRef<'_, f64>,
    row_scale: Option<&[f32]>,
    par: Par,
    threads: Threads,
) -> Vec<f64> {
    const BLOCK: usize = 2048;
    let (n, d) = (w.n(), w.d());
    let e32 = Mat::<f32>::from_fn(d, d, |i, j| directions[(i, j)] as f32);
    let mut proj = Mat::<f32>::zeros(BLOCK.min(n), d);
    let mut log_z = vec![(f64::NEG_INFINITY, f64::NEG_INFINITY); d];
    for start in (0..n).step_by(BLOCK) {
        let rows = BLOCK.min(n - start);
        let block = MatRef::from_row_major_slice(&w.data()[start * d..(start + rows) * d], rows, d);
        let mut out = proj.as_mut().subrows_mut(0, rows);
        matmul(out.as_mut(), Accum::Replace, block, e32.as_ref(), 1.0, par);
        // diag(scale)·W·E = (diag(scale)·W)·E: the rows of the product scaled once, in place.
        if let Some(scale) = row_scale {
            let scale = &scale[start..start + rows];
            for j in 0..d {
                let column = out
                    .as_mut()
                    .col_mut(j)
                    .try_as_col_major_mut()
                    .expect("a fresh matrix is column-major")
                    .as_slice_mut();
                column.iter_mut().zip(scale).for_each(|(x, &k)| *x *= k);
            }
        }
        let out = out.as_ref();
        let column = |j: usize| {
            let c = out
                .col(j)
                .try_as_col_major()
                .expect("a fresh matrix is column-major");
            log_sum_exp_both_signs(c.as_slice())
        };
        let block_z: Vec<(f64, f64)> = match threads {
            Threads::All => (0..d).into_par_iter().map(column).collect(),
            Threads::Sequential => (0..d).map(column).collect(),
        };
        for (total, (p, m)) in log_z.iter_mut().zip(block_z) {
            *total = (log_add_exp(total.0, p), log_add_exp(total.1, m));
        }
    }
    log_z.into_iter().flat_map(|(p, m)| [p, m]).collect()
}

/// log(eᵃ + eᵇ) without overflow (−∞ is the empty sum).
fn log_add_exp(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        hi
    } else {
        hi + (lo - hi).exp().ln_1p()
    }
}

/// IsoScore (Rudman et al. 2022; methods.md §2) from the rows' d × d covariance Σ (row-major):
/// (PR − 1)/(d − 1) with the participation ratio PR = (tr Σ)² / ‖Σ‖²_F. This is Rudman's
/// v̂ = √d·v/‖v‖, δ = ‖v̂ − 1‖/√(2(d − √d)), φ = (d − δ²(d − √d))²/d², (d·φ − 1)/(d − 1) over the
/// variances v along the principal axes, rewritten: Σv = tr Σ and ‖v‖ = ‖Σ‖_F, so φ = PR/d and no
/// eigendecomposition is needed. Points equally spread over k of the d axes give (k − 1)/(d − 1).
/// NaN when d < 2 or Σ is 0 (no shape to measure).
pub fn isoscore_from_covariance(cov: &[f64], d: usize) -> f64 {
    if d < 2 || cov.len() != d * d {
        return f64::NAN;
    }
    let trace: f64 = (0..d).map(|i| cov[i * d + i]).sum();
    let frobenius2: f64 = cov.iter().map(|x| x * x).sum();
    if trace <= 0.0 || frobenius2 <= 0.0 || !frobenius2.is_finite() {
        return f64::NAN;
    }
    let pr = trace * trace / frobenius2;
    ((pr - 1.0) / (d as f64 - 1.0)).clamp(0.0, 1.0)
}

/// The IsoScore a random Gaussian n × d matrix has (methods.md §2): its sample covariance has
/// PR ≈ d / (1 + d/n), so IsoScore ≈ (PR − 1)/(d − 1) — 0.939 for 2,000 × 128, 0.987 for
/// 10,000 × 128. A group that still reads its baseline has not moved from its initialisation,
/// whatever its IsoScore looks like. NaN for n < 2 or d < 2.
pub fn isoscore_random(n: usize, d: usize) -> f64 {
    if n < 2 || d < 2 {
        return f64::NAN;
    }
    let (n, d) = (n as f64, d as f64);
    let pr = d / (1.0 + d / n);
    ((pr - 1.0) / (d - 1.0)).clamp(0.0, 1.0)
}

/// I1 = min Z / max Z and I2 = std(Z)/mean(Z), from log Z over the direction set, in log space.
pub fn isotropy_from_log_z(log_z: &[f64]) -> (f64, f64) {
    let max = log_z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = log_z.iter().copied().fold(f64::INFINITY, f64::min);
    let i1 = (min - max).exp();
    let z: Vec<f64> = log_z.iter().map(|l| (l - max).exp()).collect();
    let mean = z.iter().sum::<f64>() / z.len() as f64;
    let var = z.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / z.len() as f64;
    (i1, var.sqrt() / mean)
}

struct RowSums {
    norm: f64,
    nonzero: usize,
    unit: Vec<f64>,
    raw: Vec<f64>,
}

impl RowSums {
    fn zero(d: usize) -> Self {
        RowSums {
            norm: 0.0,
            nonzero: 0,
            unit: vec![0.0; d],
            raw: vec![0.0; d],
        }
    }

    fn add(&mut self, b: &RowSums) {
        self.norm += b.norm;
        self.nonzero += b.nonzero;
        self.unit.iter_mut().zip(&b.unit).for_each(|(x, y)| *x += y);
        self.raw.iter_mut().zip(&b.raw).for_each(|(x, y)| *x += y);
    }
}

fn row_sums(w: Embeddings<'_>, threads: Threads) -> RowSums {
    let d = w.d();
    let empty = || RowSums::zero(d);
    let add_row = |mut acc: RowSums, row: &[f32]| {
        let norm = row.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
        acc.norm += norm;
        if norm > 0.0 {
            acc.nonzero += 1;
            let inv = 1.0 / norm;
            for ((u, r), &x) in acc.unit.iter_mut().zip(&mut acc.raw).zip(row) {
                *u += x as f64 * inv;
                *r += x as f64;
            }
        }
        acc
    };
    let merge = |mut a: RowSums, b: RowSums| {
        a.add(&b);
        a
    };
    // Fixed blocks summed in row order, each block's rows in order: the same additions in the
    // same order whatever the threads, so the same W gives the same bits on every evaluation
    // (rayon's fold/reduce splits adaptively, and two evaluations of one matrix differed in the
    // last digit).
    let block = d.max(1) * ROWS_PER_SUM_BLOCK;
    let sum_block = |rows: &[f32]| rows.chunks_exact(d.max(1)).fold(empty(), add_row);
    let blocks: Vec<RowSums> = match threads {
        Threads::Sequential => w.data().chunks(block).map(sum_block).collect(),
        Threads::All => w.data().par_chunks(block).map(sum_block).collect(),
    };
    blocks.into_iter().fold(empty(), merge)
}

/// Rows per block of [`row_sums`] (a task's work and the unit of its fixed summation order).
const ROWS_PER_SUM_BLOCK: usize = 512;

/// WᵀW and (with `unit`) ŴᵀŴ (rows scaled to unit norm, zero rows left as zeros) in f64: rows converted in
/// blocks, so the extra memory is two blocks, not a copy of W.
fn grams_f64(w: Embeddings<'_>, par: Par, unit: bool) -> (Mat<f64>, Mat<f64>) {
    const BLOCK: usize = 2048;
    let (n, d) = (w.n(), w.d());
    let mut gram = Mat::<f64>::zeros(d, d);
    let mut unit_gram = Mat::<f64>::zeros(d, d);
    let mut buf = vec![0f64; BLOCK.min(n) * d];
    let mut unit_buf = vec![0f64; BLOCK.min(n) * d];
    // Symmetric: only the lower triangle is computed (half the work), then mirrored.
    let add_lower = |g: &mut Mat<f64>, block: MatRef<'_, f64>| {
        triangular::matmul(
            g.as_mut(),
            BlockStructure::TriangularLower,
            Accum::Add,
            block.transpose(),
            BlockStructure::Rectangular,
            block,
            BlockStructure::Rectangular,
            1.0,
            par,
        )
    };
    for start in (0..n).step_by(BLOCK) {
        let rows = BLOCK.min(n - start);
        let src = &w.data()[start * d..(start + rows) * d];
        for ((row, unit), s) in buf[..rows * d]
            .chunks_exact_mut(d)
            .zip(unit_buf[..rows * d].chunks_exact_mut(d))
            .zip(src.chunks_exact(d))
        {
            row.iter_mut().zip(s).for_each(|(b, &x)| *b = x as f64);
            let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
            let inv = if norm > 0.0 { 1.0 / norm } else { 0.0 };
            unit.iter_mut().zip(&*row).for_each(|(u, x)| *u = x * inv);
        }
        add_lower(
            &mut gram,
            MatRef::from_row_major_slice(&buf[..rows * d], rows, d),
        );
        if unit {
            add_lower(
                &mut unit_gram,
                MatRef::from_row_major_slice(&unit_buf[..rows * d], rows, d),
            );
        }
    }
    for g in [&mut gram, &mut unit_gram] {
        for j in 0..d {
            for i in 0..j {
                g[(i, j)] = g[(j, i)];
            }
        }
    }
    (gram, unit_gram)
}

/// Eigenvalues (descending) and unit eigenvectors (as columns, same order) of a symmetric matrix.
pub(crate) fn eigen_descending(
    a: MatRef<'_, f64>,
    par: Par,
) -> Result<(Vec<f64>, Mat<f64>), MatrixError> {
    let d = a.nrows();
    let mut u = Mat::<f64>::zeros(d, d);
    let mut s = Diag::<f64>::zeros(d);
    let scratch =
        evd::self_adjoint_evd_scratch::<f64>(d, ComputeEigenvectors::Yes, par, Default::default());
    evd::self_adjoint_evd(
        a,
        s.as_mut(),
        Some(u.as_mut()),
        par,
        MemStack::new(&mut MemBuffer::new(scratch)),
        Default::default(),
    )
    .map_err(|e| MatrixError::Decomposition(format!("{e:?}")))?;
    // faer returns ascending order.
    let values: Vec<f64> = (0..d).rev().map(|k| s[k]).collect();
    let vectors = Mat::from_fn(d, d, |i, j| u[(i, d - 1 - j)]);
    Ok((values, vectors))
}

/// `(W − offset)·axes` for every row, as f32 points, each axis signed so the points sum to ≥ 0.
fn project_2d(
    w: Embeddings<'_>,
    axes: MatRef<'_, f64>,
    offset: [f64; 2],
    par: Par,
) -> Vec<[f32; 2]> {
    let k = axes.ncols();
    let a32 = Mat::<f32>::from_fn(w.d(), k, |i, j| axes[(i, j)] as f32);
    let mut out = Mat::<f32>::zeros(w.n(), k);
    matmul(
        out.as_mut(),
        Accum::Replace,
        w.faer(),
        a32.as_ref(),
        1.0,
        par,
    );
    let mut sign = [1f64; 2];
    for (j, s) in sign.iter_mut().enumerate().take(k) {
        let sum: f64 = (0..w.n()).map(|i| out[(i, j)] as f64 - offset[j]).sum();
        if sum < 0.0 {
            *s = -1.0;
        }
    }
    (0..w.n())
        .map(|i| {
            let at = |j: usize| {
                if j < k {
                    ((out[(i, j)] as f64 - offset[j]) * sign[j]) as f32
                } else {
                    0.0
                }
            };
            [at(0), at(1)]
        })
        .collect()
}

/// PCA: eigenvectors of the covariance Σ = WᵀW/N − μμᵀ, from the gram already computed.
fn centred_projection(
    w: Embeddings<'_>,
    total: &Analysis,
    par: Par,
) -> Result<Projection, MatrixError> {
    let (n, d) = (w.n() as f64, w.d());
    let mean: Vec<f64> = total.row_sum.iter().map(|s| s / n).collect();
    let cov = Mat::<f64>::from_fn(d, d, |i, j| total.gram[(i, j)] / n - mean[i] * mean[j]);
    let (values, vectors) = eigen_descending(cov.as_ref(), par)?;
    let axes = vectors.as_ref().subcols(0, 2.min(d));
    let offset = [0, 1].map(|j| {
        if j < d {
            dot(
                &mean,
                axes.col(j)
                    .try_as_col_major()
                    .expect("column-major")
                    .as_slice(),
            )
        } else {
            0.0
        }
    });
    let points = project_2d(w, axes, offset, par);
    let var: f64 = values.iter().map(|l| l.max(0.0)).sum();
    let share = |k: usize| values.get(k).map_or(0.0, |l| l.max(0.0)) / var.max(f64::MIN_POSITIVE);
    Ok(Projection {
        mode: ProjectionMode::Centred,
        points,
        explained: [share(0), share(1)],
    })
}
