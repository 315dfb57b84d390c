//! `conelab export`: tables from runs' stores for papers and other tools.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;

use conelab_base::error::Invalid;
use conelab_base::exit::ExitStatus;

use conelab_base::stderr::say;
use conelab_export::StepChoice;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportTableArg {
    /// The long table: run_id, step, epoch, wall_time, split, group, metric, value.
    Metrics,
    /// One row per run (its step) and, for each of frequent / medium / rare / total: PPL, the
    /// KN-3 reference's PPL and the gain over it, Uniq, I(W), mean norm, mean cosine, IsoScore
    /// and a random matrix's IsoScore (Yu et al. Table 3 and what I(W) needs beside it).
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
    /// One row per run: run_id, run, run_uuid, folder, status, start, corpus, device, version,
    /// tags, notes, last step, best and last validation PPL, then every run.toml key as a typed
    /// column (docs/STORE.md).
    Runs,
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
    /// A TensorBoard log folder (--out DIR): every stored metric as a scalar named
    /// split/group/metric and the checkpoints' embeddings for the Projector, a sub-folder per run.
    Tfevents,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Runs (folders, names or NAME#SEED, from any folder); several are compared in one table.
    #[arg(required = true, num_args = 1.., add = super::run_names())]
    pub runs: Vec<PathBuf>,
    /// The table [default: groups; --format tfevents writes every metric and takes none].
    #[arg(long, value_enum)]
    pub table: Option<ExportTableArg>,
    /// Output format [default: from the --out extension, else md].
    #[arg(long, value_enum)]
    pub format: Option<ExportFormatArg>,
    /// `last`, `best` (the lowest total validation PPL; the table reads --split at that step, so
    /// `--split test` needs runs trained with --eval-test) or a step number [default: last; all
    /// steps for --table metrics].
    #[arg(long, value_parser = parse_step_choice)]
    pub step: Option<StepChoice>,
    /// Held-out split of the groups table (valid or test); a filter on the split
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
    /// Write here (atomically) instead of stdout: a file; a folder for --format tfevents (the
    /// log folder `tensorboard --logdir` takes).
    #[arg(long, value_name = "FILE|DIR")]
    pub out: Option<PathBuf>,
    /// --table groups: one row per set of runs that differ only by seed (same run.toml but the
    /// seed, same objectives at the step, same step): mean ± sample std, and the count where a
    /// run lacks a value; CSV, JSON and Parquet get _mean, _std, _n and _ci95 columns.
    #[arg(long, value_enum)]
    pub aggregate: Option<AggregateArg>,
    /// With --aggregate seeds: each other setting's differences from RUN's setting (a run's
    /// name, folder or id), paired by seed and data seed, with the 95 % t-interval of the
    /// per-seed differences (methods.md §4); bold where the interval excludes 0.
    #[arg(long, value_name = "RUN", requires = "aggregate")]
    pub paired_with: Option<String>,
    /// Refuse a table that a damaged or unreadable part of a store would leave short (a
    /// corrupt segment, one set aside, a lost run record): the damage on stderr, nothing
    /// written, exit status 5. Without it the table is written with the damage said on stderr
    /// and in the file where its format has room (Parquet metadata `conelab.damage`, a comment in
    /// Markdown and LaTeX).
    #[arg(long)]
    pub strict: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AggregateArg {
    Seeds,
}

/// `--format tfevents`: the runs' TensorBoard log folder.
fn tensorboard_log(args: ExportArgs) -> Result<()> {
    let Some(out) = &args.out else {
        bail!("--format tfevents writes a log folder: give --out DIR");
    };
    if let Some(table) = args.table {
        bail!(
            "--format tfevents writes every stored metric and the embeddings: --table {} does not apply",
            format!("{table:?}").to_lowercase()
        );
    }
    if args.aggregate.is_some() || args.paired_with.is_some() {
        bail!("--format tfevents writes each run as it is: --aggregate does not apply");
    }
    let runs = super::find_runs(&args.runs)?;
    if args.strict {
        bail!(
            "--strict applies to tables (TensorBoard logs are written as each event file is read)"
        );
    }
    let written = conelab_export::tensorboard::write_log(&runs, out, args.step)?;
    for w in &written.warnings {
        say(&format!("conelab: warning: {w}"));
    }
    super::print_stdout(&format!(
        "{} scalars and {} embedding matrices of {} runs written to {}: tensorboard --logdir {}\n",
        written.scalars,
        written.embeddings,
        written.runs.len(),
        out.display(),
        out.display()
    ))?;
    Ok(())
}

/// A baseline given as a folder is known in the table by the run id its record holds (a moved
/// or renamed folder keeps it); anything else is a run's name or id.
fn baseline_name(run: &str) -> String {
    let path = std::path::Path::new(run);
    if path.is_dir() {
        // A lost or damaged record: the stand-in's id, the folder's name.
        return match conelab_store::read_run_record(&conelab_store::store_dir(path)) {
            Ok(record) => record.run_id,
            Err(_) => path
                .file_name()
                .map_or_else(|| run.to_string(), |n| n.to_string_lossy().into_owned()),
        };
    }
    run.to_string()
}

fn parse_step_choice(s: &str) -> Result<StepChoice, Invalid> {
    s.parse()
}

pub fn exec(args: ExportArgs) -> Result<ExitStatus> {
    let table = args.table.unwrap_or(ExportTableArg::Groups);
    let format = match (args.format, &args.out) {
        (Some(f), _) => f,
        (None, Some(out)) => match out.extension().and_then(|e| e.to_str()) {
            Some("csv") => ExportFormatArg::Csv,
            Some("parquet") => ExportFormatArg::Parquet,
            Some("json") => ExportFormatArg::Json,
            Some("tex") => ExportFormatArg::Latex,
            Some("md" | "markdown" | "txt") | None => ExportFormatArg::Md,
            // Markdown in a file named .xlsx would open as a broken spreadsheet.
            Some(other) => bail!(
                "--out {}: no format is known by .{other}; name it .csv, .parquet, .json, .tex or .md, or give --format",
                out.display()
            ),
        },
        (None, None) => ExportFormatArg::Md,
    };
    let format = match format {
        ExportFormatArg::Csv => conelab_export::Format::Csv,
        ExportFormatArg::Parquet => conelab_export::Format::Parquet,
        ExportFormatArg::Json => conelab_export::Format::Json,
        ExportFormatArg::Md => conelab_export::Format::Markdown,
        ExportFormatArg::Latex => conelab_export::Format::Latex,
        ExportFormatArg::Tfevents => return tensorboard_log(args).map(|()| ExitStatus::Success),
    };
    if format.is_binary() && args.out.is_none() && std::io::stdout().is_terminal() {
        bail!("Parquet is binary: give --out FILE or redirect stdout");
    }
    if args.aggregate.is_some() && table != ExportTableArg::Groups {
        bail!("--aggregate seeds applies to --table groups only");
    }
    let request = conelab_export::ExportRequest {
        runs: super::find_runs(&args.runs)?,
        table: match table {
            ExportTableArg::Metrics => conelab_export::Table::Metrics,
            ExportTableArg::Groups => conelab_export::Table::Groups,
            ExportTableArg::Curves => conelab_export::Table::Curves,
            ExportTableArg::Events => conelab_export::Table::Events,
            ExportTableArg::Neighbors => conelab_export::Table::Neighbors,
            ExportTableArg::Config => conelab_export::Table::Config,
            ExportTableArg::Runs => conelab_export::Table::Runs,
        },
        format,
        step: args.step,
        split: args.split,
        metrics: args.metrics,
        words: args.words,
        k: args.k,
        aggregate_seeds: args.aggregate == Some(AggregateArg::Seeds),
        paired_with: args.paired_with.map(|run| baseline_name(&run)),
    };
    let progress = super::progress::Progress::new("reading stores");
    let table = conelab_export::build_reporting(&request, &mut |done, total| {
        progress.at("reading stores", done as u64, total as u64)
    })?;
    drop(progress);
    for w in &table.warnings {
        say(&format!("conelab: warning: {w}"));
    }
    if args.strict && !table.warnings.is_empty() {
        say(&format!(
            "conelab: error: --strict: the table would be short of what the damage above holds; nothing written ({} warning(s))",
            table.warnings.len()
        ));
        return Ok(ExitStatus::Damaged);
    }
    let bytes = conelab_export::render(&table, format)?;
    match &args.out {
        Some(path) => conelab_base::atomic::write_file_as("export", path, &bytes)
            .with_context(|| format!("writing {}", path.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(&bytes).and_then(|()| out.flush()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                other => other.context("writing to stdout")?,
            }
        }
    }
    Ok(ExitStatus::Success)
}
