//! How a viewer reaches a run: a live run on this host through its socket; a live run on another
//! host is explained (attach there, or forward the socket); a run that is over is opened from
//! its folder, read-only — its history, labels and answers read through a [`RunArchive`] that
//! the side linking the store provides.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use conelab_base::error::{BoxError, Invalid};
use conelab_base::lockfile::host_name;
use conelab_core::events::StoredHistory;
use conelab_core::labels::RunLabels;
use conelab_core::run_dir::live::{self, LiveError, Liveness};
use conelab_core::run_dir::{CheckpointError, RunDir};
use conelab_protocol::message::RunHello;
use conelab_protocol::requests::Answers;
use conelab_protocol::view::{RunInfo, RunStatus, RunView, Vocabulary, ended_at, status_of};

use crate::link::{RunLink, SocketLink, StoredLink, handshake};

/// Why a run cannot be opened: bad input all (exit 2), the OS's errors among its causes.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A run that cannot be reached from here, in the user's words.
    #[error(transparent)]
    Usage(Invalid),
    /// The socket refused or did not answer.
    #[error(transparent)]
    BadInput(BoxError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Live(#[from] LiveError),
    /// The run's stored history could not be read.
    #[error(transparent)]
    Archive(BoxError),
}

impl OpenError {
    fn at<E: Into<BoxError>>(what: String) -> impl FnOnce(E) -> Self {
        move |e| OpenError::Usage(Invalid::because(what)(e))
    }
}

/// What a viewer needs of a run that is over, read by the side that links the store (the run
/// crate's archive): a viewer links neither polars nor the trainer.
pub trait RunArchive: Send + Sync {
    /// The run's stored history; `None`: the run has no store.
    fn history(&self, dir: &Path) -> Result<Option<StoredHistory>, BoxError>;
    /// Its name, tags and notes (none when its record cannot be read).
    fn labels(&self, dir: &Path) -> RunLabels;
    /// The answers to a viewer's requests about it: stored projections, neighbours in W of its
    /// newest checkpoint.
    fn answers(&self, dir: &Path, vocab: Arc<Vocabulary>) -> Arc<dyn Answers>;
}

/// A run reached.
pub struct Opened {
    pub link: Box<dyn RunLink>,
    pub hello: RunHello,
    /// Why the run takes no commands (a run that is over); `None` for a live run.
    pub read_only: Option<String>,
}

/// Connects to a live run's socket (a path: the run's own, or one forwarded with `ssh -L`).
pub fn connect(socket: &Path) -> Result<Opened, OpenError> {
    let mut link = SocketLink::connect(socket).map_err(|e| OpenError::BadInput(e.into()))?;
    let hello = handshake(&mut link, "conelab attach", Duration::from_secs(10))
        .map_err(OpenError::at(socket.display().to_string()))?;
    Ok(Opened {
        link: Box::new(link),
        hello,
        read_only: None,
    })
}

/// Opens the run in `dir`: live → its socket; over → its folder, read-only, through `archive`.
pub fn open(dir: &Path, archive: &dyn RunArchive) -> Result<Opened, OpenError> {
    let start = Instant::now();
    loop {
        match live::liveness(dir)? {
            Liveness::Live {
                record: Some(rec), ..
            } => {
                let here = host_name();
                if rec.host != here {
                    return Err(OpenError::Usage(format!(
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
                    return Err(OpenError::Usage(
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
                let status = status_of(&f);
                let why = format!(
                    "read-only: the run {} (`conelab train --resume {}` continues it)",
                    ended_at(&f),
                    dir.display()
                );
                return stored(dir, status, why, archive);
            }
            Liveness::EndedDamaged(reason) => {
                let why = format!(
                    "read-only: the run is over, and its final record is damaged ({reason}): `conelab train --resume {}` continues it",
                    dir.display()
                );
                let status = RunStatus::Failed {
                    message: format!("how it ended is not known: {reason}"),
                };
                return stored(dir, status, why, archive);
            }
            Liveness::Crashed => {
                let why = format!(
                    "read-only: the run's process is gone without a final record (crashed): `conelab train --resume {}` continues from its newest checkpoint",
                    dir.display()
                );
                return stored(dir, RunStatus::Crashed, why, archive);
            }
        }
    }
}

/// A run that is over, from its folder.
pub fn stored(
    dir: &Path,
    status: RunStatus,
    why: String,
    archive: &dyn RunArchive,
) -> Result<Opened, OpenError> {
    let run = RunDir::open(dir)?;
    // Checked (and rebuilt from a checkpoint's copy where damaged) before it is read.
    run.vocab_tokens()?;
    let spec = run.spec();
    let vocab = Vocabulary::read_tsv(&dir.join("vocab.tsv"))
        .map_err(OpenError::at(dir.join("vocab.tsv").display().to_string()))?;
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
        eval_every: spec.train.eval_every,
        tokens_per_update: (spec.train.batch * spec.model.window()) as u64,
    };
    let view = match archive.history(dir).map_err(OpenError::Archive)? {
        Some(history) => {
            RunView::from_history(&history, info.clone(), objectives.clone(), status.clone())
        }
        None => {
            let mut v = RunView::new(objectives);
            v.info = info;
            v.status = status.clone();
            v
        }
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
        labels: archive.labels(dir),
    };
    let answers = archive.answers(dir, Arc::new(vocab));
    Ok(Opened {
        link: Box::new(StoredLink::new(hello.clone(), view, answers, why.clone())),
        hello,
        read_only: Some(why),
    })
}
