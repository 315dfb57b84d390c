//! Decoder-only Transformer LM (GPT-2 shaped): learned positions, pre-LN blocks with causal
//! self-attention and a GELU MLP, a final LayerNorm; the output layer is tied to the embedding.

use burn::module::Param;
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, Gelu, Initializer, LayerNorm,
    LayerNormConfig, Linear, LinearConfig,
};
use burn::prelude::*;

use super::spectral::SpectralEmbedding;
use conelab_core::model::TransformerConfig;

#[derive(Module, Debug)]
pub struct TransformerLm {
    pub embedding: Embedding,
    pub positions: Param<Tensor<2>>,
    pub blocks: Vec<Block>,
    pub ln_f: LayerNorm,
    pub output_bias: Option<Param<Tensor<1>>>,
    pub dropout: Dropout,
    /// W = U·diag(σ)·Vᵀ while spectrum control is on; `embedding.weight` is then unused.
    pub spectral: Option<SpectralEmbedding>,
}

#[derive(Module, Debug)]
pub struct Block {
    pub ln_attn: LayerNorm,
    pub qkv: Linear,
    pub proj: Linear,
    pub ln_mlp: LayerNorm,
    pub fc: Linear,
    pub fc_out: Linear,
    pub gelu: Gelu,
    pub dropout: Dropout,
    pub heads: usize,
}

fn linear(d_in: usize, d_out: usize, std: f64, device: &Device) -> Linear {
    LinearConfig::new(d_in, d_out)
        .with_initializer(Initializer::Normal { mean: 0.0, std })
        .init(device)
        // GPT-2 zero-initialises biases; burn's initializer would draw them from N(0, std) too.
        .with_zero_bias(d_out, device)
}

trait ZeroBias {
    fn with_zero_bias(self, d_out: usize, device: &Device) -> Self;
}

impl ZeroBias for Linear {
    fn with_zero_bias(mut self, d_out: usize, device: &Device) -> Self {
        if self.bias.is_some() {
            self.bias = Some(Param::from_tensor(Tensor::zeros([d_out], device)));
        }
        self
    }
}

impl TransformerLm {
    pub fn new(cfg: &TransformerConfig, vocab: usize, device: &Device) -> Self {
        let normal = Initializer::Normal {
            mean: 0.0,
            std: cfg.init_std,
        };
        let d = cfg.d_model;
        // GPT-2: residual projections scaled by 1/√(2·layers) so the residual stream's variance
        // does not grow with depth.
        let residual_std = cfg.init_std / (2.0 * cfg.layers as f64).sqrt();
        let blocks = (0..cfg.layers)
            .map(|_| Block {
                ln_attn: LayerNormConfig::new(d).init(device),
                qkv: linear(d, 3 * d, cfg.init_std, device),
                proj: linear(d, d, residual_std, device),
                ln_mlp: LayerNormConfig::new(d).init(device),
                fc: linear(d, cfg.d_ff, cfg.init_std, device),
                fc_out: linear(cfg.d_ff, d, residual_std, device),
                gelu: Gelu::new(),
                dropout: DropoutConfig::new(cfg.dropout).init(),
                heads: cfg.heads,
            })
            .collect();
        Self {
            embedding: EmbeddingConfig::new(vocab, d)
                .with_initializer(normal.clone())
                .init(device),
            positions: normal.init([cfg.context, d], device),
            blocks,
            ln_f: LayerNormConfig::new(d).init(device),
            output_bias: cfg
                .output_bias
                .then(|| Param::from_tensor(Tensor::zeros([vocab], device))),
            dropout: DropoutConfig::new(cfg.dropout).init(),
            spectral: None,
        }
    }

    /// Hidden states before the output layer, `[batch·time, d]`. `w` is the tied matrix when the
    /// caller has it already (spectrum control computes it once per step).
    pub fn hidden(&self, inputs: Tensor<2, Int>, w: Option<Tensor<2>>) -> Tensor<2> {
        let [b, t] = inputs.dims();
        let pos = self.positions.val().narrow(0, 0, t).unsqueeze::<3>();
        let embedded = super::lookup(&self.embedding, self.spectral.as_ref(), inputs, w);
        let x = super::dropout::forward(&self.dropout, embedded + pos);
        let mask = Tensor::<2, Bool>::tril_mask([t, t], 0, &x.device()).unsqueeze::<4>();
        // The residual stream as [batch·time, d] rows: each linear layer is then one matrix
        // product, and its weight gradient one product over all rows, where on [b, t, d] burn
        // makes a batched product per sequence and sums b weight gradients (qkv's forward and
        // backward: 32 → 18 ms on `small`, burn-flex).
        let d = x.dims()[2];
        let mut x = x.reshape([b * t, d]);
        for block in &self.blocks {
            x = block.forward(x, [b, t], mask.clone());
        }
        super::layer_norm::layer_norm(&self.ln_f, x)
    }
}

impl Block {
    /// One block over the rows of `[b, t]` sequences, `x` as `[b·t, d]`.
    fn forward(&self, x: Tensor<2>, [b, t]: [usize; 2], causal_mask: Tensor<4, Bool>) -> Tensor<2> {
        let d = x.dims()[1];
        let h = self.heads;
        let dh = d / h;
        let (linear, linear_low) = (super::precision::linear, super::precision::linear_low);
        // In bf16 (model/precision.rs), q, k and v, attention's output and the MLP's hidden
        // layer stay in bf16 between their products, as autocast keeps them.
        let qkv = linear_low(
            &self.qkv,
            super::layer_norm::layer_norm(&self.ln_attn, x.clone()),
        )
        .reshape([b, t, 3, h, dh])
        .permute([2, 0, 3, 1, 4]); // [3, b, h, t, dh]
        let q = qkv.clone().narrow(0, 0, 1).reshape([b, h, t, dh]);
        let k = qkv.clone().narrow(0, 1, 1).reshape([b, h, t, dh]);
        let v = qkv.narrow(0, 2, 1).reshape([b, h, t, dh]);
        let ctx = super::attention::causal_attention(q, k, v, &self.dropout, causal_mask)
            .swap_dims(1, 2)
            .reshape([b * t, d]);
        let x = x + super::dropout::forward(&self.dropout, linear(&self.proj, ctx));
        let mlp = linear(
            &self.fc_out,
            super::gelu::forward(
                &self.gelu,
                linear_low(
                    &self.fc,
                    super::layer_norm::layer_norm(&self.ln_mlp, x.clone()),
                ),
            ),
        );
        x + super::dropout::forward(&self.dropout, mlp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeviceSpecExt;
    use conelab_core::model::DeviceSpec;

    fn model(device: &Device) -> TransformerLm {
        let cfg = TransformerConfig {
            d_model: 16,
            layers: 2,
            heads: 2,
            d_ff: 32,
            context: 6,
            dropout: 0.1,
            // Large enough that every position's state depends visibly on its inputs.
            init_std: 0.3,
            output_bias: false,
        };
        device.seed(7);
        TransformerLm::new(&cfg, 50, device)
    }

    fn hidden(model: &TransformerLm, tokens: &[i64], b: usize, device: &Device) -> Vec<f32> {
        let t = tokens.len() / b;
        let inputs = Tensor::<2, Int>::from_data(TensorData::new(tokens.to_vec(), [b, t]), device);
        model
            .hidden(inputs, None)
            .try_into_vec_as::<f32>()
            .expect("hidden")
    }

    /// The block works on [batch·time, d] rows: a sequence's states do not depend on the other
    /// sequences of its batch, and a position's state depends on no later token (causal mask).
    #[test]
    fn sequences_stay_apart_and_positions_see_only_the_past() {
        // No autodiff: dropout is off, as in evaluation.
        let device = DeviceSpec::Cpu.device().expect("flex");
        let model = model(&device);
        let (t, d) = (6, 16);
        let batch: Vec<i64> = vec![1, 5, 9, 2, 7, 3, 4, 4, 8, 11, 0, 6, 13, 2, 2, 9, 30, 41];
        let together = hidden(&model, &batch, 3, &device);
        for s in 0..3 {
            let alone = hidden(&model, &batch[s * t..(s + 1) * t], 1, &device);
            for (i, (a, b)) in alone.iter().zip(&together[s * t * d..]).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5,
                    "sequence {s}, value {i}: {a} against {b}"
                );
            }
        }
        // Change the token at position 3 of the middle sequence.
        let mut changed = batch.clone();
        changed[t + 3] = 17;
        let after = hidden(&model, &changed, 3, &device);
        for s in 0..3 {
            for p in 0..t {
                let row = (s * t + p) * d;
                let moved = (0..d)
                    .map(|j| (after[row + j] - together[row + j]).abs())
                    .fold(0f32, f32::max);
                if s == 1 && p >= 3 {
                    assert!(moved > 1e-3, "position {p} sees the change ({moved})");
                } else {
                    assert!(moved <= 1e-6, "sequence {s}, position {p} moved {moved}");
                }
            }
        }
    }
}
