//! The command line: clap definitions, one file per subcommand (parse, call, print — cargo's
//! `src/bin/cargo/commands`), and the dispatch to them.
//!
//! Value lists follow one rule: the options of `conelab train` are the run crate's own types
//! (`TrainOptions` and the enums it names derive clap, because sweep files are parsed with the
//! same definitions); every other command's value lists are enums of its file here, mapped to the
//! library's types where the command runs, so that export, metrics and the viewer stay free of
//! clap.

mod attach;
mod bench;
mod compare;
mod completions;
mod config;
mod data;
mod eval;
mod export;
mod import_tb;
mod inspect;
mod labels;
mod man;
mod output;
mod progress;
mod rm;
mod runs;
mod store;
mod sweep;
mod train;

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use conelab_base::exit::ExitStatus;
use conelab_run::options::TrainOptions;

use attach::AttachArgs;
use bench::BenchCommand;
use compare::CompareArgs;
use config::ConfigCommand;
use data::DataCommand;
use eval::EvalArgs;
use export::ExportArgs;
use import_tb::ImportTbArgs;
use inspect::InspectArgs;
use runs::RunsArgs;
use store::StoreCommand;
use sweep::SweepCommand;

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
    pub command: CliCommand,
}

#[derive(Debug, Subcommand)]
pub enum CliCommand {
    /// Train a language model with tied embeddings: on a terminal the workbench attached to the
    /// run (which is a process of its own: it outlives the terminal); --headless reports on
    /// stdout; --detach starts it in the background.
    Train(Box<TrainOptions>),
    /// Open the workbench on a run: a live one (steer it; several viewers at once) or one that is
    /// over (read-only, its whole history).
    Attach(AttachArgs),
    /// Several runs side by side: overlaid curves (train loss, validation PPL in total and per
    /// group, I1, its unit-row form, IsoScore, mean cosine and norm, effective rank, I1,
    /// IsoScore and mean cosine per group, grad norm, lr, tokens/s) by step or wall time with
    /// TensorBoard's smoothing, the Groups table with a row per run and every
    /// run's spectrum. Runs are read from their folders as they grow: live ones update live.
    Compare(CompareArgs),
    /// List runs with their status: every run this user has (found by name from any folder), or
    /// those under a folder; filters by tag, status and name.
    #[command(long_about = runs::LONG_ABOUT)]
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
    #[command(long_about = inspect::LONG_ABOUT)]
    Inspect(InspectArgs),
    /// Tables from runs' metrics stores for papers and other tools: CSV, Parquet, JSON,
    /// Markdown, LaTeX.
    Export(ExportArgs),
    /// Read a TensorBoard log's scalars (PyTorch's SummaryWriter, TensorFlow, any tfevents file)
    /// into conelab runs, one per folder of event files, to overlay in `compare` or export; a
    /// damaged record or a cut file is reported once and skipped, the rest read.
    ImportTb(ImportTbArgs),
    /// Maintenance of a run's metrics store.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Benchmarks that print a table (or JSON).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Tag a run: `+T` (or `T`) adds a tag, `-T` takes it off; with none, print its tags. A live
    /// run changes its own run.json; one that is over is edited in place.
    Tag {
        /// The run: its folder, or its name (`conelab runs` lists them).
        #[arg(add = run_names())]
        run: PathBuf,
        #[arg(allow_hyphen_values = true, num_args = 0.., value_name = "+TAG|-TAG")]
        changes: Vec<String>,
    },
    /// Delete runs: each folder whole and its entry in the run index, after listing them and
    /// asking (`--yes`: without asking). A live run is refused, and nothing is deleted.
    Rm(rm::RmArgs),
    /// Delete the runs that hold nothing to come back to — failed or crashed, or never past
    /// step 0, and without a checkpoint — after listing them and asking (`--dry-run`: only
    /// list). Live runs and runs with a checkpoint are never collected.
    Gc(rm::GcArgs),
    /// Set a run's notes (replacing them; "" clears them, - reads them from stdin).
    Note {
        #[arg(add = run_names())]
        run: PathBuf,
        #[arg(allow_hyphen_values = true)]
        text: String,
    },
    /// Name a run: the label `conelab runs`, the workbench and exports show ("" takes it away).
    Rename {
        #[arg(add = run_names())]
        run: PathBuf,
        name: String,
    },
    /// The user's settings ($XDG_CONFIG_HOME/conelab/config.toml and the environment).
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print a shell completion script: e.g. `conelab completions bash >
    /// ~/.local/share/bash-completion/completions/conelab`, or `source <(conelab completions
    /// zsh)`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of conelab and its subcommands: `conelab man | man -l -`, or
    /// `conelab man --out DIR` writes conelab.1 and one page per subcommand (conelab-train.1, …).
    Man {
        /// Write every page into this folder instead of printing the main one (`--dir`, its
        /// older name, still works).
        #[arg(long, alias = "dir", value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

/// Runs the command; its exit status (0 unless a run says otherwise).
pub fn run(cli: Cli) -> Result<ExitStatus> {
    let done = |r: Result<()>| r.map(|()| ExitStatus::Success);
    match cli.command {
        CliCommand::Train(options) => train::exec(*options),
        CliCommand::Attach(args) => attach::exec(args),
        CliCommand::Compare(args) => compare::exec(args),
        CliCommand::Runs(args) => done(runs::exec(args)),
        CliCommand::Sweep(command) => sweep::exec(command),
        CliCommand::Data(command) => done(data::exec(command)),
        CliCommand::Eval(args) => done(eval::exec(args)),
        CliCommand::Inspect(args) => done(inspect::exec(args)),
        CliCommand::Export(args) => export::exec(args),
        CliCommand::ImportTb(args) => done(import_tb::exec(args)),
        CliCommand::Store(command) => store::exec(command),
        CliCommand::Bench(command) => done(bench::exec(command)),
        CliCommand::Rm(args) => rm::rm(args),
        CliCommand::Gc(args) => rm::gc(args),
        CliCommand::Tag { run, changes } => done(labels::tag(&find_run(&run)?, &changes)),
        CliCommand::Note { run, text } => done(labels::note(&find_run(&run)?, text)),
        CliCommand::Rename { run, name } => done(labels::rename(&find_run(&run)?, name)),
        CliCommand::Config(command) => done(config::exec(command)),
        CliCommand::Completions { shell } => done(completions::exec(shell)),
        CliCommand::Man { out } => done(man::exec(out)),
    }
}

/// The run folder `arg` names: a path (an existing one wins), a folder under ./checkpoints, a
/// run's name or unique prefix of one, NAME#SEED (conelab_catalog::find::find).
fn find_run(arg: &std::path::Path) -> Result<PathBuf> {
    Ok(conelab_catalog::find::find(
        arg,
        std::path::Path::new("checkpoints"),
    )?)
}

/// The shell's completion of a RUN argument (`source <(CONELAB_COMPLETE=bash conelab)`): the name and
/// the folder name of every run this user has — the index and the run roots, as `find_run`
/// looks — read when the shell asks, at most [`MAX_COMPLETED_RUNS`] of them.
fn run_names() -> clap_complete::ArgValueCandidates {
    clap_complete::ArgValueCandidates::new(|| {
        let known = conelab_catalog::index::known();
        let mut names = std::collections::BTreeSet::new();
        for dir in known.runs.iter().rev().take(MAX_COMPLETED_RUNS) {
            if let Some(folder) = dir.file_name() {
                names.insert(folder.to_string_lossy().into_owned());
            }
            let store = conelab_store::store_dir(dir);
            if let Ok(record) = conelab_store::read_run_record(&store)
                && let Some(name) = record.labels.name
            {
                names.insert(name);
            }
        }
        names
            .into_iter()
            .map(clap_complete::CompletionCandidate::new)
            .collect()
    })
}

/// A bound on the runs a completion reads (each costs a small file read).
const MAX_COMPLETED_RUNS: usize = 2_000;

/// [`find_run`] of each.
fn find_runs(args: &[PathBuf]) -> Result<Vec<PathBuf>> {
    args.iter().map(|a| find_run(a)).collect()
}

/// How a view draws: the switches of its command (the config file's theme and colour where the
/// command names none), and NO_COLOR from the environment unless `--color always`.
fn view_options(flags: &conelab_run::options::ViewFlags) -> conelab_tui::app::ViewOptions {
    use conelab_base::settings::{ColorChoice, ThemeChoice};
    use conelab_run::options::ColorWhen;
    let config = conelab_base::settings::current();
    let light = match flags.theme {
        Some(t) => t == conelab_run::options::Theme::Light,
        None => config.theme.value == ThemeChoice::Light,
    };
    let no_color = match flags.color {
        Some(ColorWhen::Always) => false,
        Some(ColorWhen::Never) => true,
        Some(ColorWhen::Auto) => conelab_widgets::no_color_from_env(),
        None => conelab_widgets::no_color_from_env() || config.color.value == ColorChoice::Never,
    };
    conelab_tui::app::ViewOptions {
        no_color,
        ascii: flags.ascii,
        no_mouse: flags.no_mouse,
        light,
        true_color: std::env::var("COLORTERM")
            .is_ok_and(|v| v.eq_ignore_ascii_case("truecolor") || v.eq_ignore_ascii_case("24bit")),
    }
}

/// Writes to stdout; a closed pipe (`conelab … | head`) is a normal end, not an error.
fn print_stdout(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}
