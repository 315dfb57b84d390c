//! Buffers rows and writes them as Parquet segments; maps engine events to rows.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use polars::prelude::*;
use rustc_hash::FxHashMap;

use super::segment::{self, Kind};
use super::{RUN_RECORD, RunRecord, STORE_DIR, StoreError, col, io_error, split, unix_now};
use crate::engine::analysis::EmbeddingStats;
use crate::engine::{Command, EvalStats, Event, StepStats};
use crate::metrics::embedding::SetStats;
use crate::objective::ObjectiveChange;

/// When the buffer goes to disk: whichever comes first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlushPolicy {
    pub rows: usize,
    pub interval: Duration,
}

impl Default for FlushPolicy {
    fn default() -> Self {
        Self {
            rows: 100_000,
            interval: Duration::from_secs(5),
        }
    }
}

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
    fn new(run_id: &str) -> Self {
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
    fn push(
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
        self.key.push(super::series_key(split, group, metric));
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

    fn clear(&mut self) {
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
    run_id: String,
    step: Vec<u64>,
    wall_time: Vec<f64>,
    kind: Vec<String>,
    detail: Vec<String>,
    before: Vec<String>,
    after: Vec<String>,
}

impl EventBuffer {
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

    fn clear(&mut self) {
        self.step.clear();
        self.wall_time.clear();
        self.kind.clear();
        self.detail.clear();
        self.before.clear();
        self.after.clear();
    }
}

/// Marks a store as being written by a live process (holds its pid); removed when the writer
/// is dropped. A lock left by a killed process names a dead pid and is taken over.
pub const WRITER_LOCK: &str = "writer.lock";

/// The pid of a live process that holds the store's writer lock, if any (not this process).
pub fn live_writer(store_dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(store_dir.join(WRITER_LOCK)).ok()?;
    let pid: u32 = text.trim().parse().ok()?;
    let alive = Path::new("/proc").join(pid.to_string()).exists();
    (alive && pid != std::process::id()).then_some(pid)
}

/// Appends to one run's store.
pub struct StoreWriter {
    dir: PathBuf,
    metrics: MetricBuffer,
    events: EventBuffer,
    next_seq: u64,
    policy: FlushPolicy,
    last_flush: Instant,
    /// The newest training epoch seen, stamped on evaluation and embedding rows.
    epoch: f64,
}

impl StoreWriter {
    /// Opens the store of `run_dir`, creating it with `record` if it has none (an existing
    /// store keeps its record: a resumed run continues it).
    pub fn open(run_dir: &Path, record: &RunRecord) -> Result<Self, StoreError> {
        let dir = run_dir.join(STORE_DIR);
        std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        if let Some(pid) = live_writer(&dir) {
            return Err(StoreError::Invalid(format!(
                "{}: another conelab process (pid {pid}) is writing this run's store",
                run_dir.display()
            )));
        }
        let lock = dir.join(WRITER_LOCK);
        crate::atomic::write_file(&lock, std::process::id().to_string().as_bytes())
            .map_err(io_error(&lock))?;
        let record_path = dir.join(RUN_RECORD);
        let run_id = if record_path.exists() {
            super::read_run_record(&dir)?.run_id
        } else {
            let json = serde_json::to_string_pretty(record)
                .map_err(|e| StoreError::Invalid(format!("encoding {RUN_RECORD}: {e}")))?;
            crate::atomic::write_file(&record_path, json.as_bytes())
                .map_err(io_error(&record_path))?;
            record.run_id.clone()
        };
        let next_seq = segment::next_seq(&dir)?;
        Ok(Self {
            dir,
            metrics: MetricBuffer::new(&run_id),
            events: EventBuffer {
                run_id,
                ..EventBuffer::default()
            },
            next_seq,
            policy: FlushPolicy::default(),
            last_flush: Instant::now(),
            epoch: 0.0,
        })
    }

    pub fn with_policy(mut self, policy: FlushPolicy) -> Self {
        self.policy = policy;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn buffered_rows(&self) -> usize {
        self.metrics.len() + self.events.len()
    }

    /// Buffers one metric row.
    pub fn push_metric(&mut self, step: u64, split: &str, group: &str, metric: &str, value: f64) {
        self.metrics
            .push(step, self.epoch, unix_now(), split, group, metric, value);
    }

    /// Buffers one metric row with an explicit epoch and wall time (imports, benchmarks).
    #[allow(clippy::too_many_arguments)]
    pub fn push_metric_at(
        &mut self,
        step: u64,
        epoch: f64,
        wall_time: f64,
        split: &str,
        group: &str,
        metric: &str,
        value: f64,
    ) {
        self.metrics
            .push(step, epoch, wall_time, split, group, metric, value);
    }

    /// Buffers one event row.
    pub fn push_event(&mut self, step: u64, kind: &str, detail: &str, before: &str, after: &str) {
        self.push_event_at(step, unix_now(), kind, detail, before, after);
    }

    /// Buffers one event row with an explicit wall time.
    pub fn push_event_at(
        &mut self,
        step: u64,
        wall_time: f64,
        kind: &str,
        detail: &str,
        before: &str,
        after: &str,
    ) {
        let e = &mut self.events;
        e.step.push(step);
        e.wall_time.push(wall_time);
        e.kind.push(kind.to_string());
        e.detail.push(detail.to_string());
        e.before.push(before.to_string());
        e.after.push(after.to_string());
    }

    /// Whether the policy says the buffer should go to disk now.
    pub fn flush_due(&self) -> bool {
        let rows = self.buffered_rows();
        rows >= self.policy.rows || (rows > 0 && self.last_flush.elapsed() >= self.policy.interval)
    }

    /// Writes the buffer if the policy says so.
    pub fn maybe_flush(&mut self) -> Result<(), StoreError> {
        if self.flush_due() {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the buffered rows as new segments (nothing when empty). On error the rows stay in
    /// the buffer for the next attempt.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.last_flush = Instant::now();
        if self.metrics.is_empty() && self.events.is_empty() {
            return Ok(());
        }
        if !self.metrics.is_empty() {
            let mut df = self.metrics.to_frame()?;
            segment::write(&self.dir, Kind::Metrics, self.next_seq, false, &mut df)?;
            self.metrics.clear();
        }
        if !self.events.is_empty() {
            let mut df = self.events.to_frame()?;
            segment::write(&self.dir, Kind::Events, self.next_seq, false, &mut df)?;
            self.events.clear();
        }
        self.next_seq += 1;
        Ok(())
    }

    /// Flushes, then rewrites the store as one segment per table.
    pub fn compact(&mut self) -> Result<usize, StoreError> {
        self.flush()?;
        let replaced = segment::compact(&self.dir, None)?;
        self.next_seq = segment::next_seq(&self.dir)?;
        Ok(replaced)
    }

    /// A run resumed from its checkpoint at `step`: rows recorded after that step belong to a
    /// timeline that no longer exists and are dropped (the resumed run records them anew).
    pub fn truncate_after(&mut self, step: u64) -> Result<usize, StoreError> {
        self.flush()?;
        let replaced = segment::compact(&self.dir, Some(step))?;
        self.next_seq = segment::next_seq(&self.dir)?;
        Ok(replaced)
    }

    /// Turns an engine event into rows. Returns true for the run's final event.
    pub fn record(&mut self, event: &Event) -> Result<bool, StoreError> {
        match event {
            Event::Started {
                step,
                device,
                objective,
                ..
            } => {
                if *step > 0 {
                    self.truncate_after(*step)?;
                }
                self.push_event(*step, "start", objective, "", device);
            }
            Event::Step(s) => self.record_step(s),
            Event::Eval(e) => self.record_eval(e),
            Event::Embedding(e) => self.record_embedding(e),
            Event::Applied(a) => {
                let (kind, detail) = command_kind(&a.command);
                if let Some(kind) = kind {
                    self.push_event(a.step, kind, &detail, &a.before, &a.after);
                }
            }
            Event::Rejected {
                step,
                command,
                reason,
            } => {
                let (_, detail) = command_kind(command);
                self.push_event(*step, "rejected", &format!("{detail}: {reason}"), "", "");
            }
            Event::Checkpoint { step, path } => {
                self.push_event(*step, "checkpoint", &path.display().to_string(), "", "")
            }
            Event::Diverged { step, loss } => {
                self.push_event(*step, "nan", &format!("loss {loss}"), "", "")
            }
            Event::Warning { step, message } => self.push_event(*step, "warning", message, "", ""),
            Event::Finished { step, reason } => {
                let reason = match reason {
                    crate::engine::FinishReason::Completed => "completed",
                    crate::engine::FinishReason::Stopped => "stopped",
                };
                self.push_event(*step, "finish", reason, "", "");
                return Ok(true);
            }
            Event::Failed { step, message } => {
                self.push_event(*step, "failed", message, "", "");
                return Ok(true);
            }
            // Pause/resume are recorded from their acknowledgement; snapshots are W itself.
            Event::Paused { .. } | Event::Resumed { .. } | Event::Snapshot { .. } => {}
        }
        Ok(false)
    }

    fn record_step(&mut self, s: &StepStats) {
        self.epoch = s.epoch;
        let t = unix_now();
        let mut put = |metric: &str, value: f64| {
            self.metrics
                .push(s.step, s.epoch, t, split::TRAIN, "total", metric, value)
        };
        put("loss", s.loss);
        put("penalty", s.penalty);
        put("lr", s.lr);
        put("grad_norm", s.grad_norm);
        put("tokens_per_sec", s.tokens_per_sec);
        put("step_ms", s.step_ms);
        if let Some(r) = s.rare_tokens {
            put("rare_tokens", r as f64);
        }
    }

    fn record_eval(&mut self, e: &EvalStats) {
        let (step, epoch, t) = (e.step, self.epoch, unix_now());
        let split = e.split.as_str();
        let o = &e.outputs;
        for (metric, value) in [
            ("loss", e.loss),
            ("ppl", e.ppl),
            ("positions", e.positions as f64),
            ("seconds", e.seconds),
            ("uniq", o.uniq as f64),
            ("human_uniq", o.human_uniq as f64),
            ("mu_z", o.mu_z),
            ("sigma_z", o.sigma_z),
            ("unnormalised_ppl", o.unnormalised_ppl),
            ("entropy_log_z_corr", o.entropy_log_z_corr),
            ("theorem2_threshold", o.theorem2_threshold),
        ] {
            self.metrics
                .push(step, epoch, t, split, "total", metric, value);
        }
        for (g, name) in o.groups.iter().zip(&super::GROUPS[1..]) {
            for (metric, value) in [
                ("ppl", g.ppl),
                ("positions", g.positions as f64),
                ("uniq", g.uniq as f64),
                ("human_uniq", g.human_uniq as f64),
                ("theorem2_below", g.theorem2_below as f64),
                ("tokens", g.tokens as f64),
            ] {
                self.metrics
                    .push(step, epoch, t, split, name, metric, value);
            }
        }
    }

    fn record_embedding(&mut self, e: &EmbeddingStats) {
        let (step, epoch, t) = (e.step, self.epoch, unix_now());
        let sets = std::iter::once(&e.total).chain(e.groups.iter());
        for (s, name) in sets.zip(super::GROUPS) {
            for (metric, value) in set_metrics(s) {
                self.metrics
                    .push(step, epoch, t, split::EMBEDDING, name, metric, value);
            }
        }
        for (metric, value) in [
            ("rare_frequent_cos", e.rare_frequent_cos),
            ("seconds", e.seconds),
        ] {
            self.metrics
                .push(step, epoch, t, split::EMBEDDING, "total", metric, value);
        }
        for (k, &sv) in e.total.sv_norm.iter().enumerate() {
            self.metrics.push(
                step,
                epoch,
                t,
                split::SPECTRUM,
                "total",
                &spectrum_metric(k),
                sv,
            );
        }
    }
}

impl Drop for StoreWriter {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join(WRITER_LOCK));
    }
}

/// The metric name of the k-th normalised singular value (0-based), sorted by name = by k.
pub fn spectrum_metric(k: usize) -> String {
    format!("sv{k:04}")
}

fn set_metrics(s: &SetStats) -> [(&'static str, f64); 8] {
    [
        ("i1", s.i1),
        ("i2", s.i2),
        ("mean_cos", s.mean_cos),
        ("mean_cos_to_mean", s.mean_cos_to_mean),
        ("mean_norm", s.mean_norm),
        ("effective_rank", s.effective_rank),
        ("sv_max", s.sv_max),
        ("rows", s.rows as f64),
    ]
}

/// The event kind of an acknowledged command and a description; `None` for commands whose
/// outcome is its own event (a checkpoint).
fn command_kind(command: &Command) -> (Option<&'static str>, String) {
    match command {
        Command::Pause => (Some("pause"), "pause".into()),
        Command::Resume => (Some("resume"), "resume".into()),
        Command::Stop { save } => (
            Some("stop"),
            if *save { "stop and save" } else { "stop" }.into(),
        ),
        Command::SaveCheckpoint => (None, "checkpoint".into()),
        Command::SetLr { lr } => (Some("lr"), format!("lr {lr}")),
        Command::Objective { change } => {
            let kind = match change {
                ObjectiveChange::Enable { on: true, .. } => "regulariser on",
                ObjectiveChange::Enable { on: false, .. } => "regulariser off",
                ObjectiveChange::Weight { .. } => "weight",
                ObjectiveChange::Loss { .. } => "loss",
                ObjectiveChange::Freeze { frozen: true, .. } => "freeze",
                ObjectiveChange::Freeze { frozen: false, .. } => "unfreeze",
                ObjectiveChange::GateFreeze { .. } => "gate-freeze",
            };
            (Some(kind), change.to_string())
        }
    }
}
