//! Text as the views write it: cut to a width with the cut marked, durations, word wrapping,
//! and TensorBoard's smoothing of a curve — shared by the workbench, the compare view and the
//! browser.

use ratatui::layout::{Constraint, Flex, Layout, Rect};

/// `text` cut to at most `max` characters, the cut marked with "…".
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The width in cells ratatui's `Table` gives each of `constraints` in an area `width` wide (its
/// defaults: one cell between columns, `Flex::Start`, no selection column) — so a cell is
/// written for the width it gets, not cut by the table to a prefix of its digits.
pub(crate) fn column_widths(width: u16, constraints: &[Constraint]) -> Vec<usize> {
    Layout::horizontal(constraints.iter().copied())
        .flex(Flex::Start)
        .spacing(1)
        .split(Rect::new(0, 0, width, 1))
        .iter()
        .map(|r| usize::from(r.width))
        .collect()
}

/// A number in a table cell `width` wide: in full, or visibly abbreviated (`49.4k`, `1.2e105`,
/// `—` for NaN, `∞`) — never cut ([`conelab_base::number::fit`]); `–` where there is none.
pub(crate) fn number_cell(value: Option<f64>, width: usize, decimals: usize) -> String {
    match value {
        Some(v) => conelab_base::number::fit(v, width, decimals),
        None => "–".into(),
    }
}

/// `1h 02m`, `3m 20s`, `45s`.
pub(crate) fn human_duration(seconds: f64) -> String {
    conelab_base::format::format_duration(seconds)
}

/// `text` in lines of at most `width` characters, broken between words (a longer word is cut).
pub(crate) fn wrap_words(text: &str, width: usize) -> Vec<String> {
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

/// TensorBoard's default smoothing weight.
pub const DEFAULT_SMOOTHING: f64 = 0.6;
/// The largest weight the keys reach (1 would be a flat line at the first value).
pub const MAX_SMOOTHING: f64 = 0.99;

/// TensorBoard's scalar smoothing: an exponential moving average with weight `w` started at 0
/// and divided by 1 − wⁿ (debiased), so the first points are not dragged towards 0. A
/// non-finite value is passed through and does not enter the average.
pub fn smooth_debiased(values: &[f64], w: f64) -> Vec<f64> {
    let w = w.clamp(0.0, 1.0);
    let mut last = 0.0;
    let mut n = 0;
    values
        .iter()
        .map(|&y| {
            if !y.is_finite() {
                return y;
            }
            last = last * w + (1.0 - w) * y;
            n += 1;
            let debias = if w == 1.0 { 1.0 } else { 1.0 - w.powi(n) };
            last / debias
        })
        .collect()
}

/// A curve's smoothing weight as `m` and `+`/`-` move it, in the workbench and the compare
/// view alike: off and back to the weight it had, or a step of the keys (rounded to it, so `+`
/// then `-` comes back to the same weight, and kept to 0 ..= [`MAX_SMOOTHING`]).
#[derive(Debug)]
pub(crate) struct Smoothing<'a> {
    pub(crate) weight: &'a mut f64,
    /// The weight `m` brings back.
    pub(crate) off_from: &'a mut f64,
}

impl Smoothing<'_> {
    /// `m`: off, or back to the weight it had.
    pub(crate) fn toggle(self) {
        if *self.weight > 0.0 {
            *self.off_from = *self.weight;
            *self.weight = 0.0;
        } else {
            *self.weight = *self.off_from;
        }
    }

    /// `+`/`-` (`0`: off): the weight by `d`.
    pub(crate) fn step(self, d: f64) {
        let w = ((*self.weight + d) * 100.0).round() / 100.0;
        let w = w.clamp(0.0, MAX_SMOOTHING);
        if w == 0.0 && *self.weight > 0.0 {
            // `m` brings back the weight it had.
            *self.off_from = *self.weight;
        }
        *self.weight = w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoothing_matches_tensorboard_by_hand() {
        // w = 0.6 on [1, 0, 0]: last = 0.4, 0.24, 0.144; debias 1 − 0.6ⁿ = 0.4, 0.64, 0.784.
        let s = smooth_debiased(&[1.0, 0.0, 0.0], 0.6);
        let want = [1.0, 0.375, 0.144 / 0.784];
        for (a, b) in s.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{s:?}");
        }
        // Debiased: a constant stays that constant from the first point on (a plain EMA
        // started at 0 would start at (1 − w)·c).
        for v in smooth_debiased(&[3.0; 5], 0.9) {
            assert!((v - 3.0).abs() < 1e-12);
        }
        // Weight 0 is the raw curve; NaN passes through and leaves the average alone.
        assert_eq!(smooth_debiased(&[1.0, 5.0], 0.0), vec![1.0, 5.0]);
        let s = smooth_debiased(&[2.0, f64::NAN, 2.0], 0.5);
        assert!(s[1].is_nan());
        assert!((s[2] - 2.0).abs() < 1e-12, "{s:?}");
    }
}
