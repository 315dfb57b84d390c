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
            let (y, s) = layer.forward(x, s);
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

/// Cuts the graph behind a carried state (truncated BPTT).
pub fn detach_state(state: RecurrentState) -> RecurrentState {
    state
        .into_iter()
        .map(|s| LstmState::new(s.cell.detach(), s.hidden.detach()))
        .collect()
}
