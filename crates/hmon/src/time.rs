//! HMON timestamps: `YYYYMMDDTHHMMSS.mmmZ`, UTC, millisecond precision.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A UTC instant as HMON writes it, e.g. `20230111T144700.132Z`: milliseconds since the Unix epoch, in the
/// years 0000 to 9999 that the format can write.
///
/// Parsing accepts the trailing `Z` or its absence (the spec's prose example `20231231T235959.999` has
/// none) and a fraction of any length or none, truncated to the wire's millisecond precision; sending
/// always writes milliseconds and the `Z`. The calendar is proleptic Gregorian, as chrono's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    millis: i64,
}

/// A timestamp that is not of the form `YYYYMMDDTHHMMSS[.fff][Z]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid HMON timestamp {text:?} (want YYYYMMDDTHHMMSS.mmmZ): {reason}")]
pub struct TimestampError {
    /// The text that was given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

const MS_PER_DAY: i64 = 86_400_000;
/// 0000-01-01 and 10000-01-01, in days from the epoch: the years the format can write.
const FIRST_DAY: i64 = -719_528;
const END_DAY: i64 = 2_932_897;

/// Days from 1970-01-01 to `y-m-d` (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * i64::from((m + 9) % 12) + 2) / 5 + i64::from(d) - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

/// The date `days` from 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

impl Timestamp {
    /// The current time, truncated to milliseconds (what the wire can carry).
    pub fn now() -> Self {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timestamp {
            millis: i64::try_from(since.as_millis()).unwrap_or(i64::MAX).min(END_DAY * MS_PER_DAY - 1),
        }
    }

    /// The instant `ms` milliseconds after the Unix epoch, if the format can write it (years 0000 to 9999).
    pub fn from_millis(ms: i64) -> Option<Self> {
        (FIRST_DAY * MS_PER_DAY..END_DAY * MS_PER_DAY).contains(&ms).then_some(Timestamp { millis: ms })
    }

    /// Milliseconds since the Unix epoch.
    pub fn unix_millis(self) -> i64 {
        self.millis
    }

    /// The instant for people (and RFC 3339): `2023-01-11T14:47:00.132Z`.
    pub fn to_rfc3339(self) -> String {
        let (y, m, d, h, mi, s, ms) = self.fields();
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
    }

    /// Year, month, day, hour, minute, second, millisecond.
    fn fields(self) -> (i64, u32, u32, i64, i64, i64, i64) {
        let (days, ms) = (self.millis.div_euclid(MS_PER_DAY), self.millis.rem_euclid(MS_PER_DAY));
        let (y, m, d) = civil_from_days(days);
        let secs = ms / 1000;
        (y, m, d, secs / 3600, secs / 60 % 60, secs % 60, ms % 1000)
    }
}

impl FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(text: &str) -> Result<Self, TimestampError> {
        let bad = |reason| TimestampError { text: text.to_owned(), reason };
        let body = text.strip_suffix('Z').unwrap_or(text);
        let b = body.as_bytes();
        if b.len() < 15 || b[8] != b'T' {
            return Err(bad("not YYYYMMDDTHHMMSS"));
        }
        let digits = |range: std::ops::Range<usize>| -> Option<u32> {
            b[range].iter().try_fold(0u32, |n, &c| c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0')))
        };
        let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(s)) =
            (digits(0..4), digits(4..6), digits(6..8), digits(9..11), digits(11..13), digits(13..15))
        else {
            return Err(bad("not YYYYMMDDTHHMMSS"));
        };
        let ms = match &b[15..] {
            [] => 0,
            [b'.', fraction @ ..] if !fraction.is_empty() && fraction.iter().all(u8::is_ascii_digit) => {
                fraction.iter().chain(b"00").take(3).fold(0, |n, &c| n * 10 + i64::from(c - b'0'))
            }
            _ => return Err(bad("a fraction must be a dot and digits")),
        };
        let y = i64::from(y);
        if !(1..=12).contains(&mo) || d == 0 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59 {
            return Err(bad("no such date or time"));
        }
        let secs = i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s);
        Ok(Timestamp { millis: days_from_civil(y, mo, d) * MS_PER_DAY + secs * 1000 + ms })
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d, h, mi, s, ms) = self.fields();
        write!(f, "{y:04}{m:02}{d:02}T{h:02}{mi:02}{s:02}.{ms:03}Z")
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Borrowed from the input when it can be (a `Cow<str>` would always be copied).
        let text = crate::wire::Key::deserialize(d)?;
        text.as_str().parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timestamp_reads_borrowed_and_escaped_text_alike() {
        let plain: Timestamp = serde_json::from_str("\"20240301T101112.345Z\"").unwrap();
        // An escape makes serde_json hand over text it built, not a slice of the input.
        let escaped: Timestamp = serde_json::from_str("\"\\u00320240301T101112.345Z\"").unwrap();
        assert_eq!(plain, escaped);
        assert_eq!(plain.to_string(), "20240301T101112.345Z");
        assert!(serde_json::from_str::<Timestamp>("\"2024\"").is_err());
    }

    #[test]
    fn spec_timestamp_with_z() {
        let ts: Timestamp = "20230111T144700.132Z".parse().unwrap();
        // 2023-01-11T14:47:00.132Z, as `date -u -d ... +%s%3N` gives it.
        assert_eq!(ts.unix_millis(), 1_673_448_420_132);
        assert_eq!(ts.to_string(), "20230111T144700.132Z");
        assert_eq!(ts.to_rfc3339(), "2023-01-11T14:47:00.132Z");
    }

    #[test]
    fn the_calendar_round_trips_over_every_writable_year() {
        for ms in [0, -1, 951_782_400_000, -62_167_219_200_000, 253_402_300_799_999, 1_709_164_800_000] {
            let ts = Timestamp::from_millis(ms).unwrap();
            assert_eq!(ts.to_string().parse::<Timestamp>().unwrap(), ts, "{ms} = {ts}");
        }
        assert_eq!(Timestamp::from_millis(0).unwrap().to_string(), "19700101T000000.000Z");
        assert_eq!(
            "20000229T000000Z".parse::<Timestamp>().unwrap().unix_millis(),
            951_782_400_000,
            "leap day"
        );
        assert!("19000229T000000Z".parse::<Timestamp>().is_err(), "1900 was no leap year");
        assert_eq!(Timestamp::from_millis(253_402_300_800_000), None, "year 10000 does not fit the format");
        assert_eq!("00000101T000000.000Z".parse::<Timestamp>().unwrap().unix_millis(), -62_167_219_200_000);
    }

    #[test]
    fn spec_prose_timestamp_without_z() {
        let ts: Timestamp = "20231231T235959.999".parse().unwrap();
        assert_eq!(ts.to_string(), "20231231T235959.999Z");
    }

    #[test]
    fn finer_fractions_are_truncated_to_milliseconds() {
        let ts: Timestamp = "20230106T144700.1032Z".parse().unwrap();
        assert_eq!(ts.to_string(), "20230106T144700.103Z");
        assert_eq!(ts.to_string().parse::<Timestamp>().unwrap(), ts);
    }

    #[test]
    fn no_fraction_is_accepted() {
        let ts: Timestamp = "20231231T235959Z".parse().unwrap();
        assert_eq!(ts.to_string(), "20231231T235959.000Z");
    }

    #[test]
    fn garbage_is_a_clear_error() {
        for bad in ["", "Z", "2023-01-11T14:47:00Z", "20231331T000000.000Z", "20230111T144700.132ZZ"] {
            let err = bad.parse::<Timestamp>().unwrap_err();
            assert_eq!(err.text, bad);
        }
    }
}
