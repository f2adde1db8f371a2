//! HMON timestamps: `YYYYMMDDTHHMMSS.mmmZ`, UTC, millisecond precision.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The format this crate sends (`20230111T144700.132Z`).
pub const TIMESTAMP_FORMAT: &str = "%Y%m%dT%H%M%S%.3fZ";

/// A UTC instant as HMON writes it, e.g. `20230111T144700.132Z`.
///
/// Parsing accepts the trailing `Z` or its absence (the spec's prose example `20231231T235959.999` has
/// none) and a fraction of any length or none, truncated to the wire's millisecond precision; sending
/// always writes milliseconds and the `Z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub DateTime<Utc>);

/// A timestamp that is not of the form `YYYYMMDDTHHMMSS[.fff][Z]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid HMON timestamp {text:?} (want YYYYMMDDTHHMMSS.mmmZ): {reason}")]
pub struct TimestampError {
    /// The text that was given.
    pub text: String,
    /// What chrono said.
    pub reason: String,
}

impl Timestamp {
    /// The current time, truncated to milliseconds (what the wire can carry).
    pub fn now() -> Self {
        let now = Utc::now();
        Self::from_millis(now.timestamp_millis()).unwrap_or(Timestamp(now))
    }

    /// The instant `ms` milliseconds after the Unix epoch, if chrono can represent it.
    pub fn from_millis(ms: i64) -> Option<Self> {
        DateTime::from_timestamp_millis(ms).map(Timestamp)
    }
}

impl FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(text: &str) -> Result<Self, TimestampError> {
        let body = text.strip_suffix('Z').unwrap_or(text);
        NaiveDateTime::parse_from_str(body, "%Y%m%dT%H%M%S%.f")
            .map(|naive| {
                let utc = naive.and_utc();
                Timestamp::from_millis(utc.timestamp_millis()).unwrap_or(Timestamp(utc))
            })
            .map_err(|e| TimestampError { text: text.to_owned(), reason: e.to_string() })
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.format(TIMESTAMP_FORMAT))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, Timelike};

    #[test]
    fn spec_timestamp_with_z() {
        let ts: Timestamp = "20230111T144700.132Z".parse().unwrap();
        assert_eq!((ts.0.year(), ts.0.month(), ts.0.day()), (2023, 1, 11));
        assert_eq!((ts.0.hour(), ts.0.minute(), ts.0.second()), (14, 47, 0));
        assert_eq!(ts.0.timestamp_subsec_millis(), 132);
        assert_eq!(ts.to_string(), "20230111T144700.132Z");
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
