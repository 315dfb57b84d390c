//! The objectives' numerics against independent computations: closed forms evaluated in f64 on
//! the host, central finite differences of those closed forms, the paper's gradient formula for
//! AGG (Yu et al. 2022, appendix Eq. 23), plain autodiff MLE, and an exact eigendecomposition.

use burn::prelude::*;
use conelab_core::model::DeviceSpec;
use conelab_core::objective::AndSettings;
use conelab_core::objective::{AggCounter, GateSet};
use conelab_train::model::DeviceSpecExt;
use conelab_train::model::SpectralEmbedding;
use conelab_train::model::output::mean_nll;
use conelab_train::objective::agg::{Gates, TokenCounter, agg_gates, row_gates};
use conelab_train::objective::and_loss::and_loss;
use conelab_train::objective::head::{HeadTerms, full_softmax_head};
use conelab_train::objective::self_norm::{UnigramSampler, nce_loss};
use conelab_train::objective::spectrum::{
    orthogonality_frobenius, orthogonality_spectral, prior_penalty, spectrum_penalty,
};
use conelab_train::objective::{cosreg, laplacian, unlikelihood};

fn device() -> Device {
    DeviceSpec::Cpu
        .training_device()
        .expect("cpu autodiff device")
}

/// Deterministic values in [−1, 1).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn leaf(data: &[f64], shape: [usize; 2], dev: &Device) -> Tensor<2> {
    let f: Vec<f32> = data.iter().map(|&x| x as f32).collect();
    Tensor::<2>::from_data(TensorData::new(f, shape), dev).require_grad()
}

fn host<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.try_into_vec_as::<f32>()
        .expect("f32 data")
        .into_iter()
        .map(f64::from)
        .collect()
}

fn scalar(t: Tensor<1>) -> f64 {
    t.into_scalar::<f32>() as f64
}

fn ids(v: &[u32], dev: &Device) -> Tensor<1, Int> {
    Tensor::<1, Int>::from_data(TensorData::new(v.to_vec(), [v.len()]), dev)
}

/// Central differences of `f` at `x`, in f64.
fn finite_differences(x: &[f64], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let eps = 1e-6;
    (0..x.len())
        .map(|i| {
            let mut a = x.to_vec();
            let mut b = x.to_vec();
            a[i] += eps;
            b[i] -= eps;
            (f(&a) - f(&b)) / (2.0 * eps)
        })
        .collect()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

fn softmax_rows(h: &[f64], w: &[f64], p: usize, n: usize, d: usize) -> Vec<Vec<f64>> {
    (0..p)
        .map(|i| {
            let z: Vec<f64> = (0..n)
                .map(|v| (0..d).map(|k| h[i * d + k] * w[v * d + k]).sum())
                .collect();
            let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = z.iter().map(|x| (x - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|x| x / s).collect()
        })
        .collect()
}

fn cos_closed_form(w: &[f64], n: usize, d: usize) -> f64 {
    let mut sum = vec![0.0; d];
    for i in 0..n {
        let row = &w[i * d..(i + 1) * d];
        let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
        for k in 0..d {
            sum[k] += row[k] / norm;
        }
    }
    (sum.iter().map(|x| x * x).sum::<f64>() - n as f64) / (n * n) as f64
}

#[test]
fn cosreg_matches_its_closed_form_and_finite_differences() {
    let dev = device();
    let (n, d) = (7, 4);
    // A shared direction plus noise: a cone, so the penalty is clearly positive.
    let w0: Vec<f64> = values(n * d, 1)
        .iter()
        .enumerate()
        .map(|(i, x)| x * 0.5 + if i % d == 0 { 1.0 } else { 0.0 })
        .collect();
    let w = leaf(&w0, [n, d], &dev);
    let pen = cosreg::cos_penalty(w.clone());
    let value = scalar(pen.clone());
    let want = cos_closed_form(&w0, n, d);
    assert!(want > 0.1, "the test matrix is a cone ({want})");
    assert!(
        (value - want).abs() < 1e-5,
        "value {value} vs closed form {want}"
    );
    let grads = pen.backward();
    let g = host(w.grad(&grads).expect("W has a gradient"));
    let fd = finite_differences(&w0, |x| cos_closed_form(x, n, d));
    assert_close(&g, &fd, 1e-4, "∂CosReg/∂W");
}

fn laplacian_closed_form(h: &[f64], w: &[f64], y: &[u32], n: usize, d: usize) -> f64 {
    let p = y.len();
    let unit = |i: usize| {
        let r = &h[i * d..(i + 1) * d];
        let norm = r.iter().map(|x| x * x).sum::<f64>().sqrt();
        r.iter().map(|x| x / norm).collect::<Vec<f64>>()
    };
    let mut total = 0.0;
    for a in 0..p {
        for b in 0..p {
            let (ua, ub) = (unit(a), unit(b));
            let s: f64 = ua.iter().zip(&ub).map(|(x, y)| x * y).sum();
            let (ra, rb) = (y[a] as usize, y[b] as usize);
            let dist: f64 = (0..d)
                .map(|k| (w[ra * d + k] - w[rb * d + k]).powi(2))
                .sum();
            total += s * dist;
        }
    }
    total / (n * n) as f64
}

#[test]
fn laplacian_matches_the_double_sum_and_leaves_the_hidden_states_alone() {
    let dev = device();
    let (n, d) = (6, 3);
    let y = [0u32, 2, 2, 5, 1];
    let p = y.len();
    let h0 = values(p * d, 2);
    let w0 = values(n * d, 3);
    let h = leaf(&h0, [p, d], &dev);
    let w = leaf(&w0, [n, d], &dev);
    let a = w.clone().select(0, ids(&y, &dev));
    let pen = laplacian::laplacian_penalty(h.clone(), a, n);
    let want = laplacian_closed_form(&h0, &w0, &y, n, d);
    let value = scalar(pen.clone());
    assert!(
        (value - want).abs() < 1e-5 * (1.0 + want.abs()),
        "{value} vs {want}"
    );
    let grads = pen.backward();
    let g = host(w.grad(&grads).expect("W has a gradient"));
    let fd = finite_differences(&w0, |x| laplacian_closed_form(&h0, x, &y, n, d));
    assert_close(&g, &fd, 1e-4, "∂LapReg/∂W");
    let hg = h.grad(&grads).map(host);
    assert!(
        hg.is_none_or(|g| g.iter().all(|&x| x == 0.0)),
        "the graph weights are detached: no gradient reaches h"
    );
}

/// A hand-built AGG batch: the counter makes tokens 3, 4, 5 rare with different a_v.
fn agg_fixture() -> (Gates, Vec<u32>) {
    let mut counter = TokenCounter::new(6, 4);
    counter.push(&[0, 0, 1, 1, 2, 3]);
    counter.push(&[0, 1, 2, 2, 3, 4]);
    // Warm counter (÷ 2 updates): a = [1.5, 1.5, 1.5, 1.0, 0.5, 0.0]; α = 1.2 → rare {3, 4, 5},
    // mean rare a = 0.5.
    let gates = agg_gates(&counter, 1.2, GateSet::Both, AggCounter::Warm);
    assert_eq!(gates.rare, vec![false, false, false, true, true, true]);
    // Targets: non-rare (0, 2, 1) and rare (3, 4, 5) positions; token 5's own g2 is 0, so its
    // own column's gate must be forced back to 1.
    assert_eq!(gates.g2[5], 0.0);
    (gates, vec![0, 3, 2, 4, 1, 5])
}

#[test]
fn agg_gradients_follow_yu_et_al_eq_23_and_the_hidden_state_gets_plain_mle() {
    let (gates, y) = agg_fixture();
    agg_gradients_follow_eq_23(&gates, &y, false);
    // The same through the fused host pass of the CPU backend (objective/host_softmax.rs).
    agg_gradients_follow_eq_23(&gates, &y, true);
}

/// The own-column fix adds (1 − gate)·G·h to row y_p once per position: a rare token that is the
/// target of several positions of one batch must get it at each of them (duplicate indices of
/// one scatter-add), and rare target 5 (own g2 = 0) must still be pulled to every h it targets.
#[test]
fn agg_gradients_hold_with_repeated_rare_targets_in_one_batch() {
    let (gates, _) = agg_fixture();
    let y = vec![5, 3, 5, 0, 4, 5, 3, 2];
    agg_gradients_follow_eq_23(&gates, &y, false);
    agg_gradients_follow_eq_23(&gates, &y, true);
}

/// Eq. 23 for ∂L/∂W, plain MLE for ∂L/∂h and the loss; `host`: the NLL and its gradient from the
/// fused host pass instead of burn's graph.
fn agg_gradients_follow_eq_23(gates: &Gates, y: &[u32], host_pass: bool) {
    let host_targets = || host_pass.then(|| y.to_vec());
    let dev = device();
    let (n, d) = (6, 3);
    let p = y.len();
    let h0 = values(p * d, 4);
    let w0 = values(n * d, 5);
    let h = leaf(&h0, [p, d], &dev);
    let w = leaf(&w0, [n, d], &dev);
    let out = full_softmax_head(
        h.clone(),
        w.clone(),
        None,
        ids(y, &dev),
        HeadTerms {
            gates: Some(row_gates(gates, y, &dev)),
            host_targets: host_targets(),
            ..HeadTerms::default()
        },
    )
    .expect("head");
    let grads = out.graph.backward();
    let gw = host(w.grad(&grads).expect("W gradient"));
    let gh = host(h.grad(&grads).expect("h gradient"));

    // Eq. 23, row by row: (p − 1)·h at own-target positions, g1·p·h at positions whose target is
    // not rare, g2·p·h at rare-target positions; averaged over positions.
    let probs = softmax_rows(&h0, &w0, p, n, d);
    let mut want = vec![0.0; n * d];
    for (i, &t) in y.iter().enumerate() {
        for v in 0..n {
            let coef = if v == t as usize {
                probs[i][v] - 1.0
            } else if gates.rare[t as usize] {
                gates.g2[v] as f64 * probs[i][v]
            } else {
                gates.g1[v] as f64 * probs[i][v]
            };
            for k in 0..d {
                want[v * d + k] += coef * h0[i * d + k] / p as f64;
            }
        }
    }
    assert_close(&gw, &want, 1e-5, "∂L/∂W under AGG");
    // Gates must matter here: rare row 5 (a = 0) gets no push at non-rare-target positions.
    let ungated_row5: f64 = (0..p)
        .filter(|&i| !gates.rare[y[i] as usize])
        .map(|i| probs[i][5] * h0[i * d])
        .sum();
    assert!(ungated_row5.abs() > 1e-4, "the fixture exercises g1");

    // The hidden state: exactly the gradient of plain MLE through autodiff.
    let h2 = leaf(&h0, [p, d], &dev);
    let w2 = leaf(&w0, [n, d], &dev);
    let plain = mean_nll(h2.clone().matmul(w2.clone().transpose()), ids(y, &dev));
    let nll_value = scalar(plain.clone());
    let grads2 = plain.backward();
    let gh_plain = host(h2.grad(&grads2).expect("h gradient"));
    assert_close(&gh, &gh_plain, 1e-6, "∂L/∂h under AGG vs MLE");
    assert!(
        (scalar(out.nll) - nll_value).abs() < 1e-6,
        "the reported loss is the plain NLL"
    );
    // Without gates the head is MLE on W too.
    let h3 = leaf(&h0, [p, d], &dev);
    let w3 = leaf(&w0, [n, d], &dev);
    let out3 = full_softmax_head(
        h3,
        w3.clone(),
        None,
        ids(y, &dev),
        HeadTerms {
            host_targets: host_targets(),
            ..HeadTerms::default()
        },
    )
    .expect("head");
    let gw3 = host(w3.grad(&out3.graph.backward()).expect("W gradient"));
    let gw_plain = host(w2.grad(&grads2).expect("W gradient"));
    assert_close(&gw3, &gw_plain, 1e-6, "∂L/∂W without gates vs MLE");
}

#[test]
fn dev_adds_its_closed_form_gradient_and_is_mle_at_zero() {
    let dev = device();
    let (n, d, p) = (5, 3, 4);
    let y = [1u32, 0, 4, 2];
    let h0: Vec<f64> = values(p * d, 6).iter().map(|x| x * 3.0).collect();
    let w0 = values(n * d, 7);
    let run = |alpha: f64, host_pass: bool| {
        let h = leaf(&h0, [p, d], &dev);
        let w = leaf(&w0, [n, d], &dev);
        let out = full_softmax_head(
            h,
            w.clone(),
            None,
            ids(&y, &dev),
            HeadTerms {
                dev: alpha,
                host_targets: host_pass.then(|| y.to_vec()),
                ..HeadTerms::default()
            },
        )
        .expect("head");
        host(w.grad(&out.graph.backward()).expect("W gradient"))
    };
    let (alpha, base) = (0.7, run(0.0, false));
    // Through burn's graph and through the fused host pass (objective/host_softmax.rs).
    for with_dev in [run(0.7, false), run(0.7, true)] {
        dev_closed_form(&h0, &w0, &base, &with_dev, alpha, (n, d, p));
    }
    assert_close(&run(0.0, true), &base, 1e-6, "MLE through the host pass");
}

fn dev_closed_form(
    h0: &[f64],
    w0: &[f64],
    base: &[f64],
    with_dev: &[f64],
    alpha: f64,
    (n, d, p): (usize, usize, usize),
) {
    // ∂/∂z_pv of α·mean_p (log Z_p)² = 2α·log Z_p·p_pv / P.
    let probs = softmax_rows(h0, w0, p, n, d);
    let mut want = base.to_vec();
    for i in 0..p {
        let z: Vec<f64> = (0..n)
            .map(|v| (0..d).map(|k| h0[i * d + k] * w0[v * d + k]).sum())
            .collect();
        let log_z = z.iter().map(|x| x.exp()).sum::<f64>().ln();
        for v in 0..n {
            for k in 0..d {
                want[v * d + k] += 2.0 * alpha * log_z * probs[i][v] * h0[i * d + k] / p as f64;
            }
        }
    }
    assert_close(with_dev, &want, 1e-5, "∂(NLL + DEV)/∂W");
}

/// Every logit term at once — NLL, DEV, unlikelihood, AGG's gates — through the fused host pass
/// and through burn's graph: the same values and the same gradients for W and h.
#[test]
fn the_host_pass_matches_burns_graph_with_every_term_on() {
    let dev = device();
    let (n, d) = (6, 3);
    let inputs = [1u32, 2, 1, 3, 5, 5, 0, 2];
    let targets = [2u32, 1, 3, 2, 5, 0, 4, 1];
    let (b, t) = (2, 4);
    let p = b * t;
    let h0: Vec<f64> = values(p * d, 11).iter().map(|x| x * 2.0).collect();
    let w0 = values(n * d, 12);
    let (gates, _) = agg_fixture();
    let (idx, mask) = unlikelihood::candidates(&inputs, &targets, b, t);
    let run = |host_pass: bool| {
        let h = leaf(&h0, [p, d], &dev);
        let w = leaf(&w0, [n, d], &dev);
        let out = full_softmax_head(
            h.clone(),
            w.clone(),
            None,
            ids(&targets, &dev),
            HeadTerms {
                dev: 0.3,
                unlikelihood: Some((
                    0.8,
                    Tensor::from_data(TensorData::new(idx.clone(), [p, t]), &dev),
                    Tensor::from_data(TensorData::new(mask.clone(), [p, t]), &dev),
                )),
                gates: Some(row_gates(&gates, &targets, &dev)),
                host_targets: host_pass.then(|| targets.to_vec()),
                w_outside_graph: false,
            },
        )
        .expect("head");
        let penalties: Vec<f64> = out.penalties.into_iter().map(scalar).collect();
        let nll = scalar(out.nll);
        let grads = out.graph.backward();
        let gw = host(w.grad(&grads).expect("W gradient"));
        let gh = host(h.grad(&grads).expect("h gradient"));
        (nll, penalties, gw, gh)
    };
    let (graph, fused) = (run(false), run(true));
    assert!(
        (graph.0 - fused.0).abs() < 1e-5,
        "NLL {} vs {}",
        graph.0,
        fused.0
    );
    assert_eq!(fused.1.len(), 2, "DEV and unlikelihood values");
    assert_close(&fused.1, &graph.1, 1e-5, "penalties");
    assert!(
        graph.1.iter().all(|&v| v > 1e-3),
        "the terms are on: {:?}",
        graph.1
    );
    assert_close(&fused.2, &graph.2, 1e-5, "∂L/∂W");
    assert_close(&fused.3, &graph.3, 1e-5, "∂L/∂h");
}

/// The trainer's fast path on burn-flex — the output bias added inside the host pass, and W's
/// output-side gradient handed back beside the graph (`w_outside_graph`) — against burn's graph
/// of the whole head with the bias in the logits and W's term in the graph: the same NLL, and
/// the same gradients for W, the bias and h, with AGG's gates and DEV on.
#[test]
fn the_bias_in_the_host_pass_and_w_beside_the_graph_match_burns_graph() {
    let dev = device();
    let (n, d, p) = (6, 3, 6);
    // Rare (3, 4, 5) and frequent targets under the fixture's gates.
    let targets = [2u32, 3, 5, 0, 4, 1];
    let h0: Vec<f64> = values(p * d, 21).iter().map(|x| x * 2.0).collect();
    let w0 = values(n * d, 22);
    let b0: Vec<f32> = values(n, 23).iter().map(|&x| x as f32).collect();
    let (gates, _) = agg_fixture();
    let run = |fast: bool| {
        let h = leaf(&h0, [p, d], &dev);
        let w = leaf(&w0, [n, d], &dev);
        let b = Tensor::<1>::from_data(TensorData::new(b0.clone(), [n]), &dev).require_grad();
        let out = full_softmax_head(
            h.clone(),
            w.clone(),
            Some(b.clone()),
            ids(&targets, &dev),
            HeadTerms {
                dev: 0.3,
                gates: Some(row_gates(&gates, &targets, &dev)),
                host_targets: fast.then(|| targets.to_vec()),
                w_outside_graph: fast,
                ..HeadTerms::default()
            },
        )
        .expect("head");
        assert_eq!(
            out.w_gradient.is_some(),
            fast,
            "W's gradient beside the graph"
        );
        let nll = scalar(out.nll);
        let grads = out.graph.backward();
        // Outside the graph, W's gradient is the head's alone: the graph holds nothing for it.
        let gw = match out.w_gradient {
            Some(g) => {
                assert!(w.grad(&grads).is_none(), "W is left out of the graph");
                host(g)
            }
            None => host(w.grad(&grads).expect("W gradient")),
        };
        let gb = host(b.grad(&grads).expect("bias gradient"));
        let gh = host(h.grad(&grads).expect("h gradient"));
        (nll, gw, gb, gh)
    };
    let (graph, fast) = (run(false), run(true));
    assert!(
        (graph.0 - fast.0).abs() < 1e-5,
        "NLL {} vs {}",
        graph.0,
        fast.0
    );
    assert_close(&fast.1, &graph.1, 1e-5, "∂L/∂W");
    assert_close(&fast.2, &graph.2, 1e-5, "∂L/∂b");
    assert_close(&fast.3, &graph.3, 1e-5, "∂L/∂h");
    // The bias moved the logits: the same head without it has another NLL.
    let h = leaf(&h0, [p, d], &dev);
    let w = leaf(&w0, [n, d], &dev);
    let without =
        full_softmax_head(h, w, None, ids(&targets, &dev), HeadTerms::default()).expect("head");
    assert!(
        (scalar(without.nll) - graph.0).abs() > 1e-3,
        "the bias is in the logits"
    );
}

#[test]
fn unlikelihood_matches_its_definition() {
    let dev = device();
    let (n, d) = (6, 2);
    let inputs = [1u32, 2, 1, 3];
    let targets = [2u32, 1, 3, 2];
    let (b, t) = (1, 4);
    let h0 = values(4 * d, 8);
    let w0 = values(n * d, 9);
    let (idx, mask) = unlikelihood::candidates(&inputs, &targets, b, t);
    let logits = Tensor::<2>::from_data(
        TensorData::new(
            softmax_rows(&h0, &w0, 4, n, d)
                .iter()
                .flat_map(|r| r.iter().map(|p| p.ln() as f32))
                .collect::<Vec<f32>>(),
            [4, n],
        ),
        &dev,
    );
    let value = scalar(unlikelihood::unlikelihood(
        logits,
        Tensor::from_data(TensorData::new(idx, [4, t]), &dev),
        Tensor::from_data(TensorData::new(mask, [4, t]), &dev),
    ));
    // By hand: C_0 = {1}, C_1 = {2} (1 is the target), C_2 = {1, 2}, C_3 = {1, 3} (2 is the target).
    let probs = softmax_rows(&h0, &w0, 4, n, d);
    let sets: [&[usize]; 4] = [&[1], &[2], &[1, 2], &[1, 3]];
    let want: f64 = sets
        .iter()
        .enumerate()
        .map(|(i, c)| c.iter().map(|&v| -(1.0 - probs[i][v]).ln()).sum::<f64>())
        .sum::<f64>()
        / 4.0;
    assert!((value - want).abs() < 1e-5, "{value} vs {want}");
}

#[test]
fn nce_matches_its_closed_form() {
    let dev = device();
    let (n, d, p, k) = (5, 2, 3, 4);
    let h0 = values(p * d, 10);
    let w0 = values(n * d, 11);
    let y = [0u32, 3, 4];
    let noise = [1u32, 1, 2, 4];
    let counts = [50u64, 20, 15, 10, 5];
    let sampler = UnigramSampler::new(&counts);
    let log_kq: Vec<f32> = sampler
        .log_q()
        .iter()
        .map(|l| l + (k as f32).ln())
        .collect();
    let value = scalar(nce_loss(
        leaf(&h0, [p, d], &dev),
        leaf(&w0, [n, d], &dev),
        None,
        ids(&y, &dev),
        ids(&noise, &dev),
        Tensor::from_data(TensorData::new(log_kq, [n]), &dev),
    ));
    let score = |i: usize, v: usize| -> f64 { (0..d).map(|j| h0[i * d + j] * w0[v * d + j]).sum() };
    let m = |i: usize, v: usize| score(i, v) - (k as f64 * counts[v] as f64 / 100.0).ln();
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    let want: f64 = (0..p)
        .map(|i| {
            -sigmoid(m(i, y[i] as usize)).ln()
                - noise
                    .iter()
                    .map(|&c| (1.0 - sigmoid(m(i, c as usize))).ln())
                    .sum::<f64>()
        })
        .sum::<f64>()
        / p as f64;
    assert!((value - want).abs() < 1e-5, "{value} vs {want}");
}

#[test]
fn nce_training_moves_a_toy_model_toward_the_true_distribution_and_self_normalises() {
    // A context-free model: one hidden state h = 1, scores s_v = w_v. Targets come from p_true,
    // noise from the unigram q (uniform here); plain SGD on the NCE loss.
    let dev = device();
    let p_true: [f64; 5] = [0.4, 0.3, 0.15, 0.1, 0.05];
    let n = p_true.len();
    let (positions, k) = (64usize, 20usize);
    let sampler = UnigramSampler::new(&[1, 1, 1, 1, 1]);
    let truth = UnigramSampler::new(&[40, 30, 15, 10, 5]);
    let log_kq: Vec<f32> = sampler
        .log_q()
        .iter()
        .map(|l| l + (k as f32).ln())
        .collect();
    let kl = |w: &[f64]| {
        let z: f64 = w.iter().map(|x| x.exp()).sum();
        p_true
            .iter()
            .zip(w)
            .map(|(p, x)| p * (p.ln() - (x - z.ln())))
            .sum::<f64>()
    };
    let mut w = vec![0.0f64; n];
    let start = kl(&w);
    for step in 0..400u64 {
        let y = truth.sample(positions, 1000 + step);
        let noise = sampler.sample(k, 5000 + step);
        let wt = leaf(&w, [n, 1], &dev);
        let loss = nce_loss(
            Tensor::<2>::ones([positions, 1], &dev),
            wt.clone(),
            None,
            ids(&y, &dev),
            ids(&noise, &dev),
            Tensor::from_data(TensorData::new(log_kq.clone(), [n]), &dev),
        );
        let g = host(wt.grad(&loss.backward()).expect("gradient"));
        for v in 0..n {
            w[v] -= 0.2 * g[v];
        }
    }
    let end = kl(&w);
    let z: f64 = w.iter().map(|x| x.exp()).sum();
    assert!(end < start / 10.0, "KL(p_true‖model) {start:.4} → {end:.4}");
    assert!(
        (z - 1.0).abs() < 0.15,
        "NCE self-normalises: Σ exp(s) = {z:.3}"
    );
}

#[test]
fn spectrum_penalties_match_exact_linear_algebra() {
    let dev = device();
    let (n, k) = (9, 4);
    let m0 = values(n * k, 12);
    let m = leaf(&m0, [n, k], &dev);
    // E = MᵀM − I on the host.
    let mut e = vec![0.0f64; k * k];
    for a in 0..k {
        for b in 0..k {
            e[a * k + b] = (0..n).map(|i| m0[i * k + a] * m0[i * k + b]).sum::<f64>()
                - if a == b { 1.0 } else { 0.0 };
        }
    }
    let fro: f64 = e.iter().map(|x| x * x).sum();
    let value = scalar(orthogonality_frobenius(m.clone()));
    assert!((value - fro).abs() < 1e-4 * (1.0 + fro), "{value} vs {fro}");
    let em = faer::Mat::<f64>::from_fn(k, k, |a, b| e[a * k + b]);
    let eig = em
        .self_adjoint_eigenvalues(faer::Side::Lower)
        .expect("eigenvalues");
    let top = eig.iter().map(|x| x.abs()).fold(0.0, f64::max);
    let spec = scalar(orthogonality_spectral(m, 100));
    assert!(
        (spec - top * top).abs() < 1e-3 * (1.0 + top * top),
        "‖E‖₂² {spec} vs exact {}",
        top * top
    );
    // Prior: Σ (σ_(k) − t_k)² with σ sorted descending, whatever order it is stored in.
    let sigma = Tensor::<1>::from_data(TensorData::new(vec![0.5f32, 2.0, 1.0], [3]), &dev);
    let value = scalar(prior_penalty(sigma, &[1.5, 1.0, 0.25]));
    let want = 0.5f64.powi(2) + 0.0 + 0.25f64.powi(2);
    assert!((value - want).abs() < 1e-6, "{value} vs {want}");
}

/// The proximal σ step against its definition, on the host: x = σ − η·g, then for the entry of
/// rank k the minimiser of (s − x)²/(2η) + λ(s − t_k)² — checked both as the closed form and as
/// a minimum (no nearby s does better), with σ stored out of order.
#[test]
fn the_proximal_sigma_step_is_the_priors_proximal_map_by_rank() {
    use conelab_train::objective::spectrum::proximal_sigma_step;
    let dev = device();
    let sigma = [0.5f64, 2.0, 1.0, 0.1];
    let grad = [0.3f64, -1.0, 0.2, 0.0];
    let targets = [3.0f32, 2.0, 1.0, 0.5];
    let (eta, lambda) = (0.2, 1.5);
    let t = |v: &[f64]| {
        let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
        Tensor::<1>::from_data(TensorData::new(f, [v.len()]), &dev)
    };
    let got = host(proximal_sigma_step(
        t(&sigma),
        Some(t(&grad)),
        eta,
        lambda,
        &targets,
    ));
    let x: Vec<f64> = sigma.iter().zip(&grad).map(|(s, g)| s - eta * g).collect();
    // x = (0.44, 2.2, 0.96, 0.1): ranks 3, 1, 2, 4.
    let rank = [2usize, 0, 1, 3];
    let objective = |s: f64, i: usize| {
        (s - x[i]).powi(2) / (2.0 * eta) + lambda * (s - targets[rank[i]] as f64).powi(2)
    };
    for i in 0..4 {
        let want =
            (x[i] + 2.0 * eta * lambda * targets[rank[i]] as f64) / (1.0 + 2.0 * eta * lambda);
        assert!(
            (got[i] - want).abs() < 1e-5,
            "σ[{i}] = {} vs {want}",
            got[i]
        );
        for h in [-1e-2, 1e-2] {
            assert!(
                objective(got[i], i) <= objective(got[i] + h, i) + 1e-9,
                "not a minimum at {i}"
            );
        }
    }
    // No data gradient: the prior alone, and η = 0 changes nothing.
    let alone = host(proximal_sigma_step(t(&sigma), None, 0.0, lambda, &targets));
    assert_close(&alone, &sigma, 1e-6, "η = 0");
}

#[test]
fn the_spectral_factorisation_reproduces_w() {
    let dev = device();
    let (n, d) = (12, 5);
    let w0 = values(n * d, 13);
    let f: Vec<f32> = w0.iter().map(|&x| x as f32).collect();
    let s = SpectralEmbedding::from_matrix(&f, n, d, &dev).expect("svd");
    let back = host(s.weight());
    assert_close(&back, &w0, 1e-5, "U·diag(σ)·Vᵀ");
    let sigma = s.sigma.val().try_into_vec_as::<f32>().expect("σ");
    assert!(
        sigma.windows(2).all(|p| p[0] >= p[1]),
        "descending: {sigma:?}"
    );
}

/// The whole penalty, which takes each Gram matrix once for both orthogonality norms, against
/// its four terms taken one by one (each with its own UᵀU or VᵀV): the same value and the same
/// gradients for U, σ and V, with every λ on and W away from orthonormal.
#[test]
fn the_spectrum_penalty_is_the_weighted_sum_of_its_terms() {
    use conelab_core::objective::SpectrumConfig;
    let dev = device();
    let (n, d) = (12, 4);
    let f: Vec<f32> = values(n * d, 31).iter().map(|&x| 1.5 * x as f32).collect();
    let targets = [1.5f32, 1.0, 0.5, 0.25];
    let config = SpectrumConfig {
        enabled: true,
        lambda_prior: 0.7,
        lambda_orth: 0.3,
        lambda_spec: 0.2,
        ..SpectrumConfig::default()
    };
    let grads_of = |whole: bool| {
        let s = SpectralEmbedding::from_matrix(&f, n, d, &dev).expect("svd");
        // Move U and V off orthonormal, so that both norms and their gradients are not zero.
        let s = SpectralEmbedding {
            u: s.u.map(|u| {
                (u.clone() + u.mul_scalar(0.3).sin())
                    .detach()
                    .require_grad()
            }),
            sigma: s.sigma,
            v: s.v.map(|v| (v.clone() * 1.2).detach().require_grad()),
        };
        let penalty = if whole {
            spectrum_penalty(&s, &config, &targets)
        } else {
            let (u, v) = (s.u.val(), s.v.val());
            prior_penalty(s.sigma.val(), &targets).mul_scalar(0.7)
                + (orthogonality_frobenius(u.clone()) + orthogonality_frobenius(v.clone()))
                    .mul_scalar(0.3)
                + (orthogonality_spectral(u, 20) + orthogonality_spectral(v, 20)).mul_scalar(0.2)
        };
        let value = scalar(penalty.clone());
        let grads = penalty.backward();
        (
            value,
            host(s.u.val().grad(&grads).expect("U gradient")),
            host(s.sigma.val().grad(&grads).expect("σ gradient")),
            host(s.v.val().grad(&grads).expect("V gradient")),
        )
    };
    let (whole, terms) = (grads_of(true), grads_of(false));
    assert!(terms.0 > 1e-2, "the terms are on: {}", terms.0);
    assert!(
        (whole.0 - terms.0).abs() < 1e-5 * (1.0 + terms.0),
        "{} vs {}",
        whole.0,
        terms.0
    );
    assert_close(&whole.1, &terms.1, 1e-5, "∂/∂U");
    assert_close(&whole.2, &terms.2, 1e-5, "∂/∂σ");
    assert_close(&whole.3, &terms.3, 1e-5, "∂/∂V");
    assert!(
        terms.1.iter().any(|g| g.abs() > 1e-3),
        "U's gradient is not zero"
    );
}

#[test]
fn gradient_part_freezing_drops_exactly_the_chosen_parts_of_the_rare_rows() {
    use conelab_core::objective::GateParts;
    use conelab_data::{FrequencyGroups, GroupBounds};
    use conelab_train::objective::agg::part_freeze_gates;
    let dev = device();
    let (n, d) = (6, 3);
    // Rare group = ids 4 and 5 (ranks ≥ 0.8·6).
    let groups = FrequencyGroups::new(n, GroupBounds::new(0.3, 0.8).expect("bounds"));
    let y = [0u32, 4, 2, 5, 1, 4];
    let p = y.len();
    let h0 = values(p * d, 14);
    let w0 = values(n * d, 15);
    let probs = softmax_rows(&h0, &w0, p, n, d);
    for parts in [GateParts::B, GateParts::C, GateParts::Bc] {
        let gates = part_freeze_gates(&groups, parts);
        let h = leaf(&h0, [p, d], &dev);
        let w = leaf(&w0, [n, d], &dev);
        let out = full_softmax_head(
            h,
            w.clone(),
            None,
            ids(&y, &dev),
            HeadTerms {
                gates: Some(row_gates(&gates, &y, &dev)),
                ..HeadTerms::default()
            },
        )
        .expect("head");
        let gw = host(w.grad(&out.graph.backward()).expect("W gradient"));
        // Yu et al. §3.3: a rare row's gradient is (a) pull at own-target positions, (b) push at
        // non-rare-target positions, (c) push at other rare-target positions.
        let mut want = vec![0.0; n * d];
        for (i, &t) in y.iter().enumerate() {
            for v in 0..n {
                let rare_v = v >= 4;
                let part_b = rare_v && t < 4;
                let part_c = rare_v && t >= 4;
                let dropped = (part_b && parts.drops_b()) || (part_c && parts.drops_c());
                let coef = if v == t as usize {
                    probs[i][v] - 1.0
                } else if dropped {
                    0.0
                } else {
                    probs[i][v]
                };
                for k in 0..d {
                    want[v * d + k] += coef * h0[i * d + k] / p as f64;
                }
            }
        }
        assert_close(
            &gw,
            &want,
            1e-5,
            &format!("∂L/∂W with gate-freeze {}", parts.name()),
        );
    }
}

#[test]
fn nce_and_unlikelihood_gradients_match_finite_differences() {
    let dev = device();
    let (n, d, p) = (5, 2, 3);
    let h0 = values(p * d, 16);
    let w0 = values(n * d, 17);
    let y = [0u32, 3, 4];
    let noise = [1u32, 2, 2];
    let counts = [50u64, 20, 15, 10, 5];
    let k = noise.len();
    let sampler = UnigramSampler::new(&counts);
    let log_kq: Vec<f32> = sampler
        .log_q()
        .iter()
        .map(|l| l + (k as f32).ln())
        .collect();
    let w = leaf(&w0, [n, d], &dev);
    let loss = nce_loss(
        leaf(&h0, [p, d], &dev),
        w.clone(),
        None,
        ids(&y, &dev),
        ids(&noise, &dev),
        Tensor::from_data(TensorData::new(log_kq, [n]), &dev),
    );
    let g = host(w.grad(&loss.backward()).expect("W gradient"));
    let nce = |w: &[f64]| {
        let m = |i: usize, v: usize| {
            (0..d).map(|j| h0[i * d + j] * w[v * d + j]).sum::<f64>()
                - (k as f64 * counts[v] as f64 / 100.0).ln()
        };
        let softplus = |x: f64| (1.0 + x.exp()).ln();
        (0..p)
            .map(|i| {
                softplus(-m(i, y[i] as usize))
                    + noise
                        .iter()
                        .map(|&c| softplus(m(i, c as usize)))
                        .sum::<f64>()
            })
            .sum::<f64>()
            / p as f64
    };
    assert_close(&g, &finite_differences(&w0, nce), 1e-4, "∂NCE/∂W");

    // Unlikelihood through the head: its gradient reaches W as G's share of (gates=1)ᵀ·h.
    let inputs = [1u32, 2, 1];
    let targets = [2u32, 1, 3];
    let (idx, mask) = unlikelihood::candidates(&inputs, &targets, 1, 3);
    let w = leaf(&w0, [n, d], &dev);
    let out = full_softmax_head(
        leaf(&h0, [p, d], &dev),
        w.clone(),
        None,
        ids(&targets, &dev),
        HeadTerms {
            unlikelihood: Some((
                0.5,
                Tensor::from_data(TensorData::new(idx.clone(), [p, 3]), &dev),
                Tensor::from_data(TensorData::new(mask.clone(), [p, 3]), &dev),
            )),
            ..HeadTerms::default()
        },
    )
    .expect("head");
    let g = host(w.grad(&out.graph.backward()).expect("W gradient"));
    let total = |w: &[f64]| {
        let probs = softmax_rows(&h0, w, p, n, d);
        (0..p)
            .map(|i| {
                let ul: f64 = (0..3)
                    .filter(|&c| mask[i * 3 + c] == 1.0)
                    .map(|c| -(1.0 - probs[i][idx[i * 3 + c] as usize]).ln())
                    .sum();
                -probs[i][targets[i] as usize].ln() + 0.5 * ul
            })
            .sum::<f64>()
            / p as f64
    };
    assert_close(&g, &finite_differences(&w0, total), 1e-4, "∂(NLL + UL)/∂W");
}

/// AND's value and its gradients in W, h and the bias against the closed form evaluated in f64
/// (scores ×3 so that squashing bends them), with and without squashing; α = 0 leaves −mean s[y].
#[test]
fn and_matches_its_closed_form_and_finite_differences_with_and_without_squash() {
    let dev = device();
    let (n, d, p) = (5, 2, 4);
    let h0: Vec<f64> = values(p * d, 30).iter().map(|x| 3.0 * x).collect();
    let w0: Vec<f64> = values(n * d, 31).iter().map(|x| 3.0 * x).collect();
    let b0 = values(n, 32);
    let y = [0u32, 3, 4, 3];
    let sampled = [1u32, 3];
    let (alpha, fraction) = (0.7, 0.5);
    // L(h, W, b) = −(1/P)·Σ_t f(s_t[y_t]) + α/(γ·P)·Σ_{t∈S} (log Σ_v exp f(s_t[v]))², f = squash or id.
    let closed = |h: &[f64], w: &[f64], b: &[f64], squash: bool, alpha: f64| {
        let f = |x: f64| if squash { 10.0 * (x / 5.0).tanh() } else { x };
        let s =
            |t: usize, v: usize| f((0..d).map(|j| h[t * d + j] * w[v * d + j]).sum::<f64>() + b[v]);
        let data = -(0..p).map(|t| s(t, y[t] as usize)).sum::<f64>() / p as f64;
        let pen: f64 = sampled
            .iter()
            .map(|&t| {
                (0..n)
                    .map(|v| s(t as usize, v).exp())
                    .sum::<f64>()
                    .ln()
                    .powi(2)
            })
            .sum();
        data + alpha / (fraction * p as f64) * pen
    };
    for squash in [false, true] {
        let h = leaf(&h0, [p, d], &dev);
        let w = leaf(&w0, [n, d], &dev);
        let b = Tensor::<1>::from_data(
            TensorData::new(b0.iter().map(|&x| x as f32).collect(), [n]),
            &dev,
        )
        .require_grad();
        let terms = and_loss(
            h.clone(),
            w.clone(),
            Some(b.clone()),
            ids(&y, &dev),
            ids(&sampled, &dev),
            AndSettings {
                alpha,
                fraction,
                squash,
            },
        );
        let value = scalar(terms.data.clone() + terms.penalty.clone());
        let want = closed(&h0, &w0, &b0, squash, alpha);
        assert!(
            (value - want).abs() < 1e-4 * (1.0 + want.abs()),
            "squash {squash}: {value} vs {want}"
        );
        let grads = (terms.data + terms.penalty).backward();
        let gw = host(w.grad(&grads).expect("W gradient"));
        let gh = host(h.grad(&grads).expect("h gradient"));
        let gb = host(b.grad(&grads).expect("bias gradient"));
        let what = |x: &str| format!("∂AND/∂{x} (squash {squash})");
        assert_close(
            &gw,
            &finite_differences(&w0, |w| closed(&h0, w, &b0, squash, alpha)),
            1e-3,
            &what("W"),
        );
        assert_close(
            &gh,
            &finite_differences(&h0, |h| closed(h, &w0, &b0, squash, alpha)),
            1e-3,
            &what("h"),
        );
        assert_close(
            &gb,
            &finite_differences(&b0, |b| closed(&h0, &w0, b, squash, alpha)),
            1e-3,
            &what("b"),
        );
    }
    // α = 0: the penalty is not computed and the loss is the data term alone.
    let terms = and_loss(
        leaf(&h0, [p, d], &dev),
        leaf(&w0, [n, d], &dev),
        None,
        ids(&y, &dev),
        ids(&sampled, &dev),
        AndSettings {
            alpha: 0.0,
            fraction,
            squash: false,
        },
    );
    assert_eq!(scalar(terms.penalty), 0.0);
    let zeros = vec![0.0; n];
    let want = closed(&h0, &w0, &zeros, false, 0.0);
    assert!((scalar(terms.data) - want).abs() < 1e-4 * (1.0 + want.abs()));
}

#[test]
fn spectrum_penalty_gradients_match_finite_differences() {
    let dev = device();
    let (n, k) = (6, 3);
    let m0 = values(n * k, 18);
    let m = leaf(&m0, [n, k], &dev);
    let g = host(
        m.grad(&orthogonality_frobenius(m.clone()).backward())
            .expect("gradient"),
    );
    let fro = |x: &[f64]| {
        let mut total = 0.0;
        for a in 0..k {
            for b in 0..k {
                let e = (0..n).map(|i| x[i * k + a] * x[i * k + b]).sum::<f64>()
                    - if a == b { 1.0 } else { 0.0 };
                total += e * e;
            }
        }
        total
    };
    assert_close(&g, &finite_differences(&m0, fro), 1e-3, "∂‖MᵀM − I‖²_F/∂M");
    let m = leaf(&m0, [n, k], &dev);
    let g = host(
        m.grad(&orthogonality_spectral(m.clone(), 200).backward())
            .expect("gradient"),
    );
    let spectral = |x: &[f64]| {
        let e = faer::Mat::<f64>::from_fn(k, k, |a, b| {
            (0..n).map(|i| x[i * k + a] * x[i * k + b]).sum::<f64>()
                - if a == b { 1.0 } else { 0.0 }
        });
        let eig = e
            .self_adjoint_eigenvalues(faer::Side::Lower)
            .expect("eigenvalues");
        let top = eig.iter().map(|v| v.abs()).fold(0.0, f64::max);
        top * top
    };
    assert_close(
        &g,
        &finite_differences(&m0, spectral),
        2e-3,
        "∂‖MᵀM − I‖²_2/∂M",
    );
}
