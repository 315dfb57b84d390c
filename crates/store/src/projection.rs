//! The 2-D projections of every analysed snapshot, one Parquet file each under
//! `store/projections/step-NNNNNNNNN.parquet` (columns `ux`, `uy` uncentred and `cx`, `cy`
//! centred, f32, row order; the explained shares as constant columns `ue0`, `ue1`, `ce0`, `ce1`).
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

fn file_name(step: u64) -> String {
    format!("step-{step:09}.parquet")
}

fn step_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("step-")?.strip_suffix(".parquet")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Steps with a projection file, ascending.
pub fn list(store_dir: &Path) -> Result<Vec<u64>, StoreError> {
    let dir = store_dir.join(DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(&dir)(e)),
    };
    let mut steps: Vec<u64> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(step_of))
        .collect();
    steps.sort_unstable();
    Ok(steps)
}

fn path(store_dir: &Path, step: u64) -> PathBuf {
    store_dir.join(DIR).join(file_name(step))
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
    let mut df = DataFrame::new(height, cols)?;
    let mut bytes = Vec::new();
    ParquetWriter::new(Cursor::new(&mut bytes))
        .with_compression(ParquetCompression::Zstd(None))
        .finish(&mut df)?;
    let dir = store_dir.join(DIR);
    std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
    let target = path(store_dir, frame.step);
    conelab_base::atomic::write_file_as("projection", &target, &bytes)
        .map_err(io_error(&target))?;
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
        let p = path(store_dir, *step);
        std::fs::remove_file(&p).map_err(io_error(&p))?;
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

/// The projections of the snapshot at `step`, if a file holds them.
pub fn read(store_dir: &Path, step: u64) -> Result<Option<ProjectionFrame>, StoreError> {
    let p = path(store_dir, step);
    let bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(&p)(e)),
    };
    let df = ParquetReader::new(Cursor::new(bytes))
        .finish()
        .map_err(|e| StoreError::Corrupt {
            path: p.clone(),
            reason: e.to_string(),
        })?;
    Ok(Some(ProjectionFrame {
        step,
        uncentred: projection(&df, 'u', ProjectionMode::Uncentred),
        centred: projection(&df, 'c', ProjectionMode::Centred),
    }))
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
        assert_eq!(read(dir.path(), 51).expect("read"), None);
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
}
