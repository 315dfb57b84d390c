//! Drawing the compare view: a pure function of [`CompareApp`] (snapshot-tested).
//!
//! ```text
//!  compare · 2 runs · x step · smoothing 0.60 · linear y
//!  ■ 1 mle #seed1    completed  step 600   train loss 5.012
//!  ■ 2 cosreg        live       step 412   train loss 5.207
//! ┌Curves──────────────────────────────────────────────────────┐
//! │ train loss   │ (overlaid curves, one colour per run)        │
//! │ valid PPL    │                                              │
//! └────────────────────────────────────────────────────────────┘
//! ┌Groups (valid)──────────────────┐┌Spectrum──────────────────┐
//! └────────────────────────────────┘└──────────────────────────┘
//! ```

use conelab_widgets::{Series, format_compact};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Cell, Chart, Dataset, GraphType, Paragraph, Row, Table};

use super::{CompareApp, ComparePane, HELP, LEGEND_PAGE, TABLE_GROUPS, XAxis};
use crate::chrome::{self, Screen, keys_overlay, screen, too_small};
use crate::format::{human_duration, shorten, smooth_debiased};
use crate::style::{GROUP_NAMES, Palette, pane_block};
use conelab_core::series::split;

/// One colour per run on a dark background, from the 16 ANSI colours every terminal has.
const RUN_COLOURS: [Color; 12] = [
    Color::Cyan,
    Color::Yellow,
    Color::Magenta,
    Color::Green,
    Color::Red,
    Color::Blue,
    Color::LightCyan,
    Color::LightYellow,
    Color::LightMagenta,
    Color::LightGreen,
    Color::LightRed,
    Color::LightBlue,
];

/// The runs' colours on a light background: colours [`conelab_widgets::light_theme`] leaves as
/// they are (grey is the raw curves'), so five distinct ones.
const RUN_COLOURS_LIGHT: [Color; 5] = [
    Color::Blue,
    Color::Red,
    Color::Magenta,
    Color::Green,
    Color::Black,
];

/// Okabe & Ito's palette (2008), distinguishable with every common colour-vision deficiency:
/// orange, sky blue, bluish green, yellow, blue, vermillion, reddish purple — and grey in place
/// of its black on a dark background.
const OKABE_ITO_DARK: [Color; 8] = [
    Color::Rgb(230, 159, 0),
    Color::Rgb(86, 180, 233),
    Color::Rgb(0, 158, 115),
    Color::Rgb(240, 228, 66),
    Color::Rgb(0, 114, 178),
    Color::Rgb(213, 94, 0),
    Color::Rgb(204, 121, 167),
    Color::Rgb(187, 187, 187),
];

/// The same on a light background, black kept and yellow (unreadable on white) left out.
const OKABE_ITO_LIGHT: [Color; 7] = [
    Color::Rgb(230, 159, 0),
    Color::Rgb(86, 180, 233),
    Color::Rgb(0, 158, 115),
    Color::Rgb(0, 114, 178),
    Color::Rgb(213, 94, 0),
    Color::Rgb(204, 121, 167),
    Color::Rgb(0, 0, 0),
];

/// Without colour: the runs' markers and the glyph each draws (a sixth run repeats the first).
const NO_COLOR_MARKERS: [(Marker, &str); 5] = [
    (Marker::Braille, "⣿"),
    (Marker::Dot, "•"),
    (Marker::Block, "█"),
    (Marker::Bar, "▄"),
    (Marker::HalfBlock, "▀"),
];

/// Legend lines at most: one page (more runs: a line says which page, `[` `]` turn it).
const LEGEND_LINES: usize = LEGEND_PAGE;

struct RunColours {
    /// The workbench's palette (`--no-color`): the frames, the focus and dimmed text are its.
    base: Palette,
    light: bool,
    true_color: bool,
}

impl RunColours {
    /// The colours runs cycle through.
    fn palette(&self) -> &'static [Color] {
        match (self.true_color, self.light) {
            (true, false) => &OKABE_ITO_DARK,
            (true, true) => &OKABE_ITO_LIGHT,
            (false, false) => &RUN_COLOURS,
            (false, true) => &RUN_COLOURS_LIGHT,
        }
    }

    fn run(&self, i: usize) -> Style {
        if self.base.no_color {
            Style::default()
        } else {
            let p = self.palette();
            Style::default().fg(p[i % p.len()])
        }
    }

    /// Which glyph run `i` is drawn with: without colour each run has its own; with colour
    /// braille for the first round of the palette, then the next glyph for each round, so that
    /// no two runs share colour and glyph (palette × 5 runs).
    fn glyph(&self, i: usize) -> usize {
        if self.base.no_color {
            i % NO_COLOR_MARKERS.len()
        } else {
            (i / self.palette().len()) % NO_COLOR_MARKERS.len()
        }
    }

    /// The raw curve behind the smoothed one: grey for every run (a chart cell has a colour
    /// but no modifier, so "dim" is not drawable; the smoothed curve on top names the run).
    fn faint(&self) -> Style {
        self.dim()
    }

    fn error(&self) -> Style {
        if self.base.no_color {
            Style::default().add_modifier(Modifier::BOLD)
        } else {
            Style::default().fg(Color::Red)
        }
    }

    /// How run `i`'s curve is drawn: braille in its colour; without colour each run gets a
    /// glyph of its own (the legend shows it), since one style would make them alike.
    fn marker(&self, i: usize) -> Marker {
        NO_COLOR_MARKERS[self.glyph(i)].0
    }

    /// The legend's sample of run `i`'s curve: its glyph (a square for braille, the first
    /// round's), hollow when hidden.
    fn swatch(&self, i: usize, hidden: bool) -> &'static str {
        match (self.glyph(i), hidden) {
            (_, true) => "□",
            (0, false) if !self.base.no_color => "■",
            (g, false) => NO_COLOR_MARKERS[g].1,
        }
    }

    fn dim(&self) -> Style {
        self.base.fg(Color::DarkGray)
    }

    fn focus(&self, focused: bool) -> Style {
        self.base.focus(focused)
    }
}

pub fn render(frame: &mut Frame, app: &CompareApp) {
    let area = frame.area();
    if too_small(frame, area) {
        return;
    }
    let pal = RunColours {
        base: Palette {
            no_color: app.view.no_color,
        },
        light: app.view.light,
        true_color: app.view.true_color,
    };
    let legend_lines = if app.group_seeds {
        app.seed_groups().len().min(LEGEND_LINES) as u16 + 1
    } else {
        app.runs.len().min(LEGEND_LINES) as u16
            + u16::from(app.runs.len() > LEGEND_LINES)
            + u16::from(!app.warnings.is_empty())
    };
    let Screen {
        header,
        legend,
        body,
        footer,
    } = screen(area, legend_lines);
    frame.render_widget(Paragraph::new(header_line(app)), header);
    frame.render_widget(Paragraph::new(legend_text(app, &pal)), legend);
    chrome::footer(
        frame,
        footer,
        "? help · q quit · ↑↓ curve · x step/time · +/- smoothing · l log-y · o outliers · c cursor · < > zoom x · 1-9 show/hide · Tab pane · z zoom",
        pal.dim(),
    );
    for (pane, rect) in pane_areas(body, app) {
        let block = pane_block(pane.title(), pane == app.focus, &pal.base);
        let inner = block.inner(rect);
        frame.render_widget(block, rect);
        match pane {
            ComparePane::Curves => curves(frame, app, inner, &pal),
            ComparePane::Groups => groups(frame, app, inner, &pal),
            ComparePane::Spectrum => spectrum(frame, app, inner, &pal),
        }
    }
    if app.help {
        keys_overlay(frame, area, &HELP);
    }
    if app.view.light {
        conelab_widgets::light_theme(frame.buffer_mut());
    }
}

/// Where the panes go in `body`: the focused one alone when zoomed.
fn pane_areas(body: Rect, app: &CompareApp) -> Vec<(ComparePane, Rect)> {
    if app.zoom {
        return vec![(app.focus, body)];
    }
    let [top, bottom] =
        Layout::vertical([Constraint::Percentage(60), Constraint::Min(0)]).areas(body);
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(60), Constraint::Min(0)]).areas(bottom);
    vec![
        (ComparePane::Curves, top),
        (ComparePane::Groups, left),
        (ComparePane::Spectrum, right),
    ]
}

fn header_line(app: &CompareApp) -> String {
    let x = match app.x_axis {
        XAxis::Step => "step",
        XAxis::Time => "wall time",
    };
    let smoothing = if app.smoothing > 0.0 {
        format!("smoothing {:.2}", app.smoothing)
    } else {
        "no smoothing".into()
    };
    let y = if app.log_y { "log y" } else { "linear y" };
    let runs = match app.runs.len() {
        1 => "1 run".to_string(),
        n => format!("{n} runs"),
    };
    format!(" compare · {runs} · x {x} · {smoothing} · {y}")
}

/// A line per run: its colour, number (the key that hides it), label, status, step and the
/// newest value of the curve shown.
/// The legend of grouped runs: a line per label with its number of runs and the mean of their
/// newest values (at the cursor when it is on) ± their sd.
fn group_legend(app: &CompareApp, pal: &RunColours) -> Vec<Line<'static>> {
    let curve = app.curve();
    let cursor = app.cursor_x();
    app.seed_groups()
        .into_iter()
        .take(LEGEND_LINES)
        .map(|(label, members)| {
            let values: Vec<f64> = members
                .iter()
                .filter_map(|&i| match cursor {
                    Some(at) => app.value_at(&app.runs[i], at).map(|p| p.1),
                    None => app.runs[i]
                        .last(&curve.split, &curve.group, &curve.metric)
                        .map(|p| p.1),
                })
                .filter(|v| v.is_finite())
                .collect();
            let band = super::mean_band(
                &values
                    .iter()
                    .map(|&v| vec![(0, 0.0, v)])
                    .collect::<Vec<_>>(),
            );
            let value = match band.first() {
                Some(b) if b.n > 1 => {
                    format!("{} ± {}", format_compact(b.mean), format_compact(b.sd))
                }
                Some(b) => format_compact(b.mean),
                None => "–".into(),
            };
            let first = members[0];
            Line::from(vec![
                Span::styled(format!(" {} ", pal.swatch(first, false)), pal.run(first)),
                Span::styled(shorten(&label, 40), pal.run(first)),
                Span::raw(format!(
                    "  {} run{}  {} {value}",
                    members.len(),
                    if members.len() == 1 { "" } else { "s" },
                    curve.label
                )),
            ])
        })
        .collect()
}

fn legend_text(app: &CompareApp, pal: &RunColours) -> Vec<Line<'static>> {
    if app.group_seeds {
        let mut lines = group_legend(app, pal);
        lines.push(Line::styled(
            "   grouped by label: mean, dotted ±1 sd (g: every run)",
            pal.dim(),
        ));
        return lines;
    }
    let curve = app.curve();
    let cursor = app.cursor_x();
    let width = app
        .runs
        .iter()
        .enumerate()
        .map(|(i, _)| app.shown_label(i).chars().count())
        .max()
        .unwrap_or(0)
        .min(40);
    let mut lines: Vec<Line> = app
        .runs
        .iter()
        .enumerate()
        .skip(app.legend_page * LEGEND_PAGE)
        .take(LEGEND_LINES)
        .map(|(i, r)| {
            let mark = pal.swatch(i, r.hidden);
            let step = r
                .step()
                .map(|s| format!("step {s}"))
                .unwrap_or_else(|| "no step yet".into());
            // At the cursor when it is on (every run read at one x), else the newest.
            let value = match cursor {
                Some(at) => app
                    .value_at(r, at)
                    .map(|(_, v)| format_compact(v))
                    .unwrap_or_else(|| "–".into()),
                None => r
                    .last(&curve.split, &curve.group, &curve.metric)
                    .map(|(_, v)| format_compact(v))
                    .unwrap_or_else(|| "–".into()),
            };
            let label = shorten(&app.shown_label(i), width);
            // The key that hides it (1–9 on this page), and its number among all.
            let key = i % LEGEND_PAGE + 1;
            let number = if app.runs.len() > LEGEND_PAGE {
                format!("{key} #{}", i + 1)
            } else {
                key.to_string()
            };
            let mut spans = vec![
                Span::styled(format!(" {mark} {number} "), pal.run(i)),
                Span::styled(format!("{label:<width$}"), pal.run(i)),
                Span::raw(format!(
                    "  {:<10} {:<12} {} {value}",
                    r.status, step, curve.label
                )),
            ];
            if r.hidden {
                spans.push(Span::styled("  (hidden)", pal.dim()));
            }
            if let Some(e) = &r.error {
                spans.push(Span::styled(format!("  ! {e}"), pal.error()));
            }
            Line::from(spans)
        })
        .collect();
    if app.runs.len() > LEGEND_LINES {
        let pages = app.runs.len().div_ceil(LEGEND_PAGE);
        lines.push(Line::styled(
            format!(
                "   page {} of {pages} of {} runs (all drawn; [ ] turn the page, 1-9 its runs)",
                app.legend_page + 1,
                app.runs.len()
            ),
            pal.dim(),
        ));
    }
    if let Some(w) = app.warnings.back() {
        lines.push(Line::styled(format!(" ! {w}"), pal.dim()));
    }
    lines
}

fn curves(frame: &mut Frame, app: &CompareApp, area: Rect, pal: &RunColours) {
    // Wide enough for the longest name (stored series are `split/group/metric`), up to a third.
    let longest = app
        .curves
        .iter()
        .map(|c| c.label.chars().count() + 2)
        .max()
        .unwrap_or(0);
    let width = longest.clamp(18, (area.width / 3).max(18) as usize) as u16;
    let [list, chart] =
        Layout::horizontal([Constraint::Length(width), Constraint::Min(0)]).areas(area);
    // While searching: the query, then its matches.
    let (shown, query): (Vec<usize>, Option<Line>) = match &app.search {
        Some(q) => (
            super::curve_matches(&app.curves, q),
            Some(Line::styled(format!("/{q}_"), pal.focus(true))),
        ),
        None => ((0..app.curves.len()).collect(), None),
    };
    let items: Vec<Line> = query
        .into_iter()
        .chain(shown.iter().map(|&i| (i, &app.curves[i])).map(|(i, c)| {
            if i == app.curve {
                Line::styled(format!("▶ {}", c.label), pal.focus(true))
            } else {
                Line::raw(format!("  {}", c.label))
            }
        }))
        .collect();
    // The selected curve stays in view in a short pane.
    let selected =
        shown.iter().position(|&i| i == app.curve).unwrap_or(0) + usize::from(app.search.is_some());
    let offset = selected.saturating_sub((list.height as usize).saturating_sub(1));
    frame.render_widget(Paragraph::new(items).scroll((offset as u16, 0)), list);
    curve_chart(frame, app, chart, pal);
}

/// The 1st and 99th percentiles of `values`, widened by 5 % of their span: the y-range without
/// the outliers (nearest rank; `None` for fewer than 20 values, where every one counts).
pub(crate) fn percentile_range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    if v.len() < super::MIN_SMOOTHED_POINTS {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((q * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
    let (lo, hi) = (at(0.01), at(0.99));
    let pad = (hi - lo) * 0.05;
    Some((lo - pad, hi + pad))
}

/// The x and y values of a curve for one run, as drawn: y on a log scale when asked (points
/// ≤ 0 are left out there).
struct Drawn {
    run: usize,
    raw: Vec<(f64, f64)>,
    smooth: Option<Vec<(f64, f64)>>,
    /// A group's mean − sd and mean + sd (`g`).
    band: Option<[Vec<(f64, f64)>; 2]>,
}

fn curve_chart(frame: &mut Frame, app: &CompareApp, area: Rect, pal: &RunColours) {
    let curve = app.curve();
    let key = curve.key();
    let y_of = |v: f64| {
        if !app.log_y {
            Some(v).filter(|v| v.is_finite())
        } else if v > 0.0 && v.is_finite() {
            Some(v.ln())
        } else {
            None
        }
    };
    // The zoom window: smoothing runs over the whole curve, then what is outside is cut.
    let window = app.shown_x_range();
    let shown = |x: f64| window.is_none_or(|(lo, hi)| x >= lo - 1e-9 && x <= hi + 1e-9);
    // One curve: (step, x, value) by step → what is drawn of it.
    let curve_of = |run: usize, points: Vec<(u64, f64, f64)>| {
        let values: Vec<f64> = points.iter().map(|p| p.2).collect();
        let raw = points
            .iter()
            .filter(|p| shown(p.1))
            .filter_map(|p| y_of(p.2).map(|y| (p.1, y)))
            .collect();
        let smooth = app.smoothed(points.len()).then(|| {
            smooth_debiased(&values, app.smoothing)
                .into_iter()
                .zip(&points)
                .filter(|(_, p)| shown(p.1))
                .filter_map(|(v, p)| y_of(v).map(|y| (p.1, y)))
                .collect()
        });
        Drawn {
            run,
            raw,
            smooth,
            band: None,
        }
    };
    let as_drawn = |r: &super::CompareRun| -> Vec<(u64, f64, f64)> {
        r.points(key)
            .iter()
            .map(|p| (p.0, app.x_of(p), p.2))
            .collect()
    };
    let drawn: Vec<Drawn> = if app.group_seeds {
        app.seed_groups()
            .into_iter()
            .map(|(_, members)| {
                let series: Vec<_> = members.iter().map(|&i| as_drawn(&app.runs[i])).collect();
                let band = super::mean_band(&series);
                let step_of = |k: usize| k as u64;
                let mean: Vec<(u64, f64, f64)> = band
                    .iter()
                    .enumerate()
                    .map(|(k, b)| (step_of(k), b.x, b.mean))
                    .collect();
                let mut d = curve_of(members[0], mean);
                if members.len() > 1 {
                    let side = |sign: f64| {
                        band.iter()
                            .filter(|b| shown(b.x))
                            .filter_map(|b| y_of(b.mean + sign * b.sd).map(|y| (b.x, y)))
                            .collect::<Vec<_>>()
                    };
                    d.band = Some([side(-1.0), side(1.0)]);
                }
                d
            })
            .filter(|d| !d.raw.is_empty())
            .collect()
    } else {
        app.runs
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.hidden)
            .map(|(i, r)| curve_of(i, as_drawn(r)))
            .filter(|d| !d.raw.is_empty())
            .collect()
    };
    let all = drawn.iter().flat_map(|d| {
        d.raw
            .iter()
            .chain(d.smooth.iter().flatten())
            .chain(d.band.iter().flatten().flatten())
    });
    let (mut x_lo, mut x_hi, mut y_lo, mut y_hi) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for &(x, y) in all {
        x_lo = x_lo.min(x);
        x_hi = x_hi.max(x);
        y_lo = y_lo.min(y);
        y_hi = y_hi.max(y);
    }
    if drawn.is_empty() || !(x_lo.is_finite() && y_lo.is_finite()) {
        let shown = app.runs.iter().filter(|r| !r.hidden);
        let values: Vec<f64> = shown
            .flat_map(|r| r.points(key).into_iter().map(|p| p.2))
            .collect();
        let why = if app.runs.iter().all(|r| r.hidden) {
            "every run is hidden (1-9 shows them)".to_string()
        } else if values.is_empty() {
            format!("no {} yet", curve.label)
        } else if values.iter().all(|v| !v.is_finite()) {
            format!(
                "every {} value is NaN or infinite (a diverged run?)",
                curve.label
            )
        } else if app.x_window != (0.0, 1.0) {
            format!(
                "no {} point in the zoomed range (R: the whole axis)",
                curve.label
            )
        } else {
            format!(
                "no {} value above 0 to draw on a log scale (l: linear)",
                curve.label
            )
        };
        frame.render_widget(Paragraph::new(why).style(pal.dim()), area);
        return;
    }
    if let Some((lo, hi)) = window
        && app.x_window != (0.0, 1.0)
    {
        (x_lo, x_hi) = (lo, hi);
    }
    if x_hi - x_lo < 1e-9 {
        x_hi = x_lo + 1.0;
    }
    // Clipped only where there are enough values for percentiles (the title says so only then).
    let clipped = app
        .clipping()
        .then(|| percentile_range(drawn.iter().flat_map(|d| d.raw.iter().map(|p| p.1))))
        .flatten();
    if let Some((lo, hi)) = clipped {
        y_lo = lo;
        y_hi = hi;
    }
    if y_hi - y_lo < 1e-12 {
        y_hi += 0.5;
        y_lo -= 0.5;
    }
    let mut datasets = Vec::new();
    for d in &drawn {
        // A group's band: its two edges in its colour, dotted under the mean's line.
        for edge in d.band.iter().flatten() {
            datasets.push(
                Dataset::default()
                    .marker(Marker::Dot)
                    .graph_type(GraphType::Scatter)
                    .style(pal.run(d.run))
                    .data(edge),
            );
        }
        // The raw curve faint behind the smoothed one (TensorBoard's habit); without colour
        // faint is not drawable, so only the smoothed curve is.
        match &d.smooth {
            Some(smooth) => {
                if !pal.base.no_color {
                    datasets.push(
                        Dataset::default()
                            .marker(Marker::Braille)
                            .graph_type(GraphType::Line)
                            .style(pal.faint())
                            .data(&d.raw),
                    );
                }
                datasets.push(
                    Dataset::default()
                        .marker(pal.marker(d.run))
                        .graph_type(GraphType::Line)
                        .style(pal.run(d.run))
                        .data(smooth),
                );
            }
            None => datasets.push(
                Dataset::default()
                    .marker(pal.marker(d.run))
                    .graph_type(GraphType::Line)
                    .style(pal.run(d.run))
                    .data(&d.raw),
            ),
        }
    }
    let x_label = |x: f64| match app.x_axis {
        XAxis::Step => format_compact(x),
        XAxis::Time => human_duration(x),
    };
    // The value cursor: a vertical line where the legend reads every run.
    let cursor_x = app.cursor_x();
    let cursor_line: Vec<(f64, f64)> = cursor_x
        .map(|x| {
            (0..=16)
                .map(|k| (x, y_lo + (y_hi - y_lo) * k as f64 / 16.0))
                .collect()
        })
        .unwrap_or_default();
    if !cursor_line.is_empty() {
        datasets.push(
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(pal.focus(true))
                .data(&cursor_line),
        );
    }
    let x_title = match (app.x_axis, cursor_x) {
        (XAxis::Step, Some(x)) => format!("step · cursor {}", x_label(x)),
        (XAxis::Time, Some(x)) => format!("time · cursor {}", x_label(x)),
        (XAxis::Step, None) => "step".into(),
        (XAxis::Time, None) => "time".into(),
    };
    let y_label = |y: f64| format_compact(if app.log_y { y.exp() } else { y });
    let y_mid = (y_lo + y_hi) / 2.0;
    let chart = Chart::new(datasets)
        .x_axis(Axis::default().title(x_title).bounds([x_lo, x_hi]).labels([
            x_label(x_lo),
            x_label((x_lo + x_hi) / 2.0),
            x_label(x_hi),
        ]))
        .y_axis(
            Axis::default()
                .title(format!(
                    "{}{}{}",
                    curve.label,
                    if app.log_y { " (log)" } else { "" },
                    if clipped.is_some() {
                        " · 1–99 %"
                    } else {
                        ""
                    }
                ))
                .bounds([y_lo, y_hi])
                .labels([y_label(y_lo), y_label(y_mid), y_label(y_hi)]),
        );
    frame.render_widget(chart, area);
}

/// One row per run: the newest validation PPL per group, Uniq, I(W) and IsoScore of the whole
/// vocabulary.
fn groups(frame: &mut Frame, app: &CompareApp, area: Rect, pal: &RunColours) {
    // Header and preferred width of each column; at 80 columns the pane is half as wide as
    // they want, and a number cut to its first digits reads as another number (issue #58). So
    // a narrow pane first leaves out what reads least (IsoScore, I(W), Uniq, the step), then
    // narrows the label and the groups; every cell is then written for the width it gets.
    let mut columns: Vec<(usize, u16)> = vec![(0, 10), (1, 6), (2, 7), (3, 7), (4, 7), (5, 7)];
    columns.extend([(6, 5), (7, 5), (8, 5)]);
    let needed = |c: &[(usize, u16)]| c.iter().map(|(_, w)| w + 1).sum::<u16>().saturating_sub(1);
    for leave_out in [8, 7, 6, 1] {
        if needed(&columns) <= area.width {
            break;
        }
        columns.retain(|(c, _)| *c != leave_out);
    }
    if needed(&columns) > area.width {
        for (c, w) in &mut columns {
            *w = if *c == 0 { 8 } else { 7 };
        }
    }
    let constraints: Vec<Constraint> = columns
        .iter()
        .map(|&(c, w)| {
            if c == 0 {
                Constraint::Min(w)
            } else {
                Constraint::Length(w)
            }
        })
        .collect();
    let widths = crate::format::column_widths(area.width, &constraints);
    let headers: Vec<&str> = ["Run", "Step"]
        .into_iter()
        .chain(GROUP_NAMES)
        .chain(["Uniq", "I(W)", "Iso"])
        .collect();
    let header = Row::new(columns.iter().zip(&widths).map(|(&(c, _), &w)| {
        Cell::from(shorten(headers[c], w)).style(Style::default().add_modifier(Modifier::BOLD))
    }));
    let rows: Vec<Row> = app
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            // Every column's value and decimals; the label is text.
            let value = |c: usize| -> (Option<f64>, usize) {
                let newest = |split: &str, group: &str, metric: &str| {
                    r.last(split, group, metric).map(|(_, v)| v)
                };
                match c {
                    1 => (
                        r.last(split::VALID, "total", "ppl").map(|(s, _)| s as f64),
                        0,
                    ),
                    2..=5 => (newest(split::VALID, TABLE_GROUPS[c - 2], "ppl"), 1),
                    6 => (newest(split::VALID, "total", "uniq"), 0),
                    7 => (newest(split::EMBEDDING, "total", "i1"), 3),
                    _ => (newest(split::EMBEDDING, "total", "isoscore"), 3),
                }
            };
            let cells = columns.iter().zip(&widths).map(|(&(c, _), &w)| {
                if c == 0 {
                    Cell::from(shorten(&format!("{} {}", i + 1, app.shown_label(i)), w))
                        .style(pal.run(i))
                } else {
                    let (v, decimals) = value(c);
                    Cell::from(crate::format::number_cell(v, w, decimals))
                }
            });
            Row::new(cells)
        })
        .collect();
    frame.render_widget(Table::new(rows, constraints).header(header), area);
}

fn spectrum(frame: &mut Frame, app: &CompareApp, area: Rect, pal: &RunColours) {
    let names: Vec<String> = app
        .runs
        .iter()
        .enumerate()
        .map(|(i, _)| format!("{} {}", i + 1, shorten(&app.shown_label(i), 16)))
        .collect();
    let series: Vec<Series> = app
        .runs
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.hidden && !r.spectrum().is_empty())
        .map(|(i, r)| Series::new(names[i].as_str(), r.spectrum()).style(pal.run(i)))
        .collect();
    chrome::spectra(frame, area, series, pal.base.no_color, pal.dim());
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::super::{CURVES, CompareOptions, CompareRun};
    use super::*;
    use conelab_client::follow::Row as StoreRow;
    use conelab_core::series::series_key;
    use conelab_core::series::spectrum_metric;

    fn run(dir: &str, label: &str, losses: &[f64], ppl: f64) -> CompareRun {
        let mut r = CompareRun::new(PathBuf::from(dir));
        r.label = label.into();
        r.status = "completed".into();
        let loss = CURVES[0].key();
        let mut rows: Vec<StoreRow> = losses
            .iter()
            .enumerate()
            .map(|(i, &v)| StoreRow {
                key: loss,
                step: i as u64 + 1,
                wall: 1000.0 + i as f64,
                value: v,
            })
            .collect();
        for (g, v) in [("total", ppl), ("frequent", ppl / 2.0), ("rare", ppl * 9.0)] {
            rows.push(StoreRow {
                key: series_key(split::VALID, g, "ppl"),
                step: losses.len() as u64,
                wall: 2000.0,
                value: v,
            });
        }
        for k in 0..16 {
            rows.push(StoreRow {
                key: series_key(split::SPECTRUM, "total", &spectrum_metric(k)),
                step: losses.len() as u64,
                wall: 2000.0,
                value: 1.0 / (k as f64 + 1.0),
            });
        }
        r.add(&rows);
        r
    }

    fn app() -> CompareApp {
        let mut app = CompareApp::new(Vec::new(), CompareOptions::default());
        // A noisy falling curve and a smooth one.
        let noisy: Vec<f64> = (0..60)
            .map(|i| 6.0 - i as f64 * 0.05 + if i % 2 == 0 { 0.4 } else { -0.4 })
            .collect();
        let calm: Vec<f64> = (0..60).map(|i| 5.5 - i as f64 * 0.02).collect();
        app.runs = vec![
            run("a", "mle #seed1", &noisy, 250.0),
            run("b", "cosreg", &calm, 240.5),
        ];
        app
    }

    /// Issue #58: two runs named alike read `1 alpha` and `2 alpha` in the legend, the Groups
    /// table and the spectrum; each now says its folder beside the shared name, and a run whose
    /// label is its own stays as it was.
    #[test]
    fn runs_named_alike_are_told_apart_by_folder() {
        let mut app = app();
        app.runs[0].label = "alpha".into();
        app.runs[1].label = "alpha".into();
        app.runs[0].dir = PathBuf::from("/runs/alpha-s1");
        app.runs[1].dir = PathBuf::from("/runs/alpha-s2");
        assert_eq!(app.shown_label(0), "alpha (alpha-s1)");
        assert_eq!(app.shown_label(1), "alpha (alpha-s2)");
        let screen = draw(&app, 200, 50);
        for shown in ["alpha (alpha-s1)", "alpha (alpha-s2)"] {
            assert!(screen.contains(shown), "{shown}:\n{screen}");
        }
        // Folders named like the run too: the whole path.
        app.runs[0].dir = PathBuf::from("/x/alpha");
        app.runs[1].dir = PathBuf::from("/y/alpha");
        app.runs[0].label = "alpha".into();
        assert_eq!(app.shown_label(1), "/y/alpha");
        app.runs[1].label = "beta".into();
        assert_eq!(app.shown_label(0), "alpha");
    }

    fn draw(app: &CompareApp, w: u16, h: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
        t.draw(|f| render(f, app)).expect("draw");
        let buf = t.backend().buffer().clone();
        (0..h)
            .map(|y| {
                (0..w)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
                    + "\n"
            })
            .collect()
    }

    /// The chart's cells (braille) only.
    fn plot(screen: &str) -> String {
        screen
            .chars()
            .map(|c| {
                if ('\u{2801}'..='\u{28ff}').contains(&c) {
                    c
                } else {
                    ' '
                }
            })
            .collect()
    }

    /// Issue #37: colours repeated after 12 runs (5 on the light theme); on a true-colour
    /// terminal the runs get Okabe–Ito, and no two of palette × 5 runs share colour and glyph.
    #[test]
    fn runs_get_distinct_colour_and_glyph_pairs() {
        for (true_color, light) in [(true, false), (true, true), (false, false), (false, true)] {
            let pal = RunColours {
                base: Palette { no_color: false },
                light,
                true_color,
            };
            let n = pal.palette().len() * NO_COLOR_MARKERS.len();
            let pairs: std::collections::HashSet<(String, usize)> = (0..n)
                .map(|i| (format!("{:?}", pal.run(i).fg), pal.glyph(i)))
                .collect();
            assert_eq!(pairs.len(), n, "true colour {true_color}, light {light}");
        }
        let okabe = RunColours {
            base: Palette { no_color: false },
            light: false,
            true_color: true,
        };
        assert_eq!(okabe.run(0).fg, Some(Color::Rgb(230, 159, 0)));
        assert_eq!(okabe.swatch(0, false), "■");
        // The ninth run: orange again, drawn with dots.
        assert_eq!(okabe.run(8).fg, okabe.run(0).fg);
        assert_eq!(okabe.swatch(8, false), "•");
    }

    /// Issue #37: no zoom, pan or value cursor. The cursor reads every run at one x; the
    /// zoom keeps the point under the cursor; the pan stays inside the data.
    #[test]
    fn the_value_cursor_reads_every_run_and_the_x_axis_zooms_and_pans() {
        let mut app = app();
        let press =
            |app: &mut CompareApp, code: ratatui::crossterm::event::KeyCode, shift: bool| {
                let m = if shift {
                    ratatui::crossterm::event::KeyModifiers::SHIFT
                } else {
                    ratatui::crossterm::event::KeyModifiers::NONE
                };
                app.apply(super::super::action_for(
                    ratatui::crossterm::event::KeyEvent::new(code, m),
                ))
            };
        use ratatui::crossterm::event::KeyCode;
        let (lo, hi) = app.full_x_range().expect("a range");
        assert_eq!((lo, hi), (1.0, 60.0));
        press(&mut app, KeyCode::Char('c'), false);
        assert_eq!(
            app.cursor_x(),
            Some(60.0),
            "the cursor starts at the newest step"
        );
        for _ in 0..10 {
            press(&mut app, KeyCode::Left, true);
        }
        assert!((app.cursor_x().expect("cursor") - 1.0).abs() < 1e-9);
        // At step 1 the noisy run is 6.0 + 0.4 and the calm one 5.5 (the fixture's first points).
        let values: Vec<f64> = app
            .runs
            .iter()
            .map(|r| app.value_at_cursor(r).expect("a value").1)
            .collect();
        assert_eq!(values, vec![6.4, 5.5]);
        let screen = draw(&app, 120, 40);
        assert!(screen.contains("cursor 1"), "{screen}");
        // Half-way, then zoomed in twice around the cursor: it stays on the same step.
        for _ in 0..5 {
            press(&mut app, KeyCode::Right, true);
        }
        let at = app.cursor_x().expect("cursor");
        press(&mut app, KeyCode::Char('>'), false);
        press(&mut app, KeyCode::Char('>'), false);
        assert!((app.x_window.1 - app.x_window.0 - 0.25).abs() < 1e-12);
        assert!((app.cursor_x().expect("cursor") - at).abs() < 1e-9);
        let (a, b) = app.shown_x_range().expect("shown");
        assert!(a > lo && b < hi, "{a} {b}");
        // Panned right by a quarter of the window, never past the end.
        let before = app.x_window;
        press(&mut app, KeyCode::Char('L'), false);
        assert!((app.x_window.0 - before.0 - 0.0625).abs() < 1e-12);
        for _ in 0..40 {
            press(&mut app, KeyCode::Char('L'), false);
        }
        assert!((app.x_window.1 - 1.0).abs() < 1e-12);
        draw(&app, 120, 40);
        // A window with no point in it says so (not the log-scale message).
        app.x_window = (0.001, 0.002);
        let screen = draw(&app, 120, 40);
        assert!(
            screen.contains("no train loss point in the zoomed range"),
            "{screen}"
        );
        press(&mut app, KeyCode::Char('R'), false);
        assert_eq!(app.x_window, (0.0, 1.0));
        press(&mut app, KeyCode::Char('c'), false);
        assert_eq!(app.cursor_x(), None);
    }

    /// Issue #37: no seed bands. Runs of one label are one curve, their mean, and ±1 sd.
    #[test]
    fn seeds_of_one_label_draw_their_mean_and_a_band() {
        // By hand: steps 1, 2 in both runs (1 and 3, 3 and 5: means 2 and 4, sd √2), step 3 in
        // one (7, sd 0); a NaN does not count.
        let a = vec![(1, 1.0, 1.0), (2, 2.0, 3.0), (3, 3.0, f64::NAN)];
        let b = vec![(1, 1.0, 3.0), (2, 2.0, 5.0), (3, 3.0, 7.0)];
        let band = super::super::mean_band(&[a, b]);
        let s2 = 2f64.sqrt();
        assert_eq!(band.len(), 3);
        assert_eq!((band[0].mean, band[0].n), (2.0, 2));
        assert!((band[0].sd - s2).abs() < 1e-12 && (band[1].sd - s2).abs() < 1e-12);
        assert_eq!((band[1].x, band[1].mean), (2.0, 4.0));
        assert_eq!((band[2].mean, band[2].sd, band[2].n), (7.0, 0.0, 1));
        // Two seeds of one setting: one legend line, their mean ± sd.
        let mut app = app();
        app.runs[1].label = app.runs[0].label.clone();
        app.apply(super::super::action_for(
            ratatui::crossterm::event::KeyEvent::from(ratatui::crossterm::event::KeyCode::Char(
                'g',
            )),
        ));
        assert_eq!(app.seed_groups().len(), 1);
        let screen = draw(&app, 120, 40);
        assert!(screen.contains("2 runs"), "{screen}");
        assert!(screen.contains("grouped by label"), "{screen}");
        // The newest losses are 6 − 59·0.05 − 0.4 = 2.65 and 5.5 − 59·0.02 = 4.32: mean 3.485.
        assert!(screen.contains("3.49 ±"), "{screen}");
        assert!(!plot(&screen).trim().is_empty(), "a curve is drawn");
    }

    /// Issue #37: only runs 1–9 could be toggled; the legend pages by nine.
    #[test]
    fn the_legend_pages_through_any_number_of_runs() {
        let mut app = app();
        let values: Vec<f64> = (0..30).map(|i| 5.0 - i as f64 * 0.01).collect();
        app.runs = (0..12)
            .map(|i| run(&format!("r{i}"), &format!("run-{i}"), &values, 100.0))
            .collect();
        let screen = draw(&app, 120, 40);
        assert!(screen.contains("page 1 of 2 of 12 runs"), "{screen}");
        assert!(
            screen.contains("run-8") && !screen.contains("run-9 "),
            "{screen}"
        );
        let press = |app: &mut CompareApp, c: char| {
            app.apply(super::super::action_for(
                ratatui::crossterm::event::KeyEvent::from(
                    ratatui::crossterm::event::KeyCode::Char(c),
                ),
            ))
        };
        press(&mut app, ']');
        let screen = draw(&app, 120, 40);
        assert!(
            screen.contains("page 2 of 2") && screen.contains("1 #10 run-9"),
            "{screen}"
        );
        press(&mut app, '1');
        assert!(app.runs[9].hidden && !app.runs[0].hidden);
        press(&mut app, ']');
        assert_eq!(app.legend_page, 1, "no page past the last");
    }

    /// Issue #58: at 80×24 the Groups table cut its cells into other numbers (`493 124 386`
    /// for 49,353 / 124,368): every number is read back from the screen and must be the value,
    /// within the precision it shows.
    #[test]
    fn the_groups_table_at_80x24_shows_every_number_in_full_or_abbreviated() {
        let mut app = app();
        let losses: Vec<f64> = (0..60).map(|i| 6.0 - i as f64 * 0.05).collect();
        // frequent, medium, rare, total.
        let truth = [
            ("ptb-mle", [231.4, 49_353.2, 124_368.0, 1_234.56]),
            ("ptb-cos", [229.9, 44_148.0, 87_491.0, 1.234_567e112]),
        ];
        app.runs = truth
            .iter()
            .map(|(label, t)| {
                let mut r = run(label, label, &losses, t[3]);
                let rows: Vec<StoreRow> = ["frequent", "medium", "rare", "total"]
                    .iter()
                    .zip(t)
                    .map(|(g, &value)| StoreRow {
                        key: series_key(split::VALID, g, "ppl"),
                        step: 1_000,
                        wall: 3000.0,
                        value,
                    })
                    .collect();
                r.add(&rows);
                r
            })
            .collect();
        let screen = draw(&app, 80, 24);
        insta::assert_snapshot!(screen);
        // A narrow pane leaves the step out (and Uniq, I(W), IsoScore), never a group.
        let header = screen
            .lines()
            .find(|l| l.contains("│Run "))
            .unwrap_or_else(|| panic!("no Groups table: {screen}"));
        let with_step = header.contains("Step");
        for (i, (label, t)) in truth.iter().enumerate() {
            let row = screen
                .lines()
                .find_map(|l| {
                    l.split('│')
                        .find(|part| part.starts_with(&format!("{} {label} ", i + 1)))
                })
                .unwrap_or_else(|| panic!("no Groups row for {label}: {screen}"));
            let cells: Vec<&str> = row
                .split_whitespace()
                .skip(2 + usize::from(with_step))
                .collect();
            assert!(cells.len() >= 4, "{row}");
            for (cell, want) in cells[..4].iter().zip(t) {
                let shown = conelab_base::number::parse_shown(cell)
                    .unwrap_or_else(|| panic!("{cell:?} is not a number: {row}"));
                let within = conelab_base::number::shown_precision(cell).expect("finite");
                assert!(
                    (shown - want).abs() <= within * (1.0 + 1e-9),
                    "{cell:?} shown for {want}: {row}"
                );
            }
        }
    }

    /// Issue #58's property: every numeric cell of the Groups table, at 80, 120 and 200 columns,
    /// for values from 1e-30 to 1e300 (either sign), ±0, NaN and ±∞, reads back from the screen
    /// as its value within the precision it shows — never a cut.
    #[test]
    fn every_cell_of_the_groups_table_reads_back_at_three_widths() {
        use conelab_base::number::{parse_shown, shown_precision};
        let mut values = vec![0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
        let mut x = 1e-30f64;
        while x < 1e300 {
            values.extend([x * 1.234_567, -x * 4.999_96, x * 9.999_95]);
            x *= 1e7;
        }
        // Header order; a narrow pane leaves out Iso, I(W), Uniq, Step in that order.
        let all = ["Run", "Step", "F", "M", "R", "T", "Uniq", "I(W)", "Iso"];
        let metrics = [
            (split::VALID, "frequent", "ppl"),
            (split::VALID, "medium", "ppl"),
            (split::VALID, "rare", "ppl"),
            (split::VALID, "total", "ppl"),
            (split::VALID, "total", "uniq"),
            (split::EMBEDDING, "total", "i1"),
            (split::EMBEDDING, "total", "isoscore"),
        ];
        let losses: Vec<f64> = (0..10).map(|i| 5.0 - i as f64 * 0.1).collect();
        let (mut checked, mut marked) = (0, 0);
        for (w, h) in [(80u16, 24u16), (120, 40), (200, 50)] {
            for (n, chunk) in values.chunks(7).enumerate() {
                let mut app = app();
                // Two runs, each cell its own value of the sweep.
                let wants: Vec<Vec<f64>> = (0..2)
                    .map(|r| {
                        (0..7)
                            .map(|c| {
                                chunk[(c + r * 3) % chunk.len()] * if r == 1 { -1.0 } else { 1.0 }
                            })
                            .collect()
                    })
                    .collect();
                app.runs = wants
                    .iter()
                    .enumerate()
                    .map(|(r, want)| {
                        let label = format!("r{r}");
                        let mut run = run(&label, &label, &losses, 1.0);
                        let rows: Vec<StoreRow> = metrics
                            .iter()
                            .zip(want)
                            .map(|(&(split, group, metric), &value)| StoreRow {
                                key: series_key(split, group, metric),
                                step: 1_000,
                                wall: 3000.0,
                                value,
                            })
                            .collect();
                        run.add(&rows);
                        run
                    })
                    .collect();
                let screen = draw(&app, w, h);
                let table = |l: &str| l.split('│').nth(1).map(str::to_owned);
                let header = screen
                    .lines()
                    .find_map(|l| table(l).filter(|t| t.starts_with("Run ")))
                    .unwrap_or_else(|| panic!("no Groups table at {w}×{h}: {screen}"));
                let mut kept = all.to_vec();
                for leave_out in ["Iso", "I(W)", "Uniq", "Step"] {
                    if kept.len() == header.split_whitespace().count() {
                        break;
                    }
                    kept.retain(|c| *c != leave_out);
                }
                assert_eq!(kept.len(), header.split_whitespace().count(), "{header}");
                for (r, want) in wants.iter().enumerate() {
                    let row = screen
                        .lines()
                        .find_map(|l| {
                            table(l).filter(|t| t.starts_with(&format!("{} r{r} ", r + 1)))
                        })
                        .unwrap_or_else(|| panic!("no row {r} at {w}: {screen}"));
                    let cells: Vec<&str> = row.split_whitespace().skip(2).collect();
                    assert_eq!(cells.len(), kept.len() - 1, "{row}");
                    for (cell, name) in cells.iter().zip(&kept[1..]) {
                        let want = match *name {
                            "Step" => 1000.0,
                            other => {
                                want[all.iter().position(|c| *c == other).expect("a column") - 2]
                            }
                        };
                        let what = format!("{name} = {want} at {w} columns (sweep {n}): {row}");
                        let shown = parse_shown(cell).unwrap_or_else(|| {
                            // Only where no form of the value fits its column.
                            assert_eq!(*cell, "…", "{what}");
                            f64::NAN
                        });
                        if *cell == "…" {
                            marked += 1;
                            continue;
                        }
                        if want.is_nan() {
                            assert!(shown.is_nan(), "{what}");
                        } else if want.is_infinite() {
                            assert_eq!(shown, want, "{what}");
                        } else {
                            let within = shown_precision(cell).expect("finite");
                            assert!((shown - want).abs() <= within * (1.0 + 1e-9), "{what}");
                            assert!(want == 0.0 || shown != 0.0, "{what}");
                        }
                        checked += 1;
                    }
                }
            }
        }
        // `…` only in the 5-cell columns (Uniq, I(W), Iso) for values like -5e-23.
        assert!(
            checked > 500 && marked * 5 < checked,
            "{checked} read, {marked} `…`"
        );
    }

    #[test]
    fn legend_table_and_both_curves() {
        let app = app();
        let screen = draw(&app, 120, 40);
        insta::assert_snapshot!(screen);
        assert!(screen.contains("compare · 2 runs · x step · smoothing 0.60"));
        assert!(screen.contains("■ 1 mle #seed1") && screen.contains("■ 2 cosreg"));
        // The Groups table: run 2's total PPL and frequent PPL (240.5 / 2), run 1's rare.
        assert!(screen.contains("240.5") && screen.contains("120.2") && screen.contains("2250.0"));
        // Each run alone draws a curve of its own; together they draw both.
        let both = plot(&screen);
        let mut only_a = app.clone();
        only_a.runs[1].hidden = true;
        let a = plot(&draw(&only_a, 120, 40));
        let mut only_b = app.clone();
        only_b.runs[0].hidden = true;
        let b = plot(&draw(&only_b, 120, 40));
        assert!(a.trim() != "" && b.trim() != "");
        assert_ne!(a, b);
        assert_ne!(both, a);
        assert_ne!(both, b);
    }

    #[test]
    fn smoothing_changes_the_curve_and_the_raw_one_stays_faint_behind() {
        let mut app = app();
        app.smoothing = 0.0;
        let raw = draw(&app, 120, 40);
        app.smoothing = 0.9;
        let smooth = draw(&app, 120, 40);
        assert_ne!(plot(&raw), plot(&smooth));
        // The faint raw curve is drawn under the smoothed one: grey plot cells exist only with
        // smoothing on.
        let dim_cells = |app: &CompareApp| {
            let mut t = Terminal::new(TestBackend::new(120, 40)).expect("terminal");
            t.draw(|f| render(f, app)).expect("draw");
            t.backend()
                .buffer()
                .content()
                .iter()
                .filter(|c| c.fg == Color::DarkGray && plot(c.symbol()).trim() != "")
                .count()
        };
        assert!(dim_cells(&app) > 0);
        app.smoothing = 0.0;
        assert_eq!(dim_cells(&app), 0);
    }

    #[test]
    fn time_axis_log_y_hidden_runs_and_small_screens() {
        let mut app = app();
        app.x_axis = XAxis::Time;
        app.log_y = true;
        let screen = draw(&app, 80, 24);
        assert!(screen.contains("x wall time") && screen.contains("log y"));
        // 59 s between the first and the last loss row.
        assert!(screen.contains("59s"), "{screen}");
        app.runs[0].hidden = true;
        app.runs[1].hidden = true;
        let screen = draw(&app, 80, 24);
        assert!(screen.contains("every run is hidden"));
        assert!(screen.contains("□ 1"));
        assert!(draw(&app, 40, 10).contains("terminal too small"));
        // A curve nobody has yet.
        let mut app = self::app();
        app.curve = CURVES
            .iter()
            .position(|c| c.metric == "isoscore")
            .unwrap_or(0);
        assert!(draw(&app, 100, 30).contains("no IsoScore yet"));
        app.help = true;
        assert!(draw(&app, 100, 30).contains("smoothing weight up / down"));
    }
}
