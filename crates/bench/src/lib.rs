//! `conelab bench …`: throughput measured after warm-up, printed as a table or JSON.

pub mod attach;
pub mod chaos;
pub mod chaos_phases;
pub mod ops;
pub mod runs;
pub mod translation;
pub mod tui;

use std::sync::Arc;
use std::time::Instant;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde::Serialize;

use conelab_core::model::{DeviceSpec, ModelConfig};
use conelab_core::objective::Objectives;
use conelab_core::train_config::Precision;
use conelab_core::train_config::TrainConfig;
use conelab_data::{Corpus, LoadOptions, SplitText};
use conelab_train::engine::{EngineError, Trainer};

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
    /// LSTM layers in burn's graph instead of on the host (`Trainer::set_host_lstm`).
    pub graph_lstm: bool,
    pub precision: Precision,
    /// Every step's loss read back before the next step is dispatched (the engine's pipeline
    /// off, `Trainer::set_pipelining`), where the run would pipeline.
    pub step_sync: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct TrainBenchResult {
    pub engine: String,
    pub model: String,
    pub device: String,
    pub precision: String,
    pub batch: usize,
    pub window: usize,
    pub vocab: usize,
    pub parameters: usize,
    pub steps: u64,
    pub tokens_per_sec: f64,
    pub ms_per_step: f64,
    pub ms_per_step_std: f64,
    pub peak_rss_mib: f64,
    /// The process's CPU time over the timed steps as a share of one core (NaN off Linux).
    pub cpu_percent: f64,
    /// On CUDA, as the driver reports it (NVML) over the timed steps, sampled every 50 ms: the
    /// device's mean utilisation and its peak memory in use (every process's).
    pub gpu_util_percent: Option<f64>,
    pub gpu_mem_peak_mib: Option<f64>,
}

/// A corpus of uniformly random words: what the PyTorch reference trains on, and big enough that
/// every one of the `vocab − 2` word types occurs in train (so N is exactly `vocab`).
pub fn random_corpus(
    vocab: usize,
    min_train_tokens: usize,
    seed: u64,
) -> Result<Corpus, EngineError> {
    if vocab < 3 {
        return Err(EngineError::Config(
            format!("vocabulary {vocab} must be at least 3 (<eos>, <unk> and one word)").into(),
        ));
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

/// A trainer of `model` for `steps` steps on random tokens (enough for all of them), with no
/// evaluation, checkpoint or snapshot to time along.
pub(crate) fn random_trainer(
    model: &ModelConfig,
    device: DeviceSpec,
    batch: usize,
    vocab: usize,
    seed: u64,
    steps: u64,
    precision: Precision,
) -> Result<Trainer, EngineError> {
    let needed = (steps + 2) as usize * batch * model.window();
    let corpus = Arc::new(random_corpus(vocab, needed, seed)?);
    let config = TrainConfig {
        batch,
        steps,
        seed,
        eval_every: 0,
        checkpoint_every: 0,
        snapshot_every: 0,
        precision,
        ..TrainConfig::default()
    };
    Trainer::new(corpus, model.clone(), config, device)
}

pub fn bench_train(b: &TrainBench) -> Result<TrainBenchResult, EngineError> {
    let window = b.model.window();
    let mut trainer = random_trainer(
        &b.model,
        b.device,
        b.batch,
        b.vocab,
        b.seed,
        b.warmup + b.steps,
        b.precision,
    )?;
    trainer.set_host_lstm(!b.graph_lstm);
    trainer.set_pipelining(!b.step_sync);
    let pipelined = trainer.pipelines();
    // As the engine steps: pipelined where the run allows it (each call dispatches a step and
    // reads the one before back), the last step read back inside the timed span.
    let step = |trainer: &mut Trainer| -> Result<(), EngineError> {
        let back = trainer.step_pipelined()?;
        match back.diverged {
            Some((step, loss)) => Err(EngineError::Diverged { step, loss }),
            None => Ok(()),
        }
    };
    for _ in 0..b.warmup {
        step(&mut trainer)?;
    }
    trainer.settle()?;
    let mut times = Vec::with_capacity(b.steps as usize);
    let mut cpu = conelab_base::system::CpuSampler::new();
    cpu.sample();
    let gpu = GpuWatch::start(&b.device.to_string());
    let start = Instant::now();
    for _ in 0..b.steps {
        let t = Instant::now();
        step(&mut trainer)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    trainer.settle()?;
    let total = start.elapsed().as_secs_f64();
    let cpu_percent = cpu.sample().map_or(f64::NAN, |s| s.cpu_percent);
    let (gpu_util_percent, gpu_mem_peak_mib) = gpu.map_or((None, None), GpuWatch::stop);
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let var = times.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / times.len().max(1) as f64;
    Ok(TrainBenchResult {
        engine: if b.graph_lstm && matches!(b.model, ModelConfig::Lstm(_)) {
            "conelab (graph LSTM)".into()
        } else if b.step_sync && !pipelined && b.device != DeviceSpec::Cpu {
            "conelab (step sync)".into()
        } else {
            "conelab".into()
        },
        model: b.model_name.clone(),
        device: b.device.to_string(),
        precision: b.precision.to_string(),
        batch: b.batch,
        window,
        vocab: trainer.corpus().vocab().len(),
        parameters: trainer.parameters(),
        steps: b.steps,
        tokens_per_sec: (b.steps as usize * b.batch * window) as f64 / total,
        // Pipelined, a call's time is the host's (the device may lag a step): the mean over
        // the whole timed span is the step's; the spread is the calls'.
        ms_per_step: if pipelined {
            total * 1e3 / b.steps.max(1) as f64
        } else {
            mean
        },
        ms_per_step_std: var.sqrt(),
        peak_rss_mib: peak_rss_mib(),
        cpu_percent,
        gpu_util_percent,
        gpu_mem_peak_mib,
    })
}

/// The device's load while the timed steps run, sampled on a thread of its own (NVML's calls
/// stay out of the steps' time).
struct GpuWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<(Option<f64>, Option<f64>)>>,
}

impl GpuWatch {
    /// None where `device` is not CUDA or the driver does not answer.
    fn start(device: &str) -> Option<Self> {
        use std::sync::atomic::Ordering;
        let sampler = conelab_run::gpu::GpuSampler::open(device)?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("bench-gpu".into())
            .spawn(move || {
                let (mut util, mut peak) = (Vec::new(), 0u64);
                while !flag.load(Ordering::Relaxed) {
                    if let Some(s) = sampler.sample() {
                        if s.util_percent.is_finite() {
                            util.push(s.util_percent);
                        }
                        peak = peak.max(s.mem_used_bytes);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                let mean = (!util.is_empty()).then(|| util.iter().sum::<f64>() / util.len() as f64);
                (mean, (peak > 0).then(|| peak as f64 / (1024.0 * 1024.0)))
            })
            .ok()?;
        Some(Self {
            stop,
            thread: Some(thread),
        })
    }

    fn stop(mut self) -> (Option<f64>, Option<f64>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or((None, None))
    }
}

/// A bench that ends in an error (a divergence) stops the sampling thread too.
impl Drop for GpuWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
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

/// `conelab bench metrics`: the embedding panel and neighbour queries on a random W of a given
/// size, with a cone (a shared offset) and a rare group that drifts further out, like a trained
/// tied embedding.
#[derive(Debug, Clone)]
pub struct MetricsBench {
    pub n: usize,
    pub d: usize,
    pub repeats: usize,
    pub queries: usize,
    pub seed: u64,
    /// Also time faer's thin SVD of W (f64) as the reference the issue quotes.
    pub reference: bool,
    /// Plant this many interior rows and time the exact stolen-row decision (0: not timed).
    pub stolen: usize,
    /// Also time the live second tier on one thread.
    pub second_tier: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum MetricsBenchError {
    #[error(transparent)]
    Matrix(#[from] conelab_metrics::MatrixError),
    #[error(transparent)]
    Hull(#[from] conelab_metrics::hull::HullError),
    #[error(transparent)]
    SecondTier(#[from] conelab_core::analysis::SecondTierError),
}

#[derive(Debug, Clone, Serialize)]
pub struct MetricsBenchRow {
    pub what: String,
    /// Median over the repeats, milliseconds.
    pub ms: f64,
    pub min_ms: f64,
    /// Peak extra memory allocated during the operation (its result included), in units of
    /// W's size (f32).
    pub peak_extra_w: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MetricsBenchResult {
    pub n: usize,
    pub d: usize,
    pub w_mib: f64,
    pub threads: usize,
    pub rows: Vec<MetricsBenchRow>,
}

/// A random W with a cone and a drifting rare group (row-major, f32).
pub fn random_embeddings(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut normal = move || {
        let u = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let v = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    };
    let direction: Vec<f64> = (0..d).map(|_| normal()).collect();
    let len = direction.iter().map(|x| x * x).sum::<f64>().sqrt();
    let mut w = Vec::with_capacity(n * d);
    for i in 0..n {
        // The offset along the cone axis grows with rank: rare rows sit furthest out.
        let shift = 0.5 + 1.5 * i as f64 / n as f64;
        for &dir in &direction {
            w.push((0.3 * normal() + shift * dir / len) as f32);
        }
    }
    w
}

/// Replaces `count` rows of `w` (row-major n × d) by convex combinations of 2–10 other rows
/// that are not replaced (weights: normalised exponential draws); returns the replaced rows.
pub fn plant_interior_rows(
    w: &mut [f32],
    n: usize,
    d: usize,
    count: usize,
    seed: u64,
) -> Vec<usize> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x091a_47ed);
    let count = count.min(n / 2);
    let mut order: Vec<usize> = (0..n).collect();
    for i in 0..count {
        let j = i + (rng.next_u64() % (n - i) as u64) as usize;
        order.swap(i, j);
    }
    let (planted, sources) = order.split_at(count);
    for &row in planted {
        let k = 2 + (rng.next_u64() % 9) as usize;
        let picks: Vec<usize> = (0..k)
            .map(|_| sources[(rng.next_u64() % sources.len() as u64) as usize])
            .collect();
        let weights: Vec<f64> = (0..k)
            .map(|_| -(((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64).ln())
            .collect();
        let total: f64 = weights.iter().sum();
        for c in 0..d {
            let v: f64 = picks
                .iter()
                .zip(&weights)
                .map(|(&p, &l)| l / total * f64::from(w[p * d + c]))
                .sum();
            w[row * d + c] = v as f32;
        }
    }
    let mut planted = planted.to_vec();
    planted.sort_unstable();
    planted
}

/// Times `repeats` runs of `f`; the last run also measures the peak of bytes allocated (after
/// the first run, so per-thread scratch that gemm keeps for the life of a thread is not charged
/// to every computation).
fn time_it<T>(repeats: usize, w_mib: f64, mut f: impl FnMut() -> T) -> (Vec<f64>, Option<f64>, T) {
    let mut times = Vec::with_capacity(repeats);
    for _ in 1..repeats.max(2) {
        let t = Instant::now();
        std::hint::black_box(f());
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let t = Instant::now();
    let (last, peak) = conelab_base::alloc_count::peak_extra_bytes(&mut f);
    times.push(t.elapsed().as_secs_f64() * 1e3);
    let extra = peak.map(|bytes| bytes as f64 / (1024.0 * 1024.0) / w_mib);
    (times, extra, last)
}

fn summarise(what: &str, mut times: Vec<f64>, peak_extra_w: Option<f64>) -> MetricsBenchRow {
    times.sort_by(f64::total_cmp);
    MetricsBenchRow {
        what: what.into(),
        ms: times[times.len() / 2],
        min_ms: times[0],
        peak_extra_w,
    }
}

pub fn bench_metrics(b: &MetricsBench) -> Result<MetricsBenchResult, MetricsBenchError> {
    use conelab_data::{FrequencyGroups, GroupBounds};
    use conelab_metrics::{
        EmbeddingPanel, Embeddings, NeighborIndex, PanelOptions, ProjectionMode, RowGroups,
        Similarity, Threads,
    };
    let data = random_embeddings(b.n, b.d, b.seed);
    let w = Embeddings::new(b.n, b.d, &data)?;
    let w_mib = (b.n * b.d * 4) as f64 / (1024.0 * 1024.0);
    let groups = RowGroups::from_ranks(&FrequencyGroups::new(b.n, GroupBounds::default()));
    let mut rows = Vec::new();
    let options = |projection| PanelOptions {
        projection,
        also_centred: false,
        scale_free: true,
        threads: Threads::All,
    };
    let (t, m, _) = time_it(b.repeats, w_mib, || {
        EmbeddingPanel::compute(w, Some(&groups), &options(Some(ProjectionMode::Uncentred)))
    });
    rows.push(summarise(
        "full panel: total + 3 groups, uncentred 2-D projection",
        t,
        m,
    ));
    // The same without the scale-free measures (unit-row I1/I2, IsoScore): what they cost.
    let (t, m, _) = time_it(b.repeats, w_mib, || {
        EmbeddingPanel::compute(
            w,
            Some(&groups),
            &PanelOptions {
                scale_free: false,
                ..options(Some(ProjectionMode::Uncentred))
            },
        )
    });
    rows.push(summarise(
        "  the same without unit-row I1/I2 and IsoScore",
        t,
        m,
    ));
    let (t, m, _) = time_it(b.repeats, w_mib, || {
        EmbeddingPanel::compute(w, None, &options(None))
    });
    rows.push(summarise("total only (I1, I2, spectrum, cone)", t, m));
    let (t, m, _) = time_it(b.repeats, w_mib, || {
        EmbeddingPanel::compute(w, None, &options(Some(ProjectionMode::Centred)))
    });
    rows.push(summarise("total + centred PCA projection", t, m));
    let (t, m, index) = time_it(b.repeats, w_mib, || NeighborIndex::new(w, Threads::All));
    rows.push(summarise("neighbour index (unit rows)", t, m));
    let mut rng = ChaCha8Rng::seed_from_u64(b.seed ^ 0x5eed);
    let ids: Vec<u32> = (0..b.queries.max(1))
        .map(|_| (rng.next_u64() % b.n as u64) as u32)
        .collect();
    for (name, sim) in [
        ("one top-10 cosine query", Similarity::Cosine),
        ("one top-10 euclidean query", Similarity::Euclidean),
    ] {
        let mut times = Vec::with_capacity(ids.len());
        for &id in &ids {
            let t = Instant::now();
            std::hint::black_box(index.query(id, 10, sim));
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        rows.push(summarise(name, times, None));
    }
    if b.second_tier {
        // The live slower tier as the metrics thread runs it: one thread, every all-pairs
        // measure; it is due when ten times its last duration has passed, so its budget is a
        // tenth of that thread, whatever this time is.
        let (t, m, tier) = time_it(1, w_mib, || {
            conelab_core::analysis::second_tier_stats(w, &groups, None, Threads::Sequential)
        });
        let tier = tier?;
        rows.push(summarise(
            &format!(
                "second tier, one thread (neighbour mix + TwoNN + stolen bound ≤ {}): runs when 10× this has passed",
                tier.stolen_at_most.iter().sum::<usize>()
            ),
            t,
            m,
        ));
    }
    if b.stolen > 0 {
        // `inspect --stolen`'s work: `stolen` rows replaced by convex combinations of others
        // (random rows are all vertices, so the planted ones are what there is to find).
        let mut planted_data = data.clone();
        let planted = plant_interior_rows(&mut planted_data, b.n, b.d, b.stolen, b.seed);
        let pw = Embeddings::new(b.n, b.d, &planted_data)?;
        let (t, m, verdicts) = time_it(1, w_mib, || {
            conelab_metrics::hull::stolen_rows(pw, None, Threads::All, &mut |_, _| {})
        });
        let verdicts = verdicts?;
        use conelab_metrics::hull::RowVerdict;
        let found = verdicts
            .iter()
            .filter(|v| **v == RowVerdict::Stolen)
            .count();
        let found_planted = planted
            .iter()
            .filter(|&&i| verdicts[i] == RowVerdict::Stolen)
            .count();
        let undecided = verdicts
            .iter()
            .filter(|v| **v == RowVerdict::Undecided)
            .count();
        rows.push(summarise(
            &format!(
                "stolen rows, exact (inspect --stolen): {} planted; {found} stolen ({found_planted} of them planted), {undecided} undecided",
                b.stolen
            ),
            t,
            m,
        ));
        let (t, m, bound) = time_it(1, w_mib, || {
            conelab_metrics::hull::can_win_upper_bound(pw, None, Threads::All)
        });
        let bound = bound?;
        rows.push(summarise(
            &format!(
                "  the cheap test alone (the live upper bound): stolen ≤ {}",
                bound.stolen_at_most()
            ),
            t,
            m,
        ));
    }
    if b.reference {
        let (t, m, _) = time_it(1, w_mib, || {
            let w64 = faer::Mat::<f64>::from_fn(b.n, b.d, |i, j| data[i * b.d + j] as f64);
            w64.thin_svd()
                .map(|s| s.S().column_vector().iter().copied().sum::<f64>())
        });
        rows.push(summarise("reference: faer thin SVD of W (f64)", t, m));
    }
    Ok(MetricsBenchResult {
        n: b.n,
        d: b.d,
        w_mib,
        threads: rayon::current_num_threads(),
        rows,
    })
}

/// `conelab bench objectives`: the step time of every objective relative to MLE, one trainer per
/// objective stepped round-robin, on a random corpus of a given vocabulary.
#[derive(Debug, Clone)]
pub struct ObjectivesBench {
    pub model_name: String,
    pub model: ModelConfig,
    pub device: DeviceSpec,
    pub batch: usize,
    pub vocab: usize,
    /// Rounds over all objectives; each round times `steps` steps of each.
    pub rounds: usize,
    pub steps: usize,
    pub seed: u64,
    /// LSTM layers in burn's graph instead of on the host (`Trainer::set_host_lstm`).
    pub graph_lstm: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ObjectiveBenchRow {
    pub objective: String,
    /// Median ms per step over all timed steps.
    pub ms_per_step: f64,
    /// Median over rounds of (this objective's median / MLE's median in the same round).
    pub ratio_to_mle: f64,
    /// The target for the ratio, if it sets one.
    pub goal: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ObjectivesBenchResult {
    pub model: String,
    pub device: String,
    pub batch: usize,
    pub window: usize,
    pub vocab: usize,
    pub rounds: usize,
    pub steps: usize,
    pub rows: Vec<ObjectiveBenchRow>,
}

/// The objectives compared, with their goals (ratio to MLE).
fn bench_objective_set(tokens_per_update: usize, vocab: usize) -> Vec<(Objectives, Option<f64>)> {
    use conelab_core::objective::{GateParts, LossKind};
    let with = |f: &dyn Fn(&mut Objectives)| {
        let mut o = Objectives::default();
        f(&mut o);
        o
    };
    // α = half the mean occurrences per update: a real rare set on a uniform corpus.
    let alpha = 0.5 * tokens_per_update as f64 / vocab as f64;
    vec![
        (Objectives::default(), Some(1.0)),
        (with(&|o| o.cos.enabled = true), Some(1.03)),
        (
            with(&|o| {
                o.lap.enabled = true;
                o.lap.weight = 0.001;
            }),
            Some(1.10),
        ),
        (
            with(&|o| {
                o.agg.enabled = true;
                o.agg.alpha = alpha;
            }),
            Some(1.25),
        ),
        (with(&|o| o.gate_freeze = GateParts::Bc), None),
        (with(&|o| o.freeze.rare = true), None),
        (with(&|o| o.spectrum.enabled = true), Some(1.10)),
        (with(&|o| o.dev.enabled = true), Some(1.03)),
        (with(&|o| o.ul.enabled = true), None),
        (
            with(&|o| {
                o.agg.enabled = true;
                o.agg.alpha = alpha;
                o.ul.enabled = true;
            }),
            None,
        ),
        (with(&|o| o.loss = LossKind::Nce), Some(0.5)),
        (with(&|o| o.loss = LossKind::NceR), None),
        (with(&|o| o.loss = LossKind::And), None),
        (
            with(&|o| {
                o.loss = LossKind::And;
                o.and_lm.squash = true;
            }),
            None,
        ),
    ]
}

/// The median of the values (the mean of the middle two for an even count; NaN for none): the
/// one median every benchmark table reports.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    }
}

pub fn bench_objectives(b: &ObjectivesBench) -> Result<ObjectivesBenchResult, EngineError> {
    let window = b.model.window();
    let set = bench_objective_set(b.batch * window, b.vocab);
    const WARMUP: usize = 2;
    let steps_each = (WARMUP + b.rounds * b.steps + 1) as u64;
    let needed = steps_each as usize * b.batch * window;
    let corpus = Arc::new(random_corpus(b.vocab, needed, b.seed)?);
    // One trainer per objective, all alive, stepped round-robin: the steps compared in a round
    // are seconds apart, so drift and other load on the machine hit every objective alike (on a
    // shared 2-vCPU machine, timing objectives one after another gave ±15 % noise).
    let mut trainers = set
        .iter()
        .map(|(objectives, _)| {
            let config = TrainConfig {
                batch: b.batch,
                steps: steps_each,
                seed: b.seed,
                eval_every: 0,
                checkpoint_every: 0,
                snapshot_every: 0,
                objectives: objectives.clone(),
                ..TrainConfig::default()
            };
            let mut t = Trainer::new(corpus.clone(), b.model.clone(), config, b.device)?;
            t.set_host_lstm(!b.graph_lstm);
            Ok(t)
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    for t in trainers.iter_mut() {
        for _ in 0..WARMUP {
            t.train_step()?;
        }
    }
    let k = trainers.len();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); k];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); k];
    for round in 0..b.rounds {
        let mut this = vec![0.0; k];
        // Rotate the order so that no objective always follows the same one.
        for j in 0..k {
            let i = (j + round) % k;
            let mut t = Vec::with_capacity(b.steps);
            for _ in 0..b.steps {
                let start = Instant::now();
                trainers[i].train_step()?;
                t.push(start.elapsed().as_secs_f64() * 1e3);
            }
            this[i] = median(t.clone());
            times[i].extend(t);
        }
        for i in 0..k {
            ratios[i].push(this[i] / this[0]);
        }
    }
    let rows = set
        .iter()
        .enumerate()
        .map(|(i, (o, goal))| ObjectiveBenchRow {
            objective: o.label(),
            ms_per_step: median(times[i].clone()),
            ratio_to_mle: median(ratios[i].clone()),
            goal: *goal,
        })
        .collect();
    Ok(ObjectivesBenchResult {
        model: b.model_name.clone(),
        device: b.device.to_string(),
        batch: b.batch,
        window,
        vocab: corpus.vocab().len(),
        rounds: b.rounds,
        steps: b.steps,
        rows,
    })
}

impl ObjectivesBenchResult {
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} on {}, B={} T={} N={}, {} rounds × {} timed steps per objective\n{:<34} {:>9} {:>9} {:>7}\n",
            self.model,
            self.device,
            self.batch,
            self.window,
            self.vocab,
            self.rounds,
            self.steps,
            "objective",
            "ms/step",
            "× MLE",
            "goal"
        );
        for r in &self.rows {
            let goal = match r.goal {
                Some(g) if r.objective != "MLE" => {
                    let ok = if r.ratio_to_mle <= g { "ok" } else { "MISS" };
                    format!("≤{g:.2} {ok}")
                }
                _ => String::new(),
            };
            out.push_str(&format!(
                "{:<34} {:>9.1} {:>9.3} {:>7}\n",
                r.objective, r.ms_per_step, r.ratio_to_mle, goal
            ));
        }
        out
    }
}

/// `conelab bench store`.
#[derive(Debug, Clone)]
pub struct StoreBench {
    /// Rows appended in the append benchmark.
    pub rows: usize,
    /// Steps of the simulated long run.
    pub steps: u64,
    /// Points of the decimated history.
    pub points: usize,
    pub repeats: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct StoreBenchRow {
    pub what: String,
    pub ms: f64,
    pub min_ms: f64,
    pub goal_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StoreBenchResult {
    pub rows: Vec<StoreBenchRow>,
    pub long_run_rows: usize,
    pub long_run_segments: usize,
    pub long_run_mib: f64,
}

/// The train metrics a step records (as the recorder names them).
const STEP_METRICS: [&str; 7] = [
    "loss",
    "penalty",
    "lr",
    "grad_norm",
    "tokens_per_sec",
    "step_ms",
    "rare_tokens",
];

/// Writes what a run of `steps` steps records: every step's train metrics, and every 100 steps
/// a validation (29 rows), an embedding analysis (34 rows) and a 128-value spectrum.
pub(crate) fn simulate_run(
    dir: &std::path::Path,
    steps: u64,
) -> Result<(usize, usize), conelab_store::StoreError> {
    use conelab_core::series::{GROUPS, split};
    use conelab_store::{RunRecord, StoreWriter};
    let record = RunRecord::new("bench", String::new(), "synthetic".into(), "cpu".into());
    let mut w = StoreWriter::open(dir, &record)?;
    let mut rows = 0;
    let t0 = 1.7e9;
    for step in 1..=steps {
        let (epoch, t) = (step as f64 / 1000.0, t0 + step as f64 * 0.1);
        for (i, m) in STEP_METRICS.iter().enumerate() {
            let v = 5.0 / (1.0 + step as f64).ln() + i as f64;
            w.push_metric_at(step, epoch, t, split::TRAIN, "total", m, v);
        }
        rows += STEP_METRICS.len();
        if step % 100 == 0 {
            for g in GROUPS {
                for m in [
                    "ppl",
                    "uniq",
                    "human_uniq",
                    "positions",
                    "tokens",
                    "theorem2_below",
                ] {
                    w.push_metric_at(step, epoch, t, split::VALID, g, m, 100.0);
                    rows += 1;
                }
                for m in [
                    "i1",
                    "i2",
                    "i1_unit",
                    "i2_unit",
                    "isoscore",
                    "mean_cos",
                    "mean_cos_to_mean",
                    "mean_norm",
                    "effective_rank",
                    "sv_max",
                    "rows",
                ] {
                    w.push_metric_at(step, epoch, t, split::EMBEDDING, g, m, 0.5);
                    rows += 1;
                }
            }
            for k in 0..128 {
                let name = conelab_core::series::spectrum_metric(k);
                w.push_metric_at(
                    step,
                    epoch,
                    t,
                    split::SPECTRUM,
                    "total",
                    &name,
                    1.0 / (k + 1) as f64,
                );
                rows += 1;
            }
        }
        w.maybe_flush()?;
    }
    w.flush()?;
    let segments = std::fs::read_dir(w.dir())
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
            })
            .count()
        })
        .unwrap_or(0);
    Ok((rows, segments))
}

pub fn bench_store(b: &StoreBench) -> Result<StoreBenchResult, conelab_store::StoreError> {
    use conelab_store::{self as store, query};
    let root = std::env::temp_dir().join(format!("conelab-bench-store-{}", std::process::id()));
    let result = (|| {
        let mut rows = Vec::new();
        let mut time =
            |what: String,
             goal: Option<f64>,
             f: &mut dyn FnMut(usize) -> Result<(), store::StoreError>| {
                let mut ms = Vec::new();
                for r in 0..b.repeats {
                    let t = Instant::now();
                    f(r)?;
                    ms.push(t.elapsed().as_secs_f64() * 1e3);
                }
                let min_ms = ms.iter().copied().fold(f64::INFINITY, f64::min);
                rows.push(StoreBenchRow {
                    what,
                    ms: median(ms),
                    min_ms,
                    goal_ms: goal,
                });
                Ok::<(), store::StoreError>(())
            };
        // 1. Append: buffer the rows and write them as segments (flush every 100k rows).
        time(
            format!("append {} rows (buffer + Parquet segments, fsync)", b.rows),
            Some(1000.0),
            &mut |r| {
                let dir = root.join(format!("append-{r}"));
                let record =
                    store::RunRecord::new("bench", String::new(), "synthetic".into(), "cpu".into());
                let mut w = store::StoreWriter::open(&dir, &record)?;
                let names = STEP_METRICS;
                for i in 0..b.rows {
                    let step = (i / names.len()) as u64 + 1;
                    w.push_metric(
                        step,
                        conelab_core::series::split::TRAIN,
                        "total",
                        names[i % names.len()],
                        i as f64,
                    );
                    w.maybe_flush()?;
                }
                w.flush()
            },
        )?;
        // 2. A long run, as it is live (many segments) and after its end (compacted).
        let long = root.join("long");
        let (long_rows, segments) = simulate_run(&long, b.steps)?;
        let mut last = Vec::new();
        time(
            format!(
                "load a {}-step run ({segments} segments) + last value of every metric",
                b.steps
            ),
            None,
            &mut |_| {
                let s = store::load(&long)?;
                last = query::last_values_vec(s.metrics())?;
                Ok(())
            },
        )?;
        store::compact(&long)?;
        time(
            format!(
                "load a {}-step run (compacted) + last value of every metric",
                b.steps
            ),
            Some(50.0),
            &mut |_| {
                let s = store::load(&long)?;
                last = query::last_values_vec(s.metrics())?;
                Ok(())
            },
        )?;
        if last.is_empty() {
            return Err(store::StoreError::Invalid(
                "the long run has no metrics".into(),
            ));
        }
        let loaded = store::load(&long)?;
        let mut points = 0;
        time(
            format!(
                "history of train/loss decimated to {} points (loaded store)",
                b.points
            ),
            Some(10.0),
            &mut |_| {
                let h = query::history(
                    loaded.metrics(),
                    conelab_core::series::split::TRAIN,
                    "total",
                    "loss",
                    b.points,
                )?;
                points = h.len();
                Ok(())
            },
        )?;
        if points == 0 || points > b.points {
            return Err(store::StoreError::Invalid(
                format!("history has {points} points").into(),
            ));
        }
        let mib = std::fs::read_dir(long.join(store::STORE_DIR))
            .map(|d| {
                d.filter_map(|e| e.ok()?.metadata().ok())
                    .map(|m| m.len())
                    .sum::<u64>()
            })
            .unwrap_or(0) as f64
            / (1024.0 * 1024.0);
        Ok(StoreBenchResult {
            rows,
            long_run_rows: long_rows,
            long_run_segments: segments,
            long_run_mib: mib,
        })
    })();
    let _ = std::fs::remove_dir_all(&root);
    result
}

impl StoreBenchResult {
    /// The table `conelab bench store` prints.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{:<64} {:>10} {:>10} {:>8}\n",
            "operation", "median ms", "min ms", "goal ms"
        );
        for row in &self.rows {
            let goal = row
                .goal_ms
                .map_or_else(|| "-".to_owned(), |g| format!("{g:.0}"));
            out.push_str(&format!(
                "{:<64} {:>10.2} {:>10.2} {:>8}\n",
                row.what, row.ms, row.min_ms, goal
            ));
        }
        out.push_str(&format!(
            "long run: {} rows in {} segments before compaction, {:.1} MiB compacted\n",
            self.long_run_rows, self.long_run_segments, self.long_run_mib
        ));
        out
    }
}

impl MetricsBenchResult {
    /// The table `conelab bench metrics` prints.
    pub fn render(&self) -> String {
        let mut out = format!(
            "W: {} x {} f32 ({:.1} MiB), {} threads\n{:<56} {:>10} {:>10} {:>14}\n",
            self.n,
            self.d,
            self.w_mib,
            self.threads,
            "operation",
            "median ms",
            "min ms",
            "peak extra/W"
        );
        for row in &self.rows {
            let mem = row
                .peak_extra_w
                .map_or_else(|| "-".to_owned(), |m| format!("{m:.2}x"));
            out.push_str(&format!(
                "{:<56} {:>10.2} {:>10.2} {:>14}\n",
                row.what, row.ms, row.min_ms, mem
            ));
        }
        out
    }
}

impl TrainBenchResult {
    /// The one-row table `conelab bench train` prints.
    pub fn render(&self) -> String {
        let opt = |v: Option<f64>| v.map_or_else(|| "–".to_string(), |v| format!("{v:.0}"));
        format!(
            "{:<9} {:<6} {:<13} {:>5} {:>5} {:>7} {:>11} {:>11} {:>9} {:>9} {:>10} {:>6} {:>6} {:>9}\n{:<9} {:<6} {:<13} {:>5} {:>5} {:>7} {:>11} {:>11.0} {:>9.1} {:>9.1} {:>10.0} {:>6.0} {:>6} {:>9}\n",
            "engine",
            "model",
            "device",
            "B",
            "T",
            "N",
            "params",
            "tokens/s",
            "ms/step",
            "± std",
            "peak MiB",
            "cpu %",
            "gpu %",
            "gpu MiB",
            self.engine,
            self.model,
            self.device,
            self.batch,
            self.window,
            self.vocab,
            self.parameters,
            self.tokens_per_sec,
            self.ms_per_step,
            self.ms_per_step_std,
            self.peak_rss_mib,
            self.cpu_percent,
            opt(self.gpu_util_percent),
            opt(self.gpu_mem_peak_mib),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![10.0, 20.0]), 15.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![7.0]), 7.0);
        assert!(median(Vec::new()).is_nan());
    }
}
