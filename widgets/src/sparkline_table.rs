//! [`SparklineTable`]: labelled rows, each with a sparkline of its history, the current value and
//! an optional change.
//!
//! Made for small metric tables (one row per group) where the trend matters as much as the number.

use std::borrow::Cow;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::widgets::Widget;

use crate::text::{marked, put_char, put_str, text_width, whole_or_marked};

/// Sparkline glyphs, lowest to highest.
const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// What a row's sparkline is scaled to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SparkScale {
    /// The min/max of the values actually shown (the last N that fit the column): recent changes
    /// stay visible even after a large early transient.
    #[default]
    Visible,
    /// The min/max of the row's whole history, so the bars are comparable with earlier frames.
    History,
}

/// One row: a label, a history drawn as a sparkline, the current value and an optional delta,
/// all already formatted by the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct SparkRow<'a> {
    label: Cow<'a, str>,
    history: &'a [f64],
    value: Cow<'a, str>,
    delta: Option<Cow<'a, str>>,
    style: Style,
    spark_style: Option<Style>,
    delta_style: Style,
}

impl<'a> SparkRow<'a> {
    /// A row showing `label`, a sparkline of `history` (oldest first) and `value`.
    pub fn new(
        label: impl Into<Cow<'a, str>>,
        history: &'a [f64],
        value: impl Into<Cow<'a, str>>,
    ) -> Self {
        Self {
            label: label.into(),
            history,
            value: value.into(),
            delta: None,
            style: Style::default(),
            spark_style: None,
            delta_style: Style::default(),
        }
    }

    /// The change column, e.g. `"+0.12"`.
    #[must_use]
    pub fn delta(mut self, delta: impl Into<Cow<'a, str>>) -> Self {
        self.delta = Some(delta.into());
        self
    }

    /// Style of the label and value (and of the sparkline unless [`SparkRow::spark_style`] is set).
    #[must_use]
    pub fn style(mut self, style: impl Into<Style>) -> Self {
        self.style = style.into();
        self
    }

    /// Style of the sparkline.
    #[must_use]
    pub fn spark_style(mut self, style: impl Into<Style>) -> Self {
        self.spark_style = Some(style.into());
        self
    }

    /// Style of the delta, e.g. green for an improvement.
    #[must_use]
    pub fn delta_style(mut self, style: impl Into<Style>) -> Self {
        self.delta_style = style.into();
        self
    }
}

/// A table of [`SparkRow`]s: `label │ sparkline │ value │ delta`, with optional column headers.
///
/// * Label, value and delta columns are as wide as their widest entry (the label at most a third of
///   the area); the sparkline takes the rest (or [`SparklineTable::spark_width`]). When the area is
///   too narrow, the sparkline goes first, then the delta, then the value is cut short.
/// * The sparkline shows the last values that fit, right-aligned so the newest value sits next to
///   the current value; each row is scaled to its own min/max (see [`SparkScale`]) over eight levels
///   `▁▂▃▄▅▆▇█`. A flat row is drawn at `▄`; NaN and infinite values are drawn as a space and left
///   out of the scale.
/// * The delta column only exists when a row has a delta or a delta header is set.
#[derive(Debug, Clone)]
pub struct SparklineTable<'a> {
    rows: Vec<SparkRow<'a>>,
    header: Option<[Cow<'a, str>; 4]>,
    header_style: Style,
    scale: SparkScale,
    spark_width: Option<u16>,
    column_spacing: u16,
    no_color: bool,
}

impl<'a> SparklineTable<'a> {
    /// A table of `rows`, no header.
    pub fn new(rows: impl IntoIterator<Item = SparkRow<'a>>) -> Self {
        Self {
            rows: rows.into_iter().collect(),
            header: None,
            header_style: Style::new().add_modifier(Modifier::BOLD),
            scale: SparkScale::Visible,
            spark_width: None,
            column_spacing: 1,
            no_color: false,
        }
    }

    /// Column headers for the label, sparkline, value and delta columns.
    #[must_use]
    pub fn header(
        mut self,
        label: impl Into<Cow<'a, str>>,
        spark: impl Into<Cow<'a, str>>,
        value: impl Into<Cow<'a, str>>,
        delta: impl Into<Cow<'a, str>>,
    ) -> Self {
        self.header = Some([label.into(), spark.into(), value.into(), delta.into()]);
        self
    }

    /// Style of the header row (default bold).
    #[must_use]
    pub fn header_style(mut self, style: impl Into<Style>) -> Self {
        self.header_style = style.into();
        self
    }

    /// What each sparkline is scaled to (default [`SparkScale::Visible`]).
    #[must_use]
    pub fn scale(mut self, scale: SparkScale) -> Self {
        self.scale = scale;
        self
    }

    /// Maximum sparkline width; `None` (default) gives it all the room left.
    #[must_use]
    pub fn spark_width(mut self, width: Option<u16>) -> Self {
        self.spark_width = width;
        self
    }

    /// Blank cells between columns (default 1).
    #[must_use]
    pub fn column_spacing(mut self, spacing: u16) -> Self {
        self.column_spacing = spacing;
        self
    }

    /// Draw without any colour or modifier.
    #[must_use]
    pub fn no_color(mut self, no_color: bool) -> Self {
        self.no_color = no_color;
        self
    }

    fn paint(&self, style: Style) -> Style {
        crate::color::paint(self.no_color, style)
    }

    /// Widths of the label, sparkline, value and delta columns in `width` cells.
    fn column_widths(&self, width: u16) -> [u16; 4] {
        let widest = |f: &dyn Fn(&SparkRow<'a>) -> usize, h: usize| -> u16 {
            let w = self.rows.iter().map(f).max().unwrap_or(0).max(h);
            w.min(usize::from(u16::MAX)) as u16
        };
        let header_w = |i: usize| self.header.as_ref().map_or(0, |h| text_width(&h[i]));
        let label = widest(&|r| text_width(&r.label), header_w(0));
        let value = widest(&|r| text_width(&r.value), header_w(2));
        let has_delta = self.rows.iter().any(|r| r.delta.is_some()) || header_w(3) > 0;
        let delta = if has_delta {
            widest(&|r| r.delta.as_deref().map_or(0, text_width), header_w(3))
        } else {
            0
        };
        let sp = self.column_spacing;
        let label = label.min((width / 3).max(1)).min(width);
        let mut avail = width - label;
        // A column after the first needs its spacing plus at least one cell.
        let mut take = |want: u16| -> u16 {
            if want == 0 || avail <= sp {
                return 0;
            }
            let w = want.min(avail - sp);
            avail -= sp + w;
            w
        };
        let value = take(value);
        let delta = take(delta);
        let spark = take(self.spark_width.unwrap_or(u16::MAX));
        [label, spark, value, delta]
    }
}

/// Sparkline level `0..8` of `v` on a `min..max` scale; `None` for non-finite `v`. Equal `min` and
/// `max` give the middle level 3 (`▄`).
pub(crate) fn spark_level(v: f64, min: f64, max: f64) -> Option<usize> {
    if !v.is_finite() {
        return None;
    }
    if !(min.is_finite() && max.is_finite()) || max <= min {
        return Some(3);
    }
    // Halved to keep `max - min` finite for extreme values.
    let t = (v * 0.5 - min * 0.5) / (max * 0.5 - min * 0.5);
    Some(((t.clamp(0.0, 1.0) * 7.0).round() as usize).min(7))
}

/// Finite min and max of `values` (`(inf, -inf)` when there are none).
fn finite_range(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

impl Widget for SparklineTable<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        (&self).render(area, buf);
    }
}

impl Widget for &SparklineTable<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        if area.is_empty() {
            return;
        }
        let [lw, sw, vw, dw] = self.column_widths(area.width);
        let sp = self.column_spacing;
        // Column start positions; a zero-width column takes no spacing.
        let spark_x = area.x + lw + if sw > 0 { sp } else { 0 };
        let value_x = spark_x + sw + if vw > 0 { sp } else { 0 };
        let delta_x = value_x + vw + if dw > 0 { sp } else { 0 };
        let right = |x: u16, w: u16, s: &str| x + w.saturating_sub(text_width(s) as u16);

        let mut y = area.y;
        if let Some(h) = &self.header
            && area.height >= 2
        {
            let style = self.paint(self.header_style);
            let cell = |x: u16, w: u16| Rect::new(x, y, w, 1);
            // Headers and labels cut are marked; a value that does not fit is `…`, never its
            // first digits (issue #58).
            let h: Vec<String> = [lw, sw, vw, dw]
                .iter()
                .zip(h.iter())
                .map(|(&w, t)| marked(t, w))
                .collect();
            put_str(buf, cell(area.x, lw), area.x, y, &h[0], style);
            put_str(buf, cell(spark_x, sw), spark_x, y, &h[1], style);
            put_str(
                buf,
                cell(value_x, vw),
                right(value_x, vw, &h[2]),
                y,
                &h[2],
                style,
            );
            put_str(
                buf,
                cell(delta_x, dw),
                right(delta_x, dw, &h[3]),
                y,
                &h[3],
                style,
            );
            y += 1;
        }

        for row in &self.rows {
            if y >= area.bottom() {
                break;
            }
            let cell = |x: u16, w: u16| Rect::new(x, y, w, 1);
            let style = self.paint(row.style);
            put_str(
                buf,
                cell(area.x, lw),
                area.x,
                y,
                &marked(&row.label, lw),
                style,
            );
            let value_cell = cell(value_x, vw);
            let value = whole_or_marked(&row.value, vw);
            put_str(buf, value_cell, right(value_x, vw, value), y, value, style);
            if let Some(d) = &row.delta {
                let d = whole_or_marked(d, dw);
                let ds = self.paint(row.delta_style);
                put_str(buf, cell(delta_x, dw), right(delta_x, dw, d), y, d, ds);
            }
            if sw > 0 {
                let n = usize::from(sw).min(row.history.len());
                let shown = &row.history[row.history.len() - n..];
                let (lo, hi) = match self.scale {
                    SparkScale::Visible => finite_range(shown),
                    SparkScale::History => finite_range(row.history),
                };
                let spark_style = self.paint(row.spark_style.unwrap_or(row.style));
                let start = spark_x + sw - n as u16;
                for (i, &v) in shown.iter().enumerate() {
                    let ch = spark_level(v, lo, hi).map_or(' ', |l| BARS[l]);
                    put_char(buf, cell(spark_x, sw), start + i as u16, y, ch, spark_style);
                }
            }
            y += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::render_text;
    use ratatui::style::Color;

    fn render(widget: &SparklineTable<'_>, w: u16, h: u16) -> Buffer {
        let mut buf = Buffer::empty(Rect::new(0, 0, w, h));
        widget.render(buf.area, &mut buf);
        buf
    }

    struct Fixture {
        loss: Vec<f64>,
        cos: Vec<f64>,
        rare: Vec<f64>,
    }

    fn fixture() -> Fixture {
        Fixture {
            loss: (0..200)
                .map(|i| 2.0 + 6.0 * (-(i as f64) / 40.0).exp())
                .collect(),
            cos: (0..200).map(|i| 0.1 + 0.6 * (i as f64 / 200.0)).collect(),
            rare: (0..120)
                .map(|i| {
                    if i % 17 == 5 {
                        f64::NAN
                    } else {
                        (i as f64 / 6.0).sin()
                    }
                })
                .collect(),
        }
    }

    fn table(f: &Fixture) -> SparklineTable<'_> {
        SparklineTable::new([
            SparkRow::new("frequent", &f.loss, "2.013")
                .delta("-0.004")
                .style(Color::Cyan)
                .delta_style(Color::Green),
            SparkRow::new("medium", &f.cos, "0.697")
                .delta("+0.003")
                .style(Color::Yellow)
                .delta_style(Color::Red),
            SparkRow::new("rare", &f.rare, "NaN").style(Color::Magenta),
            SparkRow::new("empty", &[], "-"),
        ])
        .header("group", "mean cos", "now", "Δ")
    }

    #[test]
    fn levels_for_known_values() {
        assert_eq!(spark_level(0.0, 0.0, 7.0), Some(0));
        assert_eq!(spark_level(7.0, 0.0, 7.0), Some(7));
        assert_eq!(spark_level(3.0, 0.0, 7.0), Some(3));
        assert_eq!(spark_level(3.6, 0.0, 7.0), Some(4));
        assert_eq!(spark_level(0.5, 0.0, 1.0), Some(4)); // 3.5 rounds up
        assert_eq!(spark_level(5.0, 5.0, 5.0), Some(3)); // flat
        assert_eq!(spark_level(f64::NAN, 0.0, 1.0), None);
        assert_eq!(spark_level(f64::INFINITY, 0.0, 1.0), None);
        assert_eq!(spark_level(f64::MAX, -f64::MAX, f64::MAX), Some(7));
        assert_eq!(spark_level(0.0, -f64::MAX, f64::MAX), Some(4));
    }

    #[test]
    fn sparkline_shows_last_values_right_aligned() {
        let h = [9.0, 9.0, 0.0, 1.0, f64::NAN, 2.0];
        let t = SparklineTable::new([SparkRow::new("a", &h, "2")])
            .spark_width(Some(4))
            .column_spacing(1);
        let buf = render(&t, 20, 1);
        // "a" + space + 4 sparkline cells: 0, 1, NaN, 2 scaled to 0..2.
        let line: String = (0..8).map(|x| buf[(x, 0)].symbol().to_owned()).collect();
        assert_eq!(line, "a ▁▅ █ 2");
        // Scaled to the whole history instead: 0..9.
        let buf = render(&t.clone().scale(SparkScale::History), 20, 1);
        let line: String = (0..8).map(|x| buf[(x, 0)].symbol().to_owned()).collect();
        assert_eq!(line, "a ▁▂ ▃ 2");
        // Short history: right-aligned.
        let h = [1.0, 2.0];
        let t = SparklineTable::new([SparkRow::new("a", &h, "2")]).spark_width(Some(4));
        let line: String = (0..8)
            .map(|x| render(&t, 20, 1)[(x, 0)].symbol().to_owned())
            .collect();
        assert_eq!(line, "a   ▁█ 2");
    }

    #[test]
    fn narrow_areas_drop_sparkline_first() {
        let f = fixture();
        let t = table(&f);
        let [lw, sw, vw, dw] = t.column_widths(24);
        assert_eq!([lw, vw, dw], [8, 5, 6]);
        assert_eq!(sw, 24 - 8 - 5 - 6 - 3);
        let [_, sw, vw, dw] = t.column_widths(21);
        assert_eq!((sw, vw, dw), (0, 5, 6));
        for w in 0..30 {
            let [a, b, c, d] = t.column_widths(w);
            let spacing = [b, c, d].iter().filter(|&&x| x > 0).count() as u16;
            assert!(a + b + c + d + spacing <= w, "width {w}");
        }
    }

    #[test]
    fn edge_cases_do_not_panic() {
        let f = fixture();
        let weird = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            -f64::MAX,
        ];
        for w in 0..12 {
            for h in 0..5 {
                let _ = render(&table(&f), w, h);
                let _ = render(&SparklineTable::new([]), w, h);
                let t = SparklineTable::new([SparkRow::new("ü😀x", &weird, "∞").delta("")])
                    .column_spacing(0)
                    .spark_width(Some(0));
                let _ = render(&t, w, h);
                let _ = render(&t.column_spacing(u16::MAX).spark_width(None), w, h);
            }
        }
    }

    #[test]
    fn snapshot_small() {
        let f = fixture();
        insta::assert_snapshot!(render_text(&render(&table(&f), 40, 12)));
    }

    #[test]
    fn snapshot_large() {
        let f = fixture();
        let t = table(&f).column_spacing(2).spark_width(Some(60));
        insta::assert_snapshot!(render_text(&render(&t, 100, 30)));
    }

    #[test]
    fn snapshot_no_color() {
        let f = fixture();
        insta::assert_snapshot!(render_text(&render(&table(&f).no_color(true), 40, 6)));
    }
}
