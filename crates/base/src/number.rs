//! Numbers in cells: one formatter for every screen and table, so a value is either shown in
//! full or visibly abbreviated (`49.4k`, `1.2e105`, `—` for NaN, `∞`) — never cut to a prefix of
//! its digits, which reads as another number (issue #58: `2103786730` for 2.1 × 10¹¹²).
//!
//! The precision a cell states is half a unit of its last digit: `49.4k` is 49,400 ± 50,
//! `1.2e105` is (1.2 ± 0.05) × 10¹⁰⁵, `230.2` is 230.2 ± 0.05. [`parse_shown`] and
//! [`shown_precision`] read a cell back, for the tests that hold every view to that.

/// A value in at most `width` characters, with `decimals` decimals where that fits (the view's
/// usual look: a PPL with one, a loss with three). Where it does not, the most precise form that
/// fits: fewer decimals, a `k`/`M`/`G`/`T` suffix, or scientific notation (with at most
/// `max(decimals, 2)` decimals: a cell is read, not parsed); a non-zero value is
/// never shown as `0`. NaN is `—`, infinity `∞`; a width too small for any form of the value
/// gives `…` (nothing that could be read as a number). Widths count characters.
pub fn fit(value: f64, width: usize, decimals: usize) -> String {
    if width == 0 {
        return String::new();
    }
    if value.is_nan() {
        return "—".into();
    }
    if value.is_infinite() {
        let text = if value > 0.0 { "∞" } else { "-∞" };
        return if text.chars().count() <= width {
            text.into()
        } else {
            "…".into()
        };
    }
    let fits = |t: &str| t.chars().count() <= width;
    // A plain form has at least as many digits as the integer part: skip writing out the 301
    // digits of 1e300 to find that they do not fit.
    let plain_may_fit = value.abs() < 10f64.powi(width.min(300) as i32);
    if plain_may_fit {
        let preferred = format!("{value:.decimals$}");
        if fits(&preferred) && shows_value(&preferred, value) {
            return preferred;
        }
    }
    let mut best: Option<(f64, u8, String)> = None;
    let mut consider = |text: String, rank: u8| {
        if !fits(&text) || !shows_value(&text, value) {
            return;
        }
        let ulp = unit_of_last_digit(&text);
        let better = match &best {
            None => true,
            Some((b, r, _)) => ulp < *b * (1.0 - 1e-9) || (ulp <= *b * (1.0 + 1e-9) && rank < *r),
        };
        if better {
            best = Some((ulp, rank, text));
        }
    };
    if plain_may_fit {
        for d in (0..decimals).rev() {
            consider(format!("{value:.d$}"), 0);
        }
    }
    for (scale, suffix) in SUFFIXES.iter().filter(|_| value.abs() < 1e15) {
        let scaled = value / *scale;
        for d in 0..=2usize {
            let text = format!("{scaled:.d$}");
            // One to three digits before the point, the first not 0: 999.96k is written by
            // the next suffix (1.00M), 0.4k by none.
            let whole = text.trim_start_matches('-').split('.').next().unwrap_or("");
            if whole.len() > 3 || whole == "0" {
                continue;
            }
            consider(format!("{text}{suffix}"), 1);
        }
    }
    // Scientific with as many decimals as the plain form would have had (two at least):
    // `3.140e-4` for an I1 shown to three decimals, `1.23e112` for a PPL.
    for m in 0..=decimals.max(2) {
        consider(format!("{value:.m$e}"), 2);
    }
    best.map(|(_, _, t)| t).unwrap_or_else(|| "…".into())
}

/// A number as a message writes it: Rust's shortest form (`0.001`, `20`, `1.5`), in scientific
/// notation where that would run past 16 digits (`1e300`, not 301 of them; `1e-9`).
pub fn said(value: f64) -> String {
    let a = value.abs();
    if a.is_finite() && (a >= 1e16 || (a != 0.0 && a < 1e-6)) {
        format!("{value:e}")
    } else {
        format!("{value}")
    }
}

/// [`fit`] right-aligned in exactly `width` characters (a table's cell).
pub fn fit_right(value: f64, width: usize, decimals: usize) -> String {
    let text = fit(value, width, decimals);
    format!("{text:>width$}")
}

const SUFFIXES: [(f64, char); 4] = [(1e3, 'k'), (1e6, 'M'), (1e9, 'G'), (1e12, 'T')];

/// Whether `text` keeps a non-zero value non-zero (`0.0` for 0.01 is not the value).
fn shows_value(text: &str, value: f64) -> bool {
    value == 0.0 || parse_shown(text).is_some_and(|v| v != 0.0)
}

/// The value a cell shows: plain, suffixed (`49.4k`), scientific (`1.2e105`), `—` (NaN), `∞`;
/// `None` for `…` or anything else.
pub fn parse_shown(text: &str) -> Option<f64> {
    let t = text.trim();
    match t {
        "—" => return Some(f64::NAN),
        "∞" => return Some(f64::INFINITY),
        "-∞" => return Some(f64::NEG_INFINITY),
        _ => {}
    }
    let (body, scale) = match t.chars().last()? {
        c @ ('k' | 'M' | 'G' | 'T') => {
            (&t[..t.len() - 1], SUFFIXES.iter().find(|(_, s)| *s == c)?.0)
        }
        _ => (t, 1.0),
    };
    if body.is_empty()
        || !body
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | 'e'))
    {
        return None;
    }
    body.parse::<f64>().ok().map(|v| v * scale)
}

/// Half a unit of a cell's last digit: how far the value may be from what it shows. `None` for
/// a cell that shows no finite number.
pub fn shown_precision(text: &str) -> Option<f64> {
    let v = parse_shown(text)?;
    v.is_finite().then(|| unit_of_last_digit(text.trim()) / 2.0)
}

/// The unit of the last digit written: 0.1 for `230.2`, 100 for `49.4k`, 10¹⁰⁴ for `1.2e105`.
fn unit_of_last_digit(text: &str) -> f64 {
    let (body, scale) = match text.chars().last() {
        Some(c @ ('k' | 'M' | 'G' | 'T')) => (
            &text[..text.len() - 1],
            SUFFIXES
                .iter()
                .find(|(_, s)| *s == c)
                .map_or(1.0, |(m, _)| *m),
        ),
        _ => (text, 1.0),
    };
    let (mantissa, exponent) = match body.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (body, 0),
    };
    let decimals = mantissa.split_once('.').map_or(0, |(_, d)| d.len()) as i32;
    scale * 10f64.powi(exponent - decimals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_messages() {
        assert_eq!(said(1e300), "1e300");
        assert_eq!(said(-2.5e17), "-2.5e17");
        assert_eq!(said(20.0), "20");
        assert_eq!(said(0.001), "0.001");
        assert_eq!(said(1e-9), "1e-9");
        assert_eq!(said(f64::NAN), "NaN");
        assert_eq!(said(f64::INFINITY), "inf");
    }

    #[test]
    fn by_hand() {
        assert_eq!(fit(230.24, 8, 1), "230.2");
        assert_eq!(fit(49_353.2, 8, 1), "49353.2");
        assert_eq!(fit(49_353.2, 5, 1), "49353");
        assert_eq!(fit(49_353.2, 4, 1), "49k");
        assert_eq!(fit(124_368.0, 5, 1), "124k");
        assert_eq!(fit(1.2345e112, 10, 1), "1.23e112");
        assert_eq!(fit(3.1395e-4, 9, 3), "3.140e-4");
        assert_eq!(fit(1.2345e112, 7, 1), "1.2e112");
        assert_eq!(fit(1.2345e112, 4, 1), "…");
        assert_eq!(fit(0.0123, 6, 1), "1.2e-2");
        assert_eq!(fit(0.0123, 7, 1), "1.23e-2");
        assert_eq!(fit(0.0, 3, 1), "0.0");
        assert_eq!(fit(f64::NAN, 3, 1), "—");
        assert_eq!(fit(f64::INFINITY, 3, 1), "∞");
        assert_eq!(fit(f64::NEG_INFINITY, 1, 1), "…");
        assert_eq!(fit(999_960.0, 6, 1), "999960");
        assert_eq!(fit(999_960.0, 5, 1), "1.00M");
        assert_eq!(fit(-49_353.2, 5, 1), "-49k");
        assert_eq!(fit(5.0, 0, 1), "");
    }

    /// Every value from 1e-30 to 1e300 (and their negatives, ±0, NaN, ±∞) at every width from 1
    /// to 24: the cell fits, reads back within the precision it states, and is never a prefix
    /// of a longer rendering's digits unless it is that value (a cut).
    #[test]
    fn every_cell_reads_back_within_its_stated_precision() {
        let mut values = vec![0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
        let mut x = 1e-30f64;
        while x < 1e300 {
            for m in [1.0, 1.234_567_891, 4.999_96, 9.999_95] {
                values.push(x * m);
                values.push(-x * m);
            }
            x *= 10.0;
        }
        values.extend([49_353.2, 124_368.0, 44_148.0, 87_491.0, 230.24, 1.0 / 3.0]);
        let mut checked = 0;
        for &v in &values {
            for width in 1..=24 {
                for decimals in [0, 1, 3] {
                    let cell = fit(v, width, decimals);
                    assert!(cell.chars().count() <= width, "{v} in {width}: {cell:?}");
                    if cell == "…" {
                        // Only where no form fits: the shortest scientific form is longer.
                        assert!(format!("{v:.0e}").chars().count() > width, "{v} {width}");
                        continue;
                    }
                    let shown = parse_shown(&cell).unwrap_or_else(|| panic!("{v}: {cell:?}"));
                    if v.is_nan() {
                        assert!(shown.is_nan());
                        continue;
                    }
                    if v.is_infinite() {
                        assert_eq!(shown, v);
                        continue;
                    }
                    let within = shown_precision(&cell).expect("finite");
                    assert!(
                        (shown - v).abs() <= within * (1.0 + 1e-9) + v.abs() * 1e-15,
                        "{v} at width {width}, {decimals} decimals: {cell:?} is {shown} ± {within}"
                    );
                    if v != 0.0 {
                        assert!(shown != 0.0 && shown.signum() == v.signum(), "{v}: {cell}");
                    }
                    checked += 1;
                }
            }
        }
        assert!(checked > 50_000, "{checked}");
    }
}
