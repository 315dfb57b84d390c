//! The translation training kernel (methods.md §5): one optimizer step of fairseq's IWSLT recipe
//! on the next token batch, the exact teacher-forced perplexity of a split per frequency group
//! of the target token, and BLEU/chrF of decoded output — a standalone component the engine
//! drives later.
//!
//! What is fairseq's, and where:
//! - the loss is `label_smoothed_nll_loss` (`fairseq/criterions/label_smoothed_cross_entropy.py`,
//!   [`label_smoothed_nll`]) summed over the batch's target tokens; its `sample_size` is
//!   `ntokens` (`sentence_avg` off), and `fairseq/trainer.py` multiplies the gradients of that
//!   sum by 1/`sample_size` before clipping and stepping: the gradient is the one of the sum over
//!   target tokens divided by their number (here the backward of exactly that quotient);
//! - the clip (`fairseq/utils.py` `clip_grad_norm_`): the global L2 norm of the normalised
//!   gradients, always computed and reported; with `clip_norm` > 0 every gradient is multiplied
//!   by min(1, clip_norm / (norm + 1e-6)); 0 (the IWSLT recipe) never clips;
//! - the rate (`fairseq/optim/lr_scheduler/inverse_square_root_schedule.py`): after
//!   `num_updates` updates, warmup_init_lr + num_updates·(lr − warmup_init_lr)/warmup_updates
//!   while num_updates < warmup_updates, then lr·√warmup_updates/√num_updates; the scheduler is
//!   set with `step_update(0)` before the first update and with `step_update(n)` after the n-th
//!   (`Trainer.set_num_updates`), so update n runs at the rate of n − 1;
//! - Adam with decoupled weight decay (`fairseq/optim/adam.py`, "corresponds to the AdamW
//!   variant"): θ ← θ·(1 − η·λ) − η·m̂/(√v̂ + ε), here burn's AdamW state through
//!   [`FusedAdamW`] as the LM trainer builds it (fairseq adds ε to √v before its bias
//!   correction, burn after: at ε = 1e-8 no difference shows);
//! - batches of at most `max_tokens` padded tokens, formed once in a seeded length order, their
//!   order shuffled per epoch ([`TokenBatcher`], fairseq's `batch_by_size`/`EpochBatchIterator`);
//! - the reported losses are in nats per target token (fairseq logs them in bits: /ln 2).
//!
//! The data order is a pure function of `(data_seed, epoch, k)`: update n (from 0) takes batch
//! k = n mod B of epoch e = n div B (B batches an epoch), so a run resumed at update n sees the
//! batches the uninterrupted run would have. Dropout masks come from `(seed, update)`, drawn as
//! the LM trainer draws them (on the host where the tensors live in host memory).

use std::sync::Arc;
use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::prelude::*;
use burn::serde::{Deserialize, Serialize};
use burn::tensor::activation::log_softmax;

use crate::engine::EngineError;
use crate::engine::fused_adamw::FusedAdamW;
use crate::model::DeviceSpecExt;
use crate::model::translation::{
    BeamOptions, BeamStop, TranslationTransformer, label_smoothed_nll,
};
use conelab_base::number::said;
use conelab_core::model::{DeviceSpec, TranslationConfig};
use conelab_data::{
    LongPairs, MtGroup, PairBatch, ParallelCorpus, ParallelSplit, Split, TokenBatchOptions,
    TokenBatcher,
};
use conelab_metrics::bleu::{BleuOptions, BleuScore, BleuTokenize, corpus_bleu};
use conelab_metrics::chrf::{ChrfOptions, ChrfScore, corpus_chrf};

/// The optimisation settings of a translation run; the defaults are fairseq's IWSLT'14 recipe
/// (`examples/translation/README.md`: `--optimizer adam --adam-betas '(0.9, 0.98)'
/// --clip-norm 0.0 --lr 5e-4 --lr-scheduler inverse_sqrt --warmup-updates 4000
/// --weight-decay 0.0001 --label-smoothing 0.1 --max-tokens 4096`). Dropout is the model's
/// ([`TranslationConfig::dropout`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(crate = "burn::serde", default, deny_unknown_fields)]
pub struct TranslationTrainConfig {
    /// Most padded tokens a training batch holds (fairseq's `--max-tokens`).
    pub max_tokens: usize,
    /// Most sentence pairs a batch holds (fairseq's `--batch-size`); none by default.
    pub max_sentences: Option<usize>,
    /// The peak rate, reached at the end of the warm-up.
    pub lr: f64,
    /// Updates of linear warm-up before the inverse-square-root decay (at least 1).
    pub warmup_updates: u64,
    /// The rate of the first update (fairseq's `--warmup-init-lr`; the IWSLT README leaves it
    /// at fairseq's default, 0; the scaling-NMT recipe sets 1e-7).
    pub warmup_init_lr: f64,
    /// Adam's β₁ and β₂ (`--adam-betas`).
    pub beta1: f64,
    pub beta2: f64,
    /// Adam's ε (`--adam-eps`).
    pub epsilon: f64,
    /// Decoupled weight decay λ (`--weight-decay`).
    pub weight_decay: f64,
    /// Largest global gradient norm (`--clip-norm`); 0 never clips.
    pub clip_norm: f64,
    /// ε of the label-smoothed loss (`--label-smoothing`); `None` takes the model
    /// configuration's [`TranslationConfig::label_smoothing`] (0.1 in every preset).
    pub label_smoothing: Option<f64>,
    /// Seeds the initialisation and each update's dropout masks.
    pub seed: u64,
    /// Seeds the batches' formation and their order in each epoch.
    pub data_seed: u64,
}

impl Default for TranslationTrainConfig {
    fn default() -> Self {
        Self {
            max_tokens: 4096,
            max_sentences: None,
            lr: 5e-4,
            warmup_updates: 4000,
            warmup_init_lr: 1e-7,
            beta1: 0.9,
            beta2: 0.98,
            epsilon: 1e-8,
            weight_decay: 1e-4,
            clip_norm: 0.0,
            label_smoothing: None,
            seed: 1,
            data_seed: 1,
        }
    }
}

/// Bounds that keep a typo from meaning something.
const MAX_TOKENS: usize = 1 << 24;
const MAX_UPDATES: u64 = 1_000_000_000;

impl TranslationTrainConfig {
    /// Checks every setting; the one-line message names the field.
    pub fn validate(&self) -> Result<(), conelab_base::error::Invalid> {
        let check = |ok: bool, what: String| if ok { Ok(()) } else { Err(what) };
        check(
            (1..=MAX_TOKENS).contains(&self.max_tokens),
            format!(
                "max_tokens {} must be from 1 to {MAX_TOKENS}",
                self.max_tokens
            ),
        )?;
        if let Some(n) = self.max_sentences {
            check(
                (1..=MAX_TOKENS).contains(&n),
                format!("max_sentences {n} must be from 1 to {MAX_TOKENS}"),
            )?;
        }
        check(
            self.lr.is_finite() && self.lr > 0.0 && self.lr <= 10.0,
            format!("lr {} must be in (0, 10]", said(self.lr)),
        )?;
        check(
            (1..=MAX_UPDATES).contains(&self.warmup_updates),
            format!(
                "warmup_updates {} must be from 1 to {MAX_UPDATES:.0e}",
                self.warmup_updates
            ),
        )?;
        check(
            (0.0..=self.lr).contains(&self.warmup_init_lr),
            format!(
                "warmup_init_lr {} must be from 0 to lr {}",
                said(self.warmup_init_lr),
                said(self.lr)
            ),
        )?;
        check(
            (0.0..1.0).contains(&self.beta1) && (0.0..1.0).contains(&self.beta2),
            format!(
                "betas {},{} must be in [0, 1)",
                said(self.beta1),
                said(self.beta2)
            ),
        )?;
        check(
            self.epsilon > 0.0 && self.epsilon <= 1.0,
            format!("epsilon {} must be in (0, 1]", said(self.epsilon)),
        )?;
        check(
            (0.0..=10.0).contains(&self.weight_decay),
            format!(
                "weight_decay {} must be from 0 to 10",
                said(self.weight_decay)
            ),
        )?;
        check(
            (0.0..=1e6).contains(&self.clip_norm),
            format!("clip_norm {} must be from 0 to 1e6", said(self.clip_norm)),
        )?;
        if let Some(eps) = self.label_smoothing {
            check(
                (0.0..1.0).contains(&eps),
                format!("label_smoothing {} must be in [0, 1)", said(eps)),
            )?;
        }
        Ok(())
    }

    /// fairseq's `inverse_sqrt` `step_update(num_updates)`: the rate after `num_updates`
    /// updates, i.e. the rate of update `num_updates + 1`.
    pub fn inverse_sqrt_lr(&self, num_updates: u64) -> f64 {
        let warmup = self.warmup_updates.max(1);
        if num_updates < warmup {
            let step = (self.lr - self.warmup_init_lr) / warmup as f64;
            self.warmup_init_lr + num_updates as f64 * step
        } else {
            self.lr * (warmup as f64).sqrt() / (num_updates as f64).sqrt()
        }
    }

    /// The rate update `update` (from 1) runs at: [`Self::inverse_sqrt_lr`] of `update − 1`.
    pub fn lr_of_update(&self, update: u64) -> f64 {
        self.inverse_sqrt_lr(update.saturating_sub(1))
    }
}

/// What one update did.
#[derive(Debug, Clone, PartialEq)]
pub struct TranslationStepStats {
    /// Updates done, this one included (fairseq's `num_updates`).
    pub step: u64,
    /// Epochs done after this update, fractional (1.5: half-way through the second epoch).
    pub epoch: f64,
    /// The label-smoothed loss per target token (nats), before the update.
    pub loss: f64,
    /// The plain NLL per target token (nats), before the update.
    pub nll: f64,
    /// The rate the update ran at.
    pub lr: f64,
    /// Global L2 norm of the normalised gradients, before clipping.
    pub grad_norm: f64,
    /// Scored target positions (`</s>` included).
    pub target_tokens: usize,
    pub sentences: usize,
    pub tokens_per_second: f64,
    pub ms: f64,
}

/// One frequency group's share of an evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupNll {
    pub group: MtGroup,
    /// Σ −log p over the positions whose target is in the group.
    pub nll_sum: f64,
    pub positions: u64,
    /// exp(nll_sum / positions); NaN for a group without positions.
    pub ppl: f64,
}

/// The exact teacher-forced perplexity of a split, total and per group of the target token.
#[derive(Debug, Clone, PartialEq)]
pub struct TranslationEval {
    /// Updates done when it was measured.
    pub step: u64,
    pub split: Split,
    /// Mean NLL (nats) over every scored position.
    pub loss: f64,
    pub ppl: f64,
    pub nll_sum: f64,
    /// Every target position of the split, `</s>` included (pairs + target words).
    pub positions: u64,
    /// Frequent, Medium, Rare.
    pub groups: [GroupNll; 3],
    /// Positions whose target is in none of the three groups: `<unk>` (group Special) or a type
    /// seen only on the source side of train (Source-only). In the total only.
    pub other_positions: u64,
    pub seconds: f64,
}

/// How hypotheses are decoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decoding {
    /// The most probable token at each step (live evaluation).
    Greedy,
    /// fairseq's beam search (`SequenceGenerator`, stopping as it does: [`BeamStop::Fairseq`]),
    /// scores normalised by length^lenpen.
    Beam { beam: usize, lenpen: f64 },
}

/// A training batch as tensors: sources, their pad mask, decoder inputs, and the targets as one
/// row-major column.
struct BatchTensors {
    source: Tensor<2, Int>,
    source_pad: Tensor<2, Bool>,
    decoder_input: Tensor<2, Int>,
    targets: Tensor<1, Int>,
}

/// A batch's loss: the objective whose gradient the update takes (the smoothed sum over target
/// tokens over their number), the sums behind it, and the number of target tokens.
pub(crate) struct BatchLoss {
    pub(crate) objective: Tensor<1>,
    pub(crate) smoothed_sum: Tensor<1>,
    pub(crate) nll_sum: Tensor<1>,
    pub(crate) tokens: usize,
}

/// The seed of update `step`'s dropout masks: SplitMix64 of the run's seed and the update, as
/// the LM trainer draws them.
fn step_seed(seed: u64, step: u64) -> u64 {
    let mut z = seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// fairseq's `post_process(sentence, "subword_nmt")`: `@@ ` joined back.
pub fn remove_bpe(sentence: &str) -> String {
    format!("{sentence} ")
        .replace("@@ ", "")
        .trim_end()
        .to_owned()
}

/// The tokens a pair needs in a batch row, `max(source, target + 1)`.
fn need(split: &ParallelSplit, i: usize) -> usize {
    split.source_len(i).max(split.target_len(i) + 1)
}

/// Trains a [`TranslationTransformer`] on a [`ParallelCorpus`].
pub struct TranslationTrainer {
    corpus: Arc<ParallelCorpus>,
    model_config: TranslationConfig,
    config: TranslationTrainConfig,
    device_spec: DeviceSpec,
    /// The training device (autodiff).
    device: Device,
    model: TranslationTransformer,
    optim: ModuleOptimizer,
    /// The train split's batches, pairs by index, in the batcher's length order.
    batches: Vec<Vec<usize>>,
    /// The epoch whose batch order is kept, and that order.
    order: (u64, Vec<usize>),
    /// Updates done.
    step: u64,
    epsilon: f64,
}

impl TranslationTrainer {
    /// A fresh run: the model initialised from `train.seed` on `device`, the train split cut
    /// into batches from `train.data_seed`. Refused in one line: a bad setting, a train split
    /// without a batch, a pair longer than the model's positions.
    pub fn new(
        corpus: Arc<ParallelCorpus>,
        model: TranslationConfig,
        train: TranslationTrainConfig,
        device: DeviceSpec,
    ) -> Result<Self, EngineError> {
        model.validate().map_err(EngineError::Config)?;
        train.validate().map_err(EngineError::Config)?;
        for split in Split::ALL {
            let pairs = corpus.split(split);
            if let Some(i) = (0..pairs.len()).max_by_key(|&i| need(pairs, i))
                && need(pairs, i) > model.max_positions
            {
                return Err(EngineError::Config(
                    format!(
                        "{} line {} needs {} positions (source {} tokens with </s>, target {} + 1), more than model.max_positions {}",
                        pairs.paths().0.display(),
                        pairs.line(i),
                        need(pairs, i),
                        pairs.source_len(i),
                        pairs.target_len(i),
                        model.max_positions
                    )
                    .into(),
                ));
            }
        }
        let batcher = Self::batcher(&corpus, &train)?;
        let batches = batcher.batches().to_vec();
        if batches.is_empty() {
            return Err(EngineError::Config(
                "the train split has no sentence pair to batch".into(),
            ));
        }
        let order = (0, batcher.epoch_order(0));
        let training = device.training_device()?;
        training.seed(train.seed);
        let vocab = corpus.vocab();
        let net = TranslationTransformer::new(&model, vocab.len(), vocab.pad() as usize, &training);
        let optim = ModuleOptimizer::from(FusedAdamW::new(
            train.beta1 as f32,
            train.beta2 as f32,
            train.epsilon as f32,
            train.weight_decay as f32,
        ));
        let epsilon = train.label_smoothing.unwrap_or(model.label_smoothing);
        Ok(Self {
            corpus,
            model_config: model,
            config: train,
            device_spec: device,
            device: training,
            model: net,
            optim,
            batches,
            order,
            step: 0,
            epsilon,
        })
    }

    /// The train split's batcher of `config`.
    fn batcher<'a>(
        corpus: &'a ParallelCorpus,
        config: &TranslationTrainConfig,
    ) -> Result<TokenBatcher<'a>, EngineError> {
        let options = TokenBatchOptions {
            max_tokens: config.max_tokens,
            max_sentences: config.max_sentences,
            long_pairs: LongPairs::Refuse,
        };
        TokenBatcher::new(corpus, Split::Train, &options, config.data_seed)
            .map_err(EngineError::invalid("the train split's batches"))
    }

    /// A batcher over a whole split for evaluation and decoding: every pair fits (the bound is
    /// raised to the longest pair), in length order.
    fn eval_batcher(
        &self,
        split: Split,
        max_tokens: usize,
    ) -> Result<TokenBatcher<'_>, EngineError> {
        let pairs = self.corpus.split(split);
        let longest = (0..pairs.len()).map(|i| need(pairs, i)).max().unwrap_or(1);
        let options = TokenBatchOptions {
            max_tokens: max_tokens.max(longest),
            max_sentences: None,
            long_pairs: LongPairs::Refuse,
        };
        TokenBatcher::new(&self.corpus, split, &options, 0)
            .map_err(EngineError::invalid(format!("the {split} split's batches")))
    }

    pub fn model(&self) -> &TranslationTransformer {
        &self.model
    }

    /// The model's parameters (W once: it is tied three ways).
    pub fn parameters(&self) -> usize {
        burn::module::Module::num_params(&self.model)
    }

    /// The tied matrix W, `[N, d]`.
    pub fn embedding_weight(&self) -> Tensor<2> {
        self.model.embedding_weight()
    }

    pub fn corpus(&self) -> &Arc<ParallelCorpus> {
        &self.corpus
    }

    pub fn model_config(&self) -> &TranslationConfig {
        &self.model_config
    }

    pub fn config(&self) -> &TranslationTrainConfig {
        &self.config
    }

    pub fn device_spec(&self) -> DeviceSpec {
        self.device_spec
    }

    /// Updates done (fairseq's `num_updates`).
    pub fn num_updates(&self) -> u64 {
        self.step
    }

    /// ε of the training loss (the setting's, else the model configuration's).
    pub fn label_smoothing(&self) -> f64 {
        self.epsilon
    }

    /// Batches of an epoch of the train split.
    pub fn batches_per_epoch(&self) -> usize {
        self.batches.len()
    }

    /// Batch `k` of epoch `epoch` of the train split, as update `epoch·B + k` (from 0) takes it:
    /// a pure function of `(data_seed, epoch, k)`, the same batch [`TokenBatcher::epoch`] gives.
    pub fn train_batch(&self, epoch: u64, k: usize) -> Result<PairBatch, EngineError> {
        let fresh;
        let order = if self.order.0 == epoch {
            &self.order.1
        } else {
            fresh = Self::batcher(&self.corpus, &self.config)?.epoch_order(epoch);
            &fresh
        };
        let &b = order.get(k).ok_or_else(|| {
            EngineError::Config(
                format!("no batch {k} in an epoch of {} batches", self.batches.len()).into(),
            )
        })?;
        Ok(self.pad_batch(&self.batches[b]))
    }

    /// `pairs` of the train split, padded as [`TokenBatcher::batch`] pads them.
    fn pad_batch(&self, pairs: &[usize]) -> PairBatch {
        let vocab = self.corpus.vocab();
        PairBatch::pad(
            self.corpus.split(Split::Train),
            pairs.to_vec(),
            [vocab.pad(), vocab.bos(), vocab.eos()],
        )
    }

    /// A batch's tensors on `device`.
    fn tensors(&self, batch: &PairBatch, device: &Device) -> BatchTensors {
        let ints = |v: &[u32], shape: [usize; 2]| {
            let v: Vec<i64> = v.iter().map(|&x| x as i64).collect();
            Tensor::<2, Int>::from_data(TensorData::new(v, shape), device)
        };
        let source = ints(&batch.source, [batch.batch, batch.source_len]);
        let source_pad = source.clone().equal_elem(self.corpus.vocab().pad() as i64);
        let decoder_input = ints(&batch.decoder_input, [batch.batch, batch.target_len]);
        let targets = ints(&batch.decoder_output, [batch.batch, batch.target_len])
            .reshape([batch.batch * batch.target_len]);
        BatchTensors {
            source,
            source_pad,
            decoder_input,
            targets,
        }
    }

    /// The loss of `batch` under `model` (encoder, decoder, tied logits, fairseq's label-smoothed
    /// sum), normalised as fairseq's gradient is: over the batch's target tokens.
    pub(crate) fn batch_loss(
        &self,
        model: &TranslationTransformer,
        batch: &PairBatch,
        device: &Device,
    ) -> BatchLoss {
        let t = self.tensors(batch, device);
        let hidden = model.hidden(t.source, t.source_pad, t.decoder_input, None);
        let logits = model.logits(hidden);
        let pad = self.corpus.vocab().pad() as usize;
        let (smoothed_sum, nll_sum, tokens) =
            label_smoothed_nll(logits, t.targets, pad, self.epsilon);
        // fairseq: sample_size = ntokens, gradients × 1/sample_size (1 for an empty batch).
        let objective = smoothed_sum.clone().div_scalar(tokens.max(1) as f64);
        BatchLoss {
            objective,
            smoothed_sum,
            nll_sum,
            tokens,
        }
    }

    /// One update on the next batch: forward, fairseq's label-smoothed loss over the target
    /// tokens, backward, the global norm (and the clip when on), AdamW at the scheduled rate. A
    /// loss that is not finite leaves the model and the count as they were
    /// ([`EngineError::Diverged`]).
    pub fn step(&mut self) -> Result<TranslationStepStats, EngineError> {
        let start = Instant::now();
        let next = self.step + 1;
        let per_epoch = self.batches.len() as u64;
        let (epoch, k) = (self.step / per_epoch, (self.step % per_epoch) as usize);
        if self.order.0 != epoch {
            self.order = (
                epoch,
                Self::batcher(&self.corpus, &self.config)?.epoch_order(epoch),
            );
        }
        let batch = self.train_batch(epoch, k)?;
        let seed = step_seed(self.config.seed, next);
        self.device.seed(seed);
        crate::model::dropout::seed_host_masks(self.device_spec.host_memory().then_some(seed));
        let lr = self.config.lr_of_update(next);

        let loss = self.batch_loss(&self.model, &batch, &self.device);
        let raw = loss.objective.backward();
        let grads = GradientsParams::from_grads(raw, &self.model);
        let squared = squared_norm(&self.model, &grads)
            .unwrap_or_else(|| Tensor::zeros([1], &self.device.clone().inner()));
        let read = Tensor::cat(
            vec![
                loss.smoothed_sum.detach().inner(),
                loss.nll_sum.detach().inner(),
                squared,
            ],
            0,
        )
        .try_into_vec_as::<f64>()
        .map_err(|e| {
            EngineError::backend_says(format!("the step's loss did not read back: {e:?}"))
        })?;
        let tokens = loss.tokens.max(1) as f64;
        let (smoothed, nll, grad_norm) = (read[0] / tokens, read[1] / tokens, read[2].sqrt());
        if !smoothed.is_finite() || !grad_norm.is_finite() {
            return Err(EngineError::Diverged {
                step: next,
                loss: smoothed,
            });
        }
        let grads = if self.config.clip_norm > 0.0 {
            let coef = (self.config.clip_norm / (grad_norm + 1e-6)).min(1.0);
            if coef < 1.0 {
                scale_gradients(&self.model, grads, coef)
            } else {
                grads
            }
        } else {
            grads
        };
        self.model = self.optim.step(lr, self.model.clone(), grads);
        self.step = next;
        let seconds = start.elapsed().as_secs_f64();
        Ok(TranslationStepStats {
            step: next,
            epoch: next as f64 / per_epoch as f64,
            loss: smoothed,
            nll,
            lr,
            grad_norm,
            target_tokens: loss.tokens,
            sentences: batch.batch,
            tokens_per_second: loss.tokens as f64 / seconds.max(1e-9),
            ms: seconds * 1e3,
        })
    }

    /// Exact teacher-forced perplexity of `split`, dropout off: every target position of every
    /// pair (each target word and one `</s>` a pair; `<pad>` never), without label smoothing,
    /// summed per group of the target token (Frequent, Medium, Rare). A target that is `<unk>`
    /// (group Special) or a type seen only on the source side of train (Source-only) counts in
    /// the total only ([`TranslationEval::other_positions`]).
    pub fn evaluate(&self, split: Split) -> Result<TranslationEval, EngineError> {
        let start = Instant::now();
        let model = self.model.valid();
        let device = self.device.clone().inner();
        let batcher = self.eval_batcher(split, self.config.max_tokens)?;
        let groups = self.corpus.groups();
        let pad = self.corpus.vocab().pad();
        let mut sums = [0f64; 3];
        let mut counts = [0u64; 3];
        let (mut total, mut positions, mut other) = (0f64, 0u64, 0u64);
        for batch in batcher.in_order() {
            let t = self.tensors(&batch, &device);
            let p = batch.batch * batch.target_len;
            let hidden = model.hidden(t.source, t.source_pad, t.decoder_input, None);
            let log_probs = log_softmax(model.logits(hidden), 1)
                .gather(1, t.targets.reshape([p, 1]))
                .reshape([p])
                .try_into_vec_as::<f32>()
                .map_err(|e| {
                    EngineError::backend_says(format!("log-probabilities did not read back: {e:?}"))
                })?;
            for (&target, &lp) in batch.decoder_output.iter().zip(&log_probs) {
                if target == pad {
                    continue;
                }
                let nll = -(lp as f64);
                total += nll;
                positions += 1;
                let g = match groups.group_of(target) {
                    MtGroup::Frequent => 0,
                    MtGroup::Medium => 1,
                    MtGroup::Rare => 2,
                    MtGroup::SourceOnly | MtGroup::Special => {
                        other += 1;
                        continue;
                    }
                };
                sums[g] += nll;
                counts[g] += 1;
            }
        }
        let ppl = |sum: f64, n: u64| {
            if n == 0 {
                f64::NAN
            } else {
                (sum / n as f64).exp()
            }
        };
        let which = [MtGroup::Frequent, MtGroup::Medium, MtGroup::Rare];
        Ok(TranslationEval {
            step: self.step,
            split,
            loss: if positions == 0 {
                f64::NAN
            } else {
                total / positions as f64
            },
            ppl: ppl(total, positions),
            nll_sum: total,
            positions,
            groups: [0, 1, 2].map(|g| GroupNll {
                group: which[g],
                nll_sum: sums[g],
                positions: counts[g],
                ppl: ppl(sums[g], counts[g]),
            }),
            other_positions: other,
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// The hypotheses of `split`'s sources, in the split's order, as text: ids → tokens with
    /// `<s>`, `</s>` and `<pad>` dropped (`<unk>` kept as written, as fairseq prints it) and the
    /// BPE joined back (`@@ ` removed). At most ⌊`max_len_a`·|src| + `max_len_b`⌋ tokens
    /// (|src| the source's tokens, `</s>` included; capped by the model's positions); decoded in
    /// batches of at most `max_tokens` source tokens (over the beam), dropout off.
    pub fn translate(
        &self,
        split: Split,
        how: Decoding,
        max_len_a: f64,
        max_len_b: usize,
    ) -> Result<Vec<String>, EngineError> {
        if let Decoding::Beam { beam, lenpen } = how
            && (beam == 0 || beam > 1024 || !lenpen.is_finite())
        {
            return Err(EngineError::Config(
                format!(
                    "beam {beam} with lenpen {} must have 1 to 1024 hypotheses and a finite lenpen",
                    said(lenpen)
                )
                .into(),
            ));
        }
        if !(max_len_a.is_finite() && max_len_a >= 0.0) {
            return Err(EngineError::Config(
                format!("max_len_a {} must be a number ≥ 0", said(max_len_a)).into(),
            ));
        }
        let model = self.model.valid();
        let device = self.device.clone().inner();
        let vocab = self.corpus.vocab();
        let (bos, eos, pad) = (vocab.bos(), vocab.eos(), vocab.pad());
        let rows_per_source = match how {
            Decoding::Greedy => 1,
            Decoding::Beam { beam, .. } => beam,
        };
        let batcher = self.eval_batcher(split, self.config.max_tokens / rows_per_source)?;
        let pairs = self.corpus.split(split);
        let mut out = vec![String::new(); pairs.len()];
        for batch in batcher.in_order() {
            let t = self.tensors(&batch, &device);
            let max_lens: Vec<usize> = batch
                .source_lengths
                .iter()
                .map(|&len| (max_len_a * len as f64 + max_len_b as f64).floor() as usize)
                .collect();
            let hypotheses = match how {
                Decoding::Greedy => {
                    let longest = max_lens.iter().copied().max().unwrap_or(0);
                    // Greedy's choices do not depend on the cap: each row's own cap is the
                    // batch's run cut at it.
                    let mut h = model.greedy(t.source, t.source_pad, bos, eos, longest);
                    for (row, &cap) in h.iter_mut().zip(&max_lens) {
                        row.truncate(cap);
                    }
                    h
                }
                Decoding::Beam { beam, lenpen } => model
                    .beam_search_with(
                        t.source,
                        t.source_pad,
                        &BeamOptions {
                            beam,
                            lenpen,
                            max_len_a,
                            max_len_b,
                            bos,
                            eos,
                            stop: BeamStop::Fairseq,
                        },
                    )
                    .into_iter()
                    .map(|hyps| {
                        hyps.into_iter()
                            .next()
                            .map(|h| h.tokens)
                            .unwrap_or_default()
                    })
                    .collect(),
            };
            for (&pair, ids) in batch.pairs.iter().zip(hypotheses) {
                let words: Vec<&str> = ids
                    .iter()
                    .filter(|&&id| id != bos && id != eos && id != pad)
                    .filter_map(|&id| vocab.token(id))
                    .collect();
                out[pair] = remove_bpe(&words.join(" "));
            }
        }
        Ok(out)
    }

    /// Corpus BLEU (sacreBLEU, `tokenize none`, case kept) and chrF2 of `split`'s hypotheses
    /// against its references as written ([`ParallelSplit::reference`]), the BPE joined back on
    /// both sides; and the hypotheses. Lengths as fairseq's default: a = 0, b = 200.
    pub fn bleu(
        &self,
        split: Split,
        how: Decoding,
    ) -> Result<(BleuScore, ChrfScore, Vec<String>), EngineError> {
        self.bleu_with(split, how, 0.0, 200)
    }

    /// [`Self::bleu`] with the maximum length a·|src| + b given.
    pub fn bleu_with(
        &self,
        split: Split,
        how: Decoding,
        max_len_a: f64,
        max_len_b: usize,
    ) -> Result<(BleuScore, ChrfScore, Vec<String>), EngineError> {
        let pairs = self.corpus.split(split);
        let references = (0..pairs.len())
            .map(|i| pairs.reference(i).map(remove_bpe))
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| {
                EngineError::Config(
                    format!("the {split} split keeps no reference text to score BLEU against (valid and test do)")
                        .into(),
                )
            })?;
        let hypotheses = self.translate(split, how, max_len_a, max_len_b)?;
        let refs = [references];
        let bleu = corpus_bleu(
            &hypotheses,
            &refs,
            &BleuOptions {
                tokenize: BleuTokenize::None,
                lowercase: false,
            },
        )
        .map_err(EngineError::invalid(format!("BLEU of the {split} split")))?;
        let chrf = corpus_chrf(&hypotheses, &refs, &ChrfOptions::default())
            .map_err(EngineError::invalid(format!("chrF of the {split} split")))?;
        Ok((bleu, chrf, hypotheses))
    }
}

/// Σ g² over every gradient of `model`, a one-element tensor; `None` when there is none.
fn squared_norm(model: &TranslationTransformer, grads: &GradientsParams) -> Option<Tensor<1>> {
    struct Parts<'a> {
        grads: &'a GradientsParams,
        parts: Vec<Tensor<1>>,
    }
    impl ModuleVisitor for Parts<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.grads.get::<D>(param.id) {
                self.parts.push(g.square().sum());
            }
        }
    }
    let mut parts = Parts {
        grads,
        parts: Vec::new(),
    };
    model.visit(&mut parts);
    (!parts.parts.is_empty()).then(|| Tensor::cat(parts.parts, 0).sum())
}

/// Every gradient times `factor`.
fn scale_gradients(
    model: &TranslationTransformer,
    mut grads: GradientsParams,
    factor: f64,
) -> GradientsParams {
    struct Scale<'a> {
        grads: &'a mut GradientsParams,
        factor: f64,
    }
    impl ModuleVisitor for Scale<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.grads.remove::<D>(param.id) {
                self.grads.register(param.id, g.mul_scalar(self.factor));
            }
        }
    }
    model.visit(&mut Scale {
        grads: &mut grads,
        factor,
    });
    grads
}

#[cfg(test)]
mod tests {
    use super::*;
    use conelab_core::model::NormPlacement;
    use conelab_data::{ParallelOptions, SynthMtConfig, SyntheticMt};

    /// A tiny synthetic-mt: `types` word types a side, 2–6 words a sentence.
    fn corpus(types: usize, train: usize) -> Arc<ParallelCorpus> {
        let config = SynthMtConfig {
            seed: 7,
            vocab: types,
            train,
            valid: 60,
            test: 20,
            min_len: 2,
            max_len: 6,
            zipf: 0.7,
        };
        Arc::new(
            SyntheticMt::generate(&config)
                .expect("generates")
                .into_corpus(&ParallelOptions::default())
                .expect("a corpus"),
        )
    }

    fn model(d: usize, layers: usize, dropout: f64) -> TranslationConfig {
        TranslationConfig {
            d_model: d,
            encoder_layers: layers,
            decoder_layers: layers,
            heads: 4,
            d_ff: 2 * d,
            dropout,
            attention_dropout: 0.0,
            activation_dropout: 0.0,
            norm: NormPlacement::Pre,
            max_positions: 64,
            init_std: None,
            label_smoothing: 0.1,
            output_bias: false,
        }
    }

    fn train_config() -> TranslationTrainConfig {
        TranslationTrainConfig {
            max_tokens: 256,
            lr: 2e-3,
            warmup_updates: 50,
            ..TranslationTrainConfig::default()
        }
    }

    fn trainer(
        corpus: Arc<ParallelCorpus>,
        model: TranslationConfig,
        train: TranslationTrainConfig,
    ) -> TranslationTrainer {
        TranslationTrainer::new(corpus, model, train, DeviceSpec::Cpu).expect("a trainer")
    }

    /// The per-sentence log-probabilities of pair `i`'s targets (target words, then `</s>`)
    /// under `model` (no autodiff, dropout off), by one unbatched full forward.
    fn sentence_log_probs(
        model: &TranslationTransformer,
        corpus: &ParallelCorpus,
        split: Split,
        i: usize,
        device: &Device,
    ) -> Vec<(u32, f64)> {
        let pairs = corpus.split(split);
        let vocab = corpus.vocab();
        let row = |v: Vec<u32>| {
            let n = v.len();
            let v: Vec<i64> = v.into_iter().map(i64::from).collect();
            Tensor::<2, Int>::from_data(TensorData::new(v, [1, n]), device)
        };
        let source = row(pairs.source(i).to_vec());
        let no_pad = Tensor::<2, Int>::zeros(source.dims(), device).equal_elem(1);
        let mut input = vec![vocab.bos()];
        input.extend_from_slice(pairs.target(i));
        let mut output = pairs.target(i).to_vec();
        output.push(vocab.eos());
        let hidden = model.hidden(source, no_pad, row(input), None);
        let lp = log_softmax(model.logits(hidden), 1)
            .try_into_vec_as::<f32>()
            .expect("reads back");
        let n = vocab.len();
        output
            .iter()
            .enumerate()
            .map(|(j, &y)| (y, lp[j * n + y as usize] as f64))
            .collect()
    }

    /// fairseq's `inverse_sqrt` against its closed form: linear from warmup_init_lr over the
    /// warm-up, lr at its end, lr·√(warmup/n) after; update n runs at the rate of n − 1.
    #[test]
    fn translation_trainer_schedule_is_fairseqs_inverse_sqrt() {
        let c = TranslationTrainConfig::default();
        let (lr, init, w) = (5e-4, 1e-7, 4000.0);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1e-12);
        assert!(close(c.inverse_sqrt_lr(0), init));
        assert!(
            close(c.lr_of_update(1), init),
            "the first update at warmup_init_lr"
        );
        assert!(close(
            c.inverse_sqrt_lr(1000),
            init + 1000.0 * (lr - init) / w
        ));
        assert!(close(
            c.inverse_sqrt_lr(3999),
            init + 3999.0 * (lr - init) / w
        ));
        assert!(
            close(c.inverse_sqrt_lr(4000), lr),
            "the peak at the warm-up's end"
        );
        assert!(close(c.lr_of_update(4001), lr));
        assert!(close(c.inverse_sqrt_lr(16000), lr / 2.0));
        assert!(close(
            c.inverse_sqrt_lr(100_000),
            lr * (w / 100_000.0f64).sqrt()
        ));
        // Rising through the warm-up, falling after.
        assert!(c.inverse_sqrt_lr(2000) < c.inverse_sqrt_lr(3000));
        assert!(c.inverse_sqrt_lr(5000) > c.inverse_sqrt_lr(6000));
    }

    /// The evaluation's per-group and total PPL against an independent computation: each pair
    /// run alone through the full forward, log-softmax, each target's log-probability summed by
    /// `group_of`, exp of the mean; the total's positions are the split's target words plus one
    /// `</s>` a pair. The model has dropout, which the evaluation turns off.
    #[test]
    fn translation_trainer_evaluation_is_exact_per_group() {
        let corpus = corpus(10, 200);
        let mut t = trainer(corpus.clone(), model(32, 1, 0.2), train_config());
        for _ in 0..5 {
            t.step().expect("a step");
        }
        let eval = t.evaluate(Split::Valid).expect("evaluates");
        let pairs = corpus.split(Split::Valid);
        let words: usize = (0..pairs.len()).map(|i| pairs.target_len(i)).sum();
        assert_eq!(eval.positions as usize, words + pairs.len());
        assert_eq!(eval.step, 5);

        let valid = t.model().valid();
        let device = DeviceSpec::Cpu.device().expect("flex");
        let mut sums = [0f64; 3];
        let mut counts = [0u64; 3];
        let (mut total, mut n, mut other) = (0f64, 0u64, 0u64);
        for i in 0..pairs.len() {
            for (y, lp) in sentence_log_probs(&valid, &corpus, Split::Valid, i, &device) {
                total -= lp;
                n += 1;
                let g = match corpus.groups().group_of(y) {
                    MtGroup::Frequent => 0,
                    MtGroup::Medium => 1,
                    MtGroup::Rare => 2,
                    _ => {
                        other += 1;
                        continue;
                    }
                };
                sums[g] -= lp;
                counts[g] += 1;
            }
        }
        assert_eq!(n, eval.positions);
        assert_eq!(other, eval.other_positions);
        let rel = |a: f64, b: f64| (a - b).abs() / b.abs();
        let want = (total / n as f64).exp();
        assert!(
            rel(eval.ppl, want) <= 1e-5,
            "total {} against {want}",
            eval.ppl
        );
        for g in 0..3 {
            assert_eq!(eval.groups[g].positions, counts[g], "group {g}");
            assert!(counts[g] > 0, "group {g} has positions");
            let want = (sums[g] / counts[g] as f64).exp();
            let got = eval.groups[g].ppl;
            assert!(rel(got, want) <= 1e-5, "group {g}: {got} against {want}");
        }
        assert!(eval.groups[0].ppl.is_finite() && eval.ppl > 1.0);
    }

    /// The gradient's normalisation: with ε = 0 the objective the update differentiates is the
    /// mean NLL over the batch's target tokens (each pair's log-probabilities computed alone,
    /// summed, over the target words plus one `</s>` a pair), and the step reports it; with
    /// ε = 0.1 it is fairseq's smoothed sum over the same count.
    #[test]
    fn translation_trainer_loss_is_normalised_per_target_token() {
        let corpus = corpus(10, 200);
        for eps in [0.0, 0.1] {
            let mut t = trainer(
                corpus.clone(),
                model(32, 1, 0.0),
                TranslationTrainConfig {
                    label_smoothing: Some(eps),
                    ..train_config()
                },
            );
            let batch = t.train_batch(0, 0).expect("the first batch");
            let device = DeviceSpec::Cpu.device().expect("flex");
            let valid = t.model().valid();
            let n = t.corpus().vocab().len() as f64;
            let (mut nll, mut smooth_extra, mut tokens) = (0f64, 0f64, 0usize);
            for &i in &batch.pairs {
                for (_, lp) in sentence_log_probs(&valid, &corpus, Split::Train, i, &device) {
                    nll -= lp;
                    tokens += 1;
                }
                if eps > 0.0 {
                    // Σ_v −log p(v) at each position, from a fresh forward over all rows.
                    smooth_extra += smooth_sum(&valid, &corpus, i, &device);
                }
            }
            assert_eq!(tokens, batch.target_tokens());
            let eps_i = eps / (n - 1.0);
            let want = ((1.0 - eps - eps_i) * nll + eps_i * smooth_extra) / tokens as f64;
            let loss = t.batch_loss(t.model(), &batch, &t.device.clone());
            assert_eq!(loss.tokens, tokens);
            let got = loss.objective.try_into_vec_as::<f64>().expect("reads")[0];
            assert!(
                (got - want).abs() <= 1e-5 * want,
                "ε {eps}: objective {got} against {want}"
            );
            // The global norm of these gradients, and of them scaled by ½ (the clip's scaling).
            let again = t.batch_loss(t.model(), &batch, &t.device.clone());
            let grads = GradientsParams::from_grads(again.objective.backward(), t.model());
            let read = |g: &GradientsParams| {
                squared_norm(t.model(), g)
                    .expect("gradients")
                    .try_into_vec_as::<f64>()
                    .expect("reads")[0]
                    .sqrt()
            };
            let norm = read(&grads);
            let halved = read(&scale_gradients(t.model(), grads, 0.5));
            assert!(
                (halved - norm / 2.0).abs() <= 1e-5 * norm,
                "{halved} against {norm}"
            );
            let stats = t.step().expect("a step");
            assert!(
                (stats.grad_norm - norm).abs() <= 1e-4 * norm,
                "{} against {norm}",
                stats.grad_norm
            );
            assert_eq!(stats.target_tokens, tokens);
            assert!(
                (stats.loss - want).abs() <= 1e-5 * want,
                "ε {eps}: {}",
                stats.loss
            );
            assert!((stats.nll - nll / tokens as f64).abs() <= 1e-5 * stats.nll);
            if eps == 0.0 {
                assert_eq!(stats.loss, stats.nll);
            }
            assert!(stats.grad_norm > 0.0 && stats.lr == t.config().warmup_init_lr);
        }
    }

    /// Σ over pair `i`'s target positions of Σ_v −log p(v).
    fn smooth_sum(
        model: &TranslationTransformer,
        corpus: &ParallelCorpus,
        i: usize,
        device: &Device,
    ) -> f64 {
        let pairs = corpus.split(Split::Train);
        let vocab = corpus.vocab();
        let row = |v: Vec<u32>| {
            let n = v.len();
            let v: Vec<i64> = v.into_iter().map(i64::from).collect();
            Tensor::<2, Int>::from_data(TensorData::new(v, [1, n]), device)
        };
        let source = row(pairs.source(i).to_vec());
        let no_pad = Tensor::<2, Int>::zeros(source.dims(), device).equal_elem(1);
        let mut input = vec![vocab.bos()];
        input.extend_from_slice(pairs.target(i));
        let hidden = model.hidden(source, no_pad, row(input), None);
        let lp = log_softmax(model.logits(hidden), 1)
            .try_into_vec_as::<f32>()
            .expect("reads back");
        -lp.iter().map(|&v| v as f64).sum::<f64>()
    }

    /// The data order is a pure function of (data_seed, epoch, k): two trainers with one
    /// data_seed give the same batches in every epoch (the batcher's own), another data_seed
    /// other ones; the updates walk the epochs in order.
    #[test]
    fn translation_trainer_data_order_resumes_exactly() {
        let corpus = corpus(10, 200);
        let seeded = |data_seed| {
            trainer(
                corpus.clone(),
                model(16, 1, 0.1),
                TranslationTrainConfig {
                    data_seed,
                    seed: data_seed + 100,
                    ..train_config()
                },
            )
        };
        let (a, b, c) = (seeded(3), seeded(3), seeded(4));
        let per_epoch = a.batches_per_epoch();
        assert!(per_epoch >= 4, "{per_epoch} batches");
        let options = TokenBatchOptions {
            max_tokens: 256,
            max_sentences: None,
            long_pairs: LongPairs::Refuse,
        };
        let batcher = TokenBatcher::new(&corpus, Split::Train, &options, 3).expect("batches");
        let mut differs = false;
        for epoch in [0u64, 1, 5] {
            let own: Vec<PairBatch> = batcher.epoch(epoch).collect();
            assert_eq!(own.len(), per_epoch);
            for (k, want) in own.iter().enumerate() {
                let got = a.train_batch(epoch, k).expect("a batch");
                assert_eq!(&got, want, "epoch {epoch} batch {k}");
                assert_eq!(b.train_batch(epoch, k).expect("a batch"), got);
                differs |= c.train_batch(epoch, k).expect("a batch") != got;
            }
        }
        assert!(differs, "another data_seed, another order");
        // Epochs of one seed differ from each other.
        let order = |e| -> Vec<Vec<usize>> {
            (0..per_epoch)
                .map(|k| a.train_batch(e, k).expect("a batch").pairs)
                .collect()
        };
        assert_ne!(order(0), order(1));
        // The updates take epoch 0's batches, then epoch 1's.
        let mut stepping = seeded(3);
        let mut seen = Vec::new();
        for _ in 0..per_epoch + 2 {
            let s = stepping.num_updates();
            let want = a
                .train_batch(s / per_epoch as u64, (s % per_epoch as u64) as usize)
                .expect("a batch");
            let stats = stepping.step().expect("a step");
            assert_eq!(stats.target_tokens, want.target_tokens());
            seen.push(want.pairs);
        }
        assert_eq!(seen[per_epoch], order(1)[0]);
        assert!(
            (stepping.step().expect("a step").epoch - (per_epoch + 3) as f64 / per_epoch as f64)
                .abs()
                < 1e-12
        );
    }

    /// Absurd settings are refused in one line naming the field.
    #[test]
    fn translation_trainer_refuses_bad_settings_in_one_line() {
        let corpus = corpus(10, 50);
        let bad = [
            (
                TranslationTrainConfig {
                    max_tokens: 0,
                    ..train_config()
                },
                "max_tokens 0",
            ),
            (
                TranslationTrainConfig {
                    lr: -1.0,
                    ..train_config()
                },
                "lr -1",
            ),
            (
                TranslationTrainConfig {
                    lr: f64::NAN,
                    ..train_config()
                },
                "lr NaN",
            ),
            (
                TranslationTrainConfig {
                    warmup_updates: 0,
                    ..train_config()
                },
                "warmup_updates 0",
            ),
            (
                TranslationTrainConfig {
                    warmup_init_lr: 1.0,
                    ..train_config()
                },
                "warmup_init_lr 1",
            ),
            (
                TranslationTrainConfig {
                    beta2: 1.0,
                    ..train_config()
                },
                "betas 0.9,1",
            ),
            (
                TranslationTrainConfig {
                    epsilon: 0.0,
                    ..train_config()
                },
                "epsilon 0",
            ),
            (
                TranslationTrainConfig {
                    weight_decay: -0.1,
                    ..train_config()
                },
                "weight_decay -0.1",
            ),
            (
                TranslationTrainConfig {
                    clip_norm: f64::INFINITY,
                    ..train_config()
                },
                "clip_norm inf",
            ),
            (
                TranslationTrainConfig {
                    label_smoothing: Some(1.0),
                    ..train_config()
                },
                "label_smoothing 1",
            ),
            (
                TranslationTrainConfig {
                    max_sentences: Some(0),
                    ..train_config()
                },
                "max_sentences 0",
            ),
        ];
        for (config, names) in bad {
            let e =
                TranslationTrainer::new(corpus.clone(), model(16, 1, 0.1), config, DeviceSpec::Cpu)
                    .err()
                    .expect("refused")
                    .to_string();
            assert!(e.contains(names), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        // The model's settings and the positions it has.
        let mut m = model(16, 1, 0.1);
        m.heads = 3;
        let e = TranslationTrainer::new(corpus.clone(), m, train_config(), DeviceSpec::Cpu)
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("model.d_model 16") && !e.contains('\n'), "{e}");
        let mut m = model(16, 1, 0.1);
        m.max_positions = 4;
        let e = TranslationTrainer::new(corpus.clone(), m, train_config(), DeviceSpec::Cpu)
            .err()
            .expect("refused")
            .to_string();
        assert!(
            e.contains("model.max_positions 4") && !e.contains('\n'),
            "{e}"
        );
        // Settings parse from TOML with the recipe's defaults, and unknown keys are refused.
        let parsed: TranslationTrainConfig = toml::from_str("lr = 0.001\n").expect("parses");
        assert_eq!(
            parsed,
            TranslationTrainConfig {
                lr: 1e-3,
                ..TranslationTrainConfig::default()
            }
        );
        assert!(toml::from_str::<TranslationTrainConfig>("learning_rate = 1\n").is_err());
        // BLEU needs reference text, which train does not keep.
        let t = trainer(corpus, model(16, 1, 0.1), train_config());
        let e = t
            .bleu(Split::Train, Decoding::Greedy)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("train split keeps no reference"), "{e}");
    }

    /// Training works: on a tiny synthetic-mt (10 word types a side, 2–6 words, adjacent words
    /// swapped) the loss falls and greedy BLEU on valid reaches 90 within a bounded number of
    /// updates; beam search then scores about as high, and the length bound a·|src| + b holds.
    #[test]
    fn translation_trainer_learns_synthetic_mt_to_bleu_90() {
        let corpus = corpus(10, 1500);
        let start = Instant::now();
        let mut t = trainer(
            corpus.clone(),
            model(32, 1, 0.0),
            TranslationTrainConfig {
                max_tokens: 512,
                lr: 8e-3,
                warmup_updates: 60,
                label_smoothing: Some(0.1),
                ..TranslationTrainConfig::default()
            },
        );
        let first = t.step().expect("a step");
        let mut last = first.clone();
        let mut reached = None;
        let limit = 1000;
        while t.num_updates() < limit {
            for _ in 0..100 {
                last = t.step().expect("a step");
            }
            let (bleu, _, _) = t.bleu(Split::Valid, Decoding::Greedy).expect("BLEU");
            eprintln!(
                "update {}: {:.1} ms, loss {:.3}, nll {:.3}, greedy BLEU {:.2} ({:.1} s)",
                t.num_updates(),
                last.ms,
                last.loss,
                last.nll,
                bleu.score,
                start.elapsed().as_secs_f64()
            );
            if bleu.score >= 90.0 {
                reached = Some((t.num_updates(), bleu));
                break;
            }
        }
        let (updates, bleu) = reached.expect("greedy BLEU ≥ 90 within the limit");
        assert!(
            last.loss < first.loss / 2.0,
            "{} → {}",
            first.loss,
            last.loss
        );
        let eval = t.evaluate(Split::Valid).expect("evaluates");
        let (beam, chrf, hyps) = t
            .bleu(
                Split::Valid,
                Decoding::Beam {
                    beam: 4,
                    lenpen: 1.0,
                },
            )
            .expect("beam BLEU");
        eprintln!(
            "greedy BLEU {:.2} after {updates} updates in {:.1} s; beam BLEU {:.2} ({}), chrF {:.2}; valid PPL {:.3} (groups {:.3} {:.3} {:.3})",
            bleu.score,
            start.elapsed().as_secs_f64(),
            beam.score,
            beam.signature(),
            chrf.score,
            eval.ppl,
            eval.groups[0].ppl,
            eval.groups[1].ppl,
            eval.groups[2].ppl,
        );
        assert!(beam.score >= 85.0, "beam {}", beam.score);
        assert!(beam.signature().contains("tok:none"));
        let pairs = corpus.split(Split::Valid);
        assert_eq!(hyps.len(), pairs.len());
        let exact = (0..pairs.len())
            .filter(|&i| pairs.reference(i) == Some(hyps[i].as_str()))
            .count();
        assert!(2 * exact > pairs.len(), "{exact} of {} exact", pairs.len());
        for (a, b) in [(0.0, 1), (0.5, 0)] {
            for how in [
                Decoding::Greedy,
                Decoding::Beam {
                    beam: 3,
                    lenpen: 1.0,
                },
            ] {
                let short = t.translate(Split::Valid, how, a, b).expect("decodes");
                for (i, h) in short.iter().enumerate() {
                    let cap = (a * pairs.source_len(i) as f64 + b as f64).floor() as usize;
                    let words = h.split_whitespace().count();
                    assert!(
                        words <= cap,
                        "{how:?} {a} {b}: {words} words for a cap of {cap}"
                    );
                }
            }
        }
        assert!(eval.ppl < 2.0, "valid PPL {}", eval.ppl);
    }
}
