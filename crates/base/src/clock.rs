//! The system clock as Unix seconds, and UTC calendar time from them, for run records, run names
//! and `conelab runs` (chrono, already built for polars; only its `std` feature, so the
//! dependency tree is unchanged).

use chrono::{DateTime, Utc};

/// The instant `secs` seconds after 1970-01-01T00:00:00Z (the epoch for one chrono cannot hold).
fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap_or_default()
}

/// `secs` formatted with a strftime pattern, in UTC.
pub fn format_unix(secs: i64, pattern: &str) -> String {
    at(secs).format(pattern).to_string()
}

/// Now by the system clock, in seconds since the epoch (0 if the clock is before it).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Now by the system clock, in whole seconds since the epoch (the epoch if the clock is before
/// it).
pub fn now_unix() -> i64 {
    // Whole seconds; the float holds them exactly for the next 285 million years.
    unix_now() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Instants whose Unix seconds were computed independently (Python's `calendar.timegm`).
    #[test]
    fn known_instants() {
        let f = |s| format_unix(s, "%Y-%m-%d %H:%M:%S");
        assert_eq!(f(0), "1970-01-01 00:00:00");
        assert_eq!(f(-1), "1969-12-31 23:59:59");
        assert_eq!(f(951_827_696), "2000-02-29 12:34:56");
        assert_eq!(f(1_709_251_199), "2024-02-29 23:59:59");
        // 2100 is not a leap year: the day after 28 February is 1 March.
        assert_eq!(f(4_107_542_400), "2100-03-01 00:00:00");
        assert_eq!(f(4_107_542_400 - 86_400), "2100-02-28 00:00:00");
    }
}
