//! Segment files: naming, atomic writes, tolerant reads, compaction.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use polars_io::prelude::*;

use super::{StoreError, col, io_error};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Metrics,
    Events,
}

impl Kind {
    fn prefix(self) -> &'static str {
        match self {
            Kind::Metrics => "metrics",
            Kind::Events => "events",
        }
    }
}

/// One segment file on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub path: PathBuf,
    pub kind: Kind,
    pub seq: u64,
    /// A compaction: holds everything of its kind up to `seq`.
    pub base: bool,
}

fn file_name(kind: Kind, seq: u64, base: bool) -> String {
    let suffix = if base { "-base" } else { "" };
    format!("{}-{seq:06}{suffix}.parquet", kind.prefix())
}

fn parse(name: &str) -> Option<(Kind, u64, bool)> {
    let stem = name.strip_suffix(".parquet")?;
    let (kind, rest) = if let Some(r) = stem.strip_prefix("metrics-") {
        (Kind::Metrics, r)
    } else {
        (Kind::Events, stem.strip_prefix("events-")?)
    };
    let (digits, base) = match rest.strip_suffix("-base") {
        Some(d) => (d, true),
        None => (rest, false),
    };
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((kind, digits.parse().ok()?, base))
}

/// Every segment in the folder (temp files and strangers ignored), in sequence order.
pub fn list(dir: &Path) -> Result<Vec<Segment>, StoreError> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_error(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_error(dir))?;
        let name = entry.file_name();
        if let Some((kind, seq, base)) = name.to_str().and_then(parse) {
            out.push(Segment {
                path: entry.path(),
                kind,
                seq,
                base,
            });
        }
    }
    out.sort_by_key(|s| (s.seq, s.base));
    Ok(out)
}

/// The segments of one kind that are live: the newest base and everything after it.
fn live(all: &[Segment], kind: Kind) -> Vec<Segment> {
    let of_kind: Vec<&Segment> = all.iter().filter(|s| s.kind == kind).collect();
    let start = of_kind.iter().rposition(|s| s.base).unwrap_or(0);
    of_kind[start..].iter().map(|s| (*s).clone()).collect()
}

/// One past the highest sequence number in use.
pub fn next_seq(dir: &Path) -> Result<u64, StoreError> {
    Ok(list(dir)?.iter().map(|s| s.seq).max().map_or(1, |m| m + 1))
}

/// Writes a segment atomically (temp file, fsync, rename, fsync of the folder).
pub fn write(
    dir: &Path,
    kind: Kind,
    seq: u64,
    base: bool,
    df: &mut DataFrame,
) -> Result<PathBuf, StoreError> {
    let path = dir.join(file_name(kind, seq, base));
    let mut bytes = Vec::new();
    ParquetWriter::new(Cursor::new(&mut bytes))
        .with_compression(ParquetCompression::Zstd(None))
        .finish(df)?;
    crate::atomic::write_file(&path, &bytes).map_err(io_error(&path))?;
    Ok(path)
}

fn read(path: &Path) -> Result<DataFrame, StoreError> {
    let bytes = std::fs::read(path).map_err(io_error(path))?;
    ParquetReader::new(Cursor::new(bytes))
        .finish()
        .map_err(|e| StoreError::Corrupt {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

/// The live segments of one kind, concatenated in order. Unreadable segments (a truncated copy,
/// a foreign file) are skipped and reported in `warnings`; a segment with other columns too.
pub fn read_all(
    dir: &Path,
    kind: Kind,
    warnings: &mut Vec<String>,
) -> Result<DataFrame, StoreError> {
    let schema = match kind {
        Kind::Metrics => super::empty_metrics(),
        Kind::Events => super::writer::EventBuffer::default().to_frame()?,
    };
    let mut out = schema.clone();
    for seg in live(&list(dir)?, kind) {
        match read(&seg.path) {
            Ok(df) if df.schema() == schema.schema() => {
                out.vstack_mut(&df)?;
            }
            Ok(_) => warnings.push(format!(
                "{}: skipped: not a conelab {} segment (other columns)",
                seg.path.display(),
                kind.prefix()
            )),
            Err(e) => warnings.push(format!("{e}; segment skipped")),
        }
    }
    // Many small segments (a live run flushing often) make many chunks; a few are cheaper
    // left as they are than copied.
    if out.columns().first().is_some_and(|c| c.n_chunks() > 32) {
        out.rechunk_mut();
    }
    Ok(out)
}

/// The live metrics segments are one compaction: already deduplicated.
pub fn single_base(dir: &Path, kind: Kind) -> Result<bool, StoreError> {
    let live = live(&list(dir)?, kind);
    Ok(live.len() == 1 && live[0].base)
}

/// Keeps the newest row of each (step, split, group, metric); rows stay in arrival order.
pub fn dedupe_metrics(df: DataFrame) -> Result<DataFrame, StoreError> {
    let keys = [col::STEP, col::KEY].map(String::from);
    Ok(df.unique_stable(Some(&keys), UniqueKeepStrategy::Last, None)?)
}

/// Rewrites the live segments of both tables as one base segment each, keeping only rows with
/// `step ≤ keep_until` when given; then deletes what the bases supersede. Returns how many files
/// were replaced. A crash before a base's rename leaves the old segments live; after it, the base
/// supersedes them whether or not they were deleted yet.
pub fn compact(dir: &Path, keep_until: Option<u64>) -> Result<usize, StoreError> {
    let all = list(dir)?;
    let seq = all.iter().map(|s| s.seq).max().map_or(1, |m| m + 1);
    let mut replaced = 0;
    for kind in [Kind::Metrics, Kind::Events] {
        let old = live(&all, kind);
        if old.is_empty() || (old.len() == 1 && old[0].base && keep_until.is_none()) {
            continue;
        }
        let mut warnings = Vec::new();
        let mut df = read_all(dir, kind, &mut warnings)?;
        if kind == Kind::Metrics {
            df = dedupe_metrics(df)?;
        }
        if let Some(step) = keep_until {
            let mask = df.column(col::STEP)?.u64()?.lt_eq(step);
            df = df.filter(&mask)?;
        }
        write(dir, kind, seq, true, &mut df)?;
        // Everything of this kind below the new base is now dead, unreadable ones included.
        for s in all.iter().filter(|s| s.kind == kind) {
            std::fs::remove_file(&s.path).map_err(io_error(&s.path))?;
            replaced += 1;
        }
    }
    Ok(replaced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_strangers_are_ignored() {
        assert_eq!(
            parse(&file_name(Kind::Metrics, 12, false)),
            Some((Kind::Metrics, 12, false))
        );
        assert_eq!(
            parse(&file_name(Kind::Events, 1_234_567, true)),
            Some((Kind::Events, 1_234_567, true))
        );
        for stranger in [
            ".metrics-000001.parquet.tmp-42",
            "metrics-1.parquet",
            "metrics-00000a.parquet",
            "notes.parquet",
            "metrics-000001.csv",
        ] {
            assert_eq!(parse(stranger), None, "{stranger}");
        }
    }

    #[test]
    fn the_newest_base_supersedes_older_segments() {
        let seg = |seq, base| Segment {
            path: PathBuf::new(),
            kind: Kind::Metrics,
            seq,
            base,
        };
        let all = vec![seg(1, false), seg(2, true), seg(3, false), seg(4, false)];
        let live_seqs: Vec<u64> = live(&all, Kind::Metrics).iter().map(|s| s.seq).collect();
        assert_eq!(live_seqs, vec![2, 3, 4]);
        assert!(live(&all, Kind::Events).is_empty());
    }
}
