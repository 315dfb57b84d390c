//! Exclusive OS file locks (`flock`) that say who holds them.
//!
//! The kernel releases the lock when its holder dies, `kill -9` included, so a lock never has to
//! be "taken over" and a recycled pid fools nothing. The file itself is never deleted (deleting a
//! lock file races with a process that has just opened it); its content names the holder (pid,
//! host) for messages. On NFS, `flock` is carried by the server's lock manager, so the lock holds
//! across the hosts of a shared filesystem.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("held by {holder}")]
    Held { holder: String },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

/// A held lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct LockFile {
    // Kept open: closing the file releases the lock.
    _file: File,
    path: PathBuf,
}

/// This host's name ("unknown" if the OS will not say).
pub fn host_name() -> String {
    crate::platform::host_name()
}

/// `pid N on HOST`: how a lock names its holder.
pub fn holder_text() -> String {
    format!("pid {} on {}", std::process::id(), host_name())
}

fn open(path: &Path) -> Result<File, LockError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| LockError::Io {
            path: path.to_path_buf(),
            source,
        })
}

fn read_holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.rewind().and_then(|()| file.read_to_string(&mut text));
    let text = text.trim();
    if text.is_empty() {
        "another process".into()
    } else {
        text.to_string()
    }
}

impl LockFile {
    /// Takes the lock on `path` (created if missing) and writes `holder` into it. Retries for
    /// `patience` (a probe by `conelab runs` holds it for microseconds).
    pub fn acquire(path: &Path, holder: &str, patience: Duration) -> Result<Self, LockError> {
        let mut file = open(path)?;
        let start = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if start.elapsed() < patience => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(LockError::Held {
                        holder: read_holder(&mut file),
                    });
                }
                Err(TryLockError::Error(source)) => {
                    return Err(LockError::Io {
                        path: path.to_path_buf(),
                        source,
                    });
                }
            }
        }
        let io = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        file.write_all(format!("{holder}\n").as_bytes())
            .map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(Self {
            _file: file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Who holds the lock on `path`, or `None` when nobody does (a missing file: nobody).
    pub fn holder(path: &Path) -> Result<Option<String>, LockError> {
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(LockError::Io {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                Ok(None)
            }
            Err(TryLockError::WouldBlock) => Ok(Some(read_holder(&mut file))),
            Err(TryLockError::Error(source)) => Err(LockError::Io {
                path: path.to_path_buf(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_refused_and_names_its_holder_then_released_on_drop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("x.lock");
        assert_eq!(LockFile::holder(&p).expect("probe"), None);
        let held = LockFile::acquire(&p, "pid 1 on here", Duration::ZERO).expect("first");
        assert_eq!(
            LockFile::holder(&p).expect("probe").as_deref(),
            Some("pid 1 on here")
        );
        match LockFile::acquire(&p, "pid 2", Duration::from_millis(50)) {
            Err(LockError::Held { holder }) => assert_eq!(holder, "pid 1 on here"),
            other => panic!("expected Held, got {other:?}"),
        }
        drop(held);
        assert_eq!(LockFile::holder(&p).expect("probe"), None);
        let again = LockFile::acquire(&p, "pid 3", Duration::ZERO).expect("free again");
        assert_eq!(
            std::fs::read_to_string(again.path()).expect("read"),
            "pid 3\n"
        );
    }

    #[test]
    fn the_host_name_is_not_empty() {
        assert!(!host_name().is_empty());
    }
}
