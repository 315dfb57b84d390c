//! [`Scatter`]: a layered 2-D scatter plot in braille (2×4 dots per cell) or plain ASCII.
//!
//! Built for tens of thousands of points: every render bins the points into one grid of per-cell,
//! per-layer counts (a single `Vec`, no per-point allocation) and then writes each terminal cell
//! once.

use std::borrow::Cow;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::Widget;

use crate::braille::{braille_bit, braille_char};
use crate::text::{put_char, put_str};

/// One point: `(x, y, layer)`. `layer` indexes the scatter's [`Layer`] list; points whose layer
/// has no entry are still drawn, in the widget's base style, and are left out of the legend.
pub type ScatterPoint = (f64, f64, u8);

/// How points are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScatterMode {
    /// Unicode braille: each terminal cell is a 2×4 grid of dots (U+2800..U+28FF).
    #[default]
    Braille,
    /// One character per cell, for terminals or fonts without braille. In colour, the glyph shows
    /// density (`.:+*#`, log-scaled against the densest cell); with `no_color` it shows the
    /// winning layer's [`Layer::glyph`].
    Ascii,
}

/// How a cell's colour is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScatterColoring {
    /// The cell takes the style of one layer, see [`Scatter`] for the rule.
    #[default]
    Layers,
    /// The cell is coloured by how many points (of any layer) fall in it, on a log scale against
    /// the densest cell: blue, cyan, green, yellow, red.
    Density,
}

/// Colours of [`ScatterColoring::Density`], sparse to dense.
const DENSITY_RAMP: [Color; 5] = [
    Color::Blue,
    Color::Cyan,
    Color::Green,
    Color::Yellow,
    Color::Red,
];

/// ASCII density glyphs, sparse to dense.
const ASCII_RAMP: [char; 5] = ['.', ':', '+', '*', '#'];

/// Default per-layer glyphs for ASCII `no_color` mode, by layer index (cycled).
const LAYER_GLYPHS: [char; 8] = ['o', '+', 'x', '*', '#', '%', '&', '='];

/// Highlight marker in braille mode.
const HIGHLIGHT_BRAILLE: char = '◉';
/// Highlight marker in ASCII mode.
const HIGHLIGHT_ASCII: char = '@';

/// A named group of points with its own style.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer<'a> {
    name: Cow<'a, str>,
    style: Style,
    glyph: Option<char>,
    priority: u8,
}

impl<'a> Layer<'a> {
    /// A layer called `name` drawn in `style` (usually just a foreground colour), priority 0.
    pub fn new(name: impl Into<Cow<'a, str>>, style: impl Into<Style>) -> Self {
        Self {
            name: name.into(),
            style: style.into(),
            glyph: None,
            priority: 0,
        }
    }

    /// Glyph for this layer in ASCII `no_color` mode, where glyphs are the only way to tell
    /// layers apart. Defaults to `o + x * # % & =` by layer index.
    #[must_use]
    pub fn glyph(mut self, glyph: char) -> Self {
        self.glyph = Some(glyph);
        self
    }

    /// Priority in colour clashes: in a cell holding points of several layers, the layer with the
    /// highest priority wins regardless of point counts (default 0, so the majority wins). Use it
    /// to keep a small group, e.g. rare tokens, visible on top of a dense one.
    #[must_use]
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }
}

/// A 2-D scatter plot of layered points.
///
/// # Colour clashes
///
/// A terminal cell has one foreground colour, but a braille cell holds up to eight dots that may
/// come from different layers. The dots drawn are always the union of all layers; the colour is
/// resolved per cell: **the layer with the highest [`Layer::priority`] among those present wins;
/// between equal priorities the layer with the most points in the cell wins; remaining ties go to
/// the layer listed first.** With default priorities that is simply the majority layer.
///
/// # Bounds
///
/// Each axis is fixed by [`Scatter::x_bounds`] / [`Scatter::y_bounds`] (stable axes while
/// scrubbing through time; points outside are not drawn), or otherwise taken from the finite
/// points plus a margin (default 5% per side). Points with a NaN or infinite coordinate are always
/// skipped. If all points share a coordinate the axis is widened around it; with no finite points
/// the axis is `-1..1`.
///
/// # Extras
///
/// * a highlighted point (by index) is drawn on top as `◉` (braille) or `@` (ASCII);
/// * an optional one-line legend along the bottom lists each layer with its colour and the number
///   of points plotted;
/// * `no_color` drops every colour (for `NO_COLOR`, see [`crate::no_color_from_env`]): ASCII mode
///   then draws each layer with its own glyph; braille mode can only draw dots.
#[derive(Debug, Clone)]
pub struct Scatter<'a> {
    points: &'a [ScatterPoint],
    layers: Vec<Layer<'a>>,
    mode: ScatterMode,
    coloring: ScatterColoring,
    x_bounds: Option<[f64; 2]>,
    y_bounds: Option<[f64; 2]>,
    margin: f64,
    highlight: Option<usize>,
    highlight_style: Option<Style>,
    legend: bool,
    no_color: bool,
    style: Style,
}

impl<'a> Scatter<'a> {
    /// A braille scatter of `points` with automatic bounds, no layers defined yet, no legend.
    pub fn new(points: &'a [ScatterPoint]) -> Self {
        Self {
            points,
            layers: Vec::new(),
            mode: ScatterMode::Braille,
            coloring: ScatterColoring::Layers,
            x_bounds: None,
            y_bounds: None,
            margin: 0.05,
            highlight: None,
            highlight_style: None,
            legend: false,
            no_color: false,
            style: Style::default(),
        }
    }

    /// The layers, indexed by the points' `layer` field.
    #[must_use]
    pub fn layers(mut self, layers: impl IntoIterator<Item = Layer<'a>>) -> Self {
        self.layers = layers.into_iter().collect();
        self
    }

    /// Braille (default) or ASCII drawing.
    #[must_use]
    pub fn mode(mut self, mode: ScatterMode) -> Self {
        self.mode = mode;
        self
    }

    /// Colour by layer (default) or by density.
    #[must_use]
    pub fn coloring(mut self, coloring: ScatterColoring) -> Self {
        self.coloring = coloring;
        self
    }

    /// Fixes the x axis to `[min, max]`; `None` (or an invalid range) means automatic.
    #[must_use]
    pub fn x_bounds(mut self, bounds: Option<[f64; 2]>) -> Self {
        self.x_bounds = bounds;
        self
    }

    /// Fixes the y axis to `[min, max]`; `None` (or an invalid range) means automatic.
    #[must_use]
    pub fn y_bounds(mut self, bounds: Option<[f64; 2]>) -> Self {
        self.y_bounds = bounds;
        self
    }

    /// Margin added on each side of automatic bounds, as a fraction of the data span (default
    /// 0.05). Negative or non-finite values count as 0.
    #[must_use]
    pub fn margin(mut self, margin: f64) -> Self {
        self.margin = margin;
        self
    }

    /// Index into the points of one point to mark on top of everything else.
    #[must_use]
    pub fn highlight(mut self, index: Option<usize>) -> Self {
        self.highlight = index;
        self
    }

    /// Style of the highlight marker (default: the point's layer style, bold).
    #[must_use]
    pub fn highlight_style(mut self, style: impl Into<Style>) -> Self {
        self.highlight_style = Some(style.into());
        self
    }

    /// Whether to draw the legend on the bottom row (default off).
    #[must_use]
    pub fn legend(mut self, legend: bool) -> Self {
        self.legend = legend;
        self
    }

    /// Draw without any colour or modifier.
    #[must_use]
    pub fn no_color(mut self, no_color: bool) -> Self {
        self.no_color = no_color;
        self
    }

    /// Base style applied to the whole area first (also used for points of unlisted layers).
    #[must_use]
    pub fn style(mut self, style: impl Into<Style>) -> Self {
        self.style = style.into();
        self
    }

    fn paint(&self, style: Style) -> Style {
        crate::color::paint(self.no_color, style)
    }

    fn layer_style(&self, layer: usize) -> Style {
        self.layers.get(layer).map_or(self.style, |l| l.style)
    }

    fn layer_glyph(&self, layer: usize) -> char {
        match self.layers.get(layer) {
            Some(l) => l.glyph.unwrap_or(LAYER_GLYPHS[layer % LAYER_GLYPHS.len()]),
            None => '.',
        }
    }

    /// The plotting window `(x_min, x_max, y_min, y_max)` for the current data and settings.
    pub fn resolved_bounds(&self) -> [f64; 4] {
        let fixed_x = self.x_bounds.filter(|b| valid_range(*b));
        let fixed_y = self.y_bounds.filter(|b| valid_range(*b));
        let margin = if self.margin.is_finite() {
            self.margin.max(0.0)
        } else {
            0.0
        };
        let (mut x_lo, mut x_hi, mut y_lo, mut y_hi) = (
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
        );
        if fixed_x.is_none() || fixed_y.is_none() {
            for &(x, y, _) in self.points {
                if x.is_finite() && y.is_finite() {
                    x_lo = x_lo.min(x);
                    x_hi = x_hi.max(x);
                    y_lo = y_lo.min(y);
                    y_hi = y_hi.max(y);
                }
            }
        }
        let [x0, x1] = fixed_x.unwrap_or_else(|| auto_range(x_lo, x_hi, margin));
        let [y0, y1] = fixed_y.unwrap_or_else(|| auto_range(y_lo, y_hi, margin));
        [x0, x1, y0, y1]
    }
}

fn valid_range([lo, hi]: [f64; 2]) -> bool {
    lo.is_finite() && hi.is_finite() && lo < hi && (hi - lo).is_finite()
}

/// Padded range around `[min, max]` (both ±inf when there is no data).
pub(crate) fn auto_range(min: f64, max: f64, margin: f64) -> [f64; 2] {
    if !(min.is_finite() && max.is_finite()) || min > max {
        return [-1.0, 1.0];
    }
    let span = max - min;
    if !span.is_finite() {
        return [min, max];
    }
    if span > 0.0 {
        let pad = span * margin;
        let (lo, hi) = (min - pad, max + pad);
        if lo.is_finite() && hi.is_finite() && (hi - lo).is_finite() {
            return [lo, hi];
        }
        return [min, max];
    }
    // All values equal: centre them in a window of ±10% (or ±1 around zero).
    let half = if min == 0.0 { 1.0 } else { min.abs() * 0.1 };
    [min - half, max + half]
}

/// Index (0..n) of the bin holding `v` on an axis from `lo` to `hi` split into `n` bins; `None`
/// outside the axis or for non-finite `v`. With `flip` the first bin is at `hi` (screen rows run
/// top-down while y runs upwards).
pub(crate) fn bin_of(v: f64, lo: f64, hi: f64, n: usize, flip: bool) -> Option<usize> {
    if !v.is_finite() || n == 0 {
        return None;
    }
    let t = if flip {
        (hi - v) / (hi - lo)
    } else {
        (v - lo) / (hi - lo)
    };
    if !(0.0..=1.0).contains(&t) {
        return None;
    }
    // `as` saturates, and t ≤ 1 maps the top edge into the last bin.
    Some(((t * n as f64) as usize).min(n - 1))
}

/// Layer that colours a cell with per-layer `counts`, see [`Scatter`] for the rule.
pub(crate) fn resolve_layer(counts: &[u32], priorities: &[u8]) -> Option<usize> {
    let mut best: Option<(usize, u8, u32)> = None;
    for (i, &c) in counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let p = priorities.get(i).copied().unwrap_or(0);
        match best {
            Some((_, bp, bc)) if p < bp || (p == bp && c <= bc) => {}
            _ => best = Some((i, p, c)),
        }
    }
    best.map(|(i, _, _)| i)
}

/// Density level `0..levels` of a cell with `count` points when the densest cell has `max`: equal
/// steps in log(count), so 1 point is level 0 and the densest cell the top level.
pub(crate) fn density_level(count: u32, max: u32, levels: usize) -> usize {
    if count <= 1 || max <= 1 || levels == 0 {
        return 0;
    }
    let t = f64::from(count).ln() / f64::from(max).ln();
    ((t * levels as f64) as usize).min(levels - 1)
}

/// Points binned into the plot grid.
pub(crate) struct Grid {
    /// Number of count slots per cell: one per listed layer plus one for unlisted layers.
    pub(crate) slots: usize,
    /// Braille dot bits per cell (braille mode only; empty otherwise).
    pub(crate) bits: Vec<u8>,
    /// `cols × rows × slots` point counts.
    pub(crate) counts: Vec<u32>,
    /// Points plotted per slot.
    pub(crate) plotted: Vec<usize>,
}

impl Grid {
    /// Bins `points` into `cols × rows` cells of a braille or ASCII plot over `bounds`.
    pub(crate) fn build(
        points: &[ScatterPoint],
        n_layers: usize,
        cols: usize,
        rows: usize,
        braille: bool,
        [x0, x1, y0, y1]: [f64; 4],
    ) -> Self {
        let slots = n_layers + 1;
        let cells = cols * rows;
        let mut grid = Self {
            slots,
            bits: if braille { vec![0; cells] } else { Vec::new() },
            counts: vec![0; cells * slots],
            plotted: vec![0; slots],
        };
        let (sx, sy) = if braille { (2, 4) } else { (1, 1) };
        let (dots_w, dots_h) = (cols * sx, rows * sy);
        for &(x, y, layer) in points {
            let (Some(dx), Some(dy)) = (
                bin_of(x, x0, x1, dots_w, false),
                bin_of(y, y0, y1, dots_h, true),
            ) else {
                continue;
            };
            let cell = (dy / sy) * cols + dx / sx;
            let slot = usize::from(layer).min(n_layers);
            grid.counts[cell * slots + slot] += 1;
            grid.plotted[slot] += 1;
            if braille {
                grid.bits[cell] |= braille_bit(dx % 2, dy % 4);
            }
        }
        grid
    }

    pub(crate) fn cell_counts(&self, cell: usize) -> &[u32] {
        &self.counts[cell * self.slots..(cell + 1) * self.slots]
    }
}

impl Widget for Scatter<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        (&self).render(area, buf);
    }
}

impl Widget for &Scatter<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        if area.is_empty() {
            return;
        }
        if !self.no_color {
            buf.set_style(area, self.style);
        }
        let show_legend = self.legend && area.height >= 2;
        let plot = Rect {
            height: area.height - u16::from(show_legend),
            ..area
        };
        let braille = self.mode == ScatterMode::Braille;
        let bounds = self.resolved_bounds();
        let (cols, rows) = (usize::from(plot.width), usize::from(plot.height));
        let grid = Grid::build(self.points, self.layers.len(), cols, rows, braille, bounds);
        let priorities: Vec<u8> = self
            .layers
            .iter()
            .map(|l| l.priority)
            .chain(std::iter::once(0))
            .collect();
        let totals = |cell: usize| grid.cell_counts(cell).iter().sum::<u32>();
        let max_total = (0..cols * rows).map(totals).max().unwrap_or(0);

        for row in 0..rows {
            for col in 0..cols {
                let cell = row * cols + col;
                let total = totals(cell);
                if total == 0 {
                    continue;
                }
                let winner = resolve_layer(grid.cell_counts(cell), &priorities).unwrap_or(0);
                let style = match self.coloring {
                    ScatterColoring::Layers => self.layer_style(winner),
                    ScatterColoring::Density => {
                        let level = density_level(total, max_total, DENSITY_RAMP.len());
                        Style::new().fg(DENSITY_RAMP[level])
                    }
                };
                let ch = if braille {
                    braille_char(grid.bits[cell])
                } else if self.no_color {
                    self.layer_glyph(winner)
                } else {
                    ASCII_RAMP[density_level(total, max_total, ASCII_RAMP.len())]
                };
                let (x, y) = (plot.x + col as u16, plot.y + row as u16);
                put_char(buf, plot, x, y, ch, self.paint(style));
            }
        }

        if let Some(&(x, y, layer)) = self.highlight.and_then(|i| self.points.get(i))
            && let (Some(col), Some(row)) = (
                bin_of(x, bounds[0], bounds[1], cols, false),
                bin_of(y, bounds[2], bounds[3], rows, true),
            )
        {
            let style = self.highlight_style.unwrap_or_else(|| {
                self.layer_style(usize::from(layer))
                    .add_modifier(Modifier::BOLD)
            });
            let ch = if braille {
                HIGHLIGHT_BRAILLE
            } else {
                HIGHLIGHT_ASCII
            };
            let (x, y) = (plot.x + col as u16, plot.y + row as u16);
            put_char(buf, plot, x, y, ch, self.paint(style));
        }

        if show_legend {
            self.render_legend(area, area.bottom() - 1, &grid.plotted, buf);
        }
    }
}

impl Scatter<'_> {
    fn render_legend(&self, area: Rect, y: u16, plotted: &[usize], buf: &mut Buffer) {
        let mut x = area.x;
        for (i, layer) in self.layers.iter().enumerate() {
            if x >= area.right() {
                break;
            }
            if i > 0 {
                x = put_str(buf, area, x, y, "  ", Style::default());
            }
            let marker = match (self.mode, self.no_color) {
                (ScatterMode::Braille, false) => Some('⣿'),
                (ScatterMode::Braille, true) => None,
                (ScatterMode::Ascii, false) => Some('#'),
                (ScatterMode::Ascii, true) => Some(self.layer_glyph(i)),
            };
            if let Some(m) = marker {
                put_char(buf, area, x, y, m, self.paint(layer.style));
                x = x.saturating_add(1);
                x = put_str(buf, area, x, y, " ", Style::default());
            }
            let count = plotted.get(i).copied().unwrap_or(0);
            let text = format!("{} {count}", layer.name);
            x = put_str(buf, area, x, y, &text, self.paint(self.style));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::render_text;

    fn layers() -> Vec<Layer<'static>> {
        vec![
            Layer::new("frequent", Color::Cyan),
            Layer::new("medium", Color::Yellow),
            Layer::new("rare", Color::Magenta),
        ]
    }

    /// Deterministic fixture: three Gaussian-ish clouds from an LCG, layer sizes 60/30/10%.
    fn fixture(n: usize) -> Vec<ScatterPoint> {
        let mut state: u64 = 0x1234_5678_9abc_def0;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 11) as f64) / ((1u64 << 53) as f64)
        };
        (0..n)
            .map(|i| {
                let layer = match i * 10 / n {
                    0..=5 => 0u8,
                    6..=8 => 1,
                    _ => 2,
                };
                // Sum of uniforms ≈ normal.
                let gx = next() + next() + next() - 1.5;
                let gy = next() + next() + next() - 1.5;
                let (cx, cy, s) = match layer {
                    0 => (0.0, 0.0, 1.0),
                    1 => (1.5, 0.8, 0.6),
                    _ => (-1.2, 1.2, 0.4),
                };
                (cx + gx * s, cy + gy * s, layer)
            })
            .collect()
    }

    fn render(widget: &Scatter<'_>, w: u16, h: u16) -> Buffer {
        let mut buf = Buffer::empty(Rect::new(0, 0, w, h));
        widget.render(buf.area, &mut buf);
        buf
    }

    #[test]
    fn point_lands_in_expected_dot() {
        // Bounds 0..4 × 0..4 over a 2×1 cell area = 4×4 dots, each dot 1 unit wide.
        let pts = [(2.5, 3.5, 0u8)];
        let s = Scatter::new(&pts)
            .x_bounds(Some([0.0, 4.0]))
            .y_bounds(Some([0.0, 4.0]));
        let buf = render(&s, 2, 1);
        // x = 2.5 → dot column 2 → cell 1, left column; y = 3.5 → top dot row.
        // Left column, top row is dot 1 → U+2801.
        assert_eq!(buf[(0, 0)].symbol(), " ");
        assert_eq!(buf[(1, 0)].symbol(), "⠁");

        // y = 0.5 → bottom dot row; x = 3.5 → right column: dot 8 → U+2880.
        let pts = [(3.5, 0.5, 0u8)];
        let s = Scatter::new(&pts)
            .x_bounds(Some([0.0, 4.0]))
            .y_bounds(Some([0.0, 4.0]));
        assert_eq!(render(&s, 2, 1)[(1, 0)].symbol(), "⢀");

        // Left column, third row from the top → dot 3 (U+2804); right column, second → dot 5.
        let pts = [(0.5, 1.5, 0u8), (1.5, 2.5, 0u8)];
        let s = Scatter::new(&pts)
            .x_bounds(Some([0.0, 4.0]))
            .y_bounds(Some([0.0, 4.0]));
        assert_eq!(render(&s, 2, 1)[(0, 0)].symbol(), "\u{2814}"); // dots 3 + 5
    }

    #[test]
    fn bin_edges() {
        assert_eq!(bin_of(0.0, 0.0, 1.0, 4, false), Some(0));
        assert_eq!(bin_of(1.0, 0.0, 1.0, 4, false), Some(3));
        assert_eq!(bin_of(0.26, 0.0, 1.0, 4, false), Some(1));
        assert_eq!(bin_of(1.0, 0.0, 1.0, 4, true), Some(0));
        assert_eq!(bin_of(1.01, 0.0, 1.0, 4, false), None);
        assert_eq!(bin_of(f64::NAN, 0.0, 1.0, 4, false), None);
        assert_eq!(bin_of(0.5, 0.0, 1.0, 0, false), None);
    }

    #[test]
    fn clash_goes_to_majority_then_priority() {
        assert_eq!(resolve_layer(&[3, 5, 1, 0], &[0, 0, 0, 0]), Some(1));
        // Tie: the layer listed first.
        assert_eq!(resolve_layer(&[4, 4, 0, 0], &[0, 0, 0, 0]), Some(0));
        // Priority beats majority.
        assert_eq!(resolve_layer(&[30, 5, 1, 0], &[0, 0, 1, 0]), Some(2));
        // A priority layer that is absent doesn't matter.
        assert_eq!(resolve_layer(&[3, 5, 0, 0], &[0, 0, 9, 0]), Some(1));
        assert_eq!(resolve_layer(&[0, 0, 0, 0], &[0, 0, 0, 0]), None);

        // Rendered: one cell, 3 frequent vs 1 rare point.
        let pts = [(0.1, 0.1, 0u8), (0.2, 0.2, 0), (0.3, 0.3, 0), (0.4, 0.4, 2)];
        let b = [0.0, 1.0];
        let s = Scatter::new(&pts)
            .layers(layers())
            .x_bounds(Some(b))
            .y_bounds(Some(b));
        assert_eq!(render(&s, 1, 1)[(0, 0)].fg, Color::Cyan);
        let mut ls = layers();
        ls[2] = ls[2].clone().priority(1);
        let s = s.layers(ls);
        assert_eq!(render(&s, 1, 1)[(0, 0)].fg, Color::Magenta);
    }

    #[test]
    fn auto_bounds_degenerate_data() {
        assert_eq!(
            auto_range(f64::INFINITY, f64::NEG_INFINITY, 0.05),
            [-1.0, 1.0]
        );
        assert_eq!(auto_range(0.0, 0.0, 0.05), [-1.0, 1.0]);
        assert_eq!(auto_range(0.0, 10.0, 0.1), [-1.0, 11.0]);
        let [lo, hi] = auto_range(5.0, 5.0, 0.05);
        assert!(lo < 5.0 && hi > 5.0);

        // All points equal: drawn once, in the middle.
        let pts = [(2.0, 2.0, 0u8); 10];
        let buf = render(&Scatter::new(&pts), 3, 3);
        assert_ne!(buf[(1, 1)].symbol(), " ");
        let drawn = buf.content().iter().filter(|c| c.symbol() != " ").count();
        assert_eq!(drawn, 1);

        // NaN / inf points are skipped and don't affect the bounds.
        let pts = [
            (f64::NAN, 0.0, 0u8),
            (0.0, f64::INFINITY, 0),
            (0.0, 0.0, 0),
            (1.0, 1.0, 0),
        ];
        let s = Scatter::new(&pts).margin(0.0);
        assert_eq!(s.resolved_bounds(), [0.0, 1.0, 0.0, 1.0]);
        let grid = Grid::build(&pts, 0, 4, 4, true, s.resolved_bounds());
        assert_eq!(grid.plotted, vec![2]);
    }

    #[test]
    fn fixed_bounds_clip_and_invalid_fall_back() {
        let pts = [(0.5, 0.5, 0u8), (5.0, 0.5, 0)];
        let s = Scatter::new(&pts)
            .x_bounds(Some([0.0, 1.0]))
            .y_bounds(Some([0.0, 1.0]));
        let grid = Grid::build(&pts, 0, 4, 4, true, s.resolved_bounds());
        assert_eq!(grid.plotted, vec![1]);
        let s = Scatter::new(&pts)
            .margin(0.0)
            .x_bounds(Some([1.0, 1.0]))
            .y_bounds(Some([f64::NAN, 1.0]));
        let [x0, x1, y0, y1] = s.resolved_bounds();
        assert_eq!([x0, x1], [0.5, 5.0]);
        assert!(y0 < 0.5 && y1 > 0.5 && (y1 - y0 - 0.1).abs() < 1e-12);
    }

    #[test]
    fn density_levels() {
        assert_eq!(density_level(1, 100, 5), 0);
        assert_eq!(density_level(100, 100, 5), 4);
        assert_eq!(density_level(10, 100, 5), 2); // ln10/ln100 = 0.5
        assert_eq!(density_level(5, 1, 5), 0);
    }

    #[test]
    fn tiny_and_degenerate_areas_do_not_panic() {
        let pts = fixture(500);
        let weird = [
            (f64::NAN, f64::NAN, 7u8),
            (f64::MAX, -f64::MAX, 0),
            (f64::MIN_POSITIVE, 0.0, 255),
        ];
        for data in [&pts[..], &[], &weird[..]] {
            for mode in [ScatterMode::Braille, ScatterMode::Ascii] {
                for w in 0..4 {
                    for h in 0..4 {
                        let s = Scatter::new(data)
                            .layers(layers())
                            .mode(mode)
                            .legend(true)
                            .highlight(Some(0))
                            .coloring(ScatterColoring::Density);
                        let _ = render(&s, w, h);
                    }
                }
            }
        }
        // An area partly outside the buffer is clipped, not a panic.
        let mut buf = Buffer::empty(Rect::new(0, 0, 5, 5));
        Scatter::new(&pts)
            .legend(true)
            .layers(layers())
            .render(Rect::new(3, 3, 10, 10), &mut buf);
    }

    #[test]
    fn highlight_is_drawn_on_top() {
        let pts = [(0.0, 0.0, 0u8), (1.0, 1.0, 1)];
        let s = Scatter::new(&pts).layers(layers()).highlight(Some(1));
        let buf = render(&s, 4, 2);
        assert_eq!(buf[(3, 0)].symbol(), "◉");
        assert_eq!(buf[(3, 0)].fg, Color::Yellow);
        assert!(buf[(3, 0)].modifier.contains(Modifier::BOLD));
        let buf = render(&s.clone().mode(ScatterMode::Ascii), 4, 2);
        assert_eq!(buf[(3, 0)].symbol(), "@");
        // Out-of-range index: nothing special.
        let _ = render(&s.highlight(Some(99)), 4, 2);
    }

    #[test]
    fn no_color_ascii_uses_layer_glyphs() {
        let pts = [(0.0, 0.0, 0u8), (1.0, 1.0, 1), (0.0, 1.0, 2)];
        let mut ls = layers();
        ls[2] = ls[2].clone().glyph('!');
        let s = Scatter::new(&pts)
            .layers(ls)
            .mode(ScatterMode::Ascii)
            .no_color(true);
        let buf = render(&s, 2, 2);
        assert_eq!(buf[(0, 1)].symbol(), "o");
        assert_eq!(buf[(1, 0)].symbol(), "+");
        assert_eq!(buf[(0, 0)].symbol(), "!");
        assert!(buf.content().iter().all(|c| c.fg == Color::Reset));
    }

    #[test]
    fn snapshot_braille_small() {
        let pts = fixture(3000);
        let s = Scatter::new(&pts)
            .layers(layers())
            .legend(true)
            .highlight(Some(2999));
        insta::assert_snapshot!(render_text(&render(&s, 40, 12)));
    }

    #[test]
    fn snapshot_braille_large() {
        let pts = fixture(3000);
        let mut ls = layers();
        ls[2] = ls[2].clone().priority(1);
        let s = Scatter::new(&pts)
            .layers(ls)
            .legend(true)
            .highlight(Some(0));
        insta::assert_snapshot!(render_text(&render(&s, 100, 30)));
    }

    #[test]
    fn snapshot_ascii_small() {
        let pts = fixture(3000);
        let s = Scatter::new(&pts)
            .layers(layers())
            .mode(ScatterMode::Ascii)
            .legend(true)
            .highlight(Some(2999));
        insta::assert_snapshot!(render_text(&render(&s, 40, 12)));
    }

    #[test]
    fn snapshot_ascii_no_color_large() {
        let pts = fixture(3000);
        let s = Scatter::new(&pts)
            .layers(layers())
            .mode(ScatterMode::Ascii)
            .no_color(true)
            .legend(true)
            .x_bounds(Some([-3.0, 3.0]))
            .y_bounds(Some([-2.0, 2.5]));
        insta::assert_snapshot!(render_text(&render(&s, 100, 30)));
    }

    #[test]
    fn snapshot_density_small() {
        let pts = fixture(3000);
        let s = Scatter::new(&pts)
            .layers(layers())
            .coloring(ScatterColoring::Density);
        insta::assert_snapshot!(render_text(&render(&s, 40, 12)));
    }
}
