//! A sweep on this machine (`--local N`): N runs at a time, each `conelab train --headless` in a
//! process of its own (the CPU threads divided among them), its output in `logs/NAME.log`. A run
//! that completed before is skipped; one with a checkpoint is resumed (`--resume`, exactly); one
//! started without a checkpoint yet starts again. Ctrl-C reaches the runs too: each stops after
//! its step with a checkpoint (exit 75), and running the sweep again resumes them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use conelab_base::exit::ExitStatus;

use super::SweepError;
use super::record::{RecordedRun, SweepRecord};
use conelab_core::run_dir::RunDir;
use conelab_core::run_dir::live;

/// How a run of the sweep ended this time.
#[derive(Debug, Clone, PartialEq)]
pub enum SweepRunOutcome {
    /// It had completed before: not run again.
    Skipped,
    Completed,
    /// Stopped after saving (a signal; exit 75): running the sweep again resumes it.
    Stopped,
    /// Its exit status, and where its output is.
    Failed {
        code: Option<i32>,
        log: PathBuf,
    },
}

/// The logs folder of a sweep.
pub const LOGS: &str = "logs";

fn completed(dir: &Path) -> bool {
    matches!(live::read_final(dir), Ok(Some(f)) if f.status == "completed")
}

/// What array task `run` does (`conelab sweep task`): nothing when it completed before,
/// otherwise the `conelab train` arguments that start or resume it.
pub fn task_args(run: &RecordedRun) -> Option<Vec<String>> {
    (!completed(&run.dir)).then(|| train_args(run))
}

/// The `conelab train` arguments that start or resume `run`.
pub fn train_args(run: &RecordedRun) -> Vec<String> {
    let has_checkpoint = RunDir::open(&run.dir)
        .ok()
        .and_then(|d| d.checkpoints().ok())
        .is_some_and(|c| !c.is_empty());
    let dir = run.dir.display().to_string();
    if has_checkpoint {
        vec!["train".into(), "--resume".into(), dir, "--headless".into()]
    } else {
        let mut args = vec!["train".to_string()];
        args.extend(run.args.iter().cloned());
        args.extend([
            "--run-dir".into(),
            dir,
            "--name".into(),
            run.label.clone(),
            "--headless".into(),
        ]);
        args
    }
}

/// Runs the sweep's runs `parallel` at a time with the binary `exe`; `say` gets a line as each
/// starts and ends. Returns every run's outcome, in the sweep's order.
pub fn run(
    record: &SweepRecord,
    out: &Path,
    exe: &Path,
    parallel: usize,
    mut say: impl FnMut(String),
) -> Result<Vec<(String, SweepRunOutcome)>, SweepError> {
    let parallel = parallel.max(1);
    let logs = out.join(LOGS);
    std::fs::create_dir_all(&logs).map_err(|source| SweepError::Io {
        path: logs.clone(),
        source,
    })?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores / parallel).max(1);
    let mut outcomes: Vec<Option<SweepRunOutcome>> = vec![None; record.runs.len()];
    let mut queue: std::collections::VecDeque<usize> = (0..record.runs.len()).collect();
    let mut running: Vec<(usize, Child)> = Vec::new();
    loop {
        while running.len() < parallel {
            let Some(i) = queue.pop_front() else { break };
            let run = &record.runs[i];
            if completed(&run.dir) {
                say(format!("{}: completed before, kept", run.name));
                outcomes[i] = Some(SweepRunOutcome::Skipped);
                continue;
            }
            let log = logs.join(format!("{}.log", run.name));
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .map_err(|source| SweepError::Io {
                    path: log.clone(),
                    source,
                })?;
            let err = file.try_clone().map_err(|source| SweepError::Io {
                path: log.clone(),
                source,
            })?;
            let args = train_args(run);
            let resumed = args.iter().any(|a| a == "--resume");
            let child = Command::new(exe)
                .args(&args)
                .stdin(Stdio::null())
                .stdout(file)
                .stderr(err)
                .env("RAYON_NUM_THREADS", threads.to_string())
                .spawn()
                .map_err(|source| SweepError::Io {
                    path: exe.to_path_buf(),
                    source,
                })?;
            say(format!(
                "{}: {} (pid {}, {threads} thread{})",
                run.name,
                if resumed { "resumed" } else { "started" },
                child.id(),
                if threads == 1 { "" } else { "s" }
            ));
            running.push((i, child));
        }
        if running.is_empty() && queue.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        let mut k = 0;
        while k < running.len() {
            let (i, child) = &mut running[k];
            let status = child.try_wait().map_err(|source| SweepError::Io {
                path: exe.to_path_buf(),
                source,
            })?;
            let Some(status) = status else {
                k += 1;
                continue;
            };
            let run = &record.runs[*i];
            let exit = status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .map(ExitStatus::from_code);
            let outcome = match exit {
                Some(ExitStatus::Success) if completed(&run.dir) => SweepRunOutcome::Completed,
                Some(ExitStatus::Stopped) => SweepRunOutcome::Stopped,
                _ => SweepRunOutcome::Failed {
                    code: status.code(),
                    log: logs.join(format!("{}.log", run.name)),
                },
            };
            say(format!(
                "{}: {}",
                run.name,
                match &outcome {
                    SweepRunOutcome::Completed => "completed".to_string(),
                    SweepRunOutcome::Stopped =>
                        "stopped after saving (run the sweep again to resume)".into(),
                    SweepRunOutcome::Failed { code, log } => format!(
                        "failed (exit {}; see {})",
                        code.map_or("by a signal".into(), |c| c.to_string()),
                        log.display()
                    ),
                    SweepRunOutcome::Skipped => "kept".into(),
                }
            ));
            outcomes[*i] = Some(outcome);
            running.swap_remove(k);
        }
    }
    Ok(record
        .runs
        .iter()
        .zip(outcomes)
        .map(|(r, o)| (r.name.clone(), o.unwrap_or(SweepRunOutcome::Skipped)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::Sweep;

    #[test]
    fn a_new_run_gets_its_folder_label_and_headless() {
        let tmp = tempfile::tempdir().expect("tmp");
        let sweep = Sweep::parse("[base]\nsteps = 4\n[grid]\nseed = [1]\n", "s").expect("ok");
        let record = SweepRecord::new(&sweep, tmp.path());
        let args = train_args(&record.runs[0]);
        let dir = tmp.path().join("runs/seed-1").display().to_string();
        assert_eq!(
            args,
            [
                "train",
                "--steps",
                "4",
                "--seed",
                "1",
                "--run-dir",
                &dir,
                "--name",
                "s",
                "--headless"
            ]
        );
    }
}
