//! Token-level unlikelihood (Welleck et al. 2020, §5.1; with AGG in Yu et al. Table 4): the
//! penalty α_UL·(1/P)·Σ_t Σ_{c∈C_t} −log(1 − p(c|h_t)), with C_t the distinct tokens of the
//! context before position t in its window (the inputs x_0..x_t) other than the target y_t.

use burn::prelude::*;

/// Candidate columns per position, padded to the window length: `(indices [P, T], mask [P, T])`
/// in row-major order, from the window's inputs and targets `[B·T]`.
pub fn candidates(
    inputs: &[u32],
    targets: &[u32],
    batch: usize,
    time: usize,
) -> (Vec<i64>, Vec<f32>) {
    let p = batch * time;
    let mut idx = vec![0i64; p * time];
    let mut mask = vec![0f32; p * time];
    let mut seen: Vec<u32> = Vec::with_capacity(time);
    for b in 0..batch {
        seen.clear();
        for t in 0..time {
            let pos = b * time + t;
            let x = inputs[pos];
            if !seen.contains(&x) {
                seen.push(x);
            }
            let mut k = 0;
            for &c in &seen {
                if c != targets[pos] {
                    idx[pos * time + k] = c as i64;
                    mask[pos * time + k] = 1.0;
                    k += 1;
                }
            }
        }
    }
    (idx, mask)
}

/// The unweighted penalty (multiply by α_UL) from log-probabilities `[P, N]` and the candidates.
pub fn unlikelihood(log_probs: Tensor<2>, idx: Tensor<2, Int>, mask: Tensor<2>) -> Tensor<1> {
    let [p, _] = log_probs.dims();
    let prob = log_probs.gather(1, idx).exp();
    // 1 − p underflows to 0 only for a certain prediction of a repeated token: clamp, so the
    // penalty stays finite (and large) there.
    let term = (prob.neg() + 1.0).clamp_min(1e-12).log().neg();
    (term * mask).sum().div_scalar(p as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_the_distinct_earlier_tokens_except_the_target() {
        // One stream of 4: inputs 5 6 5 7, targets 6 5 7 6.
        let (idx, mask) = candidates(&[5, 6, 5, 7], &[6, 5, 7, 6], 1, 4);
        let row = |t: usize| -> Vec<i64> {
            (0..4)
                .filter(|&k| mask[t * 4 + k] == 1.0)
                .map(|k| idx[t * 4 + k])
                .collect()
        };
        assert_eq!(row(0), vec![5]);
        assert_eq!(row(1), vec![6]); // {5, 6} minus target 5
        assert_eq!(row(2), vec![5, 6]);
        assert_eq!(row(3), vec![5, 7]); // {5, 6, 7} minus target 6
    }
}
