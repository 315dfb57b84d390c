//! `conelab store compact`, `conelab store verify`: maintenance and integrity of a run's files.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;

use conelab_base::exit::ExitStatus;
use conelab_base::stderr::say;

use super::print_stdout;

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Rewrite a finished run's store as one segment per table (training does this itself when
    /// it ends).
    Compact {
        /// Runs (folders, names or NAME#SEED).
        #[arg(required = true, num_args = 1.., add = super::run_names())]
        runs: Vec<PathBuf>,
    },
    /// Check every file of a run whose bytes conelab can verify: run.toml, vocab.tsv and
    /// final.json against the run's manifest (and its keys: a listed file that is not there),
    /// store/run.json against the store's, each store segment and projection against the
    /// checksum in its name (and decoded; a name without one where the store names every
    /// segment with one is damage), the files of each checkpoint and of best/ against their
    /// manifests, and the segments compaction set aside earlier. Changes
    /// nothing; exit status 5 when something is damaged (listed on stderr), 0 when not.
    Verify {
        /// Runs (folders, names or NAME#SEED).
        #[arg(required = true, num_args = 1.., add = super::run_names())]
        runs: Vec<PathBuf>,
    },
}

fn compact(runs: Vec<PathBuf>) -> Result<()> {
    for run in super::find_runs(&runs)? {
        let done = conelab_store::compact(&run)?;
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

/// Files checked, and the damaged ones (path, why), of one run.
fn verify_run(run: &std::path::Path) -> Result<(String, Vec<(PathBuf, String)>)> {
    let segments = conelab_store::verify(run)?;
    let mut damaged = segments.damaged;
    let run_files = match conelab_core::run_dir::verify_run_files(run) {
        Ok(true) => "verified",
        Ok(false) => "unverified",
        Err(conelab_core::run_dir::CheckpointError::Corrupt { path, reason }) => {
            damaged.push((path, reason));
            "damaged"
        }
        Err(e) => return Err(e.into()),
    };
    let (mut verified, mut unverified) = (0, 0);
    let mut checkpoints = conelab_core::run_dir::checkpoints_in(run)?;
    // The best checkpoint (what `eval --step best` and `export --step best` read) as well.
    let best = run.join(conelab_core::run_dir::BEST_DIR);
    if best.is_dir() {
        checkpoints.push(best);
    }
    for dir in &checkpoints {
        match conelab_train::checkpoint::verify_manifest(dir) {
            Ok(true) => verified += 1,
            Ok(false) => unverified += 1,
            Err(conelab_core::run_dir::CheckpointError::Corrupt { path, reason }) => {
                damaged.push((path, reason))
            }
            Err(e) => return Err(e.into()),
        }
    }
    let summary = format!(
        "{}: run files (run.toml, vocab.tsv, final.json) {run_files}; {} store files verified, \
         {} unverified (written before checksums); {} checkpoints verified (best/ included), {} \
         unverified; {} damaged",
        run.display(),
        segments.verified,
        segments.unverified,
        verified,
        unverified,
        damaged.len()
    );
    Ok((summary, damaged))
}

fn verify(runs: Vec<PathBuf>) -> Result<ExitStatus> {
    let mut any = false;
    let runs = super::find_runs(&runs)?;
    let progress = super::progress::Progress::new("verifying");
    for (i, run) in runs.iter().enumerate() {
        progress.at("verifying runs", i as u64, runs.len() as u64);
        let (summary, damaged) = verify_run(run)?;
        progress.suspend(|| -> Result<()> {
            print_stdout(&format!("{summary}\n"))?;
            for (path, why) in &damaged {
                say(&format!("conelab: damaged: {}: {why}", path.display()));
            }
            Ok(())
        })?;
        any |= !damaged.is_empty();
    }
    // One status for damage, whichever command finds it (README, "Exit statuses").
    Ok(if any {
        ExitStatus::Damaged
    } else {
        ExitStatus::Success
    })
}

pub fn exec(command: StoreCommand) -> Result<ExitStatus> {
    match command {
        StoreCommand::Compact { runs } => compact(runs).map(|()| ExitStatus::Success),
        StoreCommand::Verify { runs } => verify(runs),
    }
}
