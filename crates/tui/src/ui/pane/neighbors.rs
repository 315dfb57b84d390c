//! The Neighbours pane: the search box, the selected word's nearest rows, the pinned words' nearest few.

use super::group_index;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::app::App;
use crate::style::Palette;
use conelab_metrics::RowGroups;

/// A looked-up word's heading: `★ word · rare ×12 · step 500`, each part only when known.
pub(in crate::ui) fn word_head(
    pinned: bool,
    token: &str,
    group: &str,
    count: Option<u64>,
    step: Option<u64>,
) -> String {
    let mut head = format!("{}{token}", if pinned { "★ " } else { "" });
    let about: Vec<String> = [
        (!group.is_empty()).then(|| group.to_string()),
        count.map(|c| format!("×{c}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !about.is_empty() {
        head.push_str(&format!(" · {}", about.join(" ")));
    }
    if let Some(s) = step {
        head.push_str(&format!(" · step {s}"));
    }
    head
}

/// Search box, the selected word's top-k neighbours, the pinned words' nearest few.
pub(in crate::ui) fn neighbors_pane(
    frame: &mut Frame,
    app: &App,
    groups: Option<&RowGroups>,
    area: Rect,
    pal: &Palette,
) {
    let Some(vocab) = &app.vocab else {
        frame.render_widget(Paragraph::new("no vocabulary"), area);
        return;
    };
    let nb = &app.neighbors;
    let group_name = |id: u32| match group_index(groups, id) {
        Some(0) => "freq",
        Some(1) => "med",
        Some(2) => "rare",
        _ => "",
    };
    let word_style = |id: u32| pal.group(group_index(groups, id).unwrap_or(3));
    let mut lines: Vec<Line> = Vec::new();
    let search = if nb.editing {
        Line::from(vec![
            Span::raw("/ "),
            Span::styled(
                format!("{}▏", nb.query),
                Style::default().add_modifier(Modifier::BOLD),
            ),
        ])
    } else {
        Line::styled("/ search a word · w watch/unwatch", pal.fg(Color::DarkGray))
    };
    lines.push(search);
    if nb.editing {
        if nb.matches.is_empty() && !nb.query.is_empty() {
            lines.push(Line::styled("  no match", pal.fg(Color::DarkGray)));
        }
        for (i, &id) in nb.matches.iter().enumerate() {
            let marker = if i == nb.cursor { "▸ " } else { "  " };
            let style = if i == nb.cursor {
                word_style(id).add_modifier(Modifier::REVERSED)
            } else {
                word_style(id)
            };
            lines.push(Line::from(vec![
                Span::raw(marker),
                Span::styled(vocab.token(id).to_string(), style),
                Span::styled(
                    format!(
                        "  {} {}",
                        group_name(id),
                        vocab
                            .known_count(id)
                            .map(|c| format!("×{c}"))
                            .unwrap_or_default()
                    ),
                    pal.fg(Color::DarkGray),
                ),
            ]));
        }
    }
    if nb.results.is_empty() {
        if !nb.editing {
            let hint = if app.run.projection_steps.is_empty() && app.analysis.is_none() {
                "neighbours appear with the first snapshot"
            } else {
                "type / and a word"
            };
            lines.push(Line::styled(hint, pal.fg(Color::DarkGray)));
        }
    } else {
        for (ri, (id, list)) in nb.results.iter().enumerate() {
            let pinned = nb.pinned.contains(id);
            // A foreign matrix has no groups, counts or training step: only what is known.
            let step = nb.step.filter(|&s| s > 0 || app.analysis.is_none());
            let head = word_head(
                pinned,
                vocab.token(*id),
                group_name(*id),
                vocab.known_count(*id),
                step,
            );
            lines.push(Line::styled(
                head,
                word_style(*id).add_modifier(Modifier::BOLD),
            ));
            // The selected word gets its full list; pinned ones one line each.
            if ri == 0 && nb.selected == Some(*id) {
                for (rank, n) in list.iter().enumerate() {
                    lines.push(Line::from(vec![
                        Span::raw(format!("{:>3} ", rank + 1)),
                        Span::styled(format!("{:<14}", vocab.token(n.id)), word_style(n.id)),
                        Span::raw(format!("{:>6.3} ", n.score)),
                        Span::styled(
                            format!(
                                "{:<4} {}",
                                group_name(n.id),
                                vocab
                                    .known_count(n.id)
                                    .map(|c| format!("×{c}"))
                                    .unwrap_or_default()
                            ),
                            pal.fg(Color::DarkGray),
                        ),
                    ]));
                }
            } else {
                let mut spans = vec![Span::raw("   ")];
                for n in list.iter().take(5) {
                    spans.push(Span::styled(
                        vocab.token(n.id).to_string(),
                        word_style(n.id),
                    ));
                    spans.push(Span::raw(format!(" {:.2}  ", n.score)));
                }
                lines.push(Line::from(spans));
            }
        }
    }
    frame.render_widget(Paragraph::new(lines), area);
}
