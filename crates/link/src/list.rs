//! `conelab runs`: one row per run folder — its status (from the run's lock and its final
//! record), progress, device, objectives, best validation PPL, newest isotropy — read from the
//! folder alone. One unreadable folder is a row that says why, never a failure of the command.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::RunError;
use super::live::{self, Liveness};
use conelab_core::run_dir::RunDir;
use conelab_store::{self as store, col, series_key, split};

/// One run, as `conelab runs --json` prints it (keys documented in docs/REFERENCE.md; stable).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    /// The run's label: its name (`train --name`, `conelab rename`), else the folder's name.
    pub name: String,
    /// The folder's name.
    pub dir: String,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Damage found in the run's files (status `damaged` unless it is live), one line each:
    /// a file that fails its checksum, store segments skipped or set aside. What `runs` can see
    /// without reading every byte; `conelab store verify` checks the rest.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub damaged: Vec<String>,
}

/// A folder that looks like a run (or the remains of one).
fn looks_like_run(p: &Path) -> bool {
    [
        "run.toml",
        live::RUN_LOCK,
        store::STORE_DIR,
        live::FINAL_FILE,
    ]
    .iter()
    .any(|f| p.join(f).exists())
}

/// The runs under `root`, newest first by start time (then by name).
pub fn list(root: &Path) -> Result<Vec<RunRow>, RunError> {
    let entries =
        std::fs::read_dir(root).map_err(RunError::bad_input_at(root.display().to_string()))?;
    let mut rows: Vec<RunRow> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && looks_like_run(p))
        .map(|p| row(&p))
        .collect();
    rows.sort_by(|a, b| b.started.cmp(&a.started).then_with(|| a.dir.cmp(&b.dir)));
    Ok(rows)
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
    }
    match RunDir::open(dir) {
        Ok(run) => {
            r.total_steps = Some(run.spec().train.steps);
            r.device = Some(run.spec().device.clone());
            if r.step.is_none() {
                r.step = run
                    .checkpoints()
                    .ok()
                    .and_then(|c| c.last().and_then(|p| conelab_core::run_dir::step_of(p)));
            }
        }
        Err(e @ conelab_core::run_dir::CheckpointError::Corrupt { .. }) => {
            r.damaged.push(e.to_string());
            mark_damaged(&mut r);
            return r;
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
    match store::load(dir) {
        Ok(st) => {
            r.started = Some(rfc3339(st.run.started_unix));
            let labels = st.run.labels.clone();
            if let Some(name) = labels.name {
                r.name = name;
            }
            r.tags = labels.tags;
            r.notes = labels.notes;
            let end = ended_at.unwrap_or_else(store::unix_now);
            r.seconds = Some((end - st.run.started_unix).max(0.0));
            // Segments skipped as corrupt, a lost run.json.
            r.damaged.extend(st.warnings.iter().cloned());
            if let Ok(numbers) = numbers(&st) {
                if r.status == "live" || r.status == "crashed" {
                    r.step = numbers.step.or(r.step);
                }
                r.best_valid_ppl = numbers.best_valid_ppl;
                r.i1 = numbers.i1;
                r.mean_cos = numbers.mean_cos;
                r.objective = numbers.objective;
            }
        }
        Err(store::StoreError::NoStore(_)) => {}
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

#[derive(Default)]
struct Numbers {
    step: Option<u64>,
    best_valid_ppl: Option<f64>,
    i1: Option<f64>,
    mean_cos: Option<f64>,
    objective: Option<String>,
}

fn numbers(st: &store::LoadedStore) -> Result<Numbers, store::StoreError> {
    let df = &st.metrics;
    let keys = df.column(col::KEY)?.i64()?;
    let steps = df.column(col::STEP)?.u64()?;
    let values = df.column(col::VALUE)?.f64()?;
    let (loss, ppl, i1, cos) = (
        series_key(split::TRAIN, "total", "loss"),
        series_key(split::VALID, "total", "ppl"),
        series_key(split::EMBEDDING, "total", "i1"),
        series_key(split::EMBEDDING, "total", "mean_cos"),
    );
    let mut n = Numbers::default();
    let mut newest_i1 = 0;
    let mut newest_cos = 0;
    for ((k, s), v) in keys.iter().zip(steps.iter()).zip(values.iter()) {
        let (Some(k), Some(s), Some(v)) = (k, s, v) else {
            continue;
        };
        if k == loss {
            n.step = Some(n.step.map_or(s, |x| x.max(s)));
        } else if k == ppl && v.is_finite() {
            n.best_valid_ppl = Some(n.best_valid_ppl.map_or(v, |b| b.min(v)));
        } else if k == i1 && s >= newest_i1 {
            newest_i1 = s;
            n.i1 = Some(v);
        } else if k == cos && s >= newest_cos {
            newest_cos = s;
            n.mean_cos = Some(v);
        }
    }
    // The objectives in force: the newest start or change of objectives.
    n.objective = conelab_store::query::objective_at(&st.events, None)?;
    Ok(n)
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339(unix: f64) -> String {
    super::clock::format_unix(unix.max(0.0) as i64, "%Y-%m-%dT%H:%M:%SZ")
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

/// The human table of `conelab runs`.
pub fn render(rows: &[RunRow]) -> String {
    let header = [
        "name",
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
    ];
    let cells: Vec<[String; 11]> = rows
        .iter()
        .map(|r| {
            let status = match (&r.status[..], r.pid, &r.host) {
                ("live", Some(pid), Some(host)) => format!("live (pid {pid} on {host})"),
                (s, _, _) => s.to_string(),
            };
            let num =
                |v: Option<f64>, d: usize| v.map_or("–".to_string(), |v| format!("{v:.d$}"));
            [
                r.name.clone(),
                if r.tags.is_empty() {
                    "–".into()
                } else {
                    r.tags.join(",")
                },
                status,
                step_cell(r),
                r.device.clone().unwrap_or_else(|| "–".into()),
                r.objective.clone().unwrap_or_else(|| "–".into()),
                num(r.best_valid_ppl, 2),
                num(r.i1, 3),
                num(r.mean_cos, 3),
                r.started
                    .as_deref()
                    .map(|s| s.replace('T', " ").trim_end_matches('Z').to_string())
                    .unwrap_or_else(|| "–".into()),
                r.seconds
                    .map_or("–".into(), conelab_widgets::format_duration),
            ]
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

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0.0), "1970-01-01T00:00:00Z");
        // 2000-02-29 12:34:56 UTC (a leap day) = 951827696.
        assert_eq!(rfc3339(951_827_696.0), "2000-02-29T12:34:56Z");
        assert_eq!(rfc3339(1_795_392_000.0), "2026-11-23T00:00:00Z");
    }
}
