//! Convex-hull measures of a set of rows (methods.md §2, "Measures from later literature"). Both
//! come down to the point of minimum norm in a convex hull:
//!
//! - **Separability** (Gao et al. 2019 §4): with ĥ_t = h_t/‖h_t‖ (zero rows left out and
//!   counted) and p* the min-norm point of conv{ĥ_t}, the rows are separable from the origin
//!   iff ‖p*‖ > τ = 1e-6. Then u = p*/‖p*‖ has u·ĥ_t ≥ ‖p*‖ for every t (‖p*‖ is the margin;
//!   −u is Gao's "uniformly negative direction"). Otherwise the certificate is the convex
//!   weights λ with ‖Σλ_t ĥ_t‖ ≤ τ. Why 1e-6: the rows are f32, so a unit vector is known only to
//!   ~6e-8 a coordinate. A margin under 1e-6 comes from that rounding, not from the geometry.
//! - **Stolen probability** (Demeter et al. 2020): row i of W can never be the strict argmax of
//!   h·Wᵀ + b iff no h has (w_i − w_j)·h + b_i − b_j > 0 for every j ≠ i. By Gordan's theorem,
//!   that holds iff some λ in the simplex over j ≠ i has Σλ_j w_j = w_i and Σλ_j b_j ≥ b_i.
//!   Without a bias, that means w_i is not a vertex of the rows' hull. Decided as a min-norm
//!   point: with x_j = (w_j − w_i, b_j − b_i), plus z = (0, −M) when there is a bias
//!   (M = max_j‖x_j‖), the row is stolen iff the hull of the x_j (and z) contains 0.
//!   Otherwise p* gives a winning input: h = −p*_w/s with s = −p*_b > 0 (z forces s > 0), or
//!   h = −p* without a bias. Every row reported as able to win has its h checked directly:
//!   (w_i − w_j)·h + b_i − b_j > 0 for all j, in f64, with the sum's rounding bounded.
//!   "Contains 0" means ‖p‖ ≤ τ = 1e-6·max_j‖(w_j, b_j)‖. A row planted as a convex combination
//!   of others and stored in f32 sits off their hull by its rounding (~1e-7 relative), and it
//!   must count as stolen. A row that would win by less than τ wins only through rounding.
//!   Duplicate rows (equal w and b) can never be a *strict* argmax, so both are stolen, which is
//!   what the LP says.
//!
//!   Most rows are proven able to win without a solve: each tries h = t·w_i and
//!   h = t·(w_i − mean), taking the exact interval of t > 0 allowed by all j at once. This runs
//!   for all rows by blocked f32 products W·Wᵀ (256 × 2,048 tiles, never N×N). Each product's
//!   rounding is bounded, |error| ≤ 2(d+2)·2⁻²⁴·‖w_i‖‖w_j‖, so a row that passes certainly wins.
//!   The remaining rows go to the solver, 32 at a time. Each row iterates over its own working
//!   set of points (at first its 128 nearest), and a full pass over all N points (one W·P product
//!   for the batch) either confirms the decision or brings in the 128 most violating points. A
//!   row whose corral needs hundreds of points then pays for a few full passes, not one per
//!   point (a set over 1,024 drops the points outside the corral that violate least). N minus
//!   the rows the cheap test proves is an *upper bound* on the stolen count: the live figure,
//!   labelled as a bound ([`can_win_upper_bound`]).
//!
//! **Minimum-norm point** (Wolfe 1976, [`min_norm_point`]): keep p = Σλ_k x_k over a small
//! "corral" of points. Major cycle: j = argmin_k p·x_k over all points, in one pass. Stop when
//! ‖p‖² − p·x_j ≤ ε·max_k‖x_k‖² (ε = 1e-10) and also p·x_j > 0, so that a stop away from the
//! origin always carries a separating u. Also stop when ‖p‖ is within the origin tolerance.
//! Otherwise add x_j. Minor cycle: find the affine minimiser α of the corral (Σα = 1) as
//! α ∝ (κ11ᵀ + XᵀX)⁻¹1 (X's columns the corral's points), using R, the Cholesky factor of that
//! matrix (κ = max‖x‖², for balance). R is kept up to date as points come (one triangular
//! solve) and go (Givens rotations), and it is rebuilt every max(64, m) iterations. If some
//! α_k ≤ 0, step from λ towards α until a weight reaches 0 and drop that point, as Wolfe does.
//! The corral stays affinely independent (≤ dim + 1 points). An iteration cap and a
//! no-progress count end the loop in any case (`converged = false`).

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatMut, MatRef, Par};
use rayon::prelude::*;

use crate::Threads;
use crate::matrix::Embeddings;

/// Wolfe's relative optimality tolerance ε: stop when ‖p‖² − min_j p·x_j ≤ ε·max_j‖x_j‖².
pub const WOLFE_TOLERANCE: f64 = 1e-10;
/// Both measures' origin tolerance, relative to the largest row (1 for unit rows). See the
/// module comment.
pub const ORIGIN_TOLERANCE: f64 = 1e-6;
/// Separability's unit rows allow a tighter optimality test: their products round at ~1e-16·d.
const SEPARABILITY_TOLERANCE: f64 = 1e-12;
/// A corral weight at or below this is zero: the point leaves the corral.
const WEIGHT_FLOOR: f64 = 1e-12;
/// A new point whose squared distance from the corral's span (in R's metric) is below this
/// fraction of its squared length would make the corral affinely dependent.
const DEPENDENCE: f64 = 1e-13;
/// R is rebuilt from the corral's points at least this many iterations apart (or m, if
/// larger), so that update errors do not build up.
const REFACTOR_EVERY: usize = 64;
/// Major iterations in a row without ‖p‖ decreasing before giving up.
const STALL_LIMIT: usize = 5;
/// Rows solved together: their full passes are one W·P product.
const BATCH: usize = 32;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HullError {
    #[error("the bias has {got} entries but the matrix has {n} rows")]
    BiasLength { got: usize, n: usize },
    #[error("bias entry {row} is not finite")]
    NonFiniteBias { row: usize },
    #[error("row {row} is out of range: the matrix has {n} rows")]
    RowOutOfRange { row: usize, n: usize },
    #[error("point data has {len} values, not {n} × {dim}")]
    Shape { n: usize, dim: usize, len: usize },
    #[error("point {row} has a non-finite coordinate")]
    NonFinite { row: usize },
}

/// A finite set of points {x_j} in R^dim, given through what Wolfe's algorithm needs. This lets
/// it run on an explicit list ([`PointList`]) and on implicitly translated and lifted rows
/// ([`AnchoredRows`]) alike. Point indices need not be contiguous.
pub trait PointSet {
    fn dim(&self) -> usize;
    /// Writes x_j into `out` (`dim` values).
    fn point(&self, j: usize, out: &mut [f64]);
    /// (argmin_j p·x_j, its value): the linear-minimisation oracle, one pass over all points.
    /// None when there are no points.
    fn argmin_dot(&self, p: &[f64]) -> Option<(usize, f64)>;
    /// (the index of a point of least norm, max_j ‖x_j‖²); None when there are no points.
    fn extent(&self) -> Option<(usize, f64)>;
}

/// An explicit row-major `n × dim` list of points.
#[derive(Debug, Clone, Copy)]
pub struct PointList<'a> {
    n: usize,
    dim: usize,
    data: &'a [f64],
}

impl<'a> PointList<'a> {
    pub fn new(n: usize, dim: usize, data: &'a [f64]) -> Result<Self, HullError> {
        if n.checked_mul(dim) != Some(data.len()) {
            return Err(HullError::Shape {
                n,
                dim,
                len: data.len(),
            });
        }
        if let Some(k) = data.iter().position(|v| !v.is_finite()) {
            return Err(HullError::NonFinite { row: k / dim });
        }
        Ok(Self { n, dim, data })
    }

    fn row(&self, j: usize) -> &'a [f64] {
        &self.data[j * self.dim..(j + 1) * self.dim]
    }
}

impl PointSet for PointList<'_> {
    fn dim(&self) -> usize {
        self.dim
    }

    fn point(&self, j: usize, out: &mut [f64]) {
        out.copy_from_slice(self.row(j));
    }

    fn argmin_dot(&self, p: &[f64]) -> Option<(usize, f64)> {
        let mut values = vec![0.0; self.n];
        if self.n > 0 && self.dim > 0 {
            matmul(
                MatMut::from_column_major_slice_mut(&mut values, self.n, 1),
                Accum::Replace,
                MatRef::from_row_major_slice(self.data, self.n, self.dim),
                MatRef::from_column_major_slice(p, self.dim, 1),
                1.0,
                Par::Seq,
            );
        }
        argmin(values.into_iter().enumerate())
    }

    fn extent(&self) -> Option<(usize, f64)> {
        let norms = (0..self.n).map(|j| (j, dot(self.row(j), self.row(j))));
        extent(norms)
    }
}

/// Row `anchor`'s stolen-probability problem as a point set: x_j = (w_j − w_i, b_j − b_i) for
/// j ≠ i (index j), and, with a bias, the artificial point z = (0, −M) (index n) with
/// M = max_j‖x_j‖ (1 if that is 0). Without a bias, the points are w_j − w_i in R^d.
#[derive(Debug, Clone, Copy)]
pub struct AnchoredRows<'a> {
    w: Embeddings<'a>,
    bias: Option<&'a [f32]>,
    anchor: usize,
    lift: f64,
    scale2: f64,
}

impl<'a> AnchoredRows<'a> {
    pub fn new(
        w: Embeddings<'a>,
        bias: Option<&'a [f32]>,
        anchor: usize,
    ) -> Result<Self, HullError> {
        check_bias(bias, w.n())?;
        if anchor >= w.n() {
            return Err(HullError::RowOutOfRange {
                row: anchor,
                n: w.n(),
            });
        }
        let mut me = Self {
            w,
            bias,
            anchor,
            lift: 0.0,
            scale2: 0.0,
        };
        let mut x = vec![0.0; me.dim()];
        let mut max2 = 0.0f64;
        for j in (0..w.n()).filter(|&j| j != anchor) {
            me.point(j, &mut x);
            max2 = max2.max(dot(&x, &x));
        }
        me.scale2 = max2;
        if bias.is_some() {
            me.lift = if max2 > 0.0 { max2.sqrt() } else { 1.0 };
            me.scale2 = me.lift * me.lift;
        }
        Ok(me)
    }

    /// max_j ‖x_j‖ over all the points (z included).
    pub fn scale(&self) -> f64 {
        self.scale2.sqrt()
    }

    fn bias_diff(&self, j: usize) -> f64 {
        self.bias
            .map_or(0.0, |b| f64::from(b[j]) - f64::from(b[self.anchor]))
    }
}

impl PointSet for AnchoredRows<'_> {
    fn dim(&self) -> usize {
        self.w.d() + usize::from(self.bias.is_some())
    }

    fn point(&self, j: usize, out: &mut [f64]) {
        let d = self.w.d();
        if j == self.w.n() {
            out.fill(0.0);
            out[d] = -self.lift;
            return;
        }
        let (wj, wi) = (self.w.row(j), self.w.row(self.anchor));
        for ((o, &a), &b) in out.iter_mut().zip(wj).zip(wi) {
            *o = f64::from(a) - f64::from(b);
        }
        if self.bias.is_some() {
            out[d] = self.bias_diff(j);
        }
    }

    fn argmin_dot(&self, p: &[f64]) -> Option<(usize, f64)> {
        let d = self.w.d();
        let (pw, pb) = (&p[..d], p.get(d).copied().unwrap_or(0.0));
        let at_anchor = dot_f32(pw, self.w.row(self.anchor));
        let rows = (0..self.w.n()).filter(|&j| j != self.anchor).map(|j| {
            (
                j,
                dot_f32(pw, self.w.row(j)) - at_anchor + pb * self.bias_diff(j),
            )
        });
        let lifted = self.bias.map(|_| (self.w.n(), -self.lift * pb)).into_iter();
        argmin(rows.chain(lifted))
    }

    fn extent(&self) -> Option<(usize, f64)> {
        let mut x = vec![0.0; self.dim()];
        let norms = (0..self.w.n())
            .filter(|&j| j != self.anchor)
            .map(|j| {
                self.point(j, &mut x);
                (j, dot(&x, &x))
            })
            .collect::<Vec<_>>();
        let lifted = self.bias.map(|_| (self.w.n(), self.lift * self.lift));
        extent(norms.into_iter().chain(lifted))
    }
}

/// How [`min_norm_point`] stops. `origin` and `separation` are relative to
/// scale = max_j‖x_j‖.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MinNormOptions {
    /// ε of Wolfe's test ‖p‖² − min_j p·x_j ≤ ε·scale².
    pub tolerance: f64,
    /// Stop once ‖p‖ ≤ origin·scale: the hull contains the origin to that tolerance.
    pub origin: f64,
    /// Stop once min_j u·x_j > separation·scale (u = p/‖p‖), a separating direction with at
    /// least that margin, instead of running on to the optimum. For decisions, not margins.
    pub separation: Option<f64>,
    /// Major iterations at most.
    pub max_iterations: usize,
}

impl Default for MinNormOptions {
    fn default() -> Self {
        Self {
            tolerance: WOLFE_TOLERANCE,
            origin: 1e-12,
            separation: None,
            max_iterations: 10_000,
        }
    }
}

/// Why [`min_norm_point`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinNormStop {
    /// Wolfe's optimality test passed, and p·x_j > 0 for every point.
    Optimal,
    /// ‖p‖ reached the origin tolerance: the hull contains the origin.
    Origin,
    /// A direction with the requested margin was found ([`MinNormOptions::separation`]).
    Separated,
    /// No progress in floating point: the oracle's point was already in the corral, it would
    /// make the corral affinely dependent, or ‖p‖ stopped decreasing.
    Stalled,
    /// The iteration cap.
    IterationCap,
    /// There are no points.
    Empty,
}

/// The result of [`min_norm_point`].
#[derive(Debug, Clone, PartialEq)]
pub struct MinNorm {
    /// p, the (approximate) minimum-norm point of the hull; empty without points.
    pub point: Vec<f64>,
    /// ‖p‖ (NaN without points).
    pub norm: f64,
    /// The corral: (point index, convex weight λ > 0), with p = Σλ x and Σλ = 1.
    pub weights: Vec<(usize, f64)>,
    /// ‖p‖² − min_j p·x_j at the last oracle call (NaN if the oracle was never called).
    pub gap: f64,
    /// Major iterations, one oracle pass each.
    pub iterations: usize,
    pub stop: MinNormStop,
    /// Stopped by a test (`Optimal`, `Origin`, `Separated`), not by a stall or the cap.
    pub converged: bool,
}

/// Wolfe's minimum-norm point of conv{x_j} (module comment). Never loops forever: the cap,
/// the stall tests and non-finite values all end it.
pub fn min_norm_point<P: PointSet + ?Sized>(points: &P, options: &MinNormOptions) -> MinNorm {
    let dim = points.dim();
    let Some((start, scale2)) = points.extent() else {
        return MinNorm {
            point: Vec::new(),
            norm: f64::NAN,
            weights: Vec::new(),
            gap: f64::NAN,
            iterations: 0,
            stop: MinNormStop::Empty,
            converged: false,
        };
    };
    let scale = scale2.sqrt();
    let limits = Limits {
        eps: options.tolerance * scale2,
        origin: options.origin * scale,
        separation: options.separation.map(|s| s * scale),
        max_iterations: options.max_iterations,
    };
    let mut x = vec![0.0; dim];
    points.point(start, &mut x);
    let (mut wolfe, mut stop) = Wolfe::new(start, x, scale2, limits);
    if !scale2.is_finite() {
        stop = Some(MinNormStop::Stalled);
    }
    let stop = loop {
        if let Some(stop) = stop {
            break stop;
        }
        stop = match points.argmin_dot(&wolfe.p) {
            Some((j, v)) => wolfe.step(j, v, |out| points.point(j, out)),
            None => Some(MinNormStop::Stalled),
        };
    };
    wolfe.finish(stop)
}

/// The absolute thresholds one Wolfe run works to.
#[derive(Debug, Clone, Copy)]
struct Limits {
    eps: f64,
    origin: f64,
    separation: Option<f64>,
    max_iterations: usize,
}

/// Wolfe's algorithm as a state machine: the caller runs the oracle on `p` (so that many runs
/// can share one matrix product) and hands back argmin_j p·x_j. Storage is contiguous so that
/// the corral's products go through faer: the points row-major (m × dim), and R row-major with
/// stride `cap` (only its upper triangle and, during a removal, its first subdiagonal are read).
struct Wolfe {
    dim: usize,
    ids: Vec<usize>,
    pts: Vec<f64>,
    lambda: Vec<f64>,
    /// RᵀR = κ11ᵀ + XXᵀ, X the corral's points as rows.
    r: Vec<f64>,
    cap: usize,
    kappa: f64,
    p: Vec<f64>,
    p_norm2: f64,
    iterations: usize,
    next_refactor: usize,
    stuck: usize,
    gap: f64,
    limits: Limits,
}

impl Wolfe {
    fn new(id: usize, x: Vec<f64>, scale2: f64, limits: Limits) -> (Self, Option<MinNormStop>) {
        let norm2 = dot(&x, &x);
        let kappa = if scale2 > 0.0 { scale2 } else { 1.0 };
        let cap = 8;
        let mut r = vec![0.0; cap * cap];
        r[0] = (kappa + norm2).sqrt();
        let wolfe = Self {
            dim: x.len(),
            ids: vec![id],
            pts: x.clone(),
            p: x,
            lambda: vec![1.0],
            r,
            cap,
            kappa,
            p_norm2: norm2,
            iterations: 0,
            next_refactor: REFACTOR_EVERY,
            stuck: 0,
            gap: f64::NAN,
            limits,
        };
        let stop = if !norm2.is_finite() {
            Some(MinNormStop::Stalled)
        } else if norm2.sqrt() <= limits.origin {
            Some(MinNormStop::Origin)
        } else {
            None
        };
        (wolfe, stop)
    }

    /// One major cycle, given the oracle's answer (j, p·x_j); `fetch` writes x_j.
    fn step(&mut self, j: usize, v: f64, fetch: impl FnOnce(&mut [f64])) -> Option<MinNormStop> {
        if !v.is_finite() {
            return Some(MinNormStop::Stalled);
        }
        let norm = self.p_norm2.sqrt();
        self.gap = self.p_norm2 - v;
        match self.limits.separation {
            Some(margin) if v > margin * norm => return Some(MinNormStop::Separated),
            None if self.gap <= self.limits.eps && v > 0.0 => return Some(MinNormStop::Optimal),
            _ => {}
        }
        if self.ids.contains(&j) {
            return Some(MinNormStop::Stalled);
        }
        self.improve(j, fetch)
    }

    /// Adds x_j (not in the corral) and runs the minor cycles.
    fn improve(&mut self, j: usize, fetch: impl FnOnce(&mut [f64])) -> Option<MinNormStop> {
        if self.iterations >= self.limits.max_iterations {
            return Some(MinNormStop::IterationCap);
        }
        let mut x = vec![0.0; self.dim];
        fetch(&mut x);
        if !self.push(j, &x) {
            return Some(MinNormStop::Stalled);
        }
        self.iterations += 1;
        let before = self.p_norm2;
        if !self.minor_cycles() {
            return Some(MinNormStop::Stalled);
        }
        if self.p_norm2.sqrt() <= self.limits.origin {
            return Some(MinNormStop::Origin);
        }
        if self.p_norm2 < before {
            self.stuck = 0;
        } else {
            self.stuck += 1;
            if self.stuck >= STALL_LIMIT {
                return Some(MinNormStop::Stalled);
            }
        }
        if self.iterations >= self.next_refactor {
            // Every 64 iterations, or every m for a large corral: O(m·dim) a step either way.
            self.next_refactor = self.iterations + REFACTOR_EVERY.max(self.ids.len());
            if !self.refactor() {
                return Some(MinNormStop::Stalled);
            }
        }
        None
    }

    fn finish(self, stop: MinNormStop) -> MinNorm {
        MinNorm {
            norm: self.p_norm2.sqrt(),
            weights: self.ids.iter().copied().zip(self.lambda).collect(),
            point: self.p,
            gap: self.gap,
            iterations: self.iterations,
            stop,
            converged: matches!(
                stop,
                MinNormStop::Optimal | MinNormStop::Origin | MinNormStop::Separated
            ),
        }
    }

    /// Row a of R from column `from` to column `to` (exclusive).
    fn r_row(&self, a: usize, from: usize, to: usize) -> &[f64] {
        &self.r[a * self.cap + from..a * self.cap + to]
    }

    fn diag(&self, a: usize) -> f64 {
        self.r[a * self.cap + a]
    }

    /// Adds x to the corral with weight 0, extending R by the column r (Rᵀr = κ1 + Xx) and the
    /// diagonal ρ = √(κ + ‖x‖² − ‖r‖²); false if x is affinely dependent on the corral.
    fn push(&mut self, id: usize, x: &[f64]) -> bool {
        let (m, dim) = (self.ids.len(), self.dim);
        let mut col = vec![0.0; m];
        if m > 0 && dim > 0 {
            matmul(
                MatMut::from_column_major_slice_mut(&mut col, m, 1),
                Accum::Replace,
                MatRef::from_row_major_slice(&self.pts, m, dim),
                MatRef::from_column_major_slice(x, dim, 1),
                1.0,
                Par::Seq,
            );
        }
        col.iter_mut().for_each(|v| *v += self.kappa);
        for c in 0..m {
            let rc = col[c] / self.diag(c);
            col[c] = rc;
            let row = &self.r[c * self.cap + c + 1..c * self.cap + m];
            for (t, &rv) in col[c + 1..].iter_mut().zip(row) {
                *t -= rc * rv;
            }
        }
        let total = self.kappa + dot(x, x);
        let rho2 = total - dot(&col, &col);
        if !rho2.is_finite() || rho2 <= DEPENDENCE * total {
            return false;
        }
        self.grow(m + 1);
        for (a, &v) in col.iter().enumerate() {
            self.r[a * self.cap + m] = v;
        }
        self.r[m * self.cap + m] = rho2.sqrt();
        self.ids.push(id);
        self.pts.extend_from_slice(x);
        self.lambda.push(0.0);
        true
    }

    /// Room for `need` rows and columns in R.
    fn grow(&mut self, need: usize) {
        if need <= self.cap {
            return;
        }
        let cap = (2 * self.cap).max(need);
        let m = self.ids.len();
        let mut r = vec![0.0; cap * cap];
        for a in 0..m {
            r[a * cap..a * cap + m].copy_from_slice(&self.r[a * self.cap..a * self.cap + m]);
        }
        self.r = r;
        self.cap = cap;
    }

    /// Drops corral member k: delete R's column k, then Givens rotations of rows c, c + 1 clear
    /// the subdiagonal that leaves, and the last row, now zero, goes.
    fn remove(&mut self, k: usize) {
        let (m, dim, cap) = (self.ids.len(), self.dim, self.cap);
        self.ids.remove(k);
        self.lambda.remove(k);
        self.pts.drain(k * dim..(k + 1) * dim);
        for a in 0..m {
            self.r
                .copy_within(a * cap + k + 1..a * cap + m, a * cap + k);
        }
        for c in k..m - 1 {
            let (a, b) = (self.r[c * cap + c], self.r[(c + 1) * cap + c]);
            let hyp = a.hypot(b);
            let (cs, sn) = if hyp > 0.0 {
                (a / hyp, b / hyp)
            } else {
                (1.0, 0.0)
            };
            let (top, bottom) = self.r.split_at_mut((c + 1) * cap);
            let upper = &mut top[c * cap + c..c * cap + m - 1];
            let lower = &mut bottom[c..m - 1];
            for (u, l) in upper.iter_mut().zip(lower.iter_mut()) {
                let (x, y) = (*u, *l);
                *u = cs * x + sn * y;
                *l = -sn * x + cs * y;
            }
            self.r[c * cap + c] = hyp;
        }
    }

    /// Rebuilds R from the corral's points.
    fn refactor(&mut self) -> bool {
        let ids = std::mem::take(&mut self.ids);
        let pts = std::mem::take(&mut self.pts);
        let lambda = std::mem::take(&mut self.lambda);
        for (k, &id) in ids.iter().enumerate() {
            if !self.push(id, &pts[k * self.dim..(k + 1) * self.dim]) {
                return false;
            }
        }
        self.lambda = lambda;
        true
    }

    /// α ∝ (κ11ᵀ + XXᵀ)⁻¹1 with Σα = 1: Rᵀz = 1, then Rα = z (both along R's rows).
    fn affine_weights(&self) -> Option<Vec<f64>> {
        let m = self.ids.len();
        let mut z = vec![1.0; m];
        for c in 0..m {
            let zc = z[c] / self.diag(c);
            z[c] = zc;
            for (t, &rv) in z[c + 1..].iter_mut().zip(self.r_row(c, c + 1, m)) {
                *t -= zc * rv;
            }
        }
        let mut a = vec![0.0; m];
        for c in (0..m).rev() {
            let s = dot(self.r_row(c, c + 1, m), &a[c + 1..]);
            a[c] = (z[c] - s) / self.diag(c);
        }
        let total: f64 = a.iter().sum();
        if !total.is_finite() || total <= 0.0 {
            return None;
        }
        a.iter_mut().for_each(|v| *v /= total);
        Some(a)
    }

    /// Wolfe's minor cycles: move to the corral's affine minimiser, or as far towards it as the
    /// weights stay ≥ 0, dropping the points whose weight reaches 0.
    fn minor_cycles(&mut self) -> bool {
        for _ in 0..=self.ids.len() {
            let Some(alpha) = self.affine_weights() else {
                return false;
            };
            if alpha.iter().all(|&a| a > WEIGHT_FLOOR) {
                self.lambda = alpha;
                self.update_p();
                return true;
            }
            // The step θ ∈ [0, 1] at which the first weight reaches 0 (some α_k ≤ the floor).
            let (mut theta, mut first) = (f64::INFINITY, 0usize);
            for (k, (&l, &a)) in self.lambda.iter().zip(&alpha).enumerate() {
                if a <= WEIGHT_FLOOR {
                    let t = if l > a { l / (l - a) } else { 0.0 };
                    if t < theta {
                        (theta, first) = (t, k);
                    }
                }
            }
            let theta = theta.min(1.0);
            for (l, &a) in self.lambda.iter_mut().zip(&alpha) {
                *l = (1.0 - theta) * *l + theta * a;
            }
            self.lambda[first] = 0.0;
            for k in (0..self.lambda.len()).rev() {
                if self.lambda[k] <= WEIGHT_FLOOR {
                    self.remove(k);
                }
            }
            let total: f64 = self.lambda.iter().sum();
            if self.lambda.is_empty() || total.is_nan() || total <= 0.0 {
                return false;
            }
            self.lambda.iter_mut().for_each(|l| *l /= total);
        }
        self.update_p();
        true
    }

    /// p = Xᵀλ.
    fn update_p(&mut self) {
        let (m, dim) = (self.ids.len(), self.dim);
        if dim > 0 {
            matmul(
                MatMut::from_column_major_slice_mut(&mut self.p, dim, 1),
                Accum::Replace,
                MatRef::from_row_major_slice(&self.pts, m, dim).transpose(),
                MatRef::from_column_major_slice(&self.lambda, m, 1),
                1.0,
                Par::Seq,
            );
        }
        self.p_norm2 = dot(&self.p, &self.p);
    }
}

/// Separability of a set of rows from the origin (module comment).
#[derive(Debug, Clone, PartialEq)]
pub struct Separability {
    /// True only with a verified direction: min_t u·ĥ_t > 0.
    pub separable: bool,
    /// ‖p*‖ when separable; 0 otherwise; NaN without rows.
    pub margin: f64,
    /// u = p*/‖p*‖ when separable.
    pub direction: Option<Vec<f64>>,
    /// (row of the input, λ): the convex weights with Σλ_t ĥ_t = p, whose norm is `residual`.
    /// When the rows are not separable, these weights are the certificate.
    pub weights: Vec<(usize, f64)>,
    /// ‖Σλ_t ĥ_t‖: ≤ 1e-6 when not separable, and equal to the margin when separable.
    pub residual: f64,
    /// Rows that entered (non-zero rows).
    pub rows_used: usize,
    /// Zero rows, left out.
    pub zero_rows: usize,
    /// Wolfe stopped by its tests. False means the verdict "not separable" is not proven.
    pub converged: bool,
}

/// An independent check of a [`Separability`] certificate against the rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CertificateCheck {
    /// The certificate holds. For a separable set: min_t u·ĥ_t > 0. For a non-separable set:
    /// ‖Σλ_t ĥ_t‖ ≤ 1e-6, Σλ = 1 (to 1e-9), λ ≥ 0, and every weight on a non-zero row.
    pub holds: bool,
    /// min_t u·ĥ_t over the non-zero rows (NaN without a direction); ≈ the margin.
    pub min_projection: f64,
    /// ‖Σλ_t ĥ_t‖, recomputed from the rows.
    pub residual: f64,
    pub weight_sum: f64,
    pub min_weight: f64,
}

impl Separability {
    /// Recomputes the certificate's figures from `h` (the rows it was computed from).
    pub fn check(&self, h: Embeddings<'_>) -> CertificateCheck {
        let d = h.d();
        let unit = |t: usize| -> Option<Vec<f64>> {
            let row: Vec<f64> = h.row(t).iter().map(|&v| f64::from(v)).collect();
            let norm = dot(&row, &row).sqrt();
            (norm > 0.0).then(|| row.into_iter().map(|v| v / norm).collect())
        };
        let min_projection = match &self.direction {
            Some(u) if u.len() == d => (0..h.n())
                .filter_map(unit)
                .map(|x| dot(u, &x))
                .fold(f64::INFINITY, f64::min),
            _ => f64::NAN,
        };
        let mut combination = vec![0.0; d];
        let mut weights_valid = !self.weights.is_empty();
        for &(t, l) in &self.weights {
            match (t < h.n()).then(|| unit(t)).flatten() {
                Some(x) => combination
                    .iter_mut()
                    .zip(&x)
                    .for_each(|(c, v)| *c += l * v),
                None => weights_valid = false,
            }
        }
        let residual = dot(&combination, &combination).sqrt();
        let weight_sum: f64 = self.weights.iter().map(|w| w.1).sum();
        let min_weight = self
            .weights
            .iter()
            .map(|w| w.1)
            .fold(f64::INFINITY, f64::min);
        let holds = if self.separable {
            min_projection > 0.0
        } else {
            weights_valid
                && residual <= ORIGIN_TOLERANCE
                && (weight_sum - 1.0).abs() <= 1e-9
                && min_weight >= 0.0
        };
        CertificateCheck {
            holds,
            min_projection,
            residual,
            weight_sum,
            min_weight,
        }
    }
}

/// [`Separability`] of `h`'s rows: the min-norm point of their normalised rows' hull.
pub fn separability(h: Embeddings<'_>) -> Separability {
    let (n, d) = (h.n(), h.d());
    let mut unit = Vec::with_capacity(n * d);
    let mut rows = Vec::with_capacity(n);
    for t in 0..n {
        let row = h.row(t);
        let norm = row
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt();
        if norm > 0.0 && norm.is_finite() {
            rows.push(t);
            unit.extend(row.iter().map(|&v| f64::from(v) / norm));
        }
    }
    let zero_rows = n - rows.len();
    let empty = Separability {
        separable: false,
        margin: f64::NAN,
        direction: None,
        weights: Vec::new(),
        residual: f64::NAN,
        rows_used: rows.len(),
        zero_rows,
        converged: false,
    };
    let Ok(points) = PointList::new(rows.len(), d, &unit) else {
        return empty;
    };
    if rows.is_empty() {
        return empty;
    }
    let options = MinNormOptions {
        tolerance: SEPARABILITY_TOLERANCE,
        origin: ORIGIN_TOLERANCE,
        ..MinNormOptions::default()
    };
    let result = min_norm_point(&points, &options);
    let weights = result.weights.iter().map(|&(k, l)| (rows[k], l)).collect();
    let norm = result.norm;
    let u: Vec<f64> = result.point.iter().map(|v| v / norm).collect();
    let min_projection = (0..rows.len())
        .map(|k| dot(&u, points.row(k)))
        .fold(f64::INFINITY, f64::min);
    let separable =
        result.stop != MinNormStop::Origin && norm > ORIGIN_TOLERANCE && min_projection > 0.0;
    Separability {
        separable,
        margin: if separable { norm } else { 0.0 },
        direction: separable.then_some(u),
        weights,
        residual: norm,
        rows_used: rows.len(),
        zero_rows,
        converged: result.converged && (separable || result.stop == MinNormStop::Origin),
    }
}

/// Whether a row of W can be the strict argmax of h·Wᵀ + b for some h.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowVerdict {
    /// Some h makes it the strict argmax. Proven: a checked h exists.
    CanWin,
    /// No h does, to the tolerance τ (module comment); duplicates included.
    Stolen,
    /// The solver hit its iteration cap or stalled, or its h failed the check.
    Undecided,
}

/// The cheap test's figure: the rows it proves able to win. N minus those is an UPPER BOUND on
/// the stolen count, and must be labelled as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StolenBound {
    /// Per row: proven able to win (h = t·w_i or t·(w_i − mean) for some t > 0).
    pub proven: Vec<bool>,
}

impl StolenBound {
    pub fn rows(&self) -> usize {
        self.proven.len()
    }

    pub fn proven_can_win(&self) -> usize {
        self.proven.iter().filter(|&&p| p).count()
    }

    /// N − proven: at least as many as the stolen rows, never fewer.
    pub fn stolen_at_most(&self) -> usize {
        self.rows() - self.proven_can_win()
    }
}

/// The live figure: only the cheap test (blocked W·Wᵀ, no solve). See [`StolenBound`].
pub fn can_win_upper_bound(
    w: Embeddings<'_>,
    bias: Option<&[f32]>,
    threads: Threads,
) -> Result<StolenBound, HullError> {
    let bias64 = check_bias(bias, w.n())?;
    Ok(StolenBound {
        proven: prefilter(w, bias64.as_deref(), threads, |_| {}),
    })
}

/// The exact verdict of every row of `w` (module comment): first the cheap test, then Wolfe's
/// algorithm on the rows it cannot prove, over working sets, with 32 rows per full pass (in
/// parallel with `Threads::All`). `progress(done, n)` is called from the calling thread as rows are decided.
pub fn stolen_rows(
    w: Embeddings<'_>,
    bias: Option<&[f32]>,
    threads: Threads,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<RowVerdict>, HullError> {
    let n = w.n();
    let bias64 = check_bias(bias, n)?;
    let proven = prefilter(w, bias64.as_deref(), threads, |done| progress(done, n));
    let mut verdicts = vec![RowVerdict::Undecided; n];
    let mut done = 0;
    let mut rest = Vec::new();
    for (i, &p) in proven.iter().enumerate() {
        if p {
            verdicts[i] = RowVerdict::CanWin;
            done += 1;
        } else {
            rest.push(i);
        }
    }
    if !rest.is_empty() {
        let solver = Solver::new(w, bias);
        solver.solve(&rest, threads, |row, verdict| {
            verdicts[row] = verdict;
            done += 1;
            progress(done, n);
        });
    }
    Ok(verdicts)
}

/// One row's exact verdict through [`min_norm_point`] on [`AnchoredRows`] (the same decision
/// as [`stolen_rows`], one row at a time, without the cheap test).
pub fn row_verdict(
    w: Embeddings<'_>,
    bias: Option<&[f32]>,
    row: usize,
) -> Result<RowVerdict, HullError> {
    // Checks the bias and the row.
    let points = AnchoredRows::new(w, bias, row)?;
    let wide = Wide::new(w, bias);
    let tau = wide.tolerance();
    let scale = points.scale();
    let relative = if scale > 0.0 { tau / scale } else { 0.0 };
    let options = MinNormOptions {
        tolerance: WOLFE_TOLERANCE,
        origin: relative,
        separation: Some(relative),
        max_iterations: iteration_cap(points.dim()),
    };
    let result = min_norm_point(&points, &options);
    Ok(wide.decide(row, result.stop, &result.point))
}

fn iteration_cap(dim: usize) -> usize {
    10 * (dim + 1) + 100
}

fn check_bias(bias: Option<&[f32]>, n: usize) -> Result<Option<Vec<f64>>, HullError> {
    let Some(b) = bias else {
        return Ok(None);
    };
    if b.len() != n {
        return Err(HullError::BiasLength { got: b.len(), n });
    }
    if let Some(row) = b.iter().position(|v| !v.is_finite()) {
        return Err(HullError::NonFiniteBias { row });
    }
    Ok(Some(b.iter().map(|&v| f64::from(v)).collect()))
}

/// W and b widened to f64 once (exact), with the rows' lengths: for the solver's products and
/// for checking a winning h.
struct Wide {
    n: usize,
    d: usize,
    data: Vec<f64>,
    norms2: Vec<f64>,
    lens: Vec<f64>,
    bias: Option<Vec<f64>>,
}

impl Wide {
    fn new(w: Embeddings<'_>, bias: Option<&[f32]>) -> Self {
        let data: Vec<f64> = w.data().iter().map(|&v| f64::from(v)).collect();
        let norms2: Vec<f64> = (0..w.n()).map(|i| norm2_f32(w.row(i))).collect();
        Self {
            n: w.n(),
            d: w.d(),
            data,
            lens: norms2.iter().map(|v| v.sqrt()).collect(),
            norms2,
            bias: bias.map(|b| b.iter().map(|&v| f64::from(v)).collect()),
        }
    }

    fn mat(&self) -> MatRef<'_, f64> {
        MatRef::from_row_major_slice(&self.data, self.n, self.d)
    }

    fn row(&self, i: usize) -> &[f64] {
        &self.data[i * self.d..(i + 1) * self.d]
    }

    fn bias_diff(&self, i: usize, j: usize) -> f64 {
        self.bias.as_ref().map_or(0.0, |b| b[j] - b[i])
    }

    /// τ = 1e-6·max_j‖(w_j, b_j)‖.
    fn tolerance(&self) -> f64 {
        let max2 = (0..self.n)
            .map(|j| self.norms2[j] + self.bias.as_ref().map_or(0.0, |b| b[j] * b[j]))
            .fold(0.0f64, f64::max);
        ORIGIN_TOLERANCE * max2.sqrt()
    }

    /// The verdict from how the solver stopped; "can win" only with a checked h.
    fn decide(&self, row: usize, stop: MinNormStop, p: &[f64]) -> RowVerdict {
        match stop {
            MinNormStop::Origin => RowVerdict::Stolen,
            // No other row: nothing to beat.
            MinNormStop::Empty => RowVerdict::CanWin,
            MinNormStop::Separated => match winning_input(p, self.d, self.bias.is_some()) {
                Some(h) if self.wins_with(row, &h) => RowVerdict::CanWin,
                _ => RowVerdict::Undecided,
            },
            MinNormStop::Optimal | MinNormStop::Stalled | MinNormStop::IterationCap => {
                RowVerdict::Undecided
            }
        }
    }

    /// Checks (w_i − w_j)·h + b_i − b_j > 0 for every j ≠ i from a fresh product y = W·h in f64.
    /// Each margin must exceed its rounding bound: |fl(w·h) − w·h| ≤ γ_d‖w‖‖h‖ (any summation
    /// order, γ_d < (d + 2)·2⁻⁵³), with room for the subtractions.
    fn wins_with(&self, row: usize, h: &[f64]) -> bool {
        if h.len() != self.d || h.iter().any(|v| !v.is_finite()) {
            return false;
        }
        let mut y = vec![0.0; self.n];
        matmul(
            MatMut::from_column_major_slice_mut(&mut y, self.n, 1),
            Accum::Replace,
            self.mat(),
            MatRef::from_column_major_slice(h, self.d, 1),
            1.0,
            Par::Seq,
        );
        let unit = (self.d as f64 + 4.0) * f64::EPSILON;
        let h_len = dot(h, h).sqrt();
        let (yi, li) = (y[row], self.lens[row]);
        (0..self.n).filter(|&j| j != row).all(|j| {
            let db = -self.bias_diff(row, j);
            let b_size = self
                .bias
                .as_ref()
                .map_or(0.0, |b| b[row].abs() + b[j].abs());
            let margin = yi - y[j] + db;
            margin > unit * ((li + self.lens[j]) * h_len + b_size)
        })
    }
}

/// h from a separating p: −p without a bias; −p_w/s with s = −p_b > 0 with one.
fn winning_input(p: &[f64], d: usize, lifted: bool) -> Option<Vec<f64>> {
    if p.len() != d + usize::from(lifted) {
        return None;
    }
    let s = if lifted { -p[d] } else { 1.0 };
    if s.is_nan() || s <= 0.0 {
        return None;
    }
    Some(p[..d].iter().map(|v| -v / s).collect())
}

/// The set of t > 0 with t·a_j + c_j > 0 for every j seen so far: the open interval (lo, hi),
/// or empty (`ok` false).
#[derive(Debug, Clone, Copy)]
struct Ray {
    lo: f64,
    hi: f64,
    ok: bool,
}

impl Ray {
    const OPEN: Ray = Ray {
        lo: 0.0,
        hi: f64::INFINITY,
        ok: true,
    };

    #[inline]
    fn need(&mut self, a: f64, c: f64) {
        if a > 0.0 {
            self.lo = self.lo.max(-c / a);
        } else if c > 0.0 {
            if a < 0.0 {
                self.hi = self.hi.min(c / -a);
            }
        } else {
            self.ok = false;
        }
    }

    fn meet(self, other: Ray) -> Ray {
        Ray {
            lo: self.lo.max(other.lo),
            hi: self.hi.min(other.hi),
            ok: self.ok && other.ok,
        }
    }

    /// Non-empty, with room for the divisions' rounding.
    fn holds(self) -> bool {
        self.ok && self.lo.is_finite() && self.hi > self.lo * (1.0 + 1e-9)
    }
}

/// The cheap test (module comment): per row, whether h = t·w_i or h = t·(w_i − mean) wins for
/// some t > 0. Uses the f32 products' rounding bound, so a row marked true certainly can win.
/// `progress` gets the count proven so far after each block of rows.
fn prefilter(
    w: Embeddings<'_>,
    bias: Option<&[f64]>,
    threads: Threads,
    mut progress: impl FnMut(usize),
) -> Vec<bool> {
    const ROWS: usize = 256;
    const COLS: usize = 2048;
    let (n, d) = (w.n(), w.d());
    let norms2: Vec<f64> = (0..n).map(|i| norm2_f32(w.row(i))).collect();
    let lens: Vec<f64> = norms2.iter().map(|v| v.sqrt()).collect();
    let mut mean = vec![0.0f64; d];
    for i in 0..n {
        mean.iter_mut()
            .zip(w.row(i))
            .for_each(|(m, &v)| *m += f64::from(v));
    }
    mean.iter_mut().for_each(|m| *m /= n as f64);
    let mean_len = dot(&mean, &mean).sqrt();
    let q: Vec<f64> = (0..n).map(|i| dot_f32(&mean, w.row(i))).collect();
    // f32 products: |error| ≤ γ‖w_i‖‖w_j‖ with γ = d·2⁻²⁴/(1 − d·2⁻²⁴) < 2(d + 2)·2⁻²⁴. The f64
    // sums (‖w_i‖², mean·w) round far less: `fine` covers them.
    let gamma = 2.0 * (d as f64 + 2.0) * f64::from(f32::EPSILON) / 2.0;
    let fine = (d as f64 + 2.0) * f64::EPSILON;
    let all = w.faer();
    let mut proven = vec![false; n];
    let mut count = 0;
    let starts: Vec<usize> = (0..n).step_by(COLS).collect();
    for r0 in (0..n).step_by(ROWS) {
        let rows = ROWS.min(n - r0);
        let block = all.subrows(r0, rows);
        let tile = |c0: usize| -> Vec<[Ray; 2]> {
            let cols = COLS.min(n - c0);
            let mut s = Mat::<f32>::zeros(cols, rows);
            matmul(
                s.as_mut(),
                Accum::Replace,
                all.subrows(c0, cols),
                block.transpose(),
                1.0f32,
                Par::Seq,
            );
            (0..rows)
                .map(|r| {
                    let i = r0 + r;
                    let (sii, li, qi) = (norms2[i], lens[i], q[i]);
                    let bi = bias.map_or(0.0, |b| b[i]);
                    let mut rays = [Ray::OPEN; 2];
                    for (c, &sij) in s.col_as_slice(r).iter().enumerate() {
                        let j = c0 + c;
                        if j == i {
                            continue;
                        }
                        let err = gamma * li * lens[j] + fine * (sii + mean_len * (li + lens[j]));
                        let a = sii - f64::from(sij) - err;
                        let cb = bias.map_or(0.0, |b| bi - b[j]);
                        rays[0].need(a, cb);
                        rays[1].need(a - qi + q[j], cb);
                    }
                    rays
                })
                .collect()
        };
        let meet = |mut a: Vec<[Ray; 2]>, b: Vec<[Ray; 2]>| {
            for (x, y) in a.iter_mut().zip(&b) {
                x[0] = x[0].meet(y[0]);
                x[1] = x[1].meet(y[1]);
            }
            a
        };
        let open = || vec![[Ray::OPEN; 2]; rows];
        let rays = match threads {
            Threads::All => starts.par_iter().map(|&c0| tile(c0)).reduce(open, meet),
            Threads::Sequential => starts.iter().map(|&c0| tile(c0)).fold(open(), meet),
        };
        for (r, ray) in rays.iter().enumerate() {
            if ray[0].holds() || ray[1].holds() {
                proven[r0 + r] = true;
                count += 1;
            }
        }
        progress(count);
    }
    proven
}

/// Wolfe's algorithm for many rows at once. Each row iterates over its own working set of
/// points, starting with its [`WORKING_ADD`] nearest, and a full pass over all points (for a
/// batch of up to [`BATCH`] rows, one product W·P whose columns are their p_w) either confirms
/// a decision or brings the most violating points into the set. A row whose corral needs
/// hundreds of points then pays for a few full passes, not one per point.
struct Solver {
    wide: Wide,
    tau: f64,
    max_iterations: usize,
    /// Points a working set gains per full pass, and the most it keeps (its corral stays).
    add: usize,
    keep: usize,
}

/// [`Solver::add`] and [`Solver::keep`].
const WORKING_ADD: usize = 128;
const WORKING_MAX: usize = 1024;

struct Job {
    row: usize,
    state: JobState,
}

enum JobState {
    /// Waiting for W·w_i: the nearest x_j start the corral and the working set; max‖x_j‖ sets M.
    Start,
    Run {
        wolfe: Box<Wolfe>,
        set: Working,
        lift: f64,
    },
    Done(RowVerdict),
}

/// A row's working set: point indices, their exact coordinates (row-major), and membership.
struct Working {
    dim: usize,
    ids: Vec<usize>,
    data: Vec<f64>,
    member: Vec<bool>,
    values: Vec<f64>,
}

impl Working {
    fn new(dim: usize, points: usize) -> Self {
        Self {
            dim,
            ids: Vec::new(),
            data: Vec::new(),
            member: vec![false; points],
            values: Vec::new(),
        }
    }

    fn row(&self, k: usize) -> &[f64] {
        &self.data[k * self.dim..(k + 1) * self.dim]
    }

    fn add(&mut self, j: usize, fill: impl FnOnce(&mut [f64])) {
        if self.member[j] {
            return;
        }
        self.member[j] = true;
        self.ids.push(j);
        let start = self.data.len();
        self.data.resize(start + self.dim, 0.0);
        fill(&mut self.data[start..]);
    }

    fn swap_remove(&mut self, k: usize) {
        let last = self.ids.len() - 1;
        self.member[self.ids[k]] = false;
        self.ids.swap_remove(k);
        if k != last {
            let (head, tail) = self.data.split_at_mut(last * self.dim);
            head[k * self.dim..(k + 1) * self.dim].copy_from_slice(&tail[..self.dim]);
        }
        self.data.truncate(last * self.dim);
    }

    /// (position in the set, p·x) of the set's least p·x: one product over the set.
    fn argmin(&mut self, p: &[f64]) -> Option<(usize, f64)> {
        let m = self.ids.len();
        self.values.resize(m, 0.0);
        matmul(
            MatMut::from_column_major_slice_mut(&mut self.values, m, 1),
            Accum::Replace,
            MatRef::from_row_major_slice(&self.data, m, self.dim),
            MatRef::from_column_major_slice(p, self.dim, 1),
            1.0,
            Par::Seq,
        );
        argmin(self.values.iter().copied().enumerate())
    }
}

impl Solver {
    fn new(w: Embeddings<'_>, bias: Option<&[f32]>) -> Self {
        let wide = Wide::new(w, bias);
        Self {
            tau: wide.tolerance(),
            max_iterations: iteration_cap(wide.d + usize::from(bias.is_some())),
            add: WORKING_ADD,
            keep: WORKING_MAX,
            wide,
        }
    }

    fn dim(&self) -> usize {
        self.wide.d + usize::from(self.wide.bias.is_some())
    }

    fn solve(&self, rows: &[usize], threads: Threads, mut finished: impl FnMut(usize, RowVerdict)) {
        let (n, d) = (self.wide.n, self.wide.d);
        let all = self.wide.mat();
        let mut queue = rows.iter().copied();
        let mut active: Vec<Job> = Vec::with_capacity(BATCH);
        loop {
            while active.len() < BATCH {
                match queue.next() {
                    Some(row) => active.push(Job {
                        row,
                        state: JobState::Start,
                    }),
                    None => break,
                }
            }
            if active.is_empty() {
                break;
            }
            let mut queries = Mat::<f64>::zeros(d, active.len());
            for (c, job) in active.iter().enumerate() {
                let q = queries.col_as_slice_mut(c);
                match &job.state {
                    JobState::Start => q.copy_from_slice(self.wide.row(job.row)),
                    JobState::Run { wolfe, .. } => q.copy_from_slice(&wolfe.p[..d]),
                    JobState::Done(_) => {}
                }
            }
            let mut y = Mat::<f64>::zeros(n, active.len());
            matmul(
                y.as_mut(),
                Accum::Replace,
                all,
                queries.as_ref(),
                1.0,
                threads.par(),
            );
            let advance = |(c, job): (usize, &mut Job)| self.advance(job, y.col_as_slice(c));
            match threads {
                Threads::All => active.par_iter_mut().enumerate().for_each(advance),
                Threads::Sequential => active.iter_mut().enumerate().for_each(advance),
            }
            active.retain(|job| match job.state {
                JobState::Done(verdict) => {
                    finished(job.row, verdict);
                    false
                }
                _ => true,
            });
        }
    }

    /// One round for one row, given y = W·q for its query q.
    fn advance(&self, job: &mut Job, y: &[f64]) {
        let i = job.row;
        let next = match &mut job.state {
            JobState::Start => self.start(i, y),
            JobState::Run { wolfe, set, lift } => match self.full_pass(i, wolfe, set, *lift, y) {
                Some(verdict) => JobState::Done(verdict),
                None => return,
            },
            JobState::Done(_) => return,
        };
        job.state = next;
    }

    fn start(&self, i: usize, y: &[f64]) -> JobState {
        let n = self.wide.n;
        let mut near: Vec<(f64, usize)> = (0..n)
            .filter(|&j| j != i)
            .map(|j| {
                let db = self.wide.bias_diff(i, j);
                let d2 =
                    (self.wide.norms2[j] - 2.0 * y[j] + self.wide.norms2[i]).max(0.0) + db * db;
                (d2, j)
            })
            .collect();
        let max_d2 = near.iter().map(|e| e.0).fold(0.0f64, f64::max);
        let Some(&(_, nearest)) = near.iter().min_by(|a, b| a.0.total_cmp(&b.0)) else {
            return JobState::Done(RowVerdict::CanWin);
        };
        let scale2 = if max_d2 > 0.0 { max_d2 } else { 1.0 };
        let lift = if self.wide.bias.is_some() {
            scale2.sqrt()
        } else {
            0.0
        };
        let mut x = vec![0.0; self.dim()];
        self.point(i, lift, nearest, &mut x);
        let limits = Limits {
            eps: WOLFE_TOLERANCE * scale2,
            origin: self.tau,
            separation: Some(self.tau),
            max_iterations: self.max_iterations,
        };
        let (mut wolfe, stop) = Wolfe::new(nearest, x, scale2, limits);
        if let Some(stop) = stop {
            return JobState::Done(self.wide.decide(i, stop, &wolfe.p));
        }
        let mut set = Working::new(self.dim(), n + 1);
        let take = self.add.min(near.len());
        if take < near.len() {
            near.select_nth_unstable_by(take, |a, b| a.0.total_cmp(&b.0));
        }
        for &(_, j) in &near[..take] {
            set.add(j, |out| self.point(i, lift, j, out));
        }
        set.add(nearest, |out| self.point(i, lift, nearest, out));
        if self.wide.bias.is_some() {
            set.add(n, |out| self.point(i, lift, n, out));
        }
        match self.inner(i, &mut wolfe, &mut set) {
            Some(verdict) => JobState::Done(verdict),
            None => JobState::Run {
                wolfe: Box::new(wolfe),
                set,
                lift,
            },
        }
    }

    /// Wolfe iterations over the working set, until they decide the row (Some) or need a full
    /// pass (None): p separates the set, is optimal over it, or rounding stalls it there.
    fn inner(&self, i: usize, wolfe: &mut Wolfe, set: &mut Working) -> Option<RowVerdict> {
        loop {
            let Some((k, v)) = set.argmin(&wolfe.p) else {
                return Some(RowVerdict::Undecided);
            };
            if !v.is_finite() {
                return Some(RowVerdict::Undecided);
            }
            let j = set.ids[k];
            if v > self.tau * wolfe.p_norm2.sqrt()
                || wolfe.p_norm2 - v <= wolfe.limits.eps
                || wolfe.ids.contains(&j)
            {
                return None;
            }
            if let Some(stop) = wolfe.improve(j, |out| out.copy_from_slice(set.row(k))) {
                return Some(self.wide.decide(i, stop, &wolfe.p));
            }
        }
    }

    /// p·x_j for every point from y = W·p_w (p·x_j = y_j − y_i + p_b(b_j − b_i), p·z = −M·p_b):
    /// decides the row if p separates all points by τ; else the most violating points join the
    /// working set and the inner iterations go on.
    fn full_pass(
        &self,
        i: usize,
        wolfe: &mut Wolfe,
        set: &mut Working,
        lift: f64,
        y: &[f64],
    ) -> Option<RowVerdict> {
        let d = self.wide.d;
        let pb = wolfe.p.get(d).copied().unwrap_or(0.0);
        let yi = y[i];
        let mut values: Vec<f64> = match self.wide.bias.as_deref() {
            Some(b) => y
                .iter()
                .zip(b)
                .map(|(&yj, &bj)| yj - yi + pb * (bj - b[i]))
                .collect(),
            None => y.iter().map(|&yj| yj - yi).collect(),
        };
        values[i] = f64::INFINITY;
        values.push(if self.wide.bias.is_some() {
            -lift * pb
        } else {
            f64::INFINITY
        });
        let Some((_, vmin)) = argmin(values.iter().copied().enumerate()) else {
            return Some(RowVerdict::Undecided);
        };
        let p_norm2 = wolfe.p_norm2;
        wolfe.gap = p_norm2 - vmin;
        if vmin > self.tau * p_norm2.sqrt() {
            return Some(self.wide.decide(i, MinNormStop::Separated, &wolfe.p));
        }
        // Improving points outside the set, most violating first.
        let bar = p_norm2 - wolfe.limits.eps;
        let mut new: Vec<(f64, usize)> = values
            .iter()
            .enumerate()
            .filter(|&(j, &v)| v < bar && !set.member[j])
            .map(|(j, &v)| (v, j))
            .collect();
        if new.is_empty() {
            // Optimal over all points without a decision (‖p*‖ within rounding of τ), or
            // rounding: undecided.
            return Some(RowVerdict::Undecided);
        }
        if new.len() > self.add {
            new.select_nth_unstable_by(self.add, |a, b| a.0.total_cmp(&b.0));
            new.truncate(self.add);
        }
        // Make room: drop the non-corral members that violate least.
        let excess = (set.ids.len() + new.len()).saturating_sub(self.keep);
        if excess > 0 {
            let mut spare: Vec<(f64, usize)> = set
                .ids
                .iter()
                .enumerate()
                .filter(|&(_, j)| !wolfe.ids.contains(j))
                .map(|(k, &j)| (values[j], k))
                .collect();
            spare.sort_by(|a, b| b.0.total_cmp(&a.0));
            let mut drop: Vec<usize> = spare.iter().take(excess).map(|e| e.1).collect();
            drop.sort_unstable_by(|a, b| b.cmp(a));
            for k in drop {
                set.swap_remove(k);
            }
        }
        for &(_, j) in &new {
            set.add(j, |out| self.point(i, lift, j, out));
        }
        self.inner(i, wolfe, set)
    }

    fn point(&self, i: usize, lift: f64, j: usize, out: &mut [f64]) {
        let d = self.wide.d;
        if j == self.wide.n {
            out.fill(0.0);
            out[d] = -lift;
            return;
        }
        for ((o, &a), &b) in out.iter_mut().zip(self.wide.row(j)).zip(self.wide.row(i)) {
            *o = a - b;
        }
        if self.wide.bias.is_some() {
            out[d] = self.wide.bias_diff(i, j);
        }
    }
}

/// The first (index, value) of least value; None if empty. NaN values never win.
fn argmin(values: impl Iterator<Item = (usize, f64)>) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    for (j, v) in values {
        if !v.is_nan() && best.is_none_or(|(_, b)| v < b) {
            best = Some((j, v));
        }
    }
    best
}

/// (index of the least norm², max norm²) of (index, norm²) pairs.
fn extent(norms: impl Iterator<Item = (usize, f64)>) -> Option<(usize, f64)> {
    let mut out: Option<(usize, f64, f64)> = None;
    for (j, v) in norms {
        out = Some(match out {
            None => (j, v, v),
            Some((_, least, most)) if v < least => (j, v, most.max(v)),
            Some((k, least, most)) => (k, least, most.max(v)),
        });
    }
    out.map(|(k, _, most)| (k, most))
}

/// A dot product with 8 independent accumulators, so that it vectorises.
#[inline]
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut acc = [0.0f64; 8];
    for (x, y) in ca.zip(cb) {
        for ((s, &u), &v) in acc.iter_mut().zip(x).zip(y) {
            *s += u * v;
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// `dot` with an f32 second operand, widened.
#[inline]
fn dot_f32(a: &[f64], b: &[f32]) -> f64 {
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, &y)| x * f64::from(y))
        .sum();
    let mut acc = [0.0f64; 8];
    for (x, y) in ca.zip(cb) {
        for ((s, &u), &v) in acc.iter_mut().zip(x).zip(y) {
            *s += u * f64::from(v);
        }
    }
    acc.iter().sum::<f64>() + tail
}

fn norm2_f32(row: &[f32]) -> f64 {
    row.iter().map(|&v| f64::from(v) * f64::from(v)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{Rng, SeedableRng};

    fn uniform(rng: &mut ChaCha8Rng) -> f64 {
        (f64::from(rng.next_u32()) + 0.5) / 4_294_967_296.0
    }

    /// Standard normal draws (Box–Muller), so the tests need no distribution crate.
    fn normals(rng: &mut ChaCha8Rng, count: usize) -> Vec<f64> {
        (0..count)
            .map(|_| {
                let (u, v) = (uniform(rng), uniform(rng));
                (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
            })
            .collect()
    }

    /// Convex weights: `k` exponential draws, normalised (a flat Dirichlet), each at least
    /// `floor` (so planted points lie well inside their parents' simplex).
    fn convex_weights(rng: &mut ChaCha8Rng, k: usize, floor: f64) -> Vec<f64> {
        let e: Vec<f64> = (0..k).map(|_| -uniform(rng).ln()).collect();
        let total: f64 = e.iter().sum();
        let free = 1.0 - floor * k as f64;
        e.iter().map(|v| floor + free * v / total).collect()
    }

    /// `random` Gaussian rows in `d` dimensions, then `planted` rows, each a convex combination
    /// of `parents` distinct random rows (computed in f64, stored in f32).
    fn with_planted(
        seed: u64,
        random: usize,
        planted: usize,
        d: usize,
        parents: std::ops::RangeInclusive<usize>,
        floor: f64,
    ) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let z = normals(&mut rng, random * d);
        let mut data: Vec<f32> = z.iter().map(|&v| v as f32).collect();
        let span = parents.end() - parents.start() + 1;
        for _ in 0..planted {
            let k = parents.start() + (rng.next_u32() as usize) % span;
            let mut chosen: Vec<usize> = Vec::with_capacity(k);
            while chosen.len() < k {
                let j = (rng.next_u32() as usize) % random;
                if !chosen.contains(&j) {
                    chosen.push(j);
                }
            }
            let lambda = convex_weights(&mut rng, k, floor);
            for c in 0..d {
                let v: f64 = chosen
                    .iter()
                    .zip(&lambda)
                    .map(|(&j, l)| l * f64::from(data[j * d + c]))
                    .sum();
                data.push(v as f32);
            }
        }
        data
    }

    fn rows64(data: &[f32], d: usize) -> Vec<Vec<f64>> {
        data.chunks(d)
            .map(|r| r.iter().map(|&v| f64::from(v)).collect())
            .collect()
    }

    fn sub(a: &[f64], b: &[f64]) -> Vec<f64> {
        a.iter().zip(b).map(|(x, y)| x - y).collect()
    }

    fn quiet(_: usize, _: usize) {}

    /// The nearest point to the origin of the segment [a, b].
    fn segment_foot(a: &[f64], b: &[f64]) -> Vec<f64> {
        let e = sub(b, a);
        let t = (-dot(a, &e) / dot(&e, &e)).clamp(0.0, 1.0);
        a.iter().zip(&e).map(|(x, y)| x + t * y).collect()
    }

    /// The nearest point to the origin of the triangle abc: the foot on its plane if inside,
    /// else the nearest of its edges' feet.
    fn triangle_foot(a: &[f64], b: &[f64], c: &[f64]) -> Vec<f64> {
        let (e1, e2) = (sub(b, a), sub(c, a));
        // min ‖a + s e1 + t e2‖²: [e1·e1 e1·e2; e1·e2 e2·e2][s t] = −[a·e1 a·e2]
        let (g11, g12, g22) = (dot(&e1, &e1), dot(&e1, &e2), dot(&e2, &e2));
        let (r1, r2) = (-dot(a, &e1), -dot(a, &e2));
        let det = g11 * g22 - g12 * g12;
        let mut best = segment_foot(a, b);
        for cand in [segment_foot(b, c), segment_foot(a, c)] {
            if dot(&cand, &cand) < dot(&best, &best) {
                best = cand;
            }
        }
        if det.abs() > 1e-12 * g11 * g22 {
            let s = (r1 * g22 - r2 * g12) / det;
            let t = (g11 * r2 - g12 * r1) / det;
            if s >= 0.0 && t >= 0.0 && s + t <= 1.0 {
                let foot: Vec<f64> = (0..a.len()).map(|k| a[k] + s * e1[k] + t * e2[k]).collect();
                if dot(&foot, &foot) < dot(&best, &best) {
                    best = foot;
                }
            }
        }
        best
    }

    fn assert_weights_reproduce(result: &MinNorm, points: &[Vec<f64>]) {
        let dim = result.point.len();
        let mut combination = vec![0.0; dim];
        for &(j, l) in &result.weights {
            assert!(l > 0.0, "{result:?}");
            combination
                .iter_mut()
                .zip(&points[j])
                .for_each(|(c, x)| *c += l * x);
        }
        let total: f64 = result.weights.iter().map(|w| w.1).sum();
        assert!((total - 1.0).abs() < 1e-12, "Σλ = {total}");
        assert!(
            dot(
                &sub(&combination, &result.point),
                &sub(&combination, &result.point)
            )
            .sqrt()
                < 1e-12
        );
    }

    /// Random point sets in 2-D and 3-D shifted off the origin: Wolfe's point equals the
    /// nearest point over all segments (2-D) or triangles (3-D) of the set, found by brute force
    /// — the hull's nearest point lies on one of them, and all lie inside the hull.
    #[test]
    fn min_norm_point_matches_brute_force_over_segments_and_triangles() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut seen = [0usize; 2];
        for (dim, n) in [(2usize, 7usize), (3, 8)] {
            for trial in 0..40 {
                let z = normals(&mut rng, n * dim);
                let shift = if trial % 4 == 0 { 0.0 } else { 1.5 };
                let data: Vec<f64> = z
                    .iter()
                    .enumerate()
                    .map(|(k, v)| v + if k % dim == 0 { shift } else { 0.5 * shift })
                    .collect();
                let points: Vec<Vec<f64>> = data.chunks(dim).map(|r| r.to_vec()).collect();
                let mut want = points[0].clone();
                for a in 0..n {
                    for b in a + 1..n {
                        let cands = if dim == 2 {
                            vec![segment_foot(&points[a], &points[b])]
                        } else {
                            (b + 1..n)
                                .map(|c| triangle_foot(&points[a], &points[b], &points[c]))
                                .collect()
                        };
                        for cand in cands {
                            if dot(&cand, &cand) < dot(&want, &want) {
                                want = cand;
                            }
                        }
                    }
                }
                let list = PointList::new(n, dim, &data).expect("points");
                let got = min_norm_point(&list, &MinNormOptions::default());
                assert!(got.converged, "{got:?}");
                assert_weights_reproduce(&got, &points);
                let want_norm = dot(&want, &want).sqrt();
                // The brute force over boundary pieces does not see an interior origin: that is
                // a triangle (tetrahedron) of the set around 0.
                let zero = vec![0.0; dim];
                let mut inside = false;
                for a in 0..n {
                    for b in a + 1..n {
                        for c in b + 1..n {
                            inside |=
                                dim == 2 && in_triangle(&zero, &points[a], &points[b], &points[c]);
                            for d in (c + 1..n).filter(|_| dim == 3) {
                                inside |= in_tetrahedron(
                                    &zero, &points[a], &points[b], &points[c], &points[d],
                                );
                            }
                        }
                    }
                }
                seen[usize::from(inside)] += 1;
                assert_eq!(
                    got.stop == MinNormStop::Origin,
                    inside,
                    "{dim}-D trial {trial}: {got:?}"
                );
                if inside {
                    assert!(got.norm <= 1e-11, "{got:?}");
                    continue;
                }
                assert!(
                    (got.norm - want_norm).abs() < 1e-9,
                    "{dim}-D trial {trial}: {} vs {want_norm}",
                    got.norm
                );
                let diff = sub(&got.point, &want);
                assert!(dot(&diff, &diff).sqrt() < 1e-7, "{got:?} vs {want:?}");
                // Wolfe's test: every point is at least ‖p‖² along p.
                for x in &points {
                    assert!(dot(&got.point, x) >= got.norm * got.norm - 1e-9);
                }
            }
        }
        assert!(seen[0] > 20 && seen[1] > 5, "outside/inside: {seen:?}");
    }

    /// 1,500 Gaussian points in 100-D, shifted off the origin by 0.3 a coordinate, and the same
    /// points unshifted: over more than 64 iterations the corral grows, loses points (Givens
    /// rotations of R) and R is rebuilt. The result is checked by optimality directly: the
    /// weights reproduce p, and p·x_j ≥ ‖p‖² for every j, so p is the min-norm point. Unshifted,
    /// the weights combine 101 points to ~0.
    #[test]
    fn wolfe_is_optimal_in_a_hundred_dimensions() {
        let (n, dim) = (1500, 100);
        let mut rng = ChaCha8Rng::seed_from_u64(30);
        let z = normals(&mut rng, n * dim);
        for shift in [0.3, 0.0] {
            let data: Vec<f64> = z.iter().map(|v| v + shift).collect();
            let points: Vec<Vec<f64>> = data.chunks(dim).map(|r| r.to_vec()).collect();
            let list = PointList::new(n, dim, &data).expect("points");
            let got = min_norm_point(&list, &MinNormOptions::default());
            assert!(
                got.converged && got.iterations > 64,
                "{:?}",
                (got.stop, got.iterations)
            );
            assert_weights_reproduce(&got, &points);
            if shift > 0.0 {
                assert_eq!(got.stop, MinNormStop::Optimal);
                // Points left the corral on the way.
                assert!(got.weights.len() + 5 < got.iterations, "{got:?}");
                assert!(got.norm > 0.5, "{got:?}");
                let least = points
                    .iter()
                    .map(|x| dot(&got.point, x))
                    .fold(f64::INFINITY, f64::min);
                assert!(
                    least >= got.norm * got.norm - 1e-10,
                    "{least} vs {}",
                    got.norm
                );
            } else {
                assert_eq!(got.stop, MinNormStop::Origin);
                assert!(
                    got.norm <= 1e-12 * 20.0 && got.weights.len() == dim + 1,
                    "{got:?}"
                );
            }
        }
    }

    /// Unit vectors at −30°, 30° and 60° (rows of different lengths, and a zero row): the hull's
    /// nearest point to 0 is the foot on the chord from −30° to 60°, at angle 15° and distance
    /// cos 45°, with weights ½, ½ on those two rows.
    #[test]
    fn separability_finds_the_foot_on_an_edge() {
        let deg = |a: f64| a.to_radians();
        let at = |a: f64, len: f64| [(len * deg(a).cos()) as f32, (len * deg(a).sin()) as f32];
        let mut data = Vec::new();
        for (a, len) in [(-30.0, 2.0), (30.0, 0.5), (0.0, 0.0), (60.0, 7.0)] {
            data.extend(at(a, len));
        }
        let h = Embeddings::new(4, 2, &data).expect("rows");
        let s = separability(h);
        assert!(s.separable && s.converged, "{s:?}");
        assert_eq!((s.rows_used, s.zero_rows), (3, 1));
        // f32 rows: angles are off by ~1e-8.
        assert!((s.margin - deg(45.0).cos()).abs() < 1e-7, "{s:?}");
        let u = s.direction.clone().expect("direction");
        assert!((u[0] - deg(15.0).cos()).abs() < 1e-7 && (u[1] - deg(15.0).sin()).abs() < 1e-7);
        let mut weights = s.weights.clone();
        weights.sort_by_key(|w| w.0);
        assert_eq!(weights.iter().map(|w| w.0).collect::<Vec<_>>(), vec![0, 3]);
        assert!(
            weights.iter().all(|w| (w.1 - 0.5).abs() < 1e-7),
            "{weights:?}"
        );
        let check = s.check(h);
        assert!(check.holds, "{check:?}");
        assert!((check.min_projection - s.margin).abs() < 1e-9, "{check:?}");
        assert!((check.residual - s.margin).abs() < 1e-9);
    }

    /// 2e₁, 3e₂, ½e₃ plus rows beyond that face ((1,1,1), (1,1,0)): the nearest point is the
    /// face's centroid (⅓,⅓,⅓), margin 1/√3, weights ⅓ on the three axis rows. Exact in f32.
    #[test]
    fn separability_finds_the_centroid_of_a_face() {
        let data = [
            2.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0f32,
        ];
        let h = Embeddings::new(5, 3, &data).expect("rows");
        let s = separability(h);
        assert!(s.separable && s.converged, "{s:?}");
        assert!((s.margin - 1.0 / 3f64.sqrt()).abs() < 1e-12, "{s:?}");
        let u = s.direction.clone().expect("direction");
        assert!(
            u.iter().all(|v| (v - 1.0 / 3f64.sqrt()).abs() < 1e-12),
            "{u:?}"
        );
        let mut weights = s.weights.clone();
        weights.sort_by_key(|w| w.0);
        assert_eq!(
            weights.iter().map(|w| w.0).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert!(weights.iter().all(|w| (w.1 - 1.0 / 3.0).abs() < 1e-12));
        let check = s.check(h);
        assert!(
            check.holds && (check.min_projection - s.margin).abs() < 1e-12,
            "{check:?}"
        );
        // A single direction repeated: the margin is 1, u that direction.
        let same = [0.0, 3.0, 4.0, 0.0, 6.0, 8.0f32];
        let s = separability(Embeddings::new(2, 3, &same).expect("rows"));
        assert!(s.separable && (s.margin - 1.0).abs() < 1e-12, "{s:?}");
    }

    /// An antipodal pair, and a square around the origin: not separable; the weights combine
    /// the rows to 0 and are checked independently.
    #[test]
    fn antipodal_and_surrounding_rows_are_not_separable() {
        let pair = [1.0, 2.0, 3.0, -2.0, -4.0, -6.0f32];
        let h = Embeddings::new(2, 3, &pair).expect("rows");
        let s = separability(h);
        assert!(
            !s.separable && s.converged && s.direction.is_none(),
            "{s:?}"
        );
        assert_eq!(s.margin, 0.0);
        let check = s.check(h);
        assert!(check.holds && check.residual < 1e-15, "{check:?}");
        assert!(s.weights.iter().all(|w| (w.1 - 0.5).abs() < 1e-12), "{s:?}");
        let square = [3.0, 0.1, -0.2, 2.0, -1.0, 0.3, 0.1, -4.0, 1.0, 1.0f32];
        let h = Embeddings::new(5, 2, &square).expect("rows");
        let s = separability(h);
        assert!(!s.separable && s.converged, "{s:?}");
        let check = s.check(h);
        assert!(
            check.holds && check.residual <= ORIGIN_TOLERANCE,
            "{check:?}"
        );
        assert!((check.weight_sum - 1.0).abs() < 1e-12 && check.min_weight > 0.0);
    }

    /// 200 Gaussian points in 3-D surround the origin: not separable, with a checked
    /// certificate. The same points folded into the half-space x₀ ≥ 0.05 are separable: the
    /// margin is the certified min_t u·ĥ_t, at least e₀'s own (min_t ĥ_t0), and no direction
    /// on a fine grid of the sphere does better.
    #[test]
    fn gaussian_points_surround_the_origin_and_a_half_space_sample_does_not() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let z = normals(&mut rng, 200 * 3);
        let data: Vec<f32> = z.iter().map(|&v| v as f32).collect();
        let h = Embeddings::new(200, 3, &data).expect("rows");
        let s = separability(h);
        assert!(!s.separable && s.converged, "{s:?}");
        let check = s.check(h);
        assert!(check.holds, "{check:?}");
        assert!(check.residual <= ORIGIN_TOLERANCE && check.min_weight >= 0.0);

        let half: Vec<f32> = z
            .iter()
            .enumerate()
            .map(|(k, &v)| {
                if k % 3 == 0 {
                    (v.abs() + 0.05) as f32
                } else {
                    v as f32
                }
            })
            .collect();
        let h = Embeddings::new(200, 3, &half).expect("rows");
        let s = separability(h);
        assert!(s.separable && s.converged, "{s:?}");
        let check = s.check(h);
        assert!(
            check.holds && (check.min_projection - s.margin).abs() < 1e-9,
            "{check:?} {s:?}"
        );
        let units = rows64(&half, 3)
            .into_iter()
            .map(|r| {
                let n = dot(&r, &r).sqrt();
                r.into_iter().map(|v| v / n).collect::<Vec<_>>()
            })
            .collect::<Vec<_>>();
        let min_along = |u: &[f64]| {
            units
                .iter()
                .map(|x| dot(u, x))
                .fold(f64::INFINITY, f64::min)
        };
        assert!(s.margin >= min_along(&[1.0, 0.0, 0.0]) - 1e-12);
        let mut best = f64::NEG_INFINITY;
        for a in 0..400 {
            for b in 0..200 {
                let (theta, phi) = (
                    std::f64::consts::PI * (b as f64 + 0.5) / 200.0,
                    std::f64::consts::TAU * a as f64 / 400.0,
                );
                let u = [
                    theta.cos(),
                    theta.sin() * phi.cos(),
                    theta.sin() * phi.sin(),
                ];
                best = best.max(min_along(&u));
            }
        }
        assert!(
            best <= s.margin + 1e-12,
            "grid {best} beats the margin {}",
            s.margin
        );
        assert!(
            best >= s.margin - 0.02,
            "grid {best} vs margin {}",
            s.margin
        );
        assert!(s.margin > 0.01, "{s:?}");
    }

    /// Zero rows only: nothing to decide, NaN figures, no panic.
    #[test]
    fn zero_rows_give_nan_figures() {
        let s = separability(Embeddings::new(2, 2, &[0.0; 4]).expect("rows"));
        assert!(!s.separable && s.margin.is_nan() && s.residual.is_nan() && !s.converged);
        assert_eq!((s.rows_used, s.zero_rows), (0, 2));
    }

    fn det3(a: [f64; 3], b: [f64; 3], c: [f64; 3]) -> f64 {
        a[0] * (b[1] * c[2] - b[2] * c[1]) - a[1] * (b[0] * c[2] - b[2] * c[0])
            + a[2] * (b[0] * c[1] - b[1] * c[0])
    }

    /// Brute force: p is in the triangle abc (2-D) iff its barycentric coordinates are ≥ −1e-9.
    fn in_triangle(p: &[f64], a: &[f64], b: &[f64], c: &[f64]) -> bool {
        let cross = |o: &[f64], u: &[f64], v: &[f64]| {
            (u[0] - o[0]) * (v[1] - o[1]) - (u[1] - o[1]) * (v[0] - o[0])
        };
        let area = cross(a, b, c);
        if area.abs() < 1e-12 {
            return false;
        }
        let l = [
            cross(p, b, c) / area,
            cross(a, p, c) / area,
            cross(a, b, p) / area,
        ];
        l.iter().all(|&v| v >= -1e-9)
    }

    /// Brute force in 3-D: p is in the tetrahedron abcd iff its barycentric coordinates are
    /// ≥ −1e-9 (Cramer's rule on p − a = Σ l_k (x_k − a)).
    fn in_tetrahedron(p: &[f64], a: &[f64], b: &[f64], c: &[f64], d: &[f64]) -> bool {
        let v = |x: &[f64]| [x[0] - a[0], x[1] - a[1], x[2] - a[2]];
        let (e1, e2, e3, q) = (v(b), v(c), v(d), v(p));
        let det = det3(e1, e2, e3);
        if det.abs() < 1e-12 {
            return false;
        }
        let l1 = det3(q, e2, e3) / det;
        let l2 = det3(e1, q, e3) / det;
        let l3 = det3(e1, e2, q) / det;
        [l1, l2, l3, 1.0 - l1 - l2 - l3].iter().all(|&l| l >= -1e-9)
    }

    /// Row i is a hull vertex iff no simplex (triangle in 2-D, tetrahedron in 3-D) of other
    /// rows contains it.
    fn brute_force_vertices(points: &[Vec<f64>], dim: usize) -> Vec<bool> {
        let n = points.len();
        (0..n)
            .map(|i| {
                let others: Vec<&Vec<f64>> =
                    (0..n).filter(|&j| j != i).map(|j| &points[j]).collect();
                let m = others.len();
                let p = &points[i];
                for a in 0..m {
                    for b in a + 1..m {
                        for c in b + 1..m {
                            if dim == 2 {
                                if in_triangle(p, others[a], others[b], others[c]) {
                                    return false;
                                }
                            } else {
                                for d in c + 1..m {
                                    if in_tetrahedron(p, others[a], others[b], others[c], others[d])
                                    {
                                        return false;
                                    }
                                }
                            }
                        }
                    }
                }
                true
            })
            .collect()
    }

    /// The exact verdicts (batched, both thread modes; and one row at a time) against brute
    /// force; the cheap bound proves only rows that can win, so it never undercounts.
    fn compare_with_brute_force(
        data: &[f32],
        n: usize,
        dim: usize,
        bias: Option<&[f32]>,
        want_can_win: &[bool],
    ) {
        let w = Embeddings::new(n, dim, data).expect("rows");
        let mut calls = 0;
        let all = stolen_rows(w, bias, Threads::All, &mut |done, total| {
            calls += 1;
            assert!(done <= total && total == n);
        })
        .expect("verdicts");
        assert!(calls > 0);
        let seq = stolen_rows(w, bias, Threads::Sequential, &mut quiet).expect("verdicts");
        assert_eq!(all, seq);
        for i in 0..n {
            let want = if want_can_win[i] {
                RowVerdict::CanWin
            } else {
                RowVerdict::Stolen
            };
            assert_eq!(all[i], want, "row {i}");
            assert_eq!(
                row_verdict(w, bias, i).expect("row"),
                want,
                "row {i}, one at a time"
            );
        }
        let bound = can_win_upper_bound(w, bias, Threads::All).expect("bound");
        let stolen = all.iter().filter(|&&v| v == RowVerdict::Stolen).count();
        assert!(
            bound.stolen_at_most() >= stolen,
            "{} < {stolen}",
            bound.stolen_at_most()
        );
        for (i, (&proven, &can_win)) in bound.proven.iter().zip(want_can_win).enumerate() {
            assert!(!proven || can_win, "row {i} proven but stolen");
        }
        assert_eq!(
            bound,
            can_win_upper_bound(w, bias, Threads::Sequential).expect("bound")
        );
    }

    /// 30 Gaussian points in the plane plus 10 planted inside triangles of them (weights
    /// ≥ 0.1), no bias: stolen exactly when brute force finds a triangle of other points around
    /// the point. Some random points are interior too.
    #[test]
    fn stolen_rows_match_brute_force_in_two_dimensions() {
        let data = with_planted(21, 30, 10, 2, 3..=3, 0.1);
        let points = rows64(&data, 2);
        let vertex = brute_force_vertices(&points, 2);
        assert!(
            vertex[..30].iter().any(|&v| !v),
            "some random point is interior"
        );
        assert!(vertex[30..].iter().all(|&v| !v));
        compare_with_brute_force(&data, 40, 2, None, &vertex);
    }

    /// The same in 3-D: 22 Gaussian points plus 6 planted inside tetrahedra, against brute force
    /// over all tetrahedra of other points.
    #[test]
    fn stolen_rows_match_brute_force_in_three_dimensions() {
        let data = with_planted(8, 22, 6, 3, 4..=4, 0.1);
        let points = rows64(&data, 3);
        let vertex = brute_force_vertices(&points, 3);
        assert!(vertex[..22].iter().any(|&v| !v) && vertex[..22].iter().any(|&v| v));
        compare_with_brute_force(&data, 28, 3, None, &vertex);
    }

    /// Σλ_j b_j over the triangle of other rows around w_i (2-D), maximised over triangles: the
    /// LP max{Σλ b : λ in the simplex, Σλ w = w_i}, whose optimum is a basic solution (≤ 3
    /// rows). −∞ when no triangle contains w_i.
    fn best_combination_bias(points: &[Vec<f64>], bias: &[f64], i: usize) -> f64 {
        let n = points.len();
        let mut best = f64::NEG_INFINITY;
        let p = &points[i];
        for a in (0..n).filter(|&a| a != i) {
            for b in (a + 1..n).filter(|&b| b != i) {
                for c in (b + 1..n).filter(|&c| c != i) {
                    let (x, y, z) = (&points[a], &points[b], &points[c]);
                    let cross = |o: &[f64], u: &[f64], v: &[f64]| {
                        (u[0] - o[0]) * (v[1] - o[1]) - (u[1] - o[1]) * (v[0] - o[0])
                    };
                    let area = cross(x, y, z);
                    if area.abs() < 1e-12 {
                        continue;
                    }
                    let l = [
                        cross(p, y, z) / area,
                        cross(x, p, z) / area,
                        cross(x, y, p) / area,
                    ];
                    if l.iter().all(|&v| v >= 0.0) {
                        best = best.max(l[0] * bias[a] + l[1] * bias[b] + l[2] * bias[c]);
                    }
                }
            }
        }
        best
    }

    /// A hand-built case: w = (1,0), (−1,0), (0,1), (0,−1), (0.2,0.1) with biases 1, 0, 0, 0, b.
    /// The best combination of the others for (0.2, 0.1) has λ₁ = 0.55 (λ₁ − λ₂ = 0.2,
    /// λ₃ − λ₄ = 0.1, λ₄ = 0), so Σλb = 0.55: b = 0.6 can win (h = (−0.5, 0.4) does, margins
    /// 0.04, 0.04, 0.14, 0.84), b = 0.5 cannot — nor can any h on a grid. Without a bias row 4
    /// is inside the square: stolen; with bias 0.1 and the others 0 it wins at h = 0.
    #[test]
    fn a_bias_can_let_an_interior_row_win() {
        let data = [1.0, 0.0, -1.0, 0.0, 0.0, 1.0, 0.0, -1.0, 0.2, 0.1f32];
        let w = Embeddings::new(5, 2, &data).expect("rows");
        let margins = |b4: f64, h: [f64; 2]| -> Vec<f64> {
            let bias = [1.0, 0.0, 0.0, 0.0, b4];
            (0..4)
                .map(|j| {
                    (0.2 - f64::from(data[2 * j])) * h[0]
                        + (0.1 - f64::from(data[2 * j + 1])) * h[1]
                        + b4
                        - bias[j]
                })
                .collect()
        };
        let m = margins(0.6, [-0.5, 0.4]);
        assert!(m.iter().all(|&v| v > 0.039), "{m:?}");
        let grid_wins = |b4: f64| {
            (-200..=200).any(|a| {
                (-200..=200).any(|c| {
                    margins(b4, [a as f64 * 0.01, c as f64 * 0.01])
                        .iter()
                        .all(|&v| v > 0.0)
                })
            })
        };
        assert!(grid_wins(0.6) && !grid_wins(0.5));
        for (b4, want) in [(0.6f32, RowVerdict::CanWin), (0.5, RowVerdict::Stolen)] {
            let bias = [1.0, 0.0, 0.0, 0.0, b4];
            let got =
                stolen_rows(w, Some(&bias), Threads::Sequential, &mut quiet).expect("verdicts");
            assert_eq!(got[4], want, "b = {b4}");
            assert_eq!(row_verdict(w, Some(&bias), 4).expect("row"), want);
            // The four outer rows are vertices of the square: they always can win.
            assert!(got[..4].iter().all(|&v| v == RowVerdict::CanWin));
        }
        let got = stolen_rows(w, None, Threads::Sequential, &mut quiet).expect("verdicts");
        assert_eq!(got[4], RowVerdict::Stolen);
        let got = stolen_rows(
            w,
            Some(&[0.0, 0.0, 0.0, 0.0, 0.1]),
            Threads::Sequential,
            &mut quiet,
        )
        .expect("verdicts");
        assert_eq!(got[4], RowVerdict::CanWin);
        // Equality (b = 0 with the others 0) is stolen: a tie is not a strict argmax.
        let got =
            stolen_rows(w, Some(&[0.0; 5]), Threads::Sequential, &mut quiet).expect("verdicts");
        assert_eq!(got[4], RowVerdict::Stolen);
    }

    /// Random biased rows in 2-D (Gaussian rows and biases, plus rows planted inside triangles
    /// with biases near their best combination's): stolen exactly when the LP's optimum,
    /// found by brute force over triangles, reaches b_i.
    #[test]
    fn stolen_rows_with_a_bias_match_the_lp_by_brute_force() {
        let (random, planted) = (16, 10);
        let data = with_planted(4, random, planted, 2, 3..=3, 0.1);
        let points = rows64(&data, 2);
        let n = random + planted;
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let z = normals(&mut rng, n);
        let mut bias64: Vec<f64> = z.iter().map(|v| 0.5 * v).collect();
        // Planted rows: bias = the best combination's ± 0.2, alternately.
        for i in random..n {
            let best = best_combination_bias(&points, &bias64, i);
            bias64[i] = best + if i % 2 == 0 { 0.2 } else { -0.2 };
        }
        let bias: Vec<f32> = bias64.iter().map(|&v| v as f32).collect();
        let bias64: Vec<f64> = bias.iter().map(|&v| f64::from(v)).collect();
        let can_win: Vec<bool> = (0..n)
            .map(|i| {
                let best = best_combination_bias(&points, &bias64, i);
                assert!(
                    !best.is_finite() || (best - bias64[i]).abs() > 1e-4,
                    "row {i} is a near tie"
                );
                best < bias64[i]
            })
            .collect();
        assert!(can_win[random..].iter().any(|&c| c) && can_win[random..].iter().any(|&c| !c));
        compare_with_brute_force(&data, n, 2, Some(&bias), &can_win);
    }

    /// Identical rows (and biases) can never be a strict argmax: both stolen, though they are
    /// a vertex of the hull. With a larger bias, one of the two wins and the other does not.
    #[test]
    fn duplicate_rows_are_stolen_unless_a_bias_separates_them() {
        let data = [1.0, 0.0, 0.0, 1.0, -1.0, -1.0, 1.0, 0.0f32];
        let w = Embeddings::new(4, 2, &data).expect("rows");
        let got = stolen_rows(w, None, Threads::All, &mut quiet).expect("verdicts");
        use RowVerdict::*;
        assert_eq!(got, vec![Stolen, CanWin, CanWin, Stolen]);
        let got = stolen_rows(w, Some(&[0.0, 0.0, 0.0, 0.5]), Threads::All, &mut quiet)
            .expect("verdicts");
        assert_eq!(got, vec![Stolen, CanWin, CanWin, CanWin]);
        // One row: nothing to beat.
        let one = Embeddings::new(1, 2, &data[..2]).expect("row");
        assert_eq!(
            stolen_rows(one, None, Threads::All, &mut quiet).expect("one"),
            vec![CanWin]
        );
        assert_eq!(row_verdict(one, Some(&[1.0]), 0).expect("one"), CanWin);
    }

    #[test]
    fn bad_biases_and_rows_are_errors() {
        let data = [1.0, 0.0, 0.0, 1.0f32];
        let w = Embeddings::new(2, 2, &data).expect("rows");
        assert_eq!(
            stolen_rows(w, Some(&[0.0]), Threads::All, &mut quiet),
            Err(HullError::BiasLength { got: 1, n: 2 })
        );
        assert_eq!(
            can_win_upper_bound(w, Some(&[0.0, f32::NAN]), Threads::All),
            Err(HullError::NonFiniteBias { row: 1 })
        );
        assert_eq!(
            row_verdict(w, None, 2),
            Err(HullError::RowOutOfRange { row: 2, n: 2 })
        );
        assert!(matches!(
            PointList::new(2, 2, &[0.0; 3]),
            Err(HullError::Shape { .. })
        ));
        assert_eq!(
            PointList::new(2, 1, &[0.0, f64::NAN]).map(|_| ()),
            Err(HullError::NonFinite { row: 1 })
        );
        let empty = PointList::new(0, 3, &[]).expect("empty");
        let got = min_norm_point(&empty, &MinNormOptions::default());
        assert_eq!((got.stop, got.converged), (MinNormStop::Empty, false));
    }

    /// 1,500 Gaussian rows in 40-D (all vertices) plus 40 planted combinations of 2–6 of them:
    /// exactly the planted rows are stolen, in both thread modes, and the cheap bound's count
    /// is at least that.
    #[test]
    fn planted_rows_are_found_in_forty_dimensions() {
        let (random, planted, d) = (1500, 40, 40);
        let data = with_planted(3, random, planted, d, 2..=6, 0.0);
        let w = Embeddings::new(random + planted, d, &data).expect("rows");
        let all = stolen_rows(w, None, Threads::All, &mut quiet).expect("verdicts");
        let seq = stolen_rows(w, None, Threads::Sequential, &mut quiet).expect("verdicts");
        assert_eq!(all, seq);
        for (i, v) in all.iter().enumerate() {
            let want = if i < random {
                RowVerdict::CanWin
            } else {
                RowVerdict::Stolen
            };
            assert_eq!(*v, want, "row {i}");
        }
        let bound = can_win_upper_bound(w, None, Threads::All).expect("bound");
        assert!(bound.stolen_at_most() >= planted);
    }

    /// Rows whose norms spread over [0.05, 1] in 12-D: many are inside the hull, with corrals
    /// of up to 13 rows. With working sets of 4 points more per pass and 16 at most, the
    /// solver needs many full passes and drops points from the sets; its verdicts (every row,
    /// proven or not) equal the one-row-at-a-time path's, which sees all points every iteration.
    #[test]
    fn small_working_sets_give_the_same_verdicts() {
        let (n, d) = (300, 12);
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        let z = normals(&mut rng, n * d);
        let data: Vec<f32> = (0..n)
            .flat_map(|i| {
                let scale = (0.05f64.ln() * uniform(&mut rng)).exp();
                z[i * d..(i + 1) * d]
                    .iter()
                    .map(move |v| (v * scale) as f32)
                    .collect::<Vec<_>>()
            })
            .collect();
        let w = Embeddings::new(n, d, &data).expect("rows");
        let bias: Vec<f32> = normals(&mut rng, n)
            .iter()
            .map(|v| (0.1 * v) as f32)
            .collect();
        for bias in [None, Some(&bias[..])] {
            let mut solver = Solver::new(w, bias);
            (solver.add, solver.keep) = (4, 16);
            let mut got = vec![None; n];
            let rows: Vec<usize> = (0..n).collect();
            solver.solve(&rows, Threads::All, |row, v| got[row] = Some(v));
            let want: Vec<_> = (0..n)
                .map(|i| Some(row_verdict(w, bias, i).expect("row")))
                .collect();
            assert_eq!(got, want);
            let stolen = want
                .iter()
                .filter(|v| **v == Some(RowVerdict::Stolen))
                .count();
            assert!(stolen > 20 && stolen < n - 20, "{stolen} stolen");
        }
    }

    /// The budget: 33,278 × 400 Gaussian rows with 1,000 planted convex combinations of 2–10
    /// others, decided in ≤ 10 minutes on 2 cores in release.
    /// `cargo test -p conelab-metrics --release --lib hull -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn stolen_rows_budget_33278x400() {
        let (n, planted, d) = (33_278, 1_000, 400);
        let random = n - planted;
        let data = with_planted(2020, random, planted, d, 2..=10, 0.0);
        let w = Embeddings::new(n, d, &data).expect("rows");
        let start = std::time::Instant::now();
        let (mut last, mut cheap) = (0, 0.0);
        // The cheap test reports at most the random rows done; the solver the rest.
        let verdicts = stolen_rows(w, None, Threads::All, &mut |done, _| {
            last = done;
            if done <= random {
                cheap = start.elapsed().as_secs_f64();
            }
        })
        .expect("verdicts");
        let seconds = start.elapsed().as_secs_f64();
        assert_eq!(last, n);
        let stolen: Vec<usize> = (0..n)
            .filter(|&i| verdicts[i] == RowVerdict::Stolen)
            .collect();
        let undecided = verdicts
            .iter()
            .filter(|&&v| v == RowVerdict::Undecided)
            .count();
        println!(
            "stolen_rows 33278x400: {seconds:.1} s ({cheap:.1} s cheap test), {} stolen, \
             {undecided} undecided",
            stolen.len()
        );
        assert_eq!(stolen, (random..n).collect::<Vec<_>>());
        assert!(verdicts[..random].iter().all(|&v| v == RowVerdict::CanWin));
        let start = std::time::Instant::now();
        let bound = can_win_upper_bound(w, None, Threads::All).expect("bound");
        println!(
            "can_win_upper_bound: {:.1} s, stolen ≤ {}",
            start.elapsed().as_secs_f64(),
            bound.stolen_at_most()
        );
        assert!(seconds < 600.0);
    }
}
