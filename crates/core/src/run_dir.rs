//! Run directories and checkpoints on disk: the layout, and the crash-safe commit of a checkpoint
//! that the training crate has written into a staging folder.
//!
//! ```text
//! checkpoints/<run>/
//!   run.toml                 what the run is: corpus, groups, device, model and training config
//!   vocab.tsv                token <TAB> training count, one line per id
//!   step-000500/             one checkpoint, written as a temp dir then renamed (atomic)
//!     model.safetensors      every parameter, by module path (W is `…embedding.weight`)
//!     optimizer.bpk          optimizer state (burnpack), keyed by the model's parameter ids
//!     spectral-optimizer.bpk the optimizer state of U, σ, V (only while spectrum control is on)
//!     state.json             counters, lr state, applied commands
//!     recurrent.safetensors  the LSTM state carried into the next window (LSTM runs only)
//!   best/                    the checkpoint with the lowest validation PPL so far (same files)
//! ```
//! A checkpoint is written into a staging folder (`.step-NNNNNN.staged-…`), every file and the
//! folder fsynced, then renamed into place and the run directory fsynced, so a crash leaves
//! either the whole checkpoint or none of it. Re-saving a step renames the old folder aside
//! first and deletes it only once the new one is in place. Leftovers of a killed process are
//! cleaned (or, for a folder set aside, put back) when a run starts ([`RunDir::recover`]).
//! Folders are ordered by the step they name, whatever its width. The newest `keep` are kept.
//!
//! `best/` is written the same way (`.best.staged-…`, the old one set aside as `.best.old-…`)
//! whenever an evaluation beats the PPL its own `state.json` records; it is never pruned and never
//! resumed from (a resume starts from the newest `step-N`). Runs written before it have none.
//!
//! Under a metrics store the rename waits for the store: a checkpoint counts only once the store
//! is durable up to its step (`conelab_train::checkpoint::Checkpointer::deferred`,
//! `conelab_store::recorder`).

pub mod ending;
pub mod live;
pub mod matrix;
pub mod rebuild;

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use conelab_base::atomic::sync_dir;
use conelab_base::integrity::{IntegrityError, MANIFEST, verify_file, write_recorded};
use conelab_data::{Corpus, CorpusSource, DataError, GroupBounds, LoadOptions, SynthConfig, Vocab};

use crate::model::ModelConfig;
use crate::train_config::TrainConfig;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a conelab run directory (no run.toml)", .0.display())]
    NotARun(PathBuf),
    #[error("{}: no checkpoint (no step-NNNNNN folder)", .0.display())]
    NoCheckpoint(PathBuf),
    #[error(
        "{}: no best/ checkpoint (the run was written before conelab kept one, or no validation ran yet): use --step last or a step",
        .0.display()
    )]
    NoBest(PathBuf),
    #[error("{}: no checkpoint at step {step} (checkpoints: {have})", path.display())]
    NoStep {
        path: PathBuf,
        step: u64,
        have: String,
    },
    #[error("{}: corrupt: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("{}: {reason}", path.display())]
    Mismatch { path: PathBuf, reason: String },
    /// A checkpoint's file could not be written (a full disk, an I/O error under the encoder).
    #[error("{}: cannot be written: {reason}", path.display())]
    Write { path: PathBuf, reason: String },
    /// Something of the model could not be written out (a backend or encoder refused).
    #[error("{}: cannot be encoded", path.display())]
    Encode {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The weights at `step` are not fit to be a checkpoint (not finite, or beyond the bound).
    #[error("the weights at step {step} are not checkpointed: {reason}")]
    Unhealthy { step: u64, reason: String },
    /// The training engine's error (building or restoring a trainer), kept whole.
    #[error(transparent)]
    Engine(Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    Data(#[from] DataError),
}

/// Damage found by a checksum: `Corrupt` naming the file; a file that cannot be read, `Io`.
impl From<IntegrityError> for CheckpointError {
    fn from(e: IntegrityError) -> Self {
        match e {
            IntegrityError::Io { path, source } => CheckpointError::Io { path, source },
            IntegrityError::Damaged { path, reason } => CheckpointError::Corrupt { path, reason },
        }
    }
}

/// Wraps an I/O error with the path it concerns (for `map_err`).
pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where a run's corpus came from, so `--resume` can load it again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum CorpusSpec {
    Dir {
        path: PathBuf,
        /// What the split files held ([`corpus_fingerprint`]): the same corpus moved or copied
        /// elsewhere is recognised by it. Absent in runs written before fingerprints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fingerprint: Option<String>,
    },
    Synthetic(SynthConfig),
}

impl CorpusSpec {
    pub fn from_source(source: &CorpusSource) -> Self {
        match source {
            CorpusSource::Dir(p) => CorpusSpec::Dir {
                path: fs::canonicalize(p).unwrap_or_else(|_| p.clone()),
                fingerprint: corpus_fingerprint(p),
            },
            CorpusSource::Synthetic(c) => CorpusSpec::Synthetic(c.clone()),
        }
    }

    pub fn to_source(&self) -> CorpusSource {
        match self {
            CorpusSpec::Dir { path, .. } => CorpusSource::Dir(path.clone()),
            CorpusSpec::Synthetic(s) => CorpusSource::Synthetic(s.clone()),
        }
    }

    /// Whether `other` is this corpus: the same synthetic settings, or a folder at the same
    /// place or holding the same split files (by fingerprint: a moved or copied corpus is the
    /// same; a folder that lost its files compares by path only).
    pub fn same_corpus(&self, other: &CorpusSpec) -> bool {
        match (self, other) {
            (
                CorpusSpec::Dir {
                    path: a,
                    fingerprint: fa,
                },
                CorpusSpec::Dir {
                    path: b,
                    fingerprint: fb,
                },
            ) => {
                let fa = fa.clone().or_else(|| corpus_fingerprint(a));
                let fb = fb.clone().or_else(|| corpus_fingerprint(b));
                match (fa, fb) {
                    (Some(fa), Some(fb)) => fa == fb,
                    _ => a == b,
                }
            }
            (CorpusSpec::Synthetic(a), CorpusSpec::Synthetic(b)) => a == b,
            _ => false,
        }
    }

    /// The corpus as a user names it: its folder, or `synthetic`.
    pub fn describe(&self) -> String {
        match self {
            CorpusSpec::Dir { path, .. } => path.display().to_string(),
            CorpusSpec::Synthetic(s) => CorpusSource::Synthetic(s.clone()).describe(),
        }
    }
}

/// A corpus folder's fingerprint: `crc32c:XXXXXXXX:BYTES` over each split file it would be read
/// from (the first of `SPLIT_FILE_NAMES` present), in split order, name and bytes. `None` when a
/// split file is missing or unreadable. One pass over the files (several GB/s).
pub fn corpus_fingerprint(dir: &Path) -> Option<String> {
    use std::io::Read;
    let mut crc = 0u32;
    let mut total = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for (_, names) in conelab_data::SPLIT_FILE_NAMES {
        let name = names.iter().find(|n| dir.join(n).is_file())?;
        crc = conelab_base::integrity::crc32c_append(crc, name.as_bytes());
        let mut file = fs::File::open(dir.join(name)).ok()?;
        loop {
            let n = file.read(&mut buf).ok()?;
            if n == 0 {
                break;
            }
            crc = conelab_base::integrity::crc32c_append(crc, &buf[..n]);
            total += n as u64;
        }
    }
    Some(format!(
        "crc32c:{}:{total}",
        conelab_base::integrity::hex(crc)
    ))
}

/// The run's configuration file.
pub const RUN_TOML: &str = "run.toml";
/// The run's vocabulary file.
pub const VOCAB_TSV: &str = "vocab.tsv";

/// `run.toml` of `dir`, checked against the folder's manifest and parsed.
fn read_spec(dir: &Path) -> Result<RunSpec, CheckpointError> {
    let run_toml = dir.join(RUN_TOML);
    verify_file(dir, RUN_TOML)?;
    let bytes = fs::read(&run_toml).map_err(io(&run_toml))?;
    let text = String::from_utf8(bytes).map_err(|e| CheckpointError::Corrupt {
        path: run_toml.clone(),
        reason: format!("not UTF-8 text: {e}"),
    })?;
    toml::from_str(&text).map_err(|e| CheckpointError::Corrupt {
        path: run_toml.clone(),
        reason: e.message().to_owned(),
    })
}

/// Checks the run folder's own files (`run.toml`, `vocab.tsv`: every file its manifest lists)
/// against the manifest: `Ok(true)` verified, `Ok(false)` written before manifests.
pub fn verify_run_files(dir: &Path) -> Result<bool, CheckpointError> {
    Ok(conelab_base::integrity::verify_folder(dir)?.is_some())
}

/// `run.toml`: everything needed to rebuild the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub conelab_version: String,
    pub name: String,
    pub device: String,
    pub group_bounds: [f64; 2],
    pub corpus: CorpusSpec,
    pub model: ModelConfig,
    pub train: TrainConfig,
}

/// A run directory on disk.
#[derive(Debug, Clone)]
pub struct RunDir {
    path: PathBuf,
    spec: RunSpec,
    repaired: Vec<String>,
}

impl RunDir {
    /// Creates the directory (and parents) and writes `run.toml` and `vocab.tsv` atomically.
    pub fn create(path: &Path, spec: RunSpec, vocab: &Vocab) -> Result<Self, CheckpointError> {
        fs::create_dir_all(path).map_err(io(path))?;
        let toml = toml::to_string_pretty(&spec).map_err(|e| CheckpointError::Corrupt {
            path: path.join("run.toml"),
            reason: e.to_string(),
        })?;
        write_recorded("run", path, RUN_TOML, toml.as_bytes())?;
        let mut tsv = String::with_capacity(vocab.len() * 12);
        for (token, count) in vocab.tokens().iter().zip(vocab.counts()) {
            tsv.push_str(token);
            tsv.push('\t');
            tsv.push_str(&count.to_string());
            tsv.push('\n');
        }
        write_recorded("run", path, VOCAB_TSV, tsv.as_bytes())?;
        Ok(Self {
            path: path.to_path_buf(),
            spec,
            repaired: Vec::new(),
        })
    }

    /// Opens an existing run directory, or the run directory of a `step-NNNNNN` or `best` folder.
    /// A damaged `run.toml` or manifest is rebuilt from the copies the run keeps
    /// ([`rebuild`]), said on stderr and in [`RunDir::repaired`].
    pub fn open(path: &Path) -> Result<Self, CheckpointError> {
        Self::open_with(path, true)
    }

    /// [`RunDir::open`] for a reader that only looks (`conelab runs`): damage is an error, and
    /// nothing is rebuilt or written.
    pub fn open_as_is(path: &Path) -> Result<Self, CheckpointError> {
        Self::open_with(path, false)
    }

    fn open_with(path: &Path, rebuild_damage: bool) -> Result<Self, CheckpointError> {
        let dir = if is_checkpoint_dir(path) {
            path.parent().unwrap_or(path)
        } else {
            path
        };
        if !dir.exists() {
            return Err(CheckpointError::Io {
                path: dir.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such directory"),
            });
        }
        let run_toml = dir.join("run.toml");
        if !run_toml.is_file() {
            return Err(CheckpointError::NotARun(dir.to_path_buf()));
        }
        let mut repaired = Vec::new();
        let spec = match read_spec(dir) {
            Ok(spec) => spec,
            // Damage is met with the copies the run keeps: the manifest rebuilt from the files
            // that prove themselves, run.toml from a checkpoint's copy or the store's record.
            Err(CheckpointError::Corrupt { path, reason }) if rebuild_damage => {
                let retried = if path == dir.join(MANIFEST) {
                    rebuild::rebuild_manifest(dir, &reason).map(|said| {
                        repaired.push(said);
                        read_spec(dir)
                    })
                } else {
                    None
                };
                match retried {
                    Some(Ok(spec)) => spec,
                    _ => {
                        let Some(rebuilt) = rebuild::rebuild(dir, RUN_TOML, &reason) else {
                            return Err(CheckpointError::Corrupt { path, reason });
                        };
                        let spec = std::str::from_utf8(&rebuilt.bytes)
                            .ok()
                            .and_then(|t| toml::from_str::<RunSpec>(t).ok())
                            .ok_or_else(|| CheckpointError::Corrupt {
                                path: path.clone(),
                                reason: format!("{reason}; its copy does not parse either"),
                            })?;
                        repaired.push(rebuilt.said);
                        spec
                    }
                }
            }
            Err(e) => return Err(e),
        };
        for said in &repaired {
            conelab_base::stderr::say(&format!("conelab: warning: {said}"));
        }
        Ok(Self {
            path: dir.to_path_buf(),
            spec,
            repaired,
        })
    }

    /// The run files damaged and rebuilt as the run was opened, in words (a resume records
    /// them as warnings).
    pub fn repaired(&self) -> &[String] {
        &self.repaired
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn spec(&self) -> &RunSpec {
        &self.spec
    }

    /// Tokens of `vocab.tsv`, in id order.
    pub fn vocab_tokens(&self) -> Result<Vec<String>, CheckpointError> {
        let p = self.path.join(VOCAB_TSV);
        let text = match verify_file(&self.path, VOCAB_TSV) {
            Ok(_) => String::from_utf8_lossy(&fs::read(&p).map_err(io(&p))?).into_owned(),
            // Damaged: rebuilt from a checkpoint's copy where one exists (said once: it is
            // written back).
            Err(IntegrityError::Damaged { path, reason }) => {
                let manifest_damaged = path == self.path.join(MANIFEST);
                if manifest_damaged
                    && let Some(said) = rebuild::rebuild_manifest(&self.path, &reason)
                {
                    conelab_base::stderr::say(&format!("conelab: warning: {said}"));
                }
                if manifest_damaged && verify_file(&self.path, VOCAB_TSV).is_ok() {
                    String::from_utf8_lossy(&fs::read(&p).map_err(io(&p))?).into_owned()
                } else {
                    let rebuilt = rebuild::rebuild(&self.path, VOCAB_TSV, &reason)
                        .ok_or(CheckpointError::Corrupt { path, reason })?;
                    conelab_base::stderr::say(&format!("conelab: warning: {}", rebuilt.said));
                    String::from_utf8_lossy(&rebuilt.bytes).into_owned()
                }
            }
            Err(e) => return Err(e.into()),
        };
        Ok(text
            .lines()
            .map(|l| l.split('\t').next().unwrap_or("").to_owned())
            .collect())
    }

    /// Checkpoint folders, oldest first (by the step they name, whatever its width).
    pub fn checkpoints(&self) -> Result<Vec<PathBuf>, CheckpointError> {
        checkpoints_in(&self.path)
    }

    pub fn latest_checkpoint(&self) -> Result<PathBuf, CheckpointError> {
        self.checkpoints()?
            .pop()
            .ok_or_else(|| CheckpointError::NoCheckpoint(self.path.clone()))
    }

    /// The checkpoint with the lowest validation PPL (`best/`).
    pub fn best_checkpoint(&self) -> Result<PathBuf, CheckpointError> {
        let best = self.path.join(BEST_DIR);
        if best.is_dir() {
            Ok(best)
        } else {
            Err(CheckpointError::NoBest(self.path.clone()))
        }
    }

    /// The checkpoint folder at `step` (whatever the width of its name).
    pub fn checkpoint_at(&self, step: u64) -> Result<PathBuf, CheckpointError> {
        let all = self.checkpoints()?;
        if let Some(p) = all.iter().find(|p| step_of(p) == Some(step)) {
            return Ok(p.clone());
        }
        let have: Vec<String> = all
            .iter()
            .filter_map(|p| step_of(p))
            .map(|s| s.to_string())
            .collect();
        Err(CheckpointError::NoStep {
            path: self.path.clone(),
            step,
            have: if have.is_empty() {
                "none".into()
            } else {
                have.join(", ")
            },
        })
    }

    /// The checkpoint a [`CheckpointChoice`] names.
    pub fn checkpoint(&self, choice: CheckpointChoice) -> Result<PathBuf, CheckpointError> {
        match choice {
            CheckpointChoice::Last => self.latest_checkpoint(),
            CheckpointChoice::Best => self.best_checkpoint(),
            CheckpointChoice::At(step) => self.checkpoint_at(step),
        }
    }

    /// Rewrites `run.toml` (a resumed run whose settings changed), atomically.
    /// Takes `spec` as the run's for this process without writing it (a resume that may still
    /// be refused: [`RunDir::update_spec`] writes it once nothing can refuse it any more).
    pub fn use_spec(&mut self, spec: RunSpec) {
        self.spec = spec;
    }

    pub fn update_spec(&mut self, spec: RunSpec) -> Result<(), CheckpointError> {
        let run_toml = self.path.join("run.toml");
        let toml = toml::to_string_pretty(&spec).map_err(|e| CheckpointError::Corrupt {
            path: run_toml.clone(),
            reason: e.to_string(),
        })?;
        write_recorded("run", &self.path, RUN_TOML, toml.as_bytes())?;
        self.spec = spec;
        Ok(())
    }

    /// Cleans what a killed process left: staging and temporary folders are deleted; a
    /// checkpoint set aside for a re-save whose replacement never arrived is put back. Call it
    /// only while holding the run (no other process writes here). Returns what it did, a line each.
    pub fn recover(&self) -> Result<Vec<String>, CheckpointError> {
        let mut done = Vec::new();
        let entries: Vec<PathBuf> = fs::read_dir(&self.path)
            .map_err(io(&self.path))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        for p in &entries {
            let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let (home_name, kind) = if let Some(rest) = name.strip_prefix(".step-") {
                let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
                if digits.is_empty() {
                    continue;
                }
                let kind = &rest[digits.len()..];
                (format!("step-{digits}"), kind)
            } else if let Some(kind) = name.strip_prefix(".best") {
                (BEST_DIR.to_owned(), kind)
            } else {
                continue;
            };
            if kind.starts_with(".old-") {
                let home = self.path.join(&home_name);
                if home.exists() {
                    fs::remove_dir_all(p).map_err(io(p))?;
                    done.push(format!("removed {name} (left by an interrupted re-save)"));
                } else {
                    fs::rename(p, &home).map_err(io(&home))?;
                    done.push(format!(
                        "restored {home_name} (an interrupted re-save had set it aside)"
                    ));
                }
            } else if kind.starts_with(".staged-") || kind.starts_with(".tmp-") {
                fs::remove_dir_all(p).map_err(io(p))?;
                done.push(format!("removed {name} (an unfinished checkpoint)"));
            }
        }
        if !done.is_empty() {
            sync_dir(&self.path).map_err(io(&self.path))?;
        }
        Ok(done)
    }
}

/// The checkpoint folders of a run directory, oldest first by the step they name.
pub fn checkpoints_in(dir: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
    let mut steps: Vec<(u64, PathBuf)> = fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .filter_map(|p| step_of(&p).map(|s| (s, p)))
        .collect();
    steps.sort();
    Ok(steps.into_iter().map(|(_, p)| p).collect())
}

/// The step of the newest `step-N` checkpoint in `dir`; `None` when it has none or cannot be
/// listed (what a resume would start from, for the messages that say so).
pub fn newest_checkpoint_step(dir: &Path) -> Option<u64> {
    checkpoints_in(dir)
        .ok()
        .and_then(|c| c.last().and_then(|p| step_of(p)))
}

/// The step a `step-N` folder names (any number of digits).
pub fn step_of(p: &Path) -> Option<u64> {
    p.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("step-"))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse().ok())
}

/// The folder of the best checkpoint in a run directory.
pub const BEST_DIR: &str = "best";

/// Which of a run's checkpoints: `last`, `best` or a step (the spelling `--step` takes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointChoice {
    /// The newest `step-N`.
    Last,
    /// `best/`: the lowest validation PPL.
    Best,
    At(u64),
}

impl std::str::FromStr for CheckpointChoice {
    type Err = conelab_base::error::Invalid;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "last" => Ok(Self::Last),
            "best" => Ok(Self::Best),
            n => n
                .parse()
                .map(Self::At)
                .map_err(conelab_base::error::Invalid::because(format!(
                    "'{s}' is not a step: use last, best or a number"
                ))),
        }
    }
}

/// A `step-N` folder, or the `best` folder of a run (a run may itself be named `best`: a folder
/// holding its own `run.toml` is a run, not a checkpoint).
fn is_checkpoint_dir(p: &Path) -> bool {
    step_of(p).is_some()
        || (p.file_name().and_then(|n| n.to_str()) == Some(BEST_DIR)
            && !p.join(RUN_TOML).is_file()
            && p.parent().is_some_and(|run| run.join(RUN_TOML).is_file()))
}

/// The step a checkpoint folder holds: the one its name says, or for `best/` the one its
/// `state.json` records.
pub fn checkpoint_step(dir: &Path) -> Option<u64> {
    step_of(dir).or_else(|| {
        let bytes = fs::read(dir.join("state.json")).ok()?;
        serde_json::from_slice::<crate::state::RunState>(&bytes)
            .ok()
            .map(|s| s.step)
    })
}

/// The folder name of the checkpoint at `step`.
pub fn step_dir_name(step: u64) -> String {
    format!("step-{step:06}")
}

/// Puts a staged checkpoint in place as `step-NNNNNN`: an existing folder of that step is renamed
/// aside, the new one renamed in, the run directory fsynced, then the old one deleted; then the
/// oldest checkpoints beyond the newest `keep` are deleted. Returns the checkpoint's path.
pub fn commit(
    run_dir: &Path,
    step: u64,
    staging: &Path,
    keep: usize,
) -> Result<PathBuf, CheckpointError> {
    let final_dir = put_in_place(run_dir, &step_dir_name(step), staging)?;
    prune(run_dir, keep, step)?;
    Ok(final_dir)
}

/// Puts a staged checkpoint in place as `best/`, the previous one set aside until it is.
pub fn commit_best(run_dir: &Path, staging: &Path) -> Result<PathBuf, CheckpointError> {
    put_in_place(run_dir, BEST_DIR, staging)
}

/// Renames `staging` to `run_dir/name`: an existing folder of that name is renamed aside, the new
/// one renamed in, the run directory fsynced, then the old one deleted.
fn put_in_place(run_dir: &Path, name: &str, staging: &Path) -> Result<PathBuf, CheckpointError> {
    let final_dir = run_dir.join(name);
    conelab_base::fault::check("checkpoint.commit").map_err(io(&final_dir))?;
    let aside = if final_dir.exists() {
        let aside = run_dir.join(format!(".{name}.old-{}", unique_suffix()));
        fs::rename(&final_dir, &aside).map_err(io(&final_dir))?;
        Some(aside)
    } else {
        None
    };
    if let Err(e) = fs::rename(staging, &final_dir) {
        // Put the old one back; the staged one stays for a later attempt or the cleanup.
        if let Some(a) = &aside {
            let _ = fs::rename(a, &final_dir);
        }
        return Err(io(&final_dir)(e));
    }
    sync_dir(run_dir).map_err(io(run_dir))?;
    if let Some(a) = aside {
        fs::remove_dir_all(&a).map_err(io(&a))?;
    }
    Ok(final_dir)
}

/// Deletes the oldest checkpoints beyond the newest `keep` (never the one at `protect`).
fn prune(run_dir: &Path, keep: usize, protect: u64) -> Result<(), CheckpointError> {
    let all = checkpoints_in(run_dir)?;
    for old in all.iter().take(all.len().saturating_sub(keep.max(1))) {
        if step_of(old) != Some(protect) {
            fs::remove_dir_all(old).map_err(io(old))?;
        }
    }
    Ok(())
}

/// A suffix no other staging or set-aside folder of this process or another has: pid and a counter.
pub fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The run's corpus, checked against the vocabulary it was trained with.
pub fn load_corpus(run: &RunDir) -> Result<Corpus, CheckpointError> {
    let spec = run.spec();
    let bounds = GroupBounds::new(spec.group_bounds[0], spec.group_bounds[1])?;
    let corpus = Corpus::load(
        &spec.corpus.to_source(),
        &LoadOptions {
            groups: bounds,
            ..LoadOptions::default()
        },
    )?;
    let saved = run.vocab_tokens()?;
    if saved.as_slice() != corpus.vocab().tokens() {
        return Err(CheckpointError::Mismatch {
            path: run.path().join("vocab.tsv"),
            reason: format!(
                "the run's vocabulary ({} tokens) differs from the corpus's ({} tokens): was the corpus changed?",
                saved.len(),
                corpus.vocab().len()
            ),
        });
    }
    Ok(corpus)
}
