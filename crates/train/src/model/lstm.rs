//! LSTM language model with tied embeddings (Zaremba et al. 2014; AWD-LSTM sized preset): stacked
//! LSTM layers with dropout between them, a projection back to the embedding width when the hidden
//! size differs, and the state carried across windows for truncated BPTT.

use burn::module::{Param, ParamId};
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, GateController, Initializer, Linear,
    LinearConfig, Lstm, LstmConfig as BurnLstmConfig, LstmState,
};
use burn::prelude::*;
use burn::tensor::Gradients;

use super::lstm_host;
use super::spectral::SpectralEmbedding;
use conelab_core::model::LstmConfig;

#[derive(Module, Debug)]
pub struct LstmLm {
    pub embedding: Embedding,
    pub layers: Vec<Lstm>,
    pub projection: Option<Linear>,
    pub output_bias: Option<Param<Tensor<1>>>,
    pub dropout: Dropout,
    /// W = U·diag(σ)·Vᵀ while spectrum control is on; `embedding.weight` is then unused.
    pub spectral: Option<SpectralEmbedding>,
}

/// The recurrent state of every layer, `[batch, hidden]` each.
pub type RecurrentState = Vec<LstmState<2>>;

impl LstmLm {
    pub fn new(cfg: &LstmConfig, vocab: usize, device: &Device) -> Self {
        let uniform = Initializer::Uniform {
            min: -cfg.init_range,
            max: cfg.init_range,
        };
        let layers = (0..cfg.layers)
            .map(|i| {
                let d_in = if i == 0 { cfg.embed } else { cfg.hidden };
                BurnLstmConfig::new(d_in, cfg.hidden, true)
                    .with_initializer(uniform.clone())
                    .init(device)
            })
            .collect();
        Self {
            embedding: EmbeddingConfig::new(vocab, cfg.embed)
                .with_initializer(uniform.clone())
                .init(device),
            layers,
            projection: (cfg.hidden != cfg.embed).then(|| {
                LinearConfig::new(cfg.hidden, cfg.embed)
                    .with_initializer(uniform.clone())
                    .init(device)
            }),
            output_bias: cfg
                .output_bias
                .then(|| Param::from_tensor(Tensor::zeros([vocab], device))),
            dropout: DropoutConfig::new(cfg.dropout).init(),
            spectral: None,
        }
    }

    /// Hidden states before the output layer, `[batch·time, embed]`, and the state after the window.
    pub fn hidden(
        &self,
        inputs: Tensor<2, Int>,
        state: Option<RecurrentState>,
        w: Option<Tensor<2>>,
    ) -> (Tensor<2>, RecurrentState) {
        let [b, t] = inputs.dims();
        let embedded = super::lookup(&self.embedding, self.spectral.as_ref(), inputs, w);
        let mut x = super::dropout::forward(&self.dropout, embedded);
        let mut states = state.map(|s| s.into_iter().map(Some).collect::<Vec<_>>());
        let mut next = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.iter().enumerate() {
            let s = states
                .as_mut()
                .and_then(|s| s.get_mut(i).and_then(Option::take));
            let (y, s) = lstm_forward(layer, x, s);
            next.push(s);
            x = super::dropout::forward(&self.dropout, y);
        }
        if let Some(p) = &self.projection {
            x = super::precision::linear3(p, x);
        }
        let d = x.dims()[2];
        (x.reshape([b * t, d]), next)
    }
}

/// `layer.forward` computed as cuDNN does, with burn's parameters as they are (checkpoints are
/// unchanged): the four gates' input transforms as one product over the whole window, then one
/// product per step of the hidden state with the four gates' hidden weights side by side, and the
/// outputs stacked once at the end. burn's own loop makes eight products and eight bias additions
/// per step and writes each step's output into a copy of the whole `[B, T, H]` output (a
/// `slice_assign` under autodiff): 3× PyTorch's time on `lstm`. Layers configured otherwise than
/// conelab's (reversed, clipped, coupled gates, other activations) take burn's path.
pub fn lstm_forward(
    layer: &Lstm,
    x: Tensor<3>,
    state: Option<LstmState<2>>,
) -> (Tensor<3>, LstmState<2>) {
    #[cfg(feature = "tch")]
    if let Some(done) = fused::lstm_layer(layer, &x, &state) {
        return done;
    }
    lstm_composed(layer, x, state)
}

/// [`lstm_forward`] in burn's ops (every backend; LibTorch takes the fused node where it can).
fn lstm_composed(
    layer: &Lstm,
    x: Tensor<3>,
    state: Option<LstmState<2>>,
) -> (Tensor<3>, LstmState<2>) {
    use burn::tensor::activation::sigmoid;
    let Some(gates) = side_by_side(layer) else {
        return layer.forward(x, state);
    };
    let cat = |f: &dyn Fn(&burn::nn::GateController) -> Tensor<2>| {
        Tensor::cat(gates.iter().map(|g| f(g)).collect(), 1)
    };
    let w_in = cat(&|g| g.input_transform.weight.val());
    let w_hidden = cat(&|g| g.hidden_transform.weight.val());
    let bias = |l: &Linear| l.bias.as_ref().map(|b| b.val().unsqueeze_dim::<2>(0));
    let biases: Vec<Tensor<2>> = gates
        .iter()
        .flat_map(|g| [bias(&g.input_transform), bias(&g.hidden_transform)])
        .flatten()
        .collect();
    if !(biases.is_empty() || biases.len() == 8) {
        return layer.forward(x, state);
    }
    let [b, t, d_in] = x.dims();
    let h_dim = layer.d_hidden;
    let device = x.device();
    let matmul = super::precision::matmul;
    let mut projected = matmul(x.reshape([b * t, d_in]), w_in);
    if biases.len() == 8 {
        // Each gate's input and hidden biases add up; side by side, one row of 4H.
        let pairs: Vec<Tensor<2>> = biases
            .chunks(2)
            .map(|pair| pair[0].clone() + pair[1].clone())
            .collect();
        projected = projected + Tensor::cat(pairs, 1);
    }
    let projected = projected.reshape([b, t, 4 * h_dim]);
    let (mut cell, mut hidden) = state
        .unwrap_or_else(|| {
            LstmState::new(
                Tensor::zeros([b, h_dim], &device),
                Tensor::zeros([b, h_dim], &device),
            )
        })
        .unpack();
    let mut outputs = Vec::with_capacity(t);
    for step in 0..t {
        let pre = projected.clone().narrow(1, step, 1).reshape([b, 4 * h_dim])
            + matmul(hidden, w_hidden.clone());
        let gate = |k: usize| pre.clone().narrow(1, k * h_dim, h_dim);
        let (input, forget, output) = (sigmoid(gate(0)), sigmoid(gate(1)), sigmoid(gate(2)));
        let candidate = gate(3).tanh();
        cell = forget * cell + input * candidate;
        hidden = output * cell.clone().tanh();
        outputs.push(hidden.clone());
    }
    (Tensor::stack(outputs, 1), LstmState::new(cell, hidden))
}

/// One LSTM layer as one node of burn's graph on LibTorch: `aten::lstm` (cuDNN on CUDA) for
/// the whole window under torch's own autograd, whose backward (`_cudnn_rnn_backward` on CUDA)
/// the node's backward runs (`csrc/lstm.cpp`). burn's parameters are as they are (checkpoints
/// unchanged): the four gates' weights go side by side, in torch's gate order (input, forget,
/// cell, output), by a few ops of burn's graph per layer and step, not per time step. The final
/// state comes out as a constant of the graph: truncated BPTT carries it into the next window
/// detached, so no gradient flows through it (the output's does, to x, the weights and the
/// initial state).
#[cfg(feature = "tch")]
#[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
mod fused {

    use burn::backend::AutodiffBackend;
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::autodiff::ops::{Backward, OpsKind};
    use burn::backend::{Autodiff, LibTorch, libtorch::TchTensor};
    use burn::nn::{GateController, Linear, Lstm, LstmState};
    use burn::prelude::*;

    use crate::aten::{self, AtenError, LSTM_INPUTS};
    use crate::model::torch_backward::{Saved, TorchBackward};

    type Ad = Autodiff<LibTorch>;

    /// The layer over `x` from `state` where the tensors are LibTorch's; `None` elsewhere, for
    /// a layer configured otherwise than conelab's, or where libtorch refuses (the composed
    /// path then runs, and says what is wrong if anything is).
    pub(super) fn lstm_layer(
        layer: &Lstm,
        x: &Tensor<3>,
        state: &Option<LstmState<2>>,
    ) -> Option<(Tensor<3>, LstmState<2>)> {
        let device = x.device();
        let [input, forget, output, cell] = super::side_by_side(layer)?;
        let gates = [input, forget, cell, output];
        // Each gate's `[d_in, H]` transposed, one under the other: `[4H, d_in]`, contiguous, in
        // one kernel (side by side and then transposed, the island would copy it once more).
        let stacked = |f: &dyn Fn(&GateController) -> Tensor<2>| {
            Tensor::cat(gates.iter().map(|g| f(g).transpose()).collect(), 0)
        };
        let bias = |l: &Linear| l.bias.as_ref().map(|b| b.val());
        let biases = |f: &dyn Fn(&GateController) -> Option<Tensor<1>>| {
            gates
                .iter()
                .map(|g| f(g))
                .collect::<Option<Vec<_>>>()
                .map(|b| Tensor::cat(b, 0))
        };
        let b_ih = biases(&|g| bias(&g.input_transform))?;
        let b_hh = biases(&|g| bias(&g.hidden_transform))?;
        let weights = |f: &dyn Fn(&GateController) -> Tensor<2>| gates.map(f);
        let (w_ih, w_hh) = if device.is_autodiff() {
            (
                super::gates_stacked(weights(&|g| g.input_transform.weight.val()))?,
                super::gates_stacked(weights(&|g| g.hidden_transform.weight.val()))?,
            )
        } else {
            (
                stacked(&|g| g.input_transform.weight.val()),
                stacked(&|g| g.hidden_transform.weight.val()),
            )
        };
        let [b, _, _] = x.dims();
        let h = layer.d_hidden;
        let (c0, h0) = match state {
            Some(s) => (s.cell.clone(), s.hidden.clone()),
            None => (
                Tensor::zeros([b, h], &device),
                Tensor::zeros([b, h], &device),
            ),
        };
        if !device.is_autodiff() {
            // Evaluation: the same kernel, no graph.
            let lt2 = |t: Tensor<2>| t.try_into_primitive::<LibTorch>().ok();
            let lt1 = |t: Tensor<1>| t.try_into_primitive::<LibTorch>().ok();
            let x = x.clone().try_into_primitive::<LibTorch>().ok()?;
            let (wi, wh, bi, bh, h0, c0) = (
                lt2(w_ih)?,
                lt2(w_hh)?,
                lt1(b_ih)?,
                lt1(b_hh)?,
                lt2(h0)?,
                lt2(c0)?,
            );
            let f = AtenError::or_composed(aten::lstm_layer(
                &x.tensor,
                &h0.tensor,
                &c0.tensor,
                &wi.tensor,
                &wh.tensor,
                &bi.tensor,
                &bh.tensor,
                false,
                crate::model::precision::lower(),
            ))?;
            let plain2 =
                |t: tch::Tensor| Tensor::<2>::from_primitive::<LibTorch>(TchTensor::new(t));
            return Some((
                Tensor::from_primitive::<LibTorch>(TchTensor::new(f.out)),
                LstmState::new(plain2(f.c_n), plain2(f.h_n)),
            ));
        }
        let ad3 = |t: Tensor<3>| t.try_into_primitive::<Ad>().ok();
        let ad2 = |t: Tensor<2>| t.try_into_primitive::<Ad>().ok();
        let ad1 = |t: Tensor<1>| t.try_into_primitive::<Ad>().ok();
        let inputs = [
            ad3(x.clone())?,
            ad2(w_ih)?,
            ad2(w_hh)?,
            ad1(b_ih)?,
            ad1(b_hh)?,
            ad2(h0)?,
            ad2(c0)?,
        ];
        let run = |track: bool| {
            let [x, wi, wh, bi, bh, h0, c0] = inputs.each_ref().map(|t| &t.primitive().tensor);
            let lower = crate::model::precision::lower();
            AtenError::or_composed(aten::lstm_layer(x, h0, c0, wi, wh, bi, bh, track, lower))
        };
        let nodes = inputs.each_ref().map(|t| t.node());
        let (out, h_n, c_n) = match TorchBackward::<LSTM_INPUTS>
            .prepare::<NoCheckpointing>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let f = run(true)?;
                let out = TchTensor::new(f.out);
                let held = inputs.iter().map(|t| t.primitive().clone()).collect();
                let saved = Saved::new(f.island?, held, &out);
                (prep.finish(saved, out), f.h_n, f.c_n)
            }
            OpsKind::UnTracked(prep) => {
                let f = run(false)?;
                (prep.finish(TchTensor::new(f.out)), f.h_n, f.c_n)
            }
        };
        // The final state is carried into the next window detached: constants of the graph.
        let constant =
            |t: tch::Tensor| Tensor::<2>::from_primitive::<Ad>(Ad::from_inner(TchTensor::new(t)));
        Some((
            Tensor::from_primitive::<Ad>(out),
            LstmState::new(constant(c_n), constant(h_n)),
        ))
    }
}

/// The four gates' weights `[d_in, H]` one under the other, transposed, as torch's LSTM takes
/// them (`[4H, d_in]`, contiguous): one node of burn's graph ([`GatesStacked`]), `None` where the
/// tensors are not LibTorch's with autodiff.
#[cfg(feature = "tch")]
#[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
fn gates_stacked(weights: [Tensor<2>; 4]) -> Option<Tensor<2>> {
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::autodiff::ops::{Backward, OpsKind};
    use burn::backend::{Autodiff, LibTorch, libtorch::TchTensor};
    let [d_in, h] = weights[0].dims();
    if weights.iter().any(|w| w.dims() != [d_in, h]) {
        return None;
    }
    let inputs = weights
        .into_iter()
        .map(|w| w.try_into_primitive::<Autodiff<LibTorch>>().ok())
        .collect::<Option<Vec<_>>>()?;
    let parts: Vec<tch::Tensor> = inputs.iter().map(|w| w.primitive().tensor.tr()).collect();
    let out = TchTensor::new(tch::Tensor::cat(&parts, 0));
    let nodes: [_; 4] = std::array::from_fn(|k| inputs[k].node());
    let out = match GatesStacked
        .prepare::<NoCheckpointing>(nodes)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish([d_in, h], out),
        OpsKind::UnTracked(prep) => prep.finish(out),
    };
    Some(Tensor::from_primitive::<Autodiff<LibTorch>>(out))
}

/// The node of [`gates_stacked`]. burn's own cat of the transposed weights would hand each gate
/// its gradient as a transposed slice of the `[4H, d_in]` gradient, which the fused AdamW then
/// copies to a dense buffer, four copies a matrix; here one copy makes the `[4, d_in, H]`
/// gradient whose blocks are already dense.
#[cfg(feature = "tch")]
#[derive(Debug)]
struct GatesStacked;

#[cfg(feature = "tch")]
#[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
impl burn::backend::autodiff::ops::Backward<burn::backend::LibTorch, 4> for GatesStacked {
    /// `[d_in, H]` of each gate's weight.
    type State = [usize; 2];

    fn backward(
        self,
        ops: burn::backend::autodiff::ops::Ops<[usize; 2], 4>,
        grads: &mut burn::backend::autodiff::grads::Gradients,
        _: &mut burn::backend::autodiff::checkpoint::base::Checkpointer,
    ) {
        use burn::backend::{LibTorch, libtorch::TchTensor};
        let g: TchTensor = grads.consume::<LibTorch>(&ops.node);
        let [d_in, h] = ops.state.map(|v| v as i64);
        let blocks = g.tensor.view([4, h, d_in]).transpose(1, 2).contiguous();
        for (k, parent) in ops.parents.into_iter().enumerate() {
            if let Some(node) = parent {
                grads.register::<LibTorch>(node.id, TchTensor::new(blocks.get(k as i64)));
            }
        }
    }
}

/// The four gates of a layer configured as conelab's (batch first, forward, no clipping or
/// coupled gates, sigmoid gates and tanh cell), in the side-by-side order input, forget, output,
/// cell; `None` for any other layer.
fn side_by_side(layer: &Lstm) -> Option<[&GateController; 4]> {
    use burn::nn::activation::Activation;
    let standard = layer.batch_first
        && !layer.reverse
        && layer.clip.is_none()
        && !layer.input_forget
        && matches!(layer.gate_activation, Activation::Sigmoid(_))
        && matches!(layer.cell_activation, Activation::Tanh(_))
        && matches!(layer.hidden_activation, Activation::Tanh(_));
    let forget = layer.forget_gate.as_ref().filter(|_| standard)?;
    Some([
        &layer.input_gate,
        forget,
        &layer.output_gate,
        &layer.cell_gate,
    ])
}

/// A training window whose LSTM layers ran on the host (`lstm_host`): what the host computation
/// joins back to burn's graph with, and each layer's tape for the backward pass.
///
/// The step's loss is differentiated with the last layer's output as a leaf; [`Self::backward`]
/// takes that leaf's gradient through the layers by hand and hands back (a) each layer's weight
/// gradients and (b) a surrogate Σ x ⊙ ∂L/∂x over the first layer's input (the embedding
/// lookup and its dropout, rebuilt), whose backward pass carries the rest into W (or U, σ, V).
pub struct HostLstmWindow {
    /// The window's token ids and the first layer's input dropout mask: the input side of the
    /// graph is built afresh for the second backward pass (burn frees the first pass's nodes).
    inputs: Tensor<2, Int>,
    input_mask: Option<Vec<f32>>,
    leaf: Tensor<3>,
    layers: Vec<HostLayer>,
}

struct HostLayer {
    weights: lstm_host::LayerWeights,
    tape: lstm_host::LayerTape,
    /// The dropout mask applied to this layer's output before the next layer (not for the last).
    mask: Option<Vec<f32>>,
    /// Each gate's (input weight, hidden weight, input bias, hidden bias) ids, side-by-side order.
    ids: Vec<[ParamId; 4]>,
}

/// What [`HostLstmWindow::backward`] gives the step.
pub struct HostLstmGradients {
    /// Differentiate this (a second, small backward pass) for the gradient below the LSTM.
    pub surrogate: Tensor<1>,
    /// The layers' weight gradients, `[d_in, H]` or `[H, H]`, on the inner (non-autodiff) device.
    pub weights: Vec<(ParamId, Tensor<2>)>,
    /// The layers' bias gradients, `[H]`.
    pub biases: Vec<(ParamId, Tensor<1>)>,
}

#[derive(Debug, thiserror::Error)]
pub enum HostLstmError {
    #[error("reading a tensor for the host LSTM: {0}")]
    Read(String),
    #[error("host LSTM: {0}")]
    Shape(String),
}

fn host_vec<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>, HostLstmError> {
    t.try_into_vec_as::<f32>()
        .map_err(|e| HostLstmError::Read(format!("{e:?}")))
}

/// The gates' `[rows, H]` matrices side by side, `[rows, 4H]`, read in place from burn-flex's
/// buffers: one copy, where burn's `cat` and a read of its result are two (4.6 ms a layer of
/// `lstm`). `None` for another backend's tensors.
fn side_by_side_in_place(parts: &[Tensor<2>]) -> Option<Vec<f32>> {
    #[cfg(feature = "flex")]
    {
        let [rows, h] = parts.first()?.dims();
        let buffers = parts
            .iter()
            .map(|p| {
                (p.dims() == [rows, h])
                    .then(|| super::device::flex_buffer(&p.clone().inner(), rows * h))
                    .flatten()
            })
            .collect::<Option<Vec<_>>>()?;
        let slices: Vec<&[f32]> = buffers.iter().map(|b| b.storage::<f32>()).collect();
        let mut out = Vec::with_capacity(rows * h * slices.len());
        for r in 0..rows {
            for s in &slices {
                out.extend_from_slice(&s[r * h..(r + 1) * h]);
            }
        }
        Some(out)
    }
    #[cfg(not(feature = "flex"))]
    {
        let _ = parts;
        None
    }
}

impl LstmLm {
    /// Whether [`Self::hidden_on_host`] can run this model on `device`: every layer configured as
    /// conelab's with both biases, and dropout masks drawn on the host.
    pub fn runs_on_host(&self, device: &Device) -> bool {
        self.layers.iter().all(|l| {
            side_by_side(l).is_some_and(|gates| {
                gates
                    .iter()
                    .all(|g| g.input_transform.bias.is_some() && g.hidden_transform.bias.is_some())
            })
        }) && super::dropout::host_masks_cover(&self.dropout, device)
    }

    /// [`Self::hidden`] for a training step in host memory (burn-flex, LibTorch CPU) with the LSTM
    /// layers computed on the host (same values, same dropout masks in the same order); `None` when
    /// [`Self::runs_on_host`] says no. On a device without autodiff (evaluation) it is the same
    /// forward, and the window can be dropped.
    pub fn hidden_on_host(
        &self,
        inputs: Tensor<2, Int>,
        state: Option<RecurrentState>,
        w: Option<Tensor<2>>,
    ) -> Result<Option<(Tensor<2>, RecurrentState, HostLstmWindow)>, HostLstmError> {
        let device = inputs.device();
        if !self.runs_on_host(&device) {
            return Ok(None);
        }
        let [b, t] = inputs.dims();
        // What is read to the host is read as constants (`super::constant`): tracked operations
        // on the parameters would only be recorded and left in the graph.
        let table = w
            .or_else(|| self.spectral.is_none().then(|| self.embedding.weight.val()))
            .map(super::constant);
        let embedded = super::lookup(
            &self.embedding,
            self.spectral.as_ref(),
            inputs.clone(),
            table,
        );
        let mut x = host_vec(super::constant(embedded))?;
        let input_mask = super::dropout::next_host_mask(&self.dropout, x.len(), &device);
        if let Some(m) = &input_mask {
            x.iter_mut().zip(m).for_each(|(v, k)| *v *= k);
        }
        let mut states = state.map(|s| s.into_iter().map(Some).collect::<Vec<_>>());
        let mut layers: Vec<HostLayer> = Vec::with_capacity(self.layers.len());
        let mut next = Vec::with_capacity(self.layers.len());
        let count = self.layers.len();
        for (i, layer) in self.layers.iter().enumerate() {
            // `runs_on_host` said yes, so every layer is side by side with both biases.
            let not_covered = || HostLstmError::Shape(format!("layer {i} is not covered"));
            let gates = side_by_side(layer).ok_or_else(not_covered)?;
            let h = layer.d_hidden;
            let d_in = x.len() / (b * t).max(1);
            let cat = |f: &dyn Fn(&GateController) -> Tensor<2>| {
                let parts: Vec<Tensor<2>> = gates.iter().map(|g| super::constant(f(g))).collect();
                match side_by_side_in_place(&parts) {
                    Some(w) => Ok(w),
                    None => host_vec(Tensor::cat(parts, 1)),
                }
            };
            let bias = |l: &Linear| {
                l.bias
                    .as_ref()
                    .map(|p| super::constant(p.val()).unsqueeze_dim::<2>(0))
            };
            let summed = Tensor::cat(
                gates
                    .iter()
                    .map(|g| {
                        bias(&g.input_transform)
                            .zip(bias(&g.hidden_transform))
                            .map(|(a, c)| a + c)
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(not_covered)?,
                1,
            );
            let weights = lstm_host::LayerWeights {
                d_in,
                hidden: h,
                w_in: cat(&|g| g.input_transform.weight.val())?,
                w_hidden: cat(&|g| g.hidden_transform.weight.val())?,
                bias: host_vec(summed)?,
                products: lstm_host::Products::for_device(&device),
            };
            let carried = match states
                .as_mut()
                .and_then(|s| s.get_mut(i).and_then(Option::take))
            {
                Some(s) => {
                    let (hidden, cell) = (host_vec(s.hidden)?, host_vec(s.cell)?);
                    // A carried state comes from the last window or a checkpoint's file.
                    if hidden.len() != b * h || cell.len() != b * h {
                        return Err(HostLstmError::Shape(format!(
                            "layer {i}'s carried state has {} and {} values, not {b} × {h}",
                            hidden.len(),
                            cell.len()
                        )));
                    }
                    Some((hidden, cell))
                }
                None => None,
            };
            let tape = lstm_host::layer_forward(&weights, &x, (b, t), carried);
            let (cell, hidden) = tape.final_state();
            next.push(LstmState::new(
                Tensor::from_data(TensorData::new(cell, [b, h]), &device),
                Tensor::from_data(TensorData::new(hidden, [b, h]), &device),
            ));
            let mut ids = Vec::with_capacity(4);
            for g in gates {
                let bias_id = |l: &Linear| l.bias.as_ref().map(|p| p.id).ok_or_else(not_covered);
                ids.push([
                    g.input_transform.weight.id,
                    g.hidden_transform.weight.id,
                    bias_id(&g.input_transform)?,
                    bias_id(&g.hidden_transform)?,
                ]);
            }
            x = tape.outputs();
            let mask = if i + 1 < count {
                let mask = super::dropout::next_host_mask(&self.dropout, x.len(), &device);
                if let Some(m) = &mask {
                    x.iter_mut().zip(m).for_each(|(v, k)| *v *= k);
                }
                mask
            } else {
                None
            };
            layers.push(HostLayer {
                weights,
                tape,
                mask,
                ids,
            });
        }
        let h = x.len() / (b * t).max(1);
        let leaf = Tensor::<3>::from_data(TensorData::new(x, [b, t, h]), &device);
        // Evaluation (no autodiff) takes the same path for its forward and drops the window.
        let leaf = if device.is_autodiff() {
            leaf.require_grad()
        } else {
            leaf
        };
        let mut out = super::dropout::forward(&self.dropout, leaf.clone());
        if let Some(p) = &self.projection {
            out = super::precision::linear3(p, out);
        }
        let d = out.dims()[2];
        Ok(Some((
            out.reshape([b * t, d]),
            next,
            HostLstmWindow {
                inputs,
                input_mask,
                leaf,
                layers,
            },
        )))
    }
}

impl HostLstmWindow {
    /// The host half of the backward pass, from the gradients of the step's loss (`None` when
    /// the loss never read the hidden states); `model` and
    /// `w` as given to [`LstmLm::hidden_on_host`] (`w` composed again: the first backward pass
    /// consumed the graph it had).
    pub fn backward(
        self,
        grads: &Gradients,
        model: &LstmLm,
        w: Option<Tensor<2>>,
    ) -> Result<Option<HostLstmGradients>, HostLstmError> {
        let device = self.leaf.device();
        let [b, t, _] = self.leaf.dims();
        // A loss that never reads the hidden states leaves the leaf without a gradient, and
        // the layers and the lookup get none either.
        let Some(d) = self.leaf.grad(grads) else {
            return Ok(None);
        };
        let mut d = host_vec(d)?;
        let inner = |data: Vec<f32>, shape: Vec<usize>| {
            Tensor::<2>::from_data(TensorData::new(data, shape), &device).inner()
        };
        let mut weights = Vec::new();
        let mut biases = Vec::new();
        let mut layers = self.layers;
        while let Some(layer) = layers.pop() {
            let hd = layer.weights.hidden;
            let d_in = layer.weights.d_in;
            let g = lstm_host::layer_backward(&layer.weights, layer.tape, &d);
            // Gate k's columns of a side-by-side gradient `[rows, 4H]`.
            let block = |m: &[f32], rows: usize, k: usize| -> Vec<f32> {
                let mut out = Vec::with_capacity(rows * hd);
                for row in m.chunks_exact(4 * hd).take(rows) {
                    out.extend_from_slice(&row[k * hd..(k + 1) * hd]);
                }
                out
            };
            for (k, ids) in layer.ids.iter().enumerate() {
                weights.push((ids[0], inner(block(&g.w_in, d_in, k), vec![d_in, hd])));
                weights.push((ids[1], inner(block(&g.w_hidden, hd, k), vec![hd, hd])));
                let db = g.bias[k * hd..(k + 1) * hd].to_vec();
                for id in [ids[2], ids[3]] {
                    let v = Tensor::<1>::from_data(TensorData::new(db.clone(), [hd]), &device);
                    biases.push((id, v.inner()));
                }
            }
            d = g.x;
            // The layer below's output went through its dropout mask on the way in.
            if let Some(mask) = layers.last().and_then(|l| l.mask.as_ref()) {
                d.iter_mut().zip(mask).for_each(|(v, m)| *v *= m);
            }
        }
        let mut input = super::lookup(&model.embedding, model.spectral.as_ref(), self.inputs, w);
        let [_, _, d_in] = input.dims();
        if let Some(mask) = self.input_mask {
            input = input * Tensor::<3>::from_data(TensorData::new(mask, [b, t, d_in]), &device);
        }
        let dx = Tensor::<3>::from_data(TensorData::new(d, [b, t, d_in]), &device);
        Ok(Some(HostLstmGradients {
            surrogate: (input * dx).sum(),
            weights,
            biases,
        }))
    }
}

/// Cuts the graph behind a carried state (truncated BPTT).
pub fn detach_state(state: RecurrentState) -> RecurrentState {
    state
        .into_iter()
        .map(|s| LstmState::new(s.cell.detach(), s.hidden.detach()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeviceSpecExt;
    use burn::tensor::Distribution;

    /// A carried state of the wrong size (a checkpoint's recurrent state from another batch
    /// size) is an error from the host path, not a panic or a silent truncation.
    #[test]
    fn a_carried_state_of_the_wrong_size_is_an_error_on_the_host() {
        let device = conelab_core::model::DeviceSpec::Cpu
            .training_device()
            .expect("cpu");
        let cfg = LstmConfig {
            embed: 4,
            hidden: 5,
            layers: 2,
            bptt: 3,
            dropout: 0.0,
            init_range: 0.1,
            output_bias: true,
        };
        let model = LstmLm::new(&cfg, 11, &device);
        assert!(model.runs_on_host(&device));
        let inputs = Tensor::<2, Int>::from_data(
            TensorData::new(vec![1i64, 2, 3, 4, 5, 6], [2, 3]),
            &device,
        );
        let state = |batch: usize| {
            (0..2)
                .map(|_| {
                    LstmState::new(
                        Tensor::zeros([batch, 5], &device),
                        Tensor::zeros([batch, 5], &device),
                    )
                })
                .collect::<Vec<_>>()
        };
        let ok = model.hidden_on_host(inputs.clone(), Some(state(2)), None);
        assert!(matches!(ok, Ok(Some(_))));
        let wrong = model.hidden_on_host(inputs, Some(state(3)), None);
        assert!(
            matches!(&wrong, Err(HostLstmError::Shape(m)) if m.contains("carried state")),
            "{:?}",
            wrong.err()
        );
    }

    /// The side-by-side computation against burn's own loop: the same outputs, final state and
    /// gradients for every parameter and the input, from a carried state and from none.
    #[test]
    fn the_fused_lstm_matches_burns() {
        let device = conelab_core::model::DeviceSpec::Cpu
            .training_device()
            .expect("cpu");
        let layer = BurnLstmConfig::new(5, 7, true)
            .with_initializer(Initializer::Uniform {
                min: -0.4,
                max: 0.4,
            })
            .init(&device);
        let x = Tensor::<3>::random([3, 6, 5], Distribution::Uniform(-1.0, 1.0), &device);
        let carried = LstmState::new(
            Tensor::<2>::random([3, 7], Distribution::Uniform(-0.5, 0.5), &device),
            Tensor::<2>::random([3, 7], Distribution::Uniform(-0.5, 0.5), &device),
        );
        // A loss that weighs every output and both states differently.
        let weights = Tensor::<3>::random([3, 6, 7], Distribution::Default, &device);
        for state in [None, Some(carried)] {
            let run = |fused: bool| {
                let x = x.clone().detach().require_grad();
                let (y, s) = if fused {
                    lstm_forward(&layer, x.clone(), state.clone())
                } else {
                    layer.forward(x.clone(), state.clone())
                };
                let values: Vec<f32> = Tensor::cat(
                    vec![y.clone().reshape([3, 42]), s.cell.clone(), s.hidden.clone()],
                    1,
                )
                .try_into_vec_as::<f32>()
                .expect("values");
                let loss =
                    (y * weights.clone()).sum() + s.cell.sum().mul_scalar(0.3) + s.hidden.sum();
                let grads = loss.backward();
                let grad = |t: Tensor<2>| {
                    t.grad(&grads)
                        .expect("grad")
                        .try_into_vec_as::<f32>()
                        .expect("grad")
                };
                let g_w = grad(
                    layer
                        .forget_gate
                        .as_ref()
                        .expect("forget")
                        .hidden_transform
                        .weight
                        .val(),
                );
                let g_b = layer
                    .cell_gate
                    .input_transform
                    .bias
                    .as_ref()
                    .expect("bias")
                    .val()
                    .grad(&grads)
                    .expect("grad")
                    .try_into_vec_as::<f32>()
                    .expect("grad");
                let g_x = x
                    .grad(&grads)
                    .expect("grad")
                    .try_into_vec_as::<f32>()
                    .expect("grad");
                (values, [g_w, g_b, g_x].concat())
            };
            let (burn, fused) = (run(false), run(true));
            for (what, a, b) in [
                ("values", &burn.0, &fused.0),
                ("gradients", &burn.1, &fused.1),
            ] {
                let worst = a
                    .iter()
                    .zip(b)
                    .map(|(p, q)| (p - q).abs())
                    .fold(0f32, f32::max);
                assert!(worst < 1e-5, "{what}: max difference {worst}");
            }
            assert!(
                burn.1.iter().any(|g| g.abs() > 1e-3),
                "the gradients are not all zero"
            );
        }
    }

    /// On LibTorch the layer is one node (`aten::lstm` under torch's autograd): the same output
    /// and final state as burn's composed ops, and the same gradients of the input, of every
    /// one of the sixteen gate parameters and of the initial state, within 1e-5; and the node
    /// ran (one `aten::lstm` in the step, where the composed path dispatches none).
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    #[test]
    fn the_libtorch_node_matches_the_composed_layer() {
        use burn::module::{Module, ModuleVisitor, Param};
        let device = conelab_core::model::DeviceSpec::LibtorchCpu
            .training_device()
            .expect("libtorch");
        let layer = BurnLstmConfig::new(5, 7, true)
            .with_initializer(Initializer::Uniform {
                min: -0.4,
                max: 0.4,
            })
            .init(&device);
        let wave = |n: usize, salt: f32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i as f32) * 0.37 + salt).sin() * 0.8)
                .collect()
        };
        let x0 = Tensor::<3>::from_data(TensorData::new(wave(90, 0.1), [3, 6, 5]), &device);
        let h0 = Tensor::<2>::from_data(TensorData::new(wave(21, 0.7), [3, 7]), &device);
        let c0 = Tensor::<2>::from_data(TensorData::new(wave(21, 1.3), [3, 7]), &device);
        let weights = Tensor::<3>::from_data(TensorData::new(wave(126, 2.0), [3, 6, 7]), &device);
        struct Grads<'a>(&'a burn::tensor::Gradients, Vec<f32>, usize);
        impl ModuleVisitor for Grads<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let g = param
                    .val()
                    .grad(self.0)
                    .expect("every parameter has a gradient");
                self.1.extend(g.try_into_vec_as::<f32>().expect("grad"));
                self.2 += 1;
            }
        }
        for carried in [false, true] {
            let run = |fused: bool| {
                let x = x0.clone().detach().require_grad();
                let (h, c) = (
                    h0.clone().detach().require_grad(),
                    c0.clone().detach().require_grad(),
                );
                let state = carried.then(|| LstmState::new(c.clone(), h.clone()));
                let _turn = crate::aten::tests::turn();
                let ((y, s), ops) = crate::aten::count_ops(|| {
                    if fused {
                        lstm_forward(&layer, x.clone(), state)
                    } else {
                        lstm_composed(&layer, x.clone(), state)
                    }
                })
                .expect("counted");
                assert_eq!(
                    ops.get("aten::lstm").copied().unwrap_or(0),
                    u64::from(fused),
                    "the path taken (fused: {fused})"
                );
                let values: Vec<f32> = Tensor::cat(
                    vec![y.clone().reshape([3, 42]), s.cell.clone(), s.hidden.clone()],
                    1,
                )
                .try_into_vec_as::<f32>()
                .expect("values");
                let grads = (y * weights.clone()).sum().backward();
                let mut g = Grads(&grads, Vec::new(), 0);
                layer.visit(&mut g);
                assert_eq!(g.2, 16, "four gates × (two weights, two biases)");
                let mut all = g.1;
                all.extend(
                    x.grad(&grads)
                        .expect("∂x")
                        .try_into_vec_as::<f32>()
                        .expect("∂x"),
                );
                if carried {
                    for t in [&h, &c] {
                        all.extend(
                            t.grad(&grads)
                                .expect("∂state")
                                .try_into_vec_as::<f32>()
                                .expect("∂state"),
                        );
                    }
                }
                (values, all)
            };
            let (composed, fused) = (run(false), run(true));
            for (what, a, b) in [
                ("values", &composed.0, &fused.0),
                ("gradients", &composed.1, &fused.1),
            ] {
                assert_eq!(a.len(), b.len(), "{what}");
                let worst = a
                    .iter()
                    .zip(b)
                    .map(|(p, q)| (p - q).abs())
                    .fold(0f32, f32::max);
                assert!(
                    worst < 1e-5,
                    "{what} (carried state: {carried}): max difference {worst}"
                );
            }
            assert!(
                composed.1.iter().any(|g| g.abs() > 1e-3),
                "the gradients are not all zero"
            );
        }
    }

    /// Without autodiff (evaluation) the layer is the same kernel and the same values.
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    #[test]
    fn the_libtorch_layer_evaluates_as_the_composed_one() {
        let device = conelab_core::model::DeviceSpec::LibtorchCpu
            .device()
            .expect("libtorch");
        let layer = BurnLstmConfig::new(4, 6, true)
            .with_initializer(Initializer::Uniform {
                min: -0.5,
                max: 0.5,
            })
            .init(&device);
        let x = Tensor::<3>::from_data(
            TensorData::new(
                (0..40)
                    .map(|i| ((i as f32) * 0.3).cos())
                    .collect::<Vec<_>>(),
                [2, 5, 4],
            ),
            &device,
        );
        let _turn = crate::aten::tests::turn();
        let ((y, s), ops) =
            crate::aten::count_ops(|| lstm_forward(&layer, x.clone(), None)).expect("counted");
        assert_eq!(
            ops.get("aten::lstm").copied(),
            Some(1),
            "the fused kernel ran"
        );
        let (y2, s2) = lstm_composed(&layer, x, None);
        let flat = |a: Tensor<3>, s: LstmState<2>| -> Vec<f32> {
            Tensor::cat(vec![a.reshape([2, 30]), s.cell, s.hidden], 1)
                .try_into_vec_as::<f32>()
                .expect("values")
        };
        let (a, b) = (flat(y, s), flat(y2, s2));
        let worst = a
            .iter()
            .zip(&b)
            .map(|(p, q)| (p - q).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-5, "max difference {worst}");
    }

    /// The stacked gate weights are each gate's transposed, one under the other, and each gate's
    /// gradient is its block of the output's gradient transposed, handed over dense (so the
    /// fused AdamW copies none of them); written out here element by element.
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    #[test]
    #[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
    fn stacked_gates_and_their_dense_gradients() {
        use burn::backend::LibTorch;
        let device = conelab_core::model::DeviceSpec::LibtorchCpu
            .training_device()
            .expect("libtorch");
        let (d_in, h) = (3, 2);
        let ws: [Tensor<2>; 4] = std::array::from_fn(|_| {
            Tensor::<2>::random([d_in, h], Distribution::Default, &device).require_grad()
        });
        let r = Tensor::<2>::random([4 * h, d_in], Distribution::Default, &device);
        let stacked = gates_stacked(ws.clone()).expect("LibTorch autodiff tensors");
        let values = stacked.clone().try_into_vec_as::<f32>().expect("read");
        let grads = (stacked * r.clone()).sum().backward();
        let rv = r.try_into_vec_as::<f32>().expect("read");
        for (k, w) in ws.iter().enumerate() {
            let wv = w.clone().try_into_vec_as::<f32>().expect("read");
            let g = w.grad(&grads).expect("a gradient");
            let dense = g
                .clone()
                .try_into_primitive::<LibTorch>()
                .expect("LibTorch")
                .tensor
                .is_contiguous();
            assert!(dense, "gate {k}'s gradient is not dense");
            let gv = g.try_into_vec_as::<f32>().expect("read");
            for i in 0..d_in {
                for j in 0..h {
                    // Row k·H + j, column i of the stacked matrix is w_k[i, j].
                    let at = (k * h + j) * d_in + i;
                    assert_eq!(values[at], wv[i * h + j], "stacked ({k}, {i}, {j})");
                    assert_eq!(gv[i * h + j], rv[at], "gradient ({k}, {i}, {j})");
                }
            }
        }
    }
}
