//! The Neighbours pane: a word searched (the box has the keyboard while open), its nearest rows
//! asked of the run, words watched (pinned).

use ratatui::crossterm::event::KeyCode;

use super::{Action, App, Effect, Pane};

/// The Neighbours pane's keys: Enter searches, `w` watches the selected word.
pub fn neighbors_key(code: KeyCode) -> Option<Action> {
    match code {
        KeyCode::Enter => Some(Action::SearchStart),
        KeyCode::Char('w') => Some(Action::TogglePin),
        _ => None,
    }
}

/// A key while the word search box is open (the workbench and the browser).
pub fn search_action(code: KeyCode) -> Action {
    match code {
        KeyCode::Char(c) => Action::SearchInput(c),
        KeyCode::Backspace => Action::SearchBackspace,
        KeyCode::Up => Action::SearchMove(-1),
        KeyCode::Down => Action::SearchMove(1),
        KeyCode::Enter => Action::SearchAccept,
        KeyCode::Esc => Action::SearchCancel,
        _ => Action::None,
    }
}

impl App {
    pub(super) fn apply_neighbors(&mut self, action: Action) -> Effect {
        match action {
            Action::SearchStart => {
                self.focus = Pane::Neighbors;
                self.neighbors.start_search();
                // The most frequent words before anything is typed: a word to start from.
                if let Some(v) = &self.vocab {
                    self.neighbors.rematch(v);
                }
            }
            Action::SearchInput(c) => {
                if let Some(v) = &self.vocab {
                    self.neighbors.input(c, v);
                }
            }
            Action::SearchBackspace => {
                if let Some(v) = &self.vocab {
                    self.neighbors.backspace(v);
                }
            }
            Action::SearchMove(d) => self.neighbors.move_cursor(d),
            Action::SearchAccept => {
                self.neighbors.accept(self.analysis.as_deref());
                self.ask_neighbors();
            }
            Action::SearchCancel => self.neighbors.cancel(),
            Action::TogglePin => {
                self.neighbors.toggle_pin(self.analysis.as_deref());
                self.ask_neighbors();
            }
            _ => {}
        }
        Effect::None
    }
}
