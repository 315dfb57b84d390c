//! Numbers as axis labels write them.

/// Formats a number compactly for axis labels: at most ~3 significant digits, scientific notation
/// for very large or very small magnitudes, `NaN` / `inf` spelled out.
pub fn format_compact(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if v == 0.0 {
        return "0".to_owned();
    }
    let mag = v.abs();
    if !(1e-3..1e5).contains(&mag) {
        return format!("{v:.1e}");
    }
    // Three significant digits, capped at four decimals, trailing zeros trimmed.
    let decimals = (2 - mag.log10().floor() as i32).clamp(0, 4) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    };
    if s == "-0" { "0".to_owned() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_numbers() {
        assert_eq!(format_compact(0.0), "0");
        assert_eq!(format_compact(1.0), "1");
        assert_eq!(format_compact(-2.5), "-2.5");
        assert_eq!(format_compact(4.56789), "4.57");
        assert_eq!(format_compact(0.012345), "0.0123");
        assert_eq!(format_compact(123.4), "123");
        assert_eq!(format_compact(12345.0), "12345");
        assert_eq!(format_compact(123456.0), "1.2e5");
        assert_eq!(format_compact(0.0001), "1.0e-4");
        assert_eq!(format_compact(f64::NAN), "NaN");
        assert_eq!(format_compact(f64::NEG_INFINITY), "-inf");
        assert_eq!(format_compact(-0.0001), "-1.0e-4");
    }
}
