//! `sweep.json` (what a sweep is: its file and every run with its folder and arguments), written
//! atomically before anything runs, and the runs' state read back from their own folders.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{PlannedRun, Sweep, SweepError, run_dir};
use conelab_catalog::list::{RunRow, plain_table, row, step_cell};

/// The record's file in a sweep folder.
pub const SWEEP_JSON: &str = "sweep.json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRun {
    pub name: String,
    pub label: String,
    pub dir: PathBuf,
    pub args: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRecord {
    /// The sweep file as it was run.
    pub file: String,
    pub runs: Vec<RecordedRun>,
    /// The SLURM job array it was submitted as, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmJob>,
}

impl SweepRecord {
    pub fn new(sweep: &Sweep, out: &Path) -> Self {
        Self {
            file: sweep.text.clone(),
            runs: sweep
                .runs
                .iter()
                .map(|r: &PlannedRun| RecordedRun {
                    name: r.name.clone(),
                    label: r.label.clone(),
                    dir: run_dir(out, &r.name),
                    args: r.args.clone(),
                })
                .collect(),
            slurm: None,
        }
    }

    /// Writes `out/sweep.json` (temp file, fsync, rename).
    pub fn write(&self, out: &Path) -> Result<(), SweepError> {
        let path = out.join(SWEEP_JSON);
        let io = |source| SweepError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(out).map_err(io)?;
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| SweepError::Invalid(format!("sweep.json: {e}")))?;
        conelab_base::atomic::write_file_as("sweep", &path, text.as_bytes()).map_err(io)
    }

    /// Reads `out/sweep.json`.
    pub fn read(out: &Path) -> Result<Self, SweepError> {
        let path = out.join(SWEEP_JSON);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                SweepError::Invalid(format!(
                    "{}: not a sweep folder (no {SWEEP_JSON})",
                    out.display()
                ))
            } else {
                SweepError::Io {
                    path: path.clone(),
                    source: e,
                }
            }
        })?;
        serde_json::from_str(&text)
            .map_err(|e| SweepError::Invalid(format!("{}: corrupt: {e}", path.display())))
    }
}

/// Every run's row as `conelab runs` reads it (status from the folder itself); `pending` for a
/// run not started yet.
pub fn status(record: &SweepRecord) -> Vec<(RecordedRun, Option<RunRow>)> {
    record
        .runs
        .iter()
        .map(|r| {
            let row = r.dir.is_dir().then(|| row(&r.dir));
            (r.clone(), row)
        })
        .collect()
}

/// A SLURM sweep's submitted job, kept in `sweep.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmJob {
    pub job_id: String,
    pub script: std::path::PathBuf,
}

/// What SLURM says of each array task, by index: its `squeue` state while queued or running,
/// and its last accounting record (`sacct`: state and exit code) where an accounting database
/// answers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskStates {
    pub queue: Vec<(usize, String)>,
    /// None when `sacct` does not answer (no accounting database, or not a SLURM host).
    pub accounting: Option<Vec<(usize, String)>>,
}

/// The status table of `conelab sweep status`; with `slurm` (a SLURM sweep: what squeue and
/// sacct say of each array task) a queue column, and an accounting column where sacct answered.
pub fn render_status(rows: &[(RecordedRun, Option<RunRow>)], slurm: Option<&TaskStates>) -> String {
    let queue = slurm.map(|s| s.queue.as_slice());
    let accounting = slurm.and_then(|s| s.accounting.as_deref());
    let mut header = vec!["run", "status", "step", "best ppl"];
    if queue.is_some() {
        header.push("queue");
    }
    if accounting.is_some() {
        header.push("sacct");
    }
    header.push("folder");
    let lookup = |states: &[(usize, String)], index: usize| {
        states
            .iter()
            .find(|(i, _)| *i == index)
            .map_or("–".to_string(), |(_, state)| state.clone())
    };
    let cells = rows.iter().enumerate().map(|(index, (run, row))| {
        let (status, step, ppl) = match row {
            None => ("pending".to_string(), "–".to_string(), "–".to_string()),
            Some(r) => (
                r.status.clone(),
                step_cell(r),
                r.best_valid_ppl.map_or("–".into(), |p| format!("{p:.2}")),
            ),
        };
        let mut cells = vec![run.name.clone(), status, step, ppl];
        if let Some(q) = queue {
            cells.push(lookup(q, index));
        }
        if let Some(a) = accounting {
            cells.push(lookup(a, index));
        }
        cells.push(run.dir.display().to_string());
        cells
    });
    let mut out = plain_table(header, cells);
    let done = rows
        .iter()
        .filter(|(_, r)| r.as_ref().is_some_and(|r| r.status == "completed"))
        .count();
    out.push_str(&format!("{done} of {} runs completed\n", rows.len()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_round_trips_and_a_failed_write_keeps_the_old_one() {
        let tmp = tempfile::tempdir().expect("tmp");
        let sweep = Sweep::parse("[grid]\nseed = [1, 2]\n", "s").expect("sweep");
        let record = SweepRecord::new(&sweep, tmp.path());
        record.write(tmp.path()).expect("write");
        assert_eq!(SweepRecord::read(tmp.path()).expect("read"), record);
        assert_eq!(record.runs[1].dir, tmp.path().join("runs/seed-2"));
        let other = SweepRecord::new(
            &Sweep::parse("[grid]\nseed = [7]\n", "s").expect("sweep"),
            tmp.path(),
        );
        let failed =
            conelab_base::fault::with_plan("sweep.write:1:ENOSPC", || other.write(tmp.path()));
        assert!(failed.is_err());
        assert_eq!(SweepRecord::read(tmp.path()).expect("read"), record);
        let rows = status(&record);
        assert!(rows.iter().all(|(_, r)| r.is_none()));
        let text = render_status(&rows, None);
        assert!(text.contains("seed-1  pending") && text.contains("0 of 2 runs completed"));
        let mut slurm = TaskStates {
            queue: vec![(1, "PENDING".to_string())],
            accounting: None,
        };
        let queued = render_status(&rows, Some(&slurm));
        let line = queued
            .lines()
            .find(|l| l.starts_with("seed-2"))
            .unwrap_or_default();
        assert!(line.contains("PENDING"), "{queued}");
        assert!(
            !queued.contains("sacct"),
            "no accounting column without sacct"
        );
        slurm.accounting = Some(vec![(0, "FAILED 1:0".to_string())]);
        let accounted = render_status(&rows, Some(&slurm));
        assert!(
            accounted
                .lines()
                .next()
                .is_some_and(|h| h.contains("sacct"))
        );
        let line = accounted
            .lines()
            .find(|l| l.starts_with("seed-1"))
            .unwrap_or_default();
        assert!(line.contains("FAILED 1:0"), "{accounted}");
        assert!(matches!(
            SweepRecord::read(&tmp.path().join("nowhere")),
            Err(SweepError::Invalid(e)) if e.contains("not a sweep folder")
        ));
    }
}
