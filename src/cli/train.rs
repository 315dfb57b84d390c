//! `conelab train`: in this process (--headless, or stdout not a terminal), in the background
//! (--detach), or in the background with the workbench attached (a terminal).

use anyhow::Result;
use conelab_base::exit::ExitStatus;

use conelab_catalog::RunError;
use conelab_run::options::TrainOptions;

use super::print_stdout;

/// `conelab train`: in this process (--headless, or stdout not a terminal), in the background
/// (--detach), or in the background with the workbench attached (a terminal).
pub fn exec(mut opts: TrainOptions) -> Result<ExitStatus> {
    // `--resume` takes a run's name like every command that takes a run (issue #58); a path
    // that is there is that path.
    if let Some(resume) = &opts.resume
        && !resume.exists()
    {
        opts.resume = Some(super::find_run(resume)?);
    }
    opts.validate().map_err(RunError::Usage)?;
    // TERM=dumb is no terminal to draw on: plain lines, as in a pipe (issue #58).
    let tty = conelab_base::platform::drawing_terminal();
    if opts.internal_detached {
        return Ok(conelab_run::serve::serve_here(&opts, false, true)?);
    }
    if opts.detach {
        let ready = conelab_run::detach::spawn(conelab_run::detach::child_args())?;
        // Absolute: the hint is used from wherever the user is next (issue #58: a relative
        // `checkpoints/…` failed from any other folder).
        let dir = std::fs::canonicalize(&ready.dir).unwrap_or_else(|_| ready.dir.clone());
        print_stdout(&format!(
            "conelab: the run is training in the background (pid {}) in {}\n  attach:  conelab attach {}\n  list:    conelab runs\n  output:  {}\n",
            ready.pid,
            dir.display(),
            dir.display(),
            dir.join(conelab_core::run_dir::live::OUTPUT_LOG).display()
        ))?;
        return Ok(ExitStatus::Success);
    }
    if !tty || opts.headless {
        return Ok(conelab_run::serve::serve_here(&opts, tty, false)?);
    }
    // The workbench: the run is a process of its own; this one is its first viewer.
    let reference = match &opts.spectrum_beside {
        Some(other) => Some(conelab_core::run_dir::matrix::reference_spectrum(other)?),
        None => None,
    };
    let ready = conelab_run::detach::spawn(conelab_run::detach::child_args())?;
    let opened = conelab_client::open::connect(&ready.socket)?;
    let setup = conelab_tui::ViewerSetup {
        view: super::view_options(&opts.view),
        reference,
        read_only: None,
    };
    let exit = conelab_tui::run_viewer(opened.link, opened.hello, setup)?;
    Ok(conelab_tui::after_viewer(&ready.dir, exit))
}
