//! The command line: clap definitions and the dispatch to library code.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};

use conelab::analysis::{InspectRequest, evaluate_checkpoint, inspect};
use conelab::bench::{
    MetricsBench, ObjectivesBench, StoreBench, TrainBench, bench_metrics, bench_objectives,
    bench_store, bench_train,
};
use conelab::checkpoint::matrix::{load_matrix, read_counts_file, read_vocab_file};
use conelab::checkpoint::{CorpusSpec, RunDir, RunSpec};
use conelab::data::{
    Corpus, CorpusReport, CorpusSource, GroupBounds, LoadOptions, Split, SynthConfig,
    SyntheticCorpus, VocabBuilder, thousands, zipf_exponent,
};
use conelab::engine::{self, Command as EngineCommand, OptimizerKind, Schedule, Trainer};
use conelab::headless::{self, Outcome};
use conelab::metrics::Similarity;
use conelab::model::{DeviceSpec, ModelConfig, Preset};
use conelab::objective::{GateParts, LossKind, Objectives};
use conelab::run_config::ConfigFile;
use conelab::store::export::{self, StepChoice};
use conelab::store::{self, RunRecord, StoreWriter};

#[derive(Debug, Parser)]
#[command(
    name = "conelab",
    version,
    about = "Train language models and watch their tied token embeddings degenerate — or not",
    long_about = "conelab trains word-level language models with tied input/output embeddings and \
measures, per frequency group (frequent / medium / rare), how the embedding matrix degenerates \
into a narrow cone.\n\nA CORPUS is a directory holding train.txt, valid.txt and test.txt (or \
WikiText's wiki.{train,valid,test}.tokens, or PTB's ptb.{train,valid,test}.txt), or the word \
`synthetic` for the built-in corpus generated in memory."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train a language model with tied embeddings (headless: progress on stdout).
    Train(Box<TrainArgs>),
    /// Corpora: statistics of a corpus, and the built-in synthetic generator.
    #[command(subcommand)]
    Data(DataCommand),
    /// Every model-output and embedding metric of a checkpoint on a split (methods.md §2).
    Eval(EvalArgs),
    /// Embedding metrics and nearest neighbours of a checkpoint or a foreign matrix.
    Inspect(InspectArgs),
    /// Tables from runs' metrics stores for papers and other tools: CSV, Parquet, JSON,
    /// Markdown, LaTeX.
    Export(ExportArgs),
    /// Maintenance of a run's metrics store.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Benchmarks that print a table (or JSON).
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportTableArg {
    /// The long table: run_id, step, epoch, wall_time, split, group, metric, value.
    Metrics,
    /// One row per run: Freq / Med / Rare / Total × PPL, Uniq, I(W) (Yu et al. Table 3).
    Groups,
    /// Chosen metrics (--metric) by step, one column each.
    Curves,
    /// Interventions, checkpoints, warnings, each with its step.
    Events,
    /// Top-k neighbours of --words at a checkpoint, runs side by side (Yu et al. Table 13).
    Neighbors,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormatArg {
    Csv,
    Parquet,
    Json,
    #[value(alias = "markdown")]
    Md,
    #[value(alias = "tex")]
    Latex,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Run directories; several are compared in one table.
    #[arg(required = true, num_args = 1..)]
    pub runs: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "groups")]
    pub table: ExportTableArg,
    /// Output format [default: from the --out extension, else md].
    #[arg(long, value_enum)]
    pub format: Option<ExportFormatArg>,
    /// `last`, `best` (lowest total PPL on --split) or a step number [default: last; all steps
    /// for --table metrics].
    #[arg(long, value_parser = parse_step_choice)]
    pub step: Option<StepChoice>,
    /// Held-out split of the groups table and of `best` (valid or test); a filter on the split
    /// column for --table metrics (train, valid, test, embedding, spectrum).
    #[arg(long)]
    pub split: Option<String>,
    /// Curves to export, SPLIT/METRIC or SPLIT/GROUP/METRIC (e.g. valid/ppl,embedding/rare/i1)
    /// [default: train/loss, valid/ppl, embedding/i1].
    #[arg(long = "metric", value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// Words whose neighbours --table neighbors lists.
    #[arg(long, value_delimiter = ',')]
    pub words: Vec<String>,
    /// Neighbours per word.
    #[arg(short = 'k', long, default_value_t = 10)]
    pub k: usize,
    /// Write here (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

fn parse_step_choice(s: &str) -> Result<StepChoice, String> {
    s.parse()
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Rewrite a finished run's store as one segment per table (training does this itself when
    /// it ends).
    Compact {
        #[arg(required = true, num_args = 1..)]
        runs: Vec<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HeldOutSplit {
    Valid,
    Test,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Run directories (their newest checkpoint) or `step-NNNNNN` checkpoint folders; several
    /// are compared side by side.
    #[arg(required = true, num_args = 1..)]
    pub runs: Vec<PathBuf>,

    #[arg(long, value_enum, default_value = "valid")]
    pub split: HeldOutSplit,

    /// Device to evaluate on [default: the run's own].
    #[arg(long)]
    pub device: Option<DeviceSpec>,

    /// k of the same-class precision@k (runs on a corpus with word classes); 0 skips it.
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,

    /// Print JSON instead of tables (an array for several runs).
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,

    /// One Markdown table, a row per run: PPL and I1 per group, Uniq, mean cosine (the default
    /// for several runs).
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Debug, Args)]
#[command(
    long_about = "Embedding metrics (I1, I2, singular spectrum, effective rank, cone statistics; per \
frequency group when training counts are known) and exact nearest-neighbour tables.\n\nPATH is a \
conelab run directory or step-NNNNNN folder (vocabulary, counts and groups come with it), or a \
foreign matrix: a .safetensors file (pick the tensor with --tensor) or a .npy file (float32 or \
float64, 2-D), one row per token.\n\nJSON keys (stable): n, d, i1, i2, mean_norm, sv_norm, sv_max, \
effective_rank, mean_cos, mean_cos_to_mean, groups.{frequent,medium,rare}.{same keys + rows}, \
rare_frequent_cos, neighbors.{WORD: [{token, cosine|distance, id, group, count}]}, \
class_precision.\n\nOn a terminal (and without --json or --no-tui) it opens the browser: the \
workbench's embedding scatter, neighbour search, spectrum and group metrics; --compare OTHER puts \
a second matrix beside it."
)]
pub struct InspectArgs {
    pub path: PathBuf,

    /// Tensor name inside a .safetensors file (e.g. embeddings.word_embeddings.weight).
    #[arg(long)]
    pub tensor: Option<String>,

    /// One token per line, line i naming row i.
    #[arg(long, value_name = "FILE")]
    pub vocab: Option<PathBuf>,

    /// Training count per row, one per line (or token<TAB>count); enables the frequency groups.
    #[arg(long, value_name = "FILE")]
    pub counts: Option<PathBuf>,

    /// Words whose neighbours to list, comma-separated (`#ROW` names a row by number).
    #[arg(long, value_name = "W1,W2,…", value_delimiter = ',')]
    pub neighbors: Vec<String>,

    /// Neighbours per word.
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,

    /// Neighbour similarity.
    #[arg(long, value_enum, default_value = "cosine")]
    pub metric: NeighborMetric,

    /// Group boundaries for --counts (see `data stats --help`) [default: the run's, else 0.3,0.8].
    #[arg(long, value_name = "MEDIUM,RARE")]
    pub groups: Option<GroupBounds>,

    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,

    /// A second checkpoint or matrix to show beside PATH (same loading rules; --tensor, --vocab
    /// and --counts apply to PATH only).
    #[arg(long, value_name = "OTHER")]
    pub compare: Option<PathBuf>,

    /// Print the tables even on a terminal (no browser).
    #[arg(long)]
    pub no_tui: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NeighborMetric {
    Cosine,
    Euclidean,
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Corpus directory (train.txt/valid.txt/test.txt, wiki.*.tokens or ptb.*.txt) or `synthetic`.
    #[arg(default_value = "synthetic")]
    pub corpus: String,

    /// Model preset (the config file's [model] fields go on top of it).
    #[arg(long, value_enum)]
    pub model: Option<Preset>,

    /// Device: cpu (pure-Rust burn-flex), libtorch-cpu or cuda[:N] (both need the `tch` feature).
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,

    /// Optimizer steps [default: 2000, or the config file's].
    #[arg(long, conflicts_with = "epochs")]
    pub steps: Option<u64>,

    /// Train for this many epochs (passes over the train split) instead of --steps.
    #[arg(long, allow_negative_numbers = true)]
    pub epochs: Option<f64>,

    /// Streams per batch B [default: 16].
    #[arg(long)]
    pub batch: Option<usize>,

    /// Window length T: the Transformer's context, the LSTM's truncated-BPTT length [default: the preset's].
    #[arg(long)]
    pub bptt: Option<usize>,

    /// Peak learning rate [default: 1e-3].
    #[arg(long, allow_negative_numbers = true)]
    pub lr: Option<f64>,

    /// Optimizer [default: adamw].
    #[arg(long, value_enum)]
    pub optimizer: Option<OptimizerKind>,

    /// Learning-rate schedule after the linear warm-up [default: cosine].
    #[arg(long, value_enum)]
    pub schedule: Option<Schedule>,

    /// Linear warm-up steps [default: 100].
    #[arg(long)]
    pub warmup: Option<u64>,

    /// Weight decay (decoupled for AdamW) [default: 0.01].
    #[arg(long, allow_negative_numbers = true)]
    pub weight_decay: Option<f64>,

    /// Clip gradients to this global L2 norm; 0 turns clipping off [default: 1.0].
    #[arg(long, allow_negative_numbers = true)]
    pub clip: Option<f64>,

    /// Evaluate exact validation PPL (total and per group) every N steps; 0 = only at the end [default: 200].
    #[arg(long)]
    pub eval_every: Option<u64>,

    /// Write a checkpoint every N steps; 0 = only at the end [default: 500].
    #[arg(long)]
    pub checkpoint_every: Option<u64>,

    /// Keep the newest N checkpoints [default: 3].
    #[arg(long)]
    pub keep: Option<usize>,

    /// Snapshot the embedding matrix every N steps for the metrics; 0 = never [default: 50].
    #[arg(long)]
    pub snapshot_every: Option<u64>,

    /// Run directory [default: checkpoints/<model>-<corpus>-<UTC time>].
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,

    /// TOML file with [model] (preset = "…" plus any model field) and [train] (any training field).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Random seed (initialisation, dropout) [default: 1].
    #[arg(long)]
    pub seed: Option<u64>,

    /// Continue the run in DIR (a run directory or one of its step-NNNNNN folders) exactly where its
    /// newest checkpoint left off; --steps may extend it.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,

    /// Where frequency groups start, as rank fractions (see `data stats --help`).
    #[arg(long, value_name = "MEDIUM,RARE", default_value = "0.3,0.8")]
    pub groups: GroupBounds,

    /// Run without the TUI: a progress bar on a terminal, plain log lines otherwise (the default
    /// when stdout is not a terminal).
    #[arg(long)]
    pub headless: bool,

    /// Draw the embedding scatter with ASCII density glyphs instead of braille (fonts without
    /// braille). NO_COLOR in the environment turns colour off.
    #[arg(long)]
    pub ascii: bool,

    /// Another run (its newest checkpoint) or embedding matrix whose normalised spectrum the
    /// workbench's Spectrum pane draws beside this run's.
    #[arg(long, value_name = "OTHER")]
    pub compare: Option<PathBuf>,

    /// In plain-log mode, print a step line every N steps [default: every 1% of the run].
    #[arg(long)]
    pub log_every: Option<u64>,

    /// How often the metrics store writes its buffer to disk, in seconds (a crash loses at most
    /// this much); 0 writes after every event.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 5.0,
        allow_negative_numbers = true
    )]
    pub store_flush_secs: f64,

    /// The data term: mle (full softmax), nce (k unigram noise samples, log Z fixed at 0) or nce-r
    /// (NCE + α/γ·(log Z)² on a sampled fraction γ of positions) [default: mle].
    #[arg(long, value_enum, help_heading = "Objectives")]
    pub objective: Option<LossKind>,

    /// Switch a regulariser on, repeatable: cos=γ (CosReg, paper 1.0), lap=λ (Laplacian, paper
    /// 0.01 PTB / 0.001 WT2), agg=α[:g1|:g2][:static][:memory=K] (adaptive gradient gating; α in
    /// occurrences per update, paper 0.03 at 32,768 tokens per update), sc=exp:λ or sc=poly:λ
    /// [:gamma=γ][:c2=c][:orth=λ][:spec=λ] (spectrum control), dev=α ((log Z)²), ul=α
    /// (unlikelihood); NAME=off switches one off.
    #[arg(long = "reg", value_name = "NAME=WEIGHT", help_heading = "Objectives")]
    pub regs: Vec<String>,

    /// Freeze the rows of a frequency group (frequent, medium, rare) bit-identically, optionally
    /// until a step: rare@2000. Repeatable.
    #[arg(long, value_name = "GROUP[@STEP]", help_heading = "Objectives")]
    pub freeze: Vec<String>,

    /// Gradient-part freezing (Yu et al. §3.3): drop part b (push from non-rare-target
    /// positions), c (push from other rare-target positions) or bc of the rare rows' gradient.
    #[arg(long, value_name = "b|c|bc", help_heading = "Objectives")]
    pub gate_freeze: Option<String>,

    /// NCE: noise samples k per batch [default: 100].
    #[arg(long, value_name = "K", help_heading = "Objectives")]
    pub nce_noise: Option<usize>,

    /// NCE-R: weight α and sampled fraction γ of its (log Z)² term [default: 1.0,0.1].
    #[arg(long, value_name = "ALPHA,GAMMA", help_heading = "Objectives")]
    pub nce_r: Option<String>,
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
}

#[derive(Debug, Args)]
pub struct BenchTuiArgs {
    /// Rows of W in the drawn state (the vocabulary size).
    #[arg(long, default_value_t = 10_000)]
    pub n: usize,
    /// Columns of W in the drawn state.
    #[arg(long, default_value_t = 128)]
    pub d: usize,
    /// Frames drawn per layout.
    #[arg(long, default_value_t = 200)]
    pub frames: usize,
    /// Model of the throughput comparison.
    #[arg(long, value_enum, default_value = "tiny")]
    pub model: Preset,
    /// Vocabulary of the throughput comparison.
    #[arg(long, default_value_t = 10_000)]
    pub vocab: usize,
    /// Steps per run of the throughput comparison.
    #[arg(long, default_value_t = 30)]
    pub steps: u64,
    /// Headless/TUI pairs of runs (the median ratio is reported).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Only the frame times.
    #[arg(long)]
    pub frames_only: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BenchStoreArgs {
    /// Rows appended in the append benchmark.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: usize,
    /// Training steps of the simulated long run.
    #[arg(long, default_value_t = 100_000)]
    pub steps: u64,
    /// Points of the decimated history.
    #[arg(long, default_value_t = 1_000)]
    pub points: usize,
    /// Timed repeats (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BenchObjectivesArgs {
    #[arg(long, value_enum, default_value = "tiny")]
    pub model: Preset,
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// Vocabulary sizes N, one table each (10,000 = PTB, 33,278 = WikiText-2).
    #[arg(long, value_delimiter = ',', default_value = "10000,33278")]
    pub vocab: Vec<usize>,
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Window length T [default: the preset's].
    #[arg(long)]
    pub bptt: Option<usize>,
    /// Rounds over all objectives (the ratio is the median over rounds of the per-round ratio).
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// Timed steps per objective per round.
    #[arg(long, default_value_t = 1)]
    pub steps: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BenchMetricsArgs {
    /// Rows of W (vocabulary size).
    #[arg(long, default_value_t = 33_278)]
    pub n: usize,
    /// Columns of W (embedding size).
    #[arg(long, default_value_t = 400)]
    pub d: usize,
    /// Timed repeats of each panel computation (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Neighbour queries timed.
    #[arg(long, default_value_t = 200)]
    pub queries: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also time faer's thin SVD of W in f64 (the usual way to get the spectrum) for comparison.
    #[arg(long)]
    pub reference: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BenchTrainArgs {
    #[arg(long, value_enum, default_value = "tiny")]
    pub model: Preset,
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// Timed steps (after warm-up).
    #[arg(long, default_value_t = 20)]
    pub steps: u64,
    /// Untimed warm-up steps.
    #[arg(long, default_value_t = 5)]
    pub warmup: u64,
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Window length T [default: the preset's].
    #[arg(long)]
    pub bptt: Option<usize>,
    /// Vocabulary size N.
    #[arg(long, default_value_t = 10_000)]
    pub vocab: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Token counts per split, vocabulary, out-of-vocabulary words and frequency groups of a corpus.
    Stats(StatsArgs),
    /// Write the synthetic corpus (train.txt, valid.txt, test.txt, classes.tsv) to a directory.
    Synth(SynthArgs),
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Corpus directory (train.txt/valid.txt/test.txt, wiki.*.tokens or ptb.*.txt) or `synthetic`.
    pub corpus: String,

    /// Print JSON instead of a table (keys: train_tokens, valid_tokens, test_tokens, vocab_size,
    /// groups.{frequent,medium,rare}.{size,min_count,max_count}, splits, load_seconds, …).
    #[arg(long)]
    pub json: bool,

    /// Where the medium and the rare group start, as fractions of the vocabulary ranks; both
    /// strictly inside (0, 1), increasing. Group boundaries are floor(fraction × vocabulary size);
    /// tokens with equal counts on both sides of a boundary are split by rank (first occurrence).
    #[arg(long, value_name = "MEDIUM,RARE", default_value = "0.3,0.8")]
    pub groups: GroupBounds,
}

#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Directory to write into (created if missing; existing files of the same names are replaced).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Random seed; the same seed and settings give byte-identical files.
    #[arg(long, default_value_t = SynthConfig::default().seed)]
    pub seed: u64,

    /// Number of word types (the vocabulary adds <eos> and <unk>).
    #[arg(long, default_value_t = SynthConfig::default().vocab)]
    pub vocab: usize,

    /// Train tokens, <eos> included; valid and test get 5% of this each.
    #[arg(long, default_value_t = SynthConfig::default().tokens)]
    pub tokens: usize,

    /// Number of latent word classes (the ground truth of classes.tsv).
    #[arg(long, default_value_t = SynthConfig::default().classes)]
    pub classes: usize,

    /// Exponent s of the Zipfian unigram distribution, frequency ∝ rank^(-s).
    #[arg(long, default_value_t = SynthConfig::default().zipf, allow_negative_numbers = true)]
    pub zipf: f64,
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Data(DataCommand::Stats(args)) => data_stats(args),
        Command::Data(DataCommand::Synth(args)) => data_synth(args),
        Command::Train(args) => train(*args),
        Command::Eval(args) => eval_cmd(args),
        Command::Inspect(args) => inspect_cmd(args),
        Command::Bench(BenchCommand::Train(args)) => bench_train_cmd(args),
        Command::Bench(BenchCommand::Objectives(args)) => bench_objectives_cmd(args),
        Command::Bench(BenchCommand::Metrics(args)) => bench_metrics_cmd(args),
        Command::Bench(BenchCommand::Store(args)) => bench_store_cmd(args),
        Command::Bench(BenchCommand::Tui(args)) => bench_tui_cmd(args),
        Command::Export(args) => export_cmd(args),
        Command::Store(StoreCommand::Compact { runs }) => store_compact_cmd(runs),
    }
}

/// Overrides the window length of a model config.
fn with_window(mut model: ModelConfig, window: Option<usize>) -> ModelConfig {
    if let Some(t) = window {
        match &mut model {
            ModelConfig::Transformer(c) => c.context = t,
            ModelConfig::Lstm(c) => c.bptt = t,
        }
    }
    model
}

fn train(args: TrainArgs) -> Result<()> {
    // Read before anything is created, so a bad path costs nothing.
    let reference = match &args.compare {
        Some(other) => Some(reference_spectrum(other)?),
        None => None,
    };
    if !(args.store_flush_secs.is_finite() && args.store_flush_secs >= 0.0) {
        bail!(
            "--store-flush-secs must be a number of seconds ≥ 0, got {}",
            args.store_flush_secs
        );
    }
    let (trainer, run) = match &args.resume {
        Some(dir) => {
            let (trainer, run) = engine::resume(dir, args.steps)?;
            (trainer, run)
        }
        None => new_run(&args)?,
    };
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let log_every = args
        .log_every
        .unwrap_or_else(|| (trainer.config().steps / 100).max(1));
    let objectives = trainer.objectives().clone();
    let groups = *trainer.corpus().groups();
    let vocab = std::sync::Arc::new(conelab::tui::neighbors::Vocabulary {
        tokens: trainer.corpus().vocab().tokens().to_vec(),
        counts: trainer.corpus().vocab().counts().to_vec(),
    });
    let writer = open_store(&run)?.with_policy(store::FlushPolicy {
        rows: store::FlushPolicy::default().rows,
        interval: std::time::Duration::from_secs_f64(args.store_flush_secs),
    });
    let handle = store::recorder::record(engine::spawn(trainer, Some(run)), writer)
        .context("starting the metrics store's thread")?;
    // Ctrl-C or SIGTERM: stop after the current step and save; a second one exits at once.
    let commands = std::sync::Mutex::new(Some(handle_sender(&handle)));
    let _ = ctrlc::set_handler(move || {
        let mut slot = commands.lock().unwrap_or_else(|e| e.into_inner());
        match slot.take() {
            Some(send) => send(EngineCommand::Stop { save: true }),
            None => std::process::exit(130),
        }
    });
    let outcome = if tty && !args.headless {
        let view = conelab::tui::app::ViewOptions {
            no_color: conelab_widgets::no_color_from_env(),
            ascii: args.ascii,
        };
        conelab::tui::run_live(handle, objectives, groups, vocab, reference, view)?
    } else {
        headless::run(handle, tty, log_every)
    };
    match outcome {
        Outcome::Completed { .. } | Outcome::Stopped { .. } => Ok(()),
        Outcome::Diverged { step, loss } => bail!(
            "training diverged at step {step} (loss {loss}); the last good checkpoint is kept"
        ),
        Outcome::Failed { message } => bail!("training failed: {message}"),
    }
}

/// The normalised singular values of another run's newest checkpoint (or a matrix), labelled by
/// its folder or file name.
fn reference_spectrum(path: &std::path::Path) -> Result<(String, Vec<f64>)> {
    let m = load_matrix(path, None)?;
    let w = conelab::metrics::Embeddings::new(m.n, m.d, &m.data)?;
    let panel = conelab::metrics::EmbeddingPanel::compute(
        w,
        None,
        &conelab::metrics::PanelOptions {
            projection: None,
            also_centred: false,
            threads: conelab::metrics::Threads::All,
        },
    )?;
    let label = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "other".into());
    Ok((label, panel.total.sv_norm))
}

/// The run's metrics store (created on a new run, continued on a resumed one).
fn open_store(run: &RunDir) -> Result<StoreWriter> {
    let spec = run.spec();
    let config = std::fs::read_to_string(run.path().join("run.toml")).unwrap_or_default();
    let run_id = run
        .path()
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| spec.name.clone());
    let corpus = match &spec.corpus {
        CorpusSpec::Dir { path } => path.display().to_string(),
        CorpusSpec::Synthetic(_) => "synthetic".into(),
    };
    let record = RunRecord::new(&run_id, config, corpus, spec.device.clone());
    Ok(StoreWriter::open(run.path(), &record)?)
}

fn export_cmd(args: ExportArgs) -> Result<()> {
    let format = match (args.format, &args.out) {
        (Some(f), _) => f,
        (None, Some(out)) => match out.extension().and_then(|e| e.to_str()) {
            Some("csv") => ExportFormatArg::Csv,
            Some("parquet") => ExportFormatArg::Parquet,
            Some("json") => ExportFormatArg::Json,
            Some("tex") => ExportFormatArg::Latex,
            _ => ExportFormatArg::Md,
        },
        (None, None) => ExportFormatArg::Md,
    };
    let format = match format {
        ExportFormatArg::Csv => export::Format::Csv,
        ExportFormatArg::Parquet => export::Format::Parquet,
        ExportFormatArg::Json => export::Format::Json,
        ExportFormatArg::Md => export::Format::Markdown,
        ExportFormatArg::Latex => export::Format::Latex,
    };
    if format.is_binary() && args.out.is_none() && std::io::stdout().is_terminal() {
        bail!("Parquet is binary: give --out FILE or redirect stdout");
    }
    let request = export::ExportRequest {
        runs: args.runs,
        table: match args.table {
            ExportTableArg::Metrics => export::Table::Metrics,
            ExportTableArg::Groups => export::Table::Groups,
            ExportTableArg::Curves => export::Table::Curves,
            ExportTableArg::Events => export::Table::Events,
            ExportTableArg::Neighbors => export::Table::Neighbors,
        },
        format,
        step: args.step,
        split: args.split,
        metrics: args.metrics,
        words: args.words,
        k: args.k,
    };
    let table = export::build(&request)?;
    for w in &table.warnings {
        eprintln!("conelab: warning: {w}");
    }
    let bytes = export::render(&table, format)?;
    match &args.out {
        Some(path) => conelab::atomic::write_file(path, &bytes)
            .with_context(|| format!("writing {}", path.display())),
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(&bytes).and_then(|()| out.flush()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => other.context("writing to stdout"),
            }
        }
    }
}

fn store_compact_cmd(runs: Vec<PathBuf>) -> Result<()> {
    for run in runs {
        let replaced = store::compact(&run)?;
        print_stdout(&format!(
            "{}: {replaced} segment files compacted\n",
            run.display()
        ))?;
    }
    Ok(())
}

fn bench_tui_cmd(args: BenchTuiArgs) -> Result<()> {
    if args.n < 2 || args.d == 0 || args.frames == 0 || args.steps < 4 || args.vocab < 3 {
        bail!("--n ≥ 2, --d ≥ 1, --frames ≥ 1, --steps ≥ 4 and --vocab ≥ 3 are needed");
    }
    let frames = conelab::tui::bench::bench_frames(args.n, args.d, args.frames)?;
    let throughput = if args.frames_only {
        None
    } else {
        let model = args.model.config();
        Some(conelab::tui::bench::bench_throughput(
            args.model.name(),
            &model,
            args.vocab,
            args.steps,
            args.rounds,
        )?)
    };
    if args.json {
        let v = serde_json::json!({ "frames": frames, "throughput": throughput });
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    let mut out = format!(
        "frame time, W {}×{}, 2,000 steps of history (TestBackend, full redraw)\n{:<34} {:>9} {:>10} {:>8} {:>8}\n",
        args.n, args.d, "layout", "size", "median ms", "p95 ms", "max ms"
    );
    for r in &frames {
        out.push_str(&format!(
            "{:<34} {:>9} {:>10.2} {:>8.2} {:>8.2}\n",
            r.what,
            format!("{}×{}", r.width, r.height),
            r.median_ms,
            r.p95_ms,
            r.max_ms
        ));
    }
    if let Some(t) = throughput {
        out.push_str(&format!(
            "\ntraining throughput, {} N={} ({} steps × {} rounds, alternated)\nheadless {:.0} tok/s, under the TUI {:.0} tok/s: ratio {:.3} (median of per-round ratios; {} frames drawn)\n",
            t.model, t.vocab, t.steps_per_round, t.rounds, t.headless_tokens_per_sec, t.tui_tokens_per_sec, t.ratio, t.frames_drawn
        ));
    }
    print_stdout(&out)
}

fn bench_store_cmd(args: BenchStoreArgs) -> Result<()> {
    if args.rows == 0 || args.steps == 0 || args.points == 0 {
        bail!("--rows, --steps and --points must be at least 1");
    }
    let r = bench_store(&StoreBench {
        rows: args.rows,
        steps: args.steps,
        points: args.points,
        repeats: args.repeats.max(1),
    })?;
    if args.json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    let mut out = format!(
        "{:<64} {:>10} {:>10} {:>8}\n",
        "operation", "median ms", "min ms", "goal ms"
    );
    for row in &r.rows {
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
        r.long_run_rows, r.long_run_segments, r.long_run_mib
    ));
    print_stdout(&out)
}

/// A command sender usable from the signal handler.
fn handle_sender(handle: &engine::EngineHandle) -> Box<dyn Fn(EngineCommand) + Send> {
    let tx = handle.command_sender();
    Box::new(move |c| {
        let _ = tx.send(c);
    })
}

/// The objective flags on top of the config file's `[objectives]`; errors name the flag.
fn apply_objective_args(o: &mut Objectives, args: &TrainArgs) -> Result<()> {
    let usage = |m: String| anyhow::anyhow!(m);
    if let Some(kind) = args.objective {
        o.loss = kind;
    }
    for r in &args.regs {
        o.apply_reg_arg(r).map_err(usage)?;
    }
    for f in &args.freeze {
        o.apply_freeze_arg(f).map_err(usage)?;
    }
    if let Some(g) = &args.gate_freeze {
        o.gate_freeze = GateParts::parse(g.trim())
            .ok_or_else(|| usage(format!("--gate-freeze {g}: expected b, c or bc")))?;
    }
    if let Some(k) = args.nce_noise {
        o.nce.noise = k;
    }
    if let Some(spec) = &args.nce_r {
        let bad = || {
            usage(format!(
                "--nce-r {spec}: expected ALPHA,GAMMA, e.g. 1.0,0.1"
            ))
        };
        let (a, g) = spec.split_once(',').ok_or_else(bad)?;
        o.nce.alpha = a.trim().parse().map_err(|_| bad())?;
        o.nce.fraction = g.trim().parse().map_err(|_| bad())?;
    }
    Ok(())
}

/// `*slot = v` when a flag was given.
fn set<T>(slot: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *slot = v;
    }
}

fn new_run(args: &TrainArgs) -> Result<(Trainer, RunDir)> {
    let file = match &args.config {
        Some(p) => ConfigFile::read(p)?,
        None => ConfigFile::default(),
    };
    let preset = args.model.or(file.preset).unwrap_or(Preset::Tiny);
    let model = with_window(file.model(preset)?, args.bptt);
    let mut train = file.train()?;
    set(&mut train.batch, args.batch);
    set(&mut train.lr, args.lr);
    set(&mut train.optimizer, args.optimizer);
    set(&mut train.schedule, args.schedule);
    set(&mut train.warmup, args.warmup);
    set(&mut train.weight_decay, args.weight_decay);
    set(&mut train.clip_norm, args.clip);
    set(&mut train.eval_every, args.eval_every);
    set(&mut train.checkpoint_every, args.checkpoint_every);
    set(&mut train.keep_checkpoints, args.keep);
    set(&mut train.snapshot_every, args.snapshot_every);
    set(&mut train.seed, args.seed);
    set(&mut train.steps, args.steps);
    apply_objective_args(&mut train.objectives, args)?;
    if let Some(e) = args.epochs
        && !(e.is_finite() && e > 0.0)
    {
        bail!("invalid --epochs {e}: must be a positive number");
    }

    let source = CorpusSource::parse(&args.corpus);
    let options = LoadOptions {
        groups: args.groups,
        ..LoadOptions::default()
    };
    let corpus = Corpus::load(&source, &options)?;
    let corpus_name = match &source {
        CorpusSource::Synthetic(_) => "synthetic".to_owned(),
        CorpusSource::Dir(p) => p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "corpus".into()),
    };
    let mut trainer = Trainer::new(
        std::sync::Arc::new(corpus),
        model.clone(),
        train,
        args.device,
    )?;
    if let Some(epochs) = args.epochs {
        let steps = (epochs * trainer.windows_per_epoch() as f64)
            .ceil()
            .max(1.0) as u64;
        trainer.set_total_steps(steps);
    }
    let name = format!("{}-{corpus_name}-{}", preset.name(), utc_stamp());
    let dir = args
        .run_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("checkpoints").join(&name));
    if dir.join("run.toml").exists() {
        bail!(
            "{} already holds a run: continue it with --resume {}, or choose another --run-dir",
            dir.display(),
            dir.display()
        );
    }
    let spec = RunSpec {
        conelab_version: env!("CARGO_PKG_VERSION").to_owned(),
        name,
        device: args.device.to_string(),
        group_bounds: [args.groups.medium_start(), args.groups.rare_start()],
        corpus: CorpusSpec::from_source(&source),
        // The trainer may have adjusted the model (an output bias for self-normalisation).
        model: trainer.model_config().clone(),
        train: trainer.config().clone(),
    };
    let run = RunDir::create(&dir, spec, trainer.corpus().vocab())?;
    Ok((trainer, run))
}

/// `YYYYmmdd-HHMMSS` in UTC, for run names.
fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn bench_objectives_cmd(args: BenchObjectivesArgs) -> Result<()> {
    if args.rounds == 0 || args.steps == 0 || args.vocab.is_empty() {
        bail!("--rounds, --steps and --vocab must be at least 1");
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
        };
        let r = bench_objectives(&bench)?;
        if !args.json {
            print_stdout(&format!("{}\n", r.render()))?;
        }
        results.push(r);
    }
    if args.json {
        print_stdout(&format!("{}\n", serde_json::to_string_pretty(&results)?))?;
    }
    Ok(())
}

fn bench_train_cmd(args: BenchTrainArgs) -> Result<()> {
    let bench = TrainBench {
        model_name: args.model.name().to_owned(),
        model: with_window(args.model.config(), args.bptt),
        device: args.device,
        batch: args.batch,
        vocab: args.vocab,
        warmup: args.warmup,
        steps: args.steps.max(1),
        seed: args.seed,
    };
    let r = bench_train(&bench)?;
    if args.json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    print_stdout(&format!(
        "{:<9} {:<6} {:<13} {:>5} {:>5} {:>7} {:>11} {:>11} {:>9} {:>9} {:>10}\n{:<9} {:<6} {:<13} {:>5} {:>5} {:>7} {:>11} {:>11.0} {:>9.1} {:>9.1} {:>10.0}\n",
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
        r.engine,
        r.model,
        r.device,
        r.batch,
        r.window,
        r.vocab,
        r.parameters,
        r.tokens_per_sec,
        r.ms_per_step,
        r.ms_per_step_std,
        r.peak_rss_mib
    ))
}

fn eval_cmd(args: EvalArgs) -> Result<()> {
    let split = match args.split {
        HeldOutSplit::Valid => Split::Valid,
        HeldOutSplit::Test => Split::Test,
    };
    let reports = args
        .runs
        .iter()
        .map(|run| evaluate_checkpoint(run, split, args.device, args.k))
        .collect::<Result<Vec<_>, _>>()?;
    if args.json {
        let json = match reports.as_slice() {
            [one] => one.to_json(),
            many => serde_json::Value::Array(many.iter().map(|r| r.to_json()).collect()),
        };
        print_stdout(&format!("{}\n", serde_json::to_string_pretty(&json)?))
    } else if args.markdown || reports.len() > 1 {
        print_stdout(&conelab::analysis::comparison_markdown(&reports))
    } else {
        print_stdout(&reports[0].render())
    }
}

fn inspect_cmd(args: InspectArgs) -> Result<()> {
    let mut m = load_matrix(&args.path, args.tensor.as_deref())?;
    if let Some(v) = &args.vocab {
        m.tokens = Some(read_vocab_file(v, m.n)?);
    }
    if let Some(c) = &args.counts {
        m.counts = Some(read_counts_file(c, m.n)?);
    }
    let bounds_of = |m: &conelab::checkpoint::matrix::LoadedMatrix| -> Result<GroupBounds> {
        Ok(match (args.groups, m.group_bounds) {
            (Some(b), _) => b,
            (None, Some([a, b])) => GroupBounds::new(a, b)?,
            (None, None) => GroupBounds::default(),
        })
    };
    let bounds = bounds_of(&m)?;
    let other = match &args.compare {
        Some(p) => Some(load_matrix(p, None)?),
        None => None,
    };
    if !args.json && !args.no_tui && std::io::stdout().is_terminal() {
        let view = conelab::tui::app::ViewOptions {
            no_color: conelab_widgets::no_color_from_env(),
            ascii: false,
        };
        let mut sides = vec![conelab::tui::browser::Side::new(&m, bounds, view)?];
        if let Some(o) = &other {
            sides.push(conelab::tui::browser::Side::new(o, bounds_of(o)?, view)?);
        }
        conelab::tui::run_browser(conelab::tui::browser::Browser::new(sides))?;
        return Ok(());
    }
    let request = InspectRequest {
        queries: args.neighbors.clone(),
        k: args.k,
        similarity: match args.metric {
            NeighborMetric::Cosine => Similarity::Cosine,
            NeighborMetric::Euclidean => Similarity::Euclidean,
        },
    };
    let report = inspect(&m, bounds, &request)?;
    let other = match &other {
        Some(o) => Some(inspect(o, bounds_of(o)?, &request)?),
        None => None,
    };
    if args.json {
        let value = match &other {
            Some(o) => serde_json::json!([report.to_json(), o.to_json()]),
            None => report.to_json(),
        };
        print_stdout(&format!("{}\n", serde_json::to_string_pretty(&value)?))
    } else {
        let mut text = report.render();
        if let Some(o) = &other {
            text.push('\n');
            text.push_str(&o.render());
        }
        print_stdout(&text)
    }
}

fn bench_metrics_cmd(args: BenchMetricsArgs) -> Result<()> {
    if args.n < 2 || args.d == 0 {
        bail!("--n must be at least 2 and --d at least 1");
    }
    let r = bench_metrics(&MetricsBench {
        n: args.n,
        d: args.d,
        repeats: args.repeats.max(1),
        queries: args.queries.max(1),
        seed: args.seed,
        reference: args.reference,
    })?;
    if args.json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    let mut out = format!(
        "W: {} x {} f32 ({:.1} MiB), {} threads\n{:<56} {:>10} {:>10} {:>14}\n",
        r.n, r.d, r.w_mib, r.threads, "operation", "median ms", "min ms", "peak extra/W"
    );
    for row in &r.rows {
        let mem = row
            .peak_extra_w
            .map_or_else(|| "-".to_owned(), |m| format!("{m:.2}x"));
        out.push_str(&format!(
            "{:<56} {:>10.2} {:>10.2} {:>14}\n",
            row.what, row.ms, row.min_ms, mem
        ));
    }
    print_stdout(&out)
}

fn data_stats(args: StatsArgs) -> Result<()> {
    let options = LoadOptions {
        groups: args.groups,
        ..LoadOptions::default()
    };
    let source = CorpusSource::parse(&args.corpus);
    let start = Instant::now();
    let corpus = Corpus::load(&source, &options)?;
    let seconds = start.elapsed().as_secs_f64();
    let bounds = [args.groups.medium_start(), args.groups.rare_start()];
    let report = CorpusReport::new(&corpus, bounds, seconds);
    if args.json {
        let json = serde_json::to_string_pretty(&report).context("serialising the report")?;
        print_stdout(&format!("{json}\n"))
    } else {
        print_stdout(&report.render_table())
    }
}

fn data_synth(args: SynthArgs) -> Result<()> {
    let config = SynthConfig {
        seed: args.seed,
        vocab: args.vocab,
        tokens: args.tokens,
        classes: args.classes,
        zipf: args.zipf,
        ..SynthConfig::default()
    };
    let start = Instant::now();
    let synth = SyntheticCorpus::generate(&config)?;
    let generated = start.elapsed().as_secs_f64();
    synth.write_to(&args.out)?;
    let train = conelab::data::SplitText::from_bytes(
        args.out.join("train.txt"),
        synth.texts()[0].clone().into_bytes(),
        usize::MAX,
    )?;
    let (vocab, ids, _) = VocabBuilder::default().build(&train)?;
    print_stdout(&format!(
        "wrote {} (train.txt, valid.txt, test.txt, classes.tsv): {} train tokens, {} types seen of {}, {} classes, measured Zipf exponent {:.3} (target {}), generated in {:.3} s\n",
        args.out.display(),
        thousands(ids.len() as u64),
        thousands(vocab.counts().iter().filter(|&&c| c > 0).count() as u64),
        thousands(config.vocab as u64 + 2),
        config.classes,
        zipf_exponent(vocab.counts()),
        config.zipf,
        generated
    ))
}

/// Writes to stdout; a closed pipe (`conelab … | head`) is a normal end, not an error.
fn print_stdout(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}
