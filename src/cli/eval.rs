//! `conelab eval`: every model-output and embedding metric of a checkpoint on a split.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use conelab_core::model::DeviceSpec;
use conelab_core::run_dir::{CheckpointChoice, RunDir};
use conelab_data::Split;
use conelab_train::analysis::{
    EvalOptions, EvalProgress, EvalReport, evaluate_checkpoint_reporting,
};

use super::print_stdout;

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
    /// Runs (their newest checkpoint: a folder, a run's name, NAME#SEED) or `step-NNNNNN`
    /// checkpoint folders; several are compared side by side.
    #[arg(required = true, num_args = 1.., add = super::run_names())]
    pub runs: Vec<PathBuf>,

    /// Which checkpoint of each run: `last` (the newest step-N), `best` (the lowest validation
    /// PPL, kept in best/) or a step [default: last]. Not for checkpoint folders named directly.
    #[arg(long, value_name = "last|best|N")]
    pub step: Option<CheckpointChoice>,

    /// The split to evaluate [default: valid; test with --shift].
    #[arg(long, value_enum)]
    pub split: Option<HeldOutSplit>,

    /// Also report Goldberger & Melamud's shifted model: the scores minus the mean log Z (μ_z)
    /// of this split, under `shifted` in --json (keys shift, ppl, unnormalised_ppl, mu_z,
    /// sigma_z) and as a line of the table; several runs get a self-normalisation table
    /// (their Tables 3/4). The shift comes from the validation split, as in the paper, never
    /// from the split evaluated on (test by default): a shift fitted on test would flatter it.
    #[arg(long)]
    pub shift: bool,

    /// `--shift` as it was spelled before (`valid`, its only value).
    #[arg(long, value_enum, value_name = "SPLIT", hide = true)]
    pub shift_from: Option<ShiftSource>,

    /// Device to evaluate on [default: the run's own].
    #[arg(long)]
    pub device: Option<DeviceSpec>,

    /// Nearest neighbours per word, as everywhere `-k` is: here those the same-class
    /// precision@k counts (runs on a corpus with word classes); 0 skips it.
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,

    /// table (one run), json (an array for several runs) or md: one Markdown table, a row per
    /// run — PPL and I1 per group, Uniq, mean cosine (the default for several runs).
    #[command(flatten)]
    pub output: super::output::OutputArgs,

    /// 95 % intervals of each group's PPL from N resamplings of the split's sentences (whole
    /// sentences, with replacement; percentile interval; a fixed seed, so the same every time).
    #[arg(long, value_name = "N", value_parser = replicates)]
    pub bootstrap: Option<usize>,

    /// Two runs on the same split: PPL_B − PPL_A per group with its 95 % interval from a paired
    /// bootstrap (each replicate scores both runs on the same drawn sentences; --bootstrap N
    /// replicates, default 1,000).
    #[arg(long, conflicts_with_all = ["shift", "shift_from"])]
    pub paired: bool,
}

/// The replicates of a bootstrap: 40 to 100,000.
fn replicates(s: &str) -> Result<usize, String> {
    use conelab_metrics::bootstrap::{MAX_REPLICATES, MIN_REPLICATES};
    match s.parse::<usize>() {
        Ok(n) if (MIN_REPLICATES..=MAX_REPLICATES).contains(&n) => Ok(n),
        _ => Err(format!(
            "'{s}': a number of replicates from {MIN_REPLICATES} (a 95 % interval needs a replicate in each 2.5 % tail) to {MAX_REPLICATES}"
        )),
    }
}

/// Replicates of a paired comparison without --bootstrap.
const PAIRED_REPLICATES: usize = 1_000;

pub fn exec(args: EvalArgs) -> Result<()> {
    let split_of = |s: HeldOutSplit| match s {
        HeldOutSplit::Valid => Split::Valid,
        HeldOutSplit::Test => Split::Test,
    };
    use super::output::OutputFormat as F;
    // The format first: a wrong one is said before any checkpoint is evaluated.
    let format = if args.paired {
        args.output.choose("eval --paired", &[F::Table, F::Json])?
    } else {
        args.output.choose("eval", &[F::Table, F::Json, F::Md])?
    };
    // The shift comes from validation: `--shift`, or `--shift-from valid` as it was spelled.
    let shift = args.shift || args.shift_from.is_some();
    let default_split = if shift {
        HeldOutSplit::Test
    } else {
        HeldOutSplit::Valid
    };
    let options = EvalOptions {
        split: split_of(args.split.unwrap_or(default_split)),
        device: args.device,
        k: args.k,
        shift_from: shift.then_some(Split::Valid),
        keep_scores: args.paired,
        // Paired: the replicates are the pair's; each run's own intervals are not shown.
        bootstrap: args.bootstrap.filter(|_| !args.paired),
    };
    if args.paired && args.runs.len() != 2 {
        return Err(conelab_base::error::Invalid::new(format!(
            "--paired compares two runs (A B), not {}",
            args.runs.len()
        ))
        .into());
    }
    let mut checkpoints = super::find_runs(&args.runs)?;
    if let Some(choice) = args.step {
        for path in &mut checkpoints {
            *path = chosen_checkpoint(path, choice)?;
        }
    }
    let progress = super::progress::Progress::new("loading");
    let many = checkpoints.len();
    let reports = checkpoints
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let of = if many > 1 {
                format!(" (run {} of {many})", i + 1)
            } else {
                String::new()
            };
            evaluate_checkpoint_reporting(run, &options, &mut |p| match p {
                EvalProgress::Scoring { done, total } => {
                    progress.at(&format!("scoring{of}"), done, total)
                }
                EvalProgress::Bootstrap { done, total } => {
                    progress.at(&format!("bootstrap{of}"), done, total)
                }
                EvalProgress::Geometry => progress.step(&format!("embedding{of}")),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if args.paired {
        let json = format == F::Json;
        let replicates = args.bootstrap.unwrap_or(PAIRED_REPLICATES);
        return print_paired(&reports, replicates, json, progress);
    }
    // The bar goes before the output comes.
    drop(progress);
    if format == F::Json {
        let json = match reports.as_slice() {
            [one] => one.to_json(),
            many => serde_json::Value::Array(many.iter().map(|r| r.to_json()).collect()),
        };
        print_stdout(&format!("{}\n", serde_json::to_string_pretty(&json)?))
    } else if format == F::Md || reports.len() > 1 {
        let mut out = conelab_train::analysis::comparison_markdown(&reports);
        if shift {
            out.push('\n');
            out.push_str(&conelab_train::analysis::self_normalisation_markdown(
                &reports,
            ));
        }
        print_stdout(&out)
    } else {
        print_stdout(&reports[0].render())
    }
}

/// The checkpoint of a run folder that `--step` names; a checkpoint folder named directly
/// already is one, and `--step` beside it is a contradiction.
fn chosen_checkpoint(path: &std::path::Path, choice: CheckpointChoice) -> Result<PathBuf> {
    let run = RunDir::open(path)?;
    if run.path() != path {
        return Err(conelab_base::error::Invalid::new(format!(
            "{} is a checkpoint folder: --step chooses among a run's checkpoints, name the run instead",
            path.display()
        ))
        .into());
    }
    Ok(run.checkpoint(choice)?)
}

/// `--paired`: PPL_B − PPL_A per group with its paired-bootstrap interval.
fn print_paired(
    reports: &[EvalReport],
    replicates: usize,
    json: bool,
    progress: super::progress::Progress,
) -> Result<()> {
    use conelab_metrics::bootstrap::paired_bootstrap_reporting;
    use conelab_train::analysis::{BOOTSTRAP_SEED, bootstrap_json};
    let [a, b] = reports else {
        unreachable!("--paired is refused for anything but two runs");
    };
    fn scores(r: &EvalReport) -> Result<&conelab_metrics::bootstrap::SentenceScores> {
        r.scores
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("{}: no per-sentence scores", r.run))
    }
    let (sa, sb) = (scores(a)?, scores(b)?);
    let total = replicates as u64;
    let diff = paired_bootstrap_reporting(sa, sb, replicates, BOOTSTRAP_SEED, &mut |done| {
        progress.at("paired bootstrap", done as u64, total)
    })
    .map_err(|e| anyhow::Error::new(e).context(format!("{} against {}", b.run, a.run)))?;
    drop(progress);
    if json {
        let out = serde_json::json!({
            "runs": [a.to_json(), b.to_json()],
            "paired": bootstrap_json(&diff, replicates, sa.sentences()),
        });
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&out)?));
    }
    let ppl = |r: &EvalReport| {
        let g = &r.eval.outputs.groups;
        [g[0].ppl, g[1].ppl, g[2].ppl, r.eval.ppl]
    };
    let row = |label: &str, v: [f64; 4]| {
        format!(
            "{label:<12} {:>12.2} {:>12.2} {:>12.2} {:>12.2}\n",
            v[0], v[1], v[2], v[3]
        )
    };
    let mut out = format!(
        "paired bootstrap on the {} split: {} sentences, {replicates} replicates, seed {BOOTSTRAP_SEED}\n  A = {} (step {})\n  B = {} (step {})\n{:<12} {:>12} {:>12} {:>12} {:>12}\n",
        a.eval.split,
        sa.sentences(),
        a.run,
        a.step,
        b.run,
        b.step,
        "",
        "frequent",
        "medium",
        "rare",
        "total"
    );
    out.push_str(&row("PPL A", ppl(a)));
    out.push_str(&row("PPL B", ppl(b)));
    out.push_str(&row("B − A", diff.map(|i| i.estimate)));
    out.push_str(&row("95 % low", diff.map(|i| i.lo)));
    out.push_str(&row("95 % high", diff.map(|i| i.hi)));
    print_stdout(&out)
}
