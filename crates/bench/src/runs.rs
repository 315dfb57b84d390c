//! `conelab bench runs`: finding runs from anywhere, at scale. One real run is trained, then
//! `runs` − 1 copies of it (hard links, each renamed `bench-NNNN`, so each has a run.json of
//! its own) are registered in an index of the bench's own, as that many runs would have
//! registered themselves. Timed, from an empty working folder (as after an SSH reconnect):
//!
//! - `conelab runs` (a process, table to a pipe) and `conelab runs --json`: start to exit, the
//!   first listing (every run read, the cache of rows filled) apart from the rest;
//! - attaching by name: the index read, the name found among every run, the run opened and its
//!   first frame drawn into a 200×60 `TestBackend` (in this process, as `bench attach` does).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::Serialize;

use super::median;
use conelab_catalog::{RunError, find, index};
use conelab_core::labels::LabelEdit;
use conelab_run::archive::StoreArchive;

#[derive(Debug, Clone)]
pub struct RunsBench {
    /// Runs registered.
    pub runs: usize,
    /// Steps of the real run (its store's size).
    pub history: u64,
    /// Times each is measured (the median is reported).
    pub repeats: usize,
    /// Where the runs go (a temporary folder is made inside).
    pub work: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunsBenchResult {
    pub runs: usize,
    pub history_steps: u64,
    pub repeats: usize,
    /// The first `conelab runs`, which reads every run and fills the cache of rows.
    pub runs_cold_ms: f64,
    /// `conelab runs` from an empty folder, process start to exit, median (rows cached).
    pub runs_ms: f64,
    pub runs_json_ms: f64,
    /// Rows `runs --json` printed (= runs).
    pub rows: usize,
    /// `attach NAME`: the run found by name among all and its first frame drawn, median.
    pub attach_by_name_ms: f64,
    /// The part of it spent finding the run (index, names).
    pub find_ms: f64,
    /// Targets (issue #37): runs ≤ 500 ms, attach by name ≤ 1,000 ms.
    pub runs_target_ms: f64,
    pub attach_target_ms: f64,
}

fn internal(what: &str) -> impl FnOnce(std::io::Error) -> RunError {
    RunError::internal(what)
}

/// Hard links of every file of `from` under `to` (folders made).
fn link_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            link_tree(&entry.path(), &target)?;
        } else {
            std::fs::hard_link(entry.path(), &target)?;
        }
    }
    Ok(())
}

pub fn bench_runs(b: &RunsBench) -> Result<RunsBenchResult, RunError> {
    super::attach::in_work_folder(&b.work, "runs", |tmp| run_all(b, tmp))
}

fn run_all(b: &RunsBench, tmp: &Path) -> Result<RunsBenchResult, RunError> {
    let state = tmp.join("state");
    let index_dir = state.join("conelab/runs");
    let home = tmp.join("home");
    let root = tmp.join("runs");
    std::fs::create_dir_all(&home).map_err(internal("making the empty folder"))?;
    let exe = std::env::current_exe().map_err(internal("finding conelab"))?;
    let env = |c: &mut Command| {
        c.env("XDG_STATE_HOME", &state)
            .env("XDG_CACHE_HOME", tmp.join("cache"))
            .env("CONELAB_CONFIG", tmp.join("no-config.toml"))
            .env_remove("CONELAB_RUNS")
            .stdin(Stdio::null());
    };
    // The one real run.
    let first = root.join("run-0000");
    let mut c = Command::new(&exe);
    env(&mut c);
    let out = c
        .args([
            "train",
            "synthetic",
            "--model",
            "tiny",
            "--headless",
            "--steps",
        ])
        .arg(b.history.to_string())
        .args(["--eval-every", &(b.history / 4).max(1).to_string()])
        .args(["--snapshot-every", &(b.history / 4).max(1).to_string()])
        .arg("--run-dir")
        .arg(&first)
        .args(["--name", "bench-0000"])
        .output()
        .map_err(internal("the real run"))?;
    if !out.status.success() {
        return Err(RunError::internal_says(format!(
            "the real run failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    // Its copies, registered as runs register themselves.
    for i in 1..b.runs {
        let dir = root.join(format!("run-{i:04}"));
        link_tree(&first, &dir).map_err(internal("linking a copy"))?;
        let store_dir = conelab_store::store_dir(&dir);
        // run.json and its manifest are rewritten (atomically: new files, the links broken).
        let labels = conelab_store::labels::edit_record(
            &store_dir,
            &LabelEdit {
                name: Some(format!("bench-{i:04}")),
                ..LabelEdit::default()
            },
        )?;
        index::register_in(&index_dir, &dir, &labels)
            .map_err(RunError::internal("registering a copy"))?;
    }
    let time_runs = |json: bool| -> Result<(f64, usize), RunError> {
        let mut c = Command::new(&exe);
        env(&mut c);
        c.current_dir(&home).arg("runs").stdout(Stdio::piped());
        if json {
            c.arg("--json");
        }
        let t = Instant::now();
        let out = c.output().map_err(internal("conelab runs"))?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if !out.status.success() {
            return Err(RunError::internal_says(format!(
                "conelab runs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let rows = if json {
            let rows = serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout)
                .map(|v| v.len())
                .map_err(|e| RunError::internal_says(format!("runs --json: {e}")))?;
            // A listing that missed runs would time less work.
            if rows != b.runs {
                return Err(RunError::internal_says(format!(
                    "runs --json listed {rows} runs of {}",
                    b.runs
                )));
            }
            rows
        } else {
            0
        };
        Ok((ms, rows))
    };
    let (mut runs_ms, mut json_ms, mut attach_ms, mut find_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut rows = 0;
    let roots = vec![home.join("checkpoints")];
    let runs_cold_ms = time_runs(false)?.0;
    for r in 0..b.repeats.max(1) {
        runs_ms.push(time_runs(false)?.0);
        let (ms, n) = time_runs(true)?;
        json_ms.push(ms);
        rows = n;
        let name = format!("bench-{:04}", (r * 7919 + b.runs / 2) % b.runs.max(1));
        let mut found = 0.0;
        let ms = super::attach::first_frame(|| {
            let t = Instant::now();
            let known = index::known_in(&index_dir, &roots);
            let dir = find::find_known(&name, &known)?;
            found = t.elapsed().as_secs_f64() * 1e3;
            Ok(conelab_client::open::open(&dir, &StoreArchive)?)
        })?;
        attach_ms.push(ms);
        find_ms.push(found);
    }
    Ok(RunsBenchResult {
        runs: b.runs,
        history_steps: b.history,
        repeats: b.repeats.max(1),
        runs_cold_ms,
        runs_ms: median(runs_ms),
        runs_json_ms: median(json_ms),
        rows,
        attach_by_name_ms: median(attach_ms),
        find_ms: median(find_ms),
        runs_target_ms: 500.0,
        attach_target_ms: 1000.0,
    })
}

impl RunsBenchResult {
    pub fn render(&self) -> String {
        let mut out = format!(
            "bench runs: {} registered runs (each a store of {} steps), from an empty folder, median of {}\n\n",
            self.runs, self.history_steps, self.repeats
        );
        let verdict = |ms: f64, target: f64| if ms <= target { "met" } else { "MISSED" };
        out.push_str(&conelab_catalog::list::plain_table(
            ["what", "ms", "target ms", ""],
            [
                vec![
                    "conelab runs, first (reads every run)".to_string(),
                    format!("{:.0}", self.runs_cold_ms),
                    "–".into(),
                    String::new(),
                ],
                vec![
                    "conelab runs".to_string(),
                    format!("{:.0}", self.runs_ms),
                    format!("{:.0}", self.runs_target_ms),
                    verdict(self.runs_ms, self.runs_target_ms).into(),
                ],
                vec![
                    "conelab runs --json".to_string(),
                    format!("{:.0}", self.runs_json_ms),
                    format!("{:.0}", self.runs_target_ms),
                    verdict(self.runs_json_ms, self.runs_target_ms).into(),
                ],
                vec![
                    "attach NAME: first frame".to_string(),
                    format!("{:.0}", self.attach_by_name_ms),
                    format!("{:.0}", self.attach_target_ms),
                    verdict(self.attach_by_name_ms, self.attach_target_ms).into(),
                ],
                vec![
                    "  of which finding NAME".to_string(),
                    format!("{:.0}", self.find_ms),
                    "–".into(),
                    String::new(),
                ],
            ],
        ));
        out.push_str(&format!("\nrows listed: {}\n", self.rows));
        out
    }
}
