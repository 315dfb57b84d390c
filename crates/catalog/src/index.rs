//! The per-user index of runs, so that a run is found by name from any folder: one small JSON
//! file per run in the XDG state folder (`~/.local/state/conelab/runs/`), written by the run
//! itself when it starts or resumes and rewritten when its labels change. One file per run
//! because SLURM array tasks register at the same moment, often on an NFS home: there is no
//! shared file to lock, and a torn or unreadable entry costs one run, not the index.
//!
//! Runs made before the index (or whose entry was lost) are found by scanning the run roots
//! (`$CONELAB_RUNS`, the config file's `run_roots`, `./checkpoints`, and the `runs/` folder of
//! any sweep folder in them). An entry is pruned only when its run is provably gone: the folder
//! that held it is there, on the same filesystem as the run was, and the run is not — never when
//! its filesystem is simply not mounted.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use conelab_base::atomic;
use conelab_base::lockfile::host_name;
use conelab_core::labels::RunLabels;

/// The file that makes a folder a sweep folder; its runs are in `runs/` inside it.
pub const SWEEP_JSON: &str = "sweep.json";
/// The folder of a sweep folder that holds its runs.
pub const SWEEP_RUNS: &str = "runs";

const FORMAT: u32 = 1;

/// One run in the index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub format: u32,
    /// The run's folder, absolute.
    pub path: PathBuf,
    pub name: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    pub host: String,
    pub registered_unix: f64,
    /// The filesystem (st_dev) the run's folder was on: an entry whose folder is missing is
    /// pruned only when the folder above it is on this same filesystem.
    pub dev: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("run index {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The index of this user (the config's `index_dir`).
pub fn index_dir() -> PathBuf {
    conelab_base::settings::current().index_dir.value.clone()
}

/// The absolute form of `dir` (its canonical path where it exists).
pub fn absolute(dir: &Path) -> PathBuf {
    dir.canonicalize()
        .unwrap_or_else(|_| std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()))
}

/// The entry file of the run at (absolute) `path`: its folder's name for a reader, and a hash
/// of the whole path so that two runs never share one.
fn entry_file(index: &Path, path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem: String = conelab_base::name::path_component(&name, "-_.", '_')
        .chars()
        .take(64)
        .collect();
    // FNV-1a: an entry's file name must not change between conelab versions.
    let hash = conelab_base::hash::fnv1a(path.as_os_str().as_encoded_bytes());
    index.join(format!("{stem}-{hash:016x}.json"))
}

/// Registers (or re-registers) the run in `dir` with its labels, in the index folder `index`.
/// Atomic: a reader sees the old entry or the new one.
pub fn register_in(index: &Path, dir: &Path, labels: &RunLabels) -> Result<PathBuf, IndexError> {
    let path = absolute(dir);
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| IndexError::Io { path: p, source }
    };
    std::fs::create_dir_all(index).map_err(io(index))?;
    let entry = IndexEntry {
        format: FORMAT,
        name: labels.name.clone(),
        tags: labels.tags.clone(),
        host: host_name(),
        registered_unix: conelab_base::clock::unix_now(),
        dev: std::fs::metadata(&path).ok().map(|m| m.dev()),
        path,
    };
    let file = entry_file(index, &entry.path);
    let mut bytes = serde_json::to_vec_pretty(&entry).map_err(|e| IndexError::Io {
        path: file.clone(),
        source: std::io::Error::other(e),
    })?;
    bytes.push(b'\n');
    atomic::write_file_as("index", &file, &bytes).map_err(io(&file))?;
    Ok(file)
}

/// Takes the entry of the run at (absolute) `dir` out of the index `index`, if it has one.
/// Best effort: an entry left behind is pruned by the next read, its folder being gone.
pub fn unregister_in(index: &Path, dir: &Path) {
    let _ = std::fs::remove_file(entry_file(index, dir));
}

/// [`register_in`] this user's index.
pub fn register(dir: &Path, labels: &RunLabels) -> Result<PathBuf, IndexError> {
    register_in(&index_dir(), dir, labels)
}

/// Whether the run an entry names is provably gone: it was registered on this host (a run in
/// another node's local scratch is simply not visible here), and its folder is missing while
/// the folder above it is there on the filesystem the run was on (a filesystem that is not
/// mounted shows an empty mount point on another one, or nothing at all).
fn provably_gone(entry: &IndexEntry) -> bool {
    if entry.host != host_name() {
        return false;
    }
    match std::fs::symlink_metadata(&entry.path) {
        Ok(_) => return false,
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return false,
        Err(_) => {}
    }
    let (Some(parent), Some(dev)) = (entry.path.parent(), entry.dev) else {
        return false;
    };
    std::fs::metadata(parent).is_ok_and(|m| m.is_dir() && m.dev() == dev)
}

/// What the index holds, and what could not be read of it.
#[derive(Debug, Default)]
pub struct IndexRead {
    pub entries: Vec<IndexEntry>,
    pub warnings: Vec<String>,
    /// Entries removed because their run is provably gone.
    pub pruned: Vec<PathBuf>,
}

/// Reads the index in `index`, pruning the entries of runs that are provably gone. Never
/// fails: an unreadable index or entry is a warning (the scan of the roots still finds runs).
pub fn read_index(index: &Path) -> IndexRead {
    let mut out = IndexRead::default();
    let entries = match std::fs::read_dir(index) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return out,
        Err(e) => {
            out.warnings.push(format!(
                "the run index {} cannot be read ({e}): runs are found by scanning the run roots only",
                index.display()
            ));
            return out;
        }
    };
    for file in entries.filter_map(Result::ok).map(|e| e.path()) {
        if file.extension().is_none_or(|x| x != "json") {
            continue; // an atomic write's temporary file, or a stranger
        }
        let entry = std::fs::read(&file)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<IndexEntry>(&b).map_err(|e| e.to_string()));
        match entry {
            Ok(entry) if provably_gone(&entry) => {
                if std::fs::remove_file(&file).is_ok() {
                    out.pruned.push(entry.path);
                }
            }
            Ok(entry) => out.entries.push(entry),
            Err(why) => out.warnings.push(format!(
                "run index entry {} is unreadable ({why}): skipped (delete it; the run registers again when it resumes)",
                file.display()
            )),
        }
    }
    out.entries.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// A folder that looks like a run (or the remains of one).
pub fn looks_like_run(p: &Path) -> bool {
    [
        "run.toml",
        conelab_core::run_dir::live::RUN_LOCK,
        conelab_store::STORE_DIR,
        conelab_core::run_dir::live::FINAL_FILE,
    ]
    .iter()
    .any(|f| p.join(f).exists())
}

/// A sweep folder (`sweep run` made it): its runs are in `runs/`.
pub fn is_sweep(p: &Path) -> bool {
    p.join(SWEEP_JSON).is_file()
}

/// The runs in `root`: its run folders, and the runs of the sweep folders in it (or of `root`
/// itself when it is one). An unreadable root is no runs.
pub fn scan(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut children = |dir: &Path, sweeps: bool| {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut sweep_dirs = Vec::new();
        for p in entries.filter_map(Result::ok).map(|e| e.path()) {
            // Hidden folders are runs being made (`import-tb`) or deleted (`rm`): not runs yet,
            // or no more.
            let hidden = p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'));
            if !p.is_dir() || hidden {
                continue;
            }
            if looks_like_run(&p) {
                out.push(p);
            } else if sweeps && is_sweep(&p) {
                sweep_dirs.push(p.join(SWEEP_RUNS));
            }
        }
        sweep_dirs
    };
    let mut sweeps = children(root, true);
    if is_sweep(root) {
        sweeps.push(root.join(SWEEP_RUNS));
    }
    for s in sweeps {
        children(&s, false);
    }
    out
}

/// The runs this user can reach by name, and what went wrong finding them.
#[derive(Debug, Default)]
pub struct Known {
    /// Absolute paths, each once, sorted.
    pub runs: Vec<PathBuf>,
    pub warnings: Vec<String>,
}

/// The runs in the index `index` and in the folders `roots`, each once.
pub fn known_in(index: &Path, roots: &[PathBuf]) -> Known {
    let read = read_index(index);
    let mut seen = HashSet::new();
    let mut runs = Vec::new();
    let found = read
        .entries
        .into_iter()
        .map(|e| e.path)
        .filter(|p| p.is_dir())
        .chain(roots.iter().flat_map(|r| scan(r)));
    for p in found {
        let abs = absolute(&p);
        if seen.insert(abs.clone()) {
            runs.push(abs);
        }
    }
    runs.sort();
    Known {
        runs,
        warnings: read.warnings,
    }
}

/// The runs of this user: the index and the configured run roots.
pub fn known() -> Known {
    let config = conelab_base::settings::current();
    known_in(&config.index_dir.value, &config.run_root_paths())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(name: &str) -> RunLabels {
        RunLabels {
            name: Some(name.into()),
            ..RunLabels::default()
        }
    }

    fn make_run(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("run.toml"), "x").unwrap();
    }

    #[test]
    fn runs_registered_and_scanned_are_found_once() {
        let tmp = tempfile::tempdir().unwrap();
        let index = tmp.path().join("index");
        let root = tmp.path().join("checkpoints");
        let (a, b) = (root.join("a"), tmp.path().join("elsewhere/b"));
        make_run(&a);
        make_run(&b);
        // A sweep folder in the root: its runs are in runs/.
        let sweep = root.join("grid");
        make_run(&sweep.join("runs/r1"));
        std::fs::write(sweep.join(SWEEP_JSON), "{}").unwrap();
        std::fs::create_dir_all(root.join("not-a-run")).unwrap();
        register_in(&index, &a, &labels("A")).unwrap();
        register_in(&index, &b, &labels("B")).unwrap();
        // Registering again replaces the entry.
        register_in(&index, &b, &labels("B2")).unwrap();
        let read = read_index(&index);
        assert_eq!(read.entries.len(), 2);
        assert!(read.entries.iter().any(|e| e.name.as_deref() == Some("B2")));
        assert!(read.entries.iter().all(|e| e.path.is_absolute()));
        let known = known_in(&index, std::slice::from_ref(&root));
        let expect: Vec<PathBuf> = [a, b, sweep.join("runs/r1")]
            .iter()
            .map(|p| p.canonicalize().unwrap())
            .collect();
        let mut expect_sorted = expect.clone();
        expect_sorted.sort();
        assert_eq!(known.runs, expect_sorted);
        assert!(known.warnings.is_empty());
        // The sweep folder named as a root lists its runs.
        assert_eq!(scan(&sweep), vec![sweep.join("runs/r1")]);
    }

    /// A full disk or an I/O error under the index: the entry already there stays as it was,
    /// no temporary file is left for readers to trip on, and the next registration works.
    #[test]
    fn a_failed_registration_keeps_the_old_entry() {
        let tmp = tempfile::tempdir().unwrap();
        let index = tmp.path().join("index");
        let run = tmp.path().join("runs/a");
        make_run(&run);
        let file = register_in(&index, &run, &labels("old")).unwrap();
        let before = std::fs::read(&file).unwrap();
        for plan in ["index.write:1:ENOSPC", "index.rename:1:EIO"] {
            let err =
                conelab_base::fault::with_plan(plan, || register_in(&index, &run, &labels("new")))
                    .expect_err(plan);
            assert!(matches!(err, IndexError::Io { .. }), "{plan}: {err}");
            assert_eq!(std::fs::read(&file).unwrap(), before, "{plan}");
            let names: Vec<_> = std::fs::read_dir(&index).unwrap().collect();
            assert_eq!(names.len(), 1, "{plan}: only the entry, no temporary file");
            let read = read_index(&index);
            assert_eq!(read.entries[0].name.as_deref(), Some("old"), "{plan}");
            assert!(read.warnings.is_empty(), "{plan}: {:?}", read.warnings);
        }
        register_in(&index, &run, &labels("new")).unwrap();
        assert_eq!(read_index(&index).entries[0].name.as_deref(), Some("new"));
    }

    #[test]
    fn an_entry_is_pruned_only_when_its_run_is_provably_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let index = tmp.path().join("index");
        let gone = tmp.path().join("runs/gone");
        make_run(&gone);
        register_in(&index, &gone, &labels("g")).unwrap();
        std::fs::remove_dir_all(&gone).unwrap();
        // Its folder's parent is there on the same filesystem: gone.
        let read = read_index(&index);
        assert!(read.entries.is_empty());
        assert_eq!(read.pruned.len(), 1);
        assert_eq!(std::fs::read_dir(&index).unwrap().count(), 0);
        // A run on a filesystem that is not mounted: the whole path is missing, or its mount
        // point is an empty folder on another filesystem. Neither prunes.
        let unmounted = IndexEntry {
            format: FORMAT,
            path: PathBuf::from("/nonexistent-mount/conelab/run"),
            name: None,
            tags: Vec::new(),
            host: host_name(),
            registered_unix: 0.0,
            dev: Some(12345),
        };
        assert!(!provably_gone(&unmounted));
        let mount_point = IndexEntry {
            path: tmp.path().join("runs/elsewhere"),
            dev: Some(u64::MAX),
            ..unmounted.clone()
        };
        assert!(!provably_gone(&mount_point));
        let no_dev = IndexEntry {
            path: tmp.path().join("runs/x"),
            dev: None,
            ..unmounted.clone()
        };
        assert!(!provably_gone(&no_dev));
        // Registered on another node (its local scratch): never pruned from here, even where
        // this host has a folder of the same name on a disk with the same number.
        let elsewhere = tmp.path().join("runs/elsewhere-run");
        make_run(&elsewhere);
        register_in(&index, &elsewhere, &labels("e")).unwrap();
        let file = std::fs::read_dir(&index)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let mut entry: IndexEntry = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        std::fs::remove_dir_all(&elsewhere).unwrap();
        entry.host = format!("{}-other-node", host_name());
        std::fs::write(&file, serde_json::to_vec(&entry).unwrap()).unwrap();
        let read = read_index(&index);
        assert!(read.pruned.is_empty());
        assert!(file.exists());
        // The same entry from its own host is pruned.
        entry.host = host_name();
        std::fs::write(&file, serde_json::to_vec(&entry).unwrap()).unwrap();
        assert_eq!(read_index(&index).pruned.len(), 1);
    }

    #[test]
    fn an_unreadable_index_or_entry_is_a_warning() {
        let tmp = tempfile::tempdir().unwrap();
        let index = tmp.path().join("index");
        let run = tmp.path().join("r");
        make_run(&run);
        register_in(&index, &run, &labels("r")).unwrap();
        std::fs::write(
            index.join("torn-0000000000000000.json"),
            "{\"format\":1,\"pa",
        )
        .unwrap();
        let known = known_in(&index, &[]);
        assert_eq!(known.runs, vec![run.canonicalize().unwrap()]);
        assert_eq!(known.warnings.len(), 1);
        assert!(known.warnings[0].contains("torn-"), "{:?}", known.warnings);
        // The torn entry is kept (it is not provably a dead run).
        assert!(index.join("torn-0000000000000000.json").exists());
        // An index that is a file: a warning, and the roots still scanned.
        let bad = tmp.path().join("bad-index");
        std::fs::write(&bad, "x").unwrap();
        let known = known_in(&bad, &[tmp.path().to_path_buf()]);
        assert_eq!(known.runs, vec![run.canonicalize().unwrap()]);
        assert!(
            known.warnings[0].contains("cannot be read"),
            "{:?}",
            known.warnings
        );
    }

    #[test]
    fn entry_files_differ_by_path_and_keep_the_folder_name() {
        let i = Path::new("/i");
        let a = entry_file(i, Path::new("/x/run one"));
        let b = entry_file(i, Path::new("/y/run one"));
        assert_ne!(a, b);
        assert!(
            a.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("run_one-"),
            "{a:?}"
        );
        // FNV-1a's published test vector: the name must not change between versions.
        assert_eq!(conelab_base::hash::fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
