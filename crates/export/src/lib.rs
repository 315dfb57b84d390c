//! `conelab export`: the store's tables for papers and for other tools.
//!
//! Every table is built as a polars `DataFrame` (CSV, Parquet and JSON are polars' writers) plus,
//! for Markdown and LaTeX, a [`Layout`]: column groups, per-column precision and which cells are
//! the best of their column (set in bold).

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use polars_io::prelude::*;

use conelab_core::run_dir::matrix::load_matrix;
use conelab_data::GroupBounds;
use conelab_metrics::matrix::{Embeddings, RowGroups};
use conelab_metrics::neighbors::NeighborIndex;
use conelab_metrics::{Similarity, Threads};
use conelab_store::query::{self, value_at, value_at_or_before};
use conelab_store::{LoadedStore, StoreError, col as c, split};

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
    /// The evaluation with the lowest total perplexity on the split.
    Best,
    At(u64),
}

impl std::str::FromStr for StepChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "last" => Ok(StepChoice::Last),
            "best" => Ok(StepChoice::Best),
            n => n
                .parse()
                .map(StepChoice::At)
                .map_err(|_| format!("'{s}' is not a step: use last, best or a number")),
        }
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
    /// Aggregated tables: a mean column's (std column, count column). Markdown and LaTeX show the
    /// pair as one `mean ± std` cell (the count beside it where it is short of the row's runs);
    /// CSV, JSON and Parquet keep the three columns.
    pub spread: BTreeMap<usize, (usize, usize)>,
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
    if req.runs.is_empty() {
        return Err(StoreError::Invalid("no run directory given".into()));
    }
    let load = || load_stores(&req.runs);
    match req.table {
        Table::Metrics => metrics_table(&load()?, req),
        Table::Events => {
            let stores = load()?;
            let mut out = plain(query::cross_run_events(&stores)?);
            out.warnings = warnings_of(&stores);
            Ok(out)
        }
        Table::Curves => curves(&load()?, req),
        Table::Groups => groups(&load()?, req),
        Table::Neighbors => neighbors(req),
        Table::Config => config_table(&load()?),
    }
}

/// One row per run: `run` (its id), then every key of its `run.toml` flattened to a dotted path
/// (`train.lr`, `model.transformer.layers`, `corpus.dir.path`), values as TOML writes them
/// (strings bare). Keys whose values differ between the runs, or that some runs lack, come first;
/// both parts sorted.
fn config_table(stores: &[LoadedStore]) -> Result<Exported, StoreError> {
    let mut flat = Vec::new();
    for s in stores {
        let table: toml::Table = s.run.config_toml.parse().map_err(|e: toml::de::Error| {
            StoreError::Invalid(format!(
                "run {}: its recorded configuration is not TOML: {}",
                s.run.run_id,
                e.message()
            ))
        })?;
        let mut keys = BTreeMap::new();
        flatten_toml("", &toml::Value::Table(table), &mut keys);
        flat.push(keys);
    }
    let all: std::collections::BTreeSet<&String> = flat.iter().flat_map(|k| k.keys()).collect();
    let (differ, same): (Vec<&String>, Vec<&String>) = all.into_iter().partition(|key| {
        let first = flat[0].get(*key);
        flat.iter().any(|k| k.get(*key) != first)
    });
    let height = stores.len();
    let mut columns = vec![Column::new(
        "run".into(),
        stores
            .iter()
            .map(|s| s.run.run_id.clone())
            .collect::<Vec<_>>(),
    )];
    for key in differ.iter().chain(&same) {
        let values: Vec<Option<String>> = flat.iter().map(|k| k.get(*key).cloned()).collect();
        columns.push(Column::new(key.as_str().into(), values));
    }
    let mut out = plain(DataFrame::new(height, columns)?);
    out.warnings = warnings_of(stores);
    Ok(out)
}

/// `value`'s leaves under dotted keys below `prefix`; array elements as `key[i]`.
fn flatten_toml(prefix: &str, value: &toml::Value, out: &mut BTreeMap<String, String>) {
    let join = |key: &str| {
        if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}.{key}")
        }
    };
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                flatten_toml(&join(k), v, out);
            }
        }
        toml::Value::Array(items) if items.iter().any(|v| v.is_table()) => {
            for (i, v) in items.iter().enumerate() {
                flatten_toml(&format!("{prefix}[{i}]"), v, out);
            }
        }
        toml::Value::String(text) => {
            out.insert(prefix.to_string(), text.clone());
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

fn load_stores(runs: &[PathBuf]) -> Result<Vec<LoadedStore>, StoreError> {
    runs.iter()
        .map(|r| {
            if !r.is_dir() {
                return Err(StoreError::Invalid(format!(
                    "{}: no such run directory",
                    r.display()
                )));
            }
            conelab_store::load(r)
        })
        .collect()
}

fn warnings_of(stores: &[LoadedStore]) -> Vec<String> {
    stores
        .iter()
        .flat_map(|s| s.warnings.iter().cloned())
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
        Some(other) => Err(StoreError::Invalid(format!(
            "unknown split '{other}': use valid or test"
        ))),
    }
}

fn metrics_table(stores: &[LoadedStore], req: &ExportRequest) -> Result<Exported, StoreError> {
    let split = req.split.as_deref();
    let df = match req.step {
        None => query::metric_rows(&query::cross_run(stores)?, split, None)?,
        Some(StepChoice::At(n)) => query::metric_rows(&query::cross_run(stores)?, split, Some(n))?,
        Some(choice) => {
            // last/best are per run: the step each run is taken at.
            let held = held_out(req)?;
            let mut out = conelab_store::empty_metrics();
            for s in stores {
                let step = resolve_step(s, held, choice)?;
                out.vstack_mut(&query::metric_rows(&s.metrics, split, Some(step))?)?;
            }
            out
        }
    };
    let mut out = plain(df.select(conelab_store::METRIC_COLUMNS)?);
    out.warnings = warnings_of(stores);
    Ok(out)
}

/// The evaluation steps of a run on a split, in order.
fn eval_steps(store: &LoadedStore, split: &str) -> Result<Vec<(u64, f64)>, StoreError> {
    query::series(&store.metrics, split, "total", "ppl")
}

/// The step a table is taken at for one run.
pub fn resolve_step(
    store: &LoadedStore,
    split: &str,
    choice: StepChoice,
) -> Result<u64, StoreError> {
    let evals = eval_steps(store, split)?;
    let run = &store.run.run_id;
    if evals.is_empty() {
        return Err(StoreError::Invalid(format!(
            "run {run} has no {split} evaluation in its store"
        )));
    }
    match choice {
        StepChoice::Last => Ok(evals.iter().map(|e| e.0).max().unwrap_or(0)),
        StepChoice::Best => Ok(evals
            .iter()
            .filter(|e| e.1.is_finite())
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|e| e.0)
            .unwrap_or(evals[evals.len() - 1].0)),
        StepChoice::At(n) => {
            if evals.iter().any(|e| e.0 == n) {
                Ok(n)
            } else {
                let known: Vec<String> = evals.iter().map(|e| e.0.to_string()).collect();
                Err(StoreError::Invalid(format!(
                    "run {run} has no {split} evaluation at step {n} (evaluated at {})",
                    abbreviate(&known)
                )))
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
    if let Some(name) = &store.run.labels.name {
        return Ok(name.clone());
    }
    Ok(
        conelab_store::query::objective_at(&store.events, Some(step))?
            .unwrap_or_else(|| store.run.run_id.clone()),
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

/// The column of an aggregated table listing the runs of each row.
const RUN_IDS: &str = "run_ids";

const GROUP_HEADERS: [(&str, &str); 4] = [
    ("frequent", "Freq"),
    ("medium", "Med"),
    ("rare", "Rare"),
    ("total", "Total"),
];

/// Which value of a column is the best of the runs (shown in bold).
#[derive(Clone, Copy, PartialEq)]
enum Best {
    Lowest,
    Highest,
    /// A scale or a shape, not a score: nothing in bold.
    None,
}

/// One column of the groups table, repeated per group: (stored metric, column suffix, header,
/// decimals, best, read from the embedding snapshot at or before the step).
type GroupColumn = (&'static str, &'static str, &'static str, usize, Best, bool);

/// I(W) is scale-dependent: the mean row norm, the mean cosine and IsoScore (scale-free) beside it
/// say whether two runs' I(W) can be compared.
const GROUP_COLUMNS: [GroupColumn; 6] = [
    ("ppl", "ppl", "PPL", 2, Best::Lowest, false),
    ("uniq", "uniq", "Uniq", 0, Best::Highest, false),
    ("i1", "i_w", "I(W)", 3, Best::Highest, true),
    ("mean_norm", "mean_norm", "Norm", 3, Best::None, true),
    ("mean_cos", "mean_cos", "Cos", 3, Best::None, true),
    ("isoscore", "isoscore", "IsoScore", 3, Best::Highest, true),
];
/// The column of `uniq` in GROUP_COLUMNS (where the Human row's reference goes).
const UNIQ_COLUMN: usize = 1;

/// One run's row of the groups table.
struct GroupRow {
    label: String,
    id: String,
    step: u64,
    /// For each group, the GROUP_COLUMNS.
    values: Vec<Option<f64>>,
    /// What the run is apart from its seed (`--aggregate seeds`).
    setting: String,
    /// Its name, if it has one: runs of one name are seeds of one setting too.
    name: Option<String>,
}

/// Yu et al. Table 3: one row per run, Freq / Med / Rare / Total × PPL, Uniq, I(W), mean norm,
/// mean cosine, IsoScore; a `Human` row with the reference text's Uniq.
fn groups(stores: &[LoadedStore], req: &ExportRequest) -> Result<Exported, StoreError> {
    let split = held_out(req)?;
    let choice = req.step.unwrap_or(StepChoice::Last);
    let mut rows = Vec::new();
    let mut human: Vec<Option<f64>> = vec![None; 4];
    for s in stores {
        let step = resolve_step(s, split, choice)?;
        let metrics = &s.metrics;
        let mut values = Vec::new();
        for (gi, (group, _)) in GROUP_HEADERS.iter().enumerate() {
            for (metric, _, _, _, _, embedding) in GROUP_COLUMNS {
                values.push(if embedding {
                    value_at_or_before(metrics, split::EMBEDDING, group, metric, step)?.map(|v| v.1)
                } else {
                    value_at(metrics, split, group, metric, step)?
                });
            }
            if human[gi].is_none() {
                human[gi] = value_at(metrics, split, group, "human_uniq", step)?;
            }
        }
        let label = run_label(s, step)?;
        // The objectives in force, not the name: seeds named apart are still one setting.
        let objectives = query::objective_at(&s.events, Some(step))?.unwrap_or_default();
        rows.push(GroupRow {
            setting: setting_without_seed(&s.run.config_toml, &objectives, step),
            name: s.run.labels.name.clone(),
            label,
            id: s.run.run_id.clone(),
            step,
            values,
        });
    }
    let mut out = if req.aggregate_seeds {
        seed_groups_table(rows, &human)?
    } else {
        run_groups_table(rows, &human)?
    };
    out.warnings = warnings_of(stores);
    Ok(out)
}

/// A run's configuration with what a seed sweep varies taken out (the seed, the run's name and
/// the version that wrote it), plus the objectives in force and the step the table takes: runs
/// with equal settings are seeds of one experiment.
fn setting_without_seed(config_toml: &str, objectives: &str, step: u64) -> String {
    let config = match config_toml.parse::<toml::Table>() {
        Ok(mut t) => {
            t.remove("name");
            t.remove("conelab_version");
            if let Some(toml::Value::Table(train)) = t.get_mut("train") {
                train.remove("seed");
            }
            t.to_string()
        }
        // Unreadable: it groups with nothing but itself.
        Err(_) => config_toml.to_string(),
    };
    format!("{config}\n{objectives}\n{step}")
}

/// The spanning headers of a groups table: `lead` columns without a group, then each group's.
fn group_spans(lead: usize, per_group: usize) -> Vec<(String, usize)> {
    let mut spans = vec![(String::new(), lead)];
    spans.extend(
        GROUP_HEADERS
            .iter()
            .map(|(_, s)| (s.to_string(), per_group)),
    );
    spans
}

/// `bold[row][lead + ci]` for the best of each value column among the first `rows` rows (not the
/// Human row), `values[row][ci]` being what is compared.
fn best_cells(
    values: &[Vec<Option<f64>>],
    rows: usize,
    height: usize,
    width: usize,
    column_of: impl Fn(usize) -> usize,
) -> Vec<Vec<bool>> {
    let per_group = GROUP_COLUMNS.len();
    let mut bold = vec![vec![false; width]; height];
    let n_values = GROUP_HEADERS.len() * per_group;
    for ci in 0..n_values {
        let best_is = GROUP_COLUMNS[ci % per_group].4;
        if best_is == Best::None || rows < 2 {
            continue;
        }
        let lower_is_better = best_is == Best::Lowest;
        let col_values: Vec<Option<f64>> = values[..rows].iter().map(|r| r[ci]).collect();
        let best = col_values
            .iter()
            .flatten()
            .filter(|v| v.is_finite())
            .copied()
            .reduce(|a, b| if lower_is_better { a.min(b) } else { a.max(b) });
        // A column where every run ties (Uniq 0 in every Rare cell) has no best.
        let all_tie = col_values.iter().flatten().all(|v| Some(*v) == best);
        if let Some(best) = best.filter(|_| !all_tie) {
            for (ri, v) in col_values.iter().enumerate() {
                if *v == Some(best) {
                    bold[ri][column_of(ci)] = true;
                }
            }
        }
    }
    bold
}

/// The Human row's values: the reference text's Uniq per group, nothing else.
fn human_values(human: &[Option<f64>]) -> Option<Vec<Option<f64>>> {
    let per_group = GROUP_COLUMNS.len();
    human.iter().any(Option::is_some).then(|| {
        let mut row = vec![None; GROUP_HEADERS.len() * per_group];
        for (gi, h) in human.iter().enumerate() {
            row[gi * per_group + UNIQ_COLUMN] = *h;
        }
        row
    })
}

/// One row per run.
fn run_groups_table(rows: Vec<GroupRow>, human: &[Option<f64>]) -> Result<Exported, StoreError> {
    let per_group = GROUP_COLUMNS.len();
    let runs = rows.len();
    let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
    let mut run_col = unique_names(rows.iter().map(|r| r.label.clone()).collect(), &ids);
    let mut id_col = ids;
    let mut step_col: Vec<Option<u64>> = rows.iter().map(|r| Some(r.step)).collect();
    let mut values: Vec<Vec<Option<f64>>> = rows.into_iter().map(|r| r.values).collect();
    if let Some(row) = human_values(human) {
        run_col.push("Human".into());
        id_col.push(String::new());
        step_col.push(None);
        values.push(row);
    }
    let height = run_col.len();
    let mut columns = vec![
        Column::new("run".into(), run_col),
        Column::new(c::RUN_ID.into(), id_col),
        Column::new(c::STEP.into(), step_col),
    ];
    let mut headers = vec!["Run".to_string(), "run id".into(), "Step".into()];
    let mut decimals: Vec<Option<usize>> = vec![None, None, Some(0)];
    for (gi, (group, _)) in GROUP_HEADERS.iter().enumerate() {
        for (mi, (_, suffix, header, digits, _, _)) in GROUP_COLUMNS.into_iter().enumerate() {
            let v: Vec<Option<f64>> = values.iter().map(|r| r[gi * per_group + mi]).collect();
            columns.push(Column::new(format!("{group}_{suffix}").into(), v));
            headers.push(header.into());
            decimals.push(Some(digits));
        }
    }
    let frame = DataFrame::new(height, columns)?;
    // Best per column among the runs (not the Human row): lowest PPL; highest Uniq, I(W) and
    // IsoScore.
    let bold = best_cells(&values, runs, height, headers.len(), |ci| 3 + ci);
    Ok(Exported {
        frame,
        layout: Layout {
            groups: group_spans(3, per_group),
            headers,
            decimals,
            bold,
            ..Layout::default()
        },
        warnings: Vec::new(),
    })
}

/// The values of one cell over a set of seeds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Spread {
    pub mean: Option<f64>,
    /// Sample standard deviation (n − 1); none for a single value.
    pub std: Option<f64>,
    /// How many finite values there were.
    pub n: u32,
}

/// Mean, sample standard deviation and count of the finite values among `values`.
pub fn mean_std(values: impl IntoIterator<Item = Option<f64>>) -> Spread {
    let xs: Vec<f64> = values
        .into_iter()
        .flatten()
        .filter(|v| v.is_finite())
        .collect();
    let n = xs.len();
    if n == 0 {
        return Spread::default();
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let std = (n > 1)
        .then(|| (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt());
    Spread {
        mean: Some(mean),
        std,
        n: n as u32,
    }
}

/// One row per set of runs that differ only by seed — the same name, or the same setting — in the
/// order their first run was given: every cell the mean, sample std and count of the runs' values.
fn seed_groups_table(rows: Vec<GroupRow>, human: &[Option<f64>]) -> Result<Exported, StoreError> {
    let per_group = GROUP_COLUMNS.len();
    let n_values = GROUP_HEADERS.len() * per_group;
    let mut sets: Vec<Vec<GroupRow>> = Vec::new();
    for row in rows {
        let same = |other: &GroupRow| {
            other.setting == row.setting || (row.name.is_some() && other.name == row.name)
        };
        match sets.iter_mut().find(|set| set.iter().any(same)) {
            Some(set) => set.push(row),
            None => sets.push(vec![row]),
        }
    }
    let firsts: Vec<String> = sets.iter().map(|set| set[0].id.clone()).collect();
    let mut run_col = unique_names(
        sets.iter().map(|set| set[0].label.clone()).collect(),
        &firsts,
    );
    let mut seeds_col: Vec<Option<u32>> = sets.iter().map(|set| Some(set.len() as u32)).collect();
    let mut ids_col: Vec<String> = sets
        .iter()
        .map(|set| {
            set.iter()
                .map(|r| r.id.as_str())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    let mut step_col: Vec<Option<u64>> = sets.iter().map(|set| Some(set[0].step)).collect();
    // stats[row][ci]
    let mut stats: Vec<Vec<Spread>> = sets
        .iter()
        .map(|set| {
            (0..n_values)
                .map(|ci| mean_std(set.iter().map(|r| r.values[ci])))
                .collect()
        })
        .collect();
    let aggregated = sets.len();
    if let Some(row) = human_values(human) {
        run_col.push("Human".into());
        seeds_col.push(None);
        ids_col.push(String::new());
        step_col.push(None);
        stats.push(
            row.into_iter()
                .map(|v| Spread {
                    mean: v,
                    std: None,
                    n: u32::from(v.is_some()),
                })
                .collect(),
        );
    }
    let height = run_col.len();
    let mut columns = vec![
        Column::new("run".into(), run_col),
        Column::new("seeds".into(), seeds_col),
        Column::new(RUN_IDS.into(), ids_col),
        Column::new(c::STEP.into(), step_col),
    ];
    const LEAD: usize = 4;
    let mut headers = vec![
        "Run".to_string(),
        "Seeds".into(),
        "run ids".into(),
        "Step".into(),
    ];
    let mut decimals: Vec<Option<usize>> = vec![None, Some(0), None, Some(0)];
    let mut spread = BTreeMap::new();
    for (gi, (group, _)) in GROUP_HEADERS.iter().enumerate() {
        for (mi, (_, suffix, header, digits, _, _)) in GROUP_COLUMNS.into_iter().enumerate() {
            let ci = gi * per_group + mi;
            let at = columns.len();
            let name = format!("{group}_{suffix}");
            columns.push(Column::new(
                format!("{name}_mean").into(),
                stats.iter().map(|r| r[ci].mean).collect::<Vec<_>>(),
            ));
            columns.push(Column::new(
                format!("{name}_std").into(),
                stats.iter().map(|r| r[ci].std).collect::<Vec<_>>(),
            ));
            columns.push(Column::new(
                format!("{name}_n").into(),
                stats.iter().map(|r| r[ci].n).collect::<Vec<_>>(),
            ));
            headers.extend([
                header.to_string(),
                format!("{header} std"),
                format!("{header} n"),
            ]);
            decimals.extend([Some(digits), Some(digits), Some(0)]);
            spread.insert(at, (at + 1, at + 2));
        }
    }
    let frame = DataFrame::new(height, columns)?;
    let means: Vec<Vec<Option<f64>>> = stats
        .iter()
        .map(|r| r.iter().map(|c| c.mean).collect())
        .collect();
    let bold = best_cells(&means, aggregated, height, headers.len(), |ci| {
        LEAD + 3 * ci
    });
    Ok(Exported {
        frame,
        layout: Layout {
            groups: group_spans(LEAD, 3 * per_group),
            headers,
            decimals,
            bold,
            spread,
            row_count: Some(1),
        },
        warnings: Vec::new(),
    })
}

/// A curve name: `SPLIT/METRIC` (group total) or `SPLIT/GROUP/METRIC`.
fn parse_curve(name: &str) -> Result<(String, String, String), StoreError> {
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        [s, m] if !s.is_empty() && !m.is_empty() => {
            Ok((s.to_string(), "total".into(), m.to_string()))
        }
        [s, g, m] if !s.is_empty() && !g.is_empty() && !m.is_empty() => {
            Ok((s.to_string(), g.to_string(), m.to_string()))
        }
        _ => Err(StoreError::Invalid(format!(
            "'{name}' is not a curve: use SPLIT/METRIC or SPLIT/GROUP/METRIC, e.g. valid/ppl or embedding/rare/i1"
        ))),
    }
}

/// Known curve names of a set of runs, for error messages.
fn known_curves(stores: &[LoadedStore]) -> Result<Vec<String>, StoreError> {
    let mut names = std::collections::BTreeSet::new();
    for s in stores {
        for v in query::last_values_vec(&s.metrics)? {
            if v.split == split::SPECTRUM {
                continue;
            }
            names.insert(if v.group == "total" {
                format!("{}/{}", v.split, v.metric)
            } else {
                format!("{}/{}/{}", v.split, v.group, v.metric)
            });
        }
    }
    Ok(names.into_iter().collect())
}

fn curves(stores: &[LoadedStore], req: &ExportRequest) -> Result<Exported, StoreError> {
    let names: Vec<String> = if req.metrics.is_empty() {
        DEFAULT_CURVES.iter().map(|s| s.to_string()).collect()
    } else {
        req.metrics.clone()
    };
    let parsed = names
        .iter()
        .map(|n| parse_curve(n))
        .collect::<Result<Vec<_>, _>>()?;
    // (run index, step) → value per curve.
    let mut rows: BTreeMap<(usize, u64), Vec<Option<f64>>> = BTreeMap::new();
    for (ci, (sp, g, m)) in parsed.iter().enumerate() {
        let mut found = false;
        for (ri, s) in stores.iter().enumerate() {
            let h = query::history(&s.metrics, sp, g, m, 0)?;
            found |= !h.is_empty();
            for (step, v) in h.steps.iter().zip(&h.values) {
                rows.entry((ri, *step))
                    .or_insert_with(|| vec![None; parsed.len()])[ci] = Some(*v);
            }
        }
        if !found && !req.metrics.is_empty() {
            let known = known_curves(stores)?;
            return Err(StoreError::Invalid(format!(
                "unknown metric '{}' (known: {})",
                names[ci],
                known.join(", ")
            )));
        }
    }
    let ids: Vec<&str> = rows
        .keys()
        .map(|(r, _)| stores[*r].run.run_id.as_str())
        .collect();
    let steps: Vec<u64> = rows.keys().map(|(_, s)| *s).collect();
    let mut columns = vec![
        Column::new(c::RUN_ID.into(), ids),
        Column::new(c::STEP.into(), steps),
    ];
    for (ci, name) in names.iter().enumerate() {
        let v: Vec<Option<f64>> = rows.values().map(|r| r[ci]).collect();
        columns.push(Column::new(name.as_str().into(), v));
    }
    let mut out = plain(DataFrame::new(rows.len(), columns)?);
    out.warnings = warnings_of(stores);
    Ok(out)
}

/// Top-k neighbours from each run's checkpoint at the chosen step.
fn neighbors(req: &ExportRequest) -> Result<Exported, StoreError> {
    if req.words.is_empty() {
        return Err(StoreError::Invalid(
            "--table neighbors needs --words WORD,WORD,…".into(),
        ));
    }
    if req.k == 0 {
        return Err(StoreError::Invalid("-k must be at least 1".into()));
    }
    let mut run_names = Vec::new();
    let mut ids = Vec::new();
    // table[run][word] = [(neighbour, cosine, group)]
    let mut table: Vec<Vec<Vec<(String, f32, String)>>> = Vec::new();
    for run in &req.runs {
        let checkpoint = checkpoint_for(run, req)?;
        let m = load_matrix(&checkpoint, None).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let tokens = m.tokens.as_deref().ok_or_else(|| {
            StoreError::Invalid(format!(
                "{}: checkpoint has no vocabulary",
                checkpoint.display()
            ))
        })?;
        let w =
            Embeddings::new(m.n, m.d, &m.data).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let bounds = m
            .group_bounds
            .and_then(|[a, b]| GroupBounds::new(a, b).ok())
            .unwrap_or_default();
        let groups = m
            .counts
            .as_deref()
            .map(|c| RowGroups::from_counts(c, bounds));
        let index = NeighborIndex::new(w, Threads::All);
        let mut per_word = Vec::new();
        for word in &req.words {
            let id = conelab_train::analysis::resolve_word(word, Some(tokens), m.n)
                .map_err(|e| StoreError::Invalid(format!("{}: {e}", run.display())))?;
            per_word.push(
                index
                    .query(id, req.k, Similarity::Cosine)
                    .into_iter()
                    .map(|nb| {
                        (
                            tokens[nb.id as usize].clone(),
                            nb.score,
                            groups
                                .as_ref()
                                .map(|g| g.group_of(nb.id as usize).name().to_string())
                                .unwrap_or_default(),
                        )
                    })
                    .collect(),
            );
        }
        table.push(per_word);
        let (label, id) = match conelab_store::load(run) {
            Ok(store) => {
                let step = m.step.unwrap_or(0);
                (run_label(&store, step)?, store.run.run_id.clone())
            }
            // A run from before the store existed still has checkpoints.
            Err(_) => {
                let id = run
                    .file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .unwrap_or_default();
                (id.clone(), id)
            }
        };
        run_names.push(label);
        ids.push(id);
    }
    let names = unique_names(run_names, &ids);
    if matches!(req.format, Format::Markdown | Format::Latex) {
        // Side by side: word, rank, then one "neighbour (cos)" column per run.
        let mut word_col = Vec::new();
        let mut rank_col = Vec::new();
        let mut run_cols: Vec<Vec<String>> = vec![Vec::new(); names.len()];
        for (wi, word) in req.words.iter().enumerate() {
            for rank in 0..req.k {
                word_col.push(if rank == 0 {
                    word.clone()
                } else {
                    String::new()
                });
                rank_col.push((rank + 1) as u64);
                for (ri, per_word) in table.iter().enumerate() {
                    run_cols[ri].push(
                        per_word[wi]
                            .get(rank)
                            .map(|(t, cos, _)| format!("{t} ({cos:.3})"))
                            .unwrap_or_default(),
                    );
                }
            }
        }
        let height = word_col.len();
        let mut columns = vec![
            Column::new("word".into(), word_col),
            Column::new("rank".into(), rank_col),
        ];
        for (name, values) in names.iter().zip(run_cols) {
            columns.push(Column::new(name.as_str().into(), values));
        }
        return Ok(plain(DataFrame::new(height, columns)?));
    }
    // Long: one row per (run, word, rank), for other tools.
    let (mut r_id, mut r_name, mut r_word, mut r_rank, mut r_nb, mut r_cos, mut r_group) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for (ri, per_word) in table.iter().enumerate() {
        for (wi, rows) in per_word.iter().enumerate() {
            for (rank, (t, cos, g)) in rows.iter().enumerate() {
                r_id.push(ids[ri].clone());
                r_name.push(names[ri].clone());
                r_word.push(req.words[wi].clone());
                r_rank.push(rank as u64 + 1);
                r_nb.push(t.clone());
                r_cos.push(*cos as f64);
                r_group.push(g.clone());
            }
        }
    }
    let height = r_id.len();
    Ok(plain(DataFrame::new(
        height,
        vec![
            Column::new(c::RUN_ID.into(), r_id),
            Column::new("run".into(), r_name),
            Column::new("word".into(), r_word),
            Column::new("rank".into(), r_rank),
            Column::new("neighbor".into(), r_nb),
            Column::new("cosine".into(), r_cos),
            Column::new(c::GROUP.into(), r_group),
        ],
    )?))
}

/// The checkpoint folder of a run for the chosen step.
fn checkpoint_for(run: &Path, req: &ExportRequest) -> Result<PathBuf, StoreError> {
    let dir =
        conelab_core::run_dir::RunDir::open(run).map_err(|e| StoreError::Invalid(e.to_string()))?;
    let all = dir
        .checkpoints()
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let step_of = |p: &PathBuf| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("step-"))
            .and_then(|n| n.parse::<u64>().ok())
    };
    let want = match req.step.unwrap_or(StepChoice::Last) {
        StepChoice::Last => {
            return dir
                .latest_checkpoint()
                .map_err(|e| StoreError::Invalid(e.to_string()));
        }
        StepChoice::At(n) => n,
        StepChoice::Best => {
            let store = conelab_store::load(run)?;
            resolve_step(&store, held_out(req)?, StepChoice::Best)?
        }
    };
    all.iter()
        .find(|p| step_of(p) == Some(want))
        .cloned()
        .ok_or_else(|| {
            let have: Vec<String> = all
                .iter()
                .filter_map(step_of)
                .map(|s| s.to_string())
                .collect();
            StoreError::Invalid(format!(
                "{}: no checkpoint at step {want} (checkpoints: {})",
                run.display(),
                if have.is_empty() {
                    "none".into()
                } else {
                    have.join(", ")
                }
            ))
        })
}

/// Renders a table in a format.
pub fn render(table: &Exported, format: Format) -> Result<Vec<u8>, StoreError> {
    let mut df = table.frame.clone();
    let mut out = Vec::new();
    match format {
        Format::Csv => {
            CsvWriter::new(Cursor::new(&mut out)).finish(&mut df)?;
        }
        Format::Parquet => {
            ParquetWriter::new(Cursor::new(&mut out)).finish(&mut df)?;
        }
        Format::Json => {
            JsonWriter::new(Cursor::new(&mut out))
                .with_json_format(JsonFormat::Json)
                .finish(&mut df)?;
            out.push(b'\n');
        }
        Format::Markdown => out = markdown(table)?.into_bytes(),
        Format::Latex => out = latex(table)?.into_bytes(),
    }
    Ok(out)
}

/// Every cell as text, with the layout's precision; `None` for a missing value.
fn cells(table: &Exported) -> Result<Vec<Vec<Option<String>>>, StoreError> {
    let df = &table.frame;
    let mut out = vec![Vec::with_capacity(df.width()); df.height()];
    for (ci, column) in df.columns().iter().enumerate() {
        let decimals = table.layout.decimals.get(ci).copied().flatten();
        let s = column.as_materialized_series();
        for (ri, row) in out.iter_mut().enumerate() {
            let v = s.get(ri)?;
            row.push(match v {
                AnyValue::Null => None,
                AnyValue::String(t) => Some(t.to_string()),
                AnyValue::StringOwned(t) => Some(t.to_string()),
                AnyValue::Float64(x) => format_number(x, decimals),
                AnyValue::Float32(x) => format_number(x as f64, decimals),
                other => Some(other.to_string()),
            });
        }
    }
    // Aggregated cells: `mean ± std`, and the count where it is short of the row's runs.
    let count =
        |row: &[Option<String>], ci: usize| -> Option<u64> { row.get(ci)?.as_ref()?.parse().ok() };
    for row in &mut out {
        let runs = table.layout.row_count.and_then(|ci| count(row, ci));
        for (&mean, &(std, n)) in &table.layout.spread {
            let Some(m) = row[mean].clone() else { continue };
            let mut text = match &row[std] {
                Some(sd) => format!("{m} ± {sd}"),
                None => m,
            };
            if let (Some(k), Some(runs)) = (count(row, n), runs)
                && k < runs
            {
                text.push_str(&format!(" (n={k})"));
            }
            row[mean] = Some(text);
        }
    }
    Ok(out)
}

/// A number with sensible precision: `decimals` when given; otherwise integers as integers, four
/// significant digits (two decimals at least above 1), scientific below 10⁻³. NaN is missing.
pub fn format_number(x: f64, decimals: Option<usize>) -> Option<String> {
    if x.is_nan() {
        return None;
    }
    if x.is_infinite() {
        return Some(if x > 0.0 { "inf" } else { "-inf" }.into());
    }
    if let Some(d) = decimals {
        return Some(format!("{x:.d$}"));
    }
    let a = x.abs();
    Some(if x == x.trunc() && a < 1e15 {
        format!("{x:.0}")
    } else if a >= 1000.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else if a >= 1e-3 {
        let d = (3 - a.log10().floor() as i32).max(0) as usize;
        format!("{x:.d$}")
    } else {
        format!("{x:.3e}")
    })
}

fn headers(table: &Exported) -> Vec<String> {
    let names: Vec<String> = table
        .frame
        .get_column_names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    if table.layout.headers.len() == names.len() {
        table.layout.headers.clone()
    } else {
        names
    }
}

/// Columns the presentation formats leave out: the run ids (the name says it) in `groups`, and
/// the std and count columns that an aggregated cell already shows beside its mean.
fn shown(table: &Exported) -> Vec<usize> {
    let names = table.frame.get_column_names();
    let partners: Vec<usize> = table
        .layout
        .spread
        .values()
        .flat_map(|&(std, n)| [std, n])
        .collect();
    (0..names.len())
        .filter(|&i| {
            let id = matches!(names[i].as_str(), c::RUN_ID | RUN_IDS);
            let hidden_id = table.layout.groups.len() > 1 && id;
            !hidden_id && !partners.contains(&i)
        })
        .collect()
}

fn is_numeric(table: &Exported, ci: usize) -> bool {
    table.frame.columns()[ci].dtype().is_primitive_numeric()
}

fn markdown(table: &Exported) -> Result<String, StoreError> {
    let cells = cells(table)?;
    let headers = headers(table);
    let cols = shown(table);
    let group_of = group_labels(table);
    let mut s = String::new();
    let head: Vec<String> = cols
        .iter()
        .map(|&ci| match &group_of[ci] {
            Some(g) if !g.is_empty() => format!("{g} {}", headers[ci]),
            _ => headers[ci].clone(),
        })
        .map(|h| md_escape(&h))
        .collect();
    s.push_str(&format!("| {} |\n", head.join(" | ")));
    let rule: Vec<&str> = cols
        .iter()
        .map(|&ci| if is_numeric(table, ci) { "---:" } else { "---" })
        .collect();
    s.push_str(&format!("|{}|\n", rule.join("|")));
    for line in body_rows(table, &cells, &cols, md_escape, "–", |t| {
        format!("**{t}**")
    }) {
        s.push_str(&format!("| {} |\n", line.join(" | ")));
    }
    Ok(s)
}

/// The shown cells of every row, escaped, a missing value spelled `missing`, the best values
/// wrapped by `bold`.
fn body_rows(
    table: &Exported,
    cells: &[Vec<Option<String>>],
    cols: &[usize],
    escape: fn(&str) -> String,
    missing: &str,
    bold: impl Fn(&str) -> String,
) -> Vec<Vec<String>> {
    cells
        .iter()
        .enumerate()
        .map(|(ri, row)| {
            cols.iter()
                .map(|&ci| {
                    let text = row[ci]
                        .as_deref()
                        .map(escape)
                        .unwrap_or_else(|| missing.to_string());
                    if bold_at(table, ri, ci) {
                        bold(&text)
                    } else {
                        text
                    }
                })
                .collect()
        })
        .collect()
}

fn bold_at(table: &Exported, ri: usize, ci: usize) -> bool {
    table
        .layout
        .bold
        .get(ri)
        .and_then(|r| r.get(ci))
        .copied()
        .unwrap_or(false)
}

/// The spanning header each column falls under.
fn group_labels(table: &Exported) -> Vec<Option<String>> {
    let width = table.frame.width();
    let mut out = vec![None; width];
    let mut at = 0;
    for (label, span) in &table.layout.groups {
        for slot in out.iter_mut().skip(at).take(*span) {
            *slot = Some(label.clone());
        }
        at += span;
    }
    out
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A booktabs `tabular`: spanning headers with `\cmidrule`s, numbers right-aligned, the best
/// value of each column in bold.
fn latex(table: &Exported) -> Result<String, StoreError> {
    let cells = cells(table)?;
    let headers = headers(table);
    let cols = shown(table);
    let spec: String = cols
        .iter()
        .map(|&ci| if is_numeric(table, ci) { 'r' } else { 'l' })
        .collect();
    let mut s = format!("\\begin{{tabular}}{{{spec}}}\n\\toprule\n");
    if table.layout.groups.len() > 1 {
        // Spans over the shown columns only.
        let group_of = group_labels(table);
        let mut spans: Vec<(String, usize)> = Vec::new();
        for &ci in &cols {
            let g = group_of[ci].clone().unwrap_or_default();
            match spans.last_mut() {
                Some((label, n)) if *label == g => *n += 1,
                _ => spans.push((g, 1)),
            }
        }
        let mut parts = Vec::new();
        let mut rules = Vec::new();
        let mut at = 1;
        for (label, n) in &spans {
            if label.is_empty() {
                parts.push(vec![""; *n].join(" & "));
            } else {
                parts.push(format!(
                    "\\multicolumn{{{n}}}{{c}}{{{}}}",
                    latex_escape(label)
                ));
                rules.push(format!("\\cmidrule(lr){{{at}-{}}}", at + n - 1));
            }
            at += n;
        }
        s.push_str(&format!(
            "{} \\\\\n{}\n",
            parts.join(" & "),
            rules.join(" ")
        ));
    }
    let head: Vec<String> = cols.iter().map(|&ci| latex_escape(&headers[ci])).collect();
    s.push_str(&format!("{} \\\\\n\\midrule\n", head.join(" & ")));
    for line in body_rows(table, &cells, &cols, latex_escape, "--", |t| {
        format!("\\textbf{{{t}}}")
    }) {
        s.push_str(&format!("{} \\\\\n", line.join(" & ")));
    }
    s.push_str("\\bottomrule\n\\end{tabular}\n");
    Ok(s)
}

/// Escapes LaTeX's special characters and spells the Greek letters and signs our labels use in
/// math mode, so the table compiles without a Unicode engine.
pub fn latex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\textbackslash{}"),
            '&' | '%' | '$' | '#' | '_' | '{' | '}' => {
                out.push('\\');
                out.push(ch);
            }
            '~' => out.push_str("\\textasciitilde{}"),
            '^' => out.push_str("\\textasciicircum{}"),
            'α' => out.push_str("$\\alpha$"),
            'β' => out.push_str("$\\beta$"),
            'γ' => out.push_str("$\\gamma$"),
            'λ' => out.push_str("$\\lambda$"),
            'μ' => out.push_str("$\\mu$"),
            'σ' => out.push_str("$\\sigma$"),
            'τ' => out.push_str("$\\tau$"),
            '×' => out.push_str("$\\times$"),
            '±' => out.push_str("$\\pm$"),
            '≤' => out.push_str("$\\le$"),
            '≥' => out.push_str("$\\ge$"),
            '−' => out.push('-'),
            '–' => out.push_str("--"),
            '…' => out.push_str("\\ldots{}"),
            '→' => out.push_str("$\\to$"),
            c if c.is_ascii() => out.push(c),
            // Anything else would stop pdflatex: keep the table compiling.
            _ => out.push('?'),
        }
    }
    out
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
        assert_eq!("last".parse(), Ok(StepChoice::Last));
        assert_eq!("best".parse(), Ok(StepChoice::Best));
        assert_eq!("500".parse(), Ok(StepChoice::At(500)));
        assert!("soon".parse::<StepChoice>().is_err());
    }
}
