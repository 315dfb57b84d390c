//! Encoder–decoder translation Transformer (fairseq's `transformer`) with three-way tying: one
//! matrix W `[N, d]` is the encoder's input embedding, the decoder's input embedding and the
//! decoder's output layer (a joined source–target vocabulary), so that its degeneration is seen
//! from all three uses at once.
//!
//! Conventions, as fairseq's:
//! - tokens are embedded as √d · W[y] plus a sinusoidal position, then dropout;
//! - positions are fairseq's `SinusoidalPositionalEmbedding` with its dictionary's padding index
//!   (1): the k-th non-`<pad>` token of a sequence (k = 1, 2, …, counted as fairseq's
//!   `make_positions` does, so that left- and right-padded sequences embed alike) gets row
//!   k + 1 of the table, sin(p·f_j) on the first half of the dimensions and cos(p·f_j) on the
//!   second, f_j = 10000^(−j/(d/2 − 1)); a `<pad>` token gets no position (zeros); at most
//!   `max_positions` non-pad tokens a sequence;
//! - `<pad>` is masked as a key in every attention (encoder self-attention, decoder
//!   self-attention, cross-attention), the decoder's self-attention is causal;
//! - post-LN (fairseq's default: x = LN(x + dropout(f(x)))) or pre-LN
//!   (x = x + dropout(f(LN(x))), with a final norm after each stack);
//! - feed-forward layers fc2(dropout_act(ReLU(fc1(x))));
//! - the output layer is hidden · Wᵀ (+ b), computed as the language models compute it
//!   ([`super::output::tied_logits`]).
//!
//! The layers work on rows `[b·t, d]`, as [`super::transformer`]'s blocks do, through the same
//! precision-aware products, layer norm and dropout. [`TranslationTransformer::decode_step`]
//! decodes one token at a time from a [`DecoderCache`] (each layer's self-attention keys and
//! values so far, the cross-attention keys and values computed once from the encoder's
//! output); greedy and beam search are in [`decode`].

pub mod decode;

use burn::module::Param;
use burn::nn::{Dropout, DropoutConfig, Embedding, LayerNorm, LayerNormConfig, Linear};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation::{log_softmax, relu, softmax};

use super::spectral::SpectralEmbedding;
use conelab_core::model::{NormPlacement, TranslationConfig};

pub use decode::{BeamOptions, BeamStop, Hypothesis};

/// fairseq's dictionary puts `<pad>` at index 1, and its sinusoidal positions count from the
/// row after it: the k-th token of a sequence gets row k + 1 (the angle (k + 1)·f_j).
pub const POSITION_PADDING_IDX: usize = 1;

/// The score a masked key gets before the softmax: exp of it, less any real score, is 0 in
/// f32, as −∞'s would be, but a query whose keys are all masked (a sequence of nothing but
/// `<pad>`) averages them instead of turning into NaN (and NaN gradients).
const MASKED: f32 = -1.0e9;

#[derive(Module, Debug)]
pub struct TranslationTransformer {
    /// W, `[N, d]`: the encoder's and the decoder's input embedding and the output layer.
    pub embedding: Embedding,
    pub encoder: Vec<EncoderLayer>,
    pub decoder: Vec<DecoderLayer>,
    /// The final norms of pre-LN's stacks (`None` post-LN).
    pub encoder_norm: Option<LayerNorm>,
    pub decoder_norm: Option<LayerNorm>,
    /// Declared after every other numbered parameter, as [`super::LanguageModel::add_output_bias`]
    /// expects.
    pub output_bias: Option<Param<Tensor<1>>>,
    /// Dropout on the embedded inputs.
    pub dropout: Dropout,
    /// W = U·diag(σ)·Vᵀ while spectrum control is on; `embedding.weight` is then unused.
    pub spectral: Option<SpectralEmbedding>,
    /// The `<pad>` token: masked as a key, given no position, never generated.
    pub pad: usize,
    pub heads: usize,
    pub max_positions: usize,
}

/// Self-attention: q, k and v in one product, then the output projection.
#[derive(Module, Debug)]
pub struct SelfAttention {
    pub qkv: Linear,
    pub out: Linear,
}

/// Cross-attention: q from the decoder, k and v (one product) from the encoder's output.
#[derive(Module, Debug)]
pub struct CrossAttention {
    pub q: Linear,
    pub kv: Linear,
    pub out: Linear,
}

#[derive(Module, Debug)]
pub struct FeedForward {
    pub fc1: Linear,
    pub fc2: Linear,
}

#[derive(Module, Debug)]
pub struct EncoderLayer {
    pub self_attn: SelfAttention,
    pub ln_self: LayerNorm,
    pub ffn: FeedForward,
    pub ln_ffn: LayerNorm,
    pub dropouts: Dropouts,
    pub heads: usize,
    pub pre_norm: bool,
}

#[derive(Module, Debug)]
pub struct DecoderLayer {
    pub self_attn: SelfAttention,
    pub ln_self: LayerNorm,
    pub cross: CrossAttention,
    pub ln_cross: LayerNorm,
    pub ffn: FeedForward,
    pub ln_ffn: LayerNorm,
    pub dropouts: Dropouts,
    pub heads: usize,
    pub pre_norm: bool,
}

/// A layer's three dropouts: on sublayer outputs, on attention weights, after the ReLU.
#[derive(Module, Debug)]
pub struct Dropouts {
    pub output: Dropout,
    pub attention: Dropout,
    pub activation: Dropout,
}

/// The encoder's output: the memory `[b, s, d]` the decoder attends to and the source's
/// `<pad>` mask `[b, s]` (true at pad).
#[derive(Clone, Debug)]
pub struct Encoded {
    pub memory: Tensor<3>,
    pub pad: Tensor<2, Bool>,
}

/// What incremental decoding keeps between steps, one row per hypothesis: each decoder layer's
/// self-attention keys and values of the tokens fed so far and its cross-attention keys and
/// values (computed once from the encoder's output), the masks of the keys, and how many
/// non-pad tokens each row has been fed (its next position).
#[derive(Clone, Debug)]
pub struct DecoderCache {
    layers: Vec<LayerCache>,
    /// `[rows, 1, 1, s]`, true at the source's pad.
    src_pad: Tensor<4, Bool>,
    /// `[rows, 1, 1, steps]`, 1 where a fed token was `<pad>`, else 0 (burn-flex concatenates
    /// no boolean tensors); `None` before the first step.
    self_pad: Option<Tensor<4>>,
    /// Non-pad tokens fed so far, `[rows]`.
    fed: Tensor<1>,
    /// W as the steps use it (composed once under spectrum control) and the output bias.
    w: Tensor<2>,
    bias: Option<Tensor<1>>,
    steps: usize,
}

#[derive(Clone, Debug)]
struct LayerCache {
    /// `[rows, heads, steps, d/heads]`; `None` before the first step.
    self_kv: Option<(Tensor<4>, Tensor<4>)>,
    /// `[rows, heads, s, d/heads]`.
    cross_k: Tensor<4>,
    cross_v: Tensor<4>,
}

impl DecoderCache {
    /// Keeps the rows `indices` (of this cache's rows, in that order, repeats allowed): beam
    /// search's choice of which hypotheses continue, and a batch shrinking as sentences finish.
    pub fn reorder(&mut self, indices: Tensor<1, Int>) {
        let pick4 = |t: &Tensor<4>| t.clone().select(0, indices.clone());
        for layer in &mut self.layers {
            if let Some((k, v)) = &layer.self_kv {
                layer.self_kv = Some((pick4(k), pick4(v)));
            }
            layer.cross_k = pick4(&layer.cross_k);
            layer.cross_v = pick4(&layer.cross_v);
        }
        self.src_pad = self.src_pad.clone().select(0, indices.clone());
        self.self_pad = self.self_pad.take().map(|m| m.select(0, indices.clone()));
        self.fed = self.fed.clone().select(0, indices);
    }

    /// Rows (hypotheses) in the cache.
    pub fn rows(&self) -> usize {
        self.fed.dims()[0]
    }

    /// Tokens fed so far.
    pub fn steps(&self) -> usize {
        self.steps
    }
}

/// How a linear layer's weight and bias are drawn.
#[derive(Clone, Copy)]
enum Draw {
    /// Weight U(−a, a), bias U(−c, c) (`None`: zero).
    Uniform(f64, Option<f64>),
    /// Weight N(0, σ), bias zero.
    Normal(f64),
}

fn linear(d_in: usize, d_out: usize, draw: Draw, device: &Device) -> Linear {
    let uniform = |a: f64| Distribution::Uniform(-a, a);
    let (weight, bias) = match draw {
        Draw::Uniform(a, c) => (uniform(a), c.map(uniform)),
        Draw::Normal(std) => (Distribution::Normal(0.0, std), None),
    };
    Linear {
        weight: Param::from_tensor(Tensor::random([d_in, d_out], weight, device)),
        bias: Some(Param::from_tensor(match bias {
            Some(b) => Tensor::random([d_out], b, device),
            None => Tensor::zeros([d_out], device),
        })),
    }
}

/// The draws of fairseq's `TransformerModel` (or N(0, σ) for everything).
struct Draws {
    /// q, k, v: `xavier_uniform_(gain = 1/√2)` on each d×d projection, PyTorch's default bias.
    qkv: Draw,
    /// The attention's output projection: `xavier_uniform_`, bias zero.
    attn_out: Draw,
    /// fc1 and fc2: PyTorch's `nn.Linear` default, U(±1/√fan_in) for weight and bias.
    fc1: Draw,
    fc2: Draw,
    /// W: N(0, 1/√d).
    embedding_std: f64,
}

impl Draws {
    fn new(cfg: &TranslationConfig) -> Self {
        let (d, ff) = (cfg.d_model as f64, cfg.d_ff as f64);
        match cfg.init_std {
            Some(std) => Draws {
                qkv: Draw::Normal(std),
                attn_out: Draw::Normal(std),
                fc1: Draw::Normal(std),
                fc2: Draw::Normal(std),
                embedding_std: std,
            },
            None => Draws {
                // Xavier's bound g·√(6/(fan_in + fan_out)) on a d×d matrix.
                qkv: Draw::Uniform((0.5f64).sqrt() * (3.0 / d).sqrt(), Some(1.0 / d.sqrt())),
                attn_out: Draw::Uniform((3.0 / d).sqrt(), None),
                fc1: Draw::Uniform(1.0 / d.sqrt(), Some(1.0 / d.sqrt())),
                fc2: Draw::Uniform(1.0 / ff.sqrt(), Some(1.0 / ff.sqrt())),
                embedding_std: 1.0 / d.sqrt(),
            },
        }
    }
}

impl Dropouts {
    fn new(cfg: &TranslationConfig) -> Self {
        Dropouts {
            output: DropoutConfig::new(cfg.dropout).init(),
            attention: DropoutConfig::new(cfg.attention_dropout).init(),
            activation: DropoutConfig::new(cfg.activation_dropout).init(),
        }
    }
}

impl TranslationTransformer {
    /// A freshly initialised model over a vocabulary of `vocab` (source and target joined) whose
    /// `<pad>` is `pad`; parameter values come from the device's RNG (seed it first). W's
    /// `<pad>` row starts at zero, as fairseq's.
    pub fn new(cfg: &TranslationConfig, vocab: usize, pad: usize, device: &Device) -> Self {
        assert!(
            pad < vocab,
            "<pad> {pad} is outside the vocabulary of {vocab}"
        );
        let d = cfg.d_model;
        let draws = Draws::new(cfg);
        let pre_norm = cfg.norm == NormPlacement::Pre;
        let ln = || LayerNormConfig::new(d).init(device);
        let self_attn = || SelfAttention {
            qkv: linear(d, 3 * d, draws.qkv, device),
            out: linear(d, d, draws.attn_out, device),
        };
        let ffn = || FeedForward {
            fc1: linear(d, cfg.d_ff, draws.fc1, device),
            fc2: linear(cfg.d_ff, d, draws.fc2, device),
        };
        let encoder = (0..cfg.encoder_layers)
            .map(|_| EncoderLayer {
                self_attn: self_attn(),
                ln_self: ln(),
                ffn: ffn(),
                ln_ffn: ln(),
                dropouts: Dropouts::new(cfg),
                heads: cfg.heads,
                pre_norm,
            })
            .collect();
        let decoder = (0..cfg.decoder_layers)
            .map(|_| DecoderLayer {
                self_attn: self_attn(),
                ln_self: ln(),
                cross: CrossAttention {
                    q: linear(d, d, draws.qkv, device),
                    kv: linear(d, 2 * d, draws.qkv, device),
                    out: linear(d, d, draws.attn_out, device),
                },
                ln_cross: ln(),
                ffn: ffn(),
                ln_ffn: ln(),
                dropouts: Dropouts::new(cfg),
                heads: cfg.heads,
                pre_norm,
            })
            .collect();
        let keep: Vec<f32> = (0..vocab)
            .map(|v| if v == pad { 0.0 } else { 1.0 })
            .collect();
        let w = Tensor::<2>::random(
            [vocab, d],
            Distribution::Normal(0.0, draws.embedding_std),
            device,
        ) * Tensor::<2>::from_data(TensorData::new(keep, [vocab, 1]), device);
        Self {
            embedding: Embedding {
                weight: Param::from_tensor(w),
            },
            encoder,
            decoder,
            encoder_norm: pre_norm.then(ln),
            decoder_norm: pre_norm.then(ln),
            output_bias: cfg
                .output_bias
                .then(|| Param::from_tensor(Tensor::zeros([vocab], device))),
            dropout: DropoutConfig::new(cfg.dropout).init(),
            spectral: None,
            pad,
            heads: cfg.heads,
            max_positions: cfg.max_positions,
        }
    }

    /// The tied matrix W, `[N, d]` (composed from U, σ, V under spectrum control).
    pub fn embedding_weight(&self) -> Tensor<2> {
        match &self.spectral {
            Some(s) => s.weight(),
            None => self.embedding.weight.val(),
        }
    }

    /// Vocabulary size N.
    pub fn vocab(&self) -> usize {
        self.embedding.weight.dims()[0]
    }

    /// The encoder's output for sources `src` `[b, s]` whose `<pad>` positions `src_pad` marks
    /// (true at pad).
    pub fn encode(&self, src: Tensor<2, Int>, src_pad: Tensor<2, Bool>) -> Encoded {
        self.encode_with(src, src_pad, None)
    }

    /// [`Self::encode`] with W given (`w`: composed once a step under spectrum control, or a
    /// constant copy to keep this use of W out of its gradient).
    pub fn encode_with(
        &self,
        src: Tensor<2, Int>,
        src_pad: Tensor<2, Bool>,
        w: Option<Tensor<2>>,
    ) -> Encoded {
        let [b, s] = src.dims();
        let mut x = self.embed(src, src_pad.clone(), w);
        let key_pad = src_pad.clone().reshape([b, 1, 1, s]);
        for layer in &self.encoder {
            x = layer.forward(x, [b, s], key_pad.clone());
        }
        if let Some(ln) = &self.encoder_norm {
            x = super::layer_norm::layer_norm(ln, x);
        }
        let d = x.dims()[1];
        Encoded {
            memory: x.reshape([b, s, d]),
            pad: src_pad,
        }
    }

    /// The decoder's hidden states for the teacher-forced inputs `tgt_in` `[b, t]` (BOS and
    /// the target but its last token), as rows `[b·t, d]` (row `i·t + j`: sentence i, position
    /// j); logits are hidden · Wᵀ (+ b), [`Self::logits`]. `w` as in [`Self::encode_with`].
    pub fn decode_hidden(
        &self,
        encoded: &Encoded,
        tgt_in: Tensor<2, Int>,
        w: Option<Tensor<2>>,
    ) -> Tensor<2> {
        let [b, t] = tgt_in.dims();
        let [_, s, d] = encoded.memory.dims();
        let tgt_pad = tgt_in.clone().equal_elem(self.pad as i64);
        let mut x = self.embed(tgt_in, tgt_pad.clone(), w);
        let device = x.device();
        let masks = DecoderMasks {
            causal: Some(Tensor::<2, Bool>::tril_mask([t, t], 0, &device).unsqueeze::<4>()),
            self_pad: tgt_pad.reshape([b, 1, 1, t]),
            src_pad: encoded.pad.clone().reshape([b, 1, 1, s]),
        };
        let memory = encoded.memory.clone().reshape([b * s, d]);
        for layer in &self.decoder {
            let (k, v) = layer.cross_kv(memory.clone(), [b, s]);
            x = layer.forward(x, [b, t], None, (k, v), &masks).0;
        }
        match &self.decoder_norm {
            Some(ln) => super::layer_norm::layer_norm(ln, x),
            None => x,
        }
    }

    /// Decoder hidden states `[b·t, d]` from the sources and the teacher-forced targets in one
    /// call: [`Self::encode_with`] then [`Self::decode_hidden`] with the same W.
    pub fn hidden(
        &self,
        src: Tensor<2, Int>,
        src_pad: Tensor<2, Bool>,
        tgt_in: Tensor<2, Int>,
        w: Option<Tensor<2>>,
    ) -> Tensor<2> {
        let encoded = self.encode_with(src, src_pad, w.clone());
        self.decode_hidden(&encoded, tgt_in, w)
    }

    /// Logits through the tied output layer, hidden · Wᵀ (+ b).
    pub fn logits(&self, hidden: Tensor<2>) -> Tensor<2> {
        self.logits_with(hidden, None)
    }

    /// [`Self::logits`] with W given.
    pub fn logits_with(&self, hidden: Tensor<2>, w: Option<Tensor<2>>) -> Tensor<2> {
        let w = w.unwrap_or_else(|| self.embedding_weight());
        super::output::tied_logits(hidden, w, self.output_bias.as_ref().map(Param::val))
    }

    /// A cache to decode `encoded` incrementally from, one row per source sentence (repeat
    /// rows with [`DecoderCache::reorder`] for beams). `w` as in [`Self::encode_with`].
    pub fn decoder_cache(&self, encoded: &Encoded, w: Option<Tensor<2>>) -> DecoderCache {
        let [b, s, d] = encoded.memory.dims();
        let memory = encoded.memory.clone().reshape([b * s, d]);
        let layers = self
            .decoder
            .iter()
            .map(|layer| {
                let (cross_k, cross_v) = layer.cross_kv(memory.clone(), [b, s]);
                LayerCache {
                    self_kv: None,
                    cross_k,
                    cross_v,
                }
            })
            .collect();
        let device = memory.device();
        DecoderCache {
            layers,
            src_pad: encoded.pad.clone().reshape([b, 1, 1, s]),
            self_pad: None,
            fed: Tensor::zeros([b], &device),
            w: w.unwrap_or_else(|| self.embedding_weight()),
            bias: self.output_bias.as_ref().map(Param::val),
            steps: 0,
        }
    }

    /// Feeds each row's next token `last_tokens` `[rows]` and returns the log-probabilities of
    /// the token after it, `[rows, N]`; only the new token goes through the layers (the prefix's
    /// keys and values are in the cache). Equals the log-softmax of [`Self::decode_hidden`]'s
    /// logits at the same position. For inference: on an autodiff device in training mode,
    /// dropout would drop.
    pub fn decode_step(&self, cache: &mut DecoderCache, last_tokens: Tensor<1, Int>) -> Tensor<2> {
        let [b] = last_tokens.dims();
        assert!(
            cache.steps < self.max_positions,
            "decoding past the model's {} positions",
            self.max_positions
        );
        let is_pad = last_tokens.clone().equal_elem(self.pad as i64);
        let not_pad = is_pad.clone().bool_not().float();
        cache.fed = cache.fed.clone() + not_pad.clone();
        let positions = (cache.fed.clone() * not_pad).reshape([b, 1]);
        let embedded = super::lookup(
            &self.embedding,
            None,
            last_tokens.reshape([b, 1]),
            Some(cache.w.clone()),
        );
        let mut x = self.add_positions(embedded, positions);
        let new_pad = is_pad.float().reshape([b, 1, 1, 1]);
        let self_pad = match cache.self_pad.take() {
            Some(m) => Tensor::cat(vec![m, new_pad], 3),
            None => new_pad,
        };
        let masks = DecoderMasks {
            causal: None,
            self_pad: self_pad.clone().greater_elem(0.5),
            src_pad: cache.src_pad.clone(),
        };
        for (layer, lc) in self.decoder.iter().zip(&mut cache.layers) {
            let cross = (lc.cross_k.clone(), lc.cross_v.clone());
            let (y, kv) = layer.forward(x, [b, 1], lc.self_kv.take(), cross, &masks);
            x = y;
            lc.self_kv = Some(kv);
        }
        if let Some(ln) = &self.decoder_norm {
            x = super::layer_norm::layer_norm(ln, x);
        }
        cache.self_pad = Some(self_pad);
        cache.steps += 1;
        let logits = super::output::tied_logits(x, cache.w.clone(), cache.bias.clone());
        log_softmax(logits, 1)
    }

    /// √d · W[tokens] plus the positions, dropped out, as rows `[b·t, d]`.
    fn embed(
        &self,
        tokens: Tensor<2, Int>,
        pad: Tensor<2, Bool>,
        w: Option<Tensor<2>>,
    ) -> Tensor<2> {
        let [_, t] = tokens.dims();
        assert!(
            t <= self.max_positions,
            "a sequence of {t} tokens is longer than the model's {} positions",
            self.max_positions
        );
        let embedded = super::lookup(&self.embedding, self.spectral.as_ref(), tokens, w);
        // fairseq's make_positions: the running count of non-pad tokens, 0 at pad.
        let not_pad = pad.bool_not().float();
        let positions = not_pad.clone().cumsum(1) * not_pad;
        self.add_positions(embedded, positions)
    }

    /// `embedded` `[b, t, d]` scaled by √d, plus the sinusoids of `positions` `[b, t]` (the
    /// count k ≥ 1 of a non-pad token, 0 at pad), dropped out, as rows `[b·t, d]`.
    fn add_positions(&self, embedded: Tensor<3>, positions: Tensor<2>) -> Tensor<2> {
        let [b, t, d] = embedded.dims();
        let x = embedded.mul_scalar((d as f64).sqrt()) + sinusoids(positions, d);
        super::dropout::forward(&self.dropout, x).reshape([b * t, d])
    }
}

/// fairseq's `SinusoidalPositionalEmbedding` rows for positions `[b, t]` (k ≥ 1, 0 for pad),
/// `[b, t, d]`: row k + [`POSITION_PADDING_IDX`] of its table, and zeros at pad.
pub fn sinusoids(positions: Tensor<2>, d: usize) -> Tensor<3> {
    let [b, t] = positions.dims();
    let device = positions.device();
    let half = d / 2;
    let step = (10000f64).ln() / (half.max(2) - 1) as f64;
    let freq: Vec<f32> = (0..half)
        .map(|j| (-(j as f64) * step).exp() as f32)
        .collect();
    let freq = Tensor::<3>::from_data(TensorData::new(freq, [1, 1, half]), &device);
    let present = positions
        .clone()
        .greater_elem(0.0)
        .float()
        .unsqueeze_dim::<3>(2);
    let angles = positions
        .add_scalar(POSITION_PADDING_IDX as f64)
        .unsqueeze_dim::<3>(2)
        * freq;
    let mut parts = vec![angles.clone().sin(), angles.cos()];
    if d % 2 == 1 {
        parts.push(Tensor::zeros([b, t, 1], &device));
    }
    Tensor::cat(parts, 2) * present
}

/// The masks of a decoder pass, each true where a key is hidden.
struct DecoderMasks {
    /// `[1, 1, t, t]` above the diagonal (the full pass; none when decoding a step).
    causal: Option<Tensor<4, Bool>>,
    /// `[b, 1, 1, t_keys]` at the target's pad.
    self_pad: Tensor<4, Bool>,
    /// `[b, 1, 1, s]` at the source's pad.
    src_pad: Tensor<4, Bool>,
}

/// Rows `[b·t, heads·dh]` as `[b, heads, t, dh]`.
fn split_heads(x: Tensor<2>, [b, t]: [usize; 2], heads: usize) -> Tensor<4> {
    let d = x.dims()[1];
    x.reshape([b, t, heads, d / heads]).swap_dims(1, 2)
}

/// `[b, heads, t, dh]` as rows `[b·t, heads·dh]`.
fn merge_heads(x: Tensor<4>) -> Tensor<2> {
    let [b, h, t, dh] = x.dims();
    x.swap_dims(1, 2).reshape([b * t, h * dh])
}

/// softmax(q·kᵀ/√dh, keys masked by `key_pad` `[b, 1, 1, tk]` and `causal`)·v, with dropout
/// on the weights; q `[b, h, tq, dh]`, k and v `[b, h, tk, dh]`.
fn attend(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    key_pad: Tensor<4, Bool>,
    causal: Option<Tensor<4, Bool>>,
    dropout: &Dropout,
) -> Tensor<4> {
    let [b, h, tq, dh] = q.dims();
    let tk = k.dims()[2];
    let matmul = super::precision::matmul;
    let mut hidden = key_pad.expand([b, h, tq, tk]);
    if let Some(causal) = causal {
        hidden = hidden.bool_or(causal.expand([b, h, tq, tk]));
    }
    let scores = matmul(q, k.transpose())
        .mul_scalar(1.0 / (dh as f64).sqrt())
        .mask_fill(hidden, MASKED);
    matmul(super::dropout::forward(dropout, softmax(scores, 3)), v)
}

/// A residual sublayer: `x + dropout(f(LN(x)))` pre-LN, `LN(x + dropout(f(x)))` post-LN.
fn residual(
    pre_norm: bool,
    ln: &LayerNorm,
    dropout: &Dropout,
    x: Tensor<2>,
    f: impl FnOnce(Tensor<2>) -> Tensor<2>,
) -> Tensor<2> {
    let norm = super::layer_norm::layer_norm;
    if pre_norm {
        x.clone() + super::dropout::forward(dropout, f(norm(ln, x)))
    } else {
        norm(ln, x.clone() + super::dropout::forward(dropout, f(x)))
    }
}

impl FeedForward {
    fn forward(&self, x: Tensor<2>, activation_dropout: &Dropout) -> Tensor<2> {
        let (linear, linear_low) = (super::precision::linear, super::precision::linear_low);
        let hidden = relu(linear_low(&self.fc1, x));
        linear(
            &self.fc2,
            super::dropout::forward(activation_dropout, hidden),
        )
    }
}

impl SelfAttention {
    /// q, k and v of rows `x` `[b·t, d]`, each `[b, heads, t, dh]`.
    fn qkv(&self, x: Tensor<2>, [b, t]: [usize; 2], heads: usize) -> [Tensor<4>; 3] {
        let d = x.dims()[1];
        let qkv = super::precision::linear_low(&self.qkv, x)
            .reshape([b, t, 3, heads, d / heads])
            .permute([2, 0, 3, 1, 4]); // [3, b, h, t, dh]
        let part = |i: usize| {
            qkv.clone()
                .narrow(0, i, 1)
                .reshape([b, heads, t, d / heads])
        };
        [part(0), part(1), part(2)]
    }
}

impl EncoderLayer {
    fn forward(&self, x: Tensor<2>, [b, s]: [usize; 2], key_pad: Tensor<4, Bool>) -> Tensor<2> {
        let drop = &self.dropouts;
        let x = residual(self.pre_norm, &self.ln_self, &drop.output, x, |x| {
            let [q, k, v] = self.self_attn.qkv(x, [b, s], self.heads);
            let ctx = attend(q, k, v, key_pad, None, &drop.attention);
            super::precision::linear(&self.self_attn.out, merge_heads(ctx))
        });
        residual(self.pre_norm, &self.ln_ffn, &drop.output, x, |x| {
            self.ffn.forward(x, &drop.activation)
        })
    }
}

impl DecoderLayer {
    /// The cross-attention's keys and values of the encoder's output rows `[b·s, d]`, each
    /// `[b, heads, s, dh]`.
    fn cross_kv(&self, memory: Tensor<2>, [b, s]: [usize; 2]) -> (Tensor<4>, Tensor<4>) {
        let d = memory.dims()[1];
        let kv = super::precision::linear_low(&self.cross.kv, memory)
            .reshape([b, s, 2, self.heads, d / self.heads])
            .permute([2, 0, 3, 1, 4]); // [2, b, h, s, dh]
        let dh = d / self.heads;
        (
            kv.clone().narrow(0, 0, 1).reshape([b, self.heads, s, dh]),
            kv.narrow(0, 1, 1).reshape([b, self.heads, s, dh]),
        )
    }

    /// The layer over new rows `x` `[b·t, d]`; `past` holds the self-attention keys and values
    /// of earlier positions (incremental decoding), which the new ones are appended to. Returns
    /// the output rows and the self-attention keys and values of every position so far.
    fn forward(
        &self,
        x: Tensor<2>,
        [b, t]: [usize; 2],
        past: Option<(Tensor<4>, Tensor<4>)>,
        (cross_k, cross_v): (Tensor<4>, Tensor<4>),
        masks: &DecoderMasks,
    ) -> (Tensor<2>, (Tensor<4>, Tensor<4>)) {
        let drop = &self.dropouts;
        let linear = super::precision::linear;
        let mut kept = None;
        let x = residual(self.pre_norm, &self.ln_self, &drop.output, x, |x| {
            let [q, k, v] = self.self_attn.qkv(x, [b, t], self.heads);
            let (k, v) = match past {
                Some((pk, pv)) => (Tensor::cat(vec![pk, k], 2), Tensor::cat(vec![pv, v], 2)),
                None => (k, v),
            };
            kept = Some((k.clone(), v.clone()));
            let ctx = attend(
                q,
                k,
                v,
                masks.self_pad.clone(),
                masks.causal.clone(),
                &drop.attention,
            );
            linear(&self.self_attn.out, merge_heads(ctx))
        });
        let x = residual(self.pre_norm, &self.ln_cross, &drop.output, x, |x| {
            let q = split_heads(
                super::precision::linear_low(&self.cross.q, x),
                [b, t],
                self.heads,
            );
            let ctx = attend(
                q,
                cross_k,
                cross_v,
                masks.src_pad.clone(),
                None,
                &drop.attention,
            );
            linear(&self.cross.out, merge_heads(ctx))
        });
        let x = residual(self.pre_norm, &self.ln_ffn, &drop.output, x, |x| {
            self.ffn.forward(x, &drop.activation)
        });
        (x, kept.expect("the self-attention ran"))
    }
}

/// fairseq's `label_smoothed_nll_loss` summed over the non-pad targets: with
/// lprobs = log_softmax(`logits`) `[P, N]`, nll_i = −lprobs[i, y_i], smooth_i = −Σ_v lprobs[i, v]
/// and ε_i = ε/(N − 1),
///
///   loss = (1 − ε − ε_i)·Σ nll_i + ε_i·Σ smooth_i,
///
/// sums over the positions whose target is not `pad`. `logits` may be log-probabilities
/// already (log_softmax leaves them as they are). Returns the smoothed loss sum, the plain NLL
/// sum (each `[1]`) and the number of non-pad targets; ε = 0 gives the NLL.
pub fn label_smoothed_nll(
    logits: Tensor<2>,
    targets: Tensor<1, Int>,
    pad: usize,
    epsilon: f64,
) -> (Tensor<1>, Tensor<1>, usize) {
    let [p, n] = logits.dims();
    let lprobs = log_softmax(logits, 1);
    let is_pad = targets.clone().equal_elem(pad as i64);
    let nll = lprobs
        .clone()
        .gather(1, targets.reshape([p, 1]))
        .reshape([p])
        .neg()
        .mask_fill(is_pad.clone(), 0.0)
        .sum();
    let smooth = lprobs
        .sum_dim(1)
        .reshape([p])
        .neg()
        .mask_fill(is_pad.clone(), 0.0)
        .sum();
    let eps_i = if n > 1 { epsilon / (n - 1) as f64 } else { 0.0 };
    let loss = nll.clone().mul_scalar(1.0 - epsilon - eps_i) + smooth.mul_scalar(eps_i);
    let pads = is_pad
        .int()
        .sum()
        .try_into_vec_as::<i64>()
        .ok()
        .and_then(|v| v.first().copied())
        .unwrap_or(0);
    (loss, nll, p - pads as usize)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::DeviceSpecExt;
    use conelab_core::model::DeviceSpec;

    pub(crate) const PAD: i64 = 0;
    pub(crate) const BOS: i64 = 1;
    pub(crate) const EOS: i64 = 2;

    /// A small model: d = 16, 2 + 2 layers, 2 heads, fairseq's initialisation, 32 positions.
    pub(crate) fn config(norm: NormPlacement, dropout: f64) -> TranslationConfig {
        TranslationConfig {
            d_model: 16,
            encoder_layers: 2,
            decoder_layers: 2,
            heads: 2,
            d_ff: 32,
            dropout,
            attention_dropout: dropout,
            activation_dropout: dropout,
            norm,
            max_positions: 32,
            init_std: None,
            label_smoothing: 0.1,
            output_bias: false,
        }
    }

    /// [`config`]'s model over `vocab` tokens, `<pad>` 0, with an output bias drawn from
    /// N(0, 1) (so that the bias's path is exercised) plus `eos_bias` on EOS.
    pub(crate) fn model(
        norm: NormPlacement,
        vocab: usize,
        eos_bias: f32,
        seed: u64,
        device: &Device,
    ) -> TranslationTransformer {
        model_with(&config(norm, 0.1), vocab, eos_bias, seed, device)
    }

    /// [`model`] of configuration `cfg`.
    pub(crate) fn model_with(
        cfg: &TranslationConfig,
        vocab: usize,
        eos_bias: f32,
        seed: u64,
        device: &Device,
    ) -> TranslationTransformer {
        device.seed(seed);
        let mut m = TranslationTransformer::new(cfg, vocab, PAD as usize, device);
        let mut bias = Tensor::<1>::random([vocab], Distribution::Normal(0.0, 1.0), device)
            .try_into_vec_as::<f32>()
            .expect("bias");
        bias[EOS as usize] += eos_bias;
        m.output_bias = Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(bias, [vocab]),
            device,
        )));
        m
    }

    pub(crate) fn ints(rows: &[&[i64]], device: &Device) -> Tensor<2, Int> {
        let t = rows[0].len();
        assert!(rows.iter().all(|r| r.len() == t), "rows of one length");
        let flat: Vec<i64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::from_data(TensorData::new(flat, [rows.len(), t]), device)
    }

    /// The sources `rows` and their pad mask (true at `<pad>`).
    pub(crate) fn sources(rows: &[&[i64]], device: &Device) -> (Tensor<2, Int>, Tensor<2, Bool>) {
        let src = ints(rows, device);
        let pad = src.clone().equal_elem(PAD);
        (src, pad)
    }

    pub(crate) fn read<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        t.try_into_vec_as::<f32>().expect("reads back")
    }

    fn plain() -> Device {
        DeviceSpec::Cpu.device().expect("flex")
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    }

    const NORMS: [NormPlacement; 2] = [NormPlacement::Post, NormPlacement::Pre];

    /// The decoder's states at positions < k do not depend on the target tokens at positions
    /// ≥ k (in either sentence of the batch), and those at ≥ k do.
    #[test]
    fn translation_decoder_positions_see_only_the_past() {
        let device = plain();
        let d = 16;
        for norm in NORMS {
            let m = model(norm, 11, 0.0, 3, &device);
            let (src, src_pad) = sources(&[&[5, 6, 7, 2], &[8, 3, 2, 0]], &device);
            let encoded = m.encode(src, src_pad);
            let tgt: [&[i64]; 2] = [&[1, 5, 7, 3, 9, 4], &[1, 4, 4, 8, 6, 10]];
            let before = read(m.decode_hidden(&encoded, ints(&tgt, &device), None));
            let k = 3;
            let changed: [&[i64]; 2] = [&[1, 5, 7, 9, 3, 3], &[1, 4, 4, 5, 10, 6]];
            let after = read(m.decode_hidden(&encoded, ints(&changed, &device), None));
            for s in 0..2 {
                for p in 0..6 {
                    let row = (s * 6 + p) * d;
                    let moved = max_diff(&before[row..row + d], &after[row..row + d]);
                    if p < k {
                        assert!(
                            moved <= 1e-6,
                            "{norm:?}: sentence {s} position {p} moved {moved}"
                        );
                    } else {
                        assert!(
                            moved > 1e-3,
                            "{norm:?}: position {p} sees its input ({moved})"
                        );
                    }
                }
            }
        }
    }

    /// `<pad>` appended to a source (or put before it: fairseq pads sources on the left), with
    /// its mask, leaves the encoder's non-pad outputs and every decoder output as they were;
    /// so does batching two sources of different lengths; `<pad>` appended to a target leaves
    /// its non-pad positions as they were.
    #[test]
    fn translation_padding_changes_nothing_it_should_not() {
        let device = plain();
        let d = 16;
        let tgt: [&[i64]; 1] = [&[1, 8, 9, 4]];
        for norm in NORMS {
            let m = model(norm, 11, 0.0, 5, &device);
            let run = |src: &[&[i64]], tgt: &[&[i64]]| {
                let (s, p) = sources(src, &device);
                let e = m.encode(s, p);
                let memory = read(e.memory.clone());
                (memory, read(m.decode_hidden(&e, ints(tgt, &device), None)))
            };
            let (alone_mem, alone_dec) = run(&[&[5, 6, 7, 2]], &tgt);
            let (right_mem, right_dec) = run(&[&[5, 6, 7, 2, 0, 0]], &tgt);
            let (left_mem, left_dec) = run(&[&[0, 0, 5, 6, 7, 2]], &tgt);
            assert!(
                max_diff(&alone_mem, &right_mem[..4 * d]) <= 1e-5,
                "{norm:?} right"
            );
            assert!(
                max_diff(&alone_mem, &left_mem[2 * d..]) <= 1e-5,
                "{norm:?} left"
            );
            assert!(
                max_diff(&alone_dec, &right_dec) <= 1e-5,
                "{norm:?} right dec"
            );
            assert!(max_diff(&alone_dec, &left_dec) <= 1e-5, "{norm:?} left dec");
            // The pad rows do differ from the real ones (the check is not vacuous).
            assert!(max_diff(&alone_dec, &run(&[&[5, 6, 7, 3]], &tgt).1) > 1e-3);

            // Two sentences batched, the shorter padded, against each alone.
            let other: &[i64] = &[9, 10, 3, 3, 4, 2];
            let tgt2: [&[i64]; 2] = [tgt[0], &[1, 3, 3, 5]];
            let (both_mem, both_dec) = run(&[&[5, 6, 7, 2, 0, 0], other], &tgt2);
            let (other_mem, other_dec) = run(&[other], &[tgt2[1]]);
            assert!(max_diff(&alone_mem, &both_mem[..4 * d]) <= 1e-5);
            assert!(max_diff(&other_mem, &both_mem[6 * d..]) <= 1e-5);
            assert!(max_diff(&alone_dec, &both_dec[..4 * d]) <= 1e-5);
            assert!(max_diff(&other_dec, &both_dec[4 * d..]) <= 1e-5);

            // A padded target.
            let (_, padded_dec) = run(&[&[5, 6, 7, 2]], &[&[1, 8, 9, 4, 0, 0]]);
            assert!(
                max_diff(&alone_dec, &padded_dec[..4 * d]) <= 1e-5,
                "{norm:?} target"
            );
        }
    }

    /// Three-way tying: the one matrix W's gradient is the sum of what its three uses give
    /// (each found by passing W, tracked, to one use and a constant copy to the other two),
    /// each is there, and each lands where it should: the encoder's on the source's rows, the
    /// decoder input's on the target inputs' rows, the output layer's on every row.
    #[test]
    fn translation_w_takes_gradient_from_all_three_uses() {
        let device = DeviceSpec::Cpu.training_device().expect("flex");
        device.seed(11);
        let vocab = 13;
        let m = TranslationTransformer::new(
            &config(NormPlacement::Pre, 0.0),
            vocab,
            PAD as usize,
            &device,
        );
        let src_rows: [&[i64]; 2] = [&[5, 6, 7, 2], &[8, 5, 2, 0]];
        let tgt_in: [&[i64]; 2] = [&[1, 9, 10, 3], &[1, 4, 11, 0]];
        let tgt_out: Vec<i64> = vec![9, 10, 3, 2, 4, 11, 2, 0];
        // Which uses see W (tracked); the others see a constant copy. `None`: the model's own
        // path, W from its parameter everywhere.
        let grad = |uses: Option<[bool; 3]>| {
            let (src, pad) = sources(&src_rows, &device);
            let w = m.embedding.weight.val();
            let pick = |i: usize| {
                uses.map(|u| {
                    if u[i] {
                        w.clone()
                    } else {
                        crate::model::constant(w.clone())
                    }
                })
            };
            let encoded = m.encode_with(src, pad, pick(0));
            let hidden = m.decode_hidden(&encoded, ints(&tgt_in, &device), pick(1));
            let logits = m.logits_with(hidden, pick(2));
            let targets =
                Tensor::<1, Int>::from_data(TensorData::new(tgt_out.clone(), [8]), &device);
            let (loss, _, tokens) = label_smoothed_nll(logits, targets, PAD as usize, 0.1);
            assert_eq!(tokens, 7);
            let grads = loss.backward();
            read(m.embedding.weight.grad(&grads).expect("W's gradient"))
        };
        let d = 16;
        let full = grad(None);
        let parts = [
            grad(Some([true, false, false])),
            grad(Some([false, true, false])),
            grad(Some([false, false, true])),
        ];
        assert!(max_diff(&full, &grad(Some([true, true, true]))) <= 1e-6);
        let scale = full.iter().map(|g| g.abs()).fold(0f32, f32::max);
        let summed: Vec<f32> = (0..full.len())
            .map(|i| parts.iter().map(|p| p[i]).sum())
            .collect();
        assert!(
            max_diff(&full, &summed) <= 1e-4 * scale,
            "the parts add up to the whole"
        );
        let rows_touched = |g: &[f32]| -> Vec<usize> {
            (0..vocab)
                .filter(|&r| g[r * d..(r + 1) * d].iter().any(|v| v.abs() > 1e-7))
                .collect()
        };
        // The sources' tokens, pad excluded (a pad key is masked, its row takes nothing).
        assert_eq!(
            rows_touched(&parts[0]),
            vec![2, 5, 6, 7, 8],
            "encoder input"
        );
        assert_eq!(
            rows_touched(&parts[1]),
            vec![1, 3, 4, 9, 10, 11],
            "decoder input"
        );
        assert_eq!(
            rows_touched(&parts[2]),
            (0..vocab).collect::<Vec<_>>(),
            "output"
        );
    }

    /// Incremental decoding, step by step from the cache, gives the log-softmax of the full
    /// teacher-forced pass's logits at every position (pre- and post-LN, a padded batch), and
    /// reordering the cache's rows mid-way continues each row's own prefix.
    #[test]
    fn translation_incremental_decoding_equals_the_full_pass() {
        let device = plain();
        let vocab = 11;
        for norm in NORMS {
            let m = model(norm, vocab, 0.0, 9, &device);
            let (src, pad) = sources(&[&[5, 6, 7, 2, 0], &[8, 3, 9, 4, 2]], &device);
            let encoded = m.encode(src, pad);
            let tgt: [&[i64]; 2] = [&[1, 5, 7, 3, 9], &[1, 4, 4, 8, 6]];
            let full = |tgt: &[&[i64]], encoded: &Encoded| {
                read(log_softmax(
                    m.logits(m.decode_hidden(encoded, ints(tgt, &device), None)),
                    1,
                ))
            };
            let want = full(&tgt, &encoded);
            let mut cache = m.decoder_cache(&encoded, None);
            for j in 0..5 {
                let step = ints(&[&[tgt[0][j], tgt[1][j]]], &device).reshape([2]);
                let got = read(m.decode_step(&mut cache, step));
                for s in 0..2 {
                    let row = &want[(s * 5 + j) * vocab..(s * 5 + j + 1) * vocab];
                    let diff = max_diff(&got[s * vocab..(s + 1) * vocab], row);
                    assert!(diff <= 1e-4, "{norm:?}: sentence {s} step {j}: {diff}");
                }
            }
            assert_eq!(cache.steps(), 5);

            // Rows swapped (and the second repeated) after three tokens: each row goes on
            // with the prefix and source of the row it was taken from.
            let mut cache = m.decoder_cache(&encoded, None);
            for (&a, &b) in tgt[0].iter().zip(tgt[1]).take(3) {
                m.decode_step(&mut cache, ints(&[&[a, b]], &device).reshape([2]));
            }
            cache.reorder(Tensor::from_data(
                TensorData::new(vec![1i64, 0, 1], [3]),
                &device,
            ));
            assert_eq!(cache.rows(), 3);
            let swapped = Encoded {
                memory: encoded.memory.clone().select(
                    0,
                    Tensor::from_data(TensorData::new(vec![1i64, 0, 1], [3]), &device),
                ),
                pad: encoded.pad.clone().select(
                    0,
                    Tensor::from_data(TensorData::new(vec![1i64, 0, 1], [3]), &device),
                ),
            };
            let rest: [&[i64]; 3] = [&[1, 4, 4, 3, 10], &[1, 5, 7, 8, 8], &[1, 4, 4, 9, 5]];
            let want = full(&rest, &swapped);
            for j in 3..5 {
                let step = ints(&[&[rest[0][j], rest[1][j], rest[2][j]]], &device).reshape([3]);
                let got = read(m.decode_step(&mut cache, step));
                for s in 0..3 {
                    let row = &want[(s * 5 + j) * vocab..(s * 5 + j + 1) * vocab];
                    let diff = max_diff(&got[s * vocab..(s + 1) * vocab], row);
                    assert!(diff <= 1e-4, "{norm:?}: reordered row {s} step {j}: {diff}");
                }
            }
        }
    }

    /// fairseq's label-smoothed loss against the formula worked out in f64 on a tiny example:
    /// the pad target is left out, ε = 0 gives the NLL, log-probabilities in give the same as
    /// logits, and uniform logits give ln N a token whatever ε (ε_i·N·ln N + (1 − ε − ε_i)·ln N
    /// with ε_i = ε/(N − 1)).
    #[test]
    fn translation_label_smoothing_matches_fairseq_by_hand() {
        let device = plain();
        let logits = [
            [1.0f64, 2.0, 0.5, -1.0],
            [0.3, -1.0, 2.0, 0.0],
            [5.0, 1.0, 5.0, 2.0],
        ];
        let targets = [1i64, 2, PAD];
        let n = 4.0;
        let lp: Vec<Vec<f64>> = logits
            .iter()
            .map(|row| {
                let z = row.iter().map(|v| v.exp()).sum::<f64>().ln();
                row.iter().map(|v| v - z).collect()
            })
            .collect();
        let nll = -(lp[0][1] + lp[1][2]);
        let smooth = -(lp[0].iter().sum::<f64>() + lp[1].iter().sum::<f64>());
        let as_tensor = |rows: &[Vec<f64>]| {
            let flat: Vec<f32> = rows.iter().flatten().map(|&v| v as f32).collect();
            Tensor::<2>::from_data(TensorData::new(flat, [3, 4]), &device)
        };
        let targets_t =
            Tensor::<1, Int>::from_data(TensorData::new(targets.to_vec(), [3]), &device);
        for eps in [0.0, 0.1, 0.25] {
            let eps_i = eps / (n - 1.0);
            let want = (1.0 - eps - eps_i) * nll + eps_i * smooth;
            for input in [
                as_tensor(&logits.iter().map(|r| r.to_vec()).collect::<Vec<_>>()),
                as_tensor(&lp),
            ] {
                let (loss, got_nll, tokens) =
                    label_smoothed_nll(input, targets_t.clone(), PAD as usize, eps);
                let (loss, got_nll) = (read(loss)[0] as f64, read(got_nll)[0] as f64);
                assert_eq!(tokens, 2);
                assert!((got_nll - nll).abs() < 1e-5, "nll {got_nll} against {nll}");
                assert!((loss - want).abs() < 1e-5, "ε {eps}: {loss} against {want}");
                if eps == 0.0 {
                    assert!((loss - nll).abs() < 1e-6);
                }
            }
        }
        let flat = Tensor::<2>::zeros([2, 4], &device).add_scalar(0.7);
        let t = Tensor::<1, Int>::from_data(TensorData::new(vec![3i64, 1], [2]), &device);
        let (loss, _, _) = label_smoothed_nll(flat, t, PAD as usize, 0.3);
        assert!((read(loss)[0] as f64 - 2.0 * n.ln()).abs() < 1e-5);
    }

    /// The sinusoids are fairseq's table: row k + 1 for the k-th token, sin on the first half
    /// and cos on the second (f_j = 10000^(−j/(d/2 − 1))), zeros at pad.
    #[test]
    fn translation_positions_are_fairseqs_sinusoids() {
        let device = plain();
        let d = 6;
        let rows = read(sinusoids(
            Tensor::from_data(
                TensorData::new(vec![1.0f32, 2.0, 0.0, 3.0], [1, 4]),
                &device,
            ),
            d,
        ));
        for (i, k) in [1.0f64, 2.0, 0.0, 3.0].into_iter().enumerate() {
            for j in 0..3 {
                let f = (-(j as f64) * (10000f64).ln() / 2.0).exp();
                let p = k + 1.0;
                let (s, c) = if k == 0.0 {
                    (0.0, 0.0)
                } else {
                    ((p * f).sin(), (p * f).cos())
                };
                assert!((rows[i * d + j] as f64 - s).abs() < 1e-5, "sin {i} {j}");
                assert!((rows[i * d + 3 + j] as f64 - c).abs() < 1e-5, "cos {i} {j}");
            }
        }
    }

    /// fairseq's initialisation: W's pad row zero and its other entries N(0, 1/√d), the
    /// attention projections within Xavier's bounds, the feed-forward biases within 1/√fan_in.
    #[test]
    fn translation_initialisation_is_fairseqs() {
        let device = plain();
        device.seed(1);
        let cfg = TranslationConfig {
            d_model: 64,
            ..config(NormPlacement::Post, 0.1)
        };
        let m = TranslationTransformer::new(&cfg, 200, 3, &device);
        let w = read(m.embedding.weight.val());
        assert!(w[3 * 64..4 * 64].iter().all(|&v| v == 0.0), "the pad row");
        let others: Vec<f64> = w
            .iter()
            .enumerate()
            .filter(|(i, _)| i / 64 != 3)
            .map(|(_, &v)| v as f64)
            .collect();
        let var = others.iter().map(|v| v * v).sum::<f64>() / others.len() as f64;
        assert!((var.sqrt() - 0.125).abs() < 0.01, "std {}", var.sqrt());
        let layer = &m.encoder[0];
        let max_abs = |t: Tensor<2>| read(t).iter().fold(0f32, |a, v| a.max(v.abs()));
        let qkv = max_abs(layer.self_attn.qkv.weight.val());
        let bound = (3.0f32 / 128.0).sqrt();
        assert!(
            qkv <= bound && qkv > 0.9 * bound,
            "q, k, v: {qkv} within {bound}"
        );
        let out = max_abs(layer.self_attn.out.weight.val());
        let bound = (3.0f32 / 64.0).sqrt();
        assert!(
            out <= bound && out > 0.9 * bound,
            "out: {out} within {bound}"
        );
        let out_bias = read(layer.self_attn.out.bias.as_ref().expect("bias").val());
        assert!(out_bias.iter().all(|&v| v == 0.0));
        assert!(m.encoder_norm.is_none() && m.decoder_norm.is_none());
    }
}
