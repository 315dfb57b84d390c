//! Deleting runs (`conelab rm`, `conelab gc`): a run is taken whole or not at all. Its lock is
//! taken first (a live run holds it: refused, nothing touched), the folder is renamed to a hidden
//! name beside it in one step (no listing ever shows half a run), its index entry goes, and only
//! then are its files removed. A removal cut short leaves the hidden folder, named in the error.

use std::path::{Path, PathBuf};

use conelab_base::error::Invalid;
use conelab_core::run_dir::live::{self, LiveError};

use crate::RunError;
use crate::list::RunRow;

/// What [`remove_run`] removed.
#[derive(Debug, Clone, PartialEq)]
pub struct Removed {
    pub dir: PathBuf,
    pub bytes: u64,
}

/// The bytes under `dir` (symbolic links not followed), for the confirmation's size.
pub fn size_of(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => size_of(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

/// Deletes the run in `dir` (an absolute run folder) and its entry in the index `index`.
/// Refused, with nothing touched, while the run is live.
pub fn remove_run(dir: &Path, index: &Path) -> Result<Removed, RunError> {
    if !crate::index::looks_like_run(dir) {
        return Err(RunError::Usage(Invalid::new(format!(
            "{}: not a run folder (no run.toml, store or run record): nothing deleted",
            dir.display()
        ))));
    }
    // The run's own lock: while it is held the run lives (or is being resumed).
    let lock = live::hold(dir).map_err(|e| match e {
        LiveError::Busy { dir, holder } => RunError::Usage(Invalid::new(format!(
            "{}: the run is live ({holder}): stop it first (q → s in its workbench, or `conelab attach`); nothing deleted",
            dir.display()
        ))),
        other => RunError::Live(other),
    })?;
    let bytes = size_of(dir);
    let (parent, name) = match (dir.parent(), dir.file_name()) {
        (Some(p), Some(n)) => (p, n.to_string_lossy().into_owned()),
        _ => {
            return Err(RunError::Usage(Invalid::new(format!(
                "{}: cannot delete a root folder",
                dir.display()
            ))));
        }
    };
    let doomed = parent.join(format!(".{name}.deleting-{}", std::process::id()));
    std::fs::rename(dir, &doomed).map_err(RunError::internal(format!(
        "moving {} aside to delete it (nothing deleted)",
        dir.display()
    )))?;
    drop(lock);
    crate::index::unregister_in(index, dir);
    std::fs::remove_dir_all(&doomed).map_err(RunError::internal(format!(
        "deleting {} (moved aside as {}, no longer listed: delete that folder by hand)",
        dir.display(),
        doomed.display()
    )))?;
    Ok(Removed {
        dir: dir.to_path_buf(),
        bytes,
    })
}

/// Why `gc` would delete a run: a run that is over, has no checkpoint to resume from, and either
/// failed, crashed, or trained no step. None for anything else (a live run, a run with a
/// checkpoint, a completed or stopped run with a history: deleting those is `rm`'s, by name).
pub fn garbage_reason(row: &RunRow) -> Option<String> {
    if row.status == "live" {
        return None;
    }
    if conelab_core::run_dir::newest_checkpoint_step(&row.path).is_some()
        || row.path.join(conelab_core::run_dir::BEST_DIR).is_dir()
    {
        return None;
    }
    match row.status.as_str() {
        "failed" | "crashed" => Some(format!("{}, no checkpoint", row.status)),
        "imported" => None,
        _ if row.step.unwrap_or(0) == 0 => Some(format!("{} at step 0, no checkpoint", row.status)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_in(root: &Path, name: &str) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("store")).expect("mkdir");
        std::fs::write(dir.join("run.toml"), "x = 1\n").expect("run.toml");
        std::fs::write(dir.join("store").join("a.bin"), vec![7u8; 1000]).expect("file");
        dir
    }

    #[test]
    fn a_run_goes_whole_with_its_index_entry() {
        let tmp = tempfile::tempdir().expect("tmp");
        let index = tmp.path().join("index");
        let dir = run_in(tmp.path(), "r1");
        let labels = conelab_core::labels::RunLabels {
            name: Some("alpha".into()),
            ..Default::default()
        };
        crate::index::register_in(&index, &dir, &labels).expect("register");
        assert_eq!(crate::index::read_index(&index).entries.len(), 1);
        let removed = remove_run(&dir, &index).expect("removed");
        assert!(removed.bytes >= 1000, "{removed:?}");
        assert!(!dir.exists());
        assert!(crate::index::read_index(&index).entries.is_empty());
        // Nothing left beside it, hidden or not.
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .expect("list")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .filter(|n| n != "index")
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_live_run_is_refused_and_untouched() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = run_in(tmp.path(), "live");
        // The run's lock held (an OS lock on its own open file: a second taker waits, then is
        // refused, in this process as in another).
        let lock = live::hold(&dir).expect("hold");
        let e = remove_run(&dir, &tmp.path().join("index")).expect_err("refused");
        drop(lock);
        assert!(
            matches!(&e, RunError::Usage(why) if why.to_string().contains("live")),
            "{e}"
        );
        assert!(dir.join("store").join("a.bin").is_file());
    }

    #[test]
    fn a_folder_that_is_no_run_is_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let plain = tmp.path().join("photos");
        std::fs::create_dir_all(&plain).expect("mkdir");
        std::fs::write(plain.join("a.jpg"), b"x").expect("file");
        let e = remove_run(&plain, &tmp.path().join("index")).expect_err("refused");
        assert!(e.to_string().contains("not a run folder"), "{e}");
        assert!(plain.join("a.jpg").is_file());
    }
}
