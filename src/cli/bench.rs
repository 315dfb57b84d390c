//! `conelab bench …`: the benchmarks, each a table or JSON.

use anyhow::{Result, bail};
use clap::{Args, Subcommand};

use conelab_bench::ops::{OpsBench, ReferenceMode, TorchReference, bench_ops};
use conelab_bench::{
    MetricsBench, ObjectivesBench, StoreBench, TrainBench, bench_metrics, bench_objectives,
    bench_store, bench_train,
};
use conelab_core::model::{DeviceSpec, Preset};
use conelab_core::train_config::Precision;
use conelab_run::choice_arg::choice;
use conelab_run::launch::with_window;

use super::print_stdout;

/// A whole number from `LO` to `HI`, for a size a user can grow (rows, vocabulary, steps…):
/// outside, clap's one-line usage error names the flag and the range.
fn within<const LO: u64, const HI: u64, T: TryFrom<u64>>(text: &str) -> Result<T, String> {
    let value: u64 = text
        .parse()
        .map_err(|_| format!("a whole number from {LO} to {HI}"))?;
    if (LO..=HI).contains(&value) {
        T::try_from(value).map_err(|_| format!("a whole number from {LO} to {HI}"))
    } else {
        Err(format!("{value} is outside {LO} to {HI}"))
    }
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Training throughput (tokens/s, ms/step, peak memory) on random tokens, after warm-up.
    Train(BenchTrainArgs),
    /// The embedding-metric panel and neighbour queries on a random W of WikiText-2 size.
    Metrics(BenchMetricsArgs),
    /// Step time of every objective relative to MLE: one trainer each, stepped round-robin.
    Objectives(BenchObjectivesArgs),
    /// The metrics store: appending rows, loading a long run, a decimated history.
    Store(BenchStoreArgs),
    /// The workbench: frame time (TestBackend) and training throughput under the TUI vs headless.
    Tui(BenchTuiArgs),
    /// What viewers cost a run (tokens/s with two `conelab attach` viewers vs none, alternated;
    /// memory) and what attaching costs (hello to a first frame on a long history).
    Attach(BenchAttachArgs),
    /// Finding runs from anywhere at scale: `conelab runs` and attaching by name over N
    /// registered runs (one real run and its copies), from an empty folder.
    Runs(BenchRunsArgs),
    /// What hostile clients of a run's socket cost it: CPU time per step and peak memory of
    /// the same run quiet and under attack (unread byte-heavy requests, idle connections, a
    /// subscribe storm, a command flood), alternated.
    Chaos(BenchChaosArgs),
    /// A translation model on a parallel corpus: training throughput (target tokens/s over
    /// fairseq-style token batches, after warm-up), greedy and beam decoding of the valid split
    /// (sentences/s), peak memory.
    Translate(BenchTranslateArgs),
    /// The top-level ATen operators of one training step, by kind, beside PyTorch's for the same
    /// model (LibTorch builds; the trainer takes CUDA's paths, so it counts what a GPU launches).
    Ops(BenchOpsArgs),
    /// `bench chaos --phased`'s viewer probe, a process of its own (the run paces connections
    /// by process): connects once a second, times the run's hello, prints JSON.
    #[command(hide = true)]
    HelloProbe {
        socket: std::path::PathBuf,
        /// Seconds to probe for.
        #[arg(long, default_value_t = 20, value_parser = within::<1, 3_600, u64>)]
        seconds: u64,
    },
}

#[derive(Debug, Args)]
pub struct BenchOpsArgs {
    #[arg(long, value_parser = choice::<Preset>(), default_value = "small")]
    pub model: Preset,
    #[arg(long, default_value = "libtorch-cpu")]
    pub device: DeviceSpec,
    #[arg(long, default_value_t = 16, value_parser = within::<1, 65_536, usize>)]
    pub batch: usize,
    /// Window length T [default: the preset's].
    #[arg(long, value_parser = within::<1, 65_536, usize>)]
    pub bptt: Option<usize>,
    /// Vocabulary size N.
    #[arg(long, default_value_t = 10_000, value_parser = within::<3, 10_000_000, usize>)]
    pub vocab: usize,
    /// Steps before the counted one.
    #[arg(long, default_value_t = 2, value_parser = within::<0, 1_000_000, u64>)]
    pub warmup: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The PyTorch reference script.
    #[arg(long, value_name = "PATH", default_value = "bench/reference_torch.py")]
    pub reference: std::path::PathBuf,
    /// Its mode.
    #[arg(long, value_enum, default_value = "fp32")]
    pub reference_mode: ReferenceMode,
    /// The Python that runs it [default: $CONELAB_TORCH_PYTHON, else python3].
    #[arg(long, value_name = "PATH")]
    pub python: Option<std::path::PathBuf>,
    /// Count conelab only.
    #[arg(long)]
    pub no_reference: bool,
    /// A regulariser on conelab's step, as `train --reg` takes it (repeatable): e.g. `ul=0.5`.
    /// The reference stays plain MLE.
    #[arg(long, value_name = "NAME=WEIGHT")]
    pub reg: Vec<String>,
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

#[derive(Debug, Args)]
pub struct BenchAttachArgs {
    #[arg(long, value_parser = choice::<Preset>(), default_value = "tiny")]
    pub model: Preset,
    #[arg(long, default_value_t = 16, value_parser = within::<1, 65_536, usize>)]
    pub batch: usize,
    /// Window length T [default: the preset's].
    #[arg(long, value_parser = within::<1, 65_536, usize>)]
    pub bptt: Option<usize>,
    /// Untimed steps per run (the viewers attach during them).
    #[arg(long, default_value_t = 15, value_parser = within::<1, 1_000_000, u64>)]
    pub warmup: u64,
    /// Timed steps per run.
    #[arg(long, default_value_t = 40, value_parser = within::<2, 10_000_000, u64>)]
    pub steps: u64,
    /// Pairs of runs (without viewers, with two), alternating which goes first.
    #[arg(long, default_value_t = 3, value_parser = within::<1, 1_000, usize>)]
    pub rounds: usize,
    /// Steps in the store of the attach benchmark.
    #[arg(long, default_value_t = 100_000, value_parser = within::<10, 100_000_000, u64>)]
    pub history: u64,
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

#[derive(Debug, Args)]
pub struct BenchRunsArgs {
    /// Runs registered in the bench's own index.
    #[arg(long, default_value_t = 1000)]
    pub runs: usize,
    /// Steps of the real run whose copies the others are.
    #[arg(long, default_value_t = 400)]
    pub history: u64,
    /// Times each figure is measured (the median is printed).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

#[derive(Debug, Args)]
pub struct BenchChaosArgs {
    #[arg(long, value_parser = choice::<Preset>(), default_value = "tiny")]
    pub model: Preset,
    #[arg(long, default_value_t = 16, value_parser = within::<1, 65_536, usize>)]
    pub batch: usize,
    /// Steps per run.
    #[arg(long, default_value_t = 300, value_parser = within::<10, 10_000_000, u64>)]
    pub steps: u64,
    /// Pairs of runs (quiet, attacked), alternating which goes first.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// The attackers: unread (6 clients asking for megabytes, never reading), idle (200
    /// connections that only say hello), subscribe (4 connect-subscribe-hang-up loops), flood
    /// (50,000 identical set-lr, save-checkpoint, an NCE k of 10¹³), comma-separated.
    /// With --phased: idle-flood (1,000 connections that only say hello, reopened when
    /// closed), slow (20 viewers reading 1 KiB a second), commands (20 clients sending set-lr
    /// values of their own as fast as they can) [default: all three].
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "unread,idle,subscribe,flood"
    )]
    pub attack: Vec<String>,
    /// One long run instead of pairs: quiet, attacked, then quiet again, with its steps/s, its
    /// RSS before, at the peak and after, and how long a new viewer waits for its hello.
    #[arg(long)]
    pub phased: bool,
    /// With --phased: seconds of the quiet, attacked and after phases.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "20,20,60",
        value_name = "Q,A,AFTER"
    )]
    pub phases: Vec<u64>,
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

#[derive(Debug, Args)]
pub struct BenchTuiArgs {
    /// Rows of W in the drawn state (the vocabulary size).
    #[arg(long, default_value_t = 10_000, value_parser = within::<2, 10_000_000, usize>)]
    pub n: usize,
    /// Columns of W in the drawn state.
    #[arg(long, default_value_t = 128, value_parser = within::<1, 65_536, usize>)]
    pub d: usize,
    /// Frames drawn per layout.
    #[arg(long, default_value_t = 200, value_parser = within::<1, 1_000_000, usize>)]
    pub frames: usize,
    /// Model of the throughput comparison.
    #[arg(long, value_parser = choice::<Preset>(), default_value = "tiny")]
    pub model: Preset,
    /// Vocabulary of the throughput comparison.
    #[arg(long, default_value_t = 10_000, value_parser = within::<3, 10_000_000, usize>)]
    pub vocab: usize,
    /// Steps per run of the throughput comparison.
    #[arg(long, default_value_t = 30, value_parser = within::<4, 10_000_000, u64>)]
    pub steps: u64,
    /// Headless/TUI pairs of runs (the median ratio is reported).
    #[arg(long, default_value_t = 3, value_parser = within::<1, 1_000, usize>)]
    pub rounds: usize,
    /// Only the frame times.
    #[arg(long)]
    pub frames_only: bool,
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

#[derive(Debug, Args)]
pub struct BenchStoreArgs {
    /// Rows appended in the append benchmark.
    #[arg(long, default_value_t = 1_000_000, value_parser = within::<1, 10_000_000, usize>)]
    pub rows: usize,
    /// Training steps of the simulated long run.
    #[arg(long, default_value_t = 100_000, value_parser = within::<1, 100_000_000, u64>)]
    pub steps: u64,
    /// Points of the decimated history.
    #[arg(long, default_value_t = 1_000, value_parser = within::<1, 1_000_000, usize>)]
    pub points: usize,
    /// Timed repeats (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = within::<1, 1_000, usize>)]
    pub repeats: usize,
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

#[derive(Debug, Args)]
pub struct BenchObjectivesArgs {
    #[arg(long, value_parser = choice::<Preset>(), default_value = "tiny")]
    pub model: Preset,
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// Vocabulary sizes N, one table each (10,000 = PTB, 33,278 = WikiText-2).
    #[arg(long, value_delimiter = ',', default_value = "10000,33278", value_parser = within::<3, 10_000_000, usize>)]
    pub vocab: Vec<usize>,
    #[arg(long, default_value_t = 16, value_parser = within::<1, 65_536, usize>)]
    pub batch: usize,
    /// Window length T [default: the preset's].
    #[arg(long, value_parser = within::<1, 65_536, usize>)]
    pub bptt: Option<usize>,
    /// Rounds over all objectives (the ratio is the median over rounds of the per-round ratio).
    #[arg(long, default_value_t = 10, value_parser = within::<1, 1_000, usize>)]
    pub rounds: usize,
    /// Timed steps per objective per round.
    #[arg(long, default_value_t = 1, value_parser = within::<1, 1_000_000, usize>)]
    pub steps: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// LSTM models: run the layers in burn's autodiff graph instead of on the host (for
    /// side-by-side comparisons).
    #[arg(long)]
    pub graph_lstm: bool,
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

#[derive(Debug, Args)]
pub struct BenchMetricsArgs {
    /// Rows of W (vocabulary size).
    #[arg(long, default_value_t = 33_278, value_parser = within::<2, 10_000_000, usize>)]
    pub n: usize,
    /// Columns of W (embedding size).
    #[arg(long, default_value_t = 400, value_parser = within::<1, 65_536, usize>)]
    pub d: usize,
    /// Timed repeats of each panel computation (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = within::<1, 1_000, usize>)]
    pub repeats: usize,
    /// Neighbour queries timed.
    #[arg(long, default_value_t = 200, value_parser = within::<1, 1_000_000, usize>)]
    pub queries: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also time faer's thin SVD of W in f64 (the usual way to get the spectrum) for comparison.
    #[arg(long)]
    pub reference: bool,
    /// Also time `inspect --stolen` on W with this many rows replaced by convex combinations of
    /// others (the budget: 1000 on 33,278 × 400, ≤ 10 minutes on 2 cores).
    #[arg(long, value_name = "ROWS", default_value_t = 0, value_parser = within::<0, 10_000_000, usize>)]
    pub stolen: usize,
    /// Also time the live second tier (neighbour frequency mix, TwoNN per group, the cheap
    /// stolen bound) on one thread, as the run's metrics thread computes it.
    #[arg(long)]
    pub second_tier: bool,
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

/// The translation presets (`--model` of `bench translate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MtPreset {
    /// d = 256, 3 + 3 layers, 4 heads, FFN 1024 (for the CPU).
    MtTiny,
    /// fairseq's transformer_iwslt_de_en: d = 512, 6 + 6, 4 heads, FFN 1024, dropout 0.3.
    Iwslt,
    /// Vaswani et al.'s base: d = 512, 6 + 6, 8 heads, FFN 2048.
    MtBase,
}

#[derive(Debug, Args)]
pub struct BenchTranslateArgs {
    #[arg(long, value_enum, default_value = "mt-tiny")]
    pub model: MtPreset,
    /// A parallel corpus (a folder of train.XX/train.YY, valid.*, test.*, or a name under the
    /// data roots) or `synthetic-mt`.
    #[arg(long, default_value = "synthetic-mt")]
    pub corpus: String,
    /// The direction SRC-TGT (synthetic-mt's is xx-yy).
    #[arg(long, value_name = "SRC-TGT")]
    pub pair: Option<String>,
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// Tokens per batch (fairseq's --max-tokens).
    #[arg(long, default_value_t = 4096, value_parser = within::<1, 1_048_576, usize>)]
    pub max_tokens: usize,
    /// Timed updates (after warm-up).
    #[arg(long, default_value_t = 20, value_parser = within::<1, 1_000_000, u64>)]
    pub steps: u64,
    /// Untimed warm-up updates.
    #[arg(long, default_value_t = 5, value_parser = within::<0, 1_000_000, u64>)]
    pub warmup: u64,
    /// Hypotheses kept by the beam.
    #[arg(long, default_value_t = 5, value_parser = within::<1, 1024, usize>)]
    pub beam: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

fn translate(args: BenchTranslateArgs) -> Result<()> {
    use conelab_core::model::TranslationConfig;
    let json = args.output.json("bench translate")?;
    let (name, model) = match args.model {
        MtPreset::MtTiny => ("mt-tiny", TranslationConfig::mt_tiny()),
        MtPreset::Iwslt => ("iwslt", TranslationConfig::iwslt()),
        MtPreset::MtBase => ("mt-base", TranslationConfig::mt_base()),
    };
    let corpus = super::data::parallel_corpus(&args.corpus, args.pair.as_deref())?;
    let r = conelab_bench::translation::bench_translation(
        &conelab_bench::translation::TranslationBench {
            model_name: name.to_owned(),
            model,
            corpus: std::sync::Arc::new(corpus),
            device: args.device,
            max_tokens: args.max_tokens,
            warmup: args.warmup,
            steps: args.steps,
            seed: args.seed,
            beam: args.beam,
            // A cap an untrained model reaches: fairseq's a·|src| + b with a = 1.2, b = 10.
            max_len: (1.2, 10),
        },
    )?;
    if json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    print_stdout(&r.render())
}

#[derive(Debug, Args)]
pub struct BenchTrainArgs {
    #[arg(long, value_parser = choice::<Preset>(), default_value = "tiny")]
    pub model: Preset,
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// Timed steps (after warm-up).
    #[arg(long, default_value_t = 20, value_parser = within::<1, 10_000_000, u64>)]
    pub steps: u64,
    /// Untimed warm-up steps.
    #[arg(long, default_value_t = 5, value_parser = within::<0, 1_000_000, u64>)]
    pub warmup: u64,
    #[arg(long, default_value_t = 16, value_parser = within::<1, 65_536, usize>)]
    pub batch: usize,
    /// Window length T [default: the preset's].
    #[arg(long, value_parser = within::<1, 65_536, usize>)]
    pub bptt: Option<usize>,
    /// Vocabulary size N.
    #[arg(long, default_value_t = 10_000, value_parser = within::<3, 10_000_000, usize>)]
    pub vocab: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// LSTM models: run the layers in burn's autodiff graph instead of on the host (what the
    /// default CPU build did before; for side-by-side comparisons).
    #[arg(long)]
    pub graph_lstm: bool,
    /// fp32, or bf16 mixed precision (LibTorch only; see `train --help`).
    #[arg(long, value_parser = choice::<Precision>(), default_value = "fp32")]
    pub precision: Precision,
    /// Read every step's loss back before the next step is dispatched, as conelab did before
    /// steps were pipelined on LibTorch devices (for side-by-side comparisons).
    #[arg(long)]
    pub step_sync: bool,
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

/// The most values a benchmark's random W may have (4 GiB of f32; WikiText-103's 267,735 × 400 is
/// a tenth of it): each flag is bounded, and so is their product.
const MATRIX_VALUES: usize = 1 << 30;

fn matrix_within_bound(n: usize, d: usize) -> Result<()> {
    if n.saturating_mul(d) > MATRIX_VALUES {
        bail!("--n {n} × --d {d}: more than the {MATRIX_VALUES} values a benchmark's W may have");
    }
    Ok(())
}

fn tui(args: BenchTuiArgs) -> Result<()> {
    let json = args.output.json("bench tui")?;
    matrix_within_bound(args.n, args.d)?;
    let frames = conelab_bench::tui::bench_frames(args.n, args.d, args.frames)?;
    let throughput = if args.frames_only {
        None
    } else {
        let model = args.model.config();
        Some(conelab_bench::tui::bench_throughput(
            args.model.name(),
            &model,
            args.vocab,
            args.steps,
            args.rounds,
        )?)
    };
    if json {
        let v = serde_json::json!({ "frames": frames, "throughput": throughput });
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    let mut out = conelab_bench::tui::render_frames(args.n, args.d, &frames);
    if let Some(t) = throughput {
        out.push('\n');
        out.push_str(&t.render());
    }
    print_stdout(&out)
}

fn attach(args: BenchAttachArgs) -> Result<()> {
    let json = args.output.json("bench attach")?;
    let r = conelab_bench::attach::bench_attach(&conelab_bench::attach::AttachBench {
        model: args.model.name().to_owned(),
        batch: args.batch,
        bptt: args.bptt,
        warmup: args.warmup,
        steps: args.steps,
        rounds: args.rounds,
        history: args.history,
        work: std::env::temp_dir(),
    })?;
    if json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    print_stdout(&r.render())
}

fn chaos(args: BenchChaosArgs) -> Result<()> {
    let json = args.output.json("bench chaos")?;
    if args.phased {
        return chaos_phased(args, json);
    }
    if args.rounds == 0 || args.rounds > 100 {
        bail!("--rounds {}: from 1 to 100", args.rounds);
    }
    let known = conelab_bench::chaos::ATTACKS;
    if let Some(a) = args.attack.iter().find(|a| !known.contains(&a.as_str())) {
        bail!(
            "--attack {a}: unknown; the attackers are {}",
            known.join(", ")
        );
    }
    let r = conelab_bench::chaos::bench_chaos(&conelab_bench::chaos::ChaosBench {
        model: args.model.name().to_owned(),
        batch: args.batch,
        steps: args.steps,
        rounds: args.rounds,
        attacks: args.attack,
        work: std::env::temp_dir(),
    })?;
    if json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    print_stdout(&r.render())
}

fn runs(args: BenchRunsArgs) -> Result<()> {
    let json = args.output.json("bench runs")?;
    if args.runs == 0 || args.runs > 100_000 {
        bail!("--runs {}: from 1 to 100000 runs", args.runs);
    }
    if args.history == 0 {
        bail!("--history 0: the real run needs at least one step");
    }
    if !(1..=100).contains(&args.repeats) {
        bail!("--repeats {}: from 1 to 100", args.repeats);
    }
    let r = conelab_bench::runs::bench_runs(&conelab_bench::runs::RunsBench {
        runs: args.runs,
        history: args.history,
        repeats: args.repeats,
        work: std::env::temp_dir(),
    })?;
    if json {
        return print_stdout(&format!(
            "{}
",
            serde_json::to_string_pretty(&r)?
        ));
    }
    print_stdout(&r.render())
}

fn store(args: BenchStoreArgs) -> Result<()> {
    let json = args.output.json("bench store")?;
    let r = bench_store(&StoreBench {
        rows: args.rows,
        steps: args.steps,
        points: args.points,
        repeats: args.repeats,
    })?;
    if json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    print_stdout(&r.render())
}

fn objectives(args: BenchObjectivesArgs) -> Result<()> {
    let json = args.output.json("bench objectives")?;
    if args.vocab.is_empty() {
        bail!("--vocab: at least one vocabulary size");
    }
    let mut results = Vec::new();
    for &vocab in &args.vocab {
        let bench = ObjectivesBench {
            model_name: args.model.name().to_owned(),
            model: with_window(args.model.config(), args.bptt),
            device: args.device,
            batch: args.batch,
            vocab,
            rounds: args.rounds,
            steps: args.steps,
            seed: args.seed,
            graph_lstm: args.graph_lstm,
        };
        let r = bench_objectives(&bench)?;
        if !json {
            print_stdout(&format!("{}\n", r.render()))?;
        }
        results.push(r);
    }
    if json {
        print_stdout(&format!("{}\n", serde_json::to_string_pretty(&results)?))?;
    }
    Ok(())
}

fn train(args: BenchTrainArgs) -> Result<()> {
    let json = args.output.json("bench train")?;
    let bench = TrainBench {
        model_name: args.model.name().to_owned(),
        model: with_window(args.model.config(), args.bptt),
        device: args.device,
        batch: args.batch,
        vocab: args.vocab,
        warmup: args.warmup,
        steps: args.steps,
        seed: args.seed,
        graph_lstm: args.graph_lstm,
        precision: args.precision,
        step_sync: args.step_sync,
    };
    let r = bench_train(&bench)?;
    if json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    print_stdout(&r.render())
}

fn ops(args: BenchOpsArgs) -> Result<()> {
    let json = args.output.json("bench ops")?;
    let mut objectives = conelab_core::objective::Objectives::default();
    for reg in &args.reg {
        objectives
            .apply_reg_arg(reg)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let python = args
        .python
        .or_else(|| std::env::var_os("CONELAB_TORCH_PYTHON").map(Into::into))
        .unwrap_or_else(|| "python3".into());
    let bench = OpsBench {
        model_name: args.model.name().to_owned(),
        model: with_window(args.model.config(), args.bptt),
        device: args.device,
        batch: args.batch,
        vocab: args.vocab,
        warmup: args.warmup,
        seed: args.seed,
        objectives,
        reference: (!args.no_reference).then_some(TorchReference {
            python,
            script: args.reference,
            mode: args.reference_mode,
        }),
    };
    let r = bench_ops(&bench)?;
    if json {
        return print_stdout(&format!(
            "{}
",
            serde_json::to_string_pretty(&r)?
        ));
    }
    print_stdout(&r.render())
}

fn metrics(args: BenchMetricsArgs) -> Result<()> {
    let json = args.output.json("bench metrics")?;
    matrix_within_bound(args.n, args.d)?;
    let r = bench_metrics(&MetricsBench {
        n: args.n,
        d: args.d,
        repeats: args.repeats,
        queries: args.queries,
        seed: args.seed,
        reference: args.reference,
        stolen: args.stolen,
        second_tier: args.second_tier,
    })?;
    if json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    print_stdout(&r.render())
}

pub fn exec(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Train(args) => train(args),
        BenchCommand::Ops(args) => ops(args),
        BenchCommand::Translate(args) => translate(args),
        BenchCommand::Objectives(args) => objectives(args),
        BenchCommand::Metrics(args) => metrics(args),
        BenchCommand::Store(args) => store(args),
        BenchCommand::Tui(args) => tui(args),
        BenchCommand::Attach(args) => attach(args),
        BenchCommand::Chaos(args) => chaos(args),
        BenchCommand::Runs(args) => runs(args),
        BenchCommand::HelloProbe { socket, seconds } => {
            let r = conelab_bench::chaos_phases::probe_hello(&socket, seconds);
            print_stdout(&format!("{}\n", serde_json::to_string(&r)?))
        }
    }
}

fn chaos_phased(args: BenchChaosArgs, json: bool) -> Result<()> {
    use conelab_bench::chaos_phases::{PHASED_ATTACKS, PhasedChaos, bench_phased};
    let attacks = if args.attack.join(",") == "unread,idle,subscribe,flood" {
        PHASED_ATTACKS.iter().map(|a| a.to_string()).collect()
    } else {
        args.attack
    };
    if let Some(a) = attacks
        .iter()
        .find(|a| !PHASED_ATTACKS.contains(&a.as_str()))
    {
        bail!(
            "--attack {a}: unknown with --phased; its attackers are {}",
            PHASED_ATTACKS.join(", ")
        );
    }
    let [quiet, attack, after] = args.phases[..] else {
        bail!("--phases: three numbers of seconds, QUIET,ATTACK,AFTER");
    };
    if [quiet, attack, after]
        .iter()
        .any(|&s| !(1..=3_600).contains(&s))
    {
        bail!("--phases: each from 1 to 3600 seconds");
    }
    let r = bench_phased(&PhasedChaos {
        model: args.model.name().to_owned(),
        batch: args.batch,
        attacks,
        quiet_secs: quiet,
        attack_secs: attack,
        after_secs: after,
        work: std::env::temp_dir(),
    })?;
    if json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    print_stdout(&r.render())
}
