//! Calendar arithmetic for price dates: `YYYY-MM-DD` text and wall-clock
//! instants in, UTC day numbers and minutes of the day out.

use std::time::{SystemTime, UNIX_EPOCH};

/// A UTC calendar day, as days since 1970-01-01.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day(pub i32);

/// A wall-clock instant reduced to what prices depend on: its UTC day and
/// minute of that day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct When {
    /// The UTC day.
    pub day: Day,
    /// Minutes since UTC midnight (0..1440).
    pub minute: u16,
}

impl When {
    /// The UTC day and minute of `t` (instants before 1970 count as 1970-01-01).
    pub fn of(t: SystemTime) -> When {
        let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        When {
            day: Day(i32::try_from(secs / 86_400).unwrap_or(i32::MAX)),
            minute: ((secs % 86_400) / 60) as u16,
        }
    }

    /// Midnight UTC of `day`.
    pub fn midnight(day: Day) -> When {
        When { day, minute: 0 }
    }
}

impl Day {
    /// Parse `YYYY-MM-DD` (a real calendar date).
    pub fn parse(s: &str) -> Option<Day> {
        let mut parts = s.splitn(3, '-');
        let y: i32 = parts.next()?.parse().ok()?;
        let m: u32 = parts.next()?.parse().ok()?;
        let d: u32 = parts.next()?.parse().ok()?;
        if s.len() != 10 || !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
            return None;
        }
        Some(Day(days_from_civil(y, m, d)))
    }
}

impl std::fmt::Display for Day {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (y, m, d) = civil_from_days(self.0);
        write!(f, "{y:04}-{m:02}-{d:02}")
    }
}

/// Parse `HH:MM` (24-hour) into minutes since midnight.
pub(super) fn parse_minute(s: &str) -> Option<u16> {
    let (h, m) = s.split_once(':')?;
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

fn is_leap(y: i32) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// The proleptic Gregorian day count, shifted so that years start in March
// (the leap day is then the last day of a year).
fn days_from_civil(y: i32, m: u32, d: u32) -> i32 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i32 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i32 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i32) -> (i32, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i32::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates_round_trip_and_reject_impossible_days() {
        for s in ["1970-01-01", "2000-02-29", "2024-12-31", "2026-03-01"] {
            let day = Day::parse(s).expect("a valid date");
            assert_eq!(day.to_string(), s);
        }
        assert_eq!(Day::parse("1970-01-02"), Some(Day(1)));
        for bad in [
            "2023-02-29",
            "2024-13-01",
            "2024-1-01",
            "24-01-01",
            "2024-01-00",
            "x",
        ] {
            assert_eq!(Day::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_instant_maps_to_its_utc_day_and_minute() {
        let t = UNIX_EPOCH + Duration::from_secs(86_400 * 3 + 3600 * 16 + 30 * 60 + 59);
        assert_eq!(
            When::of(t),
            When {
                day: Day(3),
                minute: 16 * 60 + 30
            }
        );
        assert_eq!(parse_minute("16:30"), Some(990));
        assert_eq!(parse_minute("24:00"), None);
    }
}
