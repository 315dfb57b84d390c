//! The snapshot the Embedding, Groups and Spectrum panes show — the newest (live) or one scrubbed
//! back to — and the Embedding pane's projection (the cone as stored, or centred).

use ratatui::crossterm::event::KeyCode;

use super::{Action, App, Effect, Request};

/// The keys of the panes the scrub moves (`scatter`: the Embedding pane, whose projection `c`
/// switches): `[` `]` or ← → an older / newer snapshot, Home the first, End the newest (live).
pub fn time_scrub_key(code: KeyCode, scatter: bool) -> Option<Action> {
    Some(match code {
        KeyCode::Char('c') if scatter => Action::ToggleCentred,
        KeyCode::Char('[') | KeyCode::Left => Action::Scrub(-1),
        KeyCode::Char(']') | KeyCode::Right => Action::Scrub(1),
        KeyCode::Home => Action::Scrub(i32::MIN),
        KeyCode::End => Action::Scrub(i32::MAX),
        _ => return None,
    })
}

impl App {
    pub(super) fn apply_time_scrub(&mut self, action: Action) -> Effect {
        match action {
            Action::ToggleCentred => self.centred = !self.centred,
            Action::Scrub(delta) => {
                let n = self.run.projection_steps.len();
                if n > 0 {
                    let at = self.scrub.unwrap_or(n - 1) as i64 + delta as i64;
                    // Past the newest snapshot: follow the live one again.
                    self.scrub = if at >= n as i64 - 1 && delta > 0 {
                        None
                    } else {
                        Some(at.clamp(0, n as i64 - 1) as usize)
                    };
                    if let Some(step) = self.shown_step()
                        && !self.frames.contains_key(&step)
                        && self.analysis.is_none()
                    {
                        self.ask(Request::Projection(Some(step)));
                    }
                }
            }
            _ => {}
        }
        Effect::None
    }
}
