//! `train --notify CMD`: a command run once when the run ends — completed, stopped, diverged or
//! failed — with what happened in its environment, so that a detached run can say so on the
//! desktop (`notify-send`), by mail or in a chat (a webhook through `curl`).
//!
//! The command runs under `sh -c` with no stdin, its output going where the run's goes (the
//! terminal, or `output.log`), for at most [`NOTIFY_TIMEOUT`]; what it does never changes the run's
//! exit status, and a command that cannot start or fails is one warning.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A notifier still running after this is killed: the run's process must end.
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(30);

/// What a notifier is told, as `CONELAB_*` environment variables.
#[derive(Debug, Clone, PartialEq)]
pub struct Ending {
    /// `CONELAB_RUN_NAME`: the run's name.
    pub name: String,
    /// `CONELAB_RUN_DIR`.
    pub dir: String,
    /// `CONELAB_STATUS`: completed, stopped, diverged or failed.
    pub status: String,
    /// `CONELAB_STEP`, `CONELAB_TOTAL_STEPS`.
    pub step: u64,
    pub total_steps: u64,
    /// `CONELAB_EXIT_CODE`: the status the run's process exits with.
    pub exit_code: i32,
    /// `CONELAB_MESSAGE`: why, for a divergence or a failure.
    pub message: String,
    /// `CONELAB_BEST_VALID_PPL` (empty without an evaluation).
    pub best_valid_ppl: Option<f64>,
}

impl Ending {
    /// `CONELAB_SUMMARY`: one line for a notification's body.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} {} at step {}/{}",
            self.name, self.status, self.step, self.total_steps
        );
        if let Some(p) = self.best_valid_ppl {
            s.push_str(&format!(", best valid PPL {p:.2}"));
        }
        if !self.message.is_empty() {
            s.push_str(&format!(": {}", self.message));
        }
        s
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CONELAB_RUN_NAME", self.name.clone()),
            ("CONELAB_RUN_DIR", self.dir.clone()),
            ("CONELAB_STATUS", self.status.clone()),
            ("CONELAB_STEP", self.step.to_string()),
            ("CONELAB_TOTAL_STEPS", self.total_steps.to_string()),
            ("CONELAB_EXIT_CODE", self.exit_code.to_string()),
            ("CONELAB_MESSAGE", self.message.clone()),
            (
                "CONELAB_BEST_VALID_PPL",
                self.best_valid_ppl
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
            ),
            ("CONELAB_SUMMARY", self.summary()),
        ]
    }
}

/// Runs `command` for `ending` in `dir`; `Err` is the warning to print (it could not start, it
/// failed, or it ran past `timeout` and was killed).
pub fn notify(command: &str, ending: &Ending, dir: &Path, timeout: Duration) -> Result<(), String> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .envs(ending.env())
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("--notify {command:?} could not start: {e}"))?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("--notify {command:?} ended with {status}")),
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "--notify {command:?} was still running after {} s and was stopped",
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("--notify {command:?}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ending() -> Ending {
        Ending {
            name: "mle-s1".into(),
            dir: "/runs/mle-s1".into(),
            status: "diverged".into(),
            step: 41,
            total_steps: 600,
            exit_code: 3,
            message: "loss NaN at step 42".into(),
            best_valid_ppl: Some(123.456),
        }
    }

    #[test]
    fn the_command_sees_the_ending_in_its_environment() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("said");
        let cmd = format!(
            "printf '%s|%s|%s|%s|%s' \"$CONELAB_RUN_NAME\" \"$CONELAB_STATUS\" \"$CONELAB_EXIT_CODE\" \"$CONELAB_BEST_VALID_PPL\" \"$CONELAB_SUMMARY\" > {}",
            out.display()
        );
        notify(&cmd, &ending(), tmp.path(), NOTIFY_TIMEOUT).expect("ran");
        assert_eq!(
            std::fs::read_to_string(&out).expect("written"),
            "mle-s1|diverged|3|123.456|mle-s1 diverged at step 41/600, best valid PPL 123.46: loss NaN at step 42"
        );
    }

    #[test]
    fn a_failing_or_hanging_command_is_one_warning() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let e = notify("exit 7", &ending(), tmp.path(), NOTIFY_TIMEOUT).expect_err("fails");
        assert!(e.contains("exit status: 7"), "{e}");
        let start = Instant::now();
        let e = notify(
            "sleep 30",
            &ending(),
            tmp.path(),
            Duration::from_millis(200),
        )
        .expect_err("killed");
        assert!(e.contains("still running"), "{e}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "killed, not waited for"
        );
    }
}
