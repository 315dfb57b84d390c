//! `conelab store compact`: maintenance of a run's metrics store.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;

use conelab::run::say;
use conelab::store;

use super::print_stdout;

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Rewrite a finished run's store as one segment per table (training does this itself when
    /// it ends).
    Compact {
        #[arg(required = true, num_args = 1..)]
        runs: Vec<PathBuf>,
    },
}

fn compact(runs: Vec<PathBuf>) -> Result<()> {
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

pub fn exec(command: StoreCommand) -> Result<()> {
    match command {
        StoreCommand::Compact { runs } => compact(runs),
    }
}
