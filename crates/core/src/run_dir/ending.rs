//! The one stop summary: what every front end says when a run ends — the headless run, the
//! workbench that started it, any viewer attached to it — built from the run's final record,
//! so the lines (status, step, newest checkpoint, the command that goes on) and the exit status
//! are the same whichever of them saw the end (issue #58 item 3).

use std::path::Path;

use super::live::{FinalRecord, Liveness, liveness};
use super::newest_checkpoint_step;

/// The command that continues the run in `dir`, quoted for a message, with `extra` flags.
/// Absolute: it is used from wherever the user is next (another shell, after SSH).
pub fn resume_command(dir: &Path, extra: &str) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    format!("`conelab train --resume {}{extra}`", dir.display())
}

/// How the run in `dir` ended, as `record` says, and how to go on: one line.
pub fn ending_summary(dir: &Path, record: &FinalRecord) -> String {
    let newest = newest_checkpoint_step(dir);
    let step = record.step;
    let resume = resume_command(dir, "");
    let line = match record.status.as_str() {
        "completed" => match newest {
            Some(s) => format!(
                "the run completed at step {step}; its newest checkpoint is step {s}: {} trains it further",
                resume_command(dir, " --steps MORE")
            ),
            None => format!("the run completed at step {step} (it kept no checkpoint)"),
        },
        "stopped" if record.by_signal => match newest {
            Some(s) if s == step => format!(
                "the run was stopped by a signal at step {step} after saving a checkpoint: {resume} continues it"
            ),
            Some(s) => format!(
                "the run was stopped by a signal at step {step}: {resume} continues from its newest checkpoint, step {s}"
            ),
            None => format!(
                "the run was stopped by a signal at step {step} without a checkpoint: {resume} starts it again"
            ),
        },
        "stopped" => match newest {
            Some(s) if s == step => {
                format!("the run stopped at step {step} with a checkpoint: {resume} continues it")
            }
            Some(s) => format!(
                "the run stopped at step {step} without saving: {resume} continues from its newest checkpoint, step {s}"
            ),
            None => format!(
                "the run stopped at step {step} without a checkpoint: {resume} starts it again"
            ),
        },
        "diverged" => {
            let why = if record.message.is_empty() {
                String::new()
            } else {
                format!(" ({})", record.message)
            };
            match newest {
                Some(s) => format!(
                    "the run diverged after step {step}{why}; its newest checkpoint, step {s}, is kept: {} continues from it",
                    resume_command(dir, " --lr LOWER")
                ),
                None => format!(
                    "the run diverged after step {step}{why} before its first checkpoint: nothing to resume; start again with a lower --lr"
                ),
            }
        }
        other => {
            let why = if record.message.is_empty() {
                String::new()
            } else {
                format!(" ({})", record.message)
            };
            match newest {
                Some(s) => format!(
                    "the run {other}{why}; {resume} continues it from its newest checkpoint, step {s}"
                ),
                None => format!(
                    "the run {other}{why} before its first checkpoint: {resume} starts it again"
                ),
            }
        }
    };
    format!("conelab: {line}")
}

/// For a run whose process is gone without a final record (kill -9, out of memory): what to
/// say, and how to go on; none for a live run or one that ended with a word.
pub fn crashed_summary(dir: &Path) -> Option<String> {
    if !matches!(liveness(dir), Ok(Liveness::Crashed)) {
        return None;
    }
    let resume = resume_command(dir, "");
    Some(match newest_checkpoint_step(dir) {
        Some(step) => format!(
            "conelab: the run's process ended without a word (killed, or out of memory): {resume} continues it from its newest checkpoint, step {step}"
        ),
        None => format!(
            "conelab: the run's process ended without a word (killed, or out of memory) before its first checkpoint: {resume} starts it again"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::live::{conclude, hold};

    fn record(status: &str, step: u64, message: &str, by_signal: bool) -> FinalRecord {
        FinalRecord {
            status: status.into(),
            step,
            total_steps: 100,
            exit_code: 0,
            message: message.into(),
            by_signal,
            finished_unix: 0.0,
            host: "h".into(),
        }
    }

    /// Every ending names its status, its step, the newest checkpoint and an absolute command.
    #[test]
    fn every_ending_says_status_step_checkpoint_and_how_to_go_on() {
        let dir = tempfile::tempdir().expect("tmp");
        let abs = std::fs::canonicalize(dir.path()).expect("abs");
        let resume = format!("`conelab train --resume {}", abs.display());
        // No checkpoint yet.
        let none = ending_summary(dir.path(), &record("stopped", 7, "", false));
        assert!(none.contains("step 7 without a checkpoint"), "{none}");
        assert!(
            none.contains("starts it again") && none.contains(&resume),
            "{none}"
        );
        let diverged = ending_summary(
            dir.path(),
            &record("diverged", 3, "loss NaN at step 4", false),
        );
        assert!(
            diverged.contains("before its first checkpoint: nothing to resume"),
            "{diverged}"
        );
        assert!(diverged.contains("loss NaN at step 4"), "{diverged}");
        std::fs::create_dir_all(dir.path().join("step-000010")).expect("mkdir");
        for (r, needles) in [
            (
                record("completed", 10, "", false),
                vec![
                    "completed at step 10",
                    "newest checkpoint is step 10",
                    "--steps MORE",
                ],
            ),
            (
                record("stopped", 10, "", false),
                vec!["stopped at step 10 with a checkpoint", "continues it"],
            ),
            (
                record("stopped", 12, "", false),
                vec!["without saving", "newest checkpoint, step 10"],
            ),
            (
                record("stopped", 10, "", true),
                vec!["stopped by a signal at step 10 after saving"],
            ),
            (
                record("diverged", 11, "loss inf at step 12", false),
                vec![
                    "diverged after step 11",
                    "loss inf at step 12",
                    "step 10, is kept",
                    "--lr LOWER",
                ],
            ),
            (
                record("failed", 10, "CUDA out of memory", false),
                vec!["failed (CUDA out of memory)", "newest checkpoint, step 10"],
            ),
        ] {
            let line = ending_summary(dir.path(), &r);
            assert!(line.starts_with("conelab: the run "), "{line}");
            assert!(line.contains(&resume), "{line}");
            for n in needles {
                assert!(line.contains(n), "{n:?} in {line}");
            }
        }
    }

    /// A run gone without a final record is said to be so; a live one and an ended one are not.
    #[test]
    fn a_run_gone_without_a_word_says_so_and_how_to_go_on() {
        let dir = tempfile::tempdir().expect("tmp");
        let lock = hold(dir.path()).expect("hold");
        assert_eq!(crashed_summary(dir.path()), None, "live");
        drop(lock);
        let none = crashed_summary(dir.path()).expect("gone");
        assert!(none.contains("ended without a word"), "{none}");
        assert!(none.contains("before its first checkpoint"), "{none}");
        std::fs::create_dir_all(dir.path().join("step-000050")).expect("mkdir");
        let at = crashed_summary(dir.path()).expect("gone");
        assert!(at.contains("newest checkpoint, step 50"), "{at}");
        let abs = std::fs::canonicalize(dir.path()).expect("abs");
        assert!(
            at.contains(&format!("`conelab train --resume {}`", abs.display())),
            "{at}"
        );
        conclude(dir.path(), &record("completed", 50, "", false)).expect("final");
        assert_eq!(crashed_summary(dir.path()), None, "ended");
    }
}
