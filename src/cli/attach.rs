//! `conelab attach`: the workbench on a run (live or over); several runs go to `compare`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use conelab_base::exit::ExitStatus;

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// A run: its folder, its name (or a unique prefix of it), NAME#SEED, or a folder name
    /// under checkpoints/ — from any folder [default: the live run; a list to pick from when
    /// there are several]. Several runs open the compare view (as
    /// `conelab compare` does).
    #[arg(value_name = "RUN", add = super::run_names())]
    pub runs: Vec<PathBuf>,
    /// Attach through this socket instead (a run's socket forwarded from another host with
    /// `ssh -L LOCAL:REMOTE HOST`).
    #[arg(long, value_name = "PATH", conflicts_with = "runs")]
    pub socket: Option<PathBuf>,
    #[command(flatten)]
    pub view: conelab_run::options::ViewFlags,
}

pub fn exec(args: AttachArgs) -> Result<ExitStatus> {
    if args.runs.len() > 1 {
        return super::compare::exec(super::compare::CompareArgs {
            runs: args.runs,
            x_axis: super::compare::XAxisArg::Step,
            smoothing: conelab_tui::format::DEFAULT_SMOOTHING,
            log_y: false,
            curve: conelab_tui::compare::CURVES[0].clone(),
            view: args.view,
        });
    }
    // Reach the run first (a refusal is worth saying as such), then the terminal.
    let opened = match &args.socket {
        Some(socket) => conelab_client::open::connect(socket)?,
        None => {
            let root = PathBuf::from("checkpoints");
            let dir = match conelab_catalog::find::resolve(
                args.runs.first().map(PathBuf::as_path),
                &root,
            )? {
                conelab_catalog::find::Resolved::One(d) => d,
                conelab_catalog::find::Resolved::Several(list) => pick(&list)?,
            };
            conelab_client::open::open(&dir, &conelab_run::archive::StoreArchive)?
        }
    };
    if !conelab_base::platform::drawing_terminal() {
        bail!(
            "attach needs a terminal that can draw (stdout is not one, or TERM=dumb); `conelab runs --json` and `conelab export` read runs without one"
        );
    }
    let dir = opened.hello.dir.clone();
    let setup = conelab_tui::ViewerSetup {
        view: super::view_options(&args.view),
        reference: None,
        read_only: opened.read_only.clone(),
    };
    let live = opened.read_only.is_none();
    let exit = conelab_tui::run_viewer(opened.link, opened.hello, setup)?;
    if live {
        // What `train`'s workbench says and exits with, whichever front end saw the end
        // (issue #58: a stop from an attached viewer printed nothing): the way back after a
        // detach, the stop summary and its --resume command, a crash's summary; and, for a
        // run watched to its end, the run's own status.
        return Ok(conelab_tui::after_viewer(&dir, exit));
    }
    // A finished run's viewer exits 0 however it leaves.
    Ok(ExitStatus::Success)
}

/// Several live runs: the user picks one by number (on a terminal; elsewhere nobody can).
fn pick(list: &[(PathBuf, String)]) -> Result<PathBuf> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        let names: Vec<&str> = list.iter().map(|(_, n)| n.as_str()).collect();
        bail!(
            "{} runs are live ({}): name one, `conelab attach RUN` (and attach needs a terminal)",
            list.len(),
            names.join(", ")
        );
    }
    let mut err = std::io::stderr();
    let _ = writeln!(err, "Several runs are live:");
    let width = list
        .iter()
        .map(|(_, n)| n.chars().count())
        .max()
        .unwrap_or(0);
    for (i, (p, name)) in list.iter().enumerate() {
        let _ = writeln!(err, "  {}  {name:<width$}  {}", i + 1, p.display());
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
    Ok(list[n - 1].0.clone())
}
