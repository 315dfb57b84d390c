//! Exact nearest neighbours over all N rows (methods.md §2): cosine by default, euclidean on
//! request. No sampling and no approximate index. A query is memory-bound (it reads every row), so
//! it first scans a bfloat16 copy of the unit rows (half the bytes), then rescores in f32 every row
//! that could still be in the top k: a bf16 unit row is within 2^-8 of the true one, so a true
//! top-k row scores at least the k-th best approximate score minus 2·2^-8. The result is exactly
//! the f32 top k.

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatRef};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::Threads;
use super::matrix::{Embeddings, MatrixError, RowGroups};
use crate::fastmath::{dot_bf16, dot_f32};
use conelab_data::Group;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Similarity {
    #[default]
    Cosine,
    Euclidean,
}

/// One neighbour: its row and its score (cosine, higher is nearer; or euclidean distance, lower
/// is nearer).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Neighbor {
    pub id: u32,
    pub score: f32,
}

/// Unit rows and norms of a matrix, ready for queries.
#[derive(Debug, Clone)]
pub struct NeighborIndex {
    n: usize,
    d: usize,
    /// Row-major unit rows; a zero row stays zero (cosine 0 to everything).
    unit: Vec<f32>,
    /// The same rows rounded to bfloat16 (upper 16 bits of the f32), for the first pass.
    unit_bf16: Vec<u16>,
    norms: Vec<f32>,
    threads: Threads,
}

const ROWS_PER_TASK: usize = 2048;

impl NeighborIndex {
    pub fn new(w: Embeddings<'_>, threads: Threads) -> Self {
        let d = w.d();
        let mut unit = w.data().to_vec();
        let norms: Vec<f32> = unit
            .chunks_exact_mut(d)
            .map(|row| {
                let norm = row.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
                if norm > 0.0 {
                    row.iter_mut().for_each(|x| *x = (*x as f64 / norm) as f32);
                }
                norm as f32
            })
            .collect();
        let unit_bf16 = unit.iter().map(|&x| to_bf16(x)).collect();
        Self {
            n: w.n(),
            d,
            unit,
            unit_bf16,
            norms,
            threads,
        }
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn norm(&self, id: u32) -> f32 {
        self.norms[id as usize]
    }

    fn unit_row(&self, i: usize) -> &[f32] {
        &self.unit[i * self.d..(i + 1) * self.d]
    }

    /// Cosine of `unit_query` with every row.
    fn scan(&self, unit_query: &[f32]) -> Vec<f32> {
        let mut scores = vec![0f32; self.n];
        let fill = |(block, out): (usize, &mut [f32])| {
            let first = block * ROWS_PER_TASK;
            for (k, s) in out.iter_mut().enumerate() {
                *s = dot_f32(self.unit_row(first + k), unit_query);
            }
        };
        match self.threads {
            Threads::All => scores
                .par_chunks_mut(ROWS_PER_TASK)
                .enumerate()
                .for_each(fill),
            Threads::Sequential => scores.chunks_mut(ROWS_PER_TASK).enumerate().for_each(fill),
        }
        scores
    }

    /// Exact top-k cosine: bf16 scan, then f32 rescoring of every row that may belong.
    fn top_k_cosine(&self, q: &[f32], k: usize, exclude: Option<u32>) -> Vec<Neighbor> {
        let mut approx = vec![0f32; self.n];
        let fill = |(block, out): (usize, &mut [f32])| {
            let first = block * ROWS_PER_TASK;
            for (i, s) in out.iter_mut().enumerate() {
                let r = first + i;
                *s = dot_bf16(&self.unit_bf16[r * self.d..(r + 1) * self.d], q);
            }
        };
        match self.threads {
            Threads::All => approx
                .par_chunks_mut(ROWS_PER_TASK)
                .enumerate()
                .for_each(fill),
            Threads::Sequential => approx.chunks_mut(ROWS_PER_TASK).enumerate().for_each(fill),
        }
        let approx_top = top_k_desc(&approx, k, exclude);
        let Some(kth) = approx_top.last() else {
            return Vec::new();
        };
        // bf16 rounding moves a unit row by at most 2^-8 of its length; f32 sums add ~1e-6.
        let floor = kth.score - 2.0 * (1.0 / 256.0 + 1e-5);
        let candidates: Vec<Neighbor> = approx
            .iter()
            .enumerate()
            .filter(|&(i, &a)| a >= floor && Some(i as u32) != exclude)
            .map(|(i, _)| Neighbor {
                id: i as u32,
                score: dot_f32(self.unit_row(i), q),
            })
            .collect();
        let scores: Vec<f32> = candidates.iter().map(|c| c.score).collect();
        top_k_desc(&scores, k, None)
            .into_iter()
            .map(|nb| candidates[nb.id as usize])
            .collect()
    }

    /// The `k` rows nearest to row `id`, best first, `id` itself excluded.
    pub fn query(&self, id: u32, k: usize, similarity: Similarity) -> Vec<Neighbor> {
        let q = self.unit_row(id as usize).to_vec();
        match similarity {
            Similarity::Cosine => self.top_k_cosine(&q, k, Some(id)),
            Similarity::Euclidean => {
                let cos = self.scan(&q);
                let qn = self.norms[id as usize] as f64;
                let dist: Vec<f32> = cos
                    .iter()
                    .zip(&self.norms)
                    .map(|(&c, &n)| {
                        let n = n as f64;
                        (n * n + qn * qn - 2.0 * n * qn * c as f64).max(0.0).sqrt() as f32
                    })
                    .collect();
                // The identity above cancels for near pairs; recompute the finalists directly.
                let pool = top_k_asc(&dist, (4 * k).max(k + 16), Some(id));
                let qrow: Vec<f64> = self
                    .unit_row(id as usize)
                    .iter()
                    .map(|&x| x as f64 * qn)
                    .collect();
                let mut exact: Vec<Neighbor> = pool
                    .into_iter()
                    .map(|nb| {
                        let n = self.norms[nb.id as usize] as f64;
                        let d2: f64 = self
                            .unit_row(nb.id as usize)
                            .iter()
                            .zip(&qrow)
                            .map(|(&u, &q)| (u as f64 * n - q).powi(2))
                            .sum();
                        Neighbor {
                            id: nb.id,
                            score: d2.sqrt() as f32,
                        }
                    })
                    .collect();
                exact.sort_by(|a, b| a.score.total_cmp(&b.score).then(a.id.cmp(&b.id)));
                exact.truncate(k);
                exact
            }
        }
    }

    /// Top-`k` cosine neighbours of every row (self excluded), by blocked matrix products.
    pub fn all_top_k(&self, k: usize) -> Vec<Vec<u32>> {
        const BLOCK: usize = 256;
        let all = MatRef::from_row_major_slice(&self.unit, self.n, self.d);
        let par = self.threads.par();
        let mut out = Vec::with_capacity(self.n);
        let mut scores = Mat::<f32>::zeros(BLOCK.min(self.n), self.n);
        for start in (0..self.n).step_by(BLOCK) {
            let rows = BLOCK.min(self.n - start);
            let q = all.subrows(start, rows);
            let mut s = scores.as_mut().subrows_mut(0, rows);
            matmul(s.as_mut(), Accum::Replace, q, all.transpose(), 1.0, par);
            for r in 0..rows {
                let row: Vec<f32> = (0..self.n).map(|j| s[(r, j)]).collect();
                let top = top_k_desc(&row, k, Some((start + r) as u32));
                out.push(top.into_iter().map(|nb| nb.id).collect());
            }
        }
        out
    }
}

/// Round-to-nearest-even f32 → bfloat16 (finite inputs).
fn to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    let round = 0x7FFF + ((b >> 16) & 1);
    (b.wrapping_add(round) >> 16) as u16
}

fn top_k_by(
    scores: &[f32],
    k: usize,
    exclude: Option<u32>,
    better: impl Fn(f32, f32) -> std::cmp::Ordering,
) -> Vec<Neighbor> {
    let mut cand: Vec<Neighbor> = scores
        .iter()
        .enumerate()
        .filter(|&(i, _)| Some(i as u32) != exclude)
        .map(|(i, &s)| Neighbor {
            id: i as u32,
            score: s,
        })
        .collect();
    let cmp = |a: &Neighbor, b: &Neighbor| better(a.score, b.score).then(a.id.cmp(&b.id));
    let k = k.min(cand.len());
    if k == 0 {
        return Vec::new();
    }
    if k < cand.len() {
        cand.select_nth_unstable_by(k - 1, cmp);
        cand.truncate(k);
    }
    cand.sort_by(cmp);
    cand
}

/// Highest scores first; ties by lower id.
pub(crate) fn top_k_desc(scores: &[f32], k: usize, exclude: Option<u32>) -> Vec<Neighbor> {
    top_k_by(scores, k, exclude, |a, b| b.total_cmp(&a))
}

fn top_k_asc(scores: &[f32], k: usize, exclude: Option<u32>) -> Vec<Neighbor> {
    top_k_by(scores, k, exclude, |a, b| a.total_cmp(&b))
}

/// Same-class precision@k: for every row with a class, the fraction of its top-k cosine
/// neighbours in the same class; averaged over the rows of each group and over all rows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClassPrecision {
    pub k: usize,
    pub total: f64,
    /// Frequent, medium, rare (NaN for a group without classed rows).
    pub groups: [f64; 3],
}

pub fn class_precision(
    index: &NeighborIndex,
    classes: &[Option<u32>],
    groups: &RowGroups,
    k: usize,
) -> Result<ClassPrecision, MatrixError> {
    for (what, got) in [
        ("the class list", classes.len()),
        ("the group assignment", groups.len()),
    ] {
        if got != index.len() {
            return Err(MatrixError::RowCount {
                what: what.into(),
                got,
                n: index.len(),
            });
        }
    }
    let top = index.all_top_k(k);
    let mut sum = [0f64; 3];
    let mut count = [0usize; 3];
    for (i, nbrs) in top.iter().enumerate() {
        let Some(c) = classes[i] else { continue };
        if nbrs.is_empty() {
            continue;
        }
        let same = nbrs
            .iter()
            .filter(|&&j| classes[j as usize] == Some(c))
            .count();
        let g = groups.group_of(i) as usize;
        sum[g] += same as f64 / nbrs.len() as f64;
        count[g] += 1;
    }
    let mean = |s: f64, c: usize| if c == 0 { f64::NAN } else { s / c as f64 };
    Ok(ClassPrecision {
        k,
        total: mean(sum.iter().sum(), count.iter().sum()),
        groups: Group::ALL.map(|g| mean(sum[g as usize], count[g as usize])),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_is_within_half_an_ulp() {
        for &x in &[1.0f32, -0.123_456_7, 3.999_9, 1e-20, 0.0] {
            let back = f32::from_bits((to_bf16(x) as u32) << 16);
            assert!((back - x).abs() <= x.abs() / 256.0, "{x} -> {back}");
        }
    }

    #[test]
    fn the_bf16_prefilter_never_changes_the_answer() {
        // Many nearly tied cosines (a narrow cone): the case where a bf16-only ranking would err.
        let (n, d) = (3000, 24);
        let mut state = 7u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        let data: Vec<f32> = (0..n * d)
            .map(|k| if k % d == 0 { 10.0 } else { 0.05 * next() })
            .collect();
        let index = NeighborIndex::new(Embeddings::new(n, d, &data).unwrap(), Threads::All);
        for q in [0u32, 1234, 2999] {
            let fast = index.query(q, 10, Similarity::Cosine);
            let exact = top_k_desc(&index.scan(index.unit_row(q as usize)), 10, Some(q));
            assert_eq!(fast, exact);
        }
    }
}
