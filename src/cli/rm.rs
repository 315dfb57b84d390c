//! `conelab rm` and `conelab gc`: delete runs — named ones, or those that hold nothing to come
//! back to — after asking (or with `--yes`), refusing live ones (conelab_catalog::remove).

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use conelab_base::error::Invalid;
use conelab_base::exit::ExitStatus;
use conelab_base::format::human_bytes;
use conelab_catalog::remove::{garbage_reason, remove_run, size_of};

use super::print_stdout;

#[derive(Debug, Args)]
pub struct RmArgs {
    /// The runs: their folders or names (`conelab runs` lists them).
    #[arg(required = true, add = super::run_names())]
    pub runs: Vec<PathBuf>,
    /// Delete without asking (needed where stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Only the runs in this folder [default: every run known, as `conelab runs` lists them].
    pub dir: Option<PathBuf>,
    /// List what would be deleted, delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete without asking (needed where stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// Asks on the terminal whether to go on; `--yes` has answered already. Without a terminal to
/// ask on, refused: a script says `--yes`.
fn confirmed(question: &str, yes: bool) -> Result<bool> {
    if yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        return Err(Invalid::new(
            "stdin is not a terminal to ask on: give --yes to delete without asking (nothing deleted)",
        )
        .into());
    }
    let mut err = std::io::stderr().lock();
    write!(err, "{question} [y/N] ")?;
    err.flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes"))
}

/// Deletes `runs` (absolute folders), each whole or not at all; the first refusal or failure
/// stops there, what was deleted before it said.
fn delete(runs: &[PathBuf]) -> Result<ExitStatus> {
    let index = conelab_catalog::index::index_dir();
    let mut done = String::new();
    for dir in runs {
        match remove_run(dir, &index) {
            Ok(removed) => done.push_str(&format!(
                "deleted {} ({})\n",
                removed.dir.display(),
                human_bytes(removed.bytes)
            )),
            Err(e) => {
                print_stdout(&done)?;
                return Err(e.into());
            }
        }
    }
    print_stdout(&done)?;
    Ok(ExitStatus::Success)
}

pub fn rm(args: RmArgs) -> Result<ExitStatus> {
    let mut runs = Vec::new();
    for arg in &args.runs {
        let dir = super::find_run(arg)?;
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        // Every run is checked before any is deleted: a live one refuses the whole command.
        if let Ok(conelab_core::run_dir::live::Liveness::Live { holder, .. }) =
            conelab_core::run_dir::live::liveness(&dir)
        {
            return Err(Invalid::new(format!(
                "{} ({}): the run is live ({holder}): stop it first; nothing deleted",
                arg.display(),
                dir.display()
            ))
            .into());
        }
        if !runs.contains(&dir) {
            runs.push(dir);
        }
    }
    let listed: Vec<String> = runs
        .iter()
        .map(|d| format!("  {} ({})", d.display(), human_bytes(size_of(d))))
        .collect();
    let question = format!(
        "delete {} run{}?\n{}\n",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        listed.join("\n")
    );
    if !confirmed(question.trim_end(), args.yes)? {
        print_stdout("nothing deleted\n")?;
        return Ok(ExitStatus::Success);
    }
    delete(&runs)
}

pub fn gc(args: GcArgs) -> Result<ExitStatus> {
    let rows = match &args.dir {
        Some(dir) => conelab_catalog::list::list(dir)?,
        None => {
            let known = conelab_catalog::index::known();
            conelab_catalog::list::rows_of(&known.runs, None)
        }
    };
    let garbage: Vec<(PathBuf, String)> = rows
        .iter()
        .filter_map(|r| garbage_reason(r).map(|why| (r.path.clone(), why)))
        .collect();
    if garbage.is_empty() {
        print_stdout("no runs to collect: every run is live, has a checkpoint or a history\n")?;
        return Ok(ExitStatus::Success);
    }
    let mut list = String::new();
    for (dir, why) in &garbage {
        list.push_str(&format!(
            "  {} ({why}; {})\n",
            dir.display(),
            human_bytes(size_of(dir))
        ));
    }
    if args.dry_run {
        print_stdout(&format!("would delete {} run(s):\n{list}", garbage.len()))?;
        return Ok(ExitStatus::Success);
    }
    let question = format!("delete {} run(s)?\n{}", garbage.len(), list.trim_end());
    if !confirmed(&question, args.yes)? {
        print_stdout("nothing deleted\n")?;
        return Ok(ExitStatus::Success);
    }
    let dirs: Vec<PathBuf> = garbage.into_iter().map(|(d, _)| d).collect();
    delete(&dirs)
}
