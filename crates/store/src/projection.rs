//! The 2-D projections of every analysed snapshot, one Parquet file each under
//! `store/projections/step-NNNNNNNNN.parquet` (columns `ux`, `uy` uncentred and `cx`, `cy`
//! centred, f32, row order; the explained shares as constant columns `ue0`, `ue1`, `ce0`, `ce1`;
//! the snapshot's normalised spectrum in `sv`, null past its end — at most one value per point,
//! so a spectrum longer than the points, which no run has (N ≫ d), would be cut there).
//! They make the embedding pane's time scrub work after attaching to a run and on finished runs.
//!
//! A file is written atomically. Past [`MAX_FILES`] the older half is thinned (every other file
//! deleted), as the workbench thins its own list: the scrub keeps the whole run's story.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use polars_io::prelude::*;

use super::{StoreError, io_error};
use conelab_core::events::ProjectionFrame;
use conelab_metrics::ProjectionMode;
use conelab_metrics::embedding::Projection;

/// The folder inside the store.
pub const DIR: &str = "projections";
/// Files kept before the older half is thinned.
pub const MAX_FILES: usize = 400;

/// `step-NNNNNNNNN.<crc32c>.parquet`: the checksum of the bytes in the name, as segments carry
/// theirs (a file written before checksums has none and reads as unverified).
fn file_name(step: u64, crc: u32) -> String {
    format!(
        "step-{step:09}.{}.parquet",
        conelab_base::integrity::hex(crc)
    )
}

/// One projection file: its step, path and the checksum its name carries.
struct ProjectionFile {
    step: u64,
    path: PathBuf,
    checksum: Option<u32>,
}

fn parse_name(name: &str) -> Option<(u64, Option<u32>)> {
    let rest = name.strip_prefix("step-")?.strip_suffix(".parquet")?;
    let (digits, checksum) = match rest.split_once('.') {
        Some((d, c)) => (d, Some(conelab_base::integrity::parse_hex(c)?)),
        None => (rest, None),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, checksum))
}

/// The projection files, by step ascending.
fn entries(store_dir: &Path) -> Result<Vec<ProjectionFile>, StoreError> {
    let dir = store_dir.join(DIR);
    let listing = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(&dir)(e)),
    };
    let mut out: Vec<ProjectionFile> = listing
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let (step, checksum) = e.file_name().to_str().and_then(parse_name)?;
            Some(ProjectionFile {
                step,
                path: e.path(),
                checksum,
            })
        })
        .collect();
    out.sort_by_key(|e| (e.step, e.checksum.is_some()));
    Ok(out)
}

/// Steps with a projection file, ascending.
pub fn list(store_dir: &Path) -> Result<Vec<u64>, StoreError> {
    let mut steps: Vec<u64> = entries(store_dir)?.iter().map(|e| e.step).collect();
    steps.dedup();
    Ok(steps)
}

fn remove_step(store_dir: &Path, step: u64, except: Option<&Path>) -> Result<(), StoreError> {
    for e in entries(store_dir)?.into_iter().filter(|e| e.step == step) {
        if Some(e.path.as_path()) != except {
            match std::fs::remove_file(&e.path) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io_error(&e.path)(err));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn columns(p: &Projection, prefix: char) -> Vec<Column> {
    let xs: Vec<f32> = p.points.iter().map(|q| q[0]).collect();
    let ys: Vec<f32> = p.points.iter().map(|q| q[1]).collect();
    let n = xs.len();
    vec![
        Column::new(format!("{prefix}x").into(), xs),
        Column::new(format!("{prefix}y").into(), ys),
        Column::new(format!("{prefix}e0").into(), vec![p.explained[0]; n]),
        Column::new(format!("{prefix}e1").into(), vec![p.explained[1]; n]),
    ]
}

/// Writes the frame's file (replacing one of the same step), then thins old files if needed.
pub fn write(store_dir: &Path, frame: &ProjectionFrame) -> Result<(), StoreError> {
    let mut cols = Vec::new();
    let mut height = 0;
    for (p, prefix) in [(&frame.uncentred, 'u'), (&frame.centred, 'c')] {
        if let Some(p) = p {
            height = p.points.len();
            cols.extend(columns(p, prefix));
        }
    }
    if cols.is_empty() {
        return Ok(());
    }
    if !frame.spectrum.is_empty() {
        let sv: Vec<Option<f64>> = (0..height)
            .map(|i| frame.spectrum.get(i).copied())
            .collect();
        cols.push(Column::new("sv".into(), sv));
    }
    let mut df = DataFrame::new(height, cols)?;
    let mut bytes = Vec::new();
    ParquetWriter::new(Cursor::new(&mut bytes))
        .with_compression(ParquetCompression::Zstd(None))
        .finish(&mut df)?;
    let dir = store_dir.join(DIR);
    std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
    let target = dir.join(file_name(
        frame.step,
        conelab_base::integrity::crc32c(&bytes),
    ));
    conelab_base::atomic::write_file_as("projection", &target, &bytes)
        .map_err(io_error(&target))?;
    // The step's earlier file (a re-taken snapshot), once the new one is in place.
    remove_step(store_dir, frame.step, Some(&target))?;
    thin(store_dir)
}

/// Deletes every other file of the older half once there are more than [`MAX_FILES`].
fn thin(store_dir: &Path) -> Result<(), StoreError> {
    let steps = list(store_dir)?;
    if steps.len() <= MAX_FILES {
        return Ok(());
    }
    let half = steps.len() / 2;
    for step in steps[..half].iter().skip(1).step_by(2) {
        remove_step(store_dir, *step, None)?;
    }
    Ok(())
}

fn projection(df: &DataFrame, prefix: char, mode: ProjectionMode) -> Option<Projection> {
    let get = |name: String| df.column(&name).ok()?.f32().ok().cloned();
    let xs = get(format!("{prefix}x"))?;
    let ys = get(format!("{prefix}y"))?;
    let share = |name: String| {
        df.column(&name)
            .ok()
            .and_then(|c| c.f64().ok().and_then(|c| c.get(0)))
            .unwrap_or(f64::NAN)
    };
    let points = xs
        .iter()
        .zip(ys.iter())
        .map(|(x, y)| [x.unwrap_or(f32::NAN), y.unwrap_or(f32::NAN)])
        .collect();
    Some(Projection {
        mode,
        points,
        explained: [share(format!("{prefix}e0")), share(format!("{prefix}e1"))],
    })
}

/// The projections of the snapshot at `step`, if a file holds them. A file whose bytes fail
/// the checksum in its name, or that its decoder cannot read (even by panicking), is `Corrupt`.
pub fn read(store_dir: &Path, step: u64) -> Result<Option<ProjectionFrame>, StoreError> {
    let Some(entry) = entries(store_dir)?.into_iter().rfind(|e| e.step == step) else {
        return Ok(None);
    };
    let p = entry.path;
    let bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(&p)(e)),
    };
    let df = decode(&p, entry.checksum, bytes)?;
    // A file without `sv` (written before frames carried the spectrum) has none.
    let spectrum = df
        .column("sv")
        .ok()
        .and_then(|c| c.f64().ok())
        .map(|c| c.iter().map_while(|v| v).collect())
        .unwrap_or_default();
    Ok(Some(ProjectionFrame {
        step,
        uncentred: projection(&df, 'u', ProjectionMode::Uncentred),
        centred: projection(&df, 'c', ProjectionMode::Centred),
        spectrum,
    }))
}

/// A projection file's bytes, checked against the checksum its name carries (if any) and
/// decoded under `catch_panic`: damage of either kind is `Corrupt`.
fn decode(path: &Path, checksum: Option<u32>, bytes: Vec<u8>) -> Result<DataFrame, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    if let Some(want) = checksum {
        let got = conelab_base::integrity::crc32c(&bytes);
        if got != want {
            return Err(corrupt(format!(
                "checksum mismatch (CRC-32C {} where its name says {}): damaged on disk",
                conelab_base::integrity::hex(got),
                conelab_base::integrity::hex(want)
            )));
        }
    }
    conelab_base::integrity::catch_panic(|| ParquetReader::new(Cursor::new(bytes)).finish())
        .map_err(|panic| corrupt(format!("the decoder failed on it ({panic}): damaged")))?
        .map_err(|e| corrupt(e.to_string()))
}

/// What [`verify`] found: files whose checksum matched, files written before checksums that
/// decoded, and the damaged ones (path, why).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectionVerification {
    pub verified: usize,
    pub unverified: usize,
    pub damaged: Vec<(PathBuf, String)>,
}

/// Reads every projection file (checksum, then decoding) without changing anything.
pub fn verify(store_dir: &Path) -> Result<ProjectionVerification, StoreError> {
    let mut out = ProjectionVerification::default();
    for e in entries(store_dir)? {
        let bytes = std::fs::read(&e.path).map_err(io_error(&e.path))?;
        match decode(&e.path, e.checksum, bytes) {
            Ok(_) if e.checksum.is_some() => out.verified += 1,
            Ok(_) => out.unverified += 1,
            Err(StoreError::Corrupt { reason, .. }) => out.damaged.push((e.path, reason)),
            Err(other) => return Err(other),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(step: u64) -> ProjectionFrame {
        ProjectionFrame {
            step,
            uncentred: Some(Projection {
                mode: ProjectionMode::Uncentred,
                points: vec![[1.0, -2.0], [0.5, f32::NAN], [3.25, 4.0]],
                explained: [0.9, 0.05],
            }),
            centred: Some(Projection {
                mode: ProjectionMode::Centred,
                points: vec![[0.0, 1.0], [2.0, 3.0], [-1.0, -1.5]],
                explained: [0.4, 0.3],
            }),
            spectrum: vec![1.0, 0.5 / step as f64],
        }
    }

    #[test]
    fn a_frame_round_trips_and_steps_are_listed_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        for step in [50, 7, 1_000_000] {
            write(dir.path(), &frame(step)).expect("write");
        }
        assert_eq!(list(dir.path()).expect("list"), vec![7, 50, 1_000_000]);
        let back = read(dir.path(), 50).expect("read").expect("present");
        let want = frame(50);
        let (u, wu) = (back.uncentred.expect("u"), want.uncentred.expect("u"));
        assert_eq!(u.points[0], wu.points[0]);
        assert!(u.points[1][1].is_nan());
        assert_eq!(u.explained, wu.explained);
        assert_eq!(back.centred, want.centred);
        // The spectrum (shorter than the points: null past its end) comes back as written.
        assert_eq!(back.spectrum, vec![1.0, 0.01]);
        assert_eq!(read(dir.path(), 51).expect("read"), None);
        // A frame without one writes no `sv`, and reads back without one.
        let mut bare = frame(60);
        bare.spectrum.clear();
        write(dir.path(), &bare).expect("write");
        assert!(
            read(dir.path(), 60)
                .expect("read")
                .expect("present")
                .spectrum
                .is_empty()
        );
    }

    #[test]
    fn past_the_limit_the_older_half_is_thinned_and_the_newest_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        for step in 1..=(MAX_FILES as u64 + 1) {
            write(dir.path(), &frame(step)).expect("write");
        }
        let steps = list(dir.path()).expect("list");
        assert!(steps.len() < MAX_FILES, "{}", steps.len());
        assert_eq!(steps.first(), Some(&1), "the first snapshot stays");
        assert_eq!(steps.last(), Some(&(MAX_FILES as u64 + 1)));
        // The newer half is untouched.
        let newest: Vec<u64> = ((MAX_FILES as u64 / 2 + 2)..=(MAX_FILES as u64 + 1)).collect();
        assert!(newest.iter().all(|s| steps.contains(s)));
    }

    #[test]
    fn a_flipped_bit_is_corrupt_and_an_old_name_reads_unverified() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), &frame(5)).expect("write");
        // A re-taken snapshot of one step replaces its file.
        write(dir.path(), &frame(5)).expect("again");
        let files: Vec<PathBuf> = std::fs::read_dir(dir.path().join(DIR))
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let bytes = std::fs::read(&files[0]).expect("read");
        let name = files[0]
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        assert_eq!(
            name,
            format!(
                "step-000000005.{}.parquet",
                conelab_base::integrity::hex(crc32c_of(&bytes))
            )
        );
        assert_eq!(verify(dir.path()).expect("verify").verified, 1);
        // Every single flipped bit of the file is found, never a panic or a changed value.
        for i in (0..bytes.len()).step_by(7) {
            let mut flipped = bytes.clone();
            flipped[i] ^= 1 << (i % 8);
            std::fs::write(&files[0], &flipped).expect("write");
            assert!(
                matches!(read(dir.path(), 5), Err(StoreError::Corrupt { .. })),
                "byte {i}"
            );
        }
        assert_eq!(verify(dir.path()).expect("verify").damaged.len(), 1);
        // The same bytes under a name without a checksum (written before checksums) read
        // unverified; garbage there is corrupt, never a panic.
        std::fs::remove_file(&files[0]).expect("rm");
        let old = dir.path().join(DIR).join("step-000000005.parquet");
        std::fs::write(&old, &bytes).expect("write");
        assert!(read(dir.path(), 5).expect("read").is_some());
        assert_eq!(verify(dir.path()).expect("verify").unverified, 1);
        std::fs::write(&old, &bytes[..bytes.len() / 2]).expect("write");
        assert!(matches!(
            read(dir.path(), 5),
            Err(StoreError::Corrupt { .. })
        ));
    }

    fn crc32c_of(bytes: &[u8]) -> u32 {
        conelab_base::integrity::crc32c(bytes)
    }
}
