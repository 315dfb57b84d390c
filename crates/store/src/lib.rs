//! The metrics store: every number and event of a run, kept with polars as Parquet segments.
//!
//! ```text
//! checkpoints/<run>/store/
//!   run.json                    the runs record: id, config (run.toml), corpus, device, version,
//!                               git revision, start time
//!   metrics-000001.parquet      long format: run_id, step, epoch, wall_time, split, group,
//!   metrics-000002.parquet      metric, value — one segment per flush
//!   events-000001.parquet       run_id, step, wall_time, kind, detail, before, after
//!   metrics-000009-base.parquet a compaction: everything of its kind up to it, superseding every
//!                               lower-numbered segment (deleted after it is on disk)
//!   projections/step-…parquet   the 2-D projections of each analysed snapshot (the time scrub)
//!   corrupt/                    segments compaction proved corrupt, set aside (never deleted)
//!   writer.lock                 the OS lock of the one process that writes the store
//! ```
//! Segments are written by [`writer::StoreWriter`] (temp file, fsync, link into place without
//! replacing anything), so a `kill -9` leaves whole segments only and loses at most the unflushed
//! buffer; a flush is all or nothing per sequence number. Readers take segments in name order
//! and skip a corrupt one with a warning; an I/O error is an error. Duplicate (step, split,
//! group, metric) rows — possible only when a resumed run re-emits a step it had recorded — keep
//! the newest.
//!
//! The writer is fed by the engine's event consumer ([`recorder`]), never by the training step;
//! [`history`] reads a run back as the events it was written from.

pub mod buffer;
pub mod history;
pub mod labels;
pub mod projection;
pub mod query;
pub mod recorder;
pub mod rows;
pub mod segment;
pub mod summary;
pub mod tail;
pub mod writer;

use conelab_base::error::{BoxError, Invalid, chain};
use std::path::{Path, PathBuf};

use polars::prelude::*;
use serde::{Deserialize, Serialize};

pub use buffer::{empty_events, empty_metrics};
/// A table read from the store. Readers outside the store take its rows through [`rows`] and
/// never name polars themselves.
pub type Frame = polars::prelude::DataFrame;
pub use query::{History, LastValue};
pub use segment::Compaction;
pub use writer::{FlushPolicy, StoreWriter};

/// The store's folder inside a run directory.
pub const STORE_DIR: &str = "store";
/// The runs record inside the store folder.
pub const RUN_RECORD: &str = "run.json";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: no metrics store (no {STORE_DIR}/{RUN_RECORD}); is it a conelab run directory?", .0.display())]
    NoStore(PathBuf),
    #[error("{}: corrupt: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("metrics store: {0}")]
    Polars(#[from] PolarsError),
    /// Bad input in our words (an option, a step, a table), with the parser's error where one
    /// stands behind it.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// Bad input another library's error explains (a checkpoint, a matrix file).
    #[error(transparent)]
    BadInput(BoxError),
}

impl StoreError {
    /// For `map_err`: bad input that `e` explains.
    pub fn bad_input<E: Into<BoxError>>(e: E) -> Self {
        StoreError::BadInput(e.into())
    }
}

/// Damage found by a checksum is `Corrupt`; a file that cannot be read, `Io`.
impl From<conelab_base::integrity::IntegrityError> for StoreError {
    fn from(e: conelab_base::integrity::IntegrityError) -> Self {
        match e {
            conelab_base::integrity::IntegrityError::Io { path, source } => {
                StoreError::Io { path, source }
            }
            conelab_base::integrity::IntegrityError::Damaged { path, reason } => {
                StoreError::Corrupt { path, reason }
            }
        }
    }
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Column names of the metrics table.
pub mod col {
    pub const RUN_ID: &str = "run_id";
    pub const STEP: &str = "step";
    pub const EPOCH: &str = "epoch";
    pub const WALL_TIME: &str = "wall_time";
    pub const SPLIT: &str = "split";
    pub const GROUP: &str = "group";
    pub const METRIC: &str = "metric";
    pub const VALUE: &str = "value";
    /// 64-bit FNV-1a of "split\0group\0metric" (`conelab_core::series::series_key`): the series a row belongs
    /// to as one integer, so deduplication and "last value of every metric" group on a u64 instead
    /// of three strings. Not exported.
    pub const KEY: &str = "key";
    pub const KIND: &str = "kind";
    pub const DETAIL: &str = "detail";
    pub const BEFORE: &str = "before";
    pub const AFTER: &str = "after";
}

/// The columns of the metrics table as exported (without the internal `key`).
pub const METRIC_COLUMNS: [&str; 8] = [
    col::RUN_ID,
    col::STEP,
    col::EPOCH,
    col::WALL_TIME,
    col::SPLIT,
    col::GROUP,
    col::METRIC,
    col::VALUE,
];

/// What the store knows about its run (`run.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    /// The run's `run.toml`: corpus, groups, device, model and training configuration.
    pub config_toml: String,
    pub corpus: String,
    pub device: String,
    pub conelab_version: String,
    /// `git describe` of the source the binary was built from ("unknown" outside a checkout).
    pub git_revision: String,
    /// Seconds since the Unix epoch.
    pub started_unix: f64,
    /// Name, tags and notes (absent in records written before they existed).
    #[serde(flatten)]
    pub labels: conelab_core::labels::RunLabels,
    /// A random UUID given when the store is made: `run_id` is the folder's name, which repeats
    /// across sweeps (`seed-1_reg-cos=1`). Absent in stores made before it: see [`Self::uuid`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

impl RunRecord {
    pub fn new(run_id: &str, config_toml: String, corpus: String, device: String) -> Self {
        Self {
            run_id: run_id.to_string(),
            config_toml,
            corpus,
            device,
            conelab_version: env!("CARGO_PKG_VERSION").to_string(),
            git_revision: conelab_base::revision::get().to_string(),
            started_unix: conelab_base::clock::unix_now(),
            labels: conelab_core::labels::RunLabels::default(),
            uuid: Some(uuid::Uuid::new_v4().to_string()),
        }
    }

    /// The run's UUID: the one its record holds, or, for a store made before records held one,
    /// one derived from what the record fixed at the start (run id, start time to the
    /// microsecond, corpus, configuration) — the same at every read, and nothing is written to
    /// the store to keep it.
    pub fn uuid(&self) -> String {
        if let Some(u) = &self.uuid {
            return u.clone();
        }
        let started = format!("{:.6}", self.started_unix);
        let parts = [
            self.run_id.as_str(),
            started.as_str(),
            self.corpus.as_str(),
            self.config_toml.as_str(),
        ];
        let mut bytes = [0u8; 16];
        let (a, b) = bytes.split_at_mut(8);
        a.copy_from_slice(&fnv1a(0xcbf2_9ce4_8422_2325, &parts).to_le_bytes());
        b.copy_from_slice(&fnv1a(0x6c62_272e_07bb_0142, &parts).to_le_bytes());
        uuid::Builder::from_random_bytes(bytes)
            .into_uuid()
            .to_string()
    }
}

/// 64-bit FNV-1a from `basis` over the parts, each followed by a zero byte.
fn fnv1a(basis: u64, parts: &[&str]) -> u64 {
    parts.iter().fold(basis, |h, part| {
        conelab_base::hash::fnv1a_from(conelab_base::hash::fnv1a_from(h, part.as_bytes()), &[0])
    })
}

/// A run's store as read from disk: the metrics and events tables (deduplicated, in arrival
/// order), the runs record, and what was skipped.
#[derive(Debug, Clone)]
pub struct LoadedStore {
    dir: PathBuf,
    run: RunRecord,
    metrics: DataFrame,
    events: DataFrame,
    /// One line per unreadable segment that was skipped.
    warnings: Vec<String>,
}

/// What a read gives: the store's tables to the exports (which link polars themselves); every
/// other reader takes typed rows ([`rows`], [`history`], [`summary`]).
impl LoadedStore {
    /// The store's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The run record (`run.json`, or a stand-in where it is lost).
    pub fn run(&self) -> &RunRecord {
        &self.run
    }

    /// The metrics table.
    pub fn metrics(&self) -> &DataFrame {
        &self.metrics
    }

    /// The events table.
    pub fn events(&self) -> &DataFrame {
        &self.events
    }

    /// One line per unreadable segment that was skipped.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// The store folder of a run directory (or the store folder itself).
pub fn store_dir(run_dir: &Path) -> PathBuf {
    if run_dir.file_name().is_some_and(|n| n == STORE_DIR) && run_dir.join(RUN_RECORD).exists() {
        run_dir.to_path_buf()
    } else {
        run_dir.join(STORE_DIR)
    }
}

/// Reads a run's store. A corrupt segment is skipped and named in `warnings`; a segment that
/// cannot be read (EIO, EACCES) fails the load.
pub fn load(run_dir: &Path) -> Result<LoadedStore, StoreError> {
    let mut st = read_rows(run_dir, None)?;
    // A compaction is deduplicated already (the common case: every finished run).
    if !(segment::single_base(&st.dir, segment::Kind::Metrics)? && st.warnings.is_empty()) {
        let metrics = std::mem::replace(&mut st.metrics, DataFrame::empty());
        st.metrics = segment::dedupe_metrics(metrics)?;
    }
    Ok(st)
}

/// [`load`] with only `columns` of the metrics table read, and its rows as they are on disk: in
/// arrival order, not deduplicated (of two rows of one step and series, the later one counts).
/// What a reader that needs numbers by series, not names, decodes of a long run's store: the
/// string columns are most of it, and a reader that walks the rows anyway deduplicates for free.
pub fn load_columns(run_dir: &Path, columns: &[&str]) -> Result<LoadedStore, StoreError> {
    read_rows(run_dir, Some(columns))
}

/// The run record, the metrics (all columns, or `columns`) and the events, rows as on disk.
fn read_rows(run_dir: &Path, columns: Option<&[&str]>) -> Result<LoadedStore, StoreError> {
    let dir = store_dir(run_dir);
    let mut warnings = Vec::new();
    let run = match read_run_record(&dir) {
        // The record lost (deleted, or a kill during a rewrite by tag/note) with the rows
        // intact: the rows are read, and the record is what the run folder still tells.
        Err(StoreError::NoStore(_)) if !segment::list(&dir)?.is_empty() => {
            warnings.push(format!(
                "{}: missing; the run's name, tags, notes and UUID are unknown (its rows are intact)",
                dir.join(RUN_RECORD).display()
            ));
            record_without_run_json(&dir)
        }
        // Damaged: the rows are still read, under a stand-in record, and the damage said.
        Err(StoreError::Corrupt { path, reason }) if !segment::list(&dir)?.is_empty() => {
            warnings.push(format!(
                "{}: corrupt ({reason}); the run's name, tags, notes and UUID are unknown (its rows \
                 are intact)",
                path.display()
            ));
            record_without_run_json(&dir)
        }
        other => other?,
    };
    let metrics = match columns {
        Some(c) => segment::read_all_columns(&dir, segment::Kind::Metrics, c, &mut warnings)?,
        None => segment::read_all(&dir, segment::Kind::Metrics, &mut warnings)?,
    };
    let events = segment::read_all(&dir, segment::Kind::Events, &mut warnings)?;
    // Segments an earlier compaction proved corrupt and set aside: their rows are in no read,
    // and every read says so (not only the one that set them aside).
    for (path, why) in segment::set_aside(&dir)? {
        warnings.push(format!(
            "{}: set aside as corrupt ({why}): its rows are not in this read",
            path.display()
        ));
    }
    Ok(LoadedStore {
        dir,
        run,
        metrics,
        events,
        warnings,
    })
}

pub fn read_run_record(dir: &Path) -> Result<RunRecord, StoreError> {
    let path = dir.join(RUN_RECORD);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::NoStore(
                dir.parent().unwrap_or(dir).to_path_buf(),
            ));
        }
        Err(e) => return Err(io_error(&path)(e)),
    };
    // `run.json` is rewritten by tag, note and rename: its checksum is in the store's manifest.
    // (Checked before it is decoded: a flipped byte that is not UTF-8 is damage too.)
    conelab_base::integrity::verify_file(dir, RUN_RECORD)?;
    serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
        path,
        reason: e.to_string(),
    })
}

/// A stand-in record for a store whose `run.json` is gone: the run's id is its folder's name and
/// its configuration the folder's `run.toml` where that is still there.
fn record_without_run_json(dir: &Path) -> RunRecord {
    let run_dir = dir.parent().unwrap_or(dir);
    let id = run_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".into());
    let config = std::fs::read_to_string(run_dir.join("run.toml")).unwrap_or_default();
    let mut record = RunRecord::new(&id, config, "unknown".into(), "unknown".into());
    record.started_unix = 0.0;
    record.git_revision = "unknown".into();
    // Derived from what is left, so that every read agrees.
    record.uuid = None;
    record
}

/// Rewrites a run's store as one segment per table (deduplicated). Safe to interrupt: the
/// compacted segment supersedes the old ones the moment it is in place. Segments proven corrupt
/// are moved to `store/corrupt/` (and listed); an I/O error aborts with everything in place.
pub fn compact(run_dir: &Path) -> Result<Compaction, StoreError> {
    let dir = store_dir(run_dir);
    read_run_record(&dir)?;
    // A live writer's next segment could be numbered below the compaction and be superseded:
    // compaction holds the writer lock while it works.
    let _lock = writer::lock_store(&dir).map_err(|e| match e {
        StoreError::Invalid(m) => StoreError::Invalid(
            format!(
                "{}; a training process compacts its store itself when it ends",
                chain(&m)
            )
            .into(),
        ),
        other => other,
    })?;
    segment::compact(&dir, segment::Keep::All)
}

/// Whether the store holds an analysed snapshot of `step` (its embedding rows): a run resumed
/// from a checkpoint whose analysis never reached the store (killed just after the checkpoint)
/// takes it again.
pub fn has_snapshot_at(run_dir: &Path, step: u64) -> Result<bool, StoreError> {
    let st = load_columns(run_dir, &[col::STEP, col::SPLIT])?;
    let steps = st.metrics.column(col::STEP)?.u64()?;
    let splits = st.metrics.column(col::SPLIT)?.str()?;
    Ok(steps
        .iter()
        .zip(splits.iter())
        .any(|(s, sp)| s == Some(step) && sp == Some(conelab_core::series::split::EMBEDDING)))
}

/// What [`verify`] found in a store's files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreVerification {
    /// Files read whole whose checksum matched (segments, projections, `run.json`).
    pub verified: usize,
    /// Files written before checksums that decoded (nothing to compare them with).
    pub unverified: usize,
    /// Damaged files: (path, why), including segments compaction set aside earlier. Left where
    /// they are (compaction sets a damaged segment aside).
    pub damaged: Vec<(PathBuf, String)>,
}

/// Reads every file of a run's store — `run.json` against the store's manifest, each live
/// segment and projection against the checksum in its name, then decoded — without changing
/// anything: a damaged file is named, an I/O error is an error.
pub fn verify(run_dir: &Path) -> Result<StoreVerification, StoreError> {
    let dir = store_dir(run_dir);
    let mut out = StoreVerification::default();
    match read_run_record(&dir) {
        Ok(_) => {}
        Err(StoreError::Corrupt { path, reason }) => out.damaged.push((path, reason)),
        Err(e) => return Err(e),
    }
    // Every file the store's manifest lists (a damaged name in it too).
    match conelab_base::integrity::verify_folder(&dir) {
        Ok(Some(n)) => out.verified += n,
        Ok(None) => out.unverified += 1,
        Err(conelab_base::integrity::IntegrityError::Damaged { path, reason }) => {
            if out.damaged.is_empty() {
                out.damaged.push((path, reason));
            }
        }
        Err(e) => return Err(e.into()),
    }
    let (from, record_damage) = segment::checksummed_from_or_all(&dir)?;
    for seg in segment::list(&dir)? {
        let read = match segment::unchecked_name(&seg, from, record_damage.as_deref()) {
            Some(why) => Err(segment::ReadError::Corrupt(why)),
            None => segment::read_one(&seg.path, seg.kind, None),
        };
        match read {
            Ok(_) if seg.checksum.is_some() => out.verified += 1,
            Ok(_) => out.unverified += 1,
            Err(segment::ReadError::Corrupt(why)) => {
                // The reader's message names the file already; the pair names it once.
                let named = format!("{}: ", seg.path.display());
                let why = why.strip_prefix(&named).map(str::to_owned).unwrap_or(why);
                out.damaged.push((seg.path, why));
            }
            Err(segment::ReadError::Io(e)) => return Err(e),
        }
    }
    let projections = projection::verify(&dir)?;
    out.verified += projections.verified;
    out.unverified += projections.unverified;
    out.damaged.extend(projections.damaged);
    for (path, why) in segment::set_aside(&dir)? {
        out.damaged
            .push((path, format!("set aside earlier by compaction: {why}")));
    }
    Ok(out)
}

/// Damage of a run's store found without reading its rows: a `run.json` that fails its
/// checksum, segments compaction set aside. One line each (for `conelab runs`).
pub fn known_damage(run_dir: &Path) -> Vec<String> {
    let dir = store_dir(run_dir);
    let mut out = Vec::new();
    if let Err(e @ StoreError::Corrupt { .. }) = read_run_record(&dir) {
        out.push(e.to_string());
    } else if let Err(e) = conelab_base::integrity::verify_folder(&dir) {
        out.push(e.to_string());
    }
    match segment::set_aside(&dir) {
        Ok(aside) if !aside.is_empty() => out.push(format!(
            "{} store segment(s) set aside in {}: {}",
            aside.len(),
            dir.join(segment::CORRUPT_DIR).display(),
            aside[0].1
        )),
        Ok(_) => {}
        Err(e) => out.push(e.to_string()),
    }
    out
}
