//! Which run `conelab attach` means, and how to reach it: a live run on this host through its
//! socket; a live run on another host is explained (attach there, or forward the socket); a run
//! that is over is opened from its folder, read-only.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::answer::StoredAnswers;
use super::client::{RunLink, SocketLink, StoredLink, handshake};
use super::live::{self, Liveness};
use super::protocol::RunHello;
use super::view::{RunInfo, RunStatus, RunView, Vocabulary};
use super::{RunError, index};
use conelab_base::lockfile::host_name;
use conelab_core::events::FinishReason;
use conelab_core::run_dir::RunDir;

/// What `conelab attach` found.
pub enum Resolved {
    One(PathBuf),
    /// Several live runs: the user picks one (path, the name it goes by).
    Several(Vec<(PathBuf, String)>),
}

/// The name a run goes by: its label (`--name`, `conelab rename`), else its folder's name.
pub fn run_name(dir: &Path) -> String {
    conelab_store::read_run_record(&conelab_store::store_dir(dir))
        .ok()
        .and_then(|r| r.labels.name)
        .unwrap_or_else(|| folder_name(dir))
}

fn folder_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// How many candidates an ambiguous name lists.
const CANDIDATES_SHOWN: usize = 8;

fn ambiguous(arg: &str, found: &[(PathBuf, String)]) -> RunError {
    let mut list: Vec<String> = found
        .iter()
        .take(CANDIDATES_SHOWN)
        .map(|(p, name)| {
            let seed = RunDir::open(p)
                .map(|r| format!("#{}", r.spec().train.seed))
                .unwrap_or_default();
            format!("{name}{seed} ({})", p.display())
        })
        .collect();
    if found.len() > CANDIDATES_SHOWN {
        list.push(format!("and {} more", found.len() - CANDIDATES_SHOWN));
    }
    RunError::Usage(
        format!(
            "{arg} names {} runs: {}; give NAME#SEED, a longer name or the folder",
            found.len(),
            list.join(", ")
        )
        .into(),
    )
}

/// The run `arg` names among the `known` ones (not a path): a folder's name, a run's name,
/// `NAME#SEED` (a name holding a `#` itself is matched whole first), or a prefix that only one
/// run's name or folder starts with. Exact beats prefix; an ambiguous name is an error listing
/// the candidates.
pub fn find_known(arg: &str, known: &index::Known) -> Result<PathBuf, RunError> {
    let pick = |found: Vec<(PathBuf, String)>| match found.len() {
        0 => None,
        1 => Some(Ok(found[0].0.clone())),
        _ => Some(Err(ambiguous(arg, &found))),
    };
    let by_folder: Vec<(PathBuf, String)> = known
        .runs
        .iter()
        .filter(|p| folder_name(p) == arg)
        .map(|p| (p.clone(), run_name(p)))
        .collect();
    if let Some(r) = pick(by_folder) {
        return r;
    }
    let named: Vec<(PathBuf, String)> = known
        .runs
        .iter()
        .map(|p| (p.clone(), run_name(p)))
        .collect();
    // A name may hold a `#` itself: the whole argument as a name comes first.
    let exact: Vec<_> = named.iter().filter(|(_, n)| n == arg).cloned().collect();
    if let Some(r) = pick(exact) {
        return r;
    }
    if let Some((name, seed)) = arg.rsplit_once('#')
        && let Ok(seed) = seed.parse::<u64>()
    {
        let found: Vec<(PathBuf, String)> = named
            .iter()
            .filter(|(p, n)| {
                (n == name || folder_name(p) == name)
                    && RunDir::open(p).is_ok_and(|r| r.spec().train.seed == seed)
            })
            .cloned()
            .collect();
        if let Some(r) = pick(found) {
            return r;
        }
    }
    let prefix: Vec<_> = named
        .iter()
        .filter(|(p, n)| n.starts_with(arg) || folder_name(p).starts_with(arg))
        .cloned()
        .collect();
    if let Some(r) = pick(prefix) {
        return r;
    }
    Err(RunError::Usage(
        format!(
            "{arg}: no such run (not a folder, nor the name or folder of any of the {} runs known: `conelab runs` lists them)",
            known.runs.len()
        )
        .into(),
    ))
}

/// The run `arg` names: an existing folder (a path wins over a name), a folder under `root`,
/// else a run known to this user by name ([`find_known`]). Always absolute.
pub fn find(arg: &Path, root: &Path) -> Result<PathBuf, RunError> {
    if arg.is_dir() {
        return Ok(index::absolute(arg));
    }
    let under = root.join(arg);
    if under.is_dir() {
        return Ok(index::absolute(&under));
    }
    let known = index::known();
    for w in &known.warnings {
        super::say(&format!("warning: {w}"));
    }
    find_known(&arg.to_string_lossy(), &known)
}

/// The run `arg` names ([`find`]); without one, the live runs this user has (in the index and
/// the run roots).
pub fn resolve(arg: Option<&Path>, root: &Path) -> Result<Resolved, RunError> {
    if let Some(a) = arg {
        return find(a, root).map(Resolved::One);
    }
    let known = index::known();
    let mut live: Vec<(PathBuf, String)> = known
        .runs
        .iter()
        .filter(|p| matches!(live::liveness(p), Ok(Liveness::Live { .. })))
        .map(|p| (p.clone(), run_name(p)))
        .collect();
    match live.len() {
        0 => Err(RunError::Usage(format!(
            "no live run among the {} runs known (`conelab runs` lists them all; `conelab attach RUN` opens a finished one)",
            known.runs.len()
        ).into())),
        1 => Ok(Resolved::One(live.remove(0).0)),
        _ => Ok(Resolved::Several(live)),
    }
}

/// The runs `args` name ([`find`]), for the compare view: each must be a conelab run (a
/// run.toml or a metrics store), none twice.
pub fn resolve_many(args: &[PathBuf], root: &Path) -> Result<Vec<PathBuf>, RunError> {
    let mut out: Vec<PathBuf> = Vec::new();
    for a in args {
        let dir = find(a, root)?;
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
        if out.contains(&dir) {
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
                let status = status_of(&f);
                let why = format!(
                    "read-only: the run {} (`conelab train --resume {}` continues it)",
                    ended_at(&f),
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

/// How a run ended and where, in words: "completed at step 60", "diverged after step 4 (loss
/// NaN at step 5)" — a final record's step is the steps trained.
pub fn ended_at(f: &live::FinalRecord) -> String {
    match f.status.as_str() {
        "completed" => format!("completed at step {}", f.step),
        "stopped" => format!("was stopped at step {}", f.step),
        "diverged" if !f.message.is_empty() => {
            format!("diverged after step {} ({})", f.step, f.message)
        }
        "diverged" => format!("diverged after step {}", f.step),
        _ => format!("failed at step {}", f.step),
    }
}

/// How a run ended, from its final record.
pub fn status_of(f: &live::FinalRecord) -> RunStatus {
    match f.status.as_str() {
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
        eval_every: spec.train.eval_every,
        tokens_per_update: (spec.train.batch * spec.model.window()) as u64,
    };
    let view = match conelab_store::history::read(dir) {
        Ok(history) => {
            RunView::from_history(&history, info.clone(), objectives.clone(), status.clone())
        }
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

#[cfg(test)]
mod ended_tests {
    use super::*;

    /// A final record's step is the steps trained: a divergence reads "after" it, with the
    /// step that diverged from the message.
    #[test]
    fn how_a_run_ended_reads_in_words() {
        let f = |status: &str, step: u64, message: &str| live::FinalRecord {
            status: status.into(),
            step,
            total_steps: 60,
            exit_code: 0,
            message: message.into(),
            by_signal: false,
            finished_unix: 0.0,
            host: "h".into(),
        };
        assert_eq!(ended_at(&f("completed", 60, "")), "completed at step 60");
        assert_eq!(
            ended_at(&f("diverged", 4, "loss NaN at step 5")),
            "diverged after step 4 (loss NaN at step 5)"
        );
        assert_eq!(ended_at(&f("stopped", 7, "")), "was stopped at step 7");
    }
}
