//! The offline browser's screen (`conelab inspect` on a terminal): one matrix, or two side by
//! side.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::Color;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::pane::render_pane;
use crate::app::Pane;
use crate::chrome::{self, Screen, keys_overlay, screen, too_small};
use crate::style::Palette;

/// The offline browser (`conelab inspect` on a terminal): for each matrix a row of Embedding,
/// Neighbours and Spectrum under a Groups table (one matrix), or the focused pane of each side by
/// side when zoomed.
pub fn render_browser(frame: &mut Frame, browser: &crate::browser::Browser) {
    let area = frame.area();
    if too_small(frame, area) {
        return;
    }
    let no_color = browser.sides.first().is_some_and(|s| s.app.view.no_color);
    let pal = Palette { no_color };
    let Screen {
        header,
        body,
        footer,
        ..
    } = screen(area, 0);
    let names: Vec<String> = browser.sides.iter().map(|s| s.describe()).collect();
    frame.render_widget(
        Paragraph::new(Line::from(vec![
            chrome::title(" conelab inspect ", pal.fg(Color::LightGreen)),
            Span::raw(names.join("  vs  ")),
        ])),
        header,
    );
    chrome::footer(
        frame,
        footer,
        "? help · q quit · Tab/2,3,4,7 pane · z zoom · / search (both) · w watch · c centred",
        pal.fg(Color::DarkGray),
    );
    let n = browser.sides.len().max(1) as u32;
    let side_areas = Layout::vertical(vec![Constraint::Ratio(1, n); n as usize]).split(body);
    for (side, &area) in browser.sides.iter().zip(side_areas.iter()) {
        let rows = side.rows.as_ref();
        if browser.zoom {
            render_pane(frame, &side.app, rows, browser.focus, area, &pal);
            continue;
        }
        let row = if browser.sides.len() == 1 {
            let [groups, rest] =
                Layout::vertical([Constraint::Length(8), Constraint::Min(0)]).areas(area);
            render_pane(frame, &side.app, rows, Pane::Groups, groups, &pal);
            rest
        } else {
            area
        };
        let [scatter, neighbors, spectrum] = Layout::horizontal([
            Constraint::Percentage(40),
            Constraint::Percentage(30),
            Constraint::Percentage(30),
        ])
        .areas(row);
        render_pane(frame, &side.app, rows, Pane::Scatter, scatter, &pal);
        render_pane(frame, &side.app, rows, Pane::Neighbors, neighbors, &pal);
        render_pane(frame, &side.app, rows, Pane::Spectrum, spectrum, &pal);
    }
    if browser.help {
        keys_overlay(frame, area, &crate::browser::HELP);
    }
    if browser.sides.first().is_some_and(|s| s.app.view.light) {
        conelab_widgets::light_theme(frame.buffer_mut());
    }
}
