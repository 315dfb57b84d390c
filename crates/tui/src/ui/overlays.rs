//! What is drawn over the workbench's panes: the help and the quit dialog.

use ratatui::Frame;
use ratatui::layout::{Alignment, Rect};
use ratatui::style::Color;
use ratatui::text::Line;
use ratatui::widgets::{Block, Clear, Paragraph};

use crate::chrome::{centered, keys_layout, keys_overlay_from};
use crate::help::HELP;
use crate::style::Palette;

pub(super) fn help_overlay(frame: &mut Frame, area: Rect, scroll: u16) {
    keys_overlay_from(frame, area, HELP, scroll, true);
}

/// How far the workbench's help can scroll on a screen of `area` (0 when it fits).
pub fn help_max_scroll(area: Rect) -> u16 {
    let (lines, rect) = keys_layout(area, HELP);
    (lines.len() as u16).saturating_sub(rect.height.saturating_sub(2))
}

pub(super) fn quit_dialog(frame: &mut Frame, area: Rect, pal: &Palette) {
    let rect = centered(area, 54, 6);
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(vec![
            Line::raw("Training is still running."),
            Line::raw("d detach (training goes on) · c cancel"),
            Line::raw("s stop and save · x stop without saving"),
        ])
        .alignment(Alignment::Center)
        .block(
            Block::bordered()
                .title("quit?")
                .border_style(pal.fg(Color::Yellow)),
        ),
        rect,
    );
}
