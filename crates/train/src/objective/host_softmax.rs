//! The MLE head's pass over the logits on the host, for the CPU backend (burn-flex keeps tensors in
//! host memory, so reading the logits and handing the gradient back are moves, not copies).
//!
//! For each position p with logits z_p ∈ ℝᴺ and target y_p, m_p = max_v z_pv:
//!
//!   log Z_p = m_p + ln Σ_v exp(z_pv − m_p)
//!   ℓ_p     = log Z_p − z_{p,y_p}                         (the token NLL)
//!   G_p     = ∂(1/P Σ_q ℓ_q)/∂z_p = (softmax(z_p) − onehot(y_p)) / P
//!
//! With DEV's α·mean_p (log Z_p)² and unlikelihood's −α/P Σ_p Σ_{c∈C_p} log(1 − p_pc) (clamped
//! at 1 − p ≥ 1e-12, where its gradient is 0, as in `unlikelihood.rs`), with w_c = p_c/(1 − p_c)
//! and S_p = Σ_{c∈C_p} w_c:
//!
//!   G_p = [softmax(z_p)·(1 + 2α_DEV·log Z_p − α_UL·S_p) + α_UL·Σ_c w_c·onehot(c) − onehot(y_p)] / P
//!
//! computed in place over z, one row at a time (its maximum, then exp-and-sum, then the scale),
//! with the vectorised exp of `fastmath`. burn's graph of the same terms makes about ten passes
//! over the `[P, N]` logits — log Z, the log-probabilities, the gather, their backward with the
//! exponentials recomputed — each into a fresh buffer (40 MB for `tiny` at N = 10,000), with
//! libm's scalar `expf`. Values and gradients are those of `head.rs`'s graph on the same logits
//! (tested against burn's autodiff, and against closed forms), computed in f64 per row where the
//! graph has f32: for a candidate with 1 − p_c below f32's resolution (~6e-8) the graph clamps to
//! a zero unlikelihood gradient, this pass keeps the exact one down to 1 − p_c = 1e-12.

use rayon::prelude::*;

use conelab_metrics::fastmath::{exp_shifted_in_place, max_f32};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HostSoftmaxError {
    #[error("the logits hold {values} values, not {positions} positions × {n}")]
    Shape {
        values: usize,
        positions: usize,
        n: usize,
    },
    #[error("target {target} is outside the vocabulary of {n}")]
    Target { target: u32, n: usize },
    #[error("the output bias has {got} values, not {n}")]
    Bias { got: usize, n: usize },
    #[error("{got} unlikelihood candidates, not {positions} positions × {width}")]
    Candidates {
        got: usize,
        positions: usize,
        width: usize,
    },
}

/// The penalty terms the pass takes besides the NLL.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostTerms<'a> {
    /// DEV's α (0 = off).
    pub dev: f64,
    /// Unlikelihood's α with its candidates `(indices, mask)`, `width` per position, row-major.
    pub unlikelihood: Option<(f64, &'a [i64], &'a [f32], usize)>,
    /// The output bias `[N]`, added to every row first when the logits come without it (one
    /// pass over a row already in cache instead of a broadcast over the `[P, N]` tensor).
    pub bias: Option<&'a [f32]>,
}

/// The values of the terms (means over positions; the penalties already multiplied by α).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostValues {
    pub nll: f64,
    pub dev: f64,
    pub unlikelihood: f64,
}

/// Replaces the row-major logits `z` (`targets.len()` rows of `n`) by the gradient G of the NLL
/// and the penalties, and returns their values: means over positions summed in f64 in row order
/// (deterministic whatever the threads). A non-finite logit makes the NLL non-finite (the step
/// then reports a divergence); it never panics.
pub fn head_in_place(
    z: &mut [f32],
    n: usize,
    targets: &[u32],
    terms: HostTerms<'_>,
) -> Result<HostValues, HostSoftmaxError> {
    let positions = targets.len();
    if n == 0 || z.len() != positions * n {
        return Err(HostSoftmaxError::Shape {
            values: z.len(),
            positions,
            n,
        });
    }
    if let Some(&target) = targets.iter().find(|&&t| t as usize >= n) {
        return Err(HostSoftmaxError::Target { target, n });
    }
    let (alpha_ul, candidates, width) = match terms.unlikelihood {
        Some((alpha, idx, mask, width)) => {
            if idx.len() != positions * width || mask.len() != idx.len() {
                return Err(HostSoftmaxError::Candidates {
                    got: idx.len().min(mask.len()),
                    positions,
                    width,
                });
            }
            if let Some(&c) = idx.iter().find(|&&c| c < 0 || c as usize >= n) {
                return Err(HostSoftmaxError::Target {
                    target: c.clamp(0, u32::MAX as i64) as u32,
                    n,
                });
            }
            (alpha, Some((idx, mask)), width)
        }
        None => (0.0, None, 0),
    };
    if let Some(b) = terms.bias
        && b.len() != n
    {
        return Err(HostSoftmaxError::Bias { got: b.len(), n });
    }
    let alpha_dev = terms.dev;
    let inv_p = 1.0 / positions as f64;
    let rows: Vec<[f64; 3]> = z
        .par_chunks_mut(n)
        .zip(targets.par_iter())
        .enumerate()
        .map(|(r, (row, &y))| {
            let y = y as usize;
            if let Some(b) = terms.bias {
                row.iter_mut().zip(b).for_each(|(z, b)| *z += b);
            }
            let target_logit = row[y];
            let max = max_f32(row);
            // A row without a finite maximum (all −∞, or +∞ somewhere): its NLL is NaN or ∞ and
            // the step stops there; the shift only has to keep exp from overflowing.
            let shift = if max.is_finite() { max } else { 0.0 };
            let sum = exp_shifted_in_place(row, shift);
            let log_z = shift as f64 + sum.ln();
            let inv_sum = 1.0 / sum;
            // Unlikelihood's candidates: their probabilities before the row is rescaled.
            let mut ul = 0.0;
            // (column, p_c, w_c, mask) of each candidate that is on.
            let mut on: Vec<(usize, f64, f64, f64)> = Vec::new();
            let mut s = 0.0;
            if let Some((idx, mask)) = candidates {
                let cols = &idx[r * width..(r + 1) * width];
                let marks = &mask[r * width..(r + 1) * width];
                for (&c, &m) in cols.iter().zip(marks).filter(|(_, m)| **m != 0.0) {
                    let (c, m) = (c as usize, m as f64);
                    let p = row[c] as f64 * inv_sum;
                    let rest = 1.0 - p;
                    ul -= m * rest.max(1e-12).ln();
                    let w = if rest > 1e-12 { m * p / rest } else { 0.0 };
                    s += w;
                    on.push((c, p, w, m));
                }
            }
            let a = 1.0 + 2.0 * alpha_dev * log_z;
            let scale = ((a - alpha_ul * s) * inv_sum * inv_p) as f32;
            row.iter_mut().for_each(|v| *v *= scale);
            // A candidate's own column, p_c·(A − α·S) + α·w_c, written without its two large
            // terms: near p_c = 1 both are ≈ α·w_c and cancel in f32. With w_c·(1 − p_c) = m·p_c
            // it is p_c·(A − α·(S − w_c)) + α·m·p_c (the candidates are distinct).
            for &(c, p, w, m) in &on {
                let own = if w > 0.0 { m * p } else { 0.0 };
                row[c] = ((p * (a - alpha_ul * (s - w)) + alpha_ul * own) * inv_p) as f32;
            }
            row[y] -= inv_p as f32;
            [log_z - target_logit as f64, log_z * log_z, ul]
        })
        .collect();
    let total = |k: usize| rows.iter().map(|r| r[k]).sum::<f64>() * inv_p;
    Ok(HostValues {
        nll: total(0),
        dev: if alpha_dev > 0.0 {
            alpha_dev * total(1)
        } else {
            0.0
        },
        unlikelihood: alpha_ul * total(2),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The NLL alone: its mean, G in place.
    fn nll_and_gradient_in_place(
        z: &mut [f32],
        n: usize,
        targets: &[u32],
    ) -> Result<f64, HostSoftmaxError> {
        Ok(head_in_place(z, n, targets, HostTerms::default())?.nll)
    }

    /// Equal logits: log Z = ln N + c, every ℓ = ln N, G = (1/N − onehot)/P — a closed form.
    #[test]
    fn equal_logits_give_ln_n_and_the_uniform_gradient() {
        let (p, n) = (3usize, 37usize);
        let mut z = vec![2.5f32; p * n];
        let targets = [0u32, 36, 5];
        let nll = nll_and_gradient_in_place(&mut z, n, &targets).expect("ok");
        assert!((nll - (n as f64).ln()).abs() < 1e-6, "{nll}");
        for (row, &y) in z.chunks(n).zip(&targets) {
            for (v, &g) in row.iter().enumerate() {
                let want = (1.0 / n as f64 - if v == y as usize { 1.0 } else { 0.0 }) / p as f64;
                assert!((g as f64 - want).abs() < 1e-7, "{g} vs {want}");
            }
        }
    }

    /// Unequal logits against a direct f64 computation, and each gradient row sums to 0.
    #[test]
    fn matches_a_direct_f64_computation() {
        let (p, n) = (5usize, 1003usize);
        let z0: Vec<f32> = (0..p * n)
            .map(|i| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * 12.0)
            .collect();
        let targets: Vec<u32> = (0..p as u32).map(|i| i * 200 + 3).collect();
        let mut z = z0.clone();
        let nll = nll_and_gradient_in_place(&mut z, n, &targets).expect("ok");
        let mut want_nll = 0.0;
        for (r, &y) in targets.iter().enumerate() {
            let row = &z0[r * n..(r + 1) * n];
            let log_z = row.iter().map(|&v| (v as f64).exp()).sum::<f64>().ln();
            want_nll += (log_z - row[y as usize] as f64) / p as f64;
            let mut total = 0.0;
            for (v, &x) in row.iter().enumerate() {
                let want =
                    ((x as f64 - log_z).exp() - if v == y as usize { 1.0 } else { 0.0 }) / p as f64;
                let got = z[r * n + v] as f64;
                assert!(
                    (got - want).abs() < 1e-7 * (1.0 + want.abs()),
                    "{got} vs {want}"
                );
                total += got;
            }
            assert!(total.abs() < 1e-6, "row {r} sums to {total}");
        }
        assert!((nll - want_nll).abs() < 1e-5, "{nll} vs {want_nll}");
    }

    /// A near-certain candidate (1 − p_c ≈ 6e-11): its column is (1 + α)·p_c/P and the others
    /// p_v·(1 − α·w_c)/P (− 1/P at the target), computed here in f64 with 1 − p_c summed from
    /// the other terms. The naive p_c·(1 − α·w_c) + α·w_c cancels to garbage in f32.
    #[test]
    fn a_near_certain_candidate_keeps_an_exact_gradient() {
        let (n, alpha) = (5usize, 0.8);
        let z0 = [0.0f32, 25.0, 0.0, 0.0, 0.0];
        let (y, c) = (3usize, 1usize);
        let mut z = z0.to_vec();
        let idx = [c as i64, 0];
        let mask = [1.0f32, 0.0];
        let values = head_in_place(
            &mut z,
            n,
            &[y as u32],
            HostTerms {
                dev: 0.0,
                unlikelihood: Some((alpha, &idx, &mask, 2)),
                bias: None,
            },
        )
        .expect("ok");
        // Relative to z_c: e^{z_v − z_c} for the others, and 1 − p_c = Σ_{v≠c} e / Σ e.
        let others: f64 = (0..n)
            .filter(|&v| v != c)
            .map(|v| ((z0[v] - z0[c]) as f64).exp())
            .sum();
        let total = 1.0 + others;
        let rest = others / total;
        let p = |v: usize| ((z0[v] - z0[c]) as f64).exp() / total;
        let w = p(c) / rest;
        for (v, &got) in z.iter().enumerate() {
            let want = if v == c {
                (1.0 + alpha) * p(c)
            } else {
                p(v) * (1.0 - alpha * w) - if v == y { 1.0 } else { 0.0 }
            };
            let got = got as f64;
            assert!(
                (got - want).abs() < 1e-6 * (1.0 + want.abs()),
                "column {v}: {got} vs {want}"
            );
        }
        assert!(
            (values.unlikelihood - alpha * -(rest.ln())).abs() < 1e-6 * alpha * rest.ln().abs()
        );
    }

    /// Logits without the bias and the bias beside them: the NLL and G of z + b, computed here
    /// in f64; a bias of the wrong width is an error that leaves z as it was.
    #[test]
    fn a_bias_beside_the_logits_is_added_to_every_row() {
        let (p, n) = (4usize, 211usize);
        let z0: Vec<f32> = (0..p * n)
            .map(|i| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * 6.0)
            .collect();
        let bias: Vec<f32> = (0..n).map(|v| (v % 13) as f32 * 0.25 - 1.5).collect();
        let targets: Vec<u32> = vec![0, 17, 210, 99];
        let mut z = z0.clone();
        let terms = HostTerms {
            bias: Some(&bias),
            ..HostTerms::default()
        };
        let nll = head_in_place(&mut z, n, &targets, terms).expect("ok").nll;
        let mut want_nll = 0.0;
        for (r, &y) in targets.iter().enumerate() {
            let row: Vec<f64> = (0..n)
                .map(|v| z0[r * n + v] as f64 + bias[v] as f64)
                .collect();
            let log_z = row.iter().map(|v| v.exp()).sum::<f64>().ln();
            want_nll += (log_z - row[y as usize]) / p as f64;
            for (v, x) in row.iter().enumerate() {
                let want = ((x - log_z).exp() - if v == y as usize { 1.0 } else { 0.0 }) / p as f64;
                let got = z[r * n + v] as f64;
                assert!(
                    (got - want).abs() < 1e-7 * (1.0 + want.abs()),
                    "{got} vs {want}"
                );
            }
        }
        assert!((nll - want_nll).abs() < 1e-5, "{nll} vs {want_nll}");
        let mut z = z0.clone();
        let short = &bias[..n - 1];
        let terms = HostTerms {
            bias: Some(short),
            ..HostTerms::default()
        };
        assert_eq!(
            head_in_place(&mut z, n, &targets, terms),
            Err(HostSoftmaxError::Bias { got: n - 1, n })
        );
        assert_eq!(z, z0);
    }

    #[test]
    fn extreme_logits_do_not_overflow_and_bad_input_is_an_error() {
        let mut z = vec![1000.0f32, 999.0, -1000.0];
        let nll = nll_and_gradient_in_place(&mut z, 3, &[1]).expect("ok");
        assert!(
            (nll - (1.0 + (-1f64).exp()).ln() - 1.0).abs() < 1e-5,
            "{nll}"
        );
        let mut nan = vec![f32::NAN, 0.0, 1.0];
        assert!(
            !nll_and_gradient_in_place(&mut nan, 3, &[0])
                .expect("ok")
                .is_finite()
        );
        let mut inf = vec![f32::INFINITY, 0.0];
        assert!(
            !nll_and_gradient_in_place(&mut inf, 2, &[1])
                .expect("ok")
                .is_finite()
        );
        assert_eq!(
            nll_and_gradient_in_place(&mut [0.0; 5], 2, &[0, 1]),
            Err(HostSoftmaxError::Shape {
                values: 5,
                positions: 2,
                n: 2
            })
        );
        assert_eq!(
            nll_and_gradient_in_place(&mut [0.0; 4], 2, &[0, 2]),
            Err(HostSoftmaxError::Target { target: 2, n: 2 })
        );
    }
}
