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

/// A size in bytes in binary units, three significant figures: `512 B`, `1.50 KiB`,
/// `12.3 MiB`, `4.00 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let decimals = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_by_hand() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(12_897_484), "12.3 MiB");
        assert_eq!(human_bytes(4 << 30), "4.00 GiB");
        assert_eq!(human_bytes(u64::MAX), "16384 PiB");
    }

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
