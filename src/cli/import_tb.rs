//! `conelab import-tb`: a TensorBoard log's scalars as conelab runs, to draw beside conelab's.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use conelab_base::stderr::say;
use conelab_export::tensorboard;

#[derive(Debug, Args)]
pub struct ImportTbArgs {
    /// The log folder (as `tensorboard --logdir` takes it): each folder in or below it that holds
    /// event files is one run.
    pub logdir: PathBuf,
    /// Where the runs are made, one folder each (`compare` and `export` take them as runs).
    #[arg(long, value_name = "DIR", default_value = "checkpoints")]
    pub out: PathBuf,
    /// The runs' name, and the start of each sub-folder run's (NAME-SUB) [default: the log
    /// folder's name].
    #[arg(long)]
    pub name: Option<String>,
}

pub fn exec(args: ImportTbArgs) -> Result<()> {
    let name = match &args.name {
        Some(n) => n.clone(),
        None => std::fs::canonicalize(&args.logdir)
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "tensorboard".into()),
    };
    let imported = tensorboard::import_log(&args.logdir, &args.out, &name)?;
    for w in &imported.warnings {
        say(&format!("conelab: warning: {w}"));
    }
    let mut text = String::new();
    for run in &imported.runs {
        // Listed as `imported`, not as a run that crashed (it has no process and no final
        // record otherwise).
        let record = conelab_core::run_dir::live::FinalRecord {
            status: "imported".into(),
            step: run.last_step,
            total_steps: run.last_step,
            exit_code: 0,
            message: format!("imported from {}", args.logdir.display()),
            by_signal: false,
            finished_unix: run.last_wall_time,
            host: conelab_base::platform::host_name(),
        };
        conelab_core::run_dir::live::conclude(&run.dir, &record)?;
        // In the run index like every run, so that its name finds it from anywhere (issue
        // #58: `export tb-…` from another folder said "no such run"). Its name is its folder's.
        let labels = conelab_core::labels::RunLabels {
            name: run
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned()),
            ..Default::default()
        };
        if let Err(e) = conelab_catalog::index::register(&run.dir, &labels) {
            say(&format!(
                "conelab: warning: {}: not in the run index ({e}): name it by its folder",
                run.dir.display()
            ));
        }
        text.push_str(&format!("{}: {} scalars\n", run.dir.display(), run.scalars));
    }
    if let Some(first) = imported.runs.first().map(|r| &r.dir) {
        text.push_str(&format!(
            "draw them beside a conelab run: conelab compare RUN {}\n",
            first.display()
        ));
    }
    super::print_stdout(&text)
}
