//! RFC 3339 UTC timestamps from and to epoch milliseconds, without a clock.
//!
//! Dates use the proleptic Gregorian calendar. Days are counted from
//! 1970-01-01 through 400-year eras (146 097 days each), in which the year is
//! taken to start on 1 March so that the leap day falls at its end.

/// Epoch milliseconds of 0000-01-01T00:00:00.000Z, the earliest instant a
/// four-digit RFC 3339 year can write.
pub const MIN_MILLIS: i64 = -62_167_219_200_000;
/// Epoch milliseconds of 9999-12-31T23:59:59.999Z, the latest.
pub const MAX_MILLIS: i64 = 253_402_300_799_999;

const MS_PER_DAY: i64 = 86_400_000;
const DAYS_PER_ERA: i64 = 146_097;
/// Days from 0000-03-01 (start of era 0) to 1970-01-01.
const EPOCH_SHIFT: i64 = 719_468;

/// Why a time could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// The instant falls outside years 0000 to 9999.
    #[error("{millis} ms since the epoch is outside years 0000 to 9999")]
    OutOfRange { millis: i64 },
    /// The text is not an RFC 3339 UTC date-time.
    #[error(
        "{text:?} is not an RFC 3339 UTC date-time (YYYY-MM-DDTHH:MM:SS[.fraction]Z): {reason}"
    )]
    Syntax { text: String, reason: &'static str },
}

/// (year, month 1–12, day 1–31) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + EPOCH_SHIFT;
    let era = shifted.div_euclid(DAYS_PER_ERA);
    let day_of_era = shifted.rem_euclid(DAYS_PER_ERA); // 0..=146096
    // Years of the era: remove the leap days before this day (one every 4
    // years, none every 100, one again at 400) and divide by 365.
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    // Months from March: 153 days per 5 months (31+30+31+30+31).
    let march_month = (5 * day_of_year + 2) / 153; // 0 = March .. 11 = February
    let day = day_of_year - (153 * march_month + 2) / 5 + 1;
    let month = if march_month < 10 {
        march_month + 3
    } else {
        march_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

/// Day count since 1970-01-01 of a valid (year, month, day).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let march_month = i64::from(if month > 2 { month - 3 } else { month + 9 });
    let day_of_year = (153 * march_month + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * DAYS_PER_ERA + day_of_era - EPOCH_SHIFT
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Writes epoch milliseconds as `YYYY-MM-DDTHH:MM:SS.sssZ`.
pub fn format_rfc3339(millis: i64) -> Result<String, TimeError> {
    if !(MIN_MILLIS..=MAX_MILLIS).contains(&millis) {
        return Err(TimeError::OutOfRange { millis });
    }
    let days = millis.div_euclid(MS_PER_DAY);
    let in_day = millis.rem_euclid(MS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (in_day / 3_600_000, in_day / 60_000 % 60);
    let (second, milli) = (in_day / 1000 % 60, in_day % 1000);
    Ok(format!(
        "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z"
    ))
}

/// An instant read from RFC 3339 text: whole seconds since the epoch and
/// the fraction's digits (for ordering only; a leap second reads as :60).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Instant {
    seconds: i64,
    fraction: String,
}

/// Reads an RFC 3339 date-time in UTC (`Z` or `z`; `T` or `t`).
pub fn parse_rfc3339(text: &str) -> Result<Instant, TimeError> {
    let err = |reason| TimeError::Syntax {
        text: text.to_owned(),
        reason,
    };
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        if part.iter().all(u8::is_ascii_digit) {
            Some(part.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
        } else {
            None
        }
    };
    if b.len() < 20 {
        return Err(err("too short"));
    }
    if b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return Err(err("separators misplaced"));
    }
    if !matches!(b[10], b'T' | b't') {
        return Err(err("no T between date and time"));
    }
    let year = digits(0..4).ok_or_else(|| err("bad year"))?;
    let month = digits(5..7).ok_or_else(|| err("bad month"))?;
    let day = digits(8..10).ok_or_else(|| err("bad day"))?;
    let hour = digits(11..13).ok_or_else(|| err("bad hour"))?;
    let minute = digits(14..16).ok_or_else(|| err("bad minute"))?;
    let second = digits(17..19).ok_or_else(|| err("bad second"))?;
    if !(1..=12).contains(&month) {
        return Err(err("month out of range"));
    }
    let (month, day) = (month as u32, day as u32);
    if day == 0 || day > days_in_month(year, month) {
        return Err(err("day out of range for the month"));
    }
    if hour > 23 || minute > 59 || second > 60 {
        return Err(err("time of day out of range"));
    }
    let rest = &b[19..];
    let (fraction, zone) = match rest.first() {
        Some(b'.') => {
            let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
            if n == 0 {
                return Err(err("empty fraction"));
            }
            (&text[20..20 + n], &rest[1 + n..])
        }
        _ => ("", rest),
    };
    if !matches!(zone, b"Z" | b"z") {
        return Err(err("must end in Z (UTC)"));
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Ok(Instant {
        seconds,
        fraction: fraction.trim_end_matches('0').to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_700_000_000_123, "2023-11-14T22:13:20.123Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
            (MIN_MILLIS, "0000-01-01T00:00:00.000Z"),
            (MAX_MILLIS, "9999-12-31T23:59:59.999Z"),
        ];
        for (ms, text) in cases {
            assert_eq!(format_rfc3339(ms).unwrap(), text, "{ms}");
        }
        assert!(format_rfc3339(MAX_MILLIS + 1).is_err());
        assert!(format_rfc3339(MIN_MILLIS - 1).is_err());
    }

    #[test]
    fn days_round_trip_and_advance_one_calendar_day_at_a_time() {
        let first = days_from_civil(0, 1, 1);
        let mut expected = (0_i64, 1_u32, 1_u32);
        for days in first..=days_from_civil(9999, 12, 31) {
            let civil = civil_from_days(days);
            assert_eq!(civil, expected, "day {days}");
            assert_eq!(days_from_civil(civil.0, civil.1, civil.2), days);
            let (y, m, d) = expected;
            expected = if d < days_in_month(y, m) {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
        }
    }

    #[test]
    fn parses_what_it_writes_and_orders_instants() {
        for ms in [MIN_MILLIS, -1, 0, 1_700_000_000_123, MAX_MILLIS] {
            let text = format_rfc3339(ms).unwrap();
            let back = parse_rfc3339(&text).unwrap();
            assert_eq!(back.seconds, ms.div_euclid(1000), "{text}");
        }
        let a = parse_rfc3339("2024-01-01T00:00:00.5Z").unwrap();
        let b = parse_rfc3339("2024-01-01T00:00:00.50Z").unwrap();
        let c = parse_rfc3339("2024-01-01T00:00:00.123456789z").unwrap();
        let d = parse_rfc3339("2024-01-01t00:00:01Z").unwrap();
        assert_eq!(a, b);
        assert!(c < a && a < d);
    }

    #[test]
    fn rejects_what_is_not_rfc3339_utc() {
        for bad in [
            "",
            "2024-01-01",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00+00:00",
            "2024-01-01 00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-04-31T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00.1ZZ",
            "+024-01-01T00:00:00Z",
            "2024-01-01T00:00:00Zé",
            "２０２４-01-01T00:00:00Z",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad:?}");
        }
        assert!(parse_rfc3339("2024-02-29T23:59:60Z").is_ok(), "leap second");
    }
}
