//! `conelab runs`: the runs under a folder and their status.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use conelab::run::{self};

use super::print_stdout;

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

pub fn exec(args: RunsArgs) -> Result<()> {
    let rows = run::list::list(&args.dir)?;
    if args.json {
        return print_stdout(&format!("{}\n", serde_json::to_string_pretty(&rows)?));
    }
    if rows.is_empty() {
        return print_stdout(&format!("no runs under {}\n", args.dir.display()));
    }
    print_stdout(&run::list::render(&rows))
}
