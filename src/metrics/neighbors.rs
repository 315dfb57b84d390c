//! Exact nearest neighbours over all N rows (methods.md §2): cosine by default, euclidean on
//! request. No sampling and no approximate index: one query is a single pass over the unit rows
//! (N·d multiply-adds, split across cores), which at WikiText-2 size is a few milliseconds.

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatRef};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::Threads;
use super::fastmath::dot_f32;
use super::matrix::{Embeddings, MatrixError, RowGroups};
use crate::data::Group;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Similarity {
    #[default]
    Cosine,
    Euclidean,
}

/// One neighbour: its row and its score (cosine, higher is nearer; or euclidean distance, lower
/// is nearer).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
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
        Self {
            n: w.n(),
            d,
            unit,
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

    /// The `k` rows nearest to row `id`, best first, `id` itself excluded.
    pub fn query(&self, id: u32, k: usize, similarity: Similarity) -> Vec<Neighbor> {
        let q = self.unit_row(id as usize).to_vec();
        let cos = self.scan(&q);
        match similarity {
            Similarity::Cosine => top_k_desc(&cos, k, Some(id)),
            Similarity::Euclidean => {
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
