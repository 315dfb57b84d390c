//! The full-softmax head of a step: every term that is a function of the logits (NLL, DEV's
//! (log Z)², unlikelihood) evaluated on a detached copy of the logits z = h·Wᵀ + b, and their
//! gradient G = ∂L/∂z handed back explicitly:
//!
//! - the hidden states get G·W (exactly the autodiff gradient of the same terms),
//! - W's output side gets (gates ⊙ G)ᵀ·h — without gates MLE's gradient, with AGG's gates the
//!   paper's "NLL of stop_grad(h)·Wᵀ with gated logits" (Yu et al. 2022, §4),
//! - the bias gets Σ_p G_p.
//!
//! The returned graph sum(h ⊙ G·W) + sum(W ⊙ (gates⊙G)ᵀ·h) + sum(b ⊙ Σ_p G_p) has exactly those
//! gradients, so one backward pass trains the network. It costs the three matmuls of plain MLE
//! (z, G·W, Gᵀ·h) instead of AGG's two logits products, and one elementwise product for the gates.

use burn::prelude::*;
use burn::tensor::{IndexingUpdateOp, TensorData};

use super::device_softmax::device_head;
use super::host_softmax::{HostTerms, head_in_place};
use super::{mle, self_norm, unlikelihood};
use crate::model::constant;
use crate::model::output::{log_partition, tied_logits};

/// Which logit terms are on, and the gates.
#[derive(Default)]
pub struct HeadTerms {
    /// DEV's α (0 = off).
    pub dev: f64,
    /// Unlikelihood's α with its candidates `(indices [P, T], mask [P, T])`.
    pub unlikelihood: Option<(f64, Tensor<2, Int>, Tensor<2>)>,
    /// AGG's or gradient-part freezing's gates for W's output gradient.
    pub gates: Option<RowGates>,
    /// The targets on the host, given when the logits live in host memory (burn-flex): the NLL,
    /// DEV, unlikelihood and G then come from one fused pass over the logits (`host_softmax`)
    /// instead of burn's graph of the same terms.
    pub host_targets: Option<Vec<u32>>,
    /// W's output-side gradient handed back in [`HeadOutput::w_gradient`] instead of through the
    /// graph: for a caller whose W is the parameter itself (no spectrum control), which adds it
    /// to the parameter's gradient. The graph's term sum(W ⊙ (gates⊙G)ᵀ·h) costs a product over
    /// W forward and one backward (19 ms of a 300 ms `lstm` step), the addition one pass.
    pub w_outside_graph: bool,
}

/// Gates in factored form: position p's row is `g1 + rare_target_p·(g2 − g1)`, and the target's
/// own column is always 1. Cheaper than a `[P, N]` gate matrix: the own-column fix is a sparse
/// correction of P rows instead of a one-hot mask over P×N.
pub struct RowGates {
    /// g1 `[N]`: used at positions whose target is not rare.
    pub g1: Tensor<1>,
    /// g2 `[N]`: used at positions whose target is rare.
    pub g2: Tensor<1>,
    /// 1 where the position's target is rare, else 0, `[P]`.
    pub rare_target: Tensor<1>,
}

pub struct HeadOutput {
    /// Mean token NLL (the value reported, AGG or not).
    pub nll: Tensor<1>,
    /// The weighted values of the other terms (DEV, UL), detached.
    pub penalties: Vec<Tensor<1>>,
    /// The graph to differentiate.
    pub graph: Tensor<1>,
    /// ∂L/∂W from the output side, `[N, d]`, not recorded: when [`HeadTerms::w_outside_graph`]
    /// asked for it, the graph leaves it out and the caller adds it to W's gradient.
    pub w_gradient: Option<Tensor<2>>,
}

/// (gate ⊙ G)ᵀ·h with the gate of row p = g1 + r_p·(g2 − g1) and 1 in the target's column: the
/// dense product with the row gates, plus (1 − gate_{p,y_p})·G_{p,y_p}·h_p added to row y_p.
fn gated_output_gradient(
    g: Tensor<2>,
    hidden: Tensor<2>,
    targets: Tensor<1, Int>,
    gates: RowGates,
) -> Tensor<2> {
    let [p, n] = g.dims();
    let r = gates.rare_target.reshape([p, 1]);
    let g1 = gates.g1.reshape([1, n]);
    let diff = gates.g2.reshape([1, n]) - g1.clone();
    let row_gates = g1.clone() + r.clone() * diff.clone();
    let dense = mle::output_gradient(g.clone() * row_gates, hidden.clone());
    // The target column's gate should have been 1.
    let y = targets.clone().reshape([p, 1]);
    let own_gate = g1.reshape([n]).select(0, targets.clone()).reshape([p, 1])
        + r * diff.reshape([n]).select(0, targets.clone()).reshape([p, 1]);
    let own = g.gather(1, y) * (own_gate.neg() + 1.0);
    dense.select_assign(0, targets, own * hidden, IndexingUpdateOp::Add)
}

#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("the logits have no gradient (is the device an autodiff device?)")]
    NoGradient,
    #[error("reading the logits: {0}")]
    Read(String),
    #[error(transparent)]
    HostSoftmax(#[from] super::host_softmax::HostSoftmaxError),
}

/// The NLL, the penalties' values and G from one pass over the logits on the host
/// (`host_softmax`): the logits are read in place (burn-flex) and G handed back the same way.
fn host_head(
    logits: Tensor<2>,
    bias: Option<Tensor<1>>,
    host_targets: &[u32],
    terms: &HeadTerms,
) -> Result<(Tensor<1>, Vec<Tensor<1>>, Tensor<2>), HeadError> {
    let read =
        |what: &str, e: burn::tensor::TensorReadError| HeadError::Read(format!("{what}: {e:?}"));
    let [p, n] = logits.dims();
    let device = logits.device();
    let candidates = match &terms.unlikelihood {
        Some((alpha, idx, mask)) => {
            let [_, width] = idx.dims();
            let idx = idx
                .clone()
                .try_into_vec_as::<i64>()
                .map_err(|e| read("candidates", e))?;
            let mask = mask
                .clone()
                .try_into_vec_as::<f32>()
                .map_err(|e| read("candidates", e))?;
            Some((*alpha, idx, mask, width))
        }
        None => None,
    };
    let bias = bias
        .map(|b| b.try_into_vec_as::<f32>().map_err(|e| read("bias", e)))
        .transpose()?;
    let host_terms = HostTerms {
        dev: terms.dev,
        unlikelihood: candidates
            .as_ref()
            .map(|(a, idx, mask, width)| (*a, idx.as_slice(), mask.as_slice(), *width)),
        bias: bias.as_deref(),
    };
    // burn-flex: the pass runs over the logits' own buffer, which becomes G's (a read into a
    // `Vec` copied the `[P, N]` logits, 7 ms of an `lstm` step).
    #[cfg(feature = "flex")]
    let logits = {
        let inner = logits.inner();
        match crate::model::flex_buffer(&inner, p * n) {
            Some(mut flex) => {
                // Only `flex` holds the buffer now: `storage_mut` writes it in place.
                drop(inner);
                let values = head_in_place(flex.storage_mut::<f32>(), n, host_targets, host_terms)?;
                let g = Tensor::<2>::from_primitive::<burn_flex::Flex>(flex);
                // Back on the logits' device (autodiff in training), as a constant.
                let g = if device.is_autodiff() {
                    g.autodiff()
                } else {
                    g
                };
                return Ok(host_values(values, terms, g, &device));
            }
            None => inner,
        }
    };
    let mut z = logits
        .try_into_vec_as::<f32>()
        .map_err(|e| read("logits", e))?;
    let values = head_in_place(&mut z, n, host_targets, host_terms)?;
    let g = Tensor::from_data(TensorData::new(z, [p, n]), &device);
    Ok(host_values(values, terms, g, &device))
}

/// The host pass's values as one-element tensors on `device`, and G: (NLL, penalties, G).
fn host_values(
    values: super::host_softmax::HostValues,
    terms: &HeadTerms,
    g: Tensor<2>,
    device: &Device,
) -> (Tensor<1>, Vec<Tensor<1>>, Tensor<2>) {
    let scalar = |v: f64| Tensor::<1>::from_data(TensorData::new(vec![v as f32], [1]), device);
    let mut penalties = Vec::new();
    if terms.dev > 0.0 {
        penalties.push(scalar(values.dev));
    }
    if terms.unlikelihood.is_some() {
        penalties.push(scalar(values.unlikelihood));
    }
    (scalar(values.nll), penalties, g)
}

/// The two products that carry G into the network: G·W for the hidden states and
/// (gates ⊙ G)ᵀ·h for W's output side, both taken with constants (`model::constant`) so that
/// neither is recorded: with `hidden` or `w` tracked, a recorded product would be
/// differentiated too, into a gradient nobody reads (as costly as the logits' product).
fn explicit_gradients(
    g: &Tensor<2>,
    hidden: &Tensor<2>,
    w: &Tensor<2>,
    targets: Tensor<1, Int>,
    gates: Option<RowGates>,
) -> (Tensor<2>, Tensor<2>) {
    let h_fixed = constant(hidden.clone());
    let to_hidden = crate::model::precision::matmul(g.clone(), constant(w.clone()));
    let to_w = match gates {
        None => mle::output_gradient(g.clone(), h_fixed),
        Some(gates) => gated_output_gradient(g.clone(), h_fixed, targets, gates),
    };
    (to_hidden, to_w)
}

pub fn full_softmax_head(
    hidden: Tensor<2>,
    w: Tensor<2>,
    bias: Option<Tensor<1>>,
    targets: Tensor<1, Int>,
    terms: HeadTerms,
) -> Result<HeadOutput, HeadError> {
    let host = terms.host_targets.is_some();
    let logits = tied_logits(
        constant(hidden.clone()),
        constant(w.clone()),
        // The host pass adds the bias itself, row by row.
        bias.clone().filter(|_| !host).map(constant),
    )
    // A fresh leaf: the gradient of the head terms stops here.
    .detach();
    // Unlikelihood's terms in one LibTorch call, where the logits are LibTorch's.
    #[cfg(feature = "tch")]
    let fused = match (&terms.host_targets, &terms.unlikelihood) {
        (None, Some((beta, idx, mask))) => super::device_softmax::libtorch_head(
            &logits,
            &targets,
            terms.dev,
            Some((*beta, idx, mask)),
        ),
        _ => None,
    };
    #[cfg(not(feature = "tch"))]
    let fused: Option<super::device_softmax::DeviceHead> = None;
    let (nll, penalties, g) = match (terms.host_targets.as_deref(), fused) {
        (Some(host_targets), _) => {
            host_head(logits, bias.clone().map(constant), host_targets, &terms)?
        }
        // Without unlikelihood, G in closed form: a few passes over the logits instead of
        // burn's graph of the same terms (`device_softmax`).
        (None, None) if terms.unlikelihood.is_none() => {
            let out = device_head(logits, targets.clone(), terms.dev);
            (out.nll, out.dev.into_iter().collect(), out.g)
        }
        // With it, on LibTorch: the same, the candidates' columns written out in the call.
        (None, Some(out)) => (out.nll, out.dev.into_iter().chain(out.ul).collect(), out.g),
        // Elsewhere (or where libtorch refused), burn's autodiff of the terms.
        (None, None) => {
            let logits = logits.require_grad();
            let [p, _] = logits.dims();
            // log Z once: the log-probabilities and DEV's (log Z)² share it.
            let log_z = log_partition(logits.clone());
            let log_probs = logits.clone() - log_z.clone();
            let nll = mle::nll_from_log_probs(log_probs.clone(), targets.clone());
            let mut head = nll.clone();
            let mut penalties = Vec::new();
            if terms.dev > 0.0 {
                let log_z = log_z.reshape([p]);
                let pen = self_norm::dev_penalty(log_z).mul_scalar(terms.dev);
                penalties.push(pen.clone().detach());
                head = head + pen;
            }
            if let Some((alpha, idx, mask)) = terms.unlikelihood {
                let pen = unlikelihood::unlikelihood(log_probs, idx, mask).mul_scalar(alpha);
                penalties.push(pen.clone().detach());
                head = head + pen;
            }
            let head_grads = head.backward();
            let g = logits.grad(&head_grads).ok_or(HeadError::NoGradient)?;
            (nll.detach(), penalties, g)
        }
    };
    let (to_hidden, to_w) = explicit_gradients(&g, &hidden, &w, targets, terms.gates);
    let mut graph = (hidden * to_hidden).sum();
    let w_gradient = if terms.w_outside_graph {
        Some(to_w)
    } else {
        graph = graph + (w * to_w).sum();
        None
    };
    if let Some(b) = bias {
        let [n] = b.dims();
        graph = graph + (b * g.sum_dim(0).reshape([n])).sum();
    }
    Ok(HeadOutput {
        nll,
        penalties,
        graph,
        w_gradient,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeviceSpecExt;
    use conelab_core::model::DeviceSpec;

    fn matrix(rows: usize, cols: usize, salt: usize) -> Vec<f32> {
        (0..rows * cols)
            .map(|i| ((i * 7 + salt) % 11) as f32 / 11.0 - 0.45)
            .collect()
    }

    /// With the hidden states and W tracked (as in a training step), the two products are
    /// constants of the graph (nothing recorded, so nothing differentiated), and their values
    /// are G·W and Gᵀ·h written out as sums.
    #[test]
    fn the_explicit_gradients_are_constants_with_the_products_values() {
        let device = DeviceSpec::Cpu
            .training_device()
            .expect("flex with autodiff");
        let (p, n, d) = (5, 7, 3);
        let (g, h, w) = (matrix(p, n, 1), matrix(p, d, 2), matrix(n, d, 3));
        let tensor = |v: &[f32], shape: [usize; 2]| {
            Tensor::<2>::from_data(TensorData::new(v.to_vec(), shape), &device)
        };
        let hidden = tensor(&h, [p, d]).require_grad();
        let weights = tensor(&w, [n, d]).require_grad();
        // burn's own detach keeps a tracked leaf tracked: the trap `constant` avoids.
        assert!(
            tensor(&g, [p, n])
                .matmul(weights.clone().detach())
                .is_tracked()
        );
        let targets =
            Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 3, 6, 2, 1], [p]), &device);
        let (to_hidden, to_w) =
            explicit_gradients(&tensor(&g, [p, n]), &hidden, &weights, targets, None);
        assert!(!to_hidden.is_tracked() && !to_w.is_tracked());
        let to_hidden = to_hidden.try_into_vec_as::<f32>().expect("f32");
        let to_w = to_w.try_into_vec_as::<f32>().expect("f32");
        for i in 0..p {
            for k in 0..d {
                let want: f32 = (0..n).map(|j| g[i * n + j] * w[j * d + k]).sum();
                assert!(
                    (to_hidden[i * d + k] - want).abs() < 1e-5,
                    "G·W at ({i}, {k})"
                );
            }
        }
        for j in 0..n {
            for k in 0..d {
                let want: f32 = (0..p).map(|i| g[i * n + j] * h[i * d + k]).sum();
                assert!((to_w[j * d + k] - want).abs() < 1e-5, "Gᵀ·h at ({j}, {k})");
            }
        }
    }

    /// On LibTorch, unlikelihood's terms come from the extension's one call, not from burn's
    /// autodiff graph over the logits (whose log Z starts with a row maximum and whose backward
    /// differentiates the log-softmax), and they are the graph's values and gradient: the
    /// composed path is forced by the same terms on burn-flex without its host pass.
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    #[test]
    fn libtorch_takes_unlikelihood_in_the_fused_call() {
        let (p, n, d) = (4, 9, 3);
        let (h, w) = (matrix(p, d, 2), matrix(n, d, 3));
        let y = vec![0i64, 3, 6, 2];
        // Candidates: distinct, never the target, padded with mask 0.
        let (idx, mask) = (
            vec![1i64, 2, 0, 0, 4, 0, 0, 1, 3, 0, 0, 0],
            vec![
                1.0f32, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0,
            ],
        );
        let run = |spec: DeviceSpec| {
            let device = spec.training_device().expect("device with autodiff");
            let tensor = |v: &[f32], shape: [usize; 2]| {
                Tensor::<2>::from_data(TensorData::new(v.to_vec(), shape), &device)
            };
            let hidden = tensor(&h, [p, d]).require_grad();
            let weights = tensor(&w, [n, d]).require_grad();
            let targets = Tensor::<1, Int>::from_data(TensorData::new(y.clone(), [p]), &device);
            let terms = HeadTerms {
                dev: 0.2,
                unlikelihood: Some((
                    0.6,
                    Tensor::<2, Int>::from_data(TensorData::new(idx.clone(), [p, 3]), &device),
                    tensor(&mask, [p, 3]),
                )),
                ..HeadTerms::default()
            };
            let (out, ops) = crate::aten::count_ops(|| {
                full_softmax_head(hidden.clone(), weights.clone(), None, targets, terms)
            })
            .expect("counted");
            let out = out.expect("head");
            let grads = out.graph.backward();
            let read = |t: Tensor<2>| t.try_into_vec_as::<f32>().expect("read");
            let values: Vec<f64> = std::iter::once(out.nll)
                .chain(out.penalties)
                .map(|t| t.try_into_vec_as::<f64>().expect("read")[0])
                .collect();
            (
                values,
                read(hidden.grad(&grads).expect("∂h")),
                read(weights.grad(&grads).expect("∂W")),
                ops,
            )
        };
        let (values, dh, dw, ops) = run(DeviceSpec::LibtorchCpu);
        assert!(ops.contains_key("aten::_log_softmax"), "{ops:?}");
        for composed in [
            "aten::max",
            "aten::amax",
            "aten::_log_softmax_backward_data",
        ] {
            assert!(
                !ops.contains_key(composed),
                "the composed form ran: {ops:?}"
            );
        }
        let (want_values, want_dh, want_dw, _) = run(DeviceSpec::Cpu);
        assert_eq!(values.len(), 3, "NLL, DEV and UL");
        for (a, b) in values.iter().zip(&want_values) {
            assert!(
                (a - b).abs() < 1e-5 * b.abs().max(1.0),
                "{values:?} vs {want_values:?}"
            );
        }
        for (got, want) in [(dh, want_dh), (dw, want_dw)] {
            for (a, b) in got.iter().zip(&want) {
                assert!(
                    (a - b).abs() < 1e-5 * b.abs().max(1.0),
                    "{got:?} vs {want:?}"
                );
            }
        }
    }
}
