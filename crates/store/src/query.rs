//! Queries on the metrics and events tables. Eager, on purpose: they are filters on one 64-bit
//! series key and a step, which a pass over two columns answers; polars' lazy engine would add six
//! crates and a quarter of the project's compile time for them.

use polars::prelude::*;
use rustc_hash::FxHashMap;

use super::{LoadedStore, StoreError, col as c};

/// The newest value of one (split, group, metric).
#[derive(Debug, Clone, PartialEq)]
pub struct LastValue {
    pub split: String,
    pub group: String,
    pub metric: String,
    pub step: u64,
    pub value: f64,
}

/// The last value of every (split, group, metric), in order of first appearance. Rows arrive in
/// step order per metric (evaluations and embedding analyses too), so the last row of a series is
/// its newest step.
pub fn last_values_vec(metrics: &DataFrame) -> Result<Vec<LastValue>, StoreError> {
    let keys = metrics.column(c::KEY)?.i64()?;
    let (split, group, metric) = (
        metrics.column(c::SPLIT)?.str()?,
        metrics.column(c::GROUP)?.str()?,
        metrics.column(c::METRIC)?.str()?,
    );
    let (step, value) = (
        metrics.column(c::STEP)?.u64()?,
        metrics.column(c::VALUE)?.f64()?,
    );
    let mut last: FxHashMap<i64, usize> = FxHashMap::default();
    let mut out: Vec<LastValue> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let Some(key) = key else { continue };
        let (st, v) = (
            step.get(i).unwrap_or_default(),
            value.get(i).unwrap_or(f64::NAN),
        );
        match last.get(&key) {
            Some(&at) => {
                out[at].step = st;
                out[at].value = v;
            }
            None => {
                last.insert(key, out.len());
                out.push(LastValue {
                    split: split.get(i).unwrap_or_default().to_string(),
                    group: group.get(i).unwrap_or_default().to_string(),
                    metric: metric.get(i).unwrap_or_default().to_string(),
                    step: st,
                    value: v,
                });
            }
        }
    }
    Ok(out)
}

/// Rows of one (split, group, metric) as (step, value), in arrival order.
pub fn series(
    metrics: &DataFrame,
    split: &str,
    group: &str,
    metric: &str,
) -> Result<Vec<(u64, f64)>, StoreError> {
    let want = conelab_core::series::series_key(split, group, metric);
    let keys = metrics.column(c::KEY)?.i64()?;
    let (step, value) = (
        metrics.column(c::STEP)?.u64()?,
        metrics.column(c::VALUE)?.f64()?,
    );
    Ok(keys
        .iter()
        .enumerate()
        .filter(|(_, k)| *k == Some(want))
        .map(|(i, _)| {
            (
                step.get(i).unwrap_or_default(),
                value.get(i).unwrap_or(f64::NAN),
            )
        })
        .collect())
}

/// A metric's history, ready to plot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub steps: Vec<u64>,
    pub values: Vec<f64>,
}

impl History {
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// The history of one metric with at most `max_points` points: consecutive rows are pooled into
/// equal buckets, each plotted at its last step with the mean of its values (a spike or a NaN
/// still shows in its bucket, which striding would drop).
pub fn history(
    metrics: &DataFrame,
    split: &str,
    group: &str,
    metric: &str,
    max_points: usize,
) -> Result<History, StoreError> {
    let rows = series(metrics, split, group, metric)?;
    let steps: Vec<u64> = rows.iter().map(|r| r.0).collect();
    let values: Vec<f64> = rows.iter().map(|r| r.1).collect();
    Ok(decimate(&steps, &values, max_points))
}

/// Pools `n` points into at most `max_points` buckets of (nearly) equal size.
pub fn decimate(steps: &[u64], values: &[f64], max_points: usize) -> History {
    let n = steps.len().min(values.len());
    if max_points == 0 || n <= max_points {
        return History {
            steps: steps[..n].to_vec(),
            values: values[..n].to_vec(),
        };
    }
    let mut out = History {
        steps: Vec::with_capacity(max_points),
        values: Vec::with_capacity(max_points),
    };
    for b in 0..max_points {
        // Bucket b holds rows [b·n/P, (b+1)·n/P): sizes differ by at most one.
        let (lo, hi) = (b * n / max_points, (b + 1) * n / max_points);
        let sum: f64 = values[lo..hi].iter().sum();
        out.steps.push(steps[hi - 1]);
        out.values.push(sum / (hi - lo) as f64);
    }
    out
}

/// Events with `from ≤ step ≤ to`.
pub fn events_between(events: &DataFrame, from: u64, to: u64) -> Result<DataFrame, StoreError> {
    let mask: BooleanChunked = events
        .column(c::STEP)?
        .u64()?
        .iter()
        .map(|s| s.is_some_and(|s| (from..=to).contains(&s)))
        .collect();
    Ok(events.filter(&mask)?)
}

/// Event kinds that change the objectives in force; their `after` column is the new label.
/// `command_kind` in the writer names every objective change with one of these.
pub const OBJECTIVE_CHANGE_KINDS: [&str; 8] = [
    "regulariser on",
    "regulariser off",
    "weight",
    "loss",
    "freeze",
    "unfreeze",
    "gate-freeze",
    "objectives",
];

/// The label of the objectives in force at `step` (after the newest event: `None`): the newest
/// objective change at or before it, else the label of the newest start (a resume starts again
/// with the checkpoint's objectives). `None` when no event names one.
pub fn objective_at(events: &DataFrame, step: Option<u64>) -> Result<Option<String>, StoreError> {
    let steps = events.column(c::STEP)?.u64()?;
    let kinds = events.column(c::KIND)?.str()?;
    let details = events.column(c::DETAIL)?.str()?;
    let afters = events.column(c::AFTER)?.str()?;
    let mut label = None;
    for i in 0..events.height() {
        let (Some(s), Some(kind)) = (steps.get(i), kinds.get(i)) else {
            continue;
        };
        if step.is_some_and(|step| s > step) {
            continue;
        }
        if kind == "start" {
            label = details.get(i);
        } else if OBJECTIVE_CHANGE_KINDS.contains(&kind) {
            label = afters.get(i);
        }
    }
    Ok(label.filter(|l| !l.is_empty()).map(str::to_string))
}

/// The metric rows on `split` (all splits: `None`) at `step` (all steps: `None`).
pub fn metric_rows(
    metrics: &DataFrame,
    split: Option<&str>,
    step: Option<u64>,
) -> Result<DataFrame, StoreError> {
    if split.is_none() && step.is_none() {
        return Ok(metrics.clone());
    }
    let splits = metrics.column(c::SPLIT)?.str()?;
    let steps = metrics.column(c::STEP)?.u64()?;
    let mask: BooleanChunked = splits
        .iter()
        .zip(steps.iter())
        .map(|(sp, st)| {
            split.is_none_or(|want| sp == Some(want)) && step.is_none_or(|want| st == Some(want))
        })
        .collect();
    Ok(metrics.filter(&mask)?)
}

/// Frames of one schema, one after the other (`empty` when there are none).
fn stack(
    frames: impl Iterator<Item = DataFrame>,
    empty: DataFrame,
) -> Result<DataFrame, StoreError> {
    let mut out = empty;
    for f in frames {
        out.vstack_mut(&f)?;
    }
    Ok(out)
}

/// Several runs' metrics as one table (the `run_id` column tells them apart).
pub fn cross_run(stores: &[LoadedStore]) -> Result<DataFrame, StoreError> {
    stack(
        stores.iter().map(|s| s.metrics.clone()),
        super::empty_metrics(),
    )
}

/// Several runs' events as one table.
pub fn cross_run_events(stores: &[LoadedStore]) -> Result<DataFrame, StoreError> {
    stack(
        stores.iter().map(|s| s.events.clone()),
        super::empty_events(),
    )
}

/// The value of one metric at exactly `step`, if recorded (the newest such row).
pub fn value_at(
    metrics: &DataFrame,
    split: &str,
    group: &str,
    metric: &str,
    step: u64,
) -> Result<Option<f64>, StoreError> {
    Ok(series(metrics, split, group, metric)?
        .into_iter()
        .rev()
        .find(|r| r.0 == step)
        .map(|r| r.1))
}

/// The newest value of a metric at or before `step`, with its step (of rows at one step, the
/// last to arrive).
pub fn value_at_or_before(
    metrics: &DataFrame,
    split: &str,
    group: &str,
    metric: &str,
    step: u64,
) -> Result<Option<(u64, f64)>, StoreError> {
    Ok(series(metrics, split, group, metric)?
        .into_iter()
        .enumerate()
        .filter(|(_, r)| r.0 <= step)
        .max_by_key(|(i, r)| (r.0, *i))
        .map(|(_, r)| r))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events as a run writes them: (step, kind, detail, after).
    fn events(rows: &[(u64, &str, &str, &str)]) -> DataFrame {
        let steps: Vec<u64> = rows.iter().map(|r| r.0).collect();
        let kinds: Vec<&str> = rows.iter().map(|r| r.1).collect();
        let details: Vec<&str> = rows.iter().map(|r| r.2).collect();
        let afters: Vec<&str> = rows.iter().map(|r| r.3).collect();
        DataFrame::new(
            rows.len(),
            vec![
                Column::new(c::STEP.into(), steps),
                Column::new(c::KIND.into(), kinds),
                Column::new(c::DETAIL.into(), details),
                Column::new(c::AFTER.into(), afters),
            ],
        )
        .expect("equal column lengths")
    }

    #[test]
    fn the_objective_in_force_follows_changes_and_resumes() {
        // A run resumed at step 1,770 with `--reg sc=…` (the WikiText-2 `sc` run on the H100):
        // the change is an "objectives" event, which the groups export used to ignore, labelling
        // the run MLE at step 3,000.
        let ev = events(&[
            (0, "start", "MLE", "cuda:0"),
            (1000, "checkpoint", "step-001000", ""),
            (1770, "finish", "stopped", ""),
            (1770, "start", "MLE", "cuda:0"),
            (
                1771,
                "objectives",
                "objectives SC λ=1 exp",
                "SC λ=1 exp (c1=83.9)",
            ),
            (2500, "freeze", "freeze rare", "SC λ=1 exp + freeze rare"),
            (2600, "unfreeze", "unfreeze rare", "SC λ=1 exp"),
        ]);
        let at = |step| objective_at(&ev, step).expect("columns present");
        assert_eq!(at(Some(0)).as_deref(), Some("MLE"));
        assert_eq!(at(Some(1770)).as_deref(), Some("MLE"));
        assert_eq!(at(Some(1771)).as_deref(), Some("SC λ=1 exp (c1=83.9)"));
        assert_eq!(at(Some(2550)).as_deref(), Some("SC λ=1 exp + freeze rare"));
        assert_eq!(at(Some(3000)).as_deref(), Some("SC λ=1 exp"));
        assert_eq!(at(None).as_deref(), Some("SC λ=1 exp"));
        // Nothing that names an objective: no label.
        let bare = events(&[(5, "checkpoint", "step-000005", "")]);
        assert_eq!(objective_at(&bare, None).expect("columns present"), None);
    }

    #[test]
    fn decimation_pools_equal_buckets_and_keeps_the_last_step() {
        let steps: Vec<u64> = (1..=10).collect();
        let values: Vec<f64> = (1..=10).map(|v| v as f64).collect();
        let h = decimate(&steps, &values, 3);
        // Buckets [0,3) [3,6) [6,10): means 2, 5, 8.5 at steps 3, 6, 10.
        assert_eq!(h.steps, vec![3, 6, 10]);
        assert_eq!(h.values, vec![2.0, 5.0, 8.5]);
        let all = decimate(&steps, &values, 20);
        assert_eq!(all.steps, steps);
        let nan = decimate(
            &steps,
            &[1.0, f64::NAN, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
            2,
        );
        assert!(nan.values[0].is_nan() && nan.values[1] == 1.0);
    }
}
