//! Which run `conelab attach` means, and how to reach it: a live run on this host through its
//! socket; a live run on another host is explained (attach there, or forward the socket); a run
//! that is over is opened from its folder, read-only.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::RunError;
use super::answer::StoredAnswers;
use super::client::{RunLink, SocketLink, StoredLink, handshake};
use super::live::{self, Liveness};
use super::protocol::RunHello;
use super::view::{RunInfo, RunStatus, RunView, Vocabulary};
use conelab_base::lockfile::host_name;
use conelab_core::events::FinishReason;
use conelab_core::run_dir::RunDir;

/// What `conelab attach` found.
pub enum Resolved {
    One(PathBuf),
    /// Several live runs: the user picks one.
    Several(Vec<PathBuf>),
}

/// The run `arg` names (a folder, or a folder name under `root`); without one, the live runs
/// under `root`.
pub fn resolve(arg: Option<&Path>, root: &Path) -> Result<Resolved, RunError> {
    if let Some(a) = arg {
        if a.is_dir() {
            return Ok(Resolved::One(a.to_path_buf()));
        }
        let under = root.join(a);
        if under.is_dir() {
            return Ok(Resolved::One(under));
        }
        return Err(RunError::Usage(
            format!(
                "{}: no such run (neither a folder nor a run under {})",
                a.display(),
                root.display()
            )
            .into(),
        ));
    }
    let rows = super::list::list(root)?;
    let mut live: Vec<PathBuf> = rows
        .into_iter()
        .filter(|r| r.status == "live")
        .map(|r| r.path)
        .collect();
    match live.len() {
        0 => Err(RunError::Usage(format!(
            "no live run under {} (`conelab runs` lists them all; `conelab attach RUN` opens a finished one)",
            root.display()
        ).into())),
        1 => Ok(Resolved::One(live.remove(0))),
        _ => Ok(Resolved::Several(live)),
    }
}

/// The runs `args` name (folders, or folder names under `root`), for the compare view: each
/// must be a conelab run (a run.toml or a metrics store), none twice.
pub fn resolve_many(args: &[PathBuf], root: &Path) -> Result<Vec<PathBuf>, RunError> {
    let mut out: Vec<PathBuf> = Vec::new();
    for a in args {
        let dir = match resolve(Some(a), root)? {
            Resolved::One(dir) => dir,
            Resolved::Several(_) => {
                return Err(RunError::Usage(
                    format!("{}: names several runs; name one folder", a.display()).into(),
                ));
            }
        };
        let is_run = dir.join("run.toml").is_file()
            || conelab_store::store_dir(&dir)
                .join(conelab_store::RUN_RECORD)
                .is_file();
        if !is_run {
            return Err(RunError::Usage(
                format!(
                    "{}: not a conelab run (no run.toml, no metrics store)",
                    dir.display()
                )
                .into(),
            ));
        }
        let same = |d: &PathBuf| match (d.canonicalize(), dir.canonicalize()) {
            (Ok(x), Ok(y)) => x == y,
            _ => *d == dir,
        };
        if out.iter().any(same) {
            return Err(RunError::Usage(
                format!("{}: named twice", dir.display()).into(),
            ));
        }
        out.push(dir);
    }
    Ok(out)
}

/// A run reached.
pub struct Opened {
    pub link: Box<dyn RunLink>,
    pub hello: RunHello,
    /// Why the run takes no commands (a run that is over); `None` for a live run.
    pub read_only: Option<String>,
}

/// Connects to a live run's socket (a path: the run's own, or one forwarded with `ssh -L`).
pub fn connect(socket: &Path) -> Result<Opened, RunError> {
    let mut link = SocketLink::connect(socket).map_err(RunError::bad_input)?;
    let hello = handshake(&mut link, "conelab attach", Duration::from_secs(10))
        .map_err(RunError::bad_input_at(socket.display().to_string()))?;
    Ok(Opened {
        link: Box::new(link),
        hello,
        read_only: None,
    })
}

/// Opens the run in `dir`: live → its socket; over → its folder, read-only.
pub fn open(dir: &Path) -> Result<Opened, RunError> {
    let start = Instant::now();
    loop {
        match live::liveness(dir)? {
            Liveness::Live {
                record: Some(rec), ..
            } => {
                let here = host_name();
                if rec.host != here {
                    return Err(RunError::Usage(format!(
                        "{} is live on host {} (pid {}), not on {here}: attach on that host, or forward its socket: `ssh -L /tmp/conelab-{}.sock:{} {}` then `conelab attach --socket /tmp/conelab-{}.sock`",
                        dir.display(),
                        rec.host,
                        rec.pid,
                        rec.pid,
                        rec.socket.display(),
                        rec.host,
                        rec.pid
                    ).into()));
                }
                return connect(&rec.socket);
            }
            Liveness::Live {
                holder,
                record: None,
            } => {
                // Starting: its live record comes once its socket is bound.
                if start.elapsed() > Duration::from_secs(30) {
                    return Err(RunError::Usage(
                        format!(
                            "{} is held by {holder} but does not say where its socket is",
                            dir.display()
                        )
                        .into(),
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Liveness::Ended(f) => {
                let status = match f.status.as_str() {
                    "completed" => RunStatus::Finished {
                        reason: FinishReason::Completed,
                    },
                    "stopped" => RunStatus::Finished {
                        reason: FinishReason::Stopped,
                    },
                    "diverged" => RunStatus::Finished {
                        reason: FinishReason::Diverged,
                    },
                    _ => RunStatus::Failed {
                        message: f.message.clone(),
                    },
                };
                let why = format!(
                    "read-only: the run {} at step {} (`conelab train --resume {}` continues it)",
                    match f.status.as_str() {
                        "completed" => "completed",
                        "stopped" => "was stopped",
                        "diverged" => "diverged",
                        _ => "failed",
                    },
                    f.step,
                    dir.display()
                );
                return stored(dir, status, why);
            }
            Liveness::Crashed => {
                let why = format!(
                    "read-only: the run's process is gone without a final record (crashed): `conelab train --resume {}` continues from its newest checkpoint",
                    dir.display()
                );
                return stored(dir, RunStatus::Crashed, why);
            }
        }
    }
}

/// A run that is over, from its folder.
pub fn stored(dir: &Path, status: RunStatus, why: String) -> Result<Opened, RunError> {
    let run = RunDir::open(dir)?;
    conelab_core::run_dir::verify_run_files(dir)?;
    let spec = run.spec();
    let vocab = Vocabulary::read_tsv(&dir.join("vocab.tsv")).map_err(RunError::bad_input_at(
        dir.join("vocab.tsv").display().to_string(),
    ))?;
    // The objectives in force at the end: the newest checkpoint's, else the configured ones.
    let objectives = run
        .checkpoints()
        .ok()
        .and_then(|c| c.last().cloned())
        .and_then(|p| std::fs::read(p.join("state.json")).ok())
        .and_then(|b| serde_json::from_slice::<conelab_core::state::RunState>(&b).ok())
        .map(|s| s.objectives)
        .unwrap_or_else(|| spec.train.objectives.clone());
    let info = RunInfo {
        name: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        device: spec.device.clone(),
        total_steps: spec.train.steps,
        windows_per_epoch: 0,
        parameters: 0,
        run_dir: Some(dir.to_path_buf()),
    };
    let view = match RunView::from_store(dir, info.clone(), objectives.clone(), status.clone()) {
        Ok(v) => v,
        Err(conelab_store::StoreError::NoStore(_)) => {
            let mut v = RunView::new(objectives);
            v.info = info;
            v.status = status.clone();
            v
        }
        Err(e) => return Err(e.into()),
    };
    let hello = RunHello {
        run_id: view.info.name.clone(),
        dir: dir.to_path_buf(),
        pid: 0,
        host: host_name(),
        vocab_size: vocab.tokens.len(),
        group_bounds: spec.group_bounds,
        status,
        live: false,
        labels: conelab_store::read_run_record(&conelab_store::store_dir(dir))
            .map(|r| r.labels)
            .unwrap_or_default(),
    };
    let answers = Arc::new(StoredAnswers::new(dir.to_path_buf(), Arc::new(vocab)));
    Ok(Opened {
        link: Box::new(StoredLink::new(hello.clone(), view, answers, why.clone())),
        hello,
        read_only: Some(why),
    })
}
