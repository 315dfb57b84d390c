//! The Progress pane: the step's numbers, the run process's load, the loss curve with the validation points and the interventions marked.

use conelab_widgets::format_compact;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::symbols::Marker;
use ratatui::text::Line;
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Paragraph};

use crate::app::App;
use crate::format::smooth_debiased;
use crate::style::Palette;

/// The run process's load in one line: `cpu 98% · rss 1.2G · host 10.1G/24.0G`, then its GPU's
/// where the driver reports it: `· gpu 87% 30.1G/79.6G 312W 64°C`.
pub(in crate::ui) fn system_line(s: &conelab_core::events::SystemStats) -> String {
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    let known = |v: f64, unit: &str| {
        if v.is_finite() {
            format!("{v:.0}{unit}")
        } else {
            "–".into()
        }
    };
    let mut line = format!(
        "cpu {} · rss {:.1}G · host {:.1}G/{:.1}G",
        known(s.cpu_percent, "%"),
        s.rss_bytes as f64 / GIB,
        s.host_used_bytes as f64 / GIB,
        s.host_total_bytes as f64 / GIB
    );
    if let Some(g) = &s.gpu {
        line.push_str(&format!(
            " · gpu {} {:.1}G/{:.1}G {} {}",
            known(g.util_percent, "%"),
            g.mem_used_bytes as f64 / GIB,
            g.mem_total_bytes as f64 / GIB,
            known(g.power_watts, "W"),
            known(g.temp_c, "°C"),
        ));
    }
    line
}

pub(in crate::ui) fn progress(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    // A third line for the process's load once it has been sampled, where there is room.
    let system = app
        .run
        .last_system
        .as_ref()
        .filter(|_| area.height >= 6)
        .map(system_line);
    // A model worse than a uniform guess is said here, in red, above everything but the loss.
    let worse = app
        .run
        .worse_than_uniform
        .as_ref()
        .map(|(step, text)| format!("step {step}: {text}"));
    let lines = 2 + u16::from(system.is_some()) + u16::from(worse.is_some());
    let [text, chart] =
        Layout::vertical([Constraint::Length(lines), Constraint::Min(0)]).areas(area);
    let s = app.run.last_step;
    let valid = app
        .run
        .last_eval
        .as_ref()
        // At most ten characters: a diverged run's PPL of 10¹¹² is `1.1234e112`, not 113 digits
        // pushing the rest of the line off the screen.
        .map(|e| format!("valid ppl {}", conelab_base::number::fit(e.ppl, 10, 2)))
        .unwrap_or_else(|| "valid ppl –".into());
    let line1 = match s {
        Some(s) => format!(
            "loss {}{}  {valid}  {} tok/s  {:.0} ms/step",
            format_loss(s.loss),
            if s.penalty != 0.0 {
                format!(" + penalty {}", format_loss(s.penalty))
            } else {
                String::new()
            },
            format_compact(s.tokens_per_sec),
            s.step_ms
        ),
        None => "waiting for the first step…".into(),
    };
    let line2 = match s {
        Some(s) => format!(
            "lr {:.2e}  grad norm {:.3}  params {}{}",
            s.lr,
            s.grad_norm,
            format_compact(app.run.info.parameters as f64),
            s.rare_tokens
                .map(|r| format!("  rare set {r}"))
                .unwrap_or_default()
                + &s.rare_in_group
                    .map(|n| format!(" ({n} in Rare)"))
                    .unwrap_or_default()
                + &s.rare_g1
                    .map(|g| format!(" (mean g1 {g:.3})"))
                    .unwrap_or_default()
        ),
        None => String::new(),
    };
    let mut text_lines = vec![Line::raw(line1)];
    if let Some(worse) = worse {
        text_lines.push(Line::styled(worse, pal.fg(Color::Red)));
    }
    text_lines.push(Line::raw(line2));
    if let Some(line) = system {
        text_lines.push(Line::styled(line, pal.fg(Color::DarkGray)));
    }
    frame.render_widget(Paragraph::new(text_lines), text);
    if chart.height < 3 || app.run.loss.is_empty() {
        return;
    }
    let transform = |v: f64| if app.log_y { v.max(1e-12).ln() } else { v };
    let train: Vec<(f64, f64)> = smooth(&app.run.loss, app.smoothing)
        .into_iter()
        .map(|(x, y)| (x, transform(y)))
        .collect();
    let valid: Vec<(f64, f64)> = app
        .run
        .valid_loss
        .iter()
        .map(|&(x, y)| (x, transform(y)))
        .collect();
    let (mut lo, mut hi) = train
        .iter()
        .chain(&valid)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.1), b.max(p.1))
        });
    if !(lo.is_finite() && hi.is_finite()) {
        return;
    }
    if hi - lo < 1e-9 {
        hi += 0.5;
        lo -= 0.5;
    }
    let x_max = (app.run.info.total_steps.max(1)) as f64;
    let marks: Vec<(f64, f64)> = app
        .run
        .interventions
        .iter()
        .flat_map(|&s| (0..8).map(move |k| (s as f64, lo + (hi - lo) * k as f64 / 7.0)))
        .collect();
    let mut datasets = vec![
        Dataset::default()
            .name("train")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(pal.fg(Color::Cyan))
            .data(&train),
    ];
    if !valid.is_empty() {
        datasets.push(
            Dataset::default()
                .name("valid")
                .marker(Marker::Dot)
                .graph_type(GraphType::Scatter)
                .style(pal.fg(Color::Yellow))
                .data(&valid),
        );
    }
    if !marks.is_empty() {
        datasets.push(
            Dataset::default()
                .name("change")
                .marker(Marker::Dot)
                .graph_type(GraphType::Scatter)
                .style(pal.fg(Color::Magenta))
                .data(&marks),
        );
    }
    // Log scale draws ln(loss) but labels the axis in loss (what the line above says).
    let y_title = if app.log_y { "loss (log)" } else { "loss" };
    let label = |v: f64| {
        if app.log_y {
            format_compact(v.exp())
        } else if v.abs() < 1e4 {
            format!("{v:.2}")
        } else {
            format!("{v:.2e}")
        }
    };
    let chart_widget = Chart::new(datasets)
        .x_axis(
            Axis::default()
                .bounds([0.0, x_max])
                .labels(["0".to_string(), format_compact(x_max)]),
        )
        .y_axis(
            Axis::default()
                .title(y_title)
                .bounds([lo, hi])
                .labels([label(lo), label(hi)]),
        );
    frame.render_widget(chart_widget, chart);
}

/// A loss as the Progress line shows it: four decimals while it is a loss, scientific once it
/// has diverged (a loss of 4·10¹⁷ must not print as eighteen digits).
pub(in crate::ui) fn format_loss(v: f64) -> String {
    if !v.is_finite() {
        return format_compact(v);
    }
    if v.abs() < 1e4 {
        format!("{v:.4}")
    } else {
        format!("{v:.3e}")
    }
}

/// TensorBoard's debiased smoothing with weight `w` (the compare view's), raw at 0.
pub(in crate::ui) fn smooth(points: &[(f64, f64)], w: f64) -> Vec<(f64, f64)> {
    if w <= 0.0 {
        return points.to_vec();
    }
    let ys: Vec<f64> = points.iter().map(|p| p.1).collect();
    points
        .iter()
        .zip(smooth_debiased(&ys, w))
        .map(|(&(x, _), y)| (x, y))
        .collect()
}
