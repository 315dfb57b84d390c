//! `conelab runs`: one row per run folder — its status (from the run's lock and its final
//! record), progress, device, objectives, best validation PPL, newest isotropy — read from the
//! folder alone. One unreadable folder is a row that says why, never a failure of the command.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use conelab_core::run_dir::RunDir;
use conelab_core::run_dir::live::{self, Liveness};

use conelab_store as store;

use crate::{RunError, index};

/// One run, as `conelab runs --json` prints it (keys documented in docs/REFERENCE.md; stable).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// The run's label: its name (`train --name`, `conelab rename`), else the folder's name.
    pub name: String,
    /// The folder's name.
    pub dir: String,
    /// The seed of its training (run.toml).
    pub seed: Option<u64>,
    /// The sweep folder's name, for a run of a sweep.
    pub sweep: Option<String>,
    pub tags: Vec<String>,
    pub notes: String,
    pub path: PathBuf,
    /// live, completed, stopped, diverged, failed, crashed, damaged or unreadable.
    pub status: String,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub step: Option<u64>,
    pub total_steps: Option<u64>,
    pub device: Option<String>,
    /// The objectives in force, as a label.
    pub objective: Option<String>,
    pub best_valid_ppl: Option<f64>,
    pub i1: Option<f64>,
    pub mean_cos: Option<f64>,
    /// When the run was first started (UTC, RFC 3339).
    pub started: Option<String>,
    /// Wall-clock seconds from its first start to its end (to now while live).
    pub seconds: Option<f64>,
    /// Why the folder could not be read (status `unreadable`), or what a failure said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Damage found in the run's files (status `damaged` unless it is live), one line each:
    /// a file that fails its checksum, store segments skipped or set aside. What `runs` can see
    /// without reading every byte; `conelab store verify` checks the rest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub damaged: Vec<String>,
    /// The step of the newest finding that the model did worse than a uniform guess (the
    /// training NLL above ln V, a validation PPL above V): the table's status says
    /// `completed, worse than uniform` rather than a bare `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worse_than_uniform: Option<u64>,
}

/// The runs under `root` (its run folders and the runs of the sweep folders in it, or of
/// `root` itself when it is a sweep folder), newest first by start time (then by name).
pub fn list(root: &Path) -> Result<Vec<RunRow>, RunError> {
    // An unreadable root is an error here (the user named it), unlike a configured root.
    std::fs::read_dir(root).map_err(RunError::bad_input_at(root.display().to_string()))?;
    let cache = rows_cache();
    let mut rows: Vec<RunRow> = index::scan(root)
        .iter()
        .map(|p| row_cached(&index::absolute(p), Some(&cache)))
        .collect();
    sort(&mut rows, SortBy::Started);
    Ok(rows)
}

/// The rows of `runs`, sorted by start time; the rows of runs that are over come from the
/// cache in `cache` while their files are unchanged.
pub fn rows_of(runs: &[PathBuf], cache: Option<&Path>) -> Vec<RunRow> {
    let mut rows: Vec<RunRow> = runs.iter().map(|p| row_cached(p, cache)).collect();
    sort(&mut rows, SortBy::Started);
    rows
}

/// This user's cache of rows (the config's cache folder).
pub fn rows_cache() -> PathBuf {
    conelab_base::settings::current()
        .cache_dir
        .value
        .join("rows")
}

/// A row of the cache: the row, and the fingerprint of the files it was read from.
#[derive(Serialize, Deserialize)]
struct CachedRow {
    fingerprint: u64,
    row: RunRow,
}

/// What changes when anything `row` reads changes: name, size, inode, mtime and ctime of the
/// run folder's files, its store's and the store's set-aside folder's (a store adds and
/// replaces whole files; a write in place — a flipped bit — moves mtime and ctime).
pub fn fingerprint(dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut parts: Vec<(String, [i64; 6])> = Vec::new();
    let store = store::store_dir(dir);
    // The sweep column reads the sweep folder's record.
    if let Some(sweep_json) = dir
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == index::SWEEP_RUNS))
        .and_then(Path::parent)
        .map(|s| s.join(index::SWEEP_JSON))
        && let Ok(m) = std::fs::metadata(&sweep_json)
    {
        parts.push((
            "w/sweep.json".into(),
            [m.size() as i64, m.ino() as i64, m.mtime(), 0, 0, 0],
        ));
    }
    for (tag, folder) in [
        ("", dir.to_path_buf()),
        ("s/", store.clone()),
        ("c/", store.join("corrupt")),
    ] {
        let entries = match std::fs::read_dir(&folder) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !tag.is_empty() => continue,
            Err(_) => return None,
        };
        for e in entries {
            let e = e.ok()?;
            let m = e.metadata().ok()?;
            parts.push((
                format!("{tag}{}", e.file_name().to_string_lossy()),
                [
                    m.size() as i64,
                    m.ino() as i64,
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime(),
                    m.ctime_nsec(),
                ],
            ));
        }
    }
    parts.sort();
    let mut bytes = dir.as_os_str().as_encoded_bytes().to_vec();
    for (name, numbers) in &parts {
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        for n in numbers {
            bytes.extend_from_slice(&n.to_le_bytes());
        }
    }
    Some(conelab_base::hash::fnv1a(&bytes))
}

/// The cache file of the run in `dir`.
fn cache_file(cache: &Path, dir: &Path) -> PathBuf {
    let h = conelab_base::hash::fnv1a(dir.as_os_str().as_encoded_bytes());
    cache.join(format!("{h:016x}.json"))
}

/// [`row`], from `cache` when the run is over and its files are as they were when the row was
/// read (a live run, one that crashed, or a cache that cannot be read or written: read
/// afresh). The cache is only ever a copy: deleting it costs one slower listing.
pub fn row_cached(dir: &Path, cache: Option<&Path>) -> RunRow {
    let Some(cache) = cache else {
        return row(dir);
    };
    if !matches!(live::liveness(dir), Ok(Liveness::Ended(_))) {
        return row(dir);
    }
    let Some(before) = fingerprint(dir) else {
        return row(dir);
    };
    let file = cache_file(cache, dir);
    if let Ok(bytes) = std::fs::read(&file)
        && let Ok(c) = serde_json::from_slice::<CachedRow>(&bytes)
        && c.fingerprint == before
        && c.row.path == dir
    {
        return c.row;
    }
    let r = row(dir);
    // Only what was read, whole, from a folder that did not change meanwhile: a failed read
    // (an unreadable folder, a store that could not be read — EIO, a stale NFS handle) is tried
    // again next time, not kept.
    let failed = r.status == "unreadable"
        || r.reason
            .as_deref()
            .is_some_and(|why| why.starts_with("metrics store:"));
    if r.status != "live" && r.status != "crashed" && !failed && fingerprint(dir) == Some(before) {
        let cached = CachedRow {
            fingerprint: before,
            row: r.clone(),
        };
        if let Ok(bytes) = serde_json::to_vec(&cached) {
            let _ = std::fs::create_dir_all(cache)
                .and_then(|()| conelab_base::atomic::write_file(&file, &bytes));
        }
    } else {
        // What the cache held is out of date, and this row is not to be kept.
        let _ = std::fs::remove_file(&file);
    }
    r
}

/// The orders `conelab runs --sort` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    /// Newest first.
    Started,
    Name,
    Status,
    /// Best validation PPL, lowest first; runs without one last.
    Ppl,
    /// Furthest first.
    Step,
}

pub fn sort(rows: &mut [RunRow], by: SortBy) {
    let tie = |a: &RunRow, b: &RunRow| a.name.cmp(&b.name).then_with(|| a.path.cmp(&b.path));
    rows.sort_by(|a, b| match by {
        SortBy::Started => b.started.cmp(&a.started).then_with(|| tie(a, b)),
        SortBy::Name => tie(a, b),
        SortBy::Status => a.status.cmp(&b.status).then_with(|| tie(a, b)),
        SortBy::Ppl => {
            let key = |r: &RunRow| r.best_valid_ppl.unwrap_or(f64::INFINITY);
            key(a).total_cmp(&key(b)).then_with(|| tie(a, b))
        }
        SortBy::Step => b.step.cmp(&a.step).then_with(|| tie(a, b)),
    });
}

/// Every status a row can have (`conelab runs --status` takes these only).
pub const STATUSES: [&str; 9] = [
    "live",
    "completed",
    "stopped",
    "diverged",
    "failed",
    "crashed",
    "imported",
    "damaged",
    "unreadable",
];

/// Which rows `conelab runs` keeps: every tag given, any status given, a name (or folder name)
/// matching the glob.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub tags: Vec<String>,
    pub status: Vec<String>,
    pub name: Option<glob::Pattern>,
}

impl Filter {
    /// The glob of `--name`, refused in words when it is not one.
    pub fn name_glob(glob: &str) -> Result<glob::Pattern, RunError> {
        glob::Pattern::new(glob).map_err(|e| {
            RunError::Usage(conelab_base::error::Invalid::because(format!(
                "--name {glob:?}: not a glob"
            ))(e))
        })
    }

    /// Whether any filter is set (an empty listing then says so, not "no runs").
    pub fn is_set(&self) -> bool {
        !self.tags.is_empty() || !self.status.is_empty() || self.name.is_some()
    }

    pub fn keeps(&self, r: &RunRow) -> bool {
        self.tags.iter().all(|t| r.tags.contains(t))
            && (self.status.is_empty() || self.status.contains(&r.status))
            && self
                .name
                .as_ref()
                .is_none_or(|g| g.matches(&r.name) || g.matches(&r.dir))
    }
}

/// The sweep a run folder belongs to: `SWEEP/runs/RUN` with `SWEEP/sweep.json`.
pub fn sweep_of(dir: &Path) -> Option<String> {
    let runs = dir.parent()?;
    if runs.file_name()? != index::SWEEP_RUNS {
        return None;
    }
    let sweep = runs.parent()?;
    index::is_sweep(sweep).then(|| sweep.file_name().map(|n| n.to_string_lossy().into_owned()))?
}

/// The row of one run folder.
pub fn row(dir: &Path) -> RunRow {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut r = RunRow {
        name: name.clone(),
        dir: name,
        seed: None,
        sweep: sweep_of(dir),
        tags: Vec::new(),
        notes: String::new(),
        path: dir.to_path_buf(),
        status: "unreadable".into(),
        host: None,
        pid: None,
        step: None,
        total_steps: None,
        device: None,
        objective: None,
        worse_than_uniform: None,
        best_valid_ppl: None,
        i1: None,
        mean_cos: None,
        started: None,
        seconds: None,
        reason: None,
        damaged: Vec::new(),
    };
    let liveness = match live::liveness(dir) {
        Ok(l) => l,
        Err(e) => {
            r.reason = Some(e.to_string());
            return r;
        }
    };
    let mut ended_at = None;
    match &liveness {
        Liveness::Live { holder, record } => {
            r.status = "live".into();
            match record {
                Some(rec) => {
                    r.pid = Some(rec.pid);
                    r.host = Some(rec.host.clone());
                }
                None => r.reason = Some(format!("starting ({holder})")),
            }
        }
        Liveness::Ended(f) => {
            r.status = f.status.clone();
            r.step = Some(f.step);
            r.host = Some(f.host.clone());
            ended_at = Some(f.finished_unix);
            if !f.message.is_empty() {
                r.reason = Some(f.message.clone());
            }
        }
        Liveness::Crashed => r.status = "crashed".into(),
        // Over, how is not known: its damage is said, and its store read as for any run.
        Liveness::EndedDamaged(why) => {
            r.status = "ended".into();
            r.damaged.push(why.clone());
        }
    }
    match RunDir::open_as_is(dir) {
        Ok(run) => {
            r.total_steps = Some(run.spec().train.steps);
            r.seed = Some(run.spec().train.seed);
            r.device = Some(run.spec().device.clone());
            if r.step.is_none() {
                r.step = conelab_core::run_dir::newest_checkpoint_step(dir);
            }
        }
        Err(e @ conelab_core::run_dir::CheckpointError::Corrupt { .. }) => {
            r.damaged.push(e.to_string());
            mark_damaged(&mut r);
            return r;
        }
        // A metrics store without a run.toml: an imported log (`import-tb`), listed from its
        // store.
        Err(conelab_core::run_dir::CheckpointError::NotARun(_))
            if store::store_dir(dir).join(store::RUN_RECORD).is_file() =>
        {
            r.total_steps = r.step;
        }
        Err(e) => {
            r.status = "unreadable".into();
            r.reason = Some(e.to_string());
            return r;
        }
    }
    if let Err(e) = conelab_core::run_dir::verify_run_files(dir) {
        r.damaged.push(e.to_string());
    }
    r.damaged.extend(store::known_damage(dir));
    match store::summary::read(dir) {
        Ok(st) => {
            // A stand-in record (run.json lost or damaged) has no start: none is shown, and no
            // wall time reckoned from 1970.
            let started = (st.record.started_unix > 0.0).then_some(st.record.started_unix);
            r.started = started.map(rfc3339);
            if r.device.is_none() {
                r.device = Some(st.record.device.clone());
            }
            let labels = st.record.labels.clone();
            if let Some(name) = labels.name {
                r.name = name;
            }
            r.tags = labels.tags;
            r.notes = labels.notes;
            // A live run's wall time runs to now; a crashed one's (or one whose ending is
            // damaged) to its newest row, not to the moment it is listed.
            let end = match (&liveness, ended_at) {
                (_, Some(end)) => Some(end),
                (Liveness::Live { .. }, None) => Some(conelab_base::clock::unix_now()),
                (_, None) => st.newest_wall,
            };
            r.seconds = started.zip(end).map(|(start, end)| (end - start).max(0.0));
            // Segments skipped as corrupt, a lost run.json: the store's line for a file says
            // what is lost with it, so it replaces `known_damage`'s line for the same file.
            for warning in &st.warnings {
                let file = damaged_file(warning);
                r.damaged.retain(|d| damaged_file(d) != file);
                r.damaged.push(warning.clone());
            }
            if r.status == "live" || r.status == "crashed" {
                r.step = st.newest_step.or(r.step);
            }
            r.best_valid_ppl = st.best_valid_ppl;
            r.i1 = st.i1;
            r.mean_cos = st.mean_cos;
            r.objective = st.objective;
            r.worse_than_uniform = st.worse_than_uniform;
        }
        Err(store::StoreError::NoStore(_)) => {
            // A run written since folders had manifests (they came after the store) always
            // has a store: one that is gone is lost data, said (issue #58: such a run listed as
            // completed). A run from before stores has neither.
            if dir.join(conelab_base::integrity::MANIFEST).is_file()
                && !store::store_dir(dir).exists()
            {
                r.damaged.push(format!(
                    "{}: missing: the run's metrics and events are lost (its checkpoints are not)",
                    store::store_dir(dir).display()
                ));
            }
        }
        Err(e @ store::StoreError::Corrupt { .. }) => {
            let line = format!("metrics store: {e}");
            if !r.damaged.contains(&e.to_string()) {
                r.damaged.push(line);
            }
        }
        Err(e) => r.reason = Some(format!("metrics store: {e}")),
    }
    mark_damaged(&mut r);
    r
}

/// The file a damage line is about: the text before its first ": " (lines start with the path).
fn damaged_file(line: &str) -> &str {
    line.split(": ").next().unwrap_or(line)
}

/// A run with damage found reads `damaged` (the status it had goes into its reason), unless it
/// is live: a live run's status says what it is doing, its `damaged` lines what is wrong.
fn mark_damaged(r: &mut RunRow) {
    if r.damaged.is_empty() || r.status == "live" || r.status == "damaged" {
        return;
    }
    let was = std::mem::replace(&mut r.status, "damaged".into());
    r.reason = Some(match r.reason.take() {
        Some(why) => format!("{was}: {why}"),
        None => was,
    });
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339(unix: f64) -> String {
    conelab_base::clock::format_unix(unix.max(0.0) as i64, "%Y-%m-%dT%H:%M:%SZ")
}

/// A table as `conelab runs` prints it: columns two spaces apart, no borders, no trailing
/// blanks — text for a terminal and for grep alike.
pub fn plain_table<R: Into<comfy_table::Row>>(
    header: impl Into<comfy_table::Row>,
    rows: impl IntoIterator<Item = R>,
) -> String {
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(header);
    for row in rows {
        table.add_row(row);
    }
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
    }
    let mut out = String::new();
    for line in table.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A run's progress as a cell: `step/total`, `step`, or `–`.
pub fn step_cell(r: &RunRow) -> String {
    match (r.step, r.total_steps) {
        (Some(s), Some(t)) => format!("{s}/{t}"),
        (Some(s), None) => s.to_string(),
        _ => "–".into(),
    }
}

/// The human table of `conelab runs`: the name a run goes by and its folder (two seeds of one
/// name differ there and by seed), the sweep column where any run is in a sweep.
pub fn render(rows: &[RunRow]) -> String {
    let with_sweep = rows.iter().any(|r| r.sweep.is_some());
    let mut header = vec!["name", "folder", "seed"];
    if with_sweep {
        header.push("sweep");
    }
    header.extend([
        "tags",
        "status",
        "step",
        "device",
        "objective",
        "best ppl",
        "I1",
        "cos",
        "started",
        "wall",
        // Last: the one long cell, where the user copies it from.
        "path",
    ]);
    let dash = || "–".to_string();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let status = match (&r.status[..], r.pid, &r.host) {
                ("live", Some(pid), Some(host)) => format!("live (pid {pid} on {host})"),
                ("stopped", ..)
                    if r.reason
                        .as_deref()
                        .is_some_and(|w| w.starts_with("stopped without saving")) =>
                {
                    "stopped (not saved)".into()
                }
                (s, _, _) => s.to_string(),
            };
            // A run that "completed" worse than a uniform guess did not do what it was for.
            let status = match r.worse_than_uniform {
                Some(step) => format!("{status}, worse than uniform (step {step})"),
                None => status,
            };
            // At most 10 characters: a diverged run's PPL of 10¹¹² is `1.1234e112`, not 113
            // digits widening the column for every row.
            let num = |v: Option<f64>, d: usize| {
                v.map_or_else(dash, |v| conelab_base::number::fit(v, 10, d))
            };
            let mut row = vec![
                r.name.clone(),
                r.dir.clone(),
                r.seed.map_or_else(dash, |s| s.to_string()),
            ];
            if with_sweep {
                row.push(r.sweep.clone().unwrap_or_else(dash));
            }
            row.extend([
                if r.tags.is_empty() {
                    dash()
                } else {
                    r.tags.join(",")
                },
                status,
                step_cell(r),
                r.device.clone().unwrap_or_else(dash),
                r.objective.clone().unwrap_or_else(dash),
                num(r.best_valid_ppl, 2),
                num(r.i1, 3),
                num(r.mean_cos, 3),
                r.started
                    .as_deref()
                    .map(|s| s.replace('T', " ").trim_end_matches('Z').to_string())
                    .unwrap_or_else(dash),
                r.seconds
                    .map_or_else(dash, conelab_base::format::format_duration),
                r.path.display().to_string(),
            ]);
            row
        })
        .collect();
    let mut out = plain_table(header, cells);
    for r in rows.iter().filter(|r| r.status == "unreadable") {
        out.push_str(&format!(
            "{}: unreadable: {}\n",
            r.name,
            r.reason.as_deref().unwrap_or("?")
        ));
    }
    for r in rows {
        for line in &r.damaged {
            out.push_str(&format!("{}: damaged: {line}\n", r.name));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row is read from the cache while the run's files are unchanged, and read afresh after
    /// any change (a label edit, a flipped bit written in place).
    #[test]
    fn the_row_cache_serves_unchanged_runs_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let cache = tmp.path().join("cache");
        std::fs::create_dir_all(store::store_dir(&dir)).unwrap();
        // A run folder that reads (its run.toml; no manifest: unverified, not damaged).
        let spec = conelab_core::run_dir::RunSpec {
            conelab_version: "test".into(),
            name: "run".into(),
            device: "cpu".into(),
            group_bounds: [0.3, 0.8],
            corpus: conelab_core::run_dir::CorpusSpec::Dir {
                path: "/corpus".into(),
                fingerprint: None,
            },
            model: conelab_core::model::Preset::Tiny.config(),
            train: conelab_core::train_config::TrainConfig::default(),
        };
        std::fs::write(dir.join("run.toml"), toml::to_string(&spec).unwrap()).unwrap();
        // A run that is over: its final record.
        live::conclude(
            &dir,
            &live::FinalRecord {
                status: "completed".into(),
                step: 7,
                total_steps: 7,
                exit_code: 0,
                message: String::new(),
                by_signal: false,
                finished_unix: 0.0,
                host: "h".into(),
            },
        )
        .unwrap();
        std::fs::write(store::store_dir(&dir).join("x.parquet"), b"0123").unwrap();
        let fresh = row_cached(&dir, Some(&cache));
        assert_eq!(fresh, row(&dir));
        assert_eq!(fresh.status, "completed", "{fresh:?}");
        let file = cache_file(&cache, &dir);
        assert!(file.is_file(), "cached");
        // Tamper with the cached copy: an unchanged folder is served from it.
        let mut c: CachedRow = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        c.row.notes = "from the cache".into();
        std::fs::write(&file, serde_json::to_vec(&c).unwrap()).unwrap();
        assert_eq!(row_cached(&dir, Some(&cache)).notes, "from the cache");
        // A byte changed in place (same size, same inode): read afresh.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(store::store_dir(&dir).join("x.parquet"), b"0124").unwrap();
        assert_eq!(row_cached(&dir, Some(&cache)).notes, "");
        // A garbage cache file: read afresh, never an error.
        std::fs::write(&file, b"{not json").unwrap();
        assert_eq!(row_cached(&dir, Some(&cache)), row(&dir));
        // No cache: the plain row.
        assert_eq!(row_cached(&dir, None), row(&dir));
        // A folder that cannot be read is read again next time, never served from the cache.
        std::fs::remove_file(&file).unwrap();
        std::fs::write(dir.join("run.toml"), b"not = [toml").unwrap();
        let unreadable = row_cached(&dir, Some(&cache));
        assert_eq!(unreadable.status, "damaged", "{unreadable:?}");
        std::fs::remove_file(dir.join("run.toml")).unwrap();
        let gone = row_cached(&dir, Some(&cache));
        assert_eq!(gone.status, "unreadable", "{gone:?}");
        assert!(!file.exists(), "an unreadable row is not cached");
    }

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0.0), "1970-01-01T00:00:00Z");
        // 2000-02-29 12:34:56 UTC (a leap day) = 951827696.
        assert_eq!(rfc3339(951_827_696.0), "2000-02-29T12:34:56Z");
        assert_eq!(rfc3339(1_795_392_000.0), "2026-11-23T00:00:00Z");
    }
}
