//! UTC calendar time from Unix seconds, for run names and `conelab runs` (no time-zone crate for
//! two formatted strings).

/// A UTC instant broken into calendar fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: i64,
    pub minute: i64,
    pub second: i64,
}

impl UtcTime {
    /// The calendar fields of `secs` seconds since 1970-01-01T00:00:00Z (negative: before it).
    pub fn from_unix(secs: i64) -> Self {
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        Self {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
        }
    }

    /// Now, by the system clock (the epoch if the clock is before it).
    pub fn now() -> Self {
        // Whole seconds; the float holds them exactly for the next 285 million years.
        Self::from_unix(crate::store::unix_now() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(secs: i64) -> [i64; 6] {
        let t = UtcTime::from_unix(secs);
        [t.year, t.month, t.day, t.hour, t.minute, t.second]
    }

    /// Instants whose Unix seconds were computed independently (Python's `calendar.timegm`).
    #[test]
    fn known_instants() {
        assert_eq!(fields(0), [1970, 1, 1, 0, 0, 0]);
        assert_eq!(fields(-1), [1969, 12, 31, 23, 59, 59]);
        assert_eq!(fields(951_827_696), [2000, 2, 29, 12, 34, 56]);
        assert_eq!(fields(1_709_251_199), [2024, 2, 29, 23, 59, 59]);
        // 2100 is not a leap year: the day after 28 February is 1 March.
        assert_eq!(fields(4_107_542_400), [2100, 3, 1, 0, 0, 0]);
        assert_eq!(fields(4_107_542_400 - 86_400), [2100, 2, 28, 0, 0, 0]);
    }

    /// Day by day over four centuries, the date advances like a calendar does.
    #[test]
    fn consecutive_days_are_consecutive_dates() {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let month_len = |y: i64, m: i64| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let (mut y, mut m, mut d) = (1970, 1, 1);
        for day in 0..146_097 {
            let t = UtcTime::from_unix(day * 86_400 + 43_200);
            assert_eq!((t.year, t.month, t.day), (y, m, d), "day {day}");
            d += 1;
            if d > month_len(y, m) {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }
}
