//! The command line: clap definitions and the dispatch to library code.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use conelab::base::exit::ExitStatus;

use conelab::analysis::{EvalOptions, InspectRequest, evaluate_checkpoint, inspect};
use conelab::bench::{
    MetricsBench, ObjectivesBench, StoreBench, TrainBench, bench_metrics, bench_objectives,
    bench_store, bench_train,
};
use conelab::checkpoint::matrix::{load_matrix, read_counts_file, read_vocab_file};
use conelab::data::{
    Corpus, CorpusReport, CorpusSource, GroupBounds, LoadOptions, Split, SynthConfig,
    SyntheticCorpus, VocabBuilder, thousands, zipf_exponent,
};
use conelab::metrics::Similarity;
use conelab::model::{DeviceSpec, Preset};
use conelab::run::launch::with_window;
use conelab::run::say;
use conelab::run::{self, RunError, TrainOptions};
use conelab::store;
use conelab::store::export::{self, StepChoice};
use conelab::store::labels::LabelEdit;

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
    /// Train a language model with tied embeddings: on a terminal the workbench attached to the
    /// run (which is a process of its own: it outlives the terminal); --headless reports on
    /// stdout; --detach starts it in the background.
    Train(Box<TrainOptions>),
    /// Open the workbench on a run: a live one (steer it; several viewers at once) or one that is
    /// over (read-only, its whole history).
    Attach(AttachArgs),
    /// Several runs side by side: overlaid curves (train loss, validation PPL in total and per
    /// group, I1, its unit-row form, IsoScore, mean cosine and norm, effective rank) by step or
    /// wall time with TensorBoard's smoothing, the Groups table with a row per run and every
    /// run's spectrum. Runs are read from their folders as they grow: live ones update live.
    Compare(CompareArgs),
    /// List the runs under a folder with their status.
    Runs(RunsArgs),
    /// A grid of training runs from one TOML file: `sweep run FILE` expands and runs it on this
    /// machine (`--local N` at a time; again: completed runs kept, unfinished ones resumed);
    /// `sweep status DIR` shows every run's state.
    #[command(subcommand)]
    Sweep(SweepCommand),
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
    /// Tag a run: `+T` (or `T`) adds a tag, `-T` takes it off; with none, print its tags. A live
    /// run changes its own run.json; one that is over is edited in place.
    Tag {
        /// The run's folder.
        run: PathBuf,
        #[arg(allow_hyphen_values = true, num_args = 0.., value_name = "+TAG|-TAG")]
        changes: Vec<String>,
    },
    /// Set a run's notes (replacing them; "" clears them, - reads them from stdin).
    Note {
        run: PathBuf,
        #[arg(allow_hyphen_values = true)]
        text: String,
    },
    /// Name a run: the label `conelab runs`, the workbench and exports show ("" takes it away).
    Rename { run: PathBuf, name: String },
    /// Print a shell completion script: e.g. `conelab completions bash >
    /// ~/.local/share/bash-completion/completions/conelab`, or `source <(conelab completions
    /// zsh)`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of conelab and its subcommands: `conelab man | man -l -`, or
    /// `conelab man --dir DIR` writes conelab.1 and one page per subcommand (conelab-train.1, …).
    Man {
        /// Write every page into this folder instead of printing the main one.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
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
    /// Each run's resolved configuration, flattened to dotted keys, a row per run; the keys whose
    /// values differ between the runs come first.
    Config,
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
    /// --table groups: one row per set of runs that differ only by seed (same run.toml but the
    /// seed, same objectives at the step, same step): mean ± sample std, and the count where a
    /// run lacks a value; CSV, JSON and Parquet get _mean, _std and _n columns.
    #[arg(long, value_enum)]
    pub aggregate: Option<AggregateArg>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AggregateArg {
    Seeds,
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

/// Where the shifted model's shift is measured: the validation split only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ShiftSource {
    Valid,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Run directories (their newest checkpoint) or `step-NNNNNN` checkpoint folders; several
    /// are compared side by side.
    #[arg(required = true, num_args = 1..)]
    pub runs: Vec<PathBuf>,

    /// The split to evaluate [default: valid; test with --shift-from].
    #[arg(long, value_enum)]
    pub split: Option<HeldOutSplit>,

    /// Also report Goldberger & Melamud's shifted model: the scores minus the mean log Z (μ_z)
    /// of this split, under `shifted` in --json (keys shift, ppl, unnormalised_ppl, mu_z,
    /// sigma_z) and as a line of the table; several runs get a self-normalisation table
    /// (their Tables 3/4). The shift comes from the validation split, as in the paper, never
    /// from the split evaluated on (test by default): a shift fitted on test would flatter it.
    #[arg(long, value_enum, value_name = "SPLIT")]
    pub shift_from: Option<ShiftSource>,

    /// Device to evaluate on [default: the run's own].
    #[arg(long)]
    pub device: Option<DeviceSpec>,

    /// Nearest neighbours per word, as everywhere `-k` is: here those the same-class
    /// precision@k counts (runs on a corpus with word classes); 0 skips it.
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
float64, 2-D), one row per token.\n\nJSON keys (stable): n, d, i1, i2, i1_unit, i2_unit, isoscore \
(I1/I2 of the row-normalised matrix and IsoScore: scale-free, unlike i1), mean_norm, sv_norm, sv_max, \
effective_rank, mean_cos, mean_cos_to_mean, groups.{frequent,medium,rare}.{same keys + rows}, \
rare_frequent_cos, neighbors.{WORD: [{token, cosine|distance, id, group, count}]}, \
class_precision.\n\nOn a terminal (and without --json or --headless) it opens the browser: the \
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

    /// Words whose neighbours to list, comma-separated (`#ROW` names a row by number); the same
    /// flag as `export --words` (`--neighbors` is its older name).
    #[arg(
        long,
        value_name = "W1,W2,…",
        value_delimiter = ',',
        visible_alias = "neighbors"
    )]
    pub words: Vec<String>,

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

    /// Print the tables even on a terminal (no browser), as `train --headless` runs without the
    /// workbench.
    #[arg(long, visible_alias = "no-tui")]
    pub headless: bool,

    /// The browser's colours for a dark or a light terminal background.
    #[arg(long, value_enum, default_value = "dark")]
    pub theme: run::options::Theme,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NeighborMetric {
    Cosine,
    Euclidean,
}

#[derive(Debug, Subcommand)]
pub enum SweepCommand {
    /// Expand FILE into runs (named by their varying values) under DIR/runs/ and run them.
    #[command(
        long_about = "Expand FILE into runs and run them on this machine.\n\nFILE: [base] \
holds `conelab train` options by long name (plus `corpus`); [grid] lists alternatives per key \
(the cartesian product, first key slowest); [[zip]] tables hold lists of equal length that vary \
together. A repeatable option takes a value, or a list of values, per alternative. Every run is \
checked as `conelab train` would before any starts. Runs go to DIR/runs/NAME (NAME: the varying \
`key-value`s joined by `_`), labelled with NAME without its seed part; DIR/sweep.json records the \
file and every run's arguments; each run's output is in DIR/logs/NAME.log. Running a sweep again \
keeps completed runs and resumes the others.\n\nExit status: 0 every run completed, 4 a run \
failed, 75 a run was stopped after saving (run the sweep again), 2 bad input."
    )]
    Run {
        file: PathBuf,
        /// The sweep's folder [default: sweeps/FILE-STEM].
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Runs at a time on this machine (the CPU threads are divided among them).
        #[arg(long, value_name = "N", default_value_t = 1)]
        local: usize,
        /// Print the runs and their arguments (with --slurm, the batch script); run nothing,
        /// write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Submit the runs as a SLURM job array (one task per run; preemption-safe: TERM two
        /// minutes before the time limit stops a run with a checkpoint and requeues its task).
        #[arg(long, conflicts_with = "local")]
        slurm: bool,
        #[command(flatten)]
        sbatch: SbatchArgs,
    },
    /// Internal: SLURM array task INDEX of the sweep in DIR (exec's its run).
    #[command(hide = true)]
    Task { dir: PathBuf, index: usize },
    /// Every run of a sweep with its state (from the run folders themselves).
    Status { dir: PathBuf },
}

/// `sbatch` options of `sweep run --slurm`.
#[derive(Debug, Args)]
pub struct SbatchArgs {
    #[arg(long, requires = "slurm", help_heading = "SLURM")]
    pub partition: Option<String>,
    /// Generic resources per task, e.g. gpu:1.
    #[arg(long, requires = "slurm", help_heading = "SLURM")]
    pub gres: Option<String>,
    /// Time limit per task, e.g. 04:00:00.
    #[arg(long, requires = "slurm", help_heading = "SLURM")]
    pub time: Option<String>,
    #[arg(long, requires = "slurm", help_heading = "SLURM")]
    pub account: Option<String>,
    #[arg(long, requires = "slurm", help_heading = "SLURM")]
    pub cpus_per_task: Option<u32>,
    /// Memory per task, e.g. 32G.
    #[arg(long, requires = "slurm", help_heading = "SLURM")]
    pub mem: Option<String>,
    /// Any other sbatch option, repeatable: --sbatch-arg=--qos=high.
    #[arg(
        long,
        requires = "slurm",
        allow_hyphen_values = true,
        help_heading = "SLURM"
    )]
    pub sbatch_arg: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Run directories, or names of runs under checkpoints/ (live or over; 12 colours on a
    /// dark background, 5 on a light one, then they repeat).
    #[arg(required = true, value_name = "RUN")]
    pub runs: Vec<PathBuf>,
    /// Draw the curves against the step or against wall-clock time since each run began.
    #[arg(long, value_enum, default_value = "step")]
    pub x: XAxisArg,
    /// TensorBoard's smoothing weight, 0 (raw) to 0.99; `+`/`-` change it in the view.
    #[arg(long, default_value_t = conelab::tui::compare::DEFAULT_SMOOTHING,
        allow_negative_numbers = true, value_parser = smoothing_weight)]
    pub smoothing: f64,
    /// A logarithmic y axis (`l` in the view).
    #[arg(long)]
    pub log_y: bool,
    /// Colours for a dark or a light terminal background.
    #[arg(long, value_enum, default_value = "dark")]
    pub theme: run::options::Theme,
    /// The curve shown first (↑/↓ in the view).
    #[arg(long, default_value = "loss", value_parser = clap::builder::PossibleValuesParser::new(
        conelab::tui::compare::CURVES.map(|c| c.name)))]
    pub curve: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum XAxisArg {
    Step,
    Time,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// A run directory, or the name of a run under checkpoints/ [default: the live run there; a
    /// list to pick from when there are several]. Several runs open the compare view (as
    /// `conelab compare` does).
    #[arg(value_name = "RUN")]
    pub runs: Vec<PathBuf>,
    /// Attach through this socket instead (a run's socket forwarded from another host with
    /// `ssh -L LOCAL:REMOTE HOST`).
    #[arg(long, value_name = "PATH", conflicts_with = "runs")]
    pub socket: Option<PathBuf>,
    /// Draw the embedding scatter with ASCII density glyphs instead of braille.
    #[arg(long)]
    pub ascii: bool,
    /// Leave the mouse to the terminal, so text can be selected (over SSH too); `M` switches
    /// capture on and off in the workbench.
    #[arg(long)]
    pub no_mouse: bool,
    /// Colours for a dark or a light terminal background.
    #[arg(long, value_enum, default_value = "dark")]
    pub theme: run::options::Theme,
}

#[derive(Debug, Args)]
#[command(
    long_about = "One row per run folder under DIR: name, status (live with its pid and host, \
completed, stopped, diverged, failed, crashed — no live process and no final record — or \
unreadable with the reason), step / total, device, objectives in force, best validation PPL, \
newest I1 and mean cosine, start time (UTC) and wall time.\n\nJSON (--json, stable): an array of \
objects with the keys name, dir, path, status, host, pid, step, total_steps, device, objective, \
best_valid_ppl, i1, mean_cos, started (RFC 3339), seconds; null where unknown; reason for an \
unreadable folder."
)]
pub struct RunsArgs {
    /// The folder holding the runs.
    #[arg(default_value = "checkpoints")]
    pub dir: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
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
}

#[derive(Debug, Args)]
pub struct BenchAttachArgs {
    #[arg(long, value_enum, default_value = "tiny")]
    pub model: Preset,
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Window length T [default: the preset's].
    #[arg(long)]
    pub bptt: Option<usize>,
    /// Untimed steps per run (the viewers attach during them).
    #[arg(long, default_value_t = 15)]
    pub warmup: u64,
    /// Timed steps per run.
    #[arg(long, default_value_t = 40)]
    pub steps: u64,
    /// Pairs of runs (without viewers, with two), alternating which goes first.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Steps in the store of the attach benchmark.
    #[arg(long, default_value_t = 100_000)]
    pub history: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
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
    /// LSTM models: run the layers in burn's autodiff graph instead of on the host (for
    /// side-by-side comparisons).
    #[arg(long)]
    pub graph_lstm: bool,
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
    /// LSTM models: run the layers in burn's autodiff graph instead of on the host (what the
    /// default CPU build did before; for side-by-side comparisons).
    #[arg(long)]
    pub graph_lstm: bool,
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

/// Runs the command; its exit status (0 unless a run says otherwise).
pub fn run(cli: Cli) -> Result<ExitStatus> {
    let done = |r: Result<()>| r.map(|()| ExitStatus::Success);
    match cli.command {
        Command::Data(DataCommand::Stats(args)) => done(data_stats(args)),
        Command::Data(DataCommand::Synth(args)) => done(data_synth(args)),
        Command::Train(args) => train(*args),
        Command::Attach(args) => attach_cmd(args),
        Command::Compare(args) => compare_cmd(args),
        Command::Runs(args) => done(runs_cmd(args)),
        Command::Sweep(SweepCommand::Run {
            file,
            out,
            local,
            dry_run,
            slurm,
            sbatch,
        }) => sweep_run_cmd(&file, out, local, dry_run, slurm.then_some(sbatch)),
        Command::Sweep(SweepCommand::Task { dir, index }) => sweep_task_cmd(&dir, index),
        Command::Sweep(SweepCommand::Status { dir }) => done(sweep_status_cmd(&dir)),
        Command::Eval(args) => done(eval_cmd(args)),
        Command::Inspect(args) => done(inspect_cmd(args)),
        Command::Bench(BenchCommand::Train(args)) => done(bench_train_cmd(args)),
        Command::Bench(BenchCommand::Objectives(args)) => done(bench_objectives_cmd(args)),
        Command::Bench(BenchCommand::Metrics(args)) => done(bench_metrics_cmd(args)),
        Command::Bench(BenchCommand::Store(args)) => done(bench_store_cmd(args)),
        Command::Bench(BenchCommand::Tui(args)) => done(bench_tui_cmd(args)),
        Command::Bench(BenchCommand::Attach(args)) => done(bench_attach_cmd(args)),
        Command::Export(args) => done(export_cmd(args)),
        Command::Store(StoreCommand::Compact { runs }) => done(store_compact_cmd(runs)),
        Command::Completions { shell } => done(completions_cmd(shell)),
        Command::Tag { run, changes } => done(tag_cmd(&run, &changes)),
        Command::Note { run, text } => done(note_cmd(&run, text)),
        Command::Rename { run, name } => done(rename_cmd(&run, name)),
        Command::Man { dir } => done(man_cmd(dir)),
    }
}

fn sweep_run_cmd(
    file: &Path,
    out: Option<PathBuf>,
    local: usize,
    dry_run: bool,
    slurm: Option<SbatchArgs>,
) -> Result<ExitStatus> {
    use conelab::sweep::start::{SweepRun, start};
    let request = SweepRun {
        file: file.to_path_buf(),
        out,
        local,
        dry_run,
        slurm: slurm.map(|sbatch| conelab::sweep::slurm::SlurmOptions {
            partition: sbatch.partition,
            gres: sbatch.gres,
            time: sbatch.time,
            account: sbatch.account,
            cpus_per_task: sbatch.cpus_per_task,
            mem: sbatch.mem,
            extra: sbatch.sbatch_arg,
        }),
    };
    let done = start(&request, |line| say(&format!("conelab sweep: {line}")))?;
    print_stdout(&done.text)?;
    Ok(done.status)
}

fn sweep_status_cmd(dir: &Path) -> Result<()> {
    use conelab::sweep::record::{SweepRecord, render_status, status};
    let record = SweepRecord::read(dir).map_err(|e| RunError::Usage(e.to_string()))?;
    let slurm = record
        .slurm
        .as_ref()
        .map(conelab::sweep::slurm::task_states);
    print_stdout(&render_status(&status(&record), slurm.as_ref()))
}

/// A SLURM array task: becomes its run's `conelab train` (exec), so a TERM the batch script
/// passes on reaches the run itself.
fn sweep_task_cmd(dir: &Path, index: usize) -> Result<ExitStatus> {
    use std::os::unix::process::CommandExt;
    let record = conelab::sweep::record::SweepRecord::read(dir)
        .map_err(|e| RunError::Usage(e.to_string()))?;
    let run = record.runs.get(index).ok_or_else(|| {
        RunError::Usage(format!(
            "task {index}: the sweep in {} has {} runs",
            dir.display(),
            record.runs.len()
        ))
    })?;
    let Some(args) = conelab::sweep::local::task_args(run) else {
        print_stdout(&format!("{}: completed before, kept\n", run.name))?;
        return Ok(ExitStatus::Success);
    };
    let exe = std::env::current_exe().context("finding the conelab binary")?;
    let e = std::process::Command::new(exe).args(&args).exec();
    Err(anyhow::Error::new(e).context(format!("starting {}", run.name)))
}

fn tag_cmd(run: &Path, changes: &[String]) -> Result<()> {
    let labels = run::labels::edit(run, &LabelEdit::from_tag_args(changes))?;
    print_stdout(&format!("tags: {}\n", labels.tag_list()))
}

fn note_cmd(run: &Path, text: String) -> Result<()> {
    let text = if text == "-" {
        let mut all = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut all)
            .context("reading the notes from stdin")?;
        all
    } else {
        text
    };
    let edit = LabelEdit {
        notes: Some(text),
        ..LabelEdit::default()
    };
    let labels = run::labels::edit(run, &edit)?;
    print_stdout(&match labels.notes.len() {
        0 => "notes cleared\n".to_string(),
        n => format!("notes saved ({n} bytes)\n"),
    })
}

fn rename_cmd(run: &Path, name: String) -> Result<()> {
    let edit = LabelEdit {
        name: Some(name),
        ..LabelEdit::default()
    };
    let labels = run::labels::edit(run, &edit)?;
    print_stdout(&match labels.name {
        Some(n) => format!("{} is now called {n}\n", run.display()),
        None => format!("{} has no name now\n", run.display()),
    })
}

fn completions_cmd(shell: clap_complete::Shell) -> Result<()> {
    let mut command = <Cli as clap::CommandFactory>::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "conelab", &mut script);
    print_stdout(&String::from_utf8_lossy(&script))
}

fn man_cmd(dir: Option<PathBuf>) -> Result<()> {
    let command = <Cli as clap::CommandFactory>::command();
    match dir {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command).render(&mut page)?;
            print_stdout(&String::from_utf8_lossy(&page))
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let pages = man_pages(command)?;
            for (name, page) in &pages {
                let path = dir.join(format!("{name}.1"));
                conelab::atomic::write_file_as("manual page", &path, page)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            print_stdout(&format!(
                "{} manual pages in {}\n",
                pages.len(),
                dir.display()
            ))
        }
    }
}

/// The page of `command` and of every subcommand below it, named `conelab`, `conelab-train`,
/// `conelab-bench-train`, … (the names `man` finds them by).
fn man_pages(command: clap::Command) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    type Pages = Vec<(String, Vec<u8>)>;
    fn walk(command: clap::Command, name: String, out: &mut Pages) -> std::io::Result<()> {
        let command = command.name(name.clone());
        let mut page = Vec::new();
        clap_mangen::Man::new(command.clone()).render(&mut page)?;
        out.push((name.clone(), page));
        for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
            walk(sub.clone(), format!("{name}-{}", sub.get_name()), out)?;
        }
        Ok(())
    }
    let mut out = Vec::new();
    let mut command = command;
    command.build();
    walk(command, "conelab".into(), &mut out)?;
    Ok(out)
}

/// `conelab train`: in this process (--headless, or stdout not a terminal), in the background
/// (--detach), or in the background with the workbench attached (a terminal).
fn train(opts: TrainOptions) -> Result<ExitStatus> {
    opts.validate().map_err(RunError::Usage)?;
    let tty = std::io::stdout().is_terminal();
    if opts.internal_detached {
        return Ok(run::serve::serve_here(&opts, false, true)?);
    }
    if opts.detach {
        let ready = run::detach::spawn(run::detach::child_args())?;
        print_stdout(&format!(
            "conelab: the run is training in the background (pid {}) in {}\n  attach:  conelab attach {}\n  list:    conelab runs\n  output:  {}\n",
            ready.pid,
            ready.dir.display(),
            ready.dir.display(),
            ready.dir.join(run::live::OUTPUT_LOG).display()
        ))?;
        return Ok(ExitStatus::Success);
    }
    if !tty || opts.headless {
        return Ok(run::serve::serve_here(&opts, tty, false)?);
    }
    // The workbench: the run is a process of its own; this one is its first viewer.
    let reference = match &opts.compare {
        Some(other) => Some(conelab::checkpoint::matrix::reference_spectrum(other)?),
        None => None,
    };
    let ready = run::detach::spawn(run::detach::child_args())?;
    let opened = run::attach::connect(&ready.socket)?;
    let setup = conelab::tui::ViewerSetup {
        view: conelab::tui::app::ViewOptions {
            no_color: conelab_widgets::no_color_from_env(),
            ascii: opts.ascii,
            no_mouse: opts.no_mouse,
            light: opts.theme == run::options::Theme::Light,
        },
        reference,
        read_only: None,
    };
    let exit = conelab::tui::run_viewer(opened.link, opened.hello, setup)?;
    Ok(conelab::tui::after_viewer(&ready.dir, exit))
}

fn attach_cmd(args: AttachArgs) -> Result<ExitStatus> {
    if args.runs.len() > 1 {
        return compare_cmd(CompareArgs {
            runs: args.runs,
            x: XAxisArg::Step,
            smoothing: conelab::tui::compare::DEFAULT_SMOOTHING,
            log_y: false,
            curve: "loss".into(),
            theme: args.theme,
        });
    }
    // Reach the run first (a refusal is worth saying as such), then the terminal.
    let opened = match &args.socket {
        Some(socket) => run::attach::connect(socket)?,
        None => {
            let root = PathBuf::from("checkpoints");
            let dir = match run::attach::resolve(args.runs.first().map(PathBuf::as_path), &root)? {
                run::attach::Resolved::One(d) => d,
                run::attach::Resolved::Several(list) => pick(&list)?,
            };
            run::attach::open(&dir)?
        }
    };
    if !std::io::stdout().is_terminal() {
        bail!(
            "attach needs a terminal (stdout is not one); `conelab runs --json` and `conelab export` read runs without one"
        );
    }
    let dir = opened.hello.dir.clone();
    let setup = conelab::tui::ViewerSetup {
        view: conelab::tui::app::ViewOptions {
            no_color: conelab_widgets::no_color_from_env(),
            ascii: args.ascii,
            no_mouse: args.no_mouse,
            light: args.theme == run::options::Theme::Light,
        },
        reference: None,
        read_only: opened.read_only.clone(),
    };
    let live = opened.read_only.is_none();
    let exit = conelab::tui::run_viewer(opened.link, opened.hello, setup)?;
    if live && exit == conelab::tui::ViewerExit::Detached {
        conelab::tui::after_viewer(&dir, exit);
    }
    // A viewer exits 0 however it leaves (the run's own status is the run's).
    Ok(ExitStatus::Success)
}

/// `--smoothing`: a weight from 0 (raw) to the view's maximum.
fn smoothing_weight(text: &str) -> std::result::Result<f64, String> {
    let max = conelab::tui::compare::MAX_SMOOTHING;
    text.parse::<f64>()
        .ok()
        .filter(|w| (0.0..=max).contains(w))
        .ok_or_else(|| format!("a weight from 0 (raw) to {max}"))
}

fn compare_cmd(args: CompareArgs) -> Result<ExitStatus> {
    use conelab::tui::compare::{CompareOptions, Curve, XAxis};
    let dirs = run::attach::resolve_many(&args.runs, &PathBuf::from("checkpoints"))?;
    if !std::io::stdout().is_terminal() {
        bail!(
            "compare needs a terminal (stdout is not one); `conelab export --table groups RUN…` and `--table curves` give the same numbers as tables"
        );
    }
    let options = CompareOptions {
        view: conelab::tui::app::ViewOptions {
            no_color: conelab_widgets::no_color_from_env(),
            light: args.theme == run::options::Theme::Light,
            ..Default::default()
        },
        x_axis: match args.x {
            XAxisArg::Step => XAxis::Step,
            XAxisArg::Time => XAxis::Time,
        },
        smoothing: args.smoothing,
        log_y: args.log_y,
        curve: Curve::by_name(&args.curve).unwrap_or(0),
    };
    conelab::tui::compare::run_compare(dirs, options, std::time::Duration::from_secs(1))?;
    Ok(ExitStatus::Success)
}

/// Several live runs: the user picks one by number.
fn pick(list: &[PathBuf]) -> Result<PathBuf> {
    let mut err = std::io::stderr();
    let _ = writeln!(err, "Several runs are live:");
    for (i, p) in list.iter().enumerate() {
        let _ = writeln!(err, "  {}  {}", i + 1, p.display());
    }
    let _ = write!(err, "Attach to which? [1-{}] ", list.len());
    let _ = err.flush();
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("reading the choice")?;
    let n: usize = line
        .trim()
        .parse()
        .ok()
        .filter(|n| (1..=list.len()).contains(n))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no run chosen ({:?}): name it: conelab attach RUN",
                line.trim()
            )
        })?;
    Ok(list[n - 1].clone())
}

fn runs_cmd(args: RunsArgs) -> Result<()> {
    let rows = run::list::list(&args.dir)?;
    if args.json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&rows)?));
    }
    if rows.is_empty() {
        return print_stdout(&format!("no runs under {}\n", args.dir.display()));
    }
    print_stdout(&run::list::render(&rows))
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
    if args.aggregate.is_some() && args.table != ExportTableArg::Groups {
        bail!("--aggregate seeds applies to --table groups only");
    }
    let request = export::ExportRequest {
        runs: args.runs,
        table: match args.table {
            ExportTableArg::Metrics => export::Table::Metrics,
            ExportTableArg::Groups => export::Table::Groups,
            ExportTableArg::Curves => export::Table::Curves,
            ExportTableArg::Events => export::Table::Events,
            ExportTableArg::Neighbors => export::Table::Neighbors,
            ExportTableArg::Config => export::Table::Config,
        },
        format,
        step: args.step,
        split: args.split,
        metrics: args.metrics,
        words: args.words,
        k: args.k,
        aggregate_seeds: args.aggregate == Some(AggregateArg::Seeds),
    };
    let table = export::build(&request)?;
    for w in &table.warnings {
        say(&format!("conelab: warning: {w}"));
    }
    let bytes = export::render(&table, format)?;
    match &args.out {
        Some(path) => conelab::atomic::write_file_as("export", path, &bytes)
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
        let done = store::compact(&run)?;
        print_stdout(&format!(
            "{}: {} segment files compacted\n",
            run.display(),
            done.replaced
        ))?;
        for (path, why) in &done.set_aside {
            say(&format!(
                "conelab: warning: {why}: moved to {} (not deleted)",
                path.display()
            ));
        }
    }
    Ok(())
}

fn bench_tui_cmd(args: BenchTuiArgs) -> Result<()> {
    if args.n < 2 || args.d == 0 || args.frames == 0 || args.steps < 4 || args.vocab < 3 {
        bail!("--n ≥ 2, --d ≥ 1, --frames ≥ 1, --steps ≥ 4 and --vocab ≥ 3 are needed");
    }
    let frames = conelab::bench::tui::bench_frames(args.n, args.d, args.frames)?;
    let throughput = if args.frames_only {
        None
    } else {
        let model = args.model.config();
        Some(conelab::bench::tui::bench_throughput(
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
    let mut out = conelab::bench::tui::render_frames(args.n, args.d, &frames);
    if let Some(t) = throughput {
        out.push('\n');
        out.push_str(&t.render());
    }
    print_stdout(&out)
}

fn bench_attach_cmd(args: BenchAttachArgs) -> Result<()> {
    if args.steps < 2 || args.warmup < 1 || args.history < 10 || args.batch == 0 {
        bail!("--steps ≥ 2, --warmup ≥ 1, --history ≥ 10 and --batch ≥ 1 are needed");
    }
    let r = conelab::bench::attach::bench_attach(&conelab::bench::attach::AttachBench {
        model: args.model.name().to_owned(),
        batch: args.batch,
        bptt: args.bptt,
        warmup: args.warmup,
        steps: args.steps,
        rounds: args.rounds.max(1),
        history: args.history,
        work: std::env::temp_dir(),
    })?;
    if args.json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    print_stdout(&r.render())
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
    print_stdout(&r.render())
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
            graph_lstm: args.graph_lstm,
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
        graph_lstm: args.graph_lstm,
    };
    let r = bench_train(&bench)?;
    if args.json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&r)?));
    }
    print_stdout(&r.render())
}

fn eval_cmd(args: EvalArgs) -> Result<()> {
    let split_of = |s: HeldOutSplit| match s {
        HeldOutSplit::Valid => Split::Valid,
        HeldOutSplit::Test => Split::Test,
    };
    let default_split = match args.shift_from {
        Some(_) => HeldOutSplit::Test,
        None => HeldOutSplit::Valid,
    };
    let options = EvalOptions {
        split: split_of(args.split.unwrap_or(default_split)),
        device: args.device,
        k: args.k,
        shift_from: args.shift_from.map(|ShiftSource::Valid| Split::Valid),
    };
    let reports = args
        .runs
        .iter()
        .map(|run| evaluate_checkpoint(run, &options))
        .collect::<Result<Vec<_>, _>>()?;
    if args.json {
        let json = match reports.as_slice() {
            [one] => one.to_json(),
            many => serde_json::Value::Array(many.iter().map(|r| r.to_json()).collect()),
        };
        print_stdout(&format!("{}\n", serde_json::to_string_pretty(&json)?))
    } else if args.markdown || reports.len() > 1 {
        let mut out = conelab::analysis::comparison_markdown(&reports);
        if args.shift_from.is_some() {
            out.push('\n');
            out.push_str(&conelab::analysis::self_normalisation_markdown(&reports));
        }
        print_stdout(&out)
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
    if !args.json && !args.headless && std::io::stdout().is_terminal() {
        let view = conelab::tui::app::ViewOptions {
            no_color: conelab_widgets::no_color_from_env(),
            ascii: false,
            no_mouse: false,
            light: args.theme == run::options::Theme::Light,
        };
        let mut sides = vec![conelab::tui::browser::Side::new(&m, bounds, view)?];
        if let Some(o) = &other {
            sides.push(conelab::tui::browser::Side::new(o, bounds_of(o)?, view)?);
        }
        conelab::tui::run_browser(conelab::tui::browser::Browser::new(sides))?;
        return Ok(());
    }
    let request = InspectRequest {
        queries: args.words.clone(),
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
    print_stdout(&r.render())
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
