//! The run process: the engine, the metrics store's recorder, the hub and the control server,
//! and nothing that depends on a terminal. Its main thread reports the run (a progress bar or
//! plain lines) and waits for the final event; then it winds the threads down, records how the
//! run ended (`final.json`) and returns the exit status.
//!
//! Signals: SIGHUP is ignored — a closed terminal or a dropped SSH connection never stops a run
//! (and `nohup` keeps working). SIGINT or SIGTERM stop the run after the current step with a
//! checkpoint (exit 75, resumable); a second one exits at once (130).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use conelab_base::exit::ExitStatus;

use conelab_catalog::RunError;
use conelab_core::analysis::LatestAnalysis;
use conelab_core::events::{Command, CommandSender, DivergencePolicy};
use conelab_core::run_dir::CorpusSpec;
use conelab_core::run_dir::live;
use conelab_core::run_fault::Fault;
use conelab_protocol::message::{PROTOCOL_VERSION, RunHello};
use conelab_protocol::view::{RunInfo, RunStatus, RunView, Vocabulary};
use conelab_store::{self as store, FlushPolicy, RunRecord, StoreWriter};
use conelab_train::checkpoint::Checkpointer;
use conelab_train::engine::{self, EngineOptions};

use crate::answers::LiveAnswers;
use crate::headless::{self, RunOutcome};
use crate::hub::{Hub, HubInput, HubStats};
use crate::launch::Prepared;
use crate::options::TrainOptions;
use crate::server::{self, Server};

/// How the run reports on its stdout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reporting {
    /// An indicatif progress bar (a terminal).
    Progress,
    /// Plain lines, a step line every `log_every` steps (a pipe, a file, `output.log`).
    Lines { log_every: u64 },
}

/// Where a started run is, for whoever started it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ready {
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub pid: u32,
}

/// Told where the run is once it can be attached to.
pub type OnReady = Box<dyn FnOnce(&Ready) -> std::io::Result<()>>;

pub struct ServeOptions {
    pub reporting: Reporting,
    /// train.log's format, and its step line every this many steps.
    pub log_format: super::log::LogFormat,
    pub log_every: u64,
    pub flush: Duration,
    /// Called once the run can be attached to (socket bound, live record written).
    pub on_ready: Option<OnReady>,
    /// Called with the hub's counters once the hub runs (benchmarks).
    pub on_hub: Option<Box<dyn FnOnce(HubStats)>>,
    /// `--notify CMD`: run once the run has ended and said so in `final.json`.
    pub notify: Option<String>,
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunExit {
    pub outcome: RunOutcome,
    pub by_signal: bool,
    pub dir: PathBuf,
    /// What `final.json` says (or would, had it not been written): the stop summary's source.
    pub record: live::FinalRecord,
}

impl RunExit {
    /// Success when completed or stopped from a viewer; diverged; failed; stopped when stopped by
    /// a signal after saving.
    pub fn status(&self) -> ExitStatus {
        Self::status_of(&self.outcome, self.by_signal)
    }

    fn status_of(outcome: &RunOutcome, by_signal: bool) -> ExitStatus {
        match outcome {
            RunOutcome::Stopped { .. } if by_signal => ExitStatus::Stopped,
            o => o.exit_status(),
        }
    }
}

/// SIGINT/SIGTERM → stop after the step with a checkpoint; a second → exit 130. SIGHUP ignored.
struct Signals {
    stop: Arc<OnceLock<CommandSender>>,
    by_signal: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> Result<Self, RunError> {
        conelab_base::platform::ignore_hang_up();
        let stop: Arc<OnceLock<CommandSender>> = Arc::default();
        let by_signal = Arc::new(AtomicBool::new(false));
        let mut signals = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM])
            .map_err(RunError::internal("installing signal handlers"))?;
        let (s, b) = (stop.clone(), by_signal.clone());
        std::thread::Builder::new()
            .name("conelab-signals".into())
            .spawn(move || {
                for _ in signals.forever() {
                    if b.swap(true, Ordering::SeqCst) {
                        conelab_base::stderr::say(
                            "conelab: second signal: exiting now, without waiting for the checkpoint",
                        );
                        ExitStatus::Interrupted.exit_now();
                    }
                    match s.get() {
                        Some(sender) => {
                            conelab_base::stderr::say(
                                "conelab: signal received: stopping after this step with a checkpoint (again to exit at once)",
                            );
                            sender.send(Command::Stop { save: true });
                        }
                        None => {
                            conelab_base::stderr::say("conelab: signal received before training started: exiting");
                            ExitStatus::Interrupted.exit_now();
                        }
                    }
                }
            })
            .map_err(RunError::internal("starting the signal thread"))?;
        Ok(Self { stop, by_signal })
    }
}

fn store_record(dir: &Path, spec: &conelab_core::run_dir::RunSpec) -> RunRecord {
    let config = std::fs::read_to_string(dir.join("run.toml")).unwrap_or_default();
    let run_id = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| spec.name.clone());
    let corpus = match &spec.corpus {
        CorpusSpec::Dir { path, .. } => path.display().to_string(),
        CorpusSpec::Synthetic(_) => "synthetic".into(),
    };
    RunRecord::new(&run_id, config, corpus, spec.device.clone())
}

/// Runs a prepared run to its end in this process.
pub fn serve(prepared: Prepared, options: ServeOptions) -> Result<RunExit, RunError> {
    let signals = Signals::install()?;
    let Prepared {
        trainer,
        run,
        lock,
        commands,
        announcements,
        recovered,
        labels,
    } = prepared;
    let dir = run.path().to_path_buf();
    let notify = options.notify.clone();
    // Said once the run's output goes where it stays (output.log for a background run).
    let mut notes: Vec<String> = recovered
        .iter()
        .map(|line| format!("conelab: {}: {line}", dir.display()))
        .collect();
    let start_step = trainer.state().step;
    let internal = RunError::internal::<std::io::Error>;

    // The store: opened (and its writer lock taken), cut back to the step the run starts from.
    let mut writer =
        StoreWriter::open(&dir, &store_record(&dir, run.spec()))?.with_policy(FlushPolicy {
            rows: FlushPolicy::default().rows,
            interval: options.flush,
        });
    // The name, tags and notes asked for (a new run's, or a resume's additions), in run.json.
    let labels = if labels.is_empty() {
        store::read_run_record(writer.dir())?.labels
    } else {
        store::labels::edit_record(writer.dir(), &labels)?
    };
    // In this user's index, so the run is found by name from any folder (a failure costs
    // only that: the run roots are still scanned).
    if let Err(e) = conelab_catalog::index::register(&dir, &labels) {
        notes.push(format!(
            "conelab: warning: {} (the run is found by its folder only)",
            conelab_base::error::chain(&e)
        ));
    }
    let cut = writer.start_at(start_step)?;
    for (path, why) in &cut.set_aside {
        notes.push(format!(
            "conelab: warning: {why}; moved to {} (nothing deleted)",
            path.display()
        ));
    }
    let info = RunInfo {
        name: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        device: trainer.device_spec().to_string(),
        total_steps: trainer.config().steps,
        windows_per_epoch: trainer.windows_per_epoch(),
        parameters: trainer.parameters(),
        run_dir: Some(dir.clone()),
        eval_every: trainer.config().eval_every,
        tokens_per_update: (trainer.config().batch * trainer.model_config().window()) as u64,
    };
    // A checkpoint's step is analysed when a snapshot was due there; a kill just after the
    // checkpoint loses that analysis (it reaches the store after the commit): taken again.
    let snapshot_every = trainer.config().snapshot_every;
    let snapshot_first = start_step > 0
        && snapshot_every > 0
        && start_step.is_multiple_of(snapshot_every)
        && !store::has_snapshot_at(&dir, start_step)?;
    let view = if start_step > 0 {
        RunView::from_history(
            &store::history::read(&dir)?,
            info,
            trainer.objectives().clone(),
            RunStatus::Starting,
        )
    } else {
        let mut v = RunView::new(trainer.objectives().clone());
        v.info = info;
        v
    };
    let vocab = Arc::new(Vocabulary {
        tokens: trainer.corpus().vocab().tokens().to_vec(),
        counts: trainer.corpus().vocab().counts().to_vec(),
    });
    let hello_base = RunHello {
        run_id: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        dir: std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone()),
        pid: std::process::id(),
        host: conelab_base::lockfile::host_name(),
        vocab_size: vocab.tokens.len(),
        group_bounds: run.spec().group_bounds,
        status: RunStatus::Running,
        live: true,
        labels,
    };

    // The socket, before any thread that creates files starts (see server::bind).
    let socket = server::socket_path(&dir).map_err(internal("choosing the control socket"))?;
    let listener =
        server::bind(&socket).map_err(RunError::internal(socket.display().to_string()))?;
    live::announce(&dir, &socket, PROTOCOL_VERSION)?;

    // The engine: checkpoints wait for the store; a divergence pauses only while someone watches.
    let fault = Fault::default();
    let divergence = DivergencePolicy::end_run();
    let latest = LatestAnalysis::default();
    let handle = engine::spawn(
        trainer,
        EngineOptions {
            checkpoints: Some(Box::new(Checkpointer::deferred(run.clone()))),
            divergence: divergence.clone(),
            fault: fault.clone(),
            latest: latest.clone(),
            announce: announcements,
            initial_commands: commands,
            snapshot_first,
        },
    )
    .map_err(internal("starting the engine"))?;
    let (control, events) = handle.take_events();
    let _ = signals.stop.set(control.commands.clone());

    let (hub_tx, hub_rx) = mpsc::channel();
    let (report_tx, report_rx) = mpsc::channel();
    let hub = Hub::new(view, control.commands.clone(), divergence, report_tx);
    if let Some(f) = options.on_hub {
        f(hub.stats());
    }
    let hub_thread = hub
        .spawn(hub_rx, fault.clone())
        .map_err(internal("starting the hub"))?;
    let forward = hub_tx.clone();
    let recorder = store::recorder::spawn_sampling(
        events,
        writer,
        dir.clone(),
        fault.clone(),
        Some(system_sampler(&run.spec().device)),
        move |e| forward.send(HubInput::Event(e)).is_ok(),
    )
    .map_err(internal("starting the metrics store's thread"))?;
    let answers = Arc::new(LiveAnswers::new(latest, store::store_dir(&dir), vocab));
    let server = Server::start(listener, socket.clone(), hub_tx, answers, hello_base)
        .map_err(internal("starting the control server"))?;

    if let Some(ready) = options.on_ready {
        let r = Ready {
            dir: dir.clone(),
            socket: socket.clone(),
            pid: std::process::id(),
        };
        if let Err(e) = ready(&r) {
            conelab_base::stderr::say(&format!(
                "conelab: warning: telling the starter where the run is: {e}"
            ));
        }
    }
    for n in notes {
        conelab_base::stderr::say(&n);
    }

    // train.log: written whatever stdout is; a run goes on without it if it cannot be opened
    // (said on stderr: the terminal, or output.log).
    let filter = std::env::var("RUST_LOG").ok();
    let run_log = match super::log::RunLog::open(
        &dir,
        options.log_format,
        options.log_every,
        filter.as_deref(),
    ) {
        Ok((log, warning)) => {
            if let Some(w) = warning {
                conelab_base::stderr::say(&format!("conelab: warning: {w}"));
            }
            Some(log)
        }
        Err(e) => {
            conelab_base::stderr::say(&format!(
                "conelab: warning: {}: {e}; the run goes on without it",
                dir.join(super::log::TRAIN_LOG).display()
            ));
            None
        }
    };
    let mut run_log = run_log;
    let outcome = match options.reporting {
        Reporting::Progress => headless::report(&report_rx, true, 1, &mut run_log),
        Reporting::Lines { log_every } => {
            headless::report(&report_rx, false, log_every, &mut run_log)
        }
    };

    // Wind down: the engine has ended (its final event came through); the recorder has flushed
    // and compacted before passing it on; the hub returns after broadcasting it. Should the
    // events have stopped without a final one, the engine is told to stop (after saving) first.
    if let RunOutcome::Failed { message } = &outcome {
        fault.set(message.clone());
        control.commands.send(Command::Stop { save: true });
    }
    control.join();
    let _ = recorder.join();
    let _ = hub_thread.join();
    // What came after the final event (an analysis still running when training ended), and a
    // failure the reporter concluded itself (the threads ended without a word), into train.log.
    if let Some(log) = &run_log {
        for e in report_rx.try_iter() {
            log.event(&e);
        }
        if let RunOutcome::Failed { message } = &outcome {
            log.failure(message);
        }
    }
    // The viewers' writers deliver the final event; then the socket goes.
    std::thread::sleep(Duration::from_millis(200));
    server.close();

    let by_signal = signals.by_signal.load(Ordering::SeqCst);
    let newest_checkpoint = || {
        conelab_core::run_dir::RunDir::open(&dir)
            .ok()
            .and_then(|r| r.checkpoints().ok())
            .and_then(|c| c.last().and_then(|p| conelab_core::run_dir::step_of(p)))
    };
    // `step` is the steps trained (the divergent step was not applied: it is in the message).
    let (status, step, message) = match &outcome {
        RunOutcome::Completed { step } => ("completed", *step, String::new()),
        RunOutcome::Stopped { step } => {
            // Stopped without saving (`x` in the workbench): say what a resume starts from.
            let message = match newest_checkpoint() {
                Some(at) if at == *step => String::new(),
                Some(at) => format!(
                    "stopped without saving: a resume starts from its newest checkpoint, step {at}"
                ),
                None => "stopped without saving: it has no checkpoint to resume from".into(),
            };
            ("stopped", *step, message)
        }
        RunOutcome::Diverged { step, loss } => (
            "diverged",
            step.saturating_sub(1),
            format!("loss {loss} at step {step}"),
        ),
        RunOutcome::Failed { message } => ("failed", 0, message.clone()),
    };
    let step = if status == "failed" {
        newest_checkpoint().unwrap_or(0)
    } else {
        step
    };
    let total_steps = conelab_core::run_dir::RunDir::open(&dir)
        .map(|r| r.spec().train.steps)
        .unwrap_or(0);
    let record = live::FinalRecord {
        status: status.into(),
        step,
        total_steps,
        exit_code: i32::from(RunExit::status_of(&outcome, by_signal).code()),
        message,
        by_signal,
        finished_unix: conelab_base::clock::unix_now(),
        host: conelab_base::lockfile::host_name(),
    };
    if let Err(e) = live::conclude(&dir, &record) {
        conelab_base::stderr::say(&format!(
            "conelab: warning: recording how the run ended: {e}"
        ));
    }
    let exit = RunExit {
        outcome,
        by_signal,
        dir: dir.clone(),
        record,
    };
    let record = &exit.record;
    if let Some(command) = &notify {
        let ending = crate::notify::Ending {
            name: conelab_core::run_dir::RunDir::open(&dir)
                .map(|r| r.spec().name.clone())
                .unwrap_or_else(|_| dir.display().to_string()),
            dir: dir.display().to_string(),
            status: record.status.clone(),
            step: record.step,
            total_steps: record.total_steps,
            exit_code: record.exit_code,
            message: record.message.clone(),
            best_valid_ppl: conelab_train::checkpoint::best_ppl_on_disk(&dir),
        };
        if let Err(warning) =
            crate::notify::notify(command, &ending, &dir, crate::notify::NOTIFY_TIMEOUT)
        {
            conelab_base::stderr::say(&format!("conelab: warning: {warning}"));
        }
    }
    drop(lock);
    Ok(exit)
}

/// The run's system sample every [`conelab_base::system::SAMPLE_EVERY`], on the store's thread,
/// with its GPU's where `device` is a CUDA device and the driver reports it.
fn system_sampler(device: &str) -> store::recorder::SystemSampleFn {
    use conelab_base::system::{CpuSampler, SAMPLE_EVERY};
    let mut sampler = CpuSampler::new();
    let gpu = crate::gpu::GpuSampler::open(device);
    let mut due = std::time::Instant::now();
    Box::new(move |step| {
        let now = std::time::Instant::now();
        if now < due {
            return None;
        }
        due = now + SAMPLE_EVERY;
        let sample = sampler.sample()?;
        Some(conelab_core::events::Event::System(
            conelab_core::events::SystemStats::from_sample(
                step,
                &sample,
                gpu.as_ref().and_then(|g| g.sample()),
            ),
        ))
    })
}

/// Runs the run in this process: headless (a progress bar on a terminal, lines otherwise), or as
/// the background run (`detached`: tells its starter when it is ready, then writes output.log).
pub fn serve_here(opts: &TrainOptions, tty: bool, detached: bool) -> Result<ExitStatus, RunError> {
    if let Some(other) = &opts.spectrum_beside {
        // Only the workbench draws it, but a bad path is still a bad path.
        conelab_core::run_dir::matrix::reference_spectrum(other)?;
    }
    let prepared = crate::launch::prepare(opts)?;
    let log_every = opts
        .log_every
        .unwrap_or_else(|| (prepared.trainer.config().steps / 100).max(1));
    let reporting = if tty && !detached {
        Reporting::Progress
    } else {
        Reporting::Lines { log_every }
    };
    let on_ready: Option<OnReady> = if detached {
        Some(Box::new(crate::detach::announce_ready))
    } else {
        None
    };
    let exit = serve(
        prepared,
        ServeOptions {
            reporting,
            log_format: opts.log_format,
            log_every,
            flush: std::time::Duration::from_secs_f64(opts.store_flush_secs),
            on_ready,
            on_hub: None,
            notify: opts.notify.clone(),
        },
    )?;
    let status = exit.status();
    // One summary, the one every viewer says too (conelab_core::run_dir::ending).
    conelab_base::stderr::say(&conelab_core::run_dir::ending::ending_summary(
        &exit.dir,
        &exit.record,
    ));
    Ok(status)
}
