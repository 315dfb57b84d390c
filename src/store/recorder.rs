//! The engine's events into the store, on a thread of their own between the engine and its
//! consumer (the TUI or the headless reporter). Training never waits on a flush; neither does
//! drawing. The final event is passed on only after the store is flushed and compacted, so a
//! consumer that exits on it leaves a complete store behind.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use super::StoreWriter;
use crate::engine::{EngineHandle, Event};

/// How often an idle recorder looks at its flush timer.
const TICK: Duration = Duration::from_millis(500);

/// Records every event of `handle` into `writer`; the returned handle gives the same events.
pub fn record(handle: EngineHandle, writer: StoreWriter) -> std::io::Result<EngineHandle> {
    handle.tap_events("conelab-store", move |events, out| run(writer, events, out))
}

fn run(mut writer: StoreWriter, events: Receiver<Event>, out: Sender<Event>) {
    let mut step = 0;
    // A store problem is reported once per kind of failure, not once per event.
    let mut failed = false;
    let warn = |out: &Sender<Event>, step: u64, failed: &mut bool, e: super::StoreError| {
        if !*failed {
            let _ = out.send(Event::Warning {
                step,
                message: format!("metrics store: {e} (training goes on; rows stay buffered)"),
            });
        }
        *failed = true;
    };
    loop {
        match events.recv_timeout(TICK) {
            Ok(event) => {
                step = event_step(&event).unwrap_or(step);
                let last = match writer.record(&event) {
                    Ok(last) => last,
                    Err(e) => {
                        warn(&out, step, &mut failed, e);
                        matches!(event, Event::Finished { .. } | Event::Failed { .. })
                    }
                };
                if last {
                    if let Err(e) = writer.compact() {
                        failed = false;
                        warn(&out, step, &mut failed, e);
                    }
                    let _ = out.send(event);
                    // Nothing follows the final event but stragglers of the analysis thread.
                    for e in events.iter() {
                        let _ = writer.record(&e);
                        let _ = out.send(e);
                    }
                    let _ = writer.flush();
                    return;
                }
                let _ = out.send(event);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                let _ = writer.flush();
                return;
            }
        }
        match writer.maybe_flush() {
            Ok(()) => failed = false,
            Err(e) => warn(&out, step, &mut failed, e),
        }
    }
}

fn event_step(event: &Event) -> Option<u64> {
    Some(match event {
        Event::Started { step, .. }
        | Event::Snapshot { step }
        | Event::Rejected { step, .. }
        | Event::Checkpoint { step, .. }
        | Event::Paused { step }
        | Event::Resumed { step }
        | Event::Diverged { step, .. }
        | Event::Warning { step, .. }
        | Event::Finished { step, .. }
        | Event::Failed { step, .. } => *step,
        Event::Step(s) => s.step,
        Event::Eval(e) => e.step,
        Event::Embedding(e) => e.step,
        Event::Applied(a) => a.step,
    })
}
