//! `conelab sweep run FILE`: the file read and checked, the record written, the runs started —
//! on this machine, `--local N` at a time, or submitted to SLURM as a job array — and the sweep's
//! exit status: 4 when a run failed, 75 when one was stopped (running the sweep again resumes
//! it), else 0.

use std::path::{Path, PathBuf};

use conelab_base::exit::ExitStatus;

use super::local::{self, SweepRunOutcome};
use super::record::SweepRecord;
use super::slurm::{self, SlurmOptions};
use super::{Sweep, SweepError};

/// What `conelab sweep run` was asked.
#[derive(Debug, Clone)]
pub struct SweepRun {
    pub file: PathBuf,
    /// The sweep's folder [default: sweeps/STEM].
    pub out: Option<PathBuf>,
    /// Runs at a time on this machine.
    pub local: usize,
    /// Say what would run, run nothing.
    pub dry_run: bool,
    /// Submit to SLURM with these options instead of running here.
    pub slurm: Option<SlurmOptions>,
}

/// What the sweep did: the text for stdout, and the exit status.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepDone {
    pub text: String,
    pub status: ExitStatus,
}

impl SweepDone {
    fn success(text: String) -> Self {
        Self {
            text,
            status: ExitStatus::Success,
        }
    }
}

/// Runs (or submits, or plans with `dry_run`) the sweep of `request.file`; `say` gets a line as
/// each local run starts and ends.
pub fn start(request: &SweepRun, say: impl FnMut(String)) -> Result<SweepDone, SweepError> {
    let SweepRun {
        file,
        out,
        local,
        dry_run,
        slurm,
    } = request;
    let (local, dry_run) = (*local, *dry_run);
    if local == 0 {
        return Err(SweepError::Invalid(
            "--local 0: at least one run at a time".into(),
        ));
    }
    let text = std::fs::read_to_string(file).map_err(|source| SweepError::Io {
        path: file.clone(),
        source,
    })?;
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "sweep".into());
    // Relative paths in the file are the file's: each run starts in a folder of its own.
    let folder = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let folder = std::fs::canonicalize(folder).unwrap_or_else(|_| folder.to_path_buf());
    let sweep = Sweep::parse_in(&text, &stem, &folder)?;
    let out = out
        .clone()
        .unwrap_or_else(|| PathBuf::from("sweeps").join(&stem));
    let mut record = SweepRecord::new(&sweep, &out);
    let exe = std::env::current_exe().map_err(SweepError::Exe)?;
    if let Some(options) = slurm {
        return submit(&mut record, &out, &exe, &stem, options, dry_run);
    }
    if dry_run {
        let mut text = format!(
            "{} runs into {}, {local} at a time:\n",
            record.runs.len(),
            out.display()
        );
        for r in &record.runs {
            let args = local::train_args(r);
            text.push_str(&format!("  {}: conelab {}\n", r.name, args.join(" ")));
        }
        return Ok(SweepDone::success(text));
    }
    record.write(&out)?;
    let outcomes = local::run(&record, &out, &exe, local, say)?;
    let failed = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, SweepRunOutcome::Failed { .. }))
        .count();
    let stopped = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, SweepRunOutcome::Stopped))
        .count();
    Ok(SweepDone {
        text: format!(
            "{} runs: {} completed, {stopped} stopped, {failed} failed — `conelab sweep status {}`, `conelab export {}/runs/* --table groups --aggregate seeds`\n",
            outcomes.len(),
            outcomes.len() - failed - stopped,
            out.display(),
            out.display()
        ),
        status: status_of(failed, stopped),
    })
}

/// A sweep's exit status from its runs': a failure outweighs a stop.
pub fn status_of(failed: usize, stopped: usize) -> ExitStatus {
    if failed > 0 {
        ExitStatus::Failed
    } else if stopped > 0 {
        ExitStatus::Stopped
    } else {
        ExitStatus::Success
    }
}

/// The job array: its batch script (printed with `dry_run`), or submitted and recorded.
fn submit(
    record: &mut SweepRecord,
    out: &Path,
    exe: &Path,
    stem: &str,
    options: &SlurmOptions,
    dry_run: bool,
) -> Result<SweepDone, SweepError> {
    let script = slurm::script(record, out, exe, stem, options);
    if dry_run {
        return Ok(SweepDone::success(format!(
            "{} runs as a job array; the batch script:\n{script}",
            record.runs.len()
        )));
    }
    record.write(out)?;
    let job = slurm::submit(&script, out)?;
    let id = job.job_id.clone();
    record.slurm = Some(job);
    record.write(out)?;
    Ok(SweepDone::success(format!(
        "submitted job array {id}: {} tasks, one per run — `conelab sweep status {}`\n",
        record.runs.len(),
        out.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_outweighs_a_stop_and_a_stop_outweighs_success() {
        assert_eq!(status_of(0, 0), ExitStatus::Success);
        assert_eq!(status_of(0, 2), ExitStatus::Stopped);
        assert_eq!(status_of(1, 2), ExitStatus::Failed);
        assert_eq!(status_of(1, 0).code(), 4);
        assert_eq!(status_of(0, 1).code(), 75);
    }

    #[test]
    fn no_runs_at_a_time_or_a_missing_file_is_refused_before_anything_is_written() {
        let tmp = tempfile::tempdir().expect("tmp");
        let file = tmp.path().join("grid.toml");
        let request = |local| SweepRun {
            file: file.clone(),
            out: Some(tmp.path().join("out")),
            local,
            dry_run: false,
            slurm: None,
        };
        let e = start(&request(0), |_| {}).expect_err("refused");
        assert!(e.to_string().contains("--local 0"), "{e}");
        let e = start(&request(1), |_| {}).expect_err("refused");
        assert!(
            matches!(&e, SweepError::Io { path, .. } if *path == file),
            "{e}"
        );
        assert!(!tmp.path().join("out").exists());
    }

    #[test]
    fn a_dry_run_lists_every_run_and_writes_nothing() {
        let tmp = tempfile::tempdir().expect("tmp");
        let file = tmp.path().join("grid.toml");
        std::fs::write(
            &file,
            "[base]\ncorpus = \"synthetic\"\nmodel = \"tiny\"\n[grid]\nseed = [1, 2, 3]\n",
        )
        .expect("write");
        let done = start(
            &SweepRun {
                file,
                out: Some(tmp.path().join("out")),
                local: 2,
                dry_run: true,
                slurm: None,
            },
            |_| {},
        )
        .expect("planned");
        assert_eq!(done.status, ExitStatus::Success);
        assert!(done.text.starts_with("3 runs into "), "{}", done.text);
        assert_eq!(
            done.text
                .lines()
                .filter(|l| l.contains(": conelab train"))
                .count(),
            3
        );
        assert!(!tmp.path().join("out").exists());
    }
}
