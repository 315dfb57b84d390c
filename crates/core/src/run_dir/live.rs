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
/// Space set aside while the run lives so that `final.json` can be written on a full disk: the
/// run's last write, and the one that says how it ended, is the one most likely to meet the
/// disk its store and checkpoints filled. Written in place (its blocks already allocated), then
/// renamed; removed when the run concludes.
pub const FINAL_RESERVE: &str = "final.json.reserve";
/// The reserve's size: a final record is under 1 KiB; the rest leaves room for the manifest's
/// rewrite once the reserve's tail is freed.
const FINAL_RESERVE_BYTES: usize = 64 * 1024;
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
    // Best effort: a disk too full for 64 KiB now fails the run's first segment anyway, and
    // the run must not be refused for want of its last line's room.
    let _ = reserve_final(run_dir);
    Ok(record)
}

fn reserve_final(run_dir: &Path) -> std::io::Result<()> {
    use std::io::Write;
    conelab_base::fault::check("final.reserve")?;
    let mut file = std::fs::File::create(run_dir.join(FINAL_RESERVE))?;
    file.write_all(&[0u8; FINAL_RESERVE_BYTES])?;
    file.sync_all()
}

/// Writes `bytes` as `final.json` over the reserve's allocated blocks (no new space needed on
/// a file system that overwrites in place), then renames it: atomic like any other write.
fn conclude_into_reserve(run_dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::{Seek, Write};
    let reserve = run_dir.join(FINAL_RESERVE);
    let mut file = std::fs::OpenOptions::new().write(true).open(&reserve)?;
    file.seek(std::io::SeekFrom::Start(0))?;
    file.write_all(bytes)?;
    file.set_len(bytes.len() as u64)?;
    file.sync_all()?;
    std::fs::rename(&reserve, run_dir.join(FINAL_FILE))?;
    conelab_base::atomic::sync_dir(run_dir)
}

/// Records how the run ended (with its checksum in the run folder's manifest) and removes its
/// live record.
pub fn conclude(run_dir: &Path, record: &FinalRecord) -> Result<(), LiveError> {
    let path = run_dir.join(FINAL_FILE);
    let json = serde_json::to_string_pretty(record).map_err(|e| LiveError::Corrupt {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    match conelab_base::integrity::write_recorded("final", run_dir, FINAL_FILE, json.as_bytes()) {
        Ok(()) => {}
        // A full disk (or any failed write): the record goes where space was set aside for
        // it, then its checksum is recorded if the freed tail of the reserve allows; if not,
        // final.json reads as unverified, never as missing (a crash).
        Err(IntegrityError::Io { path, source }) => {
            if conclude_into_reserve(run_dir, json.as_bytes()).is_err() {
                return Err(LiveError::Io { path, source });
            }
            let _ = conelab_base::integrity::record_present(run_dir, FINAL_FILE);
        }
        Err(IntegrityError::Damaged { path, reason }) => {
            return Err(LiveError::Corrupt { path, reason });
        }
    }
    // A stale live record or reserve is harmless (the lock decides), so a failure here is not
    // one.
    let _ = std::fs::remove_file(run_dir.join(LIVE_FILE));
    let _ = std::fs::remove_file(run_dir.join(FINAL_RESERVE));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> FinalRecord {
        FinalRecord {
            status: "failed".into(),
            step: 40,
            total_steps: 100,
            exit_code: 4,
            message: "No space left on device".into(),
            by_signal: false,
            finished_unix: 1.5,
            host: "h".into(),
        }
    }

    fn announced() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().expect("tmp");
        announce(tmp.path(), &tmp.path().join("sock"), 1).expect("announce");
        assert_eq!(
            std::fs::metadata(tmp.path().join(FINAL_RESERVE))
                .expect("reserve")
                .len(),
            FINAL_RESERVE_BYTES as u64
        );
        tmp
    }

    #[test]
    fn a_run_concludes_on_a_full_disk_through_its_reserve() {
        // Full for the record's file and the manifest alike: the record is still written, and
        // reads back whole, unverified.
        let tmp = announced();
        conelab_base::fault::with_plan("final.write:1+:ENOSPC,manifest.write:1+:ENOSPC", || {
            conclude(tmp.path(), &record())
        })
        .expect("concluded");
        assert_eq!(read_final(tmp.path()).expect("read"), Some(record()));
        assert!(
            !conelab_base::integrity::verify_file(tmp.path(), FINAL_FILE).expect("not damaged")
        );
        assert!(!tmp.path().join(FINAL_RESERVE).exists());
        assert!(matches!(liveness(tmp.path()), Ok(Liveness::Ended(r)) if r == record()));

        // Full for the file only (the manifest's pending checksum went in first): verified.
        let tmp = announced();
        conelab_base::fault::with_plan("final.write:1+:ENOSPC", || conclude(tmp.path(), &record()))
            .expect("concluded");
        assert!(conelab_base::integrity::verify_file(tmp.path(), FINAL_FILE).expect("verified"));
        assert_eq!(read_final(tmp.path()).expect("read"), Some(record()));
    }

    #[test]
    fn without_a_reserve_a_full_disk_is_an_error_and_nothing_half_written() {
        let tmp = tempfile::tempdir().expect("tmp");
        conelab_base::fault::with_plan("final.reserve:1:ENOSPC", || {
            announce(tmp.path(), &tmp.path().join("sock"), 1)
        })
        .expect("announced without a reserve");
        assert!(!tmp.path().join(FINAL_RESERVE).exists());
        let err = conelab_base::fault::with_plan("final.write:1+:ENOSPC", || {
            conclude(tmp.path(), &record())
        })
        .expect_err("no room");
        assert!(err.to_string().contains("No space left"), "{err}");
        assert!(matches!(liveness(tmp.path()), Ok(Liveness::Crashed)));
    }

    #[test]
    fn a_normal_end_leaves_no_reserve() {
        let tmp = announced();
        conclude(tmp.path(), &record()).expect("concluded");
        assert!(!tmp.path().join(FINAL_RESERVE).exists());
        assert!(conelab_base::integrity::verify_file(tmp.path(), FINAL_FILE).expect("verified"));
    }
}
