//! Rendering: a pure function of [`App`] into a frame. No state changes, no I/O, so every pane is
//! snapshot-tested on a `TestBackend`.

use conelab_widgets::{
    HeatMap, HeatMapScale, Layer, Scatter, ScatterMode, ScatterPoint, Series, SparkRow,
    SparklineTable, SpectrumPlot, format_compact,
};
use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, Cell, Chart, Clear, Dataset, GraphType, Paragraph, Row, Table, Wrap,
};

use super::app::{App, Control, EmbeddingMetric, LogKind, LossChoice, Pane, RunStatus};
use super::keys::HELP;
use conelab_core::objective::Term;
use conelab_data::Group;
use conelab_metrics::RowGroups;

/// Below this the layout would be garbage: say so instead.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 16;

const GROUP_NAMES: [&str; 4] = ["Freq", "Med", "Rare", "Total"];

struct Palette {
    no_color: bool,
}

impl Palette {
    fn fg(&self, c: Color) -> Style {
        if self.no_color {
            Style::default()
        } else {
            Style::default().fg(c)
        }
    }

    fn group(&self, g: usize) -> Style {
        self.fg([Color::Cyan, Color::Yellow, Color::Magenta, Color::White][g.min(3)])
    }

    fn focus(&self, focused: bool) -> Style {
        match (focused, self.no_color) {
            (true, false) => Style::default().fg(Color::LightGreen),
            (true, true) => Style::default().add_modifier(Modifier::BOLD),
            _ => Style::default(),
        }
    }
}

/// Where each visible pane goes on a screen of `area` (empty when the screen is too small): the
/// layout the renderer draws and the mouse hit-tests.
pub fn pane_areas(area: Rect, app: &App) -> Vec<(Pane, Rect)> {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        return Vec::new();
    }
    let [_, body, _] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    if app.zoom {
        return vec![(app.focus, body)];
    }
    // The Groups table's ten lines on a tall terminal (50 rows up: the panes below keep room);
    // below, its first five rows show (zoom shows all).
    let groups_height = if body.height >= 48 { 12 } else { 8 };
    let [top, middle, bottom] = Layout::vertical([
        Constraint::Percentage(36),
        Constraint::Length(groups_height),
        Constraint::Min(6),
    ])
    .areas(body);
    let [progress, controls] =
        Layout::horizontal([Constraint::Min(30), Constraint::Length(34)]).areas(top);
    let [scatter, neighbors, right] = Layout::horizontal([
        Constraint::Percentage(36),
        Constraint::Percentage(30),
        Constraint::Percentage(34),
    ])
    .areas(bottom);
    let mut out = vec![
        (Pane::Progress, progress),
        (Pane::Controls, controls),
        (Pane::Groups, middle),
        (Pane::Scatter, scatter),
        (Pane::Neighbors, neighbors),
    ];
    // Spectrum and self-normalisation share a slot: the one with the focus shows.
    let spectral = if app.focus == Pane::SelfNorm {
        Pane::SelfNorm
    } else {
        Pane::Spectrum
    };
    if right.height >= 14 {
        let [top_right, bottom_right] =
            Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(right);
        out.push((spectral, top_right));
        out.push((Pane::Events, bottom_right));
    } else {
        // Too short for two panes: the events, unless a spectral pane has the focus.
        let pane = if matches!(app.focus, Pane::Spectrum | Pane::SelfNorm) {
            spectral
        } else {
            Pane::Events
        };
        out.push((pane, right));
    }
    out
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

/// The offline browser (`conelab inspect` on a terminal): for each matrix a row of Embedding,
/// Neighbours and Spectrum under a Groups table (one matrix), or the focused pane of each side by
/// side when zoomed.
pub fn render_browser(frame: &mut Frame, browser: &super::browser::Browser) {
    let area = frame.area();
    if too_small(frame, area) {
        return;
    }
    let no_color = browser.sides.first().is_some_and(|s| s.app.view.no_color);
    let pal = Palette { no_color };
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    let names: Vec<String> = browser.sides.iter().map(|s| s.describe()).collect();
    frame.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(
                " conelab inspect ",
                pal.fg(Color::LightGreen).add_modifier(Modifier::BOLD),
            ),
            Span::raw(names.join("  vs  ")),
        ])),
        header,
    );
    frame.render_widget(
        Paragraph::new(
            "? help · q quit · Tab/2,3,4,7 pane · z zoom · / search (both) · w watch · c centred",
        )
        .style(pal.fg(Color::DarkGray)),
        footer,
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
        keys_overlay(frame, area, &super::browser::HELP);
    }
    if browser.sides.first().is_some_and(|s| s.app.view.light) {
        conelab_widgets::light_theme(frame.buffer_mut());
    }
}

/// Draws the whole screen.
pub fn render(frame: &mut Frame, app: &App, groups: Option<&RowGroups>) {
    let area = frame.area();
    if too_small(frame, area) {
        return;
    }
    let pal = Palette {
        no_color: app.view.no_color,
    };
    let [header, _, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(header_line(app, &pal, header.width), header);
    frame.render_widget(
        Paragraph::new(
            "? help · q quit · d detach · p pause · s save · Tab/1-8 pane · z zoom · / search · l log-y · m smooth",
        )
        .style(pal.fg(Color::DarkGray)),
        footer,
    );
    for (pane, rect) in pane_areas(area, app) {
        render_pane(frame, app, groups, pane, rect, &pal);
    }
    if app.help {
        help_overlay(frame, area);
    }
    if app.confirm_quit {
        quit_dialog(frame, area, &pal);
    }
    if app.view.light {
        conelab_widgets::light_theme(frame.buffer_mut());
    }
}

/// The top line: run, device, status, progress. The status (a failure message can be long) is
/// what gets shortened to fit `width`, so the step it stopped at stays on screen.
fn header_line(app: &App, pal: &Palette, width: u16) -> Paragraph<'static> {
    let (status, color) = match &app.run.status {
        RunStatus::Starting => ("starting".to_string(), Color::Gray),
        RunStatus::Running => ("running".to_string(), Color::Green),
        RunStatus::Paused => ("paused".to_string(), Color::Yellow),
        RunStatus::Stopping => ("stopping…".to_string(), Color::Yellow),
        RunStatus::Finished { reason } => (
            format!("finished ({}) — q to leave", reason.name()),
            Color::Cyan,
        ),
        RunStatus::Diverged { step, .. } => (
            format!("diverged at step {step} — paused: lower the lr and resume (p), or stop (q)"),
            Color::Red,
        ),
        RunStatus::Failed { message } => (format!("failed: {message}"), Color::Red),
        RunStatus::Crashed => ("crashed (no live process)".to_string(), Color::Red),
    };
    let live = app.run.status.is_live();
    // A run that has ended closes its socket: that is not news, so only a live run is
    // "disconnected"; an ended one is read-only.
    let suffix = if app.connection_lost && live {
        " · disconnected"
    } else if (app.read_only.is_some() || app.connection_lost) && !live {
        " · read-only"
    } else {
        ""
    };
    let step = app.step();
    let total = app.run.info.total_steps.max(1);
    let epoch = app.run.last_step.map(|s| s.epoch).unwrap_or(0.0);
    let eta = app
        .eta_seconds()
        .filter(|_| live)
        .map(|s| format!(" · ETA {}", human_duration(s)))
        .unwrap_or_default();
    let title = " conelab ";
    let run = format!(
        "{} · {} · ",
        shorten(&app.run_title(), 48),
        app.run.info.device
    );
    let at = format!(
        " · step {step}/{total} ({:.0} %)",
        100.0 * step as f64 / total as f64
    );
    let epoch = format!(" · epoch {epoch:.2}");
    let width_of = |parts: &[&str]| parts.iter().map(|p| p.chars().count()).sum::<usize>();
    // Room for the status: the ETA, then the epoch go first when the line is narrow, then the
    // status is cut (never below "failed:…").
    let fixed = width_of(&[title, &run, suffix, &at]) + status.chars().count().min(24);
    let progress = [format!("{at}{epoch}{eta}"), format!("{at}{epoch}")]
        .into_iter()
        .find(|p| fixed - at.chars().count() + p.chars().count() <= width as usize)
        .unwrap_or(at);
    let room = (width as usize)
        .saturating_sub(width_of(&[title, &run, suffix, &progress]))
        .max(8);
    let status = format!("{}{suffix}", shorten(&status, room));
    Paragraph::new(Line::from(vec![
        Span::styled(
            title,
            pal.fg(Color::LightGreen).add_modifier(Modifier::BOLD),
        ),
        Span::raw(run),
        Span::styled(status, pal.fg(color)),
        Span::raw(progress),
    ]))
}

/// `text` cut to at most `max` characters, the cut marked with "…".
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

fn block(title: &str, focused: bool, pal: &Palette) -> Block<'static> {
    Block::bordered()
        .title(title.to_string())
        .border_style(pal.focus(focused))
}

fn render_pane(
    frame: &mut Frame,
    app: &App,
    groups: Option<&RowGroups>,
    pane: Pane,
    area: Rect,
    pal: &Palette,
) {
    let focused = app.focus == pane;
    let b = block(pane.title(), focused, pal);
    let inner = b.inner(area);
    frame.render_widget(b, area);
    match pane {
        Pane::Progress => progress(frame, app, inner, pal),
        Pane::Groups => groups_pane(frame, app, inner, pal),
        Pane::Scatter => scatter(frame, app, groups, inner, pal),
        Pane::Spectrum => spectrum(frame, app, inner, pal),
        Pane::Controls => controls(frame, app, inner),
        Pane::Events => events(frame, app, inner, pal),
        Pane::Neighbors => neighbors_pane(frame, app, groups, inner, pal),
        Pane::SelfNorm => self_norm(frame, app, inner, pal),
    }
}

fn group_index(groups: Option<&RowGroups>, id: u32) -> Option<usize> {
    groups
        .filter(|g| (id as usize) < g.len())
        .map(|g| match g.group_of(id as usize) {
            Group::Frequent => 0,
            Group::Medium => 1,
            Group::Rare => 2,
        })
}

/// Search box, the selected word's top-k neighbours, the pinned words' nearest few.
fn neighbors_pane(
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
                    format!("  {} ×{}", group_name(id), vocab.count(id)),
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
            let head = format!(
                "{}{} · {} ×{} · step {}",
                if pinned { "★ " } else { "" },
                vocab.token(*id),
                group_name(*id),
                vocab.count(*id),
                nb.step.unwrap_or(0)
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
                            format!("{:<4} ×{}", group_name(n.id), vocab.count(n.id)),
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

/// The newest evaluation's self-normalisation: μ_z, σ_z, and where (entropy, log Z) fall.
fn self_norm(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    let Some(e) = &app.run.last_eval else {
        frame.render_widget(
            Paragraph::new("appears with the first validation evaluation"),
            area,
        );
        return;
    };
    let o = &e.outputs;
    let [text, plot] = Layout::vertical([Constraint::Length(2), Constraint::Min(0)]).areas(area);
    frame.render_widget(
        Paragraph::new(vec![
            Line::raw(format!(
                "step {} · μ_z {:.3} · σ_z {:.3} · corr(H, log Z) {:.3}",
                e.step, o.mu_z, o.sigma_z, o.entropy_log_z_corr
            )),
            Line::styled(
                format!(
                    "PPL {:.2} · unnormalised PPL {:.2}",
                    o.ppl, o.unnormalised_ppl
                ),
                pal.fg(Color::DarkGray),
            ),
        ]),
        text,
    );
    let h = &o.histogram;
    frame.render_widget(
        HeatMap::from_counts(&h.counts, h.log_z_bins, h.entropy_bins)
            .scale(HeatMapScale::Log)
            .x_range(h.entropy_range[0], h.entropy_range[1])
            .y_range(h.log_z_range[0], h.log_z_range[1])
            .x_title("entropy H")
            .y_title("log Z")
            .no_color(pal.no_color),
        plot,
    );
}

fn progress(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    let [text, chart] = Layout::vertical([Constraint::Length(2), Constraint::Min(0)]).areas(area);
    let s = app.run.last_step;
    let valid = app
        .run
        .last_eval
        .as_ref()
        .map(|e| format!("valid ppl {:.2}", e.ppl))
        .unwrap_or_else(|| "valid ppl –".into());
    let line1 = match s {
        Some(s) => format!(
            "loss {:.4}{}  {valid}  {} tok/s  {:.0} ms/step",
            s.loss,
            if s.penalty != 0.0 {
                format!(" ({:+.4})", s.penalty)
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
                + &s.rare_g1
                    .map(|g| format!(" (mean g1 {g:.3})"))
                    .unwrap_or_default()
        ),
        None => String::new(),
    };
    frame.render_widget(
        Paragraph::new(vec![Line::raw(line1), Line::raw(line2)]),
        text,
    );
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
    let y_title = if app.log_y { "ln loss" } else { "loss" };
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
                .labels([format!("{lo:.2}"), format!("{hi:.2}")]),
        );
    frame.render_widget(chart_widget, chart);
}

/// Exponential moving average (α = 0.1) when on.
fn smooth(points: &[(f64, f64)], on: bool) -> Vec<(f64, f64)> {
    if !on {
        return points.to_vec();
    }
    let mut ema: Option<f64> = None;
    points
        .iter()
        .map(|&(x, y)| {
            let v = match ema {
                Some(e) => 0.9 * e + 0.1 * y,
                None => y,
            };
            ema = Some(v);
            (x, v)
        })
        .collect()
}

fn groups_pane(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    let [table_area, sparks] =
        Layout::horizontal([Constraint::Length(52), Constraint::Min(0)]).areas(area);
    let eval = app.run.last_eval.as_ref();
    let emb = app.run.last_embedding.as_ref();
    let cell = |v: Option<f64>, digits: usize| match v {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "–".into(),
    };
    let emb_row = |name: &'static str, metric: EmbeddingMetric, digits: usize| {
        let values: Vec<String> = (0..4)
            .map(|g| {
                cell(
                    emb.map(|e| {
                        let s = if g < 3 { &e.groups[g] } else { &e.total };
                        match metric {
                            EmbeddingMetric::I1 => s.i1,
                            EmbeddingMetric::I2 => s.i2,
                            EmbeddingMetric::MeanCos => s.mean_cos,
                            EmbeddingMetric::MeanNorm => s.mean_norm,
                            EmbeddingMetric::I1Unit => s.i1_unit,
                            EmbeddingMetric::I2Unit => s.i2_unit,
                            EmbeddingMetric::IsoScore => s.isoscore,
                        }
                    }),
                    digits,
                )
            })
            .collect();
        (name, values)
    };
    let ppl: Vec<String> = (0..4)
        .map(|g| cell(eval.map(|e| if g < 3 { e.groups[g].0 } else { e.ppl }), 1))
        .collect();
    let uniq: Vec<String> = (0..4)
        .map(|g| {
            eval.map(|e| {
                if g < 3 {
                    e.outputs.groups[g].uniq.to_string()
                } else {
                    e.outputs.uniq.to_string()
                }
            })
            .unwrap_or_else(|| "–".into())
        })
        .collect();
    // I(W) is scale-dependent: the mean norm and IsoScore (scale-free) come right after it, in
    // the rows a short pane still shows; the rest on a tall terminal or zoomed.
    let rows = [
        ("PPL", ppl),
        ("Uniq", uniq),
        emb_row("I1", EmbeddingMetric::I1, 3),
        emb_row("mean norm", EmbeddingMetric::MeanNorm, 3),
        emb_row("IsoScore", EmbeddingMetric::IsoScore, 3),
        emb_row("mean cos", EmbeddingMetric::MeanCos, 3),
        emb_row("I1 unit", EmbeddingMetric::I1Unit, 3),
        emb_row("I2", EmbeddingMetric::I2, 3),
        emb_row("I2 unit", EmbeddingMetric::I2Unit, 3),
    ];
    let header = Row::new(
        std::iter::once(Cell::from("")).chain(
            GROUP_NAMES
                .iter()
                .enumerate()
                .map(|(g, n)| Cell::from(*n).style(pal.group(g).add_modifier(Modifier::BOLD))),
        ),
    );
    let table = Table::new(
        rows.into_iter().map(|(name, values)| {
            Row::new(std::iter::once(Cell::from(name)).chain(values.into_iter().map(Cell::from)))
        }),
        [
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
        ],
    )
    .header(header);
    frame.render_widget(table, table_area);
    if sparks.width < 20 || app.run.embedding.is_empty() {
        return;
    }
    // Histories of the isotropy per group and the total mean cosine, with the change since the
    // last intervention.
    let since = app.since_intervention();
    let i1: Vec<Vec<f64>> = (0..4)
        .map(|g| app.embedding_metric(EmbeddingMetric::I1, g))
        .collect();
    let cos = app.embedding_metric(EmbeddingMetric::MeanCos, 3);
    let delta = |h: &[f64]| -> String {
        match (since, h.last()) {
            (Some(i), Some(last)) if i < h.len() => format!("{:+.3}", last - h[i]),
            _ => String::new(),
        }
    };
    // A group nothing is known of (a matrix without counts) gets no history row.
    let mut rows: Vec<SparkRow> = (0..4)
        .filter(|&g| i1[g].iter().any(|v| v.is_finite()))
        .map(|g| {
            SparkRow::new(
                format!("I1 {}", GROUP_NAMES[g]),
                &i1[g],
                format!("{:.3}", i1[g].last().copied().unwrap_or(f64::NAN)),
            )
            .delta(delta(&i1[g]))
            .spark_style(pal.group(g))
        })
        .collect();
    rows.push(
        SparkRow::new(
            "cos Total",
            &cos,
            format!("{:.3}", cos.last().copied().unwrap_or(f64::NAN)),
        )
        .delta(delta(&cos)),
    );
    frame.render_widget(
        SparklineTable::new(rows)
            .header("", "history", "now", "Δ change")
            .no_color(pal.no_color),
        sparks,
    );
}

fn scatter(frame: &mut Frame, app: &App, groups: Option<&RowGroups>, area: Rect, pal: &Palette) {
    let Some(shown) = app.scatter_frame() else {
        frame.render_widget(Paragraph::new("no snapshot yet"), area);
        return;
    };
    let projection = if app.centred {
        shown.centred.as_ref().or(shown.uncentred.as_ref())
    } else {
        shown.uncentred.as_ref()
    };
    let Some(projection) = projection else {
        frame.render_widget(Paragraph::new("no projection"), area);
        return;
    };
    let group_of = |i: usize| -> u8 { group_index(groups, i as u32).unwrap_or(0) as u8 };
    let points: Vec<ScatterPoint> = projection
        .points
        .iter()
        .enumerate()
        .map(|(i, p)| (f64::from(p[0]), f64::from(p[1]), group_of(i)))
        .collect();
    let [title, plot] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
    frame.render_widget(
        Paragraph::new(format!(
            "step {} · {:?} · axes {:.0}%/{:.0}%{}",
            shown.step,
            projection.mode,
            100.0 * projection.explained[0],
            100.0 * projection.explained[1],
            match app.scrub {
                Some(i) => format!(" · {}/{}", i + 1, app.run.projection_steps.len()),
                None if app.run.projection_steps.len() > 1 => " · live".to_string(),
                None => String::new(),
            }
        ))
        .style(pal.fg(Color::DarkGray)),
        title,
    );
    let layers = match groups {
        Some(_) => vec![
            Layer::new("freq", pal.group(0)).glyph('f').priority(0),
            Layer::new("med", pal.group(1)).glyph('m').priority(1),
            // Rare on top: it is the group that drifts.
            Layer::new("rare", pal.group(2)).glyph('r').priority(2),
        ],
        // No counts (a foreign matrix): one set, named as such.
        None => vec![Layer::new("all", pal.group(3)).glyph('o').priority(0)],
    };
    frame.render_widget(
        Scatter::new(&points)
            .layers(layers)
            .highlight(
                app.neighbors
                    .selected
                    .map(|i| i as usize)
                    .filter(|&i| i < points.len()),
            )
            .mode(if app.view.ascii {
                ScatterMode::Ascii
            } else {
                ScatterMode::Braille
            })
            .legend(true)
            .no_color(pal.no_color),
        plot,
    );
}

fn spectrum(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    let now = match (&app.analysis, &app.run.last_embedding) {
        (Some(a), _) => &a.panel.total.sv_norm,
        (None, Some(e)) if !e.total.sv_norm.is_empty() => &e.total.sv_norm,
        _ => {
            frame.render_widget(Paragraph::new("no snapshot yet"), area);
            return;
        }
    };
    let mut series = vec![Series::new("now", now).style(pal.fg(Color::Green))];
    if let Some((label, values)) = &app.spectrum_reference {
        series.push(Series::new(label.as_str(), values).style(pal.fg(Color::Yellow)));
    }
    if let Some(first) = &app.run.first_spectrum {
        series.push(Series::new("start", first).style(pal.fg(Color::DarkGray)));
    }
    frame.render_widget(
        SpectrumPlot::new(series)
            .legend(true)
            .no_color(pal.no_color),
        area,
    );
}

/// Lines `text` takes when word-wrapped at `width` (greedy, as the Paragraph wraps).
fn wrapped_lines(text: &str, width: u16) -> usize {
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

fn controls(frame: &mut Frame, app: &App, area: Rect) {
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
                    format!("{} {name:<15}{:>9}", check(on), format_compact(w))
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
                Control::LearningRate => format!(
                    "    lr {:>19}",
                    app.run
                        .lr
                        .map(|l| format!("{l:.3e}"))
                        .unwrap_or_else(|| "–".into())
                ),
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
    // Keep the cursor visible in a short pane.
    let height = area.height as usize;
    let offset = app.controls_cursor.saturating_sub(height.saturating_sub(1));
    frame.render_widget(Paragraph::new(lines).scroll((offset as u16, 0)), area);
}

fn events(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
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

fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

fn help_overlay(frame: &mut Frame, area: Rect) {
    keys_overlay(frame, area, HELP);
}

/// A box of key bindings (key, what it does) in the middle of `area`.
pub(crate) fn keys_overlay(frame: &mut Frame, area: Rect, help: &[(&str, &str)]) {
    const KEYS: usize = 20;
    let widest = help
        .iter()
        .map(|(_, what)| what.chars().count())
        .max()
        .unwrap_or(0);
    let width = ((KEYS + widest + 2) as u16).min(area.width);
    let text_width = (width as usize).saturating_sub(KEYS + 2).max(8);
    // Long descriptions wrap under their own column rather than run off the box.
    let lines: Vec<Line> = help
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
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title("keys")),
        rect,
    );
}

/// `text` in lines of at most `width` characters, broken between words (a longer word is cut).
fn wrap_words(text: &str, width: usize) -> Vec<String> {
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

fn quit_dialog(frame: &mut Frame, area: Rect, pal: &Palette) {
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

/// `1h 02m`, `3m 20s`, `45s`.
pub(crate) fn human_duration(seconds: f64) -> String {
    conelab_widgets::format_duration(seconds)
}

#[cfg(test)]
mod tests {
    //! Every pane rendered from a fixed state at two sizes (120×40, the default layout, and
    //! 80×24, the smallest comfortable one), zoomed, with the overlays, and too small.

    use std::sync::Arc;

    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::*;
    use crate::app::{Action, ViewOptions};
    use crate::neighbors::Vocabulary;
    use conelab_core::analysis::EmbeddingAnalysis;
    use conelab_core::events::EmbeddingStats;
    use conelab_core::events::{
        AppliedCommand, Command, EvalStats, Event, FinishReason, Snapshot, StepStats,
    };
    use conelab_core::objective::{ObjectiveChange, Objectives, Term};
    use conelab_data::{FrequencyGroups, GroupBounds};
    use conelab_metrics::{
        EmbeddingPanel, Embeddings, OutputAccumulator, OutputBatch, PanelOptions, RowGroups,
        Threads,
    };

    const N: usize = 60;
    const D: usize = 8;

    fn groups() -> FrequencyGroups {
        FrequencyGroups::new(N, GroupBounds::new(0.3, 0.8).expect("bounds"))
    }

    fn step(step: u64, loss: f64) -> Event {
        Event::Step(StepStats {
            step,
            epoch: step as f64 / 100.0,
            loss,
            penalty: if step > 40 { 0.0123 } else { 0.0 },
            lr: 1e-3,
            grad_norm: 0.8,
            tokens_per_sec: 2_345.0,
            step_ms: 436.0,
            rare_tokens: None,
            rare_g1: None,
        })
    }

    fn eval(step: u64) -> Event {
        let g = groups();
        let mut acc = OutputAccumulator::new(g);
        let targets: Vec<u32> = (0..N as u32).collect();
        let lp: Vec<f32> = (0..N).map(|i| -1.0 - i as f32 * 0.05).collect();
        let log_z: Vec<f32> = (0..N).map(|i| 0.1 * i as f32).collect();
        let entropy: Vec<f32> = (0..N).map(|i| 2.0 + 0.01 * i as f32).collect();
        let argmax: Vec<u32> = (0..N as u32).map(|i| i % 7).collect();
        let prob_sum = vec![1.0f32; N];
        acc.add(OutputBatch {
            targets: &targets,
            target_log_probs: &lp,
            log_z: &log_z,
            entropy: &entropy,
            argmax: &argmax,
            prob_sum: &prob_sum,
        })
        .expect("batch");
        let outputs = acc.finish(N, 0.0);
        Event::Eval(EvalStats {
            step,
            split: "valid".into(),
            loss: outputs.loss,
            ppl: outputs.ppl,
            groups: [
                (outputs.groups[0].ppl, outputs.groups[0].positions),
                (outputs.groups[1].ppl, outputs.groups[1].positions),
                (outputs.groups[2].ppl, outputs.groups[2].positions),
            ],
            positions: N as u64,
            seconds: 1.0,
            outputs: Box::new(outputs),
        })
    }

    /// A W with a cone whose rare rows sit further out, at two "times".
    fn analysis(step: u64, spread: f32) -> Arc<EmbeddingAnalysis> {
        let weights: Vec<f32> = (0..N * D)
            .map(|k| {
                let (i, j) = (k / D, k % D);
                let wave = ((i * 7 + j * 3) % 11) as f32 / 11.0 - 0.5;
                let cone = if j == 0 {
                    0.5 + spread * i as f32 / N as f32
                } else {
                    0.0
                };
                wave + cone
            })
            .collect();
        let w = Embeddings::new(N, D, &weights).expect("finite");
        let panel = EmbeddingPanel::compute(
            w,
            Some(&RowGroups::from_ranks(&groups())),
            &PanelOptions {
                threads: Threads::Sequential,
                also_centred: true,
                scale_free: true,
                ..PanelOptions::default()
            },
        )
        .expect("panel");
        Arc::new(EmbeddingAnalysis {
            snapshot: Arc::new(Snapshot {
                step,
                n: N,
                d: D,
                weights,
            }),
            panel,
        })
    }

    fn stats(a: &EmbeddingAnalysis) -> Event {
        let stats = EmbeddingStats::from_panel(a.snapshot.step, &a.panel, 0.01).expect("groups");
        Event::Embedding(Box::new(stats))
    }

    /// A run 80 steps in: losses, two evaluations, three snapshots, CosReg switched on at 41.
    fn app() -> App {
        let mut app = App::new(
            Objectives::default(),
            ViewOptions {
                no_color: true,
                ascii: false,
                no_mouse: false,
                light: false,
            },
        );
        app.on_event(Event::Started {
            step: 0,
            total_steps: 200,
            windows_per_epoch: 100,
            parameters: 1_045_248,
            device: "cpu".into(),
            run_dir: Some("checkpoints/tiny-synthetic-test".into()),
            objective: "MLE".into(),
            objectives: Box::new(Objectives::default()),
        });
        for s in 1..=80u64 {
            app.on_event(step(s, 8.0 - 3.0 * (s as f64 / 80.0).sqrt()));
            if s == 40 {
                app.on_event(eval(40));
                app.on_event(Event::Applied(AppliedCommand {
                    step: 41,
                    command: Command::Objective {
                        change: ObjectiveChange::Enable {
                            term: Term::Cos,
                            on: true,
                        },
                    },
                    before: "MLE".into(),
                    after: "CosReg γ=1".into(),
                    ticket: None,
                }));
            }
            if s % 30 == 0 || s == 1 {
                let a = analysis(s, 1.0 + s as f32 / 20.0);
                app.on_event(stats(&a));
                app.on_analysis(a);
            }
        }
        app.on_event(eval(80));
        app.on_event(Event::Checkpoint {
            step: 80,
            path: "checkpoints/tiny-synthetic-test/step-000080".into(),
        });
        // The neighbour search: "w1" watched, "w5" looked up.
        let vocab = Vocabulary {
            tokens: (0..N).map(|i| format!("w{i}")).collect(),
            counts: (0..N).map(|i| (1_000 / (i + 1)) as u64).collect(),
        };
        let mut app = app.with_vocabulary(Arc::new(vocab));
        for (word, pin) in [("w1", true), ("w5", false)] {
            app.apply(Action::SearchStart);
            for c in word.chars() {
                app.apply(Action::SearchInput(c));
            }
            app.apply(Action::SearchAccept);
            if pin {
                app.apply(Action::TogglePin);
            }
        }
        app.focus = Pane::Progress;
        app
    }

    fn draw(app: &App, width: u16, height: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("backend");
        let rows = RowGroups::from_ranks(&groups());
        terminal
            .draw(|frame| render(frame, app, Some(&rows)))
            .expect("draw");
        terminal.backend().to_string()
    }

    /// The per-group validation PPL of `eval()`, computed here from its definition: the target
    /// of row i has log-probability −1 − 0.05·i, so a group's PPL is exp(1 + 0.05·mean i) over its
    /// rows (frequent 0–17, medium 18–47, rare 48–59 of 60), and the total over all 60.
    fn expected_ppl() -> [f64; 4] {
        let ppl = |rows: std::ops::Range<usize>| {
            let n = rows.len() as f64;
            (1.0 + 0.05 * rows.map(|i| i as f64).sum::<f64>() / n).exp()
        };
        [ppl(0..18), ppl(18..48), ppl(48..60), ppl(0..60)]
    }

    /// The Groups pane's PPL row shows the independently computed values.
    fn assert_group_ppl(text: &str) {
        let row = text
            .lines()
            .find(|l| l.contains("│PPL "))
            .unwrap_or_else(|| panic!("no PPL row:\n{text}"));
        for p in expected_ppl() {
            let shown = format!("{p:.1}");
            assert!(row.contains(&shown), "PPL {shown} missing from {row}");
        }
    }

    /// Each cell's foreground as a letter: ANSI colours by initial (bright ones in capitals),
    /// `.` the terminal's own.
    fn colour_map(app: &App, width: u16, height: u16) -> (String, ratatui::buffer::Buffer) {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("backend");
        let rows = RowGroups::from_ranks(&groups());
        terminal
            .draw(|frame| render(frame, app, Some(&rows)))
            .expect("draw");
        let buf = terminal.backend().buffer().clone();
        let letter = |c: Color| match c {
            Color::Reset => '.',
            Color::Black => 'k',
            Color::Red => 'r',
            Color::Green => 'g',
            Color::Yellow => 'y',
            Color::Blue => 'b',
            Color::Magenta => 'm',
            Color::Cyan => 'c',
            Color::Gray => 'w',
            Color::DarkGray => 'K',
            Color::LightRed => 'R',
            Color::LightGreen => 'G',
            Color::LightYellow => 'Y',
            Color::LightBlue => 'B',
            Color::LightMagenta => 'M',
            Color::LightCyan => 'C',
            Color::White => 'W',
            _ => '?',
        };
        let map = (0..height)
            .map(|y| {
                (0..width)
                    .map(|x| letter(buf[(x, y)].fg))
                    .collect::<String>()
                    + "\n"
            })
            .collect();
        (map, buf)
    }

    #[test]
    fn light_theme_snapshot() {
        let mut a = app();
        a.view.no_color = false;
        a.view.light = true;
        a.focus = Pane::Groups;
        let (map, buf) = colour_map(&a, 120, 40);
        insta::assert_snapshot!(map);
        // No colour made for a black background is left: no white, no pale cyan or yellow, no
        // bright variants.
        let pale = [
            Color::White,
            Color::Gray,
            Color::Cyan,
            Color::Yellow,
            Color::LightCyan,
            Color::LightYellow,
            Color::LightGreen,
            Color::LightRed,
            Color::LightBlue,
            Color::LightMagenta,
        ];
        assert!(buf.content().iter().all(|c| !pale.contains(&c.fg)));
        // The group headers: Freq blue, Med red, Rare magenta, Total black (dark: cyan, yellow,
        // magenta, white).
        let text = draw(&a, 120, 40);
        let (y, line) = text
            .lines()
            .enumerate()
            .find(|(_, l)| l.contains("Freq") && l.contains("Total"))
            .unwrap_or_else(|| panic!("no group header:\n{text}"));
        let colour_of = |name: &str| {
            let x = line.chars().collect::<Vec<_>>();
            let at = x
                .windows(name.len())
                .position(|w| w.iter().collect::<String>() == name)
                .unwrap_or_else(|| panic!("{name} not in {line}"));
            buf[(at as u16, y as u16)].fg
        };
        assert_eq!(
            ["Freq", "Med", "Rare", "Total"].map(colour_of),
            [Color::Blue, Color::Red, Color::Magenta, Color::Black]
        );
        a.view.light = false;
        let (dark, _) = colour_map(&a, 120, 40);
        assert!(
            dark.contains('c') && dark.contains('W'),
            "the dark theme keeps its colours"
        );
    }

    #[test]
    fn snapshot_default_layout_120x40() {
        let text = draw(&app(), 120, 40);
        insta::assert_snapshot!(text);
        assert_group_ppl(&text);
        // The last training loss is 8 − 3·√(80/80) = 5; the total validation PPL e^2.475.
        assert!(text.contains("loss 5.0000"), "{text}");
        assert!(
            text.contains(&format!("valid ppl {:.2}", expected_ppl()[3])),
            "{text}"
        );
        assert!(text.contains("step 80/200 (40 %)"), "{text}");
    }

    /// A run that failed with a long message, and whose process has gone: the header still
    /// shows the step it stopped at (the message is what gets cut), and it says read-only, not
    /// disconnected. A CI run caught the step cut off when the viewer noticed the socket close.
    #[test]
    fn a_long_failure_keeps_the_step_on_the_header() {
        let mut a = app();
        a.run.status = RunStatus::Failed {
            message: "the training backend panicked: injected backend panic at step 30 while \
                      it was writing a checkpoint to a very slow disk"
                .into(),
        };
        a.connection_lost = true;
        for width in [80u16, 120] {
            let text = draw(&a, width, 40);
            let header = text.lines().next().expect("a header line");
            assert!(header.contains("step 80/200 (40 %)"), "{header}");
            assert!(header.contains("failed: "), "{header}");
            assert!(header.contains("…"), "the message is cut: {header}");
            assert!(header.contains("read-only"), "{header}");
            assert!(!header.contains("disconnected"), "{header}");
        }
        // A live run that lost its socket says so.
        let mut a = app();
        a.connection_lost = true;
        let header = draw(&a, 120, 40).lines().next().map(str::to_string);
        let header = header.expect("a header line");
        assert!(header.contains("· disconnected"), "{header}");
        assert!(header.contains("step 80/200 (40 %) · epoch"), "{header}");
        // At 120 columns the failure's first words are there.
        let mut a = app();
        a.run.status = RunStatus::Failed {
            message: "the training backend panicked: injected backend panic at step 30".into(),
        };
        let header = draw(&a, 120, 40).lines().next().map(str::to_string);
        let header = header.expect("a header line");
        assert!(header.contains("failed: the training backend"), "{header}");
    }

    #[test]
    fn snapshot_default_layout_80x24() {
        let text = draw(&app(), 80, 24);
        insta::assert_snapshot!(text);
        assert!(text.contains("loss 5.0000"), "{text}");
    }

    #[test]
    fn snapshot_every_pane_zoomed_at_two_sizes() {
        let mut a = app();
        a.zoom = true;
        for pane in Pane::ALL {
            a.focus = pane;
            for (w, h) in [(120, 40), (80, 24)] {
                let name = format!(
                    "zoom_{}_{w}x{h}",
                    pane.title()
                        .split_whitespace()
                        .last()
                        .unwrap_or("pane")
                        .to_lowercase()
                );
                let text = draw(&a, w, h);
                insta::assert_snapshot!(name.clone(), text);
                // Something each pane must show, known without the snapshot.
                let must: Vec<String> = match pane {
                    Pane::Progress => vec!["loss 5.0000".into()],
                    Pane::Groups => vec![format!("{:.1}", expected_ppl()[2])],
                    Pane::Scatter => vec!["step 60 · Uncentred".into()],
                    Pane::Spectrum => vec!["now".into()],
                    Pane::Controls => vec!["[x] CosReg".into(), "loss: mle".into()],
                    Pane::Events => vec!["MLE → CosReg γ=1".into()],
                    Pane::Neighbors => vec!["w5".into()],
                    // μ_z = 0.1·mean(0..60) = 2.95; σ_z = 0.1·√((60² − 1)/12); H and log Z are
                    // both linear in the row: correlation 1.
                    Pane::SelfNorm => vec![
                        "μ_z 2.950".into(),
                        format!("σ_z {:.3}", 0.1 * ((3600.0f64 - 1.0) / 12.0).sqrt()),
                        "corr(H, log Z) 1.000".into(),
                    ],
                };
                for m in must {
                    assert!(text.contains(&m), "{name}: {m:?} missing:\n{text}");
                }
            }
        }
    }

    #[test]
    fn a_chosen_loss_shows_beside_the_one_in_force_until_applied() {
        let mut a = app();
        a.focus = Pane::Controls;
        a.zoom = true;
        a.controls_cursor = Control::count() - 1;
        a.apply(Action::ControlsScale(2.0));
        a.apply(Action::ControlsScale(2.0));
        let text = draw(&a, 100, 30);
        assert!(text.contains("loss: mle → nce-r?"), "{text}");
        a.view.ascii = true;
        assert!(draw(&a, 100, 30).contains("loss: mle -> nce-r?"));
        a.apply(Action::ControlsToggle);
        let text = draw(&a, 100, 30);
        assert!(
            text.contains("loss: mle") && !text.contains("nce-r?"),
            "{text}"
        );
    }

    #[test]
    fn snapshot_help_and_quit_dialog() {
        let mut a = app();
        a.apply(Action::ToggleHelp);
        let help = draw(&a, 100, 30);
        insta::assert_snapshot!("help_overlay", help);
        assert!(help.contains("detach"), "{help}");
        // On an 80-column terminal every description is there in full, wrapped, not cut.
        let narrow = draw(&a, 80, 40);
        for (key, what) in HELP {
            for word in what.split(' ') {
                assert!(narrow.contains(word), "{key}: {word:?} cut off:\n{narrow}");
            }
        }
        let mut a = app();
        a.apply(Action::Quit);
        assert!(a.confirm_quit);
        let quit = draw(&a, 80, 24);
        insta::assert_snapshot!("quit_dialog", quit);
        for choice in [
            "d detach",
            "s stop and save",
            "x stop without saving",
            "c cancel",
        ] {
            assert!(quit.contains(choice), "{choice}: {quit}");
        }
    }

    #[test]
    fn the_neighbour_pane_lists_the_selected_words_neighbours_by_cosine() {
        let a = app();
        assert_eq!(a.neighbors.selected, Some(5));
        assert_eq!(a.neighbors.pinned, vec![1]);
        // Independent check: the cosine of w5 with every other row of the snapshot, in f64.
        let snap = &a.analysis.as_ref().expect("analysis").snapshot;
        let row = |i: usize| &snap.weights[i * D..(i + 1) * D];
        let cos = |i: usize, j: usize| {
            let dot: f64 = row(i)
                .iter()
                .zip(row(j))
                .map(|(x, y)| *x as f64 * *y as f64)
                .sum();
            let n = |r: &[f32]| r.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
            dot / (n(row(i)) * n(row(j)))
        };
        let mut want: Vec<(f64, usize)> =
            (0..N).filter(|&j| j != 5).map(|j| (cos(5, j), j)).collect();
        want.sort_by(|x, y| y.0.total_cmp(&x.0));
        let (_, got) = &a.neighbors.results[0];
        assert_eq!(got.len(), crate::neighbors::K);
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g.score as f64 - w.0).abs() < 1e-5,
                "{} vs {}",
                g.score,
                w.0
            );
        }
        let text = draw(&a, 120, 40);
        let best = format!("w{}", want[0].1);
        assert!(text.contains(&best), "the nearest word is shown: {text}");
        assert!(text.contains("★ w1"), "the pinned word is shown: {text}");
    }

    #[test]
    fn the_scrub_walks_back_through_snapshots_and_centring_switches_the_projection() {
        let mut a = app();
        a.focus = Pane::Scatter;
        assert_eq!(
            a.run.projection_steps,
            vec![1, 30, 60],
            "snapshots at steps 1, 30 and 60"
        );
        let live = draw(&a, 120, 40);
        assert!(
            live.contains("step 60 · Uncentred") && live.contains("· live"),
            "{live}"
        );
        a.apply(Action::Scrub(-1));
        let text = draw(&a, 120, 40);
        assert!(
            text.contains("step 30 · Uncentred · axes") && text.contains(" · 2/3"),
            "{text}"
        );
        assert_eq!(a.scrub, Some(1));
        for _ in 0..10 {
            a.apply(Action::Scrub(-1));
        }
        assert_eq!(a.scrub, Some(0), "stops at the first snapshot");
        for _ in 0..10 {
            a.apply(Action::Scrub(1));
        }
        assert_eq!(a.scrub, None, "past the newest: live again");
        a.apply(Action::ToggleCentred);
        let text = draw(&a, 120, 40);
        assert!(text.contains("step 60 · Centred"), "{text}");
        // The centred axes are the covariance's: their explained shares add up to at most 1.
        let c = a
            .scatter_frame()
            .and_then(|f| f.centred.clone())
            .expect("centred");
        assert!(c.explained[0] + c.explained[1] <= 1.0 + 1e-9 && c.explained[0] >= c.explained[1]);
    }

    #[test]
    fn a_tiny_terminal_gets_a_message_not_garbage() {
        let text = draw(&app(), 40, 10);
        assert!(text.contains("terminal too small"), "{text}");
        assert!(text.contains("40×10"), "{text}");
    }

    #[test]
    fn finished_runs_say_so_and_the_curve_marks_the_intervention() {
        let mut a = app();
        a.on_event(Event::Finished {
            step: 80,
            reason: FinishReason::Completed,
        });
        let text = draw(&a, 120, 40);
        assert!(text.contains("finished (completed)"), "{text}");
        assert!(
            text.contains("MLE → CosReg γ=1"),
            "the event log shows the change: {text}"
        );
        assert!(
            a.run.objectives.cos.enabled,
            "the app mirrors the acknowledged change"
        );
        assert_eq!(a.run.interventions, vec![41]);
    }
}
