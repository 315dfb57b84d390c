//! The engine's events into the store, on a thread of their own between the engine and whoever
//! consumes the events next (a run's hub, or a test). Training never waits on a flush; neither
//! does drawing.
//!
//! Checkpoints: the engine leaves each one staged ([`Event::CheckpointStaged`]); the recorder
//! flushes the store — every row up to that step is in its buffer, events arrive in order — and
//! only then puts the checkpoint in place and passes on [`Event::Checkpoint`]. So a checkpoint
//! never gets ahead of the store: a `kill -9` just after it loses no row it covers. When the store
//! cannot be written, the checkpoint stays staged and is put in place at the next flush that
//! succeeds.
//!
//! The final event is passed on only after the store is flushed and compacted, so a consumer that
//! exits on it leaves a complete store behind. If the engine's channel closes without a final
//! event, the recorder makes one ([`Event::Failed`]); if the recorder itself panics, it reports
//! through the run's [`Fault`] (the engine then stops) and passes events on without recording.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::StoreWriter;
use conelab_core::events::{Event, EventSink};
use conelab_core::run_fault::{Fault, panic_message};

/// How often an idle recorder looks at its flush timer.
const TICK: Duration = Duration::from_millis(200);

/// A checkpoint waiting for the store.
#[derive(Debug, Clone)]
struct Staged {
    step: u64,
    staging: PathBuf,
    keep: usize,
}

/// Asked at every turn of the recorder's loop (at least every [`TICK`]) with the newest step: an
/// event to record and pass on when one is due (the run's system sample).
pub type SystemSampleFn = Box<dyn FnMut(u64) -> Option<Event> + Send>;

struct Recorder<F: FnMut(Event) -> bool> {
    sampler: Option<SystemSampleFn>,
    writer: StoreWriter,
    run_dir: PathBuf,
    forward: F,
    fault: Fault,
    staged: Vec<Staged>,
    step: u64,
    /// A store problem is reported once per kind of failure, not once per event.
    failing: bool,
    /// The recorder panicked: events pass through unrecorded.
    broken: bool,
}

/// Starts the recorder: every event of `events` goes into `writer` and then to `forward` (which
/// returns false once nobody takes events any more). `run_dir` is where staged checkpoints are put
/// in place.
pub fn spawn<F>(
    events: Receiver<Event>,
    writer: StoreWriter,
    run_dir: PathBuf,
    fault: Fault,
    forward: F,
) -> std::io::Result<JoinHandle<()>>
where
    F: FnMut(Event) -> bool + Send + 'static,
{
    spawn_sampling(events, writer, run_dir, fault, None, forward)
}

/// [`spawn`], with `sampler` asked for an event at every turn of the loop: what the run samples
/// of itself is recorded and passed on off the training thread, like the engine's events.
pub fn spawn_sampling<F>(
    events: Receiver<Event>,
    writer: StoreWriter,
    run_dir: PathBuf,
    fault: Fault,
    sampler: Option<SystemSampleFn>,
    forward: F,
) -> std::io::Result<JoinHandle<()>>
where
    F: FnMut(Event) -> bool + Send + 'static,
{
    std::thread::Builder::new()
        .name("conelab-store".into())
        .spawn(move || {
            Recorder {
                sampler,
                writer,
                run_dir,
                forward,
                fault,
                staged: Vec::new(),
                step: 0,
                failing: false,
                broken: false,
            }
            .run(events)
        })
}

impl<F: FnMut(Event) -> bool> Recorder<F> {
    fn run(mut self, events: Receiver<Event>) {
        loop {
            match events.recv_timeout(TICK) {
                Ok(event) => {
                    self.step = event.step().max(self.step);
                    if event.is_final() {
                        self.finish(event, &events);
                        return;
                    }
                    if self.broken {
                        self.pass_through(event);
                    } else {
                        self.guarded(|r| r.on_event(event));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    // The engine ended without a final event (it cannot, short of a bug): say so.
                    let step = self.step;
                    self.finish(
                        Event::Failed {
                            step,
                            message: "the engine thread ended without a final event".into(),
                        },
                        &events,
                    );
                    return;
                }
            }
            let step = self.step;
            if let Some(sampled) = self.sampler.as_mut().and_then(|s| s(step)) {
                if self.broken {
                    self.pass_through(sampled);
                } else {
                    self.guarded(|r| r.on_event(sampled));
                }
            }
            self.guarded(|r| {
                if r.writer.flush_due() {
                    r.flush_and_commit();
                }
            });
        }
    }

    /// Runs `f`; a panic inside breaks the recorder (reported once through the fault).
    fn guarded(&mut self, f: impl FnOnce(&mut Self)) {
        if self.broken {
            return;
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self)));
        if let Err(panic) = result {
            self.broken = true;
            let message = format!(
                "the metrics store's recorder panicked at step {}: {}",
                self.step,
                panic_message(panic.as_ref())
            );
            self.fault.set(message.clone());
            // Keep what was recorded until then, if the writer still can.
            let flushed =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.writer.flush()));
            let message = match flushed {
                Ok(Ok(())) => format!("{message} (the store is kept up to there)"),
                _ => format!("{message} (its last rows could not be written)"),
            };
            let step = self.step;
            (self.forward)(Event::Warning { step, message });
        }
    }

    /// A broken recorder passes events on unrecorded. A checkpoint it cannot vouch for (the
    /// store is not durable up to its step) is not put in place.
    fn pass_through(&mut self, event: Event) {
        match event {
            Event::Projection(_) => {}
            Event::CheckpointStaged { step, staging, .. } => {
                let _ = std::fs::remove_dir_all(&staging);
                (self.forward)(Event::Warning {
                    step,
                    message: format!(
                        "the checkpoint at step {step} was not put in place: the metrics store stopped recording before it"
                    ),
                });
            }
            other => {
                (self.forward)(other);
            }
        }
    }

    /// Rolls the segments into one base once there are many (`StoreWriter::roll`); what goes
    /// wrong there is a warning, never a lost row (the segments stay until the base is in place).
    fn roll(&mut self) {
        match self.writer.roll() {
            Ok(None) => {}
            Ok(Some(done)) => {
                for (path, why) in done.set_aside {
                    self.warn(format!(
                        "{why}; moved to {} (nothing deleted)",
                        path.display()
                    ));
                }
            }
            Err(e) => self.warn(format!(
                "rolling the store's segments into one: {e} (training goes on)"
            )),
        }
    }

    fn warn(&mut self, what: String) {
        if !self.failing {
            let step = self.step;
            (self.forward)(Event::Warning {
                step,
                message: format!("metrics store: {what}"),
            });
        }
        self.failing = true;
    }

    fn on_event(&mut self, event: Event) {
        if let Event::CheckpointStaged {
            step,
            staging,
            keep,
        } = event
        {
            self.staged.push(Staged {
                step,
                staging,
                keep,
            });
            self.flush_and_commit();
            return;
        }
        if let Err(e) = EventSink::on_event(&mut self.writer, &event) {
            self.warn(format!("{e} (training goes on; rows stay buffered)"));
        }
        // The projections stay in the store; viewers ask for them. When nobody takes events
        // any more, recording goes on (the run notices that on its own).
        if !matches!(event, Event::Projection(_)) {
            let _ = (self.forward)(event);
        }
    }

    /// Flushes; on success puts the staged checkpoints in place (the newest; older staged ones
    /// are superseded and deleted).
    fn flush_and_commit(&mut self) {
        match self.writer.flush() {
            Ok(()) => {
                self.failing = false;
                self.roll();
            }
            Err(e) => {
                let staged = match self.staged.last() {
                    Some(s) => format!(
                        "; the checkpoint at step {} waits, staged, until the store is written",
                        s.step
                    ),
                    None => String::new(),
                };
                self.warn(format!(
                    "{e} (training goes on; rows stay buffered{staged})"
                ));
                return;
            }
        }
        let Some(newest) = self.staged.pop() else {
            return;
        };
        for older in self.staged.drain(..) {
            let _ = std::fs::remove_dir_all(&older.staging);
        }
        match conelab_core::run_dir::commit(
            &self.run_dir,
            newest.step,
            &newest.staging,
            newest.keep,
        ) {
            Ok(path) => {
                // Crash tests: the process killed just after a checkpoint is in place.
                if conelab_base::fault::check("checkpoint.committed").is_err() {
                    std::process::abort();
                }
                let event = Event::Checkpoint {
                    step: newest.step,
                    path,
                };
                if let Err(e) = EventSink::on_event(&mut self.writer, &event) {
                    self.warn(format!("{e}"));
                }
                (self.forward)(event);
            }
            Err(e) => {
                let step = newest.step;
                let _ = std::fs::remove_dir_all(&newest.staging);
                (self.forward)(Event::Warning {
                    step,
                    message: format!(
                        "checkpoint at step {step} could not be put in place: {e}; the newest checkpoint is the one before"
                    ),
                });
            }
        }
    }

    /// The run's last event: commit what is staged, flush, compact, pass it on, then record the
    /// stragglers (the metrics thread's last analysis may come after it) and flush again.
    fn finish(&mut self, last: Event, events: &Receiver<Event>) {
        if self.broken {
            (self.forward)(last);
            for e in events.iter() {
                self.pass_through(e);
            }
            return;
        }
        self.guarded(|r| {
            if let Err(e) = EventSink::on_event(&mut r.writer, &last) {
                r.warn(format!("{e}"));
            }
            r.flush_and_commit();
            if !r.failing
                && let Err(e) = r.writer.compact()
            {
                r.warn(format!(
                    "compaction failed: {e} (the segments are kept as they are)"
                ));
            }
        });
        // Stragglers first, so that a consumer leaving on the final event has them recorded.
        let mut stragglers = Vec::new();
        while let Ok(e) = events.recv_timeout(Duration::from_millis(50)) {
            stragglers.push(e);
        }
        for e in stragglers {
            self.guarded(|r| {
                if let Err(err) = EventSink::on_event(&mut r.writer, &e) {
                    r.warn(format!("{err}"));
                }
                if !matches!(e, Event::Projection(_)) {
                    (r.forward)(e);
                }
            });
        }
        self.guarded(|r| {
            if let Err(e) = r.writer.flush() {
                r.warn(format!("{e}"));
            }
        });
        (self.forward)(last);
    }
}
