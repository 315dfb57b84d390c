//! Rows not yet on disk, by column: the in-memory form of the metrics and events tables, and
//! their schemas (an empty buffer's frame).

use polars::prelude::*;
use rustc_hash::FxHashMap;

use super::col;

/// Strings that repeat in every row (split, group, metric names) are kept once.
#[derive(Debug, Default, Clone)]
struct Interner {
    names: Vec<String>,
    index: FxHashMap<String, u32>,
}

impl Interner {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), i);
        i
    }

    fn column(&self, name: &str, ids: &[u32]) -> Column {
        let values: Vec<&str> = ids
            .iter()
            .map(|&i| self.names[i as usize].as_str())
            .collect();
        Column::new(name.into(), values)
    }
}

/// Metric rows not yet on disk, by column.
#[derive(Debug, Default, Clone)]
pub struct MetricBuffer {
    run_id: String,
    names: Interner,
    step: Vec<u64>,
    epoch: Vec<f64>,
    wall_time: Vec<f64>,
    split: Vec<u32>,
    group: Vec<u32>,
    metric: Vec<u32>,
    key: Vec<i64>,
    value: Vec<f64>,
}

impl MetricBuffer {
    pub(crate) fn new(run_id: &str) -> Self {
        Self {
            run_id: run_id.to_string(),
            ..Self::default()
        }
    }

    pub fn len(&self) -> usize {
        self.step.len()
    }

    pub fn is_empty(&self) -> bool {
        self.step.is_empty()
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push(
        &mut self,
        step: u64,
        epoch: f64,
        wall_time: f64,
        split: &str,
        group: &str,
        metric: &str,
        value: f64,
    ) {
        let (s, g, m) = (
            self.names.id(split),
            self.names.id(group),
            self.names.id(metric),
        );
        self.step.push(step);
        self.epoch.push(epoch);
        self.wall_time.push(wall_time);
        self.split.push(s);
        self.group.push(g);
        self.metric.push(m);
        self.key
            .push(conelab_core::series::series_key(split, group, metric));
        self.value.push(value);
    }

    pub fn to_frame(&self) -> PolarsResult<DataFrame> {
        let n = self.len();
        let run_id: Vec<&str> = vec![self.run_id.as_str(); n];
        DataFrame::new(
            n,
            vec![
                Column::new(col::RUN_ID.into(), run_id),
                Column::new(col::STEP.into(), self.step.as_slice()),
                Column::new(col::EPOCH.into(), self.epoch.as_slice()),
                Column::new(col::WALL_TIME.into(), self.wall_time.as_slice()),
                self.names.column(col::SPLIT, &self.split),
                self.names.column(col::GROUP, &self.group),
                self.names.column(col::METRIC, &self.metric),
                Column::new(col::KEY.into(), self.key.as_slice()),
                Column::new(col::VALUE.into(), self.value.as_slice()),
            ],
        )
    }

    pub(crate) fn clear(&mut self) {
        self.step.clear();
        self.epoch.clear();
        self.wall_time.clear();
        self.split.clear();
        self.group.clear();
        self.metric.clear();
        self.key.clear();
        self.value.clear();
    }
}

/// Event rows not yet on disk.
#[derive(Debug, Default, Clone)]
pub struct EventBuffer {
    pub(crate) run_id: String,
    pub(crate) step: Vec<u64>,
    pub(crate) wall_time: Vec<f64>,
    pub(crate) kind: Vec<String>,
    pub(crate) detail: Vec<String>,
    pub(crate) before: Vec<String>,
    pub(crate) after: Vec<String>,
}

impl EventBuffer {
    pub(crate) fn new(run_id: &str) -> Self {
        Self {
            run_id: run_id.to_string(),
            ..Self::default()
        }
    }

    pub(crate) fn push(
        &mut self,
        step: u64,
        wall_time: f64,
        kind: &str,
        detail: &str,
        before: &str,
        after: &str,
    ) {
        self.step.push(step);
        self.wall_time.push(wall_time);
        self.kind.push(kind.to_string());
        self.detail.push(detail.to_string());
        self.before.push(before.to_string());
        self.after.push(after.to_string());
    }

    pub fn len(&self) -> usize {
        self.step.len()
    }

    pub fn is_empty(&self) -> bool {
        self.step.is_empty()
    }

    pub fn to_frame(&self) -> PolarsResult<DataFrame> {
        let n = self.len();
        let run_id: Vec<&str> = vec![self.run_id.as_str(); n];
        DataFrame::new(
            n,
            vec![
                Column::new(col::RUN_ID.into(), run_id),
                Column::new(col::STEP.into(), self.step.as_slice()),
                Column::new(col::WALL_TIME.into(), self.wall_time.as_slice()),
                Column::new(col::KIND.into(), self.kind.as_slice()),
                Column::new(col::DETAIL.into(), self.detail.as_slice()),
                Column::new(col::BEFORE.into(), self.before.as_slice()),
                Column::new(col::AFTER.into(), self.after.as_slice()),
            ],
        )
    }

    pub(crate) fn clear(&mut self) {
        self.step.clear();
        self.wall_time.clear();
        self.kind.clear();
        self.detail.clear();
        self.before.clear();
        self.after.clear();
    }
}

/// Empty metrics table with the store's schema.
pub fn empty_metrics() -> DataFrame {
    MetricBuffer::default()
        .to_frame()
        .unwrap_or_else(|_| DataFrame::empty())
}

/// Empty events table with the store's schema.
pub fn empty_events() -> DataFrame {
    EventBuffer::default()
        .to_frame()
        .unwrap_or_else(|_| DataFrame::empty())
}
