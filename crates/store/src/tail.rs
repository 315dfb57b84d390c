//! Following a store while its writer adds to it (the compare view of live runs): each
//! [`MetricsTail::poll`] reads only the metrics segments written since the previous one, so a
//! viewer that polls every second reads each segment once, not the whole store every time. A
//! compaction newer than what was read supersedes everything before it: the next poll starts
//! over from it (and says so). Segments are whole on disk (the writer links them into place), so
//! a poll never sees half of one.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

use polars::prelude::*;

use conelab_core::series::SeriesName;

use super::segment::{self, Kind, ReadError};
use super::{StoreError, store_dir};

/// What one poll found.
#[derive(Debug)]
pub struct TailRead {
    /// The rows replace everything read before (the first poll, or a newer compaction).
    pub reset: bool,
    /// The new rows (only the columns asked for), in segment order.
    rows: DataFrame,
    /// Segments that are not conelab segments, skipped (each named once).
    pub warnings: Vec<String>,
}

impl TailRead {
    /// The new rows, typed (`key` and `step` must have been read; the others where asked for).
    pub fn metric_rows(&self) -> Result<Vec<crate::rows::MetricRow>, StoreError> {
        crate::rows::metric_rows(&self.rows)
    }

    /// The series among the new rows that `known` does not know yet, by name (`key`, `split`,
    /// `group` and `metric` must have been read).
    pub fn new_series(
        &self,
        known: impl Fn(i64) -> bool,
    ) -> Result<Vec<(i64, SeriesName)>, StoreError> {
        Ok(crate::rows::series_names(&self.rows, known)?
            .into_iter()
            .map(|(key, split, group, metric)| {
                (
                    key,
                    SeriesName {
                        split,
                        group,
                        metric,
                    },
                )
            })
            .collect())
    }
}

/// The reading position in one run's metrics segments.
#[derive(Debug)]
pub struct MetricsTail {
    dir: PathBuf,
    /// The highest sequence number read (or skipped as corrupt).
    read_up_to: Option<u64>,
    /// The newest compaction read from, so an older one is never read again.
    base: Option<u64>,
    warned: HashSet<PathBuf>,
}

impl MetricsTail {
    /// Follows the store of `run_dir` (which need not exist yet: a run that is starting).
    pub fn new(run_dir: &Path) -> Self {
        Self {
            dir: store_dir(run_dir),
            read_up_to: None,
            base: None,
            warned: HashSet::new(),
        }
    }

    /// The metrics rows written since the last poll (only `columns` of them). An I/O error
    /// leaves the position where it was: the next poll tries the same segments again. A segment
    /// that vanished between listing and reading (a finishing run compacts its store) makes the
    /// poll look again once.
    pub fn poll(&mut self, columns: &[&str]) -> Result<TailRead, StoreError> {
        match self.poll_once(columns) {
            Err(StoreError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                self.poll_once(columns)
            }
            other => other,
        }
    }

    /// Forgets the position: the next poll reads everything again, as a reset (after rows
    /// were read but could not be used).
    pub fn restart(&mut self) {
        self.read_up_to = None;
        self.base = None;
    }

    fn poll_once(&mut self, columns: &[&str]) -> Result<TailRead, StoreError> {
        let all: Vec<segment::Segment> = segment::list(&self.dir)?
            .into_iter()
            .filter(|s| s.kind == Kind::Metrics)
            .collect();
        let newest_base = all.iter().rposition(|s| s.base);
        // Nothing read yet: what this poll finds replaces the (empty) view, once there is
        // something to find.
        let first_poll = self.read_up_to.is_none();
        let (reset, start) = match newest_base {
            Some(b) if self.base.is_none_or(|read| all[b].seq > read) => (true, b),
            _ => {
                let after = self.read_up_to;
                let start = all
                    .iter()
                    .position(|s| after.is_none_or(|r| s.seq > r))
                    .unwrap_or(all.len());
                (first_poll && !all.is_empty(), start)
            }
        };
        let mut rows = segment_schema(columns)?;
        let mut warnings = Vec::new();
        // Corrupt segments are remembered as said only once the poll succeeds (an I/O error
        // after them throws the warnings away with the rows).
        let mut corrupt = Vec::new();
        let mut up_to = if reset { None } else { self.read_up_to };
        let (from, record_damage) = segment::checksummed_from_or_all(&self.dir)?;
        for seg in &all[start..] {
            let read = match segment::unchecked_name(seg, from, record_damage.as_deref()) {
                Some(why) => Err(ReadError::Corrupt(why)),
                None => segment::read_one(&seg.path, Kind::Metrics, Some(columns)),
            };
            match read {
                Ok(df) => {
                    rows.vstack_mut(&df)?;
                }
                Err(ReadError::Corrupt(why)) => {
                    if !self.warned.contains(&seg.path) {
                        warnings.push(format!("{why}; segment skipped"));
                        corrupt.push(seg.path.clone());
                    }
                }
                Err(ReadError::Io(e)) => return Err(e),
            }
            up_to = Some(up_to.map_or(seg.seq, |u: u64| u.max(seg.seq)));
        }
        self.warned.extend(corrupt);
        if reset {
            self.base = newest_base.map(|b| all[b].seq);
        }
        if up_to.is_some() {
            self.read_up_to = up_to;
        }
        if rows.columns().first().is_some_and(|c| c.n_chunks() > 32) {
            rows.rechunk_mut();
        }
        Ok(TailRead {
            reset,
            rows,
            warnings,
        })
    }
}

fn segment_schema(columns: &[&str]) -> Result<DataFrame, StoreError> {
    Ok(super::empty_metrics().select(columns.iter().copied())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RunRecord, StoreWriter, col};

    const COLUMNS: [&str; 2] = [col::STEP, col::VALUE];

    fn steps(read: &TailRead) -> Vec<u64> {
        read.rows
            .column(col::STEP)
            .expect("step")
            .u64()
            .expect("u64")
            .into_no_null_iter()
            .collect()
    }

    fn writer(dir: &Path) -> StoreWriter {
        let record = RunRecord::new("tail", String::new(), "c".into(), "cpu".into());
        StoreWriter::open(dir, &record).expect("writer")
    }

    fn flush_steps(w: &mut StoreWriter, range: std::ops::Range<u64>) {
        for s in range {
            w.push_metric(s, "train", "total", "loss", s as f64);
        }
        w.flush().expect("flush");
    }

    #[test]
    fn each_poll_reads_only_new_segments() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut tail = MetricsTail::new(tmp.path());
        // Nothing yet (a run that is starting): empty, no error.
        let first = tail.poll(&COLUMNS).expect("poll");
        assert_eq!(first.rows.height(), 0);
        assert!(
            !first.reset,
            "an empty store is no reset (the view would redraw for nothing)"
        );
        assert!(!tail.poll(&COLUMNS).expect("poll").reset);
        let mut w = writer(tmp.path());
        flush_steps(&mut w, 1..4);
        let read = tail.poll(&COLUMNS).expect("poll");
        assert!(read.reset, "the first rows replace the (empty) view");
        assert_eq!(steps(&read), vec![1, 2, 3]);
        assert_eq!(tail.poll(&COLUMNS).expect("poll").rows.height(), 0);
        flush_steps(&mut w, 4..6);
        flush_steps(&mut w, 6..7);
        let read = tail.poll(&COLUMNS).expect("poll");
        assert!(!read.reset);
        assert_eq!(steps(&read), vec![4, 5, 6]);
    }

    #[test]
    fn a_compaction_starts_over_from_it() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut w = writer(tmp.path());
        flush_steps(&mut w, 1..3);
        let mut tail = MetricsTail::new(tmp.path());
        assert_eq!(steps(&tail.poll(&COLUMNS).expect("poll")), vec![1, 2]);
        flush_steps(&mut w, 3..5);
        w.compact().expect("compact");
        flush_steps(&mut w, 5..6);
        let read = tail.poll(&COLUMNS).expect("poll");
        assert!(read.reset, "a newer compaction supersedes what was read");
        assert_eq!(steps(&read), vec![1, 2, 3, 4, 5]);
        flush_steps(&mut w, 6..7);
        let read = tail.poll(&COLUMNS).expect("poll");
        assert!(!read.reset, "the same compaction is not read twice");
        assert_eq!(steps(&read), vec![6]);
    }

    #[test]
    fn a_corrupt_segment_is_skipped_and_named_once() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut w = writer(tmp.path());
        flush_steps(&mut w, 1..2);
        drop(w);
        let store = store_dir(tmp.path());
        let next = segment::next_seq(&store).expect("seq");
        std::fs::write(
            segment::path_of(&store, Kind::Metrics, next, false, b"not parquet"),
            b"not parquet",
        )
        .expect("write");
        // The next writer numbers its segments after the foreign file.
        let mut w = writer(tmp.path());
        let mut tail = MetricsTail::new(tmp.path());
        let read = tail.poll(&COLUMNS).expect("poll");
        assert_eq!(steps(&read), vec![1]);
        assert_eq!(read.warnings.len(), 1, "{:?}", read.warnings);
        assert!(read.warnings[0].contains("not a Parquet file"));
        flush_steps(&mut w, 2..3);
        let read = tail.poll(&COLUMNS).expect("poll");
        assert_eq!(steps(&read), vec![2]);
        assert!(read.warnings.is_empty(), "named once: {:?}", read.warnings);
    }

    #[test]
    fn an_io_error_keeps_the_position() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut w = writer(tmp.path());
        flush_steps(&mut w, 1..3);
        let mut tail = MetricsTail::new(tmp.path());
        let err = conelab_base::fault::with_plan("segment.read:1:EIO", || tail.poll(&COLUMNS));
        assert!(err.is_err(), "EIO is an error, not an empty store");
        let read = tail.poll(&COLUMNS).expect("poll");
        assert_eq!(steps(&read), vec![1, 2], "nothing was skipped");
    }

    #[test]
    fn a_corrupt_segment_before_an_io_error_is_still_named_and_restart_rereads() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut w = writer(tmp.path());
        flush_steps(&mut w, 1..2);
        drop(w);
        let store = store_dir(tmp.path());
        let next = segment::next_seq(&store).expect("seq");
        std::fs::write(
            segment::path_of(&store, Kind::Metrics, next, false, b"not parquet"),
            b"not parquet",
        )
        .expect("write");
        let mut w = writer(tmp.path());
        flush_steps(&mut w, 2..3);
        let mut tail = MetricsTail::new(tmp.path());
        // The third read (the segment after the corrupt one) fails: nothing is kept.
        let err = conelab_base::fault::with_plan("segment.read:3:EIO", || tail.poll(&COLUMNS));
        assert!(err.is_err());
        let read = tail.poll(&COLUMNS).expect("poll");
        assert_eq!(steps(&read), vec![1, 2]);
        assert_eq!(read.warnings.len(), 1, "the corrupt segment is still named");
        tail.restart();
        let read = tail.poll(&COLUMNS).expect("poll");
        assert!(read.reset && read.warnings.is_empty());
        assert_eq!(steps(&read), vec![1, 2]);
    }

    #[test]
    fn a_segment_compacted_away_under_the_reader_is_read_from_the_compaction() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut w = writer(tmp.path());
        flush_steps(&mut w, 1..3);
        let mut tail = MetricsTail::new(tmp.path());
        assert_eq!(steps(&tail.poll(&COLUMNS).expect("poll")), vec![1, 2]);
        flush_steps(&mut w, 3..4);
        // The segment listed is gone when read (NotFound), as when a finishing run compacts
        // between the reader's listing and its read: the poll looks again.
        let plan = "segment.read:1:ENOENT";
        let read = conelab_base::fault::with_plan(plan, || tail.poll(&COLUMNS)).expect("retried");
        assert_eq!(steps(&read), vec![3]);
    }
}

/// Issue #61: a segment renamed to the name segments had before checksums passed every check,
/// and flips in it changed exported values. A store records where its checksummed names began;
/// a later segment without one is damage to every reader, while a store written before
/// checksums still reads its segments as unverified.
#[cfg(test)]
mod renamed_segments {
    use std::path::Path;

    use crate::segment::{self, Kind};
    use crate::{RunRecord, StoreWriter, store_dir};

    fn store_of(dir: &Path, steps: std::ops::Range<u64>) -> std::path::PathBuf {
        let record = RunRecord::new("r", String::new(), "c".into(), "cpu".into());
        let mut w = StoreWriter::open(dir, &record).expect("writer");
        for s in steps {
            w.push_metric(s, "train", "total", "loss", s as f64);
            w.flush().expect("flush");
        }
        store_dir(dir)
    }

    #[test]
    fn a_segment_renamed_to_the_old_name_is_damage_to_every_reader() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = store_of(tmp.path(), 1..4);
        let segs = segment::list(&store).expect("list");
        let second = &segs[1];
        assert!(second.checksum.is_some());
        let renamed = segment::unverified_path_of(&store, Kind::Metrics, second.seq, false);
        std::fs::rename(&second.path, &renamed).expect("rename");
        let verified = crate::verify(tmp.path()).expect("verify");
        assert_eq!(verified.damaged.len(), 1, "{verified:?}");
        assert!(
            verified.damaged[0].1.contains("named without a checksum"),
            "{verified:?}"
        );
        let loaded = crate::load(tmp.path()).expect("load");
        assert_eq!(
            loaded.metrics().height(),
            2,
            "the renamed segment's row is out"
        );
        assert!(
            loaded
                .warnings()
                .iter()
                .any(|w| w.contains("its bytes cannot be checked")),
            "{:?}",
            loaded.warnings()
        );
    }

    #[test]
    fn a_store_written_before_checksums_reads_unverified() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = store_of(tmp.path(), 1..3);
        // As an old conelab left it: no record of where checksums began, names without them.
        conelab_base::integrity::forget_recorded(&store, segment::CHECKSUMMED_FROM).expect("rm");
        for seg in segment::list(&store).expect("list") {
            let old = segment::unverified_path_of(&store, seg.kind, seg.seq, seg.base);
            std::fs::rename(&seg.path, old).expect("rename");
        }
        let verified = crate::verify(tmp.path()).expect("verify");
        assert!(verified.damaged.is_empty(), "{verified:?}");
        assert_eq!(verified.unverified, 2, "{verified:?}");
        let loaded = crate::load(tmp.path()).expect("load");
        assert_eq!(loaded.metrics().height(), 2);
        assert!(loaded.warnings().is_empty(), "{:?}", loaded.warnings());
        // A new writer continues it: its segments are checksummed, the old ones still read.
        let store = store_of(tmp.path(), 3..4);
        assert_eq!(
            segment::checksummed_from(&store).expect("record"),
            Some(3),
            "checksums begin after the old segments"
        );
        let loaded = crate::load(tmp.path()).expect("load");
        assert_eq!(loaded.metrics().height(), 3);
        assert!(loaded.warnings().is_empty(), "{:?}", loaded.warnings());
    }
}
