//! Model architectures and presets. Every field can be overridden from a TOML config file.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::choice::Choice;

/// Decoder-only Transformer with tied embeddings: learned positions, pre-LN blocks, GELU MLP,
/// final LayerNorm before the tied output layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformerConfig {
    pub d_model: usize,
    pub layers: usize,
    pub heads: usize,
    pub d_ff: usize,
    /// Context length T (also the training window).
    pub context: usize,
    pub dropout: f64,
    /// Standard deviation of the normal initialisation of W and of every linear layer. burn's
    /// default N(0, 1) for embeddings makes the tied head start at a loss near 90.
    pub init_std: f64,
    pub output_bias: bool,
}

/// LSTM language model with tied embeddings (a projection when hidden ≠ embedding size), trained with
/// truncated BPTT: the state is carried from one window to the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LstmConfig {
    pub embed: usize,
    pub hidden: usize,
    pub layers: usize,
    /// Truncated-BPTT window T.
    pub bptt: usize,
    pub dropout: f64,
    /// Uniform initialisation range (Zaremba et al.: ±0.05 medium, ±0.04 large).
    pub init_range: f64,
    pub output_bias: bool,
}

/// Where an encoder–decoder Transformer's layer norms sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NormPlacement {
    /// Before each sublayer, inside the residual branch, with a final norm after each stack
    /// (fairseq's `--encoder-normalize-before --decoder-normalize-before`).
    Pre,
    /// After each residual sum (Vaswani et al. 2017; fairseq's default).
    #[default]
    Post,
}

/// Encoder–decoder translation Transformer (fairseq's `transformer`) with one matrix W for the
/// encoder's input, the decoder's input and the decoder's output (three-way tying, a joined
/// source–target vocabulary): embeddings scaled by √d, sinusoidal positions, ReLU feed-forward
/// layers, `<pad>` masked as a key in every attention.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranslationConfig {
    pub d_model: usize,
    pub encoder_layers: usize,
    pub decoder_layers: usize,
    pub heads: usize,
    /// Width of the feed-forward layers' hidden layer.
    pub d_ff: usize,
    /// Dropout on the embeddings and on every sublayer's output.
    pub dropout: f64,
    /// Dropout on the attention weights (fairseq's `--attention-dropout`, 0 by default).
    #[serde(default)]
    pub attention_dropout: f64,
    /// Dropout after the feed-forward layers' ReLU (fairseq's `--activation-dropout`, 0 by
    /// default).
    #[serde(default)]
    pub activation_dropout: f64,
    #[serde(default)]
    pub norm: NormPlacement,
    /// The longest source or target sequence (non-pad tokens) the sinusoidal positions cover
    /// (fairseq's `--max-source-positions`/`--max-target-positions`, 1024 by default).
    #[serde(default = "default_max_positions")]
    pub max_positions: usize,
    /// `None`: fairseq's initialisation (W from N(0, 1/√d) with the `<pad>` row zero, the
    /// attention projections Xavier-uniform, the feed-forward layers PyTorch's `nn.Linear`
    /// default). `Some(σ)`: W and every linear weight from N(0, σ), biases zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_std: Option<f64>,
    /// ε of the label-smoothed cross-entropy (fairseq's `--label-smoothing`).
    #[serde(default = "default_label_smoothing")]
    pub label_smoothing: f64,
    #[serde(default)]
    pub output_bias: bool,
}

fn default_max_positions() -> usize {
    1024
}

fn default_label_smoothing() -> f64 {
    0.1
}

impl TranslationConfig {
    /// Post-LN, fairseq's initialisation, 1024 positions, ε = 0.1, no attention or activation
    /// dropout, no output bias.
    fn sized(
        d_model: usize,
        layers: usize,
        heads: usize,
        d_ff: usize,
        dropout: f64,
    ) -> TranslationConfig {
        TranslationConfig {
            d_model,
            encoder_layers: layers,
            decoder_layers: layers,
            heads,
            d_ff,
            dropout,
            attention_dropout: 0.0,
            activation_dropout: 0.0,
            norm: NormPlacement::Post,
            max_positions: default_max_positions(),
            init_std: None,
            label_smoothing: default_label_smoothing(),
            output_bias: false,
        }
    }

    /// d = 256, 3 + 3 layers, 4 heads, FFN 1024, dropout 0.1: for the CPU.
    pub fn mt_tiny() -> TranslationConfig {
        Self::sized(256, 3, 4, 1024, 0.1)
    }

    /// fairseq's `transformer_iwslt_de_en`: d = 512, 6 + 6 layers, 4 heads, FFN 1024,
    /// dropout 0.3.
    pub fn iwslt() -> TranslationConfig {
        Self::sized(512, 6, 4, 1024, 0.3)
    }

    /// Vaswani et al.'s base model: d = 512, 6 + 6 layers, 8 heads, FFN 2048, dropout 0.1.
    pub fn mt_base() -> TranslationConfig {
        Self::sized(512, 6, 8, 2048, 0.1)
    }

    /// Checks the shape parameters; the message names the field.
    pub fn validate(&self) -> Result<(), conelab_base::error::Invalid> {
        let within = |name: &str, v: usize, least: usize, most: usize| {
            if (least..=most).contains(&v) {
                Ok(())
            } else {
                Err(format!("model.{name} {v} must be from {least} to {most}"))
            }
        };
        within("d_model", self.d_model, 4, 1 << 20)?;
        within("encoder_layers", self.encoder_layers, 1, 1 << 10)?;
        within("decoder_layers", self.decoder_layers, 1, 1 << 10)?;
        within("heads", self.heads, 1, 1 << 10)?;
        within("d_ff", self.d_ff, 1, 1 << 20)?;
        within("max_positions", self.max_positions, 2, 1 << 20)?;
        if !self.d_model.is_multiple_of(self.heads) {
            return Err(format!(
                "model.d_model {} is not divisible by model.heads {}",
                self.d_model, self.heads
            )
            .into());
        }
        for (name, p) in [
            ("dropout", self.dropout),
            ("attention_dropout", self.attention_dropout),
            ("activation_dropout", self.activation_dropout),
            ("label_smoothing", self.label_smoothing),
        ] {
            if !(0.0..1.0).contains(&p) {
                return Err(format!("model.{name} {p} must be in [0, 1)").into());
            }
        }
        if let Some(std) = self.init_std
            && !(std > 0.0 && std <= 10.0)
        {
            return Err(format!("model.init_std {std} must be in (0, 10]").into());
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "arch", rename_all = "lowercase")]
pub enum ModelConfig {
    Transformer(TransformerConfig),
    Lstm(LstmConfig),
}

/// Named starting points for `--model` (what each is: [`Choice::help`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    Tiny,
    Small,
    Lstm,
    Awd,
    Gpt2Small,
}

impl Choice for Preset {
    const ALL: &'static [Self] = &[
        Preset::Tiny,
        Preset::Small,
        Preset::Lstm,
        Preset::Awd,
        Preset::Gpt2Small,
    ];

    fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::Small => "small",
            Preset::Lstm => "lstm",
            Preset::Awd => "awd",
            Preset::Gpt2Small => "gpt2-small",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Preset::Tiny => "Transformer d=128, 2 layers, 4 heads, T=64: the CPU demo",
            Preset::Small => "Transformer d=256, 4 layers, 4 heads, T=128",
            Preset::Lstm => "LSTM 2×650 (Zaremba et al. 2014, medium), BPTT 35",
            Preset::Awd => {
                "AWD-LSTM sized: 3 layers, hidden 1150, embedding 400, BPTT 70 (the papers' baseline)"
            }
            Preset::Gpt2Small => "Transformer 12×768, 12 heads, T=256: for the GPU",
        }
    }
}

impl Preset {
    /// The preset's name (as [`Choice::name`], callable without the trait in scope).
    pub fn name(self) -> &'static str {
        Choice::name(self)
    }

    pub fn config(self) -> ModelConfig {
        let transformer = |d_model, layers, heads, context| {
            ModelConfig::Transformer(TransformerConfig {
                d_model,
                layers,
                heads,
                d_ff: 4 * d_model,
                context,
                dropout: 0.1,
                init_std: 0.02,
                output_bias: false,
            })
        };
        match self {
            Preset::Tiny => transformer(128, 2, 4, 64),
            Preset::Small => transformer(256, 4, 4, 128),
            Preset::Gpt2Small => transformer(768, 12, 12, 256),
            Preset::Lstm => ModelConfig::Lstm(LstmConfig {
                embed: 650,
                hidden: 650,
                layers: 2,
                bptt: 35,
                dropout: 0.5,
                init_range: 0.05,
                output_bias: true,
            }),
            Preset::Awd => ModelConfig::Lstm(LstmConfig {
                embed: 400,
                hidden: 1150,
                layers: 3,
                bptt: 70,
                dropout: 0.4,
                init_range: 0.1,
                output_bias: true,
            }),
        }
    }
}

impl ModelConfig {
    /// The training window T.
    pub fn window(&self) -> usize {
        match self {
            ModelConfig::Transformer(t) => t.context,
            ModelConfig::Lstm(l) => l.bptt,
        }
    }

    /// The same model with a window of `t` tokens: the Transformer's context, the LSTM's BPTT.
    pub fn with_window(mut self, t: usize) -> Self {
        match &mut self {
            ModelConfig::Transformer(c) => c.context = t,
            ModelConfig::Lstm(c) => c.bptt = t,
        }
        self
    }

    /// The recurrent state a model carries from window to window at batch `batch`: so many
    /// layers of a `[batch, hidden]` cell and hidden state each; `None` for a model that
    /// carries none.
    pub fn carried_state(&self, batch: usize) -> Option<(usize, [usize; 2])> {
        match self {
            ModelConfig::Lstm(l) => Some((l.layers, [batch, l.hidden])),
            ModelConfig::Transformer(_) => None,
        }
    }

    /// The model in a few words, with its vocabulary: `Transformer d=128 layers=2 heads=4,
    /// vocabulary 10000`.
    pub fn describe(&self, vocab: usize) -> String {
        match self {
            ModelConfig::Transformer(t) => format!(
                "Transformer d={} layers={} heads={}, vocabulary {vocab}",
                t.d_model, t.layers, t.heads
            ),
            ModelConfig::Lstm(l) => format!(
                "LSTM {}×{} embed {}, vocabulary {vocab}",
                l.layers, l.hidden, l.embed
            ),
        }
    }

    /// The model's trainable parameters for a vocabulary of `vocab`, written out from the
    /// architecture (before anything is allocated), as an f64 so that an absurd configuration
    /// cannot overflow.
    pub fn parameter_count(&self, vocab: usize) -> f64 {
        let f = |x: usize| x as f64;
        match self {
            ModelConfig::Transformer(t) => {
                let (d, ff) = (f(t.d_model), f(t.d_ff));
                // qkv, projection, two MLP layers (weights and biases), two layer norms.
                let block =
                    (3.0 * d * d + 3.0 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d) + 4.0 * d;
                f(vocab) * d
                    + f(t.context) * d
                    + f(t.layers) * block
                    + 2.0 * d
                    + if t.output_bias { f(vocab) } else { 0.0 }
            }
            ModelConfig::Lstm(l) => {
                let (e, h) = (f(l.embed), f(l.hidden));
                let layers: f64 = (0..l.layers)
                    .map(|i| {
                        let input = if i == 0 { e } else { h };
                        4.0 * h * (input + h) + 8.0 * h
                    })
                    .sum();
                let projection = if l.hidden != l.embed { h * e + e } else { 0.0 };
                f(vocab) * e + layers + projection + if l.output_bias { f(vocab) } else { 0.0 }
            }
        }
    }

    /// A lower bound on the bytes one training step at `batch` holds: the parameters, their
    /// gradients and AdamW's two moments in fp32 (16 bytes a parameter), the `[B·T, N]` logits
    /// with their gradient (8 bytes an entry), and what every layer keeps of a window for the
    /// backward pass ([`Self::activation_bytes_at_least`]). A configuration beyond this bound
    /// cannot train on a machine with less memory, whatever else it needs.
    pub fn training_bytes_at_least(&self, vocab: usize, batch: usize) -> f64 {
        16.0 * self.parameter_count(vocab)
            + 8.0 * (batch as f64) * (self.window() as f64) * (vocab as f64)
            + self.activation_bytes_at_least(batch)
    }

    /// The fp32 activations a window of `batch` streams leaves for the backward pass, at least:
    /// per Transformer layer the attention probabilities (`B·heads·T²`: the window's square, what a
    /// long `--bptt` runs into) and the block's inputs to its products (the normalised input, Q,
    /// K, V, the attention output, the MLP's input and hidden layer: `B·T·(6d + d_ff)`); per
    /// LSTM layer its four gates and cell state at every position (`B·T·5h`).
    pub fn activation_bytes_at_least(&self, batch: usize) -> f64 {
        let f = |v: usize| v as f64;
        let (b, t) = (f(batch), f(self.window()));
        match self {
            ModelConfig::Transformer(c) => {
                4.0 * f(c.layers)
                    * (b * f(c.heads) * t * t + b * t * (6.0 * f(c.d_model) + f(c.d_ff)))
            }
            ModelConfig::Lstm(c) => 4.0 * f(c.layers) * b * t * 5.0 * f(c.hidden),
        }
    }

    /// Embedding width d (columns of W).
    pub fn embed_dim(&self) -> usize {
        match self {
            ModelConfig::Transformer(t) => t.d_model,
            ModelConfig::Lstm(l) => l.embed,
        }
    }

    pub fn output_bias(&self) -> bool {
        match self {
            ModelConfig::Transformer(t) => t.output_bias,
            ModelConfig::Lstm(l) => l.output_bias,
        }
    }

    pub fn set_output_bias(&mut self, on: bool) {
        match self {
            ModelConfig::Transformer(t) => t.output_bias = on,
            ModelConfig::Lstm(l) => l.output_bias = on,
        }
    }

    /// Checks the shape parameters; the message names the field.
    pub fn validate(&self) -> Result<(), conelab_base::error::Invalid> {
        // Ranges far beyond any model a machine trains, so a typo (an extra digit or three)
        // is a one-line error before anything is allocated.
        let positive = |name: &str, v: usize| {
            let most = match name {
                "layers" | "heads" => 1 << 10,
                _ => 1 << 20,
            };
            if (1..=most).contains(&v) {
                Ok(())
            } else {
                Err(format!("model.{name} {v} must be from 1 to {most}"))
            }
        };
        let dropout = |p: f64| {
            if (0.0..1.0).contains(&p) {
                Ok(())
            } else {
                Err(format!("model.dropout {p} must be in [0, 1)"))
            }
        };
        match self {
            ModelConfig::Transformer(t) => {
                positive("d_model", t.d_model)?;
                positive("layers", t.layers)?;
                positive("heads", t.heads)?;
                positive("d_ff", t.d_ff)?;
                positive("context", t.context)?;
                dropout(t.dropout)?;
                if t.d_model % t.heads != 0 {
                    return Err(format!(
                        "model.d_model {} is not divisible by model.heads {}",
                        t.d_model, t.heads
                    )
                    .into());
                }
                if !(t.init_std > 0.0 && t.init_std <= 10.0) {
                    return Err(format!("model.init_std {} must be in (0, 10]", t.init_std).into());
                }
            }
            ModelConfig::Lstm(l) => {
                positive("embed", l.embed)?;
                positive("hidden", l.hidden)?;
                positive("layers", l.layers)?;
                positive("bptt", l.bptt)?;
                dropout(l.dropout)?;
                if !(l.init_range > 0.0 && l.init_range <= 10.0) {
                    return Err(
                        format!("model.init_range {} must be in (0, 10]", l.init_range).into(),
                    );
                }
            }
        }
        Ok(())
    }
}

/// `--device`: which backend and device a run uses. Backends are compiled in by cargo feature;
/// asking for one that is not gives an error naming the feature, never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceSpec {
    /// Pure-Rust CPU backend (burn-flex), the default build.
    Cpu,
    /// LibTorch on the CPU (cargo feature `tch`).
    LibtorchCpu,
    /// LibTorch on CUDA device N (cargo feature `tch`, a CUDA build of libtorch, a GPU).
    Cuda(usize),
}

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("unknown device `{0}`: expected cpu, libtorch-cpu, cuda or cuda:N")]
    Unknown(String),
    #[error(
        "device `{0}` needs LibTorch, but this conelab was built without the `tch` feature (see README, \"LibTorch and CUDA\")"
    )]
    NoTch(DeviceSpec),
    #[error("device `cpu` needs the `flex` feature, which this build lacks")]
    NoFlex,
    #[error("device `{spec}`: {reason}")]
    Unavailable { spec: DeviceSpec, reason: String },
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::LibtorchCpu => f.write_str("libtorch-cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cpu" | "flex" => Ok(DeviceSpec::Cpu),
            "libtorch-cpu" | "tch-cpu" => Ok(DeviceSpec::LibtorchCpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceSpec::Cuda)
                .ok_or_else(|| DeviceError::Unknown(other.to_owned())),
        }
    }
}

impl DeviceSpec {
    /// Whether the device's tensors live in host memory (burn-flex, LibTorch on the CPU): there
    /// the LSTM's host layers and the host dropout masks cost a copy at most, never a transfer.
    pub fn host_memory(self) -> bool {
        matches!(self, DeviceSpec::Cpu | DeviceSpec::LibtorchCpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attention probabilities grow with the window's square: a Transformer layer of 2 heads,
    /// d = 8, d_ff = 16 at B = 3 keeps 4·(3·2·T² + 3·T·(6·8 + 16)) bytes, counted by hand.
    #[test]
    fn activations_grow_with_the_window_squared() {
        let at = |t: usize| {
            ModelConfig::Transformer(TransformerConfig {
                d_model: 8,
                layers: 2,
                heads: 2,
                d_ff: 16,
                context: t,
                dropout: 0.0,
                init_std: 0.02,
                output_bias: false,
            })
            .activation_bytes_at_least(3)
        };
        let by_hand = |t: f64| 2.0 * 4.0 * (3.0 * 2.0 * t * t + 3.0 * t * 64.0);
        assert_eq!(at(10), by_hand(10.0));
        assert_eq!(at(65_536), by_hand(65_536.0));
        // 65,536 tokens on 2 heads: 32 GiB of probabilities a layer at batch 1, far beyond the
        // parameters' share.
        assert!(at(65_536) > 100.0 * 16.0 * 1.0e6);
    }

    /// The translation presets' numbers, as the papers and fairseq give them, and what a TOML
    /// file leaves out takes fairseq's defaults.
    #[test]
    fn translation_presets_have_their_papers_numbers() {
        let shape = |c: &TranslationConfig| {
            (
                c.d_model,
                c.encoder_layers,
                c.decoder_layers,
                c.heads,
                c.d_ff,
                c.dropout,
            )
        };
        assert_eq!(
            shape(&TranslationConfig::mt_tiny()),
            (256, 3, 3, 4, 1024, 0.1)
        );
        assert_eq!(
            shape(&TranslationConfig::iwslt()),
            (512, 6, 6, 4, 1024, 0.3)
        );
        assert_eq!(
            shape(&TranslationConfig::mt_base()),
            (512, 6, 6, 8, 2048, 0.1)
        );
        for c in [
            TranslationConfig::mt_tiny(),
            TranslationConfig::iwslt(),
            TranslationConfig::mt_base(),
        ] {
            assert_eq!(c.norm, NormPlacement::Post);
            assert_eq!(c.label_smoothing, 0.1);
            assert_eq!(c.max_positions, 1024);
            assert_eq!(c.init_std, None);
            assert_eq!((c.attention_dropout, c.activation_dropout), (0.0, 0.0));
            assert!(!c.output_bias);
            c.validate().expect("a preset is valid");
        }
        let written: TranslationConfig = toml::from_str(
            "d_model = 64\nencoder_layers = 2\ndecoder_layers = 1\nheads = 4\nd_ff = 128\ndropout = 0.2\nnorm = \"pre\"\n",
        )
        .expect("parses");
        assert_eq!(written.norm, NormPlacement::Pre);
        assert_eq!(written.label_smoothing, 0.1);
        assert_eq!(written.max_positions, 1024);
        assert_eq!(written.init_std, None);
        let back = toml::to_string(&TranslationConfig::iwslt()).expect("writes");
        assert!(back.contains("norm = \"post\""), "{back}");
        assert_eq!(
            toml::from_str::<TranslationConfig>(&back).expect("reads back"),
            TranslationConfig::iwslt()
        );
        let mut bad = TranslationConfig::mt_tiny();
        bad.heads = 3;
        let e = bad.validate().expect_err("256 over 3 heads");
        assert!(e.to_string().contains("model.heads 3"), "{e}");
        bad.heads = 4;
        bad.label_smoothing = 1.0;
        let e = bad.validate().expect_err("ε = 1");
        assert!(e.to_string().contains("model.label_smoothing"), "{e}");
    }

    #[test]
    fn parses_every_spelling() {
        assert_eq!("cpu".parse::<DeviceSpec>().ok(), Some(DeviceSpec::Cpu));
        assert_eq!("cuda".parse::<DeviceSpec>().ok(), Some(DeviceSpec::Cuda(0)));
        assert_eq!(
            "cuda:3".parse::<DeviceSpec>().ok(),
            Some(DeviceSpec::Cuda(3))
        );
        assert_eq!(
            "libtorch-cpu".parse::<DeviceSpec>().ok(),
            Some(DeviceSpec::LibtorchCpu)
        );
        assert!("gpu".parse::<DeviceSpec>().is_err());
        assert!("cuda:x".parse::<DeviceSpec>().is_err());
    }

    /// Every preset is inside the ranges; a shape a few digits too large, or an init that is
    /// not a small positive number, is refused naming the field.
    #[test]
    fn shapes_have_ranges_and_the_presets_are_inside_them() {
        for p in [
            Preset::Tiny,
            Preset::Small,
            Preset::Lstm,
            Preset::Awd,
            Preset::Gpt2Small,
        ] {
            p.config()
                .validate()
                .unwrap_or_else(|e| panic!("{}: {e}", p.name()));
        }
        let ModelConfig::Transformer(base) = Preset::Small.config() else {
            panic!("small is a transformer")
        };
        let bad = |edit: &dyn Fn(&mut TransformerConfig), needle: &str| {
            let mut t = base.clone();
            edit(&mut t);
            let e = ModelConfig::Transformer(t).validate().expect_err(needle);
            assert!(e.to_string().contains(needle), "{e}");
        };
        bad(
            &|t| t.layers = 5_000,
            "model.layers 5000 must be from 1 to 1024",
        );
        bad(&|t| t.d_ff = 1 << 21, "model.d_ff");
        bad(&|t| t.context = 0, "model.context 0");
        bad(&|t| t.init_std = f64::NAN, "model.init_std");
        bad(&|t| t.init_std = 1e9, "model.init_std");
        let ModelConfig::Lstm(l) = Preset::Lstm.config() else {
            panic!("lstm is an LSTM")
        };
        let mut l = l.clone();
        l.hidden = 1 << 21;
        let e = ModelConfig::Lstm(l).validate().expect_err("hidden");
        assert!(e.to_string().contains("model.hidden"), "{e}");
    }
}
