//! The workbench as a whole: the quit dialog and the help, which answer first while open; focus
//! and zoom; leaving, detaching; pause and checkpoint, sent while the run lives and listens; the
//! mouse.

use conelab_core::events::Command;
use conelab_protocol::view::{LogKind, RunStatus};

use super::{Action, App, Effect, Pane};
use crate::help::HELP;

impl App {
    /// The quit dialog's answer (it has the keyboard while open).
    pub(super) fn answer_quit_dialog(&mut self, action: Action) -> Effect {
        match action {
            Action::StopAndSave | Action::StopWithoutSaving => {
                self.confirm_quit = false;
                self.exit_when_finished = true;
                self.run.status = RunStatus::Stopping;
                Effect::Send(Command::Stop {
                    save: action == Action::StopAndSave,
                })
            }
            Action::Detach => {
                self.confirm_quit = false;
                Effect::Detach
            }
            Action::Cancel | Action::Quit => {
                self.confirm_quit = false;
                Effect::None
            }
            _ => Effect::None,
        }
    }

    /// With the help open: a scroll scrolls it; any other action but quitting closes it, and
    /// is done too unless it was the help's own key or Esc (`None`: go on with the action).
    pub(super) fn answer_help(&mut self, action: &Action) -> Option<Effect> {
        if let Action::HelpScroll(d) = action {
            // Bounded by the help's length (the overlay clamps it to what it shows).
            let most = HELP.len() as i64 * 3;
            self.help_scroll = (self.help_scroll as i64 + *d as i64).clamp(0, most) as u16;
            return Some(Effect::None);
        }
        if !matches!(action, Action::Quit | Action::None) {
            self.help = false;
            if *action == Action::ToggleHelp || *action == Action::Cancel {
                return Some(Effect::None);
            }
        }
        None
    }

    pub(super) fn apply_workbench(&mut self, action: Action) -> Effect {
        match action {
            Action::Cancel => {
                self.zoom = false;
                Effect::None
            }
            Action::Quit => {
                if self.controllable() && self.run.status.is_live() {
                    self.confirm_quit = true;
                    Effect::None
                } else {
                    Effect::Exit
                }
            }
            Action::Detach => {
                if self.controllable() && self.run.status.is_live() {
                    Effect::Detach
                } else {
                    Effect::Exit
                }
            }
            Action::ToggleHelp => {
                self.help = true;
                self.help_scroll = 0;
                Effect::None
            }
            Action::FocusNext | Action::FocusPrev => {
                let i = Pane::ALL.iter().position(|p| *p == self.focus).unwrap_or(0);
                let n = Pane::ALL.len();
                let next = if action == Action::FocusNext {
                    (i + 1) % n
                } else {
                    (i + n - 1) % n
                };
                self.focus = Pane::ALL[next];
                Effect::None
            }
            Action::Focus(p) => {
                self.focus = p;
                Effect::None
            }
            Action::ToggleZoom => {
                self.zoom = !self.zoom;
                Effect::None
            }
            Action::TogglePause => self.pause_command(),
            Action::SaveCheckpoint => self.live_command(Command::SaveCheckpoint),
            Action::ToggleMouse => {
                self.mouse = !self.mouse;
                let step = self.step();
                let line = if self.mouse {
                    "mouse on: click focuses a pane, the wheel scrolls (M: off, to select text)"
                } else {
                    "mouse off: the terminal selects text (M: on again)"
                };
                self.run.log(step, LogKind::Info, line.into());
                Effect::None
            }
            // Nothing, the dialog's answers without the dialog, a scroll without the help.
            _ => Effect::None,
        }
    }

    /// A command only makes sense while the run lives and takes commands from here.
    pub(super) fn live_command(&self, command: Command) -> Effect {
        if self.controllable()
            && self.run.status.is_live()
            && self.run.status != RunStatus::Stopping
        {
            Effect::Send(command)
        } else {
            Effect::None
        }
    }

    pub(super) fn pause_command(&self) -> Effect {
        match self.run.status {
            RunStatus::Paused | RunStatus::Diverged { .. } => self.live_command(Command::Resume),
            _ => self.live_command(Command::Pause),
        }
    }
}
