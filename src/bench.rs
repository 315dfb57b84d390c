//! `conelab bench …`: throughput measured after warm-up, printed as a table or JSON.

use std::sync::Arc;
use std::time::Instant;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde::Serialize;

use crate::data::{Corpus, LoadOptions, SplitText};
use crate::engine::{EngineError, TrainConfig, Trainer};
use crate::model::{DeviceSpec, ModelConfig};

#[derive(Debug, Clone)]
pub struct TrainBench {
    pub model_name: String,
    pub model: ModelConfig,
    pub device: DeviceSpec,
    pub batch: usize,
    /// Total vocabulary size N (word types + `<eos>` + `<unk>`).
    pub vocab: usize,
    pub warmup: u64,
    pub steps: u64,
    pub seed: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TrainBenchResult {
    pub engine: String,
    pub model: String,
    pub device: String,
    pub batch: usize,
    pub window: usize,
    pub vocab: usize,
    pub parameters: usize,
    pub steps: u64,
    pub tokens_per_sec: f64,
    pub ms_per_step: f64,
    pub ms_per_step_std: f64,
    pub peak_rss_mib: f64,
}

/// A corpus of uniformly random words: what the PyTorch reference trains on, and big enough that
/// every one of the `vocab − 2` word types occurs in train (so N is exactly `vocab`).
pub fn random_corpus(
    vocab: usize,
    min_train_tokens: usize,
    seed: u64,
) -> Result<Corpus, EngineError> {
    if vocab < 3 {
        return Err(EngineError::Config(format!(
            "vocabulary {vocab} must be at least 3 (<eos>, <unk> and one word)"
        )));
    }
    let words = vocab - 2;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut text = |tokens: usize| {
        let mut s = String::with_capacity(tokens * 7);
        for i in 0..tokens {
            s.push('w');
            s.push_str(&(rng.next_u64() % words as u64).to_string());
            s.push(if i % 63 == 62 { '\n' } else { ' ' });
        }
        s.push('\n');
        s
    };
    let train_tokens = min_train_tokens.max(25 * words);
    let held_out = (train_tokens / 20).max(2_000);
    let split = |name: &str, s: String| {
        SplitText::from_bytes(
            format!("random/{name}.txt").into(),
            s.into_bytes(),
            usize::MAX,
        )
    };
    // Every word must occur so that N is exact; top up any that the draw missed.
    let mut train = text(train_tokens);
    train.extend((0..words).map(|w| format!("w{w} ")));
    train.push('\n');
    let valid = text(held_out);
    let test = text(held_out);
    Ok(Corpus::from_texts(
        "random".into(),
        split("train", train)?,
        split("valid", valid)?,
        split("test", test)?,
        &LoadOptions::default(),
    )?)
}

pub fn bench_train(b: &TrainBench) -> Result<TrainBenchResult, EngineError> {
    let window = b.model.window();
    let needed = (b.warmup + b.steps + 2) as usize * b.batch * window;
    let corpus = Arc::new(random_corpus(b.vocab, needed, b.seed)?);
    let config = TrainConfig {
        batch: b.batch,
        steps: b.warmup + b.steps,
        seed: b.seed,
        eval_every: 0,
        checkpoint_every: 0,
        snapshot_every: 0,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(corpus, b.model.clone(), config, b.device)?;
    for _ in 0..b.warmup {
        trainer.train_step()?;
    }
    let mut times = Vec::with_capacity(b.steps as usize);
    let start = Instant::now();
    for _ in 0..b.steps {
        let t = Instant::now();
        trainer.train_step()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let total = start.elapsed().as_secs_f64();
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let var = times.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / times.len().max(1) as f64;
    Ok(TrainBenchResult {
        engine: "conelab".into(),
        model: b.model_name.clone(),
        device: b.device.to_string(),
        batch: b.batch,
        window,
        vocab: trainer.corpus().vocab().len(),
        parameters: trainer.parameters(),
        steps: b.steps,
        tokens_per_sec: (b.steps as usize * b.batch * window) as f64 / total,
        ms_per_step: mean,
        ms_per_step_std: var.sqrt(),
        peak_rss_mib: peak_rss_mib(),
    })
}

/// Peak resident set size of this process (VmHWM), in MiB; NaN where /proc is unavailable.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}
