//! What every view draws around its panes: the screen's limits (too small, compact), a box
//! centred over the panes, and the keys overlay of a view's help.

use conelab_widgets::{Series, SpectrumPlot};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

use crate::format::wrap_words;

/// Below this the layout would be garbage: say so instead.
pub const MIN_WIDTH: u16 = 60;
/// Below this many rows (or columns) the panes would get two or three lines each: the focused
/// pane takes the whole body and the footer lists the panes as tabs (Tab, 1–8 switch).
pub const COMPACT_HEIGHT: u16 = 30;
pub const COMPACT_WIDTH: u16 = 100;
pub const MIN_HEIGHT: u16 = 16;

/// A screen too small for every pane at once: one pane at a time, as tabs.
pub fn compact(area: Rect) -> bool {
    area.height < COMPACT_HEIGHT || area.width < COMPACT_WIDTH
}

/// Below the minimum size: a message instead of a layout. Returns whether it drew it.
pub(crate) fn too_small(frame: &mut Frame, area: Rect) -> bool {
    if area.width >= MIN_WIDTH && area.height >= MIN_HEIGHT {
        return false;
    }
    let msg = format!(
        "terminal too small: {}×{} (conelab needs at least {MIN_WIDTH}×{MIN_HEIGHT})",
        area.width, area.height
    );
    frame.render_widget(Paragraph::new(msg).wrap(Wrap { trim: true }), area);
    true
}

/// A box of `width` × `height` centred in `area` (cut to it).
pub(crate) fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

/// A box of key bindings (key, what it does) in the middle of `area`.
pub(crate) fn keys_overlay(frame: &mut Frame, area: Rect, help: &[(&str, &str)]) {
    keys_overlay_from(frame, area, help, 0, false);
}

/// The keys, from line `scroll` on. A help taller than the terminal says how much is above and
/// below in its border, never dropping lines silently (`scrollable`: whether ↑↓ scroll it).
pub(crate) fn keys_overlay_from(
    frame: &mut Frame,
    area: Rect,
    help: &[(&str, &str)],
    scroll: u16,
    scrollable: bool,
) {
    let (lines, rect) = keys_layout(area, help);
    let total = lines.len();
    let shown = (rect.height as usize).saturating_sub(2);
    let first = (scroll as usize).min(total.saturating_sub(shown));
    let below = total.saturating_sub(first + shown);
    let mut block = Block::bordered().title("keys");
    if first > 0 || below > 0 {
        let how = if scrollable {
            "↑↓ scroll"
        } else {
            "a taller terminal shows them"
        };
        block = block
            .title(format!(" ↑ {first} more "))
            .title_bottom(format!(" ↓ {below} more ({how}) "));
    }
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines).block(block).scroll((first as u16, 0)),
        rect,
    );
}

/// The keys' lines (descriptions wrapped under their own column) and the box they go in.
pub(crate) fn keys_layout(area: Rect, help: &[(&str, &str)]) -> (Vec<Line<'static>>, Rect) {
    const KEYS: usize = 20;
    let widest = help
        .iter()
        .map(|(_, what)| what.chars().count())
        .max()
        .unwrap_or(0);
    let width = ((KEYS + widest + 2) as u16).min(area.width);
    let text_width = (width as usize).saturating_sub(KEYS + 2).max(8);
    let lines: Vec<Line<'static>> = help
        .iter()
        .flat_map(|(k, what)| {
            wrap_words(what, text_width)
                .into_iter()
                .enumerate()
                .map(move |(i, part)| {
                    let key = if i == 0 { *k } else { "" };
                    Line::from(vec![
                        Span::styled(format!("{key:<KEYS$}"), Modifier::BOLD),
                        Span::raw(part),
                    ])
                })
        })
        .collect();
    let rect = centered(area, width, lines.len() as u16 + 2);
    (lines, rect)
}

/// The rows of every view's screen: its one-line header, a legend under it (`legend` lines;
/// the compare view's runs, none for the others), the panes' body, the one-line footer.
pub(crate) struct Screen {
    pub(crate) header: Rect,
    pub(crate) legend: Rect,
    pub(crate) body: Rect,
    pub(crate) footer: Rect,
}

/// [`Screen`] of `area` with `legend` lines of legend.
pub(crate) fn screen(area: Rect, legend: u16) -> Screen {
    let [header, legend, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(legend),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    Screen {
        header,
        legend,
        body,
        footer,
    }
}

/// The footer's line of keys, dimmed.
pub(crate) fn footer(frame: &mut Frame, area: Rect, keys: &'static str, dim: Style) {
    frame.render_widget(Paragraph::new(keys).style(dim), area);
}

/// A view's name at the start of its header (` conelab `, ` conelab inspect `), lit.
pub(crate) fn title(text: &'static str, lit: Style) -> Span<'static> {
    Span::styled(text, lit.add_modifier(Modifier::BOLD))
}

/// Normalised singular values, one series each, on a log scale with their legend; `empty`
/// (styled `empty_style`) where there is none yet. The workbench's, the browser's and the
/// compare view's spectrum pane.
pub(crate) fn spectra(
    frame: &mut Frame,
    area: Rect,
    series: Vec<Series<'_>>,
    no_color: bool,
    empty_style: Style,
) {
    if series.is_empty() {
        frame.render_widget(Paragraph::new("no snapshot yet").style(empty_style), area);
        return;
    }
    frame.render_widget(
        SpectrumPlot::new(series).legend(true).no_color(no_color),
        area,
    );
}
