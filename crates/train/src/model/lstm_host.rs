//! One LSTM layer's forward and backward written out on the host, for burn-flex training.
//!
//! Forward, per step t (gates side by side in the order input, forget, output, cell):
//!   a_t = x_t·W_in + h_{t−1}·W_h + b,  (i, f, o) = σ(a_i, a_f, a_o),  g = tanh(a_g),
//!   c_t = f ⊙ c_{t−1} + i ⊙ g,  h_t = o ⊙ tanh(c_t).
//! Backward, from t = T−1 down to 0, with δh_t = ∂L/∂h_t + δa_{t+1}·W_hᵀ and δc_{T} = 0:
//!   δo = δh ⊙ tanh(c_t),  δc_t = δh ⊙ o ⊙ (1 − tanh²c_t) + δc_{t+1} ⊙ f_{t+1},
//!   δi = δc ⊙ g,  δg = δc ⊙ i,  δf = δc ⊙ c_{t−1},
//!   δa = (δi·i(1−i), δf·f(1−f), δo·o(1−o), δg·(1−g²)),
//! then, once for the whole window, ∂W_h = H_prevᵀ·δA, ∂W_in = Xᵀ·δA, ∂b = Σ δA, ∂X = δA·W_inᵀ.
//!
//! Why by hand: under burn's autodiff each step's hidden product leaves a backward node that
//! computes ∂W_h from 16 rows (a K = 16 product into a full 650 × 2600 buffer, added up 35 times
//! per layer), and every slice of the window's projections writes a full-size zero tensor in its
//! backward. Here the sequential part is one product forward and one backward per step, and the
//! weight gradients are single large products over the window, as cuDNN and oneDNN do it.
//! Products go through the `gemm` crate (burn-flex's own kernels) or faer's, whichever takes the
//! shape faster (`Kernel`), or, when the model's tensors are LibTorch's, through LibTorch's own
//! (`Products`); σ and tanh through the vectorised exp of `fastmath`.

use conelab_metrics::fastmath::exp_shifted_in_place;

/// A layer's weights side by side: `w_in` `[d_in, 4H]`, `w_hidden` `[H, 4H]`, `bias` `[4H]`
/// (burn's input and hidden biases added).
pub struct LayerWeights {
    pub d_in: usize,
    pub hidden: usize,
    pub w_in: Vec<f32>,
    pub w_hidden: Vec<f32>,
    pub bias: Vec<f32>,
    /// Where the layer's products run.
    pub products: Products,
}

/// Where a layer's matrix products run. On LibTorch's CPU device the rest of the step (the head,
/// the embedding's gradient) runs on LibTorch's OpenMP pool; products on rayon's pool there
/// leave the two pools spinning against each other on the same cores, so LibTorch's `mm` (MKL)
/// takes them instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Products {
    /// conelab's Rust kernels (`Kernel::Gemm`, `Kernel::Faer`), as on burn-flex.
    #[default]
    Rust,
    /// LibTorch's `mm` on the CPU.
    #[cfg(feature = "tch")]
    LibTorch,
}

impl Products {
    /// LibTorch's own kernels for a model on LibTorch's CPU device, the Rust ones elsewhere.
    pub fn for_device(device: &burn::prelude::Device) -> Self {
        #[cfg(feature = "tch")]
        if super::device::is_libtorch_cpu(device) {
            return Products::LibTorch;
        }
        let _ = device;
        Products::Rust
    }
}

impl LayerWeights {
    /// The kernel for a product that takes `rust` among the Rust kernels.
    fn kernel(&self, rust: Kernel) -> Kernel {
        match self.products {
            Products::Rust => rust,
            #[cfg(feature = "tch")]
            Products::LibTorch => Kernel::Torch,
        }
    }
}

/// What the backward pass needs from the forward. Inside, rows are in (time, batch) order, so
/// that one step's rows are contiguous for its products (a strided step costs 1.6× as much).
pub struct LayerTape {
    pub batch: usize,
    pub time: usize,
    /// The layer's input `[T·B, d_in]`.
    x: Vec<f32>,
    /// The activated gates (i, f, o, g) `[T·B, 4H]`.
    gates: Vec<f32>,
    /// c_t and tanh(c_t) `[T·B, H]`.
    cells: Vec<f32>,
    tanh_cells: Vec<f32>,
    /// h_t `[T·B, H]`.
    outputs: Vec<f32>,
    /// The state the window started from, `[B, H]` each.
    h0: Vec<f32>,
    c0: Vec<f32>,
}

impl LayerTape {
    /// The layer's output `[B·T, H]`, rows in (batch, time) order.
    pub fn outputs(&self) -> Vec<f32> {
        transpose_rows(
            &self.outputs,
            self.time,
            self.batch,
            self.h0.len() / self.batch.max(1),
        )
    }

    /// The state after the window: (cell, hidden), `[B, H]` each.
    pub fn final_state(&self) -> (Vec<f32>, Vec<f32>) {
        let n = self.h0.len();
        let last = |m: &[f32]| m[m.len() - n..].to_vec();
        (last(&self.cells), last(&self.outputs))
    }
}

/// The layer's gradients: its input `[B·T, d_in]` in (batch, time) order and its weights, shaped
/// as [`LayerWeights`].
pub struct LayerGradients {
    pub x: Vec<f32>,
    pub w_in: Vec<f32>,
    pub w_hidden: Vec<f32>,
    pub bias: Vec<f32>,
}

/// Rows `[outer, inner, width]` → `[inner, outer, width]`.
fn transpose_rows(m: &[f32], outer: usize, inner: usize, width: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; m.len()];
    for a in 0..outer {
        for b in 0..inner {
            let (src, dst) = ((a * inner + b) * width, (b * outer + a) * width);
            out[dst..dst + width].copy_from_slice(&m[src..src + width]);
        }
    }
    out
}

/// `m` `[rows, cols]` → its transpose `[cols, rows]`, in tiles that stay in L1 both ways.
fn transpose(m: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const TILE: usize = 32;
    let mut out = vec![0.0f32; rows * cols];
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..(r0 + TILE).min(rows) {
                for c in c0..(c0 + TILE).min(cols) {
                    out[c * rows + r] = m[r * cols + c];
                }
            }
        }
    }
    out
}

/// A matrix operand: element (r, c) is `data[r·rs + c·cs]`.
#[derive(Clone, Copy)]
struct MatrixView<'a> {
    data: &'a [f32],
    rs: usize,
    cs: usize,
}

impl<'a> MatrixView<'a> {
    fn rows(data: &'a [f32], rs: usize) -> Self {
        Self { data, rs, cs: 1 }
    }
    fn transposed(data: &'a [f32], rs: usize) -> Self {
        Self {
            data,
            rs: 1,
            cs: rs,
        }
    }
    fn holds(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// burn-flex's rule: products above 192³ multiply-adds use every core.
const PARALLEL_THRESHOLD: usize = 192 * 192 * 192;

/// Which matrix kernels a product runs on. Both are in the tree already (burn-flex's `gemm`,
/// the metrics' `faer`); measured on the LSTM's shapes (2 cores, AVX2), faer's kernels take a
/// per-step δa·W_hᵀ ([16, 2600]·[2600, 650]) in 0.54 ms against gemm's 1.01 ms and ∂X = δA·W_inᵀ
/// in 12.9 against 18.7 ms, and are slower or equal on the others (∂W_h: 22.3 against 16.9 ms).
/// With AVX-512 (gemm's `x86-v4` kernels) gemm keeps the large products (X·W_in 5.1 against
/// 7.3 ms) and faer takes the per-step h·W_h ([16, 650]·[650, 2600]) in 0.39–0.45 ms against
/// 0.54–0.59 ms.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    Gemm,
    Faer,
    /// LibTorch's `mm`/`addmm_` over the same memory (see [`Products`]).
    #[cfg(feature = "tch")]
    Torch,
}

impl Kernel {
    /// The Rust kernel for the forward pass's per-step h_{t−1}·W_h: a 16-row product that
    /// streams all of W_h (6.8 MB, more than a core's L2) once per step.
    fn recurrent() -> Self {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            return Kernel::Faer;
        }
        Kernel::Gemm
    }
}

/// dst `[m, n]` (row stride `dst_rs`) = (dst if `accumulate`, else 0) + lhs `[m, k]` · rhs `[k, n]`.
fn matmul(
    kernel: Kernel,
    (m, n, k): (usize, usize, usize),
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    lhs: MatrixView,
    rhs: MatrixView,
) {
    // The bounds the unsafe calls rely on: every element they touch is inside its slice.
    // And the destination's rows do not overlap (a mutable view, written in parallel).
    assert!(
        lhs.holds(m, k)
            && rhs.holds(k, n)
            && MatrixView::rows(dst, dst_rs).holds(m, n)
            && (dst_rs >= n || m <= 1),
        "lstm_host: a product's operands are smaller than its shape"
    );
    if m == 0 || n == 0 {
        return;
    }
    let parallel = m * n * k >= PARALLEL_THRESHOLD;
    match kernel {
        Kernel::Gemm => {
            let parallelism = if parallel {
                gemm::Parallelism::Rayon(0)
            } else {
                gemm::Parallelism::None
            };
            // SAFETY: the assertion above keeps every index of the three operands in bounds;
            // `dst` is borrowed mutably, so it aliases neither operand.
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    dst.as_mut_ptr(),
                    1,
                    dst_rs as isize,
                    accumulate,
                    lhs.data.as_ptr(),
                    lhs.cs as isize,
                    lhs.rs as isize,
                    rhs.data.as_ptr(),
                    rhs.cs as isize,
                    rhs.rs as isize,
                    1.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    parallelism,
                );
            }
        }
        Kernel::Faer => {
            use faer::{Accum, MatMut, MatRef, Par};
            // SAFETY: as above: in bounds, and `dst` aliases neither operand.
            let (d, l, r) = unsafe {
                (
                    MatMut::from_raw_parts_mut(dst.as_mut_ptr(), m, n, dst_rs as isize, 1),
                    MatRef::from_raw_parts(
                        lhs.data.as_ptr(),
                        m,
                        k,
                        lhs.rs as isize,
                        lhs.cs as isize,
                    ),
                    MatRef::from_raw_parts(
                        rhs.data.as_ptr(),
                        k,
                        n,
                        rhs.rs as isize,
                        rhs.cs as isize,
                    ),
                )
            };
            let beta = if accumulate {
                Accum::Add
            } else {
                Accum::Replace
            };
            let par = if parallel { Par::rayon(0) } else { Par::Seq };
            faer::linalg::matmul::matmul(d, beta, l, r, 1.0f32, par);
        }
        #[cfg(feature = "tch")]
        Kernel::Torch => torch_matmul((m, n, k), dst, dst_rs, accumulate, lhs, rhs),
    }
}

/// [`matmul`] on LibTorch: the three operands wrapped as CPU tensors over the same memory (no
/// copy), `mm` into the destination or `addmm_` onto it.
#[cfg(feature = "tch")]
fn torch_matmul(
    (m, n, k): (usize, usize, usize),
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    lhs: MatrixView,
    rhs: MatrixView,
) {
    use tch::{Device, Kind, Tensor};
    // A CPU tensor of `rows × cols` f32 over `data` with the strides `(rs, cs)`, no copy.
    // SAFETY (for the callers below): `matmul` asserted that every element of the three shapes
    // with their strides is inside its slice; the tensors live only inside this call, while the
    // slices are borrowed; `dst` is borrowed mutably, so it aliases neither operand, and only
    // `dst`'s tensor is written. A destination of the right shape is never resized by `mm_out`.
    let blob = |data: *const f32, (rows, cols): (usize, usize), (rs, cs): (usize, usize)| unsafe {
        Tensor::from_blob(
            data.cast(),
            &[rows as i64, cols as i64],
            &[rs as i64, cs as i64],
            Kind::Float,
            Device::Cpu,
        )
    };
    let l = blob(lhs.data.as_ptr(), (m, k), (lhs.rs, lhs.cs));
    let r = blob(rhs.data.as_ptr(), (k, n), (rhs.rs, rhs.cs));
    let mut d = blob(dst.as_mut_ptr().cast_const(), (m, n), (dst_rs, 1));
    if accumulate {
        let _ = d.addmm_(&l, &r);
    } else {
        let _ = l.mm_out(&d, &r);
    }
}

/// σ in place through the vectorised exp: e = exp(−|x|), σ = 1/(1+e) for x ≥ 0, e/(1+e) below
/// (no overflow either way).
fn sigmoid_in_place(x: &mut [f32], scratch: &mut Vec<f32>) {
    scratch.clear();
    scratch.extend(x.iter().map(|v| -v.abs()));
    exp_shifted_in_place(scratch, 0.0);
    for (v, &e) in x.iter_mut().zip(scratch.iter()) {
        let s = 1.0 / (1.0 + e);
        *v = if *v >= 0.0 { s } else { e * s };
    }
}

/// tanh in place: e = exp(−2|x|), tanh = sign(x)·(1−e)/(1+e) (absolute error ~1e-7 near 0).
fn tanh_in_place(x: &mut [f32], scratch: &mut Vec<f32>) {
    scratch.clear();
    scratch.extend(x.iter().map(|v| -2.0 * v.abs()));
    exp_shifted_in_place(scratch, 0.0);
    for (v, &e) in x.iter_mut().zip(scratch.iter()) {
        *v = ((1.0 - e) / (1.0 + e)).copysign(*v);
    }
}

/// Runs the layer over a window: `x` `[B·T, d_in]` in (batch, time) row order, from the state
/// (`h0`, `c0`) `[B, H]` (zeros when `None`).
pub fn layer_forward(
    w: &LayerWeights,
    x: &[f32],
    (batch, time): (usize, usize),
    state: Option<(Vec<f32>, Vec<f32>)>,
) -> LayerTape {
    let (h, d_in, g4) = (w.hidden, w.d_in, 4 * w.hidden);
    let rows = batch * time;
    let (h0, c0) = state.unwrap_or_else(|| (vec![0.0; batch * h], vec![0.0; batch * h]));
    let x = transpose_rows(x, batch, time, d_in);
    let mut gates = vec![0.0f32; rows * g4];
    matmul(
        w.kernel(Kernel::Gemm),
        (rows, g4, d_in),
        &mut gates,
        g4,
        false,
        MatrixView::rows(&x, d_in),
        MatrixView::rows(&w.w_in, g4),
    );
    for row in gates.chunks_exact_mut(g4) {
        for (a, b) in row.iter_mut().zip(&w.bias) {
            *a += b;
        }
    }
    let (step, block) = (batch * h, batch * g4);
    let mut cells = vec![0.0f32; rows * h];
    let mut tanh_cells = vec![0.0f32; rows * h];
    let mut outputs = vec![0.0f32; rows * h];
    let mut scratch = Vec::with_capacity(block);
    for t in 0..time {
        let a = &mut gates[t * block..(t + 1) * block];
        // a_t += h_{t−1}·W_h for every sequence at once.
        let previous = if t == 0 {
            &h0[..]
        } else {
            &outputs[(t - 1) * step..t * step]
        };
        matmul(
            w.kernel(Kernel::recurrent()),
            (batch, g4, h),
            a,
            g4,
            true,
            MatrixView::rows(previous, h),
            MatrixView::rows(&w.w_hidden, g4),
        );
        for row in a.chunks_exact_mut(g4) {
            let (ifo, g) = row.split_at_mut(3 * h);
            sigmoid_in_place(ifo, &mut scratch);
            tanh_in_place(g, &mut scratch);
        }
        let (done, rest) = cells.split_at_mut(t * step);
        let c_prev = if t == 0 {
            &c0[..]
        } else {
            &done[(t - 1) * step..]
        };
        let c = &mut rest[..step];
        for (b, row) in a.chunks_exact(g4).enumerate() {
            for j in 0..h {
                let k = b * h + j;
                c[k] = row[h + j] * c_prev[k] + row[j] * row[3 * h + j];
            }
        }
        let tc = &mut tanh_cells[t * step..(t + 1) * step];
        tc.copy_from_slice(c);
        tanh_in_place(tc, &mut scratch);
        let out = &mut outputs[t * step..(t + 1) * step];
        for (b, row) in a.chunks_exact(g4).enumerate() {
            for j in 0..h {
                let k = b * h + j;
                out[k] = row[2 * h + j] * tc[k];
            }
        }
    }
    LayerTape {
        batch,
        time,
        x,
        gates,
        cells,
        tanh_cells,
        outputs,
        h0,
        c0,
    }
}

/// Backpropagates ∂L/∂outputs `d_out` `[B·T, H]` ((batch, time) order) through the window (no
/// gradient reaches the state it started from: truncated BPTT).
pub fn layer_backward(w: &LayerWeights, tape: LayerTape, d_out: &[f32]) -> LayerGradients {
    let (h, d_in, g4) = (w.hidden, w.d_in, 4 * w.hidden);
    let LayerTape {
        batch,
        time,
        x,
        mut gates,
        cells,
        tanh_cells,
        outputs,
        h0,
        c0,
    } = tape;
    let rows = batch * time;
    assert_eq!(d_out.len(), rows * h, "lstm_host: ∂L/∂h has the wrong size");
    let d_out = transpose_rows(d_out, batch, time, h);
    let (step, block) = (batch * h, batch * g4);
    // From here on `gates` is overwritten, step by step from the last, with δA.
    let mut dh_next = vec![0.0f32; step];
    let mut dc_next = vec![0.0f32; step];
    // δa·W_hᵀ 34 times over: the Rust kernels read a row-major W_hᵀ `[4H, H]` 1.4× as fast as
    // W_h's transposed view (faer, 2 cores, AVX-512: 0.48–0.50 against 0.68 ms; not measured on
    // AVX2, where a row-major operand is still the layout both kernels pack fastest), and the
    // copy costs less than one of those products; LibTorch's `mm` takes the view as it is.
    let w_hidden_t = match w.products {
        Products::Rust => Some(transpose(&w.w_hidden, h, g4)),
        #[cfg(feature = "tch")]
        Products::LibTorch => None,
    };
    let w_hidden_t = match &w_hidden_t {
        Some(t) => MatrixView::rows(t, h),
        None => MatrixView::transposed(&w.w_hidden, g4),
    };
    for t in (0..time).rev() {
        let a = &mut gates[t * block..(t + 1) * block];
        let c_prev = if t == 0 {
            &c0[..]
        } else {
            &cells[(t - 1) * step..t * step]
        };
        let tc = &tanh_cells[t * step..(t + 1) * step];
        let dy = &d_out[t * step..(t + 1) * step];
        for (b, row) in a.chunks_exact_mut(g4).enumerate() {
            for j in 0..h {
                let k = b * h + j;
                let (i, f, o, g) = (row[j], row[h + j], row[2 * h + j], row[3 * h + j]);
                let dh = dy[k] + dh_next[k];
                let dc = dh * o * (1.0 - tc[k] * tc[k]) + dc_next[k];
                dc_next[k] = dc * f;
                row[j] = dc * g * i * (1.0 - i);
                row[h + j] = dc * c_prev[k] * f * (1.0 - f);
                row[2 * h + j] = dh * tc[k] * o * (1.0 - o);
                row[3 * h + j] = dc * i * (1.0 - g * g);
            }
        }
        if t > 0 {
            // δh_{t−1} = δa_t·W_hᵀ.
            matmul(
                w.kernel(Kernel::Faer),
                (batch, h, g4),
                &mut dh_next,
                h,
                false,
                MatrixView::rows(a, g4),
                w_hidden_t,
            );
        }
    }
    let d_gates = gates;
    // ∂W_h = Σ_t h_{t−1}ᵀ·δa_t: the starting state against step 0, then the outputs of steps
    // 0..T−1 against steps 1..T (contiguous in (time, batch) order).
    let mut w_hidden = vec![0.0f32; h * g4];
    matmul(
        w.kernel(Kernel::Gemm),
        (h, g4, batch),
        &mut w_hidden,
        g4,
        false,
        MatrixView::transposed(&h0, h),
        MatrixView::rows(&d_gates[..block], g4),
    );
    matmul(
        w.kernel(Kernel::Gemm),
        (h, g4, rows - batch),
        &mut w_hidden,
        g4,
        true,
        MatrixView::transposed(&outputs[..(rows - batch) * h], h),
        MatrixView::rows(&d_gates[block..], g4),
    );
    let mut w_in = vec![0.0f32; d_in * g4];
    matmul(
        w.kernel(Kernel::Gemm),
        (d_in, g4, rows),
        &mut w_in,
        g4,
        false,
        MatrixView::transposed(&x, d_in),
        MatrixView::rows(&d_gates, g4),
    );
    let mut bias = vec![0.0f32; g4];
    for row in d_gates.chunks_exact(g4) {
        for (s, v) in bias.iter_mut().zip(row) {
            *s += v;
        }
    }
    let mut dx = vec![0.0f32; rows * d_in];
    matmul(
        w.kernel(Kernel::Faer),
        (rows, d_in, g4),
        &mut dx,
        d_in,
        false,
        MatrixView::rows(&d_gates, g4),
        MatrixView::transposed(&w.w_in, g4),
    );
    LayerGradients {
        x: transpose_rows(&dx, time, batch, d_in),
        w_in,
        w_hidden,
        bias,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random fill in [−scale, scale].
    fn fill(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    /// The same layer in f64, one scalar step at a time, straight from the formulas.
    fn reference_forward(
        w: &LayerWeights,
        x: &[f32],
        (batch, time): (usize, usize),
        h0: &[f32],
        c0: &[f32],
    ) -> Vec<f64> {
        let (h, d_in, g4) = (w.hidden, w.d_in, 4 * w.hidden);
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        let mut out = vec![0.0; batch * time * h];
        for b in 0..batch {
            let mut hp: Vec<f64> = h0[b * h..(b + 1) * h].iter().map(|&v| v as f64).collect();
            let mut cp: Vec<f64> = c0[b * h..(b + 1) * h].iter().map(|&v| v as f64).collect();
            for t in 0..time {
                let r = b * time + t;
                let a: Vec<f64> = (0..g4)
                    .map(|k| {
                        let from_x: f64 = (0..d_in)
                            .map(|i| x[r * d_in + i] as f64 * w.w_in[i * g4 + k] as f64)
                            .sum();
                        let from_h: f64 =
                            (0..h).map(|i| hp[i] * w.w_hidden[i * g4 + k] as f64).sum();
                        from_x + from_h + w.bias[k] as f64
                    })
                    .collect();
                for j in 0..h {
                    let (i, f, o) = (sig(a[j]), sig(a[h + j]), sig(a[2 * h + j]));
                    let g = a[3 * h + j].tanh();
                    cp[j] = f * cp[j] + i * g;
                    hp[j] = o * cp[j].tanh();
                    out[r * h + j] = hp[j];
                }
            }
        }
        out
    }

    fn layer(d_in: usize, h: usize, products: Products) -> LayerWeights {
        LayerWeights {
            d_in,
            hidden: h,
            w_in: fill(d_in * 4 * h, 1, 0.5),
            w_hidden: fill(h * 4 * h, 2, 0.5),
            bias: fill(4 * h, 3, 0.3),
            products,
        }
    }

    /// Every place the products can run in this build.
    fn every_products() -> Vec<Products> {
        vec![
            Products::Rust,
            #[cfg(feature = "tch")]
            Products::LibTorch,
        ]
    }

    #[test]
    fn the_forward_matches_the_formulas_in_f64() {
        for products in every_products() {
            forward_matches_the_formulas_in_f64(products);
        }
    }

    fn forward_matches_the_formulas_in_f64(products: Products) {
        let (batch, time, d_in, h) = (3, 5, 4, 6);
        let w = layer(d_in, h, products);
        let x = fill(batch * time * d_in, 4, 1.0);
        let (h0, c0) = (fill(batch * h, 5, 0.5), fill(batch * h, 6, 0.5));
        let tape = layer_forward(&w, &x, (batch, time), Some((h0.clone(), c0.clone())));
        let expected = reference_forward(&w, &x, (batch, time), &h0, &c0);
        let outputs = tape.outputs();
        let worst = outputs
            .iter()
            .zip(&expected)
            .map(|(&a, &b)| (a as f64 - b).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-5, "{products:?}: max difference {worst}");
        // The final state is the last step's, per sequence.
        let (_, last_h) = tape.final_state();
        for b in 0..batch {
            let r = b * time + time - 1;
            assert_eq!(last_h[b * h..(b + 1) * h], outputs[r * h..(r + 1) * h]);
        }
    }

    /// Every gradient against central finite differences of the f64 reference, with the loss
    /// L = Σ u ⊙ outputs for a fixed random u.
    #[test]
    fn the_backward_matches_finite_differences() {
        for products in every_products() {
            backward_matches_finite_differences(products);
        }
    }

    fn backward_matches_finite_differences(products: Products) {
        let (batch, time, d_in, h) = (2, 4, 3, 5);
        let w = layer(d_in, h, products);
        let x = fill(batch * time * d_in, 7, 1.0);
        let (h0, c0) = (fill(batch * h, 8, 0.5), fill(batch * h, 9, 0.5));
        let u = fill(batch * time * h, 10, 1.0);
        let loss = |w: &LayerWeights, x: &[f32]| -> f64 {
            reference_forward(w, x, (batch, time), &h0, &c0)
                .iter()
                .zip(&u)
                .map(|(a, &b)| a * b as f64)
                .sum()
        };
        let tape = layer_forward(&w, &x, (batch, time), Some((h0.clone(), c0.clone())));
        let grads = layer_backward(&w, tape, &u);
        let eps = 1e-3f32;
        let check = |what: &str, analytic: &[f32], perturb: &dyn Fn(usize, f32) -> f64| {
            for (k, &g) in analytic.iter().enumerate() {
                let numeric = (perturb(k, eps) - perturb(k, -eps)) / (2.0 * eps as f64);
                assert!(
                    (numeric - g as f64).abs() < 2e-3 * (1.0 + numeric.abs()),
                    "{products:?} {what}[{k}]: analytic {g}, finite differences {numeric}"
                );
            }
        };
        let with = |field: usize, k: usize, e: f32| {
            let mut w2 = LayerWeights {
                d_in,
                hidden: h,
                w_in: w.w_in.clone(),
                w_hidden: w.w_hidden.clone(),
                bias: w.bias.clone(),
                products,
            };
            let mut x2 = x.clone();
            match field {
                0 => w2.w_in[k] += e,
                1 => w2.w_hidden[k] += e,
                2 => w2.bias[k] += e,
                _ => x2[k] += e,
            }
            loss(&w2, &x2)
        };
        check("∂W_in", &grads.w_in, &|k, e| with(0, k, e));
        check("∂W_h", &grads.w_hidden, &|k, e| with(1, k, e));
        check("∂b", &grads.bias, &|k, e| with(2, k, e));
        check("∂x", &grads.x, &|k, e| with(3, k, e));
        assert!(grads.w_hidden.iter().any(|g| g.abs() > 1e-2));
    }

    /// Every kernel (LibTorch's too in a tch build), every operand layout the layer uses,
    /// accumulating or not, against a direct f64 sum; large enough for the parallel paths (above
    /// 192³ multiply-adds).
    #[test]
    fn every_kernel_multiplies_every_layout_right() {
        let (m, n, k) = (37, 300, 700);
        let a = fill(m * k, 12, 1.0);
        let b = fill(k * n, 13, 1.0);
        let kernels = [
            Kernel::Gemm,
            Kernel::Faer,
            #[cfg(feature = "tch")]
            Kernel::Torch,
        ];
        for kernel in kernels {
            for (ta, tb) in [(false, false), (true, false), (false, true)] {
                for accumulate in [false, true] {
                    let lhs = if ta {
                        MatrixView::transposed(&a, m)
                    } else {
                        MatrixView::rows(&a, k)
                    };
                    let rhs = if tb {
                        MatrixView::transposed(&b, k)
                    } else {
                        MatrixView::rows(&b, n)
                    };
                    // A row stride wider than n: the columns past n stay untouched.
                    let stride = n + 3;
                    let start = fill(m * stride, 14, 1.0);
                    let mut dst = start.clone();
                    matmul(kernel, (m, n, k), &mut dst, stride, accumulate, lhs, rhs);
                    for i in 0..m {
                        for j in 0..stride {
                            let got = dst[i * stride + j] as f64;
                            if j >= n {
                                assert_eq!(got, start[i * stride + j] as f64);
                                continue;
                            }
                            let mut want: f64 = (0..k)
                                .map(|p| {
                                    lhs.data[i * lhs.rs + p * lhs.cs] as f64
                                        * rhs.data[p * rhs.rs + j * rhs.cs] as f64
                                })
                                .sum();
                            if accumulate {
                                want += start[i * stride + j] as f64;
                            }
                            assert!(
                                (got - want).abs() < 1e-3,
                                "{kernel:?} ({i}, {j}): {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_window_of_one_step_and_no_state_starts_from_zeros() {
        let w = layer(2, 3, Products::Rust);
        let x = fill(2 * 2, 11, 1.0);
        let tape = layer_forward(&w, &x, (2, 1), None);
        let expected = reference_forward(&w, &x, (2, 1), &[0.0; 6], &[0.0; 6]);
        for (a, b) in tape.outputs().iter().zip(&expected) {
            assert!((*a as f64 - b).abs() < 1e-6);
        }
        let grads = layer_backward(&w, tape, &[1.0; 6]);
        // From a zero state the hidden weights get no gradient (H_prev = 0 at t = 0).
        assert!(grads.w_hidden.iter().all(|&g| g == 0.0));
        assert!(grads.x.iter().any(|&g| g != 0.0));
    }
}
