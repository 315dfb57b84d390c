//! `conelab bench translate`: a translation model's training throughput (target tokens a second
//! over fairseq-style token batches) and its decoding speed (greedy and beam sentences a second on
//! the valid split), with the process's peak memory — the figures issue #59 item 6 asks for, on
//! whatever corpus the user names (Multi30k, their own, or synthetic-mt).

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use conelab_core::model::{DeviceSpec, TranslationConfig};
use conelab_data::{ParallelCorpus, Split};
use conelab_train::engine::EngineError;
use conelab_train::translation_trainer::{Decoding, TranslationTrainConfig, TranslationTrainer};

use crate::peak_rss_mib;

#[derive(Debug, Clone)]
pub struct TranslationBench {
    pub model_name: String,
    pub model: TranslationConfig,
    pub corpus: Arc<ParallelCorpus>,
    pub device: DeviceSpec,
    pub max_tokens: usize,
    pub warmup: u64,
    pub steps: u64,
    pub seed: u64,
    pub beam: usize,
    /// The decoders' length cap a·|src| + b (fairseq's max_len_a, max_len_b).
    pub max_len: (f64, usize),
}

#[derive(Debug, Clone, Serialize)]
pub struct TranslationBenchResult {
    pub model: String,
    pub device: String,
    pub corpus: String,
    pub pair: String,
    pub vocab: usize,
    pub parameters: usize,
    pub max_tokens: usize,
    pub steps: u64,
    /// Target tokens (`</s>` included) the timed updates trained on, a second.
    pub target_tokens_per_sec: f64,
    pub ms_per_step: f64,
    pub ms_per_step_std: f64,
    pub valid_sentences: usize,
    pub greedy_sentences_per_sec: f64,
    pub beam: usize,
    pub beam_sentences_per_sec: f64,
    /// Words the beam produced, a second (an untrained model's run to the length cap).
    pub beam_words_per_sec: f64,
    pub max_len_a: f64,
    pub max_len_b: usize,
    pub peak_rss_mib: f64,
}

pub fn bench_translation(b: &TranslationBench) -> Result<TranslationBenchResult, EngineError> {
    let train = TranslationTrainConfig {
        max_tokens: b.max_tokens,
        seed: b.seed,
        data_seed: b.seed,
        ..TranslationTrainConfig::default()
    };
    let mut trainer =
        TranslationTrainer::new(Arc::clone(&b.corpus), b.model.clone(), train, b.device)?;
    for _ in 0..b.warmup {
        trainer.step()?;
    }
    let mut times = Vec::with_capacity(b.steps as usize);
    let mut tokens = 0usize;
    let start = Instant::now();
    for _ in 0..b.steps {
        let s = trainer.step()?;
        tokens += s.target_tokens;
        times.push(s.ms);
    }
    let total = start.elapsed().as_secs_f64();
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let var = times.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / times.len().max(1) as f64;
    let (a, len_b) = b.max_len;
    let sentences = b.corpus.split(Split::Valid).len();
    let timed = |how: Decoding| -> Result<(f64, usize), EngineError> {
        let t = Instant::now();
        let out = trainer.translate(Split::Valid, how, a, len_b)?;
        let words = out.iter().map(|h| h.split_whitespace().count()).sum();
        Ok((t.elapsed().as_secs_f64(), words))
    };
    let (greedy_secs, _) = timed(Decoding::Greedy)?;
    let (beam_secs, beam_words) = timed(Decoding::Beam {
        beam: b.beam,
        lenpen: 1.0,
    })?;
    Ok(TranslationBenchResult {
        model: b.model_name.clone(),
        device: b.device.to_string(),
        corpus: b.corpus.name().to_string(),
        pair: b.corpus.pair(),
        vocab: b.corpus.vocab().len(),
        parameters: trainer.parameters(),
        max_tokens: b.max_tokens,
        steps: b.steps,
        target_tokens_per_sec: tokens as f64 / total.max(1e-9),
        ms_per_step: mean,
        ms_per_step_std: var.sqrt(),
        valid_sentences: sentences,
        greedy_sentences_per_sec: sentences as f64 / greedy_secs.max(1e-9),
        beam: b.beam,
        beam_sentences_per_sec: sentences as f64 / beam_secs.max(1e-9),
        beam_words_per_sec: beam_words as f64 / beam_secs.max(1e-9),
        max_len_a: a,
        max_len_b: len_b,
        peak_rss_mib: peak_rss_mib(),
    })
}

impl TranslationBenchResult {
    pub fn render(&self) -> String {
        format!(
            "translation benchmark: {} on {} ({}), {}, vocabulary {}, {} parameters\n\
             train   {} timed updates of ≤ {} tokens: {:.0} target tokens/s, {:.1} ± {:.1} ms/update\n\
             decode  {} valid sentences, length ≤ {}·|src| + {}: greedy {:.1} sentences/s, beam {} {:.1} sentences/s ({:.0} words/s)\n\
             memory  peak RSS {:.0} MiB\n",
            self.model,
            self.corpus,
            self.pair,
            self.device,
            self.vocab,
            self.parameters,
            self.steps,
            self.max_tokens,
            self.target_tokens_per_sec,
            self.ms_per_step,
            self.ms_per_step_std,
            self.valid_sentences,
            self.max_len_a,
            self.max_len_b,
            self.greedy_sentences_per_sec,
            self.beam,
            self.beam_sentences_per_sec,
            self.beam_words_per_sec,
            self.peak_rss_mib,
        )
    }
}
