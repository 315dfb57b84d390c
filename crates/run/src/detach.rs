//! Starting a run in the background: the same `conelab train` command line, run as a process of
//! its own session (no controlling terminal, SIGHUP ignored), stdout and stderr going to
//! `output.log` in the run directory once it is ready.
//!
//! The handshake is one line on the child's stdout, written when the run can be attached to:
//! `conelab-ready {"dir": …, "socket": …, "pid": …}`. Until then the child's stdout and stderr
//! are pipes to the starter, so a bad option or a missing corpus is reported by the starter as
//! the child said it, with the child's exit status.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use conelab_base::exit::ExitStatus;
use serde::{Deserialize, Serialize};

use conelab_catalog::RunError;
use conelab_core::run_dir::live::OUTPUT_LOG;

use crate::serve::Ready;

/// The first word of the ready line.
pub const READY_PREFIX: &str = "conelab-ready ";
/// The hidden flag that makes `conelab train` the background run.
pub const CHILD_FLAG: &str = "--internal-detached";

#[derive(Debug, Serialize, Deserialize)]
struct ReadyLine {
    dir: PathBuf,
    socket: PathBuf,
    pid: u32,
}

/// Starts `conelab ARGS… --internal-detached` in the background and waits until it is ready (or
/// has failed). `args` are the `train` command line without the program name and `--detach`.
pub fn spawn(args: Vec<OsString>) -> Result<Ready, RunError> {
    let exe = std::env::current_exe().map_err(RunError::internal("finding the conelab binary"))?;
    let mut command = Command::new(exe);
    command
        .args(&args)
        .arg(CHILD_FLAG)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec: setsid and signal.
    unsafe {
        command.pre_exec(|| {
            conelab_base::platform::new_session()?;
            conelab_base::platform::ignore_hang_up();
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(RunError::internal("starting the background run"))?;
    let stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    // Drained on the side, so a chatty child never blocks on a full pipe.
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(e) = stderr.as_mut() {
            let _ = e.read_to_string(&mut text);
        }
        text
    });
    if let Some(out) = stdout {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else {
                break;
            };
            if let Some(json) = line.strip_prefix(READY_PREFIX) {
                let r: ReadyLine = serde_json::from_str(json)
                    .map_err(RunError::internal("the background run's ready line"))?;
                return Ok(Ready {
                    dir: r.dir,
                    socket: r.socket,
                    pid: r.pid,
                });
            }
        }
    }
    // No ready line: the child ended before the run started.
    let status = child
        .wait()
        .map_err(RunError::internal("waiting for the background run"))?;
    let text = err_reader.join().unwrap_or_default();
    let message = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("the background run ended before it started")
        .to_string();
    let message = message
        .strip_prefix("conelab: error: ")
        .unwrap_or(&message)
        .to_string();
    Err(RunError::Child {
        status: status.code().map_or(ExitStatus::Failed, |c| {
            ExitStatus::from_code(c.clamp(1, 255) as u8)
        }),
        message,
    })
}

/// In the background run, once it is ready: sends stdout and stderr to `output.log` in the run
/// directory (appended), then tells the starter where it is on the pipe it was reading. In that
/// order: the starter exits as soon as it has the line, and anything the run's threads say from
/// then on (a viewer that attached at once) must land in the log, not in a pipe nobody reads.
pub fn announce_ready(ready: &Ready) -> std::io::Result<()> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ready.dir.join(OUTPUT_LOG))?;
    let line = serde_json::to_string(&ReadyLine {
        dir: ready.dir.clone(),
        socket: ready.socket.clone(),
        pid: ready.pid,
    })
    .map_err(std::io::Error::other)?;
    std::io::stdout().flush()?;
    let _ = std::io::stderr().flush();
    let mut starter = conelab_base::platform::redirect_stdout_and_stderr(&log)?;
    writeln!(starter, "{READY_PREFIX}{line}")?;
    starter.flush()
}

/// The `train` arguments for the background run: this process's own, without `--detach`.
pub fn child_args() -> Vec<OsString> {
    std::env::args_os()
        .skip(1)
        .filter(|a| a != "--detach")
        .collect()
}
