//! What is drawn over the panes: the help and the quit dialog.

use super::*;

pub(super) fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

pub(super) fn help_overlay(frame: &mut Frame, area: Rect, scroll: u16) {
    keys_overlay_from(frame, area, HELP, scroll, true);
}

/// How far the workbench's help can scroll on a screen of `area` (0 when it fits).
pub fn help_max_scroll(area: Rect) -> u16 {
    let (lines, rect) = keys_layout(area, HELP);
    (lines.len() as u16).saturating_sub(rect.height.saturating_sub(2))
}

/// `text` in lines of at most `width` characters, broken between words (a longer word is cut).
pub(super) fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let line = lines.last_mut().expect("never empty");
        let used = line.chars().count();
        if used > 0 && used + 1 + word.chars().count() > width {
            lines.push(String::new());
        }
        let line = lines.last_mut().expect("never empty");
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines
        .into_iter()
        .flat_map(|l| {
            let chars: Vec<char> = l.chars().collect();
            chars
                .chunks(width.max(1))
                .map(|c| c.iter().collect::<String>())
                .collect::<Vec<_>>()
        })
        .collect()
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
fn keys_layout(area: Rect, help: &[(&str, &str)]) -> (Vec<Line<'static>>, Rect) {
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
