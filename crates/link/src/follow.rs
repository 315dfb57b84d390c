//! Following runs from their folders (the compare view): a thread of its own reads each run's
//! metrics store as its writer adds segments ([`conelab_store::tail`]), its state (live, or how
//! it ended) and its labels, and sends what changed. The view never touches a disk and a run
//! never knows it is watched, so comparing costs a live run nothing; its numbers arrive with its
//! store's flush interval (a few seconds behind its own viewer).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use rustc_hash::FxHashSet;

use super::live::{self, Liveness};
use conelab_store::tail::MetricsTail;
use conelab_store::{StoreError, col};

/// One metrics row of a followed run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    /// The series (`store::series_key` of split, group, metric).
    pub key: i64,
    pub step: u64,
    /// Seconds since the Unix epoch.
    pub wall: f64,
    pub value: f64,
}

/// What the follower learnt about run number `run` (its index in the list it was given).
#[derive(Debug, Clone, PartialEq)]
pub enum FollowUpdate {
    /// New rows of the wanted series; `reset`: they replace everything sent before.
    Rows {
        run: usize,
        reset: bool,
        rows: Vec<Row>,
    },
    /// Its label (name and tags) and status (live, completed, stopped, …), when they change.
    State {
        run: usize,
        label: String,
        status: String,
    },
    /// A segment skipped as corrupt (said once).
    Warning { run: usize, message: String },
    /// Its store cannot be read right now (`Some`, said once per new reason), or can again
    /// (`None`).
    Error { run: usize, message: Option<String> },
    /// The follower itself stopped (a bug): nothing more will come.
    Stopped { message: String },
}

const COLUMNS: [&str; 4] = [col::KEY, col::STEP, col::WALL_TIME, col::VALUE];

/// A running follower: its updates, and what stops its thread when dropped (the two can be
/// held apart: the updates handed on to a viewer's loop, the stop kept by the view).
pub struct Follower {
    pub updates: Receiver<FollowUpdate>,
    pub stop: StopFollowing,
}

/// Stops the follower's thread when dropped.
pub struct StopFollowing(Arc<AtomicBool>);

impl Drop for StopFollowing {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Starts following `dirs` (every `every`), sending the rows of the series in `wanted`.
pub fn spawn(
    dirs: Vec<PathBuf>,
    wanted: FxHashSet<i64>,
    every: Duration,
) -> std::io::Result<Follower> {
    let (tx, rx) = channel();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::Builder::new()
        .name("conelab-follow".into())
        .spawn(move || {
            let said = tx.clone();
            // A panic (a bug, or a library's on a strange file) is said, not a silent freeze.
            let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                follow(dirs, wanted, every, tx, flag)
            }));
            if let Err(panic) = ended {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                let _ = said.send(FollowUpdate::Stopped {
                    message: format!("reading the runs stopped: {message}"),
                });
            }
        })?;
    Ok(Follower {
        updates: rx,
        stop: StopFollowing(stop),
    })
}

fn follow(
    dirs: Vec<PathBuf>,
    wanted: FxHashSet<i64>,
    every: Duration,
    tx: Sender<FollowUpdate>,
    stop: Arc<AtomicBool>,
) {
    let mut tails: Vec<MetricsTail> = dirs.iter().map(|d| MetricsTail::new(d)).collect();
    let mut states: Vec<Option<(String, String)>> = vec![None; dirs.len()];
    // The error said last per run: said once until it changes, cleared once reading works.
    let mut errors: Vec<Option<String>> = vec![None; dirs.len()];
    while !stop.load(Ordering::SeqCst) {
        for (run, dir) in dirs.iter().enumerate() {
            let mut out = Vec::new();
            let state = (label(dir), status(dir));
            if states[run].as_ref() != Some(&state) {
                let (label, status) = state.clone();
                states[run] = Some(state);
                out.push(FollowUpdate::State { run, label, status });
            }
            let read = tails[run].poll(&COLUMNS).and_then(|read| {
                let rows = rows(&read.rows, &wanted).inspect_err(|_| {
                    // Read but unusable: read it all again next time, as a reset.
                    tails[run].restart();
                })?;
                Ok((read, rows))
            });
            match read {
                Ok((read, rows)) => {
                    if errors[run].take().is_some() {
                        out.push(FollowUpdate::Error { run, message: None });
                    }
                    for message in read.warnings {
                        out.push(FollowUpdate::Warning { run, message });
                    }
                    if read.reset || !rows.is_empty() {
                        out.push(FollowUpdate::Rows {
                            run,
                            reset: read.reset,
                            rows,
                        });
                    }
                }
                Err(e) => {
                    let message = format!("metrics store: {e}");
                    if errors[run].as_deref() != Some(message.as_str()) {
                        errors[run] = Some(message.clone());
                        out.push(FollowUpdate::Error {
                            run,
                            message: Some(message),
                        });
                    }
                }
            }
            for u in out {
                if tx.send(u).is_err() {
                    return;
                }
            }
        }
        std::thread::sleep(every);
    }
}

fn rows(df: &conelab_store::Frame, wanted: &FxHashSet<i64>) -> Result<Vec<Row>, StoreError> {
    Ok(conelab_store::rows::metric_rows(df)?
        .into_iter()
        .filter(|r| wanted.contains(&r.key))
        .filter_map(|r| {
            Some(Row {
                key: r.key,
                step: r.step,
                wall: r.wall_time.unwrap_or(f64::NAN),
                value: r.value?,
            })
        })
        .collect())
}

/// The run's label: its name (else its folder's), then its tags.
fn label(dir: &std::path::Path) -> String {
    let folder = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string());
    match conelab_store::read_run_record(&conelab_store::store_dir(dir)) {
        Ok(record) => {
            let name = record.labels.name.clone().unwrap_or(folder);
            let tags: String = record
                .labels
                .tags
                .iter()
                .map(|t| format!(" #{t}"))
                .collect();
            format!("{name}{tags}")
        }
        Err(_) => folder,
    }
}

/// live, completed, stopped, diverged, failed, crashed — or unreadable.
fn status(dir: &std::path::Path) -> String {
    match live::liveness(dir) {
        Ok(Liveness::Live { .. }) => "live".into(),
        Ok(Liveness::Ended(f)) => f.status,
        Ok(Liveness::Crashed) => "crashed".into(),
        Err(_) => "unreadable".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conelab_store::{RunRecord, StoreWriter, series_key};

    #[test]
    fn sends_the_wanted_rows_as_they_are_written() {
        let tmp = tempfile::tempdir().expect("tmp");
        let run = tmp.path().join("a");
        std::fs::create_dir_all(&run).expect("dir");
        let mut record = RunRecord::new("a", String::new(), "c".into(), "cpu".into());
        record.labels.name = Some("baseline".into());
        record.labels.tags = vec!["seed1".into()];
        let mut w = StoreWriter::open(&run, &record).expect("writer");
        w.push_metric(1, "train", "total", "loss", 5.0);
        w.push_metric(1, "train", "total", "lr", 0.1);
        w.flush().expect("flush");
        let loss = series_key("train", "total", "loss");
        let wanted: FxHashSet<i64> = [loss].into_iter().collect();
        let follower = spawn(vec![run.clone()], wanted, Duration::from_millis(20)).expect("spawn");
        let rx = &follower.updates;
        let wait = |what: &str, ok: &dyn Fn(&FollowUpdate) -> bool| loop {
            let u = rx
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            if ok(&u) {
                return u;
            }
        };
        let state = wait("state", &|u| matches!(u, FollowUpdate::State { .. }));
        assert_eq!(
            state,
            FollowUpdate::State {
                run: 0,
                label: "baseline #seed1".into(),
                // No lock held and no final record.
                status: "crashed".into()
            }
        );
        let first = wait("rows", &|u| matches!(u, FollowUpdate::Rows { .. }));
        let FollowUpdate::Rows { reset, rows, .. } = first else {
            unreachable!()
        };
        assert!(reset);
        assert_eq!(rows.len(), 1, "lr is not wanted: {rows:?}");
        assert_eq!((rows[0].key, rows[0].step, rows[0].value), (loss, 1, 5.0));
        assert!(rows[0].wall > 1.6e9, "wall time is Unix seconds");
        w.push_metric(2, "train", "total", "loss", 4.0);
        w.flush().expect("flush");
        let next = wait(
            "more rows",
            &|u| matches!(u, FollowUpdate::Rows { rows, .. } if !rows.is_empty()),
        );
        let FollowUpdate::Rows { reset, rows, .. } = next else {
            unreachable!()
        };
        assert!(!reset);
        assert_eq!(rows.iter().map(|r| r.step).collect::<Vec<_>>(), vec![2]);
    }
}
