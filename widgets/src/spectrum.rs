//! [`SpectrumPlot`]: positive series against their index on a log10 y axis, drawn in braille.
//!
//! Made for spectra such as normalised singular values (1.0 down to 1e-4 or below), where a linear
//! axis would hide everything but the first few values.

use std::borrow::Cow;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::Widget;

use crate::braille::{braille_bit, braille_char};
use crate::text::{put_char, put_str, text_width};

/// Largest decade exponent magnitude the y axis accepts.
const MAX_EXP: i32 = 400;

/// One named series of values; index `i` is plotted at x = `i`.
#[derive(Debug, Clone, PartialEq)]
pub struct Series<'a> {
    name: Cow<'a, str>,
    values: &'a [f64],
    style: Style,
}

impl<'a> Series<'a> {
    /// A series called `name` (shown in the legend; empty names are left out of it).
    pub fn new(name: impl Into<Cow<'a, str>>, values: &'a [f64]) -> Self {
        Self {
            name: name.into(),
            values,
            style: Style::default(),
        }
    }

    /// Style of the series' dots and legend entry.
    #[must_use]
    pub fn style(mut self, style: impl Into<Style>) -> Self {
        self.style = style.into();
        self
    }
}

/// Positive series plotted against index on a log10 y axis.
///
/// * The y axis spans whole decades, labelled `1e3 … 100, 10, 1, 0.1, 0.01, 0.001, 1e-4 …` on
///   the left (thinned evenly when there are more decades than rows). It is fixed with
///   [`SpectrumPlot::decades`] or otherwise runs from the decade below the smallest positive value
///   to the decade above the largest.
/// * The x axis runs over indices `0..n` (`n` = longest series, or [`SpectrumPlot::x_len`]), with
///   index labels at round steps.
/// * Values that are zero, negative, NaN or infinite are skipped, and the line is broken there;
///   so are values outside fixed decades.
/// * In a braille cell shared by several series the series listed last sets the colour.
/// * A legend (series names in their styles) sits in the corner of the plot that hides the fewest
///   dots, preferring top-right, then bottom-left, bottom-right, top-left.
///
/// Areas too small for axes (under 3 rows, or too narrow for the labels) get the bare plot.
#[derive(Debug, Clone, Default)]
pub struct SpectrumPlot<'a> {
    series: Vec<Series<'a>>,
    decades: Option<(i32, i32)>,
    x_len: Option<usize>,
    points_only: bool,
    hide_legend: bool,
    no_color: bool,
    axis_style: Style,
}

impl<'a> SpectrumPlot<'a> {
    /// A plot of `series` (drawn in order, later ones on top).
    pub fn new(series: impl IntoIterator<Item = Series<'a>>) -> Self {
        Self {
            series: series.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Fixes the y axis to `10^min_exp ..= 10^max_exp`; `None` (or `min_exp >= max_exp`) means
    /// automatic.
    #[must_use]
    pub fn decades(mut self, range: Option<(i32, i32)>) -> Self {
        self.decades = range;
        self
    }

    /// Fixes the x axis to indices `0..len` (values past it are not drawn); `None` means the
    /// longest series.
    #[must_use]
    pub fn x_len(mut self, len: Option<usize>) -> Self {
        self.x_len = len;
        self
    }

    /// Join consecutive values with lines (default) or draw single dots.
    #[must_use]
    pub fn lines(mut self, lines: bool) -> Self {
        self.points_only = !lines;
        self
    }

    /// Show the legend (default on).
    #[must_use]
    pub fn legend(mut self, legend: bool) -> Self {
        self.hide_legend = !legend;
        self
    }

    /// Draw without any colour or modifier.
    #[must_use]
    pub fn no_color(mut self, no_color: bool) -> Self {
        self.no_color = no_color;
        self
    }

    /// Style of the axes and their labels.
    #[must_use]
    pub fn axis_style(mut self, style: impl Into<Style>) -> Self {
        self.axis_style = style.into();
        self
    }

    fn paint(&self, style: Style) -> Style {
        crate::color::paint(self.no_color, style)
    }

    /// The decade exponents `(min, max)` of the y axis for the current data and settings.
    pub fn resolved_decades(&self) -> (i32, i32) {
        if let Some((lo, hi)) = self.decades {
            // f64 only spans about 1e-324 ..= 1e308; clamping also bounds the work per frame.
            let (lo, hi) = (lo.clamp(-MAX_EXP, MAX_EXP), hi.clamp(-MAX_EXP, MAX_EXP));
            if lo < hi {
                return (lo, hi);
            }
        }
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in self.series.iter().flat_map(|s| s.values) {
            if *v > 0.0 && v.is_finite() {
                lo = lo.min(*v);
                hi = hi.max(*v);
            }
        }
        if lo > hi {
            return (-1, 0);
        }
        let kmin = lo.log10().floor() as i32;
        let kmax = hi.log10().ceil() as i32;
        if kmin == kmax {
            (kmin - 1, kmax)
        } else {
            (kmin, kmax)
        }
    }

    fn resolved_len(&self) -> usize {
        self.x_len.unwrap_or_else(|| {
            self.series
                .iter()
                .map(|s| s.values.len())
                .max()
                .unwrap_or(0)
        })
    }
}

/// Label of the decade `10^k`: plain decimals from 0.001 to 10000, `1e{k}` beyond.
pub(crate) fn decade_label(k: i32) -> String {
    match k {
        0..=4 => format!("1{}", "0".repeat(k as usize)),
        -3..=-1 => format!("0.{}1", "0".repeat((-k - 1) as usize)),
        _ => format!("1e{k}"),
    }
}

/// Dot row (0 = top, `dots - 1` = bottom) of the positive value `v` on a log axis spanning
/// `10^kmin ..= 10^kmax`; `None` for non-positive, non-finite or out-of-range values.
pub(crate) fn log_dot(v: f64, kmin: i32, kmax: i32, dots: usize) -> Option<usize> {
    if !(v > 0.0 && v.is_finite()) || dots == 0 || kmin >= kmax {
        return None;
    }
    let t = (f64::from(kmax) - v.log10()) / f64::from(kmax - kmin);
    if !(-1e-9..=1.0 + 1e-9).contains(&t) {
        return None;
    }
    Some(((t.clamp(0.0, 1.0) * (dots - 1) as f64).round() as usize).min(dots - 1))
}

/// Decades to label and the cell row of each, top to bottom, for a plot `rows` cells high. Every
/// `step`-th decade is labelled, with the smallest step that divides the span (so both ends are
/// labelled) and keeps the labels on distinct rows; with a single row only the top decade.
pub(crate) fn decade_ticks(kmin: i32, kmax: i32, rows: usize) -> Vec<(i32, usize)> {
    if rows == 0 || kmin >= kmax {
        return Vec::new();
    }
    let dots = rows * 4;
    let row_of = |k: i32| log_dot(10f64.powi(k), kmin, kmax, dots).map(|d| d / 4);
    let span = (kmax - kmin) as usize;
    for step in (1..=span).filter(|&s| span.is_multiple_of(s)) {
        let ticks: Vec<(i32, usize)> = (0..=span)
            .step_by(step)
            .filter_map(|i| {
                let k = kmax - i as i32;
                row_of(k).map(|r| (k, r))
            })
            .collect();
        if ticks.windows(2).all(|w| w[0].1 < w[1].1) {
            return ticks;
        }
    }
    row_of(kmax).map(|r| vec![(kmax, r)]).unwrap_or_default()
}

/// Dot column of index `i` among `n` indices spread over `dots` columns.
pub(crate) fn index_dot(i: usize, n: usize, dots: usize) -> usize {
    if n <= 1 || dots == 0 {
        return 0;
    }
    ((i as f64 * (dots - 1) as f64 / (n - 1) as f64).round() as usize).min(dots - 1)
}

/// A round tick step (1, 2 or 5 × 10^k) giving at most `max_ticks` ticks over `0..n`.
pub(crate) fn index_step(n: usize, max_ticks: usize) -> usize {
    let last = n.saturating_sub(1).max(1);
    let max_ticks = max_ticks.max(1);
    let mut magnitude = 1usize;
    loop {
        for m in [1, 2, 5] {
            let step = m * magnitude;
            if last / step < max_ticks {
                return step;
            }
        }
        magnitude = match magnitude.checked_mul(10) {
            Some(m) => m,
            None => return last,
        };
    }
}

/// Sets one dot in the bit grid and gives its cell to `series`.
fn plot_dot(
    bits: &mut [u8],
    owner: &mut [Option<usize>],
    cols: usize,
    (x, y): (usize, usize),
    series: usize,
) {
    let cell = (y / 4) * cols + x / 2;
    if let (Some(b), Some(o)) = (bits.get_mut(cell), owner.get_mut(cell)) {
        *b |= braille_bit(x % 2, y % 4);
        *o = Some(series);
    }
}

/// Draws a line between two dots into the bit grid, giving every touched cell to `series`.
fn plot_line(
    bits: &mut [u8],
    owner: &mut [Option<usize>],
    cols: usize,
    from: (usize, usize),
    to: (usize, usize),
    series: usize,
) {
    // Bresenham over dot coordinates.
    let (mut x, mut y) = (from.0 as i64, from.1 as i64);
    let (x1, y1) = (to.0 as i64, to.1 as i64);
    let dx = (x1 - x).abs();
    let dy = -(y1 - y).abs();
    let sx = if x < x1 { 1 } else { -1 };
    let sy = if y < y1 { 1 } else { -1 };
    let mut err = dx + dy;
    loop {
        plot_dot(bits, owner, cols, (x as usize, y as usize), series);
        if x == x1 && y == y1 {
            break;
        }
        let e2 = 2 * err;
        if e2 >= dy {
            err += dy;
            x += sx;
        }
        if e2 <= dx {
            err += dx;
            y += sy;
        }
    }
}

impl Widget for SpectrumPlot<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        (&self).render(area, buf);
    }
}

impl Widget for &SpectrumPlot<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        if area.is_empty() {
            return;
        }
        let (kmin, kmax) = self.resolved_decades();
        let n = self.resolved_len();
        let label_w = (kmin..=kmax)
            .map(|k| decade_label(k).len())
            .max()
            .unwrap_or(1);
        let gutter = (label_w + 1) as u16;
        let with_axes = area.height >= 3 && area.width >= gutter + 2;
        let plot = if with_axes {
            Rect::new(
                area.x + gutter,
                area.y,
                area.width - gutter,
                area.height - 2,
            )
        } else {
            area
        };
        let (cols, rows) = (usize::from(plot.width), usize::from(plot.height));
        let (dots_w, dots_h) = (cols * 2, rows * 4);

        let mut bits = vec![0u8; cols * rows];
        let mut owner: Vec<Option<usize>> = vec![None; cols * rows];
        for (si, s) in self.series.iter().enumerate() {
            let mut prev: Option<(usize, usize)> = None;
            for (i, &v) in s.values.iter().enumerate().take(n) {
                let dot = log_dot(v, kmin, kmax, dots_h).map(|dy| (index_dot(i, n, dots_w), dy));
                match (prev, dot) {
                    (Some(p), Some(d)) if !self.points_only => {
                        plot_line(&mut bits, &mut owner, cols, p, d, si);
                    }
                    (_, Some(d)) => plot_dot(&mut bits, &mut owner, cols, d, si),
                    _ => {}
                }
                prev = dot;
            }
        }
        for row in 0..rows {
            for col in 0..cols {
                let cell = row * cols + col;
                if bits[cell] == 0 {
                    continue;
                }
                let style = owner[cell]
                    .and_then(|si| self.series.get(si))
                    .map_or(Style::default(), |s| s.style);
                let (x, y) = (plot.x + col as u16, plot.y + row as u16);
                put_char(buf, plot, x, y, braille_char(bits[cell]), self.paint(style));
            }
        }

        if with_axes {
            self.render_axes(area, plot, (kmin, kmax), n, label_w, buf);
        }
        if !self.hide_legend {
            self.render_legend(plot, &bits, buf);
        }
    }
}

impl SpectrumPlot<'_> {
    fn render_axes(
        &self,
        area: Rect,
        plot: Rect,
        (kmin, kmax): (i32, i32),
        n: usize,
        label_w: usize,
        buf: &mut Buffer,
    ) {
        let style = self.paint(self.axis_style);
        let axis_x = plot.x - 1;
        let axis_y = plot.bottom();
        for y in plot.top()..plot.bottom() {
            put_char(buf, area, axis_x, y, '│', style);
        }
        for (k, row) in decade_ticks(kmin, kmax, usize::from(plot.height)) {
            let y = plot.y + row as u16;
            let label = decade_label(k);
            let x = area.x + (label_w - label.len()) as u16;
            put_str(buf, area, x, y, &label, style);
            put_char(buf, area, axis_x, y, '┤', style);
        }
        put_char(buf, area, axis_x, axis_y, '└', style);
        for x in plot.left()..plot.right() {
            put_char(buf, area, x, axis_y, '─', style);
        }
        if n == 0 {
            return;
        }
        // Index labels: round steps, never overlapping, each centred under its tick.
        let cols = usize::from(plot.width);
        let widest = text_width(&(n - 1).to_string());
        let step = index_step(n, cols / (widest + 2));
        let mut next_free = plot.x;
        for i in (0..n).step_by(step) {
            let col = index_dot(i, n, cols * 2) / 2;
            let x = plot.x + col as u16;
            put_char(buf, area, x, axis_y, '┬', style);
            let label = i.to_string();
            let half = (label.len() / 2) as u16;
            let max_start = plot.right().saturating_sub(label.len() as u16);
            let start = x.saturating_sub(half).clamp(plot.x, max_start.max(plot.x));
            if start < next_free {
                continue;
            }
            next_free = put_str(buf, area, start, axis_y + 1, &label, style) + 1;
        }
    }

    fn render_legend(&self, plot: Rect, bits: &[u8], buf: &mut Buffer) {
        let named: Vec<&Series<'_>> = self.series.iter().filter(|s| !s.name.is_empty()).collect();
        let width = named.iter().map(|s| text_width(&s.name) + 3).max();
        let Some(width) = width else { return };
        let (w, h) = (width as u16 + 1, named.len() as u16);
        if w > plot.width || h > plot.height {
            return;
        }
        let (x, y) = legend_corner(plot, bits, w, h);
        // The blank column keeps the legend off the data: on its left in a right corner, on its
        // right in a left corner.
        let text_x = if x == plot.x { x } else { x + 1 };
        for (row, s) in named.iter().enumerate() {
            let y = y + row as u16;
            for col in x..x + w {
                put_char(buf, plot, col, y, ' ', Style::default());
            }
            put_str(buf, plot, text_x, y, "──", self.paint(s.style));
            put_str(buf, plot, text_x + 3, y, &s.name, self.paint(s.style));
        }
    }
}

/// Top-left corner of the `w × h` legend box: the corner of `plot` covering the fewest raised
/// braille dots, trying top-right, bottom-left, bottom-right, top-left in that order.
fn legend_corner(plot: Rect, bits: &[u8], w: u16, h: u16) -> (u16, u16) {
    let cols = usize::from(plot.width);
    let (right, bottom) = (plot.width - w, plot.height - h);
    let ink = |x0: u16, y0: u16| -> u32 {
        (y0..y0 + h)
            .flat_map(|y| (x0..x0 + w).map(move |x| usize::from(y) * cols + usize::from(x)))
            .map(|i| bits.get(i).map_or(0, |b| b.count_ones()))
            .sum()
    };
    let (x, y) = [(right, 0), (0, bottom), (right, bottom), (0, 0)]
        .into_iter()
        .min_by_key(|&(x, y)| ink(x, y))
        .unwrap_or((right, 0));
    (plot.x + x, plot.y + y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::render_text;
    use ratatui::style::Color;

    fn render(widget: &SpectrumPlot<'_>, w: u16, h: u16) -> Buffer {
        let mut buf = Buffer::empty(Rect::new(0, 0, w, h));
        widget.render(buf.area, &mut buf);
        buf
    }

    /// Two power-law-ish spectra: a healthy slow decay and a collapsed one.
    fn spectra() -> (Vec<f64>, Vec<f64>) {
        let healthy = (0..64).map(|i| 1.0 / (1.0 + i as f64).powf(0.7)).collect();
        let collapsed = (0..64)
            .map(|i| {
                if i == 0 {
                    1.0
                } else {
                    0.05 * (-(i as f64) / 6.0).exp()
                }
            })
            .collect();
        (healthy, collapsed)
    }

    #[test]
    fn decade_labels() {
        assert_eq!(decade_label(0), "1");
        assert_eq!(decade_label(-1), "0.1");
        assert_eq!(decade_label(-2), "0.01");
        assert_eq!(decade_label(-3), "0.001");
        assert_eq!(decade_label(-4), "1e-4");
        assert_eq!(decade_label(2), "100");
        assert_eq!(decade_label(5), "1e5");
    }

    #[test]
    fn log_axis_places_values() {
        // 1 .. 1e-4 over 5 rows = 20 dots: 4 decades over 19 dot steps.
        assert_eq!(log_dot(1.0, -4, 0, 20), Some(0));
        assert_eq!(log_dot(1e-4, -4, 0, 20), Some(19));
        assert_eq!(log_dot(1e-2, -4, 0, 20), Some(10)); // 9.5 rounds up
        assert_eq!(log_dot(10f64.powf(-0.5), -1, 0, 9), Some(4)); // half a decade, mid-axis
        assert_eq!(log_dot(0.0, -4, 0, 20), None);
        assert_eq!(log_dot(-1.0, -4, 0, 20), None);
        assert_eq!(log_dot(f64::NAN, -4, 0, 20), None);
        assert_eq!(log_dot(10.0, -4, 0, 20), None);
        assert_eq!(log_dot(1e-5, -4, 0, 20), None);
    }

    #[test]
    fn decade_ticks_known_values() {
        // 5 decades on 5 rows: rows of dots 0, 4.75, 9.5, 14.25, 19 → 0, 1, 2, 3, 4.
        assert_eq!(
            decade_ticks(-4, 0, 5),
            vec![(0, 0), (-1, 1), (-2, 2), (-3, 3), (-4, 4)]
        );
        // 9 decades on 3 rows: every 4th decade fits.
        assert_eq!(decade_ticks(-8, 0, 3), vec![(0, 0), (-4, 1), (-8, 2)]);
        // One row: only the top decade.
        assert_eq!(decade_ticks(-4, 0, 1), vec![(0, 0)]);
        assert!(decade_ticks(0, 0, 5).is_empty());
        assert!(decade_ticks(-4, 0, 0).is_empty());
    }

    #[test]
    fn auto_decades() {
        let v = [1.0, 0.5, 0.003];
        let p = SpectrumPlot::new([Series::new("a", &v)]);
        assert_eq!(p.resolved_decades(), (-3, 0));
        let v = [1.0, 1.0];
        assert_eq!(
            SpectrumPlot::new([Series::new("a", &v)]).resolved_decades(),
            (-1, 0)
        );
        let v = [0.0, -1.0, f64::NAN, f64::INFINITY];
        assert_eq!(
            SpectrumPlot::new([Series::new("a", &v)]).resolved_decades(),
            (-1, 0)
        );
        let p = SpectrumPlot::new([]).decades(Some((-6, 0)));
        assert_eq!(p.resolved_decades(), (-6, 0));
        let p = SpectrumPlot::new([]).decades(Some((0, 0)));
        assert_eq!(p.resolved_decades(), (-1, 0));
        let p = SpectrumPlot::new([]).decades(Some((i32::MIN, i32::MAX)));
        assert_eq!(p.resolved_decades(), (-400, 400));
    }

    #[test]
    fn index_ticks() {
        assert_eq!(index_step(64, 5), 20);
        assert_eq!(index_step(11, 10), 2);
        assert_eq!(index_step(11, 11), 1);
        assert_eq!(index_step(1, 3), 1);
        assert!(index_step(0, 0) >= 1);
        assert_eq!(index_dot(0, 10, 20), 0);
        assert_eq!(index_dot(9, 10, 20), 19);
        assert_eq!(index_dot(0, 1, 20), 0);
    }

    #[test]
    fn edge_cases_do_not_panic() {
        let (a, b) = spectra();
        let bad = [
            f64::NAN,
            0.0,
            -1.0,
            f64::INFINITY,
            1e-300,
            f64::MIN_POSITIVE,
            5e-324,
        ];
        let one = [0.5];
        let empty: [f64; 0] = [];
        for data in [&a[..], &b[..], &bad[..], &one[..], &empty[..]] {
            for w in 0..5 {
                for h in 0..5 {
                    let p = SpectrumPlot::new([Series::new("x", data), Series::new("", &b)]);
                    let _ = render(&p, w, h);
                    let _ = render(&p.clone().decades(Some((-2, 0))).x_len(Some(3)), w, h);
                }
            }
        }
        let _ = render(&SpectrumPlot::new([]), 40, 12);
        let huge = SpectrumPlot::new([Series::new("a", &a)]).decades(Some((i32::MIN, i32::MAX)));
        let _ = render(&huge, 40, 12);
    }

    #[test]
    fn one_point_series() {
        let v = [0.1];
        let p = SpectrumPlot::new([Series::new("", &v)]).decades(Some((-2, 0)));
        let buf = render(&p, 20, 6);
        // Plot rows 0..4 (16 dots): 0.1 is mid-axis → dot 7.5 → 8 → row 2; index 0 → column 0.
        let gutter = "0.01".len() as u16 + 1;
        assert_eq!(buf[(gutter, 2)].symbol(), "⠁");
        assert_eq!(buf[(gutter - 1, 0)].symbol(), "┤");
        assert_eq!(buf[(gutter - 1, 2)].symbol(), "┤");
        assert_eq!(buf[(gutter - 1, 3)].symbol(), "┤");
    }

    #[test]
    fn snapshot_small() {
        let (a, b) = spectra();
        let p = SpectrumPlot::new([
            Series::new("healthy", &a).style(Color::Green),
            Series::new("collapsed", &b).style(Color::Red),
        ]);
        insta::assert_snapshot!(render_text(&render(&p, 40, 12)));
    }

    #[test]
    fn snapshot_large() {
        let (a, b) = spectra();
        let p = SpectrumPlot::new([
            Series::new("healthy", &a).style(Color::Green),
            Series::new("collapsed", &b).style(Color::Red),
        ])
        .decades(Some((-6, 0)))
        .axis_style(Color::DarkGray);
        insta::assert_snapshot!(render_text(&render(&p, 100, 30)));
    }

    #[test]
    fn snapshot_points_no_color() {
        let (a, _) = spectra();
        let p = SpectrumPlot::new([Series::new("healthy", &a).style(Color::Green)])
            .lines(false)
            .no_color(true);
        insta::assert_snapshot!(render_text(&render(&p, 40, 12)));
    }
}
