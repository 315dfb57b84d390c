//! The Events pane: the run's log, newest last, each entry wrapped to the pane's width under its
//! step (a long warning or the diverged advice is read whole, never cut at the pane's edge).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Color;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::app::App;
use crate::format::wrap_words;
use crate::style::Palette;
use conelab_protocol::view::LogKind;

/// The step column's width ("{:>6} ").
const STEP_COLUMN: usize = 7;

pub(in crate::ui) fn events(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    let height = area.height as usize;
    let text_width = (area.width as usize).saturating_sub(STEP_COLUMN).max(8);
    // Newest first until the pane is full, then put back in order: only the entries shown
    // are wrapped, however long the log.
    let mut lines: Vec<Line> = Vec::with_capacity(height);
    for l in app.run.log.iter().rev() {
        if lines.len() >= height {
            break;
        }
        let color = match l.kind {
            LogKind::Info => Color::Gray,
            LogKind::Intervention => Color::Magenta,
            LogKind::Eval => Color::Cyan,
            LogKind::Checkpoint => Color::Green,
            LogKind::Warning => Color::Yellow,
            LogKind::Error => Color::Red,
        };
        let wrapped = wrap_words(&l.text, text_width);
        let mut entry: Vec<Line> = wrapped
            .into_iter()
            .enumerate()
            .map(|(i, part)| {
                let step = if i == 0 {
                    format!("{:>6} ", l.step)
                } else {
                    " ".repeat(STEP_COLUMN)
                };
                Line::from(vec![
                    Span::styled(step, pal.fg(Color::DarkGray)),
                    Span::styled(part, pal.fg(color)),
                ])
            })
            .collect();
        // An entry taller than what is left shows its head (the step and the start of it).
        entry.truncate(height - lines.len());
        lines.extend(entry.into_iter().rev());
    }
    lines.reverse();
    frame.render_widget(Paragraph::new(lines), area);
}
