//! `conelab sweep run | task | status`: a grid of runs from one TOML file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use conelab_base::exit::ExitStatus;

use conelab_base::stderr::say;
use conelab_catalog::RunError;

use super::print_stdout;

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

fn run(
    file: &Path,
    out: Option<PathBuf>,
    local: usize,
    dry_run: bool,
    slurm: Option<SbatchArgs>,
) -> Result<ExitStatus> {
    use conelab_run::sweep::start::{SweepRun, start};
    let request = SweepRun {
        file: file.to_path_buf(),
        out,
        local,
        dry_run,
        slurm: slurm.map(|sbatch| conelab_run::sweep::slurm::SlurmOptions {
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

fn status(dir: &Path) -> Result<()> {
    use conelab_run::sweep::record::{SweepRecord, render_status, status};
    let record = SweepRecord::read(dir).map_err(RunError::bad_input)?;
    let slurm = record
        .slurm
        .as_ref()
        .map(conelab_run::sweep::slurm::task_states);
    print_stdout(&render_status(&status(&record), slurm.as_ref()))
}

/// A SLURM array task: becomes its run's `conelab train` (exec), so a TERM the batch script
/// passes on reaches the run itself.
fn task(dir: &Path, index: usize) -> Result<ExitStatus> {
    use std::os::unix::process::CommandExt;
    let record = conelab_run::sweep::record::SweepRecord::read(dir).map_err(RunError::bad_input)?;
    let run = record.runs.get(index).ok_or_else(|| {
        RunError::Usage(
            format!(
                "task {index}: the sweep in {} has {} runs",
                dir.display(),
                record.runs.len()
            )
            .into(),
        )
    })?;
    let Some(args) = conelab_run::sweep::local::task_args(run) else {
        print_stdout(&format!("{}: completed before, kept\n", run.name))?;
        return Ok(ExitStatus::Success);
    };
    let exe = std::env::current_exe().context("finding the conelab binary")?;
    let e = std::process::Command::new(exe).args(&args).exec();
    Err(anyhow::Error::new(e).context(format!("starting {}", run.name)))
}

pub fn exec(command: SweepCommand) -> Result<ExitStatus> {
    match command {
        SweepCommand::Run {
            file,
            out,
            local,
            dry_run,
            slurm,
            sbatch,
        } => run(&file, out, local, dry_run, slurm.then_some(sbatch)),
        SweepCommand::Task { dir, index } => task(&dir, index),
        SweepCommand::Status { dir } => status(&dir).map(|()| ExitStatus::Success),
    }
}
