//! The Controls pane: the objectives, freezing, the learning rate, pause and checkpoint, each with its key.

use conelab_widgets::format_compact;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;

use crate::app::{App, Control, LossChoice, Pane};
use conelab_core::objective::Term;
use conelab_protocol::view::RunStatus;

pub(in crate::ui) fn controls(frame: &mut Frame, app: &App, area: Rect) {
    // A run that takes no commands says why first; its settings stay visible below, dimmed.
    let (area, dim) = match &app.read_only {
        Some(why) => {
            let text = Paragraph::new(why.as_str())
                .wrap(ratatui::widgets::Wrap { trim: true })
                .style(Style::default().fg(Color::Yellow));
            let lines = (wrapped_lines(why, area.width) as u16).min(area.height);
            let [top, rest] =
                Layout::vertical([Constraint::Length(lines), Constraint::Min(0)]).areas(area);
            frame.render_widget(text, top);
            (rest, true)
        }
        None => (area, false),
    };
    let o = &app.run.objectives;
    let check = |on: bool| if on { "[x]" } else { "[ ]" };
    // A value sent and not acknowledged: what was asked, beside what is in force.
    let pending = |c: Control| match app.pending {
        Some((p, v)) if p == c => Some(format_compact(v)),
        _ => None,
    };
    let typed = |c: Control| match &app.typing {
        Some((p, text)) if *p == c => Some(text.clone()),
        _ => None,
    };
    let lines: Vec<Line> = Control::ALL
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let text = match c {
                Control::Term(t) => {
                    let (on, w) = o.term(*t);
                    let name = match t {
                        Term::Cos => "CosReg γ",
                        Term::Lap => "LapReg λ",
                        Term::Agg => "AGG α",
                        Term::Spectrum => "Spectrum λ",
                        Term::Dev => "DEV α",
                        Term::Ul => "Unlikelihood α",
                    };
                    match (typed(Control::Term(*t)), pending(Control::Term(*t))) {
                        (Some(text), _) => format!("{} {name} = {text}_", check(on)),
                        (None, Some(asked)) => format!("{} {name} → {asked} pending", check(on)),
                        (None, None) => {
                            format!("{} {name:<15}{:>9}", check(on), format_compact(w))
                        }
                    }
                }
                Control::Freeze(g) => {
                    format!("{} freeze {g}", check(o.freeze.is_frozen(*g)))
                }
                Control::GateFreeze => format!("    gate-freeze: {}", o.gate_freeze.name()),
                Control::Pause => match app.run.status {
                    RunStatus::Paused => "    resume".into(),
                    _ => "    pause".into(),
                },
                Control::Checkpoint => "    checkpoint now".into(),
                Control::Loss => {
                    let current = LossChoice::of(o).name();
                    match app.pending_loss {
                        Some(choice) => {
                            let arrow = if app.view.ascii { "->" } else { "→" };
                            format!("    loss: {current} {arrow} {}?", choice.name())
                        }
                        None => format!("    loss: {current}"),
                    }
                }
                Control::LearningRate => {
                    match (typed(Control::LearningRate), pending(Control::LearningRate)) {
                        (Some(text), _) => format!("    lr = {text}_"),
                        (None, Some(asked)) => format!("    lr → {asked} pending"),
                        (None, None) => format!(
                            "    lr {:>19}",
                            app.run
                                .lr
                                .map(|l| format!("{l:.3e}"))
                                .unwrap_or_else(|| "–".into())
                        ),
                    }
                }
            };
            let selected = app.focus == Pane::Controls && i == app.controls_cursor && !dim;
            let style = if selected {
                Style::default().add_modifier(Modifier::REVERSED)
            } else if dim {
                Style::default().add_modifier(Modifier::DIM)
            } else {
                Style::default()
            };
            Line::styled(text, style)
        })
        .collect();
    // Below the controls (never between them: the cursor counts lines): a changed lr has
    // switched its schedule off.
    let mut lines = lines;
    if let Some(step) = app.run.lr_fixed_from {
        lines.push(Line::styled(
            format!("lr schedule off from step {step}"),
            Style::default().add_modifier(Modifier::DIM),
        ));
    }
    // Keep the cursor visible in a short pane.
    let height = area.height as usize;
    let offset = app.controls_cursor.saturating_sub(height.saturating_sub(1));
    frame.render_widget(Paragraph::new(lines).scroll((offset as u16, 0)), area);
}

/// Lines `text` takes when word-wrapped at `width` (greedy, as the Paragraph wraps).
pub(in crate::ui) fn wrapped_lines(text: &str, width: u16) -> usize {
    let width = usize::from(width.max(1));
    let mut lines = 1;
    let mut used = 0;
    for word in text.split_whitespace() {
        let w = word.chars().count();
        let need = if used == 0 { w } else { used + 1 + w };
        if need <= width {
            used = need;
        } else {
            lines += 1 + w.saturating_sub(1) / width;
            used = w % width;
        }
    }
    lines
}
