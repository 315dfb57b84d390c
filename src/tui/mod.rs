//! The live workbench: a client of the engine (gitui/bottom style). State ← engine events
//! (`app.rs`); key → action → command (`keys.rs`); render = pure function of the state (`ui.rs`).
//!
//! The loop never waits on training: it polls the keyboard with a short timeout and drains the
//! event channel without blocking; it redraws only when something changed. Training never waits
//! on drawing: events go through an unbounded channel, snapshots through latest-wins slots.

pub mod app;
pub mod bench;
pub mod browser;
pub mod keys;
pub mod neighbors;
pub mod ui;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use ratatui::crossterm::event::{
    self, DisableMouseCapture, EnableMouseCapture, Event as TermEvent, KeyEventKind,
};
use ratatui::layout::Rect;

use crate::data::FrequencyGroups;
use crate::engine::{EngineHandle, FinishReason};
use crate::headless::Outcome;
use crate::metrics::RowGroups;
use crate::objective::Objectives;
use app::{App, Effect, RunStatus, ViewOptions};

#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    #[error("cannot use the terminal: {0}")]
    Terminal(#[from] io::Error),
}

/// How often the loop looks at the keyboard and the engine when nothing happens.
pub(crate) const TICK: Duration = Duration::from_millis(50);

/// Restores the terminal however the loop ends (return, error, unwinding panic).
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = ratatui::crossterm::execute!(std::io::stdout(), DisableMouseCapture);
        ratatui::restore();
    }
}

/// The offline browser until the user leaves.
pub fn run_browser(mut browser: browser::Browser) -> Result<(), TuiError> {
    let mut terminal = ratatui::try_init()?;
    let _guard = TerminalGuard;
    let mut dirty = true;
    while !browser.exit {
        if dirty {
            terminal.draw(|frame| ui::render_browser(frame, &browser))?;
            dirty = false;
        }
        if event::poll(TICK)? {
            match event::read()? {
                TermEvent::Key(key) => {
                    browser.on_key(key);
                    dirty = true;
                }
                TermEvent::Resize(..) => dirty = true,
                _ => {}
            }
        }
    }
    Ok(())
}

/// Runs the workbench until the user leaves. `objectives` are the run's at the start (the app
/// mirrors every acknowledged change); `groups` colour the scatter; `vocab` feeds the neighbour
/// search; `reference` is another run's spectrum for the Spectrum pane.
pub fn run_live(
    handle: EngineHandle,
    objectives: Objectives,
    groups: FrequencyGroups,
    vocab: Arc<neighbors::Vocabulary>,
    reference: Option<(String, Vec<f64>)>,
    view: ViewOptions,
) -> Result<Outcome, TuiError> {
    // try_init installs a panic hook that restores the terminal before the panic message.
    let mut terminal = ratatui::try_init()?;
    let _guard = TerminalGuard;
    // The mouse is optional: a terminal that refuses it keeps the keyboard.
    let _ = ratatui::crossterm::execute!(std::io::stdout(), EnableMouseCapture);
    let mut app = App::new(objectives, view).with_vocabulary(vocab);
    app.spectrum_reference = reference;
    let rows = RowGroups::from_ranks(&groups);
    let mut dirty = true;
    loop {
        while let Ok(e) = handle.events().try_recv() {
            app.on_event(e);
            dirty = true;
        }
        if let Some(a) = handle.analyses().take() {
            app.on_analysis(a);
            dirty = true;
        }
        if app.should_exit() {
            break;
        }
        if dirty {
            terminal.draw(|frame| ui::render(frame, &app, Some(&rows)))?;
            dirty = false;
        }
        if event::poll(TICK)? {
            match event::read()? {
                TermEvent::Key(key) if key.kind != KeyEventKind::Release => {
                    let action = keys::action_for(&app, key);
                    dirty = true;
                    match app.apply(action) {
                        Effect::None => {}
                        Effect::Send(c) => handle.send(c),
                        Effect::Exit => break,
                    }
                }
                TermEvent::Mouse(mouse) => {
                    let size = terminal.size()?;
                    let panes = ui::pane_areas(Rect::new(0, 0, size.width, size.height), &app);
                    let action = keys::mouse_action(&app, mouse, &panes);
                    if action != app::Action::None {
                        dirty = true;
                        if let Effect::Send(c) = app.apply(action) {
                            handle.send(c);
                        }
                    }
                }
                TermEvent::Resize(..) => dirty = true,
                _ => {}
            }
        }
    }
    drop(terminal);
    if app.status.is_live() {
        // Leaving while the engine still waits (e.g. paused after a divergence): end it.
        handle.send(crate::engine::Command::Stop { save: false });
    }
    handle.join();
    Ok(match app.status {
        RunStatus::Finished(FinishReason::Completed) => Outcome::Completed { step: app.step() },
        RunStatus::Diverged { step, loss } => Outcome::Diverged { step, loss },
        RunStatus::Failed(message) => Outcome::Failed { message },
        _ => Outcome::Stopped { step: app.step() },
    })
}
