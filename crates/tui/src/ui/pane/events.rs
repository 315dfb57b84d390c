//! The Events pane: the run's log, newest last.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Color;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::app::App;
use crate::style::Palette;
use conelab_protocol::view::LogKind;

pub(in crate::ui) fn events(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    let height = area.height as usize;
    let lines: Vec<Line> = app
        .run
        .log
        .iter()
        .rev()
        .take(height)
        .rev()
        .map(|l| {
            let color = match l.kind {
                LogKind::Info => Color::Gray,
                LogKind::Intervention => Color::Magenta,
                LogKind::Eval => Color::Cyan,
                LogKind::Checkpoint => Color::Green,
                LogKind::Warning => Color::Yellow,
                LogKind::Error => Color::Red,
            };
            Line::from(vec![
                Span::styled(format!("{:>6} ", l.step), pal.fg(Color::DarkGray)),
                Span::styled(l.text.clone(), pal.fg(color)),
            ])
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), area);
}
