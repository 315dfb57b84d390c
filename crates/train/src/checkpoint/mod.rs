//! Checkpoints of a trainer: writing one into a run folder (staged, fsynced, then put in place)
//! and building a trainer back from one. The run folder's layout, its crash-safe commit and the
//! pruning of old checkpoints are `conelab_core::run_dir`'s.
//!
//! Under a metrics store the rename waits for the store: a checkpoint counts only once the store
//! is durable up to its step ([`Checkpointer::deferred`], `conelab_store::recorder`).

use conelab_core::run_dir::*;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::nn::LstmState;
use burn::optim::ModuleOptimizer;
use burn::prelude::*;
use burn::store::{ModuleSnapshot, SafetensorsStore};

use crate::engine::{CheckpointSink, EngineError, SavedCheckpoint, Trainer};
use crate::model::{LanguageModel, RecurrentState, SpectralEmbedding};
use conelab_base::atomic::sync_dir;
use conelab_base::error::{BoxError, Invalid, chain};
use conelab_core::model::{DeviceError, DeviceSpec, ModelConfig};
use conelab_core::state::RunState;
use conelab_core::train_config::TrainConfig;

/// What a checkpoint holds besides the model.
pub struct Loaded {
    pub model: LanguageModel,
    pub optimizer: ModuleOptimizer,
    pub spectral_optimizer: Option<ModuleOptimizer>,
    pub state: RunState,
    pub carried: Option<RecurrentState>,
}

/// Writes the trainer's `step-NNNNNN` into the run directory atomically and prunes old
/// checkpoints, keeping the newest `keep`.
pub fn save(run: &RunDir, trainer: &Trainer, keep: usize) -> Result<PathBuf, CheckpointError> {
    let staging = write_staged(run.path(), trainer)?;
    commit(run.path(), trainer.state().step, &staging, keep)
}

/// Writes a checkpoint of the trainer into a staging folder of the run directory, every file and
/// the folder fsynced. Nothing else in the run directory changes.
pub fn write_staged(run_dir: &Path, trainer: &Trainer) -> Result<PathBuf, CheckpointError> {
    write_staged_as(run_dir, &step_dir_name(trainer.state().step), trainer)
}

/// [`write_staged`] for the checkpoint folder `name` (`step-N` or `best`).
fn write_staged_as(
    run_dir: &Path,
    name: &str,
    trainer: &Trainer,
) -> Result<PathBuf, CheckpointError> {
    let staging = run_dir.join(format!(".{name}.staged-{}", unique_suffix()));
    fs::create_dir_all(&staging).map_err(io(&staging))?;
    let result = write_checkpoint_files(run_dir, &staging, trainer)
        .and_then(|()| sync_dir(&staging).map_err(io(&staging)));
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&staging);
        return Err(e);
    }
    Ok(staging)
}

/// The engine's checkpoint writer for a run directory. Immediate: each checkpoint is put in place
/// as soon as it is written. Deferred: it is left staged, and the metrics store's recorder puts it
/// in place once the store is durable up to its step.
///
/// `best/` is always put in place at once: nothing resumes from it, so it need not wait for the
/// store, and its own `state.json` records the validation PPL it was kept for.
pub struct Checkpointer {
    run: RunDir,
    defer: bool,
    /// The validation PPL of the checkpoint in `best/` (none, or unreadable: `None`).
    best: Option<f64>,
}

impl Checkpointer {
    pub fn immediate(run: RunDir) -> Self {
        let best = best_ppl_on_disk(run.path());
        Self {
            run,
            defer: false,
            best,
        }
    }

    pub fn deferred(run: RunDir) -> Self {
        Self {
            defer: true,
            ..Self::immediate(run)
        }
    }
}

/// The validation PPL recorded in a run's `best/state.json`; `None` when there is no best
/// checkpoint or it cannot be read (a damaged one is then replaced by the next best).
pub fn best_ppl_on_disk(run_dir: &Path) -> Option<f64> {
    let bytes = fs::read(run_dir.join(BEST_DIR).join("state.json")).ok()?;
    let state: RunState = serde_json::from_slice(&bytes).ok()?;
    state.best_valid_ppl.filter(|p| p.is_finite())
}

impl CheckpointSink for Checkpointer {
    fn run_dir(&self) -> Option<PathBuf> {
        Some(self.run.path().to_path_buf())
    }

    fn save(&mut self, trainer: &Trainer) -> Result<SavedCheckpoint, CheckpointError> {
        let keep = trainer.config().keep_checkpoints;
        let staging = write_staged(self.run.path(), trainer)?;
        if self.defer {
            return Ok(SavedCheckpoint::Staged { staging, keep });
        }
        commit(self.run.path(), trainer.state().step, &staging, keep)
            .map(SavedCheckpoint::Committed)
    }

    fn save_best(
        &mut self,
        trainer: &Trainer,
        ppl: f64,
    ) -> Result<Option<PathBuf>, CheckpointError> {
        // A resumed run restarts from an older step-N whose state knows a worse best than the
        // one in best/: only a better PPL than best/'s own replaces it.
        if !ppl.is_finite() || self.best.is_some_and(|b| b <= ppl) {
            return Ok(None);
        }
        let staging = write_staged_as(self.run.path(), BEST_DIR, trainer)?;
        let path = commit_best(self.run.path(), &staging).inspect_err(|_| {
            let _ = fs::remove_dir_all(&staging);
        })?;
        self.best = Some(ppl);
        Ok(Some(path))
    }
}

fn write_checkpoint_files(
    run_dir: &Path,
    dir: &Path,
    trainer: &Trainer,
) -> Result<(), CheckpointError> {
    let state = trainer.state();
    let optimizer = trainer.optimizer();
    let carried = trainer.carried_state();
    // Under spectrum control `embedding.weight` is stale: store W = U·diag(σ)·Vᵀ there, so that
    // every reader of the checkpoint (eval, inspect, foreign tools) sees the model's W.
    let model = match trainer.model().spectral() {
        Some(_) => {
            let w = trainer.model().embedding();
            trainer.model().clone().replace_embedding_weight(w)
        }
        None => trainer.model().clone(),
    };
    // An error writing is the disk's or the encoder's, never a "corrupt" file.
    let unwritten = |path: &Path, reason: String| CheckpointError::Write {
        path: path.to_path_buf(),
        reason,
    };
    let model_path = dir.join("model.safetensors");
    let mut store = SafetensorsStore::from_file(&model_path).overwrite(true);
    model
        .save_into(&mut store)
        .map_err(|e| unwritten(&model_path, e.to_string()))?;
    let optim_path = dir.join("optimizer.bpk");
    // A disk that fills up between two files of a checkpoint.
    conelab_base::fault::check("checkpoint.write").map_err(io(&optim_path))?;
    optimizer
        .save(&optim_path)
        .map_err(|e| unwritten(&optim_path, format!("{e:?}")))?;
    if let Some(spectral) = trainer.spectral_optimizer() {
        let path = dir.join("spectral-optimizer.bpk");
        spectral
            .save(&path)
            .map_err(|e| unwritten(&path, format!("{e:?}")))?;
    }
    let state_path = dir.join("state.json");
    let json =
        serde_json::to_vec_pretty(state).map_err(|e| unwritten(&state_path, e.to_string()))?;
    fs::write(&state_path, json).map_err(io(&state_path))?;
    if let Some(layers) = carried {
        let rec_path = dir.join("recurrent.safetensors");
        let bytes = recurrent_to_bytes(layers).map_err(|source| CheckpointError::Encode {
            path: rec_path.clone(),
            source,
        })?;
        fs::write(&rec_path, bytes).map_err(io(&rec_path))?;
    }
    // The run's own small files, so that a damaged one is rebuilt rather than the run lost
    // (run_dir::rebuild).
    conelab_core::run_dir::rebuild::copy_into_checkpoint(run_dir, dir)?;
    write_manifest(dir)?;
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        let p = entry.map_err(io(dir))?.path();
        fs::File::open(&p)
            .and_then(|f| f.sync_all())
            .map_err(io(&p))?;
    }
    Ok(())
}

/// The checkpoint's manifest: the CRC-32C of each of its files, written last (before the folder
/// is fsynced and put in place) and checked before anything is decoded ([`verify_manifest`]).
pub const MANIFEST: &str = conelab_base::integrity::MANIFEST;

fn write_manifest(dir: &Path) -> Result<(), CheckpointError> {
    let manifest =
        conelab_base::integrity::Manifest::of_folder(dir).map_err(CheckpointError::from)?;
    let path = dir.join(MANIFEST);
    // A disk that fills up at the checkpoint's last file.
    conelab_base::fault::check("checkpoint.manifest").map_err(io(&path))?;
    fs::write(&path, manifest.encode()).map_err(io(&path))
}

/// Whether a checkpoint's files are what was written: `Ok(true)` when its manifest matches every
/// file it lists, `Ok(false)` for a checkpoint written before manifests (unverified, never
/// "corrupt"); a mismatch, a listed file missing or an unreadable manifest is `Corrupt`, naming
/// the file; a file that cannot be read at all is `Io`.
pub fn verify_manifest(step_dir: &Path) -> Result<bool, CheckpointError> {
    conelab_base::integrity::verify_folder(step_dir)
        .map(|n| n.is_some())
        .map_err(CheckpointError::from)
}

/// Why a safetensors file is shorter than its own header says (a copy or a write cut short),
/// or `None` when it is whole as far as its header tells (or has no readable header at all).
fn safetensors_truncated(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut file = fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let mut head = [0u8; 8];
    if file.read_exact(&mut head).is_err() {
        return Some(format!("truncated: {len} bytes, not even a header"));
    }
    let header_len = u64::from_le_bytes(head);
    if header_len > len.saturating_sub(8) {
        return Some(format!(
            "truncated: {len} bytes where its header alone is {header_len}"
        ));
    }
    let mut header = vec![0u8; usize::try_from(header_len).ok()?];
    file.read_exact(&mut header).ok()?;
    let json: serde_json::Value = serde_json::from_slice(&header).ok()?;
    let data_end = json
        .as_object()?
        .values()
        .filter_map(|t| t.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    let want = 8 + header_len + data_end;
    (len < want).then(|| format!("truncated: {len} bytes where its header describes {want}"))
}

/// Loads a checkpoint folder into a model built from `model_config` on `device`.
pub fn load(
    step_dir: &Path,
    model_config: &ModelConfig,
    vocab_size: usize,
    train: &TrainConfig,
    device: &Device,
) -> Result<Loaded, CheckpointError> {
    let corrupt = |path: &Path, reason: String| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    // Nothing is decoded from a file whose bytes are not the ones written.
    verify_manifest(step_dir)?;
    let state_path = step_dir.join("state.json");
    let state_bytes = fs::read(&state_path).map_err(io(&state_path))?;
    let mut state: RunState =
        serde_json::from_slice(&state_bytes).map_err(|e| corrupt(&state_path, e.to_string()))?;
    state.upgrade();

    let model_path = step_dir.join("model.safetensors");
    if !model_path.is_file() {
        return Err(corrupt(&model_path, "missing".into()));
    }
    let mut model_config = model_config.clone();
    if state.output_bias_added {
        // DEV was switched on mid-run and gave the model a bias `run.toml` does not mention.
        model_config.set_output_bias(true);
    }
    let model_config = &model_config;
    let mut model = LanguageModel::new(model_config, vocab_size, device);
    if state.spectrum_c1.is_some() {
        let d = model_config.embed_dim();
        model = model.set_spectral(Some(SpectralEmbedding::placeholder(vocab_size, d, device)));
    }
    let mut store = SafetensorsStore::from_file(&model_path);
    // A checkpoint without a manifest was not verified: a decoder's panic on its bytes is its
    // damage (`catch_panic`), reported as such.
    let panicked = |path: &Path| {
        let path = path.to_path_buf();
        move |panic: String| CheckpointError::Corrupt {
            path,
            reason: format!("the decoder failed on it ({panic}): damaged"),
        }
    };
    conelab_base::integrity::catch_panic(|| model.load_from(&mut store))
        .map_err(panicked(&model_path))?
        .map_err(|e| match safetensors_truncated(&model_path) {
            // A file cut short is damage, not a checkpoint of another model.
            Some(reason) => corrupt(&model_path, reason),
            None => CheckpointError::Mismatch {
                path: model_path.clone(),
                reason: format!(
                    "does not fit the configured model ({}): {e}",
                    model_config.describe(vocab_size)
                ),
            },
        })?;

    let optim_path = step_dir.join("optimizer.bpk");
    let optimizer = conelab_base::integrity::catch_panic(|| {
        crate::engine::build_optimizer(train).load(&optim_path)
    })
    .map_err(panicked(&optim_path))?
    .map_err(|e| corrupt(&optim_path, format!("{e:?}")))?;

    let spectral_path = step_dir.join("spectral-optimizer.bpk");
    let spectral_optimizer = if spectral_path.is_file() {
        Some(
            conelab_base::integrity::catch_panic(|| {
                crate::engine::spectral_optimizer(train, true).load(&spectral_path)
            })
            .map_err(panicked(&spectral_path))?
            .map_err(|e| corrupt(&spectral_path, format!("{e:?}")))?,
        )
    } else {
        None
    };

    let rec_path = step_dir.join("recurrent.safetensors");
    let carried = if rec_path.is_file() {
        let bytes = fs::read(&rec_path).map_err(io(&rec_path))?;
        // The carried state must be the run's: one [batch, hidden] cell and hidden state per
        // layer (a file from another run would otherwise fail at the first step).
        let expected = model_config.carried_state(train.batch);
        Some(
            conelab_base::integrity::catch_panic(|| recurrent_from_bytes(&bytes, device, expected))
                .map_err(panicked(&rec_path))?
                .map_err(|e| corrupt(&rec_path, chain(&e)))?,
        )
    } else {
        None
    };
    Ok(Loaded {
        model,
        optimizer,
        spectral_optimizer,
        state,
        carried,
    })
}

/// Rebuilds a run from its directory and its newest checkpoint (or the `step-NNNNNN` folder given),
/// optionally with a new total step count. A run directory without a checkpoint starts from step 0
/// with its `run.toml`.
pub fn resume(path: &Path, steps: Option<u64>) -> Result<(Trainer, RunDir), CheckpointError> {
    resume_on(path, steps, None)
}

/// [`resume`] on another device than the run's own (e.g. evaluating a GPU run on a laptop).
pub fn resume_on(
    path: &Path,
    steps: Option<u64>,
    device: Option<DeviceSpec>,
) -> Result<(Trainer, RunDir), CheckpointError> {
    let run = RunDir::open(path)?;
    let step_dir: PathBuf = if path.join("model.safetensors").exists() {
        path.to_path_buf()
    } else {
        run.latest_checkpoint()?
    };
    let trainer = restore_trainer_as(&run, Some(&step_dir), steps, device, true)?;
    Ok((trainer, run))
}

/// A trainer for `run` with the state of `step_dir` (`None`: a fresh start from `run.toml`).
pub fn restore_trainer(
    run: &RunDir,
    step_dir: Option<&Path>,
    steps: Option<u64>,
    device: Option<DeviceSpec>,
) -> Result<Trainer, CheckpointError> {
    restore_trainer_as(run, step_dir, steps, device, false)
}

/// [`restore_trainer`]; with `fp32_fallback` (evaluation) a bf16 run opened on burn-flex computes
/// in fp32 (its weights are fp32) instead of refusing, as training it there must.
fn restore_trainer_as(
    run: &RunDir,
    step_dir: Option<&Path>,
    steps: Option<u64>,
    device: Option<DeviceSpec>,
    fp32_fallback: bool,
) -> Result<Trainer, CheckpointError> {
    let spec = run.spec().clone();
    let corpus = load_corpus(run)?;
    let mut train = spec.train.clone();
    if let Some(s) = steps {
        train.steps = s;
    }
    let device = match device {
        Some(d) => d,
        None => spec
            .device
            .parse()
            .map_err(EngineError::invalid::<DeviceError>("--device"))?,
    };
    use conelab_core::train_config::Precision;
    if fp32_fallback
        && train.precision == Precision::Bf16
        && crate::model::check_bf16(device).is_err()
    {
        train.precision = Precision::Fp32;
    }
    let mut trainer = Trainer::new(Arc::new(corpus), spec.model.clone(), train, device)?;
    let Some(step_dir) = step_dir else {
        return Ok(trainer);
    };
    let loaded = load(
        step_dir,
        &spec.model,
        trainer.corpus().vocab().len(),
        trainer.config(),
        trainer.device(),
    )?;
    trainer.restore(
        loaded.model,
        loaded.optimizer,
        loaded.spectral_optimizer,
        loaded.state,
        loaded.carried,
    );
    Ok(trainer)
}

fn recurrent_to_bytes(layers: &RecurrentState) -> Result<Vec<u8>, BoxError> {
    let mut named = Vec::new();
    for (i, s) in layers.iter().enumerate() {
        for (part, t) in [("cell", &s.cell), ("hidden", &s.hidden)] {
            let shape = t.dims().to_vec();
            let values = t.clone().inner().try_into_vec_as::<f32>()?;
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            named.push((format!("layer{i}.{part}"), shape, bytes));
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = named
        .iter()
        .map(|(n, shape, bytes)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes)
                .map(|v| (n.clone(), v))
        })
        .collect::<Result<_, _>>()?;
    Ok(safetensors::serialize(views, None)?)
}

/// The carried LSTM state; `expected` = (layers, [batch, hidden]) checks it fits the run.
fn recurrent_from_bytes(
    bytes: &[u8],
    device: &Device,
    expected: Option<(usize, [usize; 2])>,
) -> Result<RecurrentState, Invalid> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(Invalid::because("not a safetensors file"))?;
    let layers = st.names().len() / 2;
    if let Some((want, _)) = expected
        && (layers != want || st.names().len() != 2 * want)
    {
        return Err(format!(
            "{} tensors, not a cell and a hidden state for each of the model's {want} layers",
            st.names().len()
        )
        .into());
    }
    (0..layers)
        .map(|i| {
            let read = |part: &str| -> Result<Tensor<2>, Invalid> {
                let name = format!("layer{i}.{part}");
                let view = st.tensor(&name).map_err(Invalid::because(name))?;
                let shape = view.shape();
                if view.dtype() != safetensors::Dtype::F32 || shape.len() != 2 {
                    return Err(format!("layer{i}.{part}: expected a 2-D f32 tensor").into());
                }
                if let Some((_, want)) = expected
                    && shape != want
                {
                    return Err(format!(
                        "layer{i}.{part} is {shape:?}, the run's is {want:?} (batch, hidden)"
                    )
                    .into());
                }
                let values: Vec<f32> = view
                    .data()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                Ok(Tensor::from_data(
                    TensorData::new(values, [shape[0], shape[1]]),
                    device,
                ))
            };
            Ok(LstmState::new(read("cell")?, read("hidden")?))
        })
        .collect()
}

impl From<EngineError> for CheckpointError {
    fn from(e: EngineError) -> Self {
        CheckpointError::Engine(Box::new(e))
    }
}
