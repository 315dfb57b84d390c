//! `conelab train`: in this process (--headless, or stdout not a terminal), in the background
//! (--detach), or in the background with the workbench attached (a terminal).

use std::io::IsTerminal;

use anyhow::Result;
use conelab::base::exit::ExitStatus;

use conelab::run::{self, RunError, TrainOptions};

use super::print_stdout;

/// `conelab train`: in this process (--headless, or stdout not a terminal), in the background
/// (--detach), or in the background with the workbench attached (a terminal).
pub fn exec(opts: TrainOptions) -> Result<ExitStatus> {
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
    let reference = match &opts.spectrum_beside {
        Some(other) => Some(conelab::checkpoint::matrix::reference_spectrum(other)?),
        None => None,
    };
    let ready = run::detach::spawn(run::detach::child_args())?;
    let opened = run::attach::connect(&ready.socket)?;
    let setup = conelab::tui::ViewerSetup {
        view: super::view_options(&opts.view),
        reference,
        read_only: None,
    };
    let exit = conelab::tui::run_viewer(opened.link, opened.hello, setup)?;
    Ok(conelab::tui::after_viewer(&ready.dir, exit))
}
