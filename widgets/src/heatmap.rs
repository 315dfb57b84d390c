//! [`HeatMap`]: a 2-D histogram drawn as shaded cells, with axis titles and min/max labels.
//!
//! Made for joint histograms such as (entropy, log Z), where a scatter of thousands of points would
//! saturate but bin counts stay readable.

use std::borrow::Cow;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::widgets::Widget;

use crate::number::format_compact;
use crate::text::{put_char, put_str, text_width};

/// Default shading ramp, empty to full.
const DEFAULT_GLYPHS: [char; 5] = [' ', '░', '▒', '▓', '█'];

/// How values map onto the shading ramp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeatMapScale {
    /// Shade in proportion to `value / max`.
    #[default]
    Linear,
    /// Shade in proportion to `ln(1 + value) / ln(1 + max)`, so that bins with a few counts stay
    /// visible next to a dense peak. Meant for counts.
    Log,
}

#[derive(Debug, Clone, Copy)]
enum HeatData<'a> {
    Values(&'a [f64]),
    Counts(&'a [u64]),
}

impl HeatData<'_> {
    fn len(&self) -> usize {
        match self {
            Self::Values(v) => v.len(),
            Self::Counts(c) => c.len(),
        }
    }

    fn get(&self, i: usize) -> f64 {
        match self {
            Self::Values(v) => v.get(i).copied().unwrap_or(f64::NAN),
            Self::Counts(c) => c.get(i).map_or(f64::NAN, |&n| n as f64),
        }
    }
}

/// A `rows × cols` grid of non-negative values (row-major, row 0 at the **bottom**, like a plot's
/// y axis) drawn as shaded cells.
///
/// * Each terminal cell shows the mean of the bins it covers (NaN bins ignored), so grids larger or
///   smaller than the area are resampled without stripes; a bin smaller than a cell is averaged in,
///   a bin larger than a cell fills several.
/// * Shading runs from blank (zero, negative, NaN or missing) through the glyph ramp (default
///   ` ░▒▓█`) up to the maximum cell value, or [`HeatMap::max_value`] for a scale that stays put
///   between frames. Any positive value gets at least the first visible glyph. An optional colour
///   ramp colours the same levels.
/// * The left gutter shows the y range (max at the top, min at the bottom), the bottom row the x
///   range with the x title centred; a y title goes on the top row. Ranges default to bin indices
///   (`0..cols`, `0..rows`).
///
/// Areas too small for axes (under 3 rows, or too narrow for the labels) get the bare cells.
#[derive(Debug, Clone)]
pub struct HeatMap<'a> {
    data: HeatData<'a>,
    rows: usize,
    cols: usize,
    scale: HeatMapScale,
    max_value: Option<f64>,
    glyphs: Vec<char>,
    colors: Vec<Color>,
    x_range: Option<(f64, f64)>,
    y_range: Option<(f64, f64)>,
    x_title: Cow<'a, str>,
    y_title: Cow<'a, str>,
    no_color: bool,
    style: Style,
    axis_style: Style,
}

impl<'a> HeatMap<'a> {
    /// A heat map of `rows × cols` f64 values, row-major, row 0 at the bottom. Missing values (a
    /// short slice) count as empty.
    pub fn new(values: &'a [f64], rows: usize, cols: usize) -> Self {
        Self::with_data(HeatData::Values(values), rows, cols)
    }

    /// A heat map of `rows × cols` counts, row-major, row 0 at the bottom.
    pub fn from_counts(counts: &'a [u64], rows: usize, cols: usize) -> Self {
        Self::with_data(HeatData::Counts(counts), rows, cols)
    }

    fn with_data(data: HeatData<'a>, rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            scale: HeatMapScale::Linear,
            max_value: None,
            glyphs: DEFAULT_GLYPHS.to_vec(),
            colors: Vec::new(),
            x_range: None,
            y_range: None,
            x_title: Cow::Borrowed(""),
            y_title: Cow::Borrowed(""),
            no_color: false,
            style: Style::default(),
            axis_style: Style::default(),
        }
    }

    /// Linear (default) or log shading.
    #[must_use]
    pub fn scale(mut self, scale: HeatMapScale) -> Self {
        self.scale = scale;
        self
    }

    /// Value shaded as full; `None` (or a non-positive / non-finite value) means the maximum cell.
    #[must_use]
    pub fn max_value(mut self, max: Option<f64>) -> Self {
        self.max_value = max;
        self
    }

    /// Shading glyphs, empty first (default `" ░▒▓█"`). Ignored with fewer than two characters.
    #[must_use]
    pub fn glyphs(mut self, glyphs: &str) -> Self {
        let g: Vec<char> = glyphs.chars().collect();
        if g.len() >= 2 {
            self.glyphs = g;
        }
        self
    }

    /// Colours for the non-empty levels, low to high (spread over the levels when the counts
    /// differ). Empty (default) means the base style only.
    #[must_use]
    pub fn colors(mut self, colors: impl IntoIterator<Item = Color>) -> Self {
        self.colors = colors.into_iter().collect();
        self
    }

    /// Values at the left and right edges of the x axis (labels only).
    #[must_use]
    pub fn x_range(mut self, min: f64, max: f64) -> Self {
        self.x_range = Some((min, max));
        self
    }

    /// Values at the bottom and top edges of the y axis (labels only).
    #[must_use]
    pub fn y_range(mut self, min: f64, max: f64) -> Self {
        self.y_range = Some((min, max));
        self
    }

    /// Title of the x axis, centred on the bottom row.
    #[must_use]
    pub fn x_title(mut self, title: impl Into<Cow<'a, str>>) -> Self {
        self.x_title = title.into();
        self
    }

    /// Title of the y axis, on the top row.
    #[must_use]
    pub fn y_title(mut self, title: impl Into<Cow<'a, str>>) -> Self {
        self.y_title = title.into();
        self
    }

    /// Draw without any colour or modifier.
    #[must_use]
    pub fn no_color(mut self, no_color: bool) -> Self {
        self.no_color = no_color;
        self
    }

    /// Base style of the shaded cells.
    #[must_use]
    pub fn style(mut self, style: impl Into<Style>) -> Self {
        self.style = style.into();
        self
    }

    /// Style of the axis labels, titles and line.
    #[must_use]
    pub fn axis_style(mut self, style: impl Into<Style>) -> Self {
        self.axis_style = style.into();
        self
    }

    fn paint(&self, style: Style) -> Style {
        crate::color::paint(self.no_color, style)
    }

    /// Mean of the finite bins under cell (`cx`, `cy`) of a `w × h` plot (`cy` = 0 at the top).
    fn cell_value(&self, cx: usize, cy: usize, w: usize, h: usize) -> f64 {
        let (c0, c1) = span(cx, w, self.cols);
        let (r0, r1) = span(h - 1 - cy, h, self.rows);
        let (mut sum, mut n) = (0.0, 0usize);
        for r in r0..r1 {
            let Some(base) = r.checked_mul(self.cols).filter(|&b| b < self.data.len()) else {
                break;
            };
            // `base < len`, so neither the bound nor `base + c` can overflow.
            for c in c0..c1.min(self.data.len() - base) {
                let v = self.data.get(base + c);
                if v.is_finite() {
                    sum += v;
                    n += 1;
                }
            }
        }
        if n == 0 { f64::NAN } else { sum / n as f64 }
    }
}

/// Bins `lo..hi` out of `bins` covered by cell `i` of `cells`; always at least one bin when
/// `bins > 0`.
pub(crate) fn span(i: usize, cells: usize, bins: usize) -> (usize, usize) {
    if cells == 0 || bins == 0 {
        return (0, 0);
    }
    let edge = |i: usize| (i as u128 * bins as u128 / cells as u128) as usize;
    let lo = edge(i).min(bins - 1);
    let hi = edge(i + 1).clamp(lo + 1, bins);
    (lo, hi)
}

/// Shading level `0..levels` of `v` against `max`: 0 for empty (non-positive, NaN), otherwise
/// `ceil(t × (levels − 1))` clamped to `1..levels`, with `t` the linear or log fraction of `max`.
pub(crate) fn bucket(v: f64, max: f64, levels: usize, scale: HeatMapScale) -> usize {
    if levels < 2 || !v.is_finite() || v <= 0.0 || !max.is_finite() || max <= 0.0 {
        return 0;
    }
    let t = match scale {
        HeatMapScale::Linear => v / max,
        HeatMapScale::Log => v.ln_1p() / max.ln_1p(),
    };
    let top = levels - 1;
    ((t.clamp(0.0, 1.0) * top as f64).ceil() as usize).clamp(1, top)
}

/// Index into a ramp of `n_colors` for shading `level` (1-based) out of `levels`.
fn color_index(level: usize, levels: usize, n_colors: usize) -> usize {
    if n_colors <= 1 || levels <= 2 {
        return n_colors.saturating_sub(1);
    }
    let t = (level - 1) as f64 / (levels - 2) as f64;
    ((t * (n_colors - 1) as f64).round() as usize).min(n_colors - 1)
}

impl Widget for HeatMap<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        (&self).render(area, buf);
    }
}

impl Widget for &HeatMap<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        if area.is_empty() {
            return;
        }
        let (y_min, y_max) = self.y_range.unwrap_or((0.0, self.rows as f64));
        let (x_min, x_max) = self.x_range.unwrap_or((0.0, self.cols as f64));
        let (y_min, y_max) = (format_compact(y_min), format_compact(y_max));
        let gutter = (text_width(&y_min).max(text_width(&y_max)) + 1) as u16;
        let with_axes = area.height >= 3 && area.width >= gutter + 2;
        let title_row = with_axes && !self.y_title.is_empty() && area.height >= 4;
        let plot = if with_axes {
            let top = u16::from(title_row);
            Rect::new(
                area.x + gutter,
                area.y + top,
                area.width - gutter,
                area.height - 1 - top,
            )
        } else {
            area
        };

        let (w, h) = (usize::from(plot.width), usize::from(plot.height));
        let mut cells = Vec::with_capacity(w * h);
        for cy in 0..h {
            for cx in 0..w {
                cells.push(self.cell_value(cx, cy, w, h));
            }
        }
        let max = self
            .max_value
            .filter(|m| m.is_finite() && *m > 0.0)
            .unwrap_or_else(|| {
                cells
                    .iter()
                    .copied()
                    .filter(|v| v.is_finite())
                    .fold(0.0, f64::max)
            });
        let levels = self.glyphs.len();
        for (i, &v) in cells.iter().enumerate() {
            let level = bucket(v, max, levels, self.scale);
            if level == 0 {
                continue;
            }
            let mut style = self.style;
            if !self.colors.is_empty() {
                style = style.fg(self.colors[color_index(level, levels, self.colors.len())]);
            }
            let (x, y) = (plot.x + (i % w) as u16, plot.y + (i / w) as u16);
            put_char(buf, plot, x, y, self.glyphs[level], self.paint(style));
        }

        if !with_axes {
            return;
        }
        let style = self.paint(self.axis_style);
        if title_row {
            put_str(buf, area, area.x, area.y, &self.y_title, style);
        }
        let axis_x = plot.x - 1;
        for y in plot.top()..plot.bottom() {
            put_char(buf, area, axis_x, y, '│', style);
        }
        let right_align = |s: &str| area.x + (usize::from(gutter - 1) - text_width(s)) as u16;
        put_str(buf, area, right_align(&y_max), plot.y, &y_max, style);
        if plot.height > 1 {
            put_str(
                buf,
                area,
                right_align(&y_min),
                plot.bottom() - 1,
                &y_min,
                style,
            );
        }

        // Bottom row: x min flush left, x max flush right, title centred in the gap.
        let y = plot.bottom();
        let (x_min, x_max) = (format_compact(x_min), format_compact(x_max));
        let min_end = put_str(buf, area, plot.x, y, &x_min, style);
        let max_w = text_width(&x_max) as u16;
        let max_start = plot.right().saturating_sub(max_w);
        if max_start > min_end {
            put_str(buf, area, max_start, y, &x_max, style);
        }
        let title_w = text_width(&self.x_title) as u16;
        let gap_lo = min_end + 1;
        let gap_hi = max_start.saturating_sub(1);
        if title_w > 0 && gap_hi >= gap_lo + title_w {
            let centre = plot.x + plot.width / 2;
            let start = centre
                .saturating_sub(title_w / 2)
                .clamp(gap_lo, gap_hi - title_w);
            put_str(buf, area, start, y, &self.x_title, style);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::render_text;

    fn render(widget: &HeatMap<'_>, w: u16, h: u16) -> Buffer {
        let mut buf = Buffer::empty(Rect::new(0, 0, w, h));
        widget.render(buf.area, &mut buf);
        buf
    }

    /// A 16×24 histogram of a tilted ridge with a long tail: a stand-in for (entropy, log Z).
    fn fixture() -> Vec<u64> {
        let (rows, cols) = (16usize, 24usize);
        let mut counts = vec![0u64; rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                let ridge = r as f64 - 0.55 * c as f64 - 1.0;
                let v = 400.0 * (-(ridge * ridge) / 3.0).exp() * (-(c as f64) / 10.0).exp();
                counts[r * cols + c] = v as u64;
            }
        }
        counts
    }

    #[test]
    fn buckets_known_counts() {
        // Linear, 5 glyphs (4 visible levels), max 100.
        let lin = |v| bucket(v, 100.0, 5, HeatMapScale::Linear);
        assert_eq!(lin(0.0), 0);
        assert_eq!(lin(1.0), 1);
        assert_eq!(lin(25.0), 1);
        assert_eq!(lin(26.0), 2);
        assert_eq!(lin(50.0), 2);
        assert_eq!(lin(75.0), 3);
        assert_eq!(lin(100.0), 4);
        assert_eq!(lin(1000.0), 4);
        assert_eq!(lin(-3.0), 0);
        assert_eq!(lin(f64::NAN), 0);
        assert_eq!(lin(f64::INFINITY), 0);
        // Log: ln(1 + 10) / ln(1 + 100) = 0.52 → ceil(2.08) = 3; a single count stays visible.
        let log = |v| bucket(v, 100.0, 5, HeatMapScale::Log);
        assert_eq!(log(1.0), 1);
        assert_eq!(log(10.0), 3);
        assert_eq!(log(100.0), 4);
        // Degenerate maxima.
        assert_eq!(bucket(1.0, 0.0, 5, HeatMapScale::Linear), 0);
        assert_eq!(bucket(1.0, f64::NAN, 5, HeatMapScale::Linear), 0);
        assert_eq!(bucket(1.0, 1.0, 1, HeatMapScale::Linear), 0);
    }

    #[test]
    fn resampling_spans() {
        // Downsampling 7 bins into 3 cells.
        assert_eq!(span(0, 3, 7), (0, 2));
        assert_eq!(span(1, 3, 7), (2, 4));
        assert_eq!(span(2, 3, 7), (4, 7));
        // Upsampling 2 bins into 4 cells.
        assert_eq!(span(0, 4, 2), (0, 1));
        assert_eq!(span(1, 4, 2), (0, 1));
        assert_eq!(span(2, 4, 2), (1, 2));
        assert_eq!(span(3, 4, 2), (1, 2));
        assert_eq!(span(0, 0, 2), (0, 0));
        assert_eq!(span(0, 3, 0), (0, 0));
    }

    #[test]
    fn cells_average_their_bins_and_row_zero_is_bottom() {
        // 2 rows × 2 cols drawn 1:1, no axes (height 2).
        let v = [4.0, 0.0, 0.0, 2.0];
        let buf = render(&HeatMap::new(&v, 2, 2), 2, 2);
        // Row 0 (bottom): 4 then 0. Row 1 (top): 0 then 2 (half of max → '▒').
        assert_eq!(buf[(0, 1)].symbol(), "█");
        assert_eq!(buf[(1, 1)].symbol(), " ");
        assert_eq!(buf[(1, 0)].symbol(), "▒");
        // One cell averages all four bins: the only cell is the max.
        let buf = render(&HeatMap::new(&v, 2, 2), 1, 1);
        assert_eq!(buf[(0, 0)].symbol(), "█");
    }

    #[test]
    fn colour_ramp_spreads_over_levels() {
        assert_eq!(color_index(1, 5, 5), 0);
        assert_eq!(color_index(4, 5, 5), 4);
        assert_eq!(color_index(2, 5, 3), 1);
        assert_eq!(color_index(1, 2, 3), 2);
    }

    #[test]
    fn edge_cases_do_not_panic() {
        let counts = fixture();
        let bad = [f64::NAN, f64::INFINITY, -1.0, f64::MAX, 0.0, 1e-300];
        for w in 0..6 {
            for h in 0..6 {
                let _ = render(&HeatMap::from_counts(&counts, 16, 24).y_title("y"), w, h);
                let _ = render(&HeatMap::new(&bad, 2, 3).scale(HeatMapScale::Log), w, h);
                let _ = render(&HeatMap::new(&bad, 5, 5), w, h); // slice too short
                let _ = render(&HeatMap::new(&[], 0, 0).x_title("x").y_title("y"), w, h);
                let _ = render(&HeatMap::new(&bad, 0, 7), w, h);
                let _ = render(&HeatMap::new(&bad, usize::MAX, usize::MAX), w, h);
                let _ = render(&HeatMap::new(&bad, 1, usize::MAX), w, h);
                let _ = render(
                    &HeatMap::new(&bad, 2, 3)
                        .x_range(f64::NAN, f64::INFINITY)
                        .y_range(-1e300, 1e300)
                        .max_value(Some(f64::NAN))
                        .colors([Color::Red]),
                    w,
                    h,
                );
            }
        }
    }

    fn titled(counts: &[u64]) -> HeatMap<'_> {
        HeatMap::from_counts(counts, 16, 24)
            .x_range(0.0, 6.93)
            .y_range(-2.5, 14.0)
            .x_title("entropy")
            .y_title("log Z")
    }

    #[test]
    fn snapshot_small() {
        let counts = fixture();
        insta::assert_snapshot!(render_text(&render(&titled(&counts), 40, 12)));
    }

    #[test]
    fn snapshot_large_log_colour() {
        let counts = fixture();
        let map = titled(&counts)
            .scale(HeatMapScale::Log)
            .colors([Color::Blue, Color::Cyan, Color::Yellow, Color::Red])
            .axis_style(Color::DarkGray);
        insta::assert_snapshot!(render_text(&render(&map, 100, 30)));
    }
}
