//! Following runs from their folders (the compare view): a thread of its own reads each run's
//! metrics store as its writer adds segments ([`conelab_store::tail`]), its state (live, or how
//! it ended) and its labels, and sends what changed. The view never touches a disk and a run
//! never knows it is watched, so comparing costs a live run nothing; its numbers arrive with its
//! store's flush interval (a few seconds behind its own viewer).
//!
//! Only the series the view asked for are sent (a run holds hundreds, some per step); the names
//! of every series met are sent once, so the view can offer any of them, and asking for one more
//! ([`Follower::want`]) reads the stores again from the start with it included.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use rustc_hash::FxHashSet;

use conelab_client::follow::{FollowUpdate, Follower, Row, StopFollowing};
use conelab_core::run_dir::live::{self, Liveness};
use conelab_core::series::SeriesName;
use conelab_store::tail::{MetricsTail, TailRead};
use conelab_store::{StoreError, col};

const COLUMNS: [&str; 7] = [
    col::KEY,
    col::STEP,
    col::WALL_TIME,
    col::VALUE,
    col::SPLIT,
    col::GROUP,
    col::METRIC,
];

/// Starts following `dirs` (every `every`), sending the rows of the series in `wanted`.
pub fn spawn(
    dirs: Vec<PathBuf>,
    wanted: FxHashSet<i64>,
    every: Duration,
) -> std::io::Result<Follower> {
    let (tx, rx) = channel();
    let (want, wants) = channel();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::Builder::new()
        .name("conelab-follow".into())
        .spawn(move || {
            let said = tx.clone();
            // A panic (a bug, or a library's on a strange file) is said, not a silent freeze.
            let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                follow(dirs, wanted, every, tx, wants, flag)
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
        stop: StopFollowing::new(stop),
        want,
    })
}

fn follow(
    dirs: Vec<PathBuf>,
    mut wanted: FxHashSet<i64>,
    every: Duration,
    tx: Sender<FollowUpdate>,
    wants: Receiver<i64>,
    stop: Arc<AtomicBool>,
) {
    // Series names already sent (the view keeps them).
    let mut named: FxHashSet<i64> = FxHashSet::default();
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
                let rows = rows(&read, &wanted).inspect_err(|_| {
                    // Read but unusable: read it all again next time, as a reset.
                    tails[run].restart();
                })?;
                Ok((read, rows))
            });
            match read {
                Ok((read, rows)) => {
                    match read.new_series(|k| named.contains(&k)) {
                        Ok(new) => {
                            let names: Vec<SeriesName> = new
                                .into_iter()
                                .map(|(key, name)| {
                                    named.insert(key);
                                    name
                                })
                                .filter(SeriesName::is_curve)
                                .collect();
                            if !names.is_empty() {
                                out.push(FollowUpdate::Series { names });
                            }
                        }
                        // Names are an offer: rows without them are still rows.
                        Err(e) => out.push(FollowUpdate::Warning {
                            run,
                            message: format!("series names unreadable: {e}"),
                        }),
                    }
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
        // Wait for the next poll, or for a series asked for (then read again at once).
        let mut asked = match wants.recv_timeout(every) {
            Ok(key) => vec![key],
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Vec::new(),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(every);
                Vec::new()
            }
        };
        asked.extend(wants.try_iter());
        let mut more = false;
        for key in asked {
            more |= wanted.insert(key);
        }
        if more {
            // The new series' history is in segments already read: read everything again.
            for tail in &mut tails {
                tail.restart();
            }
        }
    }
}

fn rows(read: &TailRead, wanted: &FxHashSet<i64>) -> Result<Vec<Row>, StoreError> {
    Ok(read
        .metric_rows()?
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
        Ok(Liveness::EndedDamaged(_)) => "damaged".into(),
        Err(_) => "unreadable".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conelab_core::series::series_key;
    use conelab_store::{RunRecord, StoreWriter};

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

    /// Issue #37: any stored series can be compared, not only the ones asked for at the start.
    #[test]
    fn names_every_series_once_and_sends_one_asked_for_with_its_history() {
        let tmp = tempfile::tempdir().expect("tmp");
        let run = tmp.path().join("a");
        std::fs::create_dir_all(&run).expect("dir");
        let record = RunRecord::new("a", String::new(), "c".into(), "cpu".into());
        let mut w = StoreWriter::open(&run, &record).expect("writer");
        for step in 1..=3 {
            w.push_metric(step, "train", "total", "loss", 5.0);
            w.push_metric(step, "valid", "rare", "uniq", step as f64);
            w.push_metric(step, "spectrum", "total", "sv0000", 1.0);
            w.push_metric(step, "valid", "total", "hist/0042", 2.0);
        }
        w.push_metric(0, "run", "total", "total_steps", 3.0);
        w.flush().expect("flush");
        let loss = series_key("train", "total", "loss");
        let uniq = series_key("valid", "rare", "uniq");
        let follower = spawn(
            vec![run.clone()],
            [loss].into_iter().collect(),
            Duration::from_secs(3600),
        )
        .expect("spawn");
        let rx = &follower.updates;
        let next = |what: &str, ok: &dyn Fn(&FollowUpdate) -> bool| loop {
            let u = rx
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            if ok(&u) {
                return u;
            }
        };
        let FollowUpdate::Series { names } =
            next("names", &|u| matches!(u, FollowUpdate::Series { .. }))
        else {
            unreachable!()
        };
        let name = |s: &str, g: &str, m: &str| SeriesName {
            split: s.into(),
            group: g.into(),
            metric: m.into(),
        };
        // Spectrum values, run facts and histogram bins are not curves.
        assert_eq!(
            names,
            vec![
                name("train", "total", "loss"),
                name("valid", "rare", "uniq")
            ]
        );
        assert_eq!(names[1].key(), uniq);
        // The poll interval is an hour: what comes next comes because it was asked for.
        follower.want.send(uniq).expect("the follower listens");
        let FollowUpdate::Rows { reset, rows, .. } = next(
            "the asked-for series",
            &|u| matches!(u, FollowUpdate::Rows { rows, .. } if rows.iter().any(|r| r.key == uniq)),
        ) else {
            unreachable!()
        };
        assert!(reset, "read again from the start");
        let of = |key| {
            rows.iter()
                .filter(|r| r.key == key)
                .map(|r| (r.step, r.value))
                .collect::<Vec<_>>()
        };
        assert_eq!(of(uniq), vec![(1, 1.0), (2, 2.0), (3, 3.0)], "its history");
        assert_eq!(of(loss).len(), 3, "and what was wanted before");
        // Names already said are not said again on the re-read.
        while let Ok(u) = rx.recv_timeout(Duration::from_millis(200)) {
            assert!(!matches!(u, FollowUpdate::Series { .. }), "{u:?}");
        }
    }
}
