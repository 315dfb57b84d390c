//! `conelab export`: the store's tables for papers and for other tools.
//!
//! Every table is built as a polars `DataFrame` (CSV, Parquet and JSON are polars' writers) plus,
//! for Markdown and LaTeX, a [`Layout`]: column groups, per-column precision and which cells are
//! the best of their column (set in bold).
//!
//! Here: the request, the result and what every table shares (which runs, which step, their
//! labels). The tables: [`tables`] (metrics, curves, config), [`groups`] (a row per run or per
//! set of seeds), [`neighbors`]; [`render`] writes any of them in any format.

mod groups;
mod neighbors;
mod render;
mod runs;
mod tables;
pub mod tensorboard;

pub use groups::{Spread, mean_std};
pub use render::{format_number, latex_escape, render};

use groups::*;
use neighbors::*;
use runs::*;
use tables::*;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use polars_io::prelude::*;

use conelab_base::error::Invalid;
use conelab_core::run_dir::matrix::load_matrix;
use conelab_core::series::split;
use conelab_data::GroupBounds;
use conelab_metrics::matrix::{Embeddings, RowGroups};
use conelab_metrics::neighbors::NeighborIndex;
use conelab_metrics::{Similarity, Threads};
use conelab_store::query::{self, value_at, value_at_or_before};
use conelab_store::{LoadedStore, StoreError, col as c};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// The long metrics table as stored.
    Metrics,
    /// One row per run: Freq / Med / Rare / Total × PPL, Uniq, I(W) (Yu et al. Table 3), with the
    /// mean row norm, mean cosine and IsoScore that I(W) needs beside it.
    Groups,
    /// Chosen metrics by step, one column each.
    Curves,
    Events,
    /// Top-k neighbours of chosen words at a checkpoint, runs side by side (Yu et al. Table 13).
    Neighbors,
    /// Each run's resolved configuration, flattened, the keys that differ first (the HParams
    /// table of TensorBoard).
    Config,
    /// One row per run: who it is (folder, UUID, name, tags), how it went (status, steps, best
    /// validation PPL) and its hyper-parameters as typed columns.
    Runs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Parquet,
    Json,
    Markdown,
    Latex,
}

impl Format {
    pub fn is_binary(self) -> bool {
        self == Format::Parquet
    }
}

/// Which step a table is taken at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepChoice {
    /// The newest evaluation (or checkpoint, for neighbours).
    Last,
    /// The evaluation with the lowest total validation perplexity (whatever split is read).
    Best,
    At(u64),
}

/// The same spelling as a checkpoint's (`conelab_core::run_dir::CheckpointChoice`), parsed once.
impl std::str::FromStr for StepChoice {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        use conelab_core::run_dir::CheckpointChoice;
        Ok(match s.parse::<CheckpointChoice>()? {
            CheckpointChoice::Last => StepChoice::Last,
            CheckpointChoice::Best => StepChoice::Best,
            CheckpointChoice::At(n) => StepChoice::At(n),
        })
    }
}

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportRequest {
    pub runs: Vec<PathBuf>,
    pub table: Table,
    pub format: Format,
    /// Default: all steps for `metrics`, the last evaluation otherwise.
    pub step: Option<StepChoice>,
    /// Held-out split of `groups`, `best` and (as a filter) `metrics`; default valid.
    pub split: Option<String>,
    /// `curves`: `SPLIT/METRIC` or `SPLIT/GROUP/METRIC`.
    pub metrics: Vec<String>,
    /// `neighbors`: the query words.
    pub words: Vec<String>,
    pub k: usize,
    /// `groups`: one row per set of runs that differ only by seed, mean ± std (`--aggregate seeds`).
    pub aggregate_seeds: bool,
    /// `groups` with `aggregate_seeds`: each other setting's per-seed differences from this run's
    /// setting (a run's name or id), paired by seed (methods.md §4, `--paired-with`).
    pub paired_with: Option<String>,
}

/// The curves exported when none are named.
pub const DEFAULT_CURVES: [&str; 3] = ["train/loss", "valid/ppl", "embedding/i1"];

/// How Markdown and LaTeX present a frame.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Spanning headers over consecutive columns: (label, number of columns); empty = none.
    pub groups: Vec<(String, usize)>,
    /// Header of each column (defaults to the frame's column names).
    pub headers: Vec<String>,
    /// Decimal places of each numeric column (`None`: chosen from the value).
    pub decimals: Vec<Option<usize>>,
    /// `bold[row][col]`: the best value of its column.
    pub bold: Vec<Vec<bool>>,
    /// Aggregated tables: a mean column's (std column, count column, 95 % interval half-width
    /// column). Markdown and LaTeX show them as one `mean ± std [lo, hi]` cell (the count beside
    /// it where it is short of the row's runs); CSV, JSON and Parquet keep the four columns.
    pub spread: BTreeMap<usize, (usize, usize, usize)>,
    /// The column counting each row's runs (`seeds`), the reference for a short cell count.
    pub row_count: Option<usize>,
}

/// A table ready to render.
#[derive(Debug, Clone)]
pub struct Exported {
    pub frame: DataFrame,
    pub layout: Layout,
    /// Segments that could not be read and were skipped, one line each.
    pub warnings: Vec<String>,
}

/// Builds the table of `req` from the runs' stores (and checkpoints, for neighbours).
pub fn build(req: &ExportRequest) -> Result<Exported, StoreError> {
    build_reporting(req, &mut |_, _| {})
}

/// [`build`], telling `progress(done, total)` the runs' stores read (the long part with many
/// runs).
pub fn build_reporting(
    req: &ExportRequest,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Exported, StoreError> {
    if req.runs.is_empty() {
        return Err(StoreError::Invalid("no run directory given".into()));
    }
    let mut load = || load_stores(&req.runs, progress);
    match req.table {
        Table::Metrics => metrics_table(&load()?, req),
        Table::Events => {
            let stores = load()?;
            let mut out = plain(per_run(&stores, |s| Ok(s.events().clone()))?);
            out.warnings = warnings_of(&stores);
            Ok(out)
        }
        Table::Curves => curves(&load()?, req),
        Table::Groups => groups(&load()?, req),
        Table::Neighbors => neighbors(req),
        Table::Config => config_table(&load()?),
        Table::Runs => runs_table(&load()?, &req.runs),
    }
}

/// The column of every long table holding the run's UUID (`run_id` is its folder's name, which
/// repeats across sweeps).
pub const RUN_UUID: &str = "run_uuid";
/// The column beside `run_id` holding the name the run goes by (its name, else the folder's).
pub const RUN_NAME: &str = "run";

/// The name a run goes by: its name, else its folder's.
fn run_name(s: &LoadedStore) -> &str {
    s.run().labels.name.as_deref().unwrap_or(&s.run().run_id)
}

/// Each run's rows (`rows` of its store), with its name and UUID after `run_id` so that rows of
/// runs whose folders share a name stay apart, stacked in the order the runs were given.
fn per_run(
    stores: &[LoadedStore],
    rows: impl Fn(&LoadedStore) -> Result<DataFrame, StoreError>,
) -> Result<DataFrame, StoreError> {
    let mut out: Option<DataFrame> = None;
    for s in stores {
        let mut frame = rows(s)?;
        let height = frame.height();
        let at = frame
            .get_column_names()
            .iter()
            .position(|n| n.as_str() == c::RUN_ID)
            .map_or(0, |i| i + 1);
        // The run's name, else the id its rows carry (a stand-in record, for a store whose
        // run.json is lost, is named by the folder: the rows say who they are).
        let names: Vec<String> = match (&s.run().labels.name, frame.column(c::RUN_ID)) {
            (Some(name), _) => vec![name.clone(); height],
            (None, Ok(ids)) => ids
                .str()?
                .iter()
                .map(|id| id.unwrap_or(&s.run().run_id).to_string())
                .collect(),
            (None, Err(_)) => vec![s.run().run_id.clone(); height],
        };
        frame.insert_column(at, Column::new(RUN_NAME.into(), names))?;
        frame.insert_column(
            at + 1,
            Column::new(RUN_UUID.into(), vec![s.run().uuid(); height]),
        )?;
        match &mut out {
            Some(o) => {
                o.vstack_mut(&frame)?;
            }
            None => out = Some(frame),
        }
    }
    Ok(out.unwrap_or_default())
}

/// A loaded matrix's frequency groups, from its counts and its run's group boundaries (the
/// default boundaries where it has none); none without counts.
pub(crate) fn row_groups(m: &conelab_core::run_dir::matrix::LoadedMatrix) -> Option<RowGroups> {
    let bounds = m
        .group_bounds
        .and_then(|[a, b]| GroupBounds::new(a, b).ok())
        .unwrap_or_default();
    m.counts
        .as_deref()
        .map(|counts| RowGroups::from_counts(counts, bounds))
}

fn load_stores(
    runs: &[PathBuf],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<LoadedStore>, StoreError> {
    progress(0, runs.len());
    runs.iter()
        .enumerate()
        .map(|(i, r)| {
            if !r.is_dir() {
                return Err(StoreError::Invalid(
                    format!("{}: no such run directory", r.display()).into(),
                ));
            }
            let store = conelab_store::load(r);
            progress(i + 1, runs.len());
            store
        })
        .collect()
}

fn warnings_of(stores: &[LoadedStore]) -> Vec<String> {
    stores
        .iter()
        .flat_map(|s| s.warnings().iter().cloned())
        .collect()
}

fn plain(frame: DataFrame) -> Exported {
    Exported {
        frame,
        layout: Layout::default(),
        warnings: Vec::new(),
    }
}

fn held_out(req: &ExportRequest) -> Result<&str, StoreError> {
    match req.split.as_deref() {
        None => Ok(split::VALID),
        Some(s @ (split::VALID | split::TEST)) => Ok(s),
        Some(other) => Err(StoreError::Invalid(
            format!("unknown split '{other}': use valid or test").into(),
        )),
    }
}

/// The evaluation steps of a run on a split, in order.
fn eval_steps(store: &LoadedStore, split: &str) -> Result<Vec<(u64, f64)>, StoreError> {
    query::series(store.metrics(), split, "total", "ppl")
}

/// The step a table is taken at for one run.
pub fn resolve_step(
    store: &LoadedStore,
    split: &str,
    choice: StepChoice,
) -> Result<u64, StoreError> {
    let evals = eval_steps(store, split)?;
    let run = &store.run().run_id;
    if evals.is_empty() {
        return Err(StoreError::Invalid(
            format!("run {run} has no {split} evaluation in its store").into(),
        ));
    }
    match choice {
        StepChoice::Last => Ok(evals.iter().map(|e| e.0).max().unwrap_or(0)),
        // Chosen on validation whatever split the table reads (methods.md §4: best-validation
        // checkpoints); choosing on test would flatter the test numbers.
        StepChoice::Best => {
            let valid = if split == split::VALID {
                evals.clone()
            } else {
                eval_steps(store, split::VALID)?
            };
            let best = valid
                .iter()
                .filter(|e| e.1.is_finite())
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .or(valid.last())
                .map(|e| e.0)
                .ok_or_else(|| {
                    StoreError::Invalid(
                        format!("run {run} has no valid evaluation to choose its best step by")
                            .into(),
                    )
                })?;
            if evals.iter().any(|e| e.0 == best) {
                Ok(best)
            } else {
                Err(StoreError::Invalid(
                    format!(
                        "run {run}: its best validation step {best} has no {split} evaluation (train with --eval-test to evaluate test beside every validation)"
                    )
                    .into(),
                ))
            }
        }
        StepChoice::At(n) => {
            if evals.iter().any(|e| e.0 == n) {
                Ok(n)
            } else {
                let known: Vec<String> = evals.iter().map(|e| e.0.to_string()).collect();
                Err(StoreError::Invalid(
                    format!(
                        "run {run} has no {split} evaluation at step {n} (evaluated at {})",
                        abbreviate(&known)
                    )
                    .into(),
                ))
            }
        }
    }
}

fn abbreviate(items: &[String]) -> String {
    if items.len() <= 8 {
        items.join(", ")
    } else {
        format!(
            "{}, …, {}",
            items[..4].join(", "),
            items[items.len() - 2..].join(", ")
        )
    }
}

/// The run's name (`train --name`, `conelab rename`); unnamed, the objective label in force at
/// `step`, else the run id.
pub fn run_label(store: &LoadedStore, step: u64) -> Result<String, StoreError> {
    if let Some(name) = &store.run().labels.name {
        return Ok(name.clone());
    }
    Ok(
        conelab_store::query::objective_at(store.events(), Some(step))?
            .unwrap_or_else(|| store.run().run_id.clone()),
    )
}

/// Run names, made unique by the run id where two runs share a label.
fn unique_names(labels: Vec<String>, ids: &[String]) -> Vec<String> {
    labels
        .iter()
        .zip(ids)
        .map(|(l, id)| {
            if labels.iter().filter(|m| *m == l).count() > 1 {
                format!("{l} ({id})")
            } else {
                l.clone()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_get_sensible_precision() {
        assert_eq!(format_number(12.0, None).as_deref(), Some("12"));
        assert_eq!(format_number(123.456, None).as_deref(), Some("123.46"));
        assert_eq!(format_number(12345.67, None).as_deref(), Some("12345.7"));
        assert_eq!(format_number(0.01234, None).as_deref(), Some("0.01234"));
        assert_eq!(format_number(0.5, None).as_deref(), Some("0.5000"));
        assert_eq!(format_number(2.5e-5, None).as_deref(), Some("2.500e-5"));
        assert_eq!(format_number(0.8124, Some(3)).as_deref(), Some("0.812"));
        assert_eq!(format_number(f64::NAN, None), None);
        // Issue #58: a huge PPL is not its 113 digits.
        assert_eq!(
            format_number(1.234_567e112, Some(2)).as_deref(),
            Some("1.2346e112")
        );
        assert_eq!(
            format_number(49_353.21, Some(2)).as_deref(),
            Some("49353.21")
        );
        assert_eq!(
            format_number(123_456_789.0, None).as_deref(),
            Some("123456789")
        );
    }

    #[test]
    fn latex_escapes_specials_and_greek() {
        assert_eq!(latex_escape("CosReg γ=1"), "CosReg $\\gamma$=1");
        assert_eq!(latex_escape("a_b & 50%"), "a\\_b \\& 50\\%");
        assert_eq!(latex_escape("{x}"), "\\{x\\}");
    }

    #[test]
    fn curve_names_parse() {
        assert_eq!(
            parse_curve("valid/ppl").ok(),
            Some(("valid".into(), "total".into(), "ppl".into()))
        );
        assert_eq!(
            parse_curve("embedding/rare/i1").ok(),
            Some(("embedding".into(), "rare".into(), "i1".into()))
        );
        assert!(parse_curve("ppl").is_err());
        assert!(parse_curve("valid//ppl").is_err());
    }

    #[test]
    fn step_choices_parse() {
        let step = |s: &str| s.parse::<StepChoice>().ok();
        assert_eq!(step("last"), Some(StepChoice::Last));
        assert_eq!(step("best"), Some(StepChoice::Best));
        assert_eq!(step("500"), Some(StepChoice::At(500)));
        let e = "soon".parse::<StepChoice>().expect_err("not a step");
        assert_eq!(
            e.to_string(),
            "'soon' is not a step: use last, best or a number"
        );
        // The integer parser's own error is kept behind ours.
        let cause = std::error::Error::source(&e).expect("the parser's error");
        assert!(
            cause.downcast_ref::<std::num::ParseIntError>().is_some(),
            "{cause}"
        );
    }
}
