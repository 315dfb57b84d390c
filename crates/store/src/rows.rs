//! A metrics table's rows as plain values, for the readers on the viewer's side (the run's view,
//! the compare view's follower), so that polars stays behind the store.

use polars::prelude::*;

use super::{StoreError, col};

/// One row of a metrics table: its series key and step, and what else the table has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricRow {
    pub key: i64,
    pub step: u64,
    /// `None` when the row has none, or the table was read without the column.
    pub wall_time: Option<f64>,
    pub value: Option<f64>,
    pub epoch: Option<f64>,
}

/// The rows of `df` that have a key and a step, in the table's order. `key` and `step` must be
/// columns of `df`; `wall_time`, `value` and `epoch` may be left out of a read.
pub fn metric_rows(df: &DataFrame) -> Result<Vec<MetricRow>, StoreError> {
    let keys = df.column(col::KEY)?.i64()?;
    let steps = df.column(col::STEP)?.u64()?;
    let optional = |name: &str| -> Result<Option<Float64Chunked>, StoreError> {
        match df.column(name) {
            Ok(c) => Ok(Some(c.f64()?.clone())),
            Err(_) => Ok(None),
        }
    };
    let walls = optional(col::WALL_TIME)?;
    let values = optional(col::VALUE)?;
    let epochs = optional(col::EPOCH)?;
    let at = |c: &Option<Float64Chunked>, i: usize| c.as_ref().and_then(|c| c.get(i));
    let mut out = Vec::with_capacity(df.height());
    for i in 0..df.height() {
        let (Some(key), Some(step)) = (keys.get(i), steps.get(i)) else {
            continue;
        };
        out.push(MetricRow {
            key,
            step,
            wall_time: at(&walls, i),
            value: at(&values, i),
            epoch: at(&epochs, i),
        });
    }
    Ok(out)
}

/// The series of `df` that `known` does not know, each once, in the order first met: (key,
/// split, group, metric). `key`, `split`, `group` and `metric` must be columns of `df`; a row
/// missing one is skipped.
pub fn series_names(
    df: &DataFrame,
    known: impl Fn(i64) -> bool,
) -> Result<Vec<(i64, String, String, String)>, StoreError> {
    let keys = df.column(col::KEY)?.i64()?;
    let splits = df.column(col::SPLIT)?.str()?;
    let groups = df.column(col::GROUP)?.str()?;
    let metrics = df.column(col::METRIC)?.str()?;
    let mut met = std::collections::HashSet::new();
    let mut out = Vec::new();
    for i in 0..df.height() {
        let Some(key) = keys.get(i) else { continue };
        // Most rows are of a series already known: only the key is looked at.
        if known(key) || met.contains(&key) {
            continue;
        }
        if let (Some(s), Some(g), Some(m)) = (splits.get(i), groups.get(i), metrics.get(i)) {
            met.insert(key);
            out.push((key, s.to_string(), g.to_string(), m.to_string()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_without_a_key_or_step_are_skipped_and_missing_values_are_none() {
        let df = DataFrame::new(
            4,
            vec![
                Column::new(col::KEY.into(), [Some(7i64), None, Some(8), Some(9)]),
                Column::new(col::STEP.into(), [Some(1u64), Some(2), None, Some(4)]),
                Column::new(
                    col::VALUE.into(),
                    [Some(0.5f64), Some(1.0), Some(2.0), None],
                ),
            ],
        )
        .expect("equal column lengths");
        let rows = metric_rows(&df).expect("rows");
        assert_eq!(
            rows,
            vec![
                MetricRow {
                    key: 7,
                    step: 1,
                    wall_time: None,
                    value: Some(0.5),
                    epoch: None
                },
                MetricRow {
                    key: 9,
                    step: 4,
                    wall_time: None,
                    value: None,
                    epoch: None
                },
            ]
        );
        // A table without its step column is an error, not an empty list.
        let no_step =
            DataFrame::new(1, vec![Column::new(col::KEY.into(), [1i64])]).expect("one column");
        assert!(metric_rows(&no_step).is_err());
    }

    #[test]
    fn series_names_are_the_unknown_keys_once_each_in_order() {
        fn s(v: [&'static str; 4]) -> [Option<&'static str>; 4] {
            v.map(Some)
        }
        let df = DataFrame::new(
            4,
            vec![
                Column::new(col::KEY.into(), [Some(1i64), Some(2), Some(1), Some(3)]),
                Column::new(col::SPLIT.into(), s(["train", "valid", "train", "valid"])),
                Column::new(col::GROUP.into(), s(["total", "rare", "total", "rare"])),
                Column::new(col::METRIC.into(), s(["loss", "uniq", "loss", "ppl"])),
            ],
        )
        .expect("equal column lengths");
        let names = series_names(&df, |k| k == 3).expect("names");
        let want = |k: i64, a: &str, b: &str, c: &str| (k, a.into(), b.into(), c.into());
        assert_eq!(
            names,
            vec![
                want(1, "train", "total", "loss"),
                want(2, "valid", "rare", "uniq")
            ]
        );
        assert!(series_names(&df, |_| false).expect("names").len() == 3);
        // Without the name columns (a read that left them out) it is an error, not nothing.
        let keys_only =
            DataFrame::new(1, vec![Column::new(col::KEY.into(), [1i64])]).expect("one column");
        assert!(series_names(&keys_only, |_| false).is_err());
    }
}
