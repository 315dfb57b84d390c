//! Getting a run ready: a new one from its options, or an existing one resumed with the changes
//! its flags ask for. Every option is checked before anything is created; the run's folder is
//! held (its lock) from here on, and what a killed process left in it is cleaned.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use conelab_base::error::Invalid;
use conelab_base::lockfile::LockFile;
use conelab_catalog::RunError;
use conelab_core::events::{Command, Event};
use conelab_core::labels::{LabelEdit, RunLabels};
use conelab_core::model::{DeviceSpec, ModelConfig, Preset};
use conelab_core::objective::{GateParts, Objectives};
use conelab_core::run_dir::live;
use conelab_core::run_dir::{CorpusSpec, RunDir, RunSpec};
use conelab_core::train_config::TrainConfig;
use conelab_data::{Corpus, CorpusSource, LoadOptions};
use conelab_train::engine::Trainer;
use conelab_train::start::{ResumeChanges, Resumed, StartError};

use crate::config_file::ConfigFile;
use crate::options::TrainOptions;

/// A run ready to serve.
pub struct Prepared {
    pub trainer: Trainer,
    pub run: RunDir,
    /// The run's lock: held until the run process ends.
    pub lock: LockFile,
    /// Commands applied before the first step (a resume's new objectives or lr).
    pub commands: Vec<Command>,
    /// Settings changed at a resume, announced after the start.
    pub announcements: Vec<Event>,
    /// What recovering the folder did (leftovers of a killed process), a line each.
    pub recovered: Vec<String>,
    /// Name, tags and notes to give the run (the config file's `[run]`, then the flags).
    pub labels: LabelEdit,
}

/// The objective flags on top of `o`; errors name the flag.
pub fn apply_objective_flags(o: &mut Objectives, opts: &TrainOptions) -> Result<(), Invalid> {
    if let Some(arg) = opts.objective {
        arg.apply(o);
    }
    for r in &opts.regs {
        o.apply_reg_arg(r)?;
    }
    for f in &opts.freeze {
        o.apply_freeze_arg(f)?;
    }
    if let Some(g) = &opts.gate_freeze {
        o.gate_freeze = GateParts::parse(g.trim())
            .ok_or_else(|| format!("--gate-freeze {g}: expected b, c or bc"))?;
    }
    if let Some(k) = opts.nce_noise {
        o.nce.noise = k;
    }
    if let Some(spec) = &opts.nce_r {
        let bad = || format!("--nce-r {spec}: expected ALPHA,GAMMA, e.g. 1.0,0.1");
        let (a, g) = spec.split_once(',').ok_or_else(bad)?;
        o.nce.alpha = a.trim().parse().map_err(|e| Invalid::because(bad())(e))?;
        o.nce.fraction = g.trim().parse().map_err(|e| Invalid::because(bad())(e))?;
    }
    if let Some(spec) = &opts.and_lm {
        let bad = || format!("--and {spec}: expected ALPHA,GAMMA, e.g. 1.0,0.1");
        let (a, g) = spec.split_once(',').ok_or_else(bad)?;
        o.and_lm.alpha = a.trim().parse().map_err(|e| Invalid::because(bad())(e))?;
        o.and_lm.gamma = g.trim().parse().map_err(|e| Invalid::because(bad())(e))?;
    }
    Ok(())
}

/// Overrides the window length of a model config.
pub fn with_window(model: ModelConfig, window: Option<usize>) -> ModelConfig {
    match window {
        Some(t) => model.with_window(t),
        None => model,
    }
}

fn set<T>(slot: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *slot = v;
    }
}

/// A new run, or (`--resume`) an existing one.
pub fn prepare(opts: &TrainOptions) -> Result<Prepared, RunError> {
    opts.validate().map_err(RunError::Usage)?;
    match &opts.resume {
        Some(dir) => resume(dir, opts),
        None => new_run(opts),
    }
}

/// The settings a new run of `opts` trains with (the config file, then the flags on top).
struct Settings {
    preset: Preset,
    model: ModelConfig,
    train: TrainConfig,
    labels: LabelEdit,
}

fn settings(opts: &TrainOptions) -> Result<Settings, RunError> {
    let file = match &opts.config {
        Some(p) => ConfigFile::read(p).map_err(RunError::bad_input)?,
        None => ConfigFile::default(),
    };
    let mut labels = file.labels.clone();
    let flags = opts.label_edit();
    labels.name = flags.name.or(labels.name);
    labels.add.extend(flags.add);
    labels.notes = flags.notes.or(labels.notes);
    RunLabels::default()
        .apply(&labels)
        .map_err(RunError::bad_input_at("[run] in the config file"))?;
    let preset = opts.model.or(file.preset).unwrap_or(Preset::Tiny);
    let model = with_window(file.model(preset).map_err(RunError::bad_input)?, opts.bptt);
    let mut train = file.train().map_err(RunError::bad_input)?;
    set(&mut train.batch, opts.batch);
    set(&mut train.lr, opts.lr);
    set(&mut train.optimizer, opts.optimizer);
    set(&mut train.schedule, opts.schedule);
    set(&mut train.warmup, opts.warmup);
    set(&mut train.weight_decay, opts.weight_decay);
    set(&mut train.clip_norm, opts.clip);
    set(&mut train.precision, opts.precision);
    set(&mut train.eval_every, opts.eval_every);
    train.eval_test |= opts.eval_test;
    if opts.patience.is_some() {
        train.patience = opts.patience;
    }
    set(&mut train.checkpoint_every, opts.checkpoint_every);
    set(&mut train.keep_checkpoints, opts.keep);
    set(&mut train.snapshot_every, opts.snapshot_every);
    set(&mut train.seed, opts.seed);
    if opts.data_seed.is_some() {
        train.data_seed = opts.data_seed;
    }
    set(&mut train.steps, opts.steps);
    apply_objective_flags(&mut train.objectives, opts).map_err(RunError::Usage)?;
    Ok(Settings {
        preset,
        model,
        train,
        labels,
    })
}

/// Checks what a new run of `opts` would be refused for — its settings and its corpus folder —
/// without loading the corpus or creating anything: a sweep checks every run this way before
/// any starts. (A corpus folder's contents are checked by the run itself.)
pub fn check(opts: &TrainOptions) -> Result<(), RunError> {
    let s = settings(opts)?;
    s.model.validate().map_err(RunError::Usage)?;
    s.train.validate().map_err(RunError::Usage)?;
    if opts.device.is_none() {
        default_device()?;
    }
    let corpus_arg = opts.corpus.as_deref().unwrap_or("synthetic");
    if let CorpusSource::Dir(p) = CorpusSource::parse(corpus_arg)
        && !p.is_dir()
    {
        return Err(RunError::Usage(
            format!(
                "{}: no such corpus folder (nor a folder of that name under $CONELAB_DATASETS)",
                p.display()
            )
            .into(),
        ));
    }
    Ok(())
}

/// A new run on a CUDA device that has less free memory than the run needs at least (the
/// trainer's estimate for host memory, `memory_refusal`, against the free memory the driver
/// reports through NVML): one line, before anything is allocated or written. Without NVML (no
/// driver library) or for another device nothing is checked here.
fn check_device_memory(
    device: DeviceSpec,
    model: &ModelConfig,
    train: &TrainConfig,
    corpus: &Corpus,
) -> Result<(), RunError> {
    if !matches!(device, DeviceSpec::Cuda(_)) {
        return Ok(());
    }
    let name = device.to_string();
    let Some(stats) = crate::gpu::GpuSampler::open(&name).and_then(|s| s.sample()) else {
        return Ok(());
    };
    let free = stats.mem_total_bytes.saturating_sub(stats.mem_used_bytes);
    device_memory_refusal(&name, free, model, train, corpus)
        .map_or(Ok(()), |why| Err(RunError::Usage(why.into())))
}

/// [`check_device_memory`]'s decision for `free` bytes on the device `name`.
fn device_memory_refusal(
    name: &str,
    free: u64,
    model: &ModelConfig,
    train: &TrainConfig,
    corpus: &Corpus,
) -> Option<String> {
    let window = (train.batch * model.window()).max(1);
    let windows = corpus.split(conelab_data::Split::Train).len() / window;
    conelab_train::engine::memory_refusal(
        model,
        train,
        corpus.vocab().len(),
        windows as u64,
        free,
        &format!("{name} has"),
    )
}

fn new_run(opts: &TrainOptions) -> Result<Prepared, RunError> {
    let Settings {
        preset,
        model,
        train,
        labels,
    } = settings(opts)?;
    let corpus_arg = opts.corpus.as_deref().unwrap_or("synthetic");
    let source = CorpusSource::parse(corpus_arg);
    let corpus = Corpus::load(
        &source,
        &LoadOptions {
            groups: opts.groups,
            ..LoadOptions::default()
        },
    )
    .map_err(RunError::bad_input)?;
    let corpus_name = match &source {
        CorpusSource::Synthetic(_) => "synthetic".to_owned(),
        CorpusSource::Dir(p) => p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "corpus".into()),
    };
    let device = match opts.device {
        Some(d) => d,
        None => default_device()?,
    };
    check_device_memory(device, &model, &train, &corpus)?;
    let trainer = conelab_train::start::new(Arc::new(corpus), model, train, device, opts.epochs)
        .map_err(start_error)?;
    let name = format!("{}-{corpus_name}-{}", preset.name(), utc_stamp());
    let dir = opts
        .run_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("checkpoints").join(&name));
    if let Some(first) = foreign_folder(&dir) {
        return Err(RunError::Usage(
            format!(
                "{}: a folder with files of its own ({first}) and no run in it: give a new or empty --run-dir (nothing was written)",
                dir.display()
            )
            .into(),
        ));
    }
    std::fs::create_dir_all(&dir).map_err(RunError::bad_input_at(dir.display().to_string()))?;
    // Absolute from here on: the paths the run records (its checkpoints' in the events, the
    // hints it prints) are read from wherever the user is next (issue #58).
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let lock = live::hold(&dir)?;
    if dir.join("run.toml").exists() {
        // A folder whose run never reached a checkpoint may be started again; one with a
        // checkpoint holds training that a new run would overwrite.
        let has_checkpoint = conelab_core::run_dir::checkpoints_in(&dir)
            .map(|c| !c.is_empty())
            .unwrap_or(true);
        if has_checkpoint {
            return Err(RunError::Usage(format!(
                "{} already holds a run: continue it with --resume {}, or choose another --run-dir",
                dir.display(),
                dir.display()
            ).into()));
        }
    }
    let reference = reference_event(trainer.corpus(), corpus_arg);
    let set_aside = set_aside_store(&dir)?;
    let spec = RunSpec {
        conelab_version: env!("CARGO_PKG_VERSION").to_owned(),
        name,
        device: device.to_string(),
        group_bounds: [opts.groups.medium_start(), opts.groups.rare_start()],
        corpus: CorpusSpec::from_source(&source),
        // The trainer may have adjusted the model (an output bias for self-normalisation).
        model: trainer.model_config().clone(),
        train: trainer.config().clone(),
    };
    let run = RunDir::create(&dir, spec, trainer.corpus().vocab())?;
    let recovered = run.recover()?;
    let announcements = set_aside
        .map(|aside| Event::Warning {
            step: 0,
            message: format!(
                "this folder's earlier run never reached a checkpoint: it starts again, and its store is kept in {}",
                aside.display()
            ),
        })
        .into_iter()
        .chain([reference])
        .collect();
    Ok(Prepared {
        trainer,
        run,
        lock,
        commands: Vec::new(),
        announcements,
        recovered,
        labels,
    })
}

fn resume(path: &Path, opts: &TrainOptions) -> Result<Prepared, RunError> {
    // Absolute, as a new run's folder is: what the run records is read from anywhere.
    let absolute = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let path: &Path = &absolute;
    let mut run = RunDir::open(path)?;
    // What cannot change may be given again with the run's own value (a requeue script).
    let resolved = settings(opts)?;
    let corpus = opts
        .corpus
        .as_deref()
        .map(|c| CorpusSpec::from_source(&CorpusSource::parse(c)));
    opts.refuse_changes(
        run.spec(),
        &resolved.model,
        &resolved.train,
        corpus.as_ref(),
        run.path(),
    )
    .map_err(RunError::Usage)?;
    let lock = live::hold(run.path())?;
    // Every check that can refuse the resume comes before the first byte it writes.
    let store = conelab_store::store_dir(run.path());
    if let Err(e @ conelab_store::StoreError::Corrupt { .. }) =
        conelab_store::read_run_record(&store)
    {
        return Err(RunError::Damaged(
            format!(
                "{e}: the run cannot record a resumed run's numbers (nothing was written; `conelab store verify {}` says what else is damaged)",
                run.path().display()
            )
            .into(),
        ));
    }
    // The same corpus at another place (moved, copied to a node's scratch): the run reads it
    // there from now on (written with the rest once the resume is sure).
    let mut moved = None;
    if let (Some(CorpusSpec::Dir { path: new, .. }), CorpusSpec::Dir { path: old, .. }) =
        (&corpus, &run.spec().corpus)
        && new != old
        && let Some(given) = corpus.clone()
    {
        let mut spec = run.spec().clone();
        moved = Some(format!(
            "the corpus is read from {} now (the same files as {}, by fingerprint)",
            new.display(),
            old.display()
        ));
        spec.corpus = given;
        run.use_spec(spec);
    } else if corpus.is_none()
        && let CorpusSpec::Dir { path: old, .. } = &run.spec().corpus
        && !old.is_dir()
    {
        return Err(RunError::Usage(
            format!(
                "the run's corpus {} is not there any more (moved?): give its place, as in \
                 `conelab train NEW-PLACE --resume {}`",
                old.display(),
                run.path().display()
            )
            .into(),
        ));
    }
    // Before choosing the checkpoint: a re-save interrupted by a kill may have set one aside.
    let recovered = run.recover()?;
    // No checkpoint at all: the run starts again from its run.toml, its earlier store set aside
    // (once the resume is sure).
    let starts_over = !path.join("model.safetensors").exists() && run.checkpoints()?.is_empty();
    let objective_flags = |o: &mut Objectives| apply_objective_flags(o, opts);
    let changes = ResumeChanges {
        device: opts.device,
        eval_every: opts.eval_every,
        checkpoint_every: opts.checkpoint_every,
        snapshot_every: opts.snapshot_every,
        keep: opts.keep,
        steps: opts.steps,
        epochs: opts.epochs,
        patience: opts.patience,
        objectives: opts
            .objective_flags_given()
            .then_some(&objective_flags as _),
        lr: opts.lr,
    };
    // A checkpoint named explicitly is that one or nothing.
    let from = path.join("model.safetensors").exists().then_some(path);
    let Resumed {
        trainer,
        announcements: changed,
        commands,
    } = conelab_train::start::resume(&mut run, from, &changes).map_err(start_error)?;
    if moved.is_some() {
        run.update_spec(run.spec().clone())?;
    }
    let set_aside = if starts_over {
        set_aside_store(run.path())?
    } else {
        None
    };
    let at = trainer.state().step;
    let mut announcements = Vec::new();
    // Run files found damaged and rebuilt from the run's copies: recorded with the run.
    for said in run.repaired() {
        announcements.push(Event::Warning {
            step: at,
            message: said.clone(),
        });
    }
    if let Some(message) = moved {
        announcements.push(Event::Warning { step: at, message });
    }
    if let Some(aside) = set_aside {
        announcements.push(Event::Warning {
            step: at,
            message: format!(
                "no checkpoint to resume from: the run starts again from step 0, and its earlier store is kept in {}",
                aside.display()
            ),
        });
    }
    announcements.extend(changed);
    // Started over (no checkpoint): a new store, which records the corpus's reference as a new
    // run's does.
    if at == 0 {
        let corpus_arg = match &run.spec().corpus {
            CorpusSpec::Dir { path, .. } => path.display().to_string(),
            _ => "synthetic".to_owned(),
        };
        announcements.push(reference_event(trainer.corpus(), &corpus_arg));
    }
    Ok(Prepared {
        trainer,
        run,
        lock,
        commands,
        announcements,
        recovered,
        labels: opts.label_edit(),
    })
}

/// The corpus's reference models as a run records them when it starts from step 0: the bar every
/// group's PPL is judged against (cached per corpus; the first run on a corpus computes them:
/// 0.3 s synthetic, 1.4 s WikiText-2), or a warning saying why there are none. `corpus_arg` is
/// how the user names the corpus, for the command that computes them.
fn reference_event(corpus: &Corpus, corpus_arg: &str) -> Event {
    use conelab_core::baseline;
    let cache = conelab_base::settings::current().cache_dir.value.clone();
    let train_tokens = corpus.split(conelab_data::Split::Train).len();
    if train_tokens > baseline::COMPUTE_AT_START_TOKENS {
        match baseline::cached(corpus, &cache) {
            Some((r, _)) => Event::Reference(Box::new(r.event(0))),
            None => Event::Warning {
                step: 0,
                message: format!(
                    "no reference models: a training text of {train_tokens} tokens is not counted as a run starts; `conelab data baseline {corpus_arg}` computes them once for every later run"
                ),
            },
        }
    } else {
        match baseline::reference(corpus, &cache) {
            Ok((r, _)) => Event::Reference(Box::new(r.event(0))),
            Err(e) => Event::Warning {
                step: 0,
                message: format!("no reference models: {}", conelab_base::error::chain(&e)),
            },
        }
    }
}

/// A run folder whose run never reached a checkpoint is started again from step 0: its store
/// (the rows that run recorded) is moved aside, never deleted, to `store.before-<UTC time>/`;
/// where it went, or `None` when there was no store with anything in it.
fn set_aside_store(dir: &Path) -> Result<Option<PathBuf>, RunError> {
    let store = dir.join(conelab_store::STORE_DIR);
    let holds_something = std::fs::read_dir(&store).is_ok_and(|mut d| d.next().is_some());
    if !holds_something {
        return Ok(None);
    }
    let stamp = utc_stamp();
    let name = |i: u32| match i {
        0 => format!("{}.before-{stamp}", conelab_store::STORE_DIR),
        i => format!("{}.before-{stamp}-{i}", conelab_store::STORE_DIR),
    };
    // Two restarts within a second get -1, -2, …: the first free name.
    let mut aside = dir.join(name(0));
    for i in 1.. {
        if !aside.exists() {
            break;
        }
        aside = dir.join(name(i));
    }
    conelab_base::fault::check("store.set_aside")
        .and_then(|()| std::fs::rename(&store, &aside))
        .map_err(|e| RunError::Internal {
            what: format!("moving the earlier store {} aside", store.display()),
            source: Some(Box::new(e)),
        })?;
    Ok(Some(aside))
}

/// A trainer that could not be started, as a run command's error.
fn start_error(e: StartError) -> RunError {
    match e {
        StartError::Usage(why) => RunError::Usage(why),
        StartError::Checkpoint(e) => RunError::Checkpoint(e),
        StartError::Build(e) => RunError::BadInput(e),
    }
}

/// `YYYYmmdd-HHMMSS` in UTC, for run names.
pub fn utc_stamp() -> String {
    conelab_base::clock::format_unix(conelab_base::clock::now_unix(), "%Y%m%d-%H%M%S")
}

/// The device of a new run without `--device`: the config file's `device`, else the CPU. A value
/// the file got wrong is bad input naming its line.
fn default_device() -> Result<conelab_core::model::DeviceSpec, RunError> {
    let setting = &conelab_base::settings::current().device;
    match &setting.value {
        None => Ok(conelab_core::model::DeviceSpec::Cpu),
        Some(text) => text.parse().map_err(|e| {
            RunError::Usage(format!("config file {}: device = {text:?}: {e}", setting.from).into())
        }),
    }
}

/// What a run writes first or keeps at its top: a folder holding any of these is a run's (perhaps
/// one that never reached a checkpoint), which the checks after it judge.
const RUN_MARKERS: [&str; 5] = ["run.toml", "run.lock", "train.log", "output.log", "store"];

/// The first entry (by name) of an existing, non-empty folder that holds nothing a run writes:
/// a folder of the user's own, which a run's files would be mixed into (and a same-named file
/// replaced). `None` for a new or empty folder or a run's.
fn foreign_folder(dir: &Path) -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if names.is_empty() || names.iter().any(|n| RUN_MARKERS.contains(&n.as_str())) {
        return None;
    }
    names.sort();
    names.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CUDA device's free memory against the run's lower bound: `gpt2-small` at batch 64 does
    /// not fit 1 GiB (its 16 bytes a parameter alone are ~1.5 GiB at this vocabulary), and does
    /// fit 80 GiB; the line names the device.
    #[test]
    fn a_device_without_the_free_memory_refuses_the_run() {
        let corpus = Corpus::load(&CorpusSource::parse("synthetic"), &LoadOptions::default())
            .expect("the built-in corpus");
        let model = Preset::Gpt2Small.config();
        let train = TrainConfig {
            batch: 64,
            ..TrainConfig::default()
        };
        let gib = 1u64 << 30;
        let why = device_memory_refusal("cuda:1", gib, &model, &train, &corpus)
            .expect("1 GiB is too little");
        assert!(
            why.contains("cuda:1 has 1.0 GiB") && why.contains("batch 64"),
            "{why}"
        );
        assert_eq!(
            device_memory_refusal("cuda:1", 80 * gib, &model, &train, &corpus),
            None
        );
        // Not a CUDA device: nothing to read, nothing refused here.
        assert!(check_device_memory(DeviceSpec::Cpu, &model, &train, &corpus).is_ok());
    }
}
