//! Queries on the metrics and events tables, as `LazyFrame`s where they compose.

use polars::prelude::*;

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

/// The last value of every (split, group, metric): columns split, group, metric, step, value.
/// Rows arrive in step order per metric (evaluations and embedding analyses too), so the last row
/// of a group is its newest step.
pub fn last_values(metrics: LazyFrame) -> LazyFrame {
    metrics
        .group_by_stable([col(c::KEY)])
        .agg([
            col(c::SPLIT).first(),
            col(c::GROUP).first(),
            col(c::METRIC).first(),
            col(c::STEP).last(),
            col(c::VALUE).last(),
        ])
        .select([
            col(c::SPLIT),
            col(c::GROUP),
            col(c::METRIC),
            col(c::STEP),
            col(c::VALUE),
        ])
}

pub fn last_values_vec(metrics: LazyFrame) -> Result<Vec<LastValue>, StoreError> {
    let df = last_values(metrics).collect()?;
    let (split, group, metric) = (
        df.column(c::SPLIT)?.str()?,
        df.column(c::GROUP)?.str()?,
        df.column(c::METRIC)?.str()?,
    );
    let (step, value) = (df.column(c::STEP)?.u64()?, df.column(c::VALUE)?.f64()?);
    let mut out = Vec::with_capacity(df.height());
    for i in 0..df.height() {
        out.push(LastValue {
            split: split.get(i).unwrap_or_default().to_string(),
            group: group.get(i).unwrap_or_default().to_string(),
            metric: metric.get(i).unwrap_or_default().to_string(),
            step: step.get(i).unwrap_or_default(),
            value: value.get(i).unwrap_or(f64::NAN),
        });
    }
    Ok(out)
}

/// Rows of one (split, group, metric), in arrival order.
pub fn series(metrics: LazyFrame, split: &str, group: &str, metric: &str) -> LazyFrame {
    metrics
        .filter(col(c::KEY).eq(lit(super::series_key(split, group, metric))))
        .select([col(c::STEP), col(c::VALUE)])
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
    metrics: LazyFrame,
    split: &str,
    group: &str,
    metric: &str,
    max_points: usize,
) -> Result<History, StoreError> {
    let df = series(metrics, split, group, metric).collect()?;
    let steps: Vec<u64> = df.column(c::STEP)?.u64()?.into_no_null_iter().collect();
    let values: Vec<f64> = df
        .column(c::VALUE)?
        .f64()?
        .iter()
        .map(|v| v.unwrap_or(f64::NAN))
        .collect();
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
pub fn events_between(events: LazyFrame, from: u64, to: u64) -> LazyFrame {
    events.filter(
        col(c::STEP)
            .gt_eq(lit(from))
            .and(col(c::STEP).lt_eq(lit(to))),
    )
}

/// Several runs' metrics as one table (the `run_id` column tells them apart).
pub fn cross_run(stores: &[LoadedStore]) -> Result<LazyFrame, StoreError> {
    if stores.is_empty() {
        return Ok(super::empty_metrics().lazy());
    }
    let frames: Vec<LazyFrame> = stores.iter().map(|s| s.metrics_lazy()).collect();
    Ok(concat(frames, UnionArgs::default())?)
}

/// Several runs' events as one table.
pub fn cross_run_events(stores: &[LoadedStore]) -> Result<LazyFrame, StoreError> {
    if stores.is_empty() {
        return Ok(super::empty_events().lazy());
    }
    let frames: Vec<LazyFrame> = stores.iter().map(|s| s.events_lazy()).collect();
    Ok(concat(frames, UnionArgs::default())?)
}

/// The value of one metric at exactly `step`, if recorded.
pub fn value_at(
    metrics: LazyFrame,
    split: &str,
    group: &str,
    metric: &str,
    step: u64,
) -> Result<Option<f64>, StoreError> {
    let df = series(metrics, split, group, metric)
        .filter(col(c::STEP).eq(lit(step)))
        .collect()?;
    Ok(df.column(c::VALUE)?.f64()?.last())
}

/// The newest value of a metric at or before `step`, with its step.
pub fn value_at_or_before(
    metrics: LazyFrame,
    split: &str,
    group: &str,
    metric: &str,
    step: u64,
) -> Result<Option<(u64, f64)>, StoreError> {
    let df = series(metrics, split, group, metric)
        .filter(col(c::STEP).lt_eq(lit(step)))
        .collect()?;
    let steps = df.column(c::STEP)?.u64()?;
    let values = df.column(c::VALUE)?.f64()?;
    let best = steps
        .into_no_null_iter()
        .zip(values.iter())
        .enumerate()
        .max_by_key(|(i, (s, _))| (*s, *i));
    Ok(best.map(|(_, (s, v))| (s, v.unwrap_or(f64::NAN))))
}

#[cfg(test)]
mod tests {
    use super::*;

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
