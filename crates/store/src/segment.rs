//! Segment files: naming, crash-safe writes that never replace an existing segment, reads that
//! tell a corrupt segment from an I/O error, compaction.

use conelab_base::integrity;
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};

use polars::prelude::*;
use polars_io::prelude::*;

use super::buffer::{empty_events, empty_metrics};
use super::{StoreError, col, io_error};

/// Where compaction puts segments it proved corrupt (never deleted), each with a note of why
/// (`<segment>.why.txt`).
pub const CORRUPT_DIR: &str = "corrupt";

/// The note beside a segment set aside.
fn note_path(segment: &Path) -> PathBuf {
    let mut name = segment.file_name().unwrap_or_default().to_os_string();
    name.push(".why.txt");
    segment.with_file_name(name)
}

/// The segments compaction set aside in `store/corrupt/` and why (their notes), by name.
pub fn set_aside(dir: &Path) -> Result<Vec<(PathBuf, String)>, StoreError> {
    let aside = dir.join(CORRUPT_DIR);
    let listing = match std::fs::read_dir(&aside) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(&aside)(e)),
    };
    let mut out = Vec::new();
    for entry in listing {
        let path = entry.map_err(io_error(&aside))?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.ends_with(".why.txt") || name.starts_with('.') {
            continue;
        }
        let why = std::fs::read_to_string(note_path(&path))
            .map(|t| t.trim().to_owned())
            .unwrap_or_else(|_| "set aside as corrupt (no note)".into());
        out.push((path, why));
    }
    out.sort();
    Ok(out)
}

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

/// The store's record of the first segment its writers named with a checksum
/// (`checksummed-from`, listed in the store's manifest): a segment at or after that number named
/// without one was renamed (or its name damaged), and its bytes cannot be checked. A store
/// written before checksums has none, and its segments read as unverified.
pub const CHECKSUMMED_FROM: &str = "checksummed-from";

/// Where the store's segments began to carry checksums: `None` for a store written before
/// checksums; a record that fails its checksum or does not parse is damage.
pub fn checksummed_from(dir: &Path) -> Result<Option<u64>, StoreError> {
    let path = dir.join(CHECKSUMMED_FROM);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(&path)(e)),
    };
    integrity::verify_file(dir, CHECKSUMMED_FROM)?;
    let text = String::from_utf8_lossy(&bytes);
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| StoreError::Corrupt {
            path,
            reason: format!("{:?} is not a segment number", text.trim()),
        })
}

/// Records, for a store that has no record yet, that its segments from `next_seq` on carry
/// their checksums (a new store: all of them; one written before checksums: the ones after).
pub fn record_checksummed_from(dir: &Path, next_seq: u64) -> Result<(), StoreError> {
    if dir.join(CHECKSUMMED_FROM).exists() {
        return Ok(());
    }
    integrity::write_recorded(
        "atomic",
        dir,
        CHECKSUMMED_FROM,
        format!("{next_seq}\n").as_bytes(),
    )?;
    Ok(())
}

/// For the readers: where checksums began, or — the record damaged — from the first segment
/// (every unchecksummed name is then suspect, and said with the record's damage).
pub fn checksummed_from_or_all(dir: &Path) -> Result<(Option<u64>, Option<String>), StoreError> {
    match checksummed_from(dir) {
        Ok(from) => Ok((from, None)),
        Err(StoreError::Corrupt { path, reason }) => {
            Ok((Some(0), Some(format!("{}: {reason}", path.display()))))
        }
        Err(e) => Err(e),
    }
}

/// Why `seg` cannot be read as the store's: a name without a checksum where the store names
/// every segment with one (`from`, from [`checksummed_from_or_all`]; `record_damage`, why that
/// record is not trusted).
pub fn unchecked_name(
    seg: &Segment,
    from: Option<u64>,
    record_damage: Option<&str>,
) -> Option<String> {
    let from = from?;
    if seg.checksum.is_some() || seg.seq < from {
        return None;
    }
    Some(match record_damage {
        None => format!(
            "{}: named without a checksum, but this store names every segment from {from} on with \
             its CRC-32C: renamed or its name damaged, its bytes cannot be checked",
            seg.path.display()
        ),
        Some(why) => format!(
            "{}: named without a checksum, and the store's record of where checksums began is \
             damaged ({why}): its bytes cannot be checked",
            seg.path.display()
        ),
    })
}

/// One segment file on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub path: PathBuf,
    pub kind: Kind,
    pub seq: u64,
    /// A compaction: holds everything of its kind up to `seq`.
    pub base: bool,
    /// The CRC-32C of its bytes, from its name (`None`: written before checksums, unverified).
    pub checksum: Option<u32>,
}

/// `metrics-000025.parquet` (no checksum: the names stores had before), or with the CRC-32C of
/// the file's bytes, `metrics-000025.3fa9c0d2.parquet`; `-base` after the number for a
/// compaction. The checksum is in the name so that it is committed by the same link that puts
/// the segment in place: no manifest to update, nothing to get out of step after a crash.
fn file_name(kind: Kind, seq: u64, base: bool, checksum: Option<u32>) -> String {
    let suffix = if base { "-base" } else { "" };
    let sum = checksum.map_or(String::new(), |c| format!(".{}", integrity::hex(c)));
    format!("{}-{seq:06}{suffix}{sum}.parquet", kind.prefix())
}

fn parse(name: &str) -> Option<(Kind, u64, bool, Option<u32>)> {
    let stem = name.strip_suffix(".parquet")?;
    let (stem, checksum) = match stem.rsplit_once('.') {
        Some((rest, sum)) => (rest, Some(integrity::parse_hex(sum)?)),
        None => (stem, None),
    };
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
    Some((kind, digits.parse().ok()?, base, checksum))
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
        if let Some((kind, seq, base, checksum)) = name.to_str().and_then(parse) {
            out.push(Segment {
                path: entry.path(),
                kind,
                seq,
                base,
                checksum,
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

/// Encodes a frame as a Parquet segment.
pub fn encode(df: &mut DataFrame) -> Result<Vec<u8>, StoreError> {
    let mut bytes = Vec::new();
    ParquetWriter::new(Cursor::new(&mut bytes))
        .with_compression(ParquetCompression::Zstd(None))
        .finish(df)?;
    Ok(bytes)
}

/// The path of a segment holding `bytes` (its checksum in its name).
pub fn path_of(dir: &Path, kind: Kind, seq: u64, base: bool, bytes: &[u8]) -> PathBuf {
    dir.join(file_name(kind, seq, base, Some(integrity::crc32c(bytes))))
}

/// The path a segment had before checksums (tests plant such files: they read as unverified).
pub fn unverified_path_of(dir: &Path, kind: Kind, seq: u64, base: bool) -> PathBuf {
    dir.join(file_name(kind, seq, base, None))
}

/// Writes a temporary file beside its final name and fsyncs it (fault point `segment.write`:
/// half the bytes, then the error).
pub fn write_temp(dir: &Path, final_name: &str, bytes: &[u8]) -> Result<PathBuf, StoreError> {
    let tmp = dir.join(conelab_base::atomic::temp_name(final_name));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        if let Err(e) = conelab_base::fault::check("segment.write") {
            let _ = f.write_all(&bytes[..bytes.len() / 2]);
            return Err(e);
        }
        f.write_all(bytes)?;
        f.sync_all()
    })();
    match result {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(io_error(&tmp)(e))
        }
    }
}

/// Moves a fsynced temporary file to `path` without ever replacing an existing file (a hard
/// link fails when the name is taken), then fsyncs the folder (fault point `segment.rename`).
pub fn place(tmp: &Path, path: &Path) -> Result<(), StoreError> {
    let result = conelab_base::fault::check("segment.rename").and_then(|()| {
        match std::fs::hard_link(tmp, path) {
            // A filesystem without hard links: the writer holds the store's lock, so a check
            // before the rename is enough there.
            Err(e)
                if (e.kind() == std::io::ErrorKind::Unsupported
                    || e.raw_os_error() == Some(libc::EPERM))
                    && !path.exists() =>
            {
                std::fs::rename(tmp, path)
            }
            other => other,
        }
    });
    let _ = std::fs::remove_file(tmp);
    result.map_err(io_error(path))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    conelab_base::atomic::sync_dir(dir).map_err(io_error(dir))
}

/// Writes a segment crash-safely; refuses to replace an existing one.
pub fn write(
    dir: &Path,
    kind: Kind,
    seq: u64,
    base: bool,
    df: &mut DataFrame,
) -> Result<PathBuf, StoreError> {
    let bytes = encode(df)?;
    let name = file_name(kind, seq, base, Some(integrity::crc32c(&bytes)));
    let path = dir.join(&name);
    let tmp = write_temp(dir, &name, &bytes)?;
    place(&tmp, &path)?;
    Ok(path)
}

/// Why a segment could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The bytes are there and are not a conelab segment of this kind: it may be set aside.
    Corrupt(String),
    /// The file could not be read (EIO, EACCES, …): nothing may be concluded about it.
    Io(StoreError),
}

/// A segment, only `columns` of it when given (a reader that needs four of a table's nine columns
/// decodes four: the strings are most of a metrics segment). The whole schema is checked either way.
fn read_projected(
    path: &Path,
    kind: Kind,
    columns: Option<&[&str]>,
) -> Result<DataFrame, ReadError> {
    let bytes = conelab_base::fault::check("segment.read")
        .and_then(|()| std::fs::read(path))
        .map_err(|e| ReadError::Io(io_error(path)(e)))?;
    // A segment named with its checksum is verified before a decoder sees it: a flipped bit is
    // found here, whatever polars would have made of it (a panic, or a silently changed value).
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse)
        .and_then(|(_, _, _, sum)| sum);
    if let Some(want) = named {
        let got = integrity::crc32c(&bytes);
        if got != want {
            return Err(ReadError::Corrupt(format!(
                "{}: checksum mismatch (CRC-32C {} where its name says {}): damaged on disk",
                path.display(),
                integrity::hex(got),
                integrity::hex(want)
            )));
        }
    }
    // An unverified segment (written before checksums, or its name lost) may still make the
    // decoder panic: that is its damage, not a bug of the reader.
    integrity::catch_panic(|| decode(path, kind, columns, bytes)).unwrap_or_else(|panic| {
        Err(ReadError::Corrupt(format!(
            "{}: the Parquet decoder failed on it ({panic}): damaged",
            path.display()
        )))
    })
}

fn decode(
    path: &Path,
    kind: Kind,
    columns: Option<&[&str]>,
    bytes: Vec<u8>,
) -> Result<DataFrame, ReadError> {
    let not_parquet =
        |e: PolarsError| ReadError::Corrupt(format!("{}: not a Parquet file: {e}", path.display()));
    let other_columns = || {
        ReadError::Corrupt(format!(
            "{}: not a conelab {} segment (other columns)",
            path.display(),
            kind.prefix()
        ))
    };
    let mut reader = ParquetReader::new(Cursor::new(bytes));
    let expected = schema(kind);
    let names: Vec<String> = reader
        .schema()
        .map_err(not_parquet)?
        .iter_names()
        .map(|n| n.to_string())
        .collect();
    if names
        .iter()
        .map(String::as_str)
        .ne(expected.get_column_names().iter().map(|n| n.as_str()))
    {
        return Err(other_columns());
    }
    let (reader, expected) = match columns {
        Some(c) => (
            reader.with_columns(Some(c.iter().map(|n| n.to_string()).collect())),
            expected
                .select(c.iter().copied())
                .map_err(|_| other_columns())?,
        ),
        None => (reader, expected),
    };
    let df = reader.finish().map_err(not_parquet)?;
    if df.schema() != expected.schema() {
        return Err(other_columns());
    }
    Ok(df)
}

/// One segment (only `columns` of it when given): what [`read_all`] reads of each live segment,
/// for a reader that follows a store segment by segment (`super::tail`).
pub fn read_one(path: &Path, kind: Kind, columns: Option<&[&str]>) -> Result<DataFrame, ReadError> {
    read_projected(path, kind, columns)
}

fn schema(kind: Kind) -> DataFrame {
    match kind {
        Kind::Metrics => empty_metrics(),
        Kind::Events => empty_events(),
    }
}

/// What a corrupt segment's rows were, from the readable segments around it (segments hold
/// rows in step order): "; its rows (after step A, up to step B) are missing".
fn missing_rows(after: Option<u64>, before: Option<u64>) -> String {
    match (after, before) {
        (Some(a), Some(b)) => format!("; its rows (after step {a}, up to step {b}) are missing"),
        (Some(a), None) => format!("; its rows (after step {a}) are missing"),
        (None, Some(b)) => format!("; its rows (up to step {b}) are missing"),
        (None, None) => "; its rows are missing".into(),
    }
}

/// The live segments of one kind, concatenated in order. A corrupt segment (a truncated copy, a
/// foreign file) is skipped and named in `warnings`; a segment that cannot be read at all (EIO,
/// EACCES) is an error: a reader must not present a store with a hole as whole.
pub fn read_all(
    dir: &Path,
    kind: Kind,
    warnings: &mut Vec<String>,
) -> Result<DataFrame, StoreError> {
    let (df, corrupt) = read_live(dir, kind)?;
    for (_, why) in corrupt {
        warnings.push(format!("{why}; segment skipped"));
    }
    Ok(df)
}

/// Only `columns` of the live segments of one kind, concatenated in order; corrupt segments are
/// skipped and named in `warnings` as [`read_all`] does. Rows are not deduplicated.
pub fn read_all_columns(
    dir: &Path,
    kind: Kind,
    columns: &[&str],
    warnings: &mut Vec<String>,
) -> Result<DataFrame, StoreError> {
    let (df, corrupt) = read_live_projected(dir, kind, Some(columns))?;
    for (_, why) in corrupt {
        warnings.push(format!("{why}; segment skipped"));
    }
    Ok(df)
}

/// The live segments of one kind, and the ones proven corrupt (path, why).
fn read_live(dir: &Path, kind: Kind) -> Result<(DataFrame, Vec<(PathBuf, String)>), StoreError> {
    read_live_projected(dir, kind, None)
}

/// How often a reader lists the segments again when one it listed vanished before it was read:
/// a compaction replaced it by a new base in between (each retry sees a newer generation).
const RELISTS: usize = 8;

fn read_live_projected(
    dir: &Path,
    kind: Kind,
    columns: Option<&[&str]>,
) -> Result<(DataFrame, Vec<(PathBuf, String)>), StoreError> {
    let mut attempt = 0;
    loop {
        match read_live_once(dir, kind, columns) {
            Err(StoreError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && attempt < RELISTS =>
            {
                attempt += 1;
                // Let the compaction that removed it finish publishing its new base.
                std::thread::sleep(std::time::Duration::from_millis(20 << attempt.min(4)));
            }
            other => return other,
        }
    }
}

fn read_live_once(
    dir: &Path,
    kind: Kind,
    columns: Option<&[&str]>,
) -> Result<(DataFrame, Vec<(PathBuf, String)>), StoreError> {
    let mut out = match columns {
        Some(c) => schema(kind).select(c.iter().copied())?,
        None => schema(kind),
    };
    let mut corrupt: Vec<(PathBuf, String)> = Vec::new();
    // The steps of the readable segment before each corrupt one (its rows came after them).
    let mut last_step: Option<u64> = None;
    let mut unbounded: Vec<(usize, Option<u64>)> = Vec::new();
    // Held until every listed segment is read: a compaction meanwhile leaves them in place.
    let _guard = read_guard(dir);
    let (from, record_damage) = checksummed_from_or_all(dir)?;
    for seg in live(&list(dir)?, kind) {
        let read = match unchecked_name(&seg, from, record_damage.as_deref()) {
            Some(why) => Err(ReadError::Corrupt(why)),
            None => read_projected(&seg.path, kind, columns),
        };
        match read {
            Ok(df) => {
                let steps = df
                    .column(col::STEP)
                    .ok()
                    .and_then(|c| c.u64().ok().cloned());
                if let Some(steps) = steps {
                    // The rows of the corrupt segments before this one came before these.
                    // (`first()` of polars panics on an empty column: an empty base.)
                    if let Some(first) = steps.iter().next().flatten() {
                        for (i, after) in unbounded.drain(..) {
                            corrupt[i].1.push_str(&missing_rows(after, Some(first)));
                        }
                    }
                    last_step = steps.max().or(last_step);
                }
                out.vstack_mut(&df)?;
            }
            Err(ReadError::Corrupt(why)) => {
                unbounded.push((corrupt.len(), last_step));
                corrupt.push((seg.path.clone(), why));
            }
            Err(ReadError::Io(e)) => return Err(e),
        }
    }
    // Corrupt segments after the last readable one: their rows came after it.
    for (i, after) in unbounded {
        corrupt[i].1.push_str(&missing_rows(after, None));
    }
    // Many small segments (a live run flushing often) make many chunks; a few are cheaper
    // left as they are than copied.
    if out.columns().first().is_some_and(|c| c.n_chunks() > 32) {
        out.rechunk_mut();
    }
    Ok((out, corrupt))
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

/// What a compaction did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Compaction {
    /// Segment files replaced by the new bases (deleted, or left for later while a reader
    /// read them: see `deferred`).
    pub replaced: usize,
    /// Of those, files left in place because a reader held the store: dead (readers skip
    /// everything below the newest base), deleted by the next compaction, roll or open.
    pub deferred: usize,
    /// Segments proven corrupt, moved to `store/corrupt/` (path there, why).
    pub set_aside: Vec<(PathBuf, String)>,
}

/// Which rows a compaction keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    All,
    /// Rows with `step ≤` this (a resumed run drops the lost timeline).
    UpTo(u64),
    /// No rows (a run started again from step 0 in its folder).
    Nothing,
}

/// Rewrites the live segments of both tables as one base segment each, keeping the rows `keep`
/// says; then deletes the readable segments the bases supersede and moves the corrupt ones to
/// `store/corrupt/`. An I/O error on any segment aborts it with everything in place. A crash
/// before a base's rename leaves the old segments live; after it, the base supersedes them
/// whether or not they were deleted yet.
pub fn compact(dir: &Path, keep: Keep) -> Result<Compaction, StoreError> {
    let all = list(dir)?;
    let seq = all.iter().map(|s| s.seq).max().map_or(1, |m| m + 1);
    let mut done = Compaction::default();
    // Read everything first: an I/O error must leave the store exactly as it was.
    let mut tables = Vec::new();
    for kind in [Kind::Metrics, Kind::Events] {
        let old = live(&all, kind);
        if old.is_empty() || (old.len() == 1 && old[0].base && keep == Keep::All) {
            continue;
        }
        let (mut df, corrupt) = read_live(dir, kind)?;
        if kind == Kind::Metrics {
            df = dedupe_metrics(df)?;
        }
        match keep {
            Keep::All => {}
            Keep::UpTo(step) => {
                let mask = df.column(col::STEP)?.u64()?.lt_eq(step);
                df = df.filter(&mask)?;
            }
            Keep::Nothing => df = schema(kind),
        }
        tables.push((kind, df, corrupt));
    }
    for (kind, mut df, corrupt) in tables {
        write(dir, kind, seq, true, &mut df)?;
        if !corrupt.is_empty() {
            let aside = dir.join(CORRUPT_DIR);
            std::fs::create_dir_all(&aside).map_err(io_error(&aside))?;
            for (path, why) in corrupt {
                let name = path.file_name().map(|n| n.to_owned()).unwrap_or_default();
                let mut to = aside.join(&name);
                let mut n = 1;
                while to.exists() {
                    to = aside.join(format!("{}.{n}", name.to_string_lossy()));
                    n += 1;
                }
                std::fs::rename(&path, &to).map_err(io_error(&path))?;
                // Why it was set aside, beside it (`conelab runs` and `store verify` say it).
                let note = note_path(&to);
                conelab_base::atomic::write_file(&note, why.as_bytes()).map_err(io_error(&note))?;
                conelab_base::atomic::sync_dir(&aside).map_err(io_error(&aside))?;
                done.set_aside.push((to, why));
            }
        }
        conelab_base::atomic::sync_dir(dir).map_err(io_error(dir))?;
    }
    // Everything below the new bases is now dead (its rows are in the bases).
    let dead = dead(&list(dir)?).len();
    let removed = remove_dead(dir)?;
    done.replaced = dead;
    done.deferred = dead - removed;
    Ok(done)
}

/// The segments below the newest base of their kind: superseded, read by nobody.
fn dead(all: &[Segment]) -> Vec<&Segment> {
    [Kind::Metrics, Kind::Events]
        .into_iter()
        .flat_map(|kind| {
            let live = live(all, kind);
            all.iter()
                .filter(move |s| s.kind == kind && !live.iter().any(|l| l.path == s.path))
        })
        .collect()
}

/// Readers of a store hold this file's lock shared while they list and read segments;
/// compaction deletes the segments it superseded only when it can hold the lock alone, so a
/// reader never loses a file it listed (an export during a compaction reads the generation it
/// started with).
pub const READERS_LOCK: &str = ".readers.lock";

/// How long a reader waits for a compaction's deletions to finish before reading unguarded (it
/// then relists if a file vanished).
const READ_GUARD_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// A reader's hold on a store (released when dropped); empty where the lock cannot be had
/// (a read-only store without the lock file: the reader relies on relisting).
pub(crate) struct ReadGuard(#[allow(dead_code)] Option<std::fs::File>);

/// Opens (creating it where the folder allows) a store's readers' lock file.
pub(crate) fn open_readers_lock(dir: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(READERS_LOCK))
}

pub(crate) fn read_guard(dir: &Path) -> ReadGuard {
    let path = dir.join(READERS_LOCK);
    let file = open_readers_lock(dir).or_else(|_| std::fs::File::open(&path));
    let Ok(file) = file else {
        return ReadGuard(None);
    };
    let start = std::time::Instant::now();
    loop {
        match file.try_lock_shared() {
            Ok(()) => return ReadGuard(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < READ_GUARD_PATIENCE => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(_) => return ReadGuard(None),
        }
    }
}

/// Deletes the segments superseded by a newer base, unless a reader holds the store (then they
/// stay, dead, for a later call). How many it deleted.
pub fn remove_dead(dir: &Path) -> Result<usize, StoreError> {
    let all = list(dir)?;
    let dead = dead(&all);
    if dead.is_empty() {
        return Ok(0);
    }
    let path = dir.join(READERS_LOCK);
    let lock = open_readers_lock(dir).map_err(io_error(&path))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(0),
        Err(std::fs::TryLockError::Error(e)) => return Err(io_error(&path)(e)),
    }
    conelab_base::fault::check("segment.remove").map_err(io_error(dir))?;
    let mut removed = 0;
    for s in dead {
        match std::fs::remove_file(&s.path) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(&s.path)(e)),
        }
    }
    conelab_base::atomic::sync_dir(dir).map_err(io_error(dir))?;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that listed segments keeps them while a compaction replaces them: the
    /// compaction leaves them (dead, `deferred`) until the reader is done, and the next call
    /// deletes them; the rows read are the same before, during and after.
    #[test]
    fn a_compaction_leaves_the_files_a_reader_holds_until_it_is_done() {
        let dir = tempfile::tempdir().expect("tmp");
        let rows = |n: u64| {
            let mut b = crate::buffer::EventBuffer::new("r");
            for step in 0..n {
                b.push(step, 0.0, "k", "d", "", "");
            }
            b.to_frame().expect("rows")
        };
        for seq in 1..=4 {
            write(dir.path(), Kind::Events, seq, false, &mut rows(seq)).expect("write");
        }
        let (before, _) = read_live(dir.path(), Kind::Events).expect("read");
        let guard = read_guard(dir.path());
        assert!(guard.0.is_some(), "the reader holds the store");
        let done = compact(dir.path(), Keep::All).expect("compact");
        assert_eq!((done.replaced, done.deferred), (4, 4), "{done:?}");
        assert_eq!(
            list(dir.path()).expect("list").len(),
            5,
            "old files kept for the reader"
        );
        // Dead files are never read twice: the rows are the base's.
        let (during, _) = read_live(dir.path(), Kind::Events).expect("read");
        assert_eq!(during.height(), before.height());
        assert_eq!(remove_dead(dir.path()).expect("held"), 0);
        drop(guard);
        assert_eq!(remove_dead(dir.path()).expect("free"), 4);
        assert_eq!(list(dir.path()).expect("list").len(), 1);
        let (after, _) = read_live(dir.path(), Kind::Events).expect("read");
        assert!(after.equals_missing(&during));
    }

    /// A segment written today is named with its CRC-32C and read back whole; one flipped bit
    /// anywhere in it is a corrupt segment (never a decoder's panic or a silently changed
    /// value), and so is garbage under an old-style name that makes the decoder fail.
    #[test]
    fn a_flipped_bit_is_a_checksum_mismatch_and_garbage_is_corrupt() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut df = empty_events();
        let path = write(dir.path(), Kind::Events, 3, false, &mut df).expect("written");
        let bytes = std::fs::read(&path).expect("read");
        let name = path.file_name().and_then(|n| n.to_str()).expect("name");
        assert_eq!(
            name,
            format!(
                "events-000003.{}.parquet",
                integrity::hex(integrity::crc32c(&bytes))
            )
        );
        read_one(&path, Kind::Events, None).expect("it reads back");
        for (i, byte) in [0, bytes.len() / 2, bytes.len() - 1]
            .into_iter()
            .enumerate()
        {
            let mut flipped = bytes.clone();
            flipped[byte] ^= 1 << (i % 8);
            std::fs::write(&path, &flipped).expect("write");
            match read_one(&path, Kind::Events, None) {
                Err(ReadError::Corrupt(why)) => assert!(why.contains("checksum mismatch"), "{why}"),
                other => panic!("byte {byte}: {other:?}"),
            }
        }
        let old = unverified_path_of(dir.path(), Kind::Events, 4, false);
        std::fs::write(&old, &bytes[..bytes.len() / 3]).expect("write");
        assert!(matches!(
            read_one(&old, Kind::Events, None),
            Err(ReadError::Corrupt(_))
        ));
    }

    /// A corrupt segment between two readable ones is named with the steps its rows lay
    /// between (segments hold rows in step order).
    #[test]
    fn a_corrupt_segment_is_named_with_the_steps_it_held() {
        let dir = tempfile::tempdir().expect("tmp");
        let frame = |steps: &[u64]| {
            let mut b = crate::buffer::MetricBuffer::new("run");
            for &st in steps {
                b.push(st, st as f64, 0.0, "train", "total", "loss", 1.0);
            }
            b.to_frame().expect("frame")
        };
        write(dir.path(), Kind::Metrics, 1, false, &mut frame(&[1, 2])).expect("1");
        // An empty segment between (a compaction that kept nothing) bounds nothing.
        write(dir.path(), Kind::Metrics, 2, false, &mut frame(&[])).expect("empty");
        let middle = write(dir.path(), Kind::Metrics, 3, false, &mut frame(&[3, 4])).expect("3");
        write(dir.path(), Kind::Metrics, 4, false, &mut frame(&[])).expect("empty");
        write(dir.path(), Kind::Metrics, 5, false, &mut frame(&[5, 6])).expect("5");
        let last = write(dir.path(), Kind::Metrics, 6, false, &mut frame(&[7])).expect("6");
        for p in [&middle, &last] {
            let mut bytes = std::fs::read(p).expect("read");
            bytes[10] ^= 4;
            std::fs::write(p, bytes).expect("write");
        }
        let mut warnings = Vec::new();
        let df = read_all(dir.path(), Kind::Metrics, &mut warnings).expect("read");
        assert_eq!(df.height(), 4, "the readable rows");
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].contains("after step 2, up to step 5"),
            "{warnings:?}"
        );
        assert!(
            warnings[1].contains("after step 6) are missing"),
            "{warnings:?}"
        );
    }

    /// The same rows under the same number make the same name: the second write is refused,
    /// the first file kept.
    #[test]
    fn a_taken_name_is_never_replaced() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = write(dir.path(), Kind::Events, 7, false, &mut empty_events()).expect("first");
        let before = std::fs::read(&path).expect("read");
        let err = write(dir.path(), Kind::Events, 7, false, &mut empty_events())
            .expect_err("the name is taken");
        assert!(err.to_string().contains("exists"), "{err}");
        assert_eq!(std::fs::read(&path).expect("read"), before);
        assert_eq!(
            list(dir.path()).expect("list").len(),
            1,
            "no temp file left"
        );
    }

    #[test]
    fn names_round_trip_and_strangers_are_ignored() {
        assert_eq!(
            parse(&file_name(Kind::Metrics, 12, false, None)),
            Some((Kind::Metrics, 12, false, None))
        );
        assert_eq!(
            parse(&file_name(Kind::Events, 1_234_567, true, Some(0x3fa9_c0d2))),
            Some((Kind::Events, 1_234_567, true, Some(0x3fa9_c0d2)))
        );
        assert_eq!(
            file_name(Kind::Metrics, 25, true, Some(0x3fa9_c0d2)),
            "metrics-000025-base.3fa9c0d2.parquet"
        );
        assert_eq!(
            parse("metrics-000025.3fa9c0d2.parquet"),
            Some((Kind::Metrics, 25, false, Some(0x3fa9_c0d2)))
        );
        for stranger in [
            ".metrics-000001.parquet.tmp-42",
            ".metrics-000001.3fa9c0d2.parquet.tmp-42",
            "metrics-1.parquet",
            "metrics-00000a.parquet",
            "notes.parquet",
            "metrics-000001.csv",
            "metrics-000001.3fa9c0d.parquet",
            "metrics-000001.3fa9c0dz.parquet",
            "metrics-000001..parquet",
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
            checksum: None,
        };
        let all = vec![seg(1, false), seg(2, true), seg(3, false), seg(4, false)];
        let live_seqs: Vec<u64> = live(&all, Kind::Metrics).iter().map(|s| s.seq).collect();
        assert_eq!(live_seqs, vec![2, 3, 4]);
        assert!(live(&all, Kind::Events).is_empty());
    }
}
