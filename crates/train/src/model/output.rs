//! The tied output layer and the token NLL: the one place logits are made, so every objective
//! (MLE now; the regularisers of methods.md §3 later) sees the same computation.

use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use rayon::prelude::*;

use conelab_metrics::fastmath::{exp_shifted_in_place, max_f32};

/// `logits = h · Wᵀ (+ b)`: `hidden` is `[positions, d]`, `w` is the tied embedding `[N, d]`.
pub fn tied_logits(hidden: Tensor<2>, w: Tensor<2>, bias: Option<Tensor<1>>) -> Tensor<2> {
    let logits = super::precision::matmul(hidden, w.transpose());
    match bias {
        Some(b) => logits + b.unsqueeze::<2>(),
        None => logits,
    }
}

/// The target's score s_t[y_t] = h_t·w_{y_t} (+ b_{y_t}) per position `[P]`, from the target rows
/// alone: no `[P, N]` product.
pub fn target_scores(
    hidden: Tensor<2>,
    w: Tensor<2>,
    bias: Option<Tensor<1>>,
    targets: Tensor<1, Int>,
) -> Tensor<1> {
    let [p, _] = hidden.dims();
    let s = (hidden * w.select(0, targets.clone()))
        .sum_dim(1)
        .reshape([p]);
    match bias {
        Some(b) => s + b.select(0, targets),
        None => s,
    }
}

/// log Z = log Σ_v exp z_v per row, `[P, 1]`, shifted by the (detached) row maximum so that
/// exp cannot overflow; the shift does not change the value or the gradient.
pub fn log_partition(logits: Tensor<2>) -> Tensor<2> {
    let max = logits.clone().detach().max_dim(1);
    (logits - max.clone()).exp().sum_dim(1).log() + max
}

/// Log-probability of each target, `[positions]`: `log softmax(logits)[y]`.
pub fn target_log_probs(logits: Tensor<2>, targets: Tensor<1, Int>) -> Tensor<1> {
    let [n, _] = logits.dims();
    log_softmax(logits, 1)
        .gather(1, targets.reshape([n, 1]))
        .reshape([n])
}

/// Mean token negative log-likelihood.
pub fn mean_nll(logits: Tensor<2>, targets: Tensor<1, Int>) -> Tensor<1> {
    target_log_probs(logits, targets).mean().neg()
}

/// Everything the model-output metrics need from one batch of logits `[positions, N]`, computed
/// on the device in one go (methods.md §2): the target's log-probability, log Z, the entropy of
/// the predicted distribution, the argmax, and Σ over positions of p(·|h).
pub struct OutputTensors {
    pub target_log_probs: Tensor<1>,
    pub log_z: Tensor<1>,
    pub entropy: Tensor<1>,
    pub argmax: Tensor<1, Int>,
    pub prob_sum: Tensor<1>,
}

pub fn output_tensors(logits: Tensor<2>, targets: Tensor<1, Int>) -> OutputTensors {
    let [n, v] = logits.dims();
    let log_z = log_partition(logits.clone());
    let log_p = logits.clone() - log_z.clone();
    let p = log_p.clone().exp();
    // H = −Σ p log p; terms with p = 0 (underflow) contribute 0, and so does 0·(finite log p).
    let entropy = (p.clone() * log_p.clone()).sum_dim(1).neg().reshape([n]);
    OutputTensors {
        target_log_probs: log_p.gather(1, targets.reshape([n, 1])).reshape([n]),
        log_z: log_z.reshape([n]),
        entropy,
        argmax: logits.argmax(1).reshape([n]),
        prob_sum: p.sum_dim(0).reshape([v]),
    }
}

/// [`OutputTensors`]' values computed from logits already in host memory (burn-flex), one pass
/// per row: max and argmax; e = exp(z − max) with the vectorised exp and S = Σ e; then
/// log Z = max + ln S, the target's log z_y − log Z, the entropy H = ln S − Σ e·(z − max) / S and
/// each p = e / S added into Σ_t p. burn's graph of the same makes about eight passes over the
/// `[P, N]` logits with scalar `expf`.
pub struct HostOutputs {
    pub target_log_probs: Vec<f32>,
    pub log_z: Vec<f32>,
    pub entropy: Vec<f32>,
    pub argmax: Vec<u32>,
    pub prob_sum: Vec<f32>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HostOutputError {
    #[error("{values} logits do not make {positions} rows of {vocab}")]
    Shape {
        values: usize,
        positions: usize,
        vocab: usize,
    },
    #[error("target {target} is outside the vocabulary of {vocab}")]
    Target { target: u32, vocab: usize },
}

/// Rows per rayon task: enough to amortise a task's scratch row and Σ p buffer.
const ROWS_PER_TASK: usize = 32;

pub fn host_outputs(
    logits: &[f32],
    vocab: usize,
    targets: &[u32],
) -> Result<HostOutputs, HostOutputError> {
    let p = targets.len();
    if vocab == 0 || logits.len() != p * vocab {
        return Err(HostOutputError::Shape {
            values: logits.len(),
            positions: p,
            vocab,
        });
    }
    if let Some(&target) = targets.iter().find(|&&y| y as usize >= vocab) {
        return Err(HostOutputError::Target { target, vocab });
    }
    let mut target_log_probs = vec![0f32; p];
    let mut log_z = vec![0f32; p];
    let mut entropy = vec![0f32; p];
    let mut argmax = vec![0u32; p];
    let prob_sum = logits
        .par_chunks(ROWS_PER_TASK * vocab)
        .zip(targets.par_chunks(ROWS_PER_TASK))
        .zip(target_log_probs.par_chunks_mut(ROWS_PER_TASK))
        .zip(log_z.par_chunks_mut(ROWS_PER_TASK))
        .zip(entropy.par_chunks_mut(ROWS_PER_TASK))
        .zip(argmax.par_chunks_mut(ROWS_PER_TASK))
        .fold(
            || (vec![0f32; vocab], vec![0f32; vocab]),
            |(mut sums, mut e), (((((block, ys), tlp), lz), ent), am)| {
                for (r, z) in block.chunks_exact(vocab).enumerate() {
                    let max = max_f32(z);
                    am[r] = z.iter().position(|&v| v == max).unwrap_or(0) as u32;
                    e.copy_from_slice(z);
                    let s = exp_shifted_in_place(&mut e, max);
                    let log_s = s.ln();
                    // Σ e·(z − max), skipping −∞ logits (p = 0: no contribution, not 0·∞).
                    let shifted_dot: f64 = e
                        .iter()
                        .zip(z)
                        .filter(|(_, v)| **v != f32::NEG_INFINITY)
                        .map(|(&ei, &zi)| ei as f64 * (zi - max) as f64)
                        .sum();
                    let z_log = max as f64 + log_s;
                    lz[r] = z_log as f32;
                    tlp[r] = (z[ys[r] as usize] as f64 - z_log) as f32;
                    ent[r] = (log_s - shifted_dot / s) as f32;
                    let inv = (1.0 / s) as f32;
                    for (acc, &ei) in sums.iter_mut().zip(e.iter()) {
                        *acc += ei * inv;
                    }
                }
                (sums, e)
            },
        )
        .map(|(sums, _)| sums)
        .reduce(
            || vec![0f32; vocab],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                a
            },
        );
    Ok(HostOutputs {
        target_log_probs,
        log_z,
        entropy,
        argmax,
        prob_sum,
    })
}

#[cfg(test)]
mod host_output_tests {
    use super::*;
    use crate::model::DeviceSpecExt;
    use burn::tensor::Distribution;

    /// The host pass against burn's graph of the same statistics (a second algorithm), on rows
    /// of very different spread, more rows than one task, a vocabulary that is not a multiple
    /// of the vector width; and closed forms on equal logits.
    #[test]
    fn host_outputs_match_burns_and_the_closed_forms() {
        let device = conelab_core::model::DeviceSpec::Cpu.device().expect("cpu");
        let (p, n) = (75, 1003);
        let logits = Tensor::<2>::random([p, n], Distribution::Normal(0.0, 3.0), &device).mul(
            Tensor::<2>::random([p, 1], Distribution::Uniform(0.1, 4.0), &device),
        );
        let targets: Vec<u32> = (0..p as u32).map(|i| (i * 37) % n as u32).collect();
        let values = logits.clone().try_into_vec_as::<f32>().expect("logits");
        let host = host_outputs(&values, n, &targets).expect("host");
        let burn = output_tensors(
            logits,
            Tensor::<1, Int>::from_data(
                TensorData::new(targets.iter().map(|&t| t as i64).collect(), [p]),
                &device,
            ),
        );
        let read = |t: Tensor<1>| t.try_into_vec_as::<f32>().expect("read");
        for (what, a, b, tol) in [
            (
                "target log p",
                host.target_log_probs.clone(),
                read(burn.target_log_probs),
                2e-5,
            ),
            ("log Z", host.log_z.clone(), read(burn.log_z), 2e-5),
            ("entropy", host.entropy.clone(), read(burn.entropy), 1e-4),
            ("Σ p", host.prob_sum.clone(), read(burn.prob_sum), 1e-5),
        ] {
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    (x - y).abs() <= tol * (1.0 + y.abs()),
                    "{what}[{i}]: host {x}, burn {y}"
                );
            }
        }
        let burn_argmax: Vec<u32> = burn
            .argmax
            .try_into_vec_as::<i64>()
            .expect("argmax")
            .into_iter()
            .map(|a| a as u32)
            .collect();
        assert_eq!(host.argmax, burn_argmax);
        // Σ_v Σ_t p = P.
        let total: f64 = host.prob_sum.iter().map(|&v| v as f64).sum();
        assert!((total - p as f64).abs() < 1e-3, "{total}");

        // Equal logits: log Z = c + ln N, H = ln N, every p = 1/N, argmax the first.
        let flat = vec![2.5f32; 3 * n];
        let h = host_outputs(&flat, n, &[0, 5, 9]).expect("flat");
        let ln_n = (n as f64).ln();
        for r in 0..3 {
            assert!((h.log_z[r] as f64 - (2.5 + ln_n)).abs() < 1e-5);
            assert!((h.entropy[r] as f64 - ln_n).abs() < 1e-5);
            assert!((h.target_log_probs[r] as f64 + ln_n).abs() < 1e-5);
            assert_eq!(h.argmax[r], 0);
        }
        assert!(
            h.prob_sum
                .iter()
                .all(|&v| (v as f64 - 3.0 / n as f64).abs() < 1e-8)
        );
        // A −∞ logit has p = 0 and adds nothing to the entropy (not 0·∞).
        let mut masked = vec![0f32; 4];
        masked[3] = f32::NEG_INFINITY;
        let m = host_outputs(&masked, 4, &[1]).expect("masked");
        assert!(
            (m.entropy[0] as f64 - 3f64.ln()).abs() < 1e-6,
            "{}",
            m.entropy[0]
        );
    }

    #[test]
    fn bad_shapes_and_targets_are_errors() {
        assert!(matches!(
            host_outputs(&[0.0; 10], 4, &[0, 1]),
            Err(HostOutputError::Shape { .. })
        ));
        assert_eq!(
            host_outputs(&[0.0; 8], 4, &[0, 4]).err(),
            Some(HostOutputError::Target {
                target: 4,
                vocab: 4
            })
        );
        assert!(matches!(
            host_outputs(&[], 0, &[]),
            Err(HostOutputError::Shape { .. })
        ));
    }
}
