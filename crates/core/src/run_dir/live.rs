//! Whether a run is alive, and how it ended.
//!
//! A run holds an OS lock on `run.lock` in its folder for as long as its process lives (the
//! kernel releases it however the process ends, `kill -9` included). While it lives, `live.json`
//! says where it is: pid, host, control socket. When it ends it writes `final.json`: status,
//! step, exit code. A folder whose lock is free and which has no final record belongs to a run
//! that died without saying so: crashed. The host matters on a shared filesystem: a pid means
//! nothing on another machine, and a socket can only be reached on the host that serves it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use conelab_base::integrity::IntegrityError;
use conelab_base::lockfile::{LockError, LockFile, holder_text, host_name};

pub const RUN_LOCK: &str = "run.lock";
pub const LIVE_FILE: &str = "live.json";
pub const FINAL_FILE: &str = "final.json";
/// A detached run's stdout and stderr.
pub const OUTPUT_LOG: &str = "output.log";

/// Where a live run is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveRecord {
    pub pid: u32,
    pub host: String,
    pub socket: PathBuf,
    pub protocol: u32,
    pub started_unix: f64,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalRecord {
    /// completed, stopped, diverged or failed.
    pub status: String,
    pub step: u64,
    pub total_steps: u64,
    pub exit_code: i32,
    /// Why, for a failure or a divergence.
    #[serde(default)]
    pub message: String,
    /// Stopped by SIGINT/SIGTERM (exit 75: resumable).
    #[serde(default)]
    pub by_signal: bool,
    pub finished_unix: f64,
    pub host: String,
}

/// What a run folder says about its process.
#[derive(Debug, Clone, PartialEq)]
pub enum Liveness {
    /// The lock is held. `record` is `None` for a moment while the run starts.
    Live {
        holder: String,
        record: Option<LiveRecord>,
    },
    Ended(FinalRecord),
    /// No live process, and its final record is damaged (why): the run is over, how it ended
    /// is not known — its files and store are read all the same.
    EndedDamaged(String),
    /// No live process, no final record.
    Crashed,
}

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("{} is in use by a running conelab process ({holder}): attach to it with `conelab attach {}`", dir.display(), dir.display())]
    Busy { dir: PathBuf, holder: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: unreadable: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LiveError + '_ {
    move |source| LiveError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Takes the run's lock (the folder must exist). Refused while another process holds it.
pub fn hold(run_dir: &Path) -> Result<LockFile, LiveError> {
    let path = run_dir.join(RUN_LOCK);
    LockFile::acquire(&path, &holder_text(), Duration::from_millis(500)).map_err(|e| match e {
        LockError::Held { holder } => LiveError::Busy {
            dir: run_dir.to_path_buf(),
            holder,
        },
        LockError::Io { path, source } => LiveError::Io { path, source },
    })
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, LiveError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    // Bytes, not text: a byte that is not UTF-8 is damage, not an I/O error.
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| LiveError::Corrupt {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), LiveError> {
    let json = serde_json::to_string_pretty(value).map_err(|e| LiveError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    conelab_base::atomic::write_file(path, json.as_bytes()).map_err(io(path))
}

pub fn read_live(run_dir: &Path) -> Result<Option<LiveRecord>, LiveError> {
    read_json(&run_dir.join(LIVE_FILE))
}

/// How the run ended, checked against the run folder's manifest (a flipped byte in a status or
/// a step is damage, not another ending).
pub fn read_final(run_dir: &Path) -> Result<Option<FinalRecord>, LiveError> {
    let path = run_dir.join(FINAL_FILE);
    if !path.exists() {
        return Ok(None);
    }
    conelab_base::integrity::verify_file(run_dir, FINAL_FILE).map_err(|e| match e {
        IntegrityError::Io { path, source } => LiveError::Io { path, source },
        IntegrityError::Damaged { path, reason } => LiveError::Corrupt { path, reason },
    })?;
    read_json(&path)
}

/// Announces the run (the caller holds its lock) and forgets how an earlier process of it ended:
/// its socket speaks the control protocol of version `protocol`.
pub fn announce(run_dir: &Path, socket: &Path, protocol: u32) -> Result<LiveRecord, LiveError> {
    conelab_base::integrity::forget_recorded(run_dir, FINAL_FILE).map_err(|e| match e {
        IntegrityError::Io { path, source } => LiveError::Io { path, source },
        IntegrityError::Damaged { path, reason } => LiveError::Corrupt { path, reason },
    })?;
    let record = LiveRecord {
        pid: std::process::id(),
        host: host_name(),
        socket: socket.to_path_buf(),
        protocol,
        started_unix: conelab_base::clock::unix_now(),
    };
    write_json(&run_dir.join(LIVE_FILE), &record)?;
    Ok(record)
}

/// Records how the run ended (with its checksum in the run folder's manifest) and removes its
/// live record.
pub fn conclude(run_dir: &Path, record: &FinalRecord) -> Result<(), LiveError> {
    let path = run_dir.join(FINAL_FILE);
    let json = serde_json::to_string_pretty(record).map_err(|e| LiveError::Corrupt {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    conelab_base::integrity::write_recorded("final", run_dir, FINAL_FILE, json.as_bytes())
        .map_err(|e| match e {
            IntegrityError::Io { path, source } => LiveError::Io { path, source },
            IntegrityError::Damaged { path, reason } => LiveError::Corrupt { path, reason },
        })?;
    // A stale live record is harmless (the lock decides), so a failure here is not one.
    let _ = std::fs::remove_file(run_dir.join(LIVE_FILE));
    conelab_base::atomic::sync_dir(run_dir).map_err(io(run_dir))
}

/// What the folder says about its run's process.
pub fn liveness(run_dir: &Path) -> Result<Liveness, LiveError> {
    let lock = run_dir.join(RUN_LOCK);
    let holder = LockFile::holder(&lock).map_err(|e| match e {
        LockError::Io { path, source } => LiveError::Io { path, source },
        LockError::Held { holder } => LiveError::Busy {
            dir: run_dir.to_path_buf(),
            holder,
        },
    })?;
    if let Some(holder) = holder {
        return Ok(Liveness::Live {
            holder,
            record: read_live(run_dir)?,
        });
    }
    Ok(match read_final(run_dir) {
        Ok(Some(f)) => Liveness::Ended(f),
        Ok(None) => Liveness::Crashed,
        Err(e @ LiveError::Corrupt { .. }) => Liveness::EndedDamaged(e.to_string()),
        Err(e) => return Err(e),
    })
}
