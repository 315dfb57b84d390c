//! The Controls pane: its cursor, the line under it switched, scaled or typed (the typed value
//! has the keyboard until Enter or Esc), each change sent as the run's command and shown pending
//! until the run acknowledges it.

use ratatui::crossterm::event::KeyCode;

use conelab_core::events::Command;
use conelab_core::objective::{GateParts, ObjectiveChange, Term};
use conelab_protocol::view::LogKind;

use super::{Action, App, Control, Effect, LossChoice, MAX_TYPED, PAPER_TOKENS_PER_UPDATE};

/// The Controls pane's keys: ↑ ↓ (k j) select, Space/Enter switch, `+` `-` scale, `=` type.
pub fn controls_key(code: KeyCode) -> Option<Action> {
    Some(match code {
        KeyCode::Up | KeyCode::Char('k') => Action::ControlsUp,
        KeyCode::Down | KeyCode::Char('j') => Action::ControlsDown,
        KeyCode::Char(' ') | KeyCode::Enter => Action::ControlsToggle,
        KeyCode::Char('+') => Action::ControlsScale(2.0),
        KeyCode::Char('=') => Action::ControlsType,
        KeyCode::Char('-') => Action::ControlsScale(0.5),
        _ => return None,
    })
}

/// A key while a value is typed: it has the keyboard.
pub fn typing_key(code: KeyCode) -> Action {
    match code {
        KeyCode::Char(c) => Action::TypeInput(c),
        KeyCode::Backspace => Action::TypeBackspace,
        KeyCode::Enter => Action::TypeAccept,
        KeyCode::Esc => Action::TypeCancel,
        _ => Action::None,
    }
}

impl App {
    pub(super) fn apply_controls(&mut self, action: Action) -> Effect {
        match action {
            Action::ControlsUp => {
                self.pending_loss = None;
                let n = Control::count();
                self.controls_cursor = (self.controls_cursor + n - 1) % n;
                Effect::None
            }
            Action::ControlsDown => {
                self.pending_loss = None;
                self.controls_cursor = (self.controls_cursor + 1) % Control::count();
                Effect::None
            }
            Action::ControlsToggle => self.toggle_control(),
            Action::ControlsScale(factor) => self.scale_control(factor),
            Action::ControlsType => {
                let control = self.selected_control();
                if self.value_of(control).is_some() && self.controllable() {
                    self.typing = Some((control, String::new()));
                }
                Effect::None
            }
            Action::TypeInput(c) => {
                if let Some((_, text)) = &mut self.typing {
                    let numeric = c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+');
                    if numeric && text.len() < MAX_TYPED {
                        text.push(c);
                    } else {
                        // Said, not silently dropped: a cut-off "0.000…1" would be sent as 0.
                        let step = self.step();
                        self.run.log(
                            step,
                            LogKind::Warning,
                            format!(
                                "{c:?} not taken: a number is digits, '.', 'e', '+' and '-', at most {MAX_TYPED} of them"
                            ),
                        );
                    }
                }
                Effect::None
            }
            Action::TypeBackspace => {
                if let Some((_, text)) = &mut self.typing {
                    text.pop();
                }
                Effect::None
            }
            Action::TypeCancel => {
                self.typing = None;
                Effect::None
            }
            Action::TypeAccept => match self.typing.take() {
                Some((control, text)) => match text.trim().parse::<f64>() {
                    Ok(v) if v.is_finite() && v >= 0.0 => self.set_value(control, v),
                    _ => {
                        let step = self.step();
                        self.run.log(
                            step,
                            LogKind::Warning,
                            format!("{text:?}: not a finite number ≥ 0; nothing sent"),
                        );
                        Effect::None
                    }
                },
                None => Effect::None,
            },
            _ => Effect::None,
        }
    }

    pub fn selected_control(&self) -> Control {
        Control::ALL[self.controls_cursor.min(Control::count() - 1)]
    }

    pub(super) fn toggle_control(&mut self) -> Effect {
        if self.selected_control() == Control::Term(Term::Agg)
            && let Some(effect) = self.agg_on_scaled()
        {
            return effect;
        }
        let change = match self.selected_control() {
            Control::Term(term) => ObjectiveChange::Enable {
                term,
                on: !self.run.objectives.term(term).0,
            },
            Control::Freeze(group) => ObjectiveChange::Freeze {
                group,
                frozen: !self.run.objectives.freeze.is_frozen(group),
            },
            Control::GateFreeze => ObjectiveChange::GateFreeze {
                parts: match self.run.objectives.gate_freeze {
                    GateParts::None => GateParts::B,
                    GateParts::B => GateParts::C,
                    GateParts::C => GateParts::Bc,
                    GateParts::Bc => GateParts::None,
                },
            },
            Control::Pause => return self.pause_command(),
            Control::Checkpoint => return self.live_command(Command::SaveCheckpoint),
            Control::LearningRate => return Effect::None,
            Control::Loss => match self.pending_loss.take() {
                Some(LossChoice { kind, squash }) => ObjectiveChange::Loss { kind, squash },
                None => return Effect::None,
            },
        };
        self.live_command(Command::Objective { change })
    }

    /// AGG switched on from the Controls with the paper's α (0.03 occurrences per update at
    /// 32,768 tokens per update) on a run of another size: α scaled to this run's tokens per
    /// update, so that about the paper's share of the vocabulary counts as rare (at `tiny`'s
    /// 1,024 the paper's α made 4,737 of 5,002 tokens rare). Said in the Events; the rare set's
    /// size shows in Progress from the next step. `None`: nothing to scale.
    fn agg_on_scaled(&mut self) -> Option<Effect> {
        let (on, alpha) = self.run.objectives.term(Term::Agg);
        let tokens = self.run.info.tokens_per_update;
        let paper = conelab_core::objective::AggConfig::default().alpha;
        if on || alpha != paper || tokens == 0 || tokens == PAPER_TOKENS_PER_UPDATE {
            return None;
        }
        let scaled = paper * tokens as f64 / PAPER_TOKENS_PER_UPDATE as f64;
        let effect = self.live_command(Command::Objective {
            change: ObjectiveChange::Enable {
                term: Term::Agg,
                on: true,
            },
        });
        let Effect::Send(enable) = effect else {
            return Some(effect);
        };
        let step = self.step();
        self.run.log(
            step,
            LogKind::Info,
            format!(
                "AGG on with α = {} (the paper's 0.03 at 32,768 tokens per update, scaled to this run's {tokens}); the rare set's size shows in Progress",
                conelab_widgets::format_compact(scaled)
            ),
        );
        self.pending = Some((Control::Term(Term::Agg), scaled));
        Some(Effect::SendAll(vec![
            enable,
            Command::Objective {
                change: ObjectiveChange::Weight {
                    term: Term::Agg,
                    weight: scaled,
                },
            },
        ]))
    }

    /// The value a line adjusts, as the run acknowledged it (a weight, the learning rate);
    /// `None` for a line without one.
    pub fn value_of(&self, control: Control) -> Option<f64> {
        match control {
            Control::Term(term) => Some(self.run.objectives.term(term).1),
            Control::LearningRate => self.run.lr,
            _ => None,
        }
    }

    /// Sends `value` for a value line, unless it changes nothing: the value in force already,
    /// or the weight of a term that is off (it would be recorded nowhere; switch it on first).
    pub(super) fn set_value(&mut self, control: Control, value: f64) -> Effect {
        let Some(current) = self.value_of(control) else {
            return Effect::None;
        };
        if value == current {
            return Effect::None;
        }
        let command = match control {
            Control::Term(term) => {
                if !self.run.objectives.term(term).0 {
                    let step = self.step();
                    self.run.log(
                        step,
                        LogKind::Info,
                        format!(
                            "{} is off: switch it on (Space) to change its weight",
                            term.name()
                        ),
                    );
                    return Effect::None;
                }
                Command::Objective {
                    change: ObjectiveChange::Weight {
                        term,
                        weight: value,
                    },
                }
            }
            Control::LearningRate => Command::SetLr { lr: value },
            _ => return Effect::None,
        };
        let effect = self.live_command(command);
        if matches!(effect, Effect::Send(_)) {
            self.pending = Some((control, value));
        }
        effect
    }

    pub(super) fn scale_control(&mut self, factor: f64) -> Effect {
        let control = self.selected_control();
        match control {
            Control::Term(_) | Control::LearningRate => match self.value_of(control) {
                Some(v) => self.set_value(control, v * factor),
                None => Effect::None,
            },
            Control::Loss => {
                let current = LossChoice::of(&self.run.objectives);
                let from = self.pending_loss.unwrap_or(current);
                let to = if factor > 1.0 {
                    from.next()
                } else {
                    from.previous()
                };
                self.pending_loss = (to != current).then_some(to);
                Effect::None
            }
            _ => Effect::None,
        }
    }
}
