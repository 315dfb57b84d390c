//! LSTM language model with tied embeddings (Zaremba et al. 2014; AWD-LSTM sized preset): stacked
//! LSTM layers with dropout between them, a projection back to the embedding width when the hidden
//! size differs, and the state carried across windows for truncated BPTT.

use burn::module::Param;
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, Initializer, Linear, LinearConfig, Lstm,
    LstmConfig as BurnLstmConfig, LstmState,
};
use burn::prelude::*;

use super::config::LstmConfig;
use super::spectral::SpectralEmbedding;

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
            x = p.forward(x);
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
    use burn::nn::activation::Activation;
    use burn::tensor::activation::sigmoid;
    let standard = layer.batch_first
        && !layer.reverse
        && layer.clip.is_none()
        && !layer.input_forget
        && matches!(layer.gate_activation, Activation::Sigmoid(_))
        && matches!(layer.cell_activation, Activation::Tanh(_))
        && matches!(layer.hidden_activation, Activation::Tanh(_));
    let Some(forget) = layer.forget_gate.as_ref().filter(|_| standard) else {
        return layer.forward(x, state);
    };
    // Gate order in the side-by-side matrices: input, forget, output, cell.
    let gates = [
        &layer.input_gate,
        forget,
        &layer.output_gate,
        &layer.cell_gate,
    ];
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
    let mut projected = x.reshape([b * t, d_in]).matmul(w_in);
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
            + hidden.matmul(w_hidden.clone());
        let gate = |k: usize| pre.clone().narrow(1, k * h_dim, h_dim);
        let (input, forget, output) = (sigmoid(gate(0)), sigmoid(gate(1)), sigmoid(gate(2)));
        let candidate = gate(3).tanh();
        cell = forget * cell + input * candidate;
        hidden = output * cell.clone().tanh();
        outputs.push(hidden.clone());
    }
    (Tensor::stack(outputs, 1), LstmState::new(cell, hidden))
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
    use burn::tensor::Distribution;

    /// The side-by-side computation against burn's own loop: the same outputs, final state and
    /// gradients for every parameter and the input, from a carried state and from none.
    #[test]
    fn the_fused_lstm_matches_burns() {
        let device = crate::model::DeviceSpec::Cpu
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
}
