//! `conelab compare`: several runs side by side, followed from their folders.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use conelab_base::error::Invalid;
use conelab_base::exit::ExitStatus;

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Run directories, or names of runs under checkpoints/ (live or over; 12 colours on a
    /// dark background, 5 on a light one, then they repeat).
    #[arg(required = true, value_name = "RUN", add = super::run_names())]
    pub runs: Vec<PathBuf>,
    /// Draw the curves against the step or against wall-clock time since each run began.
    /// (`--x`, its name before, still works.)
    #[arg(long = "x-axis", alias = "x", value_enum, default_value = "step")]
    pub x_axis: XAxisArg,
    /// TensorBoard's smoothing weight, 0 (raw) to 0.99; `+`/`-` change it in the view.
    #[arg(long, default_value_t = conelab_tui::format::DEFAULT_SMOOTHING,
        allow_negative_numbers = true, value_parser = smoothing_weight)]
    pub smoothing: f64,
    /// A logarithmic y axis (`l` in the view).
    #[arg(long)]
    pub log_y: bool,
    #[command(flatten)]
    pub view: conelab_run::options::ViewFlags,
    /// The curve shown first (↑/↓ and / in the view): a named one (loss, ppl-rare, i1-rare,
    /// isoscore-rare, grad-norm, … — see the view's list) or any stored series as
    /// SPLIT/GROUP/METRIC (valid/rare/uniq) or SPLIT/METRIC (group total).
    #[arg(long, default_value = "loss", value_parser = curve_name)]
    pub curve: conelab_tui::compare::Curve,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum XAxisArg {
    Step,
    Time,
}

/// `--curve`: a named curve or a stored series' SPLIT/GROUP/METRIC.
fn curve_name(text: &str) -> std::result::Result<conelab_tui::compare::Curve, Invalid> {
    use conelab_tui::compare::{CURVES, Curve};
    Curve::parse(text).ok_or_else(|| {
        let names: Vec<String> = CURVES.iter().map(|c| c.name.to_string()).collect();
        format!(
            "one of {} or a stored series as SPLIT/GROUP/METRIC (valid/rare/uniq)",
            names.join(", ")
        )
        .into()
    })
}

/// `--smoothing`: a weight from 0 (raw) to the view's maximum.
fn smoothing_weight(text: &str) -> std::result::Result<f64, Invalid> {
    let max = conelab_tui::format::MAX_SMOOTHING;
    let expected = format!("a weight from 0 (raw) to {max}");
    let w = text
        .parse::<f64>()
        .map_err(Invalid::because(expected.as_str()))?;
    if (0.0..=max).contains(&w) {
        Ok(w)
    } else {
        Err(expected.into())
    }
}

pub fn exec(args: CompareArgs) -> Result<ExitStatus> {
    use conelab_tui::compare::{CompareOptions, XAxis};
    let dirs = conelab_catalog::find::resolve_many(&args.runs, &PathBuf::from("checkpoints"))?;
    if !conelab_base::platform::drawing_terminal() {
        bail!(
            "compare needs a terminal that can draw (stdout is not one, or TERM=dumb); `conelab export --table groups RUN…` and `--table curves` give the same numbers as tables"
        );
    }
    let options = CompareOptions {
        view: super::view_options(&args.view),
        x_axis: match args.x_axis {
            XAxisArg::Step => XAxis::Step,
            XAxisArg::Time => XAxis::Time,
        },
        smoothing: args.smoothing,
        log_y: args.log_y,
        curve: args.curve,
    };
    conelab_tui::compare::run_compare(dirs, options, |dirs, wanted| {
        conelab_catalog::follow::spawn(dirs, wanted, std::time::Duration::from_secs(1))
    })?;
    Ok(ExitStatus::Success)
}
