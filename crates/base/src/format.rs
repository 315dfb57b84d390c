//! Quantities as the screens and tables write them, so that every front end (the workbench,
//! `conelab runs`, the exports) says one thing one way.

/// A duration the way the screens and tables show it: `59s`, `1m 05s`, `2h 03m` (coarser the
/// longer; negative or NaN is 0s).
pub fn format_duration(seconds: f64) -> String {
    let s = if seconds.is_finite() {
        seconds.max(0.0).round() as u64
    } else {
        0
    };
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_by_hand() {
        assert_eq!(format_duration(0.4), "0s");
        assert_eq!(format_duration(59.4), "59s");
        assert_eq!(format_duration(65.0), "1m 05s");
        assert_eq!(format_duration(7_380.0), "2h 03m");
        assert_eq!(format_duration(-3.0), "0s");
        assert_eq!(format_duration(f64::NAN), "0s");
    }
}
